/*
 * Reading the small text files of /proc, /sys and the cgroup filesystems
 * that swap prefetch samples: whole-file reads into a caller's buffer, and
 * lookups of "key value" and "Key:   value kB" lines.
 */
#ifndef TC_SWAP_PROCFS_H
#define TC_SWAP_PROCFS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Read the whole file (up to len - 1 bytes) and NUL-terminate it.  Returns
 * the length, or -errno. */
ssize_t sp_read_text(const char *path, char *buf, size_t len);

/* The number on the line that starts with key followed by ':' or blanks.
 * A value followed by "kB" is converted to bytes.  False if absent. */
bool sp_kv_u64(const char *text, const char *key, uint64_t *out);

/* The first number in a file ("max" reads as UINT64_MAX).  False if the
 * file cannot be read or holds no number. */
bool sp_read_u64(const char *path, uint64_t *out);

#endif
