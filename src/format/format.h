/* Creating a cache set on devices (tiercache format) and reading one back
 * (tiercache check, dump). */
#ifndef TC_FORMAT_FORMAT_H
#define TC_FORMAT_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "format/ondisk.h"

struct tc_format_opts {
    const char *const *caches;      /* NULL-terminated */
    const char *origin;
    uint32_t block_size;
    uint32_t segment_size;          /* 0: chosen by tc_format_segment_size() */
    bool force;
    bool allow_sparse;              /* leave sparse cache files sparse */
    bool check_only;                /* run every check (claims too), write nothing */
};

struct tc_format_result {
    uint8_t set_uuid[16];
    uint32_t devices;
    uint32_t segments;
    uint32_t segment_size;
    uint64_t capacity;
    uint64_t origin_size;
    uint64_t preallocated;          /* bytes fallocate()d in cache files */
    unsigned files;                 /* cache devices that are regular files */
    unsigned sparse_files;          /* ... left sparse (--allow-sparse) */
};

/* The default segment size for a set whose smallest device has `usable`
 * bytes for segments: 4 MiB, halved down to 1 MiB while the device would
 * hold fewer than 64 segments, and at least 4 blocks. */
uint32_t tc_format_segment_size(uint64_t usable, uint32_t block_size);

/* Checks everything first and writes nothing unless all checks pass.
 * Returns 0, or -1 with a message naming the bad value in err.  With
 * check_only, returns after the checks (res untouched): the devices are
 * released again, so the caller may look at their old contents before
 * the real run. */
int tc_format(const struct tc_format_opts *o, struct tc_format_result *res, char *err,
              size_t errlen);

/* What lives on a device, from its first 68 KiB: "ext4 file system",
 * "tiercache cache device", "partition table", ... or NULL. */
const char *tc_detect_signature(const uint8_t *buf, size_t len);

#endif
