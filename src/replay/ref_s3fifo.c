/*
 * ref-s3fifo: S3-FIFO (Yang et al., SOSP 2023).
 *
 * Three FIFO queues, newest at the head: S, the small probation queue
 * (10 % of the cache), M, the main queue (the rest), and G, a ghost queue
 * of block numbers recently evicted from S (as many as M holds).  Each
 * cached block has a frequency of 0 to 3, raised by hits.  A miss goes to
 * M if the block is in G, else to S.  To make room: while S holds at least
 * its 10 %, its tail leaves S, to M if it was hit while in S (frequency
 * reset), else to G and out of the cache; otherwise M's tail is evicted if
 * its frequency is 0, else it goes back to M's head one lower.
 */
#include <stdlib.h>

#include "replay/refsim.h"
#include "util/misc.h"

enum { S, M, G };

struct s3fifo {
    struct refsim core;
    struct rs_list q[3];
    uint64_t small_max, ghost_max;
};

static struct refsim *s3_create(uint64_t entries)
{
    if (entries >= UINT32_MAX / 2 - 2)
        return NULL;
    struct s3fifo *f = tc_xcalloc(1, sizeof *f);
    f->small_max = TC_MAX(1, entries / 10);
    f->ghost_max = entries - TC_MIN(entries, f->small_max);
    rs_init(&f->core, entries, (uint32_t)(entries + f->ghost_max + 2));
    for (int i = 0; i < 3; i++)
        rs_list_init(&f->q[i]);
    return &f->core;
}

static void push(struct s3fifo *f, uint32_t i, int q)
{
    f->core.node[i].list = (uint8_t)q;
    rs_push_head(&f->core, &f->q[q], i);
}

static void evict_main(struct s3fifo *f)
{
    struct refsim *s = &f->core;
    for (;;) {
        uint32_t t = f->q[M].tail;
        rs_unlink(s, &f->q[M], t);
        if (s->node[t].freq == 0) {
            rs_release(s, t);
            s->evictions++;
            return;
        }
        s->node[t].freq--;
        push(f, t, M);
    }
}

static void ghost_add(struct s3fifo *f, uint32_t i)
{
    if (f->ghost_max == 0) {
        rs_release(&f->core, i);
        return;
    }
    if (f->q[G].len >= f->ghost_max) {
        uint32_t t = f->q[G].tail;
        rs_unlink(&f->core, &f->q[G], t);
        rs_release(&f->core, t);
    }
    push(f, i, G);
}

/* Frees one cache entry. */
static void evict(struct s3fifo *f)
{
    struct refsim *s = &f->core;
    while (f->q[S].len >= f->small_max || (f->q[S].len && !f->q[M].len)) {
        uint32_t t = f->q[S].tail;
        rs_unlink(s, &f->q[S], t);
        if (s->node[t].freq >= 1) {
            s->node[t].freq = 0;
            push(f, t, M);
            continue;
        }
        ghost_add(f, t);
        s->evictions++;
        return;
    }
    evict_main(f);
}

static bool s3_access(struct refsim *s, uint64_t block, uint32_t next_use, bool write)
{
    struct s3fifo *f = (struct s3fifo *)s;
    uint32_t i = rs_find(s, block);
    if (i != RS_NIL && s->node[i].list != G) {
        if (s->node[i].freq < 3)
            s->node[i].freq++;
        return true;
    }
    if (f->q[S].len + f->q[M].len >= s->entries)
        evict(f);
    /* The eviction may have pushed this block's ghost out of G. */
    i = rs_find(s, block);
    if (i != RS_NIL) {
        rs_unlink(s, &f->q[G], i);
        s->node[i].freq = 0;
        push(f, i, M);
    } else {
        push(f, rs_alloc(s, block), S);
    }
    s->promotions++;
    return false;
}

static void s3_drop(struct refsim *s, uint64_t block)
{
    struct s3fifo *f = (struct s3fifo *)s;
    uint32_t i = rs_find(s, block);
    if (i != RS_NIL) {
        rs_unlink(s, &f->q[s->node[i].list], i);
        rs_release(s, i);
    }
}

static void s3_destroy(struct refsim *s)
{
    rs_fini(s);
    free(s);
}

const struct refsim_ops ref_s3fifo_ops = {
    .name = "ref-s3fifo",
    .create = s3_create,
    .access = s3_access,
    .drop = s3_drop,
    .destroy = s3_destroy,
};
