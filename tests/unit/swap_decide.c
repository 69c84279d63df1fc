/*
 * The swap prefetch decision rules (src/swap/decide.h) with made-up
 * samples: each level, each reason, and the per-cgroup rules; and the
 * ledger's settling of pages (src/swap/ledger.h) from made-up pagemaps.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "swap/decide.h"
#include "swap/ledger.h"
#include "swap/order.h"
#include "swap/pagemap.h"

#include "check.h"

#define MiB (1ull << 20)
#define SEC 1000000000ull

/* A quiet machine: 16 GiB, 8 GiB free, 100 MiB of watermarks, 4 CPUs. */
static void quiet(struct sp_sys *a, struct sp_sys *b)
{
    memset(a, 0, sizeof *a);
    a->ns = 100 * SEC;
    a->mem_total = 16384 * MiB;
    a->mem_free = 8192 * MiB;
    a->wmark_high = 100 * MiB;
    a->swap_total = 4096 * MiB;
    a->swap_free = 3072 * MiB;
    a->cpu_capacity_ns = 1000 * SEC;
    a->cpu_busy_ns = 100 * SEC;
    a->psi_cpu.ok = a->psi_io.ok = a->psi_mem.ok = true;
    *b = *a;
    b->ns = a->ns + SEC;
    b->cpu_capacity_ns = a->cpu_capacity_ns + 4 * SEC;     /* 4 CPUs for 1 s */
    b->cpu_busy_ns = a->cpu_busy_ns + SEC / 100;            /* 0.25% busy */
}

static enum sp_reason decide(int level, const struct sp_sys *a, const struct sp_sys *b,
                             uint64_t ours, bool battery, bool laptop)
{
    struct sp_policy p;
    sp_policy_default(&p, level, 64 * MiB);
    struct sp_inputs in = { a, b, ours, battery, laptop };
    struct sp_verdict v;
    sp_decide(&p, &in, &v);
    return v.reason;
}

static void test_levels(void)
{
    struct sp_sys a, b;
    quiet(&a, &b);
    CHECK(decide(0, &a, &b, 0, false, false) == SP_OFF);
    for (int level = 1; level <= 3; level++)
        CHECK(decide(level, &a, &b, 0, false, false) == SP_GO);

    /* Battery and laptop mode: only level 1 cares. */
    CHECK(decide(1, &a, &b, 0, true, false) == SP_ON_BATTERY);
    CHECK(decide(1, &a, &b, 0, false, true) == SP_ON_BATTERY);
    CHECK(decide(2, &a, &b, 0, true, true) == SP_GO);
    CHECK(decide(3, &a, &b, 0, true, true) == SP_GO);

    /* Busy CPU: others use 50% of the capacity. */
    struct sp_sys c = b;
    c.cpu_busy_ns = a.cpu_busy_ns + 2 * SEC;
    CHECK(decide(1, &a, &c, 0, false, false) == SP_CPU_BUSY);
    CHECK(decide(2, &a, &c, 0, false, false) == SP_CPU_BUSY);
    CHECK(decide(3, &a, &c, 0, false, false) == SP_GO);
    /* ... unless it is the daemon's own time. */
    c.self_cpu_ns = a.self_cpu_ns + 2 * SEC;
    CHECK(decide(1, &a, &c, 0, false, false) == SP_GO);

    /* Runnable tasks waiting for a CPU (PSI cpu 20%). */
    c = b;
    c.psi_cpu.some_us = a.psi_cpu.some_us + 200000;
    CHECK(decide(1, &a, &c, 0, false, false) == SP_CPU_BUSY);
    CHECK(decide(3, &a, &c, 0, false, false) == SP_GO);

    /* Busy I/O: tasks waited for I/O 10% of the interval. */
    c = b;
    c.psi_io.some_us = a.psi_io.some_us + 100000;
    CHECK(decide(1, &a, &c, 0, false, false) == SP_IO_BUSY);
    CHECK(decide(2, &a, &c, 0, false, false) == SP_IO_BUSY);
    CHECK(decide(3, &a, &c, 0, false, false) == SP_GO);
    c.psi_io.some_us = a.psi_io.some_us + 40000;            /* 4%: idle enough */
    CHECK(decide(1, &a, &c, 0, false, false) == SP_GO);
}

static void test_memory_rules(void)
{
    struct sp_sys a, b, c;
    quiet(&a, &b);

    /* Swap-out at every level. */
    c = b;
    c.pswpout = a.pswpout + 1;
    for (int level = 1; level <= 3; level++)
        CHECK(decide(level, &a, &c, 0, false, false) == SP_SWAP_OUT);

    /* Free memory down to watermarks + headroom, at every level. */
    c = b;
    c.mem_free = a.wmark_high + 64 * MiB;
    c.mem_free = a.mem_free = c.mem_free;
    for (int level = 1; level <= 3; level++)
        CHECK(decide(level, &a, &c, 0, false, false) == SP_LOW_MEMORY);
    c.mem_free = a.mem_free = a.wmark_high + 64 * MiB + 4096;
    CHECK(decide(3, &a, &c, 0, false, false) == SP_GO);

    /* Others allocating: 8 GiB free, room ~8 GiB, the limit is room/64
     * (~127 MiB per interval). */
    quiet(&a, &b);
    c = b;
    c.mem_free = a.mem_free - 200 * MiB;
    for (int level = 1; level <= 3; level++)
        CHECK(decide(level, &a, &c, 0, false, false) == SP_ALLOCATION);
    /* ... not when it is what prefetch read. */
    CHECK(decide(1, &a, &c, 200 * MiB, false, false) == SP_GO);
    c.mem_free = a.mem_free - 100 * MiB;
    CHECK(decide(1, &a, &c, 0, false, false) == SP_GO);
    /* With little room the same allocation is significant. */
    a.mem_free = 1024 * MiB;
    c.mem_free = a.mem_free - 100 * MiB;
    CHECK(decide(1, &a, &c, 0, false, false) == SP_ALLOCATION);

    /* Tasks stalling on memory (PSI memory 20%), at every level. */
    quiet(&a, &b);
    c = b;
    c.psi_mem.some_us = a.psi_mem.some_us + 200000;
    for (int level = 1; level <= 3; level++)
        CHECK(decide(level, &a, &c, 0, false, false) == SP_MEMORY_STALL);

    /* The memory-only check between chunks ignores the CPU. */
    c = b;
    c.cpu_busy_ns = a.cpu_busy_ns + 4 * SEC;
    struct sp_policy p;
    sp_policy_default(&p, 1, 64 * MiB);
    struct sp_inputs in = { &a, &c, 0, false, false };
    struct sp_verdict v;
    sp_decide_memory(&p, &in, &v);
    CHECK(v.reason == SP_GO);
    CHECK(v.room == 8192 * MiB - 100 * MiB - 64 * MiB);
}

static void test_cgroup_rules(void)
{
    struct sp_policy p;
    sp_policy_default(&p, 1, 32 * MiB);
    uint64_t room, demand;
    /* 512 MiB limit, 160 MiB used: room 320 MiB. */
    CHECK(sp_decide_cgroup(&p, 512 * MiB, 160 * MiB, 160 * MiB, 0, &room, &demand) == SP_GO);
    CHECK(room == 320 * MiB && demand == 0);
    /* Prefetch itself raised usage by 16 MiB: not others' allocation. */
    CHECK(sp_decide_cgroup(&p, 512 * MiB, 176 * MiB, 160 * MiB, 16 * MiB, &room, &demand) ==
          SP_GO);
    CHECK(demand == 0);
    /* Others took 16 MiB: above max(1 MiB, 304/64 MiB). */
    CHECK(sp_decide_cgroup(&p, 512 * MiB, 192 * MiB, 160 * MiB, 16 * MiB, &room, &demand) ==
          SP_ALLOCATION);
    CHECK(demand == 16 * MiB);
    /* Usage at the limit minus headroom. */
    CHECK(sp_decide_cgroup(&p, 512 * MiB, 480 * MiB, 480 * MiB, 0, &room, &demand) ==
          SP_LOW_MEMORY);
    CHECK(room == 0);
    /* Usage falling is no allocation. */
    CHECK(sp_decide_cgroup(&p, 512 * MiB, 100 * MiB, 200 * MiB, 0, &room, &demand) == SP_GO);
    CHECK(demand == 0);
}

/* ---- the ledger ---- */

#define SWP(off) (PM_SWAPPED | ((uint64_t)(off) << 5) | 1)
#define BASE 0x7f0000000000ull

static uint64_t fake_pm[64];

static int fake_read(void *arg, uint64_t addr, size_t n, uint64_t *out)
{
    (void)arg;
    size_t first = (size_t)((addr - BASE) >> SP_PAGE_SHIFT);
    for (size_t i = 0; i < n; i++)
        out[i] = first + i < 64 ? fake_pm[first + i] : 0;
    return 0;
}

static void test_ledger(void)
{
    struct sp_ledger l;
    sp_ledger_init(&l);
    uint64_t e[8];
    for (int i = 0; i < 8; i++) {
        e[i] = SWP(100 + i);
        fake_pm[i] = e[i];
    }
    e[3] = 0;   /* page 3 not advised (say it was present) */
    sp_ledger_add(&l, BASE, 8, e, 1, 500);
    CHECK(l.pages.prefetched == 7 && l.pages.pending == 7);
    CHECK(sp_ledger_pending(&l, BASE + 2 * 4096, pm_swap_key(SWP(102))));
    CHECK(!sp_ledger_pending(&l, BASE + 3 * 4096, pm_swap_key(SWP(103))));
    CHECK(!sp_ledger_pending(&l, BASE + 2 * 4096, pm_swap_key(SWP(999))));

    /* Pages 0, 1 touched (present), 2 freed, 4 swapped again elsewhere;
     * no reclaim since (steal mark unchanged): all touches are used. */
    fake_pm[0] = PM_PRESENT;
    fake_pm[1] = PM_PRESENT;
    fake_pm[2] = 0;
    fake_pm[4] = SWP(7000);
    sp_ledger_sample(&l, fake_read, NULL, 5, 500);
    CHECK(l.pages.used == 3);
    CHECK(l.pages.freed == 1);
    CHECK(l.pages.pending == 3);
    CHECK(l.pages.wasted == 0);

    /* Reclaim happened (steal moved): two touches, one major fault in the
     * interval: one counted wasted, one used. */
    fake_pm[5] = PM_PRESENT;
    fake_pm[6] = PM_PRESENT;
    sp_ledger_sample(&l, fake_read, NULL, 1, 900);
    CHECK(l.pages.used == 4);
    CHECK(l.pages.wasted == 1);
    CHECK(l.pages.pending == 1);

    /* The swap cache shows the last pending page gone. */
    CHECK(sp_ledger_evict(&l, 5) == 1);
    CHECK(l.pages.wasted == 2 && l.pages.pending == 0);
    CHECK(l.n == 0);
    CHECK(l.pages.prefetched ==
          l.pages.used + l.pages.wasted + l.pages.freed + l.pages.pending);

    /* A process exit settles what is pending as freed. */
    for (int i = 0; i < 8; i++)
        e[i] = fake_pm[i] = SWP(200 + i);
    sp_ledger_add(&l, BASE, 8, e, 2, 900);
    sp_ledger_drop(&l);
    CHECK(l.pages.freed == 9 && l.pages.pending == 0);
    sp_ledger_free(&l);
}

static void test_order(void)
{
    struct sp_extent x[3] = {
        { .start = 0x3000, .recency = 10 },
        { .start = 0x1000, .recency = 50 },
        { .start = 0x2000, .recency = 50 },
    };
    sp_order_extents(x, 3);
    CHECK(x[0].start == 0x1000 && x[1].start == 0x2000 && x[2].start == 0x3000);
    struct sp_rank r[3] = { { 5, 30 }, { 9, 20 }, { 5, 10 } };
    qsort(r, 3, sizeof r[0], sp_rank_cmp);
    CHECK(r[0].pid == 20 && r[1].pid == 10 && r[2].pid == 30);
}

int main(void)
{
    test_levels();
    test_memory_rules();
    test_cgroup_rules();
    test_ledger();
    test_order();
    return check_exit("swap_decide");
}
