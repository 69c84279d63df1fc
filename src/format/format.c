/*
 * tiercache format: write the superblocks of a new cache set.
 *
 * Every check runs before anything is written: sizes, the devices' current
 * contents (a tiercache superblock or a file system is refused without
 * --force), devices named twice, a cache device that is the origin, an
 * origin that holds a tiercache superblock (--cache and --origin swapped:
 * refused even with --force, which would destroy the real origin), a sparse
 * cache file whose file system lacks the room to fill it, and the claims
 * (io/claim.c): every cache device exclusively, its old set's identity too,
 * the origin shared, so a set in use is never formatted.  Then cache files
 * are preallocated (fallocate), and each device gets two copies of its
 * superblock and a flush.  Nothing else is written: chunks left from an
 * earlier use carry another set's UUID and are never read as ours.
 *
 * Why preallocate: a sparse cache file takes room from its file system only
 * as the log fills it.  If the file system fills up first, a cache write
 * fails (ENOSPC) long after format said yes, the device fails, and dirty
 * data that was only in the cache is lost.  A preallocated file can never
 * run out of room.  --allow-sparse keeps a sparse file sparse, knowingly.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "format/format.h"
#include "io/claim.h"
#include "io/dev.h"
#include "io/originrec.h"
#include "io/reactor.h"
#include "util/log.h"
#include "util/misc.h"
#include "util/parse.h"

#define PROBE_BYTES (68u << 10)

const char *tc_detect_signature(const uint8_t *b, size_t len)
{
    if (len >= TC_SB_SIZE * 2 && (sb_has_magic(b) || sb_has_magic(b + TC_SB_SIZE)))
        return "tiercache cache device";
    if (len >= 1082 && b[1080] == 0x53 && b[1081] == 0xEF)
        return "ext2/3/4 file system";
    if (len >= 4 && memcmp(b, "XFSB", 4) == 0)
        return "XFS file system";
    if (len >= 65600 + 8 && memcmp(b + 65600, "_BHRfS_M", 8) == 0)
        return "btrfs file system";
    if (len >= 6 && memcmp(b, "LUKS\xba\xbe", 6) == 0)
        return "LUKS encrypted volume";
    if (len >= 4096 && memcmp(b + 4086, "SWAPSPACE2", 10) == 0)
        return "swap space";
    if (len >= 520 && memcmp(b + 512, "EFI PART", 8) == 0)
        return "GPT partition table";
    if (len >= 512 && b[510] == 0x55 && b[511] == 0xAA) {
        /* A boot sector: an MBR with at least one partition entry. */
        for (int i = 0; i < 4; i++)
            if (b[446 + 16 * i + 4] != 0)
                return "MBR partition table";
    }
    if (len >= 0x8001 + 5 && memcmp(b + 0x8001, "CD001", 5) == 0)
        return "ISO 9660 file system";
    return NULL;
}

/* A cache file's allocation: bytes still unallocated (*missing) and free
 * on its file system (*avail).  false if path is not a regular file. */
static bool file_room(const char *path, uint64_t size, uint64_t *missing, uint64_t *avail)
{
    struct stat st;
    struct statvfs vfs;
    if (stat(path, &st) < 0 || !S_ISREG(st.st_mode) || statvfs(path, &vfs) < 0)
        return false;
    uint64_t have = (uint64_t)st.st_blocks * 512;
    *missing = have >= size ? 0 : size - have;
    *avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
    return true;
}

/* Allocate the whole file now (its contents stay as they are). */
static int preallocate(const char *path, uint64_t size)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = 0;
    if (fallocate(fd, 0, 0, (off_t)size) < 0 || fsync(fd) < 0)
        rc = -errno;
    close(fd);
    return rc;
}

uint32_t tc_format_segment_size(uint64_t usable, uint32_t block_size)
{
    uint32_t seg = TC_DEFAULT_SEGMENT_SIZE;
    /* The cleaner keeps a few segments per device free (its reserve and
     * working room): with 64 or more segments that is a few percent of
     * the device, with 16 (64 MiB of 4 MiB segments) a third. */
    while (seg > TC_MIN_SEGMENT_SIZE && usable / seg < 64)
        seg /= 2;
    return TC_MAX(seg, 4 * block_size);
}

/* The offset of the first byte that is not zero in the device's first
 * plen bytes (already read into probe), in DATA_SAMPLES reads of
 * DATA_SAMPLE bytes spread evenly over the rest, or -- a regular file --
 * at the start of any of its first DATA_EXTENTS extents that hold data
 * (SEEK_DATA: a raw image used as an origin is often a sparse file with
 * its data anywhere, which the samples miss): *at, or UINT64_MAX when all
 * read zero.  0, or -errno of a failed read.  probe is overwritten. */
#define DATA_SAMPLES 8u
#define DATA_SAMPLE (64u << 10)
#define DATA_EXTENTS 4096u
#define DATA_EXTENT_READ 4096u

static bool nonzero(const uint8_t *b, uint64_t len, uint64_t off, uint64_t *at)
{
    for (uint64_t i = 0; i < len; i++) {
        if (b[i]) {
            *at = off + i;
            return true;
        }
    }
    return false;
}

/* The start of each data extent of a regular file, read (a 4 KiB
 * sector): the extents of a sparse image are where its data is. */
static int find_data_extents(const char *path, struct tc_dev *dev, uint8_t *probe,
                             uint64_t *at)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;       /* the samples were read: nothing more to learn */
    struct stat st;
    uint64_t size = tc_round_down(dev->size, 4096);
    int rc = 0;
    off_t from = 0;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
        goto out;
    for (unsigned n = 0; n < DATA_EXTENTS && (uint64_t)from < size; n++) {
        off_t d = lseek(fd, from, SEEK_DATA);
        if (d < 0)
            break;      /* ENXIO: no data past from; EINVAL: not supported */
        off_t h = lseek(fd, d, SEEK_HOLE);
        if (h < 0 || h <= d)
            h = (off_t)size;
        uint64_t off = tc_round_down((uint64_t)d, 4096);
        if (off >= size)
            break;
        uint64_t len = TC_MIN((uint64_t)DATA_EXTENT_READ, size - off);
        int e = dev_sync_io(dev, TC_DEV_READ, probe, off, len, 0);
        if (e) {
            rc = e;
            goto out;
        }
        if (nonzero(probe, len, off, at))
            goto out;
        from = h;
    }
out:
    close(fd);
    return rc;
}

static int find_data(const char *path, struct tc_dev *dev, uint8_t *probe, size_t plen,
                     uint64_t *at)
{
    *at = UINT64_MAX;
    if (nonzero(probe, plen, 0, at))
        return 0;
    uint64_t size = tc_round_down(dev->size, 4096);
    for (unsigned k = 1; k <= DATA_SAMPLES; k++) {
        uint64_t off = tc_round_down(size / DATA_SAMPLES * k, 4096);
        off = off >= DATA_SAMPLE ? off - DATA_SAMPLE : 0;
        if (off < plen)
            continue;
        uint64_t len = TC_MIN((uint64_t)DATA_SAMPLE, size - off);
        int e = dev_sync_io(dev, TC_DEV_READ, probe, off, len, 0);
        if (e)
            return e;
        if (nonzero(probe, len, off, at))
            return 0;
    }
    return find_data_extents(path, dev, probe, at);
}

int tc_format(const struct tc_format_opts *o, struct tc_format_result *res, char *err,
              size_t errlen)
{
    struct tc_reactor r;
    struct tc_dev *devs[TC_MAX_DEVICES] = { 0 };
    struct tc_dev *origin = NULL;
    struct claim_set *sets[TC_MAX_DEVICES] = { 0 };
    uint8_t old_sets[TC_MAX_DEVICES][16];
    uint8_t *probe = NULL, *sbuf = NULL;
    unsigned n = 0;
    int rc = -1;
    char sz[32];

    if (reactor_init(&r, 64) < 0) {
        snprintf(err, errlen, "io_uring: %s", strerror(errno));
        return -1;
    }
    if (!tc_is_pow2(o->block_size) || o->block_size < TC_MIN_BLOCK_SIZE ||
        o->block_size > TC_MAX_BLOCK_SIZE) {
        snprintf(err, errlen, "--block-size %u: must be a power of two from 4K to 1M",
                 o->block_size);
        goto out;
    }
    if (o->segment_size != 0 &&
        (!tc_is_pow2(o->segment_size) || o->segment_size < TC_MIN_SEGMENT_SIZE ||
         o->segment_size > TC_MAX_SEGMENT_SIZE)) {
        snprintf(err, errlen, "--segment-size %u: must be a power of two from 1M to 256M",
                 o->segment_size);
        goto out;
    }
    if (o->segment_size != 0 && o->segment_size < 4 * o->block_size) {
        snprintf(err, errlen, "--segment-size %s must hold at least 4 blocks of --block-size "
                 "%u", tc_format_size(o->segment_size, sz, sizeof sz), o->block_size);
        goto out;
    }
    /* stat() first: no FIFO blocks an open, the same data twice is named. */
    if (claim_check_paths(o->origin, (const char *const *)o->caches, err, errlen) < 0)
        goto out;
    origin = dev_open_as(&r, o->origin, "origin", true, err, errlen);
    if (origin == NULL)
        goto out;
    if (claim_origin_not_cache(o->origin, true, err, errlen) < 0)
        goto out;
    uint64_t origin_size = tc_round_down(origin->size, TC_SECTOR);
    if (origin_size == 0) {
        snprintf(err, errlen, "%s: the origin is smaller than 4096 bytes", o->origin);
        goto out;
    }

    probe = tc_alloc_aligned(PROBE_BYTES);
    uint32_t segs[TC_MAX_DEVICES];
    uint32_t total = 0;
    for (n = 0; o->caches[n]; n++) {
        const char *path = o->caches[n];
        if (n == TC_MAX_DEVICES) {
            snprintf(err, errlen, "--cache: at most %u devices", TC_MAX_DEVICES);
            goto out;
        }
        if (dev_is_nbd_uri(path)) {
            snprintf(err, errlen, "--cache %s: a cache device must be a local file or block "
                     "device", path);
            goto out;
        }
        devs[n] = dev_is_mem(path) ? dev_mem_open_as(&r, path, "cache device", false, err,
                                                     errlen)
                                   : dev_file_open_as(&r, path, "cache device", false, err,
                                                      errlen);
        if (devs[n] == NULL)
            goto out;
        for (unsigned j = 0; j < n; j++) {
            if (strcmp(devs[j]->identity, devs[n]->identity) == 0) {
                snprintf(err, errlen, "--cache: %s and %s are the same device", o->caches[j],
                         path);
                goto out;
            }
        }
        if (strcmp(devs[n]->identity, origin->identity) == 0) {
            snprintf(err, errlen, "--cache %s is the origin itself", path);
            goto out;
        }
        if (devs[n]->logical_block > TC_SECTOR) {
            snprintf(err, errlen, "%s: logical block size %u is larger than 4096", path,
                     devs[n]->logical_block);
            goto out;
        }
        size_t plen = (size_t)TC_MIN((uint64_t)PROBE_BYTES, tc_round_down(devs[n]->size, 4096));
        memset(probe, 0, PROBE_BYTES);
        int e = dev_sync_io(devs[n], TC_DEV_READ, probe, 0, plen, 0);
        if (e) {
            snprintf(err, errlen, "%s: cannot read the device: %s", path, strerror(-e));
            goto out;
        }
        /* A set that is still ours to replace: no one may be using it
         * through another path either (io/claim.c). */
        struct tc_superblock old;
        char e1[160];
        if (claim_set_enabled() && plen >= 2 * TC_SB_SIZE &&
            (sb_decode(probe, &old, e1, sizeof e1) == 0 ||
             sb_decode(probe + TC_SB_SIZE, &old, e1, sizeof e1) == 0)) {
            bool held = false;  /* two devices of one old set: locked once */
            for (unsigned j = 0; j < n; j++)
                held |= sets[j] && memcmp(old_sets[j], old.set_uuid, 16) == 0;
            memcpy(old_sets[n], old.set_uuid, 16);
            if (!held && (sets[n] = claim_set_lock(old.set_uuid, true, path, err, errlen)) ==
                NULL)
                goto out;
        }
        /* The origin of a set that may hold writes it lacks (its record,
         * io/originrec.c): formatted as a cache, that volume's data is
         * overwritten by this set's log -- --cache given another volume's
         * origin by mistake.  Refused even with --force, as an origin
         * holding a superblock is. */
        if (!dev_is_mem(path)) {
            struct originrec drec = { .found = false };
            if (originrec_read(devs[n], NULL, &drec, err, errlen) < 0)
                goto out;
            if (drec.found) {
                snprintf(err, errlen, "--cache %s is the origin of cache set %s (devices %s; "
                         "record %s), which may hold writes it lacks: formatting it as a cache "
                         "device would destroy that volume's data.  Were --cache and --origin "
                         "mixed up?  If it is no longer an origin, serve it with that set, run "
                         "'tiercache flush' and stop it (the record goes), or remove the "
                         "record", path, drec.readable ? drec.set : "(unreadable)",
                         drec.readable ? drec.devices : "?", drec.path);
                goto out;
            }
        }
        const char *what = tc_detect_signature(probe, plen);
        if (what && !o->force) {
            snprintf(err, errlen, "%s holds a %s; formatting would destroy it (use --force to "
                     "format anyway)", path, what);
            goto out;
        }
        /* No signature, but data: another volume's origin (a raw image,
         * a database's disk) given as --cache by mistake has none either.
         * The probe and a few places spread over the device are read; a
         * new or wiped device reads zeroes there. */
        if (!what && !o->force) {
            uint64_t at;
            int e2 = find_data(path, devs[n], probe, plen, &at);
            if (e2) {
                snprintf(err, errlen, "%s: cannot read the device: %s", path, strerror(-e2));
                goto out;
            }
            if (at != UINT64_MAX) {
                snprintf(err, errlen, "%s holds data (a byte that is not zero at offset %llu) "
                         "and nothing format knows: it may be a volume's origin or another "
                         "disk's data, which formatting would destroy (were --cache and "
                         "--origin mixed up?  use --force to format it anyway)", path,
                         (unsigned long long)at);
                goto out;
            }
        }
        uint64_t missing, avail;
        if (!devs[n]->is_block_device && !o->allow_sparse &&
            file_room(path, devs[n]->size, &missing, &avail) && missing > avail) {
            char m[32], a[32];
            snprintf(err, errlen, "%s: %s of the cache file is not allocated yet (the file is "
                     "sparse), but its file system has only %s free: the cache would run out "
                     "of room while serving and lose dirty data.  Make room, use a smaller "
                     "file, or pass --allow-sparse to keep it sparse anyway", path,
                     tc_format_size(missing, m, sizeof m),
                     tc_format_size(avail, a, sizeof a));
            goto out;
        }
    }
    if (n == 0) {
        snprintf(err, errlen, "--cache: no device given");
        goto out;
    }
    uint64_t smallest = UINT64_MAX;
    for (unsigned i = 0; i < n; i++)
        smallest = TC_MIN(smallest, devs[i]->size > TC_DATA_OFFSET ? devs[i]->size -
                                                                     TC_DATA_OFFSET : 0);
    uint32_t seg_size = o->segment_size ? o->segment_size
                                        : tc_format_segment_size(smallest, o->block_size);
    for (unsigned i = 0; i < n; i++) {
        uint64_t usable = devs[i]->size > TC_DATA_OFFSET ? devs[i]->size - TC_DATA_OFFSET : 0;
        segs[i] = (uint32_t)TC_MIN(usable / seg_size, (uint64_t)UINT32_MAX / 4);
        if (segs[i] < 2) {
            snprintf(err, errlen, "%s: %s is too small for a cache device: it must hold 1 MiB "
                     "of superblocks and at least 2 segments of %s", o->caches[i],
                     tc_format_size(devs[i]->size, sz, sizeof sz),
                     tc_format_size(seg_size, sz + 16, 16));
            goto out;
        }
        total += segs[i];
    }
    uint32_t min_total = 4 * n + 4;
    if (total < min_total) {
        snprintf(err, errlen, "the cache devices hold %u segments of %s in all; at least %u are "
                 "needed (%u per device for the cleaner's reserve, plus working space): use "
                 "larger devices or a smaller --segment-size", total,
                 tc_format_size(seg_size, sz, sizeof sz), min_total, 4);
        goto out;
    }

    /* The origin's record names the cache set it was last served with
     * (io/originrec.c): one not among these devices may hold writes the
     * origin lacks, and a cache formatted here would serve the origin's
     * older data in their place.  One among them is replaced (its dirty
     * data was refused above unless --discard-dirty): its record goes. */
    struct originrec rec = { .found = false };
    uint8_t recorded[16];
    bool replaces_recorded = false;
    if (!dev_is_mem(o->origin) && originrec_read(origin, NULL, &rec, err, errlen) < 0)
        goto out;
    for (unsigned i = 0; rec.found && rec.readable && !replaces_recorded && i < n; i++) {
        char u[37];
        if (!claim_device_set(o->caches[i], recorded))
            continue;
        tc_uuid_format(recorded, u);
        replaces_recorded = strcmp(u, rec.set) == 0;
    }
    if (rec.found && !replaces_recorded) {
        originrec_refusal(&rec, o->origin, "a cache formatted for it now", err, errlen);
        goto out;
    }
    if (o->check_only) {
        rc = 0;
        goto out;
    }
    /* All checks passed: allocate the cache files, then write. */
    memset(res, 0, sizeof *res);
    for (unsigned i = 0; i < n; i++) {
        if (devs[i]->is_block_device || dev_is_mem(o->caches[i]))
            continue;
        res->files++;
        uint64_t missing, avail;
        if (o->allow_sparse) {
            if (file_room(o->caches[i], devs[i]->size, &missing, &avail) && missing > 0)
                res->sparse_files++;
            continue;
        }
        if (!file_room(o->caches[i], devs[i]->size, &missing, &avail) || missing == 0)
            continue;
        int e = preallocate(o->caches[i], devs[i]->size);
        if (e) {
            snprintf(err, errlen, "%s: cannot preallocate the cache file (%s bytes): %s; pass "
                     "--allow-sparse to keep it sparse (it may then run out of room while "
                     "serving)", o->caches[i], tc_format_size(devs[i]->size, sz, sizeof sz),
                     strerror(-e));
            goto out;
        }
        res->preallocated += missing;
    }
    struct tc_superblock sb;
    memset(&sb, 0, sizeof sb);
    sb.version = TC_FORMAT_VERSION;
    tc_uuid_generate(sb.set_uuid);
    sb.dev_count = n;
    sb.block_size = o->block_size;
    sb.segment_size = seg_size;
    sb.data_offset = TC_DATA_OFFSET;
    sb.total_segments = total;
    sb.origin_size = origin_size;
    sb.format_time = (uint64_t)time(NULL);
    snprintf(sb.origin_id, sizeof sb.origin_id, "%s", origin->identity);
    snprintf(sb.origin_path, sizeof sb.origin_path, "%s", o->origin);
    for (unsigned i = 0; i < n; i++) {
        sb.dev_segments[i] = segs[i];
        tc_uuid_generate(sb.dev_uuids[i]);
    }
    sbuf = tc_alloc_aligned(2 * TC_SB_SIZE);
    uint32_t first = 0;
    for (unsigned i = 0; i < n; i++) {
        sb.dev_index = i;
        memcpy(sb.dev_uuid, sb.dev_uuids[i], 16);
        sb.dev_size = devs[i]->size;
        sb.segment_count = segs[i];
        sb.first_segment = first;
        first += segs[i];
        sb_encode(&sb, sbuf);
        memcpy(sbuf + TC_SB_SIZE, sbuf, TC_SB_SIZE);
        int e = dev_sync_io(devs[i], TC_DEV_WRITE, sbuf, 0, 2 * TC_SB_SIZE, 0);
        if (e == 0)
            e = dev_sync_io(devs[i], TC_DEV_FLUSH, NULL, 0, 0, 0);
        if (e) {
            snprintf(err, errlen, "%s: writing the superblock failed: %s", o->caches[i],
                     strerror(-e));
            goto out;
        }
    }
    /* The set the record named is gone: so is its record. */
    if (replaces_recorded && originrec_remove(origin, recorded) < 0)
        tc_warn("%s: cannot remove its record of the cache set formatted over (%s): serving "
                "it with the new set stays refused until it is removed", o->origin, rec.path);
    memcpy(res->set_uuid, sb.set_uuid, 16);
    res->devices = n;
    res->segments = total;
    res->capacity = (uint64_t)total * seg_size;
    res->segment_size = seg_size;
    res->origin_size = origin_size;
    rc = 0;
out:
    for (unsigned i = 0; i < TC_MAX_DEVICES; i++) {
        dev_close(devs[i]);
        claim_set_release(sets[i]);
    }
    dev_close(origin);
    free(probe);
    free(sbuf);
    reactor_fini(&r);
    return rc;
}
