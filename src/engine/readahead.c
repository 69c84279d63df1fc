/*
 * Read-ahead of cached sequential streams.
 *
 * A client reading a file linearly often has few requests in flight (the
 * kernel's own read-ahead, a copy tool): between its requests the cache
 * devices would idle.  Once a read stream has run for a while and the
 * data ahead of it is cached, the engine reads ahead on its own, up to
 * --readahead bytes (the window) in 1 MiB slots, so that every device has work while the
 * client catches up -- swapcache read cached files at 80% of what its two
 * SSDs could give because its look-ups were synchronous between reads.
 *
 *   client reads ---->[ slot 7 ][ slot 8 ][ slot 9 ][ slot 10 ] (loading)
 *                     ready     ready     loading   loading
 *
 * A read fully inside ready slots is answered from them; one that meets a
 * slot still loading waits for it.  A read of exactly one whole slot whose
 * buffer is a pool buffer (TC_REQ_POOL_BUF, the NBD server's) gets the
 * slot's buffer and leaves its own to the slot: no copy of 1 MiB.  Any write, trim or write-zeroes that
 * touches a slot discards it (a slot loading then is dropped when it
 * completes), so read-ahead never returns stale data.  A slot whose last
 * byte has been read is free again at once (a stream does not go back);
 * a slot loaded but not read yet is never taken for another: when every
 * slot is loading or waiting for its reader, read-ahead waits too, rather
 * than throw away device bandwidth already spent.  Slots read in part are
 * reused least recently used first.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cache.h"
#include "engine/readahead.h"
#include "engine/readpath.h"
#include "io/bufpool.h"
#include "util/json.h"
#include "util/misc.h"

#define RA_SLOT (1u << 20)
#define RA_MIN_STREAM (2u << 20)    /* a stream this long is worth it */

enum { SLOT_FREE, SLOT_LOADING, SLOT_READY };

struct ra_wait {
    struct ereq *e;
    struct ra_wait *next;
};

struct ra_slot {
    uint64_t off;               /* RA_SLOT-aligned */
    int state;
    bool stale;                 /* a write touched it while loading */
    uint64_t used;              /* LRU clock */
    uint64_t consumed;          /* bytes read out of it */
    uint8_t *data;
    struct ereq rq;             /* the internal read */
    struct readahead *ra;
};

struct readahead {
    struct cache *c;
    struct ra_slot *slot;
    unsigned nslots;            /* three windows' worth: several streams */
    uint64_t window;
    struct ra_wait *waiting;    /* requests waiting for loading slots */
    uint64_t clock;
    uint64_t hits, issued, wasted, swapped;
};

uint64_t readahead_max_window(struct cache *c)
{
    return c->ra ? (uint64_t)c->ra->nslots / 3 * RA_SLOT : 0;
}

/* Slots already loading beyond a smaller window finish and age out. */
void readahead_set_window(struct cache *c, uint64_t window)
{
    if (c->ra)
        c->ra->window = tc_round_down(window, RA_SLOT);
}

int readahead_init(struct cache *c)
{
    uint64_t window = tc_round_down(c->vol->cfg.readahead, RA_SLOT);
    if (window == 0)
        return 0;               /* disabled: c->ra stays NULL */
    struct readahead *ra = tc_xcalloc(1, sizeof *ra);
    ra->c = c;
    ra->window = window;
    ra->nslots = (unsigned)(3 * window / RA_SLOT);
    ra->slot = tc_xcalloc(ra->nslots, sizeof *ra->slot);
    for (unsigned i = 0; i < ra->nslots; i++)
        ra->slot[i].ra = ra;
    c->ra = ra;
    return 0;
}

void readahead_fini(struct cache *c)
{
    struct readahead *ra = c->ra;
    if (ra == NULL)
        return;
    for (unsigned i = 0; i < ra->nslots; i++)
        bufpool_put(ra->slot[i].data, RA_SLOT);
    free(ra->slot);
    free(ra);
    c->ra = NULL;
}

unsigned readahead_loading(const struct cache *c)
{
    const struct readahead *ra = c->ra;
    unsigned n = 0;
    for (unsigned i = 0; ra && i < ra->nslots; i++)
        n += ra->slot[i].state == SLOT_LOADING;
    return n;
}

static struct ra_slot *find(struct readahead *ra, uint64_t off)
{
    for (unsigned i = 0; i < ra->nslots; i++)
        if (ra->slot[i].state != SLOT_FREE && ra->slot[i].off == off)
            return &ra->slot[i];
    return NULL;
}

/* Copy e's range out of ready slots into e->buf (or hand a whole slot's
 * buffer over, TC_REQ_POOL_BUF); false if any part is missing. */
static bool copy_out(struct readahead *ra, struct ereq *e, bool *loading)
{
    uint64_t off = e->off, len = e->len;
    *loading = false;
    for (uint64_t o = off; o < off + len;) {
        uint64_t base = tc_round_down(o, RA_SLOT);
        struct ra_slot *s = find(ra, base);
        if (s == NULL || s->stale)
            return false;
        if (s->state == SLOT_LOADING) {
            *loading = true;
            return false;
        }
        o = TC_MIN(off + len, base + RA_SLOT);
    }
    if (len == RA_SLOT && off % RA_SLOT == 0 && (e->flags & TC_REQ_POOL_BUF)) {
        /* The request is the whole slot and its buffer a pool buffer of
         * the slot's size: swap the two instead of copying. */
        struct ra_slot *s = find(ra, off);
        uint8_t *b = e->buf;
        e->buf = s->data;
        s->data = b;
        s->used = ++ra->clock;
        s->consumed += len;
        s->state = SLOT_FREE;
        ra->swapped++;
        return true;
    }
    uint8_t *dst = e->buf;
    for (uint64_t o = off; o < off + len;) {
        uint64_t base = tc_round_down(o, RA_SLOT);
        struct ra_slot *s = find(ra, base);
        uint64_t n = TC_MIN(off + len, base + RA_SLOT) - o;
        memcpy(dst + (o - off), s->data + (o - base), n);
        s->used = ++ra->clock;
        s->consumed += n;
        o += n;
        if (o == base + RA_SLOT)
            s->state = SLOT_FREE;   /* read to its end: the stream has passed */
    }
    return true;
}

/* A read answered from the slots is a read hit, unless it is a sub-read
 * (engine.h, EREQ_SUB_READ): its request is no client read. */
static void count_hit(struct cache *c, const struct ereq *e)
{
    if (e->flags & EREQ_SUB_READ)
        return;
    c->st.read_hits++;
    c->st.read_hit_bytes += e->len;
}

static void slot_loaded(struct ereq *rq)
{
    struct ra_slot *s = container_of(rq, struct ra_slot, rq);
    struct readahead *ra = s->ra;
    if (rq->err || s->stale) {
        if (s->stale)
            ra->wasted++;
        s->state = SLOT_FREE;
    } else {
        s->state = SLOT_READY;
    }
    s->stale = false;
    ra->c->vol->inflight--;
    /* Wake the waiters: each one is answered or goes the normal way. */
    struct ra_wait *list = ra->waiting;
    ra->waiting = NULL;
    while (list) {
        struct ra_wait *w = list;
        list = w->next;
        struct ereq *e = w->e;
        free(w);
        bool loading;
        if (copy_out(ra, e, &loading)) {
            ra->hits++;
            count_hit(ra->c, e);
            e->err = 0;
            e->complete(e);
        } else if (loading) {
            struct ra_wait *again = tc_xcalloc(1, sizeof *again);
            again->e = e;
            again->next = ra->waiting;
            ra->waiting = again;
        } else {
            cache_read_direct(e);
        }
    }
}

/* Is every sector of [off, off+len) cached (and nothing dirty lost)? */
static bool all_cached(struct cache *c, uint64_t off, uint64_t len)
{
    for (uint64_t b = off / c->block_size; b < (off + len) / c->block_size; b++) {
        uint32_t id = index_lookup(&c->map.idx, b);
        if (id == NIL)
            return false;
        struct tc_mask v, full;
        ce_get_masks(&c->map.idx, id, &v, NULL);
        mask_range(&full, 0, c->spb);
        if (!mask_covers(&v, &full) || lost_get(&c->map.lost, b, NULL))
            return false;
    }
    return true;
}

static struct ra_slot *take_slot(struct readahead *ra)
{
    struct ra_slot *best = NULL;
    for (unsigned i = 0; i < ra->nslots; i++) {
        struct ra_slot *s = &ra->slot[i];
        if (s->state == SLOT_FREE)
            return s;
        /* Only a slot its reader has started on (and left) is taken. */
        if (s->state == SLOT_READY && s->consumed > 0 && (best == NULL || s->used < best->used))
            best = s;
    }
    if (best)
        ra->wasted++;           /* left before its end: the rest was read for nothing */
    return best;
}

/* Keep the window ahead of a stream at `next` loading. */
static void ahead(struct readahead *ra, uint64_t next)
{
    struct cache *c = ra->c;
    uint64_t size = c->vol->size;
    for (uint64_t base = tc_round_up(next, RA_SLOT); base < next + ra->window && base < size;
         base += RA_SLOT) {
        if (find(ra, base))
            continue;
        uint64_t len = TC_MIN((uint64_t)RA_SLOT, size - base);
        if (len % c->block_size || !all_cached(c, base, len))
            return;         /* read-ahead only what the cache holds */
        struct ra_slot *s = take_slot(ra);
        if (s == NULL)
            return;
        if (s->data == NULL)
            s->data = bufpool_get(RA_SLOT);
        s->off = base;
        s->state = SLOT_LOADING;
        s->stale = false;
        s->consumed = 0;
        s->used = ++ra->clock;
        memset(&s->rq, 0, sizeof s->rq);
        s->rq.vol = c->vol;
        s->rq.op = TC_OP_READ;
        s->rq.flags = EREQ_READAHEAD;
        s->rq.off = base;
        s->rq.len = len;
        s->rq.buf = s->data;
        s->rq.complete = slot_loaded;
        c->vol->inflight++;
        ra->issued++;
        cache_read_direct(&s->rq);
    }
}

bool readahead_read(struct cache *c, struct ereq *e, uint64_t stream_len)
{
    struct readahead *ra = c->ra;
    if (ra == NULL)
        return false;
    bool served = false, loading = false;
    if (copy_out(ra, e, &loading)) {
        ra->hits++;
        count_hit(c, e);
        served = true;
    }
    if (stream_len >= RA_MIN_STREAM)
        ahead(ra, e->off + e->len);
    if (served) {
        e->err = 0;
        e->complete(e);
        return true;
    }
    if (loading) {
        struct ra_wait *w = tc_xcalloc(1, sizeof *w);
        w->e = e;
        w->next = ra->waiting;
        ra->waiting = w;
        return true;
    }
    return false;
}

void readahead_invalidate(struct cache *c, uint64_t off, uint64_t len)
{
    struct readahead *ra = c->ra;
    if (ra == NULL)
        return;
    for (unsigned i = 0; i < ra->nslots; i++) {
        struct ra_slot *s = &ra->slot[i];
        if (s->state == SLOT_FREE || s->off >= off + len || s->off + RA_SLOT <= off)
            continue;
        if (s->state == SLOT_LOADING) {
            s->stale = true;
        } else {
            s->state = SLOT_FREE;
            ra->wasted++;
        }
    }
}

void readahead_status_json(struct cache *c, struct tc_json *j)
{
    struct readahead *ra = c->ra;
    json_begin_object(j, "readahead");
    json_uint(j, "hits", ra ? ra->hits : 0);
    json_uint(j, "slots_loaded", ra ? ra->issued : 0);
    json_uint(j, "slots_wasted", ra ? ra->wasted : 0);
    json_uint(j, "slots_handed_over", ra ? ra->swapped : 0);
    json_end_object(j);
}
