/*
 * The cache as a whole: attaching the devices (superblocks, set and origin
 * checks), the index updates every path shares, dispatch of requests to
 * the read, write and discard paths, orderly close, and the figures.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "engine/abandon.h"
#include "engine/blocklock.h"
#include "engine/budget.h"
#include "engine/cache.h"
#include "engine/check.h"
#include "engine/checkpoint.h"
#include "engine/cleaner.h"
#include "engine/failure.h"
#include "engine/lostlog.h"
#include "engine/originstop.h"
#include "engine/originwin.h"
#include "engine/readahead.h"
#include "engine/readpath.h"
#include "engine/recovery.h"
#include "engine/seqrec.h"
#include "engine/stream.h"
#include "engine/verify.h"
#include "engine/writeback.h"
#include "engine/writepath.h"
#include "io/claim.h"
#include "policy/policy.h"
#include "util/assert.h"
#include "util/json.h"
#include "util/log.h"
#include "util/misc.h"
#include "util/parse.h"

#define VERIFY_BUDGET (64ull << 20)

/* ---- tracing ---- */

void cache_trace_log(struct cache *c, uint64_t oblock, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    uint32_t id = index_lookup(&c->map.idx, oblock);
    char frags[256] = "";
    if (id != NIL) {
        size_t n = 0;
        struct tc_mask v, d;
        ce_get_masks(&c->map.idx, id, &v, &d);
        n += (size_t)snprintf(frags + n, sizeof frags - n, "valid %llx dirty %llx:",
                              (unsigned long long)v.w[0], (unsigned long long)d.w[0]);
        for (uint32_t f = ce_head(&c->map.idx, id); f != NIL && n < sizeof frags - 40;
             f = frag_next(&c->map.idx, f)) {
            struct tc_mask st;
            frag_stored(&c->map.idx, f, &st);
            n += (size_t)snprintf(frags + n, sizeof frags - n, " %u:%u=%llx", frag_seg(&c->map.idx, f),
                                  frag_off(&c->map.idx, f), (unsigned long long)st.w[0]);
        }
    }
    tc_info("trace block %llu: %s [%s]", (unsigned long long)oblock, msg,
            id == NIL ? "not cached" : frags);
}

/* ---- dispatch ---- */

/*
 * A write, trim or write-zeroes of sectors the state file on disk still
 * proves (abandon.c, "Resuming the drain": a start's resumed drain whose
 * state file could not be written after it keeps the proofs on disk):
 * the file is written without those proofs first, or the request fails
 * with EIO.  Else the request could reach the origin -- written around
 * the cache, through it, or written back later, the log's record of it
 * gone by the next start (evicted, or not yet synced) -- and the next
 * start write the older proven version back over it.  Sectors the file
 * proves are lost (EIO) until then anyway.  (lost_passthrough() does the
 * same once the cache has failed.)  Nothing to do, and one compare,
 * unless the file on disk proves something.
 */
static bool proofs_refuse(struct cache *c, struct ereq *e)
{
    if (abandon_proofs_before_write(c, e->off, e->len) == 0)
        return false;
    e->err = -EIO;
    e->complete(e);
    return true;
}

void cache_submit(struct ereq *e)
{
    struct cache *c = e->vol->cache;
    if ((e->op == TC_OP_WRITE || e->op == TC_OP_TRIM || e->op == TC_OP_WRITE_ZEROES) &&
        c->ab.disk_proven != NULL && proofs_refuse(c, e))
        return;
    switch (e->op) {
    case TC_OP_READ: cache_read(e); return;
    case TC_OP_WRITE: cache_write(e); return;
    case TC_OP_FLUSH: cache_flush(e); return;
    case TC_OP_TRIM:
    case TC_OP_WRITE_ZEROES: cache_discard(e); return;
    case TC_OP_CACHE: cache_prefetch(e); return;
    case TC_OP_BLOCK_STATUS: engine_block_status(e); return;
    }
    e->err = -EINVAL;
    e->complete(e);
}

/* ---- attaching devices ---- */

/*
 * A cache file that is sparse: format preallocates (unless --allow-sparse),
 * but a copy or a move (cp, rsync -S, a restore) may have made it sparse
 * again.  Once its file system is full, the first log write into a hole
 * fails with ENOSPC and the device fails.  So serve allocates the holes
 * (fallocate() without changing the size or the data) before the first
 * write; where that fails (no room, a file system without fallocate) the
 * operator is told, with the room missing and the way out.  Serving is not
 * refused: the dirty data the file holds must be served to be written
 * back.  (A file system that copies on write can still run out of room
 * later; nothing here can prevent that.)
 */
static void allocate_sparse(const struct cache *c)
{
    for (unsigned i = 0; i < c->ndevs; i++) {
        const struct tc_dev *dev = c->devs[i].dev;
        char path[4096];
        struct stat st;
        if (dev->is_block_device || !claim_local_path(dev->name, path, sizeof path) ||
            stat(path, &st) < 0 || !S_ISREG(st.st_mode))
            continue;
        uint64_t have = (uint64_t)st.st_blocks * 512, size = (uint64_t)st.st_size;
        if (have >= size)
            continue;
        char m[32], a[32];
        uint64_t missing = size - have;
        int err = 0;
        if (c->vol->read_only) {
            err = EROFS;
        } else {
            int fd = open(path, O_RDWR | O_CLOEXEC);
            if (fd < 0 || fallocate(fd, 0, 0, (off_t)size) < 0)
                err = errno;
            if (fd >= 0)
                close(fd);
        }
        if (err == 0) {
            tc_info("cache device %s: allocated the %s of the file that was not (it was "
                    "sparse), so that cache writes cannot fail for want of room",
                    dev->name, tc_format_size(missing, m, sizeof m));
            continue;
        }
        struct statvfs vfs;
        uint64_t avail = statvfs(path, &vfs) == 0 ? (uint64_t)vfs.f_bavail * vfs.f_frsize : 0;
        tc_warn("cache device %s: %s of the file is not allocated (it is sparse) and could not "
                "be (%s); its file system has %s free: when that fills up, cache writes fail "
                "with ENOSPC and the device fails.  Make room, and allocate the file "
                "(fallocate -l %llu %s)", dev->name, tc_format_size(missing, m, sizeof m),
                strerror(err), tc_format_size(avail, a, sizeof a),
                (unsigned long long)size, path);
    }
}

static int read_superblock(struct tc_dev *dev, struct tc_superblock *sb, char *err,
                           size_t errlen)
{
    uint8_t *buf = tc_alloc_aligned(2 * TC_SB_SIZE);
    int rc = dev_sync_io(dev, TC_DEV_READ, buf, 0, 2 * TC_SB_SIZE, 0);
    if (rc) {
        snprintf(err, errlen, "%s: cannot read the superblock: %s", dev->name, strerror(-rc));
        free(buf);
        return -1;
    }
    char e1[160], e2[160];
    int ok = sb_decode(buf, sb, e1, sizeof e1);
    if (ok < 0) {
        /* The second copy stands in for a damaged first one. */
        ok = sb_decode(buf + TC_SB_SIZE, sb, e2, sizeof e2);
        if (ok == 0)
            tc_warn("%s: first superblock copy unusable (%s); using the second", dev->name,
                    e1);
    }
    bool magic = sb_has_magic(buf) || sb_has_magic(buf + TC_SB_SIZE);
    free(buf);
    if (ok < 0) {
        if (!magic)
            snprintf(err, errlen, "%s: not a tiercache cache device (no superblock); create one "
                     "with 'tiercache format --cache %s --origin ORIGIN'", dev->name, dev->name);
        else
            snprintf(err, errlen, "%s: superblock unusable: %s", dev->name, e1);
        return -1;
    }
    if (sb->dev_size > dev->size) {
        snprintf(err, errlen, "%s: device is %llu bytes but was formatted with %llu bytes",
                 dev->name, (unsigned long long)dev->size, (unsigned long long)sb->dev_size);
        return -1;
    }
    return 0;
}

static int check_set(struct cache *c, struct tc_dev **devs, struct tc_superblock *sbs,
                     unsigned n, char *err, size_t errlen)
{
    char u1[37], u2[37];
    const struct tc_superblock *ref = &sbs[0];
    for (unsigned i = 1; i < n; i++) {
        if (memcmp(sbs[i].set_uuid, ref->set_uuid, 16) != 0) {
            tc_uuid_format(sbs[i].set_uuid, u1);
            tc_uuid_format(ref->set_uuid, u2);
            snprintf(err, errlen, "%s belongs to cache set %s, but %s belongs to set %s: these "
                     "devices are not one cache", devs[i]->name, u1, devs[0]->name, u2);
            return -1;
        }
    }
    if (n != ref->dev_count) {
        snprintf(err, errlen, "the cache set has %u device%s but %u %s given", ref->dev_count,
                 ref->dev_count == 1 ? "" : "s", n, n == 1 ? "was" : "were");
        for (unsigned idx = 0; idx < ref->dev_count && n < ref->dev_count; idx++) {
            bool have = false;
            for (unsigned i = 0; i < n; i++)
                if (sbs[i].dev_index == idx)
                    have = true;
            if (!have) {
                tc_uuid_format(ref->dev_uuids[idx], u1);
                size_t l = strlen(err);
                snprintf(err + l, errlen - l, "; missing: device %u (uuid %s)", idx, u1);
                break;
            }
        }
        return -1;
    }
    for (unsigned i = 0; i < n; i++) {
        for (unsigned j = i + 1; j < n; j++) {
            if (sbs[i].dev_index == sbs[j].dev_index) {
                snprintf(err, errlen, "%s and %s are the same device of the set (index %u): is "
                         "a device given twice?", devs[i]->name, devs[j]->name,
                         sbs[i].dev_index);
                return -1;
            }
        }
        /* The segment table too: segment numbers index arrays sized from
         * the first device's. */
        if (memcmp(sbs[i].dev_uuid, ref->dev_uuids[sbs[i].dev_index], 16) != 0 ||
            sbs[i].block_size != ref->block_size || sbs[i].segment_size != ref->segment_size ||
            sbs[i].dev_count != ref->dev_count || sbs[i].total_segments != ref->total_segments ||
            memcmp(sbs[i].dev_segments, ref->dev_segments, sizeof ref->dev_segments) != 0) {
            snprintf(err, errlen, "%s does not match the set's description of device %u",
                     devs[i]->name, sbs[i].dev_index);
            return -1;
        }
    }
    /* Order the devices by their index in the set. */
    for (unsigned i = 0; i < n; i++) {
        unsigned idx = sbs[i].dev_index;
        c->devs[idx].dev = devs[i];
        c->devs[idx].sb = sbs[i];
        c->devs[idx].first_seg = sbs[i].first_segment;
        c->devs[idx].nsegs = sbs[i].segment_count;
        c->devs[idx].state = CDEV_OK;
    }
    return 0;
}

/*
 * The origin's identity (and name) as it is now, into every superblock: an
 * origin adopted with --adopt-origin, or one whose identity was recorded
 * in an older form (dev_identity_matches()), is then recognised at the
 * next start without the option.  Copy A of every device is written and
 * flushed before copy B, as the abandonment mark is: a torn copy A falls
 * back to copy B, which still holds the old identity -- then the next
 * start asks for --adopt-origin again (or accepts the old form), nothing
 * worse.  Only at start, before any request: the superblocks have no
 * other writer then.  A device that cannot be written keeps the old
 * identity (warned, not fatal: the cache itself is fine).
 */
bool cache_write_superblocks(struct cache *c, bool in_service_only, const char *what,
                             const char *consequence)
{
    uint8_t *buf = tc_alloc_aligned(TC_SB_SIZE);
    bool ok = true;
    for (unsigned copy = 0; copy < TC_SB_COPIES; copy++) {
        for (unsigned d = 0; d < c->ndevs; d++) {
            if (in_service_only && c->devs[d].state != CDEV_OK)
                continue;
            sb_encode(&c->devs[d].sb, buf);
            int e = dev_sync_io(c->devs[d].dev, TC_DEV_WRITE, buf, (uint64_t)copy * TC_SB_SIZE,
                                TC_SB_SIZE, 0);
            if (e == 0)
                e = dev_sync_io(c->devs[d].dev, TC_DEV_FLUSH, NULL, 0, 0, 0);
            if (e) {
                tc_warn("%s: %s in the superblock failed: %s%s", c->devs[d].dev->name, what,
                        strerror(-e), consequence);
                ok = false;
            }
        }
    }
    free(buf);
    return ok;
}

static bool record_origin(struct cache *c, const struct tc_dev *origin)
{
    for (unsigned d = 0; d < c->ndevs; d++) {
        struct tc_superblock *sb = &c->devs[d].sb;
        snprintf(sb->origin_id, sizeof sb->origin_id, "%s", origin->identity);
        snprintf(sb->origin_path, sizeof sb->origin_path, "%s", origin->name);
    }
    return cache_write_superblocks(c, false, "recording the origin's identity",
                                   "; the next start may need --adopt-origin again");
}

/* Whether dev's two superblock copies are not byte for byte the same (or
 * cannot be read again): which one the start uses says read_superblock(),
 * the first that decodes. */
static bool copies_differ(struct tc_dev *dev, const char **used)
{
    uint8_t *buf = tc_alloc_aligned(2 * TC_SB_SIZE);
    struct tc_superblock sb;
    char why[160];
    bool differ = dev_sync_io(dev, TC_DEV_READ, buf, 0, 2 * TC_SB_SIZE, 0) != 0 ||
                  memcmp(buf, buf + TC_SB_SIZE, TC_SB_SIZE) != 0;
    *used = sb_decode(buf, &sb, why, sizeof why) == 0 ? "A" : "B";
    free(buf);
    return differ;
}

/*
 * The clean-stop record (TC_SB_CLEAN_STOP, ondisk.h) is true only until
 * the log changes: cleared from every copy of every device before
 * anything is appended (this runs at start, before any request, the
 * cleaner or write-back), so that a crash from now on is never taken for
 * a clean stop: a stale record would call the crash's torn tail damage,
 * and count a log that has moved on.  Copy A of
 * every device is written and flushed before copy B, as elsewhere; a start
 * that cannot clear a copy fails (the log is still as recorded, so the
 * record stays true until a start succeeds).
 *
 * The start reads copy A only, unless it is damaged: a copy B that
 * differs from it is rewritten here too, before anything is appended.
 * Copy B may hold a record copy A no longer does -- a start that cleared
 * A and failed to clear B (a write error, or a crash between the two) --
 * and a later start that found no record in A left B as it was.  Then
 * copy A torn by a power loss (a stop writing its record, say) made the
 * next start fall back to B's stale record: its checkpoint, still whole
 * in free segments, was restored, and every block written since read its
 * older version (dirty data acknowledged and flushed since, gone).
 */
static int clear_stop_record(struct cache *c, char *err, size_t errlen)
{
    bool any = false;
    for (unsigned d = 0; d < c->ndevs; d++)
        any |= (c->devs[d].sb.flags & TC_SB_CLEAN_STOP) != 0;
    for (unsigned d = 0; d < c->ndevs; d++) {
        const char *used;
        if (copies_differ(c->devs[d].dev, &used)) {
            tc_warn("%s: superblock copies A and B differ: both written again from copy %s, "
                    "the one this start uses", c->devs[d].dev->name, used);
            any = true;
        }
    }
    if (!any)
        return 0;
    for (unsigned d = 0; d < c->ndevs; d++) {
        struct tc_superblock *sb = &c->devs[d].sb;
        sb->flags &= ~(TC_SB_CLEAN_STOP | TC_SB_CHECKPOINT);
        sb->stop_chunk_seq = sb->stop_tail_seq = sb->stop_chunks = 0;
        sb->ckpt_len = sb->ckpt_crc = sb->ckpt_nsegs = 0;
        memset(sb->ckpt_segs, 0, sizeof sb->ckpt_segs);
    }
    uint8_t *buf = tc_alloc_aligned(TC_SB_SIZE);
    int e = 0;
    for (unsigned copy = 0; copy < TC_SB_COPIES && e == 0; copy++) {
        for (unsigned d = 0; d < c->ndevs && e == 0; d++) {
            sb_encode(&c->devs[d].sb, buf);
            e = dev_sync_io(c->devs[d].dev, TC_DEV_WRITE, buf, (uint64_t)copy * TC_SB_SIZE,
                            TC_SB_SIZE, 0);
            if (e == 0)
                e = dev_sync_io(c->devs[d].dev, TC_DEV_FLUSH, NULL, 0, 0, 0);
            if (e)
                snprintf(err, errlen, "%s: clearing the clean-stop record in superblock copy %c "
                         "failed: %s; the cache cannot be written before it is cleared (and "
                         "both copies agree)", c->devs[d].dev->name, 'A' + copy, strerror(-e));
        }
    }
    free(buf);
    return e ? -1 : 0;
}

/* Space's event (space.h): a retired segment became free, the cleaner
 * may let appends waiting for room go on. */
static void space_freed(void *ctx)
{
    cleaner_space_freed(ctx);
}

/* Space's other event: only segments the sequence record holds back are
 * free (space.h, invariant 22). */
static void space_unguard(void *ctx)
{
    seqrec_unguard(ctx);
}

/* The log's events (log.h): an append found no room, or a new group took
 * free segments -- the cleaner looks at the free count; a chunk write or
 * a device flush failed -- the device fails (failure.c). */
static void log_needs_space(void *ctx)
{
    cleaner_kick(ctx);
}

static void log_device_error(void *ctx, unsigned d, int err, bool write)
{
    cache_device_error(ctx, d, err, write);
}

/* The cleaner's reserve: one segment per device, a group (per device in
 * service once one failed: space_drop_free()).  A pass copies
 * at most what leaves room in it for the records that must always be
 * appendable (cleaner.c, copy_fits()), so one is enough; a second kept a
 * segment per device empty for good (1.6 % of a 64 MiB cache).  For tests
 * only, TIERCACHE_TEST_RESERVE_SEGS=N sets it (0: none), so that such
 * appends can be made to find no room at all, as they do once the reserve
 * is used up.  TIERCACHE_TEST_RESERVE_SHARED=1 gives no device its share
 * of it (space_dev_reserve()), so that a device can be filled up while
 * the others keep the reserve, and a failure of theirs leaves it no room
 * (engine/devfail-full*.test). */
static void watermarks(struct cache *c)
{
    c->sp.reserve_segs = c->ndevs;
    const char *t = getenv("TIERCACHE_TEST_RESERVE_SEGS");
    if (t && *t)
        c->sp.reserve_segs = (uint32_t)strtoul(t, NULL, 10);
    t = getenv("TIERCACHE_TEST_RESERVE_SHARED");
    c->sp.reserve_shared = t && *t && strcmp(t, "0") != 0;
    t = getenv("TIERCACHE_TEST_NO_TOMBSTONE_ROOM");
    c->test_no_tombstone_room = t && *t ? t : NULL;
}

/*
 * Whether the origin may hold writes acknowledged before this start that
 * no origin flush covered (originwin.c, "The run before"): yes unless the
 * run before stopped cleanly (the newest chunk, or the superblocks'
 * record, says so): a clean stop flushes the origin after the last
 * request and is recorded as clean only if that flush succeeded
 * (close_origin_flushed()).
 *
 * Anything else cannot prove it, so it counts as unflushed: a crash, a
 * kill, a stop whose origin flush failed, and also a cache with no run
 * behind it -- freshly formatted, or its sequence record gone.  A format
 * (--force after a kill -9 of the daemon that served the origin, or a new
 * cache for it) wipes the record of that daemon's run, not the writes it
 * left on the origin unflushed; a first start took them for nothing and
 * its first FLUSH, in writeback mode, did not flush the origin.  The cost
 * is one origin flush at the first flush of a cache's first run.
 */
static bool origin_unflushed_at_start(const struct cache *c)
{
    return !c->st.last_stop || strcmp(c->st.last_stop, "clean") != 0;
}

static int cache_attach(struct tc_volume *vol, const char *const *paths, bool offline,
                        char *err, size_t errlen)
{
    struct tc_dev *devs[TC_MAX_DEVICES];
    struct tc_superblock sbs[TC_MAX_DEVICES];
    unsigned n = 0;
    for (; paths[n]; n++) {
        if (n == TC_MAX_DEVICES) {
            snprintf(err, errlen, "%s: at most %u cache devices make a set (this is the %uth)",
                     paths[n], TC_MAX_DEVICES, n + 1);
            goto fail;
        }
        if (dev_is_nbd_uri(paths[n])) {
            snprintf(err, errlen, "%s: a cache device must be a local file or block device",
                     paths[n]);
            goto fail;
        }
        devs[n] = dev_open_local_as(vol->reactor, paths[n], "cache device", offline, err, errlen);
        if (devs[n] == NULL)
            goto fail;
        if (read_superblock(devs[n], &sbs[n], err, errlen) < 0) {
            n++;
            goto fail;
        }
    }
    struct cache *c = tc_xcalloc(1, sizeof *c);
    c->vol = vol;
    c->data_free = vol->cfg.data_free;
    c->reactor = vol->reactor;
    c->ndevs = n;
    c->offline = offline;
    const char *tb = getenv("TIERCACHE_TRACE_BLOCK");
    c->trace_block = !tb ? UINT64_MAX : strcmp(tb, "all") == 0 ? UINT64_MAX - 1
                                                               : strtoull(tb, NULL, 10);
    if (check_set(c, devs, sbs, n, err, errlen) < 0) {
        free(c);
        goto fail;
    }
    /* Settings are checked before anything is built (the devices are
     * still the caller's to close); every failure after vol->cache = c
     * unwinds through cache_free(), which copes with a cache built only
     * in part. */
    if (vol->cfg.dirty_copies > 1 && n < 2) {
        snprintf(err, errlen, "--dirty-copies %u needs at least 2 cache devices (%u given)",
                 vol->cfg.dirty_copies, n);
        free(c);
        goto fail;
    }
    const struct policy_ops *pops = policy_find(vol->cfg.policy ? vol->cfg.policy : "default");
    if (pops == NULL) {
        snprintf(err, errlen, "--policy '%s': no such policy (choose from %s)", vol->cfg.policy,
                 policy_names());
        free(c);
        goto fail;
    }
    /* The index keeps origin block numbers in 48 bits (engine/map.h). */
    uint64_t osize = vol->size ? vol->size : sbs[0].origin_size;
    if (sbs[0].block_size && osize / sbs[0].block_size >= IX_FREE - 1) {
        snprintf(err, errlen, "origin of %llu bytes: more than %llu blocks of %u bytes",
                 (unsigned long long)osize, (unsigned long long)(IX_FREE - 2), sbs[0].block_size);
        free(c);
        goto fail;
    }
    memcpy(c->set_uuid, sbs[0].set_uuid, 16);
    /* The set's identity too, before the log is read: exclusive for serve,
     * shared for check and dump (io/claim.c). */
    if (claim_set_enabled()) {
        c->set_claim = claim_set_lock(c->set_uuid, !offline, c->devs[0].dev->name, err, errlen);
        if (c->set_claim == NULL) {
            free(c);
            goto fail;
        }
    }
    c->block_size = sbs[0].block_size;
    c->spb = c->block_size / TC_SECTOR;
    c->segment_size = sbs[0].segment_size;
    c->seg_sectors = c->segment_size / TC_SECTOR;
    c->sp.nsegs = sbs[0].total_segments;
    if (vol->size == 0)
        vol->size = sbs[0].origin_size;    /* offline: the recorded origin */
    /* The log is read against the origin size the set was formatted for:
     * an origin of another size is refused after the scan (which counts
     * the dirty data the refusal names), and read against its size every
     * entry past it was taken for damage, a warning each. */
    c->nblocks_origin = (sbs[0].origin_size + c->block_size - 1) / c->block_size;
    c->lg.next_seq = 1;
    snprintf(c->health, sizeof c->health, "ok");
    vol->cache = c;

    uint64_t cache_blocks = (uint64_t)c->sp.nsegs * c->seg_sectors / c->spb;
    c->policy = tc_xcalloc(1, sizeof *c->policy);
    policy_open(c->policy, pops, &(struct policy_params){ .cache_blocks = cache_blocks });
    map_init(&c->map, c->spb, cache_blocks, c->nblocks_origin);
    budget_init(&c->budget, vol->cfg.write_budget_rate, vol->cfg.write_budget_burst,
                vol->cfg.write_budget_minburst);
    space_init(&c->sp, c->sp.nsegs, c->seg_sectors, c->ndevs);
    for (unsigned d = 0; d < c->ndevs; d++)
        space_add_dev(&c->sp, d, c->devs[d].first_seg, c->devs[d].nsegs);
    c->sp.ev = (struct space_events){ .freed = space_freed, .unguard = space_unguard, .ctx = c };
    watermarks(c);
    log_init(c);
    c->lg.ev = (struct log_events){ .needs_space = log_needs_space,
                                    .device_error = log_device_error, .ctx = c };
    c->verify = verify_new(&c->sp, c->spb, VERIFY_BUDGET);
    c->locks = blocklocks_new();
    c->streams = streams_new(vol->cfg.sequential_cutoff);
    readahead_init(c);
    group_init(c, cache_blocks);
    cleaner_init(c);
    writeback_init(c);

    /* The record of an earlier abandonment, before the log is replayed. */
    if (abandon_load(c, vol->cfg.state_file, paths[0], err, errlen) < 0)
        goto fail_cache;
    /* The state file is this set's alone while it serves: another set given
     * the same file would replace this one's record of lost sectors, which
     * an abandonment writes at once (abandon.c). */
    if (claim_set_enabled() && !offline &&
        (c->state_claim = claim_state_lock(c->state_path, err, errlen)) == NULL)
        goto fail_cache;
    /* A set on memory devices (replay's) lives and dies with the process:
     * no older copy of it can come back, so it keeps no sequence record --
     * which, its state file's default place being the system's folder,
     * would only pile up there, two files a replay. */
    c->in_memory = true;
    for (unsigned i = 0; i < n; i++)
        c->in_memory = c->in_memory && dev_is_mem(paths[i]);
    /* The sequence record's chunk, for the scan to count each device's
     * newest at or below it (seqrec.c). */
    if (!c->in_memory)
        seqrec_bound_read(c);
    uint64_t t0 = tc_now_ns(), read0 = 0;
    for (unsigned d = 0; d < c->ndevs; d++)
        read0 += c->devs[d].dev->stats.read_bytes;
    if (recovery_run(c, err, errlen) < 0) {
        /* An older copy of one device makes the scan find less than a
         * clean stop recorded: said as what it is (seqrec.c). */
        if (!offline && !vol->cfg.accept_older_cache && c->newest_chunks_known)
            seqrec_explain_refusal(c, err, errlen);
        goto fail_cache;
    }
    c->recovery_ns = tc_now_ns() - t0;
    for (unsigned d = 0; d < c->ndevs; d++)
        c->st.recovery_read_bytes += c->devs[d].dev->stats.read_bytes;
    c->st.recovery_read_bytes -= read0;
    if (offline)
        return 0;

    /* The origin must be the one the cache was formatted for. */
    const struct tc_superblock *sb = &c->devs[0].sb;
    struct tc_dev *origin = vol->origin;
    enum dev_id_match idm = dev_identity_matches(origin, sb->origin_id, TC_ORIGIN_ID_LEN - 1);
    bool same_id = idm != DEV_ID_OTHER;
    if (sb->origin_size != vol->size || (!same_id && !vol->cfg.adopt_origin)) {
        /* Say how to recover: --adopt-origin only helps a same-size copy,
         * and reformatting discards dirty data, so that comes last. */
        bool same_size = sb->origin_size == vol->size;
        char hint[512];
        if (same_id && !same_size) {
            /* The origin itself, resized (grown or shrunk) since the
             * format: a cache is not resized with it. */
            snprintf(hint, sizeof hint,
                     "The origin was resized since the cache was formatted%s; a cache set "
                     "cannot follow a resize.  Give the origin its size of %llu bytes back and "
                     "serve it%s, then reformat the cache for the new size ('tiercache format "
                     "--force')",
                     strncmp(origin->identity, "nbd", 3) == 0
                         ? " (or another export of another size is served under its name)" : "",
                     (unsigned long long)sb->origin_size,
                     c->map.dirty_sectors ? ", running 'tiercache flush' (or 'detach') to write "
                                            "back the cache's dirty data"
                                          : "");
        } else if (c->map.dirty_sectors) {
            char dirty[32];
            tc_format_size(c->map.dirty_sectors * TC_SECTOR, dirty, sizeof dirty);
            snprintf(hint, sizeof hint,
                     "The cache holds dirty data for its origin (%s), which would be lost: "
                     "serve it with its own origin and run 'tiercache flush' (or 'detach')%s; "
                     "to discard the dirty data instead, reformat the cache with 'tiercache "
                     "format --force --discard-dirty'.", dirty,
                     same_size ? ", or pass --adopt-origin if this origin is an exact copy of "
                                 "that one" : "");
        } else {
            snprintf(hint, sizeof hint,
                     "Serve it with its own origin%s, or reformat the cache with 'tiercache "
                     "format --force' (its contents are discarded).",
                     same_size ? ", pass --adopt-origin if this origin is an exact copy of it"
                               : "");
        }
        snprintf(err, errlen,
                 "the cache on %s was formatted for origin '%s' (%s, %llu bytes), but this "
                 "origin is '%s' (%s, %llu bytes). %s",
                 c->devs[0].dev->name, sb->origin_path, sb->origin_id,
                 (unsigned long long)sb->origin_size, origin->name, origin->identity,
                 (unsigned long long)vol->size, hint);
        goto fail_cache;
    }
    /* Before anything is written: an older copy of the devices is refused
     * with its log as it was (seqrec.c).  Before the origin's modification
     * time: an older copy's clean stop recorded an older time, and the
     * daemon's own writes since are not "something wrote the origin" --
     * nor is --adopt-origin the way out (the copy's dirty data would be
     * written back over them). */
    if (!c->in_memory && seqrec_check(c, vol->cfg.accept_older_cache, vol->cfg.adopt_state_file,
                                   err, errlen) < 0)
        goto fail_cache;
    /* A set salvaged since its clean stop is judged by the salvage: the
     * salvage's own writes changed the origin after that stop: judged by
     * the clean stop, they made every start of the set refuse the origin
     * as written by "something", offering --adopt-origin -- which, after
     * writes made since the salvage, puts the cache's older data back
     * over them. */
    int salvaged = same_id && !c->in_memory
                       ? cache_origin_salvage_changed(c, origin, vol->cfg.adopt_origin, err,
                                                      errlen)
                       : 0;
    if (salvaged < 0)
        goto fail_cache;
    if (same_id && !salvaged &&
        cache_origin_changed(c, origin, vol->cfg.adopt_origin, err, errlen) < 0)
        goto fail_cache;
    /* An abandonment the state file could not record: the log's dirty data
     * written back and the abandonment recorded; or a drain cut short
     * whose state file marks its sectors (version 4): written back from
     * the replay of the whole log.  Either way the cache is then opened
     * again (abandon.c). */
    int again = abandon_unfiled(c, origin, err, errlen);
    if (again == 0)
        again = abandon_log_marks(c, origin, err, errlen);
    if (again < 0)
        goto fail_cache;
    if (again > 0) {
        vol->cache = NULL;
        cache_free(c);
        return 1;
    }
    /* What the records above cannot see (an NBD origin, a file's time put
     * back, a device after a restart): the clean copies themselves
     * compared with the origin, before anything is written. */
    if (cache_origin_sample(c, origin, vol->cfg.origin_check_blocks, vol->cfg.adopt_origin,
                            SAMPLE_AT_START, err, errlen) < 0)
        goto fail_cache;
    /* A drain cut short (state file version 3), resumed: the origin is the
     * cache's, and nothing is appended yet (the abandoned device's data is
     * overwritten from the first append on). */
    abandon_resume_drain(c, !vol->read_only);
    if (clear_stop_record(c, err, errlen) < 0)
        goto fail_cache;
    if (ckpt_run_init(c, err, errlen) < 0)
        goto fail_cache;
    if (!same_id || idm == DEV_ID_LEGACY) {
        char was[TC_ORIGIN_ID_LEN];
        snprintf(was, sizeof was, "%s", sb->origin_id);
        bool ok = record_origin(c, origin);
        if (!same_id)
            tc_warn("origin identity changed from %s to %s: adopted (--adopt-origin)%s", was,
                    origin->identity, ok ? " and recorded: later starts need no "
                                           "--adopt-origin" : "");
        else if (ok)
            tc_info("origin identity %s recorded in the new form %s", was, origin->identity);
    }

    char dz[32];
    char rb[32];
    tc_info("cache: %u device%s, %u segments of %u KiB, block %u KiB; recovered %llu blocks "
            "(%s dirty) in %.3f s from the %s (%s read)",
            c->ndevs, c->ndevs == 1 ? "" : "s", c->sp.nsegs, c->segment_size >> 10,
            c->block_size >> 10, (unsigned long long)c->map.idx.count,
            tc_format_size(c->map.dirty_sectors * TC_SECTOR, dz, sizeof dz),
            (double)c->recovery_ns / 1e9,
            strcmp(c->st.recovered_from, "checkpoint") == 0       ? "checkpoint"
            : strcmp(c->st.recovered_from, "checkpoint+log") == 0 ? "running checkpoint and the log after it"
                                                                  : "log's scan",
            tc_format_size(c->st.recovery_read_bytes, rb, sizeof rb));
    if (c->st.last_stop && strcmp(c->st.last_stop, "unclean") == 0)
        tc_warn("cache: recovered after an unclean stop: %llu blocks, %llu dirty (%s)",
                (unsigned long long)c->map.idx.count, (unsigned long long)c->map.dirty_blocks, dz);
    /* Not a flush now: a start must not wait on an origin that holds its
     * flushes (or is down); the first flush that reaches the daemon does
     * it (originwin.c). */
    origin_window_started(c, origin_unflushed_at_start(c));
    if (c->owin.before_start)
        tc_info("cache: %s: the origin may hold writes acknowledged without a flush; the "
                "first flush flushes the origin",
                c->st.last_stop && strcmp(c->st.last_stop, "none") != 0
                    ? "the run before did not stop cleanly"
                    : "no clean stop of this cache recorded (a first start)");
    /* The state file's room first: it is small, and a full file system
     * must not keep the abandonment from being recorded. */
    abandon_keep_room(c);
    allocate_sparse(c);
    /* Only now, the clean-stop record cleared: nothing is appended before
     * (writeback_start(), abandon_started()). */
    seqrec_started(c);
    if (!c->in_memory && !vol->read_only)
        cache_origin_salvage_served(c);
    /* First of all appends after a crash: the chunk that records the
     * sequence numbers skipped (TC_SEQ_RESTART_GAP, ondisk.h). */
    if (!vol->read_only && !c->abandoned && !vol->cache_failed && log_write_restart_mark(c) == 0)
        seqrec_restart_marked(c);
    /* The tombstones of the blocks dropped at the start are durable before
     * a stop's lost set is recorded in the log again (abandon_started()):
     * once that is synced the state file goes, and among those blocks are
     * the ones it named whose tombstones the stop gave up
     * (TC_STATE_STOP_DROPS) -- a crash between would let the log's older
     * copies of them back.  Those that find no room wait for it, and the
     * state file with them (abandon.c, c->ab.start_drops_waiting). */
    cache_mark_tombstones(c);
    abandon_started(c);
    writeback_start(c);
    return 0;

fail_cache:
    vol->cache = NULL;
    cache_free(c);
    return -1;
fail:
    for (unsigned i = 0; i < n; i++)
        dev_close(devs[i]);
    return -1;
}

int cache_open(struct tc_volume *vol, const char *const *paths, char *err, size_t errlen)
{
    /* Once more after an abandonment recorded now (abandon_unfiled()), and
     * after marked sectors written back (abandon_log_marks()): each
     * rewrites the state file so that the next attach has nothing to do. */
    int rc = cache_attach(vol, paths, false, err, errlen);
    for (int again = 0; rc > 0 && again < 2; again++)
        rc = cache_attach(vol, paths, false, err, errlen);
    if (rc > 0) {
        snprintf(err, errlen, "the cache's state file still records an abandonment to file, "
                 "or sectors to write back, after it was written");
        rc = -1;
    }
    return rc;
}

struct cache *cache_open_offline(struct tc_reactor *r, const char *const *paths,
                                 struct tc_volume_config *cfg, char *err, size_t errlen)
{
    struct tc_volume *vol = tc_xcalloc(1, sizeof *vol);
    vol->reactor = r;
    vol->held_tail = &vol->held_head;
    vol->cfg = *cfg;
    vol->read_only = true;
    vol->mode = TC_MODE_PASSTHROUGH;
    /* The origin's size comes from the superblock: recovery needs it. */
    vol->size = 0;
    if (cache_attach(vol, paths, true, err, errlen) < 0) {
        free(vol);
        return NULL;
    }
    return vol->cache;
}

void cache_flush_origin(struct cache *c, struct tc_dev_io *dio,
                        void (*cb)(struct tc_dev_io *dio, int err))
{
    dio->op = TC_DEV_FLUSH;
    dio->cb = cb;
    if (c->vol->origin->can_flush && !c->vol->read_only)
        dev_submit(c->vol->origin, dio);
    else
        cb(dio, 0);
}

void cache_close_offline(struct cache *c)
{
    struct tc_volume *vol = c->vol;
    cache_free(c);
    free(vol);
}

/* ---- draining and detaching ---- */

struct drain_ctx {
    struct cache *c;
    bool detach;
    bool ending;                    /* detach: the last sync, the cleaner stopped */
    uint64_t old_tail;              /* ... and the tail it replaced */
    bool emptied;                   /* detach: every group ended, once */
    struct tc_timer cleaner_gone;   /* detach: waiting for a cleaner pass to end */
    struct log_waiter w;
    struct tc_dev_io dio;           /* the origin flush after the drain */
    struct stable_flush sf;         /* the origin flush at the end */
    tc_progress_fn progress;
    void (*done)(void *arg, int err);
    void *arg;
    int err;
};

static void drain_progress(void *arg, uint64_t left, uint64_t done_bytes)
{
    struct drain_ctx *x = arg;
    if (x->progress)
        x->progress(x->arg, left, done_bytes);
}

static void drain_synced(struct log_waiter *w, int err);

static void detach_cleaner_check(struct tc_timer *t)
{
    struct drain_ctx *x = container_of(t, struct drain_ctx, cleaner_gone);
    drain_synced(&x->w, 0);
}

static void drain_synced(struct log_waiter *w, int err)
{
    struct drain_ctx *x = container_of(w, struct drain_ctx, w);
    struct cache *c = x->c;
    if (err && x->err == 0)
        snprintf(c->drain_failure, sizeof c->drain_failure, "the %ssync of the cache log "
                 "failed (%s)", x->ending ? "final " : "", strerror(-err));
    if (err && x->ending) {
        /* The detach fails, so it must change nothing: the groups it was
         * ending stay live (a chunk recording the new tail may have
         * reached a device; it only frees groups whose data was all clean
         * and on the origin -- the drain left nothing dirty and the gate
         * let no write in since), and the cleaner runs again. */
        tc_error("cache: detach: final sync failed: %s; the cache stays attached and its "
                 "cleaner runs again", strerror(-err));
        c->lg.tail_seq = x->old_tail;
        cleaner_resume(c);
    }
    if (err == 0)
        err = x->err;
    if (x->detach && err == 0 && !x->emptied && c->lg.tail_seq != c->lg.next_seq) {
        /* Drained: now end every group, durably -- the cache is empty.
         * Once: the lost records appended below take sequence numbers, so
         * the tail never catches up with the head again while the lost set
         * is not empty (this emptied the log again and again, a chunk
         * write and a flush each time). */
        cleaner_stop(c);
        if (!cleaner_idle(c)) {
            /* A pass of the cleaner under way would go on after the log is
             * emptied: it would copy the blocks it keeps into the group
             * that stays live, and record the tail it reached, older than
             * the emptied log's -- both bring pre-detach data back at the
             * next start, over what the origin received while detached.
             * The log is emptied once the pass has ended (the cleaner
             * starts no other: it is stopped). */
            if (!x->cleaner_gone.fn)
                tc_info("cache: detach: waiting for the cleaner's pass under way to end");
            x->cleaner_gone.fn = detach_cleaner_check;
            timer_arm(c->reactor, &x->cleaner_gone, 10ull * 1000 * 1000);
            return;
        }
        x->emptied = true;
        x->ending = true;
        x->old_tail = c->lg.tail_seq;
        /* The group open now began below the new tail: a record appended
         * to it would be dead at the next start (recovery replays the
         * groups at or after the tail), and the lost set with it -- the
         * sectors read the origin's older data after a restart, where the
         * daemon answered EIO.  Closed, the records below open a new one. */
        if (c->map.lost.blocks)
            log_close_group(c);
        c->lg.tail_seq = c->lg.next_seq;
        /* The lost set outlives the emptied log: its records go again
         * into the group that stays live.  Then the chunk whose header
         * records the new tail: with no segment open and none free (the
         * cleaner stopped with the log full) there is no room for it, and
         * the sync below would have found nothing to write -- the detach
         * reported done with the log as full as before, and after a crash
         * the start served every block of it again, older than what the
         * origin received while detached.  Then the detach fails and
         * changes nothing, as when its final sync fails. */
        bool room = lost_record_again(c);
        room = log_seal_all(c, true) && room;
        if (!room) {
            snprintf(c->drain_failure, sizeof c->drain_failure, "no room in the log for the "
                     "record that empties it");
            tc_error("cache: detach: no room in the log for the record that empties it (every "
                     "segment holds data); the cache stays attached and its cleaner runs "
                     "again: try again once it has freed some");
            c->lg.tail_seq = x->old_tail;
            cleaner_resume(c);
            err = -ENOSPC;
        } else {
            log_sync(c, &x->w);
            return;
        }
    }
    void (*done)(void *, int) = x->done;
    void *arg = x->arg;
    free(x);
    done(arg, err);
}

static void drain_origin_flushed(struct tc_dev_io *dio, int err)
{
    struct drain_ctx *x = container_of(dio, struct drain_ctx, dio);
    struct cache *c = x->c;
    int r = stable_flush_end(c, &x->sf, err);
    if (err) {
        snprintf(c->drain_failure, sizeof c->drain_failure, "the origin's flush failed (%s)",
                 strerror(-err));
        x->err = err;
    } else if (r) {
        /* Writes it was to cover may be lost with an origin connection
         * (originwin.c): what the cache still holds is dirty again. */
        snprintf(c->drain_failure, sizeof c->drain_failure, "origin writes were acknowledged "
                 "on a connection lost before this flush (see the log)");
        x->err = r;
    }
    x->w.fn = drain_synced;
    log_sync(c, &x->w);
}

/*
 * The dirty data is written back: now the origin is flushed, once, before
 * the drain is reported done.  Writeback flushes the origin after its own
 * writes, but the origin also holds acknowledged writes no flush covered
 * yet -- write-through versions, writes around the cache (write-around,
 * passthrough, sequential bypass, write-zeroes) -- and with nothing dirty
 * no job ran at all.  tiercache flush and detach promise, at exit 0, that
 * the origin holds every acknowledged write durably (a detach then also
 * empties the log, the other durable record of the write-through
 * versions); without this flush a power loss of the origin right after
 * either lost them.  As for a client FLUSH (cache_flush()), writes the
 * origin window finds acknowledged on a connection lost since fail it.
 */
static void drained(void *arg, int err)
{
    struct drain_ctx *x = arg;
    struct cache *c = x->c;
    x->err = err;
    if (err == 0 && c->vol->origin->can_flush && !c->vol->read_only) {
        stable_flush_begin(c, &x->sf);
        memset(&x->dio, 0, sizeof x->dio);
        x->dio.op = TC_DEV_FLUSH;
        x->dio.cb = drain_origin_flushed;
        dev_submit(c->vol->origin, &x->dio);
        return;
    }
    x->w.fn = drain_synced;
    log_sync(c, &x->w);
}

void cache_flush_dirty(struct cache *c, bool dirty_now_only, tc_progress_fn progress,
                       void (*done)(void *arg, int err), void *arg)
{
    struct drain_ctx *x = tc_xcalloc(1, sizeof *x);
    x->c = c;
    c->drain_failure[0] = '\0';
    x->progress = progress;
    x->done = done;
    x->arg = arg;
    writeback_drain(c, dirty_now_only, drain_progress, drained, x);
}

void cache_detach(struct cache *c, tc_progress_fn progress, void (*done)(void *arg, int err),
                  void *arg)
{
    struct drain_ctx *x = tc_xcalloc(1, sizeof *x);
    x->c = c;
    c->drain_failure[0] = '\0';
    x->detach = true;
    x->progress = progress;
    x->done = done;
    x->arg = arg;
    writeback_drain(c, false, drain_progress, drained, x);
}

/* ---- close ---- */

#define CLOSE_ORIGIN_DEFAULT_NS (60ull * 1000 * 1000 * 1000)
#define CLOSE_ORIGIN_SLACK_NS (5ull * 1000 * 1000 * 1000)

/* The 5 s above twice the origin's timeout that a stop waits for its
 * write-back jobs (close_quiet()); for tests only,
 * TIERCACHE_TEST_STOP_ORIGIN_SLACK_MS sets it, so that a test of the stop
 * giving up does not wait it out. */
static uint64_t close_origin_slack_ns(void)
{
    const char *t = getenv("TIERCACHE_TEST_STOP_ORIGIN_SLACK_MS");
    if (t && *t)
        return (uint64_t)strtoull(t, NULL, 10) * 1000 * 1000;
    return CLOSE_ORIGIN_SLACK_NS;
}

struct close_ctx {
    struct cache *c;
    struct log_waiter w;
    struct tc_dev_io dio;
    struct tc_dev_io sb_dio[TC_MAX_DEVICES];  /* the clean-stop record, per device */
    uint8_t *sb_buf[TC_MAX_DEVICES];
    uint8_t sb_step[TC_MAX_DEVICES];        /* 0 write A, 1 flush, 2 write B, 3 flush */
    unsigned sb_pending;
    bool sb_failed;                 /* a device's record failed */
    bool stop_sealed;               /* the stop's own chunks were written, flagged clean */
    struct ckpt_place ckpt;         /* the checkpoint the record names ... */
    bool ckpt_ok;                   /* ... if it was written */
    struct tc_timer quiet;          /* waiting for writeback and the cleaner */
    uint64_t quiet_since, quiet_logged;
    struct stable_flush sf;         /* the origin flush */
    unsigned resyncs;               /* syncs repeated for chunks sealed meanwhile */
    bool marked;
    bool origin_unflushed;          /* the stop's origin flush failed: not a clean stop */
    bool aborted;                   /* the origin was given up on (dev_abort) */
    bool ra_logged;                 /* the wait for read-ahead was logged */
    bool drained;                   /* the stop's own drain ran (close_drain()) */
    int sync_err;                   /* the last sync's, while it runs */
    int drain_err;                  /* its first failed job's */
    unsigned drain_pass;
    bool drain_jobs;                /* it had blocks to write */
    uint64_t drain_cursor;
    uint64_t *drain_blocks;
    struct tc_task drain_task;
    struct tc_dev_io drain_dio;     /* its origin flush, before the settle */
    struct tc_timer rw_wait;        /* for a device failure's writes to the origin */
    int rw_err;                     /* the sync's error meanwhile */
    int err;
    struct tc_timer wait;
    void (*done)(void *arg, int err);
    void *arg;
};

/* The end of a close, once the superblock marks of an abandonment (which
 * use the devices) are done. */
static void close_end(struct close_ctx *x)
{
    if (!abandon_idle(x->c)) {
        timer_arm(x->c->reactor, &x->wait, 10ull * 1000 * 1000);
        return;
    }
    void (*done)(void *, int) = x->done;
    void *arg = x->arg;
    int err = x->err;
    free(x);
    done(arg, err);
}

/* The sanitizer build: the index audit of tiercache check (check.c) at a
 * clean close, every chunk sealed and synced; an inconsistency aborts.
 * Not for a failed or abandoned cache: its index is not the truth any more
 * (failure.c, abandon.c). */
static void audit_at_close(struct cache *c)
{
    if (c->vol->cache_failed || c->abandoned)
        return;
    struct check_result r;
    if (cache_check_index(c, &r) > 0) {
        tc_error("cache: the index audit at close found %u problem%s:", r.nproblems,
                 r.nproblems == 1 ? "" : "s");
        for (unsigned i = 0; i < r.nproblems && i < 20; i++)
            tc_error("  %s", r.problems[i]);
        tc_assert_fail(__FILE__, __LINE__, "the index audit at close finds no problem");
    }
    check_result_free(&r);
}

static void close_wait_fn(struct tc_timer *t)
{
    close_end(container_of(t, struct close_ctx, wait));
}

/*
 * The clean-stop record (TC_SB_CLEAN_STOP, ondisk.h): after the stop's
 * last log sync, every device's superblocks say how far the log was
 * durable and how many chunks its live groups hold, so that the next
 * start can tell damage to the newest chunk headers from a torn tail.
 * Written only when it is exactly true: the stop's own chunks (flagged
 * TC_CHUNK_CLEAN_STOP, the newest: only after the stop's origin flush
 * succeeded) were written, every chunk issued is
 * flushed, every device is in service (a failed one's segments and the
 * superblock marks of a failure are recovery's business, not this
 * count's), and the cache is neither abandoned nor failed.  Otherwise the superblocks keep
 * no record, and the next start trusts the chunk headers' own marks, as
 * after a crash.  A device whose record cannot be written is only
 * warned about: the record adds trust, its absence loses nothing.
 */
static bool stop_record_wanted(struct cache *c)
{
    if (c->offline || c->vol->cache_failed || c->abandoned ||
        c->lg.flushed_upto != c->lg.chunks_issued || !abandon_idle(c))
        return false;
    for (unsigned d = 0; d < c->ndevs; d++)
        if (c->devs[d].state != CDEV_OK || c->devs[d].dev->read_only)
            return false;
    return true;
}

/* The chunks recovery will find in live groups: those of every segment in
 * use whose group is at or after the tail the newest chunk records (the
 * stop's own chunks, the newest, recorded lg.tail_seq, which nothing moved
 * since: the cleaner is stopped).  Groups are reclaimed oldest first, so
 * a free segment's group is below the tail; a reused one's older chunks
 * are of another group, where recovery's walk stops. */
static uint64_t live_chunks(struct cache *c)
{
    uint64_t n = 0;
    for (uint32_t s = 0; s < c->sp.nsegs; s++) {
        const struct segment *sg = space_seg(&c->sp, s);
        if (sg->state != SEG_FREE && sg->seq >= c->lg.tail_seq && sg->seq > 0)
            n += sg->nchunks;
    }
    return n;
}

static void close_finish(struct close_ctx *x, int err);

static void stop_record_step(struct close_ctx *x, unsigned d);

static void stop_record_done(struct tc_dev_io *dio, int err)
{
    struct close_ctx *x = dio->priv;
    unsigned d = (unsigned)(dio - x->sb_dio);
    if (err) {
        tc_warn("%s: recording the clean stop in the superblock failed: %s; the next start "
                "trusts the log's own marks", x->c->devs[d].dev->name, strerror(-err));
        x->sb_failed = true;
    } else if (++x->sb_step[d] < 4) {
        stop_record_step(x, d);
        return;
    }
    free(x->sb_buf[d]);
    x->sb_buf[d] = NULL;
    if (--x->sb_pending > 0)
        return;
    /* Every device carries it: the set's stop record may say so
     * (tc_volume's close, io/originrec.c).  Not after an abandonment:
     * that log is never trusted again (seqrec_abandoned()). */
    if (!x->sb_failed && !x->c->abandoned)
        x->c->stop_chunk_recorded = x->c->lg.chunks_issued;
    close_finish(x, 0);
}

static void stop_record_step(struct close_ctx *x, unsigned d)
{
    struct tc_dev_io *dio = &x->sb_dio[d];
    memset(dio, 0, sizeof *dio);
    dio->cb = stop_record_done;
    dio->priv = x;
    if (x->sb_step[d] % 2) {
        dio->op = TC_DEV_FLUSH;
    } else {
        dio->op = TC_DEV_WRITE;
        dio->buf = x->sb_buf[d];
        dio->off = x->sb_step[d] == 0 ? 0 : TC_SB_SIZE;
        dio->len = TC_SB_SIZE;
    }
    dev_submit(x->c->devs[d].dev, dio);
}

/* Every device's copy A, flushed, then its copy B, flushed; devices side
 * by side.  The in-memory superblocks keep the record (so that any later
 * rewrite in this process carries it, as it stays true until the devices
 * are opened again). */
static void stop_record_write(struct close_ctx *x)
{
    struct cache *c = x->c;
    uint64_t chunks = live_chunks(c);
    /* Every origin write of this daemon has completed (the close waited
     * for them): from now on a change of a file origin's time, or of a
     * block device's write count, is someone else's write
     * (cache_origin_changed()). */
    struct tc_superblock at_stop;
    cache_origin_at_stop(c, &at_stop);
    tc_info("cache: clean stop recorded in the superblock%s: log durable up to chunk %llu, "
            "%llu chunks in live groups%s", c->ndevs == 1 ? "" : "s",
            (unsigned long long)c->lg.chunks_issued, (unsigned long long)chunks,
            x->ckpt_ok ? ", with its checkpoint" : "");
    x->sb_pending = c->ndevs;
    for (unsigned d = 0; d < c->ndevs; d++) {
        struct tc_superblock *sb = &c->devs[d].sb;
        sb->flags |= TC_SB_CLEAN_STOP;
        sb->stop_chunk_seq = c->lg.chunks_issued;
        sb->stop_tail_seq = c->lg.tail_seq;
        sb->stop_chunks = chunks;
        sb->stop_origin_mtime = at_stop.stop_origin_mtime;
        sb->stop_origin_written = at_stop.stop_origin_written;
        sb->stop_origin_diskseq = at_stop.stop_origin_diskseq;
        memcpy(sb->stop_origin_boot_id, at_stop.stop_origin_boot_id, 16);
        /* The next start reads the stop's own checkpoint: the running
         * ones' slots are emptied with this record (their segments are
         * free from the next start on). */
        memset(sb->run_ckpt, 0, sizeof sb->run_ckpt);
        if (x->ckpt_ok) {
            sb->flags |= TC_SB_CHECKPOINT;
            sb->ckpt_len = x->ckpt.len;
            sb->ckpt_crc = x->ckpt.crc;
            sb->ckpt_nsegs = x->ckpt.nsegs;
            memcpy(sb->ckpt_segs, x->ckpt.segs, x->ckpt.nsegs * sizeof x->ckpt.segs[0]);
        }
        x->sb_buf[d] = tc_alloc_aligned(TC_SB_SIZE);
        sb_encode(sb, x->sb_buf[d]);
        x->sb_step[d] = 0;
    }
    for (unsigned d = 0; d < c->ndevs; d++)
        stop_record_step(x, d);
}

/* The checkpoint is written and flushed (ckpt_write()): the record names
 * it.  Without it (no room, a write error) the record names none. */
static void stop_ckpt_written(void *arg, int err)
{
    struct close_ctx *x = arg;
    x->ckpt_ok = err == 0;
    if (err && err != -ENOSPC)
        tc_warn("cache: writing the checkpoint failed: %s; the next start scans the log",
                strerror(-err));
    stop_record_write(x);
}

/*
 * The stop's own drain.  The last device in service may fail at the
 * stop's own writes (its file system full: ENOSPC at the chunk that
 * seals the open segment), after writeback stopped: its dirty data --
 * writes acknowledged but not yet flushed among it, whose only copy is
 * the segment's RAM image -- is then recorded lost, to be drained
 * (failure.c), and nothing would drain it.  A clean stop may not lose
 * what a crash may: the data is in memory and the origin is there.  So
 * the close writes it back now, as the drain would while serving
 * (writeback_stop_drain(), reading the images the draining device keeps),
 * CLOSE_DRAIN_BATCH blocks at a time, in up to CLOSE_DRAIN_PASSES passes
 * over what is left (an origin that refuses a write for a moment).  Then
 * it flushes the origin and settles the clears (abandon_close_flushed():
 * the state file the close writes no longer lists the drained sectors
 * lost), and the drain is finished (cache_drain_check()).  What the
 * origin will not take stays recorded lost -- the sectors the device
 * still holds are written back by the next start, the others read EIO --
 * and the stop fails, saying how much and why.
 */
#define CLOSE_DRAIN_BATCH (8u * 64)
#define CLOSE_DRAIN_PASSES 3

static void close_drain_step(struct close_ctx *x);

static void close_drain_end(struct close_ctx *x, int err)
{
    struct cache *c = x->c;
    free(x->drain_blocks);
    x->drain_blocks = NULL;
    if (err == 0) {
        abandon_close_flushed(c, true);
        cache_drain_check(c);
    }
    uint64_t from = 0, bytes = 0, blocks = 0, first = UINT64_MAX, ob;
    while (cache_drain_blocks(c, &from, &ob, 1, &bytes) == 1) {
        blocks++;
        first = TC_MIN(first, ob);
    }
    if (blocks == 0 && err) {
        /* Written back, but not known durable there: the state file keeps
         * the drained sectors lost (EIO after the restart). */
        close_finish(x, err);
        return;
    }
    if (blocks == 0) {
        if (x->drain_jobs)
            tc_info("cache: stop: the dirty data of the cache device that failed at the stop is "
                    "written back to the origin (%s)", c->vol->origin->name);
        close_finish(x, x->sync_err);
        return;
    }
    char sz[32];
    int why = x->drain_err ? x->drain_err : err ? err : -EIO;
    tc_error("cache: stop: %s of dirty data (%llu blocks) on the cache device that failed at "
             "the stop could not be written to the origin %s (%s; the first at origin byte "
             "%llu): it stays recorded lost", tc_format_size(bytes, sz, sizeof sz),
             (unsigned long long)blocks, c->vol->origin->name, strerror(-why),
             (unsigned long long)(first * c->block_size));
    close_finish(x, x->sync_err ? x->sync_err : -EIO);
}

static void close_drain_flushed(struct tc_dev_io *dio, int err)
{
    struct close_ctx *x = container_of(dio, struct close_ctx, drain_dio);
    if (err)
        tc_error("%s: flush after the stop's drain failed: %s", x->c->vol->origin->name,
                 strerror(-err));
    close_drain_end(x, err);
}

static void close_drain_task(struct tc_task *t)
{
    close_drain_step(container_of(t, struct close_ctx, drain_task));
}

static void close_drain_done(void *arg, int err)
{
    struct close_ctx *x = arg;
    if (err && x->drain_err == 0)
        x->drain_err = err;
    /* After the job's own end (writeback.c, job_finish()). */
    reactor_defer(x->c->reactor, &x->drain_task);
}

static void close_drain_step(struct close_ctx *x)
{
    struct cache *c = x->c;
    unsigned n = cache_drain_blocks(c, &x->drain_cursor, x->drain_blocks, CLOSE_DRAIN_BATCH,
                                    NULL);
    if (n > 0) {
        x->drain_jobs = true;
        writeback_stop_drain(c, x->drain_blocks, n, close_drain_done, x);
        return;
    }
    /* A pass is through: another over what is left, if any. */
    uint64_t from = 0, ob;
    if (++x->drain_pass < CLOSE_DRAIN_PASSES && cache_drain_blocks(c, &from, &ob, 1, NULL)) {
        x->drain_cursor = 0;
        close_drain_step(x);
        return;
    }
    memset(&x->drain_dio, 0, sizeof x->drain_dio);
    cache_flush_origin(c, &x->drain_dio, close_drain_flushed);
}

static void close_drain(struct close_ctx *x, int err)
{
    struct cache *c = x->c;
    x->drained = true;
    x->sync_err = err;
    uint64_t from = 0, bytes = 0, ob;
    uint64_t n = 0;
    while (cache_drain_blocks(c, &from, &ob, 1, &bytes) == 1)
        n++;
    char sz[32];
    if (n)
        tc_info("cache: stop: a cache device failed at the stop's own writes: writing its %s "
                "of dirty data (%llu blocks) back to the origin %s",
                tc_format_size(bytes, sz, sizeof sz), (unsigned long long)n,
                c->vol->origin->name);
    x->drain_blocks = tc_xmalloc(CLOSE_DRAIN_BATCH * sizeof *x->drain_blocks);
    x->drain_task.fn = close_drain_task;
    close_drain_step(x);
}

static void closed_synced(struct log_waiter *w, int err);

static void closed_rewrites_wait(struct tc_timer *t)
{
    struct close_ctx *x = container_of(t, struct close_ctx, rw_wait);
    closed_synced(&x->w, x->rw_err);
}

static void closed_synced(struct log_waiter *w, int err)
{
    struct close_ctx *x = container_of(w, struct close_ctx, w);
    struct cache *c = x->c;
    if (c->rewrites_to_origin > 0) {
        /* A device failed at the stop's own writes, and the rewrites of
         * its blocks, finding no room, write their dirty data to the
         * origin (failure.c, rewrite_to_origin()): they end (clean, or
         * recorded lost) before anything is recorded. */
        x->rw_err = err;
        x->rw_wait.fn = closed_rewrites_wait;
        timer_arm(c->reactor, &x->rw_wait, 10ull * 1000 * 1000);
        return;
    }
    if (err == 0 && !x->marked && c->lg.flushed_upto < c->lg.chunks_issued && x->resyncs < 8) {
        /* Chunks were sealed while the sync ran (a write-back or read
         * completing late): sync them too, or the mark below would not
         * cover them. */
        x->resyncs++;
        log_sync(c, &x->w);
        return;
    }
    if (err == 0 && !x->marked) {
        /* One more header, written after that sync, records every chunk
         * before it as flushed: recovery then knows them durable, so a
         * damaged one among them is reported as damage, not taken for a
         * write torn by a crash (whose entries it would silently ignore).
         * It carries the clean-stop flag only if nothing is left unflushed
         * before it (see TC_CHUNK_CLEAN_STOP), on the origin either (the
         * stop's origin flush succeeded: close_origin_flushed()). */
        x->marked = true;
        uint64_t before = c->lg.chunks_issued;
        c->lg.clean_stop = c->lg.flushed_upto == c->lg.chunks_issued && !x->origin_unflushed;
        log_seal_all(c, true);
        x->stop_sealed = c->lg.clean_stop && c->lg.chunks_issued > before;
        c->lg.clean_stop = false;
        log_sync(c, &x->w);
        return;
    }
    /* Not when the origin was given up on (close_quiet()) or is away: a
     * drain would wait on it again. */
    if (c->draining && !x->drained && !c->vol->read_only && !x->aborted &&
        c->vol->origin->state == TC_DEV_ONLINE) {
        close_drain(x, err);        /* then close_finish() */
        return;
    }
    if (err == 0 && x->stop_sealed && stop_record_wanted(c)) {
        const char *why;
        if (ckpt_wanted(c, &why)) {
            ckpt_write(c, &x->ckpt, stop_ckpt_written, x);  /* then the record */
            return;
        }
        tc_info("cache: no checkpoint at this stop: %s; the next start scans the log", why);
        stop_record_write(x);       /* then close_finish() */
        return;
    }
    close_finish(x, err);
}

static void close_finish(struct close_ctx *x, int err)
{
    struct cache *c = x->c;
    if (err)
        tc_error("cache: final sync failed: %s", strerror(-err));
    if (c->stop_room_failed_writes) {
        tc_error("cache: stopped with %llu client writes failed (EIO) for want of room in "
                 "the log", (unsigned long long)c->stop_room_failed_writes);
        if (err == 0)
            err = -EIO;
    }
    if (c->stop_rewrite_origin_blocks) {
        char sz[32];
        tc_info("cache: stop: %s of dirty data in %llu blocks that a device failure left "
                "to rewrite written to the origin %s (rather than appended to the log again, "
                "which the stop's own records need the room of)",
                tc_format_size(c->stop_rewrite_origin_bytes, sz, sizeof sz),
                (unsigned long long)c->stop_rewrite_origin_blocks, c->vol->origin->name);
    }
    if (c->stop_rewrite_tombless_blocks) {
        tc_error("cache: stopped with %llu blocks recorded lost whose dirty data was written to "
                 "the origin: no room in the log for their tombstones, and the log may keep "
                 "older copies of them; they read EIO until written again",
                 (unsigned long long)c->stop_rewrite_tombless_blocks);
        if (err == 0)
            err = -EIO;
    }
    if (c->stop_rewrite_lost_bytes) {
        /* Recorded lost (EIO until written again), but acknowledged data
         * is gone: the exit status must say so, not only the log. */
        char why[160] = "";
        if (c->stop_rewrite_origin_err)
            snprintf(why, sizeof why, ", nor written to the origin %s (%s)",
                     c->vol->origin->name, strerror(-c->stop_rewrite_origin_err));
        tc_error("cache: stopped with %llu bytes of dirty data in %llu blocks lost: a device "
                 "failure's rewrites could not be made at the stop (no room in the log even in "
                 "the cleaner's reserve, or unreadable)%s; the first at origin byte %llu; those "
                 "sectors read EIO until written again",
                 (unsigned long long)c->stop_rewrite_lost_bytes,
                 (unsigned long long)c->stop_rewrite_lost_blocks, why,
                 (unsigned long long)c->stop_rewrite_lost_first);
        if (err == 0)
            err = -EIO;
    }
    if (c->stop_room_failed_writes == 0 && TC_DEBUG_ASSERTS_ON)
        audit_at_close(c);
    if (abandon_close(c) < 0 && err == 0)
        err = -EIO;
    seqrec_close(c);
    x->err = err;
    close_end(x);
}

/* The origin is flushed: every write-through version is on it, which the
 * last chunk records, so the next start has nothing to re-check. */
static void close_origin_flushed(struct tc_dev_io *dio, int err)
{
    struct close_ctx *x = container_of(dio, struct close_ctx, dio);
    struct cache *c = x->c;
    err = stable_flush_end(c, &x->sf, err);
    /* The origin may keep writes of this run unflushed: the stop is not
     * recorded as clean, so the next start treats the origin as after a
     * crash (origin_unflushed_at_start()) and its first flush flushes it.
     * Recorded clean, nothing would: the writes that went around the
     * cache are on the origin alone. */
    if (err) {
        x->origin_unflushed = true;
        tc_warn("cache: stop: the origin's flush failed (%s): the stop is not recorded as "
                "clean; the next start flushes the origin at its first flush", strerror(-err));
    }
    abandon_close_flushed(c, err == 0);
    log_seal_all(c, true);
    log_sync(c, &x->w);
}

/*
 * The last syncs of a clean stop wait until writeback and the cleaner have
 * finished what they started (they start nothing new once stopped): a job
 * in flight appends its CLEAN records, and the cleaner its copies and the
 * new tail, when it completes.  Appended after the stop's last sync, they
 * would sit in a chunk no later chunk records as durable (or in the stop's
 * own chunk, which recovery must excuse as maybe torn), so damage to them
 * could not be told from a torn write; and a job whose origin requests are
 * abandoned at exit leaves its blocks dirty although the origin may hold
 * them.  Polled: a stop is rare and the wait is bounded by the origin's
 * requests, which --origin-timeout bounds for a remote origin (a held
 * request fails after it; a connection that stops answering is fenced
 * after it, failing its writes: dev_nbd.c).  In case something else
 * hangs, after twice that time (60 s when 0) plus 5 s the origin is given
 * up on (dev_abort: its requests fail now, so the jobs finish and leave
 * their blocks dirty), the log says so, and the wait goes on for those
 * completions.  Jobs are never freed under a request the device still
 * holds: a device without abort (a local file, whose requests the kernel
 * ends) is waited for, and so are group fills (readpath.c: origin reads no
 * client waits for, whose completions append to the log) with them.  So
 * are read-ahead's own reads of the cache devices
 * (no client request waits for them once the clients are gone or held at
 * an attach's gate): their completions use the cache and their slots'
 * buffers, which an attach frees right after the close, and a read error
 * among them records a device failure in the log.
 */
static void close_flush_origin(struct close_ctx *x);

/* What a stop still waits for, for its log lines: "3 write-back jobs, the
 * cleaner and 2 group fills". */
static void close_waits(struct cache *c, char *buf, size_t len)
{
    char part[6][48];
    unsigned n = 0;
    unsigned jobs = writeback_jobs_in_flight(c);
    if (jobs)
        snprintf(part[n++], sizeof part[0], "%u write-back job%s", jobs, jobs == 1 ? "" : "s");
    else if (!writeback_idle(c))
        snprintf(part[n++], sizeof part[0], "write-back's commit (an origin flush)");
    if (!cleaner_idle(c))
        snprintf(part[n++], sizeof part[0], "the cleaner");
    if (!abandon_idle(c))
        snprintf(part[n++], sizeof part[0], "the abandonment of a failed cache");
    if (!ckpt_run_idle(c))
        snprintf(part[n++], sizeof part[0], "%s", ckpt_run_busy_with(c));
    if (c->group.inflight)
        snprintf(part[n++], sizeof part[0], "%u group fill%s (origin reads)", c->group.inflight,
                 c->group.inflight == 1 ? "" : "s");
    size_t at = 0;
    buf[0] = '\0';
    for (unsigned i = 0; i < n && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%s",
                               i == 0 ? "" : i + 1 == n ? " and " : ", ", part[i]);
}

static void close_quiet(struct tc_timer *t)
{
    struct close_ctx *x = container_of(t, struct close_ctx, quiet);
    struct cache *c = x->c;
    if (!writeback_idle(c) || !cleaner_idle(c) || !abandon_idle(c) || c->group.inflight > 0 ||
        !ckpt_run_idle(c)) {
        uint64_t now = tc_now_ns();
        uint64_t limit = c->vol->origin->hold_timeout_ns;
        limit = 2 * (limit ? limit : CLOSE_ORIGIN_DEFAULT_NS) + close_origin_slack_ns();
        if (now - x->quiet_since >= limit && !x->aborted) {
            x->aborted = true;
            char waits[320];
            close_waits(c, waits, sizeof waits);
            tc_error("cache: stop: gave up after %.1f s waiting for %s (the origin does not "
                     "answer): %s", (double)(now - x->quiet_since) / 1e9, waits,
                     !c->vol->origin->ops->abort
                         ? "this origin cannot be given up on; still waiting"
                     : writeback_jobs_in_flight(c)
                         ? "failing its requests; their blocks stay dirty and are written "
                           "back after the next start"
                         : "failing its requests");
            dev_abort(c->vol->origin);
        }
        if (now - x->quiet_logged >= 5000000000ull) {
            x->quiet_logged = now;
            char waits[320];
            close_waits(c, waits, sizeof waits);
            tc_info("cache: stop: waiting for %s to finish (%.1f s so far)", waits,
                    (double)(now - x->quiet_since) / 1e9);
        }
        timer_arm(c->reactor, &x->quiet, 10ull * 1000 * 1000);
        return;
    }
    unsigned ra = readahead_loading(c);
    if (ra > 0) {
        if (!x->ra_logged) {
            x->ra_logged = true;
            tc_info("cache: stop: waiting for %u read-ahead reads of the cache devices to end",
                    ra);
        }
        timer_arm(c->reactor, &x->quiet, 10ull * 1000 * 1000);
        return;
    }
    close_flush_origin(x);
}

static void close_flush_origin(struct close_ctx *x)
{
    struct cache *c = x->c;
    stable_flush_begin(c, &x->sf);
    cache_flush_origin(c, &x->dio, close_origin_flushed);
}

/*
 * A stop waits for the requests in flight (the NBD server's grace, then
 * it disconnects, but still waits for the engine to return each request),
 * and a client write waiting for room in the log returns only once the
 * cleaner frees some -- which it may never do: every segment holds dirty
 * data the origin refuses, or a group is held by data it cannot read.  So
 * STOP_ROOM_WAIT_NS after the stop began, every append still waiting for
 * room, and every later one, gets an error (cleaner_fail_waiters()): a
 * client write fails with EIO -- nothing of it was appended or sent to the
 * origin, its sectors keep their last acknowledged data -- and the close
 * reports the volume stopped with errors (exit status 1).  Long enough
 * for the cleaner to give up data it cannot read (READ_TRIES attempts,
 * some 16 s, cleaner.c), which lets such a write go on.  For tests only,
 * TIERCACHE_TEST_STOP_ROOM_WAIT_MS sets it, so that a test of a wait that
 * ends in errors does not sit through the 20 s.
 */
#define STOP_ROOM_WAIT_NS (20ull * 1000 * 1000 * 1000)

static uint64_t stop_room_wait_ns(void)
{
    const char *t = getenv("TIERCACHE_TEST_STOP_ROOM_WAIT_MS");
    if (t && *t)
        return (uint64_t)strtoull(t, NULL, 10) * 1000 * 1000;
    return STOP_ROOM_WAIT_NS;
}

static void stop_room_over(struct tc_timer *t)
{
    struct cache *c = container_of(t, struct cache, stop_room);
    unsigned n = 0;
    for (struct log_waiter *w = cleaner_waiters(c); w; w = w->next)
        n++;
    if (n)
        tc_error("cache: stop: %u appends waited %g s for room in the log that the cleaner "
                 "cannot free; the client writes among them fail with EIO", n,
                 (double)stop_room_wait_ns() / 1e9);
    cleaner_fail_waiters(c, -EIO);
}

void cache_stopping(struct cache *c)
{
    if (!c->stopping && c->reactor && c->cleaner) {
        c->stop_room.fn = stop_room_over;
        timer_arm(c->reactor, &c->stop_room, stop_room_wait_ns());
    }
    c->stopping = true;
    ckpt_run_stop(c);
    rewrites_stop_waiting(c);
}

void cache_close(struct cache *c, void (*done)(void *arg, int err), void *arg)
{
    struct close_ctx *x = tc_xcalloc(1, sizeof *x);
    x->c = c;
    x->done = done;
    x->arg = arg;
    x->w.fn = closed_synced;
    x->wait.fn = close_wait_fn;
    writeback_fini(c);
    cleaner_stop(c);
    cache_stopping(c);      /* no room comes from a stopped cleaner */
    x->quiet.fn = close_quiet;
    x->quiet_since = x->quiet_logged = tc_now_ns();
    close_quiet(&x->quiet);
}

void cache_free(struct cache *c)
{
    if (c == NULL)
        return;
    ckpt_run_fini(c);
    cleaner_fini(c);
    for (unsigned i = 0; i < c->ndevs; i++) {
        free(c->devs[i].drain);
        c->devs[i].drain = NULL;
    }
    free(c->tombless);
    c->tombless = NULL;
    free(c->moved);
    c->moved = NULL;
    free(c->mark_dropped);
    c->mark_dropped = NULL;
    abandon_free(c);
    free(c->ab.stop_lost_ob);
    free(c->ab.stop_lost_mask);
    c->ab.stop_lost_ob = NULL;
    c->ab.stop_lost_mask = NULL;
    /* The first call stops writeback (a cache that never ran, such as one
     * whose attach failed, was not stopped by cache_close), the second
     * frees it. */
    writeback_fini(c);
    writeback_fini(c);
    if (c->reactor) {
        timer_cancel(c->reactor, &c->state_timer);
        timer_cancel(c->reactor, &c->stop_room);
    }
    origin_window_free(c);
    seqrec_free(c);
    free(c->state_path);
    free(c->damage);
    readahead_fini(c);
    group_fini(c);
    streams_free(c->streams);
    c->streams = NULL;
    blocklocks_free(c->locks);
    c->locks = NULL;
    verify_free(c->verify);
    c->verify = NULL;
    log_fini(c);
    space_fini(&c->sp);
    map_fini(&c->map);
    if (c->policy) {
        policy_close(c->policy);
        free(c->policy);
    }
    for (unsigned d = 0; d < c->ndevs; d++)
        dev_close(c->devs[d].dev);
    claim_set_release(c->state_claim);
    claim_set_release(c->set_claim);
    free(c);
}

/* ---- switching policy ---- */

/*
 * The control socket's "set policy": the policy in use becomes the one
 * called name, from the next request on.  Called on the reactor thread
 * between policy calls (no policy call ever spans an asynchronous step).
 * The new policy starts knowing nothing: new state, and every block's hint
 * 0, as a block inserted by a policy without inserted() -- the old
 * policy's bits would mean something else to it.  Blocks stay cached; the
 * cleaner judges them by the new policy when it reaches them.  The
 * volume's configuration names the new policy, so that a later attach in
 * this process uses it too.
 */
int cache_switch_policy(struct cache *c, const char *name, char *err, size_t errlen)
{
    const struct policy_ops *ops = policy_find(name);
    if (ops == NULL) {
        snprintf(err, errlen, "policy '%s': no such policy (choose from %s)", name,
                 policy_names());
        return -EINVAL;
    }
    policy_switch(c->policy, ops);
    index_clear_hints(&c->map.idx);
    if (c->vol)
        c->vol->cfg.policy = ops->name;
    tc_info("cache: policy %s", ops->name);
    return 0;
}

/* ---- figures ---- */

const char *cdev_state_name(enum cdev_state s)
{
    return s == CDEV_OK ? "ok" : s == CDEV_DRAINING ? "draining" : s == CDEV_FAILING ? "failing"
                                                                                 : "missing";
}

/* The lost sectors as origin byte ranges, lowest first, the first
 * LOST_RANGES_LISTED of them ("lost_ranges", with "lost_ranges_total"):
 * what an operator must write again, or give up on by writing the origin's
 * older data there through the daemon, for reads of them to stop failing. */
#define LOST_RANGES_LISTED 32
struct lost_runs { struct cache *c; uint64_t (*r)[2]; size_t n, cap; };

static void lost_run_add(void *arg, uint64_t oblock, const struct tc_mask *persisted)
{
    struct lost_runs *x = arg;
    struct tc_mask m;
    if (!lost_get(&x->c->map.lost, oblock, &m))
        m = *persisted;
    uint64_t base = oblock * x->c->block_size;
    unsigned s, e;
    for (s = 0; mask_next_run(&m, x->c->spb, &s, &e); s = e) {
        if (x->n == x->cap) {
            x->cap = x->cap ? 2 * x->cap : 64;
            x->r = realloc(x->r, x->cap * sizeof *x->r);
            if (x->r == NULL)
                abort();
        }
        x->r[x->n][0] = base + (uint64_t)s * TC_SECTOR;
        x->r[x->n][1] = base + (uint64_t)e * TC_SECTOR;
        x->n++;
    }
}

/* Lost for good: the lost set's sectors less those still dirty -- the
 * dirty data of the last device in service, failed and still being
 * drained, is in the set until written back (lost.h), and a client's
 * write clears a sector from it. */
struct lost_count { struct cache *c; uint64_t sectors; };

static void lost_for_good_add(void *arg, uint64_t oblock, const struct tc_mask *persisted)
{
    (void)persisted;
    struct lost_count *x = arg;
    struct cache *c = x->c;
    struct tc_mask m, v, d;
    if (!lost_get(&c->map.lost, oblock, &m))
        return;
    uint32_t id = index_lookup(&c->map.idx, oblock);
    if (id != NIL) {
        ce_get_masks(&c->map.idx, id, &v, &d);
        mask_andnot(&m, &d);
    }
    x->sectors += mask_count(&m);
}

uint64_t cache_lost_for_good_sectors(struct cache *c)
{
    struct lost_count x = { .c = c };
    if (lost_sectors(&c->map.lost))
        lost_foreach(&c->map.lost, lost_for_good_add, &x);
    return x.sectors;
}

static int cmp_run(const void *a, const void *b)
{
    uint64_t x = ((const uint64_t *)a)[0], y = ((const uint64_t *)b)[0];
    return x < y ? -1 : x > y;
}

static void lost_ranges_json(struct cache *c, struct tc_json *j)
{
    struct lost_runs x = { .c = c };
    if (lost_sectors(&c->map.lost))
        lost_foreach(&c->map.lost, lost_run_add, &x);
    if (x.n)
        qsort(x.r, x.n, sizeof *x.r, cmp_run);
    size_t runs = 0;
    for (size_t i = 0; i < x.n; i++) {          /* merge neighbours in place */
        if (runs && x.r[runs - 1][1] == x.r[i][0])
            x.r[runs - 1][1] = x.r[i][1];
        else {
            x.r[runs][0] = x.r[i][0];
            x.r[runs][1] = x.r[i][1];
            runs++;
        }
    }
    json_uint(j, "lost_ranges_total", runs);
    json_begin_array(j, "lost_ranges");
    for (size_t i = 0; i < runs && i < LOST_RANGES_LISTED; i++) {
        char buf[96];
        snprintf(buf, sizeof buf, "origin bytes %llu..%llu", (unsigned long long)x.r[i][0],
                 (unsigned long long)(x.r[i][1] - 1));
        json_string(j, NULL, buf);
    }
    json_end_array(j);
    free(x.r);
}

void cache_status_json(struct cache *c, struct tc_json *j)
{
    struct cache_stats *s = &c->st;
    uint64_t capacity = (uint64_t)c->sp.nsegs * c->segment_size;
    uint64_t live = 0;
    for (uint32_t i = 0; i < c->sp.nsegs; i++)
        live += c->sp.segs[i].live;
    struct index_memory im;
    index_memory_parts(&c->map.idx, &im);
    uint64_t index_mem = im.entries + im.fragments + im.buckets + im.masks;
    uint64_t policy_mem = policy_memory(c->policy) + group_memory(c);
    /* The other memory that grows with the cache or the origin: the
     * segments' chunk tables and the dirty bitmap (one bit per origin
     * block). */
    uint64_t chunk_mem = 0;
    for (uint32_t i = 0; i < c->sp.nsegs; i++)
        chunk_mem += (uint64_t)c->sp.segs[i].chunks_cap * sizeof(struct chunk_ref);
    uint64_t dirty_mem = ((c->nblocks_origin + 63) / 64 + 1) * sizeof(uint64_t);
    /* The tables with an element per segment: the segments, the group
     * ring, the free stacks, the log's image table and the CRC store's. */
    uint64_t img_held, img_idle, img_table;
    log_image_memory(&c->lg, c->segment_size, &img_held, &img_idle, &img_table);
    uint64_t segtab_mem = (uint64_t)c->sp.nsegs * (sizeof(struct segment) + sizeof(uint32_t)) +
                          (uint64_t)c->sp.groups_cap * (sizeof(struct group) + c->ndevs * sizeof(uint32_t)) +
                          img_table +
                          verify_table_memory(c->verify);
    uint64_t total_mem = index_mem + policy_mem + chunk_mem + dirty_mem + segtab_mem;
    uint64_t dev_written = 0;
    for (unsigned d = 0; d < c->ndevs; d++)
        dev_written += c->devs[d].dev->stats.write_bytes;

    json_begin_object(j, "cache");
    json_string(j, "policy", c->policy->ops->name);
    policy_status(c->policy, j);
    json_uint(j, "size", capacity);
    json_uint(j, "used", live * TC_SECTOR);
    /* Live: data sectors index entries point to (not stale versions, not
     * chunk headers, not free segments), against the segments' size. */
    json_uint(j, "live_bytes", live * TC_SECTOR);
    json_double(j, "live_ratio", capacity ? (double)(live * TC_SECTOR) / (double)capacity : 0);
    json_uint(j, "block_size", c->block_size);
    json_uint(j, "segment_size", c->segment_size);
    json_uint(j, "segments", c->sp.nsegs);
    json_uint(j, "segments_free", c->sp.free_segs);
    /* The cleaner's reserve among them (devices[].segments_reserve: each
     * device's share). */
    json_uint(j, "segments_reserve", c->sp.reserve_segs);
    /* The free segments a running checkpoint's write takes (the size of
     * the last one), counted in the low mark where the log is large
     * enough (space_low_water()). */
    json_uint(j, "segments_checkpoint_room", c->sp.ckpt_room);
    /* The free-space marks: the cleaner starts below the low one and stops
     * at the high one (space_low_water(): of the devices in service). */
    json_uint(j, "segments_low_water", space_low_water(&c->sp));
    json_uint(j, "segments_high_water", space_high_water(&c->sp));
    json_uint(j, "groups", c->sp.ngroups);
    json_uint(j, "blocks_cached", c->map.idx.count);
    /* What the sizes of the policy, the ghost of group fills and the
     * index follow: the blocks the devices in service hold (size's after
     * a device failure, less the failed devices'). */
    json_uint(j, "blocks_in_service", cache_blocks_in_service(c));
    json_uint(j, "read_hits", s->read_hits);
    json_uint(j, "read_misses", s->read_misses);
    json_uint(j, "read_partial_hits", s->read_partial);
    uint64_t reads = s->read_hits + s->read_misses;
    json_double(j, "read_hit_ratio", reads ? (double)s->read_hits / (double)reads : 0);
    json_uint(j, "read_hit_bytes", s->read_hit_bytes);
    json_uint(j, "read_miss_bytes", s->read_miss_bytes);
    json_uint(j, "write_hits", s->write_hits);
    json_uint(j, "write_misses", s->write_misses);
    json_uint(j, "promotions", s->promotions);
    json_uint(j, "promotion_bytes", s->promotion_bytes);
    json_uint(j, "fills_dropped", s->fills_dropped);
    json_uint(j, "fills_dropped_room", s->fills_dropped_room);
    json_uint(j, "fills_block", s->fills_block);
    json_uint(j, "fills_sectors", s->fills_sectors);
    json_uint(j, "group_fills", s->group_fills);
    json_uint(j, "group_fills_read", s->group_fills_read);
    json_uint(j, "group_fills_skipped", s->group_fills_skipped);
    json_uint(j, "group_fills_merged", s->group_fills_merged);
    json_uint(j, "group_fills_ahead", s->group_fills_ahead);
    /* The fills the ghost of group fills remembers (a share of the
     * blocks in service). */
    json_uint(j, "group_fill_ghost_blocks", group_ghost_capacity(c));
    json_uint(j, "fills_under_way", s->fills_under_way);
    readpath_fill_status_json(c, j);
    json_uint(j, "fill_waits", s->fill_waits);
    json_uint(j, "fill_wait_hits", s->fill_wait_hits);
    json_uint(j, "not_admitted", s->not_admitted);
    json_uint(j, "demotions", s->demotions);
    json_uint(j, "reinsertions", s->reinsertions);
    json_uint(j, "reinserted_bytes", s->reinserted_bytes);
    json_uint(j, "dirty_copied", s->dirty_copies_by_cleaner);
    json_uint(j, "invalidations", s->invalidations);
    json_uint(j, "bypassed_sequential_bytes", s->bypassed_sequential);
    json_begin_object(j, "write_origin");
    json_uint(j, "writes", s->wo_writes);
    json_uint(j, "split_lock", s->wo_split_lock);
    json_uint(j, "split_writeback", s->wo_split_writeback);
    json_uint(j, "split_room", s->wo_split_room);
    json_uint(j, "split_merge_read", s->wo_split_merge);
    json_uint(j, "held_for_lock", s->wo_held_lock);
    json_end_object(j);
    json_uint(j, "write_lock_waits", s->write_lock_waits);
    json_micros_as_seconds(j, "write_lock_wait_seconds", s->write_lock_wait_ns / 1000);
    json_uint(j, "write_room_waits", s->write_room_waits);
    json_micros_as_seconds(j, "write_room_wait_seconds", s->write_room_wait_ns / 1000);
    json_micros_as_seconds(j, "write_room_stall_seconds", s->room_stall_ns / 1000);
    json_uint(j, "write_merge_reads", s->write_merge_reads);
    json_uint(j, "write_through_flush_waits", s->wt_flush_waits);
    json_micros_as_seconds(j, "write_through_flush_wait_seconds", s->wt_flush_wait_ns / 1000);
    json_uint(j, "cache_syncs", s->syncs);
    json_uint(j, "split_appends", s->split_appends);
    json_uint(j, "segments_written", s->segments_written);
    json_uint(j, "chunks_written", s->chunks_written);
    json_uint(j, "cache_write_bytes", dev_written);
    json_double(j, "average_write_bytes",
                s->chunks_written ? (double)s->chunk_bytes_written / (double)s->chunks_written : 0);
    json_uint(j, "admitted_bytes", s->admitted_bytes);
    json_double(j, "write_amplification",
                s->admitted_bytes ? (double)dev_written / (double)s->admitted_bytes : 0);
    json_uint(j, "groups_retired", s->groups_retired);
    json_begin_object(j, "write_budget");
    json_uint(j, "rate_bytes_per_second", c->budget.rate);
    json_uint(j, "burst_bytes", c->budget.burst);
    json_uint(j, "minburst_bytes", c->budget.minburst);
    json_double(j, "tokens_bytes", c->budget.rate ? c->budget.tokens : 0);
    json_uint(j, "spent_bytes", c->budget.spent);
    json_uint(j, "budget_skipped", c->budget.skipped);
    json_end_object(j);
    json_uint(j, "origin_reads", c->vol->origin->stats.reads);
    json_uint(j, "origin_read_bytes", c->vol->origin->stats.read_bytes);
    json_uint(j, "origin_write_bytes", c->vol->origin->stats.write_bytes);
    json_uint(j, "dirty_blocks", c->map.dirty_blocks);
    json_uint(j, "dirty_bytes", c->map.dirty_sectors * TC_SECTOR);
    json_uint(j, "checksum_errors", s->checksum_errors);
    json_uint(j, "cache_read_errors", s->cache_read_errors);
    json_uint(j, "merge_read_failures", s->merge_read_failures);
    json_uint(j, "cache_write_errors", s->cache_write_errors);
    json_uint(j, "lost_dirty_bytes", s->lost_dirty_bytes);
    uint64_t left = 0;
    for (unsigned i = 0; i < c->ndevs; i++)
        left += c->devs[i].state == CDEV_DRAINING ? c->devs[i].drain_left_bytes : 0;
    json_uint(j, "drain_left_bytes", left);
    json_uint(j, "drained_bytes", c->drained_bytes);
    /* The proofs of the drain's sectors whose CRCs were not in memory
     * (failure.c, "Proofs read back"). */
    json_uint(j, "drain_proof_header_reads", c->ab.proof_reads);
    json_uint(j, "drain_proof_header_reads_pending", c->ab.proof_reads_pending);
    json_uint(j, "drain_proof_header_bytes", c->ab.proof_read_sectors * TC_SECTOR);
    json_uint(j, "drain_waiting_requests", cache_drain_waiting(c));
    json_uint(j, "rescues_pending", c->rescues_pending);
    json_uint(j, "rescued_bytes", c->rescued_bytes);
    json_uint(j, "rescue_lost_bytes", c->rescue_lost_bytes);
    json_uint(j, "rescue_writebacks", c->rescue_writebacks);
    json_uint(j, "rescue_origin_refusals", c->rescue_origin_refusals);
    json_uint(j, "rescued_to_origin_bytes", c->rescued_to_origin_bytes);
    json_uint(j, "in_doubt_writes", s->in_doubt_writes);
    json_uint(j, "origin_cut_writes", s->origin_cut_writes);
    json_uint(j, "lost_sectors_unreadable", lost_sectors(&c->map.lost));
    json_uint(j, "lost_bytes", lost_sectors(&c->map.lost) * TC_SECTOR);
    lost_ranges_json(c, j);
    abandon_status_json(c, j);
    seqrec_status_json(c, j);
    json_uint(j, "device_failure_rewrites_pending", c->rewrites_unappended);
    json_uint(j, "device_failure_rewrites", c->rewrites_appended);
    json_uint(j, "device_failure_rewrite_read_retries", c->rewrite_read_retries);
    json_uint(j, "index_memory_bytes", index_mem);
    json_uint(j, "policy_memory_bytes", policy_mem);
    /* Per block the cache can hold (the devices in service), and per
     * block cached now: the index grows with the blocks cached, the
     * policy's history and the chunk tables are sized to the cache, the
     * dirty bitmap to the origin. */
    uint64_t cap_blocks = cache_blocks_in_service(c);
    json_double(j, "memory_per_block_bytes",
                cap_blocks ? (double)total_mem / (double)cap_blocks : 0);
    json_double(j, "memory_per_cached_block_bytes",
                c->map.idx.count ? (double)total_mem / (double)c->map.idx.count : 0);
    json_begin_object(j, "memory");
    json_uint(j, "entries_bytes", im.entries);
    json_uint(j, "fragment_records_bytes", im.fragments);
    json_uint(j, "hash_buckets_bytes", im.buckets);
    json_uint(j, "masks_bytes", im.masks);
    json_uint(j, "policy_bytes", policy_mem);
    json_uint(j, "chunk_tables_bytes", chunk_mem);
    json_uint(j, "dirty_bitmap_bytes", dirty_mem);
    json_uint(j, "segment_tables_bytes", segtab_mem);
    json_uint(j, "total_bytes", total_mem);
    json_uint(j, "fragment_records", c->map.idx.frecs);
    /* Not in the figures above, which are the state kept per block: two
     * bounded caches.  The checksums of chunks read or written lately
     * (up to a fixed budget; none are loaded at start), and the RAM
     * images of the segments being written and of at most
     * LOG_IMAGE_POOL idle spares. */
    json_uint(j, "checksum_cache_bytes", verify_memory(c->verify));
    json_uint(j, "checksum_cache_budget_bytes", VERIFY_BUDGET);
    json_uint(j, "segment_images_bytes", img_held);
    json_uint(j, "segment_images_idle_bytes", img_idle);
    json_uint(j, "segment_images_idle_max_bytes",
              (uint64_t)LOG_IMAGE_POOL * tc_round_up(c->segment_size, 4096));
    json_end_object(j);
    json_micros_as_seconds(j, "recovery_seconds", c->recovery_ns / 1000);
    json_uint(j, "recovered_entries", s->recovered_entries);
    json_uint(j, "recovered_dirty_blocks", s->recovered_dirty_blocks);
    json_uint(j, "recovered_dirty_bytes", s->recovered_dirty_sectors * TC_SECTOR);
    json_uint(j, "recovery_damage_ignored", s->recovery_damage_ignored);
    json_string(j, "last_stop", s->last_stop ? s->last_stop : "none");
    json_string(j, "recovered_from", s->recovered_from ? s->recovered_from : "scan");
    json_uint(j, "recovery_read_bytes", s->recovery_read_bytes);
    json_begin_object(j, "origin_check");
    json_uint(j, "blocks", s->origin_check_blocks);
    json_uint(j, "differ", s->origin_check_differ);
    json_uint(j, "unread", s->origin_check_unread);
    json_uint(j, "partly_dirty_differ", s->origin_check_partly_dirty_differ);
    json_uint(j, "origin_read_bytes", s->origin_check_read_bytes);
    json_end_object(j);
    ckpt_run_status_json(c, j);
    writeback_status_json(c, j);
    cleaner_status_json(c, j);
    log_status_json(&c->lg, j);
    readahead_status_json(c, j);
    json_begin_array(j, "devices");
    for (unsigned d = 0; d < c->ndevs; d++) {
        struct cache_dev *cd = &c->devs[d];
        struct tc_dev_stats *ds = &cd->dev->stats;
        json_begin_object(j, NULL);
        json_string(j, "path", cd->dev->name);
        json_uint(j, "index", d);
        json_string(j, "state", cdev_state_name(cd->state));
        json_uint(j, "size", (uint64_t)cd->nsegs * c->segment_size);
        json_uint(j, "segments", cd->nsegs);
        json_uint(j, "segments_free", c->sp.stacks[d].n);
        /* Of those, its share of the cleaner's reserve (space_dev_reserve()):
         * groups are opened from the other devices first. */
        json_uint(j, "segments_reserve",
                  cd->state == CDEV_OK ? TC_MIN(c->sp.stacks[d].n, space_dev_reserve(&c->sp)) : 0);
        json_uint(j, "reads", ds->reads);
        json_uint(j, "read_bytes", ds->read_bytes);
        json_uint(j, "writes", ds->writes);
        json_uint(j, "write_bytes", ds->write_bytes);
        json_double(j, "average_write_bytes",
                    ds->writes ? (double)ds->write_bytes / (double)ds->writes : 0);
        json_uint(j, "errors", ds->read_errors + ds->write_errors + ds->other_errors);
        json_uint(j, "inflight", ds->inflight);
        json_uint(j, "max_io", cd->dev->max_io);
        json_end_object(j);
    }
    json_end_array(j);
    json_end_object(j);
}
