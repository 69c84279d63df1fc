/* Node allocation of the reference simulators (refsim.h). */
#include <stdlib.h>

#include "replay/refsim.h"
#include "util/misc.h"

void rs_init(struct refsim *s, uint64_t entries, uint32_t nodes)
{
    s->node = tc_xmalloc((size_t)nodes * sizeof *s->node);
    s->nodes = nodes;
    s->used = 0;
    s->free = RS_NIL;
    bmap_init(&s->map, TC_MIN(nodes, 1u << 16));      /* grows with the blocks seen */
    s->entries = entries;
    s->promotions = s->evictions = 0;
}

void rs_fini(struct refsim *s)
{
    free(s->node);
    bmap_free(&s->map);
}

uint32_t rs_alloc(struct refsim *s, uint64_t key)
{
    uint32_t i;
    if (s->free != RS_NIL) {
        i = s->free;
        s->free = s->node[i].next;
    } else {
        if (s->used == s->nodes)
            abort();                /* a simulator kept more nodes than it said */
        i = s->used++;
    }
    struct rs_node *n = &s->node[i];
    n->key = key;
    n->prev = n->next = RS_NIL;
    n->aux = 0;
    n->list = 0;
    n->freq = 0;
    bmap_put(&s->map, key, i);
    return i;
}

void rs_release(struct refsim *s, uint32_t i)
{
    bmap_del(&s->map, s->node[i].key);
    s->node[i].next = s->free;
    s->free = i;
}
