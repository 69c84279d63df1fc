/*
 * One chunk of prefetch: re-read an extent's pagemap entries, advise
 * MADV_WILLNEED on the pages that are still swapped (and not already
 * prefetched), and record them in the process's ledger.
 *
 * A chunk is at most SP_EXTENT_MAX_PAGES pages (2 MiB): one system call,
 * short enough that the daemon checks memory between two of them, so that
 * it can stop within a fraction of an interval.
 */
#ifndef TC_SWAP_PREFETCH_H
#define TC_SWAP_PREFETCH_H

#include <stdint.h>

#include "swap/ledger.h"
#include "swap/scan.h"

/* The outcome of one chunk. */
struct sp_chunk {
    uint64_t advised;           /* pages advised */
    uint64_t read;              /* pages read from swap meanwhile (pswpin; see below) */
    int err;                    /* 0, or -errno of the pagemap read or the advice */
};

/* Prefetch at most max_pages pages of e, from its start.  On return e
 * covers what is left of it (npages 0 when done).  read is the rise of the
 * system's pswpin counter across the call, capped at advised: pages
 * already in the swap cache are advised but not read, and a swap-in by
 * someone else at the same moment would be counted too.  Returns c->err. */
int sp_prefetch_chunk(int pidfd, int pagemap_fd, struct sp_extent *e, uint32_t max_pages,
                      struct sp_ledger *l, uint64_t steal_mark, uint64_t now_ns,
                      struct sp_chunk *c);

#endif
