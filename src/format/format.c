/*
 * tiercache format: write the superblocks of a new cache set.
 *
 * Every check runs before anything is written: sizes, the devices' current
 * contents (a tiercache superblock or a file system is refused without
 * --force), devices named twice, a cache device that is the origin.  Then
 * each device gets two copies of its superblock and a flush.  Nothing else
 * is written: chunks left from an earlier use carry another set's UUID and
 * are never read as ours.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "format/format.h"
#include "io/dev.h"
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

int tc_format(const struct tc_format_opts *o, struct tc_format_result *res, char *err,
              size_t errlen)
{
    struct tc_reactor r;
    struct tc_dev *devs[TC_MAX_DEVICES] = { 0 };
    struct tc_dev *origin = NULL;
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
    origin = dev_open(&r, o->origin, true, err, errlen);
    if (origin == NULL)
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
        devs[n] = dev_file_open(&r, path, false, err, errlen);
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
        const char *what = tc_detect_signature(probe, plen);
        if (what && !o->force) {
            snprintf(err, errlen, "%s holds a %s; formatting would destroy it (use --force to "
                     "format anyway)", path, what);
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

    /* All checks passed: write. */
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
    memcpy(res->set_uuid, sb.set_uuid, 16);
    res->devices = n;
    res->segments = total;
    res->capacity = (uint64_t)total * seg_size;
    res->segment_size = seg_size;
    res->origin_size = origin_size;
    rc = 0;
out:
    for (unsigned i = 0; i < TC_MAX_DEVICES; i++)
        dev_close(devs[i]);
    dev_close(origin);
    free(probe);
    free(sbuf);
    reactor_fini(&r);
    return rc;
}
