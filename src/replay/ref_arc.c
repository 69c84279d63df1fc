/*
 * ref-arc: ARC (Megiddo and Modha, FAST 2003), as in the paper's figure.
 *
 * Four lists, most recent at the head: T1 (cached, seen once recently),
 * T2 (cached, seen at least twice), B1 and B2 (ghosts: block numbers
 * recently evicted from T1 and T2).  The target size p of T1 adapts: a
 * hit in B1 says T1 was too small (p grows by max(|B2|/|B1|, 1)), a hit in
 * B2 the reverse.  |T1| + |T2| <= c, |T1| + |B1| <= c, and the four
 * together <= 2c.  Trims drop blocks from the cache, which the paper does
 * not consider: REPLACE then evicts only when the cache is full.
 */
#include <stdlib.h>

#include "replay/refsim.h"
#include "util/misc.h"

enum { T1, T2, B1, B2 };

struct arc {
    struct refsim core;
    struct rs_list l[4];
    double p;
};

static struct refsim *arc_create(uint64_t entries)
{
    if (entries >= UINT32_MAX / 2 - 2)
        return NULL;
    struct arc *a = tc_xcalloc(1, sizeof *a);
    rs_init(&a->core, entries, (uint32_t)entries * 2 + 2);
    for (int i = 0; i < 4; i++)
        rs_list_init(&a->l[i]);
    return &a->core;
}

static void move_to(struct arc *a, uint32_t i, int to)
{
    rs_unlink(&a->core, &a->l[a->core.node[i].list], i);
    a->core.node[i].list = (uint8_t)to;
    rs_push_head(&a->core, &a->l[to], i);
}

static void forget_tail(struct arc *a, int list)
{
    uint32_t i = a->l[list].tail;
    rs_unlink(&a->core, &a->l[list], i);
    rs_release(&a->core, i);
}

/* Evicts the LRU block of T1 or T2 into its ghost list. */
static void replace(struct arc *a, bool in_b2)
{
    uint64_t t1 = a->l[T1].len;
    if (t1 + a->l[T2].len < a->core.entries)
        return;
    if (t1 >= 1 && ((in_b2 && (double)t1 == a->p) || (double)t1 > a->p || a->l[T2].len == 0))
        move_to(a, a->l[T1].tail, B1);
    else
        move_to(a, a->l[T2].tail, B2);
    a->core.evictions++;
}

static bool arc_access(struct refsim *s, uint64_t block, uint32_t next_use, bool write)
{
    struct arc *a = (struct arc *)s;
    double c = (double)s->entries;
    uint32_t i = rs_find(s, block);
    if (i != RS_NIL && s->node[i].list <= T2) {             /* case I */
        move_to(a, i, T2);
        return true;
    }
    if (i != RS_NIL) {
        double b1 = (double)a->l[B1].len, b2 = (double)a->l[B2].len;
        if (s->node[i].list == B1) {                        /* case II */
            a->p = TC_MIN(c, a->p + (b1 >= b2 ? 1 : b2 / b1));
            replace(a, false);
        } else {                                            /* case III */
            a->p = TC_MAX(0, a->p - (b2 >= b1 ? 1 : b1 / b2));
            replace(a, true);
        }
        move_to(a, i, T2);
        s->promotions++;
        return false;
    }
    /* case IV: not in the directory */
    uint64_t l1 = a->l[T1].len + a->l[B1].len;
    uint64_t all = l1 + a->l[T2].len + a->l[B2].len;
    if (l1 >= s->entries) {
        if (a->l[T1].len < s->entries) {
            forget_tail(a, B1);
            replace(a, false);
        } else {
            forget_tail(a, T1);
            s->evictions++;
        }
    } else if (all >= s->entries) {
        if (all >= 2 * s->entries)
            forget_tail(a, a->l[B2].len ? B2 : B1);
        replace(a, false);
    }
    i = rs_alloc(s, block);
    s->node[i].list = T1;
    rs_push_head(s, &a->l[T1], i);
    s->promotions++;
    return false;
}

static void arc_drop(struct refsim *s, uint64_t block)
{
    struct arc *a = (struct arc *)s;
    uint32_t i = rs_find(s, block);
    if (i != RS_NIL) {
        rs_unlink(s, &a->l[s->node[i].list], i);
        rs_release(s, i);
    }
}

static void arc_destroy(struct refsim *s)
{
    rs_fini(s);
    free(s);
}

const struct refsim_ops ref_arc_ops = {
    .name = "ref-arc",
    .create = arc_create,
    .access = arc_access,
    .drop = arc_drop,
    .destroy = arc_destroy,
};
