/*
 * /proc/PID/pagemap: one 64-bit entry per virtual page of a process.
 *
 *   bit 63  present in RAM (mapped)
 *   bit 62  swapped: the page table holds a swap entry
 *   bit 61  file page or shared anonymous
 *   bits 0-54 when swapped: swap type (bits 0-4) and offset (bits 5-54);
 *           zero unless the reader has CAP_SYS_ADMIN
 *
 * A page that swap prefetch read back into the swap cache is still
 * "swapped" here: the page table keeps the swap entry until the process
 * touches the page, which maps it (then "present").  That difference is
 * what the accounting of used prefetch watches.
 */
#ifndef TC_SWAP_PAGEMAP_H
#define TC_SWAP_PAGEMAP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define SP_PAGE_SIZE 4096ull
#define SP_PAGE_SHIFT 12

#define PM_PRESENT (1ull << 63)
#define PM_SWAPPED (1ull << 62)
#define PM_FILE (1ull << 61)
#define PM_SWAP_BITS ((1ull << 55) - 1)

static inline uint64_t pm_swap_offset(uint64_t e) { return (e & PM_SWAP_BITS) >> 5; }
static inline unsigned pm_swap_type(uint64_t e) { return (unsigned)(e & 31); }
/* Swapped, and the entry identifies the slot: (bit 62, type, offset). */
static inline uint64_t pm_swap_key(uint64_t e) { return e & (PM_SWAPPED | PM_SWAP_BITS); }

/* Open /proc/PID/pagemap; -errno on failure. */
int sp_pagemap_open(pid_t pid);

/* Entries of npages pages from addr.  Pages past the end of the readable
 * range read as 0 (not present, not swapped).  0 or -errno. */
int sp_pagemap_read(int fd, uint64_t addr, size_t npages, uint64_t *out);

#endif
