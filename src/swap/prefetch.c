#include "swap/prefetch.h"

#include <errno.h>
#include <string.h>

#include "swap/madvise.h"
#include "swap/pagemap.h"
#include "swap/sysstat.h"

int sp_prefetch_chunk(int pidfd, int pagemap_fd, struct sp_extent *e, uint32_t max_pages,
                      struct sp_ledger *l, uint64_t steal_mark, uint64_t now_ns,
                      struct sp_chunk *c)
{
    uint64_t pm[SP_EXTENT_MAX_PAGES], entries[SP_EXTENT_MAX_PAGES];
    struct iovec iov[SP_EXTENT_MAX_PAGES / 2 + 1];
    memset(c, 0, sizeof *c);
    uint32_t span = e->npages;
    if (span > SP_EXTENT_MAX_PAGES)
        span = SP_EXTENT_MAX_PAGES;
    if (span == 0 || max_pages == 0)
        return 0;
    c->err = sp_pagemap_read(pagemap_fd, e->start, span, pm);
    if (c->err < 0)
        return c->err;

    /* The pages to advise, as contiguous runs; stop after max_pages. */
    size_t niov = 0;
    uint32_t k, count = 0;
    for (k = 0; k < span && count < max_pages; k++) {
        uint64_t addr = e->start + ((uint64_t)k << SP_PAGE_SHIFT);
        entries[k] = 0;
        if (!(pm[k] & PM_SWAPPED) || (pm[k] & PM_PRESENT))
            continue;
        if (sp_ledger_pending(l, addr, pm_swap_key(pm[k])))
            continue;
        entries[k] = pm[k];
        count++;
        if (niov > 0 && (char *)iov[niov - 1].iov_base + iov[niov - 1].iov_len == (char *)addr)
            iov[niov - 1].iov_len += SP_PAGE_SIZE;
        else
            iov[niov++] = (struct iovec){ (void *)addr, SP_PAGE_SIZE };
    }
    uint32_t handled = k;       /* pages of the span looked at */

    if (niov > 0) {
        uint64_t before = 0, after = 0;
        bool counted = sp_sys_pswpin(&before);
        ssize_t r = sp_willneed(pidfd, iov, niov);
        if (counted && sp_sys_pswpin(&after) && after > before)
            c->read = after - before;
        if (r < 0) {
            /* Nothing is known to be advised; nothing is recorded. */
            c->err = (int)r;
            c->read = 0;
            return c->err;
        }
        /* A partial result covers the first r bytes of the iovecs. */
        uint64_t left = (uint64_t)r;
        for (uint32_t i = 0; i < handled; i++) {
            if (!entries[i])
                continue;
            if (left >= SP_PAGE_SIZE) {
                left -= SP_PAGE_SIZE;
                c->advised++;
            } else {
                entries[i] = 0;
            }
        }
        if (c->read > c->advised)
            c->read = c->advised;
        sp_ledger_add(l, e->start, handled, entries, now_ns, steal_mark);
    }

    /* What is left of the extent: the pages after those looked at. */
    if (handled >= e->npages) {
        e->npages = 0;
    } else {
        e->start += (uint64_t)handled << SP_PAGE_SHIFT;
        e->npages -= handled;
    }
    return 0;
}
