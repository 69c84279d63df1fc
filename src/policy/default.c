/*
 * The default policy: keep what is read again; keep out what is seen once,
 * and what is written but never read.  How long a read keeps a block is
 * measured in reads, not in passes of the log, and adapts.
 *
 * Admission: while the cache has free space every miss is admitted (free
 * space costs nothing to fill).  Once the cache is full, a read miss is
 * admitted only if the block is in the history -- blocks seen recently:
 * refused misses, and blocks the cleaner dropped.  Writes are admitted
 * (see below), on probation.  The history is long (four times as many
 * blocks as the cache holds, as hashes in Bloom filters, about 5 bytes per
 * cache block): data written once and read again after the cache turned
 * over -- a git pack written by a clone, read by every checkout while each
 * checkout writes more than the cache holds -- is recognised on its first
 * read and admitted then; a scan of never-repeated blocks writes nothing.
 *
 * Eviction (the cleaner reaching a block in the oldest group):
 *  - a block a client wrote and nobody has read since it was inserted
 *    is dropped -- written back first if dirty, by the cleaner's rules --
 *    and goes to the history, so a later read admits it at once.
 *    Write-once data never pushes out data that is read: it gets no second
 *    pass of the log.
 *  - a block admitted from a miss and not read since is dropped too.
 *  - a block read since it was inserted (or admitted from the history,
 *    which is its second use) is kept while its last read is within its
 *    window of the read clock:
 *      read again (protected): the longest window, WINDOW_MAX;
 *      read once: the adaptive window, at most half of the cache's worth
 *      of reads (WINDOW_READ_ONCE).
 *    A block is read again when a read finds it read before in an earlier
 *    quantum of the clock (a re-read within the same burst of reads does
 *    not count), or when a read miss admits it from the lapsed history (it
 *    was kept for its reads, ran out of window and is read once more).
 *    This is LIRS's and the 2Q/ARC frequency split in one bit: data read
 *    once (the files a checkout wrote, read by the next one) must not push
 *    out data read again and again (the pack every checkout reads).
 *
 * The read clock ticks once per read of a cached block not read yet in the
 * current quantum: about once per distinct block read, so that a hot set
 * of small blocks read many times does not age the rest.  Why reads and
 * not passes of the log: the log moves as fast as data is written, and a
 * workload that writes much more than it reads (a checkout writing 80 MiB
 * of new files through a 64 MiB cache between two reads of the pack it
 * checks out from) would otherwise age the read data out in a few passes,
 * before its next read.  Written data does not age what is read; reads do.
 *
 *   read clock:  ... |----------- window -----------| now
 *   block A last read here ^ : kept when the cleaner reaches it
 *   block B last read ^ (before the window) : dropped, remembered as lapsed
 *
 * The window adapts as ARC's target does, from two ghosts: a read miss of
 * a block dropped because its window ran out (the lapsed history) says the
 * window is too short, and it grows; a read miss of a block the history
 * remembers otherwise (dropped unread, or refused) says new data needs the
 * room, and it shrinks.  Two safeguards bound it: when the cleaner keeps
 * more than 7/8 of what it reaches, keeping costs almost a group's worth
 * of writes for nothing freed, and each block kept ticks the clock; and
 * the clock moves at most 8 quanta per pass of the log, so that a block's
 * 5-bit stamp (the clock in quanta of 1/16 of the cache's blocks, modulo
 * 32) never wraps between two visits of the cleaner: a window is at most
 * 22 quanta, and 22 + 8 < 32.
 *
 * Measured with tiercache replay on four request streams of the git
 * benchmark (64 MiB cache, 64 KiB blocks), the mean read hit ratio by
 * request / by bytes went from 0.695 / 0.552 (frequency lowered once per
 * pass) to 0.747 / 0.625, writeback and writethrough together.  Ticking
 * once per distinct block read and protecting blocks read again, on six
 * streams (three writethrough, three writeback, each replayed in its own
 * mode): 0.737 / 0.600 to 0.782 / 0.736 at 64 MiB, 0.752 / 0.634 to
 * 0.789 / 0.746 at 68 MiB, 0.764 / 0.678 to 0.801 / 0.766 at 72 MiB.  The
 * misses left are mostly the first read of the pack after the clone wrote
 * it and more than two caches' worth of files after it, and files one
 * checkout wrote and the next reads once.  No admission or eviction rule
 * keeps that pack (it is written unread like the files after it); the
 * fills do: group fills, and the fill ahead of a forward run
 * (engine/readpath.c, where its replay figures are: mean read hit ratio
 * by bytes at 64 MiB 0.933 -> 0.951 on ten streams).
 *
 * Sequential streams past the cutoff (stream.c) bypass the cache only while
 * they are cold: their blocks go to the history, and a stream over blocks
 * in the history (a second pass) is admitted like any miss.
 *
 * Write-through writes to uncached blocks are admitted, as writeback
 * admits them: on probation, as written-unread blocks that the cleaner
 * drops on its first visit unless a read came first, so they cost the
 * read data at most one pass of the log.  Refusing them once the cache
 * was full (the read rule) cost the first read of every block written and
 * read again, and that is most of what a git checkout reads (the pack the
 * clone wrote): on the request streams of 15 git benchmark runs replayed
 * in writethrough, the read hit ratio by request / by bytes went from
 * 0.833 / 0.776 to 0.893 / 0.846 at 96 MiB, 0.843 / 0.787 to 0.957 / 0.908
 * at 128 MiB (writeback: 0.960 / 0.911) and 0.959 / 0.969 to 0.997 / 0.999
 * at 256 MiB; at 64 MiB 0.749 / 0.605 became 0.754 / 0.580 (the written
 * data's pass of the log is taken from the read data).  An adaptive rule
 * (admit while 1 in 8 written blocks is read again) was measured too and
 * lost most of the gain: during a clone nothing written is read yet, so it
 * refused the pack.  What refusing saved: flash writes of data nobody
 * reads (a 16 MiB hot set read while 256 MiB were written once through a
 * 64 MiB cache: the same hot-set hit ratio, but 210 MiB more written to
 * flash when admitted).  `--write-budget` bounds those writes where flash
 * wear matters: a write over the budget goes around the cache.
 *
 * But not while the cleaner keeps more than half of what it reaches
 * (admit_write()): each block admitted then costs more than a block of
 * copies.  At 64 MiB the git streams spend most of the cleaner's copies
 * on the pack, kept through the files every checkout writes and nobody
 * reads before they are dropped; refusing those writes (13 streams, 5 in
 * writethrough, replayed at 64 MiB): read hit ratio by request / by bytes
 * 0.925 / 0.926 -> 0.939 / 0.932, bytes copied per stream 442 -> 174 MiB,
 * walk reads 851 -> 467 MiB, tail syncs 851 -> 470, device writes 911 ->
 * 530 MiB.  At 96 MiB 0.979 / 0.981 -> 0.979 / 0.976 (copies 166 -> 99
 * MiB), 128 MiB 0.986 / 0.983 -> 0.980 / 0.977 (91 -> 72), 256 MiB
 * 0.997 / 0.998 -> 0.996 / 0.997 (38 -> 28).  Refusing every write once
 * full gave 0.950 / 0.940 at 64 MiB but 0.956 / 0.945 at 96 MiB.
 * Writeback is unchanged: its writes are all cached.
 *
 * Writes never stamp a block: a block read again is worth more than a
 * block written again.
 */
#include <stdlib.h>

#include "policy/policy.h"
#include "util/json.h"
#include "util/misc.h"

/* History length in cache blocks: see above. */
#define HISTORY_FACTOR 4

/* The block's hint, the byte the index keeps for the policy:
 *   bit 0     read since it was inserted (or admitted from the history)
 *   bit 1     read again: protected (see above); only with bit 0
 *   bit 2     written by a client and not read since it was inserted
 *   bits 3-7  the read clock, in quanta modulo 32, at its last read */
#define HINT_READ (1u << 0)
#define HINT_REREAD (1u << 1)
#define HINT_WRITTEN_UNREAD (1u << 2)
#define HINT_STAMP_SHIFT 3
#define STAMP_MODULO 32u

/* The window, in quanta: its bounds, where it starts, and its step. */
#define QUANTA_PER_CACHE 16     /* a quantum: 1/16 of the cache's blocks */
#define WINDOW_MIN 2
#define WINDOW_MAX 22
#define WINDOW_START 16
#define WINDOW_READ_ONCE 8      /* the most a block read once is given */
#define MAX_ADVANCE_PER_PASS 8  /* WINDOW_MAX + this < STAMP_MODULO */

struct dflt {
    struct history *seen;
    struct history *lapsed;     /* dropped because their window ran out */
    uint64_t cache_blocks;
    uint64_t quantum;           /* clock ticks per quantum, >= 1 */
    uint64_t clock;             /* the read clock */
    uint64_t window;            /* in clock ticks */
    /* A pass of the log, as the cleaner's calls count it: cache_blocks
     * calls of keep(). */
    uint64_t keep_calls, pass_start_calls, pass_start_clock;
    uint32_t kept_share;        /* moving share of keep() calls that kept, of 65536 */
    uint64_t admitted_free, admitted_history;
    uint64_t refused_reads, admitted_writes, refused_writes;
    uint64_t evicted_written, evicted_cold, evicted_lapsed, kept, kept_reread;
    uint64_t window_grown, window_shrunk;
    uint64_t stream_hot;
};

static uint64_t quantum_of(uint64_t cache_blocks)
{
    return cache_blocks / QUANTA_PER_CACHE ? cache_blocks / QUANTA_PER_CACHE : 1;
}

static void *create(const struct policy_params *params)
{
    struct dflt *p = tc_xcalloc(1, sizeof *p);
    p->seen = history_create(HISTORY_FACTOR * params->cache_blocks + 64);
    p->lapsed = history_create(params->cache_blocks + 64);
    p->cache_blocks = params->cache_blocks;
    p->quantum = quantum_of(params->cache_blocks);
    p->window = WINDOW_START * p->quantum;
    return p;
}

/* A device left service: the quantum, the window and the pass follow the
 * blocks the cache holds now.  Sized by the whole cache, a survivor of a
 * quarter of it was given windows of up to 22 quanta of the old size --
 * five times its capacity: every block read once was kept to the end of
 * the pass, and "read again" meant read within several passes.  The
 * clock is moved to the same quantum in the new units, so every block's
 * stamp keeps its age in quanta, and the window keeps its length in
 * quanta (what the ghosts taught it).  The histories keep their size
 * (they only remember more than they need). */
static void resize(void *s, const struct policy_params *params)
{
    struct dflt *p = s;
    uint64_t q = quantum_of(params->cache_blocks);
    p->clock = p->clock / p->quantum * q;
    p->pass_start_clock = p->pass_start_clock / p->quantum * q;
    uint64_t w = p->window * q / p->quantum;
    p->window = TC_MAX(TC_MIN(w, (uint64_t)WINDOW_MAX * q), (uint64_t)WINDOW_MIN * q);
    p->quantum = q;
    p->cache_blocks = params->cache_blocks;
}

static void destroy(void *s)
{
    struct dflt *p = s;
    history_destroy(p->seen);
    history_destroy(p->lapsed);
    free(p);
}

static unsigned clock_stamp(const struct dflt *p)
{
    return (unsigned)(p->clock / p->quantum % STAMP_MODULO);
}

static void clock_tick(struct dflt *p)
{
    if (p->clock - p->pass_start_clock < MAX_ADVANCE_PER_PASS * p->quantum)
        p->clock++;
}

/* A read of the block: stamp it with the clock.  A block read before in
 * an earlier quantum is read again (protected); the clock ticks unless the
 * block was read already in this quantum. */
static void stamp_read(struct dflt *p, uint8_t *hint)
{
    unsigned now = clock_stamp(p);
    bool was_read = *hint & HINT_READ;
    bool same_quantum = was_read && (unsigned)(*hint >> HINT_STAMP_SHIFT) == now;
    uint8_t reread = (uint8_t)(*hint & HINT_REREAD);
    if (was_read && !same_quantum)
        reread = HINT_REREAD;
    *hint = (uint8_t)(HINT_READ | reread | now << HINT_STAMP_SHIFT);
    if (!same_quantum)
        clock_tick(p);
}

/* A read miss of an uncached block: what the ghosts say of the window.
 * Returns 1 if the block is in the seen history, 0 if not, -1 if that was
 * not looked at (the lapsed history had it). */
static int adapt_window(struct dflt *p, struct history_key k)
{
    uint64_t step = p->quantum / 4 ? p->quantum / 4 : 1;
    if (history_has(p->lapsed, k)) {
        if (p->window + step <= WINDOW_MAX * p->quantum)
            p->window += step;
        p->window_grown++;
        return -1;
    }
    if (history_has(p->seen, k)) {
        if (p->window >= WINDOW_MIN * p->quantum + step)
            p->window -= step;
        p->window_shrunk++;
        return 1;
    }
    return 0;
}

static bool admit(void *s, uint64_t oblock, bool free_space)
{
    struct dflt *p = s;
    struct history_key k = history_key(oblock);
    int seen = adapt_window(p, k);     /* the histories are unchanged since */
    if (free_space) {
        p->admitted_free++;
        return true;
    }
    if (seen < 0)
        seen = history_has(p->seen, k);
    if (seen) {
        p->admitted_history++;
        return true;
    }
    history_add_absent(p->seen, k);
    p->refused_reads++;
    return false;
}

static void prefetch(void *s, uint64_t oblock)
{
    struct dflt *p = s;
    struct history_key k = history_key(oblock);
    history_prefetch(p->lapsed, k);
    history_prefetch(p->seen, k);
}

/* Writes to uncached blocks are admitted on probation (see the top of
 * this file), but not while the cleaner keeps more than half of what it
 * reaches once the cache is full: then every byte admitted costs more
 * than a byte of copies of the data kept (the log is a ring: a pass of
 * it copies all that is kept), for data that is rarely read in time.
 * Such a write goes to the history instead, so that its first read
 * admits it. */
#define WRITE_KEPT_SHARE_MAX (65536u / 2)

static bool admit_write(void *s, uint64_t oblock, bool free_space)
{
    struct dflt *p = s;
    if (!free_space && p->kept_share > WRITE_KEPT_SHARE_MAX) {
        history_add_absent(p->seen, history_key(oblock));
        p->refused_writes++;
        return false;
    }
    p->admitted_writes++;
    return true;
}

/* A cold stream is a scan: it must not flush the hot set.  A stream whose
 * blocks were seen before (read, written or dropped within the history) is
 * read again, and caching it is what a cache is for. */
static bool stream_hot(void *s, uint64_t oblock)
{
    struct dflt *p = s;
    struct history_key k = history_key(oblock);
    if (history_has(p->seen, k)) {
        p->stream_hot++;
        return true;
    }
    history_add_absent(p->seen, k);
    return false;
}

static void hit(void *s, uint64_t oblock, uint8_t *hint)
{
    stamp_read(s, hint);
}

static void inserted(void *s, uint64_t oblock, uint8_t *hint, bool from_miss)
{
    struct dflt *p = s;
    /* A read of a block in the history is its second use at least: it is
     * stamped as if the first use had been a hit, or a block re-read once
     * per pass of the log would be dropped before each re-read. */
    *hint = 0;
    struct history_key k = history_key(oblock);
    bool lapsed = from_miss && history_has(p->lapsed, k);
    if (lapsed || (from_miss && history_has(p->seen, k)))
        stamp_read(p, hint);
    /* Kept for its reads until its window ran out, and read once more. */
    if (lapsed)
        *hint |= HINT_REREAD;
    if (!from_miss)
        *hint = HINT_WRITTEN_UNREAD;
}

static bool keep(void *s, uint64_t oblock, uint8_t *hint)
{
    struct dflt *p = s;
    if (++p->keep_calls - p->pass_start_calls >= p->cache_blocks) {
        p->pass_start_calls = p->keep_calls;
        p->pass_start_clock = p->clock;
    }
    p->kept_share -= p->kept_share >> 8;
    if (*hint & HINT_WRITTEN_UNREAD) {
        p->evicted_written++;
        return false;
    }
    if (!(*hint & HINT_READ)) {
        p->evicted_cold++;
        return false;
    }
    unsigned age = (clock_stamp(p) - (*hint >> HINT_STAMP_SHIFT)) % STAMP_MODULO;
    uint64_t window = (*hint & HINT_REREAD) ? WINDOW_MAX * p->quantum
                      : TC_MIN(p->window, WINDOW_READ_ONCE * p->quantum);
    if (age * p->quantum > window) {
        history_add(p->lapsed, oblock);
        p->evicted_lapsed++;
        return false;
    }
    p->kept_share += 65536 >> 8;
    if (p->kept_share > 65536 / 8 * 7)
        clock_tick(p);
    p->kept++;
    p->kept_reread += !!(*hint & HINT_REREAD);
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
    return sizeof *p + history_memory(p->seen) + history_memory(p->lapsed);
}

static void status(const void *s, struct tc_json *j)
{
    const struct dflt *p = s;
    json_uint(j, "admitted_free_space", p->admitted_free);
    json_uint(j, "admitted_from_history", p->admitted_history);
    json_uint(j, "refused_reads", p->refused_reads);
    json_uint(j, "admitted_writes", p->admitted_writes);
    json_uint(j, "refused_writes", p->refused_writes);
    json_uint(j, "evicted_written_unread", p->evicted_written);
    json_uint(j, "evicted_cold", p->evicted_cold);
    json_uint(j, "evicted_lapsed", p->evicted_lapsed);
    json_uint(j, "kept_in_window", p->kept);
    json_uint(j, "kept_read_again", p->kept_reread);
    json_uint(j, "cache_blocks", p->cache_blocks);
    json_uint(j, "read_clock", p->clock);
    json_uint(j, "window_reads", p->window);
    json_uint(j, "window_grown", p->window_grown);
    json_uint(j, "window_shrunk", p->window_shrunk);
    json_uint(j, "stream_blocks_hot", p->stream_hot);
}

const struct policy_ops policy_default = {
    .name = "default",
    .summary = "admit on second sight once full (long history); keep what was read again longest, what was read once within an adaptive window",
    .create = create,
    .destroy = destroy,
    .admit = admit,
    .admit_write = admit_write,
    .stream_hot = stream_hot,
    .prefetch = prefetch,
    .hit = hit,
    .inserted = inserted,
    .keep = keep,
    .evicted = evicted,
    .resize = resize,
    .memory = memory,
    .status = status,
};
