/*
 * Reads.
 *
 * A read is cut into pieces, one per cache block it touches, and each
 * piece is classified:
 *
 *   hit      every sector is cached: read it from the cache device (or
 *            from RAM while its segment is still being written)
 *   miss     read it from the origin; if the block is partly cached, also
 *            read the cached sectors and lay them over the origin's (they
 *            may be newer: dirty) -- a "partial" hit
 *
 * Neighbouring pieces of one kind become one I/O: misses are contiguous on
 * the origin; hits are merged when their data is contiguous in one chunk.
 * Every sector read from a cache device is checked against its CRC; a
 * sector that fails is never returned: clean data is read again from the
 * origin (and dropped from the cache), dirty data fails with EIO.
 *
 * After the data is in the client's buffer the request completes, and
 * only then are admitted misses appended to the log (a fill): a miss never
 * waits for a cache write (DESIGN §2).  A fill is dropped if the block
 * changed meanwhile (its generation moved) or no space is free.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cache.h"
#include "io/bufpool.h"
#include "policy/policy.h"
#include "util/crc32c.h"
#include "util/log.h"
#include "util/misc.h"

enum { P_HIT, P_MISS };
enum { RUN_CACHE, RUN_ORIGIN, RUN_ENTRY };

struct rpiece {
    uint64_t oblock;
    uint16_t s0, s1;            /* sectors [s0, s1) of the block */
    uint8_t kind;
    bool admit, overlay, bad, gen_held;
    uint32_t seg;               /* hit: where sector s0 is */
    uint16_t off;
    struct tc_mask valid, dirty;    /* the entry at classification */
    uint32_t eseg;              /* the entry's location (overlay data) */
    uint16_t eoff;
    uint8_t *ebuf;              /* packed valid sectors of a partly cached block */
    uint8_t *buf;               /* where the piece goes in the client's buffer */
    uint64_t gen;
};

struct rreq;

struct rrun {
    struct rreq *r;
    struct tc_dev_io dio;       /* origin reads */
    struct cread cr;            /* cache reads */
    uint8_t kind;
    unsigned first, count;      /* pieces */
};

struct rreq {
    struct ereq *e;
    struct cache *c;
    struct rpiece *p;
    unsigned np;
    unsigned pending;
    int err;
    bool retried;
    bool sequential;
};

static void phase_done(struct rreq *r);

/* ---- piece bookkeeping ---- */

static void classify(struct rreq *r)
{
    struct cache *c = r->c;
    struct ereq *e = r->e;
    uint64_t off = e->off, end = e->off + e->len;
    unsigned i = 0;
    bool free_space = cache_has_free_space(c);
    bool bypass = e->vol->mode == TC_MODE_PASSTHROUGH;
    while (off < end) {
        struct rpiece *p = &r->p[i++];
        memset(p, 0, sizeof *p);
        p->oblock = off / c->block_size;
        uint64_t bstart = p->oblock * c->block_size;
        uint64_t pend = TC_MIN(end, bstart + c->block_size);
        p->s0 = (uint16_t)((off - bstart) / TC_SECTOR);
        p->s1 = (uint16_t)((pend - bstart) / TC_SECTOR);
        p->buf = (uint8_t *)e->buf + (off - e->off);
        struct tc_mask want;
        mask_range(&want, p->s0, p->s1);
        uint32_t id = index_lookup(&c->idx, p->oblock);
        if (id != NIL && bypass && CE(&c->idx, id)->dirty == 0)
            id = NIL;           /* passthrough: clean cached data is not used */
        if (id != NIL) {
            ce_get_masks(&c->idx, id, &p->valid, &p->dirty);
            struct centry *ce = CE(&c->idx, id);
            p->eseg = ce->seg;
            p->eoff = ce->off;
            if (mask_covers(&p->valid, &want)) {
                p->kind = P_HIT;
                p->seg = ce->seg;
                p->off = (uint16_t)(ce->off + mask_rank(&p->valid, p->s0));
                c->policy->ops->hit(c->policy->state, c, id);
                off = pend;
                continue;
            }
            p->overlay = true;
        }
        p->kind = P_MISS;
        if (bypass) {
            /* passthrough: nothing is admitted */
        } else if (r->sequential && !(e->flags & EREQ_FORCE_ADMIT)) {
            c->st.bypassed_sequential += pend - off;
        } else if (e->vol->read_only || owrite_overlaps(c, p->oblock)) {
            /* nothing: a write to the origin is under way here */
        } else if ((p->overlay && !bypass) || (e->flags & EREQ_FORCE_ADMIT) ||
                   c->policy->ops->admit(c->policy->state, c, p->oblock, free_space)) {
            /* A partly cached block always takes the rest: it is in. */
            p->admit = true;
            block_gen_hold(c, p->oblock);
            p->gen_held = true;
            p->gen = block_gen(c, p->oblock);
        } else {
            c->st.not_admitted++;
        }
        off = pend;
    }
    r->np = i;
}

/* ---- issuing I/O ---- */

static struct rrun *run_new(struct rreq *r, uint8_t kind, unsigned first, unsigned count)
{
    struct rrun *run = tc_xcalloc(1, sizeof *run);
    run->r = r;
    run->kind = kind;
    run->first = first;
    run->count = count;
    r->pending++;
    return run;
}

static void run_end(struct rrun *run)
{
    struct rreq *r = run->r;
    free(run);
    if (--r->pending == 0)
        phase_done(r);
}

/* A cache read ended: mark the pieces its failed sectors belong to. */
static void cache_run_done(struct cread *cr, int err)
{
    struct rrun *run = cr->priv;
    struct rreq *r = run->r;
    if (err) {
        if (run->kind == RUN_ENTRY) {
            r->p[run->first].bad = true;
        } else {
            uint32_t pos = 0;
            for (unsigned k = run->first; k < run->first + run->count; k++) {
                struct rpiece *p = &r->p[k];
                uint32_t n = p->s1 - p->s0;
                if (pos < cr->bad_to && cr->bad_from < pos + n)
                    p->bad = true;
                pos += n;
            }
        }
    }
    run_end(run);
}

static void issue_cache_read(struct rrun *run, uint32_t seg, uint16_t off, uint32_t n,
                             uint8_t *dst)
{
    run->cr.seg = seg;
    run->cr.off = off;
    run->cr.n = n;
    run->cr.buf = dst;
    run->cr.cb = cache_run_done;
    run->cr.priv = run;
    cache_read_verified(run->r->c, &run->cr);
}

static void origin_run_done(struct tc_dev_io *dio, int err)
{
    struct rrun *run = dio->priv;
    if (err && run->r->err == 0)
        run->r->err = err;
    run_end(run);
}

static void origin_run(struct rreq *r, unsigned first, unsigned count)
{
    struct cache *c = r->c;
    struct rrun *run = run_new(r, RUN_ORIGIN, first, count);
    struct rpiece *p0 = &r->p[first], *pl = &r->p[first + count - 1];
    uint64_t start = p0->oblock * c->block_size + (uint64_t)p0->s0 * TC_SECTOR;
    uint64_t end = pl->oblock * c->block_size + (uint64_t)pl->s1 * TC_SECTOR;
    run->dio.op = TC_DEV_READ;
    run->dio.buf = p0->buf;
    run->dio.off = start;
    run->dio.len = end - start;
    run->dio.cb = origin_run_done;
    run->dio.priv = run;
    dev_submit(c->vol->origin, &run->dio);
}

static void issue(struct rreq *r)
{
    r->pending = 1;         /* held while issuing */
    unsigned i = 0;
    while (i < r->np) {
        struct rpiece *p = &r->p[i];
        unsigned j = i + 1;
        if (p->kind == P_HIT) {
            uint32_t nsect = p->s1 - p->s0;
            while (j < r->np && r->p[j].kind == P_HIT && r->p[j].seg == p->seg &&
                   r->p[j].off == p->off + nsect) {
                nsect += r->p[j].s1 - r->p[j].s0;
                j++;
            }
            struct rrun *run = run_new(r, RUN_CACHE, i, j - i);
            issue_cache_read(run, p->seg, p->off, nsect, p->buf);
        } else {
            while (j < r->np && r->p[j].kind == P_MISS)
                j++;
            origin_run(r, i, j - i);
            for (unsigned k = i; k < j; k++) {
                struct rpiece *q = &r->p[k];
                if (!q->overlay)
                    continue;
                /* The block's cached sectors: overlay and fill need them. */
                unsigned n = mask_count(&q->valid);
                q->ebuf = bufpool_get((size_t)n * TC_SECTOR);
                struct rrun *run = run_new(r, RUN_ENTRY, k, 1);
                issue_cache_read(run, q->eseg, q->eoff, n, q->ebuf);
            }
        }
        i = j;
    }
    if (--r->pending == 0)
        phase_done(r);
}

/* ---- completion ---- */

/* The merged image of a block after a miss: the sectors read for the
 * piece, and the block's other cached sectors.  Returns the new valid
 * mask; data gets the sectors packed. */
static void merged_block(struct cache *c, struct rpiece *p, const struct tc_mask *valid,
                         struct tc_mask *nvalid, uint8_t *data)
{
    struct tc_mask want;
    mask_range(&want, p->s0, p->s1);
    *nvalid = *valid;
    mask_or(nvalid, &want);
    unsigned k = 0;
    for (unsigned s = 0; s < c->spb; s++) {
        if (!mask_test(nvalid, s))
            continue;
        const uint8_t *src;
        if (s >= p->s0 && s < p->s1)
            src = p->buf + (size_t)(s - p->s0) * TC_SECTOR;
        else
            src = p->ebuf + (size_t)mask_rank(valid, s) * TC_SECTOR;
        memcpy(data + (size_t)k * TC_SECTOR, src, TC_SECTOR);
        k++;
    }
}

static void fill(struct rreq *r, struct rpiece *p)
{
    struct cache *c = r->c;
    if (!p->admit || p->bad)
        return;
    if (block_gen(c, p->oblock) != p->gen || block_is_locked(c, p->oblock)) {
        c->st.fills_dropped++;
        return;
    }
    /* The entry must still be the one whose sectors we hold. */
    struct tc_mask cur_valid, cur_dirty;
    uint32_t id = index_lookup(&c->idx, p->oblock);
    if (id != NIL) {
        ce_get_masks(&c->idx, id, &cur_valid, &cur_dirty);
        if (!p->overlay || !mask_equal(&cur_valid, &p->valid)) {
            c->st.fills_dropped++;
            return;
        }
    } else if (p->overlay) {
        c->st.fills_dropped++;
        return;
    } else {
        mask_clear(&cur_valid);
        mask_clear(&cur_dirty);
    }
    struct tc_mask nvalid;
    uint8_t *data = bufpool_get(c->block_size);
    merged_block(c, p, &cur_valid, &nvalid, data);
    struct append a = {
        .oblock = p->oblock,
        .type = TC_ENTRY_DATA,
        .valid = nvalid,
        .dirty = cur_dirty,
        .data = data,
        .mirror = !mask_empty(&cur_dirty) && c->vol->cfg.dirty_copies > 1,
    };
    uint32_t seg, mseg;
    uint16_t off, moff;
    if (log_append(c, &a, &seg, &off, &mseg, &moff, NULL) == 0) {
        cache_install(c, p->oblock, &nvalid, &cur_dirty, seg, off, a.mirror ? mseg : NIL,
                      a.mirror ? moff : 0, 0);
        unsigned added = mask_count(&nvalid) - mask_count(&cur_valid);
        c->st.promotions++;
        c->st.promotion_bytes += (uint64_t)added * TC_SECTOR;
        c->st.admitted_bytes += (uint64_t)added * TC_SECTOR;
    } else {
        c->st.fills_dropped++;
    }
    bufpool_put(data, c->block_size);
}

static void finish(struct rreq *r)
{
    struct cache *c = r->c;
    struct ereq *e = r->e;
    unsigned hits = 0;
    uint64_t hit_bytes = 0;
    for (unsigned i = 0; i < r->np; i++) {
        struct rpiece *p = &r->p[i];
        uint64_t bytes = (uint64_t)(p->s1 - p->s0) * TC_SECTOR;
        if (p->kind == P_HIT) {
            hits++;
            hit_bytes += bytes;
        }
        if (p->overlay && p->ebuf && !p->bad && r->err == 0) {
            for (unsigned s = p->s0; s < p->s1; s++)
                if (mask_test(&p->valid, s))
                    memcpy(p->buf + (size_t)(s - p->s0) * TC_SECTOR,
                           p->ebuf + (size_t)mask_rank(&p->valid, s) * TC_SECTOR, TC_SECTOR);
        }
    }
    if (r->err == 0)
        for (unsigned i = 0; i < r->np; i++)
            fill(r, &r->p[i]);
    for (unsigned i = 0; i < r->np; i++) {
        struct rpiece *p = &r->p[i];
        if (p->ebuf)
            bufpool_put(p->ebuf, (size_t)mask_count(&p->valid) * TC_SECTOR);
        if (p->gen_held)
            block_gen_release(c, p->oblock);
    }
    if (hits == r->np) {
        c->st.read_hits++;
    } else {
        c->st.read_misses++;
        if (hits)
            c->st.read_partial++;
    }
    c->st.read_hit_bytes += hit_bytes;
    c->st.read_miss_bytes += e->len - hit_bytes;
    e->err = r->err;
    free(r->p);
    free(r);
    e->complete(e);
}

/* Decide for a piece whose cached copy failed.  Dirty sectors it needs
 * are lost: EIO.  Otherwise the origin has the data: a hit is read again
 * from the origin (returns true), a miss already has it.  A block with no
 * dirty data at all is dropped from the cache. */
static bool salvage(struct rreq *r, struct rpiece *p)
{
    struct cache *c = r->c;
    struct tc_mask range, needed = p->dirty;
    mask_range(&range, p->s0, p->s1);
    mask_and(&needed, &range);
    p->bad = false;
    p->admit = false;
    if (!mask_empty(&needed)) {
        uint64_t off = p->oblock * c->block_size;
        tc_error("cache: dirty data of origin bytes %llu..%llu is unreadable; the read fails "
                 "with EIO", (unsigned long long)(off + (uint64_t)p->s0 * TC_SECTOR),
                 (unsigned long long)(off + (uint64_t)p->s1 * TC_SECTOR - 1));
        c->st.lost_dirty_bytes += (uint64_t)mask_count(&needed) * TC_SECTOR;
        if (r->err == 0)
            r->err = -EIO;
        return false;
    }
    uint32_t id = index_lookup(&c->idx, p->oblock);
    if (mask_empty(&p->dirty) && id != NIL && CE(&c->idx, id)->seg == p->eseg &&
        CE(&c->idx, id)->off == p->eoff && !block_is_locked(c, p->oblock)) {
        cache_drop(c, p->oblock);
        block_gen_bump(c, p->oblock);
        c->st.invalidations++;
    }
    if (p->kind == P_MISS) {
        p->overlay = false;     /* the origin's data in the buffer stands */
        return false;
    }
    p->kind = P_MISS;
    return true;
}

static void reread_done(struct tc_dev_io *dio, int err)
{
    struct rrun *run = dio->priv;
    struct rreq *r = run->r;
    if (err && r->err == 0)
        r->err = err;
    free(run);
    if (--r->pending == 0)
        finish(r);
}

static void phase_done(struct rreq *r)
{
    if (r->retried) {
        finish(r);
        return;
    }
    r->retried = true;
    r->pending = 1;
    for (unsigned i = 0; i < r->np; i++) {
        struct rpiece *p = &r->p[i];
        if (!p->bad || !salvage(r, p))
            continue;
        struct rrun *run = tc_xcalloc(1, sizeof *run);
        run->r = r;
        run->dio.op = TC_DEV_READ;
        run->dio.buf = p->buf;
        run->dio.off = p->oblock * r->c->block_size + (uint64_t)p->s0 * TC_SECTOR;
        run->dio.len = (uint64_t)(p->s1 - p->s0) * TC_SECTOR;
        run->dio.cb = reread_done;
        run->dio.priv = run;
        r->pending++;
        dev_submit(r->c->vol->origin, &run->dio);
    }
    if (--r->pending == 0)
        finish(r);
}

void cache_read(struct ereq *e)
{
    struct cache *c = e->vol->cache;
    struct rreq *r = tc_xcalloc(1, sizeof *r);
    r->e = e;
    r->c = c;
    uint64_t first = e->off / c->block_size, last = (e->off + e->len - 1) / c->block_size;
    r->p = tc_xmalloc((size_t)(last - first + 1) * sizeof *r->p);
    r->sequential = streams_sequential(c, e->off, e->len, false);
    writeback_note_client_io(c);
    classify(r);
    issue(r);
}
