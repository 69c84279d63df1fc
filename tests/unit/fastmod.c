/*
 * tc_mod_fast() (util/misc.h): x % d by a multiplication with a reciprocal
 * made once.  Checked against the % operator for the divisors the history
 * filters use (multiples of 64 from 64 up) and for edge divisors (1, 2, 3,
 * powers of two and their neighbours, the largest), at edge numerators
 * (0, d - 1, d, multiples of d and their neighbours, 2^64 - 1) and at
 * random ones.
 */
#include <stdint.h>
#include <stdio.h>

#include "util/misc.h"

#include "check.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static unsigned wrong;

static void one(uint64_t x, uint64_t d, uint64_t r)
{
    uint64_t got = tc_mod_fast(x, d, r);
    if (got != x % d && wrong++ < 10)
        fprintf(stderr, "%llu %% %llu: %llu, not %llu\n", (unsigned long long)x,
                (unsigned long long)d, (unsigned long long)got, (unsigned long long)(x % d));
}

static void divisor(uint64_t d)
{
    uint64_t r = tc_mod_recip(d);
    uint64_t edges[] = { 0, 1, d - 1, d, d + 1, 2 * d - 1, 2 * d, UINT64_MAX, UINT64_MAX - 1,
                         UINT64_MAX / d * d, UINT64_MAX / d * d - 1, (UINT64_MAX / d - 1) * d };
    for (unsigned i = 0; i < sizeof edges / sizeof edges[0]; i++)
        one(edges[i], d, r);
    for (unsigned i = 0; i < 2000; i++) {
        uint64_t x = next_rand();
        one(x, d, r);
        one(x / d * d, d, r);
        one(x / d * d - 1, d, r);
    }
}

int main(void)
{
    printf("against %%: filter sizes, edge and random divisors and numerators\n");
    for (uint64_t d = 64; d <= 64 * 5000; d += 64)
        divisor(d);
    uint64_t small[] = { 1, 2, 3, 5, 7, 10, 640, 655360, 0x9E3779B97F4A7C15ull,
                         UINT64_MAX / 2, UINT64_MAX / 2 + 1, UINT64_MAX - 1, UINT64_MAX };
    for (unsigned i = 0; i < sizeof small / sizeof small[0]; i++)
        divisor(small[i]);
    for (unsigned s = 1; s < 64; s++) {
        divisor(1ull << s);
        divisor((1ull << s) - 1);
        divisor((1ull << s) + 1);
    }
    for (unsigned i = 0; i < 2000; i++)
        divisor(next_rand() | 1);
    CHECK(wrong == 0);
    return check_exit("fastmod");
}
