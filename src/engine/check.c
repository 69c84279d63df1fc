/*
 * tiercache check: an offline audit of a cache set.
 *
 * After recovery has rebuilt the index (which already checked every chunk
 * header and entry it used), this checks what recovery takes on trust:
 *
 *  - both superblock copies of every device (copies that differ with copy A
 *    whole are what a stop between their writes leaves: said, not a problem);
 *  - the data: every cached sector is read and checked against the CRC in
 *    its chunk header; damaged sectors are listed by origin range, as lost
 *    (dirty) or harmless (clean: the origin has them);
 *  - the index: masks (dirty within valid, valid the union of fragments),
 *    fragments inside their segment's written part and inside one chunk,
 *    no two fragments sharing a sector of the cache;
 *  - the accounting: dirty totals and bitmap, the recovered write-through
 *    count (map.h, invariant 18), segment use.
 *
 * Problems are collected as sentences; none means the cache is clean.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/abandon.h"
#include "engine/cache.h"
#include "engine/cacheio.h"
#include "engine/check.h"
#include "engine/checkpoint.h"
#include "engine/seqrec.h"
#include "util/log.h"
#include "engine/survey.h"
#include "util/misc.h"

static void problem(struct check_result *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0)
        s = NULL;
    va_end(ap);
    if (s == NULL)
        return;
    if (r->nproblems % 64 == 0) {
        r->problems = realloc(r->problems, (r->nproblems + 64) * sizeof *r->problems);
        if (r->problems == NULL)
            abort();
    }
    r->problems[r->nproblems++] = s;
}

void check_result_free(struct check_result *r)
{
    for (unsigned i = 0; i < r->nproblems; i++)
        free(r->problems[i]);
    free(r->problems);
    free(r->seqrec_path);
    memset(r, 0, sizeof *r);
}

static void check_superblocks(struct cache *c, struct check_result *r)
{
    uint8_t *buf = tc_alloc_aligned(2 * TC_SB_SIZE);
    for (unsigned d = 0; d < c->ndevs; d++) {
        struct tc_dev *dev = c->devs[d].dev;
        if (dev_sync_io(dev, TC_DEV_READ, buf, 0, 2 * TC_SB_SIZE, 0) != 0) {
            problem(r, "%s: the superblocks cannot be read", dev->name);
            continue;
        }
        struct tc_superblock sb;
        char why[160];
        bool a_whole = true;
        for (int copy = 0; copy < 2; copy++)
            if (sb_decode(buf + copy * TC_SB_SIZE, &sb, why, sizeof why) < 0) {
                problem(r, "%s: superblock copy %c is damaged: %s", dev->name, 'A' + copy, why);
                a_whole &= copy != 0;
            }
        /* Copy A whole and copy B different is what a stop between the
         * two writes leaves (copy A is always written first, and written
         * while serving too: marks, running checkpoints' slots); the start
         * uses copy A and writes copy B again from it (cache.c,
         * clear_stop_record()).  Said, not a problem.  With copy A
         * damaged, that is the problem, reported above. */
        if (memcmp(buf, buf + TC_SB_SIZE, TC_SB_SIZE) != 0) {
            if (a_whole)
                tc_warn("%s: the two superblock copies differ (a stop between their writes): "
                        "the next start writes copy B again from copy A", dev->name);
            else
                problem(r, "%s: the two superblock copies differ", dev->name);
        }
    }
    free(buf);
    /* The clean-stop record (ondisk.h): one stop writes the same one on
     * every device (a device without it is a stop that ended while
     * writing them: as true); recovery compared it with the log, and its
     * damage findings follow with the log's.  Records that differ were
     * not written by one stop, and recovery used neither. */
    const struct tc_superblock *rec = NULL;
    for (unsigned d = 0; d < c->ndevs; d++) {
        const struct tc_superblock *sb = &c->devs[d].sb;
        if (!(sb->flags & TC_SB_CLEAN_STOP))
            continue;
        if (rec && !sb_stop_record_equal(rec, sb))
            problem(r, "%s: its clean-stop record (newest chunk %llu, %llu chunks) differs from "
                    "that of %s (newest chunk %llu, %llu chunks)", c->devs[d].dev->name,
                    (unsigned long long)sb->stop_chunk_seq, (unsigned long long)sb->stop_chunks,
                    c->devs[0].dev->name, (unsigned long long)rec->stop_chunk_seq,
                    (unsigned long long)rec->stop_chunks);
        if (rec == NULL) {
            rec = sb;
            r->stop_recorded = true;
            r->stop_chunk_seq = sb->stop_chunk_seq;
            r->stop_chunks = sb->stop_chunks;
        }
    }
}

/* ---- data ---- */

struct data_read {
    struct cread cr;
    struct check_state *st;
    uint64_t oblock;
    struct tc_mask stored, cur, dirty;
    uint8_t *buf;
    bool busy;
};

struct check_state {
    struct cache *c;
    struct check_result *r;
    unsigned inflight;
};

static void range_problem(struct check_state *st, struct data_read *d, uint32_t from, uint32_t to)
{
    struct cache *c = st->c;
    /* Sectors of the fragment [from, to) in packed order -> block sectors. */
    unsigned k = 0, lo = UINT32_MAX, hi = 0;
    bool dirty = false, current = false;
    for (unsigned s = 0; s < c->spb; s++) {
        if (!mask_test(&d->stored, s))
            continue;
        if (k >= from && k < to) {
            if (mask_test(&d->cur, s)) {
                current = true;
                if (s < lo)
                    lo = s;
                hi = s + 1;
                if (mask_test(&d->dirty, s))
                    dirty = true;
            }
        }
        k++;
    }
    if (!current)
        return;     /* only superseded sectors were damaged */
    uint64_t base = d->oblock * c->block_size;
    if (dirty) {
        st->r->lost_dirty_sectors += hi - lo;
        problem(st->r, "data: origin bytes %llu..%llu: cached dirty data is damaged and LOST",
                (unsigned long long)(base + (uint64_t)lo * TC_SECTOR),
                (unsigned long long)(base + (uint64_t)hi * TC_SECTOR - 1));
    } else {
        st->r->damaged_clean_sectors += hi - lo;
        problem(st->r, "data: origin bytes %llu..%llu: cached clean data is damaged (the "
                "origin has it; serve drops the damaged copy)",
                (unsigned long long)(base + (uint64_t)lo * TC_SECTOR),
                (unsigned long long)(base + (uint64_t)hi * TC_SECTOR - 1));
    }
}

static void data_read_done(struct cread *cr, int err)
{
    struct data_read *d = container_of(cr, struct data_read, cr);
    struct check_state *st = d->st;
    st->r->data_checked_bytes += (uint64_t)cr->n * TC_SECTOR;
    if (err)
        range_problem(st, d, cr->bad_from, cr->bad_to);
    d->busy = false;
    st->inflight--;
}

static void check_data(struct cache *c, struct check_result *r, bool progress)
{
    enum { WINDOW = 32 };
    struct data_read reads[WINDOW];
    memset(reads, 0, sizeof reads);
    struct check_state st = { .c = c, .r = r };
    uint64_t total = c->map.idx.nfrags, done = 0;
    for (int i = 0; i < WINDOW; i++) {
        reads[i].buf = tc_alloc_aligned((size_t)c->spb * TC_SECTOR);
        reads[i].st = &st;
    }
    for (uint32_t id = 0; id < c->map.idx.used; id++) {
        struct centry *e = CE(&c->map.idx, id);
        if (ce_is_free(e))
            continue;
        for (uint32_t f = ce_head(&c->map.idx, id); f != NIL; f = frag_next(&c->map.idx, f)) {
            struct data_read *d = NULL;
            while (d == NULL) {
                for (int i = 0; i < WINDOW && d == NULL; i++)
                    if (!reads[i].busy)
                        d = &reads[i];
                if (d == NULL)
                    reactor_poll(c->reactor, 100000000ull);
            }
            d->busy = true;
            d->oblock = ce_oblock(e);
            frag_stored(&c->map.idx, f, &d->stored);
            frag_current(&c->map.idx, id, f, &d->cur);
            ce_get_masks(&c->map.idx, id, NULL, &d->dirty);
            struct cfrag fr = frag_view(&c->map.idx, f);
            d->cr.seg = fr.seg;
            d->cr.off = fr.off;
            d->cr.n = mask_count(&d->stored);
            d->cr.buf = d->buf;
            d->cr.cb = data_read_done;
            st.inflight++;
            cache_read_verified(c, &d->cr);
            e = CE(&c->map.idx, id);
            if (progress && ++done % 256 == 0)
                fprintf(stderr, "\rchecking cached data: %llu of %llu fragments",
                        (unsigned long long)done, (unsigned long long)total);
        }
    }
    while (st.inflight)
        reactor_poll(c->reactor, 100000000ull);
    if (progress)
        fprintf(stderr, "\rchecking cached data: %llu of %llu fragments\n",
                (unsigned long long)total, (unsigned long long)total);
    for (int i = 0; i < WINDOW; i++)
        free(reads[i].buf);
}

/* ---- index and accounting ---- */

struct span {
    uint32_t seg, from, to;
    uint64_t oblock;
};

static int cmp_span(const void *a, const void *b)
{
    const struct span *x = a, *y = b;
    if (x->seg != y->seg)
        return x->seg < y->seg ? -1 : 1;
    return x->from < y->from ? -1 : x->from > y->from;
}

static void check_index(struct cache *c, struct check_result *r)
{
    size_t nspans = 0, cap = 1024;
    struct span *spans = tc_xmalloc(cap * sizeof *spans);
    uint64_t dirty_sectors = 0, dirty_blocks = 0, wt_recovered = 0;
    uint64_t *live = tc_xcalloc(c->sp.nsegs, sizeof *live);
    for (uint32_t id = 0; id < c->map.idx.used; id++) {
        struct centry *e = CE(&c->map.idx, id);
        if (ce_is_free(e))
            continue;
        r->blocks++;
        struct tc_mask v, d, uni;
        ce_get_masks(&c->map.idx, id, &v, &d);
        mask_clear(&uni);
        unsigned nf = 0;
        for (uint32_t f = ce_head(&c->map.idx, id); f != NIL; f = frag_next(&c->map.idx, f)) {
            struct cfrag fr = frag_view(&c->map.idx, f);
            struct tc_mask st;
            frag_stored(&c->map.idx, f, &st);
            mask_or(&uni, &st);
            nf++;
            r->fragments++;
            unsigned n = mask_count(&st);
            for (int copy = 0; copy < 2; copy++) {
                uint32_t seg = copy ? fr.mseg : fr.seg;
                uint16_t off = copy ? fr.moff : fr.off;
                if (seg == NIL)
                    continue;
                if (seg >= c->sp.nsegs) {
                    problem(r, "index: block %llu points to segment %u of %u",
                            (unsigned long long)ce_oblock(e), seg, c->sp.nsegs);
                    continue;
                }
                live[seg] += n;
                const struct chunk_ref *cr = segment_chunk_of(&c->sp, seg, off);
                if (cr == NULL || off < cr->start + cr->hdr_sectors ||
                    off + n > (uint32_t)cr->start + cr->hdr_sectors + cr->data_sectors ||
                    off + n > space_seg(&c->sp, seg)->fill)
                    problem(r, "index: block %llu: %u sectors at segment %u sector %u are not "
                            "inside one written chunk", (unsigned long long)ce_oblock(e), n, seg,
                            off);
                if (nspans == cap) {
                    cap *= 2;
                    spans = realloc(spans, cap * sizeof *spans);
                    if (spans == NULL)
                        abort();
                }
                spans[nspans++] = (struct span){ seg, off, off + n, ce_oblock(e) };
            }
        }
        if (nf != e->nfrags)
            problem(r, "index: block %llu counts %u fragments but has %u",
                    (unsigned long long)ce_oblock(e), e->nfrags, nf);
        if (!mask_equal(&uni, &v))
            problem(r, "index: block %llu: valid sectors differ from its fragments'",
                    (unsigned long long)ce_oblock(e));
        if (!mask_covers(&v, &d))
            problem(r, "index: block %llu has dirty sectors that are not valid",
                    (unsigned long long)ce_oblock(e));
        unsigned nd = mask_count(&d);
        dirty_sectors += nd;
        if (nd)
            dirty_blocks++;
        bool bit = c->map.dirty_bits[ce_oblock(e) / 64] & (1ull << (ce_oblock(e) % 64));
        if (bit != (nd > 0))
            problem(r, "accounting: dirty bit of block %llu is %s", (unsigned long long)ce_oblock(e),
                    bit ? "set for a clean block" : "clear for a dirty block");
        if (e->flags & CE_WT_RECOVERED) {
            wt_recovered++;
            if (nd == 0)
                problem(r, "accounting: clean block %llu holds the write-through stable mark",
                        (unsigned long long)ce_oblock(e));
        }
    }
    if (nspans > 1)
        qsort(spans, nspans, sizeof *spans, cmp_span);
    for (size_t i = 1; i < nspans; i++)
        if (spans[i].seg == spans[i - 1].seg && spans[i].from < spans[i - 1].to)
            problem(r, "index: blocks %llu and %llu share sectors of segment %u",
                    (unsigned long long)spans[i - 1].oblock, (unsigned long long)spans[i].oblock,
                    spans[i].seg);
    if (dirty_sectors != c->map.dirty_sectors || dirty_blocks != c->map.dirty_blocks)
        problem(r, "accounting: %llu dirty sectors in %llu blocks counted, %llu in %llu found",
                (unsigned long long)c->map.dirty_sectors, (unsigned long long)c->map.dirty_blocks,
                (unsigned long long)dirty_sectors, (unsigned long long)dirty_blocks);
    if (wt_recovered != c->map.wt_recovered)     /* invariant 18 */
        problem(r, "accounting: %llu recovered write-through blocks counted, %llu found",
                (unsigned long long)c->map.wt_recovered, (unsigned long long)wt_recovered);
    for (uint32_t s = 0; s < c->sp.nsegs; s++)
        if (live[s] != space_seg(&c->sp, s)->live)
            problem(r, "accounting: segment %u counts %u live sectors, %llu found", s,
                    space_seg(&c->sp, s)->live, (unsigned long long)live[s]);
    r->dirty_bytes = dirty_sectors * TC_SECTOR;
    free(spans);
    free(live);
}

static void report_lost(void *arg, uint64_t oblock, const struct tc_mask *m)
{
    struct check_state *st = arg;
    struct cache *c = st->c;
    uint64_t base = oblock * c->block_size;
    unsigned s, e;
    for (s = 0; mask_next_run(m, c->spb, &s, &e); s = e) {
        st->r->lost_dirty_sectors += e - s;
        problem(st->r, "lost: origin bytes %llu..%llu: dirty data was lost with a failed cache "
                "device; reads fail with EIO until these bytes are written again",
                (unsigned long long)(base + (uint64_t)s * TC_SECTOR),
                (unsigned long long)(base + (uint64_t)e * TC_SECTOR - 1));
    }
}

/* The sequence record (seqrec.c): what serve's start and check --salvage
 * would refuse is a problem here, said in their words. */
static void check_seqrec(struct cache *c, struct check_result *r)
{
    struct seqrec_look l;
    seqrec_look(c, &l);
    r->seqrec_path = tc_xstrdup(l.path);
    r->seqrec_found = seqrec_verdict_name(l.verdict);
    r->seqrec_chunk = l.recorded;
    r->newest_chunk = l.found;
    r->seqrec_device = l.older_dev;
    static const struct seqrec_words words = {
        .who = "the daemon serving it",
        .harm = "serve and check --salvage refuse it: its dirty data is older than what the "
                "origin received since, and would be written back over it",
        .way_out = "serve or salvage it with --accept-older-cache",
        .way_out_unusable = "serve or salvage it with --accept-older-cache (serve writes the "
                            "record anew)",
        .way_out_elsewhere = "serve it with --adopt-state-file, or salvage it with "
                             "--accept-older-cache",
        .way_out_stop = "serve or salvage it with --accept-older-cache (serve removes the "
                        "stop record)",
    };
    char why[2048];
    if (seqrec_refusal(&l, &words, why, sizeof why) < 0)
        problem(r, "sequence record: %s", why);
    seqrec_look_free(&l);
}

int cache_check_index(struct cache *c, struct check_result *r)
{
    memset(r, 0, sizeof *r);
    r->seqrec_device = -1;
    check_index(c, r);
    return (int)r->nproblems;
}

/*
 * The survey (survey.h) against the scan: a start that reads one header
 * per segment must see the same incarnation of every segment as the walk
 * of all chunks saw.  A live segment whose chunks start at sector 0 has
 * that first header, of its group; a segment the scan left free holds no
 * first chunk of a live group (except one of a device that failed before
 * it was written, which is not trusted; a second segment of a group on
 * one device, which no writer makes, is reported so).  Not compared:
 * segments whose start cannot be read, and, once the scan found damage,
 * the free ones (the tail it found may be wrong; the damage is reported).
 */
static void check_survey(struct cache *c, struct check_result *r)
{
    struct seg_first *first = tc_xcalloc(c->sp.nsegs ? c->sp.nsegs : 1, sizeof *first);
    r->survey_reads = survey_segments(c, first);
    for (uint32_t s = 0; s < c->sp.nsegs; s++) {
        const struct segment *sg = space_seg(&c->sp, s);
        const struct seg_first *f = &first[s];
        if (f->what == SURVEY_UNREADABLE)
            continue;
        bool live = sg->state != SEG_FREE && sg->nchunks > 0;
        r->survey_first_headers += f->what == SURVEY_CHUNK;
        if (live && sg->chunks[0].start == 0 && f->what == SURVEY_CHUNK &&
            f->group_seq == sg->seq)
            r->survey_live_matched++;
        else if (live && sg->chunks[0].start == 0)
            problem(r, "segment %u: the scan found group %llu from its first sector, its first "
                    "header alone says %s", s, (unsigned long long)sg->seq,
                    f->what == SURVEY_CHUNK ? "another group" : "no chunk");
        else if (!live && f->what == SURVEY_CHUNK && f->group_seq >= c->lg.tail_seq &&
                 !devfail_untrusted(c, sg->dev, f->group_seq) && !c->damage)
            problem(r, "segment %u: its first header is of live group %llu, but the scan left "
                    "it free", s, (unsigned long long)f->group_seq);
    }
    free(first);
}

static void run_ckpt_problem(void *arg, const char *msg)
{
    problem(arg, "%s", msg);
}

int cache_check(struct cache *c, struct check_result *r, bool progress)
{
    memset(r, 0, sizeof *r);
    r->seqrec_device = -1;
    check_superblocks(c, r);
    check_index(c, r);
    check_data(c, r, progress);
    check_survey(c, r);
    /* A checkpoint the clean-stop record names must be what the full
     * scan above rebuilt (checkpoint.c). */
    for (unsigned d = 0; d < c->ndevs; d++) {
        if (!(c->devs[d].sb.flags & TC_SB_CLEAN_STOP))
            continue;
        char why[512];
        int v = ckpt_verify(c, &c->devs[d].sb, why, sizeof why);
        if (v < 0)
            problem(r, "%s", why);
        r->checkpoint = v != 0;
        r->checkpoint_verified = v > 0;
        break;
    }
    struct ckpt_run_verdict rv;
    ckpt_run_verify(c, &rv, run_ckpt_problem, r);
    r->run_ckpts = rv.slots;
    r->run_ckpts_usable = rv.usable;
    r->run_ckpt_newest = rv.newest_gen;
    r->run_ckpt_compared = rv.compared;
    r->run_ckpt_verified = rv.verified;
    for (const char *l = c->damage; l && *l;) {
        size_t n = strcspn(l, "\n");
        problem(r, "log: %.*s", (int)n, l);
        l += n + (l[n] != 0);
    }
    if (c->st.recovery_malformed)
        problem(r, "log: %llu chunk entries are malformed and were ignored",
                (unsigned long long)c->st.recovery_malformed);
    check_seqrec(c, r);
    /* A drain cut short: what the next start would write back of the
     * lost set (only read here). */
    abandon_resume_drain(c, false);
    r->recoverable_blocks = c->ab.resume.blocks;
    r->recoverable_sectors = c->ab.resume.sectors;
    r->unrecoverable_proven_sectors = c->ab.resume.unproven_sectors;
    r->marked_sectors = c->ab.marks_loaded;
    struct check_state st = { .c = c, .r = r };
    lost_foreach(&c->map.lost, report_lost, &st);
    r->unflushed_entries = c->st.recovery_unflushed;
    r->groups = c->sp.ngroups;
    r->segments = c->sp.nsegs;
    r->segments_free = c->sp.free_segs;
    return (int)r->nproblems;
}
