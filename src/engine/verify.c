/*
 * Checksums of cached data: every sector read from a cache device is
 * checked against the CRC-32C its chunk header recorded, so a corrupted
 * or misdirected sector is never returned to a client.
 *
 * The CRCs live on the device, in the chunk headers.  This module keeps
 * those of recently used segments in RAM: one array per segment, indexed
 * by sector, filled chunk by chunk (when a chunk is written, or when its
 * header is read for a check), and dropped least recently used first when
 * the budget is reached.  Each segment also keeps its chunk table, which
 * says where the header of any sector's chunk is.
 *
 *   segment 12:  chunks [0: hdr 1, data 255] [256: hdr 1, data 200] ...
 *   crcs[12]:    [ - | c1 c2 ... c255 | - | c257 ... ]    (LRU-managed)
 */
#include <stdlib.h>
#include <string.h>

#include "engine/cache.h"
#include "util/misc.h"

struct vseg {
    uint32_t *crcs;             /* seg_sectors entries, or NULL */
    uint32_t prev, next;        /* LRU list of segments with crcs */
};

struct verify_cache {
    struct vseg *segs;
    uint32_t lru_head, lru_tail;    /* head = most recently used */
    uint64_t bytes, budget;
};

int verify_init(struct cache *c, uint64_t budget)
{
    struct verify_cache *v = tc_xcalloc(1, sizeof *v);
    v->segs = tc_xcalloc(c->nsegs, sizeof *v->segs);
    for (uint32_t i = 0; i < c->nsegs; i++)
        v->segs[i].prev = v->segs[i].next = NIL;
    v->lru_head = v->lru_tail = NIL;
    v->budget = budget;
    c->verify = v;
    return 0;
}

uint64_t verify_memory(const struct cache *c)
{
    const struct verify_cache *v = c->verify;
    return v ? sizeof *v + (uint64_t)c->nsegs * sizeof *v->segs + v->bytes : 0;
}

void verify_fini(struct cache *c)
{
    struct verify_cache *v = c->verify;
    if (v == NULL)
        return;
    for (uint32_t i = 0; i < c->nsegs; i++)
        free(v->segs[i].crcs);
    free(v->segs);
    free(v);
    c->verify = NULL;
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

static void drop(struct cache *c, uint32_t s)
{
    struct verify_cache *v = c->verify;
    struct vseg *x = &v->segs[s];
    if (x->crcs == NULL)
        return;
    lru_unlink(v, s);
    free(x->crcs);
    x->crcs = NULL;
    v->bytes -= (uint64_t)c->seg_sectors * 4;
    struct segment *sg = SEG(c, s);
    for (uint32_t i = 0; i < sg->nchunks; i++)
        sg->chunks[i].crcs_loaded = 0;
}

void verify_forget_segment(struct cache *c, uint32_t s)
{
    drop(c, s);
}

const struct chunk_ref *segment_chunk_of(struct cache *c, uint32_t seg, uint32_t off)
{
    struct segment *sg = SEG(c, seg);
    uint32_t lo = 0, hi = sg->nchunks;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (sg->chunks[mid].start <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    const struct chunk_ref *cr = &sg->chunks[lo - 1];
    if (off >= (uint32_t)cr->start + cr->hdr_sectors + cr->data_sectors)
        return NULL;
    return cr;
}

void segment_add_chunk(struct cache *c, uint32_t seg, uint32_t start, uint32_t hdr_sectors,
                       uint32_t data_sectors)
{
    struct segment *sg = SEG(c, seg);
    if (sg->nchunks == sg->chunks_cap) {
        sg->chunks_cap = sg->chunks_cap ? sg->chunks_cap * 2 : 8;
        sg->chunks = realloc(sg->chunks, sg->chunks_cap * sizeof *sg->chunks);
        if (sg->chunks == NULL)
            abort();
    }
    sg->chunks[sg->nchunks++] = (struct chunk_ref){ (uint16_t)start, (uint16_t)hdr_sectors,
                                                    (uint16_t)data_sectors, 0 };
}

void verify_remember(struct cache *c, uint32_t seg, uint32_t chunk_start,
                     const struct tc_chunk_header *h, const uint8_t *hdr_buf)
{
    struct verify_cache *v = c->verify;
    struct vseg *x = &v->segs[seg];
    if (x->crcs == NULL) {
        uint64_t need = (uint64_t)c->seg_sectors * 4;
        while (v->bytes + need > v->budget && v->lru_tail != NIL)
            drop(c, v->lru_tail);
        x->crcs = tc_xmalloc(need);
        v->bytes += need;
        lru_push(v, seg);
    } else {
        lru_unlink(v, seg);
        lru_push(v, seg);
    }
    uint32_t first = chunk_start + h->hdr_sectors;
    for (uint32_t i = 0; i < h->data_sectors; i++)
        x->crcs[first + i] = chunk_data_crc(hdr_buf, h, c->spb, i);
    struct segment *sg = SEG(c, seg);
    for (uint32_t i = 0; i < sg->nchunks; i++)
        if (sg->chunks[i].start == chunk_start)
            sg->chunks[i].crcs_loaded = 1;
}

bool verify_lookup(struct cache *c, uint32_t seg, uint32_t off, uint32_t n, uint32_t *crcs)
{
    struct verify_cache *v = c->verify;
    struct vseg *x = &v->segs[seg];
    if (x->crcs == NULL)
        return false;
    const struct chunk_ref *cr = segment_chunk_of(c, seg, off);
    if (cr == NULL || !cr->crcs_loaded || off + n > (uint32_t)cr->start + cr->hdr_sectors +
                                                         cr->data_sectors)
        return false;
    memcpy(crcs, x->crcs + off, (size_t)n * 4);
    lru_unlink(v, seg);
    lru_push(v, seg);
    return true;
}
