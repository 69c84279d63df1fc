#include "util/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static FILE *log_file;
static char log_path[4096];
static enum tc_log_level log_level = TC_LOG_INFO;
static const char *log_program = "tiercache";

/* The log is opened without following a symlink (one planted where the log
 * goes would make the daemon append to its target), never blocks on a FIFO,
 * and must be a regular file or a character device (a terminal). */
static FILE *open_log(const char *path)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK,
                  0640);
    if (fd < 0)
        return NULL;
    struct stat st;
    int e = 0;
    if (fstat(fd, &st) < 0)
        e = errno;
    else if (!(S_ISREG(st.st_mode) || S_ISCHR(st.st_mode)))
        e = EINVAL;
    else if (fcntl(fd, F_SETFL, O_APPEND) < 0)
        e = errno;
    if (e) {
        close(fd);
        errno = e;
        return NULL;
    }
    FILE *f = fdopen(fd, "a");
    if (f == NULL) {
        e = errno;
        close(fd);
        errno = e;
        return NULL;
    }
    setvbuf(f, NULL, _IOLBF, 0);
    return f;
}

int tc_log_open(const char *path)
{
    if (path == NULL) {
        log_file = NULL;
        log_path[0] = '\0';
        return 0;
    }
    if (strlen(path) >= sizeof log_path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    FILE *f = open_log(path);
    if (f == NULL)
        return -1;
    if (log_file)
        fclose(log_file);
    log_file = f;
    snprintf(log_path, sizeof log_path, "%s", path);
    return 0;
}

const char *tc_log_path(void)
{
    return log_path[0] ? log_path : NULL;
}

/* Other threads (serve --nbd-threads) may be writing to log_file at any
 * time: the FILE stays, and its descriptor is pointed at the new file
 * (dup3() replaces it in one step; stdio's own lock orders the lines). */
int tc_log_reopen(void)
{
    if (log_path[0] == '\0')
        return 0;
    FILE *f = open_log(log_path);
    if (f == NULL)
        return -errno;
    if (log_file == NULL) {
        log_file = f;
        return 0;
    }
    fflush(log_file);
    int e = dup3(fileno(f), fileno(log_file), O_CLOEXEC) < 0 ? errno : 0;
    fclose(f);
    return -e;
}

/* Set on the reactor, read by every thread. */
void tc_log_set_level(enum tc_log_level level)
{
    __atomic_store_n(&log_level, level, __ATOMIC_RELAXED);
}
enum tc_log_level tc_log_get_level(void) { return __atomic_load_n(&log_level, __ATOMIC_RELAXED); }
void tc_log_set_program(const char *name) { log_program = name; }
static const char *die_command;
void tc_log_set_command(const char *name) { die_command = name; }

static const char *level_name[] = { "error", "warning", "info", "debug" };

void tc_vlog(enum tc_log_level level, const char *fmt, va_list ap)
{
    if (level > tc_log_get_level())
        return;
    int saved = errno;
    char line[2048];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    localtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%04d-%02d-%02d %02d:%02d:%02d.%03ld %s[%d]: %s: ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000000, log_program, (int)getpid(),
                     level_name[level]);
    if (n < 0)
        n = 0;
    if ((size_t)n < sizeof line)
        vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    FILE *out = log_file ? log_file : stderr;
    fprintf(out, "%s\n", line);
    errno = saved;
}

void tc_log(enum tc_log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tc_vlog(level, fmt, ap);
    va_end(ap);
}

void tc_die(int status, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", log_program);
    if (die_command)
        fprintf(stderr, "%s: ", die_command);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(status);
}
