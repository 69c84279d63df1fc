/*
 * The checkpoint: what recovery would rebuild from the log, written by a
 * clean stop so that the next start need not walk the log (the format and
 * where it lives: ondisk.h, "checkpoint").
 *
 * Written: after the stop's last log sync, when nothing is in flight and
 * a scan of the log would rebuild exactly the state in memory
 * (ckpt_wanted()): encoded in canonical order (encode()), written into
 * free segments, the devices flushed; then the clean-stop record names it
 * (cache.c).  Read: at the next start, if the record names it
 * (recovery.c): checked whole (length, checksum, header, the record's
 * sequence numbers and chunk count), then every record is checked against
 * the geometry before anything changes (parse() twice: once to check, once
 * to apply), so a checkpoint that cannot be used leaves the cache as it
 * was for the scan.  Applied as recovery applies the log: the live
 * segments' chunk tables and groups, then each block's fragments oldest
 * first through map_add_fragment(), which rebuilds the dirty set and the
 * segments' live counts, then the lost set.
 *
 * tiercache check encodes what its own full scan rebuilt the same way and
 * compares (ckpt_verify()): a checkpoint is right only if it is byte for
 * byte what the scan gives (the next sequence number aside, which the
 * stop may have taken higher than the log shows).
 */
/*
 * Periodic ("running") checkpoints, for a start after a crash.  BUILT in
 * part (off by default, "running checkpoints" below and recovery.c,
 * from_running_checkpoint()): the barrier of P1 is a moment the log is
 * idle and flushed (the runner syncs and looks again; overdue under a
 * steady load, it holds new requests for a moment to find one: "the
 * hold", volume_hold()), P2's extra per-block state is not needed there (no
 * write-through version is above the stable mark at such a moment), P3
 * as designed, P4 NOT built (the cleaner does not wait for a checkpoint;
 * a start whose checkpoint the cleaner passed -- the tail moved -- drops
 * the checkpoint's segments of the reclaimed groups and what they hold,
 * as P5 says, but a checkpoint holding lost records is then not used),
 * P5 and P6 as designed.  What follows is the whole design.
 *
 * A start after kill -9 or a power loss finds no clean-stop record and
 * walks every chunk header of the log (recovery.c): time linear in what
 * the cache holds.  The plan: checkpoints written while the daemon runs,
 * so that such a start reads the newest one and replays only the log
 * written after it.  What must hold, and how each failure falls back:
 *
 *  P1 The cut.  A checkpoint k stands for the log up to chunk C_k, with
 *     next sequence N_k, taken at a barrier: the open chunks sealed and
 *     issued, nothing appended meanwhile.  Then every entry of a chunk up
 *     to C_k has a sequence below N_k and every later chunk's entries are
 *     at or above it.  Without the barrier this may break: with two
 *     devices each has its open chunk, sealed and issued on its own, so a
 *     version with the lower sequence may sit in the later chunk; replayed
 *     after the checkpoint it would win over the newer version the
 *     checkpoint holds (older data served, no error).  So the replay takes
 *     chunks by chunk sequence (> C_k) and applies their entries by entry
 *     sequence, as apply() does.  The barrier costs the encoding time (a
 *     walk and a sort of every block: not measured; at 1 TiB, seconds):
 *     beyond small caches it must become fuzzy -- blocks captured one at
 *     a time while appends go on, each with the sequence of its newest
 *     entry applied, and the replay skipping a block's entries up to that
 *     (apply once, never twice).
 *
 *  P2 What the checkpoint holds is what a scan of the log up to C_k
 *     rebuilds (encode() as today), plus what the scan's later steps
 *     need that a clean stop does not have: per block its newest
 *     write-through sequence above the stable mark (step 5 makes such a
 *     version dirty after the replay), and per device its newest chunk
 *     (the sequence record, seqrec.c, compares the devices with it).  A
 *     checkpoint is not taken while the lost set is being recorded, a
 *     device is out of service, the state file carries a stop's lost set,
 *     or the cache is detached (ckpt_wanted()); it is taken later.
 *
 *  P3 Where: free segments held out of the allocator.  Two slots, as
 *     the superblock's two copies: the segments of checkpoint k-1 stay
 *     reserved until every device's superblocks name k (copy A, flush,
 *     copy B, flush, as the clean-stop record is written), then they go
 *     back to the free stacks.  A kill while k is written, or while the
 *     superblocks are, leaves k-1 named and whole.  The record naming a
 *     running checkpoint is not the clean-stop record: a start keeps it
 *     (it clears only the stop record), because it is always used with
 *     the replay after it, never as the whole log.  It takes a new
 *     superblock version, so that builds that know only version 5 refuse
 *     the devices instead of handing the reserved segments out.
 *
 *  P4 The tail never passes the group that was open at C_k of the newest
 *     checkpoint whose superblocks are durable: the cleaner asks for a
 *     new checkpoint first (and waits for it, as it waits for room).
 *     So every chunk after C_k is in a live group when the crash comes,
 *     and the log to replay is less than one pass of the cache.  Periodic
 *     also means: every 1/8 of the segments appended (write amplification
 *     ~ checkpoint size / (cache size / 8): 56 bytes per 64 KiB block,
 *     under 1 %), so that the replay is short.
 *
 *  P5 Which segments changed since C_k (the stale segments).  A segment
 *     whose incarnation began after the cut has a first chunk whose group
 *     sequence is at or above N_k (groups take their sequence from the
 *     same counter as entries, when they open).  Reading the first header
 *     of every segment (survey.c: one read per segment, not per chunk)
 *     sorts them: SINCE_REOPENED segments are walked whole, as recovery
 *     walks (find_damage() included), their chunks replayed; every entry
 *     of the checkpoint pointing into such a segment, or into a segment
 *     of a group below the tail the newest chunk records, is dropped
 *     first.  That is what the scan does: a reclaimed group's CLEAN
 *     records and tombstones name only versions in groups reclaimed
 *     before it (groups are reclaimed oldest first), its LOST records the
 *     cleaner carried forward, its hot blocks it appended again (newer
 *     entries, replayed).  SINCE_UNCHANGED segments keep the checkpoint's
 *     chunk table, except the segments of the group open at C_k: they
 *     are walked on from the fill the checkpoint records.  One the
 *     checkpoint does not name is free: free at the cut, and no group
 *     opened since (that would be SINCE_REOPENED).  SINCE_UNKNOWN
 *     (nothing at the start that checks: a torn first chunk, never
 *     written, a piece of a checkpoint) are free unless the checkpoint
 *     names them live -- then the checkpoint's view of them is stale only
 *     if they were reclaimed (below the new tail: dropped) or damaged,
 *     which the scan would report and this start cannot see (the
 *     trade-off below).  Later, a forward pointer in every group's headers
 *     to the next group's segments (chosen when the group opens) would
 *     make even this step follow only the groups written after the cut.
 *
 *  P6 The rest of recovery, over the replayed chunks only: the newest of
 *     them (or C_k) gives the tail, the stable mark and the durable mark;
 *     chunks past the durable mark are checked with their data (torn
 *     writes ignored, as step 3); linked tombstones, mirrors, clean
 *     records as apply().  Marks newer than the checkpoint void it: an
 *     abandonment (abandoned_seq > N_k) or a device failure mark
 *     (failed_seq[d] > N_k) -- the log below them is untrusted, the scan
 *     handles it; a stop's lost set in the state file likewise.
 *
 *  F  Falls back to the full scan, with a log line saying why, whenever
 *     the newest checkpoint does not check (length, checksums, header, the
 *     records' geometry -- ckpt_restore() checks all of it before it
 *     changes anything), the devices' records differ, a mark above voids
 *     it, or the replay meets what only the scan judges (damage in a
 *     replayed segment, a read error, a device's newest chunk below the
 *     sequence record: the scan decides before anything is refused).
 *
 * Trade-off taken knowingly: damage to a chunk header written before the
 * cut is not seen at such a start (as after a clean stop with a
 * checkpoint today); reads check each sector's CRC, and check audits the
 * whole log.
 *
 * Tests it needs: kill -9 at random points, during the checkpoint's
 * write and its superblock update included (testdev holds, as
 * crash/checkpoint-kill), each start's index, dirty set and lost set
 * compared with a full scan's (check encodes both and compares, as
 * ckpt_verify()); two devices with a version's copies in chunks issued
 * out of entry order around the cut (P1); a cleaner that reclaims past
 * the cut while the checkpoint is late (P4); a corrupt checkpoint
 * falling back with its log line.
 *
 * What it buys, measured after kill -9 (bench/run scale, its survey
 * rows; medians of 3, the machine loaded): with 4 GiB cached, the first
 * headers of the 1,279 segments read in 10 ms, where the offline scan
 * (4,119 live chunks) takes 0.35 s and the start 0.68 s to its first
 * answer (1 GiB: 3 ms, 0.12 s, 0.33 s).  The start after a clean stop,
 * from its checkpoint: 0.18 s (1 GiB: 0.20 s).  A start from a periodic
 * checkpoint would cost about that plus the replay; it still re-adds
 * every block (under 0.8 us each: some 13 s of CPU at 1 TiB of 64 KiB
 * blocks), so a start independent of the cache's size needs the other
 * half of the issue as well: serving while the index is loaded.
 */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/abandon.h"
#include "engine/cache.h"
#include "engine/checkpoint.h"
#include "engine/cleaner.h"
#include "engine/failure.h"
#include "engine/originwin.h"
#include "engine/recovery.h"
#include "engine/writeback.h"
#include "engine/writepath.h"
#include "util/crc32c.h"
#include "util/json.h"
#include "util/log.h"
#include "util/misc.h"

_Static_assert(sizeof ((struct ckpt_place *)0)->segs / sizeof(uint32_t) == TC_CKPT_MAX_SEGS,
               "a checkpoint's place names as many segments as a record");

/* I/O is issued in pieces of at most this many bytes. */
#define CKPT_IO (1u << 20)

static unsigned mask_words(unsigned spb) { return (spb + 63) / 64; }

static uint8_t *put_mask(uint8_t *p, const struct tc_mask *m, unsigned w)
{
    for (unsigned i = 0; i < w; i++)
        le64_put(p + 8 * i, m->w[i]);
    return p + 8 * w;
}

static const uint8_t *get_mask(const uint8_t *p, struct tc_mask *m, unsigned w)
{
    memset(m, 0, sizeof *m);
    for (unsigned i = 0; i < w; i++)
        m->w[i] = le64_get(p + 8 * i);
    return p + 8 * w;
}

/* The segments a checkpoint describes: those of live groups (at or after
 * tail) holding chunks, as recovery finds them. */
static bool seg_recorded(struct cache *c, uint32_t s, uint64_t tail)
{
    const struct segment *sg = space_seg(&c->sp, s);
    return sg->state != SEG_FREE && sg->seq >= tail && sg->seq > 0 && sg->nchunks > 0;
}

struct oid {
    uint64_t oblock;
    uint32_t id;
};

static int cmp_oid(const void *a, const void *b)
{
    const struct oid *x = a, *y = b;
    return x->oblock < y->oblock ? -1 : x->oblock > y->oblock;
}

struct lost_list {
    struct oid *v;                  /* id unused */
    struct tc_mask *m;
    size_t n, cap;
};

static void lost_collect(void *arg, uint64_t oblock, const struct tc_mask *m)
{
    struct lost_list *l = arg;
    if (mask_empty(m))
        return;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->v = realloc(l->v, l->cap * sizeof *l->v);
        l->m = realloc(l->m, l->cap * sizeof *l->m);
        if (l->v == NULL || l->m == NULL)
            abort();
    }
    l->v[l->n] = (struct oid){ .oblock = oblock, .id = (uint32_t)l->n };
    l->m[l->n++] = *m;
}

/* The checkpoint of the cache's state now, in a buffer aligned for I/O and
 * padded with zeros to whole sectors; *len: its length without padding. */
static uint8_t *encode(struct cache *c, const struct tc_ckpt *head, size_t *len)
{
    struct index *ix = &c->map.idx;
    unsigned spb = c->spb, w = mask_words(spb);
    struct tc_ckpt ck = *head;
    memcpy(ck.set_uuid, c->set_uuid, 16);
    ck.spb = spb;
    ck.total_segments = c->sp.nsegs;
    ck.nsegs = 0;
    ck.nchunks = ck.nblocks = ck.nfrags = ck.nlost = 0;
    for (uint32_t s = 0; s < c->sp.nsegs; s++)
        if (seg_recorded(c, s, ck.tail_seq)) {
            ck.nsegs++;
            ck.nchunks += space_seg(&c->sp, s)->nchunks;
        }
    struct oid *ids = tc_xmalloc((size_t)(ix->count ? ix->count : 1) * sizeof *ids);
    for (uint32_t id = 0; id < ix->used; id++) {
        const struct centry *e = CE(ix, id);
        if (ce_is_free(e))
            continue;
        TC_ASSERT_ALWAYS(ck.nblocks < ix->count);
        ids[ck.nblocks++] = (struct oid){ .oblock = ce_oblock(e), .id = id };
        ck.nfrags += e->nfrags;
    }
    if (ck.nblocks > 1)
        qsort(ids, ck.nblocks, sizeof *ids, cmp_oid);
    struct lost_list lost = { 0 };
    lost_foreach(&c->map.lost, lost_collect, &lost);
    if (lost.n > 1)
        qsort(lost.v, lost.n, sizeof *lost.v, cmp_oid);
    ck.nlost = lost.n;
    ck.body_len = (uint64_t)ck.nsegs * tc_ckpt_seg_bytes(0) + 8 * ck.nchunks +
                  ck.nblocks * tc_ckpt_block_bytes(spb) + ck.nfrags * tc_ckpt_frag_bytes(spb) +
                  ck.nlost * tc_ckpt_lost_bytes(spb);
    *len = TC_CKPT_HDR + ck.body_len;
    size_t cap = tc_round_up(*len, TC_SECTOR);
    uint8_t *buf = tc_alloc_aligned(cap);
    memset(buf + *len, 0, cap - *len);
    uint8_t *p = buf + TC_CKPT_HDR;
    for (uint32_t s = 0; s < c->sp.nsegs; s++) {
        if (!seg_recorded(c, s, ck.tail_seq))
            continue;
        const struct segment *sg = space_seg(&c->sp, s);
        const struct chunk_ref *last = &sg->chunks[sg->nchunks - 1];
        le32_put(p, s);
        le32_put(p + 4, sg->nchunks);
        le64_put(p + 8, sg->seq);
        le32_put(p + 16, (uint32_t)last->start + last->hdr_sectors + last->data_sectors);
        le32_put(p + 20, 0);
        p += 24;
        for (uint32_t k = 0; k < sg->nchunks; k++) {
            le16_put(p, sg->chunks[k].start);
            le16_put(p + 2, sg->chunks[k].hdr_sectors);
            le16_put(p + 4, sg->chunks[k].data_sectors);
            le16_put(p + 6, 0);
            p += 8;
        }
    }
    /* Sectors written back whose clean records are still deferred: clean
     * in the index, dirty in the log.  Recorded dirty, as the log has
     * them: a start from this checkpoint writes them back again and
     * appends their records then (a start that scanned the log would do
     * the same); recorded clean, the start would forget that the log
     * still holds them dirty, and the check against the log fails. */
    uint64_t *owed_ob;
    struct tc_mask *owed_m;
    size_t nowed = writeback_owed_clean(c, &owed_ob, &owed_m), oi = 0;
    for (uint64_t i = 0; i < ck.nblocks; i++) {
        uint32_t id = ids[i].id;
        struct tc_mask v, d;
        ce_get_masks(ix, id, &v, &d);
        while (oi < nowed && owed_ob[oi] < ids[i].oblock)
            oi++;
        if (oi < nowed && owed_ob[oi] == ids[i].oblock)
            mask_or(&d, &owed_m[oi]);
        le64_put(p, ids[i].oblock);
        le32_put(p + 8, CE(ix, id)->nfrags);
        le32_put(p + 12, 0);
        p = put_mask(p + 16, &v, w);
        p = put_mask(p, &d, w);
        for (uint32_t f = ce_head(ix, id); f != NIL; f = frag_next(ix, f)) {
            struct tc_mask st;
            frag_stored(ix, f, &st);
            le32_put(p, frag_seg(ix, f));
            le32_put(p + 4, frag_off(ix, f));
            le32_put(p + 8, frag_mseg(ix, f));
            le32_put(p + 12, frag_mseg(ix, f) == NIL ? 0 : frag_moff(ix, f));
            p = put_mask(p + 16, &st, w);
        }
    }
    for (size_t i = 0; i < lost.n; i++) {
        le64_put(p, lost.v[i].oblock);
        p = put_mask(p + 8, &lost.m[lost.v[i].id], w);
    }
    TC_ASSERT_ALWAYS(p == buf + *len);
    free(owed_ob);
    free(owed_m);
    free(ids);
    free(lost.v);
    free(lost.m);
    ck.body_crc = tc_crc32c(0, buf + TC_CKPT_HDR, ck.body_len);
    ckpt_encode(buf, &ck);
    return buf;
}

/* ---- the stop: writing it ---- */

/* No write-through version above the stable mark: a scan re-checks none
 * against the origin.  Recovered ones are settled one by one (map.c); the
 * others by an origin flush (run_stabilize()). */
static bool wt_all_stable(const struct cache *c)
{
    return c->lg.wt_newest_seq <= c->lg.wt_stable_seq && c->map.wt_recovered == 0;
}

/* ckpt_wanted() but for the write-through versions' stable mark, which a
 * running checkpoint can make come (run_stabilize()). */
static bool wanted_but_stable_mark(struct cache *c, const char **why)
{
    /* A detach emptied the log (cache.c), but the index in memory still
     * holds what the cache held before: encoded, it would name blocks the
     * log no longer has (check calls that a problem, the next start does
     * not use it).  The log is empty, its scan is quick. */
    if (c->vol->detached) {
        *why = "the cache is detached (its log is empty)";
        return false;
    }
    if (lost_unsettled(&c->map.lost)) {
        *why = "the lost set is being recorded";
        return false;
    }
    /* The lost set goes into the state file instead (abandon_close()):
     * the log lacks records a scan needs, and the next start applies the
     * file's set to what it rebuilt. */
    if (c->lost_unrecorded > 0 || c->ntombless > 0 || c->ab.stop_lost_pending) {
        *why = "the log lacks records of lost sectors (the state file carries them)";
        return false;
    }
    for (unsigned d = 0; d < c->ndevs; d++)
        if (c->devs[d].state != CDEV_OK || c->sp.dev_failed[d]) {
            *why = "a cache device is out of service";
            return false;
        }
    return true;
}

bool ckpt_wanted(struct cache *c, const char **why)
{
    if (!wanted_but_stable_mark(c, why))
        return false;
    if (!wt_all_stable(c)) {
        *why = "write-through versions are not all recorded stable on the origin";
        return false;
    }
    return true;
}

struct ckpt_writer {
    struct cache *c;
    struct ckpt_place *pl;
    uint8_t *buf;
    size_t len;
    struct tc_dev_io *dios;
    unsigned ndios, pending;
    bool flushing;
    int err;
    void (*done)(void *arg, int err);
    void *arg;
};

static void writer_end(struct ckpt_writer *wr)
{
    void (*done)(void *, int) = wr->done;
    void *arg = wr->arg;
    int err = wr->err;
    free(wr->buf);
    free(wr->dios);
    free(wr);
    done(arg, err);
}

static void writer_io_done(struct tc_dev_io *dio, int err)
{
    struct ckpt_writer *wr = dio->priv;
    if (err && wr->err == 0) {
        wr->err = err;
        for (unsigned d = 0; d < wr->c->ndevs; d++)
            if (wr->c->devs[d].dev == dio->dev)
                wr->pl->err_dev = (int)d;
    }
    if (--wr->pending > 0)
        return;
    if (wr->err || wr->flushing) {
        writer_end(wr);
        return;
    }
    /* Written: flush every device that got a piece. */
    struct cache *c = wr->c;
    bool used[TC_MAX_DEVICES] = { false };
    for (uint32_t i = 0; i < wr->pl->nsegs; i++)
        used[space_seg_dev(&c->sp, wr->pl->segs[i])] = true;
    wr->flushing = true;
    unsigned n = 0;
    for (unsigned d = 0; d < c->ndevs; d++)
        if (used[d])
            n++;
    wr->pending = n;
    unsigned k = 0;
    for (unsigned d = 0; d < c->ndevs; d++) {
        if (!used[d])
            continue;
        struct tc_dev_io *f = &wr->dios[k++];
        memset(f, 0, sizeof *f);
        f->op = TC_DEV_FLUSH;
        f->cb = writer_io_done;
        f->priv = wr;
        dev_submit(c->devs[d].dev, f);
    }
}

static void write_into(struct cache *c, struct ckpt_place *pl, bool hold, uint32_t max_segs,
                       uint32_t keep_free, void (*done)(void *arg, int err), void *arg);

void ckpt_write(struct cache *c, struct ckpt_place *pl, void (*done)(void *arg, int err),
                void *arg)
{
    write_into(c, pl, false, TC_CKPT_MAX_SEGS, 0, done, arg);
}

/* The checkpoint into free segments: held (space_hold()) when the log
 * goes on meanwhile (a running checkpoint), at most max_segs of them, and
 * only if keep_free segments stay free besides. */
static void write_into(struct cache *c, struct ckpt_place *pl, bool hold, uint32_t max_segs,
                       uint32_t keep_free, void (*done)(void *arg, int err), void *arg)
{
    struct tc_ckpt head = {
        .chunk_seq = c->lg.chunks_issued, .tail_seq = c->lg.tail_seq,
        .next_seq = c->lg.next_seq, .wt_stable_seq = c->lg.wt_stable_seq,
    };
    struct ckpt_writer *wr = tc_xcalloc(1, sizeof *wr);
    wr->c = c;
    wr->pl = pl;
    wr->done = done;
    wr->arg = arg;
    wr->buf = encode(c, &head, &wr->len);
    size_t padded = tc_round_up(wr->len, TC_SECTOR);
    uint32_t need = (uint32_t)((padded + c->segment_size - 1) / c->segment_size);
    memset(pl, 0, sizeof *pl);
    pl->err_dev = -1;
    /* Free segments, taken round the devices (the pieces are written side
     * by side), from the bottom of each free stack: the segments the log
     * takes last.  A running checkpoint, taken while the log goes on,
     * leaves each device its share of the cleaner's reserve
     * (space_dev_reserve()), as the log's groups do (log.c,
     * ensure_group()): summed over the devices the reserve could be
     * left, yet a device's last free segment taken -- and a pass of the
     * cleaner that needs room on it (a mirrored copy, the record of the
     * log's new end) finds none until the older checkpoint's segments go
     * back. */
    uint32_t taken[TC_MAX_DEVICES] = { 0 };
    uint32_t keep = hold ? space_dev_reserve(&c->sp) : 0;
    bool more = true;
    while (pl->nsegs < need && pl->nsegs < max_segs && more) {
        more = false;
        for (unsigned d = 0; d < c->ndevs && pl->nsegs < need; d++) {
            const struct free_stack *fs = &c->sp.stacks[d];
            /* Not one that holds the chunk the sequence record names for
             * its device (space.h, invariant 22). */
            while (taken[d] < fs->n && space_seg_held_back(&c->sp, fs->segs[taken[d]]))
                taken[d]++;
            if (taken[d] + keep < fs->n) {
                pl->segs[pl->nsegs++] = fs->segs[taken[d]++];
                more = true;
            }
        }
    }
    if (hold && c->sp.ckpt_room != need) {
        /* The cleaner keeps the next one's room free (space_low_water()). */
        c->sp.ckpt_room = need;
        cleaner_kick(c);
    }
    pl->short_of_free = hold && c->sp.free_segs < need + keep_free;
    if (pl->nsegs < need || pl->short_of_free) {
        if (!hold)
            tc_info("cache: no checkpoint at this stop: it needs %u free segments, %u are "
                    "free%s", need, pl->nsegs,
                    need > max_segs ? " (or more than a record names)" : "");
        wr->err = -ENOSPC;
        writer_end(wr);
        return;
    }
    for (uint32_t i = 0; hold && i < pl->nsegs; i++)
        TC_ASSERT_ALWAYS(space_hold(&c->sp, pl->segs[i]));
    /* Held segments leave the free count as a new group's do, and the
     * cleaner looks at that count only when kicked (a group opening, an
     * append waiting for room): without this kick a hold that takes the
     * log below its low water mark leaves the cleaner idle until the next
     * group opens -- on a quiet log, for ever. */
    if (hold)
        cleaner_kick(c);
    pl->len = wr->len;
    pl->crc = tc_crc32c(0, wr->buf, wr->len);
    uint64_t pieces = 0;
    for (uint32_t i = 0; i < pl->nsegs; i++) {
        uint64_t from = (uint64_t)i * c->segment_size;
        uint64_t n = TC_MIN((uint64_t)c->segment_size, padded - from);
        pieces += (n + CKPT_IO - 1) / CKPT_IO;
    }
    wr->ndios = (unsigned)TC_MAX(pieces, (uint64_t)c->ndevs);
    wr->dios = tc_xcalloc(wr->ndios, sizeof *wr->dios);
    wr->pending = (unsigned)pieces;
    if (hold)
        tc_debug("cache: writing a running checkpoint of %llu blocks (%llu bytes) into %u "
                 "segment%s", (unsigned long long)le64_get(wr->buf + CK_OFF_NBLOCKS),
                 (unsigned long long)wr->len, pl->nsegs, pl->nsegs == 1 ? "" : "s");
    else
        tc_info("cache: writing a checkpoint of %llu blocks (%llu bytes) into %u segment%s",
                (unsigned long long)le64_get(wr->buf + CK_OFF_NBLOCKS),
                (unsigned long long)wr->len, pl->nsegs, pl->nsegs == 1 ? "" : "s");
    /* Every piece is counted in pending before the first is submitted. */
    struct tc_dev **devs = tc_xcalloc(pieces, sizeof *devs);
    unsigned k = 0;
    for (uint32_t i = 0; i < pl->nsegs; i++) {
        uint64_t from = (uint64_t)i * c->segment_size;
        uint64_t end = TC_MIN(from + c->segment_size, (uint64_t)padded);
        for (uint64_t at = from; at < end; at += CKPT_IO) {
            struct tc_dev_io *dio = &wr->dios[k];
            devs[k++] = seg_cdev(c, pl->segs[i])->dev;
            memset(dio, 0, sizeof *dio);
            dio->op = TC_DEV_WRITE;
            dio->buf = wr->buf + at;
            dio->off = seg_dev_offset(c, pl->segs[i]) + (at - from);
            dio->len = TC_MIN((uint64_t)CKPT_IO, end - at);
            dio->cb = writer_io_done;
            dio->priv = wr;
        }
    }
    struct tc_dev_io *dios = wr->dios;
    for (unsigned i = 0; i < k; i++)
        dev_submit(devs[i], &dios[i]);
    free(devs);
}

/* ---- the start: reading it ---- */

/* Reads a checkpoint of padded bytes laid out in segs[0..nsegs) (one
 * segment after the other) into buf; 0, or -1 with why.  what names the
 * list in the message ("its slot's"). */
static int read_segments(struct cache *c, const uint32_t *segs, uint32_t nsegs, size_t padded,
                         uint8_t *buf, const char *what, char *why, size_t whylen)
{
    for (uint32_t i = 0; i < nsegs; i++) {
        uint32_t s = segs[i];
        if (s >= c->sp.nsegs) {
            snprintf(why, whylen, "%s list of segments names segment %u, beyond the set",
                     what, s);
            return -1;
        }
        uint64_t from = (uint64_t)i * c->segment_size;
        if (from >= padded)
            break;
        uint64_t end = TC_MIN(from + c->segment_size, (uint64_t)padded);
        for (uint64_t at = from; at < end; at += CKPT_IO) {
            uint64_t n = TC_MIN((uint64_t)CKPT_IO, end - at);
            int err = dev_sync_io(seg_cdev(c, s)->dev, TC_DEV_READ, buf + at,
                                  seg_dev_offset(c, s) + (at - from), n, 0);
            if (err) {
                snprintf(why, whylen, "reading it from segment %u failed: %s", s,
                         strerror(-err));
                return -1;
            }
        }
    }
    return 0;
}

/* A checkpoint of len bytes laid out in segs[0..nsegs), read whole and
 * checked in itself: its checksum (crc, kept by whoever names it), its
 * header, the set, the geometry, its length and its body's checksum;
 * NULL with why.  owner names the namer in the messages ("the clean-stop
 * record's", "its slot's"); what the checkpoint covers is the caller's
 * to check. */
static uint8_t *read_whole(struct cache *c, const uint32_t *segs, uint32_t nsegs, uint64_t len,
                           uint32_t crc, const char *owner, struct tc_ckpt *ck, char *why,
                           size_t whylen)
{
    if (len > (uint64_t)nsegs * c->segment_size) {
        snprintf(why, whylen, "%s names %llu bytes in %u segments", owner,
                 (unsigned long long)len, nsegs);
        return NULL;
    }
    size_t padded = tc_round_up(len, TC_SECTOR);
    uint8_t *buf = tc_alloc_aligned(padded);
    if (read_segments(c, segs, nsegs, padded, buf, owner, why, whylen) < 0)
        goto fail;
    if (tc_crc32c(0, buf, len) != crc) {
        snprintf(why, whylen, "its checksum does not match %s", owner);
        goto fail;
    }
    if (ckpt_decode(buf, ck, why, whylen) < 0)
        goto fail;
    const char *bad = NULL;
    if (memcmp(ck->set_uuid, c->set_uuid, 16) != 0)
        bad = "it is of another cache set";
    else if (ck->spb != c->spb || ck->total_segments != c->sp.nsegs)
        bad = "its geometry is not the set's";
    else if (TC_CKPT_HDR + ck->body_len != len)
        bad = "its length is not the one named";
    else if (tc_crc32c(0, buf + TC_CKPT_HDR, ck->body_len) != ck->body_crc)
        bad = "its body checksum does not match";
    if (bad) {
        snprintf(why, whylen, "%s", bad);
        goto fail;
    }
    return buf;
fail:
    free(buf);
    return NULL;
}

/* The checkpoint the record names, read whole and checked against it;
 * NULL with why. */
static uint8_t *read_checked(struct cache *c, const struct tc_superblock *rec,
                             struct tc_ckpt *ck, char *why, size_t whylen)
{
    uint8_t *buf = read_whole(c, rec->ckpt_segs, rec->ckpt_nsegs, rec->ckpt_len, rec->ckpt_crc,
                              "the clean-stop record's", ck, why, whylen);
    if (buf && (ck->chunk_seq != rec->stop_chunk_seq || ck->tail_seq != rec->stop_tail_seq ||
                ck->nchunks != rec->stop_chunks)) {
        snprintf(why, whylen, "it covers another log than the clean-stop record");
        free(buf);
        return NULL;
    }
    return buf;
}

struct parse {
    struct cache *c;
    const struct tc_ckpt *ck;
    const uint8_t *p;
    uint8_t *live_dev;              /* per segment: its device + 1 if live, else 0 */
    uint32_t *fill;                 /* per segment: its fill, if live */
    uint64_t *seq;                  /* per segment: its group, if live */
    uint32_t *live;
    uint32_t nlive;
    /* A running checkpoint's replay (ckpt_loaded_apply()): segments the
     * start walked (their chunk tables, group and fill are the walk's),
     * and live segments the checkpoint does not know (opened since). */
    const uint8_t *walked;
    const uint32_t *extra;
    uint32_t nextra;
    /* ... and the segments it names live whose group the cleaner has
     * reclaimed since the cut (below the tail the log's newest chunk
     * records): neither they nor the fragments in them are applied. */
    const uint8_t *dropped;
    const uint8_t **segrec;         /* per segment: its record in the body, if live */
};

/* Every record checked (apply false), or applied (apply true; checked
 * before).  -1 with why on the first that does not fit. */
static int parse(struct parse *ps, bool apply, char *why, size_t whylen)
{
    struct cache *c = ps->c;
    const struct tc_ckpt *ck = ps->ck;
    unsigned spb = c->spb, w = mask_words(spb);
    const uint8_t *p = ps->p;
    struct tc_mask full;
    mask_clear(&full);
    mask_range(&full, 0, spb);
    uint64_t chunks = 0;
    int64_t prev = -1;
    ps->nlive = 0;
    for (uint32_t i = 0; i < ck->nsegs; i++) {
        uint32_t s = le32_get(p), n = le32_get(p + 4), fill = le32_get(p + 16);
        uint64_t seq = le64_get(p + 8);
        p += 24;
        if ((int64_t)s <= prev || s >= c->sp.nsegs || n == 0 || seq == 0 ||
            seq < ck->tail_seq || seq >= TC_SEQ_LIMIT || fill > c->seg_sectors ||
            chunks + n > ck->nchunks) {
            snprintf(why, whylen, "segment record %u does not fit", i);
            return -1;
        }
        prev = s;
        chunks += n;
        bool walked = (ps->walked && ps->walked[s]) || (ps->dropped && ps->dropped[s]);
        if (ps->segrec)
            ps->segrec[s] = p - 24;
        uint32_t at = 0;
        for (uint32_t k = 0; k < n; k++, p += 8) {
            uint32_t start = le16_get(p), hs = le16_get(p + 2), ds = le16_get(p + 4);
            if (start != at || hs == 0 || hs > TC_MAX_HDR_SECTORS ||
                (uint64_t)start + hs + ds > c->seg_sectors) {
                snprintf(why, whylen, "segment %u: chunk %u does not fit", s, k);
                return -1;
            }
            at = start + hs + ds;
            if (apply && !walked)
                segment_add_chunk(&c->sp, s, start, hs, ds);
        }
        if (at != fill) {
            snprintf(why, whylen, "segment %u: its fill is not its chunks' end", s);
            return -1;
        }
        ps->live_dev[s] = (uint8_t)(space_seg_dev(&c->sp, s) + 1);
        ps->fill[s] = fill;
        ps->seq[s] = seq;
        if (!(apply && ps->dropped && ps->dropped[s]))
            ps->live[ps->nlive++] = s;
        if (apply && !walked) {
            struct segment *sg = space_seg(&c->sp, s);
            sg->seq = seq;
            sg->fill = fill;
        }
    }
    if (apply) {
        for (uint32_t i = 0; i < ps->nextra; i++)
            ps->live[ps->nlive++] = ps->extra[i];
        recovery_groups(c, ps->live, ps->nlive);
        space_collect_free(&c->sp);
        c->replaying = c->sp.replaying = true;
    }
    /* Each block: masks in range, its fragments in live segments, inside
     * their fill, each serving a sector (else the chain would not hold it). */
    uint64_t frags = 0;
    prev = -1;
    for (uint64_t i = 0; i < ck->nblocks; i++) {
        uint64_t ob = le64_get(p);
        uint32_t nf = le32_get(p + 8);
        struct tc_mask v, d, uni, seen;
        p = get_mask(get_mask(p + 16, &v, w), &d, w);
        if ((int64_t)ob <= prev || ob >= c->nblocks_origin || nf == 0 || nf > MAX_FRAGS ||
            frags + nf > ck->nfrags || !mask_covers(&full, &v) || !mask_covers(&v, &d) ||
            mask_empty(&v)) {
            snprintf(why, whylen, "the record of block %llu does not fit",
                     (unsigned long long)ob);
            goto fail;
        }
        prev = (int64_t)ob;
        frags += nf;
        struct { uint32_t seg, off, mseg, moff; struct tc_mask st; } f[MAX_FRAGS];
        mask_clear(&uni);
        mask_clear(&seen);
        for (uint32_t k = 0; k < nf; k++) {
            f[k].seg = le32_get(p);
            f[k].off = le32_get(p + 4);
            f[k].mseg = le32_get(p + 8);
            f[k].moff = le32_get(p + 12);
            p = get_mask(p + 16, &f[k].st, w);
            unsigned cnt = mask_count(&f[k].st);
            struct tc_mask cur = f[k].st;
            mask_andnot(&cur, &seen);   /* newest first: what it serves */
            bool ok = f[k].seg < c->sp.nsegs && ps->live_dev[f[k].seg] &&
                      cnt > 0 && mask_covers(&v, &f[k].st) && !mask_empty(&cur) &&
                      (uint64_t)f[k].off + cnt <= ps->fill[f[k].seg];
            if (ok && f[k].mseg != NIL)
                ok = f[k].mseg < c->sp.nsegs && ps->live_dev[f[k].mseg] &&
                     ps->live_dev[f[k].mseg] != ps->live_dev[f[k].seg] &&
                     (uint64_t)f[k].moff + cnt <= ps->fill[f[k].mseg];
            else if (ok)
                ok = f[k].moff == 0;
            if (!ok) {
                snprintf(why, whylen, "fragment %u of block %llu does not fit", k,
                         (unsigned long long)ob);
                goto fail;
            }
            mask_or(&seen, &f[k].st);
            mask_or(&uni, &f[k].st);
        }
        if (!mask_equal(&uni, &v)) {
            snprintf(why, whylen, "the fragments of block %llu do not make its valid sectors",
                     (unsigned long long)ob);
            goto fail;
        }
        if (!apply)
            continue;
        /* Fragments in reclaimed groups go (the replay's dropped
         * segments): they are the block's oldest (groups are reclaimed
         * oldest first, and a group's entries are all older than the next
         * group's), so each sector a kept fragment serves is served as
         * before, and what the dropped ones served is no longer valid --
         * as the scan, which never sees them, rebuilds it. */
        uint32_t id = NIL, kept = 0;
        struct tc_mask kv;
        mask_clear(&kv);
        for (uint32_t k = nf; k-- > 0;) {
            if (ps->dropped && ps->dropped[f[k].seg])
                continue;
            struct tc_mask fd = d;
            mask_and(&fd, &f[k].st);
            id = map_add_fragment(c, ob, &f[k].st, &fd, f[k].seg, (uint16_t)f[k].off, NIL, 0, 0,
                                  false);
            if (f[k].mseg != NIL && !(ps->dropped && ps->dropped[f[k].mseg]))
                map_add_mirror(c, id, ce_head(&c->map.idx, id), f[k].mseg,
                               (uint16_t)f[k].moff);
            mask_or(&kv, &f[k].st);
            kept++;
        }
        if (kept == 0)
            continue;
        struct tc_mask gv, gd, kd = d;
        mask_and(&kd, &kv);
        ce_get_masks(&c->map.idx, id, &gv, &gd);
        TC_ASSERT_ALWAYS(mask_equal(&gv, &kv) && mask_equal(&gd, &kd) &&
                         CE(&c->map.idx, id)->nfrags == kept);
    }
    if (frags != ck->nfrags) {
        snprintf(why, whylen, "its fragment count is not its blocks'");
        goto fail;
    }
    prev = -1;
    for (uint64_t i = 0; i < ck->nlost; i++) {
        uint64_t ob = le64_get(p);
        struct tc_mask m;
        p = get_mask(p + 8, &m, w);
        if ((int64_t)ob <= prev || ob >= c->nblocks_origin || mask_empty(&m) ||
            !mask_covers(&full, &m)) {
            snprintf(why, whylen, "the lost record of block %llu does not fit",
                     (unsigned long long)ob);
            goto fail;
        }
        prev = (int64_t)ob;
        if (apply)
            lost_set(&c->map.lost, ob, &m);
    }
    if (apply)
        c->replaying = c->sp.replaying = false;
    return 0;
fail:
    TC_ASSERT_ALWAYS(!apply);       /* checked before */
    return -1;
}

struct seqdev {
    uint64_t seq;
    unsigned dev;
};

static int cmp_seqdev(const void *a, const void *b)
{
    const struct seqdev *x = a, *y = b;
    if (x->seq != y->seq)
        return x->seq < y->seq ? -1 : 1;
    return x->dev < y->dev ? -1 : x->dev > y->dev;
}

/* A group has one segment on each of its devices (recovery ignores a
 * second one: the checkpoint must not hold what the scan would not). */
static bool one_per_device(struct cache *c, const struct parse *ps)
{
    const uint32_t *live = ps->live;
    uint32_t nlive = ps->nlive;
    struct seqdev *v = tc_xcalloc(nlive ? nlive : 1, sizeof *v);
    for (uint32_t i = 0; i < nlive; i++)
        v[i] = (struct seqdev){ ps->seq[live[i]], space_seg_dev(&c->sp, live[i]) };
    if (nlive > 1)
        qsort(v, nlive, sizeof *v, cmp_seqdev);
    bool ok = true;
    for (uint32_t i = 1; i < nlive && ok; i++)
        ok = cmp_seqdev(&v[i - 1], &v[i]) != 0;
    free(v);
    return ok;
}

/*
 * The marks a start found beside the stop record: an abandonment (the
 * state file's, or a superblock's) and devices' failure marks.  Each was
 * set at or above the log's next sequence when it happened, and every
 * stop after it writes a chunk above it: a checkpoint whose log ends at
 * or below a mark (ck->next_seq, above every sequence it covers) was
 * written before the mark was set -- an older copy's: a backup of the
 * cache taken at a clean stop and put back after the cache was
 * abandoned, whose superblocks carry no mark yet the state file does.
 * Its entries name versions older than what the origin received since,
 * and the scan, which applies the marks, is what rebuilds the state then.
 * -1 with why.
 */
static int marks_after(const struct cache *c, const struct tc_ckpt *ck, char *why,
                       size_t whylen)
{
    if (c->abandoned_seq && ck->next_seq <= c->abandoned_seq) {
        snprintf(why, whylen, "it was written before the abandonment at log sequence %llu "
                 "the state file or the superblocks record (its log ends at %llu): it is an "
                 "older copy's", (unsigned long long)c->abandoned_seq,
                 (unsigned long long)ck->next_seq);
        return -1;
    }
    for (unsigned d = 0; d < TC_MAX_DEVICES; d++) {
        if (c->failed_seq[d] && ck->next_seq <= c->failed_seq[d]) {
            snprintf(why, whylen, "it was written before device %u's failure mark at log "
                     "sequence %llu (its log ends at %llu): it is an older copy's", d,
                     (unsigned long long)c->failed_seq[d], (unsigned long long)ck->next_seq);
            return -1;
        }
    }
    return 0;
}

int ckpt_restore(struct cache *c, const struct tc_superblock *rec, char *why, size_t whylen)
{
    /* A stop's lost set in the state file (abandon.c) is applied to what a
     * scan rebuilds; a stop that left one wrote no checkpoint. */
    if (c->stop_lost_seq) {
        snprintf(why, whylen, "the state file holds the lost set of a stop");
        return -1;
    }
    struct tc_ckpt ck;
    uint8_t *buf = read_checked(c, rec, &ck, why, whylen);
    if (buf == NULL)
        return -1;
    struct parse ps = {
        .c = c, .ck = &ck, .p = buf + TC_CKPT_HDR,
        .live_dev = tc_xcalloc(c->sp.nsegs, 1),
        .fill = tc_xcalloc(c->sp.nsegs, sizeof *ps.fill),
        .seq = tc_xcalloc(c->sp.nsegs, sizeof *ps.seq),
        .live = tc_xcalloc(c->sp.nsegs, sizeof *ps.live),
    };
    int rc = parse(&ps, false, why, whylen);
    if (rc == 0 && !one_per_device(c, &ps)) {
        snprintf(why, whylen, "a group has two segments on one device");
        rc = -1;
    }
    if (rc == 0)
        rc = marks_after(c, &ck, why, whylen);
    if (rc == 0)
        rc = parse(&ps, true, why, whylen);
    if (rc == 0) {
        uint64_t first_live = ck.next_seq;
        for (uint32_t i = 0; i < ps.nlive; i++)
            first_live = TC_MIN(first_live, space_seg(&c->sp, ps.live[i])->seq);
        uint64_t next_seq = TC_MAX(ck.next_seq, ck.chunk_seq + 1);
        next_seq = TC_MAX(next_seq, c->abandoned_seq);
        for (unsigned i = 0; i < TC_MAX_DEVICES; i++)
            next_seq = TC_MAX(next_seq, c->failed_seq[i]);
        log_recovered(&c->lg, next_seq, ck.chunk_seq, ps.nlive ? first_live : next_seq,
                      ck.wt_stable_seq, false);
        /* The checkpoint names no chunk sequence per segment: bounds
         * (invariant 22). */
        space_bound_chunks(&c->sp, ck.chunk_seq);
    }
    free(ps.live_dev);
    free(ps.fill);
    free(ps.seq);
    free(ps.live);
    free(buf);
    return rc;
}

/* ---- tiercache check: the checkpoint against a full scan ---- */

/* Bytes of the block record at p (its fragments included). */
static size_t block_bytes(const uint8_t *p, unsigned spb)
{
    return tc_ckpt_block_bytes(spb) + le32_get(p + 8) * tc_ckpt_frag_bytes(spb);
}

/* Where two bodies first differ, in words a user can act on. */
static void describe_diff(const struct tc_ckpt *a, const uint8_t *pa, const uint8_t *pb,
                          unsigned spb, char *why, size_t whylen)
{
    /* Segment runs are the same length when their counts are. */
    size_t segs = (size_t)a->nsegs * tc_ckpt_seg_bytes(0) + 8 * a->nchunks;
    if (memcmp(pa, pb, segs) != 0) {
        for (const uint8_t *x = pa, *y = pb; x < pa + segs;) {
            size_t n = tc_ckpt_seg_bytes(le32_get(x + 4));
            if (memcmp(x, y, n) != 0) {
                snprintf(why, whylen, "segment %u: the checkpoint records %u chunks of group "
                         "%llu, the log %u chunks of group %llu in segment %u", le32_get(x),
                         le32_get(x + 4), (unsigned long long)le64_get(x + 8), le32_get(y + 4),
                         (unsigned long long)le64_get(y + 8), le32_get(y));
                return;
            }
            x += n;
            y += n;
        }
    }
    const uint8_t *x = pa + segs, *y = pb + segs;
    for (uint64_t i = 0; i < a->nblocks; i++) {
        size_t nx = block_bytes(x, spb), ny = block_bytes(y, spb);
        if (nx != ny || memcmp(x, y, nx) != 0) {
            snprintf(why, whylen, "block %llu: the checkpoint's record (%u fragments) is not "
                     "what the log gives (block %llu, %u fragments)",
                     (unsigned long long)le64_get(x), le32_get(x + 8),
                     (unsigned long long)le64_get(y), le32_get(y + 8));
            return;
        }
        x += nx;
        y += ny;
    }
    snprintf(why, whylen, "the lost set differs from the log's");
}

/* The scan's state (the cache as rebuilt), encoded with head, against
 * the checkpoint ck read into buf: 1 the same, -1 with why. */
static int compare(struct cache *c, const struct tc_ckpt *ckp, const uint8_t *buf,
                   const struct tc_ckpt *headp, char *why, size_t whylen)
{
    const struct tc_ckpt ck = *ckp;
    struct tc_ckpt head = *headp;
    char r[200];
    size_t len;
    uint8_t *mine = encode(c, &head, &len);
    struct tc_ckpt sc;
    int rc = 1;
    if (ckpt_decode(mine, &sc, r, sizeof r) < 0) {
        snprintf(why, whylen, "the scan's state does not encode: %s", r);
        rc = -1;
    } else if (sc.wt_stable_seq != ck.wt_stable_seq) {
        snprintf(why, whylen, "the checkpoint does not match the log: write-through stable "
                 "mark %llu, the log's %llu", (unsigned long long)ck.wt_stable_seq,
                 (unsigned long long)sc.wt_stable_seq);
        rc = -1;
    } else if (sc.nsegs != ck.nsegs || sc.nchunks != ck.nchunks || sc.nblocks != ck.nblocks ||
               sc.nfrags != ck.nfrags || sc.nlost != ck.nlost) {
        snprintf(why, whylen, "the checkpoint does not match the log: %u segments, %llu "
                 "chunks, %llu blocks, %llu fragments, %llu lost records; the log gives %u, "
                 "%llu, %llu, %llu, %llu", ck.nsegs, (unsigned long long)ck.nchunks,
                 (unsigned long long)ck.nblocks, (unsigned long long)ck.nfrags,
                 (unsigned long long)ck.nlost, sc.nsegs, (unsigned long long)sc.nchunks,
                 (unsigned long long)sc.nblocks, (unsigned long long)sc.nfrags,
                 (unsigned long long)sc.nlost);
        rc = -1;
    } else if (memcmp(buf + TC_CKPT_HDR, mine + TC_CKPT_HDR, ck.body_len) != 0) {
        describe_diff(&ck, buf + TC_CKPT_HDR, mine + TC_CKPT_HDR, c->spb, r, sizeof r);
        snprintf(why, whylen, "the checkpoint does not match the log: %s", r);
        rc = -1;
    }
    free(mine);
    return rc;
}

int ckpt_verify(struct cache *c, const struct tc_superblock *rec, char *why, size_t whylen)
{
    if (!(rec->flags & TC_SB_CHECKPOINT))
        return 0;
    struct tc_ckpt ck;
    char r[200];
    uint8_t *buf = read_checked(c, rec, &ck, r, sizeof r);
    if (buf == NULL) {
        snprintf(why, whylen, "the checkpoint the clean-stop record names cannot be used: %s", r);
        return -1;
    }
    struct tc_ckpt head = {
        .chunk_seq = rec->stop_chunk_seq, .tail_seq = rec->stop_tail_seq,
        .next_seq = ck.next_seq, .wt_stable_seq = c->lg.wt_stable_seq,
    };
    int rc = compare(c, &ck, buf, &head, why, whylen);
    free(buf);
    return rc;
}

/* ---- running checkpoints: taken while serving ---- */

/*
 * The runner of running checkpoints (ondisk.h, version 6; the design and
 * its invariants at the top of this file).  What it holds to:
 *
 *  R1 A checkpoint is taken only at a cut where a scan of the log up to
 *     the newest chunk rebuilds exactly the state in memory: nothing
 *     appended waits to be written, every chunk issued is written and
 *     flushed (log_idle(), flushed_upto == chunks_issued), the newest
 *     header records the tail and the write-through stable mark in memory
 *     (else one more header is sealed first, as the stop does), the
 *     cleaner is idle, no superblock mark is being written, and
 *     ckpt_wanted() holds.  The encoding is synchronous on the reactor,
 *     so nothing is appended while it runs: every entry of a chunk up to
 *     the cut has a sequence below the checkpoint's next_seq, every later
 *     one at or above it (P1).
 *  R2 Its segments are taken off the free stacks before the first write
 *     (space_hold()), and stay off while any superblock may name them: a
 *     checkpoint k's segments go back only once every device's
 *     superblocks name k+1 in the other slot (each device's rewrite in
 *     turn with the abandonment's marks: abandon_sb_rewrite()).  A failed
 *     rewrite keeps both held until the next start, and fails its device
 *     (a write error, failure.h), as a failed write of the checkpoint does.
 *  R3 The slot written is the older one: a kill while the checkpoint or
 *     the superblocks are written leaves the newer one named and whole.
 *
 * Taken every `every_bytes` bytes of chunks written (serve's
 * --checkpoint-every, or TIERCACHE_TEST_CKPT_BYTES for the tests; 0: none),
 * looked at every tick_ns (TIERCACHE_TEST_CKPT_TICK_MS,
 * 100 ms by default); a busy log is synced to make the cut come, at most
 * once a second.  Under a load that never leaves the log idle the cut is
 * not found, and the checkpoint waits (status says how often).
 */
struct ckpt_run {
    struct cache *c;
    uint64_t every_bytes;
    uint64_t tick_ns;
    uint64_t last_bytes;            /* chunk bytes written when the last one was taken */
    uint64_t due_bytes;             /* last_bytes before it: a write that finds no room
                                       puts it back (still due) */
    uint64_t next_sync_ns;          /* no sync of the log to make the cut come before */
    struct tc_timer timer;
    struct log_waiter w;
    bool syncing;                   /* w is in the log's hands */
    bool busy;                      /* a checkpoint or its superblocks being written */
    bool stopped;
    bool take_now;                  /* no slot is full: the first one without waiting */
    struct ckpt_place pl;
    uint64_t cut;                   /* the chunk the one being written covers */
    unsigned slot;
    unsigned sb_pending;
    int sb_err;
    uint64_t next_gen;
    /* How every_bytes was chosen (status, the start's log line): on or
     * off, by which setting, and why. */
    bool on;                        /* every_bytes > 0: the timer runs */
    const char *setting;            /* "option", "environment", "default" */
    char why[240];
    /* The hold (volume_hold()): syncs made since the checkpoint was due
     * without finding the cut; holding: new requests wait; quiet: and the
     * ones in the cache path have ended. */
    unsigned overdue_syncs;
    unsigned holds_failed_in_row;   /* given up since the last taken */
    bool holding, quiet;
    uint64_t hold_start_ns;
    /* For status. */
    uint64_t written, failed, not_idle, no_room, cleaner_waits, stable_waits;
    /* The runner's origin flush (run_stabilize()), in looks before a
     * hold and in it. */
    bool stabilizing;
    struct tc_dev_io origin_dio;
    struct stable_flush origin_flush;
    uint64_t origin_flushes, stabilize_failed;
    uint64_t last_gen, last_cut, last_len, last_encode_ns;
    uint64_t holds, holds_given_up, last_hold_ns, max_hold_ns, room_waits;
};

/* The least time between two syncs of a busy log made to find the cut. */
#define TC_CKPT_SYNC_EVERY_NS (1000ull * 1000 * 1000)
/* Syncs that found the log busy before a checkpoint holds new requests
 * to find its cut, and the longest it holds them: under a steady load
 * (clients with requests always in flight, the cleaner behind them) no
 * sync ends at an idle moment -- four writers of small blocks in
 * write-through mode on a full log: no checkpoint in 120 s, and a kill
 * replayed everything since the last one.  A hold waits for the
 * requests in the cache path, then a sync of the log: a few milliseconds
 * to a few hundred on a slow origin; past the bound the requests go on
 * and the next hold comes after as many syncs again. */
#define TC_CKPT_HOLD_AFTER_SYNCS 3
#define TC_CKPT_HOLD_MAX_NS (500ull * 1000 * 1000)
/* Holds given up in a row double the bound of the next, up to 8 times:
 * where a sync of the log takes longer than the bound (a slow or loaded
 * cache device), a fixed bound gave up every hold and the checkpoint
 * starved again. */
#define TC_CKPT_HOLD_DOUBLINGS 3

/*
 * The default, with neither --checkpoint-every nor the tests' setting:
 * auto where the slots' room is a small share of the log, off elsewhere.
 * The slots hold a checkpoint's segments out of the log while they name
 * it (R2): two named at rest, a third one's while it is written, each of
 * ckpt_full_segs() segments at most.  On when that worst case is at most
 * 1/TC_CKPT_DEFAULT_SHARE of the log's segments (1.6 %): the capacity a
 * user sized the cache for is barely touched, and it pays where a full
 * scan costs real time (some 0.7 s per GiB of 64 KiB blocks; with 4 MiB
 * segments it is on from about 770 MiB).  On a small cache a segment per
 * slot is several percent of it (64 MiB of 1 MiB segments: 3 of 63, live
 * data 58 MiB instead of 60) for a scan that takes a fraction of a
 * second; with 4 KiB blocks a checkpoint is some 1.4 % of the cache, and
 * three of them too much to take unasked.
 */
#define TC_CKPT_DEFAULT_SHARE 64u
/* Chunks per segment the size estimate counts (8 bytes each in a
 * checkpoint): a guess; blocks are most of it. */
#define TC_CKPT_EST_CHUNKS 16u

static uint64_t env_u64(const char *name, uint64_t dflt)
{
    const char *t = getenv(name);
    if (t == NULL || *t == 0)
        return dflt;
    char *end;
    unsigned long long v = strtoull(t, &end, 10);
    return *end == 0 ? v : dflt;
}

/* The segments a checkpoint of the whole cache full of single-fragment
 * blocks takes (encode()'s layout), an estimate from the geometry alone. */
static uint64_t ckpt_full_segs(const struct cache *c)
{
    uint64_t nsegs = c->sp.nsegs, blocks = nsegs * c->segment_size / c->block_size;
    uint64_t bytes = TC_CKPT_HDR + nsegs * tc_ckpt_seg_bytes(TC_CKPT_EST_CHUNKS) +
                     blocks * (tc_ckpt_block_bytes(c->spb) + tc_ckpt_frag_bytes(c->spb));
    return (bytes + c->segment_size - 1) / c->segment_size;
}

/* The bytes of log between two running checkpoints (0: none): serve's
 * --checkpoint-every, else the tests' TIERCACHE_TEST_CKPT_BYTES, else the
 * default (TC_CKPT_DEFAULT_SHARE); auto is an eighth of the log's capacity
 * (P4).  r's setting and why say which and why. */
static uint64_t ckpt_every(const struct cache *c, struct ckpt_run *r)
{
    const struct tc_volume_config *cfg = &c->vol->cfg;
    const char *t = getenv("TIERCACHE_TEST_CKPT_BYTES");
    uint64_t every;
    if (cfg->checkpoint_every_set) {
        every = cfg->checkpoint_every;
        r->setting = "option";
        snprintf(r->why, sizeof r->why, "%s by --checkpoint-every", every ? "on" : "off");
    } else if (t && strcmp(t, "auto") == 0) {
        every = TC_CKPT_EVERY_AUTO;
        r->setting = "environment";
        snprintf(r->why, sizeof r->why, "on by TIERCACHE_TEST_CKPT_BYTES=auto");
    } else if (t && *t && env_u64("TIERCACHE_TEST_CKPT_BYTES", UINT64_MAX) != UINT64_MAX) {
        every = env_u64("TIERCACHE_TEST_CKPT_BYTES", 0);
        r->setting = "environment";
        snprintf(r->why, sizeof r->why, "%s by TIERCACHE_TEST_CKPT_BYTES=%s", every ? "on" : "off",
                 t);
    } else if (c->data_free) {
        /* A replay's volume: no data, no restart; its segments are the
         * cache being sized. */
        every = 0;
        r->setting = "default";
        snprintf(r->why, sizeof r->why, "off by default: a volume without data (replay)");
    } else {
        uint64_t k = ckpt_full_segs(c), worst = 3 * k, nsegs = c->sp.nsegs;
        bool on = k <= TC_RUN_CKPT_MAX_SEGS && worst * TC_CKPT_DEFAULT_SHARE <= nsegs;
        every = on ? TC_CKPT_EVERY_AUTO : 0;
        r->setting = "default";
        snprintf(r->why, sizeof r->why,
                 "%s by default: the slots would hold at most %llu of the log's %llu segments "
                 "(%.1f %%; on when at most 1/%u)%s",
                 on ? "on" : "off", (unsigned long long)worst, (unsigned long long)nsegs,
                 nsegs ? 100.0 * (double)worst / (double)nsegs : 0.0, TC_CKPT_DEFAULT_SHARE,
                 on ? "" : "; --checkpoint-every auto turns them on");
    }
    if (every == TC_CKPT_EVERY_AUTO)
        every = TC_MAX((uint64_t)c->sp.nsegs * c->segment_size / 8, (uint64_t)c->segment_size);
    return every;
}

/* Whether segment s is named by a slot of any device's superblocks. */
static bool slot_names(const struct cache *c, uint32_t s)
{
    for (unsigned d = 0; d < c->ndevs; d++)
        for (unsigned i = 0; i < TC_RUN_CKPT_SLOTS; i++) {
            const struct tc_run_ckpt *r = &c->devs[d].sb.run_ckpt[i];
            for (uint32_t k = 0; r->gen && k < r->nsegs; k++)
                if (r->segs[k] == s)
                    return true;
        }
    return false;
}

/* Held segments no slot names any more go back to the free stacks. */
static void release_unnamed(struct ckpt_run *r)
{
    struct cache *c = r->c;
    for (uint32_t s = 0; s < c->sp.nsegs; s++)
        if (space_seg(&c->sp, s)->held && !slot_names(c, s))
            space_release(&c->sp, s);
}

static void run_take(struct ckpt_run *r);

static void run_sb_done(void *arg, unsigned d, int err)
{
    struct ckpt_run *r = arg;
    struct cache *c = r->c;
    if (err) {
        if (r->sb_err == 0)
            r->sb_err = err;
        /* A write error on a cache device fails it, whatever the write
         * (failure.h): its superblock may now be torn, and a device that
         * refuses writes is not trusted with the log. */
        tc_error("%s: naming the running checkpoint in the superblock failed: %s; the device "
                 "fails", c->devs[d].dev->name, strerror(-err));
        cache_device_error(c, d, err, true);
    }
    if (--r->sb_pending > 0)
        return;
    if (r->sb_err == 0) {
        release_unnamed(r);
        r->written++;
        r->last_gen = r->next_gen - 1;
        r->last_cut = r->cut;
        r->last_len = r->pl.len;
    } else {
        r->failed++;
    }
    r->busy = false;
}

static void run_written(void *arg, int err)
{
    struct ckpt_run *r = arg;
    struct cache *c = r->c;
    bool devs_ok = true;
    for (unsigned d = 0; d < c->ndevs; d++)
        devs_ok &= c->devs[d].state == CDEV_OK && !c->sp.dev_failed[d];
    if (err || !devs_ok || c->abandoned) {
        if (err == -ENOSPC) {
            /* Too few free segments: still due, taken again once the
             * cleaner has made the room (run_take() looks before it
             * encodes).  Refused otherwise -- by a device (a full file
             * system under a cache file) or by the reserve each device
             * keeps --, which that look does not see: due again after as
             * many bytes, as before, not at the timer's next look (the
             * whole index encoded and written at each). */
            r->no_room++;
            if (r->pl.short_of_free)
                r->last_bytes = r->due_bytes;
        } else {
            r->failed++;
            if (err)
                tc_error("%s: writing a running checkpoint failed: %s%s",
                         r->pl.err_dev >= 0 ? c->devs[r->pl.err_dev].dev->name : "cache",
                         strerror(-err), r->pl.err_dev >= 0 ? "; the device fails" : "");
        }
        /* Named nowhere: its segments go back. */
        release_unnamed(r);
        r->busy = false;
        /* A write error fails the device, as one of the log's does
         * (failure.h): a device that refuses writes is not trusted with
         * the log, whatever the write was. */
        if (err && err != -ENOSPC && r->pl.err_dev >= 0)
            cache_device_error(c, (unsigned)r->pl.err_dev, err, true);
        return;
    }
    /* The older slot (R3), on every device alike. */
    const struct tc_superblock *sb0 = &c->devs[0].sb;
    r->slot = sb0->run_ckpt[0].gen <= sb0->run_ckpt[1].gen ? 0 : 1;
    struct tc_run_ckpt slot = { .gen = r->next_gen++, .cut = r->cut, .len = r->pl.len,
                                .crc = r->pl.crc, .nsegs = r->pl.nsegs };
    memcpy(slot.segs, r->pl.segs, r->pl.nsegs * sizeof slot.segs[0]);
    r->sb_pending = c->ndevs;
    r->sb_err = 0;
    for (unsigned d = 0; d < c->ndevs; d++)
        c->devs[d].sb.run_ckpt[r->slot] = slot;
    for (unsigned d = 0; d < c->ndevs; d++)
        abandon_sb_rewrite(c, d, run_sb_done, r);
}

/* The hold ends: the held requests go on, and the cleaner's passes
 * (paused only within a hold). */
static void hold_end(struct ckpt_run *r, bool taken)
{
    if (!r->holding)
        return;
    cleaner_pause(r->c, false);
    uint64_t held = tc_now_ns() - r->hold_start_ns;
    r->holding = false;
    r->quiet = false;
    r->overdue_syncs = 0;
    r->last_hold_ns = held;
    r->max_hold_ns = TC_MAX(r->max_hold_ns, held);
    if (taken) {
        r->holds_failed_in_row = 0;
    } else {
        r->holds_given_up++;
        r->holds_failed_in_row++;
    }
    volume_hold_release(r->c->vol);
}

static void hold_quiet(void *arg)
{
    struct ckpt_run *r = arg;
    r->quiet = true;
    run_take(r);
}

static void run_synced(struct log_waiter *w, int err)
{
    struct ckpt_run *r = container_of(w, struct ckpt_run, w);
    r->syncing = false;
    if (err == 0 && !r->stopped)
        run_take(r);
}

/* The stable mark can reach the newest write-through version by an
 * origin flush: none is left from before this start unsettled (those are
 * settled one by one, map.c), and the origin is online and takes flushes
 * (a hold would wait on an offline one's timeout). */
static bool stable_mark_makeable(const struct cache *c)
{
    return c->map.wt_recovered == 0 && c->vol->origin->can_flush &&
           c->vol->origin->state == TC_DEV_ONLINE;
}

static void run_stabilized(struct tc_dev_io *dio, int err)
{
    struct ckpt_run *r = container_of(dio, struct ckpt_run, origin_dio);
    struct cache *c = r->c;
    r->stabilizing = false;
    /* Recorded stable, the mark is carried by the header run_take()
     * seals next. */
    if (stable_flush_end(c, &r->origin_flush, err)) {
        /* The mark stays; the requests go on, and a later hold tries
         * again. */
        r->stabilize_failed++;
        hold_end(r, false);
    }
    if (!r->stopped)
        run_take(r);
}

/* Flush the origin, and record every write-through version below the
 * oldest still in flight stable (as the commit does, writeback.c): held
 * and quiet, every one. */
static void run_stabilize(struct ckpt_run *r)
{
    struct cache *c = r->c;
    r->stabilizing = true;
    r->origin_flushes++;
    stable_flush_begin(c, &r->origin_flush);
    memset(&r->origin_dio, 0, sizeof r->origin_dio);
    r->origin_dio.op = TC_DEV_FLUSH;
    r->origin_dio.cb = run_stabilized;
    dev_submit(c->vol->origin, &r->origin_dio);
}

/* A look that did not find the cut: true if a sync of the log is to make
 * it come now -- holding, at once; else at most once a second, and past
 * TC_CKPT_HOLD_AFTER_SYNCS of them the hold starts instead. */
static bool overdue_look(struct ckpt_run *r)
{
    struct cache *c = r->c;
    if (r->holding)
        return true;
    uint64_t now = tc_now_ns();
    if (now < r->next_sync_ns)
        return false;
    r->next_sync_ns = now + TC_CKPT_SYNC_EVERY_NS;
    if (++r->overdue_syncs > TC_CKPT_HOLD_AFTER_SYNCS && volume_can_hold(c->vol)) {
        r->holding = true;
        r->quiet = false;
        r->hold_start_ns = now;
        r->holds++;
        volume_hold(c->vol, hold_quiet, r);
        return false;
    }
    return true;
}

/* R1: take a checkpoint now if the cut is here; else make it come. */
static void run_take(struct ckpt_run *r)
{
    struct cache *c = r->c;
    if (r->busy || r->syncing || r->stabilizing || r->stopped || c->stopping)
        return;
    if (c->st.chunk_bytes_written - r->last_bytes < r->every_bytes && !r->take_now)
        return;
    const char *why;
    if (c->vol->cache_failed || c->abandoned || c->vol->detached || c->vol->fenced ||
        !wanted_but_stable_mark(c, &why) || (!wt_all_stable(c) && !stable_mark_makeable(c))) {
        /* Not to be taken before something else changes: held requests
         * go on now, not at the hold's bound. */
        hold_end(r, false);
        return;
    }
    if (!abandon_idle(c))
        return;     /* a moment; a hold waits (within its bound) */
    if (!cleaner_idle(c)) {
        /* Under a steady write load on a full log the cleaner was never
         * idle here, and this look came before any that counts towards
         * the hold.  Now it counts as a busy log's sync does (without
         * one: the cleaner's own tail sync comes).  Holding, the pass
         * under way ends and no other starts while the log has room
         * (cleaner_pause(), until the hold ends): the hold stops the
         * appends that keep the cleaner below its low water mark, and
         * between its marks the cleaner would run pass after pass. */
        r->cleaner_waits++;
        if (r->holding)
            cleaner_pause(c, true);
        else
            overdue_look(r);
        return;
    }
    if (!wt_all_stable(c)) {
        /* Write-through versions above the stable mark: a scan would
         * re-check them against the origin, a checkpoint cannot say which.
         * Only an origin flush with none in flight makes the mark reach
         * the newest: under a steady write-through load (four writers,
         * each flushing every fifth write) a look found that moment only
         * by chance, and counted towards no hold -- with the look every
         * 100 ms, no checkpoint for minutes.  Now the look counts, and the
         * hold, once quiet, flushes the origin itself. */
        if (!r->holding) {
            /* Flushed once a second before the hold too, as the commit
             * does: the hold's own flush has only the last moment's
             * writes left to make durable, and holds the clients that
             * much less (a slow origin's flush is cut off at the
             * hold's bound). */
            r->stable_waits++;
            if (overdue_look(r))
                run_stabilize(r);
        } else if (r->quiet) {
            run_stabilize(r);
        }
        return;
    }
    if (c->lg.tail_recorded != c->lg.tail_seq ||
        c->lg.wt_stable_recorded != c->lg.wt_stable_seq) {
        /* A header that records them, as the stop seals one. */
        if (!log_seal_all(c, true))
            return;
    }
    /* Room first: an encoding that finds none is thrown away, and costs
     * seconds on a large cache.  The room the last one took, past the
     * cleaner's reserve (write_into()); the cleaner makes it
     * (space_low_water()). */
    if (c->sp.free_segs < TC_MAX(c->sp.ckpt_room, 1u) + c->sp.reserve_segs) {
        r->room_waits++;
        cleaner_kick(c);
        if (r->holding)
            hold_end(r, false);
        return;
    }
    if (r->holding && !r->quiet)
        return;     /* hold_quiet() comes back */
    if (!log_idle(&c->lg) || c->lg.flushed_upto < c->lg.chunks_issued ||
        c->lg.tail_recorded != c->lg.tail_seq ||
        c->lg.wt_stable_recorded != c->lg.wt_stable_seq) {
        /* Make the cut come by a sync at most once a second: a sync seals
         * the open chunks, and under a steady write load (the log never
         * idle after it either) syncing again at once, as each sync
         * ended, cut every chunk short of its size (write clustering: 4
         * KiB random writes on two devices averaged 147 KiB a device write
         * instead of 510 KiB).  Holding, at once: nothing but the
         * cleaner's and write-back's records comes between. */
        r->not_idle++;
        if (!overdue_look(r))
            return;
        r->syncing = true;
        r->w = (struct log_waiter){ .fn = run_synced };
        log_sync(c, &r->w);
        return;
    }
    r->overdue_syncs = 0;
    r->busy = true;
    r->take_now = false;
    r->cut = c->lg.chunks_issued;
    r->due_bytes = r->last_bytes;
    r->last_bytes = c->st.chunk_bytes_written;
    uint64_t t0 = tc_now_ns();
    /* Room: the cleaner's reserve stays free besides (a full log takes
     * checkpoints below its low water mark: the cleaner keeps it about
     * that full, and frees more after). */
    write_into(c, &r->pl, true, TC_RUN_CKPT_MAX_SEGS, c->sp.reserve_segs, run_written, r);
    r->last_encode_ns = tc_now_ns() - t0;
    /* Encoded: what is appended from now on is after the cut. */
    hold_end(r, true);
}

static void run_tick(struct tc_timer *t)
{
    struct ckpt_run *r = container_of(t, struct ckpt_run, timer);
    if (r->stopped)
        return;
    struct cache *c = r->c;
    uint64_t bound = TC_CKPT_HOLD_MAX_NS << TC_MIN(r->holds_failed_in_row, TC_CKPT_HOLD_DOUBLINGS);
    if (r->holding && (tc_now_ns() - r->hold_start_ns >= bound ||
                       c->vol->cache_failed || c->abandoned || c->vol->detached ||
                       c->stopping))
        hold_end(r, false);
    run_take(r);
    timer_arm(c->reactor, &r->timer, r->tick_ns);
}

int ckpt_run_init(struct cache *c, char *err, size_t errlen)
{
    /* Allocated when off too: status says why. */
    struct ckpt_run *r = tc_xcalloc(1, sizeof *r);
    r->c = c;
    uint64_t every = ckpt_every(c, r);
    bool any = false;
    for (unsigned d = 0; d < c->ndevs; d++)
        any |= sb_has_run_ckpt(&c->devs[d].sb);
    if (every == 0) {
        c->ckrun = r;
        tc_info("cache: running checkpoints %s", r->why);
        /* Off: slots left by a run with them on name nothing any more. */
        if (!any)
            return 0;
        for (unsigned d = 0; d < c->ndevs; d++)
            memset(c->devs[d].sb.run_ckpt, 0, sizeof c->devs[d].sb.run_ckpt);
        if (!cache_write_superblocks(c, false, "clearing the running checkpoints' slots", "")) {
            snprintf(err, errlen, "cannot clear the running checkpoints' slots in the "
                     "superblocks");
            return -1;
        }
        return 0;
    }
    r->on = true;
    c->sp.ckpt_room = 1;        /* until the first one's size is known */
    r->every_bytes = every;
    r->tick_ns = env_u64("TIERCACHE_TEST_CKPT_TICK_MS", 100) * 1000 * 1000;
    if (r->tick_ns == 0)
        r->tick_ns = 1000 * 1000;
    r->last_bytes = c->st.chunk_bytes_written;
    r->timer.fn = run_tick;
    /* R2 from the start: what any slot names stays held.  A slot naming a
     * segment the log holds (an older build's run, or damage) names
     * nothing that can be read: emptied. */
    uint64_t gen = 0;
    for (unsigned d = 0; d < c->ndevs; d++)
        for (unsigned i = 0; i < TC_RUN_CKPT_SLOTS; i++) {
            struct tc_run_ckpt *sl = &c->devs[d].sb.run_ckpt[i];
            if (sl->gen == 0)
                continue;
            bool ok = true;
            for (uint32_t k = 0; k < sl->nsegs; k++) {
                struct segment *sg = space_seg(&c->sp, sl->segs[k]);
                ok &= sg->held || space_hold(&c->sp, sl->segs[k]);
            }
            if (!ok) {
                tc_info("%s: the running checkpoint %llu in slot %u names segments the log "
                        "holds: the slot is emptied", c->devs[d].dev->name,
                        (unsigned long long)sl->gen, i);
                memset(sl, 0, sizeof *sl);
                continue;
            }
            gen = TC_MAX(gen, sl->gen);
        }
    release_unnamed(r);
    r->next_gen = gen + 1;
    /* With no slot full (a first start, or one after a clean stop, which
     * empties them), the first one is taken as soon as the log is idle:
     * a kill before every_bytes more are written then replays only those. */
    r->take_now = gen == 0;
    c->ckrun = r;
    timer_arm(c->reactor, &r->timer, r->tick_ns);
    tc_info("cache: running checkpoints every %llu bytes written to the log (%s)",
            (unsigned long long)every, r->why);
    return 0;
}

void ckpt_run_stop(struct cache *c)
{
    struct ckpt_run *r = c->ckrun;
    if (r == NULL || r->stopped)
        return;
    r->stopped = true;
    hold_end(r, false);
    timer_cancel(c->reactor, &r->timer);
}

bool ckpt_run_idle(const struct cache *c)
{
    return ckpt_run_busy_with(c) == NULL;
}

const char *ckpt_run_busy_with(const struct cache *c)
{
    const struct ckpt_run *r = c->ckrun;
    if (r == NULL)
        return NULL;
    if (r->busy)
        return "a running checkpoint's write";
    if (r->stabilizing)
        return "a running checkpoint's origin flush";
    if (r->syncing)
        return "a running checkpoint's log sync";
    return NULL;
}

void ckpt_run_fini(struct cache *c)
{
    struct ckpt_run *r = c->ckrun;
    if (r == NULL)
        return;
    if (c->reactor)
        timer_cancel(c->reactor, &r->timer);
    hold_end(r, false);
    /* Freed only when nothing in flight refers to it (a close that did
     * not end leaves it to the process's exit). */
    if (!r->busy && !r->syncing && !r->stabilizing)
        free(r);
    c->ckrun = NULL;
}

void ckpt_run_status_json(const struct cache *c, struct tc_json *j)
{
    const struct ckpt_run *r = c->ckrun;
    json_begin_object(j, "running_checkpoints");
    json_bool(j, "enabled", r != NULL && r->on);
    if (r) {
        json_string(j, "setting", r->setting);
        json_string(j, "why", r->why);
    }
    /* The room the slots hold out of the log now (R2). */
    uint64_t held = 0;
    for (uint32_t s = 0; s < c->sp.nsegs; s++)
        held += c->sp.segs[s].held;
    json_uint(j, "held_segments", held);
    json_uint(j, "held_bytes", held * c->segment_size);
    if (r && r->on) {
        json_uint(j, "every_bytes", r->every_bytes);
        json_uint(j, "written", r->written);
        json_uint(j, "failed", r->failed);
        json_uint(j, "no_room", r->no_room);
        /* Looks at a due checkpoint that found too few free segments to
         * encode it: the cleaner was kicked to make them. */
        json_uint(j, "waited_for_room", r->room_waits);
        json_uint(j, "waited_for_idle_log", r->not_idle);
        json_uint(j, "waited_for_cleaner", r->cleaner_waits);
        json_uint(j, "waited_for_stable_mark", r->stable_waits);
        json_uint(j, "origin_flushes", r->origin_flushes);
        json_uint(j, "origin_flushes_failed", r->stabilize_failed);
        json_uint(j, "last_gen", r->last_gen);
        json_uint(j, "last_cut_chunk", r->last_cut);
        json_uint(j, "last_bytes", r->last_len);
        json_uint(j, "last_encode_us", r->last_encode_ns / 1000);
        /* Requests held to find the cut under a steady load (the hold). */
        json_uint(j, "holds", r->holds);
        json_uint(j, "holds_given_up", r->holds_given_up);
        json_bool(j, "holding", r->holding);
        json_uint(j, "last_hold_us", r->last_hold_ns / 1000);
        json_uint(j, "max_hold_us", r->max_hold_ns / 1000);
    }
    json_end_object(j);
}

/* ---- running checkpoints: read at a start after a crash ---- */

struct ckpt_loaded {
    struct tc_ckpt ck;
    uint64_t gen;
    uint8_t *buf;
    struct parse ps;
};

/* The checkpoint a slot names, read whole and checked against it; NULL
 * with why. */
static uint8_t *read_slot(struct cache *c, const struct tc_run_ckpt *sl, struct tc_ckpt *ck,
                          char *why, size_t whylen)
{
    uint8_t *buf = read_whole(c, sl->segs, sl->nsegs, sl->len, sl->crc, "its slot's", ck, why,
                              whylen);
    if (buf && ck->chunk_seq != sl->cut) {
        snprintf(why, whylen, "it covers another log than its slot names");
        free(buf);
        return NULL;
    }
    return buf;
}

void ckpt_loaded_free(struct ckpt_loaded *l)
{
    if (l == NULL)
        return;
    free(l->ps.live_dev);
    free(l->ps.fill);
    free(l->ps.seq);
    free(l->ps.live);
    free(l->ps.segrec);
    free(l->buf);
    free(l);
}

struct ckpt_loaded *ckpt_run_load(struct cache *c, char *why, size_t whylen)
{
    /* Every full slot of every device, newest first (a kill while the
     * superblocks were rewritten may leave the devices' slots apart). */
    const struct tc_run_ckpt *cand[TC_MAX_DEVICES * TC_RUN_CKPT_SLOTS];
    unsigned n = 0;
    for (unsigned d = 0; d < c->ndevs; d++)
        for (unsigned i = 0; i < TC_RUN_CKPT_SLOTS; i++) {
            const struct tc_run_ckpt *sl = &c->devs[d].sb.run_ckpt[i];
            bool seen = false;
            for (unsigned k = 0; k < n && !seen; k++)
                seen = cand[k]->gen == sl->gen && cand[k]->crc == sl->crc &&
                       cand[k]->cut == sl->cut;
            if (sl->gen && !seen)
                cand[n++] = sl;
        }
    for (unsigned i = 1; i < n; i++)
        for (unsigned k = i; k > 0 && cand[k]->gen > cand[k - 1]->gen; k--) {
            const struct tc_run_ckpt *t = cand[k];
            cand[k] = cand[k - 1];
            cand[k - 1] = t;
        }
    snprintf(why, whylen, "no slot names one");
    for (unsigned i = 0; i < n; i++) {
        struct ckpt_loaded *l = tc_xcalloc(1, sizeof *l);
        char r[200];
        l->gen = cand[i]->gen;
        l->buf = read_slot(c, cand[i], &l->ck, r, sizeof r);
        l->ps = (struct parse){
            .c = c, .ck = &l->ck, .p = l->buf ? l->buf + TC_CKPT_HDR : NULL,
            .live_dev = tc_xcalloc(c->sp.nsegs, 1),
            .fill = tc_xcalloc(c->sp.nsegs, sizeof *l->ps.fill),
            .seq = tc_xcalloc(c->sp.nsegs, sizeof *l->ps.seq),
            .live = tc_xcalloc(c->sp.nsegs, sizeof *l->ps.live),
            .segrec = tc_xcalloc(c->sp.nsegs, sizeof *l->ps.segrec),
        };
        if (l->buf && parse(&l->ps, false, r, sizeof r) == 0) {
            if (one_per_device(c, &l->ps))
                return l;
            snprintf(r, sizeof r, "a group has two segments on one device");
        }
        tc_warn("cache: the running checkpoint %llu (newest chunk %llu) is not used: %s",
                (unsigned long long)cand[i]->gen, (unsigned long long)cand[i]->cut, r);
        snprintf(why, whylen, "none of the %u named checks", n);
        ckpt_loaded_free(l);
    }
    return NULL;
}

/* As compare(), the blocks and the lost set only: a log with no entry
 * appended after a running checkpoint's cut may still have chunks after
 * it (a summary that records a flush, with no entry), which change the
 * segments' records but nothing the blocks hold. */
static int compare_blocks(struct cache *c, const struct tc_ckpt *ck, const uint8_t *buf,
                          const struct tc_ckpt *headp, char *why, size_t whylen)
{
    struct tc_ckpt head = *headp, sc;
    size_t len;
    char r[200];
    uint8_t *mine = encode(c, &head, &len);
    int rc = 1;
    if (ckpt_decode(mine, &sc, r, sizeof r) < 0) {
        snprintf(why, whylen, "the scan's state does not encode: %s", r);
        rc = -1;
    } else if (sc.nblocks != ck->nblocks || sc.nfrags != ck->nfrags || sc.nlost != ck->nlost) {
        snprintf(why, whylen, "the checkpoint does not match the log: %llu blocks, %llu "
                 "fragments, %llu lost records; the log gives %llu, %llu, %llu",
                 (unsigned long long)ck->nblocks, (unsigned long long)ck->nfrags,
                 (unsigned long long)ck->nlost, (unsigned long long)sc.nblocks,
                 (unsigned long long)sc.nfrags, (unsigned long long)sc.nlost);
        rc = -1;
    } else {
        size_t a = (size_t)ck->nsegs * tc_ckpt_seg_bytes(0) + 8 * ck->nchunks;
        size_t b = (size_t)sc.nsegs * tc_ckpt_seg_bytes(0) + 8 * sc.nchunks;
        if (ck->body_len - a != sc.body_len - b ||
            memcmp(buf + TC_CKPT_HDR + a, mine + TC_CKPT_HDR + b, ck->body_len - a) != 0) {
            snprintf(why, whylen, "the checkpoint does not match the log: its blocks or lost "
                     "set differ from the scan's");
            rc = -1;
        }
    }
    free(mine);
    return rc;
}

/*
 * tiercache check: every checkpoint a slot of a device's superblocks
 * names (each distinct record once: the devices' slots may be apart after
 * a kill while they were rewritten, which is no problem) must be usable
 * by a start: its segments inside the set and none of them holding the
 * log (a slot's segments are held out of the log while it names them),
 * read whole, its checksums, header and records checking, as
 * ckpt_run_load() checks them.  Each that does not is a problem naming
 * the device, the slot and the byte offset of its first segment.  The
 * newest that checks is compared with the full scan when no entry was
 * appended after its cut (the scan's next sequence number is not above
 * its own) and the tail is its own: its blocks and lost set byte for
 * byte, as ckpt_verify() (a summary recording a flush may follow the
 * cut, changing only the segments' records and the stable mark, which no
 * write-through version is above at a cut: R1).  Otherwise the log after the cut would have
 * to be replayed onto it, which a start does (and crash/runckpt compares
 * with the scan); not here.
 */
void ckpt_run_verify(struct cache *c, struct ckpt_run_verdict *v,
                     void (*problem)(void *arg, const char *msg), void *arg)
{
    memset(v, 0, sizeof *v);
    const struct tc_run_ckpt *seen[TC_MAX_DEVICES * TC_RUN_CKPT_SLOTS];
    unsigned nseen = 0;
    const struct tc_run_ckpt *best = NULL;
    for (unsigned d = 0; d < c->ndevs; d++)
        for (unsigned i = 0; i < TC_RUN_CKPT_SLOTS; i++) {
            const struct tc_run_ckpt *sl = &c->devs[d].sb.run_ckpt[i];
            bool dup = false;
            for (unsigned k = 0; k < nseen && !dup; k++)
                dup = memcmp(seen[k], sl, sizeof *sl) == 0;
            if (sl->gen == 0 || dup)
                continue;
            seen[nseen++] = sl;
            v->slots++;
            char r[256] = "", where[96] = "";
            if (sl->nsegs == 0 || sl->nsegs > TC_RUN_CKPT_MAX_SEGS)
                snprintf(r, sizeof r, "its slot names %u segments", sl->nsegs);
            for (uint32_t k = 0; !r[0] && k < sl->nsegs; k++) {
                uint32_t s = sl->segs[k];
                if (s >= c->sp.nsegs) {
                    snprintf(r, sizeof r, "its slot names segment %u, beyond the set's %u", s,
                             c->sp.nsegs);
                    break;
                }
                const struct segment *sg = space_seg(&c->sp, s);
                if (sg->state != SEG_FREE && sg->nchunks > 0)
                    snprintf(r, sizeof r, "its slot names segment %u, which the log holds "
                             "(group %llu)", s, (unsigned long long)sg->seq);
            }
            if (sl->nsegs > 0 && sl->segs[0] < c->sp.nsegs)
                snprintf(where, sizeof where, " (segment %u at offset %llu of %s)", sl->segs[0],
                         (unsigned long long)seg_dev_offset(c, sl->segs[0]),
                         seg_cdev(c, sl->segs[0])->dev->name);
            struct tc_ckpt ck;
            uint8_t *buf = NULL;
            struct parse ps = { 0 };
            if (!r[0])
                buf = read_slot(c, sl, &ck, r, sizeof r);
            if (buf) {
                ps = (struct parse){
                    .c = c, .ck = &ck, .p = buf + TC_CKPT_HDR,
                    .live_dev = tc_xcalloc(c->sp.nsegs, 1),
                    .fill = tc_xcalloc(c->sp.nsegs, sizeof *ps.fill),
                    .seq = tc_xcalloc(c->sp.nsegs, sizeof *ps.seq),
                    .live = tc_xcalloc(c->sp.nsegs, sizeof *ps.live),
                    .segrec = tc_xcalloc(c->sp.nsegs, sizeof *ps.segrec),
                };
                if (parse(&ps, false, r, sizeof r) == 0 && !one_per_device(c, &ps))
                    snprintf(r, sizeof r, "a group has two segments on one device");
                free(ps.live_dev);
                free(ps.fill);
                free(ps.seq);
                free(ps.live);
                free(ps.segrec);
            }
            if (r[0]) {
                char msg[1024];
                snprintf(msg, sizeof msg, "%s: the running checkpoint %llu in slot %u%s cannot "
                         "be used: %s", c->devs[d].dev->name, (unsigned long long)sl->gen, i,
                         where, r);
                problem(arg, msg);
                free(buf);
                continue;
            }
            v->usable++;
            if (best && best->gen >= sl->gen) {
                free(buf);
                continue;
            }
            best = sl;
            v->newest_gen = sl->gen;
            v->newest_cut = sl->cut;
            v->compared = v->verified = false;
            if (c->lg.next_seq <= ck.next_seq && c->lg.tail_seq == ck.tail_seq) {
                struct tc_ckpt head = { .chunk_seq = ck.chunk_seq, .tail_seq = ck.tail_seq,
                                        .next_seq = ck.next_seq,
                                        .wt_stable_seq = c->lg.wt_stable_seq };
                char msg[1024], w[400];
                v->compared = true;
                if (compare_blocks(c, &ck, buf, &head, w, sizeof w) > 0) {
                    v->verified = true;
                } else {
                    snprintf(msg, sizeof msg, "%s: the running checkpoint %llu in slot %u%s: %s",
                             c->devs[d].dev->name, (unsigned long long)sl->gen, i, where, w);
                    problem(arg, msg);
                }
            }
            free(buf);
        }
}

const struct tc_ckpt *ckpt_loaded_head(const struct ckpt_loaded *l, uint64_t *gen)
{
    *gen = l->gen;
    return &l->ck;
}

bool ckpt_loaded_seg(const struct ckpt_loaded *l, uint32_t s, uint64_t *seq, uint32_t *nchunks)
{
    if (!l->ps.live_dev[s])
        return false;
    *seq = l->ps.seq[s];
    *nchunks = le32_get(l->ps.segrec[s] + 4);
    return true;
}

uint64_t ckpt_loaded_nlost(const struct ckpt_loaded *l)
{
    return l->ck.nlost;
}

bool ckpt_loaded_chunks_match(const struct ckpt_loaded *l, struct cache *c, uint32_t s)
{
    const uint8_t *p = l->ps.segrec[s];
    uint32_t n = le32_get(p + 4);
    const struct segment *sg = space_seg(&c->sp, s);
    if (sg->nchunks < n)
        return false;
    p += 24;
    for (uint32_t k = 0; k < n; k++, p += 8)
        if (sg->chunks[k].start != le16_get(p) || sg->chunks[k].hdr_sectors != le16_get(p + 2) ||
            sg->chunks[k].data_sectors != le16_get(p + 4))
            return false;
    return true;
}

void ckpt_loaded_apply(struct cache *c, struct ckpt_loaded *l, const uint8_t *walked,
                       const uint8_t *dropped, const uint32_t *extra, uint32_t nextra)
{
    char why[200];
    l->ps.dropped = dropped;
    l->ps.walked = walked;
    l->ps.extra = extra;
    l->ps.nextra = nextra;
    l->ps.p = l->buf + TC_CKPT_HDR;
    /* Checked whole by ckpt_run_load(): applied, it cannot fail. */
    TC_ASSERT_ALWAYS(parse(&l->ps, true, why, sizeof why) == 0);
}
