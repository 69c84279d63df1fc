#include "swap/sysstat.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "swap/procfs.h"
#include "util/misc.h"

static bool read_cpu(struct sp_sys *s)
{
    char buf[512];
    if (sp_read_text("/proc/stat", buf, sizeof buf) <= 0 || strncmp(buf, "cpu ", 4) != 0)
        return false;
    unsigned long long v[10] = { 0 };
    int n = sscanf(buf + 4, "%llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1],
                   &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9]);
    if (n < 4)
        return false;
    /* user nice system idle iowait irq softirq steal guest guest_nice;
     * guest time is already included in user. */
    long hz = sysconf(_SC_CLK_TCK);
    uint64_t tick_ns = 1000000000ull / (uint64_t)(hz > 0 ? hz : 100);
    uint64_t busy = v[0] + v[1] + v[2] + v[5] + v[6];
    s->cpu_busy_ns = busy * tick_ns;
    s->cpu_capacity_ns = (busy + v[3] + v[4]) * tick_ns;
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    s->self_cpu_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    return true;
}

static bool read_vm(struct sp_sys *s)
{
    static char buf[32768];     /* /proc/vmstat is about 4 KiB; single-threaded use */
    if (sp_read_text("/proc/vmstat", buf, sizeof buf) <= 0)
        return false;
    bool ok = sp_kv_u64(buf, "pswpin", &s->pswpin) && sp_kv_u64(buf, "pswpout", &s->pswpout);
    if (!sp_kv_u64(buf, "pgmajfault", &s->pgmajfault))
        s->pgmajfault = 0;
    if (!sp_kv_u64(buf, "pgsteal_anon", &s->pgsteal_anon)) {
        /* Older kernels have only the per-reclaimer totals (file and anon). */
        uint64_t k = 0, d = 0;
        sp_kv_u64(buf, "pgsteal_kswapd", &k);
        sp_kv_u64(buf, "pgsteal_direct", &d);
        s->pgsteal_anon = k + d;
    }
    return ok;
}

static bool read_mem(struct sp_sys *s)
{
    char buf[4096];
    if (sp_read_text("/proc/meminfo", buf, sizeof buf) <= 0)
        return false;
    return sp_kv_u64(buf, "MemTotal", &s->mem_total) && sp_kv_u64(buf, "MemFree", &s->mem_free) &&
           sp_kv_u64(buf, "SwapTotal", &s->swap_total) && sp_kv_u64(buf, "SwapFree", &s->swap_free) &&
           sp_kv_u64(buf, "SwapCached", &s->swap_cached);
}

/* Sum of "high" watermarks: in each zone's block, the line "        high
 * N" (pages) comes before the per-CPU "high:" lines, which have a colon. */
static uint64_t read_wmark_high(void)
{
    FILE *f = fopen("/proc/zoneinfo", "re");
    if (f == NULL)
        return 0;
    char line[256];
    uint64_t pages = 0;
    while (fgets(line, sizeof line, f)) {
        char word[16];
        unsigned long long v;
        if (sscanf(line, " %15s %llu", word, &v) == 2 && strcmp(word, "high") == 0)
            pages += v;
    }
    fclose(f);
    return pages * (uint64_t)sysconf(_SC_PAGESIZE);
}

static void read_psi(const char *path, struct sp_psi *p)
{
    char buf[512];
    p->ok = false;
    if (sp_read_text(path, buf, sizeof buf) <= 0)
        return;
    const char *some = strstr(buf, "some ");
    const char *full = strstr(buf, "full ");
    const char *t;
    p->some_us = p->full_us = 0;
    if (some && (t = strstr(some, "total=")) != NULL)
        p->some_us = strtoull(t + 6, NULL, 10);
    else
        return;
    if (full && (t = strstr(full, "total=")) != NULL)
        p->full_us = strtoull(t + 6, NULL, 10);
    p->ok = true;
}

bool sp_sys_read(struct sp_sys *s, const struct sp_sys *prev, bool with_zoneinfo, char *err,
                 size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->ns = tc_now_ns();
    if (!read_cpu(s)) {
        snprintf(err, errlen, "cannot read /proc/stat: %s", strerror(errno));
        return false;
    }
    if (!read_vm(s)) {
        snprintf(err, errlen, "cannot read pswpin and pswpout from /proc/vmstat");
        return false;
    }
    if (!read_mem(s)) {
        snprintf(err, errlen, "cannot read /proc/meminfo");
        return false;
    }
    if (with_zoneinfo || prev == NULL)
        s->wmark_high = read_wmark_high();
    else
        s->wmark_high = prev->wmark_high;
    read_psi("/proc/pressure/cpu", &s->psi_cpu);
    read_psi("/proc/pressure/io", &s->psi_io);
    read_psi("/proc/pressure/memory", &s->psi_mem);
    return true;
}

bool sp_sys_read_light(struct sp_sys *s, const struct sp_sys *base)
{
    *s = *base;
    s->ns = tc_now_ns();
    return read_vm(s) && read_mem(s);
}

bool sp_sys_pswpin(uint64_t *pages)
{
    struct sp_sys s;
    if (!read_vm(&s))
        return false;
    *pages = s.pswpin;
    return true;
}

double sp_sys_cpu_busy(const struct sp_sys *a, const struct sp_sys *b)
{
    if (b->cpu_capacity_ns <= a->cpu_capacity_ns)
        return 0;
    double cap = (double)(b->cpu_capacity_ns - a->cpu_capacity_ns);
    double busy = (double)(b->cpu_busy_ns - a->cpu_busy_ns);
    double self = (double)(b->self_cpu_ns - a->self_cpu_ns);
    double others = busy - self;
    if (others < 0)
        others = 0;
    return others / cap > 1 ? 1 : others / cap;
}

double sp_sys_stall(const struct sp_psi *a, const struct sp_psi *b, uint64_t elapsed_ns)
{
    if (!a->ok || !b->ok || elapsed_ns == 0 || b->some_us < a->some_us)
        return 0;
    double f = (double)(b->some_us - a->some_us) * 1000.0 / (double)elapsed_ns;
    return f > 1 ? 1 : f;
}
