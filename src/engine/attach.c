/*
 * tiercache attach: the cache set a detach left unused, used again without
 * a restart.
 *
 * What a detach leaves (volume.c, cache.c): the dirty data written back,
 * every group of the log ended durably (the log's tail moved to its head),
 * so the set holds no cached data -- only LOST records, the sectors whose
 * data was lost with a failed device, which stay unreadable until written
 * again.  The devices stay open and claimed (io/claim.c) while detached:
 * the lost set lives in this set's log, so no other daemon may format or
 * serve the set meanwhile; requests go to the origin through
 * lost_passthrough(), which still fails reads of lost sectors and records
 * their rewrites in that log.
 *
 * Why the cache must come back empty: from the detach on, the origin
 * receives writes the cache never sees, so anything the set held before
 * is older than the origin.  Two ways to make sure none of it is served:
 * write new superblocks (a format: a new set UUID makes the old chunks
 * foreign) or verify that the log is as empty as the detach left it and
 * refuse it otherwise.  Attach verifies and discards: a new format would
 * also discard the lost set and the abandonment record (state file, keyed
 * by the set), and reads of lost sectors would then return the origin's
 * older data -- exactly what the lost set exists to prevent.  So attach:
 *
 *  1. refuses unless the volume has a detached cache (not one that failed
 *     or was abandoned: its log is not the truth, and a restart is the
 *     tested way back), and, with --cache, unless every device named is
 *     of this origin (size and identity, as at start) and of the detached
 *     set -- all checked before anything changes;
 *  2. closes the gate (new requests wait, as during a detach) and waits for
 *     the requests still using the detached cache;
 *  2a. flushes the origin, and fails if that fails (the set stays
 *     detached, unchanged): the writes made while detached went to the
 *     origin alone, and the attached cache has no record of them -- in
 *     writeback mode a client FLUSH syncs the log only when nothing it
 *     knows of needs the origin flushed (writepath.c, cache_flush()).
 *     The close below flushes the origin too, but a stop has no use for
 *     its failure beyond a message; without this step an attach went on
 *     after it, and the next FLUSH succeeded with those writes still
 *     unflushed on the origin, lost to its power failure;
 *  3. closes the cache as a stop does (final syncs, the clean-stop mark)
 *     and frees it, releasing its claims;
 *  4. opens the set again exactly as a start does: claims, superblocks,
 *     origin checks, the state file, recovery -- which rebuilds the lost
 *     set from the log and the state file;
 *  5. verifies that nothing but lost sectors was recovered (no cached
 *     block, no dirty data); anything else would be stale, and the set
 *     stays detached;
 *  6. sets the mode (the one before the detach, or the one asked for) and
 *     opens the gate.
 *
 * If a device fails in step 3 (the close's last writes), the set is
 * abandoned as at any failure, which step 1 refuses: once the
 * abandonment's own writes (its superblock marks) have ended -- they
 * complete after the close, and use the cache -- the cache is freed and
 * the attach fails; the volume serves the origin without a cache, or,
 * with lost sectors, nothing until a restart (below).
 *
 * If step 4 fails (an I/O error, a claim taken meanwhile), the set is
 * opened again as it was, detached.  If even that fails and the lost set
 * was not empty, no request can be served safely, and every one fails with
 * EIO until a restart (vol->fenced); with no lost sector the volume serves
 * the origin without a cache, which is what a detached volume does anyway.
 *
 * Steps 3 and 4 read the devices with dev_sync_io(), which runs the
 * reactor meanwhile: new requests are held at the gate, the volume counts
 * as detached (status does not look into the half-built cache), and a
 * close asked for meanwhile (a SIGTERM) waits until the attach has ended.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/abandon.h"
#include "engine/cache.h"
#include "io/claim.h"
#include "engine/engine.h"
#include "engine/writeback.h"
#include "util/log.h"
#include "util/misc.h"
#include "util/parse.h"

struct attach_op {
    struct tc_volume *vol;
    char **paths;                   /* NULL-terminated, owned */
    char **old_paths;               /* the detached devices' names, owned */
    enum tc_mode mode;
    struct tc_dev_io dio;           /* step 2a: the origin flush */
    struct tc_timer wait;           /* step 3: the closed cache's I/O ending */
    int close_err;
    void (*done)(void *arg, int err);
    void *arg;
};

/* A message that may be cut short (vsnprintf: the compiler does not
 * second-guess the buffer's size). */
__attribute__((format(printf, 3, 4)))
static void msg(char *out, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out, len, fmt, ap);
    va_end(ap);
}

static void free_paths(char **p)
{
    if (p == NULL)
        return;
    for (char **q = p; *q; q++)
        free(*q);
    free(p);
}

static char **copy_paths(const char *const *paths)
{
    unsigned n = 0;
    while (paths[n])
        n++;
    char **p = tc_xcalloc(n + 1, sizeof *p);
    for (unsigned i = 0; i < n; i++)
        p[i] = tc_xstrdup(paths[i]);
    return p;
}

static void attach_finish(struct attach_op *op, int err)
{
    struct tc_volume *vol = op->vol;
    void (*done)(void *, int) = op->done;
    void *arg = op->arg;
    free_paths(op->paths);
    free_paths(op->old_paths);
    free(op);
    vol->detaching = false;
    vol->attaching = false;
    volume_paths_watch(vol);        /* the devices attached may be files */
    volume_open_gate(vol);
    done(arg, err);
    if (vol->close_after_attach) {
        vol->close_after_attach = false;
        tc_volume_close(vol, vol->close_done, vol->close_arg);
    }
}

/* The superblock of a device named to attach, read with plain reads (the
 * detached set holds its devices exclusively, so they cannot be opened as
 * devices again).  Checked as a start checks it: this origin's size and
 * identity, and the detached set.  The device index goes to *idx. */
static int check_named(struct tc_volume *vol, const char *path, unsigned *idx, char *err,
                       size_t errlen)
{
    struct cache *c = vol->cache;
    char file[4096];
    if (!claim_local_path(path, file, sizeof file))
        snprintf(file, sizeof file, "%s", path);
    struct stat st;
    if (stat(file, &st) < 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
        snprintf(err, errlen, "%s: not a file or block device", path);
        return -1;
    }
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    uint8_t *buf = tc_xmalloc(2 * TC_SB_SIZE);
    ssize_t got = pread(fd, buf, 2 * TC_SB_SIZE, 0);
    int rerr = errno;
    close(fd);
    struct tc_superblock sb;
    char e1[160], e2[160];
    int rc = -1;
    if (got != 2 * TC_SB_SIZE) {
        snprintf(err, errlen, "%s: cannot read the superblock: %s", path,
                 got < 0 ? strerror(rerr) : "device too small");
        goto out;
    }
    if (sb_decode(buf, &sb, e1, sizeof e1) < 0 &&
        sb_decode(buf + TC_SB_SIZE, &sb, e2, sizeof e2) < 0) {
        snprintf(err, errlen, "%s: not a usable tiercache cache device (%s)", path, e1);
        goto out;
    }
    bool same_id = dev_identity_matches(vol->origin, sb.origin_id, TC_ORIGIN_ID_LEN - 1) !=
                   DEV_ID_OTHER;
    if (sb.origin_size != vol->size || (!same_id && !vol->cfg.adopt_origin)) {
        msg(err, errlen, "%s was formatted for origin '%s' (%s, %llu bytes), but this "
                 "daemon's origin is '%s' (%s, %llu bytes): not attached", path,
                 sb.origin_path, sb.origin_id, (unsigned long long)sb.origin_size,
                 vol->origin->name, vol->origin->identity, (unsigned long long)vol->size);
        goto out;
    }
    if (memcmp(sb.set_uuid, c->set_uuid, 16) != 0) {
        char u1[37], u2[37];
        tc_uuid_format(sb.set_uuid, u1);
        tc_uuid_format(c->set_uuid, u2);
        msg(err, errlen, "%s belongs to cache set %s, but the detached cache is set %s "
                 "(%s): attach brings back the set this daemon detached (to use another "
                 "set, restart the daemon with it)", path, u1, u2, c->devs[0].dev->name);
        goto out;
    }
    *idx = sb.dev_index;
    rc = 0;
out:
    free(buf);
    return rc;
}

static int check_paths(struct tc_volume *vol, const char *const *paths, char *err,
                       size_t errlen)
{
    struct cache *c = vol->cache;
    bool seen[TC_MAX_DEVICES] = { false };
    unsigned n = 0;
    for (; paths[n]; n++) {
        unsigned idx;
        if (n == TC_MAX_DEVICES) {
            snprintf(err, errlen, "--cache: at most %u devices", TC_MAX_DEVICES);
            return -1;
        }
        if (check_named(vol, paths[n], &idx, err, errlen) < 0)
            return -1;
        if (idx >= c->ndevs || seen[idx]) {
            snprintf(err, errlen, "%s is device %u of the set, which is named twice", paths[n],
                     idx);
            return -1;
        }
        seen[idx] = true;
    }
    if (n != c->ndevs) {
        snprintf(err, errlen, "the detached cache set has %u device%s, but %u %s named",
                 c->ndevs, c->ndevs == 1 ? "" : "s", n, n == 1 ? "was" : "were");
        return -1;
    }
    return 0;
}

/* Open the set named by paths as a start does; -1 with err. */
static int reopen(struct tc_volume *vol, char **paths, char *err, size_t errlen)
{
    struct tc_volume_config saved = vol->cfg;
    /* The state file the detached cache used: found by that name again
     * even if the first device is named differently now. */
    if (vol->attach_state_file)
        vol->cfg.state_file = vol->attach_state_file;
    int rc = cache_open(vol, (const char *const *)paths, err, errlen);
    vol->cfg = saved;
    return rc;
}

static void attach_reopen(struct tc_task *t);

static void attach_wait_fn(struct tc_timer *t)
{
    struct attach_op *op = container_of(t, struct attach_op, wait);
    op->vol->gate_op = op;
    attach_reopen(&op->vol->gate_task);
}

/* Whether the closed cache still has I/O of its own under way: a device
 * failing in the close's last writes starts the abandonment's superblock
 * marks and state-file settling after the close has ended (abandon.c),
 * whose completions use the cache and its devices. */
static bool closed_cache_busy(struct cache *c)
{
    if (!abandon_idle(c))
        return true;
    for (unsigned d = 0; d < c->ndevs; d++)
        if (c->devs[d].dev->stats.inflight > 0)
            return true;
    return false;
}

/* The detached cache is gone and cannot be opened again (why): the volume
 * serves the origin without a cache -- or, if lost sectors were recorded
 * (or an abandonment not yet recorded anywhere), nothing until a restart:
 * served from the origin, they would read its older data. */
static void serve_without_cache(struct tc_volume *vol, uint64_t lost, bool unrecorded,
                                const char *why)
{
    vol->cache = NULL;
    vol->detached = false;
    vol->mode = TC_MODE_PASSTHROUGH;
    if (lost || unrecorded) {
        vol->fenced = true;
        tc_error("%s, and it records %llu lost sectors%s: every request fails until the daemon "
                 "is restarted", why, (unsigned long long)lost,
                 unrecorded ? " (its abandonment not recorded yet)" : "");
    } else {
        tc_error("%s: serving the origin without a cache", why);
    }
}

/* The close ends inside the log's completion, which still uses the cache
 * after this returns: the cache is freed from a task, after it. */
static void attach_closed(void *arg, int err)
{
    struct attach_op *op = arg;
    struct tc_volume *vol = op->vol;
    op->close_err = err;
    vol->gate_op = op;
    vol->gate_task.fn = attach_reopen;
    reactor_defer(vol->reactor, &vol->gate_task);
}

static void attach_reopen(struct tc_task *t)
{
    struct tc_volume *vol = container_of(t, struct tc_volume, gate_task);
    struct attach_op *op = vol->gate_op;
    if (op == NULL)
        return;     /* queued again by a request ending (ereq_free) */
    vol->gate_op = NULL;
    struct cache *old = vol->cache;
    int err = op->close_err;
    if (err) {
        /* The old cache is still whole (its final sync failed): it stays
         * detached and serves the lost set as before. */
        snprintf(vol->op_error, sizeof vol->op_error, "attach failed: closing the detached "
                 "cache failed: %s; it stays detached", strerror(-err));
        tc_error("%s", vol->op_error);
        attach_finish(op, err);
        return;
    }
    if (closed_cache_busy(old)) {
        timer_arm(vol->reactor, &op->wait, 10ull * 1000 * 1000);
        return;
    }
    uint64_t lost = lost_sectors(&old->map.lost);
    if (vol->cache_failed || old->abandoned) {
        /* A device failed in the close's last writes (the stop chunk, a
         * superblock): the set is abandoned, its log never trusted again,
         * which no attach takes (step 1); a restart is the way back. */
        bool unrecorded = old->abandon_unrecorded;
        snprintf(vol->op_error, sizeof vol->op_error, "attach failed: a cache device failed "
                 "while the detached cache was closed, and the cache was abandoned; restart "
                 "the daemon to use the cache again");
        tc_error("%s", vol->op_error);
        cache_free(old);
        vol->cache_failed = false;  /* no cache to have failed: the origin is served */
        serve_without_cache(vol, lost, unrecorded, "the cache failed during an attach");
        attach_finish(op, -EIO);
        return;
    }
    if (old->state_path) {
        free(vol->attach_state_file);
        vol->attach_state_file = tc_xstrdup(old->state_path);
    }
    cache_free(old);
    vol->cache = NULL;

    char e[1024];
    if (reopen(vol, op->paths, e, sizeof e) == 0) {
        struct cache *c = vol->cache;
        if (c->map.idx.count == 0 && c->map.dirty_sectors == 0) {
            vol->detached = false;
            vol->mode = op->mode;
            tc_info("cache attached again (%u device%s, empty%s): mode %s", c->ndevs,
                    c->ndevs == 1 ? "" : "s", lost_sectors(&c->map.lost) ? ", lost sectors kept" : "",
                    tc_mode_name(vol->mode));
            attach_finish(op, 0);
            return;
        }
        /* Not as the detach left it: its data is older than the origin.
         * Its write-back (started by the open for dirty data) is stopped
         * before it writes any of it over newer origin data; the set stays
         * open, detached, for its lost set. */
        writeback_fini(c);
        char dz[32];
        snprintf(vol->op_error, sizeof vol->op_error, "attach refused: the cache on %s holds "
                 "%llu blocks (%s dirty) that are not from after the detach, so they may be "
                 "older than the origin; it stays detached (reformat it with 'tiercache "
                 "format --force' to use it)", c->devs[0].dev->name,
                 (unsigned long long)c->map.idx.count,
                 tc_format_size(c->map.dirty_sectors * TC_SECTOR, dz, sizeof dz));
        tc_error("%s", vol->op_error);
        attach_finish(op, -ESTALE);
        return;
    }
    msg(vol->op_error, sizeof vol->op_error, "attach failed: %s", e);
    tc_error("%s", vol->op_error);
    /* Back to what it was: the same set, detached. */
    char e2[1024];
    if (reopen(vol, op->old_paths, e2, sizeof e2) == 0) {
        tc_info("the cache stays detached");
        attach_finish(op, -EIO);
        return;
    }
    char why[1200];
    msg(why, sizeof why, "the detached cache could not be opened again (%s)", e2);
    serve_without_cache(vol, lost, false, why);
    attach_finish(op, -EIO);
}

/* Step 2a done: on to the close, or the attach fails, changing nothing. */
static void attach_origin_flushed(struct tc_dev_io *dio, int err)
{
    struct attach_op *op = container_of(dio, struct attach_op, dio);
    struct tc_volume *vol = op->vol;
    if (err) {
        snprintf(vol->op_error, sizeof vol->op_error, "attach failed: the origin's flush "
                 "failed (%s), so the writes made while detached may not be durable there; "
                 "the cache stays detached", strerror(-err));
        tc_error("%s", vol->op_error);
        attach_finish(op, err);
        return;
    }
    cache_close(vol->cache, attach_closed, op);
}

static void attach_quiet(struct tc_task *t)
{
    struct tc_volume *vol = container_of(t, struct tc_volume, gate_task);
    if (!vol->gate || vol->cache_inflight > 0 || vol->gate_op == NULL)
        return;
    struct attach_op *op = vol->gate_op;
    vol->gate_op = NULL;
    if (!vol->origin->can_flush || vol->read_only) {
        cache_close(vol->cache, attach_closed, op);
        return;
    }
    memset(&op->dio, 0, sizeof op->dio);
    op->dio.op = TC_DEV_FLUSH;
    op->dio.cb = attach_origin_flushed;
    dev_submit(vol->origin, &op->dio);
}

void tc_volume_attach(struct tc_volume *vol, const char *const *paths, const enum tc_mode *mode,
                      void (*done)(void *arg, int err), void *arg)
{
    char err[sizeof vol->op_error - 32];
    vol->op_error[0] = '\0';
    int code = 0;
    /* Busy first: while an attach reads the set again, vol->cache is
     * briefly NULL, which is not "without a cache". */
    if (vol->detaching || vol->gate) {
        code = -EBUSY;
        snprintf(err, sizeof err, "a detach, mode change or another attach is under way");
    } else if (vol->cache == NULL) {
        code = -ENODEV;
        snprintf(err, sizeof err, "the daemon serves without a cache (it was started without "
                 "--cache); restart it with --cache to use one");
    } else if (vol->closing) {
        code = -EBUSY;
        snprintf(err, sizeof err, "the daemon is stopping");
    } else if (vol->cache_failed || vol->cache->abandoned) {
        code = -EIO;
        snprintf(err, sizeof err, "the cache failed and was abandoned, which is not a detach: "
                 "its log is not trusted; restart the daemon to use the cache again");
    } else if (!vol->detached) {
        code = -EALREADY;
        snprintf(err, sizeof err, "the cache is attached (mode %s); detach it first",
                 tc_mode_name(vol->mode));
    } else if (paths && paths[0] && check_paths(vol, paths, err, sizeof err) < 0) {
        code = -EINVAL;
    }
    if (code) {
        msg(vol->op_error, sizeof vol->op_error, "attach refused: %s", err);
        done(arg, code);
        return;
    }
    struct cache *c = vol->cache;
    struct attach_op *op = tc_xcalloc(1, sizeof *op);
    op->vol = vol;
    op->done = done;
    op->arg = arg;
    op->mode = mode ? *mode : vol->mode_before_detach;
    op->wait.fn = attach_wait_fn;
    op->old_paths = tc_xcalloc(c->ndevs + 1, sizeof *op->old_paths);
    for (unsigned d = 0; d < c->ndevs; d++)
        op->old_paths[d] = tc_xstrdup(c->devs[d].dev->name);
    op->paths = paths && paths[0] ? copy_paths(paths)
                                  : copy_paths((const char *const *)op->old_paths);
    tc_info("attach: %s%s", op->paths[0], c->ndevs > 1 ? ", ..." : "");
    /* The gate, as for a detach: new requests wait, and the ones still
     * using the detached cache (lost_passthrough) finish first. */
    vol->detaching = true;
    vol->attaching = true;
    vol->gate = true;
    vol->gate_op = op;
    vol->gate_task.fn = attach_quiet;
    reactor_defer(vol->reactor, &vol->gate_task);
}
