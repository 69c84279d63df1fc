/*
 * The identity of a block device, from what sysfs says of it: a name that
 * survives reboots, renumbering and renames (struct tc_dev's identity; its
 * forms are listed there).  A loop device is named by dev_file.c from its
 * backing file instead.
 */
#ifndef TC_IO_BLOCKID_H
#define TC_IO_BLOCKID_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The identity of block device MAJ:MIN into out, as sysfs under root
 * describes it: "/sys", or a fake tree built by a unit test (the only
 * reason the root is a parameter).  Into legacy (legacylen bytes) the
 * identity an older build recorded for the same device when it differs,
 * else "". */
void block_identity(const char *root, unsigned maj, unsigned min, char *out, size_t len,
                    char *legacy, size_t legacylen);

/* Where a block device's data lie in something larger: a partition is its
 * disk's bytes from its start sector on, and a loop device (or a partition
 * of one) its backing file's bytes from the loop's offset on.  Two devices
 * that are windows into the same disk or file hold the same data where
 * their ranges overlap (io/originrec.c compares origins so). */
struct block_under {
    unsigned maj, min;          /* the whole device: the partition's disk, or itself */
    uint64_t start;             /* bytes into the file, or into the disk */
    char file[4096];            /* the loop's backing file as sysfs names it, or ""
                                   (not a loop, or its file was deleted) */
};

/* What block device MAJ:MIN is a window into, as sysfs under root says
 * (block_identity()'s root): true if it is a partition or a loop device
 * (u then says of what), false for a whole device of its own (u->start 0,
 * u->maj/min its own). */
bool block_under(const char *root, unsigned maj, unsigned min, struct block_under *u);

#endif
