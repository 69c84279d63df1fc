/*
 * The decision to prefetch or to hold back, from two samples of the system
 * figures one interval apart.  Pure functions of their inputs, so that the
 * rules can be tested with made-up samples.
 *
 * The rules, checked in this order (the first that fails is the reason):
 *
 *   off          level 0
 *   swap-out     pswpout moved: something is being pushed out to swap, the
 *                opposite of the moment to bring pages back (every level)
 *   low memory   free memory is not above the sum of the zones' high
 *                watermarks plus the headroom: prefetch takes only memory
 *                that is free beyond that, so it never wakes reclaim and
 *                never evicts page cache (every level)
 *   allocation   others took memory at a rate that would use up the room
 *                above the headroom within 64 intervals (at least 1 MiB per
 *                interval): someone is allocating, and prefetch yields to
 *                them at once (every level)
 *   memory stall /proc/pressure/memory "some" above 10% of the interval:
 *                tasks are waiting for memory (every level)
 *   battery      on battery or in laptop mode (level 1 only)
 *   busy CPU     others used more than 10% of the CPU capacity, or runnable
 *                tasks waited (/proc/pressure/cpu "some") more than 10% of
 *                the interval (levels 1 and 2)
 *   busy I/O     tasks waited for I/O (/proc/pressure/io "some") more than
 *                5% of the interval (levels 1 and 2)
 *
 * The same memory rules apply to each memory cgroup with a limit, with its
 * limit minus its usage as the free memory (sp_decide_cgroup).
 */
#ifndef TC_SWAP_DECIDE_H
#define TC_SWAP_DECIDE_H

#include <stdbool.h>
#include <stdint.h>

#include "swap/sysstat.h"

enum sp_reason {
    SP_GO = 0,
    SP_OFF,
    SP_SWAP_OUT,
    SP_LOW_MEMORY,
    SP_ALLOCATION,
    SP_MEMORY_STALL,
    SP_ON_BATTERY,
    SP_CPU_BUSY,
    SP_IO_BUSY,
    SP_NREASONS
};

/* Thresholds; sp_policy_default() fills the documented values. */
struct sp_policy {
    int level;                  /* 0 off, 1 idle, 2 idle even on battery, 3 always */
    uint64_t headroom;          /* bytes kept free above the watermarks / below limits */
    double cpu_busy_max;        /* share of CPU capacity others may use (0.10) */
    double cpu_stall_max;       /* PSI cpu "some" share (0.10) */
    double io_stall_max;        /* PSI io "some" share (0.05) */
    double mem_stall_max;       /* PSI memory "some" share (0.10) */
    unsigned demand_intervals;  /* allocation rule horizon, intervals (64) */
    uint64_t demand_floor;      /* allocation below this per interval is noise (1 MiB) */
};

/* What one decision looks at besides the policy: two samples one interval
 * apart (or, between chunks, the interval's first sample and a light one
 * taken now), and what prefetch itself read in between, which must not be
 * mistaken for someone else's allocation. */
struct sp_inputs {
    const struct sp_sys *prev, *cur;
    uint64_t ours;              /* bytes prefetch read between prev and cur */
    bool on_battery, laptop_mode;
};

/* A decision, with the figures it was taken on (shown by --status). */
struct sp_verdict {
    enum sp_reason reason;
    uint64_t room;              /* free memory above watermarks + headroom, bytes */
    uint64_t demand;            /* others' allocation between the samples, bytes */
    uint64_t demand_limit;      /* what demand was compared with */
    double cpu_busy, cpu_stall, io_stall, mem_stall;
};

void sp_policy_default(struct sp_policy *p, int level, uint64_t headroom);

/* All rules. */
void sp_decide(const struct sp_policy *p, const struct sp_inputs *in, struct sp_verdict *v);
/* The memory rules only (swap-out, low memory, allocation): the check
 * before each chunk, against the sample taken at the start of the
 * interval. */
void sp_decide_memory(const struct sp_policy *p, const struct sp_inputs *in,
                      struct sp_verdict *v);

/* The memory rules for one cgroup with a limit: free = limit - usage.
 * usage_before is the usage at the previous decision, ours the bytes
 * prefetch read into it since.  Fills room and demand; returns SP_GO,
 * SP_LOW_MEMORY or SP_ALLOCATION. */
enum sp_reason sp_decide_cgroup(const struct sp_policy *p, uint64_t limit, uint64_t usage,
                                uint64_t usage_before, uint64_t ours, uint64_t *room,
                                uint64_t *demand);

/* Others' allocation is significant above this (bytes per interval). */
uint64_t sp_demand_limit(const struct sp_policy *p, uint64_t room);

/* "swap-out", "low memory", ... for messages; "swap_out", ... for JSON. */
const char *sp_reason_text(enum sp_reason r);
const char *sp_reason_key(enum sp_reason r);

#endif
