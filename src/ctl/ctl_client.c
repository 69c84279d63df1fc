/* The CLI side of the control socket: blocking and simple. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "ctl/ctl.h"

static unsigned reply_timeout_ms;       /* ctl_client_set_timeout() */

void ctl_client_set_timeout(unsigned ms)
{
    reply_timeout_ms = ms;
}

int ctl_request(const char *path, const char *command,
                void (*line)(const char *text, void *arg), void *arg, char *err, size_t errlen)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (strlen(path) >= sizeof sa.sun_path) {
        snprintf(err, errlen, "control socket path '%s' is too long", path);
        return -1;
    }
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        snprintf(err, errlen, "cannot reach a tiercache daemon at %s: %s", path,
                 strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (reply_timeout_ms) {
        struct timeval tv = { .tv_sec = reply_timeout_ms / 1000,
                              .tv_usec = (reply_timeout_ms % 1000) * 1000 };
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    }
    size_t n = strlen(command);
    char *msg = malloc(n + 2);
    memcpy(msg, command, n);
    msg[n] = '\n';
    msg[n + 1] = '\0';
    ssize_t w = send(fd, msg, n + 1, MSG_NOSIGNAL);
    free(msg);
    if (w != (ssize_t)(n + 1)) {
        snprintf(err, errlen, "%s: sending the command failed: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    size_t cap = 65536, len = 0;
    char *buf = malloc(cap);
    int rc = 0;
    err[0] = '\0';
    for (;;) {
        if (len + 1 >= cap) {
            cap *= 2;
            buf = realloc(buf, cap);
        }
        ssize_t r = recv(fd, buf + len, cap - len - 1, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && reply_timeout_ms) {
            snprintf(err, errlen, "%s: no answer within %g s (the daemon is stopped or hung)",
                     path, reply_timeout_ms / 1000.0);
            free(buf);
            close(fd);
            return -1;
        }
        if (r <= 0)
            break;
        len += (size_t)r;
        buf[len] = '\0';
        char *nl;
        while ((nl = memchr(buf, '\n', len)) != NULL) {
            *nl = '\0';
            if (strncmp(buf, "error: ", 7) == 0) {
                snprintf(err, errlen, "%s", buf + 7);
                rc = -1;
            } else {
                line(buf, arg);
            }
            size_t used = (size_t)(nl - buf) + 1;
            memmove(buf, nl + 1, len - used);
            len -= used;
        }
    }
    if (len > 0) {
        buf[len] = '\0';
        if (strncmp(buf, "error: ", 7) == 0) {
            snprintf(err, errlen, "%s", buf + 7);
            rc = -1;
        } else {
            line(buf, arg);
        }
    }
    free(buf);
    close(fd);
    return rc;
}

/* ctl_request_text(): the lines, gathered. */
struct reply_text {
    char *text;
    size_t len;
};

static void gather_line(const char *line, void *arg)
{
    struct reply_text *r = arg;
    size_t n = strlen(line);
    char *t = realloc(r->text, r->len + n + 2);
    if (t == NULL)
        abort();
    r->text = t;
    memcpy(r->text + r->len, line, n);
    r->len += n;
    r->text[r->len++] = '\n';
    r->text[r->len] = '\0';
}

char *ctl_request_text(const char *path, const char *command, char *err, size_t errlen)
{
    struct reply_text r = { NULL, 0 };
    if (ctl_request(path, command, gather_line, &r, err, errlen) < 0) {
        free(r.text);
        return NULL;
    }
    if (r.text == NULL) {
        r.text = malloc(1);
        if (r.text == NULL)
            abort();
        r.text[0] = '\0';
    }
    return r.text;
}
