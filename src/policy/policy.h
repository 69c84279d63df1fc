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
 *   default   all while space is free; then   blocks read since written
 *             only blocks seen recently        (frequency, decaying);
 *             (long history of hashes)         written, never read: out
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

struct cache;
struct tc_json;

struct policy_ops {
    const char *name;
    const char *summary;
    void *(*create)(struct cache *c, uint64_t cache_blocks);
    void (*destroy)(void *state);
    /* A read missed oblock: cache what was read?  free_space: the cache
     * has room without reclaiming anything. */
    bool (*admit)(void *state, struct cache *c, uint64_t oblock, bool free_space);
    /* Optional.  A read stream past the sequential cutoff missed oblock, a
     * block not cached: is the stream hot (the block was seen before), so
     * that the miss goes to admit() like any other?  Else it bypasses the
     * cache; the policy may remember the block, so that the stream's next
     * pass is hot.  Without it, streams past the cutoff always bypass. */
    bool (*stream_hot)(void *state, struct cache *c, uint64_t oblock);
    /* A write-through write to a block that is not cached: cache it too? */
    bool (*admit_write)(void *state, struct cache *c, uint64_t oblock, bool free_space);
    /* A client read found entry id (all of what it read, or part). */
    void (*hit)(void *state, struct cache *c, uint32_t id);
    /* A new entry: from_miss, filled after a read (or found by recovery);
     * else made by a client write. */
    void (*inserted)(void *state, struct cache *c, uint32_t id, bool from_miss);
    /* The cleaner found entry id in the group it reclaims: keep it? */
    bool (*keep)(void *state, struct cache *c, uint32_t id);
    /* The entry leaves the cache because the cleaner dropped it. */
    void (*evicted)(void *state, struct cache *c, uint64_t oblock);
    uint64_t (*memory)(void *state);
    /* Optional: the policy's own figures, into the status object. */
    void (*status)(void *state, struct tc_json *j);
};

struct policy {
    const struct policy_ops *ops;
    void *state;
};

const struct policy_ops *policy_find(const char *name);
/* "default, lru, fifo, s3fifo" for messages. */
const char *policy_names(void);

/* A FIFO history of recently seen block numbers (the "ghost" of S3-FIFO
 * and the doorkeeper of the default policy), kept as 32-bit fingerprints:
 * a false match only admits a block early, which is harmless. */
struct ghost;
struct ghost *ghost_create(uint64_t capacity);
void ghost_destroy(struct ghost *g);
bool ghost_contains(const struct ghost *g, uint64_t oblock);
void ghost_add(struct ghost *g, uint64_t oblock);
void ghost_remove(struct ghost *g, uint64_t oblock);
uint64_t ghost_memory(const struct ghost *g);

/* The default policy's history of recently seen blocks: two rotating Bloom
 * filters remembering the last capacity/2 to capacity blocks added, about
 * 1.25 bytes each; no removal (history.c). */
struct history;
struct history *history_create(uint64_t capacity);
void history_destroy(struct history *h);
bool history_contains(const struct history *h, uint64_t oblock);
void history_add(struct history *h, uint64_t oblock);
uint64_t history_memory(const struct history *h);

#endif
