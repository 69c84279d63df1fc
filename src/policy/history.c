/*
 * The history: which blocks were seen recently, for admission.  Two Bloom
 * filters, the current and the previous one; a block is remembered while
 * it is in either.  When the current one has taken half the history's
 * capacity it becomes the previous one and the old previous one is
 * cleared and takes the new arrivals: the history remembers the last
 * capacity/2 to capacity distinct blocks added, with no per-block
 * removal.
 *
 * 10 bits per block and filter, 5 probes: a block never added is found
 * with a probability of about 1 % per filter.  A false match only admits a
 * block early, which costs one fill.  About 1.25 bytes per remembered
 * block, so the history can be several times as long as the cache holds
 * blocks: long enough to see the reuse of data written once and read
 * again after the cache turned over (a git pack read by every checkout).
 */
#include <stdlib.h>
#include <string.h>

#include "policy/policy.h"
#include "util/misc.h"

#define PROBES 5
#define BITS_PER_ENTRY 10

struct history {
    uint64_t *bits[2];
    uint64_t nbits;             /* per filter */
    uint64_t nbits_recip;       /* tc_mod_recip(nbits): a probe costs no division */
    uint64_t words;
    uint64_t half;              /* arrivals a filter takes before rotation */
    uint64_t count;             /* arrivals in the current filter */
    unsigned cur;
};


struct history *history_create(uint64_t capacity)
{
    struct history *h = tc_xcalloc(1, sizeof *h);
    h->half = capacity / 2 ? capacity / 2 : 1;
    h->nbits = h->half * BITS_PER_ENTRY;
    h->words = (h->nbits + 63) / 64;
    h->nbits = h->words * 64;
    h->nbits_recip = tc_mod_recip(h->nbits);
    h->bits[0] = tc_xcalloc(h->words, sizeof(uint64_t));
    h->bits[1] = tc_xcalloc(h->words, sizeof(uint64_t));
    return h;
}

void history_destroy(struct history *h)
{
    if (h == NULL)
        return;
    free(h->bits[0]);
    free(h->bits[1]);
    free(h);
}

struct history_key history_key(uint64_t oblock)
{
    uint64_t a = tc_mix64(oblock);
    return (struct history_key){ a, tc_mix64(a) | 1 };
}

static bool in_filter(const struct history *h, const uint64_t *bits, struct history_key k)
{
    for (unsigned i = 0; i < PROBES; i++) {
        uint64_t bit = tc_mod_fast(k.a + i * k.b, h->nbits, h->nbits_recip);
        if (!((bits[bit / 64] >> (bit % 64)) & 1))
            return false;
    }
    return true;
}

bool history_has(const struct history *h, struct history_key k)
{
    return in_filter(h, h->bits[h->cur], k) || in_filter(h, h->bits[h->cur ^ 1], k);
}

/* The first two probes of each filter: a block not in a filter fails
 * there at the first probe three times in four (at most 2 in 5 of the
 * bits are set), and at the second most of the remaining times. */
void history_prefetch(const struct history *h, struct history_key k)
{
    for (unsigned i = 0; i < 2; i++) {
        uint64_t bit = tc_mod_fast(k.a + i * k.b, h->nbits, h->nbits_recip);
        __builtin_prefetch(&h->bits[0][bit / 64]);
        __builtin_prefetch(&h->bits[1][bit / 64]);
    }
}

bool history_contains(const struct history *h, uint64_t oblock)
{
    return history_has(h, history_key(oblock));
}

/* Sets k's bits in the current filter, which must not hold k already
 * (callers check), and rotates the filters once it took half the
 * capacity: a block counts once per filter. */
static void set_new(struct history *h, struct history_key k)
{
    uint64_t *bits = h->bits[h->cur];
    for (unsigned i = 0; i < PROBES; i++) {
        uint64_t bit = tc_mod_fast(k.a + i * k.b, h->nbits, h->nbits_recip);
        bits[bit / 64] |= 1ull << (bit % 64);
    }
    if (++h->count >= h->half) {
        h->cur ^= 1;
        memset(h->bits[h->cur], 0, h->words * sizeof(uint64_t));
        h->count = 0;
    }
}

void history_add(struct history *h, uint64_t oblock)
{
    struct history_key k = history_key(oblock);
    if (!in_filter(h, h->bits[h->cur], k))
        set_new(h, k);
}

void history_add_absent(struct history *h, struct history_key k)
{
    set_new(h, k);
}

uint64_t history_memory(const struct history *h)
{
    return sizeof *h + 2 * h->words * sizeof(uint64_t);
}
