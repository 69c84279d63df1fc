#include "util/crc32c.h"

#include <stdbool.h>
#include <string.h>

static uint32_t table[8][256];
static bool have_table;
static int use_hw = -1;

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
    have_table = true;
}

static uint32_t crc_sw(uint32_t crc, const unsigned char *p, size_t len)
{
    if (!have_table)
        build_table();
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
__attribute__((target("sse4.2")))
static uint32_t crc_hw(uint32_t crc, const unsigned char *p, size_t len)
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
#endif

uint32_t tc_crc32c(uint32_t crc, const void *data, size_t len)
{
    crc = ~crc;
#if defined(__x86_64__)
    if (use_hw < 0)
        use_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
    if (use_hw)
        return ~crc_hw(crc, data, len);
#endif
    return ~crc_sw(crc, data, len);
}

uint32_t tc_crc32c_skipping(const void *buf, size_t len, size_t crc_off)
{
    static const uint8_t zero[4];
    const uint8_t *p = buf;
    uint32_t crc = tc_crc32c(0, p, crc_off);
    crc = tc_crc32c(crc, zero, 4);
    return tc_crc32c(crc, p + crc_off + 4, len - crc_off - 4);
}
