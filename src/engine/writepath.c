/*
 * Writes, flushes, trims, write-zeroes and prefetch requests.
 *
 * A write is cut into pieces, one per cache block.  A piece of a block
 * that is not cached and that the cache will not take goes straight to
 * the origin, registered as an origin write so no fill can cache older
 * data meanwhile, and holding the block's lock so that a later write of
 * the block waits for it.  Every other piece takes the block's lock and
 * follows its mode:
 *
 *   writeback     merge with the block's cached sectors, append the new
 *                 version as dirty; done (a FLUSH or FUA makes it durable)
 *   writethrough  merge, append the new version (clean, marked WT), wait
 *                 until that chunk is written, then write the origin
 *   writearound   append a tombstone, wait until it is written, then write
 *                 the origin
 *
 * The pieces of one request that go to the origin are written there as
 * one origin write per contiguous range where their conditions allow
 * (see "origin writes" below for the rule).
 *
 * Waiting for the cache write before the origin write means that after a
 * crash the cache never holds an older version than the origin: either
 * the new version is in the log (and recovery treats it as dirty until a
 * FLUSH recorded that the origin has it), or the origin write never
 * started.  A version the log stored in two parts (log_append()'s split)
 * is waited for as a whole: the waiter's chunk is the second part's, and
 * the first part's chunk was sealed before it.
 *
 * A write whose origin request failed in doubt (-ETIMEDOUT: sent on an
 * origin connection that stopped answering and was fenced, see dev_nbd.c)
 * fails with EIO too, and the sectors the cache does not hold then read as
 * lost (EIO) until written again: the origin may still take the old write
 * later, so what it returns could change under a reader.  The record of
 * the loss is durable before the EIO is answered.
 *
 * A write-through write the origin fails: the request fails (EIO), and the
 * new version is dropped from the cache at once (a tombstone follows it in
 * the log), so later reads return whatever the origin holds for the range
 * -- the cache never serves data the origin lacks.  NBD leaves the
 * contents of a failed write's range unspecified; the only promise kept is
 * that every read after the failure agrees with the origin, also after a
 * crash or a power failure: the EIO is answered once the tombstone is
 * durable (written and flushed), since recovery would write a new version
 * it found without one back to the origin.  A read that ran concurrently
 * with the failing write may have seen either version, as with any
 * concurrent read and write.  When the write supersedes cached sectors, the wait includes a
 * flush of the cache devices (shared by all writes waiting at the time),
 * so that a power failure cannot keep the origin's new data and lose the
 * cache's record of it.
 *
 * A write to a cached block appends only the sectors it writes, as the
 * block's newest fragment: no read, no rewrite of the rest.  When the
 * block already has MAX_FRAGS fragments, the write merges them: the other
 * valid sectors are read from the cache (checked) and one fragment with
 * everything replaces the chain.  A small write never reads the origin.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/abandon.h"
#include "engine/blocklock.h"
#include "engine/budget.h"
#include "engine/cache.h"
#include "engine/cacheio.h"
#include "engine/cleaner.h"
#include "engine/failure.h"
#include "engine/lostlog.h"
#include "engine/map.h"
#include "engine/originwin.h"
#include "engine/readahead.h"
#include "engine/readpath.h"
#include "engine/stream.h"
#include "engine/writeback.h"
#include "engine/writepath.h"
#include "io/bufpool.h"
#include "policy/policy.h"
#include "util/assert.h"
#include "util/join.h"
#include "util/log.h"
#include "util/misc.h"

enum wmode { W_BACK, W_THROUGH, W_AROUND, W_DISCARD };

/* What a piece not yet ready waits for, outside a cache write (counted
 * when another piece of its request goes to the origin without it). */
enum pwait { PW_NONE, PW_LOCK, PW_WRITEBACK, PW_ROOM, PW_MERGE };

struct wreq;

struct wpiece {
    struct wreq *w;
    uint64_t oblock;
    uint16_t s0, s1;
    const uint8_t *src;             /* the piece's new data (NULL for discard) */
    uint8_t mode;
    bool locked, direct;
    struct block_waiter bw;
    struct log_waiter lw;
    struct tc_dev_io dio;
    struct owrite ow;
    uint8_t *old;                   /* merging: the other sectors, by sector */
    size_t old_size;
    bool merging;
    bool owt;                       /* the block had a write-through version (CE_WT) */
    struct tc_mask ovalid, odirty;  /* the block before this write */
    struct log_wt wt;               /* a write-through entry's origin write in flight */
    struct tc_join join;            /* parallel write-through: its two parts */
    struct log_waiter tw;           /* the tombstone after a failed origin write */
    int origin_err;                 /* ... and the error answered once it is durable */
    bool ready;                     /* may go to the origin: waits for issue_ready() */
    bool issued;                    /* its origin write is submitted */
    bool ended;                     /* piece_done() ran */
    uint8_t wait;                   /* enum pwait */
    unsigned run_n;                 /* heading a run: pieces its dio covers */
    uint64_t lock_wait_ns;          /* when it began to wait for the block's lock */
    uint64_t room_wait_ns;          /* ... for room in the log */
    uint64_t flush_wait_ns;         /* ... for its version's cache flush (write-through) */
};

struct wreq {
    struct ereq *e;
    struct cache *c;
    struct wpiece *p;
    unsigned np;
    size_t size;                    /* with the pieces, for tc_obj_put() */
    /* The pieces (each counted until piece_done()), then the origin
     * operation of a discard; err: the request's first error. */
    struct tc_join join;
    bool sync_at_end;               /* FUA: make everything durable first */
    bool origin_flush_at_end;
    struct log_waiter sync_w;
    struct tc_dev_io flush_dio;
    struct ow_mark flush_mark;      /* origin_window_mark() at flush_dio */
    /* Discards: one origin operation for the whole range, after the pieces. */
    struct owrite ow;
    struct tc_dev_io odio;
    void (*after_pieces)(struct wreq *w);   /* runs once the pieces' count reaches 0 */
    /* Origin writes: pieces that became ready are issued together (see
     * issue_ready()); holding while run_pieces() starts them. */
    bool holding;
    unsigned log_waits;             /* pieces waiting for their cache write first */
    bool held;                      /* hold_for_locks() held ready pieces (counted once) */
    struct tc_task issue_task;
    struct wb_throttle_waiter throttle;
};

static void piece_step(struct wpiece *p);
static void piece_waits(struct wpiece *p, enum pwait why);
static void reconsider_held(struct wpiece *p);
static uint64_t piece_origin_off(const struct wpiece *p);
static uint64_t piece_len(const struct wpiece *p);
static void piece_done(struct wpiece *p, int err);
static void join_part(struct wpiece *p, int err);
static void wb_cleared(struct block_waiter *bw);

static const uint8_t *zero_block(void)
{
    static uint8_t *z;
    if (z == NULL) {
        z = tc_alloc_aligned(TC_MAX_BLOCK_SIZE);
        memset(z, 0, TC_MAX_BLOCK_SIZE);
    }
    return z;
}

/*
 * The highest write-through stable mark that may be recorded once the
 * origin has been flushed: below every version whose origin write is in
 * flight, and below every version recovery made dirty that writeback has
 * not yet put on the origin.  The former are tracked by the log
 * (log_wt_track(): a FLUSH may only declare stable what is older than the
 * oldest of them); the latter are not, and the log records them as clean
 * write-through versions: only the stable mark
 * staying below them keeps the next recovery marking them dirty again.
 * A mark recorded past them, then a crash before their writeback, would
 * make them clean while the origin may still hold older data.
 */
uint64_t wt_stable_candidate(struct cache *c)
{
    uint64_t min = log_wt_oldest(&c->lg);
    if (c->map.wt_recovered && c->map.wt_recovered_min < min)
        min = c->map.wt_recovered_min;
    return min - 1;
}

/* ---- the end of a request ---- */

static void request_end(struct wreq *w)
{
    struct ereq *e = w->e;
    /* Read-ahead slots loaded while the write ran may hold the old data. */
    readahead_invalidate(e->vol->cache, e->off, e->len);
    e->err = w->join.err;
    tc_obj_put(w, w->size);         /* and its pieces (split()) */
    e->complete(e);
}

static void fua_clears_recorded(void *arg, int err)
{
    struct wreq *w = arg;
    if (err) {
        tc_error("FUA write of origin bytes %llu..%llu fails with EIO: it is durable, but the "
                 "record that sectors it wrote are no longer lost is not (%s)",
                 (unsigned long long)w->e->off,
                 (unsigned long long)(w->e->off + w->e->len - 1), strerror(-err));
        join_error(&w->join, -EIO);
    }
    request_end(w);
}

static void fua_held_clears_recorded(void *arg, int err)
{
    struct ereq *e = arg;
    if (err) {
        tc_error("FUA write of origin bytes %llu..%llu fails with EIO: it is durable, but the "
                 "record that sectors it wrote are no longer lost is not (%s)",
                 (unsigned long long)e->off, (unsigned long long)(e->off + e->len - 1),
                 strerror(-err));
        e->err = -EIO;
    }
    e->complete(e);
}

/* A FUA write whose sync ended while a device failure was under way
 * (end_synced()), and again once the rescues it waited for ended: drained
 * with the last device's data if no device is left in service
 * (cache_durable_after_failure()), held for the rescues pending, else
 * answered as any FUA write -- with EIO if a rescue lost
 * any of its sectors, and once the lost sectors it wrote again are not
 * lost in the durable records.  The rescued versions are durable before
 * the answer leaves: acknowledgements wait for them (abandon.c). */
static void fua_rescues_ended(struct ereq *e)
{
    struct cache *c = e->vol->cache;
    if (cache_durable_after_failure(c, e) || cache_rescue_hold(c, e, fua_rescues_ended))
        return;
    if (lost_overlaps(&c->map.lost, c->block_size, e->off, e->len)) {
        tc_error("FUA write of origin bytes %llu..%llu fails with EIO: a cache device failed "
                 "before it was durable, and the rescue of its data lost some of it",
                 (unsigned long long)e->off, (unsigned long long)(e->off + e->len - 1));
        e->err = -EIO;
        e->complete(e);
        return;
    }
    e->err = 0;
    abandon_clears_wait(c, fua_held_clears_recorded, e);
}

struct fua_defer {
    struct tc_task task;
    struct ereq *e;
};

static void fua_deferred(struct tc_task *task)
{
    struct fua_defer *x = container_of(task, struct fua_defer, task);
    struct ereq *e = x->e;
    free(x);
    fua_rescues_ended(e);
}

static void end_synced(struct log_waiter *lw, int err)
{
    struct wreq *w = container_of(lw, struct wreq, sync_w);
    join_error(&w->join, err);
    if (w->join.err == 0 && cache_none_in_service(w->c)) {
        /* A FUA write whose log sync the last device's failure ended: as
         * for a flush (flush_synced()), durable only once drained to the
         * origin and flushed there. */
        struct ereq *e = w->e;
        readahead_invalidate(e->vol->cache, e->off, e->len);
        tc_obj_put(w, w->size);     /* and its pieces (split()) */
        cache_durable_after_failure(e->vol->cache, e);
        return;
    }
    if (w->join.err == 0 && (w->e->flags & TC_REQ_FUA) &&
        (w->c->rescues_pending > 0 || w->c->ab.devfail_marks_pending > 0)) {
        /* A device failed while the write ran, and the dirty data only it
         * held -- this write's own, when its chunk was what failed there
         * and no survivor had room for it -- may wait for its rescue: the
         * sync that ended says nothing of that data.  As a FLUSH does
         * (flush_synced()), the write waits for the rescues to end; if the
         * last device fails meanwhile they turn into a drain, and the
         * write is durable only once that has put the data on the origin.
         * Decided on the reactor's next turn: this sync may end inside the
         * failure (log_device_failed()), before its rescues are counted.
         * Before, the write was answered here (its acknowledgement held
         * only for the failure's records, released with the
         * abandonment), and a kill before the drain ended lost it. */
        struct ereq *e = w->e;
        struct cache *c = w->c;
        readahead_invalidate(c, e->off, e->len);
        tc_obj_put(w, w->size);     /* and its pieces (split()) */
        e->err = 0;
        struct fua_defer *x = tc_xcalloc(1, sizeof *x);
        x->task.fn = fua_deferred;
        x->e = e;
        reactor_defer(c->reactor, &x->task);
        return;
    }
    if (w->join.err == 0 && (w->e->flags & TC_REQ_FUA)) {
        /* Lost sectors it wrote again are not lost in the durable records
         * only once a settle has run (abandon.c): until then a crash
         * makes them read EIO.  At once when nothing is unsettled. */
        abandon_clears_wait(w->c, fua_clears_recorded, w);
        return;
    }
    request_end(w);
}

static void end_origin_flushed(struct tc_dev_io *dio, int err)
{
    struct wreq *w = container_of(dio, struct wreq, flush_dio);
    if (err == 0 && origin_window_flushed(w->c, w->flush_mark))
        err = -EIO;     /* the operation may be lost with the old connection */
    join_error(&w->join, err);
    w->sync_w.fn = end_synced;
    log_sync(w->c, &w->sync_w);
}

/* One piece, the hold, or the origin operation ended with err. */
static void request_maybe_end(struct wreq *w, int err)
{
    if (!join_put(&w->join, err))
        return;
    if (w->after_pieces && w->join.err) {
        /* A piece failed (its tombstone found no room at a stop): the
         * origin range must not change without the tombstones before it,
         * or a cached copy of what it replaces could come back. */
        w->after_pieces = NULL;
        owrite_end(w->c->locks, &w->ow);
    }
    if (w->after_pieces) {
        void (*next)(struct wreq *) = w->after_pieces;
        w->after_pieces = NULL;
        next(w);
        return;
    }
    if (w->join.err == 0 && w->origin_flush_at_end && w->c->vol->origin->can_flush) {
        memset(&w->flush_dio, 0, sizeof w->flush_dio);
        w->flush_dio.op = TC_DEV_FLUSH;
        w->flush_dio.cb = end_origin_flushed;
        w->flush_mark = origin_window_mark(w->c);
        dev_submit(w->c->vol->origin, &w->flush_dio);
        return;
    }
    if (w->join.err == 0 && w->sync_at_end) {
        w->sync_w.fn = end_synced;
        log_sync(w->c, &w->sync_w);
        return;
    }
    request_end(w);
}

static void piece_done(struct wpiece *p, int err)
{
    struct wreq *w = p->w;
    struct cache *c = w->c;
    bool held_back = !p->issued;
    p->ended = true;
    p->wait = PW_NONE;
    if (held_back)
        reconsider_held(p);     /* ended without an origin write */
    log_wt_untrack(&p->w->c->lg, &p->wt);
    if (err == 0 && p->mode != W_DISCARD) {
        struct tc_mask m;
        mask_range(&m, p->s0, p->s1);
        if (p->merging && c->draining) {
            /* The old dirty sectors merged into the new version may be
             * drained ones, recorded lost until written back (lostlog.h):
             * they have left the draining device for this version, which
             * the log makes durable before a clear is (abandon.c). */
            mask_or(&m, &p->odirty);
        }
        lost_written(c, p->oblock, &m);
    }
    if (p->old) {
        bufpool_put(p->old, p->old_size);
        p->old = NULL;
    }
    if (p->locked) {
        block_gen_bump(c->locks, p->oblock);
        p->locked = false;
        block_unlock(c->locks, p->oblock);
    }
    request_maybe_end(w, err);
}

/* ---- origin writes ---- */

/*
 * One origin write per contiguous range, not one per piece (on a disk
 * every request costs a seek).  A piece is "ready" at the point where it
 * may go to the origin: at once for a piece that goes straight there or
 * whose new version supersedes nothing cached; after its cache write
 * (flushed, when it supersedes cached sectors) when it must wait for it;
 * after the block's dirty data was written back; and so on -- each
 * piece's own conditions are exactly what they were when every piece had
 * its own origin write.  Readiness only allows a piece to go: the rule
 * for when it goes, grouped with others, is
 *
 *  - while some piece of the request waits for its cache write (a new
 *    version or a tombstone appended, to be written and maybe flushed),
 *    the ready pieces wait too: that write completes on its own (it never
 *    needs a block lock or an origin request), sooner than an origin
 *    request, and the client waits for the slowest piece anyway;
 *  - otherwise the ready pieces go at once, as one origin write per
 *    maximal run of ready, not yet issued pieces adjacent both on the
 *    origin and in the client's buffer.  "At once" means when
 *    run_pieces() has started every piece (all that is ready without
 *    waiting goes out together), or else from a task deferred to the end
 *    of the reactor pass that made the piece ready (pieces made ready by
 *    the same completions go out together).
 *
 *  - while every piece not yet ready waits for a block lock that it gets
 *    next (first in the lock's queue) from a holder whose origin write is
 *    already submitted, the ready pieces wait too (see below);
 *  - otherwise a ready piece never waits for one that waits for anything
 *    else (a block lock further back, a writeback, room in the cache, a
 *    read to merge): that could wait on a lock the ready piece holds
 *    itself, or on an origin request, or on a chain of both.  So a request
 *    whose pieces take such different routes may still reach the origin
 *    as several writes.
 *
 * The lock wait is the common one: a filesystem writes 128 KiB at 4 KiB
 * alignment, several requests at a time, and consecutive ones share the
 * 64 KiB block at their boundary; the earlier one holds its piece's lock
 * until its origin write ends, so the later one's first piece waits.
 * Without the rule the rest of the later request would go at once and
 * its first piece alone after: two origin requests (two seeks) instead
 * of one.  Holding is safe and bounded:
 *
 *  - data: the held pieces' blocks are not the waiting piece's; on the
 *    origin writes of different blocks are independent, and each held
 *    piece keeps its own lock, write-through tracking and owrite
 *    registration until its write ends, as if it were in flight (a FLUSH
 *    meanwhile neither covers nor waits for them: their request has not
 *    been answered);
 *  - liveness: the holder's origin write is submitted, so it ends on its
 *    own (the origin answers, or the connection is fenced and the write
 *    fails in doubt); what its piece does after that -- a tombstone (from
 *    the reserve; room comes from the cleaner, which takes no block
 *    lock), a log sync -- never needs a block lock or a request's held
 *    pieces.  Then the lock passes to the waiting piece, next in its
 *    queue (no one overtakes a lock waiter); from there on the piece
 *    either becomes ready, or ends, or waits for something else, and each
 *    of those reconsiders the held pieces (piece_waits(), piece_done(),
 *    origin_write()).  A holder that is itself held does not count: a
 *    request waits behind one submitted origin write at most, never
 *    behind a chain of held requests, and no cycle of held requests can
 *    form (each waits on a submitted write, which waits on no one);
 *  - speed: the request is answered when its slowest piece's write ends,
 *    which comes after the holder's write either way; on a fast origin
 *    with many sequential writes in flight, a request behind a held one
 *    goes as before, so the writes do not queue up behind each other.
 *
 * Each piece keeps its own bookkeeping: its block lock, its write-through
 * tracking (log_wt_track()) and its origin-write registration (owrite, taken
 * when it becomes ready, as before) last until the run's write completes,
 * and the completion (error handling included) runs for each piece.
 */
static void piece_origin_finish(struct wpiece *p, int err)
{
    if (p->join.pending)
        join_part(p, err);
    else
        piece_done(p, err);
}

static void tombstone_append(struct wpiece *p);

static void failure_durable(struct log_waiter *lw, int err)
{
    struct wpiece *p = container_of(lw, struct wpiece, tw);
    (void)err;      /* a failed cache write fails its device, which is recorded */
    piece_origin_finish(p, p->origin_err);
}

static void tombstone_room(struct log_waiter *lw, int err)
{
    struct wpiece *p = container_of(lw, struct wpiece, tw);
    if (err) {
        /* A stop that could wait no longer for room: the client hears of
         * the failure it had anyway; the log does not hold the tombstone,
         * so a restart may serve the block's copy from before this write
         * (said, and the writes held for a device failure's records fail
         * too, devfail_incomplete()). */
        char why[96];
        snprintf(why, sizeof why, "no room in the log for the tombstone of origin block %llu",
                 (unsigned long long)p->oblock);
        devfail_incomplete(p->w->c, why);
        piece_origin_finish(p, p->origin_err);
        return;
    }
    tombstone_append(p);
}

/* After a failed write-through origin write: the tombstone of the block,
 * written and flushed; then the piece goes on. */
static void tombstone_append(struct wpiece *p)
{
    struct cache *c = p->w->c;
    if (c->vol->cache_failed) {
        /* Every device failed: the log is abandoned (abandon.c). */
        piece_origin_finish(p, p->origin_err);
        return;
    }
    struct append a = { .oblock = p->oblock, .type = TC_ENTRY_TOMBSTONE,
                        .use_reserve = true, .urgent = true, .mirror = true };
    p->tw.fn = failure_durable;
    p->tw.need_flush = true;
    p->tw.client = false;       /* waits on: the write failed already */
    /* A client record: within its budget of the reserve, or it waits. */
    if (!cleaner_client_record_fits(c) || log_append(c, &a, &p->tw).err == -ENOSPC) {
        p->tw.fn = tombstone_room;
        cleaner_wait_space(c, &p->tw);
    }
}

static void piece_origin_done(struct wpiece *p, int err)
{
    struct cache *c = p->w->c;
    if (p->direct)
        owrite_end(c->locks, &p->ow);
    if (err == 0 && !(p->dio.flags & TC_DEV_FUA) && !(p->w->e->flags & TC_REQ_FUA)) {
        /* Not durable until an origin flush in this connection epoch. */
        bool cached = p->mode == W_THROUGH && p->locked &&
                      index_lookup(&c->map.idx, p->oblock) != NIL;
        origin_window_acked(c, piece_origin_off(p), piece_len(p), cached);
    }
    bool tombstone = false;
    if (err && p->mode == W_THROUGH && p->locked) {
        /* The origin did not take it: the cache must not claim it did. */
        uint32_t id = index_lookup(&c->map.idx, p->oblock);
        if (id != NIL) {
            struct tc_mask v, d;
            ce_get_masks(&c->map.idx, id, &v, &d);
            if (mask_empty(&d)) {
                map_drop_block(c, p->oblock);
                c->st.invalidations++;
                tombstone = true;
            }
        }
    }
    if (err == -ETIMEDOUT) {
        /* In doubt (dev_nbd.c: its connection was fenced): the origin may
         * take this write later still, so what it returns for the range
         * may change under the reader.  Unless the cache still serves the
         * sectors, they read as lost until a client writes them again;
         * the client is told EIO. */
        struct tc_mask m;
        mask_range(&m, p->s0, p->s1);
        lost_in_doubt(c, p->oblock, &m);
        err = -EIO;
        if (!tombstone && !c->vol->cache_failed) {
            /* The loss is durable before the client hears of the failure:
             * a restart must not find the sectors readable again. */
            p->origin_err = err;
            p->tw.fn = failure_durable;
            log_sync(c, &p->tw);
            return;
        }
    }
    if (tombstone) {
        /* The block (still locked) leaves the log too before the client
         * hears of the failure (a loss recorded above is older). */
        p->origin_err = err;
        tombstone_append(p);
        return;
    }
    piece_origin_finish(p, err);
}

static void origin_run_done(struct tc_dev_io *dio, int err)
{
    struct wpiece *head = container_of(dio, struct wpiece, dio);
    unsigned n = head->run_n;
    /* Every piece of the run still counts in its request's join, so
     * the request (and this array) lives until the last one is done. */
    for (unsigned k = 0; k < n; k++)
        piece_origin_done(head + k, err);
}

static uint64_t piece_origin_off(const struct wpiece *p)
{
    return p->oblock * p->w->c->block_size + (uint64_t)p->s0 * TC_SECTOR;
}

static uint64_t piece_len(const struct wpiece *p)
{
    return (uint64_t)(p->s1 - p->s0) * TC_SECTOR;
}

static bool pieces_adjacent(const struct wpiece *a, const struct wpiece *b)
{
    return piece_origin_off(a) + piece_len(a) == piece_origin_off(b) &&
           a->src + piece_len(a) == b->src;
}

/* One origin write of w's is going out: count it, and, when another
 * piece of w still waits, what that piece waits for. */
static void count_origin_write(struct wreq *w)
{
    struct cache_stats *st = &w->c->st;
    st->wo_writes++;
    for (unsigned k = 0; k < w->np; k++) {
        const struct wpiece *q = &w->p[k];
        if (q->ready || q->ended)
            continue;
        switch (q->wait) {
        case PW_LOCK: st->wo_split_lock++; break;
        case PW_WRITEBACK: st->wo_split_writeback++; break;
        case PW_ROOM: st->wo_split_room++; break;
        case PW_MERGE: st->wo_split_merge++; break;
        default: continue;
        }
        return;
    }
}

/* The ready pieces wait for the pieces waiting for block locks (see
 * "origin writes" above): true while every piece of w not yet ready is
 * first in its lock's queue behind a holder whose origin write is
 * submitted, and some piece is ready to hold. */
static bool hold_for_locks(struct wreq *w)
{
    struct cache *c = w->c;
    bool behind = false, ready = false;
    for (unsigned k = 0; k < w->np; k++) {
        struct wpiece *q = &w->p[k];
        if (q->ready || q->ended) {
            ready |= q->ready && !q->issued;
            continue;
        }
        if (q->wait != PW_LOCK || !block_next_after_origin(c->locks, q->oblock, &q->bw))
            return false;
        behind = true;
    }
    if (!behind || !ready)
        return false;
    if (!w->held) {
        w->held = true;
        c->st.wo_held_lock++;
    }
    return true;
}

/* Submit one origin write for each maximal run of ready pieces. */
static void issue_ready(struct wreq *w)
{
    struct cache *c = w->c;
    if (w->log_waits > 0)
        return;     /* the last cache write to finish issues them */
    if (hold_for_locks(w))
        return;     /* the waiting piece's lock, or its next wait, issues them */
    for (unsigned i = 0; i < w->np;) {
        struct wpiece *head = &w->p[i];
        if (!head->ready || head->issued) {
            i++;
            continue;
        }
        unsigned j = i + 1;
        while (j < w->np && w->p[j].ready && !w->p[j].issued &&
               pieces_adjacent(&w->p[j - 1], &w->p[j]))
            j++;
        uint64_t len = 0;
        for (unsigned k = i; k < j; k++) {
            w->p[k].issued = true;
            len += piece_len(&w->p[k]);
            /* A later write of the block waits for the lock behind a
             * write under way (hold_for_locks()). */
            if (w->p[k].locked)
                block_holder_on_origin(c->locks, w->p[k].oblock);
        }
        head->run_n = j - i;
        count_origin_write(w);
        memset(&head->dio, 0, sizeof head->dio);
        head->dio.op = TC_DEV_WRITE;
        head->dio.off = piece_origin_off(head);
        head->dio.len = len;
        head->dio.buf = (void *)head->src;
        head->dio.cb = origin_run_done;
        if (w->e->flags & TC_REQ_FUA)
            head->dio.flags |= TC_DEV_FUA;
        i = j;
        dev_submit(c->vol->origin, &head->dio);
    }
}

static void issue_task(struct tc_task *t)
{
    issue_ready(container_of(t, struct wreq, issue_task));
}

/* The pieces held for p may have to go now (hold_for_locks()).  A ready
 * piece not yet issued keeps the request alive until the task runs. */
static void reconsider_held(struct wpiece *p)
{
    struct wreq *w = p->w;
    if (w->holding)
        return;     /* run_pieces() issues them */
    for (unsigned k = 0; k < w->np; k++) {
        if (w->p[k].ready && !w->p[k].issued) {
            w->issue_task.fn = issue_task;
            reactor_defer(w->c->reactor, &w->issue_task);
            return;
        }
    }
}

/* p waits for why (it is not ready, and no cache write of its is due). */
static void piece_waits(struct wpiece *p, enum pwait why)
{
    p->wait = (uint8_t)why;
    if (why == PW_ROOM) {
        struct cache_stats *st = &p->w->c->st;
        st->write_room_waits++;
        p->room_wait_ns = tc_now_ns();
        if (st->room_waiting_now++ == 0)
            st->room_stall_since = p->room_wait_ns;
    } else if (why == PW_MERGE)
        p->w->c->st.write_merge_reads++;
    if (why != PW_LOCK)
        reconsider_held(p);
}

/* The piece may go to the origin now. */
static void origin_write(struct wpiece *p)
{
    struct wreq *w = p->w;
    struct cache *c = w->c;
    if (p->mode == W_DISCARD) {
        piece_done(p, 0);   /* the origin operation runs once for the request */
        return;
    }
    if (cache_block_tombless(c, p->oblock)) {
        /* Its tombstone was given up at the stop: the log may keep an
         * older copy a restart serves, so the origin must not get newer
         * data (failure.c, tombstone_given_up()). */
        piece_done(p, -EIO);
        return;
    }
    if (p->direct)
        owrite_begin(c->locks, &p->ow, p->oblock, p->oblock + 1);
    p->ready = true;
    /* A ready piece holds its request (its join), so the task finds it alive. */
    if (!w->holding) {
        w->issue_task.fn = issue_task;
        reactor_defer(c->reactor, &w->issue_task);
    }
}

/* ---- appending the new version ---- */

/* The cache device failed to take the new version: it must not stay
 * indexed (the origin still gets the write).
 *
 * Dropped with its tombstone (failure.h: from the cleaner's reserve, or
 * the block rewritten once there is room; a client FLUSH after this write
 * syncs it with the log).  The sync that failed was a flush of another
 * device: the new version, written and flushed on a device still in
 * service, stays in the log, flagged write-through.  Without the
 * tombstone a later write around the cache (nothing in the log for a
 * block not cached) was undone by a crash: recovery found the version
 * above the last recorded stable mark, took it for dirty and wrote it
 * back over the newer, flushed data (crash/wt-append-fail-tombstone).
 * The block's lock is held here, so a rewrite for want of room comes
 * before any later version of the block. */
static void cache_append_failed(struct wpiece *p)
{
    tc_warn("cache: write of block %llu to the cache failed; writing the origin only",
            (unsigned long long)p->oblock);
    struct cache *c = p->w->c;
    uint32_t id = index_lookup(&c->map.idx, p->oblock);
    if (id != NIL) {
        struct tc_mask v, d;
        ce_get_masks(&c->map.idx, id, &v, &d);
        if (mask_empty(&d)) {
            map_drop_block(c, p->oblock);
            if (!c->vol->cache_failed)
                cache_tombstone(c, p->oblock);
        }
    }
}

/* A write-through write whose new version supersedes nothing cached runs
 * its cache append and its origin write at the same time (no order is
 * needed: until the version is in the cache, reads of those sectors go to
 * the origin); the piece ends when both have. */
static void join_part(struct wpiece *p, int err)
{
    if (join_put(&p->join, err))
        piece_done(p, p->join.err);
}

static void parallel_cached(struct log_waiter *lw, int err)
{
    struct wpiece *p = container_of(lw, struct wpiece, lw);
    if (err)
        cache_append_failed(p);
    join_part(p, 0);
}

/* A piece under way when the last device failed, about to go to the origin
 * alone: refused while the state file lacks the abandonment and the piece
 * overlaps lost sectors, as lost_passthrough() refuses (abandon.c). */
static bool piece_unfiled_refuses(struct wpiece *p)
{
    struct cache *c = p->w->c;
    enum tc_op op = p->w->e->op;
    return c->vol->cache_failed &&
           abandon_unfiled_refuses(c, op == TC_OP_TRIM ? "trim" :
                                      op == TC_OP_WRITE_ZEROES ? "write-zeroes" : "write",
                                   p->oblock * c->block_size + (uint64_t)p->s0 * TC_SECTOR,
                                   (uint64_t)(p->s1 - p->s0) * TC_SECTOR);
}

static void appended_written(struct log_waiter *lw, int err)
{
    struct wpiece *p = container_of(lw, struct wpiece, lw);
    p->w->log_waits--;
    if (p->flush_wait_ns) {
        p->w->c->st.wt_flush_wait_ns += tc_now_ns() - p->flush_wait_ns;
        p->flush_wait_ns = 0;
    }
    if (err) {
        cache_append_failed(p);     /* the origin still gets it ... */
        if (p->w->c->abandon_unrecorded || piece_unfiled_refuses(p)) {
            /* ... unless the cache was abandoned and no record of it is
             * durable yet, or the state file lacks it and the piece
             * overlaps lost sectors: the stale log could undo the write at
             * the next start (abandon.c; lost_passthrough() refuses
             * likewise). */
            piece_done(p, -EIO);
            return;
        }
    }
    origin_write(p);
}

static void space_ready(struct log_waiter *lw, int err)
{
    struct wpiece *p = container_of(lw, struct wpiece, lw);
    p->wait = PW_NONE;
    struct cache_stats *st = &p->w->c->st;
    uint64_t now = tc_now_ns();
    st->write_room_wait_ns += now - p->room_wait_ns;
    if (--st->room_waiting_now == 0)
        st->room_stall_ns += now - st->room_stall_since;
    if (err) {
        /* A stop that could wait no longer for room (cache_stopping()),
         * or room the origin holds (cleaner.c, hold_by_origin()): nothing
         * of the piece was appended or sent to the origin; the write
         * fails, and its sectors keep their last acknowledged data. */
        if (p->w->c->stopping)
            p->w->c->stop_room_failed_writes++;
        piece_done(p, err);
        return;
    }
    piece_step(p);
}

/* The old version's sectors are in p->old (or not needed): build and
 * append the new version. */
static void append_version(struct wpiece *p)
{
    struct wreq *w = p->w;
    struct cache *c = w->c;
    struct tc_mask wmask;
    mask_range(&wmask, p->s0, p->s1);

    if (p->mode == W_AROUND || p->mode == W_DISCARD) {
        if (mask_empty(&p->ovalid)) {
            if ((p->mode == W_AROUND && c->vol->cache_failed && c->abandon_unrecorded) ||
                piece_unfiled_refuses(p)) {
                /* Under way when the last device failed: refused as
                 * lost_passthrough() refuses writes until the abandonment
                 * is recorded, and those over lost sectors until the state
                 * file records it (the stale log could undo them). */
                piece_done(p, -EIO);
                return;
            }
            origin_write(p);
            return;
        }
        struct append a = { .oblock = p->oblock, .type = TC_ENTRY_TOMBSTONE,
                            .use_reserve = true, .mirror = true };
        p->lw.fn = appended_written;
        /* The tombstone must survive a power failure that the origin write
         * survives, or the stale cached copy would come back.  A trim's
         * too: its trimmed sectors may read anything, but it drops the
         * whole block, and a later write to the block's other sectors
         * finds it not cached and goes to the origin at once (writearound,
         * write-through without a flush, direct): with the tombstone lost
         * and that write kept, the block's older version was served after
         * the restart and the origin's newer data once it left the cache
         * (crash/trim-tombstone-powerloss).  The trim is answered after
         * its tombstones are durable, so every later write is ordered
         * after them. */
        p->lw.need_flush = true;
        w->log_waits++;
        /* A client record takes at most its budget of the reserve
         * (cleaner_client_record_fits()); beyond it, it waits for room
         * like client data.  The write waits with it: in writearound
         * mode the origin write goes only once the tombstone is durable,
         * so until then the block's cached copy is its current data. */
        int rc = c->vol->cache_failed || cleaner_client_record_fits(c)
                     ? log_append(c, &a, &p->lw).err : -ENOSPC;
        if (rc == -ENOSPC && c->vol->cache_failed) {
            /* No device left (failure.c): no room will ever come, and
             * the log is never trusted again (abandon.c), so the block
             * needs no tombstone.  It has no dirty data (piece_step()). */
            w->log_waits--;
            map_drop_block(c, p->oblock);
            if (c->abandon_unrecorded || piece_unfiled_refuses(p)) {
                piece_done(p, -EIO);    /* as appended_written() */
                return;
            }
            origin_write(p);
            return;
        }
        if (rc == -ENOSPC) {
            w->log_waits--;
            p->lw.fn = space_ready;
            p->lw.client = true;
            piece_waits(p, PW_ROOM);
            cleaner_wait_space(c, &p->lw);
            return;
        }
        map_drop_block(c, p->oblock);
        c->st.invalidations++;
        return;
    }

    /* The new fragment: the written sectors, or everything when merging. */
    struct tc_mask stored = wmask, dirty_new;
    mask_clear(&dirty_new);
    if (p->merging)
        mask_or(&stored, &p->ovalid);
    if (p->mode == W_BACK)
        dirty_new = wmask;
    if (p->merging)
        mask_or(&dirty_new, &p->odirty);
    unsigned n = mask_count(&stored);
    const uint8_t *data = p->src;
    uint8_t *merged = NULL;
    if (p->merging) {
        merged = bufpool_get((size_t)n * TC_SECTOR);
        unsigned k = 0;
        for (unsigned s = 0; !c->data_free && s < c->spb; s++) {
            if (!mask_test(&stored, s))
                continue;
            const uint8_t *from = (s >= p->s0 && s < p->s1)
                                      ? p->src + (size_t)(s - p->s0) * TC_SECTOR
                                      : p->old + (size_t)s * TC_SECTOR;
            memcpy(merged + (size_t)k++ * TC_SECTOR, from, TC_SECTOR);
        }
        data = merged;
    }
    /* A merge stores the block's other sectors again, as clean or dirty as
     * they were.  Clean ones of a write-through version may be missing from
     * the origin after a power failure until the stable mark passes that
     * version; only the write-through flag of an entry holding them makes
     * recovery write them back.  The merged version replaces every older
     * fragment, so once the old entry's group is reclaimed the new entry
     * is all the log has: it must carry the flag too (with its own, newer
     * sequence: conservative, as the mark must then pass the merge). */
    struct tc_mask kept = p->ovalid;
    mask_andnot(&kept, &wmask);
    bool wt = p->mode == W_THROUGH || (p->merging && p->owt && !mask_empty(&kept));
    struct append a = {
        .oblock = p->oblock,
        .type = TC_ENTRY_DATA,
        .flags = wt ? TC_ENTRY_WT : 0,
        .valid = stored,
        .dirty = dirty_new,
        .data = data,
        .mirror = !mask_empty(&dirty_new) && c->vol->cfg.dirty_copies > 1,
        .leave_claim = true,
    };
    /* A split adds two fragments (a merge's first part replaces the
     * chain): only while the chain has room for both. */
    uint32_t id = index_lookup(&c->map.idx, p->oblock);
    a.may_split = p->merging || id == NIL || CE(&c->map.idx, id)->nfrags + 2 <= MAX_FRAGS;
    struct log_waiter *lw = NULL;
    bool parallel = false;
    if (p->mode == W_THROUGH) {
        p->lw.fn = appended_written;
        /* Superseding cached sectors: the new version must be durable in the
         * cache before the origin changes, or a power failure could leave the
         * cache holding an older version than the origin (reads would return
         * one, then the other).  Writes to sectors not cached need no flush. */
        struct tc_mask overlap = p->ovalid;
        mask_and(&overlap, &wmask);
        p->lw.need_flush = !mask_empty(&overlap);
        lw = &p->lw;
        if (!p->lw.need_flush) {
            parallel = true;
            p->lw.fn = parallel_cached;
            join_get_n(&p->join, 2);
        }
    }
    bool log_wait = lw != NULL && !parallel;
    if (log_wait)
        w->log_waits++;
    if (log_wait && p->lw.need_flush)
        p->flush_wait_ns = tc_now_ns();
    struct log_loc at = log_append(c, &a, lw);
    if (merged)
        bufpool_put(merged, (size_t)n * TC_SECTOR);
    if (at.err == -ENOSPC) {
        if (log_wait)
            w->log_waits--;
        p->join = (struct tc_join){ 0 };    /* neither part started */
        if (c->vol->cache_failed) {
            /* The last device failed while this write was under way: no
             * room will ever come.  It goes around the cache, as writes
             * arriving now do (lost_passthrough()): after the block's
             * dirty data, still draining, is on the origin, and after any
             * write-back of it in flight (piece_step(), lock_granted()). */
            p->mode = W_AROUND;
            p->bw.fn = wb_cleared;
            if (!block_wait_wb(c->locks, p->oblock, &p->bw)) {
                piece_waits(p, PW_WRITEBACK);
                return;
            }
            piece_step(p);
            return;
        }
        if (p->mode == W_THROUGH && mask_empty(&p->odirty)) {
            /* No room for the new version: invalidate and write through. */
            p->mode = W_AROUND;
            append_version(p);
            return;
        }
        p->lw.fn = space_ready;
        p->lw.client = true;
        piece_waits(p, PW_ROOM);
        cleaner_wait_space(c, &p->lw);
        return;
    }
    if (p->mode == W_THROUGH) {
        log_wt_track(&c->lg, &p->wt, at.seq);
        if (log_wait && p->lw.need_flush)
            c->st.wt_flush_waits++;
    }
    map_add_appended(c, p->oblock, id, &stored, &dirty_new, &at,
                     (wt ? CE_WT : 0) | CE_ADD_WRITTEN, p->merging);
    c->st.admitted_bytes += (uint64_t)(p->s1 - p->s0) * TC_SECTOR;
    if (p->mode == W_BACK) {
        writeback_kick(c);
        piece_done(p, 0);
    } else if (parallel) {
        origin_write(p);
    }
}

static void merge_read(void *arg, int err)
{
    struct wpiece *p = arg;
    struct cache *c = p->w->c;
    p->wait = PW_NONE;
    if (err) {
        /* The other sectors could not be read (a device that failed
         * meanwhile has had its part dealt with: look at the index as it
         * is now).  Dirty ones among them are acknowledged data that
         * exists nowhere else.  Unless proven damaged (read, and not
         * matching their checksums: -EBADMSG), they are most likely
         * readable a moment later, on a device still in service: this
         * write fails with EIO and the block stays as it was -- a cache
         * may fail a request, never lose acknowledged data.  (A write of
         * the whole block needs no merge, so always goes on.)  Proven
         * damaged, they are lost, and recorded so: reads of them fail
         * with EIO, never return the origin's older data; the new
         * version holds only what this write covers.  Clean ones come
         * from the origin again. */
        uint32_t id = index_lookup(&c->map.idx, p->oblock);
        mask_clear(&p->ovalid);
        mask_clear(&p->odirty);
        if (id != NIL)
            ce_get_masks(&c->map.idx, id, &p->ovalid, &p->odirty);
        struct tc_mask wmask, lost = p->odirty;
        mask_range(&wmask, p->s0, p->s1);
        mask_andnot(&lost, &wmask);
        if (!mask_empty(&lost) && err != -EBADMSG) {
            uint64_t off = p->oblock * c->block_size;
            c->st.merge_read_failures++;
            tc_error("cache: a write into origin bytes %llu..%llu fails with EIO: %u dirty "
                     "sectors of the block it would be merged with could not be read (%s); "
                     "they are kept",
                     (unsigned long long)off, (unsigned long long)(off + c->block_size - 1),
                     mask_count(&lost), strerror(-err));
            piece_done(p, -EIO);
            return;
        }
        if (!mask_empty(&lost)) {
            uint64_t off = p->oblock * c->block_size;
            tc_error("cache: dirty sectors of origin bytes %llu..%llu are unreadable and "
                     "lost; reads of its %u lost sectors fail with EIO until rewritten",
                     (unsigned long long)off, (unsigned long long)(off + c->block_size - 1),
                     mask_count(&lost));
            map_lose_dirty(c, p->oblock, &lost);
        }
        mask_clear(&p->ovalid);
        mask_clear(&p->odirty);
    }
    append_version(p);
}

static void wb_cleared(struct block_waiter *bw)
{
    struct wpiece *p = container_of(bw, struct wpiece, bw);
    p->wait = PW_NONE;
    /* Failures are counted per block by writeback (a failed attempt backs
     * the block off, so looking again never spins); -ECANCELED: shutting
     * down, no attempt will come. */
    int err = bw->err;
    bw->err = 0;
    if (err == -ECANCELED) {
        piece_done(p, -EIO);
        return;
    }
    piece_step(p);
}

/* Locked: look at the block now and go on. */
static void piece_step(struct wpiece *p)
{
    struct wreq *w = p->w;
    struct cache *c = w->c;
    uint32_t id = index_lookup(&c->map.idx, p->oblock);
    mask_clear(&p->ovalid);
    mask_clear(&p->odirty);
    p->merging = false;
    p->owt = false;
    if (id != NIL) {
        ce_get_masks(&c->map.idx, id, &p->ovalid, &p->odirty);
        p->owt = CE(&c->map.idx, id)->flags & CE_WT;
    }
    block_gen_bump(c->locks, p->oblock);

    if (p->mode == W_DISCARD) {
        /* Trim: dirty blocks keep their data (trim is advisory); clean
         * ones are dropped, so the trimmed origin range is what remains. */
        if (!mask_empty(&p->odirty))
            mask_clear(&p->ovalid);
        append_version(p);
        return;
    }
    if (p->mode != W_BACK && !mask_empty(&p->odirty)) {
        /* Dirty data (after a crash or a mode change) goes to the origin
         * first, so the origin write below cannot be overtaken by it.  If
         * the origin keeps refusing it, this write fails (the dirty data
         * stays, for writeback to retry): writing around it would let the
         * older dirty data overwrite this write later.  The client hears
         * the origin's reason: ENOSPC when it said it is out of space
         * (writeback_refusal()), EIO otherwise -- at once while the
         * block backs off; once its next attempt is due, this write makes
         * it (and waits for it), since nothing else may: below the dirty
         * target write-back passes wait for the clients to be idle, and a
         * client writing the block keeps them from it, so the block
         * refused for good although the origin takes data again. */
        unsigned failures = writeback_block_failures(c, p->oblock);
        if (failures >= WB_FAILURES_EIO && writeback_block_backing_off(c, p->oblock)) {
            uint64_t off = p->oblock * c->block_size;
            int err = writeback_refusal(c, p->oblock);
            writeback_note_write_failed(c);
            if (writeback_log_allow(c))
                tc_error("cache: dirty data of origin bytes %llu..%llu cannot be written back "
                         "first (%u failed attempts in a row); the write to it fails with %s",
                         (unsigned long long)off, (unsigned long long)(off + c->block_size - 1),
                         failures, err == -ENOSPC ? "ENOSPC" : "EIO");
            piece_done(p, err);
            return;
        }
        p->bw.fn = wb_cleared;
        piece_waits(p, PW_WRITEBACK);
        writeback_block(c, p->oblock, &p->bw);
        return;
    }
    if (id != NIL)
        c->st.write_hits++;
    else
        c->st.write_misses++;
    if (p->mode == W_BACK && mask_empty(&p->odirty) &&
        !budget_allow(&c->budget, (uint64_t)(p->s1 - p->s0) * TC_SECTOR)) {
        /* Over the write budget: this write goes through to the origin
         * (the block has no dirty data, so nothing is held back). */
        p->mode = W_AROUND;
        p->bw.fn = wb_cleared;
        if (!block_wait_wb(c->locks, p->oblock, &p->bw)) {
            piece_waits(p, PW_WRITEBACK);
            return;
        }
    }
    if (p->mode == W_AROUND || id == NIL || CE(&c->map.idx, id)->nfrags < MAX_FRAGS) {
        append_version(p);
        return;
    }
    /* The chain is full: merge.  Read the sectors this write leaves. */
    struct tc_mask wmask, need = p->ovalid;
    mask_range(&wmask, p->s0, p->s1);
    mask_andnot(&need, &wmask);
    p->merging = true;
    if (p->old == NULL) {
        p->old_size = (size_t)c->spb * TC_SECTOR;
        p->old = bufpool_get(p->old_size);
    }
    piece_waits(p, PW_MERGE);
    cache_gather_robust(c, p->oblock, &need, p->old, merge_read, p);
}

static void lock_granted(struct block_waiter *bw)
{
    struct wpiece *p = container_of(bw, struct wpiece, bw);
    if (p->lock_wait_ns) {
        p->w->c->st.write_lock_wait_ns += tc_now_ns() - p->lock_wait_ns;
        p->lock_wait_ns = 0;
    }
    p->locked = true;
    p->wait = PW_NONE;
    /* A write going to the origin waits for writeback of the block. */
    if (p->mode != W_BACK) {
        p->bw.fn = wb_cleared;
        if (!block_wait_wb(p->w->c->locks, p->oblock, &p->bw)) {
            piece_waits(p, PW_WRITEBACK);
            return;
        }
    }
    piece_step(p);
}

static void piece_start(struct wpiece *p)
{
    struct wreq *w = p->w;
    struct cache *c = w->c;
    bool cached = index_lookup(&c->map.idx, p->oblock) != NIL;
    if (!cached && p->mode != W_BACK) {
        bool admit = false;
        if (p->mode == W_THROUGH && !w->e->vol->read_only) {
            bool free_space = space_has_free(&c->sp);
            admit = policy_admit_write(c->policy, p->oblock, free_space) &&
                    budget_allow(&c->budget, (uint64_t)(p->s1 - p->s0) * TC_SECTOR);
        }
        if (!admit && !block_is_locked(c->locks, p->oblock) &&
            block_wait_wb_free(c->locks, p->oblock)) {
            /* Straight to the origin, with the block's lock held until the
             * origin write ends: a later write of the block that the cache
             * takes waits for it, so its version cannot reach the origin
             * (written through, or written back) before this older one,
             * which would then land over it while the cache kept the
             * newer: reads would change once the block left the cache. */
            bool granted = block_lock(c->locks, p->oblock, &p->bw);
            TC_ASSERT_ALWAYS(granted);
            p->locked = true;
            c->st.write_misses++;
            p->direct = true;
            if (p->mode == W_THROUGH)
                p->mode = W_AROUND;
            origin_write(p);
            return;
        }
    }
    p->bw.fn = lock_granted;
    if (block_lock(c->locks, p->oblock, &p->bw)) {
        lock_granted(&p->bw);
        return;
    }
    c->st.write_lock_waits++;
    p->lock_wait_ns = tc_now_ns();
    piece_waits(p, PW_LOCK);
}

static enum wmode mode_for(struct cache *c, const struct ereq *e)
{
    switch (e->vol->mode) {
    case TC_MODE_WRITEBACK: return W_BACK;
    case TC_MODE_WRITETHROUGH: return W_THROUGH;
    default: return W_AROUND;
    }
}

static struct wreq *split(struct ereq *e, const uint8_t *data, enum wmode mode)
{
    struct cache *c = e->vol->cache;
    uint64_t first = e->off / c->block_size, last = (e->off + e->len - 1) / c->block_size;
    /* One allocation for the request and its pieces, which live exactly
     * as long (request_end() frees both). */
    size_t head = tc_round_up(sizeof(struct wreq), _Alignof(struct wpiece));
    size_t size = head + (last - first + 1) * sizeof(struct wpiece);
    struct wreq *w = tc_obj_get(size);
    w->size = size;
    w->e = e;
    w->c = c;
    w->p = (struct wpiece *)((char *)w + head);
    uint64_t off = e->off, end = e->off + e->len;
    unsigned i = 0;
    while (off < end) {
        struct wpiece *p = &w->p[i++];
        p->w = w;
        p->oblock = off / c->block_size;
        uint64_t bstart = p->oblock * c->block_size;
        uint64_t pend = TC_MIN(end, bstart + c->block_size);
        p->s0 = (uint16_t)((off - bstart) / TC_SECTOR);
        p->s1 = (uint16_t)((pend - bstart) / TC_SECTOR);
        p->src = data ? data + (off - e->off) : NULL;
        p->mode = (uint8_t)mode;
        off = pend;
    }
    w->np = i;
    return w;
}

/* While the origin holds the log's room (cleaner.c, hold_by_origin()),
 * a write-back write of several pieces that the room left would not take
 * fails as a whole before any piece starts: piece by piece, the first
 * would be stored and the rest fail, leaving a write the client was told
 * failed half stored.  (A single piece is all or nothing anyway: it is
 * appended whole, or fails without being appended.)  The room is an
 * estimate (cleaner_room_refused()), and a write already under way when
 * such writes begin to fail is not covered: either may still end with
 * some of its pieces stored and the others failed. */
static int room_refused(struct wreq *w)
{
    if (w->np < 2)
        return 0;
    uint64_t sectors = 0;
    unsigned appends = 0;
    for (unsigned i = 0; i < w->np; i++)
        if (w->p[i].mode == W_BACK) {
            sectors += (uint64_t)(w->p[i].s1 - w->p[i].s0);
            appends++;
        }
    return appends ? cleaner_room_refused(w->c, sectors, appends) : 0;
}

static void run_pieces(struct wreq *w)
{
    int refused = room_refused(w);
    if (refused) {
        join_get_n(&w->join, 1);
        request_maybe_end(w, refused);
        return;
    }
    join_get_n(&w->join, w->np + 1);    /* every piece, and the hold while starting them */
    /* piece_start() looks each block up: their cache misses together. */
    if (w->np)
        index_prefetch(&w->c->map.idx, w->p[0].oblock, w->np);
    w->holding = true;
    for (unsigned i = 0; i < w->np; i++)
        piece_start(&w->p[i]);
    w->holding = false;
    issue_ready(w);
    request_maybe_end(w, 0);
}

static void throttle_done(struct wb_throttle_waiter *t)
{
    run_pieces(container_of(t, struct wreq, throttle));
}

void cache_write(struct ereq *e)
{
    readahead_invalidate(e->vol->cache, e->off, e->len);
    struct cache *c = e->vol->cache;
    enum wmode mode = mode_for(c, e);
    bool seq = streams_sequential(c->streams, e->off, e->len, true, NULL);
    c->last_client_io_ns = tc_now_ns();
    struct wreq *w = split(e, e->buf, mode);
    if (seq && mode == W_BACK) {
        /* A long sequential write bypasses the cache where it can: blocks
         * not cached go to the origin; cached ones are updated in place. */
        c->st.bypassed_sequential += e->len;
        for (unsigned i = 0; i < w->np; i++)
            if (index_lookup(&c->map.idx, w->p[i].oblock) == NIL)
                w->p[i].mode = W_AROUND;
    }
    if (e->flags & TC_REQ_FUA)
        w->sync_at_end = true;
    /* New dirty data waits while writeback is far behind (the dirty
     * throttle, writeback.c); nothing is locked yet. */
    if (mode == W_BACK && !seq) {
        w->throttle.fn = throttle_done;
        if (!writeback_throttle(c, e->len, &w->throttle))
            return;
    }
    run_pieces(w);
}

/* ---- flush ---- */

struct flush_req {
    struct ereq *e;
    struct cache *c;
    struct stable_flush sf;         /* the origin flush */
    uint64_t start_ns;              /* when it was submitted */
    bool stable;                    /* ... it succeeded and set the stable mark */
    struct tc_dev_io dio;
    struct log_waiter lw;
};

static void flush_clears_recorded(void *arg, int err)
{
    struct flush_req *f = arg;
    struct ereq *e = f->e;
    if (err) {
        tc_error("flush fails with EIO: the writes it covers are durable, but the record that "
                 "lost sectors among them are no longer lost is not (%s)", strerror(-err));
        e->err = -EIO;
    }
    free(f);
    e->complete(e);
}

static void flush_synced(struct log_waiter *lw, int err)
{
    struct flush_req *f = container_of(lw, struct flush_req, lw);
    struct ereq *e = f->e;
    struct cache *c = f->c;
    if (e->err == 0 && cache_none_in_service(c)) {
        /* The last device failed while the sync ran -- the sync may even
         * have ended well, with no device left to write: the writes this
         * flush covers were in a log no start will trust again, and are
         * now drained to the origin or recorded lost (failure.c).  The
         * flush is answered after the drain and an origin flush, with EIO
         * if anything was lost -- never on the strength of that log. */
        free(f);
        cache_durable_after_failure(c, e);
        return;
    }
    err_keep_first(&e->err, err);
    if (e->err == 0 && cache_rescue_hold(c, e, cache_flush)) {
        /* A device failed while the sync ran, and its only-copy dirty
         * data is being rescued: the flush is done again once that ends,
         * and reports what the rescues lost with the rest (failure.c). */
        free(f);
        return;
    }
    if (e->err == 0)
        e->err = lost_flush_result(f->c);
    if (e->err == 0)
        f->c->last_flush_wall_ns = tc_wall_ns();
    /* The origin flush, the stable mark and the log sync: what the
     * periodic commit does (writeback.c), for everything done before. */
    if (e->err == 0 && f->stable)
        writeback_committed(f->c, f->start_ns);
    if (e->err == 0) {
        /* Lost sectors written again before this FLUSH are durable now,
         * but the durable records (LOST records, the state file of an
         * abandonment before this start) still call them lost until a
         * settle has run (abandon.c): answered once they do not, or a
         * crash right after the answer makes the data it covers read EIO.
         * At once when nothing is unsettled. */
        abandon_clears_wait(c, flush_clears_recorded, f);
        return;
    }
    free(f);
    e->complete(e);
}

static void flush_origin_done(struct tc_dev_io *dio, int err)
{
    struct flush_req *f = container_of(dio, struct flush_req, dio);
    /* Writes it was to cover may be lost (-EIO with err 0): no new
     * stable mark, and the EIO follows (flush_synced()). */
    int r = stable_flush_end(f->c, &f->sf, err);
    if (err)
        f->e->err = err;
    f->stable = r == 0;
    f->lw.fn = flush_synced;
    log_sync(f->c, &f->lw);
}

void cache_flush(struct ereq *e)
{
    struct cache *c = e->vol->cache;
    /* Dirty data on a failed device, draining: its only durable record
     * is a log the next start distrusts, so the flush waits until it is
     * on the origin (failure.c). */
    if (cache_drain_hold(c, e, cache_flush) || cache_rescue_hold(c, e, cache_flush))
        return;
    struct flush_req *f = tc_xcalloc(1, sizeof *f);
    f->e = e;
    f->c = c;
    /* The origin holds every completed write-through and write-around
     * write: flush it too.  In writeback mode the cache log is enough for
     * the writes the cache took (writeback flushes the origin itself),
     * but not for those that went around it -- a long sequential write,
     * a write over the write budget, write-zeroes: while the origin
     * window holds any, the origin is flushed as well.  Nor for the
     * write-through versions the stable mark has not passed (written
     * before a switch to writeback, or copied by the cleaner since): the
     * cleaner drops a clean version it finds unread, so the log does not
     * keep them; the origin flush makes them durable where they are. */
    bool wt_unstable = c->lg.wt_newest_seq > c->lg.wt_stable_seq;
    if ((e->vol->mode != TC_MODE_WRITEBACK || origin_window_uncached(c) || wt_unstable) &&
        e->vol->origin->can_flush) {
        stable_flush_begin(c, &f->sf);
        f->start_ns = tc_now_ns();
        f->dio.op = TC_DEV_FLUSH;
        f->dio.cb = flush_origin_done;
        dev_submit(e->vol->origin, &f->dio);
        return;
    }
    f->lw.fn = flush_synced;
    log_sync(c, &f->lw);
}

/* ---- trim and write-zeroes ---- */

static void discard_lost_durable(struct log_waiter *lw, int err)
{
    (void)err;      /* a failed cache write fails its device, which is recorded */
    request_maybe_end(container_of(lw, struct wreq, sync_w), 0);
}

static void discard_origin_done(struct tc_dev_io *dio, int err)
{
    struct wreq *w = container_of(dio, struct wreq, odio);
    owrite_end(w->c->locks, &w->ow);
    if (err == 0 && w->e->op == TC_OP_WRITE_ZEROES)
        lost_written_range(w->c, w->e->off, w->e->len);
    if (err == 0 && w->e->op == TC_OP_WRITE_ZEROES)
        origin_window_acked(w->c, w->e->off, w->e->len, false);
    else if (err == 0)
        /* A fill of the trimmed range reads what the trim left, which a
         * crash of the origin may take back until a flush (readpath.c;
         * a FUA trim's comes after this). */
        origin_window_trimmed(w->c, w->e->off, w->e->len);
    if (err == -ETIMEDOUT) {
        /* In doubt, as in piece_origin_done(); the cached blocks of the
         * range were dropped before.  Durable before the answer. */
        lost_in_doubt_range(w->c, w->e->off, w->e->len);
        if (!w->c->vol->cache_failed) {
            join_error(&w->join, -EIO);
            w->sync_w.fn = discard_lost_durable;
            log_sync(w->c, &w->sync_w);
            return;
        }
        err = -EIO;
    }
    request_maybe_end(w, err);
}

/* The cached blocks are dealt with: now the origin range. */
static void discard_origin(struct wreq *w)
{
    struct ereq *e = w->e;
    struct cache *c = w->c;
    /* After the pieces (their count is 0): this operation ends the request. */
    TC_ASSERT(w->join.pending == 0);
    join_get(&w->join);
    w->odio.op = e->op == TC_OP_TRIM ? TC_DEV_TRIM : TC_DEV_ZERO;
    w->odio.off = e->off;
    w->odio.len = e->len;
    if (e->flags & TC_REQ_NO_HOLE)
        w->odio.flags |= TC_DEV_NO_HOLE;
    if (e->flags & TC_REQ_FAST_ZERO)
        w->odio.flags |= TC_DEV_FAST_ZERO;
    w->odio.cb = discard_origin_done;
    dev_submit(c->vol->origin, &w->odio);
}

static void discard_origin_after_sync(struct log_waiter *lw, int err)
{
    struct wreq *w = container_of(lw, struct wreq, sync_w);
    if (err) {
        /* The zeroes are not durable in the cache: the origin stays as it
         * is, and the request fails. */
        owrite_end(w->c->locks, &w->ow);
        join_get(&w->join);
        request_maybe_end(w, err);
        return;
    }
    discard_origin(w);
}

/* Writeback write-zeroes: the pieces' dirty zeroes made durable, then the
 * origin range (see cache_discard()). */
static void sync_then_discard_origin(struct wreq *w)
{
    w->sync_w.fn = discard_origin_after_sync;
    log_sync(w->c, &w->sync_w);
}

/*
 * Write-zeroes: cached blocks are written with zeroes through the mode's
 * write path (in writeback they become dirty zeroes, made durable in the
 * cache before the origin range is zeroed); in the other modes they are
 * invalidated first.  Trim: clean
 * cached blocks are dropped, dirty ones keep their data.  In both cases
 * the tombstones are written before the origin range changes, then the
 * whole range goes to the origin as one operation.
 */
/* Whether any block of [off, off + len) is cached: a look-up per block of
 * the range, or a walk of the index when that has fewer entries (a fast
 * zero of a whole large volume). */
static bool range_cached(struct cache *c, uint64_t off, uint64_t len)
{
    const struct index *ix = &c->map.idx;
    uint64_t first = off / c->block_size, end = (off + len + c->block_size - 1) / c->block_size;
    if (end - first > ix->used) {
        for (uint32_t id = 0; id < ix->used; id++) {
            uint64_t ob = ce_oblock(CE(ix, id));
            if (!ce_is_free(CE(ix, id)) && ob >= first && ob < end)
                return true;
        }
        return false;
    }
    for (uint64_t b = first; b < end; b++)
        if (index_lookup(ix, b) != NIL)
            return true;
    return false;
}

void cache_discard(struct ereq *e)
{
    bool zero = e->op == TC_OP_WRITE_ZEROES;
    if (zero && (e->flags & TC_REQ_FAST_ZERO) &&
        dev_fast_zero_refused(e->vol->origin, e->flags & TC_REQ_NO_HOLE)) {
        /* The origin will refuse it: refused now, before the cached
         * blocks of the range are zeroed (on the origin, or as dirty
         * zeroes) -- a failed fast zero leaves the export as it was. */
        e->err = -ENOTSUP;
        e->complete(e);
        return;
    }
    struct cache *c = e->vol->cache;
    bool back = zero && e->vol->mode == TC_MODE_WRITEBACK;
    if (zero && (e->flags & TC_REQ_FAST_ZERO) && range_cached(c, e->off, e->len)) {
        /* The cached blocks of the range are zeroed (dirty zeroes in
         * writeback, made durable first; zeroes written through in the
         * other modes) before the origin is asked: an origin that offers
         * fast zeroes may still refuse one (ENOTSUP: its file system
         * cannot, for that range), and the export would then read zeroes
         * where the request failed.  A failed fast zero leaves the export
         * as it was (proto.md), so one over cached blocks is refused here:
         * the client falls back to a plain write-zeroes, which zeroes
         * them. */
        e->err = -ENOTSUP;
        e->complete(e);
        return;
    }
    readahead_invalidate(c, e->off, e->len);
    c->last_client_io_ns = tc_now_ns();
    struct wreq *w = split(e, NULL, back ? W_BACK : zero ? W_AROUND : W_DISCARD);
    /* The origin range is registered from now until the origin operation
     * ends (discard_origin_done), not only while it runs: between the
     * pieces (tombstones) and the origin operation, a read of a block of
     * the range -- of other sectors of it, filling the whole block -- must
     * not cache the origin's data the operation is about to replace. */
    owrite_begin(c->locks, &w->ow, e->off / c->block_size,
                 (e->off + e->len + c->block_size - 1) / c->block_size);
    /* Only the cached blocks need pieces. */
    unsigned n = 0;
    for (unsigned i = 0; i < w->np; i++) {
        if (index_lookup(&c->map.idx, w->p[i].oblock) == NIL)
            continue;
        w->p[n] = w->p[i];
        if (zero)
            w->p[n].src = zero_block();
        n++;
    }
    w->np = n;
    if (e->flags & TC_REQ_FUA) {
        w->sync_at_end = true;
        w->origin_flush_at_end = true;
    }
    /* Writeback: the cached blocks' dirty zeroes must be durable in the
     * cache before the origin range is zeroed.  Both at once, a crash in
     * between could leave the cache's older clean version recovered over
     * an origin already zeroed: a read after the restart returned it, and
     * one after its eviction (or a detach) zeroes, with no write between. */
    w->after_pieces = back ? sync_then_discard_origin : discard_origin;
    run_pieces(w);
}

/* ---- prefetch (NBD_CMD_CACHE) ---- */

struct prefetch {
    struct ereq *e;
    struct ereq inner;
    void *buf;
    size_t size;
};

static void prefetch_done(struct ereq *inner)
{
    struct prefetch *pf = container_of(inner, struct prefetch, inner);
    struct ereq *e = pf->e;
    e->err = 0;         /* advisory: a failure to prefetch is not the client's */
    bufpool_put(pf->buf, pf->size);
    pf->e->vol->inflight--;
    free(pf);
    e->complete(e);
}

void cache_prefetch(struct ereq *e)
{
    struct prefetch *pf = tc_xcalloc(1, sizeof *pf);
    pf->e = e;
    pf->size = e->len;
    pf->buf = bufpool_get(pf->size);
    pf->inner = *e;
    pf->inner.op = TC_OP_READ;
    pf->inner.buf = pf->buf;
    pf->inner.complete = prefetch_done;
    pf->inner.flags |= EREQ_FORCE_ADMIT | EREQ_SUB_READ;
    e->vol->inflight++;
    cache_read(&pf->inner);
}
