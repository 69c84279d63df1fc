/*
 * The block index (src/engine/index.c) against a plain model: blocks of
 * one fragment moving between the inline form and a fragment record (a
 * mirror copy given and taken away, index_spill(), index_settle()), moved
 * to other locations, removed and cached again, over several pages of
 * entries and records, with inline masks (<= 32 sectors) and side masks.
 * After every step the block's one fragment is found where the model
 * says, with the model's sectors, and the counts agree at the end.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cache.h"

#include "check.h"

#define NBLOCKS 3000

struct model {
    bool cached, mirror;
    uint32_t id, seg;
    uint16_t off;
    struct tc_mask valid;
};

static struct model m[NBLOCKS];

static uint64_t oblock_of(int b) { return (uint64_t)b * 7919 + 3; }

/* Block b cached with one fragment of random sectors at a random place:
 * as map_add_fragment() makes it (a record, then settled inline). */
static void cache_block(struct index *ix, unsigned spb, int b)
{
    uint32_t id = index_insert(ix, oblock_of(b));
    struct tc_mask v, d;
    mask_clear(&v);
    mask_clear(&d);
    unsigned s0 = (unsigned)rand() % spb, s1 = s0 + 1 + (unsigned)rand() % (spb - s0);
    mask_range(&v, s0, s1);
    uint32_t f = frag_alloc(ix);
    FR(ix, f)->seg = (uint32_t)rand() % 1000;
    FR(ix, f)->off = (uint16_t)(rand() % 1000);
    frag_set_stored(ix, f, &v);
    CE(ix, id)->first = f;
    CE(ix, id)->nfrags = 1;
    ce_set_masks(ix, id, &v, &d);
    index_settle(ix, id);
    CHECK(CE(ix, id)->inl);
    m[b] = (struct model){ .cached = true, .id = id, .valid = v,
                           .seg = frag_seg(ix, ce_head(ix, id)),
                           .off = frag_off(ix, ce_head(ix, id)) };
}

/* The block's one fragment is as the model says; false if not. */
static bool agrees(const struct index *ix, int b)
{
    uint32_t id = m[b].id;
    uint32_t h = ce_head(ix, id);
    struct tc_mask st, v;
    frag_stored(ix, h, &st);
    ce_get_masks(ix, id, &v, NULL);
    return index_lookup(ix, oblock_of(b)) == id && frag_next(ix, h) == NIL &&
           frag_seg(ix, h) == m[b].seg && frag_off(ix, h) == m[b].off &&
           (frag_mseg(ix, h) != NIL) == m[b].mirror && mask_equal(&st, &m[b].valid) &&
           mask_equal(&v, &m[b].valid) && CE(ix, id)->nfrags == 1;
}

static void run(unsigned spb, unsigned seed)
{
    struct index ix;
    index_init(&ix, spb, 0);
    srand(seed);
    memset(m, 0, sizeof m);
    unsigned bad = 0;
    for (int step = 0; step < 200000 && bad < 10; step++) {
        int b = rand() % NBLOCKS;
        if (!m[b].cached) {
            cache_block(&ix, spb, b);
            continue;
        }
        uint32_t id = m[b].id, h = ce_head(&ix, id);
        if (!agrees(&ix, b)) {
            fprintf(stderr, "spb %u step %d: block %d differs from the model\n", spb, step, b);
            bad++;
            continue;
        }
        switch (rand() % 6) {
        case 0:
            index_remove(&ix, id);
            m[b].cached = false;
            break;
        case 1:     /* a mirror copy: the fragment becomes a record */
            frag_set_mirror(&ix, id, h, 5, 6);
            m[b].mirror = true;
            CHECK(!CE(&ix, id)->inl);
            break;
        case 2:     /* the mirror goes (a clean block keeps one copy) */
            frag_set_mirror(&ix, id, h, NIL, 0);
            m[b].mirror = false;
            index_settle(&ix, id);
            CHECK(CE(&ix, id)->inl);
            break;
        case 3:
            index_spill(&ix, id);
            CHECK(!CE(&ix, id)->inl);
            break;
        case 4:
            m[b].seg = (uint32_t)rand() % 1000;
            m[b].off = (uint16_t)(rand() % 1000);
            frag_set_loc(&ix, h, m[b].seg, m[b].off);
            break;
        case 5:
            index_settle(&ix, id);
            CHECK(m[b].mirror || CE(&ix, id)->inl);
            break;
        }
    }
    CHECK(bad == 0);
    uint64_t blocks = 0, records = 0;
    for (int b = 0; b < NBLOCKS; b++) {
        if (!m[b].cached)
            continue;
        CHECK(agrees(&ix, b));
        blocks++;
        records += !CE(&ix, m[b].id)->inl;
    }
    CHECK(ix.count == blocks);
    CHECK(ix.nfrags == blocks);
    CHECK(ix.frecs == records);
    CHECK(index_memory(&ix) > 0);
    index_fini(&ix);
}

int main(void)
{
    run(16, 1);         /* inline masks */
    run(32, 2);
    run(64, 3);         /* side masks */
    run(256, 4);
    return check_exit("index_forms");
}
