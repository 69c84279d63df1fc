/*
 * replay_mrc_shards(): an LRU miss-ratio curve in one pass, by SHARDS
 * (Waldspurger et al., FAST 2015), fixed-rate variant.
 *
 * The curve is per block access: requests are cut into blocks as in
 * reference.c (reads and writes access every block they touch, writes
 * allocate, trims remove their blocks), and the miss ratio at size C is
 * the fraction of block reads that an LRU cache of C blocks misses.  (A
 * request's hit needs all its blocks, which a sample of blocks cannot
 * tell; for requests of one block, both are the same.)
 *
 * Sampling: a block is tracked when a 64-bit mix of its number falls
 * under rate * 2^64, so a sampled block has all of its accesses sampled.
 * LRU's inclusion property makes a read of block b a hit in every cache
 * larger than its reuse distance d, the number of distinct blocks
 * accessed since b's previous access; among sampled blocks that is about
 * rate * d, hence a sampled distance d' stands for d' / rate, and a read
 * misses a cache of C blocks when d' >= C * rate.  SHARDS-adj: the miss
 * counts are divided by the expected number of sampled reads (all block
 * reads times rate) rather than the number sampled, which removes most of
 * the error a few very hot sampled (or missed) blocks cause.  At rate 1
 * every block is tracked and the curve is exact.
 *
 * Distances: each tracked block's last access has a timestamp; a Fenwick
 * tree over timestamps marks those that are some block's latest access,
 * so d' is the number of marks after b's previous timestamp.  When the
 * timestamps run out of room, the live ones are renumbered in order
 * (memory stays proportional to the sampled footprint).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay/blockmap.h"
#include "replay/replay.h"
#include "tiercache.h"
#include "util/misc.h"
#include "util/parse.h"

/* The sampling hash (splitmix64's finalizer), unrelated to the block
 * map's, so the sampled blocks spread over the map's slots. */
static inline uint64_t sample_hash(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/*
 * The reuse-distance stack: tracked blocks by the timestamp of their last
 * access.  fen is a Fenwick tree (1-based) over timestamps 0..cap-1 with
 * a 1 at each live timestamp; at[ts] is the block whose latest access is
 * ts, BMAP_EMPTY where none is.  map gives each tracked block its
 * timestamp.
 */
struct stack {
    uint32_t *fen;
    uint64_t *at;
    uint32_t cap, clock;
    struct bmap map;
    uint64_t *hist;                 /* reads by sampled distance */
    size_t hist_len;
    uint64_t cold, reads;           /* sampled reads: first accesses, all */
};

static void fen_add(struct stack *s, uint32_t ts, int delta)
{
    for (uint32_t i = ts + 1; i <= s->cap; i += i & -i)
        s->fen[i] += (uint32_t)delta;
}

/* Marks at timestamps 0..ts. */
static uint64_t fen_prefix(const struct stack *s, uint32_t ts)
{
    uint64_t sum = 0;
    for (uint32_t i = ts + 1; i > 0; i -= i & -i)
        sum += s->fen[i];
    return sum;
}

/* Renumbers the live timestamps 0..live-1 into arrays of room cap. */
static void stack_rebuild(struct stack *s, uint32_t cap)
{
    uint64_t *at = tc_xmalloc((size_t)cap * sizeof *at);
    uint32_t live = 0;
    for (uint32_t ts = 0; ts < s->clock; ts++) {
        if (s->at[ts] == BMAP_EMPTY)
            continue;
        *bmap_get(&s->map, s->at[ts]) = live;
        at[live++] = s->at[ts];
    }
    for (uint32_t ts = live; ts < cap; ts++)
        at[ts] = BMAP_EMPTY;
    free(s->at);
    free(s->fen);
    s->at = at;
    s->cap = cap;
    s->clock = live;
    s->fen = tc_xmalloc(((size_t)cap + 1) * sizeof *s->fen);
    /* Node i covers timestamps (i - lowbit(i), i], 1-based: all live
     * ones are below live. */
    s->fen[0] = 0;
    for (uint64_t i = 1; i <= cap; i++) {
        uint64_t lo = i - (i & -i);
        s->fen[i] = (uint32_t)(TC_MIN(i, live) - TC_MIN(lo, live));
    }
}

static void stack_init(struct stack *s)
{
    memset(s, 0, sizeof *s);
    s->at = tc_xmalloc(sizeof *s->at);
    bmap_init(&s->map, 1 << 12);
    stack_rebuild(s, 1 << 16);
}

static void stack_free(struct stack *s)
{
    free(s->fen);
    free(s->at);
    free(s->hist);
    bmap_free(&s->map);
}

static void stack_access(struct stack *s, uint64_t b, bool read)
{
    if (s->clock == s->cap) {
        uint64_t live = s->map.count, cap = TC_MAX((uint64_t)1 << 16, 2 * live);
        if (cap > UINT32_MAX - 1)
            cap = UINT32_MAX - 1;   /* beyond 2^31 sampled blocks: degrade */
        stack_rebuild(s, (uint32_t)cap);
    }
    uint32_t now = s->clock++;
    uint32_t *ts = bmap_get(&s->map, b);
    if (ts) {
        uint64_t d = s->map.count - fen_prefix(s, *ts);
        fen_add(s, *ts, -1);
        s->at[*ts] = BMAP_EMPTY;
        *ts = now;
        if (read) {
            if (d >= s->hist_len) {
                size_t n = TC_MAX(s->hist_len * 2, TC_MAX((size_t)d + 1, (size_t)1024));
                s->hist = realloc(s->hist, n * sizeof *s->hist);
                if (!s->hist)
                    abort();
                memset(s->hist + s->hist_len, 0, (n - s->hist_len) * sizeof *s->hist);
                s->hist_len = n;
            }
            s->hist[d]++;
        }
    } else {
        bmap_put(&s->map, b, now);
        if (read)
            s->cold++;
    }
    if (read)
        s->reads++;
    fen_add(s, now, 1);
    s->at[now] = b;
}

static void stack_remove(struct stack *s, uint64_t b)
{
    uint32_t *ts = bmap_get(&s->map, b);
    if (!ts)
        return;
    fen_add(s, *ts, -1);
    s->at[*ts] = BMAP_EMPTY;
    bmap_del(&s->map, b);
}

int replay_mrc_shards(const struct replay_trace *t, uint64_t block_bytes, double rate,
                      const uint64_t *sizes, size_t nsizes, double *miss, char *err,
                      size_t errlen)
{
    if (!(rate > 0 && rate <= 1)) {
        snprintf(err, errlen, "sampling rate %g: from above 0 to 1", rate);
        return -1;
    }
    if (block_bytes < 512 || !tc_is_pow2(block_bytes)) {
        snprintf(err, errlen, "block size %llu: a power of two of at least 512 bytes",
                 (unsigned long long)block_bytes);
        return -1;
    }
    if (strcmp(t->path, "-") == 0) {
        snprintf(err, errlen, "a miss-ratio curve needs a trace file, not '-'");
        return -1;
    }
    struct tc_trace_reader *r = trace_reader_open(t->path, t->format, &t->opt, err, errlen);
    if (!r)
        return -1;
    bool all = rate >= 1;
    uint64_t threshold = all ? UINT64_MAX : (uint64_t)ldexp(rate, 64);
    struct stack s;
    stack_init(&s);
    uint64_t block_reads = 0;
    struct tc_trace_req q;
    int rc;
    while ((rc = trace_reader_next(r, &q, err, errlen)) == 1) {
        if (q.length == 0)
            continue;
        bool read = q.op == TC_OP_READ;
        bool write = q.op == TC_OP_WRITE || q.op == TC_OP_WRITE_ZEROES;
        bool trim = q.op == TC_OP_TRIM;
        if (!read && !write && !trim)
            continue;
        if (q.offset > UINT64_MAX - q.length) {
            snprintf(err, errlen, "a request at offset %llu of %u bytes ends past 2^64",
                     (unsigned long long)q.offset, q.length);
            rc = -1;
            break;
        }
        uint64_t first = q.offset / block_bytes, last = (q.offset + q.length - 1) / block_bytes;
        if (read)
            block_reads += last - first + 1;
        for (uint64_t b = first; b <= last; b++) {
            if (!all && sample_hash(b) >= threshold)
                continue;
            if (trim)
                stack_remove(&s, b);
            else
                stack_access(&s, b, read);
        }
    }
    trace_reader_close(r);
    if (rc < 0) {
        stack_free(&s);
        return -1;
    }
    if (block_reads && !s.reads) {
        snprintf(err, errlen, "none of the trace's %llu block reads fell in the sample at "
                 "rate %g: raise the sampling rate", (unsigned long long)block_reads, rate);
        stack_free(&s);
        return -1;
    }
    /* suffix[d]: sampled reads at distance d or more. */
    uint64_t *suffix = tc_xcalloc(s.hist_len + 1, sizeof *suffix);
    for (size_t d = s.hist_len; d-- > 0;)
        suffix[d] = suffix[d + 1] + s.hist[d];
    double expected = all ? (double)s.reads : (double)block_reads * rate;
    for (size_t i = 0; i < nsizes; i++) {
        uint64_t c = sizes[i] / block_bytes;
        if (!block_reads) {
            miss[i] = 0;
            continue;
        }
        uint64_t th = all ? c : (uint64_t)ceil((double)c * rate);
        if (c == 0) {
            miss[i] = 1;
            continue;
        }
        double m = (double)s.cold + (double)(th < s.hist_len ? suffix[th] : 0);
        miss[i] = TC_MIN(1.0, m / expected);
    }
    free(suffix);
    stack_free(&s);
    return 0;
}
