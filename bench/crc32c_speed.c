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
 * figures are the checksum's own cost, not memory's.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "util/crc32c.h"

static double thread_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static volatile uint32_t sink;

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
    free(buf);
    return 0;
}
