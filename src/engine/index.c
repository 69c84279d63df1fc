/*
 * The index: origin block number -> cached entry -> chain of fragments.
 *
 * A chained hash table over one array of entries; a second array holds the
 * fragments.  Buckets, chains and links hold 32-bit numbers, not pointers,
 * so both arrays can grow by reallocation; free slots are chained through
 * hnext (entries) and next (fragments).  The table has a power-of-two
 * number of buckets, at least as many as entries, and doubles with them.
 *
 *   buckets[hash(oblock)] -> entry 17 -hnext-> entry 4 -hnext-> NIL
 *   entry 17: head -> fragment 90 -next-> fragment 33 -next-> NIL
 */
#include <stdlib.h>
#include <string.h>

#include "engine/cache.h"
#include "util/misc.h"

void mask_range(struct tc_mask *m, unsigned s0, unsigned s1)
{
    mask_clear(m);
    for (unsigned s = s0; s < s1;) {
        unsigned w = s / 64, b = s % 64;
        unsigned n = TC_MIN(64 - b, s1 - s);
        uint64_t bits = n == 64 ? ~0ull : ((1ull << n) - 1) << b;
        m->w[w] |= bits;
        s += n;
    }
}

unsigned mask_count(const struct tc_mask *m)
{
    unsigned n = 0;
    for (int i = 0; i < TC_MASK_WORDS; i++)
        n += (unsigned)__builtin_popcountll(m->w[i]);
    return n;
}

bool mask_empty(const struct tc_mask *m)
{
    return (m->w[0] | m->w[1] | m->w[2] | m->w[3]) == 0;
}

bool mask_covers(const struct tc_mask *m, const struct tc_mask *sub)
{
    for (int i = 0; i < TC_MASK_WORDS; i++)
        if (sub->w[i] & ~m->w[i])
            return false;
    return true;
}

void mask_or(struct tc_mask *d, const struct tc_mask *a)
{
    for (int i = 0; i < TC_MASK_WORDS; i++)
        d->w[i] |= a->w[i];
}

void mask_and(struct tc_mask *d, const struct tc_mask *a)
{
    for (int i = 0; i < TC_MASK_WORDS; i++)
        d->w[i] &= a->w[i];
}

void mask_andnot(struct tc_mask *d, const struct tc_mask *a)
{
    for (int i = 0; i < TC_MASK_WORDS; i++)
        d->w[i] &= ~a->w[i];
}

bool mask_equal(const struct tc_mask *a, const struct tc_mask *b)
{
    return memcmp(a, b, sizeof *a) == 0;
}

unsigned mask_rank(const struct tc_mask *m, unsigned s)
{
    unsigned n = 0, w = s / 64;
    for (unsigned i = 0; i < w; i++)
        n += (unsigned)__builtin_popcountll(m->w[i]);
    if (s % 64)
        n += (unsigned)__builtin_popcountll(m->w[w] & ((1ull << (s % 64)) - 1));
    return n;
}

bool mask_next_run(const struct tc_mask *m, unsigned n, unsigned *s, unsigned *e)
{
    unsigned i = *s;
    while (i < n && !mask_test(m, i))
        i++;
    if (i >= n)
        return false;
    unsigned j = i;
    while (j < n && mask_test(m, j))
        j++;
    *s = i;
    *e = j;
    return true;
}

static uint32_t hash(const struct index *ix, uint64_t oblock)
{
    return (uint32_t)((oblock * 0x9E3779B97F4A7C15ull) >> 32) & ix->bucket_mask;
}

static void rehash(struct index *ix, uint32_t nbuckets)
{
    free(ix->buckets);
    ix->buckets = tc_xmalloc((size_t)nbuckets * sizeof *ix->buckets);
    memset(ix->buckets, 0xff, (size_t)nbuckets * sizeof *ix->buckets);
    ix->bucket_mask = nbuckets - 1;
    for (uint32_t i = 0; i < ix->used; i++) {
        struct centry *e = &ix->pool[i];
        if (e->oblock == UINT64_MAX)
            continue;           /* a free slot */
        uint32_t h = hash(ix, e->oblock);
        e->hnext = ix->buckets[h];
        ix->buckets[h] = i;
    }
}

/* Buckets: a power of two, at least half the entries (chains of two on
 * average at most, 2 to 4 bytes per entry). */
static uint32_t buckets_for(uint32_t cap)
{
    uint32_t n = 16;
    while (n < cap / 2 && n < (1u << 30))
        n *= 2;
    return n;
}

/* Capacity after cap is full: half again.  RAM per cached block is a
 * promise (<= 64 bytes with the policy), so the arrays are sized to the
 * cache's block count at start and grow by a half only past it. */
static uint32_t grown(uint32_t cap)
{
    uint64_t n = (uint64_t)cap + cap / 2 + 16;
    return n > (1u << 31) ? (1u << 31) : (uint32_t)n;
}

int index_init(struct index *ix, unsigned spb, uint64_t expected)
{
    memset(ix, 0, sizeof *ix);
    ix->spb = spb;
    uint32_t cap = (uint32_t)TC_MIN(TC_MAX(expected, 64), 1u << 30);
    ix->cap = cap;
    ix->pool = tc_xmalloc((size_t)cap * sizeof *ix->pool);
    ix->fcap = cap;
    ix->frags = tc_xmalloc((size_t)cap * sizeof *ix->frags);
    if (spb > 32) {
        ix->ext = tc_xcalloc(cap, sizeof *ix->ext);
        ix->fext = tc_xcalloc(cap, sizeof *ix->fext);
    }
    ix->free_head = NIL;
    ix->ffree = NIL;
    rehash(ix, buckets_for(cap));
    return 0;
}

void index_fini(struct index *ix)
{
    free(ix->pool);
    free(ix->frags);
    free(ix->buckets);
    free(ix->ext);
    free(ix->fext);
    memset(ix, 0, sizeof *ix);
}

uint32_t index_lookup(const struct index *ix, uint64_t oblock)
{
    for (uint32_t i = ix->buckets[hash(ix, oblock)]; i != NIL; i = ix->pool[i].hnext)
        if (ix->pool[i].oblock == oblock)
            return i;
    return NIL;
}

uint32_t index_insert(struct index *ix, uint64_t oblock)
{
    uint32_t id;
    if (ix->free_head != NIL) {
        id = ix->free_head;
        ix->free_head = ix->pool[id].hnext;
    } else {
        if (ix->used == ix->cap) {
            uint32_t cap = grown(ix->cap);
            struct centry *p = realloc(ix->pool, (size_t)cap * sizeof *p);
            if (p == NULL)
                abort();
            ix->pool = p;
            if (ix->ext) {
                void *x = realloc(ix->ext, (size_t)cap * sizeof *ix->ext);
                if (x == NULL)
                    abort();
                ix->ext = x;
            }
            ix->cap = cap;
            if (buckets_for(cap) != ix->bucket_mask + 1)
                rehash(ix, buckets_for(cap));
        }
        id = ix->used++;
    }
    struct centry *e = &ix->pool[id];
    memset(e, 0, sizeof *e);
    e->oblock = oblock;
    e->head = NIL;
    uint32_t h = hash(ix, oblock);
    e->hnext = ix->buckets[h];
    ix->buckets[h] = id;
    if (ix->ext)
        memset(ix->ext[id], 0, sizeof ix->ext[id]);
    ix->count++;
    return id;
}

void index_remove(struct index *ix, uint32_t id)
{
    struct centry *e = &ix->pool[id];
    for (uint32_t f = e->head, next; f != NIL; f = next) {
        next = ix->frags[f].next;
        frag_free(ix, f);
    }
    uint32_t *pp = &ix->buckets[hash(ix, e->oblock)];
    while (*pp != id)
        pp = &ix->pool[*pp].hnext;
    *pp = e->hnext;
    e->oblock = UINT64_MAX;
    e->head = NIL;
    e->hnext = ix->free_head;
    ix->free_head = id;
    ix->count--;
}

uint32_t frag_alloc(struct index *ix)
{
    uint32_t fid;
    if (ix->ffree != NIL) {
        fid = ix->ffree;
        ix->ffree = ix->frags[fid].next;
    } else {
        if (ix->fused == ix->fcap) {
            uint32_t cap = grown(ix->fcap);
            struct cfrag *p = realloc(ix->frags, (size_t)cap * sizeof *p);
            if (p == NULL)
                abort();
            ix->frags = p;
            if (ix->fext) {
                void *x = realloc(ix->fext, (size_t)cap * sizeof *ix->fext);
                if (x == NULL)
                    abort();
                ix->fext = x;
            }
            ix->fcap = cap;
        }
        fid = ix->fused++;
    }
    struct cfrag *f = &ix->frags[fid];
    memset(f, 0, sizeof *f);
    f->seg = f->mseg = f->next = NIL;
    ix->nfrags++;
    return fid;
}

void frag_free(struct index *ix, uint32_t fid)
{
    ix->frags[fid].seg = NIL;
    ix->frags[fid].next = ix->ffree;
    ix->ffree = fid;
    ix->nfrags--;
}

static void get_inline(uint32_t v, struct tc_mask *m)
{
    mask_clear(m);
    m->w[0] = v;
}

void ce_get_masks(const struct index *ix, uint32_t id, struct tc_mask *valid, struct tc_mask *dirty)
{
    if (ix->ext) {
        if (valid)
            *valid = ix->ext[id][0];
        if (dirty)
            *dirty = ix->ext[id][1];
        return;
    }
    if (valid)
        get_inline(ix->pool[id].valid, valid);
    if (dirty)
        get_inline(ix->pool[id].dirty, dirty);
}

/* Inline masks stay meaningful as "any bit set" tests for large blocks. */
static uint32_t any_bits(const struct tc_mask *m)
{
    return mask_empty(m) ? 0 : 1;
}

void ce_set_masks(struct index *ix, uint32_t id, const struct tc_mask *valid,
                  const struct tc_mask *dirty)
{
    if (ix->ext) {
        ix->ext[id][0] = *valid;
        ix->ext[id][1] = *dirty;
        ix->pool[id].valid = any_bits(valid);
        ix->pool[id].dirty = any_bits(dirty);
        return;
    }
    ix->pool[id].valid = (uint32_t)valid->w[0];
    ix->pool[id].dirty = (uint32_t)dirty->w[0];
}

void frag_stored(const struct index *ix, uint32_t fid, struct tc_mask *m)
{
    if (ix->fext)
        *m = ix->fext[fid];
    else
        get_inline(ix->frags[fid].stored, m);
}

void frag_set_stored(struct index *ix, uint32_t fid, const struct tc_mask *m)
{
    if (ix->fext) {
        ix->fext[fid] = *m;
        ix->frags[fid].stored = any_bits(m);
    } else {
        ix->frags[fid].stored = (uint32_t)m->w[0];
    }
}

void frag_current(const struct index *ix, uint32_t id, uint32_t fid, struct tc_mask *m)
{
    struct tc_mask newer, s;
    mask_clear(&newer);
    for (uint32_t f = ix->pool[id].head; f != NIL; f = ix->frags[f].next) {
        frag_stored(ix, f, &s);
        if (f == fid) {
            *m = s;
            mask_andnot(m, &newer);
            return;
        }
        mask_or(&newer, &s);
    }
    mask_clear(m);
}

uint32_t ce_locate(const struct index *ix, uint32_t id, unsigned s)
{
    struct tc_mask m;
    for (uint32_t f = ix->pool[id].head; f != NIL; f = ix->frags[f].next) {
        frag_stored(ix, f, &m);
        if (mask_test(&m, s))
            return f;
    }
    return NIL;
}

void index_clear_hints(struct index *ix)
{
    for (uint32_t id = 0; id < ix->used; id++)
        ix->pool[id].hint = 0;
}

uint64_t index_memory(const struct index *ix)
{
    uint64_t m = (uint64_t)ix->cap * sizeof *ix->pool + (uint64_t)ix->fcap * sizeof *ix->frags +
                 ((uint64_t)ix->bucket_mask + 1) * sizeof *ix->buckets;
    if (ix->ext)
        m += (uint64_t)ix->cap * sizeof *ix->ext + (uint64_t)ix->fcap * sizeof *ix->fext;
    return m;
}
