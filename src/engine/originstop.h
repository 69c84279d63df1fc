/*
 * An origin written while no daemon served its cache (originstop.c): what
 * a clean stop records of the origin, and the start's comparison.
 */
#ifndef TC_ENGINE_ORIGINSTOP_H
#define TC_ENGINE_ORIGINSTOP_H

#include <stdbool.h>
#include <stddef.h>

struct cache;
struct tc_dev;
struct tc_superblock;

/* An origin modified since the clean stop the superblock records (a
 * file's time, a block device's write count): -1 with the refusal,
 * naming the origin, the device and the evidence, in err -- unless adopt
 * (then a warning) --, else 0 (with a warning when it cannot be told).
 * Serve's start, and check --salvage. */
int cache_origin_changed(struct cache *c, struct tc_dev *origin, bool adopt, char *err,
                         size_t errlen);
/* Who compares, for the words of the refusal: serve's start, or check
 * --salvage before it writes the cache's dirty data to the origin. */
enum origin_sample_use { SAMPLE_AT_START, SAMPLE_AT_SALVAGE };
/* After a clean stop: up to n of the cache's clean blocks (spread over
 * the index, read in parallel, not counted as hits) compared with the
 * origin, sector by sector.  Any difference: -1 with the refusal (the
 * blocks, the first different byte on the origin and where the cache
 * keeps it, the ways on) in err -- unless adopt: then every clean block
 * is compared, and each one found different is dropped from the map (its
 * tombstone appended at cache_mark_tombstones()), with a warning.  0
 * otherwise; n 0: nothing compared.  The figures in c->st.origin_check_*.
 * Serve's start; and check --salvage (use SAMPLE_AT_SALVAGE, adopt false:
 * salvage changes nothing in the cache, and decides on the refusal
 * itself). */
int cache_origin_sample(struct cache *c, struct tc_dev *origin, unsigned n, bool adopt,
                        enum origin_sample_use use, char *err, size_t errlen);
/* What the clean stop records of the origin, into out's stop_origin_*
 * fields (the rest zero); after the daemon's last origin write. */
void cache_origin_at_stop(struct cache *c, struct tc_superblock *out);

/* The same of origin, as check --salvage records it in the set's stop
 * record once it wrote the set's dirty data there (io/originrec.h). */
struct originrec_stamp;
void origin_stamp(struct tc_dev *origin, struct originrec_stamp *out);
/* An origin written since check --salvage wrote the set's dirty data to
 * it (the set's stop record says so, with the origin's stamp then): -1
 * with the refusal in err -- unless adopt (then a warning) --, else 1
 * when this copy of the set was the one salvaged (its clean stop is the
 * one the salvage found; with a warning when whether the origin was
 * written cannot be told), 0 when it was not.  Serve's start and check
 * --salvage, which then judge the origin by the salvage, not by the
 * clean stop before it: the salvage's own writes are no stranger's. */
int cache_origin_salvage_changed(struct cache *c, struct tc_dev *origin, bool adopt, char *err,
                                 size_t errlen);
/* A start past that comparison, which can no longer fail: the set serves
 * its origin again, and its own writes there are no writes without it --
 * the set's stop record no longer says it was salvaged. */
void cache_origin_salvage_served(struct cache *c);

#endif
