/*
 * A remote NBD export as a device, through libnbd's asynchronous API.
 *
 * Each connection is a libnbd handle whose socket the reactor polls:
 *
 *   dev_submit ─► nbd_aio_pread/... (libnbd queues and sends what it can)
 *   POLLIN  ─► nbd_aio_notify_read   ─► completion callbacks
 *   POLLOUT ─► nbd_aio_notify_write     (armed only while libnbd has
 *                                        bytes to send)
 *
 * libnbd's callbacks run with the handle locked, so they only move the
 * finished request to a list; the list is completed after libnbd returns.
 * When the server offers multi-conn, several connections share the load
 * (a flush on any of them covers writes completed on all of them).
 */
#include "io/dev.h"

#include <errno.h>
#include <libnbd.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "util/misc.h"

#define NBD_MAX_CONNS 4
/* A private request flag: this flush completes an emulated FUA write. */
#define FUA_FLUSH (1u << 31)

struct nbd_conn {
    struct dev_nbd *owner;
    struct nbd_handle *h;
    int fd;
    struct tc_io read_poll, write_poll;
    struct tc_io cancel_read, cancel_write;     /* cancelling the polls at close */
    bool read_armed, write_armed;
    bool dead;
    unsigned inflight;
};

struct dev_nbd {
    struct tc_dev dev;
    struct nbd_conn conn[NBD_MAX_CONNS];
    unsigned nconn, next;
    uint64_t max_request;
    struct tc_dev_io *finished;     /* completed by callbacks, not yet reported */
    struct tc_task drain;
};


static void conn_arm(struct nbd_conn *c);
static void nbd_issue(struct dev_nbd *n, struct tc_dev_io *dio);

static void drain_finished(struct tc_task *t)
{
    struct dev_nbd *n = container_of(t, struct dev_nbd, drain);
    while (n->finished) {
        struct tc_dev_io *dio = n->finished;
        n->finished = dio->next;
        int err = -dio->status;
        if (err == 0 && dio->op == TC_DEV_WRITE && (dio->flags & TC_DEV_FUA) &&
            !n->dev.can_fua) {
            /* FUA emulated: the write is done, now the flush. */
            dio->flags = (dio->flags & ~TC_DEV_FUA) | FUA_FLUSH;
            dio->op = TC_DEV_FLUSH;
            nbd_issue(n, dio);
            continue;
        }
        if (dio->flags & FUA_FLUSH) {
            /* The flush of an emulated FUA write: report it as the write. */
            dio->flags = (dio->flags & ~FUA_FLUSH) | TC_DEV_FUA;
            dio->op = TC_DEV_WRITE;
        }
        dev_complete(dio, err);
    }
}

struct nbd_cb_ctx {
    struct dev_nbd *n;
    struct nbd_conn *c;
    struct tc_dev_io *dio;
    uint64_t pieces_left;
    int err;
};

static int completion_cb(void *user_data, int *error)
{
    struct nbd_cb_ctx *ctx = user_data;
    if (*error && ctx->err == 0)
        ctx->err = *error;
    ctx->c->inflight--;
    if (--ctx->pieces_left == 0) {
        struct tc_dev_io *dio = ctx->dio;
        dio->status = ctx->err;
        dio->next = ctx->n->finished;
        ctx->n->finished = dio;
        reactor_defer(ctx->n->dev.reactor, &ctx->n->drain);
        free(ctx);
    }
    return 1;
}

static void conn_fail(struct nbd_conn *c, const char *why)
{
    if (c->dead)
        return;
    c->dead = true;
    tc_error("%s: connection to the NBD server lost: %s", c->owner->dev.name, why);
}

static void read_poll_done(struct tc_io *io, int res)
{
    struct nbd_conn *c = container_of(io, struct nbd_conn, read_poll);
    c->read_armed = false;
    if (c->dead)
        return;
    if (res < 0 && res != -ECANCELED) {
        conn_fail(c, strerror(-res));
        return;
    }
    if (nbd_aio_notify_read(c->h) < 0)
        conn_fail(c, nbd_get_error());
    conn_arm(c);
}

static void write_poll_done(struct tc_io *io, int res)
{
    struct nbd_conn *c = container_of(io, struct nbd_conn, write_poll);
    c->write_armed = false;
    if (c->dead)
        return;
    if (res < 0 && res != -ECANCELED) {
        conn_fail(c, strerror(-res));
        return;
    }
    if (nbd_aio_notify_write(c->h) < 0)
        conn_fail(c, nbd_get_error());
    conn_arm(c);
}

static void conn_arm(struct nbd_conn *c)
{
    struct tc_reactor *r = c->owner->dev.reactor;
    if (c->dead)
        return;
    unsigned dir = nbd_aio_get_direction(c->h);
    if ((dir & LIBNBD_AIO_DIRECTION_READ) && !c->read_armed) {
        c->read_poll.done = read_poll_done;
        io_uring_prep_poll_add(reactor_sqe(r, &c->read_poll), c->fd, POLLIN);
        c->read_armed = true;
    }
    if ((dir & LIBNBD_AIO_DIRECTION_WRITE) && !c->write_armed) {
        c->write_poll.done = write_poll_done;
        io_uring_prep_poll_add(reactor_sqe(r, &c->write_poll), c->fd, POLLOUT);
        c->write_armed = true;
    }
}

static struct nbd_conn *pick_conn(struct dev_nbd *n)
{
    for (unsigned i = 0; i < n->nconn; i++) {
        struct nbd_conn *c = &n->conn[n->next++ % n->nconn];
        if (!c->dead)
            return c;
    }
    return NULL;
}

static void nbd_issue(struct dev_nbd *n, struct tc_dev_io *dio)
{
    struct nbd_conn *c = pick_conn(n);
    if (c == NULL) {
        dio->status = EIO;
        dio->next = n->finished;
        n->finished = dio;
        reactor_defer(n->dev.reactor, &n->drain);
        return;
    }
    struct nbd_cb_ctx *ctx = tc_xcalloc(1, sizeof *ctx);
    ctx->n = n;
    ctx->c = c;
    ctx->dio = dio;
    uint64_t len = dio->op == TC_DEV_FLUSH ? 0 : dio->len;
    uint64_t pieces = len == 0 ? 1 : (len + n->max_request - 1) / n->max_request;
    ctx->pieces_left = pieces;
    for (uint64_t i = 0; i < pieces; i++) {
        uint64_t off = dio->off + i * n->max_request;
        uint64_t plen = TC_MIN(n->max_request, len - i * n->max_request);
        char *buf = (char *)dio->buf + i * n->max_request;
        nbd_completion_callback cb = { .callback = completion_cb, .user_data = ctx };
        int64_t cookie;
        uint32_t fl;
        switch (dio->op) {
        case TC_DEV_READ:
            cookie = nbd_aio_pread(c->h, buf, plen, off, cb, 0);
            break;
        case TC_DEV_WRITE:
            fl = ((dio->flags & TC_DEV_FUA) && n->dev.can_fua) ? LIBNBD_CMD_FLAG_FUA : 0;
            cookie = nbd_aio_pwrite(c->h, buf, plen, off, cb, fl);
            break;
        case TC_DEV_FLUSH:
            cookie = nbd_aio_flush(c->h, cb, 0);
            break;
        case TC_DEV_TRIM:
            if (!n->dev.can_trim) {
                cookie = -2;
                break;
            }
            cookie = nbd_aio_trim(c->h, plen, off, cb, 0);
            break;
        case TC_DEV_ZERO:
            fl = 0;
            if (dio->flags & TC_DEV_NO_HOLE)
                fl |= LIBNBD_CMD_FLAG_NO_HOLE;
            if (dio->flags & TC_DEV_FAST_ZERO) {
                if (!nbd_can_fast_zero(c->h)) {
                    cookie = -3;
                    break;
                }
                fl |= LIBNBD_CMD_FLAG_FAST_ZERO;
            }
            cookie = nbd_aio_zero(c->h, plen, off, cb, fl);
            break;
        default:
            cookie = -1;
        }
        if (cookie >= 0) {
            c->inflight++;
            continue;
        }
        /* Not sent: account this piece as finished with an error. */
        int e = cookie == -2 ? 0 : cookie == -3 ? ENOTSUP : (nbd_get_errno() ? nbd_get_errno() : EIO);
        if (cookie == -1)
            tc_error("%s: %s at offset %llu not sent: %s", n->dev.name, dev_op_name(dio->op),
                     (unsigned long long)off, nbd_get_error());
        c->inflight++;
        int err = e;
        completion_cb(ctx, &err);
    }
    conn_arm(c);
}

static void dev_nbd_submit(struct tc_dev *dev, struct tc_dev_io *dio)
{
    struct dev_nbd *n = container_of(dev, struct dev_nbd, dev);
    nbd_issue(n, dio);
}

static void cancel_done(struct tc_io *io, int res)
{
    (void)io;
    (void)res;
}

/* Polls armed on a connection stay in the ring even after its socket is
 * closed: cancel them and wait until they have completed, or the reactor
 * would wait for them forever and complete them into freed memory. */
static void cancel_polls(struct dev_nbd *n)
{
    struct tc_reactor *r = n->dev.reactor;
    bool any = false;
    for (unsigned i = 0; i < n->nconn; i++) {
        struct nbd_conn *c = &n->conn[i];
        if (c->read_armed) {
            c->cancel_read.done = cancel_done;
            io_uring_prep_cancel(reactor_sqe(r, &c->cancel_read), &c->read_poll, 0);
            any = true;
        }
        if (c->write_armed) {
            c->cancel_write.done = cancel_done;
            io_uring_prep_cancel(reactor_sqe(r, &c->cancel_write), &c->write_poll, 0);
            any = true;
        }
    }
    while (any) {
        reactor_poll(r, 100000000ull);
        any = false;
        for (unsigned i = 0; i < n->nconn; i++)
            any |= n->conn[i].read_armed || n->conn[i].write_armed;
    }
}

static void dev_nbd_close(struct tc_dev *dev)
{
    struct dev_nbd *n = container_of(dev, struct dev_nbd, dev);
    bool alive[NBD_MAX_CONNS];
    for (unsigned i = 0; i < n->nconn; i++) {
        alive[i] = !n->conn[i].dead;
        n->conn[i].dead = true;     /* a poll completing now does nothing more */
    }
    cancel_polls(n);
    for (unsigned i = 0; i < n->nconn; i++) {
        if (n->conn[i].h) {
            if (alive[i])
                nbd_shutdown(n->conn[i].h, 0);
            nbd_close(n->conn[i].h);
        }
    }
    free(n->dev.name);
    free(n);
}

static const struct tc_dev_ops nbd_ops = { .submit = dev_nbd_submit, .close = dev_nbd_close };

static struct nbd_handle *connect_one(const char *uri, char *err, size_t errlen)
{
    struct nbd_handle *h = nbd_create();
    if (h == NULL) {
        snprintf(err, errlen, "%s: %s", uri, nbd_get_error());
        return NULL;
    }
    if (nbd_connect_uri(h, uri) < 0) {
        snprintf(err, errlen, "%s: cannot connect: %s", uri, nbd_get_error());
        nbd_close(h);
        return NULL;
    }
    return h;
}

struct tc_dev *dev_nbd_open(struct tc_reactor *r, const char *uri, bool read_only, char *err,
                            size_t errlen)
{
    struct nbd_handle *h = connect_one(uri, err, errlen);
    if (h == NULL)
        return NULL;
    int64_t size = nbd_get_size(h);
    if (size < 0) {
        snprintf(err, errlen, "%s: cannot read the export size: %s", uri, nbd_get_error());
        nbd_close(h);
        return NULL;
    }
    if (!read_only && nbd_is_read_only(h) == 1) {
        snprintf(err, errlen, "%s: the export is read-only (serve it with --read-only)", uri);
        nbd_close(h);
        return NULL;
    }
    struct dev_nbd *n = tc_xcalloc(1, sizeof *n);
    struct tc_dev *d = &n->dev;
    d->ops = &nbd_ops;
    d->reactor = r;
    d->name = tc_xstrdup(uri);
    d->size = (uint64_t)size;
    d->read_only = read_only;
    d->direct_io = true;
    d->can_flush = nbd_can_flush(h) == 1;
    d->can_fua = nbd_can_fua(h) == 1;
    d->can_trim = nbd_can_trim(h) == 1;
    d->can_zero = nbd_can_zero(h) == 1;
    d->can_multi_conn = nbd_can_multi_conn(h) == 1;
    d->rotational = false;
    d->logical_block = 512;
    int64_t minbs = nbd_get_block_size(h, LIBNBD_SIZE_MINIMUM);
    if (minbs > 0)
        d->logical_block = (unsigned)minbs;
    int64_t maxbs = nbd_get_block_size(h, LIBNBD_SIZE_MAXIMUM);
    n->max_request = maxbs > 0 ? (uint64_t)maxbs : 32u << 20;
    if (n->max_request > 32u << 20)
        n->max_request = 32u << 20;
    snprintf(d->identity, sizeof d->identity, "nbd:%s", uri);
    n->drain.fn = drain_finished;

    n->nconn = 1;
    n->conn[0].h = h;
    if (d->can_multi_conn) {
        for (unsigned i = 1; i < NBD_MAX_CONNS; i++) {
            char e2[256];
            struct nbd_handle *h2 = connect_one(uri, e2, sizeof e2);
            if (h2 == NULL) {
                tc_warn("%s: extra connection %u failed (%s); using %u", uri, i + 1, e2,
                        n->nconn);
                break;
            }
            n->conn[n->nconn++].h = h2;
        }
    }
    for (unsigned i = 0; i < n->nconn; i++) {
        n->conn[i].owner = n;
        n->conn[i].fd = nbd_aio_get_fd(n->conn[i].h);
        conn_arm(&n->conn[i]);
    }
    return d;
}
