/*
 * The daemon side of the control socket, on the reactor like everything
 * else: accept, read one command line, run its handler, send the output.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "ctl/ctl.h"
#include "util/log.h"
#include "util/misc.h"
#include "util/unixsock.h"
#include "util/memcheck.h"

#define CTL_LINE_MAX 4096

struct ctl_chunk {
    struct ctl_chunk *next;
    size_t len, sent;
    char data[];
};

struct ctl_conn {
    struct ctl_server *srv;
    struct ctl_conn *next, **pprev;     /* the server's connections */
    int fd;
    char line[CTL_LINE_MAX];
    size_t got;
    bool dispatched, ended, gone;
    struct tc_io rx_io, tx_io;
    bool rx_armed, tx_armed;
    struct ctl_chunk *q, **qtail;
};

static void accept_arm(struct ctl_server *s);
static void conn_maybe_free(struct ctl_conn *c);

void ctl_path_for(const char *sock, char *out, size_t len)
{
    size_t n = strlen(sock);
    if (n >= 4 && strcmp(sock + n - 4, ".ctl") == 0)
        snprintf(out, len, "%s", sock);
    else if (n >= 5 && strcmp(sock + n - 5, ".sock") == 0)
        snprintf(out, len, "%.*s.ctl", (int)(n - 5), sock);
    else
        snprintf(out, len, "%s.ctl", sock);
}

void ctl_register(struct ctl_server *s, const char *name, ctl_handler fn, void *arg)
{
    if (s->ncommands < TC_ARRAY_SIZE(s->commands))
        s->commands[s->ncommands++] = (struct ctl_command){ name, fn, arg };
}

bool ctl_gone(const struct ctl_conn *c) { return c->gone; }

static void tx_done(struct tc_io *io, int res);

static void tx_kick(struct ctl_conn *c)
{
    if (c->tx_armed || c->gone || c->q == NULL)
        return;
    struct ctl_chunk *ch = c->q;
    c->tx_io.done = tx_done;
    io_uring_prep_send(reactor_sqe(c->srv->reactor, &c->tx_io), c->fd, ch->data + ch->sent,
                       ch->len - ch->sent, MSG_NOSIGNAL);
    c->tx_armed = true;
}

static void drop_queue(struct ctl_conn *c)
{
    while (c->q) {
        struct ctl_chunk *ch = c->q;
        c->q = ch->next;
        free(ch);
    }
    c->qtail = &c->q;
}

static void tx_done(struct tc_io *io, int res)
{
    struct ctl_conn *c = container_of(io, struct ctl_conn, tx_io);
    c->tx_armed = false;
    if (res < 0 && res != -EINTR && res != -EAGAIN) {
        c->gone = true;
        drop_queue(c);
    } else if (res > 0) {
        struct ctl_chunk *ch = c->q;
        ch->sent += (size_t)res;
        if (ch->sent == ch->len) {
            c->q = ch->next;
            if (c->q == NULL)
                c->qtail = &c->q;
            free(ch);
        }
    }
    tx_kick(c);
    conn_maybe_free(c);
}

void ctl_write(struct ctl_conn *c, const char *data, size_t len)
{
    if (c->gone || len == 0)
        return;
    struct ctl_chunk *ch = tc_xmalloc(sizeof *ch + len);
    ch->next = NULL;
    ch->len = len;
    ch->sent = 0;
    memcpy(ch->data, data, len);
    *c->qtail = ch;
    c->qtail = &ch->next;
    tx_kick(c);
}

void ctl_printf(struct ctl_conn *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n > 0)
        ctl_write(c, s, (size_t)n);
    free(s);
}

void ctl_end(struct ctl_conn *c)
{
    c->ended = true;
    conn_maybe_free(c);
}

static void conn_maybe_free(struct ctl_conn *c)
{
    if (c->rx_armed && c->ended && c->q == NULL && !c->tx_armed) {
        /* All said: end the read we keep for noticing a vanished client. */
        shutdown(c->fd, SHUT_RD);
        return;
    }
    if (c->rx_armed || c->tx_armed)
        return;
    if (!c->gone && !(c->ended && c->q == NULL))
        return;
    if (c->dispatched && !c->ended)
        return;         /* the handler still holds it */
    struct ctl_server *s = c->srv;
    close(c->fd);
    drop_queue(c);
    *c->pprev = c->next;
    if (c->next)
        c->next->pprev = c->pprev;
    free(c);
    s->nconns--;
}

static void dispatch(struct ctl_conn *c)
{
    c->dispatched = true;
    char *nl = memchr(c->line, '\n', c->got);
    *nl = '\0';
    if (nl > c->line && nl[-1] == '\r')
        nl[-1] = '\0';
    char *args = strchr(c->line, ' ');
    if (args)
        *args++ = '\0';
    else
        args = c->line + strlen(c->line);
    for (unsigned i = 0; i < c->srv->ncommands; i++) {
        if (strcmp(c->srv->commands[i].name, c->line) == 0) {
            c->srv->commands[i].fn(c, args, c->srv->commands[i].arg);
            return;
        }
    }
    ctl_printf(c, "error: unknown command '%s'\n", c->line);
    ctl_end(c);
}

static void rx_done(struct tc_io *io, int res)
{
    struct ctl_conn *c = container_of(io, struct ctl_conn, rx_io);
    c->rx_armed = false;
    if (res <= 0) {
        if (!c->dispatched || res < 0) {
            c->gone = true;
            drop_queue(c);
        }
        conn_maybe_free(c);
        return;
    }
    tc_kernel_filled(c->line + c->got, res);
    c->got += (size_t)res;
    if (!c->dispatched && memchr(c->line, '\n', c->got)) {
        dispatch(c);
    } else if (!c->dispatched && c->got == sizeof c->line) {
        ctl_printf(c, "error: command line too long\n");
        c->dispatched = true;
        ctl_end(c);
        return;
    }
    if (!c->dispatched || !c->ended) {
        /* Keep reading: EOF tells us the client has gone. */
        if (c->got == sizeof c->line)
            c->got = 0;
        c->rx_io.done = rx_done;
        io_uring_prep_recv(reactor_sqe(c->srv->reactor, &c->rx_io), c->fd, c->line + c->got,
                           sizeof c->line - c->got, 0);
        c->rx_armed = true;
    }
    conn_maybe_free(c);
}

static void accept_done(struct tc_io *io, int res)
{
    struct ctl_server *s = container_of(io, struct ctl_server, accept_io);
    s->armed = false;
    if (res >= 0) {
        if (s->stopping) {
            close(res);
        } else {
            struct ctl_conn *c = tc_xcalloc(1, sizeof *c);
            c->srv = s;
            c->fd = res;
            c->qtail = &c->q;
            c->next = s->conns;
            if (c->next)
                c->next->pprev = &c->next;
            c->pprev = &s->conns;
            s->conns = c;
            s->nconns++;
            c->rx_io.done = rx_done;
            io_uring_prep_recv(reactor_sqe(s->reactor, &c->rx_io), c->fd, c->line,
                               sizeof c->line, 0);
            c->rx_armed = true;
        }
    } else if (res != -ECANCELED && !s->stopping) {
        tc_warn("%s: accept failed: %s", s->path, strerror(-res));
    }
    if (!s->stopping)
        accept_arm(s);
}

static void accept_arm(struct ctl_server *s)
{
    s->accept_io.done = accept_done;
    io_uring_prep_accept(reactor_sqe(s->reactor, &s->accept_io), s->fd, NULL, NULL,
                         SOCK_CLOEXEC);
    s->armed = true;
}

int ctl_server_start(struct ctl_server *s, struct tc_reactor *r, const char *path, char *err,
                     size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->reactor = r;
    s->fd = -1;
    int fd = tc_unix_listen(path, 0600, 16, "control socket", err, errlen);
    if (fd < 0)
        return -1;
    s->fd = fd;
    s->path = tc_xstrdup(path);
    accept_arm(s);
    return 0;
}

static void cancel_done(struct tc_io *io, int res)
{
    (void)io;
    (void)res;
}

void ctl_server_stop(struct ctl_server *s)
{
    if (s->fd < 0 || s->stopping)
        return;
    s->stopping = true;
    if (s->armed) {
        s->cancel_io.done = cancel_done;
        io_uring_prep_cancel(reactor_sqe(s->reactor, &s->cancel_io), &s->accept_io, 0);
    }
    /* A client that has sent no command yet gets none answered now: its
     * read ends (rx_done() then frees it).  Its read, armed for as long
     * as it kept the connection open without a word, kept the loop and
     * so the daemon alive after the volume had closed.  A command under
     * way ends as its handler ends it. */
    for (struct ctl_conn *c = s->conns; c; c = c->next)
        if (!c->dispatched)
            shutdown(c->fd, SHUT_RDWR);
}

bool ctl_server_busy(const struct ctl_server *s)
{
    return s->armed || s->nconns > 0;
}

void ctl_server_close(struct ctl_server *s)
{
    if (s->fd >= 0) {
        close(s->fd);
        unlink(s->path);
    }
    free(s->path);
    s->path = NULL;
    s->fd = -1;
}
