/*
 * The index: origin block number -> cached entry -> chain of fragments.
 *
 * A chained hash table over one array of entries; a second array holds the
 * fragments.  Buckets, chains and links hold 32-bit numbers, not pointers,
 * so both tables can grow (by pages); free slots are chained through
 * hnext (entries) and next (fragment records).  The table has a
 * power-of-two number of buckets, at least half as many as entries, and
 * doubles with them (after a device failure it also halves as they go,
 * index_fit()).  A block's one fragment is usually inline in its entry
 * (engine/map.h).
 *
 *   buckets[hash(oblock)] -> entry 17 -hnext-> entry 4 -hnext-> NIL
 *   entry 17: first -> fragment 90 -next-> fragment 33 -next-> NIL
 *   entry 4:  inline fragment (seg 12, off 80), number 4 | FID_INLINE
 *
 * Each entry's valid and dirty masks are in the mask pages, beside the
 * entry pages and with the same numbering: entry id's are the 2 * mbytes
 * bytes at id * 2 * mbytes of page id / IX_PAGE (valid, then dirty; byte i
 * holds sectors 8i to 8i + 7).
 */
#include <stdlib.h>
#include <string.h>

#include "engine/cache.h"
#include "util/assert.h"
#include "util/misc.h"

_Static_assert(sizeof(struct centry) == 20, "an entry is 20 bytes (engine/map.h)");

/*
 * Neighbouring blocks hash to neighbouring buckets: a run of 8 blocks
 * (aligned) shares one mixed number and takes 8 buckets in a row, one
 * cache line of them.  A request spans several blocks, looked up one after
 * the other, and the buckets of a run then cost one cache miss, not one
 * each (the look-ups were a third of replay's time on multi-block
 * requests).  Runs spread as well as single blocks did: the mixing
 * multiplies the run number.
 */
static uint32_t hash(const struct index *ix, uint64_t oblock)
{
    uint64_t run = (oblock >> 3) * 0x9E3779B97F4A7C15ull;
    return ((uint32_t)(run >> 32) << 3 | (uint32_t)(oblock & 7)) & ix->bucket_mask;
}

static void rehash(struct index *ix, uint32_t nbuckets)
{
    free(ix->buckets);
    ix->buckets = tc_xmalloc((size_t)nbuckets * sizeof *ix->buckets);
    memset(ix->buckets, 0xff, (size_t)nbuckets * sizeof *ix->buckets);
    ix->bucket_mask = nbuckets - 1;
    for (uint32_t i = 0; i < ix->used; i++) {
        struct centry *e = CE(ix, i);
        if (ce_is_free(e))
            continue;           /* a free slot */
        uint32_t h = hash(ix, ce_oblock(e));
        e->hnext = ix->buckets[h];
        ix->buckets[h] = i;
    }
}

/* A page more in a table of pages: the table (of *tcap pointers) grows by
 * doubling; the page holds IX_PAGE things of size bytes. */
static void *add_page(void ***table, uint32_t *tcap, uint32_t npages, size_t size)
{
    if (npages == *tcap) {
        uint32_t n = *tcap ? *tcap * 2 : 4;
        void **t = realloc(*table, (size_t)n * sizeof *t);
        if (t == NULL)
            abort();
        *table = t;
        *tcap = n;
    }
    (*table)[npages] = tc_xcalloc(IX_PAGE, size);
    return (*table)[npages];
}

static void free_pages(void **table, uint32_t npages)
{
    if (table == NULL)
        return;
    for (uint32_t i = 0; i < npages; i++)
        free(table[i]);
    free(table);
}

/*
 * Buckets: a power of two, doubled when the entries are more than twice
 * as many (chains of one to two on average, 2 to 4 bytes per entry).
 * Nothing is sized to the cache's capacity: RAM per cached block is a
 * promise (<= 64 bytes with the policy at the default block size), and
 * memory for blocks not cached would break it while the cache fills.
 */
int index_init(struct index *ix, unsigned spb, uint64_t expected)
{
    (void)expected;
    memset(ix, 0, sizeof *ix);
    ix->spb = spb;
    ix->mbytes = spb >= 8 ? spb / 8 : 1;
    ix->free_head = NIL;
    ix->ffree = NIL;
    rehash(ix, 16);
    return 0;
}

/*
 * The cache holds at most `blocks` blocks from now on (a device failed):
 * the hash table, doubled as entries came, shrinks towards what that
 * many entries need (the growth rule's size: at most two entries per
 * bucket, 16 buckets at least) -- at once as far as the entries cached
 * now allow, and further as they go (index_remove(), the failed device's
 * rescued blocks leaving it).  It is halved only while it has at least
 * two buckets per entry, so that it has one per entry after the halving
 * and must double its entries to grow again: removals and insertions
 * around one size never rehash each time.  Left at the whole cache's
 * size, a survivor of a quarter of it kept four times the buckets it
 * could ever use.  Entry and fragment pages stay: entries and records
 * are known by their numbers (inline fragment numbers, the records'
 * chains), and freeing a page would mean moving every live one in it;
 * the free slots are reused first.
 */
static void shrink(struct index *ix)
{
    uint32_t n = ix->bucket_mask + 1;
    while (n > ix->fit_buckets && ix->count <= n / 2)
        n /= 2;
    if (n < ix->bucket_mask + 1)
        rehash(ix, n);
}

void index_fit(struct index *ix, uint64_t blocks)
{
    uint32_t n = 16;
    while ((uint64_t)n * 2 < blocks && n < (1u << 29))
        n *= 2;
    ix->fit_buckets = n;
    shrink(ix);
}

void index_fini(struct index *ix)
{
    uint32_t np = ix->cap >> IX_PAGE_SHIFT, nf = ix->fcap >> IX_PAGE_SHIFT;
    free_pages((void **)ix->pages, np);
    free_pages((void **)ix->fpages, nf);
    free_pages((void **)ix->mpages, ix->mpages ? np : 0);
    free_pages((void **)ix->fext, ix->fext ? nf : 0);
    free(ix->buckets);
    memset(ix, 0, sizeof *ix);
}

uint32_t index_lookup(const struct index *ix, uint64_t oblock)
{
    for (uint32_t i = ix->buckets[hash(ix, oblock)]; i != NIL; i = CE(ix, i)->hnext)
        if (ce_oblock(CE(ix, i)) == oblock)
            return i;
    return NIL;
}

void index_prefetch(const struct index *ix, uint64_t oblock, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        uint32_t id = ix->buckets[hash(ix, oblock + i)];
        if (id != NIL)
            __builtin_prefetch(CE(ix, id));
    }
}

void index_prefetch_bucket(const struct index *ix, uint64_t oblock)
{
    __builtin_prefetch(&ix->buckets[hash(ix, oblock)]);
}

/* Entry id's masks: valid (mbytes bytes), then dirty. */
static uint8_t *masks_of(const struct index *ix, uint32_t id)
{
    return ix->mpages[id >> IX_PAGE_SHIFT] + (size_t)(id & (IX_PAGE - 1)) * 2 * ix->mbytes;
}

static void mask_load(const uint8_t *p, unsigned n, struct tc_mask *m)
{
    mask_clear(m);
    for (unsigned i = 0; i < n; i++)
        m->w[i / 8] |= (uint64_t)p[i] << (8 * (i % 8));
}

/* Bits at or above the block's sectors are 0 (mask.h), so n bytes hold
 * the whole mask. */
static void mask_store(uint8_t *p, unsigned n, const struct tc_mask *m)
{
    for (unsigned i = 0; i < n; i++)
        p[i] = (uint8_t)(m->w[i / 8] >> (8 * (i % 8)));
}

static struct tc_mask *fext_of(const struct index *ix, uint32_t fid)
{
    return &ix->fext[fid >> IX_PAGE_SHIFT][fid & (IX_PAGE - 1)];
}

uint32_t index_insert(struct index *ix, uint64_t oblock)
{
    if (ix->count + 1 > 2 * ((uint64_t)ix->bucket_mask + 1) && ix->bucket_mask < (1u << 29))
        rehash(ix, 2 * (ix->bucket_mask + 1));
    uint32_t id;
    if (ix->free_head != NIL) {
        id = ix->free_head;
        ix->free_head = CE(ix, id)->hnext;
    } else {
        if (ix->used == ix->cap) {
            if (ix->cap >= (1u << 30))
                abort();
            uint32_t np = ix->cap >> IX_PAGE_SHIFT, tcap = ix->npages_cap;
            add_page((void ***)&ix->pages, &ix->npages_cap, np, sizeof(struct centry));
            add_page((void ***)&ix->mpages, &tcap, np, 2 * ix->mbytes);
            ix->cap += IX_PAGE;
        }
        id = ix->used++;
    }
    struct centry *e = CE(ix, id);
    memset(e, 0, sizeof *e);
    ce_set_oblock(e, oblock);
    e->first = NIL;
    uint32_t h = hash(ix, oblock);
    e->hnext = ix->buckets[h];
    ix->buckets[h] = id;
    memset(masks_of(ix, id), 0, 2 * ix->mbytes);
    ix->count++;
    return id;
}

void index_remove(struct index *ix, uint32_t id)
{
    struct centry *e = CE(ix, id);
    for (uint32_t f = ce_head(ix, id), next; f != NIL; f = next) {
        next = frag_next(ix, f);
        frag_free(ix, f);
    }
    uint32_t *pp = &ix->buckets[hash(ix, ce_oblock(e))];
    while (*pp != id)
        pp = &CE(ix, *pp)->hnext;
    *pp = e->hnext;
    ce_set_oblock(e, IX_FREE);
    e->first = NIL;
    e->inl = 0;
    e->hnext = ix->free_head;
    ix->free_head = id;
    ix->count--;
    if (ix->fit_buckets && ix->bucket_mask + 1 > ix->fit_buckets)
        shrink(ix);
}

uint32_t frag_alloc(struct index *ix)
{
    uint32_t fid;
    if (ix->ffree != NIL) {
        fid = ix->ffree;
        ix->ffree = FR(ix, fid)->next;
    } else {
        if (ix->fused == ix->fcap) {
            if (ix->fcap >= (1u << 30))
                abort();
            uint32_t np = ix->fcap >> IX_PAGE_SHIFT, tcap = ix->nfpages_cap;
            add_page((void ***)&ix->fpages, &ix->nfpages_cap, np, sizeof(struct cfrag));
            if (ix->spb > 32)
                add_page((void ***)&ix->fext, &tcap, np, sizeof **ix->fext);
            ix->fcap += IX_PAGE;
        }
        fid = ix->fused++;
    }
    struct cfrag *f = FR(ix, fid);
    memset(f, 0, sizeof *f);
    f->seg = f->mseg = f->next = NIL;
    ix->nfrags++;
    ix->frecs++;
    return fid;
}

void frag_free(struct index *ix, uint32_t fid)
{
    ix->nfrags--;
    if (fid & FID_INLINE) {
        struct centry *e = CE(ix, fid & ~FID_INLINE);
        e->inl = 0;
        e->first = NIL;
        return;
    }
    FR(ix, fid)->seg = NIL;
    FR(ix, fid)->next = ix->ffree;
    ix->ffree = fid;
    ix->frecs--;
}

static void get_inline(uint32_t v, struct tc_mask *m)
{
    mask_clear(m);
    m->w[0] = v;
}

void ce_get_masks(const struct index *ix, uint32_t id, struct tc_mask *valid, struct tc_mask *dirty)
{
    const uint8_t *p = masks_of(ix, id);
    if (valid)
        mask_load(p, ix->mbytes, valid);
    if (dirty)
        mask_load(p + ix->mbytes, ix->mbytes, dirty);
}

bool ce_any_dirty(const struct index *ix, uint32_t id)
{
    const uint8_t *p = masks_of(ix, id) + ix->mbytes;
    for (unsigned i = 0; i < ix->mbytes; i++)
        if (p[i])
            return true;
    return false;
}

/* Marks a fragment record's stored mask as not empty, for blocks whose
 * masks are in fext (its inline field is unused then but for this). */
static uint32_t any_bits(const struct tc_mask *m)
{
    return mask_empty(m) ? 0 : 1;
}

/* The inline fragment of entry id becomes a record (stored: the valid
 * sectors). */
void index_spill(struct index *ix, uint32_t id)
{
    if (!CE(ix, id)->inl)
        return;
    struct tc_mask v;
    ce_get_masks(ix, id, &v, NULL);
    uint32_t seg = CE(ix, id)->first;
    uint16_t off = CE(ix, id)->off;
    uint32_t fid = frag_alloc(ix);
    ix->nfrags--;               /* the same fragment, moved */
    struct cfrag *f = FR(ix, fid);
    f->seg = seg;
    f->off = off;
    frag_set_stored(ix, fid, &v);
    struct centry *e = CE(ix, id);
    e->inl = 0;
    e->first = fid;
}

void index_settle(struct index *ix, uint32_t id)
{
    struct centry *e = CE(ix, id);
    if (e->inl || e->first == NIL || e->nfrags != 1)
        return;
    uint32_t fid = e->first;
    struct cfrag *f = FR(ix, fid);
    if (f->next != NIL || f->mseg != NIL)
        return;
    struct tc_mask st, v;
    frag_stored(ix, fid, &st);
    ce_get_masks(ix, id, &v, NULL);
    if (!mask_equal(&st, &v))
        return;
    uint32_t seg = f->seg;
    uint16_t off = f->off;
    frag_free(ix, fid);
    ix->nfrags++;               /* the same fragment, moved */
    e->first = seg;
    e->off = off;
    e->inl = 1;
}

/* Keeps invariant 7: dirty sectors are valid ones.  The fragment counts
 * follow: an entry without fragments gains one. */
void index_set_inline(struct index *ix, uint32_t id, uint32_t seg, uint16_t off,
                      const struct tc_mask *valid, const struct tc_mask *dirty)
{
    struct centry *e = CE(ix, id);
    TC_ASSERT(e->inl ? e->nfrags == 1 : (e->first == NIL && e->nfrags == 0));
    TC_ASSERT(mask_covers(valid, dirty) && !mask_empty(valid));
    if (!e->inl)
        ix->nfrags++;
    e->first = seg;
    e->off = off;
    e->inl = 1;
    e->nfrags = 1;
    uint8_t *p = masks_of(ix, id);
    mask_store(p, ix->mbytes, valid);
    mask_store(p + ix->mbytes, ix->mbytes, dirty);
}

/* Keeps invariant 7: dirty sectors are valid ones. */
void ce_set_masks(struct index *ix, uint32_t id, const struct tc_mask *valid,
                  const struct tc_mask *dirty)
{
    TC_ASSERT(mask_covers(valid, dirty));
    if (CE(ix, id)->inl) {
        struct tc_mask v;
        ce_get_masks(ix, id, &v, NULL);
        if (!mask_equal(&v, valid))
            index_spill(ix, id);
    }
    uint8_t *p = masks_of(ix, id);
    mask_store(p, ix->mbytes, valid);
    mask_store(p + ix->mbytes, ix->mbytes, dirty);
}

void frag_set_loc(struct index *ix, uint32_t fid, uint32_t seg, uint16_t off)
{
    if (fid & FID_INLINE) {
        CE(ix, fid & ~FID_INLINE)->first = seg;
        CE(ix, fid & ~FID_INLINE)->off = off;
    } else {
        FR(ix, fid)->seg = seg;
        FR(ix, fid)->off = off;
    }
}

void frag_set_mirror(struct index *ix, uint32_t id, uint32_t fid, uint32_t mseg, uint16_t moff)
{
    if (fid & FID_INLINE) {
        if (mseg == NIL)
            return;
        index_spill(ix, id);
        fid = CE(ix, id)->first;
    }
    FR(ix, fid)->mseg = mseg;
    FR(ix, fid)->moff = moff;
}

void frag_stored(const struct index *ix, uint32_t fid, struct tc_mask *m)
{
    if (fid & FID_INLINE)
        ce_get_masks(ix, fid & ~FID_INLINE, m, NULL);
    else if (ix->fext)
        *m = *fext_of(ix, fid);
    else
        get_inline(FR(ix, fid)->stored, m);
}

void frag_set_stored(struct index *ix, uint32_t fid, const struct tc_mask *m)
{
    if (fid & FID_INLINE)
        abort();                /* an inline fragment stores the valid sectors */
    if (ix->fext) {
        *fext_of(ix, fid) = *m;
        FR(ix, fid)->stored = any_bits(m);
    } else {
        FR(ix, fid)->stored = (uint32_t)m->w[0];
    }
}

void frag_current(const struct index *ix, uint32_t id, uint32_t fid, struct tc_mask *m)
{
    struct tc_mask newer, s, v;
    if (fid == (id | FID_INLINE) && CE(ix, id)->inl) {
        /* The usual block: its one fragment, inline, stores the valid
         * sectors (what the walk below finds, with one mask read). */
        ce_get_masks(ix, id, m, NULL);
        return;
    }
    mask_clear(&newer);
    for (uint32_t f = ce_head(ix, id); f != NIL; f = frag_next(ix, f)) {
        frag_stored(ix, f, &s);
        if (f == fid) {
            /* Among the valid sectors: the same under invariant 7; while a
             * failed device's block awaits its rewrite (failure.c), the
             * sectors an older fragment stores under a dropped newer one
             * are not the block's and never current. */
            ce_get_masks(ix, id, &v, NULL);
            *m = s;
            mask_andnot(m, &newer);
            mask_and(m, &v);
            return;
        }
        mask_or(&newer, &s);
    }
    mask_clear(m);
}

uint32_t ce_locate(const struct index *ix, uint32_t id, unsigned s)
{
    struct tc_mask m;
    for (uint32_t f = ce_head(ix, id); f != NIL; f = frag_next(ix, f)) {
        frag_stored(ix, f, &m);
        if (mask_test(&m, s))
            return f;
    }
    return NIL;
}

void index_clear_hints(struct index *ix)
{
    for (uint32_t id = 0; id < ix->used; id++)
        CE(ix, id)->hint = 0;
}

void index_memory_parts(const struct index *ix, struct index_memory *m)
{
    m->entries = (uint64_t)ix->cap * sizeof(struct centry) + ix->npages_cap * sizeof(void *);
    m->fragments = (uint64_t)ix->fcap * sizeof(struct cfrag) + ix->nfpages_cap * sizeof(void *);
    m->buckets = ((uint64_t)ix->bucket_mask + 1) * sizeof *ix->buckets;
    m->masks = (uint64_t)ix->cap * 2 * ix->mbytes + ix->npages_cap * sizeof(void *);
    if (ix->fext)
        m->masks += (uint64_t)ix->fcap * sizeof **ix->fext + ix->nfpages_cap * sizeof(void *);
}

uint64_t index_memory(const struct index *ix)
{
    struct index_memory m;
    index_memory_parts(ix, &m);
    return m.entries + m.fragments + m.buckets + m.masks;
}
