/*
 * Writeback (writeback.c): dirty data from the cache to the origin, in
 * background passes over the dirty bitmap, in drains (tiercache flush,
 * detach, a switch out of writeback mode), and for single blocks a write
 * or the cleaner needs on the origin first.  It owns struct writeback
 * (c->wb): the passes, the jobs in flight, the dirty throttle and the
 * table of blocks whose write-back failed.
 *
 * The origin changes only after the cache durably records the version it
 * gets (a cache flush before the origin writes); a block whose write (or
 * the flush after it) fails stays dirty -- nothing is ever dropped -- and
 * is written again later.  Every block in the failure table is dirty.
 */
#ifndef TC_ENGINE_WRITEBACK_H
#define TC_ENGINE_WRITEBACK_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct block_waiter;
struct cache;
struct tc_json;
struct tc_mask;

/* A client write held by the dirty throttle (writeback_throttle()). */
struct wb_throttle_waiter {
    struct wb_throttle_waiter *next;
    uint64_t bytes;             /* the dirty data it may add */
    uint64_t since;             /* monotonic ns, when it was held */
    void (*fn)(struct wb_throttle_waiter *w);
};
/* May a writeback-mode client write adding up to BYTES of dirty data go
 * now?  If not, W is queued and W->fn runs when it may. */
bool writeback_throttle(struct cache *c, uint64_t bytes, struct wb_throttle_waiter *w);
int writeback_init(struct cache *c);
/* The cache is open: background writeback may begin (nothing runs before,
 * not even the tick; writeback_kick() does nothing until then). */
void writeback_start(struct cache *c);
void writeback_fini(struct cache *c);
/* Writeback has given up on the dirty data for now, as a write that
 * needs its block written back does (WB_FAILURES_EIO): stopped, the
 * origin offline (away past --origin-timeout), or a dirty block refused
 * WB_FAILURES_EIO times in a row.  A failed job alone is not: its blocks
 * are tried again after their back-off, and may well succeed. */
bool writeback_given_up(struct cache *c);
/* The same for one block whose write-back just failed, the block still
 * dirty: stopped, the origin offline, or the block refused
 * WB_FAILURES_EIO times in a row (or not in the failure table at all, so
 * that no back-off paces a next attempt).  False: its next attempt comes
 * after its back-off (writeback_block() waits for it). */
bool writeback_block_given_up(struct cache *c, uint64_t oblock);
void writeback_kick(struct cache *c);
/* A client FLUSH flushed the origin and the cache, recording the stable
 * mark, for everything done before since_ns: the periodic commit's work
 * up to then is done (the next one is due COMMIT_NS after it). */
void writeback_committed(struct cache *c, uint64_t since_ns);
/* Drain: write dirty data back until nothing is dirty, or, with
 * dirty_now_only, until every block dirty now has been written back once
 * since (with its version now or a newer one: writes made meanwhile may
 * stay dirty, so clients writing all along cannot keep it from ending).
 * progress() is called now and then with the bytes left. */
void writeback_drain(struct cache *c, bool dirty_now_only,
                     void (*progress)(void *arg, uint64_t left, uint64_t done_bytes),
                     void (*done)(void *arg, int err), void *arg);
/* A flush of the dirty set at its start is running (writeback_drain()
 * with dirty_now_only): block oblock must be written back before it ends
 * too.  For blocks that hold data acknowledged before the flush began
 * yet were not in its set: a write-through version made dirty again by
 * a lost origin connection (originwin.c), sectors lost during the flush
 * and written again by a client (lostlog.c: their version before the
 * flush is gone, so the flush must write the newer one back).  Nothing
 * when no such flush runs. */
void writeback_flush_include(struct cache *c, uint64_t oblock);
/* No job in flight (background, drain or the cleaner's) and no commit
 * flush of the origin: nothing of writeback will append to the log. */
bool writeback_idle(struct cache *c);
/* Why a drain ended by a stop, or refused once one began, gave up: said
 * alike by writeback and by the volume's operations. */
#define WB_STOPPING_WHY "the daemon is stopping; what is still dirty stays in the cache and is " \
                        "written back after the next start"
/* Why the last drain gave up ("" if it did not). */
void writeback_drain_reason(struct cache *c, char *buf, size_t len);
unsigned writeback_jobs_in_flight(struct cache *c);
/* Append the clean records deferred for want of room (beyond their
 * budget of the cleaner's reserve), as far as the budget allows now;
 * called when the cleaner frees room. */
void writeback_owed_records(struct cache *c);
/* The sectors the clean records still deferred would make clean, as the
 * log does not: by block.  The index holds them clean already, so a
 * checkpoint (checkpoint.c, encode()) must record them dirty to say what
 * the log says -- a start from it would otherwise hold them clean with
 * nothing left owing their records -- and a stop must count them as
 * dirty data left in the cache.  One entry a block, by origin block:
 * (*oblocks)[i] and (*masks)[i] (malloc'ed, NULL if none), the sectors of
 * the block's newest version still cached, clean in the index.  A
 * deferred record that has become a tombstone (its block dropped) is not
 * among them: the checkpoint holds no block to record it in. */
size_t writeback_owed_clean(struct cache *c, uint64_t **oblocks, struct tc_mask **masks);
/* Their sectors, in all; *blocks: how many of their blocks the index
 * holds with no dirty sector (not among its dirty blocks). */
uint64_t writeback_owed_clean_sectors(struct cache *c, uint64_t *blocks);
void writeback_status_json(struct cache *c, struct tc_json *j);
/* Block writebacks the origin refused or that were cut by a lost
 * connection: the blocks stayed dirty and are written again later. */
uint64_t writeback_retries(struct cache *c);
/* Write back the dirty sectors of these blocks now (ascending block
 * numbers), flush the origin, then call done.  Blocks that fail stay dirty. */
void writeback_blocks(struct cache *c, const uint64_t *blocks, unsigned n,
                      void (*done)(void *arg, int err), void *arg);
/* The same at a stop, after writeback stopped (cache.c: the drain of a
 * device that failed at the stop's own writes), back-offs not waited
 * for. */
void writeback_stop_drain(struct cache *c, const uint64_t *blocks, unsigned n,
                          void (*done)(void *arg, int err), void *arg);
/* The same for one block; w->fn runs when it is done. */
void writeback_block(struct cache *c, uint64_t oblock, struct block_waiter *w);
/* Per-block failures: after this many failed write-backs in a row, a write
 * that needs its block written back first fails with EIO at once. */
#define WB_FAILURES_EIO 3
/* The origin refuses this dirty block for now: it is offline, or the
 * block's write-back failed WB_FAILURES_EIO times in a row -- the state
 * in which a write needing the block written back first fails with EIO. */
bool writeback_refused(struct cache *c, uint64_t oblock);
/* The error a client write that needs this block written back (or the
 * room in the log only its write-back would make) gets: 0 while the block
 * is not refused; -ENOSPC when the origin's last answer to it said it is
 * out of space (ENOSPC, EDQUOT, EFBIG: NBD_ENOSPC tells the client it is
 * not a media error); -EIO otherwise, and while the origin is offline. */
int writeback_refusal(struct cache *c, uint64_t oblock);
static inline int writeback_client_err(int err)
{
    return err == -ENOSPC || err == -EDQUOT || err == -EFBIG ? -ENOSPC : -EIO;
}
/* Failed write-backs in a row of this block (0: none pending). */
unsigned writeback_block_failures(struct cache *c, uint64_t oblock);
/* Is block oblock backing off after a failed write-back (its next attempt
 * not yet due)? */
bool writeback_block_backing_off(struct cache *c, uint64_t oblock);
/* The block turned clean: it leaves the failure table. */
void writeback_forget(struct cache *c, uint64_t oblock);
/* A client write failed because its block could not be written back. */
void writeback_note_write_failed(struct cache *c);
/* Failure messages share a rate limit: true if one may be logged now. */
bool writeback_log_allow(struct cache *c);

#endif
