/*
 * Range locks over byte offsets of the volume.
 *
 * A write that is not aligned to the 4 KiB sector must read the sectors it
 * partly covers, merge, and write them back (read-modify-write).  Two
 * such writes to one sector, or an aligned write landing between the read
 * and the write-back, would lose data.  So every write holds a shared lock
 * on its range while in flight, and a read-modify-write holds an exclusive
 * lock on the sectors it merges.  Trims and write-zeroes hold exclusive
 * ones (see engine_submit_locked()).  Shared locks never wait for
 * each other; an exclusive lock waits for every overlapping holder.
 *
 * Waiters are served first come, first served: a shared request that
 * overlaps a waiting exclusive one queues behind it, so read-modify-writes
 * are not starved by a stream of aligned writes.
 *
 * With no read-modify-write in flight, acquiring and releasing are O(1).
 *
 * Invariant 15 (numbered with the engine's, engine/engine.h): ranges are
 * not empty; no two holders conflict (overlap with either exclusive);
 * exclusive_holders counts the exclusive holders; only a holder releases.
 *
 * Invariant 16: a waiter is granted only once it conflicts with no holder
 * and no waiter ahead of it.
 */
#ifndef TC_ENGINE_RANGELOCK_H
#define TC_ENGINE_RANGELOCK_H

#include <stdbool.h>
#include <stdint.h>

struct rl_entry {
    uint64_t start, end;            /* [start, end) */
    bool exclusive;
    bool granted;
    void (*granted_cb)(struct rl_entry *e);     /* for entries that waited */
    struct rl_entry *prev, *next;
    struct rl_entry *wake_next;     /* private: granted in one release */
};

struct rangelock {
    struct rl_entry *holders;       /* doubly linked, unordered */
    struct rl_entry *waiters, *waiters_tail;    /* FIFO */
    unsigned exclusive_holders;
};

/* Returns true if granted at once (granted_cb is then not called);
 * otherwise granted_cb runs when the lock is granted. */
bool rl_acquire(struct rangelock *rl, struct rl_entry *e);
void rl_release(struct rangelock *rl, struct rl_entry *e);

#endif
