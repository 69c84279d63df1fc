/*
 * Per-block coordination for operations in flight.
 *
 * Only blocks with something in flight have a record here (a small hash
 * table); a record lives while anyone holds it:
 *
 *  - the exclusive lock: the steps of a write, trim or invalidation of one
 *    block run one at a time (read the old sectors, append the merged
 *    version, update the index), waiters in arrival order;
 *  - the generation: bumped by every change of the block's contents, so
 *    that a fill (data read from the origin after a miss) can tell that a
 *    write came in between and must not install stale data;
 *  - writeback in flight: a client write that goes to the origin directly
 *    (write-through, write-around, trim) waits until dirty data being
 *    written back is on the origin, so the older data cannot land last.
 *
 * Writes that go to the origin for blocks that are not cached take no
 * lock: they register their range as an origin write in flight instead
 * (any size, one record).  A miss that starts while such a write overlaps
 * its block does not fill the cache, and the generation of every block
 * with a fill in flight in the range is bumped when the write starts and
 * when it ends, so no data read before or during the write is cached.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/cache.h"
#include "util/misc.h"

#define NBUCKETS 16384u

struct bl {
    uint64_t oblock;
    struct bl *next;
    struct bl *all_prev, *all_next;     /* every record, for range bumps */
    unsigned refs;
    uint64_t gen;
    bool locked;
    struct block_waiter *lock_head, **lock_tail;
    unsigned wb;
    struct block_waiter *wb_waiters;
};

struct blocklocks {
    struct bl *buckets[NBUCKETS];
    struct bl *all;
    struct owrite *owrites;
    uint64_t gen_counter;
    uint64_t records;
};

int blocklocks_init(struct cache *c)
{
    c->locks = tc_xcalloc(1, sizeof *c->locks);
    return 0;
}

void blocklocks_fini(struct cache *c)
{
    struct blocklocks *b = c->locks;
    if (b == NULL)
        return;
    for (unsigned i = 0; i < NBUCKETS; i++) {
        while (b->buckets[i]) {
            struct bl *r = b->buckets[i];
            b->buckets[i] = r->next;
            free(r);
        }
    }
    free(b);
    c->locks = NULL;
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
    r = tc_xcalloc(1, sizeof *r);
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

static void put(struct blocklocks *b, struct bl *r)
{
    if (r->refs > 0)
        return;
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
    free(r);
}

bool block_lock(struct cache *c, uint64_t oblock, struct block_waiter *w)
{
    struct bl *r = get(c->locks, oblock);
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

void block_unlock(struct cache *c, uint64_t oblock)
{
    struct bl *r = find(c->locks, oblock);
    if (r == NULL || !r->locked)
        abort();
    r->refs--;
    struct block_waiter *w = r->lock_head;
    if (w) {
        r->lock_head = w->next;
        if (r->lock_head == NULL)
            r->lock_tail = &r->lock_head;
        w->fn(w);       /* the lock passes to w: still locked */
        return;
    }
    r->locked = false;
    put(c->locks, r);
}

bool block_is_locked(struct cache *c, uint64_t oblock)
{
    struct bl *r = find(c->locks, oblock);
    return r && r->locked;
}

uint64_t block_gen(struct cache *c, uint64_t oblock)
{
    struct bl *r = find(c->locks, oblock);
    return r ? r->gen : 0;
}

void block_gen_hold(struct cache *c, uint64_t oblock)
{
    get(c->locks, oblock)->refs++;
}

void block_gen_release(struct cache *c, uint64_t oblock)
{
    struct bl *r = find(c->locks, oblock);
    if (r == NULL)
        abort();
    r->refs--;
    put(c->locks, r);
}

void block_gen_bump(struct cache *c, uint64_t oblock)
{
    struct bl *r = find(c->locks, oblock);
    if (r)
        r->gen = ++c->locks->gen_counter;
}

void block_wb_begin(struct cache *c, uint64_t oblock)
{
    struct bl *r = get(c->locks, oblock);
    r->refs++;
    r->wb++;
}

void block_wb_end(struct cache *c, uint64_t oblock)
{
    struct bl *r = find(c->locks, oblock);
    if (r == NULL || r->wb == 0)
        abort();
    r->wb--;
    r->refs--;
    struct block_waiter *list = NULL;
    if (r->wb == 0) {
        list = r->wb_waiters;
        r->wb_waiters = NULL;
    }
    put(c->locks, r);
    while (list) {
        struct block_waiter *w = list;
        list = w->next;
        w->fn(w);
    }
}

bool block_wait_wb(struct cache *c, uint64_t oblock, struct block_waiter *w)
{
    struct bl *r = find(c->locks, oblock);
    if (r == NULL || r->wb == 0)
        return true;
    w->next = r->wb_waiters;
    r->wb_waiters = w;
    return false;
}

static void bump_range(struct cache *c, uint64_t b0, uint64_t b1)
{
    struct blocklocks *b = c->locks;
    if (b1 - b0 <= 64) {
        for (uint64_t x = b0; x < b1; x++)
            block_gen_bump(c, x);
        return;
    }
    for (struct bl *r = b->all; r; r = r->all_next)
        if (r->oblock >= b0 && r->oblock < b1)
            r->gen = ++b->gen_counter;
}

void owrite_begin(struct cache *c, struct owrite *o, uint64_t b0, uint64_t b1)
{
    struct blocklocks *b = c->locks;
    o->b0 = b0;
    o->b1 = b1;
    o->prev = NULL;
    o->next = b->owrites;
    if (b->owrites)
        b->owrites->prev = o;
    b->owrites = o;
    bump_range(c, b0, b1);
}

void owrite_end(struct cache *c, struct owrite *o)
{
    struct blocklocks *b = c->locks;
    if (o->prev)
        o->prev->next = o->next;
    else
        b->owrites = o->next;
    if (o->next)
        o->next->prev = o->prev;
    bump_range(c, o->b0, o->b1);
}

bool owrite_overlaps(struct cache *c, uint64_t oblock)
{
    for (struct owrite *o = c->locks->owrites; o; o = o->next)
        if (oblock >= o->b0 && oblock < o->b1)
            return true;
    return false;
}

bool block_wait_wb_free(struct cache *c, uint64_t oblock)
{
    struct bl *r = find(c->locks, oblock);
    return r == NULL || r->wb == 0;
}
