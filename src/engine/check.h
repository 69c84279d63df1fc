/* tiercache check: an offline audit of a cache set (check.c). */
#ifndef TC_ENGINE_CHECK_H
#define TC_ENGINE_CHECK_H

#include <stdbool.h>
#include <stdint.h>

struct cache;

struct check_result {
    char **problems;                /* one sentence each */
    unsigned nproblems;
    uint64_t blocks, fragments, dirty_bytes;
    uint64_t data_checked_bytes;
    uint64_t damaged_clean_sectors, lost_dirty_sectors;
    uint64_t unflushed_entries;     /* ignored by recovery: never flushed, normal after a crash */
    /* Of the lost sectors, those the next start's resumed drain writes
     * back (abandon.c: proven by the state file, read back from the
     * abandoned device, matching their CRC), in how many blocks; and
     * those whose proof fails (unreadable, damaged, overwritten). */
    uint64_t recoverable_blocks, recoverable_sectors, unrecoverable_proven_sectors;
    uint64_t marked_sectors;        /* state file version 4: written back from the
                                       log by the next read-write start */
    uint64_t groups, segments, segments_free;
    /* The survey (survey.h) compared with the scan: its reads, the
     * segments whose first header checks, and the live segments whose
     * first header names the group the scan found. */
    uint64_t survey_reads, survey_first_headers, survey_live_matched;
    bool stop_recorded;             /* the superblocks hold a clean-stop record ... */
    uint64_t stop_chunk_seq, stop_chunks;   /* ... of this log (recovery compared them) */
    bool checkpoint;                /* ... naming a checkpoint, */
    bool checkpoint_verified;       /* ... the same as what the scan rebuilt */
    /* The running checkpoints the slots name (checkpoint.h,
     * ckpt_run_verify()); each that cannot be used is a problem. */
    unsigned run_ckpts, run_ckpts_usable;
    uint64_t run_ckpt_newest;       /* gen of the newest usable (0: none) */
    bool run_ckpt_compared, run_ckpt_verified;
    /* The sequence record (seqrec.h): an older copy of the devices, or an
     * unusable record, is a problem (serve and --salvage refuse them). */
    char *seqrec_path;
    const char *seqrec_found;       /* seqrec_verdict_name() */
    uint64_t seqrec_chunk;          /* the record's chunk (0: none read) */
    uint64_t newest_chunk;          /* the devices' newest */
    /* "older" for one device of the set, by its own entry: that device
     * (the two chunks above are then its own and its entry's); else -1. */
    int seqrec_device;
};

/* salvage.c: write the dirty data a damaged cache still holds intact and
 * newest back to the origin (see there for the rule). */
struct salvage_result {
    uint64_t dirty_sectors;         /* dirty sectors recovery found */
    uint64_t blocks_written, bytes_written;
    uint64_t sectors_lost;          /* dirty sectors not written back */
    char **lost;                    /* their origin ranges and why, one a line */
    unsigned nlost;
    uint64_t damaged;               /* damaged places in the log */
    uint64_t damaged_before_abandon;    /* ... of them in groups below abandoned_seq,
                                           which held nothing recovery applies */
    uint64_t damage_group_max;      /* newest damaged group (UINT64_MAX: unknown) */
    uint64_t abandoned_seq;         /* the cache was abandoned: versions below it are
                                       never written back (0: no abandonment recorded) */
    const char *state_file;         /* where the record of an abandonment was looked for */
    /* Lost sectors a drain cut short left with a proof (abandon.c): read
     * back matching their CRC, written to the origin and no longer lost;
     * and those whose proof failed (listed lost with the rest). */
    uint64_t recovered_lost_sectors, unrecoverable_proven_sectors;
};
struct tc_dev;
/* 0, or -1 with err set when the origin could not be written (the rest is
 * not attempted; what was written stays). */
int cache_salvage(struct cache *c, struct tc_dev *origin, struct salvage_result *r,
                  bool progress, char *err, size_t errlen);
void salvage_result_free(struct salvage_result *r);

/* Returns the number of problems found (0: clean). */
int cache_check(struct cache *c, struct check_result *r, bool progress);
/* Only the index and its accounting (no I/O): what cache_check() audits
 * of invariants 7 and 9 and of the segments' live counts (10), on a
 * cache whose chunks are all sealed.  The sanitizer build runs it at every
 * clean close (cache.c). */
int cache_check_index(struct cache *c, struct check_result *r);
void check_result_free(struct check_result *r);

#endif
