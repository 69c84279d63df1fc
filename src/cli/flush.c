/*
 * tiercache flush, detach and mode: long operations on a running daemon.
 * The daemon streams "progress {...}" lines and ends with "done {...}" or
 * an error; on a terminal the progress is shown in place, otherwise only
 * the final summary is printed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "ctl/ctl.h"
#include "tiercache.h"
#include "util/jsonread.h"
#include "util/log.h"
#include "util/parse.h"

static const char flush_help[] =
"Usage: tiercache flush [--socket PATH]\n"
"\n"
"Write every block of a running daemon's cache that is dirty when the flush\n"
"begins back to the origin and make it durable there, showing the bytes\n"
"left, the rate and the time left on a terminal.  The daemon keeps serving\n"
"meanwhile; what clients write while the flush runs may stay dirty (the\n"
"summary says how much), so a flush ends however busy they are.\n"
"Lost sectors (data lost with a failed cache or an origin connection, or\n"
"writes in doubt) are not dirty, but the origin lacks their newest version:\n"
"the summary says how much (they read EIO until written again).\n"
"\n"
"  --socket PATH   the daemon's NBD socket (x.sock) or control socket (x.ctl)\n"
"  --help, -h      this text\n"
"\n"
"Exit status: 0 the origin holds every write acknowledged before the flush\n"
"began; 1 some of it is not written back (with the reason and how much dirty\n"
"data is left), or the daemon could not be asked; 2 bad usage; 3 written\n"
"back, but some sectors are lost (acknowledged data a failed cache or a lost\n"
"origin connection took, or writes in doubt; how much is said): the origin\n"
"lacks their newest version, so it must not be used alone as current.\n";

static const char detach_help[] =
"Usage: tiercache detach [--socket PATH]\n"
"\n"
"Flush the cache (as tiercache flush), then stop using it: the daemon serves\n"
"the origin directly from then on, and the cache devices are left empty\n"
"(still claimed).  'tiercache attach' (or restarting the daemon with the\n"
"same --cache) attaches them again.  If the\n"
"dirty data cannot all be written back, the detach is abandoned: the cache\n"
"stays attached in its mode, and the exit status is 1 with the reason.\n"
"\n"
"  --socket PATH   the daemon's NBD socket (x.sock) or control socket (x.ctl)\n"
"  --help, -h      this text\n"
"\n"
"Exit status: 0 detached, the origin holds every acknowledged write; 1 not\n"
"detached (the reason is said), or the daemon could not be asked; 2 bad\n"
"usage; 3 detached, but some sectors are lost (acknowledged data a failed\n"
"cache or a lost origin connection took, or writes in doubt; how much is\n"
"said; they read EIO until written again): the origin lacks their newest\n"
"version.\n";

static const char mode_help[] =
"Usage: tiercache mode [--socket PATH] [MODE]\n"
"\n"
"Without MODE, print the daemon's current mode (with \"(cache detached)\"\n"
"after a detach, \"(cache abandoned)\" after the cache failed).  With MODE,\n"
"switch the daemon to MODE: writethrough, writeback, writearound or\n"
"passthrough.  New requests follow the new mode at once; leaving writeback,\n"
"the dirty data is then written back (with progress, as tiercache flush),\n"
"and the command returns when none is left.  If it cannot all be written\n"
"back, the switch is abandoned: the previous mode stays, and the exit\n"
"status is 1 with the reason and the dirty data left.  A cache that failed\n"
"and was abandoned (every cache device failed: the daemon serves the origin\n"
"alone, whatever the mode, until a restart) switches nothing: every MODE is\n"
"refused, exit status 1, saying so.\n"
"\n"
"  --socket PATH   the daemon's NBD socket (x.sock) or control socket (x.ctl)\n"
"  --help, -h      this text\n"
"\n"
"Exit status: 0 the mode printed or switched; 1 not switched (the reason is\n"
"said), or the daemon could not be asked; 2 bad usage (a MODE not among\n"
"those four, nothing asked of the daemon).\n";

struct view {
    bool tty;
    bool shown;
    double last_left, last_secs;
    char final[512];
    uint64_t lost;                  /* "done": acknowledged bytes the origin lacks */
    bool into_writeback;            /* tiercache mode writeback: nothing is written
                                     * back for it (what a crash left dirty stays) */
    bool flush;                     /* tiercache flush: what was dirty at its start */
};

/* flush and detach: done, but acknowledged data was lost with the cache.
 * Distinct from 1 (dirty data left) so that a script that flushes and then
 * uses the origin alone stops: the origin is not current. */
#define EXIT_LOST 3

static void on_line(const char *line, void *arg)
{
    struct view *v = arg;
    char err[128];
    if (strncmp(line, "progress ", 9) == 0) {
        if (!v->tty)
            return;
        struct jv *j = jv_parse(line + 9, err, sizeof err);
        if (j == NULL)
            return;
        double left = jv_num(jv_get(j, "left_bytes"), 0);
        double done = jv_num(jv_get(j, "done_bytes"), 0);
        double secs = jv_num(jv_get(j, "seconds"), 0);
        double rate = secs > 0 ? done / secs : 0;
        char l[32], r[32];
        tc_format_size((uint64_t)left, l, sizeof l);
        tc_format_size((uint64_t)rate, r, sizeof r);
        if (rate > 0)
            fprintf(stderr, "\r%s left, %s/s, about %.0f s to go      ", l, r, left / rate);
        else
            fprintf(stderr, "\r%s left      ", l);
        v->shown = true;
        jv_free(j);
        return;
    }
    if (strncmp(line, "done ", 5) == 0) {
        struct jv *j = jv_parse(line + 5, err, sizeof err);
        if (j) {
            char w[32];
            double secs = jv_num(jv_get(j, "seconds"), 0);
            double bytes = jv_num(jv_get(j, "written_bytes"), 0);
            int n;
            if (v->into_writeback && bytes == 0)
                n = snprintf(v->final, sizeof v->final, "now %s",
                             jv_str(jv_get(j, "mode"), "?"));
            else
                n = snprintf(v->final, sizeof v->final,
                             "%s written back in %.1f s (%s/s); mode %s",
                             tc_format_size((uint64_t)bytes, w, sizeof w), secs,
                             tc_format_size((uint64_t)(secs > 0 ? bytes / secs : 0), w + 16,
                                            16),
                             jv_str(jv_get(j, "mode"), "?"));
            /* A flush writes back what was dirty when it began: what
             * clients wrote while it ran may be dirty still. */
            double dirty = jv_num(jv_get(j, "dirty_bytes"), 0);
            if (v->flush && dirty > 0 && n > 0 && (size_t)n < sizeof v->final)
                n += snprintf(v->final + n, sizeof v->final - (size_t)n,
                              "; %s written since it began is dirty",
                              tc_format_size((uint64_t)dirty, w, sizeof w));
            /* Lost data is not dirty, so the drain succeeded; but the
             * origin alone is still not current, and that must be said. */
            double lost = jv_num(jv_get(j, "lost_bytes"), 0);
            v->lost = lost > 0 ? (uint64_t)lost : 0;
            if (lost > 0 && n > 0 && (size_t)n < sizeof v->final)
                snprintf(v->final + n, sizeof v->final - (size_t)n,
                         "; %s of lost sectors (acknowledged data a failed cache or a "
                         "lost origin connection took, or writes in doubt): the origin "
                         "lacks their newest version, and reads of them fail with EIO until "
                         "written again",
                         tc_format_size((uint64_t)lost, w, sizeof w));
            jv_free(j);
        }
    }
}

/* tiercache mode without MODE: the mode, from the status (as lvs -o
 * cache_mode prints it), on a line of its own for scripts. */
static int print_mode(const char *sock)
{
    char path[4096], err[512];
    cli_control_path(sock, path, sizeof path);
    struct jv *root = cli_status_fetch(path, err, sizeof err);
    if (root == NULL)
        tc_die(1, "mode: %s", err);
    const struct jv *det = jv_path(root, "volume.detached");
    const struct jv *ab = jv_path(root, "volume.cache.abandoned");
    printf("%s%s\n", jv_str(jv_path(root, "volume.mode"), "?"),
           det && det->boolean ? " (cache detached)" : ab && ab->boolean ? " (cache abandoned)"
                                                                      : "");
    jv_free(root);
    return 0;
}

static int run(const char *cmd, const char *help, int argc, char **argv, bool want_arg)
{
    const char *sock;
    int rc = cli_socket_options(cmd, help, argc, argv, &sock);
    if (rc >= 0)
        return rc;
    char line[256];
    bool into_writeback = false;
    if (want_arg && optind == argc)
        return print_mode(sock);
    if (want_arg) {
        if (optind + 1 != argc)
            tc_die(2, "%s: give at most one MODE, not '%s %s' (try --help)", cmd,
                   argv[optind], argv[optind + 1]);
        enum tc_mode m;
        if (tc_mode_parse(argv[optind], &m) < 0)
            tc_die(2, "%s: '%s' is not a mode: choose writethrough, writeback, writearound "
                   "or passthrough", cmd, argv[optind]);
        into_writeback = m == TC_MODE_WRITEBACK;
        snprintf(line, sizeof line, "%s %s", cmd, argv[optind]);
    } else {
        if (optind < argc)
            tc_die(2, "%s: unexpected argument '%s'", cmd, argv[optind]);
        snprintf(line, sizeof line, "%s", cmd);
    }
    char path[4096], err[512];
    cli_control_path(sock, path, sizeof path);
    struct view v = { .tty = isatty(2) };
    v.into_writeback = into_writeback;
    v.flush = strcmp(cmd, "flush") == 0;
    rc = ctl_request(path, line, on_line, &v, err, sizeof err);
    if (v.shown)
        fputc('\n', stderr);
    if (rc < 0)
        tc_die(1, "%s: %s", cmd, err);
    if (v.final[0] == '\0')
        tc_die(1, "%s: the daemon ended the operation without a result", cmd);
    printf("%s: %s\n", cmd, v.final);
    /* A mode change does not promise a current origin; flush and detach
     * do, and must not exit 0 when it is not. */
    if (v.lost && strcmp(cmd, "mode") != 0) {
        char l[32];
        fprintf(stderr, "tiercache: %s: %s of lost sectors (acknowledged data a failed cache "
                "or a lost origin connection took, or writes in doubt): the origin is not "
                "current (exit status %d)\n", cmd,
                tc_format_size(v.lost, l, sizeof l), EXIT_LOST);
        return EXIT_LOST;
    }
    return 0;
}

int cmd_flush(int argc, char **argv) { return run("flush", flush_help, argc, argv, false); }
int cmd_detach(int argc, char **argv) { return run("detach", detach_help, argc, argv, false); }
int cmd_mode(int argc, char **argv) { return run("mode", mode_help, argc, argv, true); }
