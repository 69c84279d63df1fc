/*
 * A volume: opening and closing it, the request entry point, and its
 * figures.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cache.h"
#include "engine/engine.h"
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
}

struct tc_volume *tc_volume_open(struct tc_reactor *r, const struct tc_volume_config *cfg,
                                 char *err, size_t errlen)
{
    struct tc_dev *origin = dev_open(r, cfg->origin, cfg->read_only, err, errlen);
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
    struct tc_volume *vol = tc_xcalloc(1, sizeof *vol);
    vol->reactor = r;
    vol->cfg = *cfg;
    vol->origin = origin;
    vol->size = size;
    vol->read_only = cfg->read_only;
    vol->mode = cfg->caches && cfg->caches[0] ? cfg->mode : TC_MODE_PASSTHROUGH;
    vol->opened_ns = tc_now_ns();
    if (cfg->caches && cfg->caches[0]) {
        if (cache_open(vol, cfg->caches, err, errlen) < 0) {
            dev_close(origin);
            free(vol);
            return NULL;
        }
    }
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
    struct ereq *e = tc_xcalloc(1, sizeof *e);
    e->vol = vol;
    e->start_ns = tc_now_ns();
    vol->inflight++;
    return e;
}

void ereq_free(struct ereq *e)
{
    e->vol->inflight--;
    free(e);
}

void engine_dispatch(struct ereq *e)
{
    if (e->vol->cache && !e->vol->detached && !e->vol->cache_failed)
        cache_submit(e);
    else
        passthrough_submit(e);
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
    int err = e->err;
    ereq_free(e);
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
    /* Shared: only a read-modify-write of the same sectors waits. */
    e->after_unlock = e->complete;
    e->complete = locked_complete;
    e->lock.start = e->off;
    e->lock.end = e->off + e->len;
    e->lock.exclusive = false;
    e->lock.granted_cb = lock_granted;
    if (rl_acquire(&e->vol->locks, &e->lock))
        engine_dispatch(e);
}

void tc_submit(struct tc_volume *vol, struct tc_request *req)
{
    if (req->op < TC_ARRAY_SIZE(vol->stats.requests))
        vol->stats.requests[req->op]++;
    if (align_needed(req)) {
        align_submit(vol, req);
        return;
    }
    struct ereq *e = ereq_new(vol);
    e->op = req->op;
    e->flags = req->flags;
    e->off = req->offset;
    e->len = req->length;
    e->buf = req->buf;
    e->extents = req->extents;
    e->max_extents = req->max_extents;
    e->complete = user_complete;
    e->owner = req;
    engine_submit_locked(e);
}

/* ---- close ---- */

static void close_flushed(struct tc_dev_io *dio, int err)
{
    struct tc_volume *vol = container_of(dio, struct tc_volume, close_dio);
    if (err)
        tc_error("%s: flush at shutdown failed: %s", vol->origin->name, strerror(-err));
    vol->close_done(vol->close_arg, err);
}

static void cache_closed(void *arg, int err)
{
    struct tc_volume *vol = arg;
    if (err) {
        vol->close_done(vol->close_arg, err);
        return;
    }
    if (vol->read_only || !vol->origin->can_flush) {
        vol->close_done(vol->close_arg, 0);
        return;
    }
    memset(&vol->close_dio, 0, sizeof vol->close_dio);
    vol->close_dio.op = TC_DEV_FLUSH;
    vol->close_dio.cb = close_flushed;
    dev_submit(vol->origin, &vol->close_dio);
}

void tc_volume_close(struct tc_volume *vol, void (*done)(void *arg, int err), void *arg)
{
    vol->closing = true;
    vol->close_done = done;
    vol->close_arg = arg;
    if (vol->cache) {
        cache_close(vol->cache, cache_closed, vol);
        return;
    }
    if (vol->read_only || !vol->origin->can_flush) {
        done(arg, 0);
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
    cache_free(vol->cache);
    dev_close(vol->origin);
    free(vol);
}

enum tc_mode tc_volume_mode(const struct tc_volume *vol) { return vol->mode; }

/* ---- online operations ---- */

struct online_op {
    struct tc_volume *vol;
    struct tc_dev_io dio;
    tc_progress_fn progress;
    void (*done)(void *arg, int err);
    void *arg;
};

static void op_progress(void *arg, uint64_t left, uint64_t done_bytes)
{
    struct online_op *op = arg;
    if (op->progress)
        op->progress(op->arg, left, done_bytes);
}

static void origin_flushed_op(struct tc_dev_io *dio, int err)
{
    struct online_op *op = container_of(dio, struct online_op, dio);
    void (*done)(void *, int) = op->done;
    void *arg = op->arg;
    free(op);
    done(arg, err);
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

void tc_volume_flush_dirty(struct tc_volume *vol, tc_progress_fn progress,
                           void (*done)(void *arg, int err), void *arg)
{
    if (vol->cache && !vol->detached)
        cache_flush_dirty(vol->cache, progress, done, arg);
    else
        flush_origin_only(vol, done, arg);
}

static void detached(void *arg, int err)
{
    struct online_op *op = arg;
    if (err == 0) {
        op->vol->detached = true;
        tc_info("cache detached: serving the origin directly");
    }
    void (*done)(void *, int) = op->done;
    void *a = op->arg;
    free(op);
    done(a, err);
}

void tc_volume_detach(struct tc_volume *vol, tc_progress_fn progress,
                      void (*done)(void *arg, int err), void *arg)
{
    if (vol->cache == NULL || vol->detached) {
        done(arg, vol->cache ? -EALREADY : -ENODEV);
        return;
    }
    struct online_op *op = tc_xcalloc(1, sizeof *op);
    op->vol = vol;
    op->progress = progress;
    op->done = done;
    op->arg = arg;
    /* From now on writes only invalidate; then drain and empty the cache. */
    vol->mode = TC_MODE_PASSTHROUGH;
    cache_detach(vol->cache, op_progress, detached, op);
}

void tc_volume_set_mode(struct tc_volume *vol, enum tc_mode mode, tc_progress_fn progress,
                        void (*done)(void *arg, int err), void *arg)
{
    if (vol->cache == NULL || vol->detached) {
        done(arg, mode == TC_MODE_PASSTHROUGH ? 0 : -ENODEV);
        return;
    }
    enum tc_mode old = vol->mode;
    vol->mode = mode;
    if (old != mode)
        tc_info("mode: %s -> %s", tc_mode_name(old), tc_mode_name(mode));
    if (old == TC_MODE_WRITEBACK && mode != TC_MODE_WRITEBACK) {
        /* New writes no longer add dirty data: drain what there is. */
        cache_flush_dirty(vol->cache, progress, done, arg);
        return;
    }
    done(arg, 0);
}

static void dev_json(struct tc_json *j, const char *key, struct tc_dev *d)
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
    json_uint(j, "read_errors", d->stats.read_errors);
    json_uint(j, "write_errors", d->stats.write_errors);
    json_uint(j, "other_errors", d->stats.other_errors);
    json_uint(j, "inflight", d->stats.inflight);
    json_end_object(j);
}

static const char *op_key[] = { "read", "write", "flush", "trim", "write_zeroes", "cache",
                                "block_status" };

void tc_volume_status_json(struct tc_volume *vol, struct tc_json *j)
{
    json_string(j, "mode", tc_mode_name(vol->mode));
    json_bool(j, "detached", vol->detached);
    json_string(j, "health", vol->cache ? vol->cache->health : "ok");
    json_uint(j, "size", vol->size);
    json_bool(j, "read_only", vol->read_only);
    json_double(j, "uptime_seconds", (double)(tc_now_ns() - vol->opened_ns) / 1e9);
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
    dev_json(j, "origin", vol->origin);
    if (vol->cache && !vol->detached)
        cache_status_json(vol->cache, j);
}
