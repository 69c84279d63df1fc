/*
 * The ghost: a bounded FIFO set of 32-bit fingerprints of block numbers.
 *
 *   ring[]   fingerprints in arrival order; the oldest is overwritten
 *   table[]  open addressing (linear probing) over the same fingerprints,
 *            with a count per slot so duplicates in the ring are fine
 *
 * 12 bytes per remembered block.  Fingerprint 0 marks an empty slot, so
 * fingerprints are never 0.
 */
#include <stdlib.h>
#include <string.h>

#include "policy/policy.h"
#include "util/misc.h"

struct slot {
    uint32_t fp;
    uint32_t count;
};

struct ghost {
    uint32_t *ring;
    uint64_t cap, head, len;
    struct slot *table;
    uint64_t table_mask;
};

static uint32_t fingerprint(uint64_t oblock)
{
    uint64_t h = (oblock + 1) * 0x9E3779B97F4A7C15ull;
    uint32_t fp = (uint32_t)(h >> 32) ^ (uint32_t)h;
    return fp ? fp : 1;
}

struct ghost *ghost_create(uint64_t capacity)
{
    struct ghost *g = tc_xcalloc(1, sizeof *g);
    g->cap = capacity ? capacity : 1;
    g->ring = tc_xcalloc(g->cap, sizeof *g->ring);
    uint64_t t = 16;
    while (t < 2 * g->cap)
        t *= 2;
    g->table = tc_xcalloc(t, sizeof *g->table);
    g->table_mask = t - 1;
    return g;
}

void ghost_destroy(struct ghost *g)
{
    if (g == NULL)
        return;
    free(g->ring);
    free(g->table);
    free(g);
}

static struct slot *lookup(const struct ghost *g, uint32_t fp, bool *found)
{
    uint64_t i = fp & g->table_mask;
    for (;;) {
        struct slot *s = &g->table[i];
        if (s->fp == fp) {
            *found = true;
            return s;
        }
        if (s->fp == 0) {
            *found = false;
            return s;
        }
        i = (i + 1) & g->table_mask;
    }
}

/* Remove one count of fp; rebuild the probe chain after an emptied slot. */
static void table_dec(struct ghost *g, uint32_t fp)
{
    bool found;
    struct slot *s = lookup(g, fp, &found);
    if (!found)
        return;
    if (--s->count > 0)
        return;
    s->fp = 0;
    uint64_t i = ((uint64_t)(s - g->table) + 1) & g->table_mask;
    while (g->table[i].fp != 0) {
        struct slot moved = g->table[i];
        g->table[i].fp = 0;
        g->table[i].count = 0;
        bool f;
        struct slot *d = lookup(g, moved.fp, &f);
        *d = moved;
        i = (i + 1) & g->table_mask;
    }
}

bool ghost_contains(const struct ghost *g, uint64_t oblock)
{
    bool found;
    lookup(g, fingerprint(oblock), &found);
    return found;
}

void ghost_add(struct ghost *g, uint64_t oblock)
{
    uint32_t fp = fingerprint(oblock);
    if (g->len == g->cap) {
        uint32_t old = g->ring[g->head];
        if (old)
            table_dec(g, old);
        g->len--;
    }
    g->ring[g->head] = fp;
    g->head = (g->head + 1) % g->cap;
    g->len++;
    bool found;
    struct slot *s = lookup(g, fp, &found);
    if (!found) {
        s->fp = fp;
        s->count = 0;
    }
    s->count++;
}

void ghost_remove(struct ghost *g, uint64_t oblock)
{
    /* The ring keeps its copies; they only expire.  Forget all counts. */
    uint32_t fp = fingerprint(oblock);
    bool found;
    struct slot *s = lookup(g, fp, &found);
    if (!found)
        return;
    /* Mark the ring copies as gone by zeroing them lazily: simplest is to
     * leave one count per copy and drop the slot now, then skip missing
     * fingerprints when copies expire (table_dec ignores them). */
    s->count = 1;
    table_dec(g, fp);
}

uint64_t ghost_memory(const struct ghost *g)
{
    return g->cap * sizeof *g->ring + (g->table_mask + 1) * sizeof *g->table;
}
