/*
 * Cache policies: which misses are admitted to the cache, and which blocks
 * the cleaner keeps when it reclaims the oldest group of segments.
 *
 * The cache is a log, reclaimed oldest first, so eviction order is the
 * log's order; a policy shapes it by keeping blocks it calls hot (the
 * cleaner appends them again at the head: reinsertion) and by keeping
 * blocks out in the first place (admission).  A policy is a table of
 * functions over its private state; per-block state lives in the index
 * entry (one byte, the hint, whose bits each policy defines for itself),
 * so policies add no memory per cached block beyond their history of
 * recently seen blocks.
 *
 *   policy    admission                       reinsertion by the cleaner
 *   default   all while space is free; then   blocks read within a window
 *             only blocks seen recently        of reads: the longest if read
 *             (long history of hashes)         again, adaptive if read once;
 *                                             written, never read: out
 *   lru       all                             blocks hit since last written
 *                                             (second chance: LRU order)
 *   fifo      all                             none
 *   s3fifo    all; a block back from the      probation blocks used again;
 *             ghost skips probation           main blocks by frequency
 */
#ifndef TC_POLICY_POLICY_H
#define TC_POLICY_POLICY_H

#include <stdbool.h>
#include <stdint.h>

struct tc_json;

/*
 * The boundary between the engine and a policy.
 *
 * A policy never sees the cache.  It is told origin block numbers and is
 * given, for a cached block, a pointer to that block's hint: one byte the
 * index keeps in the block's entry for the policy alone.  The hint is 0
 * when the entry is made and the engine never reads or writes it, except
 * that a switch of policy clears every hint to 0.  Its bits mean what
 * the policy in use says they mean; the pointer is valid only for the
 * duration of the call (the index may move its entries afterwards).
 * Everything else a policy remembers -- histories of blocks seen, its
 * figures -- is in its own state, made by create().
 *
 * Rules for every operation:
 *  - it is called on the volume's reactor thread, one call at a time, and
 *    never while another operation of the same policy is running;
 *  - it must not block: no I/O, no locks, no sleeping; it runs inside
 *    the data path of a client request or of the cleaner;
 *  - it must not fail: it returns a decision, never an error.  Allocation
 *    failure aborts the daemon (tc_x* allocators), as everywhere in the
 *    engine, so create() returns usable state or does not return;
 *  - it must not call back into the engine (it has no way to).
 *
 * Any operation but name and summary may be NULL; the default each NULL
 * means is given with the operation, and is what the wrappers below do.
 */

/* What the engine tells a policy about the cache when it makes one. */
struct policy_params {
    uint64_t cache_blocks;      /* blocks the cache holds when full (> 0) */
};

struct policy_ops {
    const char *name;           /* for --policy and status */
    const char *summary;        /* one line, for --help */

    /* Make the policy's state for a cache of params->cache_blocks blocks.
     * Called at attach, and at a switch of policy, before any other
     * operation.  NULL: the policy has no state (NULL is passed). */
    void *(*create)(const struct policy_params *params);
    /* Free the state.  Called at close, and at a switch away from the
     * policy; no other operation follows.  NULL: nothing to free. */
    void (*destroy)(void *state);

    /* A client read missed oblock, a block not cached at all: cache what
     * is read from the origin?  free_space: the cache has room without
     * reclaiming anything.  Called from the read path, once per block of
     * the request, after stream_hot() allowed it for a sequential stream.
     * Readahead asks too; an explicit prefetch (cache_prefetch) does not,
     * nor does a miss on a block partly cached (it takes the rest anyway).
     * NULL: admit every miss. */
    bool (*admit)(void *state, uint64_t oblock, bool free_space);
    /* A write-through client write to oblock, a block not cached: cache
     * the written data too (else the write goes around the cache)?
     * Called from the write path; free_space as for admit().  Not called
     * in writeback mode (every write is cached) nor writearound.  NULL:
     * decided as admit() decides a read miss. */
    bool (*admit_write)(void *state, uint64_t oblock, bool free_space);
    /* A read stream past the sequential cutoff missed oblock, a block not
     * cached: is the stream hot (the block was seen before), so that the
     * miss goes on to admit() like any other?  Else it bypasses the cache;
     * the policy may remember the block, so that the stream's next pass is
     * hot.  Called from the read path.  NULL: streams past the cutoff
     * always bypass. */
    bool (*stream_hot)(void *state, uint64_t oblock);
    /* A hint that admit(), stream_hot() or evicted() of oblock may follow
     * soon (the read path gives every block of a request first, the
     * cleaner the blocks it drops a few ahead): start loading what they
     * will look at.  Must change nothing a decision depends
     * on.  NULL: nothing. */
    void (*prefetch)(void *state, uint64_t oblock);

    /* A read found oblock cached: all it read (a hit), or part of it (the
     * rest is read from the origin).  Called from the read path, for
     * client reads and readahead; not in passthrough.  NULL: nothing is
     * recorded. */
    void (*hit)(void *state, uint64_t oblock, uint8_t *hint);
    /* A new entry for oblock, its hint 0.  from_miss is false when a
     * client write made it, true otherwise (a fill after a read miss or
     * readahead, recovery from the log).  Called when the entry is made
     * (map_add_fragment), once per entry; later writes to a cached block
     * do not call it.  NULL: the hint stays 0. */
    void (*inserted)(void *state, uint64_t oblock, uint8_t *hint, bool from_miss);
    /* The cleaner reclaims the oldest group of segments and found clean
     * block oblock in it: keep it (the cleaner appends it again at the
     * head of the log) or drop it?  Called from the cleaner for each
     * fragment it reaches that is current, intact and clean (dirty data is
     * written back first and asked about then; data still dirty is kept
     * without asking), so possibly more than once for one block in one
     * group.  A kept block may still be dropped if it cannot be copied.
     * NULL: drop every block (FIFO order). */
    bool (*keep)(void *state, uint64_t oblock, uint8_t *hint);
    /* oblock left the cache: the cleaner dropped its last sectors.  Called
     * from the cleaner after the drop is durable; not for blocks trimmed
     * or overwritten by clients.  NULL: nothing is recorded. */
    void (*evicted)(void *state, uint64_t oblock);

    /* The cache holds params->cache_blocks blocks when full from now on:
     * a device left service (engine/failure.c), and what is sized by the
     * capacity follows the devices still in service.  What the policy
     * remembers stays.  NULL: nothing is sized by the capacity (or it
     * stays as create() made it). */
    void (*resize)(void *state, const struct policy_params *params);

    /* Bytes of memory the state takes, for status.  NULL: 0. */
    uint64_t (*memory)(const void *state);
    /* The policy's own figures, into the status object.  NULL: none. */
    void (*status)(const void *state, struct tc_json *j);
};

/*
 * A policy in use: its operations, its state and what it was made for.
 * The engine keeps one per cache and calls the policy only through the
 * functions below, which supply the NULL defaults.
 */
struct policy {
    const struct policy_ops *ops;
    void *state;
    struct policy_params params;
};

/* The policy called name, or NULL. */
const struct policy_ops *policy_find(const char *name);
/* "default, lru, fifo, s3fifo" for messages. */
const char *policy_names(void);

/* Make p the policy ops for params: at attach. */
void policy_open(struct policy *p, const struct policy_ops *ops,
                 const struct policy_params *params);
/* Free p's state: at close. */
void policy_close(struct policy *p);
/* Switch p to the policy ops, with the same params: the old state is
 * destroyed and the new one made, knowing nothing.  The caller must clear
 * every hint to 0 before the next call into p (the old policy's bits mean
 * nothing to the new one); cache_switch_policy() does both. */
void policy_switch(struct policy *p, const struct policy_ops *ops);

/* The cache holds cache_blocks blocks when full from now on (a device
 * left service): p's params follow (a later switch makes the new policy
 * for that size), and the policy resizes what it derives from them. */
void policy_resize(struct policy *p, uint64_t cache_blocks);

bool policy_admit(struct policy *p, uint64_t oblock, bool free_space);
bool policy_admit_write(struct policy *p, uint64_t oblock, bool free_space);
bool policy_stream_hot(struct policy *p, uint64_t oblock);
void policy_prefetch(struct policy *p, uint64_t oblock);
void policy_hit(struct policy *p, uint64_t oblock, uint8_t *hint);
void policy_inserted(struct policy *p, uint64_t oblock, uint8_t *hint, bool from_miss);
bool policy_keep(struct policy *p, uint64_t oblock, uint8_t *hint);
void policy_evicted(struct policy *p, uint64_t oblock);
uint64_t policy_memory(const struct policy *p);
/* The policy's figures as the object "policy_figures", if it has any. */
void policy_status(const struct policy *p, struct tc_json *j);

/* A FIFO history of recently seen block numbers (the "ghost" of S3-FIFO
 * and the doorkeeper of the default policy), kept as 32-bit fingerprints:
 * a false match only admits a block early, which is harmless. */
struct ghost;
struct ghost *ghost_create(uint64_t capacity);
void ghost_destroy(struct ghost *g);
bool ghost_contains(const struct ghost *g, uint64_t oblock);
void ghost_add(struct ghost *g, uint64_t oblock);
void ghost_remove(struct ghost *g, uint64_t oblock);
/* Remember capacity blocks from now on, the newest kept (ghost.c). */
void ghost_resize(struct ghost *g, uint64_t capacity);
uint64_t ghost_capacity(const struct ghost *g);
uint64_t ghost_memory(const struct ghost *g);

/* The default policy's history of recently seen blocks: two rotating Bloom
 * filters remembering the last capacity/2 to capacity blocks added, about
 * 1.25 bytes each; no removal (history.c). */
struct history;
struct history *history_create(uint64_t capacity);
void history_destroy(struct history *h);
bool history_contains(const struct history *h, uint64_t oblock);
void history_add(struct history *h, uint64_t oblock);
/* The same with the block's hashes computed once (they depend on the block
 * only, so one key serves every history): history_has() is
 * history_contains(); history_add_absent() is history_add() of a block
 * history_has() just found absent, with no change to h in between. */
struct history_key { uint64_t a, b; };
struct history_key history_key(uint64_t oblock);
bool history_has(const struct history *h, struct history_key k);
void history_add_absent(struct history *h, struct history_key k);
/* Starts loading the words history_has(h, k) looks at first. */
void history_prefetch(const struct history *h, struct history_key k);
uint64_t history_memory(const struct history *h);

#endif
