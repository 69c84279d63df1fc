/*
 * A map from block numbers to 32-bit values, for the replay simulators.
 *
 * Open addressing with linear probing over a power-of-two array of
 * (key, value) slots, 16 bytes each, so that a lookup touches one cache
 * line.  An empty slot holds the key UINT64_MAX, which no block number
 * reaches (blocks are at least 512 bytes).  Deletion shifts the following
 * slots of the run back (no tombstones), so lookups stay short however
 * many blocks come and go.  The array doubles when it is half full.
 */
#ifndef TC_REPLAY_BLOCKMAP_H
#define TC_REPLAY_BLOCKMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/misc.h"

#define BMAP_EMPTY UINT64_MAX

struct bmap_slot {
    uint64_t key;
    uint32_t val;
    uint32_t pad;
};

struct bmap {
    struct bmap_slot *slot;
    size_t mask;                    /* slots - 1 */
    size_t count;
};

/* Room for expect keys before the first doubling. */
void bmap_init(struct bmap *m, size_t expect);
void bmap_free(struct bmap *m);

static inline uint64_t bmap_mix(uint64_t x) { return tc_mix64(x); }

/* The value of key, or NULL. */
static inline uint32_t *bmap_get(struct bmap *m, uint64_t key)
{
    size_t i = (size_t)bmap_mix(key) & m->mask;
    for (;;) {
        struct bmap_slot *s = &m->slot[i];
        if (s->key == key)
            return &s->val;
        if (s->key == BMAP_EMPTY)
            return NULL;
        i = (i + 1) & m->mask;
    }
}

/* Sets key's value (adding key if absent). */
void bmap_put(struct bmap *m, uint64_t key, uint32_t val);
/* Removes key; false if it was absent. */
bool bmap_del(struct bmap *m, uint64_t key);

#endif
