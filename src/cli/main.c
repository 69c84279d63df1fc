/* tiercache: one binary, one subcommand per file in src/cli/. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "util/log.h"

static const char main_help[] =
"Usage: tiercache COMMAND [OPTIONS]\n"
"\n"
"A storage-hierarchy cache: a slow origin cached on fast devices, exported\n"
"over NBD; and a daemon that brings swapped-out memory back when idle.\n"
"\n"
"Commands:\n"
"  format         prepare cache devices for an origin\n"
"  serve          export an origin over NBD, cached or not\n"
"  status         figures of a running daemon (--brief: one line)\n"
"  list           one line per daemon found in the run directory\n"
"  flush          write a running daemon's dirty data back to the origin\n"
"  detach         flush, then serve the origin without the cache\n"
"  attach         use the cache again after a detach (it comes back empty)\n"
"  mode           print or switch a running daemon's cache mode\n"
"  set            change a running daemon's settings (thresholds, cutoff...)\n"
"  check          audit a cache set offline\n"
"  dump           print a cache set's layout\n"
"  trace-info     summarise a request trace (serve --trace, or a published one)\n"
"  trace-convert  rewrite a published block trace as a tiercache trace\n"
"  replay         what caches of given sizes and policies would do with a trace\n"
"  swap-prefetch  bring swapped-out memory back into RAM while idle\n"
"  version        print the version\n"
"\n"
"Run 'tiercache COMMAND --help' for the options of one command, and\n"
"'man tiercache' (docs/tiercache.8) for the whole manual.\n";

struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
};

static const struct command commands[] = {
    { "format", cmd_format },
    { "serve", cmd_serve },
    { "status", cmd_status },
    { "list", cmd_list },
    { "flush", cmd_flush },
    { "detach", cmd_detach },
    { "attach", cmd_attach },
    { "mode", cmd_mode },
    { "set", cmd_set },
    { "check", cmd_check },
    { "dump", cmd_dump },
    { "trace-info", cmd_trace_info },
    { "trace-convert", cmd_trace_convert },
    { "replay", cmd_replay },
    { "swap-prefetch", cmd_swap_prefetch },
};

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        cli_print(main_help);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "version") == 0 || strcmp(argv[1], "--version") == 0) {
        printf("tiercache %s\n", TC_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].fn(argc - 1, argv + 1);
    }
    tc_die(2, "unknown command '%s' (try 'tiercache --help')", argv[1]);
}
