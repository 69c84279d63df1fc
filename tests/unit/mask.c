/*
 * Sector masks (struct tc_mask, the mask_* functions of engine/mask.h,
 * in engine/mask.c) against a plain array of bits.  A block has at most
 * TC_MAX_BLOCK_SIZE / 4096 = 256 sectors, four 64-bit words; the checks
 * dwell on the word boundaries (63/64, 127/128, 191/192, 255/256), where
 * a shift by 64 or an off-by-one in a word index goes wrong: every range
 * [s0, s1) of a 256-sector block, the rank of every sector, runs visited
 * once each and maximal, and the set operations bit by bit.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "engine/mask.h"
#include "util/misc.h"

#include "check.h"

#define MAXS (TC_MAX_BLOCK_SIZE / 4096u)

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* The reference: one bool per sector. */
struct bits {
    bool b[MAXS];
};

static void to_bits(const struct tc_mask *m, struct bits *r)
{
    for (unsigned s = 0; s < MAXS; s++)
        r->b[s] = (m->w[s / 64] >> (s % 64)) & 1;
}

/* A random mask of one of several shapes: sparse, dense, long runs, and
 * runs placed across the word boundaries. */
static void random_mask(struct tc_mask *m)
{
    mask_clear(m);
    switch (next_rand() % 4) {
    case 0:
        for (int i = 0; i < TC_MASK_WORDS; i++)
            m->w[i] = next_rand();
        break;
    case 1:
        for (int i = 0; i < TC_MASK_WORDS; i++)
            m->w[i] = next_rand() & next_rand() & next_rand();
        break;
    case 2:
        for (int k = 0, n = (int)(next_rand() % 5); k < n; k++) {
            unsigned a = (unsigned)(next_rand() % (MAXS + 1)), b = (unsigned)(next_rand() % (MAXS + 1));
            struct tc_mask r;
            mask_range(&r, a < b ? a : b, a < b ? b : a);
            mask_or(m, &r);
        }
        break;
    default: {
        unsigned w = (unsigned)(next_rand() % 3 + 1) * 64;    /* 64, 128 or 192 */
        unsigned lo = w - (unsigned)(next_rand() % 3), hi = w + (unsigned)(next_rand() % 3);
        struct tc_mask r;
        mask_range(&r, lo, hi);
        mask_or(m, &r);
        if (next_rand() & 1)
            mask_set(m, MAXS - 1);
        if (next_rand() & 1)
            mask_set(m, 0);
    }
    }
}

static void check_ranges(void)
{
    printf("mask_range, mask_count, mask_empty, mask_test: every [s0, s1) of %u sectors\n", MAXS);
    unsigned bad = 0;
    for (unsigned s0 = 0; s0 <= MAXS; s0++)
        for (unsigned s1 = s0; s1 <= MAXS; s1++) {
            struct tc_mask m;
            memset(&m, 0xA5, sizeof m);     /* mask_range must clear first */
            mask_range(&m, s0, s1);
            for (unsigned s = 0; s < MAXS; s++)
                if (mask_test(&m, s) != (s >= s0 && s < s1))
                    bad++;
            if (mask_count(&m) != s1 - s0 || mask_empty(&m) != (s0 == s1))
                bad++;
        }
    CHECK(bad == 0);

    /* mask_set on each word's first and last bit touches only that bit. */
    unsigned edges[] = { 0, 63, 64, 127, 128, 191, 192, 255 };
    for (unsigned i = 0; i < TC_ARRAY_SIZE(edges); i++) {
        struct tc_mask m;
        mask_clear(&m);
        mask_set(&m, edges[i]);
        CHECK(mask_count(&m) == 1 && mask_test(&m, edges[i]));
        CHECK(!mask_empty(&m));
        struct tc_mask r;
        mask_range(&r, edges[i], edges[i] + 1);
        CHECK(mask_equal(&m, &r));
    }
    /* Ranges ending exactly on a word boundary leave the next word empty. */
    for (unsigned w = 1; w <= 3; w++) {
        struct tc_mask m;
        mask_range(&m, 0, 64 * w);
        CHECK(m.w[w - 1] == ~0ull);
        for (unsigned i = w; i < TC_MASK_WORDS; i++)
            CHECK(m.w[i] == 0);
        mask_range(&m, 64 * w, MAXS);
        CHECK(m.w[w - 1] == 0 && m.w[w] == ~0ull);
    }
}

static void check_rank(void)
{
    printf("mask_rank: every sector 0..%u of random masks and of full/empty ones\n", MAXS);
    unsigned bad = 0;
    for (int iter = 0; iter < 2000; iter++) {
        struct tc_mask m;
        if (iter == 0)
            mask_clear(&m);
        else if (iter == 1)
            mask_range(&m, 0, MAXS);
        else
            random_mask(&m);
        struct bits r;
        to_bits(&m, &r);
        unsigned n = 0;
        for (unsigned s = 0; s <= MAXS; s++) {
            if (mask_rank(&m, s) != n)
                bad++;
            if (s < MAXS && r.b[s])
                n++;
        }
        if (mask_rank(&m, MAXS) != mask_count(&m))
            bad++;
    }
    CHECK(bad == 0);
    struct tc_mask full;
    mask_range(&full, 0, MAXS);
    CHECK(mask_rank(&full, 64) == 64 && mask_rank(&full, 63) == 63 && mask_rank(&full, 65) == 65);
    CHECK(mask_rank(&full, MAXS) == MAXS);
}

/* Walk m below n with the loop the header documents; check that the runs
 * come in order, are maximal, and together are exactly m below n. */
static unsigned walk_runs(const struct tc_mask *m, unsigned n, unsigned *nruns)
{
    struct bits r;
    to_bits(m, &r);
    bool seen[MAXS] = { false };
    unsigned bad = 0, runs = 0, prev_end = 0, s, e;
    for (s = 0; mask_next_run(m, n, &s, &e); s = e) {
        runs++;
        if (!(s < e && e <= n && s >= prev_end) || (runs > 1 && s == prev_end))
            return bad + 1000;      /* out of order, empty, or not maximal on the left */
        if (s > 0 && r.b[s - 1] && s - 1 >= prev_end)
            bad++;                  /* a set sector just before the run */
        if (e < n && r.b[e])
            bad++;                  /* the run stops before its end */
        for (unsigned i = s; i < e; i++) {
            if (!r.b[i] || seen[i])
                bad++;
            seen[i] = true;
        }
        prev_end = e;
        if (runs > MAXS)
            return bad + 1000;
    }
    for (unsigned i = 0; i < MAXS; i++)
        if (seen[i] != (i < n && r.b[i]))
            bad++;
    *nruns = runs;
    return bad;
}

static void check_next_run(void)
{
    printf("mask_next_run: every run once, maximal, in order, for n of 1..%u\n", MAXS);
    unsigned ns[] = { 1, 8, 16, 32, 63, 64, 65, 127, 128, 129, 192, 255, MAXS };
    unsigned bad = 0, runs;
    for (int iter = 0; iter < 3000; iter++) {
        struct tc_mask m;
        random_mask(&m);
        for (unsigned i = 0; i < TC_ARRAY_SIZE(ns); i++)
            bad += walk_runs(&m, ns[i], &runs);
    }
    CHECK(bad == 0);

    struct tc_mask m;
    /* Alternating sectors: 128 runs of one sector each. */
    mask_clear(&m);
    for (unsigned s = 0; s < MAXS; s += 2)
        mask_set(&m, s);
    CHECK(walk_runs(&m, MAXS, &runs) == 0 && runs == MAXS / 2);
    /* A full mask is one run, whatever n. */
    mask_range(&m, 0, MAXS);
    CHECK(walk_runs(&m, MAXS, &runs) == 0 && runs == 1);
    unsigned s = 0, e = 0;
    CHECK(mask_next_run(&m, 64, &s, &e) && s == 0 && e == 64);
    /* One run across each word boundary, cut by n. */
    mask_clear(&m);
    struct tc_mask r;
    for (unsigned w = 64; w < MAXS; w += 64) {
        mask_range(&r, w - 1, w + 1);
        mask_or(&m, &r);
    }
    CHECK(walk_runs(&m, MAXS, &runs) == 0 && runs == 3);
    s = 0;
    CHECK(mask_next_run(&m, 64, &s, &e) && s == 63 && e == 64);
    s = 64;
    CHECK(mask_next_run(&m, MAXS, &s, &e) && s == 64 && e == 65);
    /* Starting inside a run gives the rest of it. */
    mask_range(&m, 10, 200);
    s = 100;
    CHECK(mask_next_run(&m, MAXS, &s, &e) && s == 100 && e == 200);
    /* Nothing at or after *s, or *s at or past n. */
    s = 200;
    CHECK(!mask_next_run(&m, MAXS, &s, &e));
    s = MAXS;
    CHECK(!mask_next_run(&m, MAXS, &s, &e));
    s = 0;
    CHECK(!mask_next_run(&m, 10, &s, &e));
    mask_clear(&m);
    s = 0;
    CHECK(!mask_next_run(&m, MAXS, &s, &e));
    /* The last sector alone. */
    mask_set(&m, MAXS - 1);
    s = 0;
    CHECK(mask_next_run(&m, MAXS, &s, &e) && s == MAXS - 1 && e == MAXS);
    s = 0;
    CHECK(!mask_next_run(&m, MAXS - 1, &s, &e));
}

static void check_set_ops(void)
{
    printf("mask_covers, mask_or, mask_and, mask_andnot, mask_equal: bit by bit\n");
    unsigned bad = 0;
    for (int iter = 0; iter < 20000; iter++) {
        struct tc_mask a, b;
        random_mask(&a);
        if (iter % 3 == 0) {
            b = a;                  /* a subset of a, or a itself */
            if (iter % 2)
                b.w[next_rand() % TC_MASK_WORDS] &= next_rand();
        } else {
            random_mask(&b);
        }
        struct bits ra, rb;
        to_bits(&a, &ra);
        to_bits(&b, &rb);
        bool covers = true, equal = true;
        for (unsigned s = 0; s < MAXS; s++) {
            if (rb.b[s] && !ra.b[s])
                covers = false;
            if (ra.b[s] != rb.b[s])
                equal = false;
        }
        if (mask_covers(&a, &b) != covers || mask_equal(&a, &b) != equal ||
            mask_equal(&b, &a) != equal)
            bad++;

        struct tc_mask o = a, n = a, x = a;
        mask_or(&o, &b);
        mask_and(&n, &b);
        mask_andnot(&x, &b);
        struct bits ro, rn, rx;
        to_bits(&o, &ro);
        to_bits(&n, &rn);
        to_bits(&x, &rx);
        for (unsigned s = 0; s < MAXS; s++)
            if (ro.b[s] != (ra.b[s] || rb.b[s]) || rn.b[s] != (ra.b[s] && rb.b[s]) ||
                rx.b[s] != (ra.b[s] && !rb.b[s]))
                bad++;
        /* Identities the engine leans on. */
        if (!mask_covers(&o, &a) || !mask_covers(&a, &n) || !mask_covers(&a, &x))
            bad++;
        struct tc_mask y = x;
        mask_and(&y, &b);
        if (!mask_empty(&y))
            bad++;
        if (mask_count(&n) + mask_count(&x) != mask_count(&a))
            bad++;
    }
    CHECK(bad == 0);

    /* Masks differing in one bit of the last word only. */
    struct tc_mask a, b, e;
    mask_range(&a, 0, MAXS);
    b = a;
    b.w[3] &= ~(1ull << 63);
    CHECK(!mask_equal(&a, &b));
    CHECK(mask_covers(&a, &b) && !mask_covers(&b, &a));
    mask_clear(&e);
    CHECK(mask_covers(&e, &e) && mask_covers(&b, &e) && !mask_covers(&e, &b));
    struct tc_mask d = a;
    mask_andnot(&d, &b);
    CHECK(mask_count(&d) == 1 && mask_test(&d, MAXS - 1));
    d = a;
    mask_andnot(&d, &a);
    CHECK(mask_empty(&d));
}

/* mask_next_block(): a byte range cut at block boundaries, a partial
 * sector counted whole, every block visited once, against the plain
 * arithmetic, for several block sizes and ranges that start and end
 * inside, on, and across block and sector boundaries. */
static void check_next_block(void)
{
    static const uint32_t sizes[] = { 4096, 65536, 1u << 20 };
    for (unsigned k = 0; k < 3; k++) {
        uint32_t bs = sizes[k];
        for (unsigned t = 0; t < 2000; t++) {
            uint64_t off = next_rand() % (8ull * bs), len = 1 + next_rand() % (4ull * bs);
            uint64_t end = off + len, pos = off, ob, want_ob = off / bs, covered = 0;
            struct tc_mask m;
            while (mask_next_block(&pos, end, bs, &ob, &m)) {
                CHECK(ob == want_ob);
                uint64_t bstart = ob * bs;
                uint64_t a = TC_MAX(off, bstart), b = TC_MIN(end, bstart + bs);
                for (unsigned s = 0; s < bs / 4096; s++) {
                    bool in = bstart + (uint64_t)s * 4096 < b && bstart + (uint64_t)(s + 1) * 4096 > a;
                    CHECK(mask_test(&m, s) == in);
                }
                covered += b - a;
                want_ob++;
            }
            CHECK(covered == len && pos == end);
        }
    }
    uint64_t pos = 7, ob;
    struct tc_mask m;
    CHECK(!mask_next_block(&pos, 7, 65536, &ob, &m));    /* an empty range */
}

int main(void)
{
    check_next_block();
    check_ranges();
    check_rank();
    check_next_run();
    check_set_ops();
    return check_exit("mask");
}
