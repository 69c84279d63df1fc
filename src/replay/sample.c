/*
 * Spatial sampling of a trace for the simulators (replay.h, struct
 * replay_sample): the blocks SHARDS would track (shards.h), and the runs
 * of them a request covers.
 */
#include <math.h>

#include "replay/replay.h"
#include "replay/shards.h"
#include "util/misc.h"

void replay_sample_init(struct replay_sample *s, double rate, uint64_t block_bytes)
{
    s->rate = rate;
    s->threshold = rate >= 1 ? UINT64_MAX : (uint64_t)ldexp(rate, 64);
    s->block_bytes = block_bytes;
}

bool replay_sampled(const struct replay_sample *s, uint64_t block)
{
    return shards_hash(block) < s->threshold;
}

bool replay_sample_run(const struct replay_sample *s, uint64_t *pos, uint64_t end,
                       uint64_t *off, uint64_t *len)
{
    uint64_t bs = s->block_bytes;
    while (*pos < end && !replay_sampled(s, *pos / bs))
        *pos = (*pos / bs + 1) * bs;
    if (*pos >= end)
        return false;
    uint64_t start = *pos;
    while (*pos < end && replay_sampled(s, *pos / bs))
        *pos = TC_MIN(end, (*pos / bs + 1) * bs);
    *off = start;
    *len = *pos - start;
    return true;
}

double replay_sample_weight(const struct replay_sample *s, uint64_t offset, uint64_t end)
{
    if (end <= offset)
        return 1;
    double k = (double)((end - 1) / s->block_bytes - offset / s->block_bytes + 1);
    double p = -expm1(k * log1p(-s->rate));       /* 1 - (1 - rate)^k */
    return p > 0 ? 1 / p : 1;
}
