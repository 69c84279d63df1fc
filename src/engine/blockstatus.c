/*
 * Block status (NBD base:allocation): which ranges of the volume are holes
 * or read as zeroes, so clients (nbdcopy, qemu-img) skip them.
 *
 * The answer is the origin's allocation (SEEK_DATA/SEEK_HOLE of a file,
 * the block status of an NBD export) with every sector the cache knows
 * better forced to "data":
 *  - a sector valid in the cache: its data is at least as new as the
 *    origin's, and may be newer (dirty writeback data over an origin hole,
 *    a write-through whose origin write is still pending);
 *  - a lost sector: a read of it fails with EIO, it must not be skipped as
 *    zeroes.
 * "Data" is always a correct answer (proto.md), so anything unknown --
 * an origin that cannot tell, an origin error -- is data.
 *
 * Order matters.  The cache's sectors are collected before the origin is
 * asked: a block written back and then evicted while the question is out
 * was on the origin before it left the cache, so the origin's answer
 * (given after) includes it.  Collected after, a block could leave the
 * cache between the origin's answer and the look-up and be reported as
 * the hole the origin had before the writeback.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cache.h"
#include "engine/engine.h"
#include "util/log.h"
#include "util/misc.h"

/* A request covers at most this many cache blocks (the look-ups are on the
 * reactor) and this many separate cached runs; a longer one is answered
 * for a prefix, which the protocol allows (the client asks again). */
#define MAX_BLOCKS 65536u
#define MAX_RUNS 1024u

struct run {
    uint64_t start, end;
};

struct bstatus {
    struct ereq *e;
    uint64_t end;                   /* of the range answered */
    struct run *runs;               /* cached or lost sectors, in order */
    unsigned nruns;
    struct tc_extent *oext;         /* the origin's answer */
    struct tc_dev_io dio;
};

/* Add [a, b) to the runs; false if it does not fit (then st->end is cut
 * at a, so everything before it is accounted for). */
static bool run_add(struct bstatus *st, uint64_t a, uint64_t b)
{
    if (st->nruns > 0 && st->runs[st->nruns - 1].end == a) {
        st->runs[st->nruns - 1].end = b;
        return true;
    }
    if (st->nruns == MAX_RUNS) {
        st->end = a;
        return false;
    }
    st->runs[st->nruns++] = (struct run){ a, b };
    return true;
}

/* The sectors of [e->off, st->end) the cache holds or lost. */
static void collect_cached(struct bstatus *st)
{
    struct cache *c = st->e->vol->cache;
    if (c == NULL)
        return;
    uint64_t b0 = st->e->off / c->block_size;
    uint64_t b1 = (st->end + c->block_size - 1) / c->block_size;
    if (b1 - b0 > MAX_BLOCKS) {
        b1 = b0 + MAX_BLOCKS;
        st->end = TC_MIN(st->end, b1 * c->block_size);
    }
    for (uint64_t b = b0; b < b1; b++) {
        struct tc_mask m, lost;
        mask_clear(&m);
        uint32_t id = index_lookup(&c->map.idx, b);
        if (id != NIL)
            ce_get_masks(&c->map.idx, id, &m, NULL);
        if (lost_get(&c->map.lost, b, &lost))
            mask_or(&m, &lost);
        unsigned s, t;
        for (s = 0; mask_next_run(&m, c->spb, &s, &t); s = t) {
            uint64_t a = b * c->block_size + (uint64_t)s * TC_SECTOR;
            uint64_t z = b * c->block_size + (uint64_t)t * TC_SECTOR;
            a = TC_MAX(a, st->e->off);
            z = TC_MIN(z, st->end);
            if (a >= z)
                continue;
            if (!run_add(st, a, z))
                return;
        }
    }
}

/* Append an extent to the reply, merged with the last one when the flags
 * agree; false when the reply is full. */
static bool emit(struct ereq *e, uint64_t len, uint32_t flags)
{
    if (len == 0)
        return true;
    if (e->nr_extents > 0 && e->extents[e->nr_extents - 1].flags == flags) {
        e->extents[e->nr_extents - 1].length += len;
        return true;
    }
    if (e->nr_extents == e->max_extents)
        return false;
    e->extents[e->nr_extents++] = (struct tc_extent){ .length = len, .flags = flags };
    return true;
}

/* The origin's extents over [e->off, st->end) with the runs made data. */
static void overlay(struct bstatus *st, const struct tc_extent *ox, unsigned n)
{
    struct ereq *e = st->e;
    uint64_t pos = e->off;
    unsigned r = 0;
    e->nr_extents = 0;
    for (unsigned i = 0; i < n && pos < st->end; i++) {
        uint64_t end = TC_MIN(pos + ox[i].length, st->end);
        uint32_t flags = ox[i].flags & (TC_EXTENT_HOLE | TC_EXTENT_ZERO);
        /* The engine's unit is the 4096-byte sector: a hole or zero
         * extent with a partial sector at an edge gives that sector up. */
        uint64_t h0 = tc_round_up(pos, TC_SECTOR), h1 = tc_round_down(end, TC_SECTOR);
        if (flags == 0 || h1 <= h0) {
            if (!emit(e, end - pos, 0))
                return;
            pos = end;
            continue;
        }
        if (!emit(e, h0 - pos, 0))
            return;
        pos = h0;
        while (pos < h1) {
            while (r < st->nruns && st->runs[r].end <= pos)
                r++;
            if (r < st->nruns && st->runs[r].start <= pos) {
                uint64_t z = TC_MIN(st->runs[r].end, h1);
                if (!emit(e, z - pos, 0))
                    return;
                pos = z;
                continue;
            }
            uint64_t z = r < st->nruns ? TC_MIN(st->runs[r].start, h1) : h1;
            if (!emit(e, z - pos, flags))
                return;
            pos = z;
        }
        if (!emit(e, end - pos, 0))
            return;
        pos = end;
    }
    if (e->nr_extents == 0)
        emit(e, st->end - e->off, 0);   /* an empty origin answer: data */
}

static void finish(struct bstatus *st)
{
    struct ereq *e = st->e;
    free(st->runs);
    free(st->oext);
    free(st);
    e->err = 0;
    e->complete(e);
}

static void origin_answered(struct tc_dev_io *dio, int err)
{
    struct bstatus *st = container_of(dio, struct bstatus, dio);
    if (err) {
        /* Logged by the device layer; "data" is still a true answer. */
        struct tc_extent data = { .length = st->end - st->e->off, .flags = 0 };
        overlay(st, &data, 1);
    } else {
        overlay(st, st->oext, dio->nr_extents);
    }
    finish(st);
}

void engine_block_status(struct ereq *e)
{
    struct tc_dev *origin = e->vol->origin;
    if (!origin->can_block_status) {
        e->extents[0] = (struct tc_extent){ .length = e->len, .flags = 0 };
        e->nr_extents = 1;
        e->complete(e);
        return;
    }
    struct bstatus *st = tc_xcalloc(1, sizeof *st);
    st->e = e;
    st->end = e->off + e->len;
    st->runs = tc_xcalloc(MAX_RUNS, sizeof *st->runs);
    collect_cached(st);
    /* Each origin extent can split into several around the runs, so the
     * origin is asked for no more than the reply can hold. */
    st->oext = tc_xcalloc(e->max_extents, sizeof *st->oext);
    st->dio.op = TC_DEV_BLOCK_STATUS;
    st->dio.off = e->off;
    st->dio.len = st->end - e->off;
    st->dio.extents = st->oext;
    st->dio.max_extents = e->max_extents;
    st->dio.cb = origin_answered;
    dev_submit(origin, &st->dio);
}
