/*
 * What serve and swap-prefetch share as daemons: going into the
 * background once ready, the pid file, and reopening the --log file on
 * SIGHUP or SIGUSR1.  The run directory and the checks of the directories
 * the paths go in are in common.c (the control commands use them too).
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/daemon.h"
#include "util/log.h"
#include "util/memcheck.h"
#include "util/misc.h"

static char pidfile_path[4096];

void cli_remove_pidfile(void)
{
    /* Only the file this process wrote: a daemon started meanwhile with the
     * same pid file (after this one stopped listening) owns a new one. */
    char buf[32];
    int fd = open(pidfile_path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n > 0) {
        buf[n] = '\0';
        if (atol(buf) == (long)getpid())
            unlink(pidfile_path);
    }
}

/* Whether the file open on fd (size bytes) is a pid file: a decimal
 * number, spaces and newlines around it, no more than a pid file's bytes. */
static bool holds_pid(int fd, off_t size)
{
    char buf[32];
    if (size >= (off_t)sizeof buf)
        return false;
    ssize_t n = pread(fd, buf, (size_t)size, 0);
    if (n != (ssize_t)size)
        return false;
    size_t i = 0, digits = 0;
    while (i < (size_t)n && isspace((unsigned char)buf[i]))
        i++;
    while (i < (size_t)n && isdigit((unsigned char)buf[i]))
        i++, digits++;
    while (i < (size_t)n && isspace((unsigned char)buf[i]))
        i++;
    return digits > 0 && i == (size_t)n;
}

bool cli_write_pidfile(const char *path, char *err, size_t errlen)
{
    if (strlen(path) >= sizeof pidfile_path) {
        snprintf(err, errlen, "--pidfile %s: path too long", path);
        return false;
    }
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0644);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        int e = fd < 0 ? errno : EINVAL;
        snprintf(err, errlen, "--pidfile %s: %s", path, cli_open_error(e));
        if (fd >= 0)
            close(fd);
        return false;
    }
    /* An existing file is replaced only if it is empty or holds a process
     * id (a pid file left by a kill): any other file named by mistake (a
     * stopped volume's origin or cache device, which no claim holds) was
     * truncated to a number here and removed at exit. */
    if (st.st_size > 0 && !holds_pid(fd, st.st_size)) {
        snprintf(err, errlen, "--pidfile %s: the file exists and holds %lld bytes that are not "
                 "a process id (another file named by mistake?); it is left as it is: give "
                 "--pidfile another path, or remove the file if it is an old pid file",
                 path, (long long)st.st_size);
        close(fd);
        return false;
    }
    char line[32];
    int n = snprintf(line, sizeof line, "%d\n", (int)getpid());
    if (ftruncate(fd, 0) < 0 || write(fd, line, (size_t)n) != n) {
        snprintf(err, errlen, "--pidfile %s: cannot write: %s", path, strerror(errno));
        close(fd);
        return false;
    }
    close(fd);
    snprintf(pidfile_path, sizeof pidfile_path, "%s", path);
    atexit(cli_remove_pidfile);
    return true;
}

void cli_reopen_log(const char *why)
{
    const char *path = tc_log_path();
    if (path == NULL) {
        tc_info("%s: logging to stderr, no log file to reopen", why);
        return;
    }
    int rc = tc_log_reopen();
    if (rc < 0)
        tc_error("%s: cannot reopen the log %s: %s; still logging to the old file", why, path,
                 cli_open_error(-rc));
    else
        tc_info("log reopened on %s", why);
}

int cli_daemonize(void)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        tc_die(1, "pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0)
        tc_die(1, "fork: %s", strerror(errno));
    if (pid > 0) {
        close(p[1]);
        char c;
        ssize_t n = read(p[0], &c, 1);
        _exit(n == 1 ? 0 : 1);
    }
    close(p[0]);
    setsid();
    return p[1];
}

void cli_detach_stdio(void)
{
    int fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (fd >= 0) {
        dup2(fd, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        if (fd > 2)
            close(fd);
    }
}

void cli_daemon_ready(int ready_fd)
{
    if (ready_fd < 0)
        return;
    if (write(ready_fd, "r", 1) != 1)
        tc_warn("could not tell the parent process we are ready");
    close(ready_fd);
    cli_detach_stdio();
}

void cli_open_log(const char *path, bool background, const char *name, char *err,
                  size_t errlen)
{
    char buf[4096];
    if (background && path == NULL) {
        snprintf(buf, sizeof buf, "%s/%s", cli_run_dir(), name);
        path = buf;
    }
    if (path == NULL)
        return;
    if (!cli_check_parent(path, "--log", err, errlen))
        tc_die(1, "%s", err);
    if (tc_log_open(path) < 0)
        tc_die(1, "--log %s: %s", path, cli_open_error(errno));
}

void cli_signals_init(struct cli_signals *sig)
{
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    sigaddset(&mask, SIGUSR1);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    sig->fd = signalfd(-1, &mask, SFD_CLOEXEC);
    if (sig->fd < 0)
        tc_die(1, "signalfd: %s", strerror(errno));
}

static void signal_read(struct cli_signals *sig);

static void signal_done(struct tc_io *io, int res)
{
    struct cli_signals *sig = container_of(io, struct cli_signals, io);
    tc_kernel_filled(&sig->info, res);
    if (res == (int)sizeof sig->info) {
        int s = (int)sig->info.ssi_signo;
        if (s == SIGTERM || s == SIGINT)
            sig->stop(sig, s == SIGTERM ? "SIGTERM" : "SIGINT");
        else if (s == SIGHUP || s == SIGUSR1)
            cli_reopen_log(s == SIGHUP ? "SIGHUP" : "SIGUSR1");
    }
    if (res != -ECANCELED && !sig->cancelled)
        signal_read(sig);
}

static void signal_read(struct cli_signals *sig)
{
    sig->io.done = signal_done;
    io_uring_prep_read(reactor_sqe(sig->reactor, &sig->io), sig->fd, &sig->info,
                       sizeof sig->info, 0);
}

void cli_signals_arm(struct cli_signals *sig, struct tc_reactor *r,
                     void (*stop)(struct cli_signals *sig, const char *name))
{
    sig->reactor = r;
    sig->stop = stop;
    signal_read(sig);
}

static void ignore_completion(struct tc_io *io, int res)
{
    (void)io;
    (void)res;
}

void cli_signals_cancel(struct cli_signals *sig)
{
    sig->cancelled = true;
    sig->cancel_io.done = ignore_completion;
    io_uring_prep_cancel(reactor_sqe(sig->reactor, &sig->cancel_io), &sig->io, 0);
}

void cli_signals_close(struct cli_signals *sig)
{
    close(sig->fd);
}
