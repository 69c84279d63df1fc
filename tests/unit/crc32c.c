/*
 * CRC-32C (util/crc32c.c) against a reference computed bit by bit, for
 * every implementation the CPU has (portable, SSE 4.2, the foldings),
 * each forced in turn: every length from 0 to past two groups of three
 * lanes (where the lanes are joined, and where the tail after them is
 * checksummed alone; for the foldings, every count of registers, blocks
 * and tail bytes), at every alignment of the buffer in a word and at a
 * random one, from several starting CRCs, and continued over pieces cut
 * at every point; buffers of a few MiB.  Also the published check
 * value and the CRC of a sector of zeroes the fast path returns, and
 * tc_crc32c_zeros() against checksumming the zeroes.  Sectors of zeroes
 * but one byte, at every offset, are not taken for zeroes by the fast
 * path that looks for them.  The folding constants are derived again
 * from their definition.  tc_crc32c_check_sectors() finds every damaged
 * sector of a run, and reports the first and last.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/crc32c.h"
#include "util/crc32c_fold.h"

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
#define ALIGNS 64u

static uint8_t buf[MAXLEN + ALIGNS];
static uint32_t expected[MAXLEN + 1][2];   /* reference(init, buf + align_of[len], len) */
static size_t align_of[MAXLEN + 1];

#define BIG (3u << 20)

static void check_implementation(const uint8_t *big, const uint32_t *big_want)
{

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
        for (unsigned start = 0; start < 2; start++) {
            uint32_t init = start ? 0xDEADBEEFu : 0;
            if (tc_crc32c(init, buf + align_of[len], len) != expected[len][start])
                bad++;
        }
        if (len % 97 == 0)
            for (size_t align = 0; align < 8; align++)
                if (tc_crc32c(0, buf + align, len) != reference(0, buf + align, len))
                    bad++;
    }
    CHECK(bad == 0);

    /* Buffers of a few MiB, whole and from odd offsets. */
    bad = 0;
    for (unsigned i = 0; i < 3; i++)
        if (tc_crc32c(0x9E3779B9u, big + i * 7, BIG - i * 4099) != big_want[i])
            bad++;
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

    /* Sectors checked in a run: every sector's own CRC agrees; a sector
     * damaged (a byte flipped at its start, middle or end, or a sector of
     * zeroes that should not be) is found, alone and in company, and the
     * first and one past the last are reported; none found leaves the
     * bounds as they were. */
    enum { NSEC = 9 };
    static uint8_t run[NSEC * 4096];
    memcpy(run, big, sizeof run);
    uint32_t want[NSEC], from = 77, to = 78;
    for (unsigned i = 0; i < NSEC; i++)
        want[i] = reference(0, run + (size_t)i * 4096, 4096);
    CHECK(tc_crc32c_check_sectors(run, NSEC, want, &from, &to) == 0);
    CHECK(from == 77 && to == 78);
    CHECK(tc_crc32c_check_sectors(run, 0, want, &from, &to) == 0);
    static const size_t at[] = { 0, 2048, 4095 };
    for (unsigned a = 0; a < 3; a++) {
        for (unsigned i = 0; i < NSEC; i++) {
            run[(size_t)i * 4096 + at[a]] ^= 0x40;
            CHECK(tc_crc32c_check_sectors(run, NSEC, want, &from, &to) == 1);
            CHECK(from == i && to == i + 1);
            run[(size_t)i * 4096 + at[a]] ^= 0x40;
        }
    }
    run[1 * 4096 + 5] ^= 1;
    run[6 * 4096 + 4000] ^= 1;
    CHECK(tc_crc32c_check_sectors(run, NSEC, want, &from, &to) == 2);
    CHECK(from == 1 && to == 7);
    CHECK(tc_crc32c_check_sectors(run + 4096, 3, want + 1, &from, &to) == 1);
    CHECK(from == 0 && to == 1);
    run[1 * 4096 + 5] ^= 1;
    run[6 * 4096 + 4000] ^= 1;
    static uint8_t zero_sectors[2 * 4096];
    uint32_t zwant[2] = { TC_CRC32C_ZERO_SECTOR, want[3] };
    CHECK(tc_crc32c_check_sectors(zero_sectors, 2, zwant, &from, &to) == 1);
    CHECK(from == 1 && to == 2);
}

int main(void)
{
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = next_byte();
    for (size_t len = 0; len <= MAXLEN; len++) {
        align_of[len] = next_byte() % ALIGNS;
        expected[len][0] = reference(0, buf + align_of[len], len);
        expected[len][1] = reference(0xDEADBEEFu, buf + align_of[len], len);
    }
    uint8_t *big = malloc(BIG + 64);
    CHECK(big != NULL);
    if (big == NULL)
        return check_exit("crc32c");
    for (size_t i = 0; i < BIG + 64; i++)
        big[i] = next_byte();
    uint32_t big_want[3];
    for (unsigned i = 0; i < 3; i++)
        big_want[i] = reference(0x9E3779B9u, big + i * 7, BIG - i * 4099);

#if defined(__x86_64__)
    /* x^(d+31) and x^(d-33) mod P, reflected: x^0 multiplied by x. */
    for (unsigned i = 0; i < 4; i++) {
        const struct tc_crc32c_fold_constant *k = &tc_crc32c_fold_constants[i];
        uint32_t r = 0x80000000u, first = 0, second = 0;
        for (unsigned n = 0; n <= k->distance + 31; n++) {
            if (n == k->distance - 33)
                second = r;
            if (n == k->distance + 31)
                first = r;
            r = (r >> 1) ^ (0x82F63B78u & (0u - (r & 1)));
        }
        CHECK(k->first == first);
        CHECK(k->second == second);
    }
#endif

    const char *chosen = tc_crc32c_implementation();
    printf("chosen at start: %s\n", chosen);
    unsigned tested = 0;
    for (size_t i = 0; tc_crc32c_implementation_at(i); i++) {
        const char *name = tc_crc32c_implementation_at(i);
        if (tc_crc32c_use(name) != 0) {
            printf("%s: not on this CPU\n", name);
            continue;
        }
        CHECK(strcmp(tc_crc32c_implementation(), name) == 0);
        int before = check_failures;
        check_implementation(big, big_want);
        printf("%s: %s\n", name, check_failures == before ? "agrees" : "FAILS");
        tested++;
    }
    CHECK(tested >= 1);
    CHECK(tc_crc32c_use("no such thing") == -1);
    free(big);
    return check_exit("crc32c");
}
