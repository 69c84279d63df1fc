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
 *
 * Invariants: tokens never exceed burst (refilled lazily, on each
 * budget_allow() or budget_spend(), for the time since last_ns) and may go
 * below zero; once dry, only a bucket back at minburst ends it; minburst
 * <= burst.  spent counts every byte written, skipped every write refused;
 * budget_init() leaves both (and dry) as they were.
 */
#ifndef TC_ENGINE_BUDGET_H
#define TC_ENGINE_BUDGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct budget {
    uint64_t rate, burst, minburst;     /* bytes/s, bytes, bytes; rate 0: no budget */
    double tokens;
    uint64_t last_ns;
    bool dry;                           /* ran out: wait for minburst */
    uint64_t skipped, spent;
};

/* (Re)start with a full bucket: RATE bytes/s (0: no budget), BURST (0:
 * twice the rate) and MINBURST (0: a quarter of the burst) bytes, as
 * --write-budget gives them. */
void budget_init(struct budget *b, uint64_t rate, uint64_t burst, uint64_t minburst);
/* "RATE[:BURST[:MINBURST]]" as --write-budget and write-budget= take it,
 * what naming it in messages ("--write-budget", "write-budget").  With
 * off_ok, "off" and a RATE of 0 are no budget (rate 0) and take no BURST
 * or MINBURST; without, RATE must be above 0.  A BURST or MINBURST of 0
 * is refused (the defaults are the fields left out, stored as 0), and so
 * is a MINBURST above BURST.  0, or -1 with the value named in err. */
int budget_parse(const char *what, const char *value, bool off_ok, uint64_t *rate,
                 uint64_t *burst, uint64_t *minburst, char *err, size_t errlen);
/* May a write of `bytes` that the cache could skip go now? */
bool budget_allow(struct budget *b, uint64_t bytes);
/* Bytes written to a cache device (every write, skippable or not). */
void budget_spend(struct budget *b, uint64_t bytes);

#endif
