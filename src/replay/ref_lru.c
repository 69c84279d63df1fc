/*
 * ref-lru: least recently used.  One list, most recently used at the
 * head; a hit moves the block to the head, a miss evicts the tail when
 * the cache is full and inserts at the head.
 */
#include <stdlib.h>

#include "replay/refsim.h"
#include "util/misc.h"

struct lru {
    struct refsim core;
    struct rs_list list;
};

static struct refsim *lru_create(uint64_t entries)
{
    if (entries >= UINT32_MAX)
        return NULL;
    struct lru *l = tc_xcalloc(1, sizeof *l);
    rs_init(&l->core, entries, (uint32_t)entries + 1);
    rs_list_init(&l->list);
    return &l->core;
}

static bool lru_access(struct refsim *s, uint64_t block, uint32_t next_use, bool write)
{
    struct lru *l = (struct lru *)s;
    uint32_t i = rs_find(s, block);
    if (i != RS_NIL) {
        if (l->list.head != i) {
            rs_unlink(s, &l->list, i);
            rs_push_head(s, &l->list, i);
        }
        return true;
    }
    if (l->list.len >= s->entries) {
        uint32_t victim = l->list.tail;
        rs_unlink(s, &l->list, victim);
        rs_release(s, victim);
        s->evictions++;
    }
    rs_push_head(s, &l->list, rs_alloc(s, block));
    s->promotions++;
    return false;
}

static void lru_drop(struct refsim *s, uint64_t block)
{
    struct lru *l = (struct lru *)s;
    uint32_t i = rs_find(s, block);
    if (i != RS_NIL) {
        rs_unlink(s, &l->list, i);
        rs_release(s, i);
    }
}

static void lru_destroy(struct refsim *s)
{
    rs_fini(s);
    free(s);
}

const struct refsim_ops ref_lru_ops = {
    .name = "ref-lru",
    .create = lru_create,
    .access = lru_access,
    .drop = lru_drop,
    .destroy = lru_destroy,
};
