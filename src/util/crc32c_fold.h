/*
 * CRC-32C of long buffers by carry-less multiplication (x86-64 only):
 * the kernels behind util/crc32c.c's "pclmulqdq" and "vpclmulqdq"
 * implementations.  Not for other callers: they work on the raw register
 * (no inversions), want at least TC_CRC32C_FOLD_MIN bytes, and need the
 * CPU features they are named after (and SSE 4.2) checked first.
 */
#ifndef TC_UTIL_CRC32C_FOLD_H
#define TC_UTIL_CRC32C_FOLD_H

#include <stddef.h>
#include <stdint.h>

#if defined(__x86_64__)

/* Below this the SSE 4.2 instruction alone is as fast: the folding's
 * set-up and final reduction cost about as much as 256 bytes of it. */
#define TC_CRC32C_FOLD_MIN 256u

/* The register raw carried over len bytes at p, len >= TC_CRC32C_FOLD_MIN.
 * fold128 needs pclmulqdq and sse4.2; fold512 also avx512f and
 * vpclmulqdq. */
uint32_t tc_crc32c_fold128(uint32_t raw, const unsigned char *p, size_t len);
uint32_t tc_crc32c_fold512(uint32_t raw, const unsigned char *p, size_t len);

/* The folding constants, exported for the unit test, which derives them
 * again from their definition (crc32c_fold.c's comment). */
struct tc_crc32c_fold_constant {
    unsigned distance;          /* bits folded over */
    uint32_t first, second;     /* x^(distance+31), x^(distance-33) mod P */
};
extern const struct tc_crc32c_fold_constant tc_crc32c_fold_constants[4];

#endif
#endif
