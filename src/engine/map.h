/*
 * The map: what the cache holds for each origin block, and the sets kept
 * beside it.
 *
 *   struct map
 *     idx           origin block -> entry (valid and dirty masks, flags,
 *                   policy hint) -> chain of fragments (seg, off), each
 *                   with an optional mirror copy (mseg, moff)
 *     dirty_bits    one bit per origin block: it has a dirty sector
 *     dirty_blocks, dirty_sectors      totals of the dirty masks
 *     lost          lost.h: sectors whose dirty data was lost (reads fail
 *                   with EIO until a client writes them again)
 *     wt_recovered, wt_recovered_min   the recovered write-through set:
 *                   entries flagged CE_WT_RECOVERED, and a lower bound of
 *                   their versions' sequence numbers
 *
 * The index's storage (pages of entries and fragment records, inline and
 * side masks) is index.c's; this header declares it.  The entry mutations
 * are map.c's, declared at the end; they take the whole cache (the
 * segments' live counts, the policy's hint, the origin window, tracing):
 * adding and dropping fragments and blocks, marking sectors clean (and
 * dropping mirror copies then), making a write-through version dirty
 * again, promoting and adding mirror copies, and recording dirty data
 * lost (map_lose_dirty(): the lost_dirty_bytes figure and lost_record(),
 * once per loss, by whichever path drops or replaces the last copy).  No
 * other file changes an entry's masks, flags CE_WT and CE_WT_RECOVERED,
 * its fragments' locations or mirrors, the dirty set or the segments'
 * live counts of what the index holds: each of those functions keeps
 * invariants 7 to 10 and 13 itself, calling the space's seg_add_live()
 * for each fragment and mirror copy it adds or drops.  (The entry's hint
 * byte is the policy's.)  The lost set's other changes -- a write clearing
 * sectors, recovery replaying LOST records, the in-doubt and cut writes of
 * the origin (lostlog.c, originwin.c) -- go through lost.h and lostlog.c.
 *
 * Invariants (numbered across the engine's headers, as in cache.h):
 *
 * Invariant 7: an entry's valid sectors are the union of the sectors its
 * fragments store, and its dirty sectors are among its valid ones; a new
 * fragment's dirty sectors are among those it stores.  One exception: a
 * block whose fragment on a failed cache device was dropped while an
 * older fragment stores the same sectors, until failure.c rewrites it as
 * one version (under its lock); meanwhile frag_current() and
 * map_add_fragment() count only valid sectors as current.
 *
 * Invariant 8: adding a fragment never makes a chain longer than
 * MAX_FRAGS, nor longer than it was, except while recovery replays the log
 * (c->replaying: a merge in a torn chunk may be missing).
 *
 * Invariant 9: map.dirty_sectors, map.dirty_blocks and map.dirty_bits
 * agree with the entries' dirty masks; map_dirty_account() is the one
 * place that changes them.
 *
 * Invariant 18: map.wt_recovered is the number of entries flagged
 * CE_WT_RECOVERED, each of them dirty; while it is not 0,
 * map.wt_recovered_min is at most the sequence number of each one's
 * version.  An entry is flagged when recovery or the origin window makes
 * its write-through version dirty (map_wt_redirty()) and loses the flag
 * when its block turns clean or leaves the map (map_set_dirty()):
 * map_wt_hold() and map_wt_release() are the only places that change the
 * set.
 */
#ifndef TC_ENGINE_MAP_H
#define TC_ENGINE_MAP_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/lost.h"
#include "engine/mask.h"

struct cache;

#define NIL UINT32_MAX

/* Entry flags. */
#define CE_WT        (1u << 0)   /* written through: the origin write may be pending */
/* A write-through version recovery made dirty (newer than the recorded
 * stable mark, so the origin may lack it), not yet written back: it holds
 * the stable mark below its sequence (map.wt_recovered).  Only dirty
 * entries carry it; it goes when the block turns clean. */
#define CE_WT_RECOVERED (1u << 3)
/* Not an entry flag: tells map_add_fragment() that a client write makes
 * the fragment (for the policy's inserted()). */
#define CE_ADD_WRITTEN  (1u << 15)

/* A block holds at most this many fragments; a write that would add one
 * more merges them all into one first. */
#define MAX_FRAGS 8

/*
 * A cached block is a chain of fragments, newest first.  A fragment is one
 * append: the sectors it stored, packed in order, at one location (and a
 * mirror copy of dirty data on another device).  A sector is served by the
 * newest fragment that stored it; a fragment whose sectors newer ones all
 * stored again is removed.  A small write to a cached block adds a small
 * fragment instead of rewriting the block.
 *
 *   block 7:  [seg 40: sector 3] -> [seg 12: sectors 0..15]
 *             sector 3 is read from segment 40, the others from segment 12
 *
 * Memory: the usual block has one fragment without a mirror copy; that
 * fragment is kept inline in the entry (its location, its stored sectors
 * being the block's valid ones).  An entry is 20 bytes: the origin block
 * number in 48 bits (origins of fewer than IX_FREE blocks: 1 EiB at 4 KiB
 * blocks, far more than the dirty bitmap's bit per origin block lets a
 * machine hold), 32-bit numbers instead of pointers, one byte each for the
 * flags, the policy's hint, the fragment count and the inline mark.  Its
 * valid and dirty masks are in a side table of 2 x max(1, spb / 8) bytes
 * per entry (4 bytes at the default 64 KiB blocks), so the entry does not
 * pay for the largest block size: 24 bytes per block at 64 KiB, plus 2
 * to 4 bytes of hash bucket.  A block with several fragments, or a mirror
 * copy, keeps its fragments as 20-byte records in a second table (their
 * stored masks inline up to 32 sectors, in a side table above).  The
 * tables grow by pages as blocks are cached (no memory is set aside for
 * blocks the cache does not hold yet, and at most one page is slack).
 * Entries and fragments are named by number, never by pointer across an
 * asynchronous step.  An entry keeps its number while cached; a
 * fragment's number changes when the block moves between the inline and
 * the record form (map_add_fragment(), map_drop_fragment(),
 * ce_set_masks(), frag_set_mirror(), index_settle()), so fragments are
 * found again by location (map_find_fragment()) after such a step.
 */
struct centry {
    uint32_t hnext;             /* hash chain */
    uint32_t first;             /* inline: the fragment's segment; else the
                                   newest fragment record (or NIL) */
    uint16_t off;               /* inline: the fragment's sector in it */
    uint8_t hint;               /* the policy's byte (policy/policy.h): 0 when made */
    uint8_t nfrags;
    uint32_t ob_lo;             /* the origin block: ce_oblock() */
    uint16_t ob_hi;
    uint8_t flags;              /* CE_WT, CE_WT_RECOVERED */
    uint8_t inl;                /* the one fragment is inline */
};                              /* 20 bytes, no padding */

/* The origin block number of a free entry slot; origins have fewer blocks
 * (cache_open() refuses larger ones). */
#define IX_FREE ((1ull << 48) - 1)

static inline uint64_t ce_oblock(const struct centry *e)
{
    return (uint64_t)e->ob_hi << 32 | e->ob_lo;
}
static inline bool ce_is_free(const struct centry *e)
{
    return ce_oblock(e) == IX_FREE;
}
static inline void ce_set_oblock(struct centry *e, uint64_t oblock)
{
    e->ob_lo = (uint32_t)oblock;
    e->ob_hi = (uint16_t)(oblock >> 32);
}

/* A fragment record, for blocks of several fragments or a mirror copy. */
struct cfrag {
    uint32_t seg, mseg;         /* location and mirror location (or NIL) */
    uint32_t next;              /* older fragment, or NIL (free list link) */
    uint32_t stored;            /* inline mask of the sectors it holds */
    uint16_t off, moff;
};

/* Fragment numbers: a record's index, or an entry's number with this bit
 * for its inline fragment. */
#define FID_INLINE 0x80000000u

/* Entries and records are kept in pages of this many. */
#define IX_PAGE_SHIFT 8
#define IX_PAGE (1u << IX_PAGE_SHIFT)

struct index {
    struct centry **pages;      /* cap / IX_PAGE pages of entries */
    uint32_t cap, used, free_head, npages_cap;
    struct cfrag **fpages;      /* fcap / IX_PAGE pages of fragment records */
    uint32_t fcap, fused, ffree, nfpages_cap;
    uint32_t *buckets;
    uint32_t bucket_mask;
    uint32_t fit_buckets;       /* index_fit()'s size the table shrinks
                                   towards as entries go (0: none, it only
                                   grows) */
    uint64_t count, nfrags;     /* entries; fragments (inline ones too) */
    uint64_t frecs;             /* fragment records in use */
    uint8_t **mpages;           /* pages (as pages): each entry's valid and
                                   dirty masks, mbytes bytes each */
    struct tc_mask **fext;      /* pages: stored of fragment records of
                                   blocks > 32 sectors */
    unsigned spb;
    unsigned mbytes;            /* bytes of one stored mask: max(1, spb / 8) */
};

/* Memory of the index by part, in bytes (allocated, slack included). */
struct index_memory {
    uint64_t entries;           /* entry pages and their table */
    uint64_t fragments;         /* fragment record pages and their table */
    uint64_t buckets;           /* the hash table */
    uint64_t masks;             /* the entries' masks, and the fragment
                                   records' of blocks > 32 sectors */
};

int index_init(struct index *ix, unsigned spb, uint64_t expected);
/* The cache holds at most blocks blocks from now on (a device failed):
 * the hash table shrinks to fit them, as far as the entries allow now and
 * further as they are removed. */
void index_fit(struct index *ix, uint64_t blocks);
void index_fini(struct index *ix);
uint32_t index_lookup(const struct index *ix, uint64_t oblock);
/* A hint: index_lookup() of oblock .. oblock+n-1 follows soon.  Starts the
 * loads of their buckets' first entries, so that the look-ups of a
 * request's blocks wait for their cache misses together, not one after
 * another.  Changes nothing. */
void index_prefetch(const struct index *ix, uint64_t oblock, uint64_t n);
/* A hint further ahead: index_prefetch() of oblock follows, and its
 * look-up after that.  Starts the load of the block's bucket only (what
 * index_prefetch() would otherwise wait for before it can start the
 * entry's).  Changes nothing. */
void index_prefetch_bucket(const struct index *ix, uint64_t oblock);
/* A new entry for oblock (not in the index), without fragments. */
uint32_t index_insert(struct index *ix, uint64_t oblock);
/* Remove the entry and free its fragments (accounting is the caller's). */
void index_remove(struct index *ix, uint32_t id);
static inline struct centry *CE(const struct index *ix, uint32_t id)
{
    return &ix->pages[id >> IX_PAGE_SHIFT][id & (IX_PAGE - 1)];
}
/* index_lookup(), given an entry number the caller had for the block
 * (NIL, or one it may have left since): that entry if it still holds the
 * block (an origin block has at most one entry; a free slot holds
 * IX_FREE, no block), without the hash table's look-up. */
static inline uint32_t index_lookup_hint(const struct index *ix, uint64_t oblock, uint32_t hint)
{
    if (hint < ix->used && ce_oblock(CE(ix, hint)) == oblock)
        return hint;
    return index_lookup(ix, oblock);
}
/* index_prefetch() of one block, given an entry number the caller had
 * for it (as index_lookup_hint() takes it): that entry's line is loaded
 * when it may still hold the block, else the block's bucket's first
 * entry.  Changes nothing. */
static inline void index_prefetch_hint(const struct index *ix, uint64_t oblock, uint32_t hint)
{
    if (hint < ix->used)
        __builtin_prefetch(CE(ix, hint));
    else
        index_prefetch(ix, oblock, 1);
}
/* index_prefetch_hint() and the load of the masks of the hinted entry
 * (what ce_get_masks() of the block reads next), when the hint is one:
 * both known without waiting for a load.  Changes nothing. */
static inline void index_prefetch_entry(const struct index *ix, uint64_t oblock, uint32_t hint)
{
    index_prefetch_hint(ix, oblock, hint);
    if (hint < ix->used)
        __builtin_prefetch(ix->mpages[hint >> IX_PAGE_SHIFT] +
                           (size_t)(hint & (IX_PAGE - 1)) * 2 * ix->mbytes);
}
/* A fragment record (not an inline fragment). */
static inline struct cfrag *FR(const struct index *ix, uint32_t fid)
{
    return &ix->fpages[fid >> IX_PAGE_SHIFT][fid & (IX_PAGE - 1)];
}
/* The newest fragment of entry id, and the next older one (NIL: none). */
static inline uint32_t ce_head(const struct index *ix, uint32_t id)
{
    const struct centry *e = CE(ix, id);
    return e->inl ? (id | FID_INLINE) : e->first;
}
static inline uint32_t frag_next(const struct index *ix, uint32_t fid)
{
    return (fid & FID_INLINE) ? NIL : FR(ix, fid)->next;
}
static inline uint32_t frag_seg(const struct index *ix, uint32_t fid)
{
    return (fid & FID_INLINE) ? CE(ix, fid & ~FID_INLINE)->first : FR(ix, fid)->seg;
}
static inline uint16_t frag_off(const struct index *ix, uint32_t fid)
{
    return (fid & FID_INLINE) ? CE(ix, fid & ~FID_INLINE)->off : FR(ix, fid)->off;
}
static inline uint32_t frag_mseg(const struct index *ix, uint32_t fid)
{
    return (fid & FID_INLINE) ? NIL : FR(ix, fid)->mseg;
}
static inline uint16_t frag_moff(const struct index *ix, uint32_t fid)
{
    return (fid & FID_INLINE) ? 0 : FR(ix, fid)->moff;
}
/* A copy of fragment fid's record (of an inline fragment: as a record
 * would be; stored is not filled in, see frag_stored()). */
static inline struct cfrag frag_view(const struct index *ix, uint32_t fid)
{
    if (fid & FID_INLINE) {
        const struct centry *e = CE(ix, fid & ~FID_INLINE);
        return (struct cfrag){ .seg = e->first, .mseg = NIL, .next = NIL, .off = e->off };
    }
    return *FR(ix, fid);
}
/* Move fragment fid to (seg, off). */
void frag_set_loc(struct index *ix, uint32_t fid, uint32_t seg, uint16_t off);
/* Give fragment fid of entry id a mirror copy (mseg != NIL: an inline
 * fragment becomes a record, changing its number) or none. */
void frag_set_mirror(struct index *ix, uint32_t id, uint32_t fid, uint32_t mseg, uint16_t moff);
/* Entry id's inline fragment (if it has one) becomes a record. */
void index_spill(struct index *ix, uint32_t id);
/* Entry id keeps its one fragment inline again if it can: after a change
 * that may have left a single fragment without a mirror. */
void index_settle(struct index *ix, uint32_t id);
/* Entry id's one fragment, inline, is (seg, off) now, storing `valid`, of
 * which `dirty` are dirty: the entry has no fragment, or its one inline
 * fragment, before.  (What adding a record, dropping the old fragment and
 * index_settle() would leave, without the record.) */
void index_set_inline(struct index *ix, uint32_t id, uint32_t seg, uint16_t off,
                      const struct tc_mask *valid, const struct tc_mask *dirty);
void ce_get_masks(const struct index *ix, uint32_t id, struct tc_mask *valid, struct tc_mask *dirty);
/* Set the masks; a new valid mask moves an inline fragment to a record. */
void ce_set_masks(struct index *ix, uint32_t id, const struct tc_mask *valid, const struct tc_mask *dirty);
/* A fragment record, and its release (inline fragments too). */
uint32_t frag_alloc(struct index *ix);
void frag_free(struct index *ix, uint32_t fid);
void frag_stored(const struct index *ix, uint32_t fid, struct tc_mask *m);
/* Of a fragment record. */
void frag_set_stored(struct index *ix, uint32_t fid, const struct tc_mask *m);
/* The sectors fragment fid of entry id serves now: what it stored, minus
 * what newer fragments stored. */
void frag_current(const struct index *ix, uint32_t id, uint32_t fid, struct tc_mask *m);
/* The fragment serving sector s of entry id, or NIL. */
uint32_t ce_locate(const struct index *ix, uint32_t id, unsigned s);
/* Entry id has a dirty sector. */
bool ce_any_dirty(const struct index *ix, uint32_t id);
uint64_t index_memory(const struct index *ix);
void index_memory_parts(const struct index *ix, struct index_memory *m);
/* Every entry's policy hint to 0: at a switch of policy. */
void index_clear_hints(struct index *ix);

/* ---- the map ---- */

struct map {
    struct index idx;               /* the index (index.c) */
    /* Dirty tracking: one bit per origin block, and totals (invariant 9). */
    uint64_t *dirty_bits;           /* nblocks bits (origin blocks) */
    uint64_t dirty_blocks, dirty_sectors;
    uint64_t nblocks;
    struct lost lost;               /* lost.h: dirty sectors lost with a device */
    /* Entries with CE_WT_RECOVERED, and the lowest sequence of their
     * versions (as recovery found them; it stays until all are written
     * back, a conservative bound): see wt_stable_candidate().
     * Invariant 18. */
    uint64_t wt_recovered, wt_recovered_min;
};

/* An empty map for an origin of nblocks_origin blocks of spb sectors;
 * expected: the blocks the cache may hold (a sizing hint). */
void map_init(struct map *m, unsigned spb, uint64_t expected, uint64_t nblocks_origin);
/* Frees the index, the dirty bits and the lost set. */
void map_fini(struct map *m);
/* The dirty totals and bit of oblock follow a change of its dirty sectors
 * from old_dirty to new_dirty (NULL: none); true if the block turned
 * clean.  map.c's map_set_dirty() calls it, and does what a block turning
 * clean needs besides. */
bool map_dirty_account(struct map *m, uint64_t oblock, const struct tc_mask *old_dirty,
                       const struct tc_mask *new_dirty);
static inline bool map_is_dirty(const struct map *m, uint64_t oblock)
{
    return (m->dirty_bits[oblock / 64] >> (oblock % 64)) & 1;
}
/* Entry id (dirty) holds the write-through stable mark below seq: flagged
 * CE_WT_RECOVERED, counted (a second hold of a flagged entry changes
 * nothing).  Release: the flag goes; true if it was set. */
void map_wt_hold(struct map *m, uint32_t id, uint64_t seq);
bool map_wt_release(struct map *m, uint32_t id);

/* ---- the entry mutations every path shares (map.c) ---- */

/* Entry id's sectors `cleaned` are on the origin: no longer dirty, the
 * entry no longer written through (CE_WT); once no sector is dirty, its
 * mirror copies go (clean data keeps one copy). */
void map_mark_clean(struct cache *c, uint32_t id, const struct tc_mask *cleaned);
/* Entry id's fragments lose their mirror copies on device dev (-1: on
 * every device); the entry settles (index_settle()) after. */
void map_drop_mirrors(struct cache *c, uint32_t id, int dev);
/* The origin may lack entry id's write-through version of sectors m (all
 * valid): they are dirty again, the entry CE_WT, and it holds the
 * write-through stable mark below seq until written back (invariant 18). */
void map_wt_redirty(struct cache *c, uint32_t id, const struct tc_mask *m, uint64_t seq);
/* Fragment fid of entry id lost its copy: its mirror copy is the copy now. */
void map_promote_mirror(struct cache *c, uint32_t id, uint32_t fid);
/* Fragment fid of entry id (without a mirror) has a mirror copy at
 * (mseg, moff); fid's number may change (frag_set_mirror()). */
void map_add_mirror(struct cache *c, uint32_t id, uint32_t fid, uint32_t mseg, uint16_t moff);
/* Dirty sectors m of the block are lost: no copy of them can be kept (the
 * caller drops or replaces what held them).  Counted (lost_dirty_bytes)
 * and recorded with lost_record(), once, where the loss happens. */
void map_lose_dirty(struct cache *c, uint64_t oblock, const struct tc_mask *m);
/* A fragment appended at (seg, off) holding the sectors `stored` becomes
 * the block's newest; `dirty` says which of them are dirty (the others are
 * clean).  With replace, it replaces every fragment (a merged version).
 * Returns the entry id. */
uint32_t map_add_fragment(struct cache *c, uint64_t oblock, const struct tc_mask *stored,
                            const struct tc_mask *dirty, uint32_t seg, uint16_t off,
                            uint32_t mseg, uint16_t moff, uint16_t flags, bool replace);
/* What log_append() stored (at): one fragment, or the two parts of a
 * split, as map_add_fragment() adds them (with replace, the first part
 * replaces every fragment; the second is added beside it).  id: the
 * block's entry if the caller has it at hand, else NIL (a hint, checked:
 * index_lookup_hint()).  Returns the entry id. */
struct log_loc;
uint32_t map_add_appended(struct cache *c, uint64_t oblock, uint32_t id,
                          const struct tc_mask *stored, const struct tc_mask *dirty,
                          const struct log_loc *at, uint16_t flags, bool replace);
/* Remove one fragment (the cleaner's drop); the block goes when none is
 * left.  Its sectors must be clean. */
void map_drop_fragment(struct cache *c, uint64_t oblock, uint32_t fid);
/* The same, of the block's entry id (found just before, holding fid);
 * true if the block left the map. */
bool map_drop_found(struct cache *c, uint64_t oblock, uint32_t id, uint32_t fid);
/* Remove the block's entry from the index (space accounting, dirty bits). */
void map_drop_block(struct cache *c, uint64_t oblock);
/* The fragment of oblock located at (seg, off), or NIL. */
uint32_t map_find_fragment(struct cache *c, uint64_t oblock, uint32_t seg, uint16_t off,
                             uint32_t *id);
/* The same, given an entry number the caller had for the block (NIL, or
 * one it may have left since: index_lookup_hint()). */
uint32_t map_find_fragment_hint(struct cache *c, uint64_t oblock, uint32_t hint, uint32_t seg,
                                uint16_t off, uint32_t *id);

#endif
