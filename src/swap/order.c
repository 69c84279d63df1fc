#include "swap/order.h"

#include <stdlib.h>

static int extent_cmp(const void *pa, const void *pb)
{
    const struct sp_extent *a = pa, *b = pb;
    if (a->recency != b->recency)
        return a->recency > b->recency ? -1 : 1;
    if (a->start != b->start)
        return a->start < b->start ? -1 : 1;
    return 0;
}

void sp_order_extents(struct sp_extent *v, size_t n)
{
    if (n > 1)
        qsort(v, n, sizeof *v, extent_cmp);
}

int sp_rank_cmp(const void *pa, const void *pb)
{
    const struct sp_rank *a = pa, *b = pb;
    if (a->last_ran_ns != b->last_ran_ns)
        return a->last_ran_ns > b->last_ran_ns ? -1 : 1;
    return (a->pid > b->pid) - (a->pid < b->pid);
}
