/*
 * CRC-32C (util/crc32c.c) against a reference computed bit by bit: every
 * length from 0 to past two groups of three lanes (where the lanes are
 * joined, and where the tail after them is checksummed alone), at every
 * alignment of the buffer in a word, from several starting CRCs, and
 * continued over pieces cut at every point.  Also the published check
 * value and the CRC of a sector of zeroes the fast path returns, and
 * tc_crc32c_zeros() against checksumming the zeroes.  Sectors of zeroes
 * but one byte, at every offset, are not taken for zeroes by the fast
 * path that looks for them.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "util/crc32c.h"

#include "check.h"

static uint32_t reference(uint32_t crc, const uint8_t *p, size_t len)
{
    crc = ~crc;
    for (size_t i = 0; i < len; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1)));
    }
    return ~crc;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint8_t next_byte(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint8_t)rng;
}

#define MAXLEN 8400u       /* more than two groups of three 1360-byte lanes */

int main(void)
{
    static uint8_t buf[MAXLEN + 16];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = next_byte();

    CHECK(tc_crc32c(0, "123456789", 9) == 0xE3069283u);

    static uint8_t zero[4096];
    CHECK(tc_crc32c(0, zero, sizeof zero) == reference(0, zero, sizeof zero));

    /* One byte set in a sector of zeroes, at every offset (the look for
     * zeroes tests 256 bytes at a time); checksummed as two pieces, the
     * second from a CRC that is not 0, it does not take the fast path. */
    unsigned bad = 0;
    for (size_t at = 0; at < sizeof zero; at++) {
        zero[at] = (uint8_t)(1u << (at % 8));
        if (tc_crc32c(0, zero, sizeof zero) == TC_CRC32C_ZERO_SECTOR ||
            tc_crc32c(0, zero, sizeof zero) != tc_crc32c(tc_crc32c(0, zero, 1), zero + 1, sizeof zero - 1))
            bad++;
        zero[at] = 0;
    }
    CHECK(bad == 0);
    CHECK(tc_crc32c(0, zero, sizeof zero) == TC_CRC32C_ZERO_SECTOR);

    bad = 0;
    for (size_t len = 0; len <= MAXLEN; len++) {
        for (size_t align = 0; align < 8; align += (len % 97 == 0 ? 1 : 7)) {
            for (unsigned start = 0; start < 2; start++) {
                uint32_t init = start ? 0xDEADBEEFu : 0;
                if (tc_crc32c(init, buf + align, len) != reference(init, buf + align, len))
                    bad++;
            }
        }
    }
    CHECK(bad == 0);

    /* Continued over two pieces, cut at every point of a buffer that spans
     * two groups of lanes. */
    bad = 0;
    uint32_t whole = reference(0, buf, MAXLEN);
    for (size_t cut = 0; cut <= MAXLEN; cut += 13)
        if (tc_crc32c(tc_crc32c(0, buf, cut), buf + cut, MAXLEN - cut) != whole)
            bad++;
    CHECK(bad == 0);

    /* Zeroes without reading them: every length up to past two pages, and
     * lengths past the tables (whole pages up to 256 KiB). */
    static uint8_t zeros[300000];
    bad = 0;
    for (unsigned start = 0; start < 3; start++) {
        uint32_t init = start == 0 ? 0 : start == 1 ? 0xDEADBEEFu : reference(0, buf, 77);
        uint32_t want = init;                       /* reference(init, zeros, n) */
        for (size_t n = 0; n <= MAXLEN; n++, want = reference(want, zeros, 1))
            if (tc_crc32c_zeros(init, n) != want)
                bad++;
    }
    for (size_t n = 64 * 4096 - 4096; n <= sizeof zeros; n += 4096 - 64 + 3)
        if (tc_crc32c_zeros(0x12345678u, n) != tc_crc32c(0x12345678u, zeros, n))
            bad++;
    CHECK(bad == 0);
    CHECK(tc_crc32c_zeros(tc_crc32c(0, buf, 300), 4096 - 300) ==
          reference(reference(0, buf, 300), zeros, 4096 - 300));
    return check_exit("crc32c");
}
