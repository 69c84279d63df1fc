/*
 * The default policy: keep what is read again; keep out what is seen once,
 * and what is written but never read.
 *
 * Admission: while the cache has free space every miss is admitted (free
 * space costs nothing to fill).  Once the cache is full, a read miss or a
 * write-through write to an uncached block is admitted only if the block
 * is in the history -- blocks seen recently: refused misses and writes,
 * and blocks the cleaner dropped.  The history is long (four times as many
 * blocks as the cache holds, as hashes in Bloom filters, about 5 bytes per
 * cache block): data written once and read again after the cache turned
 * over -- a git pack written by a clone, read by every checkout while each
 * checkout writes more than the cache holds -- is recognised on its first
 * read and admitted then; a scan of never-repeated blocks writes nothing.
 *
 * Eviction (the cleaner reaching a block in the oldest group):
 *  - a block a client wrote and nobody has read since it was inserted
 *    (probation, as in S3-FIFO) is dropped -- written back first
 *    if dirty, by the cleaner's rules -- and goes to the history, so a
 *    later read admits it at once.  Write-once data never pushes out data
 *    that is read: it gets no second pass of the log.
 *  - any other block is kept while its frequency (raised by every read,
 *    up to 3; 1 from the start for a block admitted from the history) is
 *    above zero, lowering it by one each pass: a block survives as many
 *    passes of the log as it earned by reads.
 *
 * Sequential streams past the cutoff (stream.c) bypass the cache only while
 * they are cold: their blocks go to the history, and a stream over blocks
 * in the history (a second pass) is admitted like any miss.
 *
 * Write-through writes to uncached blocks follow the read rule: refused
 * once the cache is full unless the block is in the history.  Admitting
 * them all (on probation) was measured with a 16 MiB hot set read while
 * 256 MiB were written once through a 64 MiB cache: the same hot-set hit
 * ratio (1.00), but 67 segments of 1 MiB reclaimed instead of 2 -- 210 MiB
 * more written to flash for data nobody read.  The cost of refusing: a block
 * written and then read misses once, and is admitted from the history.
 *
 * Writes never raise the frequency: a block read again is worth more than
 * a block written again.
 */
#include <stdlib.h>

#include "policy/policy.h"
#include "util/json.h"
#include "util/misc.h"

/* History length in cache blocks: see above. */
#define HISTORY_FACTOR 4

/* The block's hint, the byte the index keeps for the policy:
 *   bits 0-1  passes of the log the block has earned by reads (0..3)
 *   bit 2     written by a client and not read since it was inserted */
#define HINT_FREQ 0x3u
#define HINT_WRITTEN_UNREAD (1u << 2)

struct dflt {
    struct history *seen;
    uint64_t admitted_free, admitted_history;
    uint64_t refused_reads, refused_writes;
    uint64_t evicted_written, evicted_cold, kept;
    uint64_t stream_hot;
};

static void *create(const struct policy_params *params)
{
    struct dflt *p = tc_xcalloc(1, sizeof *p);
    p->seen = history_create(HISTORY_FACTOR * params->cache_blocks + 64);
    return p;
}

static void destroy(void *s)
{
    struct dflt *p = s;
    history_destroy(p->seen);
    free(p);
}

static bool decide(struct dflt *p, uint64_t oblock, bool free_space, uint64_t *refused)
{
    if (free_space) {
        p->admitted_free++;
        return true;
    }
    if (history_contains(p->seen, oblock)) {
        p->admitted_history++;
        return true;
    }
    history_add(p->seen, oblock);
    (*refused)++;
    return false;
}

static bool admit(void *s, uint64_t oblock, bool free_space)
{
    struct dflt *p = s;
    return decide(p, oblock, free_space, &p->refused_reads);
}

static bool admit_write(void *s, uint64_t oblock, bool free_space)
{
    struct dflt *p = s;
    return decide(p, oblock, free_space, &p->refused_writes);
}

/* A cold stream is a scan: it must not flush the hot set.  A stream whose
 * blocks were seen before (read, written or dropped within the history) is
 * read again, and caching it is what a cache is for. */
static bool stream_hot(void *s, uint64_t oblock)
{
    struct dflt *p = s;
    if (history_contains(p->seen, oblock)) {
        p->stream_hot++;
        return true;
    }
    history_add(p->seen, oblock);
    return false;
}

static void hit(void *s, uint64_t oblock, uint8_t *hint)
{
    if ((*hint & HINT_FREQ) < 3)
        (*hint)++;
    *hint &= (uint8_t)~HINT_WRITTEN_UNREAD;
}

static void inserted(void *s, uint64_t oblock, uint8_t *hint, bool from_miss)
{
    struct dflt *p = s;
    /* A read of a block in the history is its second use at least: it
     * starts with one pass of credit, as if the first use had been a hit,
     * or a block re-read once per pass of the log would be dropped before
     * each re-read. */
    *hint = from_miss && history_contains(p->seen, oblock) ? 1 : 0;
    if (!from_miss)
        *hint |= HINT_WRITTEN_UNREAD;
}

static bool keep(void *s, uint64_t oblock, uint8_t *hint)
{
    struct dflt *p = s;
    if (*hint & HINT_WRITTEN_UNREAD) {
        p->evicted_written++;
        return false;
    }
    if ((*hint & HINT_FREQ) == 0) {
        p->evicted_cold++;
        return false;
    }
    (*hint)--;
    p->kept++;
    return true;
}

static void evicted(void *s, uint64_t oblock)
{
    struct dflt *p = s;
    history_add(p->seen, oblock);
}

static uint64_t memory(const void *s)
{
    const struct dflt *p = s;
    return sizeof *p + history_memory(p->seen);
}

static void status(const void *s, struct tc_json *j)
{
    const struct dflt *p = s;
    json_uint(j, "admitted_free_space", p->admitted_free);
    json_uint(j, "admitted_from_history", p->admitted_history);
    json_uint(j, "refused_reads", p->refused_reads);
    json_uint(j, "refused_writes", p->refused_writes);
    json_uint(j, "evicted_written_unread", p->evicted_written);
    json_uint(j, "evicted_cold", p->evicted_cold);
    json_uint(j, "kept_by_frequency", p->kept);
    json_uint(j, "stream_blocks_hot", p->stream_hot);
}

const struct policy_ops policy_default = {
    .name = "default",
    .summary = "admit on second sight once full (long history); written-once data out first",
    .create = create,
    .destroy = destroy,
    .admit = admit,
    .admit_write = admit_write,
    .stream_hot = stream_hot,
    .hit = hit,
    .inserted = inserted,
    .keep = keep,
    .evicted = evicted,
    .memory = memory,
    .status = status,
};
