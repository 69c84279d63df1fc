/*
 * Range locks (engine/rangelock.h): shared locks never wait for each
 * other; an exclusive one waits for every overlapping holder; ranges are
 * half-open, so adjacent ones never conflict; waiters are served first
 * come, first served (a shared request overlapping a waiting exclusive
 * one queues behind it), but a waiter is not held up by an earlier one it
 * does not overlap; one release grants every waiter it can, in queue
 * order, and the callbacks may acquire and release again.  Then a random
 * run checked after every step: no two granted locks conflict, and no
 * waiter could have been granted (no lost wake-up).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "engine/rangelock.h"
#include "util/misc.h"

#include "check.h"

/* Every granted_cb appends its entry here, in call order. */
static struct rl_entry *woken[64];
static unsigned nwoken;

static void on_granted(struct rl_entry *e)
{
    CHECK(e->granted);
    if (nwoken < TC_ARRAY_SIZE(woken))
        woken[nwoken++] = e;
}

static struct rl_entry lk(uint64_t start, uint64_t end, bool exclusive)
{
    return (struct rl_entry){ .start = start, .end = end, .exclusive = exclusive,
                              .granted_cb = on_granted };
}

static bool is_empty(const struct rangelock *rl)
{
    return rl->holders == NULL && rl->waiters == NULL && rl->waiters_tail == NULL &&
           rl->exclusive_holders == 0;
}

static void check_basic(void)
{
    printf("shared with shared, exclusive against shared and exclusive, adjacent ranges\n");
    struct rangelock rl = { 0 };
    struct rl_entry a = lk(0, 100, false), b = lk(50, 150, false), c = lk(99, 100, true);
    CHECK(rl_acquire(&rl, &a) && a.granted);
    CHECK(rl_acquire(&rl, &b) && b.granted);        /* shared overlapping shared */
    nwoken = 0;
    CHECK(!rl_acquire(&rl, &c) && !c.granted);      /* overlaps both by one byte */
    rl_release(&rl, &a);
    CHECK(nwoken == 0 && !c.granted);               /* b still overlaps [99, 100) */
    rl_release(&rl, &b);
    CHECK(nwoken == 1 && woken[0] == &c && c.granted);
    CHECK(rl.exclusive_holders == 1);
    rl_release(&rl, &c);
    CHECK(is_empty(&rl));

    /* Adjacent ranges: [0,10) [10,20) [20,30) all exclusive, all at once. */
    struct rl_entry x[3] = { lk(0, 10, true), lk(10, 20, true), lk(20, 30, true) };
    for (int i = 0; i < 3; i++)
        CHECK(rl_acquire(&rl, &x[i]));
    CHECK(rl.exclusive_holders == 3);
    /* A shared lock touching both ends of an exclusive one, not overlapping. */
    struct rl_entry s1 = lk(30, 40, false), s2 = lk(5, 10, false);
    CHECK(rl_acquire(&rl, &s1));
    nwoken = 0;
    CHECK(!rl_acquire(&rl, &s2));                   /* overlaps x[0] */
    rl_release(&rl, &x[1]);
    CHECK(nwoken == 0);
    rl_release(&rl, &x[0]);
    CHECK(nwoken == 1 && woken[0] == &s2);
    rl_release(&rl, &x[2]);
    rl_release(&rl, &s1);
    rl_release(&rl, &s2);
    CHECK(is_empty(&rl));

    /* An exclusive lock against an exclusive one: the second waits. */
    struct rl_entry e1 = lk(0, 4096, true), e2 = lk(4095, 8192, true), e3 = lk(4096, 8192, true);
    CHECK(rl_acquire(&rl, &e1));
    CHECK(!rl_acquire(&rl, &e2));
    /* e3 does not overlap e1 but overlaps the waiting e2: it queues. */
    CHECK(!rl_acquire(&rl, &e3));
    nwoken = 0;
    rl_release(&rl, &e1);
    CHECK(nwoken == 1 && woken[0] == &e2 && !e3.granted);
    rl_release(&rl, &e2);
    CHECK(nwoken == 2 && woken[1] == &e3);
    rl_release(&rl, &e3);
    CHECK(is_empty(&rl));
}

static void check_fairness(void)
{
    printf("first come, first served: shared requests queue behind a waiting exclusive one\n");
    struct rangelock rl = { 0 };
    struct rl_entry w1 = lk(0, 100, false);
    struct rl_entry rmw = lk(40, 60, true);
    struct rl_entry w2 = lk(50, 51, false);         /* overlaps the waiting rmw */
    struct rl_entry w3 = lk(60, 100, false);        /* overlaps w1 only (shared) */
    struct rl_entry w4 = lk(0, 40, false);
    CHECK(rl_acquire(&rl, &w1));
    CHECK(!rl_acquire(&rl, &rmw));
    CHECK(!rl_acquire(&rl, &w2));                   /* not starving the rmw */
    CHECK(rl_acquire(&rl, &w3));                    /* adjacent to the rmw: no wait */
    CHECK(rl_acquire(&rl, &w4));
    nwoken = 0;
    rl_release(&rl, &w3);
    rl_release(&rl, &w4);
    CHECK(nwoken == 0);
    rl_release(&rl, &w1);
    CHECK(nwoken == 1 && woken[0] == &rmw && rmw.granted && !w2.granted);
    rl_release(&rl, &rmw);
    CHECK(nwoken == 2 && woken[1] == &w2);
    rl_release(&rl, &w2);
    CHECK(is_empty(&rl));

    printf("one release grants every compatible waiter, in queue order\n");
    struct rl_entry big = lk(0, 1000, true);
    struct rl_entry q[6] = {
        lk(0, 10, false), lk(5, 15, false), lk(500, 600, true),
        lk(550, 560, false),    /* behind the exclusive [500,600): stays */
        lk(900, 1000, true), lk(0, 1, false),
    };
    CHECK(rl_acquire(&rl, &big));
    for (int i = 0; i < 6; i++)
        CHECK(!rl_acquire(&rl, &q[i]));
    nwoken = 0;
    rl_release(&rl, &big);
    CHECK(nwoken == 5);
    CHECK(woken[0] == &q[0] && woken[1] == &q[1] && woken[2] == &q[2] && woken[3] == &q[4] &&
          woken[4] == &q[5]);
    CHECK(!q[3].granted && rl.waiters == &q[3] && rl.waiters_tail == &q[3]);
    CHECK(rl.exclusive_holders == 2);
    rl_release(&rl, &q[2]);
    CHECK(nwoken == 6 && woken[5] == &q[3]);
    for (int i = 0; i < 6; i++)
        if (i != 2)
            rl_release(&rl, &q[i]);
    CHECK(is_empty(&rl));

    printf("a waiter is not held up by an earlier waiter it does not overlap\n");
    struct rl_entry h1 = lk(0, 10, false), h2 = lk(20, 30, true);
    struct rl_entry v1 = lk(0, 10, true), v2 = lk(20, 30, true);
    CHECK(rl_acquire(&rl, &h1) && rl_acquire(&rl, &h2));
    CHECK(!rl_acquire(&rl, &v1) && !rl_acquire(&rl, &v2));
    nwoken = 0;
    rl_release(&rl, &h2);
    CHECK(nwoken == 1 && woken[0] == &v2 && !v1.granted);
    CHECK(rl.waiters == &v1 && rl.waiters_tail == &v1 && v1.next == NULL && v1.prev == NULL);
    rl_release(&rl, &h1);
    CHECK(nwoken == 2 && woken[1] == &v1);
    rl_release(&rl, &v1);
    rl_release(&rl, &v2);
    CHECK(is_empty(&rl));
}

/* A callback that releases its own lock and asks again: the lists are
 * consistent when callbacks run, and the new request queues behind the
 * waiter that the release granted. */
static struct rangelock *cb_rl;
static struct rl_entry cb_next;
static int cb_calls;
static bool cb_granted_at_once;

static void release_and_retake(struct rl_entry *e)
{
    cb_calls++;
    rl_release(cb_rl, e);
    cb_next = lk(e->start, e->end, true);
    cb_granted_at_once = rl_acquire(cb_rl, &cb_next);
}

static void check_reentrant(void)
{
    printf("a granted callback may release and acquire again\n");
    struct rangelock rl = { 0 };
    cb_rl = &rl;
    struct rl_entry h = lk(0, 10, true), w = lk(0, 10, true), later = lk(5, 6, false);
    w.granted_cb = release_and_retake;
    CHECK(rl_acquire(&rl, &h));
    CHECK(!rl_acquire(&rl, &w));
    CHECK(!rl_acquire(&rl, &later));
    nwoken = 0;
    rl_release(&rl, &h);
    /* w was granted; its callback's release granted later (next in
     * line); cb_next conflicts with later and waits. */
    CHECK(cb_calls == 1 && !w.granted);
    CHECK(nwoken == 1 && woken[0] == &later && later.granted);
    CHECK(!cb_granted_at_once && !cb_next.granted);
    CHECK(rl.holders == &later && later.next == NULL && rl.waiters == &cb_next);
    rl_release(&rl, &later);
    CHECK(nwoken == 2 && woken[1] == &cb_next && cb_next.granted);
    rl_release(&rl, &cb_next);
    CHECK(is_empty(&rl));
}

/* ---- random run ---- */

#define NLOCKS 48

static uint64_t rng = 88172645463325252ull;
static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static bool conflict(const struct rl_entry *a, const struct rl_entry *b)
{
    return (a->exclusive || b->exclusive) && a->start < b->end && b->start < a->end;
}

/* Lock i is l[i]; held[i] and waiting[i] say what the callbacks and the
 * return values of rl_acquire() told. */
static bool held[NLOCKS], waiting[NLOCKS];
static struct rl_entry l[NLOCKS];

/* The invariants, from the lists: holders are granted and pairwise
 * compatible; every waiter conflicts with a holder or an earlier waiter;
 * the counts match. */
static unsigned audit(const struct rangelock *rl)
{
    unsigned bad = 0, nh = 0, nw = 0, excl = 0;
    for (const struct rl_entry *h = rl->holders; h; h = h->next) {
        nh++;
        if (!h->granted || !held[h - l])
            bad++;
        if (h->exclusive)
            excl++;
        if (h->next && h->next->prev != h)
            bad++;
        for (const struct rl_entry *o = h->next; o; o = o->next)
            if (conflict(h, o))
                bad++;
        if (nh > NLOCKS)
            return bad + 1000;
    }
    const struct rl_entry *last = NULL;
    for (const struct rl_entry *w = rl->waiters; w; w = w->next) {
        nw++;
        if (w->granted || !waiting[w - l] || w->prev != last)
            bad++;
        bool blocked = false;
        for (const struct rl_entry *h = rl->holders; h; h = h->next)
            blocked |= conflict(h, w);
        for (const struct rl_entry *o = rl->waiters; o != w; o = o->next)
            blocked |= conflict(o, w);
        if (!blocked)
            bad++;                  /* could run, yet waits: a lost wake-up */
        last = w;
        if (nw > NLOCKS)
            return bad + 1000;
    }
    if (rl->waiters_tail != last || excl != rl->exclusive_holders)
        bad++;
    unsigned want_h = 0, want_w = 0;
    for (int i = 0; i < NLOCKS; i++) {
        want_h += held[i];
        want_w += waiting[i];
    }
    if (want_h != nh || want_w != nw)
        bad++;
    return bad;
}


static void random_granted(struct rl_entry *e)
{
    long i = e - l;
    if (!waiting[i] || held[i])
        check_failures++;
    waiting[i] = false;
    held[i] = true;
}

static void check_random(void)
{
    printf("random run of %d locks over a small space: no conflicting holders, no lost wake-up\n",
           NLOCKS);
    struct rangelock rl = { 0 };
    unsigned bad = 0;
    for (int step = 0; step < 200000; step++) {
        int i = (int)(next_rand() % NLOCKS);
        if (held[i]) {
            held[i] = false;
            rl_release(&rl, &l[i]);
        } else if (!waiting[i]) {
            uint64_t s = next_rand() % 64, len = 1 + next_rand() % 12;
            l[i] = (struct rl_entry){ .start = s, .end = s + len,
                                      .exclusive = next_rand() % 4 == 0,
                                      .granted_cb = random_granted };
            if (rl_acquire(&rl, &l[i]))
                held[i] = true;
            else
                waiting[i] = true;
        }
        if (step % 7 == 0 || step < 2000)
            bad += audit(&rl);
    }
    /* Drain: release every holder until nothing waits. */
    for (int round = 0; round < NLOCKS + 1; round++)
        for (int i = 0; i < NLOCKS; i++)
            if (held[i]) {
                held[i] = false;
                rl_release(&rl, &l[i]);
            }
    for (int i = 0; i < NLOCKS; i++)
        if (held[i] || waiting[i])
            bad++;
    CHECK(bad == 0);
    CHECK(is_empty(&rl));
}

int main(void)
{
    check_basic();
    check_fairness();
    check_reentrant();
    check_random();
    return check_exit("rangelock");
}
