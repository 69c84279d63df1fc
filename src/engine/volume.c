/*
 * A volume: opening and closing it, the request entry point, and its
 * figures.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/abandon.h"
#include "engine/cache.h"
#include "engine/engine.h"
#include "engine/failure.h"
#include "engine/lostlog.h"
#include "engine/writeback.h"
#include "io/claim.h"
#include "io/originrec.h"
#include "util/assert.h"
#include "util/json.h"
#include "util/log.h"
#include "util/misc.h"
#include "util/parse.h"

static const char *mode_names[] = { "writethrough", "writeback", "writearound", "passthrough" };

const char *tc_mode_name(enum tc_mode mode)
{
    return (unsigned)mode < TC_ARRAY_SIZE(mode_names) ? mode_names[mode] : "?";
}

int tc_mode_parse(const char *name, enum tc_mode *mode)
{
    for (unsigned i = 0; i < TC_ARRAY_SIZE(mode_names); i++) {
        if (strcmp(name, mode_names[i]) == 0) {
            *mode = (enum tc_mode)i;
            return 0;
        }
    }
    return -1;
}

void tc_volume_config_defaults(struct tc_volume_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->mode = TC_MODE_WRITETHROUGH;
    cfg->policy = "default";
    cfg->sequential_cutoff = 4u << 20;
    cfg->readahead = 8u << 20;
    cfg->dirty_target = 0.10;
    cfg->dirty_high = 0.50;
    cfg->dirty_copies = 1;
    cfg->origin_timeout_ns = 60ull * 1000000000ull;
    cfg->origin_check_blocks = 32;
}

static int origin_first_write(struct tc_dev *d, void *ctx);

/* Does the origin keep records of its cache set (io/originrec.c)?  Not
 * a memory origin, nor a data-free volume (replay): they live and die
 * with the process. */
static bool origin_records(const struct tc_volume_config *cfg)
{
    return !cfg->data_free && !dev_is_mem(cfg->origin);
}

/* An origin whose record names a cache set other than the one given, set
 * (or any, without one), is refused before anything is opened or
 * changed: that set may hold acknowledged writes the origin lacks; so is
 * one whose records cannot be read.  *had_set: a record of set was there
 * already. */
static int origin_record_check(const struct tc_volume_config *cfg, const struct tc_dev *origin,
                               const uint8_t *set, bool *had_set, char *err, size_t errlen)
{
    struct originrec rec;
    *had_set = false;
    if (originrec_read(origin, set, &rec, err, errlen) < 0)
        return -1;
    if (rec.found) {
        originrec_refusal(&rec, cfg->origin, set ? "serving it with another cache set"
                                                 : "serving it without that cache",
                          err, errlen);
        return -1;
    }
    if (set) {
        /* Every record found names set (the read above passed them). */
        if (originrec_read(origin, NULL, &rec, err, errlen) < 0)
            return -1;
        *had_set = rec.found;
    }
    return 0;
}

/* ---- the paths' check ---- */

#define PATH_CHECK_NS 1000000000ull     /* once a second, and at each FLUSH */

/* A file origin or a cache file whose path no longer names the file the
 * daemon has open (removed, or another file renamed over it: the
 * operator's `mv backup.img origin.img`, `cp c.img x; mv x c.img`, `rm`).
 * What is written to it from then on lives only in the descriptor's inode
 * (gone at exit, or at least not under the name the next start opens).
 * Likewise a block device (a disk, a loop device) whose path -- the node,
 * or a symlink such as /dev/disk/by-id/... -- names another device number
 * or none: what is written to it stays on the device open, but the next
 * start opens what the path names then (dev_path_lost()).
 * Acted on at once:
 *  - a cache device is failed as a device that failed (failure.c): with
 *    other devices its dirty data is copied onto them, the last one drains
 *    it to the origin, read through the descriptor, which still reads; a
 *    FLUSH is answered only once what it covers is durable there.  No
 *    dirty data is kept only in that file from then on.
 *  - the origin refuses every write, trim, write-zeroes and flush (EIO,
 *    io/dev.h refuse_writes; client requests in tc_submit()): they could
 *    not be made durable under its name.  Reads go on from the
 *    descriptor (what the clients last wrote there, or the cache's), the
 *    cache's dirty data stays dirty (its write-backs are refused too), and
 *    the next start refuses the file or device now at the path: its
 *    identity is not the one the cache's superblock records (cache.c).
 *    A file origin truncated below its size while served is treated so
 *    too (dev_file_shrunk()): what it held past its new end -- flushed
 *    writes among it -- is gone, writes there would only extend it again
 *    with holes, and the next start refuses its size.
 * NBD exports are not looked at: a device that vanishes fails its I/O,
 * which the failure paths see. */

/* Whether device d lost its name (why says how).  A file: at once
 * (dev_file_unlinked()).  A block device whose path names another device
 * number (or no block device): at once.  One whose path names nothing:
 * only when a look at least PATH_GONE_CONFIRM_NS after the first that
 * found it so finds it so again -- udev making a node or a symlink again
 * leaves the path empty for a moment, and the device's data is not at
 * risk meanwhile (unlike a file's, it outlives the descriptor).  A node
 * made again with the same device number is the same device
 * (dev_block_path() compares st_rdev, not the inode). */
#define PATH_GONE_CONFIRM_NS (PATH_CHECK_NS / 2)
static bool dev_path_lost(struct tc_dev *d, const char *role, char *why, size_t len)
{
    if (dev_file_unlinked(d, why, len))
        return true;
    switch (dev_block_path(d, why, len)) {
    case DEV_PATH_SAME:
        if (d->path_gone_ns)
            tc_info("%s %s: its path names it again", role, d->name);
        d->path_gone_ns = 0;
        return false;
    case DEV_PATH_OTHER:
        return true;
    case DEV_PATH_GONE:
        break;
    }
    uint64_t now = tc_now_ns();
    if (d->path_gone_ns == 0) {
        d->path_gone_ns = now ? now : 1;
        tc_warn("%s %s; looked at again within a second or two (a node being made again "
                "comes back)", role, why);
        return false;
    }
    return now - d->path_gone_ns >= PATH_GONE_CONFIRM_NS;
}

static void paths_check(struct tc_volume *vol)
{
    char why[1024];
    if (!vol->origin_gone && !vol->read_only &&
        (dev_path_lost(vol->origin, "origin", why, sizeof why) ||
         dev_file_shrunk(vol->origin, why, sizeof why))) {
        const char *what = vol->origin->is_block_device ? "device" : "file";
        vol->origin_gone = true;
        vol->origin->refuse_writes = true;
        snprintf(vol->origin_gone_why, sizeof vol->origin_gone_why, "%s", why);
        tc_error("origin %s while this daemon served it: every write and flush fails with EIO "
                 "from now on (it could not be made durable under that name); reads go on from "
                 "the %s this daemon has open, and the cache's dirty data stays in the "
                 "cache", why, what);
    }
    struct cache *c = vol->cache;
    if (c == NULL || vol->detached || vol->cache_failed || vol->gate || vol->attaching ||
        vol->closing || c->stopping)
        return;         /* a stop looks again (tc_volume_cache_unlinked()) */
    for (unsigned d = 0; d < c->ndevs; d++) {
        if (c->devs[d].state != CDEV_OK || c->devs[d].dev == NULL ||
            !dev_path_lost(c->devs[d].dev, "cache device", why, sizeof why))
            continue;
        if (vol->cache_gone_why[0] == '\0')
            snprintf(vol->cache_gone_why, sizeof vol->cache_gone_why, "%s", why);
        if (c->devs[d].dev->is_block_device)
            tc_error("cache device %s while this daemon served it: the next start would not "
                     "find its log under that name, so the device is failed now and its dirty "
                     "data written back (or copied to the other devices) at once, read through "
                     "the device this daemon has open", why);
        else
            tc_error("cache device %s while this daemon served it: its log goes when the "
                     "daemon exits, so the device is failed now and its dirty data written "
                     "back (or copied to the other devices) at once, read through the file "
                     "this daemon has open", why);
        cache_device_fail(c, d, why);
    }
}

static void path_timer_fn(struct tc_timer *t)
{
    struct tc_volume *vol = container_of(t, struct tc_volume, path_timer);
    if (vol->closing)
        return;
    paths_check(vol);
    timer_arm(vol->reactor, &vol->path_timer, PATH_CHECK_NS);
}

/* Whether any of the volume's devices is a file or a local block device
 * (the paths' check has something to look at). */
static bool watched(const struct tc_dev *d)
{
    uint64_t ns;
    unsigned maj, min;
    return d && (dev_file_mtime(d, &ns) || dev_block_number(d, &maj, &min));
}

static bool has_watched(const struct tc_volume *vol)
{
    if (watched(vol->origin))
        return true;
    for (unsigned d = 0; vol->cache && d < vol->cache->ndevs; d++)
        if (watched(vol->cache->devs[d].dev))
            return true;
    return false;
}

void volume_paths_watch(struct tc_volume *vol)
{
    if (!vol->cfg.data_free && !vol->closing && !vol->path_timer.armed && has_watched(vol))
        timer_arm(vol->reactor, &vol->path_timer, PATH_CHECK_NS);
}

struct tc_volume *tc_volume_open(struct tc_reactor *r, const struct tc_volume_config *cfg,
                                 char *err, size_t errlen)
{
    /* Every path checked with stat() before anything is opened: no FIFO
     * blocks an open, and the same data given twice is named as such
     * rather than found busy by our own claim (io/claim.c). */
    if (claim_check_paths(cfg->origin, cfg->caches, err, errlen) < 0)
        return NULL;
    if (cfg->data_free) {
        /* Data that are not kept may live only where nothing else reads them. */
        bool mem = dev_is_mem(cfg->origin);
        for (unsigned i = 0; cfg->caches && cfg->caches[i]; i++)
            mem = mem && dev_is_mem(cfg->caches[i]);
        if (!mem) {
            snprintf(err, errlen, "data-free volumes live on memory devices only");
            return NULL;
        }
    }
    struct tc_dev *origin = dev_open_as(r, cfg->origin, "origin", cfg->read_only, err, errlen);
    if (origin == NULL)
        return NULL;
    uint64_t size = tc_round_down(origin->size, TC_SECTOR);
    if (size == 0) {
        snprintf(err, errlen, "%s: origin is smaller than 4096 bytes (%llu bytes)",
                 cfg->origin, (unsigned long long)origin->size);
        dev_close(origin);
        return NULL;
    }
    if (size != origin->size)
        tc_warn("%s: origin size %llu is not a multiple of 4096; the last %llu bytes are not "
                "exported", cfg->origin, (unsigned long long)origin->size,
                (unsigned long long)(origin->size - size));
    if (origin->logical_block > TC_SECTOR) {
        snprintf(err, errlen, "%s: logical block size %u is larger than 4096", cfg->origin,
                 origin->logical_block);
        dev_close(origin);
        return NULL;
    }
    /* A cache device as the origin: swapped arguments with cache devices;
     * without, its clients would overwrite the log (the dirty data of a
     * stopped writeback cache with it).  Read-only, nothing is written. */
    bool cached = cfg->caches && cfg->caches[0];
    if ((cached || !cfg->read_only) &&
        claim_origin_not_cache(cfg->origin, cached, err, errlen) < 0) {
        dev_close(origin);
        return NULL;
    }
    /* The set on the cache devices, as the record names it (none there:
     * cache_open() says why, and the origin is not checked). */
    uint8_t set[16];
    bool have_set = cached && claim_device_set(cfg->caches[0], set);
    bool records = origin_records(cfg) && (have_set || !cached);
    bool had_set = false;
    if (records && origin_record_check(cfg, origin, have_set ? set : NULL, &had_set, err,
                                       errlen) < 0) {
        dev_close(origin);
        return NULL;
    }
    /* Not beside another daemon that may write the origin (io/claim.c,
     * claim_origin_lock()): a serve with a cache holds it alone, one without
     * a cache that may write shares it.  An NBD export is claimed by no
     * one else: a set started beside a serve without a cache of the same
     * export would hold clean copies that serve's writes make older. */
    struct claim_set *claim = NULL;
    if (records && claim_set_enabled() && (cached || !cfg->read_only) &&
        (claim = claim_origin_lock(dev_record_key(origin), cfg->origin, cached, err, errlen)) ==
            NULL) {
        dev_close(origin);
        return NULL;
    }
    /* The record of the set, before the cache is opened (which changes it:
     * its start clears the clean-stop record) and anything served: a kill
     * from now on leaves it.  Not written, the start is refused -- that
     * cache's writes would go unguarded (io/originrec.c).  A record of the
     * set already there guards it as it is: it is written again (with
     * this start's names of the devices) only once the set opened -- a
     * start refused (a device missing, one of another set) must not leave
     * the record naming the devices it was given. */
    if (records && have_set && !had_set &&
        originrec_write(origin, cfg->origin, set, cfg->caches, err, errlen) < 0) {
        dev_close(origin);
        claim_set_release(claim);
        return NULL;
    }
    origin->hold_timeout_ns = cfg->origin_timeout_ns;
    struct tc_volume *vol = tc_xcalloc(1, sizeof *vol);
    vol->reactor = r;
    vol->held_tail = &vol->held_head;     /* kept so from now on */
    vol->cfg = *cfg;
    vol->origin = origin;
    vol->size = size;
    vol->read_only = cfg->read_only;
    vol->mode = cfg->caches && cfg->caches[0] ? cfg->mode : TC_MODE_PASSTHROUGH;
    vol->opened_ns = tc_now_ns();
    vol->origin_claim = claim;
    /* The origin's last writer (io/originrec.c): this run, from its first
     * write, trim or write-zeroes on (a run that only reads changes
     * nothing), so that a set that stopped cleanly before knows at its next
     * start that the origin was written since (originstop.c).  From before
     * the cache is opened: its start may write the origin (a drain resumed
     * from the log, abandon.c). */
    if (records && !cfg->read_only) {
        vol->writer_set_known = have_set;
        if (have_set)
            memcpy(vol->writer_set, set, 16);
        origin->first_write = origin_first_write;
        origin->first_write_ctx = vol;
    }
    if (cfg->caches && cfg->caches[0]) {
        /* Recorded above: the start's own records of the set's progress
         * (seqrec.c, its stop record) go with it from the first. */
        vol->origin_recorded = records && have_set;
        if (cache_open(vol, cfg->caches, err, errlen) < 0) {
            /* Nothing of that set was served: a record only this start
             * wrote goes again. */
            if (records && have_set && !had_set)
                originrec_remove(origin, set);
            dev_close(origin);
            claim_set_release(claim);
            free(vol);
            return NULL;
        }
        vol->origin_recorded = records;
        if (records && (had_set || memcmp(set, vol->cache->set_uuid, 16) != 0)) {
            /* The set's record there before, now with this start's names
             * of its devices; or the set was formatted again between the
             * look and the open: the set opened is recorded (the other's
             * record stays).  Not written, the old record still names the
             * set (a warning: only its names of the devices are old). */
            char why[1024];
            bool written = originrec_write(origin, cfg->origin, vol->cache->set_uuid,
                                           cfg->caches, why, sizeof why) == 0;
            if (!written)
                tc_warn("%s", why);
            if (memcmp(set, vol->cache->set_uuid, 16) != 0)
                vol->origin_recorded = written;
        }
    }
    vol->path_timer.fn = path_timer_fn;
    volume_paths_watch(vol);
    char sz[32];
    tc_info("origin %s: %s, %s%s", cfg->origin, tc_format_size(size, sz, sizeof sz),
            origin->is_block_device ? "block device" : "file",
            origin->direct_io ? "" : " (buffered I/O)");
    return vol;
}

uint64_t tc_volume_size(const struct tc_volume *vol) { return vol->size; }
bool tc_volume_read_only(const struct tc_volume *vol) { return vol->read_only; }
bool tc_volume_rotational(const struct tc_volume *vol) { return vol->origin->rotational; }
bool tc_volume_can_fast_zero(const struct tc_volume *vol) { return vol->origin->can_zero; }

struct ereq *ereq_new(struct tc_volume *vol)
{
    struct ereq *e = tc_obj_get(sizeof *e);
    e->vol = vol;
    e->start_ns = tc_now_ns();
    vol->inflight++;
    return e;
}

void ereq_free(struct ereq *e)
{
    struct tc_volume *vol = e->vol;
    vol->inflight--;
    if (e->via_cache && --vol->cache_inflight == 0) {
        if (vol->gate)
            reactor_defer(vol->reactor, &vol->gate_task);
        if (vol->hold_quiet)
            reactor_defer(vol->reactor, &vol->hold_task);
    }
    tc_obj_put(e, sizeof *e);
}

void engine_dispatch(struct ereq *e)
{
    struct tc_volume *vol = e->vol;
    /* Invariant 2: below align.c, requests are whole sectors. */
    TC_ASSERT_ALWAYS(((e->off | e->len) & (TC_SECTOR - 1)) == 0);
    TC_ASSERT_ALWAYS((e->op != TC_OP_READ && e->op != TC_OP_WRITE) ||
                     ((uintptr_t)e->buf & (TC_SECTOR - 1)) == 0);
    if (vol->gate || vol->holding) {
        /* Detaching: wait until the cache is out of the way; or a
         * running checkpoint's barrier (volume_hold()). */
        e->held_next = NULL;
        *vol->held_tail = e;
        vol->held_tail = &e->held_next;
        return;
    }
    if (vol->fenced) {
        e->err = -EIO;
        e->complete(e);
        return;
    }
    if (vol->cache && !vol->detached && !vol->cache_failed) {
        e->via_cache = true;
        vol->cache_inflight++;
        cache_submit(e);
    } else if (vol->cache) {
        /* Failed or detached: the origin, but never in place of lost data.
         * Counted with the cache path: lost_passthrough() uses the cache
         * (its lost set, its write-back waits), so an attach, which
         * replaces the cache, waits for these too. */
        e->via_cache = true;
        vol->cache_inflight++;
        lost_passthrough(e);
    } else {
        passthrough_submit(e);
    }
}

static bool is_write_type(enum tc_op op)
{
    return op == TC_OP_WRITE || op == TC_OP_TRIM || op == TC_OP_WRITE_ZEROES;
}

static void user_complete(struct ereq *e)
{
    struct tc_volume *vol = e->vol;
    struct tc_request *req = e->owner;
    if (e->err) {
        vol->stats.errors++;
    } else if (req->op == TC_OP_READ) {
        vol->stats.read_bytes += req->length;
    } else if (req->op == TC_OP_WRITE) {
        vol->stats.write_bytes += req->length;
    }
    if (req->op == TC_OP_BLOCK_STATUS)
        req->nr_extents = e->nr_extents;
    if (req->op == TC_OP_READ)
        req->buf = e->buf;      /* TC_REQ_POOL_BUF: read-ahead may have swapped it */
    int err = e->err;
    ereq_free(e);
    if (devfail_hold_ack(vol->cache ? &vol->cache->ab : NULL, req, err))
        return;     /* a device failure is being recorded (abandon.c) */
    req->done(req, err);
}

static void locked_complete(struct ereq *e)
{
    rl_release(&e->vol->locks, &e->lock);
    e->complete = e->after_unlock;
    e->complete(e);
}

static void lock_granted(struct rl_entry *l)
{
    engine_dispatch(container_of(l, struct ereq, lock));
}

void engine_submit_locked(struct ereq *e)
{
    if (!is_write_type(e->op)) {
        engine_dispatch(e);
        return;
    }
    /* Writes: shared, only a read-modify-write of the same sectors waits.
     * Trims and write-zeroes: exclusive.  Their origin operation runs
     * after their cached blocks are dealt with, under no block lock (a
     * range may span millions of blocks), so a write overlapping one in
     * flight could cache its version while the origin applied the two in
     * the other order: the cache would then serve the write and the
     * origin hold zeroes (or the reverse), and reads would change once
     * the block is dropped or the cache detached.  Overlapping in flight
     * together, either may win; this makes the cache and the origin agree
     * on which. */
    e->after_unlock = e->complete;
    e->complete = locked_complete;
    e->lock.start = e->off;
    e->lock.end = e->off + e->len;
    e->lock.exclusive = e->op != TC_OP_WRITE;
    e->lock.granted_cb = lock_granted;
    if (rl_acquire(&e->vol->locks, &e->lock))
        engine_dispatch(e);
}

/* Invariant 1: the caller's part of the contract (tiercache.h). */
static bool request_ok(const struct tc_volume *vol, const struct tc_request *req)
{
    if ((unsigned)req->op > TC_OP_BLOCK_STATUS)
        return false;
    if (req->op == TC_OP_FLUSH)
        return true;
    if (req->offset > vol->size || req->length > vol->size - req->offset)
        return false;
    if ((req->op == TC_OP_READ || req->op == TC_OP_WRITE) && req->length && req->buf == NULL)
        return false;
    return !(is_write_type(req->op) && vol->read_only);
}

void tc_submit(struct tc_volume *vol, struct tc_request *req)
{
    TC_ASSERT_ALWAYS(request_ok(vol, req));
    if (req->op < TC_ARRAY_SIZE(vol->stats.requests))
        vol->stats.requests[req->op]++;
    /* A FLUSH covers only what is durable under the devices' names: the
     * paths are looked at first (a cache file found gone is failed now, and
     * this flush waits for its drain). */
    if (req->op == TC_OP_FLUSH && vol->path_timer.armed)
        paths_check(vol);
    if (vol->origin_gone && (is_write_type(req->op) || req->op == TC_OP_FLUSH)) {
        vol->stats.errors++;
        req->done(req, -EIO);
        return;
    }
    if (align_needed(req)) {
        align_submit(vol, req);
        return;
    }
    struct ereq *e = ereq_new(vol);
    e->op = req->op;
    e->flags = req->op == TC_OP_READ ? req->flags : req->flags & ~TC_REQ_POOL_BUF;
    e->off = req->offset;
    e->len = req->length;
    e->buf = req->buf;
    e->extents = req->extents;
    e->max_extents = req->max_extents;
    e->complete = user_complete;
    e->owner = req;
    engine_submit_locked(e);
}

/* The origin's first write of this run (the origin device's hook): the
 * run becomes its last writer (io/originrec.c).  Blocking, once a run (a
 * small file written and synced).  Not recorded, the write fails with
 * EIO, and so does every write, trim and write-zeroes after it until the
 * record is made (tried again at each): a cache set that stopped cleanly
 * before would not know that the origin was written since, and would
 * serve older copies of what is written now.  Said once, and again at
 * most once a minute while it goes on. */
static int origin_first_write(struct tc_dev *d, void *ctx)
{
    struct tc_volume *vol = ctx;
    const uint8_t *set = vol->cache ? vol->cache->set_uuid
                         : vol->writer_set_known ? vol->writer_set : NULL;
    int e = originrec_writer_write(d, set);
    uint64_t now = tc_now_ns();
    if (e == 0) {
        if (vol->writer_record_failures)
            tc_info("origin %s: this run is recorded as its last writer now, after %llu "
                    "writes failed for want of the record", vol->cfg.origin,
                    (unsigned long long)vol->writer_record_failures);
        return 0;
    }
    if (vol->writer_record_failures++ == 0 ||
        now - vol->writer_record_said_ns >= 60ull * 1000 * 1000 * 1000) {
        vol->writer_record_said_ns = now;
        tc_error("origin %s: cannot record this run as its last writer (%s): its writes fail "
                 "with EIO until the record is made (a cache set that stopped cleanly before "
                 "would not know that the origin was written since, and would serve older "
                 "copies of what is written now); give the origin records' folder room or "
                 "write access (%llu writes failed so far)", vol->cfg.origin, strerror(-e),
                 (unsigned long long)vol->writer_record_failures);
    }
    return -EIO;
}

/* ---- close ---- */

/* The volume is closed: the origin's background activity (a remote
 * origin's polls and reconnect timers) stops, so the reactor can end. */
static void close_finish(struct tc_volume *vol, int err)
{
    /* How far the set's log reached at this clean stop, kept away from
     * its devices and state folder: an older copy of the set restored
     * with that folder is told by it (io/originrec.c, engine/seqrec.c).
     * Dirty data left or not: the stop's chunk is on the devices.  With
     * the origin's writer token now (after this run's last origin write),
     * which the next start compares (originstop.c). */
    bool token_kept = false;
    if (vol->origin_recorded && vol->cache && err == 0 && vol->cache->stop_chunk_recorded) {
        struct originrec_writer *w = tc_xcalloc(1, sizeof *w);
        const char *token = NULL;
        if (originrec_writer_read(vol->origin, w) == 0)
            token = w->found ? w->token : ORIGINREC_TOKEN_NONE;
        else
            tc_warn("origin %s: %s: the set's stop record keeps no writer token", vol->origin->name,
                    w->why);
        int e = originrec_stop_write(vol->cache->set_uuid, vol->cache->stop_chunk_recorded,
                                     true, token);
        free(w);
        if (e)
            tc_warn("cache: cannot write the set's stop record with the origin records (%s): "
                    "an older copy of the set restored with its state file's folder is not "
                    "told at the next start", strerror(-e));
        token_kept = e == 0 && token != NULL;
    }
    /* The origin holds every acknowledged write: its record of the cache
     * set goes (io/originrec.c).  Not after a failed close or flush, nor
     * with dirty data or lost sectors left -- nor when the stop record
     * above does not keep the origin's writer token (a superblock's
     * clean-stop write or the stop record's own failed): the next start
     * could not tell whether another run wrote the origin since, so no
     * other run may (the record refuses it) until the set is served and
     * stopped again.  A cache abandoned, failed or detached serves nothing
     * it holds now: no copy of it can grow older. */
    if (vol->origin_recorded && vol->cache && err == 0 && tc_volume_dirty_bytes(vol) == 0 &&
        tc_volume_lost_bytes(vol) == 0) {
        token_kept |= vol->cache->abandoned || vol->cache_failed || vol->detached;
        int e = token_kept ? originrec_remove(vol->origin, vol->cache->set_uuid) : 0;
        if (!token_kept)
            tc_warn("origin %s: its record of the cache set is kept: the set's stop record "
                    "does not keep the origin's writer token, so serving the origin without "
                    "this cache stays refused until the set is served and stopped again",
                    vol->origin->name);
        else if (e)
            tc_warn("origin %s: cannot remove its record of the cache set (%s): serving it "
                    "without this cache stays refused until it is removed", vol->origin->name,
                    strerror(-e));
    }
    dev_quiesce(vol->origin);
    vol->close_done(vol->close_arg, err);
}

static void close_flushed(struct tc_dev_io *dio, int err)
{
    struct tc_volume *vol = container_of(dio, struct tc_volume, close_dio);
    if (err)
        tc_error("%s: flush at shutdown failed: %s", vol->origin->name, strerror(-err));
    close_finish(vol, err);
}

static void cache_closed(void *arg, int err)
{
    struct tc_volume *vol = arg;
    if (err) {
        close_finish(vol, err);
        return;
    }
    if (vol->read_only || !vol->origin->can_flush) {
        close_finish(vol, 0);
        return;
    }
    memset(&vol->close_dio, 0, sizeof vol->close_dio);
    vol->close_dio.op = TC_DEV_FLUSH;
    vol->close_dio.cb = close_flushed;
    dev_submit(vol->origin, &vol->close_dio);
}

void tc_volume_stopping(struct tc_volume *vol)
{
    vol->stopping = true;
    if (vol->cache)
        cache_stopping(vol->cache);
}

void tc_volume_close(struct tc_volume *vol, void (*done)(void *arg, int err), void *arg)
{
    vol->closing = true;
    timer_cancel(vol->reactor, &vol->path_timer);
    vol->close_done = done;
    vol->close_arg = arg;
    if (vol->attaching) {
        vol->close_after_attach = true;     /* tc_volume_attach() ends, then closes */
        return;
    }
    if (vol->cache) {
        cache_close(vol->cache, cache_closed, vol);
        return;
    }
    if (vol->read_only || !vol->origin->can_flush) {
        close_finish(vol, 0);
        return;
    }
    memset(&vol->close_dio, 0, sizeof vol->close_dio);
    vol->close_dio.op = TC_DEV_FLUSH;
    vol->close_dio.cb = close_flushed;
    dev_submit(vol->origin, &vol->close_dio);
}

void tc_volume_free(struct tc_volume *vol)
{
    if (vol == NULL)
        return;
    timer_cancel(vol->reactor, &vol->path_timer);
    cache_free(vol->cache);
    dev_close(vol->origin);
    claim_set_release(vol->origin_claim);
    free(vol->attach_state_file);
    free(vol);
}

enum tc_mode tc_volume_mode(const struct tc_volume *vol) { return vol->mode; }

/* ---- online operations ---- */

struct online_op {
    struct tc_volume *vol;
    bool mode_change;               /* a drain for a mode change, not a detach */
    enum tc_mode old_mode, new_mode;
    struct tc_dev_io dio;
    tc_progress_fn progress;
    void (*done)(void *arg, int err);
    void *arg;
    /* Bytes written back by the drains of this operation that have ended,
     * and by the current one: a mode change or detach drains twice (before
     * and after closing the gate), and each drain counts from zero, so the
     * caller's figure must add them up or it reports only the last drain's
     * (usually nothing). */
    uint64_t done_before, done_now;
};

static void op_progress(void *arg, uint64_t left, uint64_t done_bytes)
{
    struct online_op *op = arg;
    op->done_now = done_bytes;
    if (op->progress)
        op->progress(op->arg, left, op->done_before + done_bytes);
}

/* One drain of the operation ended: the next one counts from zero again. */
static void op_drain_ended(struct online_op *op)
{
    op->done_before += op->done_now;
    op->done_now = 0;
}

const char *tc_volume_op_error(const struct tc_volume *vol) { return vol->op_error; }

void tc_volume_cache_geometry(const struct tc_volume *vol, uint64_t *block_bytes,
                              uint64_t *capacity)
{
    const struct cache *c = vol->cache;
    *block_bytes = c ? c->block_size : 0;
    *capacity = c ? (uint64_t)c->sp.nsegs * c->segment_size : 0;
}

/* Dirty data: with the sectors written back whose clean records are
 * still deferred (writeback_owed_clean()): the log, and a checkpoint
 * with it, holds them dirty, and the next start writes them back again,
 * so the origin alone is not taken for current. */
uint64_t tc_volume_dirty_bytes(const struct tc_volume *vol)
{
    uint64_t bytes, blocks;
    tc_volume_dirty(vol, &bytes, &blocks);
    return bytes;
}

uint64_t tc_volume_lost_bytes(const struct tc_volume *vol)
{
    return vol->cache ? cache_lost_for_good_sectors(vol->cache) * TC_SECTOR : 0;
}

/* A failed drain: say why in vol->op_error, naming the dirty data left:
 * "PREFIX: N MiB of dirty data could not be written back (WHY)SUFFIX". */
static void op_error_set(struct tc_volume *vol, const char *prefix, const char *suffix, int err)
{
    char dz[32], why[320] = "";
    tc_format_size(tc_volume_dirty_bytes(vol), dz, sizeof dz);
    if (vol->cache && !vol->detached)
        writeback_drain_reason(vol->cache, why, sizeof why);
    if (vol->cache && vol->cache->drain_failure[0]) {
        /* Everything was written back; the origin could not flush it, or
         * the log could not record it. */
        snprintf(vol->op_error, sizeof vol->op_error, "%s: %s%s", prefix,
                 vol->cache->drain_failure, suffix);
        tc_error("%s", vol->op_error);
        return;
    }
    snprintf(vol->op_error, sizeof vol->op_error,
             "%s: %s of dirty data could not be written back (%s)%s", prefix, dz,
             why[0] ? why : strerror(-err), suffix);
    tc_error("%s", vol->op_error);
}

/* The end of an operation: free it, then tell its caller (who may start
 * the next one from the callback). */
static void flush_dirty(struct tc_volume *vol, bool at_stop, tc_progress_fn progress,
                        void (*done)(void *arg, int err), void *arg);

static void op_finish(struct online_op *op, int err)
{
    struct tc_volume *vol = op->vol;
    void (*done)(void *, int) = op->done;
    void *arg = op->arg;
    free(op);
    done(arg, err);
    /* The stop's flush waited for this drain: its turn. */
    if (vol->stop_flush_done && !vol->detaching && !vol->flushing_dirty) {
        void (*sdone)(void *, int) = vol->stop_flush_done;
        vol->stop_flush_done = NULL;
        flush_dirty(vol, true, vol->stop_flush_progress, sdone, vol->stop_flush_arg);
    }
}

static void origin_flushed_op(struct tc_dev_io *dio, int err)
{
    op_finish(container_of(dio, struct online_op, dio), err);
}

static void flush_origin_only(struct tc_volume *vol, void (*done)(void *arg, int err), void *arg)
{
    if (!vol->origin->can_flush || vol->read_only) {
        done(arg, 0);
        return;
    }
    struct online_op *op = tc_xcalloc(1, sizeof *op);
    op->vol = vol;
    op->done = done;
    op->arg = arg;
    op->dio.op = TC_DEV_FLUSH;
    op->dio.cb = origin_flushed_op;
    dev_submit(vol->origin, &op->dio);
}

static void flush_done(void *arg, int err)
{
    struct online_op *op = arg;
    op->vol->flushing_dirty = false;
    if (err)
        op_error_set(op->vol, "flush failed", "", err);
    op_finish(op, err);
}

/* Whether a stop has begun: no operation that drains may start.  Once
 * the volume closes its writeback is stopped (and freed once its last job
 * ends), its cleaner too: a drain would wait for ever, or reach the freed
 * writeback state; before that, one still running when the close begins
 * would be cut short by it, and a detach emptying the cache then would race
 * the close's own records.  The stop's own flush (--flush-on-stop) goes
 * on until the close (tc_volume_flush_dirty_at_stop()).  Said as the
 * drains ended by the stop say it. */
static bool refused_stopping(struct tc_volume *vol, bool at_stop,
                             void (*done)(void *arg, int err), void *arg)
{
    if (!vol->closing && (!vol->stopping || at_stop))
        return false;
    snprintf(vol->op_error, sizeof vol->op_error, WB_STOPPING_WHY);
    done(arg, -ESHUTDOWN);
    return true;
}

void tc_volume_flush_dirty(struct tc_volume *vol, tc_progress_fn progress,
                           void (*done)(void *arg, int err), void *arg)
{
    flush_dirty(vol, false, progress, done, arg);
}

void tc_volume_flush_dirty_at_stop(struct tc_volume *vol, tc_progress_fn progress,
                                   void (*done)(void *arg, int err), void *arg)
{
    flush_dirty(vol, true, progress, done, arg);
}

static void flush_dirty(struct tc_volume *vol, bool at_stop, tc_progress_fn progress,
                        void (*done)(void *arg, int err), void *arg)
{
    if (refused_stopping(vol, at_stop, done, arg))
        return;
    if (at_stop && (vol->detaching || vol->flushing_dirty)) {
        /* A flush, detach or mode change drains already: the stop's flush
         * follows it (refused, the stop left its dirty data behind and a
         * detach was cut short as it closed). */
        vol->stop_flush_progress = progress;
        vol->stop_flush_done = done;
        vol->stop_flush_arg = arg;
        return;
    }
    if (vol->detaching || vol->flushing_dirty) {
        /* A mode change, a detach or another flush is draining: one drain
         * at a time (its completion would otherwise be replaced by this
         * one's, and never come). */
        snprintf(vol->op_error, sizeof vol->op_error, "%s is under way; try again when it "
                 "ends", vol->detaching ? "a mode change or detach" : "another flush");
        done(arg, -EBUSY);
        return;
    }
    vol->op_error[0] = '\0';
    if (vol->read_only && vol->cache && !vol->detached && vol->cache->map.dirty_sectors > 0) {
        /* The origin is opened read-only: writeback cannot write it (it
         * does not run, writeback.c: pace()). */
        char size[32];
        snprintf(vol->op_error, sizeof vol->op_error,
                 "the volume is served read-only (--read-only): its origin is not written, "
                 "and the cache's %s of dirty data stays in it; serve without --read-only to "
                 "write it back",
                 tc_format_size(vol->cache->map.dirty_sectors * TC_SECTOR, size, sizeof size));
        done(arg, -EROFS);
        return;
    }
    if (vol->cache && !vol->detached) {
        vol->flushing_dirty = true;
        struct online_op *op = tc_xcalloc(1, sizeof *op);
        op->vol = vol;
        op->progress = progress;
        op->done = done;
        op->arg = arg;
        /* tiercache flush ends once what was dirty when it began is on
         * the origin: clients writing all along kept one that drained until
         * nothing was dirty running for as long as they wrote.  The stop's
         * own flush drains everything. */
        cache_flush_dirty(vol->cache, !at_stop, op_progress, flush_done, op);
    } else {
        flush_origin_only(vol, done, arg);
    }
}

/* Detach, in four steps:
 *
 *   1. mode passthrough: new writes add no dirty data (they invalidate);
 *   2. drain the dirty data, with clients still served;
 *   3. close the gate: new requests wait, and the requests still in the
 *      cache path finish (a write that started in writeback mode may add
 *      dirty data even now);
 *   4. drain what they added and empty the cache; then the gate opens and
 *      the held requests go to the origin.
 *
 * Without the gate a write still in the cache path when the cache was
 * emptied was lost, and one waiting for the cleaner waited forever. */
static void dispatch_held(struct tc_volume *vol)
{
    struct ereq *list = vol->held_head;
    vol->held_head = NULL;
    vol->held_tail = &vol->held_head;
    while (list) {
        struct ereq *e = list;
        list = e->held_next;
        engine_dispatch(e);
    }
}

void volume_open_gate(struct tc_volume *vol)
{
    vol->gate = false;
    if (!vol->holding)
        dispatch_held(vol);
}

/*
 * The hold: a running checkpoint is taken at a moment the log is idle and
 * flushed (checkpoint.c, P1).  Under a steady load no sync of the log ends
 * at such a moment, so a checkpoint long overdue holds new requests here,
 * waits for the ones in the cache path to end, and syncs the log once
 * more; it lets them go as soon as it has encoded its cut, or after a
 * bound if the moment still does not come.  The held requests keep their
 * order, as at the gate, in the same list.
 */
bool volume_can_hold(const struct tc_volume *vol)
{
    return !vol->gate && !vol->holding && !vol->detaching && !vol->attaching &&
           !vol->detached && !vol->cache_failed && !vol->fenced;
}

static void hold_task_fn(struct tc_task *t)
{
    struct tc_volume *vol = container_of(t, struct tc_volume, hold_task);
    if (!vol->holding || vol->hold_quiet == NULL || vol->cache_inflight > 0)
        return;
    void (*quiet)(void *) = vol->hold_quiet;
    vol->hold_quiet = NULL;     /* once per hold */
    quiet(vol->hold_arg);
}

void volume_hold(struct tc_volume *vol, void (*quiet)(void *arg), void *arg)
{
    TC_ASSERT(volume_can_hold(vol));
    vol->holding = true;
    vol->hold_quiet = quiet;
    vol->hold_arg = arg;
    vol->hold_task.fn = hold_task_fn;
    reactor_defer(vol->reactor, &vol->hold_task);
}

void volume_hold_release(struct tc_volume *vol)
{
    if (!vol->holding)
        return;
    vol->holding = false;
    vol->hold_quiet = NULL;
    if (!vol->gate)
        dispatch_held(vol);
}

/* A drain that failed: the operation changes nothing -- the volume goes
 * back to the mode it had (and, for a detach, keeps its cache).  Writes
 * made meanwhile followed the new mode, which is safe in the old one too:
 * they added no dirty data. */
static void op_abandon(struct online_op *op, int err)
{
    struct tc_volume *vol = op->vol;
    char prefix[96], suffix[96];
    if (op->mode_change)
        snprintf(prefix, sizeof prefix, "mode change to %s abandoned",
                 tc_mode_name(op->new_mode));
    else
        snprintf(prefix, sizeof prefix, "detach abandoned");
    if (vol->cache_failed)
        /* Not "stays attached": its last device failed under the drain. */
        snprintf(suffix, sizeof suffix, "; the cache failed meanwhile: the volume serves the "
                 "origin directly (status: health)");
    else
        snprintf(suffix, sizeof suffix, "; the %smode stays %s",
                 op->mode_change ? "" : "cache stays attached and the ", tc_mode_name(op->old_mode));
    vol->mode = op->old_mode;
    op_error_set(vol, prefix, suffix, err);
}

static void detached(void *arg, int err)
{
    struct online_op *op = arg;
    struct tc_volume *vol = op->vol;
    if (err == 0) {
        vol->detached = true;
        vol->mode_before_detach = op->old_mode;
        tc_info("cache detached: serving the origin directly");
    } else {
        op_abandon(op, err);
    }
    vol->detaching = false;
    volume_open_gate(vol);
    op_finish(op, err);
}

/* A mode change away from writeback: what the writes still in the cache
 * path added is drained too, then the gate opens. */
static void mode_drained(void *arg, int err)
{
    struct online_op *op = arg;
    struct tc_volume *vol = op->vol;
    if (err)
        op_abandon(op, err);
    vol->detaching = false;
    volume_open_gate(vol);
    op_finish(op, err);
}

static void gate_quiet(struct tc_task *t)
{
    struct tc_volume *vol = container_of(t, struct tc_volume, gate_task);
    if (!vol->gate || vol->cache_inflight > 0 || vol->gate_op == NULL)
        return;
    struct online_op *op = vol->gate_op;
    vol->gate_op = NULL;
    if (vol->closing) {
        /* The stop closed the cache meanwhile (its writeback and cleaner
         * stopped): the operation is abandoned, as a drain the stop ends. */
        snprintf(vol->cache->drain_failure, sizeof vol->cache->drain_failure,
                 "the daemon is stopping");
        (op->mode_change ? mode_drained : detached)(op, -ESHUTDOWN);
        return;
    }
    if (op->mode_change)
        cache_flush_dirty(vol->cache, false, op_progress, mode_drained, op);
    else
        cache_detach(vol->cache, op_progress, detached, op);
}

static void first_drain_done(void *arg, int err)
{
    struct online_op *op = arg;
    struct tc_volume *vol = op->vol;
    if (err) {
        op_abandon(op, err);
        vol->detaching = false;
        op_finish(op, err);
        return;
    }
    op_drain_ended(op);
    vol->gate = true;
    vol->gate_op = op;
    vol->gate_task.fn = gate_quiet;
    reactor_defer(vol->reactor, &vol->gate_task);
}

/* Drain, close the gate, drain again; then empty the cache (detach) or
 * just open the gate (a mode change). */
static void gated_drain(struct tc_volume *vol, bool mode_change, enum tc_mode old_mode,
                        enum tc_mode new_mode, tc_progress_fn progress,
                        void (*done)(void *arg, int err), void *arg)
{
    struct online_op *op = tc_xcalloc(1, sizeof *op);
    op->vol = vol;
    op->old_mode = old_mode;
    op->new_mode = new_mode;
    op->progress = progress;
    op->done = done;
    op->arg = arg;
    op->mode_change = mode_change;
    vol->detaching = true;
    cache_flush_dirty(vol->cache, false, op_progress, first_drain_done, op);
}

void tc_volume_detach(struct tc_volume *vol, tc_progress_fn progress,
                      void (*done)(void *arg, int err), void *arg)
{
    /* Every refusal says its own reason: the control socket prints
     * op_error with any error, and an earlier command's would be wrong. */
    vol->op_error[0] = '\0';
    if (refused_stopping(vol, false, done, arg))
        return;
    if (vol->attaching) {
        snprintf(vol->op_error, sizeof vol->op_error, "an attach is under way; try again when "
                 "it ends");
        done(arg, -EBUSY);
        return;
    }
    if (vol->cache == NULL || vol->detached) {
        snprintf(vol->op_error, sizeof vol->op_error, "%s",
                 vol->cache ? "the cache is detached already ('tiercache attach' brings it back)"
                            : "the daemon serves without a cache (it was started without --cache)");
        done(arg, vol->cache ? -EALREADY : -ENODEV);
        return;
    }
    if (vol->detaching || vol->flushing_dirty) {
        snprintf(vol->op_error, sizeof vol->op_error, "%s is under way; try again when it ends",
                 vol->flushing_dirty ? "a flush of the dirty data" : "a mode change or detach");
        done(arg, -EBUSY);
        return;
    }
    /* From now on writes only invalidate; then drain and empty the cache
     * (or, if the drain fails, go back to the mode it had). */
    vol->op_error[0] = '\0';
    enum tc_mode old = vol->mode;
    vol->mode = TC_MODE_PASSTHROUGH;
    gated_drain(vol, false, old, TC_MODE_PASSTHROUGH, progress, done, arg);
}

void tc_volume_set_mode(struct tc_volume *vol, enum tc_mode mode, tc_progress_fn progress,
                        void (*done)(void *arg, int err), void *arg)
{
    /* Every refusal says its own reason (as tc_volume_detach()). */
    vol->op_error[0] = '\0';
    if (refused_stopping(vol, false, done, arg))
        return;
    if (vol->attaching) {
        snprintf(vol->op_error, sizeof vol->op_error, "an attach is under way; try again when "
                 "it ends");
        done(arg, -EBUSY);      /* the cache is being opened again */
        return;
    }
    if (vol->cache == NULL || vol->detached) {
        if (mode != TC_MODE_PASSTHROUGH)
            snprintf(vol->op_error, sizeof vol->op_error, "mode %s needs a cache, and %s",
                     tc_mode_name(mode), vol->cache ? "the cache is detached: 'tiercache "
                     "attach' brings it back (attach --mode sets the mode as it attaches)"
                     : "the daemon serves without one (it was started without --cache)");
        done(arg, mode == TC_MODE_PASSTHROUGH ? 0 : -ENODEV);
        return;
    }
    if (vol->detaching) {
        snprintf(vol->op_error, sizeof vol->op_error, "a mode change or detach is under way; "
                 "try again when it ends");
        done(arg, -EBUSY);      /* the cache is being emptied */
        return;
    }
    if (vol->cache_failed || vol->cache->abandoned) {
        /* Every request goes to the origin alone (lost_passthrough), in
         * any mode, until a restart: a switch would change nothing but
         * the mode shown, so it is refused, passthrough too. */
        snprintf(vol->op_error, sizeof vol->op_error, "mode %s refused: the cache failed and was "
                 "abandoned (every cache device failed), so the daemon serves the origin alone "
                 "whatever the mode, and nothing was switched (the mode stays %s).  See "
                 "volume.health in 'tiercache status'; restart the daemon with healthy cache "
                 "devices to use the cache again", tc_mode_name(mode), tc_mode_name(vol->mode));
        done(arg, -EIO);
        return;
    }
    vol->op_error[0] = '\0';
    enum tc_mode old = vol->mode;
    /* Dirty data left from writeback (or recovered after a crash) goes to
     * the origin before a mode without dirty data is in force. */
    bool drain = mode != TC_MODE_WRITEBACK &&
                 (old == TC_MODE_WRITEBACK || vol->cache->map.dirty_blocks > 0);
    if (drain && vol->flushing_dirty) {
        /* One drain at a time: this one would take the flush's place. */
        snprintf(vol->op_error, sizeof vol->op_error, "a flush of the dirty data is under way; "
                 "try again when it ends (the mode stays %s)", tc_mode_name(old));
        done(arg, -EBUSY);
        return;
    }
    vol->mode = mode;
    if (old != mode)
        tc_info("mode: %s -> %s", tc_mode_name(old), tc_mode_name(mode));
    if (drain) {
        /* New writes no longer add dirty data: drain what there is, then
         * (as detach does) close the gate so the writes still in the cache
         * path finish, and drain what they added.  A failed drain puts the
         * old mode back. */
        gated_drain(vol, true, old, mode, progress, done, arg);
        return;
    }
    done(arg, 0);
}

static void dev_json(struct tc_volume *vol, struct tc_json *j, const char *key,
                     struct tc_dev *d)
{
    json_begin_object(j, key);
    json_string(j, "path", d->name);
    json_uint(j, "size", d->size);
    json_bool(j, "direct_io", d->direct_io);
    json_uint(j, "reads", d->stats.reads);
    json_uint(j, "read_bytes", d->stats.read_bytes);
    json_uint(j, "writes", d->stats.writes);
    json_uint(j, "write_bytes", d->stats.write_bytes);
    json_uint(j, "flushes", d->stats.flushes);
    json_uint(j, "trims", d->stats.trims);
    json_uint(j, "zeroes", d->stats.zeroes);
    json_uint(j, "read_errors", d->stats.read_errors);
    json_uint(j, "write_errors", d->stats.write_errors);
    json_uint(j, "other_errors", d->stats.other_errors);
    json_uint(j, "inflight", d->stats.inflight);
    /* Reachability (a remote origin; a local one is always online). */
    json_string(j, "state", dev_state_name(d->state));
    json_uint(j, "connections", d->connections);
    json_uint(j, "reconnects", d->stats.reconnects);
    json_uint(j, "connections_lost", d->stats.connections_lost);
    json_double(j, "offline_seconds", dev_offline_seconds(d, false));
    json_double(j, "current_offline_seconds", dev_offline_seconds(d, true));
    json_uint(j, "held_requests", d->stats.held);
    json_uint(j, "retried_requests", d->stats.retried);
    json_uint(j, "read_wakeups_ignored", d->stats.read_wakeups_ignored);
    json_uint(j, "stalled_connections", d->stats.stalled_connections);
    json_uint(j, "stalls", d->stats.stalls);
    json_uint(j, "stalled_closed", d->stats.stalled_closed);
    json_uint(j, "fenced_requests", d->stats.fenced_failed);
    json_uint(j, "open_fences", d->stats.open_fences);
    json_uint(j, "writes_waiting_for_fences", d->stats.fence_waits);
    json_micros_as_seconds(j, "oldest_reply_wait_seconds", d->stats.oldest_reply_wait_ns / 1000);
    json_double(j, "timeout_seconds", (double)d->hold_timeout_ns / 1e9);
    json_uint(j, "writeback_retries",
              vol->cache && !vol->detached ? writeback_retries(vol->cache) : 0);
    json_uint(j, "flushes_failed_connection_lost", vol->flushes_failed_connection_lost);
    json_end_object(j);
}

static const char *op_key[] = { "read", "write", "flush", "trim", "write_zeroes", "cache",
                                "block_status" };

void tc_volume_status_json(struct tc_volume *vol, struct tc_json *j)
{
    json_string(j, "mode", tc_mode_name(vol->mode));
    json_bool(j, "detached", vol->detached);
    json_string(j, "health", vol->fenced ? "failed: the cache could not be attached again and "
                "holds the record of lost sectors; every request fails until a restart"
                : vol->cache ? vol->cache->health : "ok");
    json_uint(j, "size", vol->size);
    json_bool(j, "read_only", vol->read_only);
    json_micros_as_seconds(j, "uptime_seconds", (tc_now_ns() - vol->opened_ns) / 1000);
    json_uint(j, "inflight", vol->inflight);
    json_begin_object(j, "requests");
    for (unsigned i = 0; i < TC_ARRAY_SIZE(op_key); i++)
        json_uint(j, op_key[i], vol->stats.requests[i]);
    json_end_object(j);
    json_uint(j, "read_bytes", vol->stats.read_bytes);
    json_uint(j, "write_bytes", vol->stats.write_bytes);
    json_uint(j, "unaligned_reads", vol->stats.unaligned_reads);
    json_uint(j, "unaligned_writes", vol->stats.unaligned_writes);
    json_uint(j, "errors", vol->stats.errors);
    /* Also after detach, when the cache's own figures are gone. */
    json_uint(j, "lost_bytes", vol->cache ? lost_sectors(&vol->cache->map.lost) * TC_SECTOR : 0);
    /* The paths' check: "" while the files have their names. */
    json_string(j, "origin_file_gone", vol->origin_gone_why);
    /* Origin writes failed for want of the origin's writer record. */
    json_uint(j, "origin_writer_record_failures", vol->writer_record_failures);
    json_string(j, "cache_file_gone", vol->cache_gone_why);
    tc_volume_settings_json(vol, j);
    dev_json(vol, j, "origin", vol->origin);
    if (vol->cache && !vol->detached)
        cache_status_json(vol->cache, j);
}

bool tc_volume_draining(const struct tc_volume *vol)
{
    return vol->cache && !vol->detached && vol->cache->draining > 0;
}

bool tc_volume_cache_unlinked(const struct tc_volume *vol, char *why, size_t len)
{
    const struct cache *c = vol->cache;
    if (c == NULL || vol->detached)
        return false;
    /* Found while serving: the device was failed then (and may be gone). */
    if (vol->cache_gone_why[0]) {
        snprintf(why, len, "%s", vol->cache_gone_why);
        return true;
    }
    for (unsigned i = 0; i < c->ndevs; i++)
        if (c->devs[i].dev && dev_file_unlinked(c->devs[i].dev, why, len))
            return true;
    return false;
}

bool tc_volume_origin_gone(const struct tc_volume *vol, char *why, size_t len)
{
    if (vol->origin_gone)
        snprintf(why, len, "%s", vol->origin_gone_why);
    return vol->origin_gone;
}

void tc_volume_dirty(const struct tc_volume *vol, uint64_t *bytes, uint64_t *blocks)
{
    struct cache *c = vol->cache;
    *bytes = *blocks = 0;
    if (c == NULL || vol->detached)
        return;
    uint64_t owed_blocks, owed = writeback_owed_clean_sectors(c, &owed_blocks);
    *bytes = (c->map.dirty_sectors + owed) * TC_SECTOR;
    *blocks = c->map.dirty_blocks + owed_blocks;
}

void tc_volume_dirty_owed(const struct tc_volume *vol, uint64_t *bytes, uint64_t *blocks)
{
    struct cache *c = vol->cache;
    *bytes = *blocks = 0;
    if (c == NULL || vol->detached)
        return;
    *bytes = writeback_owed_clean_sectors(c, blocks) * TC_SECTOR;
}
