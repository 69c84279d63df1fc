/*
 * Range locks over byte offsets of the volume (engine/rangelock.h).
 */
#include "engine/rangelock.h"

#include <stddef.h>

#include "util/assert.h"

static bool overlaps(const struct rl_entry *a, const struct rl_entry *b)
{
    return a->start < b->end && b->start < a->end;
}

static bool conflicts(const struct rl_entry *a, const struct rl_entry *b)
{
    return (a->exclusive || b->exclusive) && overlaps(a, b);
}

static bool compatible_with_holders(struct rangelock *rl, const struct rl_entry *e)
{
    if (!e->exclusive && rl->exclusive_holders == 0)
        return true;
    for (struct rl_entry *h = rl->holders; h; h = h->next)
        if (conflicts(h, e))
            return false;
    return true;
}

static bool blocked_by_waiter(struct rangelock *rl, const struct rl_entry *e,
                              const struct rl_entry *stop)
{
    for (struct rl_entry *w = rl->waiters; w && w != stop; w = w->next)
        if (conflicts(w, e))
            return true;
    return false;
}

static void hold(struct rangelock *rl, struct rl_entry *e)
{
    e->granted = true;
    e->prev = NULL;
    e->next = rl->holders;
    if (rl->holders)
        rl->holders->prev = e;
    rl->holders = e;
    if (e->exclusive)
        rl->exclusive_holders++;
}

bool rl_acquire(struct rangelock *rl, struct rl_entry *e)
{
    TC_ASSERT_ALWAYS(e->start < e->end);
    e->granted = false;
    if (compatible_with_holders(rl, e) && !blocked_by_waiter(rl, e, NULL)) {
        hold(rl, e);
        return true;
    }
    e->next = NULL;
    e->prev = rl->waiters_tail;
    if (rl->waiters_tail)
        rl->waiters_tail->next = e;
    else
        rl->waiters = e;
    rl->waiters_tail = e;
    return false;
}

void rl_release(struct rangelock *rl, struct rl_entry *e)
{
    TC_ASSERT_ALWAYS(e->granted && (!e->exclusive || rl->exclusive_holders > 0));
    if (e->prev)
        e->prev->next = e->next;
    else
        rl->holders = e->next;
    if (e->next)
        e->next->prev = e->prev;
    if (e->exclusive)
        rl->exclusive_holders--;
    e->granted = false;

    /* Grant, in order, every waiter compatible with the holders and with
     * the waiters still ahead of it; run the callbacks once the lists are
     * consistent, since a callback may acquire or release again. */
    struct rl_entry *wake = NULL, **wake_tail = &wake;
    for (struct rl_entry *w = rl->waiters, *next; w; w = next) {
        next = w->next;
        if (!compatible_with_holders(rl, w) || blocked_by_waiter(rl, w, w))
            continue;
        if (w->prev)
            w->prev->next = w->next;
        else
            rl->waiters = w->next;
        if (w->next)
            w->next->prev = w->prev;
        else
            rl->waiters_tail = w->prev;
        hold(rl, w);        /* keeps invariant 15 */
        w->wake_next = NULL;
        *wake_tail = w;
        wake_tail = &w->wake_next;
    }
    while (wake) {
        struct rl_entry *w = wake;
        wake = w->wake_next;
        w->granted_cb(w);
    }
}
