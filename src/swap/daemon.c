#include "swap/daemon.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "swap/madvise.h"
#include "swap/order.h"
#include "swap/pagemap.h"
#include "swap/power.h"
#include "swap/prefetch.h"
#include "util/log.h"
#include "util/misc.h"
#include "util/parse.h"

/* Decisions to go must repeat this many intervals before prefetch (re)starts
 * (one in --once mode): a single quiet interval in a busy period is not
 * idleness. */
#define CALM_TICKS 2
/* Rescan for new swapped memory at least this often while idle. */
#define RESCAN_NS (30ull * 1000000000ull)
/* Re-read the zones' watermarks and the power state every so many ticks. */
#define ZONEINFO_TICKS 30u
#define POWER_TICKS 10u
/* Swap cache figures may lag by this many pages (per-CPU counter batches);
 * the eviction estimate ignores deficits up to it. */
#define SLACK_PAGES 256u
/* At most this many empty extents are looked at per chunk callback. */
#define EXTENTS_PER_CALLBACK 256u

const char *sp_state_name(enum sp_state s)
{
    switch (s) {
    case SP_WAITING: return "waiting";
    case SP_PREFETCHING: return "prefetching";
    case SP_IDLE: return "idle";
    case SP_HELD: return "held";
    }
    return "?";
}

static unsigned calm_needed(const struct sp_daemon *d)
{
    return d->cfg.once ? 1 : CALM_TICKS;
}

static void fmt_size(uint64_t bytes, char *buf, size_t len)
{
    tc_format_size(bytes, buf, len);
}

/* ---- processes ---- */

static struct sp_proc *proc_find(struct sp_daemon *d, pid_t pid, size_t *index)
{
    for (size_t i = 0; i < d->nprocs; i++) {
        if (d->procs[i]->pid == pid) {
            if (index)
                *index = i;
            return d->procs[i];
        }
    }
    return NULL;
}

static struct sp_proc *proc_new(struct sp_daemon *d, const struct sp_procinfo *pi)
{
    struct sp_proc *p = tc_xcalloc(1, sizeof *p);
    p->pid = pi->pid;
    p->starttime = pi->starttime;
    p->majflt = pi->majflt;
    p->cpu_ticks = pi->cpu_ticks;
    p->pidfd = -1;
    p->cgroup = -1;
    p->swap_at_build = UINT64_MAX;
    long hz = sysconf(_SC_CLK_TCK);
    p->last_ran_ns = pi->starttime * (1000000000ull / (uint64_t)(hz > 0 ? hz : 100));
    sp_ledger_init(&p->ledger);
    if (d->nprocs == d->cap) {
        d->cap = d->cap ? d->cap * 2 : 32;
        d->procs = realloc(d->procs, d->cap * sizeof *d->procs);
        if (d->procs == NULL)
            abort();
    }
    d->procs[d->nprocs++] = p;
    return p;
}

/* The process has exited (or its PID now names another process): its
 * pending pages are settled as freed and its figures join the totals of
 * exited processes. */
static void proc_forget(struct sp_daemon *d, size_t i)
{
    struct sp_proc *p = d->procs[i];
    sp_ledger_drop(&p->ledger);
    const struct sp_outcome *o = &p->ledger.pages;
    d->gone.prefetched += o->prefetched;
    d->gone.used += o->used;
    d->gone.wasted += o->wasted;
    d->gone.freed += o->freed;
    d->gone.mapped += o->mapped;
    d->gone_read += p->read_pages;
    if (o->prefetched)
        tc_info("process %d (%s) exited: prefetched %llu pages, used %llu, wasted %llu, "
                "freed unused %llu", (int)p->pid, p->comm,
                (unsigned long long)o->prefetched, (unsigned long long)o->used,
                (unsigned long long)o->wasted, (unsigned long long)o->freed);
    if (p->pidfd >= 0)
        close(p->pidfd);
    sp_ledger_free(&p->ledger);
    free(p->ext);
    free(p);
    memmove(&d->procs[i], &d->procs[i + 1], (d->nprocs - i - 1) * sizeof *d->procs);
    d->nprocs--;
}

static bool skip_pending(void *arg, uint64_t addr, uint64_t key)
{
    return sp_ledger_pending(arg, addr, key);
}

static void build_extents(struct sp_proc *p)
{
    int fd = sp_pagemap_open(p->pid);
    if (fd < 0) {
        if (fd == -EACCES || fd == -EPERM) {
            p->denied = true;
            tc_warn("process %d (%s): cannot read its pagemap (%s); it is skipped "
                    "(reading other users' processes needs CAP_SYS_PTRACE)",
                    (int)p->pid, p->comm, strerror(-fd));
        }
        return;
    }
    struct sp_extent *ext;
    size_t n;
    uint64_t swapped;
    int rc = sp_scan_extents(p->pid, fd, skip_pending, &p->ledger, &ext, &n, &swapped);
    close(fd);
    if (rc < 0) {
        tc_debug("process %d (%s): scan failed: %s", (int)p->pid, p->comm, strerror(-rc));
        return;
    }
    sp_order_extents(ext, n);
    free(p->ext);
    p->ext = ext;
    p->n = n;
    p->next = 0;
    p->swap_at_build = p->swap_bytes;
}

static int rank_procs_cmp(const void *a, const void *b)
{
    const struct sp_proc *pa = *(struct sp_proc *const *)a, *pb = *(struct sp_proc *const *)b;
    struct sp_rank ra = { pa->last_ran_ns, (int)pa->pid }, rb = { pb->last_ran_ns, (int)pb->pid };
    return sp_rank_cmp(&ra, &rb);
}

/* Find processes with swapped memory, refresh what is known of each, and
 * rebuild the extents of those whose swap changed. */
static void scan(struct sp_daemon *d)
{
    uint64_t now = tc_now_ns();
    for (size_t i = 0; i < d->nprocs; i++)
        d->procs[i]->seen = false;
    DIR *dir = opendir("/proc");
    if (dir == NULL) {
        tc_error("cannot list /proc: %s", strerror(errno));
        return;
    }
    pid_t self = getpid();
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        if (!isdigit((unsigned char)e->d_name[0]))
            continue;
        pid_t pid = (pid_t)atoi(e->d_name);
        if (pid == self)
            continue;
        struct sp_procinfo pi;
        if (!sp_procinfo_read(pid, &pi) || pi.kernel_thread)
            continue;
        size_t idx;
        struct sp_proc *p = proc_find(d, pid, &idx);
        if (p && p->starttime != pi.starttime) {
            proc_forget(d, idx);
            p = NULL;
        }
        if (p == NULL && pi.swap_bytes == 0)
            continue;
        char cg[1024] = "/";
        int cgi = -1;
        if (d->cgroups.fs.mode != SP_CG_NONE) {
            if (!sp_cg_of_pid(&d->cgroups.fs, pid, cg, sizeof cg))
                continue;
            if (d->cfg.cgroup && !sp_cg_within(cg, d->cfg.cgroup)) {
                if (p) {
                    /* It moved out of the target cgroup: keep its figures,
                     * prefetch no more for it. */
                    p->seen = true;
                    p->next = p->n;
                }
                continue;
            }
            cgi = sp_cgroups_get(&d->cgroups, cg);
        }
        bool fresh = p == NULL;
        if (fresh)
            p = proc_new(d, &pi);
        p->seen = true;
        p->cgroup = cgi;
        snprintf(p->comm, sizeof p->comm, "%s", pi.comm);
        int64_t idle = sp_proc_idle_ns(pid);
        if (idle >= 0)
            p->last_ran_ns = now > (uint64_t)idle ? now - (uint64_t)idle : 0;
        else if (!fresh && p->cpu_ticks != pi.cpu_ticks)
            p->last_ran_ns = now;
        p->cpu_ticks = pi.cpu_ticks;
        p->swap_bytes = pi.swap_bytes;
        if (!p->denied && pi.swap_bytes > 0 && pi.swap_bytes != p->swap_at_build)
            build_extents(p);
    }
    closedir(dir);
    for (size_t i = d->nprocs; i-- > 0;)
        if (!d->procs[i]->seen)
            proc_forget(d, i);
    if (d->nprocs > 1)
        qsort(d->procs, d->nprocs, sizeof *d->procs, rank_procs_cmp);
    d->scans++;
    d->last_scan_ns = now;
    d->swap_used_at_scan = d->prev.swap_total - d->prev.swap_free;
    d->need_scan = false;
}

static bool proc_has_work(const struct sp_proc *p)
{
    return !p->denied && p->next < p->n;
}

static bool has_work(const struct sp_daemon *d)
{
    for (size_t i = 0; i < d->nprocs; i++)
        if (proc_has_work(d->procs[i]))
            return true;
    return false;
}

static uint64_t work_bytes(const struct sp_daemon *d, size_t *nprocs)
{
    uint64_t pages = 0;
    *nprocs = 0;
    for (size_t i = 0; i < d->nprocs; i++) {
        const struct sp_proc *p = d->procs[i];
        if (!proc_has_work(p))
            continue;
        (*nprocs)++;
        for (size_t k = p->next; k < p->n; k++)
            pages += p->ext[k].swapped;
    }
    return pages * SP_PAGE_SIZE;
}

/* ---- accounting: settle the ledgers ---- */

static int read_pm(void *arg, uint64_t addr, size_t npages, uint64_t *out)
{
    return sp_pagemap_read(*(int *)arg, addr, npages, out);
}

/* Settle up to pages pending pages as wasted, over the processes of one
 * cgroup record (or all processes), in proportion to their pending pages. */
static void evict_scope(struct sp_daemon *d, int cgroup, bool all, uint64_t pages)
{
    uint64_t total = 0;
    for (size_t i = 0; i < d->nprocs; i++)
        if (all || d->procs[i]->cgroup == cgroup)
            total += d->procs[i]->ledger.pages.pending;
    if (total == 0 || pages == 0)
        return;
    if (pages > total)
        pages = total;
    uint64_t left = pages;
    for (size_t i = 0; i < d->nprocs && left; i++) {
        struct sp_proc *p = d->procs[i];
        if (!(all || p->cgroup == cgroup) || p->ledger.pages.pending == 0)
            continue;
        uint64_t share = pages * p->ledger.pages.pending / total;
        if (share == 0)
            share = 1;
        left -= sp_ledger_evict(&p->ledger, TC_MIN(share, left));
    }
    for (size_t i = 0; i < d->nprocs && left; i++) {
        struct sp_proc *p = d->procs[i];
        if (all || p->cgroup == cgroup)
            left -= sp_ledger_evict(&p->ledger, left);
    }
    tc_debug("%llu prefetched pages left memory before use (%s)",
             (unsigned long long)(pages - left), all ? "system swap cache" : "cgroup swap cache");
}

/* The deficit of a scope's swap cache against its pending pages, counted
 * only when it shows at two ticks in a row (figures of a page touched
 * between the pagemap read and the swap cache read must not count). */
static uint64_t deficit(uint64_t pending, uint64_t swapcached_bytes, uint64_t *prev)
{
    uint64_t sc = swapcached_bytes / SP_PAGE_SIZE + SLACK_PAGES;
    uint64_t now = pending > sc ? pending - sc : 0;
    uint64_t sure = TC_MIN(now, *prev);
    *prev = now - sure;
    return sure;
}

static void settle(struct sp_daemon *d, const struct sp_sys *cur)
{
    for (size_t i = d->nprocs; i-- > 0;) {
        struct sp_proc *p = d->procs[i];
        struct sp_procinfo pi;
        if (!sp_procinfo_stat(p->pid, &pi) || pi.starttime != p->starttime) {
            proc_forget(d, i);
            continue;
        }
        uint64_t majd = pi.majflt >= p->majflt ? pi.majflt - p->majflt : 0;
        p->majflt = pi.majflt;
        if (p->ledger.pages.pending == 0)
            continue;
        int fd = sp_pagemap_open(p->pid);
        if (fd < 0)
            continue;
        sp_ledger_sample(&p->ledger, read_pm, &fd, majd, sp_sys_reclaim_mark(cur));
        close(fd);
    }
    /* Pending pages certainly dropped: per cgroup, then system-wide. */
    sp_cgroups_refresh_all(&d->cgroups);
    for (size_t c = 0; c < d->cgroups.n; c++) {
        struct sp_cgroup *cg = &d->cgroups.v[c];
        if (!cg->has_swapcached)
            continue;
        uint64_t pending = 0;
        for (size_t i = 0; i < d->nprocs; i++)
            if (d->procs[i]->cgroup == (int)c)
                pending += d->procs[i]->ledger.pages.pending;
        uint64_t lost = deficit(pending, cg->swapcached, &cg->lost_prev);
        if (lost)
            evict_scope(d, (int)c, false, lost);
    }
    uint64_t pending = 0;
    for (size_t i = 0; i < d->nprocs; i++)
        pending += d->procs[i]->ledger.pages.pending;
    uint64_t lost = deficit(pending, cur->swap_cached, &d->lost_prev_global);
    if (lost)
        evict_scope(d, -1, true, lost);
}

/* ---- stops ---- */

/* Count a reason to hold back, once per change of reason. */
static void note_stop(struct sp_daemon *d, enum sp_reason r, const char *scope)
{
    if (r == SP_GO || r == d->held_reason)
        return;
    d->held_reason = r;
    d->stops[r]++;
    d->last_stop_ns = tc_now_ns();
    d->last_stop_reason = r;
    snprintf(d->last_stop_scope, sizeof d->last_stop_scope, "%s", scope);
    struct sp_stop *st = &d->recent_stops[d->recent_next];
    d->recent_next = (d->recent_next + 1) % SP_RECENT_STOPS;
    st->at_ns = d->last_stop_ns;
    st->reason = r;
    snprintf(st->scope, sizeof st->scope, "%s", scope);
}

static void finish_once(struct sp_daemon *d, enum sp_reason why)
{
    if (!d->cfg.once || d->done)
        return;
    d->done = true;
    d->once_reason = why;
    timer_cancel(d->reactor, &d->tick_timer);
    timer_cancel(d->reactor, &d->chunk_timer);
    if (d->on_done)
        d->on_done(d);
}

static void stop_prefetching(struct sp_daemon *d, enum sp_reason r, const char *scope)
{
    bool was = d->state == SP_PREFETCHING || d->state == SP_HELD;
    d->calm = 0;        /* restart only after calm intervals again */
    if (d->state != SP_IDLE || d->need_scan)
        note_stop(d, r, scope);
    timer_cancel(d->reactor, &d->chunk_timer);
    if (was) {
        tc_info("prefetch stopped: %s (%s)", sp_reason_text(r), scope);
        d->state = SP_WAITING;
    } else if (d->state != SP_IDLE) {
        d->state = SP_WAITING;
    }
    finish_once(d, r);
}

/* A cgroup's memory rules, against its usage at the last tick. */
static enum sp_reason check_cgroup(struct sp_daemon *d, int lc)
{
    struct sp_cgroup *c = &d->cgroups.v[lc];
    uint64_t demand;
    enum sp_reason r = sp_decide_cgroup(&d->policy, c->limit, c->usage, c->usage_at_tick,
                                        c->ours_since_tick, &c->room, &demand);
    if (demand > c->demand)
        c->demand = demand;
    if (r != SP_GO) {
        if (c->hold != (int)r) {
            c->held_back++;
            tc_debug("cgroup %s held back: %s", c->path, sp_reason_text(r));
        }
        c->hold = (int)r;
        c->calm = 0;
    }
    return r;
}

/* ---- --map: mapping prefetched pages ---- */

/* Map the pages of p's last chunk that are still pending and that nothing
 * can have dropped from the swap cache since their advice (no reclaim
 * anywhere: mapping them then takes no I/O).  Pages it cannot vouch for
 * stay pending; the ledger settles them as usual. */
static void map_due(struct sp_daemon *d, struct sp_proc *p, uint64_t steal_now)
{
    uint64_t addrs[SP_EXTENT_MAX_PAGES];
    uint32_t npages = p->map_npages;
    p->map_npages = 0;
    if (!d->cfg.map || npages == 0 || p->map_denied)
        return;
    size_t n = sp_ledger_unreclaimed(&p->ledger, p->map_start, TC_MIN(npages, SP_EXTENT_MAX_PAGES),
                                     steal_now, addrs, SP_EXTENT_MAX_PAGES);
    if (n == 0)
        return;
    /* process_vm_readv names the process by PID: make sure it is still the
     * one advised (a PID reused in the instant after this check would only
     * have one byte of some pages read into a scratch buffer). */
    struct sp_procinfo pi;
    if (!sp_procinfo_stat(p->pid, &pi) || pi.starttime != p->starttime)
        return;
    ssize_t r = sp_map_pages(p->pid, addrs, n);
    if (r < 0) {
        if (r == -EPERM || r == -EACCES) {
            p->map_denied = true;
            tc_warn("process %d (%s): the kernel refused process_vm_readv (%s); its pages "
                    "are prefetched but not mapped (ptrace access is needed)",
                    (int)p->pid, p->comm, strerror((int)-r));
        } else if (r != -ESRCH) {
            tc_debug("process %d (%s): mapping %zu pages at 0x%llx: %s", (int)p->pid, p->comm,
                     n, (unsigned long long)addrs[0], strerror((int)-r));
        }
        return;
    }
    /* A short count stops at a page that could not be read (unmapped
     * meanwhile); the pages before it are mapped. */
    uint64_t m = sp_ledger_mapped(&p->ledger, addrs, (size_t)r);
    tc_debug("process %d (%s): mapped %llu of %zu pages", (int)p->pid, p->comm,
             (unsigned long long)m, n);
}

/* Map what is due for every process (the tick, and the end of a pass). */
static void map_all_due(struct sp_daemon *d, uint64_t steal_now)
{
    for (size_t i = 0; i < d->nprocs; i++)
        map_due(d, d->procs[i], steal_now);
}

/* ---- the chunk timer: pacing ---- */

/* Advise up to max_pages of p's next extent.  Returns pages advised, or -1
 * if the kernel asks to try again later (EAGAIN, EINTR). */
static int64_t issue(struct sp_daemon *d, struct sp_proc *p, uint64_t max_pages,
                     uint64_t steal_mark)
{
    if (p->pidfd < 0) {
        int fd = sp_pidfd_open(p->pid);
        struct sp_procinfo pi;
        if (fd < 0 || !sp_procinfo_stat(p->pid, &pi) || pi.starttime != p->starttime) {
            /* Gone, or the PID was reused before we could hold it. */
            if (fd >= 0)
                close(fd);
            p->next = p->n;
            d->need_scan = true;
            return 0;
        }
        p->pidfd = fd;
    }
    int pm = sp_pagemap_open(p->pid);
    if (pm < 0) {
        p->next = p->n;
        d->need_scan = true;
        return 0;
    }
    map_due(d, p, steal_mark);
    struct sp_chunk c;
    uint64_t now = tc_now_ns();
    struct sp_extent before = p->ext[p->next];
    int rc = sp_prefetch_chunk(p->pidfd, pm, &p->ext[p->next], (uint32_t)max_pages, &p->ledger,
                               steal_mark, now, &c);
    close(pm);
    if (rc == 0 && c.advised && d->cfg.map) {
        const struct sp_extent *after = &p->ext[p->next];
        p->map_start = before.start;
        p->map_npages = after->npages == 0 ? before.npages
                                           : (uint32_t)((after->start - before.start) >> SP_PAGE_SHIFT);
    }
    if (rc < 0) {
        switch (-rc) {
        case ESRCH:
            p->next = p->n;
            d->need_scan = true;
            return 0;
        case EPERM:
        case EACCES:
            p->denied = true;
            tc_warn("process %d (%s): the kernel refused process_madvise (%s); it is skipped%s",
                    (int)p->pid, p->comm, strerror(-rc),
                    rc == -EPERM ? " (CAP_SYS_NICE is needed)" : " (ptrace access is needed)");
            return 0;
        case EINTR:
        case EAGAIN:
            return -1;
        case ENOMEM:
        case EFAULT:
        case EINVAL:
            /* The area changed since the scan: drop the extent. */
            p->ext[p->next].npages = 0;
            break;
        default:
            d->errors++;
            tc_warn("process %d (%s): process_madvise: %s", (int)p->pid, p->comm, strerror(-rc));
            p->ext[p->next].npages = 0;
            break;
        }
    }
    if (p->ext[p->next].npages == 0)
        p->next++;
    if (c.advised) {
        p->read_pages += c.read;
        d->ours_since_tick += c.read * SP_PAGE_SIZE;
        if (p->cgroup >= 0)
            sp_cgroups_charge(&d->cgroups, p->cgroup, c.read * SP_PAGE_SIZE);
        d->chunks++;
        d->last_chunk_ns = tc_now_ns();
        tc_debug("process %d (%s): advised %llu pages, %llu read", (int)p->pid, p->comm,
                 (unsigned long long)c.advised, (unsigned long long)c.read);
    }
    return (int64_t)c.advised;
}

static void chunk(struct tc_timer *t)
{
    struct sp_daemon *d = container_of(t, struct sp_daemon, chunk_timer);
    if (d->state != SP_PREFETCHING && d->state != SP_HELD)
        return;
    uint64_t started = tc_now_ns();
    struct sp_sys now;
    if (!sp_sys_read_light(&now, &d->prev)) {
        timer_arm(d->reactor, &d->chunk_timer, d->cfg.interval_ns);
        return;
    }
    struct sp_inputs in = { &d->prev, &now, d->ours_since_tick, d->on_battery, d->laptop_mode };
    struct sp_verdict v;
    sp_decide_memory(&d->policy, &in, &v);
    if (v.reason != SP_GO) {
        d->verdict.reason = v.reason;
        stop_prefetching(d, v.reason, "system");
        return;
    }

    bool work = false, blocked = false;
    enum sp_reason block_reason = SP_GO;
    const char *block_scope = "system";
    unsigned looked = 0;
    for (size_t i = 0; i < d->nprocs; i++) {
        struct sp_proc *p = d->procs[i];
        if (!proc_has_work(p))
            continue;
        work = true;
        uint64_t budget = v.room;
        int lc = p->cgroup >= 0 ? sp_cgroups_limited(&d->cgroups, p->cgroup) : -1;
        if (lc >= 0) {
            sp_cgroups_refresh_usage(&d->cgroups, p->cgroup);
            enum sp_reason r = check_cgroup(d, lc);
            struct sp_cgroup *c = &d->cgroups.v[lc];
            /* A held cgroup is released by the tick, after calm intervals. */
            if (r != SP_GO || c->hold) {
                blocked = true;
                block_reason = c->hold ? (enum sp_reason)c->hold : SP_LOW_MEMORY;
                block_scope = c->path;
                continue;
            }
            budget = TC_MIN(budget, sp_cgroups_budget(&d->cgroups, p->cgroup, d->policy.headroom));
        }
        uint64_t max_pages = TC_MIN((uint64_t)SP_EXTENT_MAX_PAGES, budget / SP_PAGE_SIZE);
        if (max_pages == 0) {
            blocked = true;
            block_reason = SP_LOW_MEMORY;
            block_scope = lc >= 0 ? d->cgroups.v[lc].path : "system";
            continue;
        }
        while (proc_has_work(p) && looked < EXTENTS_PER_CALLBACK) {
            looked++;
            int64_t advised = issue(d, p, max_pages, sp_sys_reclaim_mark(&now));
            if (advised < 0) {
                timer_arm(d->reactor, &d->chunk_timer, d->cfg.interval_ns / 4);
                return;
            }
            if (advised) {
                if (d->state != SP_PREFETCHING) {
                    d->state = SP_PREFETCHING;
                    tc_info("prefetching again");
                }
                d->held_reason = SP_GO;
                /* Pace: the next chunk starts this one's share of the rate
                 * after this one started (the time spent in this callback,
                 * reading pagemap and advising, is part of the share, so
                 * the rate is what --rate says, not less). */
                uint64_t delay = (uint64_t)advised * SP_PAGE_SIZE * 1000000000ull / d->cfg.rate;
                uint64_t spent = tc_now_ns() - started;
                delay = delay > spent ? delay - spent : 0;
                timer_arm(d->reactor, &d->chunk_timer, TC_MAX(delay, 1000000ull));
                return;
            }
        }
        if (looked >= EXTENTS_PER_CALLBACK) {
            timer_arm(d->reactor, &d->chunk_timer, 0);
            return;
        }
    }
    if (work && blocked) {
        /* Everything left waits for room in its cgroup. */
        if (d->state != SP_HELD) {
            d->state = SP_HELD;
            d->cgroup_held++;
            note_stop(d, block_reason, block_scope);
            tc_info("prefetch held back: %s (%s)", sp_reason_text(block_reason), block_scope);
        }
        finish_once(d, block_reason);
        return;
    }
    if (!work || !has_work(d)) {
        struct sp_outcome o;
        uint64_t rd;
        sp_daemon_totals(d, &o, &rd);
        char a[32], b[32];
        fmt_size(o.prefetched * SP_PAGE_SIZE, a, sizeof a);
        fmt_size(rd * SP_PAGE_SIZE, b, sizeof b);
        map_all_due(d, sp_sys_reclaim_mark(&now));
        tc_info("nothing left to prefetch (prefetched %s so far, %s read from swap)", a, b);
        d->state = SP_IDLE;
        finish_once(d, SP_GO);
    }
}

/* ---- the tick: sample and decide ---- */

static void start_prefetching(struct sp_daemon *d)
{
    size_t n;
    uint64_t bytes = work_bytes(d, &n);
    char sz[32];
    fmt_size(bytes, sz, sizeof sz);
    tc_info("prefetching: %s swapped in %zu process%s", sz, n, n == 1 ? "" : "es");
    d->state = SP_PREFETCHING;
    timer_arm(d->reactor, &d->chunk_timer, 0);
}

static void apply(struct sp_daemon *d, const struct sp_sys *cur)
{
    enum sp_reason r = d->verdict.reason;
    if (r != SP_GO) {
        d->calm = 0;
        stop_prefetching(d, r, "system");
        return;
    }
    if (++d->calm < calm_needed(d))
        return;
    if (d->state == SP_PREFETCHING)
        return;
    if (d->state == SP_HELD) {
        /* Try again: a cgroup may have room now. */
        timer_arm(d->reactor, &d->chunk_timer, 0);
        return;
    }
    uint64_t used = cur->swap_total - cur->swap_free;
    uint64_t was = d->swap_used_at_scan;
    bool changed = (used > was ? used - was : was - used) > (1ull << 20);
    if (d->need_scan || changed || cur->ns - d->last_scan_ns >= RESCAN_NS ||
        d->state == SP_WAITING)
        scan(d);
    if (has_work(d)) {
        d->held_reason = SP_GO;
        start_prefetching(d);
    } else {
        if (d->state != SP_IDLE)
            tc_info("nothing to prefetch");
        d->state = SP_IDLE;
        finish_once(d, SP_GO);
    }
}

static void tick(struct tc_timer *t)
{
    struct sp_daemon *d = container_of(t, struct sp_daemon, tick_timer);
    char err[256];
    struct sp_sys cur;
    d->ticks++;
    if (!sp_sys_read(&cur, &d->prev, d->ticks % ZONEINFO_TICKS == 0, err, sizeof err)) {
        tc_warn("%s", err);
        timer_arm(d->reactor, &d->tick_timer, d->cfg.interval_ns);
        return;
    }
    if (d->ticks % POWER_TICKS == 1) {
        d->on_battery = sp_on_battery();
        d->laptop_mode = sp_laptop_mode();
    }
    /* Chunks not mapped yet (prefetch stopped, or the tick came before the
     * next chunk): a read still under way is waited for, at most one
     * chunk's. */
    map_all_due(d, sp_sys_reclaim_mark(&cur));
    settle(d, &cur);
    /* Each limited cgroup: its rules over the whole interval. */
    for (size_t c = 0; c < d->cgroups.n; c++) {
        struct sp_cgroup *cg = &d->cgroups.v[c];
        if (!cg->exists || cg->limit == UINT64_MAX)
            continue;
        cg->demand = 0;
        if (check_cgroup(d, (int)c) == SP_GO) {
            if (++cg->calm >= calm_needed(d))
                cg->hold = 0;
        }
        cg->usage_at_tick = cg->usage;
        cg->ours_since_tick = 0;
    }
    struct sp_inputs in = { &d->prev, &cur, d->ours_since_tick, d->on_battery, d->laptop_mode };
    enum sp_reason before = d->verdict.reason;
    sp_decide(&d->policy, &in, &d->verdict);
    if (d->verdict.reason != before || d->ticks == 1)
        tc_debug("decision: %s (CPU busy %.1f%%, stalls: CPU %.1f%% I/O %.1f%% memory %.1f%%; "
                 "others allocated %llu KiB, limit %llu KiB)",
                 sp_reason_text(d->verdict.reason), d->verdict.cpu_busy * 100,
                 d->verdict.cpu_stall * 100, d->verdict.io_stall * 100,
                 d->verdict.mem_stall * 100, (unsigned long long)(d->verdict.demand >> 10),
                 (unsigned long long)(d->verdict.demand_limit >> 10));
    d->prev = cur;
    d->ours_since_tick = 0;
    if (!d->done)
        apply(d, &cur);
    if (!d->done)
        timer_arm(d->reactor, &d->tick_timer, d->cfg.interval_ns);
}

/* ---- setup ---- */

bool sp_daemon_init(struct sp_daemon *d, struct tc_reactor *r, const struct sp_config *cfg,
                    char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    d->cfg = *cfg;
    d->reactor = r;
    if (d->cfg.rate == 0)
        d->cfg.rate = 1;
    sp_policy_default(&d->policy, cfg->level, cfg->headroom);
    sp_cgroups_init(&d->cgroups);
    if (!sp_sys_read(&d->prev, NULL, true, err, errlen))
        return false;
    d->tick_timer.fn = tick;
    d->chunk_timer.fn = chunk;
    d->state = SP_WAITING;
    d->need_scan = true;
    d->held_reason = SP_GO;
    d->last_stop_reason = SP_GO;
    d->offsets_visible = sp_have_cap_sys_admin();
    d->on_battery = sp_on_battery();
    d->laptop_mode = sp_laptop_mode();
    d->started_ns = tc_now_ns();
    return true;
}

void sp_daemon_start(struct sp_daemon *d)
{
    char err[256];
    if (!sp_sys_read(&d->prev, NULL, true, err, sizeof err))
        tc_warn("%s", err);
    timer_arm(d->reactor, &d->tick_timer, d->cfg.interval_ns);
}

void sp_daemon_stop(struct sp_daemon *d)
{
    timer_cancel(d->reactor, &d->tick_timer);
    timer_cancel(d->reactor, &d->chunk_timer);
    if (d->state == SP_PREFETCHING || d->state == SP_HELD)
        d->state = SP_WAITING;
}

void sp_daemon_free(struct sp_daemon *d)
{
    while (d->nprocs > 0) {
        struct sp_proc *p = d->procs[--d->nprocs];
        if (p->pidfd >= 0)
            close(p->pidfd);
        sp_ledger_free(&p->ledger);
        free(p->ext);
        free(p);
    }
    free(d->procs);
    d->procs = NULL;
    sp_cgroups_free(&d->cgroups);
}

void sp_daemon_totals(const struct sp_daemon *d, struct sp_outcome *o, uint64_t *read_pages)
{
    *o = d->gone;
    *read_pages = d->gone_read;
    for (size_t i = 0; i < d->nprocs; i++) {
        const struct sp_outcome *p = &d->procs[i]->ledger.pages;
        o->prefetched += p->prefetched;
        o->used += p->used;
        o->wasted += p->wasted;
        o->freed += p->freed;
        o->mapped += p->mapped;
        o->pending += p->pending;
        *read_pages += d->procs[i]->read_pages;
    }
}
