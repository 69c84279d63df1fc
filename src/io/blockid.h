/*
 * The identity of a block device, from what sysfs says of it: a name that
 * survives reboots, renumbering and renames (struct tc_dev's identity; its
 * forms are listed there).  A loop device is named by dev_file.c from its
 * backing file instead.
 */
#ifndef TC_IO_BLOCKID_H
#define TC_IO_BLOCKID_H

#include <stddef.h>

/* The identity of block device MAJ:MIN into out, as sysfs under root
 * describes it: "/sys", or a fake tree built by a unit test (the only
 * reason the root is a parameter).  Into legacy (legacylen bytes) the
 * identity an older build recorded for the same device when it differs,
 * else "". */
void block_identity(const char *root, unsigned maj, unsigned min, char *out, size_t len,
                    char *legacy, size_t legacylen);

#endif
