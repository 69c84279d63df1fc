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
 * Reference counting: the connection itself holds one reference until it
 * is finished; each armed recv or send and each request not yet replied
 * holds one more.  The memory goes when the count reaches zero.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "nbd/server.h"
#include "util/log.h"
#include "util/misc.h"

#define RX_SIZE (256u << 10)

static void rx_arm(struct nbd_conn *c);
static void tx_kick(struct nbd_conn *c);

struct nbd_conn *conn_new(struct nbd_server *srv, int fd, const char *peer)
{
    struct nbd_conn *c = tc_xcalloc(1, sizeof *c);
    c->srv = srv;
    c->fd = fd;
    c->id = ++srv->next_conn_id;
    snprintf(c->peer, sizeof c->peer, "%s", peer);
    c->rx = tc_xmalloc(RX_SIZE);
    c->txq_tail = &c->txq;
    c->refs = 1;
    c->phase = PHASE_CLIENT_FLAGS;
    c->next = srv->conns;
    if (srv->conns)
        srv->conns->prev = c;
    srv->conns = c;
    srv->nconns++;
    handshake_start(c);
    rx_arm(c);
    return c;
}

static void conn_free(struct nbd_conn *c)
{
    struct nbd_server *srv = c->srv;
    if (c->prev)
        c->prev->next = c->next;
    else
        srv->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    srv->nconns--;
    close(c->fd);
    free(c->rx);
    free(c);
    nbd_server_conn_gone(srv, NULL);
}

void conn_put(struct nbd_conn *c)
{
    if (--c->refs == 0)
        conn_free(c);
}

/* Drop the connection's own reference once nothing is left to do. */
static void maybe_finish(struct nbd_conn *c)
{
    if (c->finished || !c->closing)
        return;
    if (c->inflight > 0 || c->rx_armed || c->tx_armed || (c->txq && !c->dead))
        return;
    c->finished = true;
    shutdown(c->fd, SHUT_RDWR);
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
    tc_debug("connection %llu (%s): closing: %s", (unsigned long long)c->id, c->peer, why);
    /* A pending recv ends (with 0) once the read side is shut. */
    shutdown(c->fd, SHUT_RD);
    maybe_finish(c);
}

void conn_abort(struct nbd_conn *c, const char *why)
{
    if (!c->dead)
        tc_warn("connection %llu (%s): disconnecting: %s", (unsigned long long)c->id, c->peer,
                why);
    c->closing = true;
    c->dead = true;
    shutdown(c->fd, SHUT_RDWR);
    drop_queue(c);
    maybe_finish(c);
}

/* ---- receiving ---- */

static void rx_done(struct tc_io *io, int res);

static void rx_arm(struct nbd_conn *c)
{
    if (c->rx_armed)
        return;
    if (c->closing) {
        /* Nothing more will be received, so a WRITE whose payload is still
         * arriving can never complete: drop it, or it would hold the
         * connection (and the daemon's shutdown) for ever. */
        if (c->rx_req) {
            struct nbd_req *req = c->rx_req;
            c->rx_req = NULL;
            transmission_abandon(req);
        }
        return;
    }
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
    c->rx_io.done = rx_done;
    io_uring_prep_recv(reactor_sqe(c->srv->reactor, &c->rx_io), c->fd, dst, len, 0);
    c->rx_armed = true;
    conn_get(c);
}

static void rx_done(struct tc_io *io, int res)
{
    struct nbd_conn *c = container_of(io, struct nbd_conn, rx_io);
    c->rx_armed = false;
    if (res == -EINTR || res == -EAGAIN) {
        rx_arm(c);
        maybe_finish(c);    /* rx_arm() arms nothing once the connection is closing */
        conn_put(c);
        return;
    }
    if (res <= 0) {
        if (!c->closing) {
            bool mid = c->rx_req != NULL || conn_rx_avail(c) > 0;
            if (res == 0 && !mid)
                tc_debug("connection %llu (%s): client closed the connection",
                         (unsigned long long)c->id, c->peer);
            else
                tc_warn("connection %llu (%s): %s%s", (unsigned long long)c->id, c->peer,
                        res == 0 ? "client disconnected" : strerror(-res),
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
        while (!c->closing && c->rx_req == NULL) {
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

static void tx_kick(struct nbd_conn *c)
{
    if (c->tx_armed || c->dead || c->txq == NULL)
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
    io_uring_prep_sendmsg(reactor_sqe(c->srv->reactor, &c->tx_io), c->fd, &c->tx_msg,
                          MSG_NOSIGNAL);
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
    size_t left = (size_t)res;
    c->tx_bytes -= TC_MIN(c->tx_bytes, left);
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
    tx_kick(c);
    /* Option parsing may have paused for this send (HANDSHAKE_MAX_QUEUED). */
    if (c->phase != PHASE_TRANSMISSION)
        conn_parse(c);
    maybe_finish(c);
    conn_put(c);
}

void conn_send(struct nbd_conn *c, struct nbd_out *out)
{
    if (c->dead) {
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
