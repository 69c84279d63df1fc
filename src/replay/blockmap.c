/* The block map of the replay simulators (blockmap.h). */
#include <stdlib.h>
#include <string.h>

#include "replay/blockmap.h"
#include "util/misc.h"

static void alloc_slots(struct bmap *m, size_t n)
{
    m->slot = tc_xmalloc(n * sizeof *m->slot);
    memset(m->slot, 0xff, n * sizeof *m->slot);
    m->mask = n - 1;
    m->count = 0;
}

void bmap_init(struct bmap *m, size_t expect)
{
    size_t n = 16;
    while (n < expect * 2 + 2)
        n *= 2;
    alloc_slots(m, n);
}

void bmap_free(struct bmap *m)
{
    free(m->slot);
    m->slot = NULL;
}

static void insert_new(struct bmap *m, uint64_t key, uint32_t val)
{
    size_t i = (size_t)bmap_mix(key) & m->mask;
    while (m->slot[i].key != BMAP_EMPTY)
        i = (i + 1) & m->mask;
    m->slot[i].key = key;
    m->slot[i].val = val;
    m->count++;
}

void bmap_put(struct bmap *m, uint64_t key, uint32_t val)
{
    uint32_t *v = bmap_get(m, key);
    if (v) {
        *v = val;
        return;
    }
    if ((m->count + 1) * 2 > m->mask + 1) {
        struct bmap old = *m;
        alloc_slots(m, (old.mask + 1) * 2);
        for (size_t i = 0; i <= old.mask; i++)
            if (old.slot[i].key != BMAP_EMPTY)
                insert_new(m, old.slot[i].key, old.slot[i].val);
        free(old.slot);
    }
    insert_new(m, key, val);
}

bool bmap_del(struct bmap *m, uint64_t key)
{
    size_t i = (size_t)bmap_mix(key) & m->mask;
    while (m->slot[i].key != key) {
        if (m->slot[i].key == BMAP_EMPTY)
            return false;
        i = (i + 1) & m->mask;
    }
    /* Backward shift: move later members of the run into the hole when
     * their home slot is not between the hole and where they sit. */
    size_t j = i;
    for (;;) {
        j = (j + 1) & m->mask;
        if (m->slot[j].key == BMAP_EMPTY)
            break;
        size_t home = (size_t)bmap_mix(m->slot[j].key) & m->mask;
        bool stays = (i <= j) ? (i < home && home <= j) : (i < home || home <= j);
        if (!stays) {
            m->slot[i] = m->slot[j];
            i = j;
        }
    }
    m->slot[i].key = BMAP_EMPTY;
    m->count--;
    return true;
}
