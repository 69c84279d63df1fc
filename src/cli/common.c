#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "ctl/ctl.h"
#include "util/log.h"
#include "util/unixsock.h"

const char *cli_run_dir(void)
{
    static char dir[256];
    if (dir[0])
        return dir;
    if (geteuid() == 0) {
        snprintf(dir, sizeof dir, "/run/tiercache");
    } else {
        const char *x = getenv("XDG_RUNTIME_DIR");
        if (x && x[0])
            snprintf(dir, sizeof dir, "%s/tiercache", x);
        else
            snprintf(dir, sizeof dir, "/tmp/tiercache-%u", (unsigned)getuid());
    }
    return dir;
}

/*
 * The run directory holds the sockets, log and pid file of daemons started
 * without explicit paths.  Whoever can write in it can replace the socket
 * clients connect to, or plant a symlink where the log is opened, so it
 * must be ours alone: created mode 0700, and an existing one accepted only
 * if it is a real directory (not a symlink), owned by this user, and not
 * writable by group or others.  Read and search bits are left to the
 * administrator (systemd's RuntimeDirectory= makes it 0755, and a socket
 * shared with a group, SocketMode=0660, needs the group to reach it):
 * they let others list the names and open what each file's own mode
 * allows, and nothing there is secret or open to them -- the sockets are
 * 0600 unless --socket-mode says otherwise (connecting needs write
 * permission on the socket), the set locks 0600, the pid file 0644 (a
 * number) and the background log 0640 (what the daemon does: paths,
 * clients, errors; never keys or data).
 */
bool cli_run_dir_ensure(char *err, size_t errlen)
{
    const char *dir = cli_run_dir();
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        snprintf(err, errlen, "run directory %s: cannot create it: %s", dir, strerror(errno));
        return false;
    }
    struct stat st;
    if (lstat(dir, &st) < 0) {
        snprintf(err, errlen, "run directory %s: %s", dir, strerror(errno));
        return false;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "run directory %s is %s, not a directory; refusing to use it",
                 dir, tc_file_kind(st.st_mode));
        return false;
    }
    if (st.st_uid != geteuid()) {
        snprintf(err, errlen, "run directory %s belongs to uid %u, not to this user (uid %u): "
                 "another user may have made it; refusing to use it (remove it, or choose "
                 "the paths with --socket, --control, --log and --pidfile)", dir,
                 (unsigned)st.st_uid, (unsigned)geteuid());
        return false;
    }
    if (st.st_mode & 022) {
        snprintf(err, errlen, "run directory %s has mode %04o: group or others may write in "
                 "it; refusing to use it (chmod go-w %s)", dir, (unsigned)(st.st_mode & 07777),
                 dir);
        return false;
    }
    return true;
}

bool cli_check_parent(const char *path, const char *what, char *err, size_t errlen)
{
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (slash == NULL)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    if (strcmp(dir, cli_run_dir()) == 0)
        return cli_run_dir_ensure(err, errlen);
    struct stat st;
    if (stat(dir, &st) < 0) {
        snprintf(err, errlen, "%s %s: the directory %s %s (directories are not created)", what,
                 path, dir, errno == ENOENT ? "does not exist" : strerror(errno));
        return false;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s %s: %s is not a directory", what, path, dir);
        return false;
    }
    return true;
}

const char *cli_open_error(int e)
{
    if (e == ELOOP)
        return "it is a symbolic link, which is not followed";
    if (e == EINVAL)
        return "it is not a regular file";
    return strerror(e);
}

void cli_control_path(const char *socket_opt, char *out, size_t len)
{
    if (socket_opt && socket_opt[0]) {
        ctl_path_for(socket_opt, out, len);
        return;
    }
    snprintf(out, len, "%s/tiercache.ctl", cli_run_dir());
}

void cli_print(const char *text)
{
    fputs(text, stdout);
}

int cli_socket_options(const char *cmd, const char *help, int argc, char **argv,
                       const char **sock)
{
    static const struct option opts[] = {
        { "socket", required_argument, NULL, 's' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int opt;
    *sock = NULL;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (opt) {
        case 's': *sock = optarg; break;
        case 'h': cli_print(help); return 0;
        default: fprintf(stderr, "Try 'tiercache %s --help'.\n", cmd); return 2;
        }
    }
    return -1;
}
