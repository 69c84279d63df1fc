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
    /* Connections waiting for buffer memory, first come first served
     * (transmission.c); woken when requests return memory, and by a
     * timer for memory the engine returns on its own. */
    struct nbd_conn *mem_head, *mem_tail;
    struct tc_task mem_task;
    struct tc_timer mem_timer;
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
    struct nbd_conn *prev, *next;
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
     * and their buffers: at most --max-client-buffer-memory, save that one
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

/* server.c */
int nbd_server_start(struct nbd_server *srv, struct tc_reactor *r, struct tc_volume *vol,
                     const struct nbd_server_config *cfg, char *err, size_t errlen);
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

/* transmission.c */
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
