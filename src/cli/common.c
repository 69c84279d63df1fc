#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "ctl/ctl.h"
#include "util/log.h"

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

bool cli_make_parent(const char *path, char *err, size_t errlen)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    char *slash = strrchr(tmp, '/');
    if (slash == NULL || slash == tmp)
        return true;
    *slash = '\0';
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
                goto fail;
            *p = '/';
        }
    }
    if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
        goto fail;
    return true;
fail:
    snprintf(err, errlen, "cannot create directory %s: %s", tmp, strerror(errno));
    return false;
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
