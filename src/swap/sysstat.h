/*
 * System-wide figures for the pacing decisions, sampled once per interval
 * (and a light subset before every chunk of prefetch).
 *
 * Sources: /proc/stat (CPU time), /proc/vmstat (pswpin, pswpout,
 * pgmajfault, pgsteal_anon), /proc/meminfo (free memory, swap),
 * /proc/zoneinfo (the zones' high watermarks), /proc/pressure/{cpu,io,memory}
 * (stall time), and this process's own CPU time so that the daemon does not
 * mistake its own work for a busy machine.
 *
 * Counters are cumulative; a decision always looks at the difference
 * between two samples, divided by the time between them.
 */
#ifndef TC_SWAP_SYSSTAT_H
#define TC_SWAP_SYSSTAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Cumulative stall time of one /proc/pressure file, in microseconds. */
struct sp_psi {
    uint64_t some_us, full_us;
    bool ok;                    /* false: PSI absent (kernel without it) */
};

struct sp_sys {
    uint64_t ns;                /* CLOCK_MONOTONIC when taken */

    /* /proc/stat "cpu" line, in nanoseconds summed over all CPUs.  busy is
     * user + nice + system + irq + softirq; capacity is busy + idle +
     * iowait (steal is time the hypervisor gave to someone else, not
     * capacity this machine had). */
    uint64_t cpu_busy_ns, cpu_capacity_ns;
    uint64_t self_cpu_ns;       /* this process's CPU time */

    /* /proc/vmstat, pages */
    uint64_t pswpin, pswpout, pgmajfault, pgsteal_anon;

    /* /proc/meminfo, bytes */
    uint64_t mem_total, mem_free, swap_total, swap_free, swap_cached;

    /* Sum of the zones' high watermarks, bytes.  Above it kswapd sleeps;
     * keeping free memory above it plus headroom means prefetch never
     * wakes reclaim.  Read only when asked (it rarely changes). */
    uint64_t wmark_high;

    struct sp_psi psi_cpu, psi_io, psi_mem;
};

/* Everything.  with_zoneinfo: also re-read the watermarks (else they are
 * copied from prev, which may be NULL on the first call).  Returns false
 * (err filled) when a file every Linux has cannot be read. */
bool sp_sys_read(struct sp_sys *s, const struct sp_sys *prev, bool with_zoneinfo, char *err,
                 size_t errlen);

/* The light subset for checks between chunks: meminfo and vmstat only;
 * the other fields are copied from base. */
bool sp_sys_read_light(struct sp_sys *s, const struct sp_sys *base);

/* The reclaim mark: pgsteal_anon + pswpout.  It moves whenever anonymous
 * memory (the swap cache included) is reclaimed and counted as such, or
 * anything is written out to swap: also by reclaim that does not count
 * pgsteal (madvise MADV_PAGEOUT, DAMON pageout schemes), as long as it
 * swaps something out. */
static inline uint64_t sp_sys_reclaim_mark(const struct sp_sys *s)
{
    return s->pgsteal_anon + s->pswpout;
}

/* The pswpin counter alone (pages read from swap so far). */
bool sp_sys_pswpin(uint64_t *pages);

/* Differences over [a, b] as fractions of the elapsed time.  CPU: share of
 * the machine's CPU capacity used by others than this process.  PSI: the
 * share of time some task stalled. */
double sp_sys_cpu_busy(const struct sp_sys *a, const struct sp_sys *b);
double sp_sys_stall(const struct sp_psi *a, const struct sp_psi *b, uint64_t elapsed_ns);

#endif
