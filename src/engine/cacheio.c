/*
 * Reading cached data, checked.
 *
 * Every path that reads a cache device (client reads, the old sectors of a
 * write being merged, writeback, the cleaner) reads through here: from the
 * segment's RAM image while it is still being written, otherwise from the
 * device, pinned, with every sector checked against the CRC its chunk
 * header holds.  When the CRCs are not in RAM, the chunk header is read
 * alongside the data.  Data-free (replay): the same reads, but no data
 * copied or checked, and no CRCs looked up or header read for them (its
 * headers are in RAM, with CRCs of zeroes: engine/log.h, struct
 * ram_chunk).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cache.h"
#include "engine/cacheio.h"
#include "engine/failure.h"
#include "engine/verify.h"
#include "util/assert.h"
#include "util/crc32c.h"
#include "util/join.h"
#include "util/log.h"
#include "util/misc.h"

static void finished(struct cread *cr)
{
    struct cache *c = cr->c;
    if (cr->from_device) {
        if (cr->join.err == 0 && cr->crcs == NULL && !c->lg.headers_in_ram)
            cr->join.err = -EBADMSG;
        if (cr->join.err == 0 && !c->data_free) {
            _Static_assert(TC_SECTOR == 4096, "tc_crc32c_check_sectors() checks 4 KiB sectors");
            if (tc_crc32c_check_sectors(cr->buf, cr->n, cr->crcs, &cr->bad_from, &cr->bad_to)) {
                c->st.checksum_errors++;
                cr->join.err = -EBADMSG;
                uint64_t at = seg_dev_offset(c, cr->seg) +
                              (uint64_t)(cr->off + cr->bad_from) * TC_SECTOR;
                tc_error("%s: checksum mismatch at bytes %llu..%llu (segment %u, sectors "
                         "%u..%u): cached data not used", seg_cdev(c, cr->seg)->dev->name,
                         (unsigned long long)at,
                         (unsigned long long)(at + (uint64_t)(cr->bad_to - cr->bad_from) *
                                                   TC_SECTOR - 1),
                         cr->seg, cr->off + cr->bad_from, cr->off + cr->bad_to - 1);
                cache_device_check_size(c, c->sp.segs[cr->seg].dev);
            }
        } else if (cr->join.err != 0 && cr->join.err != -EBADMSG) {
            /* (A data-free volume reads no payload, so has nothing to check.) */
            c->st.cache_read_errors++;
            cache_device_error(c, c->sp.segs[cr->seg].dev, cr->join.err, false);
        }
        if (cr->join.err) {
            if (cr->bad_from == UINT32_MAX) {
                cr->bad_from = 0;
                cr->bad_to = cr->n;
            }
        }
        seg_unpin(&c->sp, cr->seg);
        free(cr->hdr);
        free(cr->crcs);
        cr->hdr = NULL;
        cr->crcs = NULL;
    }
    cr->cb(cr, cr->join.err);
}

static void data_done(struct tc_dev_io *dio, int err)
{
    struct cread *cr = dio->priv;
    if (join_put(&cr->join, err))
        finished(cr);
}

static void hdr_done(struct tc_dev_io *dio, int err)
{
    struct cread *cr = dio->priv;
    struct cache *c = cr->c;
    bool ok = false;
    if (err == 0) {
        struct tc_chunk_header h;
        char why[128];
        if (chunk_decode(cr->hdr, dio->len, c->set_uuid, c->spb, c->seg_sectors, &h, why,
                         sizeof why) == 0 &&
            h.segment == cr->seg) {
            verify_remember(c->verify, cr->seg, h.chunk_sector, &h, cr->hdr);
            ok = verify_lookup(c->verify, cr->seg, cr->off, cr->n, cr->crcs);
        } else {
            tc_error("%s: chunk header at byte %llu (segment %u) unusable: %s",
                     seg_cdev(c, cr->seg)->dev->name, (unsigned long long)dio->off, cr->seg,
                     why);
        }
    }
    if (!ok) {
        free(cr->crcs);
        cr->crcs = NULL;
    }
    /* A header that could not be read is an I/O error, not damage: the
     * data are unchecked (-EBADMSG) only when the header read fine and is
     * unusable.  Callers tell the two apart -- the cleaner drops dirty data
     * as lost only on proven damage (cleaner.c, later_read()). */
    if (join_put(&cr->join, err))
        finished(cr);
}

/* The CRCs of cr's sectors into cr->crcs, from the verify cache, or read
 * with their chunk's header (a second read joined to cr's). */
static void get_crcs(struct cache *c, struct cread *cr)
{
    cr->crcs = tc_xmalloc((size_t)cr->n * 4);
    if (verify_lookup(c->verify, cr->seg, cr->off, cr->n, cr->crcs))
        return;
    const struct chunk_ref *ref = segment_chunk_of(&c->sp, cr->seg, cr->off);
    if (ref == NULL) {
        tc_error("%s: no chunk holds sectors %u..%u of segment %u (from byte %llu)",
                 seg_cdev(c, cr->seg)->dev->name, cr->off, cr->off + cr->n - 1, cr->seg,
                 (unsigned long long)(seg_dev_offset(c, cr->seg) +
                                      (uint64_t)cr->off * TC_SECTOR));
        free(cr->crcs);
        cr->crcs = NULL;
    } else {
        cr->hdr = tc_alloc_aligned((size_t)ref->hdr_sectors * TC_SECTOR);
        memset(&cr->hdio, 0, sizeof cr->hdio);
        cr->hdio.op = TC_DEV_READ;
        cr->hdio.buf = cr->hdr;
        cr->hdio.off = seg_dev_offset(c, cr->seg) + (uint64_t)ref->start * TC_SECTOR;
        cr->hdio.len = (uint64_t)ref->hdr_sectors * TC_SECTOR;
        cr->hdio.cb = hdr_done;
        cr->hdio.priv = cr;
        join_get(&cr->join);
        dev_submit(seg_cdev(c, cr->seg)->dev, &cr->hdio);
    }
}

void cache_read_verified(struct cache *c, struct cread *cr)
{
    TC_ASSERT_ALWAYS(cr->seg < c->sp.nsegs && cr->n > 0 && cr->off + cr->n <= c->seg_sectors);
    cr->c = c;
    cr->join = (struct tc_join){ 0 };
    cr->bad_from = UINT32_MAX;
    cr->bad_to = 0;
    cr->from_device = false;
    cr->hdr = NULL;
    cr->crcs = NULL;
    if (c->data_free ? log_has_image(&c->lg, cr->seg)
                     : log_read_image(&c->lg, cr->seg, cr->off, cr->n, cr->buf)) {
        cr->cb(cr, 0);
        return;
    }
    cr->from_device = true;
    seg_pin(&c->sp, cr->seg);
    join_get(&cr->join);        /* the data read's */
    /* A data-free volume checks nothing, and keeps its headers in RAM. */
    if (!c->lg.headers_in_ram)
        get_crcs(c, cr);
    memset(&cr->dio, 0, sizeof cr->dio);
    cr->dio.op = TC_DEV_READ;
    cr->dio.buf = cr->buf;
    cr->dio.off = seg_dev_offset(c, cr->seg) + (uint64_t)cr->off * TC_SECTOR;
    cr->dio.len = (uint64_t)cr->n * TC_SECTOR;
    cr->dio.cb = data_done;
    cr->dio.priv = cr;
    if (c->data_free)
        cr->dio.flags = TC_DEV_PAYLOAD;     /* all of it */
    dev_submit(seg_cdev(c, cr->seg)->dev, &cr->dio);
}

/* ---- gathering the sectors of one block from its fragments ---- */

struct gather {
    struct cache *c;
    void (*cb)(void *arg, int err);
    void *arg;
    struct tc_join join;
    unsigned nreads;
    struct cread reads[];       /* one per run of sectors adjacent on a device */
};

static void gather_read(struct cread *cr, int err)
{
    struct gather *g = cr->priv;
    /* An I/O error outweighs a checksum mismatch of another run: the
     * caller learns that some sectors were not read at all, not that the
     * block is proven damaged (-EBADMSG: every run that failed read and
     * did not match). */
    if (err && err != -EBADMSG && g->join.err == -EBADMSG)
        g->join.err = err;
    if (!join_put(&g->join, err))
        return;
    void (*cb)(void *, int) = g->cb;
    void *arg = g->arg;
    int e = g->join.err;
    free(g);
    cb(arg, e);
}

static void gather_from(struct cache *c, uint32_t id, const struct tc_mask *want, uint8_t *dst,
                        bool mirrors, void (*cb)(void *arg, int err), void *arg);

void cache_gather(struct cache *c, uint32_t id, const struct tc_mask *want, uint8_t *dst,
                  void (*cb)(void *arg, int err), void *arg)
{
    gather_from(c, id, want, dst, false, cb, arg);
}

void cache_gather_mirrors(struct cache *c, uint32_t id, const struct tc_mask *want,
                          uint8_t *dst, void (*cb)(void *arg, int err), void *arg)
{
    gather_from(c, id, want, dst, true, cb, arg);
}

struct gather_wait {
    bool done;
    int err;
};

static void gather_waited(void *arg, int err)
{
    struct gather_wait *g = arg;
    g->done = true;
    g->err = err;
}

static int gather_one_wait(struct cache *c, uint32_t id, const struct tc_mask *want,
                           uint8_t *dst)
{
    struct gather_wait g = { 0 };
    cache_gather(c, id, want, dst, gather_waited, &g);
    while (!g.done)
        reactor_poll(c->reactor, 100000000ull);
    return g.err;
}

int cache_gather_wait(struct cache *c, uint32_t id, const struct tc_mask *want, uint8_t *dst,
                      struct tc_mask *good)
{
    *good = *want;
    if (gather_one_wait(c, id, want, dst) == 0)
        return 0;
    mask_clear(good);
    for (unsigned s = 0; s < c->spb; s++) {
        if (!mask_test(want, s))
            continue;
        struct tc_mask one;
        mask_clear(&one);
        mask_set(&one, s);
        if (gather_one_wait(c, id, &one, dst) == 0)
            mask_set(good, s);
    }
    /* The good sectors read together, so dst holds them all. */
    if (!mask_empty(good) && gather_one_wait(c, id, good, dst) != 0) {
        mask_clear(good);
        return -EAGAIN;
    }
    return 1;
}

static void gather_from(struct cache *c, uint32_t id, const struct tc_mask *want, uint8_t *dst,
                        bool mirrors, void (*cb)(void *arg, int err), void *arg)
{
    /* The runs first, so that the gather is allocated at its size: a
     * read of a whole block is usually one run, and every cread is a few
     * hundred bytes. */
    struct run {
        uint32_t seg;
        uint16_t off;
        uint16_t n;
        unsigned sector;
    } runs[TC_MAX_BLOCK_SIZE / TC_SECTOR];
    unsigned nruns = 0;
    bool missing = false;
    struct run *cur = NULL;
    for (unsigned s = 0; s < c->spb; s++) {
        if (!mask_test(want, s))
            continue;
        uint32_t fid = ce_locate(&c->map.idx, id, s);
        if (fid == NIL) {
            missing = true;
            cur = NULL;
            continue;
        }
        struct cfrag f = frag_view(&c->map.idx, fid);
        struct tc_mask st;
        frag_stored(&c->map.idx, fid, &st);
        uint32_t fseg = f.seg;
        uint16_t foff = f.off;
        if (mirrors && f.mseg != NIL) {
            fseg = f.mseg;
            foff = f.moff;
        }
        /* No mirror: the copy as indexed now -- a device that failed since
         * the last try has handed its fragments' mirrors over as copies. */
        uint16_t off = (uint16_t)(foff + mask_rank(&st, s));
        if (cur && cur->seg == fseg && cur->off + cur->n == off && cur->sector + cur->n == s) {
            cur->n++;
            continue;
        }
        cur = &runs[nruns++];
        *cur = (struct run){ .seg = fseg, .off = off, .n = 1, .sector = s };
    }
    struct gather *g = tc_xcalloc(1, sizeof *g + nruns * sizeof g->reads[0]);
    g->c = c;
    g->cb = cb;
    g->arg = arg;
    g->nreads = nruns;
    join_get(&g->join);         /* held while issuing */
    if (missing)
        join_error(&g->join, -ENODATA);
    for (unsigned i = 0; i < nruns; i++) {
        struct cread *cr = &g->reads[i];
        cr->seg = runs[i].seg;
        cr->off = runs[i].off;
        cr->n = runs[i].n;
        cr->buf = dst + (size_t)runs[i].sector * TC_SECTOR;
        cr->cb = gather_read;
        cr->priv = g;
    }
    unsigned n = g->nreads;
    join_get_n(&g->join, n);
    for (unsigned i = 0; i < n; i++)
        cache_read_verified(c, &g->reads[i]);
    gather_read(&(struct cread){ .priv = g }, 0);
}

/* ---- gathering that survives a failing device ---- */

struct robust {
    struct cache *c;
    uint64_t oblock;
    struct tc_mask want;
    uint8_t *dst;
    int stage;          /* 0: as indexed, 1: again (data may have moved), 2: mirrors (or
                         * the copy as indexed then, where there is none) */
    void (*cb)(void *arg, int err);
    void *arg;
};

static void robust_step(void *arg, int err)
{
    struct robust *x = arg;
    struct cache *c = x->c;
    uint32_t id = index_lookup(&c->map.idx, x->oblock);
    if (err == 0 || x->stage == 2 || id == NIL) {
        void (*cb)(void *, int) = x->cb;
        void *a = x->arg;
        free(x);
        cb(a, err ? err : (id == NIL ? -ENODATA : 0));
        return;
    }
    x->stage++;
    /* A failed read may have failed the device, whose data then moved to
     * its mirrors: look again, then try the mirrors themselves. */
    if (x->stage == 1)
        gather_from(c, id, &x->want, x->dst, false, robust_step, x);
    else
        gather_from(c, id, &x->want, x->dst, true, robust_step, x);
}

void cache_gather_robust(struct cache *c, uint64_t oblock, const struct tc_mask *want,
                         uint8_t *dst, void (*cb)(void *arg, int err), void *arg)
{
    struct robust *x = tc_xcalloc(1, sizeof *x);
    x->c = c;
    x->oblock = oblock;
    x->want = *want;
    x->dst = dst;
    x->cb = cb;
    x->arg = arg;
    uint32_t id = index_lookup(&c->map.idx, oblock);
    if (id == NIL) {
        x->stage = 2;
        robust_step(x, -ENODATA);
        return;
    }
    gather_from(c, id, want, dst, false, robust_step, x);
}
