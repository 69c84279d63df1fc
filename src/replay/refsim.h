/*
 * The common parts of the reference simulators (src/replay/ref_*.c).
 *
 * A simulator keeps its blocks (cached ones, and the ghosts of evicted
 * ones for ARC and S3-FIFO) as nodes in one array, allocated from a free
 * list, found by block number through a blockmap, and linked into
 * doubly-linked lists by index (intrusive: no allocation per access).  A
 * list runs from head (the newest, or most recently used) to tail; next
 * points toward the tail, prev toward the head.
 *
 * reference.c drives them: for each block a request covers it calls
 * access() (a read or a write of the whole block; true if the block was
 * cached) and for each block a trim covers, drop().
 */
#ifndef TC_REPLAY_REFSIM_H
#define TC_REPLAY_REFSIM_H

#include <stdbool.h>
#include <stdint.h>

#include "replay/blockmap.h"

#define RS_NIL UINT32_MAX
/* ref-opt's next use of a block that is not read again (before it is
 * written or trimmed). */
#define RS_NEVER UINT32_MAX

struct rs_node {
    uint64_t key;                   /* the block number */
    uint32_t prev, next;            /* in the node's list */
    uint32_t aux;                   /* the policy's: heap position (opt) */
    uint8_t list;                   /* which of the policy's lists */
    uint8_t freq;                   /* the policy's: frequency or visited bit */
};

struct rs_list {
    uint32_t head, tail;
    uint64_t len;
};

/* The state every simulator starts with. */
struct refsim {
    struct rs_node *node;
    uint32_t nodes, used, free;     /* array size, ever used, free list */
    struct bmap map;                /* block -> node */
    uint64_t entries;               /* cache size in blocks */
    uint64_t promotions, evictions;
};

struct refsim_ops {
    const char *name;
    /* NULL if entries is beyond what the simulator can hold. */
    struct refsim *(*create)(uint64_t entries);
    /* next_use: ref-opt only, the index of this block's next read access
     * (RS_NEVER if none).  True if the block was cached. */
    bool (*access)(struct refsim *s, uint64_t block, uint32_t next_use, bool write);
    void (*drop)(struct refsim *s, uint64_t block);
    void (*destroy)(struct refsim *s);
};

extern const struct refsim_ops ref_lru_ops, ref_arc_ops, ref_s3fifo_ops, ref_sieve_ops,
    ref_opt_ops;

/* Room for nodes nodes (cached and ghosts). */
void rs_init(struct refsim *s, uint64_t entries, uint32_t nodes);
void rs_fini(struct refsim *s);

/* A new node for block key, in no list, entered in the map. */
uint32_t rs_alloc(struct refsim *s, uint64_t key);
/* Frees node i (already out of its list) and forgets its block. */
void rs_release(struct refsim *s, uint32_t i);

static inline uint32_t rs_find(struct refsim *s, uint64_t key)
{
    uint32_t *v = bmap_get(&s->map, key);
    return v ? *v : RS_NIL;
}

static inline void rs_list_init(struct rs_list *l)
{
    l->head = l->tail = RS_NIL;
    l->len = 0;
}

static inline void rs_push_head(struct refsim *s, struct rs_list *l, uint32_t i)
{
    struct rs_node *n = &s->node[i];
    n->prev = RS_NIL;
    n->next = l->head;
    if (l->head != RS_NIL)
        s->node[l->head].prev = i;
    else
        l->tail = i;
    l->head = i;
    l->len++;
}

static inline void rs_unlink(struct refsim *s, struct rs_list *l, uint32_t i)
{
    struct rs_node *n = &s->node[i];
    if (n->prev != RS_NIL)
        s->node[n->prev].next = n->next;
    else
        l->head = n->next;
    if (n->next != RS_NIL)
        s->node[n->next].prev = n->prev;
    else
        l->tail = n->prev;
    l->len--;
}

#endif
