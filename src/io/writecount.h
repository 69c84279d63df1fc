/* What the kernel counted written to a block device since it appeared:
 * the evidence that something wrote a block-device origin while no
 * daemon served it (writecount.c). */
#ifndef TC_IO_WRITECOUNT_H
#define TC_IO_WRITECOUNT_H

#include <stdbool.h>
#include <stdint.h>

#include "io/dev.h"

struct dev_write_count {
    uint8_t boot_id[16];    /* the boot the count belongs to (never all zero) */
    uint64_t diskseq;       /* the device's instance in that boot; 0: not known */
    uint64_t sectors;       /* 512-byte sectors written or discarded since it appeared */
};

/* The count of a block device d, into *out; false when d is not a local
 * block device or the kernel keeps no count of it (no sysfs, no boot ID,
 * its I/O statistics turned off). */
bool dev_write_count(const struct tc_dev *d, struct dev_write_count *out);

/* A loop device's backing file (of the loop device a partition is on):
 * its path into path (len bytes) and its modification time in
 * nanoseconds into *ns.  Writes to that file that go around the device
 * are in no count of the device's: its time shows them.  False when d is
 * not a loop device or its file cannot be looked at (gone, "(deleted)"). */
bool dev_loop_backing_mtime(const struct tc_dev *d, char *path, size_t len, uint64_t *ns);

#endif
