/*
 * tiercache status: ask a daemon for its figures.  The daemon answers in
 * JSON only; this renders it as aligned text unless --json is given, so the
 * two forms never disagree.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "ctl/ctl.h"
#include "util/jsonread.h"
#include "util/log.h"
#include "util/parse.h"

static const char status_help[] =
"Usage: tiercache status [--socket PATH] [--json | --brief]\n"
"\n"
"Print the figures of a running daemon: mode, health, cache use, hits and\n"
"misses, promotions, dirty data, bytes read and written per device, errors,\n"
"and the NBD server's connections and requests, with units (sizes in\n"
"KiB/MiB/GiB, rates per second, durations), and the daemon's CPU time\n"
"(user and system, all threads, since it started: sampled around a load,\n"
"the CPU cost of each request) and the CRC-32C implementation it uses.\n"
"A daemon that does not answer within 10 s (stopped, or hung) is reported\n"
"so, exit status 1.\n"
"\n"
"  --socket PATH   the daemon's NBD socket (x.sock) or control socket (x.ctl);\n"
"                  default RUNDIR/tiercache.ctl\n"
"  --json          print the figures as one JSON object (keys in tiercache(8)),\n"
"                  raw numbers: bytes, seconds, ratios from 0 to 1\n"
"  --brief, -b     one line under a heading, as tiercache list prints it:\n"
"                  volume, pid, mode, health, cache used/size, dirty data,\n"
"                  read hit ratio, origin state\n"
"  --help, -h      this text\n";

static bool ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), t = strlen(tail);
    return n >= t && strcmp(s + n - t, tail) == 0;
}

/* Figures that are amounts of bytes, by their JSON key. */
static bool is_byte_key(const char *key)
{
    if (strstr(key, "memory") && !strstr(key, "wait") && !strstr(key, "limit"))
        return true;
    return ends_with(key, "bytes") || ends_with(key, "size") || strcmp(key, "used") == 0 ||
           strcmp(key, "max_io") == 0;
}

/* A duration as a person reads it: 0.042 s, 12.5 s, 3m 20s, 2h 05m, 3d 04h. */
static void print_duration(double s)
{
    unsigned long long t = (unsigned long long)(s + 0.5);
    if (s < 10)
        printf("%.3f s", s);
    else if (s < 60)
        printf("%.1f s", s);
    else if (t < 3600)
        printf("%llum %02llus", t / 60, t % 60);
    else if (t < 86400)
        printf("%lluh %02llum", t / 3600, t % 3600 / 60);
    else
        printf("%llud %02lluh", t / 86400, t % 86400 / 3600);
}

/* A cache holding blocks for under a tenth of its size (or none). */
static bool filling(const struct jv *cache)
{
    double cached = jv_num(jv_get(cache, "blocks_cached"), 0);
    double bs = jv_num(jv_get(cache, "block_size"), 0);
    double size = jv_num(jv_get(cache, "size"), 0);
    return bs <= 0 || cached * bs * 10 < size;
}

/* Units for the text form only: --json keeps the raw numbers. */
static void print_number(const struct jv *v, const struct jv *parent)
{
    const char *key = v->key ? v->key : "";
    char sz[32];
    bool integer = v->num == floor(v->num);
    bool setting = parent->key && strcmp(parent->key, "settings") == 0;
    if (setting && v->num == 0 && strcmp(key, "write_budget_rate") == 0) {
        printf("- (no budget)");
    } else if (setting && strcmp(key, "write_budget_rate") == 0) {
        printf("%s/s", tc_format_size((uint64_t)(v->num + 0.5), sz, sizeof sz));
    } else if (setting && v->num == 0 && strcmp(key, "sequential_cutoff") == 0) {
        printf("- (no cutoff: every stream is cached)");
    } else if (setting && v->num == 0 && strcmp(key, "readahead") == 0) {
        printf("- (off)");
    } else if (setting && integer && (strcmp(key, "sequential_cutoff") == 0 ||
                                      strcmp(key, "readahead") == 0 ||
                                      strcmp(key, "write_budget_burst") == 0 ||
                                      strcmp(key, "write_budget_minburst") == 0)) {
        /* Sizes in bytes whose keys do not say so. */
        if (v->num >= 1024)
            printf("%s (%s)", v->str, tc_format_size((uint64_t)v->num, sz, sizeof sz));
        else
            printf("%s B", v->str);
    } else if (strstr(key, "bytes_per_second")) {
        if (v->num == 0 && parent->key && strcmp(parent->key, "write_budget") == 0)
            printf("- (no budget)");
        else
            printf("%s/s", tc_format_size((uint64_t)(v->num + 0.5), sz, sizeof sz));
    } else if (strcmp(key, "memory_per_cached_block_bytes") == 0 && filling(parent)) {
        /* The policy's history and the chunk tables are sized for a full
         * cache: divided by the few blocks cached after a start, the figure
         * says nothing. */
        printf("- (the cache is under 10%% full; see memory per block)");
    } else if (strcmp(key, "max_io") == 0 && v->num == 0) {
        printf("- (no limit)");
    } else if (is_byte_key(key)) {
        if (integer && v->num >= 1024)
            printf("%s (%s)", v->str, tc_format_size((uint64_t)v->num, sz, sizeof sz));
        else if (v->num >= 1024)
            printf("%s", tc_format_size((uint64_t)(v->num + 0.5), sz, sizeof sz));
        else if (integer)
            printf("%s B", v->str);
        else
            printf("%.1f B", v->num);
    } else if (strstr(key, "ratio")) {
        printf("%.1f%%", v->num * 100);
    } else if (ends_with(key, "seconds")) {
        print_duration(v->num);
    } else if (ends_with(key, "unix_time")) {
        char when[64];
        time_t t = (time_t)v->num;
        struct tm tm;
        strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S %z", localtime_r(&t, &tm));
        printf("%s", when);
    } else if (integer && fabs(v->num) < 1e15) {
        printf("%.0f", v->num);
    } else {
        printf("%.2f", v->num);
    }
}

static void print_scalar(const struct jv *v, const struct jv *parent)
{
    switch (v->type) {
    case JV_NULL: printf("-"); break;
    case JV_BOOL: printf("%s", v->boolean ? "yes" : "no"); break;
    case JV_STRING: printf("%s", v->str[0] ? v->str : "\"\""); break;
    case JV_NUMBER: print_number(v, parent); break;
    default: break;
    }
}

static void print_line(const char *line, void *arg)
{
    (void)arg;
    puts(line);
}

static void render(const struct jv *obj, int indent)
{
    for (const struct jv *m = obj->child; m; m = m->next) {
        char label[96];
        snprintf(label, sizeof label, "%s:", m->key ? m->key : "-");
        for (char *p = label; *p; p++)
            if (*p == '_')
                *p = ' ';
        if (m->type == JV_OBJECT) {
            printf("%*s%s\n", indent, "", label);
            render(m, indent + 2);
        } else if (m->type == JV_ARRAY) {
            bool scalars = true;
            for (const struct jv *e = m->child; e; e = e->next)
                if (e->type == JV_OBJECT || e->type == JV_ARRAY)
                    scalars = false;
            if (scalars) {
                printf("%*s%-*s ", indent, "", 28 - indent, label);
                for (const struct jv *e = m->child; e; e = e->next) {
                    print_scalar(e, m);
                    if (e->next)
                        printf(", ");
                }
                printf("\n");
            } else {
                printf("%*s%s\n", indent, "", label);
                int i = 0;
                for (const struct jv *e = m->child; e; e = e->next, i++) {
                    printf("%*s[%d]\n", indent + 2, "", i);
                    if (e->type == JV_OBJECT)
                        render(e, indent + 4);
                }
            }
        } else {
            printf("%*s%-*s ", indent, "", 28 - indent, label);
            print_scalar(m, obj);
            printf("\n");
        }
    }
}

int cmd_status(int argc, char **argv)
{
    static const struct option opts[] = {
        { "socket", required_argument, NULL, 's' },
        { "json", no_argument, NULL, 'j' },
        { "brief", no_argument, NULL, 'b' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *sock = NULL;
    bool json = false, brief = false;
    int opt;
    tc_log_set_command("status");
    optind = 1;
    while ((opt = getopt_long(argc, argv, "hb", opts, NULL)) != -1) {
        switch (opt) {
        case 's': sock = optarg; break;
        case 'j': json = true; break;
        case 'b': brief = true; break;
        case 'h': cli_print(status_help); return 0;
        default: fprintf(stderr, "Try 'tiercache status --help'.\n"); return 2;
        }
    }
    if (optind < argc)
        tc_die(2, "unexpected argument '%s'", argv[optind]);
    if (json && brief)
        tc_die(2, "--json and --brief exclude each other");
    char path[4096], err[512];
    cli_control_path(sock, path, sizeof path);
    ctl_client_set_timeout(CLI_STATUS_TIMEOUT_MS);
    if (brief)
        return cli_brief_one(path);
    if (json) {
        /* As the daemon sent it, not re-serialised. */
        if (ctl_request(path, "status", print_line, NULL, err, sizeof err) < 0)
            tc_die(1, "%s", err);
        return 0;
    }
    struct jv *root = cli_status_fetch(path, err, sizeof err);
    if (root == NULL)
        tc_die(1, "%s", err);
    printf("tiercache %s, pid %.0f\n", jv_str(jv_get(root, "version"), "?"),
           jv_num(jv_get(root, "pid"), 0));
    if (jv_get(root, "cpu_user_seconds"))
        printf("cpu time: user %.3f s, system %.3f s\n",
               jv_num(jv_get(root, "cpu_user_seconds"), 0),
               jv_num(jv_get(root, "cpu_system_seconds"), 0));
    if (jv_get(root, "crc32c_implementation"))
        printf("crc32c: %s\n", jv_str(jv_get(root, "crc32c_implementation"), "?"));
    for (const struct jv *m = root->child; m; m = m->next) {
        if (m->type != JV_OBJECT)
            continue;
        printf("%s:\n", m->key);
        render(m, 2);
    }
    jv_free(root);
    return 0;
}
