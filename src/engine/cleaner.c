/*
 * The cleaner: reclaims the oldest group of segments when free space runs
 * low.
 *
 *   1. walk: read each chunk of the group (header and data, one I/O) and
 *      check it; for every entry that is still its block's current version:
 *          clean and hot  -> append it again at the head (reinsertion)
 *          clean and cold -> leave it; it goes with the group
 *          dirty          -> set aside
 *          LOST record    -> appended again while the lost set still holds
 *                            the block (the set in memory is authoritative:
 *                            a chunk that cannot be used, whose records are
 *                            unknown, has the whole set appended again)
 *   2. writeback: the dirty blocks set aside go to the origin (ascending,
 *      merged, flushed); then each is decided like a clean one -- its data
 *      read again if it is kept.  A block whose writeback fails is kept
 *      dirty (appended again), never dropped.
 *      Or, when copying frees enough (what the group keeps, dirty and hot,
 *      is at most 15/16 of it): the dirty fragments are copied to the head
 *      as they are, still dirty, and left to the background writeback.
 *      The oldest group holds dirty data of nearly every block a random
 *      writer touched; writing all of it back first makes every client
 *      write that needs room wait as long as the origin takes for almost
 *      the whole dirty set (35 s for 64 MiB of 4 KiB writes on a disk),
 *      where copying takes the cache a few milliseconds.  How much dirty
 *      data there may be is the dirty throttle's business (writeback.c).
 *   3. tail: a durable chunk records that the group is no longer part of
 *      the log (log_sync with the new tail).
 *   4. drop: the cold blocks still pointing into the group leave the
 *      index, and the group's segments become free.
 *
 * Blocks stay readable in the old group until step 3 is durable, so a
 * crash at any step recovers a consistent index.  A segment holding dirty
 * data is never reused before that data is on the origin.
 *
 * Read errors.  A read of dirty data that fails with an I/O error on a
 * device still in service (failure.c fails a device only after a run of
 * read errors) may well succeed a moment later, and the data exists
 * nowhere else: the group is kept, whole, and the cleaner walks it again
 * after a back-off (50 ms, doubling, at most 5 s; status: read_retries,
 * read_retry_delay_ms; for tests only, TIERCACHE_TEST_READ_RETRY_MAX_MS
 * sets the most, so that a test can go through the same attempts in a
 * fraction of the 20 s they take).  A chunk of the group holding dirty
 * data that the walk cannot read gives the attempt up at once, the first
 * few times (one failed read per attempt: a device that fails every read
 * for a moment must not see a run of them, failure.c counts error
 * episodes in a row); after that its dirty fragments are read on their
 * own, so that a bad sector among the chunk's clean data holds nothing
 * up.  Dirty data is dropped as lost only when it is proven damaged --
 * read, and not matching its checksums --, when its device is declared
 * failed, whose handling (failure.c) moves or records it first, or when
 * it stayed unreadable for READ_TRIES attempts in a row while appends
 * wait for room (a lasting
 * bad sector on a device whose other reads succeed is never failed, and
 * would hold the log for ever: read_tries_spent()).  While the group is
 * kept nothing can be reclaimed (the log goes in order: the tail only
 * moves forward), so appends that need room wait (cleaner_wait_space()):
 * they are neither failed nor dropped, until the data reads again, a
 * client write or writeback makes it unnecessary, its device fails, or
 * the attempts are spent.  Attempts given up are logged (the first ten,
 * then one in a hundred) and counted.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/blocklock.h"
#include "engine/budget.h"
#include "engine/cache.h"
#include "engine/cacheio.h"
#include "engine/cleaner.h"
#include "engine/failure.h"
#include "engine/lostlog.h"
#include "engine/map.h"
#include "engine/verify.h"
#include "engine/writeback.h"
#include "io/bufpool.h"
#include "policy/policy.h"
#include "util/assert.h"
#include "util/crc32c.h"
#include "util/join.h"
#include "util/json.h"
#include "util/log.h"
#include "util/misc.h"

/* The most groups one tail record lets go (a batch, batch_next()). */
#define BATCH_MAX 8

/* A fragment to drop once the tail is durable.  id: the block's entry
 * when the walk found it (NIL: not known), a hint the drop checks
 * (index_lookup_hint()): the entry may have gone and its slot been
 * reused meanwhile, but a slot holding the block is its entry. */
struct drop {
    uint64_t oblock;
    uint32_t seg;
    uint16_t off;
    uint32_t id;
};

/* One segment of the group read ahead (see "reading ahead" below). */
struct ahead_seg {
    struct cleaner *k;
    uint32_t seg;
    uint32_t sectors;           /* read: from the segment's start to its last chunk's end */
    uint8_t *buf;
    size_t size;
    bool inflight, ok;
    struct tc_dev_io dio;
};

/* A fragment with dirty sectors, set aside; copied if it is kept. */
struct later {
    struct cleaner *k;
    uint64_t oblock;
    uint32_t seg;
    uint16_t off;
    uint8_t *buf;               /* by sector */
    size_t size;
    struct tc_mask cur, d;
    uint64_t wt_seq;            /* its entry's sequence if write-through (~0: maybe), or 0 */
};

struct carried {
    uint64_t oblock;
    struct tc_mask m;
    size_t order;           /* when added: the later wins (sort_carried()) */
};

struct cleaner {
    struct cache *c;
    bool running, stopping;
    bool active;                    /* below the low mark, until the high one */
    bool paused;                    /* for a checkpoint: cleaner_pause() */
    bool pass_held;                 /* a pass is due and not started for it */
    uint64_t passes_paused;         /* such passes, counted once each (status) */
    bool restart;                   /* a device failed mid-walk: walk again */
    bool keep_group;                /* dirty data could not be moved: retire later */
    bool no_room_to_copy;           /* ...because copies found no room: write back
                                     * next time (until a group is reclaimed) */
    bool unreadable;                /* ...because a read failed on a device in
                                     * service: retry with a back-off */
    struct tc_timer retry;          /* then: try again after a while */
    uint64_t read_retry_ns;         /* the back-off after the last unreadable
                                     * attempt (0: none since a group was
                                     * reclaimed) */
    uint64_t read_retry_max_ns;     /* its most: READ_RETRY_MAX_NS, or
                                     * TIERCACHE_TEST_READ_RETRY_MAX_MS */
    bool backing_off;               /* until the retry timer fires: no attempt,
                                     * whoever kicks (appends waiting for room
                                     * kick at every try) */
    uint64_t read_retries;          /* attempts given up for an unreadable read */
    unsigned reads_failed_in_row;   /* such attempts in a row (since a group was
                                     * reclaimed or an attempt read everything) */
    struct tc_task kick;
    struct log_waiter *space_waiters;
    int fail_err;                   /* cleaner_fail_waiters(): waiters get this */
    bool fail_queued;               /* ... from fail_task, deferred */
    struct tc_task fail_task;
    /* Room held by the origin (see hold_by_origin()). */
    bool refused_dirty;             /* this pass met dirty data the origin refuses */
    int refused_err;                /* ... and the error it refuses it with
                                     * (writeback_refusal(): -ENOSPC or -EIO) */
    uint32_t free_at_start;         /* free segments when the pass began */
    uint32_t futile_passes;         /* passes in a row that met such data and
                                     * left no more segments free than before */
    bool holding;                   /* then: no pass of its own, no copies (and
                                     * with the origin offline, or once the hold
                                     * lasted HOLD_FAIL_ROUNDS attempts, client
                                     * appends needing room fail: holds_room()) */
    uint64_t hold_retry_ns;         /* the back-off before the next attempt */
    unsigned hold_rounds;           /* attempts in a row that found the room
                                     * held (hold_by_origin() calls since the
                                     * hold began; 0: not holding) */
    int hold_err;                   /* the error client appends needing room
                                     * fail with while holds_room() */
    uint64_t held_writes;           /* client appends failed so (status) */
    uint64_t refused_writes;        /* ... of them while the origin answered
                                     * (refused, not offline) */
    bool hold_queued;               /* ... from hold_task, deferred */
    struct tc_task hold_task;
    /* the group being reclaimed */
    uint32_t slot;
    uint64_t seq;
    uint32_t segs[TC_MAX_DEVICES];
    unsigned nsegs, seg_i, chunk_i;
    uint8_t *buf;
    size_t buf_size;
    struct tc_dev_io dio;
    struct drop *drops;
    size_t ndrops, drops_cap;
    struct later *laters;
    size_t nlaters, laters_cap;
    uint64_t *dirty_blocks;
    struct tc_join join;            /* the reads of the blocks kept (copied) */
    struct log_waiter lw;
    /* A batch: while appends wait for room, the groups after the oldest
     * are walked too, and one tail record lets them all go (see
     * batch_next()).  The batch is the groups first_slot .. slot of the
     * ring, in order; each but the current one is decided (its copies
     * appended, its drops listed: drops_end[i] ends group i's). */
    uint32_t first_slot;
    unsigned batched;               /* groups decided before the current one */
    size_t drops_end[BATCH_MAX];
    uint64_t batch_bytes;           /* the batch's groups' size, summed */
    uint64_t walk_room;             /* log_room() when the current group's walk began */
    unsigned arrivals;              /* appends that came to wait for room (not the
                                     * reserve's) during the current group's walk */
    uint64_t tail_syncs;            /* tail records synced that let groups go */
    uint64_t batch_syncs;           /* ... of them, for more than one group */
    uint64_t batch_cuts;            /* batches ended by a group that could not go */
    uint64_t segs_skipped;          /* segments a walk had no need to read */
    bool tail_syncing;              /* waiting for the sync of the new tail */
    uint64_t start_ns, tail_ns;     /* when the reclaim began, and its tail sync */
    uint64_t reclaim_ns, tail_sync_ns;  /* summed over the groups retired */
    uint64_t wb_start_ns;           /* when the current group's dirty data went to
                                     * the origin (0: it did not) */
    uint64_t wb_groups, wb_ns;      /* groups that waited for that, and how long */
    uint64_t walk_start_ns;         /* when the current group's walk began (0: done) */
    uint64_t walk_ns;               /* the walks' time, summed (status) */
    uint64_t walk_read_bytes;       /* chunks the walks read from the devices */
    uint64_t walk_image_bytes;      /* ... and found in memory (log_read_image()) */
    /* The group read ahead: its sequence (valid while ahead_n > 0), its
     * segments, how many of their reads are in flight, and the one the
     * walk waits for (ahead_waiting). */
    uint64_t ahead_seq;
    unsigned ahead_n, ahead_inflight, ahead_wait;
    bool ahead_waiting;
    struct ahead_seg ahead[TC_MAX_DEVICES];
    uint64_t ahead_groups, ahead_bytes, ahead_used_bytes;
    bool no_ahead;                  /* TIERCACHE_TEST_NO_READ_AHEAD */
    bool lost_carried_all;          /* this pass recorded the whole lost set
                                     * again (an unusable chunk) */
    /* The LOST records carried forward from the group being reclaimed
     * (carried_seq) by the attempts given up on it: per block, the mask
     * appended.  A kept group is walked again at each retry, and its
     * LOST records would be appended again each time, out of the
     * reserve -- with a lasting bad sector, until the cleaner's own tail
     * record found no room.  A record carried already is not appended
     * again while the lost set's persisted mask of the block is the
     * same: the copy is in a newer group, which the log retires only
     * after this one.  Sorted by block (with the last entry winning)
     * when an attempt is given up; an attempt looks only there, and
     * adds at the end.  Forgotten when another group is walked or a
     * device fails (the copies may have been on it). */
    struct carried *carried;
    size_t ncarried, nsorted, carried_cap;
    uint64_t carried_seq;           /* the group they come from (0: none) */
    uint64_t lost_carried;          /* LOST records appended again (status) */
    uint64_t groups, relocated, dropped, written_back;
    uint64_t kept_bytes;            /* copied from the group being reclaimed */
    uint64_t tail_no_room;          /* tail records that found no room (the
                                     * group went without one) */
    unsigned tail_no_room_failed;   /* devices out of service when that was
                                     * last reported (tail_no_room_report()) */
    uint64_t tail_room_min;         /* the least log_room() a tail record
                                     * found, +1 (0: none yet) */
    uint64_t failure_room_min;      /* the least log_room() a device failure
                                     * left the devices in service, before
                                     * its own appends, +1 (0: none yet) */
    uint64_t records_deferred;      /* a failure's records refused by
                                     * cleaner_record_fits(), to wait */
    uint64_t claim_waits;           /* appends that left a pass's claim its
                                     * room, to wait (cleaner_claim()) */
    uint64_t client_records_refused;    /* client records (tombstones, clean
                                     * records) refused by
                                     * cleaner_client_record_fits() */
    bool unbounded;                 /* TIERCACHE_TEST_UNBOUNDED_COPIES: no
                                     * copy_fits() (a test shows what it
                                     * prevents) */
    bool no_copies;                 /* TIERCACHE_TEST_NO_COPIES: copy_fits()
                                     * refuses every copy, as a full log
                                     * would (a test of what happens then) */
};

/* The back-off after an attempt given up: the first, and the most it
 * doubles to after attempts given up for read errors in a row. */
#define RETRY_NS (50ull * 1000 * 1000)
/* Loops over a chunk's entries or the drops start the cache misses of the
 * item this far ahead: far enough to overlap them, near enough that
 * the lines are still in the cache when their turn comes. */
#define PREFETCH_AHEAD 8
/* The same for a walk of entries kept in RAM with their blocks' entry
 * numbers (process_chunk()): a prefetch there needs no load first, and
 * most entries of a write-heavy log are superseded, passed over in a few
 * nanoseconds each, so the misses are started further ahead. */
#define RAM_PREFETCH_AHEAD 32
#define READ_RETRY_MAX_NS (5000ull * 1000 * 1000)
/* The back-off while the origin holds the room: the first, and the most
 * it doubles to (writeback's own per-block back-off reaches 30 s too). */
#define HOLD_RETRY_NS (1000ull * 1000 * 1000)
#define HOLD_RETRY_MAX_NS (5000ull * 1000 * 1000)
/* With an origin that answers but refuses, client appends needing room
 * fail from the hold's HOLD_FAIL_ROUNDS-th attempt in a row on (see
 * hold_by_origin()): the hold, then one attempt after its first back-off
 * (1 s) that still found no room. */
#define HOLD_FAIL_ROUNDS 2

static void walk(struct cleaner *k);
static void ahead_start(struct cleaner *k, uint32_t slot);
static void ahead_release(struct cleaner *k);
static bool batch_next(struct cleaner *k);
static void batch_cut(struct cleaner *k);
static void retire_batch(struct cleaner *k);
static void decide_laters(void *arg, int err);
static void fail_fn(struct tc_task *t);
static void hold_fail_fn(struct tc_task *t);

/* The walk of the group in ring slot `slot` begins (the oldest, or the
 * next of a batch). */
static void begin_group(struct cleaner *k, uint32_t slot)
{
    struct cache *c = k->c;
    struct group *g = group_at(&c->sp, slot);
    k->slot = slot;
    g->retiring = true;
    k->seq = g->seq;
    k->nsegs = g->nsegs;
    memcpy(k->segs, g->segs, g->nsegs * sizeof *g->segs);
    k->seg_i = 0;
    k->chunk_i = 0;
    k->nlaters = 0;
    k->kept_bytes = 0;
    k->lost_carried_all = false;
    if (k->carried_seq != k->seq) {
        k->ncarried = k->nsorted = 0;
        k->carried_seq = k->seq;
    }
    k->batch_bytes += (uint64_t)g->nsegs * c->segment_size;
    k->walk_room = log_room(c);
    k->arrivals = 0;
    k->walk_start_ns = tc_now_ns();
    ahead_start(k, slot);
}

static void kick_fn(struct tc_task *t)
{
    struct cleaner *k = container_of(t, struct cleaner, kick);
    struct cache *c = k->c;
    if (k->running || k->stopping || k->backing_off)
        return;
    /* A device draining (failure.c) holds dirty data in segments of old
     * groups that no walk reads (its log is distrusted, its data is not
     * copied) and that must not be freed before it is written back:
     * nothing is retired until the drain ends (its end kicks again). */
    if (c->draining)
        return;
    if (c->sp.free_segs < space_low_water(&c->sp))
        k->active = true;
    else if (c->sp.free_segs >= space_high_water(&c->sp))
        k->active = false;
    if (!k->active && k->space_waiters == NULL)
        return;
    if (k->paused && k->space_waiters == NULL && c->sp.free_segs >= space_low_water(&c->sp) &&
        c->sp.free_segs >= TC_MAX(c->sp.ckpt_room, 1u) + c->sp.reserve_segs) {
        /* A checkpoint waits for the cleaner (cleaner_pause()).  Still
         * active: the pass comes once it is unpaused. */
        if (!k->pass_held)
            k->passes_paused++;
        k->pass_held = true;
        return;
    }
    k->pass_held = false;
    struct group *g = oldest_group(&c->sp);
    if (g == NULL)
        return;
    if (g->open && k->space_waiters == NULL) {
        /* The open group is the only one: retiring it frees nothing (the
         * next group takes as many segments at once), and the tail record
         * each retirement writes would open another -- a loop of syncs
         * that never reaches the high water when the devices left are too
         * small for it (one of two failed).  Only appends waiting for room
         * make it worth closing. */
        k->active = false;
        return;
    }
    if (g->open) {
        /* The open group is the oldest: close it so that it can go. */
        log_close_group(c);
    }
    k->running = true;
    k->start_ns = tc_now_ns();
    k->refused_dirty = false;
    k->refused_err = 0;
    k->free_at_start = c->sp.free_segs;
    k->first_slot = group_slot_of_oldest(&c->sp);
    k->batched = 0;
    k->batch_bytes = 0;
    k->ndrops = 0;
    begin_group(k, k->first_slot);
    walk(k);
}

int cleaner_init(struct cache *c)
{
    struct cleaner *k = tc_xcalloc(1, sizeof *k);
    k->c = c;
    k->kick.fn = kick_fn;
    k->fail_task.fn = fail_fn;
    k->hold_task.fn = hold_fail_fn;
    const char *unbounded = getenv("TIERCACHE_TEST_UNBOUNDED_COPIES");
    k->unbounded = unbounded != NULL && *unbounded != '\0';
    const char *no_copies = getenv("TIERCACHE_TEST_NO_COPIES");
    k->no_copies = no_copies != NULL && *no_copies != '\0';
    const char *no_ahead = getenv("TIERCACHE_TEST_NO_READ_AHEAD");
    k->no_ahead = no_ahead != NULL && *no_ahead != '\0';
    k->read_retry_max_ns = READ_RETRY_MAX_NS;
    const char *retry_max = getenv("TIERCACHE_TEST_READ_RETRY_MAX_MS");
    if (retry_max != NULL && *retry_max != '\0') {
        /* Not below the first back-off: the doubling starts there. */
        uint64_t ms = strtoull(retry_max, NULL, 10);
        k->read_retry_max_ns = TC_MAX(ms * 1000 * 1000, RETRY_NS);
    }
    c->cleaner = k;
    return 0;
}

void cleaner_fini(struct cache *c)
{
    struct cleaner *k = c->cleaner;
    if (k == NULL)
        return;
    timer_cancel(c->reactor, &k->retry);
    /* A close, a detach and an attach wait for the read-ahead's reads
     * (cleaner_idle()), so none is in flight here unless the cache is
     * freed without a close.  Then its buffers are left, not freed under
     * the read; its completion would still find k freed, a risk the
     * walk's own read shares. */
    if (k->ahead_inflight == 0)
        ahead_release(k);
    bufpool_put(k->buf, k->buf_size);
    free(k->drops);
    free(k->laters);
    free(k->dirty_blocks);
    free(k->carried);
    free(k);
    c->cleaner = NULL;
}

void cleaner_stop(struct cache *c)
{
    if (c->cleaner)
        c->cleaner->stopping = true;
}

/* A stop that is taken back (a detach that failed): it works as before. */
void cleaner_resume(struct cache *c)
{
    if (c->cleaner == NULL)
        return;
    c->cleaner->stopping = false;
    cleaner_kick(c);
}

void cleaner_kick(struct cache *c)
{
    struct cleaner *k = c->cleaner;
    if (k && !k->running && !k->stopping && !c->offline)
        reactor_defer(c->reactor, &k->kick);
}

/* Under a steady write load on a full log the cleaner ran pass after
 * pass, and was seldom idle when a running checkpoint looked for its
 * cut.  The checkpoint's hold stops the appends; the pause, within the
 * hold, lets the pass under way end where the cleaner would go on to its
 * high water mark.  It never stops the room appends need: below the low
 * water mark, or short of a checkpoint's room, or with appends waiting
 * for room, a pass starts as before. */
void cleaner_pause(struct cache *c, bool pause)
{
    struct cleaner *k = c->cleaner;
    if (k == NULL || k->paused == pause)
        return;
    k->paused = pause;
    if (!pause) {
        k->pass_held = false;
        cleaner_kick(c);
    }
}

bool cleaner_idle(struct cache *c)
{
    return c->cleaner == NULL || (!c->cleaner->running && c->cleaner->ahead_inflight == 0);
}

/* Client appends needing room fail at once (see hold_by_origin()). */
static bool holds_room(const struct cleaner *k)
{
    return k->holding && (k->c->vol->origin->state == TC_DEV_OFFLINE ||
                          k->hold_rounds >= HOLD_FAIL_ROUNDS);
}

/* The error they fail with: EIO while the origin is offline (as every
 * request needing it then), else the origin's refusal (ENOSPC or EIO). */
static int room_err(const struct cleaner *k)
{
    if (k->c->vol->origin->state == TC_DEV_OFFLINE)
        return -EIO;
    return k->hold_err ? k->hold_err : -EIO;
}

static void hold_fail_queue(struct cleaner *k)
{
    if (!k->hold_queued) {
        k->hold_queued = true;
        reactor_defer(k->c->reactor, &k->hold_task);
    }
}

void cleaner_wait_space(struct cache *c, struct log_waiter *w)
{
    struct cleaner *k = c->cleaner;
    w->next = k->space_waiters;
    k->space_waiters = w;
    if (w->client && holds_room(k) && !k->fail_err) {
        hold_fail_queue(k);     /* fails it: no pass would make its room */
        return;
    }
    if (k->running && !w->reserve)
        k->arrivals++;
    if (k->fail_err) {
        if (!k->fail_queued) {
            k->fail_queued = true;
            reactor_defer(c->reactor, &k->fail_task);
        }
        return;
    }
    cleaner_kick(c);
}

/* The client appends waiting for room fail with EIO (the origin holds
 * the room); the others wait on. */
static void hold_fail_fn(struct tc_task *t)
{
    struct cleaner *k = container_of(t, struct cleaner, hold_task);
    k->hold_queued = false;
    if (!holds_room(k))
        return;
    struct log_waiter *failed = NULL;
    for (struct log_waiter **pp = &k->space_waiters; *pp;) {
        struct log_waiter *w = *pp;
        if (w->client) {
            *pp = w->next;
            w->next = failed;
            failed = w;
        } else {
            pp = &w->next;
        }
    }
    int err = room_err(k);
    bool refused = k->c->vol->origin->state != TC_DEV_OFFLINE;
    while (failed) {
        struct log_waiter *w = failed;
        failed = w->next;
        w->next = NULL;
        k->held_writes++;
        k->refused_writes += refused;
        w->fn(w, err);
    }
}

/* Each waiter is called with the error (it may wait again: it is called
 * again, from the next task). */
static void fail_fn(struct tc_task *t)
{
    struct cleaner *k = container_of(t, struct cleaner, fail_task);
    k->fail_queued = false;
    struct log_waiter *list = k->space_waiters;
    k->space_waiters = NULL;
    while (list) {
        struct log_waiter *w = list;
        list = w->next;
        w->next = NULL;
        w->fn(w, k->fail_err);
    }
}

struct log_waiter *cleaner_waiters(struct cache *c)
{
    return c->cleaner ? c->cleaner->space_waiters : NULL;
}

void cleaner_fail_waiters(struct cache *c, int err)
{
    struct cleaner *k = c->cleaner;
    if (k == NULL || k->fail_err)
        return;
    k->fail_err = err;
    if (k->space_waiters && !k->fail_queued) {
        k->fail_queued = true;
        reactor_defer(c->reactor, &k->fail_task);
    }
}

bool cleaner_cancel_wait(struct cache *c, struct log_waiter *w)
{
    struct cleaner *k = c->cleaner;
    for (struct log_waiter **pp = &k->space_waiters; *pp; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            w->next = NULL;
            return true;
        }
    return false;
}

void cleaner_space_freed(struct cache *c)
{
    struct cleaner *k = c->cleaner;
    if (k == NULL || c->sp.free_segs == 0)
        return;
    /* Appends that take the reserve (a device failure's tombstones and
     * LOST records) can go on with any free segment: a survivor no larger
     * than the reserve never has more free, and they would wait for ever.
     * The others can with the reserve whole: the open group's room is
     * theirs again once no pass holds it (log.c, ensure_group()). */
    bool all = c->sp.free_segs >= c->sp.reserve_segs;
    struct log_waiter *list = k->space_waiters, *keep = NULL;
    k->space_waiters = NULL;
    while (list) {
        struct log_waiter *w = list;
        list = w->next;
        if (all || w->reserve) {
            w->fn(w, 0);
        } else {
            w->next = keep;
            keep = w;
        }
    }
    while (keep) {      /* after those woken: they may wait again */
        struct log_waiter *w = keep;
        keep = w->next;
        w->next = k->space_waiters;
        k->space_waiters = w;
    }
    /* Clean records deferred for want of room, after the appends that
     * waited (client data first): as far as their budget allows. */
    if (all)
        writeback_owed_records(c);
}

void cleaner_wake_all(struct cache *c)
{
    struct cleaner *k = c->cleaner;
    if (k == NULL)
        return;
    struct log_waiter *list = k->space_waiters;
    k->space_waiters = NULL;
    while (list) {
        struct log_waiter *w = list;
        list = w->next;
        w->next = NULL;
        w->fn(w, 0);
    }
}

/* ---- helpers ---- */

static void add_drop(struct cleaner *k, uint64_t oblock, uint32_t id, uint32_t seg, uint16_t off)
{
    if (k->ndrops == k->drops_cap) {
        k->drops_cap = k->drops_cap ? k->drops_cap * 2 : 256;
        k->drops = realloc(k->drops, k->drops_cap * sizeof *k->drops);
        if (k->drops == NULL)
            abort();
    }
    k->drops[k->ndrops++] = (struct drop){ oblock, seg, off, id };
}

static void add_later(struct cleaner *k, uint64_t oblock, uint32_t seg, uint16_t off,
                      uint64_t wt_seq)
{
    if (k->nlaters == k->laters_cap) {
        k->laters_cap = k->laters_cap ? k->laters_cap * 2 : 64;
        k->laters = realloc(k->laters, k->laters_cap * sizeof *k->laters);
        if (k->laters == NULL)
            abort();
    }
    struct later *l = &k->laters[k->nlaters++];
    memset(l, 0, sizeof *l);
    l->k = k;
    l->oblock = oblock;
    l->seg = seg;
    l->off = off;
    l->wt_seq = wt_seq;
}

/* The entry flags of a copy of a fragment whose entry was written at
 * sequence wt_seq with the write-through flag (0: without it).  A
 * write-through version above the stable mark may be missing from the
 * origin after a power failure: only an entry's flag makes recovery write
 * it back.  Its copy keeps the flag (with a new sequence, so it counts
 * until the mark passes the copy), or the copy, once this group is gone,
 * would be recovered as clean data the origin holds.  A fragment with
 * dirty sectors may hold clean write-through ones too (a merge): the same
 * holds for its copy. */
static uint8_t copy_flags(struct cache *c, uint64_t wt_seq)
{
    return wt_seq > c->lg.wt_stable_seq ? TC_ENTRY_WT : 0;
}

/* The bound on a pass's copies.  The cleaner's copies (hot clean data
 * appended again, dirty data copied rather than written back) take the
 * reserve, but never its last record_room() sectors: those are kept for
 * the appends that must always find room -- the pass's own tail record
 * (without it the group cannot go, and nothing else frees room), the
 * LOST records it carries forward, a device failure's tombstones and
 * LOST records, writeback's clean records.  A copy that would leave less
 * is not made: clean data is dropped (the origin has it), dirty data is
 * written back before the group goes (later_read()).  So a pass always
 * ends, whatever mix of live, dirty and lost data its group holds, and
 * the reserve can be as small as one segment per device.
 *
 * record_room(), per device in service: the room a head closes unused
 * when a copy does not fit its end (up to a block and a header), a new
 * chunk's header, and a header for the tail; and one header's worth of
 * records beyond that (some 600 LOST records).  log_room() is measured
 * before each copy, so what appends took meanwhile is counted.
 *
 * Why a sum over the devices is enough, and when it is not.  The records
 * carry no data and may go to any device in service: the tail record
 * needs one open head (each keeps room for a header) or one free segment
 * anywhere (ensure_group() with the reserve opens a group on any device
 * that has one), and so do LOST records, tombstones and CLEAN records.
 * A copy of one block goes to one device too: an open head that takes it
 * or, when none does, a new group after every head is closed -- the room
 * those heads lose is at most a block and a header each, the per-device
 * part above.  So room left anywhere serves them, whichever device holds
 * it.  Not a mirrored copy (--dirty-copies 2): it needs room on two
 * devices at once, and when no two open heads take it log_append()
 * closes them all -- however much room the one that fitted had left --
 * and opens a group that must have a segment on two devices.  Counted
 * over the sum, room on one device passed for room the other lacked: a
 * head too short for the second copy, both heads closed, no free segment
 * left, and the tail record found no room (cleaner-bound.test, case
 * mirror).  So a mirrored copy is bounded by the room its own append
 * leaves (log_mirror_room(): all of it when two heads take it, only the
 * free segments when it needs a new group, none when no group would give
 * it two devices): cleaner_mirror_fits().
 *
 * Per device in service: a failed device has no head and takes no group,
 * so it closes no room unused.  And the reserve must hold record_room():
 * after a failure it is a segment per device in service
 * (space_drop_free()), and a segment holds at least 4 blocks and 1 MiB,
 * so a segment covers a device's part and the tail's header.  Counted
 * over every device, record_room() outgrew the shrunk reserve (a survivor
 * left of 16 devices, with 1 MiB blocks and 4 MiB segments: 16 * 2064 + 8
 * sectors against 8192): no client record budget was left, and the
 * bound's promise -- that much room left for the tail -- exceeded the
 * room there was to promise (multi/devfail-marks.test checks the
 * reserve holds it). */
static uint64_t record_room(const struct cache *c)
{
    return (uint64_t)space_devs_in_service(&c->sp) * (c->spb + 2 * TC_MAX_HDR_SECTORS) +
           TC_MAX_HDR_SECTORS;
}

bool cleaner_data_fits(struct cache *c, uint64_t sectors)
{
    return c->cleaner->unbounded || log_room(c) >= sectors + record_room(c);
}

bool cleaner_mirror_fits(struct cache *c, uint64_t sectors)
{
    unsigned ok = 0;
    for (unsigned d = 0; d < c->ndevs; d++)
        ok += c->devs[d].state == CDEV_OK;
    if (ok < 2)     /* log_append() makes one copy: an unmirrored append */
        return cleaner_data_fits(c, sectors);
    return c->cleaner->unbounded ||
           log_mirror_room(c, (uint32_t)sectors) >= 2 * sectors + record_room(c);
}

/* The room the cleaner's tail record needs, per device: a head closed
 * unused when a record does not fit its end (up to a header) and a new
 * chunk's header.  The tail's part of record_room(), without the data. */
static uint64_t tail_room(const struct cache *c)
{
    return (uint64_t)space_devs_in_service(&c->sp) * 2 * TC_MAX_HDR_SECTORS;
}

/* A record (no data) costs at most what tail_room() allows a device: a
 * head closed unused and a new chunk's header -- on each device it has a
 * copy on, and a tombstone or a clean record has one on every device in
 * service (log.c, extras_fit()): tail_room() in all.  So one appended
 * only while the room left after such a cost still holds tail_room()
 * leaves the tail its room, however many come (counted as two headers
 * a record before, a single copy's, so that with three devices one
 * could take four headers of the tail's room: engine/record-bound-devices
 * runs three and four).  A device
 * failure's tombstones and LOST records -- one a block, each chunk with
 * a header of its own when they wait for their syncs one by one -- took
 * the whole reserve (cleaner-bound.test, case failure).  At a stop there
 * is no tail record to come (the cleaner is stopped), and nothing may
 * wait. */
bool cleaner_record_fits(struct cache *c)
{
    struct cleaner *k = c->cleaner;
    if (k->unbounded || c->stopping || log_room(c) >= 2 * tail_room(c))
        return true;
    k->records_deferred++;
    return false;
}

/* The client records' budget: the sectors of the reserve that
 * tombstones and clean records may take (CLIENT_RECORD_SECTORS, 128 KiB,
 * for each device in service: a record has a copy on each), but never more than half of what the reserve holds beyond
 * record_room(): the rest is the cleaner's, to copy what it keeps and
 * write its last records. */
#define CLIENT_RECORD_SECTORS 32u

static uint64_t reserve_room(const struct cache *c)
{
    return (uint64_t)c->sp.reserve_segs * c->seg_sectors;
}

uint64_t cleaner_client_record_budget(const struct cache *c)
{
    uint64_t res = reserve_room(c), rec = record_room(c);
    if (res <= rec)
        return 0;
    /* A device's worth for each device in service: every record has a
     * copy on each (log.c, extras_fit()), so a budget of one device's
     * worth was less than one record's cost with three devices or more
     * (tail_room()), and client records took none of the reserve. */
    return TC_MIN((uint64_t)CLIENT_RECORD_SECTORS * space_devs_in_service(&c->sp), (res - rec) / 2);
}

/* A client record (no data) costs at most a head closed unused and a new
 * chunk's header on every device in service, as a failure's record does
 * (cleaner_record_fits(): tail_room()).
 * Above the reserve it always fits: a new group leaves the reserve.
 * Within it, it fits while the room left after it stays above the
 * reserve less the budget -- whoever took the reserve so far: once a
 * pass's copies have taken more than the budget, client records wait
 * for the room the pass frees, and never take the room its copies left
 * for its tail record (before, a TRIM storm took that too:
 * record-bound.test). */
bool cleaner_client_record_fits(struct cache *c)
{
    struct cleaner *k = c->cleaner;
    if (k == NULL || k->unbounded || c->stopping || c->sp.free_segs > c->sp.reserve_segs)
        return true;
    uint64_t floor = reserve_room(c) - cleaner_client_record_budget(c);
    if (log_room(c) >= floor + tail_room(c))
        return true;
    k->client_records_refused++;
    return false;
}

void cleaner_failure_room(struct cache *c)
{
    struct cleaner *k = c->cleaner;
    uint64_t room = log_room(c);
    if (k->failure_room_min == 0 || room + 1 < k->failure_room_min)
        k->failure_room_min = room + 1;
}

/* What the copies of a segment's live data cost beyond their data: the
 * headers of the chunks they go in -- counted as one per block copied and
 * per chunk they come from, and one more, as a copy may go in a chunk of
 * its own when the head is sealed between the walk's reads -- and a
 * block's room a head closes unused when a copy does not fit its end.
 * Without it a group kept whole (a segment of hot blocks) claimed its data
 * alone: its copies found a header or a block short at the end, and the
 * last hot blocks were dropped (passclaim.test). */
static uint64_t copy_overhead(const struct cache *c, uint64_t live, uint64_t nchunks)
{
    return (live / c->spb + nchunks + 1) * TC_MAX_HDR_SECTORS + c->spb;
}

/* The room the copies of group g's live data take (its walk not begun). */
static uint64_t group_claim(struct cache *c, const struct group *g)
{
    uint64_t n = 0;
    for (unsigned i = 0; i < g->nsegs; i++) {
        const struct segment *sg = space_seg(&c->sp, g->segs[i]);
        if (seg_usable(c, g->segs[i]) && sg->live)
            n += sg->live + copy_overhead(c, sg->live, sg->nchunks);
    }
    return n;
}

/* The room the cleaner claims for the copies of its pass: while a pass
 * walks its group, the data sectors of the chunks it has yet to read (no
 * more than their segments' live counts); while free space is below the
 * low mark (a pass is due), the live data of the group walked next (the
 * oldest, or the one after the group being reclaimed), also while the
 * pass writes back and syncs its tail.  Each with what its copies cost beyond their data
 * (copy_overhead()).  Plus record_room().  Client writes leave it that room
 * (log.c, log_append()), or wait for room; fills do not (a fill given up
 * loses a block read, as a copy refused does).
 *
 * Why.  Replay, whose devices answer at once, starts each pass when a new
 * group opens and ends it between two requests: its copies of the hot
 * blocks it keeps find the new group's room.  In serve a pass takes device
 * I/O, and another is due as soon as it ends: client writes and fills
 * went on appending meanwhile, and when a group the policy kept nearly
 * whole was walked, its copies found only the reserve, less than it kept:
 * hot blocks were dropped (copies_refused) for data the policy drops
 * unread at its first visit.  On the git benchmark in writeback, 272-457
 * copies a run were refused, none in replay.  The appends held back lose
 * no room: the group's release gives back what the copies did not take
 * (cleaner_space_freed() wakes them). */
uint64_t cleaner_claim(struct cache *c)
{
    struct cleaner *k = c->cleaner;
    if (k == NULL || k->unbounded || k->stopping || k->backing_off || c->draining || c->offline)
        return 0;
    /* Held by the origin (hold_by_origin()): its attempts copy no dirty
     * data, and a client write held back for their claim would fail
     * (holds_room()) with room free; a hot clean copy refused for want of
     * room costs only a later read. */
    if (k->holding)
        return 0;
    uint64_t n = 0;
    /* The group after the one being walked, or the oldest: walked next. */
    const struct group *next = NULL;
    if (k->running) {
        for (unsigned i = k->seg_i; i < k->nsegs; i++) {
            uint32_t seg = k->segs[i];
            const struct segment *sg = space_seg(&c->sp, seg);
            if (!seg_usable(c, seg))
                continue;
            uint64_t rest = 0, nch = 0;
            for (uint32_t ch = i == k->seg_i ? k->chunk_i : 0; ch < sg->nchunks; ch++) {
                rest += sg->chunks[ch].data_sectors;
                nch++;
            }
            rest = TC_MIN(rest, (uint64_t)sg->live);
            if (rest)
                n += rest + copy_overhead(c, rest, nch);
        }
        uint32_t pos = (k->slot + c->sp.groups_cap - c->sp.group_tail) % c->sp.groups_cap;
        if (pos + 1 < c->sp.ngroups)
            next = group_at(&c->sp, (k->slot + 1) % c->sp.groups_cap);
    } else {
        next = oldest_group(&c->sp);
    }
    /* The next walk's claim starts before that walk, while free space is
     * below the low mark: the appends made meanwhile -- while this pass writes
     * back and syncs its tail, which in writeback under a write flood is
     * most of its time -- would otherwise leave the next pass only the
     * reserve, less than a group of hot blocks needs. */
    if (next != NULL && !next->open && c->sp.free_segs < space_low_water(&c->sp))
        n += group_claim(c, next);
    return n ? n + record_room(c) : 0;
}

void cleaner_claim_wait(struct cache *c)
{
    c->cleaner->claim_waits++;
}

static bool copy_fits(struct cache *c, uint64_t sectors, bool mirror)
{
    if (!c->cleaner->no_copies &&
        (mirror ? cleaner_mirror_fits(c, sectors) : cleaner_data_fits(c, sectors)))
        return true;
    c->st.copies_refused++;
    return false;
}

/* Append the sectors `cur` of a block again, from data laid out by sector
 * (or packed, with packed_from set to the fragment's stored mask).  The
 * copy becomes the block's newest fragment; the old one empties and goes.
 * entry_flags: TC_ENTRY_WT when the copy holds sectors of a write-through
 * version the origin may not hold durably yet (see copy_flags()).
 * partial: the copy leaves some of the old fragment's sectors (the damaged
 * ones) behind, so the old fragment stays until it is dropped.  id: the
 * block's entry, which the caller found holding the old fragment (nothing
 * between that and this call changes the index). */
static bool reinsert(struct cache *c, uint64_t oblock, uint32_t id, const struct tc_mask *cur,
                     const struct tc_mask *dirty, const uint8_t *by_sector,
                     const uint8_t *packed, const struct tc_mask *packed_from,
                     uint8_t entry_flags, bool partial)
{
    unsigned n = mask_count(cur);
    if (mask_empty(dirty) && !budget_allow(&c->budget, (uint64_t)n * TC_SECTOR))
        return false;       /* over the write budget: clean data is dropped */
    /* Data-free: the log takes the data for zeroes and never reads it. */
    uint8_t *data = c->data_free ? NULL : bufpool_get((size_t)n * TC_SECTOR);
    unsigned k = 0;
    for (unsigned s = 0; !c->data_free && s < c->spb; s++) {
        if (!mask_test(cur, s))
            continue;
        const uint8_t *from = by_sector ? by_sector + (size_t)s * TC_SECTOR
                                        : packed + (size_t)mask_rank(packed_from, s) * TC_SECTOR;
        memcpy(data + (size_t)k++ * TC_SECTOR, from, TC_SECTOR);
    }
    /* A split copy takes the place of one fragment with two: only while
     * the chain has room for one more (two more for a partial copy, which
     * replaces nothing yet). */
    TC_ASSERT(id != NIL && id == index_lookup(&c->map.idx, oblock));
    bool mirror = !mask_empty(dirty) && c->vol->cfg.dirty_copies > 1;
    if (!copy_fits(c, n, mirror)) {
        if (data)
            bufpool_put(data, (size_t)n * TC_SECTOR);
        return false;
    }
    unsigned added = partial ? 2 : 1;
    struct append a = { .oblock = oblock, .type = TC_ENTRY_DATA, .flags = entry_flags,
                        .valid = *cur, .dirty = *dirty, .data = data, .use_reserve = true,
                        .mirror = mirror,
                        .may_split = CE(&c->map.idx, id)->nfrags + added <= MAX_FRAGS };
    struct log_loc at = log_append(c, &a, NULL);
    if (data)
        bufpool_put(data, (size_t)n * TC_SECTOR);
    if (at.err < 0)
        return false;
    map_add_appended(c, oblock, id, cur, dirty, &at, (entry_flags & TC_ENTRY_WT) ? CE_WT : 0,
                     false);
    c->st.reinsertions++;
    c->st.reinserted_bytes += (uint64_t)n * TC_SECTOR;
    return true;
}

/* ---- 1. walk ---- */

static int carried_cmp(const void *a, const void *b)
{
    const struct carried *x = a, *y = b;
    if (x->oblock != y->oblock)
        return x->oblock < y->oblock ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* An attempt was given up: what it carried joins the sorted part, one
 * entry per block (the last carried). */
static void sort_carried(struct cleaner *k)
{
    if (k->ncarried == k->nsorted)
        return;
    for (size_t i = 0; i < k->ncarried; i++)
        k->carried[i].order = i;
    qsort(k->carried, k->ncarried, sizeof *k->carried, carried_cmp);
    size_t n = 0;
    for (size_t i = 0; i < k->ncarried; i++) {
        if (i + 1 < k->ncarried && k->carried[i + 1].oblock == k->carried[i].oblock)
            continue;
        k->carried[n++] = k->carried[i];
    }
    k->ncarried = k->nsorted = n;
}

static struct carried *find_carried(struct cleaner *k, uint64_t oblock)
{
    size_t lo = 0, hi = k->nsorted;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (k->carried[mid].oblock < oblock)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < k->nsorted && k->carried[lo].oblock == oblock ? &k->carried[lo] : NULL;
}

/* A LOST record appended again, ahead of the new tail that lets its group
 * go (the tail's sync covers it), unless an earlier attempt on the group
 * carried the same already.  One that finds no room keeps the group for
 * now: the loss must never be forgotten with it. */
static void carry_lost(struct cleaner *k, uint64_t oblock, const struct tc_mask *m)
{
    struct carried *f = find_carried(k, oblock);
    if (f && mask_equal(&f->m, m))
        return;
    struct append a = { .oblock = oblock, .type = TC_ENTRY_LOST, .valid = *m,
                        .use_reserve = true };
    if (log_append(k->c, &a, NULL).err < 0) {
        k->keep_group = true;
        return;
    }
    k->lost_carried++;
    if (f) {
        f->m = *m;
        return;
    }
    if (k->ncarried == k->carried_cap) {
        k->carried_cap = k->carried_cap ? k->carried_cap * 2 : 64;
        k->carried = realloc(k->carried, k->carried_cap * sizeof *k->carried);
        if (k->carried == NULL)
            abort();
    }
    k->carried[k->ncarried++] = (struct carried){ .oblock = oblock, .m = *m };
}

static void carry_one(void *arg, uint64_t oblock, const struct tc_mask *m)
{
    carry_lost(arg, oblock, m);
}

/* A chunk of the group that cannot be used (unreadable, or its header
 * damaged) may have held LOST records, and nothing says which: the
 * in-memory set, authoritative, is recorded again whole -- every block it
 * must still call lost (what an earlier attempt on the group carried
 * aside) -- once per pass.  The set is small (it exists only after a
 * failure) and the path rare. */
static void carry_all_lost(struct cleaner *k)
{
    struct cache *c = k->c;
    if (k->lost_carried_all)
        return;
    k->lost_carried_all = true;
    lost_foreach(&c->map.lost, carry_one, k);
}

/* Calls visit for every fragment stored in the chunk, with the block's
 * current dirty sectors in it, until visit returns true (then returns
 * true).  A scan of the whole index: only for chunks that cannot be read,
 * whose headers would otherwise name their fragments. */
static bool each_fragment_in_chunk(struct cache *c, uint32_t seg, const struct chunk_ref *cr,
                                   bool (*visit)(void *arg, const struct centry *e, uint16_t off,
                                                 const struct tc_mask *dirty),
                                   void *arg)
{
    for (uint32_t id = 0; id < c->map.idx.used; id++) {
        const struct centry *e = CE(&c->map.idx, id);
        if (ce_is_free(e))
            continue;
        for (uint32_t g = ce_head(&c->map.idx, id); g != NIL; g = frag_next(&c->map.idx, g)) {
            struct cfrag f = frag_view(&c->map.idx, g);
            if (f.seg != seg || f.off < cr->start ||
                f.off >= cr->start + cr->hdr_sectors + cr->data_sectors)
                continue;
            struct tc_mask cur, v, d;
            frag_current(&c->map.idx, id, g, &cur);
            ce_get_masks(&c->map.idx, id, &v, &d);
            mask_and(&d, &cur);
            if (visit(arg, e, f.off, &d))
                return true;
        }
    }
    return false;
}

/* A fragment of a chunk that cannot be used: dropped if clean (the origin
 * has it), else read again on its own (later_read()). */
static bool set_aside(void *arg, const struct centry *e, uint16_t off, const struct tc_mask *dirty)
{
    struct cleaner *k = arg;
    uint32_t seg = k->segs[k->seg_i];
    if (mask_empty(dirty))
        add_drop(k, ce_oblock(e), NIL, seg, off);
    else        /* its entry unknown: write-through if the block may be */
        add_later(k, ce_oblock(e), seg, off, (e->flags & CE_WT) ? UINT64_MAX : 0);
    return false;
}

static void process_chunk(struct cleaner *k, const struct chunk_ref *cr, bool readable)
{
    struct cache *c = k->c;
    uint32_t seg = k->segs[k->seg_i];
    struct tc_chunk_header h;
    char why[128];
    /* A header kept in RAM (log.h, struct ram_chunk) is read from there,
     * decoded: its entries are as sealed. */
    const struct tc_entry *ram = NULL;
    const uint32_t *ids = NULL;
    if (readable && c->lg.headers_in_ram)
        h = log_ram_chunk(&c->lg, seg, k->chunk_i, cr->start, &ram, &ids)->h;
    if (!readable || (ram == NULL &&
                      chunk_decode(k->buf, (size_t)cr->hdr_sectors * TC_SECTOR, c->set_uuid,
                                   c->spb, c->seg_sectors, &h, why, sizeof why) < 0)) {
        if (readable)
            tc_error("cleaner: %s: chunk at byte %llu (sector %u of segment %u) unusable: %s",
                     seg_cdev(c, seg)->dev->name,
                     (unsigned long long)(seg_dev_offset(c, seg) +
                                          (uint64_t)cr->start * TC_SECTOR),
                     cr->start, seg, why);
        carry_all_lost(k);
        /* Nothing can be copied from here: every fragment pointing into it
         * is set aside (dirty: read again on its own, and kept -- the group
         * with it -- if that fails too without proof of damage; see
         * later_read()) or dropped (clean: the origin has it). */
        each_fragment_in_chunk(c, seg, cr, set_aside, k);
        return;
    }
    for (uint32_t i = 0; i < h.nr_entries; i++) {
        struct tc_entry e;
        /* Each entry is looked up in the index.  From the device: start
         * the look-up of the one PREFETCH_AHEAD further while this one is
         * handled, and the load of the bucket of the one twice as far, so
         * that the look-up's start finds its bucket loaded (it waited for
         * it: about a third of the look-ups' cost). */
        if (ram) {
            /* The entries kept in RAM name their blocks' entries as
             * sealed (a hint, struct ram_seg's ids): the entry and its
             * masks are loaded directly, no bucket first. */
            if (i == 0)
                for (uint32_t j = 0; j < RAM_PREFETCH_AHEAD && j < h.nr_entries; j++)
                    if (ram[j].type == TC_ENTRY_DATA)
                        index_prefetch_entry(&c->map.idx, ram[j].oblock, ids[j]);
            if (i + RAM_PREFETCH_AHEAD < h.nr_entries &&
                ram[i + RAM_PREFETCH_AHEAD].type == TC_ENTRY_DATA)
                index_prefetch_entry(&c->map.idx, ram[i + RAM_PREFETCH_AHEAD].oblock,
                                     ids[i + RAM_PREFETCH_AHEAD]);
            e = ram[i];
        } else {
            if (i + 2 * PREFETCH_AHEAD < h.nr_entries)
                index_prefetch_bucket(&c->map.idx,
                                      chunk_entry_oblock(k->buf, c->spb, i + 2 * PREFETCH_AHEAD));
            if (i + PREFETCH_AHEAD < h.nr_entries)
                index_prefetch(&c->map.idx,
                               chunk_entry_oblock(k->buf, c->spb, i + PREFETCH_AHEAD), 1);
            if (chunk_entry(k->buf, &h, c->spb, i, &e, why, sizeof why) < 0)
                continue;
        }
        if (e.type == TC_ENTRY_LOST) {
            /* Still lost (or cleared by a write not yet durable): the
             * record must outlive its group. */
            struct tc_mask m;
            if (lost_get_persisted(&c->map.lost, e.oblock, &m))
                carry_lost(k, e.oblock, &m);
            continue;
        }
        if (e.type != TC_ENTRY_DATA)
            continue;
        uint16_t off = (uint16_t)(cr->start + cr->hdr_sectors + e.data_sector);
        uint32_t id;
        uint32_t fid = map_find_fragment_hint(c, e.oblock, ids ? ids[i] : NIL, seg, off, &id);
        if (fid == NIL)
            continue;       /* superseded, or the mirror copy of a fragment */
        struct tc_mask cur, st, v, d;
        ce_get_masks(&c->map.idx, id, &v, &d);
        if (fid == (id | FID_INLINE)) {
            /* The block's one fragment, inline: it stores the valid
             * sectors, all current (what frag_current() and frag_stored()
             * would read again). */
            cur = st = v;
        } else {
            frag_current(&c->map.idx, id, fid, &cur);
            frag_stored(&c->map.idx, fid, &st);
        }
        mask_and(&d, &cur);
        uint64_t wt_seq = (e.flags & TC_ENTRY_WT) ? e.seq : 0;
        if (!mask_empty(&d)) {
            add_later(k, e.oblock, seg, off, wt_seq);
            continue;
        }
        const uint8_t *data = k->buf + (size_t)(cr->hdr_sectors + e.data_sector) * TC_SECTOR;
        bool intact = true;
        for (unsigned s = 0; intact && !c->data_free && s < c->spb; s++) {
            if (!mask_test(&cur, s))
                continue;
            unsigned x = mask_rank(&st, s);
            if (tc_crc32c(0, data + (size_t)x * TC_SECTOR, TC_SECTOR) !=
                chunk_data_crc(k->buf, &h, c->spb, e.data_sector + x))
                intact = false;
        }
        if (!intact)
            c->st.checksum_errors++;
        if (intact && policy_keep(c->policy, e.oblock, &CE(&c->map.idx, id)->hint) &&
            reinsert(c, e.oblock, id, &cur, &d, NULL, data, &st, copy_flags(c, wt_seq), false)) {
            k->kept_bytes += (uint64_t)mask_count(&cur) * TC_SECTOR;
            continue;
        }
        add_drop(k, e.oblock, id, seg, off);
    }
}

/* Is the next attempt given up for a read error logged?  The first ten
 * are, then one in a hundred: a device that keeps failing the same read
 * every 5 s must not fill the log. */
static bool retry_logged(const struct cleaner *k)
{
    uint64_t n = k->read_retries + 1;
    return n <= 10 || n % 100 == 0;
}

static bool is_dirty(void *arg, const struct centry *e, uint16_t off, const struct tc_mask *dirty)
{
    (void)arg, (void)e, (void)off;
    return !mask_empty(dirty);
}

/* Does a current dirty sector of some block lie in the chunk? */
static bool chunk_has_dirty(struct cache *c, uint32_t seg, const struct chunk_ref *cr)
{
    return each_fragment_in_chunk(c, seg, cr, is_dirty, NULL);
}

static void give_up_for_now(struct cleaner *k);

/* Attempts given up at once for a chunk that cannot be read (see the top
 * of this file); then its dirty fragments are read on their own. */
#define CHUNK_READ_TRIES 5
/* Attempts in a row that may end unreadable before the data that cannot
 * be read is given up as lost -- only while appends wait for the room
 * (see the top of this file).  With the back-off, some 16 s of errors. */
#define READ_TRIES 10

/* Is this attempt the last that may keep a group for dirty data it cannot
 * read?  A lasting bad sector on a device whose other reads succeed never
 * fails the device (failure.c: a success ends a run of error episodes),
 * nor lets writeback take the data out: kept for good, the group would
 * hold every append needing room for ever.  So once READ_TRIES attempts
 * in a row met read errors, and someone waits for the room, the
 * unreadable dirty sectors are recorded lost (reads of them fail with
 * EIO, the next flush reports the loss) and the group goes.  Nobody
 * waiting: nothing is lost, the attempts go on at the back-off's pace. */
static bool read_tries_spent(const struct cleaner *k)
{
    return k->reads_failed_in_row + 1 >= READ_TRIES && k->space_waiters != NULL;
}

static void chunk_read(struct tc_dev_io *dio, int err)
{
    struct cleaner *k = container_of(dio, struct cleaner, dio);
    struct cache *c = k->c;
    uint32_t seg = k->segs[k->seg_i];
    const struct chunk_ref *cr = &space_seg(&c->sp, seg)->chunks[k->chunk_i];
    seg_unpin(&c->sp, seg);
    if (err)
        cache_device_error(c, space_seg(&c->sp, seg)->dev, err, false);
    if (err && seg_usable(c, seg) && k->reads_failed_in_row < CHUNK_READ_TRIES &&
        chunk_has_dirty(c, seg, cr)) {
        /* Dirty data that may read fine in a moment, on a device still in
         * service: nothing of the group goes now.  (A device this error
         * failed had its fragments moved or recorded lost by failure.c:
         * then the chunk is dealt with below.) */
        if (retry_logged(k))
            tc_error("cleaner: %s: chunk at byte %llu (segment %u), holding dirty data, "
                     "unreadable: %s", seg_cdev(c, seg)->dev->name,
                     (unsigned long long)(seg_dev_offset(c, seg) +
                                          (uint64_t)cr->start * TC_SECTOR),
                     seg, strerror(-err));
        k->unreadable = true;
        give_up_for_now(k);
        return;
    }
    process_chunk(k, &space_seg(&c->sp, seg)->chunks[k->chunk_i], err == 0);
    k->chunk_i++;
    walk(k);
}

static void tail_synced(struct log_waiter *lw, int err);

/* The sectors of a set-aside fragment that are still its block's current
 * version (false: the fragment is gone, all of it superseded). */
static bool later_current(struct cache *c, const struct later *l, uint32_t *id,
                          struct tc_mask *cur)
{
    uint32_t fid = map_find_fragment(c, l->oblock, l->seg, l->off, id);
    if (fid == NIL)
        return false;
    frag_current(&c->map.idx, *id, fid, cur);
    return true;
}

/* Copy the group's dirty fragments rather than write them back first?
 * Yes when what the group keeps (hot clean data copied already, and the
 * dirty sectors, twice with --dirty-copies 2) is at most 15/16 of it, so
 * that each group reclaimed frees at least a sixteenth of one: copying
 * costs the cache a group's worth of writes at most, writing back costs
 * the origin seconds (random writes over a volume four times the cache
 * leave about 80 % of the oldest group live and dirty).  Not after a
 * copy of this group found no room: writing back is what frees it then. */
static bool copy_dirty(struct cleaner *k)
{
    struct cache *c = k->c;
    uint64_t dirty = 0;
    if (k->no_room_to_copy)
        return false;
    for (size_t i = 0; i < k->nlaters; i++) {
        uint32_t id;
        struct tc_mask cur;
        if (later_current(c, &k->laters[i], &id, &cur))
            dirty += (uint64_t)mask_count(&cur) * TC_SECTOR;
    }
    if (c->vol->cfg.dirty_copies > 1)
        dirty *= 2;
    uint64_t group = (uint64_t)k->nsegs * c->segment_size;
    return k->kept_bytes + dirty <= group / 16 * 15;
}

/* ---- reading ahead ----
 *
 * A reclaim is a walk (the group's chunks read, one after the other, and
 * decided), then the sync of the new tail; appends waiting for room wait
 * for both, and under a write flood they wait for nearly every reclaim
 * (the cleaner's claim holds them while it runs).  The walk's reads
 * need not wait: a closed group does not change on the device until it
 * is retired (its segments take no more chunks, and none is reused
 * before the tail passes it), so they can be made earlier, all at once.
 * When a walk begins, each segment of the group is read whole (from its
 * start to its last chunk's end) in one request, and while a tail sync
 * runs with appends waiting for room, or with a pass due, the next group
 * is read the same way: the walk that comes next finds its chunks in
 * memory.  Nothing is decided from those reads until the walk reaches
 * each chunk, as from its own read (the index and the checksums are
 * looked at then).  A read that fails is forgotten, and the walk reads
 * the chunk itself (its errors are handled there, as ever).  Not for:
 * segments with a chunk write in flight or an image in memory (the walk
 * takes those from the image), segments with nothing live (the walk
 * skips them), groups of more than AHEAD_MAX_BYTES, data-free caches
 * (replay: the walk reads headers only).  For tests and comparisons
 * only, TIERCACHE_TEST_NO_READ_AHEAD turns it off.
 *
 * Measured on the git benchmark in writeback (64 MiB cache, 1 MiB
 * segments, three runs each way alternated on a loaded machine): the
 * walks went from 1.8-2.2 s a run to 0.16-0.18 s, the reclaims from
 * 5.0-6.3 s to 3.6-4.7 s (the tail syncs took part of what the walks
 * gave: the reads ahead share the device with them), the wall time
 * writes waited for room from 3.6-4.0 s to 2.8-3.5 s, and each run's
 * total was 4-23 % shorter than the run without beside it. */
#define AHEAD_MAX_BYTES (16u << 20)

static void ahead_release(struct cleaner *k)
{
    TC_ASSERT(k->ahead_inflight == 0);
    for (unsigned i = 0; i < k->ahead_n; i++)
        bufpool_put(k->ahead[i].buf, k->ahead[i].size);
    k->ahead_n = 0;
}

static void ahead_read(struct tc_dev_io *dio, int err)
{
    struct ahead_seg *a = container_of(dio, struct ahead_seg, dio);
    struct cleaner *k = a->k;
    seg_unpin(&k->c->sp, a->seg);
    a->inflight = false;
    a->ok = err == 0;
    k->ahead_inflight--;
    if (k->ahead_waiting && a == &k->ahead[k->ahead_wait]) {
        k->ahead_waiting = false;
        walk(k);
    }
}

/* Read the group in ring slot `slot` ahead, unless it is read already or
 * another read ahead is in flight. */
static void ahead_start(struct cleaner *k, uint32_t slot)
{
    struct cache *c = k->c;
    if (c->data_free || k->ahead_inflight > 0 || k->stopping || k->no_ahead)
        return;
    const struct group *g = group_at(&c->sp, slot);
    if (g->open || (k->ahead_n > 0 && k->ahead_seq == g->seq))
        return;
    uint32_t sectors[TC_MAX_DEVICES];
    uint64_t total = 0;
    for (unsigned i = 0; i < g->nsegs; i++) {
        uint32_t seg = g->segs[i];
        const struct segment *sg = space_seg(&c->sp, seg);
        sectors[i] = 0;
        if (!seg_usable(c, seg) || sg->nchunks == 0 || sg->writes_inflight > 0 ||
            c->lg.images[seg] != NULL || (sg->live == 0 && c->map.lost.blocks == 0))
            continue;
        const struct chunk_ref *last = &sg->chunks[sg->nchunks - 1];
        sectors[i] = (uint32_t)last->start + last->hdr_sectors + last->data_sectors;
        total += (uint64_t)sectors[i] * TC_SECTOR;
    }
    if (total == 0 || total > AHEAD_MAX_BYTES)
        return;
    ahead_release(k);
    k->ahead_seq = g->seq;
    k->ahead_groups++;
    for (unsigned i = 0; i < g->nsegs; i++) {
        if (sectors[i] == 0)
            continue;
        struct ahead_seg *a = &k->ahead[k->ahead_n++];
        uint32_t seg = g->segs[i];
        a->k = k;
        a->seg = seg;
        a->sectors = sectors[i];
        a->size = (size_t)sectors[i] * TC_SECTOR;
        a->buf = bufpool_get(a->size);
        a->inflight = true;
        a->ok = false;
        k->ahead_inflight++;
        k->ahead_bytes += a->size;
        seg_pin(&c->sp, seg);
        memset(&a->dio, 0, sizeof a->dio);
        a->dio.op = TC_DEV_READ;
        a->dio.buf = a->buf;
        a->dio.off = seg_dev_offset(c, seg);
        a->dio.len = a->size;
        a->dio.cb = ahead_read;
        dev_submit(seg_cdev(c, seg)->dev, &a->dio);
    }
}

/* The chunk cr of segment seg of the group being walked, `sectors` of it
 * from its start, from the read ahead into k->buf: 1 if there, 0 if not
 * (the walk reads it), -1 if its read is in flight (the walk goes on when
 * it ends). */
static int ahead_take(struct cleaner *k, uint32_t seg, const struct chunk_ref *cr,
                      uint32_t sectors)
{
    if (k->ahead_n == 0 || k->ahead_seq != k->seq)
        return 0;
    for (unsigned i = 0; i < k->ahead_n; i++) {
        struct ahead_seg *a = &k->ahead[i];
        if (a->seg != seg)
            continue;
        if (a->inflight) {
            k->ahead_waiting = true;
            k->ahead_wait = i;
            return -1;
        }
        if (!a->ok || (uint32_t)cr->start + sectors > a->sectors)
            return 0;
        memcpy(k->buf, a->buf + (size_t)cr->start * TC_SECTOR, (size_t)sectors * TC_SECTOR);
        k->ahead_used_bytes += (uint64_t)sectors * TC_SECTOR;
        return 1;
    }
    return 0;
}

static void walk(struct cleaner *k)
{
    struct cache *c = k->c;
    while (k->seg_i < k->nsegs) {
        uint32_t seg = k->segs[k->seg_i];
        struct segment *sg = space_seg(&c->sp, seg);
        if (k->chunk_i >= sg->nchunks || !seg_usable(c, seg)) {
            /* A failed device's fragments were moved or dropped already. */
            k->seg_i++;
            k->chunk_i = 0;
            continue;
        }
        if (sg->live == 0 && c->map.lost.blocks == 0) {
            /* Nothing left to read here: no fragment points into the
             * segment (live counts the stored sectors of every fragment,
             * mirror copies too, invariant 10), so every DATA entry of its
             * chunks is superseded, and with the lost set empty no LOST
             * record of them needs carrying (process_chunk() does nothing
             * else).  Overwritten data makes such segments common in the
             * oldest group; their read was most of a reclaim then. */
            k->segs_skipped++;
            k->seg_i++;
            k->chunk_i = 0;
            continue;
        }
        const struct chunk_ref *cr = &sg->chunks[k->chunk_i];
        size_t len = (size_t)(cr->hdr_sectors + cr->data_sectors) * TC_SECTOR;
        if (len > k->buf_size) {
            bufpool_put(k->buf, k->buf_size);
            k->buf_size = len;
            k->buf = bufpool_get(len);
        }
        /* Data-free: the header alone is read; the data are zeroes.  A
         * header kept in RAM is not copied: process_chunk() reads it there. */
        uint32_t want = c->data_free ? cr->hdr_sectors : cr->hdr_sectors + cr->data_sectors;
        if (c->lg.headers_in_ram ? log_has_image(&c->lg, seg)
                                 : log_read_image(&c->lg, seg, cr->start, want, k->buf)) {
            k->walk_image_bytes += (uint64_t)want * TC_SECTOR;
            process_chunk(k, cr, true);
            k->chunk_i++;
            continue;
        }
        int ahead = ahead_take(k, seg, cr, want);
        if (ahead < 0)
            return;         /* ahead_read() walks on */
        if (ahead > 0) {
            process_chunk(k, cr, true);
            k->chunk_i++;
            continue;
        }
        seg_pin(&c->sp, seg);
        k->walk_read_bytes += len;
        memset(&k->dio, 0, sizeof k->dio);
        k->dio.op = TC_DEV_READ;
        k->dio.buf = k->buf;
        k->dio.off = seg_dev_offset(c, seg) + (uint64_t)cr->start * TC_SECTOR;
        k->dio.len = len;
        k->dio.cb = chunk_read;
        if (c->data_free) {
            k->dio.flags = TC_DEV_PAYLOAD;
            k->dio.payload_off = c->lg.headers_in_ram ? 0 : (uint64_t)cr->hdr_sectors * TC_SECTOR;
        }
        dev_submit(seg_cdev(c, seg)->dev, &k->dio);
        return;
    }
    if (k->walk_start_ns) {
        k->walk_ns += tc_now_ns() - k->walk_start_ns;
        k->walk_start_ns = 0;
    }
    /* 2. The dirty blocks set aside are copied when that frees enough,
     * or go to the origin, in ascending order. */
    if (k->nlaters > 0 && copy_dirty(k)) {
        c->st.dirty_copies_by_cleaner += k->nlaters;
        decide_laters(k, 0);
        return;
    }
    if (k->nlaters > 0 && k->batched > 0) {
        /* Not while the batch before it waits: the origin takes seconds. */
        batch_cut(k);
        return;
    }
    if (k->nlaters > 0) {
        k->dirty_blocks = realloc(k->dirty_blocks, k->nlaters * sizeof *k->dirty_blocks);
        for (size_t i = 0; i < k->nlaters; i++)
            k->dirty_blocks[i] = k->laters[i].oblock;
        k->wb_start_ns = tc_now_ns();
        writeback_blocks(c, k->dirty_blocks, (unsigned)k->nlaters, decide_laters, k);
        return;
    }
    decide_laters(k, 0);
}

/* ---- 2. dirty blocks, after their writeback ---- */

static void retry_fn(struct tc_timer *t)
{
    struct cleaner *k = container_of(t, struct cleaner, retry);
    k->backing_off = false;
    cleaner_kick(k->c);
}

/* ---- room held by the origin ----
 *
 * With the log full of dirty data, room comes only from writing some of
 * it back.  When the origin refuses that -- it is offline (past
 * --origin-timeout), or the blocks' write-backs failed WB_FAILURES_EIO
 * times in a row (a full file system under an origin file answers
 * ENOSPC, a bad range EIO) -- no pass can make room: a group whose dirty
 * data finds no room to be copied stays, and one whose copies fit only
 * moves that data to the log's head, taking as many segments as it frees
 * (each pass's tail sync closes the segment its copies went to).  Before,
 * the cleaner copied the same dirty data round the log without end (some
 * 100 MiB/s of cache writes, measured) as long as writes waited or the
 * free space stayed below its low mark, and client writes waited for the
 * room for ever.
 *
 * So a pass that met such data (refused_dirty) and either gave its
 * group up or, as the last of a whole round of the log's groups, left
 * no more segments free than it found, holds the cleaner: it copies
 * nothing and makes no pass of its own until writeback has written
 * something back (cleaner_origin_took()), a device fails, or a back-off
 * (1 s, doubling to 5 s) is over; its attempts then write back what is
 * due, and each that still finds the room held counts a round
 * (hold_rounds).  A pass that frees room ends the hold.
 *
 * Client writes needing room then fail (holds_room(); nothing of such a
 * write is appended or sent, so its sectors keep their last acknowledged
 * data; the reserve's appends -- the cleaner's, a device failure's --
 * wait on):
 *  - while the origin is offline, with EIO at once, as every request
 *    needing it does;
 *  - while it answers but refuses, from the hold's HOLD_FAIL_ROUNDS-th
 *    round on (one attempt after the first back-off), with the origin's
 *    reason: ENOSPC when it said it is out of space, EIO otherwise
 *    (writeback_refusal()).  Why that bound: by the hold, each block of
 *    the dirty data met was refused WB_FAILURES_EIO times in a row (the
 *    point at which a write needing one of them written back fails too)
 *    and a round of passes made no room; the one more attempt lets a
 *    refusal that passes by itself (a moment's error, room freed on the
 *    origin's file system) pass without failing anything.  Beyond that the
 *    wait has no end of its own (a full file system waits for whoever
 *    frees room on it), and a client left without an answer learns
 *    nothing, hits its own timeout (the Linux nbd driver's is 30 s) or
 *    hangs; a write failed with ENOSPC says what is wrong, and a write
 *    the cache could not take is never acknowledged.  So a write waits
 *    for room at most the blocks' three failed attempts (writeback's
 *    back-off: 0.1, 0.2 and 0.4 s, with its passes), the passes of one
 *    round of the log, and 1 s: a few seconds.  Writes that find room
 *    (what is left in the open segments) and writes that go to the origin
 *    without an append (a sequential stream's blocks not cached) are not
 *    failed: the origin answers those itself.  The origin taking data
 *    again (writeback writes a block back) ends the hold: writes wait for
 *    the room that makes, and succeed.  An origin that takes some blocks
 *    and refuses others (an origin file on a full file system takes
 *    writes into blocks it has allocated) ends the hold at each block it
 *    takes, and the count starts over; that goes on only while it takes
 *    data, of which there is a bounded amount (the writes waiting add
 *    none), so the hold comes back to stay once that is written.
 *
 * Status: cleaner.held_by_origin, cleaner.hold_rounds,
 * cleaner.origin_holds_room (writes fail now), cleaner.room_error (with
 * what), cleaner.room_held_writes, cleaner.room_refused_writes (those
 * failed while the origin answered). */
static void hold_by_origin(struct cleaner *k)
{
    struct cache *c = k->c;
    bool offline = c->vol->origin->state == TC_DEV_OFFLINE;
    if (!k->holding)
        tc_error("cleaner: the log is full and the origin refuses the dirty data that would "
                 "make room (%s): no copies until it takes some%s",
                 offline ? "it is offline" : "its write-backs failed",
                 offline ? "; client writes needing room fail with EIO while it is offline" : "");
    bool failing = holds_room(k);
    k->holding = true;
    k->hold_rounds++;
    if (k->refused_err)
        k->hold_err = k->refused_err;
    if (!failing && holds_room(k) && !offline)
        tc_error("cleaner: the origin still refuses the dirty data that would make room (%s, "
                 "%u attempts): client writes needing room fail with %s until it takes some",
                 strerror(-room_err(k)), k->hold_rounds,
                 room_err(k) == -ENOSPC ? "ENOSPC" : "EIO");
    /* The next attempt writes back what is due rather than copy: only
     * the origin taking some can end this. */
    k->no_room_to_copy = true;
    k->hold_retry_ns = k->hold_retry_ns ? TC_MIN(k->hold_retry_ns * 2, HOLD_RETRY_MAX_NS)
                                        : HOLD_RETRY_NS;
    k->futile_passes = 0;
    k->retry.fn = retry_fn;
    timer_cancel(c->reactor, &k->retry);
    k->backing_off = true;
    timer_arm(c->reactor, &k->retry, k->hold_retry_ns);
    if (k->space_waiters && holds_room(k))
        hold_fail_queue(k);
}

static void hold_end(struct cleaner *k)
{
    k->futile_passes = 0;
    if (!k->holding)
        return;
    if (holds_room(k) && k->c->vol->origin->state != TC_DEV_OFFLINE)
        tc_info("cleaner: client writes needing room wait for it again (%llu failed so far)",
                (unsigned long long)k->refused_writes);
    k->holding = false;
    k->hold_retry_ns = 0;
    k->hold_rounds = 0;
    k->hold_err = 0;
    tc_info("cleaner: room in the log again");
}

bool cleaner_origin_holds_room(struct cache *c)
{
    return c->cleaner && holds_room(c->cleaner);
}

int cleaner_room_refused(struct cache *c, uint64_t sectors, unsigned appends)
{
    struct cleaner *k = c->cleaner;
    if (k == NULL || !holds_room(k))
        return 0;
    /* What the appends of a client write may take: the open heads' room
     * and the free segments above the reserve, less a pass's claim; each
     * append at most its data and a chunk header.  An estimate: a head
     * too small for an append is closed unused, so a write judged to fit
     * may still find a piece without room -- that piece fails alone. */
    uint64_t room = log_room(c), reserve = (uint64_t)c->sp.reserve_segs * c->seg_sectors;
    room = room > reserve ? room - reserve : 0;
    uint64_t need = sectors + (uint64_t)appends * TC_MAX_HDR_SECTORS + cleaner_claim(c);
    if (need <= room)
        return 0;
    k->held_writes += appends;
    if (c->vol->origin->state != TC_DEV_OFFLINE)
        k->refused_writes += appends;
    return room_err(k);
}

void cleaner_origin_took(struct cache *c)
{
    struct cleaner *k = c->cleaner;
    if (k == NULL || !k->holding)
        return;
    /* The next pass may write back or drop what the origin now has. */
    hold_end(k);
    timer_cancel(c->reactor, &k->retry);
    k->backing_off = false;
    cleaner_kick(c);
}

/* The group stays, with everything in it, and the cleaner tries again
 * after a while: once writeback has had time to work (no room to copy),
 * or after a back-off that doubles with each attempt in a row given up
 * for a read error (unreadable) -- enough for a transient error to pass,
 * few enough reads for a device failing for good to reach failure.c's
 * run of errors soon. */
static void give_up_for_now(struct cleaner *k)
{
    struct cache *c = k->c;
    if (k->batched > 0) {
        batch_cut(k);
        return;
    }
    uint64_t delay = RETRY_NS;
    bool unreadable = k->unreadable;
    if (unreadable) {
        k->read_retry_ns = k->read_retry_ns ? TC_MIN(k->read_retry_ns * 2,
                                                     k->read_retry_max_ns)
                                            : RETRY_NS;
        delay = k->read_retry_ns;
        if (retry_logged(k))
            tc_error("cleaner: group %llu kept: some of its dirty data could not be read on a "
                     "device in service; trying again in %llu ms (attempt %llu given up; "
                     "appends needing room wait meanwhile)",
                     (unsigned long long)k->seq, (unsigned long long)(delay / 1000000),
                     (unsigned long long)k->read_retries + 1);
        k->read_retries++;
        k->reads_failed_in_row++;
    } else {
        /* Given up for want of room (or of a record's): no read of the
         * group's dirty data failed on a device in service this time, so
         * the errors before were transient -- the run that gives such
         * data up (read_tries_spent()) starts over. */
        k->reads_failed_in_row = 0;
    }
    k->keep_group = false;
    k->unreadable = false;
    k->ndrops = 0;
    k->nlaters = 0;
    sort_carried(k);
    group_at(&c->sp, k->slot)->retiring = false;
    k->running = false;
    writeback_kick(c);
    if (!unreadable && k->refused_dirty) {
        hold_by_origin(k);
        return;
    }
    k->retry.fn = retry_fn;
    if (unreadable) {
        /* The back-off holds whoever kicks: a read that failed again at
         * once would only add to the device's run of errors. */
        timer_cancel(c->reactor, &k->retry);
        k->backing_off = true;
    }
    if (!k->retry.armed)
        timer_arm(c->reactor, &k->retry, delay);
}

/* Whether the group holds dirty data of a failed device that is being
 * rescued (failure.c: read back from it and appended elsewhere).  Its
 * fragments are not walked (the device is out of service), and a tail
 * written past the group would drop their entries from a restart's log
 * before the rescued versions are durable -- while the failure is not yet
 * marked, a restart trusts that device's log and finds the data there.
 * So the group stays, and the rescues' end kicks the cleaner again --
 * unless appends wait for room (perhaps the rescues' own, which take no
 * reserve): then the rescues' data goes to the origin instead
 * (cache_rescue_to_origin(): written back, then dropped from the failed
 * device; what the origin refuses is written again after a back-off, and
 * recorded lost once refused for good) rather than wait for ever, and the
 * group goes once it holds none of it. */
static bool group_holds_rescue(struct cleaner *k)
{
    struct cache *c = k->c;
    struct group *gr = group_at(&c->sp, k->slot);
    for (unsigned i = 0; i < gr->nsegs; i++) {
        struct segment *sg = space_seg(&c->sp, gr->segs[i]);
        if (c->devs[sg->dev].state == CDEV_FAILING && sg->live > 0)
            return true;
    }
    return false;
}

static bool rescue_holds(struct cleaner *k)
{
    struct cache *c = k->c;
    if (c->rescues_pending == 0 || !group_holds_rescue(k))
        return false;
    if (k->space_waiters == NULL)
        return true;
    cache_rescue_to_origin(c);      /* may drop what is on the origin already */
    return c->rescues_pending > 0 && group_holds_rescue(k);
}

/* Batching.  Each reclaim ends with a record of the new tail and a sync
 * of the log up to it -- about half of a reclaim's time when the groups
 * hold little to keep, and while appends wait for room the cleaner's
 * rate is theirs.  So while appends wait, the next group is walked too
 * (copies appended, drops listed, nothing freed), and one record and one
 * sync let the whole batch go (retire_batch(), tail_synced()): steps 1
 * and 2 for each group, then 3 and 4 once.  A next group is taken only
 *  - while appends wait for more room than the batch gives (the bytes of
 *    their blocks, summed), or more came to wait during the last group's
 *    walk: writers that keep coming, not all of them waiting at once (a
 *    file system's writeback through a few requests in flight), or the
 *    next group holds nothing live (group_empty(): its walk reads
 *    nothing, and it holds no cached data to keep).  Not for a lone
 *    write whose pieces all wait from the start and fit the groups
 *    walked: a batch larger than what is wanted would leave segments
 *    empty, that could hold data, once the writes stop
 *    (cleaner-batch.test);
 *  - when it is closed, and not the open group (the copies go there);
 *  - when the room left is at least the tail's records' and what the
 *    last group's walk took (its copies, and appends meanwhile): the next
 *    group's copies are bounded by copy_fits() anyway, this only keeps a
 *    walk from being wasted;
 *  - up to BATCH_MAX groups, nothing stopping, no device draining.
 * A group of a batch that is not the first and cannot go now (dirty data
 * it would have to write back, unreadable, held by a rescue) ends the
 * batch without it: the groups before it go (batch_cut()), and it is the
 * first of the next pass, with the usual back-offs. */
/* Does the group hold nothing a walk would read (walk(): every segment
 * without live data, the lost set empty)?  Walking it costs nothing, and
 * freeing it early leaves no cached data out. */
static bool group_empty(struct cache *c, const struct group *g)
{
    if (c->map.lost.blocks != 0)
        return false;
    for (unsigned i = 0; i < g->nsegs; i++)
        if (space_seg(&c->sp, g->segs[i])->live != 0)
            return false;
    return true;
}

static bool batch_next(struct cleaner *k)
{
    struct cache *c = k->c;
    if (k->space_waiters == NULL || k->stopping || k->fail_err || c->offline || c->draining ||
        k->batched + 1 >= BATCH_MAX)
        return false;
    uint64_t want = 0;
    for (struct log_waiter *w = k->space_waiters; w; w = w->next)
        if (!w->reserve)
            want += c->block_size;
    uint32_t pos = (k->slot + c->sp.groups_cap - c->sp.group_tail) % c->sp.groups_cap;
    uint32_t next = (k->slot + 1) % c->sp.groups_cap;
    if (pos + 1 >= c->sp.ngroups)
        return false;
    struct group *g = group_at(&c->sp, next);
    if (g->open)
        return false;
    if (want <= k->batch_bytes && k->arrivals == 0 && !group_empty(c, g))
        return false;
    uint64_t room = log_room(c);
    uint64_t took = k->walk_room > room ? k->walk_room - room : 0;
    if (room < record_room(c) + took)
        return false;
    k->drops_end[k->batched++] = k->ndrops;
    begin_group(k, next);
    walk(k);
    return true;
}

/* The current group of a batch, not its first, cannot go now: the batch
 * ends before it.  Its copies stay (newer versions, which supersede its
 * fragments), its drops are forgotten, and it stays in the log. */
static void batch_cut(struct cleaner *k)
{
    struct cache *c = k->c;
    TC_ASSERT(k->batched > 0);
    group_at(&c->sp, k->slot)->retiring = false;
    k->keep_group = false;
    k->unreadable = false;
    k->nlaters = 0;
    k->ncarried = k->nsorted = 0;
    k->carried_seq = 0;
    k->batched--;
    k->ndrops = k->drops_end[k->batched];
    k->batch_bytes -= (uint64_t)k->nsegs * c->segment_size;
    k->slot = (k->slot + c->sp.groups_cap - 1) % c->sp.groups_cap;
    k->seq = group_at(&c->sp, k->slot)->seq;
    k->batch_cuts++;
    retire_batch(k);
}

static void later_done(struct cleaner *k)
{
    if (!join_put(&k->join, 0))
        return;
    struct cache *c = k->c;
    if (k->keep_group) {
        /* Dirty data of this group could be neither written back nor
         * copied (no room, or unreadable now). */
        give_up_for_now(k);
        return;
    }
    if (k->restart) {
        /* A device failed while the group was walked: its dirty data moved
         * to mirrors, some perhaps into this group after they were looked
         * at -- or into a group of the batch decided before.  Walk the
         * batch again, from its first group, before any of it may go. */
        k->restart = false;
        for (unsigned i = 1; i <= k->batched; i++)
            group_at(&c->sp, (k->first_slot + i) % c->sp.groups_cap)->retiring = false;
        k->batched = 0;
        k->batch_bytes = 0;
        k->ndrops = 0;
        begin_group(k, k->first_slot);
        walk(k);
        return;
    }
    if (rescue_holds(k)) {
        give_up_for_now(k);
        return;
    }
    if (batch_next(k))
        return;
    retire_batch(k);
}

/* A tail record that found no room, told the log.  While devices are out
 * of service it is a device failure's doing (its records took the room,
 * or no device is left to take any): reported once per failure, naming
 * the device and its state -- a failure's rescues retire group after
 * group, and each such retirement logged the same error (ten at once in
 * engine/devfail-reads, then one in a thousand for as long as it went
 * on).  Otherwise the first ten, then one in a thousand. */
static void tail_no_room_report(struct cleaner *k)
{
    struct cache *c = k->c;
    unsigned failed = 0;
    char which[256] = "";
    size_t n = 0;
    for (unsigned d = 0; d < c->ndevs; d++) {
        if (c->devs[d].state == CDEV_OK)
            continue;
        failed++;
        if (n < sizeof which)
            n += (size_t)snprintf(which + n, sizeof which - n, "%s%s (%s)", n ? ", " : "",
                                  c->devs[d].dev->name, cdev_state_name(c->devs[d].state));
    }
    if (failed > 0) {
        if (failed == k->tail_no_room_failed)
            return;
        k->tail_no_room_failed = failed;
        tc_error("cleaner: no room in the log for the record of its new end, %u of %u cache "
                 "devices in service (out of service: %s): groups go without it, their new "
                 "end is recorded with the next chunk written; reported once for this failure "
                 "(status: cleaner.tail_no_room)", c->ndevs - failed, c->ndevs, which);
        return;
    }
    if (k->tail_no_room <= 10 || k->tail_no_room % 1000 == 0)
        tc_error("cleaner: no room in the log for the record of its new end (group %llu "
                 "goes; %llu times)", (unsigned long long)k->seq,
                 (unsigned long long)k->tail_no_room);
}

/* 3. Record the new tail durably: past the batch's last group (k->slot),
 * in one record and one sync for all its groups.  Every copy the batch
 * made was appended before the record, and the sync covers them with it:
 * a crash before the sync ends recovers the old tail, and every group of
 * the batch still in the log, whole (nothing of them is dropped or
 * reused before tail_synced()); a crash after recovers the copies.  The
 * tail only ever moves forward: a detach empties the log (tail_seq =
 * next_seq) only once no pass runs (cache.c, drain_synced()), and a pass
 * ending after that would otherwise give back groups the detach ended. */
static void retire_batch(struct cleaner *k)
{
    struct cache *c = k->c;
    TC_ASSERT(k->batched < BATCH_MAX);
    k->drops_end[k->batched] = k->ndrops;
    uint32_t next = (k->slot + 1) % c->sp.groups_cap;
    uint32_t pos = (k->slot + c->sp.groups_cap - c->sp.group_tail) % c->sp.groups_cap;
    c->lg.tail_seq = TC_MAX(c->lg.tail_seq, pos + 1 < c->sp.ngroups ? group_at(&c->sp, next)->seq
                                                                      : c->lg.next_seq);
    uint64_t room = log_room(c);
    if (k->tail_room_min == 0 || room + 1 < k->tail_room_min)
        k->tail_room_min = room + 1;
    if (!log_seal_all(c, true)) {
        /* No room even for a header: the new tail goes with the next
         * chunk written, and the group goes now.  Keeping it instead
         * would wedge the log: nothing else frees room.  copy_fits()
         * keeps the cleaner's own copies from causing this; a device
         * failure's records, which take the reserve unbounded, still can
         * (multi/failure).  Counted: status cleaner.tail_no_room. */
        k->tail_no_room++;
        tail_no_room_report(k);
    }
    k->lw.fn = tail_synced;
    k->tail_syncing = true;
    k->tail_ns = tc_now_ns();
    log_sync(c, &k->lw);
    /* The next group's walk is likely to follow this sync: read it
     * meanwhile (after the sync's writes, which go first; not if the
     * sync ended at once). */
    if (k->tail_syncing && pos + 1 < c->sp.ngroups && (k->space_waiters != NULL || k->active))
        ahead_start(k, next);
}

/* The sectors of `m` (of fragment fid) whose data in buf (laid out by
 * sector) matches the checksum its chunk recorded; the others are cleared
 * from m.  A sector whose checksum is not at hand counts as damaged. */
static void intact_sectors(struct cache *c, uint32_t fid, const uint8_t *buf, struct tc_mask *m)
{
    struct cfrag f = frag_view(&c->map.idx, fid);
    struct tc_mask st;
    frag_stored(&c->map.idx, fid, &st);
    for (unsigned s = 0; s < c->spb; s++) {
        if (!mask_test(m, s))
            continue;
        uint32_t crc;
        if (!verify_lookup(c->verify, f.seg, f.off + mask_rank(&st, s), 1, &crc) ||
            tc_crc32c(0, buf + (size_t)s * TC_SECTOR, TC_SECTOR) != crc)
            m->w[s / 64] &= ~(1ull << (s % 64));
    }
}

static void later_read(void *arg, int err)
{
    struct later *l = arg;
    struct cleaner *k = l->k;
    struct cache *c = k->c;
    uint32_t id;
    uint32_t fid = map_find_fragment(c, l->oblock, l->seg, l->off, &id);
    if (fid != NIL) {
        struct tc_mask cur, v, d;
        frag_current(&c->map.idx, id, fid, &cur);
        ce_get_masks(&c->map.idx, id, &v, &d);
        mask_and(&d, &cur);
        struct tc_mask good = cur, good_dirty;
        /* What is current of it now was read (a newer write may have
         * superseded some of it meanwhile; the rest is unchanged). */
        bool read_all = mask_covers(&l->cur, &cur);
        if (err && err != -EBADMSG && !mask_empty(&d) && seg_usable(c, l->seg) &&
            !read_tries_spent(k)) {
            /* Not read (an I/O error, not proven damage) on a device still
             * in service: it may read fine later, and nothing else holds
             * it.  The group stays; the cleaner tries again. */
            k->keep_group = true;
            k->unreadable = true;
            goto done;
        }
        if (err && read_all && !mask_empty(&d)) {
            /* Some sectors failed: keep those that still match their
             * checksums, so that only the damaged ones are lost. */
            intact_sectors(c, fid, l->buf, &good);
            good_dirty = d;
            mask_and(&good_dirty, &good);
            if (!mask_empty(&good) && reinsert(c, l->oblock, id, &good, &good_dirty, l->buf,
                                               NULL, NULL, copy_flags(c, l->wt_seq), true)) {
                mask_andnot(&d, &good);
                /* The copy superseded those sectors: what is left of it. */
                fid = map_find_fragment(c, l->oblock, l->seg, l->off, &id);
                if (fid == NIL)
                    goto done;
                frag_current(&c->map.idx, id, fid, &cur);
            } else if (!mask_empty(&good_dirty)) {
                /* No room to copy the intact sectors: only the damaged
                 * dirty ones are lost (recorded, then clean, so that
                 * writeback leaves them and reads of them fail with EIO);
                 * the intact dirty ones stay in this fragment, and the
                 * group with them, until writeback has written them to
                 * the origin -- as for a copy refused after a clean read.
                 * Dropping the fragment now would lose data that is
                 * intact and exists nowhere else. */
                struct tc_mask damaged = d;
                mask_andnot(&damaged, &good);
                if (!mask_empty(&damaged)) {
                    uint64_t off = l->oblock * c->block_size;
                    tc_error("cleaner: dirty data of origin bytes %llu..%llu is damaged in the "
                             "cache; reads of its %u lost sectors fail with EIO until "
                             "rewritten", (unsigned long long)off,
                             (unsigned long long)(off + c->block_size - 1),
                             mask_count(&damaged));
                    map_lose_dirty(c, l->oblock, &damaged);
                    map_mark_clean(c, id, &damaged);
                }
                k->keep_group = true;
                k->no_room_to_copy = true;
                goto done;
            }
        }
        if (err == 0 && read_all && !mask_empty(&cur) &&
            reinsert(c, l->oblock, id, &cur, &d, l->buf, NULL, NULL, copy_flags(c, l->wt_seq), false)) {
            /* kept */
        } else if (mask_empty(&d)) {
            add_drop(k, l->oblock, id, l->seg, l->off);
        } else if (err == 0) {
            /* Read fine but no room to copy it: keep the group for now,
             * and write its dirty data back before the next attempt (a
             * copy would find no more room then). */
            k->keep_group = true;
            k->no_room_to_copy = true;
        } else {
            /* Dirty, proven damaged (read, not matching its checksums), on
             * a device no longer in service, or unreadable for as many
             * attempts as read_tries_spent() allows while appends wait for
             * the room, and neither written back nor copied: its data is
             * lost.
             * Recorded as lost, so that reads of those sectors fail with
             * EIO rather than return the origin's older data once the
             * fragment is dropped. */
            uint64_t off = l->oblock * c->block_size;
            tc_error("cleaner: dirty data of origin bytes %llu..%llu could not be kept; reads "
                     "of its %u lost sectors fail with EIO until rewritten",
                     (unsigned long long)off, (unsigned long long)(off + c->block_size - 1),
                     mask_count(&d));
            map_lose_dirty(c, l->oblock, &d);
            add_drop(k, l->oblock, id, l->seg, l->off);
        }
    }
done:
    bufpool_put(l->buf, l->size);
    l->buf = NULL;
    later_done(k);
}

static void decide_laters(void *arg, int err)
{
    struct cleaner *k = arg;
    struct cache *c = k->c;
    (void)err;
    TC_ASSERT(k->join.pending == 0);
    if (k->wb_start_ns) {
        k->wb_groups++;
        k->wb_ns += tc_now_ns() - k->wb_start_ns;
        k->wb_start_ns = 0;
    }
    join_get(&k->join);         /* held while issuing */
    for (size_t i = 0; i < k->nlaters; i++) {
        struct later *l = &k->laters[i];
        uint32_t id;
        if (!later_current(c, l, &id, &l->cur))
            continue;
        struct tc_mask v;
        ce_get_masks(&c->map.idx, id, &v, &l->d);
        mask_and(&l->d, &l->cur);
        if (!mask_empty(&l->d) && !k->refused_dirty && writeback_refused(c, l->oblock)) {
            k->refused_dirty = true;
            k->refused_err = writeback_refusal(c, l->oblock);
        }
        bool keep = !mask_empty(&l->d) ||
                    policy_keep(c->policy, l->oblock, &CE(&c->map.idx, id)->hint);
        if (!keep) {
            add_drop(k, l->oblock, id, l->seg, l->off);
            continue;
        }
        /* Kept (hot, or still dirty because writeback failed): copy it. */
        l->size = (size_t)c->spb * TC_SECTOR;
        l->buf = bufpool_get(l->size);
        join_get(&k->join);
        cache_gather_robust(c, l->oblock, &l->cur, l->buf, later_read, l);
    }
    later_done(k);
}

/* ---- 3 and 4: the tail is durable; drop and free ---- */

static void tail_synced(struct log_waiter *lw, int err)
{
    struct cleaner *k = container_of(lw, struct cleaner, lw);
    struct cache *c = k->c;
    k->tail_syncing = false;
    if (err) {
        /* The new tail is not durable: keep the group, try again later.
         * Later must come by itself: the sync that failed may be the one
         * that failed a cache device (the syncs it covered fail once), and
         * appends waiting for room (cleaner_wait_space()) kick no one --
         * without the timer they would wait for good. */
        tc_error("cleaner: recording the log tail failed: %s", strerror(-err));
        for (unsigned i = 0; i <= k->batched; i++)
            group_at(&c->sp, (k->first_slot + i) % c->sp.groups_cap)->retiring = false;
        k->running = false;
        k->retry.fn = retry_fn;
        if (!k->retry.armed)
            timer_arm(c->reactor, &k->retry, 50ull * 1000 * 1000);
        return;
    }
    /* A device began draining during the walk (kick_fn()): its dirty data
     * stays until written back.  The first group of the batch holding
     * some is kept, and those after it; the drain's end kicks the cleaner
     * again.  (The tail written past them only drops entries of theirs
     * from a restart's log: clean ones, or ones copied or written back --
     * and the draining device's own, which a restart distrusts anyway.)
     * The groups before it go. */
    unsigned go = 0;
    for (bool held = false; go <= k->batched && !held; go += !held) {
        struct group *gr = group_at(&c->sp, (k->first_slot + go) % c->sp.groups_cap);
        for (unsigned i = 0; i < gr->nsegs && !held; i++) {
            struct segment *sg = space_seg(&c->sp, gr->segs[i]);
            held = c->devs[sg->dev].state == CDEV_DRAINING && sg->live > 0;
        }
    }
    for (unsigned i = go; i <= k->batched; i++)
        group_at(&c->sp, (k->first_slot + i) % c->sp.groups_cap)->retiring = false;
    if (go == 0) {
        k->running = false;
        return;
    }
    /* The drops of the groups that go (a group's are listed after those
     * of the groups before it). */
    size_t ndrops = k->drops_end[go - 1];
    for (size_t i = 0; i < ndrops; i++) {
        struct drop *d = &k->drops[i];
        if (i + PREFETCH_AHEAD < ndrops) {
            /* What the drop PREFETCH_AHEAD further will look at. */
            uint64_t ob = d[PREFETCH_AHEAD].oblock;
            index_prefetch_hint(&c->map.idx, ob, d[PREFETCH_AHEAD].id);
            block_prefetch(c->locks, ob);
            policy_prefetch(c->policy, ob);
        }
        uint32_t id, fid = map_find_fragment_hint(c, d->oblock, d->id, d->seg, d->off, &id);
        if (fid == NIL)
            continue;
        bool gone = map_drop_found(c, d->oblock, id, fid);
        block_gen_bump(c->locks, d->oblock);
        if (gone) {
            policy_evicted(c->policy, d->oblock);
            c->st.demotions++;
        }
    }
    /* Mirror copies and superseded versions may still be counted in the
     * groups' segments; nothing points there any more.  They go oldest
     * first: the batch is the oldest groups of the log, in order. */
    for (unsigned b = 0; b < go; b++) {
        uint32_t slot = (k->first_slot + b) % c->sp.groups_cap;
        struct group *g = group_at(&c->sp, slot);
        TC_ASSERT(slot == group_slot_of_oldest(&c->sp) && g->seq < c->lg.tail_seq);   /* invariant 5 */
        for (unsigned i = 0; i < g->nsegs; i++) {
            TC_ASSERT(space_seg(&c->sp, g->segs[i])->live == 0);   /* invariants 4 and 10 */
            space_seg(&c->sp, g->segs[i])->live = 0;
            verify_forget(c->verify, g->segs[i]);
        }
        g->retiring = false;
        space_free_group(&c->sp);
        c->st.groups_retired++;
        k->groups++;
    }
    /* What was read ahead of a group that went is of no use any more. */
    if (k->ahead_n > 0 && k->ahead_inflight == 0 && k->ahead_seq < c->lg.tail_seq)
        ahead_release(k);
    k->tail_syncs++;
    if (go > 1)
        k->batch_syncs++;
    uint64_t now = tc_now_ns();
    k->reclaim_ns += now - k->start_ns;
    k->tail_sync_ns += now - k->tail_ns;
    k->no_room_to_copy = false;
    k->ncarried = k->nsorted = 0;
    k->carried_seq = 0;
    k->read_retry_ns = 0;
    k->reads_failed_in_row = 0;
    k->running = false;
    if (k->refused_dirty && c->sp.free_segs <= k->free_at_start) {
        /* A round of the log's groups of such passes (one, once the
         * origin holds the room): nothing comes of them. */
        if (++k->futile_passes >= TC_MAX(c->sp.ngroups, 1u) || k->holding) {
            cleaner_space_freed(c);     /* the reserve's appends may go */
            hold_by_origin(k);
            return;
        }
    } else {
        hold_end(k);
    }
    cleaner_space_freed(c);
    cleaner_kick(c);
}

void cleaner_device_failed(struct cache *c)
{
    struct cleaner *k = c->cleaner;
    if (k && k->running)
        k->restart = true;
    if (k) {
        k->backing_off = false;     /* the failure dealt with what was unreadable */
        hold_end(k);
        k->ncarried = k->nsorted = 0;   /* the copies may have been on the device */
        k->carried_seq = 0;
    }
}

void cleaner_costs(const struct cache *c, uint64_t *walk_read_bytes, uint64_t *tail_syncs)
{
    const struct cleaner *k = c->cleaner;
    *walk_read_bytes = k ? k->walk_read_bytes : 0;
    *tail_syncs = k ? k->tail_syncs : 0;
}

void cleaner_status_json(struct cache *c, struct tc_json *j)
{
    struct cleaner *k = c->cleaner;
    if (k == NULL)
        return;
    unsigned waiters = 0;
    for (struct log_waiter *w = k->space_waiters; w; w = w->next)
        waiters++;
    json_begin_object(j, "cleaner");
    json_bool(j, "running", k->running);
    json_bool(j, "waiting_for_tail_sync", k->tail_syncing);
    json_bool(j, "retry_armed", k->retry.armed);
    /* Paused for a running checkpoint (cleaner_pause()), and the passes
     * not started meanwhile. */
    json_bool(j, "paused_for_checkpoint", k->paused);
    json_uint(j, "passes_paused", k->passes_paused);
    json_uint(j, "appends_waiting_for_room", waiters);
    /* The groups of the pass under way (more than one: a batch). */
    json_uint(j, "pass_groups", k->running ? k->batched + 1 : 0);
    json_uint(j, "groups_retired", k->groups);
    /* Their reclaims' time, from the start of the walk to the group's
     * release, and the part of it spent on the sync of the new tail. */
    json_micros_as_seconds(j, "reclaim_seconds", k->reclaim_ns / 1000);
    json_micros_as_seconds(j, "tail_sync_seconds", k->tail_sync_ns / 1000);
    /* Groups whose dirty data the pass wrote back before they could go,
     * and the time it waited for the origin. */
    json_uint(j, "writeback_groups", k->wb_groups);
    json_micros_as_seconds(j, "writeback_seconds", k->wb_ns / 1000);
    /* The walks' time (their reads, and deciding each entry), the chunk
     * bytes they read from the devices, and those found in memory. */
    json_micros_as_seconds(j, "walk_seconds", k->walk_ns / 1000);
    json_uint(j, "walk_read_bytes", k->walk_read_bytes);
    json_uint(j, "walk_image_bytes", k->walk_image_bytes);
    /* Groups read ahead (reading ahead, above), the bytes read so, and
     * those the walks used. */
    json_uint(j, "groups_read_ahead", k->ahead_groups);
    json_uint(j, "read_ahead_bytes", k->ahead_bytes);
    json_uint(j, "read_ahead_used_bytes", k->ahead_used_bytes);
    /* Reads ahead not yet answered by their device (at most one group's). */
    json_uint(j, "read_ahead_in_flight", k->ahead_inflight);
    /* Tail records synced that let groups go, those that let several go
     * (a batch: appends waited for room), and groups per record. */
    json_uint(j, "tail_syncs", k->tail_syncs);
    json_uint(j, "batched_tail_syncs", k->batch_syncs);
    json_double(j, "groups_per_tail_sync",
                k->tail_syncs ? (double)k->groups / (double)k->tail_syncs : 0);
    json_uint(j, "batches_cut", k->batch_cuts);
    /* Segments of reclaimed groups not read: nothing in them was live. */
    json_uint(j, "segments_skipped", k->segs_skipped);
    json_uint(j, "read_retries", k->read_retries);
    json_uint(j, "read_retry_delay_ms", k->read_retry_ns / 1000000);
    json_uint(j, "lost_records_carried", k->lost_carried);
    json_uint(j, "copies_refused", c->st.copies_refused);
    json_uint(j, "tail_no_room", k->tail_no_room);
    /* The bound's promise: at least this much room (sectors) was left by
     * every pass's copies for its tail record and what else must always
     * be appendable. */
    json_uint(j, "record_room", record_room(c));
    if (k->tail_room_min > 0)
        json_uint(j, "tail_room_min", k->tail_room_min - 1);
    /* Each device's share of the reserve is meant to leave at least a
     * segment here, whichever device fails (space_dev_reserve()). */
    if (k->failure_room_min > 0)
        json_uint(j, "failure_room_min", k->failure_room_min - 1);
    json_uint(j, "records_deferred", k->records_deferred);
    json_uint(j, "claim_waits", k->claim_waits);
    /* Tombstones and clean records bounded to the budget of the reserve
     * (cleaner_client_record_fits()): the budget (sectors), and the
     * records refused by it (tombstones then wait for room, clean records
     * are deferred: writeback.clean_records_deferred). */
    json_uint(j, "client_record_budget", cleaner_client_record_budget(c));
    json_uint(j, "client_records_refused", k->client_records_refused);
    /* Room held by the origin (hold_by_origin()): the cleaner held, client
     * writes needing room failing now, and the pieces failed so. */
    json_bool(j, "held_by_origin", k->holding);
    json_bool(j, "origin_holds_room", holds_room(k));
    json_uint(j, "room_held_writes", k->held_writes);
    json_uint(j, "room_refused_writes", k->refused_writes);
    json_uint(j, "hold_rounds", k->hold_rounds);
    /* What those writes are told now ("": they wait for room, or find it). */
    json_string(j, "room_error", !holds_room(k) ? ""
                                 : k->c->vol->origin->state == TC_DEV_OFFLINE
                                     ? "EIO: the origin is offline"
                                 : room_err(k) == -ENOSPC
                                     ? "ENOSPC: the origin refuses write-backs: no space"
                                     : "EIO: the origin refuses write-backs");
    json_end_object(j);
}
