/*
 * The write budget of the cache devices: a token bucket counted in bytes,
 * with the semantics of DragonFly's swapcache (accrate, maxburst,
 * minburst), so that flash is worn at a chosen rate.
 *
 *   tokens accrue at RATE bytes per second, up to BURST;
 *   every byte written to a cache device spends one token;
 *   a write the cache may skip (a fill after a miss, a reinsertion by the
 *   cleaner, a write-back of a clean block's new data) is skipped when the
 *   tokens do not cover it, and once the bucket has run dry such writes
 *   wait until it holds MINBURST again, so the devices see bursts rather
 *   than a trickle of small writes;
 *   writes that cannot be skipped (dirty data, tombstones, the log's own
 *   records) always go, and may drive the bucket below zero.
 *
 * Without --write-budget every write is allowed.
 */
#include "engine/cache.h"
#include "util/misc.h"

void budget_init(struct cache *c)
{
    const struct tc_volume_config *cfg = &c->vol->cfg;
    struct budget *b = &c->budget;
    b->rate = cfg->write_budget_rate;
    b->burst = cfg->write_budget_burst ? cfg->write_budget_burst : 2 * b->rate;
    b->minburst = cfg->write_budget_minburst ? cfg->write_budget_minburst : b->burst / 4;
    if (b->minburst > b->burst)
        b->minburst = b->burst;
    b->tokens = (double)b->burst;
    b->last_ns = tc_now_ns();
}

static void refill(struct budget *b)
{
    uint64_t now = tc_now_ns();
    b->tokens += (double)b->rate * (double)(now - b->last_ns) / 1e9;
    if (b->tokens > (double)b->burst)
        b->tokens = (double)b->burst;
    b->last_ns = now;
}

bool budget_allow(struct cache *c, uint64_t bytes)
{
    struct budget *b = &c->budget;
    if (b->rate == 0)
        return true;
    refill(b);
    if (b->dry && b->tokens < (double)b->minburst) {
        b->skipped++;
        return false;
    }
    b->dry = false;
    if (b->tokens < (double)bytes) {
        b->dry = true;
        b->skipped++;
        return false;
    }
    return true;
}

void budget_spend(struct cache *c, uint64_t bytes)
{
    struct budget *b = &c->budget;
    b->spent += bytes;
    if (b->rate == 0)
        return;
    refill(b);
    b->tokens -= (double)bytes;
    if (b->tokens <= 0)
        b->dry = true;
}
