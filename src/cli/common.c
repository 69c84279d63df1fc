#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "ctl/ctl.h"

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
