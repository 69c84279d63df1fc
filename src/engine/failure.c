/*
 * A cache device that fails.
 *
 * A device is failed on its first write error (the log cannot keep its
 * promises on it), when it has vanished (ENODEV, ENXIO), or after a run of
 * read errors.  The volume keeps serving, degraded:
 *
 *   clean data on the device     dropped: reads go to the origin
 *   dirty data with a mirror     the mirror becomes the copy
 *   dirty data still in RAM      (a chunk not yet, or not successfully,
 *                                written) appended again on another device
 *   dirty data with no copy      drained: kept where it is and written back
 *                                to the origin (below); sectors that cannot
 *                                be read back (an I/O error, a checksum
 *                                mismatch) are lost: recorded (LOST
 *                                records), and reads of exactly those
 *                                sectors fail with EIO until written again
 *
 * The drain.  A failed device usually still reads: the write that failed
 * it may have found its file system full, or one bad spot.  So while the
 * daemon runs, the dirty data only it holds is not given up but written
 * back: the device is CDEV_DRAINING.  Nothing is appended to it (its free
 * segments are dropped, its head closed), its log is distrusted from now
 * on (devfail_record(), or the abandonment when no device is left), but
 * its dirty fragments stay in the index and are read from it -- or from
 * the segment's RAM image, which a draining device keeps (log.c), so the
 * data of a chunk whose write failed, and of the open chunk, drains too.
 * Writeback treats the drain as urgent (writeback.c: window()), and when
 * it cannot read such a block it reads sector by sector and records as
 * lost exactly the sectors that fail.  When no dirty data is left on the
 * device (cache_drain_check(), on writeback's tick), the failure is
 * finished as before: the remaining (clean) fragments are dropped, their
 * blocks get tombstones, the images go, the device is CDEV_FAILING.
 *
 * While a drain runs with devices left, requests take the cache's paths
 * as ever (reads of drained blocks are served from the draining device;
 * writes go to the devices left).  With none left the volume serves the
 * origin at once (c->vol->cache_failed, the abandonment recorded first),
 * and lost_passthrough() makes any request touching a block still dirty
 * wait for that block's writeback first (lostlog.c).
 *
 * A FLUSH while a drain runs waits for the drain to end (then flushes as
 * ever), or fails with EIO once writeback cannot progress (stopped,
 * failing, the origin away): the dirty data on the draining device was acknowledged, and
 * its only durable record is a log the next start will not trust, so no
 * FLUSH may claim that the writes before it are durable until the drain
 * has put them on the origin (each writeback job flushes the origin).
 * What the drain does not promise: a crash, or a stop, before it ends
 * loses what it had not written back yet, as a failure lost it before.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/abandon.h"
#include "engine/blocklock.h"
#include "engine/cache.h"
#include "engine/cleaner.h"
#include "engine/failure.h"
#include "engine/lostlog.h"
#include "engine/map.h"
#include "engine/writeback.h"
#include "io/claim.h"
#include "io/bufpool.h"
#include "util/assert.h"
#include "util/parse.h"
#include "util/log.h"
#include "util/misc.h"

#define READ_ERRORS_TO_FAIL 8

/*
 * A cache file cut short under the daemon (truncated): reads past the cut
 * end early, and once later log writes have extended the file again, the
 * range between reads as zeros -- checksum mismatches, not I/O errors,
 * which alone would never fail the device while every chunk summary past
 * the cut is gone (a restart would silently lose the dirty data they
 * described).  So after a read error or a checksum mismatch the file's
 * size is checked against the size it was formatted with; a file that
 * shrank has failed.  (A stat() of a local file, on an error path only.)
 */
static bool file_shrunk(struct cache_dev *cd, uint64_t *now)
{
    char path[4096];
    const char *name = cd->dev->name;
    if (cd->dev->is_block_device || !claim_local_path(name, path, sizeof path))
        return false;
    struct stat st;
    if (stat(path, &st) < 0 || !S_ISREG(st.st_mode))
        return false;
    *now = (uint64_t)st.st_size;
    return *now < cd->sb.dev_size;
}

void cache_device_check_size(struct cache *c, unsigned d)
{
    struct cache_dev *cd = &c->devs[d];
    uint64_t now;
    if (cd->state != CDEV_OK || c->offline || !file_shrunk(cd, &now))
        return;
    char why[160];
    snprintf(why, sizeof why, "the cache file shrank to %llu bytes (formatted with %llu)",
             (unsigned long long)now, (unsigned long long)cd->sb.dev_size);
    cache_device_fail(c, d, why);
}

void cache_device_error(struct cache *c, unsigned d, int err, bool write)
{
    struct cache_dev *cd = &c->devs[d];
    if (cd->state != CDEV_OK || c->offline)
        return;
    if (!write) {
        cache_device_check_size(c, d);
        if (cd->state != CDEV_OK)
            return;
    }
    bool vanished = err == -ENODEV || err == -ENXIO || err == -ENOENT;
    char why[160];
    if (write || vanished) {
        snprintf(why, sizeof why, "%s error: %s", write ? "write" : "device", strerror(-err));
        cache_device_fail(c, d, why);
    } else if (cd->dev->consecutive_errors >= READ_ERRORS_TO_FAIL) {
        snprintf(why, sizeof why, "%u read errors in a row (last: %s)",
                 cd->dev->consecutive_errors, strerror(-err));
        cache_device_fail(c, d, why);
    }
}

struct victim {
    uint64_t oblock;
    uint32_t seg;
    uint16_t off;
};

/* Dirty sectors of fragment fid, still in its segment's RAM image: append
 * them on another device.  Returns false if that was not possible. */
static bool rehome_from_image(struct cache *c, uint64_t oblock, uint32_t id, uint32_t fid,
                              const struct tc_mask *cur, const struct tc_mask *dirty)
{
    struct cfrag f = frag_view(&c->map.idx, fid);
    const uint8_t *image = log_image(&c->lg, f.seg);
    if (image == NULL)
        return false;
    struct tc_mask st;
    frag_stored(&c->map.idx, fid, &st);
    unsigned n = mask_count(cur);
    uint8_t *data = bufpool_get((size_t)n * TC_SECTOR);
    unsigned k = 0;
    for (unsigned s = 0; s < c->spb; s++)
        if (mask_test(cur, s))
            memcpy(data + (size_t)k++ * TC_SECTOR,
                   image + (size_t)(f.off + mask_rank(&st, s)) * TC_SECTOR, TC_SECTOR);
    /* Clean sectors among the dirty ones may be of a write-through version
     * the origin lacks durably: the copy keeps the flag then (see
     * TC_ENTRY_WT), or recovery would take them for clean. */
    bool wt = CE(&c->map.idx, id)->flags & CE_WT;
    struct append a = { .oblock = oblock, .type = TC_ENTRY_DATA, .valid = *cur,
                        .dirty = *dirty, .data = data, .use_reserve = true,
                        .flags = wt ? TC_ENTRY_WT : 0,
                        .mirror = c->vol->cfg.dirty_copies > 1 };
    struct log_loc at = log_append(c, &a, NULL);
    if (at.err < 0 && a.mirror) {
        a.mirror = false;       /* one device left: one copy */
        at = log_append(c, &a, NULL);
    }
    bufpool_put(data, (size_t)n * TC_SECTOR);
    if (at.err < 0)
        return false;
    map_add_fragment(c, oblock, cur, dirty, at.seg, at.off, at.mseg,
                       at.moff, wt ? CE_WT : 0, false);
    return true;
}

/*
 * A fragment on the failed device was dropped (clean, or dirty and lost --
 * the LOST record says so): the block goes whole
 * (its fragments on other devices too) and a tombstone says so in the log
 * of the devices left.  Without it the device, readable again at the next
 * start (a transient error), would bring the fragment back: its version
 * may be older by then than what the origin received, since writes to a
 * block the index no longer holds leave nothing in the log (write-around,
 * a bypassed stream, a write-through write not admitted) -- and a lost
 * dirty version would even be written back over them.  The tombstone
 * reaches the log before any such write is flushed: a client's FLUSH also
 * syncs the log.  A block with dirty data on another device keeps it (a
 * tombstone would drop that too at the next start); its later writes all
 * leave a record while it stays cached.  A block with several fragments
 * on the device gets one tombstone: the first drops it from the index.
 */
static void forget_block(struct cache *c, uint64_t oblock)
{
    uint32_t id = index_lookup(&c->map.idx, oblock);
    if (id != NIL) {
        struct tc_mask v, d;
        ce_get_masks(&c->map.idx, id, &v, &d);
        if (!mask_empty(&d))
            return;
        map_drop_block(c, oblock);
    }
    struct append a = { .oblock = oblock, .type = TC_ENTRY_TOMBSTONE, .use_reserve = true,
                        .urgent = true };
    log_append(c, &a, NULL);
}

/* Returns 0 dropped (clean), 1 kept on another device, 2 kept here to be
 * drained. */
static int handle_fragment(struct cache *c, unsigned d, const struct victim *v, uint64_t *bytes)
{
    uint32_t id;
    uint32_t fid = map_find_fragment(c, v->oblock, v->seg, v->off, &id);
    if (fid == NIL)
        return -1;
    struct tc_mask cur, valid, dirty;
    frag_current(&c->map.idx, id, fid, &cur);
    ce_get_masks(&c->map.idx, id, &valid, &dirty);
    mask_and(&dirty, &cur);
    struct cfrag f = frag_view(&c->map.idx, fid);
    if (mask_empty(&dirty)) {
        map_drop_fragment(c, v->oblock, fid);
        block_gen_bump(c->locks, v->oblock);
        return 0;
    }
    if (f.mseg != NIL && seg_usable(c, f.mseg)) {
        /* The mirror becomes the copy. */
        map_promote_mirror(c, id, fid);
        cache_trace(c, v->oblock, "device %u failed: mirror %u:%u is the copy now", d, f.mseg,
                    f.moff);
        return 1;
    }
    if (rehome_from_image(c, v->oblock, id, fid, &cur, &dirty))
        return 1;
    /* Kept: the drain writes it back (see the top of this file).  Until
     * then the durable records say lost (lostlog.h). */
    lost_record_pending(c, v->oblock, &dirty);
    cache_trace(c, v->oblock, "device %u failed: dirty fragment %u:%u kept to be drained", d,
                v->seg, v->off);
    *bytes += (uint64_t)mask_count(&dirty) * TC_SECTOR;
    return 2;
}

static bool any_ok(struct cache *c)
{
    for (unsigned i = 0; i < c->ndevs; i++)
        if (c->devs[i].state == CDEV_OK)
            return true;
    return false;
}

static void set_health(struct cache *c)
{
    uint64_t left = 0;
    const char *name = NULL, *why = "";
    for (unsigned i = 0; i < c->ndevs; i++)
        if (c->devs[i].state == CDEV_DRAINING) {
            left += c->devs[i].drain_left_bytes;
            name = c->devs[i].dev->name;
            why = c->devs[i].fail_why;
        }
    if (name) {
        char sz[32];
        snprintf(c->health, sizeof c->health,
                 "draining: %s of dirty data left on failed device %s (%s)%s",
                 tc_format_size(left, sz, sizeof sz), name, why,
                 c->vol->cache_failed ? "; serving the origin directly" : "");
    }
}

/* The drain of device d ended (or it had nothing to drain): drop what is
 * left of it, as a failure always did. */
static void finish_failure(struct cache *c, unsigned d)
{
    struct cache_dev *cd = &c->devs[d];
    /* Every fragment on the device (all clean now: nothing is appended to
     * it, and the dirty ones kept were written back or lost). */
    size_t n = 0, cap = 256;
    struct victim *vs = tc_xmalloc(cap * sizeof *vs);
    for (uint32_t id = 0; id < c->map.idx.used; id++) {
        uint64_t oblock = CE(&c->map.idx, id)->oblock;
        if (oblock == UINT64_MAX)
            continue;
        for (uint32_t f = ce_head(&c->map.idx, id); f != NIL; f = frag_next(&c->map.idx, f)) {
            struct cfrag fr = frag_view(&c->map.idx, f);
            if (space_seg(&c->sp, fr.seg)->dev != d)
                continue;
            if (n == cap) {
                cap *= 2;
                vs = realloc(vs, cap * sizeof *vs);
                if (vs == NULL)
                    abort();
            }
            vs[n++] = (struct victim){ oblock, fr.seg, fr.off };
        }
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t id;
        uint32_t fid = map_find_fragment(c, vs[i].oblock, vs[i].seg, vs[i].off, &id);
        if (fid == NIL)
            continue;
        struct tc_mask cur, valid, dirty;
        frag_current(&c->map.idx, id, fid, &cur);
        ce_get_masks(&c->map.idx, id, &valid, &dirty);
        mask_and(&dirty, &cur);
        TC_ASSERT(mask_empty(&dirty));
        if (!mask_empty(&dirty)) {      /* cannot be; never dropped silently */
            map_lose_dirty(c, vs[i].oblock, &dirty);
            if (c->abandoned)
                abandon_lost_changed(c);
        }
        map_drop_fragment(c, vs[i].oblock, fid);
        block_gen_bump(c->locks, vs[i].oblock);
    }
    if (cd->state == CDEV_DRAINING) {
        c->draining--;
        cd->state = CDEV_FAILING;
    }
    free(cd->drain);
    cd->drain = NULL;
    cd->ndrain = 0;
    cd->drain_left_bytes = 0;
    log_release_images(c, d);
    for (size_t i = 0; i < n; i++)
        if (i == 0 || vs[i - 1].oblock != vs[i].oblock)
            forget_block(c, vs[i].oblock);    /* a block's victims are adjacent */
    free(vs);
    if (any_ok(c))
        snprintf(c->health, sizeof c->health, "degraded: cache device %s failed (%s)",
                 cd->dev->name, cd->fail_why);
    else
        snprintf(c->health, sizeof c->health,
                 "failed: every cache device failed (last %s: %s); serving the origin directly",
                 cd->dev->name, cd->fail_why);
    set_health(c);      /* another device still draining says so */
    cleaner_device_failed(c);
    cleaner_kick(c);
}

void cache_drain_mask(struct cache *c, uint32_t id, struct tc_mask *m)
{
    struct tc_mask v, d;
    mask_clear(m);
    if (c->draining == 0 || id == NIL)
        return;
    ce_get_masks(&c->map.idx, id, &v, &d);
    for (unsigned s = 0; s < c->spb; s++) {
        if (!mask_test(&d, s))
            continue;
        uint32_t f = ce_locate(&c->map.idx, id, s);
        if (f != NIL && seg_cdev(c, frag_seg(&c->map.idx, f))->state == CDEV_DRAINING)
            mask_set(m, s);
    }
}

bool cache_lost_overlaps(struct cache *c, uint64_t off, uint64_t len)
{
    if (!lost_overlaps(&c->map.lost, c->block_size, off, len))
        return false;
    if (c->draining == 0)
        return true;
    uint64_t end = off + len, ob;
    struct tc_mask m;
    while (mask_next_block(&off, end, c->block_size, &ob, &m)) {
        struct tc_mask lost, drain;
        if (!lost_get(&c->map.lost, ob, &lost))
            continue;
        mask_and(&lost, &m);
        cache_drain_mask(c, index_lookup(&c->map.idx, ob), &drain);
        mask_andnot(&lost, &drain);
        if (!mask_empty(&lost))
            return true;
    }
    return false;
}

struct drain_wait {
    struct ereq *e;
    void (*resume)(struct ereq *e);
    struct drain_wait *next;
};

bool cache_drain_hold(struct cache *c, struct ereq *e, void (*resume)(struct ereq *e))
{
    if (c->draining == 0)
        return false;
    struct drain_wait *w = tc_xcalloc(1, sizeof *w);
    w->e = e;
    w->resume = resume;
    w->next = c->drain_waiters;
    c->drain_waiters = w;
    return true;
}

static void release_waiters(struct cache *c, int err)
{
    struct drain_wait *list = c->drain_waiters;
    c->drain_waiters = NULL;
    while (list) {
        struct drain_wait *w = list;
        list = w->next;
        struct ereq *e = w->e;
        void (*resume)(struct ereq *) = w->resume;
        free(w);
        if (err) {
            e->err = err;
            e->complete(e);
        } else {
            resume(e);
        }
    }
}

void cache_drain_check(struct cache *c)
{
    if (c->draining == 0) {
        if (c->drain_waiters)
            release_waiters(c, 0);
        return;
    }
    for (unsigned d = 0; d < c->ndevs; d++) {
        struct cache_dev *cd = &c->devs[d];
        if (cd->state != CDEV_DRAINING)
            continue;
        uint64_t left = 0;
        size_t k = 0;
        for (size_t i = 0; i < cd->ndrain; i++) {
            struct drain_item *it = &cd->drain[i];
            uint32_t id;
            uint32_t fid = map_find_fragment(c, it->oblock, it->seg, it->off, &id);
            if (fid == NIL)
                continue;       /* superseded */
            struct tc_mask cur, valid, dirty;
            frag_current(&c->map.idx, id, fid, &cur);
            ce_get_masks(&c->map.idx, id, &valid, &dirty);
            mask_and(&dirty, &cur);
            if (mask_empty(&dirty))
                continue;       /* written back, lost, or superseded */
            left += (uint64_t)mask_count(&dirty) * TC_SECTOR;
            cd->drain[k++] = *it;
        }
        cd->ndrain = k;
        cd->drain_left_bytes = left;
        if (k == 0) {
            tc_info("cache device %s: drained; %s", cd->dev->name,
                    c->st.lost_dirty_bytes ? "some dirty data could not be read back and is "
                                             "lost (status: lost_dirty_bytes)"
                                           : "no dirty data was lost");
            finish_failure(c, d);
        }
    }
    set_health(c);
    if (c->draining == 0) {
        release_waiters(c, 0);
    } else if (c->drain_waiters && writeback_stuck(c)) {
        tc_error("flush fails with EIO: dirty data is still on a failed cache device and "
                 "cannot be written back now (writeback stopped or failing, or the origin "
                 "away)");
        release_waiters(c, -EIO);
    }
}

void cache_device_fail(struct cache *c, unsigned d, const char *why)
{
    struct cache_dev *cd = &c->devs[d];
    if (cd->state != CDEV_OK)
        return;
    /* Draining from here on: images kept (log.c), nothing appended. */
    cd->state = CDEV_DRAINING;
    c->draining++;
    snprintf(cd->fail_why, sizeof cd->fail_why, "%s", why);
    space_drop_free(&c->sp, d);
    c->degraded = true;
    snprintf(c->health, sizeof c->health, "degraded: cache device %s failed (%s)",
             cd->dev->name, why);
    tc_error("cache device %s failed: %s; the volume goes on without it", cd->dev->name, why);
    /* First, before anything is appended for the failure (its sequence
     * numbers must be at or above the mark) and before any write that
     * could make the device's entries stale is acknowledged: the mark
     * that keeps its log out at the next start (abandon.c). */
    devfail_record(c, d);

    /* Every fragment (and mirror copy) on the device. */
    size_t n = 0, cap = 256;
    struct victim *vs = tc_xmalloc(cap * sizeof *vs);
    for (uint32_t id = 0; id < c->map.idx.used; id++) {
        uint64_t oblock = CE(&c->map.idx, id)->oblock;
        if (oblock == UINT64_MAX)
            continue;
        map_drop_mirrors(c, id, (int)d);    /* the mirrors are gone; the copies stay */
        for (uint32_t f = ce_head(&c->map.idx, id); f != NIL; f = frag_next(&c->map.idx, f)) {
            struct cfrag fr = frag_view(&c->map.idx, f);
            if (space_seg(&c->sp, fr.seg)->dev != d)
                continue;
            if (n == cap) {
                cap *= 2;
                vs = realloc(vs, cap * sizeof *vs);
                if (vs == NULL)
                    abort();
            }
            vs[n++] = (struct victim){ oblock, fr.seg, fr.off };
        }
    }
    uint64_t dropped = 0, saved = 0, kept = 0, kept_bytes = 0;
    bool *gone = tc_xcalloc(n ? n : 1, sizeof *gone);
    cd->drain = tc_xmalloc((n ? n : 1) * sizeof *cd->drain);
    cd->ndrain = 0;
    for (size_t i = 0; i < n; i++) {
        int r = handle_fragment(c, d, &vs[i], &kept_bytes);
        gone[i] = r == 0;
        dropped += r == 0;
        saved += r == 1;
        if (r == 2) {
            kept++;
            cd->drain[cd->ndrain++] = (struct drain_item){ vs[i].oblock, vs[i].seg, vs[i].off };
        }
    }
    cd->drain_left_bytes = kept_bytes;
    log_device_failed(c, d);
    /* After log_device_failed(): the syncs waiting on the device fail
     * once, as they did, instead of waiting for these records too.  A
     * block with a fragment kept for the drain keeps its dirty data, so
     * forget_block() leaves it (its tombstone comes when the drain ends). */
    for (size_t i = 0; i < n; i++)
        if (gone[i] && (i == 0 || !gone[i - 1] || vs[i - 1].oblock != vs[i].oblock))
            forget_block(c, vs[i].oblock);    /* a block's victims are adjacent */
    free(gone);
    free(vs);
    cleaner_device_failed(c);
    char sz[32];
    tc_error("cache device %s: %llu clean fragments dropped, %llu dirty ones kept on other "
             "devices, %llu (%s of dirty data) to be written back from it", cd->dev->name,
             (unsigned long long)dropped, (unsigned long long)saved, (unsigned long long)kept,
             tc_format_size(kept_bytes, sz, sizeof sz));

    if (!any_ok(c)) {
        snprintf(c->health, sizeof c->health,
                 "failed: every cache device failed (last %s: %s); serving the origin directly",
                 cd->dev->name, why);
        tc_error("every cache device has failed: serving the origin directly%s",
                 c->draining ? " (requests touching dirty data still on a failed device wait "
                               "for its writeback)" : "");
        /* Recorded before any request goes on: from now on writes reach
         * only the origin, and the log must never be trusted again. */
        abandon_record(c);
        c->vol->cache_failed = true;
    }
    if (kept == 0)
        finish_failure(c, d);
    set_health(c);
    writeback_kick(c);
    cleaner_kick(c);
}
