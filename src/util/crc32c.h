/*
 * CRC-32C (Castagnoli), the checksum of every on-disk structure and of
 * cached data.  On x86-64 by the fastest means the CPU has: carry-less
 * multiply folding of 512-bit registers (VPCLMULQDQ) for long buffers,
 * the SSE 4.2 instruction for short ones and on CPUs without AVX-512;
 * tables elsewhere.
 */
#ifndef TC_UTIL_CRC32C_H
#define TC_UTIL_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* crc32c(0, data, len) is the standard CRC-32C of data.  Pass a previous
 * result as crc to continue over a further piece. */
uint32_t tc_crc32c(uint32_t crc, const void *data, size_t len);

/* Check n consecutive sectors of 4096 bytes at data, sector i against
 * expect[i], each exactly as tc_crc32c(0, sector, 4096) == expect[i].
 * Returns the number of sectors that differ, and sets *bad_from and
 * *bad_to to the first and one past the last of them (untouched when none
 * differs).  The same answer as checking them one by one, faster on data
 * just read from a device (crc32c.c says why). */
uint32_t tc_crc32c_check_sectors(const void *data, uint32_t n, const uint32_t *expect,
                                 uint32_t *bad_from, uint32_t *bad_to);

/* crc32c(0, ...) of 4096 bytes of zero (the unit test checks it). */
#define TC_CRC32C_ZERO_SECTOR 0x98f94189u

/* tc_crc32c(crc, zeroes, n) for n bytes of zero, without reading them:
 * for structures padded with zeroes to a fixed size (chunk headers), so
 * that only their used part is checksummed.  A few hundred instructions
 * whatever n. */
uint32_t tc_crc32c_zeros(uint32_t crc, size_t n);

/* The checksum of a structure that stores its own checksum in the 4 bytes
 * at crc_off: computed with those bytes read as zero, so the writer (which
 * zeroes them first) and the reader (which finds them filled) agree. */
uint32_t tc_crc32c_skipping(const void *buf, size_t len, size_t crc_off);

/* The implementation in use: "portable" (tables), "pclmulqdq" (128-bit
 * folding), "sse4.2" or "vpclmulqdq" (512-bit folding).  Chosen before main(): the fastest the CPU has, or the
 * one the environment variable TIERCACHE_CRC32C names if the CPU has it. */
const char *tc_crc32c_implementation(void);

/* The implementations by index, slowest first, NULL past the last one
 * (those the CPU lacks included). */
const char *tc_crc32c_implementation_at(size_t i);

/* Use the implementation named: 0, or -1 if there is none of that name
 * or the CPU lacks it (the one in use stays).  Not while other threads
 * checksum: for tests, and for start-up. */
int tc_crc32c_use(const char *name);

#endif
