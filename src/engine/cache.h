/*
 * The cache: the fast tier of a volume, and the composition of the
 * engine's modules (struct cache holds their state, or pointers to it).
 * This header declares attach, close, detach and status (cache.c); each
 * module declares the rest in its own header:
 *
 *   state embedded here     map.h (the index: index.c, map.c; lost.h),
 *                           space.h, log.h, budget.h, originwin.h, abandon.h,
 *                           stats.h (the counters)
 *   behind a pointer        policy/policy.h, blocklock.h, cleaner.h,
 *                           writeback.h, verify.h, stream.h, readahead.h
 *   the request paths       readpath.h, writepath.h, cacheio.h
 *   failures, their record  failure.h, lostlog.h (and abandon.h)
 *   at attach               recovery.h (and check.h: check and salvage)
 *
 * src/LAYERS says which file may include which header.
 *
 * Data structures, from the client's block to the device sector:
 *
 *   origin block ──index──► struct centry ──(seg, off)──► segment ──► device
 *   (block_size bytes)       valid/dirty masks,           a run of chunks,
 *                            policy hint                  one per large write
 *
 * - The index (index.c) maps an origin block number to its entry.  An
 *   entry says where the block's cached sectors are: one location holding
 *   exactly the valid sectors, packed in order (a partly cached block
 *   takes only the space of its valid sectors).  Dirty data may have a
 *   second copy (the mirror) on another device.
 * - Segments (space.c) are written as one log in groups (see
 *   format/ondisk.h): every append lands in the open group; groups are
 *   reclaimed oldest first by the cleaner (cleaner.c), which keeps what
 *   the policy calls hot by appending it again and writes dirty data back
 *   to the origin before a segment is reused.
 * - The log (log.c) buffers appends in an image of each open segment in
 *   RAM and writes them as chunks: one header sector(s) plus data, in one
 *   I/O.  While a segment has an image, reads of it are served from RAM.
 * - Block locks (blocklock.c) order the operations on one block: the
 *   steps of a write (read old sectors, append the merged version), the
 *   origin writes of writeback, and fills after misses.
 *
 * Invariants (numbered across the engine's headers: engine.h has 1 and 2;
 * map.h, space.h and log.h have more):
 *
 * Invariant 3: every sector an entry calls valid holds data at least as
 * new as the origin's; a dirty sector is newer than the origin's.
 *
 * Invariant 5: a group is reused only after its dirty data is on the
 * origin (or copied, still dirty, into a newer group) and a durable chunk
 * has recorded the new log tail (the group is older than c->lg.tail_seq).
 *
 * Invariants 4 and 6 (entries point into live groups; nothing is read
 * from a segment being rewritten) are space.h's.
 */
#ifndef TC_ENGINE_CACHE_H
#define TC_ENGINE_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/abandon.h"
#include "engine/budget.h"
#include "engine/engine.h"
#include "engine/log.h"
#include "engine/map.h"
#include "engine/originwin.h"
#include "engine/space.h"
#include "engine/stats.h"
#include "format/ondisk.h"
#include "io/reactor.h"

struct cache;
struct policy;

/* ---- devices of the cache ---- */

/* CDEV_DRAINING: the last device in service, failed (nothing is appended
 * to it, the cache is abandoned), but dirty data only it holds is still
 * read from it to be written back (failure.c); CDEV_FAILING once none is
 * left, and at once for a device that fails while others are in service.
 * Such an earlier-failed device whose dirty data still waited for its
 * rescue when the last one failed drains too (failure.c, rescues_drain()):
 * devices start draining only at that last failure, all at once. */
enum cdev_state { CDEV_OK, CDEV_DRAINING, CDEV_FAILING, CDEV_MISSING };
/* "ok", "draining", "failing", "missing": for status and messages. */
const char *cdev_state_name(enum cdev_state s);

/* A dirty fragment kept on a draining device (failure.c). */
struct drain_item {
    uint64_t oblock;
    uint32_t seg;
    uint16_t off;
};

struct cache_dev {
    struct tc_dev *dev;
    struct tc_superblock sb;
    uint32_t first_seg, nsegs;
    enum cdev_state state;
    /* While draining: the dirty fragments still to be written back, the
     * dirty bytes they held at the last check, and why the device failed. */
    struct drain_item *drain;
    size_t ndrain;
    uint64_t drain_left_bytes;
    /* Nothing left to drain: the end is being recorded (an origin flush,
     * then the state file without the drained sectors; failure.c,
     * drain_end()); the device drains until that is done.  After a
     * failed attempt, the next one waits until drain_end_retry_ns. */
    bool drain_ending;
    uint64_t drain_end_retry_ns;
    /* Failed, with others in service: dirty fragments of its segments'
     * RAM images that found no room to be appended elsewhere, kept in the
     * index until their rescue (failure.c) appends them; the images stay
     * while any is (log.c, image_release()). */
    uint32_t image_keeps;
    char fail_why[160];
    bool written_since_flush;
    uint64_t bytes_admitted;
    /* The newest chunk the scan at start found on it, whose header checks
     * (0: none, or the state came from a checkpoint): what the sequence
     * record's entry for the device is compared with (seqrec.c). */
    uint64_t newest_chunk;
    /* The newest the scan found at or below cache.seqrec_bound (0: none,
     * or not counted): what a record of that chunk vouches for on it. */
    uint64_t newest_at_bound;
};

struct blocklocks;
struct cleaner;
struct ckpt_run;
struct readahead;
struct ghost;
struct rewrite;
struct streams;
struct verify_cache;
struct writeback;

struct cache {
    struct tc_volume *vol;
    struct tc_reactor *reactor;
    unsigned ndevs;
    struct cache_dev devs[TC_MAX_DEVICES];
    uint8_t set_uuid[16];
    struct claim_set *set_claim;    /* the set's identity, locked (io/claim.c) */
    struct claim_set *state_claim;  /* its state file, while serving */
    uint32_t block_size, spb;       /* sectors per block */
    uint32_t segment_size, seg_sectors;
    uint64_t nblocks_origin;

    struct map map;                 /* map.h: index, dirty set, lost set */
    struct policy *policy;          /* policy/policy.h */
    struct blocklocks *locks;       /* blocklock.h */
    struct writeback *wb;           /* writeback.h */
    struct cleaner *cleaner;        /* cleaner.h */
    struct ckpt_run *ckrun;         /* checkpoint.h: running checkpoints (NULL: off) */
    struct verify_cache *verify;    /* verify.h: the CRCs of chunks read or written */
    struct streams *streams;        /* stream.h: sequential streams */
    struct readahead *ra;           /* readahead.h */
    /* Group fills (readpath.c): the blocks group-filled lately, and how
     * many fills were issued and read in the current window. */
    struct {
        struct ghost *ghost;
        uint64_t issued, used, probe;
        unsigned inflight;
    } group;

    /* --fill auto (readpath.c): the current choice (TC_FILL_SECTORS,
     * _BLOCK or _GROUP), the requests that decided a fill, and how many
     * of them filled sectors, blocks, groups; test_costs: the costs are
     * fixed by TIERCACHE_TEST_FILL_COST (test[]: origin request ns, byte
     * ns, cache request ns, write byte ns). */
    struct {
        enum tc_fill choice;
        uint64_t decisions;
        uint64_t decided[3];
        bool test_costs;
        double test[4];
    } fillauto;

    struct space sp;                /* space.h: segments, groups, free space */
    struct log lg;                  /* log.h: heads, chunks, sequence, durability */

    struct cache_stats st;          /* stats.h: the counters status reports */
    struct budget budget;
    uint64_t lost_events, lost_events_reported;     /* losses, and those a flush reported */
    uint64_t lost_unrecorded;       /* LOST records that found no room in the log, with
                                       a device in service (lostlog.c): a device failure
                                       waits for room to record the set again (failure.c) */
    struct origin_window owin;      /* originwin.h: acknowledged, no flush covered them yet */
    bool offline;                   /* check and dump: read only, no background work */
    bool in_memory;                 /* every device a memory device (replay's): the set
                                       lives and dies with the process */
    bool replaying;                 /* recovery applies the log's entries (invariant 8) */
    char *damage;                   /* recovery: damaged durable summaries, one a line
                                       (NULL: none); serve refuses such a cache */
    /* The newest group holding damage (0: none; UINT64_MAX: a damaged
     * place whose group is unknown).  Every version a damaged chunk held
     * is older than the first group after it: salvage trusts only dirty
     * versions in groups newer than this. */
    uint64_t damage_group_max;
    /* --adopt-origin accepted an origin known written behind the cache
     * (originstop.c): every clean sector is compared with it at the
     * start, not a sample. */
    bool adopt_compare_all;
    uint64_t trace_block;           /* TIERCACHE_TRACE_BLOCK: log its changes, or ~0 */
    bool data_free;                 /* tc_volume_config.data_free: data are zeroes, unread */
    uint64_t recovery_ns;
    /* The newest chunk recovery knows durable (a header's flushed mark,
     * the clean stop's record); the sequence record starts from it. */
    uint64_t recovered_durable;
    bool newest_chunks_known;       /* the scan set devs[].newest_chunk (recovery.c) */
    uint64_t seqrec_bound;          /* the sequence record's chunk before the scan
                                       (seqrec_bound_read()), or 0 */
    struct seqrec *seqrec;          /* seqrec.c: the record of how far the log reached */
    uint64_t last_flush_wall_ns;
    uint64_t last_client_io_ns;     /* a read, write or discard last began (writeback
                                       works faster once clients are idle) */
    bool degraded;
    struct rewrite *rewrites_waiting;   /* failure.c: rewrites waiting for room */
    unsigned rewrites_unappended;   /* failure.c: rewrites begun, not yet appended */
    uint64_t rewrites_appended;     /* ... appended (tombstone and version) */
    uint64_t rewrite_read_retries;  /* ... reads of theirs that failed and are tried again */
    unsigned rescues_pending;       /* failure.c: blocks whose only-copy dirty data on a
                                       failed device is still to be read back and appended
                                       on a survivor (the cleaner keeps their groups) */
    uint32_t rescue_epoch;          /* ... raised when the pending rescues give up */
    uint64_t rescued_bytes;         /* dirty bytes read back from failed devices, appended */
    uint64_t rescue_lost_bytes;     /* ... that could not be read back: lost */
    bool rescue_wb_running;         /* failure.c: the rescues' data goes to the origin */
    uint64_t rescue_writebacks;     /* ... attempts begun (the cleaner needed their groups) */
    uint64_t rescue_origin_refusals;    /* ... fragments the origin refused, kept to be
                                         * written again (writeback_block_given_up()) */
    uint64_t rescued_to_origin_bytes;   /* ... fragment bytes dropped from failed devices
                                           once on the origin, not appended */
    bool stopping;                  /* cache_stopping(): nothing waits for room */
    const char *test_no_tombstone_room;   /* TIERCACHE_TEST_NO_TOMBSTONE_ROOM (failure.c) */
    /* Nonzero while a device failure's LOST records are appended
     * (failure.c): lostlog.c bounds them as tombstones are
     * (cleaner_record_fits()); the failure path records the set again
     * once there is room (relost_start()). */
    unsigned records_bounded;
    struct tc_timer stop_room;      /* ... then, STOP_ROOM_WAIT_NS later, client
                                       writes waiting for room fail (cache.c) */
    /* The clean stop's chunk, once every device's superblock records the
     * stop (0: not recorded): the set's stop record names it (volume.c,
     * io/originrec.c). */
    uint64_t stop_chunk_recorded;
    uint64_t stop_room_failed_writes;   /* client write pieces failed so */
    /* Dirty sectors (bytes) a device failure's rewrites lost while the
     * cache was stopping (failure.c, rewrite_lose(): no room even in the
     * cleaner's reserve, or unreadable): recorded lost, and the stop
     * fails (cache.c, close_finish()), so the exit status says acknowledged
     * data was lost. */
    uint64_t stop_rewrite_lost_bytes;
    uint64_t stop_rewrite_lost_blocks;
    /* ... the first origin byte of them, and the origin's error when it
     * refused them (failure.c, rewrite_to_origin()). */
    uint64_t stop_rewrite_lost_first;
    int stop_rewrite_origin_err;
    /* Dirty sectors (bytes) and blocks such rewrites, finding no room,
     * wrote to the origin instead (failure.c, rewrite_to_origin()). */
    uint64_t stop_rewrite_origin_bytes;
    uint64_t stop_rewrite_origin_blocks;
    unsigned rewrites_to_origin;        /* such writes in flight: the close waits */
    /* ... those written, waiting for the next origin flush, and those
     * whose flush is in flight (failure.c, struct rewrite) */
    struct rewrite *rw_origin_written, *rw_origin_flushing;
    struct tc_dev_io rw_origin_dio;
    /* ... and blocks among them whose tombstone found no room: on the
     * origin, but recorded lost (tombstone_given_up()) */
    uint64_t stop_rewrite_tombless_blocks;
    /* Blocks whose tombstone a stop gave up for want of room (failure.c,
     * rewrite_lose()): the log may still hold an older copy of each, so
     * no write of them may reach the origin any more (writepath.c,
     * origin_write()).  Few; unsorted. */
    uint64_t *tombless;
    size_t ntombless, tombless_cap;
    /* Dirty sectors a device failure moved out of a failed device's
     * segment image onto another device, whose chunk on the failed device
     * had been written (failure.c, rehome_from_image()): one entry a
     * sector, where it is on the failed device and its CRC.  The proof
     * for a drain when the copy's own chunk never reached its device (the
     * next device failed at that write, drain_proofs()): the original
     * still holds the data.  Few (what the failures' images held);
     * unsorted; kept until the cache goes: an entry proves a sector only
     * with the CRC of the data the drain keeps for it, so a stale one
     * (the block written since) names nothing. */
    struct moved_proof {
        uint64_t oblock;
        unsigned s;
        struct lost_proof p;
    } *moved;
    size_t nmoved, moved_cap;
    char health[192];
    unsigned draining;              /* devices in CDEV_DRAINING (failure.c) */
    uint64_t drained_bytes;         /* dirty bytes written back from draining devices */
    struct drain_wait *drain_waiters;   /* flushes waiting for the drains to end */
    uint64_t drain_block_waiters;   /* reads, writes waiting for a block's drain (lostlog.c) */
    char drain_failure[96];         /* why the last drain failed with nothing left
                                     * dirty: its origin flush or its log sync
                                     * ("": it did not) */

    /* abandon.c: the durable record of a cache abandoned at run time. */
    char *state_path;               /* the state file */
    uint64_t abandoned_seq;         /* log entries below it are untrusted (0: none) */
    uint64_t stop_lost_seq;         /* the state file's lost set of a stop is the lost
                                       set at this log sequence (0: none; abandon.c) */
    bool abandoned;                 /* every device failed in this run */
    bool abandon_unrecorded;        /* ... and no record is durable yet: writes fail */
    struct tc_timer state_timer;    /* writes the state file; settles clears */
    /* Device failure marks (ondisk.h, TC_SB_DEV_FAILED): groups of device
     * i below failed_seq[i] are untrusted.  Loaded from every superblock
     * (the highest wins); raised when a device fails in this run. */
    uint64_t failed_seq[TC_MAX_DEVICES];
    /* Clean blocks a start dropped while the log holds their copies
     * (cache_drop_at_start(): recovery's failure marks, the origin's
     * sample, a stop's lost set): their tombstones, appended once the
     * start may append (cache_attach()), keep the dropped versions from
     * coming back under a later version of the block. */
    uint64_t *mark_dropped;
    size_t nmark_dropped;
    struct abandon ab;              /* abandon.h: the rest, abandon.c's alone */
};

/* ---- cache.c: attach, close, detach, status ---- */

int cache_open(struct tc_volume *vol, const char *const *paths, char *err, size_t errlen);
/* For check and dump: attach read-only, recover, and do nothing else. */
struct cache *cache_open_offline(struct tc_reactor *r, const char *const *paths,
                                 struct tc_volume_config *cfg, char *err, size_t errlen);
void cache_close_offline(struct cache *c);
/* Flush the origin through dio, calling cb when done; an origin that
 * cannot flush (or a read-only volume) is done at once, with 0. */
void cache_flush_origin(struct cache *c, struct tc_dev_io *dio,
                        void (*cb)(struct tc_dev_io *dio, int err));
/* Every copy of every device's superblock written from memory (only the
 * devices in service when in_service_only): copy A of each device, then
 * copy B, each write flushed, so that a crash leaves one whole copy.  A
 * device that cannot be written is warned about, naming it, `what` was
 * recorded and `consequence`; false if any write failed.  For the start,
 * before anything is served (nothing else writes the superblocks then). */
bool cache_write_superblocks(struct cache *c, bool in_service_only, const char *what,
                             const char *consequence);
void cache_close(struct cache *c, void (*done)(void *arg, int err), void *arg);
/* A stop began (tc_volume_stopping(), or cache_close()): nothing waits
 * for room any more (failure.c's rewrites; failure.h), and client writes
 * that still wait for it a while later fail (cache.c). */
void cache_stopping(struct cache *c);
void cache_free(struct cache *c);
void cache_status_json(struct cache *c, struct tc_json *j);
/* Switch policy at run time (policy.h: policy_switch): 0, or -EINVAL with
 * a message in err when no policy is called name. */
int cache_switch_policy(struct cache *c, const char *name, char *err, size_t errlen);
void cache_submit(struct ereq *e);
/* Write the dirty data back, then flush the origin: everything dirty, or
 * with dirty_now_only what is dirty now (tiercache flush: writes made
 * meanwhile may stay dirty; writeback_drain()). */
void cache_flush_dirty(struct cache *c, bool dirty_now_only, tc_progress_fn progress,
                       void (*done)(void *arg, int err), void *arg);
/* Sectors lost for good: the lost set less the sectors a failed device's
 * drain has still to write back (still dirty). */
uint64_t cache_lost_for_good_sectors(struct cache *c);
void cache_detach(struct cache *c, tc_progress_fn progress, void (*done)(void *arg, int err),
                  void *arg);

static inline uint64_t cache_block_of(struct cache *c, uint64_t byte) { return byte / c->block_size; }
/* Debugging: with TIERCACHE_TRACE_BLOCK=N in the environment, every change
 * to block N is logged.  cache_trace() tests the block inline and calls
 * cache_trace_log() only for the traced one: the map calls it on every
 * change of every block, and a call with variable arguments costs more
 * than the test.  (Its arguments have no side effects.) */
void cache_trace_log(struct cache *c, uint64_t oblock, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define cache_trace(c, oblock, ...)                                                    \
    do {                                                                               \
        struct cache *ct_c_ = (c);                                                     \
        uint64_t ct_ob_ = (oblock);                                                    \
        if (ct_ob_ == ct_c_->trace_block || ct_c_->trace_block == UINT64_MAX - 1)      \
            cache_trace_log(ct_c_, ct_ob_, __VA_ARGS__);                               \
    } while (0)

/* ---- a segment's device (space.h numbers segments across them) ---- */

/* The device holding segment s, whether it is still usable, and the
 * segment's byte offset on it. */
static inline struct cache_dev *seg_cdev(struct cache *c, uint32_t s) { return &c->devs[space_seg_dev(&c->sp, s)]; }
static inline bool seg_usable(struct cache *c, uint32_t s) { return seg_cdev(c, s)->state == CDEV_OK; }
static inline uint64_t seg_dev_offset(struct cache *c, uint32_t s)
{
    struct cache_dev *d = seg_cdev(c, s);
    return d->sb.data_offset + (uint64_t)(s - d->first_seg) * c->segment_size;
}

#endif
