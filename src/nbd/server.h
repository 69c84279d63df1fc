/*
 * The NBD server: listeners, connections, and the two protocol phases.
 *
 *   server.c        listening sockets, accept, shutdown, figures
 *   conn.c          one client: receive buffer, send queue, lifetime
 *   handshake.c     fixed newstyle option haggling
 *   transmission.c  requests -> tc_submit() -> replies
 *
 * A connection's life:
 *
 *   accept ─► greeting ─► options ─► transmission ─► closing ─► freed
 *                            │            ▲   │
 *                            └── GO ──────┘   └── DISC, EOF, error, shutdown
 *
 * It is freed only when nothing refers to it any more: no receive or send
 * in flight and no request inside the engine (conn->refs == 0).
 */
#ifndef TC_NBD_SERVER_H
#define TC_NBD_SERVER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "io/reactor.h"
#include "nbd/tls.h"
#include "tiercache.h"

struct nbd_server_config {
    const char *socket_path;        /* Unix socket, or NULL */
    const char *listen;             /* "ADDR:PORT", "PORT" or NULL */
    const char *export_name;        /* "" is the default export */
    const char *description;
    bool read_only;
    unsigned max_connections;
    unsigned socket_mode;           /* permissions of the Unix socket */
    enum nbd_tls_mode tls;          /* off, on (offered), require */
    const char *tls_certificates;   /* directory of PEM files, or NULL */
    const char *tls_psk;            /* "username:hexkey" file, or NULL */
    bool tls_verify_peer;           /* require client certificates */
    const int *listen_fds;          /* listening sockets passed in (socket
                                       activation), used instead of the above */
    unsigned nlisten_fds;
    bool single;                    /* one client on stdin/stdout, no listener */
    uint64_t max_buffer_memory;     /* request buffers of all clients (bufpool) */
    uint64_t max_client_buffer_memory;  /* of one client, replies it has not read
                                           included (0: an eighth of the above) */
    uint64_t handshake_timeout_ns;  /* a handshake (TLS included) not finished by
                                       then is closed (0: no limit) */
    unsigned max_handshakes;        /* connections still in their handshake
                                       (0: no limit) */
    unsigned nbd_threads;           /* front-end threads (0: all on the reactor) */
};

struct nbd_server_stats {
    uint64_t connections_total;
    uint64_t connections_refused;   /* over --max-connections */
    uint64_t handshakes_failed;
    uint64_t handshake_timeouts;    /* closed for not finishing in time */
    uint64_t handshakes_dropped;    /* the oldest, closed for a newcomer
                                       (--max-handshakes) */
    uint64_t requests[8];           /* by NBD command */
    uint64_t read_bytes, write_bytes;
    uint64_t errors_sent;           /* replies carrying an error */
    uint64_t protocol_errors;       /* clients disconnected for bad input */
    uint64_t tls_sessions;          /* TLS handshakes completed */
    uint64_t tls_failures;          /* TLS handshakes or sessions failed */
    uint64_t memory_waits;          /* requests that waited for buffer memory */
    uint64_t client_memory_waits;   /* times a client stopped being read at its
                                       own limit (--max-client-buffer-memory) */
    uint64_t buffer_memory_peak;    /* most bufpool bytes in use at once */
};

struct nbd_listener {
    struct nbd_server *srv;
    int fd;
    bool is_unix;
    bool owned;                     /* made here: the socket file is removed at exit */
    bool armed;
    char name[128];
    struct tc_io accept_io;
    struct tc_io cancel_io;
};

struct nbd_conn;
struct tc_trace_writer;

/* Connections waiting for buffer memory, first come first served
 * (transmission.c); woken when requests return memory, and by a timer for
 * memory returned elsewhere (the engine, other threads).  One per thread
 * that runs connections; touched by that thread only, but n, which status
 * reads from the reactor. */
struct nbd_memq {
    struct nbd_conn *head, *tail;
    unsigned n;                     /* atomic: written by the owner */
    struct tc_task task;
    struct tc_timer timer;
    struct tc_reactor *reactor;     /* the owner's */
};

/*
 * A front-end thread (serve --nbd-threads N, fe.c).
 *
 * DESIGN.md has one reactor thread own a volume.  With front-end threads
 * that still holds for the engine, the devices and the origin; what moves
 * is the client's side of a connection in its transmission phase: the
 * socket receives, the parsing and checking of requests and the sends of
 * replies and their payloads, which profiles show to be most of the CPU of
 * a cached request (the kernel's socket work, the copies).  The handshake
 * stays on the reactor; once it is over the connection is handed to a
 * front-end thread, round robin, and from then on belongs to it alone:
 *
 *   reactor                                  front-end thread
 *   handshake ─► conn (quiet) ─── adopt ──►  recv, parse, check
 *   tc_submit() ◄───────────── request ────  [write payload received]
 *   engine done ─────────────── reply ────►  send header + data
 *   bufpool_put(), free ◄── read buffer ───  reply sent
 *   conn_free() ◄──────────────── gone ────  last reference dropped
 *
 * Every arrow is a message through a lock-free mailbox (reactor.h); a
 * message hands its object over: a request, a connection and their
 * buffers belong to exactly one thread at a time, and nothing on the
 * data path takes a lock.  Buffer ownership: a read's buffer comes from
 * the reactor's pool (bufpool is the reactor's alone) and goes back to
 * the reactor to be put; a write's or a block status's buffer is the
 * front end's own (tc_alloc_aligned()), counted in bufpool_in_use() with
 * bufpool_charge(), and freed by it.  Shared fields: the server's
 * configuration (written before the threads start), srv->stopping (an
 * atomic flag), each front end's stats and memq.n (written by it with
 * atomic stores, read by the reactor's status).  The volume's size and
 * read-only flag are the engine's: a front end checks a request against
 * the size as it was at the hand-over, and the reactor checks it again
 * against the live ones before tc_submit().
 */
struct nbd_fe {
    struct nbd_server *srv;
    unsigned index;
    pthread_t thread;
    bool started;
    struct tc_reactor reactor;
    struct tc_mailbox inbox;
    struct nbd_memq memq;
    struct nbd_server_stats stats;  /* its connections' transmission figures */
    struct nbd_conn *conns;         /* its connections (fe_prev/fe_next) */
    unsigned nconns;
    struct tc_msg stop_msg, abort_msg, quit_msg;
    int init_err;                   /* errno of the thread's setup, 0 */
};

struct nbd_server {
    struct tc_reactor *reactor;
    struct tc_volume *vol;
    struct nbd_server_config cfg;
    uint16_t export_flags;          /* transmission flags */
#define NBD_MAX_LISTENERS 16
    struct nbd_listener listeners[NBD_MAX_LISTENERS];
    unsigned nlisteners;
    struct nbd_conn *conns;         /* doubly linked */
    unsigned nconns;
    /* Connections still in their handshake, oldest first (conn.c), and
     * those that finished it (the ones --max-connections counts). */
    struct nbd_conn *hs_head, *hs_tail;
    unsigned nhandshakes;
    unsigned nserved;
    uint64_t hs_drop_warned;        /* when dropping handshakes was last logged */
    uint64_t next_conn_id;
    bool stopping;
    void (*stopped)(struct nbd_server *srv);    /* called once all is closed */
    /* --single: called once the one client has gone (set after start). */
    void (*single_finished)(struct nbd_server *srv);
    struct tc_timer stop_timer;     /* cuts off clients that hold up a shutdown */
    struct nbd_server_stats stats;
    struct nbd_tls_creds *tls_creds;    /* loaded at start when TLS is on */
    /* Connections on the reactor waiting for buffer memory. */
    struct nbd_memq memq;
    /* Front-end threads (fe.c): none with nbd_threads 0. */
    struct nbd_fe *fes;
    unsigned nfes, next_fe;
    struct tc_mailbox inbox;        /* the reactor's, from the front ends */
    unsigned nhanded;               /* connections on front ends, or on the way */
    bool fes_stopped, fes_aborted, fes_joined;  /* each message goes once */
    /* serve --trace: every request handed to the engine is recorded here
     * (set after start; NULL: no trace). */
    struct tc_trace_writer *trace;
};

/* A message waiting in a connection's send queue. */
struct nbd_out {
    struct nbd_out *next;
    struct iovec iov[3];
    unsigned iovcnt;
    /* Called once it is sent, or dropped because the connection died. */
    void (*release)(struct nbd_out *out);
};

enum conn_phase { PHASE_CLIENT_FLAGS, PHASE_OPTIONS, PHASE_TRANSMISSION };

/* TLS on one connection: STARTTLS answered (the ACK still leaving in
 * clear), then the TLS handshake, then every byte is a TLS record. */
enum conn_tls { CONN_TLS_NONE, CONN_TLS_STARTING, CONN_TLS_HANDSHAKE, CONN_TLS_ACTIVE,
                CONN_TLS_FAILED };

struct nbd_req;

struct nbd_conn {
    struct nbd_server *srv;
    struct nbd_conn *prev, *next;   /* the server's list: the reactor's only */
    /* The thread that runs the connection: the reactor (fe NULL), or a
     * front end from the hand-over to the last reference (fe.c). */
    struct tc_reactor *reactor;
    struct nbd_fe *fe;
    struct nbd_memq *memq;
    struct nbd_server_stats *stats; /* transmission figures go here */
    struct nbd_conn *fe_prev, *fe_next;
    bool handing_over;              /* handshake done: quiet down, then go */
    struct tc_task hand_task;
    struct tc_msg msg;              /* adopt, gone */
    uint64_t vol_size;              /* at the hand-over (checks on the front end) */
    /* On a front end, copies of the receive and send state for status,
     * which the reactor reads: refreshed (CONN_SET) at every conn_put(),
     * which ends every event of the connection. */
    struct {
        uint64_t rx_buffered, tx_bytes;
        bool rx_armed, receiving, closing;
    } pub;
    int fd, wfd;                    /* receive from fd, send to wfd (the same socket,
                                       except with --single) */
    bool is_socket;                 /* else read/write, as on pipes */
    void *rx_ring_dst;              /* where the armed io_uring receive puts its bytes */
    bool rx_cancelled, tx_cancelled;
    uint64_t id;
    char peer[80];
    enum conn_phase phase;

    /* The handshake: on the server's list of pending handshakes from
     * accept until the transmission phase (or until dropped), under a
     * deadline (--handshake-timeout). */
    bool hs_pending, served;
    struct nbd_conn *hs_prev, *hs_next;
    struct tc_timer hs_timer;

    /* Receiving: bytes in rx[rx_start, rx_end) are read but not parsed. */
    uint8_t *rx;
    size_t rx_start, rx_end;
    struct tc_io rx_io;
    bool rx_armed;
    struct nbd_req *rx_req;         /* a write whose payload is arriving */
    uint64_t rx_discard;            /* payload bytes to read and drop */

    /* Sending: one sendmsg in flight at a time, gathering queued messages. */
    struct nbd_out *txq, **txq_tail;
    size_t tx_bytes;                /* queued and not yet sent */
    struct tc_io tx_io;
    bool tx_armed;
    bool tx_busy;                   /* releasing sent messages: no new send yet */
    struct msghdr tx_msg;
    struct iovec tx_iov[64];

    /* TLS: the session, and where an armed receive delivers plaintext. */
    enum conn_tls tls_state;
    struct nbd_tls *tls;
    void *rx_dst;
    size_t rx_len;
    struct tc_task rx_task;

    /* Negotiated. */
    bool fixed_newstyle, no_zeroes, structured_replies, meta_allocation;

    /* Waiting for buffer memory (--max-buffer-memory) for the request at
     * the head of rx[], which needs mem_need bytes. */
    bool mem_waiting, mem_granted;
    uint64_t mem_need;
    struct nbd_conn *mem_prev, *mem_next;

    /* Requests inside the engine or waiting for their reply to be sent,
     * and their buffers (these five, with mem_waiting, are written with
     * CONN_SET(): status reads them from the reactor while a front end
     * runs the connection): at most --max-client-buffer-memory, save that one
     * request may always be in flight.  over_limit: the request at the head
     * of rx[] would pass it, so nothing more is read until one returns. */
    unsigned inflight;
    uint64_t inflight_bytes;
    bool over_limit;
    uint64_t requests;

    bool closing;                   /* no more requests; close when idle */
    bool dead;                      /* replies cannot be sent; drop output */
    bool finished;                  /* the "open" reference has been dropped */
    bool parsing, reparse;          /* conn_parse() is not re-entered */
    unsigned refs;
    struct tc_io cancel_io, tx_cancel_io;
};

/* A field of a connection that status reads on the reactor while a front
 * end writes it: one writer, relaxed atomic stores and loads. */
#define CONN_SET(c, f, v) __atomic_store_n(&(c)->f, (v), __ATOMIC_RELAXED)
#define CONN_GET(c, f) __atomic_load_n(&(c)->f, __ATOMIC_RELAXED)

/* server.c */
/* In two steps, so that a bad value or a socket that cannot be made ends
 * the start before the volume is opened (opening a cache clears its
 * clean-stop record: a start refused after it would leave the set as
 * after a crash).  nbd_server_open() checks the configuration, loads
 * the TLS credentials and makes the listening sockets (no client is
 * accepted yet); nbd_server_start() serves vol on them, or
 * nbd_server_abandon() closes them (the volume did not open). */
int nbd_server_open(struct nbd_server *srv, struct tc_reactor *r,
                    const struct nbd_server_config *cfg, char *err, size_t errlen);
int nbd_server_start(struct nbd_server *srv, struct tc_volume *vol, char *err, size_t errlen);
void nbd_server_abandon(struct nbd_server *srv);
void nbd_server_stop(struct nbd_server *srv, void (*stopped)(struct nbd_server *srv));
void nbd_server_status_json(struct nbd_server *srv, struct tc_json *j);
void nbd_server_conn_gone(struct nbd_server *srv, struct nbd_conn *c);
/* systemd socket activation: when LISTEN_PID is this process, the
 * LISTEN_FDS listening sockets from fd 3 on go into fds (at most max) and
 * the variables are removed from the environment.  Returns their number
 * (0 without activation) and the path of the first Unix one in unix_path
 * (or ""); -1 with err if they are not listening sockets. */
int nbd_activation_fds(int *fds, unsigned max, char *unix_path, size_t pathlen, char *err,
                       size_t errlen);

/* conn.c */
struct nbd_conn *conn_new(struct nbd_server *srv, int fd, const char *peer);
/* --single: receive from fd, send to wfd (a socket, or pipes). */
struct nbd_conn *conn_new_stdio(struct nbd_server *srv, int fd, int wfd, const char *peer);
void conn_send(struct nbd_conn *c, struct nbd_out *out);
/* Queue a copy of bytes (handshake messages, small replies). */
void conn_send_copy(struct nbd_conn *c, const void *data, size_t len);
void conn_parse(struct nbd_conn *c);
void conn_close(struct nbd_conn *c, const char *why);   /* graceful: finish in-flight */
void conn_abort(struct nbd_conn *c, const char *why);   /* hard: protocol error */
void conn_put(struct nbd_conn *c);
/* The last reference is gone: unlink, close, free (on the reactor). */
void conn_free(struct nbd_conn *c);
/* Cancel an armed receive (the hand-over to a front end). */
void conn_cancel_rx(struct nbd_conn *c);
/* The handshake is over (NBD_OPT_GO, NBD_OPT_EXPORT_NAME): false if
 * --max-connections served clients are already connected, else the
 * connection becomes one of them and its deadline is lifted. */
bool conn_handshake_done(struct nbd_conn *c);
/* A new connection arrives while --max-handshakes are pending: close the
 * oldest pending one. */
void conn_drop_oldest_handshake(struct nbd_server *srv);
static inline void conn_get(struct nbd_conn *c) { c->refs++; }
static inline size_t conn_rx_avail(const struct nbd_conn *c) { return c->rx_end - c->rx_start; }

/* NBD_OPT_STARTTLS accepted: make the session (before the ACK is queued);
 * the handshake starts once the ACK has left.  -1 with err if GnuTLS
 * cannot make a session. */
int conn_starttls(struct nbd_conn *c, char *err, size_t errlen);

/* Option replies a client may leave unread before the server stops
 * reading its options (the transmission phase is bounded by its
 * in-flight request limits instead). */
#define HANDSHAKE_MAX_QUEUED (1u << 20)

/* handshake.c: returns false when it needs more bytes. */
void handshake_start(struct nbd_conn *c);
bool handshake_parse(struct nbd_conn *c);

/* fe.c */
int nbd_fe_start(struct nbd_server *srv, char *err, size_t errlen);
/* The handshake is over: hand the connection to a front-end thread if
 * there are any (and it is one that can go). */
void nbd_fe_hand_over(struct nbd_conn *c);
/* Called by conn_put() when the count drops: to 1 during a hand-over, to
 * 0 on a front end. */
void nbd_fe_ref_dropped(struct nbd_conn *c);
void nbd_fe_stop(struct nbd_server *srv);
void nbd_fe_abort(struct nbd_server *srv);
void nbd_fe_join(struct nbd_server *srv);
/* The server's figures with those of every front end added. */
void nbd_fe_stats(const struct nbd_server *srv, struct nbd_server_stats *out);
static inline bool nbd_stopping(const struct nbd_server *srv)
{
    return __atomic_load_n(&srv->stopping, __ATOMIC_RELAXED);
}
/* Figures a front end writes and the reactor reads: one writer, atomic
 * stores (plain moves on x86). */
#define NBD_STAT_ADD(field, n)                                                              \
    __atomic_store_n(&(field), __atomic_load_n(&(field), __ATOMIC_RELAXED) + (n),            \
                     __ATOMIC_RELAXED)

/* transmission.c */
/* A request parsed on a front end, run by the reactor (fe.c's mailbox). */
void transmission_submit_msg(struct tc_msg *msg);
bool transmission_parse(struct nbd_conn *c);
/* A write's payload: where the next bytes go, how many arrived (true once
 * complete), then hand it to the engine; or drop it if the client left. */
void *transmission_payload_target(struct nbd_req *req, size_t *len);
bool transmission_payload_received(struct nbd_req *req, size_t n);
void transmission_payload_done(struct nbd_conn *c, struct nbd_req *req);
void transmission_abandon(struct nbd_req *req);
bool transmission_can_accept(const struct nbd_conn *c);
/* Leave the memory queue (the connection closes or is freed). */
void transmission_memory_forget(struct nbd_conn *c);
unsigned transmission_memory_waiting(const struct nbd_server *srv);
/* The bound on one connection's buffers (--max-client-buffer-memory). */
uint64_t transmission_client_limit(const struct nbd_server *srv);

#endif
