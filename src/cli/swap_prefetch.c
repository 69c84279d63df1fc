/*
 * tiercache swap-prefetch: bring swapped-out memory back into RAM while the
 * machine is idle (issue 6).  The engine is in src/swap/ (daemon.h has the
 * loop); this file parses options, checks the system, runs the engine as a
 * daemon (or one pass with --once), and renders the figures for --status.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/daemon.h"
#include "ctl/ctl.h"
#include "io/claim.h"
#include "io/reactor.h"
#include "swap/cgroup.h"
#include "swap/daemon.h"
#include "swap/madvise.h"
#include "util/json.h"
#include "util/jsonread.h"
#include "util/log.h"
#include "util/misc.h"
#include "util/parse.h"
#include "util/memcheck.h"

static const char swap_prefetch_help[] =
"Usage: tiercache swap-prefetch [OPTIONS]\n"
"       tiercache swap-prefetch --status [--json] [--control PATH]\n"
"\n"
"Bring swapped-out memory back into RAM while the machine is idle and memory\n"
"is free again, so that a process coming back to its data finds it in memory\n"
"instead of waiting for the disk.  Pages are read with process_madvise(2)\n"
"MADV_WILLNEED into the swap cache: they stay clean copies of what is in swap,\n"
"the process's first touch maps them (a minor fault instead of a major one),\n"
"and the kernel can drop them at no cost when memory is needed.\n"
"\n"
"Levels (those of the swap prefetch kernel patch's vm.swap_prefetch):\n"
"  0  off: do nothing (and say so)\n"
"  1  only while the machine is idle, and not on battery or in laptop mode\n"
"     (the default)\n"
"  2  only while the machine is idle, also on battery and in laptop mode\n"
"  3  regardless of idleness; the memory rules below still hold\n"
"\n"
"Prefetch happens only while all of these hold, and stops within one\n"
"interval when one of them stops holding:\n"
"  - free memory stays above the zones' high watermarks plus --headroom, and,\n"
"    for a process in a memory cgroup with a limit, the cgroup's usage stays\n"
"    below its limit minus --headroom: prefetch never makes the kernel reclaim,\n"
"    so it never evicts page cache or pushes other pages out;\n"
"  - nothing is being swapped out, and no one else is allocating memory at a\n"
"    rate that would use up the free room within 64 intervals;\n"
"  - tasks are not stalling on memory (/proc/pressure/memory under 10%);\n"
"  - levels 1 and 2: the CPU is idle (others use under 10% of it, runnable\n"
"    tasks wait under 10% of the time) and I/O is idle (/proc/pressure/io\n"
"    under 5%).\n"
"After a stop it restarts when the rules have held for two intervals.  Levels\n"
"1 and 2 run at SCHED_IDLE with the idle I/O class; level 3 at nice 19 with\n"
"the lowest best-effort I/O priority.\n"
"\n"
"What comes first: the processes that ran most recently, and in each the\n"
"pages swapped out most recently (by swap slot), in chunks of at most 2 MiB\n"
"per system call, at most --rate per second.\n"
"\n"
"Options:\n"
"  --level N            0, 1, 2 or 3 (default 1)\n"
"  --interval TIME      how often figures are sampled and decisions taken\n"
"                       (default 1s; examples: 500ms, 2s)\n"
"  --rate RATE          at most this much advice per second: a number of MiB/s,\n"
"                       or a rate with a unit like 64M/s (default 64)\n"
"  --headroom SIZE      memory kept free above the watermarks, and below each\n"
"                       cgroup's limit (default 64M)\n"
"  --cgroup PATH        only processes in this memory cgroup or below it: a\n"
"                       directory (/sys/fs/cgroup/memory/x) or a path (/x)\n"
"  --map                also map each prefetched page into its process's page\n"
"                       tables (one byte of it read with process_vm_readv(2), a\n"
"                       fault taken on the process's behalf), so that the\n"
"                       process's first touch takes no fault at all; pages stay\n"
"                       clean copies of what is in swap, but reclaim must unmap\n"
"                       them first and sees them as recently used.  Needs\n"
"                       ptrace attach access (root has it).  Mapped pages leave\n"
"                       the used/wasted figures (\"mapped\").\n"
"  --once               one pass: sample for one interval, decide, prefetch what\n"
"                       there is (or say why not), print the figures, exit\n"
"  --foreground, -f     stay in the foreground and log to stderr\n"
"  --control PATH       control socket (default RUNDIR/swap-prefetch.ctl)\n"
"  --log FILE           log to FILE (default: stderr in the foreground,\n"
"                       RUNDIR/swap-prefetch.log in the background); SIGHUP\n"
"                       or SIGUSR1 reopen it\n"
"  --pidfile PATH       write the daemon's process id here\n"
"  --verbose, -v        log every chunk and every decision that changes\n"
"  --status             print the figures of the running daemon and exit\n"
"  --json               with --status or --once: the figures as one JSON object\n"
"  --help, -h           this text\n"
"\n"
"Figures (--status):\n"
"  prefetched   pages advised that were in swap just before the advice\n"
"  read         of those, pages read from swap by the advice (the others were\n"
"               already in the swap cache)\n"
"  used         touched by their process while still in memory\n"
"  wasted       dropped from memory before their process touched them\n"
"  freed        freed or unmapped by their process untouched\n"
"  mapped       mapped into their process by --map: whether the process then\n"
"               touched them is not known (not in the hit ratio)\n"
"  pending      not touched yet, presumed still in memory\n"
"  hit ratio    used / (used + wasted + freed)\n"
"  stops        how often prefetch stopped or was held back, by reason:\n"
"               pressure (swap-out, low memory, allocation, memory stall),\n"
"               busy CPU, busy I/O, battery; per process and per cgroup too\n"
"How used and wasted are measured: every interval the daemon reads again the\n"
"pagemap entries of the pages it prefetched.  A page now present (or in\n"
"another swap slot) was touched: it counts as used if nothing was reclaimed\n"
"or swapped out anywhere since the prefetch (vmstat pgsteal_anon, pswpout);\n"
"otherwise as many of the touches as the process took major faults in that\n"
"interval count as wasted.  Untouched pages that the swap cache figure of their cgroup (or of\n"
"the system) shows cannot all still be in memory count as wasted, oldest\n"
"first.  Both are estimates with known bounds (docs/swap-prefetch.md).\n"
"\n"
"Needs Linux 5.15 or later, swap enabled, CAP_SYS_NICE to advise other\n"
"processes and ptrace access to them (root has both; CAP_SYS_ADMIN also shows\n"
"the swap slots used for the order).  RUNDIR is /run/tiercache for root, else\n"
"$XDG_RUNTIME_DIR/tiercache (see tiercache serve --help for its checks).\n"
"SIGTERM or SIGINT stop the daemon; exit 0.  SIGHUP or SIGUSR1 reopen --log.\n";

#define DEFAULT_INTERVAL_NS 1000000000ull
#define DEFAULT_RATE (64ull << 20)
#define DEFAULT_HEADROOM (64ull << 20)

/* ---- rendering the figures ---- */

static void size_str(const struct jv *v, char *buf, size_t len)
{
    if (v == NULL || v->type != JV_NUMBER)
        snprintf(buf, len, "-");
    else
        tc_format_size((uint64_t)v->num, buf, len);
}

static const char *sz(const struct jv *obj, const char *key, char *buf, size_t len)
{
    size_str(jv_get(obj, key), buf, len);
    return buf;
}

static double num(const struct jv *obj, const char *key)
{
    return jv_num(jv_get(obj, key), 0);
}

/* The text form: everything in the JSON, laid out for a terminal. */
static void render(const struct jv *root)
{
    const struct jv *sp = jv_get(root, "swap_prefetch");
    if (sp == NULL) {
        printf("(no swap prefetch figures)\n");
        return;
    }
    char a[32], b[32], c[32], d[32], e[32], f[32];
    printf("tiercache swap-prefetch %s, pid %.0f, level %.0f%s\n",
           jv_str(jv_get(root, "version"), "?"), jv_num(jv_get(root, "pid"), 0),
           num(sp, "level"), jv_get(sp, "once") && jv_get(sp, "once")->boolean ? ", one pass" : "");
    const char *state = jv_str(jv_get(sp, "state"), "?");
    const char *reason = jv_str(jv_get(sp, "reason"), "go");
    if (strcmp(reason, "go") == 0 || strcmp(state, "prefetching") == 0)
        printf("state:        %s\n", state);
    else
        printf("state:        %s: %s\n", state, jv_str(jv_get(sp, "reason_text"), reason));
    printf("settings:     interval %.0f ms, rate %s/s, headroom %s, cgroup %s\n",
           num(sp, "interval_ms"), sz(sp, "rate_bytes", a, sizeof a),
           sz(sp, "headroom_bytes", b, sizeof b), jv_str(jv_get(sp, "cgroup"), "(all)"));
    printf("prefetched:   %s in %.0f chunks (read from swap: %s)\n",
           sz(sp, "prefetched_bytes", a, sizeof a), num(sp, "chunks"),
           sz(sp, "read_bytes", b, sizeof b));
    const struct jv *hit = jv_get(sp, "hit_ratio");
    if (hit && hit->type == JV_NUMBER)
        printf("used:         %s (hit ratio %.1f%%)\n", sz(sp, "used_bytes", a, sizeof a),
               hit->num * 100);
    else
        printf("used:         %s\n", sz(sp, "used_bytes", a, sizeof a));
    printf("wasted:       %s\n", sz(sp, "wasted_bytes", a, sizeof a));
    printf("freed:        %s\n", sz(sp, "freed_bytes", a, sizeof a));
    if (jv_get(sp, "map") && jv_get(sp, "map")->boolean)
        printf("mapped:       %s\n", sz(sp, "mapped_bytes", a, sizeof a));
    printf("pending:      %s\n", sz(sp, "pending_bytes", a, sizeof a));
    const struct jv *st = jv_get(sp, "stops");
    if (st)
        printf("stops:        pressure %.0f (swap-out %.0f, low memory %.0f, allocation %.0f, "
               "memory stall %.0f), busy CPU %.0f, busy I/O %.0f, battery %.0f; "
               "cgroups full %.0f\n",
               num(st, "pressure"), num(st, "swap_out"), num(st, "low_memory"),
               num(st, "allocation"), num(st, "memory_stall"), num(st, "cpu"), num(st, "io"),
               num(st, "battery"), num(st, "cgroup_held"));
    const struct jv *ls = jv_get(sp, "last_stop");
    if (ls && ls->type == JV_OBJECT) {
        double ago = (num(sp, "now_ns") - num(ls, "at_ns")) / 1e9;
        printf("last stop:    %s (%s), %.1f s ago\n", jv_str(jv_get(ls, "reason"), "?"),
               jv_str(jv_get(ls, "scope"), "?"), ago);
    }
    const struct jv *sys = jv_get(sp, "system");
    if (sys)
        printf("system:       free %s (room %s), swap used %s, swap cache %s, CPU busy %.1f%%, "
               "stalls: CPU %.1f%% I/O %.1f%% memory %.1f%%\n",
               sz(sys, "free_bytes", a, sizeof a), sz(sys, "room_bytes", b, sizeof b),
               sz(sys, "swap_used_bytes", c, sizeof c), sz(sys, "swap_cached_bytes", d, sizeof d),
               num(sys, "cpu_busy_ratio") * 100, num(sys, "cpu_stall_ratio") * 100,
               num(sys, "io_stall_ratio") * 100, num(sys, "memory_stall_ratio") * 100);
    const struct jv *cgs = jv_get(sp, "cgroups");
    if (cgs && cgs->child) {
        printf("cgroups:\n");
        for (const struct jv *g = cgs->child; g; g = g->next)
            printf("  %-24s limit %s, usage %s, room %s, prefetched %s, held back %.0f (%s)\n",
                   jv_str(jv_get(g, "path"), "?"), sz(g, "limit_bytes", a, sizeof a),
                   sz(g, "usage_bytes", b, sizeof b), sz(g, "room_bytes", c, sizeof c),
                   sz(g, "prefetched_bytes", d, sizeof d), num(g, "held_back"),
                   jv_str(jv_get(g, "hold"), "go"));
    }
    const struct jv *ps = jv_get(sp, "processes");
    if (ps && ps->child) {
        printf("processes:\n  %7s %-15s %10s %10s %10s %10s %10s %10s\n", "PID", "NAME",
               "SWAPPED", "PREFETCHED", "USED", "WASTED", "FREED", "PENDING");
        for (const struct jv *p = ps->child; p; p = p->next)
            printf("  %7.0f %-15s %10s %10s %10s %10s %10s %10s\n", num(p, "pid"),
                   jv_str(jv_get(p, "name"), "?"), sz(p, "swapped_bytes", a, sizeof a),
                   sz(p, "prefetched_bytes", b, sizeof b), sz(p, "used_bytes", c, sizeof c),
                   sz(p, "wasted_bytes", d, sizeof d), sz(p, "freed_bytes", e, sizeof e),
                   sz(p, "pending_bytes", f, sizeof f));
    }
}

static void print_figures(const char *text, bool json, const char *where)
{
    if (json) {
        fputs(text, stdout);
        if (text[0] && text[strlen(text) - 1] != '\n')
            fputc('\n', stdout);
        return;
    }
    char err[256];
    struct jv *root = jv_parse(text, err, sizeof err);
    if (root == NULL)
        tc_die(1, "%s: unreadable figures: %s", where, err);
    render(root);
    jv_free(root);
}

static void status_json(const struct sp_daemon *d, struct tc_json *j)
{
    json_begin_object(j, NULL);
    json_string(j, "version", TC_VERSION);
    json_uint(j, "pid", (uint64_t)getpid());
    json_begin_object(j, "swap_prefetch");
    sp_daemon_status_json(d, j);
    json_end_object(j);
    json_end_object(j);
}

/* ---- --status: ask the daemon ---- */

static int query_status(const char *control, bool json)
{
    char err[512];
    char *text = ctl_request_text(control, "status", err, sizeof err);
    if (text == NULL)
        tc_die(1, "%s (is 'tiercache swap-prefetch' running? --control names its socket)", err);
    if (text[0] == '\0')
        tc_die(1, "%s: the daemon sent no figures", control);
    print_figures(text, json, control);
    free(text);
    return 0;
}

/* ---- the daemon ---- */

/* The daemon process: the engine, its control socket, and the signalfd
 * that ends the loop on SIGTERM or SIGINT (and reopens the log on SIGHUP or
 * SIGUSR1), all on one reactor. */
struct sp_main {
    struct tc_reactor reactor;
    struct sp_daemon d;
    struct ctl_server ctl;
    bool have_ctl;
    struct cli_signals sig;
    bool stopping;
};

static void ctl_status(struct ctl_conn *c, const char *args, void *arg)
{
    struct sp_main *m = arg;
    (void)args;
    struct tc_json j;
    json_init(&j, false);
    status_json(&m->d, &j);
    ctl_write(c, j.buf, j.len);
    ctl_write(c, "\n", 1);
    json_free(&j);
    ctl_end(c);
}

static void shutdown_loop(struct sp_main *m)
{
    if (m->stopping)
        return;
    m->stopping = true;
    sp_daemon_stop(&m->d);
    if (m->have_ctl)
        ctl_server_stop(&m->ctl);
    cli_signals_cancel(&m->sig);
    reactor_stop(&m->reactor);
}

/* SIGTERM or SIGINT. */
static void signal_stop(struct cli_signals *sig, const char *name)
{
    struct sp_main *m = container_of(sig, struct sp_main, sig);
    tc_info("%s: stopping", name);
    shutdown_loop(m);
}

static void once_done(struct sp_daemon *d)
{
    struct sp_main *m = container_of(d, struct sp_main, d);
    shutdown_loop(m);
}

static void log_summary(const struct sp_daemon *d)
{
    struct sp_outcome o;
    uint64_t rd;
    sp_daemon_totals(d, &o, &rd);
    char a[32], b[32], c[32], e[32], f[32];
    char g[32];
    tc_info("prefetched %s (read %s): used %s, wasted %s, mapped %s, pending %s",
            tc_format_size(o.prefetched * 4096, a, sizeof a),
            tc_format_size(rd * 4096, b, sizeof b), tc_format_size(o.used * 4096, c, sizeof c),
            tc_format_size(o.wasted * 4096, e, sizeof e),
            tc_format_size(o.mapped * 4096, g, sizeof g),
            tc_format_size(o.pending * 4096, f, sizeof f));
}

enum {
    OPT_LEVEL = 256, OPT_INTERVAL, OPT_RATE, OPT_HEADROOM, OPT_CGROUP, OPT_ONCE, OPT_CONTROL,
    OPT_LOG, OPT_PIDFILE, OPT_STATUS, OPT_JSON, OPT_MAP,
};

static const struct option sp_opts[] = {
    { "level", required_argument, NULL, OPT_LEVEL },
    { "interval", required_argument, NULL, OPT_INTERVAL },
    { "rate", required_argument, NULL, OPT_RATE },
    { "headroom", required_argument, NULL, OPT_HEADROOM },
    { "cgroup", required_argument, NULL, OPT_CGROUP },
    { "once", no_argument, NULL, OPT_ONCE },
    { "map", no_argument, NULL, OPT_MAP },
    { "foreground", no_argument, NULL, 'f' },
    { "control", required_argument, NULL, OPT_CONTROL },
    { "log", required_argument, NULL, OPT_LOG },
    { "pidfile", required_argument, NULL, OPT_PIDFILE },
    { "status", no_argument, NULL, OPT_STATUS },
    { "json", no_argument, NULL, OPT_JSON },
    { "verbose", no_argument, NULL, 'v' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
};

/* --rate: a plain number is MiB/s; anything else is a rate (64M, 1G/s). */
static uint64_t parse_rate(const char *s)
{
    char err[256];
    uint64_t v;
    bool plain = s[0] != '\0';
    for (const char *p = s; *p; p++)
        if (!((*p >= '0' && *p <= '9') || *p == '.'))
            plain = false;
    if (plain) {
        char *end;
        double mib = strtod(s, &end);
        if (*end || !(mib > 0) || mib > 1e9)
            tc_die(2, "--rate: '%s' is not a rate (examples: 64, 64M/s, 1G/s)", s);
        v = (uint64_t)(mib * 1048576.0);
    } else if (tc_parse_rate("--rate", s, &v, err, sizeof err) < 0) {
        tc_die(2, "%s", err);
    }
    if (v < 4096)
        tc_die(2, "--rate: '%s' is below one page (4 KiB) per second", s);
    return v;
}

int cmd_swap_prefetch(int argc, char **argv)
{
    struct sp_config cfg = {
        .level = 1,
        .interval_ns = DEFAULT_INTERVAL_NS,
        .rate = DEFAULT_RATE,
        .headroom = DEFAULT_HEADROOM,
    };
    const char *control = NULL, *log_path = NULL, *pidfile = NULL, *cgroup_arg = NULL;
    bool foreground = false, status = false, json = false;
    char err[1024];
    uint64_t v;
    int opt;

    optind = 1;
    while ((opt = getopt_long(argc, argv, "fvh", sp_opts, NULL)) != -1) {
        switch (opt) {
        case OPT_LEVEL:
            if (tc_parse_uint("--level", optarg, 0, 3, &v, err, sizeof err))
                tc_die(2, "%s", err);
            cfg.level = (int)v;
            break;
        case OPT_INTERVAL:
            if (tc_parse_duration("--interval", optarg, &v, err, sizeof err))
                tc_die(2, "%s", err);
            if (v < 50000000ull || v > 3600000000000ull)
                tc_die(2, "--interval: '%s' is out of range (50ms to 1h)", optarg);
            cfg.interval_ns = v;
            break;
        case OPT_RATE: cfg.rate = parse_rate(optarg); break;
        case OPT_HEADROOM:
            if (tc_parse_size("--headroom", optarg, &v, err, sizeof err))
                tc_die(2, "%s", err);
            cfg.headroom = v;
            break;
        case OPT_CGROUP: cgroup_arg = optarg; break;
        case OPT_ONCE: cfg.once = true; break;
        case OPT_MAP: cfg.map = true; break;
        case 'f': foreground = true; break;
        case OPT_CONTROL: control = optarg; break;
        case OPT_LOG: log_path = optarg; break;
        case OPT_PIDFILE: pidfile = optarg; break;
        case OPT_STATUS: status = true; break;
        case OPT_JSON: json = true; break;
        case 'v': tc_log_set_level(TC_LOG_DEBUG); break;
        case 'h': cli_print(swap_prefetch_help); return 0;
        default:
            fprintf(stderr, "Try 'tiercache swap-prefetch --help'.\n");
            return 2;
        }
    }
    if (optind < argc)
        tc_die(2, "swap-prefetch: unexpected argument '%s' (try --help)", argv[optind]);
    if (json && !status && !cfg.once)
        tc_die(2, "swap-prefetch: --json goes with --status or --once");

    char ctlbuf[4096];
    if (control == NULL) {
        snprintf(ctlbuf, sizeof ctlbuf, "%s/swap-prefetch.ctl", cli_run_dir());
        control = ctlbuf;
    }
    if (status)
        return query_status(control, json);

    if (cfg.level == 0) {
        printf("swap-prefetch: level 0: swap prefetch is off; nothing to do\n");
        return 0;
    }

    /* What the system must offer, each with what to do about it. */
    if (!sp_check_swap(err, sizeof err) || !sp_check_caps(err, sizeof err) ||
        !sp_check_kernel(err, sizeof err))
        tc_die(1, "swap-prefetch: %s", err);

    char cgpath[1024];
    if (cgroup_arg) {
        struct sp_cg_fs fs;
        sp_cg_detect(&fs);
        if (!sp_cg_resolve(&fs, cgroup_arg, cgpath, sizeof cgpath, err, sizeof err))
            tc_die(2, "%s", err);
        cfg.cgroup = cgpath;
    }

    bool daemon = !cfg.once && !foreground;
    if ((!cfg.once && !cli_check_parent(control, "--control", err, sizeof err)) ||
        (pidfile && !cli_check_parent(pidfile, "--pidfile", err, sizeof err)))
        tc_die(1, "%s", err);
    if ((log_path && claim_check_output(log_path, "--log", "append its log to it", NULL, NULL,
                                        err, sizeof err) < 0) ||
        (pidfile && claim_check_output(pidfile, "--pidfile", "replace its contents with its "
                                       "process id, and remove it at exit", NULL, NULL, err,
                                       sizeof err) < 0))
        tc_die(1, "%s", err);
    cli_open_log(log_path, daemon, "swap-prefetch.log", err, sizeof err);

    /* One descriptor per process being prefetched: allow as many as the
     * hard limit. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }

    int ready_fd = daemon ? cli_daemonize() : -1;

    static struct sp_main m;
    memset(&m, 0, sizeof m);
    cli_signals_init(&m.sig);
    if (reactor_init(&m.reactor, 64) < 0)
        tc_die(1, "io_uring: %s (the kernel must support io_uring)", strerror(errno));
    if (!sp_daemon_init(&m.d, &m.reactor, &cfg, err, sizeof err))
        tc_die(1, "swap-prefetch: %s", err);
    m.d.on_done = once_done;
    if (!cfg.once) {
        if (ctl_server_start(&m.ctl, &m.reactor, control, err, sizeof err) < 0)
            tc_die(1, "%s", err);
        m.have_ctl = true;
        ctl_register(&m.ctl, "status", ctl_status, &m);
    }
    cli_signals_arm(&m.sig, &m.reactor, signal_stop);

    if (!sp_set_priority(cfg.level, err, sizeof err))
        tc_warn("could not lower this process's priority: %s", err);
    if (!m.d.offsets_visible)
        tc_info("without CAP_SYS_ADMIN pagemap hides swap offsets: pages are prefetched in "
                "address order");

    if (pidfile && !cli_write_pidfile(pidfile, err, sizeof err)) {
        if (m.have_ctl)
            ctl_server_close(&m.ctl);
        tc_die(1, "%s", err);
    }
    char rate[32], head[32];
    tc_info("swap prefetch level %d: interval %llu ms, rate %s/s, headroom %s%s%s%s%s", cfg.level,
            (unsigned long long)(cfg.interval_ns / 1000000), tc_format_size(cfg.rate, rate, sizeof rate),
            tc_format_size(cfg.headroom, head, sizeof head), cfg.cgroup ? ", cgroup " : "",
            cfg.cgroup ? cfg.cgroup : "", cfg.once ? ", one pass" : "",
            cfg.map ? ", mapping prefetched pages" : "");
    if (m.have_ctl)
        tc_info("control socket %s", control);
    sp_daemon_start(&m.d);
    cli_daemon_ready(ready_fd);

    reactor_run(&m.reactor);

    log_summary(&m.d);
    if (cfg.once) {
        if (m.d.done && m.d.once_reason != SP_GO)
            printf("not prefetching: %s\n", sp_reason_text(m.d.once_reason));
        struct tc_json j;
        json_init(&j, false);
        status_json(&m.d, &j);
        print_figures(j.buf, json, "--once");
        json_free(&j);
        fflush(stdout);
    }
    if (m.have_ctl)
        ctl_server_close(&m.ctl);
    sp_daemon_free(&m.d);
    reactor_fini(&m.reactor);
    cli_signals_close(&m.sig);
    tc_info("stopped");
    return 0;
}
