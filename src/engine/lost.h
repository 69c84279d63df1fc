/*
 * Sectors whose dirty data was lost (a cache device failed and no other
 * copy existed).  Reads of them fail with EIO -- the origin's older data is
 * never returned in their place -- until a client writes them again.
 *
 * The set is small (it exists only after a failure), kept in a hash table
 * here and in the log as LOST records ("block B's lost sectors are now M"),
 * which recovery applies in sequence order and the cleaner carries forward
 * while they still matter.  When no device is left to hold the log (the
 * cache abandoned), the state file holds the set instead (abandon.c).
 * The cache's side -- recording a loss in the log, telling the state file
 * of a clear, the log records of a settle, the EIO of a flush, the
 * requests that reach the origin directly -- is in lostlog.c.
 *
 * The dirty data of the last device in service, failed and still being
 * drained (failure.c), is in the set too, so that the state file holds it
 * lost until it is written back; while it drains, requests wait for its
 * writeback (lost_passthrough()), reads in flight at the failure take it
 * from the device (cache_drain_mask(), cache_lost_overlaps()), and its
 * writeback clears it (after the writeback's origin flush).
 *
 * Every path checks it: the cache's read path, and lost_passthrough() for
 * the requests that reach the origin directly once the cache has failed
 * or is detached -- there a read of a lost sector fails with EIO exactly
 * as it would through the cache, and a write clears what it covers.
 * A clear reaches the durable records (LOST records, the state file) only
 * once the clearing write is durable: see abandon.c for the order.
 *
 * Invariants: a zeroed struct lost is an empty set (its buckets are
 * allocated on the first insertion, and lost_free() returns it to that).
 * Each block has at most one entry, and an entry lives while any of its
 * three masks (lost now, unsettled, settling) holds a sector: it is
 * dropped once all are empty (lost_set() and the end of a settle do it).
 * `blocks` counts the entries, `sectors` the sectors of their `mask`, and
 * `unsettled_blocks` the entries with unsettled sectors.  A clear moves
 * sectors from `mask` to `unsettled`, a settle's beginning all of
 * `unsettled` to `settling`, and its end empties `settling` (into
 * `unsettled` again if the settle failed); a settle's end visits the blocks
 * by number, so its callback may change the set.
 *
 * Proofs (an abandonment's, abandon.c "Resuming the drain"): a sector of
 * `mask` may carry where its lost version's data was on the failed device
 * and its CRC.  A proof lives only while its sector stays in `mask`
 * without a break: lost_set() drops the proofs of every sector it adds to
 * or removes from `mask` (a new loss, a write), so a proof never outlives
 * the version it names -- but for a drain's write-back of that version
 * (lost_clear_drained()), whose proofs stay until it is settled: until
 * then the records call the sectors lost, and a crash must find them
 * proven.  `proof_blocks` counts the entries holding a proof array.
 */
#ifndef TC_ENGINE_LOST_H
#define TC_ENGINE_LOST_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/mask.h"

struct lost_entry;

struct lost {
    struct lost_entry **b;          /* LOST_BUCKETS chains; NULL: none yet */
    uint64_t blocks, sectors;       /* entries (any mask), sectors of `mask` */
    uint64_t unsettled_blocks;      /* entries with unsettled sectors */
    uint64_t proof_blocks;          /* entries with a proof array */
};

/* Where a lost sector's version was, and its CRC-32C (where 0: none; the
 * state file's encoding, format/ondisk.h tc_state_where()); and whether
 * that version's chunk write had completed when the proof was made (not
 * only in a RAM image, or moved from one): the replay of the log finds it
 * then, so a state file without room for the proof may mark the sector
 * instead (version 4; abandon.c). */
struct lost_proof {
    uint64_t where;
    uint32_t crc;
    bool logged;
};

/* Free the entries: the set is empty (and zeroed) again. */
void lost_free(struct lost *l);
/* The block's lost sectors (mask may be NULL); false if none.  An empty
 * set (blocks counts every entry), as most caches' always is, answers
 * here; lost_find() looks the block up. */
bool lost_find(const struct lost *l, uint64_t oblock, struct tc_mask *mask);
static inline bool lost_get(const struct lost *l, uint64_t oblock, struct tc_mask *mask)
{
    return l->blocks != 0 && lost_find(l, oblock, mask);
}
/* The sectors the durable records must still call lost: lost now, or
 * cleared by a write not yet known durable.  False if none. */
bool lost_get_persisted(const struct lost *l, uint64_t oblock, struct tc_mask *mask);
/* Set the block's lost sectors to mask (empty: none). */
void lost_set(struct lost *l, uint64_t oblock, const struct tc_mask *mask);
/* Written again: these sectors are no longer lost (reads see it at once;
 * the durable records once the write is durable).  True if any was. */
bool lost_clear(struct lost *l, uint64_t oblock, const struct tc_mask *written);
/* The same for a drain's write-back of the very version the sectors'
 * proofs name: the proofs stay while the records still call the sectors
 * lost (unsettled), so that a state file written meanwhile keeps them and
 * a start after a crash resumes the drain of them, as of those not
 * written back yet.  Any other write drops them (lost_clear()). */
bool lost_clear_drained(struct lost *l, uint64_t oblock, const struct tc_mask *written);
/* The same for a write of bytes [off, off + len), with blocks of
 * block_size bytes.  True if any sector was lost. */
bool lost_clear_range(struct lost *l, uint32_t block_size, uint64_t off, uint64_t len);
/* Does bytes [off, off + len) hold a lost sector?  Likewise answered here
 * for an empty set; lost_scan() looks. */
bool lost_scan(const struct lost *l, uint32_t block_size, uint64_t off, uint64_t len);
static inline bool lost_overlaps(const struct lost *l, uint32_t block_size, uint64_t off,
                                 uint64_t len)
{
    return l->blocks != 0 && len != 0 && lost_scan(l, block_size, off, len);
}
/* Sectors lost now. */
uint64_t lost_sectors(const struct lost *l);
/* Cleared sectors wait for a flush to settle them. */
bool lost_unsettled(const struct lost *l);
/* A flush of the origin (and a sync of the log) begins: the sectors
 * cleared so far are durable once it completes. */
void lost_settle_begin(struct lost *l);
/* It completed (ok) or failed (the clears wait for the next one).  If ok,
 * fn sees each block whose clears it settled, with lost_get_persisted()'s
 * mask (empty: none left), before the block's entry is dropped if empty. */
void lost_settle_end(struct lost *l, bool ok,
                     void (*fn)(void *arg, uint64_t oblock, const struct tc_mask *m), void *arg);
/* Sector s (of blocks of spb sectors) of a block, lost now, gets proof p;
 * nothing if it is not lost now. */
void lost_set_proof(struct lost *l, uint64_t oblock, unsigned spb, unsigned s,
                    const struct lost_proof *p);
/* The proof of sector s of a block (false: none). */
bool lost_get_proof(const struct lost *l, uint64_t oblock, unsigned s, struct lost_proof *p);
/* The same for a sector the durable records call lost: lost now, or
 * drained and not settled yet (lost_clear_drained()). */
bool lost_get_proof_persisted(const struct lost *l, uint64_t oblock, unsigned s,
                              struct lost_proof *p);
/* Drop every proof. */
void lost_drop_proofs(struct lost *l);
/* Drop the proofs of the sectors of bytes [off, off + len) (blocks of
 * block_size bytes); the sectors stay lost. */
void lost_drop_proofs_range(struct lost *l, uint32_t block_size, uint64_t off, uint64_t len);
/* Every block the durable records must call lost, with lost_get_persisted's mask. */
void lost_foreach(const struct lost *l,
                  void (*fn)(void *arg, uint64_t oblock, const struct tc_mask *m), void *arg);

#endif
