/*
 * The engine's private view of a volume.  The public API is
 * include/tiercache.h; this header is shared by the files of src/engine/.
 *
 * A request travels:
 *
 *   tc_submit()                      volume.c
 *     └─ unaligned?  align.c: bounce buffer, read-modify-write under a
 *                    range lock, then the aligned request below
 *     └─ aligned:    the mode's path: passthrough.c (no cache) or the
 *                    cache paths, each completing through ereq_done()
 *
 * The engine's invariants are numbered across its headers (this one: 1-2;
 * cache.h: 3, 5; map.h: 7-9, 18; space.h: 4, 6, 10; log.h: 11, 12, 19-21;
 * blocklock.h: 13, 14; rangelock.h: 15, 16; verify.h: 17), cited where
 * they are kept ("keeps invariant 7") and asserted where that is cheap
 * (util/assert.h).
 *
 * Invariant 1: a request given to tc_submit() has a known op and, unless
 * it is a flush, lies inside the volume (offset + length <= size); no write,
 * trim or write-zeroes is given to a read-only volume.
 *
 * Invariant 2: below align.c every request is whole sectors: offset and
 * length are multiples of 4096, and a read's or write's buffer is
 * 4096-aligned; so is every read and write the engine gives a device (the
 * contract of io/dev.h, asserted by dev_submit()).
 */
#ifndef TC_ENGINE_ENGINE_H
#define TC_ENGINE_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/rangelock.h"
#include "io/dev.h"
#include "io/reactor.h"
#include "tiercache.h"

/* An engine-internal request flag: admit whatever this read misses
 * (NBD_CMD_CACHE asks for exactly that). */
#define EREQ_FORCE_ADMIT (1u << 31)
#define EREQ_READAHEAD (1u << 30)     /* the engine's own read-ahead: not a client read */
/* A read made for a client request that is not a read: the head and tail
 * sectors a write's read-modify-write merges (align.c), the read of an
 * NBD_CMD_CACHE (cache_prefetch()).  It runs as a client read (the same
 * admission, fills and streams) but is not counted as one: read_hits and
 * read_misses (and their bytes) count client read requests, each once,
 * so that hits + misses is the number of reads the clients sent. */
#define EREQ_SUB_READ (1u << 29)

/* One aligned request inside the engine. */
struct ereq {
    struct tc_volume *vol;
    enum tc_op op;
    unsigned flags;
    uint64_t off, len;              /* multiples of 4096 */
    void *buf;                      /* 4096-aligned */
    struct tc_extent *extents;      /* BLOCK_STATUS */
    unsigned max_extents, nr_extents;
    int err;                        /* first error, 0 or -errno */
    unsigned pending;               /* sub-operations in flight */
    void (*complete)(struct ereq *e);   /* called once, with e->err */
    void (*after_unlock)(struct ereq *e);   /* engine_submit_locked() */
    void *owner;                    /* the caller's context */
    struct rl_entry lock;           /* shared range lock of write types */
    struct tc_dev_io dio;           /* the one device I/O of simple paths */
    uint64_t start_ns;
    bool via_cache;                 /* dispatched to the cache path */
    struct ereq *held_next;         /* held at the detach gate */
    void (*lost_next)(struct ereq *e);  /* lost_passthrough(): the completion after it */
    /* A FLUSH without a cache (passthrough.c): it covers writes the origin
     * acknowledged since the last one was sent, the oldest in epoch
     * covers_epoch. */
    bool covers_writes;
    uint64_t covers_epoch;
};

struct engine_stats {
    uint64_t requests[8];
    uint64_t read_bytes, write_bytes;
    uint64_t unaligned_reads, unaligned_writes;
    uint64_t errors;
};

struct tc_volume {
    struct tc_reactor *reactor;
    struct tc_volume_config cfg;
    struct tc_dev *origin;
    uint64_t size;                  /* exported, a multiple of 4096 */
    enum tc_mode mode;
    bool read_only;
    bool closing;
    bool stopping;                  /* tc_volume_stopping(): no new drain starts */
    struct rangelock locks;
    struct engine_stats stats;
    uint64_t opened_ns;
    unsigned inflight;
    /* close */
    void (*close_done)(void *arg, int err);
    void *close_arg;
    struct tc_dev_io close_dio;
    struct cache *cache;            /* NULL: no cache devices */
    /* The origin's record names this cache set (io/originrec.c): removed
     * at a clean stop that leaves the origin holding every write. */
    bool origin_recorded;
    /* The set a start with a cache names as the origin's writer before the
     * cache is open (origin_first_write()). */
    bool writer_set_known;
    uint8_t writer_set[16];
    /* Origin writes failed so far because that record could not be made,
     * and when that was last said. */
    uint64_t writer_record_failures;
    uint64_t writer_record_said_ns;
    /* Its lock among the daemons that may write the origin (io/claim.c). */
    struct claim_set *origin_claim;
    bool detached;                  /* the cache is emptied and unused */
    bool cache_failed;              /* every cache device failed: origin only */
    /* Detach gate: while closed, new requests wait here until the cache
     * path has no request left and the cache is emptied. */
    bool gate;
    bool detaching;                 /* a detach is under way */
    bool flushing_dirty;            /* a flush of the dirty data (tiercache flush) drains */
    /* The stop's own flush (--flush-on-stop) asked while a flush, detach
     * or mode change drained: it runs once that ends (op_finish()). */
    tc_progress_fn stop_flush_progress;
    void (*stop_flush_done)(void *arg, int err);
    void *stop_flush_arg;
    unsigned cache_inflight;        /* requests in the cache path */
    struct ereq *held_head, **held_tail;
    struct tc_task gate_task;
    void *gate_op;
    /* A running checkpoint's hold (volume_hold(), checkpoint.c): new
     * requests wait in the same list as at the gate, and hold_quiet runs
     * once the cache path has no request left.  The list goes on when
     * neither the gate nor the hold keeps it. */
    bool holding;
    void (*hold_quiet)(void *arg);
    void *hold_arg;
    struct tc_task hold_task;
    enum tc_mode mode_before_detach;    /* what tc_volume_attach() goes back to */
    char *attach_state_file;        /* the state file kept across an attach (owned) */
    /* An attach replaces vol->cache (attach.c): a close asked for meanwhile
     * (a signal handled while the set is read again) waits for its end. */
    bool attaching, close_after_attach;
    /* An attach closed the detached cache and could not open it again
     * while it recorded lost sectors: no request can be answered safely
     * (reads of lost sectors would return the origin's older data), so
     * every request fails until a restart. */
    bool fenced;
    /* The paths' check (volume.c, paths_check()): once a second and at
     * each FLUSH, whether a file origin or a cache file still has its name
     * (io/dev.h, dev_file_unlinked()), and a block device's path still
     * names its device number (dev_block_path()).  A cache device that
     * lost it is failed (engine/failure.c: its dirty data goes to the
     * origin or the devices left, read through the descriptor, and
     * nothing stays only in it); an
     * origin that lost it refuses every write and flush (its writes could
     * not be made durable under its name): origin_gone, set once, never
     * cleared.  The reasons are kept for status and the stop. */
    struct tc_timer path_timer;
    bool origin_gone;
    char origin_gone_why[1200];     /* "": the origin has its name */
    char cache_gone_why[1200];      /* the first cache file found so, or "" */
    /* Why the last flush, mode change or detach failed ("" if it did not). */
    char op_error[512];
    /* The path without a cache (passthrough.c): writes the origin
     * acknowledged that no FLUSH sent since covers, and the connection
     * epoch (struct tc_dev) of the oldest; FLUSHes failed because a
     * connection was lost after such writes. */
    bool unflushed_writes;
    uint64_t unflushed_epoch;
    uint64_t flushes_failed_connection_lost;
};

/* volume.c */
struct ereq *ereq_new(struct tc_volume *vol);
void ereq_free(struct ereq *e);
/* Run an aligned request through the volume's path; e->complete is called. */
void engine_dispatch(struct ereq *e);
/* The same, holding the shared range lock a write-type request needs. */
void engine_submit_locked(struct ereq *e);
/* Open the detach gate: the requests held there go on. */
void volume_open_gate(struct tc_volume *vol);
/* Hold new requests (a running checkpoint's barrier, checkpoint.c):
 * quiet(arg) runs once no request is left in the cache path;
 * volume_hold_release() lets the held ones go on.  Only while the gate
 * is open and no attach or detach is under way. */
bool volume_can_hold(const struct tc_volume *vol);
void volume_hold(struct tc_volume *vol, void (*quiet)(void *arg), void *arg);
void volume_hold_release(struct tc_volume *vol);
/* The paths' check (struct tc_volume's path_timer) runs from now on if any
 * of the volume's devices is a file: at open, and after an attach. */
void volume_paths_watch(struct tc_volume *vol);

/* align.c: requests not aligned to 4096 (offset, length or buffer),
 * which align_needed() tells from the rest (invariant 2: the engine below
 * sees whole sectors only; a flush has no range). */
void align_submit(struct tc_volume *vol, struct tc_request *req);
static inline bool align_needed(const struct tc_request *req)
{
    switch (req->op) {
    case TC_OP_READ:
    case TC_OP_WRITE:
        return ((req->offset | req->length) & (TC_SECTOR - 1)) ||
               ((uintptr_t)req->buf & (TC_SECTOR - 1));
    case TC_OP_TRIM:
    case TC_OP_WRITE_ZEROES:
    case TC_OP_CACHE:
    case TC_OP_BLOCK_STATUS:
        return (req->offset | req->length) & (TC_SECTOR - 1);
    default:
        return false;
    }
}

/* passthrough.c: straight to the origin. */
/* blockstatus.c: the origin's allocation, with what the cache holds (or
 * lost) as data; for both the cache and the origin-only paths. */
void engine_block_status(struct ereq *e);
void passthrough_submit(struct ereq *e);

#endif
