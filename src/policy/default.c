/*
 * The default policy: keep one-hit wonders out of flash, keep what is used.
 *
 * Admission: while the cache has free space every miss is admitted (free
 * space costs nothing to fill).  Once the cache is full, a miss is admitted
 * only if the block was seen recently: its first miss is remembered in the
 * doorkeeper, a FIFO history as large as half the cache's blocks, and a
 * second miss while it is remembered admits it.  Blocks the cleaner drops
 * go to the same history, so a block that comes back soon is re-admitted
 * at once.  A scan of never-repeated blocks therefore writes nothing.
 *
 * Reinsertion: every hit raises the block's frequency (up to 3); the
 * cleaner keeps a block whose frequency is above zero and lowers it by
 * one, so a block survives as many passes of the log as it earned.
 */
#include <stdlib.h>

#include "engine/cache.h"
#include "policy/policy.h"
#include "util/misc.h"

struct dflt {
    struct ghost *seen;
};

static void *create(struct cache *c, uint64_t blocks)
{
    struct dflt *p = tc_xcalloc(1, sizeof *p);
    p->seen = ghost_create(blocks / 2 + 64);
    return p;
}

static void destroy(void *s)
{
    struct dflt *p = s;
    ghost_destroy(p->seen);
    free(p);
}

static bool admit(void *s, struct cache *c, uint64_t oblock, bool free_space)
{
    struct dflt *p = s;
    if (free_space)
        return true;
    if (ghost_contains(p->seen, oblock)) {
        ghost_remove(p->seen, oblock);
        return true;
    }
    ghost_add(p->seen, oblock);
    return false;
}

static void hit(void *s, struct cache *c, uint32_t id)
{
    struct centry *e = CE(&c->idx, id);
    if (e->freq < 3)
        e->freq++;
    e->flags |= CE_REF;
}

static void inserted(void *s, struct cache *c, uint32_t id, bool from_miss)
{
    struct centry *e = CE(&c->idx, id);
    e->freq = 0;
}

static bool keep(void *s, struct cache *c, uint32_t id)
{
    struct centry *e = CE(&c->idx, id);
    if (e->freq == 0)
        return false;
    e->freq--;
    return true;
}

static void evicted(void *s, struct cache *c, uint64_t oblock)
{
    struct dflt *p = s;
    ghost_add(p->seen, oblock);
}

static uint64_t memory(void *s)
{
    struct dflt *p = s;
    return sizeof *p + ghost_memory(p->seen);
}

const struct policy_ops policy_default = {
    .name = "default",
    .summary = "admit on second sight once full; keep by frequency",
    .create = create,
    .destroy = destroy,
    .admit = admit,
    .admit_write = admit,
    .hit = hit,
    .inserted = inserted,
    .keep = keep,
    .evicted = evicted,
    .memory = memory,
};
