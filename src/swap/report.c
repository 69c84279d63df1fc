/*
 * The figures of the swap prefetch engine as JSON: what `tiercache
 * swap-prefetch --status` prints and what the control socket's "status"
 * returns.  Keys ending in _bytes are bytes, _ratio fractions, _ns
 * CLOCK_MONOTONIC nanoseconds (the same clock as Python's time.monotonic()).
 */
#include <string.h>
#include <unistd.h>

#include "swap/daemon.h"
#include "swap/pagemap.h"
#include "util/json.h"
#include "util/misc.h"

static void outcome_json(struct tc_json *j, const struct sp_outcome *o, uint64_t read_pages)
{
    json_uint(j, "prefetched_bytes", o->prefetched * SP_PAGE_SIZE);
    json_uint(j, "read_bytes", read_pages * SP_PAGE_SIZE);
    json_uint(j, "used_bytes", o->used * SP_PAGE_SIZE);
    json_uint(j, "wasted_bytes", o->wasted * SP_PAGE_SIZE);
    json_uint(j, "freed_bytes", o->freed * SP_PAGE_SIZE);
    json_uint(j, "mapped_bytes", o->mapped * SP_PAGE_SIZE);
    json_uint(j, "pending_bytes", o->pending * SP_PAGE_SIZE);
    /* Of the pages whose fate is known, the share that was used. */
    uint64_t settled = o->used + o->wasted + o->freed;
    if (settled)
        json_double(j, "hit_ratio", (double)o->used / (double)settled);
    else
        json_null(j, "hit_ratio");
}

void sp_daemon_status_json(const struct sp_daemon *d, struct tc_json *j)
{
    json_int(j, "level", d->cfg.level);
    json_string(j, "state", sp_state_name(d->state));
    json_string(j, "reason", sp_reason_key(d->verdict.reason));
    json_string(j, "reason_text", sp_reason_text(d->verdict.reason));
    json_uint(j, "interval_ms", d->cfg.interval_ns / 1000000);
    json_uint(j, "rate_bytes", d->cfg.rate);
    json_uint(j, "headroom_bytes", d->cfg.headroom);
    if (d->cfg.cgroup)
        json_string(j, "cgroup", d->cfg.cgroup);
    else
        json_null(j, "cgroup");
    json_bool(j, "once", d->cfg.once);
    json_bool(j, "map", d->cfg.map);
    json_uint(j, "now_ns", tc_now_ns());
    json_uint(j, "started_ns", d->started_ns);

    struct sp_outcome o;
    uint64_t rd;
    sp_daemon_totals(d, &o, &rd);
    outcome_json(j, &o, rd);
    json_uint(j, "chunks", d->chunks);
    json_uint(j, "errors", d->errors);
    json_uint(j, "scans", d->scans);
    json_uint(j, "last_chunk_ns", d->last_chunk_ns);

    json_begin_object(j, "stops");
    json_uint(j, "pressure", d->stops[SP_SWAP_OUT] + d->stops[SP_LOW_MEMORY] +
                                 d->stops[SP_ALLOCATION] + d->stops[SP_MEMORY_STALL]);
    for (int r = SP_SWAP_OUT; r < SP_NREASONS; r++)
        json_uint(j, sp_reason_key((enum sp_reason)r), d->stops[r]);
    json_uint(j, "cgroup_held", d->cgroup_held);
    json_end_object(j);
    if (d->last_stop_ns) {
        json_begin_object(j, "last_stop");
        json_string(j, "reason", sp_reason_key(d->last_stop_reason));
        json_string(j, "scope", d->last_stop_scope);
        json_uint(j, "at_ns", d->last_stop_ns);
        json_end_object(j);
    } else {
        json_null(j, "last_stop");
    }
    json_begin_array(j, "recent_stops");
    for (unsigned i = 0; i < SP_RECENT_STOPS; i++) {
        const struct sp_stop *st = &d->recent_stops[(d->recent_next + i) % SP_RECENT_STOPS];
        if (!st->at_ns)
            continue;
        json_begin_object(j, NULL);
        json_string(j, "reason", sp_reason_key(st->reason));
        json_string(j, "scope", st->scope);
        json_uint(j, "at_ns", st->at_ns);
        json_end_object(j);
    }
    json_end_array(j);

    const struct sp_sys *s = &d->prev;
    const struct sp_verdict *v = &d->verdict;
    json_begin_object(j, "system");
    json_uint(j, "free_bytes", s->mem_free);
    json_uint(j, "watermark_bytes", s->wmark_high);
    json_uint(j, "room_bytes", v->room);
    json_uint(j, "demand_bytes", v->demand);
    json_uint(j, "swap_total_bytes", s->swap_total);
    json_uint(j, "swap_used_bytes", s->swap_total - s->swap_free);
    json_uint(j, "swap_cached_bytes", s->swap_cached);
    json_double(j, "cpu_busy_ratio", v->cpu_busy);
    json_double(j, "cpu_stall_ratio", v->cpu_stall);
    json_double(j, "io_stall_ratio", v->io_stall);
    json_double(j, "memory_stall_ratio", v->mem_stall);
    json_bool(j, "on_battery", d->on_battery);
    json_bool(j, "laptop_mode", d->laptop_mode);
    json_bool(j, "swap_offsets_visible", d->offsets_visible);
    json_end_object(j);

    json_begin_array(j, "cgroups");
    for (size_t i = 0; i < d->cgroups.n; i++) {
        const struct sp_cgroup *c = &d->cgroups.v[i];
        /* The root is the whole machine: "system" covers it. */
        if (!c->exists || c->parent < 0 || (c->limit == UINT64_MAX && c->prefetched == 0))
            continue;
        json_begin_object(j, NULL);
        json_string(j, "path", c->path);
        if (c->limit == UINT64_MAX)
            json_null(j, "limit_bytes");
        else
            json_uint(j, "limit_bytes", c->limit);
        json_uint(j, "usage_bytes", c->usage);
        json_uint(j, "room_bytes", c->limit == UINT64_MAX ? 0 : c->room);
        json_uint(j, "swap_bytes", c->swap);
        json_uint(j, "prefetched_bytes", c->prefetched);
        json_uint(j, "held_back", c->held_back);
        json_string(j, "hold", c->hold ? sp_reason_key((enum sp_reason)c->hold) : "go");
        json_end_object(j);
    }
    json_end_array(j);

    json_begin_array(j, "processes");
    for (size_t i = 0; i < d->nprocs; i++) {
        const struct sp_proc *p = d->procs[i];
        json_begin_object(j, NULL);
        json_int(j, "pid", p->pid);
        json_string(j, "name", p->comm);
        json_string(j, "cgroup", p->cgroup >= 0 ? d->cgroups.v[p->cgroup].path : "");
        json_uint(j, "swapped_bytes", p->swap_bytes);
        uint64_t left = 0;
        for (size_t k = p->next; k < p->n; k++)
            left += p->ext[k].swapped;
        json_uint(j, "left_bytes", p->denied ? 0 : left * SP_PAGE_SIZE);
        outcome_json(j, &p->ledger.pages, p->read_pages);
        json_bool(j, "denied", p->denied);
        json_end_object(j);
    }
    json_end_array(j);
}
