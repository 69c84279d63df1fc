/*
 * Checksums of cached data: the CRC store, and the look-up of a cached
 * sector's CRC through its segment's chunk table (engine/verify.h).
 */
#include <stdlib.h>
#include <string.h>

#include "engine/space.h"
#include "engine/verify.h"
#include "util/assert.h"
#include "util/misc.h"

#define NIL UINT32_MAX

struct vseg {
    uint32_t *crcs;             /* seg_sectors entries, or NULL */
    uint32_t prev, next;        /* LRU list of segments with crcs */
};

struct verify_cache {
    struct vseg *segs;
    uint32_t lru_head, lru_tail;    /* head = most recently used */
    uint64_t bytes, budget;
    uint32_t nsegs, seg_sectors;
    unsigned spb;
    struct space *sp;               /* the chunk tables, and their crcs_loaded flags */
};

struct verify_cache *verify_new(struct space *sp, unsigned spb, uint64_t budget)
{
    uint32_t nsegs = sp->nsegs;
    struct verify_cache *v = tc_xcalloc(1, sizeof *v);
    v->segs = tc_xcalloc(nsegs, sizeof *v->segs);
    for (uint32_t i = 0; i < nsegs; i++)
        v->segs[i].prev = v->segs[i].next = NIL;
    v->lru_head = v->lru_tail = NIL;
    v->budget = budget;
    v->nsegs = nsegs;
    v->seg_sectors = sp->seg_sectors;
    v->spb = spb;
    v->sp = sp;
    return v;
}

uint64_t verify_memory(const struct verify_cache *v)
{
    return v ? v->bytes : 0;
}

uint64_t verify_table_memory(const struct verify_cache *v)
{
    return v ? sizeof *v + (uint64_t)v->nsegs * sizeof *v->segs : 0;
}

void verify_free(struct verify_cache *v)
{
    if (v == NULL)
        return;
    for (uint32_t i = 0; i < v->nsegs; i++)
        free(v->segs[i].crcs);
    free(v->segs);
    free(v);
}

static void lru_unlink(struct verify_cache *v, uint32_t s)
{
    struct vseg *x = &v->segs[s];
    if (x->prev != NIL)
        v->segs[x->prev].next = x->next;
    else
        v->lru_head = x->next;
    if (x->next != NIL)
        v->segs[x->next].prev = x->prev;
    else
        v->lru_tail = x->prev;
    x->prev = x->next = NIL;
}

static void lru_push(struct verify_cache *v, uint32_t s)
{
    struct vseg *x = &v->segs[s];
    x->prev = NIL;
    x->next = v->lru_head;
    if (v->lru_head != NIL)
        v->segs[v->lru_head].prev = s;
    v->lru_head = s;
    if (v->lru_tail == NIL)
        v->lru_tail = s;
}

/* Invariant 17: no chunk of s keeps its flag once the array is gone. */
static void drop(struct verify_cache *v, uint32_t s)
{
    struct vseg *x = &v->segs[s];
    if (x->crcs == NULL)
        return;
    lru_unlink(v, s);
    free(x->crcs);
    x->crcs = NULL;
    v->bytes -= (uint64_t)v->seg_sectors * 4;
    struct segment *sg = space_seg(v->sp, s);
    for (uint32_t i = 0; i < sg->nchunks; i++)
        sg->chunks[i].crcs_loaded = 0;
}

void verify_forget(struct verify_cache *v, uint32_t s)
{
    drop(v, s);
}

static void store(struct verify_cache *v, uint32_t seg, uint32_t chunk_start,
                  const struct tc_chunk_header *h, const uint8_t *hdr_buf)
{
    struct vseg *x = &v->segs[seg];
    if (x->crcs == NULL) {
        uint64_t need = (uint64_t)v->seg_sectors * 4;
        while (v->bytes + need > v->budget && v->lru_tail != NIL)
            drop(v, v->lru_tail);
        x->crcs = tc_xmalloc(need);
        v->bytes += need;
        TC_ASSERT(v->bytes <= v->budget || v->bytes == need);     /* invariant 17 */
        lru_push(v, seg);
    } else {
        lru_unlink(v, seg);
        lru_push(v, seg);
    }
    uint32_t first = chunk_start + h->hdr_sectors;
    TC_ASSERT_ALWAYS(first + h->data_sectors <= v->seg_sectors);
    for (uint32_t i = 0; i < h->data_sectors; i++)
        x->crcs[first + i] = chunk_data_crc(hdr_buf, h, v->spb, i);
}

static void get(struct verify_cache *v, uint32_t seg, uint32_t off, uint32_t n, uint32_t *crcs)
{
    struct vseg *x = &v->segs[seg];
    TC_ASSERT_ALWAYS(x->crcs != NULL && off + n <= v->seg_sectors);
    memcpy(crcs, x->crcs + off, (size_t)n * 4);
    lru_unlink(v, seg);
    lru_push(v, seg);
}

void verify_remember(struct verify_cache *v, uint32_t seg, uint32_t chunk_start,
                     const struct tc_chunk_header *h, const uint8_t *hdr_buf)
{
    store(v, seg, chunk_start, h, hdr_buf);
    struct segment *sg = space_seg(v->sp, seg);
    for (uint32_t i = 0; i < sg->nchunks; i++)
        if (sg->chunks[i].start == chunk_start)
            sg->chunks[i].crcs_loaded = 1;
}

bool verify_lookup(struct verify_cache *v, uint32_t seg, uint32_t off, uint32_t n,
                   uint32_t *crcs)
{
    if (v->segs[seg].crcs == NULL)
        return false;
    const struct chunk_ref *cr = segment_chunk_of(v->sp, seg, off);
    if (cr == NULL || !cr->crcs_loaded || off + n > (uint32_t)cr->start + cr->hdr_sectors +
                                                         cr->data_sectors)
        return false;
    get(v, seg, off, n, crcs);
    return true;
}
