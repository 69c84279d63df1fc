/*
 * lru: admit every miss; evict the least recently used.
 *
 * In a log reclaimed oldest first, least-recently-used order is kept the
 * way CLOCK keeps it: a block hit since it was last written gets a second
 * chance -- the cleaner writes it again at the head and clears the mark --
 * and a block not hit for a whole pass of the log is dropped.  A new
 * block starts unreferenced (its hint is 0).  Admission is the default:
 * every miss.
 */
#include "policy/policy.h"

/* The block's hint: hit since it was last written. */
#define HINT_REFERENCED (1u << 0)

static void hit(void *s, uint64_t oblock, uint8_t *hint)
{
    *hint |= HINT_REFERENCED;
}

static bool keep(void *s, uint64_t oblock, uint8_t *hint)
{
    if (!(*hint & HINT_REFERENCED))
        return false;
    *hint &= (uint8_t)~HINT_REFERENCED;
    return true;
}

const struct policy_ops policy_lru = {
    .name = "lru",
    .summary = "admit all; second chance for blocks hit since written",
    .hit = hit,
    .keep = keep,
};
