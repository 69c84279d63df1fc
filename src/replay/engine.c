/*
 * Engine replay: the real engine over memory devices, fed a trace.
 *
 * A cache set is formatted in the process on a memory device (io/dev_mem.c)
 * of the requested size, in front of a memory origin of the volume's size,
 * and opened as `serve` opens it (tc_volume_open() with serve's defaults
 * and the chosen policy, mode, cutoff and fill).  Each request of the trace
 * is then submitted through tc_submit() and waited for before the next one
 * (queue depth 1): the same index, admission, eviction, segment, cleaner
 * and capacity code as serve, and the figures `status --json` shows under
 * volume.cache, read from the engine's own counters.
 *
 * Data: none.  The volume is data-free (tc_volume_config.data_free): the
 * engine takes every data sector for zeroes and never copies, checksums or
 * checks one, and tells the cache device which part of each I/O is data,
 * which the memory device leaves out; the origin is a dataless memory
 * device.  Client buffers are never filled.  Everything else is as with
 * zeroes for data: the engine's own metadata (superblocks, the shutdown
 * snapshot) is kept by the memory device and read back and checked as on
 * real devices -- but for chunk headers, which the engine keeps in RAM as
 * sealed rather than encoding, storing, loading and decoding them
 * (engine/log.h, struct ram_chunk: their sectors are reserved and written
 * all the same, so every decision and figure is as with them).
 *
 * Time: the engine's clock is virtual during replay (util/misc.h,
 * tc_virtual_now_ns): before each request it is moved to the request's
 * time in the trace, and timers falling due on the way run at their own
 * deadlines, in order.  So idle detection (writeback after 1 s without
 * client I/O), chunk sealing and the other timed rules see the trace's
 * pacing, not the replay's speed, and a replay is deterministic.  Devices
 * answer instantly in that time: a request takes no virtual time, and
 * background work (writeback, cleaning) finishes between two requests
 * however close they are -- the one difference from serve, where it
 * competes with the requests for real devices.  When the engine waits for
 * a timer to complete a request, the clock jumps to that timer.
 *
 * Requests: reads and writes as themselves with zero buffers, flush,
 * trim, write-zeroes and cache likewise; block status is skipped.  A
 * request past the volume's end is clipped to it, or skipped if it starts
 * there (both counted in the log line at the end, not in the result).
 *
 * Sampled (t->sample, for miniature simulation): ranged requests keep the
 * runs of their sampled blocks only, each submitted as a request, and a
 * read is a hit when every run hit; flushes go as they are.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/cache.h"
#include "engine/cleaner.h"
#include "engine/engine.h"
#include "format/format.h"
#include "io/dev.h"
#include "io/reactor.h"
#include "policy/policy.h"
#include "replay/replay.h"
#include "tiercache.h"
#include "util/log.h"
#include "util/misc.h"
#include "util/parse.h"

/* Stuck: no task, no I/O and no timer, and the request not done. */
#define MAX_SAME_TIME_STEPS 1000000

/* One replay run: its devices, volume and the request in flight. */
struct rep {
    struct tc_reactor r;
    bool reactor_ok;
    char origin[64], cache[64];     /* "mem:NAME" */
    bool origin_made, cache_made;
    struct tc_volume *vol;
    uint64_t size;                  /* the volume's */
    uint64_t dev_bytes;             /* the cache device's */
    uint64_t t0, now;               /* virtual clock: its base and its value */
    uint8_t *wbuf, *rbuf;           /* zeroes for writes; room for reads */
    size_t buflen;
    struct tc_request req;
    bool done;
    int err;
    bool closed;
    uint64_t clipped, skipped, failed, unknown;
};

static atomic_uint run_counter;

static void set_clock(struct rep *p, uint64_t t)
{
    if (t > p->now)
        p->now = t;
    tc_virtual_now_ns = p->now;
}

/* Run every task queued and every timer due at the current time. */
static void settle(struct rep *p)
{
    unsigned steps = 0;
    while ((p->r.task_head || p->r.inflight) && steps++ < MAX_SAME_TIME_STEPS)
        reactor_poll(&p->r, 0);
}

/* Move the clock to t, running the timers due on the way at their
 * deadlines. */
static void advance_to(struct rep *p, uint64_t t)
{
    settle(p);
    while (p->r.heap_len > 0 && p->r.heap[0]->deadline <= t) {
        set_clock(p, p->r.heap[0]->deadline);
        reactor_poll(&p->r, 0);
        settle(p);
    }
    set_clock(p, t);
}

/* Run the reactor until *flag; false if nothing is left that could set it. */
static bool wait_for(struct rep *p, const bool *flag)
{
    unsigned same = 0;
    while (!*flag) {
        if (p->r.task_head) {
            reactor_poll(&p->r, 0);
        } else if (p->r.inflight) {
            reactor_poll(&p->r, 1000000);
        } else if (p->r.heap_len > 0) {
            /* Waiting on a timer: its time has come. */
            uint64_t before = p->now;
            set_clock(p, p->r.heap[0]->deadline);
            reactor_poll(&p->r, 0);
            if (p->now == before && ++same > MAX_SAME_TIME_STEPS)
                return false;
        } else {
            return false;
        }
    }
    return true;
}

static void req_done(struct tc_request *req, int err)
{
    struct rep *p = req->priv;
    p->err = err;
    p->done = true;
}

static void volume_closed(void *arg, int err)
{
    struct rep *p = arg;
    p->err = err;
    p->closed = true;
}

static void grow_buffers(struct rep *p, size_t len)
{
    if (len <= p->buflen)
        return;
    size_t n = p->buflen ? p->buflen : (1u << 20);
    while (n < len)
        n *= 2;
    free(p->wbuf);
    free(p->rbuf);
    p->wbuf = tc_alloc_aligned(n);
    p->rbuf = tc_alloc_aligned(n);
    memset(p->wbuf, 0, n);
    p->buflen = n;
}

/* The volume's size: given, the native header's, or the end of the
 * highest request (a pass over the trace), rounded up to `round`. */
static int volume_size(const struct replay_trace *t, uint64_t given, uint64_t round,
                       uint64_t *out, char *err, size_t errlen)
{
    if (given) {
        *out = tc_round_up(given, round);
        return 0;
    }
    struct tc_trace_reader *rd = trace_reader_open(t->path, t->format, &t->opt, err, errlen);
    if (rd == NULL)
        return -1;
    uint64_t size = trace_reader_volume_size(rd), end = 0;
    int rc = 0;
    if (size == 0) {
        struct tc_trace_req q;
        while ((rc = trace_reader_next(rd, &q, err, errlen)) == 1)
            if (q.op != TC_OP_FLUSH && q.offset + q.length > end)
                end = q.offset + q.length;
        size = end;
    }
    trace_reader_close(rd);
    if (rc < 0)
        return -1;
    if (size == 0) {
        snprintf(err, errlen, "%s: the trace names no volume size and no request with a range; "
                 "give the volume size", t->path);
        return -1;
    }
    *out = tc_round_up(size, round);
    return 0;
}

static int setup(struct rep *p, const struct replay_engine_config *cfg, uint32_t block,
                 char *err, size_t errlen)
{
    unsigned id = atomic_fetch_add(&run_counter, 1);
    snprintf(p->origin, sizeof p->origin, "mem:replay-%d-%u-origin", (int)getpid(), id);
    snprintf(p->cache, sizeof p->cache, "mem:replay-%d-%u-cache", (int)getpid(), id);
    if (dev_mem_create(p->origin + 4, p->size, true, err, errlen) < 0)
        return -1;
    p->origin_made = true;
    uint64_t cache_bytes = tc_round_down(cfg->cache_bytes, TC_SECTOR);
    if (cache_bytes == 0) {
        snprintf(err, errlen, "cache size %llu: must be at least 4096 bytes",
                 (unsigned long long)cfg->cache_bytes);
        return -1;
    }
    if (dev_mem_create(p->cache + 4, cache_bytes, false, err, errlen) < 0)
        return -1;
    p->dev_bytes = cache_bytes;
    p->cache_made = true;

    const char *caches[2] = { p->cache, NULL };
    struct tc_format_opts fo = { .caches = caches, .origin = p->origin, .block_size = block };
    struct tc_format_result fr;
    char ferr[512];
    if (tc_format(&fo, &fr, ferr, sizeof ferr) < 0) {
        snprintf(err, errlen, "cache size %llu, block size %u: %s",
                 (unsigned long long)cfg->cache_bytes, block, ferr);
        return -1;
    }
    if (reactor_init(&p->r, 64) < 0) {
        snprintf(err, errlen, "io_uring: %s", strerror(errno));
        return -1;
    }
    p->reactor_ok = true;

    /* From here on the engine lives on the trace's clock. */
    p->t0 = p->now = tc_now_ns();
    set_clock(p, p->t0);
    struct tc_volume_config vc;
    tc_volume_config_defaults(&vc);
    vc.origin = p->origin;
    vc.caches = caches;
    vc.mode = (enum tc_mode)cfg->mode;
    vc.data_free = true;
    if (cfg->policy)
        vc.policy = cfg->policy;
    if (cfg->sequential_cutoff != UINT64_MAX)
        vc.sequential_cutoff = cfg->sequential_cutoff;
    if (cfg->fill >= 0)
        vc.fill = (enum tc_fill)cfg->fill;
    /* auto follows the origin's measured cost, and the memory origin here
     * costs nothing: replay takes auto's choice before any measure (the
     * slow origin a trace is replayed for), whatever the host's speed. */
    if (vc.fill == TC_FILL_AUTO)
        vc.fill = block <= (256u << 10) ? TC_FILL_GROUP : TC_FILL_SECTORS;
    p->vol = tc_volume_open(&p->r, &vc, err, errlen);
    return p->vol ? 0 : -1;
}

/* Where the device's bytes are now, added to the sums in out. */
static void sample_usage(struct cache *c, uint64_t dev_bytes, struct replay_result *out)
{
    struct space_usage u;
    space_usage(&c->sp, &u);
    double d = (double)dev_bytes / TC_SECTOR;
    uint64_t segs = (uint64_t)c->sp.nsegs * c->seg_sectors;
    out->usage_samples++;
    out->use_live += (double)u.live / d;
    out->use_meta += ((double)dev_bytes / TC_SECTOR - (double)segs) / d;
    out->use_free += (double)u.free / d;
    out->use_unfilled += (double)u.unfilled / d;
    out->use_headers += (double)u.headers / d;
    out->use_stale += (double)u.stale / d;
}

/* Submit one request and wait for it. */
static int run_one(struct rep *p, const struct tc_trace_req *q, char *err, size_t errlen)
{
    if (q->op > TC_OP_BLOCK_STATUS) {
        p->unknown++;
        return 0;
    }
    if (q->op == TC_OP_BLOCK_STATUS)
        return 0;
    uint64_t off = q->offset, len = q->length;
    if (q->op != TC_OP_FLUSH) {
        if (len == 0 || off >= p->size) {
            p->skipped++;
            return 0;
        }
        if (len > p->size - off) {
            len = p->size - off;
            p->clipped++;
        }
    } else {
        off = len = 0;
    }
    advance_to(p, p->t0 + q->time_ns);
    struct tc_request *req = &p->req;
    memset(req, 0, sizeof *req);
    req->op = (enum tc_op)q->op;
    req->flags = q->flags & (TC_REQ_FUA | TC_REQ_NO_HOLE | TC_REQ_FAST_ZERO);
    req->offset = off;
    req->length = len;
    if (req->op == TC_OP_READ || req->op == TC_OP_WRITE) {
        grow_buffers(p, len);
        req->buf = req->op == TC_OP_READ ? p->rbuf : p->wbuf;
    }
    req->done = req_done;
    req->priv = p;
    p->done = false;
    tc_submit(p->vol, req);
    if (!wait_for(p, &p->done)) {
        snprintf(err, errlen, "%s of %llu bytes at offset %llu never completed (the engine "
                 "waits for nothing that could end it)", q->op == TC_OP_READ ? "read" : "request",
                 (unsigned long long)len, (unsigned long long)off);
        return -1;
    }
    if (p->err)
        p->failed++;
    return 0;
}

/*
 * Replay knows the requests to come, and their look-ups are most of a
 * request's cache misses: each block's index bucket, then its entry (a
 * random one of the table), and the policy's history words of a block
 * asked about.  The requests are read AHEAD past the one submitted; a
 * request's buckets are loaded when it is read, its entries and policy
 * words while the request before it runs.  Hints only: nothing is
 * decided by them (the --json output is the same byte for byte), and a
 * request of more than AHEAD_BLOCKS blocks has its first ones loaded
 * only (the engine starts the loads of all of them itself).
 */
#define AHEAD 2
#define AHEAD_BLOCKS 8

static void prefetch_request(struct rep *p, const struct tc_trace_req *q, bool entries)
{
    if ((q->op != TC_OP_READ && q->op != TC_OP_WRITE) || q->length == 0 || q->offset >= p->size)
        return;
    struct cache *c = p->vol->cache;
    uint64_t first = q->offset / c->block_size;
    uint64_t last = TC_MIN((q->offset + q->length - 1) / c->block_size, first + AHEAD_BLOCKS - 1);
    for (uint64_t b = first; b <= last; b++) {
        if (!entries) {
            index_prefetch_bucket(&c->map.idx, b);
            continue;
        }
        index_prefetch(&c->map.idx, b, 1);
        policy_prefetch(c->policy, b);
    }
}

/* A request of a sampled replay: the runs of its sampled blocks, one
 * request each (replay.h, struct replay_sample); a read is a hit when they
 * all hit.  Requests with no sampled block are not counted. */
static int run_sampled(struct rep *p, const struct replay_sample *sm,
                       const struct tc_trace_req *q, struct replay_result *out, char *err,
                       size_t errlen)
{
    if (q->length == 0 || q->offset >= p->size)
        return 0;
    uint64_t end = q->offset + TC_MIN((uint64_t)q->length, p->size - q->offset);
    const struct cache_stats *st = &p->vol->cache->st;
    uint64_t misses = st->read_misses, wh = st->write_hits, pos = q->offset, off, len,
             bytes = 0;
    struct tc_trace_req piece = *q;
    while (replay_sample_run(sm, &pos, end, &off, &len)) {
        piece.offset = off;
        piece.length = (uint32_t)len;
        if (run_one(p, &piece, err, errlen) < 0)
            return -1;
        bytes += len;
    }
    if (bytes == 0)
        return 0;
    out->requests++;
    if (q->op == TC_OP_READ) {
        double w = replay_sample_weight(sm, q->offset, end);
        bool miss = st->read_misses != misses;
        out->reads++;
        out->read_bytes += bytes;
        out->read_misses += miss;
        out->read_hits += !miss;
        out->wreads += w;
        out->wread_misses += miss ? w : 0;
    } else if (q->op == TC_OP_WRITE) {
        out->writes++;
        out->write_hits += st->write_hits != wh;
    }
    return 0;
}

static void teardown(struct rep *p)
{
    if (p->vol) {
        p->closed = false;
        tc_volume_close(p->vol, volume_closed, p);
        if (!wait_for(p, &p->closed))
            tc_warn("replay: the volume did not finish closing");
        settle(p);
        tc_volume_free(p->vol);
        p->vol = NULL;
    }
    tc_virtual_now_ns = 0;
    if (p->reactor_ok)
        reactor_fini(&p->r);
    if (p->cache_made)
        dev_mem_destroy(p->cache + 4);
    if (p->origin_made)
        dev_mem_destroy(p->origin + 4);
    free(p->wbuf);
    free(p->rbuf);
}

int replay_engine(const struct replay_trace *t, const struct replay_engine_config *cfg,
                  struct replay_result *out, char *err, size_t errlen)
{
    uint32_t block = cfg->block_bytes ? (uint32_t)cfg->block_bytes : TC_DEFAULT_BLOCK_SIZE;
    if (cfg->block_bytes > TC_MAX_BLOCK_SIZE || !tc_is_pow2(block) || block < TC_MIN_BLOCK_SIZE) {
        snprintf(err, errlen, "block size %llu: must be a power of two from 4K to 1M",
                 (unsigned long long)cfg->block_bytes);
        return -1;
    }
    uint64_t t_start = tc_now_ns(), cpu_start = replay_cpu_ns();
    struct rep *p = tc_xcalloc(1, sizeof *p);
    struct tc_trace_reader *rd = NULL;
    int rc = -1;
    memset(out, 0, sizeof *out);
    snprintf(out->policy, sizeof out->policy, "%s", cfg->policy ? cfg->policy : "default");
    out->cache_bytes = cfg->cache_bytes;
    out->block_bytes = block;

    if (volume_size(t, cfg->volume_bytes, block, &p->size, err, errlen) < 0)
        goto out;
    if (setup(p, cfg, block, err, errlen) < 0)
        goto out;
    rd = trace_reader_open(t->path, t->format, &t->opt, err, errlen);
    if (rd == NULL)
        goto out;
    struct cache_stats *st = &p->vol->cache->st;
    struct tc_trace_req ring[AHEAD + 1], q;
    unsigned head = 0, have = 0;
    int n = 1;
    bool steady = false;
    uint64_t nreq = 0;
    for (;;) {
        /* Read AHEAD requests past the next: the newest's buckets, the
         * next one's entries and policy words are loaded meanwhile. */
        while (n == 1 && have <= AHEAD) {
            struct tc_trace_req *nq = &ring[(head + have) % (AHEAD + 1)];
            n = trace_reader_next(rd, nq, err, errlen);
            if (n == 1) {
                have++;
                if (!t->sample)
                    prefetch_request(p, nq, false);
            }
        }
        if (n < 0)
            goto out;
        if (have == 0)
            break;
        q = ring[head];
        head = (head + 1) % (AHEAD + 1);
        have--;
        if (have > 0 && !t->sample)
            prefetch_request(p, &ring[head], true);
        /* Every 16th request: a sample walks every segment's chunks. */
        steady = steady || !space_has_free(&p->vol->cache->sp);
        if (steady && !t->sample && nreq++ % 16 == 0)
            sample_usage(p->vol->cache, p->dev_bytes, out);
        out->trace_reads += q.op == TC_OP_READ;
        if (t->sample && q.op != TC_OP_FLUSH && q.op < TC_OP_BLOCK_STATUS) {
            if (run_sampled(p, t->sample, &q, out, err, errlen) < 0)
                goto out;
            continue;
        }
        out->requests++;
        uint64_t wh = st->write_hits;
        if (run_one(p, &q, err, errlen) < 0)
            goto out;
        if (q.op == TC_OP_READ && q.length && q.offset < p->size) {
            out->reads++;
            out->read_bytes += TC_MIN((uint64_t)q.length, p->size - q.offset);
        } else if (q.op == TC_OP_WRITE && q.length && q.offset < p->size) {
            out->writes++;
            out->write_hits += st->write_hits != wh;
        }
    }
    if (!t->sample) {
        out->read_hits = st->read_hits;
        out->read_misses = st->read_misses;
        out->wreads = (double)out->reads;
        out->wread_misses = (double)out->read_misses;
    }
    if (out->usage_samples) {
        double ns = (double)out->usage_samples;
        out->use_live /= ns;
        out->use_meta /= ns;
        out->use_free /= ns;
        out->use_unfilled /= ns;
        out->use_headers /= ns;
        out->use_stale /= ns;
    }
    out->read_hit_bytes = st->read_hit_bytes;
    out->read_miss_bytes = st->read_miss_bytes;
    out->promotions = st->promotions;
    out->evictions = st->demotions;
    out->copies = st->reinsertions;
    out->copied_bytes = st->reinserted_bytes;
    out->device_write_bytes = st->chunk_bytes_written;
    cleaner_costs(p->vol->cache, &out->cleaner_read_bytes, &out->tail_syncs);
    if (p->clipped || p->skipped || p->failed || p->unknown)
        tc_info("replay %s: %llu requests past the volume's end (%llu bytes) clipped, %llu "
                "skipped; %llu failed; %llu of unknown kinds", t->path,
                (unsigned long long)p->clipped, (unsigned long long)p->size,
                (unsigned long long)p->skipped, (unsigned long long)p->failed,
                (unsigned long long)p->unknown);
    rc = 0;
out:
    if (rd)
        trace_reader_close(rd);
    teardown(p);
    free(p);
    out->seconds = (double)(tc_now_ns() - t_start) / 1e9;
    out->cpu_seconds = (double)(replay_cpu_ns() - cpu_start) / 1e9;
    return rc;
}
