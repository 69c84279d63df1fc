/*
 * The reactor's timers (io/reactor.c): a binary min-heap of deadlines.
 * The heap alone, on a reactor without a ring: after every arm and cancel
 * the heap property holds, every armed timer sits at its heap_index, and
 * the earliest deadline is at the top; cancel from the middle, of the
 * last slot, of the top, of a timer not armed; re-arming moves a timer
 * instead of adding it twice; equal deadlines (under the virtual clock,
 * tc_virtual_now_ns); many timers popped in deadline order.  Then, with
 * an io_uring when the system gives one, timers fire through
 * reactor_poll(): in deadline order, never early, each once; a timer
 * cancelled by an earlier callback of the same pass does not fire; a
 * callback may re-arm its own timer.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/reactor.h"
#include "util/misc.h"

#include "check.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void never(struct tc_timer *t) { (void)t; check_failures++; }

/* Heap property, back pointers, armed flags, and the count of armed
 * timers among ts[0..n). */
static unsigned audit(const struct tc_reactor *r, const struct tc_timer *ts, size_t n)
{
    unsigned bad = 0;
    for (size_t i = 0; i < r->heap_len; i++) {
        const struct tc_timer *t = r->heap[i];
        if (!t->armed || t->heap_index != i)
            bad++;
        if (i > 0 && r->heap[(i - 1) / 2]->deadline > t->deadline)
            bad++;
    }
    size_t armed = 0;
    for (size_t i = 0; i < n; i++)
        armed += ts[i].armed;
    if (armed != r->heap_len)
        bad++;
    return bad;
}

/* Take every timer off the top; true if they came in deadline order and
 * the heap stayed sound. */
static bool drain_in_order(struct tc_reactor *r, struct tc_timer *ts, size_t n)
{
    uint64_t last = 0;
    bool ok = true;
    while (r->heap_len > 0) {
        struct tc_timer *t = r->heap[0];
        if (t->deadline < last)
            ok = false;
        last = t->deadline;
        timer_cancel(r, t);
        if (t->armed)
            ok = false;
        if ((r->heap_len & 63) == 0 && audit(r, ts, n) != 0)
            ok = false;
    }
    return ok;
}

static void check_heap(void)
{
    enum { N = 2000 };
    printf("heap of %d timers: arm, cancel from the middle, last and top, re-arm, drain\n", N);
    struct tc_reactor r;
    memset(&r, 0, sizeof r);        /* no ring: timer_arm and timer_cancel only */
    struct tc_timer *ts = calloc(N, sizeof *ts);
    if (ts == NULL)
        abort();
    tc_virtual_now_ns = 1000000000ull;
    for (size_t i = 0; i < N; i++) {
        ts[i].fn = never;
        timer_arm(&r, &ts[i], next_rand() % 1000000);
    }
    CHECK(r.heap_len == N && audit(&r, ts, N) == 0);
    CHECK(r.heap_cap >= N);

    /* Cancel a timer in the middle of the heap, one in the last slot, the
     * top, then one not armed and the same one twice. */
    struct tc_timer *mid = r.heap[N / 2 + 3];
    timer_cancel(&r, mid);
    CHECK(!mid->armed && r.heap_len == N - 1 && audit(&r, ts, N) == 0);
    struct tc_timer *last = r.heap[r.heap_len - 1];
    timer_cancel(&r, last);
    CHECK(!last->armed && r.heap_len == N - 2 && audit(&r, ts, N) == 0);
    struct tc_timer *top = r.heap[0];
    timer_cancel(&r, top);
    CHECK(!top->armed && r.heap_len == N - 3 && audit(&r, ts, N) == 0);
    for (size_t i = 0; i < r.heap_len; i++)
        CHECK(r.heap[i] != mid && r.heap[i] != last && r.heap[i] != top);
    timer_cancel(&r, top);
    CHECK(r.heap_len == N - 3 && audit(&r, ts, N) == 0);
    struct tc_timer loose = { .fn = never };
    timer_cancel(&r, &loose);
    CHECK(r.heap_len == N - 3);

    /* Re-arm: to the front, to the back, in place; never a second copy. */
    struct tc_timer *t = r.heap[r.heap_len / 3];
    tc_virtual_now_ns -= 1000;      /* earlier than every deadline */
    timer_arm(&r, t, 0);
    CHECK(r.heap[0] == t && r.heap_len == N - 3 && audit(&r, ts, N) == 0);
    tc_virtual_now_ns += 1000;
    timer_arm(&r, t, 5000000);      /* later than every deadline */
    CHECK(r.heap_len == N - 3 && audit(&r, ts, N) == 0 && t->heap_index >= r.heap_len / 2);
    timer_arm(&r, mid, 1);          /* a cancelled timer comes back */
    CHECK(r.heap_len == N - 2 && mid->armed && audit(&r, ts, N) == 0);

    /* Random cancels and re-arms, the heap audited as it goes. */
    unsigned bad = 0;
    for (int step = 0; step < 20000; step++) {
        struct tc_timer *x = &ts[next_rand() % N];
        if (x->armed && next_rand() % 2)
            timer_cancel(&r, x);
        else
            timer_arm(&r, x, next_rand() % 1000000);
        if (step % 97 == 0)
            bad += audit(&r, ts, N);
    }
    CHECK(bad == 0 && audit(&r, ts, N) == 0);
    CHECK(drain_in_order(&r, ts, N));
    CHECK(r.heap_len == 0 && audit(&r, ts, N) == 0);

    printf("equal deadlines: many timers on a few deadlines, cancels among equals\n");
    for (size_t i = 0; i < N; i++)
        timer_arm(&r, &ts[i], (next_rand() % 4) * 1000);    /* four deadlines */
    CHECK(audit(&r, ts, N) == 0);
    for (size_t i = 0; i < N; i += 3)
        timer_cancel(&r, &ts[i]);
    CHECK(audit(&r, ts, N) == 0);
    /* All on one deadline, then one earlier and one later. */
    for (size_t i = 0; i < N; i++)
        timer_arm(&r, &ts[i], 500);
    timer_arm(&r, &ts[N - 1], 499);
    timer_arm(&r, &ts[7], 501);
    CHECK(r.heap[0] == &ts[N - 1] && audit(&r, ts, N) == 0);
    for (size_t i = 100; i < 200; i++)
        timer_cancel(&r, r.heap[r.heap_len / 2]);
    CHECK(r.heap_len == N - 100 && audit(&r, ts, N) == 0);
    CHECK(drain_in_order(&r, ts, N));
    tc_virtual_now_ns = 0;
    free(r.heap);
    free(ts);
}

/* ---- firing through reactor_poll() ---- */

#define NF 64
static struct tc_timer ft[NF];
static int fired[NF], norder;
static uint64_t order_deadline[NF * 4];
static uint64_t fired_at[NF];
static int cancel_victim = -1, rearm_left;
static struct tc_reactor *fr;

static void on_fire(struct tc_timer *t)
{
    int i = (int)(t - ft);
    fired[i]++;
    fired_at[i] = tc_now_ns();
    if (norder < NF * 4)
        order_deadline[norder++] = t->deadline;
    if (fired_at[i] < t->deadline)
        check_failures++;           /* early */
    if (t->armed)
        check_failures++;           /* still in the heap while running */
    if (i == 0 && cancel_victim >= 0)
        timer_cancel(fr, &ft[cancel_victim]);
    if (i == 1 && rearm_left > 0) {
        rearm_left--;
        timer_arm(fr, t, 1000);
    }
}

static void check_firing(void)
{
    struct tc_reactor r;
    if (reactor_init(&r, 8) != 0) {
        printf("no io_uring here: firing through reactor_poll() not checked\n");
        return;
    }
    printf("firing through reactor_poll(): deadline order, never early, cancel and re-arm in callbacks\n");
    fr = &r;
    tc_virtual_now_ns = 5000000000ull;
    for (int i = 0; i < NF; i++)
        ft[i].fn = on_fire;
    /* ft[0] fires first and cancels ft[2], due in the same pass; ft[1]
     * re-arms itself three times. */
    timer_arm(&r, &ft[0], 5);
    timer_arm(&r, &ft[1], 10);
    timer_arm(&r, &ft[2], 10);
    cancel_victim = 2;
    rearm_left = 3;
    for (int i = 3; i < NF; i++)
        timer_arm(&r, &ft[i], 100 + (next_rand() % 8) * 100);   /* equal ones too */
    timer_cancel(&r, &ft[5]);
    timer_arm(&r, &ft[6], 2000);        /* re-armed before firing: once, later */

    /* Nothing is due yet at the current (virtual) time. */
    reactor_poll(&r, 0);
    CHECK(norder == 0 && r.heap_len == NF - 1);
    /* Step the clock; each poll runs what is due. */
    for (int step = 0; step < 40 && r.heap_len > 0; step++) {
        tc_virtual_now_ns += 100;
        reactor_poll(&r, 0);
    }
    CHECK(r.heap_len == 0);
    CHECK(fired[1] == 4 && fired[2] == 0 && fired[5] == 0 && fired[6] == 1);
    for (int i = 3; i < NF; i++)
        CHECK(i == 5 || fired[i] == 1);
    CHECK(norder == NF - 2 + 3);
    for (int k = 1; k < norder; k++)
        CHECK(order_deadline[k - 1] <= order_deadline[k]);
    CHECK(fired_at[6] >= 5000000000ull + 2000);
    tc_virtual_now_ns = 0;

    /* A real wait: a 2 ms timer wakes a poll that would wait a second. */
    memset(fired, 0, sizeof fired);
    cancel_victim = -1;
    timer_arm(&r, &ft[10], 2000000);
    uint64_t t0 = tc_now_ns();
    while (fired[10] == 0 && tc_now_ns() - t0 < 1000000000ull)
        reactor_poll(&r, 1000000000ull);
    CHECK(fired[10] == 1);
    CHECK(tc_now_ns() - t0 >= 2000000 && tc_now_ns() - t0 < 500000000ull);
    reactor_fini(&r);
}

int main(void)
{
    check_heap();
    check_firing();
    return check_exit("timer");
}
