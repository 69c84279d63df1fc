/*
 * The map's entry mutations (map.h): adding and dropping fragments and
 * blocks, marking sectors clean, making a write-through version dirty
 * again, dropping, promoting and adding mirror copies, and recording dirty
 * data lost -- each keeping the dirty set and totals, the recovered
 * write-through set and the live counts of the segments (space.h) in step
 * with the entries.
 */
#include <stdlib.h>

#include "engine/cache.h"
#include "engine/lostlog.h"
#include "engine/map.h"
#include "engine/originwin.h"
#include "engine/writeback.h"
#include "policy/policy.h"
#include "util/assert.h"
#include "util/log.h"
#include "util/misc.h"

void map_init(struct map *m, unsigned spb, uint64_t expected, uint64_t nblocks_origin)
{
    index_init(&m->idx, spb, expected);
    m->nblocks = nblocks_origin;
    m->dirty_bits = tc_xcalloc((nblocks_origin + 63) / 64 + 1, sizeof(uint64_t));
    m->dirty_blocks = m->dirty_sectors = 0;
    m->wt_recovered = 0;
    m->wt_recovered_min = UINT64_MAX;
}

void map_fini(struct map *m)
{
    lost_free(&m->lost);
    index_fini(&m->idx);
    free(m->dirty_bits);
    m->dirty_bits = NULL;
}

/* ---- the dirty set and the recovered write-through set ---- */

/* Keeps invariant 9. */
bool map_dirty_account(struct map *m, uint64_t oblock, const struct tc_mask *old_dirty,
                       const struct tc_mask *new_dirty)
{
    TC_ASSERT_ALWAYS(oblock < m->nblocks);
    uint64_t word = oblock / 64, bit = 1ull << (oblock % 64);
    if ((!old_dirty || mask_empty(old_dirty)) && (!new_dirty || mask_empty(new_dirty))) {
        /* Clean before and after (most calls in write-through): by
         * invariant 9 the bit is clear already, and the bitmap -- one bit
         * per origin block, a cache miss on a large origin -- is left
         * unread. */
        TC_ASSERT(!(m->dirty_bits[word] & bit));
        return false;
    }
    unsigned o = old_dirty ? mask_count(old_dirty) : 0;
    unsigned n = new_dirty ? mask_count(new_dirty) : 0;
    TC_ASSERT(m->dirty_sectors + n >= o);
    m->dirty_sectors += n;
    m->dirty_sectors -= o;
    bool was = m->dirty_bits[word] & bit;
    if (n && !was) {
        m->dirty_bits[word] |= bit;
        m->dirty_blocks++;
    } else if (!n && was) {
        TC_ASSERT(m->dirty_blocks > 0);
        m->dirty_bits[word] &= ~bit;
        m->dirty_blocks--;
        return true;
    }
    return false;
}

/* Keeps invariant 18. */
void map_wt_hold(struct map *m, uint32_t id, uint64_t seq)
{
    struct centry *e = CE(&m->idx, id);
    TC_ASSERT(ce_any_dirty(&m->idx, id));      /* invariant 18 */
    if (e->flags & CE_WT_RECOVERED)
        return;
    e->flags |= CE_WT_RECOVERED;
    if (m->wt_recovered++ == 0)
        m->wt_recovered_min = UINT64_MAX;
    m->wt_recovered_min = TC_MIN(m->wt_recovered_min, seq);
}

bool map_wt_release(struct map *m, uint32_t id)
{
    struct centry *e = CE(&m->idx, id);
    if (!(e->flags & CE_WT_RECOVERED))
        return false;
    TC_ASSERT_ALWAYS(m->wt_recovered > 0);
    e->flags &= (uint8_t)~CE_WT_RECOVERED;
    if (--m->wt_recovered == 0)
        m->wt_recovered_min = UINT64_MAX;
    return true;
}

/* A block recovery made dirty for its write-through version turned clean:
 * written back (its CLEAN record names that version, so the next recovery
 * clears it whatever the stable mark) or dropped.  It no longer holds the
 * stable mark. */
static void wt_recovered_release(struct cache *c, uint64_t oblock)
{
    uint32_t id = index_lookup(&c->map.idx, oblock);
    if (id == NIL || !map_wt_release(&c->map, id))
        return;
    if (c->map.wt_recovered == 0)
        tc_info("cache: the write-through data recovered as dirty is written back");
    cache_trace(c, oblock, "recovered write-through version clean (%llu left)",
                (unsigned long long)c->map.wt_recovered);
}

/* The block's dirty sectors were old_dirty and are new_dirty now (either
 * may be NULL: none): the totals follow, a block turning clean leaves
 * writeback's failure table and the recovered write-through set, and a
 * block turning dirty may need more room kept for the state file. */
static void map_set_dirty(struct cache *c, uint64_t oblock, const struct tc_mask *old_dirty,
                          const struct tc_mask *new_dirty)
{
    if (map_dirty_account(&c->map, oblock, old_dirty, new_dirty)) {
        writeback_forget(c, oblock);
        if (c->map.wt_recovered)
            wt_recovered_release(c, oblock);
        return;
    }
    /* One more dirty block, maybe: one more entry the state file would
     * need if the cache failed now (abandon.c keeps room for it). */
    abandon_room_check(c, &c->ab, c->map.dirty_blocks + c->map.lost.blocks);
}

/* ---- fragments and blocks ---- */

static void frag_unaccount(struct cache *c, uint32_t fid)
{
    struct tc_mask st;
    frag_stored(&c->map.idx, fid, &st);
    seg_add_live(&c->sp, frag_seg(&c->map.idx, fid), -(int)mask_count(&st));
    seg_add_live(&c->sp, frag_mseg(&c->map.idx, fid), -(int)mask_count(&st));
}

/* No sector at or past the block's end (mask.h).  Used by an assertion
 * only, which builds without TC_DEBUG_ASSERTS do not evaluate. */
__attribute__((unused)) static inline bool in_block(const struct cache *c,
                                                    const struct tc_mask *m)
{
    struct tc_mask all;
    mask_range(&all, 0, c->spb);
    return mask_covers(&all, m);
}

/* Keeps invariants 4, 7 and 8 (asserted here: the new fragment's dirty
 * sectors among those it stores, its place inside a segment of a live
 * group, and the block's masks and chain length after it). */
static uint32_t add_fragment(struct cache *c, uint64_t oblock, uint32_t id,
                             const struct tc_mask *stored, const struct tc_mask *dirty,
                             uint32_t seg, uint16_t off, uint32_t mseg, uint16_t moff,
                             uint16_t flags, bool replace, bool account,
                             const struct tc_mask *was_dirty);

uint32_t map_add_fragment(struct cache *c, uint64_t oblock, const struct tc_mask *stored,
                            const struct tc_mask *dirty, uint32_t seg, uint16_t off,
                            uint32_t mseg, uint16_t moff, uint16_t flags, bool replace)
{
    return add_fragment(c, oblock, NIL, stored, dirty, seg, off, mseg, moff, flags, replace,
                        true, NULL);
}

/* The two parts of a split are added as the appends made them (the first
 * one older), so that the block's chain is what recovery rebuilds from
 * them: the newest fragment is the second part, which a clean record of
 * the version names.  The dirty set follows once, from before the first to
 * after the second: a first part of clean sectors alone never makes the
 * block clean in between (which would release its writeback state and the
 * write-through hold).  The second part's add is given the entry the
 * first one returned. */
uint32_t map_add_appended(struct cache *c, uint64_t oblock, uint32_t id,
                          const struct tc_mask *stored, const struct tc_mask *dirty,
                          const struct log_loc *at, uint16_t flags, bool replace)
{
    if (!at->split)
        return add_fragment(c, oblock, id, stored, dirty, at->seg, at->off, at->mseg, at->moff,
                            flags, replace, true, NULL);
    TC_ASSERT(at->mseg == NIL && mask_covers(stored, &at->part1));
    struct tc_mask s1 = at->part1, d1 = *dirty, s2 = *stored, d2 = *dirty, od;
    mask_and(&d1, &s1);
    mask_andnot(&s2, &s1);
    mask_andnot(&d2, &s1);
    id = index_lookup_hint(&c->map.idx, oblock, id);
    if (id == NIL)
        mask_clear(&od);
    else
        ce_get_masks(&c->map.idx, id, NULL, &od);
    id = add_fragment(c, oblock, id, &s1, &d1, at->seg, at->off, NIL, 0, flags, replace, false,
                      NULL);
    return add_fragment(c, oblock, id, &s2, &d2, at->seg2, at->off2, NIL, 0,
                        (uint16_t)(flags & ~CE_ADD_WRITTEN), false, true, &od);
}

/* Fragment (seg, off, mseg, moff) storing `stored` becomes entry id's
 * newest, as a record (the entry has no inline fragment): older fragments
 * lose the sectors it stores, and the empty go (all with replace).  ov:
 * the entry's valid sectors before; nv, nd: its valid and dirty sectors
 * after (nd: the dirty ones before, less `stored`, plus the new dirty
 * ones, as the caller computed them), which the entry takes. */
static void add_to_chain(struct cache *c, uint32_t id, const struct tc_mask *stored,
                         uint32_t seg, uint16_t off, uint32_t mseg, uint16_t moff, bool replace,
                         const struct tc_mask *ov, struct tc_mask *nv, struct tc_mask *nd)
{
    struct index *ix = &c->map.idx;
    uint32_t fid = frag_alloc(ix);
    struct cfrag *f = FR(ix, fid);
    f->seg = seg;
    f->off = off;
    f->mseg = mseg;
    f->moff = moff;
    frag_set_stored(ix, fid, stored);
    seg_add_live(&c->sp, seg, (int)mask_count(stored));
    seg_add_live(&c->sp, mseg, (int)mask_count(stored));

    struct centry *e = CE(ix, id);
    struct tc_mask newer = *stored, st;
    *nv = *stored;
    uint32_t *link = &FR(ix, fid)->next;
    *link = NIL;
    unsigned n = 1;
    for (uint32_t g = e->first, next; g != NIL; g = next) {
        next = FR(ix, g)->next;
        frag_stored(ix, g, &st);
        struct tc_mask cur = st;
        mask_andnot(&cur, &newer);
        mask_and(&cur, ov);     /* see frag_current(): a no-op under invariant 7 */
        if (replace || mask_empty(&cur)) {
            frag_unaccount(c, g);
            frag_free(ix, g);
            continue;
        }
        mask_or(nv, &cur);
        mask_or(&newer, &st);
        *link = g;
        link = &FR(ix, g)->next;
        *link = NIL;
        n++;
    }
    if (replace)
        mask_and(nd, nv);
    e = CE(ix, id);
    e->first = fid;
    e->nfrags = (uint8_t)n;
    ce_set_masks(ix, id, nv, nd);
    index_settle(ix, id);
}

/* id: the block's entry if the caller has it at hand (NIL: looked up;
 * index_lookup_hint()).  account false: the dirty set is left as it was
 * (the entry's dirty mask changes all the same); a later add with
 * was_dirty (the mask the set last followed) brings it in step. */
static uint32_t add_fragment(struct cache *c, uint64_t oblock, uint32_t id,
                             const struct tc_mask *stored, const struct tc_mask *dirty,
                             uint32_t seg, uint16_t off, uint32_t mseg, uint16_t moff,
                             uint16_t flags, bool replace, bool account,
                             const struct tc_mask *was_dirty)
{
    struct index *ix = &c->map.idx;
    struct tc_mask ov, od;
    TC_ASSERT(!mask_empty(stored) && mask_covers(stored, dirty) && in_block(c, stored));
    TC_ASSERT_ALWAYS(seg < c->sp.nsegs && off + mask_count(stored) <= c->seg_sectors);
    TC_ASSERT(space_seg(&c->sp, seg)->group != NIL);
    TC_ASSERT(mseg == NIL || (mseg < c->sp.nsegs && mseg != seg && space_seg(&c->sp, mseg)->group != NIL));
    id = index_lookup_hint(ix, oblock, id);
    bool fresh = id == NIL;
    unsigned old_nfrags = fresh ? 0 : CE(ix, id)->nfrags;
    if (fresh) {
        id = index_insert(ix, oblock);
        mask_clear(&ov);
        mask_clear(&od);
    } else {
        ce_get_masks(ix, id, &ov, &od);
    }
    struct tc_mask nv, nd = od;
    mask_andnot(&nd, stored);
    mask_or(&nd, dirty);
    struct centry *e = CE(ix, id);
    if (mseg == NIL && (fresh || (e->inl && (replace || mask_covers(stored, &ov))))) {
        /* The new fragment is all the block has after it (nothing cached,
         * or the one inline fragment superseded), without a mirror copy:
         * it goes inline at once -- what the chain below and
         * index_settle() would leave, without a record made and freed. */
        nv = *stored;
        if (replace)
            mask_and(&nd, &nv);
        seg_add_live(&c->sp, seg, (int)mask_count(stored));
        if (!fresh)
            seg_add_live(&c->sp, e->first, -(int)mask_count(&ov));
        index_set_inline(ix, id, seg, off, &nv, &nd);
    } else {
        if (!fresh)
            index_spill(ix, id);        /* an inline fragment becomes a record */
        add_to_chain(c, id, stored, seg, off, mseg, moff, replace, &ov, &nv, &nd);
        TC_ASSERT(CE(ix, id)->nfrags <= MAX_FRAGS || CE(ix, id)->nfrags <= old_nfrags ||
                  c->replaying);
    }
    e = CE(ix, id);
    e->flags = (uint16_t)((e->flags & ~CE_WT) | (flags & CE_WT) |
                          (!replace && (e->flags & CE_WT) ? CE_WT : 0));
    if (account)
        map_set_dirty(c, oblock, was_dirty ? was_dirty : &od, &nd);
    if (fresh)
        policy_inserted(c->policy, oblock, &CE(ix, id)->hint, !(flags & CE_ADD_WRITTEN));
    cache_trace(c, oblock, "add fragment %u:%u stored %llx dirty %llx%s%s", seg, off,
                (unsigned long long)stored->w[0], (unsigned long long)dirty->w[0],
                (flags & CE_WT) ? " WT" : "", replace ? " replacing all" : "");
    return id;
}

uint32_t map_find_fragment(struct cache *c, uint64_t oblock, uint32_t seg, uint16_t off,
                             uint32_t *idp)
{
    return map_find_fragment_hint(c, oblock, NIL, seg, off, idp);
}

uint32_t map_find_fragment_hint(struct cache *c, uint64_t oblock, uint32_t hint, uint32_t seg,
                                uint16_t off, uint32_t *idp)
{
    uint32_t id = index_lookup_hint(&c->map.idx, oblock, hint);
    if (idp)
        *idp = id;
    if (id == NIL)
        return NIL;
    for (uint32_t f = ce_head(&c->map.idx, id); f != NIL; f = frag_next(&c->map.idx, f))
        if (frag_seg(&c->map.idx, f) == seg && frag_off(&c->map.idx, f) == off)
            return f;
    return NIL;
}

void map_drop_fragment(struct cache *c, uint64_t oblock, uint32_t fid)
{
    uint32_t id = index_lookup(&c->map.idx, oblock);
    if (id != NIL)
        map_drop_found(c, oblock, id, fid);
}

bool map_drop_found(struct cache *c, uint64_t oblock, uint32_t id, uint32_t fid)
{
    struct index *ix = &c->map.idx;
    TC_ASSERT(id != NIL && id == index_lookup(ix, oblock));
    origin_window_dropped(c, oblock);
    struct tc_mask cur, v, d;
    frag_current(ix, id, fid, &cur);
    ce_get_masks(ix, id, &v, &d);
    struct centry *e = CE(ix, id);
    if (e->inl) {
        /* The one fragment, inline: the block goes. */
        if (fid != (id | FID_INLINE))
            return false;
        cache_trace(c, oblock, "drop fragment %u:%u", e->first, e->off);
        frag_unaccount(c, fid);
        map_set_dirty(c, oblock, &d, NULL);
        index_remove(ix, id);
        return true;
    }
    uint32_t *link = &e->first;
    while (*link != NIL && *link != fid)
        link = &FR(ix, *link)->next;
    if (*link == NIL)
        return false;
    cache_trace(c, oblock, "drop fragment %u:%u", FR(ix, fid)->seg, FR(ix, fid)->off);
    *link = FR(ix, fid)->next;
    frag_unaccount(c, fid);
    frag_free(ix, fid);
    e->nfrags--;
    if (e->first == NIL) {
        map_set_dirty(c, oblock, &d, NULL);
        index_remove(ix, id);
        return true;
    }
    struct tc_mask nd = d;
    mask_andnot(&v, &cur);
    mask_andnot(&nd, &cur);
    ce_set_masks(ix, id, &v, &nd);
    index_settle(ix, id);
    map_set_dirty(c, oblock, &d, &nd);
    return false;
}

void map_drop_block(struct cache *c, uint64_t oblock)
{
    uint32_t id = index_lookup(&c->map.idx, oblock);
    if (id == NIL)
        return;
    cache_trace(c, oblock, "drop block");
    origin_window_dropped(c, oblock);
    struct tc_mask d;
    ce_get_masks(&c->map.idx, id, NULL, &d);
    for (uint32_t f = ce_head(&c->map.idx, id); f != NIL; f = frag_next(&c->map.idx, f))
        frag_unaccount(c, f);
    map_set_dirty(c, oblock, &d, NULL);
    index_remove(&c->map.idx, id);
}


/* ---- dirty and clean, mirror copies ---- */

/* Keeps invariant 10: each mirror copy dropped uncounts its sectors. */
void map_drop_mirrors(struct cache *c, uint32_t id, int dev)
{
    struct index *ix = &c->map.idx;
    for (uint32_t f = ce_head(ix, id); f != NIL; f = frag_next(ix, f)) {
        uint32_t mseg = frag_mseg(ix, f);
        if (mseg == NIL || (dev >= 0 && space_seg(&c->sp, mseg)->dev != (unsigned)dev))
            continue;
        struct tc_mask st;
        frag_stored(ix, f, &st);
        seg_add_live(&c->sp, mseg, -(int)mask_count(&st));
        FR(ix, f)->mseg = NIL;      /* a record: it has a mirror */
    }
    index_settle(ix, id);
}

void map_mark_clean(struct cache *c, uint32_t id, const struct tc_mask *cleaned)
{
    struct index *ix = &c->map.idx;
    struct tc_mask v, d, nd;
    ce_get_masks(ix, id, &v, &d);
    nd = d;
    mask_andnot(&nd, cleaned);
    ce_set_masks(ix, id, &v, &nd);
    map_set_dirty(c, ce_oblock(CE(ix, id)), &d, &nd);
    CE(ix, id)->flags &= (uint8_t)~CE_WT;
    if (mask_empty(&nd))
        map_drop_mirrors(c, id, -1);    /* clean data keeps one copy */
}

void map_wt_redirty(struct cache *c, uint32_t id, const struct tc_mask *m, uint64_t seq)
{
    struct index *ix = &c->map.idx;
    struct tc_mask v, d, nd;
    ce_get_masks(ix, id, &v, &d);
    nd = d;
    mask_or(&nd, m);
    ce_set_masks(ix, id, &v, &nd);
    map_set_dirty(c, ce_oblock(CE(ix, id)), &d, &nd);
    CE(ix, id)->flags |= CE_WT;
    if (!mask_empty(&nd))
        map_wt_hold(&c->map, id, seq);
}

/* Keeps invariant 10: the fragment's sectors count live in the mirror's
 * segment now, and no longer in the failed copy's. */
void map_promote_mirror(struct cache *c, uint32_t id, uint32_t fid)
{
    struct index *ix = &c->map.idx;
    struct cfrag f = frag_view(ix, fid);
    TC_ASSERT_ALWAYS(f.mseg != NIL);
    struct tc_mask st;
    frag_stored(ix, fid, &st);
    seg_add_live(&c->sp, f.seg, -(int)mask_count(&st));
    frag_set_loc(ix, fid, f.mseg, f.moff);
    frag_set_mirror(ix, id, fid, NIL, 0);
    index_settle(ix, id);
}

/* Keeps invariant 10: the mirror copy counts the sectors its fragment
 * stores. */
void map_add_mirror(struct cache *c, uint32_t id, uint32_t fid, uint32_t mseg, uint16_t moff)
{
    struct index *ix = &c->map.idx;
    TC_ASSERT(frag_mseg(ix, fid) == NIL);
    TC_ASSERT_ALWAYS(mseg < c->sp.nsegs);
    struct tc_mask st;
    frag_stored(ix, fid, &st);
    frag_set_mirror(ix, id, fid, mseg, moff);
    seg_add_live(&c->sp, mseg, (int)mask_count(&st));
}

/* ---- lost dirty data ---- */

void map_lose_dirty(struct cache *c, uint64_t oblock, const struct tc_mask *m)
{
    TC_ASSERT(!mask_empty(m));
    c->st.lost_dirty_bytes += (uint64_t)mask_count(m) * TC_SECTOR;
    lost_record(c, oblock, m);
}
