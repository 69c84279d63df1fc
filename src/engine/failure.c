/*
 * A cache device that fails.
 *
 * A device is failed on its first write error (the log cannot keep its
 * promises on it), when it has vanished (ENODEV, ENXIO), or after a run of
 * read errors -- counted by episode (io/dev.h, error_episodes): reads in
 * flight together that fail together (a batch of writeback's, a gather's
 * runs, a moment's hiccup) count once, so one transient burst does not
 * fail a device and lose the dirty data only it holds, while a device
 * that fails again what is asked of it after each error is failed after
 * READ_ERRORS_TO_FAIL of them.  The volume keeps serving, degraded:
 *
 *   clean data on the device     dropped: reads go to the origin
 *   dirty data with a mirror     the mirror becomes the copy
 *   dirty data still in RAM      (a chunk not yet, or not successfully,
 *                                written) appended again on another device
 *   dirty data with no copy      rescued: read back from the failed
 *                                device and appended on a survivor
 *                                (below); sectors that cannot be read are
 *                                lost: recorded (LOST records), and reads
 *                                of exactly those sectors fail with EIO
 *                                until they are written again -- or, when
 *                                the device was the last in service,
 *                                drained to the origin (below)
 *   LOST records on the device   the whole lost set (in memory) recorded
 *                                again on the other devices
 *
 * A block that keeps data on the other devices after a fragment of it was
 * dropped is rewritten there as one version, after a tombstone, so that
 * no older version in their logs can come back (struct rewrite).
 *
 * The drain (the last device in service only).  A failed device usually
 * still reads: the write that failed it may have found its file system
 * full, or one bad spot.  When it is the last device in service, the
 * dirty data only it holds is not given up but written back to the
 * origin while the daemon runs: the device is CDEV_DRAINING.  Nothing is
 * appended to it (its free segments are dropped, its head closed), the
 * cache is abandoned at once as before (abandon.c: its log is never
 * trusted again), but its dirty fragments stay in the index and are read
 * from it -- or from the segment's RAM image, which a draining device
 * keeps (log.c), so the data of a chunk whose write failed, and of the
 * open chunk, drains too.  Writeback treats the drain as urgent
 * (writeback.c: window()), and when it cannot read such a block it reads
 * sector by sector and records as lost exactly the sectors that fail (an
 * I/O error, a checksum mismatch).  When no dirty data is left on the
 * device (cache_drain_check(), on writeback's tick), the failure is
 * finished as before: the remaining (clean) fragments are dropped, the
 * images go, the device is CDEV_FAILING.
 *
 * Why only the last device: with devices left in service, a drained
 * block's older versions may stay in their logs, which the next start
 * trusts; once the drained version's record of loss was cleared, a
 * restart or a later partial write could bring an older version back.
 * With no device left no log is trusted again, so the origin is the only
 * copy that counts, and the records of loss are the state file's.
 *
 * The rescue (a device failing while others are in service).  Its
 * only-copy dirty fragments (no mirror, no RAM image) stay in the index,
 * on the failed device -- those of segments whose every chunk was
 * written (handle_fragment()); and those in an image that found no room
 * to be appended elsewhere (read from the image, kept for them) -- and
 * each such
 * block is rewritten (struct
 * rewrite, below): under the block's lock its valid sectors are read --
 * those on the failed device from there, checked as every cache read --
 * and one version is appended on a survivor after a tombstone, as for
 * any block a failure touched.  If the read fails, each sector is read on
 * its own, and exactly the failed device's sectors that cannot be read
 * (an I/O error, a checksum mismatch) are lost (map_lose_dirty()) and
 * clean from then on (writeback of the block's other dirty sectors -- on
 * a survivor, perhaps in a group the cleaner must free for the version's
 * room -- never reads them); the version holds the rest.  Meanwhile:
 *   - reads of the block are served from the failed device (its data is
 *     the newest; a sector that does not read fails with EIO, never the
 *     origin's older data); writes and writeback take the block's lock,
 *     so a write arriving during the rescue lands after the rescued
 *     version, and one already under way is read back with the block;
 *   - the failure mark and the acknowledgement of writes wait for every
 *     rescued version to be durable (the rewrites' holds): a crash or
 *     stop before that leaves no mark, and the restart trusts the failed
 *     device's log, which still holds the data (the rescue does not
 *     record it lost first, as the drain does: a restart finds it);
 *   - the cleaner keeps a group holding such a fragment (the walk skips
 *     the failed device, and a tail past the group would drop the
 *     fragment's entry from a restart's log) -- unless appends wait for
 *     room, perhaps the rescues' own: then the data goes to the origin
 *     instead (cache_rescue_to_origin(): written back, then dropped from
 *     the failed device), and only what the origin refuses for good
 *     (three times in a row, or offline, or at a stop) is recorded lost,
 *     rather than wait for ever; when the last device fails (no
 *     survivor to append on), every pending rescue's data is drained
 *     from its device instead, with the last device's (rescues_drain()).
 * status counts rescued_bytes, rescued_to_origin_bytes,
 * rescue_writebacks and rescue_lost_bytes.
 *
 * Durability.  The data kept to drain is recorded lost first
 * (lost_record_pending(); the abandonment's state file holds the lost
 * set, written before any request goes on), so a crash or stop before it
 * is written back reads EIO after the restart, never the origin's older
 * data.  A block written back is cleared from the set only after the
 * origin flush of its writeback job, and the clear reaches the state file
 * only after another origin flush (abandon.c: the settle).
 *
 * Requests.  The volume serves the origin at once (c->vol->cache_failed),
 * and lost_passthrough() makes any request touching a block still dirty
 * on the draining device wait for that block's writeback first
 * (lostlog.c): a read then reads the drained data from the origin (or
 * EIO for the sectors the drain could not read), a write reaches the
 * origin after the drained version (so the drain never writes older data
 * over it), and a partial write keeps the block's other dirty sectors.
 *
 * A FLUSH while a drain runs waits for the drain to end (then flushes the
 * origin and reports any loss as ever), or fails with EIO once writeback
 * gives up (writeback_given_up(): stopped, the origin offline, a block
 * refused WB_FAILURES_EIO times in a row -- not a job that failed once
 * and is retried after its back-off): the dirty data on
 * the draining device was acknowledged, and its only durable record is a
 * log no start will trust, so no FLUSH may claim that the writes before
 * it are durable until the drain has put them on the origin.  A FLUSH
 * whose log sync the failure cut short goes the same way (writepath.c:
 * flush_synced()) instead of failing at once.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/abandon.h"
#include "engine/blocklock.h"
#include "engine/cache.h"
#include "engine/cacheio.h"
#include "engine/cleaner.h"
#include "engine/failure.h"
#include "engine/lostlog.h"
#include "engine/map.h"
#include "engine/readpath.h"
#include "engine/verify.h"
#include "engine/writeback.h"
#include "io/claim.h"
#include "policy/policy.h"
#include "io/bufpool.h"
#include "util/assert.h"
#include "util/crc32c.h"
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
    } else if (cd->dev->error_episodes >= READ_ERRORS_TO_FAIL) {
        snprintf(why, sizeof why, "read errors in %u episodes in a row (%u errors; last: %s)",
                 cd->dev->error_episodes, cd->dev->consecutive_errors, strerror(-err));
        cache_device_fail(c, d, why);
    }
}

struct victim {
    uint64_t oblock;
    uint32_t seg;
    uint16_t off;
};

/* Fragment fid's dirty sectors `dirty`, about to be moved out of its
 * segment's image on a failed device: if its chunk there was written
 * (log_chunk_written()), remember where each sector is and its CRC
 * (c->moved), a proof for the drain should the copy's own chunk never
 * reach its device -- the next device failing at that write, as a stop's
 * writes on a full file system fail every device in turn.  Without it,
 * the copy's proof named a place that never received the data, and the
 * next start read the sectors as lost although the failed device held
 * them intact. */
static void moved_add(struct cache *c, uint64_t oblock, unsigned s, uint64_t where,
                      const uint8_t *sector)
{
    if (c->nmoved == c->moved_cap) {
        c->moved_cap = c->moved_cap ? 2 * c->moved_cap : 64;
        c->moved = realloc(c->moved, c->moved_cap * sizeof *c->moved);
        if (c->moved == NULL)
            abort();
    }
    c->moved[c->nmoved++] = (struct moved_proof){
        oblock, s, { where, tc_crc32c(0, sector, TC_SECTOR), false } };
}

static void moved_remember(struct cache *c, uint64_t oblock, uint32_t fid,
                           const struct tc_mask *dirty, const uint8_t *image)
{
    struct cfrag f = frag_view(&c->map.idx, fid);
    if (c->data_free || !log_chunk_written(c, f.seg, f.off))
        return;
    struct tc_mask st;
    frag_stored(&c->map.idx, fid, &st);
    unsigned dev = space_seg_dev(&c->sp, f.seg);
    uint64_t base = seg_dev_offset(c, f.seg) / TC_SECTOR;
    for (unsigned s = 0; s < c->spb; s++) {
        if (!mask_test(dirty, s))
            continue;
        uint32_t off = f.off + mask_rank(&st, s);
        moved_add(c, oblock, s, tc_state_where(dev, base + off),
                  image + (size_t)off * TC_SECTOR);
    }
}

/* The same for a block's version rewritten after a failure (struct
 * rewrite): each of its dirty sectors `d` (data in buf, by sector) is
 * remembered where the index has it now, if that chunk was written -- a
 * version replacing the block's copy, written and flushed on a device
 * still in service or on the failed one, whose own chunk then never
 * reaches its device. */
static void moved_remember_block(struct cache *c, uint64_t oblock, uint32_t id,
                                 const struct tc_mask *d, const uint8_t *buf)
{
    if (c->data_free)
        return;
    for (unsigned s = 0; s < c->spb; s++) {
        if (!mask_test(d, s))
            continue;
        uint32_t fid = ce_locate(&c->map.idx, id, s);
        if (fid == NIL)
            continue;
        struct cfrag f = frag_view(&c->map.idx, fid);
        if (!log_chunk_written(c, f.seg, f.off))
            continue;
        struct tc_mask st;
        frag_stored(&c->map.idx, fid, &st);
        uint64_t at = seg_dev_offset(c, f.seg) / TC_SECTOR + f.off + mask_rank(&st, s);
        moved_add(c, oblock, s, tc_state_where(space_seg_dev(&c->sp, f.seg), at),
                  buf + (size_t)s * TC_SECTOR);
    }
}

/* A proof remembered by moved_remember() for sector s of oblock whose
 * data has CRC crc (the newest such: a block moved twice). */
static bool moved_lookup(const struct cache *c, uint64_t oblock, unsigned s, uint32_t crc,
                         uint64_t *where)
{
    for (size_t i = c->nmoved; i-- > 0;)
        if (c->moved[i].oblock == oblock && c->moved[i].s == s && c->moved[i].p.crc == crc) {
            *where = c->moved[i].p.where;
            return true;
        }
    return false;
}

/* Dirty sectors of fragment fid, still in its segment's RAM image: append
 * them on another device.  Returns 1 if done, 0 if there is no image, -1
 * if there is no room for them.
 *
 * They take the cleaner's reserve, but as the cleaner's own copies do,
 * never the room its last records need (cleaner_data_fits()): a device
 * failure can hold a segment of such data, and taking the whole reserve
 * left the cleaner's tail record without room -- a group retired with its
 * new end unrecorded, its segments replayed by a crash before the next
 * chunk (a block dropped since and written around the cache would come
 * back stale).  What does not fit waits for room in a rescue (the
 * caller). */
static int rehome_from_image(struct cache *c, uint64_t oblock, uint32_t id, uint32_t fid,
                             const struct tc_mask *cur, const struct tc_mask *dirty)
{
    struct cfrag f = frag_view(&c->map.idx, fid);
    const uint8_t *image = log_image(&c->lg, f.seg);
    if (image == NULL)
        return 0;
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
    struct log_loc at = { .err = -ENOSPC };
    if (a.mirror ? cleaner_mirror_fits(c, n) : cleaner_data_fits(c, n))
        at = log_append(c, &a, NULL);
    if (at.err < 0 && a.mirror && cleaner_data_fits(c, n)) {
        a.mirror = false;       /* one device left, or room for one copy: one copy */
        at = log_append(c, &a, NULL);
    }
    bufpool_put(data, (size_t)n * TC_SECTOR);
    if (at.err < 0)
        return -1;
    moved_remember(c, oblock, fid, dirty, image);
    map_add_fragment(c, oblock, cur, dirty, at.seg, at.off, at.mseg,
                       at.moff, wt ? CE_WT : 0, false);
    return 1;
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
 *
 * The tombstone takes the cleaner's reserve; with no room even there it
 * cannot be given up: the failure mark would make a restart ignore the
 * device's newer entries of the block, and the survivors' older ones come
 * back.  The block is then rewritten (struct rewrite), which -- the block
 * no longer in the index -- appends only the tombstone: it holds the
 * block's lock (no write of it can put a version in the log before the
 * tombstone, which would drop that version at the next start) and the
 * failure's mark and write acknowledgements, and waits for room.
 */
static void rewrite_block(struct cache *c, uint64_t oblock, bool rescue, unsigned image_dev,
                          uint32_t image_keeps, bool start_drop);
static int tombstone(struct cache *c, uint64_t oblock);

static void forget_block(struct cache *c, uint64_t oblock, bool survivors)
{
    uint32_t id = index_lookup(&c->map.idx, oblock);
    if (id != NIL) {
        struct tc_mask v, d;
        ce_get_masks(&c->map.idx, id, &v, &d);
        if (!mask_empty(&d))
            return;
        map_drop_block(c, oblock);
    }
    if (tombstone(c, oblock) < 0 && survivors)
        rewrite_block(c, oblock, false, 0, 0, false);
}

/* The failure path's LOST records leave the cleaner's tail record its room
 * (cleaner_record_fits(), c->records_bounded): one that does not fit is
 * counted in c->lost_unrecorded, and the caller, seeing that, records the
 * set again once there is room (relost_start()). */
static void lose_dirty(struct cache *c, uint64_t oblock, const struct tc_mask *m)
{
    c->records_bounded++;
    map_lose_dirty(c, oblock, m);
    c->records_bounded--;
}

static bool record_lost_again(struct cache *c)
{
    c->records_bounded++;
    bool ok = lost_record_again(c);
    c->records_bounded--;
    return ok;
}

/* Dirty sectors `dirty` of fragment fid, whose only copy was on a failed
 * device, given up: recorded lost (reads of them fail with EIO until
 * rewritten), and the fragment dropped. */
static void lose_fragment(struct cache *c, uint64_t oblock, uint32_t fid,
                          const struct tc_mask *dirty)
{
    if (!mask_empty(dirty)) {
        uint64_t base = oblock * c->block_size;
        tc_error("cache: dirty data of origin block %llu (bytes %llu..%llu) was only on a "
                 "failed device and is lost; reads of its %u lost sectors fail with EIO until "
                 "rewritten", (unsigned long long)oblock, (unsigned long long)base,
                 (unsigned long long)(base + c->block_size - 1), mask_count(dirty));
        lose_dirty(c, oblock, dirty);
    }
    map_drop_fragment(c, oblock, fid);
    block_gen_bump(c->locks, oblock);
}

/* Victim v's fragment as the index has it now: returns its id (NIL if it
 * is gone), and gives its block's entry (*id), the sectors it holds
 * current (*cur) and the dirty ones among them (*dirty).  Every walk of a
 * failed device's fragments starts here (the failure, the end of a
 * drain, a rescue given up). */
static uint32_t victim_fragment(struct cache *c, const struct victim *v, uint32_t *id,
                                struct tc_mask *cur, struct tc_mask *dirty)
{
    uint32_t fid = map_find_fragment(c, v->oblock, v->seg, v->off, id);
    if (fid == NIL)
        return NIL;
    struct tc_mask valid;
    frag_current(&c->map.idx, *id, fid, cur);
    ce_get_masks(&c->map.idx, *id, &valid, dirty);
    mask_and(dirty, cur);
    return fid;
}

/* The proofs of a fragment's dirty sectors kept to be drained, lost in
 * every durable record until drained (lost.h): where each one's data is
 * on the failed device, and the CRC its chunk header recorded (or, the
 * chunk's header not at hand, of the data its segment's image holds, which
 * the device may never have received: then the data there does not match
 * it).  A start after a kill, a crash or a stop cut the drain short
 * reads them back and resumes the drain (abandon.c).  A sector whose CRC
 * is not at hand -- its chunk's CRCs not in RAM (evicted, or never loaded
 * since the start: the store fills as chunks are written or read) and no
 * image -- gets none here: the abandonment reads its chunk header back
 * (proofs_fetch_start(), below).  Sectors proven already are left as they
 * are.  Returns the sectors of d left without a proof; *proven counts
 * those given one. */
static bool test_no_drain_proofs(void)
{
    /* For tests only: lost sectors that no start resumes (tests of what
     * a lost sector reads, whose device reads well again after). */
    const char *t = getenv("TIERCACHE_TEST_NO_DRAIN_PROOFS");
    return t && *t == '1';
}

static unsigned drain_proofs(struct cache *c, uint64_t oblock, uint32_t fid,
                             const struct tc_mask *d, uint64_t *proven)
{
    if (test_no_drain_proofs())
        return 0;
    struct cfrag f = frag_view(&c->map.idx, fid);
    struct tc_mask st;
    frag_stored(&c->map.idx, fid, &st);
    unsigned dev = space_seg_dev(&c->sp, f.seg);
    uint64_t base = seg_dev_offset(c, f.seg) / TC_SECTOR;
    uint8_t *sec = NULL;
    unsigned left = 0;
    /* The fragment's chunk may never reach the device (its write in
     * flight, failed, or never issued): a copy moved here from a failed
     * device's image that still holds the same data is proven there. */
    bool unwritten = c->nmoved > 0 && !log_chunk_written(c, f.seg, f.off);
    for (unsigned s = 0; s < c->spb; s++) {
        struct lost_proof p;
        if (!mask_test(d, s) || lost_get_proof(&c->map.lost, oblock, s, &p))
            continue;
        uint32_t off = f.off + mask_rank(&st, s), crc;
        if (!verify_lookup(c->verify, f.seg, off, 1, &crc)) {
            if (sec == NULL)
                sec = tc_xmalloc(TC_SECTOR);
            if (!log_read_image(&c->lg, f.seg, off, 1, sec)) {
                left++;
                continue;
            }
            crc = tc_crc32c(0, sec, TC_SECTOR);
        }
        p = (struct lost_proof){ .where = tc_state_where(dev, base + off), .crc = crc,
                                 .logged = log_chunk_written(c, f.seg, f.off) };
        if (unwritten)
            moved_lookup(c, oblock, s, crc, &p.where);
        lost_set_proof(&c->map.lost, oblock, c->spb, s, &p);
        if (lost_get_proof(&c->map.lost, oblock, s, &p))
            (*proven)++;
    }
    free(sec);
    return left;
}

/* Returns -1 gone already, 0 dropped (clean), 1 kept on another device,
 * 2 kept here to be drained (drain: d was the last device in service),
 * 3 lost (dropped), 4 kept here to be rescued (another device is in
 * service), 5 kept in its segment's image to be rescued (no room to
 * append it now; counted in image_keeps). */
static int handle_fragment(struct cache *c, unsigned d, const struct victim *v, bool drain,
                           uint64_t *bytes)
{
    uint32_t id;
    struct tc_mask cur, dirty;
    uint32_t fid = victim_fragment(c, v, &id, &cur, &dirty);
    if (fid == NIL)
        return -1;
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
    int rehomed = rehome_from_image(c, v->oblock, id, fid, &cur, &dirty);
    if (rehomed > 0)
        return 1;
    if (rehomed < 0 && !drain) {
        /* No room for it now: kept, and rescued as the fragments below
         * are, but read from the image, which stays until the rescue is
         * over (image_keeps; log.c) -- the device may never have received
         * the chunk.  Its rewrite waits for room holding the block's lock
         * and the failure's acknowledgements, as every rewrite does. */
        c->devs[d].image_keeps++;
        cache_trace(c, v->oblock, "device %u failed: dirty fragment %u:%u kept in its image "
                    "to be rescued (no room now)", d, v->seg, v->off);
        *bytes += (uint64_t)mask_count(&dirty) * TC_SECTOR;
        return 5;
    }
    if (!drain && log_image(&c->lg, f.seg) == NULL) {
        /* Kept: read back from the device and appended on a survivor by
         * the block's rewrite (the rescue; see the top of this file).
         * Only from a segment without an image: every chunk of it was
         * written, without error (this device's first write error fails
         * it, and an image goes only once no write of the segment is in
         * flight and it is not open), so what the device reads there is
         * this fragment's data or fails its checksums.  A chunk still in
         * flight may never reach the device, and an older chunk at the
         * same place could pass the checks. */
        cache_trace(c, v->oblock, "device %u failed: dirty fragment %u:%u kept to be rescued",
                    d, v->seg, v->off);
        *bytes += (uint64_t)mask_count(&dirty) * TC_SECTOR;
        return 4;
    }
    if (!drain) {
        /* In RAM, and no room to append it elsewhere now. */
        lose_fragment(c, v->oblock, fid, &dirty);
        return 3;
    }
    /* Kept: the drain writes it back (see the top of this file).  Until
     * then the durable records say lost (lostlog.h). */
    lost_record_pending(c, v->oblock, &dirty);
    uint64_t proven = 0;
    drain_proofs(c, v->oblock, fid, &dirty, &proven);
    cache_trace(c, v->oblock, "device %u failed: dirty fragment %u:%u kept to be drained", d,
                v->seg, v->off);
    *bytes += (uint64_t)mask_count(&dirty) * TC_SECTOR;
    return 2;
}

/*
 * Proofs read back.  At the failure of the last device, the dirty sectors
 * kept to be drained whose CRC was not at hand (drain_proofs()) would get
 * no proof: a drain cut short by a kill, a crash or a stop would leave
 * them lost although their data usually sits intact on the device.  So
 * the abandonment reads their chunks' headers back from the failed
 * device, asynchronously (a failing device may be slow, and the volume
 * serves meanwhile), PROOF_READS_INFLIGHT at a time, each chunk once.  A
 * header is used only if it decodes (its own checksum, the set's UUID)
 * and names the chunk the segment's chunk table has there -- the same
 * segment, the same start, the group the segment holds now (a segment
 * reused since holds another group's chunks) --, and the segment is
 * pinned while it is read.  Its CRCs go into the CRC store as any read
 * header's do; then each of its fragments still kept to be drained --
 * still in the index, dirty, on the draining device: the version the
 * abandonment recorded lost, not yet written back (a write to the block
 * waits for its writeback, which makes it clean) -- gets the proofs of its
 * sectors still without one, and once the last header is read the state
 * file is written again with them (abandon_proofs_added()).  A header
 * that does not read or does not check gives no proof: those sectors stay
 * as before (lost if the drain is cut short).  The proof's CRC comes only
 * from a checked header, and the resumed drain writes back only data that
 * matches it.  The stop waits for the reads (abandon_idle()).
 */
#define PROOF_READS_INFLIGHT 8

struct proof_chunk {
    uint32_t seg;
    uint16_t start, hdr_sectors;
    size_t first, n;                /* its fragments: items[first .. first + n) */
};

struct proof_fetch {
    struct cache *c;
    struct drain_item *items;       /* sorted by chunk */
    struct proof_chunk *chunks;
    size_t nchunks, next;           /* the next chunk to read */
    uint64_t proven;                /* sectors given a proof */
    uint64_t failed;                /* headers that did not read or check */
    bool ended;                     /* the drain ended before they were all read */
};

struct proof_read {
    struct proof_fetch *pf;
    size_t k;                       /* its chunk */
    uint8_t *buf;
    struct tc_dev_io dio;
};

struct proof_want {
    uint32_t seg;
    uint16_t start, hdr_sectors;
    struct drain_item item;
};

static int want_cmp(const void *a, const void *b)
{
    const struct proof_want *x = a, *y = b;
    if (x->seg != y->seg)
        return x->seg < y->seg ? -1 : 1;
    return (x->start > y->start) - (x->start < y->start);
}

static void proof_read_next(struct proof_fetch *pf);

static void proof_read_done(struct tc_dev_io *dio, int err)
{
    struct proof_read *pr = container_of(dio, struct proof_read, dio);
    struct proof_fetch *pf = pr->pf;
    struct cache *c = pf->c;
    const struct proof_chunk *ch = &pf->chunks[pr->k];
    struct tc_chunk_header h;
    char why[128] = "";
    bool ok = false;
    if (seg_cdev(c, ch->seg)->state != CDEV_DRAINING)
        pf->ended = true;   /* the drain ended: nothing is left to prove */
    else if (err)
        snprintf(why, sizeof why, "%s", strerror(-err));
    else if (chunk_decode(pr->buf, dio->len, c->set_uuid, c->spb, c->seg_sectors, &h, why,
                          sizeof why) < 0)
        ;
    else if (h.segment != ch->seg || h.chunk_sector != ch->start ||
             h.group_seq != space_seg(&c->sp, ch->seg)->seq)
        snprintf(why, sizeof why, "it names segment %u, sector %u, group %llu, not the chunk "
                 "the segment's table has there", h.segment, h.chunk_sector,
                 (unsigned long long)h.group_seq);
    else
        ok = true;
    if (ok) {
        verify_remember(c->verify, ch->seg, ch->start, &h, pr->buf);
        for (size_t i = ch->first; i < ch->first + ch->n; i++) {
            const struct drain_item *it = &pf->items[i];
            uint32_t id;
            struct tc_mask cur, dirty;
            uint32_t fid = victim_fragment(c, &(struct victim){ it->oblock, it->seg, it->off },
                                           &id, &cur, &dirty);
            if (fid == NIL || mask_empty(&dirty) || seg_cdev(c, it->seg)->state != CDEV_DRAINING)
                continue;   /* written back, lost, or the drain ended */
            drain_proofs(c, it->oblock, fid, &dirty, &pf->proven);
        }
    } else if (!pf->ended) {
        pf->failed++;
        tc_warn("%s: chunk header at byte %llu (segment %u) unusable for the proofs of the "
                "lost sectors kept to be drained: %s; they get none (a drain cut short leaves "
                "them lost)", seg_cdev(c, ch->seg)->dev->name, (unsigned long long)dio->off,
                ch->seg, why);
    }
    seg_unpin(&c->sp, ch->seg);
    free(pr->buf);
    free(pr);
    c->ab.proof_reads++;
    c->ab.proof_reads_pending--;
    proof_read_next(pf);
    if (c->ab.proof_reads_pending > 0)
        return;
    if (pf->proven > 0) {
        c->ab.proof_read_sectors += pf->proven;
        tc_info("cache: %llu lost sectors kept to be drained proven from %zu chunk headers "
                "read back (%llu unusable); the state file records them",
                (unsigned long long)pf->proven, pf->nchunks, (unsigned long long)pf->failed);
        abandon_proofs_added(c);
    }
    free(pf->items);
    free(pf->chunks);
    free(pf);
}

static void proof_read_next(struct proof_fetch *pf)
{
    struct cache *c = pf->c;
    while (pf->next < pf->nchunks &&
           c->ab.proof_reads_pending - (pf->nchunks - pf->next) < PROOF_READS_INFLIGHT) {
        size_t k = pf->next++;
        const struct proof_chunk *ch = &pf->chunks[k];
        struct proof_read *pr = tc_xcalloc(1, sizeof *pr);
        pr->pf = pf;
        pr->k = k;
        pr->buf = tc_alloc_aligned((size_t)ch->hdr_sectors * TC_SECTOR);
        pr->dio.op = TC_DEV_READ;
        pr->dio.buf = pr->buf;
        pr->dio.off = seg_dev_offset(c, ch->seg) + (uint64_t)ch->start * TC_SECTOR;
        pr->dio.len = (uint64_t)ch->hdr_sectors * TC_SECTOR;
        pr->dio.cb = proof_read_done;
        seg_pin(&c->sp, ch->seg);
        dev_submit(seg_cdev(c, ch->seg)->dev, &pr->dio);
    }
}

/* The last device in service failed: the chunk headers of the kept
 * sectors without a proof are read back (see above), on every draining
 * device -- the last one and those whose rescues it turned into drains
 * (rescues_drain()) -- in one fetch. */
static void proofs_fetch_start(struct cache *c)
{
    if (test_no_drain_proofs() || c->data_free)
        return;
    size_t total = 0;
    for (unsigned d = 0; d < c->ndevs; d++)
        if (c->devs[d].state == CDEV_DRAINING)
            total += c->devs[d].ndrain;
    if (total == 0)
        return;
    struct proof_want *w = tc_xcalloc(total, sizeof *w);
    size_t n = 0;
    for (unsigned d = 0; d < c->ndevs; d++) {
        struct cache_dev *cd = &c->devs[d];
        if (cd->state != CDEV_DRAINING)
            continue;
        for (size_t i = 0; i < cd->ndrain; i++) {
            const struct drain_item *it = &cd->drain[i];
            uint32_t id;
            struct tc_mask cur, dirty;
            uint32_t fid = victim_fragment(c, &(struct victim){ it->oblock, it->seg, it->off },
                                           &id, &cur, &dirty);
            if (fid == NIL || mask_empty(&dirty))
                continue;
            bool want = false;
            for (unsigned s = 0; s < c->spb && !want; s++) {
                struct lost_proof p;
                want = mask_test(&dirty, s) &&
                       !lost_get_proof(&c->map.lost, it->oblock, s, &p);
            }
            /* A fragment's sectors are one entry of one chunk. */
            const struct chunk_ref *ref =
                want ? segment_chunk_of(&c->sp, it->seg, it->off) : NULL;
            if (ref == NULL)
                continue;
            w[n++] = (struct proof_want){ it->seg, ref->start, ref->hdr_sectors, *it };
        }
    }
    if (n == 0) {
        free(w);
        return;
    }
    qsort(w, n, sizeof *w, want_cmp);
    struct proof_fetch *pf = tc_xcalloc(1, sizeof *pf);
    pf->c = c;
    pf->items = tc_xcalloc(n, sizeof *pf->items);
    pf->chunks = tc_xcalloc(n, sizeof *pf->chunks);
    for (size_t i = 0; i < n; i++) {
        pf->items[i] = w[i].item;
        if (i == 0 || w[i].seg != w[i - 1].seg || w[i].start != w[i - 1].start)
            pf->chunks[pf->nchunks++] = (struct proof_chunk){ w[i].seg, w[i].start,
                                                              w[i].hdr_sectors, i, 0 };
        pf->chunks[pf->nchunks - 1].n++;
    }
    free(w);
    /* Sorted by segment, so a device's chunks are together. */
    for (size_t k = 0, j; k < pf->nchunks; k = j) {
        unsigned d = space_seg_dev(&c->sp, pf->chunks[k].seg);
        for (j = k; j < pf->nchunks && space_seg_dev(&c->sp, pf->chunks[j].seg) == d; j++)
            ;
        tc_info("cache device %s: reading back %zu chunk headers for the proofs of the dirty "
                "sectors kept to be drained whose CRCs are not in memory", c->devs[d].dev->name,
                j - k);
    }
    c->ab.proof_reads_pending += pf->nchunks;
    proof_read_next(pf);
}

static bool any_ok(struct cache *c)
{
    for (unsigned i = 0; i < c->ndevs; i++)
        if (c->devs[i].state == CDEV_OK)
            return true;
    return false;
}

bool cache_none_in_service(struct cache *c)
{
    return c->ndevs > 0 && !any_ok(c);
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
                 "draining: %s of dirty data left on failed device %s (%s)%s%s",
                 tc_format_size(left, sz, sizeof sz), name, why,
                 left == 0 ? "; recording the end in the state file" : "",
                 c->vol->cache_failed ? "; serving the origin directly" : "");
    }
}

/* Every fragment on device d, a block's adjacent, in index order (*np of
 * them; the caller frees the array).  drop_mirrors: at the failure, the
 * block's mirror copies on d go too (the copies elsewhere stay). */
static struct victim *device_fragments(struct cache *c, unsigned d, bool drop_mirrors,
                                       size_t *np)
{
    size_t n = 0, cap = 256;
    struct victim *vs = tc_xmalloc(cap * sizeof *vs);
    for (uint32_t id = 0; id < c->map.idx.used; id++) {
        uint64_t oblock = ce_oblock(CE(&c->map.idx, id));
        if (oblock == IX_FREE)
            continue;
        if (drop_mirrors)
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
    *np = n;
    return vs;
}

/* The drain of device d ended (or it had nothing to drain): drop what is
 * left of it, as a failure always did. */
static void finish_failure(struct cache *c, unsigned d)
{
    struct cache_dev *cd = &c->devs[d];
    /* Every fragment on the device (all clean now: nothing is appended to
     * it, and the dirty ones kept were written back or lost). */
    size_t n;
    struct victim *vs = device_fragments(c, d, false, &n);
    for (size_t i = 0; i < n; i++) {
        uint32_t id;
        struct tc_mask cur, dirty;
        uint32_t fid = victim_fragment(c, &vs[i], &id, &cur, &dirty);
        if (fid == NIL)
            continue;
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
            forget_block(c, vs[i].oblock, any_ok(c));    /* a block's victims are adjacent */
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

unsigned cache_drain_blocks(struct cache *c, uint64_t *from, uint64_t *blocks, unsigned max,
                            uint64_t *bytes)
{
    unsigned n = 0;
    uint64_t b = *from, nb = c->nblocks_origin;
    while (n < max && b < nb && c->draining) {
        uint64_t word = c->map.dirty_bits[b / 64] >> (b % 64);
        if (word == 0) {
            b += 64 - b % 64;
            continue;
        }
        b += (unsigned)__builtin_ctzll(word);
        if (b >= nb)
            break;
        struct tc_mask dm;
        cache_drain_mask(c, index_lookup(&c->map.idx, b), &dm);
        if (!mask_empty(&dm)) {
            blocks[n++] = b;
            if (bytes)
                *bytes += (uint64_t)mask_count(&dm) * TC_SECTOR;
        }
        b++;
    }
    *from = n < max ? nb : b;
    return n;
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

/* Hold e on the waiters' list until the drain ends or the rescues end. */
static void hold_waiter(struct cache *c, struct ereq *e, void (*resume)(struct ereq *e))
{
    struct drain_wait *w = tc_xcalloc(1, sizeof *w);
    w->e = e;
    w->resume = resume;
    w->next = c->drain_waiters;
    c->drain_waiters = w;
}

bool cache_drain_hold(struct cache *c, struct ereq *e, void (*resume)(struct ereq *e))
{
    if (c->draining == 0)
        return false;
    hold_waiter(c, e, resume);
    return true;
}

static void release_waiters(struct cache *c, int err);

uint64_t cache_drain_waiting(const struct cache *c)
{
    uint64_t n = c->drain_block_waiters;
    for (const struct drain_wait *w = c->drain_waiters; w; w = w->next)
        n++;
    return n;
}

/* A FLUSH while rescues are pending waits for them (held with the drain's
 * waiters, and resumed when the last one ends or they are given up): a
 * rescue may still lose acknowledged data, and a flush must report every
 * loss of the writes it covers -- answered now, it would succeed or fail
 * on part of the loss, and the next flush fail for the rest. */
bool cache_rescue_hold(struct cache *c, struct ereq *e, void (*resume)(struct ereq *e))
{
    if (c->rescues_pending == 0)
        return false;
    hold_waiter(c, e, resume);
    return true;
}

/* The rescues ended (or were given up): the flushes held for them go on.
 * Not while a drain runs: its waiters (FUA writes among them, whose
 * resume does not wait again) go when it ends, and those held for the
 * rescues with them. */
static void rescues_ended(struct cache *c)
{
    if (c->draining == 0 && c->drain_waiters)
        release_waiters(c, 0);
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

/* A write made durable (FUA) while the last device failed: after the
 * drain, an origin flush; EIO if any of its sectors is lost. */
struct fua_tail {
    struct tc_dev_io dio;
    struct ereq *e;
};

static void fua_origin_flushed(struct tc_dev_io *dio, int err)
{
    struct fua_tail *t = container_of(dio, struct fua_tail, dio);
    struct ereq *e = t->e;
    struct cache *c = e->vol->cache;
    free(t);
    if (err == 0 && lost_overlaps(&c->map.lost, c->block_size, e->off, e->len))
        err = -EIO;     /* the drain could not read some of it back */
    e->err = err;
    if (err == 0 && c->abandoned) {
        /* Its drained sectors were lost in the state file until written
         * back, and may still be: a crash would make them read EIO.  As
         * for a FLUSH (lostlog.c), answered once the state file says not
         * (abandon.c). */
        lost_fua_settle_wait(c, e);
        return;
    }
    e->complete(e);
}

static void fua_drained(struct ereq *e)
{
    struct fua_tail *t = tc_xcalloc(1, sizeof *t);
    t->e = e;
    t->dio.op = TC_DEV_FLUSH;
    t->dio.cb = fua_origin_flushed;
    if (!e->vol->origin->can_flush) {
        fua_origin_flushed(&t->dio, 0);
        return;
    }
    dev_submit(e->vol->origin, &t->dio);
}

bool cache_durable_after_failure(struct cache *c, struct ereq *e)
{
    if (!cache_none_in_service(c))
        return false;
    e->err = 0;
    if (e->op == TC_OP_FLUSH) {
        if (!cache_drain_hold(c, e, lost_passthrough))
            lost_passthrough(e);
    } else if (!cache_drain_hold(c, e, fua_drained)) {
        fua_drained(e);
    }
    return true;
}

/*
 * The end of a drain, durable as one step.  Each drained block left the
 * lost set when its writeback job's origin flush completed, but only in
 * memory: the state file, which a restart reads, still lists it lost
 * until a settle (abandon.c) has flushed the origin again and rewritten
 * the file -- lazily, half a second or more later.  A crash in between
 * made drained data, safe on the origin, read EIO after the restart.  So
 * the drain counts as finished (the device CDEV_FAILING, status no longer
 * "draining", the FLUSHes held for it released) only once a settle issued
 * after the last drained block was cleared has succeeded: the origin
 * flushed, then the state file written without the drained sectors.
 * Until then the device stays CDEV_DRAINING with nothing left to drain
 * (drain_ending).  A settle that fails (the origin's flush, the state
 * file) is tried again after DRAIN_END_RETRY_NS; the FLUSHes and FUA
 * writes held for the drain fail with EIO meanwhile, as they would after
 * the drain (their own settle would fail alike).
 */
#define DRAIN_END_RETRY_NS (1000ull * 1000 * 1000)

struct drain_end_wait {
    struct cache *c;
    unsigned d;
};

static void drain_end_recorded(void *arg, int err)
{
    struct drain_end_wait *x = arg;
    struct cache *c = x->c;
    unsigned d = x->d;
    free(x);
    struct cache_dev *cd = &c->devs[d];
    cd->drain_ending = false;
    if (cd->state != CDEV_DRAINING)
        return;
    if (err) {
        cd->drain_end_retry_ns = tc_now_ns() + DRAIN_END_RETRY_NS;
        tc_error("cache device %s: drained, but the state file could not record it (%s): the "
                 "drained sectors stay recorded lost, and flushes held for the drain fail with "
                 "EIO; trying again", cd->dev->name, strerror(-err));
        if (c->drain_waiters)
            release_waiters(c, -EIO);
        return;
    }
    tc_info("cache device %s: drained; %s", cd->dev->name,
            c->st.lost_dirty_bytes ? "some dirty data could not be read back and is "
                                     "lost (status: lost_dirty_bytes)"
                                   : "no dirty data was lost");
    finish_failure(c, d);
    set_health(c);
    if (c->draining == 0 && c->drain_waiters)
        release_waiters(c, 0);
}

static void drain_end(struct cache *c, unsigned d)
{
    struct cache_dev *cd = &c->devs[d];
    if (cd->drain_ending || tc_now_ns() < cd->drain_end_retry_ns)
        return;
    cd->drain_ending = true;
    struct drain_end_wait *x = tc_xcalloc(1, sizeof *x);
    x->c = c;
    x->d = d;
    /* Calls back at once when nothing is unsettled (or at a stop, whose
     * own origin flush settles every clear before the last state file
     * write: abandon_close_flushed()). */
    abandon_settle_wait(c, drain_end_recorded, x);
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
        if (k == 0)
            drain_end(c, d);
    }
    set_health(c);
    if (c->draining == 0) {
        release_waiters(c, 0);
    } else if (c->drain_waiters && writeback_given_up(c)) {
        /* Not at a writeback job's first failure: its blocks are tried
         * again after their back-off, and the waiters wait for that (an
         * origin refusing a write for a moment loses nothing).  Bounded:
         * writeback gives up on a block refused WB_FAILURES_EIO times in
         * a row (about a second of back-off), on an origin away past its
         * timeout, and at a stop. */
        tc_error("flush fails with EIO: dirty data is still on a failed cache device and "
                 "cannot be written back now (the origin refused it %u times in a row, or "
                 "is offline, or writeback stopped)", WB_FAILURES_EIO);
        release_waiters(c, -EIO);
    }
}

/*
 * A dropped fragment F on the failed device may shadow an older fragment G
 * on a survivor: G stores sectors X that F stored again.  Dropping F takes
 * X out of the block's valid mask, but G still stores them, and G's record
 * is in the survivors' log, where F's (on the distrusted device) does not
 * outweigh it: at the next start G's version of X would be valid again --
 * an older version, and dirty as G's record says, so written back over the
 * origin's newer data.  The same holds for an older version that F
 * superseded whole: the index no longer has it, but the survivors' log may
 * still hold it.  (forget_block()'s tombstone would drop the dirty data
 * the block keeps elsewhere too, so it is not appended for such a block.)
 *
 * So every block that keeps data after a fragment of it was dropped is
 * rewritten: under its lock (no write changes it meanwhile) its valid
 * sectors are read from the surviving fragments, then a tombstone and one
 * version holding exactly those sectors, with the block's dirty mask and
 * write-through flag, are appended; the version replaces every fragment in
 * the index.  Recovery replays by sequence: the tombstone drops G and
 * everything older, the version brings back exactly the block's contents.
 * Writes are not acknowledged until that version is durable
 * (devfail_hold_more(): as for the failure marks), so no FLUSH is
 * acknowledged while a restart could still bring G's version of X back;
 * and the failure mark waits for it too (abandon.c): until the mark is
 * written a restart still trusts F, on the failed device, over G.
 *
 * The tombstone and the version are one append (log_append()'s replace):
 * they go into the same chunk (each copy's chunk, when the version is
 * mirrored), and the tombstone is linked to the version (ondisk.h), so
 * recovery applies both or neither -- never the tombstone alone, which
 * would drop the block's dirty data without a LOST record, nor the
 * version alone, which would let G's version of X come back.
 *
 * Until then the index has sectors an older fragment stores outside the
 * valid mask (invariant 7 relaxed for the block): frag_current() and
 * map_add_fragment() take only valid sectors as current, so neither reads,
 * the cleaner, writeback nor a later fragment can make X valid again.
 * (Fills do not install into a locked block.)  If the read fails and
 * some of the sectors are on a failed device (a rescue), each sector is
 * read on its own: the failed device's that fail are lost, and only
 * they.  If a sector of a survivor fails with an I/O error, that device
 * is still in service (a failure would have dropped or rescued the
 * fragment) and will most likely read it a moment later: the block
 * stays locked and as it is,
 * and is read again after a back-off (REWRITE_RETRY_NS, doubling, at most
 * REWRITE_RETRY_MAX_NS), through the index as it is then -- so a survivor
 * that failed meanwhile has its part dealt with by its own failure.
 * Dirty sectors are lost (recorded, EIO) and the block goes, with a
 * tombstone, only when the data is proven damaged (read, and not
 * matching its checksums: -EBADMSG), or after REWRITE_READ_TRIES attempts
 * (a lasting bad sector on a device whose other reads succeed is never
 * failed: the rewrite holds the acknowledgement of every write,
 * devfail_hold_more(), so it cannot wait for ever), or at a stop.  With no room in the log (the version is appended without
 * the cleaner's reserve: there may be many such blocks), the block waits,
 * locked, for the cleaner to free some, as a client write would.  That
 * wait ends too when the last device fails (rewrites_stop_waiting(): that
 * failure recorded what only the devices held as lost, and the log is
 * never trusted again) and when a stop begins (cache_stopping(): a stop
 * cannot wait for a cleaner that may never free room -- it holds the
 * clients' last answers, and then stops the cleaner -- so the block's
 * dirty data goes to the origin, and only a tombstone to the log
 * (rewrite_to_origin()); with the origin refusing it, the rewrite takes
 * the cleaner's reserve, and without room even there the block's dirty
 * sectors are lost, recorded, as if unreadable): nothing waits for
 * ever.
 */
struct rewrite {
    struct cache *c;
    uint64_t oblock;
    struct block_waiter bw;
    struct log_waiter lw;
    struct tc_mask want;
    uint8_t *buf;               /* by sector */
    struct rewrite *prev, *next;    /* on c->rewrites_waiting: waiting for room, or
                                     * for the retry timer (retrying) */
    struct tc_timer retry;
    bool retrying;              /* read failed: waiting for the retry timer */
    unsigned read_tries;        /* attempts whose read failed with an I/O error */
    bool appended;              /* the version is appended (status counts) */
    bool relost;                /* no block: the lost set recorded again (relost_try()) */
    bool start_drop;            /* a tombstone of cache_mark_tombstones() that found no
                                   room: counted in c->ab.start_drops_waiting */
    /* A rescue (dirty data only a failed device held, read back from it):
     * counted in c->rescues_pending while rescue_epoch is current. */
    bool rescue;
    uint32_t rescue_epoch;
    /* read_by_sector(): reads left, the sectors that failed, and whether
     * any of them with an I/O error (not a checksum mismatch). */
    unsigned sectors_left;
    struct tc_mask bad;
    bool bad_io;
    struct tc_mask given_up;    /* sectors of a failed device lost already */
    /* Fragments of the block kept in failed device image_dev's images
     * (handle_fragment()): its image_keeps, given back at the end. */
    uint32_t image_keeps;
    unsigned image_dev;
    /* A stop (rewrite_to_origin()): the dirty sectors written to the
     * origin, the writes (and a hold: one array), those in flight, the
     * first error, the origin's epoch before, and whether it was tried. */
    struct tc_mask to_origin;
    struct block_waiter owb;
    struct tc_dev_io *odio;
    unsigned oleft;
    int oerr;
    uint64_t oepoch;
    bool origin_tried;
    struct rewrite *onext;      /* c->rw_origin_written or _flushing */
};

#define REWRITE_READ_TRIES 8
#define REWRITE_RETRY_NS (50ull * 1000 * 1000)
#define REWRITE_RETRY_MAX_NS (2000ull * 1000 * 1000)

/* The rescues of fragments kept in device d's images are over: the
 * images go once none is kept. */
static void image_keeps_done(struct cache *c, unsigned d, uint32_t n)
{
    TC_ASSERT_ALWAYS(c->devs[d].image_keeps >= n);
    c->devs[d].image_keeps -= n;
    if (c->devs[d].image_keeps == 0)
        log_release_images(c, d);
}

static void rewrite_end(struct rewrite *r)
{
    struct cache *c = r->c;
    if (!r->appended && !r->relost)
        c->rewrites_unappended--;
    if (r->rescue && r->rescue_epoch == c->rescue_epoch && --c->rescues_pending == 0) {
        cleaner_kick(c);        /* it may keep a group for the rescues (cleaner.c) */
        rescues_ended(c);
    }
    if (r->buf)
        bufpool_put(r->buf, (size_t)c->spb * TC_SECTOR);
    if (r->image_keeps > 0)
        image_keeps_done(c, r->image_dev, r->image_keeps);
    bool start_drops_done = false;
    if (r->start_drop) {
        for (size_t i = 0; i < c->ab.start_drops_waiting; i++)
            if (c->ab.start_drop_ob[i] == r->oblock) {
                c->ab.start_drop_ob[i] = c->ab.start_drop_ob[--c->ab.start_drops_waiting];
                break;
            }
        start_drops_done = c->ab.start_drops_waiting == 0;
    }
    free(r);
    devfail_hold_done(c);
    /* Durable (rewrite_durable()), or given up at a stop, which names the
     * block in the state file again (tombstone_given_up()). */
    if (start_drops_done)
        abandon_start_drops_durable(c);
}

static void rewrite_durable(struct log_waiter *lw, int err)
{
    struct rewrite *r = container_of(lw, struct rewrite, lw);
    (void)err;      /* a log write that fails fails its device (failure.c) */
    rewrite_end(r);
}

/* For tests only: while the file TIERCACHE_TEST_NO_TOMBSTONE_ROOM names
 * exists, no tombstone finds room in the log, as when every segment holds
 * data the cleaner cannot move.  Whether a run meets that at a given
 * moment (a stop, a start) depends on where the log's chunks fell; a test
 * of what follows (a stop's given-up tombstones named in the state file,
 * TC_STATE_STOP_DROPS, and the start's tombstones of them waiting) needs
 * it every time. */
static bool test_no_tombstone_room(const struct cache *c)
{
    return c->test_no_tombstone_room && access(c->test_no_tombstone_room, F_OK) == 0;
}

/* Takes the reserve, but leaves the cleaner's tail record its room
 * (cleaner_record_fits()): -ENOSPC, and the caller waits for room. */
static int tombstone(struct cache *c, uint64_t oblock)
{
    if (!cleaner_record_fits(c) || test_no_tombstone_room(c))
        return -ENOSPC;
    struct append a = { .oblock = oblock, .type = TC_ENTRY_TOMBSTONE, .use_reserve = true,
                        .take_shares = true, .urgent = true, .mirror = true };
    return log_append(c, &a, NULL).err;
}

static void rewrite_locked(struct block_waiter *bw);
static void relost_start(struct cache *c);
static bool tombstone_given_up(struct cache *c, uint64_t oblock);
static void rewrite_origin_flush(struct cache *c);

static void waiting_unlink(struct rewrite *r)
{
    struct cache *c = r->c;
    if (r->prev)
        r->prev->next = r->next;
    else
        c->rewrites_waiting = r->next;
    if (r->next)
        r->next->prev = r->prev;
    r->prev = r->next = NULL;
}

/* No room in the log now (the whole block is appended again, without the
 * cleaner's reserve): the block stays locked and as it is until the
 * cleaner has freed some, or rewrites_stop_waiting(); then it is read
 * again. */
static void rewrite_space(struct log_waiter *lw, int err)
{
    struct rewrite *r = container_of(lw, struct rewrite, lw);
    (void)err;
    waiting_unlink(r);
    rewrite_locked(&r->bw);
}

static void waiting_link(struct rewrite *r)
{
    struct cache *c = r->c;
    r->prev = NULL;
    r->next = c->rewrites_waiting;
    if (r->next)
        r->next->prev = r;
    c->rewrites_waiting = r;
}

/* reserve: what waits takes the cleaner's reserve (a tombstone alone, the
 * lost set), so any free segment will do. */
static void rewrite_wait_space(struct rewrite *r, bool reserve)
{
    struct cache *c = r->c;
    r->lw.fn = rewrite_space;
    r->lw.need_flush = false;
    r->lw.reserve = reserve;
    r->lw.client = false;
    waiting_link(r);
    cleaner_wait_space(c, &r->lw);
}

/* The back-off after a read error is over (or cut short): read again. */
static void rewrite_retry(struct tc_timer *t)
{
    struct rewrite *r = container_of(t, struct rewrite, retry);
    r->retrying = false;
    waiting_unlink(r);
    rewrite_locked(&r->bw);
}

static void rewrite_wait_retry(struct rewrite *r, int err)
{
    struct cache *c = r->c;
    uint64_t delay = REWRITE_RETRY_NS << TC_MIN(r->read_tries, 10u);
    if (delay > REWRITE_RETRY_MAX_NS)
        delay = REWRITE_RETRY_MAX_NS;
    r->read_tries++;
    c->rewrite_read_retries++;
    tc_error("cache: origin block %llu could not be read to be rewritten after a device "
             "failure (%s, attempt %u of %u); trying again in %llu ms",
             (unsigned long long)r->oblock, strerror(-err), r->read_tries, REWRITE_READ_TRIES,
             (unsigned long long)(delay / 1000000));
    r->retrying = true;
    r->retry.fn = rewrite_retry;
    waiting_link(r);
    timer_arm(c->reactor, &r->retry, delay);
}

void rewrites_stop_waiting(struct cache *c)
{
    while (c->rewrites_waiting) {
        struct rewrite *r = c->rewrites_waiting;
        if (r->retrying) {
            /* One more read, now: at a stop it is the last (rewrite_read()),
             * after the last device failed it is not even made. */
            timer_cancel(c->reactor, &r->retry);
            rewrite_retry(&r->retry);   /* unlinks it */
            continue;
        }
        cleaner_cancel_wait(c, &r->lw);
        rewrite_space(&r->lw, 0);       /* unlinks it */
    }
}

/* The sectors of `in` whose current copy lies on a device out of service:
 * the only-copy dirty data (and clean data) a failure kept to rescue. */
static void off_service(struct cache *c, uint32_t id, const struct tc_mask *in,
                        struct tc_mask *out)
{
    mask_clear(out);
    for (unsigned s = 0; s < c->spb; s++) {
        if (!mask_test(in, s))
            continue;
        uint32_t f = ce_locate(&c->map.idx, id, s);
        if (f != NIL && seg_cdev(c, frag_seg(&c->map.idx, f))->state != CDEV_OK)
            mask_set(out, s);
    }
}

static void rewrite_after_read(struct rewrite *r, int err, const struct tc_mask *bad);

/*
 * A stop gave up the tombstone of a block dropped from the index (no room
 * in the log even then).  The log may still hold a copy of the block that
 * the restart serves again: one a cut left (originwin.c: the origin's
 * server lost the write it read), or one a failure dropped.  The writes
 * that waited for the tombstone (they wait for the block's lock, held
 * until now) fail with EIO anyway, their acknowledgements held for it
 * (devfail_incomplete()); but sent on to the origin, which may take them,
 * the origin would hold data newer than that copy -- data a read before
 * the stop may even have returned -- and the restart would serve the
 * older copy over it.  So from now on no write of the block reaches the
 * origin (cache_block_tombless(): writepath.c fails them with EIO), and
 * reads of it fail until the exit (the lost set; its LOST record, like the
 * tombstone, finds no room, so the stop writes the lost set into the state
 * file, abandon_close(), and the restart reads the block as EIO): the
 * origin then never holds anything newer than what the log keeps.
 */
static bool tombstone_given_up(struct cache *c, uint64_t oblock)
{
    if (cache_block_tombless(c, oblock))
        return lost_get(&c->map.lost, oblock, NULL);
    if (c->ntombless == c->tombless_cap) {
        c->tombless_cap = c->tombless_cap ? 2 * c->tombless_cap : 16;
        c->tombless = realloc(c->tombless, c->tombless_cap * sizeof *c->tombless);
        if (c->tombless == NULL)
            abort();
    }
    c->tombless[c->ntombless++] = oblock;
    uint64_t base = oblock * c->block_size;
    struct tc_mask all, m;
    mask_range(&all, 0, c->spb);
    if (!lost_get(&c->map.lost, oblock, &m)) {
        /* Nothing of it lost: the origin holds its current data (a clean
         * block, or dirty data the stop wrote there and flushed,
         * rewrite_origin_clean()).  Recorded lost, its flushed data would
         * read EIO after the restart although the origin has it.  The
         * state file names it instead (TC_STATE_STOP_DROPS, abandon.c),
         * and the next start drops whatever copy of it the log keeps, as
         * the tombstone would have. */
        tc_error("cache: stop: no room in the log for the tombstone of origin block %llu "
                 "(bytes %llu..%llu), whose data the origin holds: the state file names it, "
                 "so that the next start drops the older copies the log may keep; writes of "
                 "it fail with EIO until the exit", (unsigned long long)oblock,
                 (unsigned long long)base, (unsigned long long)(base + c->block_size - 1));
        return false;
    }
    lost_record(c, oblock, &all);
    tc_error("cache: stop: no room in the log for the tombstone of origin block %llu (bytes "
             "%llu..%llu): writes of it fail with EIO rather than reach the origin, where the "
             "next start could serve an older copy the log keeps over them",
             (unsigned long long)oblock, (unsigned long long)base,
             (unsigned long long)(base + c->block_size - 1));
    return true;
}

bool cache_block_tombless(const struct cache *c, uint64_t oblock)
{
    for (size_t i = 0; i < c->ntombless; i++)
        if (c->tombless[i] == oblock)
            return true;
    return false;
}

/* Unreadable (or no room at a stop): the dirty sectors d are lost, the
 * clean ones come from the origin; the block goes, after a tombstone. */
static void rewrite_lose(struct rewrite *r, uint32_t id, const struct tc_mask *d, int err)
{
    struct cache *c = r->c;
    if (id != NIL) {
        if (!mask_empty(d)) {
            uint64_t base = r->oblock * c->block_size;
            tc_error("cache: dirty data of origin block %llu (bytes %llu..%llu) could not "
                     "be rewritten after a device failure (%s) and is lost; reads of its "
                     "%u lost sectors fail with EIO until rewritten",
                     (unsigned long long)r->oblock, (unsigned long long)base,
                     (unsigned long long)(base + c->block_size - 1),
                     strerror(-err), mask_count(d));
            struct tc_mask fm;
            off_service(c, id, d, &fm);
            c->rescue_lost_bytes += (uint64_t)mask_count(&fm) * TC_SECTOR;
            if (c->stopping) {
                unsigned s0 = 0;
                while (!mask_test(d, s0))
                    s0++;
                uint64_t first = base + (uint64_t)s0 * TC_SECTOR;
                if (c->stop_rewrite_lost_blocks == 0 || first < c->stop_rewrite_lost_first)
                    c->stop_rewrite_lost_first = first;
                c->stop_rewrite_lost_bytes += (uint64_t)mask_count(d) * TC_SECTOR;
                c->stop_rewrite_lost_blocks++;
            }
            uint64_t unrecorded = c->lost_unrecorded;
            lose_dirty(c, r->oblock, d);
            if (c->lost_unrecorded != unrecorded)
                relost_start(c);    /* its LOST record found no room */
        }
        map_drop_block(c, r->oblock);
        block_gen_bump(c->locks, r->oblock);
    }
    if (tombstone(c, r->oblock) < 0) {
        if (!c->stopping) {
            /* No room even in the cleaner's reserve: the block, out
             * of the index now, waits locked (no version of it can
             * reach the log before its tombstone) and holding the
             * mark; the next attempt appends only the tombstone. */
            rewrite_wait_space(r, true);
            return;
        }
        char why[96];
        snprintf(why, sizeof why, "no room in the log for the tombstone of origin block %llu",
                 (unsigned long long)r->oblock);
        devfail_incomplete(c, why);
        tombstone_given_up(c, r->oblock);
    }
    block_unlock(c->locks, r->oblock);
    r->lw.fn = rewrite_durable;
    r->lw.need_flush = true;
    log_sync(c, &r->lw);
}

/*
 * A stop, and the block has dirty data (rewrite_append()).  It is in
 * r->buf, read back under the block's lock, and a clean stop may not lose
 * what is still readable, least of all what a FLUSH acknowledged.  But
 * the log is often full by then (a device's file system filled up, the
 * cleaner is stopping): a version appended again, even in the cleaner's
 * reserve, may not fit, and takes the room the other blocks' tombstones
 * and the stop's own records need.  So while the origin is there the
 * dirty sectors are written to it instead -- after any writeback of the
 * block in flight, whose data may be older -- and the origin flushed
 * (one flush for the writes completed meanwhile); then the block is
 * clean, and goes from the index after a tombstone, the batch's
 * tombstones appended together and synced once, so that they share
 * chunks (rewrite_origin_clean()).  If the origin refuses the writes or
 * the flush (or was cut meanwhile: not durable), the version is appended
 * after all if it fits, and the dirty sectors are lost, recorded, only
 * when it does not; the stop then fails saying so (cache.c,
 * close_finish()).  The close waits for these writes
 * (c->rewrites_to_origin).
 */
/* The origin refused the block's dirty data too (or the block is gone
 * with every device): lost, recorded, as before. */
static void rewrite_origin_failed(struct rewrite *r, int err)
{
    struct cache *c = r->c;
    uint64_t base = r->oblock * c->block_size;
    tc_error("cache: stop: the dirty data of origin block %llu (bytes %llu..%llu) that a device "
             "failure left to rewrite could not be written to the origin %s (%s): appending it "
             "to the log instead, if there is room", (unsigned long long)r->oblock,
             (unsigned long long)base, (unsigned long long)(base + c->block_size - 1),
             c->vol->origin->name, strerror(-err));
    c->stop_rewrite_origin_err = err;
    /* Read again through the index (the block is still locked): then
     * appended, or lost if there is no room (rewrite_append()). */
    rewrite_locked(&r->bw);
}

/* The block's dirty data is on the origin, durably: the block is clean,
 * and goes from the index after a tombstone (appended here; the sync is
 * the caller's, rewrite_origin_synced(), one for the whole batch, so
 * that the tombstones share chunks: each chunk of its own would take a
 * header's room, and there is little at a stop).  False if the block
 * keeps dirty data the writes did not cover (lost as ever then). */
static bool rewrite_origin_clean(struct rewrite *r)
{
    struct cache *c = r->c;
    uint32_t id = index_lookup(&c->map.idx, r->oblock);
    c->stop_rewrite_origin_bytes += (uint64_t)mask_count(&r->to_origin) * TC_SECTOR;
    c->stop_rewrite_origin_blocks++;
    cache_trace(c, r->oblock, "stop: %u dirty sectors written to the origin (no room in the log)",
                mask_count(&r->to_origin));
    if (id != NIL) {
        map_mark_clean(c, id, &r->to_origin);
        struct tc_mask d;
        ce_get_masks(&c->map.idx, id, NULL, &d);
        mask_andnot(&d, &r->given_up);
        if (!mask_empty(&d)) {
            rewrite_lose(r, id, &d, -EIO);
            return false;
        }
        map_drop_block(c, r->oblock);
        block_gen_bump(c->locks, r->oblock);
    }
    if (tombstone(c, r->oblock) < 0) {
        /* The block's data is on the origin, but the log may keep an
         * older copy that the next start would serve: the state file
         * names the block, and the next start drops that copy
         * (tombstone_given_up()); recorded lost only if some of it was
         * lost already, and the stop says so. */
        char why[96];
        snprintf(why, sizeof why, "no room in the log for the tombstone of origin block %llu",
                 (unsigned long long)r->oblock);
        devfail_incomplete(c, why);
        if (tombstone_given_up(c, r->oblock))
            c->stop_rewrite_tombless_blocks++;
    }
    return true;
}

/* The batch's origin flush ended: each block's data is durable there
 * (or not: lost as before); the tombstones, then one sync for all. */
static void rewrite_origin_flushed(struct tc_dev_io *dio, int err)
{
    struct cache *c = dio->priv;
    struct rewrite *list = c->rw_origin_flushing;
    c->rw_origin_flushing = NULL;
    struct rewrite *clean = NULL;
    while (list) {
        struct rewrite *r = list;
        list = r->onext;
        c->rewrites_to_origin--;
        /* Acknowledged on a connection lost before this flush: not
         * durable. */
        int e = err == 0 && c->vol->origin->epoch != r->oepoch ? -EIO : err;
        if (e) {
            rewrite_origin_failed(r, e);
            continue;
        }
        if (c->vol->cache_failed) {
            /* Every device failed meanwhile: that failure dealt with
             * the block (rewrite_after_read()). */
            block_unlock(c->locks, r->oblock);
            rewrite_end(r);
            continue;
        }
        if (rewrite_origin_clean(r)) {
            r->onext = clean;
            clean = r;
        }
    }
    while (clean) {
        struct rewrite *r = clean;
        clean = r->onext;
        block_unlock(c->locks, r->oblock);
        r->lw.fn = rewrite_durable;
        r->lw.need_flush = true;
        log_sync(c, &r->lw);
    }
    if (c->rw_origin_written)
        rewrite_origin_flush(c);
}

/* One origin flush for every block whose writes completed meanwhile. */
static void rewrite_origin_flush(struct cache *c)
{
    if (c->rw_origin_flushing)
        return;         /* the next, when it ends */
    c->rw_origin_flushing = c->rw_origin_written;
    c->rw_origin_written = NULL;
    memset(&c->rw_origin_dio, 0, sizeof c->rw_origin_dio);
    c->rw_origin_dio.priv = c;
    cache_flush_origin(c, &c->rw_origin_dio, rewrite_origin_flushed);
}

static void rewrite_origin_written(struct tc_dev_io *dio, int err)
{
    struct rewrite *r = dio->priv;
    struct cache *c = r->c;
    if (err && r->oerr == 0)
        r->oerr = err;
    if (--r->oleft > 0)
        return;
    free(r->odio);
    r->odio = NULL;
    if (r->oerr) {
        c->rewrites_to_origin--;
        rewrite_origin_failed(r, r->oerr);
        return;
    }
    r->onext = c->rw_origin_written;
    c->rw_origin_written = r;
    rewrite_origin_flush(c);
}

static void rewrite_origin_go(struct block_waiter *w)
{
    struct rewrite *r = container_of(w, struct rewrite, owb);
    struct cache *c = r->c;
    unsigned spb = c->spb, nruns = 0;
    for (unsigned s = 0; s < spb; s++)
        if (mask_test(&r->to_origin, s) && (s == 0 || !mask_test(&r->to_origin, s - 1)))
            nruns++;
    r->odio = tc_xcalloc(nruns + 1, sizeof *r->odio);
    r->oleft = nruns + 1;       /* one held while issuing */
    r->oerr = 0;
    r->oepoch = c->vol->origin->epoch;
    r->odio[nruns].priv = r;    /* the hold's, below */
    unsigned k = 0;
    for (unsigned s = 0; s < spb;) {
        if (!mask_test(&r->to_origin, s)) {
            s++;
            continue;
        }
        unsigned e = s;
        while (e < spb && mask_test(&r->to_origin, e))
            e++;
        struct tc_dev_io *dio = &r->odio[k++];
        dio->op = TC_DEV_WRITE;
        dio->buf = r->buf + (size_t)s * TC_SECTOR;
        dio->off = r->oblock * c->block_size + (uint64_t)s * TC_SECTOR;
        dio->len = (uint64_t)(e - s) * TC_SECTOR;
        dio->cb = rewrite_origin_written;
        dio->priv = r;
        dev_submit(c->vol->origin, dio);
        s = e;
    }
    rewrite_origin_written(&r->odio[nruns], 0);     /* the hold */
}

static bool rewrite_origin_usable(struct cache *c)
{
    return !c->vol->read_only && !c->vol->cache_failed && !c->offline &&
           c->vol->origin->state == TC_DEV_ONLINE;
}

static void rewrite_to_origin(struct rewrite *r, const struct tc_mask *d)
{
    struct cache *c = r->c;
    r->to_origin = *d;
    r->origin_tried = true;
    c->rewrites_to_origin++;
    r->owb.fn = rewrite_origin_go;
    if (block_wait_wb(c->locks, r->oblock, &r->owb))
        rewrite_origin_go(&r->owb);
}

/* The tombstone and the block's version v (dirty d), read into r->buf. */
static void rewrite_append(struct rewrite *r, uint32_t id, const struct tc_mask *v,
                           const struct tc_mask *d)
{
    struct cache *c = r->c;
    if (c->stopping && !mask_empty(d) && !r->origin_tried && rewrite_origin_usable(c)) {
        rewrite_to_origin(r, d);
        return;
    }
    unsigned n = mask_count(v);
    uint8_t *data = bufpool_get((size_t)n * TC_SECTOR);
    unsigned k = 0;
    for (unsigned s = 0; s < c->spb; s++)
        if (mask_test(v, s))
            memcpy(data + (size_t)k++ * TC_SECTOR, r->buf + (size_t)s * TC_SECTOR, TC_SECTOR);
    bool wt = CE(&c->map.idx, id)->flags & CE_WT;
    /* One append: the tombstone and the version, in one chunk (replace).
     * A stop takes the cleaner's reserve: it cannot wait for the cleaner. */
    struct append a = { .oblock = r->oblock, .type = TC_ENTRY_DATA, .valid = *v, .dirty = *d,
                        .data = data, .urgent = true, .replace = true,
                        .use_reserve = c->stopping,
                        .flags = wt ? TC_ENTRY_WT : 0,
                        .mirror = !mask_empty(d) && c->vol->cfg.dirty_copies > 1 };
    r->lw.fn = rewrite_durable;
    r->lw.need_flush = true;
    struct log_loc at = log_append(c, &a, &r->lw);
    if (at.err < 0 && a.mirror) {
        a.mirror = false;       /* one device left: one copy */
        at = log_append(c, &a, &r->lw);
    }
    bufpool_put(data, (size_t)n * TC_SECTOR);
    if (at.err < 0 && c->stopping) {
        /* Stopping, and no room even in the reserve (and the origin
         * refused the dirty data, or is away: rewrite_to_origin()):
         * waiting for the cleaner could hold the stop for ever. */
        rewrite_lose(r, id, d, at.err);
        return;
    }
    if (at.err < 0) {
        rewrite_wait_space(r, false);
        return;
    }
    struct tc_mask fm;
    off_service(c, id, d, &fm);
    if (!mask_empty(&fm)) {
        c->rescued_bytes += (uint64_t)mask_count(&fm) * TC_SECTOR;
        cache_trace(c, r->oblock, "device failure: %u dirty sectors rescued from a failed device",
                    mask_count(&fm));
    }
    r->appended = true;
    c->rewrites_unappended--;
    c->rewrites_appended++;
    moved_remember_block(c, r->oblock, id, d, r->buf);
    map_add_fragment(c, r->oblock, v, d, at.seg, at.off, at.mseg, at.moff,
                     wt ? CE_WT : 0, true);
    cache_trace(c, r->oblock, "device failure: rewritten as one version");
    block_unlock(c->locks, r->oblock);
}

/* The rescue's read of a block failed, and some of its sectors are on a
 * failed device: each sector is read on its own, so that only the ones
 * that cannot be read (an I/O error, a checksum mismatch) are lost. */
struct sector_read {
    struct rewrite *r;
    unsigned s;
};

static void sector_read_done(struct rewrite *r)
{
    if (--r->sectors_left > 0)
        return;
    int err = mask_empty(&r->bad) ? 0 : r->bad_io ? -EIO : -EBADMSG;
    rewrite_after_read(r, err, &r->bad);
}

static void sector_read(void *arg, int err)
{
    struct sector_read *x = arg;
    struct rewrite *r = x->r;
    if (err) {
        mask_set(&r->bad, x->s);
        r->bad_io |= err != -EBADMSG;
    }
    free(x);
    sector_read_done(r);
}

static void read_by_sector(struct rewrite *r, uint32_t id)
{
    struct cache *c = r->c;
    mask_clear(&r->bad);
    r->bad_io = false;
    r->sectors_left = 1;        /* held while issuing */
    for (unsigned s = 0; s < c->spb; s++) {
        if (!mask_test(&r->want, s))
            continue;
        struct tc_mask one;
        mask_clear(&one);
        mask_set(&one, s);
        struct sector_read *x = tc_xcalloc(1, sizeof *x);
        x->r = r;
        x->s = s;
        r->sectors_left++;
        cache_gather(c, id, &one, r->buf, sector_read, x);
    }
    sector_read_done(r);
}

static void rewrite_read(void *arg, int err)
{
    rewrite_after_read(arg, err, NULL);
}

/* bad: after a read sector by sector (read_by_sector()), the sectors that
 * failed; NULL after a read of the whole block. */
static void rewrite_after_read(struct rewrite *r, int err, const struct tc_mask *bad)
{
    struct cache *c = r->c;
    uint32_t id = index_lookup(&c->map.idx, r->oblock);
    struct tc_mask v, d;
    mask_clear(&v);
    mask_clear(&d);
    if (c->vol->cache_failed) {
        /* Every device failed meanwhile: that failure dealt with the
         * block, and the log is never trusted again. */
        block_unlock(c->locks, r->oblock);
        rewrite_end(r);
        return;
    }
    if (id != NIL) {
        ce_get_masks(&c->map.idx, id, &v, &d);
        mask_andnot(&v, &r->given_up);
        mask_andnot(&d, &r->given_up);
    }
    if (id != NIL && !err && !mask_covers(&r->want, &v)) {
        /* A fill (clean data from the origin, which takes no lock) added
         * sectors meanwhile: read again.  Fills are finite. */
        rewrite_locked(&r->bw);
        return;
    }
    if (id != NIL && err && bad == NULL) {
        struct tc_mask fm;
        off_service(c, id, &r->want, &fm);
        if (!mask_empty(&fm)) {
            read_by_sector(r, id);
            return;
        }
    }
    if (id != NIL && err && bad != NULL) {
        /* Sectors on a failed device that cannot be read are lost now,
         * and only they: the rest of the block is rescued.  A sector of
         * a device in service that failed is dealt with as ever (read
         * again later: nothing is lost before that). */
        struct tc_mask gone, here = *bad;
        off_service(c, id, bad, &gone);
        mask_and(&gone, &v);
        mask_andnot(&here, &gone);
        mask_and(&here, &v);
        if (mask_empty(&here)) {
            struct tc_mask ld = gone;
            mask_and(&ld, &d);
            if (!mask_empty(&ld)) {
                uint64_t base = r->oblock * c->block_size;
                tc_error("cache: %u dirty sectors of origin block %llu (bytes %llu..%llu) "
                         "could not be read back from the failed device (%s) and are lost; "
                         "reads of them fail with EIO until rewritten", mask_count(&ld),
                         (unsigned long long)r->oblock, (unsigned long long)base,
                         (unsigned long long)(base + c->block_size - 1), strerror(-err));
                c->rescue_lost_bytes += (uint64_t)mask_count(&ld) * TC_SECTOR;
                uint64_t unrecorded = c->lost_unrecorded;
                lose_dirty(c, r->oblock, &ld);
                if (c->lost_unrecorded != unrecorded)
                    relost_start(c);
                /* Recorded lost, they are clean now (reads of them fail
                 * with EIO): while the version waits for room, writeback
                 * writes the block's other dirty sectors -- those on the
                 * survivors, in groups the cleaner must free to make that
                 * room -- without reading these.  Left dirty, every
                 * writeback of the block failed on them, the cleaner kept
                 * its group for good, and the room never came: appends
                 * and rescues waited for ever (engine/devfail-reads). */
                map_mark_clean(c, id, &ld);
            }
            /* Still in the index until the version replaces them: a later
             * attempt (after waiting for room) neither reads nor loses
             * them again. */
            mask_or(&r->given_up, &gone);
            mask_andnot(&v, &gone);
            mask_andnot(&d, &gone);
            if (mask_empty(&v))
                rewrite_lose(r, id, &d, err);
            else
                rewrite_append(r, id, &v, &d);
            return;
        }
    }
    if (id != NIL && err && err != -EBADMSG && !c->stopping &&
        r->read_tries + 1 < REWRITE_READ_TRIES) {
        /* Not proven damaged, and the device holding it is in service:
         * keep the block as it is, and read it again in a while. */
        rewrite_wait_retry(r, err);
        return;
    }
    if (id == NIL || err || mask_empty(&v)) {
        /* (v empty: every sector left was given up already.) */
        rewrite_lose(r, id, &d, err);
        return;
    }
    rewrite_append(r, id, &v, &d);
}

/*
 * The lost set recorded again after a failure's LOST records found no
 * room (lostlog.c counts them, c->lost_unrecorded).  The failure mark
 * must wait for them: it makes a restart ignore the failed device's log,
 * and without the records the sectors whose only copy was there would
 * read the origin's older data, not EIO.  Like a rewrite (no block, no
 * lock) it holds the marks and the write acknowledgements, waits for the
 * cleaner to free room and is ended by rewrites_stop_waiting(): when the
 * last device has failed (the state file records the set) or at a stop,
 * where with no room even then the failure is incomplete (no mark).
 */
static void relost_try(struct rewrite *r)
{
    struct cache *c = r->c;
    if (c->vol->cache_failed) {
        rewrite_end(r);
        return;
    }
    if (record_lost_again(c)) {
        r->lw.fn = rewrite_durable;
        r->lw.need_flush = true;
        log_sync(c, &r->lw);
        return;
    }
    if (!c->stopping) {
        rewrite_wait_space(r, true);
        return;
    }
    devfail_incomplete(c, "no room in the log to record the lost set again");
    rewrite_end(r);
}

static void relost_start(struct cache *c)
{
    for (struct rewrite *w = c->rewrites_waiting; w; w = w->next)
        if (w->relost)
            return;     /* it records the whole set, this loss included */
    struct rewrite *r = tc_xcalloc(1, sizeof *r);
    r->c = c;
    r->relost = true;
    r->oblock = UINT64_MAX;
    devfail_hold_more(c);
    tc_error("cache: the lost set waits for room in the log to be recorded again; writes are "
             "answered (and a device failure recorded) only once it is");
    relost_try(r);
}

static void rewrite_locked(struct block_waiter *bw)
{
    struct rewrite *r = container_of(bw, struct rewrite, bw);
    struct cache *c = r->c;
    if (r->relost) {
        relost_try(r);
        return;
    }
    uint32_t id = index_lookup(&c->map.idx, r->oblock);
    if (id == NIL) {
        /* Dropped meanwhile; whatever dropped it from the index, a
         * tombstone makes sure the survivors' log agrees. */
        rewrite_read(r, 0);
        return;
    }
    ce_get_masks(&c->map.idx, id, &r->want, NULL);
    mask_andnot(&r->want, &r->given_up);
    /* Robust: a read that fails because another device failed meanwhile
     * is retried through the index as it is then.  After a back-off, one
     * read through the index as it is now: each attempt adds one error
     * episode only to a device that keeps failing (io/dev.h). */
    if (r->read_tries == 0)
        cache_gather_robust(c, r->oblock, &r->want, r->buf, rewrite_read, r);
    else
        cache_gather(c, id, &r->want, r->buf, rewrite_read, r);
}

static void rewrite_block(struct cache *c, uint64_t oblock, bool rescue, unsigned image_dev,
                          uint32_t image_keeps, bool start_drop)
{
    struct rewrite *r = tc_xcalloc(1, sizeof *r);
    r->c = c;
    r->oblock = oblock;
    if (start_drop) {
        r->start_drop = true;
        if (c->ab.start_drops_waiting == c->ab.start_drop_cap) {
            c->ab.start_drop_cap = c->ab.start_drop_cap ? 2 * c->ab.start_drop_cap : 16;
            c->ab.start_drop_ob = realloc(c->ab.start_drop_ob,
                                          c->ab.start_drop_cap * sizeof(uint64_t));
            if (c->ab.start_drop_ob == NULL)
                abort();
        }
        c->ab.start_drop_ob[c->ab.start_drops_waiting++] = oblock;
    }
    r->image_dev = image_dev;
    r->image_keeps = image_keeps;
    if (rescue) {
        r->rescue = true;
        r->rescue_epoch = c->rescue_epoch;
        c->rescues_pending++;
    }
    r->buf = bufpool_get((size_t)c->spb * TC_SECTOR);
    r->bw.fn = rewrite_locked;
    devfail_hold_more(c);
    c->rewrites_unappended++;
    if (block_lock(c->locks, oblock, &r->bw))
        rewrite_locked(&r->bw);
}

void cache_tombstone(struct cache *c, uint64_t oblock)
{
    if (tombstone(c, oblock) < 0 && !c->abandoned && !c->offline && !c->vol->cache_failed)
        rewrite_block(c, oblock, false, 0, 0, false);
}

void cache_drop_at_start(struct cache *c, uint64_t oblock)
{
    map_drop_block(c, oblock);
    c->mark_dropped = realloc(c->mark_dropped, (c->nmark_dropped + 1) * sizeof *c->mark_dropped);
    if (c->mark_dropped == NULL)
        abort();
    c->mark_dropped[c->nmark_dropped++] = oblock;
}

void cache_mark_tombstones(struct cache *c)
{
    size_t appended = 0;
    if (c->nmark_dropped && !c->vol->read_only && !c->abandoned && !c->offline &&
        !c->vol->cache_failed)
        for (size_t i = 0; i < c->nmark_dropped; i++) {
            if (tombstone(c, c->mark_dropped[i]) == 0)
                appended++;
            else if (!c->abandoned && !c->offline && !c->vol->cache_failed)
                rewrite_block(c, c->mark_dropped[i], false, 0, 0, true);
        }
    /* Durable before the first client is served: a client's write of
     * the block made durable without them (a FUA write, a chunk of a
     * later sync) would otherwise meet the dropped version at the next
     * start, and a power loss before the commit interval's flush lost
     * them (crash/devfail-mark-tombstone-sync).  A start may wait for the
     * devices: recovery does.  A failed sync fails its device (the
     * failure's own appends and marks follow). */
    if (appended > 0) {
        int err = log_sync_wait(c);
        if (err)
            tc_warn("cache: the sync of the %zu tombstones of blocks dropped at the start failed "
                    "(%s)", appended, strerror(-err));
        else
            tc_info("cache: %zu tombstones of blocks dropped at the start written and flushed",
                    appended);
    }
    free(c->mark_dropped);
    c->mark_dropped = NULL;
    c->nmark_dropped = 0;
}

void cache_lost_record_again(struct cache *c)
{
    if (!c->abandoned && !c->offline && !c->vol->cache_failed)
        relost_start(c);
}

/* The sync after a failure's appends (cache_device_fail()): its hold on
 * the failure mark ends when they are durable.  A sync fails when a
 * device's cache flush fails: that device is failed (if it was not
 * already), and a survivor's failure holds the marks in turn until what
 * it moved is durable (or, the last device, abandons the cache). */
struct failure_sync {
    struct cache *c;
    struct log_waiter lw;
};

static void failure_synced(struct log_waiter *lw, int err)
{
    struct failure_sync *x = container_of(lw, struct failure_sync, lw);
    struct cache *c = x->c;
    if (err)
        tc_warn("cache: the log sync after a device failure failed (%s)", strerror(-err));
    free(x);
    devfail_hold_done(c);
}

/* The rewrites waiting for room to append a rescued version try again:
 * what is left of their blocks may be less, or nothing (then a tombstone
 * alone, which takes the cleaner's reserve). */
static void rewrites_retry_room(struct cache *c)
{
    struct rewrite *w = c->rewrites_waiting;
    while (w) {
        struct rewrite *next = w->next;
        if (!w->retrying && !w->relost && !w->lw.reserve) {
            cleaner_cancel_wait(c, &w->lw);
            rewrite_space(&w->lw, 0);   /* unlinks it */
        }
        w = next;
    }
}

/* Calls fn for every fragment still in the index on a failed device in
 * its rescue (state failing), with the sectors it holds current and the
 * dirty ones among them. */
typedef void failing_fragment_fn(struct cache *c, const struct victim *v, uint32_t fid,
                                 const struct tc_mask *cur, const struct tc_mask *dirty,
                                 void *arg);

static void failing_fragments(struct cache *c, failing_fragment_fn *fn, void *arg)
{
    for (unsigned d = 0; d < c->ndevs; d++) {
        if (c->devs[d].state != CDEV_FAILING)
            continue;
        size_t n;
        struct victim *vs = device_fragments(c, d, false, &n);
        for (size_t i = 0; i < n; i++) {
            uint32_t id;
            struct tc_mask cur, dirty;
            uint32_t fid = victim_fragment(c, &vs[i], &id, &cur, &dirty);
            if (fid != NIL)
                fn(c, &vs[i], fid, &cur, &dirty, arg);
        }
        free(vs);
    }
}

/*
 * The last device in service failed while rescues were pending: the
 * dirty data only an earlier-failed device holds, waiting to be read back
 * and appended on a survivor, has no survivor left.  It is drained as the
 * last device's is (see the top of this file): each such device drains
 * too (CDEV_DRAINING: its images stay, writeback reads the fragments from
 * it -- or from an image -- and writes them to the origin, requests
 * touching them wait for that, and a FLUSH held for the rescues now waits
 * for the drain), and its sectors are recorded lost with their proofs
 * until written back (lost_record_pending(), drain_proofs(); the chunk
 * headers of those whose CRC is not in memory are read back with the last
 * device's, proofs_fetch_start()), so that a drain cut short is resumed
 * from that device too by the next start or check --salvage.  Before,
 * the rescues were given up: that data was recorded lost without a
 * proof, and read EIO, also after a restart, although the device usually
 * held it intact.  The rewrites still under way end, as every rewrite
 * does once no device is in service (rewrite_after_read()).  Called
 * before anything else of the last failure, while that device is already
 * draining (no device is in service: lost_record_pending() appends
 * nothing).
 */
static void rescues_drain(struct cache *c)
{
    if (c->rescues_pending == 0)
        return;
    unsigned blocks = c->rescues_pending;
    c->rescues_pending = 0;
    c->rescue_epoch++;      /* the rewrites end without counting */
    for (unsigned d = 0; d < c->ndevs; d++) {
        struct cache_dev *cd = &c->devs[d];
        if (cd->state != CDEV_FAILING)
            continue;
        size_t n;
        struct victim *vs = device_fragments(c, d, false, &n);
        free(cd->drain);
        cd->drain = tc_xmalloc((n ? n : 1) * sizeof *cd->drain);
        cd->ndrain = 0;
        uint64_t bytes = 0, proven = 0;
        for (size_t i = 0; i < n; i++) {
            uint32_t id;
            struct tc_mask cur, dirty;
            uint32_t fid = victim_fragment(c, &vs[i], &id, &cur, &dirty);
            if (fid == NIL)
                continue;
            if (mask_empty(&dirty)) {
                /* On the origin already (the rescues' writeback). */
                map_drop_fragment(c, vs[i].oblock, fid);
                block_gen_bump(c->locks, vs[i].oblock);
                continue;
            }
            lost_record_pending(c, vs[i].oblock, &dirty);
            drain_proofs(c, vs[i].oblock, fid, &dirty, &proven);
            cache_trace(c, vs[i].oblock, "device %u: dirty fragment %u:%u still to be rescued "
                        "kept to be drained", d, vs[i].seg, vs[i].off);
            bytes += (uint64_t)mask_count(&dirty) * TC_SECTOR;
            cd->drain[cd->ndrain++] = (struct drain_item){ vs[i].oblock, vs[i].seg, vs[i].off };
        }
        free(vs);
        if (cd->ndrain == 0) {
            free(cd->drain);
            cd->drain = NULL;
            continue;
        }
        cd->state = CDEV_DRAINING;
        c->draining++;
        cd->drain_left_bytes = bytes;
        char sz[32];
        tc_error("cache device %s: %zu dirty fragments (%s) still waiting for their rescue "
                 "(of %u blocks) are drained instead: written back to the origin from it "
                 "(no cache device is left in service to take them)", cd->dev->name,
                 cd->ndrain, tc_format_size(bytes, sz, sizeof sz), blocks);
    }
}

/*
 * The rescues' data to the origin.  The cleaner must retire a group that
 * still holds a failed device's data being rescued, and appends wait for
 * room -- perhaps the rescues' own, which take no reserve: waiting longer
 * could be for ever.  Giving the rescues up would lose flushed writes, so
 * the data goes where writeback puts all dirty data: to the origin.  An
 * attempt writes back (writeback_blocks(): the origin written, flushed,
 * the blocks marked clean with a CLEAN record) every block still dirty on
 * a failed device in service's stead; then rescue_settle() drops from the
 * index each failed device's fragment that is clean now -- its data is on
 * the origin durably -- and the cleaner is kicked: the group holds
 * nothing of the rescues any more.  A fragment still dirty because the
 * origin refused its block during the attempt (writeback's count of its
 * failures went up) is written again after the block's back-off, by a
 * later attempt, as writeback does and as a drain waits for: one
 * transient origin error must not lose flushed data (status:
 * rescue_origin_refusals).  It is recorded lost, as a rescue given up
 * was, only once writeback gives the block up (writeback_block_given_up():
 * refused WB_FAILURES_EIO times in a row -- some 0.3 s of back-off --,
 * the origin offline past --origin-timeout, writeback stopped) or at a
 * stop: the cleaner, and the appends waiting for its room, cannot wait
 * for an origin that may refuse for good.  One still dirty for another
 * reason (a write-back of it was in flight and skipped, it is backing off
 * after failures before the attempt, a write changed the block
 * meanwhile) waits for the next attempt, when the cleaner comes back (its
 * give-up timer: every 50 ms while appends wait).
 *
 * The invariants of the rescue hold.  Nothing is dropped before the
 * origin holds it durably (writeback flushes the origin before it marks a
 * block clean).  The block's rewrite (struct rewrite) still runs: it
 * reads the block through the index as it is then and appends a
 * tombstone with what is left on the survivors (a tombstone alone when
 * nothing is), so no older version in their logs comes back, and the
 * failure mark still waits for it.  A restart before the mark trusts the
 * failed device's log: it finds the data there (dirty, or clean after the
 * CLEAN record) and the origin holds the same; once the cleaner retired
 * the group, the data is no longer in the log at all, and every older
 * version of the block was in that group or an older one.  Writes of the
 * block keep the order they have with writeback (block_wait_wb), and a
 * write that changed the block meanwhile leaves it dirty (its newer
 * version is not on the failed device).
 */
struct rescue_wb {
    struct cache *c;
    uint64_t *blocks;           /* ascending */
    unsigned *failures;         /* writeback_block_failures() of each, before */
    unsigned n;
};

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Whether the origin refused block b during attempt x. */
static bool rescue_refused(struct cache *c, const struct rescue_wb *x, uint64_t b)
{
    unsigned lo = 0, hi = x->n;
    while (lo < hi) {
        unsigned mid = lo + (hi - lo) / 2;
        if (x->blocks[mid] < b)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < x->n && x->blocks[lo] == b &&
           writeback_block_failures(c, b) > x->failures[lo];
}

/* Drop the failed devices' fragments that are clean now; after attempt x
 * (NULL: none), record lost the dirty sectors of those whose block the
 * origin refused in it.  Returns the blocks still dirty on a failed device
 * (*np of them, ascending, each once). */
struct settle {
    const struct rescue_wb *x;
    uint64_t *blocks;
    size_t n, cap;
    bool dropped;
};

static void settle_fragment(struct cache *c, const struct victim *v, uint32_t fid,
                            const struct tc_mask *cur, const struct tc_mask *dirty, void *arg)
{
    struct settle *st = arg;
    if (mask_empty(dirty)) {
        c->rescued_to_origin_bytes += (uint64_t)mask_count(cur) * TC_SECTOR;
        cache_trace(c, v->oblock, "rescue: fragment %u:%u on the origin, dropped", v->seg,
                    v->off);
        map_drop_fragment(c, v->oblock, fid);
        block_gen_bump(c->locks, v->oblock);
        st->dropped = true;
        return;
    }
    if (st->x != NULL && rescue_refused(c, st->x, v->oblock) &&
        !writeback_block_given_up(c, v->oblock)) {
        /* Refused, but not for good yet: written again after the block's
         * back-off, by the next attempt (or a background pass). */
        c->rescue_origin_refusals++;
        if (writeback_log_allow(c))
            tc_warn("cache: the origin refused dirty data of origin block %llu that only a "
                    "failed device holds (%u times in a row): writing it again after a "
                    "back-off", (unsigned long long)v->oblock,
                    writeback_block_failures(c, v->oblock));
    } else if (st->x != NULL && rescue_refused(c, st->x, v->oblock)) {
        tc_error("cache: the origin refused dirty data of origin block %llu that only "
                 "a failed device holds and the log has no room for (%u times in a row, or "
                 "the origin is offline, or writeback stopped): it is lost",
                 (unsigned long long)v->oblock, writeback_block_failures(c, v->oblock));
        c->rescue_lost_bytes += (uint64_t)mask_count(dirty) * TC_SECTOR;
        lose_fragment(c, v->oblock, fid, dirty);
        st->dropped = true;
        return;
    }
    if (st->n == st->cap) {
        st->cap *= 2;
        st->blocks = realloc(st->blocks, st->cap * sizeof *st->blocks);
        if (st->blocks == NULL)
            abort();
    }
    st->blocks[st->n++] = v->oblock;
}

static uint64_t *rescue_settle(struct cache *c, const struct rescue_wb *x, unsigned *np)
{
    struct settle st = { .x = x, .cap = 16 };
    st.blocks = tc_xmalloc(st.cap * sizeof *st.blocks);
    uint64_t unrecorded = c->lost_unrecorded;
    failing_fragments(c, settle_fragment, &st);
    if (any_ok(c) && c->lost_unrecorded != unrecorded)
        relost_start(c);
    if (st.dropped)
        rewrites_retry_room(c);
    uint64_t *blocks = st.blocks;
    size_t n = st.n;
    qsort(blocks, n, sizeof *blocks, cmp_u64);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (k == 0 || blocks[k - 1] != blocks[i])
            blocks[k++] = blocks[i];
    *np = (unsigned)k;
    return blocks;
}

static void rescue_wb_done(void *arg, int err)
{
    struct rescue_wb *x = arg;
    struct cache *c = x->c;
    (void)err;      /* per block: writeback's failure table */
    c->rescue_wb_running = false;
    if (!c->vol->cache_failed && c->rescues_pending > 0) {
        /* (Else given up meanwhile: the last device failed.) */
        unsigned n;
        free(rescue_settle(c, x, &n));
        cleaner_kick(c);
    }
    free(x->blocks);
    free(x->failures);
    free(x);
}

void cache_rescue_to_origin(struct cache *c)
{
    if (c->rescue_wb_running || c->rescues_pending == 0)
        return;
    unsigned n;
    uint64_t *blocks = rescue_settle(c, NULL, &n);
    if (n == 0) {
        free(blocks);
        cleaner_kick(c);
        return;
    }
    /* Logged the first time, then once in a hundred: while a write-back
     * of the blocks is in flight already (skipped here), the cleaner
     * comes back every few tens of milliseconds. */
    if (c->rescue_writebacks % 100 == 0)
        tc_warn("cache: no room in the log for the data of %u blocks rescued from a failed "
                "device, and the cleaner needs the room: writing it to the origin instead "
                "(attempt %llu)", n, (unsigned long long)c->rescue_writebacks + 1);
    c->rescue_writebacks++;
    c->rescue_wb_running = true;
    struct rescue_wb *x = tc_xcalloc(1, sizeof *x);
    x->c = c;
    x->blocks = blocks;
    x->n = n;
    x->failures = tc_xmalloc(n * sizeof *x->failures);
    for (unsigned i = 0; i < n; i++)
        x->failures[i] = writeback_block_failures(c, blocks[i]);
    writeback_blocks(c, blocks, n, rescue_wb_done, x);
}

uint64_t cache_blocks_in_service(const struct cache *c)
{
    uint64_t segs = 0;
    for (unsigned i = 0; i < c->ndevs; i++)
        if (c->devs[i].state == CDEV_OK)
            segs += c->sp.dev_nsegs[i];
    return segs * c->seg_sectors / c->spb;
}

/*
 * A device left service, others remain: what is sized by the cache's
 * capacity follows the devices in service, as the cleaner's marks do
 * (space.c) -- the policy (its read window, default.c; s3fifo's ghost),
 * the ghost of group fills (readpath.c) and the index's hash table
 * (index.c).  Sized by the whole cache, each was made for blocks the
 * survivors can never hold.  After the failure's drops, so that the
 * index is fitted to the entries left.  A start (a restart, an attach)
 * sizes everything for the devices it opens, all in service: the failed
 * device, back, counts again.
 */
static void follow_service(struct cache *c)
{
    uint64_t blocks = cache_blocks_in_service(c);
    if (blocks == 0)
        return;
    policy_resize(c->policy, blocks);
    group_resize(c, blocks);
    index_fit(&c->map.idx, blocks);
}

void cache_device_fail(struct cache *c, unsigned d, const char *why)
{
    struct cache_dev *cd = &c->devs[d];
    if (cd->state != CDEV_OK)
        return;
    /* The last device in service drains (see the top of this file);
     * another fails as ever.  Only the last one starts to drain (none is
     * in service after it), and with it the earlier-failed devices
     * whose rescues were pending (rescues_drain()). */
    bool drain = true;
    for (unsigned i = 0; i < c->ndevs; i++)
        if (i != d && c->devs[i].state == CDEV_OK)
            drain = false;
    if (drain) {
        /* Draining from here on: images kept (log.c), nothing appended.
         * Rescues from devices failed before have no survivor left to
         * append on: their data drains from those devices too. */
        cd->state = CDEV_DRAINING;
        c->draining++;
        rescues_drain(c);
    } else {
        cd->state = CDEV_FAILING;
    }
    snprintf(cd->fail_why, sizeof cd->fail_why, "%s", why);
    space_drop_free(&c->sp, d);
    if (!drain)
        cleaner_failure_room(c);
    c->degraded = true;
    snprintf(c->health, sizeof c->health, "degraded: cache device %s failed (%s)",
             cd->dev->name, why);
    tc_error("cache device %s failed: %s; the volume goes on without it", cd->dev->name, why);
    /* First, before anything is appended for the failure (its sequence
     * numbers must be at or above the mark) and before any write that
     * could make the device's entries stale is acknowledged: the mark
     * that keeps its log out at the next start (abandon.c).  It reaches
     * the survivors' superblocks only once what is appended here is
     * durable (the hold, ended by failure_synced()) and every rewrite's
     * version is (their own holds): written before, a power loss could
     * keep the mark and lose what replaces the device's log. */
    bool marking = devfail_record(c, d);
    if (marking)
        devfail_hold_more(c);

    /* Every fragment (and mirror copy) on the device. */
    size_t n;
    struct victim *vs = device_fragments(c, d, true, &n);
    uint64_t dropped = 0, saved = 0, kept = 0, kept_bytes = 0, lost = 0;
    uint64_t unrecorded = c->lost_unrecorded;
    bool survivors = false;
    for (unsigned i = 0; i < c->ndevs; i++)
        survivors |= c->devs[i].state == CDEV_OK;
    bool *gone = tc_xcalloc(n ? n : 1, sizeof *gone);
    bool *rescue = tc_xcalloc(n ? n : 1, sizeof *rescue);
    bool *in_image = tc_xcalloc(n ? n : 1, sizeof *in_image);
    cd->drain = tc_xmalloc((n ? n : 1) * sizeof *cd->drain);
    cd->ndrain = 0;
    for (size_t i = 0; i < n; i++) {
        int r = handle_fragment(c, d, &vs[i], drain, &kept_bytes);
        gone[i] = r == 0 || r == 3;
        rescue[i] = r == 4 || r == 5;
        in_image[i] = r == 5;
        dropped += r == 0;
        saved += r == 1;
        lost += r == 3;
        kept += r == 4 || r == 5;
        if (r == 2) {
            kept++;
            cd->drain[cd->ndrain++] = (struct drain_item){ vs[i].oblock, vs[i].seg, vs[i].off };
        }
    }
    cd->drain_left_bytes = drain ? kept_bytes : 0;
    log_device_failed(c, d);
    /* After log_device_failed(): the syncs waiting on the device fail
     * once, as they did, instead of waiting for these records too.  A
     * block with a fragment kept for the drain keeps its dirty data, so
     * forget_block() leaves it (its tombstone comes when the drain ends). */
    for (size_t i = 0; i < n; i++)
        if (gone[i] && (i == 0 || !gone[i - 1] || vs[i - 1].oblock != vs[i].oblock))
            forget_block(c, vs[i].oblock, survivors);   /* a block's victims are adjacent */
    /* What forget_block() kept (dirty data elsewhere) is rewritten (see
     * struct rewrite) -- every such block, not only those whose index
     * still has an older fragment under the dropped one: an older version
     * the dropped fragment superseded in the index may still be in the
     * survivors' log.  So is every block with dirty data kept on the
     * device to be rescued: its rewrite reads it back from there.  Not
     * when the cache is abandoned (no survivor: the log is never trusted
     * again).  Once per block (a block's victims are adjacent). */
    for (size_t i = 0, j; survivors && i < n; i = j) {
        bool any_gone = false, any_rescue = false;
        uint32_t keeps = 0;
        for (j = i; j < n && vs[j].oblock == vs[i].oblock; j++) {
            any_gone |= gone[j];
            any_rescue |= rescue[j];
            keeps += in_image[j];
        }
        if ((any_gone || any_rescue) && index_lookup(&c->map.idx, vs[i].oblock) != NIL)
            rewrite_block(c, vs[i].oblock, any_rescue, d, keeps, false);
        else if (keeps > 0)
            image_keeps_done(c, d, keeps);
    }
    /* The LOST records on the failed device -- durable there, or in a
     * chunk whose write failed -- went with it, and a restart would read
     * the origin's older data in place of the sectors they named.  The set
     * in memory says what they said: recorded again on the survivors.
     * (No survivor: the state file holds the set, abandon.c.)  Records
     * that found no room -- these, or those of the sectors lost above --
     * are appended again once there is room, the mark waiting for them
     * (relost_start()). */
    if (survivors && (!record_lost_again(c) || c->lost_unrecorded != unrecorded))
        relost_start(c);
    free(gone);
    free(rescue);
    free(in_image);
    free(vs);
    if (!drain)
        follow_service(c);
    cleaner_device_failed(c);
    if (marking) {
        /* Everything appended above (re-homed copies, LOST records,
         * tombstones; each rewrite holds apart until its version is
         * durable). */
        struct failure_sync *x = tc_xcalloc(1, sizeof *x);
        x->c = c;
        x->lw.fn = failure_synced;
        log_sync(c, &x->lw);
    }
    char sz[32];
    if (drain)
        tc_error("cache device %s: %llu clean fragments dropped, %llu dirty ones kept on other "
                 "devices, %llu (%s of dirty data) to be drained: written back to the origin "
                 "from it", cd->dev->name, (unsigned long long)dropped,
                 (unsigned long long)saved, (unsigned long long)kept,
                 tc_format_size(kept_bytes, sz, sizeof sz));
    else
        tc_error("cache device %s: %llu clean fragments dropped, %llu dirty ones kept on other "
                 "devices, %llu (%s of dirty data) to be rescued: read back from it and "
                 "appended on the others, %llu lost", cd->dev->name,
                 (unsigned long long)dropped, (unsigned long long)saved,
                 (unsigned long long)kept, tc_format_size(kept_bytes, sz, sizeof sz),
                 (unsigned long long)lost);

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
        /* Rewrites waiting for room would wait for ever: none comes.
         * Each ends (rewrite_read()): this failure dealt with its block. */
        rewrites_stop_waiting(c);
    }
    if (drain)
        proofs_fetch_start(c);
    if (drain && kept == 0)
        finish_failure(c, d);
    else if (!drain) {
        free(cd->drain);
        cd->drain = NULL;
    }
    set_health(c);
    writeback_kick(c);
    cleaner_kick(c);
    /* Client writes waiting for room (writepath.c) would wait for ever
     * with no device left: they go on, around the cache. */
    if (c->vol->cache_failed)
        cleaner_wake_all(c);
}
