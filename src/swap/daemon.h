/*
 * The swap prefetch engine: the loop that samples, decides, scans and
 * prefetches, on the reactor (src/io/reactor.h) with two timers.
 *
 *   tick (every interval)                 chunk (paced by the rate)
 *   ─────────────────────                 ─────────────────────────
 *   sample /proc figures                  re-check memory and swap-out
 *   settle the ledgers (used/wasted)      against the tick's sample
 *   refresh cgroup figures                pick the next extent in order,
 *   decide (decide.h)                     within its cgroup's room
 *   go twice in a row: scan if needed,    advise it (prefetch.h)
 *     start the chunks                    re-arm after size / rate
 *   no go: stop the chunks, count why
 *
 * States: WAITING (held back; the reason is kept), PREFETCHING, IDLE
 * (nothing left to prefetch; a rescan happens when the amount of swap in use
 * changes, or every 30 seconds), HELD (there is work, but every candidate's
 * cgroup is out of room).
 *
 * Invariant: the chunk timer is armed only in PREFETCHING.  Every page the
 * engine advises is in exactly one process's ledger until it settles.
 */
#ifndef TC_SWAP_DAEMON_H
#define TC_SWAP_DAEMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "io/reactor.h"
#include "swap/cgroup.h"
#include "swap/decide.h"
#include "swap/ledger.h"
#include "swap/scan.h"
#include "swap/sysstat.h"

struct tc_json;

/* What the command line asked for. */
struct sp_config {
    int level;                  /* 0..3, as the kernel patch's vm.swap_prefetch */
    uint64_t interval_ns;       /* sampling interval */
    uint64_t rate;              /* bytes per second of advice, at most */
    uint64_t headroom;          /* bytes kept free (system and each limited cgroup) */
    const char *cgroup;         /* hierarchy path to restrict to; NULL: all processes */
    bool once;                  /* one pass, then on_done */
    bool map;                   /* --map: map prefetched pages into their process */
};

/* A process the engine knows: found with swapped memory by a scan, and kept
 * while it lives so that its figures stay.  ext[next..n) are the extents
 * left to prefetch, in order (order.h). */
struct sp_proc {
    pid_t pid;
    uint64_t starttime;         /* with pid, names the process (PIDs are reused) */
    char comm[32];
    int cgroup;                 /* cgroup record index, -1 without a hierarchy */
    int pidfd;                  /* opened at the first prefetch; -1 before */
    uint64_t swap_bytes;        /* VmSwap at the last scan */
    uint64_t swap_at_build;     /* VmSwap when ext was built; UINT64_MAX: never */
    uint64_t cpu_ticks;         /* utime + stime at the last scan */
    uint64_t last_ran_ns;       /* estimate of when it last ran (order.h) */
    uint64_t majflt;            /* major faults at the last ledger sample */
    struct sp_extent *ext;
    size_t next, n;
    struct sp_ledger ledger;
    uint64_t read_pages;        /* pages read from swap for it */
    /* --map: the span of the last chunk advised, not mapped yet.  It is
     * mapped when the next chunk for the process is due, or at the next
     * tick, so that its reads have had time to complete and the mapping
     * does not wait on them. */
    uint64_t map_start;
    uint32_t map_npages;
    bool map_denied;            /* the kernel refused process_vm_readv for it */
    bool denied;                /* the kernel refused advice for it */
    bool seen;                  /* found by the scan in progress */
};

enum sp_state { SP_WAITING, SP_PREFETCHING, SP_IDLE, SP_HELD };

/* The engine's whole state.  prev is the last tick's sample: decisions
 * compare the next sample with it, and the checks between chunks compare a
 * light sample with it, so that ours_since_tick (prefetch's own reads since
 * then) can be told apart from others' allocations.  Outcome totals are
 * the exited processes' (gone) plus the live ones' ledgers. */
#define SP_RECENT_STOPS 8

struct sp_daemon {
    struct sp_config cfg;
    struct sp_policy policy;
    struct tc_reactor *reactor;
    struct tc_timer tick_timer, chunk_timer;

    struct sp_sys prev;         /* the sample of the last tick */
    uint64_t ours_since_tick;   /* bytes read by prefetch since that sample */
    struct sp_verdict verdict;  /* the last decision */
    enum sp_state state;
    unsigned calm;              /* consecutive "go" decisions */
    unsigned ticks;
    bool on_battery, laptop_mode;
    bool offsets_visible;       /* pagemap shows swap offsets (CAP_SYS_ADMIN) */

    /* Why prefetch stopped or was held back: counted once per change of
     * reason while there was (or may have been) something to prefetch. */
    uint64_t stops[SP_NREASONS];
    enum sp_reason held_reason; /* the reason being counted, SP_GO if none */
    uint64_t last_stop_ns;
    enum sp_reason last_stop_reason;
    char last_stop_scope[256];  /* "system" or a cgroup path */
    /* The last SP_RECENT_STOPS stops, oldest first from recent_next
     * (a ring): one reason may follow another within an interval, so the
     * last alone can hide the one an operator asks about. */
    struct sp_stop {
        uint64_t at_ns;         /* 0: slot unused */
        enum sp_reason reason;
        char scope[256];
    } recent_stops[SP_RECENT_STOPS];
    unsigned recent_next;
    uint64_t last_chunk_ns;
    uint64_t cgroup_held;       /* times every candidate's cgroup was full */

    struct sp_cgroups cgroups;
    struct sp_proc **procs;     /* the known processes; order: by rank after a scan */
    size_t nprocs, cap;

    struct sp_outcome gone;     /* outcomes of processes that have exited */
    uint64_t gone_read;
    uint64_t chunks, errors, scans;
    uint64_t swap_used_at_scan; /* SwapTotal - SwapFree at the last scan */
    uint64_t last_scan_ns;
    bool need_scan;
    uint64_t lost_prev_global;  /* eviction estimate at the last tick, pages */
    uint64_t started_ns;

    /* --once: called when the pass has ended (nothing left, or held back);
     * once_reason says why it ended. */
    void (*on_done)(struct sp_daemon *d);
    bool done;
    enum sp_reason once_reason;
};

/* Check the system and set up; false with a message on failure. */
bool sp_daemon_init(struct sp_daemon *d, struct tc_reactor *r, const struct sp_config *cfg,
                    char *err, size_t errlen);
/* Take the first sample and arm the first tick. */
void sp_daemon_start(struct sp_daemon *d);
/* Cancel the timers (the reactor can then run dry). */
void sp_daemon_stop(struct sp_daemon *d);
void sp_daemon_free(struct sp_daemon *d);

/* The figures, as members of the current JSON object (report.c). */
void sp_daemon_status_json(const struct sp_daemon *d, struct tc_json *j);
/* Totals over live and exited processes, in pages. */
void sp_daemon_totals(const struct sp_daemon *d, struct sp_outcome *o, uint64_t *read_pages);

const char *sp_state_name(enum sp_state s);

#endif
