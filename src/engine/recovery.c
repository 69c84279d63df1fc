/*
 * Recovery: the index, the dirty set and the log's shape, rebuilt from the
 * chunk headers at start -- after a clean shutdown or a crash alike.
 *
 *  1. Walk every segment's chunks from its start: a chunk belongs to the
 *     segment's current incarnation while its header checks and carries the
 *     group sequence of the first one.  The walk stops at the first chunk
 *     that fails (never written, torn, or left from an older incarnation).
 *     It keeps each good chunk's entries, so that step 4 reads no header
 *     a second time.  The checksums are not kept: the first read of a
 *     chunk loads them (engine/verify.h), so the daemon holds none for
 *     chunks nothing reads.
 *  2. The newest header (highest chunk sequence) gives the log tail and the
 *     write-through stable mark; the highest "flushed" mark of any header
 *     says which chunks were durable.  Segments of groups older than the
 *     tail are free.
 *  3. Chunks written after the durable mark may be torn: their data is read
 *     and checked, and entries whose data fails are ignored, as if never
 *     written (they were never flushed, so nothing acknowledged is lost).
 *  4. All entries of live groups are applied in sequence order: a fragment
 *     becomes the block's newest (older ones lose its sectors), a tombstone
 *     removes the block, a clean record clears dirty bits of the state it
 *     was written against.
 *  5. A write-through version newer than the stable mark may not have
 *     reached the origin: it is marked dirty and written back.  Until it
 *     is, the stable mark stays below it (CE_WT_RECOVERED), since the log
 *     still records it as a clean write-through version.
 *
 * A stop whose log had no room for every LOST record or tombstone left the
 * lost set in the state file instead (TC_STATE_STOP_LOST, abandon.c): it
 * replaces the lost set in step 4 before the first entry at or above its
 * sequence, and drops the copies the missing tombstones were to drop.
 *
 * A cache abandoned at run time (abandon.c) has every entry below its
 * abandoned_seq ignored in step 4: the origin received writes past the
 * cache since, so none of those versions can be proven newest, and their
 * dirty data is in the lost set already.  Step 5 therefore only ever
 * writes back versions written after the last abandonment.  For the same
 * reason damage found in a group below abandoned_seq does not refuse the
 * start: it is reported (and counted), and nothing it hid mattered.
 *
 * After a clean stop recorded in the superblocks (TC_SB_CLEAN_STOP) the
 * record, not the chunk headers, says how far the log was durable: step
 * 2's durable mark is at least its newest chunk, every live chunk that
 * fails to check is damage (find_damage()), and the log found must match
 * what it counts (verify_stop_record()).  Damaged headers could otherwise
 * take with them the very marks that told them from a torn tail.
 *
 * After a clean stop whose record also names a checkpoint, none of this
 * runs: the state is read from the checkpoint (checkpoint.c), which the
 * stop wrote from what this rebuilt and what the log then recorded; a
 * checkpoint that cannot be trusted is said so, and the log is walked.
 *
 * Likewise a device that failed at run time while others went on has a
 * failure mark (failed_seq, in the superblocks of the others): its
 * segments of groups below the mark are free, their entries ignored and
 * their damage not looked for, whether or not the device reads well again.
 */
#include <errno.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/abandon.h"
#include "engine/cache.h"
#include "engine/checkpoint.h"
#include "engine/failure.h"
#include "engine/map.h"
#include "engine/recovery.h"
#include "engine/survey.h"
#include "util/crc32c.h"
#include "util/log.h"
#include "util/misc.h"

struct rec {
    uint64_t seq;
    uint64_t oblock;
    uint64_t target;
    struct tc_mask valid, dirty;
    uint32_t seg;
    uint16_t off;
    uint8_t type, flags;
    bool bad;
};

struct recovery {
    struct cache *c;
    /* Lost sectors a write-through version covers, not yet cleared: see
     * wt_lost_defer() (apply()). */
    struct lost wt_clears;
    struct rec *recs;
    size_t nrecs, cap;
    uint64_t max_seq, max_chunk_seq, tail_seq, wt_stable, durable;
    uint64_t tail_chunk;            /* the newest header's first live chunk (0: not known) */
    uint64_t failed_chunk;          /* the newest chunk any header says failed to write */
    bool clean_stop;                /* the newest chunk was written by a clean stop */
    uint64_t clean_from;            /* ... and every chunk up to this was durable then */
    bool stop_record;               /* the superblocks' clean-stop record is in rec */
    struct tc_superblock rec;
    uint64_t *cur_seq;              /* per index entry: seq of its newest fragment */
    uint64_t *wt_seq;               /* per index entry: newest write-through seq */
    uint8_t *below_mark;            /* per index entry: a version below a failure mark
                                       applied since the block last entered the index */
    uint32_t cur_cap;
    uint8_t *hdr;
    uint64_t chunks;
    uint32_t *stop;                 /* per segment: where its walk failed, or ~0 */
    uint64_t *last_chunk;           /* per segment: chunk sequence of its last good chunk */
    uint64_t damage_group;          /* the group of the damage being reported (~0: unknown) */
    /* Chunks that damage findings stand for: each damaged summary
     * find_damage() reports is at least one chunk the walks could not
     * count.  A failed read of the log hides an unknown number of them
     * (damage_uncounted).  verify_stop_record() weighs the two. */
    uint64_t damaged_chunks;
    bool damage_uncounted;
    struct walk *walks;             /* per segment: its walk (step 1) */
    uint64_t **cseq;                /* per segment: the chunk sequence of each chunk found */
    uint32_t *cseq_cap;
    struct found *found;            /* per segment: the entries its walk decoded */
    const uint8_t *only;            /* a replay after a running checkpoint: walk only
                                       these segments (NULL: every one) */
    /* Per segment: the group of the chunk find_damage() last judged torn
     * at rc->stop[s] (0: none), when the header there or a later chunk
     * behind it is of the segment's incarnation; wipe_torn() erases them. */
    uint64_t *torn_group;
    /* The chunks whose header checks but some of whose entries' data did
     * not (written after the durable mark, torn by the crash): segment
     * and index in its chunk table.  drop_torn_data() rewrites their
     * headers without those entries. */
    struct torn_chunk {
        uint32_t s, k;
    } *torn_data;
    size_t ntorn_data, torn_data_cap;
    /* The runs begun by a start after a crash whose chunks the walks found
     * (TC_CHUNK_RESTART): the run's first chunk, and the durable mark that
     * start found (missing_chunks()). */
    struct restart_mark {
        uint64_t first, durable;
    } *restarts;
    size_t nrestarts, restarts_cap;
};

/*
 * The entries of the chunks a walk found, decoded from the header the walk
 * read (a walk reads a whole header), so that the entries' pass need not
 * read it again: that second read of every live chunk's header was half
 * the start's reads.  first[k] indexes chunk k's entries in recs (its n
 * entries follow), or is UNDECODED when the entries' pass must read the
 * chunk itself: an entry that does not decode or names a block beyond the
 * origin (the pass reports it, for live segments only).  Chunks that may
 * be torn (written after the durable mark, known only once every walk has
 * ended) are read again with their data, as before, whatever is here.
 */
#define UNDECODED UINT32_MAX
struct found {
    struct rec *recs;
    uint32_t nrecs, recs_cap;
    uint32_t *first, *n;            /* by chunk index, sized as cseq */
};

static void add_rec(struct recovery *rc, const struct rec *r)
{
    if (rc->nrecs == rc->cap) {
        rc->cap = rc->cap ? rc->cap * 2 : 4096;
        rc->recs = realloc(rc->recs, rc->cap * sizeof *rc->recs);
        if (rc->recs == NULL)
            abort();
    }
    rc->recs[rc->nrecs++] = *r;
}

/* By sequence; copies of one entry (the same sequence) in the order the
 * log is walked (log_copy_first()), which makes the first DATA copy the
 * primary, as in memory -- not left to the sort's stability. */
static int cmp_rec(const void *a, const void *b, void *arg)
{
    struct cache *c = arg;
    const struct rec *x = a, *y = b;
    if (x->seq != y->seq)
        return x->seq < y->seq ? -1 : 1;
    if (x->seg != y->seg)
        return log_copy_first(c, x->seg, y->seg) ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

static void add_damage(struct recovery *rc, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A read of the log failed: what was there is unknown, which is damage
 * (treating it as the end of the log would drop the dirty data it may
 * hold without a word). */
static void damage_group(struct recovery *rc, uint64_t group)
{
    uint64_t g = group ? group : UINT64_MAX;    /* unknown: could be any */
    rc->damage_group = g;
    rc->c->damage_group_max = TC_MAX(rc->c->damage_group_max, g);
}

static void read_failed(struct recovery *rc, struct tc_dev *dev, uint32_t s, uint64_t group,
                        uint64_t off, size_t len, int err)
{
    if (group && devfail_untrusted(rc->c, space_seg(&rc->c->sp, s)->dev, group))
        return;     /* written before its device failed: ignored anyway */
    rc->damage_uncounted = true;
    damage_group(rc, group);
    add_damage(rc, "%s: segment %u: reading %zu bytes of the log at offset %llu failed: %s; "
               "the chunks there are unknown", dev->name, s, len, (unsigned long long)off,
               strerror(-err));
}

/* As read_failed(), for the data of a chunk whose header was read: its
 * entries are known (kept, unchecked: check and salvage name their blocks,
 * salvage reports their sectors lost), only their data is not. */
static void data_read_failed(struct recovery *rc, struct tc_dev *dev, uint32_t s,
                             uint64_t group, uint32_t chunk, uint64_t off, size_t len, int err)
{
    if (group && devfail_untrusted(rc->c, space_seg(&rc->c->sp, s)->dev, group))
        return;
    rc->damage_uncounted = true;
    damage_group(rc, group);
    add_damage(rc, "%s: segment %u: reading %zu bytes of the log at offset %llu failed: %s; "
               "the data of the chunk at sector %u is unknown (its entries are kept, "
               "unchecked)", dev->name, s, len, (unsigned long long)off, strerror(-err), chunk);
}

static void add_damage(struct recovery *rc, const char *fmt, ...)
{
    struct cache *c = rc->c;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (rc->damage_group < c->abandoned_seq) {
        /* Damage confined to a group written before the cache was
         * abandoned: every entry of such a group has a lower sequence
         * (groups and entries share one counter, and nothing is appended
         * after an abandonment or before a restart's first new group,
         * which starts at abandoned_seq), so step 4 ignores all of it
         * anyway -- nothing it held can be served or written back.  An
         * unknown group (~0) is never below.  check still lists it (and
         * salvage says that it hid nothing). */
        c->st.recovery_damage_ignored++;
        if (!c->offline) {
            tc_warn("%s; ignored: written before the cache was abandoned (log sequence %llu), "
                    "so nothing there is trusted anyway", line,
                    (unsigned long long)c->abandoned_seq);
            return;
        }
    }
    tc_error("%s", line);
    c->st.recovery_damaged++;
    size_t old = c->damage ? strlen(c->damage) : 0;
    c->damage = realloc(c->damage, old + strlen(line) + 2);
    if (c->damage == NULL)
        abort();
    memcpy(c->damage + old, line, strlen(line));
    c->damage[old + strlen(line)] = '\n';
    c->damage[old + strlen(line) + 1] = 0;
}

/*
 * Reads in parallel.  Start reads one header per chunk of the log (one
 * sector, unless the header is longer), and a device answers a read in
 * 50-200 us: one read at a time, that latency is the start time of a
 * large cache.  So the walks of all segments go on
 * side by side (within a segment they cannot: a header says where the
 * next one is), and the entries' pass reads ahead of the chunk it
 * applies.  Completions are only collected as they come; what was read is
 * judged by the same code, in the same order, as one read at a time
 * would judge it: walk_step() for the walks, segment by segment; the
 * entries strictly in the order of the live segments and their chunks.
 */
enum {
    RECOVERY_DEPTH = 64,                    /* reads in flight */
    RECOVERY_DATA_INFLIGHT = 64u << 20,     /* bytes of chunk data in flight */
};

/* One segment's walk (step 1): where it is, and where and how it ended. */
struct walk {
    uint64_t seq;               /* the incarnation's group (0: none found yet) */
    uint32_t at;                /* sector of the next header */
    int err;                    /* the read at `at` failed with this */
    bool stopped;               /* on a header that does not check (not closed, not the end) */
    /* The header it stopped on, the fields find_damage() judges it by. */
    uint8_t bad_marks, bad_uuid_diff;
    uint64_t bad_group, bad_chunk;
};

/* The length of the header read at w->at; 0 when the segment ends there. */
static size_t walk_len(const struct cache *c, const struct walk *w)
{
    if (w->err || w->stopped || w->at + 1 >= c->seg_sectors)
        return 0;
    return TC_MIN((size_t)TC_MAX_HDR_SECTORS, (size_t)(c->seg_sectors - w->at)) * TC_SECTOR;
}

static void walk_remember_bad(struct recovery *rc, uint32_t s, struct walk *w, const uint8_t *b)
{
    w->stopped = true;
    w->bad_group = le64_get(b + CH_OFF_GROUP_SEQ);
    w->bad_chunk = le64_get(b + CH_OFF_CHUNK_SEQ);
    w->bad_marks = (le64_get(b + CH_OFF_MAGIC) == TC_CHUNK_MAGIC) +
                   (le32_get(b + CH_OFF_SEGMENT) == s) +
                   (le32_get(b + CH_OFF_CHUNK_SECTOR) == w->at);
    unsigned diff = 0;
    for (unsigned i = 0; i < 16; i++)
        diff += b[CH_OFF_SET_UUID + i] != rc->c->set_uuid[i];
    w->bad_uuid_diff = (uint8_t)diff;
}

/* The chunk sequence of each chunk a walk found, by its index in the
 * segment's chunk list: the entries' pass reads a chunk's data with its
 * header when the chunk may be torn, which its sequence tells. */
static void note_chunk_seq(struct recovery *rc, uint32_t s, uint32_t k, uint64_t chunk_seq)
{
    if (k >= rc->cseq_cap[s]) {
        uint32_t cap = rc->cseq_cap[s] ? rc->cseq_cap[s] * 2 : 8;
        while (cap <= k)
            cap *= 2;
        struct found *f = &rc->found[s];
        rc->cseq[s] = realloc(rc->cseq[s], (size_t)cap * sizeof **rc->cseq);
        f->first = realloc(f->first, (size_t)cap * sizeof *f->first);
        f->n = realloc(f->n, (size_t)cap * sizeof *f->n);
        if (rc->cseq[s] == NULL || f->first == NULL || f->n == NULL)
            abort();
        rc->cseq_cap[s] = cap;
    }
    rc->cseq[s][k] = chunk_seq;
}

/* One entry of the chunk at sector start of segment s as a record, or
 * false (with why) when it does not decode or names a block beyond the
 * origin. */
static bool entry_rec(struct recovery *rc, uint32_t s, uint32_t start, const uint8_t *hdr,
                      const struct tc_chunk_header *h, uint32_t i, struct rec *r, bool *beyond,
                      char *why, size_t whylen)
{
    struct cache *c = rc->c;
    struct tc_entry e;
    *beyond = false;
    if (chunk_entry(hdr, h, c->spb, i, &e, why, whylen) < 0)
        return false;
    if (e.oblock >= c->nblocks_origin) {
        *beyond = true;
        return false;
    }
    *r = (struct rec){ .seq = e.seq, .oblock = e.oblock, .target = e.target,
                       .valid = e.valid, .dirty = e.dirty, .seg = s,
                       .off = (uint16_t)(start + h->hdr_sectors + e.data_sector),
                       .type = e.type, .flags = e.flags };
    return true;
}

/* Keep the entries of chunk k (at sector start of segment s), whose header
 * the walk read and decoded, for the entries' pass. */
static void keep_entries(struct recovery *rc, uint32_t s, uint32_t k, uint32_t start,
                         const uint8_t *hdr, const struct tc_chunk_header *h)
{
    struct found *f = &rc->found[s];
    if (f->nrecs + (uint64_t)h->nr_entries > UINT32_MAX - 1) {
        f->first[k] = UNDECODED;
        return;
    }
    if (f->nrecs + h->nr_entries > f->recs_cap) {
        uint32_t cap = f->recs_cap ? f->recs_cap : 64;
        while (cap < f->nrecs + h->nr_entries)
            cap *= 2;
        f->recs = realloc(f->recs, (size_t)cap * sizeof *f->recs);
        if (f->recs == NULL)
            abort();
        f->recs_cap = cap;
    }
    uint32_t first = f->nrecs;
    for (uint32_t i = 0; i < h->nr_entries; i++) {
        char why[128];
        bool beyond;
        if (!entry_rec(rc, s, start, hdr, h, i, &f->recs[first + i], &beyond, why, sizeof why)) {
            f->first[k] = UNDECODED;        /* the entries' pass reads it and says why */
            return;
        }
    }
    f->nrecs += h->nr_entries;
    f->first[k] = first;
    f->n[k] = h->nr_entries;
}

/* The first chunk of the run that chunk_seq is of, when its chunks carry
 * TC_CHUNK_RESTART: a start after a crash numbers them from just past a
 * multiple of TC_SEQ_RESTART_GAP (skip_unseen_numbers()). */
static uint64_t run_first(uint64_t chunk_seq)
{
    return (chunk_seq - 1) / TC_SEQ_RESTART_GAP * TC_SEQ_RESTART_GAP + 1;
}

static const struct restart_mark *run_known(const struct recovery *rc, uint64_t first)
{
    for (size_t m = 0; m < rc->nrestarts; m++)
        if (rc->restarts[m].first == first)
            return &rc->restarts[m];
    return NULL;
}

/* Step 1 for the header read at w->at: false when the walk ends there. */
static bool walk_step(struct recovery *rc, uint32_t s, struct walk *w, const uint8_t *hdr,
                      size_t len)
{
    struct cache *c = rc->c;
    struct tc_chunk_header h;
    char why[128];
    if (chunk_decode(hdr, len, c->set_uuid, c->spb, c->seg_sectors, &h, why, sizeof why) < 0 ||
        h.segment != s || h.chunk_sector != w->at || (w->seq && h.group_seq != w->seq)) {
        walk_remember_bad(rc, s, w, hdr);
        return false;
    }
    w->seq = h.group_seq;
    rc->last_chunk[s] = h.chunk_seq;
    if ((h.flags & TC_CHUNK_RESTART) && !run_known(rc, run_first(h.chunk_seq))) {
        if (rc->nrestarts == rc->restarts_cap) {
            rc->restarts_cap = rc->restarts_cap ? 2 * rc->restarts_cap : 8;
            rc->restarts = realloc(rc->restarts, rc->restarts_cap * sizeof *rc->restarts);
            if (rc->restarts == NULL)
                abort();
        }
        rc->restarts[rc->nrestarts++] = (struct restart_mark){ run_first(h.chunk_seq),
                                                               h.restart_durable };
    }
    segment_add_chunk(&c->sp, s, w->at, h.hdr_sectors, h.data_sectors);
    note_chunk_seq(rc, s, space_seg(&c->sp, s)->nchunks - 1, h.chunk_seq);
    keep_entries(rc, s, space_seg(&c->sp, s)->nchunks - 1, w->at, hdr, &h);
    rc->chunks++;
    if (h.chunk_seq > rc->max_chunk_seq) {
        rc->max_chunk_seq = h.chunk_seq;
        rc->tail_seq = h.tail_seq;
        rc->wt_stable = h.wt_stable_seq;
        rc->clean_stop = h.flags & TC_CHUNK_CLEAN_STOP;
        rc->clean_from = h.flushed_seq;
        rc->tail_chunk = h.tail_chunk;
    }
    if (h.flushed_seq > rc->durable)
        rc->durable = h.flushed_seq;
    rc->failed_chunk = TC_MAX(rc->failed_chunk, h.failed_chunk);
    if (h.group_seq > rc->max_seq)
        rc->max_seq = h.group_seq;
    w->at += h.hdr_sectors + h.data_sectors;
    return !(h.flags & TC_CHUNK_CLOSED);
}

/* The end of a segment's walk: its group and fill, and where find_damage()
 * should look (a read error is reported here: find_damage() need not
 * judge it). */
static void walk_finish(struct recovery *rc, uint32_t s, struct walk *w)
{
    struct cache *c = rc->c;
    struct segment *sg = space_seg(&c->sp, s);
    sg->seq = w->seq;
    sg->fill = w->at;
    rc->stop[s] = w->stopped ? w->at : UINT32_MAX;
    if (w->err) {
        struct tc_dev *dev = seg_cdev(c, s)->dev;
        uint64_t off = seg_dev_offset(c, s) + (uint64_t)w->at * TC_SECTOR;
        size_t len = TC_MIN((size_t)TC_MAX_HDR_SECTORS, (size_t)(c->seg_sectors - w->at)) *
                     TC_SECTOR;
        read_failed(rc, dev, s, w->seq, off, len, w->err);
    }
    if (c->trace_block == UINT64_MAX - 1 && w->seq)
        tc_info("trace recovery: segment %u: group %llu, %u chunks, fill %u", s,
                (unsigned long long)w->seq, sg->nchunks, w->at);
}

/* Step 1 for one segment, one read at a time, from sector at of its
 * incarnation seq (0: take the first header's): find_damage() resumes a
 * walk past damage with it. */
static void walk_segment(struct recovery *rc, uint32_t s, uint32_t at, uint64_t seq)
{
    struct cache *c = rc->c;
    struct walk *w = &rc->walks[s];
    *w = (struct walk){ .seq = seq, .at = at };
    size_t len;
    while ((len = walk_len(c, w)) > 0) {
        int err = dev_sync_io(seg_cdev(c, s)->dev, TC_DEV_READ, rc->hdr,
                              seg_dev_offset(c, s) + (uint64_t)w->at * TC_SECTOR, len, 0);
        if (err) {
            w->err = err;
            break;
        }
        if (!walk_step(rc, s, w, rc->hdr, len))
            break;
    }
    walk_finish(rc, s, w);
}

struct walk_slot {
    struct tc_dev_io dio;
    uint8_t *buf;
    uint32_t s;                 /* the segment walked (UINT32_MAX: free) */
    bool done;
    int err;
};

static void walk_read_done(struct tc_dev_io *dio, int err)
{
    struct walk_slot *sl = container_of(dio, struct walk_slot, dio);
    sl->done = true;
    sl->err = err;
}

static void walk_submit(struct cache *c, struct walk_slot *sl, const struct walk *w, size_t len)
{
    memset(&sl->dio, 0, sizeof sl->dio);
    sl->dio.op = TC_DEV_READ;
    sl->dio.buf = sl->buf;
    sl->dio.off = seg_dev_offset(c, sl->s) + (uint64_t)w->at * TC_SECTOR;
    sl->dio.len = len;
    sl->dio.cb = walk_read_done;
    sl->done = false;
    dev_submit(seg_cdev(c, sl->s)->dev, &sl->dio);
}

/* The first read of a header is one sector, where nearly every header
 * fits (a chunk of 64 KiB blocks describes its 16 or so entries in a few
 * hundred bytes): reading TC_MAX_HDR_SECTORS every time was eight times
 * the bytes.  A header that says it is longer is read again whole:
 * *full is that length, when the sector read looks like the start of a
 * header longer than one sector that fits what walk_len() allows. */
static bool walk_needs_more(const struct cache *c, const struct walk *w, const uint8_t *b,
                            size_t *full)
{
    if (le64_get(b + CH_OFF_MAGIC) != TC_CHUNK_MAGIC)
        return false;
    size_t len = (size_t)le16_get(b + CH_OFF_HDR_SECTORS) * TC_SECTOR;
    if (len <= TC_SECTOR || len > walk_len(c, w))
        return false;       /* fits, or walk_step() finds it out of range */
    *full = len;
    return true;
}

/* Step 1 for every segment, RECOVERY_DEPTH walks at a time; then each
 * walk's end, in segment order. */
static void walk_all(struct recovery *rc)
{
    struct cache *c = rc->c;
    struct walk_slot slots[RECOVERY_DEPTH];
    size_t hlen = (size_t)TC_MAX_HDR_SECTORS * TC_SECTOR;
    for (unsigned i = 0; i < RECOVERY_DEPTH; i++) {
        slots[i].buf = tc_alloc_aligned(hlen);
        slots[i].s = UINT32_MAX;
    }
    uint32_t next = 0;
    unsigned busy = 0;
    for (;;) {
        for (unsigned i = 0; i < RECOVERY_DEPTH && next < c->sp.nsegs; i++) {
            if (slots[i].s != UINT32_MAX)
                continue;
            while (next < c->sp.nsegs) {
                uint32_t s = next++;
                rc->walks[s] = (struct walk){ 0 };
                if (rc->only && !rc->only[s])
                    continue;
                size_t len = walk_len(c, &rc->walks[s]);
                if (len > 0) {
                    slots[i].s = s;
                    walk_submit(c, &slots[i], &rc->walks[s], TC_SECTOR);
                    busy++;
                    break;
                }
            }
        }
        if (busy == 0)
            break;
        reactor_poll(c->reactor, 100000000ull);
        for (unsigned i = 0; i < RECOVERY_DEPTH; i++) {
            struct walk_slot *sl = &slots[i];
            if (sl->s == UINT32_MAX || !sl->done)
                continue;
            struct walk *w = &rc->walks[sl->s];
            size_t len = sl->dio.len, full;
            busy--;
            if (sl->err) {
                w->err = sl->err;
            } else if (len == TC_SECTOR && walk_needs_more(c, w, sl->buf, &full)) {
                walk_submit(c, sl, w, full);
                busy++;
                continue;
            } else if (walk_step(rc, sl->s, w, sl->buf, len) && walk_len(c, w) > 0) {
                walk_submit(c, sl, w, TC_SECTOR);
                busy++;
                continue;
            }
            sl->s = UINT32_MAX;
        }
    }
    for (unsigned i = 0; i < RECOVERY_DEPTH; i++)
        free(slots[i].buf);
    for (uint32_t s = 0; s < c->sp.nsegs; s++) {
        if (rc->only && !rc->only[s])
            rc->stop[s] = UINT32_MAX;   /* not walked: nothing for find_damage() */
        else
            walk_finish(rc, s, &rc->walks[s]);
    }
}

/*
 * A walk that ended on a header that does not check is normal after a
 * crash: the chunk there was being written (torn) or was never written,
 * and the sector holds older contents.  It is damage when that chunk was
 * durable -- a flipped bit, a misdirected write -- and then the blocks its
 * summary described are unknown: newer versions, tombstones or dirty data
 * the origin lacks.  Older versions of those blocks would come back as
 * current.  This tells the two apart:
 *
 *  - a later chunk of the same incarnation of the segment (found by
 *    scanning the rest of the segment for a header that checks, names this
 *    segment, this position and this group) was issued after the bad one,
 *    so the bad one's sequence is below it; if the log's durable mark (as
 *    any good chunk knows it, those past further damage in this segment
 *    included) reaches that far, the bad chunk was durable;
 *  - with no later chunk, the bad header's own chunk sequence decides, if
 *    the header is recognisably this incarnation's (its group, and two of
 *    magic, segment and position intact); after a clean stop any such
 *    header is damage (stopped_clean()), since no write was torn.
 *
 * Damage found is recorded (serve refuses the cache, check lists it), and
 * the walk resumes at the later chunk, so that check sees the rest.  Only
 * segments whose walk stopped early are scanned: the open segments and
 * damaged ones, never the free space of a whole cache.
 */
/*
 * After a clean stop (the newest chunk says so) nothing was being written:
 * a chunk of this incarnation that fails to check is damage, whatever its
 * own, maybe damaged, chunk sequence claims -- unless it is one of the
 * stop's own chunks (sequences just past clean_from, one per device), which
 * a crash during the stop's last sync can tear.  A segment with no good
 * chunk counts only if its claimed group existed at the stop: a group
 * started after a restart is newer than every group seen, and the crash
 * that tore its first chunk is the normal end.
 */
static bool stopped_clean(const struct recovery *rc, uint64_t seq, uint64_t claimed_group,
                          uint64_t claimed_chunk)
{
    /* The superblocks' record was written after the stop's last sync:
     * its own chunks were durable too, and it holds whatever headers are
     * damaged (those that carried the clean-stop flag included). */
    if (rc->stop_record)
        return seq != 0 || claimed_group <= rc->max_seq;
    if (!rc->clean_stop)
        return false;
    if (claimed_chunk > rc->clean_from && claimed_chunk <= rc->clean_from + rc->c->ndevs)
        return false;
    return seq != 0 || claimed_group <= rc->max_seq;
}

static void find_damage(struct recovery *rc, uint32_t s)
{
    struct cache *c = rc->c;
    struct segment *sg = space_seg(&c->sp, s);
    struct tc_dev *dev = seg_cdev(c, s)->dev;
    uint64_t base = seg_dev_offset(c, s);
    uint32_t at = rc->stop[s];
    uint64_t seq = sg->seq;
    if (at == UINT32_MAX || at + 2 > c->seg_sectors)
        return;
    if (seq && seq < rc->tail_seq)
        return;                         /* a free segment: nothing in it counts */
    /* The header the walk stopped on, as it read it. */
    const struct walk *w = &rc->walks[s];
    uint64_t claimed_group = w->bad_group;
    uint64_t claimed_chunk = w->bad_chunk;
    unsigned marks = w->bad_marks;
    /* A header of another cache set (the device was formatted again with
     * --force, which leaves old chunks in place): a leftover, never
     * damage of ours, even when its group number falls in our live range
     * -- as in a segment of a live group on a device that failed before
     * writing it.  Damage flips a few bytes, not a whole set UUID. */
    if (w->bad_uuid_diff > 4)
        return;
    /* Ours: its group, or (the group field damaged) a chunk sequence past
     * the segment's last good chunk -- a leftover of an older incarnation
     * has a lower one. */
    bool ours = marks >= 2 && (seq ? claimed_group == seq ||
                                         (rc->last_chunk[s] && claimed_chunk > rc->last_chunk[s])
                                   : claimed_group >= rc->tail_seq && claimed_group > 0);
    if (seq == 0 && !ours)
        return;                         /* a segment never written in a live group */
    uint64_t group = seq ? seq : claimed_group;
    if (devfail_untrusted(c, sg->dev, group))
        return;     /* written before its device failed: nothing in it counts */

    /* Scan the rest of the segment for the chunks of this incarnation: the
     * first one is where the walk resumes; every one of them tells how far
     * the log was durable when it was written -- past further damage too,
     * which would otherwise hide what the segment's newest chunks record
     * (when the bad chunk was the segment's first, or its segment holds the
     * newest chunks, the rest of the log may not record it). */
    enum { WINDOW = 256 };              /* sectors read at a time */
    uint8_t *win = tc_alloc_aligned((size_t)WINDOW * TC_SECTOR);
    uint32_t found = UINT32_MAX;
    struct tc_chunk_header next;
    uint64_t durable = rc->durable;
    for (uint32_t from = at + 1; from + 1 < c->seg_sectors; from += WINDOW) {
        uint32_t n = TC_MIN((uint32_t)WINDOW, c->seg_sectors - from);
        int werr = dev_sync_io(dev, TC_DEV_READ, win, base + (uint64_t)from * TC_SECTOR,
                               (size_t)n * TC_SECTOR, 0);
        if (werr) {
            read_failed(rc, dev, s, seq,
                        base + (uint64_t)from * TC_SECTOR, (size_t)n * TC_SECTOR, werr);
            continue;
        }
        for (uint32_t i = 0; i < n; i++) {
            const uint8_t *p = win + (size_t)i * TC_SECTOR;
            if (le64_get(p + CH_OFF_MAGIC) != TC_CHUNK_MAGIC ||
                le32_get(p + CH_OFF_SEGMENT) != s || le32_get(p + CH_OFF_CHUNK_SECTOR) != from + i ||
                le64_get(p + CH_OFF_GROUP_SEQ) != group)
                continue;
            size_t len = TC_MIN((size_t)TC_MAX_HDR_SECTORS, (size_t)(c->seg_sectors - from - i)) *
                         TC_SECTOR;
            struct tc_chunk_header h;
            char why[128];
            if (dev_sync_io(dev, TC_DEV_READ, rc->hdr, base + (uint64_t)(from + i) * TC_SECTOR,
                            len, 0) != 0 ||
                chunk_decode(rc->hdr, len, c->set_uuid, c->spb, c->seg_sectors, &h, why,
                             sizeof why) < 0)
                continue;
            if (found == UINT32_MAX) {
                found = from + i;
                next = h;
            }
            durable = TC_MAX(durable, h.flushed_seq);
        }
    }
    free(win);

    bool durable_bad;
    if (found != UINT32_MAX)
        durable_bad = next.chunk_seq <= durable + 1;
    else
        durable_bad = ours && (claimed_chunk <= durable || stopped_clean(rc, seq, claimed_group,
                                                                          claimed_chunk));
    if (!durable_bad) {
        /* Torn or never written: the normal end.  A header of this
         * incarnation there, or later chunks of it behind it, are
         * erased before serving (wipe_torn()). */
        rc->torn_group[s] = ours || found != UINT32_MAX ? group : 0;
        return;
    }
    rc->torn_group[s] = 0;
    /* The group: the segment's, or the one its damaged first summary
     * claims if a good chunk further on confirms it; else unknown. */
    damage_group(rc, seq ? seq : found != UINT32_MAX ? group : 0);
    rc->damaged_chunks++;               /* the chunk whose summary this is, at least */
    if (found != UINT32_MAX)
        add_damage(rc, "%s: segment %u (group %llu): the chunk summary at sector %u is damaged; "
                   "the blocks it described (sectors %u..%u) are unknown", dev->name, s,
                   (unsigned long long)group, at, at, found - 1);
    else
        add_damage(rc, "%s: segment %u (group %llu): the chunk summary at sector %u is damaged; "
                   "the blocks it described are unknown", dev->name, s,
                   (unsigned long long)group, at);
    rc->stop[s] = UINT32_MAX;           /* judged: not again in the next pass */
    if (found != UINT32_MAX) {
        walk_segment(rc, s, found, group);
        find_damage(rc, s);             /* the resumed walk may stop on damage again */
    }
}

/* The entries' pass: the reads of one chunk, its header and (when the
 * chunk may be torn) its data. */
struct chunk_read {
    struct tc_dev_io hdr_io, data_io;
    uint8_t *hdr, *data;
    size_t data_cap;
    uint32_t s, k;              /* segment, and the chunk's index in it */
    bool with_data;
    bool decoded;               /* its walk kept its entries: nothing to read */
    unsigned pending;
    int hdr_err, data_err;
};

static void chunk_read_done(struct tc_dev_io *dio, int err)
{
    struct chunk_read *cr = dio->priv;
    if (dio == &cr->hdr_io)
        cr->hdr_err = err;
    else
        cr->data_err = err;
    cr->pending--;
}

static void chunk_read_submit(struct cache *c, struct chunk_read *rd, struct tc_dev_io *dio,
                              void *buf, uint64_t off, size_t len)
{
    memset(dio, 0, sizeof *dio);
    dio->op = TC_DEV_READ;
    dio->buf = buf;
    dio->off = off;
    dio->len = len;
    dio->cb = chunk_read_done;
    dio->priv = rd;
    rd->pending++;
    dev_submit(seg_cdev(c, rd->s)->dev, dio);
}

static void chunk_data_room(struct chunk_read *rd, size_t len)
{
    if (len <= rd->data_cap)
        return;
    free(rd->data);
    rd->data = tc_alloc_aligned(len);
    rd->data_cap = len;
}

/* Chunk k of segment s has entries whose data is torn (once per chunk:
 * its entries are read in order). */
static void note_torn_data(struct recovery *rc, uint32_t s, uint32_t k)
{
    if (rc->ntorn_data > 0 && rc->torn_data[rc->ntorn_data - 1].s == s &&
        rc->torn_data[rc->ntorn_data - 1].k == k)
        return;
    if (rc->ntorn_data == rc->torn_data_cap) {
        rc->torn_data_cap = rc->torn_data_cap ? 2 * rc->torn_data_cap : 16;
        rc->torn_data = realloc(rc->torn_data, rc->torn_data_cap * sizeof *rc->torn_data);
        if (rc->torn_data == NULL)
            abort();
    }
    rc->torn_data[rc->ntorn_data++] = (struct torn_chunk){ s, k };
}

/* Steps 3 and 4's input: the entries of one chunk of a live segment, read
 * into rd.  False when the rest of the segment cannot be read. */
static bool read_entries(struct recovery *rc, struct chunk_read *rd)
{
    struct cache *c = rc->c;
    uint32_t s = rd->s;
    struct segment *sg = space_seg(&c->sp, s);
    struct tc_dev *dev = seg_cdev(c, s)->dev;
    uint64_t base = seg_dev_offset(c, s);
    const struct chunk_ref *cr = &sg->chunks[rd->k];
    size_t hlen = (size_t)cr->hdr_sectors * TC_SECTOR;
    if (rd->hdr_err) {
        read_failed(rc, dev, s, sg->seq, base + (uint64_t)cr->start * TC_SECTOR, hlen,
                    rd->hdr_err);
        return false;
    }
    struct tc_chunk_header h;
    char why[128];
    if (chunk_decode(rd->hdr, hlen, c->set_uuid, c->spb, c->seg_sectors, &h, why,
                     sizeof why) < 0)
        return false;
    bool check = h.chunk_seq > rc->durable && h.data_sectors > 0;
    const uint8_t *data = NULL;
    if (check) {
        size_t dlen = (size_t)h.data_sectors * TC_SECTOR;
        uint64_t doff = base + (uint64_t)(cr->start + cr->hdr_sectors) * TC_SECTOR;
        if (!rd->with_data || rd->data_io.len != dlen) {
            /* Not read ahead: the walk saw another header here. */
            chunk_data_room(rd, dlen);
            rd->data_err = dev_sync_io(dev, TC_DEV_READ, rd->data, doff, dlen, 0);
        }
        /* A read error is not a torn write: the chunk may hold versions
         * whose FLUSH was acknowledged (the header covering it with its
         * mark had not been written yet), and taking its entries for
         * torn served their older versions.  Read once more (a transient
         * error), else it is damage: the start is refused, check lists
         * it, and the entries stay unchecked, so that salvage finds their
         * data unreadable rather than write back the older versions. */
        if (rd->data_err)
            rd->data_err = dev_sync_io(dev, TC_DEV_READ, rd->data, doff, dlen, 0);
        if (rd->data_err) {
            data_read_failed(rc, dev, s, sg->seq, cr->start, doff, dlen, rd->data_err);
            check = false;
        }
        data = rd->data;
    }
    for (uint32_t i = 0; i < h.nr_entries; i++) {
        struct rec r;
        bool beyond;
        if (!entry_rec(rc, s, cr->start, rd->hdr, &h, i, &r, &beyond, why, sizeof why)) {
            if (beyond) {
                struct tc_entry e;
                chunk_entry(rd->hdr, &h, c->spb, i, &e, why, sizeof why);
                tc_warn("%s: segment %u: entry for block %llu beyond the origin ignored",
                        dev->name, s, (unsigned long long)e.oblock);
            } else {
                tc_warn("%s: segment %u chunk at %u: %s", dev->name, s, cr->start, why);
            }
            c->st.recovery_malformed++;
            continue;
        }
        if (check && r.type == TC_ENTRY_DATA) {
            uint32_t first = r.off - cr->start - cr->hdr_sectors;    /* e.data_sector */
            unsigned n = mask_count(&r.valid);
            for (unsigned x = 0; x < n && !r.bad; x++)
                if (tc_crc32c(0, data + (size_t)(first + x) * TC_SECTOR, TC_SECTOR) !=
                    chunk_data_crc(rd->hdr, &h, c->spb, first + x))
                    r.bad = true;
            if (r.bad) {
                c->st.recovery_unflushed++;
                note_torn_data(rc, s, rd->k);
            }
        }
        if (r.seq > rc->max_seq)
            rc->max_seq = r.seq;
        add_rec(rc, &r);
    }
    return true;
}

/* Steps 3 and 4's input for chunk k of segment s from what its walk
 * decoded: the same records read_entries() would add. */
static void found_entries(struct recovery *rc, uint32_t s, uint32_t k)
{
    const struct found *f = &rc->found[s];
    for (uint32_t i = 0; i < f->n[k]; i++) {
        const struct rec *r = &f->recs[f->first[k] + i];
        if (r->seq > rc->max_seq)
            rc->max_seq = r->seq;
        add_rec(rc, r);
    }
}

/* Steps 3 and 4's input for every live segment, in order: each chunk's
 * reads go out up to RECOVERY_DEPTH chunks ahead of the one applied (and
 * RECOVERY_DATA_INFLIGHT bytes of data), and are applied in order. */
static void read_live_entries(struct recovery *rc, const uint32_t *live, uint32_t nlive)
{
    struct cache *c = rc->c;
    struct chunk_read ring[RECOVERY_DEPTH];
    memset(ring, 0, sizeof ring);
    for (unsigned i = 0; i < RECOVERY_DEPTH; i++)
        ring[i].hdr = tc_alloc_aligned((size_t)TC_MAX_HDR_SECTORS * TC_SECTOR);
    uint32_t li = 0, k = 0;                 /* the next chunk to read */
    uint64_t issued = 0, applied = 0;
    size_t data_inflight = 0;
    uint32_t broken = UINT32_MAX;           /* a segment whose rest cannot be read */
    for (;;) {
        while (issued - applied < RECOVERY_DEPTH) {
            while (li < nlive && k >= space_seg(&c->sp, live[li])->nchunks) {
                li++;
                k = 0;
            }
            if (li == nlive)
                break;
            uint32_t s = live[li];
            const struct chunk_ref *cr = &space_seg(&c->sp, s)->chunks[k];
            uint64_t base = seg_dev_offset(c, s);
            size_t dlen = (size_t)cr->data_sectors * TC_SECTOR;
            bool with_data = dlen > 0 && rc->cseq[s][k] > rc->durable;
            if (with_data && data_inflight > 0 && data_inflight + dlen > RECOVERY_DATA_INFLIGHT)
                break;
            struct chunk_read *rd = &ring[issued % RECOVERY_DEPTH];
            rd->s = s;
            rd->k = k;
            rd->with_data = with_data;
            rd->decoded = !with_data && rc->found[s].first[k] != UNDECODED;
            rd->pending = 0;
            rd->hdr_err = rd->data_err = 0;
            rd->data_io.len = 0;
            if (rd->decoded) {
                issued++;
                k++;
                continue;
            }
            chunk_read_submit(c, rd, &rd->hdr_io, rd->hdr, base + (uint64_t)cr->start * TC_SECTOR,
                              (size_t)cr->hdr_sectors * TC_SECTOR);
            if (with_data) {
                chunk_data_room(rd, dlen);
                chunk_read_submit(c, rd, &rd->data_io, rd->data,
                                  base + (uint64_t)(cr->start + cr->hdr_sectors) * TC_SECTOR,
                                  dlen);
                data_inflight += dlen;
            }
            issued++;
            k++;
        }
        if (applied == issued)
            break;
        struct chunk_read *rd = &ring[applied % RECOVERY_DEPTH];
        while (rd->pending > 0)
            reactor_poll(c->reactor, 100000000ull);
        if (rd->with_data)
            data_inflight -= rd->data_io.len;
        if (rd->decoded)
            found_entries(rc, rd->s, rd->k);
        else if (rd->s != broken && !read_entries(rc, rd))
            broken = rd->s;
        applied++;
    }
    for (unsigned i = 0; i < RECOVERY_DEPTH; i++) {
        free(ring[i].hdr);
        free(ring[i].data);
    }
}

static void grow(struct recovery *rc, uint32_t id)
{
    if (id < rc->cur_cap)
        return;
    uint32_t cap = rc->cur_cap ? rc->cur_cap : 1024;
    while (cap <= id)
        cap *= 2;
    rc->cur_seq = realloc(rc->cur_seq, (size_t)cap * sizeof *rc->cur_seq);
    rc->wt_seq = realloc(rc->wt_seq, (size_t)cap * sizeof *rc->wt_seq);
    rc->below_mark = realloc(rc->below_mark, (size_t)cap);
    if (rc->cur_seq == NULL || rc->wt_seq == NULL || rc->below_mark == NULL)
        abort();
    memset(rc->cur_seq + rc->cur_cap, 0, (size_t)(cap - rc->cur_cap) * sizeof *rc->cur_seq);
    memset(rc->wt_seq + rc->cur_cap, 0, (size_t)(cap - rc->cur_cap) * sizeof *rc->wt_seq);
    memset(rc->below_mark + rc->cur_cap, 0, (size_t)(cap - rc->cur_cap));
    rc->cur_cap = cap;
}

static uint64_t *cur_seq_slot(struct recovery *rc, uint32_t id)
{
    grow(rc, id);
    return &rc->cur_seq[id];
}

/* A clean record: the dirty sectors it names were on the origin when the
 * block's newest fragment was the one it names.  Applied in sequence
 * order, that is exactly the state it meets here. */
static void apply_clean(struct recovery *rc, const struct rec *r)
{
    struct cache *c = rc->c;
    uint32_t id = index_lookup(&c->map.idx, r->oblock);
    if (id == NIL)
        return;
    struct cfrag head = frag_view(&c->map.idx, ce_head(&c->map.idx, id));
    /* Either copy of a mirrored version names it: a log written before
     * the primary was the copy met first may name the other. */
    if (tc_loc(head.seg, head.off) != r->target &&
        (head.mseg == NIL || tc_loc(head.mseg, head.moff) != r->target))
        return;
    map_mark_clean(c, id, &r->valid);
    grow(rc, id);
    if (rc->wt_seq[id] <= r->seq)
        rc->wt_seq[id] = 0;
}

/* Whether the version a linked tombstone (recs[i], target: the version's
 * sequence, TC_ENTRY_TOMBSTONE in ondisk.h) goes with is there, its data
 * whole (one copy is enough).  They share a chunk, so this is only false
 * when that chunk's data was torn: then the pair is ignored, as if never
 * written -- the tombstone alone would drop the block's dirty data the
 * version holds.  The version's sequence is above the tombstone's: it
 * follows in sorted order (after the tombstone's other copy, if any). */
static bool linked_version(const struct recovery *rc, size_t i)
{
    const struct rec *t = &rc->recs[i];
    for (size_t j = i + 1; j < rc->nrecs && rc->recs[j].seq <= t->target; j++) {
        const struct rec *v = &rc->recs[j];
        if (v->seq == t->target && v->type == TC_ENTRY_DATA && v->oblock == t->oblock && !v->bad)
            return true;
    }
    return false;
}

/* For abandon_stop_lost_apply(): the entry's newest write-through
 * version is above the stable mark (step 5 makes it dirty). */
static bool wt_unstable(void *arg, uint32_t id)
{
    const struct recovery *rc = arg;
    return id < rc->cur_cap && rc->wt_seq[id] > rc->wt_stable;
}

/*
 * Clean blocks holding a version below a device failure mark are dropped.
 *
 * The mark makes the failed device's entries below it ignored, its
 * tombstones and CLEAN records included.  failure.c rewrites the blocks
 * that had fragments on the device at the failure, but a block the device
 * held only a tombstone of -- dropped by a write that went around the
 * cache, a write-zeroes or a trim, its older version left in a survivor's
 * log -- is not in the index then, and nothing says so on the survivors:
 * replayed without that tombstone, the older version would come back
 * over the origin's newer data (a flushed write read back as what it
 * replaced).  Which blocks had such a tombstone is not known here (the
 * failed device may not read at all), so every block whose state takes a
 * version below the highest mark is suspect.  A clean one costs only a
 * miss when dropped: the origin holds its data (or newer).  One whose
 * write-through version is above the stable mark is kept (the origin may
 * lack that version; it becomes dirty and is written back, as without a
 * failure), and so is a block with dirty data: its dirty sectors are the
 * newest acknowledged data unless a tombstone dropped them, which only a
 * trim or a write-zeroes does and both allow the older data back (NOT
 * covered: the clean sectors of such a block, which may be stale).
 * The blocks dropped get a tombstone once the start may append
 * (failure.c, cache_mark_tombstones()): a later version of the block,
 * partial, must not meet the dropped one at the next start.
 */
static void untrusted_clean(struct recovery *rc, uint64_t mark)
{
    struct cache *c = rc->c;
    if (mark == 0)
        return;
    uint64_t n = 0;
    for (uint32_t id = 0; id < c->map.idx.used && id < rc->cur_cap; id++) {
        struct centry *e = CE(&c->map.idx, id);
        if (ce_is_free(e) || !rc->below_mark[id] || rc->wt_seq[id] > rc->wt_stable ||
            ce_any_dirty(&c->map.idx, id))
            continue;
        uint64_t ob = ce_oblock(e);
        cache_trace(c, ob, "recovery: clean, a version below failure mark %llu: dropped",
                    (unsigned long long)mark);
        cache_drop_at_start(c, ob);
        n++;
    }
    if (n)
        tc_info("cache: %llu clean blocks holding versions written before a device failure "
                "(log sequence %llu) dropped: that device's tombstones are ignored, so these "
                "versions may be older than the origin's", (unsigned long long)n,
                (unsigned long long)mark);
}

/*
 * A write-through version over lost sectors clears them only if no
 * tombstone of its block follows.  A write-through write goes to the log
 * and the origin at once; the origin may refuse it, and then the block's
 * tombstone follows (writepath.c, tombstone_append()) and the client is
 * told the write failed -- the sectors stay lost, as they do in the
 * running daemon, which clears a lost sector only when a write of it
 * succeeds.  Without this, the version cleared them, the tombstone
 * dropped the block, and a restart after a kill served the origin's
 * older data where the daemon had answered EIO.  A version not followed
 * by a tombstone was acknowledged, or was in flight at the crash (either
 * may be read); a dirty version clears at once (its log entry is the
 * write).  A LOST record of the block states its set after the version
 * (a settle's, recorded once the write was durable): it supersedes what
 * is pending, as a stop's recorded set does (the pending clears are made
 * before it applies: a stop comes after every write it covers ended).
 */
static void wt_lost_defer(struct recovery *rc, const struct rec *r, const struct tc_mask *lm)
{
    struct tc_mask m = *lm, pend;
    mask_and(&m, &r->valid);
    if (mask_empty(&m))
        return;
    if (lost_get(&rc->wt_clears, r->oblock, &pend))
        mask_or(&m, &pend);
    lost_set(&rc->wt_clears, r->oblock, &m);
}

static void wt_lost_clear_one(void *arg, uint64_t oblock, const struct tc_mask *pend)
{
    struct cache *c = arg;
    struct tc_mask lm;
    if (!lost_get(&c->map.lost, oblock, &lm))
        return;
    mask_andnot(&lm, pend);
    lost_set(&c->map.lost, oblock, &lm);
}

/* The clears no tombstone cancelled, made; none left pending. */
static void wt_lost_clear_pending(struct recovery *rc)
{
    lost_foreach(&rc->wt_clears, wt_lost_clear_one, rc->c);
    lost_free(&rc->wt_clears);
}

static void wt_lost_cancel(struct recovery *rc, uint64_t oblock)
{
    struct tc_mask none;
    mask_clear(&none);
    if (lost_get(&rc->wt_clears, oblock, &none)) {
        mask_clear(&none);
        lost_set(&rc->wt_clears, oblock, &none);
    }
}

static void apply(struct recovery *rc)
{
    struct cache *c = rc->c;
    uint64_t mark = 0;
    for (unsigned i = 0; i < TC_MAX_DEVICES; i++)
        mark = TC_MAX(mark, c->failed_seq[i]);
    if (rc->nrecs > 1)
        qsort_r(rc->recs, rc->nrecs, sizeof *rc->recs, cmp_rec, c);
    for (size_t i = 0; i < rc->nrecs; i++) {
        struct rec *r = &rc->recs[i];
        if (c->stop_lost_seq && r->seq >= c->stop_lost_seq && !c->ab.stop_lost_applied) {
            /* The lost set a stop recorded (abandon.c), once. */
            wt_lost_clear_pending(rc);
            abandon_stop_lost_apply(c, wt_unstable, rc);
        }
        /* Written before the cache was abandoned: see abandon.c.  Applied
         * only for the sectors a state file marks (c->ab.log_pass, this
         * once), and then not to the lost set, which is the state file's:
         * those versions are what the loss took, not writes after it. */
        bool before_loss = r->seq < c->abandoned_seq;
        if (before_loss && !c->ab.log_pass)
            continue;
        cache_trace(c, r->oblock, "recovery: %s seq %llu at %u:%u valid %llx dirty %llx flags %x%s",
                    r->type == TC_ENTRY_DATA ? "DATA" : r->type == TC_ENTRY_CLEAN ? "CLEAN" : "TOMB",
                    (unsigned long long)r->seq, r->seg, r->off, (unsigned long long)r->valid.w[0],
                    (unsigned long long)r->dirty.w[0], r->flags, r->bad ? " BAD" : "");
        if (r->type == TC_ENTRY_DATA) {
            if (r->bad)
                continue;
            uint32_t id = index_lookup(&c->map.idx, r->oblock);
            if (id != NIL && *cur_seq_slot(rc, id) == r->seq) {
                /* The second copy of a mirrored fragment. */
                uint32_t f = ce_head(&c->map.idx, id);
                if (frag_mseg(&c->map.idx, f) == NIL)
                    map_add_mirror(c, id, f, r->seg, r->off);
                continue;
            }
            bool fresh = id == NIL;
            struct tc_mask lm;
            if (!before_loss && lost_get(&c->map.lost, r->oblock, &lm)) {
                if (r->flags & TC_ENTRY_WT) {
                    wt_lost_defer(rc, r, &lm);  /* unless its tombstone follows */
                } else {
                    mask_andnot(&lm, &r->valid);    /* written again after the loss */
                    lost_set(&c->map.lost, r->oblock, &lm);
                }
            }
            id = map_add_fragment(c, r->oblock, &r->valid, &r->dirty, r->seg, r->off, NIL, 0,
                                    0, false);
            grow(rc, id);
            if (fresh) {
                rc->wt_seq[id] = 0;
                rc->below_mark[id] = 0;
            }
            rc->below_mark[id] |= r->seq < mark;
            rc->cur_seq[id] = r->seq;
            if (r->flags & TC_ENTRY_WT)
                rc->wt_seq[id] = r->seq;
        } else if (r->type == TC_ENTRY_TOMBSTONE) {
            if (r->target && !linked_version(rc, i))
                continue;       /* its version was torn: neither happened */
            if (!before_loss)
                wt_lost_cancel(rc, r->oblock);
            map_drop_block(c, r->oblock);
        } else if (r->type == TC_ENTRY_LOST) {
            if (!before_loss) {
                wt_lost_cancel(rc, r->oblock);
                lost_set(&c->map.lost, r->oblock, &r->valid);
            }
        } else {
            apply_clean(rc, r);
        }
    }
    wt_lost_clear_pending(rc);
    abandon_stop_lost_apply(c, wt_unstable, rc);
    untrusted_clean(rc, mark);
    /* Write-through versions the origin may lack become dirty. */
    for (uint32_t id = 0; id < c->map.idx.used; id++) {
        struct centry *e = CE(&c->map.idx, id);
        if (ce_is_free(e) || id >= rc->cur_cap || rc->wt_seq[id] <= rc->wt_stable)
            continue;
        struct tc_mask v;
        ce_get_masks(&c->map.idx, id, &v, NULL);
        map_wt_redirty(c, id, &v, rc->wt_seq[id]);
        cache_trace(c, ce_oblock(e), "recovery: write-through seq %llu > stable %llu: dirty",
                    (unsigned long long)rc->wt_seq[id], (unsigned long long)rc->wt_stable);
    }
}

/*
 * The clean-stop record (TC_SB_CLEAN_STOP in ondisk.h): written into the
 * superblocks after the stop's last sync, cleared by the next start before
 * anything is appended.  Every device's superblocks get the same record;
 * a stop that died while writing them left it in some copies only, which
 * is as true.  Records that disagree are not the work of one stop: none
 * is used (the chunk headers' own marks decide, as without a record).
 */
static bool find_stop_record(struct cache *c, struct tc_superblock *rec, bool warn)
{
    const struct tc_superblock *found = NULL;
    for (unsigned d = 0; d < c->ndevs; d++) {
        const struct tc_superblock *sb = &c->devs[d].sb;
        if (!(sb->flags & TC_SB_CLEAN_STOP))
            continue;
        if (found && !sb_stop_record_equal(found, sb)) {
            if (warn)
                tc_warn("the clean-stop records of %s and %s differ; neither is used",
                        c->devs[0].dev->name, c->devs[d].dev->name);
            return false;
        }
        found = sb;
    }
    if (found == NULL)
        return false;
    *rec = *found;
    return true;
}

static bool load_stop_record(struct recovery *rc)
{
    return find_stop_record(rc->c, &rc->rec, true);
}

/*
 * A clean-stop record on some devices of the set only: a stop that died
 * while writing them (the others were cleared by the start before it), or
 * a device put back as its copy from an earlier clean stop after the set
 * ran again (that run's start cleared the record on every device it was
 * given).  The checkpoint is not taken from it then: in the second case
 * it is the older stop's, and would name the older versions as current.
 * The log is scanned, and past_stop_record() tells the two apart.
 */
static bool stop_record_partial(const struct cache *c)
{
    unsigned with = 0;
    for (unsigned d = 0; d < c->ndevs; d++)
        with += (c->devs[d].sb.flags & TC_SB_CLEAN_STOP) != 0;
    return with > 0 && with < c->ndevs;
}

/*
 * After a clean stop whose record names a checkpoint (ondisk.h), the state
 * is read from it instead of from the log (checkpoint.c): true if it was.
 * Not offline: check and dump scan the log (check then compares the
 * checkpoint with what the scan rebuilt).  A checkpoint that cannot be
 * used is said so, and the log is scanned as after a crash.
 */
/*
 * After a start from a checkpoint, which names no chunk numbers, the
 * oldest live group's first chunk is read from the device: the headers
 * of this run then name the live log's first chunk (tail_chunk) from the
 * start, not only once the cleaner has reclaimed every group the
 * checkpoint knew -- which on a large cache may be never -- and a
 * summary of that group gone whole is found at the next start after a
 * crash (missing_chunks()).  The first header of each of its segments, a
 * read each; any that does not check leaves the number unknown (0).
 */
static void learn_tail_chunk(struct cache *c)
{
    c->sp.tail_hint_group = c->sp.tail_hint_chunk = 0;
    if (c->sp.ngroups == 0 || c->offline)
        return;
    const struct group *g = group_at(&c->sp, c->sp.group_tail);
    size_t len = (size_t)TC_MAX_HDR_SECTORS * TC_SECTOR;
    uint8_t *buf = tc_alloc_aligned(len);
    uint64_t first = 0;
    for (unsigned i = 0; i < g->nsegs; i++) {
        uint32_t s = g->segs[i];
        struct tc_chunk_header h;
        char why[128];
        if (space_seg(&c->sp, s)->nchunks == 0)
            continue;
        if (dev_sync_io(seg_cdev(c, s)->dev, TC_DEV_READ, buf, seg_dev_offset(c, s),
                        TC_MIN(len, (size_t)c->seg_sectors * TC_SECTOR), 0) != 0 ||
            chunk_decode(buf, len, c->set_uuid, c->spb, c->seg_sectors, &h, why, sizeof why) < 0 ||
            h.segment != s || h.chunk_sector != 0 || h.group_seq != g->seq) {
            first = 0;
            break;
        }
        if (first == 0 || h.chunk_seq < first)
            first = h.chunk_seq;
    }
    free(buf);
    if (first) {
        c->sp.tail_hint_group = g->seq;
        c->sp.tail_hint_chunk = first;
    }
}

static bool from_checkpoint(struct cache *c)
{
    struct tc_superblock rec;
    if (c->offline || !find_stop_record(c, &rec, false) || !(rec.flags & TC_SB_CHECKPOINT))
        return false;
    if (stop_record_partial(c)) {
        tc_info("cache: the clean-stop record is on some of the set's devices only: the "
                "checkpoint is not used, scanning the log");
        return false;
    }
    const char *force = getenv("TIERCACHE_TEST_FORCE_SCAN");
    if (force && *force && strcmp(force, "0") != 0) {
        tc_info("cache: the checkpoint is not used (TIERCACHE_TEST_FORCE_SCAN is set): "
                "scanning the log");
        return false;
    }
    char why[256];
    if (ckpt_restore(c, &rec, why, sizeof why) < 0) {
        tc_warn("cache: the checkpoint is not used (%s): scanning the log", why);
        return false;
    }
    c->st.recovered_from = "checkpoint";
    c->recovered_durable = c->lg.chunks_issued;     /* a clean stop's: flushed */
    c->st.recovered_entries = c->map.idx.count;
    c->st.recovered_dirty_sectors = c->map.dirty_sectors;
    c->st.recovered_dirty_blocks = c->map.dirty_blocks;
    c->st.last_stop = "clean";
    space_compact_chunk_tables(&c->sp);
    malloc_trim(0);
    return true;
}

/*
 * Chunks missing from the log.  A chunk whose summary is gone whole -- the
 * first sector of a segment zeroed, a cache file truncated and grown back,
 * a write that landed elsewhere -- leaves no header for find_damage() to
 * judge: its segment reads as never written, and older versions of its
 * blocks would come back as current, dirty data a FLUSH covered with them.
 * The chunk numbers tell.  They are issued one after the other, every
 * one issued is written (or fails: failed_chunk below), one group is open
 * at a time and groups are reclaimed oldest first (ondisk.h).  So from the
 * live log's first chunk, which the newest header names (tail_chunk), every
 * number up to the durable mark names a chunk the walks must have found --
 * but for these:
 *
 *  - a start after a crash skips to the next multiple of
 *    TC_SEQ_RESTART_GAP past the newest number plus the gap: a gap of half
 *    the skip or more is such a skip (a run loses far fewer to a crash);
 *  - below a skip, numbers above the durable mark that start found may
 *    never have reached the device, though the durable marks written
 *    since (which jumped the skip) pass them: every chunk of the run above
 *    the skip records that mark (TC_CHUNK_RESTART), which judges the run
 *    below up to it; and, its first number being the multiple of the gap
 *    plus one, the run above is judged from there.  A skip no chunk above
 *    records (an older build's, or every such chunk missing) leaves the
 *    run below it unjudged;
 *  - a chunk whose write failed, or any issued when a device failed, may
 *    be missing for good, its device's failure maybe not recorded: no
 *    number up to the newest such a header names (failed_chunk) is judged;
 *  - numbers up to `cut` (a running checkpoint's, which vouches for them;
 *    0: none) are not judged.
 *
 * Only chunks whose entries count are looked at: the segments walked, of
 * groups at or after the tail, the abandonment and every device's failure
 * mark.  When such a mark is above the tail, or the newest header does not
 * name the live log's first chunk (an older build's, or none known), only
 * the numbers between two chunks found are judged (a number between them
 * is of a group between theirs), not those before the oldest found nor the
 * first of a run above a skip.  Returns how many numbers are missing, the
 * first run of them in *lo..*hi, and in *group the newest group any of
 * them may be of (~0: not known); *bound is the durable mark the newest run
 * is judged by.
 */
struct chunk_no {
    uint64_t seq, group;
};

static int cmp_chunk_no(const void *a, const void *b)
{
    const struct chunk_no *x = a, *y = b;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static uint64_t missing_chunks(const struct recovery *rc, uint64_t cut, uint64_t *lo,
                               uint64_t *hi, uint64_t *bound, uint64_t *group)
{
    struct cache *c = rc->c;
    uint64_t floor = TC_MAX(rc->tail_seq, c->abandoned_seq);
    for (unsigned i = 0; i < TC_MAX_DEVICES; i++)
        floor = TC_MAX(floor, c->failed_seq[i]);
    /* Numbers up to `from` are not judged.  Anchored, every number above
     * it is of a live group, which the walks must have found: the newest
     * header names the live log's first chunk, and no mark above the tail
     * leaves groups out.  Otherwise only numbers between two chunks found
     * are (a number between them is of a group between theirs). */
    bool anchored = rc->tail_chunk > 0 && floor == rc->tail_seq;
    uint64_t from = TC_MAX(cut, rc->failed_chunk);
    if (anchored)
        from = TC_MAX(from, rc->tail_chunk - 1);
    size_t n = anchored ? 1 : 0;
    for (uint32_t s = 0; s < c->sp.nsegs; s++)
        n += space_seg(&c->sp, s)->nchunks;
    struct chunk_no *no = tc_xmalloc((n ? n : 1) * sizeof *no);
    n = 0;
    if (anchored && from > 0)
        no[n++] = (struct chunk_no){ from, 0 };
    for (uint32_t s = 0; s < c->sp.nsegs; s++) {
        const struct segment *sg = space_seg(&c->sp, s);
        if (sg->nchunks == 0 || sg->seq == 0 || sg->seq < floor ||
            devfail_untrusted(c, sg->dev, sg->seq) || (rc->only && !rc->only[s]))
            continue;
        for (uint32_t k = 0; k < sg->nchunks; k++)
            no[n++] = (struct chunk_no){ rc->cseq[s][k], sg->seq };
    }
    *bound = TC_MIN(rc->durable, rc->max_chunk_seq);
    *lo = *hi = *group = 0;
    if (n == 0) {
        free(no);
        return 0;
    }
    qsort(no, n, sizeof *no, cmp_chunk_no);
    /* The durable mark each chunk's run is judged by, from the newest run
     * down: below a skip, the one the run above it records. */
    uint64_t *run_bound = tc_xmalloc(n * sizeof *run_bound);
    uint64_t cur = *bound;
    for (size_t i = n; i-- > 0;) {
        run_bound[i] = cur;
        if (i > 0 && no[i].seq - no[i - 1].seq >= TC_SEQ_RESTART_GAP / 2) {
            const struct restart_mark *rm = run_known(rc, run_first(no[i].seq));
            cur = rm ? rm->durable : 0;     /* unjudged, unless the run above says */
        }
    }
    uint64_t missing = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t a = no[i].seq;
        if (a < from)
            continue;
        bool last = i + 1 == n;
        uint64_t b = last ? run_bound[i] + 1 : no[i + 1].seq;   /* past the last: its mark */
        if (b <= a + 1)
            continue;
        /* Judged: a + 1 .. top, and (across a skip) first .. b - 1. */
        uint64_t top = TC_MIN(b - 1, run_bound[i]), first = 0;
        if (b - a >= TC_SEQ_RESTART_GAP / 2) {
            /* A skip: the run below up to its durable mark; the run above
             * from its first chunk, when its chunks say where it began and
             * every number there is of a live group. */
            top = TC_MIN(top, a + TC_SEQ_RESTART_GAP / 2);
            if (anchored && !last && run_known(rc, run_first(b)))
                first = TC_MAX(run_first(b), from + 1);
        }
        uint64_t runs[2][2] = { { a + 1, top }, { first, first ? TC_MIN(b - 1, run_bound[i + 1]) : 0 } };
        for (unsigned r = 0; r < 2; r++) {
            if (runs[r][0] == 0 || runs[r][1] < runs[r][0])
                continue;
            if (missing == 0) {
                *lo = runs[r][0];
                *hi = runs[r][1];
            }
            missing += runs[r][1] - runs[r][0] + 1;
            /* A missing chunk is of the group of the chunk found after
             * it, or an older one; past the newest found, of any. */
            *group = TC_MAX(*group, last ? UINT64_MAX : no[i + 1].group);
        }
    }
    free(run_bound);
    free(no);
    return missing;
}

/*
 * After a recorded clean stop nothing was in flight, so the log must be
 * exactly what the record counts: the newest chunk, the tail it records,
 * and every chunk of the live groups.  Anything less is damage to chunk
 * summaries that were durable -- whatever recovery could not see of it
 * (a damaged header that no longer looks like this log's, the newest
 * chunks with the clean-stop flag and the flushed marks) -- and the blocks
 * they described are unknown: serve refuses, check lists it.
 *
 * Unless the damage already found accounts for every missing chunk: each
 * damaged summary find_damage() reported stands for at least one chunk
 * (of its segment's group, which it reported), so when the newest chunk
 * and the tail match and the chunks found plus those findings make the
 * record's count exactly, no chunk is missing anywhere else.  Then the
 * damage is what was reported, with its groups: damage confined to groups
 * below an abandonment does not refuse the start, and salvage keeps the
 * bound of the groups found damaged (salvage.c).  Any other difference --
 * more chunks missing than findings, a failed read of the log (which hides
 * an unknown number), another newest chunk or tail -- may be chunks of any
 * group the walks never saw: the damage group is unknown, and salvage
 * writes back nothing that damage could have made older.
 */
static void verify_stop_record(struct recovery *rc, const uint32_t *live, uint32_t nlive)
{
    struct cache *c = rc->c;
    uint64_t chunks = 0;
    for (uint32_t i = 0; i < nlive; i++) {
        struct segment *sg = space_seg(&c->sp, live[i]);
        /* A failed device's segments from before its failure are in live
         * only for the replay of marked sectors (c->ab.log_pass): the
         * stop did not count them. */
        if (!devfail_untrusted(c, sg->dev, sg->seq))
            chunks += sg->nchunks;
    }
    bool ends = rc->max_chunk_seq == rc->rec.stop_chunk_seq &&
                rc->tail_seq == rc->rec.stop_tail_seq;
    if (ends && chunks == rc->rec.stop_chunks)
        return;
    if (ends && !rc->damage_uncounted && rc->damaged_chunks > 0 &&
        chunks + rc->damaged_chunks == rc->rec.stop_chunks)
        return;             /* every missing chunk is a damaged one already reported */
    damage_group(rc, 0);
    add_damage(rc, "the log does not match the clean stop recorded in the superblock (newest "
               "chunk %llu, tail %llu, %llu chunks in live groups): found newest chunk %llu, "
               "tail %llu, %llu chunks; chunk summaries that were durable are damaged, and the "
               "blocks they described are unknown", (unsigned long long)rc->rec.stop_chunk_seq,
               (unsigned long long)rc->rec.stop_tail_seq, (unsigned long long)rc->rec.stop_chunks,
               (unsigned long long)rc->max_chunk_seq, (unsigned long long)rc->tail_seq,
               (unsigned long long)chunks);
}

static bool group_has_dev(struct cache *c, uint32_t slot, unsigned dev)
{
    struct group *g = group_at(&c->sp, slot);
    for (unsigned k = 0; k < g->nsegs; k++)
        if (space_seg(&c->sp, g->segs[k])->dev == dev)
            return true;
    return false;
}

/* By group sequence, then by segment number. */
static int cmp_live(const void *a, const void *b, void *arg)
{
    struct space *sp = arg;
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    uint64_t sx = space_seg(sp, x)->seq, sy = space_seg(sp, y)->seq;
    if (sx != sy)
        return sx < sy ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* The group ring from the live segments (those of groups at or after the
 * tail that hold chunks, in segment order), ordered by sequence then
 * segment number, each one closed; live is reordered so.  A segment that
 * no writer would have put in its group is left out of it: its chunks are
 * dropped (it is free) and it stays in live with none. */
void recovery_groups(struct cache *c, uint32_t *live, uint32_t nlive)
{
    if (nlive > 1)
        qsort_r(live, nlive, sizeof *live, cmp_live, &c->sp);
    uint64_t prev = 0;
    uint32_t slot = NIL;
    for (uint32_t i = 0; i < nlive; i++) {
        struct segment *sg = space_seg(&c->sp, live[i]);
        if (slot == NIL || sg->seq != prev)
            slot = space_push_group(&c->sp, sg->seq);
        prev = sg->seq;
        if (group_has_dev(c, slot, sg->dev)) {
            /* A group has one segment on each device (and room for no
             * more): a second one of the same device and sequence is
             * damage no writer makes.  Its chunks are ignored; it is free. */
            tc_warn("%s: segment %u claims group %llu, which already has a segment on this "
                    "device; ignored", seg_cdev(c, live[i])->dev->name, live[i],
                    (unsigned long long)sg->seq);
            segment_clear_chunks(sg);
            continue;
        }
        space_group_add_seg(&c->sp, slot, live[i]);
        sg->state = SEG_CLOSED;
    }
}

/*
 * Devices of one set whose clean-stop records name different newest chunks
 * were stopped at different times: one stop writes the same record on
 * every device, a stop that died while writing them left some devices
 * without one, and every start clears them all before it appends.  So one
 * device is an older copy of itself (restored from a backup or a snapshot,
 * a disk image copied back): its log lacks the chunks the set wrote after,
 * and a scan would take its older versions of their blocks as current --
 * acknowledged, flushed writes replaced by older data, with no error.  The
 * start is refused, naming the device with the older record.  check and
 * dump (offline) go on, and check lists the difference as a problem.
 */
static int stale_device(struct cache *c, char *err, size_t errlen)
{
    unsigned newest = c->ndevs, oldest = c->ndevs;
    for (unsigned d = 0; d < c->ndevs; d++) {
        const struct tc_superblock *sb = &c->devs[d].sb;
        if (!(sb->flags & TC_SB_CLEAN_STOP))
            continue;
        if (newest == c->ndevs || sb->stop_chunk_seq > c->devs[newest].sb.stop_chunk_seq)
            newest = d;
        if (oldest == c->ndevs || sb->stop_chunk_seq < c->devs[oldest].sb.stop_chunk_seq)
            oldest = d;
    }
    if (newest == c->ndevs ||
        c->devs[newest].sb.stop_chunk_seq == c->devs[oldest].sb.stop_chunk_seq)
        return 0;
    snprintf(err, errlen,
             "%s (device %u of the set) is older than the rest of its cache set: its clean-stop "
             "record names newest chunk %llu, %s's names %llu, and one stop writes the same "
             "record on every device.  It is an older copy of that device (restored from a "
             "backup or a snapshot?): its log lacks what the set wrote after, and served, the "
             "cache would return older data than its clients were acknowledged.  Give the "
             "device as the set last stopped it; to give the set up, 'tiercache format --force "
             "--discard-dirty' (its dirty data is lost)",
             c->devs[oldest].dev->name, oldest,
             (unsigned long long)c->devs[oldest].sb.stop_chunk_seq, c->devs[newest].dev->name,
             (unsigned long long)c->devs[newest].sb.stop_chunk_seq);
    return -1;
}

/*
 * A stop writes its record after its last sync, and the next start clears
 * it on every device before it appends: a log that reaches past the
 * record's newest chunk was written by a run after that stop, and the
 * devices still carrying the record are older copies of themselves (the
 * case stale_device() cannot see: the others carry none).  The first of
 * them is named in err; -1.
 */
static int past_stop_record(const struct recovery *rc, char *err, size_t errlen)
{
    const struct cache *c = rc->c;
    if (c->offline || !rc->stop_record || !stop_record_partial(c) ||
        rc->max_chunk_seq <= rc->rec.stop_chunk_seq)
        return 0;
    unsigned old = 0;
    while (old < c->ndevs && !(c->devs[old].sb.flags & TC_SB_CLEAN_STOP))
        old++;
    snprintf(err, errlen,
             "%s (device %u of the set) is older than the rest of its cache set: its clean-stop "
             "record names newest chunk %llu, but the set's log reaches chunk %llu, written "
             "after that stop (the next start clears the record on every device).  It is an "
             "older copy of that device (restored from a backup or a snapshot?): its log lacks "
             "what the set wrote after, and served, the cache would return older data than its "
             "clients were acknowledged.  Give the device as the set last used it; to give the "
             "set up, 'tiercache format --force --discard-dirty' (its dirty data is lost)",
             c->devs[old].dev->name, old, (unsigned long long)rc->rec.stop_chunk_seq,
             (unsigned long long)rc->max_chunk_seq);
    return -1;
}

/*
 * Each device's newest chunk, for the sequence record (seqrec.c): the
 * newest whose header checks, in any segment (a free one's chunks are
 * still what the device holds), and the newest up to the durable mark,
 * from which the log's count of each device's durable chunk starts, and
 * the newest at or below the sequence record's chunk (seqrec.c).  And
 * each segment's first and newest chunk, which the allocator keeps the
 * record's chunks by (space.h, invariant 22).
 */
static void devices_newest(struct recovery *rc)
{
    struct cache *c = rc->c;
    uint64_t durable = TC_MIN(rc->durable, rc->max_chunk_seq);
    c->newest_chunks_known = true;
    for (unsigned d = 0; d < c->ndevs; d++)
        c->devs[d].newest_chunk = c->devs[d].newest_at_bound = 0;
    for (uint32_t s = 0; s < c->sp.nsegs; s++) {
        struct segment *sg = space_seg(&c->sp, s);
        sg->first_chunk = sg->top_chunk = 0;
        for (uint32_t k = 0; k < sg->nchunks; k++) {
            uint64_t q = rc->cseq[s][k];
            if (sg->first_chunk == 0 || q < sg->first_chunk)
                sg->first_chunk = q;
            sg->top_chunk = TC_MAX(sg->top_chunk, q);
            c->devs[sg->dev].newest_chunk = TC_MAX(c->devs[sg->dev].newest_chunk, q);
            if (q <= c->seqrec_bound)
                c->devs[sg->dev].newest_at_bound = TC_MAX(c->devs[sg->dev].newest_at_bound, q);
            if (q <= durable)
                c->lg.dev_written[sg->dev] = c->lg.dev_flushed[sg->dev] =
                    TC_MAX(c->lg.dev_flushed[sg->dev], q);
        }
    }
}

static void rc_init(struct recovery *rc, struct cache *c)
{
    memset(rc, 0, sizeof *rc);
    rc->c = c;
    rc->hdr = tc_alloc_aligned((size_t)TC_MAX_HDR_SECTORS * TC_SECTOR);
    rc->stop = tc_xmalloc((size_t)c->sp.nsegs * sizeof *rc->stop);
    rc->last_chunk = tc_xcalloc(c->sp.nsegs, sizeof *rc->last_chunk);
    rc->walks = tc_xcalloc(c->sp.nsegs, sizeof *rc->walks);
    rc->cseq = tc_xcalloc(c->sp.nsegs, sizeof *rc->cseq);
    rc->cseq_cap = tc_xcalloc(c->sp.nsegs, sizeof *rc->cseq_cap);
    rc->found = tc_xcalloc(c->sp.nsegs, sizeof *rc->found);
    rc->torn_group = tc_xcalloc(c->sp.nsegs, sizeof *rc->torn_group);
}

static void rc_free(struct recovery *rc)
{
    struct cache *c = rc->c;
    free(rc->stop);
    free(rc->torn_group);
    free(rc->torn_data);
    free(rc->last_chunk);
    free(rc->walks);
    for (uint32_t s = 0; s < c->sp.nsegs; s++) {
        free(rc->cseq[s]);
        free(rc->found[s].recs);
        free(rc->found[s].first);
        free(rc->found[s].n);
    }
    free(rc->found);
    free(rc->cseq);
    free(rc->cseq_cap);
    free(rc->recs);
    free(rc->cur_seq);
    free(rc->wt_seq);
    free(rc->below_mark);
    free(rc->restarts);
    free(rc->hdr);
}

static int wipe_torn(struct recovery *rc, char *err, size_t errlen);

/*
 * After a start that found no clean stop (or none at all): the numbers the
 * run before may have issued past the newest chunk found are skipped
 * (TC_SEQ_RESTART_GAP, ondisk.h says why), and the log owes the chunk that
 * records the skip (log_write_restart_mark(), before anything else is
 * appended).  Offline commands append nothing and skip nothing, nor does
 * a set on memory devices (replay's), which starts empty in every process:
 * no run before it left anything.  -1 with err when the skip would pass
 * TC_SEQ_LIMIT.
 */
static bool skips_numbers(const struct cache *c)
{
    return !c->offline && !c->in_memory;
}

static int skip_unseen_numbers(struct cache *c, uint64_t *next_seq, uint64_t *newest_chunk,
                               char *err, size_t errlen)
{
    if (!skips_numbers(c))
        return 0;
    if (TC_MAX(*next_seq, *newest_chunk) >= TC_SEQ_LIMIT - 2 * TC_SEQ_RESTART_GAP) {
        snprintf(err, errlen, "the log's sequence numbers are used up: the next would be %llu, "
                 "and a start after a crash skips %llu of them, past the limit of %llu; 'tiercache "
                 "flush' cannot help, but 'tiercache check --salvage --origin ORIGIN' writes the "
                 "dirty data back, and 'tiercache format --force' starts a new log",
                 (unsigned long long)*next_seq, (unsigned long long)TC_SEQ_RESTART_GAP,
                 (unsigned long long)TC_SEQ_LIMIT);
        return -1;
    }
    *next_seq += TC_SEQ_RESTART_GAP;
    /* Chunk numbers skip to a multiple of the gap: the run's first chunk
     * is then known from any of its chunks (missing_chunks()). */
    *newest_chunk = (*newest_chunk / TC_SEQ_RESTART_GAP + 2) * TC_SEQ_RESTART_GAP;
    return 0;
}

static int drop_torn_data(struct recovery *rc, char *err, size_t errlen);

/*
 * A start after a crash from the newest running checkpoint
 * (checkpoint.c, "running checkpoints"; ondisk.h, version 6): the state
 * the checkpoint holds, and the log written after its cut replayed onto
 * it -- the segments whose first chunk is newer than the cut (the
 * survey tells them from one read each), those of the group that was
 * open at the cut, and those the checkpoint does not name whose first
 * summary has the chunk magic, claims a group at or after its tail and
 * does not check (torn by the crash or damaged: judged as the scan
 * judges them), walked as the scan walks them, their entries past the
 * cut applied as the scan applies them (apply()).  What it rebuilds is
 * what the full scan would, because:
 *
 *  - the checkpoint is the scan's state up to the cut (R1 in
 *    checkpoint.c), every entry before the cut below its next_seq and
 *    every one after at or above it: the replay applies exactly those;
 *  - what it knows of groups the cleaner reclaimed since (below the tail
 *    the newest chunk records) is dropped: their segments, and every
 *    fragment in them, as the scan never sees them.  A block's fragments
 *    there are its oldest (groups are reclaimed oldest first, and every
 *    entry of a group is older than the next group's), so the sectors its
 *    other fragments serve are served as before; what the cleaner kept of
 *    a reclaimed group (hot blocks, dirty data copied forward, LOST
 *    records) it appended again after the cut, with new sequence
 *    numbers, and the replay applies it.  A checkpoint holding lost
 *    records is not used past a reclaim (a record is not tied to a
 *    segment: which of them the scan would still find is not known);
 *  - every other segment it names live still starts with the chunk of
 *    its group, or was reopened by a group opened since, or starts with
 *    no chunk that checks (taken since for a newer checkpoint, or a
 *    group's first chunk torn) -- then its own group must be among the
 *    reclaimed.  A reopened segment whose first chunk is damaged is then
 *    taken for free, where the scan could report the damage: the
 *    trade-off P5 in checkpoint.c takes knowingly;
 *  - the chunks it records in the walked segments are found again, and
 *    every chunk found there after them is past the cut.
 *
 * Anything else -- a slot that does not check (the older one is tried), a
 * segment's first header unreadable, a mark or record the log below it
 * does not carry (an abandonment, a device's failure, a stop's lost set
 * in the state file), damage in the walked segments, a segment it names
 * changed though its group is live -- and the log is scanned whole, with
 * one line saying why.
 * Damage to a chunk header written before the cut is not looked for (as
 * after a clean stop with its checkpoint); check audits the whole log.
 * The chunks the replay judged torn by the crash are erased before
 * serving, as after the scan (wipe_torn()).
 * 1: rebuilt; 0: nothing changed, scan; -1: rebuilt, but the erase
 * failed (err says why): the start is refused.
 */
static int from_running_checkpoint(struct cache *c, char *err, size_t errlen)
{
    bool any = false;
    for (unsigned d = 0; d < c->ndevs; d++)
        any |= sb_has_run_ckpt(&c->devs[d].sb);
    struct tc_superblock rec;
    if (c->offline || !any || find_stop_record(c, &rec, false))
        return 0;
    const char *force = getenv("TIERCACHE_TEST_FORCE_SCAN");
    if (force && *force && strcmp(force, "0") != 0) {
        tc_info("cache: the running checkpoint is not used (TIERCACHE_TEST_FORCE_SCAN is "
                "set): scanning the log");
        return 0;
    }
    char why[256] = "";
    bool marks = c->stop_lost_seq || c->abandoned_seq;
    for (unsigned i = 0; i < TC_MAX_DEVICES; i++)
        marks |= c->failed_seq[i] != 0;
    if (marks) {
        tc_info("cache: the running checkpoint is not used (the superblocks or the state file "
                "carry an abandonment, a device failure or a stop's lost set, which the scan "
                "applies): scanning the log");
        return 0;
    }
    struct ckpt_loaded *l = ckpt_run_load(c, why, sizeof why);
    if (l == NULL) {
        tc_warn("cache: no running checkpoint is used (%s): scanning the log", why);
        return 0;
    }
    why[0] = 0;         /* from here on: the first doubt */
    uint64_t gen;
    const struct tc_ckpt *ck = ckpt_loaded_head(l, &gen);
    uint32_t nsegs = c->sp.nsegs;
    struct seg_first *first = tc_xcalloc(nsegs, sizeof *first);
    uint8_t *walk = tc_xcalloc(nsegs, 1);
    uint8_t *reopened = tc_xcalloc(nsegs, 1);
    uint8_t *dropped = tc_xcalloc(nsegs, 1);
    uint32_t *extra = tc_xcalloc(nsegs, sizeof *extra);
    uint32_t nextra = 0;
    survey_segments(c, first);
    uint64_t gmax = 0;
    for (uint32_t s = 0; s < nsegs; s++) {
        uint64_t seq;
        uint32_t n;
        if (ckpt_loaded_seg(l, s, &seq, &n))
            gmax = TC_MAX(gmax, seq);
    }
    for (uint32_t s = 0; s < nsegs && !why[0]; s++) {
        uint64_t seq;
        uint32_t n;
        bool live = ckpt_loaded_seg(l, s, &seq, &n);
        const struct seg_first *f = &first[s];
        if (f->what == SURVEY_UNREADABLE)
            snprintf(why, sizeof why, "segment %u's first chunk header cannot be read", s);
        else if (live && f->what == SURVEY_CHUNK && f->group_seq >= ck->next_seq)
            walk[s] = reopened[s] = 1;  /* by a group opened since: reclaimed (checked below) */
        else if (live && f->what != SURVEY_CHUNK)
            reopened[s] = 1;    /* no chunk that checks at its start: reclaimed and taken
                                   since (a newer checkpoint's segments, a group's first
                                   chunk torn), or damaged -- then its group is live */
        else if (live && (f->what != SURVEY_CHUNK || f->group_seq != seq))
            snprintf(why, sizeof why, "segment %u of group %llu was reclaimed or changed since "
                     "the checkpoint", s, (unsigned long long)seq);
        else if (live)
            walk[s] = seq == gmax;
        else if (f->what == SURVEY_CHUNK && f->group_seq >= ck->tail_seq)
            walk[s] = 1;        /* opened since the cut, or empty at it */
        else if (f->what == SURVEY_NONE && f->chunk_magic && f->group_seq >= ck->tail_seq)
            walk[s] = 1;        /* a first chunk that does not check, of a group that may
                                   have been opened since: judged as the scan judges it
                                   (find_damage()), damage if it was durable, else torn
                                   by the crash and its header erased (wipe_torn()) */
    }
    struct recovery rc;
    rc_init(&rc, c);
    rc.only = walk;
    struct cache_stats st0 = c->st;
    char *damage0 = c->damage ? strdup(c->damage) : NULL;
    uint64_t dmax0 = c->damage_group_max;
    if (!why[0]) {
        walk_all(&rc);
        rc.durable = TC_MAX(rc.durable, ck->chunk_seq);
        if (rc.max_chunk_seq < ck->chunk_seq)
            snprintf(why, sizeof why, "the log's newest chunk %llu is older than the "
                     "checkpoint's %llu", (unsigned long long)rc.max_chunk_seq,
                     (unsigned long long)ck->chunk_seq);
        else if (rc.tail_seq < ck->tail_seq)
            snprintf(why, sizeof why, "the log's tail, group %llu, is older than the "
                     "checkpoint's %llu", (unsigned long long)rc.tail_seq,
                     (unsigned long long)ck->tail_seq);
    }
    /* The groups the cleaner reclaimed since the cut: those below the
     * tail the newest chunk records.  The checkpoint's segments of them
     * are dropped, with every fragment in them; a segment it names that a
     * newer group reopened must be one of them. */
    uint64_t tail = rc.tail_seq;
    uint32_t ndropped = 0;
    for (uint32_t s = 0; s < nsegs && !why[0]; s++) {
        uint64_t seq;
        uint32_t n;
        if (!ckpt_loaded_seg(l, s, &seq, &n))
            continue;
        if (seq < tail) {
            dropped[s] = 1;
            ndropped++;
        } else if (reopened[s]) {
            snprintf(why, sizeof why, "segment %u of group %llu changed since the checkpoint "
                     "though its group is still live", s, (unsigned long long)seq);
        }
        if (dropped[s] && !(reopened[s] && first[s].what == SURVEY_CHUNK) && walk[s]) {
            /* Walked as the group open at the cut, since reclaimed:
             * nothing of it is replayed. */
            struct segment *sg = space_seg(&c->sp, s);
            segment_clear_chunks(sg);
            sg->seq = 0;
            sg->fill = 0;
            walk[s] = 0;
        }
    }
    if (!why[0] && ndropped && ckpt_loaded_nlost(l))
        snprintf(why, sizeof why, "the cleaner reclaimed groups since, and it holds lost "
                 "records, which only the scan places");
    for (uint32_t s = 0; s < nsegs && !why[0]; s++) {
        if (!walk[s])
            continue;
        const struct segment *sg = space_seg(&c->sp, s);
        uint64_t seq;
        uint32_t n = 0;
        bool live = ckpt_loaded_seg(l, s, &seq, &n) && !dropped[s];
        if (!live)
            n = 0;
        if (live && !ckpt_loaded_chunks_match(l, c, s)) {
            snprintf(why, sizeof why, "segment %u does not hold the chunks the checkpoint "
                     "records", s);
            break;
        }
        for (uint32_t k = 0; k < sg->nchunks; k++)
            if ((k < n) != (rc.cseq[s][k] <= ck->chunk_seq)) {
                snprintf(why, sizeof why, "segment %u: chunk %llu is on the wrong side of the "
                         "checkpoint's cut", s, (unsigned long long)rc.cseq[s][k]);
                break;
            }
    }
    /* Each device's newest chunk, for the sequence record (seqrec.c):
     * in its segment of the newest groups, which the replay walked. */
    uint64_t dev_newest[TC_MAX_DEVICES] = { 0 };
    for (uint32_t s = 0; s < nsegs && !why[0]; s++) {
        const struct segment *sg = space_seg(&c->sp, s);
        for (uint32_t k = 0; walk[s] && k < sg->nchunks; k++)
            dev_newest[sg->dev] = TC_MAX(dev_newest[sg->dev], rc.cseq[s][k]);
    }
    for (unsigned d = 0; d < c->ndevs && !why[0]; d++)
        if (dev_newest[d] == 0)
            snprintf(why, sizeof why, "device %u has no chunk in the groups replayed", d);
    if (!why[0]) {
        uint64_t seen_durable, seen_newest;
        do {
            seen_durable = rc.durable;
            seen_newest = rc.max_chunk_seq;
            for (uint32_t s = 0; s < nsegs; s++)
                if (walk[s])
                    find_damage(&rc, s);
        } while (rc.durable != seen_durable || rc.max_chunk_seq != seen_newest);
        if (c->st.recovery_damaged != st0.recovery_damaged ||
            c->st.recovery_damage_ignored != st0.recovery_damage_ignored ||
            rc.tail_seq != tail)
            snprintf(why, sizeof why, "the log written after it is damaged or moved");
    }
    uint64_t lo, hi, durable_bound = 0, missing_group;
    if (!why[0] && missing_chunks(&rc, ck->chunk_seq, &lo, &hi, &durable_bound, &missing_group))
        snprintf(why, sizeof why, "the log written after it lacks chunks %llu..%llu, though "
                 "they were durable", (unsigned long long)lo, (unsigned long long)hi);
    if (why[0]) {
        /* As it was: the walked segments hold nothing, the counters and
         * the damage as before. */
        for (uint32_t s = 0; s < nsegs; s++) {
            if (!walk[s])
                continue;
            struct segment *sg = space_seg(&c->sp, s);
            segment_clear_chunks(sg);
            sg->seq = 0;
            sg->fill = 0;
        }
        c->st = st0;
        free(c->damage);
        c->damage = damage0;
        c->damage_group_max = dmax0;
        tc_warn("cache: the running checkpoint %llu (newest chunk %llu) is not used (%s): "
                "scanning the log", (unsigned long long)gen, (unsigned long long)ck->chunk_seq,
                why);
        rc_free(&rc);
        ckpt_loaded_free(l);
        free(first);
        free(walk);
        free(reopened);
        free(dropped);
        free(extra);
        return 0;
    }
    free(damage0);
    /* The walked segments the checkpoint does not know, of live groups. */
    uint32_t *wl = tc_xcalloc(nsegs, sizeof *wl);
    uint32_t nwl = 0;
    for (uint32_t s = 0; s < nsegs; s++) {
        if (!walk[s])
            continue;
        struct segment *sg = space_seg(&c->sp, s);
        uint64_t seq;
        uint32_t n;
        bool live = ckpt_loaded_seg(l, s, &seq, &n) && !dropped[s];
        if (sg->nchunks > 0 && sg->seq >= rc.tail_seq && sg->seq > 0) {
            if (!live)
                extra[nextra++] = s;
        } else if (!live) {
            segment_clear_chunks(sg);
            walk[s] = 0;
        }
    }
    ckpt_loaded_apply(c, l, walk, dropped, extra, nextra);
    /* The entries of the walked segments, in group order, past the cut. */
    for (uint32_t i = 0; i < c->sp.ngroups; i++) {
        struct group *g = group_at(&c->sp, (c->sp.group_tail + i) % c->sp.groups_cap);
        for (unsigned k = 0; k < g->nsegs; k++)
            if (walk[g->segs[k]])
                wl[nwl++] = g->segs[k];
    }
    read_live_entries(&rc, wl, nwl);
    size_t kept = 0;
    for (size_t i = 0; i < rc.nrecs; i++)
        if (rc.recs[i].seq >= ck->next_seq)
            rc.recs[kept++] = rc.recs[i];
    rc.nrecs = kept;
    uint64_t replayed = kept;
    c->replaying = c->sp.replaying = true;
    apply(&rc);
    c->replaying = c->sp.replaying = false;
    uint64_t newest = TC_MAX(rc.max_chunk_seq, ck->chunk_seq);
    uint64_t next_seq = TC_MAX(TC_MAX(rc.max_seq, newest) + 1, ck->next_seq);
    next_seq = TC_MAX(next_seq, rc.wt_stable + 1);     /* as in recovery_run() */
    uint64_t first_live = next_seq;
    for (uint32_t i = 0; i < c->sp.ngroups; i++) {
        struct group *g = group_at(&c->sp, (c->sp.group_tail + i) % c->sp.groups_cap);
        first_live = TC_MIN(first_live, g->seq);
    }
    space_bound_chunks(&c->sp, newest);
    /* A replay after a running checkpoint follows a crash, always. */
    uint64_t issued = newest;
    int wiped = skip_unseen_numbers(c, &next_seq, &issued, err, errlen);
    if (wiped < 0)
        goto done;              /* the numbers are used up: err says so */
    if (c->sp.ngroups == 0)
        first_live = next_seq;
    log_recovered(&c->lg, next_seq, issued, first_live, rc.wt_stable, skips_numbers(c));
    c->lg.restart_durable = TC_MAX(durable_bound, ck->chunk_seq);
    learn_tail_chunk(c);
    c->lg.recovered_newest = newest;
    c->recovered_durable = TC_MIN(rc.durable, newest);
    /* And the newest up to the durable mark, as devices_newest() counts
     * it: exact when a walked chunk of the device is below the mark (the
     * segments not walked hold older groups' chunks only); else none
     * known (0), which the sequence record takes as less, never more. */
    c->newest_chunks_known = true;
    for (unsigned d = 0; d < c->ndevs; d++)
        c->devs[d].newest_chunk = dev_newest[d];
    for (uint32_t s = 0; s < nsegs; s++) {
        const struct segment *sg = space_seg(&c->sp, s);
        for (uint32_t k = 0; walk[s] && k < sg->nchunks; k++)
            if (rc.cseq[s][k] <= c->recovered_durable)
                c->lg.dev_written[sg->dev] = c->lg.dev_flushed[sg->dev] =
                    TC_MAX(c->lg.dev_flushed[sg->dev], rc.cseq[s][k]);
    }
    c->st.recovered_from = "checkpoint+log";
    c->st.recovered_entries = c->map.idx.count;
    c->st.recovered_dirty_sectors = c->map.dirty_sectors;
    c->st.recovered_dirty_blocks = c->map.dirty_blocks;
    c->st.last_stop = rc.clean_stop ? "clean" : "unclean";
    uint32_t nwalked = 0;
    for (uint32_t s = 0; s < nsegs; s++)
        nwalked += walk[s];
    tc_info("cache: from the running checkpoint %llu (newest chunk %llu), %u segment%s of the "
            "log after it replayed (%llu entries), %u of groups reclaimed since dropped",
            (unsigned long long)gen, (unsigned long long)ck->chunk_seq, nwalked,
            nwalked == 1 ? "" : "s", (unsigned long long)replayed, ndropped);
    if (c->st.recovery_unflushed)
        tc_info("cache: %llu entries of unflushed chunks did not fully reach the device "
                "before the stop and were ignored", (unsigned long long)c->st.recovery_unflushed);
    /* Before anything is appended, and only for a start that serves. */
    wiped = drop_torn_data(&rc, err, errlen);
    if (wiped == 0)
        wiped = wipe_torn(&rc, err, errlen);
done:
    free(wl);
    rc_free(&rc);
    ckpt_loaded_free(l);
    free(first);
    free(walk);
    free(reopened);
    free(dropped);
    free(extra);
    space_compact_chunk_tables(&c->sp);
    malloc_trim(0);
    return wiped < 0 ? -1 : 1;
}

/* Whether recovery applied a whole copy of block oblock's version seq. */
static bool whole_version(const struct recovery *rc, uint64_t oblock, uint64_t seq)
{
    for (size_t j = 0; j < rc->nrecs; j++) {
        const struct rec *v = &rc->recs[j];
        if (v->seq == seq && v->type == TC_ENTRY_DATA && v->oblock == oblock && !v->bad)
            return true;
    }
    return false;
}

/*
 * The entries of a chunk whose data did not fully reach the device (its
 * header did: the chunk was written after the durable mark and torn by
 * the crash) are ignored, as if never written (read_entries()).  That
 * must hold for every later start too, but nothing else on the device
 * says so: the log goes on, its flushed marks pass the chunk's sequence,
 * and the next start after a crash takes the chunk for durable and no
 * longer reads its data -- the torn versions came back, newest of their
 * blocks, and shadowed the versions they were ignored for: a flushed
 * write read EIO (the torn sectors fail their checksums) or the origin's
 * older data.  So before serving, each such chunk's header is written
 * again without the entries whose data fails, nor the tombstones linked
 * to a version that no whole copy is left of (apply() ignores both), and
 * the device is flushed, before anything is appended.  Its other entries,
 * its data CRCs and its size stay as they were.  A crash in the middle
 * leaves a header that does not check, past the durable mark: judged torn
 * by the next start, as the crash's own tail (nothing of it was served).
 * A failure to write refuses the start.
 */
static int drop_torn_data(struct recovery *rc, char *err, size_t errlen)
{
    struct cache *c = rc->c;
    if (c->offline || c->damage || rc->ntorn_data == 0)
        return 0;
    uint8_t *hdr = tc_alloc_aligned((size_t)TC_MAX_HDR_SECTORS * TC_SECTOR);
    uint8_t *out = tc_alloc_aligned((size_t)TC_MAX_HDR_SECTORS * TC_SECTOR);
    uint8_t *data = NULL;
    size_t data_cap = 0;
    struct tc_entry *ents = NULL;
    uint32_t *crcs = NULL;
    int ret = 0;
    bool flush[TC_MAX_DEVICES] = { false };
    for (size_t t = 0; t < rc->ntorn_data && ret == 0; t++) {
        uint32_t s = rc->torn_data[t].s;
        const struct segment *sg = space_seg(&c->sp, s);
        if (rc->torn_data[t].k >= sg->nchunks)
            continue;           /* its segment was dropped since: no start reads it */
        const struct chunk_ref *cr = &sg->chunks[rc->torn_data[t].k];
        struct tc_dev *dev = seg_cdev(c, s)->dev;
        uint64_t base = seg_dev_offset(c, s);
        uint64_t hoff = base + (uint64_t)cr->start * TC_SECTOR;
        size_t hlen = (size_t)cr->hdr_sectors * TC_SECTOR;
        size_t dlen = (size_t)cr->data_sectors * TC_SECTOR;
        struct tc_chunk_header h;
        char why[128];
        int e = dev_sync_io(dev, TC_DEV_READ, hdr, hoff, hlen, 0);
        if (e == 0 && dlen > data_cap) {
            free(data);
            data = tc_alloc_aligned(dlen);
            data_cap = dlen;
        }
        if (e == 0)
            e = dev_sync_io(dev, TC_DEV_READ, data, hoff + hlen, dlen, 0);
        if (e) {
            snprintf(err, errlen, "%s: reading again the chunk at byte %llu (segment %u, sector "
                     "%u), torn by the crash, failed: %s", dev->name, (unsigned long long)hoff,
                     s, cr->start, strerror(-e));
            ret = -1;
            break;
        }
        if (chunk_decode(hdr, hlen, c->set_uuid, c->spb, c->seg_sectors, &h, why,
                         sizeof why) < 0 || h.data_sectors != cr->data_sectors) {
            snprintf(err, errlen, "%s: the chunk at byte %llu (segment %u, sector %u), torn by "
                     "the crash, reads otherwise than at the start's scan: %s", dev->name,
                     (unsigned long long)hoff, s, cr->start, why);
            ret = -1;
            break;
        }
        ents = realloc(ents, ((size_t)h.nr_entries + 1) * sizeof *ents);
        crcs = realloc(crcs, ((size_t)h.data_sectors + 1) * sizeof *crcs);
        if (ents == NULL || crcs == NULL)
            abort();
        for (uint32_t i = 0; i < h.data_sectors; i++)
            crcs[i] = chunk_data_crc(hdr, &h, c->spb, i);
        uint32_t kept = 0, dropped = 0;
        for (uint32_t i = 0; i < h.nr_entries; i++) {
            struct tc_entry *en = &ents[kept];
            if (chunk_entry(hdr, &h, c->spb, i, en, why, sizeof why) < 0) {
                dropped++;      /* malformed: every start ignores it alike */
                continue;
            }
            bool torn = false;
            if (en->type == TC_ENTRY_DATA) {
                unsigned n = mask_count(&en->valid);
                for (unsigned x = 0; x < n && !torn; x++)
                    torn = en->data_sector + x >= h.data_sectors ||
                           tc_crc32c(0, data + (size_t)(en->data_sector + x) * TC_SECTOR,
                                     TC_SECTOR) != crcs[en->data_sector + x];
            } else if (en->type == TC_ENTRY_TOMBSTONE && en->target) {
                torn = !whole_version(rc, en->oblock, en->target);
            }
            if (torn)
                dropped++;
            else
                kept++;
        }
        if (dropped == 0)
            continue;
        h.nr_entries = kept;
        chunk_encode(out, &h, ents, crcs, c->spb);
        e = dev_sync_io(dev, TC_DEV_WRITE, out, hoff, hlen, 0);
        if (e) {
            snprintf(err, errlen, "%s: writing the header of the chunk at byte %llu (segment %u, "
                     "sector %u) without its %u entries torn by the crash failed: %s", dev->name,
                     (unsigned long long)hoff, s, cr->start, dropped, strerror(-e));
            ret = -1;
            break;
        }
        flush[space_seg_dev(&c->sp, s)] = true;
        tc_info("cache: %s: segment %u, chunk at sector %u: %u entr%s whose data the crash tore "
                "dropped from its header", dev->name, s, cr->start, dropped,
                dropped == 1 ? "y" : "ies");
    }
    for (unsigned i = 0; i < c->ndevs && ret == 0; i++) {
        if (!flush[i])
            continue;
        int e = dev_sync_io(c->devs[i].dev, TC_DEV_FLUSH, NULL, 0, 0, 0);
        if (e) {
            snprintf(err, errlen, "%s: flushing the rewritten headers of chunks torn by the "
                     "crash failed: %s", c->devs[i].dev->name, strerror(-e));
            ret = -1;
        }
    }
    free(hdr);
    free(out);
    free(data);
    free(ents);
    free(crcs);
    return ret;
}

/*
 * A chunk judged torn at a start (find_damage(): no flushed mark covered
 * it) must stay torn for every later start.  But its header may be
 * recognisably this incarnation's, and a later chunk of its segment may
 * have reached the device before the crash (a volatile write cache keeps
 * no order between flushes); both stay in a group that is still live.
 * The log goes on, and its flushed marks soon pass their sequences: the
 * next start after a crash then took the torn chunk for a durable one
 * damaged since, and refused to serve.  So before serving, the header at
 * the walk's end and the headers of the later chunks of the incarnation
 * are overwritten with zeroes, and the device flushed, before anything is
 * appended: from then on the segment ends where this start found it
 * ending.  Nothing reads them: the walk ended before them, so their
 * entries were never applied.  A failure to erase refuses the start (the
 * next one judges the same chunks again).  Offline commands write nothing,
 * nor does a start that refuses a damaged log.  Both ways of starting
 * after a crash call it: the full scan, and the replay after a running
 * checkpoint, which judges the segments it walks (the group open at its
 * cut and those opened since: every chunk the crash could tear was
 * written after the cut's sync, a segment's first chunk that does not
 * check among them), as the scan judges them.
 */
static int wipe_torn(struct recovery *rc, char *err, size_t errlen)
{
    struct cache *c = rc->c;
    if (c->offline || c->damage)
        return 0;                   /* nothing written: no start serves from it */
    uint8_t *zero = NULL, *hdr = NULL;
    int rc_err = 0;
    for (uint32_t s = 0; s < c->sp.nsegs && rc_err == 0; s++) {
        uint64_t group = rc->torn_group[s];
        uint32_t at = rc->stop[s];
        if (group == 0 || at == UINT32_MAX)
            continue;
        if (zero == NULL) {
            zero = tc_alloc_aligned(TC_SECTOR);
            memset(zero, 0, TC_SECTOR);
            hdr = tc_alloc_aligned(TC_SECTOR);
        }
        struct tc_dev *dev = seg_cdev(c, s)->dev;
        uint64_t base = seg_dev_offset(c, s);
        unsigned wiped = 0;
        for (uint32_t i = at; i < c->seg_sectors && rc_err == 0; i++) {
            uint64_t off = base + (uint64_t)i * TC_SECTOR;
            if (i > at) {
                if (dev_sync_io(dev, TC_DEV_READ, hdr, off, TC_SECTOR, 0) != 0)
                    continue;       /* unreadable: no start can read it either */
                if (le64_get(hdr + CH_OFF_MAGIC) != TC_CHUNK_MAGIC ||
                    le32_get(hdr + CH_OFF_SEGMENT) != s ||
                    le32_get(hdr + CH_OFF_CHUNK_SECTOR) != i ||
                    le64_get(hdr + CH_OFF_GROUP_SEQ) != group)
                    continue;
            }
            int e = dev_sync_io(dev, TC_DEV_WRITE, zero, off, TC_SECTOR, 0);
            if (e) {
                snprintf(err, errlen, "%s: erasing the header of a chunk torn by the crash "
                         "(segment %u, sector %u, byte %llu) failed: %s", dev->name, s, i,
                         (unsigned long long)off, strerror(-e));
                rc_err = -1;
            }
            wiped++;
        }
        if (rc_err == 0) {
            int e = dev_sync_io(dev, TC_DEV_FLUSH, NULL, 0, 0, 0);
            if (e) {
                snprintf(err, errlen, "%s: flushing the erased headers of chunks torn by the "
                         "crash (segment %u) failed: %s", dev->name, s, strerror(-e));
                rc_err = -1;
            }
        }
        if (rc_err == 0)
            tc_info("cache: %s: segment %u (group %llu) ends at sector %u, torn by the crash: "
                    "%u chunk header%s from there on erased", dev->name, s,
                    (unsigned long long)group, at, wiped, wiped == 1 ? "" : "s");
    }
    free(zero);
    free(hdr);
    return rc_err;
}

/* A log found damaged is not served from (the scan and the replay after
 * a running checkpoint alike: the replay's reads of chunks past the
 * durable mark may find it): -1 with err. */
static int refuse_damaged(struct cache *c, char *err, size_t errlen)
{
    if (c->damage && !c->offline) {
        snprintf(err, errlen, "the cache's log is damaged: %llu chunk summar%s that had "
                 "reached the device no longer check or cannot be read, so it cannot tell which of its blocks are "
                 "current or which dirty data is lost; refusing to serve from it rather than "
                 "return stale data.  'tiercache check' lists the damage; 'tiercache check "
                 "--salvage --origin ORIGIN' writes the dirty data that is intact and newest "
                 "back to the origin, after which 'tiercache format --force --discard-dirty' "
                 "makes the cache usable again.  First: %.*s",
                 (unsigned long long)c->st.recovery_damaged,
                 c->st.recovery_damaged == 1 ? "y" : "ies",
                 (int)strcspn(c->damage, "\n"), c->damage);
        return -1;
    }
    return 0;
}

int recovery_run(struct cache *c, char *err, size_t errlen)
{
    if (!c->offline && stale_device(c, err, errlen) < 0)
        return -1;
    if (from_checkpoint(c)) {
        learn_tail_chunk(c);
        return 0;
    }
    int from_run = from_running_checkpoint(c, err, errlen);
    if (from_run < 0)
        return -1;
    if (from_run > 0)
        return refuse_damaged(c, err, errlen);
    c->st.recovered_from = "scan";
    struct recovery rc;
    rc_init(&rc, c);
    walk_all(&rc);
    /* A clean stop recorded in the superblocks: every chunk up to its
     * newest was durable, whatever the headers that said so still say. */
    rc.stop_record = load_stop_record(&rc);
    if (rc.stop_record)
        rc.durable = TC_MAX(rc.durable, rc.rec.stop_chunk_seq);
    /* A walk resumed past damage can find the newest chunks, which move
     * the durable mark and the tail: segments judged torn before that are
     * judged again, until nothing moves. */
    uint64_t seen_durable, seen_newest;
    do {
        seen_durable = rc.durable;
        seen_newest = rc.max_chunk_seq;
        for (uint32_t s = 0; s < c->sp.nsegs; s++)
            find_damage(&rc, s);
    } while (rc.durable != seen_durable || rc.max_chunk_seq != seen_newest);
    /* Looked for when no damage was found: damage already found stands
     * for the chunks its summaries described, whose numbers are missing
     * too, and the start is refused anyway (check lists that damage; its
     * groups bound what salvage trusts). */
    uint64_t lo, hi, durable_bound, missing_group;
    uint64_t missing = missing_chunks(&rc, 0, &lo, &hi, &durable_bound, &missing_group);
    if (missing && c->damage == NULL && !rc.damage_uncounted) {
        damage_group(&rc, missing_group);
        rc.damaged_chunks += missing;
        char range[64];
        if (lo == hi)
            snprintf(range, sizeof range, "chunk %llu", (unsigned long long)lo);
        else
            snprintf(range, sizeof range, "chunks %llu..%llu", (unsigned long long)lo,
                     (unsigned long long)hi);
        add_damage(&rc, "the log lacks %s (%llu missing in all), though the log was durable up "
                   "to chunk %llu: chunk summaries that had reached the cache devices are gone "
                   "(overwritten, zeroed, or a cache file truncated), and the blocks they "
                   "described are unknown", range, (unsigned long long)missing,
                   (unsigned long long)durable_bound);
    }
    int older_copy = past_stop_record(&rc, err, errlen);
    devices_newest(&rc);

    if (c->trace_block == UINT64_MAX - 1)
        tc_info("trace recovery: newest chunk %llu: tail %llu, durable up to %llu",
                (unsigned long long)rc.max_chunk_seq, (unsigned long long)rc.tail_seq,
                (unsigned long long)rc.durable);
    /* Live segments: groups at or after the tail, ordered by sequence. */
    uint32_t *live = tc_xmalloc((size_t)c->sp.nsegs * sizeof *live);
    uint32_t nlive = 0;
    for (uint32_t s = 0; s < c->sp.nsegs; s++) {
        struct segment *sg = space_seg(&c->sp, s);
        /* A segment of a device that failed later, from before the
         * failure, is free: its entries may be older than what the
         * origin received since (abandon.c, devfail_record()).  But for
         * the replay of the lost sectors a state file marks
         * (c->ab.log_pass): a marked version may be there -- dirty data
         * whose rescue was pending when the last device failed, drained
         * from it --, and one found there is written back only if it
         * gives the digest recorded (abandon_log_marks()); the index
         * this builds serves nothing else. */
        if (sg->nchunks > 0 && sg->seq >= rc.tail_seq && sg->seq > 0 &&
            (c->ab.log_pass || !devfail_untrusted(c, sg->dev, sg->seq))) {
            live[nlive++] = s;
        } else {
            segment_clear_chunks(sg);
        }
    }
    recovery_groups(c, live, nlive);
    if (rc.stop_record)
        verify_stop_record(&rc, live, nlive);
    read_live_entries(&rc, live, nlive);
    space_collect_free(&c->sp);
    c->replaying = c->sp.replaying = true;
    apply(&rc);
    c->replaying = c->sp.replaying = false;

    uint64_t next_seq = TC_MAX(rc.max_seq, rc.max_chunk_seq) + 1;
    /* Every write-through version from now on must be above the stable
     * mark the newest header recorded, or the next start takes it for on
     * the origin.  The mark may exceed every sequence the live log shows:
     * a detach ends every group, and the stop before an attach records
     * the mark its last origin flush set (the old log's next sequence,
     * past the chunks' own), so the attached log numbered its entries from
     * below it again, and a write-through version the origin then lost
     * was recovered clean after a crash. */
    next_seq = TC_MAX(next_seq, rc.wt_stable + 1);
    /* Entries written from now on must be trusted at the next start. */
    next_seq = TC_MAX(next_seq, c->abandoned_seq);
    next_seq = TC_MAX(next_seq, c->stop_lost_seq);
    for (unsigned i = 0; i < TC_MAX_DEVICES; i++)
        next_seq = TC_MAX(next_seq, c->failed_seq[i]);
    uint64_t newest = rc.max_chunk_seq;
    bool unclean = !rc.clean_stop && !rc.stop_record;
    if (unclean && skip_unseen_numbers(c, &next_seq, &newest, err, errlen) < 0) {
        free(live);
        rc_free(&rc);
        return -1;
    }
    log_recovered(&c->lg, next_seq, newest,
                  nlive ? space_seg(&c->sp, live[0])->seq : next_seq, rc.wt_stable,
                  unclean && skips_numbers(c));
    c->lg.restart_durable = durable_bound;
    c->lg.recovered_newest = rc.max_chunk_seq;
    c->recovered_durable = TC_MIN(rc.durable, rc.max_chunk_seq);
    c->st.recovered_entries = c->map.idx.count;
    c->st.recovered_dirty_sectors = c->map.dirty_sectors;
    c->st.recovered_dirty_blocks = c->map.dirty_blocks;
    c->st.last_stop = rc.max_chunk_seq == 0 && !rc.stop_record ? "none"
                      : rc.clean_stop || rc.stop_record ? "clean" : "unclean";
    if (c->st.recovery_unflushed)
        tc_info("cache: %llu entries of unflushed chunks did not fully reach the device "
                "before the stop and were ignored", (unsigned long long)c->st.recovery_unflushed);
    if (c->st.recovery_malformed)
        tc_warn("cache: %llu damaged entries were ignored",
                (unsigned long long)c->st.recovery_malformed);
    free(live);
    /* Before anything is appended, and only for a start that serves. */
    int wiped = older_copy < 0 ? 0 : drop_torn_data(&rc, err, errlen);
    if (older_copy >= 0 && wiped == 0)
        wiped = wipe_torn(&rc, err, errlen);
    rc_free(&rc);
    /* The temporaries above were allocated among the chunk tables, which
     * stay: moved now, into the space the temporaries left, and freed
     * pages returned, so that what recovery needed does not stay resident
     * (each stranded chunk table would keep a page of them). */
    space_compact_chunk_tables(&c->sp);
    malloc_trim(0);
    if (older_copy < 0 || wiped < 0)
        return -1;
    return refuse_damaged(c, err, errlen);
}
