/*
 * tiercache attach: use the cache set a detach left unused again, without
 * restarting the daemon (engine/attach.c says how and why it comes back
 * empty).
 */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "ctl/ctl.h"
#include "tiercache.h"
#include "util/jsonread.h"
#include "util/log.h"

static const char attach_help[] =
"Usage: tiercache attach [--socket PATH] [--cache DEV[,DEV...]] [--mode MODE]\n"
"\n"
"Use the cache a 'tiercache detach' left unused again, without restarting\n"
"the daemon.  The cache comes back empty: the origin has received writes\n"
"the cache never saw since the detach, so nothing it held before is\n"
"served; it fills again as data is read and written.  Sectors whose data\n"
"was lost with a failed cache device stay unreadable until written again.\n"
"The mode is the one the daemon had before the detach, or MODE.\n"
"\n"
"Refused, changing nothing, while the cache is attached, while a detach or\n"
"another attach is under way, after the cache failed (restart instead),\n"
"when a device named is not of this origin (another origin's size or\n"
"identity) or not of the detached cache set, and when the origin fails the\n"
"flush that makes the writes made while detached durable there.\n"
"\n"
"  --socket PATH   the daemon's NBD socket (x.sock) or control socket (x.ctl)\n"
"  --cache LIST    the devices of the detached set, as named now (default:\n"
"                  the devices detached)\n"
"  --mode MODE     writethrough, writeback, writearound or passthrough\n"
"  --help, -h      this text\n";

struct result {
    char mode[32];
    bool done;
};

static void on_line(const char *line, void *arg)
{
    struct result *r = arg;
    if (strncmp(line, "done ", 5) != 0)
        return;
    char err[128];
    struct jv *j = jv_parse(line + 5, err, sizeof err);
    snprintf(r->mode, sizeof r->mode, "%s", j ? jv_str(jv_get(j, "mode"), "?") : "?");
    r->done = true;
    jv_free(j);
}

int cmd_attach(int argc, char **argv)
{
    static const struct option opts[] = {
        { "socket", required_argument, NULL, 's' },
        { "cache", required_argument, NULL, 'c' },
        { "mode", required_argument, NULL, 'm' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *sock = NULL, *caches = NULL, *mode = NULL;
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (opt) {
        case 's': sock = optarg; break;
        case 'c': caches = optarg; break;
        case 'm': mode = optarg; break;
        case 'h': cli_print(attach_help); return 0;
        default: fprintf(stderr, "Try 'tiercache attach --help'.\n"); return 2;
        }
    }
    if (optind < argc)
        tc_die(2, "attach: unexpected argument '%s' (try --help)", argv[optind]);
    enum tc_mode m;
    if (mode && tc_mode_parse(mode, &m) < 0)
        tc_die(2, "attach: --mode '%s' is not a mode: choose writethrough, writeback, "
               "writearound or passthrough", mode);
    char line[8192];
    size_t n = (size_t)snprintf(line, sizeof line, "attach %s", mode ? mode : "-");
    if (caches) {
        /* The daemon resolves names in its own directory: send absolute
         * paths (a testdev: spec is sent as given). */
        char *list = strdup(caches);
        unsigned count;
        const char **paths = cli_split_list("--cache", list, 64, &count);
        if (count == 0)
            tc_die(2, "attach: --cache: no device given");
        for (unsigned i = 0; i < count; i++) {
            char abs[PATH_MAX];
            const char *p = paths[i];
            if (strncmp(p, "testdev:", 8) != 0) {
                if (realpath(p, abs) == NULL)
                    tc_die(1, "attach: --cache %s: %m", p);
                p = abs;
            }
            if (strpbrk(p, ",\n"))
                tc_die(2, "attach: --cache %s: a device name with a comma or a newline cannot "
                       "be passed to the daemon", p);
            n += (size_t)snprintf(line + n, sizeof line - n, "%s%s", i ? "," : " ", p);
            if (n >= sizeof line)
                tc_die(2, "attach: --cache: too long");
        }
        free(paths);
        free(list);
    }
    char path[4096], err[1024];
    cli_control_path(sock, path, sizeof path);
    struct result r = { .done = false };
    if (ctl_request(path, line, on_line, &r, err, sizeof err) < 0) {
        /* The daemon's refusals say "attach refused: ..." themselves. */
        if (strncmp(err, "attach refused: ", 16) == 0)
            tc_die(1, "%s", err);
        tc_die(1, "attach: %s", err);
    }
    if (!r.done)
        tc_die(1, "attach: the daemon ended the operation without a result");
    printf("attach: cache attached; mode %s\n", r.mode);
    return 0;
}
