/*
 * tiercache set: change settings of a running daemon (the tunables serve
 * takes as options) without restarting it.
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "ctl/ctl.h"
#include "util/log.h"

static const char set_help[] =
"Usage: tiercache set [--socket PATH] KEY=VALUE...\n"
"\n"
"Change settings of a running daemon; they hold until it stops (give the\n"
"serve options too, to keep them across a restart).  Every pair is checked\n"
"first: one bad key or value changes nothing, and the error names it and\n"
"the valid range.  tiercache status shows the values in volume.settings.\n"
"\n"
"Keys (values as the serve option of the same name takes them):\n"
"  policy=NAME             default, lru, fifo or s3fifo: what is cached stays\n"
"                          cached and earns its place again under the new\n"
"                          policy (its history starts empty)\n"
"  dirty-target=PCT        writeback: dirty data kept near PCT% of the cache,\n"
"                          0 to dirty-high\n"
"  dirty-high=PCT          writeback: full-speed writeback and throttled\n"
"                          client writes above PCT%, dirty-target to 100\n"
"  sequential-cutoff=SIZE  streams longer than SIZE are not cached (0: none)\n"
"  readahead=SIZE          read-ahead window: 0 (off) or 1M up to the window\n"
"                          the daemon started with\n"
"  write-budget=RATE[:BURST[:MINBURST]]\n"
"                          cache device write budget; off (or 0) for none\n"
"  origin-timeout=SECONDS  how long requests wait for a lost NBD origin\n"
"                          (0 to 86400)\n"
"\n"
"  --socket PATH   the daemon's NBD socket (x.sock) or control socket (x.ctl)\n"
"  --help, -h      this text\n";

static void on_line(const char *line, void *arg)
{
    (void)arg;
    printf("set: %s\n", line);
}

int cmd_set(int argc, char **argv)
{
    const char *sock;
    int rc = cli_socket_options("set", set_help, argc, argv, &sock);
    if (rc >= 0)
        return rc;
    if (optind == argc)
        tc_die(2, "set: give at least one KEY=VALUE (try --help)");
    char line[1024] = "set";
    for (int i = optind; i < argc; i++) {
        if (strchr(argv[i], '=') == NULL || argv[i][0] == '=' || strpbrk(argv[i], " \t\n"))
            tc_die(2, "set: '%s' is not KEY=VALUE (try --help)", argv[i]);
        size_t n = strlen(line);
        if (n + 1 + strlen(argv[i]) >= sizeof line)
            tc_die(2, "set: too many settings at once");
        snprintf(line + n, sizeof line - n, " %s", argv[i]);
    }
    char path[4096], err[512];
    cli_control_path(sock, path, sizeof path);
    if (ctl_request(path, line, on_line, NULL, err, sizeof err) < 0)
        tc_die(1, "set: %s", err);
    return 0;
}
