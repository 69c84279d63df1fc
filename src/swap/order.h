/*
 * The order of prefetch: an estimate of which swapped pages will be used
 * first, since with a limited budget (free memory, a cgroup's room, the
 * time until the next burst of activity) what comes first is what gets in.
 *
 *  1. Processes that ran most recently first.  A process that has just run
 *     is likely to run again soon (the interactive program the user came
 *     back to); one idle for hours can wait.  The time since a process last
 *     ran comes from /proc/PID/sched (se.exec_start) when the kernel offers
 *     it, else from the daemon's own observation of its CPU time changing,
 *     else from its start time (newer first).
 *
 *  2. Within a process, the most recently swapped-out pages first, as the
 *     kernel patch did.  Reclaim swaps out the least recently used pages
 *     first, so the pages swapped out last were in use most recently.  The
 *     swap offset stands in for the time of swap-out: the kernel hands out
 *     slots in increasing order within its clusters and takes fresh
 *     clusters in order, so on a swap area that is not yet fragmented a
 *     higher offset means a later swap-out.  This is an approximation that
 *     weakens as slots are freed and reused; without CAP_SYS_ADMIN the
 *     offsets read as 0 and the order falls back to ascending addresses.
 *
 *  3. Within an extent, ascending addresses (one sequential read where the
 *     swap slots are contiguous).
 */
#ifndef TC_SWAP_ORDER_H
#define TC_SWAP_ORDER_H

#include <stddef.h>
#include <stdint.h>

#include "swap/scan.h"

/* Sort extents: highest recency first, then ascending address. */
void sp_order_extents(struct sp_extent *v, size_t n);

/* Process ranking key: the estimated time it last ran (CLOCK_MONOTONIC
 * ns, larger = more recent). */
struct sp_rank {
    uint64_t last_ran_ns;
    int pid;
};
/* qsort comparator: most recent first, then lower PID. */
int sp_rank_cmp(const void *a, const void *b);

#endif
