/*
 * SHARDS (Waldspurger et al., FAST 2015), fixed rate: the LRU miss-ratio
 * curve of a stream of requests from a sample of its blocks.  Used by
 * replay --mrc over a trace (mrc.c) and by serve --trace over the live
 * requests (src/trace/writer.c, shown by status).
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
#include "replay/shards.h"
#include "tiercache.h"
#include "util/misc.h"

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

struct shards {
    struct stack s;
    uint64_t block_bytes;
    bool all;                       /* rate 1: every block */
    uint64_t threshold;             /* else: hashes below it are sampled */
    double rate;
    uint64_t block_reads;           /* all block reads, sampled or not */
};

struct shards *shards_new(double rate, uint64_t block_bytes)
{
    struct shards *sh = tc_xcalloc(1, sizeof *sh);
    stack_init(&sh->s);
    sh->block_bytes = block_bytes;
    sh->rate = rate;
    sh->all = rate >= 1;
    sh->threshold = sh->all ? UINT64_MAX : (uint64_t)ldexp(rate, 64);
    return sh;
}

void shards_free(struct shards *sh)
{
    if (!sh)
        return;
    stack_free(&sh->s);
    free(sh);
}

void shards_request(struct shards *sh, unsigned op, uint64_t offset, uint64_t length)
{
    bool read = op == TC_OP_READ;
    bool write = op == TC_OP_WRITE || op == TC_OP_WRITE_ZEROES;
    bool trim = op == TC_OP_TRIM;
    if (length == 0 || (!read && !write && !trim) || offset > UINT64_MAX - length)
        return;
    uint64_t first = offset / sh->block_bytes, last = (offset + length - 1) / sh->block_bytes;
    if (read)
        sh->block_reads += last - first + 1;
    for (uint64_t b = first; b <= last; b++) {
        if (!sh->all && shards_hash(b) >= sh->threshold)
            continue;
        if (trim)
            stack_remove(&sh->s, b);
        else
            stack_access(&sh->s, b, read);
    }
}

void shards_new_window(struct shards *sh)
{
    struct stack *s = &sh->s;
    memset(s->hist, 0, s->hist_len * sizeof *s->hist);
    s->cold = s->reads = 0;
    sh->block_reads = 0;
}

uint64_t shards_block_reads(const struct shards *sh) { return sh->block_reads; }
uint64_t shards_sampled_reads(const struct shards *sh) { return sh->s.reads; }

uint64_t shards_memory(const struct shards *sh)
{
    const struct stack *s = &sh->s;
    return sizeof *sh + (uint64_t)s->cap * (sizeof *s->at + sizeof *s->fen) +
           s->hist_len * sizeof *s->hist + ((uint64_t)s->map.mask + 1) * sizeof *s->map.slot;
}

void shards_curve(const struct shards *sh, const uint64_t *sizes, size_t nsizes, double *miss)
{
    const struct stack *s = &sh->s;
    /* suffix[d]: sampled reads at distance d or more. */
    uint64_t *suffix = tc_xcalloc(s->hist_len + 1, sizeof *suffix);
    for (size_t d = s->hist_len; d-- > 0;)
        suffix[d] = suffix[d + 1] + s->hist[d];
    double expected = sh->all ? (double)s->reads : (double)sh->block_reads * sh->rate;
    for (size_t i = 0; i < nsizes; i++) {
        uint64_t c = sizes[i] / sh->block_bytes;
        if (!sh->block_reads || expected <= 0) {
            miss[i] = 0;
            continue;
        }
        uint64_t th = sh->all ? c : (uint64_t)ceil((double)c * sh->rate);
        if (c == 0) {
            miss[i] = 1;
            continue;
        }
        double m = (double)s->cold + (double)(th < s->hist_len ? suffix[th] : 0);
        miss[i] = TC_MIN(1.0, m / expected);
    }
    free(suffix);
}
