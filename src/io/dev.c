#include "io/dev.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/assert.h"
#include "util/log.h"
#include "util/misc.h"

const char *dev_op_name(enum tc_dev_op op)
{
    switch (op) {
    case TC_DEV_READ: return "read";
    case TC_DEV_WRITE: return "write";
    case TC_DEV_FLUSH: return "flush";
    case TC_DEV_TRIM: return "trim";
    case TC_DEV_ZERO: return "write-zeroes";
    case TC_DEV_BLOCK_STATUS: return "block-status";
    }
    return "?";
}

bool dev_is_nbd_uri(const char *path)
{
    return strncmp(path, "nbd://", 6) == 0 || strncmp(path, "nbd+unix://", 11) == 0 ||
           strncmp(path, "nbds://", 7) == 0 || strncmp(path, "nbds+unix://", 12) == 0 ||
           strncmp(path, "nbd+vsock://", 12) == 0;
}

struct tc_dev *dev_open_local_as(struct tc_reactor *r, const char *path, const char *role,
                                 bool read_only, char *err, size_t errlen)
{
    if (strncmp(path, "testdev:", 8) == 0)
        return dev_test_open_as(r, path, role, read_only, err, errlen);
    if (dev_is_mem(path))
        return dev_mem_open_as(r, path, role, read_only, err, errlen);
    return dev_file_open_as(r, path, role, read_only, err, errlen);
}

struct tc_dev *dev_open_as(struct tc_reactor *r, const char *path, const char *role,
                           bool read_only, char *err, size_t errlen)
{
    if (dev_is_nbd_uri(path))
        return dev_nbd_open(r, path, read_only, err, errlen);
    return dev_open_local_as(r, path, role, read_only, err, errlen);
}

struct tc_dev *dev_open_local(struct tc_reactor *r, const char *path, bool read_only,
                              char *err, size_t errlen)
{
    return dev_open_local_as(r, path, "device", read_only, err, errlen);
}

struct tc_dev *dev_open(struct tc_reactor *r, const char *path, bool read_only, char *err,
                        size_t errlen)
{
    return dev_open_as(r, path, "device", read_only, err, errlen);
}

void dev_close(struct tc_dev *dev)
{
    if (dev)
        dev->ops->close(dev);
}

void dev_quiesce(struct tc_dev *dev)
{
    if (dev && dev->ops->quiesce)
        dev->ops->quiesce(dev);
}

bool dev_abort(struct tc_dev *dev)
{
    if (dev == NULL || dev->ops->abort == NULL)
        return false;
    dev->ops->abort(dev);
    return true;
}

const char *dev_state_name(enum tc_dev_state s)
{
    switch (s) {
    case TC_DEV_ONLINE: return "online";
    case TC_DEV_RECONNECTING: return "reconnecting";
    case TC_DEV_OFFLINE: return "offline";
    }
    return "?";
}

double dev_offline_seconds(const struct tc_dev *dev, bool current_only)
{
    uint64_t cur = dev->offline_since_ns ? tc_now_ns() - dev->offline_since_ns : 0;
    return (double)(cur + (current_only ? 0 : dev->offline_total_ns)) / 1e9;
}

static void finish(struct tc_dev_io *dio, int err);

static void run_deferred(struct tc_task *task)
{
    struct tc_dev *dev = container_of(task, struct tc_dev, deferred_task);
    struct tc_dev_io *list = dev->deferred_head;
    dev->deferred_head = NULL;
    dev->deferred_tail = &dev->deferred_head;
    while (list) {
        struct tc_dev_io *dio = list;
        list = dio->next;
        finish(dio, dio->status);
    }
}

void dev_complete(struct tc_dev_io *dio, int err)
{
    struct tc_dev *dev = dio->dev;
    if (dev->submitting) {
        /* Finished inside dev_submit(): complete it from the reactor. */
        if (dev->deferred_head == NULL)
            dev->deferred_tail = &dev->deferred_head;
        dio->status = err;
        dio->next = NULL;
        *dev->deferred_tail = dio;
        dev->deferred_tail = &dio->next;
        dev->deferred_task.fn = run_deferred;
        reactor_defer(dev->reactor, &dev->deferred_task);
        return;
    }
    finish(dio, err);
}

/*
 * Device completions running now (finish()), for dev_sync_io()'s check.
 * dev_sync_io() runs the reactor until its own I/O ends: called from a
 * completion -- the live data path, where each request is a state machine
 * driven by them -- it would run other requests' callbacks under a caller
 * half way through its own step (the event loop re-entered) and stall
 * every client behind one device's answer.  Its callers (start-up and
 * recovery, format, check, salvage, attach's gated steps) run outside any
 * completion; the sanitizer build asserts that a new one does too.  (A
 * caller in a timer or a deferred task of the data path is not caught.)
 */
static unsigned completions_running;

/* A read or a write that ended well: one more sample of the device's
 * cost (struct tc_dev_cost). */
static void cost_sample(struct tc_dev *dev, const struct tc_dev_io *dio)
{
    unsigned k, o = dio->op == TC_DEV_READ ? DEV_COST_READ : DEV_COST_WRITE;
    if (dio->len <= DEV_COST_SMALL)
        k = 0;
    else if (dio->len >= DEV_COST_LARGE)
        k = 1;
    else
        return;
    struct tc_dev_cost *c = &dev->cost;
    double ns = (double)(tc_now_ns() - dio->start_ns), len = (double)dio->len;
    uint64_t n = c->samples[o][k]++;
    if (n < DEV_COST_MIN) {
        c->len[o][k] += (len - c->len[o][k]) / (double)(n + 1);
        c->first_ns[o][k][n] = ns;
        if (n + 1 == DEV_COST_MIN) {
            /* The median of the first times (insertion sort of 8). */
            double *v = c->first_ns[o][k];
            for (unsigned i = 1; i < DEV_COST_MIN; i++)
                for (unsigned m = i; m > 0 && v[m - 1] > v[m]; m--) {
                    double t = v[m];
                    v[m] = v[m - 1];
                    v[m - 1] = t;
                }
            c->ns[o][k] = (v[DEV_COST_MIN / 2 - 1] + v[DEV_COST_MIN / 2]) / 2;
        }
        return;
    }
    ns = TC_MAX(TC_MIN(ns, c->ns[o][k] * DEV_COST_CLIP), c->ns[o][k] / DEV_COST_CLIP);
    c->len[o][k] += (len - c->len[o][k]) / DEV_COST_WEIGHT;
    c->ns[o][k] += (ns - c->ns[o][k]) / DEV_COST_WEIGHT;
}

bool dev_cost_estimate(const struct tc_dev *dev, unsigned op, double *request_ns, double *byte_ns)
{
    const struct tc_dev_cost *c = &dev->cost;
    *request_ns = *byte_ns = 0;
    if (c->samples[op][0] < DEV_COST_MIN || c->samples[op][1] < DEV_COST_MIN ||
        c->len[op][1] <= c->len[op][0])
        return false;
    *byte_ns = TC_MAX((c->ns[op][1] - c->ns[op][0]) / (c->len[op][1] - c->len[op][0]), 0.0);
    *request_ns = TC_MAX(c->ns[op][0] - c->len[op][0] * *byte_ns, 0.0);
    return true;
}

bool dev_cost_class(const struct tc_dev *dev, unsigned op, unsigned k, double *ns, double *len)
{
    const struct tc_dev_cost *c = &dev->cost;
    bool known = c->samples[op][k] >= DEV_COST_MIN;
    *ns = known ? c->ns[op][k] : 0;
    *len = known ? c->len[op][k] : 0;
    return known;
}

static void finish(struct tc_dev_io *dio, int err)
{
    struct tc_dev *dev = dio->dev;
    struct tc_dev_stats *s = &dev->stats;
    s->inflight--;
    if (err == 0 && dio->alone)
        cost_sample(dev, dio);
    switch (dio->op) {
    case TC_DEV_READ:
        s->reads++;
        if (err == 0)
            s->read_bytes += dio->len;
        else
            s->read_errors++;
        break;
    case TC_DEV_WRITE:
        s->writes++;
        if (err == 0)
            s->write_bytes += dio->len;
        else
            s->write_errors++;
        break;
    case TC_DEV_FLUSH:
        s->flushes++;
        if (err)
            s->other_errors++;
        break;
    case TC_DEV_TRIM:
        s->trims++;
        if (err)
            s->other_errors++;
        break;
    case TC_DEV_ZERO:
        s->zeroes++;
        if (err && err != -ENOTSUP && err != -EOPNOTSUPP)
            s->other_errors++;
        break;
    case TC_DEV_BLOCK_STATUS:
        s->block_status++;
        if (err)
            s->other_errors++;
        break;
    }
    if (err && !(dio->op == TC_DEV_ZERO && (dio->flags & TC_DEV_FAST_ZERO) &&
                 (err == -ENOTSUP || err == -EOPNOTSUPP))) {
        dev->consecutive_errors++;
        if (dio->seq > dev->episode_mark) {
            dev->error_episodes++;
            dev->episode_mark = dev->submitted;
        }
        /* Log the first errors of a burst in full, then one line in 1000. */
        if (dev->consecutive_errors <= 10 || dev->consecutive_errors % 1000 == 0)
            tc_error("%s: %s of %llu bytes at offset %llu failed: %s%s", dev->name,
                     dev_op_name(dio->op), (unsigned long long)dio->len,
                     (unsigned long long)dio->off, strerror(-err),
                     dev->consecutive_errors == 10 ? " (further errors logged 1 in 1000)" : "");
    } else if (err == 0) {
        dev->consecutive_errors = 0;
        dev->error_episodes = 0;
    }
    completions_running++;
    dio->cb(dio, err);
    completions_running--;
}

struct sync_io {
    struct tc_dev_io dio;
    bool done;
    int err;
};

static void sync_done(struct tc_dev_io *dio, int err)
{
    struct sync_io *s = container_of(dio, struct sync_io, dio);
    s->done = true;
    s->err = err;
}

int dev_sync_io(struct tc_dev *dev, enum tc_dev_op op, void *buf, uint64_t off, uint64_t len,
                unsigned flags)
{
    TC_ASSERT(completions_running == 0);    /* never on the data path: see finish() */
    struct sync_io s;
    memset(&s, 0, sizeof s);
    s.dio.op = op;
    s.dio.buf = buf;
    s.dio.off = off;
    s.dio.len = len;
    s.dio.flags = flags;
    s.dio.cb = sync_done;
    dev_submit(dev, &s.dio);
    while (!s.done)
        reactor_poll(dev->reactor, 100000000ull);
    return s.err;
}

enum dev_id_match dev_identity_matches(const struct tc_dev *d, const char *recorded,
                                       size_t recorded_len)
{
    if (strncmp(recorded, d->identity, recorded_len) == 0)
        return DEV_ID_SAME;
    if (d->legacy_identity[0] && strncmp(recorded, d->legacy_identity, recorded_len) == 0)
        return DEV_ID_LEGACY;
    /* A file or loop identity recorded without the birth time (by a build
     * before it was part of the identity): the same file system and inode
     * (and offset) is taken for this file, as that build took it, and the
     * record is rewritten with the birth time. */
    const char *b = strstr(d->identity, ":b");
    if (b && (strncmp(d->identity, "file:", 5) == 0 || strncmp(d->identity, "loop:", 5) == 0)) {
        size_t n = (size_t)(b - d->identity);
        if (n < recorded_len && strncmp(recorded, d->identity, n) == 0 &&
            (recorded[n] == '\0'))
            return DEV_ID_LEGACY;
    }
    return DEV_ID_OTHER;
}
