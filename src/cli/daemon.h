/*
 * The daemon scaffolding of serve and swap-prefetch (daemon.c).
 */
#ifndef TC_CLI_DAEMON_H
#define TC_CLI_DAEMON_H

#include <stdbool.h>
#include <stddef.h>

/* Write this process's pid to path (never through a symlink, only to a
 * regular file) and remove it at exit if it still holds this pid.  False
 * with err filled if it cannot. */
bool cli_write_pidfile(const char *path, char *err, size_t errlen);
/* On SIGHUP or SIGUSR1 (why): reopen the --log file and log that it did. */
void cli_reopen_log(const char *why);
/* Fork into the background.  The parent waits until the child writes one
 * byte to the returned pipe (it is ready) and exits 0, or exits 1 if the
 * child dies first; the child gets a new session. */
int cli_daemonize(void);
/* Point stdin, stdout and stderr at /dev/null. */
void cli_detach_stdio(void);

#endif
