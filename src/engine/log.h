/*
 * Log: the writer of the cache's log (log.c).
 *
 * The log owns everything between an append and its durability: the heads
 * (the chunk being built in each device's open segment), the RAM images of
 * segments being written, the chunks in flight, the sequence numbers, the
 * flush counters, the waiters, the seal timer, the write-through stable
 * mark and the write-through versions whose origin writes are in flight.
 * Space (space.h) owns the segments themselves; the log asks it for a new
 * group and tells it when a segment's last chunk write ends.
 *
 *   device 0 head ──► segment 3 image: [hdr|data][hdr|data][hdr|data..  ]
 *                                       written   in flight  ^ current chunk
 *   device 1 head ──► segment 40 image: [hdr|data][hdr|da..              ]
 *
 *   chunks in flight (inflight_head .. inflight_tail), by chunk_seq:
 *       41 (seg 3) ─► 42 (seg 40) ─► 43 (seg 3)
 *   chunks_written_upto = 40: every chunk <= 40 is written; none > 43 issued
 *
 *   a waiter: on its head (chunk not sealed) ─► written_waiters (sealed,
 *             target = its chunk_seq) ─► flush_waiters (written, needs a
 *             flush) ─► woken
 *
 * What the log needs from above it, it signals through events registered
 * at attach (struct log_events): "needs space" when an append found no
 * room (or a new group took free segments: the cleaner looks at the free
 * count), and "device error" when a chunk write or a device flush failed.
 * It never calls the cleaner or the failure code itself.
 *
 * Invariants (numbered as in cache.h):
 *
 * Invariant 11: flushed_upto <= chunks_written_upto <= chunks_issued, and
 * none of them goes back.
 *
 * Invariant 12: a log waiter waits on the head of the chunk it needs
 * until that chunk is sealed; then on written_waiters, for an issued chunk
 * (target <= chunks_issued); if it needs a flush, then on flush_waiters,
 * for a written one (target <= chunks_written_upto).
 *
 * Invariant 19: the chunks in flight are listed in ascending chunk_seq; a
 * segment's writes_inflight counts its chunks among them, and a segment
 * has an image while it is open or has a chunk write in flight.
 *
 * Invariant 20: a head's current chunk fits its segment (chunk_start +
 * hdr_sectors + data_fill <= seg_sectors).
 *
 * Invariant 21: wt_stable_seq never goes back, and every write-through
 * version whose origin write is in flight (tracked: log_wt_track()) has a
 * higher sequence: the stable mark never covers a version the origin may
 * lack.
 */
#ifndef TC_ENGINE_LOG_H
#define TC_ENGINE_LOG_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "engine/mask.h"
#include "format/ondisk.h"
#include "io/dev.h"
#include "io/reactor.h"
#include "util/assert.h"
#include "util/join.h"

struct cache;
struct log;
struct tc_json;

/* What a caller waits for after an append or a sync. */
struct log_waiter {
    void (*fn)(struct log_waiter *w, int err);
    struct log_waiter *next;
    uint64_t target;            /* chunk sequence to be written (and flushed) */
    bool need_flush;
    bool reserve;               /* waiting for room (cleaner_wait_space()) for an
                                   append that takes the cleaner's reserve: woken
                                   as soon as any segment is free */
    bool client;                /* ... for a client write's append (writepath.c):
                                   failed (EIO, or the origin's ENOSPC) rather
                                   than queued while the room waits on an
                                   origin that is offline or refuses
                                   (cleaner_origin_holds_room()) */
};

/* The chunk being built in one open segment. */
struct head {
    uint32_t seg;               /* NIL when the device has no open segment */
    uint32_t chunk_start;       /* sector of the current chunk's header */
    uint16_t hdr_sectors;       /* reserved for the current chunk's header */
    uint16_t next_hdr_sectors;  /* what the next chunk reserves */
    uint32_t data_fill;         /* data sectors appended to the current chunk */
    struct tc_entry *entries;
    uint32_t nentries, entries_cap;
    bool urgent;                /* someone waits: write it now */
    bool keeps;                 /* the current chunk holds an entry other than a
                                   clean copy of origin data (log_append()) */
    uint64_t first_ns;          /* the current chunk's first append */
    struct log_waiter *waiters; /* waiting for the current chunk */
    uint32_t *crcs;             /* the current chunk's data CRCs */
    uint32_t crcs_cap;
};

struct chunk_write {
    struct tc_dev_io dio;
    struct cache *cache;
    uint32_t seg;
    uint64_t chunk_seq;
    struct chunk_write *prev, *next;    /* in flight, ordered by chunk_seq */
    /* By device: the newest chunk written there after this one, whose
     * write ended first; it counts (dev_written) once this one ends. */
    uint64_t written_after[TC_MAX_DEVICES];
};

/* A write-through version whose origin write is in flight (invariant 21):
 * embedded in the writer's state, linked while tracked (seq != 0). */
struct log_wt {
    struct log_wt *prev, *next;
    uint64_t seq;
};

/* Track a write-through version whose origin write is in flight (seq:
 * its entry's sequence), until log_wt_untrack() (which ignores one not
 * tracked). */
void log_wt_track(struct log *lg, struct log_wt *t, uint64_t seq);
void log_wt_untrack(struct log *lg, struct log_wt *t);
/* The lowest sequence tracked, or next_seq if none. */
uint64_t log_wt_oldest(const struct log *lg);
/* An origin flush made everything up to seq durable on the origin:
 * raise the stable mark (never lowers it). */
void log_wt_stable(struct log *lg, uint64_t seq);

/* Registered at attach; ctx is given back to each. */
struct log_events {
    /* An append found no room, or a new group took free segments. */
    void (*needs_space)(void *ctx);
    /* A chunk write (write) or a device flush of device d failed. */
    void (*device_error)(void *ctx, unsigned d, int err, bool write);
    void *ctx;
};

/*
 * Chunk headers kept in RAM instead of on the device (struct log's
 * headers_in_ram: data-free volumes, which replay runs).  A data-free
 * volume's header would be encoded, stored by the memory device, loaded
 * back and decoded only for the engine itself to read -- the cleaner's
 * walk, and the CRC look-up of a cache read -- and that round trip was a
 * quarter of a write-heavy replay's time.  Instead each sealed chunk's
 * header and entries are kept here as sealed, by segment, in the order of
 * the segment's chunk table (struct segment's chunks: entry i of one is
 * entry i of the other), and the readers take them from here.  Everything
 * else is as on the device: the header's sectors are reserved, counted
 * and "written" (the chunk write and every header read are submitted as
 * before, all payload, so the memory device copies nothing and their
 * completions come in the same order), so every decision and figure is
 * the same.  The cost: the cache device holds no chunk header, and a
 * data-free volume's log cannot be read back by a later start (none
 * does: a data-free volume lives on memory devices made for one run).
 */
struct ram_chunk {
    struct tc_chunk_header h;
    uint32_t first;                 /* its entries: ents[first .. first + h.nr_entries) */
};

struct ram_seg {
    struct ram_chunk *chunks;       /* as the segment's chunk table */
    uint32_t nchunks, chunks_cap;
    struct tc_entry *ents;
    /* Beside each of ents: a DATA entry's block's entry number in the
     * index when sealed (NIL for other entries, or a block not in the
     * index then) -- a hint only, which the cleaner's walk checks
     * (index_lookup_hint()): the entry may have gone and its slot been
     * reused since.  The walk's look-up of a block then loads its entry
     * directly, found when the entry was hot, instead of its bucket and
     * chain. */
    uint32_t *ids;
    uint32_t nents, ents_cap;
};

/* Segment images are reused, not freed: a fresh 4 MiB mapping costs a
 * thousand page faults on first touch. */
#define LOG_IMAGE_POOL 8

struct log {
    struct head heads[TC_MAX_DEVICES];
    unsigned next_dev;              /* round robin among open segments */

    /* RAM images by segment (NULL: none), and the pool of spare ones. */
    uint8_t **images;
    uint32_t nsegs;
    uint8_t *pool[LOG_IMAGE_POOL];
    unsigned npool;

    uint64_t next_seq;              /* sequence numbers of groups, chunks, entries */
    uint64_t tail_seq;              /* oldest live group */
    uint64_t wt_stable_seq;         /* write-through versions up to it are on the origin */
    uint64_t wt_newest_seq;         /* the newest write-through entry appended (0: none) */
    uint64_t chunks_issued;         /* chunk_seq of the last chunk written */
    uint64_t chunks_written_upto;   /* every chunk up to this one is written */
    uint64_t flushed_upto;          /* ... and flushed */
    uint64_t marked_upto;           /* the highest flushed mark a sealed header carries */
    uint64_t tail_recorded;         /* the tail and the write-through stable mark the */
    uint64_t wt_stable_recorded;    /* ... newest sealed header carries (a scan's) */
    uint64_t entries_chunk;         /* the newest chunk sealed with entries */
    uint64_t flushed_ns;            /* when the last cache flush ended */
    /* A start after a crash skipped the chunk numbers up to this one
     * (log_recovered()): none of them names a chunk this run wrote, so a
     * flushed_upto at or below it vouches for nothing new (seqrec.c). */
    uint64_t skipped_upto;
    bool restart_mark_owed;         /* log_write_restart_mark() is still to run */
    uint64_t recovered_newest;      /* the newest chunk recovery found (below the skip) */
    uint64_t restart_durable;       /* the durable mark recovery found, which the
                                       chunks after the skip record (TC_CHUNK_RESTART) */
    uint64_t failed_chunk;          /* the newest chunk whose write failed, or issued
                                       when a device failed (0: none), which every
                                       header sealed since records */
    /* By device: the newest chunk written to it without error, once
     * every chunk before it is written (a walk of its segment at the next
     * start reaches it: none before it can be torn); at the start of a
     * cache flush, that chunk; and once that flush ended, the chunk it
     * made durable there (0: none known).  Never above
     * chunks_written_upto, flush_target and flushed_upto respectively.
     * The sequence record keeps the last (seqrec.c). */
    uint64_t dev_written[TC_MAX_DEVICES];
    uint64_t dev_flush_target[TC_MAX_DEVICES];
    uint64_t dev_flushed[TC_MAX_DEVICES];
    uint64_t flush_marks;           /* headers sealed only to carry the flushed mark */
    uint64_t every_refused;         /* records refused: a device in service had no
                                       segment for its copy (log_append()) */
    bool clean_stop;                /* sealing the chunks of a clean stop */
    struct chunk_write *inflight_head, *inflight_tail;
    struct log_waiter *written_waiters, *flush_waiters;
    bool flushing;
    struct tc_join flushes;         /* the devices' flushes of the running cache flush */
    uint64_t flush_target;
    struct tc_dev_io flush_dios[TC_MAX_DEVICES];
    int error;                      /* first cache write error, reported to syncs */
    struct tc_timer seal_timer;
    uint64_t seal_delay_ns;
    uint64_t clean_seal_delay_ns;   /* chunks of clean copies only */
    uint32_t chunk_target_sectors;  /* seal a chunk at this size */
    struct tc_task seal_task;       /* seals urgent chunks after this pass */
    bool seal_pending;
    struct log_waiter commit;       /* the commit interval's sync */
    bool commit_pending;
    struct log_wt *wt_inflight;     /* invariant 21 */
    /* Chunk writes that failed (few: a device fails at its first write
     * error, so only those in flight then can fail after it): segment and
     * sectors [start, end), for log_chunk_written().  Kept until the log
     * goes; a segment reused since answers "not written" for them, which
     * only ever makes the failure path take a copy elsewhere (failure.c). */
    struct failed_chunk { uint32_t seg, start, end; } *failed_chunks;
    size_t nfailed_chunks, failed_chunks_cap;
    struct log_events ev;
    bool trace;                     /* TIERCACHE_TRACE_BLOCK=all: log the log's steps */
    /* Chunk headers live in ram[], not on the device (struct ram_chunk;
     * set for data-free volumes only: the one place the engine's steps
     * differ for replay, and only in where a header is kept). */
    bool headers_in_ram;
    struct ram_seg *ram;            /* by segment, when headers_in_ram */
};

struct append {
    uint64_t oblock;
    uint8_t type;               /* TC_ENTRY_* */
    uint8_t flags;              /* TC_ENTRY_WT, TC_ENTRY_MIRROR */
    struct tc_mask valid, dirty;
    uint64_t target;            /* CLEAN */
    const void *data;           /* DATA: popcount(valid) sectors, packed */
    bool mirror;                /* write a second copy on another device; an
                                   entry without data (a tombstone, a CLEAN
                                   record): a copy on every device in service
                                   (log.c, extras_fit()) */
    bool use_reserve;           /* the cleaner may use the reserved space */
    bool take_shares;           /* a device failure's record with a copy on every
                                   device in service (mirror): a device sitting
                                   the group out gives its share of the reserve
                                   (space_dev_reserve()) for it; a client record
                                   waits for the cleaner instead (log.c,
                                   ensure_group()) */
    bool leave_claim;           /* a client write: made only if it leaves the
                                 * room a cleaner's pass claims for its copies
                                 * (cleaner_claim()), else -ENOSPC */
    bool urgent;                /* write the chunk now (someone waits on it) */
    bool replace;               /* DATA: the block's whole contents; a tombstone of
                                   the block goes just before it, in the same chunk
                                   as each copy, linked to it (ondisk.h): recovery
                                   applies the pair or neither (failure.c) */
    bool may_split;             /* DATA without a mirror or replace: the caller takes a
                                   split (log_loc.split) */
};
/* Where log_append() put an entry. */
struct log_loc {
    int err;                    /* 0, or -ENOSPC: nothing was appended */
    uint32_t seg;               /* the data's location (of an entry without
                                   data: where it would have gone) */
    uint16_t off;
    uint32_t mseg;              /* the mirror copy's (NIL: none) */
    uint16_t moff;
    uint64_t seq;               /* the entry's sequence number */
    /* A split (only when the append said may_split): the data went as two
     * entries, the first valid sectors `part1` at (seg, off) with sequence
     * seq, the rest at (seg2, off2) with seq2 > seq (seq + 1, or more
     * when the rest opened a new group, which takes a sequence number of
     * its own) -- each a DATA entry of its own, with the flags of the
     * append and the dirty sectors among those it holds. */
    bool split;
    uint32_t seg2;
    uint16_t off2;
    uint64_t seq2;
    struct tc_mask part1;
};
/* Appends an entry (with a->replace: a tombstone and the entry, in one
 * chunk of each copy): copies the data into an open segment's image and
 * records the entry in its chunk.  Returns its location (err 0), or err
 * -ENOSPC if no space is free right now.  When w is given, w->fn runs
 * once the chunk holding the entry is written (and flushed if
 * w->need_flush) -- both chunks of a split.
 *
 * A DATA append with may_split that fits no open segment whole, while one
 * has room for some of its sectors, is split rather than leaving that room
 * empty: its first sectors fill the segment's tail, the rest goes to the
 * next segment (a new group when needed).  It splits only when the rest
 * is sure to find room, so that a split is all appended or not at all:
 * the caller indexes both parts (map_add_appended()), and never an entry
 * the index does not know.  The parts are two versions of disjoint
 * sectors, applied in sequence order by recovery as at run time; a crash
 * may keep one without the other, as it may keep one block of a
 * multi-block write without the next, which is never acknowledged data
 * (a sync covers both chunks; write-through orders the origin write after
 * both, see writepath.c). */
struct log_loc log_append(struct cache *c, const struct append *a, struct log_waiter *w);
/* Of two copies of one entry, in segments a and b: whether recovery meets
 * a's first (live segments are walked by group sequence, then segment
 * number).  The first is the primary copy, in memory as in a start from
 * the log. */
bool log_copy_first(struct cache *c, uint32_t a, uint32_t b);
/* Everything appended so far: written, and the devices flushed. */
void log_sync(struct cache *c, struct log_waiter *w);
/* w, given to log_sync(), stops waiting: true if it was still waiting
 * (it is then never called), false if it was called already. */
bool log_sync_cancel(struct cache *c, struct log_waiter *w);
/* Whether the chunk holding sector off of segment seg, which has a RAM
 * image, reached its device: false while it is the head's current chunk
 * (not sealed) or its write is in flight, or if that write failed; true
 * once it ended without error (not that a flush made it durable).  A
 * segment without an image: true (every chunk of it was written, unless
 * its device failed at one: failed_chunks). */
bool log_chunk_written(struct cache *c, uint32_t seg, uint32_t off);
/* A cache device failed: close its head, re-target waiters. */
void log_device_failed(struct cache *c, unsigned d);
/* The drain of device d ended: the RAM images of its segments go. */
void log_release_images(struct cache *c, unsigned d);
void log_status_json(const struct log *lg, struct tc_json *j);
/* Memory of the segments' RAM images, of seg_size bytes each: those held
 * (open segments, chunk writes in flight) and the idle pool of spares (at
 * most LOG_IMAGE_POOL); and of the table naming them (one pointer per
 * segment). */
void log_image_memory(const struct log *lg, uint64_t seg_size, uint64_t *held, uint64_t *idle,
                      uint64_t *table);
/* The commit interval: seal and flush what was appended, nobody waiting. */
void log_commit(struct cache *c);
/* Once the log has been idle for delay_ns since a cache flush whose
 * chunks no header yet records as flushed, write one header that does
 * (log.c, "the flushed mark"). */
void log_mark_flushed(struct cache *c, uint64_t now_ns, uint64_t delay_ns);
/* Write every partly filled chunk now (e.g. to persist a new tail).
 * With force_header, a header is written even with nothing appended (one
 * in each open head, or in a new group, which may take the reserve);
 * false if there was no room for one. */
bool log_seal_all(struct cache *c, bool force_header);
/* Sectors the log could still append with the reserve: what the open
 * heads have left and the free segments, on devices in service.  Not all
 * of it takes any one append: a head whose room is too small for an
 * append is closed with its room unused. */
uint64_t log_room(const struct cache *c);
/* The part of log_room() left to the other appends after a mirrored one
 * of nsectors (a copy on each of two devices), taking the reserve: all of
 * it when two open heads take the copies; only the free segments when it
 * needs a new group (log_append() closes every head first, their room
 * unused) and that group has a segment on two devices; 0 when it would
 * find no two devices. */
uint64_t log_mirror_room(struct cache *c, uint32_t nsectors);
/* Seal every head's chunk and close the open group (the cleaner retires
 * it next).  Unlike a full segment's close, this releases no image and
 * counts no segment written: a chunk write in flight releases its own. */
void log_close_group(struct cache *c);
int log_init(struct cache *c);
/* Recovery read the log back: the next sequence number, the newest chunk
 * (written and flushed: it was read from the device), the tail and the
 * write-through stable mark the newest chunk recorded.  skipped: the start
 * found no clean stop, and next_seq is TC_SEQ_RESTART_GAP above what it
 * found, last_chunk a multiple of it at least that far above (ondisk.h):
 * no chunk has the numbers up to last_chunk, and log_write_restart_mark()
 * is owed.  The caller sets recovered_newest (the newest chunk found) and
 * restart_durable after it. */
void log_recovered(struct log *lg, uint64_t next_seq, uint64_t last_chunk, uint64_t tail_seq,
                   uint64_t wt_stable_seq, bool skipped);
/* After a start that skipped numbers (log_recovered()), before anything
 * else is appended: a header with no entries in a new group on every
 * device in service, written and flushed, so that a crash of this run
 * leaves a chunk with the new numbers for the next start to find (which
 * then skips past this run's).  Waits for it.  0 when it is durable (or
 * nothing was owed); otherwise a negative errno, said in a log line: no
 * room (-ENOSPC; the run's first flushed chunk records the skip then) or
 * the write or flush failed (the device's failure is handled as any). */
int log_write_restart_mark(struct cache *c);
/* At a start, before the reactor serves: everything appended written and
 * flushed (log_sync()), waited for by polling the reactor; its error. */
int log_sync_wait(struct cache *c);
void log_fini(struct cache *c);
/* Nothing appended waits to be written, no chunk write or flush runs. */
bool log_idle(const struct log *lg);
/* The RAM image of segment seg (NULL: none), laid out as on disk. */
static inline const uint8_t *log_image(const struct log *lg, uint32_t seg)
{
    TC_ASSERT(seg < lg->nsegs);
    return lg->images[seg];
}
/* Read sectors of a segment that still has its RAM image (false: it has
 * none, read the device). */
static inline bool log_read_image(const struct log *lg, uint32_t seg, uint32_t off,
                                  uint32_t nsectors, void *buf)
{
    const uint8_t *image = log_image(lg, seg);
    if (image == NULL)
        return false;
    memcpy(buf, image + (size_t)off * TC_SECTOR, (size_t)nsectors * TC_SECTOR);
    return true;
}
/* The header of chunk i of segment seg (its chunk table's entry i, at
 * sector start), kept in RAM (headers_in_ram), its entries, and beside
 * them their blocks' entry numbers when sealed (struct ram_seg's ids). */
static inline const struct ram_chunk *log_ram_chunk(const struct log *lg, uint32_t seg,
                                                    uint32_t i, uint32_t start,
                                                    const struct tc_entry **entries,
                                                    const uint32_t **ids)
{
    TC_ASSERT(lg->headers_in_ram && seg < lg->nsegs);
    const struct ram_seg *rs = &lg->ram[seg];
    TC_ASSERT_ALWAYS(i < rs->nchunks && rs->chunks[i].h.chunk_sector == start);
    *entries = rs->ents + rs->chunks[i].first;
    *ids = rs->ids + rs->chunks[i].first;
    return &rs->chunks[i];
}
/* Whether log_read_image() would find the segment's image (data-free
 * reads, which copy nothing). */
static inline bool log_has_image(const struct log *lg, uint32_t seg)
{
    return log_image(lg, seg) != NULL;
}

#endif
