/*
 * Writeback: dirty data from the cache to the origin.
 *
 * Background passes walk the dirty bitmap (one bit per origin block) in
 * ascending order from a cursor, in jobs of up to 64 blocks:
 *
 *   job: read each block's cached sectors (checked)
 *        -> make the cache log durable (a cache flush, shared with others)
 *        -> build runs: maximal stretches of cached sectors that start and
 *           end with dirty ones, across neighbouring blocks (clean cached
 *           sectors between dirty ones are written too, so neighbours merge
 *           into one large write)
 *        -> write the runs to the origin, in ascending order (jobs of a
 *           pass take turns, so the origin sees one ascending stream)
 *        -> flush the origin
 *        -> for each block not changed meanwhile: clear its dirty bits and
 *           append a CLEAN record naming the version written back
 *
 * The cache flush before the origin writes: the version written back may
 * sit in a chunk not yet flushed, while an older version of the same
 * sectors is durable in the log (made clean by an earlier writeback).
 * Were the origin written and the newer chunk lost to a power failure,
 * recovery would bring the older version back as clean, and the cache
 * would serve older data than the origin holds.  As with write-through,
 * the origin changes only after the cache durably records the version it
 * gets.
 *
 * A block rewritten while its writeback was in flight stays dirty: the
 * newer version goes in a later pass.  Client writes that go to the origin
 * directly wait for a block's writeback to end (block_wait_wb), so older
 * data never lands after newer.
 *
 * Pacing: no background writeback below the dirty target while clients
 * are busy; a trickle when they are idle; two jobs at a time above the
 * target; eight above the high mark, when idle, or while draining
 * (tiercache flush, detach, a switch out of writeback mode).
 *
 * The dirty throttle.  Clients fill a cache far faster than writeback
 * empties it (a spindle takes some 200 random writes a second, the cache
 * tens of thousands).  Unchecked, the log fills with dirty data spread
 * over nearly every block, and the cleaner -- which must write back all
 * dirty data in the oldest group before reusing it -- holds every write
 * for as long as writing back almost the whole dirty set takes: tens of
 * seconds, longer than many clients wait for a request.  So above the high
 * mark, client writes that add dirty data go only as fast as writeback
 * takes data out:
 *
 *   dirty ratio   up to high          free
 *                 high .. ceiling     each byte written back lets in
 *                                     (ceiling - ratio) / (ceiling - high)
 *                                     bytes: 1 at the high mark, 0 at the
 *                                     ceiling
 *                 ceiling and above   none until writeback brings it down
 *
 * with ceiling = high + (1 - high) / 2.  Held writes go in arrival order.
 * Whenever writeback cannot run (the origin unreachable, failures being
 * waited out, shutting down) the throttle lets everything through: then
 * the cache absorbs writes until it is full, which is what a writeback
 * cache is for while its origin is away.
 *
 * Origin failures: a block whose write (or the flush after it) fails stays
 * dirty -- nothing is ever dropped -- and is written again later.  Two
 * back-offs keep a refusing origin from being hammered:
 *
 *  - per job: after a failed job new passes wait (100 ms, doubling with
 *    each failed job in a row, at most 5 s);
 *  - per block: each block that failed is kept in a table with its count
 *    of failures in a row and the time of its next attempt (100 ms,
 *    doubling with each failure, at most 30 s).  Passes skip a block until
 *    then, and so does a write that needs the block written back first (a
 *    write-through write to a block still dirty after a mode change or a
 *    restart): it waits for that attempt, and once the block has failed
 *    WB_FAILURES_EIO times in a row such writes fail at once instead of
 *    waiting (writing around the dirty data would let it overwrite the
 *    newer write later), with the origin's reason: ENOSPC when its last
 *    answer for the block said it is out of space, else EIO (the table
 *    keeps each block's last error: writeback_refusal()).  The first
 *    write the origin accepts removes the block from the table: the
 *    back-off starts over.  A failed run's blocks are merged into
 *    smaller runs next time, and into none once the origin is seen taking
 *    other writes (build_runs()), so that one the origin refuses does not
 *    fail the neighbours it was merged with.
 *
 * Every block in the table is dirty (a block turning clean leaves it:
 * writeback_forget()), so "every dirty block is in the table" is a count
 * comparison; when that holds and no attempt is due, passes do not scan at
 * all: CPU use while an origin refuses writes is one timer tick.  Failures
 * are counted (status: retries, block_failures, blocks_in_backoff) and
 * logged at most one line per failed job, and at most a few lines a second
 * overall (LOG_RATE; the rest are counted and summed up in one line).
 * While the origin is unreachable (reconnecting or offline) no pass
 * starts.  A job whose writes were acknowledged on a connection that was
 * lost before the flush is treated as failed too: the server may have died
 * with the data unflushed, so the blocks are written again.  So is a write
 * that failed in doubt (-ETIMEDOUT: its connection stopped answering and
 * was fenced, dev_nbd.c): the block stays dirty, and the device sends the
 * next attempt, with the newest cached version, only once the old write
 * can no longer land.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/blocklock.h"
#include "engine/cache.h"
#include "engine/cacheio.h"
#include "engine/cleaner.h"
#include "engine/failure.h"
#include "engine/lostlog.h"
#include "engine/map.h"
#include "engine/originwin.h"
#include "engine/seqrec.h"
#include "engine/writeback.h"
#include "engine/writepath.h"
#include "io/bufpool.h"
#include "util/join.h"
#include "util/json.h"
#include "util/log.h"
#include "util/misc.h"

#define JOB_BLOCKS 64
#define RUN_MAX_BYTES (4u << 20)
#define TICK_NS (100ull * 1000 * 1000)
#define IDLE_NS (1000ull * 1000 * 1000)
/* The commit interval (tick()); for tests only, TIERCACHE_TEST_COMMIT_MS
 * sets it (not below a tick), so that a test that waits for commits does
 * not wait 2 s for each. */
#define COMMIT_NS (2000ull * 1000 * 1000)
/* Quiet time after a cache flush before a header is written only to
 * record it (log_mark_flushed()): a FLUSH stream faster than this pays
 * nothing, as each chunk's header records the flush before it. */
#define MARK_DELAY_NS (1000ull * 1000 * 1000)
#define RETRY_FIRST_NS (100ull * 1000 * 1000)
#define RETRY_MAX_NS (5000ull * 1000 * 1000)
/* A drain (flush, detach) gives up after this many failed jobs in a row. */
#define DRAIN_GIVE_UP 5
/* Per-block back-off after failed write-backs. */
#define BLOCK_RETRY_FIRST_NS (100ull * 1000 * 1000)
#define BLOCK_RETRY_MAX_NS (30000ull * 1000 * 1000)
#define FAIL_BUCKETS 1024
/* Failure messages: at most LOG_BURST at once, LOG_RATE a second after. */
#define LOG_RATE 4.0
#define LOG_BURST 10.0

/* A block whose write-back failed: in the table until it is written back
 * or turns clean otherwise. */
struct wb_fail {
    struct wb_fail *next;           /* hash chain */
    struct wb_fail *wnext;          /* on the waiting list (has waiters) */
    uint64_t oblock;
    uint64_t retry_at;              /* no attempt before (monotonic ns) */
    uint32_t failures;              /* failed write-backs in a row */
    /* The most blocks a run holding this one may merge (0: no bound), and
     * wb->ok_blocks at its last failure (see build_runs()). */
    uint32_t run_limit;
    uint64_t ok_mark;
    bool dirty_only;                /* its jobs read and write only its dirty
                                     * sectors (failed_run_limit()) */
    int err;                        /* the last failure's error (negative
                                     * errno: the origin's answer, or -EIO
                                     * for a cache read, a lost connection) */
    bool listed;                    /* on the waiting list */
    struct block_waiter *waiters;   /* writeback_block() calls waiting for retry_at */
};

struct wb_job;

struct wb_block {
    struct wb_job *job;
    uint64_t oblock;
    uint64_t gen;
    struct tc_mask valid, dirty;
    uint8_t *data;              /* the block's cached sectors, by sector */
    size_t size;
    bool ok, failed;
    int err;                    /* failed: its run's write error */
    /* A block being drained whose read failed, or one whose read found
     * damage (damage_probe): read again sector by sector (probe_s the
     * next), good and bad the outcome.  bad: sectors that failed -- in a
     * damage probe, only those proven damaged (-EBADMSG); a sector that
     * could not be read at all is neither good nor bad then, and stays
     * dirty for a later attempt. */
    unsigned probe_s;
    struct tc_mask good, bad;
    bool damage_probe;
    bool dirty_only;            /* valid narrowed to dirty after a checksum mismatch */
    /* Started while a flush of the dirty set at its start drained (the
     * drain's number, 0: none): written whole, it writes the block's
     * version at the flush's start or a newer one (see "Draining"). */
    uint64_t flush_no;
    bool narrowed;              /* dirty narrowed to the sectors a probe read */
    /* Its failure table entry's run_limit when the job began (0: no
     * bound), and the most blocks of a run holding it whose write failed
     * (0: none) -- see build_runs(). */
    uint32_t run_limit, failed_run;
};

struct wb_run {
    struct wb_job *job;
    struct tc_dev_io dio;
    uint8_t *buf;
    size_t size;
    unsigned first, last;       /* blocks it covers */
};

struct wb_job {
    struct writeback *wb;
    struct wb_block b[JOB_BLOCKS];
    unsigned n;
    struct wb_run *runs;
    unsigned nruns;
    /* The block reads, then the run writes; err: the first failed run's
     * error (reads fail block by block: b->ok). */
    struct tc_join join;
    bool pass;                  /* a background pass job (takes turns) */
    uint64_t pass_no;           /* which pass it belongs to */
    uint64_t ticket;
    struct tc_dev_io flush;
    struct log_waiter sync_w;   /* the cache flush before the origin writes */
    struct wb_job *next_syncing;    /* on wb->syncing while sync_w waits */
    bool cancelled;             /* a pass job the stop ended before it wrote */
    int flush_err;
    uint64_t epoch;             /* the origin's connection epoch at the writes */
    void (*done)(void *arg, int err);
    void *arg;
    struct wb_job *next_waiting;
};

struct writeback {
    struct cache *c;
    uint64_t cursor;
    unsigned jobs;              /* pass jobs in flight */
    unsigned all_jobs;
    uint64_t next_ticket, turn;
    struct wb_job *waiting;     /* pass jobs waiting for their turn */
    struct wb_job *syncing;     /* jobs waiting for their cache flush (sync_w) */
    struct tc_timer tick;
    uint64_t last_commit;
    uint64_t commit_ns;             /* COMMIT_NS, or the test variable */
    bool no_passes;                 /* TIERCACHE_TEST_NO_WRITEBACK_PASSES: no
                                     * background pass (window()) */
    bool no_marks;                  /* TIERCACHE_TEST_NO_FLUSH_MARKS: no header
                                     * written only to carry a flushed mark */
    uint64_t last_pass_off;     /* end of the last run written in pass_no */
    uint64_t pass_no;
    /* writeback_start() ran: until then no tick and no pass (the cache is
     * still being opened; see writeback_start()). */
    bool started;
    bool stopped;
    /* figures */
    uint64_t bytes, writes, jobs_done, errors, out_of_order;
    uint64_t retries;           /* blocks left dirty by a failed job */
    uint64_t failed_jobs;
    unsigned fail_streak;       /* failed jobs in a row */
    uint64_t retry_at;          /* no new pass job before (monotonic ns) */
    uint64_t rate_bytes, rate_start;
    double rate;
    /* draining */
    bool draining;
    void (*drain_progress)(void *arg, uint64_t left, uint64_t done_bytes);
    void (*drain_done)(void *arg, int err);
    void *drain_arg;
    uint64_t drain_start_bytes, drain_last_progress, drain_stuck_passes;
    uint64_t drain_dirty_at_pass;
    /* A flush of the dirty set at its start (writeback_drain()): the
     * blocks dirty then and not yet known written back since (a bitmap
     * over the origin's blocks, as the dirty bits; NULL: the drain is of
     * everything), how many bits are set, the scan's cursor, and the
     * flush's number (jobs started under it carry it: flush_no). */
    uint64_t *want;
    uint64_t want_left, want_cursor, flush_no;
    /* the dirty throttle: held client writes, oldest first */
    struct wb_throttle_waiter *throttled, *throttled_tail;
    int64_t credit;             /* bytes of dirty data that may come in */
    uint64_t throttled_writes, throttle_wait_ns, throttle_max_wait_ns;
    unsigned throttled_now;
    /* the commit interval's origin flush */
    bool committing;
    struct stable_flush commit_flush;   /* the commit's origin flush */
    struct tc_dev_io commit_dio;
    /* per-block failures (see the top of this file) */
    struct wb_fail *fail[FAIL_BUCKETS];
    uint64_t nfail;                 /* blocks in the table (all dirty) */
    uint64_t nfail_eio;             /* ... that failed WB_FAILURES_EIO times or more */
    uint64_t fail_next_due;         /* no attempt in the table is due before this */
    struct wb_fail *fail_waiting;   /* entries with waiters */
    struct block_waiter *wake;      /* waiters to run from wake_task */
    struct tc_task wake_task;
    bool wake_queued;
    /* Stopped, the last job just ended: free_task frees the state (not
     * job_finish() itself, whose callers may still use it). */
    struct tc_task free_task;
    bool free_queued;
    uint64_t block_failures;        /* failed write-backs of blocks, in all */
    uint64_t ok_blocks;             /* blocks of runs the origin took, in all
                                     * (failed_run_limit()) */
    uint64_t blocks_recovered;      /* blocks written back after failing */
    uint64_t writes_failed;         /* client writes failed: their block's write-back failed */
    char last_why[128];             /* the last failed job's reason */
    char drain_why[320];            /* why the last drain gave up */
    /* the log's rate limit */
    double log_tokens;
    uint64_t log_last_ns, log_suppressed;
    /* clean records deferred (clean_record()), oldest first */
    struct clean_owed *owed;
    size_t nowed, owed_cap;
    uint64_t clean_deferred, clean_replayed, clean_given_up;
};

/* A clean record not appended yet: the block's fragment at seg:off (its
 * newest when written back), in the segment's group of sequence seq. */
struct clean_owed {
    uint64_t oblock;
    uint64_t seq;
    uint32_t seg;
    uint16_t off;
    struct tc_mask m;
};

/* The most clean records kept deferred (some 3.5 MiB); beyond it one is
 * given up, as one finding no room at all was before deferral. */
#define OWED_MAX 65536u

static void pace(struct writeback *wb);
static void throttle_credit(struct writeback *wb, uint64_t bytes);
static void free_if_done(struct cache *c);

/* ---- the failure log's rate limit ---- */

/* The suppressed messages' summary, once the rate allows a line. */
static void log_refill(struct writeback *wb)
{
    uint64_t now = tc_now_ns();
    wb->log_tokens += (double)(now - wb->log_last_ns) / 1e9 * LOG_RATE;
    wb->log_tokens = TC_MIN(wb->log_tokens, LOG_BURST);
    wb->log_last_ns = now;
    if (wb->log_suppressed && wb->log_tokens >= 1) {
        wb->log_tokens -= 1;
        tc_error("writeback: %llu more failure messages suppressed (at most %.0f a second "
                 "are logged)", (unsigned long long)wb->log_suppressed, LOG_RATE);
        wb->log_suppressed = 0;
    }
}

/* May a failure message be logged now?  If not, it is counted. */
static bool log_allow(struct writeback *wb)
{
    log_refill(wb);
    if (wb->log_tokens < 1) {
        wb->log_suppressed++;
        return false;
    }
    wb->log_tokens -= 1;
    return true;
}

bool writeback_log_allow(struct cache *c)
{
    return c->wb == NULL || log_allow(c->wb);
}

/* ---- per-block failures ---- */

static unsigned fail_bucket(uint64_t oblock)
{
    return (unsigned)((oblock * 0x9E3779B97F4A7C15ull) >> 40) % FAIL_BUCKETS;
}

static struct wb_fail *fail_find(struct writeback *wb, uint64_t oblock)
{
    if (wb->nfail == 0)
        return NULL;
    for (struct wb_fail *f = wb->fail[fail_bucket(oblock)]; f; f = f->next)
        if (f->oblock == oblock)
            return f;
    return NULL;
}

static void wake_task_fn(struct tc_task *t);

static void wake_later(struct writeback *wb, struct block_waiter *list)
{
    while (list) {
        struct block_waiter *w = list;
        list = w->next;
        w->next = wb->wake;
        wb->wake = w;
    }
    if (wb->wake && !wb->wake_queued) {
        wb->wake_queued = true;
        reactor_defer(wb->c->reactor, &wb->wake_task);
    }
}

/* The block leaves the table; its waiters look at it again. */
static void fail_remove(struct writeback *wb, uint64_t oblock)
{
    struct wb_fail **pp = &wb->fail[fail_bucket(oblock)];
    while (*pp && (*pp)->oblock != oblock)
        pp = &(*pp)->next;
    struct wb_fail *f = *pp;
    if (f == NULL)
        return;
    *pp = f->next;
    if (f->listed) {
        struct wb_fail **lp = &wb->fail_waiting;
        while (*lp != f)
            lp = &(*lp)->wnext;
        *lp = f->wnext;
    }
    wake_later(wb, f->waiters);
    wb->nfail--;
    if (f->failures >= WB_FAILURES_EIO)
        wb->nfail_eio--;
    free(f);
}

void writeback_forget(struct cache *c, uint64_t oblock)
{
    if (c->wb && c->wb->nfail)
        fail_remove(c->wb, oblock);
}

unsigned writeback_block_failures(struct cache *c, uint64_t oblock)
{
    struct wb_fail *f = c->wb ? fail_find(c->wb, oblock) : NULL;
    return f ? f->failures : 0;
}

bool writeback_block_backing_off(struct cache *c, uint64_t oblock)
{
    struct wb_fail *f = c->wb ? fail_find(c->wb, oblock) : NULL;
    return f && f->retry_at > tc_now_ns();
}

bool writeback_refused(struct cache *c, uint64_t oblock)
{
    return c->vol->origin->state == TC_DEV_OFFLINE ||
           writeback_block_failures(c, oblock) >= WB_FAILURES_EIO;
}

int writeback_refusal(struct cache *c, uint64_t oblock)
{
    struct wb_fail *f = c->wb ? fail_find(c->wb, oblock) : NULL;
    if (f && f->failures >= WB_FAILURES_EIO)
        return writeback_client_err(f->err);
    return c->vol->origin->state == TC_DEV_OFFLINE ? -EIO : 0;
}

void writeback_note_write_failed(struct cache *c)
{
    if (c->wb)
        c->wb->writes_failed++;
}

/* One more failed write-back of a dirty block, for err: the next attempt
 * waits longer.  Returns the delay. */
static uint64_t fail_add(struct writeback *wb, uint64_t oblock, int err, uint64_t now)
{
    struct wb_fail *f = fail_find(wb, oblock);
    if (f == NULL) {
        f = tc_xcalloc(1, sizeof *f);
        f->oblock = oblock;
        unsigned h = fail_bucket(oblock);
        f->next = wb->fail[h];
        wb->fail[h] = f;
        wb->nfail++;
    }
    f->failures++;
    f->err = err;
    if (f->failures == WB_FAILURES_EIO)
        wb->nfail_eio++;
    uint64_t delay = BLOCK_RETRY_FIRST_NS << TC_MIN(f->failures - 1, 20u);
    delay = TC_MIN(delay, BLOCK_RETRY_MAX_NS);
    f->retry_at = now + delay;
    if (wb->fail_next_due == 0 || f->retry_at < wb->fail_next_due)
        wb->fail_next_due = f->retry_at;
    wb->block_failures++;
    return delay;
}

/* Waiters whose block's attempt is due: they call writeback_block() again
 * (which now starts it).  Run from the tick and the wake task. */
static void fail_run_due(struct writeback *wb)
{
    uint64_t now = tc_now_ns();
    struct block_waiter *due = NULL;
    for (struct wb_fail **lp = &wb->fail_waiting; *lp;) {
        struct wb_fail *f = *lp;
        if (!wb->stopped && f->retry_at > now) {
            lp = &f->wnext;
            continue;
        }
        *lp = f->wnext;
        f->listed = false;
        while (f->waiters) {
            struct block_waiter *w = f->waiters;
            f->waiters = w->next;
            w->next = due;
            due = w;
        }
    }
    wake_later(wb, due);
}

static void free_task_fn(struct tc_task *t)
{
    struct writeback *wb = container_of(t, struct writeback, free_task);
    wb->free_queued = false;
    free_if_done(wb->c);
}

static void wake_task_fn(struct tc_task *t)
{
    struct writeback *wb = container_of(t, struct writeback, wake_task);
    wb->wake_queued = false;
    struct block_waiter *list = wb->wake;
    wb->wake = NULL;
    while (list) {
        struct block_waiter *w = list;
        list = w->next;
        /* Shut down: no attempt will come; the write fails. */
        w->err = wb->stopped ? -ECANCELED : 0;
        w->fn(w);
    }
    if (wb->stopped)
        free_if_done(wb->c);    /* the commit's flush may have ended meanwhile */
}
static void job_submit_writes(struct wb_job *j);
static void job_flushed(struct tc_dev_io *dio, int err);

/* ---- jobs ---- */

static void job_finish(struct wb_job *j)
{
    struct writeback *wb = j->wb;
    struct cache *c = wb->c;
    for (unsigned i = 0; i < j->n; i++) {
        struct wb_block *b = &j->b[i];
        bufpool_put(b->data, b->size);
        block_wb_end(c->locks, b->oblock);
        block_gen_release(c->locks, b->oblock);
    }
    for (unsigned r = 0; r < j->nruns; r++)
        bufpool_put(j->runs[r].buf, j->runs[r].size);
    free(j->runs);
    wb->all_jobs--;
    wb->jobs_done++;
    if (j->pass)
        wb->jobs--;
    void (*done)(void *, int) = j->done;
    void *arg = j->arg;
    /* The caller learns whether its blocks were written back: a failed
     * write or read counts as much as a failed flush. */
    int err = j->flush_err;
    for (unsigned i = 0; i < j->n && err == 0; i++)
        if (!j->b[i].ok || j->b[i].failed)
            err = j->join.err ? j->join.err : -EIO;
    free(j);
    if (done)
        done(arg, err);
    pace(wb);
    /* Stopped: the state goes once nothing refers to it (free_if_done()),
     * whichever ends last, this job or the commit's origin flush. */
    if (wb->stopped && wb->all_jobs == 0 && !wb->free_queued) {
        wb->free_queued = true;
        reactor_defer(c->reactor, &wb->free_task);
    }
}

/* A run of failed_run blocks holding f's block failed (its write, not the
 * flush after it): the most blocks a run holding it may merge from now on
 * (build_runs()).  Half the run, the first time; one -- the block on its
 * own -- when the origin took other blocks' writes since its last failure
 * (run_written() counts them as they are taken, so a run of this job
 * written beside the failed one counts too), as then it is this block's
 * data, or a neighbour's, that the origin refuses; else (the origin
 * refusing every write) the bound stays.  Such a block, and one whose run
 * held it alone, also writes only its dirty sectors from then on: the
 * sector refused may be a clean one between two dirty ones, which its runs
 * wrote too (the origin holds that data already). */
static void failed_run_limit(struct writeback *wb, struct wb_fail *f, uint32_t failed_run)
{
    if (failed_run == 0)
        return;
    bool ok_since = f->ok_mark != wb->ok_blocks;
    if ((f->run_limit && ok_since) || failed_run == 1)
        f->dirty_only = true;
    f->run_limit = f->run_limit == 0 ? TC_MAX(failed_run / 2, 1u) : ok_since ? 1 : f->run_limit;
    f->ok_mark = wb->ok_blocks;
}

/* Blocks of the job that stay dirty because the write-back failed them:
 * count, back off (per job and per block), log within the rate limit.
 * Blocks written (even if rewritten meanwhile) leave the failure table. */
static void job_account(struct wb_job *j, int err, bool cut)
{
    struct writeback *wb = j->wb;
    struct cache *c = wb->c;
    if (j->cancelled)
        return;     /* ended by the stop before it wrote: not a failure */
    unsigned failed = 0, ok = 0, most = 0;
    uint64_t lo = UINT64_MAX, hi = 0, now = tc_now_ns(), block_delay = 0;
    for (unsigned i = 0; i < j->n; i++) {
        struct wb_block *b = &j->b[i];
        uint64_t ob = b->oblock;
        bool dirty = map_is_dirty(&c->map, ob);
        if (b->ok && !b->failed && !err && !cut) {
            /* Written (a newer version may keep it dirty): the origin
             * takes writes again, the back-off starts over. */
            ok++;
            if (wb->nfail)
                fail_remove(wb, ob);
            continue;
        }
        if (!dirty)
            continue;
        failed++;
        lo = TC_MIN(lo, ob * c->block_size);
        hi = TC_MAX(hi, (ob + 1) * c->block_size - 1);
        /* The origin's answer when its write or flush failed (the flush's
         * first: it covers every write); else -EIO: unreadable in the
         * cache, a connection lost before the flush, a write in doubt. */
        int why = !b->ok ? -EIO : err ? err : b->failed && b->err ? b->err : -EIO;
        uint64_t d = fail_add(wb, ob, why, now);
        struct wb_fail *f = fail_find(wb, ob);
        unsigned nf = f->failures;
        if (b->ok && b->failed && !err)
            failed_run_limit(wb, f, b->failed_run);
        block_delay = TC_MAX(block_delay, d);
        most = TC_MAX(most, nf);
    }
    if (ok)
        cleaner_origin_took(c);     /* room may come again */
    if (failed == 0) {
        if (ok)
            wb->fail_streak = 0;
        return;
    }
    wb->retries += failed;
    wb->failed_jobs++;
    wb->fail_streak++;
    uint64_t delay = RETRY_FIRST_NS << TC_MIN(wb->fail_streak - 1, 6u);
    delay = TC_MIN(delay, RETRY_MAX_NS);
    wb->retry_at = now + delay;
    int write_err = j->join.err;
    const char *why = write_err == -ETIMEDOUT
                          ? "in doubt: sent on an origin connection that stopped answering"
                      : cut && !write_err ? "the origin connection was lost before the flush"
                      : err ? strerror(-err)
                      : write_err ? strerror(-write_err)
                      : "unreadable in the cache, or the cache flush failed";
    snprintf(wb->last_why, sizeof wb->last_why, "%s%s", err ? "flush: " : "", why);
    if (log_allow(wb))
        tc_error("writeback: %u blocks in origin bytes %llu..%llu not written back (%s%s): "
                 "they stay dirty; next attempt in %.1f s (%u failures in a row at most; "
                 "writes needing them written back fail with EIO after %u)",
                 failed, (unsigned long long)lo, (unsigned long long)hi,
                 err ? "flush: " : "", why, (double)TC_MAX(delay, block_delay) / 1e9, most,
                 WB_FAILURES_EIO);
}

/* ---- clean records ----
 *
 * A clean record tells recovery that dirty sectors of a version reached
 * the origin.  Without it (a crash before it is durable) the sectors come
 * back dirty and are written back again, with the version's data: a block
 * the log still holds is cached as its newest version (recovery: newest
 * sequence wins), and no client write reaches the origin while the log
 * holds an older version of its block without a newer entry after it (a
 * write-through version, or the tombstone of a write around the cache).
 * A clean block dropped from the index (a cached copy that failed to
 * read: readpath.c, salvage()) gets its tombstone from the cleaner's
 * reserve, or only once there is room (cache_tombstone()); until then a
 * later write around the cache leaves nothing in the log, and a version
 * recovered dirty would be written back over it.  So a record that cannot be appended now is not
 * forgotten but deferred, and appended once there is room
 * (writeback_owed_records()), as a tombstone when the block is no longer
 * cached.
 *
 * Clean records are client records (cleaner_client_record_fits()): they
 * take at most a small budget of the cleaner's reserve.  Beyond it they
 * are deferred, the block marked clean now: the cleaner's own write-backs
 * (a pass writing back the dirty data of the group it reclaims) must not
 * wait for room only the pass can free. */

static void owe(struct writeback *wb, uint64_t oblock, uint32_t seg, uint16_t off,
                const struct tc_mask *m)
{
    struct cache *c = wb->c;
    if (wb->nowed == OWED_MAX) {
        wb->clean_given_up++;
        return;
    }
    if (wb->nowed == wb->owed_cap) {
        wb->owed_cap = wb->owed_cap ? wb->owed_cap * 2 : 64;
        wb->owed = realloc(wb->owed, wb->owed_cap * sizeof *wb->owed);
        if (wb->owed == NULL)
            abort();
    }
    wb->owed[wb->nowed++] = (struct clean_owed){ .oblock = oblock, .seq = space_seg(&c->sp, seg)->seq,
                                                 .seg = seg, .off = off, .m = *m };
    wb->clean_deferred++;
}

/* The record a deferred one has become: false if none is needed any more
 * (the version's group is gone: the cleaner moved or dropped it, writing
 * what the index holds; its sectors are dirty again, or newer versions
 * hold them all).  Recovery applies a clean record only while the block's
 * newest version is the one it names, so when a newer version has come
 * since (a fill of other sectors, a partial write) the record names that
 * one instead: the sectors it cleans are the block's, whichever version
 * holds them, and they were on the origin before that version came.
 * Dropped instead, the log would keep them dirty for good while the index
 * holds them clean (a checkpoint and the log would disagree). */
static bool owed_record(struct cache *c, const struct clean_owed *o, struct append *a)
{
    const struct segment *sg = space_seg(&c->sp, o->seg);
    if (sg->group == NIL || sg->seq != o->seq)
        return false;
    uint32_t id = index_lookup(&c->map.idx, o->oblock);
    if (id == NIL) {
        /* Dropped, perhaps without a tombstone (salvage()): the version
         * in the log must not come back dirty. */
        *a = (struct append){ .oblock = o->oblock, .type = TC_ENTRY_TOMBSTONE,
                              .use_reserve = true, .mirror = true };
        return true;
    }
    /* Sectors a newer version stored: the log has them from that one
     * (clean, or dirty and then in d), not from the version written back. */
    struct tc_mask newer, stored, v, d, m = o->m;
    mask_clear(&newer);
    uint32_t head = ce_head(&c->map.idx, id), fid = head;
    while (fid != NIL && (frag_seg(&c->map.idx, fid) != o->seg ||
                          frag_off(&c->map.idx, fid) != o->off)) {
        frag_stored(&c->map.idx, fid, &stored);
        mask_or(&newer, &stored);
        fid = frag_next(&c->map.idx, fid);
    }
    if (fid == NIL)
        return false;
    ce_get_masks(&c->map.idx, id, &v, &d);
    mask_andnot(&m, &newer);
    mask_and(&m, &v);
    mask_andnot(&m, &d);
    if (mask_empty(&m))
        return false;
    *a = (struct append){ .oblock = o->oblock, .type = TC_ENTRY_CLEAN,
                          .target = tc_loc(frag_seg(&c->map.idx, head), frag_off(&c->map.idx, head)),
                          .valid = m, .use_reserve = true, .mirror = true };
    return true;
}

void writeback_owed_records(struct cache *c)
{
    struct writeback *wb = c->wb;
    if (wb == NULL || wb->nowed == 0)
        return;
    size_t i = 0;
    for (; i < wb->nowed; i++) {
        struct append a;
        if (!owed_record(c, &wb->owed[i], &a))
            continue;
        if (!cleaner_client_record_fits(c) || log_append(c, &a, NULL).err < 0)
            break;
        wb->clean_replayed++;
    }
    memmove(wb->owed, wb->owed + i, (wb->nowed - i) * sizeof *wb->owed);
    wb->nowed -= i;
}

/* A block's sectors that deferred clean records would make clean
 * (writeback_owed_clean()). */
struct owed_clean {
    uint64_t oblock;
    struct tc_mask m;
};

static int cmp_owed_clean(const void *a, const void *b)
{
    uint64_t x = ((const struct owed_clean *)a)->oblock, y = ((const struct owed_clean *)b)->oblock;
    return x < y ? -1 : x > y;
}

size_t writeback_owed_clean(struct cache *c, uint64_t **oblocks, struct tc_mask **masks)
{
    struct writeback *wb = c->wb;
    *oblocks = NULL;
    *masks = NULL;
    if (wb == NULL || wb->nowed == 0)
        return 0;
    struct owed_clean *v = tc_xmalloc(wb->nowed * sizeof *v);
    size_t n = 0;
    for (size_t i = 0; i < wb->nowed; i++) {
        struct append a;
        /* What the record would be if appended now (owed_record()):
         * only a clean record names sectors the index holds. */
        if (!owed_record(c, &wb->owed[i], &a) || a.type != TC_ENTRY_CLEAN)
            continue;
        v[n++] = (struct owed_clean){ .oblock = a.oblock, .m = a.valid };
    }
    if (n > 1)
        qsort(v, n, sizeof *v, cmp_owed_clean);
    /* One entry a block: its deferred records' sectors together. */
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (k > 0 && v[k - 1].oblock == v[i].oblock)
            mask_or(&v[k - 1].m, &v[i].m);
        else
            v[k++] = v[i];
    }
    if (k > 0) {
        *oblocks = tc_xmalloc(k * sizeof **oblocks);
        *masks = tc_xmalloc(k * sizeof **masks);
        for (size_t i = 0; i < k; i++) {
            (*oblocks)[i] = v[i].oblock;
            (*masks)[i] = v[i].m;
        }
    }
    free(v);
    return k;
}

uint64_t writeback_owed_clean_sectors(struct cache *c, uint64_t *blocks)
{
    uint64_t *ob;
    struct tc_mask *m;
    size_t n = writeback_owed_clean(c, &ob, &m);
    uint64_t sectors = 0;
    *blocks = 0;
    for (size_t i = 0; i < n; i++) {
        sectors += mask_count(&m[i]);
        struct tc_mask d;
        ce_get_masks(&c->map.idx, index_lookup(&c->map.idx, ob[i]), NULL, &d);
        if (mask_empty(&d))
            (*blocks)++;                /* clean in the index: not counted there */
    }
    free(ob);
    free(m);
    return sectors;
}

/* The clean record of the sectors m of a block's fragment at seg:off,
 * its newest: appended now, or deferred. */
static void clean_record(struct cache *c, uint64_t oblock, uint32_t seg, uint16_t off,
                         const struct tc_mask *m)
{
    struct writeback *wb = c->wb;
    writeback_owed_records(c);          /* the older ones first */
    struct append a = { .oblock = oblock, .type = TC_ENTRY_CLEAN, .target = tc_loc(seg, off),
                        .valid = *m, .use_reserve = true, .mirror = true };
    if (wb->nowed > 0 || !cleaner_client_record_fits(c) || log_append(c, &a, NULL).err < 0)
        owe(wb, oblock, seg, off, m);
}

/* Block b's job wrote every sector dirty at its start, durably: if the
 * job started under the flush draining now, the block's version at the
 * flush's start is on the origin (a newer one, if it was rewritten
 * since: the job read the newest), whether or not the block stayed dirty. */
static void want_written(struct writeback *wb, const struct wb_block *b)
{
    if (wb->want == NULL || b->flush_no != wb->flush_no)
        return;
    uint64_t bit = 1ull << (b->oblock % 64);
    if (wb->want[b->oblock / 64] & bit) {
        wb->want[b->oblock / 64] &= ~bit;
        wb->want_left--;
    }
}

void writeback_flush_include(struct cache *c, uint64_t oblock)
{
    struct writeback *wb = c->wb;
    if (wb == NULL || wb->want == NULL || oblock >= c->nblocks_origin)
        return;
    uint64_t bit = 1ull << (oblock % 64);
    if (!(wb->want[oblock / 64] & bit)) {
        wb->want[oblock / 64] |= bit;
        wb->want_left++;
    }
}

/* The origin has the runs durably: the blocks are clean now. */
static void job_flushed(struct tc_dev_io *dio, int err)
{
    struct wb_job *j = container_of(dio, struct wb_job, flush);
    struct writeback *wb = j->wb;
    struct cache *c = wb->c;
    /* Acknowledged on a connection lost before this flush: not durable. */
    bool cut = err == 0 && c->vol->origin->epoch != j->epoch;
    j->flush_err = cut ? -EIO : err;
    for (unsigned i = 0; i < j->n && j->flush_err == 0; i++) {
        struct wb_block *b = &j->b[i];
        if (b->ok && !b->failed && !b->narrowed)
            want_written(wb, b);
        if (!b->ok || b->failed || block_gen(c->locks, b->oblock) != b->gen)
            continue;
        uint32_t id = index_lookup(&c->map.idx, b->oblock);
        if (id == NIL)
            continue;
        struct wb_fail *wf = fail_find(wb, b->oblock);
        if (wf) {
            wb->blocks_recovered++;
            if (log_allow(wb))
                tc_info("writeback: origin bytes %llu..%llu written back after %u failed "
                        "attempts", (unsigned long long)(b->oblock * c->block_size),
                        (unsigned long long)((b->oblock + 1) * c->block_size - 1),
                        wf->failures);
        }
        struct cfrag head = frag_view(&c->map.idx, ce_head(&c->map.idx, id));
        clean_record(c, b->oblock, head.seg, head.off, &b->dirty);
        if (c->draining) {
            struct tc_mask dm;
            cache_drain_mask(c, id, &dm);
            mask_and(&dm, &b->dirty);
            c->drained_bytes += (uint64_t)mask_count(&dm) * TC_SECTOR;
        }
        map_mark_clean(c, id, &b->dirty);
        if (c->draining) {
            /* Drained (failure.c): on the origin durably now, no longer
             * recorded lost (lostlog.h).  Sectors written back are the
             * newest version, so no loss of them can stand; until that
             * is settled, their proofs stay for a start after a crash. */
            lost_drained(c, b->oblock, &b->dirty);
        }
        cache_trace(c, b->oblock, "written back and cleaned %llx", (unsigned long long)b->dirty.w[0]);
        uint64_t bytes = (uint64_t)mask_count(&b->dirty) * TC_SECTOR;
        wb->bytes += bytes;
        wb->rate_bytes += bytes;
        c->st.writeback_bytes += bytes;
    }
    job_account(j, err, cut);
    job_finish(j);
}

/* All runs are written (or failed): flush the origin, then finish. */
static void writes_done(struct wb_job *j)
{
    bool any = false;
    for (unsigned i = 0; i < j->n; i++)
        if (j->b[i].ok && !j->b[i].failed)
            any = true;
    memset(&j->flush, 0, sizeof j->flush);
    if (!any || !j->wb->c->vol->origin->can_flush) {
        job_flushed(&j->flush, 0);
        return;
    }
    j->flush.op = TC_DEV_FLUSH;
    j->flush.cb = job_flushed;
    dev_submit(j->wb->c->vol->origin, &j->flush);
}

static void run_written(struct tc_dev_io *dio, int err)
{
    struct wb_run *r = container_of(dio, struct wb_run, dio);
    struct wb_job *j = r->job;
    if (err) {
        j->wb->errors++;
        for (unsigned i = r->first; i <= r->last; i++) {
            j->b[i].failed = true;
            j->b[i].err = err;
            j->b[i].failed_run = TC_MAX(j->b[i].failed_run, r->last - r->first + 1);
        }
    } else {
        j->wb->writes++;
        j->wb->c->st.writeback_writes++;
        /* Counted when the origin takes the write, not after the job's
         * flush: a job whose flush is still out when the origin starts
         * refusing writes must not count as taken after the refusals
         * (failed_run_limit()). */
        j->wb->ok_blocks += r->last - r->first + 1;
        throttle_credit(j->wb, r->size);
    }
    if (join_put(&j->join, err))
        writes_done(j);
}

/* Let waiting pass jobs whose turn has come write. */
static void next_turn(struct writeback *wb)
{
    for (;;) {
        struct wb_job **pp = &wb->waiting, *found = NULL;
        while (*pp) {
            if ((*pp)->ticket == wb->turn) {
                found = *pp;
                *pp = found->next_waiting;
                break;
            }
            pp = &(*pp)->next_waiting;
        }
        if (found == NULL)
            return;
        job_submit_writes(found);
    }
}

static void add_run(struct wb_job *j, unsigned first, unsigned last, uint64_t off,
                    const uint8_t **src, unsigned nsect)
{
    struct cache *c = j->wb->c;
    struct wb_run *r = &j->runs[j->nruns++];
    r->job = j;
    r->first = first;
    r->last = last;
    r->size = (size_t)nsect * TC_SECTOR;
    r->buf = bufpool_get(r->size);
    for (unsigned s = 0; !c->data_free && s < nsect; s++)
        memcpy(r->buf + (size_t)s * TC_SECTOR, src[s], TC_SECTOR);
    for (unsigned i = first; i <= last; i++)
        cache_trace(c, j->b[i].oblock, "writeback run: %llu bytes at %llu",
                    (unsigned long long)r->size, (unsigned long long)off);
    r->dio.op = TC_DEV_WRITE;
    r->dio.buf = r->buf;
    r->dio.off = off;
    r->dio.len = r->size;
    r->dio.cb = run_written;
}

/* Runs: stretches of cached sectors that begin and end with dirty ones,
 * continuing into the next block when it starts where this one ends.
 *
 * A run holds at most as many blocks as the run_limit of each of them
 * (failed_run_limit()).  The origin fails a write as a whole: merged with
 * its neighbours, one sector the origin refuses (a bad sector, a full range
 * of a thin volume) would fail theirs with it, in every attempt, for as
 * long as it refuses -- they would stay dirty, a flush would count every
 * one of them refused, and its message would name the run's first block
 * rather than the one refused.  So a failed run's blocks go in runs of
 * half its size next time, and in runs of their own once the origin has
 * taken other writes since their last failure (the failure is theirs, not
 * the origin's): the good ones are written back, the refused one keeps
 * failing by itself.  An origin refusing every write (away, or full) only
 * halves the runs once: after the outage the backlog goes back in large
 * writes, not block by block. */
static void build_runs(struct wb_job *j)
{
    struct cache *c = j->wb->c;
    unsigned max_sect = RUN_MAX_BYTES / TC_SECTOR;
    const uint8_t **src = tc_xmalloc(max_sect * sizeof *src);
    j->runs = tc_xcalloc((size_t)j->n * c->spb, sizeof *j->runs);
    uint64_t run_off = 0;
    unsigned nsect = 0, first = 0, last_dirty_len = 0, last = 0;
    uint64_t prev_end = UINT64_MAX;
    unsigned run_blocks = 0, run_limit = 0;    /* blocks in the run; the least limit */
    for (unsigned i = 0; i < j->n; i++) {
        struct wb_block *b = &j->b[i];
        if (!b->ok)
            continue;
        for (unsigned s = 0; s < c->spb; s++) {
            uint64_t off = b->oblock * c->block_size + (uint64_t)s * TC_SECTOR;
            bool valid = mask_test(&b->valid, s), dirty = mask_test(&b->dirty, s);
            unsigned limit = b->run_limit ? b->run_limit : UINT_MAX;
            bool apart = s == 0 && run_blocks + 1 > TC_MIN(run_limit, limit);
            bool contiguous = nsect > 0 && off == prev_end && valid && nsect < max_sect && !apart;
            if (!contiguous && nsect > 0) {
                if (last_dirty_len)
                    add_run(j, first, last, run_off, src, last_dirty_len);
                nsect = 0;
                last_dirty_len = 0;
            }
            if (!valid || (nsect == 0 && !dirty)) {
                prev_end = UINT64_MAX;
                continue;
            }
            if (nsect == 0) {
                run_off = off;
                first = i;
                run_blocks = 1;
                run_limit = limit;
            } else if (s == 0) {
                run_blocks++;
                run_limit = TC_MIN(run_limit, limit);
            }
            src[nsect++] = b->data + (size_t)s * TC_SECTOR;
            prev_end = off + TC_SECTOR;
            if (dirty) {
                last_dirty_len = nsect;
                last = i;
            }
        }
    }
    if (nsect > 0 && last_dirty_len)
        add_run(j, first, last, run_off, src, last_dirty_len);
    free(src);
}

static void job_submit_writes(struct wb_job *j)
{
    struct writeback *wb = j->wb;
    struct cache *c = wb->c;
    build_runs(j);
    j->epoch = c->vol->origin->epoch;
    join_get(&j->join);         /* held while issuing */
    for (unsigned r = 0; r < j->nruns; r++) {
        struct wb_run *run = &j->runs[r];
        if (j->pass) {
            /* Jobs write in ticket order, and tickets follow the cursor:
             * only a new pass may start lower than the last run ended. */
            if (j->pass_no != wb->pass_no) {
                wb->pass_no = j->pass_no;
                wb->last_pass_off = 0;
            }
            if (run->dio.off < wb->last_pass_off)
                wb->out_of_order++;
            wb->last_pass_off = run->dio.off + run->dio.len;
        }
        join_get(&j->join);
        dev_submit(c->vol->origin, &run->dio);
    }
    if (j->pass) {
        wb->turn++;
        next_turn(wb);
    }
    if (join_put(&j->join, 0))
        writes_done(j);
}

/* The versions read are durable in the cache: write when it is this job's
 * turn. */
static void job_synced(struct log_waiter *lw, int err)
{
    struct wb_job *j = container_of(lw, struct wb_job, sync_w);
    struct writeback *wb = j->wb;
    for (struct wb_job **pp = &wb->syncing; *pp; pp = &(*pp)->next_syncing)
        if (*pp == j) {
            *pp = j->next_syncing;
            break;
        }
    if (j->pass && wb->stopped)
        j->cancelled = true;    /* the stop came while it waited: no writes now */
    if (j->cancelled) {
        /* Nothing was written: the blocks stay dirty, no failure counted
         * (job_account()).  It still takes its turn, for the jobs after. */
        for (unsigned i = 0; i < j->n; i++)
            j->b[i].ok = false;
    } else if (err) {
        /* Not known durable in the cache: the origin must not get them
         * yet.  They stay dirty for a later job (the device failure is
         * handled where the cache write failed). */
        if (log_allow(wb))
            tc_error("writeback: the cache flush before writing %u blocks back failed: %s; "
                     "they stay dirty", j->n, strerror(-err));
        wb->errors++;
        for (unsigned i = 0; i < j->n; i++)
            j->b[i].ok = false;
    }
    if (j->pass && j->ticket != wb->turn) {
        j->next_waiting = wb->waiting;
        wb->waiting = j;
        return;
    }
    job_submit_writes(j);
}

/* Every block's data is read: the versions read must be durable in the
 * cache before the origin gets them (see the top of this file). */
static void reads_done(struct wb_job *j)
{
    j->sync_w.fn = job_synced;
    if (j->pass && j->wb->stopped) {
        /* A stop: a pass job that has not written goes without writing
         * (see stop_unwritten()). */
        j->cancelled = true;
        job_synced(&j->sync_w, 0);
        return;
    }
    if (j->wb->c->abandoned) {
        /* The log is never trusted again (abandon.c): no recovery can
         * bring an older version back, so there is nothing to wait for --
         * and nothing left to flush (a drain, failure.c). */
        job_synced(&j->sync_w, 0);
        return;
    }
    j->next_syncing = j->wb->syncing;
    j->wb->syncing = j;
    log_sync(j->wb->c, &j->sync_w);
}

/* Whether block b has dirty sectors on a draining device (failure.c). */
static bool block_draining(struct cache *c, uint64_t oblock, const struct tc_mask *dirty)
{
    if (c->draining == 0)
        return false;
    uint32_t id = index_lookup(&c->map.idx, oblock);
    if (id == NIL)
        return false;
    for (unsigned s = 0; s < c->spb; s++) {
        if (!mask_test(dirty, s))
            continue;
        uint32_t f = ce_locate(&c->map.idx, id, s);
        if (f != NIL && seg_cdev(c, frag_seg(&c->map.idx, f))->state == CDEV_DRAINING)
            return true;
    }
    return false;
}

static void block_read(void *arg, int err);

/* A drained block that could not be read whole, or a block whose dirty
 * data does not match its checksums (damage_probe): each of its cached
 * sectors alone.  Lost now: in a drain, dirty sectors on the draining
 * device that fail -- the only copy cannot be read back, or does not
 * match its checksum; in a damage probe, dirty sectors proven damaged
 * (a checksum mismatch is not a device that may read fine later: trying
 * again would fail the same way for ever, keep the block's intact
 * sectors from the origin, and fail client writes that need the block
 * written back).  The rest is written back.  Lost sectors are taken out
 * of the dirty set (marked clean: the lost set makes every read of them
 * fail with EIO, before any copy is looked at, until a client writes
 * them again), so no pass tries them again.  The cleaner does the same
 * when it meets the damage first (cleaner.c, later_read()). */
static void probe_next(struct wb_block *b);

static void probe_read(void *arg, int err)
{
    struct wb_block *b = arg;
    if (err == 0)
        mask_set(&b->good, b->probe_s);
    else if (!b->damage_probe || err == -EBADMSG)
        mask_set(&b->bad, b->probe_s);
    b->probe_s++;
    probe_next(b);
}

static void probe_next(struct wb_block *b)
{
    struct wb_job *j = b->job;
    struct cache *c = j->wb->c;
    while (b->probe_s < c->spb && !mask_test(&b->valid, b->probe_s))
        b->probe_s++;
    if (b->probe_s < c->spb) {
        struct tc_mask one;
        mask_clear(&one);
        mask_set(&one, b->probe_s);
        cache_gather_robust(c, b->oblock, &one, b->data, probe_read, b);
        return;
    }
    /* Lost: only dirty sectors whose copy is on the draining device.  A
     * sector unreadable on a device still in service stays dirty, as it
     * would without a drain (that device's errors are its own affair). */
    struct tc_mask lost = b->bad, dm;
    uint32_t id = index_lookup(&c->map.idx, b->oblock);
    mask_and(&lost, &b->dirty);
    if (id != NIL) {
        /* Still dirty now: the cleaner may have met the damage meanwhile
         * and recorded it lost (then clean) -- a loss is counted once. */
        struct tc_mask now_valid, now_dirty;
        ce_get_masks(&c->map.idx, id, &now_valid, &now_dirty);
        mask_and(&lost, &now_dirty);
    }
    if (!b->damage_probe) {
        cache_drain_mask(c, id, &dm);
        mask_and(&lost, &dm);
    }
    if (!mask_empty(&lost) && id != NIL && block_gen(c->locks, b->oblock) == b->gen) {
        uint64_t base = b->oblock * c->block_size;
        if (b->damage_probe)
            tc_error("writeback: %u dirty sectors of origin block %llu (bytes %llu..%llu) "
                     "are damaged in the cache (they do not match their checksums) and are "
                     "lost; reads of them fail with EIO until rewritten; the block's other "
                     "dirty sectors are written back", mask_count(&lost),
                     (unsigned long long)b->oblock, (unsigned long long)base,
                     (unsigned long long)(base + c->block_size - 1));
        else
            tc_error("cache: %u dirty sectors of origin block %llu (bytes %llu..%llu) cannot "
                     "be read back from the failed cache device and are lost; reads of them "
                     "fail with EIO until rewritten", mask_count(&lost),
                     (unsigned long long)b->oblock, (unsigned long long)base,
                     (unsigned long long)(base + c->block_size - 1));
        map_lose_dirty(c, b->oblock, &lost);
        if (c->abandoned)
            abandon_lost_changed(c);
        map_mark_clean(c, id, &lost);
    }
    /* What was read is written back as ever; a block rewritten meanwhile
     * (its generation moved) is left for a later job. */
    mask_and(&b->valid, &b->good);
    struct tc_mask read_dirty = b->dirty;
    mask_and(&b->dirty, &b->good);
    b->narrowed = !mask_equal(&read_dirty, &b->dirty);
    if (!mask_empty(&b->dirty) && block_gen(c->locks, b->oblock) == b->gen)
        b->ok = true;
    if (join_put(&j->join, 0))
        reads_done(j);
}

static void block_read(void *arg, int err)
{
    struct wb_block *b = arg;
    struct wb_job *j = b->job;
    struct cache *c = j->wb->c;
    if (err && err != -ENODATA && !c->data_free && block_draining(c, b->oblock, &b->dirty)) {
        b->probe_s = 0;
        mask_clear(&b->good);
        mask_clear(&b->bad);
        probe_next(b);
        return;
    }
    if (err && err != -ENODATA && !b->dirty_only && !mask_equal(&b->valid, &b->dirty)) {
        /* Proven damage, or a read error, perhaps of clean sectors only
         * (the origin has them; the cleaner and a device failure's
         * rescue leave damaged or unreadable dirty ones recorded lost
         * and clean): the dirty sectors are all writeback needs. */
        b->dirty_only = true;
        b->valid = b->dirty;
        cache_gather_robust(c, b->oblock, &b->valid, b->data, block_read, b);
        return;
    }
    if (err == -EBADMSG && !c->data_free && !b->damage_probe) {
        /* Every dirty sector read, and some proven damaged (no mirror
         * copy matched either): find which, sector by sector. */
        b->damage_probe = true;
        b->dirty_only = true;
        b->valid = b->dirty;
        b->probe_s = 0;
        mask_clear(&b->good);
        mask_clear(&b->bad);
        probe_next(b);
        return;
    }
    if (err) {
        uint64_t off = b->oblock * c->block_size;
        if (log_allow(j->wb))
            tc_error("writeback: dirty data of origin bytes %llu..%llu is unreadable in the "
                     "cache and cannot be written back", (unsigned long long)off,
                     (unsigned long long)(off + c->block_size - 1));
        j->wb->errors++;
    } else {
        b->ok = true;
    }
    if (join_put(&j->join, 0))
        reads_done(j);
}

/* Start a job over blocks (ascending).  Blocks not dirty, or with a
 * writeback already in flight, are skipped. */
static void job_start(struct writeback *wb, const uint64_t *blocks, unsigned n, bool pass,
                      void (*done)(void *arg, int err), void *arg)
{
    struct cache *c = wb->c;
    struct wb_job *j = tc_xcalloc(1, sizeof *j);
    j->wb = wb;
    j->pass = pass;
    j->done = done;
    j->arg = arg;
    wb->all_jobs++;
    if (pass) {
        wb->jobs++;
        j->ticket = wb->next_ticket++;
        j->pass_no = c->st.writeback_passes;
    }
    for (unsigned i = 0; i < n && j->n < JOB_BLOCKS; i++) {
        uint32_t id = index_lookup(&c->map.idx, blocks[i]);
        if (id == NIL)
            continue;
        struct wb_block *b = &j->b[j->n];
        ce_get_masks(&c->map.idx, id, &b->valid, &b->dirty);
        if (mask_empty(&b->dirty) || !block_wait_wb_free(c->locks, blocks[i]))
            continue;
        b->job = j;
        b->oblock = blocks[i];
        block_gen_hold(c->locks, b->oblock);
        b->gen = block_gen(c->locks, b->oblock);
        b->flush_no = wb->want ? wb->flush_no : 0;
        struct wb_fail *f = wb->nfail ? fail_find(wb, b->oblock) : NULL;
        b->run_limit = f ? f->run_limit : 0;
        if (f && f->dirty_only) {
            b->dirty_only = true;
            b->valid = b->dirty;
        }
        block_wb_begin(c->locks, b->oblock);
        cache_trace(c, b->oblock, "writeback starts (%s job)", pass ? "pass" : "demand");
        j->n++;
    }
    join_get(&j->join);         /* held while issuing */
    for (unsigned i = 0; i < j->n; i++) {
        struct wb_block *b = &j->b[i];
        b->size = (size_t)c->spb * TC_SECTOR;
        b->data = bufpool_get(b->size);
        join_get(&j->join);
        cache_gather_robust(c, b->oblock, &b->valid, b->data, block_read, b);
    }
    if (join_put(&j->join, 0))
        reads_done(j);
}

/* ---- the dirty throttle ---- */

#define CREDIT_MAX (4ll << 20)  /* banked at most: no burst after a pause */

/* The dirty share of what the devices in service hold (failure.c): after
 * a device failure the survivors' room is what dirty data can fill.
 * Counted against the whole cache, a survivor of 3 segments in 14 full
 * of dirty data read as 21%, under the high mark (50%): writeback kept
 * its moderate pace while clients were busy, the throttle never held a
 * write, and writes waited for room instead.  (No device in service: the
 * whole cache; writeback drains at full pace then anyway.) */
static double dirty_ratio(const struct cache *c)
{
    uint64_t cap = cache_blocks_in_service(c) * c->block_size;
    if (cap == 0)
        cap = (uint64_t)c->sp.nsegs * c->segment_size;
    return cap ? (double)(c->map.dirty_sectors * TC_SECTOR) / (double)cap : 0;
}

static double dirty_ceiling(const struct cache *c)
{
    return c->vol->cfg.dirty_high + (1 - c->vol->cfg.dirty_high) / 2;
}

/* Writes need no throttle: below the high mark, or writeback cannot
 * run (then nothing would ever let them in). */
static bool throttle_off(struct writeback *wb)
{
    struct cache *c = wb->c;
    if (wb->stopped || c->vol->origin->state != TC_DEV_ONLINE)
        return true;
    if (wb->retry_at && tc_now_ns() < wb->retry_at)
        return true;
    return dirty_ratio(c) <= c->vol->cfg.dirty_high;
}

static void throttle_let_in(struct writeback *wb, bool all)
{
    while (wb->throttled && (all || wb->credit > 0)) {
        struct wb_throttle_waiter *w = wb->throttled;
        wb->throttled = w->next;
        if (wb->throttled == NULL)
            wb->throttled_tail = NULL;
        wb->throttled_now--;
        if (!all)
            wb->credit -= (int64_t)w->bytes;
        uint64_t waited = tc_now_ns() - w->since;
        wb->throttle_wait_ns += waited;
        wb->throttle_max_wait_ns = TC_MAX(wb->throttle_max_wait_ns, waited);
        w->fn(w);
    }
}

/* After writeback made progress, or anything else changed: let held
 * writes in if the throttle is off, or if nothing is being written back
 * (no credit would ever come). */
static void throttle_check(struct writeback *wb)
{
    if (wb->throttled == NULL)
        return;
    if (throttle_off(wb) || wb->all_jobs == 0) {
        wb->credit = 0;
        throttle_let_in(wb, true);
    }
}

/* BYTES were written back: the share the ratio allows comes in. */
static void throttle_credit(struct writeback *wb, uint64_t bytes)
{
    if (throttle_off(wb)) {
        wb->credit = 0;
        throttle_let_in(wb, true);
        return;
    }
    struct cache *c = wb->c;
    double high = c->vol->cfg.dirty_high, ceiling = dirty_ceiling(c);
    double share = (ceiling - dirty_ratio(c)) / (ceiling - high);
    if (share <= 0)
        return;
    wb->credit += (int64_t)((double)bytes * TC_MIN(share, 1.0));
    wb->credit = TC_MIN(wb->credit, CREDIT_MAX);
    throttle_let_in(wb, false);
}

bool writeback_throttle(struct cache *c, uint64_t bytes, struct wb_throttle_waiter *w)
{
    struct writeback *wb = c->wb;
    if (wb == NULL || throttle_off(wb)) {
        if (wb)
            wb->credit = 0;
        return true;
    }
    if (wb->throttled == NULL && wb->credit > 0) {
        wb->credit -= (int64_t)bytes;
        return true;
    }
    /* Writeback runs above the high mark (pace() starts it); held until
     * it lets this write in. */
    pace(wb);
    w->bytes = bytes;
    w->since = tc_now_ns();
    w->next = NULL;
    if (wb->throttled_tail)
        wb->throttled_tail->next = w;
    else
        wb->throttled = w;
    wb->throttled_tail = w;
    wb->throttled_now++;
    wb->throttled_writes++;
    throttle_check(wb);
    return false;
}

/* ---- background passes ---- */

/* Move *b to the next set bit of bits at or after it (a word of clear
 * bits at a time), adding the bits passed to *scanned: false if there is
 * none below nb in the rest of the word (*b moved past it: the caller's
 * scan goes on, or wraps, from there). */
static bool next_set_bit(const uint64_t *bits, uint64_t nb, uint64_t *b, uint64_t *scanned)
{
    uint64_t word = bits[*b / 64] >> (*b % 64);
    if (word == 0) {
        uint64_t skip = 64 - *b % 64;
        *b += skip;
        *scanned += skip;
        return false;
    }
    unsigned z = (unsigned)__builtin_ctzll(word);
    *b += z;
    *scanned += z;
    return *b < nb;
}

static bool next_batch(struct writeback *wb, uint64_t *blocks, unsigned *n)
{
    struct cache *c = wb->c;
    uint64_t nb = c->nblocks_origin;
    *n = 0;
    if (c->map.dirty_blocks == 0)
        return false;
    uint64_t b = wb->cursor;
    uint64_t scanned = 0, now = tc_now_ns(), next_due = UINT64_MAX;
    while (*n < JOB_BLOCKS && scanned < nb) {
        if (b >= nb) {
            /* A job never spans two passes: the wrap (a new pass) happens
             * at the start of a batch, so every block of a job belongs to
             * the pass counted when it starts. */
            if (*n > 0)
                break;
            b = 0;
            c->st.writeback_passes++;
        }
        if (!next_set_bit(c->map.dirty_bits, nb, &b, &scanned))
            continue;
        struct wb_fail *f = fail_find(wb, b);
        if (f && f->retry_at > now) {
            /* Backing off: its attempt comes in a later scan. */
            next_due = TC_MIN(next_due, f->retry_at);
        } else if (block_wait_wb_free(c->locks, b)) {
            blocks[(*n)++] = b;
        }
        b++;
        scanned++;
    }
    wb->cursor = b;
    if (*n == 0 && next_due != UINT64_MAX)
        wb->fail_next_due = next_due;
    return *n > 0;
}

/* A flush of the dirty set at its start (wb->want): its passes take only
 * blocks of that set, from their own cursor.  A block of it found clean
 * leaves it (written back since, or dropped: the origin has its newest
 * version either way); one with a write-back in flight is left for a
 * later scan (a job started before the flush may have read an older
 * version, so it does not count: want_written()). */
static bool next_want_batch(struct writeback *wb, uint64_t *blocks, unsigned *n)
{
    struct cache *c = wb->c;
    uint64_t nb = c->nblocks_origin;
    *n = 0;
    uint64_t b = wb->want_cursor;
    uint64_t scanned = 0, now = tc_now_ns(), next_due = UINT64_MAX;
    while (wb->want_left > 0 && *n < JOB_BLOCKS && scanned < nb) {
        if (b >= nb) {
            if (*n > 0)
                break;
            b = 0;
        }
        if (!next_set_bit(wb->want, nb, &b, &scanned))
            continue;
        struct wb_fail *f;
        if (!map_is_dirty(&c->map, b)) {
            wb->want[b / 64] &= ~(1ull << (b % 64));
            wb->want_left--;
        } else if ((f = fail_find(wb, b)) != NULL && f->retry_at > now) {
            next_due = TC_MIN(next_due, f->retry_at);
        } else if (block_wait_wb_free(c->locks, b)) {
            blocks[(*n)++] = b;
        }
        b++;
        scanned++;
    }
    wb->want_cursor = b;
    if (*n == 0 && next_due != UINT64_MAX)
        wb->fail_next_due = next_due;
    return *n > 0;
}

/* Nothing for a pass to take: every dirty block is backing off and none
 * is due (the scan is skipped, so a refusing origin costs no CPU). */
static bool all_backing_off(struct writeback *wb)
{
    return wb->nfail > 0 && wb->nfail >= wb->c->map.dirty_blocks && tc_now_ns() < wb->fail_next_due;
}

static unsigned window(struct writeback *wb)
{
    struct cache *c = wb->c;
    if (wb->stopped)
        return 0;
    /* An unreachable origin: writes would only be held or fail. */
    if (c->vol->origin->state != TC_DEV_ONLINE)
        return 0;
    /* After failed jobs, passes pause (up to RETRY_MAX_NS after each).  Not
     * a drain asked for (tiercache flush, detach): it gives up once each
     * dirty block was refused WB_FAILURES_EIO times in a row (drain_check()),
     * and the blocks' own back-off (next_batch()) paces those attempts.
     * Paused after each of its failed jobs, one job of JOB_BLOCKS at a time
     * once the pause had grown, a drain of 400 refused blocks took 13 s to
     * give up, hundreds more a minute or longer. */
    if (wb->retry_at && tc_now_ns() < wb->retry_at && !wb->draining)
        return 0;
    /* A drain (tiercache flush, detach), or dirty data on a failed device
     * (failure.c): as fast as the origin takes it. */
    if (wb->draining || c->draining)
        return 8;
    /* For tests only: the dirty data stays where it is unless someone
     * needs it written back (the cleaner, a drain), so that a test knows
     * whose origin writes it holds or fails. */
    if (wb->no_passes || c->map.dirty_blocks == 0)
        return 0;
    double ratio = dirty_ratio(c);
    bool idle = tc_now_ns() - c->last_client_io_ns > IDLE_NS;
    if (ratio > c->vol->cfg.dirty_high)
        return 8;
    if (ratio > c->vol->cfg.dirty_target)
        return idle ? 8 : 2;
    return idle ? 4 : 0;
}

static void drain_check(struct writeback *wb);
static void drain_end(struct writeback *wb, int err);

static void pace(struct writeback *wb)
{
    /* A read-only volume's origin is opened read-only: nothing written
     * back could reach it (its dirty data waits for a start without
     * --read-only; tc_volume_flush_dirty() says so). */
    unsigned w = all_backing_off(wb) || wb->c->vol->read_only ? 0 : window(wb);
    while (wb->jobs < w) {
        uint64_t blocks[JOB_BLOCKS];
        unsigned n;
        /* A flush of the dirty set at its start takes that set, and
         * only it; a failed device's drain (failure.c) needs every dirty
         * block, so it takes the rest once the set has none to give. */
        bool got = wb->want && wb->want_left > 0 && next_want_batch(wb, blocks, &n);
        if (!got && (wb->want == NULL || wb->c->draining))
            got = next_batch(wb, blocks, &n);
        if (!got)
            break;
        job_start(wb, blocks, n, true, NULL, NULL);
    }
    if (wb->draining)
        drain_check(wb);
    throttle_check(wb);
}

/* Free the writeback state once it is stopped and nothing refers to it:
 * no job, no commit flush, no waiter queued for the deferred wake, no
 * free task queued.  Called when the commit's flush ends, from the free
 * task when the last job ends, and by cache_free(): a caller whose own
 * I/O outlives the stop (the cleaner's chunk read) then finds c->wb NULL
 * (writeback_blocks()).  Before the last job's end called it, the state
 * stayed until cache_free() when a job outlived the commit's flush. */
static void free_if_done(struct cache *c)
{
    struct writeback *wb = c->wb;
    if (!wb->stopped || wb->all_jobs || wb->committing || wb->wake || wb->wake_queued ||
        wb->free_queued)
        return;
    for (unsigned h = 0; h < FAIL_BUCKETS; h++)
        while (wb->fail[h]) {
            struct wb_fail *f = wb->fail[h];
            wb->fail[h] = f->next;
            free(f);
        }
    free(wb->owed);
    free(wb->want);
    free(wb);
    c->wb = NULL;
}

void writeback_committed(struct cache *c, uint64_t since_ns)
{
    if (c->wb && since_ns > c->wb->last_commit)
        c->wb->last_commit = since_ns;
}

static void commit_origin_flushed(struct tc_dev_io *dio, int err)
{
    struct writeback *wb = container_of(dio, struct writeback, commit_dio);
    struct cache *c = wb->c;
    wb->committing = false;
    stable_flush_end(c, &wb->commit_flush, err);
    log_seal_all(c, true);
    log_commit(c);
    free_if_done(c);    /* stopped while the flush ran? */
}

static void tick(struct tc_timer *t)
{
    struct writeback *wb = container_of(t, struct writeback, tick);
    struct cache *c = wb->c;
    uint64_t now = tc_now_ns();
    if (now - wb->rate_start >= 1000000000ull) {
        double secs = (double)(now - wb->rate_start) / 1e9;
        double inst = (double)wb->rate_bytes / secs;
        wb->rate = wb->rate * 0.5 + inst * 0.5;
        wb->rate_bytes = 0;
        wb->rate_start = now;
    }
    /* Commit interval: what was appended gets flushed to the cache devices
     * within a few seconds even if no client asks (bounds what a power
     * failure can take, and what recovery must check). */
    origin_window_check(c);
    if ((now - wb->last_commit >= wb->commit_ns || origin_window_full(c)) && !wb->committing) {
        wb->last_commit = now;
        if ((c->lg.wt_stable_seq < wt_stable_candidate(c) || origin_window_pending(c)) &&
            c->vol->origin->can_flush) {
            /* Write-through versions: flush the origin, then record them
             * as stable, so a crash re-checks only the last seconds.  The
             * candidate is below every version whose origin write is still
             * in flight, so the flush covers all it names: waiting for a
             * moment with nothing in flight would never come under a
             * steady write-through load. */
            wb->committing = true;
            stable_flush_begin(c, &wb->commit_flush);
            memset(&wb->commit_dio, 0, sizeof wb->commit_dio);
            wb->commit_dio.op = TC_DEV_FLUSH;
            wb->commit_dio.cb = commit_origin_flushed;
            dev_submit(c->vol->origin, &wb->commit_dio);
        } else if (c->lg.chunks_issued > c->lg.flushed_upto || !log_idle(&c->lg)) {
            log_commit(c);
        }
    }
    if (!c->stopping && !c->abandoned && !c->vol->cache_failed && !wb->no_marks)
        log_mark_flushed(c, now, MARK_DELAY_NS);
    seqrec_tick(c, now);
    if (wb->fail_waiting)
        fail_run_due(wb);
    if (wb->log_suppressed)
        log_refill(wb);
    pace(wb);
    if (c->draining || c->drain_waiters)
        cache_drain_check(c);
    if (!wb->stopped)
        timer_arm(c->reactor, &wb->tick, TICK_NS);
}

int writeback_init(struct cache *c)
{
    struct writeback *wb = tc_xcalloc(1, sizeof *wb);
    wb->c = c;
    wb->tick.fn = tick;
    wb->wake_task.fn = wake_task_fn;
    wb->free_task.fn = free_task_fn;
    wb->log_tokens = LOG_BURST;
    wb->log_last_ns = tc_now_ns();
    wb->rate_start = tc_now_ns();
    wb->last_commit = tc_now_ns();
    wb->commit_ns = COMMIT_NS;
    const char *commit_ms = getenv("TIERCACHE_TEST_COMMIT_MS");
    if (commit_ms && *commit_ms)
        wb->commit_ns = TC_MAX(strtoull(commit_ms, NULL, 10) * 1000 * 1000, TICK_NS);
    const char *no_passes = getenv("TIERCACHE_TEST_NO_WRITEBACK_PASSES");
    wb->no_passes = no_passes != NULL && *no_passes != '\0';
    /* For tests only: a kill long after a flush finds the log as a kill
     * right after it does, the chunks before it covered by no header's
     * flushed mark (the mark's header is written after 1 s of quiet). */
    const char *no_marks = getenv("TIERCACHE_TEST_NO_FLUSH_MARKS");
    wb->no_marks = no_marks != NULL && *no_marks != '\0';
    c->wb = wb;
    if (c->offline)
        wb->stopped = true;
    return 0;
}

/*
 * The tick (passes, the commit interval, flushed marks) starts only once
 * the cache is open.  Opening it runs the reactor (recovery's reads, the
 * superblock writes that clear the clean-stop record: dev_sync_io()), and
 * a tick armed earlier would fire there: a pass writing back the dirty
 * data recovery found, its CLEAN records appended and their chunk written
 * while the superblocks still record the clean stop.  A crash then left a
 * log newer than the record, which the next start refused as damaged; and
 * the start's "recovered ... dirty" line reported what was left after that
 * write-back, not what recovery found.
 */
void writeback_start(struct cache *c)
{
    struct writeback *wb = c->wb;
    if (wb == NULL || wb->stopped || wb->started)
        return;
    wb->started = true;
    wb->rate_start = wb->last_commit = tc_now_ns();
    timer_arm(c->reactor, &wb->tick, TICK_NS);
    pace(wb);
}

/*
 * The stop ends the pass jobs that have not begun writing the origin: those
 * still reading their blocks end when the reads do (reads_done()), those
 * waiting for the cache flush that must precede their origin writes end
 * now, their sync given up.  Their blocks stay dirty, in the log, written
 * back after the next start.  The stop waits for the jobs in flight
 * (cache.c, close_quiet()) before its own last sync: a job waiting for a
 * cache flush kept it waiting for as long as the flush took, and a pass
 * job has no caller that needs its write-back (demand jobs -- the
 * cleaner's, a client write's, a rescue's -- go on: their callers wait
 * for the outcome).  A stop under write-back load waited so on a cache
 * device that took long to flush; once the jobs it was waiting for are
 * gone, its own sync is the only flush it waits for.
 */
static void stop_unwritten(struct writeback *wb)
{
    for (;;) {
        struct wb_job *j = wb->syncing;
        while (j && (!j->pass || j->cancelled))
            j = j->next_syncing;
        if (j == NULL)
            return;
        j->cancelled = true;
        /* Not waiting any more: the stop came from a callback of the same
         * flush, which calls this job's sync next; job_synced() ends it
         * then, cancelled. */
        if (log_sync_cancel(wb->c, &j->sync_w))
            job_synced(&j->sync_w, 0);
    }
}

void writeback_fini(struct cache *c)
{
    struct writeback *wb = c->wb;
    if (wb == NULL)
        return;
    if (wb->stopped && wb->all_jobs)
        tc_warn("writeback: %u jobs still in flight at exit (%u pass jobs, turn %llu, next "
                "ticket %llu, waiting %s)", wb->all_jobs, wb->jobs,
                (unsigned long long)wb->turn, (unsigned long long)wb->next_ticket,
                wb->waiting ? "yes" : "no");
    if (!wb->stopped) {
        wb->stopped = true;
        timer_cancel(c->reactor, &wb->tick);
        /* A drain under way (tiercache flush) ends now, failed: no pass
         * starts any more, so it could only wait -- for ever, once its
         * jobs had ended with dirty data left, and with it the flush's
         * control connection, which kept the daemon from exiting after
         * the volume closed.  Its jobs in flight go on; what they leave
         * dirty is written back after the next start. */
        if (wb->draining) {
            snprintf(wb->drain_why, sizeof wb->drain_why,
                     WB_STOPPING_WHY);
            drain_end(wb, -EIO);
        }
        stop_unwritten(wb);
        throttle_check(wb);
        /* Writes waiting for a block's next attempt: none will come. */
        fail_run_due(wb);
        /* Flushes waiting for a drain (failure.c): it cannot end now. */
        if (c->drain_waiters)
            cache_drain_check(c);
        return;
    }
    free_if_done(c);
}

uint64_t writeback_retries(struct cache *c)
{
    return c->wb ? c->wb->retries : 0;
}

bool writeback_idle(struct cache *c)
{
    return c->wb == NULL || (c->wb->all_jobs == 0 && !c->wb->committing);
}

unsigned writeback_jobs_in_flight(struct cache *c)
{
    return c->wb ? c->wb->all_jobs : 0;
}

bool writeback_given_up(struct cache *c)
{
    struct writeback *wb = c->wb;
    return wb == NULL || wb->stopped || c->vol->origin->state == TC_DEV_OFFLINE ||
           wb->nfail_eio > 0;
}

bool writeback_block_given_up(struct cache *c, uint64_t oblock)
{
    struct writeback *wb = c->wb;
    if (wb == NULL || wb->stopped || c->vol->origin->state == TC_DEV_OFFLINE)
        return true;
    /* Not in the table: no back-off would pace another attempt. */
    struct wb_fail *f = fail_find(wb, oblock);
    return f == NULL || f->failures >= WB_FAILURES_EIO;
}

void writeback_kick(struct cache *c)
{
    if (c->wb && c->wb->started && !c->wb->stopped)
        pace(c->wb);
}

/* ---- on demand: the cleaner, and writes that must go to the origin ---- */

struct blocks_req {
    void (*done)(void *arg, int err);
    void *arg;
    struct tc_join join;        /* the jobs */
};

static void chunk_done(void *arg, int err)
{
    struct blocks_req *br = arg;
    if (!join_put(&br->join, err))
        return;
    void (*done)(void *, int) = br->done;
    void *a = br->arg;
    int e = br->join.err;
    free(br);
    done(a, e);
}

static void blocks_start(struct cache *c, const uint64_t *blocks, unsigned n,
                         void (*done)(void *arg, int err), void *arg)
{
    struct blocks_req *br = tc_xcalloc(1, sizeof *br);
    br->done = done;
    br->arg = arg;
    join_get(&br->join);        /* held while issuing */
    for (unsigned i = 0; i < n; i += JOB_BLOCKS) {
        join_get(&br->join);
        job_start(c->wb, blocks + i, TC_MIN(JOB_BLOCKS, n - i), false, chunk_done, br);
    }
    chunk_done(br, 0);
}

void writeback_blocks(struct cache *c, const uint64_t *blocks, unsigned n,
                      void (*done)(void *arg, int err), void *arg)
{
    struct writeback *wb = c->wb;
    /* A stop frees the writeback state once its last job and commit
     * flush end; a caller whose own I/O was in flight then (the cleaner's
     * chunk read, a rescue) may still ask.  The blocks stay dirty, as
     * after any failed write-back: the cleaner keeps them, the log holds
     * them for the next start. */
    if (wb == NULL) {
        done(arg, -ESHUTDOWN);
        return;
    }
    if (wb->nfail == 0) {
        blocks_start(c, blocks, n, done, arg);
        return;
    }
    /* Blocks backing off are left out: they stay dirty (the cleaner then
     * copies them), and the origin is not asked again before their time. */
    uint64_t *due = tc_xmalloc((n ? n : 1) * sizeof *due), now = tc_now_ns();
    unsigned m = 0;
    for (unsigned i = 0; i < n; i++) {
        struct wb_fail *f = fail_find(wb, blocks[i]);
        if (f == NULL || f->retry_at <= now)
            due[m++] = blocks[i];
    }
    blocks_start(c, due, m, done, arg);
    free(due);
}

/*
 * A stop's drain (cache.c, close_drain()): the last cache device failed
 * at the stop's own writes, after writeback stopped.  Its dirty data --
 * acknowledged writes still in its segment images among it -- goes to the
 * origin in demand jobs, as any drain's: no pass runs (writeback is
 * stopped), and no block's back-off is waited for (the stop is the last
 * chance: each block gets its attempt now).  Writeback's state may be
 * gone already (freed once its last job ended, free_if_done()): it is
 * made again, stopped, and goes again once these jobs end.
 */
void writeback_stop_drain(struct cache *c, const uint64_t *blocks, unsigned n,
                          void (*done)(void *arg, int err), void *arg)
{
    if (c->wb == NULL) {
        writeback_init(c);
        c->wb->stopped = true;
    }
    blocks_start(c, blocks, n, done, arg);
}

static void one_block_done(void *arg, int err)
{
    struct block_waiter *w = arg;
    w->err = err;
    w->fn(w);
}

void writeback_block(struct cache *c, uint64_t oblock, struct block_waiter *w)
{
    struct writeback *wb = c->wb;
    uint64_t b = oblock;
    w->err = 0;
    struct wb_fail *f = fail_find(wb, oblock);
    if (f && (f->retry_at > tc_now_ns() || wb->stopped)) {
        /* Backing off: wait for the block's next attempt (the tick starts
         * it), or learn that none comes (shutting down). */
        w->next = f->waiters;
        f->waiters = w;
        if (!f->listed) {
            f->listed = true;
            f->wnext = wb->fail_waiting;
            wb->fail_waiting = f;
        }
        if (wb->stopped)
            fail_run_due(wb);
        return;
    }
    if (!block_wait_wb_free(c->locks, oblock)) {
        /* A writeback of it is already in flight: wait for that one. */
        block_wait_wb(c->locks, oblock, w);
        return;
    }
    writeback_blocks(c, &b, 1, one_block_done, w);
}

/* ---- draining ----
 *
 * A drain writes dirty data back at full pace until one of two ends:
 *
 *  - everything: nothing is dirty (a detach and a mode change, whose
 *    writes add no dirty data by then; the stop's --flush-on-stop);
 *  - the dirty set at its start (tiercache flush): each block dirty then
 *    has been written back once since.  The set is a copy of the dirty
 *    bits (wb->want); passes take only its blocks while it lasts.  A
 *    block leaves it when a job started under this flush writes every
 *    sector that job found dirty, durably (want_written()), or when it is
 *    found clean (next_want_batch(), want_sweep()).  A job started before
 *    the flush does not count: it may have read a version older than one
 *    a client wrote (and flushed) after the job began and before the
 *    flush did.  A job started after the flush began reads the block's
 *    newest version, so it writes the version at the flush's start or a
 *    newer one.
 *
 *      dirty at start  +------------------------------+
 *      (want)          | 0 1 2 3 ...                  |  bits cleared as
 *                      +------------------------------+  written / clean
 *      written since   clients' new dirty data: not waited for
 *
 * Clients writing all along kept a drain of everything running for as
 * long as they wrote (minutes, many times the volume's size written
 * back); the dirty set at the start is finite, so a flush ends.
 */

/* The lowest dirty block refused WB_FAILURES_EIO times in a row (the
 * drain's message names it), of the flush's set if it has one. */
static uint64_t first_refused(struct writeback *wb)
{
    uint64_t first = UINT64_MAX;
    for (unsigned h = 0; h < FAIL_BUCKETS; h++)
        for (struct wb_fail *f = wb->fail[h]; f; f = f->next)
            if (f->failures >= WB_FAILURES_EIO && f->oblock < first &&
                map_is_dirty(&wb->c->map, f->oblock) &&
                (wb->want == NULL || (wb->want[f->oblock / 64] >> (f->oblock % 64)) & 1))
                first = f->oblock;
    return first == UINT64_MAX ? 0 : first;
}

/* The drain's reason when the origin refused every block it has left
 * (n, of which `which` says more): how many, where the first is, and the
 * origin's last answer. */
static void refused_why(struct writeback *wb, uint64_t n, const char *which)
{
    unsigned long long at = (unsigned long long)(first_refused(wb) * wb->c->block_size);
    if (n == 1)
        snprintf(wb->drain_why, sizeof wb->drain_why,
                 "the origin refused the dirty block%s %u times in a row, at origin byte %llu: %s",
                 which, WB_FAILURES_EIO, at, wb->last_why);
    else
        snprintf(wb->drain_why, sizeof wb->drain_why,
                 "the origin refused each of the %llu dirty blocks%s %u times in a row, the "
                 "first at origin byte %llu: %s",
                 (unsigned long long)n, which, WB_FAILURES_EIO, at, wb->last_why);
}

/* What a drain has left, in bytes: the dirty data, or for a flush of the
 * dirty set at its start the part of it not yet written (at most its
 * blocks' size; the dirty data, if that is less). */
static uint64_t drain_left_bytes(const struct writeback *wb)
{
    const struct cache *c = wb->c;
    uint64_t dirty = c->map.dirty_sectors * TC_SECTOR;
    if (wb->want == NULL)
        return dirty;
    return TC_MIN(dirty, wb->want_left * c->block_size);
}

/* A flush of the dirty set at its start, no pass job in flight: drop the
 * blocks of the set found clean (a failed device's drain may have
 * written them, scanning the dirty bits instead); count those left
 * backing off, refused WB_FAILURES_EIO times in a row, or with a
 * write-back in flight (a demand job's, a job's from before the flush). */
static void want_sweep(struct writeback *wb, uint64_t *backing_off, uint64_t *refused,
                       uint64_t *busy)
{
    struct cache *c = wb->c;
    *backing_off = *refused = *busy = 0;
    for (uint64_t w = 0; w < (c->nblocks_origin + 63) / 64; w++) {
        for (uint64_t word = wb->want[w]; word; word &= word - 1) {
            uint64_t b = w * 64 + (uint64_t)__builtin_ctzll(word);
            if (!map_is_dirty(&c->map, b)) {
                wb->want[w] &= ~(1ull << (b % 64));
                wb->want_left--;
                continue;
            }
            struct wb_fail *f = wb->nfail ? fail_find(wb, b) : NULL;
            if (f && f->failures >= WB_FAILURES_EIO)
                (*refused)++;
            else if (f)
                (*backing_off)++;
            else if (!block_wait_wb_free(c->locks, b))
                (*busy)++;
        }
    }
}

/* The drain of a flush of the dirty set at its start: done once each
 * block of the set is written back (want_left 0), however much has been
 * written since; given up as the drain of everything is, counting only
 * the blocks of the set. */
static void want_check(struct writeback *wb)
{
    struct cache *c = wb->c;
    if (wb->want_left == 0) {
        drain_end(wb, 0);
        return;
    }
    if (wb->jobs > 0)
        return;
    /* The origin away: wait while it reconnects (no sweep each tick),
     * give up once it is declared offline. */
    enum tc_dev_state st = c->vol->origin->state;
    if (st == TC_DEV_RECONNECTING)
        return;
    if (st == TC_DEV_OFFLINE) {
        snprintf(wb->drain_why, sizeof wb->drain_why, "the origin is offline");
        drain_end(wb, -EIO);
        return;
    }
    uint64_t backing_off, refused, busy;
    want_sweep(wb, &backing_off, &refused, &busy);
    if (wb->want_left == 0) {
        drain_end(wb, 0);
        return;
    }
    if (refused >= wb->want_left) {
        refused_why(wb, wb->want_left, " the flush had left");
        drain_end(wb, -EIO);
        return;
    }
    /* Blocks backing off, or written back by someone else now: wait. */
    if (backing_off > 0 || busy > 0)
        return;
    if (wb->retry_at && tc_now_ns() < wb->retry_at) {
        if (wb->fail_streak < DRAIN_GIVE_UP)
            return;
        snprintf(wb->drain_why, sizeof wb->drain_why, "%u write-back jobs failed in a row: %s",
                 wb->fail_streak, wb->last_why);
        drain_end(wb, -EIO);
        return;
    }
    /* Nothing in flight, nothing waited for, and blocks left: the next
     * pass takes them (pace() runs after every job and every tick); a
     * set that does not shrink over 3 checks is refused. */
    if (wb->want_left == wb->drain_dirty_at_pass) {
        if (++wb->drain_stuck_passes < 3)
            return;
        snprintf(wb->drain_why, sizeof wb->drain_why, "no progress in 3 passes%s%s",
                 wb->last_why[0] ? "; last failure: " : "", wb->last_why);
        drain_end(wb, -EIO);
        return;
    }
    wb->drain_dirty_at_pass = wb->want_left;
    wb->drain_stuck_passes = 0;
}

static void drain_check(struct writeback *wb)
{
    struct cache *c = wb->c;
    uint64_t now = tc_now_ns();
    if (wb->drain_progress && now - wb->drain_last_progress >= 500000000ull) {
        wb->drain_last_progress = now;
        wb->drain_progress(wb->drain_arg, drain_left_bytes(wb),
                           wb->bytes - wb->drain_start_bytes);
    }
    if (wb->want) {
        want_check(wb);
        return;
    }
    if (wb->jobs > 0)
        return;
    if (c->map.dirty_blocks > 0) {
        /* The origin is away: wait while it reconnects, give up once it is
         * declared offline (--origin-timeout); the data stays dirty. */
        enum tc_dev_state st = c->vol->origin->state;
        if (st == TC_DEV_RECONNECTING)
            return;
        if (st == TC_DEV_OFFLINE) {
            snprintf(wb->drain_why, sizeof wb->drain_why, "the origin is offline");
            goto give_up;
        }
        /* Every dirty block failed WB_FAILURES_EIO times in a row. */
        if (wb->nfail_eio >= c->map.dirty_blocks) {
            refused_why(wb, c->map.dirty_blocks, "");
            goto give_up;
        }
        /* Blocks backing off: their next attempts come. */
        if (wb->nfail > 0)
            return;
        /* Waiting to retry after failures: give up after several in a row. */
        if (wb->retry_at && now < wb->retry_at) {
            if (wb->fail_streak < DRAIN_GIVE_UP)
                return;
            snprintf(wb->drain_why, sizeof wb->drain_why, "%u write-back jobs failed in a row: %s",
                     wb->fail_streak, wb->last_why);
            goto give_up;
        }
        /* A whole pass without progress: the origin refuses the data. */
        if (c->map.dirty_sectors == wb->drain_dirty_at_pass) {
            if (++wb->drain_stuck_passes < 3)
                return;
            snprintf(wb->drain_why, sizeof wb->drain_why, "no progress in 3 passes%s%s",
                     wb->last_why[0] ? "; last failure: " : "", wb->last_why);
        } else {
            wb->drain_dirty_at_pass = c->map.dirty_sectors;
            wb->drain_stuck_passes = 0;
            return;
        }
    }
give_up:
    drain_end(wb, c->map.dirty_blocks ? -EIO : 0);
}

/* The drain ends, done (err 0) or given up (drain_why says why). */
static void drain_end(struct writeback *wb, int err)
{
    wb->draining = false;
    void (*done)(void *, int) = wb->drain_done;
    void *arg = wb->drain_arg;
    wb->drain_done = NULL;
    if (wb->drain_progress)
        wb->drain_progress(arg, drain_left_bytes(wb), wb->bytes - wb->drain_start_bytes);
    free(wb->want);
    wb->want = NULL;
    wb->want_left = 0;
    /* The flush's scans set it from its blocks alone: the passes' next
     * scan finds when the others are due. */
    wb->fail_next_due = 0;
    if (done)
        done(arg, err);
}

void writeback_drain(struct cache *c, bool dirty_now_only,
                     void (*progress)(void *arg, uint64_t left, uint64_t done_bytes),
                     void (*done)(void *arg, int err), void *arg)
{
    struct writeback *wb = c->wb;
    if (wb == NULL || wb->stopped) {
        /* Stopped by the stop (writeback_fini()): no pass starts any
         * more, so the drain could only wait for ever.  It fails at once,
         * as one under way at the stop does (engine/volume.c refuses the
         * operations that drain once the volume closes; this is the
         * floor under them). */
        if (wb)
            snprintf(wb->drain_why, sizeof wb->drain_why,
                     WB_STOPPING_WHY);
        done(arg, -EIO);
        return;
    }
    wb->draining = true;
    wb->drain_progress = progress;
    wb->drain_done = done;
    wb->drain_arg = arg;
    wb->drain_start_bytes = wb->bytes;
    wb->drain_last_progress = 0;
    wb->drain_stuck_passes = 0;
    wb->drain_dirty_at_pass = UINT64_MAX;
    wb->drain_why[0] = '\0';
    if (dirty_now_only) {
        /* Even with nothing dirty: jobs of blocks lost meanwhile may be
         * in flight, and a drain of everything would not end while
         * clients write. */
        size_t words = (c->nblocks_origin + 63) / 64 + 1;
        wb->want = malloc(words * sizeof *wb->want);
        if (wb->want == NULL) {
            tc_warn("writeback: no memory for the set of %llu dirty blocks a flush writes "
                    "back: it drains until nothing is dirty instead",
                    (unsigned long long)c->map.dirty_blocks);
        } else {
            memcpy(wb->want, c->map.dirty_bits, words * sizeof *wb->want);
            wb->want_left = c->map.dirty_blocks;
            wb->want_cursor = 0;
            wb->flush_no++;
        }
    }
    /* Asked for explicitly: every block gets fresh attempts now (the
     * origin may be back), and the drain gives up only after each dirty
     * block failed WB_FAILURES_EIO times in a row again. */
    for (unsigned h = 0; h < FAIL_BUCKETS && wb->nfail; h++)
        for (struct wb_fail *f = wb->fail[h]; f; f = f->next) {
            f->failures = 0;
            f->retry_at = 0;
        }
    wb->nfail_eio = 0;
    wb->fail_next_due = 0;
    wb->retry_at = 0;
    wb->fail_streak = 0;
    pace(wb);
}

void writeback_drain_reason(struct cache *c, char *buf, size_t len)
{
    /* The state is freed only once writeback is stopped (free_if_done()):
     * a stop, which also ends a drain under way (writeback_fini()). */
    snprintf(buf, len, "%s", c->wb ? c->wb->drain_why
                                   : WB_STOPPING_WHY);
}

void writeback_status_json(struct cache *c, struct tc_json *j)
{
    struct writeback *wb = c->wb;
    json_begin_object(j, "writeback");
    json_double(j, "dirty_target_ratio", c->vol->cfg.dirty_target);
    json_double(j, "dirty_high_ratio", c->vol->cfg.dirty_high);
    json_double(j, "dirty_ratio", dirty_ratio(c));
    if (wb) {
        json_double(j, "rate_bytes_per_second", wb->rate < 1 ? 0 : wb->rate);
        json_uint(j, "written_bytes", wb->bytes);
        json_uint(j, "origin_writes", wb->writes);
        json_uint(j, "jobs_in_flight", wb->all_jobs);
        json_uint(j, "jobs_done", wb->jobs_done);
        json_uint(j, "errors", wb->errors);
        json_uint(j, "retries", wb->retries);
        json_uint(j, "block_failures", wb->block_failures);
        json_uint(j, "blocks_in_backoff", wb->nfail);
        json_uint(j, "blocks_failing_writes", wb->nfail_eio);
        json_uint(j, "blocks_written_after_failures", wb->blocks_recovered);
        json_uint(j, "writes_failed", wb->writes_failed);
        json_uint(j, "log_messages_suppressed", wb->log_suppressed);
        json_uint(j, "failed_jobs_in_a_row", wb->fail_streak);
        json_uint(j, "out_of_order_writes", wb->out_of_order);
        json_bool(j, "draining", wb->draining);
        /* A tiercache flush: the blocks dirty when it began and not yet
         * known written back (0 when none runs). */
        json_uint(j, "flush_blocks_left", wb->want ? wb->want_left : 0);
        json_double(j, "dirty_ceiling_ratio", dirty_ceiling(c));
        json_uint(j, "throttled_writes", wb->throttled_writes);
        json_uint(j, "throttled_now", wb->throttled_now);
        json_micros_as_seconds(j, "throttle_wait_seconds", wb->throttle_wait_ns / 1000);
        json_micros_as_seconds(j, "throttle_max_wait_seconds", wb->throttle_max_wait_ns / 1000);
        /* Clean records beyond their budget of the cleaner's reserve
         * (clean_record()): deferred, appended since, waiting now, given
         * up (more than OWED_MAX waiting). */
        json_uint(j, "clean_records_deferred", wb->clean_deferred);
        json_uint(j, "clean_records_replayed", wb->clean_replayed);
        json_uint(j, "clean_records_waiting", wb->nowed);
        json_uint(j, "clean_records_given_up", wb->clean_given_up);
    }
    json_uint(j, "passes", c->st.writeback_passes);
    /* Exact to the microsecond: a double printed with six significant
     * digits put a unix time off by up to 5000 s. */
    if (c->last_flush_wall_ns)
        json_micros_as_seconds(j, "last_flush_unix_time", c->last_flush_wall_ns / 1000);
    else
        json_null(j, "last_flush_unix_time");
    json_end_object(j);
}
