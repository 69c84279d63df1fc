#include "swap/decide.h"

#include <string.h>

void sp_policy_default(struct sp_policy *p, int level, uint64_t headroom)
{
    memset(p, 0, sizeof *p);
    p->level = level;
    p->headroom = headroom;
    p->cpu_busy_max = 0.10;
    p->cpu_stall_max = 0.10;
    p->io_stall_max = 0.05;
    p->mem_stall_max = 0.10;
    p->demand_intervals = 64;
    p->demand_floor = 1ull << 20;
}

uint64_t sp_demand_limit(const struct sp_policy *p, uint64_t room)
{
    uint64_t lim = room / (p->demand_intervals ? p->demand_intervals : 1);
    return lim > p->demand_floor ? lim : p->demand_floor;
}

/* Others' net allocation: the drop in free memory not explained by what
 * prefetch read.  Frees by others in the same interval offset it. */
static uint64_t others_took(uint64_t free_before, uint64_t free_now, uint64_t ours)
{
    if (free_now >= free_before)
        return 0;
    uint64_t drop = free_before - free_now;
    return drop > ours ? drop - ours : 0;
}

void sp_decide_memory(const struct sp_policy *p, const struct sp_inputs *in,
                      struct sp_verdict *v)
{
    const struct sp_sys *a = in->prev, *b = in->cur;
    memset(v, 0, sizeof *v);
    uint64_t floor = b->wmark_high + p->headroom;
    v->room = b->mem_free > floor ? b->mem_free - floor : 0;
    v->demand = others_took(a->mem_free, b->mem_free, in->ours);
    v->demand_limit = sp_demand_limit(p, v->room);
    if (p->level <= 0)
        v->reason = SP_OFF;
    else if (b->pswpout != a->pswpout)
        v->reason = SP_SWAP_OUT;
    else if (v->room == 0)
        v->reason = SP_LOW_MEMORY;
    else if (v->demand > v->demand_limit)
        v->reason = SP_ALLOCATION;
    else
        v->reason = SP_GO;
}

void sp_decide(const struct sp_policy *p, const struct sp_inputs *in, struct sp_verdict *v)
{
    const struct sp_sys *a = in->prev, *b = in->cur;
    sp_decide_memory(p, in, v);
    uint64_t elapsed = b->ns > a->ns ? b->ns - a->ns : 0;
    v->cpu_busy = sp_sys_cpu_busy(a, b);
    v->cpu_stall = sp_sys_stall(&a->psi_cpu, &b->psi_cpu, elapsed);
    v->io_stall = sp_sys_stall(&a->psi_io, &b->psi_io, elapsed);
    v->mem_stall = sp_sys_stall(&a->psi_mem, &b->psi_mem, elapsed);
    if (v->reason != SP_GO)
        return;
    if (v->mem_stall > p->mem_stall_max)
        v->reason = SP_MEMORY_STALL;
    else if (p->level == 1 && (in->on_battery || in->laptop_mode))
        v->reason = SP_ON_BATTERY;
    else if (p->level < 3 && (v->cpu_busy > p->cpu_busy_max || v->cpu_stall > p->cpu_stall_max))
        v->reason = SP_CPU_BUSY;
    else if (p->level < 3 && v->io_stall > p->io_stall_max)
        v->reason = SP_IO_BUSY;
}

enum sp_reason sp_decide_cgroup(const struct sp_policy *p, uint64_t limit, uint64_t usage,
                                uint64_t usage_before, uint64_t ours, uint64_t *room,
                                uint64_t *demand)
{
    uint64_t floor = usage + p->headroom;
    *room = limit > floor ? limit - floor : 0;
    /* Usage rising is others' allocation, as free memory falling is. */
    *demand = others_took(UINT64_MAX - usage_before, UINT64_MAX - usage, ours);
    if (*room == 0)
        return SP_LOW_MEMORY;
    if (*demand > sp_demand_limit(p, *room))
        return SP_ALLOCATION;
    return SP_GO;
}

static const char *const reason_text[SP_NREASONS] = {
    [SP_GO] = "go",
    [SP_OFF] = "off (level 0)",
    [SP_SWAP_OUT] = "pages are being swapped out",
    [SP_LOW_MEMORY] = "free memory is down to the watermarks plus headroom",
    [SP_ALLOCATION] = "memory is being allocated",
    [SP_MEMORY_STALL] = "tasks are stalling on memory",
    [SP_ON_BATTERY] = "on battery or in laptop mode",
    [SP_CPU_BUSY] = "the CPU is busy",
    [SP_IO_BUSY] = "I/O is busy",
};

static const char *const reason_key[SP_NREASONS] = {
    [SP_GO] = "go",
    [SP_OFF] = "off",
    [SP_SWAP_OUT] = "swap_out",
    [SP_LOW_MEMORY] = "low_memory",
    [SP_ALLOCATION] = "allocation",
    [SP_MEMORY_STALL] = "memory_stall",
    [SP_ON_BATTERY] = "battery",
    [SP_CPU_BUSY] = "cpu",
    [SP_IO_BUSY] = "io",
};

const char *sp_reason_text(enum sp_reason r)
{
    return (unsigned)r < SP_NREASONS ? reason_text[r] : "?";
}

const char *sp_reason_key(enum sp_reason r)
{
    return (unsigned)r < SP_NREASONS ? reason_key[r] : "?";
}
