/*
 * The write budget of the cache devices (engine/budget.h).
 */
#include "engine/budget.h"
#include "util/misc.h"

void budget_init(struct budget *b, uint64_t rate, uint64_t burst, uint64_t minburst)
{
    b->rate = rate;
    /* Two seconds of the rate; the parsers bound a rate (TC_RATE_MAX), and
     * this saturates rather than wrap should one come in unbounded. */
    b->burst = burst ? burst : (b->rate > UINT64_MAX / 2 ? UINT64_MAX : 2 * b->rate);
    b->minburst = minburst ? minburst : b->burst / 4;
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

bool budget_allow(struct budget *b, uint64_t bytes)
{
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

void budget_spend(struct budget *b, uint64_t bytes)
{
    b->spent += bytes;
    if (b->rate == 0)
        return;
    refill(b);
    b->tokens -= (double)bytes;
    if (b->tokens <= 0)
        b->dry = true;
}
