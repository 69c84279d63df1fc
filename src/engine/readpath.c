/*
 * Reads.
 *
 * A read is cut into pieces, one per cache block it touches, and each
 * piece is classified:
 *
 *   hit    every sector is cached: read from the cache, one I/O per run of
 *          sectors that lie together in one fragment
 *   miss   read from the origin; dirty cached sectors of the range (newer
 *          than the origin's) are read from the cache too and laid over
 *
 * Neighbouring I/Os are merged: misses are contiguous on the origin, and a
 * hit run that continues exactly where the previous one ended on the same
 * segment joins it.  Every sector read from a cache device is checked
 * against its CRC; a sector that fails is never returned: clean data is
 * read again from the origin (and dropped from the cache), dirty data
 * fails with EIO.
 *
 * After the data is in the client's buffer the request completes, and
 * only then are admitted misses appended to the log (a fill: a new
 * fragment holding the sectors the cache lacked).  A miss never waits for
 * a cache write: the client has its data first.  A fill is dropped if the
 * block changed meanwhile (its generation moved), its chain is full, or no
 * space is free.
 *
 * Auto (--fill auto, the default) chooses sectors, block or group by what
 * a larger fill costs against what it saves, from the devices' costs
 * measured on the requests they serve (struct tc_dev_cost in io/dev.h: a
 * cost per request and one per byte, for reads and writes).  A
 * whole-block fill of a small miss moves about a block more than the
 * client asked: from the origin (its read cost per byte) and into the
 * cache (the cache devices' write cost per byte, counted
 * FILL_CACHE_WEIGHT times: the write, and the cleaner's later move or
 * read of it).  It pays when a later read of the rest of the block, which
 * would have missed and cost an origin request, hits instead and costs a
 * cache read: it saves the origin's request cost less the cache's.  So
 *
 *   R = (origin request - cache request)
 *       / (block size * (origin byte + FILL_CACHE_WEIGHT * cache write byte))
 *
 * and a larger fill pays when R is above 1 over the chance of that later
 * read.  Taking that chance as about 2/3 for blocks, group fills (whose
 * blocks are further from the miss, and which their own gate stops when
 * they are not read) need twice a block's cost: group when R >= 2, block
 * when R >= 1.5, sectors below (FILL_RHO_*), and a choice is left only
 * when R is FILL_RHO_MARGIN past its threshold.  On an origin as fast as
 * the cache the numerator is about 0: only the sectors read are filled.
 * A cost not yet measured counts as 0 (the cache's: then the rule is the
 * origin's alone).  Measured here: the bench's spindle (nbdkit's delay
 * filter, 4 ms a request, 1200 Mbit/s) R 2.8-9 at 64 KiB blocks by the
 * origin alone (groups, as before); nbdkit's file plugin on a file in the
 * page cache, loaded host, R 4-14 at 64 KiB by the origin alone (its
 * requests cost 140-200 us under a load average of 19, and a 64 KiB
 * transfer no more than a 4 KiB one within the noise); with the cache's
 * side, on the git bench's fast origin (nbdkit's file plugin on local
 * disk, a cache file beside it) a request cost 120-1800 us at the
 * origin and 140-550 us at the cache, R 0-0.6 (sectors), in one run's
 * last checkouts 1.7-2 (groups); a file on tmpfs opened directly,
 * 256 KiB blocks, R about 0.15 (sectors).  Until the origin is
 * measured (DEV_COST_MIN reads of each size), auto takes the choice it
 * always had: group for blocks of up to 256 KiB, sectors above.  The cost
 * the model leaves out is the daemon's CPU.
 *
 * Block fills (--fill block and group, and auto's choice of them): a run
 * of misses whose first or last block is admitted and only partly read is
 * widened to whole blocks -- one origin read into a bounce buffer, the
 * client's part copied out -- so that the fill stores the whole block.  A
 * small read (a directory block, an inode table) otherwise leaves its
 * neighbours to miss later, and on a disk reading 64 KiB costs about what
 * 4 KiB costs.  The fill stores only sectors the block lacks and that are
 * not recorded lost: valid sectors are at least as new as the origin's,
 * and a lost sector must keep failing.  The generation, held from before
 * the origin read was issued, covers the whole block, so a write anywhere
 * in it drops the fill.  If the widened read fails, the client's range is
 * read again on its own, so an origin error is reported for exactly the
 * range asked for (and nothing is filled).
 *
 * Group fills (--fill group, and auto's choice of it): when a
 * client read miss filled its block, the other blocks of its aligned
 * group of GROUP_BLOCKS (oblock & ~3 to oblock | 3) that are not cached
 * are read from the origin and filled too, after the client has its data,
 * as an NBD_CMD_CACHE of each would be (admitted whatever the policy says,
 * counted neither as read hits nor as misses).  Data written together is
 * read together: most read misses of the git benchmark are first reads of
 * files and pack data written long before, and the blocks beside a missed
 * one are read soon after.  Replay of six captured streams of that
 * benchmark at 64 MiB: read hit ratio by request 0.847 -> 0.905 (0.874
 * with pairs of blocks).  On random reads (zipf over scattered ranks) the
 * neighbours are rarely read and their fills only take room from blocks
 * that are, so group fills pay for themselves or stop: a FIFO of the
 * blocks group-filled (the ghost) tells which client read hits they
 * served, and while fewer than GROUP_USED_MIN of the last fills were read
 * (the counts halve every GROUP_WINDOW fills) only one miss in GROUP_PROBE
 * has its group filled, so that a change of the load is noticed.  At most
 * GROUP_INFLIGHT are in flight: a group fill is background work and must
 * not queue before clients on a loaded origin.
 *
 * Fill ahead: a miss whose block is just above a cached one (the block
 * below the request's missing run is cached) continues a forward run --
 * git reads its pack in ascending 64-128 KiB requests with small gaps --
 * and the blocks above it to the end of its aligned span of AHEAD_BLOCKS
 * (oblock | 15), not only of its group, join its origin request (status
 * group_fills_ahead), under the same gate.  The largest byte misses of the
 * git benchmark are the first checkout's reads of the pack the clone wrote
 * and pushed out with more than two caches' worth of files (6-16 MB of
 * 13-24 MB missed per stream at 64 MiB): with groups of 4 its forward
 * reads missed once per group.  A lone miss (nothing
 * cached below it: scattered metadata, random reads) still fills its
 * group of 4 only, so the room fills take from other data grows only
 * where the neighbours are being read.  Replay (`bench/replay_means.py
 * --sizes 48M,56M,64M,72M,96M`) of ten captured streams of the git
 * benchmark (five runs in writethrough, five in writeback, each replayed
 * in its mode), mean read hit ratio by request / by bytes, before ->
 * after:
 *
 *   cache  all                            writethrough                   writeback
 *   48 M   0.781 / 0.719 -> 0.839 / 0.815  0.788 / 0.708 -> 0.841 / 0.803  0.775 / 0.729 -> 0.838 / 0.827
 *   56 M   0.859 / 0.841 -> 0.893 / 0.897  0.859 / 0.824 -> 0.889 / 0.880  0.858 / 0.859 -> 0.898 / 0.915
 *   64 M   0.924 / 0.933 -> 0.936 / 0.951  0.932 / 0.940 -> 0.944 / 0.955  0.916 / 0.927 -> 0.929 / 0.948
 *   72 M   0.943 / 0.946 -> 0.952 / 0.962  0.951 / 0.954 -> 0.959 / 0.968  0.936 / 0.939 -> 0.945 / 0.957
 *   96 M   0.975 / 0.972 -> 0.980 / 0.979  0.976 / 0.973 -> 0.980 / 0.980  0.974 / 0.970 -> 0.979 / 0.978
 *
 * By bytes every stream gains at every size.  By request one writeback
 * stream loses 0.008 at 64 and at 72 MiB (0.930 -> 0.922, 0.960 ->
 * 0.952): small reads of files the previous checkout wrote, dropped
 * sooner because the fills ahead take room; every other stream and size
 * is the same or better.  Measured and left on the first eight streams:
 * filling ahead after every miss (spans of 8: 96 MiB loses 0.002-0.007 by
 * request on three streams; spans of 16: up to 0.015), spans of 16 after
 * a cached block (better means, 0.941 / 0.957 at 64 MiB, but four streams
 * lose by request, one by 0.020 at 96 MiB), and groups of 8 for every
 * fill (72 and 96 MiB lose by request).  The synthetic traces at 4 KiB
 * blocks (bench/policy_traces.py, 5-25 % of the footprint from 8 MiB)
 * are unchanged or better: zipf, loop, writeonce and mixed the same
 * within 0.0005, hotscan 0.3199 / 0.2827 -> 0.3178 / 0.2740 read miss
 * ratio at 26 / 66 MiB.
 *
 * Spans of 16 (1 MiB at 64 KiB blocks) in place of 8, measured again
 * later on twelve writeback streams of the engine as it had become
 * (clean-block reinsertion, the capacity work): mean read hit ratio by
 * request / by bytes, spans of 8 -> 16,
 *
 *   48 M  0.897 / 0.753 -> 0.918 / 0.805     72 M  0.941 / 0.909 -> 0.951 / 0.921
 *   56 M  0.910 / 0.803 -> 0.930 / 0.847     96 M  0.964 / 0.944 -> 0.971 / 0.959
 *   64 M  0.928 / 0.865 -> 0.943 / 0.897
 *
 * Every stream gains by request at every size but one stream at 72 MiB
 * (-0.001); by bytes two streams lose at 72 MiB (up to 0.037), none
 * elsewhere.  Spans of 32 gain less at 96 MiB and lose there on four
 * streams; groups of 8 for lone misses too gain about as much on these
 * streams but fill more on random reads (4 KiB zipf(1.2) reads scattered
 * over 1 GiB, as bench zipf's fio job, replayed at 256 MiB: 12 % more
 * promotions, read hit ratio 0.9005 -> 0.8988), where spans of 16 leave
 * them as they were (0.9004) -- a lone miss's group stays 4 blocks.  The
 * synthetic traces at 4 KiB blocks are the same within 0.0005.
 *
 * A block is filled by one read at a time: a whole-block fill in flight
 * (a client miss's, a merged or a separate group fill) is registered with
 * its generation (block_fill_begin()), and while it is not stale, another
 * read of the block neither reads it for a group fill nor fills it from
 * its own miss: a client read waits for the fill (below), other reads
 * read only their own range.  So reads of one group
 * in flight at once -- a filesystem reading a directory's blocks -- read
 * the group once, not once per read: four 4 KiB misses of one group read
 * 1 MiB from the origin and counted 12 group fills before, 256 KiB and 3
 * now.  A write changes the generation: a fill under way from before it
 * no longer holds off a read after it, which fills the new data.
 *
 * Fill waits: a client read that would miss a block whose whole-block
 * fill is under way (and not stale) waits for the fill to end, then
 * starts its look-up again from the top, before anything of it is
 * classified or issued -- so it holds no lock, buffer or I/O while it
 * waits, and the fill's request never waits for it.  The second read
 * would otherwise go to the origin for data the cache is about to hold
 * (one more origin request, and a miss where replay of the same stream,
 * whose fill ends before the next request, counts a hit: 261-408 such
 * misses per run of the git benchmark in writeback).  A fill covers the
 * whole block, so it covers any read of the block.  Looking again from
 * the top keeps the read's ordering with writes as for any read: it sees
 * what the index holds when it restarts -- the filled copy, a write that
 * landed meanwhile (whose generation change dropped the fill), or
 * nothing if the fill failed or was dropped, and then it reads the origin
 * as before.  Every end of a fill wakes its waiters (block_fill_end() is
 * called on every path of finish(), errors included); a request waits at
 * most FILL_WAIT_MAX times.  If the volume failed over meanwhile (the
 * cache failed, the origin was fenced) it goes where a new request would.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/blocklock.h"
#include "engine/budget.h"
#include "engine/cache.h"
#include "engine/failure.h"
#include "engine/cacheio.h"
#include "engine/lostlog.h"
#include "engine/map.h"
#include "engine/originwin.h"
#include "engine/readahead.h"
#include "engine/readpath.h"
#include "engine/stream.h"
#include "io/bufpool.h"
#include "policy/policy.h"
#include "util/join.h"
#include "util/json.h"
#include "util/log.h"
#include "util/misc.h"

enum { P_HIT, P_MISS };

#define FILL_RHO_BLOCK 1.5       /* auto: whole blocks from this ratio ... */
#define FILL_RHO_GROUP 2.0       /* ... and groups from this one */
#define FILL_RHO_MARGIN 1.25     /* a choice is left this far past its threshold */
#define FILL_CACHE_WEIGHT 2      /* a byte a fill writes costs the cache this many writes */
#define FILL_PROBE 4             /* auto: 1 decision in 4 takes an unmeasured size ... */
#define FILL_PROBE_START 64      /* ... from the 64th on */
#define GROUP_WINDOW 256         /* fills over which usefulness is judged */
#define GROUP_USED_MIN_NUM 1     /* GROUP_USED_MIN: 1 in 3 read */
#define GROUP_USED_MIN_DEN 3
#define GROUP_PROBE 32           /* while not paying: 1 miss in 32 */
#define GROUP_BLOCKS 4          /* a power of two */
#define AHEAD_BLOCKS 16          /* a run's fill ahead: a power of two >= GROUP_BLOCKS */
#define GROUP_INFLIGHT 8
#define GROUP_PRIOR 16           /* a start as if this many fills were all read */
#define GROUP_GHOST_MAX 1024     /* blocks remembered (16 bytes each) ... */
#define GROUP_GHOST_SHARE 8      /* ... and at most 1/8 of the cache's */
#define FILL_WAIT_MAX 8          /* fill waits of one request, then it reads the origin */

struct rpiece {
    uint64_t oblock;
    uint16_t s0, s1;            /* sectors [s0, s1) of the block */
    uint8_t kind;
    bool admit, bad, gen_held;
    bool filling;               /* gen_held by block_fill_begin(): a whole-block fill */
    struct tc_mask valid, dirty;    /* the entry at classification */
    uint8_t *buf;               /* where the piece goes in the client's buffer */
    uint8_t *fbuf;              /* widened miss: the whole block, by sector */
    uint16_t fs1;               /* ... its sectors [0, fs1) (the origin may end sooner) */
    uint8_t *bounce;            /* first piece of a widened run: the buffer to free */
    size_t bounce_len;
    uint8_t *ovbuf;             /* miss: dirty cached sectors, by sector */
    uint8_t *redo_buf;          /* dirty sectors read again after a failure, by
                                   block sector; laid over last */
    bool merged;                /* a merged group fill (rreq.ext), no client piece */
    bool ahead;                 /* ... above its miss's group: a fill ahead */
    struct tc_mask redo_need;
    uint64_t gen;
};

/* Merged group fills: at most the blocks below the miss in its group and
 * those above it in its span of AHEAD_BLOCKS. */
#define EXT_MAX ((GROUP_BLOCKS - 1) + (AHEAD_BLOCKS - 1))

struct rreq;
static void read_start(struct ereq *e, bool sequential);
static void group_hit(struct cache *c, uint64_t oblock);
static bool group_gate(struct cache *c);
static bool group_may_fill(const struct cache *c);

/* One I/O: a run of cache sectors, or a run of origin bytes. */
struct rrun {
    struct rreq *r;
    struct tc_dev_io dio;
    struct cread cr;
    bool origin;
    bool widened;               /* read whole blocks into r->p[first].bounce */
    unsigned first, last;       /* pieces it serves */
    unsigned ext0, ext1;        /* and merged group fills r->ext[ext0, ext1) */
    uint64_t want_off, want_len;    /* the client's part of the run */
};

/* A cache run being built: contiguous sectors of one segment. */
struct pending_run {
    uint32_t seg;
    uint16_t off;
    uint32_t n;
    uint8_t *dst;
    unsigned first, last;
    bool open;
};

struct rreq {
    struct ereq *e;
    struct cache *c;
    struct rpiece *p;
    unsigned np;
    size_t psize;               /* p's bytes, for tc_obj_put() */
    struct tc_join join;        /* the reads of the current phase */
    bool retried;
    bool sequential;
    bool bypass;
    struct pending_run run;
    /* Merged group fills: blocks of the groups of the request's first and
     * last pieces read in the same origin request as a miss beside them
     * (no part of the client's buffer: s0 == s1 == 0, data in fbuf, which
     * points into the run's bounce buffer). */
    struct rpiece ext[EXT_MAX];
    unsigned next;
    /* The gate's answer for a group, asked once per request and group
     * (0: not asked, 1: fill, -1: not paying). */
    struct { uint64_t grp; int dec; } gd[2];
    unsigned ngd;
    /* Fill waits (see the top of the file): set before classification. */
    struct block_waiter fill_w;
    struct tc_task fill_task;
    unsigned fill_waits;
    /* What admitted misses fill (fill_decide()). */
    bool fill_decided, fill_block, fill_group;
};

static void phase_done(struct rreq *r);

/* ---- issuing I/O ---- */

static void run_end(struct rrun *run)
{
    struct rreq *r = run->r;
    tc_obj_put(run, sizeof *run);
    if (join_put(&r->join, 0))
        phase_done(r);
}

static void cache_run_done(struct cread *cr, int err)
{
    struct rrun *run = cr->priv;
    if (err)
        for (unsigned k = run->first; k <= run->last; k++)
            run->r->p[k].bad = true;
    run_end(run);
}

static void flush_run(struct rreq *r)
{
    struct pending_run *pr = &r->run;
    if (!pr->open)
        return;
    pr->open = false;
    struct rrun *run = tc_obj_get(sizeof *run);
    run->r = r;
    run->first = pr->first;
    run->last = pr->last;
    run->cr.seg = pr->seg;
    run->cr.off = pr->off;
    run->cr.n = pr->n;
    run->cr.buf = pr->dst;
    run->cr.cb = cache_run_done;
    run->cr.priv = run;
    join_get(&r->join);
    cache_read_verified(r->c, &run->cr);
}

/* Sector at (seg, off) goes to dst, for piece k: extend the run or start
 * another. */
static void add_sector(struct rreq *r, unsigned k, uint32_t seg, uint16_t off, uint8_t *dst)
{
    struct pending_run *pr = &r->run;
    if (pr->open && pr->seg == seg && pr->off + pr->n == off &&
        pr->dst + (size_t)pr->n * TC_SECTOR == dst) {
        pr->n++;
        pr->last = k;
        return;
    }
    flush_run(r);
    *pr = (struct pending_run){ .seg = seg, .off = off, .n = 1, .dst = dst, .first = k,
                                .last = k, .open = true };
}

/* Queue cache reads of the sectors of piece k in `want` into dst (indexed
 * by sector from s0). */
static void read_cached(struct rreq *r, unsigned k, uint32_t id, const struct tc_mask *want,
                        uint8_t *dst)
{
    struct cache *c = r->c;
    struct rpiece *p = &r->p[k];
    for (unsigned s = p->s0; s < p->s1; s++) {
        if (!mask_test(want, s))
            continue;
        uint32_t fid = ce_locate(&c->map.idx, id, s);
        struct tc_mask st;
        frag_stored(&c->map.idx, fid, &st);
        uint16_t off = (uint16_t)(frag_off(&c->map.idx, fid) + mask_rank(&st, s));
        add_sector(r, k, frag_seg(&c->map.idx, fid), off, dst + (size_t)(s - p->s0) * TC_SECTOR);
    }
}

static const char *fill_name(enum tc_fill f)
{
    switch (f) {
    case TC_FILL_AUTO: return "auto";
    case TC_FILL_BLOCK: return "block";
    case TC_FILL_SECTORS: return "sectors";
    case TC_FILL_GROUP: return "group";
    }
    return "?";
}

/* The level of a choice: sectors < block < group. */
static unsigned fill_level(enum tc_fill f)
{
    return f == TC_FILL_GROUP ? 2 : f == TC_FILL_BLOCK ? 1 : 0;
}

static enum tc_fill fill_of_level(unsigned l)
{
    return l >= 2 ? TC_FILL_GROUP : l == 1 ? TC_FILL_BLOCK : TC_FILL_SECTORS;
}

/* The level the ratio rho (a request's cost over a block's transfer)
 * calls for: see "Auto" at the top of the file. */
static unsigned rho_level(double rho)
{
    return rho >= FILL_RHO_GROUP ? 2 : rho >= FILL_RHO_BLOCK ? 1 : 0;
}

/*
 * The costs --fill auto weighs (see "Auto" at the top of the file), in
 * nanoseconds: the origin's per request and per byte read, the cache
 * devices' per request read and per byte written (the mean over the
 * devices in service that have an estimate), and the ratio rho they give
 * for one cache block.  origin_known: the origin is measured (else rho is
 * not used).  For tests, TIERCACHE_TEST_FILL_COST="OREQ_US,OMBPS,CREQ_US,
 * CWMBPS" (a request's cost in microseconds and a rate in MB/s, origin
 * read and cache write) fixes all four, and nothing measured is used.
 */
struct fill_costs {
    bool origin_known, cache_read_known, cache_write_known;
    double o_req, o_byte, c_req, c_wbyte;
    double rho;
};

static void fill_costs(struct cache *c, struct fill_costs *fc)
{
    memset(fc, 0, sizeof *fc);
    if (c->fillauto.test_costs) {
        fc->origin_known = fc->cache_read_known = fc->cache_write_known = true;
        fc->o_req = c->fillauto.test[0];
        fc->o_byte = c->fillauto.test[1];
        fc->c_req = c->fillauto.test[2];
        fc->c_wbyte = c->fillauto.test[3];
    } else {
        fc->origin_known = dev_cost_estimate(c->vol->origin, DEV_COST_READ, &fc->o_req, &fc->o_byte);
        unsigned nr = 0, nw = 0;
        double rsum = 0, wsum = 0;
        for (unsigned i = 0; i < c->ndevs; i++) {
            const struct cache_dev *cd = &c->devs[i];
            double req, byte, ns, len;
            if (cd->state != CDEV_OK || cd->dev == NULL)
                continue;
            /* With only small reads measured, their whole time stands for
             * the request (a bound from above: a 4 KiB transfer is in it;
             * the origin's request, its measure alike, pays the same
             * waits on a loaded host).  Writes need both classes: a large
             * write's time over its length would charge a wait for the
             * CPU (tens of milliseconds on a loaded host) to its bytes,
             * and count a slow origin's blocks as dear. */
            if (dev_cost_estimate(cd->dev, DEV_COST_READ, &req, &byte)) {
                rsum += req;
                nr++;
            } else if (dev_cost_class(cd->dev, DEV_COST_READ, 0, &ns, &len)) {
                rsum += ns;
                nr++;
            }
            if (dev_cost_estimate(cd->dev, DEV_COST_WRITE, &req, &byte)) {
                wsum += byte;
                nw++;
            }
        }
        fc->cache_read_known = nr > 0;
        fc->cache_write_known = nw > 0;
        fc->c_req = nr ? rsum / nr : 0;
        fc->c_wbyte = nw ? wsum / nw : 0;
    }
    /* What a later miss costs more than a hit: the origin's request over
     * the cache's (unmeasured, the cache's counts as 0).  What a block
     * more costs: its transfer from the origin, and its write to the cache
     * with the cleaner's later work on it (unmeasured, 0). */
    double gain = TC_MAX(fc->o_req - fc->c_req, 0.0);
    double blk = (double)c->block_size * (fc->o_byte + FILL_CACHE_WEIGHT * fc->c_wbyte);
    fc->rho = blk > 0 ? gain / blk : gain > 0 ? 1e9 : 0;
}

/* --fill auto's choice now, from the costs (struct fill_costs); kept in
 * c->fillauto for status. */
static enum tc_fill fill_auto_choice(struct cache *c, struct fill_costs *fc)
{
    fill_costs(c, fc);
    if (!fc->origin_known) {
        /* Not measured yet: whole blocks and groups for blocks of up to
         * 256 KiB (a disk's request costs about what 256 KiB of its
         * transfer does), the sectors read above. */
        c->fillauto.choice = c->block_size <= (256u << 10) ? TC_FILL_GROUP : TC_FILL_SECTORS;
        return c->fillauto.choice;
    }
    /* A choice is left only when rho is FILL_RHO_MARGIN past the
     * threshold: an origin near one does not flap. */
    unsigned lo = rho_level(fc->rho / FILL_RHO_MARGIN), hi = rho_level(fc->rho * FILL_RHO_MARGIN);
    unsigned l = TC_MIN(TC_MAX(fill_level(c->fillauto.choice), lo), hi);
    c->fillauto.choice = fill_of_level(l);
    return c->fillauto.choice;
}

/* What this request's admitted misses fill (--fill, and auto's choice),
 * decided once per request at its first admitted miss, so that its
 * classification and its origin reads agree.  Under auto, while the
 * origin's reads of the other size (small for block and group, large for
 * sectors) have fewer than DEV_COST_MIN samples, one decision in
 * FILL_PROBE from the FILL_PROBE_START-th on takes that size, so that both
 * get measured soon (FILL_PROBE * DEV_COST_MIN decisions later), and none
 * after; the first ones are left alone, as a short run's fills were
 * before auto measured anything; the reads the
 * origin serves anyway (misses not admitted, large client reads,
 * writeback's merge reads, read-ahead) keep the estimate current. */
static void fill_decide(struct rreq *r)
{
    struct cache *c = r->c;
    if (r->fill_decided)
        return;
    r->fill_decided = true;
    enum tc_fill f = c->vol->cfg.fill;
    if (f == TC_FILL_AUTO) {
        struct fill_costs fc;
        f = fill_auto_choice(c, &fc);
        unsigned other = f == TC_FILL_SECTORS ? 1 : 0;
        if (++c->fillauto.decisions % FILL_PROBE == 0 &&
            c->fillauto.decisions >= FILL_PROBE_START && !c->fillauto.test_costs &&
            c->vol->origin->cost.samples[DEV_COST_READ][other] < DEV_COST_MIN) {
            f = f == TC_FILL_SECTORS ? TC_FILL_BLOCK : TC_FILL_SECTORS;
            c->st.fill_probes++;
        }
        c->fillauto.decided[fill_level(f)]++;
    }
    r->fill_block = f == TC_FILL_BLOCK || f == TC_FILL_GROUP;
    r->fill_group = f == TC_FILL_GROUP;
}

void readpath_fill_status_json(struct cache *c, struct tc_json *j)
{
    struct fill_costs fc;
    const struct tc_dev_cost *dc = &c->vol->origin->cost;
    enum tc_fill f = c->vol->cfg.fill;
    if (f == TC_FILL_AUTO)
        f = fill_auto_choice(c, &fc);
    else
        fill_costs(c, &fc);
    json_begin_object(j, "fill");
    json_string(j, "mode", fill_name(c->vol->cfg.fill));
    json_string(j, "choice", fill_name(f));
    json_bool(j, "test_costs", c->fillauto.test_costs);
    json_bool(j, "origin_cost_known", fc.origin_known);
    json_double(j, "origin_request_us", fc.o_req / 1e3);
    json_double(j, "origin_bytes_per_second", fc.o_byte > 0 ? 1e9 / fc.o_byte : 0);
    json_double(j, "origin_block_us", fc.o_byte * (double)c->block_size / 1e3);
    json_bool(j, "cache_read_cost_known", fc.cache_read_known);
    json_double(j, "cache_request_us", fc.c_req / 1e3);
    json_bool(j, "cache_write_cost_known", fc.cache_write_known);
    json_double(j, "cache_write_bytes_per_second", fc.c_wbyte > 0 ? 1e9 / fc.c_wbyte : 0);
    json_double(j, "cache_block_write_us", fc.c_wbyte * (double)c->block_size / 1e3);
    /* rho (FILL_RHO_* against it) from the figures above. */
    json_double(j, "ratio", fc.rho);
    json_double(j, "ratio_block", FILL_RHO_BLOCK);
    json_double(j, "ratio_group", FILL_RHO_GROUP);
    json_double(j, "ratio_margin", FILL_RHO_MARGIN);
    json_uint(j, "cache_weight", FILL_CACHE_WEIGHT);
    /* The origin's two classes of reads the estimate is drawn from. */
    const unsigned R = DEV_COST_READ;
    json_uint(j, "origin_reads_sampled_small", dc->samples[R][0]);
    json_double(j, "origin_small_read_us", dc->ns[R][0] / 1e3);
    json_uint(j, "origin_small_read_bytes", (uint64_t)dc->len[R][0]);
    json_uint(j, "origin_reads_sampled_large", dc->samples[R][1]);
    json_double(j, "origin_large_read_us", dc->ns[R][1] / 1e3);
    json_uint(j, "origin_large_read_bytes", (uint64_t)dc->len[R][1]);
    /* Auto's decisions by what they filled (probes included). */
    json_uint(j, "decided_sectors", c->fillauto.decided[0]);
    json_uint(j, "decided_block", c->fillauto.decided[1]);
    json_uint(j, "decided_group", c->fillauto.decided[2]);
    json_uint(j, "probes", c->st.fill_probes);
    json_end_object(j);
}

static void origin_run_done(struct tc_dev_io *dio, int err)
{
    struct rrun *run = dio->priv;
    struct rreq *r = run->r;
    if (run->widened) {
        struct rpiece *p0 = &r->p[run->first];
        if (err == 0) {
            if (!r->c->data_free)
                memcpy(p0->buf, p0->bounce + (run->want_off - run->dio.off), run->want_len);
        } else {
            /* Read the client's range on its own: its error (or data) is
             * what the client gets; nothing of this run is filled. */
            for (unsigned k = run->first; k <= run->last; k++) {
                r->p[k].fbuf = NULL;
                r->p[k].admit = false;
            }
            for (unsigned k = run->ext0; k < run->ext1; k++) {
                r->ext[k].fbuf = NULL;
                r->ext[k].admit = false;
            }
            struct rrun *narrow = tc_obj_get(sizeof *narrow);     /* run_end() puts it */
            narrow->r = r;
            narrow->origin = true;
            narrow->first = run->first;
            narrow->last = run->last;
            narrow->dio.op = TC_DEV_READ;
            narrow->dio.buf = p0->buf;
            narrow->dio.off = run->want_off;
            narrow->dio.len = run->want_len;
            narrow->dio.cb = origin_run_done;
            narrow->dio.priv = narrow;
            join_get(&r->join);
            dev_submit(r->c->vol->origin, &narrow->dio);
            err = 0;
        }
    }
    join_error(&r->join, err);
    run_end(run);
}

/* Block b may be read for a merged group fill: in the volume, not cached,
 * not being filled by another read already, and nothing under way there
 * that could make the origin's data older than the block's (a write
 * holding its lock, a write to the origin). */
static bool ext_ok(struct cache *c, uint64_t b)
{
    return b * c->block_size < c->vol->size && index_lookup(&c->map.idx, b) == NIL &&
           !block_filling(c->locks, b) && !block_is_locked(c->locks, b) &&
           !owrite_overlaps(c->locks, b);
}

/* The gate's answer for group grp, asked at most once per request. */
static bool ext_gate(struct rreq *r, uint64_t grp)
{
    for (unsigned i = 0; i < r->ngd; i++)
        if (r->gd[i].grp == grp)
            return r->gd[i].dec > 0;
    bool open = group_gate(r->c);
    if (r->ngd < 2) {
        r->gd[r->ngd].grp = grp;
        r->gd[r->ngd].dec = open ? 1 : -1;
        r->ngd++;
    }
    return open;
}

/* Block b, read into the bounce buffer from wstart to wend, is filled with
 * the request as a merged group fill.  Its generation is held from before
 * the origin read is submitted: a write, trim or write-zeroes of b after
 * this point changes it, and the fill is dropped. */
static void add_ext(struct rreq *r, uint64_t b, uint8_t *bounce, uint64_t wstart, uint64_t wend)
{
    struct cache *c = r->c;
    struct rpiece *x = &r->ext[r->next++];
    memset(x, 0, sizeof *x);
    x->oblock = b;
    x->kind = P_MISS;
    x->merged = true;
    x->admit = true;
    x->gen = block_fill_begin(c->locks, b);
    x->gen_held = x->filling = true;
    uint64_t off = b * c->block_size;
    x->fbuf = bounce + (off - wstart);
    x->fs1 = (uint16_t)(TC_MIN(c->block_size, wend - off) / TC_SECTOR);
}

/* Origin read of pieces [first, last], a run of misses; at_end: the run
 * ends the request. */
static void origin_run(struct rreq *r, unsigned first, unsigned last, bool at_end)
{
    struct cache *c = r->c;
    struct rrun *run = tc_obj_get(sizeof *run);
    run->r = r;
    run->origin = true;
    run->first = first;
    run->last = last;
    struct rpiece *p0 = &r->p[first], *pl = &r->p[last];
    uint64_t start = p0->oblock * c->block_size + (uint64_t)p0->s0 * TC_SECTOR;
    uint64_t end = pl->oblock * c->block_size + (uint64_t)pl->s1 * TC_SECTOR;
    run->want_off = start;
    run->want_len = end - start;
    run->dio.op = TC_DEV_READ;
    run->dio.buf = p0->buf;
    run->dio.off = start;
    run->dio.len = end - start;
    /* Merged group fills: the blocks of the group of the request's first
     * (last) piece that lie just below (above) the run and are not cached
     * join its origin request, when the gate lets the group be filled.  On
     * a disk one request of 256 KiB costs little more than one of 4 KiB,
     * and a fill read with the miss is in the cache when the client reads
     * the neighbours -- a background fill of a slow origin queues behind
     * the client's requests and often lands after them.  Only the blocks
     * contiguous with the run: the rest of the group is left to
     * group_fill(). */
    unsigned nd = 0, nu = 0;
    bool client = !(r->e->flags & (EREQ_READAHEAD | EREQ_FORCE_ADMIT));
    if (client && r->fill_group && group_may_fill(c)) {
        uint64_t gmask = GROUP_BLOCKS - 1;
        if (first == 0 && p0->admit)
            while ((p0->oblock - nd) & gmask && ext_ok(c, p0->oblock - nd - 1))
                nd++;
        /* A miss just above a cached block continues a forward run (a
         * file or a pack read in order): fill ahead to the end of its
         * span of AHEAD_BLOCKS (see the top of the file). */
        uint64_t umask = p0->oblock > 0 && index_lookup(&c->map.idx, p0->oblock - 1) != NIL
                             ? AHEAD_BLOCKS - 1 : gmask;
        if (at_end && pl->admit)
            while (((pl->oblock + nu) & umask) != umask && ext_ok(c, pl->oblock + nu + 1))
                nu++;
        if (nd && !ext_gate(r, p0->oblock / GROUP_BLOCKS))
            nd = 0;
        if (nu && !ext_gate(r, pl->oblock / GROUP_BLOCKS))
            nu = 0;
    }
    bool partial = (p0->admit && p0->s0 > 0) || (pl->admit && pl->s1 < c->spb);
    bool widen = partial && r->fill_block;
    if (widen || nd || nu) {
        /* Whole blocks, one origin request; the client's part is copied
         * out when it returns. */
        uint64_t wstart = (p0->oblock - nd) * c->block_size;
        uint64_t wend = TC_MIN((pl->oblock + 1 + nu) * c->block_size, c->vol->size);
        run->widened = true;
        p0->bounce_len = wend - wstart;
        p0->bounce = bufpool_get(p0->bounce_len);
        if (widen)
            for (unsigned k = first; k <= last; k++) {
                struct rpiece *p = &r->p[k];
                uint64_t b = p->oblock * c->block_size;
                p->fbuf = p0->bounce + (b - wstart);
                p->fs1 = (uint16_t)(TC_MIN(c->block_size, wend - b) / TC_SECTOR);
            }
        run->ext0 = r->next;
        for (uint64_t b = p0->oblock - nd; b < p0->oblock; b++)
            add_ext(r, b, p0->bounce, wstart, wend);
        for (uint64_t b = pl->oblock + 1; b <= pl->oblock + nu; b++) {
            add_ext(r, b, p0->bounce, wstart, wend);
            r->ext[r->next - 1].ahead = b / GROUP_BLOCKS != pl->oblock / GROUP_BLOCKS;
        }
        run->ext1 = r->next;
        run->dio.buf = p0->bounce;
        run->dio.off = wstart;
        run->dio.len = wend - wstart;
    }
    run->dio.cb = origin_run_done;
    run->dio.priv = run;
    join_get(&r->join);
    dev_submit(c->vol->origin, &run->dio);
}

/* ---- classification ---- */

static void classify_and_issue(struct rreq *r)
{
    struct cache *c = r->c;
    struct ereq *e = r->e;
    bool free_space = space_has_free(&c->sp);
    uint64_t off = e->off, end = e->off + e->len;
    unsigned i = 0, miss_first = 0;
    bool in_miss = false;
    join_get(&r->join);         /* held while issuing */
    while (off < end) {
        unsigned k = i++;
        struct rpiece *p = &r->p[k];
        memset(p, 0, sizeof *p);
        p->oblock = off / c->block_size;
        uint64_t bstart = p->oblock * c->block_size;
        uint64_t pend = TC_MIN(end, bstart + c->block_size);
        p->s0 = (uint16_t)((off - bstart) / TC_SECTOR);
        p->s1 = (uint16_t)((pend - bstart) / TC_SECTOR);
        p->buf = (uint8_t *)e->buf + (off - e->off);
        off = pend;
        struct tc_mask want, lost;
        mask_range(&want, p->s0, p->s1);
        if (lost_get(&c->map.lost, p->oblock, &lost)) {
            mask_and(&lost, &want);
            if (!mask_empty(&lost) && c->draining) {
                /* Recorded lost only until the drain writes it back. */
                struct tc_mask drain;
                cache_drain_mask(c, index_lookup(&c->map.idx, p->oblock), &drain);
                mask_andnot(&lost, &drain);
            }
            if (!mask_empty(&lost)) {
                /* Dirty data lost with a failed device: never the origin's
                 * older data in its place. */
                join_error(&r->join, -EIO);
            }
        }
        uint32_t id = index_lookup(&c->map.idx, p->oblock);
        if (id != NIL)
            ce_get_masks(&c->map.idx, id, &p->valid, &p->dirty);
        if (id != NIL && !r->bypass && mask_covers(&p->valid, &want)) {
            p->kind = P_HIT;
            policy_hit(c->policy, p->oblock, &CE(&c->map.idx, id)->hint);
            if (!(e->flags & (EREQ_READAHEAD | EREQ_FORCE_ADMIT)))
                group_hit(c, p->oblock);
            if (in_miss) {
                origin_run(r, miss_first, k - 1, false);
                in_miss = false;
            }
            read_cached(r, k, id, &want, p->buf);
            continue;
        }
        p->kind = P_MISS;
        if (id != NIL && !r->bypass)
            policy_hit(c->policy, p->oblock, &CE(&c->map.idx, id)->hint);  /* read again, if partly */
        if (!in_miss) {
            flush_run(r);
            miss_first = k;
            in_miss = true;
        }
        struct tc_mask over = p->dirty;
        mask_and(&over, &want);
        if (id != NIL && !mask_empty(&over)) {
            /* Newer than the origin: read them now, lay them over later. */
            p->ovbuf = bufpool_get((size_t)(p->s1 - p->s0) * TC_SECTOR);
            read_cached(r, k, id, &over, p->ovbuf);
            flush_run(r);
        }
        struct tc_mask missing = want;
        mask_andnot(&missing, &p->valid);
        if (r->bypass || mask_empty(&missing)) {
            /* passthrough, or nothing the cache lacks */
        } else if (r->sequential && !(e->flags & EREQ_FORCE_ADMIT) && id == NIL &&
                   !policy_stream_hot(c->policy, p->oblock)) {
            /* A cold stream past the cutoff: a scan.  A stream over blocks
             * cached (partly) or seen before is hot and admitted. */
            c->st.bypassed_sequential += (uint64_t)(p->s1 - p->s0) * TC_SECTOR;
        } else if (e->vol->read_only || owrite_overlaps(c->locks, p->oblock)) {
            /* a write to the origin is under way here: do not cache */
        } else if (id != NIL || (e->flags & EREQ_FORCE_ADMIT) ||
                   policy_admit(c->policy, p->oblock, free_space)) {
            /* A partly cached block is in already: it takes the rest. */
            fill_decide(r);
            if (!r->fill_block) {
                p->admit = true;
                block_gen_hold(c->locks, p->oblock);
                p->gen_held = true;
                p->gen = block_gen(c->locks, p->oblock);
            } else if (block_filling(c->locks, p->oblock)) {
                /* Another read is filling the whole block from data as
                 * new as this one's (a group's reads in flight at once):
                 * this one reads only its own range, and fills nothing. */
                c->st.fills_under_way++;
            } else {
                /* The whole block is filled (widened, or read whole). */
                p->admit = true;
                p->gen = block_fill_begin(c->locks, p->oblock);
                p->gen_held = p->filling = true;
            }
        } else {
            c->st.not_admitted++;
        }
    }
    r->np = i;
    if (in_miss)
        origin_run(r, miss_first, r->np - 1, true);
    flush_run(r);
    if (join_put(&r->join, 0))
        phase_done(r);
}

/* ---- completion ---- */

/* Append the origin's data of an admitted miss; true if it was appended. */
static bool fill(struct rreq *r, struct rpiece *p)
{
    struct cache *c = r->c;
    if (!p->admit || p->bad)
        return false;
    if (block_gen(c->locks, p->oblock) != p->gen || block_is_locked(c->locks, p->oblock)) {
        c->st.fills_dropped++;
        return false;
    }
    struct tc_mask valid, dirty, stored, lost;
    uint32_t id = index_lookup(&c->map.idx, p->oblock);
    if (id != NIL) {
        ce_get_masks(&c->map.idx, id, &valid, &dirty);
        if (CE(&c->map.idx, id)->nfrags >= MAX_FRAGS) {
            c->st.fills_dropped++;
            return false;
        }
    } else {
        mask_clear(&valid);
    }
    /* The origin's data of these sectors is at hand: by block sector from
     * fbuf (a widened read), or from the client's buffer, which holds
     * only [s0, s1) -- and sectors of it the cache held dirty were laid
     * over, but those are valid and never stored. */
    if (p->fbuf)
        mask_range(&stored, 0, p->fs1);
    else
        mask_range(&stored, p->s0, p->s1);
    mask_andnot(&stored, &valid);
    if (lost_get(&c->map.lost, p->oblock, &lost))
        mask_andnot(&stored, &lost);
    if (mask_empty(&stored))
        return false;
    unsigned n = mask_count(&stored);
    if (!budget_allow(&c->budget, (uint64_t)n * TC_SECTOR)) {
        c->st.fills_dropped++;
        return false;
    }
    uint8_t *data = bufpool_get((size_t)n * TC_SECTOR);
    unsigned k = 0;
    for (unsigned s = 0; !c->data_free && s < c->spb; s++)
        if (mask_test(&stored, s))
            memcpy(data + (size_t)k++ * TC_SECTOR,
                   p->fbuf ? p->fbuf + (size_t)s * TC_SECTOR
                           : p->buf + (size_t)(s - p->s0) * TC_SECTOR,
                   TC_SECTOR);
    struct tc_mask clean;
    mask_clear(&clean);
    /* Data the origin acknowledged and has not flushed (a write around the
     * cache, a write-through version since dropped: the origin window; any
     * write of a run before that did not stop cleanly, until the first
     * origin flush of this one) is
     * what it returns, and a crash of the origin may take it back.  The
     * fill's copy would outlive that in the log as clean: after a restart
     * reads returned it, then the origin's older data once it left the
     * cache.  So such a fill is a write-through version: recovery takes it
     * for dirty until the stable mark (an origin flush) has passed it, and
     * writes it back. */
    bool wt = origin_window_overlaps(c, p->oblock * c->block_size, c->block_size);
    /* A split adds two fragments: only while the chain has room for both. */
    unsigned nfrags = id == NIL ? 0 : CE(&c->map.idx, id)->nfrags;
    struct append a = { .oblock = p->oblock, .type = TC_ENTRY_DATA, .valid = stored,
                        .dirty = clean, .data = data, .may_split = nfrags + 2 <= MAX_FRAGS,
                        .flags = wt ? TC_ENTRY_WT : 0 };
    struct log_loc at = log_append(c, &a, NULL);
    if (at.err == 0) {
        map_add_appended(c, p->oblock, id, &stored, &clean, &at, wt ? CE_WT : 0, false);
        c->st.promotions++;
        c->st.promotion_bytes += (uint64_t)n * TC_SECTOR;
        c->st.admitted_bytes += (uint64_t)n * TC_SECTOR;
        if (p->merged)
            ;                   /* counted in group_fills_merged when read */
        else if (p->fbuf)
            c->st.fills_block++;
        else
            c->st.fills_sectors++;
    } else {
        c->st.fills_dropped++;
        c->st.fills_dropped_room++;
    }
    bufpool_put(data, (size_t)n * TC_SECTOR);
    return at.err == 0;
}

/* ---- group fills (see the top of the file) ---- */


struct group_fill {
    struct ereq *e;
    void *buf;
    size_t len;
};

static uint64_t group_ghost_blocks(uint64_t cache_blocks)
{
    uint64_t n = TC_MIN(cache_blocks / GROUP_GHOST_SHARE, (uint64_t)GROUP_GHOST_MAX);
    return n ? n : 1;
}

void group_init(struct cache *c, uint64_t cache_blocks)
{
    /* For tests only: --fill auto's costs fixed (struct fill_costs). */
    const char *tc = getenv("TIERCACHE_TEST_FILL_COST");
    double v[4];
    if (tc && sscanf(tc, "%lf,%lf,%lf,%lf", &v[0], &v[1], &v[2], &v[3]) == 4) {
        c->fillauto.test_costs = true;
        c->fillauto.test[0] = v[0] * 1e3;
        c->fillauto.test[1] = v[1] > 0 ? 1e3 / v[1] : 0;
        c->fillauto.test[2] = v[2] * 1e3;
        c->fillauto.test[3] = v[3] > 0 ? 1e3 / v[3] : 0;
    }
    c->group.ghost = ghost_create(group_ghost_blocks(cache_blocks));
    /* A few scattered misses at the start (a mkfs reading its superblock
     * copies) must not close the gate before the load shows itself. */
    c->group.issued = c->group.used = GROUP_PRIOR;
}

/*
 * The cache holds cache_blocks blocks from now on (a device failed,
 * failure.c): the ghost is a share of those.  Sized by the whole cache, a
 * survivor's ghost remembered fills long since dropped from it unread --
 * a block cached again later by a miss of its own, then hit, still
 * counted as a group fill that was read -- and the gate could keep group
 * fills going on a load whose fills were not read while cached.  The
 * newest fills remembered stay (ghost_resize()), and the gate's counts
 * are left as they are: they are the load's.
 */
void group_resize(struct cache *c, uint64_t cache_blocks)
{
    if (c->group.ghost)
        ghost_resize(c->group.ghost, group_ghost_blocks(cache_blocks));
}

uint64_t group_ghost_capacity(const struct cache *c)
{
    return c->group.ghost ? ghost_capacity(c->group.ghost) : 0;
}

void group_fini(struct cache *c)
{
    ghost_destroy(c->group.ghost);
    c->group.ghost = NULL;
}

uint64_t group_memory(const struct cache *c)
{
    return c->group.ghost ? ghost_memory(c->group.ghost) : 0;
}

/* A client read hit oblock: a group fill's block read counts as used. */
static void group_hit(struct cache *c, uint64_t oblock)
{
    if (c->group.ghost && ghost_contains(c->group.ghost, oblock)) {
        ghost_remove(c->group.ghost, oblock);
        c->group.used++;
        c->st.group_fills_read++;
    }
}

static void group_done(struct ereq *e)
{
    struct group_fill *pf = e->owner;
    struct cache *c = e->vol->cache;
    if (c)
        c->group.inflight--;
    bufpool_put(pf->buf, pf->len);
    free(pf);
    ereq_free(e);
}

/* Block blk is read for a group fill: counted in the gate's window and
 * remembered in the ghost, so a client read hit on it counts as used. */
static void group_count(struct cache *c, uint64_t blk)
{
    if (++c->group.issued >= GROUP_WINDOW) {
        c->group.issued /= 2;
        c->group.used /= 2;
    }
    ghost_add(c->group.ghost, blk);
    c->st.group_fills++;
}

/* Do group fills pay for themselves?  While they do not, one miss in
 * GROUP_PROBE is let through.  Asked once per miss with something to
 * fill. */
static bool group_gate(struct cache *c)
{
    bool paying = c->group.used * GROUP_USED_MIN_DEN >= c->group.issued * GROUP_USED_MIN_NUM;
    return paying || c->group.probe++ % GROUP_PROBE == 0;
}

static bool group_may_fill(const struct cache *c)
{
    const struct tc_volume *vol = c->vol;
    return c->group.ghost != NULL && !vol->closing && !vol->gate && !vol->fenced &&
           !vol->detached && !vol->cache_failed && !vol->read_only;
}

/* Fill block `blk` (not cached) for a group fill. */
static void group_fill_one(struct cache *c, uint64_t blk)
{
    struct tc_volume *vol = c->vol;
    uint64_t off = blk * c->block_size;
    group_count(c, blk);
    struct group_fill *gf = tc_xcalloc(1, sizeof *gf);
    struct ereq *e = ereq_new(vol);
    gf->e = e;
    gf->len = TC_MIN((uint64_t)c->block_size, vol->size - off);
    gf->buf = bufpool_get(gf->len);
    e->op = TC_OP_READ;
    e->off = off;
    e->len = gf->len;
    e->buf = gf->buf;
    e->flags = EREQ_FORCE_ADMIT | EREQ_READAHEAD;
    e->complete = group_done;
    e->owner = gf;
    /* As engine_dispatch() counts a request of the cache path, so that a
     * detach or an attach waits for it; straight to the read, not through
     * cache_read(): it is no part of a client's stream. */
    e->via_cache = true;
    vol->cache_inflight++;
    c->group.inflight++;
    read_start(e, false);
}

/* A client read miss filled oblock: fill the rest of its group, if that
 * pays.  The gate is asked once per miss with something to fill, unless
 * the request asked it already for merged group fills (dec: 1 open, -1
 * closed, 0 not asked). */
static void group_fill(struct cache *c, uint64_t oblock, int dec)
{
    struct tc_volume *vol = c->vol;
    if (!group_may_fill(c))
        return;
    uint64_t first = oblock & ~(uint64_t)(GROUP_BLOCKS - 1), want[GROUP_BLOCKS];
    unsigned n = 0;
    for (uint64_t b = first; b < first + GROUP_BLOCKS; b++)
        if (b != oblock && b * c->block_size < vol->size &&
            index_lookup(&c->map.idx, b) == NIL && !block_filling(c->locks, b))
            want[n++] = b;
    if (n == 0)
        return;
    if (dec < 0 || (dec == 0 && !group_gate(c))) {
        c->st.group_fills_skipped += n;
        return;
    }
    for (unsigned i = 0; i < n && c->group.inflight < GROUP_INFLIGHT; i++)
        group_fill_one(c, want[i]);
}

static void finish(struct rreq *r)
{
    struct cache *c = r->c;
    struct ereq *e = r->e;
    unsigned hits = 0;
    uint64_t hit_bytes = 0;
    for (unsigned i = 0; i < r->np; i++) {
        struct rpiece *p = &r->p[i];
        if (p->kind == P_HIT) {
            hits++;
            hit_bytes += (uint64_t)(p->s1 - p->s0) * TC_SECTOR;
        }
        if (p->ovbuf && !p->bad && r->join.err == 0) {
            for (unsigned s = p->s0; s < p->s1; s++)
                if (mask_test(&p->dirty, s))
                    memcpy(p->buf + (size_t)(s - p->s0) * TC_SECTOR,
                           p->ovbuf + (size_t)(s - p->s0) * TC_SECTOR, TC_SECTOR);
        }
        if (p->redo_buf) {
            for (unsigned s = p->s0; s < p->s1; s++)
                if (mask_test(&p->redo_need, s))
                    memcpy(p->buf + (size_t)(s - p->s0) * TC_SECTOR,
                           p->redo_buf + (size_t)s * TC_SECTOR, TC_SECTOR);
            bufpool_put(p->redo_buf, (size_t)c->spb * TC_SECTOR);
            p->redo_buf = NULL;
            p->admit = false;
        }
    }
    /* A device failed while the read ran, losing dirty data it needed:
     * what was gathered meanwhile may be the origin's older copy. */
    if (r->join.err == 0 && cache_lost_overlaps(c, e->off, e->len))
        join_error(&r->join, -EIO);
    /* Blocks this client read filled whose groups may reach outside the
     * request: the first and the last (any between lie in groups the
     * request covers, or share the first's or the last's). */
    uint64_t grp[2];
    int dec[2] = { 0, 0 };
    unsigned ngrp = 0;
    bool client = !(e->flags & (EREQ_READAHEAD | EREQ_FORCE_ADMIT)) && r->fill_group;
    if (r->join.err == 0)
        for (unsigned i = 0; i < r->np; i++)
            if (fill(r, &r->p[i]) && client && (i == 0 || i == r->np - 1) &&
                (ngrp == 0 || grp[0] / GROUP_BLOCKS != r->p[i].oblock / GROUP_BLOCKS))
                grp[ngrp++] = r->p[i].oblock;
    for (unsigned i = 0; i < ngrp; i++)
        for (unsigned g = 0; g < r->ngd; g++)
            if (r->gd[g].grp == grp[i] / GROUP_BLOCKS)
                dec[i] = r->gd[g].dec;
    /* Merged group fills, read with the client's data (before the bounce
     * buffers they point into are freed below). */
    for (unsigned i = 0; i < r->next; i++) {
        struct rpiece *x = &r->ext[i];
        if (r->join.err == 0 && x->admit) {
            group_count(c, x->oblock);
            c->st.group_fills_merged++;
            c->st.group_fills_ahead += x->ahead;
            fill(r, x);
        }
        if (x->filling)
            block_fill_end(c->locks, x->oblock);
        else if (x->gen_held)
            block_gen_release(c->locks, x->oblock);
    }
    for (unsigned i = 0; i < r->np; i++) {
        struct rpiece *p = &r->p[i];
        if (p->ovbuf)
            bufpool_put(p->ovbuf, (size_t)(p->s1 - p->s0) * TC_SECTOR);
        if (p->filling)
            block_fill_end(c->locks, p->oblock);
        else if (p->gen_held)
            block_gen_release(c->locks, p->oblock);
        if (p->bounce)
            bufpool_put(p->bounce, p->bounce_len);
    }
    if (e->flags & (EREQ_READAHEAD | EREQ_SUB_READ)) {
        /* read-ahead: counted when a client read is answered from it;
         * a sub-read: its request is no read (engine.h) */
    } else if (hits == r->np) {
        c->st.read_hits++;
        if (r->fill_waits)
            c->st.fill_wait_hits++;
    } else {
        c->st.read_misses++;
        if (hits)
            c->st.read_partial++;
    }
    if (!(e->flags & (EREQ_READAHEAD | EREQ_SUB_READ))) {
        c->st.read_hit_bytes += hit_bytes;
        c->st.read_miss_bytes += e->len - hit_bytes;
    }
    e->err = r->join.err;
    tc_obj_put(r->p, r->psize);
    tc_obj_put(r, sizeof *r);
    e->complete(e);
    for (unsigned i = 0; i < ngrp; i++)
        group_fill(c, grp[i], dec[i]);
}

/* Dirty data of a piece whose cached copy failed: read again from the
 * cache as it is now (a failed device's data has moved to its mirror), then
 * from the mirror copies; EIO only if neither can be read. */
struct redo {
    struct rreq *r;
    struct rpiece *p;
    struct tc_mask need;
    uint8_t *buf;           /* the block, by sector */
};

static void redo_done(void *arg, int err)
{
    struct redo *x = arg;
    struct rreq *r = x->r;
    struct rpiece *p = x->p;
    struct cache *c = r->c;
    if (err) {
        /* Not lost here: the dirty sectors stay in the map, a later read
         * tries them again (an I/O error may pass; a device that fails
         * moves them to its mirrors or records them lost), and writeback
         * keeps trying to write them back.  They are lost -- counted in
         * lost_dirty_bytes and recorded with map_lose_dirty(), once --
         * only where the map gives up their last copy: the cleaner that
         * can neither write them back nor copy them, a write that
         * replaces them without them, a failed device without a mirror.
         * Meanwhile the read fails with EIO, as it will once they are
         * recorded lost: never the origin's older data. */
        uint64_t off = p->oblock * c->block_size;
        tc_error("cache: dirty data of origin bytes %llu..%llu is unreadable; the read fails "
                 "with EIO", (unsigned long long)(off + (uint64_t)p->s0 * TC_SECTOR),
                 (unsigned long long)(off + (uint64_t)p->s1 * TC_SECTOR - 1));
        err = -EIO;
        bufpool_put(x->buf, (size_t)c->spb * TC_SECTOR);
    } else {
        /* Laid over the origin's data in finish(), after every read. */
        p->redo_buf = x->buf;
        p->redo_need = x->need;
    }
    free(x);
    if (join_put(&r->join, err))
        finish(r);
}

/* A piece whose cached copy failed.  Dirty sectors it needs are read again
 * (redo); other sectors come from the origin: a hit is read again from it,
 * a miss has it already.  Returns true when an origin re-read is needed. */
static bool salvage(struct rreq *r, struct rpiece *p)
{
    struct cache *c = r->c;
    struct tc_mask need = p->dirty, range;
    mask_range(&range, p->s0, p->s1);
    mask_and(&need, &range);
    p->bad = false;
    p->admit = false;
    if (p->ovbuf) {
        bufpool_put(p->ovbuf, (size_t)(p->s1 - p->s0) * TC_SECTOR);
        p->ovbuf = NULL;
    }
    uint32_t id = index_lookup(&c->map.idx, p->oblock);
    if (id != NIL && !ce_any_dirty(&c->map.idx, id) && !block_is_locked(c->locks, p->oblock)) {
        /* Dropped with its tombstone (failure.h: from the cleaner's
         * reserve, or the block rewritten once there is room): without
         * it the log still held the block, so a checkpoint disagreed with
         * the log, and after a crash recovery brought the block back,
         * its older sectors served over a write around the cache since
         * (engine/read-damage-tombstone). */
        map_drop_block(c, p->oblock);
        block_gen_bump(c->locks, p->oblock);
        if (!c->vol->read_only)
            cache_tombstone(c, p->oblock);
        c->st.invalidations++;
        id = NIL;
    }
    if (!mask_empty(&need)) {
        struct redo *x = tc_xcalloc(1, sizeof *x);
        x->r = r;
        x->p = p;
        x->need = need;
        x->buf = bufpool_get((size_t)c->spb * TC_SECTOR);
        join_get(&r->join);
        cache_gather_robust(c, p->oblock, &need, x->buf, redo_done, x);
    }
    if (p->kind == P_MISS)
        return false;
    p->kind = P_MISS;
    /* A hit is read again from the origin, then the dirty sectors (read
     * again above) are laid over it -- in that order. */
    return true;
}

static void reread_done(struct tc_dev_io *dio, int err)
{
    struct rrun *run = dio->priv;
    struct rreq *r = run->r;
    tc_obj_put(run, sizeof *run);
    if (join_put(&r->join, err))
        finish(r);
}

/* All first reads are done.  Pieces whose cached copy failed get a second
 * chance (salvage), then the request finishes. */
static void phase_done(struct rreq *r)
{
    if (r->retried) {
        finish(r);
        return;
    }
    r->retried = true;
    join_get(&r->join);         /* held while issuing */
    for (unsigned i = 0; i < r->np; i++) {
        struct rpiece *p = &r->p[i];
        if (!p->bad || !salvage(r, p))
            continue;
        struct rrun *run = tc_obj_get(sizeof *run);
        run->r = r;
        run->dio.op = TC_DEV_READ;
        run->dio.buf = p->buf;
        run->dio.off = p->oblock * r->c->block_size + (uint64_t)p->s0 * TC_SECTOR;
        run->dio.len = (uint64_t)(p->s1 - p->s0) * TC_SECTOR;
        run->dio.cb = reread_done;
        run->dio.priv = run;
        join_get(&r->join);
        dev_submit(r->c->vol->origin, &run->dio);
    }
    if (join_put(&r->join, 0))
        finish(r);
}

/* A client read misses a block whose fill is under way: it waits for the
 * fill's end (true), once nothing of it is issued (see the top of the
 * file). */
static bool wait_for_fill(struct rreq *r)
{
    struct cache *c = r->c;
    struct ereq *e = r->e;
    if (r->bypass || (e->flags & (EREQ_READAHEAD | EREQ_FORCE_ADMIT)) ||
        r->fill_waits >= FILL_WAIT_MAX)
        return false;
    for (uint64_t off = e->off, end = e->off + e->len; off < end;) {
        uint64_t b = off / c->block_size, bstart = b * c->block_size;
        uint64_t pend = TC_MIN(end, bstart + c->block_size);
        if (block_filling(c->locks, b)) {
            struct tc_mask want, valid, dirty;
            mask_range(&want, (unsigned)((off - bstart) / TC_SECTOR),
                       (unsigned)((pend - bstart) / TC_SECTOR));
            uint32_t id = index_lookup(&c->map.idx, b);
            if (id != NIL)
                ce_get_masks(&c->map.idx, id, &valid, &dirty);
            if ((id == NIL || !mask_covers(&valid, &want)) &&
                !block_wait_fill(c->locks, b, &r->fill_w)) {
                r->fill_waits++;
                c->st.fill_waits++;
                return true;
            }
        }
        off = pend;
    }
    return false;
}

static void fill_restart(struct tc_task *t)
{
    struct rreq *r = container_of(t, struct rreq, fill_task);
    struct ereq *e = r->e;
    struct tc_volume *vol = e->vol;
    if (vol->fenced || vol->cache_failed || vol->detached) {
        /* Where engine_dispatch() sends a request now (it is counted in
         * the cache path already, as lost_passthrough() wants). */
        tc_obj_put(r->p, r->psize);
        tc_obj_put(r, sizeof *r);
        if (vol->fenced) {
            e->err = -EIO;
            e->complete(e);
        } else {
            lost_passthrough(e);
        }
        return;
    }
    if (!wait_for_fill(r))
        classify_and_issue(r);
}

/* The fill ended (block_fill_end(), maybe inside another request's
 * finish()): the look-up starts again from a task, on a shallow stack. */
static void fill_waited(struct block_waiter *w)
{
    struct rreq *r = container_of(w, struct rreq, fill_w);
    r->fill_task.fn = fill_restart;
    reactor_defer(r->c->reactor, &r->fill_task);
}

static void read_start(struct ereq *e, bool sequential)
{
    struct cache *c = e->vol->cache;
    struct rreq *r = tc_obj_get(sizeof *r);
    r->e = e;
    r->c = c;
    uint64_t first = e->off / c->block_size, last = (e->off + e->len - 1) / c->block_size;
    r->psize = (size_t)(last - first + 1) * sizeof *r->p;
    r->p = tc_obj_get(r->psize);
    r->sequential = sequential;
    r->bypass = e->vol->mode == TC_MODE_PASSTHROUGH;
    c->last_client_io_ns = tc_now_ns();
    /* Each block is looked up, and a miss asks the policy: start every
     * block's cache misses now, to wait for them together. */
    index_prefetch(&c->map.idx, first, last - first + 1);
    if (!r->bypass)
        for (uint64_t b = first; b <= last; b++)
            policy_prefetch(c->policy, b);
    r->fill_w.fn = fill_waited;
    if (!wait_for_fill(r))
        classify_and_issue(r);
}

/* A client read: a stream may be answered by read-ahead (when it is on:
 * c->ra, readahead.h).  Every read is counted in its stream, for the
 * sequential cutoff. */
void cache_read(struct ereq *e)
{
    struct cache *c = e->vol->cache;
    uint64_t stream_len;
    bool sequential = streams_sequential(c->streams, e->off, e->len, false, &stream_len);
    if (c->ra && e->vol->mode != TC_MODE_PASSTHROUGH && readahead_read(c, e, stream_len))
        return;
    read_start(e, sequential);
}

/* Read-ahead's own reads, and reads after read-ahead declined. */
void cache_read_direct(struct ereq *e)
{
    read_start(e, false);
}
