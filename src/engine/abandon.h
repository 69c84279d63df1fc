/*
 * A cache abandoned at run time, and the state file that records it
 * (abandon.c).  When the last cache device fails, the volume serves the
 * origin directly and the cache's log stops being the truth: the
 * abandonment is recorded durably (the state file, and a mark in the
 * superblock of every device that takes one), and at the next start every
 * log entry with a sequence number below abandoned_seq is ignored.  A
 * device that fails while others go on gets a failure mark instead
 * (failed_seq).  Its state: struct abandon below, and the fields of
 * struct cache that other modules read.
 *
 * A record saying sectors are no longer lost never becomes durable before
 * the write that cleared them is (an origin flush and a log sync later):
 * recording a clear late only fails reads longer than needed.
 */
#ifndef TC_ENGINE_ABANDON_H
#define TC_ENGINE_ABANDON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cache;
struct lost;
struct held_ack;
struct settle_waiter;
struct sb_mark;
struct tc_json;
struct tc_mask;
struct tc_dev;
struct tc_request;

/* What abandon.c alone keeps (c->ab).  The fields others read -- the
 * state file's path, abandoned_seq, abandoned, abandon_unrecorded,
 * failed_seq -- and the state timer are struct cache's. */
struct abandon {
    bool state_dirty;               /* the lost set changed since the state file */
    bool settle_busy;               /* an origin flush / log sync settling clears */
    bool settle_failed;             /* the last one failed (warned once) */
    bool state_closed;              /* closing: no more settles or lazy writes */
    bool sb_unfiled;                /* a superblock mark went out with
                                       TC_SB_ABANDON_UNFILED */
    uint64_t unfiled_seq;           /* at start: the superblocks' abandonment
                                       the state file lacks, which it could
                                       not record (abandon_unfiled()) */
    uint64_t state_writes, state_errors, sb_marks;
    struct lost *unfiled_lost;      /* the lost set (drained sectors too) when
                                       the state file could not record the
                                       abandonment: the log still holds their
                                       dirty data until it does
                                       (abandon_unfiled_refuses()); NULL:
                                       none */
    uint64_t unfiled_refused;       /* writes over lost sectors failed while
                                       the state file lacked the abandonment
                                       (abandon_unfiled_refuses()) */
    uint64_t disk_abandoned_seq;    /* the abandonment the state file on disk
                                       records (0: none): what the next start
                                       would read */
    unsigned sb_marks_pending;
    struct sb_mark *sb_queue;       /* superblock writes, in the order asked for:
                                       one in flight per device (abandon.c) */
    unsigned devfail_marks_pending; /* failure marks, and what must be durable
                                       before them (devfail_hold_more()), not
                                       yet durable: write acknowledgements
                                       wait (volume.c) */
    unsigned devfail_unsynced;      /* of those, the holds before the marks
                                       (failure.c's appends and rewrites) */
    bool devfail_unmarked;          /* failed_seq has a mark the survivors'
                                       superblocks do not have yet */
    bool devfail_incomplete;        /* a failure's records could not all be
                                       appended (a stop, no room): no mark is
                                       written, held writes fail (EIO) */
    uint64_t devfail_marks;         /* superblocks given a failure mark */
    struct held_ack *held_acks;     /* waiting for the failure marks */
    struct settle_waiter *settle_next;  /* abandon_settle_wait(): for the next
                                           settle (clears made before it) */
    struct settle_waiter *settle_cur;   /* ... for the one running */
    /* The lost set a stop recorded in the state file (TC_STATE_STOP_LOST;
     * c->stop_lost_seq): loaded at start, applied by recovery at its
     * sequence, then recorded in the log again. */
    uint64_t *stop_lost_ob;
    struct tc_mask *stop_lost_mask;
    size_t stop_lost_n;
    bool stop_lost_drops;           /* TC_STATE_STOP_DROPS: an entry with no lost
                                       sector names a block whose tombstone the
                                       stop gave up, the origin holding its data */
    bool stop_lost_applied;         /* recovery applied it */
    bool stop_lost_pending;         /* the state file still carries it: the
                                       log has not recorded it again */
    bool stop_lost_syncing;         /* its LOST records appended, a sync under way */
    /* Tombstones of copies this start dropped (failure.c,
     * cache_mark_tombstones()) that found no room and wait for it: the
     * state file stays until they are durable (abandon_start_drops_durable()),
     * as it names some of those blocks (TC_STATE_STOP_DROPS). */
    uint64_t start_drops_waiting;
    bool start_drops_said;          /* the wait said once */
    /* Their blocks (start_drops_waiting of them): a state file written
     * meanwhile names them again, as the stop's did (state_write_as()) --
     * the stop's own list is gone once the start is done, and without them
     * the file would no longer drop the log's copies at the start after a
     * crash.  Such a write comes when a set abandoned in an earlier run
     * (its file kept for good) settles lost sectors written again
     * (engine/devfail-full-stop-drops-rewrite); a set never abandoned
     * records its lost sectors in the log, not the file, and the last
     * device's failure, which rewrites it, distrusts the whole log. */
    uint64_t *start_drop_ob;
    size_t start_drop_cap;
    /* The room kept aside for the state file (abandon.c): the blocks of
     * the lost set the largest spare can record; more dirty and lost
     * blocks than that make it grow (abandon_room_check()). */
    bool room_watch;                /* from abandon_keep_room() on */
    bool room_warned;               /* short of room: said once */
    uint64_t room_blocks;
    uint64_t room_retry_ns;         /* short of room: not tried again before */
    /* The sectors the state file on disk gives a proof (abandon.c,
     * "Resuming the drain"): a write of one reaches the origin only after
     * a state file without that proof is durable
     * (abandon_proofs_before_write()). */
    struct lost *disk_proven;       /* NULL: none */
    uint64_t proof_rewrites;        /* state file writes done for that */
    /* The chunk headers read back for the proofs of the sectors kept to be
     * drained whose CRCs were not in memory (failure.c, "Proofs read
     * back"): not yet read (the stop waits for them), read, and the
     * sectors they proved. */
    unsigned proof_reads_pending;
    uint64_t proof_reads, proof_read_sectors;
    /* Version 4 marks (abandon.c, "Resuming the drain from the log"):
     * state files written with them for want of room for the proofs, and
     * said once; the marked sectors loaded at this start, and whether the
     * replay of the log applies the entries below abandoned_seq for them
     * (recovery.c), this once. */
    uint64_t marks_writes;
    bool marks_said;
    uint64_t marks_loaded;
    uint64_t marks_lost_sectors;    /* the lost set's sectors as loaded */
    bool log_pass;
    /* What abandon_log_marks() did: the marked sectors, those written
     * back, and the blocks left lost for their digest (salvage reports
     * them: the set it ran on is closed before its report). */
    uint64_t marks_marked, marks_written, marks_mismatched_blocks;
    /* The drain resumed at this start (abandon_resume_drain()). */
    bool resumed;
    struct abandon_resume {
        uint64_t blocks;            /* blocks with a proven sector */
        uint64_t sectors;           /* sectors proven by their CRC */
        uint64_t written_bytes;     /* of those, written back and no longer lost */
        uint64_t unproven_sectors;  /* with a proof that failed: unreadable, no
                                       match, or the origin refused them */
        uint64_t still_lost_blocks; /* the lost set's blocks after it */
        uint64_t still_lost_sectors;
    } resume;
};

/* At attach, before recovery: the state file (state_file, or the default
 * next to the set's device 0; first_path, the device given first, where
 * an older version kept it) and the superblock marks; loads the lost set and
 * abandoned_seq.  -1 with a message when the cache must not be used. */
int abandon_load(struct cache *c, const char *state_file, const char *first_path, char *err,
                 size_t errlen);
/* At attach, once the origin is known to be the cache's, before anything
 * is appended to the cache (the failed device's data is overwritten from
 * then on): a drain that a kill, a crash or a stop cut short is resumed
 * for the lost sectors the state file proves (version 3): each one read
 * back from the abandoned device, its CRC checked, written to the origin;
 * the origin flushed; only then those sectors leave the lost set, and the
 * state file is written again without proofs.  Blocking.  With write
 * false (check, a read-only volume) it only reads and counts (c->ab.resume).
 * Nothing to do without proofs. */
void abandon_resume_drain(struct cache *c, bool write);
/* At attach, after recovery, once the origin is known to be the cache's and
 * before anything else is written: the superblocks record an abandonment
 * their TC_SB_ABANDON_UNFILED flag says the state file never recorded
 * (c->ab.unfiled_seq; abandon_load()), so recovery replayed the log as it
 * was then.  Its dirty data (each sector checked) is written back to the
 * origin, the origin flushed, the abandonment written into the state file
 * with the lost set (the sectors that do not read back added), and the
 * flag cleared from the superblocks.  Returns 1 when done: the index holds
 * versions below the abandonment, so the caller opens the cache again,
 * and the state file then says what the log is; 0 with nothing to do
 * (only a flag left from a state file written since cleared); -1 with a
 * message when the start must be refused (a read-only volume, a write or
 * flush that failed, no room for the state file).  Blocking. */
int abandon_unfiled(struct cache *c, struct tc_dev *origin, char *err, size_t errlen);
/* At attach, after abandon_unfiled(), before anything is appended: the
 * lost sectors a version 4 state file marks (a drain cut short whose
 * proofs found no room) proven from the replay of the log below
 * abandoned_seq (c->ab.log_pass) and written back to the origin, the
 * origin flushed, those sectors dropped from the lost set, the marks
 * dropped, and the state file written again.  Returns 1 when done (the
 * index holds versions below the abandonment: the caller opens the cache
 * again), 0 with nothing to do, -1 with a message when the start must be
 * refused (a write or flush of the origin failed, the state file could
 * not be written).  Blocking. */
int abandon_log_marks(struct cache *c, struct tc_dev *origin, char *err, size_t errlen);
/* The same for check --salvage (a cache opened offline), to origin, which
 * it checked is the cache's: the proven sectors written back and flushed,
 * then dropped from the lost set, and the state file written again
 * without them and without proofs (blocking).  c->ab.resume says what was
 * done; a state file that cannot be written keeps them in the lost set. */
void abandon_salvage_drain(struct cache *c, struct tc_dev *origin);
/* Proofs were added to the lost set after the abandonment's state file
 * was written (failure.c: chunk headers read back): the state file is
 * written again now (blocking; retried by the timer), or by the stop. */
void abandon_proofs_added(struct cache *c);
/* A write of origin bytes [off, off + len) is about to reach the origin
 * directly (lostlog.c), or the cache in service (cache.c: after a resumed
 * drain whose state file could not be written, the file on disk keeps
 * its proofs): if the state file on disk holds a proof of one of
 * its sectors, the proofs of those sectors are dropped and the state file
 * written again now (blocking), or a crash after the write would let the
 * next start write the older proven version over it.  -errno (the write
 * must fail) if the state file cannot be written. */
int abandon_proofs_before_write(struct cache *c, uint64_t off, uint64_t len);
/* A client write, write-zeroes or trim of origin bytes [off, off + len)
 * is about to reach the origin past an abandoned cache (lostlog.c, or
 * writepath.c for one under way at the failure): true, with an error naming
 * the state file, when it must fail (EIO) instead -- the state file does
 * not record the abandonment yet (the superblocks carry it with
 * TC_SB_ABANDON_UNFILED) and the range overlaps sectors lost now or at
 * the abandonment (drained ones too: c->ab.unfiled_lost).  The log still
 * holds those sectors' dirty data from before the abandonment, and
 * a start that finds the abandonment unfiled writes it back over the
 * origin (abandon_unfiled()): acknowledged, this write would read its
 * older data then.  `what` names the request ("write", "trim", ...). */
bool abandon_unfiled_refuses(struct cache *c, const char *what, uint64_t off, uint64_t len);
void abandon_free(struct cache *c);
/* At attach, before the first write to the cache: room kept aside for the
 * state file (preallocated spares, abandon.c), so that its rewrites need
 * no new blocks of a file system that has filled up since. */
void abandon_keep_room(struct cache *c);
/* The lost set could now hold `blocks' blocks (the dirty blocks and the
 * lost ones: at an abandonment every dirty block joins it): the room kept
 * aside grows ahead of the state file when it is short.  Called when a
 * block may have turned dirty; a compare unless the room must grow. */
void abandon_room_grow(struct cache *c);
static inline void abandon_room_check(struct cache *c, struct abandon *ab, uint64_t blocks)
{
    if (ab->room_watch && blocks > ab->room_blocks)
        abandon_room_grow(c);
}
/* The last device failed: record the abandonment durably (state file now,
 * superblock marks on every device that takes them). */
void abandon_record(struct cache *c);
/* Device d failed in this run (others go on): sets failed_seq[d] (the
 * log's next sequence) and returns true; false when no device is left
 * (the abandonment follows).  Called before anything is appended for the
 * failure.  The mark reaches the superblocks of the devices left only
 * once every hold taken with devfail_hold_more() has ended -- the caller
 * takes one at once, ended when what it appends for the failure is
 * durable -- and until those writes have ended too, client writes are
 * not acknowledged (see abandon.c for why). */
bool devfail_record(struct cache *c, unsigned d);
/* What a failure must make durable before its mark is written (failure.c:
 * its appends, the blocks it rewrites): held, and acknowledgements with
 * it, until the matching devfail_hold_done(); the last one ended writes
 * the marks recorded meanwhile. */
void devfail_hold_more(struct cache *c);
void devfail_hold_done(struct cache *c);
/* A failure's records (tombstones, LOST records) cannot all be appended
 * and cannot wait for room (a stop): the marks pending and later are not
 * written -- a restart replays the failed device's log, whose versions
 * are newer than what the missing records would have dropped -- and the
 * writes held for them fail with EIO instead of being acknowledged. */
void devfail_incomplete(struct cache *c, const char *why);
/* The failure mark of the segment's device covers its group: the segment
 * was written before its device failed and is never trusted again. */
bool devfail_untrusted(const struct cache *c, unsigned dev, uint64_t group_seq);
/* A client request completes while failure marks are being written: true
 * if its acknowledgement (req->done) is held until they are (a write type
 * or a flush); false: acknowledge it now.  ab is the cache's (c->ab), or
 * NULL without a cache.  With no mark pending -- always, but for the
 * moments after a device failed -- it answers here; devfail_hold() holds. */
bool devfail_hold(struct abandon *ab, struct tc_request *req, int err);
static inline bool devfail_hold_ack(struct abandon *ab, struct tc_request *req, int err)
{
    return ab != NULL && ab->devfail_marks_pending != 0 && devfail_hold(ab, req, err);
}
/* The lost set of an abandoned cache grew (a write in doubt, say): the
 * state file is rewritten now (blocking), or retried by the timer. */
void abandon_lost_grown(struct cache *c);
/* Lost sectors were written again: their clear is recorded once the
 * write is durable (an origin flush and a log sync later). */
void abandon_lost_changed(struct cache *c);
/* A FLUSH answered after the cache was abandoned (lostlog.c): fn runs once
 * every clear made so far is in the state file (err: a settle's origin
 * flush or the state file write failed), at once if there is none.  A
 * FLUSH must not be acknowledged while a crash would still make the data
 * it covers read EIO: the drain's (failure.c), or a rewrite of lost
 * sectors. */
void abandon_settle_wait(struct cache *c, void (*fn)(void *arg, int err), void *arg);
/* The same for a FLUSH or FUA write answered while the cache is in
 * service (writepath.c), or detached (lostlog.c): fn runs once every clear made so far is in the
 * durable records -- the settle's LOST records synced in the log, and the
 * state file of an abandonment before this start rewritten -- (err: the
 * settle's origin flush, its log syncs or the state file write failed),
 * at once if there is none.  Before, the records followed up to 0.5 s
 * later, and a kill in between made the data the FLUSH covered read EIO.
 * Nothing here for an abandoned cache (abandon_settle_wait()). */
void abandon_clears_wait(struct cache *c, void (*fn)(void *arg, int err), void *arg);
/* Closing, the origin just flushed (ok) or not: settle what can be. */
void abandon_close_flushed(struct cache *c, bool ok);
/* At close, after the last log sync: the state file, if the cache was
 * abandoned, or if the log lacks LOST records or tombstones it had no
 * room for (the lost set then goes into the state file,
 * TC_STATE_STOP_LOST).  -EIO if that record was needed and could not be
 * written. */
int abandon_close(struct cache *c);
/* Recovery, before applying the first entry at or above c->stop_lost_seq
 * (or after the last): the lost set a stop recorded replaces the lost
 * set, and blocks holding nothing else needed are dropped.  wt_unstable
 * (may be NULL) says whether an entry's newest write-through version is
 * above the stable mark: the origin may lack it, so its sectors count as
 * dirty (recovery makes them dirty after this). */
void abandon_stop_lost_apply(struct cache *c, bool (*wt_unstable)(void *arg, uint32_t id),
                             void *arg);
/* At start, the cache open: a lost set loaded from a stop's state file is
 * recorded in the log (LOST records), and once synced the state file no
 * longer carries it. */
void abandon_started(struct cache *c);
/* The last tombstone of a copy the start dropped that waited for room is
 * durable (or its wait ended otherwise): the lost set a stop left in the
 * state file may go (c->ab.start_drops_waiting). */
void abandon_start_drops_durable(struct cache *c);
bool abandon_idle(struct cache *c);
/* Device d's superblocks rewritten from c->devs[d].sb (copy A, flush,
 * copy B, flush), in turn with the marks' rewrites of the same device, so
 * that no two writes of one copy are ever in flight together (the later
 * one encodes every mark and record known when it starts); then
 * done(arg, d, err).  Counted in abandon_idle(): the stop waits for it.
 * The running checkpoints' slots (checkpoint.c). */
void abandon_sb_rewrite(struct cache *c, unsigned d, void (*done)(void *arg, unsigned d, int err),
                        void *arg);
void abandon_status_json(struct cache *c, struct tc_json *j);

#endif
