/*
 * lru: admit every miss; evict the least recently used.
 *
 * In a log reclaimed oldest first, least-recently-used order is kept the
 * way CLOCK keeps it: a block hit since it was last written gets a second
 * chance -- the cleaner writes it again at the head and clears the mark --
 * and a block not hit for a whole pass of the log is dropped.
 */
#include "engine/cache.h"
#include "policy/policy.h"

/* The block's hint: hit since it was last written. */
#define HINT_REFERENCED (1u << 0)

static void *create(struct cache *c, uint64_t blocks) { return (void *)1; }
static void destroy(void *s) {}
static bool admit(void *s, struct cache *c, uint64_t oblock, bool free_space) { return true; }

static void hit(void *s, struct cache *c, uint32_t id)
{
    CE(&c->idx, id)->hint |= HINT_REFERENCED;
}

static void inserted(void *s, struct cache *c, uint32_t id, bool from_miss)
{
    CE(&c->idx, id)->hint &= (uint8_t)~HINT_REFERENCED;
}

static bool keep(void *s, struct cache *c, uint32_t id)
{
    struct centry *e = CE(&c->idx, id);
    if (!(e->hint & HINT_REFERENCED))
        return false;
    e->hint &= (uint8_t)~HINT_REFERENCED;
    return true;
}

static void evicted(void *s, struct cache *c, uint64_t oblock) {}
static uint64_t memory(void *s) { return 0; }

const struct policy_ops policy_lru = {
    .name = "lru",
    .summary = "admit all; second chance for blocks hit since written",
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
