/*
 * Listening sockets, accepting clients, and an orderly shutdown.
 *
 * The server listens on a Unix socket, a TCP address, or both.  A TCP
 * listener binds to loopback unless an address is given.  With systemd
 * socket activation it uses the listening sockets it was given instead
 * (and leaves their files alone); with --single it serves one client,
 * on stdin/stdout or the first to connect, and reports when it has gone.  On shutdown it
 * stops accepting, lets every connection finish the requests it has in
 * flight, and reports back once the last connection is gone.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <linux/sockios.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "io/bufpool.h"
#include "nbd/proto.h"
#include "nbd/server.h"
#include "util/json.h"
#include "util/log.h"
#include "util/misc.h"
#include "util/unixsock.h"

static void accept_arm(struct nbd_listener *l);
static void cancel_done(struct tc_io *io, int res);

/* How long a shutdown waits for connections to finish on their own.  A
 * client that never reads its replies would otherwise keep a send
 * pending, and the daemon running, for ever. */
#define STOP_GRACE_NS (5ull * 1000000000ull)

/* "PORT", "ADDR:PORT", "[V6ADDR]:PORT"; no address means loopback. */
static int listen_tcp(const char *spec, char *name, size_t namelen, char *err, size_t errlen)
{
    char host[256] = "127.0.0.1", port[32];
    const char *colon = strrchr(spec, ':');
    if (colon == NULL) {
        snprintf(port, sizeof port, "%s", spec);
    } else {
        size_t hl = (size_t)(colon - spec);
        if (hl >= sizeof host) {
            snprintf(err, errlen, "--listen '%s': address too long", spec);
            return -1;
        }
        memcpy(host, spec, hl);
        host[hl] = '\0';
        if (host[0] == '[' && hl >= 2 && host[hl - 1] == ']') {
            memmove(host, host + 1, hl - 2);
            host[hl - 2] = '\0';
        }
        snprintf(port, sizeof port, "%s", colon + 1);
        if (host[0] == '\0')
            snprintf(host, sizeof host, "127.0.0.1");
    }
    char *end;
    long pn = strtol(port, &end, 10);
    if (port[0] == '\0' || *end || pn < 0 || pn > 65535) {
        snprintf(err, errlen, "--listen '%s': '%s' is not a port number", spec, port);
        return -1;
    }
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
    struct addrinfo *res;
    int gai = getaddrinfo(host, port, &hints, &res);
    if (gai) {
        snprintf(err, errlen, "--listen '%s': %s", spec, gai_strerror(gai));
        return -1;
    }
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        freeaddrinfo(res);
        return -1;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, 128) < 0) {
        snprintf(err, errlen, "--listen '%s': cannot listen on %s port %s: %s", spec, host,
                 port, strerror(errno));
        close(fd);
        freeaddrinfo(res);
        return -1;
    }
    freeaddrinfo(res);
    /* Port 0 lets the kernel pick a free one: name the one it picked, so
     * that the log and status say where clients can connect. */
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET)
            pn = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        else if (ss.ss_family == AF_INET6)
            pn = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    }
    snprintf(name, namelen, "%s:%ld", host, pn);
    return fd;
}

/* A passed-in listener: its kind and a name for the log. */
static void listener_name(struct nbd_listener *l)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    snprintf(l->name, sizeof l->name, "fd %d", l->fd);
    if (getsockname(l->fd, (struct sockaddr *)&ss, &sl) < 0)
        return;
    char h[64] = "?";
    if (ss.ss_family == AF_UNIX) {
        struct sockaddr_un *su = (struct sockaddr_un *)&ss;
        l->is_unix = true;
        if (sl > offsetof(struct sockaddr_un, sun_path) && su->sun_path[0])
            snprintf(l->name, sizeof l->name, "%.*s",
                     (int)(sl - offsetof(struct sockaddr_un, sun_path)), su->sun_path);
    } else if (ss.ss_family == AF_INET) {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &s4->sin_addr, h, sizeof h);
        snprintf(l->name, sizeof l->name, "%s:%d", h, ntohs(s4->sin_port));
    } else if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &s6->sin6_addr, h, sizeof h);
        snprintf(l->name, sizeof l->name, "[%s]:%d", h, ntohs(s6->sin6_port));
    }
}

#define SD_LISTEN_FDS_START 3

int nbd_activation_fds(int *fds, unsigned max, char *unix_path, size_t pathlen, char *err,
                       size_t errlen)
{
    unix_path[0] = '\0';
    const char *pid_s = getenv("LISTEN_PID"), *n_s = getenv("LISTEN_FDS");
    if (pid_s == NULL || n_s == NULL)
        return 0;
    char *end;
    long pid = strtol(pid_s, &end, 10);
    if (*end || pid != (long)getpid())
        return 0;   /* meant for another process */
    long n = strtol(n_s, &end, 10);
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
    if (*end || n < 0 || n > (long)max) {
        snprintf(err, errlen, "socket activation: LISTEN_FDS=%s (at most %u)", n_s, max);
        return -1;
    }
    for (int i = 0; i < (int)n; i++) {
        int fd = SD_LISTEN_FDS_START + i;
        int listening = 0;
        socklen_t ol = sizeof listening;
        struct stat st;
        if (fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode) ||
            getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &ol) < 0 || !listening) {
            snprintf(err, errlen, "socket activation: fd %d is not a listening socket", fd);
            return -1;
        }
        int fl = fcntl(fd, F_GETFD);
        if (fl >= 0)
            fcntl(fd, F_SETFD, fl | FD_CLOEXEC);
        fds[i] = fd;
        if (unix_path[0] == '\0') {
            struct sockaddr_un su;
            socklen_t sl = sizeof su;
            if (getsockname(fd, (struct sockaddr *)&su, &sl) == 0 && su.sun_family == AF_UNIX &&
                sl > offsetof(struct sockaddr_un, sun_path) && su.sun_path[0])
                snprintf(unix_path, pathlen, "%.*s",
                         (int)(sl - offsetof(struct sockaddr_un, sun_path)), su.sun_path);
        }
    }
    return (int)n;
}

static void accept_done(struct tc_io *io, int res)
{
    struct nbd_listener *l = container_of(io, struct nbd_listener, accept_io);
    struct nbd_server *srv = l->srv;
    l->armed = false;
    if (res < 0) {
        if (res != -ECANCELED && !srv->stopping) {
            tc_warn("%s: accept failed: %s", l->name, strerror(-res));
            if (res == -EMFILE || res == -ENFILE || res == -ENOMEM) {
                /* Out of descriptors: keep serving those we have. */
            }
        }
        bool single_taken = srv->cfg.single && srv->stats.connections_total > 0;
        if (!srv->stopping && !single_taken)
            accept_arm(l);
        nbd_server_conn_gone(srv, NULL);
        return;
    }
    int fd = res;
    if (srv->stopping || (srv->cfg.single && srv->stats.connections_total > 0)) {
        close(fd);
        nbd_server_conn_gone(srv, NULL);
        return;
    }
    srv->stats.connections_total++;
    char peer[80];
    if (l->is_unix) {
        snprintf(peer, sizeof peer, "unix");
        /* A Unix socket's default send buffer (about 200 KiB) takes a
         * fifth of a 1 MiB reply: the send then waits for the client to
         * read, and is retried from a poll wake-up, some four times per
         * reply (4.8 io_uring_enter calls per 1 MiB read, 0.85 with this).
         * The kernel doubles the figure for its bookkeeping; the buffer
         * only holds memory while the client is behind.  SO_SNDBUFFORCE
         * passes net.core.wmem_max where the daemon may (CAP_NET_ADMIN).
         * TCP sizes its own buffers, better than a fixed figure. */
        int sndbuf = 2 << 20;
        if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof sndbuf) < 0)
            setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    } else {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        char h[64] = "?";
        int port = 0;
        if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0) {
            if (ss.ss_family == AF_INET) {
                struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
                inet_ntop(AF_INET, &s4->sin_addr, h, sizeof h);
                port = ntohs(s4->sin_port);
            } else if (ss.ss_family == AF_INET6) {
                struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
                inet_ntop(AF_INET6, &s6->sin6_addr, h, sizeof h);
                port = ntohs(s6->sin6_port);
            }
        }
        snprintf(peer, sizeof peer, "%s:%d", h, port);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    /* --max-connections counts served clients only (those past their
     * handshake), so idle sockets cannot fill it; pending handshakes are
     * bounded by --max-handshakes instead (conn.c explains why the oldest
     * makes way). */
    if (srv->cfg.max_connections && srv->nserved >= srv->cfg.max_connections) {
        srv->stats.connections_refused++;
        tc_warn("%s: refusing a connection from %s: %u connections is the maximum "
                "(--max-connections)", l->name, peer, srv->cfg.max_connections);
        close(fd);
    } else {
        if (srv->cfg.max_handshakes && srv->nhandshakes >= srv->cfg.max_handshakes)
            conn_drop_oldest_handshake(srv);
        struct nbd_conn *c = conn_new(srv, fd, peer);
        tc_debug("connection %llu from %s on %s", (unsigned long long)c->id, peer, l->name);
        if (srv->cfg.single) {
            /* --single with passed-in sockets: this client is the one. */
            for (unsigned i = 0; i < srv->nlisteners; i++)
                if (srv->listeners[i].armed) {
                    srv->listeners[i].cancel_io.done = cancel_done;
                    io_uring_prep_cancel(reactor_sqe(srv->reactor, &srv->listeners[i].cancel_io),
                                         &srv->listeners[i].accept_io, 0);
                }
            return;
        }
    }
    accept_arm(l);
}

static void accept_arm(struct nbd_listener *l)
{
    l->accept_io.done = accept_done;
    io_uring_prep_accept(reactor_sqe(l->srv->reactor, &l->accept_io), l->fd, NULL, NULL,
                         SOCK_CLOEXEC);
    l->armed = true;
}

void nbd_server_abandon(struct nbd_server *srv)
{
    for (unsigned i = 0; i < srv->nlisteners; i++) {
        close(srv->listeners[i].fd);
        if (srv->listeners[i].owned)
            unlink(srv->listeners[i].name);
    }
    srv->nlisteners = 0;
    nbd_tls_creds_free(srv->tls_creds);
    srv->tls_creds = NULL;
}

int nbd_server_open(struct nbd_server *srv, struct tc_reactor *r,
                    const struct nbd_server_config *cfg, char *err, size_t errlen)
{
    memset(srv, 0, sizeof *srv);
    srv->reactor = r;
    srv->memq.reactor = r;
    srv->cfg = *cfg;
    if (cfg->single)
        srv->cfg.nbd_threads = 0;   /* one client: it stays on the reactor */
    if (srv->cfg.export_name == NULL)
        srv->cfg.export_name = "";
    if (strlen(srv->cfg.export_name) > NBD_MAX_STRING) {
        snprintf(err, errlen, "--export-name is longer than %u bytes", NBD_MAX_STRING);
        return -1;
    }

    if (cfg->tls != NBD_TLS_OFF) {
        srv->tls_creds = nbd_tls_creds_load(cfg->tls_certificates, cfg->tls_psk,
                                            cfg->tls_verify_peer, err, errlen);
        if (srv->tls_creds == NULL)
            return -1;
        tc_info("TLS %s: %s", cfg->tls == NBD_TLS_REQUIRE ? "required" : "offered",
                nbd_tls_creds_describe(srv->tls_creds));
    }

    if (cfg->single && cfg->nlisten_fds == 0)
        return 0;       /* one client on stdin and stdout: no listener */
    if (cfg->nlisten_fds > 0) {
        for (unsigned i = 0; i < cfg->nlisten_fds && i < NBD_MAX_LISTENERS; i++) {
            struct nbd_listener *l = &srv->listeners[srv->nlisteners++];
            l->srv = srv;
            l->fd = cfg->listen_fds[i];
            listener_name(l);
        }
        return 0;
    }
    if (cfg->socket_path) {
        struct nbd_listener *l = &srv->listeners[srv->nlisteners];
        l->fd = tc_unix_listen(cfg->socket_path, cfg->socket_mode, 128, "socket", err, errlen);
        if (l->fd < 0) {
            nbd_tls_creds_free(srv->tls_creds);
            return -1;
        }
        l->is_unix = true;
        l->owned = true;
        snprintf(l->name, sizeof l->name, "%s", cfg->socket_path);
        l->srv = srv;
        srv->nlisteners++;
    }
    if (cfg->listen) {
        struct nbd_listener *l = &srv->listeners[srv->nlisteners];
        l->fd = listen_tcp(cfg->listen, l->name, sizeof l->name, err, errlen);
        if (l->fd < 0) {
            if (srv->nlisteners) {
                close(srv->listeners[0].fd);
                unlink(cfg->socket_path);
            }
            nbd_tls_creds_free(srv->tls_creds);
            return -1;
        }
        l->srv = srv;
        srv->nlisteners++;
    }
    return 0;
}

int nbd_server_start(struct nbd_server *srv, struct tc_volume *vol, char *err, size_t errlen)
{
    const struct nbd_server_config *cfg = &srv->cfg;
    srv->vol = vol;
    uint16_t f = NBD_FLAG_HAS_FLAGS | NBD_FLAG_SEND_FLUSH | NBD_FLAG_SEND_FUA |
                 NBD_FLAG_SEND_CACHE | NBD_FLAG_CAN_MULTI_CONN;
    if (tc_volume_read_only(vol) || cfg->read_only)
        f |= NBD_FLAG_READ_ONLY;
    else
        f |= NBD_FLAG_SEND_TRIM | NBD_FLAG_SEND_WRITE_ZEROES | NBD_FLAG_SEND_FAST_ZERO;
    if (tc_volume_rotational(vol))
        f |= NBD_FLAG_ROTATIONAL;
    srv->export_flags = f;

    if (cfg->single && cfg->nlisten_fds == 0) {
        /* One client on stdin and stdout; no listener. */
        srv->stats.connections_total++;
        conn_new_stdio(srv, 0, 1, "stdin/stdout");
        tc_info("serving one client on stdin/stdout");
        return 0;
    }
    if (nbd_fe_start(srv, err, errlen) < 0) {
        nbd_fe_join(srv);
        nbd_server_abandon(srv);
        return -1;
    }
    for (unsigned i = 0; i < srv->nlisteners; i++) {
        accept_arm(&srv->listeners[i]);
        tc_info("listening on %s%s", srv->listeners[i].name,
                srv->listeners[i].owned || !srv->listeners[i].is_unix ? "" : " (passed in)");
    }
    return 0;
}

static void cancel_done(struct tc_io *io, int res)
{
    (void)io;
    (void)res;
}

void nbd_server_conn_gone(struct nbd_server *srv, struct nbd_conn *c)
{
    (void)c;
    if (srv->cfg.single && srv->nconns == 0 && srv->stats.connections_total > 0 &&
        srv->single_finished) {
        void (*done)(struct nbd_server *) = srv->single_finished;
        srv->single_finished = NULL;
        done(srv);      /* stops the server, which comes back here */
        return;
    }
    if (!srv->stopping || srv->nconns > 0 || srv->stopped == NULL)
        return;
    for (unsigned i = 0; i < srv->nlisteners; i++)
        if (srv->listeners[i].armed)
            return;
    nbd_fe_join(srv);
    void (*cb)(struct nbd_server *) = srv->stopped;
    srv->stopped = NULL;
    timer_cancel(srv->reactor, &srv->stop_timer);
    for (unsigned i = 0; i < srv->nlisteners; i++) {
        close(srv->listeners[i].fd);
        if (srv->listeners[i].owned)
            unlink(srv->listeners[i].name);
    }
    nbd_tls_creds_free(srv->tls_creds);
    srv->tls_creds = NULL;
    cb(srv);
}

static void stop_grace_over(struct tc_timer *t)
{
    struct nbd_server *srv = container_of(t, struct nbd_server, stop_timer);
    if (srv->nconns > 0)
        tc_warn("%u connection%s still busy %llu s after the shutdown began; disconnecting",
                srv->nconns, srv->nconns == 1 ? "" : "s",
                (unsigned long long)(STOP_GRACE_NS / 1000000000ull));
    /* Shutting the socket down fails the pending send; what is queued is
     * dropped, and each connection goes once the engine has returned its
     * requests. */
    for (struct nbd_conn *c = srv->conns, *next; c; c = next) {
        next = c->next;
        if (c->fe == NULL)
            conn_abort(c, "the server is shutting down and the client is not taking its replies");
    }
    nbd_fe_abort(srv);
}

void nbd_server_stop(struct nbd_server *srv, void (*stopped)(struct nbd_server *srv))
{
    __atomic_store_n(&srv->stopping, true, __ATOMIC_RELAXED);     /* front ends read it */
    srv->stopped = stopped;
    srv->stop_timer.fn = stop_grace_over;
    timer_arm(srv->reactor, &srv->stop_timer, STOP_GRACE_NS);
    for (unsigned i = 0; i < srv->nlisteners; i++) {
        struct nbd_listener *l = &srv->listeners[i];
        if (l->armed) {
            l->cancel_io.done = cancel_done;
            io_uring_prep_cancel(reactor_sqe(srv->reactor, &l->cancel_io), &l->accept_io, 0);
        }
    }
    for (struct nbd_conn *c = srv->conns, *next; c; c = next) {
        next = c->next;
        if (c->fe == NULL)      /* a front end's are closed by it */
            conn_close(c, "server shutting down");
    }
    nbd_fe_stop(srv);
    nbd_server_conn_gone(srv, NULL);
}

static const char *cmd_key[] = { "read", "write", "disc", "flush", "trim", "cache",
                                 "write_zeroes", "block_status" };

/* Bytes in a socket's kernel queue: received and not yet read (SIOCINQ),
 * or sent and not yet taken by the peer (SIOCOUTQ); -1 where the kernel
 * cannot tell (a pipe, an error), and the figure is left out. */
static int64_t socket_queue(int fd, bool is_socket, unsigned long request)
{
    int n;
    if (!is_socket || fd < 0 || ioctl(fd, request, &n) != 0)
        return -1;
    return n;
}

/* One entry per connection, so that a client whose requests go unanswered
 * shows where they stopped: still in the kernel's socket queue (received
 * by the kernel, not by the daemon), read and not parsed, inside the
 * engine, or answered and not yet taken by the client. */
static void clients_json(struct nbd_server *srv, struct tc_json *j)
{
    static const char *tls_states[] = { "none", "starting", "handshake", "active", "failed" };
    json_begin_array(j, "clients");
    for (const struct nbd_conn *c = srv->conns; c; c = c->next) {
        json_begin_object(j, NULL);
        json_uint(j, "id", c->id);
        json_string(j, "peer", c->peer);
        json_string(j, "phase", c->phase == PHASE_TRANSMISSION ? "transmission" : "handshake");
        if (c->fe)
            json_uint(j, "thread", c->fe->index);
        else
            json_string(j, "tls", tls_states[c->tls_state]);
        json_uint(j, "requests", CONN_GET(c, requests));
        json_uint(j, "inflight", CONN_GET(c, inflight));
        json_uint(j, "inflight_bytes", CONN_GET(c, inflight_bytes));
        if (c->fe) {
            /* Its front end's, as of the end of its last event. */
            json_uint(j, "rx_buffered_bytes", CONN_GET(c, pub.rx_buffered));
            json_bool(j, "rx_armed", CONN_GET(c, pub.rx_armed));
            json_bool(j, "receiving_payload", CONN_GET(c, pub.receiving));
        } else {
            json_uint(j, "rx_buffered_bytes", c->rx_end - c->rx_start);
            json_bool(j, "rx_armed", c->rx_armed);
            json_bool(j, "receiving_payload", c->rx_req != NULL);
        }
        json_bool(j, "waiting_for_memory", CONN_GET(c, mem_waiting));
        json_bool(j, "at_memory_limit", CONN_GET(c, over_limit));
        json_uint(j, "tx_queued_bytes", c->fe ? CONN_GET(c, pub.tx_bytes) : c->tx_bytes);
        int64_t unread = socket_queue(c->fd, c->is_socket, SIOCINQ);
        int64_t unsent = socket_queue(c->wfd, c->is_socket, SIOCOUTQ);
        if (unread >= 0)
            json_uint(j, "socket_unread_bytes", (uint64_t)unread);
        if (unsent >= 0)
            json_uint(j, "socket_unsent_bytes", (uint64_t)unsent);
        json_bool(j, "closing", c->fe ? CONN_GET(c, pub.closing) : c->closing);
        json_end_object(j);
    }
    json_end_array(j);
}

void nbd_server_status_json(struct nbd_server *srv, struct tc_json *j)
{
    struct nbd_server_stats st;
    nbd_fe_stats(srv, &st);
    json_begin_object(j, "nbd");
    json_string(j, "export_name", srv->cfg.export_name);
    json_begin_array(j, "listeners");
    for (unsigned i = 0; i < srv->nlisteners; i++)
        json_string(j, NULL, srv->listeners[i].name);
    json_end_array(j);
    json_uint(j, "connections", srv->nconns);
    json_uint(j, "nbd_threads", srv->nfes);
    json_uint(j, "connections_total", srv->stats.connections_total);
    json_uint(j, "connections_refused", srv->stats.connections_refused);
    json_uint(j, "max_connections", srv->cfg.max_connections);
    json_uint(j, "handshakes", srv->nhandshakes);
    json_uint(j, "max_handshakes", srv->cfg.max_handshakes);
    json_double(j, "handshake_timeout_seconds", (double)srv->cfg.handshake_timeout_ns / 1e9);
    json_uint(j, "handshakes_failed", srv->stats.handshakes_failed);
    json_uint(j, "handshake_timeouts", srv->stats.handshake_timeouts);
    json_uint(j, "handshakes_dropped", srv->stats.handshakes_dropped);
    json_uint(j, "protocol_errors", st.protocol_errors);
    static const char *tls_names[] = { "off", "on", "require" };
    json_string(j, "tls", tls_names[srv->cfg.tls]);
    json_uint(j, "tls_sessions", srv->stats.tls_sessions);
    json_uint(j, "tls_failures", srv->stats.tls_failures);
    json_uint(j, "buffer_memory", bufpool_in_use());
    json_uint(j, "buffer_memory_peak", st.buffer_memory_peak);
    json_uint(j, "buffer_memory_idle", bufpool_cached());
    json_uint(j, "buffer_memory_registered", bufpool_registered_bytes());
    json_uint(j, "max_buffer_memory", srv->cfg.max_buffer_memory);
    json_uint(j, "memory_waits", st.memory_waits);
    json_uint(j, "waiting_for_memory", transmission_memory_waiting(srv));
    json_uint(j, "max_client_buffer_memory", transmission_client_limit(srv));
    json_uint(j, "client_memory_waits", st.client_memory_waits);
    unsigned at_limit = 0;
    uint64_t most = 0;
    for (const struct nbd_conn *c = srv->conns; c; c = c->next) {
        at_limit += CONN_GET(c, over_limit);
        most = TC_MAX(most, CONN_GET(c, inflight_bytes));
    }
    json_uint(j, "clients_at_memory_limit", at_limit);
    json_uint(j, "client_buffer_memory_max", most);
    json_uint(j, "errors_sent", st.errors_sent);
    json_uint(j, "read_bytes", st.read_bytes);
    json_uint(j, "write_bytes", st.write_bytes);
    json_begin_object(j, "requests");
    for (unsigned i = 0; i < TC_ARRAY_SIZE(cmd_key); i++)
        json_uint(j, cmd_key[i], st.requests[i]);
    json_end_object(j);
    clients_json(srv, j);
    json_end_object(j);
}
