/*
 * Operations on sector masks (engine/mask.h).
 */
#include <string.h>

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

/* Bits set in a word.  __builtin_popcountll() is a call into the
 * compiler's library unless the build targets a CPU with POPCNT (not
 * every x86_64 has it); this is a dozen inline instructions everywhere,
 * and a zero word (most words of most masks) costs a test. */
static inline unsigned popcount64(uint64_t x)
{
    if (x == 0)
        return 0;
    x -= (x >> 1) & 0x5555555555555555ull;
    x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
    x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
    return (unsigned)((x * 0x0101010101010101ull) >> 56);
}

unsigned mask_count(const struct tc_mask *m)
{
    unsigned n = 0;
    for (int i = 0; i < TC_MASK_WORDS; i++)
        n += popcount64(m->w[i]);
    return n;
}

bool mask_empty(const struct tc_mask *m)
{
    return (m->w[0] | m->w[1] | m->w[2] | m->w[3]) == 0;
}

bool mask_covers(const struct tc_mask *m, const struct tc_mask *sub)
{
    for (int i = 0; i < TC_MASK_WORDS; i++)
        if (sub->w[i] & ~m->w[i])
            return false;
    return true;
}

void mask_or(struct tc_mask *d, const struct tc_mask *a)
{
    for (int i = 0; i < TC_MASK_WORDS; i++)
        d->w[i] |= a->w[i];
}

void mask_and(struct tc_mask *d, const struct tc_mask *a)
{
    for (int i = 0; i < TC_MASK_WORDS; i++)
        d->w[i] &= a->w[i];
}

void mask_andnot(struct tc_mask *d, const struct tc_mask *a)
{
    for (int i = 0; i < TC_MASK_WORDS; i++)
        d->w[i] &= ~a->w[i];
}

bool mask_equal(const struct tc_mask *a, const struct tc_mask *b)
{
    return memcmp(a, b, sizeof *a) == 0;
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
