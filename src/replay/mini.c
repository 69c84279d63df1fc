/*
 * Miniature simulation (Waldspurger et al., "Cache Modeling and
 * Optimization using Miniature Simulations", USENIX ATC 2017): the miss
 * ratio of a policy at a cache size, from the real policy run on a
 * spatially sampled trace with the cache scaled by the sampling rate.
 *
 * The sample is SHARDS's (shards.h): a block is kept when its hash falls
 * under rate * 2^64, with all of its accesses, so the sampled blocks see
 * the same sequence of accesses as in the full trace and a cache holding
 * rate times as many blocks keeps about the same share of them.  Requests
 * are cut at block boundaries (replay.h, struct replay_sample).
 *
 * Scaling: a reference simulator's cache is blocks; the miniature one
 * holds rate times as many (rounded, at least one).  The engine's cache
 * is a formatted device whose room for data is less than its size by
 * fixed parts -- superblocks, the segments the cleaner keeps free
 * (space.c: its reserve, one group of working room, 1/64 of the cache
 * and half its stopping margin, 1/64 more, on average), the open group -- that do not
 * shrink with the sample: the miniature device is the smallest whose room
 * is rate times the full device's.  Either has a least cache (one block;
 * a device of 8 segments, tc_format); for sizes whose scaled cache would
 * be smaller the rate is raised until it is not (at most to 1, a full
 * replay), and the point says which rate it used.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "format/format.h"
#include "format/ondisk.h"
#include "replay/replay.h"
#include "tiercache.h"
#include "util/misc.h"
#include "util/parse.h"

/* The engine's room for data on a cache device of `bytes`, as above. */
static double engine_room(uint64_t bytes, uint32_t block)
{
    if (bytes <= TC_DATA_OFFSET)
        return 0;
    uint64_t usable = bytes - TC_DATA_OFFSET;
    uint32_t seg = tc_format_segment_size(usable, block);
    uint64_t n = usable / seg;
    double kept = 2 + 1 + (double)(n / 64) + (double)(n / 64) / 2 + 0.5;
    return (double)n > kept ? ((double)n - kept) * seg : 0;
}

uint64_t replay_mini_least(bool engine, uint64_t block_bytes)
{
    if (!engine)
        return block_bytes;
    /* tc_format: at least 8 segments (4 per device, plus 4), of at least
     * 1 MiB and 4 blocks, after 1 MiB of superblocks. */
    return TC_DATA_OFFSET + 8 * (uint64_t)TC_MAX(TC_MIN_SEGMENT_SIZE, 4 * block_bytes);
}

/* The miniature cache for `bytes` at *rate (raised if need be). */
static uint64_t mini_size(bool engine, uint64_t block, uint64_t bytes, double *rate)
{
    uint64_t least = replay_mini_least(engine, block);
    if (*rate >= 1 || bytes <= least) {
        *rate = 1;
        return bytes;
    }
    if (!engine) {
        uint64_t full = bytes / block;
        uint64_t mini = (uint64_t)llround((double)full * *rate);
        if (mini < 1) {
            mini = 1;
            *rate = 1.0 / (double)full;
        }
        return mini * block;
    }
    double want = engine_room(bytes, (uint32_t)block) * *rate;
    if (want <= engine_room(least, (uint32_t)block)) {
        *rate = engine_room(least, (uint32_t)block) / engine_room(bytes, (uint32_t)block);
        if (*rate >= 1) {
            *rate = 1;
            return bytes;
        }
        return least;
    }
    /* The smallest device (in sectors) with the room wanted; the room
     * grows with the device but for small dips where the segment size
     * doubles, so after the search step down while the room holds. */
    uint64_t lo = least / TC_SECTOR, hi = bytes / TC_SECTOR;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (engine_room(mid * TC_SECTOR, (uint32_t)block) >= want)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo * TC_SECTOR;
}

int replay_mini(const struct replay_trace *trace, const struct replay_engine_config *cfg,
                uint64_t block_bytes, double rate, struct replay_mini_point *pt, char *err,
                size_t errlen)
{
    bool engine = !replay_reference_known(cfg->policy);
    uint64_t least = replay_mini_least(engine, block_bytes);
    if (cfg->cache_bytes < least) {
        char b1[32], b2[32];
        snprintf(err, errlen, "cache size %s: below the least cache %s can simulate (%s with "
                 "blocks of %llu bytes)", tc_format_size(cfg->cache_bytes, b1, sizeof b1),
                 cfg->policy, tc_format_size(least, b2, sizeof b2),
                 (unsigned long long)block_bytes);
        return -1;
    }
    memset(pt, 0, sizeof *pt);
    pt->cache_bytes = cfg->cache_bytes;
    pt->rate = rate;
    pt->mini_bytes = mini_size(engine, block_bytes, cfg->cache_bytes, &pt->rate);
    struct replay_sample sm;
    replay_sample_init(&sm, pt->rate, block_bytes);
    struct replay_trace t = *trace;
    t.sample = pt->rate < 1 ? &sm : NULL;
    struct replay_result r;
    int rc;
    if (engine) {
        struct replay_engine_config c = *cfg;
        c.cache_bytes = pt->mini_bytes;
        c.block_bytes = block_bytes;
        rc = replay_engine(&t, &c, &r, err, errlen);
    } else {
        rc = replay_reference(&t, cfg->policy, pt->mini_bytes, block_bytes, &r, err, errlen);
    }
    if (rc < 0)
        return -1;
    pt->requests = r.requests;
    /* Sampled: the weighted misses estimate the trace's; divided by its
     * reads (all counted), not by the weighted reads of the sample, as
     * SHARDS-adj does (shards.c): a few very hot blocks in the sample, or
     * missing from it, bias the ratio less. */
    if (t.sample)
        pt->miss = r.trace_reads ? TC_MIN(1.0, r.wread_misses / (double)r.trace_reads) : 0;
    else
        pt->miss = r.reads ? (double)r.read_misses / (double)r.reads : 0;
    pt->seconds = r.seconds;
    return 0;
}
