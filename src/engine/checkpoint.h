/*
 * The checkpoint (checkpoint.c; the format: ondisk.h): the state recovery
 * rebuilds from the log, written by a clean stop into free segments and
 * named by the superblocks' clean-stop record, so that the next start
 * reads it instead of walking every chunk header.  Checkpoints written
 * while the daemon runs, for a start after a crash, are designed (what
 * must hold, how each failure falls back) but not built: checkpoint.c.
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

#endif
