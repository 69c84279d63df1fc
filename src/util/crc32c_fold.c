/*
 * CRC-32C by folding with carry-less multiplication (PCLMULQDQ on 128-bit
 * registers, VPCLMULQDQ on 512-bit ones): 16 or 64 bytes per multiply
 * pair where the SSE 4.2 instruction takes 8 bytes per step, and the
 * multiplies of independent registers overlap.
 *
 * The arithmetic.  Polynomials over GF(2), P the Castagnoli polynomial.
 * The message is a polynomial whose first bit (bit 0 of byte 0) is the
 * highest power; the raw register r after a message M of n bits, started
 * from r0, is
 *
 *   r = (r0 * x^n + M * x^32) mod P                                   (1)
 *
 * which is also what the SSE 4.2 instruction computes for its 1, 4 or 8
 * bytes.  Registers are "reflected": bit i of a w-bit value stands for
 * x^(w-1-i).  So 16 bytes loaded into an xmm register X are the
 * polynomial X = Q0 * x^64 + Q1, Q0 the low 64-bit half (the earlier
 * bytes), Q1 the high one.
 *
 * Folding.  Only X mod P matters, and a block that D bits of message
 * follow weighs X * x^D.  To move X forward by F bits (onto the block F
 * bits later, which is then XORed in), X * x^F is needed, modulo P:
 *
 *   X * x^F = Q0 * x^(F+64) + Q1 * x^F
 *           = Q0 * (x^(F+64) mod P) + Q1 * (x^F mod P)   (mod P)
 *
 * two 64 x 32-bit carry-less products of at most 95 bits: they fit the
 * 128 bits again, so the register never grows.  Two details of the
 * reflected multiply fix the constants' exponents:
 *  - the product of reflected a (64 bits) and b (64 bits) is the
 *    reflected 128-bit a * b * x (bit j + k stands for x^(126-j-k));
 *  - a 32-bit constant K in the low half of a 64-bit lane, read as 64
 *    bits reflected, is K * x^32.
 * So the lane multiplying Q0 holds K = x^(F+64-1-32) = x^(F+31) mod P and
 * the one multiplying Q1 holds x^(F-1-32) = x^(F-33) mod P, each as a
 * reflected 32-bit value: r = 0x80000000 (x^0) multiplied by x once per
 * power, a multiply by x being one step of the bitwise CRC
 * (r = r >> 1 ^ (r & 1 ? 0x82F63B78 : 0)).  The table below was made so,
 * and the unit test (tests/unit/crc32c.c) makes it again.
 *
 * The loops.  N registers take N consecutive blocks; each is then folded
 * over F = N blocks onto its next block, N multiplies in flight at once.
 * At the end they are joined by folding over one block at a time (the
 * first register onto the second, ...); the 16-byte blocks left are
 * folded in one by one.  The last 128-bit X is brought to 32 bits by the
 * SSE 4.2 instruction itself: by (1), from r0 = 0 over Q0 then Q1 it
 * gives (Q0 * x^64 + Q1) * x^32 mod P, the register after X; the under
 * 16 bytes left are checksummed by it too.  The starting register r0 is
 * XORed into the first 4 bytes, as (1) says.
 */
#include "util/crc32c_fold.h"

#if defined(__x86_64__)
#include <immintrin.h>

const struct tc_crc32c_fold_constant tc_crc32c_fold_constants[4] = {
    { 128, 0xf20c0dfeu, 0x493c7d27u },      /* one 16-byte block */
    { 512, 0x740eef02u, 0x9e4addf8u },      /* four: 4 xmm, or one zmm */
    { 1024, 0x6992cea2u, 0x0d3b6092u },     /* eight: 8 xmm */
    { 2048, 0xdcb17aa4u, 0xb9e02b86u },     /* 16: 4 zmm of 4 blocks each */
};

#define XMM_LANES 8u                        /* registers folded side by side */
#define ZMM_LANES 4u

/* The constant pair for a fold over F bits, for _mm_clmulepi64_si128's
 * selectors 0x00 (Q0 by the low lane) and 0x11 (Q1 by the high one). */
__attribute__((target("sse4.2,pclmul")))
static inline __attribute__((always_inline)) __m128i fold_key(unsigned i)
{
    return _mm_set_epi64x(tc_crc32c_fold_constants[i].second, tc_crc32c_fold_constants[i].first);
}

__attribute__((target("sse4.2,pclmul")))
static inline __m128i fold_xmm(__m128i x, __m128i key, __m128i next)
{
    return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, key, 0x00),
                                       _mm_clmulepi64_si128(x, key, 0x11)), next);
}

/* X (16 bytes, register already in it) to the register after it, then
 * the tail of fewer than 16 bytes. */
__attribute__((target("sse4.2,pclmul")))
static inline __attribute__((always_inline)) uint32_t finish(__m128i x, const unsigned char *p, size_t len)
{
    uint64_t r = _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(x));
    r = _mm_crc32_u64(r, (uint64_t)_mm_extract_epi64(x, 1));
    uint32_t r32 = (uint32_t)r;
    if (len >= 8) {
        uint64_t v;
        __builtin_memcpy(&v, p, 8);
        r32 = (uint32_t)_mm_crc32_u64(r32, v);
        p += 8;
        len -= 8;
    }
    while (len--)
        r32 = _mm_crc32_u8(r32, *p++);
    return r32;
}

/* The 16-byte blocks left after x (which ends at p), then finish(). */
__attribute__((target("sse4.2,pclmul")))
static inline __attribute__((always_inline)) uint32_t fold_rest(__m128i x, const unsigned char *p, size_t len)
{
    const __m128i key1 = fold_key(0);
    for (; len >= 16; p += 16, len -= 16)
        x = fold_xmm(x, key1, _mm_loadu_si128((const __m128i_u *)p));
    return finish(x, p, len);
}

/* (The registers are named one by one, not an array: the compiler keeps
 * an array indexed in a loop in memory, which costs half the speed.) */
__attribute__((target("sse4.2,pclmul")))
uint32_t tc_crc32c_fold128(uint32_t raw, const unsigned char *p, size_t len)
{
    const __m128i_u *v = (const __m128i_u *)p;
    __m128i x0 = _mm_xor_si128(_mm_loadu_si128(v), _mm_cvtsi32_si128((int)raw));
    __m128i x1 = _mm_loadu_si128(v + 1), x2 = _mm_loadu_si128(v + 2), x3 = _mm_loadu_si128(v + 3);
    __m128i x4 = _mm_loadu_si128(v + 4), x5 = _mm_loadu_si128(v + 5), x6 = _mm_loadu_si128(v + 6);
    __m128i x7 = _mm_loadu_si128(v + 7);
    p += 16 * XMM_LANES;
    len -= 16 * XMM_LANES;

    const __m128i keyn = fold_key(2);               /* over 8 blocks */
    for (; len >= 16 * XMM_LANES; p += 16 * XMM_LANES, len -= 16 * XMM_LANES) {
        v = (const __m128i_u *)p;
        x0 = fold_xmm(x0, keyn, _mm_loadu_si128(v));
        x1 = fold_xmm(x1, keyn, _mm_loadu_si128(v + 1));
        x2 = fold_xmm(x2, keyn, _mm_loadu_si128(v + 2));
        x3 = fold_xmm(x3, keyn, _mm_loadu_si128(v + 3));
        x4 = fold_xmm(x4, keyn, _mm_loadu_si128(v + 4));
        x5 = fold_xmm(x5, keyn, _mm_loadu_si128(v + 5));
        x6 = fold_xmm(x6, keyn, _mm_loadu_si128(v + 6));
        x7 = fold_xmm(x7, keyn, _mm_loadu_si128(v + 7));
    }
    const __m128i key1 = fold_key(0);
    x1 = fold_xmm(x0, key1, x1);
    x2 = fold_xmm(x1, key1, x2);
    x3 = fold_xmm(x2, key1, x3);
    x4 = fold_xmm(x3, key1, x4);
    x5 = fold_xmm(x4, key1, x5);
    x6 = fold_xmm(x5, key1, x6);
    x7 = fold_xmm(x6, key1, x7);
    return fold_rest(x7, p, len);
}

__attribute__((target("sse4.2,pclmul,avx512f,vpclmulqdq")))
static inline __m512i fold_zmm(__m512i z, __m512i key, __m512i next)
{
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(z, key, 0x00),
                                     _mm512_clmulepi64_epi128(z, key, 0x11), next, 0x96);
}

__attribute__((target("sse4.2,pclmul,avx512f,vpclmulqdq")))
uint32_t tc_crc32c_fold512(uint32_t raw, const unsigned char *p, size_t len)
{
    const __m512i *v = (const __m512i *)p;
    __m512i z0 = _mm512_xor_si512(_mm512_loadu_si512(v), _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)raw)));
    __m512i z1 = _mm512_loadu_si512(v + 1), z2 = _mm512_loadu_si512(v + 2), z3 = _mm512_loadu_si512(v + 3);
    p += 64 * ZMM_LANES;
    len -= 64 * ZMM_LANES;

    const __m512i keyn = _mm512_broadcast_i32x4(fold_key(3));  /* over 16 blocks */
    for (; len >= 64 * ZMM_LANES; p += 64 * ZMM_LANES, len -= 64 * ZMM_LANES) {
        v = (const __m512i *)p;
        z0 = fold_zmm(z0, keyn, _mm512_loadu_si512(v));
        z1 = fold_zmm(z1, keyn, _mm512_loadu_si512(v + 1));
        z2 = fold_zmm(z2, keyn, _mm512_loadu_si512(v + 2));
        z3 = fold_zmm(z3, keyn, _mm512_loadu_si512(v + 3));
    }
    /* Each zmm is 4 consecutive blocks: folded over 4 blocks onto the
     * next zmm, then the zmm's own blocks one onto the next. */
    const __m512i key4 = _mm512_broadcast_i32x4(fold_key(1));
    __m512i acc = fold_zmm(fold_zmm(fold_zmm(z0, key4, z1), key4, z2), key4, z3);
    for (; len >= 64; p += 64, len -= 64)
        acc = fold_zmm(acc, key4, _mm512_loadu_si512(p));

    const __m128i key1 = fold_key(0);
    __m128i x = _mm512_extracti32x4_epi32(acc, 0);
    x = fold_xmm(x, key1, _mm512_extracti32x4_epi32(acc, 1));
    x = fold_xmm(x, key1, _mm512_extracti32x4_epi32(acc, 2));
    x = fold_xmm(x, key1, _mm512_extracti32x4_epi32(acc, 3));
    return fold_rest(x, p, len);
}

#endif
