/*
 * Finding what there is to prefetch: the processes with swapped memory and,
 * in each, the runs of swapped pages (extents).
 *
 * A process's areas with swap are found in /proc/PID/smaps ("Swap:"), then
 * the swapped pages of those areas in /proc/PID/pagemap (bit 62).  Swapped
 * pages of shared memory (tmpfs, shmem) do not show in pagemap and are not
 * prefetched.
 */
#ifndef TC_SWAP_SCAN_H
#define TC_SWAP_SCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Extents are cut at this many pages (2 MiB: one chunk of prefetch) and
 * where more than SP_EXTENT_GAP pages that are not swapped separate
 * swapped ones. */
#define SP_EXTENT_MAX_PAGES 512u
#define SP_EXTENT_GAP 32u

/* A run of swapped pages of one process, the unit of prefetch.  The span
 * [start, start + npages pages) begins and ends with a page that was
 * swapped when scanned; pages between may be present.  The extent is
 * re-read from pagemap right before prefetch, so it may be stale. */
struct sp_extent {
    uint64_t start;
    uint32_t npages;
    uint32_t swapped;           /* swapped pages in the span when scanned */
    uint64_t recency;           /* highest swap offset in the span (see order.h) */
};

/* What the daemon reads about a process from /proc/PID/stat and status. */
struct sp_procinfo {
    pid_t pid;
    char comm[32];
    uint64_t starttime;         /* clock ticks after boot: with pid, names the process */
    uint64_t majflt;            /* major faults so far */
    uint64_t cpu_ticks;         /* utime + stime */
    uint64_t swap_bytes;        /* VmSwap */
    bool kernel_thread;
};

/* stat and status.  False if the process has gone. */
bool sp_procinfo_read(pid_t pid, struct sp_procinfo *pi);
/* stat only (starttime, majflt, cpu_ticks, comm). */
bool sp_procinfo_stat(pid_t pid, struct sp_procinfo *pi);

/* How long ago the process last ran, from /proc/PID/sched (kernels with
 * CONFIG_SCHED_DEBUG); -1 if unknown. */
int64_t sp_proc_idle_ns(pid_t pid);

/* The extents of a process.  Pages for which skip(arg, addr, key) returns
 * true (already prefetched and still pending) are left out.  *out is
 * malloc'ed (free it); swapped_pages gets the swapped pages found,
 * including skipped ones.  0 or -errno. */
int sp_scan_extents(pid_t pid, int pagemap_fd, bool (*skip)(void *arg, uint64_t addr, uint64_t key),
                    void *arg, struct sp_extent **out, size_t *n, uint64_t *swapped_pages);

#endif
