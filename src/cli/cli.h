/* Shared by the subcommands in src/cli/: one file per subcommand. */
#ifndef TC_CLI_CLI_H
#define TC_CLI_CLI_H

#include <stdbool.h>
#include <stddef.h>

#define TC_VERSION "0.1.0"

int cmd_serve(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_format(int argc, char **argv);
int cmd_flush(int argc, char **argv);
int cmd_detach(int argc, char **argv);
int cmd_mode(int argc, char **argv);
int cmd_set(int argc, char **argv);
int cmd_attach(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_dump(int argc, char **argv);
int cmd_trace_info(int argc, char **argv);
int cmd_trace_convert(int argc, char **argv);
int cmd_replay(int argc, char **argv);
int cmd_list(int argc, char **argv);

/* The status JSON of the daemon on control socket ctl_path (free with
 * jv_free), or NULL with err filled. */
struct jv;
/* How long status and list wait for a daemon's answer: a stopped or hung
 * daemon is reported, not waited for (the daemon answers at once, from
 * its loop, while it serves). */
#define CLI_STATUS_TIMEOUT_MS 10000
struct jv *cli_status_fetch(const char *ctl_path, char *err, size_t errlen);
/* status --brief: the heading and the one line of that daemon's volume. */
int cli_brief_one(const char *ctl_path);

/* format --force over old cache sets (format_dirty.c): 0 when no device
 * holds a set with dirty data or lost sectors, or one whose log cannot be
 * read; else -1 with the refusal, and the way out, in err.  Reads only.
 * Each old set found stays locked (claim_set_hold()) until the caller
 * releases what it put in held[] (at most TC_MAX_DEVICES, *nheld of them),
 * also when it fails: no daemon may serve it before the format is done. */
struct claim_set;
int cli_format_dirty_check(const char *const *caches, struct claim_set **held,
                           unsigned *nheld, char *err, size_t errlen);

/* Split "a,b,c" into a NULL-terminated array (the string is modified);
 * an empty element, or more than max, is bad usage naming what (exit 2). */
const char **cli_split_list(const char *what, char *s, unsigned max, unsigned *count);
int cmd_swap_prefetch(int argc, char **argv);

/* Where sockets go when no path is given: /run/tiercache for root, else
 * $XDG_RUNTIME_DIR/tiercache or /tmp/tiercache-UID. */
const char *cli_run_dir(void);
/* Create the run directory (mode 0700) if missing; false (err filled) if
 * it is not a directory of this user's that only this user may write in. */
bool cli_run_dir_ensure(char *err, size_t errlen);
/* The directory path goes in must exist (nothing is created), and if it is
 * the run directory, pass cli_run_dir_ensure().  what names the option in
 * messages ("--socket").  False with err filled otherwise. */
bool cli_check_parent(const char *path, const char *what, char *err, size_t errlen);
/* open()'s errno as a message: ELOOP says the path is a symlink. */
const char *cli_open_error(int e);
/* The control socket for --socket VALUE (data or control socket path), or
 * the default one. */
void cli_control_path(const char *socket_opt, char *out, size_t len);

/* The options of the control commands that take only --socket PATH (and
 * --help): -1 to go on, with *sock set (NULL: the default) and optind at
 * the first operand; else the exit status (0 after --help, 2 for a bad
 * option, said on stderr). */
int cli_socket_options(const char *cmd, const char *help, int argc, char **argv,
                       const char **sock);

/* Print help text for a subcommand on stdout. */
void cli_print(const char *text);

#endif
