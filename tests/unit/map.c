/*
 * The parts of the map (src/engine/map.h) that need no cache: the dirty
 * set and its totals (invariant 9: map_dirty_account(), map_is_dirty())
 * and the recovered write-through set (invariant 13: map_wt_hold(),
 * map_wt_release()), against a plain model, over random changes of the
 * dirty sectors of blocks spread across the origin (the first and last
 * blocks, and both sides of a word of dirty bits, among them).  After
 * every step the totals, the block's bit, the flags and the count agree
 * with the model, and the lower bound holds.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cache.h"

#include "check.h"

#define NBLOCKS 200             /* blocks the test touches */
#define ORIGIN_BLOCKS 100000    /* blocks of the origin */

struct model {
    uint64_t oblock;
    uint32_t id;                /* its entry */
    struct tc_mask dirty;
    bool held;                  /* CE_WT_RECOVERED */
    uint64_t seq;               /* the sequence it holds the mark below */
};

static struct model m[NBLOCKS];

static uint64_t oblock_of(int b)
{
    switch (b) {
    case 0: return 0;
    case 1: return ORIGIN_BLOCKS - 1;
    case 2: return 63;
    case 3: return 64;
    default: return (uint64_t)b * 491 % ORIGIN_BLOCKS;
    }
}

static void random_mask(struct tc_mask *d, unsigned spb)
{
    mask_clear(d);
    if (rand() % 3 == 0)
        return;                 /* clean */
    for (unsigned s = 0; s < spb; s++)
        if (rand() % 4 == 0)
            mask_set(d, s);
}

/* The model's totals and the bits against the map's. */
static bool totals_agree(const struct map *mp)
{
    uint64_t sectors = 0, blocks = 0, held = 0, min = UINT64_MAX;
    bool ok = true;
    for (int b = 0; b < NBLOCKS; b++) {
        unsigned n = mask_count(&m[b].dirty);
        sectors += n;
        blocks += n > 0;
        ok &= map_is_dirty(mp, m[b].oblock) == (n > 0);
        if (m[b].held) {
            held++;
            min = m[b].seq < min ? m[b].seq : min;
        }
        ok &= !!(CE(&mp->idx, m[b].id)->flags & CE_WT_RECOVERED) == m[b].held;
    }
    ok &= mp->dirty_sectors == sectors && mp->dirty_blocks == blocks;
    ok &= mp->wt_recovered == held;
    /* A conservative bound: at most the lowest version held. */
    ok &= held == 0 || mp->wt_recovered_min <= min;
    return ok;
}

/* The entry's masks, as map.c sets them before it accounts the change:
 * every sector valid, the model's dirty ones dirty. */
static void set_entry(struct map *mp, unsigned spb, const struct model *x)
{
    struct tc_mask all;
    mask_range(&all, 0, spb);
    ce_set_masks(&mp->idx, x->id, &all, &x->dirty);
}

static void run(unsigned spb, unsigned seed)
{
    srand(seed);
    struct map mp;
    memset(&mp, 0, sizeof mp);
    map_init(&mp, spb, NBLOCKS, ORIGIN_BLOCKS);
    CHECK(mp.dirty_blocks == 0 && mp.dirty_sectors == 0 && mp.wt_recovered == 0);
    CHECK(mp.wt_recovered_min == UINT64_MAX);
    for (int b = 0; b < NBLOCKS; b++) {
        m[b] = (struct model){ .oblock = oblock_of(b) };
        m[b].id = index_insert(&mp.idx, m[b].oblock);
        set_entry(&mp, spb, &m[b]);
        CHECK(!map_is_dirty(&mp, m[b].oblock));
    }
    int bad = 0;
    for (int step = 0; step < 20000; step++) {
        int b = rand() % NBLOCKS;
        struct model *x = &m[b];
        switch (rand() % 4) {
        case 0:
        case 1: {   /* new dirty sectors (NULL for none, sometimes) */
            struct tc_mask nd;
            random_mask(&nd, spb);
            bool was = !mask_empty(&x->dirty), now = !mask_empty(&nd);
            bool turned = map_dirty_account(&mp, x->oblock, was || rand() % 2 ? &x->dirty : NULL,
                                            now || rand() % 2 ? &nd : NULL);
            CHECK(turned == (was && !now));
            x->dirty = nd;
            set_entry(&mp, spb, x);
            if (turned && map_wt_release(&mp, x->id)) {
                CHECK(x->held);
                x->held = false;
            }
            CHECK(!x->held || now);
            break;
        }
        case 2: {   /* a dirty block holds the mark (again: no change) */
            if (mask_empty(&x->dirty))
                break;
            uint64_t seq = 1 + (uint64_t)(rand() % 1000000);
            map_wt_hold(&mp, x->id, seq);
            if (!x->held) {
                x->held = true;
                x->seq = seq;
            }
            break;
        }
        case 3:     /* released (written back) */
            CHECK(map_wt_release(&mp, x->id) == x->held);
            x->held = false;
            if (mp.wt_recovered == 0)
                CHECK(mp.wt_recovered_min == UINT64_MAX);
            break;
        }
        if (!totals_agree(&mp))
            bad++;
    }
    CHECK(bad == 0);
    /* Everything clean again: the totals go back to 0. */
    for (int b = 0; b < NBLOCKS; b++) {
        if (map_dirty_account(&mp, m[b].oblock, &m[b].dirty, NULL))
            map_wt_release(&mp, m[b].id);
        mask_clear(&m[b].dirty);
        set_entry(&mp, spb, &m[b]);
        m[b].held = false;
    }
    CHECK(mp.dirty_blocks == 0 && mp.dirty_sectors == 0);
    CHECK(mp.wt_recovered == 0 && mp.wt_recovered_min == UINT64_MAX);
    for (uint64_t i = 0; i < (ORIGIN_BLOCKS + 63) / 64; i++)
        CHECK(mp.dirty_bits[i] == 0);
    map_fini(&mp);
    CHECK(mp.dirty_bits == NULL && mp.idx.count == 0);
}

int main(void)
{
    run(16, 1);
    run(64, 2);
    run(256, 3);
    return check_exit("map");
}
