/*
 * Replay: what a cache of a given size and policy would have done with a
 * trace of requests (src/trace/), without devices.
 *
 * Two kinds of simulator answer that question:
 *
 *   engine      the engine itself (src/engine/, src/policy/): a volume
 *               opened over memory devices (origin and cache keep no data
 *               beyond what the engine must read back), fed the trace's
 *               requests one at a time through tc_submit().  The same
 *               index, admission, eviction, segment and capacity rules as
 *               `serve`, and the same counters `status` shows.
 *   reference   small textbook simulators over fixed-size blocks (LRU,
 *               ARC, S3-FIFO, SIEVE, Belady's OPT), which `serve` does not
 *               offer: the yardsticks a policy is judged against.
 *
 * Both fill the same result, so a table can compare them line by line.
 */
#ifndef TC_REPLAY_REPLAY_H
#define TC_REPLAY_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "trace/trace.h"

/* What one simulator did with one trace at one cache size. */
struct replay_result {
    char policy[32];                /* "default", "lru", ... or "ref-lru", "ref-opt" ... */
    uint64_t cache_bytes;
    uint64_t block_bytes;
    uint64_t requests;              /* all requests of the trace */
    uint64_t reads, read_hits, read_misses;         /* by request: a read is a hit
                                                       when all of it was cached */
    uint64_t read_bytes, read_hit_bytes, read_miss_bytes;
    uint64_t writes, write_hits;    /* a write hit: some of it was cached */
    uint64_t promotions;            /* blocks (or sectors' blocks) admitted */
    uint64_t evictions;             /* blocks dropped for room */
    /* Engine policies: what the cleaner's reclaims cost the cache device
     * -- blocks it copied (appended again) and their bytes, the chunk
     * bytes its walks read, its tail records synced -- and the bytes
     * written to the device in all (client data, fills, copies,
     * headers). */
    uint64_t copies, copied_bytes, cleaner_read_bytes, tail_syncs;
    uint64_t device_write_bytes;
    /* Reads and read misses by request, each weighted by 1 / the chance
     * that the sample kept it (struct replay_sample); without a sample,
     * equal to reads and read_misses. */
    double wreads, wread_misses;
    uint64_t trace_reads;           /* read requests of the whole trace, kept or not */
    /* Engine policies: where the cache device's bytes were, as fractions
     * of its size, averaged over the requests from the first time the
     * cleaner had to reclaim on (steady state; usage_samples 0: never):
     * live data, superblocks and the rest outside segments (meta), free
     * segments, unwritten room of segments in use, chunk headers, stale
     * versions (space.h, struct space_usage). */
    uint64_t usage_samples;
    double use_live, use_meta, use_free, use_unfilled, use_headers, use_stale;
    double seconds;                 /* wall time of the simulation */
    double cpu_seconds;             /* CPU time (user and system) of the
                                       process during it: unlike the wall
                                       time, not stretched by other load */
};

/* The process's CPU time so far, for cpu_seconds. */
static inline uint64_t replay_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Requests per second of CPU time (0 when none was measured). */
static inline double replay_rate(const struct replay_result *r)
{
    return r->cpu_seconds > 0 ? (double)r->requests / r->cpu_seconds : 0;
}

static inline double replay_miss_ratio(const struct replay_result *r)
{
    return r->reads ? (double)r->read_misses / (double)r->reads : 0;
}

/*
 * Spatial sampling, for miniature simulation (Waldspurger et al., USENIX
 * ATC 2017; src/replay/mini.c): only the blocks of block_bytes whose
 * SHARDS hash (shards.h) falls under rate * 2^64 are replayed, so a
 * sampled block keeps every access it had.  A request is cut at block
 * boundaries and keeps the runs of its sampled blocks (each run one
 * request to the engine; block by block for the reference simulators);
 * a request none of whose blocks is sampled is left out.  A kept read is
 * a hit when all its kept parts hit, and counts in wreads with weight
 * 1 / (1 - (1 - rate)^k) for a request of k blocks -- the inverse of its
 * chance to be kept -- so that requests of many blocks, kept more often,
 * weigh as much in the miss ratio as in the full trace.
 */
struct replay_sample {
    double rate;                    /* above 0, below 1 */
    uint64_t threshold;             /* hashes below it are sampled */
    uint64_t block_bytes;           /* the simulator's block */
};

void replay_sample_init(struct replay_sample *s, double rate, uint64_t block_bytes);
bool replay_sampled(const struct replay_sample *s, uint64_t block);
/* The next run of sampled blocks of the byte range [*pos, end), clipped
 * to it, in *off and *len; *pos moves past it.  False when none is left. */
bool replay_sample_run(const struct replay_sample *s, uint64_t *pos, uint64_t end,
                       uint64_t *off, uint64_t *len);
/* 1 / the chance that a request of the byte range [offset, end) keeps a
 * block. */
double replay_sample_weight(const struct replay_sample *s, uint64_t offset, uint64_t end);

/* The trace to replay: a file and how to read it. */
struct replay_trace {
    const char *path;
    enum tc_trace_format format;
    struct tc_trace_reader_options opt;
    const struct replay_sample *sample;     /* NULL: every request */
};

/* ---- engine replay (src/replay/engine.c) ---- */

struct replay_engine_config {
    const char *policy;             /* serve's --policy name */
    uint64_t cache_bytes;           /* the cache device's size */
    uint64_t block_bytes;           /* format --block-size; 0: the default */
    int mode;                       /* enum tc_mode; writethrough by default */
    uint64_t sequential_cutoff;     /* as serve; UINT64_MAX: serve's default */
    int fill;                       /* enum tc_fill; -1: serve's default */
    uint64_t volume_bytes;          /* 0: from the trace (native header, or
                                       the highest offset, rounded up) */
};

/* 0 with *out filled; -1 with err naming the trace or the setting. */
int replay_engine(const struct replay_trace *t, const struct replay_engine_config *cfg,
                  struct replay_result *out, char *err, size_t errlen);

/* ---- reference simulators (src/replay/reference.c) ---- */

/* "ref-lru", "ref-arc", "ref-s3fifo", "ref-sieve", "ref-opt". */
bool replay_reference_known(const char *name);
const char *replay_reference_names(void);
int replay_reference(const struct replay_trace *t, const char *name, uint64_t cache_bytes,
                     uint64_t block_bytes, struct replay_result *out, char *err,
                     size_t errlen);

/* ---- miss-ratio curves (src/replay/mrc.c) ---- */

/* An LRU miss-ratio curve over block_bytes blocks from one pass, by SHARDS
 * (Waldspurger et al., FAST 2015): only blocks whose hash falls under
 * rate * 2^64 are tracked, and their reuse distances are scaled by
 * 1 / rate.  rate 1 is exact.  miss[i] receives the read miss ratio of
 * an LRU cache of sizes[i] bytes per block read (the blocks a request
 * touches are accesses as in the reference simulators: a sample of blocks
 * cannot tell whether all of a request hit; for one-block requests this
 * is the ratio by request, and rate 1 equals ref-lru's). */
int replay_mrc_shards(const struct replay_trace *t, uint64_t block_bytes, double rate,
                      const uint64_t *sizes, size_t nsizes, double *miss, char *err,
                      size_t errlen);

/* ---- miniature simulation (src/replay/mini.c) ---- */

/* One point of a policy's miss-ratio curve by miniature simulation. */
struct replay_mini_point {
    uint64_t cache_bytes;           /* the cache size it stands for */
    double rate;                    /* the sampling rate used (1: a full replay) */
    uint64_t mini_bytes;            /* the miniature cache replayed */
    double miss;                    /* read miss ratio by request (weighted) */
    uint64_t requests;              /* requests of the sample replayed */
    double seconds;
};

/* The least cache size a policy's replay can run (engine: what format
 * needs; reference: one block); the least size of a miniature curve. */
uint64_t replay_mini_least(bool engine, uint64_t block_bytes);
/* cfg: the policy (engine or reference), the full cache size, and for
 * engine policies the other settings; block_bytes the cache block (not
 * 0).  The sampling rate is raised for sizes whose miniature cache would
 * be below the least one.  0, or -1 with err naming the size. */
int replay_mini(const struct replay_trace *t, const struct replay_engine_config *cfg,
                uint64_t block_bytes, double rate, struct replay_mini_point *pt, char *err,
                size_t errlen);

#endif
