/*
 * The ghost: a bounded FIFO set of 32-bit fingerprints of block numbers.
 *
 *   ring[]   fingerprints in arrival order; the oldest is overwritten
 *   table[]  open addressing (linear probing) over the same fingerprints,
 *            with a count per slot so duplicates in the ring are fine, and
 *            a mark for a removed fingerprint whose copies are still in
 *            the ring (GONE)
 *
 * About 16 bytes per remembered block: 4 in the ring, 12 in the table (one
 * and a half slots, so probe chains stay short).  Fingerprint 0 marks an empty slot, so
 * fingerprints are never 0.
 */
#include <stdlib.h>
#include <string.h>

#include "policy/policy.h"
#include "util/misc.h"

struct slot {
    uint32_t fp;
    uint32_t count;             /* copies in the ring, and GONE */
};

/* Removed: not contained, though copies remain in the ring (each still
 * counted, so that they expire without touching a later addition). */
#define GONE (1u << 31)

struct ghost {
    uint32_t *ring;
    uint64_t cap, head, len;
    struct slot *table;
    uint64_t table_size;
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
    g->table_size = g->cap + g->cap / 2 + 16;
    g->table = tc_xcalloc(g->table_size, sizeof *g->table);
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

static uint64_t next_slot(const struct ghost *g, uint64_t i)
{
    return i + 1 == g->table_size ? 0 : i + 1;
}

static struct slot *lookup(const struct ghost *g, uint32_t fp, bool *found)
{
    uint64_t i = ((uint64_t)fp * g->table_size) >> 32;     /* fp spread over the table */
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
        i = next_slot(g, i);
    }
}

/* Remove one count of fp; rebuild the probe chain after an emptied slot. */
static void table_dec(struct ghost *g, uint32_t fp)
{
    bool found;
    struct slot *s = lookup(g, fp, &found);
    if (!found)
        return;
    if ((--s->count & ~GONE) > 0)
        return;
    s->fp = 0;
    uint64_t i = next_slot(g, (uint64_t)(s - g->table));
    while (g->table[i].fp != 0) {
        struct slot moved = g->table[i];
        g->table[i].fp = 0;
        g->table[i].count = 0;
        bool f;
        struct slot *d = lookup(g, moved.fp, &f);
        *d = moved;
        i = next_slot(g, i);
    }
}

bool ghost_contains(const struct ghost *g, uint64_t oblock)
{
    bool found;
    struct slot *s = lookup(g, fingerprint(oblock), &found);
    return found && !(s->count & GONE);
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
    s->count = (s->count & ~GONE) + 1;
}

void ghost_remove(struct ghost *g, uint64_t oblock)
{
    /* The ring keeps its copies; they only expire.  Until the last one
     * does, the slot stays, marked GONE: a copy expiring must not take
     * the count of a later addition of the same block. */
    bool found;
    struct slot *s = lookup(g, fingerprint(oblock), &found);
    if (found)
        s->count |= GONE;
}

/*
 * The ghost remembers capacity fingerprints from now on (the cache it is
 * sized for shrank or grew: a device failed, engine/failure.c).  The
 * newest of those it holds are kept, in their order, and so is what each
 * says: a fingerprint removed (GONE) stays removed, one contained stays
 * contained.  Rebuilt into new tables: both are sized by the capacity.
 */
void ghost_resize(struct ghost *g, uint64_t capacity)
{
    capacity = capacity ? capacity : 1;
    if (capacity == g->cap)
        return;
    struct ghost *n = ghost_create(capacity);
    uint64_t keep = TC_MIN(g->len, n->cap);
    /* The oldest fingerprint kept is keep places behind the head. */
    uint64_t i = (g->head + g->cap - keep) % g->cap;
    for (uint64_t k = 0; k < keep; k++, i = (i + 1) % g->cap) {
        uint32_t fp = g->ring[i];
        n->ring[n->head] = fp;
        n->head = (n->head + 1) % n->cap;
        n->len++;
        bool found;
        struct slot *s = lookup(n, fp, &found);
        if (!found)
            *s = (struct slot){ .fp = fp, .count = 0 };
        s->count++;
    }
    for (uint64_t t = 0; t < g->table_size; t++) {
        if (g->table[t].fp == 0 || !(g->table[t].count & GONE))
            continue;
        bool found;
        struct slot *s = lookup(n, g->table[t].fp, &found);
        if (found)
            s->count |= GONE;
    }
    free(g->ring);
    free(g->table);
    *g = *n;
    free(n);
}

uint64_t ghost_capacity(const struct ghost *g)
{
    return g->cap;
}

uint64_t ghost_memory(const struct ghost *g)
{
    return g->cap * sizeof *g->ring + g->table_size * sizeof *g->table;
}
