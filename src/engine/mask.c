/*
 * Operations on sector masks (engine/mask.h).
 */
#include "engine/mask.h"
#include "util/misc.h"

void mask_range(struct tc_mask *m, unsigned s0, unsigned s1)
{
    mask_clear(m);
    for (unsigned s = s0; s < s1;) {
        unsigned w = s / 64, b = s % 64;
        unsigned n = TC_MIN(64 - b, s1 - s);
        uint64_t bits = n == 64 ? ~0ull : ((1ull << n) - 1) << b;
        m->w[w] |= bits;
        s += n;
    }
}

unsigned mask_rank(const struct tc_mask *m, unsigned s)
{
    unsigned n = 0, w = s / 64;
    for (unsigned i = 0; i < w; i++)
        n += popcount64(m->w[i]);
    if (s % 64)
        n += popcount64(m->w[w] & ((1ull << (s % 64)) - 1));
    return n;
}

bool mask_next_block(uint64_t *off, uint64_t end, uint32_t block_size, uint64_t *oblock,
                     struct tc_mask *m)
{
    if (*off >= end)
        return false;
    uint64_t ob = *off / block_size, bstart = ob * block_size;
    uint64_t pend = end < bstart + block_size ? end : bstart + block_size;
    mask_range(m, (unsigned)((*off - bstart) / TC_SECTOR),
               (unsigned)((pend - bstart + TC_SECTOR - 1) / TC_SECTOR));
    *oblock = ob;
    *off = pend;
    return true;
}

bool mask_next_run(const struct tc_mask *m, unsigned n, unsigned *s, unsigned *e)
{
    unsigned i = *s;
    while (i < n && !mask_test(m, i))
        i++;
    if (i >= n)
        return false;
    unsigned j = i;
    while (j < n && mask_test(m, j))
        j++;
    *s = i;
    *e = j;
    return true;
}
