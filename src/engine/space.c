/*
 * Segments and groups: the cache's space.
 *
 * Segments are numbered across all devices.  Free segments of each device
 * are kept on a stack.  A group takes one free segment from every device
 * that has one, so appends spread over all devices (the interleave), and
 * the ring of groups is the log's order:
 *
 *   ring:  [oldest] [ ... ] [newest = open]
 *             ^ the cleaner retires this one
 *
 * A retired segment whose reads are still in flight (pinned) becomes free
 * only when the last read ends.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/space.h"
#include "util/assert.h"
#include "util/log.h"
#include "util/misc.h"

/* A segment retired while pinned: freed by the last unpin. */
#define SEG_RETIRED_PINNED 3

struct group *group_at(struct space *sp, uint32_t slot) { return &sp->groups[slot]; }

uint32_t group_slot_of_oldest(const struct space *sp) { return sp->group_tail; }

struct group *oldest_group(struct space *sp)
{
    return sp->ngroups ? &sp->groups[sp->group_tail] : NULL;
}

/* Keeps invariant 6: only a segment nothing reads or writes is free. */
static void push_free(struct space *sp, uint32_t s)
{
    struct segment *sg = space_seg(sp, s);
    TC_ASSERT_ALWAYS(sg->pins == 0 && sg->writes_inflight == 0);
    sg->state = SEG_FREE;
    sg->seq = 0;
    sg->group = NIL;
    sg->fill = 0;
    sg->live = 0;
    segment_clear_chunks(sg);
    if (sp->dev_failed[sg->dev])
        return;             /* a failed device's space is not space */
    struct free_stack *fs = &sp->stacks[sg->dev];
    fs->segs[fs->n++] = s;
    sp->free_segs++;
}

static void freed(struct space *sp)
{
    if (sp->ev.freed)
        sp->ev.freed(sp->ev.ctx);
}

void space_init(struct space *sp, uint32_t nsegs, uint32_t seg_sectors, unsigned ndevs)
{
    TC_ASSERT_ALWAYS(ndevs <= TC_MAX_DEVICES);
    sp->nsegs = nsegs;
    sp->segs = tc_xcalloc(sp->nsegs, sizeof *sp->segs);
    sp->groups_cap = sp->nsegs + 1;
    sp->groups = tc_xcalloc(sp->groups_cap, sizeof *sp->groups);
    sp->group_segs = tc_xcalloc((size_t)sp->groups_cap * ndevs, sizeof *sp->group_segs);
    for (uint32_t i = 0; i < sp->groups_cap; i++)
        sp->groups[i].segs = sp->group_segs + (size_t)i * ndevs;
    sp->open_group = NIL;
    sp->ndevs = ndevs;
    sp->seg_sectors = seg_sectors;
}

void space_add_dev(struct space *sp, unsigned dev, uint32_t first_seg, uint32_t nsegs)
{
    TC_ASSERT_ALWAYS(dev < sp->ndevs && sp->stacks[dev].segs == NULL &&
                     first_seg <= sp->nsegs && nsegs <= sp->nsegs - first_seg);
    sp->stacks[dev].segs = tc_xmalloc(nsegs * sizeof(uint32_t));
    sp->dev_nsegs[dev] = nsegs;
    sp->dev_first[dev] = first_seg;
    for (uint32_t i = 0; i < nsegs; i++) {
        struct segment *sg = space_seg(sp, first_seg + i);
        sg->dev = (uint8_t)dev;
        sg->group = NIL;
    }
}

void space_collect_free(struct space *sp)
{
    for (uint32_t s = sp->nsegs; s-- > 0;)
        if (sp->segs[s].state == SEG_FREE && sp->segs[s].group == NIL) {
            sp->segs[s].state = SEG_CLOSED;    /* push_free sets FREE and counts it */
            push_free(sp, s);
        }
}

bool space_hold(struct space *sp, uint32_t s)
{
    struct segment *sg = space_seg(sp, s);
    struct free_stack *fs = &sp->stacks[sg->dev];
    if (sg->state != SEG_FREE || sg->held)
        return false;
    for (uint32_t i = 0; i < fs->n; i++) {
        if (fs->segs[i] != s)
            continue;
        memmove(&fs->segs[i], &fs->segs[i + 1], (fs->n - 1 - i) * sizeof *fs->segs);
        fs->n--;
        sp->free_segs--;
        sg->held = true;
        return true;
    }
    return false;
}

void space_release(struct space *sp, uint32_t s)
{
    struct segment *sg = space_seg(sp, s);
    TC_ASSERT_ALWAYS(sg->held && sg->state == SEG_FREE);
    sg->held = false;
    sg->state = SEG_CLOSED;     /* push_free sets FREE and counts it */
    push_free(sp, s);
    /* Back to the bottom of its stack, where checkpoints take theirs and
     * the log takes last (checkpoint.c, run_take()), so that the log's
     * order is not changed by a checkpoint.  On top, the log's next group
     * took the segments of a checkpoint just refused: refused by the
     * device (a full file system under a cache file), they were refused
     * to the log too and the device failed, where at the bottom only the
     * next checkpoint meets them again. */
    struct free_stack *fs = &sp->stacks[sg->dev];
    if (!sp->dev_failed[sg->dev] && fs->n > 1) {
        memmove(&fs->segs[1], &fs->segs[0], (fs->n - 1) * sizeof *fs->segs);
        fs->segs[0] = s;
    }
    freed(sp);
}

void space_fini(struct space *sp)
{
    for (unsigned d = 0; d < TC_MAX_DEVICES; d++) {
        free(sp->stacks[d].segs);
        sp->stacks[d].segs = NULL;
    }
    /* sp->segs is NULL when an attach failed before space_init(). */
    for (uint32_t s = 0; sp->segs && s < sp->nsegs; s++) {
        free(sp->segs[s].chunks);
    }
    free(sp->segs);
    free(sp->groups);
    free(sp->group_segs);
    sp->segs = NULL;
    sp->groups = NULL;
    sp->group_segs = NULL;
}

uint32_t space_push_group(struct space *sp, uint64_t seq)
{
    uint32_t slot = (sp->group_tail + sp->ngroups) % sp->groups_cap;
    struct group *g = &sp->groups[slot];
    *g = (struct group){ .seq = seq, .segs = g->segs };
    sp->ngroups++;
    return slot;
}

void space_group_add_seg(struct space *sp, uint32_t slot, uint32_t s)
{
    struct group *g = &sp->groups[slot];
    TC_ASSERT_ALWAYS(g->nsegs < sp->ndevs);
    g->segs[g->nsegs++] = s;
    sp->segs[s].group = slot;
    sp->segs[s].seq = g->seq;
}

unsigned space_devs_in_service(const struct space *sp)
{
    unsigned n = 0;
    for (unsigned d = 0; d < sp->ndevs; d++)
        n += !sp->dev_failed[d];
    return n;
}

uint32_t space_segs_in_service(const struct space *sp)
{
    uint32_t n = 0;
    for (unsigned d = 0; d < sp->ndevs; d++)
        if (!sp->dev_failed[d])
            n += sp->dev_nsegs[d];
    return n;
}

/* Shared among the devices in service, and recomputed when one fails
 * (space_drop_free()): the failed device's share went with its free
 * segments, and the survivors must hold the whole reserve between them
 * (a segment each: space_drop_free() sizes it to the devices in service)
 * -- sized with the failed device counted, the survivor of two kept only
 * half of it as its own.  The shares add up to at most the reserve, so
 * an append above the reserve always finds a device with more than its
 * share (log.c, ensure_group()). */
uint32_t space_dev_reserve(const struct space *sp)
{
    unsigned in_service = space_devs_in_service(sp);
    if (sp->reserve_shared || in_service == 0 || sp->reserve_segs < in_service)
        return 0;
    return sp->reserve_segs / in_service;
}

bool space_open_group(struct space *sp, uint64_t *next_seq)
{
    return space_open_group_above(sp, next_seq, 0);
}

/* Invariant 22: segment s of device d may hold a chunk the sequence
 * record names for d. */
static bool held_back(const struct space *sp, unsigned d, uint32_t s)
{
    const struct segment *sg = &sp->segs[s];
    for (unsigned k = 0; k < 2; k++) {
        uint64_t g = sp->guard[d][k];
        if (g != 0 && g <= sg->top_chunk && (sg->chunks_bounded || sg->first_chunk <= g))
            return true;
    }
    return false;
}

bool space_seg_held_back(const struct space *sp, uint32_t s)
{
    return held_back(sp, space_seg_dev(sp, s), s);
}

/* The slot in device d's free stack of the segment to take: the topmost
 * not held back, or -1 when all are. */
static int pick_free(const struct space *sp, unsigned d)
{
    const struct free_stack *fs = &sp->stacks[d];
    for (uint32_t i = fs->n; i-- > 0;)
        if (!held_back(sp, d, fs->segs[i]))
            return (int)i;
    return -1;
}

/* Each device's slot in its free stack to take (-1: none) into at[];
 * returns how many give one, and in *held how many hold back all they
 * have. */
static unsigned pick_all(const struct space *sp, uint32_t keep, int *at, unsigned *held)
{
    unsigned n = 0;
    *held = 0;
    for (unsigned d = 0; d < sp->ndevs; d++) {
        at[d] = -1;
        if (sp->dev_failed[d] || sp->stacks[d].n <= keep)
            continue;
        at[d] = pick_free(sp, d);
        if (at[d] < 0)
            (*held)++;
        else
            n++;
    }
    return n;
}

bool space_open_group_above(struct space *sp, uint64_t *next_seq, uint32_t keep)
{
    uint32_t picked[TC_MAX_DEVICES];
    int at[TC_MAX_DEVICES];
    unsigned held;
    TC_ASSERT(sp->open_group == NIL);
    unsigned n = pick_all(sp, keep, at, &held);
    /* Every device that could give a segment holds back all it has: the
     * record is rewritten without the entries that hold them; if it
     * cannot be, the top of each stack is taken all the same. */
    if (n == 0 && held > 0 && sp->ev.unguard) {
        sp->ev.unguard(sp->ev.ctx);
        n = pick_all(sp, keep, at, &held);
    }
    if (n == 0 && held > 0) {
        for (unsigned d = 0; d < sp->ndevs; d++) {
            if (sp->dev_failed[d] || sp->stacks[d].n <= keep)
                continue;
            at[d] = (int)sp->stacks[d].n - 1;
            sp->guard_forced++;
            n++;
            tc_warn("cache: segment %u is opened again although the sequence record may "
                    "still name a chunk in it (the record could not be rewritten): a power "
                    "loss now may make the next start take its device for an older copy",
                    sp->stacks[d].segs[at[d]]);
        }
    } else {
        sp->guard_skips += held;
    }
    if (n == 0)
        return false;
    n = 0;
    for (unsigned d = 0; d < sp->ndevs; d++) {
        if (at[d] < 0)
            continue;
        struct free_stack *fs = &sp->stacks[d];
        uint32_t i = (uint32_t)at[d];
        picked[n++] = fs->segs[i];
        /* Taken from within the stack: the rest keep their order. */
        memmove(&fs->segs[i], &fs->segs[i + 1], (fs->n - 1 - i) * sizeof *fs->segs);
        fs->n--;
        sp->free_segs--;
    }
    uint32_t slot = space_push_group(sp, (*next_seq)++);
    struct group *g = &sp->groups[slot];
    g->open = true;
    for (unsigned i = 0; i < n; i++) {
        struct segment *sg = space_seg(sp, picked[i]);
        sg->state = SEG_OPEN;
        sg->fill = 0;
        sg->live = 0;
        sg->first_chunk = sg->top_chunk = 0;    /* its old chunks are written over */
        sg->chunks_bounded = false;
        segment_clear_chunks(sg);
        space_group_add_seg(sp, slot, picked[i]);
    }
    sp->open_group = slot;
    return true;
}

uint64_t space_tail_chunk(const struct space *sp, uint64_t tail_seq)
{
    for (uint32_t k = 0; k < sp->ngroups; k++) {
        const struct group *g = &sp->groups[(sp->group_tail + k) % sp->groups_cap];
        if (g->seq < tail_seq)
            continue;
        if (g->seq == sp->tail_hint_group && sp->tail_hint_chunk)
            return sp->tail_hint_chunk;
        uint64_t first = 0;
        for (unsigned i = 0; i < g->nsegs; i++) {
            const struct segment *sg = &sp->segs[g->segs[i]];
            if (sg->chunks_bounded)
                return 0;
            if (sg->first_chunk != 0 && (first == 0 || sg->first_chunk < first))
                first = sg->first_chunk;
        }
        return first;
    }
    return 0;
}

bool space_chunk_live(const struct space *sp, unsigned dev, uint64_t chunk)
{
    for (uint32_t s = sp->dev_first[dev]; s < sp->dev_first[dev] + sp->dev_nsegs[dev]; s++) {
        const struct segment *sg = &sp->segs[s];
        if (sg->group != NIL && sg->first_chunk != 0 &&
            sg->first_chunk <= chunk && chunk <= sg->top_chunk)
            return true;
    }
    return false;
}

void space_bound_chunks(struct space *sp, uint64_t newest)
{
    uint64_t hi = newest;
    for (uint32_t k = sp->ngroups; k-- > 0;) {
        const struct group *g = &sp->groups[(sp->group_tail + k) % sp->groups_cap];
        uint64_t n = 0;
        for (unsigned i = 0; i < g->nsegs; i++)
            n += sp->segs[g->segs[i]].nchunks;
        for (unsigned i = 0; i < g->nsegs; i++) {
            struct segment *sg = &sp->segs[g->segs[i]];
            sg->top_chunk = sg->nchunks ? hi : 0;
            sg->first_chunk = sg->nchunks && hi >= n ? TC_MAX(hi - n + 1, 1) : 0;
            sg->chunks_bounded = true;
        }
        hi = hi >= n ? hi - n : 0;
    }
    for (uint32_t s = 0; s < sp->nsegs; s++)
        if (sp->segs[s].group == NIL) {
            sp->segs[s].top_chunk = hi;
            sp->segs[s].first_chunk = 0;
            sp->segs[s].chunks_bounded = true;
        }
}

void space_close_group(struct space *sp)
{
    if (sp->open_group == NIL)
        return;
    sp->groups[sp->open_group].open = false;
    sp->open_group = NIL;
}

void space_drop_free(struct space *sp, unsigned dev)
{
    sp->dev_failed[dev] = true;
    sp->free_segs -= sp->stacks[dev].n;
    sp->stacks[dev].n = 0;
    /* The reserve is a segment per device in service, a group (cache.c,
     * watermarks()): a group no longer takes a segment of this one.  Kept
     * at its size, the survivors held the failed device's segment too: a
     * survivor of 4 segments kept 2 free and appends wedged after some
     * 200 writes, one of 2 segments kept both and the cleaner retired
     * groups in a loop (thousands a second) while every write waited
     * (devfail-small.test). */
    unsigned in_service = space_devs_in_service(sp);
    if (sp->reserve_segs > in_service)
        sp->reserve_segs = in_service;
}

/* The oldest group, closed.  That it may go (invariant 5) is the
 * cleaner's to know (cleaner.c: tail_synced()), and so is dropping the
 * CRCs of its segments. */
void space_free_group(struct space *sp)
{
    struct group *g = &sp->groups[sp->group_tail];
    TC_ASSERT_ALWAYS(sp->ngroups > 0 && !g->open);
    for (unsigned i = 0; i < g->nsegs; i++) {
        uint32_t s = g->segs[i];
        struct segment *sg = space_seg(sp, s);
        sg->group = NIL;
        if (sg->pins > 0 || sg->writes_inflight > 0)
            sg->state = SEG_RETIRED_PINNED;
        else
            push_free(sp, s);
    }
    sp->group_tail = (sp->group_tail + 1) % sp->groups_cap;
    sp->ngroups--;
    sp->groups_freed++;
}

/* The free-space test.  The cleaner starts below the low mark and stops at
 * the high one.  Free segments are room nothing is cached in: above the reserve, one group of
 * working room (appends go on while the cleaner reclaims the oldest) plus
 * 1/64 of the cache, so a small cache (64 segments, one device) keeps 3
 * segments free, one of 63 keeps 2, and a large one about 1.6 %.
 *
 * The high mark adds 1/64 of the cache again: a large cache reclaims in
 * batches.  Below 64 segments that is nothing, and the cleaner reclaims
 * one group each time the appends take the working room: a batch of one
 * more group kept a segment of a 64 MiB cache (1.6 % of it) empty half of
 * the time, and free space holds no cached data.  The working room is the
 * same either way (the low mark), so appends still go on while the
 * cleaner reclaims.
 *
 * The group and the cache are those of the devices in service: a group
 * takes no segment of a failed device, and none of its segments is ever
 * free again (space_drop_free()).  Counted with a failed device, the
 * marks asked the survivors for room they do not have: a survivor of 7
 * segments beside a failed one of 1023 was to keep 19 free (1 + 2 + 16)
 * and at most 6 ever are, so the cleaner stayed active for good and, the
 * volume idle, retired group after group -- dropping what it held, and
 * copying the blocks the policy kept, some 100 groups a second until
 * those lapsed too (multi/devfail-marks.test). */
uint32_t space_low_water(const struct space *sp)
{
    uint32_t segs = space_segs_in_service(sp);
    uint32_t low = sp->reserve_segs + space_devs_in_service(sp);
    /* A running checkpoint is written into free segments beyond the
     * reserve (checkpoint.c, write_into()).  With the log full the cleaner
     * kept no more than the mark free, each group opened took it below,
     * and a checkpoint found room only by chance (write-through on 2 x 16
     * MiB of 1 MiB segments, four writers: none in 120 s).  So the mark
     * keeps the last checkpoint's room (ckpt_room) in place of the 1/64 of
     * the log where that is less -- elsewhere the 1/64 already holds it
     * and the data keeps every segment it had -- unless the mark would
     * then pass a quarter of the log (there a checkpoint finds room only
     * at times). */
    uint32_t slack = segs / 64;
    if (sp->ckpt_room > slack && low + sp->ckpt_room <= segs / 4)
        slack = sp->ckpt_room;
    return low + slack;
}

uint32_t space_high_water(const struct space *sp)
{
    return space_low_water(sp) + space_segs_in_service(sp) / 64;
}

bool space_has_free(const struct space *sp)
{
    return sp->free_segs > space_low_water(sp);
}

void space_usage(const struct space *sp, struct space_usage *u)
{
    *u = (struct space_usage){ 0 };
    for (uint32_t i = 0; i < sp->nsegs; i++) {
        const struct segment *sg = &sp->segs[i];
        if (sg->state == SEG_FREE) {
            u->free += sp->seg_sectors;
            continue;
        }
        uint64_t hdr = sg->hdr_sectors;
        if (TC_DEBUG_ASSERTS_ON) {
            uint64_t sum = 0;
            for (uint32_t k = 0; k < sg->nchunks; k++)
                sum += sg->chunks[k].hdr_sectors;
            TC_ASSERT(sum == hdr);
        }
        /* fill counts sealed chunks only: the open chunk's data is live
         * before it is sealed (its header is not counted yet). */
        uint64_t used = TC_MIN(TC_MAX((uint64_t)sg->fill, sg->live + hdr), sp->seg_sectors);
        u->live += sg->live;
        u->headers += hdr;
        u->unfilled += sp->seg_sectors - used;
        u->stale += used - TC_MIN(used, sg->live + hdr);
    }
}

/* Keeps invariant 10. */
void seg_add_live(struct space *sp, uint32_t seg, int delta)
{
    if (seg == NIL)
        return;
    struct segment *sg = space_seg(sp, seg);
    int64_t live = (int64_t)sg->live + delta;
    TC_ASSERT_ALWAYS(live >= 0);
    /* Not while replaying: chunk_decode() does not refuse entries that
     * share data sectors (no writer makes them), so a log crafted so
     * could count more; that is input, not the engine's state. */
    TC_ASSERT(live <= (int64_t)sp->seg_sectors || sp->replaying);
    sg->live = (uint32_t)live;
}

/* Invariant 6: a read pins a segment of a live group (one an entry may
 * point into: invariant 4), and the last unpin of a retired one frees it. */
void seg_pin(struct space *sp, uint32_t seg)
{
    struct segment *sg = &sp->segs[seg];
    TC_ASSERT(sg->group != NIL && (sg->state == SEG_OPEN || sg->state == SEG_CLOSED));
    sg->pins++;
}

void seg_unpin(struct space *sp, uint32_t seg)
{
    struct segment *sg = space_seg(sp, seg);
    TC_ASSERT_ALWAYS(sg->pins > 0);
    if (--sg->pins == 0 && sg->state == SEG_RETIRED_PINNED && sg->writes_inflight == 0) {
        push_free(sp, seg);
        freed(sp);
    }
}

void space_write_done(struct space *sp, uint32_t seg)
{
    struct segment *sg = space_seg(sp, seg);
    if (sg->pins == 0 && sg->writes_inflight == 0 && sg->state == SEG_RETIRED_PINNED) {
        push_free(sp, seg);
        freed(sp);
    }
}

/* ---- chunk tables (the CRCs of their chunks: verify.c) ---- */

const struct chunk_ref *segment_chunk_of(const struct space *sp, uint32_t seg, uint32_t off)
{
    const struct segment *sg = &sp->segs[seg];
    uint32_t lo = 0, hi = sg->nchunks;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (sg->chunks[mid].start <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    const struct chunk_ref *cr = &sg->chunks[lo - 1];
    if (off >= (uint32_t)cr->start + cr->hdr_sectors + cr->data_sectors)
        return NULL;
    return cr;
}

void segment_add_chunk(struct space *sp, uint32_t seg, uint32_t start, uint32_t hdr_sectors,
                       uint32_t data_sectors)
{
    struct segment *sg = &sp->segs[seg];
    if (sg->nchunks == sg->chunks_cap) {
        sg->chunks_cap = sg->chunks_cap ? sg->chunks_cap * 2 : 8;
        sg->chunks = realloc(sg->chunks, sg->chunks_cap * sizeof *sg->chunks);
        if (sg->chunks == NULL)
            abort();
    }
    sg->chunks[sg->nchunks++] = (struct chunk_ref){ (uint16_t)start, (uint16_t)hdr_sectors,
                                                    (uint16_t)data_sectors, 0 };
    sg->hdr_sectors = (uint16_t)(sg->hdr_sectors + hdr_sectors);
}

void segment_clear_chunks(struct segment *sg)
{
    sg->nchunks = 0;
    sg->hdr_sectors = 0;
}

void space_compact_chunk_tables(struct space *sp)
{
    for (uint32_t s = 0; s < sp->nsegs; s++) {
        struct segment *sg = &sp->segs[s];
        struct chunk_ref *old = sg->chunks;
        sg->chunks = NULL;
        sg->chunks_cap = sg->nchunks;
        if (sg->nchunks > 0) {
            sg->chunks = tc_xmalloc(sg->nchunks * sizeof *sg->chunks);
            memcpy(sg->chunks, old, sg->nchunks * sizeof *sg->chunks);
        }
        free(old);
    }
}
