#include "util/unixsock.h"

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "util/log.h"

const char *tc_file_kind(unsigned m)
{
    switch (m & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFLNK: return "a symbolic link";
    case S_IFSOCK: return "a socket";
    case S_IFIFO: return "a FIFO";
    case S_IFBLK: return "a block device";
    case S_IFCHR: return "a character device";
    default: return "a special file";
    }
}

/* "the directory /a/b" of "/a/b/c.sock" ("." for a bare name). */
static void dir_of(const char *path, char *out, size_t len)
{
    const char *slash = strrchr(path, '/');
    if (slash == NULL)
        snprintf(out, len, ".");
    else if (slash == path)
        snprintf(out, len, "/");
    else
        snprintf(out, len, "%.*s", (int)(slash - path), path);
}

/* What is at the path: 0 nothing, 1 a socket nobody listens on (*st
 * describes it), -1 something that must stay (err says what). */
static int look_at_path(const char *path, const struct sockaddr_un *psa, const char *what,
                        struct stat *pst, char *err, size_t errlen)
{
    struct sockaddr_un sa = *psa;
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            snprintf(err, errlen, "%s %s: the path exists and is %s, not a socket; refusing "
                     "to replace it (choose another path)", what, path, tc_file_kind(st.st_mode));
            return -1;
        }
        /* A socket file: replaced only if nobody listens on it.  Only
         * ECONNREFUSED says so; any other failure (no permission, ...) is
         * not proof, and the file stays.  A connection that is taken and
         * then dropped unanswered is no server either: the socket of a
         * daemon killed a moment ago still takes connections while the
         * kernel ends its io_uring requests (which hold its files), and
         * drops them as it closes; asked again, it refuses.  A live
         * server keeps the connection (or greets, as NBD does). */
        int rc, e = 0;
        for (unsigned tries = 0;; tries++) {
            int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
            if (probe < 0) {
                snprintf(err, errlen, "socket: %s", strerror(errno));
                return -1;
            }
            rc = connect(probe, (struct sockaddr *)&sa, sizeof sa);
            e = errno;
            bool dropped = false;
            if (rc == 0) {
                struct pollfd p = { .fd = probe, .events = POLLIN | POLLRDHUP };
                char c;
                if (poll(&p, 1, 1000) == 1)
                    dropped = (p.revents & (POLLHUP | POLLERR | POLLRDHUP)) ||
                              recv(probe, &c, 1, MSG_PEEK | MSG_DONTWAIT) <= 0;
                if (dropped && (p.revents & POLLIN) &&
                    recv(probe, &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0)
                    dropped = false;    /* it spoke: a server */
            }
            close(probe);
            if (rc == 0 && dropped && tries < 20)
                continue;
            break;
        }
        if (rc == 0) {
            snprintf(err, errlen, "%s %s: another server is listening on it", what, path);
            return -1;
        }
        if (e != ECONNREFUSED) {
            snprintf(err, errlen, "%s %s: an existing socket is there and probing it failed "
                     "(%s); refusing to replace it", what, path, strerror(e));
            return -1;
        }
        *pst = st;
        return 1;
    }
    if (errno != ENOENT) {
        snprintf(err, errlen, "%s %s: %s", what, path, strerror(errno));
        return -1;
    }
    return 0;
}

static bool path_fits(const char *path, struct sockaddr_un *sa, const char *what, char *err,
                      size_t errlen)
{
    if (path[0] == '\0' || strlen(path) >= sizeof sa->sun_path) {
        snprintf(err, errlen, "%s path '%s' is empty or longer than %zu bytes", what, path,
                 sizeof sa->sun_path - 1);
        return false;
    }
    strcpy(sa->sun_path, path);
    return true;
}

int tc_unix_check(const char *path, const char *what, char *err, size_t errlen)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    struct stat st;
    if (!path_fits(path, &sa, what, err, errlen) || look_at_path(path, &sa, what, &st, err, errlen) < 0)
        return -1;
    char dir[sizeof sa.sun_path];
    dir_of(path, dir, sizeof dir);
    if (stat(dir, &st) < 0) {
        snprintf(err, errlen, "%s %s: the directory %s %s", what, path, dir,
                 errno == ENOENT ? "does not exist (it is not created)" : strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s %s: %s is not a directory", what, path, dir);
        return -1;
    }
    return 0;
}

int tc_unix_listen(const char *path, unsigned mode, int backlog, const char *what, char *err,
                   size_t errlen)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (!path_fits(path, &sa, what, err, errlen))
        return -1;
    struct stat st;
    int there = look_at_path(path, &sa, what, &st, err, errlen);
    if (there < 0)
        return -1;
    if (there > 0) {
        /* Remove that very file, not one put in its place meanwhile. */
        struct stat now;
        if (lstat(path, &now) == 0 && S_ISSOCK(now.st_mode) && now.st_ino == st.st_ino &&
            now.st_dev == st.st_dev) {
            if (unlink(path) < 0) {
                snprintf(err, errlen, "%s %s: cannot remove the stale socket: %s", what, path,
                         strerror(errno));
                return -1;
            }
            tc_info("%s %s: replaced a stale socket nobody listened on", what, path);
        }
    }

    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    /* bind() creates the file with 0777 & ~umask: exactly mode. */
    mode_t old = umask(0777 & ~mode);
    int rc = bind(fd, (struct sockaddr *)&sa, sizeof sa);
    int e = errno;
    umask(old);
    if (rc < 0) {
        char dir[sizeof sa.sun_path];
        dir_of(path, dir, sizeof dir);
        if (e == ENOENT)
            snprintf(err, errlen, "%s %s: the directory %s does not exist (it is not created)",
                     what, path, dir);
        else if (e == ENOTDIR)
            snprintf(err, errlen, "%s %s: %s is not a directory", what, path, dir);
        else if (e == EADDRINUSE)
            snprintf(err, errlen, "%s %s: something was created at that path meanwhile; "
                     "refusing to replace it", what, path);
        else
            snprintf(err, errlen, "%s %s: cannot bind: %s", what, path, strerror(e));
        close(fd);
        return -1;
    }
    if (listen(fd, backlog) < 0) {
        snprintf(err, errlen, "%s %s: cannot listen: %s", what, path, strerror(errno));
        close(fd);
        unlink(path);
        return -1;
    }
    return fd;
}
