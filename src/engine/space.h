/*
 * Space: the cache's segments, the groups they are written in, the free
 * segments, and the reserve kept for the cleaner.
 *
 * Segments are numbered across all devices.  Free segments of each device
 * are kept on a stack (stacks[dev]; free_segs counts them all).  A group takes one free segment from every device
 * that has one, so appends spread over all devices (the interleave), and
 * the ring of groups is the log's order:
 *
 *   groups (ring of groups_cap slots):
 *
 *     group_tail                          open_group
 *        v                                    v
 *     [oldest] [ ... ] [ ... ] [ ... ] [newest = open]
 *        |  the cleaner retires this one
 *        +--> segs: dev 0 seg 3, dev 1 seg 40, ...   (one per device)
 *
 *   segment: FREE --space_open_group()--> OPEN --close--> CLOSED
 *            --space_free_group()--> FREE (or retired while pinned:
 *            freed by its last unpin or chunk write)
 *
 * Each segment keeps its chunk table (where each chunk starts: for the
 * CRC lookup of a cached sector and for the cleaner), a live count, and
 * the pins of reads in flight.  reserve_segs free segments are kept for
 * the cleaner: appends that are not the cleaner's stop there.
 *
 * What Space needs from above it, it signals through an event registered
 * at attach (struct space_events): "freed" when a retired segment became
 * free after the fact (its last read or chunk write ended), so the
 * cleaner can wake appends waiting for room.  It never calls the cleaner.
 * It keeps what it must know of the rest: the number of devices, which of
 * them failed (space_drop_free()), the segment size, and whether recovery
 * is replaying the log (live counts are then input: invariant 10).
 *
 * Invariants (numbered as in cache.h):
 *
 * Invariant 4: entries only point into segments of live groups.
 *
 * Invariant 6: nothing is read from a segment while it is being
 * rewritten: reads pin segments of live groups, and a segment with pins or
 * chunk writes in flight is not freed.
 *
 * Invariant 10: a segment's live count is the number of data sectors that
 * fragments (and their mirror copies) keep in it: never negative, never
 * above seg_sectors (as the engine writes the log), and 0 once the cleaner
 * has dropped what pointed into its group.
 *
 * Invariant 22 (the sequence record's chunks stay on their devices): a
 * free segment of device d that may hold a chunk in guard[d] -- between
 * its first_chunk and top_chunk, or at most its top_chunk when those are
 * bounds -- is not opened again while a record that may be on file names
 * that chunk for d (seqrec.c), unless the record was first rewritten
 * without it (the unguard event).  The record says each device held a
 * chunk at least that new, and a start after a crash refuses a device
 * whose walk finds none: a segment opened again is written from its
 * first sector, and a power loss that keeps a later chunk write into it
 * but not the first (or tears the first) leaves nothing of its old
 * chunks to walk -- the current device refused as an older copy of
 * itself.  Nothing on the device tells the two apart, so the chunk the
 * record names must stay where the walk finds it.  It is cheap: only the
 * segment holding the device's recorded chunk is held back (two while a
 * new record is written; after a start from the checkpoint, any that may
 * hold it by the bounds), a device with no other free segment sits out
 * the groups opened meanwhile, and the record drops an entry whose
 * chunk's segment was freed (a chunk of a retired group holds nothing
 * the log needs) at its next write, a couple of seconds later.  Only when
 * no device has another free segment is the record rewritten at once,
 * before the group opens (space_open_group_above()).
 */
#ifndef TC_ENGINE_SPACE_H
#define TC_ENGINE_SPACE_H

#include <stdbool.h>
#include <stdint.h>

#include "format/ondisk.h"
#include "util/assert.h"

/* No segment, no group slot (as in map.h, which defines it alike). */
#define NIL UINT32_MAX

enum seg_state { SEG_FREE, SEG_OPEN, SEG_CLOSED };

/* Chunk table of a segment: where each chunk starts (for the CRC lookup of
 * a cached sector and for the cleaner). */
struct chunk_ref {
    uint16_t start;             /* sector of the header */
    uint16_t hdr_sectors;
    uint16_t data_sectors;
    uint16_t crcs_loaded;       /* its CRCs are in the verify cache */
};

struct segment {
    uint8_t state;
    uint8_t dev;                /* index in cache->devs */
    uint16_t hdr_sectors;       /* its chunks' header sectors, summed (a chunk
                                 * starts below 2^16: struct chunk_ref) */
    uint32_t group;             /* slot in the group ring while not free */
    uint64_t seq;               /* the group's sequence number */
    uint32_t fill;              /* sectors used by chunks (written or in flight) */
    uint32_t live;              /* data sectors that index entries point to */
    uint32_t pins;              /* reads in flight */
    uint32_t writes_inflight;   /* chunk writes in flight */
    /* The chunk sequences of its device's chunks in it: the first and the
     * newest sealed into its current incarnation, or into its last one
     * while it is free (the device holds them until it is written again);
     * 0 for none.  After a start from the checkpoint, which names no
     * chunk sequence, bounds (space_bound_chunks()): top_chunk never below
     * the newest chunk there (invariant 22). */
    uint64_t first_chunk, top_chunk;
    bool chunks_bounded;        /* they are bounds: top_chunk or below */
    bool held;                  /* free, but holds a running checkpoint a superblock
                                   names (space_hold()): on no free stack */
    struct chunk_ref *chunks;
    uint32_t nchunks, chunks_cap;
};

/* A group: one segment on each of several devices, filled in parallel,
 * reclaimed as one.  Kept in a ring from oldest (tail) to newest (open). */
struct group {
    uint64_t seq;
    uint32_t *segs;             /* its ndevs slots in space.group_segs */
    uint8_t nsegs;
    bool open;
    bool retiring;
};

/* A device's free segments. */
struct free_stack {
    uint32_t *segs;
    uint32_t n;
};

/* Registered at attach; ctx is given back. */
struct space_events {
    /* A retired segment became free (seg_unpin(), space_write_done()). */
    void (*freed)(void *ctx);
    /* No device has a free segment but ones the sequence record's entries
     * hold back (invariant 22): rewrite the record without the entries
     * whose chunks are not in a live segment, and lower guard[] (blocking;
     * it may fail, and then guard[] stays). */
    void (*unguard)(void *ctx);
    void *ctx;
};

struct space {
    struct segment *segs;
    uint32_t nsegs, free_segs;
    uint32_t reserve_segs;          /* kept free for the cleaner */
    uint32_t ckpt_room;             /* free segments a running checkpoint's
                                       write takes (checkpoint.c), kept
                                       free too (space_low_water()) */
    bool reserve_shared;            /* tests only: no device has a share of
                                       it (space_dev_reserve()) */
    struct group *groups;           /* ring */
    uint32_t *group_segs;           /* ndevs segment numbers per ring slot: a
                                       group holds at most one per device */
    uint32_t groups_cap, group_tail, ngroups;
    uint32_t open_group;            /* ring slot, or NIL */
    /* The first chunk of group tail_hint_group, read from the device at
     * a start from a checkpoint (which names no chunk numbers): exact
     * where the segments' own are bounds (space_tail_chunk()). */
    uint64_t tail_hint_group, tail_hint_chunk;
    struct free_stack stacks[TC_MAX_DEVICES];   /* by device */
    unsigned ndevs;
    bool dev_failed[TC_MAX_DEVICES];    /* space_drop_free(): no space there */
    uint32_t dev_nsegs[TC_MAX_DEVICES]; /* each device's segments (space_add_dev()) */
    uint32_t dev_first[TC_MAX_DEVICES]; /* ... numbered from this one */
    uint64_t groups_freed;          /* space_free_group() calls, ever */
    uint32_t seg_sectors;
    bool replaying;                 /* recovery applies the log (invariant 10) */
    /* Invariant 22: by device, the chunks the sequence records that may be
     * on file name for it (the one on file, the one being written; 0:
     * none); set by seqrec.c. */
    uint64_t guard[TC_MAX_DEVICES][2];
    uint64_t guard_skips;           /* a device left out of a group: all its free
                                       segments held back (invariant 22) */
    uint64_t guard_forced;          /* a held-back segment opened all the same: the
                                       record could not be rewritten */
    struct space_events ev;
};

/* Set up nsegs segments of seg_sectors sectors on ndevs devices, none in
 * a group or free yet; then each device's run of segments, numbered
 * [first_seg, first_seg + nsegs), before recovery rebuilds the groups and
 * space_collect_free() the free stacks.  space_fini() frees it all (also
 * after a failed attach, on a zeroed struct space). */
void space_init(struct space *sp, uint32_t nsegs, uint32_t seg_sectors, unsigned ndevs);
void space_add_dev(struct space *sp, unsigned dev, uint32_t first_seg, uint32_t nsegs);
void space_fini(struct space *sp);

/* Segment s, and the index of its device in cache->devs. */
static inline struct segment *space_seg(struct space *sp, uint32_t s)
{
    TC_ASSERT(s < sp->nsegs);
    return &sp->segs[s];
}
static inline unsigned space_seg_dev(const struct space *sp, uint32_t s)
{
    TC_ASSERT(s < sp->nsegs);
    return sp->segs[s].dev;
}

/* The group at a ring slot, the oldest (NULL: none), and its slot. */
struct group *group_at(struct space *sp, uint32_t slot);
struct group *oldest_group(struct space *sp);
uint32_t group_slot_of_oldest(const struct space *sp);
/* The oldest group, closed, is retired: its segments become free (or,
 * pinned, when their last read or chunk write ends).  The caller knows it
 * may go (invariant 5) and drops its segments' CRCs (verify_forget()). */
void space_free_group(struct space *sp);
/* The open group (if any) takes no more appends. */
void space_close_group(struct space *sp);
/* Open a new group from free segments, numbered *next_seq (which then
 * goes up by one); false if none is free.  A device's segment is the top
 * of its free stack that invariant 22 does not hold back; a device with
 * only such segments sits this group out, unless no device has another:
 * then the unguard event first, and the top of the stack. */
/* The first chunk sealed into the oldest group at or after tail_seq (the
 * log's first live chunk: chunk headers record it, ondisk.h); 0 when not
 * known -- no such group, none of its chunks sealed yet, or its segments'
 * chunks only bounded (read back from a checkpoint) and no hint for it. */
uint64_t space_tail_chunk(const struct space *sp, uint64_t tail_seq);
bool space_open_group(struct space *sp, uint64_t *next_seq);
/* The same, taking a segment only from devices with more than `keep`
 * free: a device's own share of the reserve stays free
 * (space_dev_reserve()).  false if no device has more. */
bool space_open_group_above(struct space *sp, uint64_t *next_seq, uint32_t keep);
/* The free segments each device in service keeps as its share of the
 * cleaner's reserve (the reserve divided among the devices in service:
 * 1, as the reserve is a segment per device in service -- after a
 * failure too, space_drop_free() sizes it down; 0 when it has fewer
 * segments than there are devices in service, as tests make it): groups are opened from the others first (log.c, ensure_group()),
 * so that the reserve is not all on one device -- a device failure drops
 * its free segments (space_drop_free()), and with them the reserve if it
 * was all there: the survivors' last records (the cleaner's tail record,
 * the failure's tombstones and LOST records) then found no room. */
uint32_t space_dev_reserve(const struct space *sp);
/* After recovery: every segment outside a live group goes on a free stack,
 * highest numbers first so that allocation proceeds from low to high. */
void space_collect_free(struct space *sp);
/* Free segment s may hold the chunk the sequence record names for its
 * device (invariant 22): not to be written (the checkpoint's writer
 * leaves it too). */
bool space_seg_held_back(const struct space *sp, uint32_t s);
/* Whether device dev holds chunk `chunk` in a segment of a live group
 * (first_chunk .. top_chunk of one of them; a walk of the device's
 * segments). */
bool space_chunk_live(const struct space *sp, unsigned dev, uint64_t chunk);
/* After a start from the checkpoint: the segments' chunk sequences
 * bounded from the live groups' chunk counts, newest first down from
 * `newest`, the log's newest chunk (a group's chunks are numbered
 * together, after every older group's: chunks that never reached a
 * device leave gaps, which only raise the bounds); a free segment's
 * chunks are below the oldest group's. */
void space_bound_chunks(struct space *sp, uint64_t newest);
/* A free segment that holds (or is about to hold) a running checkpoint
 * (checkpoint.c) taken off its free stack, so that no group takes it
 * while a superblock may name it: false if it is not on one (not free, or
 * its device failed).  space_release() puts it back, at the bottom of
 * the stack: the end the log takes last. */
bool space_hold(struct space *sp, uint32_t s);
void space_release(struct space *sp, uint32_t s);
/* Recovery rebuilds the ring: add a group as the newest, then its segments. */
uint32_t space_push_group(struct space *sp, uint64_t seq);
void space_group_add_seg(struct space *sp, uint32_t slot, uint32_t s);

/* Device dev failed: its free segments are no longer space (the stack is
 * emptied; push_free() leaves a failed device's segments off it, and no
 * group takes one of them again). */
void space_drop_free(struct space *sp, unsigned dev);

/* The devices not failed (space_drop_free()), and their segments: the
 * space there is.  A failed device's segments are never free again, so
 * what is sized by the cache's space (the free-space marks below, the
 * cleaner's record room) counts these only. */
unsigned space_devs_in_service(const struct space *sp);
uint32_t space_segs_in_service(const struct space *sp);

/* The free-space test: the cleaner works below the low water mark (and
 * until the high one).  Both count the devices in service only. */
uint32_t space_low_water(const struct space *sp);
uint32_t space_high_water(const struct space *sp);
/* True while the cache has room without reclaiming (policies admit freely). */
bool space_has_free(const struct space *sp);

/* Where the segments' sectors are (invariant 10 keeps live exact): live
 * data, free segments, the unwritten rest of segments in use (the open
 * group's, and of groups closed before they were full), and
 * what written segments hold besides live data -- chunk headers and stale
 * versions (data no entry points to any more). */
struct space_usage {
    uint64_t live, free, unfilled, headers, stale;
};
void space_usage(const struct space *sp, struct space_usage *u);

/* A read pins a segment of a live group (invariant 6); the last unpin of
 * a retired segment frees it (the freed event). */
void seg_pin(struct space *sp, uint32_t seg);
void seg_unpin(struct space *sp, uint32_t seg);
/* The last chunk write of a segment ended (a retired one may become free:
 * the freed event). */
void space_write_done(struct space *sp, uint32_t seg);
/* Fragments keeping delta more (or fewer) data sectors in seg (NIL:
 * nothing) -- invariant 10. */
void seg_add_live(struct space *sp, uint32_t seg, int delta);

/* The chunk holding (seg, off), for reading its header (NULL: none). */
const struct chunk_ref *segment_chunk_of(const struct space *sp, uint32_t seg, uint32_t off);
void segment_add_chunk(struct space *sp, uint32_t seg, uint32_t start, uint32_t hdr_sectors,
                       uint32_t data_sectors);
/* The segment holds no chunk (it is free, or about to be filled again). */
void segment_clear_chunks(struct segment *sg);
/* Every chunk table reallocated to its size (none for a segment without
 * chunks): after recovery, whose temporaries were allocated among them. */
void space_compact_chunk_tables(struct space *sp);

#endif
