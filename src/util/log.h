/*
 * Logging: one line per event, to stderr (foreground) or to a log file.
 *
 * Every line starts with a timestamp and a level so that an operator can
 * grep a daemon's log.  I/O errors always name the device and the offset.
 */
#ifndef TC_UTIL_LOG_H
#define TC_UTIL_LOG_H

#include <stdarg.h>
#include <stdbool.h>

enum tc_log_level { TC_LOG_ERROR, TC_LOG_WARN, TC_LOG_INFO, TC_LOG_DEBUG };

/* Where lines go: NULL for stderr.  Returns -1 (errno set) if the file
 * cannot be opened: ELOOP for a symlink (never followed), EINVAL for a
 * FIFO or socket. */
int tc_log_open(const char *path);
/* The log file's path, NULL when logging to stderr. */
const char *tc_log_path(void);
/* Open the log file's path again (after logrotate moved it); the old file
 * stays in use if that fails.  0, or -errno.  Not for signal handlers: call
 * it from the loop that read the signal. */
int tc_log_reopen(void);
void tc_log_set_level(enum tc_log_level level);
enum tc_log_level tc_log_get_level(void);
/* Name printed in each line, "tiercache" unless set. */
void tc_log_set_program(const char *name);

void tc_log(enum tc_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void tc_vlog(enum tc_log_level level, const char *fmt, va_list ap);

#define tc_error(...) tc_log(TC_LOG_ERROR, __VA_ARGS__)
#define tc_warn(...)  tc_log(TC_LOG_WARN, __VA_ARGS__)
#define tc_info(...)  tc_log(TC_LOG_INFO, __VA_ARGS__)
#define tc_debug(...) \
    do { if (tc_log_get_level() >= TC_LOG_DEBUG) tc_log(TC_LOG_DEBUG, __VA_ARGS__); } while (0)

/* Print "tiercache: message" to stderr and exit(status).  For the CLI.
 * After tc_log_set_command("serve"): "tiercache: serve: message", so that
 * an error says which command refused (the commands whose messages do not
 * each name it themselves set it). */
void tc_die(int status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));
void tc_log_set_command(const char *name);

#endif
