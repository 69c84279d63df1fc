/*
 * survey_speed: what a start after a crash reads today against what a
 * start from a periodic checkpoint would read first (src/engine/survey.h;
 * the design: src/engine/checkpoint.c).
 *
 *   build/bench/survey_speed CACHE[,CACHE...] [ROUNDS]   (default 3)
 *
 * Opens the set offline, as tiercache check does: recovery walks every
 * chunk header of the log and applies the live entries (the scan a start
 * after kill -9 runs; timed as "scan"), then reads the first header of
 * every segment ROUNDS times (timed as "survey", the median).  The devices
 * are read with O_DIRECT: the page cache does not serve the second pass.
 * The set must not be in use (a daemon's set is refused).  Prints one line
 * of key=value pairs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/cache.h"
#include "engine/survey.h"
#include "io/reactor.h"
#include "tiercache.h"
#include "util/misc.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: survey_speed CACHE[,CACHE...] [ROUNDS]\n");
        return 2;
    }
    int rounds = argc > 2 ? atoi(argv[2]) : 3;
    if (rounds < 1 || rounds > 99)
        rounds = 3;
    const char *paths[TC_MAX_DEVICES + 1] = { 0 };
    char *list = strdup(argv[1]);
    unsigned n = 0;
    for (char *save = NULL, *p = strtok_r(list, ",", &save); p && n < TC_MAX_DEVICES;
         p = strtok_r(NULL, ",", &save))
        paths[n++] = p;
    struct tc_reactor r;
    if (reactor_init(&r, 256) < 0) {
        perror("io_uring");
        return 2;
    }
    struct tc_volume_config cfg;
    tc_volume_config_defaults(&cfg);
    char err[1024];
    double t0 = now();
    struct cache *c = cache_open_offline(&r, paths, &cfg, err, sizeof err);
    double scan = now() - t0;
    if (c == NULL) {
        fprintf(stderr, "survey_speed: %s\n", err);
        return 1;
    }
    uint64_t live = 0, chunks = 0;
    for (uint32_t s = 0; s < c->sp.nsegs; s++) {
        const struct segment *sg = space_seg(&c->sp, s);
        if (sg->state != SEG_FREE && sg->nchunks > 0) {
            live++;
            chunks += sg->nchunks;
        }
    }
    struct seg_first *first = tc_xcalloc(c->sp.nsegs, sizeof *first);
    double t[99];
    uint64_t reads = 0;
    for (int i = 0; i < rounds; i++) {
        t0 = now();
        reads = survey_segments(c, first);
        t[i] = now() - t0;
    }
    qsort(t, (size_t)rounds, sizeof *t, cmp_double);
    uint64_t found = 0;
    for (uint32_t s = 0; s < c->sp.nsegs; s++)
        found += first[s].what == SURVEY_CHUNK;
    printf("segments=%u live_segments=%llu live_chunks=%llu cached_blocks=%llu scan_s=%.4f "
           "survey_reads=%llu survey_found=%llu survey_s=%.4f\n", c->sp.nsegs,
           (unsigned long long)live, (unsigned long long)chunks,
           (unsigned long long)c->map.idx.count, scan, (unsigned long long)reads,
           (unsigned long long)found, t[rounds / 2]);
    free(first);
    free(list);
    cache_close_offline(c);
    reactor_fini(&r);
    return 0;
}
