/*
 * The cache's counters (struct cache: c->st): what happened since attach,
 * and what recovery found.  Each module counts its own events in them;
 * cache_status_json() (cache.c) reports them, under the names and in the
 * groups `tiercache status` shows (not always the field's name: read the
 * two together).
 */
#ifndef TC_ENGINE_STATS_H
#define TC_ENGINE_STATS_H

#include <stdint.h>

struct cache_stats {
    uint64_t read_hits, read_misses, read_partial;  /* client read requests, each once
                                                       (engine.h, EREQ_SUB_READ) */
    uint64_t read_hit_bytes, read_miss_bytes;
    uint64_t write_hits, write_misses;
    uint64_t promotions, promotion_bytes, fills_dropped;
    uint64_t fills_dropped_room;     /* ... of them for want of room in the log */
    uint64_t fills_block, fills_sectors;    /* promotions by kind (--fill) */
    uint64_t group_fills;            /* blocks group fills read (readpath.c) */
    uint64_t group_fills_read;       /* ... whose block a client read then hit */
    uint64_t group_fills_skipped;    /* ... not read: they were not paying */
    uint64_t group_fills_merged;     /* group_fills read in the origin request of the
                                        client's miss beside them */
    uint64_t group_fills_ahead;      /* ... of them, above the miss's group: a forward
                                        run's fill ahead */
    uint64_t fill_probes;            /* --fill auto's decisions that took the other size */
    uint64_t fills_under_way;        /* admitted misses not filled: another read was
                                        filling the whole block already */
    uint64_t fill_waits;             /* client read misses that waited for a fill
                                        under way of their block (readpath.c) */
    uint64_t fill_wait_hits;         /* reads that waited and then hit */
    uint64_t demotions;             /* blocks dropped by the cleaner */
    uint64_t reinsertions;          /* hot blocks appended again by the cleaner */
    uint64_t reinserted_bytes;      /* ... their bytes (dirty copies too) */
    uint64_t split_appends;         /* versions stored in two parts (log_append()) */
    uint64_t dirty_copies_by_cleaner;   /* dirty fragments it copied, not written back */
    uint64_t copies_refused;        /* copies it did not make, to keep the room
                                       for records (cleaner.c, copy_fits()) */
    uint64_t bypassed_sequential;   /* bytes not cached: sequential streams */
    uint64_t not_admitted;          /* misses the policy kept out */
    uint64_t invalidations;
    /* Client writes' origin writes (writepath.c, "origin writes"): how
     * many, and how many of them went while another piece of the same
     * request still waited -- by what it waited for -- so that the
     * request reached the origin in more than one write; and the requests
     * whose ready pieces were held back for a piece waiting on a block
     * lock behind an origin write already under way. */
    uint64_t wo_writes, wo_split_lock, wo_split_writeback, wo_split_room, wo_split_merge;
    uint64_t wo_held_lock;
    /* Pieces of client writes, trims and write-zeroes that found their
     * block locked by another request (writepath.c), and their time
     * waiting for it, summed. */
    uint64_t write_lock_waits, write_lock_wait_ns;
    /* Write-through pieces superseding cached sectors: they wait for a
     * cache flush before their origin write; and their wait, summed. */
    uint64_t wt_flush_waits, wt_flush_wait_ns;
    /* ... that waited for room in the log (holding their lock), and that
     * read their block's other sectors to merge a full chain. */
    uint64_t write_room_waits, write_room_wait_ns, write_merge_reads;
    /* The wall time during which at least one piece waited for room (the
     * sum above counts every piece of a request, and requests in flight
     * together, each). */
    uint64_t room_waiting_now, room_stall_since, room_stall_ns;
    uint64_t segments_written;      /* segments filled */
    uint64_t chunks_written, chunk_bytes_written;
    uint64_t groups_retired;
    uint64_t admitted_bytes;        /* bytes the policy let in (for write amplification) */
    uint64_t checksum_errors;
    uint64_t cache_read_errors, cache_write_errors;
    uint64_t merge_read_failures;   /* client writes failed: dirty sectors to merge unreadable */
    uint64_t lost_dirty_bytes;
    uint64_t in_doubt_writes;       /* origin writes failed in doubt (lost_in_doubt) */
    uint64_t origin_cut_writes;     /* acknowledged, then the connection lost unflushed */
    uint64_t syncs;
    uint64_t writeback_bytes, writeback_writes, writeback_passes;
    uint64_t recovered_entries, recovered_dirty_sectors, recovered_dirty_blocks;
    /* How the previous run ended, from the newest chunk's TC_CHUNK_CLEAN_STOP:
     * "clean", "unclean" (a crash, a kill, a power loss, or a stop whose
     * origin flush failed: the index was rebuilt from summaries that may
     * end in torn writes), or "none" (a
     * cache never written since its format). */
    const char *last_stop;
    /* How the last start rebuilt the index: "checkpoint" (read from the
     * checkpoint a clean stop wrote), "checkpoint+log" (after a crash: the
     * newest running checkpoint, and the log written after it replayed)
     * or "scan" (every chunk header of the log walked); with the bytes it
     * read from the cache devices. */
    const char *recovered_from;
    uint64_t recovery_read_bytes;
    /* The start's sample of clean blocks compared with the origin
     * (originstop.c): blocks compared, found different, not compared (a
     * read failed), and the origin bytes it read (in the origin's byte
     * counts too; no hit, miss or policy event). */
    uint64_t origin_check_blocks, origin_check_differ, origin_check_unread;
    uint64_t origin_check_read_bytes;
    /* ... and, of a start with --adopt-origin that compared every clean
     * sector, the blocks with dirty sectors whose clean sectors differ
     * (the start is refused: none can be dropped alone). */
    uint64_t origin_check_partly_dirty_differ;
    uint64_t recovery_malformed;    /* entries that did not decode (damage) */
    uint64_t recovery_damage_ignored; /* damage below abandoned_seq: serve ignores
                                         it; offline it is in recovery_damaged too */
    uint64_t recovery_unflushed;    /* entries of unflushed chunks whose data failed */
    uint64_t recovery_damaged;      /* durable chunk summaries found damaged */
};

#endif
