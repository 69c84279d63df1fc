/*
 * sp_tester: the swap prefetch benchmark, after the one that came with the
 * swap prefetch kernel patch (2005-2007).
 *
 *   total = min(RAM + swap/2, 1.5 x RAM)
 *   allocate and touch a first buffer of total/2
 *   allocate, touch and free a second buffer of total/2; this pushes most
 *   of the first buffer out to swap
 *   sleep (600 s in the original)
 *   time a reread of the first buffer
 *
 * RAM is the limit of a memory cgroup when one is given (--limit creates
 * one and removes it at exit, --cgroup joins an existing one), so that the
 * benchmark needs neither a small machine nor a reboot.  --no-push skips the
 * second buffer: the reread then measures the floor, memory that was never
 * swapped out.
 *
 * The buffers are anonymous mmap()s (what malloc() returns for sizes like
 * these) with transparent huge pages disabled, so that pages move to and
 * from swap one 4 KiB page at a time on every configuration.  Residency is
 * measured with mincore(), which also counts pages that sit in the swap
 * cache: that is where swap prefetch puts them.
 *
 * Every figure is printed on a line of its own, and the last line is one
 * "result" line of key=value pairs for scripts.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char usage[] =
"Usage: sp_tester [OPTIONS]\n"
"\n"
"The swap prefetch benchmark: fill a first buffer, push it out to swap with a\n"
"second one, sleep, then time a reread of the first buffer.\n"
"\n"
"  --limit SIZE     run in a new memory cgroup with this limit, taken as RAM\n"
"                   (created under the root memory cgroup, removed at exit)\n"
"  --cgroup DIR     run in this existing memory cgroup (v1 or v2 directory);\n"
"                   its limit is taken as RAM\n"
"  --ram SIZE       RAM for the sizing formula (default: the cgroup's limit,\n"
"                   else MemTotal)\n"
"  --swap SIZE      swap for the sizing formula (default: SwapFree)\n"
"  --total SIZE     skip the formula: total/2 per buffer\n"
"  --sleep SECONDS  between the push and the reread (default 600); SIGUSR1\n"
"                   ends the sleep early (scripts use it to start the reread\n"
"                   when they are ready); SIGUSR2 prints the residency of the\n"
"                   first buffer without ending it\n"
"  --no-push        skip the second buffer: measures the floor\n"
"  --linger SECONDS stay alive this long after the reread, buffer mapped, so\n"
"                   that an observer can look at it (default 0)\n"
"  --reread MODE    bytes: read every byte of the buffer in order (default,\n"
"                   like an application going over its data); pages: one\n"
"                   word per page, in order (only the cost of bringing pages\n"
"                   back); random: one word per page, every page once in a\n"
"                   scattered order (defeats the kernel's swap readahead)\n"
"  --help           this text\n"
"\n"
"SIZE takes K, M, G suffixes (binary).  The last line printed is\n"
"\"result key=value ...\" with reread_s, majflt, minflt, swapped_mib,\n"
"resident_after_push_mib and resident_before_reread_mib.\n";

#define PAGE 4096ul

static char cgroup_made[4096];      /* a cgroup this program created */
static volatile sig_atomic_t wake;  /* SIGUSR1 arrived: stop sleeping */
static volatile sig_atomic_t look;  /* SIGUSR2 arrived: print residency */
static char cgroup_parent_procs[4096];

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void cleanup_cgroup(void);

static void die(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "sp_tester: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    cleanup_cgroup();
    exit(1);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t parse_size(const char *what, const char *s)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    double mult = 1;
    switch (*end) {
    case 'k': case 'K': mult = 1024.0; end++; break;
    case 'm': case 'M': mult = 1048576.0; end++; break;
    case 'g': case 'G': mult = 1073741824.0; end++; break;
    case 't': case 'T': mult = 1099511627776.0; end++; break;
    default: break;
    }
    if (*end == 'i' && end[1] == 'B')
        end += 2;
    else if (*end == 'B')
        end++;
    if (errno || end == s || *end || v < 0)
        die("%s: '%s' is not a size (examples: 4096, 512M, 1G)", what, s);
    return (uint64_t)(v * mult);
}

static bool write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "we");
    if (f == NULL)
        return false;
    bool ok = fputs(text, f) >= 0;
    return (fclose(f) == 0) && ok;
}

static bool read_u64_file(const char *path, uint64_t *out)
{
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return false;
    char buf[64];
    bool ok = fgets(buf, sizeof buf, f) != NULL;
    fclose(f);
    if (!ok)
        return false;
    if (strncmp(buf, "max", 3) == 0) {
        *out = UINT64_MAX;
        return true;
    }
    *out = strtoull(buf, NULL, 10);
    return true;
}

/* A field of /proc/meminfo or /proc/self/status, in bytes ("kB" lines). */
static uint64_t proc_kb_field(const char *file, const char *key)
{
    FILE *f = fopen(file, "re");
    if (f == NULL)
        return 0;
    char line[256];
    size_t n = strlen(key);
    uint64_t v = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, n) == 0 && line[n] == ':') {
            v = strtoull(line + n + 1, NULL, 10) * 1024;
            break;
        }
    }
    fclose(f);
    return v;
}

/* The memory cgroup limit of a directory (v1 or v2), UINT64_MAX if none. */
static uint64_t cgroup_limit(const char *dir)
{
    char path[4200];
    uint64_t v;
    snprintf(path, sizeof path, "%s/memory.limit_in_bytes", dir);
    if (read_u64_file(path, &v))
        return v >= (1ull << 62) ? UINT64_MAX : v;
    snprintf(path, sizeof path, "%s/memory.max", dir);
    if (read_u64_file(path, &v))
        return v;
    die("%s is not a memory cgroup (no memory.limit_in_bytes or memory.max)", dir);
}

static void join_cgroup(const char *dir)
{
    char path[4200], pid[32];
    snprintf(path, sizeof path, "%s/cgroup.procs", dir);
    snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (!write_file(path, pid))
        die("cannot join cgroup %s: %s", dir, strerror(errno));
}

/* The root of the memory controller: v1's memory hierarchy if mounted,
 * else a cgroup2 mount whose root delegates the memory controller. */
static bool memory_root(char *out, size_t len, bool *v1)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (f == NULL)
        return false;
    char line[4096];
    bool found = false;
    char v2[2048] = "";
    while (fgets(line, sizeof line, f)) {
        char mnt[2048], *sep = strstr(line, " - ");
        if (sep == NULL || sscanf(line, "%*s %*s %*s %*s %2047s", mnt) != 1)
            continue;
        char fstype[64], opts[1024];
        if (sscanf(sep + 3, "%63s %*s %1023s", fstype, opts) != 2)
            continue;
        if (strcmp(fstype, "cgroup") == 0) {
            for (char *o = strtok(opts, ","); o; o = strtok(NULL, ","))
                if (strcmp(o, "memory") == 0) {
                    snprintf(out, len, "%s", mnt);
                    *v1 = true;
                    found = true;
                }
        } else if (strcmp(fstype, "cgroup2") == 0 && v2[0] == '\0') {
            snprintf(v2, sizeof v2, "%s", mnt);
        }
        if (found)
            break;
    }
    fclose(f);
    if (found)
        return true;
    if (v2[0]) {
        char path[4200], ctl[512] = "";
        snprintf(path, sizeof path, "%s/cgroup.subtree_control", v2);
        FILE *s = fopen(path, "re");
        if (s) {
            if (fgets(ctl, sizeof ctl, s) == NULL)
                ctl[0] = '\0';
            fclose(s);
        }
        if (strstr(ctl, "memory")) {
            snprintf(out, len, "%s", v2);
            *v1 = false;
            return true;
        }
    }
    return false;
}

static void cleanup_cgroup(void)
{
    if (cgroup_made[0] == '\0')
        return;
    char pid[32];
    snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    write_file(cgroup_parent_procs, pid);
    rmdir(cgroup_made);
    cgroup_made[0] = '\0';
}

static void on_signal(int sig)
{
    cleanup_cgroup();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void on_wake(int sig)
{
    if (sig == SIGUSR1)
        wake = 1;
    else
        look = 1;
}

static uint64_t make_cgroup(uint64_t limit)
{
    char root[2048];
    bool v1 = false;
    if (!memory_root(root, sizeof root, &v1))
        die("no memory cgroup controller is mounted (v1 memory or cgroup2 with memory)");
    snprintf(cgroup_made, sizeof cgroup_made, "%s/sp_tester.%d", root, (int)getpid());
    snprintf(cgroup_parent_procs, sizeof cgroup_parent_procs, "%s/cgroup.procs", root);
    if (mkdir(cgroup_made, 0755) < 0) {
        int e = errno;
        cgroup_made[0] = '\0';
        die("cannot create a memory cgroup under %s: %s", root, strerror(e));
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);
    char path[4200], val[32];
    snprintf(val, sizeof val, "%llu\n", (unsigned long long)limit);
    snprintf(path, sizeof path, "%s/%s", cgroup_made, v1 ? "memory.limit_in_bytes" : "memory.max");
    if (!write_file(path, val))
        die("cannot set %s: %s", path, strerror(errno));
    join_cgroup(cgroup_made);
    printf("cgroup: %s (limit %.1f MiB)\n", cgroup_made, (double)limit / 1048576);
    return limit;
}

static char *map_buffer(size_t size)
{
    char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        die("mmap %zu bytes: %s", size, strerror(errno));
    madvise(p, size, MADV_NOHUGEPAGE);
    return p;
}

/* Write every page with data that is not all zeroes (zero pages could be
 * deduplicated or compressed away). */
static void touch(char *p, size_t size, uint64_t seed)
{
    for (size_t off = 0; off < size; off += PAGE) {
        uint64_t *w = (uint64_t *)(p + off);
        for (size_t i = 0; i < PAGE / 8; i += 64)
            w[i] = seed ^ (off + i);
    }
}

static uint64_t resident_bytes(char *p, size_t size)
{
    size_t pages = size / PAGE;
    unsigned char *vec = malloc(pages);
    if (vec == NULL)
        die("out of memory");
    uint64_t n = 0;
    if (mincore(p, size, vec) == 0)
        for (size_t i = 0; i < pages; i++)
            n += vec[i] & 1;
    free(vec);
    return n * PAGE;
}

static void faults(long *maj, long *min)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    *maj = ru.ru_majflt;
    *min = ru.ru_minflt;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "limit", required_argument, NULL, 'l' },
        { "cgroup", required_argument, NULL, 'c' },
        { "ram", required_argument, NULL, 'r' },
        { "swap", required_argument, NULL, 's' },
        { "total", required_argument, NULL, 't' },
        { "sleep", required_argument, NULL, 'S' },
        { "no-push", no_argument, NULL, 'n' },
        { "linger", required_argument, NULL, 'L' },
        { "reread", required_argument, NULL, 'R' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    uint64_t limit = 0, ram = 0, swap = UINT64_MAX, total = 0;
    const char *cgroup = NULL;
    double sleep_s = 600, linger_s = 0;
    bool push = true;
    enum { REREAD_BYTES, REREAD_PAGES, REREAD_RANDOM } mode = REREAD_BYTES;
    int opt;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (opt) {
        case 'l': limit = parse_size("--limit", optarg); break;
        case 'c': cgroup = optarg; break;
        case 'r': ram = parse_size("--ram", optarg); break;
        case 's': swap = parse_size("--swap", optarg); break;
        case 't': total = parse_size("--total", optarg); break;
        case 'S': {
            char *end;
            sleep_s = strtod(optarg, &end);
            if (end == optarg || *end || sleep_s < 0)
                die("--sleep: '%s' is not a number of seconds", optarg);
            break;
        }
        case 'n': push = false; break;
        case 'L': {
            char *end;
            linger_s = strtod(optarg, &end);
            if (end == optarg || *end || linger_s < 0)
                die("--linger: '%s' is not a number of seconds", optarg);
            break;
        }
        case 'R':
            if (strcmp(optarg, "bytes") == 0)
                mode = REREAD_BYTES;
            else if (strcmp(optarg, "pages") == 0)
                mode = REREAD_PAGES;
            else if (strcmp(optarg, "random") == 0)
                mode = REREAD_RANDOM;
            else
                die("--reread: '%s' is not bytes, pages or random", optarg);
            break;
        case 'h': fputs(usage, stdout); return 0;
        default: fputs("Try 'sp_tester --help'.\n", stderr); return 2;
        }
    }
    if (optind < argc)
        die("unexpected argument '%s' (try --help)", argv[optind]);
    if (limit && cgroup)
        die("--limit and --cgroup exclude each other");
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct sigaction sa = { .sa_handler = on_wake };
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGUSR2, &sa, NULL);
    printf("pid %d\n", (int)getpid());

    uint64_t cg_ram = UINT64_MAX;
    if (limit)
        cg_ram = make_cgroup(limit);
    else if (cgroup) {
        cg_ram = cgroup_limit(cgroup);
        join_cgroup(cgroup);
        printf("cgroup: %s (limit %.1f MiB)\n", cgroup, (double)cg_ram / 1048576);
    }
    if (ram == 0)
        ram = cg_ram != UINT64_MAX ? cg_ram : proc_kb_field("/proc/meminfo", "MemTotal");
    if (swap == UINT64_MAX)
        swap = proc_kb_field("/proc/meminfo", "SwapFree");
    if (total == 0) {
        total = ram + swap / 2;
        if (total > ram / 2 * 3)
            total = ram / 2 * 3;
    }
    size_t half = (size_t)(total / 2) / PAGE * PAGE;
    if (half == 0)
        die("nothing to do: the total is %llu bytes", (unsigned long long)total);
    if (push && swap == 0)
        die("no swap is free: enable swap first (swapon), or measure the floor with --no-push");
    printf("ram %.1f MiB, swap %.1f MiB, total %.1f MiB, buffers of %.1f MiB%s\n",
           (double)ram / 1048576, (double)swap / 1048576, (double)total / 1048576,
           (double)half / 1048576, push ? "" : " (no push: floor)");

    double t = now_s();
    char *first = map_buffer(half);
    touch(first, half, 0x5350);
    printf("first buffer touched: %.3f s\n", now_s() - t);

    if (push) {
        t = now_s();
        char *second = map_buffer(half);
        touch(second, half, 0x7370);
        munmap(second, half);
        printf("second buffer touched and freed: %.3f s\n", now_s() - t);
    }
    uint64_t swapped = proc_kb_field("/proc/self/status", "VmSwap");
    uint64_t res_push = resident_bytes(first, half);
    printf("swapped: %.1f MiB (VmSwap)\n", (double)swapped / 1048576);
    printf("resident after push: %.1f MiB (mincore: mapped or in the swap cache)\n",
           (double)res_push / 1048576);
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    /* The wall clock, for lining this up with a daemon's log. */
    printf("pushed; sleeping %.1f s (at %lld.%03ld)\n", sleep_s, (long long)wall.tv_sec,
           wall.tv_nsec / 1000000);

    double until = now_s() + sleep_s;
    for (double left; !wake && (left = until - now_s()) > 0;) {
        struct timespec ts = { (time_t)left, (long)((left - (double)(time_t)left) * 1e9) };
        nanosleep(&ts, NULL);
        if (look) {
            look = 0;
            printf("resident now: %.1f MiB\n", (double)resident_bytes(first, half) / 1048576);
        }
    }

    uint64_t res_before = resident_bytes(first, half);
    printf("resident before reread: %.1f MiB\n", (double)res_before / 1048576);
    long maj0, min0, maj1, min1;
    faults(&maj0, &min0);
    t = now_s();
    volatile uint64_t sink;
    uint64_t h = 1469598103934665603ull;
    if (mode == REREAD_BYTES) {
        /* FNV-1a over every byte: each byte is read, in order. */
        const unsigned char *b = (const unsigned char *)first;
        for (size_t i = 0; i < half; i++)
            h = (h ^ b[i]) * 1099511628211ull;
    } else if (mode == REREAD_PAGES) {
        for (size_t off = 0; off < half; off += PAGE)
            h ^= *(volatile uint64_t *)(first + off);
    } else {
        /* Page i*stride mod n for i in 0..n-1: every page once, since the
         * stride is a prime that does not divide n; neighbours in time are
         * far apart in the buffer. */
        size_t n = half / PAGE, stride = 1000003;
        while (n % stride == 0)
            stride += 2;
        for (size_t i = 0, pg = 0; i < n; i++, pg = (pg + stride) % n)
            h ^= *(volatile uint64_t *)(first + pg * PAGE);
    }
    sink = h;
    (void)sink;
    double reread = now_s() - t;
    faults(&maj1, &min1);
    printf("reread: %.3f s, %ld major faults, %ld minor faults\n", reread, maj1 - maj0,
           min1 - min0);
    printf("result reread_s=%.4f majflt=%ld minflt=%ld swapped_mib=%.1f "
           "resident_after_push_mib=%.1f resident_before_reread_mib=%.1f buffer_mib=%.1f\n",
           reread, maj1 - maj0, min1 - min0, (double)swapped / 1048576,
           (double)res_push / 1048576, (double)res_before / 1048576, (double)half / 1048576);
    if (linger_s > 0) {
        struct timespec ts = { (time_t)linger_s,
                               (long)((linger_s - (double)(time_t)linger_s) * 1e9) };
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
            ;
    }
    munmap(first, half);
    cleanup_cgroup();
    return 0;
}
