/*
 * One line per volume, for people who run many of them: `tiercache status
 * --brief` (one daemon) and `tiercache list` (every daemon whose control
 * socket is in the run directory).  Like `lvs` or `casadm -L`: a heading,
 * then columns without spaces inside a field, so `awk '{print $3}'` works.
 * The figures come from the same status JSON as `tiercache status`.
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "ctl/ctl.h"
#include "util/jsonread.h"
#include "util/log.h"
#include "util/parse.h"

static const char list_help[] =
"Usage: tiercache list [--dir DIR]\n"
"\n"
"Find every daemon whose control socket (*.ctl) is in the run directory\n"
"(RUNDIR: /run/tiercache for root) and print one line per volume, as\n"
"tiercache status --brief does for one daemon.  A socket no daemon answers\n"
"on (left by a daemon that was killed), or whose daemon does not answer\n"
"within 10 s (stopped, or hung), is listed as unreachable.  Daemons\n"
"started with --control or --socket elsewhere are found with --dir.\n"
"\n"
"  --dir DIR       look in DIR instead of the run directory\n"
"  --help, -h      this text\n"
"\n"
"Exit status 0, also when there is no daemon; 1 if DIR cannot be read.\n";

static const char heading[] =
    "VOLUME           PID      MODE         HEALTH    USED/SIZE            DIRTY      "
    "READ-HITS  ORIGIN\n";

/* A size without the space, so that it stays one column: "2.5MiB". */
static const char *size_field(double bytes, char *buf, size_t len)
{
    char tmp[32];
    tc_format_size(bytes > 0 ? (uint64_t)bytes : 0, tmp, sizeof tmp);
    char *sp = strchr(tmp, ' ');
    if (sp)
        memmove(sp, sp + 1, strlen(sp));
    snprintf(buf, len, "%s", tmp);
    return buf;
}

static void brief_heading(void)
{
    fputs(heading, stdout);
}

static void brief_line(const char *name, const struct jv *root)
{
    const struct jv *vol = jv_get(root, "volume");
    const struct jv *cache = jv_get(vol, "cache");
    bool detached = jv_get(vol, "detached") && jv_get(vol, "detached")->boolean;
    char pid[24], used[64] = "-", dirty[32] = "-", hits[16] = "-";
    snprintf(pid, sizeof pid, "%.0f", jv_num(jv_get(root, "pid"), 0));
    if (cache && !detached) {
        char u[24], s[24];
        snprintf(used, sizeof used, "%s/%s", size_field(jv_num(jv_get(cache, "used"), 0), u, sizeof u),
                 size_field(jv_num(jv_get(cache, "size"), 0), s, sizeof s));
        size_field(jv_num(jv_get(cache, "dirty_bytes"), 0), dirty, sizeof dirty);
        /* No reads yet: no ratio, rather than a ratio of 0 %. */
        double h = jv_num(jv_get(cache, "read_hits"), 0);
        double m = jv_num(jv_get(cache, "read_misses"), 0);
        if (h + m > 0)
            snprintf(hits, sizeof hits, "%.1f%%", 100 * jv_num(jv_get(cache, "read_hit_ratio"), 0));
    }
    /* The first word of the health ("degraded: cache device ... failed"):
     * the whole sentence is in tiercache status. */
    char health[32];
    snprintf(health, sizeof health, "%s", jv_str(jv_get(vol, "health"), "?"));
    health[strcspn(health, ": ")] = '\0';
    if (detached)
        snprintf(health, sizeof health, "detached");
    else if (cache == NULL)
        snprintf(health, sizeof health, "no-cache");
    printf("%-16s %-8s %-12s %-9s %-20s %-10s %-10s %s\n", name, pid,
           jv_str(jv_get(vol, "mode"), "?"), health, used, dirty, hits,
           jv_str(jv_path(vol, "origin.state"), "?"));
}

/* The volume's name in the first column: the control socket's file name
 * without ".ctl" (vol1 for /run/tiercache/vol1.ctl). */
static void volume_name(const char *ctl_path, char *out, size_t len)
{
    const char *base = strrchr(ctl_path, '/');
    base = base ? base + 1 : ctl_path;
    size_t n = strlen(base);
    if (n > 4 && strcmp(base + n - 4, ".ctl") == 0)
        n -= 4;
    snprintf(out, len, "%.*s", (int)n, base);
}

struct jv *cli_status_fetch(const char *ctl_path, char *err, size_t errlen)
{
    char *text = ctl_request_text(ctl_path, "status", err, errlen);
    if (text == NULL)
        return NULL;
    if (text[0] == '\0') {
        free(text);
        snprintf(err, errlen, "%s: the daemon sent no status", ctl_path);
        return NULL;
    }
    char perr[256];
    struct jv *root = jv_parse(text, perr, sizeof perr);
    if (root == NULL)
        snprintf(err, errlen, "%s: unreadable status: %s", ctl_path, perr);
    free(text);
    return root;
}

int cli_brief_one(const char *ctl_path)
{
    char err[512], name[256];
    struct jv *root = cli_status_fetch(ctl_path, err, sizeof err);
    if (root == NULL)
        tc_die(1, "%s", err);
    volume_name(ctl_path, name, sizeof name);
    brief_heading();
    brief_line(name, root);
    jv_free(root);
    return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

int cmd_list(int argc, char **argv)
{
    static const struct option opts[] = {
        { "dir", required_argument, NULL, 'd' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *dir = NULL;
    int opt;
    tc_log_set_command("list");
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (opt) {
        case 'd': dir = optarg; break;
        case 'h': cli_print(list_help); return 0;
        default: fprintf(stderr, "Try 'tiercache list --help'.\n"); return 2;
        }
    }
    if (optind < argc)
        tc_die(2, "unexpected argument '%s'", argv[optind]);
    if (dir == NULL)
        dir = cli_run_dir();
    ctl_client_set_timeout(CLI_STATUS_TIMEOUT_MS);
    struct dirent **ents;
    int n = scandir(dir, &ents, NULL, by_name);
    if (n < 0) {
        /* No run directory: no daemon was ever started here. */
        if (errno == ENOENT && strcmp(dir, cli_run_dir()) == 0) {
            brief_heading();
            return 0;
        }
        tc_die(1, "cannot read the directory %s: %s", dir, strerror(errno));
    }
    brief_heading();
    for (int i = 0; i < n; i++) {
        const char *f = ents[i]->d_name;
        size_t len = strlen(f);
        char path[4096], err[512], name[256];
        snprintf(path, sizeof path, "%s/%s", dir, f);
        struct stat st;
        if (len > 4 && strcmp(f + len - 4, ".ctl") == 0 && stat(path, &st) == 0 &&
            S_ISSOCK(st.st_mode)) {
            volume_name(path, name, sizeof name);
            struct jv *root = cli_status_fetch(path, err, sizeof err);
            if (root) {
                brief_line(name, root);
                jv_free(root);
            } else {
                printf("%-16s %-8s unreachable (%s)\n", name, "-", err);
            }
        }
        free(ents[i]);
    }
    free(ents);
    return 0;
}
