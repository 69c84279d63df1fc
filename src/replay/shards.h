/*
 * SHARDS: an LRU miss-ratio curve from a sample of a stream's blocks
 * (shards.c explains the method).  One instance follows one stream.
 */
#ifndef TC_REPLAY_SHARDS_H
#define TC_REPLAY_SHARDS_H

#include <stddef.h>
#include <stdint.h>

struct shards;

/* The sampling hash (splitmix64's finalizer), unrelated to the block
 * map's, so the sampled blocks spread over the map's slots.  A block is
 * sampled at rate r when its hash is below r * 2^64; miniature replays
 * (replay.h, struct replay_sample) sample by the same hash. */
static inline uint64_t shards_hash(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* rate in (0, 1] (1: exact); block_bytes a power of two. */
struct shards *shards_new(double rate, uint64_t block_bytes);
void shards_free(struct shards *sh);
/* One request (op: enum tc_op); other operations than read, write,
 * write-zeroes and trim are ignored. */
void shards_request(struct shards *sh, unsigned op, uint64_t offset, uint64_t length);
/* miss[i]: the read miss ratio (per block read) of an LRU cache of
 * sizes[i] bytes, over the reads since the start or the last
 * shards_new_window(). */
void shards_curve(const struct shards *sh, const uint64_t *sizes, size_t nsizes, double *miss);
/* Start counting reads again (the stack of recent blocks is kept, so the
 * distances of the new window's reads stay right). */
void shards_new_window(struct shards *sh);
uint64_t shards_block_reads(const struct shards *sh);
uint64_t shards_sampled_reads(const struct shards *sh);
uint64_t shards_memory(const struct shards *sh);

#endif
