/*
 * The transmission phase: one NBD request from the socket to the engine
 * and its reply back.
 *
 *   28-byte header ─► check ─┬─► error reply (payload, if any, discarded)
 *                            └─► [payload into req->buf] ─► tc_submit()
 *                                        tc_request.done ─► reply queued
 *                                        reply sent ─► request freed
 *
 * Requests run concurrently and replies leave in completion order.  Each
 * connection may hold at most MAX_INFLIGHT requests, and at most
 * --max-client-buffer-memory of buffers (default an eighth of
 * --max-buffer-memory), counting its replies not yet sent: a request that
 * would pass that is left unread, with the rest of the socket, until one
 * of the client's own requests returns its buffer.  So a client that stops
 * reading its replies takes at most its own limit from the memory all
 * clients share, and then stops being read (it is not disconnected).  One
 * request is always allowed (a client with nothing in flight may send a
 * 32 MiB read however low its limit).
 *
 * All connections together stay within --max-buffer-memory (bytes the
 * buffer pool has handed out, the engine's own included): a request whose
 * buffer does not fit waits, its header unread, and the connection stops
 * reading, so TCP flow control holds the client back.  Waiting connections
 * queue first come first served and are woken as requests return memory
 * (and every MEM_POLL_NS, for memory the engine returns on its own).  A
 * connection with nothing in flight may always start one request of at
 * most SMALL_REQUEST bytes, so a light client is served promptly during a
 * flood; that can exceed the limit by max_connections x SMALL_REQUEST.
 * And when no client request holds any buffer, the request at the head of
 * a queue goes ahead whatever its size: what is in use then is the
 * engine's own (the cleaner's read-ahead of the next group, a fill), which
 * may come back only once clients' requests go on -- waiting for it would
 * wait for ever (every connection queued, nothing in flight).  That passes
 * the limit by at most what the engine holds, once per queue.
 * Clients that stop reading hold at most their own limit each: with the
 * defaults, seven of them still leave an eighth of the memory to the rest,
 * and beyond that every other client keeps its one small request.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/bufpool.h"
#include "nbd/proto.h"
#include "nbd/server.h"
#include "trace/trace.h"
#include "util/log.h"
#include "util/misc.h"

#define MAX_INFLIGHT 128
#define MAX_EXTENTS 256
#define SMALL_REQUEST (1u << 20)
#define MEM_POLL_NS (10ull * 1000000ull)

/* A request, from its header to its reply's release.  With front-end
 * threads (fe.c) it travels: parsed on the connection's front end, posted
 * (xmsg) to the reactor, which checks it against the live volume, gives a
 * read its pool buffer and submits it; posted back once the engine is
 * done, replied to and released on the front end; a read's pool buffer
 * (pool_buf) is posted back to the reactor once more, to be put there.  Whoever holds the message owns the request
 * and its buffer; the other side does not look at it. */
struct nbd_req {
    struct nbd_out out;             /* the reply */
    struct nbd_conn *conn;          /* the front end's: the reactor does not look */
    struct nbd_server *srv;
    struct nbd_fe *fe;              /* the connection's front end, or NULL */
    uint64_t conn_id;
    struct tc_msg xmsg;             /* between the threads */
    uint32_t err;                   /* the NBD error to reply with */
    bool pool_buf;                  /* buf is the reactor's pool's */
    uint64_t fe_charge;             /* bytes charged with bufpool_charge() */
    struct tc_request treq;
    uint64_t cookie;
    uint64_t offset;
    uint32_t length;
    uint32_t got;                   /* write payload bytes received */
    uint16_t flags, type;
    void *buf;                      /* read data / write payload / extents */
    size_t buf_size;
    size_t charged;                 /* bytes counted in conn->inflight_bytes */
    uint8_t hdr[32];
    char msg[96];                   /* error text for structured replies */
    struct tc_extent extents[MAX_EXTENTS];
};

static const char *cmd_name(unsigned type)
{
    static const char *names[] = { "READ", "WRITE", "DISC", "FLUSH", "TRIM", "CACHE",
                                   "WRITE_ZEROES", "BLOCK_STATUS" };
    return type < TC_ARRAY_SIZE(names) ? names[type] : "UNKNOWN";
}

/* Without --max-buffer-memory (and without an explicit per-client
 * limit), what the old fixed per-connection bound was. */
#define DEFAULT_CLIENT_LIMIT (128ull << 20)

static inline void stat_inc(uint64_t *f) { NBD_STAT_ADD(*f, 1); }

uint64_t transmission_client_limit(const struct nbd_server *srv)
{
    if (srv->cfg.max_client_buffer_memory)
        return srv->cfg.max_client_buffer_memory;
    return srv->cfg.max_buffer_memory ? srv->cfg.max_buffer_memory / 8 : DEFAULT_CLIENT_LIMIT;
}

/* The byte limit is checked against the next request's own size, once
 * its header is in (client_admit()): requests that need no buffer (FLUSH,
 * TRIM, ...) still go when a client is at its limit. */
bool transmission_can_accept(const struct nbd_conn *c)
{
    return !c->mem_waiting && !c->over_limit && c->inflight < MAX_INFLIGHT;
}

/* The per-client bound for the request at the head of rx[]: false (and
 * the connection stops reading until one of its requests returns) if it
 * would take the client past its limit; one request always goes. */
static bool client_admit(struct nbd_conn *c, uint64_t need)
{
    if (c->inflight == 0 || c->inflight_bytes + need <= transmission_client_limit(c->srv))
        return true;
    CONN_SET(c, over_limit, true);
    stat_inc(&c->stats->client_memory_waits);
    return false;
}

/* ---- the global bound on buffer memory ---- */

/* Bytes of buffers client requests hold, on every connection (atomic:
 * front ends add and take their own requests'). */
static uint64_t client_buffer_bytes;

static bool mem_fits(const struct nbd_server *srv, uint64_t need)
{
    return bufpool_in_use() + need <= srv->cfg.max_buffer_memory ||
           __atomic_load_n(&client_buffer_bytes, __ATOMIC_RELAXED) == 0;
}

static void mem_dequeue(struct nbd_conn *c)
{
    struct nbd_memq *q = c->memq;
    if (c->mem_prev)
        c->mem_prev->mem_next = c->mem_next;
    else
        q->head = c->mem_next;
    if (c->mem_next)
        c->mem_next->mem_prev = c->mem_prev;
    else
        q->tail = c->mem_prev;
    c->mem_prev = c->mem_next = NULL;
    CONN_SET(c, mem_waiting, false);
    __atomic_store_n(&q->n, q->n - 1, __ATOMIC_RELAXED);
    if (q->head == NULL)
        timer_cancel(q->reactor, &q->timer);
}

void transmission_memory_forget(struct nbd_conn *c)
{
    if (c->mem_waiting)
        mem_dequeue(c);
    c->mem_granted = false;
}

static void mem_timer_fn(struct tc_timer *t);

static void mem_wake(struct nbd_memq *q)
{
    while (q->head && mem_fits(q->head->srv, q->head->mem_need)) {
        struct nbd_conn *c = q->head;
        mem_dequeue(c);
        c->mem_granted = true;      /* its next request goes ahead */
        conn_get(c);
        conn_parse(c);
        conn_put(c);
    }
    if (q->head && !q->timer.armed) {
        q->timer.fn = mem_timer_fn;
        timer_arm(q->reactor, &q->timer, MEM_POLL_NS);
    }
}

static void mem_timer_fn(struct tc_timer *t)
{
    mem_wake(container_of(t, struct nbd_memq, timer));
}

static void mem_task_fn(struct tc_task *t)
{
    mem_wake(container_of(t, struct nbd_memq, task));
}

/* May the request at the head of rx[], needing a buffer of need bytes,
 * start now?  If not, the connection joins the queue. */
static bool mem_admit(struct nbd_conn *c, uint64_t need)
{
    struct nbd_server *srv = c->srv;
    struct nbd_memq *q = c->memq;
    if (srv->cfg.max_buffer_memory == 0 || need == 0)
        return true;
    if (c->mem_granted) {
        c->mem_granted = false;
        return true;
    }
    if (c->mem_waiting)
        return false;
    if (q->head == NULL && mem_fits(srv, need))
        return true;
    if (c->inflight == 0 && need <= SMALL_REQUEST)
        return true;
    CONN_SET(c, mem_waiting, true);
    c->mem_need = need;
    c->mem_prev = q->tail;
    c->mem_next = NULL;
    if (q->tail)
        q->tail->mem_next = c;
    else
        q->head = c;
    q->tail = c;
    __atomic_store_n(&q->n, q->n + 1, __ATOMIC_RELAXED);
    stat_inc(&c->stats->memory_waits);
    if (!q->timer.armed) {
        q->timer.fn = mem_timer_fn;
        timer_arm(q->reactor, &q->timer, MEM_POLL_NS);
    }
    return false;
}

unsigned transmission_memory_waiting(const struct nbd_server *srv)
{
    unsigned n = srv->memq.n;
    for (unsigned i = 0; i < srv->nfes; i++)
        n += __atomic_load_n(&srv->fes[i].memq.n, __ATOMIC_RELAXED);
    return n;
}

static uint32_t nbd_errno(int err)
{
    switch (err) {
    case 0: return 0;
    case EPERM: case EROFS: return NBD_EPERM;
    case EIO: return NBD_EIO;
    case ENOMEM: return NBD_ENOMEM;
    case EINVAL: return NBD_EINVAL;
    case ENOSPC: case EDQUOT: case EFBIG: return NBD_ENOSPC;
    case EOVERFLOW: return NBD_EOVERFLOW;
    case ENOTSUP: return NBD_ENOTSUP;
    case ESHUTDOWN: return NBD_ESHUTDOWN;
    default: return NBD_EIO;
    }
}

/* Requests are kept for reuse: each is 4 KiB and more (the extents of a
 * block status reply), which malloc() serves slowly (5 % of the CPU of
 * cached 4 KiB reads).  Each thread keeps its own (front ends, fe.c). */
#define REQ_KEEP 256

static __thread struct nbd_req *req_spare[REQ_KEEP];  /* per thread */
static __thread unsigned req_nspare;

/* Sanitizer builds free them (as tc_obj_put() does), so that a use of a
 * request after its release is reported. */
#if defined(__SANITIZE_ADDRESS__)
#define REQ_RECYCLE 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define REQ_RECYCLE 0
#endif
#endif
#ifndef REQ_RECYCLE
#define REQ_RECYCLE 1
#endif

static void req_recycle(struct nbd_req *req)
{
    if (REQ_RECYCLE && req_nspare < REQ_KEEP)
        req_spare[req_nspare++] = req;
    else
        free(req);
}

/* A front end's read is over: its pool buffer goes back to the reactor,
 * carrying its own message (a buffer is 4 KiB or more), so that the
 * request stays to be reused on the front end. */
struct buf_msg {
    struct tc_msg msg;
    size_t size;
};

static void buf_free_msg(struct tc_msg *msg)
{
    struct buf_msg *b = container_of(msg, struct buf_msg, msg);
    bufpool_put(b, b->size);
}

static void req_release(struct nbd_out *out)
{
    struct nbd_req *req = container_of(out, struct nbd_req, out);
    struct nbd_conn *c = req->conn;
    struct nbd_memq *q = c->memq;
    bool freed = req->buf != NULL || req->fe_charge > 0;
    if (req->fe_charge > 0)
        bufpool_charge(-(int64_t)req->fe_charge);
    CONN_SET(c, inflight, c->inflight - 1);
    CONN_SET(c, inflight_bytes, c->inflight_bytes - req->charged);
    __atomic_sub_fetch(&client_buffer_bytes, req->charged, __ATOMIC_RELAXED);
    CONN_SET(c, over_limit, false);     /* conn_parse() looks at the next request again */
    if (req->pool_buf && c->fe) {
        /* The pool is the reactor's: the buffer goes back there. */
        struct buf_msg *b = req->buf;
        b->size = req->buf_size;
        b->msg.fn = buf_free_msg;
        mailbox_post(&c->srv->inbox, &b->msg);
    } else if (req->pool_buf) {
        bufpool_put(req->buf, req->buf_size);
    } else {
        free(req->buf);
    }
    req_recycle(req);
    if (freed && q->head) {
        /* Memory came back: let waiting connections go, from a fresh stack. */
        q->task.fn = mem_task_fn;
        reactor_defer(q->reactor, &q->task);
    }
    /* A request slot is free: parse what is waiting, read more. */
    conn_parse(c);
    conn_put(c);
}

static struct nbd_req *req_new(struct nbd_conn *c)
{
    struct nbd_req *req = req_nspare ? req_spare[--req_nspare] : tc_xmalloc(sizeof *req);
    memset(req, 0, offsetof(struct nbd_req, extents));
    req->conn = c;
    req->srv = c->srv;
    req->fe = c->fe;
    req->conn_id = c->id;
    req->out.release = req_release;
    CONN_SET(c, inflight, c->inflight + 1);
    conn_get(c);
    return req;
}

/* A read's buffer comes from the reactor's pool (the engine may swap it
 * for another, TC_REQ_POOL_BUF, and reads into registered pool buffers).
 * On a front end it is charged now and taken from the pool by the
 * reactor (transmission_submit_msg()); a write's or a block status's
 * buffer is the front end's own. */
static void req_alloc_buf(struct nbd_req *req, size_t size)
{
    struct nbd_conn *c = req->conn;
    req->buf_size = size;
    req->charged = size;
    CONN_SET(c, inflight_bytes, c->inflight_bytes + size);
    __atomic_add_fetch(&client_buffer_bytes, size, __ATOMIC_RELAXED);
    if (c->fe == NULL) {
        req->buf = bufpool_get(size);
        req->pool_buf = true;
    } else if (req->type == NBD_CMD_READ) {
        req->fe_charge = size;
        bufpool_charge((int64_t)size);
    } else {
        req->buf = tc_alloc_aligned(size);
        req->fe_charge = size;
        bufpool_charge((int64_t)size);
    }
    uint64_t used = bufpool_in_use();
    if (used > c->stats->buffer_memory_peak)
        NBD_STAT_ADD(c->stats->buffer_memory_peak, used - c->stats->buffer_memory_peak);
}

/* Build and queue the reply for req, with err (an NBD error code). */
static void reply(struct nbd_req *req, uint32_t err)
{
    struct nbd_conn *c = req->conn;
    uint8_t *h = req->hdr;
    if (err)
        stat_inc(&c->stats->errors_sent);

    if (c->structured_replies && (req->type == NBD_CMD_READ || req->type == NBD_CMD_BLOCK_STATUS ||
                                  err)) {
        put_be32(h, NBD_STRUCTURED_REPLY_MAGIC);
        put_be16(h + 4, NBD_REPLY_FLAG_DONE);
        put_be64(h + 8, req->cookie);
        if (err) {
            const char *m = req->msg[0] ? req->msg : strerror(err == NBD_ENOTSUP ? ENOTSUP : (int)err);
            size_t ml = TC_MIN(strlen(m), sizeof req->msg - 1);
            put_be16(h + 6, NBD_REPLY_TYPE_ERROR);
            put_be32(h + 16, (uint32_t)(6 + ml));
            put_be32(h + 20, err);
            put_be16(h + 24, (uint16_t)ml);
            req->out.iov[0] = (struct iovec){ h, 26 };
            req->out.iov[1] = (struct iovec){ (void *)m, ml };
            req->out.iovcnt = 2;
        } else if (req->type == NBD_CMD_READ) {
            put_be16(h + 6, NBD_REPLY_TYPE_OFFSET_DATA);
            put_be32(h + 16, 8 + req->length);
            put_be64(h + 20, req->offset);
            req->out.iov[0] = (struct iovec){ h, 28 };
            req->out.iov[1] = (struct iovec){ req->buf, req->length };
            req->out.iovcnt = 2;
        } else {
            /* Block status: the extents as descriptors after the context id. */
            uint8_t *p = req->buf;
            unsigned n = req->treq.nr_extents;
            put_be32(p, NBD_BASE_ALLOCATION_ID);
            for (unsigned i = 0; i < n; i++) {
                put_be32(p + 4 + 8 * i, (uint32_t)req->extents[i].length);
                put_be32(p + 8 + 8 * i, req->extents[i].flags);
            }
            put_be16(h + 6, NBD_REPLY_TYPE_BLOCK_STATUS);
            put_be32(h + 16, 4 + 8 * n);
            req->out.iov[0] = (struct iovec){ h, 20 };
            req->out.iov[1] = (struct iovec){ req->buf, 4 + 8 * n };
            req->out.iovcnt = 2;
        }
    } else {
        put_be32(h, NBD_SIMPLE_REPLY_MAGIC);
        put_be32(h + 4, err);
        put_be64(h + 8, req->cookie);
        req->out.iov[0] = (struct iovec){ h, 16 };
        req->out.iovcnt = 1;
        if (req->type == NBD_CMD_READ && !err) {
            req->out.iov[1] = (struct iovec){ req->buf, req->length };
            req->out.iovcnt = 2;
        }
    }
    conn_send(c, &req->out);
}

/* On the front end: the reactor is done with req. */
static void reply_msg(struct tc_msg *msg)
{
    struct nbd_req *req = container_of(msg, struct nbd_req, xmsg);
    reply(req, req->err);
}

/* req is done on the reactor: reply, there or on the connection's front end. */
static void finish(struct nbd_req *req, uint32_t err)
{
    if (req->fe == NULL) {
        reply(req, err);
        return;
    }
    req->err = err;
    req->xmsg.fn = reply_msg;
    mailbox_post(&req->fe->inbox, &req->xmsg);
}

static void engine_done(struct tc_request *treq, int err)
{
    struct nbd_req *req = container_of(treq, struct nbd_req, treq);
    struct nbd_server_stats *st = &req->srv->stats;     /* the reactor's */
    if (req->type == NBD_CMD_READ)
        req->buf = treq->buf;   /* TC_REQ_POOL_BUF: perhaps another pool buffer */
    if (err == 0) {
        if (req->type == NBD_CMD_READ)
            st->read_bytes += req->length;
        else if (req->type == NBD_CMD_WRITE)
            st->write_bytes += req->length;
    } else {
        snprintf(req->msg, sizeof req->msg, "%s of %u bytes at offset %llu failed: %s",
                 cmd_name(req->type), req->length, (unsigned long long)req->offset,
                 strerror(-err));
    }
    finish(req, nbd_errno(-err));
}

/* On the reactor. */
static void submit_now(struct nbd_req *req)
{
    struct nbd_server *srv = req->srv;
    struct tc_request *t = &req->treq;
    t->offset = req->offset;
    t->length = req->length;
    t->buf = req->buf;
    t->done = engine_done;
    t->flags = 0;
    /* FUA means something only to the write types; on the others it is
     * accepted and ignored (see allowed_flags()). */
    if ((req->flags & NBD_CMD_FLAG_FUA) &&
        (req->type == NBD_CMD_WRITE || req->type == NBD_CMD_TRIM ||
         req->type == NBD_CMD_WRITE_ZEROES))
        t->flags |= TC_REQ_FUA;
    if (req->flags & NBD_CMD_FLAG_NO_HOLE)
        t->flags |= TC_REQ_NO_HOLE;
    if (req->flags & NBD_CMD_FLAG_FAST_ZERO)
        t->flags |= TC_REQ_FAST_ZERO;
    if (req->flags & NBD_CMD_FLAG_REQ_ONE)
        t->flags |= TC_REQ_REQ_ONE;
    switch (req->type) {
    case NBD_CMD_READ: t->op = TC_OP_READ; break;
    case NBD_CMD_WRITE: t->op = TC_OP_WRITE; break;
    case NBD_CMD_FLUSH: t->op = TC_OP_FLUSH; t->offset = 0; t->length = 0; break;
    case NBD_CMD_TRIM: t->op = TC_OP_TRIM; break;
    case NBD_CMD_WRITE_ZEROES: t->op = TC_OP_WRITE_ZEROES; break;
    case NBD_CMD_CACHE: t->op = TC_OP_CACHE; break;
    case NBD_CMD_BLOCK_STATUS:
        t->op = TC_OP_BLOCK_STATUS;
        t->extents = req->extents;
        t->max_extents = (req->flags & NBD_CMD_FLAG_REQ_ONE) ? 1 : MAX_EXTENTS;
        t->nr_extents = 0;
        break;
    }
    if (srv->trace)
        trace_writer_record(srv->trace, (uint8_t)t->op, (uint8_t)t->flags, t->offset,
                            (uint32_t)t->length, (uint16_t)req->conn_id);
    if (t->op == TC_OP_READ)
        t->flags |= TC_REQ_POOL_BUF;    /* req->buf is bufpool_get(length) */
    tc_submit(srv->vol, t);
}

/* What a front end cannot check, against the live volume (on the reactor):
 * the shutdown, the read-only flag, the size now.  0 or the NBD error. */
static uint32_t check_live(struct nbd_req *req)
{
    struct nbd_server *srv = req->srv;
    uint16_t t = req->type;
    if (srv->stopping) {
        snprintf(req->msg, sizeof req->msg, "the server is shutting down");
        return NBD_ESHUTDOWN;
    }
    if (t == NBD_CMD_FLUSH)
        return 0;
    bool writes = t == NBD_CMD_WRITE || t == NBD_CMD_TRIM || t == NBD_CMD_WRITE_ZEROES;
    bool ro = tc_volume_read_only(srv->vol);
    if (writes && ro) {
        snprintf(req->msg, sizeof req->msg, "the export is read-only");
        return NBD_EPERM;
    }
    uint64_t size = tc_volume_size(srv->vol);
    if (req->offset > size || req->length > size - req->offset) {
        snprintf(req->msg, sizeof req->msg, "offset %llu + length %u is past the end (%llu)",
                 (unsigned long long)req->offset, req->length, (unsigned long long)size);
        return (t == NBD_CMD_WRITE || t == NBD_CMD_WRITE_ZEROES) ? NBD_ENOSPC : NBD_EINVAL;
    }
    return 0;
}

void transmission_submit_msg(struct tc_msg *msg)
{
    struct nbd_req *req = container_of(msg, struct nbd_req, xmsg);
    uint32_t err = check_live(req);
    if (err) {
        finish(req, err);
        return;
    }
    if (req->type == NBD_CMD_READ) {
        /* The front end's charge becomes the pool's count. */
        req->buf = bufpool_get(req->buf_size);
        req->pool_buf = true;
        bufpool_charge(-(int64_t)req->fe_charge);
        req->fe_charge = 0;
    }
    submit_now(req);
}

static void submit(struct nbd_req *req)
{
    if (req->fe == NULL) {
        submit_now(req);
        return;
    }
    req->xmsg.fn = transmission_submit_msg;
    mailbox_post(&req->srv->inbox, &req->xmsg);
}

/* Which flags each command accepts (others get EINVAL).  FUA is valid on
 * every command once NBD_FLAG_SEND_FUA is advertised (which it always
 * is): proto.md says the server MUST accept it, even by ignoring it, and
 * clients are known to set it on reads and flushes. */
static uint16_t allowed_flags(const struct nbd_conn *c, uint16_t type)
{
    switch (type) {
    case NBD_CMD_READ: return NBD_CMD_FLAG_FUA | (c->structured_replies ? NBD_CMD_FLAG_DF : 0);
    case NBD_CMD_WRITE: return NBD_CMD_FLAG_FUA;
    case NBD_CMD_FLUSH: return NBD_CMD_FLAG_FUA;
    case NBD_CMD_TRIM: return NBD_CMD_FLAG_FUA;
    case NBD_CMD_CACHE: return NBD_CMD_FLAG_FUA;
    case NBD_CMD_WRITE_ZEROES:
        return NBD_CMD_FLAG_FUA | NBD_CMD_FLAG_NO_HOLE | NBD_CMD_FLAG_FAST_ZERO;
    case NBD_CMD_BLOCK_STATUS: return NBD_CMD_FLAG_FUA | NBD_CMD_FLAG_REQ_ONE;
    default: return 0;
    }
}

/* 0 if req may go to the engine, else the NBD error to answer with (and a
 * message in req->msg). */
static uint32_t check(struct nbd_conn *c, struct nbd_req *req)
{
    struct nbd_server *srv = c->srv;
    /* A front end checks against the size at the hand-over, and leaves
     * the read-only flag to the reactor's check_live(). */
    uint64_t size = c->fe ? c->vol_size : tc_volume_size(srv->vol);
    uint16_t t = req->type;

    if (t > NBD_CMD_BLOCK_STATUS || t == NBD_CMD_DISC) {
        snprintf(req->msg, sizeof req->msg, "unknown command %u", t);
        return NBD_EINVAL;
    }
    if (req->flags & ~allowed_flags(c, t)) {
        snprintf(req->msg, sizeof req->msg, "flags 0x%x not valid for %s", req->flags,
                 cmd_name(t));
        return NBD_EINVAL;
    }
    if (nbd_stopping(srv)) {
        snprintf(req->msg, sizeof req->msg, "the server is shutting down");
        return NBD_ESHUTDOWN;
    }
    if (t == NBD_CMD_FLUSH)
        return 0;
    if (req->length == 0) {
        snprintf(req->msg, sizeof req->msg, "zero-length %s", cmd_name(t));
        return NBD_EINVAL;
    }
    bool writes = t == NBD_CMD_WRITE || t == NBD_CMD_TRIM || t == NBD_CMD_WRITE_ZEROES;
    if (writes && c->fe == NULL && tc_volume_read_only(srv->vol)) {
        snprintf(req->msg, sizeof req->msg, "the export is read-only");
        return NBD_EPERM;
    }
    if (req->offset > size || req->length > size - req->offset) {
        snprintf(req->msg, sizeof req->msg, "offset %llu + length %u is past the end (%llu)",
                 (unsigned long long)req->offset, req->length, (unsigned long long)size);
        return (t == NBD_CMD_WRITE || t == NBD_CMD_WRITE_ZEROES) ? NBD_ENOSPC : NBD_EINVAL;
    }
    if ((t == NBD_CMD_READ || t == NBD_CMD_WRITE) && req->length > NBD_MAX_PAYLOAD) {
        snprintf(req->msg, sizeof req->msg, "length %u is over the maximum %u", req->length,
                 NBD_MAX_PAYLOAD);
        return NBD_EINVAL;
    }
    if (t == NBD_CMD_BLOCK_STATUS && !c->meta_allocation) {
        snprintf(req->msg, sizeof req->msg, "no metadata context was negotiated");
        return NBD_EINVAL;
    }
    return 0;
}

bool transmission_parse(struct nbd_conn *c)
{
    if (!transmission_can_accept(c))
        return false;
    if (conn_rx_avail(c) < NBD_REQUEST_SIZE)
        return false;
    const uint8_t *p = c->rx + c->rx_start;
    uint32_t magic = get_be32(p);
    if (magic != NBD_REQUEST_MAGIC) {
        stat_inc(&c->stats->protocol_errors);
        char why[64];
        snprintf(why, sizeof why, "bad request magic 0x%08x", magic);
        conn_abort(c, why);
        return false;
    }
    uint16_t flags = get_be16(p + 4);
    uint16_t type = get_be16(p + 6);
    uint64_t cookie = get_be64(p + 8);
    uint64_t offset = get_be64(p + 16);
    uint32_t length = get_be32(p + 24);
    uint64_t need = 0;
    if ((type == NBD_CMD_READ || type == NBD_CMD_WRITE) && length <= NBD_MAX_PAYLOAD)
        need = length;
    else if (type == NBD_CMD_BLOCK_STATUS)
        need = 4 + 8 * MAX_EXTENTS;
    if (!client_admit(c, need))
        return false;   /* the header stays in rx[]; req_release() resumes */
    if (!mem_admit(c, need))
        return false;   /* the header stays in rx[] until memory is free */
    c->rx_start += NBD_REQUEST_SIZE;
    CONN_SET(c, requests, c->requests + 1);
    if (type < TC_ARRAY_SIZE(c->stats->requests))
        stat_inc(&c->stats->requests[type]);

    if (type == NBD_CMD_DISC) {
        conn_close(c, "client sent NBD_CMD_DISC");
        return false;
    }
    if (type == NBD_CMD_WRITE && length > NBD_MAX_PAYLOAD) {
        /* Reading such a payload would be a denial of service (proto.md). */
        stat_inc(&c->stats->protocol_errors);
        char why[96];
        snprintf(why, sizeof why, "write payload of %u bytes is over the maximum %u", length,
                 NBD_MAX_PAYLOAD);
        conn_abort(c, why);
        return false;
    }

    struct nbd_req *req = req_new(c);
    req->cookie = cookie;
    req->offset = offset;
    req->length = length;
    req->flags = flags;
    req->type = type;

    uint32_t err = check(c, req);
    if (err) {
        tc_debug("connection %llu (%s): %s refused: %s", (unsigned long long)c->id, c->peer,
                 cmd_name(type), req->msg);
        if (type == NBD_CMD_WRITE)
            c->rx_discard = length;     /* stay in step with the client */
        reply(req, err);
        return true;
    }

    switch (type) {
    case NBD_CMD_READ:
        req_alloc_buf(req, length);
        break;
    case NBD_CMD_WRITE: {
        req_alloc_buf(req, length);
        size_t n = TC_MIN(conn_rx_avail(c), (size_t)length);
        memcpy(req->buf, c->rx + c->rx_start, n);
        c->rx_start += n;
        req->got = (uint32_t)n;
        if (req->got < length) {
            c->rx_req = req;        /* conn.c receives the rest into req->buf */
            return true;
        }
        break;
    }
    case NBD_CMD_BLOCK_STATUS:
        req_alloc_buf(req, 4 + 8 * MAX_EXTENTS);
        break;
    default:
        break;
    }
    submit(req);
    return true;
}

void *transmission_payload_target(struct nbd_req *req, size_t *len)
{
    *len = req->length - req->got;
    return (char *)req->buf + req->got;
}

bool transmission_payload_received(struct nbd_req *req, size_t n)
{
    req->got += (uint32_t)n;
    return req->got == req->length;
}

void transmission_payload_done(struct nbd_conn *c, struct nbd_req *req)
{
    (void)c;
    submit(req);
}

void transmission_abandon(struct nbd_req *req)
{
    /* Never submitted and never answered: the client is gone. */
    req_release(&req->out);
}
