/* fifo: admit every miss; evict in the order written (no reinsertion). */
#include "engine/cache.h"
#include "policy/policy.h"

static void *create(struct cache *c, uint64_t blocks) { return (void *)1; }
static void destroy(void *s) {}
static bool admit(void *s, struct cache *c, uint64_t oblock, bool free_space) { return true; }
static void hit(void *s, struct cache *c, uint32_t id) {}
static void inserted(void *s, struct cache *c, uint32_t id, bool from_miss) {}
static bool keep(void *s, struct cache *c, uint32_t id) { return false; }
static void evicted(void *s, struct cache *c, uint64_t oblock) {}
static uint64_t memory(void *s) { return 0; }

const struct policy_ops policy_fifo = {
    .name = "fifo",
    .summary = "admit all; evict in write order",
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
