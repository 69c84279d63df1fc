#include "swap/ledger.h"

#include <stdlib.h>
#include <string.h>

#include "swap/pagemap.h"
#include "util/misc.h"

void sp_ledger_init(struct sp_ledger *l)
{
    memset(l, 0, sizeof *l);
}

void sp_ledger_free(struct sp_ledger *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->r[i].entry);
    free(l->r);
    memset(l, 0, sizeof *l);
}

/* First range whose start is >= addr. */
static size_t lower_bound(const struct sp_ledger *l, uint64_t addr)
{
    size_t lo = 0, hi = l->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (l->r[mid].start < addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void sp_ledger_add(struct sp_ledger *l, uint64_t start, uint32_t npages, const uint64_t *entries,
                   uint64_t now_ns, uint64_t steal_mark)
{
    uint32_t count = 0, first = npages, last = 0;
    for (uint32_t i = 0; i < npages; i++) {
        if (entries[i]) {
            count++;
            if (first == npages)
                first = i;
            last = i;
        }
    }
    if (count == 0 || npages > SP_LEDGER_MAX_SPAN)
        return;
    /* Keep only the span from the first to the last advised page. */
    struct sp_lrange r = {
        .start = start + (uint64_t)first * SP_PAGE_SIZE,
        .npages = last - first + 1,
        .pending = count,
        .stamp_ns = now_ns,
        .steal_mark = steal_mark,
    };
    r.entry = tc_xmalloc(r.npages * sizeof *r.entry);
    memcpy(r.entry, entries + first, r.npages * sizeof *r.entry);
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        l->r = realloc(l->r, l->cap * sizeof *l->r);
        if (l->r == NULL)
            abort();
    }
    size_t at = lower_bound(l, r.start);
    memmove(&l->r[at + 1], &l->r[at], (l->n - at) * sizeof *l->r);
    l->r[at] = r;
    l->n++;
    l->pages.prefetched += count;
    l->pages.pending += count;
}

static void remove_settled(struct sp_ledger *l);

/* The range tracking the pending page at addr, or NULL. */
static struct sp_lrange *find_pending(const struct sp_ledger *l, uint64_t addr)
{
    /* Ranges do not overlap in tracked pages but their spans may interleave;
     * look back from the first range starting after addr while a span of
     * at most SP_LEDGER_MAX_SPAN pages can still reach it. */
    size_t i = lower_bound(l, addr + 1);
    while (i > 0) {
        struct sp_lrange *r = &l->r[--i];
        uint64_t end = r->start + (uint64_t)r->npages * SP_PAGE_SIZE;
        if (addr >= r->start && addr < end && r->entry[(addr - r->start) >> SP_PAGE_SHIFT])
            return r;
        if (addr - r->start >= (uint64_t)SP_LEDGER_MAX_SPAN * SP_PAGE_SIZE)
            break;      /* no earlier span can reach addr */
    }
    return NULL;
}

bool sp_ledger_pending(const struct sp_ledger *l, uint64_t addr, uint64_t key)
{
    const struct sp_lrange *r = find_pending(l, addr);
    return r && pm_swap_key(r->entry[(addr - r->start) >> SP_PAGE_SHIFT]) == key;
}

size_t sp_ledger_unreclaimed(const struct sp_ledger *l, uint64_t start, uint32_t npages,
                             uint64_t steal_now, uint64_t *addrs, size_t max)
{
    size_t n = 0;
    for (uint32_t k = 0; k < npages && n < max; k++) {
        uint64_t addr = start + (uint64_t)k * SP_PAGE_SIZE;
        const struct sp_lrange *r = find_pending(l, addr);
        if (r && r->steal_mark == steal_now)
            addrs[n++] = addr;
    }
    return n;
}

uint64_t sp_ledger_mapped(struct sp_ledger *l, const uint64_t *addrs, size_t n)
{
    uint64_t done = 0;
    for (size_t i = 0; i < n; i++) {
        struct sp_lrange *r = find_pending(l, addrs[i]);
        if (r == NULL)
            continue;
        r->entry[(addrs[i] - r->start) >> SP_PAGE_SHIFT] = 0;
        r->pending--;
        l->pages.pending--;
        l->pages.mapped++;
        done++;
    }
    remove_settled(l);
    return done;
}

static void remove_settled(struct sp_ledger *l)
{
    size_t w = 0;
    for (size_t i = 0; i < l->n; i++) {
        if (l->r[i].pending == 0)
            free(l->r[i].entry);
        else
            l->r[w++] = l->r[i];
    }
    l->n = w;
}

int sp_ledger_sample(struct sp_ledger *l,
                     int (*read_pm)(void *arg, uint64_t addr, size_t npages, uint64_t *out),
                     void *arg, uint64_t majflt_delta, uint64_t steal_now)
{
    uint64_t *pm = NULL;
    size_t pm_cap = 0;
    uint64_t ambiguous = 0;
    int rc = 0;
    for (size_t i = 0; i < l->n; i++) {
        struct sp_lrange *r = &l->r[i];
        if (r->npages > pm_cap) {
            pm_cap = r->npages;
            free(pm);
            pm = tc_xmalloc(pm_cap * sizeof *pm);
        }
        rc = read_pm(arg, r->start, r->npages, pm);
        if (rc < 0)
            break;
        for (uint32_t k = 0; k < r->npages; k++) {
            uint64_t was = r->entry[k], now = pm[k];
            if (was == 0)
                continue;
            if (now & PM_PRESENT) {
                /* Touched: the fault mapped it. */
            } else if (now & PM_SWAPPED) {
                if (pm_swap_key(now) == pm_swap_key(was))
                    continue;   /* still pending */
                /* Touched, then swapped out again to another slot. */
            } else {
                l->pages.freed++;
                r->entry[k] = 0;
                r->pending--;
                l->pages.pending--;
                continue;
            }
            if (r->steal_mark == steal_now)
                l->pages.used++;
            else
                ambiguous++;
            r->entry[k] = 0;
            r->pending--;
            l->pages.pending--;
        }
    }
    free(pm);
    uint64_t late = TC_MIN(ambiguous, majflt_delta);
    l->pages.used += ambiguous - late;
    l->pages.wasted += late;
    remove_settled(l);
    return rc;
}

uint64_t sp_ledger_evict(struct sp_ledger *l, uint64_t pages)
{
    uint64_t done = 0;
    while (done < pages) {
        /* The oldest range with pending pages. */
        struct sp_lrange *old = NULL;
        for (size_t i = 0; i < l->n; i++)
            if (l->r[i].pending && (old == NULL || l->r[i].stamp_ns < old->stamp_ns))
                old = &l->r[i];
        if (old == NULL)
            break;
        for (uint32_t k = 0; k < old->npages && done < pages; k++) {
            if (old->entry[k]) {
                old->entry[k] = 0;
                old->pending--;
                l->pages.pending--;
                l->pages.wasted++;
                done++;
            }
        }
    }
    remove_settled(l);
    return done;
}

void sp_ledger_drop(struct sp_ledger *l)
{
    l->pages.freed += l->pages.pending;
    l->pages.pending = 0;
    for (size_t i = 0; i < l->n; i++)
        free(l->r[i].entry);
    l->n = 0;
}
