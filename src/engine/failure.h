/*
 * A cache device that fails (failure.c): on its first write error, when
 * it has vanished, or after a run of read errors.  The volume keeps
 * serving, degraded: clean data on the device is dropped, dirty data with
 * a mirror keeps the mirror, dirty data still in RAM is appended again on
 * another device, and dirty data with no copy is rescued: read back from
 * the failed device, which usually still reads, and appended on another
 * -- or, when the device was the last in service, drained: written back
 * from it to the origin.  Only sectors that cannot be read back are lost
 * (recorded, and reads of exactly those sectors fail with EIO until
 * written again).  When no device is left the
 * cache is abandoned for good (abandon.h).
 */
#ifndef TC_ENGINE_FAILURE_H
#define TC_ENGINE_FAILURE_H

#include <stdbool.h>
#include <stdint.h>

struct cache;

void cache_device_error(struct cache *c, unsigned d, int err, bool write);
void cache_device_fail(struct cache *c, unsigned d, const char *why);
/* The blocks the devices in service hold when full: what the policy, the
 * ghost of group fills and the index are sized for (after a failure,
 * without the failed devices'). */
uint64_t cache_blocks_in_service(const struct cache *c);
/* The blocks waiting for room in the log to be rewritten after a device
 * failure (failure.c) stop waiting and try again now: when the last
 * device has failed (that failure dealt with them: they end) or when a
 * stop begins (c->stopping: they take the cleaner's reserve, or lose
 * their dirty sectors, recorded, without room there). */
void rewrites_stop_waiting(struct cache *c);
/* The cleaner must retire a group holding such data while appends wait
 * for room: the data goes to the origin instead (written back, then
 * dropped from the failed devices); what the origin refuses is written
 * again after writeback's back-off, and recorded lost only once writeback
 * gives its block up (writeback_block_given_up()) or at a stop.  Begins an attempt unless one is under way; the cleaner
 * is kicked when it ends. */
void cache_rescue_to_origin(struct cache *c);
/* A clean block dropped from the index whose copies in the log may be
 * older than the origin's data (originwin.c): its tombstone, from the
 * cleaner's reserve.  With no room even there it is not given up: the
 * block is rewritten as after a device failure (failure.c, struct
 * rewrite) -- locked, so that no version of it reaches the log before the
 * tombstone, it waits for room, and write acknowledgements wait with it
 * (devfail_hold_more()); at a stop, without room then, the writes held
 * fail with EIO (devfail_incomplete()). */
void cache_tombstone(struct cache *c, uint64_t oblock);
/* The tombstones of the clean blocks recovery dropped for a device
 * failure mark (recovery.c, untrusted_clean()), as cache_tombstone();
 * called once the start may append, before clients are served: it waits
 * (polling the reactor) until those appended are written and the devices
 * flushed; those without room wait for it, counted in
 * c->ab.start_drops_waiting until durable (a stop's state file stays
 * meanwhile: abandon.c).  Frees the list. */
void cache_mark_tombstones(struct cache *c);
/* A start drops clean block oblock from the index (recovery: below a
 * failure mark; the origin's sample: adopted where it differs; a stop's
 * lost set) while the log still holds its copy: cache_mark_tombstones()
 * appends its tombstone, so that a later crash cannot bring the copy back
 * over a write made since. */
void cache_drop_at_start(struct cache *c, uint64_t oblock);
/* Whether a stop gave up the tombstone of this block (failure.c): no
 * write of it may reach the origin any more. */
bool cache_block_tombless(const struct cache *c, uint64_t oblock);
/* LOST records found no room in the log (c->lost_unrecorded grew): the
 * lost set is recorded again once there is room, write acknowledgements
 * waiting for it, as after a device failure. */
void cache_lost_record_again(struct cache *c);
/* After a read error or checksum mismatch: a cache file that shrank fails. */
void cache_device_check_size(struct cache *c, unsigned d);
/* Drains (failure.c): a drained device that has no dirty data left is
 * finished; flushes held are let go.  Called by writeback after its jobs
 * and on its tick. */
void cache_drain_check(struct cache *c);
/* A FLUSH while a device drains: held (true) until the drains end, then
 * resume(e) is called -- or e completes with EIO if they cannot end. */
struct ereq;
struct tc_mask;
bool cache_drain_hold(struct cache *c, struct ereq *e, void (*resume)(struct ereq *e));
/* Requests held so (status: drain_waiting_requests), with those held for
 * the rescues and the reads and writes waiting for their blocks'
 * writeback from the draining device (lostlog.c). */
uint64_t cache_drain_waiting(const struct cache *c);
/* A FLUSH while rescues are pending (a failed device's only-copy dirty
 * data being read back onto a survivor): held (true) until they end, then
 * resume(e) is called, so that the flush reports all the loss they may
 * still find, once. */
bool cache_rescue_hold(struct cache *c, struct ereq *e, void (*resume)(struct ereq *e));

/* Whether no cache device is in service (every one failed, or the last
 * one is failing now). */
bool cache_none_in_service(struct cache *c);

/* A FLUSH, or a FUA write, whose log sync ended (well or not) when no
 * device is in service: the log it was made durable in is distrusted, so
 * e is answered only once the drain has put the data on the origin and an
 * origin flush made it durable (or with EIO if some was lost), and true
 * is returned; false: a device is in service, e is the caller's. */
bool cache_durable_after_failure(struct cache *c, struct ereq *e);

/* The dirty sectors of index entry id served from a draining device: in
 * the lost set until written back, yet readable (lostlog.h). */
void cache_drain_mask(struct cache *c, uint32_t id, struct tc_mask *m);
/* Up to max origin blocks, ascending from *from, with dirty sectors on a
 * draining device, into blocks; *from moves past the last block looked
 * at (nblocks_origin once the scan is through).  *bytes (if not NULL)
 * grows by their dirty bytes there.  For a stop's own drain (cache.c). */
unsigned cache_drain_blocks(struct cache *c, uint64_t *from, uint64_t *blocks, unsigned max,
                            uint64_t *bytes);
/* Whether [off, off + len) holds lost sectors, drained ones aside. */
bool cache_lost_overlaps(struct cache *c, uint64_t off, uint64_t len);

#endif
