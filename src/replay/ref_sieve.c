/*
 * ref-sieve: SIEVE (Zhang et al., NSDI 2024).  One FIFO queue, newest at
 * the head, a visited bit per block and a hand.  A hit only sets the
 * bit.  To evict, the hand walks from where it stopped (the tail at
 * first) toward the head, clearing the bits it passes, and evicts the
 * first block whose bit is clear; it wraps to the tail at the head.  New
 * blocks go to the head with the bit clear, so survivors stay in place
 * and new blocks are judged quickly.
 */
#include <stdlib.h>

#include "replay/refsim.h"
#include "util/misc.h"

struct sieve {
    struct refsim core;
    struct rs_list queue;
    uint32_t hand;                  /* the next block to examine; RS_NIL: the tail */
};

static struct refsim *sieve_create(uint64_t entries)
{
    if (entries >= UINT32_MAX)
        return NULL;
    struct sieve *v = tc_xcalloc(1, sizeof *v);
    rs_init(&v->core, entries, (uint32_t)entries + 1);
    rs_list_init(&v->queue);
    v->hand = RS_NIL;
    return &v->core;
}

static void sieve_remove(struct sieve *v, uint32_t i)
{
    if (v->hand == i)
        v->hand = v->core.node[i].prev;
    rs_unlink(&v->core, &v->queue, i);
    rs_release(&v->core, i);
}

static bool sieve_access(struct refsim *s, uint64_t block, uint32_t next_use, bool write)
{
    struct sieve *v = (struct sieve *)s;
    uint32_t i = rs_find(s, block);
    if (i != RS_NIL) {
        s->node[i].freq = 1;
        return true;
    }
    if (v->queue.len >= s->entries) {
        uint32_t o = v->hand != RS_NIL ? v->hand : v->queue.tail;
        while (s->node[o].freq) {
            s->node[o].freq = 0;
            o = s->node[o].prev != RS_NIL ? s->node[o].prev : v->queue.tail;
        }
        v->hand = o;
        sieve_remove(v, o);
        s->evictions++;
    }
    rs_push_head(s, &v->queue, rs_alloc(s, block));
    s->promotions++;
    return false;
}

static void sieve_drop(struct refsim *s, uint64_t block)
{
    uint32_t i = rs_find(s, block);
    if (i != RS_NIL)
        sieve_remove((struct sieve *)s, i);
}

static void sieve_destroy(struct refsim *s)
{
    rs_fini(s);
    free(s);
}

const struct refsim_ops ref_sieve_ops = {
    .name = "ref-sieve",
    .create = sieve_create,
    .access = sieve_access,
    .drop = sieve_drop,
    .destroy = sieve_destroy,
};
