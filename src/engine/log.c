/*
 * The log writer: appends, chunks, and durability.
 *
 * Every open segment has an image in RAM, laid out exactly as on disk.  An
 * append copies the data into the image after the current chunk's data
 * and records the entry; the chunk is sealed -- its header encoded in
 * front of its data -- and written as one I/O when it reaches the target
 * size (1 MiB), when its header is full, when its segment is full, when
 * someone waits for it (FLUSH, FUA, write-through ordering), or 100 ms
 * after its first append (bcache's journal delay: it bounds what a crash
 * loses of writes no FLUSH asked for, while a slow trickle of writes still
 * fills large chunks).  This is write clustering: many small client writes
 * become one large sequential device write.
 *
 * A chunk holding nothing but clean copies of origin data (read fills,
 * the cleaner's clean reinsertions) waits 30 s instead, and the periodic
 * commit leaves it alone until then: a crash that loses it loses no data
 * (the origin has every sector of it; recovery only finds those blocks
 * uncached), while every chunk costs a header of at least 4 KiB -- with
 * 4 KiB blocks and a fill every few hundred ms, as much room as its data.
 * Anything else appended to it (a write, a write-through version, a
 * tombstone, a clean record) brings back the 100 ms, and a FLUSH, a stop
 * or the cleaner's tail still seal it at once.
 *
 *   segment image:  [hdr|data data data][hdr|data data][hdr|data ... ]
 *                    ^ written            ^ written      ^ current chunk
 *
 * Durability is tracked by chunk sequence number: chunks_written_upto says
 * every chunk up to that number is on the device (possibly in its volatile
 * cache) and flushed_upto that a device flush followed.  Waiters name the
 * chunk they need and whether they need the flush; syncs that arrive while
 * a flush is running share the next one (group commit).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/budget.h"
#include "engine/cache.h"
#include "engine/cleaner.h"
#include "engine/verify.h"
#include "util/assert.h"
#include "util/crc32c.h"
#include "util/join.h"
#include "util/json.h"
#include "util/log.h"
#include "util/misc.h"

#define SEAL_DELAY_NS (100ull * 1000 * 1000)
#define CLEAN_SEAL_DELAY_NS (30000ull * 1000 * 1000)
#define CHUNK_TARGET_BYTES (1u << 20)

static void seal(struct cache *c, unsigned d, bool force, bool closing);
static void seal_task_fn(struct tc_task *t);

/* The registered events (log.h): nothing happens when none is. */
static void needs_space(struct log *lg)
{
    if (lg->ev.needs_space)
        lg->ev.needs_space(lg->ev.ctx);
}

static void device_error(struct log *lg, unsigned d, int err, bool write)
{
    if (lg->ev.device_error)
        lg->ev.device_error(lg->ev.ctx, d, err, write);
}

/* When head d's current chunk is due by the clock (UINT64_MAX: it has no
 * entries). */
static uint64_t seal_due(const struct cache *c, unsigned d)
{
    const struct head *h = &c->lg.heads[d];
    if (h->seg == NIL || h->nentries == 0)
        return UINT64_MAX;
    return h->first_ns + (h->keeps ? c->lg.seal_delay_ns : c->lg.clean_seal_delay_ns);
}

/* The seal timer, at the earliest head's due time (disarmed: none). */
static void arm_seal_timer(struct cache *c)
{
    uint64_t due = UINT64_MAX;
    for (unsigned d = 0; d < c->ndevs; d++)
        due = TC_MIN(due, seal_due(c, d));
    if (due == UINT64_MAX) {
        timer_cancel(c->reactor, &c->lg.seal_timer);
        return;
    }
    if (c->lg.seal_timer.armed && c->lg.seal_timer.deadline <= due)
        return;
    uint64_t now = tc_now_ns();
    timer_arm(c->reactor, &c->lg.seal_timer, due > now ? due - now : 0);
}

/* Seal what is due by the clock, and wait for the rest. */
static void seal_timer_fn(struct tc_timer *t)
{
    struct cache *c = container_of(t, struct cache, lg.seal_timer);
    uint64_t now = tc_now_ns();
    for (unsigned d = 0; d < c->ndevs; d++)
        if (seal_due(c, d) <= now)
            seal(c, d, false, false);
    arm_seal_timer(c);
}

int log_init(struct cache *c)
{
    struct log *lg = &c->lg;
    lg->nsegs = c->sp.nsegs;
    lg->images = tc_xcalloc(lg->nsegs, sizeof *lg->images);
    lg->headers_in_ram = c->data_free;
    if (lg->headers_in_ram)
        lg->ram = tc_xcalloc(lg->nsegs, sizeof *lg->ram);
    lg->seal_task.fn = seal_task_fn;
    lg->trace = c->trace_block == UINT64_MAX - 1;
    for (unsigned d = 0; d < TC_MAX_DEVICES; d++) {
        c->lg.heads[d].seg = NIL;
        c->lg.heads[d].next_hdr_sectors = 1;
    }
    c->lg.seal_timer.fn = seal_timer_fn;
    c->lg.seal_delay_ns = SEAL_DELAY_NS;
    c->lg.clean_seal_delay_ns = CLEAN_SEAL_DELAY_NS;
    c->lg.chunk_target_sectors = TC_MIN(CHUNK_TARGET_BYTES / TC_SECTOR, c->seg_sectors / 2);
    return 0;
}

void log_fini(struct cache *c)
{
    struct log *lg = &c->lg;
    if (lg->images == NULL)
        return;     /* an attach that failed before log_init() */
    timer_cancel(c->reactor, &lg->seal_timer);
    for (unsigned d = 0; d < TC_MAX_DEVICES; d++) {
        free(lg->heads[d].entries);
        free(lg->heads[d].crcs);
        lg->heads[d].entries = NULL;
        lg->heads[d].crcs = NULL;
    }
    free(lg->failed_chunks);
    lg->failed_chunks = NULL;
    lg->nfailed_chunks = lg->failed_chunks_cap = 0;
    for (uint32_t s = 0; s < lg->nsegs; s++)
        free(lg->images[s]);
    for (unsigned i = 0; i < lg->npool; i++)
        free(lg->pool[i]);
    for (uint32_t s = 0; lg->ram && s < lg->nsegs; s++) {
        free(lg->ram[s].chunks);
        free(lg->ram[s].ents);
        free(lg->ram[s].ids);
    }
    free(lg->ram);
    lg->ram = NULL;
    free(lg->images);
    lg->images = NULL;
    lg->npool = 0;
}

bool log_idle(const struct log *lg)
{
    if (lg->inflight_head || lg->flushing || lg->written_waiters || lg->flush_waiters)
        return false;
    for (unsigned d = 0; d < TC_MAX_DEVICES; d++)
        if (lg->heads[d].seg != NIL && lg->heads[d].nentries > 0)
            return false;
    return true;
}

/* ---- opening and closing segments ---- */

static void head_start_segment(struct cache *c, unsigned d, uint32_t seg)
{
    struct head *h = &c->lg.heads[d];
    struct log *lg = &c->lg;
    h->seg = seg;
    h->chunk_start = 0;
    h->hdr_sectors = h->next_hdr_sectors;
    h->data_fill = 0;
    h->nentries = 0;
    h->urgent = false;
    h->keeps = false;
    if (lg->images[seg] == NULL)
        lg->images[seg] = lg->npool ? lg->pool[--lg->npool] : tc_alloc_aligned(c->segment_size);
}

/* A draining device's images stay: the dirty data of a chunk whose write
 * failed, or of the open chunk never sealed, exists only there, and it is
 * read from there to be written back (failure.c); log_release_images()
 * when the drain ends.  So do a failed device's images while rescues
 * wait to append dirty data held only there (cache_dev.image_keeps). */
static void image_release(struct cache *c, uint32_t seg)
{
    struct segment *sg = space_seg(&c->sp, seg);
    struct log *lg = &c->lg;
    if (lg->images[seg] && sg->state != SEG_OPEN && sg->writes_inflight == 0 &&
        c->devs[sg->dev].state != CDEV_DRAINING && c->devs[sg->dev].image_keeps == 0) {
        if (lg->npool < LOG_IMAGE_POOL)
            lg->pool[lg->npool++] = lg->images[seg];
        else
            free(lg->images[seg]);
        lg->images[seg] = NULL;
    }
}

/* Device d is in service: appends go to it, and it holds a log that a
 * later start replays. */
static bool dev_in_service(const struct cache *c, unsigned d)
{
    return c->devs[d].state == CDEV_OK && !c->sp.dev_failed[d];
}

/* Device d (in service) could take a segment in a new group: a free one
 * that invariant 22 does not hold back (space.h). */
static bool dev_can_open(const struct cache *c, unsigned d)
{
    const struct free_stack *fs = &c->sp.stacks[d];
    for (uint32_t i = 0; i < fs->n; i++)
        if (!space_seg_held_back(&c->sp, fs->segs[i]))
            return true;
    return false;
}

/* Open a new group when no head has an open segment.  false: no space.
 * shares: for a device failure's record that needs a copy on every
 * device in service (log_append()'s take_shares, extras_fit()): a device
 * whose only free segments are its share of the reserve gives one all
 * the same -- that share is kept for a failure's records.  A client
 * record (CLEAN, a client's tombstone) never takes it: it waits for the
 * cleaner to free a segment there (log_append(), every_dev_heads()); when
 * it did, the survivor of two had no segment left at the other's failure
 * (engine/cleaner-bound, failure: 0 to 11 sectors of room at the failure
 * and at a tail record, was 256 and more). */
static bool ensure_group(struct cache *c, bool use_reserve, bool shares)
{
    /* Below the reserve, the cleaner (or a device failure's records)
     * took it: the room left in the open group is theirs -- a pass's
     * copies are bounded to leave room for its tail record and the
     * records that must always be appendable (cleaner.c, copy_fits()),
     * also for a pass that gives up and comes back.  Other appends wait
     * for the group the cleaner frees. */
    if (!use_reserve && c->sp.free_segs < c->sp.reserve_segs) {
        needs_space(&c->lg);
        return false;
    }
    for (unsigned d = 0; d < c->ndevs; d++)
        if (c->lg.heads[d].seg != NIL)
            return true;
    space_close_group(&c->sp);
    /* A group takes up to one segment per device: leave the reserve. */
    if (!use_reserve && c->sp.free_segs <= c->sp.reserve_segs) {
        needs_space(&c->lg);
        return false;
    }
    /* And each device in service its share of it (space_dev_reserve()),
     * so that a device failure leaves the others room for the records
     * that must always be appendable: an append that takes the reserve
     * takes those last segments only when no device has more.  One that
     * does not always finds a device with more: it is above the reserve,
     * which has a segment per device when there are shares. */
    uint32_t keep = space_dev_reserve(&c->sp);
    if (shares && use_reserve)
        for (unsigned d = 0; d < c->ndevs; d++)
            if (dev_in_service(c, d) && c->sp.stacks[d].n <= keep && dev_can_open(c, d))
                keep = 0;
    if (!space_open_group_above(&c->sp, &c->lg.next_seq, keep) &&
        !(use_reserve && space_open_group(&c->sp, &c->lg.next_seq))) {
        needs_space(&c->lg);
        return false;
    }
    struct group *g = group_at(&c->sp, c->sp.open_group);
    for (unsigned i = 0; i < g->nsegs; i++)
        head_start_segment(c, space_seg(&c->sp, g->segs[i])->dev, g->segs[i]);
    needs_space(&c->lg);
    return true;
}

/* Head d (which has a segment) leaves its segment: closed, filled up to
 * the current chunk.  Returns the segment.  What else a close does
 * depends on why (close_head(), log_close_group(), log_device_failed()). */
static uint32_t head_leave(struct cache *c, unsigned d)
{
    struct head *h = &c->lg.heads[d];
    struct segment *sg = space_seg(&c->sp, h->seg);
    sg->state = SEG_CLOSED;
    sg->fill = h->chunk_start;
    uint32_t seg = h->seg;
    h->seg = NIL;
    return seg;
}

/* A full segment: counted written, and its image released unless a chunk
 * write is in flight (the last one to end releases it). */
static void close_head(struct cache *c, unsigned d)
{
    if (c->lg.heads[d].seg == NIL)
        return;
    c->st.segments_written++;
    image_release(c, head_leave(c, d));
}

/* ---- writing chunks ---- */

static void notify_waiters(struct log *lg, int err);
static void maybe_flush(struct cache *c);

static void chunk_write_done(struct tc_dev_io *dio, int err)
{
    struct chunk_write *cw = container_of(dio, struct chunk_write, dio);
    struct cache *c = cw->cache;
    struct segment *sg = space_seg(&c->sp, cw->seg);
    uint64_t was_written = c->lg.chunks_written_upto;
    /* A device's chunk counts as written once every chunk before it is:
     * until then, it rides on the chunk in flight before it. */
    if (!err)
        cw->written_after[sg->dev] = TC_MAX(cw->written_after[sg->dev], cw->chunk_seq);
    for (unsigned d = 0; d < c->ndevs; d++) {
        uint64_t *to = cw->prev ? &cw->prev->written_after[d] : &c->lg.dev_written[d];
        *to = TC_MAX(*to, cw->written_after[d]);
    }
    if (cw->prev)
        cw->prev->next = cw->next;
    else
        c->lg.inflight_head = cw->next;
    if (cw->next)
        cw->next->prev = cw->prev;
    else
        c->lg.inflight_tail = cw->prev;
    c->lg.chunks_written_upto = c->lg.inflight_head ? c->lg.inflight_head->chunk_seq - 1 : c->lg.chunks_issued;
    /* Keeps invariant 11. */
    TC_ASSERT(c->lg.chunks_written_upto >= was_written && c->lg.chunks_written_upto <= c->lg.chunks_issued);
    TC_ASSERT_ALWAYS(sg->writes_inflight > 0);
    if (err) {
        /* The device fails now; the chunk's data, still in the image, is
         * appended again elsewhere, so the failure is absorbed.  Whatever
         * the error -- EIO, ENOSPC of a cache file's full file system, a
         * device gone -- it is the device's failure, never "no room in the
         * cache" (log_append()'s -ENOSPC). */
        tc_error("%s: cache write of %llu bytes at offset %llu failed: %s",
                 seg_cdev(c, cw->seg)->dev->name, (unsigned long long)dio->len,
                 (unsigned long long)dio->off, strerror(-err));
        c->st.cache_write_errors++;
        struct log *lg = &c->lg;
        lg->failed_chunk = TC_MAX(lg->failed_chunk, cw->chunk_seq);
        if (lg->nfailed_chunks == lg->failed_chunks_cap) {
            lg->failed_chunks_cap = lg->failed_chunks_cap ? 2 * lg->failed_chunks_cap : 8;
            lg->failed_chunks = realloc(lg->failed_chunks,
                                        lg->failed_chunks_cap * sizeof *lg->failed_chunks);
            if (lg->failed_chunks == NULL)
                abort();
        }
        uint32_t start = (uint32_t)((dio->off - seg_dev_offset(c, cw->seg)) / TC_SECTOR);
        lg->failed_chunks[lg->nfailed_chunks++] = (struct failed_chunk){
            cw->seg, start, start + (uint32_t)(dio->len / TC_SECTOR) };
        device_error(&c->lg, sg->dev, err, true);
    }
    if (c->lg.trace)
        tc_info("trace log: chunk %llu written (err %d); written up to %llu",
                (unsigned long long)cw->chunk_seq, err, (unsigned long long)c->lg.chunks_written_upto);
    sg->writes_inflight--;
    c->devs[sg->dev].written_since_flush = true;
    if (!err) {
        c->st.chunks_written++;
        c->st.chunk_bytes_written += dio->len;
    }
    image_release(c, cw->seg);
    space_write_done(&c->sp, cw->seg);
    tc_obj_put(cw, sizeof *cw);
    notify_waiters(&c->lg, 0);
    maybe_flush(c);
}

static void write_chunk(struct cache *c, uint32_t seg, uint32_t start, uint32_t hdr_sectors,
                        uint32_t nsectors, uint64_t chunk_seq)
{
    struct segment *sg = space_seg(&c->sp, seg);
    struct chunk_write *cw = tc_obj_get(sizeof *cw);
    cw->cache = c;
    cw->seg = seg;
    cw->chunk_seq = chunk_seq;
    /* Invariant 19: issued in ascending chunk_seq, from an image. */
    TC_ASSERT(c->lg.inflight_tail == NULL || c->lg.inflight_tail->chunk_seq < chunk_seq);
    TC_ASSERT(log_image(&c->lg, seg) != NULL);
    cw->prev = c->lg.inflight_tail;
    if (c->lg.inflight_tail)
        c->lg.inflight_tail->next = cw;
    else
        c->lg.inflight_head = cw;
    c->lg.inflight_tail = cw;
    sg->writes_inflight++;
    budget_spend(&c->budget, (uint64_t)nsectors * TC_SECTOR);
    cw->dio.op = TC_DEV_WRITE;
    cw->dio.buf = c->lg.images[seg] + (size_t)start * TC_SECTOR;
    cw->dio.off = seg_dev_offset(c, seg) + (uint64_t)start * TC_SECTOR;
    cw->dio.len = (uint64_t)nsectors * TC_SECTOR;
    cw->dio.cb = chunk_write_done;
    if (c->data_free) {
        /* A header in RAM is not written either (struct ram_chunk). */
        cw->dio.flags = TC_DEV_PAYLOAD;
        cw->dio.payload_off = c->lg.headers_in_ram ? 0 : (uint64_t)hdr_sectors * TC_SECTOR;
    }
    dev_submit(seg_cdev(c, seg)->dev, &cw->dio);
}

/* Keep a chunk's header and entries in RAM as chunk i of segment seg
 * (struct ram_chunk): its chunk table's entry i, the segment's chunks
 * before it kept already (a table cleared for the segment's reuse starts
 * again at 0).  Each DATA entry's block is looked up in the index (ix)
 * for struct ram_seg's ids: the blocks were appended to this chunk just
 * now, so their buckets and entries are still in the CPU's caches. */
static void keep_in_ram(struct log *lg, const struct index *ix, uint32_t seg, uint32_t i,
                        const struct tc_chunk_header *hdr, const struct tc_entry *entries)
{
    struct ram_seg *rs = &lg->ram[seg];
    if (i == 0)
        rs->nchunks = rs->nents = 0;
    TC_ASSERT_ALWAYS(rs->nchunks == i);
    if (rs->nchunks == rs->chunks_cap) {
        rs->chunks_cap = rs->chunks_cap ? 2 * rs->chunks_cap : 16;
        rs->chunks = realloc(rs->chunks, rs->chunks_cap * sizeof *rs->chunks);
        if (rs->chunks == NULL)
            abort();
    }
    if (rs->nents + hdr->nr_entries > rs->ents_cap) {
        rs->ents_cap = TC_MAX(2 * rs->ents_cap, rs->nents + hdr->nr_entries);
        rs->ents = realloc(rs->ents, (size_t)rs->ents_cap * sizeof *rs->ents);
        rs->ids = realloc(rs->ids, (size_t)rs->ents_cap * sizeof *rs->ids);
        if (rs->ents == NULL || rs->ids == NULL)
            abort();
    }
    rs->chunks[rs->nchunks++] = (struct ram_chunk){ .h = *hdr, .first = rs->nents };
    if (hdr->nr_entries)
        memcpy(rs->ents + rs->nents, entries, (size_t)hdr->nr_entries * sizeof *entries);
    for (uint32_t j = 0; j < hdr->nr_entries; j++) {
        /* The look-ups' loads start ahead, as in the cleaner's walk. */
        if (j + 16 < hdr->nr_entries)
            index_prefetch_bucket(ix, entries[j + 16].oblock);
        if (j + 8 < hdr->nr_entries)
            index_prefetch(ix, entries[j + 8].oblock, 1);
        rs->ids[rs->nents + j] = entries[j].type == TC_ENTRY_DATA
                                     ? index_lookup(ix, entries[j].oblock) : NIL;
    }
    rs->nents += hdr->nr_entries;
}

/* Seal head d's current chunk: encode its header and write it.  force
 * writes a header even without entries (to persist the tail); closing
 * marks it the segment's last chunk. */
static void seal(struct cache *c, unsigned d, bool force, bool closing)
{
    struct head *h = &c->lg.heads[d];
    if (h->seg == NIL || (h->nentries == 0 && !force))
        return;
    struct segment *sg = space_seg(&c->sp, h->seg);
    uint32_t room_after = c->seg_sectors - (h->chunk_start + h->hdr_sectors + h->data_fill);
    if (room_after < 2)
        closing = true;
    struct tc_chunk_header hdr = {
        .group_seq = sg->seq,
        .chunk_seq = ++c->lg.chunks_issued,
        .tail_seq = c->lg.tail_seq,
        .wt_stable_seq = c->lg.wt_stable_seq,
        .segment = h->seg,
        .chunk_sector = h->chunk_start,
        .hdr_sectors = h->hdr_sectors,
        .flags = (closing ? TC_CHUNK_CLOSED : 0) | (c->lg.clean_stop ? TC_CHUNK_CLEAN_STOP : 0),
        .data_sectors = h->data_fill,
        .nr_entries = h->nentries,
        .written_ns = tc_wall_ns(),
        .flushed_seq = c->lg.flushed_upto,
    };
    /* After the numbers a start skipped, every chunk of the run records
     * how far the runs before were durable (TC_CHUNK_RESTART): the chunk
     * numbers up to there must all be found again. */
    if (c->lg.skipped_upto) {
        hdr.flags |= TC_CHUNK_RESTART;
        hdr.restart_durable = c->lg.restart_durable;
    }
    c->lg.marked_upto = TC_MAX(c->lg.marked_upto, hdr.flushed_seq);
    c->lg.tail_recorded = hdr.tail_seq;
    c->lg.wt_stable_recorded = hdr.wt_stable_seq;
    /* Which chunks the segment holds (space.h, invariant 22). */
    if (sg->first_chunk == 0)
        sg->first_chunk = hdr.chunk_seq;
    sg->top_chunk = hdr.chunk_seq;
    hdr.tail_chunk = space_tail_chunk(&c->sp, hdr.tail_seq);
    hdr.failed_chunk = c->lg.failed_chunk;
    if (h->nentries > 0)
        c->lg.entries_chunk = hdr.chunk_seq;
    memcpy(hdr.set_uuid, c->set_uuid, 16);
    if (c->lg.headers_in_ram) {
        /* Kept as it is; no CRC is checked (log.h, struct ram_chunk). */
        keep_in_ram(&c->lg, &c->map.idx, h->seg, sg->nchunks, &hdr, h->entries);
        segment_add_chunk(&c->sp, h->seg, h->chunk_start, h->hdr_sectors, h->data_fill);
    } else {
        uint8_t *hbuf = c->lg.images[h->seg] + (size_t)h->chunk_start * TC_SECTOR;
        chunk_encode(hbuf, &hdr, h->entries, h->crcs, c->spb);
        segment_add_chunk(&c->sp, h->seg, h->chunk_start, h->hdr_sectors, h->data_fill);
        verify_remember(c->verify, h->seg, h->chunk_start, &hdr, hbuf);
    }
    uint32_t n = h->hdr_sectors + h->data_fill;
    if (c->lg.trace)
        tc_info("trace log: seal chunk %llu: segment %u sectors %u..%u, %u entries, group %llu, "
                "tail %llu%s", (unsigned long long)hdr.chunk_seq, h->seg, h->chunk_start,
                h->chunk_start + n - 1, h->nentries, (unsigned long long)sg->seq,
                (unsigned long long)hdr.tail_seq, closing ? " closing" : "");
    write_chunk(c, h->seg, h->chunk_start, h->hdr_sectors, n, hdr.chunk_seq);

    /* Waiters of this chunk now wait for its sequence number. */
    while (h->waiters) {
        struct log_waiter *w = h->waiters;
        h->waiters = w->next;
        w->target = hdr.chunk_seq;
        w->next = c->lg.written_waiters;
        c->lg.written_waiters = w;
    }

    /* Size the next header: grow it when this one filled up early. */
    size_t used = tc_chunk_header_bytes(c->spb, h->nentries, h->data_fill);
    if (used > (size_t)(h->hdr_sectors * TC_SECTOR) * 3 / 4 &&
        h->data_fill < c->lg.chunk_target_sectors && h->next_hdr_sectors < TC_MAX_HDR_SECTORS)
        h->next_hdr_sectors++;
    else if (used < (size_t)(h->hdr_sectors - 1) * TC_SECTOR / 2 && h->next_hdr_sectors > 1)
        h->next_hdr_sectors--;

    sg->fill = h->chunk_start + n;
    h->chunk_start += n;
    h->hdr_sectors = h->next_hdr_sectors;
    h->data_fill = 0;
    h->nentries = 0;
    h->urgent = false;
    h->keeps = false;
    if (closing || h->chunk_start + h->hdr_sectors + 1 > c->seg_sectors)
        close_head(c, d);
}

/* Not close_head() for each head, which would change two things:
 * segments_written counts segments filled ("segments filled" in status),
 * and these are not; and close_head() releases the image of a segment
 * with no chunk write in flight (one with a write in flight is released
 * when it ends, here as there).  Here such an image stays until the
 * segment is opened again (head_start_segment() takes it over), so the
 * cleaner's walk of this group, which comes next, reads those chunks from
 * RAM (log_read_image()) rather than from the device. */
void log_close_group(struct cache *c)
{
    log_seal_all(c, false);
    for (unsigned d = 0; d < c->ndevs; d++)
        if (c->lg.heads[d].seg != NIL)
            head_leave(c, d);
    space_close_group(&c->sp);
}

static void seal_task_fn(struct tc_task *t)
{
    struct cache *c = container_of(t, struct cache, lg.seal_task);
    c->lg.seal_pending = false;
    for (unsigned d = 0; d < c->ndevs; d++)
        if (c->lg.heads[d].urgent)
            seal(c, d, false, false);
    notify_waiters(&c->lg, 0);
    maybe_flush(c);
}

bool log_seal_all(struct cache *c, bool force_header)
{
    bool room = !force_header || ensure_group(c, true, false);
    for (unsigned d = 0; d < c->ndevs; d++)
        seal(c, d, force_header, false);
    return room;
}

uint64_t log_room(const struct cache *c)
{
    uint64_t room = 0;
    for (unsigned d = 0; d < c->ndevs; d++) {
        if (c->devs[d].state != CDEV_OK || c->sp.dev_failed[d])
            continue;
        const struct head *h = &c->lg.heads[d];
        if (h->seg != NIL)
            room += c->seg_sectors - (h->chunk_start + h->hdr_sectors + h->data_fill);
        room += (uint64_t)c->sp.stacks[d].n * c->seg_sectors;
    }
    return room;
}

static bool head_fits(struct cache *c, unsigned d, uint32_t nsectors, unsigned nent,
                      bool *need_seal);

uint64_t log_mirror_room(struct cache *c, uint32_t nsectors)
{
    unsigned fit = 0;
    bool ns;
    for (unsigned d = 0; d < c->ndevs; d++)
        fit += head_fits(c, d, nsectors, 1, &ns);
    if (fit >= 2)
        return log_room(c);
    if (nsectors + TC_MAX_HDR_SECTORS + 1 > c->seg_sectors)
        return 0;
    /* ensure_group() with the reserve: the devices above their share of
     * it, or, when none is, every device with a free segment. */
    uint32_t keep = space_dev_reserve(&c->sp);
    unsigned above = 0, any = 0;
    uint64_t room = 0;
    for (unsigned d = 0; d < c->ndevs; d++) {
        if (c->devs[d].state != CDEV_OK || c->sp.dev_failed[d])
            continue;
        uint32_t n = c->sp.stacks[d].n;
        above += n > keep;
        any += n > 0;
        room += (uint64_t)n * c->seg_sectors;
    }
    return above >= 2 || (above == 0 && any >= 2) ? room : 0;
}

/* ---- appends ---- */

/* Whether head d can take nent entries (an append: one; a replacing
 * version: its tombstone and itself) and nsectors data sectors, in its
 * current chunk or, after sealing it (*need_seal), in the next one --
 * never split between the two. */
static bool head_fits(struct cache *c, unsigned d, uint32_t nsectors, unsigned nent,
                      bool *need_seal)
{
    struct head *h = &c->lg.heads[d];
    *need_seal = false;
    if (h->seg == NIL || c->devs[d].state != CDEV_OK)
        return false;
    size_t hdr_bytes = tc_chunk_header_bytes(c->spb, h->nentries + nent, h->data_fill + nsectors);
    bool hdr_ok = hdr_bytes <= (size_t)h->hdr_sectors * TC_SECTOR;
    bool space_ok = h->chunk_start + h->hdr_sectors + h->data_fill + nsectors <= c->seg_sectors;
    if (hdr_ok && space_ok)
        return true;
    if (h->nentries == 0)
        return false;       /* even an empty chunk cannot take it: segment full */
    /* A fresh chunk after sealing this one might fit. */
    uint32_t next_start = h->chunk_start + h->hdr_sectors + h->data_fill;
    uint32_t next_hdr = h->next_hdr_sectors;
    if (!hdr_ok && next_hdr < TC_MAX_HDR_SECTORS)
        next_hdr++;
    /* seal() closes the segment unless the next chunk could hold a header
     * (possibly one sector larger: seal may grow it) and a data sector:
     * promise room only on the same terms, even for an entry without data
     * (a clean record or tombstone), or append_to() finds no head. */
    if (tc_chunk_header_bytes(c->spb, nent, nsectors) <= (size_t)next_hdr * TC_SECTOR &&
        next_start + next_hdr + 1 + TC_MAX(nsectors, 1u) <= c->seg_sectors) {
        *need_seal = true;
        return true;
    }
    return false;
}

/* The head to append to.  The stripe unit is the chunk: appends stay on one
 * device until its chunk is sealed, so a sequential stream is laid out in
 * runs of up to a chunk on each device in turn; the next chunk goes to the
 * open head with the least fill, which keeps devices evenly used.
 * *need_seal: head_fits()'s answer for the head picked, which append_to()
 * is given rather than asking again (every append asked twice). */
static int pick_head(struct cache *c, uint32_t nsectors, unsigned nent, int exclude,
                     bool *need_seal)
{
    unsigned cur = c->lg.next_dev % c->ndevs;
    bool ns;
    *need_seal = false;
    if ((int)cur != exclude && c->lg.heads[cur].data_fill > 0 &&
        head_fits(c, cur, nsectors, nent, &ns) && !ns)
        return (int)cur;
    int best = -1;
    uint32_t best_fill = UINT32_MAX;
    for (unsigned i = 0; i < c->ndevs; i++) {
        unsigned d = (c->lg.next_dev + i) % c->ndevs;
        if ((int)d == exclude || !head_fits(c, d, nsectors, nent, &ns))
            continue;
        struct head *h = &c->lg.heads[d];
        uint32_t fill = h->chunk_start + h->hdr_sectors + h->data_fill;
        if (fill < best_fill) {
            best_fill = fill;
            best = (int)d;
            *need_seal = ns;
        }
    }
    return best;
}

/* Does head d take the append with need_seal as head_fits() says?  For
 * the debug build's check that an answer handed on still holds (unused,
 * and so marked, where TC_ASSERT() compiles to nothing). */
__attribute__((unused)) static bool fits_as(struct cache *c, unsigned d, uint32_t nsectors, unsigned nent,
                    bool need_seal)
{
    bool ns;
    return head_fits(c, d, nsectors, nent, &ns) && ns == need_seal;
}

/* A new entry in head h's current chunk (room checked by the caller). */
static struct tc_entry *add_entry(struct head *h)
{
    if (h->nentries == h->entries_cap) {
        h->entries_cap = h->entries_cap ? h->entries_cap * 2 : 64;
        h->entries = realloc(h->entries, h->entries_cap * sizeof *h->entries);
        if (h->entries == NULL)
            abort();
    }
    if (h->nentries == 0)
        h->first_ns = tc_now_ns();
    struct tc_entry *e = &h->entries[h->nentries++];
    memset(e, 0, sizeof *e);
    return e;
}

/* Returns the sector where the data went, in the head's segment (which
 * the seal before it may have changed to none: the caller reads h->seg
 * after).  A replacing version (a->replace) goes after its tombstone
 * (sequence tseq, target seq: the link recovery checks), in the same
 * chunk: head_fits() was asked for room for both, and need_seal is its
 * answer (nothing in between changed the head: no completion runs inside
 * log_append(), see there). */
static uint16_t append_to(struct cache *c, unsigned d, const struct append *a, uint64_t tseq,
                          uint64_t seq, unsigned nsectors, bool mirror_copy, bool need_seal)
{
    struct head *h = &c->lg.heads[d];
    unsigned nent = a->replace ? 2 : 1;
    TC_ASSERT(fits_as(c, d, nsectors, nent, need_seal));
    if (need_seal) {
        seal(c, d, false, false);
        if (h->seg == NIL)
            abort();        /* head_fits promised room in this segment */
        if (tc_chunk_header_bytes(c->spb, nent, nsectors) > (size_t)h->hdr_sectors * TC_SECTOR)
            h->hdr_sectors++;
    }
    uint8_t *image = c->lg.images[h->seg];
    if (h->data_fill + nsectors > h->crcs_cap) {
        h->crcs_cap = TC_MAX(c->seg_sectors, h->data_fill + nsectors);
        h->crcs = realloc(h->crcs, h->crcs_cap * sizeof *h->crcs);
        if (h->crcs == NULL)
            abort();
    }
    if (a->replace) {
        struct tc_entry *t = add_entry(h);
        t->oblock = a->oblock;
        t->seq = tseq;
        t->type = TC_ENTRY_TOMBSTONE;
        t->data_sector = h->data_fill;
        t->target = seq;
    }
    struct tc_entry *e = add_entry(h);
    e->oblock = a->oblock;
    e->seq = seq;
    e->type = a->type;
    e->flags = (uint8_t)(a->flags | (mirror_copy || a->mirror ? TC_ENTRY_MIRROR : 0));
    e->data_sector = h->data_fill;
    e->target = a->target;
    e->valid = a->valid;
    e->dirty = a->dirty;
    uint32_t at = h->chunk_start + h->hdr_sectors + h->data_fill;
    /* Invariant 20, at the boundary where the data is copied. */
    TC_ASSERT_ALWAYS(at + nsectors <= c->seg_sectors);
    if (nsectors && c->data_free) {
        /* Zeroes, taken as read: the image's data part is never looked at
         * (the chunk's write leaves it out, reads skip it). */
        for (unsigned i = 0; i < nsectors; i++)
            h->crcs[h->data_fill + i] = TC_CRC32C_ZERO_SECTOR;
    } else if (nsectors) {
        uint8_t *dst = image + (size_t)at * TC_SECTOR;
        memcpy(dst, a->data, (size_t)nsectors * TC_SECTOR);
        for (unsigned i = 0; i < nsectors; i++)
            h->crcs[h->data_fill + i] = tc_crc32c(0, dst + (size_t)i * TC_SECTOR, TC_SECTOR);
    }
    h->data_fill += nsectors;
    return (uint16_t)at;
}

static void schedule_seal(struct cache *c, unsigned d, bool urgent)
{
    struct head *h = &c->lg.heads[d];
    if (h->seg == NIL)
        return;
    if (h->data_fill >= c->lg.chunk_target_sectors) {
        seal(c, d, false, false);
        return;
    }
    if (urgent) {
        h->urgent = true;
        if (!c->lg.seal_pending) {
            c->lg.seal_pending = true;
            reactor_defer(c->reactor, &c->lg.seal_task);
        }
        return;
    }
    arm_seal_timer(c);
}

/* Whether a new group could be opened once the open one is closed, with a
 * segment that takes nsectors of data (split_first()'s promise). */
static bool next_group_fits(struct cache *c, bool use_reserve, unsigned nsectors)
{
    if (!use_reserve && c->sp.free_segs <= c->sp.reserve_segs)
        return false;
    if (nsectors + TC_MAX_HDR_SECTORS + 1 > c->seg_sectors)
        return false;
    for (unsigned d = 0; d < c->ndevs; d++)
        if (!c->sp.dev_failed[d] && c->sp.stacks[d].n > 0 && c->devs[d].state == CDEV_OK)
            return true;
    return false;
}

/* No open head takes all nsectors of a's data: if one takes some, and the
 * rest is sure to find room (in another open head, or in a new group),
 * append the first sectors there as an entry of their own, and make *rest
 * the append of the others.  Records the first part in loc; false (and
 * nothing appended) when there is nothing to split or no room for it. */
static bool split_first(struct cache *c, const struct append *a, unsigned nsectors,
                        struct append *rest, struct log_loc *loc)
{
    /* Not a replacing version: its tombstone and it are one chunk. */
    if (!a->may_split || a->mirror || a->replace || a->type != TC_ENTRY_DATA || nsectors < 2)
        return false;
    /* A write-through version that holds dirty sectors too (a merge of a
     * write-through block's fragments, the cleaner's copy of one) stays one
     * fragment while a segment can take it whole.  Its clean sectors are
     * kept in the cache only because they share a fragment with dirty
     * ones: the cleaner copies a dirty fragment whole (with the flag, so
     * recovery writes them back if the origin lost them), but drops a
     * clean one, the origin holding its data -- yet not durably while the
     * origin's flushes fail.  A part with no dirty sector would be such a
     * clean fragment, and a crash after the cleaner dropped it would lose
     * acknowledged writes the cache held. */
    if ((a->flags & TC_ENTRY_WT) && !mask_empty(&a->dirty) && mask_count(&a->dirty) < nsectors &&
        nsectors + TC_MAX_HDR_SECTORS + 1 <= c->seg_sectors)
        return false;
    int best = -1;
    unsigned best_k = 0;
    bool best_ns = false;
    for (unsigned d = 0; d < c->ndevs; d++) {
        bool ns;
        for (unsigned k = nsectors - 1; k > best_k; k--)
            if (head_fits(c, d, k, 1, &ns)) {
                best = (int)d;
                best_k = k;
                best_ns = ns;
                break;
            }
    }
    if (best < 0)
        return false;
    /* The rest goes to another open head, or to the next group: a head
     * left with no room for it is closed before the next is opened. */
    bool other = false;
    for (unsigned d = 0; d < c->ndevs && !other; d++) {
        bool ns;
        other = (int)d != best && head_fits(c, d, nsectors - best_k, 1, &ns);
    }
    if (!other && !next_group_fits(c, a->use_reserve, nsectors - best_k))
        return false;

    struct append first = *a;
    *rest = *a;
    mask_clear(&first.valid);
    unsigned k = 0;
    for (unsigned s = 0; s < c->spb && k < best_k; s++)
        if (mask_test(&a->valid, s)) {
            mask_set(&first.valid, s);
            k++;
        }
    first.dirty = a->dirty;
    mask_and(&first.dirty, &first.valid);
    mask_andnot(&rest->valid, &first.valid);
    mask_andnot(&rest->dirty, &first.valid);
    rest->data = a->data ? (const uint8_t *)a->data + (size_t)best_k * TC_SECTOR : NULL;

    uint64_t seq = c->lg.next_seq++;
    if (a->flags & TC_ENTRY_WT)
        c->lg.wt_newest_seq = seq;
    loc->off = append_to(c, (unsigned)best, &first, 0, seq, best_k, false, best_ns);
    loc->seg = c->lg.heads[best].seg;
    loc->seq = seq;
    loc->part1 = first.valid;
    loc->split = true;
    bool keeps = (a->flags & TC_ENTRY_WT) || !mask_empty(&a->dirty);
    c->lg.heads[best].keeps |= keeps;
    /* Sealed now, before the rest's chunk: a waiter on the rest's chunk
     * number then covers this one too. */
    seal(c, (unsigned)best, false, false);
    c->st.split_appends++;
    if (c->lg.trace)
        tc_info("trace log: block %llu split: %u sectors at %u:%u, %u after",
                (unsigned long long)a->oblock, best_k, loc->seg, loc->off, nsectors - best_k);
    return true;
}

/*
 * The further copies of a mirrored record (an entry without data: a
 * tombstone, a CLEAN record) on every device in service besides d1 and d2,
 * whose heads take them as head_fits() says (need_seal in ns[]): marked in
 * *extra.  Two copies survive one device's failure; with three devices or
 * more, two failing one after the other -- the record's two devices --
 * would leave a version it shadows on a third to come back at the next
 * start, which ignores both failed devices' logs below their marks
 * (crash/devfail-shadow-three).  False if a device in service has no room
 * for its copy, or no segment open in the group (its segment filled up
 * before the others', or it sat the group out with no free segment but
 * its share of the reserve): the group is closed and the append tried
 * again in a new one, which every device with a free segment beyond its
 * share joins (and one with its share only, for a failure's record:
 * ensure_group()'s shares).  A device with none of those is never
 * skipped: log_append() refuses the record until the cleaner has freed
 * one (crash/devfail-shadow-nohead).
 */
static bool extras_fit(struct cache *c, int d1, int d2, unsigned nent, bool *extra, bool *ns)
{
    bool all = true;
    for (unsigned d = 0; d < c->ndevs; d++) {
        extra[d] = false;
        if ((int)d == d1 || (int)d == d2 || !dev_in_service(c, d))
            continue;
        if (head_fits(c, d, 0, nent, &ns[d]))
            extra[d] = true;
        else
            all = false;
    }
    return all;
}

/* Whether every device in service has a segment open, or could have one
 * in a new group (a record's copies, extras_fit()): a free segment that
 * is not held back, and beyond its share of the reserve unless the record
 * may take that share (shares: a device failure's record). */
static bool every_dev_heads(struct cache *c, bool shares)
{
    uint32_t keep = shares ? 0 : space_dev_reserve(&c->sp);
    for (unsigned d = 0; d < c->ndevs; d++)
        if (dev_in_service(c, d) && c->lg.heads[d].seg == NIL &&
            (c->sp.stacks[d].n <= keep || !dev_can_open(c, d)))
            return false;
    return true;
}

bool log_copy_first(struct cache *c, uint32_t a, uint32_t b)
{
    uint64_t sa = space_seg(&c->sp, a)->seq, sb = space_seg(&c->sp, b)->seq;
    return sa != sb ? sa < sb : a < b;
}

struct log_loc log_append(struct cache *c, const struct append *a_in, struct log_waiter *w)
{
    struct log_loc loc = { .err = -ENOSPC, .seg = NIL, .mseg = NIL };
    struct append copy;
    const struct append *a = a_in;
    if (a->mirror) {
        unsigned ok = 0;
        for (unsigned d = 0; d < c->ndevs; d++)
            ok += c->devs[d].state == CDEV_OK;
        if (ok < 2) {
            /* Degraded to one device: one copy is all there can be. */
            copy = *a_in;
            copy.mirror = false;
            a = &copy;
        }
    }
    unsigned nsectors = a->type == TC_ENTRY_DATA ? mask_count(&a->valid) : 0;
    TC_ASSERT_ALWAYS(!a->replace || a->type == TC_ENTRY_DATA);
    unsigned nent = a->replace ? 2 : 1;
    /* The cleaner claims room for its copies of the hot blocks it keeps
     * (cleaner.c, cleaner_claim()): a client write leaves it that room --
     * it takes at most its data and a chunk header -- or waits for the
     * group's release, as when there is no room at all.  Fills do not
     * (readpath.c): a fill given up costs a block read, as a copy
     * refused does, where a write waiting costs nothing cached. */
    if (a->leave_claim && !a->use_reserve) {
        uint64_t claim = cleaner_claim(c);
        if (claim > 0 && log_room(c) < claim + nsectors + TC_MAX_HDR_SECTORS) {
            cleaner_claim_wait(c);
            return loc;
        }
    }
    struct append rest;
    int d1 = -1, d2 = -1;
    bool ns1 = false, ns2 = false;      /* pick_head()'s need_seal of d1, d2 */
    /* A mirrored record goes to every device in service (extras_fit()). */
    bool every = a->mirror && a->type != TC_ENTRY_DATA;
    bool extra[TC_MAX_DEVICES] = { false }, nsx[TC_MAX_DEVICES];
    if (every && !every_dev_heads(c, a->take_shares)) {
        /* A device in service has no segment open and none free (none
         * beyond its share of the reserve, for a client record): its copy
         * waits for the cleaner, as an append waits for room. */
        c->lg.every_refused++;
        needs_space(&c->lg);
        return loc;
    }
    for (int attempt = 0; attempt < 3; attempt++) {
        if (!ensure_group(c, a->use_reserve, every && a->take_shares)) {
            /* split_first() promised room, and nothing in between can take
             * it: no completion runs inside log_append() (dev_complete()
             * defers those of dev_submit()).  A first part the index never
             * learnt of could come back at recovery. */
            TC_ASSERT_ALWAYS(!loc.split);
            return loc;
        }
        d1 = pick_head(c, nsectors, nent, -1, &ns1);
        if (d1 >= 0 && a->mirror) {
            d2 = pick_head(c, nsectors, nent, d1, &ns2);
            if (d2 < 0)
                d1 = -1;
            /* Every device in service takes a copy, or none is made. */
            else if (every && !extras_fit(c, d1, d2, nent, extra, nsx))
                d1 = -1;
        }
        /* Not in the last attempt: the rest may need the next group. */
        if (d1 < 0 && !loc.split && attempt < 2 && split_first(c, a, nsectors, &rest, &loc)) {
            a = &rest;
            nsectors = mask_count(&a->valid);
            d1 = pick_head(c, nsectors, nent, -1, &ns1);
        }
        if (d1 >= 0)
            break;
        /* The open group cannot take it: close it and open another. */
        for (unsigned d = 0; d < c->ndevs; d++) {
            seal(c, d, false, true);
            close_head(c, d);
        }
    }
    if (d1 < 0) {
        TC_ASSERT_ALWAYS(!loc.split);
        if (every) {
            c->lg.every_refused++;
            needs_space(&c->lg);
        }
        return loc;
    }
    /* Never a record left off a device in service (extras_fit()). */
    for (unsigned d = 0; every && d < c->ndevs; d++)
        TC_ASSERT_ALWAYS(!dev_in_service(c, d) || (int)d == d1 || (int)d == d2 || extra[d]);
    /* The tombstone of a replacing version (one sequence for both copies'
     * chunks, as the version's copies share one), just below it. */
    uint64_t tseq = a->replace ? c->lg.next_seq++ : 0;
    uint64_t seq = c->lg.next_seq++;
    if (a->flags & TC_ENTRY_WT)
        c->lg.wt_newest_seq = seq;      /* a FLUSH in writeback mode flushes the origin */
    loc.err = 0;
    uint16_t off = append_to(c, (unsigned)d1, a, tseq, seq, nsectors, false, ns1);
    if (loc.split) {
        loc.seq2 = seq;
        loc.off2 = off;
        loc.seg2 = c->lg.heads[d1].seg;
    } else {
        loc.seq = seq;
        loc.off = off;
        loc.seg = c->lg.heads[d1].seg;
    }
    if (d2 >= 0) {
        loc.moff = append_to(c, (unsigned)d2, a, tseq, seq, nsectors, true, ns2);
        loc.mseg = c->lg.heads[d2].seg;
        /* The primary copy is the one recovery meets first, not the one
         * on the emptier head: otherwise a clean record (which names the
         * primary) found the other copy as the head at a start from the
         * log and was not applied -- blocks written back came back dirty
         * -- and check found the checkpoint at odds with the log. */
        if (a->type == TC_ENTRY_DATA && !loc.split && log_copy_first(c, loc.mseg, loc.seg)) {
            uint32_t sg = loc.seg;
            uint16_t of = loc.off;
            loc.seg = loc.mseg;
            loc.off = loc.moff;
            loc.mseg = sg;
            loc.moff = of;
        }
    }
    int dlast = TC_MAX(d1, d2);         /* the copy sealed last (seal_task_fn()) */
    for (unsigned d = 0; d < c->ndevs; d++)
        if (extra[d]) {
            append_to(c, d, a, tseq, seq, 0, true, nsx[d]);
            dlast = TC_MAX(dlast, (int)d);
        }
    /* Only a clean copy of origin data may wait long (above): not a
     * write-through version (the origin may not have it yet), not dirty
     * data, not an entry without data. */
    bool keeps = a->type != TC_ENTRY_DATA || (a->flags & TC_ENTRY_WT) || a->mirror ||
                 !mask_empty(&a->dirty);
    c->lg.heads[d1].keeps |= keeps;
    if (d2 >= 0)
        c->lg.heads[d2].keeps |= keeps;
    for (unsigned d = 0; d < c->ndevs; d++)
        c->lg.heads[d].keeps |= extra[d] && keeps;
    c->lg.next_dev = (unsigned)d1;

    bool urgent = a->urgent || w != NULL;
    if (w) {
        /* Attach to the head sealed last, so its chunk number covers both
         * (every copy: the seal task seals the urgent heads in device
         * order). */
        bool extras = dlast != TC_MAX(d1, d2);
        unsigned wd = (unsigned)(extras ? dlast : d2 >= 0 ? d2 : d1);
        struct head *wh = &c->lg.heads[wd];
        w->next = wh->waiters;
        wh->waiters = w;
        if (d2 >= 0)
            c->lg.heads[d1].urgent = true;
        if (extras) {
            c->lg.heads[d2].urgent = true;
            for (unsigned d = 0; d < c->ndevs; d++)
                if (extra[d])
                    c->lg.heads[d].urgent = true;
        }
    }
    schedule_seal(c, (unsigned)d1, urgent);
    if (d2 >= 0)
        schedule_seal(c, (unsigned)d2, urgent);
    for (unsigned d = 0; d < c->ndevs; d++)
        if (extra[d])
            schedule_seal(c, d, urgent);
    return loc;
}

/* ---- waiting ---- */

/* Keeps invariant 12: a written waiter whose chunk is written moves on
 * (to the flush waiters, or it is woken). */
static void notify_waiters(struct log *lg, int err)
{
    int e = err;
    struct log_waiter **pp = &lg->written_waiters, *ready = NULL;
    while (*pp) {
        struct log_waiter *w = *pp;
        TC_ASSERT(w->target <= lg->chunks_issued);
        if (w->target <= lg->chunks_written_upto) {
            *pp = w->next;
            if (w->need_flush) {
                w->next = lg->flush_waiters;
                lg->flush_waiters = w;
            } else {
                w->next = ready;
                ready = w;
            }
        } else {
            pp = &w->next;
        }
    }
    while (ready) {
        struct log_waiter *w = ready;
        ready = w->next;
        w->fn(w, e);
    }
}

/* The cache flush ended (every device's part): wake the syncs it covers. */
static void flush_finish(struct log *lg)
{
    /* Invariant 11. */
    TC_ASSERT(lg->flush_target >= lg->flushed_upto && lg->flush_target <= lg->chunks_written_upto);
    lg->flushing = false;
    lg->flushed_upto = lg->flush_target;
    lg->flushed_ns = tc_now_ns();
    for (unsigned d = 0; d < TC_MAX_DEVICES; d++)
        lg->dev_flushed[d] = TC_MAX(lg->dev_flushed[d], lg->dev_flush_target[d]);
    if (lg->trace)
        tc_info("trace log: flush done: flushed up to %llu", (unsigned long long)lg->flushed_upto);
    int e = lg->error;
    lg->error = 0;
    struct log_waiter **pp = &lg->flush_waiters, *ready = NULL;
    while (*pp) {
        struct log_waiter *w = *pp;
        if (w->target <= lg->flushed_upto) {
            *pp = w->next;
            w->next = ready;
            ready = w;
        } else {
            pp = &w->next;
        }
    }
    while (ready) {
        struct log_waiter *w = ready;
        ready = w->next;
        w->fn(w, e);
    }
}

static void flush_done(struct tc_dev_io *dio, int err)
{
    struct cache *c = dio->priv;
    if (err) {
        unsigned d = (unsigned)(dio - c->lg.flush_dios);
        c->st.cache_write_errors++;
        tc_error("%s: cache flush failed: %s", c->devs[d].dev->name, strerror(-err));
        /* What this device held is re-homed, and log_device_failed()
         * raises every waiting sync's target to the newest chunk issued:
         * a sync is then answered by a later flush, its data durable on
         * the devices left, unless no chunk was issued after this flush's
         * target -- then the syncs it covers fail once (EIO: a device
         * error, whatever its errno).  So whether a write's sync fails
         * depends on what was issued after the flush began, not on which
         * flush covered it.  Dirty data that could not be re-homed is
         * reported apart, by the lost set, to the next client flush
         * (lost_flush_result()). */
        c->lg.error = -EIO;
        device_error(&c->lg, d, err, true);
    }
    if (!join_put(&c->lg.flushes, 0))
        return;
    flush_finish(&c->lg);
    maybe_flush(c);
}

/* Start a cache flush for the syncs waiting for one.  Every flush waiter's
 * chunk is written (notify_waiters() moves it here only then, and
 * log_device_failed() moves one back when it raises its target), so a
 * flush up to chunks_written_upto covers them all.  A flush with no device
 * to flush ends here, in this loop: no recursion through flush_done(). */
static void maybe_flush(struct cache *c)
{
    if (TC_DEBUG_ASSERTS_ON)
        for (struct log_waiter *w = c->lg.flush_waiters; w; w = w->next)
            TC_ASSERT(w->target <= c->lg.chunks_written_upto);     /* invariant 12 */
    while (!c->lg.flushing && c->lg.flush_waiters) {
        bool reachable = false;
        for (struct log_waiter *w = c->lg.flush_waiters; w && !reachable; w = w->next)
            reachable = w->target <= c->lg.chunks_written_upto;
        if (!reachable)
            return;     /* a chunk write ends first, and calls again */
        c->lg.flushing = true;
        c->lg.flush_target = c->lg.chunks_written_upto;
        /* A device's chunk written before its flush is issued is durable
         * once the flush ends. */
        for (unsigned d = 0; d < c->ndevs; d++) {
            TC_ASSERT(c->lg.dev_written[d] <= c->lg.flush_target);
            c->lg.dev_flush_target[d] = c->lg.dev_written[d];
        }
        if (c->lg.trace)
            tc_info("trace log: flush starts: target %llu", (unsigned long long)c->lg.flush_target);
        join_get(&c->lg.flushes);      /* held until all are issued */
        c->st.syncs++;
        for (unsigned d = 0; d < c->ndevs; d++) {
            struct cache_dev *cd = &c->devs[d];
            if (!cd->written_since_flush || cd->state != CDEV_OK)
                continue;
            cd->written_since_flush = false;
            struct tc_dev_io *dio = &c->lg.flush_dios[d];
            memset(dio, 0, sizeof *dio);
            dio->op = TC_DEV_FLUSH;
            dio->cb = flush_done;
            dio->priv = c;
            join_get(&c->lg.flushes);
            dev_submit(cd->dev, dio);
        }
        if (!join_put(&c->lg.flushes, 0))
            return;     /* flush_done() of the last one calls again */
        /* Nothing to flush (or every flush ended at once): at least one
         * waiter is woken, so the loop ends. */
        flush_finish(&c->lg);
    }
}

/* w waits for every chunk sealed so far, and a flush after them. */
static void sync_sealed(struct cache *c, struct log_waiter *w)
{
    w->target = c->lg.chunks_issued;
    w->need_flush = true;
    w->next = c->lg.written_waiters;
    c->lg.written_waiters = w;
    notify_waiters(&c->lg, 0);
    maybe_flush(c);
}

void log_sync(struct cache *c, struct log_waiter *w)
{
    for (unsigned d = 0; d < c->ndevs; d++)
        seal(c, d, false, false);
    sync_sealed(c, w);
}

/* A sync waits on written_waiters until its chunks are written, then on
 * flush_waiters until a flush covers them (notify_waiters()); taking it
 * off either list leaves the flush, if one runs, to the others. */
bool log_sync_cancel(struct cache *c, struct log_waiter *w)
{
    struct log_waiter **lists[2] = { &c->lg.written_waiters, &c->lg.flush_waiters };
    for (unsigned i = 0; i < 2; i++)
        for (struct log_waiter **pp = lists[i]; *pp; pp = &(*pp)->next)
            if (*pp == w) {
                *pp = w->next;
                w->next = NULL;
                return true;
            }
    return false;
}

/* The log's durability now (status): entries appended to chunks not yet
 * sealed; chunks sealed and issued, written in order, flushed; the
 * flushed marks; a cache flush running; syncs waiting for a write or for
 * a flush. */
void log_status_json(const struct log *lg, struct tc_json *j)
{
    unsigned written = 0, flush = 0;
    uint64_t open_entries = 0;
    for (struct log_waiter *w = lg->written_waiters; w; w = w->next)
        written++;
    for (struct log_waiter *w = lg->flush_waiters; w; w = w->next)
        flush++;
    for (unsigned d = 0; d < TC_MAX_DEVICES; d++)   /* closed heads hold none */
        open_entries += lg->heads[d].nentries;
    json_begin_object(j, "log");
    json_uint(j, "open_entries", open_entries);
    json_uint(j, "chunks_issued", lg->chunks_issued);
    json_uint(j, "chunks_written", lg->chunks_written_upto);
    json_uint(j, "chunks_flushed", lg->flushed_upto);
    json_uint(j, "flushed_marked", lg->marked_upto);
    json_uint(j, "flush_marks", lg->flush_marks);
    /* Tombstones and CLEAN records refused while a device in service had
     * no segment open and none free for their copy there (none beyond its
     * share of the reserve, for a client record: log_append()):
     * their callers wait for room, or defer them. */
    json_uint(j, "records_waiting_for_a_device", lg->every_refused);
    /* A chunk with entries that no sealed header records as flushed yet:
     * a summary is still to come for it (log_mark_flushed(), once it is
     * flushed and the log is quiet).  Tests wait for it to be false, and
     * the log flushed, before they fail a device: then nothing but a
     * client touches the device. */
    json_bool(j, "flush_mark_owed", lg->marked_upto < lg->entries_chunk);
    json_bool(j, "flushing", lg->flushing);
    json_uint(j, "waiting_for_writes", written);
    json_uint(j, "waiting_for_flush", flush);
    json_end_object(j);
}

void log_image_memory(const struct log *lg, uint64_t seg_size, uint64_t *held, uint64_t *idle,
                      uint64_t *table)
{
    uint64_t n = 0;
    for (uint32_t s = 0; lg->images && s < lg->nsegs; s++)
        n += lg->images[s] != NULL;
    *held = n * tc_round_up(seg_size, 4096);
    *idle = (uint64_t)lg->npool * tc_round_up(seg_size, 4096);
    *table = (uint64_t)lg->nsegs * sizeof *lg->images;
}

static void commit_done(struct log_waiter *w, int err)
{
    struct log *lg = container_of(w, struct log, commit);
    lg->commit_pending = false;
    if (err)
        tc_error("cache: periodic commit failed: %s", strerror(-err));
}

void log_commit(struct cache *c)
{
    struct log *lg = &c->lg;
    if (lg->commit_pending)
        return;
    lg->commit_pending = true;
    lg->commit.fn = commit_done;
    /* A chunk of clean copies is not the commit's to seal before it is
     * due (it holds nothing a crash may not lose). */
    for (unsigned d = 0; d < c->ndevs; d++)
        if (lg->heads[d].keeps || seal_due(c, d) <= tc_now_ns())
            seal(c, d, false, false);
    sync_sealed(c, &lg->commit);
}

/*
 * The flushed mark.  A chunk's header cannot say that the chunk itself
 * was flushed: only a later header's flushed_seq does.  Recovery takes a
 * chunk no later header covers for one a crash may have torn, and ignores
 * it if it fails its checks -- right for a torn write, which nobody was
 * told is durable, and wrong for a chunk whose FLUSH was acknowledged and
 * whose header was damaged afterwards: the block's older version would be
 * served.  Under load the next chunk carries the mark; this writes one
 * header for the last chunks of a burst, once the log has been quiet for
 * delay_ns since the flush (so that a steady stream of FLUSHes costs no
 * extra write).  It seals a head's pending entries if it has any, else a
 * header with no entries in an open segment; none is opened for it while
 * the free segments are down to the reserve.
 *
 * The header itself is not flushed: the mark matters only after a crash
 * followed by damage to the chunk it covers, and a crash that loses the
 * mark leaves what is there today.  What remains open is a crash in the
 * delay_ns after an acknowledged FLUSH, and damage to that chunk's header
 * afterwards.
 */
void log_mark_flushed(struct cache *c, uint64_t now_ns, uint64_t delay_ns)
{
    struct log *lg = &c->lg;
    /* Owed only for a chunk with entries: a header written only to carry
     * the mark needs none of its own once flushed, so an idle log ends
     * with one such header, not one per commit interval. */
    bool owed = lg->entries_chunk <= lg->flushed_upto && lg->marked_upto < lg->entries_chunk;
    if (c->data_free || !owed || now_ns - lg->flushed_ns < delay_ns ||
        lg->inflight_head || lg->flushing || lg->written_waiters || lg->flush_waiters)
        return;
    for (unsigned d = 0; d < c->ndevs; d++)
        if (lg->heads[d].seg != NIL && lg->heads[d].nentries > 0) {
            seal(c, d, false, false);
            lg->flush_marks++;
            arm_seal_timer(c);
            return;
        }
    if (!ensure_group(c, false, false))
        return;
    for (unsigned d = 0; d < c->ndevs; d++)
        if (lg->heads[d].seg != NIL) {
            seal(c, d, true, false);
            lg->flush_marks++;
            return;
        }
}

/* A device failed (failure.c has moved its data): close its open segment
 * and make everyone waiting for chunks wait for what was appended since,
 * which holds the data moved elsewhere. */
bool log_chunk_written(struct cache *c, uint32_t seg, uint32_t off)
{
    const struct log *lg = &c->lg;
    for (size_t i = 0; i < lg->nfailed_chunks; i++)
        if (lg->failed_chunks[i].seg == seg && off >= lg->failed_chunks[i].start &&
            off < lg->failed_chunks[i].end)
            return false;
    if (log_image(lg, seg) == NULL)
        return true;
    const struct head *h = &lg->heads[space_seg_dev(&c->sp, seg)];
    if (h->seg == seg && off >= h->chunk_start)
        return false;
    for (const struct chunk_write *cw = lg->inflight_head; cw; cw = cw->next) {
        if (cw->seg != seg)
            continue;
        uint64_t start = (cw->dio.off - seg_dev_offset(c, seg)) / TC_SECTOR;
        if (off >= start && off < start + cw->dio.len / TC_SECTOR)
            return false;
    }
    return true;
}

void log_device_failed(struct cache *c, unsigned d)
{
    struct head *h = &c->lg.heads[d];
    /* Any chunk issued so far may be on it, written but not flushed, and
     * lost with it: a number later headers must not call missing while
     * the failure is not yet recorded (ondisk.h, failed_chunk). */
    c->lg.failed_chunk = TC_MAX(c->lg.failed_chunk, c->lg.chunks_issued);
    if (h->seg != NIL) {
        uint32_t seg = head_leave(c, d);
        h->nentries = 0;
        h->data_fill = 0;
        image_release(c, seg);
    }
    while (h->waiters) {
        struct log_waiter *w = h->waiters;
        h->waiters = w->next;
        w->next = c->lg.written_waiters;
        c->lg.written_waiters = w;
    }
    log_seal_all(c, false);
    for (struct log_waiter *w = c->lg.written_waiters; w; w = w->next)
        if (w->target < c->lg.chunks_issued)
            w->target = c->lg.chunks_issued;
    /* A sync waiting for a flush waits for those writes again: only
     * written chunks may be waited for by a flush (maybe_flush()). */
    for (struct log_waiter **pp = &c->lg.flush_waiters; *pp;) {
        struct log_waiter *w = *pp;
        if (w->target < c->lg.chunks_issued)
            w->target = c->lg.chunks_issued;
        if (w->target > c->lg.chunks_written_upto) {
            *pp = w->next;
            w->next = c->lg.written_waiters;
            c->lg.written_waiters = w;
        } else {
            pp = &w->next;
        }
    }
    notify_waiters(&c->lg, 0);
    maybe_flush(c);
}

void log_release_images(struct cache *c, unsigned d)
{
    for (uint32_t s = c->devs[d].first_seg; s < c->devs[d].first_seg + c->devs[d].nsegs; s++)
        image_release(c, s);
}

void log_recovered(struct log *lg, uint64_t next_seq, uint64_t last_chunk, uint64_t tail_seq,
                   uint64_t wt_stable_seq, bool skipped)
{
    /* Before the first append: nothing in flight, nobody waiting. */
    TC_ASSERT_ALWAYS(lg->inflight_head == NULL && lg->written_waiters == NULL &&
                     lg->flush_waiters == NULL && lg->wt_inflight == NULL);
    lg->next_seq = next_seq;
    lg->chunks_issued = lg->chunks_written_upto = lg->flushed_upto = last_chunk;  /* invariant 11 */
    lg->marked_upto = last_chunk;   /* read back whole: no mark is owed for it */
    lg->tail_seq = tail_seq;
    lg->wt_stable_seq = wt_stable_seq;
    lg->skipped_upto = skipped ? last_chunk : 0;
    lg->recovered_newest = last_chunk;     /* the caller's, when it skipped */
    lg->restart_mark_owed = skipped;
}

/* A sync waited for by polling the reactor (log_sync_wait()). */
struct sync_wait {
    struct log_waiter lw;
    bool done;
    int err;
};

static void sync_waited(struct log_waiter *lw, int err)
{
    struct sync_wait *x = container_of(lw, struct sync_wait, lw);
    x->err = err;
    x->done = true;
}

int log_sync_wait(struct cache *c)
{
    struct sync_wait x = { .lw = { .fn = sync_waited, .need_flush = true } };
    log_sync(c, &x.lw);
    while (!x.done)
        reactor_poll(c->reactor, 100000000ull);
    return x.err;
}

int log_write_restart_mark(struct cache *c)
{
    struct log *lg = &c->lg;
    if (!lg->restart_mark_owed)
        return 0;
    lg->restart_mark_owed = false;
    /* The reserve may be taken: this is the first record of the run, and
     * the records that must always be appendable follow in its group. */
    uint64_t before = lg->chunks_issued;
    if (!log_seal_all(c, true) || lg->chunks_issued == before) {
        tc_warn("cache: no room for the chunk that records the sequence numbers skipped after "
                "the crash (chunks from %llu on): the first chunk this run flushes records it",
                (unsigned long long)lg->skipped_upto + 1);
        return -ENOSPC;
    }
    int err = log_sync_wait(c);
    if (err) {
        tc_warn("cache: writing the chunk that records the sequence numbers skipped after the "
                "crash failed (%s)", strerror(-err));
        return err;
    }
    tc_info("cache: the log goes on from chunk %llu, above any number a run before may have "
            "used (no clean stop is recorded)", (unsigned long long)before + 1);
    return 0;
}

/* ---- write-through versions in flight, and the stable mark ---- */

void log_wt_track(struct log *lg, struct log_wt *t, uint64_t seq)
{
    TC_ASSERT(t->seq == 0 && seq != 0 && seq < lg->next_seq);
    t->seq = seq;
    t->prev = NULL;
    t->next = lg->wt_inflight;
    if (lg->wt_inflight)
        lg->wt_inflight->prev = t;
    lg->wt_inflight = t;
}

void log_wt_untrack(struct log *lg, struct log_wt *t)
{
    if (t->seq == 0)
        return;
    if (t->prev)
        t->prev->next = t->next;
    else
        lg->wt_inflight = t->next;
    if (t->next)
        t->next->prev = t->prev;
    t->prev = t->next = NULL;
    t->seq = 0;
}

uint64_t log_wt_oldest(const struct log *lg)
{
    uint64_t min = lg->next_seq;
    for (const struct log_wt *t = lg->wt_inflight; t; t = t->next)
        if (t->seq < min)
            min = t->seq;
    return min;
}

/* Keeps invariant 21: the caller's seq is below every version tracked
 * when it was computed (wt_stable_candidate()), and versions tracked since
 * have higher sequences. */
void log_wt_stable(struct log *lg, uint64_t seq)
{
    if (seq <= lg->wt_stable_seq)
        return;
    if (TC_DEBUG_ASSERTS_ON)
        for (const struct log_wt *t = lg->wt_inflight; t; t = t->next)
            TC_ASSERT(t->seq > seq);
    lg->wt_stable_seq = seq;
}
