/*
 * The cache's side of the lost set (lostlog.c; lost.h: the set itself,
 * c->map.lost): a loss recorded in the log, a clear told to the state
 * file, the log records that follow a settle, the EIO a flush reports
 * after a loss, and the requests that reach the origin directly once the
 * cache has failed or is detached.
 */
#ifndef TC_ENGINE_LOSTLOG_H
#define TC_ENGINE_LOSTLOG_H

#include <stdbool.h>
#include <stdint.h>

struct cache;
struct ereq;
struct tc_mask;

/* A request on the origin path while the cache is failed or detached:
 * reads of lost sectors fail with EIO; writes clear them. */
void lost_passthrough(struct ereq *e);
/* 0, or -EIO once after acknowledged data was lost (for a flush). */
int lost_flush_result(struct cache *c);
/* Record durably (in the log) that these sectors of the block are lost now
 * (and fail the next flush).  Dirty data the cache loses goes through
 * map_lose_dirty(), which counts it too. */
void lost_record(struct cache *c, uint64_t oblock, const struct tc_mask *mask);
/* Record the whole lost set in the log again -- every block the durable
 * records must still call lost (lost_get_persisted()) -- when the records
 * that said so may be gone with their chunk (unreadable, on a failed
 * device, or in groups a detach ends).  The set in memory is
 * authoritative.  False if some record found no room. */
bool lost_record_again(struct cache *c);
/* Dirty data kept on a draining device (failure.c: the last in service):
 * recorded lost in the durable records (the state file of the abandonment
 * that follows at once), so that a restart before it is written back --
 * which distrusts that device's log -- fails its reads instead of
 * returning the origin's older data.
 * Not a loss yet (no flush reports it, lost_dirty_bytes does not count
 * it): reads take the drained version while it is in the index, and its
 * writeback clears it (lost_written()). */
void lost_record_pending(struct cache *c, uint64_t oblock, const struct tc_mask *mask);
/* An origin write failed in doubt (-ETIMEDOUT): the sectors read as lost
 * until written again, without failing the next flush. */
void lost_in_doubt(struct cache *c, uint64_t oblock, const struct tc_mask *mask);
void lost_in_doubt_range(struct cache *c, uint64_t off, uint64_t len);
/* Written again: no longer lost (lost_clear()), and the state file told. */
void lost_written(struct cache *c, uint64_t oblock, const struct tc_mask *written);
/* Drained: the version a failed device held written back (its proofs stay
 * until settled; lost.h lost_clear_drained()). */
void lost_drained(struct cache *c, uint64_t oblock, const struct tc_mask *written);
void lost_written_range(struct cache *c, uint64_t off, uint64_t len);
/* A FUA write the origin has, after the cache was abandoned: answered
 * (e->complete) once the state file no longer records its sectors lost
 * (abandon_settle_wait()), with EIO, said, if it could not be told. */
void lost_fua_settle_wait(struct cache *c, struct ereq *e);
/* A settle (abandon.c) ended: lost_settle_end(), and the log records the
 * blocks' new lost sectors unless the cache is abandoned. */
void lost_settle_done(struct cache *c, bool ok);

#endif
