/*
 * replay_reference(): the textbook simulators of refsim.h over a trace.
 *
 * The cache holds cache_bytes / block_bytes blocks of block_bytes.  Each
 * request is cut into the blocks it touches, in order, and each block is
 * one access of the simulator:
 *
 *   read          every block is accessed; a block not cached is admitted
 *                 (filled whole).  The request is a hit when every one of
 *                 its blocks was cached when it was accessed; its bytes
 *                 count as hit or missed block by block (the part of the
 *                 request inside each block).
 *   write,        write-allocate: every block is accessed like a read and
 *   write-zeroes  a block not cached is admitted (its data is in hand).  A
 *                 write hit: some block of it was cached.
 *   trim          the blocks it touches leave the cache (even in part: the
 *                 cached copy is stale).
 *   others        (flush, cache, block status) only counted as requests.
 *
 * ref-opt reads the trace twice: first to give each access the index of
 * its block's next read, then to simulate.
 *
 * Sampled (t->sample, for miniature simulation): only sampled blocks are
 * accessed or dropped, and requests with none are not counted; a read is
 * a hit when its sampled blocks were cached (replay.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay/refsim.h"
#include "replay/replay.h"
#include "tiercache.h"
#include "util/misc.h"
#include "util/parse.h"

static const struct refsim_ops *const sims[] = {
    &ref_lru_ops, &ref_arc_ops, &ref_s3fifo_ops, &ref_sieve_ops, &ref_opt_ops,
};

static const struct refsim_ops *find(const char *name)
{
    for (size_t i = 0; i < sizeof sims / sizeof sims[0]; i++)
        if (strcmp(sims[i]->name, name) == 0)
            return sims[i];
    return NULL;
}

bool replay_reference_known(const char *name) { return find(name) != NULL; }

const char *replay_reference_names(void)
{
    return "ref-lru, ref-arc, ref-s3fifo, ref-sieve, ref-opt";
}

enum kind { K_NONE, K_READ, K_WRITE, K_TRIM };

static enum kind kind_of(const struct tc_trace_req *q)
{
    if (q->length == 0)
        return K_NONE;
    switch (q->op) {
    case TC_OP_READ:
        return K_READ;
    case TC_OP_WRITE:
    case TC_OP_WRITE_ZEROES:
        return K_WRITE;
    case TC_OP_TRIM:
        return K_TRIM;
    default:
        return K_NONE;
    }
}

static struct tc_trace_reader *open_trace(const struct replay_trace *t, char *err,
                                          size_t errlen)
{
    if (strcmp(t->path, "-") == 0) {
        snprintf(err, errlen, "replay reads the trace once per policy and size: give a "
                 "file, not '-'");
        return NULL;
    }
    return trace_reader_open(t->path, t->format, &t->opt, err, errlen);
}

static bool range_ok(const struct tc_trace_req *q, char *err, size_t errlen)
{
    if (q->offset > UINT64_MAX - q->length) {
        snprintf(err, errlen, "a request at offset %llu of %u bytes ends past 2^64",
                 (unsigned long long)q->offset, q->length);
        return false;
    }
    return true;
}

/* Sampled replays: whether a block of q is sampled (flushes and other
 * requests without a range: kept, as requests only). */
static bool any_sampled(const struct replay_sample *sm, const struct tc_trace_req *q)
{
    if (kind_of(q) == K_NONE)
        return q->length != 0 || (q->op != TC_OP_READ && q->op != TC_OP_WRITE &&
                                  q->op != TC_OP_WRITE_ZEROES && q->op != TC_OP_TRIM);
    uint64_t pos = q->offset, off, len;
    return replay_sample_run(sm, &pos, q->offset + q->length, &off, &len);
}

/* For ref-opt: *out[i] is the index of the next read access of access
 * i's block, RS_NEVER if the block is written or trimmed first, or not
 * accessed again. */
static int next_uses(const struct replay_trace *t, uint64_t bs, uint32_t **out, char *err,
                     size_t errlen)
{
    struct tc_trace_reader *r = open_trace(t, err, errlen);
    if (!r)
        return -1;
    struct bmap last;
    bmap_init(&last, 1 << 16);
    size_t cap = 1 << 20, n = 0;
    uint32_t *nu = tc_xmalloc(cap * sizeof *nu);
    struct tc_trace_req q;
    int rc;
    while ((rc = trace_reader_next(r, &q, err, errlen)) == 1) {
        enum kind k = kind_of(&q);
        if (k == K_NONE)
            continue;
        if (!range_ok(&q, err, errlen)) {
            rc = -1;
            break;
        }
        uint64_t first = q.offset / bs, end = (q.offset + q.length - 1) / bs;
        for (uint64_t b = first; b <= end; b++) {
            if (t->sample && !replay_sampled(t->sample, b))
                continue;
            if (k == K_TRIM) {
                bmap_del(&last, b);
                continue;
            }
            if (n >= RS_NEVER - 1) {
                snprintf(err, errlen, "ref-opt: the trace has more than %u block accesses",
                         RS_NEVER - 2);
                rc = -1;
                goto out;
            }
            if (n == cap) {
                cap *= 2;
                nu = realloc(nu, cap * sizeof *nu);
                if (!nu)
                    abort();
            }
            uint32_t *prev = bmap_get(&last, b);
            if (prev) {
                nu[*prev] = k == K_READ ? (uint32_t)n : RS_NEVER;
                *prev = (uint32_t)n;
            } else {
                bmap_put(&last, b, (uint32_t)n);
            }
            nu[n++] = RS_NEVER;
        }
    }
out:
    trace_reader_close(r);
    bmap_free(&last);
    if (rc < 0) {
        free(nu);
        return -1;
    }
    *out = nu;
    return 0;
}

int replay_reference(const struct replay_trace *t, const char *name, uint64_t cache_bytes,
                     uint64_t block_bytes, struct replay_result *out, char *err,
                     size_t errlen)
{
    const struct refsim_ops *ops = find(name);
    if (!ops) {
        snprintf(err, errlen, "unknown reference policy '%s' (choose %s)", name,
                 replay_reference_names());
        return -1;
    }
    if (block_bytes < 512 || !tc_is_pow2(block_bytes)) {
        snprintf(err, errlen, "block size %llu: a power of two of at least 512 bytes",
                 (unsigned long long)block_bytes);
        return -1;
    }
    uint64_t entries = cache_bytes / block_bytes;
    if (entries == 0) {
        snprintf(err, errlen, "cache size %llu bytes: less than one block of %llu bytes",
                 (unsigned long long)cache_bytes, (unsigned long long)block_bytes);
        return -1;
    }
    uint64_t t0 = tc_now_ns(), cpu0 = replay_cpu_ns();
    uint32_t *nu = NULL;
    if (ops == &ref_opt_ops && next_uses(t, block_bytes, &nu, err, errlen) < 0)
        return -1;
    struct tc_trace_reader *r = open_trace(t, err, errlen);
    if (!r) {
        free(nu);
        return -1;
    }
    struct refsim *s = ops->create(entries);
    if (!s) {
        snprintf(err, errlen, "cache size %llu bytes: %llu blocks of %llu bytes are more "
                 "than %s can simulate", (unsigned long long)cache_bytes,
                 (unsigned long long)entries, (unsigned long long)block_bytes, name);
        trace_reader_close(r);
        free(nu);
        return -1;
    }
    memset(out, 0, sizeof *out);
    snprintf(out->policy, sizeof out->policy, "%s", name);
    out->cache_bytes = cache_bytes;
    out->block_bytes = block_bytes;
    struct tc_trace_req q;
    uint64_t n = 0;
    int rc;
    while ((rc = trace_reader_next(r, &q, err, errlen)) == 1) {
        enum kind k = kind_of(&q);
        if (k != K_NONE && !range_ok(&q, err, errlen)) {
            rc = -1;
            break;
        }
        out->trace_reads += q.op == TC_OP_READ;
        if (t->sample && !any_sampled(t->sample, &q))
            continue;
        out->requests++;
        if (q.op == TC_OP_READ) {
            out->reads++;
            out->read_bytes += q.length;
        } else if (q.op == TC_OP_WRITE || q.op == TC_OP_WRITE_ZEROES) {
            out->writes++;
        }
        if (k == K_NONE) {
            if (q.op == TC_OP_READ) {
                out->read_hits++;       /* nothing to miss */
                out->wreads += 1;
            }
            continue;
        }
        uint64_t end = q.offset + q.length;
        uint64_t first = q.offset / block_bytes, last = (end - 1) / block_bytes;
        bool all = true, any = false;
        for (uint64_t b = first; b <= last; b++) {
            if (t->sample && !replay_sampled(t->sample, b))
                continue;
            if (k == K_TRIM) {
                ops->drop(s, b);
                continue;
            }
            bool hit = ops->access(s, b, nu ? nu[n] : 0, k == K_WRITE);
            n++;
            any |= hit;
            all &= hit;
            if (k == K_READ) {
                uint64_t lo = TC_MAX(q.offset, b * block_bytes);
                uint64_t hi = TC_MIN(end, (b + 1) * block_bytes);
                if (hit)
                    out->read_hit_bytes += hi - lo;
                else
                    out->read_miss_bytes += hi - lo;
            }
        }
        if (k == K_READ) {
            double w = t->sample ? replay_sample_weight(t->sample, q.offset, end) : 1;
            out->wreads += w;
            if (all) {
                out->read_hits++;
            } else {
                out->read_misses++;
                out->wread_misses += w;
            }
        } else if (k == K_WRITE && any) {
            out->write_hits++;
        }
    }
    trace_reader_close(r);
    out->promotions = s->promotions;
    out->evictions = s->evictions;
    ops->destroy(s);
    free(nu);
    out->seconds = (double)(tc_now_ns() - t0) / 1e9;
    out->cpu_seconds = (double)(replay_cpu_ns() - cpu0) / 1e9;
    return rc < 0 ? -1 : 0;
}
