/*
 * Listening Unix sockets, one implementation for every daemon socket (the
 * NBD socket, the control sockets of serve and swap-prefetch).
 *
 * The path a user names may already hold something.  Only a socket file
 * that nobody listens on (left by a daemon that died) is ever replaced;
 * anything else there -- a regular file, a directory, a symlink, a device,
 * a live socket -- is an error naming it, and stays untouched.  A missing
 * directory is an error too: nothing here creates directories.
 */
#ifndef TC_UTIL_UNIXSOCK_H
#define TC_UTIL_UNIXSOCK_H

#include <stddef.h>

/* Bind a SOCK_STREAM socket at path with permissions mode (no bits beyond
 * it, ever: the umask covers the bind) and listen.  what names the socket
 * in messages ("socket", "control socket").  Returns the descriptor (close
 * on exec), or -1 with a message in err. */
int tc_unix_listen(const char *path, unsigned mode, int backlog, const char *what, char *err,
                   size_t errlen);

/* Whether tc_unix_listen() could take the path now: 0, or -1 with the
 * message it would give (something other than a stale socket there, a
 * server listening, the directory missing).  Nothing is changed: a check
 * made before a long start, so that it fails before it begins. */
int tc_unix_check(const char *path, const char *what, char *err, size_t errlen);

/* What kind of file a st_mode is, for messages: "a regular file", ... */
const char *tc_file_kind(unsigned st_mode);

#endif
