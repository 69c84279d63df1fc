/*
 * The control socket: how `tiercache status`, `flush`, `detach`, `attach`,
 * `mode` and `set` talk to a running daemon.
 *
 * Protocol: the client connects to the daemon's control socket (a Unix
 * socket, mode 0600), sends one line "COMMAND [ARGUMENTS]\n", and reads
 * lines until the daemon closes the connection.  A line starting with
 * "error: " reports a failure; every other line is the command's output
 * (status: one JSON document; flush: progress lines then a summary).
 */
#ifndef TC_CTL_CTL_H
#define TC_CTL_CTL_H

#include <stdbool.h>
#include <stddef.h>

#include "io/reactor.h"

struct ctl_conn;
typedef void (*ctl_handler)(struct ctl_conn *c, const char *args, void *arg);

struct ctl_command {
    const char *name;
    ctl_handler fn;
    void *arg;
};

struct ctl_server {
    struct tc_reactor *reactor;
    int fd;
    char *path;
    bool armed, stopping;
    struct tc_io accept_io, cancel_io;
    struct ctl_command commands[16];
    unsigned ncommands;
    unsigned nconns;
    struct ctl_conn *conns;     /* open connections (ctl_server.c) */
};

int ctl_server_start(struct ctl_server *s, struct tc_reactor *r, const char *path, char *err,
                     size_t errlen);
void ctl_register(struct ctl_server *s, const char *name, ctl_handler fn, void *arg);
void ctl_server_stop(struct ctl_server *s);
/* Close the listening socket and remove its file (after the loop ends). */
void ctl_server_close(struct ctl_server *s);
/* True while the server still has work in flight (accept, connections). */
bool ctl_server_busy(const struct ctl_server *s);

/* Reply output: queued and sent in order; ctl_end closes after the last. */
void ctl_write(struct ctl_conn *c, const char *data, size_t len);
void ctl_printf(struct ctl_conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ctl_end(struct ctl_conn *c);
/* True once the client has gone (the handler may stop producing output). */
bool ctl_gone(const struct ctl_conn *c);

/* Client side (blocking, for the CLI).  Calls line() for each line of the
 * reply.  Returns 0, or -1 with a message in err (connection failures, or
 * an "error: " line from the daemon). */
int ctl_request(const char *path, const char *command,
                void (*line)(const char *text, void *arg), void *arg, char *err,
                size_t errlen);
/* The whole reply of a command, its lines each ended by '\n' (malloc'd;
 * NULL with err filled if the request failed, or "" if the daemon sent
 * nothing). */
char *ctl_request_text(const char *path, const char *command, char *err, size_t errlen);
/* From now on, a request whose reply does not come within ms (0: wait for
 * ever, the default) fails, saying so: for commands answered at once
 * (status), not for those that wait on the daemon's work (flush). */
void ctl_client_set_timeout(unsigned ms);

/* The control socket that belongs to a data socket path:
 * "x.sock" -> "x.ctl", anything else gets ".ctl" appended; a path already
 * ending in ".ctl" is returned as is. */
void ctl_path_for(const char *socket_path, char *out, size_t len);

#endif
