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
 *
 * Losing the server.  A connection dies on EOF, a socket error or a
 * protocol error; libnbd then fails its commands with ENOTCONN.  Those
 * requests are not failed: reads and writes of whole ranges are
 * idempotent, so they are sent again once a connection is back (a write
 * whose outcome is unknown is simply written again).  Meanwhile:
 *
 *   online ──(last connection lost)──► reconnecting: requests are held
 *      ▲                                   │
 *      │ a connection is ready             │ hold_timeout_ns without one
 *      │ (same export size)                ▼
 *      └───────────────────────────── offline: held and new requests
 *                                       fail with EIO at once
 *
 * Reconnection never blocks the reactor: nbd_aio_connect_uri() starts it
 * and the handshake is driven by the same polls as the data.  Attempts
 * are spaced by an exponential backoff (100 ms doubling to 5 s; for tests
 * only, TIERCACHE_TEST_ORIGIN_BACKOFF_MAX_MS sets the most, so that a test
 * of an origin coming back does not wait out the 5 s) and go on
 * in the background for as long as the device is open.  A server that now
 * exports a different size is refused: the cache's block numbers would no
 * longer mean the same data.
 *
 * An error reply from a live server (EIO, ENOSPC...) is the request's
 * result: it is reported, not retried here (the engine decides).
 *
 * A connection that stays up but stops answering (no reply for
 * --origin-timeout while requests wait) is fenced, so that one stuck
 * connection cannot hang the volume:
 *
 *   ready ──(no reply for the stall time)──► fenced: shutdown(SHUT_WR),
 *     given up like a lost connection (a new one is opened); its reads
 *     go again elsewhere, its flushes fail (EIO), its writes, trims and
 *     write-zeroes fail in doubt (ETIMEDOUT: the engine keeps the newest
 *     version authoritative, see writepath.c and writeback.c)
 *        │
 *        │ the server closes it (end of file, reset): it has done with
 *        ▼ every request it read from it
 *     ended: writes overlapping its writes' ranges, held until now, go
 *
 * While a fence with writes is open, a write, trim or write-zeroes that
 * overlaps one of them waits (at most the hold time, then EIO; never
 * sent, so not in doubt): sent earlier, it could land before the old one
 * the server still executes.  So the newest version of a range reaches
 * the origin after the old write did, and the flush that follows it
 * covers it.  This relies on a server closing a connection only once each
 * request it read from it is finished or refused (nbdkit answers those it
 * has not started with ESHUTDOWN); one that closes it while a write is
 * still being executed can put older data down last, which no client can
 * prevent.  A server that never closes it keeps the range's writes
 * waiting -- dirty in a writeback cache, failing in the other modes --
 * rather than risk older data landing last.
 */
#include "io/dev.h"

#include <errno.h>
#include <libnbd.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "tiercache.h"
#include "util/crc32c.h"
#include "util/log.h"
#include "util/misc.h"

#define NBD_MAX_CONNS 4
/* A private request flag: this flush completes an emulated FUA write. */
#define FUA_FLUSH (1u << 31)
/* Device private too: the request was sent on a connection that died
 * before its reply.  A write, trim or write-zeroes so sent may have been
 * done by the server: if it fails now, it fails in doubt (ETIMEDOUT), as a
 * fenced one does, never as a plain error the engine would take for "not
 * done" (it would then serve the range's older data, and the server's
 * later answer to reads could be the failed write's). */
#define SENT_BEFORE (1u << 30)

static int failure_of(const struct tc_dev_io *dio)
{
    if (dio->flags & FUA_FLUSH)
        return ETIMEDOUT;   /* the flush of an emulated FUA write: the write was done */
    bool changes = dio->op == TC_DEV_WRITE || dio->op == TC_DEV_TRIM || dio->op == TC_DEV_ZERO;
    return changes && (dio->flags & SENT_BEFORE) ? ETIMEDOUT : EIO;
}
/* dio->status of a request to send again (its connection was lost). */
#define STATUS_RETRY (-1)
/* The most one block status command asks about (NBD lengths are 32-bit). */
#define BLOCK_STATUS_MAX (1ull << 30)

#define BACKOFF_FIRST_NS (100ull * 1000 * 1000)
#define BACKOFF_MAX_NS (5000ull * 1000 * 1000)
/* A connection attempt (TCP connect plus handshake) that takes longer is
 * abandoned and counted as failed. */
#define CONNECT_TIMEOUT_NS (10000ull * 1000 * 1000)
/* A connection that dies sooner than this after its handshake does not
 * reset the backoff (a server that accepts and drops at once). */
#define STABLE_NS (1000ull * 1000 * 1000)

enum conn_state { C_CONNECTING, C_READY, C_DEAD };

struct nbd_cb_ctx;
struct dev_nbd;

/* A fenced connection the server has not closed yet: the writes it
 * carried (ranges r) may still land.  See stall_check(). */
struct fence {
    struct dev_nbd *n;
    struct nbd_handle *h;           /* given up; kept for its socket */
    int fd;
    struct tc_io poll, cancel;
    bool armed, cancelling;
    unsigned nr;
    struct { uint64_t off, len; } *r;
    struct fence *next;
};

/* A write that overlaps a range of an open fence, waiting for it to end. */
struct fence_wait {
    struct tc_dev_io *dio;
    uint64_t since;
    struct fence_wait *next;
};

struct nbd_conn {
    struct dev_nbd *owner;
    struct nbd_handle *h;
    enum conn_state state;
    struct tc_io read_poll, write_poll, cancel_read, cancel_write;
    bool read_armed, write_armed;
    unsigned cancels;               /* cancel requests the ring still holds */
    unsigned inflight;              /* commands whose completion has not run */
    struct nbd_cb_ctx *ctxs;        /* requests with commands on this handle */
    struct tc_timer connect_timer;
    uint64_t ready_ns;
    uint64_t progress_ns;           /* last reply, or when it last became busy */
    bool stalled;                   /* no reply for the stall time (reported) */
    bool fenced;                    /* closed for not answering: its writes are in doubt */
    bool issuing;                   /* inside an nbd_aio_* call that queues a command */
    unsigned unretired;             /* commands completed inside such a call, kept */
    struct nbd_conn *next_all;      /* every connection object, for close */
};

struct dev_nbd {
    struct tc_dev dev;
    struct nbd_conn *conn[NBD_MAX_CONNS];   /* live: connecting or ready */
    unsigned nwant;                 /* connections to keep */
    unsigned next;
    struct nbd_conn *all;
    uint64_t max_request;
    struct tc_dev_io *finished;     /* completed by callbacks, not yet reported */
    struct tc_task drain;
    struct tc_dev_io *held_head, **held_tail;
    struct tc_task release;         /* sends the held requests */
    struct tc_timer retry_timer, timeout_timer;
    struct tc_timer stall_timer;    /* looks for connections that stopped answering */
    struct fence *fences;           /* fenced connections not closed by the server */
    struct fence_wait *fence_waits; /* writes waiting for one of them to end */
    struct tc_task fence_release;   /* sends the writes no fence holds back now */
    uint64_t backoff_ns;
    uint64_t backoff_max_ns;        /* BACKOFF_MAX_NS, or the test variable */
    uint64_t attempts;              /* failed attempts in the current outage */
    bool stopped;
    bool aborted;                   /* dev_nbd_abort(): every request fails */
    char refusal[256];              /* the last reason a server was refused */
};

static void conn_arm(struct nbd_conn *c);
static void conn_fail(struct nbd_conn *c, const char *why, bool counts_as_attempt);
static void nbd_issue(struct dev_nbd *n, struct tc_dev_io *dio);

/* ---- finished requests ---- */

static void push_finished(struct dev_nbd *n, struct tc_dev_io *dio, int status)
{
    dio->status = status;
    dio->next = n->finished;
    n->finished = dio;
    reactor_defer(n->dev.reactor, &n->drain);
}

static void drain_finished(struct tc_task *t)
{
    struct dev_nbd *n = container_of(t, struct dev_nbd, drain);
    while (n->finished) {
        struct tc_dev_io *dio = n->finished;
        n->finished = dio->next;
        if (dio->status == STATUS_RETRY) {
            n->dev.stats.retried++;
            dio->flags |= SENT_BEFORE;
            if (dio->flags & FUA_FLUSH) {
                /* The flush of an emulated FUA write was lost with its
                 * connection: the write may be lost too, send both again. */
                dio->flags = (dio->flags & ~FUA_FLUSH) | TC_DEV_FUA;
                dio->op = TC_DEV_WRITE;
            }
            nbd_issue(n, dio);
            continue;
        }
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
        dio->flags &= ~SENT_BEFORE;
        dev_complete(dio, err);
    }
}

/* ---- commands ---- */

/* One request's commands on one connection (a large request is cut into
 * pieces of at most max_request bytes). */
struct nbd_cb_ctx {
    struct dev_nbd *n;
    struct nbd_conn *c;
    struct tc_dev_io *dio;
    uint64_t pieces_left;
    int err;
    bool lost;                      /* a piece died with its connection */
    bool got_extents;               /* BLOCK_STATUS: the server's extents are in */
    struct nbd_cb_ctx *prev, *next; /* on c->ctxs */
};

static void ctx_piece_done(struct nbd_cb_ctx *ctx)
{
    if (--ctx->pieces_left > 0)
        return;
    struct nbd_conn *c = ctx->c;
    if (ctx->prev)
        ctx->prev->next = ctx->next;
    else
        c->ctxs = ctx->next;
    if (ctx->next)
        ctx->next->prev = ctx->prev;
    push_finished(ctx->n, ctx->dio, ctx->lost ? STATUS_RETRY : ctx->err);
    free(ctx);
}

/* libnbd fails the commands of a connection that died with ENOTCONN; a
 * server that is shutting down answers ESHUTDOWN.  Neither is an answer
 * about the data: the request goes again on another connection. */
static bool connection_error(int e)
{
    return e == ENOTCONN || e == ESHUTDOWN;
}

static int completion_cb(void *user_data, int *error)
{
    struct nbd_cb_ctx *ctx = user_data;
    struct nbd_conn *c = ctx->c;
    c->progress_ns = tc_now_ns();
    if (c->stalled) {
        c->stalled = false;
        ctx->n->dev.stats.stalled_connections--;
        tc_info("%s: a stalled connection answers again", ctx->n->dev.name);
    }
    if (*error && connection_error(*error))
        ctx->lost = true;
    else if (*error && ctx->err == 0)
        ctx->err = *error;
    ctx->c->inflight--;
    ctx_piece_done(ctx);
    /* A command that completes inside the nbd_aio_* call queuing a
     * command (the connection dies while libnbd sends) must not be freed
     * there: libnbd 1.14 reads the queued command's cookie after its state
     * machine ran, and a command freed by returning 1 is then read after
     * free (its cookie comes back as whatever the allocator left).  Kept
     * on libnbd's done list, it is retired once the call has returned. */
    if (c->issuing) {
        c->unretired++;
        return 0;
    }
    return 1;
}

/* Retire the commands completed inside the last nbd_aio_* call (see
 * completion_cb).  Their completions have run: only libnbd's record of
 * them is left.  What a closed handle still holds, nbd_close() frees. */
static void retire_kept(struct nbd_conn *c)
{
    while (c->unretired > 0) {
        int64_t cookie = nbd_aio_peek_command_completed(c->h);
        if (cookie <= 0)
            break;
        (void)nbd_aio_command_completed(c->h, cookie);
        c->unretired--;
    }
    c->unretired = 0;
}

/* The server's base:allocation extents, into the request's array: those
 * of the range asked, cut at its end (a server may describe more). */
static int extent_cb(void *user_data, const char *metacontext, uint64_t offset,
                     uint32_t *entries, size_t nr_entries, int *error)
{
    struct nbd_cb_ctx *ctx = user_data;
    struct tc_dev_io *dio = ctx->dio;
    if (strcmp(metacontext, LIBNBD_CONTEXT_BASE_ALLOCATION) != 0 || ctx->got_extents ||
        offset != dio->off || nr_entries < 2)
        return 0;
    ctx->got_extents = true;
    uint64_t pos = dio->off, end = dio->off + TC_MIN(dio->len, BLOCK_STATUS_MAX);
    unsigned n = 0;
    for (size_t i = 0; i + 1 < nr_entries && n < dio->max_extents && pos < end; i += 2) {
        uint64_t len = TC_MIN((uint64_t)entries[i], end - pos);
        if (len == 0)
            break;
        dio->extents[n++] = (struct tc_extent){
            .length = len, .flags = entries[i + 1] & (TC_EXTENT_HOLE | TC_EXTENT_ZERO) };
        pos += len;
    }
    if (n > 0)
        dio->nr_extents = n;
    return 0;
}

static struct nbd_conn *pick_conn(struct dev_nbd *n)
{
    for (unsigned i = 0; i < NBD_MAX_CONNS; i++) {
        struct nbd_conn *c = n->conn[n->next++ % NBD_MAX_CONNS];
        if (c && c->state == C_READY)
            return c;
    }
    return NULL;
}

static void hold(struct dev_nbd *n, struct tc_dev_io *dio)
{
    dio->next = NULL;
    *n->held_tail = dio;
    n->held_tail = &dio->next;
    n->dev.stats.held++;
}

static bool fence_blocks(struct dev_nbd *n, const struct tc_dev_io *dio);
static void fence_wait_add(struct dev_nbd *n, struct tc_dev_io *dio);
static void fence_waits_run(struct dev_nbd *n, bool fail_all);

static void nbd_issue(struct dev_nbd *n, struct tc_dev_io *dio)
{
    if (n->aborted) {
        push_finished(n, dio, failure_of(dio));
        return;
    }
    if (n->fences && fence_blocks(n, dio)) {
        fence_wait_add(n, dio);
        return;
    }
    struct nbd_conn *c = pick_conn(n);
    if (c == NULL) {
        if (n->dev.state == TC_DEV_RECONNECTING && !n->stopped)
            hold(n, dio);
        else
            push_finished(n, dio, failure_of(dio));
        return;
    }
    struct nbd_cb_ctx *ctx = tc_xcalloc(1, sizeof *ctx);
    if (c->inflight == 0)
        c->progress_ns = tc_now_ns();   /* the wait for a reply starts now */
    ctx->n = n;
    ctx->c = c;
    ctx->dio = dio;
    ctx->next = c->ctxs;
    if (c->ctxs)
        c->ctxs->prev = ctx;
    c->ctxs = ctx;
    uint64_t len = dio->op == TC_DEV_FLUSH ? 0 : dio->len;
    if (dio->op == TC_DEV_BLOCK_STATUS) {
        /* One command, no payload: a shorter answer than asked is fine.
         * Until the server's extents come, the answer is "data", correct
         * for any range (a server without base:allocation on this
         * connection gives no extents). */
        len = TC_MIN(len, BLOCK_STATUS_MAX);
        dio->extents[0] = (struct tc_extent){ .length = len, .flags = 0 };
        dio->nr_extents = 1;
    }
    uint64_t pieces = len == 0 ? 1 : (len + n->max_request - 1) / n->max_request;
    if (dio->op == TC_DEV_BLOCK_STATUS)
        pieces = 1;
    /* One extra count while issuing: a completion that runs inside an
     * nbd_aio_* call (libnbd may find the connection dead right there)
     * cannot finish the request before every piece is accounted for. */
    ctx->pieces_left = pieces + 1;
    bool dead = false;
    for (uint64_t i = 0; i < pieces; i++) {
        uint64_t off = dio->off + i * n->max_request;
        uint64_t plen = TC_MIN(n->max_request, len - i * n->max_request);
        char *buf = (char *)dio->buf + i * n->max_request;
        nbd_completion_callback cb = { .callback = completion_cb, .user_data = ctx };
        int64_t cookie;
        uint32_t fl;
        if (dead) {
            ctx->lost = true;
            ctx_piece_done(ctx);
            continue;
        }
        c->inflight++;
        c->issuing = true;
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
        case TC_DEV_BLOCK_STATUS: {
            if (nbd_can_meta_context(c->h, LIBNBD_CONTEXT_BASE_ALLOCATION) != 1) {
                cookie = -2;    /* answered "data" above */
                break;
            }
            nbd_extent_callback ecb = { .callback = extent_cb, .user_data = ctx };
            cookie = nbd_aio_block_status(c->h, len, off, ecb, cb, 0);
            break;
        }
        default:
            cookie = -1;
        }
        c->issuing = false;
        /* Only a call that queued its command ran libnbd's state machine:
         * the error read below (cookie -1) is never a retired command's. */
        if (c->unretired > 0)
            retire_kept(c);
        if (cookie >= 0)
            continue;
        /* Not sent (the completion will not run): account the piece here. */
        c->inflight--;
        if (cookie == -1 && (nbd_aio_is_dead(c->h) || nbd_aio_is_closed(c->h) ||
                             connection_error(nbd_get_errno()))) {
            dead = true;
            ctx->lost = true;
        } else if (cookie == -1) {
            tc_error("%s: %s at offset %llu not sent: %s", n->dev.name,
                     dev_op_name(dio->op), (unsigned long long)off, nbd_get_error());
            if (ctx->err == 0)
                ctx->err = nbd_get_errno() ? nbd_get_errno() : EIO;
        } else if (cookie == -3 && ctx->err == 0) {
            ctx->err = ENOTSUP;
        }
        ctx_piece_done(ctx);
    }
    ctx_piece_done(ctx);
    if (dead)
        conn_fail(c, nbd_get_error() ? nbd_get_error() : "connection lost", false);
    else
        conn_arm(c);
}

static void dev_nbd_submit(struct tc_dev *dev, struct tc_dev_io *dio)
{
    struct dev_nbd *n = container_of(dev, struct dev_nbd, dev);
    nbd_issue(n, dio);
}

/* ---- holding and the state of the device ---- */

static unsigned count_conns(struct dev_nbd *n, enum conn_state st)
{
    unsigned k = 0;
    for (unsigned i = 0; i < NBD_MAX_CONNS; i++)
        if (n->conn[i] && n->conn[i]->state == st)
            k++;
    return k;
}

/* Requests held while reconnecting fail now (offline), or go out. */
static void release_held(struct dev_nbd *n)
{
    struct tc_dev_io *list = n->held_head;
    n->held_head = NULL;
    n->held_tail = &n->held_head;
    n->dev.stats.held = 0;
    while (list) {
        struct tc_dev_io *dio = list;
        list = dio->next;
        nbd_issue(n, dio);
    }
}

static void release_task(struct tc_task *t)
{
    release_held(container_of(t, struct dev_nbd, release));
}

static void timeout_fired(struct tc_timer *t)
{
    struct dev_nbd *n = container_of(t, struct dev_nbd, timeout_timer);
    if (n->dev.state != TC_DEV_RECONNECTING)
        return;
    n->dev.state = TC_DEV_OFFLINE;
    tc_error("%s: origin unreachable for %.1f s (--origin-timeout): failing %llu held "
             "requests with EIO; new requests fail at once until it is back (still "
             "reconnecting every %.1f s at most)", n->dev.name,
             dev_offline_seconds(&n->dev, true), (unsigned long long)n->dev.stats.held,
             (double)n->backoff_max_ns / 1e9);
    release_held(n);
}

static void start_attempts(struct dev_nbd *n);

static void retry_fired(struct tc_timer *t)
{
    start_attempts(container_of(t, struct dev_nbd, retry_timer));
}

/* Nothing is connecting and connections are missing: try again later. */
static void schedule_retry(struct dev_nbd *n, uint64_t delay)
{
    if (n->stopped || n->aborted || n->retry_timer.armed || count_conns(n, C_CONNECTING) > 0)
        return;
    if (count_conns(n, C_READY) >= n->nwant)
        return;
    timer_arm(n->dev.reactor, &n->retry_timer, delay);
}

static void attempt_failed(struct dev_nbd *n, const char *why)
{
    n->attempts++;
    if (n->dev.state != TC_DEV_ONLINE &&
        (n->attempts <= 3 || n->attempts % 20 == 0))
        tc_warn("%s: reconnect attempt %llu failed: %s; next in %.1f s", n->dev.name,
                (unsigned long long)n->attempts, why, (double)n->backoff_ns / 1e9);
    if (count_conns(n, C_CONNECTING) == 0) {
        uint64_t delay = n->backoff_ns;
        n->backoff_ns = TC_MIN(n->backoff_ns * 2, n->backoff_max_ns);
        schedule_retry(n, delay);
    }
}

/* ---- connections ---- */

/* Is the request failed, not sent again, when its connection is fenced?
 * Everything that changes data, and flushes. */
static bool fenced_fails(const struct tc_dev_io *dio)
{
    return dio->op == TC_DEV_WRITE || dio->op == TC_DEV_TRIM || dio->op == TC_DEV_ZERO ||
           dio->op == TC_DEV_FLUSH;
}

static struct fence *fence_new(struct nbd_conn *c);

static void conn_maybe_free(struct nbd_conn *c)
{
    if (c->state != C_DEAD || c->read_armed || c->write_armed || c->cancels)
        return;
    struct dev_nbd *n = c->owner;
    /* Commands libnbd never completed (the handle was given up while still
     * alive): nbd_close() drops them without their callbacks, so their
     * requests are sent again from here. */
    struct fence *f = NULL;
    if (c->fenced && !n->stopped)
        f = fence_new(c);
    while (c->ctxs) {
        struct nbd_cb_ctx *ctx = c->ctxs;
        ctx->lost = true;
        if (c->fenced && fenced_fails(ctx->dio)) {
            /* In doubt, or a flush that may not cover what it should:
             * see stall_check(). */
            ctx->lost = false;
            ctx->err = ctx->dio->op == TC_DEV_FLUSH ? EIO : ETIMEDOUT;
            n->dev.stats.fenced_failed++;
        }
        c->inflight -= (unsigned)ctx->pieces_left;
        ctx->pieces_left = 1;
        ctx_piece_done(ctx);
    }
    if (f == NULL)
        nbd_close(c->h);
    c->h = NULL;
    for (struct nbd_conn **pp = &n->all; *pp; pp = &(*pp)->next_all) {
        if (*pp == c) {
            *pp = c->next_all;
            break;
        }
    }
    free(c);
}

static void read_cancel_done(struct tc_io *io, int res)
{
    (void)res;
    struct nbd_conn *c = container_of(io, struct nbd_conn, cancel_read);
    c->cancels--;
    conn_maybe_free(c);
}

static void write_cancel_done(struct tc_io *io, int res)
{
    (void)res;
    struct nbd_conn *c = container_of(io, struct nbd_conn, cancel_write);
    c->cancels--;
    conn_maybe_free(c);
}

static void conn_cancel_polls(struct nbd_conn *c)
{
    struct tc_reactor *r = c->owner->dev.reactor;
    if (c->read_armed) {
        c->cancels++;
        c->cancel_read.done = read_cancel_done;
        io_uring_prep_cancel(reactor_sqe(r, &c->cancel_read), &c->read_poll, 0);
    }
    if (c->write_armed) {
        c->cancels++;
        c->cancel_write.done = write_cancel_done;
        io_uring_prep_cancel(reactor_sqe(r, &c->cancel_write), &c->write_poll, 0);
    }
}

/* The device has no ready connection left. */
static void went_down(struct dev_nbd *n)
{
    struct tc_dev *d = &n->dev;
    if (d->state != TC_DEV_ONLINE)
        return;
    d->offline_since_ns = tc_now_ns();
    n->attempts = 0;
    n->refusal[0] = '\0';
    if (d->hold_timeout_ns == 0) {
        d->state = TC_DEV_OFFLINE;
        tc_error("%s: origin unreachable: requests fail with EIO until it is back "
                 "(--origin-timeout 0); reconnecting", d->name);
        return;
    }
    d->state = TC_DEV_RECONNECTING;
    tc_error("%s: origin unreachable: holding requests for up to %.1f s while "
             "reconnecting", d->name, (double)d->hold_timeout_ns / 1e9);
    timer_arm(d->reactor, &n->timeout_timer, d->hold_timeout_ns);
}

static void conn_fail(struct nbd_conn *c, const char *why, bool counts_as_attempt)
{
    if (c->state == C_DEAD)
        return;
    if (why == NULL || *why == '\0')
        why = "connection lost";
    struct dev_nbd *n = c->owner;
    bool was_ready = c->state == C_READY;
    c->state = C_DEAD;
    if (c->stalled) {
        c->stalled = false;
        n->dev.stats.stalled_connections--;
    }
    timer_cancel(n->dev.reactor, &c->connect_timer);
    for (unsigned i = 0; i < NBD_MAX_CONNS; i++)
        if (n->conn[i] == c)
            n->conn[i] = NULL;
    conn_cancel_polls(c);
    if (was_ready) {
        n->dev.epoch++;
        n->dev.connections--;
        n->dev.stats.connections_lost++;
        tc_error("%s: connection to the NBD server lost: %s", n->dev.name, why);
        if (n->dev.connections == 0)
            went_down(n);
        if (tc_now_ns() - c->ready_ns >= STABLE_NS) {
            n->backoff_ns = BACKOFF_FIRST_NS;
            schedule_retry(n, 0);
        } else {
            attempt_failed(n, why);
        }
    } else if (counts_as_attempt) {
        attempt_failed(n, why);
    }
    conn_maybe_free(c);
}

/* The handshake is done: check that it is the same export, then use it.
 * False if the connection was given up (c may be freed). */
static bool conn_ready(struct nbd_conn *c)
{
    struct dev_nbd *n = c->owner;
    struct tc_dev *d = &n->dev;
    char why[256];
    int64_t size = nbd_get_size(c->h);
    why[0] = '\0';
    if (size < 0)
        snprintf(why, sizeof why, "cannot read the export size: %s", nbd_get_error());
    else if ((uint64_t)size != d->size)
        snprintf(why, sizeof why, "the server now exports %lld bytes, not %llu as before; "
                 "refusing it (the cache's data belongs to the old export)", (long long)size,
                 (unsigned long long)d->size);
    else if (!d->read_only && nbd_is_read_only(c->h) == 1)
        snprintf(why, sizeof why, "the export is now read-only; refusing it");
    if (why[0]) {
        if (strcmp(why, n->refusal) != 0) {
            tc_error("%s: %s", d->name, why);
            snprintf(n->refusal, sizeof n->refusal, "%s", why);
        }
        conn_fail(c, why, true);
        return false;
    }
    if (d->can_multi_conn && nbd_can_multi_conn(c->h) != 1 && n->nwant > 1) {
        tc_warn("%s: the server no longer offers multi-conn: using one connection", d->name);
        n->nwant = 1;
        d->can_multi_conn = false;
    }
    if (count_conns(n, C_READY) >= n->nwant) {
        conn_fail(c, "not needed", false);
        return false;
    }
    /* The same server may come back with other features. */
    d->can_flush = nbd_can_flush(c->h) == 1;
    d->can_fua = nbd_can_fua(c->h) == 1;
    d->can_trim = nbd_can_trim(c->h) == 1;
    d->can_zero = nbd_can_zero(c->h) == 1;
    d->can_fast_zero = nbd_can_fast_zero(c->h) == 1;
    d->can_block_status = nbd_can_meta_context(c->h, LIBNBD_CONTEXT_BASE_ALLOCATION) == 1;
    timer_cancel(d->reactor, &c->connect_timer);
    c->state = C_READY;
    c->ready_ns = tc_now_ns();
    d->connections++;
    if (d->state != TC_DEV_ONLINE) {
        double secs = dev_offline_seconds(d, true);
        d->offline_total_ns += tc_now_ns() - d->offline_since_ns;
        d->offline_since_ns = 0;
        d->state = TC_DEV_ONLINE;
        d->stats.reconnects++;
        timer_cancel(d->reactor, &n->timeout_timer);
        tc_info("%s: origin reconnected after %.2f s (%llu failed attempts); sending %llu "
                "held requests", d->name, secs, (unsigned long long)n->attempts,
                (unsigned long long)d->stats.held);
        n->attempts = 0;
        n->refusal[0] = '\0';
    } else {
        tc_info("%s: connection to the NBD server re-established (%u of %u)", d->name,
                d->connections, n->nwant);
    }
    /* Deferred: sending them could find this connection dead and free it
     * under the caller. */
    reactor_defer(d->reactor, &n->release);
    /* More connections wanted: open them without waiting. */
    schedule_retry(n, 0);
    return true;
}

/* After libnbd ran: did the connection die, finish its handshake? */
static void conn_progress(struct nbd_conn *c, int rc)
{
    if (c->state == C_DEAD)
        return;
    if (rc < 0 || nbd_aio_is_dead(c->h) || nbd_aio_is_closed(c->h)) {
        /* libnbd's error is that of the last call that failed in this
         * thread, however long ago (a description the server did not give
         * at the handshake): only a failed call here is its cause. */
        const char *e = rc < 0 ? nbd_get_error() : NULL;
        conn_fail(c, e && *e ? e : "the server closed the connection",
                  c->state == C_CONNECTING);
        return;
    }
    if (c->state == C_CONNECTING && nbd_aio_is_ready(c->h) && !conn_ready(c))
        return;
    conn_arm(c);
}

/* Does the socket hold bytes to read now (or an end of file or error for
 * libnbd to see)?  A non-blocking peek. */
static bool socket_readable(int fd)
{
    char b;
    ssize_t r = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return r >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
}

/*
 * A poll of the connection's socket completed: let libnbd read or write.
 *
 * A read notification while libnbd is in the middle of sending a request
 * (the direction includes WRITE) makes it pause the send and go to read a
 * reply.  If nothing is there to read, libnbd (1.14; see the comment of its
 * REPLY.START state) blocks in that state waiting only to read, with the
 * rest of the request -- and every command queued behind it -- unsent.  A
 * server that has answered everything else then waits for the rest of the
 * request, and both sides wait forever: requests counted in flight on one
 * connection, libnbd in a reply and waiting to read, every socket queue
 * empty, the server idle.  So while libnbd is sending, a read notification
 * goes to libnbd only if the socket really has something to read;
 * otherwise the poll is armed again (counted: read_wakeups_ignored).
 */
static void poll_done(struct nbd_conn *c, int res, bool write)
{
    if (c->state == C_DEAD || c->owner->stopped) {
        conn_maybe_free(c);
        return;
    }
    if (res < 0 && res != -ECANCELED) {
        conn_fail(c, strerror(-res), c->state == C_CONNECTING);
        return;
    }
    if (!write && c->state == C_READY &&
        (nbd_aio_get_direction(c->h) & LIBNBD_AIO_DIRECTION_WRITE)) {
        int fd = nbd_aio_get_fd(c->h);
        if (fd >= 0 && !socket_readable(fd)) {
            c->owner->dev.stats.read_wakeups_ignored++;
            conn_arm(c);
            return;
        }
    }
    conn_progress(c, write ? nbd_aio_notify_write(c->h) : nbd_aio_notify_read(c->h));
}

static void read_poll_done(struct tc_io *io, int res)
{
    struct nbd_conn *c = container_of(io, struct nbd_conn, read_poll);
    c->read_armed = false;
    poll_done(c, res, false);
}

static void write_poll_done(struct tc_io *io, int res)
{
    struct nbd_conn *c = container_of(io, struct nbd_conn, write_poll);
    c->write_armed = false;
    poll_done(c, res, true);
}

static void conn_arm(struct nbd_conn *c)
{
    struct tc_reactor *r = c->owner->dev.reactor;
    if (c->state == C_DEAD || c->owner->stopped)
        return;
    /* Asked each time: while connecting over TCP, libnbd moves to a new
     * socket for each address it tries. */
    int fd = nbd_aio_get_fd(c->h);
    if (fd < 0) {
        conn_fail(c, nbd_get_error(), c->state == C_CONNECTING);
        return;
    }
    unsigned dir = nbd_aio_get_direction(c->h);
    if ((dir & LIBNBD_AIO_DIRECTION_READ) && !c->read_armed) {
        c->read_poll.done = read_poll_done;
        io_uring_prep_poll_add(reactor_sqe(r, &c->read_poll), fd, POLLIN);
        c->read_armed = true;
    }
    if ((dir & LIBNBD_AIO_DIRECTION_WRITE) && !c->write_armed) {
        c->write_poll.done = write_poll_done;
        io_uring_prep_poll_add(reactor_sqe(r, &c->write_poll), fd, POLLOUT);
        c->write_armed = true;
    }
}

static void connect_timed_out(struct tc_timer *t)
{
    struct nbd_conn *c = container_of(t, struct nbd_conn, connect_timer);
    conn_fail(c, "connection attempt timed out", true);
}

static struct nbd_conn *conn_new(struct dev_nbd *n, struct nbd_handle *h, enum conn_state st)
{
    struct nbd_conn *c = tc_xcalloc(1, sizeof *c);
    c->owner = n;
    c->h = h;
    c->state = st;
    c->connect_timer.fn = connect_timed_out;
    c->next_all = n->all;
    n->all = c;
    for (unsigned i = 0; i < NBD_MAX_CONNS; i++) {
        if (n->conn[i] == NULL) {
            n->conn[i] = c;
            break;
        }
    }
    return c;
}

/* Open the missing connections, asynchronously. */
static void start_attempts(struct dev_nbd *n)
{
    unsigned live = count_conns(n, C_READY) + count_conns(n, C_CONNECTING);
    while (!n->stopped && live < n->nwant) {
        struct nbd_handle *h = nbd_create();
        if (h == NULL) {
            attempt_failed(n, nbd_get_error());
            return;
        }
        /* Asked on every connection: block status passes the origin's
         * holes through (a server without it still connects). */
        nbd_add_meta_context(h, LIBNBD_CONTEXT_BASE_ALLOCATION);
        if (nbd_aio_connect_uri(h, n->dev.name) < 0) {
            char why[256];
            snprintf(why, sizeof why, "%s", nbd_get_error());
            nbd_close(h);
            attempt_failed(n, why);
            return;
        }
        struct nbd_conn *c = conn_new(n, h, C_CONNECTING);
        live++;
        timer_arm(n->dev.reactor, &c->connect_timer, CONNECT_TIMEOUT_NS);
        conn_progress(c, 0);
    }
}

/* ---- connections that stop answering ---- */

#define STALL_CHECK_NS (1000ull * 1000 * 1000)
#define STALL_DEFAULT_NS (60ull * 1000 * 1000 * 1000)

static unsigned conn_writes(struct nbd_conn *c)
{
    unsigned k = 0;
    for (struct nbd_cb_ctx *ctx = c->ctxs; ctx; ctx = ctx->next)
        k += fenced_fails(ctx->dio);
    return k;
}

/*
 * A ready connection with requests in flight that has had no reply for
 * the stall time (--origin-timeout; 60 s when that is 0) has stopped
 * answering: a server stuck on it, or a client state machine waiting for
 * what will not come.  It is fenced (see the top of this file): the
 * socket is shut down for writing (the server reads what was sent, then
 * the end of file), and the connection given up as after any loss, so a
 * new one is opened; its requests end at once:
 *
 *  - reads and block status go again on the other connections (or the
 *    next one): they change nothing;
 *  - writes, trims and write-zeroes fail with ETIMEDOUT, "in doubt": the
 *    server may have executed them, or may still execute one it has
 *    read.  Sent again, a copy would race with the original.  The
 *    engine, which knows the newest version of the range, decides
 *    (writeback keeps the blocks dirty and writes the newest cached
 *    version again; a write-through write fails with EIO and the range
 *    reads as lost until written again), and the device holds back
 *    writes to those ranges until the server has closed the fenced
 *    connection (struct fence);
 *  - flushes fail with EIO: the writes they were to cover may have been
 *    acknowledged on the fenced connection, and a flush elsewhere need
 *    not cover those (a server without multi-conn).
 *
 * Counted: stalls, stalled_closed (fenced), fenced_requests, open_fences,
 * writes_waiting_for_fences; the log has libnbd's state at the fence.
 */
static void stall_check(struct tc_timer *t)
{
    struct dev_nbd *n = container_of(t, struct dev_nbd, stall_timer);
    struct tc_dev *d = &n->dev;
    if (n->stopped)
        return;
    uint64_t now = tc_now_ns();
    uint64_t limit = d->hold_timeout_ns ? d->hold_timeout_ns : STALL_DEFAULT_NS;
    uint64_t oldest = 0;
    for (unsigned i = 0; i < NBD_MAX_CONNS; i++) {
        struct nbd_conn *c = n->conn[i];
        if (c == NULL || c->state != C_READY || c->inflight == 0)
            continue;
        uint64_t waited = now - c->progress_ns;
        oldest = TC_MAX(oldest, waited);
        if (waited < limit)
            continue;
        unsigned writes = conn_writes(c);
        if (!c->stalled) {
            c->stalled = true;
            d->stats.stalled_connections++;
            d->stats.stalls++;
        }
        unsigned dir = nbd_aio_get_direction(c->h);
        tc_error("%s: connection %u: no reply for %.1f s to %u requests (libnbd: %lld in "
                 "flight, %s, waiting to %s); closing it: reads go again, %u writes and "
                 "flushes fail (writes in doubt: the server may still execute them)",
                 d->name, i + 1, (double)waited / 1e9, c->inflight,
                 (long long)nbd_aio_in_flight(c->h),
                 nbd_aio_is_processing(c->h) ? "in a request or reply" : "idle",
                 dir == LIBNBD_AIO_DIRECTION_BOTH ? "read and write"
                 : dir == LIBNBD_AIO_DIRECTION_WRITE ? "write"
                 : dir == LIBNBD_AIO_DIRECTION_READ ? "read" : "nothing", writes);
        d->stats.stalled_closed++;
        c->fenced = true;
        /* No more requests: the server reads what was sent, then the end
         * of file.  The socket stays open for reading until the server
         * closes it (struct fence). */
        int fd = nbd_aio_get_fd(c->h);
        if (fd >= 0)
            shutdown(fd, SHUT_WR);
        conn_fail(c, "it stopped answering", false);
    }
    if (n->fence_waits)
        fence_waits_run(n, false);
    d->stats.oldest_reply_wait_ns = oldest;
    timer_arm(d->reactor, &n->stall_timer, STALL_CHECK_NS);
}

/* ---- fences: fenced connections until the server closes them ---- */

static bool fenced_write(const struct tc_dev_io *dio)
{
    return dio->op == TC_DEV_WRITE || dio->op == TC_DEV_TRIM || dio->op == TC_DEV_ZERO;
}

static void fence_arm(struct fence *f);

/* The fenced connection c is being given up: keep its socket, and the
 * ranges of the writes it carried, until the server closes it.  NULL if
 * it carried no write (nothing can land late). */
static struct fence *fence_new(struct nbd_conn *c)
{
    unsigned k = 0;
    for (struct nbd_cb_ctx *ctx = c->ctxs; ctx; ctx = ctx->next)
        k += fenced_write(ctx->dio);
    int fd = nbd_aio_get_fd(c->h);
    if (k == 0 || fd < 0)
        return NULL;
    struct dev_nbd *n = c->owner;
    struct fence *f = tc_xcalloc(1, sizeof *f);
    f->n = n;
    f->h = c->h;
    f->fd = fd;
    f->r = tc_xcalloc(k, sizeof *f->r);
    for (struct nbd_cb_ctx *ctx = c->ctxs; ctx; ctx = ctx->next)
        if (fenced_write(ctx->dio)) {
            f->r[f->nr].off = ctx->dio->off;
            f->r[f->nr].len = ctx->dio->len;
            f->nr++;
        }
    f->next = n->fences;
    n->fences = f;
    n->dev.stats.open_fences++;
    fence_arm(f);
    return f;
}

/* Must dio wait: does it change data that a write of an open fence covers? */
static bool fence_blocks(struct dev_nbd *n, const struct tc_dev_io *dio)
{
    if (!fenced_write(dio))
        return false;
    for (struct fence *f = n->fences; f; f = f->next)
        for (unsigned i = 0; i < f->nr; i++)
            if (dio->off < f->r[i].off + f->r[i].len && f->r[i].off < dio->off + dio->len)
                return true;
    return false;
}

static void fence_wait_add(struct dev_nbd *n, struct tc_dev_io *dio)
{
    if (n->stopped || n->dev.hold_timeout_ns == 0) {
        push_finished(n, dio, failure_of(dio));
        return;
    }
    struct fence_wait *w = tc_xcalloc(1, sizeof *w);
    w->dio = dio;
    w->since = tc_now_ns();
    struct fence_wait **pp = &n->fence_waits;
    while (*pp)
        pp = &(*pp)->next;      /* in order: an older write goes first */
    *pp = w;
    n->dev.stats.fence_waits++;
}

/* Send the waiting writes no fence holds back now; with fail, fail those
 * that waited longer than the hold time (or all of them, at a stop):
 * never sent, they are plain failures, not in doubt. */
static void fence_waits_run(struct dev_nbd *n, bool fail_all)
{
    uint64_t now = tc_now_ns();
    struct fence_wait *list = n->fence_waits, *keep = NULL, **kt = &keep;
    n->fence_waits = NULL;
    while (list) {
        struct fence_wait *w = list;
        list = w->next;
        bool blocked = fence_blocks(n, w->dio);
        if (blocked && !fail_all && now - w->since < n->dev.hold_timeout_ns) {
            w->next = NULL;
            *kt = w;
            kt = &w->next;
            continue;
        }
        n->dev.stats.fence_waits--;
        struct tc_dev_io *dio = w->dio;
        double waited = (double)(now - w->since) / 1e9;
        free(w);
        if (blocked) {
            tc_error("%s: %s at offset %llu failed: it waited %.1f s for a fenced connection "
                     "whose writes to the range may still land", n->dev.name,
                     dev_op_name(dio->op), (unsigned long long)dio->off, waited);
            push_finished(n, dio, failure_of(dio));
        } else {
            nbd_issue(n, dio);
        }
    }
    *kt = n->fence_waits;       /* (none: nbd_issue found no fence in the way) */
    n->fence_waits = keep;
}

static void fence_release_task(struct tc_task *t)
{
    fence_waits_run(container_of(t, struct dev_nbd, fence_release), false);
}

static void fence_free(struct fence *f)
{
    struct dev_nbd *n = f->n;
    for (struct fence **pp = &n->fences; *pp; pp = &(*pp)->next) {
        if (*pp == f) {
            *pp = f->next;
            break;
        }
    }
    n->dev.stats.open_fences--;
    nbd_close(f->h);
    free(f->r);
    free(f);
}

/* The server closed the fenced connection (end of file, or a reset): it
 * has done with every request it read from it. */
static void fence_end(struct fence *f, const char *why)
{
    struct dev_nbd *n = f->n;
    tc_info("%s: a fenced connection is closed by the server (%s): its %u writes can no "
            "longer land; writes to their ranges go on", n->dev.name, why, f->nr);
    fence_free(f);
    reactor_defer(n->dev.reactor, &n->fence_release);
}

static void fence_poll_done(struct tc_io *io, int res)
{
    struct fence *f = container_of(io, struct fence, poll);
    f->armed = false;
    if (f->n->stopped) {
        if (!f->cancelling)
            fence_free(f);
        return;
    }
    if (res < 0 && res != -ECANCELED) {
        fence_end(f, strerror(-res));
        return;
    }
    /* Replies still coming are read and dropped: the requests they answer
     * were failed or sent again at the fence. */
    char sink[16384];
    for (;;) {
        ssize_t r = recv(f->fd, sink, sizeof sink, MSG_DONTWAIT);
        if (r > 0)
            continue;
        if (r == 0) {
            fence_end(f, "end of file");
            return;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            break;
        fence_end(f, strerror(errno));
        return;
    }
    fence_arm(f);
}

static void fence_arm(struct fence *f)
{
    f->poll.done = fence_poll_done;
    io_uring_prep_poll_add(reactor_sqe(f->n->dev.reactor, &f->poll), f->fd, POLLIN);
    f->armed = true;
}

static void fence_cancel_done(struct tc_io *io, int res)
{
    (void)res;
    struct fence *f = container_of(io, struct fence, cancel);
    f->cancelling = false;
    if (!f->armed)
        fence_free(f);
}

/* A stop: the fences' polls are cancelled, and each is freed once its
 * poll and the cancel have completed. */
static void fences_stop(struct dev_nbd *n)
{
    for (struct fence *f = n->fences, *next; f; f = next) {
        next = f->next;
        if (!f->armed) {
            fence_free(f);
            continue;
        }
        f->cancelling = true;
        f->cancel.done = fence_cancel_done;
        io_uring_prep_cancel(reactor_sqe(n->dev.reactor, &f->cancel), &f->poll, 0);
    }
}

/* ---- open, quiesce, close ---- */

static void dev_nbd_quiesce(struct tc_dev *dev)
{
    struct dev_nbd *n = container_of(dev, struct dev_nbd, dev);
    if (n->stopped)
        return;
    n->stopped = true;
    timer_cancel(dev->reactor, &n->retry_timer);
    timer_cancel(dev->reactor, &n->timeout_timer);
    timer_cancel(dev->reactor, &n->stall_timer);
    release_held(n);        /* none should be left: they fail */
    fence_waits_run(n, true);
    fences_stop(n);
    for (struct nbd_conn *c = n->all; c; c = c->next_all) {
        timer_cancel(dev->reactor, &c->connect_timer);
        if (c->state != C_DEAD)
            conn_cancel_polls(c);
    }
}

/*
 * A stop that waited too long for the origin (cache.c, close_quiet): every
 * connection is fenced at once (its writes fail in doubt, its flushes
 * with EIO), and reads sent again, held requests, writes waiting for a
 * fence and new requests fail with EIO.  No new connection is opened.
 */
static void dev_nbd_abort(struct tc_dev *dev)
{
    struct dev_nbd *n = container_of(dev, struct dev_nbd, dev);
    if (n->aborted)
        return;
    n->aborted = true;
    tc_error("%s: giving up on the origin: its requests fail now", dev->name);
    timer_cancel(dev->reactor, &n->retry_timer);
    for (unsigned i = 0; i < NBD_MAX_CONNS; i++) {
        struct nbd_conn *c = n->conn[i];
        if (c == NULL)
            continue;
        if (c->state == C_READY) {
            c->fenced = true;
            int fd = nbd_aio_get_fd(c->h);
            if (fd >= 0)
                shutdown(fd, SHUT_WR);
        }
        conn_fail(c, "the stop gave up waiting for it", false);
    }
    release_held(n);
    fence_waits_run(n, true);
}

static bool polls_pending(struct dev_nbd *n)
{
    for (struct nbd_conn *c = n->all; c; c = c->next_all)
        if (c->read_armed || c->write_armed || c->cancels)
            return true;
    return n->fences != NULL;
}

static void dev_nbd_close(struct tc_dev *dev)
{
    struct dev_nbd *n = container_of(dev, struct dev_nbd, dev);
    /* Polls armed on a connection stay in the ring even after its socket
     * is closed: cancel them and wait until they have completed, or they
     * would complete into freed memory (or keep the reactor waiting). */
    dev_nbd_quiesce(dev);
    while (polls_pending(n))
        reactor_poll(dev->reactor, 100000000ull);
    while (n->all) {
        struct nbd_conn *c = n->all;
        n->all = c->next_all;
        if (c->state == C_READY && c->inflight == 0)
            nbd_shutdown(c->h, 0);
        timer_cancel(dev->reactor, &c->connect_timer);
        nbd_close(c->h);
        while (c->ctxs) {
            struct nbd_cb_ctx *ctx = c->ctxs;
            c->ctxs = ctx->next;
            free(ctx);
        }
        free(c);
    }
    free(n->dev.name);
    free(n);
}

static const struct tc_dev_ops nbd_ops = {
    .submit = dev_nbd_submit, .close = dev_nbd_close, .quiesce = dev_nbd_quiesce,
    .abort = dev_nbd_abort,
};

static struct nbd_handle *connect_one(const char *uri, char *err, size_t errlen)
{
    struct nbd_handle *h = nbd_create();
    if (h == NULL) {
        snprintf(err, errlen, "%s: %s", uri, nbd_get_error());
        return NULL;
    }
    nbd_add_meta_context(h, LIBNBD_CONTEXT_BASE_ALLOCATION);
    /* The export's canonical name and description, for its identity. */
    nbd_set_full_info(h, true);
    if (nbd_connect_uri(h, uri) < 0) {
        snprintf(err, errlen, "%s: cannot connect: %s", uri, nbd_get_error());
        nbd_close(h);
        return NULL;
    }
    return h;
}

/*
 * An NBD export's identity: its URI, and what the server says of the
 * export -- its description, and its canonical name when it is not the
 * name asked for (the default export "" named) -- as CRC-32Cs (the
 * identity has 127 bytes; a URI is long enough already), before the URI
 * so that a long one cannot cut them off:
 *
 *   nbd[;n=CRC][;d=CRC]:URI
 *
 * Another export behind the same URI (the server set up again with
 * another file, the default export changed) is then another origin when
 * the server names or describes them differently.  The size is compared
 * apart (the superblock's origin_size).  An export that says nothing of
 * itself is "nbd:URI", as before; an identity recorded in that form is
 * taken for an export that now says more (legacy_identity), and recorded
 * again.  Not detected: another export with the same URI, name and
 * description (a server handing out a restored or replaced file under
 * the same words), nor a change of its data.
 */
static void nbd_record_key(struct nbd_handle *h, const char *uri, const char *fields,
                           struct tc_dev *d);

static void nbd_identity(struct nbd_handle *h, const char *uri, struct tc_dev *d)
{
    char fields[40] = "";
    size_t at = 0;
    char *asked = nbd_get_export_name(h);
    char *name = nbd_get_canonical_export_name(h);
    char *desc = nbd_get_export_description(h);
    if (name && (!asked || strcmp(name, asked) != 0))
        at += (size_t)snprintf(fields + at, sizeof fields - at, ";n=%08x",
                               tc_crc32c(0, name, strlen(name)));
    if (desc)
        snprintf(fields + at, sizeof fields - at, ";d=%08x", tc_crc32c(0, desc, strlen(desc)));
    snprintf(d->identity, sizeof d->identity, "nbd%s:%s", fields, uri);
    if (fields[0])
        snprintf(d->legacy_identity, sizeof d->legacy_identity, "nbd:%s", uri);
    nbd_record_key(h, uri, fields, d);
    free(asked);
    free(name);
    free(desc);
}

/* The value of the URI's query parameter key ("socket"), percent-decoded,
 * into out; false if there is none or it does not fit. */
static bool uri_query_value(const char *uri, const char *key, char *out, size_t len)
{
    const char *q = strchr(uri, '?');
    size_t klen = strlen(key);
    while (q) {
        q++;
        if (strncmp(q, key, klen) == 0 && q[klen] == '=') {
            const char *v = q + klen + 1;
            size_t n = 0;
            while (*v && *v != '&' && *v != '#') {
                unsigned c = (unsigned char)*v;
                if (c == '%' && v[1] && v[2] && sscanf(v + 1, "%2x", &c) == 1)
                    v += 2;
                if (n + 1 >= len)
                    return false;
                out[n++] = (char)c;
                v++;
            }
            out[n] = '\0';
            return n > 0;
        }
        q = strchr(q, '&');
    }
    return false;
}

/*
 * The name an export's records and lock go under (io/originrec.c,
 * io/claim.c: dev_record_key()): its identity's fields, and where the
 * connection really went rather than how the URI spells it, so that
 * nbd+unix:///?socket=D/./s and nbd+unix:///?socket=D/s, or
 * nbd://localhost and nbd://127.0.0.1, are one origin -- else a serve
 * without a cache, given the other spelling, would start beside a set
 * serving the export, or write it while the set's record names it:
 *
 *   nbd[;n=CRC][;d=CRC]:unix:REALPATH/EXPORT     (the socket's path resolved)
 *   nbd[;n=CRC][;d=CRC]:tcp:ADDRESS:PORT/EXPORT  (the peer's numeric address;
 *                                                 any loopback is "loopback")
 *
 * hashed ("nbdk...:CRC.CRC") when longer than the identity's 127 bytes.
 * Another transport (vsock) keeps its identity.  Not one origin: a server
 * reached at two of its addresses other than loopback, a socket reached
 * through a hard link.  The superblock still records the identity (the URI
 * as given): the key only names the records, and an older build's
 * records, under the identity, are read too.
 */
static void nbd_record_key(struct nbd_handle *h, const char *uri, const char *fields,
                           struct tc_dev *d)
{
    char where[PATH_MAX + 64] = "", path[PATH_MAX], real[PATH_MAX];
    char *export = nbd_get_export_name(h);
    if (strstr(uri, "+unix:") && uri_query_value(uri, "socket", path, sizeof path)) {
        snprintf(where, sizeof where, "unix:%s",
                 realpath(path, real) ? real : path);
    } else {
        struct sockaddr_storage sa;
        socklen_t salen = sizeof sa;
        int fd = nbd_aio_get_fd(h);
        char host[NI_MAXHOST], port[NI_MAXSERV];
        if (fd >= 0 && getpeername(fd, (struct sockaddr *)&sa, &salen) == 0 &&
            (sa.ss_family == AF_INET || sa.ss_family == AF_INET6) &&
            getnameinfo((struct sockaddr *)&sa, salen, host, sizeof host, port, sizeof port,
                        NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
            bool loopback = false;
            if (sa.ss_family == AF_INET) {
                const struct sockaddr_in *in = (const struct sockaddr_in *)&sa;
                loopback = (ntohl(in->sin_addr.s_addr) >> 24) == 127;
            } else {
                const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&sa;
                loopback = IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr) ||
                           (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) &&
                            in6->sin6_addr.s6_addr[12] == 127);
            }
            snprintf(where, sizeof where, "tcp:%s:%s", loopback ? "loopback" : host, port);
        }
    }
    if (where[0]) {
        char key[sizeof where + 600];
        int n = snprintf(key, sizeof key, "nbd%s:%s/%s", fields, where, export ? export : "");
        if (n > 0 && (size_t)n < sizeof d->record_key)
            memcpy(d->record_key, key, (size_t)n + 1);
        else if (n > 0)
            snprintf(d->record_key, sizeof d->record_key, "nbdk%s:%08x.%08x", fields,
                     tc_crc32c(0, key, strlen(key)), tc_crc32c(0x9e3779b9u, key, strlen(key)));
    }
    free(export);
}

struct tc_dev *dev_nbd_open(struct tc_reactor *r, const char *uri, bool read_only, char *err,
                            size_t errlen)
{
    /* At start-up the first connection is made synchronously: a server
     * that is not there is an error the user sees at once. */
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
    d->can_fast_zero = nbd_can_fast_zero(h) == 1;
    d->can_multi_conn = nbd_can_multi_conn(h) == 1;
    d->can_block_status = nbd_can_meta_context(h, LIBNBD_CONTEXT_BASE_ALLOCATION) == 1;
    d->rotational = false;
    d->logical_block = 512;
    d->state = TC_DEV_ONLINE;
    d->hold_timeout_ns = 60ull * 1000 * 1000 * 1000;
    int64_t minbs = nbd_get_block_size(h, LIBNBD_SIZE_MINIMUM);
    if (minbs > 0)
        d->logical_block = (unsigned)minbs;
    int64_t maxbs = nbd_get_block_size(h, LIBNBD_SIZE_MAXIMUM);
    n->max_request = maxbs > 0 ? (uint64_t)maxbs : 32u << 20;
    if (n->max_request > 32u << 20)
        n->max_request = 32u << 20;
    nbd_identity(h, uri, d);
    n->drain.fn = drain_finished;
    n->held_tail = &n->held_head;
    n->release.fn = release_task;
    n->retry_timer.fn = retry_fired;
    n->timeout_timer.fn = timeout_fired;
    n->stall_timer.fn = stall_check;
    n->fence_release.fn = fence_release_task;
    n->backoff_ns = BACKOFF_FIRST_NS;
    n->backoff_max_ns = BACKOFF_MAX_NS;
    const char *bmax = getenv("TIERCACHE_TEST_ORIGIN_BACKOFF_MAX_MS");
    if (bmax && *bmax)      /* not below the first: the doubling starts there */
        n->backoff_max_ns = TC_MAX(strtoull(bmax, NULL, 10) * 1000 * 1000, BACKOFF_FIRST_NS);

    n->nwant = 1;
    struct nbd_conn *c0 = conn_new(n, h, C_READY);
    c0->ready_ns = tc_now_ns();
    if (d->can_multi_conn) {
        for (unsigned i = 1; i < NBD_MAX_CONNS; i++) {
            char e2[256];
            struct nbd_handle *h2 = connect_one(uri, e2, sizeof e2);
            if (h2 == NULL) {
                tc_warn("%s: extra connection %u failed (%s); using %u", uri, i + 1, e2,
                        n->nwant);
                break;
            }
            struct nbd_conn *c = conn_new(n, h2, C_READY);
            c->ready_ns = tc_now_ns();
            n->nwant++;
        }
    }
    d->connections = n->nwant;
    for (struct nbd_conn *c = n->all, *next; c; c = next) {
        next = c->next_all;
        conn_arm(c);
    }
    timer_arm(r, &n->stall_timer, STALL_CHECK_NS);
    return d;
}
