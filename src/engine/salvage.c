/*
 * tiercache check --salvage: write the dirty data of a damaged cache back
 * to its origin, offline, so that the cache can be reformatted without
 * losing more than the damage took.
 *
 * Recovery (offline) has rebuilt the index from every chunk summary that
 * checks, newest version of each sector winning.  What it cannot know is
 * what the damaged summaries described: any block, any sectors.  So a
 * version recovery found may be older than one a damaged chunk held, and
 * writing it to the origin could put older data over newer (the origin may
 * have received the newer version through a write-back the damaged chunk's
 * CLEAN record or data stood for).  The bound used: a damaged chunk in
 * group G held only versions older than the first group after G (groups
 * are opened one after the other, each with a sequence number above every
 * version before it).  Hence the rule:
 *
 *   a dirty sector is written back only if the fragment serving it lies in
 *   a group newer than every damaged one (c->damage_group_max); the others
 *   are reported lost, by origin range -- their newest version may be in a
 *   damaged chunk;
 *
 * and a sector whose data does not match its checksum (or cannot be read)
 * is reported lost too, never replaced by an older version.  Dirty data
 * only the damaged chunks held cannot be named at all: the summary says
 * so.  Nothing in the cache is changed; the origin is flushed at the end.
 *
 * After an abandonment (abandon.c) the same rule holds for the versions
 * recovery applied: those from abandoned_seq on, written after a restart.
 * Damage in a group below abandoned_seq held only entries below it, which
 * recovery ignores anyway, so it bounds nothing (its group is below every
 * fragment's).  The versions below abandoned_seq are never written back,
 * although the log may still hold them intact (a device readable again):
 * none is provably the newest.  The origin received writes past the cache
 * since, and the record of which sectors they covered lags them (a clear
 * of the lost set is recorded only after the write is durable, so a crash
 * leaves the state file calling a sector lost that the origin has newer);
 * and the newest acknowledged version of a lost sector may never have
 * reached the log (the write that failed the device).  The lost set --
 * the state file's, with the LOST records since -- names the sectors whose
 * newest version the origin may lack: reported lost, as sectors lost with
 * a failed device are -- but for those a drain cut short left with a
 * proof (state file version 3, abandon.c "Resuming the drain"): the
 * version the abandonment recorded lost, which nothing newer replaced
 * since (a proof goes the moment its sector leaves the lost set, and
 * from the state file on disk before any write of it reaches the origin).
 * Those are written back first, exactly as the next start would: read
 * back from the abandoned device, kept only if they match the CRC the
 * proof recorded, written to the origin, the origin flushed, and only
 * then dropped from the lost set and the state file, which is written
 * again without them and without proofs (the one record salvage changes:
 * a start after it, or a later salvage, must not write them again over
 * what the origin receives meanwhile).  A state file that had no room for
 * the proofs marks those sectors instead (version 4): check --salvage
 * writes them back from the log's replay before this runs, as a start
 * does (abandon_log_marks(), called by the CLI, which opens the set again
 * without the marks).  The rest are reported lost.
 * Without the abandonment's record (the state file
 * not found, no superblock mark) recovery would replay the whole log as
 * trusted and salvage would write its stale versions back: check names the
 * state file it used, and takes --state-file as serve does.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/abandon.h"
#include "engine/cache.h"
#include "engine/cacheio.h"
#include "engine/check.h"
#include "util/log.h"
#include "util/misc.h"

static void lost_range(struct salvage_result *r, struct cache *c, uint64_t oblock, unsigned s0,
                       unsigned s1, const char *why)
{
    uint64_t base = oblock * c->block_size;
    r->sectors_lost += s1 - s0;
    if (r->nlost % 64 == 0) {
        r->lost = realloc(r->lost, (r->nlost + 64) * sizeof *r->lost);
        if (r->lost == NULL)
            abort();
    }
    char *line = NULL;
    if (asprintf(&line, "origin bytes %llu..%llu: %s",
                 (unsigned long long)(base + (uint64_t)s0 * TC_SECTOR),
                 (unsigned long long)(base + (uint64_t)s1 * TC_SECTOR - 1), why) < 0)
        abort();
    r->lost[r->nlost++] = line;
}

/* Report the runs of sectors set in m. */
static void lost_mask(struct salvage_result *r, struct cache *c, uint64_t oblock,
                      const struct tc_mask *m, const char *why)
{
    unsigned s, e;
    for (s = 0; mask_next_run(m, c->spb, &s, &e); s = e)
        lost_range(r, c, oblock, s, e, why);
}

static int write_runs(struct cache *c, struct tc_dev *origin, uint64_t oblock,
                      const struct tc_mask *m, uint8_t *buf, struct salvage_result *r,
                      char *err, size_t errlen)
{
    unsigned s, e;
    for (s = 0; mask_next_run(m, c->spb, &s, &e); s = e) {
        uint64_t off = oblock * c->block_size + (uint64_t)s * TC_SECTOR;
        size_t len = (size_t)(e - s) * TC_SECTOR;
        int rc = dev_sync_io(origin, TC_DEV_WRITE, buf + (size_t)s * TC_SECTOR, off, len, 0);
        if (rc) {
            snprintf(err, errlen, "%s: write of %zu bytes at offset %llu failed: %s",
                     origin->name, len, (unsigned long long)off, strerror(-rc));
            return -1;
        }
        r->bytes_written += len;
    }
    return 0;
}

struct lost_report {
    struct salvage_result *r;
    struct cache *c;
};

static void report_lost_set(void *arg, uint64_t oblock, const struct tc_mask *m)
{
    struct lost_report *x = arg;
    lost_mask(x->r, x->c, oblock, m, "lost with the cache (the lost set: its newest "
              "acknowledged version was lost when a cache device failed or the cache was "
              "abandoned, and no later write of it is known durable): no version in the log "
              "is provably the newest");
}

int cache_salvage(struct cache *c, struct tc_dev *origin, struct salvage_result *r,
                  bool progress, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    r->damaged = c->st.recovery_damaged;
    r->damaged_before_abandon = c->st.recovery_damage_ignored;
    r->damage_group_max = c->damage_group_max;
    r->abandoned_seq = c->abandoned_seq;
    r->state_file = c->state_path;
    uint8_t *buf = tc_alloc_aligned((size_t)c->spb * TC_SECTOR);
    uint64_t total = c->map.dirty_blocks, done = 0;
    int ret = 0;
    /* A drain cut short: what its proofs vouch for, written back (and no
     * longer lost) before anything else, as a start would do it. */
    abandon_salvage_drain(c, origin);
    r->recovered_lost_sectors = c->ab.resume.written_bytes / TC_SECTOR;
    r->unrecoverable_proven_sectors = c->ab.resume.unproven_sectors;
    /* Sectors whose newest version was lost with a failed device: any
     * version still in the log is older, so none is written back, and
     * they are reported lost (a reformat would otherwise let their older
     * origin data be read as current). */
    struct lost_report lr = { r, c };
    lost_foreach(&c->map.lost, report_lost_set, &lr);
    /* Ascending origin order: the dirty bitmap. */
    for (uint64_t b = 0; b < c->nblocks_origin; b++) {
        if (!map_is_dirty(&c->map, b))
            continue;
        uint32_t id = index_lookup(&c->map.idx, b);
        if (id == NIL)
            continue;
        struct tc_mask v, d, safe, unsafe;
        ce_get_masks(&c->map.idx, id, &v, &d);
        mask_clear(&safe);
        mask_clear(&unsafe);
        for (unsigned s = 0; s < c->spb; s++) {
            if (!mask_test(&d, s))
                continue;
            uint32_t f = ce_locate(&c->map.idx, id, s);
            uint64_t g = f == NIL ? 0 : space_seg(&c->sp, frag_seg(&c->map.idx, f))->seq;
            if (f != NIL && c->damage_group_max != UINT64_MAX && g > c->damage_group_max)
                mask_set(&safe, s);
            else
                mask_set(&unsafe, s);
        }
        r->dirty_sectors += mask_count(&d);
        struct tc_mask lost;
        if (lost_get(&c->map.lost, b, &lost)) {    /* reported above */
            mask_andnot(&safe, &lost);
            mask_andnot(&unsafe, &lost);
        }
        if (!mask_empty(&unsafe))
            lost_mask(r, c, b, &unsafe, "its newest version may be in a damaged chunk: not "
                      "written back (an older one could overwrite newer data)");
        if (!mask_empty(&safe)) {
            struct tc_mask good;
            int g = cache_gather_wait(c, id, &safe, buf, &good);
            if (g == -EAGAIN) {
                snprintf(err, errlen, "origin block %llu: the cache's data changed while "
                         "being read", (unsigned long long)b);
                ret = -1;
                break;
            }
            if (g == 1) {
                /* Sector by sector: keep what checks, report the rest. */
                struct tc_mask bad = safe;
                mask_andnot(&bad, &good);
                lost_mask(r, c, b, &bad, "unreadable or failing its checksum");
                safe = good;
            }
            if (!mask_empty(&safe)) {
                if (write_runs(c, origin, b, &safe, buf, r, err, errlen) < 0) {
                    ret = -1;
                    break;
                }
                r->blocks_written++;
            }
        }
        if (progress && (++done % 64 == 0 || done == total))
            fprintf(stderr, "\rsalvage: %llu of %llu dirty blocks, %llu MiB written back",
                    (unsigned long long)done, (unsigned long long)total,
                    (unsigned long long)(r->bytes_written >> 20));
    }
    if (progress && total)
        fputc('\n', stderr);
    if (ret == 0 && origin->can_flush) {
        int rc = dev_sync_io(origin, TC_DEV_FLUSH, NULL, 0, 0, 0);
        if (rc) {
            snprintf(err, errlen, "%s: flush failed: %s", origin->name, strerror(-rc));
            ret = -1;
        }
    }
    free(buf);
    return ret;
}

void salvage_result_free(struct salvage_result *r)
{
    for (unsigned i = 0; i < r->nlost; i++)
        free(r->lost[i]);
    free(r->lost);
    memset(r, 0, sizeof *r);
}
