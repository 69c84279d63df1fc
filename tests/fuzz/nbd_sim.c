/*
 * The simulated reactor, engine and buffer pool around the real NBD
 * server, and the client-side check of what it sent (see nbd_sim.h).
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "io/bufpool.h"
#include "io/reactor.h"
#include "nbd/proto.h"
#include "nbd/server.h"
#include "nbd_sim.h"
#include "tiercache.h"
#include "util/log.h"
#include "util/misc.h"

#define DESCRIPTION "a volume under fuzzing"
/* A run that needs more steps than this is stuck (e.g. a recv re-armed
 * for ever after EOF). */
#define STEP_LIMIT 4000000

static void sim_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void sim_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "nbd_sim: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    abort();
}

/* ---- the state of one run ---- */

struct submission {
    enum tc_op op;
    unsigned flags;
    uint64_t offset, length;
    uint64_t payload_hash;          /* WRITE: of the buffer as submitted */
    bool completed;
    int err;                        /* what the engine answered */
    unsigned nr_extents;            /* BLOCK_STATUS: what the engine answered */
    struct tc_extent ext[4];
};

struct engine_op {
    struct tc_request *req;
    size_t sub;                     /* index in subs */
};

struct pending_op {
    bool used;
    struct tc_io *io;
    struct io_uring_sqe sqe;
};

struct buf_rec {
    void *p;
    size_t size;
};

#define MAX_PENDING 8
#define MAX_TIMERS 4
#define MAX_TASKS 8

static struct {
    /* configuration */
    bool read_only, rotational, allow_stop, send_errors, recv_errors, named, engine_errors,
        small_pieces;
    uint64_t max_buffer_memory;     /* the server's bound (0: none) */
    bool hs_deadline;               /* the handshake has a deadline */
    /* the client */
    const uint8_t *stream;
    size_t len, delivered;
    uint8_t *out;                   /* what the server sent, in order */
    size_t out_len, out_cap;
    /* what happened */
    bool aborted, send_failed, stopped;
    int fd;                         /* the connection's socket (/dev/null) */
    bool rd_shut, wr_shut;          /* shutdown() on it */
    unsigned stopped_calls;
    uint16_t export_flags;
    /* the reactor */
    struct pending_op ops[MAX_PENDING];
    struct tc_timer *timers[MAX_TIMERS];
    struct tc_task *tasks[MAX_TASKS];   /* deferred, not yet run */
    unsigned ntasks;
    /* the engine */
    struct submission *subs;
    size_t nsubs, subs_cap;
    struct engine_op *queue;
    size_t nqueue, queue_cap;
    /* the buffer pool */
    struct buf_rec *bufs;
    size_t nbufs, bufs_cap;
} sim;

static uint64_t rng_state;

static uint64_t rng(void)
{
    uint64_t x = rng_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static uint64_t rng_below(uint64_t n) { return n ? rng() % n : 0; }
static bool one_in(unsigned n) { return rng_below(n) == 0; }

static void *grow(void *p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return p;
    size_t c = *cap ? *cap : 16;
    while (c < need)
        c *= 2;
    p = realloc(p, c * elem);
    if (p == NULL)
        sim_fail("out of memory");
    *cap = c;
    return p;
}

/*
 * The data the engine returns for the volume: byte p is byte p % 8 of a
 * hash of p / 8, so a misplaced byte is seen.  These loops over data run
 * for every byte read or written; they are left out of the coverage
 * instrumentation, which would only slow them down.
 */
#define NO_COVERAGE __attribute__((no_sanitize("coverage")))

static inline uint64_t word_at(uint64_t w)
{
    w = (w ^ (w >> 31)) * 0x7fb5d329728ea185ull;
    return w ^ (w >> 27);
}

static inline uint8_t pattern(uint64_t p) { return (uint8_t)(word_at(p >> 3) >> (8 * (p & 7))); }

NO_COVERAGE static void fill_pattern(uint8_t *b, uint64_t off, uint64_t n)
{
    uint64_t i = 0;
    for (; i < n && ((off + i) & 7); i++)
        b[i] = pattern(off + i);
    for (; i + 8 <= n; i += 8) {
        uint64_t v = htole64(word_at((off + i) >> 3));
        memcpy(b + i, &v, 8);
    }
    for (; i < n; i++)
        b[i] = pattern(off + i);
}

NO_COVERAGE static bool check_data(const uint8_t *d, uint64_t off, uint64_t n)
{
    uint64_t i = 0;
    for (; i < n && ((off + i) & 7); i++)
        if (d[i] != pattern(off + i))
            return false;
    for (; i + 8 <= n; i += 8) {
        uint64_t v = htole64(word_at((off + i) >> 3));
        if (memcmp(d + i, &v, 8) != 0)
            return false;
    }
    for (; i < n; i++)
        if (d[i] != pattern(off + i))
            return false;
    return true;
}

NO_COVERAGE static uint64_t fnv(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* ---- the reactor ---- */

static struct tc_reactor sim_reactor;   /* only its address is used */

struct io_uring_sqe *reactor_sqe(struct tc_reactor *r, struct tc_io *io)
{
    if (r != &sim_reactor)
        sim_fail("an operation on a reactor that is not the server's");
    for (unsigned i = 0; i < MAX_PENDING; i++)
        if (sim.ops[i].used && sim.ops[i].io == io)
            sim_fail("a struct tc_io armed while it is still in flight");
    for (unsigned i = 0; i < MAX_PENDING; i++) {
        if (!sim.ops[i].used) {
            memset(&sim.ops[i], 0, sizeof sim.ops[i]);
            sim.ops[i].used = true;
            sim.ops[i].io = io;
            return &sim.ops[i].sqe;
        }
    }
    sim_fail("more than %d operations in flight for one connection", MAX_PENDING);
}

void timer_cancel(struct tc_reactor *r, struct tc_timer *t)
{
    (void)r;
    if (!t->armed)
        return;
    t->armed = false;
    for (unsigned i = 0; i < MAX_TIMERS; i++)
        if (sim.timers[i] == t)
            sim.timers[i] = NULL;
}

void timer_arm(struct tc_reactor *r, struct tc_timer *t, uint64_t delay_ns)
{
    timer_cancel(r, t);
    for (unsigned i = 0; i < MAX_TIMERS; i++) {
        if (sim.timers[i] == NULL) {
            sim.timers[i] = t;
            t->armed = true;
            t->deadline = delay_ns;
            return;
        }
    }
    sim_fail("more than %d timers armed", MAX_TIMERS);
}

/* A deferred task runs later, from a fresh stack, in an order the
 * simulation picks among the other events (the real reactor runs the
 * tasks queued so far after each batch of completions). */
void reactor_defer(struct tc_reactor *r, struct tc_task *task)
{
    if (r != &sim_reactor)
        sim_fail("a task deferred on a reactor that is not the server's");
    if (task->queued)
        return;
    if (sim.ntasks == MAX_TASKS)
        sim_fail("more than %d deferred tasks", MAX_TASKS);
    task->queued = true;
    sim.tasks[sim.ntasks++] = task;
}

static void run_task(void)
{
    struct tc_task *t = sim.tasks[0];
    memmove(sim.tasks, sim.tasks + 1, --sim.ntasks * sizeof *sim.tasks);
    t->queued = false;
    t->fn(t);
}

static int find_op(unsigned opcode)
{
    for (unsigned i = 0; i < MAX_PENDING; i++)
        if (sim.ops[i].used && sim.ops[i].sqe.opcode == opcode)
            return (int)i;
    return -1;
}

/* ---- the engine ---- */

struct tc_volume {
    uint64_t size;
    bool read_only, rotational;
};

static struct tc_volume sim_vol;

uint64_t tc_volume_size(const struct tc_volume *vol) { return vol->size; }
bool tc_volume_read_only(const struct tc_volume *vol) { return vol->read_only; }
bool tc_volume_rotational(const struct tc_volume *vol) { return vol->rotational; }

static const char *op_name(enum tc_op op)
{
    static const char *names[] = { "READ", "WRITE", "FLUSH", "TRIM", "WRITE_ZEROES", "CACHE",
                                   "BLOCK_STATUS" };
    return (unsigned)op < TC_ARRAY_SIZE(names) ? names[op] : "?";
}

/* include/tiercache.h: "The caller has checked offset + length against the
 * volume size and the read-only flag". */
void tc_submit(struct tc_volume *vol, struct tc_request *req)
{
    if (vol != &sim_vol)
        sim_fail("a request for another volume");
    if (req->done == NULL)
        sim_fail("a request without a completion");
    for (size_t i = 0; i < sim.nqueue; i++)
        if (sim.queue[i].req == req)
            sim_fail("a request submitted again before it completed");
    unsigned allowed = 0;
    bool ranged = true, writes = false;
    switch (req->op) {
    case TC_OP_READ: allowed = TC_REQ_POOL_BUF; break;    /* the server's reads: pool buffers */
    case TC_OP_WRITE: allowed = TC_REQ_FUA; writes = true; break;
    case TC_OP_FLUSH: ranged = false; break;
    case TC_OP_TRIM: allowed = TC_REQ_FUA; writes = true; break;
    case TC_OP_WRITE_ZEROES:
        allowed = TC_REQ_FUA | TC_REQ_NO_HOLE | TC_REQ_FAST_ZERO;
        writes = true;
        break;
    case TC_OP_CACHE: break;
    case TC_OP_BLOCK_STATUS: allowed = TC_REQ_REQ_ONE; break;
    default: sim_fail("a request with unknown operation %d", (int)req->op);
    }
    if (req->flags & ~allowed)
        sim_fail("%s with flags 0x%x", op_name(req->op), req->flags);
    if (ranged) {
        if (req->length == 0)
            sim_fail("%s of 0 bytes", op_name(req->op));
        if (req->offset > vol->size || req->length > vol->size - req->offset)
            sim_fail("%s of %llu bytes at %llu is past the end of the volume (%llu)",
                     op_name(req->op), (unsigned long long)req->length,
                     (unsigned long long)req->offset, (unsigned long long)vol->size);
    }
    if (writes && (vol->read_only || (sim.export_flags & NBD_FLAG_READ_ONLY)))
        sim_fail("%s on an export that is read-only", op_name(req->op));
    if (req->op == TC_OP_READ || req->op == TC_OP_WRITE) {
        if (req->length > NBD_MAX_PAYLOAD)
            sim_fail("%s of %llu bytes, over the maximum payload", op_name(req->op),
                     (unsigned long long)req->length);
        if (req->buf == NULL)
            sim_fail("%s without a buffer", op_name(req->op));
    }
    if (req->op == TC_OP_BLOCK_STATUS &&
        (req->extents == NULL || req->max_extents == 0 ||
         ((req->flags & TC_REQ_REQ_ONE) && req->max_extents != 1)))
        sim_fail("BLOCK_STATUS with room for %u extents", req->max_extents);

    sim.subs = grow(sim.subs, &sim.subs_cap, sim.nsubs + 1, sizeof *sim.subs);
    struct submission *s = &sim.subs[sim.nsubs];
    memset(s, 0, sizeof *s);
    s->op = req->op;
    s->flags = req->flags;
    s->offset = req->offset;
    s->length = req->length;
    if (req->op == TC_OP_WRITE)
        s->payload_hash = fnv(req->buf, req->length);  /* the whole buffer must be there */
    sim.queue = grow(sim.queue, &sim.queue_cap, sim.nqueue + 1, sizeof *sim.queue);
    sim.queue[sim.nqueue++] = (struct engine_op){ req, sim.nsubs++ };
}

static void engine_complete(size_t qi)
{
    struct engine_op e = sim.queue[qi];
    sim.queue[qi] = sim.queue[--sim.nqueue];
    struct tc_request *req = e.req;
    struct submission *s = &sim.subs[e.sub];
    static const int errs[] = { EIO, ENOSPC, EINVAL, EPERM, ENOTSUP, EOVERFLOW, ESHUTDOWN,
                                ENOMEM, EROFS, EDQUOT, EFBIG, EBADMSG };
    int err = 0;
    if (sim.engine_errors && one_in(4))
        err = -errs[rng_below(TC_ARRAY_SIZE(errs))];
    if (err == 0 && req->op == TC_OP_READ)
        fill_pattern(req->buf, req->offset, req->length);
    if (err == 0 && req->op == TC_OP_BLOCK_STATUS) {
        unsigned n = 1 + (unsigned)rng_below(TC_MIN(req->max_extents, 4u));
        if (req->length < n)
            n = 1;
        uint64_t left = req->length;
        for (unsigned i = 0; i < n; i++) {
            uint64_t l = i + 1 == n ? left : req->length / n;
            req->extents[i] = (struct tc_extent){ l, (uint32_t)rng_below(4) };
            s->ext[i] = req->extents[i];
            left -= l;
        }
        req->nr_extents = n;
        s->nr_extents = n;
    }
    s->completed = true;
    s->err = err;
    req->done(req, err);
}

/* ---- the buffer pool: exact sizes, every buffer accounted for ---- */

/* server.h: with --max-buffer-memory, a connection with nothing in flight
 * may still start one request of up to 1 MiB (SMALL_REQUEST in
 * transmission.c); with one connection that is the most it may exceed. */
#define SIM_SMALL_REQUEST (1ull << 20)

void *bufpool_get(size_t size)
{
    void *p;
    if (sim.max_buffer_memory &&
        bufpool_in_use() + size > sim.max_buffer_memory + SIM_SMALL_REQUEST)
        sim_fail("a buffer of %zu bytes with %llu in use, over the server's bound of %llu",
                 size, (unsigned long long)bufpool_in_use(),
                 (unsigned long long)sim.max_buffer_memory);
    if (posix_memalign(&p, 4096, size ? size : 1) != 0)
        sim_fail("out of memory for a buffer of %zu bytes", size);
    sim.bufs = grow(sim.bufs, &sim.bufs_cap, sim.nbufs + 1, sizeof *sim.bufs);
    sim.bufs[sim.nbufs++] = (struct buf_rec){ p, size };
    return p;
}

void bufpool_put(void *buf, size_t size)
{
    if (buf == NULL)
        return;
    for (size_t i = 0; i < sim.nbufs; i++) {
        if (sim.bufs[i].p == buf) {
            if (sim.bufs[i].size != size)
                sim_fail("buffer of %zu bytes returned as %zu bytes", sim.bufs[i].size, size);
            sim.bufs[i] = sim.bufs[--sim.nbufs];
            free(buf);
            return;
        }
    }
    sim_fail("a buffer returned that the pool never gave (or twice)");
}

uint64_t bufpool_in_use(void)
{
    uint64_t n = 0;
    for (size_t i = 0; i < sim.nbufs; i++)
        n += sim.bufs[i].size;
    return n;
}

uint64_t bufpool_cached(void) { return 0; }
/* The simulated server has no ring to register buffers with. */
uint64_t bufpool_registered_bytes(void) { return 0; }
void bufpool_trim(void) {}

/* Front-end threads (serve --nbd-threads, fe.c) are not simulated: the
 * simulated server runs with none, so nothing below may be reached. */
void bufpool_charge(int64_t delta) { (void)delta; sim_fail("bufpool_charge() without front ends"); }
int mailbox_init(struct tc_mailbox *mb, struct tc_reactor *r)
{
    (void)mb, (void)r;
    sim_fail("mailbox_init() without front ends");
    return -1;
}
void mailbox_open(struct tc_mailbox *mb) { (void)mb; sim_fail("mailbox_open() without front ends"); }
void mailbox_close(struct tc_mailbox *mb) { (void)mb; sim_fail("mailbox_close() without front ends"); }
void mailbox_kick(struct tc_mailbox *mb) { (void)mb; sim_fail("mailbox_kick() without front ends"); }
void mailbox_fini(struct tc_mailbox *mb) { (void)mb; sim_fail("mailbox_fini() without front ends"); }
void mailbox_post(struct tc_mailbox *mb, struct tc_msg *msg)
{
    (void)mb, (void)msg;
    sim_fail("mailbox_post() without front ends");
}
int reactor_init(struct tc_reactor *r, unsigned entries)
{
    (void)r, (void)entries;
    sim_fail("reactor_init() without front ends");
    return -1;
}
void reactor_fini(struct tc_reactor *r) { (void)r; sim_fail("reactor_fini() without front ends"); }
void reactor_run(struct tc_reactor *r) { (void)r; sim_fail("reactor_run() without front ends"); }

/* ---- noting that the server cut the connection ---- */

void __real_conn_abort(struct nbd_conn *c, const char *why);
void __wrap_conn_abort(struct nbd_conn *c, const char *why);
void __wrap_conn_abort(struct nbd_conn *c, const char *why)
{
    sim.aborted = true;
    __real_conn_abort(c, why);
}

/* The server shuts its socket down before it drops what it queued
 * (conn_abort) or to end a pending recv (conn_close); the simulated socket
 * must then behave as the kernel's: a send fails with EPIPE before reading
 * any of its buffers, a recv returns what is already there or EOF. */
int __real_shutdown(int fd, int how);
int __wrap_shutdown(int fd, int how);
int __wrap_shutdown(int fd, int how)
{
    if (fd != sim.fd)
        return __real_shutdown(fd, how);
    if (how == SHUT_RD || how == SHUT_RDWR)
        sim.rd_shut = true;
    if (how == SHUT_WR || how == SHUT_RDWR)
        sim.wr_shut = true;
    return 0;
}

static void stopped_cb(struct nbd_server *srv)
{
    (void)srv;
    sim.stopped_calls++;
}

/* ---- the client's side of the socket ---- */

static void do_recv(int i)
{
    struct pending_op *op = &sim.ops[i];
    struct tc_io *io = op->io;
    uint8_t *dst = (uint8_t *)(uintptr_t)op->sqe.addr;
    size_t cap = op->sqe.len;
    op->used = false;
    if (cap == 0)
        sim_fail("a recv of 0 bytes (its result would read as EOF)");
    int res;
    if (one_in(64)) {
        res = one_in(2) ? -EINTR : -EAGAIN;
    } else if (sim.recv_errors && one_in(256)) {
        res = -ECONNRESET;
    } else if (sim.delivered == sim.len || (sim.rd_shut && one_in(2))) {
        res = 0;
    } else {
        size_t n = TC_MIN(cap, sim.len - sim.delivered);
        if (sim.small_pieces || one_in(8))
            n = 1 + (size_t)rng_below(TC_MIN(n, (size_t)64));
        memcpy(dst, sim.stream + sim.delivered, n);
        sim.delivered += n;
        res = (int)n;
    }
    io->done(io, res);
}

static void do_send(int i)
{
    struct pending_op *op = &sim.ops[i];
    struct tc_io *io = op->io;
    const struct msghdr *m = (const struct msghdr *)(uintptr_t)op->sqe.addr;
    op->used = false;
    if (m == NULL || m->msg_iovlen == 0 || m->msg_iovlen > 64)
        sim_fail("a sendmsg of %zu iovecs", m ? (size_t)m->msg_iovlen : 0);
    size_t total = 0;
    for (size_t k = 0; k < m->msg_iovlen; k++)
        total += m->msg_iov[k].iov_len;
    if (total == 0)
        sim_fail("a sendmsg of 0 bytes");
    int res;
    if (one_in(64)) {
        res = one_in(2) ? -EINTR : -EAGAIN;
    } else if (sim.wr_shut) {
        res = -EPIPE;
    } else if (sim.send_errors && one_in(128)) {
        res = -EPIPE;
        sim.send_failed = true;
    } else {
        size_t n = one_in(4) ? 1 + (size_t)rng_below(total) : total;
        sim.out = grow(sim.out, &sim.out_cap, sim.out_len + n, 1);
        size_t left = n;
        for (size_t k = 0; k < m->msg_iovlen && left > 0; k++) {
            size_t l = TC_MIN(left, m->msg_iov[k].iov_len);
            memcpy(sim.out + sim.out_len, m->msg_iov[k].iov_base, l);
            sim.out_len += l;
            left -= l;
        }
        res = (int)n;
    }
    io->done(io, res);
}

/* ---- reading the output as a client would ---- */

struct rd {
    const uint8_t *p;
    size_t len, pos;
};

static bool has(const struct rd *r, size_t n) { return r->len - r->pos >= n; }

/* Output ended before something it had to hold: fine only if the
 * connection was cut, the server stopped, or sending failed. */
static bool output_ends(const struct rd *o, bool complete, const char *what, unsigned long long a)
{
    if (complete)
        sim_fail("output ends at byte %zu without %s %llu", o->pos, what, a);
    return true;
}

static void no_more_output(const struct rd *o, const char *why)
{
    if (o->pos < o->len)
        sim_fail("%zu bytes of output after %s (at byte %zu)", o->len - o->pos, why, o->pos);
}

/*
 * The NBD error an engine error must reach the client as: written from
 * the protocol's own text (doc/proto.md of NetworkBlockDevice/nbd, "Error
 * values"), not from the server's nbd_errno(), so that a slip there shows
 * here.  The wire values are the spec's numbers, not proto.h's names.
 *
 *   EPERM 1, EIO 5, ENOMEM 12, EINVAL 22, ENOSPC 28, EOVERFLOW 75,
 *   ENOTSUP 95, ESHUTDOWN 108: the values the spec defines, each itself;
 *   EDQUOT, EFBIG: the server "SHOULD map [them] to NBD_ENOSPC";
 *   EROFS: a write to a read-only export "SHOULD return NBD_EPERM".
 *
 * For any other error the spec says "which error to return ... is not
 * specified by the NBD protocol" (its EINVAL rule is for unknown commands
 * and flags, which never reach the engine); the server's choice is EIO,
 * the error of a failed read or write, and that is what is checked.
 */
static const struct { int sys; uint32_t wire; } spec_errors[] = {
    { EPERM, 1 }, { EIO, 5 }, { ENOMEM, 12 }, { EINVAL, 22 }, { ENOSPC, 28 },
    { EOVERFLOW, 75 }, { ENOTSUP, 95 }, { ESHUTDOWN, 108 },
    { EDQUOT, 28 }, { EFBIG, 28 }, { EROFS, 1 },
};
#define SPEC_OTHER_ERROR 5u

static uint32_t nbd_err_of(int err)
{
    if (err == 0)
        return 0;
    for (size_t i = 0; i < TC_ARRAY_SIZE(spec_errors); i++)
        if (spec_errors[i].sys == -err)
            return spec_errors[i].wire;
    return SPEC_OTHER_ERROR;
}

struct mreq {
    uint64_t cookie, offset;
    uint32_t length;
    uint16_t flags, type;
    size_t payload;                 /* WRITE: position of the payload in the stream */
    bool incomplete;                /* WRITE whose payload did not all arrive */
    bool submitted, done;
    size_t sub;
};

static const char *export_name(void) { return sim.named ? SIM_EXPORT_NAME : ""; }

static bool name_matches(const uint8_t *n, size_t l)
{
    return l == 0 || (l == strlen(export_name()) && memcmp(n, export_name(), l) == 0);
}

/* Could submission s be request q?  Flags without an engine equivalent
 * cannot tell a refused request from an accepted one, so they must be
 * valid where they are: DF on reads with structured replies, and no
 * unknown flag at all. */
static bool req_matches(const struct mreq *q, const struct submission *s, bool structured)
{
    static const enum tc_op ops[] = { [NBD_CMD_READ] = TC_OP_READ, [NBD_CMD_WRITE] = TC_OP_WRITE,
                                      [NBD_CMD_FLUSH] = TC_OP_FLUSH, [NBD_CMD_TRIM] = TC_OP_TRIM,
                                      [NBD_CMD_CACHE] = TC_OP_CACHE,
                                      [NBD_CMD_WRITE_ZEROES] = TC_OP_WRITE_ZEROES,
                                      [NBD_CMD_BLOCK_STATUS] = TC_OP_BLOCK_STATUS };
    if (q->incomplete || q->type == NBD_CMD_DISC || q->type > NBD_CMD_BLOCK_STATUS ||
        ops[q->type] != s->op)
        return false;
    uint16_t known = NBD_CMD_FLAG_FUA | NBD_CMD_FLAG_NO_HOLE | NBD_CMD_FLAG_DF |
                     NBD_CMD_FLAG_REQ_ONE | NBD_CMD_FLAG_FAST_ZERO;
    if ((q->flags & ~known) ||
        ((q->flags & NBD_CMD_FLAG_DF) && (q->type != NBD_CMD_READ || !structured)))
        return false;
    unsigned f = 0;
    bool w = q->type == NBD_CMD_WRITE || q->type == NBD_CMD_TRIM ||
             q->type == NBD_CMD_WRITE_ZEROES;
    if ((q->flags & NBD_CMD_FLAG_FUA) && w)
        f |= TC_REQ_FUA;
    if (q->flags & NBD_CMD_FLAG_NO_HOLE)
        f |= TC_REQ_NO_HOLE;
    if (q->flags & NBD_CMD_FLAG_FAST_ZERO)
        f |= TC_REQ_FAST_ZERO;
    if (q->flags & NBD_CMD_FLAG_REQ_ONE)
        f |= TC_REQ_REQ_ONE;
    if (q->type == NBD_CMD_READ)
        f |= TC_REQ_POOL_BUF;       /* the server's own flag: its buffers are the pool's */
    if (f != s->flags)
        return false;
    if (s->op == TC_OP_FLUSH)
        return true;
    if (q->offset != s->offset || q->length != s->length)
        return false;
    if (s->op == TC_OP_WRITE && fnv(sim.stream + q->payload, q->length) != s->payload_hash)
        return false;
    return true;
}

/* Could req q have sent a reply carrying NBD error err? */
static bool err_fits(const struct mreq *q, uint32_t err)
{
    if (!q->submitted)
        return err != 0;            /* refused by the server, or never processed */
    const struct submission *s = &sim.subs[q->sub];
    return s->completed && nbd_err_of(s->err) == err;
}

static void check_transmission(struct rd *o, size_t pc, bool structured, bool meta,
                               bool complete)
{
    /* The requests, as the client sent them. */
    const uint8_t *cs = sim.stream;
    size_t D = sim.delivered;
    struct mreq *reqs = NULL;
    size_t nreqs = 0, cap = 0;
    bool cut = false;                      /* the server must have stopped reading */
    while (D - pc >= NBD_REQUEST_SIZE) {
        const uint8_t *p = cs + pc;
        if (get_be32(p) != NBD_REQUEST_MAGIC) {
            cut = true;
            break;
        }
        struct mreq q = { .flags = get_be16(p + 4), .type = get_be16(p + 6),
                          .cookie = get_be64(p + 8), .offset = get_be64(p + 16),
                          .length = get_be32(p + 24) };
        pc += NBD_REQUEST_SIZE;
        if (q.type == NBD_CMD_DISC)
            break;
        if (q.type == NBD_CMD_WRITE && q.length > NBD_MAX_PAYLOAD) {
            cut = true;
            break;
        }
        if (q.type == NBD_CMD_WRITE) {
            q.payload = pc;
            if (D - pc < q.length)
                q.incomplete = true;
            pc += TC_MIN((size_t)q.length, D - pc);
        }
        reqs = grow(reqs, &cap, nreqs + 1, sizeof *reqs);
        reqs[nreqs++] = q;
        if (q.incomplete)
            break;
    }
    if (cut && !sim.aborted && !sim.stopped)
        sim_fail("a bad request magic or an oversized WRITE did not end the connection");

    /* The engine saw a subsequence of them, in order, with exact payloads. */
    size_t j = 0;
    for (size_t k = 0; k < sim.nsubs; k++) {
        while (j < nreqs && !req_matches(&reqs[j], &sim.subs[k], structured))
            j++;
        if (j == nreqs)
            sim_fail("engine request %zu (%s of %llu bytes at %llu, flags 0x%x) matches no "
                     "request of the client's, in order and with its payload", k,
                     op_name(sim.subs[k].op), (unsigned long long)sim.subs[k].length,
                     (unsigned long long)sim.subs[k].offset, sim.subs[k].flags);
        if (sim.subs[k].op == TC_OP_BLOCK_STATUS && !meta)
            sim_fail("BLOCK_STATUS reached the engine without a metadata context");
        reqs[j].submitted = true;
        reqs[j].sub = k;
        j++;
    }

    /* Every reply answers an open request, once, consistently. */
    while (o->pos < o->len) {
        if (!has(o, 4)) {
            output_ends(o, complete, "a whole reply", 0);
            goto out;
        }
        const uint8_t *p = o->p + o->pos;
        uint32_t magic = get_be32(p);
        if (magic == NBD_SIMPLE_REPLY_MAGIC) {
            if (!has(o, NBD_SIMPLE_REPLY_SIZE)) {
                output_ends(o, complete, "a whole simple reply", 0);
                goto out;
            }
            uint32_t err = get_be32(p + 4);
            uint64_t cookie = get_be64(p + 8);
            /* Requests may share a cookie: the reply is for one that fits
             * its error and, for a read, its data. */
            struct mreq *pick = NULL;
            bool any = false;
            uint64_t datalen = 0;
            for (size_t i = 0; i < nreqs; i++) {
                struct mreq *q = &reqs[i];
                if (q->done || q->cookie != cookie || !err_fits(q, err))
                    continue;
                if (structured && (err || q->type == NBD_CMD_READ ||
                                   q->type == NBD_CMD_BLOCK_STATUS))
                    continue;       /* those take structured replies */
                uint64_t dl = q->type == NBD_CMD_READ && err == 0 ? q->length : 0;
                if (!any) {
                    any = true;
                    datalen = dl;
                } else if (dl != datalen) {
                    goto out;       /* same cookie, framing ambiguous: stop reading */
                }
                if (pick == NULL &&
                    (dl == 0 || (has(o, NBD_SIMPLE_REPLY_SIZE + dl) &&
                                 check_data(p + NBD_SIMPLE_REPLY_SIZE, q->offset, dl))))
                    pick = q;
            }
            if (!any)
                sim_fail("simple reply (error %u, cookie 0x%llx) at byte %zu answers no open "
                         "request", err, (unsigned long long)cookie, o->pos);
            if (!has(o, NBD_SIMPLE_REPLY_SIZE + datalen)) {
                output_ends(o, complete, "the data of a read of", datalen);
                goto out;
            }
            if (pick == NULL)
                sim_fail("read data at byte %zu is not what the engine returned",
                         o->pos + NBD_SIMPLE_REPLY_SIZE);
            o->pos += NBD_SIMPLE_REPLY_SIZE + datalen;
            pick->done = true;
        } else if (magic == NBD_STRUCTURED_REPLY_MAGIC) {
            if (!structured)
                sim_fail("a structured reply without structured replies negotiated");
            if (!has(o, NBD_STRUCTURED_HDR_SIZE)) {
                output_ends(o, complete, "a whole structured reply header", 0);
                goto out;
            }
            uint16_t rflags = get_be16(p + 4), rtype = get_be16(p + 6);
            uint64_t cookie = get_be64(p + 8);
            uint32_t rlen = get_be32(p + 16);
            if (rflags & ~NBD_REPLY_FLAG_DONE)
                sim_fail("structured reply flags 0x%x", rflags);
            if (!has(o, NBD_STRUCTURED_HDR_SIZE + (size_t)rlen)) {
                output_ends(o, complete, "a structured payload of", rlen);
                goto out;
            }
            const uint8_t *d = p + NBD_STRUCTURED_HDR_SIZE;
            /* Requests may share a cookie: the chunk is for one that fits
             * it, and data covering a whole read goes to that read first
             * (overlapping reads return the same bytes). */
            struct mreq *pick = NULL;
            for (size_t k = 0; k < 2 * nreqs && pick == NULL; k++) {
                bool whole = k < nreqs;
                struct mreq *q = &reqs[k % nreqs];
                if (q->done || q->cookie != cookie)
                    continue;
                const struct submission *s = q->submitted ? &sim.subs[q->sub] : NULL;
                bool ok_done = s && s->completed && s->err == 0;
                switch (rtype) {
                case NBD_REPLY_TYPE_OFFSET_DATA: {
                    if (q->type != NBD_CMD_READ || !ok_done || rlen < 8)
                        break;
                    uint64_t doff = get_be64(d), dlen = rlen - 8;
                    if (whole && (doff != q->offset || dlen != q->length))
                        break;
                    if (doff >= q->offset && doff - q->offset <= q->length &&
                        dlen <= q->length - (doff - q->offset) && check_data(d + 8, doff, dlen))
                        pick = q;
                    break;
                }
                case NBD_REPLY_TYPE_BLOCK_STATUS: {
                    if (q->type != NBD_CMD_BLOCK_STATUS || !ok_done ||
                        rlen != 4 + 8 * s->nr_extents || get_be32(d) != NBD_BASE_ALLOCATION_ID)
                        break;
                    bool same = true;
                    for (unsigned x = 0; x < s->nr_extents; x++)
                        if (get_be32(d + 4 + 8 * x) != s->ext[x].length ||
                            get_be32(d + 8 + 8 * x) != s->ext[x].flags)
                            same = false;
                    if (same)
                        pick = q;
                    break;
                }
                case NBD_REPLY_TYPE_ERROR: {
                    if (rlen < 6 || 6 + (size_t)get_be16(d + 4) != rlen)
                        sim_fail("structured error reply of %u bytes with a message of %u",
                                 rlen, get_be16(d + 4));
                    uint32_t err = get_be32(d);
                    if (err == 0)
                        sim_fail("structured error reply with error 0");
                    if (err_fits(q, err))
                        pick = q;
                    break;
                }
                case NBD_REPLY_TYPE_NONE:
                    if (rlen == 0 && (rflags & NBD_REPLY_FLAG_DONE))
                        pick = q;
                    break;
                default:
                    sim_fail("structured reply of unknown type %u", rtype);
                }
            }
            if (pick == NULL)
                sim_fail("structured reply (type %u, %u bytes, cookie 0x%llx) at byte %zu "
                         "answers no open request, or its contents are wrong", rtype, rlen,
                         (unsigned long long)cookie, o->pos);
            o->pos += NBD_STRUCTURED_HDR_SIZE + rlen;
            if (rflags & NBD_REPLY_FLAG_DONE)
                pick->done = true;
        } else {
            sim_fail("reply magic 0x%08x at byte %zu", magic, o->pos);
        }
    }
    if (complete) {
        for (size_t i = 0; i < nreqs; i++)
            if (!reqs[i].done && !reqs[i].incomplete)
                sim_fail("request %zu (type %u, cookie 0x%llx) was never answered", i,
                         reqs[i].type, (unsigned long long)reqs[i].cookie);
    }
out:
    free(reqs);
}

/* Reads one option reply; false if the output ends first. */
static bool opt_reply(struct rd *o, bool complete, uint32_t opt, uint32_t *type,
                      const uint8_t **data, uint32_t *len)
{
    if (!has(o, 20))
        return !output_ends(o, complete, "a reply to option", opt);
    const uint8_t *p = o->p + o->pos;
    if (get_be64(p) != NBD_REP_MAGIC)
        sim_fail("option reply magic 0x%016llx at byte %zu", (unsigned long long)get_be64(p),
                 o->pos);
    if (get_be32(p + 8) != opt)
        sim_fail("a reply for option %u while option %u is answered", get_be32(p + 8), opt);
    *type = get_be32(p + 12);
    *len = get_be32(p + 16);
    if (*len > 8192)
        sim_fail("option reply of %u bytes", *len);
    if (!has(o, 20 + (size_t)*len))
        return !output_ends(o, complete, "the data of a reply to option", opt);
    *data = p + 20;
    o->pos += 20 + *len;
    return true;
}

/*
 * The whole check, once the connection is gone.  "complete" means nothing
 * cut the exchange short (no abort, no failed send, no shutdown): then
 * every whole option and request the server received must have had its
 * full answer.  Otherwise the output may end anywhere, but what is there
 * must still be right.  A shutdown may also leave received bytes unread,
 * so input the server must refuse by disconnecting (bad magic, ...) is
 * only required to be refused when no shutdown happened.
 */
static void check_output(void)
{
    bool complete = !sim.aborted && !sim.send_failed && !sim.stopped;
    struct rd o = { sim.out, sim.out_len, 0 };
    const uint8_t *cs = sim.stream;
    size_t D = sim.delivered, pc = 0;

    if (!has(&o, 18)) {
        output_ends(&o, complete, "the greeting", 0);
        return;
    }
    if (get_be64(o.p) != NBD_MAGIC || get_be64(o.p + 8) != NBD_IHAVEOPT ||
        get_be16(o.p + 16) != (NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES))
        sim_fail("bad greeting");
    o.pos = 18;
    if (D < 4) {
        no_more_output(&o, "the greeting, without client flags");
        return;
    }
    uint32_t cflags = get_be32(cs);
    pc = 4;
    if (cflags & ~(uint32_t)(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES)) {
        if (!sim.aborted && !sim.stopped)
            sim_fail("unknown client flags 0x%x accepted", cflags);
        no_more_output(&o, "unknown client flags");
        return;
    }
    bool no_zeroes = cflags & NBD_FLAG_C_NO_ZEROES;
    bool structured = false, meta = false;
    for (;;) {
        if (D - pc < NBD_OPTION_HDR_SIZE) {
            no_more_output(&o, "the last whole option");
            return;
        }
        const uint8_t *h = cs + pc;
        uint32_t opt = get_be32(h + 8), olen = get_be32(h + 12);
        if (get_be64(h) != NBD_IHAVEOPT) {
            if (!sim.aborted && !sim.stopped)
                sim_fail("bad option magic accepted");
            no_more_output(&o, "a bad option magic");
            return;
        }
        uint32_t type, rlen;
        const uint8_t *rd;
        if (olen > NBD_MAX_OPTION_LEN) {
            if (opt == NBD_OPT_EXPORT_NAME) {
                if (!sim.aborted && !sim.stopped)
                    sim_fail("oversized NBD_OPT_EXPORT_NAME accepted");
                no_more_output(&o, "an oversized NBD_OPT_EXPORT_NAME");
                return;
            }
            if (!opt_reply(&o, complete, opt, &type, &rd, &rlen))
                return;
            if (type != NBD_REP_ERR_TOO_BIG)
                sim_fail("oversized option %u answered with type 0x%x", opt, type);
            if (D - pc - NBD_OPTION_HDR_SIZE < olen) {
                no_more_output(&o, "an oversized option still being read");
                return;
            }
            pc += NBD_OPTION_HDR_SIZE + (size_t)olen;
            continue;
        }
        if (D - pc - NBD_OPTION_HDR_SIZE < olen) {
            no_more_output(&o, "the last whole option");
            return;
        }
        const uint8_t *od = h + NBD_OPTION_HDR_SIZE;
        pc += NBD_OPTION_HDR_SIZE + (size_t)olen;

        if (opt == NBD_OPT_EXPORT_NAME) {
            if (olen > NBD_MAX_STRING || !name_matches(od, olen)) {
                if (!sim.aborted && !sim.stopped)
                    sim_fail("NBD_OPT_EXPORT_NAME for an unknown export accepted");
                no_more_output(&o, "NBD_OPT_EXPORT_NAME for an unknown export");
                return;
            }
            size_t n = no_zeroes ? 10 : 134;
            if (!has(&o, n)) {
                output_ends(&o, complete, "the reply to NBD_OPT_EXPORT_NAME", 0);
                return;
            }
            const uint8_t *p = o.p + o.pos;
            uint16_t want = sim.export_flags | (structured ? NBD_FLAG_SEND_DF : 0);
            if (get_be64(p) != sim_vol.size || get_be16(p + 8) != want)
                sim_fail("NBD_OPT_EXPORT_NAME reply: size %llu flags 0x%x",
                         (unsigned long long)get_be64(p), get_be16(p + 8));
            for (size_t i = 10; i < n; i++)
                if (p[i])
                    sim_fail("NBD_OPT_EXPORT_NAME reply: padding not zero");
            o.pos += n;
            check_transmission(&o, pc, structured, meta, complete);
            return;
        }

        if (opt == NBD_OPT_SET_META_CONTEXT)
            meta = false;           /* replaced, even if this one fails */
        bool saw_meta = false;
        for (;;) {
            if (!opt_reply(&o, complete, opt, &type, &rd, &rlen))
                return;
            if (type == NBD_REP_ACK) {
                if (rlen)
                    sim_fail("ACK with %u bytes", rlen);
                break;
            }
            if (type & 0x80000000u)
                break;
            if (type == NBD_REP_SERVER) {
                if (opt != NBD_OPT_LIST || rlen < 4 || get_be32(rd) + 4 != rlen ||
                    !name_matches(rd + 4, rlen - 4) ||
                    rlen - 4 != strlen(export_name()))
                    sim_fail("bad NBD_REP_SERVER");
            } else if (type == NBD_REP_INFO) {
                if ((opt != NBD_OPT_INFO && opt != NBD_OPT_GO) || rlen < 2)
                    sim_fail("bad NBD_REP_INFO");
                uint16_t it = get_be16(rd);
                uint16_t want = sim.export_flags | (structured ? NBD_FLAG_SEND_DF : 0);
                if (it == NBD_INFO_EXPORT) {
                    if (rlen != 12 || get_be64(rd + 2) != sim_vol.size ||
                        get_be16(rd + 10) != want)
                        sim_fail("bad NBD_INFO_EXPORT");
                } else if (it == NBD_INFO_BLOCK_SIZE) {
                    if (rlen != 14 || get_be32(rd + 2) > get_be32(rd + 6) ||
                        get_be32(rd + 6) > get_be32(rd + 10) || get_be32(rd + 2) == 0)
                        sim_fail("bad NBD_INFO_BLOCK_SIZE");
                } else if (it == NBD_INFO_NAME) {
                    if (rlen - 2 != strlen(export_name()) ||
                        memcmp(rd + 2, export_name(), rlen - 2) != 0)
                        sim_fail("bad NBD_INFO_NAME");
                } else if (it == NBD_INFO_DESCRIPTION) {
                    if (rlen - 2 != strlen(DESCRIPTION) || memcmp(rd + 2, DESCRIPTION, rlen - 2))
                        sim_fail("bad NBD_INFO_DESCRIPTION");
                } else {
                    sim_fail("NBD_REP_INFO of type %u", it);
                }
            } else if (type == NBD_REP_META_CONTEXT) {
                size_t al = strlen(NBD_BASE_ALLOCATION);
                bool set = opt == NBD_OPT_SET_META_CONTEXT;
                if ((opt != NBD_OPT_LIST_META_CONTEXT && !set) || rlen != 4 + al ||
                    memcmp(rd + 4, NBD_BASE_ALLOCATION, al) != 0 ||
                    get_be32(rd) != (set ? NBD_BASE_ALLOCATION_ID : 0))
                    sim_fail("bad NBD_REP_META_CONTEXT");
                saw_meta = true;
            } else {
                sim_fail("option reply of unknown type 0x%x", type);
            }
        }
        if (type != NBD_REP_ACK)
            continue;
        switch (opt) {
        case NBD_OPT_STRUCTURED_REPLY: structured = true; break;
        case NBD_OPT_SET_META_CONTEXT: meta = saw_meta; break;
        case NBD_OPT_ABORT: no_more_output(&o, "NBD_OPT_ABORT"); return;
        case NBD_OPT_STARTTLS: return;     /* TLS from here on: not read */
        case NBD_OPT_GO:
            check_transmission(&o, pc, structured, meta, complete);
            return;
        default: break;
        }
    }
}

/* ---- one run ---- */

static const uint64_t sizes[8] = { 4096, 65536, 1ull << 20, 2ull << 20, 64ull << 20, 1ull << 40,
                                   (1ull << 63) - 4096, UINT64_MAX - 4095 };

void sim_run(const uint8_t hdr[SIM_HDR], const uint8_t *stream, size_t len)
{
    static bool quiet;
    if (!quiet) {
        tc_log_set_level(getenv("TC_FUZZ_DEBUG") ? TC_LOG_DEBUG : TC_LOG_ERROR);
        quiet = true;
    }
    memset(&sim, 0, sizeof sim);
    sim.read_only = hdr[0] & 1;
    sim.rotational = hdr[0] & 2;
    sim.allow_stop = hdr[0] & 4;
    sim.send_errors = hdr[0] & 8;
    sim.recv_errors = hdr[0] & 16;
    sim.named = hdr[0] & 32;
    sim.engine_errors = hdr[0] & 64;
    sim.small_pieces = hdr[0] & 128;
    sim.stream = stream;
    sim.len = len;
    rng_state = ((uint64_t)get_be32(hdr + 2) << 1) | 1;
    sim_vol = (struct tc_volume){ sizes[hdr[1] & 7], sim.read_only, sim.rotational };
    sim.max_buffer_memory = hdr[1] & 8 ? SIM_BUFFER_MEMORY : 0;
    sim.hs_deadline = hdr[1] & 16;

    struct nbd_server srv;
    struct nbd_server_config cfg = { .export_name = export_name(), .description = DESCRIPTION,
                                     .read_only = sim.read_only,
                                     .max_buffer_memory = sim.max_buffer_memory,
                                     .handshake_timeout_ns = sim.hs_deadline ? 1000000000ull : 0 };
    char err[256];
    if (nbd_server_open(&srv, &sim_reactor, &cfg, err, sizeof err) < 0)
        sim_fail("nbd_server_open: %s", err);
    if (nbd_server_start(&srv, &sim_vol, err, sizeof err) < 0)
        sim_fail("nbd_server_start: %s", err);
    sim.export_flags = srv.export_flags;
    sim.fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (sim.fd < 0)
        sim_fail("/dev/null: %s", strerror(errno));
    conn_new(&srv, sim.fd, "fuzz");     /* from here on, reached only through srv */

    for (unsigned long step = 0;; step++) {
        if (step == STEP_LIMIT)
            sim_fail("no end after %d steps", STEP_LIMIT);
        for (unsigned i = 0; i < MAX_PENDING; i++)
            if (sim.ops[i].used && sim.ops[i].sqe.opcode != IORING_OP_RECV &&
                sim.ops[i].sqe.opcode != IORING_OP_SENDMSG)
                sim_fail("unexpected io_uring operation %u", sim.ops[i].sqe.opcode);
        int rx = find_op(IORING_OP_RECV), tx = find_op(IORING_OP_SENDMSG);
        struct tc_timer *timer = NULL;
        for (unsigned i = 0; i < MAX_TIMERS && timer == NULL; i++)
            timer = sim.timers[i];
        if (sim.allow_stop && !sim.stopped && srv.nconns > 0 && one_in(200)) {
            sim.stopped = true;
            nbd_server_stop(&srv, stopped_cb);
            continue;
        }
        bool busy = rx >= 0 || tx >= 0 || sim.nqueue > 0 || sim.ntasks > 0;
        /* Any other timer is the handshake's deadline: it may pass at any
         * step, and a handshake is short, so it is drawn more often. */
        bool deadline = timer && timer != &srv.stop_timer && timer != &srv.memq.timer;
        if (timer && (!busy || one_in(deadline ? 50 : 500))) {
            /* The shutdown grace period ends, the memory poll runs, or the
             * handshake's deadline passes: the server cuts the connection
             * then (conn_abort() from inside conn.c, which the wrapper
             * does not see). */
            if (deadline)
                sim.aborted = true;
            timer_cancel(&sim_reactor, timer);
            timer->fn(timer);
            continue;
        }
        if (!busy)
            break;
        unsigned pick = (unsigned)rng_below(4);
        if (pick == 3 && sim.ntasks > 0)
            run_task();
        else if (pick == 0 && rx >= 0)
            do_recv(rx);
        else if (pick == 1 && tx >= 0)
            do_send(tx);
        else if (pick == 2 && sim.nqueue > 0)
            engine_complete((size_t)rng_below(sim.nqueue));
    }

    if (srv.nconns != 0) {
        struct nbd_conn *c = srv.conns;
        sim_fail("the connection is still open with nothing in flight (stuck): refs %u, "
                 "inflight %u, rx_armed %d, tx_armed %d, queued %zu bytes, closing %d, dead %d, "
                 "finished %d, phase %d", c->refs, c->inflight, c->rx_armed, c->tx_armed,
                 c->tx_bytes, c->closing, c->dead, c->finished, (int)c->phase);
    }
    if (sim.nbufs)
        sim_fail("%zu request buffers never returned", sim.nbufs);
    if (sim.stopped && sim.stopped_calls != 1)
        sim_fail("shutdown: the stopped callback ran %u times", sim.stopped_calls);
    if (!sim.stopped && sim.stopped_calls)
        sim_fail("the stopped callback ran without a shutdown");
    check_output();
    if (getenv("TC_FUZZ_DEBUG"))
        fprintf(stderr, "nbd_sim: %zu of %zu bytes received, %zu sent back, %zu engine "
                "requests; %s%s%s\n", sim.delivered, sim.len, sim.out_len, sim.nsubs,
                sim.aborted ? "aborted " : "", sim.send_failed ? "send failed " : "",
                sim.stopped ? "stopped" : "");

    free(sim.out);
    free(sim.subs);
    free(sim.queue);
    free(sim.bufs);
}
