/*
 * ref-opt: Belady's MIN, the fewest read misses any cache of this size
 * could have had on the trace (with hindsight).
 *
 * reference.c gives each access the index of the block's next read
 * access, RS_NEVER if the block is written or trimmed before it is read
 * again (a write brings the data itself, so keeping the old copy saves
 * no read).  The cached blocks sit in a binary max-heap on that index:
 * when the cache is full, the block needed furthest in the future leaves,
 * unless the block just accessed is needed even later, in which case it
 * is not admitted at all (MIN with bypass: an admission policy can do
 * that too, so the floor must allow it).
 */
#include <stdlib.h>

#include "replay/refsim.h"
#include "util/misc.h"

struct opt {
    struct refsim core;
    uint32_t *heap;                 /* node indexes; heap[0] is needed last */
    uint32_t *next_use;             /* by node */
    uint32_t len;
};

static struct refsim *opt_create(uint64_t entries)
{
    if (entries >= UINT32_MAX)
        return NULL;
    struct opt *o = tc_xcalloc(1, sizeof *o);
    rs_init(&o->core, entries, (uint32_t)entries + 1);
    o->heap = tc_xmalloc(((size_t)entries + 1) * sizeof *o->heap);
    o->next_use = tc_xmalloc(((size_t)entries + 1) * sizeof *o->next_use);
    return &o->core;
}

static void set_at(struct opt *o, uint32_t pos, uint32_t i)
{
    o->heap[pos] = i;
    o->core.node[i].aux = pos;
}

static void sift_up(struct opt *o, uint32_t pos)
{
    uint32_t i = o->heap[pos], key = o->next_use[i];
    while (pos > 0) {
        uint32_t parent = (pos - 1) / 2;
        if (o->next_use[o->heap[parent]] >= key)
            break;
        set_at(o, pos, o->heap[parent]);
        pos = parent;
    }
    set_at(o, pos, i);
}

static void sift_down(struct opt *o, uint32_t pos)
{
    uint32_t i = o->heap[pos], key = o->next_use[i];
    for (;;) {
        uint32_t c = 2 * pos + 1;
        if (c >= o->len)
            break;
        if (c + 1 < o->len && o->next_use[o->heap[c + 1]] > o->next_use[o->heap[c]])
            c++;
        if (o->next_use[o->heap[c]] <= key)
            break;
        set_at(o, pos, o->heap[c]);
        pos = c;
    }
    set_at(o, pos, i);
}

static void heap_remove(struct opt *o, uint32_t i)
{
    uint32_t pos = o->core.node[i].aux;
    o->len--;
    if (pos == o->len)
        return;
    uint32_t moved = o->heap[o->len];
    set_at(o, pos, moved);
    sift_up(o, pos);
    sift_down(o, o->core.node[moved].aux);
}

static bool opt_access(struct refsim *s, uint64_t block, uint32_t next_use, bool write)
{
    struct opt *o = (struct opt *)s;
    uint32_t i = rs_find(s, block);
    if (i != RS_NIL) {
        uint32_t old = o->next_use[i];
        o->next_use[i] = next_use;
        if (next_use > old)
            sift_up(o, s->node[i].aux);
        else
            sift_down(o, s->node[i].aux);
        return true;
    }
    if (next_use == RS_NEVER)
        return false;
    if (o->len >= s->entries) {
        uint32_t top = o->heap[0];
        if (o->next_use[top] < next_use)
            return false;
        heap_remove(o, top);
        rs_release(s, top);
        s->evictions++;
    }
    i = rs_alloc(s, block);
    o->next_use[i] = next_use;
    o->heap[o->len] = i;
    s->node[i].aux = o->len;
    o->len++;
    sift_up(o, o->len - 1);
    s->promotions++;
    return false;
}

static void opt_drop(struct refsim *s, uint64_t block)
{
    struct opt *o = (struct opt *)s;
    uint32_t i = rs_find(s, block);
    if (i != RS_NIL) {
        heap_remove(o, i);
        rs_release(s, i);
    }
}

static void opt_destroy(struct refsim *s)
{
    struct opt *o = (struct opt *)s;
    free(o->heap);
    free(o->next_use);
    rs_fini(s);
    free(o);
}

const struct refsim_ops ref_opt_ops = {
    .name = "ref-opt",
    .create = opt_create,
    .access = opt_access,
    .drop = opt_drop,
    .destroy = opt_destroy,
};
