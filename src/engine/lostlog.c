/*
 * The cache's side of the lost set (lost.h: the set itself, c->map.lost): a
 * loss recorded in the log, a clear told to the state file, the log
 * records that follow a settle, the EIO a flush reports after a loss, and
 * the requests that reach the origin directly once the cache has failed
 * or is detached.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/abandon.h"
#include "engine/blocklock.h"
#include "engine/cache.h"
#include "engine/cleaner.h"
#include "engine/failure.h"
#include "engine/writeback.h"
#include "engine/lost.h"
#include "engine/lostlog.h"
#include "util/log.h"
#include "util/misc.h"

/* Record durably that these sectors of the block are lost now. */
static void record(struct cache *c, uint64_t oblock, const struct tc_mask *mask)
{
    struct tc_mask m, was;
    if (!lost_get_persisted(&c->map.lost, oblock, &was))
        mask_clear(&was);
    if (!lost_get(&c->map.lost, oblock, &m))
        mask_clear(&m);
    mask_or(&m, mask);
    lost_set(&c->map.lost, oblock, &m);
    lost_get_persisted(&c->map.lost, oblock, &m);
    if (c->abandoned) {
        /* No log: the state file is the record, written before the caller
         * goes on (a write in doubt is answered after) -- when the set
         * grew: the drain's losses (failure.c) are in it already. */
        struct tc_mask grew = m;
        mask_andnot(&grew, &was);
        if (!mask_empty(&grew))
            abandon_lost_grown(c);
        return;
    }
    struct append a = { .oblock = oblock, .type = TC_ENTRY_LOST, .valid = m,
                        .use_reserve = true, .urgent = true };
    /* A device failure's records leave the cleaner's tail record its
     * room: one refused waits, with the failure's mark, for the set to be
     * recorded again (failure.c, relost_start()). */
    bool fits = !c->records_bounded || cleaner_record_fits(c);
    if ((fits && log_append(c, &a, NULL).err >= 0) || c->offline)
        return;
    bool in_service = false;
    for (unsigned d = 0; d < c->ndevs; d++)
        in_service |= c->devs[d].state == CDEV_OK;
    if (in_service && !fits) {
        c->lost_unrecorded++;
        return;
    }
    if (in_service) {
        c->lost_unrecorded++;
        /* No room even in the cleaner's reserve (at a stop, with the
         * cleaner stopped, say): reads fail with EIO, but the log does
         * not say so; the stop then writes the lost set into the state
         * file (abandon_close(): lost_unrecorded tells it), which the
         * restart applies.  (With no device in service the abandonment
         * follows, and its state file records the lost set.)  A device
         * failure does not write its mark until the set is recorded
         * again (failure.c): lost_unrecorded tells it too. */
        uint64_t base = oblock * c->block_size;
        tc_error("cache: no room in the log to record %u lost sectors of origin block %llu "
                 "(bytes %llu..%llu): a clean stop records them in the state file %s",
                 mask_count(mask), (unsigned long long)oblock, (unsigned long long)base,
                 (unsigned long long)(base + c->block_size - 1), c->state_path);
    }
}

void lost_record(struct cache *c, uint64_t oblock, const struct tc_mask *mask)
{
    record(c, oblock, mask);
    c->lost_events++;
}

struct again {
    struct cache *c;
    bool ok;
};

static void record_again(void *arg, uint64_t oblock, const struct tc_mask *m)
{
    struct again *x = arg;
    struct append a = { .oblock = oblock, .type = TC_ENTRY_LOST, .valid = *m,
                        .use_reserve = true };
    /* Bounded as record() is. */
    if ((x->c->records_bounded && !cleaner_record_fits(x->c)) || log_append(x->c, &a, NULL).err < 0)
        x->ok = false;
}

bool lost_record_again(struct cache *c)
{
    struct again x = { c, true };
    lost_foreach(&c->map.lost, record_again, &x);
    return x.ok;
}

void lost_record_pending(struct cache *c, uint64_t oblock, const struct tc_mask *mask)
{
    record(c, oblock, mask);
}

/* A write the origin may or may not have taken, and may still take later
 * (dev_nbd.c: a fenced connection): the client was told it failed, so no
 * flush reports it again, but until a client writes the sectors again
 * reads of those the cache does not hold fail, rather than return
 * whichever version the origin holds at the moment. */
void lost_in_doubt(struct cache *c, uint64_t oblock, const struct tc_mask *mask)
{
    /* Sectors the cache holds are read from it, whatever the origin does. */
    struct tc_mask m = *mask;
    uint32_t id = index_lookup(&c->map.idx, oblock);
    if (id != NIL) {
        struct tc_mask v, d;
        ce_get_masks(&c->map.idx, id, &v, &d);
        mask_andnot(&m, &v);
    }
    c->st.in_doubt_writes++;
    if (!mask_empty(&m))
        record(c, oblock, &m);
}

void lost_in_doubt_range(struct cache *c, uint64_t off, uint64_t len)
{
    uint64_t end = off + len, ob;
    struct tc_mask m;
    while (mask_next_block(&off, end, c->block_size, &ob, &m))
        lost_in_doubt(c, ob, &m);
}

/* Written again: these sectors are no longer lost.  Reads see it at once;
 * the durable records follow once the write is durable (abandon.c). */
void lost_written(struct cache *c, uint64_t oblock, const struct tc_mask *written)
{
    if (lost_clear(&c->map.lost, oblock, written)) {
        abandon_lost_changed(c);
        /* A flush running may have counted the block done when its
         * sectors were lost: the version it was to write back is gone,
         * so it writes this newer one back instead. */
        writeback_flush_include(c, oblock);
    }
}

/* Drained: the failed device's version of these sectors written back to
 * the origin.  As lost_written(), but their proofs stay until it is
 * settled (lost.h). */
void lost_drained(struct cache *c, uint64_t oblock, const struct tc_mask *written)
{
    if (lost_clear_drained(&c->map.lost, oblock, written))
        abandon_lost_changed(c);
}

/* A write of [off, off + len) reached the volume: its sectors are no
 * longer lost. */
void lost_written_range(struct cache *c, uint64_t off, uint64_t len)
{
    if (lost_clear_range(&c->map.lost, c->block_size, off, len))
        abandon_lost_changed(c);
}

static void settled(void *arg, uint64_t oblock, const struct tc_mask *m)
{
    struct cache *c = arg;
    if (c->abandoned)
        return;
    struct append a = { .oblock = oblock, .type = TC_ENTRY_LOST, .valid = *m,
                        .use_reserve = true, .urgent = true };
    log_append(c, &a, NULL);
}

/* A settle completed (ok) or failed (the clears wait for the next one).
 * Once durable, the log records the blocks' new lost sectors (when it is
 * still written: not abandoned). */
void lost_settle_done(struct cache *c, bool ok)
{
    lost_settle_end(&c->map.lost, ok, settled, c);
}

/* A flush reports the acknowledged data lost since the previous flush
 * returned: once, as EIO (a client must not take its writes for durable
 * when some were lost before the flush could make them so). */
int lost_flush_result(struct cache *c)
{
    if (c->lost_events == c->lost_events_reported)
        return 0;
    c->lost_events_reported = c->lost_events;
    if (c->owin.cuts != c->owin.cuts_reported) {
        c->owin.cuts_reported = c->owin.cuts;
        tc_error("flush fails with EIO: the origin connection was lost before a flush covered "
                 "acknowledged writes (originwin.c; %llu lost sectors now unreadable)",
                 (unsigned long long)lost_sectors(&c->map.lost));
        return -EIO;
    }
    tc_error("flush fails with EIO: acknowledged writes were lost with the cache since the "
             "previous flush (%llu lost sectors now unreadable)",
             (unsigned long long)lost_sectors(&c->map.lost));
    return -EIO;
}

static void flush_settled(void *arg, int err)
{
    struct ereq *e = arg;
    if (err) {
        tc_error("flush fails with EIO: the origin has the data, but the state file could not "
                 "record that sectors recorded lost are not any more (%s)", strerror(-err));
        e->err = -EIO;
    }
    e->complete = e->lost_next;
    e->complete(e);
}

static void passthrough_flushed(struct ereq *e)
{
    struct cache *c = e->vol->cache;
    if (e->err == 0)
        e->err = lost_flush_result(c);
    if (e->err == 0 && c->abandoned) {
        /* Sectors recorded lost that this flush made durable on the origin
         * (drained, failure.c, or written again) are still lost in the
         * state file: until it says otherwise, a crash makes them read
         * EIO.  The flush is answered once it does (abandon.c). */
        abandon_settle_wait(c, flush_settled, e);
        return;
    }
    if (e->err == 0) {
        /* Detached, the cache not abandoned: the clears are recorded in
         * its log (LOST records) by a settle, after which a crash no
         * longer makes them read EIO; answered once they are durable.  At
         * once when nothing is unsettled. */
        abandon_clears_wait(c, flush_settled, e);
        return;
    }
    e->complete = e->lost_next;
    e->complete(e);
}

/* A write that reached the origin directly failed in doubt (dev_nbd.c:
 * its connection was fenced, the origin may take it later still): as on
 * the cache's own path (writepath.c), its sectors read as lost until a
 * client writes them again, and the client is told EIO.  True if so. */
static bool passthrough_in_doubt(struct cache *c, struct ereq *e)
{
    if (e->err != -ETIMEDOUT || e->op == TC_OP_TRIM)
        return false;
    lost_in_doubt_range(c, e->off, e->len);
    e->err = -EIO;
    return true;
}

static void passthrough_written(struct ereq *e)
{
    struct cache *c = e->vol->cache;
    if (e->err == 0)
        lost_written_range(c, e->off, e->len);
    passthrough_in_doubt(c, e);
    e->complete = e->lost_next;
    e->complete(e);
}

static void fua_settled(void *arg, int err)
{
    struct ereq *e = arg;
    if (err) {
        tc_error("FUA write of origin bytes %llu..%llu fails with EIO: the origin has the data, "
                 "but the state file could not record that sectors recorded lost are not any "
                 "more (%s)", (unsigned long long)e->off,
                 (unsigned long long)(e->off + e->len - 1), strerror(-err));
        e->err = -EIO;
    }
    e->complete(e);
}

void lost_fua_settle_wait(struct cache *c, struct ereq *e)
{
    abandon_settle_wait(c, fua_settled, e);
}

/* A FUA write, write-zeroes or trim that reached the origin after the
 * cache was abandoned (its FUA flag is gone by now: passthrough.c). */
static void passthrough_fua_written(struct ereq *e)
{
    struct cache *c = e->vol->cache;
    if (e->err == 0 && e->op != TC_OP_TRIM)
        lost_written_range(c, e->off, e->len);
    passthrough_in_doubt(c, e);
    if (e->err == 0 && c->abandoned) {
        /* As for a FLUSH (passthrough_flushed()): the sectors it wrote,
         * lost ones written again or drained data's, may still be lost
         * in the state file, and a crash would make the data it declared
         * durable read EIO.  Answered once the state file says not. */
        e->complete = e->lost_next;
        lost_fua_settle_wait(c, e);
        return;
    }
    if (e->err == 0 && e->op != TC_OP_TRIM) {
        /* Detached: once the log's records say not. */
        e->complete = e->lost_next;
        abandon_clears_wait(c, fua_settled, e);
        return;
    }
    e->complete = e->lost_next;
    e->complete(e);
}

/*
 * A write-back job that read its block before the cache failed may still
 * write it to the origin afterwards.  Its version is older than any write
 * a client sends once the cache is gone (that data was recorded lost), so
 * such a write must not be issued beside it: the origin may complete the
 * two in either order.  It waits until the block has no write-back in
 * flight, then goes on.
 */
struct wb_wait {
    struct block_waiter w;
    struct ereq *e;
};

static void writeback_waited(struct block_waiter *bw)
{
    struct wb_wait *x = container_of(bw, struct wb_wait, w);
    struct ereq *e = x->e;
    free(x);
    lost_passthrough(e);
}

/*
 * A device draining (failure.c) with none left to take appends: a request
 * touching a block still dirty there waits for that block's writeback,
 * then goes on (to the origin, which then holds the block's newest
 * data; or, for sectors the drain could not read back, to the lost set's
 * EIO).  A write must: it would go to the origin beside the dirty version
 * the writeback is to write later.  A read too, which is simpler than
 * serving it from the failed device: the origin lacks the dirty data.  A
 * writeback that fails (the origin refuses it) leaves the block dirty and
 * backing off: the request waits for its next attempt, as a FLUSH held
 * for the drain does, and fails with EIO only once writeback gives the
 * block up (writeback_block_given_up(): refused WB_FAILURES_EIO times in a
 * row, the origin offline, writeback stopped) -- the block stays dirty,
 * and the next request asks again.
 */
struct drain_blk_wait {
    struct block_waiter w;
    struct ereq *e;
    uint64_t oblock;
};

static void drained_block(struct block_waiter *bw)
{
    struct drain_blk_wait *x = container_of(bw, struct drain_blk_wait, w);
    struct ereq *e = x->e;
    uint64_t b = x->oblock;
    int err = bw->err;
    free(x);
    e->vol->cache->drain_block_waiters--;
    /* A writeback that failed only because the block's dirty sectors
     * were all lost (unreadable) leaves it clean: go on then.  One the
     * origin refused is tried again after the block's back-off, and
     * lost_passthrough() waits for that attempt. */
    struct cache *c = e->vol->cache;
    if (err && map_is_dirty(&c->map, b) && writeback_block_given_up(c, b)) {
        if (writeback_log_allow(c))
            tc_error("%s of origin bytes %llu..%llu fails with EIO: its dirty data on the "
                     "draining cache device cannot be written back (%u failed attempts in a "
                     "row, or the origin offline, or writeback stopped)",
                     e->op == TC_OP_READ ? "read" : "write", (unsigned long long)e->off,
                     (unsigned long long)(e->off + e->len - 1),
                     writeback_block_failures(c, b));
        e->err = -EIO;
        e->complete(e);
        return;
    }
    lost_passthrough(e);
}

static bool wait_for_drain(struct cache *c, struct ereq *e)
{
    if (c->draining == 0 || c->map.dirty_blocks == 0 || c->wb == NULL || e->len == 0)
        return false;
    uint64_t b0 = e->off / c->block_size;
    uint64_t b1 = (e->off + e->len + c->block_size - 1) / c->block_size;
    for (uint64_t b = b0; b < b1; b++) {
        if (!map_is_dirty(&c->map, b))
            continue;
        struct drain_blk_wait *x = tc_xcalloc(1, sizeof *x);
        x->w.fn = drained_block;
        x->e = e;
        x->oblock = b;
        c->drain_block_waiters++;
        writeback_block(c, b, &x->w);
        return true;
    }
    return false;
}

static bool wait_for_writebacks(struct cache *c, struct ereq *e)
{
    uint64_t b0 = e->off / c->block_size;
    uint64_t b1 = (e->off + e->len + c->block_size - 1) / c->block_size;
    for (uint64_t b = b0; b < b1; b++) {
        if (block_wait_wb_free(c->locks, b))
            continue;
        struct wb_wait *x = tc_xcalloc(1, sizeof *x);
        x->w.fn = writeback_waited;
        x->e = e;
        if (block_wait_wb(c->locks, b, &x->w)) {   /* cannot be, but then: go on */
            free(x);
            continue;
        }
        return true;
    }
    return false;
}

void lost_passthrough(struct ereq *e)
{
    struct cache *c = e->vol->cache;
    bool write = e->op == TC_OP_WRITE || e->op == TC_OP_WRITE_ZEROES || e->op == TC_OP_TRIM;
    /* First: a drained block's sectors are in the lost set until written
     * back (failure.c), and are not lost unless the drain fails to read
     * them. */
    if ((write || e->op == TC_OP_READ) && wait_for_drain(c, e))
        return;
    if (e->op == TC_OP_READ && lost_overlaps(&c->map.lost, c->block_size, e->off, e->len)) {
        /* Its newest version was lost with the cache: never the origin's
         * older one in its place. */
        e->err = -EIO;
        e->complete(e);
        return;
    }
    if (write && c->abandon_unrecorded) {
        /* No durable record says the cache's log is stale: a write that
         * reached only the origin could be undone by the log at the next
         * start (abandon.c). */
        tc_error("write of origin bytes %llu..%llu refused: the abandonment of the cache is "
                 "not recorded yet (state file %s)", (unsigned long long)e->off,
                 (unsigned long long)(e->off + e->len - 1), c->state_path);
        e->err = -EIO;
        e->complete(e);
        return;
    }
    if (write && abandon_unfiled_refuses(c, e->op == TC_OP_TRIM ? "trim" :
                                         e->op == TC_OP_WRITE_ZEROES ? "write-zeroes" : "write",
                                         e->off, e->len)) {
        e->err = -EIO;
        e->complete(e);
        return;
    }
    if (write && wait_for_writebacks(c, e))
        return;
    /* The state file on disk may prove an older version of these sectors
     * (a drain's, abandon.c): not after this write. */
    if (write) {
        int rc = abandon_proofs_before_write(c, e->off, e->len);
        if (rc < 0) {
            e->err = -EIO;
            e->complete(e);
            return;
        }
    }
    if (e->op == TC_OP_FLUSH && cache_drain_hold(c, e, lost_passthrough))
        return;     /* until the drained data is on the origin (failure.c) */
    if (e->op == TC_OP_FLUSH) {
        e->lost_next = e->complete;
        e->complete = passthrough_flushed;
    }
    if (write && (e->flags & TC_REQ_FUA) && (c->abandoned || lost_sectors(&c->map.lost) > 0)) {
        e->lost_next = e->complete;
        e->complete = passthrough_fua_written;
    } else if ((e->op == TC_OP_WRITE || e->op == TC_OP_WRITE_ZEROES) &&
               (lost_sectors(&c->map.lost) > 0 || c->abandoned)) {
        /* (Abandoned: also for a failure in doubt, which the state file
         * must record.) */
        e->lost_next = e->complete;
        e->complete = passthrough_written;
    }
    passthrough_submit(e);
}
