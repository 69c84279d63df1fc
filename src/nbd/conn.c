/*
 * One client connection: the receive buffer, the send queue, and the
 * connection's lifetime.
 *
 * Receiving: a recv is armed whenever the parser can use more bytes.  Bytes
 * land in rx[] and are parsed by the phase's parser; a write's payload is
 * received straight into the request's buffer (no copy for large writes).
 * When the engine holds too many of this client's requests the parser
 * stops and no recv is armed: TCP flow control then slows the client down.
 *
 * Sending: replies are queued as struct nbd_out and gathered into one
 * sendmsg at a time, so replies leave in completion order (NBD allows
 * replies out of order) and a partial send simply continues.
 *
 * TLS (after NBD_OPT_STARTTLS, see tls.h): the same two paths, with GnuTLS
 * in between and io_uring still doing every socket operation.  A receive
 * is armed into the session's ciphertext buffer; when it completes,
 * gnutls_record_recv() decrypts into the same destination a plaintext
 * receive would have used (rx[] or a write's payload).  Ciphertext already
 * buffered is decrypted from a deferred task, so a receive that can be
 * satisfied at once still completes on a fresh stack.  Sending encrypts
 * queued messages into the session's output buffer (and releases them, as
 * a plaintext send would once sent), then sends that buffer; encryption
 * pauses while NBD_TLS_OUT_HIGH bytes wait, so a client that does not read
 * is held back exactly as without TLS.
 *
 * Reference counting: the connection itself holds one reference until it
 * is finished; each armed recv or send and each request not yet replied
 * holds one more.  The memory goes when the count reaches zero.
 *
 * Threads: a connection runs on one thread at a time, and everything here
 * runs on that thread: the reactor, or (serve --nbd-threads) from the end
 * of its handshake a front-end thread (fe.c).  c->reactor is that thread's
 * ring; the server's lists, counts and the handshake's deadline are the
 * reactor's, which is why the last reference of a front end's connection
 * sends it back there to be freed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nbd/server.h"
#include "util/log.h"
#include "util/misc.h"
#include "util/memcheck.h"

#define RX_SIZE (256u << 10)

static void rx_arm(struct nbd_conn *c);
static void cancel(struct nbd_conn *c, struct tc_io *op, struct tc_io *cio);
static void rx_complete(struct nbd_conn *c, ssize_t res);
static void tx_kick(struct nbd_conn *c);
static void tls_recv_arm(struct nbd_conn *c);
static void tls_rx_task(struct tc_task *task);
static void tls_begin(struct nbd_conn *c);
static void hs_timeout(struct tc_timer *t);

/* ---- the handshake's deadline and the pending-handshake limit ----
 *
 * A connection that has not finished its handshake (TLS included) costs a
 * receive buffer and a slot, and proves nothing: over TCP, and even under
 * --tls require, anyone can open one and send nothing.  So those are kept
 * apart from served connections:
 *
 *  - --max-connections counts only connections that finished their
 *    handshake; idle sockets cannot fill it.
 *  - Each pending handshake has a deadline (--handshake-timeout), counted
 *    from accept, not from the last byte, so dribbling a byte at a time
 *    does not extend it.
 *  - At most --max-handshakes are pending.  When a new connection arrives
 *    and the limit is full, the OLDEST pending one is closed, not the
 *    newcomer.  Refusing newcomers would let an attacker who keeps the
 *    limit full of idle sockets lock every real client out until the
 *    deadline, and re-open at once to do it again.  Dropping the oldest
 *    means a newcomer is safe until max_handshakes - 1 more connections
 *    arrive after it: a real client, whose handshake takes a few round
 *    trips, always gets through unless the attacker opens connections
 *    faster than max_handshakes per handshake time (a connection flood,
 *    which no slot policy can tell apart from clients).  Idle sockets are
 *    the ones dropped, since they are the oldest.
 */

static void hs_unlink(struct nbd_conn *c)
{
    struct nbd_server *srv = c->srv;
    if (!c->hs_pending)
        return;
    if (c->hs_prev)
        c->hs_prev->hs_next = c->hs_next;
    else
        srv->hs_head = c->hs_next;
    if (c->hs_next)
        c->hs_next->hs_prev = c->hs_prev;
    else
        srv->hs_tail = c->hs_prev;
    c->hs_prev = c->hs_next = NULL;
    c->hs_pending = false;
    srv->nhandshakes--;
    timer_cancel(srv->reactor, &c->hs_timer);
}

static void hs_link(struct nbd_conn *c)
{
    struct nbd_server *srv = c->srv;
    c->hs_pending = true;
    c->hs_prev = srv->hs_tail;
    c->hs_next = NULL;
    if (srv->hs_tail)
        srv->hs_tail->hs_next = c;
    else
        srv->hs_head = c;
    srv->hs_tail = c;
    srv->nhandshakes++;
    if (srv->cfg.handshake_timeout_ns) {
        c->hs_timer.fn = hs_timeout;
        timer_arm(srv->reactor, &c->hs_timer, srv->cfg.handshake_timeout_ns);
    }
}

static void hs_timeout(struct tc_timer *t)
{
    struct nbd_conn *c = container_of(t, struct nbd_conn, hs_timer);
    struct nbd_server *srv = c->srv;
    if (!c->finished)
        srv->stats.handshake_timeouts++;
    hs_unlink(c);
    char why[128];
    snprintf(why, sizeof why, "the handshake did not finish within %.1f s (--handshake-timeout)",
             (double)srv->cfg.handshake_timeout_ns / 1e9);
    conn_get(c);
    conn_abort(c, why);
    conn_put(c);
}

void conn_drop_oldest_handshake(struct nbd_server *srv)
{
    struct nbd_conn *c = srv->hs_head;
    if (c == NULL)
        return;
    srv->stats.handshakes_dropped++;
    hs_unlink(c);
    /* Whoever opens connections decides how often this happens: one
     * warning a minute, with the count; each drop only with -v. */
    uint64_t now = tc_now_ns();
    if (srv->hs_drop_warned == 0 || now - srv->hs_drop_warned >= 60ull * 1000000000ull) {
        srv->hs_drop_warned = now;
        tc_warn("%u connections are in their handshake, the most allowed "
                "(--max-handshakes): closing the oldest for each new one "
                "(%llu so far, nbd.handshakes_dropped)", srv->cfg.max_handshakes,
                (unsigned long long)srv->stats.handshakes_dropped);
    }
    tc_debug("connection %llu (%s): dropped, the oldest pending handshake",
             (unsigned long long)c->id, c->peer);
    conn_get(c);
    c->dead = true;     /* conn_abort() does not log it again */
    conn_abort(c, "dropped");
    conn_put(c);
}

bool conn_handshake_done(struct nbd_conn *c)
{
    struct nbd_server *srv = c->srv;
    if (c->served)
        return true;
    if (srv->cfg.max_connections && srv->nserved >= srv->cfg.max_connections) {
        srv->stats.connections_refused++;
        return false;
    }
    hs_unlink(c);
    c->served = true;
    srv->nserved++;
    return true;
}

static struct nbd_conn *conn_init(struct nbd_server *srv, int fd, int wfd, bool is_socket,
                                  const char *peer)
{
    struct nbd_conn *c = tc_xcalloc(1, sizeof *c);
    c->srv = srv;
    c->fd = fd;
    c->wfd = wfd;
    c->is_socket = is_socket;
    c->id = ++srv->next_conn_id;
    snprintf(c->peer, sizeof c->peer, "%s", peer);
    c->rx = tc_xmalloc(RX_SIZE);
    c->txq_tail = &c->txq;
    c->refs = 1;
    c->reactor = srv->reactor;
    c->memq = &srv->memq;
    c->stats = &srv->stats;
    c->phase = PHASE_CLIENT_FLAGS;
    c->next = srv->conns;
    if (srv->conns)
        srv->conns->prev = c;
    srv->conns = c;
    srv->nconns++;
    hs_link(c);
    handshake_start(c);
    rx_arm(c);
    return c;
}

struct nbd_conn *conn_new(struct nbd_server *srv, int fd, const char *peer)
{
    return conn_init(srv, fd, fd, true, peer);
}

struct nbd_conn *conn_new_stdio(struct nbd_server *srv, int fd, int wfd, const char *peer)
{
    /* They may be pipes: then read/write, and cancel instead of shutdown()
     * to end pending operations. */
    struct stat rst, wst;
    bool sock = fstat(fd, &rst) == 0 && S_ISSOCK(rst.st_mode) && fstat(wfd, &wst) == 0 &&
                S_ISSOCK(wst.st_mode);
    return conn_init(srv, fd, wfd, sock, peer);
}

void conn_free(struct nbd_conn *c)
{
    struct nbd_server *srv = c->srv;
    transmission_memory_forget(c);
    hs_unlink(c);
    if (c->served)
        srv->nserved--;
    if (c->prev)
        c->prev->next = c->next;
    else
        srv->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    srv->nconns--;
    close(c->fd);
    if (c->wfd != c->fd)
        close(c->wfd);
    nbd_tls_free(c->tls);
    free(c->rx);
    free(c);
    nbd_server_conn_gone(srv, NULL);
}

/* A front end's connection: what status shows of its receive and send. */
static void publish(struct nbd_conn *c)
{
    CONN_SET(c, pub.rx_buffered, conn_rx_avail(c));
    CONN_SET(c, pub.tx_bytes, c->tx_bytes);
    CONN_SET(c, pub.rx_armed, c->rx_armed);
    CONN_SET(c, pub.receiving, c->rx_req != NULL);
    CONN_SET(c, pub.closing, c->closing);
}

void conn_put(struct nbd_conn *c)
{
    if (c->fe && c->refs > 1)
        publish(c);
    if (--c->refs == 0) {
        if (c->fe)
            nbd_fe_ref_dropped(c);  /* freed by the reactor */
        else
            conn_free(c);
    } else if (c->handing_over) {
        nbd_fe_ref_dropped(c);
    }
}

static void rx_cancel_done(struct tc_io *io, int res)
{
    (void)res;
    conn_put(container_of(io, struct nbd_conn, cancel_io));
}

static void tx_cancel_done(struct tc_io *io, int res)
{
    (void)res;
    conn_put(container_of(io, struct nbd_conn, tx_cancel_io));
}

void conn_cancel_rx(struct nbd_conn *c)
{
    if (c->rx_armed && !c->rx_cancelled) {
        c->rx_cancelled = true;
        cancel(c, &c->rx_io, &c->cancel_io);
    }
}

static void cancel(struct nbd_conn *c, struct tc_io *op, struct tc_io *cio)
{
    cio->done = cio == &c->cancel_io ? rx_cancel_done : tx_cancel_done;
    io_uring_prep_cancel(reactor_sqe(c->reactor, cio), op, 0);
    conn_get(c);
}

/* shutdown(2) ends a socket's pending receive (and, with SHUT_RDWR, its
 * pending send); pipes need their operations cancelled. */
static void conn_shutdown(struct nbd_conn *c, int how)
{
    if (c->is_socket) {
        shutdown(c->fd, how);
        if (c->wfd != c->fd)
            shutdown(c->wfd, how);
        return;
    }
    if (c->rx_armed && !c->rx_cancelled) {
        c->rx_cancelled = true;
        cancel(c, &c->rx_io, &c->cancel_io);
    }
    if (how == SHUT_RDWR && c->tx_armed && !c->tx_cancelled) {
        c->tx_cancelled = true;
        cancel(c, &c->tx_io, &c->tx_cancel_io);
    }
}

/* Drop the connection's own reference once nothing is left to do. */
static void maybe_finish(struct nbd_conn *c)
{
    if (c->finished || !c->closing)
        return;
    if (c->inflight > 0 || c->rx_armed || c->tx_armed || (c->txq && !c->dead))
        return;
    if (c->tls && nbd_tls_out_len(c->tls) > 0 && !c->dead)
        return;     /* TLS records (an alert, a last reply) still to send */
    c->finished = true;
    conn_shutdown(c, SHUT_RDWR);
    conn_put(c);
}

static void drop_queue(struct nbd_conn *c)
{
    while (c->txq) {
        struct nbd_out *out = c->txq;
        c->txq = out->next;
        out->release(out);
    }
    c->txq_tail = &c->txq;
    c->tx_bytes = 0;
}

void conn_close(struct nbd_conn *c, const char *why)
{
    if (c->closing)
        return;
    c->closing = true;
    transmission_memory_forget(c);
    tc_debug("connection %llu (%s): closing: %s", (unsigned long long)c->id, c->peer, why);
    /* A pending recv ends (with 0) once the read side is shut. */
    conn_shutdown(c, SHUT_RD);
    maybe_finish(c);
}

void conn_abort(struct nbd_conn *c, const char *why)
{
    if (!c->dead)
        tc_warn("connection %llu (%s): disconnecting: %s", (unsigned long long)c->id, c->peer,
                why);
    c->closing = true;
    c->dead = true;
    transmission_memory_forget(c);
    conn_shutdown(c, SHUT_RDWR);
    drop_queue(c);
    maybe_finish(c);
}

/* ---- receiving ---- */

static void prep_recv(struct nbd_conn *c, void *dst, size_t len)
{
    c->rx_ring_dst = dst;
    if (c->is_socket)
        io_uring_prep_recv(reactor_sqe(c->reactor, &c->rx_io), c->fd, dst, len, 0);
    else
        io_uring_prep_read(reactor_sqe(c->reactor, &c->rx_io), c->fd, dst,
                           (unsigned)TC_MIN(len, (size_t)1 << 30), (uint64_t)-1);
}

static void rx_done(struct tc_io *io, int res);

/* Closing: nothing more will be received, so a WRITE whose payload is
 * still arriving can never complete: drop it, or it would hold the
 * connection (and the daemon's shutdown) for ever. */
static void abandon_partial_write(struct nbd_conn *c)
{
    if (c->rx_req) {
        struct nbd_req *req = c->rx_req;
        c->rx_req = NULL;
        transmission_abandon(req);
    }
}

static void rx_arm(struct nbd_conn *c)
{
    if (c->rx_armed)
        return;
    if (c->closing) {
        abandon_partial_write(c);
        return;
    }
    if (c->tls_state != CONN_TLS_NONE && c->tls_state != CONN_TLS_ACTIVE)
        return;     /* STARTTLS: the TLS handshake drives the socket */
    if (c->handing_over)
        return;     /* the front end receives from now on */
    void *dst;
    size_t len;
    struct nbd_req *req = c->rx_req;
    if (req) {
        dst = transmission_payload_target(req, &len);
    } else {
        if (c->phase == PHASE_TRANSMISSION && !transmission_can_accept(c) && c->rx_discard == 0)
            return;     /* back-pressure: the engine holds enough of ours */
        if (c->phase != PHASE_TRANSMISSION && c->tx_bytes > HANDSHAKE_MAX_QUEUED &&
            c->rx_discard == 0)
            return;     /* back-pressure: the client is not reading option replies */
        if (c->rx_start > 0) {
            memmove(c->rx, c->rx + c->rx_start, c->rx_end - c->rx_start);
            c->rx_end -= c->rx_start;
            c->rx_start = 0;
        }
        if (c->rx_end == RX_SIZE)
            return;     /* full: the parser must consume first */
        dst = c->rx + c->rx_end;
        len = RX_SIZE - c->rx_end;
    }
    c->rx_dst = dst;
    c->rx_len = len;
    if (c->tls_state == CONN_TLS_ACTIVE) {
        c->rx_armed = true;
        conn_get(c);
        if (nbd_tls_readable(c->tls)) {
            /* Decrypt what is buffered, from a fresh stack. */
            c->rx_task.fn = tls_rx_task;
            reactor_defer(c->reactor, &c->rx_task);
        } else {
            c->rx_armed = false;
            tls_recv_arm(c);
            conn_put(c);
        }
        return;
    }
    c->rx_io.done = rx_done;
    prep_recv(c, dst, len);
    c->rx_armed = true;
    conn_get(c);
}

static void rx_done(struct tc_io *io, int res)
{
    struct nbd_conn *c = container_of(io, struct nbd_conn, rx_io);
    c->rx_armed = false;
    tc_kernel_filled(c->rx_ring_dst, res);
    if (res == -ECANCELED && c->handing_over && !c->closing) {
        conn_put(c);        /* cancelled for the hand-over (fe.c) */
        return;
    }
    if (res == -EINTR || res == -EAGAIN) {
        rx_arm(c);
        maybe_finish(c);    /* rx_arm() arms nothing once the connection is closing */
        conn_put(c);
        return;
    }
    if (res > 0 && (c->tls_state == CONN_TLS_STARTING || c->tls_state == CONN_TLS_HANDSHAKE)) {
        /* A receive armed before STARTTLS was answered: what it brought
         * is the start of the TLS stream.  It is only ever read as TLS
         * records, which authenticate the whole handshake. */
        c->rx_end += (size_t)res;
        if (c->tls_state == CONN_TLS_HANDSHAKE)
            tls_begin(c);
        conn_put(c);
        return;
    }
    rx_complete(c, res);
}

/* A receive (plain, or decrypted from TLS) ended with res bytes at
 * c->rx_dst, 0 at end of file, or -errno; drops the receive's reference. */
static void rx_complete(struct nbd_conn *c, ssize_t res)
{
    if (res <= 0) {
        if (!c->closing) {
            bool mid = c->rx_req != NULL || conn_rx_avail(c) > 0;
            if (res == 0 && !mid)
                tc_debug("connection %llu (%s): client closed the connection",
                         (unsigned long long)c->id, c->peer);
            else
                tc_warn("connection %llu (%s): %s%s", (unsigned long long)c->id, c->peer,
                        res == 0 ? "client disconnected" : strerror((int)-res),
                        mid ? " in the middle of a request; the partial request is dropped"
                            : "");
        }
        c->closing = true;
        if (c->rx_req) {
            struct nbd_req *req = c->rx_req;
            c->rx_req = NULL;
            transmission_abandon(req);
        }
        maybe_finish(c);
        conn_put(c);
        return;
    }
    if (c->rx_req) {
        struct nbd_req *req = c->rx_req;
        if (transmission_payload_received(req, (size_t)res)) {
            c->rx_req = NULL;
            transmission_payload_done(c, req);
        }
    } else {
        c->rx_end += (size_t)res;
    }
    conn_parse(c);
    conn_put(c);
}

void conn_parse(struct nbd_conn *c)
{
    if (c->parsing) {
        c->reparse = true;
        return;
    }
    c->parsing = true;
    do {
        c->reparse = false;
        while (!c->closing && c->rx_req == NULL && !c->handing_over &&
               (c->tls_state == CONN_TLS_NONE || c->tls_state == CONN_TLS_ACTIVE)) {
            if (c->rx_discard > 0) {
                size_t n = TC_MIN(conn_rx_avail(c), c->rx_discard);
                if (n == 0)
                    break;
                c->rx_start += n;
                c->rx_discard -= n;
                continue;
            }
            bool progressed = c->phase == PHASE_TRANSMISSION ? transmission_parse(c)
                                                             : handshake_parse(c);
            if (!progressed)
                break;
        }
    } while (c->reparse);
    c->parsing = false;
    rx_arm(c);
    maybe_finish(c);
}

/* ---- sending ---- */

static void tx_done(struct tc_io *io, int res);
static void tx_consumed(struct nbd_conn *c, size_t n);

static void tls_tx_kick(struct nbd_conn *c);

static void tx_kick(struct nbd_conn *c)
{
    if (c->tx_armed || c->tx_busy || c->dead)
        return;
    if (c->tls_state >= CONN_TLS_HANDSHAKE) {
        tls_tx_kick(c);
        return;
    }
    if (c->txq == NULL)
        return;
    unsigned n = 0;
    for (struct nbd_out *o = c->txq; o && n < TC_ARRAY_SIZE(c->tx_iov); o = o->next) {
        for (unsigned i = 0; i < o->iovcnt && n < TC_ARRAY_SIZE(c->tx_iov); i++)
            if (o->iov[i].iov_len > 0)
                c->tx_iov[n++] = o->iov[i];
    }
    memset(&c->tx_msg, 0, sizeof c->tx_msg);
    c->tx_msg.msg_iov = c->tx_iov;
    c->tx_msg.msg_iovlen = n;
    c->tx_io.done = tx_done;
    if (c->is_socket)
        io_uring_prep_sendmsg(reactor_sqe(c->reactor, &c->tx_io), c->wfd, &c->tx_msg,
                              MSG_NOSIGNAL);
    else
        io_uring_prep_writev(reactor_sqe(c->reactor, &c->tx_io), c->wfd, c->tx_iov, n,
                             (uint64_t)-1);
    c->tx_armed = true;
    conn_get(c);
}

static void tx_done(struct tc_io *io, int res)
{
    struct nbd_conn *c = container_of(io, struct nbd_conn, tx_io);
    c->tx_armed = false;
    if (res == -EINTR || res == -EAGAIN) {
        tx_kick(c);
        maybe_finish(c);    /* tx_kick() sends nothing once the connection is dead */
        conn_put(c);
        return;
    }
    if (res < 0) {
        if (!c->dead)
            tc_warn("connection %llu (%s): send failed: %s; replies dropped",
                    (unsigned long long)c->id, c->peer, strerror(-res));
        /* Replies can no longer be delivered, but requests the client sent
         * before it stopped reading still run (proto.md: after NBD_CMD_DISC
         * the server MUST handle all outstanding requests, and a client may
         * close right after sending it).  Receiving ends at EOF. */
        c->dead = true;
        drop_queue(c);
        conn_parse(c);      /* receive again if it waited for this send */
        maybe_finish(c);
        conn_put(c);
        return;
    }
    if (c->tls_state >= CONN_TLS_HANDSHAKE) {
        nbd_tls_out_sent(c->tls, (size_t)res);
    } else {
        tx_consumed(c, (size_t)res);
        if (c->tls_state == CONN_TLS_STARTING && c->txq == NULL && !c->closing)
            tls_begin(c);   /* the STARTTLS ACK has left in clear */
    }
    tx_kick(c);
    /* Option parsing may have paused for this send (HANDSHAKE_MAX_QUEUED). */
    if (c->phase != PHASE_TRANSMISSION)
        conn_parse(c);
    maybe_finish(c);
    conn_put(c);
}

/* The first n queued bytes have left: advance and release what is done.
 * A release can run the parser, which can queue a reply and kick the
 * sender; tx_busy holds that kick back until the queue is consistent
 * again (otherwise a send could start from iovecs not yet advanced, and
 * send bytes twice). */
static void tx_consumed(struct nbd_conn *c, size_t left)
{
    c->tx_bytes -= TC_MIN(c->tx_bytes, left);
    c->tx_busy = true;
    while (c->txq) {
        struct nbd_out *o = c->txq;
        for (unsigned i = 0; i < o->iovcnt && left > 0; i++) {
            size_t n = TC_MIN(left, o->iov[i].iov_len);
            o->iov[i].iov_base = (char *)o->iov[i].iov_base + n;
            o->iov[i].iov_len -= n;
            left -= n;
        }
        bool sent = true;
        for (unsigned i = 0; i < o->iovcnt; i++)
            if (o->iov[i].iov_len > 0)
                sent = false;
        if (!sent)
            break;
        c->txq = o->next;
        if (c->txq == NULL)
            c->txq_tail = &c->txq;
        o->release(o);
    }
    c->tx_busy = false;
}

void conn_send(struct nbd_conn *c, struct nbd_out *out)
{
    if (c->dead || c->tls_state == CONN_TLS_FAILED) {
        out->release(out);
        return;
    }
    for (unsigned i = 0; i < out->iovcnt; i++)
        c->tx_bytes += out->iov[i].iov_len;
    out->next = NULL;
    *c->txq_tail = out;
    c->txq_tail = &out->next;
    tx_kick(c);
}

struct copy_out {
    struct nbd_out out;
    uint8_t data[];
};

static void copy_release(struct nbd_out *out)
{
    free(container_of(out, struct copy_out, out));
}

void conn_send_copy(struct nbd_conn *c, const void *data, size_t len)
{
    struct copy_out *co = tc_xmalloc(sizeof *co + len);
    memcpy(co->data, data, len);
    co->out.iov[0].iov_base = co->data;
    co->out.iov[0].iov_len = len;
    co->out.iovcnt = 1;
    co->out.release = copy_release;
    conn_send(c, &co->out);
}

/* ---- TLS ---- */

int conn_starttls(struct nbd_conn *c, char *err, size_t errlen)
{
    c->tls = nbd_tls_new(c->srv->tls_creds, err, errlen);
    if (c->tls == NULL)
        return -1;
    c->tls_state = CONN_TLS_STARTING;
    return 0;
}

static void tls_failed(struct nbd_conn *c, const char *what, const char *why)
{
    c->srv->stats.tls_failures++;
    tc_warn("connection %llu (%s): %s: %s; disconnecting", (unsigned long long)c->id, c->peer,
            what, why);
    /* Send the alert GnuTLS may have queued, then close. */
    c->tls_state = CONN_TLS_FAILED;
    c->closing = true;
    drop_queue(c);
    conn_shutdown(c, SHUT_RD);
    tx_kick(c);
    maybe_finish(c);
}

static void tls_handshake_step(struct nbd_conn *c)
{
    char err[256];
    int r = nbd_tls_handshake(c->tls, err, sizeof err);
    if (r < 0) {
        c->srv->stats.handshakes_failed++;
        tls_failed(c, "TLS handshake failed", err);
        return;
    }
    tx_kick(c);
    if (r == 0) {
        if (!c->rx_armed)
            tls_recv_arm(c);    /* or, when closing, finish */
        return;
    }
    c->tls_state = CONN_TLS_ACTIVE;
    c->srv->stats.tls_sessions++;
    /* proto.md: what was negotiated before STARTTLS does not carry over. */
    c->structured_replies = false;
    c->meta_allocation = false;
    char desc[256];
    nbd_tls_describe(c->tls, desc, sizeof desc);
    tc_debug("connection %llu (%s): TLS: %s", (unsigned long long)c->id, c->peer, desc);
    conn_parse(c);
}

/* The STARTTLS ACK has left: bytes that followed the option are the
 * client's first TLS bytes; then handshake. */
static void tls_begin(struct nbd_conn *c)
{
    if (conn_rx_avail(c) > 0)
        nbd_tls_in_put(c->tls, c->rx + c->rx_start, conn_rx_avail(c));
    c->rx_start = c->rx_end = 0;
    c->tls_state = CONN_TLS_HANDSHAKE;
    tls_handshake_step(c);
}

static void tls_recv_done(struct tc_io *io, int res);

/* Arm a socket receive into the session's ciphertext buffer. */
static void tls_recv_arm(struct nbd_conn *c)
{
    if (c->rx_armed)
        return;
    if (c->closing) {
        /* As in rx_arm(); and with nothing armed the connection may now be
         * done.  Callers hold a reference, so it is not freed under them. */
        abandon_partial_write(c);
        maybe_finish(c);
        return;
    }
    size_t len;
    void *dst = nbd_tls_in_space(c->tls, &len);
    if (len == 0) {
        tls_failed(c, "TLS", "a record larger than the receive buffer");
        return;
    }
    c->rx_io.done = tls_recv_done;
    prep_recv(c, dst, len);
    c->rx_armed = true;
    conn_get(c);
}

/* Decrypt into c->rx_dst, as much as is buffered, then complete the
 * receive; or wait for more ciphertext.  Holds the receive's reference. */
static void tls_rx_pump(struct nbd_conn *c)
{
    size_t got = 0;
    ssize_t n = 0;
    while (got < c->rx_len) {
        n = nbd_tls_read(c->tls, (char *)c->rx_dst + got, c->rx_len - got);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    if (nbd_tls_out_len(c->tls) > 0)
        tx_kick(c);         /* TLS 1.3 key updates answer from inside reads */
    c->rx_armed = false;
    if (got > 0) {
        rx_complete(c, (ssize_t)got);
        return;
    }
    if (n == -EAGAIN) {
        tls_recv_arm(c);
        conn_put(c);
        return;
    }
    if (n < 0) {
        tls_failed(c, "TLS", nbd_tls_error(c->tls));
        conn_put(c);
        return;
    }
    rx_complete(c, 0);      /* close_notify: the client is done */
}

static void tls_rx_task(struct tc_task *task)
{
    struct nbd_conn *c = container_of(task, struct nbd_conn, rx_task);
    if (c->closing) {
        c->rx_armed = false;
        rx_complete(c, 0);
        return;
    }
    tls_rx_pump(c);
}

static void tls_recv_done(struct tc_io *io, int res)
{
    struct nbd_conn *c = container_of(io, struct nbd_conn, rx_io);
    c->rx_armed = false;
    tc_kernel_filled(c->rx_ring_dst, res);
    if (res == -EINTR || res == -EAGAIN) {
        if (c->tls_state == CONN_TLS_HANDSHAKE)
            tls_recv_arm(c);
        else
            rx_arm(c);
        conn_put(c);
        return;
    }
    if (res <= 0 || c->tls_state == CONN_TLS_FAILED) {
        if (c->tls_state == CONN_TLS_HANDSHAKE && !c->closing) {
            c->srv->stats.handshakes_failed++;
            c->srv->stats.tls_failures++;
            tc_warn("connection %llu (%s): client left during the TLS handshake%s%s",
                    (unsigned long long)c->id, c->peer, res < 0 ? ": " : "",
                    res < 0 ? strerror(-res) : "");
            c->closing = true;
        }
        rx_complete(c, res > 0 ? 0 : res);
        return;
    }
    nbd_tls_in_added(c->tls, (size_t)res);
    if (c->tls_state == CONN_TLS_HANDSHAKE) {
        tls_handshake_step(c);
        conn_put(c);
        return;
    }
    c->rx_armed = true;     /* the pump completes this receive */
    tls_rx_pump(c);
}

/* Encrypt queued messages into the output buffer, releasing each once it
 * is encrypted, while the buffer is below its high mark. */
static void tls_encrypt_queue(struct nbd_conn *c)
{
    uint8_t rec[16384];
    while (c->txq && !c->dead && nbd_tls_out_len(c->tls) < NBD_TLS_OUT_HIGH) {
        /* Gather up to one record from the head of the queue, so that a
         * reply header and its data travel in one record. */
        size_t n = 0;
        for (struct nbd_out *o = c->txq; o && n < sizeof rec; o = o->next)
            for (unsigned i = 0; i < o->iovcnt && n < sizeof rec; i++) {
                size_t k = TC_MIN(o->iov[i].iov_len, sizeof rec - n);
                memcpy(rec + n, o->iov[i].iov_base, k);
                n += k;
            }
        ssize_t w = 0;
        if (n > 0) {
            w = nbd_tls_write(c->tls, rec, n);
            if (w < 0) {
                tls_failed(c, "TLS", nbd_tls_error(c->tls));
                return;
            }
        }
        tx_consumed(c, (size_t)w);
    }
}

static void tls_send_arm(struct nbd_conn *c)
{
    size_t len;
    const void *data = nbd_tls_out_data(c->tls, &len);
    if (c->tx_armed || c->dead || len == 0)
        return;
    c->tx_io.done = tx_done;
    if (c->is_socket)
        io_uring_prep_send(reactor_sqe(c->reactor, &c->tx_io), c->wfd, data, len,
                           MSG_NOSIGNAL);
    else
        io_uring_prep_write(reactor_sqe(c->reactor, &c->tx_io), c->wfd, data,
                            (unsigned)len, (uint64_t)-1);
    c->tx_armed = true;
    conn_get(c);
}

static void tls_tx_kick(struct nbd_conn *c)
{
    if (c->tls_state != CONN_TLS_ACTIVE || c->txq == NULL) {
        tls_send_arm(c);    /* handshake records, an alert */
        return;
    }
    /* Releasing encrypted messages can drop other references. */
    conn_get(c);
    tls_encrypt_queue(c);
    tls_send_arm(c);
    maybe_finish(c);
    conn_put(c);
}
