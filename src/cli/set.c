/*
 * tiercache set: change settings of a running daemon (the tunables serve
 * takes as options) without restarting it.
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "ctl/ctl.h"
#include "tiercache.h"
#include "util/log.h"

static const char set_help[] =
"Usage: tiercache set [--socket PATH] KEY=VALUE...\n"
"\n"
"Change settings of a running daemon; they hold until it stops (give the\n"
"serve options too, to keep them across a restart).  Every pair is checked\n"
"first: one bad key or value, or a key given twice, changes nothing, and\n"
"the error names it (and the valid range).  tiercache status shows the\n"
"values in volume.settings.\n"
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

/* An argument in a message: one of any length is cut to its first 40
 * characters, and its length said ("'kkk...' (70000 characters)"). */
static void name_arg(const char *s, size_t n, char *out, size_t len)
{
    if (n > 40)
        snprintf(out, len, "'%.40s...' (%zu characters)", s, n);
    else
        snprintf(out, len, "'%.*s'", (int)n, s);
}

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
        char name[96];
        const char *eq = strchr(argv[i], '=');
        size_t arglen = strlen(argv[i]);
        name_arg(argv[i], arglen, name, sizeof name);
        if (eq == NULL || eq == argv[i] || strpbrk(argv[i], " \t\n"))
            tc_die(2, "set: %s is not KEY=VALUE (try --help)", name);
        /* Every key is checked here, so that a key of any length is named
         * as what it is, not as a command line too long. */
        if (!tc_volume_setting_known(argv[i], (size_t)(eq - argv[i]))) {
            name_arg(argv[i], (size_t)(eq - argv[i]), name, sizeof name);
            tc_die(2, "set: %s: no such setting (choose from %s)", name,
                   tc_volume_setting_keys());
        }
        /* The same key twice: which one was meant is not for the daemon
         * to guess (the last one given was taken). */
        size_t keylen = (size_t)(eq - argv[i]);
        for (int j = optind; j < i; j++)
            if (strncmp(argv[j], argv[i], keylen + 1) == 0) {
                char first[96];
                name_arg(argv[j], strlen(argv[j]), first, sizeof first);
                tc_die(2, "set: '%.*s' given twice (%s and %s): give each key once",
                       (int)keylen, argv[i], first, name);
            }
        size_t n = strlen(line);
        if (1 + arglen >= sizeof line - strlen("set"))
            tc_die(2, "set: %s: the value is too long", name);
        if (n + 1 + arglen >= sizeof line)
            tc_die(2, "set: too many settings at once (give them in more than one set)");
        snprintf(line + n, sizeof line - n, " %s", argv[i]);
    }
    char path[4096], err[512];
    cli_control_path(sock, path, sizeof path);
    if (ctl_request(path, line, on_line, NULL, err, sizeof err) < 0)
        tc_die(1, "set: %s", err);
    return 0;
}
