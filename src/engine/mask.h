/*
 * Masks of sectors within a block: bit s of a struct tc_mask stands for
 * sector s (TC_SECTOR bytes) of one origin block.  A block has at most
 * TC_MAX_BLOCK_SIZE / TC_SECTOR = 256 sectors, so a mask is TC_MASK_WORDS
 * 64-bit words, sector s in word s / 64, bit s % 64.
 *
 * struct tc_mask itself is part of the on-disk format (format/ondisk.h:
 * the valid and dirty masks of a log entry), so it is defined there; this
 * module holds the operations on it.
 *
 * Invariants: a mask carries no length.  The operations work on all
 * TC_MASK_WORDS words; callers keep the bits at or above their block's
 * sectors clear (decoding a log entry refuses masks that set them:
 * format/chunk.c), and the operations keep them clear (mask_range() sets
 * only [s0, s1), and and/or/andnot of such masks have no others).  Ranges
 * are half-open.  The packed position of a set sector (mask_rank()) is
 * where it sits in a fragment that stored exactly the mask's sectors, in
 * order.
 */
#ifndef TC_ENGINE_MASK_H
#define TC_ENGINE_MASK_H

#include <stdbool.h>
#include <stdint.h>

#include "format/ondisk.h"

static inline void mask_clear(struct tc_mask *m)
{
    for (int i = 0; i < TC_MASK_WORDS; i++)
        m->w[i] = 0;
}
static inline bool mask_test(const struct tc_mask *m, unsigned s) { return (m->w[s / 64] >> (s % 64)) & 1; }
static inline void mask_set(struct tc_mask *m, unsigned s) { m->w[s / 64] |= 1ull << (s % 64); }
/* Sectors [s0, s1). */
void mask_range(struct tc_mask *m, unsigned s0, unsigned s1);

/* The word-wise operations are inline: the engine runs several per block
 * of every request, and a call costs more than the operation. */

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

static inline unsigned mask_count(const struct tc_mask *m)
{
    unsigned n = 0;
    for (int i = 0; i < TC_MASK_WORDS; i++)
        n += popcount64(m->w[i]);
    return n;
}

static inline bool mask_empty(const struct tc_mask *m)
{
    return (m->w[0] | m->w[1] | m->w[2] | m->w[3]) == 0;
}

/* sub ⊆ m */
static inline bool mask_covers(const struct tc_mask *m, const struct tc_mask *sub)
{
    for (int i = 0; i < TC_MASK_WORDS; i++)
        if (sub->w[i] & ~m->w[i])
            return false;
    return true;
}

static inline void mask_or(struct tc_mask *d, const struct tc_mask *a)
{
    for (int i = 0; i < TC_MASK_WORDS; i++)
        d->w[i] |= a->w[i];
}

static inline void mask_and(struct tc_mask *d, const struct tc_mask *a)
{
    for (int i = 0; i < TC_MASK_WORDS; i++)
        d->w[i] &= a->w[i];
}

static inline void mask_andnot(struct tc_mask *d, const struct tc_mask *a)
{
    for (int i = 0; i < TC_MASK_WORDS; i++)
        d->w[i] &= ~a->w[i];
}

static inline bool mask_equal(const struct tc_mask *a, const struct tc_mask *b)
{
    uint64_t x = 0;
    for (int i = 0; i < TC_MASK_WORDS; i++)
        x |= a->w[i] ^ b->w[i];
    return x == 0;
}

/* Number of set bits below sector s: the packed position of sector s. */
unsigned mask_rank(const struct tc_mask *m, unsigned s);
/* The next run of set sectors at or after *s, below n: true with the run
 * as [*s, *e), false when there is none.  for (s = 0; mask_next_run(m, n,
 * &s, &e); s = e) visits every run once. */
bool mask_next_run(const struct tc_mask *m, unsigned n, unsigned *s, unsigned *e);
/* The next piece of the byte range [*off, end) that lies in one block of
 * block_size bytes: its block number and its sectors (a partial sector
 * counts whole); *off moves past it.  False once *off reaches end.
 * while (mask_next_block(&off, end, bs, &ob, &m)) visits every block once. */
bool mask_next_block(uint64_t *off, uint64_t end, uint32_t block_size, uint64_t *oblock,
                     struct tc_mask *m);

#endif
