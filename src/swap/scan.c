#include "swap/scan.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "swap/pagemap.h"
#include "swap/procfs.h"
#include "util/misc.h"

bool sp_procinfo_stat(pid_t pid, struct sp_procinfo *pi)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    if (sp_read_text(path, buf, sizeof buf) <= 0)
        return false;
    /* "pid (comm) state ppid ..."; comm may hold spaces and parentheses, so
     * the fields start after the last ')'. */
    char *open = strchr(buf, '('), *close = strrchr(buf, ')');
    if (open == NULL || close == NULL || close < open)
        return false;
    size_t cl = (size_t)(close - open - 1);
    if (cl >= sizeof pi->comm)
        cl = sizeof pi->comm - 1;
    memcpy(pi->comm, open + 1, cl);
    pi->comm[cl] = '\0';
    pi->pid = pid;
    /* Fields 3.. : state ppid pgrp session tty tpgid flags minflt cminflt
     * majflt cmajflt utime stime cutime cstime priority nice threads
     * itrealvalue starttime */
    unsigned long long flags, majflt, utime, stime, start;
    if (sscanf(close + 2,
               "%*s %*s %*s %*s %*s %*s %llu %*s %*s %llu %*s %llu %llu %*s %*s %*s %*s %*s "
               "%*s %llu",
               &flags, &majflt, &utime, &stime, &start) != 5)
        return false;
    pi->kernel_thread = (flags & 0x00200000) != 0;     /* PF_KTHREAD */
    pi->majflt = majflt;
    pi->cpu_ticks = utime + stime;
    pi->starttime = start;
    return true;
}

bool sp_procinfo_read(pid_t pid, struct sp_procinfo *pi)
{
    memset(pi, 0, sizeof *pi);
    if (!sp_procinfo_stat(pid, pi))
        return false;
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    if (sp_read_text(path, buf, sizeof buf) <= 0)
        return false;
    if (!sp_kv_u64(buf, "VmSwap", &pi->swap_bytes))
        pi->swap_bytes = 0;     /* kernel threads have no VmSwap line */
    return true;
}

/* se.exec_start in milliseconds, from a /proc/.../sched file. */
static bool exec_start_ms(const char *path, double *ms)
{
    char buf[4096];
    if (sp_read_text(path, buf, sizeof buf) <= 0)
        return false;
    const char *p = strstr(buf, "se.exec_start");
    if (p == NULL || (p = strchr(p, ':')) == NULL)
        return false;
    *ms = strtod(p + 1, NULL);
    return true;
}

int64_t sp_proc_idle_ns(pid_t pid)
{
    char path[64];
    double theirs, ours;
    snprintf(path, sizeof path, "/proc/%d/sched", (int)pid);
    /* The daemon is running as it reads its own file: its exec_start is
     * "now" on the scheduler's clock. */
    if (!exec_start_ms(path, &theirs) || !exec_start_ms("/proc/self/sched", &ours))
        return -1;
    double idle = (ours - theirs) * 1e6;
    return idle > 0 ? (int64_t)idle : 0;
}

/* A virtual memory area of a process with swapped pages, from smaps. */
struct area {
    uint64_t start, end;
};

static int swapped_areas(pid_t pid, struct area **out, size_t *n)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/smaps", (int)pid);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return -errno;
    char *line = NULL;
    size_t cap = 0, count = 0, acap = 0;
    struct area *a = NULL;
    uint64_t cur_start = 0, cur_end = 0;
    while (getline(&line, &cap, f) > 0) {
        if (isxdigit((unsigned char)line[0])) {
            unsigned long long s, e;
            if (sscanf(line, "%llx-%llx", &s, &e) == 2) {
                cur_start = s;
                cur_end = e;
            }
        } else if (strncmp(line, "Swap:", 5) == 0) {
            unsigned long long kb = strtoull(line + 5, NULL, 10);
            if (kb > 0 && cur_end > cur_start) {
                if (count == acap) {
                    acap = acap ? acap * 2 : 16;
                    a = realloc(a, acap * sizeof *a);
                    if (a == NULL)
                        abort();
                }
                a[count++] = (struct area){ cur_start, cur_end };
            }
        }
    }
    free(line);
    fclose(f);
    *out = a;
    *n = count;
    return 0;
}

/* Extents being cut from a walk over pagemap in address order: cur is open
 * while more swapped pages may join it; last is its last swapped page, so
 * that a span always starts and ends with a swapped page. */
struct builder {
    struct sp_extent *v;
    size_t n, cap;
    struct sp_extent cur;
    uint64_t last;              /* address of the last swapped page in cur */
    bool open;
};

static void close_extent(struct builder *b)
{
    if (!b->open)
        return;
    b->cur.npages = (uint32_t)(((b->last - b->cur.start) >> SP_PAGE_SHIFT) + 1);
    if (b->n == b->cap) {
        b->cap = b->cap ? b->cap * 2 : 64;
        b->v = realloc(b->v, b->cap * sizeof *b->v);
        if (b->v == NULL)
            abort();
    }
    b->v[b->n++] = b->cur;
    b->open = false;
}

static void add_page(struct builder *b, uint64_t addr, uint64_t entry)
{
    if (b->open) {
        uint64_t span = ((addr - b->cur.start) >> SP_PAGE_SHIFT) + 1;
        uint64_t gap = ((addr - b->last) >> SP_PAGE_SHIFT) - 1;
        if (span > SP_EXTENT_MAX_PAGES || gap > SP_EXTENT_GAP)
            close_extent(b);
    }
    if (!b->open) {
        b->cur = (struct sp_extent){ .start = addr };
        b->open = true;
    }
    b->cur.swapped++;
    b->last = addr;
    uint64_t off = pm_swap_offset(entry);
    if (off > b->cur.recency)
        b->cur.recency = off;
}

int sp_scan_extents(pid_t pid, int pagemap_fd, bool (*skip)(void *arg, uint64_t addr, uint64_t key),
                    void *arg, struct sp_extent **out, size_t *n, uint64_t *swapped_pages)
{
    struct area *areas = NULL;
    size_t nareas = 0;
    *out = NULL;
    *n = 0;
    *swapped_pages = 0;
    int rc = swapped_areas(pid, &areas, &nareas);
    if (rc < 0)
        return rc;
    enum { BLOCK = 4096 };
    uint64_t *pm = tc_xmalloc(BLOCK * sizeof *pm);
    struct builder b = { 0 };
    for (size_t i = 0; i < nareas && rc == 0; i++) {
        for (uint64_t addr = areas[i].start; addr < areas[i].end;) {
            size_t count = (size_t)((areas[i].end - addr) >> SP_PAGE_SHIFT);
            if (count > BLOCK)
                count = BLOCK;
            rc = sp_pagemap_read(pagemap_fd, addr, count, pm);
            if (rc < 0)
                break;
            for (size_t k = 0; k < count; k++) {
                uint64_t e = pm[k], a = addr + (k << SP_PAGE_SHIFT);
                if (!(e & PM_SWAPPED) || (e & PM_PRESENT))
                    continue;
                (*swapped_pages)++;
                if (skip && skip(arg, a, pm_swap_key(e)))
                    continue;
                add_page(&b, a, e);
            }
            addr += (uint64_t)count << SP_PAGE_SHIFT;
        }
        close_extent(&b);       /* extents never span areas */
    }
    free(pm);
    free(areas);
    if (rc < 0) {
        free(b.v);
        return rc;
    }
    *out = b.v;
    *n = b.n;
    return 0;
}
