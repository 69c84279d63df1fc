/*
 * The origin window: origin writes acknowledged since the last origin
 * flush that covered them.
 *
 * An NBD server may lose the writes it acknowledged but was not asked to
 * flush when its connection drops (a restart losing a volatile cache).
 * The origin device then counts a new connection epoch (dev.h, dev_nbd.c),
 * and a later flush, sent on the new connection, covers nothing the old
 * one acknowledged.  Writeback checks this itself (a job's epoch).  The
 * writes clients send to the origin -- write-through versions, writes
 * around the cache (write-around mode, write-through writes the policy
 * did not admit, sequential bypass), write-zeroes -- are recorded here, as
 * origin ranges with the epoch and a counter (the acknowledgement number)
 * at their acknowledgement; FUA writes are not (durable once acknowledged).
 * Trims are too (origin_window_trimmed()), for the fills that meet them: a
 * fill read after an unflushed trim holds what the trim left (zeroes), and
 * a crash of the origin may take the trim back, so the fill is a
 * write-through version (readpath.c); a trim the origin lost with its
 * connection loses no data (its sectors may read their older data), so
 * its cut drops the clean copies read since and nothing else (cut_trim();
 * in a block with dirty sectors it makes them dirty instead).
 *
 * Every origin flush (a client FLUSH, a FUA write-zeroes or trim, the
 * periodic commit in writeback.c, the last flush of a stop) takes the
 * counter when it is sent; when it completes without error,
 * origin_window_flushed() looks at every record:
 *
 *   same epoch as now, acknowledged before the flush was sent   durable:
 *                                                               forgotten
 *   acknowledged in an older epoch (never covered by a flush    cut: the
 *   in that epoch, or it would be forgotten)                    origin may
 *                                                               have lost it
 *   otherwise                                                   kept
 *
 * A cut record's sectors:
 *
 *  - those of a write-through version the cache still holds (the block's
 *    entry was not dropped since: see origin_window_dropped()) become dirty
 *    again, so writeback puts the newest cached version on the origin; as
 *    recovery does with write-through versions above the stable mark
 *    (CE_WT_RECOVERED), each such block holds the stable mark where it is
 *    until it is written back, so a crash meanwhile makes them dirty again;
 *  - the rest cannot be written again (the cache lacks them, or holds a
 *    copy read from the origin since, maybe the older data): a clean cached
 *    copy is dropped (a tombstone follows, waiting for room if the log has
 *    none, cache_tombstone()), and the sectors go into the lost set
 *    (lost.h): reads fail with EIO until a client writes them.  Write
 *    acknowledgements wait for a tombstone or LOST record that waits for
 *    room: a write around the cache, acknowledged and flushed before the
 *    tombstone is durable, would be undone at the next start by the copy.
 *
 * The epoch counts the loss of any of the origin's connections, so with
 * multi-conn a write acknowledged on a connection that survives is cut too
 * when another one is lost (conservative, as for writeback).
 *
 * Records of an older epoch can never become durable, so writeback's tick
 * also looks (origin_window_check()): once it sees the epoch change it
 * deals with them at once, without waiting for a flush; that shortens the
 * time reads of those sectors may get the origin's older data after a
 * reconnection (until then nothing tells the daemon the server lost them).
 *
 * A cut fails the next client FLUSH with EIO, once (lost_flush_result():
 * the flush that found it, or the next one if the periodic commit or the
 * tick found it).  No flush that was in flight when a cut was found (the
 * mark carries the count of cuts) moves the write-through stable mark: it
 * was computed before the re-dirtied versions held it back.
 *
 * The run before.  A daemon killed (or stopped while the origin failed
 * its last flush) may have left writes it acknowledged on the origin with
 * no flush after them; the window of that run is gone with it.  Those the
 * cache holds are durable in its log (recovery makes write-through
 * versions above the stable mark dirty), the others -- writes around the
 * cache -- are on the origin alone, and a client FLUSH of the next run
 * must cover them too: an NBD FLUSH covers every write acknowledged
 * before it, whichever daemon acknowledged it.  So the start sets
 * before_start unless the run before stopped cleanly, its last origin
 * flush done (cache.c, origin_unflushed_at_start(): a first start, after a
 * format, counts as unflushed too -- a format wipes the record of a run
 * killed before it, not that run's writes on the origin):
 * while set, the window counts as pending and as holding writes the cache
 * lacks, so the first flush that reaches the daemon -- a client FLUSH in
 * any mode, tiercache flush or detach, the periodic commit -- flushes the
 * origin, and any origin flush that completes clears it.  While set, it
 * also meets every range (origin_window_overlaps()): a fill may read a
 * write of the run before that the origin still may lose, so every fill
 * is a write-through version until then.  That lasts until the periodic
 * commit's first origin flush (it sends one from the first commit interval
 * on, since the window counts as pending), and costs only this: a crash
 * before it makes those fills dirty at the next start, written back once.  The start
 * itself does not flush the origin: it would wait on an origin that holds
 * its flushes (or a remote one that is down), and a start must not hang;
 * a FLUSH may wait, as it would for writes of its own run.
 *
 * Bounds.  The window empties at every good flush, and the periodic commit
 * flushes the origin every few seconds while it holds anything (at once,
 * from the next tick, past OW_SOFT records), so it holds the writes of
 * a few seconds.  Contiguous ranges of writes around the cache merge.  Past
 * OW_MAX records (an origin whose flushes never complete), a new range is
 * merged into the last record, spanning both and everything between: a
 * cut then puts more sectors than were written into the lost set -- reads
 * of them fail although the origin may hold them -- never fewer.
 *
 * Every fill asks whether its block meets a record (readpath.c: such a
 * fill is a write-through version).  A scan of the records answered, up
 * to OW_SOFT of them: half the CPU time of a write-heavy replay with a
 * policy that fills every miss.  So the window also keeps the set of the
 * blocks its records meet (struct origin_window's blocks), and the
 * question for one whole block is one probe there.  The set only grows
 * between rebuilds, as the records do (a new one, a write merged into the
 * last, the overflow's spreading); records leave only in
 * origin_window_flushed(), which rebuilds it.  It is given up (the scan
 * answers, and past OW_SOFT records nothing is scanned anyway) when the
 * records reach OW_SOFT or meet more than OW_SET_MAX blocks, until the
 * next rebuild.  Sanitizer builds check each answer against the scan.
 *
 * The set holds runs of 8 blocks (aligned), a slot each: the run's number
 * and a bit per block of it.  An origin write usually covers neighbouring
 * blocks, and a set of single blocks, spread by the hash, took a cache
 * miss for each (a 64 KiB write through 4 KiB blocks: 16; 12 % of a
 * write-heavy replay's time); a run's blocks share one slot.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/cache.h"
#include "engine/failure.h"
#include "engine/lostlog.h"
#include "engine/map.h"
#include "engine/mask.h"
#include "engine/originwin.h"
#include "engine/writeback.h"
#include "engine/writepath.h"
#include "util/assert.h"
#include "util/log.h"
#include "util/misc.h"

#define OW_SOFT 4096u
#define OW_MAX (1u << 20)
#define OW_BUCKETS 4096u       /* chains at first; doubled past two records each */
#define OW_SET_MAX (1u << 16)   /* blocks the set holds at most */
#define OW_SET_FIRST 1024u      /* its slots at first; doubled when half full */
#define OW_SET_EMPTY UINT64_MAX /* (no run's number: blocks are below 2^56) */
#define OW_RUN_SHIFT 3          /* runs of 8 blocks, a bit each in a slot's low byte */

struct ow_rec {
    uint64_t off, len;
    uint64_t epoch, ack;
    uint32_t hnext;         /* hash chain of cached records (NIL: end) */
    bool cached;            /* a write-through version the cache took */
    bool dropped;           /* ... and the block's entry was dropped since */
    bool trim;              /* a trim (origin_window_trimmed()) */
};

static unsigned ow_bucket(const struct origin_window *w, uint64_t oblock)
{
    return (unsigned)(oblock & (w->nbuckets - 1));
}

static void hash_link(struct cache *c, uint32_t i)
{
    struct origin_window *w = &c->owin;
    unsigned b = ow_bucket(w, w->r[i].off / c->block_size);
    w->r[i].hnext = w->hash[b];
    w->hash[b] = i;
}

/* Empty chains, nb of them, holding every cached record again (linked in
 * record order: each chain runs from the newest to the oldest). */
static void hash_rebuild(struct cache *c, uint32_t nb)
{
    struct origin_window *w = &c->owin;
    if (nb != w->nbuckets) {
        free(w->hash);
        w->hash = tc_xcalloc(nb, sizeof *w->hash);
        w->nbuckets = nb;
    }
    for (uint32_t b = 0; b < nb; b++)
        w->hash[b] = NIL;
    for (uint32_t i = 0; i < w->n; i++)
        if (w->r[i].cached)
            hash_link(c, i);
}

static void hash_add(struct cache *c, uint32_t i)
{
    struct origin_window *w = &c->owin;
    if (w->hash == NULL)
        hash_rebuild(c, OW_BUCKETS);
    else if (w->n > 2 * w->nbuckets && w->nbuckets < OW_MAX / 2)
        hash_rebuild(c, 2 * w->nbuckets);   /* (links record i too) */
    else
        hash_link(c, i);
}

static void set_free(struct origin_window *w)
{
    free(w->blocks);
    w->blocks = NULL;
    w->blocks_mask = 0;
    w->nblocks = 0;
    w->nruns = 0;
}

/* Slots: a run's number shifted left by 8, with its blocks' bits in the
 * low byte, or OW_SET_EMPTY. */
static uint64_t *set_slots(uint32_t slots)
{
    uint64_t *b = tc_xmalloc((size_t)slots * sizeof *b);
    memset(b, 0xff, (size_t)slots * sizeof *b);
    return b;
}

/* The slot of run `run`, or the empty slot where it would go. */
static uint32_t set_slot(const struct origin_window *w, uint64_t run)
{
    uint32_t i = (uint32_t)tc_mix64(run) & w->blocks_mask;
    while (w->blocks[i] >> 8 != run && w->blocks[i] != OW_SET_EMPTY)
        i = (i + 1) & w->blocks_mask;
    return i;
}

static bool set_has(const struct origin_window *w, uint64_t b)
{
    if (w->blocks == NULL)
        return false;
    uint64_t s = w->blocks[set_slot(w, b >> OW_RUN_SHIFT)];
    return s != OW_SET_EMPTY && (s >> (b & 7) & 1);
}

/* Adds the blocks `bits` (a bit per block) of run `run`. */
static void set_put_run(struct origin_window *w, uint64_t run, unsigned bits)
{
    if (w->blocks == NULL) {
        w->blocks = set_slots(OW_SET_FIRST);
        w->blocks_mask = OW_SET_FIRST - 1;
    } else if (2 * (w->nruns + 1) > w->blocks_mask + 1) {
        uint64_t *old = w->blocks;
        uint32_t nslots = w->blocks_mask + 1;
        w->blocks = set_slots(2 * nslots);
        w->blocks_mask = 2 * nslots - 1;
        for (uint32_t i = 0; i < nslots; i++)
            if (old[i] != OW_SET_EMPTY)
                w->blocks[set_slot(w, old[i] >> 8)] = old[i];
        free(old);
    }
    uint32_t i = set_slot(w, run);
    if (w->blocks[i] == OW_SET_EMPTY) {
        w->blocks[i] = run << 8;
        w->nruns++;
    }
    uint64_t fresh = bits & ~w->blocks[i] & 0xff;
    w->blocks[i] |= fresh;
    w->nblocks += popcount64(fresh);
}

/* Adds the blocks that bytes [off, off + len) meet, as the scan's test
 * in origin_window_overlaps() meets a block's bytes: those from off's to
 * the last byte's, and for no bytes the block off lies inside, if it
 * does not start it. */
static void set_add_range(struct cache *c, uint64_t off, uint64_t len)
{
    struct origin_window *w = &c->owin;
    if (w->blocks_unknown)
        return;
    uint64_t first = off / c->block_size, last = first;
    if (len)
        last = (off + len - 1) / c->block_size;
    else if (off % c->block_size == 0)
        return;
    if (w->n >= OW_SOFT || last - first >= OW_SET_MAX ||
        w->nblocks + (last - first + 1) > OW_SET_MAX) {
        w->blocks_unknown = true;
        set_free(w);
        return;
    }
    for (uint64_t run = first >> OW_RUN_SHIFT; run <= last >> OW_RUN_SHIFT; run++) {
        uint64_t lo = TC_MAX(first, run << OW_RUN_SHIFT) & 7;
        uint64_t hi = TC_MIN(last, (run << OW_RUN_SHIFT) + 7) & 7;
        set_put_run(w, run, (unsigned)((2u << hi) - (1u << lo)));
    }
}

/* The set again from the records (some have gone). */
static void set_rebuild(struct cache *c)
{
    struct origin_window *w = &c->owin;
    set_free(w);
    w->blocks_unknown = false;
    for (uint32_t i = 0; i < w->n && !w->blocks_unknown; i++)
        set_add_range(c, w->r[i].off, w->r[i].len);
}

static void acked(struct cache *c, uint64_t off, uint64_t len, bool cached, bool trim)
{
    struct origin_window *w = &c->owin;
    uint64_t epoch = c->vol->origin->epoch;
    if (!c->vol->origin->can_flush)
        return;     /* no flush: writes are durable when acknowledged */
    w->acks++;
    if (w->n > 0) {
        struct ow_rec *l = &w->r[w->n - 1];
        if (!cached && !l->cached && l->trim == trim && l->epoch == epoch &&
            l->off + l->len == off) {
            l->len += len;
            l->ack = w->acks;
            set_add_range(c, off, len);
            return;
        }
        if (w->n >= OW_MAX) {
            /* Too many: spread the last one over both (see above). */
            uint64_t lo = TC_MIN(l->off, off), hi = TC_MAX(l->off + l->len, off + len);
            if (!w->overflowed)
                tc_warn("cache: more than %u origin writes not yet flushed; their ranges "
                        "are merged (if the origin loses them, more sectors read as lost)",
                        OW_MAX);
            w->overflowed = true;
            l->off = lo;
            l->len = hi - lo;
            l->cached = false;
            l->trim = false;    /* a cut takes it for writes: more lost, never fewer */
            l->epoch = TC_MIN(l->epoch, epoch);
            l->ack = w->acks;
            set_add_range(c, lo, hi - lo);
            return;
        }
    }
    if (w->n == w->cap) {
        w->cap = w->cap ? w->cap * 2 : 64;
        struct ow_rec *nr = tc_xcalloc(w->cap, sizeof *nr);
        if (w->n)
            memcpy(nr, w->r, (size_t)w->n * sizeof *nr);
        free(w->r);
        w->r = nr;
    }
    uint32_t i = w->n++;
    w->r[i] = (struct ow_rec){ .off = off, .len = len, .epoch = epoch, .ack = w->acks,
                               .hnext = NIL, .cached = cached, .trim = trim };
    if (cached)
        hash_add(c, i);
    set_add_range(c, off, len);
}

void origin_window_acked(struct cache *c, uint64_t off, uint64_t len, bool cached)
{
    acked(c, off, len, cached, false);
}

void origin_window_trimmed(struct cache *c, uint64_t off, uint64_t len)
{
    acked(c, off, len, false, true);
}

struct ow_mark origin_window_mark(const struct cache *c)
{
    return (struct ow_mark){ .ack = c->owin.acks, .cuts = c->owin.cuts, .sent = true };
}

void origin_window_started(struct cache *c, bool unflushed)
{
    c->owin.before_start = unflushed && c->vol->origin->can_flush && !c->vol->read_only;
}

bool origin_window_pending(const struct cache *c)
{
    return c->owin.n > 0 || c->owin.before_start;
}

bool origin_window_uncached(const struct cache *c)
{
    if (c->owin.before_start)
        return true;
    for (uint32_t i = c->owin.n; i-- > 0;)      /* the newest first: usually found at once */
        if ((!c->owin.r[i].cached && !c->owin.r[i].trim) || c->owin.r[i].dropped)
            return true;
    return false;
}

bool origin_window_full(const struct cache *c)
{
    return c->owin.n >= OW_SOFT;
}

static bool scan_overlaps(const struct origin_window *w, uint64_t off, uint64_t len)
{
    for (uint32_t i = w->n; i-- > 0;)
        if (w->r[i].off < off + len && off < w->r[i].off + w->r[i].len)
            return true;
    return false;
}

bool origin_window_overlaps(const struct cache *c, uint64_t off, uint64_t len)
{
    const struct origin_window *w = &c->owin;
    if (w->before_start)
        return true;    /* the run before may have left any range unflushed */
    if (w->n >= OW_SOFT)
        return true;    /* the commit flushes the origin at once (tick()) */
    if (w->blocks_unknown || len != c->block_size || off % c->block_size != 0)
        return scan_overlaps(w, off, len);
    bool met = set_has(w, off / c->block_size);
    TC_ASSERT(met == scan_overlaps(w, off, len));
    return met;
}

void origin_window_dropped(struct cache *c, uint64_t oblock)
{
    struct origin_window *w = &c->owin;
    if (w->hash == NULL || w->n == 0 || w->scanning)
        return;     /* (scanning: the records are being moved; a cut drops) */
    /* A chain runs from the newest record to the oldest, and a drop marks
     * every record of the block: past one already marked, all are. */
    for (uint32_t i = w->hash[ow_bucket(w, oblock)]; i != NIL; i = w->r[i].hnext)
        if (w->r[i].cached && w->r[i].off / c->block_size == oblock) {
            if (w->r[i].dropped)
                break;
            w->r[i].dropped = true;
        }
}

/* The block's write-through version is to be written back again. */
static void redirty(struct cache *c, uint64_t oblock, uint32_t id, const struct tc_mask *m)
{
    /* Hold the stable mark where it is until written back. */
    map_wt_redirty(c, id, m, c->lg.wt_stable_seq + 1);
    writeback_flush_include(c, oblock);
    cache_trace(c, oblock, "origin connection lost before a flush: write-through version "
                "dirty again");
}

static void cut(struct cache *c, const struct ow_rec *r, uint64_t *redirtied, uint64_t *lost)
{
    uint64_t off = r->off, end = r->off + r->len, ob;
    struct tc_mask m;
    while (mask_next_block(&off, end, c->block_size, &ob, &m)) {
        uint32_t id = index_lookup(&c->map.idx, ob);
        if (id != NIL) {
            struct tc_mask v, d, held;
            ce_get_masks(&c->map.idx, id, &v, &d);
            held = m;
            mask_and(&held, &v);
            if (r->cached && !r->dropped) {
                if (!mask_empty(&held)) {
                    redirty(c, ob, id, &held);
                    (*redirtied)++;
                }
                mask_andnot(&m, &v);
            } else if (!mask_empty(&held)) {
                if (mask_empty(&d)) {
                    /* Maybe read from the origin since: the older data.
                     * Its tombstone is never given up (failure.h): at
                     * the next start the copy in the log would come back
                     * over what the origin received since (writes around
                     * the cache leave nothing in the log). */
                    map_drop_block(c, ob);
                    cache_tombstone(c, ob);
                    c->st.invalidations++;
                } else {
                    /* Dirty: written by a client after this write (no
                     * write leaves the cache while a block is dirty). */
                    mask_andnot(&m, &v);
                }
            }
        }
        if (!mask_empty(&m)) {
            lost_record(c, ob, &m);
            *lost += mask_count(&m);
        }
    }
}

/* A trim the origin may have lost: its sectors read their older data
 * again, which a trimmed sector may (nothing is lost, nothing to write
 * again), but a clean cached copy read from the origin since may hold
 * what the trim left (zeroes): dropped, as cut() drops one.  Not a block
 * with dirty sectors (written by a client since, a write-through version
 * cut() made dirty again just before, or kept by the trim): its clean
 * sectors of the range, maybe such zeroes, are made dirty too, so the
 * origin gets what reads of the cache returned. */
static void cut_trim(struct cache *c, const struct ow_rec *r, uint64_t *dropped,
                     uint64_t *redirtied)
{
    uint64_t off = r->off, end = r->off + r->len, ob;
    struct tc_mask m;
    while (mask_next_block(&off, end, c->block_size, &ob, &m)) {
        uint32_t id = index_lookup(&c->map.idx, ob);
        if (id == NIL)
            continue;
        struct tc_mask v, d;
        ce_get_masks(&c->map.idx, id, &v, &d);
        mask_and(&m, &v);
        if (mask_empty(&m))
            continue;
        if (!mask_empty(&d)) {
            mask_andnot(&m, &d);
            if (!mask_empty(&m)) {
                redirty(c, ob, id, &m);
                (*redirtied)++;
            }
            continue;
        }
        map_drop_block(c, ob);
        cache_tombstone(c, ob);
        c->st.invalidations++;
        (*dropped)++;
    }
}

bool origin_window_flushed(struct cache *c, struct ow_mark mark)
{
    struct origin_window *w = &c->owin;
    uint64_t epoch = c->vol->origin->epoch;
    uint64_t redirtied = 0, lost = 0, cuts = 0, trims = 0, trim_dropped = 0, trim_redirtied = 0;
    uint32_t k = 0;
    uint64_t unrecorded = c->lost_unrecorded;
    w->epoch_seen = epoch;
    /* Any origin flush completed covers what the run before left. */
    if (mark.sent)
        w->before_start = false;
    w->scanning = true;
    /* The writes first: a write-through version written over a fill of a
     * trimmed range is made dirty again before the trim's cut looks at its
     * block (which would drop it, clean, and the write's sectors with it:
     * lost, not written back). */
    for (uint32_t i = 0; i < w->n; i++) {
        struct ow_rec *r = &w->r[i];
        if (r->epoch != epoch && !r->trim) {
            cut(c, r, &redirtied, &lost);
            cuts++;
        }
    }
    for (uint32_t i = 0; i < w->n; i++) {
        struct ow_rec *r = &w->r[i];
        if (r->epoch != epoch && r->trim) {
            cut_trim(c, r, &trim_dropped, &trim_redirtied);
            trims++;
        } else if (r->epoch != epoch) {
            ;   /* cut above */
        } else if (r->ack > mark.ack) {
            w->r[k++] = *r;
        }
    }
    w->scanning = false;
    if (c->lost_unrecorded != unrecorded)
        cache_lost_record_again(c);     /* a LOST record found no room */
    if (k != w->n) {
        w->n = k;
        set_rebuild(c);
        if (w->hash) {
            uint32_t nb = OW_BUCKETS;       /* shrink with the window */
            while (nb < w->nbuckets && w->n > 2 * nb)
                nb *= 2;
            hash_rebuild(c, nb);
        }
    }
    if (w->n == 0)
        w->overflowed = false;
    if (trims)
        tc_warn("cache: the origin connection was lost before a flush covered %llu trims (the "
                "server may have lost them: their sectors may read their older data); %llu "
                "clean cached blocks read from the origin since dropped, %llu blocks dirty "
                "again for the sectors read since (to be written back)",
                (unsigned long long)trims, (unsigned long long)trim_dropped,
                (unsigned long long)trim_redirtied);
    if (trim_redirtied && cuts == 0)
        writeback_kick(c);
    if (cuts == 0)
        return w->cuts != mark.cuts;    /* found by another flush meanwhile */
    w->cuts++;
    c->lost_events++;
    c->st.origin_cut_writes += cuts;
    tc_error("cache: the origin connection was lost before a flush covered %llu acknowledged "
             "origin writes (the server may have lost them): %llu cached blocks are dirty "
             "again, to be written back; %llu sectors read as lost (EIO) until written again",
             (unsigned long long)cuts, (unsigned long long)redirtied, (unsigned long long)lost);
    if (redirtied)
        writeback_kick(c);
    return true;
}

void origin_window_check(struct cache *c)
{
    struct origin_window *w = &c->owin;
    if (c->vol->origin->epoch == w->epoch_seen)
        return;
    w->epoch_seen = c->vol->origin->epoch;
    if (w->n > 0)
        origin_window_flushed(c, (struct ow_mark){ .ack = 0, .cuts = w->cuts, .sent = false });
}

void origin_window_free(struct cache *c)
{
    free(c->owin.r);
    free(c->owin.hash);
    free(c->owin.blocks);
    memset(&c->owin, 0, sizeof c->owin);
}

/* ---- flushes that move the write-through stable mark ---- */

void stable_flush_begin(struct cache *c, struct stable_flush *sf)
{
    sf->candidate = wt_stable_candidate(c);
    sf->mark = origin_window_mark(c);
}

int stable_flush_end(struct cache *c, const struct stable_flush *sf, int err)
{
    if (err == 0 && origin_window_flushed(c, sf->mark))
        err = -EIO;     /* not durable: the stable mark stays */
    if (err == 0)
        log_wt_stable(&c->lg, sf->candidate);
    return err;
}
