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
 *    written back is on the origin, so the older data cannot land last;
 *  - whole-block fills in flight (readpath.c): a read miss that would
 *    fill a block another read is filling already, from data read at the
 *    block's present generation, leaves the fill to that one; a client
 *    read that misses the block waits for that fill's end, then looks
 *    again (block_wait_fill()).
 *
 * Writes that go to the origin for blocks that are not cached take no
 * lock: they register their range as an origin write in flight instead
 * (any size, one record).  A miss that starts while such a write overlaps
 * its block does not fill the cache, and the generation of every block
 * with a fill in flight in the range is bumped when the write starts and
 * when it ends, so no data read before or during the write is cached.
 *
 * Invariant 13 (numbered with the engine's, engine/engine.h): a record's
 * refs count the lock's holder and each of its waiters, each
 * block_gen_hold() and block_fill_begin(), and each writeback in flight; the record is freed when
 * they reach zero (nothing locked, waiting or written back then), and a
 * block without a record has generation 0.
 *
 * Invariant 14: generations come from one counter of the whole table, so
 * a block's new record never repeats a generation seen before.  Waiters
 * for the lock are woken in arrival order, one per unlock (the lock passes
 * to it); waiters for writeback all at once, when the last writeback of
 * the block ends; waiters for a fill all at once, when any fill of the
 * block ends (so in every path a fill ends by: data, error, drop, stop).
 */
#ifndef TC_ENGINE_BLOCKLOCK_H
#define TC_ENGINE_BLOCKLOCK_H

#include <stdbool.h>
#include <stdint.h>

struct blocklocks;

struct block_waiter {
    void (*fn)(struct block_waiter *w);
    struct block_waiter *next;
    int err;                    /* writeback_block(): its writeback's result */
};
/* The records of one cache (none at first), and their release. */
struct blocklocks *blocklocks_new(void);
void blocklocks_free(struct blocklocks *b);
/* Exclusive lock on one block; true if taken at once, else w->fn later. */
bool block_lock(struct blocklocks *b, uint64_t oblock, struct block_waiter *w);
void block_unlock(struct blocklocks *b, uint64_t oblock);
bool block_is_locked(struct blocklocks *b, uint64_t oblock);
/* The lock's holder has submitted its origin write (writepath.c); it
 * holds the lock only until that write ends.  Forgotten when the lock
 * passes on. */
void block_holder_on_origin(struct blocklocks *b, uint64_t oblock);
/* w waits for the lock and is the next to get it, from a holder whose
 * origin write is submitted. */
bool block_next_after_origin(struct blocklocks *b, uint64_t oblock,
                             const struct block_waiter *w);
/* The block's generation: changes with every write, trim or invalidation,
 * so a fill of data read earlier can tell that it went stale. */
uint64_t block_gen(struct blocklocks *b, uint64_t oblock);
void block_gen_hold(struct blocklocks *b, uint64_t oblock);     /* keep the counter alive */
void block_gen_release(struct blocklocks *b, uint64_t oblock);
void block_gen_bump(struct blocklocks *b, uint64_t oblock);
/* A fill of the whole block is under way, from data read from now on:
 * block_gen_hold() and a count of such fills, until block_fill_end()
 * (which releases both).  Returns the block's generation now, the fill's
 * to compare with block_gen() when it lands. */
uint64_t block_fill_begin(struct blocklocks *b, uint64_t oblock);
void block_fill_end(struct blocklocks *b, uint64_t oblock);
/* A whole-block fill is under way whose data is not stale yet (read at the
 * block's present generation): another fill of the block would add
 * nothing but an origin read. */
bool block_filling(struct blocklocks *b, uint64_t oblock);
/* w waits for the end of a fill block_filling() reports: false if it
 * waits (w->fn runs at the next block_fill_end() of the block, every
 * waiter then, whatever the fill's outcome), true if there is none.  The
 * waiter holds no reference: the fill keeps the record alive until it
 * ends, and its end takes every waiter off. */
bool block_wait_fill(struct blocklocks *b, uint64_t oblock, struct block_waiter *w);
/* A hint: a look-up of oblock's record follows soon (starts loading its
 * bucket).  Changes nothing. */
void block_prefetch(const struct blocklocks *b, uint64_t oblock);
/* A client write going to the origin for blocks not in the cache:
 * registered for its duration so that no fill caches older data. */
struct owrite {
    uint64_t b0, b1;            /* blocks [b0, b1) */
    struct owrite *prev, *next;
};
void owrite_begin(struct blocklocks *b, struct owrite *o, uint64_t b0, uint64_t b1);
void owrite_end(struct blocklocks *b, struct owrite *o);
bool owrite_overlaps(struct blocklocks *b, uint64_t oblock);
/* Writeback in flight on a block: origin writes from clients wait. */
void block_wb_begin(struct blocklocks *b, uint64_t oblock);
void block_wb_end(struct blocklocks *b, uint64_t oblock);
bool block_wait_wb(struct blocklocks *b, uint64_t oblock, struct block_waiter *w);
bool block_wait_wb_free(struct blocklocks *b, uint64_t oblock);  /* no writeback in flight */

#endif
