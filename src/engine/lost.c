/*
 * Sectors whose dirty data was lost (a cache device failed and no other
 * copy existed).  Reads of them fail with EIO -- the origin's older data is
 * never returned in their place -- until a client writes them again.
 *
 * The set is small (it exists only after a failure), kept in a hash table
 * here and in the log as LOST records ("block B's lost sectors are now M"),
 * which recovery applies in sequence order and the cleaner carries forward
 * while they still matter.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/cache.h"
#include "util/log.h"
#include "util/misc.h"

struct lost_entry {
    uint64_t oblock;
    struct tc_mask mask;
    struct lost_entry *next;
};

#define LOST_BUCKETS 1024u

struct lost {
    struct lost_entry *b[LOST_BUCKETS];
    uint64_t blocks, sectors;
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

bool lost_get(struct cache *c, uint64_t oblock, struct tc_mask *mask)
{
    if (c->lost == NULL)
        return false;
    for (struct lost_entry *e = c->lost->b[bucket(oblock)]; e; e = e->next)
        if (e->oblock == oblock) {
            if (mask)
                *mask = e->mask;
            return true;
        }
    return false;
}

/* Set the block's lost sectors to mask (empty: none). */
void lost_set(struct cache *c, uint64_t oblock, const struct tc_mask *mask)
{
    struct lost *l = L(c);
    struct lost_entry **pp = &l->b[bucket(oblock)];
    while (*pp && (*pp)->oblock != oblock)
        pp = &(*pp)->next;
    if (*pp) {
        l->sectors -= mask_count(&(*pp)->mask);
        if (mask_empty(mask)) {
            struct lost_entry *e = *pp;
            *pp = e->next;
            free(e);
            l->blocks--;
            return;
        }
        (*pp)->mask = *mask;
        l->sectors += mask_count(mask);
        return;
    }
    if (mask_empty(mask))
        return;
    struct lost_entry *e = tc_xcalloc(1, sizeof *e);
    e->oblock = oblock;
    e->mask = *mask;
    e->next = l->b[bucket(oblock)];
    l->b[bucket(oblock)] = e;
    l->blocks++;
    l->sectors += mask_count(mask);
}

/* Record durably that these sectors of the block are lost now. */
void lost_record(struct cache *c, uint64_t oblock, const struct tc_mask *mask)
{
    struct tc_mask m;
    if (!lost_get(c, oblock, &m))
        mask_clear(&m);
    mask_or(&m, mask);
    lost_set(c, oblock, &m);
    struct append a = { .oblock = oblock, .type = TC_ENTRY_LOST, .valid = m,
                        .use_reserve = true, .urgent = true };
    log_append(c, &a, NULL, NULL, NULL, NULL, NULL);
}

/* Written again: these sectors are no longer lost. */
void lost_clear(struct cache *c, uint64_t oblock, const struct tc_mask *written)
{
    struct tc_mask m;
    if (!lost_get(c, oblock, &m))
        return;
    struct tc_mask left = m;
    mask_andnot(&left, written);
    if (mask_equal(&left, &m))
        return;
    lost_set(c, oblock, &left);
    struct append a = { .oblock = oblock, .type = TC_ENTRY_LOST, .valid = left,
                        .use_reserve = true, .urgent = true };
    log_append(c, &a, NULL, NULL, NULL, NULL, NULL);
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
        for (struct lost_entry *e = c->lost->b[i]; e; e = e->next)
            fn(arg, e->oblock, &e->mask);
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
