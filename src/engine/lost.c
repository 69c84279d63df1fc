/*
 * Sectors whose dirty data was lost (a cache device failed and no other
 * copy existed).  Reads of them fail with EIO -- the origin's older data is
 * never returned in their place -- until a client writes them again.
 *
 * The set is small (it exists only after a failure), kept in a hash table
 * here and in the log as LOST records ("block B's lost sectors are now M"),
 * which recovery applies in sequence order and the cleaner carries forward
 * while they still matter.  When no device is left to hold the log (the
 * cache abandoned), the state file holds the set instead (abandon.c).
 *
 * Every path checks it: the cache's read path, and lost_passthrough() for
 * the requests that reach the origin directly once the cache has failed
 * or is detached -- there a read of a lost sector fails with EIO exactly
 * as it would through the cache, and a write clears what it covers.
 * A clear reaches the durable records (LOST records, the state file) only
 * once the clearing write is durable: see abandon.c for the order.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/blocklock.h"
#include "engine/cache.h"
#include "util/log.h"
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
    struct lost_entry *next;
};

#define LOST_BUCKETS 1024u

struct lost {
    struct lost_entry *b[LOST_BUCKETS];
    uint64_t blocks, sectors;       /* entries (any mask), sectors of `mask` */
    uint64_t unsettled_blocks;      /* entries with unsettled sectors */
};

static unsigned bucket(uint64_t oblock) { return (unsigned)(oblock % LOST_BUCKETS); }

static struct lost *L(struct cache *c)
{
    if (c->lost == NULL)
        c->lost = tc_xcalloc(1, sizeof *c->lost);
    return c->lost;
}

void lost_fini(struct cache *c)
{
    if (c->lost == NULL)
        return;
    for (unsigned i = 0; i < LOST_BUCKETS; i++)
        while (c->lost->b[i]) {
            struct lost_entry *e = c->lost->b[i];
            c->lost->b[i] = e->next;
            free(e);
        }
    free(c->lost);
    c->lost = NULL;
}

static struct lost_entry *find(struct cache *c, uint64_t oblock)
{
    if (c->lost == NULL)
        return NULL;
    for (struct lost_entry *e = c->lost->b[bucket(oblock)]; e; e = e->next)
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

bool lost_get(struct cache *c, uint64_t oblock, struct tc_mask *mask)
{
    struct lost_entry *e = find(c, oblock);
    if (e == NULL || mask_empty(&e->mask))
        return false;
    if (mask)
        *mask = e->mask;
    return true;
}

bool lost_get_persisted(struct cache *c, uint64_t oblock, struct tc_mask *mask)
{
    struct lost_entry *e = find(c, oblock);
    if (e == NULL)
        return false;
    persisted(e, mask);
    return !mask_empty(mask);
}

/* Drop the entry once nothing of it is left. */
static void maybe_free(struct cache *c, uint64_t oblock)
{
    struct lost *l = c->lost;
    struct lost_entry **pp = &l->b[bucket(oblock)];
    while (*pp && (*pp)->oblock != oblock)
        pp = &(*pp)->next;
    struct lost_entry *e = *pp;
    if (e == NULL || !mask_empty(&e->mask) || !mask_empty(&e->unsettled) ||
        !mask_empty(&e->settling))
        return;
    *pp = e->next;
    free(e);
    l->blocks--;
}

static struct lost_entry *get_entry(struct cache *c, uint64_t oblock)
{
    struct lost_entry *e = find(c, oblock);
    if (e)
        return e;
    struct lost *l = L(c);
    e = tc_xcalloc(1, sizeof *e);
    e->oblock = oblock;
    e->next = l->b[bucket(oblock)];
    l->b[bucket(oblock)] = e;
    l->blocks++;
    return e;
}

/* Set the block's lost sectors to mask (empty: none). */
void lost_set(struct cache *c, uint64_t oblock, const struct tc_mask *mask)
{
    if (mask_empty(mask) && find(c, oblock) == NULL)
        return;
    struct lost_entry *e = get_entry(c, oblock);
    c->lost->sectors -= mask_count(&e->mask);
    e->mask = *mask;
    c->lost->sectors += mask_count(mask);
    maybe_free(c, oblock);
}

/* Record durably that these sectors of the block are lost now. */
void lost_record(struct cache *c, uint64_t oblock, const struct tc_mask *mask)
{
    struct tc_mask m;
    if (!lost_get(c, oblock, &m))
        mask_clear(&m);
    mask_or(&m, mask);
    lost_set(c, oblock, &m);
    c->lost_events++;
    lost_get_persisted(c, oblock, &m);
    struct append a = { .oblock = oblock, .type = TC_ENTRY_LOST, .valid = m,
                        .use_reserve = true, .urgent = true };
    log_append(c, &a, NULL, NULL, NULL, NULL, NULL);
}

/* Written again: these sectors are no longer lost.  Reads see it at once;
 * the durable records follow once the write is durable (abandon.c). */
void lost_clear(struct cache *c, uint64_t oblock, const struct tc_mask *written)
{
    struct lost_entry *e = find(c, oblock);
    if (e == NULL)
        return;
    struct tc_mask cleared = e->mask;
    mask_and(&cleared, written);
    if (mask_empty(&cleared))
        return;
    struct tc_mask left = e->mask;
    mask_andnot(&left, written);
    if (mask_empty(&e->unsettled))
        c->lost->unsettled_blocks++;
    mask_or(&e->unsettled, &cleared);
    lost_set(c, oblock, &left);
    abandon_lost_changed(c);
}

bool lost_unsettled(struct cache *c)
{
    return c->lost && c->lost->unsettled_blocks > 0;
}

/* A flush of the origin (and a sync of the log) begins: the sectors
 * cleared so far are durable once it completes. */
void lost_settle_begin(struct cache *c)
{
    if (c->lost == NULL)
        return;
    for (unsigned i = 0; i < LOST_BUCKETS; i++)
        for (struct lost_entry *e = c->lost->b[i]; e; e = e->next) {
            mask_or(&e->settling, &e->unsettled);
            mask_clear(&e->unsettled);
        }
    c->lost->unsettled_blocks = 0;
}

/* It completed (ok) or failed (the clears wait for the next one).  Once
 * durable, the log records the blocks' new lost sectors (when it is
 * still written: not abandoned). */
void lost_settle_end(struct cache *c, bool ok)
{
    if (c->lost == NULL)
        return;
    uint64_t n = 0;
    for (unsigned i = 0; i < LOST_BUCKETS; i++)
        for (struct lost_entry *e = c->lost->b[i]; e; e = e->next)
            if (!mask_empty(&e->settling))
                n++;
    uint64_t *done = tc_xmalloc((n ? n : 1) * sizeof *done);
    n = 0;
    for (unsigned i = 0; i < LOST_BUCKETS; i++)
        for (struct lost_entry *e = c->lost->b[i]; e; e = e->next) {
            if (mask_empty(&e->settling))
                continue;
            if (!ok) {
                if (mask_empty(&e->unsettled))
                    c->lost->unsettled_blocks++;
                mask_or(&e->unsettled, &e->settling);
            }
            mask_clear(&e->settling);
            done[n++] = e->oblock;
        }
    for (uint64_t i = 0; ok && i < n; i++) {
        struct tc_mask m;
        if (!lost_get_persisted(c, done[i], &m))
            mask_clear(&m);
        if (!c->abandoned) {
            struct append a = { .oblock = done[i], .type = TC_ENTRY_LOST, .valid = m,
                                .use_reserve = true, .urgent = true };
            log_append(c, &a, NULL, NULL, NULL, NULL, NULL);
        }
        maybe_free(c, done[i]);
    }
    free(done);
}

uint64_t lost_sectors(struct cache *c)
{
    return c->lost ? c->lost->sectors : 0;
}

void lost_foreach(struct cache *c, void (*fn)(void *arg, uint64_t oblock, const struct tc_mask *m),
                  void *arg)
{
    if (c->lost == NULL)
        return;
    for (unsigned i = 0; i < LOST_BUCKETS; i++)
        for (struct lost_entry *e = c->lost->b[i]; e; e = e->next) {
            struct tc_mask m;
            persisted(e, &m);
            fn(arg, e->oblock, &m);
        }
}

/* A write of [off, off + len) reached the volume: its sectors are no
 * longer lost. */
void lost_clear_range(struct cache *c, uint64_t off, uint64_t len)
{
    if (c->lost == NULL || c->lost->blocks == 0)
        return;
    uint64_t end = off + len;
    uint64_t b0 = off / c->block_size, b1 = (end + c->block_size - 1) / c->block_size;
    if (b1 - b0 > c->lost->blocks * 4) {
        /* A big range: walk the (small) set instead of the range. */
        uint64_t *hit = tc_xmalloc(c->lost->blocks * sizeof *hit);
        size_t n = 0;
        for (unsigned i = 0; i < LOST_BUCKETS; i++)
            for (struct lost_entry *e = c->lost->b[i]; e; e = e->next)
                if (e->oblock >= b0 && e->oblock < b1)
                    hit[n++] = e->oblock;
        for (size_t i = 0; i < n; i++) {
            uint64_t bs = hit[i] * c->block_size;
            uint64_t s0 = off > bs ? (off - bs) / TC_SECTOR : 0;
            uint64_t s1 = TC_MIN(end - bs, (uint64_t)c->block_size) / TC_SECTOR;
            struct tc_mask m;
            mask_range(&m, (unsigned)s0, (unsigned)s1);
            lost_clear(c, hit[i], &m);
        }
        free(hit);
        return;
    }
    for (uint64_t b = b0; b < b1; b++) {
        uint64_t bs = b * c->block_size;
        uint64_t s0 = off > bs ? (off - bs) / TC_SECTOR : 0;
        uint64_t s1 = TC_MIN(end - bs, (uint64_t)c->block_size) / TC_SECTOR;
        struct tc_mask m;
        mask_range(&m, (unsigned)s0, (unsigned)s1);
        lost_clear(c, b, &m);
    }
}

/* The sectors of block b inside [off, end). */
static void block_want(struct cache *c, uint64_t b, uint64_t off, uint64_t end,
                       struct tc_mask *want)
{
    uint64_t bs = b * c->block_size;
    uint64_t s0 = off > bs ? (off - bs) / TC_SECTOR : 0;
    uint64_t s1 = TC_MIN(end - bs, (uint64_t)c->block_size) / TC_SECTOR;
    mask_range(want, (unsigned)s0, (unsigned)s1);
}

/* Does [off, off + len) hold a lost sector? */
bool lost_overlaps(struct cache *c, uint64_t off, uint64_t len)
{
    if (c->lost == NULL || c->lost->blocks == 0 || len == 0)
        return false;
    uint64_t end = off + len;
    uint64_t b0 = off / c->block_size, b1 = (end + c->block_size - 1) / c->block_size;
    struct tc_mask want;
    if (b1 - b0 > c->lost->blocks * 4) {
        /* A big range: walk the (small) set instead of the range. */
        for (unsigned i = 0; i < LOST_BUCKETS; i++)
            for (struct lost_entry *e = c->lost->b[i]; e; e = e->next) {
                if (e->oblock < b0 || e->oblock >= b1)
                    continue;
                block_want(c, e->oblock, off, end, &want);
                mask_and(&want, &e->mask);
                if (!mask_empty(&want))
                    return true;
            }
        return false;
    }
    for (uint64_t b = b0; b < b1; b++) {
        struct tc_mask m;
        if (!lost_get(c, b, &m))
            continue;
        block_want(c, b, off, end, &want);
        mask_and(&m, &want);
        if (!mask_empty(&m))
            return true;
    }
    return false;
}

/* A flush reports the acknowledged data lost since the previous flush
 * returned: once, as EIO (a client must not take its writes for durable
 * when some were lost before the flush could make them so). */
int lost_flush_result(struct cache *c)
{
    if (c->lost_events == c->lost_events_reported)
        return 0;
    c->lost_events_reported = c->lost_events;
    tc_error("flush fails with EIO: acknowledged writes were lost with the cache since the "
             "previous flush (%llu lost sectors now unreadable)",
             (unsigned long long)lost_sectors(c));
    return -EIO;
}

static void passthrough_flushed(struct ereq *e)
{
    if (e->err == 0)
        e->err = lost_flush_result(e->vol->cache);
    e->complete = e->lost_next;
    e->complete(e);
}

static void passthrough_written(struct ereq *e)
{
    struct cache *c = e->vol->cache;
    if (e->err == 0)
        lost_clear_range(c, e->off, e->len);
    e->complete = e->lost_next;
    e->complete(e);
}

/*
 * A write-back job that read its block before the cache failed may still
 * write it to the origin afterwards.  Its version is older than any write
 * a client sends once the cache is gone (that data was recorded lost), so
 * such a write must not be issued beside it: the origin may complete the
 * two in either order.  It waits until the block has no write-back in
 * flight, then goes on.
 */
struct wb_wait {
    struct block_waiter w;
    struct ereq *e;
};

static void writeback_waited(struct block_waiter *bw)
{
    struct wb_wait *x = container_of(bw, struct wb_wait, w);
    struct ereq *e = x->e;
    free(x);
    lost_passthrough(e);
}

static bool wait_for_writebacks(struct cache *c, struct ereq *e)
{
    uint64_t b0 = e->off / c->block_size;
    uint64_t b1 = (e->off + e->len + c->block_size - 1) / c->block_size;
    for (uint64_t b = b0; b < b1; b++) {
        if (block_wait_wb_free(c->locks, b))
            continue;
        struct wb_wait *x = tc_xcalloc(1, sizeof *x);
        x->w.fn = writeback_waited;
        x->e = e;
        if (block_wait_wb(c->locks, b, &x->w)) {   /* cannot be, but then: go on */
            free(x);
            continue;
        }
        return true;
    }
    return false;
}

void lost_passthrough(struct ereq *e)
{
    struct cache *c = e->vol->cache;
    bool write = e->op == TC_OP_WRITE || e->op == TC_OP_WRITE_ZEROES || e->op == TC_OP_TRIM;
    if (e->op == TC_OP_READ && lost_overlaps(c, e->off, e->len)) {
        /* Its newest version was lost with the cache: never the origin's
         * older one in its place. */
        e->err = -EIO;
        e->complete(e);
        return;
    }
    if (write && c->abandon_unrecorded) {
        /* No durable record says the cache's log is stale: a write that
         * reached only the origin could be undone by the log at the next
         * start (abandon.c). */
        tc_error("write of origin bytes %llu..%llu refused: the abandonment of the cache is "
                 "not recorded yet (state file %s)", (unsigned long long)e->off,
                 (unsigned long long)(e->off + e->len - 1), c->state_path);
        e->err = -EIO;
        e->complete(e);
        return;
    }
    if (write && wait_for_writebacks(c, e))
        return;
    if (e->op == TC_OP_FLUSH) {
        e->lost_next = e->complete;
        e->complete = passthrough_flushed;
    }
    if ((e->op == TC_OP_WRITE || e->op == TC_OP_WRITE_ZEROES) && lost_sectors(c) > 0) {
        e->lost_next = e->complete;
        e->complete = passthrough_written;
    }
    passthrough_submit(e);
}
