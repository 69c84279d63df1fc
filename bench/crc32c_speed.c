/*
 * crc32c_speed: the speed of every CRC-32C implementation the CPU has
 * (src/util/crc32c.c), on buffers of 4 KiB (a sector), 64 KiB (a block)
 * and 1 MiB (a large read), in one run.
 *
 *   build/bench/crc32c_speed [SECONDS]     (default 0.2 per figure)
 *
 * Each figure is the best of 5 rounds of at least SECONDS each, in GB/s
 * of the thread's own CPU time (CLOCK_THREAD_CPUTIME_ID), so that other
 * load on the machine slows it less than it would wall time.  (Not in
 * bytes per cycle: the time-stamp counter ticks at a fixed rate, not the
 * core's clock.)  The data is random and stays in the CPU's caches: the
 * figures are the checksum's own cost, not memory's.  The last line is
 * memory's: a 1 MiB read checked sector by sector from a buffer larger
 * than the caches, one by one and by tc_crc32c_check_sectors().
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/crc32c.h"

static double thread_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static volatile uint32_t sink;

/* Cold data: 1 MiB reads checked sector by sector (as every cache read
 * is, engine/cacheio.c) in turn through a buffer larger than the CPU's
 * caches, so that every one starts from memory, as data a device has
 * just written does.  One by one with tc_crc32c(), and by
 * tc_crc32c_check_sectors(), which asks for the next sector early. */
#define COLD_BYTES (512u << 20)
#define COLD_READ (1u << 20)
#define COLD_SECTORS (COLD_READ / 4096)

static void cold(double seconds)
{
    unsigned char *big = malloc(COLD_BYTES);
    uint32_t *want = malloc(COLD_BYTES / 4096 * sizeof *want);
    if (big == NULL || want == NULL) {
        free(big);
        free(want);
        return;
    }
    uint64_t x = 0x2545F4914F6CDD1Dull;
    for (size_t i = 0; i < COLD_BYTES; i += 8) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        memcpy(big + i, &x, 8);
    }
    for (size_t i = 0; i < COLD_BYTES / 4096; i++)
        want[i] = tc_crc32c(0, big + i * 4096, 4096);
    double us[2] = { 0, 0 };
    for (unsigned round = 0; round < 10; round++) {
        for (unsigned way = 0; way < 2; way++) {
            uint64_t reads = 0;
            size_t at = 0;
            double c0 = thread_seconds(), c1;
            do {
                unsigned char *p = big + at * COLD_READ;
                const uint32_t *w = want + at * COLD_SECTORS;
                uint32_t bad = 0, from = 0, to = 0;
                if (way == 0) {
                    for (unsigned i = 0; i < COLD_SECTORS; i++)
                        bad += tc_crc32c(0, p + (size_t)i * 4096, 4096) != w[i];
                } else {
                    bad = tc_crc32c_check_sectors(p, COLD_SECTORS, w, &from, &to);
                }
                sink += bad;
                reads++;
                at = (at + 1) % (COLD_BYTES / COLD_READ);
                c1 = thread_seconds();
            } while (c1 - c0 < seconds);
            double per = (c1 - c0) * 1e6 / (double)reads;
            if (us[way] == 0 || per < us[way])
                us[way] = per;
        }
    }
    printf("1 MiB from memory, checked by sector: one by one %.1f us, "
           "tc_crc32c_check_sectors %.1f us (best of 10)\n", us[0], us[1]);
    free(big);
    free(want);
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 0.2;
    static const size_t sizes[] = { 4096, 65536, 1u << 20 };
    unsigned char *buf = malloc(1u << 20);
    if (buf == NULL)
        return 1;
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < (1u << 20); i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[i] = (unsigned char)x;
    }
    const char *chosen = tc_crc32c_implementation();
    printf("%-14s %8s %8s %8s   (GB/s of CPU time)\n", "implementation",
           "4 KiB", "64 KiB", "1 MiB");
    for (size_t i = 0; tc_crc32c_implementation_at(i); i++) {
        const char *name = tc_crc32c_implementation_at(i);
        if (tc_crc32c_use(name) != 0)
            continue;
        double gbs[3];
        for (unsigned s = 0; s < 3; s++) {
            gbs[s] = 0;
            for (unsigned round = 0; round < 5; round++) {
                /* The clock is read every 16 MiB: reading it is a
                 * system call, as long as checksumming a few sectors. */
                size_t calls = (16u << 20) / sizes[s];
                uint64_t bytes = 0;
                double c0 = thread_seconds(), c1;
                do {
                    for (size_t k = 0; k < calls; k++)
                        sink = tc_crc32c(sink, buf, sizes[s]);
                    bytes += calls * sizes[s];
                    c1 = thread_seconds();
                } while (c1 - c0 < seconds);
                if (bytes / (c1 - c0) / 1e9 > gbs[s])
                    gbs[s] = (double)bytes / (c1 - c0) / 1e9;
            }
        }
        printf("%-14s %8.2f %8.2f %8.2f\n", name, gbs[0], gbs[1], gbs[2]);
    }
    printf("chosen at start: %s\n", chosen);
    tc_crc32c_use(chosen);
    free(buf);
    cold(seconds);
    return 0;
}
