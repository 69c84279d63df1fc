/*
 * The ledger: what swap prefetch read back for one process, and what became
 * of it.  This is how the daemon answers the question put to the kernel
 * patch when it was reviewed: how much of the speculative I/O is used?
 *
 * Every page advised is recorded with the pagemap entry it had just before
 * the advice (swapped, with its swap slot).  At every interval the daemon
 * reads those pages' pagemap entries again and settles each page once:
 *
 *   present            the process touched it (the touch mapped it)
 *   swapped, new slot  the process touched it and it was swapped out again
 *   swapped, same slot still pending: not touched yet
 *   neither            the process freed or unmapped it untouched: "freed"
 *
 * A touched page is "used" if it was still in memory when touched, and
 * "wasted" if reclaim had dropped it first (the touch then read it from swap
 * again).  Nothing tells the two apart per page from outside the process,
 * so the ledger bounds it:
 *
 *  - if no anonymous page was reclaimed anywhere and nothing was swapped
 *    out (vmstat pgsteal_anon + pswpout did not move, sp_sys_reclaim_mark)
 *    between the advice and the sample, nothing can have dropped the page:
 *    the touch is "used" (blind only to a reclaim that neither counts
 *    pgsteal nor writes to swap, such as a pageout that drops nothing but
 *    clean swap cache pages);
 *  - otherwise the touch is ambiguous; of the ambiguous touches settled in
 *    one sample, as many as the process took major faults in that interval
 *    are counted "wasted" (each major fault may have been such a page), the
 *    rest "used".  This errs towards "wasted".
 *
 * Pages that are dropped and never touched stay "pending" in the pagemap.
 * The daemon finds them from the swap cache figures: the pending pages of a
 * cgroup are in its swap cache, so when pending exceeds the cgroup's
 * swapcached (or the system's SwapCached), the difference has certainly left
 * memory; that many pending pages, oldest first, are settled as "wasted"
 * (sp_ledger_evict).  The swap cache also holds other pages, so this errs
 * towards "pending".
 *
 * Ranges are kept sorted by start address and never overlap in the pages
 * they track (a page is advised again only once it is settled).  Memory:
 * 8 bytes per page tracked until it settles.
 */
#ifndef TC_SWAP_LEDGER_H
#define TC_SWAP_LEDGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The longest range one call may record, in pages (64 MiB); chunks of
 * prefetch are far smaller.  It bounds the lookups of sp_ledger_pending. */
#define SP_LEDGER_MAX_SPAN 16384u

/* Outcome counts in pages.  prefetched = used + wasted + freed + mapped +
 * pending.  mapped: pages the daemon itself mapped into their process
 * (--map, sp_ledger_mapped); once mapped, pagemap no longer tells whether
 * the process touched them, so they leave the ledger without a verdict and
 * out of the hit ratio. */
struct sp_outcome {
    uint64_t prefetched, used, wasted, freed, mapped, pending;
};

/* Pages of one process advised by one call.  entry[i] is the pagemap
 * entry of page start + i at advice time, 0 once settled (or never
 * advised).  Invariant: pending = number of non-zero entries. */
struct sp_lrange {
    uint64_t start;
    uint32_t npages, pending;
    uint64_t stamp_ns;          /* when advised (CLOCK_MONOTONIC) */
    uint64_t steal_mark;        /* the system's reclaim mark when advised */
    uint64_t *entry;
};

/* One process's ledger: its ranges still holding pending pages, and the
 * outcome counts of every page it ever recorded.  Invariant: pages.pending
 * is the sum of the ranges' pending; a range leaves when it reaches 0. */
struct sp_ledger {
    struct sp_lrange *r;        /* sorted by start */
    size_t n, cap;
    struct sp_outcome pages;
};

void sp_ledger_init(struct sp_ledger *l);
void sp_ledger_free(struct sp_ledger *l);

/* Record a call's pages: entries[i] for page start + i, 0 for pages not
 * advised.  Counts them as prefetched and pending.  npages is at most
 * SP_LEDGER_MAX_SPAN (longer calls are not recorded). */
void sp_ledger_add(struct sp_ledger *l, uint64_t start, uint32_t npages, const uint64_t *entries,
                   uint64_t now_ns, uint64_t steal_mark);

/* True if the page at addr is pending with the same swap slot as key. */
bool sp_ledger_pending(const struct sp_ledger *l, uint64_t addr, uint64_t key);

/* Settle pages from fresh pagemap entries (read through read_pm, which
 * fills npages entries from addr and returns 0 or -errno).  majflt_delta:
 * the process's major faults since the previous sample; steal_now:
 * the reclaim mark now (sp_sys_reclaim_mark).  Returns 0 or the error of
 * read_pm. */
int sp_ledger_sample(struct sp_ledger *l,
                     int (*read_pm)(void *arg, uint64_t addr, size_t npages, uint64_t *out),
                     void *arg, uint64_t majflt_delta, uint64_t steal_now);

/* Settle up to pages pending pages as wasted, oldest advice first.
 * Returns how many were settled. */
uint64_t sp_ledger_evict(struct sp_ledger *l, uint64_t pages);

/* The pending pages in [start, start + npages pages) that were advised when
 * the reclaim mark was steal_now, i.e. that nothing can have dropped from
 * the swap cache since (sp_sys_reclaim_mark): their addresses, in order, at
 * most max of them.  Returns how many. */
size_t sp_ledger_unreclaimed(const struct sp_ledger *l, uint64_t start, uint32_t npages,
                             uint64_t steal_now, uint64_t *addrs, size_t max);

/* Settle the pending pages at addrs as mapped.  Returns how many were
 * pending. */
uint64_t sp_ledger_mapped(struct sp_ledger *l, const uint64_t *addrs, size_t n);

/* The process has gone: every pending page is settled as freed. */
void sp_ledger_drop(struct sp_ledger *l);

#endif
