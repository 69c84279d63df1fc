/*
 * The cleaner (cleaner.c): reclaims the oldest group of segments when free
 * space runs low -- walk it, write back or copy its dirty data, record the
 * new tail durably, drop what stays behind, free its segments.  It owns
 * struct cleaner (c->cleaner) and the appends waiting for room.
 *
 * Blocks stay readable in the old group until the new tail is durable, so
 * a crash at any step recovers a consistent index.  A segment holding
 * dirty data is never reused before that data is on the origin (cache.h:
 * invariant 5; it frees a group only when no entry points into it:
 * invariants 4 and 10).
 */
#ifndef TC_ENGINE_CLEANER_H
#define TC_ENGINE_CLEANER_H

#include <stdbool.h>
#include <stdint.h>

struct cache;
struct log_waiter;
struct tc_json;

int cleaner_init(struct cache *c);
void cleaner_fini(struct cache *c);
void cleaner_kick(struct cache *c);
void cleaner_stop(struct cache *c);
void cleaner_resume(struct cache *c);
/* A device failed: a reclaim in progress must look at its group again. */
void cleaner_device_failed(struct cache *c);
bool cleaner_idle(struct cache *c);
/* A running checkpoint waits for the cleaner to be idle (checkpoint.c,
 * R1).  Paused (within the checkpoint's hold), the cleaner ends the pass
 * under way and starts no other while the log keeps its low water mark
 * and a checkpoint's room free and no append waits for room; unpaused, it
 * is kicked. */
void cleaner_pause(struct cache *c, bool pause);
/* Run w once free space allows appends again (w->fn(w, 0)), or with an
 * error once cleaner_fail_waiters() was called. */
void cleaner_wait_space(struct cache *c, struct log_waiter *w);
/* A stop that cannot wait any longer for room (cache.c): every append
 * waiting for it, and every later one, is called with err instead, from a
 * task of its own. */
void cleaner_fail_waiters(struct cache *c, int err);
/* The appends waiting for room (a list through their next). */
struct log_waiter *cleaner_waiters(struct cache *c);
/* Take w out of the waiters for room (false: it was not waiting); its fn
 * does not run. */
bool cleaner_cancel_wait(struct cache *c, struct log_waiter *w);
void cleaner_space_freed(struct cache *c);
/* No device takes appends any more (the last one failed): every append
 * waiting for room goes on now, to find none and do without (writepath.c),
 * instead of waiting for room no cleaner can free. */
void cleaner_wake_all(struct cache *c);
/* Room that waits on the origin (cleaner.c, "room held by the origin"):
 * true while client writes needing room fail at once (with EIO while the
 * origin is offline, with its refusal's ENOSPC or EIO while it answers). */
bool cleaner_origin_holds_room(struct cache *c);
/* While they do: the error a client write of `sectors` in `appends`
 * appends fails with as a whole, before any of it is appended, when the
 * room left would not take it all (0: it goes on; each append that finds
 * no room then fails alone). */
int cleaner_room_refused(struct cache *c, uint64_t sectors, unsigned appends);
/* Writeback wrote dirty data to the origin: room held by it may come. */
void cleaner_origin_took(struct cache *c);
/* status --json: "cleaner" (running, waiting for its tail sync, retry armed,
 * appends waiting for room). */
/* Whether `sectors` of data appended with the reserve leave the room its
 * last records need (the cleaner's tail record, LOST records, tombstones):
 * the bound on every data-carrying append that takes the reserve. */
bool cleaner_data_fits(struct cache *c, uint64_t sectors);
/* The same for a mirrored append of `sectors` (a copy on each of two
 * devices): the room it leaves once placed (log_mirror_room()).  With one
 * device in service, cleaner_data_fits() (one copy is made). */
bool cleaner_mirror_fits(struct cache *c, uint64_t sectors);
/* Whether a record appended with the reserve by a device failure's path
 * (a tombstone, a LOST record) leaves the cleaner's tail record its room;
 * false (counted: cleaner.records_deferred): it waits for room, as it
 * does when there is none at all. */
bool cleaner_record_fits(struct cache *c);
/* Whether a client record -- a tombstone of a client's write, trim or
 * write-zeroes, or writeback's clean record -- may be appended with the
 * reserve: only within a small budget of it
 * (cleaner_client_record_budget(), sectors), so that a flood of them
 * never takes the room the cleaner needs to move live data and record
 * the log's end.  false (counted: cleaner.client_records_refused): a
 * tombstone waits for room (cleaner_wait_space()) as client data does, a
 * clean record is deferred (writeback.c).  Always true at a stop. */
bool cleaner_client_record_fits(struct cache *c);
uint64_t cleaner_client_record_budget(const struct cache *c);
/* A device failed, others are in service: the room they have left
 * (log_room()), before the failure's appends, noted for status
 * (cleaner.failure_room_min). */
void cleaner_failure_room(struct cache *c);
/* The room (sectors) a running pass may still need for its copies, with
 * its records' (0: none is due).  A client write's append is made only
 * if it leaves that much room (struct append's leave_claim); otherwise it
 * waits for room as when there is none, and cleaner_claim_wait() counts
 * it (status: cleaner.claim_waits). */
uint64_t cleaner_claim(struct cache *c);
void cleaner_claim_wait(struct cache *c);
void cleaner_status_json(struct cache *c, struct tc_json *j);
/* What the cleaner's reclaims cost the devices so far (replay's figures):
 * chunk bytes its walks read from them, and tail records synced. */
void cleaner_costs(const struct cache *c, uint64_t *walk_read_bytes, uint64_t *tail_syncs);

#endif
