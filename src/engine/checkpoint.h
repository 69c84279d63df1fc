/*
 * The checkpoint (checkpoint.c; the format: ondisk.h): the state recovery
 * rebuilds from the log, written by a clean stop into free segments and
 * named by the superblocks' clean-stop record, so that the next start
 * reads it instead of walking every chunk header.  Running checkpoints,
 * written while the daemon serves and named in the superblocks' two
 * slots, let a start after a crash replay only the log after the newest
 * (checkpoint.c, recovery.c).
 */
#ifndef TC_ENGINE_CHECKPOINT_H
#define TC_ENGINE_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cache;
struct tc_superblock;

/* Where a written checkpoint is, for the clean-stop record. */
struct ckpt_place {
    uint64_t len;
    uint32_t crc;
    uint32_t nsegs;
    uint32_t segs[256];             /* TC_CKPT_MAX_SEGS */
    int err_dev;                    /* the device of the write or flush that
                                       failed first (-1: none failed) */
    bool short_of_free;             /* -ENOSPC: too few free segments in all
                                       (not the device's own ENOSPC, nor
                                       a placement the reserve refused) */
};

/* Whether a scan of the log at this clean stop would rebuild exactly the
 * cache's state (no write-through version above the stable mark, no lost
 * set being written, every device in service); if not, why (for the log). */
bool ckpt_wanted(struct cache *c, const char **why);
/* The stop, after its last log sync: the checkpoint written into free
 * segments and the devices flushed, then done(arg, 0) with *pl filled in,
 * or done(arg, -errno) (none was written whole: the stop records no
 * checkpoint).  Asynchronous, on the reactor. */
void ckpt_write(struct cache *c, struct ckpt_place *pl, void (*done)(void *arg, int err),
                void *arg);
/* The start: the state read from the checkpoint the record rec names.
 * 0 when restored (the map, the space and the log are as recovery would
 * rebuild them); -1 with why when it cannot be trusted or read, nothing
 * changed (the caller scans the log). */
int ckpt_restore(struct cache *c, const struct tc_superblock *rec, char *why, size_t whylen);
/* tiercache check, after its full scan: 1 if rec names a checkpoint that
 * matches what the scan rebuilt, 0 if it names none, -1 (with why) if it
 * cannot be read or differs. */
int ckpt_verify(struct cache *c, const struct tc_superblock *rec, char *why, size_t whylen);

/* Running checkpoints (checkpoint.c, "running checkpoints"): at start,
 * after recovery and before anything is appended: the segments the
 * superblocks' slots name held, the timer armed (or, off, the slots
 * emptied); -1 with err if they cannot be.  Stopped when the cache
 * stops (no new one is begun); idle when none is being written (the
 * stop waits for that). */
int ckpt_run_init(struct cache *c, char *err, size_t errlen);
void ckpt_run_stop(struct cache *c);
bool ckpt_run_idle(const struct cache *c);
/* What the runner waits for (for a stop's message), or NULL when idle. */
const char *ckpt_run_busy_with(const struct cache *c);
void ckpt_run_fini(struct cache *c);
struct tc_json;
void ckpt_run_status_json(const struct cache *c, struct tc_json *j);

/* A start after a crash (recovery.c): the newest running checkpoint whose
 * slot, checksums and records check (each one that does not is said), or
 * NULL with why; nothing in the cache changed. */
struct ckpt_loaded;
struct tc_ckpt;
struct ckpt_loaded *ckpt_run_load(struct cache *c, char *why, size_t whylen);
const struct tc_ckpt *ckpt_loaded_head(const struct ckpt_loaded *l, uint64_t *gen);
/* Whether it names segment s live, and then its group and chunk count. */
bool ckpt_loaded_seg(const struct ckpt_loaded *l, uint32_t s, uint64_t *seq, uint32_t *nchunks);
/* Whether segment s's chunk table (as a walk found it) begins with the
 * chunks the checkpoint records there. */
bool ckpt_loaded_chunks_match(const struct ckpt_loaded *l, struct cache *c, uint32_t s);
/* Its lost records (blocks). */
uint64_t ckpt_loaded_nlost(const struct ckpt_loaded *l);
/* Into the cache: the live segments (those walked keep the walk's
 * chunk tables; extra: live segments it does not know; dropped, or NULL:
 * segments it names live of groups reclaimed since, left out with every
 * fragment in them), the group ring, the free stacks, every block and the
 * lost set. */
void ckpt_loaded_apply(struct cache *c, struct ckpt_loaded *l, const uint8_t *walked,
                       const uint8_t *dropped, const uint32_t *extra, uint32_t nextra);
void ckpt_loaded_free(struct ckpt_loaded *l);

/* tiercache check (checkpoint.c, ckpt_run_verify()): the running
 * checkpoints the slots name, each one that cannot be used a problem
 * (said through problem(arg, msg)); the newest usable compared with the
 * full scan when no entry was appended after its cut. */
struct ckpt_run_verdict {
    unsigned slots;                 /* distinct checkpoints named */
    unsigned usable;                /* ... of them that check */
    uint64_t newest_gen, newest_cut;    /* the newest usable (0: none) */
    bool compared;                  /* ... compared with the scan (no entry after its cut) */
    bool verified;                  /* ... and the same */
};
void ckpt_run_verify(struct cache *c, struct ckpt_run_verdict *v,
                     void (*problem)(void *arg, const char *msg), void *arg);

#endif
