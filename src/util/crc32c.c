#include "util/crc32c.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "util/crc32c_fold.h"

static uint32_t table[8][256];

static void build_table(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
}

static uint32_t crc_sw(uint32_t crc, const unsigned char *p, size_t len)
{
    while (len >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        v ^= crc;
        crc = table[7][v & 0xff] ^ table[6][(v >> 8) & 0xff] ^ table[5][(v >> 16) & 0xff] ^
              table[4][(v >> 24) & 0xff] ^ table[3][(v >> 32) & 0xff] ^
              table[2][(v >> 40) & 0xff] ^ table[1][(v >> 48) & 0xff] ^ table[0][v >> 56];
        p += 8;
        len -= 8;
    }
    while (len--)
        crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
    return crc;
}

#if defined(__x86_64__)
/*
 * The SSE 4.2 instruction takes 3 cycles to give its result and can start
 * one every cycle, so one chain of it over the data runs at a third of
 * what the CPU can do.  Long buffers are therefore cut into three lanes of
 * LANE bytes, checksummed side by side from the same starting state (the
 * first lane from the running CRC, the others from 0), and joined:
 *
 *   data:   [ lane A ][ lane B ][ lane C ][ A' ][ B' ][ C' ] ... [ rest ]
 *   crc(A B C) = shift(shift(crc(A)) ^ crc(B)) ^ crc(C)
 *
 * where shift(x) is the CRC register x carried over LANE zero bytes.  That
 * is linear in x, so it is the XOR of four table look-ups, one per byte of
 * x (lane_shift, built once from the instruction itself).  A cached
 * sector of 4 KiB is one group of three lanes and 16 bytes.  (The register
 * here is the raw one: crc_any() does the inversions.)
 */
#define LANE 1360u                      /* a multiple of 8; 3 * LANE <= 4096 */

__attribute__((target("sse4.2")))
static uint32_t crc_hw_chain(uint32_t crc, const unsigned char *p, size_t len)
{
    uint64_t c = crc;
    while (len >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
        p += 8;
        len -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (len--)
        c32 = __builtin_ia32_crc32qi(c32, *p++);
    return c32;
}

static uint32_t lane_shift[4][256];
static pthread_once_t lane_shift_once = PTHREAD_ONCE_INIT;

static void build_lane_shift(void)
{
    static const unsigned char zeros[LANE];
    for (unsigned k = 0; k < 4; k++)
        for (uint32_t b = 0; b < 256; b++)
            lane_shift[k][b] = crc_hw_chain(b << (8 * k), zeros, LANE);
}

static uint32_t shift_lane(uint32_t x)
{
    return lane_shift[0][x & 0xff] ^ lane_shift[1][(x >> 8) & 0xff] ^
           lane_shift[2][(x >> 16) & 0xff] ^ lane_shift[3][x >> 24];
}

__attribute__((target("sse4.2")))
static uint32_t crc_hw(uint32_t crc, const unsigned char *p, size_t len)
{
    if (len >= 3 * LANE)
        pthread_once(&lane_shift_once, build_lane_shift);
    while (len >= 3 * LANE) {
        uint64_t a = crc, b = 0, c = 0;
        for (size_t i = 0; i < LANE; i += 8) {
            uint64_t va, vb, vc;
            memcpy(&va, p + i, 8);
            memcpy(&vb, p + LANE + i, 8);
            memcpy(&vc, p + 2 * LANE + i, 8);
            a = __builtin_ia32_crc32di(a, va);
            b = __builtin_ia32_crc32di(b, vb);
            c = __builtin_ia32_crc32di(c, vc);
        }
        crc = shift_lane(shift_lane((uint32_t)a) ^ (uint32_t)b) ^ (uint32_t)c;
        p += 3 * LANE;
        len -= 3 * LANE;
    }
    return crc_hw_chain(crc, p, len);
}
#endif

/* Sectors of zeroes are common (fresh or sparse images, replay's data,
 * src/replay/engine.c): the CRC of a 4 KiB sector of zeroes is computed
 * once, and a sector is looked at for zeroes before it is checksummed.
 * The look stops at the first word that is not zero, at once for most
 * data, and costs a fraction of the checksum otherwise.  A cached read of
 * zeroes pays for the whole look, so where AVX2 is there (compiled for it,
 * chosen at run time) it ORs 256 bytes into one register per test: 4 times
 * faster than by words on data in the CPU's cache (about 60 -> 17 us per
 * MiB), and 10-25 % faster on data just read from a device. */
#define ZERO_SECTOR 4096u

static bool is_zero_sector_words(const unsigned char *p)
{
    uint64_t w[8];
    for (size_t i = 0; i < ZERO_SECTOR; i += sizeof w) {
        memcpy(w, p + i, sizeof w);
        if ((w[0] | w[1] | w[2] | w[3] | w[4] | w[5] | w[6] | w[7]) != 0)
            return false;
    }
    return true;
}

#if defined(__x86_64__)
#include <immintrin.h>

#define ZERO_STRETCH 256u

__attribute__((target("avx2")))
static bool is_zero_sector_avx2(const unsigned char *p)
{
    for (size_t i = 0; i < ZERO_SECTOR; i += ZERO_STRETCH) {
        const __m256i_u *v = (const __m256i_u *)(p + i);
        __m256i a = _mm256_or_si256(_mm256_or_si256(_mm256_loadu_si256(v), _mm256_loadu_si256(v + 1)),
                                    _mm256_or_si256(_mm256_loadu_si256(v + 2), _mm256_loadu_si256(v + 3)));
        __m256i b = _mm256_or_si256(_mm256_or_si256(_mm256_loadu_si256(v + 4), _mm256_loadu_si256(v + 5)),
                                    _mm256_or_si256(_mm256_loadu_si256(v + 6), _mm256_loadu_si256(v + 7)));
        a = _mm256_or_si256(a, b);
        if (!_mm256_testz_si256(a, a))
            return false;
    }
    return true;
}

static int use_avx2 = -1;
#endif

static bool is_zero_sector(const unsigned char *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
    if (w)
        return false;
#if defined(__x86_64__)
    if (use_avx2 < 0)
        use_avx2 = __builtin_cpu_supports("avx2") ? 1 : 0;
    if (use_avx2)
        return is_zero_sector_avx2(p);
#endif
    return is_zero_sector_words(p);
}

static uint32_t crc_any(uint32_t crc, const void *data, size_t len);

uint32_t tc_crc32c(uint32_t crc, const void *data, size_t len)
{
    if (crc == 0 && len == ZERO_SECTOR && is_zero_sector(data))
        return TC_CRC32C_ZERO_SECTOR;
    return crc_any(crc, data, len);
}

/*
 * Checking the sectors of a device read.  The device has just written
 * the data into memory, so the check of every sector starts with cache
 * misses, and the CPU's own prefetchers stop at the end of each 4 KiB
 * page: left to themselves, they fetch a sector only once its checksum
 * has begun waiting for it.  Asking for the whole next sector while one
 * is checked overlaps the two (bench/crc32c_speed, "cold" figures: 1 MiB
 * checked sector by sector out of a buffer larger than the CPU's caches).
 * Only a hint: what is checked, and how, is unchanged.
 */
static inline void prefetch_sector(const unsigned char *p)
{
    for (size_t k = 0; k < ZERO_SECTOR; k += 64)
        __builtin_prefetch(p + k);
}

uint32_t tc_crc32c_check_sectors(const void *data, uint32_t n, const uint32_t *expect,
                                 uint32_t *bad_from, uint32_t *bad_to)
{
    const unsigned char *p = data;
    uint32_t bad = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (i + 1 < n)
            prefetch_sector(p + (size_t)(i + 1) * ZERO_SECTOR);
        if (tc_crc32c(0, p + (size_t)i * ZERO_SECTOR, ZERO_SECTOR) != expect[i]) {
            if (bad++ == 0)
                *bad_from = i;
            *bad_to = i + 1;
        }
    }
    return bad;
}

/*
 * The implementations, slowest first.  Each takes the raw register; the
 * folding ones leave buffers shorter than TC_CRC32C_FOLD_MIN (headers,
 * records) to the SSE 4.2 instruction, faster there.  The last one the
 * CPU has is chosen once, before main() (a constructor), so that every
 * thread reads a pointer that no longer changes; TIERCACHE_CRC32C names
 * another (tests cover every path on one machine that way), if the CPU
 * has it.  Building for another architecture leaves the portable one.
 *
 * In GB/s of CPU time on 4 KiB / 64 KiB / 1 MiB (bench/crc32c_speed.c,
 * AMD EPYC with AVX-512): portable 1.9 / 1.9 / 1.9, pclmulqdq 13.6 /
 * 13.8 / 13.4, sse4.2 24.8 / 25.4 / 24.5, vpclmulqdq 51.7 / 53.4 / 54.9.
 * A carry-less multiply issues there about every other cycle, xmm or zmm
 * alike: 16 bytes a pair in xmm registers is under the 8 bytes a cycle of
 * three lanes of the SSE 4.2 instruction, 64 bytes a pair in zmm well
 * over.  So the 128-bit folding, which CPUs with the instruction have
 * alongside SSE 4.2, is never chosen by itself: it is there to be asked
 * for, and to be measured on other CPUs.
 */
struct crc_impl {
    const char *name;
    uint32_t (*raw)(uint32_t raw, const unsigned char *p, size_t len);
    bool (*supported)(void);
};

static bool always(void)
{
    return true;
}

#if defined(__x86_64__)
static bool has_sse42(void)
{
    return __builtin_cpu_supports("sse4.2");
}

static bool has_pclmul(void)
{
    return has_sse42() && __builtin_cpu_supports("pclmul");
}

static bool has_vpclmul(void)
{
    return has_pclmul() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq");
}

static uint32_t crc_fold128(uint32_t raw, const unsigned char *p, size_t len)
{
    return len < TC_CRC32C_FOLD_MIN ? crc_hw(raw, p, len) : tc_crc32c_fold128(raw, p, len);
}

static uint32_t crc_fold512(uint32_t raw, const unsigned char *p, size_t len)
{
    return len < TC_CRC32C_FOLD_MIN ? crc_hw(raw, p, len) : tc_crc32c_fold512(raw, p, len);
}
#endif

static const struct crc_impl impls[] = {
    { "portable", crc_sw, always },
#if defined(__x86_64__)
    { "pclmulqdq", crc_fold128, has_pclmul },
    { "sse4.2", crc_hw, has_sse42 },
    { "vpclmulqdq", crc_fold512, has_vpclmul },
#endif
};
#define NIMPLS (sizeof impls / sizeof impls[0])

static const struct crc_impl *impl;      /* NULL until chosen */

__attribute__((constructor))
static void choose_impl(void)
{
    if (impl)
        return;
    build_table();
#if defined(__x86_64__)
    __builtin_cpu_init();                   /* (it may run before libgcc's) */
#endif
    const struct crc_impl *best = &impls[0];
    for (size_t i = 0; i < NIMPLS; i++)
        if (impls[i].supported())
            best = &impls[i];
    impl = best;
    const char *want = getenv("TIERCACHE_CRC32C");
    if (want && *want)
        tc_crc32c_use(want);
}

const char *tc_crc32c_implementation(void)
{
    if (impl == NULL)
        choose_impl();
    return impl->name;
}

int tc_crc32c_use(const char *name)
{
    if (impl == NULL)
        choose_impl();
    for (size_t i = 0; i < NIMPLS; i++)
        if (strcmp(impls[i].name, name) == 0 && impls[i].supported()) {
            impl = &impls[i];
            return 0;
        }
    return -1;
}

const char *tc_crc32c_implementation_at(size_t i)
{
    return i < NIMPLS ? impls[i].name : NULL;
}

/* (impl is NULL only for a caller in another constructor run before
 * choose_impl(), while there is one thread.) */
static uint32_t crc_any(uint32_t crc, const void *data, size_t len)
{
    if (__builtin_expect(impl == NULL, 0))
        choose_impl();
    return ~impl->raw(~crc, data, len);
}

/*
 * Zeroes.  The raw register r carried over n zero bytes is r * x^(8n)
 * modulo the polynomial (bit-reflected: the top bit is x^0), a product of
 * two 32-bit polynomials.  x^(8n) is the product of a power for n's
 * whole 4 KiB pages and one for its 64-byte lines (tables built once from
 * the register x^0 carried over zeroes); the bytes past the last line are
 * checksummed as they are.
 */
#define ZLINE 64u
#define ZPAGES 64u                  /* whole pages up to 256 KiB by table */

static uint32_t zpow_line[ZERO_SECTOR / ZLINE];    /* x^(8 * 64 i) */
static uint32_t zpow_page[ZPAGES];                  /* x^(8 * 4096 i) */
static pthread_once_t zpow_once = PTHREAD_ONCE_INIT;

static uint32_t gf_mul(uint32_t a, uint32_t b)
{
    uint32_t p = 0;
    for (int i = 0; i < 32; i++) {
        p ^= b & (0u - (a >> 31));
        a <<= 1;
        b = (b >> 1) ^ (0x82F63B78u & (0u - (b & 1)));
    }
    return p;
}

static uint32_t crc_raw(uint32_t raw, const void *data, size_t len)
{
    return ~crc_any(~raw, data, len);
}

static void build_zpow(void)
{
    static const unsigned char zeros[ZLINE];
    uint32_t r = 0x80000000u;                       /* x^0 */
    for (unsigned i = 0; i < ZERO_SECTOR / ZLINE; i++) {
        zpow_line[i] = r;
        r = crc_raw(r, zeros, ZLINE);
    }
    uint32_t page = r;                              /* x^(8 * 4096) */
    zpow_page[0] = 0x80000000u;
    for (unsigned i = 1; i < ZPAGES; i++)
        zpow_page[i] = gf_mul(zpow_page[i - 1], page);
}

uint32_t tc_crc32c_zeros(uint32_t crc, size_t n)
{
    static const unsigned char zeros[ZERO_SECTOR];
    uint32_t raw = ~crc;
    while (n >= ZPAGES * ZERO_SECTOR) {             /* (not met by chunk headers) */
        raw = crc_raw(raw, zeros, ZERO_SECTOR);
        n -= ZERO_SECTOR;
    }
    pthread_once(&zpow_once, build_zpow);
    size_t pages = n / ZERO_SECTOR, lines = n % ZERO_SECTOR / ZLINE;
    if (pages)
        raw = gf_mul(zpow_page[pages], raw);
    if (lines)
        raw = gf_mul(zpow_line[lines], raw);
    return ~crc_raw(raw, zeros, n % ZLINE);
}

uint32_t tc_crc32c_skipping(const void *buf, size_t len, size_t crc_off)
{
    static const uint8_t zero[4];
    const uint8_t *p = buf;
    uint32_t crc = tc_crc32c(0, p, crc_off);
    crc = tc_crc32c(crc, zero, 4);
    return tc_crc32c(crc, p + crc_off + 4, len - crc_off - 4);
}
