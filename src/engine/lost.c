/*
 * The set of sectors lost with a failed cache device (lost.h); the
 * cache's side of it is in lostlog.c.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/lost.h"
#include "util/misc.h"

struct lost_entry {
    uint64_t oblock;
    struct tc_mask mask;            /* lost now: reads fail with EIO */
    /* Written again, but not yet known durable (see abandon.c): still
     * lost in every record that outlives a crash (LOST records, the state
     * file) until a flush of the origin and a sync of the log issued
     * after the write completes.  `unsettled`: cleared since the last
     * such flush began; `settling`: cleared before the one in flight. */
    struct tc_mask unsettled, settling;
    struct lost_proof *proof;       /* NULL, or one per sector of the block */
    unsigned proof_n;               /* its length (the block's sectors) */
    struct lost_entry *next;
};

static void drop_proof(struct lost *l, struct lost_entry *e)
{
    if (e->proof == NULL)
        return;
    free(e->proof);
    e->proof = NULL;
    e->proof_n = 0;
    l->proof_blocks--;
}

#define LOST_BUCKETS 1024u

static unsigned bucket(uint64_t oblock) { return (unsigned)(oblock % LOST_BUCKETS); }

void lost_free(struct lost *l)
{
    if (l->b == NULL)
        return;
    for (unsigned i = 0; i < LOST_BUCKETS; i++)
        while (l->b[i]) {
            struct lost_entry *e = l->b[i];
            l->b[i] = e->next;
            free(e->proof);
            free(e);
        }
    free(l->b);
    memset(l, 0, sizeof *l);
}

static struct lost_entry *find(const struct lost *l, uint64_t oblock)
{
    if (l->b == NULL)
        return NULL;
    for (struct lost_entry *e = l->b[bucket(oblock)]; e; e = e->next)
        if (e->oblock == oblock)
            return e;
    return NULL;
}

/* What the durable records must say of the entry: lost, or cleared by a
 * write not yet known durable. */
static void persisted(const struct lost_entry *e, struct tc_mask *m)
{
    *m = e->mask;
    mask_or(m, &e->unsettled);
    mask_or(m, &e->settling);
}

bool lost_find(const struct lost *l, uint64_t oblock, struct tc_mask *mask)
{
    struct lost_entry *e = find(l, oblock);
    if (e == NULL || mask_empty(&e->mask))
        return false;
    if (mask)
        *mask = e->mask;
    return true;
}

bool lost_get_persisted(const struct lost *l, uint64_t oblock, struct tc_mask *mask)
{
    struct lost_entry *e = find(l, oblock);
    if (e == NULL)
        return false;
    persisted(e, mask);
    return !mask_empty(mask);
}

/* Drop the entry once nothing of it is left. */
static void maybe_free(struct lost *l, uint64_t oblock)
{
    struct lost_entry **pp = &l->b[bucket(oblock)];
    while (*pp && (*pp)->oblock != oblock)
        pp = &(*pp)->next;
    struct lost_entry *e = *pp;
    if (e == NULL || !mask_empty(&e->mask) || !mask_empty(&e->unsettled) ||
        !mask_empty(&e->settling))
        return;
    *pp = e->next;
    drop_proof(l, e);
    free(e);
    l->blocks--;
}

static struct lost_entry *get_entry(struct lost *l, uint64_t oblock)
{
    struct lost_entry *e = find(l, oblock);
    if (e)
        return e;
    if (l->b == NULL)
        l->b = tc_xcalloc(LOST_BUCKETS, sizeof *l->b);
    e = tc_xcalloc(1, sizeof *e);
    e->oblock = oblock;
    e->next = l->b[bucket(oblock)];
    l->b[bucket(oblock)] = e;
    l->blocks++;
    return e;
}

void lost_set(struct lost *l, uint64_t oblock, const struct tc_mask *mask)
{
    if (mask_empty(mask) && find(l, oblock) == NULL)
        return;
    struct lost_entry *e = get_entry(l, oblock);
    l->sectors -= mask_count(&e->mask);
    if (e->proof) {
        /* A sector added or removed loses its proof: only the sectors
         * that stay lost keep theirs, and those outside both masks that
         * the durable records still call lost (a drain's write-back not
         * settled yet: lost_clear_drained()). */
        struct tc_mask keep = e->mask;
        mask_and(&keep, mask);
        struct tc_mask rec = e->unsettled;
        mask_or(&rec, &e->settling);
        mask_andnot(&rec, &e->mask);
        mask_andnot(&rec, mask);
        mask_or(&keep, &rec);
        bool any = false;
        for (unsigned s = 0; s < e->proof_n; s++) {
            if (!mask_test(&keep, s))
                e->proof[s].where = 0;
            any |= e->proof[s].where != 0;
        }
        if (!any)
            drop_proof(l, e);
    }
    e->mask = *mask;
    l->sectors += mask_count(mask);
    maybe_free(l, oblock);
}

/* The proofs of the sectors of m dropped (e keeps its sectors). */
static void drop_proofs_of(struct lost *l, struct lost_entry *e, const struct tc_mask *m)
{
    if (e->proof == NULL)
        return;
    bool any = false;
    for (unsigned s = 0; s < e->proof_n; s++) {
        if (mask_test(m, s))
            e->proof[s].where = 0;
        any |= e->proof[s].where != 0;
    }
    if (!any)
        drop_proof(l, e);
}

static bool clear(struct lost *l, uint64_t oblock, const struct tc_mask *written, bool drained)
{
    struct lost_entry *e = find(l, oblock);
    if (e == NULL)
        return false;
    /* A write's data is not the version a proof names: a proof kept for
     * a drained sector not settled yet goes too. */
    if (!drained)
        drop_proofs_of(l, e, written);
    struct tc_mask cleared = e->mask;
    mask_and(&cleared, written);
    if (mask_empty(&cleared))
        return false;
    struct tc_mask left = e->mask;
    mask_andnot(&left, written);
    if (mask_empty(&e->unsettled))
        l->unsettled_blocks++;
    /* The drained sectors' proofs, kept across lost_set() (which drops
     * those of the sectors it removes from the mask). */
    struct lost_proof *keep = NULL;
    if (drained && e->proof) {
        keep = tc_xcalloc(e->proof_n, sizeof *keep);
        memcpy(keep, e->proof, e->proof_n * sizeof *keep);
    }
    unsigned keep_n = e->proof_n;
    mask_or(&e->unsettled, &cleared);
    lost_set(l, oblock, &left);
    if (keep) {
        /* e stays: its cleared sectors are unsettled. */
        for (unsigned s = 0; s < keep_n; s++) {
            if (!mask_test(&cleared, s) || keep[s].where == 0)
                continue;
            if (e->proof == NULL) {
                e->proof = tc_xcalloc(keep_n, sizeof *e->proof);
                e->proof_n = keep_n;
                l->proof_blocks++;
            }
            e->proof[s] = keep[s];
        }
        free(keep);
    }
    return true;
}

bool lost_clear(struct lost *l, uint64_t oblock, const struct tc_mask *written)
{
    return clear(l, oblock, written, false);
}

bool lost_clear_drained(struct lost *l, uint64_t oblock, const struct tc_mask *written)
{
    return clear(l, oblock, written, true);
}

void lost_set_proof(struct lost *l, uint64_t oblock, unsigned spb, unsigned s,
                    const struct lost_proof *p)
{
    struct lost_entry *e = find(l, oblock);
    if (e == NULL || s >= spb || !mask_test(&e->mask, s) || p->where == 0)
        return;
    if (e->proof == NULL) {
        e->proof = tc_xcalloc(spb, sizeof *e->proof);
        e->proof_n = spb;
        l->proof_blocks++;
    }
    if (s < e->proof_n)
        e->proof[s] = *p;
}

bool lost_get_proof(const struct lost *l, uint64_t oblock, unsigned s, struct lost_proof *p)
{
    if (l->proof_blocks == 0)
        return false;
    struct lost_entry *e = find(l, oblock);
    if (e == NULL || e->proof == NULL || s >= e->proof_n || e->proof[s].where == 0 ||
        !mask_test(&e->mask, s))
        return false;
    *p = e->proof[s];
    return true;
}

bool lost_get_proof_persisted(const struct lost *l, uint64_t oblock, unsigned s,
                              struct lost_proof *p)
{
    if (l->proof_blocks == 0)
        return false;
    struct lost_entry *e = find(l, oblock);
    if (e == NULL || e->proof == NULL || s >= e->proof_n || e->proof[s].where == 0)
        return false;
    struct tc_mask m;
    persisted(e, &m);
    if (!mask_test(&m, s))
        return false;
    *p = e->proof[s];
    return true;
}

void lost_drop_proofs(struct lost *l)
{
    if (l->b == NULL)
        return;
    for (unsigned i = 0; i < LOST_BUCKETS && l->proof_blocks; i++)
        for (struct lost_entry *e = l->b[i]; e; e = e->next)
            drop_proof(l, e);
}

void lost_drop_proofs_range(struct lost *l, uint32_t block_size, uint64_t off, uint64_t len)
{
    if (l->proof_blocks == 0 || len == 0)
        return;
    uint64_t end = off + len;
    uint32_t spb = block_size / TC_SECTOR;
    for (unsigned i = 0; i < LOST_BUCKETS && l->proof_blocks; i++)
        for (struct lost_entry *e = l->b[i]; e; e = e->next) {
            uint64_t base = e->oblock * block_size;
            if (e->proof == NULL || base >= end || base + block_size <= off)
                continue;
            bool any = false;
            for (unsigned s = 0; s < e->proof_n && s < spb; s++) {
                uint64_t so = base + (uint64_t)s * TC_SECTOR;
                if (so < end && so + TC_SECTOR > off)
                    e->proof[s].where = 0;
                any |= e->proof[s].where != 0;
            }
            if (!any)
                drop_proof(l, e);
        }
}

bool lost_unsettled(const struct lost *l)
{
    return l->unsettled_blocks > 0;
}

void lost_settle_begin(struct lost *l)
{
    if (l->b == NULL)
        return;
    for (unsigned i = 0; i < LOST_BUCKETS; i++)
        for (struct lost_entry *e = l->b[i]; e; e = e->next) {
            mask_or(&e->settling, &e->unsettled);
            mask_clear(&e->unsettled);
        }
    l->unsettled_blocks = 0;
}

void lost_settle_end(struct lost *l, bool ok,
                     void (*fn)(void *arg, uint64_t oblock, const struct tc_mask *m), void *arg)
{
    if (l->b == NULL)
        return;
    uint64_t n = 0;
    for (unsigned i = 0; i < LOST_BUCKETS; i++)
        for (struct lost_entry *e = l->b[i]; e; e = e->next)
            if (!mask_empty(&e->settling))
                n++;
    uint64_t *done = tc_xmalloc((n ? n : 1) * sizeof *done);
    n = 0;
    for (unsigned i = 0; i < LOST_BUCKETS; i++)
        for (struct lost_entry *e = l->b[i]; e; e = e->next) {
            if (mask_empty(&e->settling))
                continue;
            if (!ok) {
                if (mask_empty(&e->unsettled))
                    l->unsettled_blocks++;
                mask_or(&e->unsettled, &e->settling);
            }
            mask_clear(&e->settling);
            done[n++] = e->oblock;
        }
    for (uint64_t i = 0; ok && i < n; i++) {
        struct tc_mask m;
        if (!lost_get_persisted(l, done[i], &m))
            mask_clear(&m);
        fn(arg, done[i], &m);
        maybe_free(l, done[i]);
    }
    free(done);
}

uint64_t lost_sectors(const struct lost *l)
{
    return l->sectors;
}

void lost_foreach(const struct lost *l,
                  void (*fn)(void *arg, uint64_t oblock, const struct tc_mask *m), void *arg)
{
    if (l->b == NULL)
        return;
    for (unsigned i = 0; i < LOST_BUCKETS; i++)
        for (struct lost_entry *e = l->b[i]; e; e = e->next) {
            struct tc_mask m;
            persisted(e, &m);
            fn(arg, e->oblock, &m);
        }
}

/* The sectors of block b inside [off, end). */
static void block_want(uint32_t block_size, uint64_t b, uint64_t off, uint64_t end,
                       struct tc_mask *want)
{
    uint64_t bs = b * block_size;
    uint64_t s0 = off > bs ? (off - bs) / TC_SECTOR : 0;
    uint64_t s1 = TC_MIN(end - bs, (uint64_t)block_size) / TC_SECTOR;
    mask_range(want, (unsigned)s0, (unsigned)s1);
}

bool lost_clear_range(struct lost *l, uint32_t block_size, uint64_t off, uint64_t len)
{
    if (l->blocks == 0)
        return false;
    bool any = false;
    uint64_t end = off + len;
    uint64_t b0 = off / block_size, b1 = (end + block_size - 1) / block_size;
    if (b1 - b0 > l->blocks * 4) {
        /* A big range: walk the (small) set instead of the range. */
        uint64_t *hit = tc_xmalloc(l->blocks * sizeof *hit);
        size_t n = 0;
        for (unsigned i = 0; i < LOST_BUCKETS; i++)
            for (struct lost_entry *e = l->b[i]; e; e = e->next)
                if (e->oblock >= b0 && e->oblock < b1)
                    hit[n++] = e->oblock;
        for (size_t i = 0; i < n; i++) {
            struct tc_mask m;
            block_want(block_size, hit[i], off, end, &m);
            any |= lost_clear(l, hit[i], &m);
        }
        free(hit);
        return any;
    }
    for (uint64_t b = b0; b < b1; b++) {
        struct tc_mask m;
        block_want(block_size, b, off, end, &m);
        any |= lost_clear(l, b, &m);
    }
    return any;
}

bool lost_scan(const struct lost *l, uint32_t block_size, uint64_t off, uint64_t len)
{
    if (l->blocks == 0 || len == 0)
        return false;
    uint64_t end = off + len;
    uint64_t b0 = off / block_size, b1 = (end + block_size - 1) / block_size;
    struct tc_mask want;
    if (b1 - b0 > l->blocks * 4) {
        /* A big range: walk the (small) set instead of the range. */
        for (unsigned i = 0; i < LOST_BUCKETS; i++)
            for (struct lost_entry *e = l->b[i]; e; e = e->next) {
                if (e->oblock < b0 || e->oblock >= b1)
                    continue;
                block_want(block_size, e->oblock, off, end, &want);
                mask_and(&want, &e->mask);
                if (!mask_empty(&want))
                    return true;
            }
        return false;
    }
    for (uint64_t b = b0; b < b1; b++) {
        struct tc_mask m;
        if (!lost_get(l, b, &m))
            continue;
        block_want(block_size, b, off, end, &want);
        mask_and(&m, &want);
        if (!mask_empty(&m))
            return true;
    }
    return false;
}
