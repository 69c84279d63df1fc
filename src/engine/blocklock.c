/*
 * Per-block coordination for operations in flight (engine/blocklock.h).
 */
#include <stdlib.h>
#include <string.h>

#include "engine/blocklock.h"
#include "util/assert.h"
#include "util/misc.h"

#define NBUCKETS 16384u

struct bl {
    uint64_t oblock;
    struct bl *next;
    struct bl *all_prev, *all_next;     /* every record, for range bumps */
    unsigned refs;
    uint64_t gen;
    bool locked;
    bool holder_on_origin;          /* block_holder_on_origin(), until the lock passes */
    struct block_waiter *lock_head, **lock_tail;
    unsigned wb;
    struct block_waiter *wb_waiters;
    unsigned fills;             /* block_fill_begin() not yet ended */
    uint64_t fill_gen;          /* ... the newest's generation */
    struct block_waiter *fill_waiters;  /* block_wait_fill(): woken at any fill's end */
};

struct blocklocks {
    struct bl *buckets[NBUCKETS];
    struct bl *all;
    struct owrite *owrites;
    uint64_t gen_counter;
    uint64_t records;
};

struct blocklocks *blocklocks_new(void)
{
    return tc_xcalloc(1, sizeof(struct blocklocks));
}

void blocklocks_free(struct blocklocks *b)
{
    if (b == NULL)
        return;
    for (unsigned i = 0; i < NBUCKETS; i++) {
        while (b->buckets[i]) {
            struct bl *r = b->buckets[i];
            b->buckets[i] = r->next;
            tc_obj_put(r, sizeof *r);
        }
    }
    free(b);
}

static unsigned bucket(uint64_t oblock)
{
    return (unsigned)((oblock * 0x9E3779B97F4A7C15ull) >> 40) % NBUCKETS;
}

static struct bl *find(struct blocklocks *b, uint64_t oblock)
{
    for (struct bl *r = b->buckets[bucket(oblock)]; r; r = r->next)
        if (r->oblock == oblock)
            return r;
    return NULL;
}

static struct bl *get(struct blocklocks *b, uint64_t oblock)
{
    struct bl *r = find(b, oblock);
    if (r)
        return r;
    r = tc_obj_get(sizeof *r);        /* one or more for every request */
    r->oblock = oblock;
    r->gen = ++b->gen_counter;
    r->lock_tail = &r->lock_head;
    unsigned h = bucket(oblock);
    r->next = b->buckets[h];
    b->buckets[h] = r;
    r->all_next = b->all;
    if (b->all)
        b->all->all_prev = r;
    b->all = r;
    b->records++;
    return r;
}

/* Keeps invariant 13: a record goes when nothing holds it. */
static void put(struct blocklocks *b, struct bl *r)
{
    if (r->refs > 0)
        return;
    TC_ASSERT(!r->locked && r->wb == 0 && r->lock_head == NULL && r->wb_waiters == NULL &&
              r->fill_waiters == NULL);
    struct bl **pp = &b->buckets[bucket(r->oblock)];
    while (*pp != r)
        pp = &(*pp)->next;
    *pp = r->next;
    if (r->all_prev)
        r->all_prev->all_next = r->all_next;
    else
        b->all = r->all_next;
    if (r->all_next)
        r->all_next->all_prev = r->all_prev;
    b->records--;
    tc_obj_put(r, sizeof *r);
}

bool block_lock(struct blocklocks *b, uint64_t oblock, struct block_waiter *w)
{
    struct bl *r = get(b, oblock);
    r->refs++;
    if (!r->locked) {
        r->locked = true;
        return true;
    }
    w->next = NULL;
    *r->lock_tail = w;
    r->lock_tail = &w->next;
    return false;
}

void block_unlock(struct blocklocks *b, uint64_t oblock)
{
    struct bl *r = find(b, oblock);
    TC_ASSERT_ALWAYS(r != NULL && r->locked && r->refs > 0);
    r->refs--;
    r->holder_on_origin = false;
    struct block_waiter *w = r->lock_head;
    if (w) {
        r->lock_head = w->next;
        if (r->lock_head == NULL)
            r->lock_tail = &r->lock_head;
        w->fn(w);       /* the lock passes to w: still locked */
        return;
    }
    r->locked = false;
    put(b, r);
}

void block_holder_on_origin(struct blocklocks *b, uint64_t oblock)
{
    struct bl *r = find(b, oblock);
    TC_ASSERT_ALWAYS(r != NULL && r->locked);
    r->holder_on_origin = true;
}

bool block_next_after_origin(struct blocklocks *b, uint64_t oblock,
                             const struct block_waiter *w)
{
    struct bl *r = find(b, oblock);
    return r && r->locked && r->holder_on_origin && r->lock_head == w;
}

bool block_is_locked(struct blocklocks *b, uint64_t oblock)
{
    struct bl *r = find(b, oblock);
    return r && r->locked;
}

uint64_t block_gen(struct blocklocks *b, uint64_t oblock)
{
    struct bl *r = find(b, oblock);
    return r ? r->gen : 0;
}

void block_gen_hold(struct blocklocks *b, uint64_t oblock)
{
    get(b, oblock)->refs++;
}

void block_gen_release(struct blocklocks *b, uint64_t oblock)
{
    struct bl *r = find(b, oblock);
    TC_ASSERT_ALWAYS(r != NULL && r->refs > 0);
    r->refs--;
    put(b, r);
}

uint64_t block_fill_begin(struct blocklocks *b, uint64_t oblock)
{
    struct bl *r = get(b, oblock);
    r->refs++;
    r->fills++;
    r->fill_gen = r->gen;
    return r->gen;
}

void block_fill_end(struct blocklocks *b, uint64_t oblock)
{
    struct bl *r = find(b, oblock);
    TC_ASSERT_ALWAYS(r != NULL && r->fills > 0 && r->refs > 0);
    r->fills--;
    r->refs--;
    /* Every waiter goes, whichever fill ended: each looks again (another
     * fill still under way is waited for again, if it is not stale). */
    struct block_waiter *list = r->fill_waiters;
    r->fill_waiters = NULL;
    put(b, r);
    while (list) {
        struct block_waiter *w = list;
        list = w->next;
        w->fn(w);
    }
}

bool block_wait_fill(struct blocklocks *b, uint64_t oblock, struct block_waiter *w)
{
    struct bl *r = find(b, oblock);
    if (r == NULL || r->fills == 0 || r->fill_gen != r->gen)
        return true;
    w->next = r->fill_waiters;
    r->fill_waiters = w;
    return false;
}

bool block_filling(struct blocklocks *b, uint64_t oblock)
{
    struct bl *r = find(b, oblock);
    return r && r->fills > 0 && r->fill_gen == r->gen;
}

void block_prefetch(const struct blocklocks *b, uint64_t oblock)
{
    __builtin_prefetch(&b->buckets[bucket(oblock)]);
}

void block_gen_bump(struct blocklocks *b, uint64_t oblock)
{
    struct bl *r = find(b, oblock);
    if (r)
        r->gen = ++b->gen_counter;
}

void block_wb_begin(struct blocklocks *b, uint64_t oblock)
{
    struct bl *r = get(b, oblock);
    r->refs++;
    r->wb++;
}

void block_wb_end(struct blocklocks *b, uint64_t oblock)
{
    struct bl *r = find(b, oblock);
    TC_ASSERT_ALWAYS(r != NULL && r->wb > 0 && r->refs >= r->wb);
    r->wb--;
    r->refs--;
    struct block_waiter *list = NULL;
    if (r->wb == 0) {
        list = r->wb_waiters;
        r->wb_waiters = NULL;
    }
    put(b, r);
    while (list) {
        struct block_waiter *w = list;
        list = w->next;
        w->fn(w);
    }
}

bool block_wait_wb(struct blocklocks *b, uint64_t oblock, struct block_waiter *w)
{
    struct bl *r = find(b, oblock);
    if (r == NULL || r->wb == 0)
        return true;
    w->next = r->wb_waiters;
    r->wb_waiters = w;
    return false;
}

static void bump_range(struct blocklocks *b, uint64_t b0, uint64_t b1)
{
    if (b1 - b0 <= 64) {
        for (uint64_t x = b0; x < b1; x++)
            block_gen_bump(b, x);
        return;
    }
    for (struct bl *r = b->all; r; r = r->all_next)
        if (r->oblock >= b0 && r->oblock < b1)
            r->gen = ++b->gen_counter;
}

void owrite_begin(struct blocklocks *b, struct owrite *o, uint64_t b0, uint64_t b1)
{
    o->b0 = b0;
    o->b1 = b1;
    o->prev = NULL;
    o->next = b->owrites;
    if (b->owrites)
        b->owrites->prev = o;
    b->owrites = o;
    bump_range(b, b0, b1);
}

void owrite_end(struct blocklocks *b, struct owrite *o)
{
    if (o->prev)
        o->prev->next = o->next;
    else
        b->owrites = o->next;
    if (o->next)
        o->next->prev = o->prev;
    bump_range(b, o->b0, o->b1);
}

bool owrite_overlaps(struct blocklocks *b, uint64_t oblock)
{
    for (struct owrite *o = b->owrites; o; o = o->next)
        if (oblock >= o->b0 && oblock < o->b1)
            return true;
    return false;
}

bool block_wait_wb_free(struct blocklocks *b, uint64_t oblock)
{
    struct bl *r = find(b, oblock);
    return r == NULL || r->wb == 0;
}
