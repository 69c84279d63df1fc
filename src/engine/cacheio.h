/*
 * Reading cached data, checked (cacheio.c).  Every path that reads a cache
 * device (client reads, the old sectors of a write being merged,
 * writeback, the cleaner) reads through here: from the segment's RAM image
 * while it is still being written, otherwise from the device, pinned
 * (cache.h: invariant 6), with every sector checked against the CRC its
 * chunk header holds.
 */
#ifndef TC_ENGINE_CACHEIO_H
#define TC_ENGINE_CACHEIO_H

#include <stdbool.h>
#include <stdint.h>

#include "io/dev.h"
#include "util/join.h"

struct cache;
struct tc_mask;

/* A checked read of n sectors at (seg, off) into buf.  cb gets
 * 0, -EBADMSG (checksum mismatch: [bad_from, bad_to) failed) or the I/O
 * error.  Sectors still in an open segment's RAM image are copied and cb
 * runs before cache_read_verified() returns; otherwise from a later
 * reactor pass (the rule: util/join.h). */
struct cread {
    struct cache *c;
    uint32_t seg;
    uint16_t off;
    uint32_t n;
    uint8_t *buf;
    void (*cb)(struct cread *cr, int err);
    void *priv;
    /* results and internals */
    struct tc_join join;            /* the data read, and the header read */
    uint32_t bad_from, bad_to;
    bool from_device;
    struct tc_dev_io dio, hdio;
    uint8_t *hdr;
    uint32_t *crcs;
};
void cache_read_verified(struct cache *c, struct cread *cr);
/* Read the sectors `want` of entry id, wherever its fragments keep them,
 * into dst (sector s at dst + s * 4096); cb gets 0 or the first error,
 * except that an I/O error outweighs -EBADMSG: -EBADMSG means every read
 * that failed completed and did not check (damage, not a device that may
 * read fine again).
 * cb runs before the call returns when no device read is needed (every
 * sector in a RAM image, or none located), as with cache_read_verified();
 * the same holds for the two forms below. */
void cache_gather(struct cache *c, uint32_t id, const struct tc_mask *want, uint8_t *dst,
                  void (*cb)(void *arg, int err), void *arg);
/* For code that waits on the reactor (salvage, a start's write-back):
 * cache_gather() of `want` into dst, waited for; on a failure, sector by
 * sector, keeping what reads back and checks.  *good gets the sectors
 * whose data is in dst.  Returns 0 when every sector of want read, 1 when
 * some did not (want minus *good), -EAGAIN when the sectors read one by
 * one failed together again (the data changed between the reads; *good
 * is empty then). */
int cache_gather_wait(struct cache *c, uint32_t id, const struct tc_mask *want, uint8_t *dst,
                      struct tc_mask *good);
/* As cache_gather, but a failure is retried through the index as it is
 * then (a failed device's data moves to its mirrors) and then from the
 * mirror copies, before it is reported. */
void cache_gather_robust(struct cache *c, uint64_t oblock, const struct tc_mask *want,
                         uint8_t *dst, void (*cb)(void *arg, int err), void *arg);
/* The same from the fragments' mirror copies (-ENODATA where none). */
void cache_gather_mirrors(struct cache *c, uint32_t id, const struct tc_mask *want,
                          uint8_t *dst, void (*cb)(void *arg, int err), void *arg);

#endif
