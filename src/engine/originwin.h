/*
 * The origin window (originwin.c): origin writes acknowledged since the
 * last origin flush that covered them.  An NBD server may lose the writes
 * it acknowledged but was not asked to flush when its connection drops;
 * the writes clients send to the origin are recorded here, with the
 * connection epoch at their acknowledgement, and every origin flush that
 * completes without error forgets what it covered.  A record cut by a
 * lost connection makes its sectors dirty again (a write-through version
 * the cache still holds) or lost (the rest), and fails the next client
 * FLUSH with EIO, once.  It owns struct origin_window (c->owin).
 */
#ifndef TC_ENGINE_ORIGINWIN_H
#define TC_ENGINE_ORIGINWIN_H

#include <stdbool.h>
#include <stdint.h>

struct cache;
struct ow_rec;

/* Where the origin window stood when a flush was sent (sent: an origin
 * flush was, and not origin_window_check()'s look). */
struct ow_mark {
    uint64_t ack, cuts;
    bool sent;
};

/* Origin writes acknowledged, not yet covered by a flush. */
struct origin_window {
    uint64_t epoch_seen;        /* the origin's epoch at the last look */
    bool scanning;              /* origin_window_flushed() at work */
    struct ow_rec *r;
    uint32_t n, cap;
    uint32_t *hash;             /* nbuckets chains of cached records */
    uint32_t nbuckets;          /* a power of two */
    uint64_t acks;              /* acknowledgements counted */
    uint64_t cuts, cuts_reported;   /* flushes that found a cut, reported ones */
    bool overflowed;
    /* The origin may hold writes an earlier run acknowledged that no
     * origin flush covered (origin_window_started()): no record says
     * where, so until an origin flush completes, one is pending, and of
     * writes only the origin holds. */
    bool before_start;
    /* The blocks the records touch, for origin_window_overlaps() of one
     * block (a fill) without a scan of every record: an open-addressing
     * set of runs of 8 blocks, a bit for each block of the run
     * (originwin.c; UINT64_MAX: empty), rebuilt when records go.
     * blocks_unknown: it no longer holds them all (too many, or a record
     * spread by the overflow), until the next rebuild. */
    uint64_t *blocks;
    uint32_t blocks_mask;       /* slots - 1 (no slots: blocks NULL) */
    uint32_t nblocks;           /* blocks held */
    uint32_t nruns;             /* slots used */
    bool blocks_unknown;
};

/* At start, before anything is served: unflushed, the run before may
 * have ended with writes acknowledged on the origin that no origin flush
 * covered (see origin_window_pending(), origin_window_uncached()). */
void origin_window_started(struct cache *c, bool unflushed);
/* A non-FUA origin write of [off, off + len) was acknowledged; cached:
 * it carries a write-through version the cache holds. */
void origin_window_acked(struct cache *c, uint64_t off, uint64_t len, bool cached);
/* A non-FUA origin trim of [off, off + len) was acknowledged: a fill that
 * meets it is a write-through version (a crash of the origin may take the
 * trim back), but it is no write a FLUSH must cover, and if the
 * connection is lost before a flush, nothing is lost. */
void origin_window_trimmed(struct cache *c, uint64_t off, uint64_t len);
/* Taken when an origin flush is sent, for origin_window_flushed(). */
struct ow_mark origin_window_mark(const struct cache *c);
/* Something waits for an origin flush (also: the run before may have left
 * writes unflushed); too much does (flush now). */
bool origin_window_pending(const struct cache *c);
/* ... and of those, writes only the origin holds: around the cache, or a
 * write-through version whose block has left the cache since, or any
 * write of the run before that it may have left unflushed.  (A cached
 * one is durable in the cache log: recovery writes it back if the origin
 * lost it.) */
bool origin_window_uncached(const struct cache *c);
bool origin_window_full(const struct cache *c);
/* Whether origin bytes [off, off + len) may hold a write no origin flush
 * has covered yet (true, to be safe, past OW_SOFT records: no scan of a
 * window grown that large; true for any range while the run before may
 * have left writes unflushed: before_start).  One whole block is answered
 * from the set of blocks the records touch, which gives the answer of a
 * scan. */
bool origin_window_overlaps(const struct cache *c, uint64_t off, uint64_t len);
/* An origin flush sent at mark completed without error: forget what it
 * covered; true if writes acknowledged on a lost connection were found
 * (re-dirtied or recorded lost) now or since the mark: the flush must not
 * report them durable, nor move the write-through stable mark. */
bool origin_window_flushed(struct cache *c, struct ow_mark mark);
/*
 * An origin flush that may move the write-through stable mark
 * (log_wt_stable()): every write-through version below the candidate is
 * on the origin once the flush completes -- unless the flush failed, or
 * writes it was to cover were acknowledged on a connection lost since.
 * Both are taken when the flush is sent (stable_flush_begin(): the
 * candidate, wt_stable_candidate(), is below every version whose origin
 * write is still in flight, so the flush covers all it names), and
 * stable_flush_end() judges the completion.  The client's FLUSH, the
 * commit, a running checkpoint, a drain and the close each send one.
 */
struct stable_flush {
    uint64_t candidate;         /* wt_stable_candidate() when sent */
    struct ow_mark mark;        /* origin_window_mark() when sent */
};
void stable_flush_begin(struct cache *c, struct stable_flush *sf);
/* The flush ended with err.  Returns err, or -EIO when writes it was to
 * cover may be lost (origin_window_flushed()); at 0 the candidate is
 * recorded stable, carried by the next chunk header. */
int stable_flush_end(struct cache *c, const struct stable_flush *sf, int err);
/* The origin's connection epoch changed: deal with the writes acknowledged
 * in older ones at once (cheap when nothing changed). */
void origin_window_check(struct cache *c);
/* The block's entry (or a fragment of it) leaves the cache. */
void origin_window_dropped(struct cache *c, uint64_t oblock);
void origin_window_free(struct cache *c);

#endif
