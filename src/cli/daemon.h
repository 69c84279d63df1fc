/*
 * The daemon scaffolding of serve and swap-prefetch (daemon.c).
 */
#ifndef TC_CLI_DAEMON_H
#define TC_CLI_DAEMON_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/signalfd.h>

#include "io/reactor.h"

/* Write this process's pid to path (never through a symlink, only to a
 * regular file) and remove it at exit if it still holds this pid.  False
 * with err filled if it cannot. */
bool cli_write_pidfile(const char *path, char *err, size_t errlen);
/* Remove the pid file cli_write_pidfile() wrote, if it still holds this
 * process's id (also run at exit). */
void cli_remove_pidfile(void);
/* On SIGHUP or SIGUSR1 (why): reopen the --log file and log that it did. */
void cli_reopen_log(const char *why);
/* Fork into the background.  The parent waits until the child writes one
 * byte to the returned pipe (it is ready) and exits 0, or exits 1 if the
 * child dies first; the child gets a new session. */
int cli_daemonize(void);
/* Point stdin, stdout and stderr at /dev/null. */
void cli_detach_stdio(void);
/* The child is ready: if ready_fd (from cli_daemonize(); -1 in the
 * foreground) is open, tell the parent and detach stdio. */
void cli_daemon_ready(int ready_fd);

/* Open the log: path (--log), or, in the background without it, RUNDIR/name
 * (in the foreground without --log, stderr stays).  Its directory must pass
 * cli_check_parent().  Exits 1 with the message (err is scratch room) if
 * the directory or the file is refused. */
void cli_open_log(const char *path, bool background, const char *name, char *err,
                  size_t errlen);

/*
 * The signals of a daemon, read from a signalfd on the reactor so that
 * their handling runs in the loop, not in a signal handler: SIGTERM and
 * SIGINT call stop() with the signal's name, SIGHUP and SIGUSR1 reopen
 * the log (cli_reopen_log()).  SIGPIPE is ignored.
 *
 *   cli_signals_init()     block the signals and make the signalfd (before
 *                          anything else the daemon starts)
 *   cli_signals_arm()      read it on the reactor, again after each signal
 *   cli_signals_cancel()   stop reading (the pending read is the last
 *                          thing keeping the loop alive)
 *   cli_signals_close()    close the signalfd, after the loop ended
 */
struct cli_signals {
    struct tc_reactor *reactor;
    void (*stop)(struct cli_signals *sig, const char *name);
    int fd;
    bool cancelled;
    struct signalfd_siginfo info;
    struct tc_io io, cancel_io;
};
/* Exits 1 with a message if the signalfd cannot be made. */
void cli_signals_init(struct cli_signals *sig);
void cli_signals_arm(struct cli_signals *sig, struct tc_reactor *r,
                     void (*stop)(struct cli_signals *sig, const char *name));
void cli_signals_cancel(struct cli_signals *sig);
void cli_signals_close(struct cli_signals *sig);

#endif
