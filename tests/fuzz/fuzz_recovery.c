/*
 * Fuzzing recovery over whole cache images: cache_open_offline() (the
 * superblocks and the checks of a set), recovery_run() (every chunk
 * header and entry of src/engine/recovery.c), then cache_check() (the
 * audit behind `tiercache check`), as `tiercache check` runs them.
 *
 * A cache device is at least 2 MiB, mostly empty, so the input describes
 * one or two devices compactly; the harness writes them into memory files
 * (memfd, read through /proc/self/fd/N like any file) and hands their
 * names to the engine, which reads them through its own reactor and
 * device code.
 *
 * Input:
 *   byte 0    bits 0-1  repairs before the run: 0 none; 1 chunk headers
 *                       get the set's uuid and a right checksum, and the
 *                       superblocks a right checksum; 2-3 also the data
 *                       CRCs in chunk headers match the data
 *             bit 2     two devices
 *             bit 3     the origin ends 4 KiB into its last block
 *             bit 4     recovery only, no cache_check() (faster)
 *   byte 1    block size 4096 << (b % 9)
 *   byte 2    segment size 1 MiB << (b % 9), up to 256 MiB (65536 sectors,
 *             the limit of the 16-bit sector offsets)
 *   byte 3-4  segments on device 0 and 1: 1 + b % 40, fewer for large
 *             segments (at most 1 GiB of segments per device)
 *   byte 5-6  origin size in blocks - 1 (little-endian)
 *   then records, each written over the devices made by `tiercache
 *   format` (the harness writes their superblocks itself):
 *     u8   bit 7: device 1; bits 0-6: segment (modulo the count), or
 *          127 for the superblock area (the first MiB)
 *     u32  byte offset in the segment or area (modulo its size), LE
 *     u16  length, LE; then that many bytes (fewer if the input ends)
 *
 * Repairs apply to records that start a sector: one that starts with the
 * chunk magic is taken as a chunk header.  Seeds (tests/fuzz/corpus/
 * recovery/) hold the headers of real caches after a workload.
 *
 * Checked after recovery, whatever the images held: the state the daemon
 * would serve from is safe to use -- every index entry is for a block of
 * the origin and every fragment points inside a segment of a live group;
 * groups, segments and free lists agree; the dirty accounting adds up.
 * Then cache_check() must run to its end (the problems it finds are
 * expected: the images are damaged on purpose), unless the input asks
 * for recovery alone.  Any crash, sanitizer
 * report or failed invariant is a bug.
 *
 * A superblock with a valid checksum sizes the allocations of the engine
 * (origin size, segment counts); inputs whose superblocks ask for more
 * than a few hundred MiB are skipped, since the allocation is refused or
 * exhausts memory by design (see docs/FUZZING.md).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine/cache.h"
#include "engine/check.h"
#include "format/ondisk.h"
#include "io/reactor.h"
#include "util/crc32c.h"
#include "util/log.h"
#include "util/misc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "%s:%d: invariant failed: %s: ", __FILE__, __LINE__, #cond);   \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fprintf(stderr, "\n");                                                         \
            abort();                                                                       \
        }                                                                                  \
    } while (0)

#define SECTOR 4096u
#define AREA_RECORD 127
#define MAX_SEGS 40
#define MAX_SEG_BYTES (1ull << 30)     /* per device: the index is sized from it */
/* Largest engine allocations an input may ask for (see the top). */
#define MAX_ORIGIN_BLOCKS (1ull << 26)
#define MAX_TOTAL_SEGS 4096u

static const uint8_t set_uuid[16] = "fuzz-cache-set!";

struct dev_img {
    int fd;
    uint32_t nsegs, first;
    uint64_t size;
};

static struct tc_reactor reactor;
static bool debug;
static struct dev_img devs[2];

static void init_once(void)
{
    static bool done;
    if (done)
        return;
    done = true;
    debug = getenv("TC_FUZZ_DEBUG") != NULL;
    if (!debug)
        tc_log_open("/dev/null");
    tc_log_set_level(debug ? TC_LOG_INFO : TC_LOG_ERROR);
    if (reactor_init(&reactor, 256) < 0) {
        perror("io_uring");
        abort();
    }
    for (int d = 0; d < 2; d++) {
        devs[d].fd = memfd_create(d ? "fuzz-cache-1" : "fuzz-cache-0", MFD_CLOEXEC);
        if (devs[d].fd < 0) {
            perror("memfd_create");
            abort();
        }
    }
}

static void xpwrite(int fd, const void *p, size_t n, uint64_t off)
{
    if (pwrite(fd, p, n, (off_t)off) != (ssize_t)n) {
        perror("pwrite");
        abort();
    }
}

static void xpread(int fd, void *p, size_t n, uint64_t off)
{
    ssize_t r = pread(fd, p, n, (off_t)off);
    if (r < 0) {
        perror("pread");
        abort();
    }
    if ((size_t)r < n)
        memset((uint8_t *)p + r, 0, n - (size_t)r);
}

struct geometry {
    unsigned ndevs;
    uint32_t block_size, segment_size, seg_sectors, spb;
    uint64_t origin_size;
};

static void write_superblocks(const struct geometry *g)
{
    struct tc_superblock sb;
    memset(&sb, 0, sizeof sb);
    sb.version = TC_FORMAT_VERSION;
    memcpy(sb.set_uuid, set_uuid, 16);
    sb.dev_count = g->ndevs;
    sb.block_size = g->block_size;
    sb.segment_size = g->segment_size;
    sb.data_offset = TC_DATA_OFFSET;
    sb.origin_size = g->origin_size;
    sb.format_time = 1700000000;
    snprintf(sb.origin_id, sizeof sb.origin_id, "file:0:0:fuzz");
    snprintf(sb.origin_path, sizeof sb.origin_path, "fuzz-origin.img");
    for (unsigned d = 0; d < g->ndevs; d++) {
        sb.dev_segments[d] = devs[d].nsegs;
        memset(sb.dev_uuids[d], 'a' + (int)d, 16);
        sb.total_segments += devs[d].nsegs;
    }
    uint8_t buf[TC_SB_SIZE];
    for (unsigned d = 0; d < g->ndevs; d++) {
        memcpy(sb.dev_uuid, sb.dev_uuids[d], 16);
        sb.dev_index = d;
        sb.dev_size = devs[d].size;
        sb.segment_count = devs[d].nsegs;
        sb.first_segment = devs[d].first;
        sb_encode(&sb, buf);
        xpwrite(devs[d].fd, buf, TC_SB_SIZE, 0);
        xpwrite(devs[d].fd, buf, TC_SB_SIZE, TC_SB_SIZE);
    }
}

/* A chunk header written at off (sector-aligned) of segment s of device d:
 * the set's uuid, data CRCs if asked, and its checksum. */
static void repair_chunk(const struct geometry *g, unsigned d, uint32_t s, uint32_t sector,
                         bool data_crcs)
{
    uint64_t seg_base = TC_DATA_OFFSET + (uint64_t)s * g->segment_size;
    uint8_t hdr[TC_MAX_HDR_SECTORS * SECTOR];
    xpread(devs[d].fd, hdr, sizeof hdr, seg_base + (uint64_t)sector * SECTOR);
    if (le64_get(hdr + CH_OFF_MAGIC) != TC_CHUNK_MAGIC)
        return;
    memcpy(hdr + CH_OFF_SET_UUID, set_uuid, 16);
    uint32_t hs = le16_get(hdr + CH_OFF_HDR_SECTORS);
    if (hs < 1 || hs > TC_MAX_HDR_SECTORS || sector + hs > g->seg_sectors) {
        xpwrite(devs[d].fd, hdr, SECTOR, seg_base + (uint64_t)sector * SECTOR);
        return;
    }
    size_t len = (size_t)hs * SECTOR;
    uint32_t n = le32_get(hdr + CH_OFF_NR_ENTRIES), ds = le32_get(hdr + CH_OFF_DATA_SECTORS);
    if (data_crcs && tc_chunk_header_bytes(g->spb, n, ds) <= len &&
        (uint64_t)sector + hs + ds <= g->seg_sectors) {
        uint8_t *crcs = hdr + CH_OFF_ENTRIES + (size_t)n * tc_entry_size(g->spb);
        uint8_t *dat = tc_xmalloc((size_t)ds * SECTOR);
        xpread(devs[d].fd, dat, (size_t)ds * SECTOR, seg_base + (uint64_t)(sector + hs) * SECTOR);
        for (uint32_t i = 0; i < ds; i++)
            le32_put(crcs + 4 * i, tc_crc32c(0, dat + (size_t)i * SECTOR, SECTOR));
        free(dat);
    }
    le32_put(hdr + CH_OFF_CRC, 0);
    le32_put(hdr + CH_OFF_CRC, tc_crc32c(0, hdr, len));
    xpwrite(devs[d].fd, hdr, len, seg_base + (uint64_t)sector * SECTOR);
}

/* After superblock-area records: checksums made right again, and the
 * sizes the engine would allocate for bounded.  False: skip the input. */
static bool repair_superblocks(unsigned ndevs, bool repair)
{
    for (unsigned d = 0; d < ndevs; d++) {
        for (unsigned copy = 0; copy < TC_SB_COPIES; copy++) {
            uint8_t buf[TC_SB_SIZE];
            xpread(devs[d].fd, buf, TC_SB_SIZE, copy * TC_SB_SIZE);
            if (repair) {
                le32_put(buf + SB_OFF_CRC, 0);
                le32_put(buf + SB_OFF_CRC, tc_crc32c(0, buf, TC_SB_SIZE));
                xpwrite(devs[d].fd, buf, TC_SB_SIZE, copy * TC_SB_SIZE);
            }
            struct tc_superblock sb;
            char err[160];
            if (sb_decode(buf, &sb, err, sizeof err) == 0 &&
                (sb.origin_size / sb.block_size > MAX_ORIGIN_BLOCKS ||
                 sb.total_segments > MAX_TOTAL_SEGS))
                return false;
        }
    }
    return true;
}

static unsigned popcount(const struct tc_mask *m)
{
    unsigned n = 0;
    for (unsigned w = 0; w < TC_MASK_WORDS; w++)
        n += (unsigned)__builtin_popcountll(m->w[w]);
    return n;
}

/* What the daemon relies on after recovery, whatever the devices held. */
static void check_recovered(struct cache *c)
{
    uint32_t nsegs = 0;
    for (unsigned d = 0; d < c->ndevs; d++)
        nsegs += c->devs[d].nsegs;
    CHECK(nsegs == c->sp.nsegs, "%u segments on the devices, %u in the set", nsegs, c->sp.nsegs);
    for (unsigned d = 0; d < c->ndevs; d++)
        CHECK((uint64_t)c->devs[d].first_seg + c->devs[d].nsegs <= c->sp.nsegs,
              "device %u: segments %u + %u of %u", d, c->devs[d].first_seg, c->devs[d].nsegs,
              c->sp.nsegs);

    /* Groups and segments. */
    CHECK(c->sp.ngroups <= c->sp.groups_cap, "%u groups, room for %u", c->sp.ngroups, c->sp.groups_cap);
    uint8_t *in_group = tc_xcalloc(c->sp.nsegs, 1);
    uint64_t prev_seq = 0;
    for (uint32_t i = 0; i < c->sp.ngroups; i++) {
        uint32_t slot = (c->sp.group_tail + i) % c->sp.groups_cap;
        struct group *g = group_at(&c->sp, slot);
        CHECK(g->nsegs >= 1 && g->nsegs <= c->ndevs, "group %llu has %u segments",
              (unsigned long long)g->seq, g->nsegs);
        CHECK(i == 0 || g->seq > prev_seq, "groups out of order");
        CHECK(g->seq < c->lg.next_seq, "group %llu, next sequence %llu",
              (unsigned long long)g->seq, (unsigned long long)c->lg.next_seq);
        prev_seq = g->seq;
        for (unsigned k = 0; k < g->nsegs; k++) {
            uint32_t s = g->segs[k];
            CHECK(s < c->sp.nsegs, "group %llu holds segment %u of %u", (unsigned long long)g->seq,
                  s, c->sp.nsegs);
            CHECK(!in_group[s], "segment %u in two groups", s);
            in_group[s] = 1;
            struct segment *sg = space_seg(&c->sp, s);
            CHECK(sg->group == slot && sg->seq == g->seq && sg->state == SEG_CLOSED,
                  "segment %u: group %u state %u", s, sg->group, sg->state);
            for (unsigned k2 = 0; k2 < k; k2++)
                CHECK(space_seg(&c->sp, g->segs[k2])->dev != sg->dev,
                      "group %llu holds two segments of device %u", (unsigned long long)g->seq,
                      sg->dev);
        }
    }
    uint32_t free_segs = 0;
    for (uint32_t s = 0; s < c->sp.nsegs; s++) {
        struct segment *sg = space_seg(&c->sp, s);
        CHECK(sg->fill <= c->seg_sectors, "segment %u filled to %u of %u", s, sg->fill,
              c->seg_sectors);
        for (uint32_t k = 0; k < sg->nchunks; k++) {
            const struct chunk_ref *cr = &sg->chunks[k];
            CHECK((uint32_t)cr->start + cr->hdr_sectors + cr->data_sectors <= sg->fill,
                  "segment %u: a chunk past the fill", s);
        }
        if (!in_group[s]) {
            CHECK(sg->state == SEG_FREE && sg->nchunks == 0 && sg->live == 0,
                  "segment %u outside the groups but in state %u", s, sg->state);
            free_segs++;
        }
    }
    CHECK(free_segs == c->sp.free_segs, "%u free segments counted, %u found", c->sp.free_segs,
          free_segs);
    uint32_t listed = 0;
    for (unsigned d = 0; d < c->ndevs; d++) {
        for (uint32_t i = 0; i < c->sp.stacks[d].n; i++) {
            uint32_t s = c->sp.stacks[d].segs[i];
            CHECK(s < c->sp.nsegs && space_seg(&c->sp, s)->dev == d && in_group[s] == 0,
                  "device %u: free list holds segment %u", d, s);
            in_group[s] = 2;
        }
        listed += c->sp.stacks[d].n;
    }
    CHECK(listed == free_segs, "%u segments on free lists, %u free", listed, free_segs);

    /* The index. */
    uint64_t dirty_sectors = 0, dirty_blocks = 0, count = 0;
    for (uint32_t id = 0; id < c->map.idx.used; id++) {
        struct centry *e = CE(&c->map.idx, id);
        if (ce_is_free(e))
            continue;
        count++;
        CHECK(ce_oblock(e) < c->nblocks_origin, "block %llu of %llu",
              (unsigned long long)ce_oblock(e), (unsigned long long)c->nblocks_origin);
        CHECK(index_lookup(&c->map.idx, ce_oblock(e)) == id, "block %llu not found by lookup",
              (unsigned long long)ce_oblock(e));
        struct tc_mask v, dm;
        ce_get_masks(&c->map.idx, id, &v, &dm);
        for (unsigned s = c->spb; s < 64 * TC_MASK_WORDS; s++)
            CHECK(!mask_test(&v, s), "block %llu: sector %u of %u valid",
                  (unsigned long long)ce_oblock(e), s, c->spb);
        CHECK(mask_covers(&v, &dm), "block %llu: dirty sectors not valid",
              (unsigned long long)ce_oblock(e));
        unsigned nd = mask_count(&dm);
        dirty_sectors += nd;
        dirty_blocks += nd > 0;
        bool bit = (c->map.dirty_bits[ce_oblock(e) / 64] >> (ce_oblock(e) % 64)) & 1;
        CHECK(bit == (nd > 0), "block %llu: dirty bit %d, %u dirty sectors",
              (unsigned long long)ce_oblock(e), bit, nd);
        /* A writer never makes more than MAX_FRAGS fragments, but a log
         * can hold more versions of a block, each with sectors of its own,
         * and recovery keeps them all (the next write merges them).  What
         * must hold: every fragment still serves a sector (so the chain is
         * no longer than the block), and the count agrees (modulo its 8
         * bits: 256 fragments, possible with 1 MiB blocks, wrap it to 0;
         * see docs/FUZZING.md). */
        unsigned nf = 0;
        for (uint32_t f = ce_head(&c->map.idx, id); f != NIL; f = frag_next(&c->map.idx, f)) {
            CHECK(++nf <= c->spb, "block %llu: more fragments than sectors",
                  (unsigned long long)ce_oblock(e));
            struct cfrag fr = frag_view(&c->map.idx, f);
            struct tc_mask st, cur;
            frag_stored(&c->map.idx, f, &st);
            frag_current(&c->map.idx, id, f, &cur);
            unsigned n = popcount(&st);
            CHECK(n >= 1 && n <= c->spb && !mask_empty(&cur),
                  "block %llu: a fragment of %u sectors, %u of them current",
                  (unsigned long long)ce_oblock(e), n, popcount(&cur));
            for (int copy = 0; copy < 2; copy++) {
                uint32_t seg = copy ? fr.mseg : fr.seg;
                uint32_t off = copy ? fr.moff : fr.off;
                if (copy && seg == NIL)
                    continue;
                CHECK(seg < c->sp.nsegs && in_group[seg] == 1,
                      "block %llu: a fragment in segment %u, which is not live",
                      (unsigned long long)ce_oblock(e), seg);
                CHECK(off + n <= c->seg_sectors, "block %llu: %u sectors at %u:%u",
                      (unsigned long long)ce_oblock(e), n, seg, off);
            }
        }
        CHECK(nf % 256 == e->nfrags && nf >= 1, "block %llu: %u fragments, counted %u",
              (unsigned long long)ce_oblock(e), nf, e->nfrags);
    }
    CHECK(count == c->map.idx.count, "%llu blocks in the index, counted %llu",
          (unsigned long long)count, (unsigned long long)c->map.idx.count);
    CHECK(dirty_sectors == c->map.dirty_sectors && dirty_blocks == c->map.dirty_blocks,
          "dirty: %llu sectors in %llu blocks, counted %llu in %llu",
          (unsigned long long)dirty_sectors, (unsigned long long)dirty_blocks,
          (unsigned long long)c->map.dirty_sectors, (unsigned long long)c->map.dirty_blocks);
    free(in_group);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 7)
        return 0;
    init_once();
    unsigned repair = data[0] & 3;
    struct geometry g;
    g.ndevs = (data[0] & 4) ? 2 : 1;
    g.block_size = 4096u << (data[1] % 9);
    g.segment_size = (1u << 20) << (data[2] % 9);
    g.seg_sectors = g.segment_size / SECTOR;
    g.spb = g.block_size / SECTOR;
    uint64_t blocks = 1 + (uint64_t)le16_get(data + 5);
    g.origin_size = blocks * g.block_size;
    if ((data[0] & 8) && g.block_size > SECTOR)
        g.origin_size -= g.block_size - SECTOR;
    uint32_t first = 0;
    for (unsigned d = 0; d < 2; d++) {
        uint32_t max = (uint32_t)TC_MIN((uint64_t)MAX_SEGS, MAX_SEG_BYTES / g.segment_size);
        devs[d].nsegs = d < g.ndevs ? 1 + data[3 + d] % max : 0;
        devs[d].first = first;
        first += devs[d].nsegs;
        devs[d].size = TC_DATA_OFFSET + (uint64_t)devs[d].nsegs * g.segment_size;
        if (ftruncate(devs[d].fd, 0) < 0 || ftruncate(devs[d].fd, (off_t)devs[d].size) < 0) {
            perror("ftruncate");
            abort();
        }
    }
    write_superblocks(&g);

    /* The records, then the repairs, in the same order. */
    struct rec { unsigned d; uint32_t seg; uint64_t off; } recs[256];
    unsigned nrecs = 0;
    bool area = false;
    size_t pos = 7;
    while (size - pos >= 7) {
        uint8_t where = data[pos];
        uint32_t off = le32_get(data + pos + 1);
        size_t len = le16_get(data + pos + 5);
        pos += 7;
        len = TC_MIN(len, size - pos);
        unsigned d = (where >> 7) % g.ndevs;
        uint64_t base, span;
        uint32_t seg = 0;
        if ((where & 0x7f) == AREA_RECORD) {
            base = 0;
            span = TC_DATA_OFFSET;
            area = true;
        } else {
            seg = (where & 0x7f) % devs[d].nsegs;
            base = TC_DATA_OFFSET + (uint64_t)seg * g.segment_size;
            span = g.segment_size;
        }
        uint64_t at = off % span;
        size_t n = (size_t)TC_MIN((uint64_t)len, span - at);
        if (n)
            xpwrite(devs[d].fd, data + pos, n, base + at);
        pos += len;
        if ((where & 0x7f) != AREA_RECORD && at % SECTOR == 0 && nrecs < TC_ARRAY_SIZE(recs))
            recs[nrecs++] = (struct rec){ d, seg, at };
    }
    if (repair)
        for (unsigned i = 0; i < nrecs; i++)
            repair_chunk(&g, recs[i].d, recs[i].seg, (uint32_t)(recs[i].off / SECTOR),
                         repair >= 2);
    if (area && !repair_superblocks(g.ndevs, repair != 0))
        return 0;

    char paths_buf[2][64];
    const char *paths[3] = { NULL, NULL, NULL };
    for (unsigned d = 0; d < g.ndevs; d++) {
        snprintf(paths_buf[d], sizeof paths_buf[d], "/proc/self/fd/%d", devs[d].fd);
        paths[d] = paths_buf[d];
    }
    struct tc_volume_config cfg;
    tc_volume_config_defaults(&cfg);
    char err[1024];
    err[0] = 0;
    struct cache *c = cache_open_offline(&reactor, paths, &cfg, err, sizeof err);
    if (c == NULL) {
        CHECK(area, "the set as formatted was refused: %s", err);
        CHECK(err[0] != 0, "refused without a reason");
        if (debug)
            fprintf(stderr, "refused: %s\n", err);
        return 0;
    }
    check_recovered(c);
    struct check_result res;
    memset(&res, 0, sizeof res);
    if (!(data[0] & 16))
        cache_check(c, &res, false);
    if (debug) {
        fprintf(stderr, "recovered %llu blocks, %llu dirty sectors, %u groups; check: %u "
                "problems\n", (unsigned long long)c->map.idx.count,
                (unsigned long long)c->map.dirty_sectors, c->sp.ngroups, res.nproblems);
        for (unsigned i = 0; i < res.nproblems && i < 20; i++)
            fprintf(stderr, "  %s\n", res.problems[i]);
    }
    check_result_free(&res);
    cache_close_offline(c);
    CHECK(reactor.inflight == 0, "%llu operations still in flight after close",
          (unsigned long long)reactor.inflight);
    return 0;
}
