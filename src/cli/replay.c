/* tiercache replay: what caches of given sizes and policies would have done
 * with a request trace (src/replay/), or miss-ratio curves (--mrc): LRU's
 * by SHARDS, or given policies' by miniature simulation (--policy). */
#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "format/ondisk.h"
#include "io/claim.h"
#include "policy/policy.h"
#include "replay/blockmap.h"
#include "replay/replay.h"
#include "tiercache.h"
#include "util/json.h"
#include "util/log.h"
#include "util/misc.h"
#include "util/parse.h"

static const char replay_help[] =
"Usage: tiercache replay --trace FILE [--format F] [--object-size SIZE]\n"
"                        --cache-size SIZE[,SIZE...] [--policy P[,P...]]\n"
"                        [--block-size SIZE] [--mode wt|wb] [--fill KIND]\n"
"                        [--sequential-cutoff SIZE] [--json]\n"
"       tiercache replay --trace FILE [--format F] [--object-size SIZE] --mrc\n"
"                        [--policy P[,P...] [--compare]] [--sample-rate R]\n"
"                        [--sizes SIZE,SIZE...] [--max-size SIZE] [--points N]\n"
"                        [--block-size SIZE] [--csv OUT] [--json]\n"
"\n"
"Replay a request trace (serve --trace, or a published block trace) through\n"
"simulated caches, without devices, and print for each policy and cache\n"
"size: requests, read hits and misses by request and by bytes, write hits,\n"
"promotions (blocks admitted), evictions, the read miss ratio by request\n"
"and the seconds the simulation took.  A read is a hit when all of it was\n"
"cached; a write hit found some of it cached.\n"
"\n"
"Policies:\n"
"  default, lru, fifo, s3fifo\n"
"               the engine itself, as serve runs it (the same index,\n"
"               admission, eviction and capacity rules) over memory devices\n"
"  ref-lru, ref-arc, ref-s3fifo, ref-sieve, ref-opt\n"
"               reference simulators over whole blocks that serve does not\n"
"               offer (reference; replay only): LRU, ARC, S3-FIFO, SIEVE and\n"
"               Belady's OPT, the fewest read misses possible.  A request is\n"
"               one access per block it touches; writes allocate; trims\n"
"               drop blocks\n"
"\n"
"  --trace FILE         the trace (a file: it is read once per run)\n"
"  --format F           native (default), blkparse, msr, spc, arc, oracle or\n"
"                       csv, as for trace-info\n"
"  --object-size SIZE   oracle and csv traces naming objects (default 4K)\n"
"  --blkparse-action A  blkparse: the event taken as a request (default D)\n"
"  --cache-size LIST    cache sizes, comma-separated (64M,256M,1G)\n"
"  --policy LIST        policies, comma-separated (default: default)\n"
"  --block-size SIZE    the cache block, a power of two from 4K to 1M\n"
"                       (default 64K, format's default)\n"
"  --mode MODE          engine policies: wt (writethrough, default) or wb\n"
"                       (writeback)\n"
"  --fill KIND          engine policies: group, block, sectors or auto, as\n"
"                       serve; auto takes the choice serve makes before it\n"
"                       has measured the origin (group for blocks of up to\n"
"                       256K, else sectors): replay has no origin to measure\n"
"  --sequential-cutoff SIZE\n"
"                       engine policies: as serve (default: serve's)\n"
"  --json               print the results as JSON, with the simulation's\n"
"                       cpu_seconds (the process's CPU time, which other\n"
"                       load does not stretch as it does seconds) and\n"
"                       requests_per_second (requests / cpu_seconds); for\n"
"                       engine policies also device_use: where the cache device's bytes were from\n"
"                       the first time the cleaner had to reclaim on (mean\n"
"                       fractions of its size: live data, meta -- superblocks\n"
"                       and the rest outside segments --, free segments,\n"
"                       unfilled room of segments in use, chunk headers,\n"
"                       stale versions), cleaner (its copies: blocks and\n"
"                       bytes appended again; the bytes its walks read;\n"
"                       its tail records synced) and device_write_bytes\n"
"                       (all bytes written to the cache device)\n"
"\n"
"Miss-ratio curve (--mrc): LRU's read miss ratio at many cache sizes from\n"
"one pass over the trace, by SHARDS sampling (Waldspurger et al., FAST\n"
"2015).  The ratio is per block read (a request of several blocks counts\n"
"each; for one-block requests it is the ratio by request).  Prints the\n"
"curve and its knee, the smallest size whose miss ratio is within 0.02 of\n"
"the curve's floor (its lowest point).\n"
"\n"
"  --mrc                draw the curve instead of replaying policies\n"
"  --sample-rate R      fraction of blocks tracked, above 0 to 1 (default\n"
"                       0.01; 1 is exact, slower and larger)\n"
"  --sizes LIST         the cache sizes of the curve, comma-separated\n"
"  --max-size SIZE      else: sizes up to SIZE (default: the trace's\n"
"                       footprint, counted in a first pass) ...\n"
"  --points N           ... in N equal steps (default 20)\n"
"  --csv OUT            write the curve to OUT (cache_bytes,miss_ratio) and,\n"
"                       where gnuplot is installed, plot it to OUT with the\n"
"                       suffix .png (never a file a daemon holds: an origin\n"
"                       or cache device in use)\n"
"\n"
"With --policy, --mrc draws those policies' curves instead (engine or\n"
"reference), by miniature simulation (Waldspurger et al., USENIX ATC 2017):\n"
"for each size S the real policy replays the trace's sampled blocks (the\n"
"same hash as SHARDS, rate R) with a cache R times as large, and its read\n"
"miss ratio by request stands for S's.  One replay per policy and size.\n"
"  - Requests are cut at block boundaries and keep the runs of their\n"
"    sampled blocks (one request each to the engine); a request with none\n"
"    is left out.  A kept read is a hit when all its kept parts hit, and\n"
"    counts 1 / (1 - (1 - R)^k) times for a request of k blocks (its chance\n"
"    to be kept), so the ratio stays by request as in a full replay; the\n"
"    weighted misses are divided by all the trace's reads (as SHARDS-adj).\n"
"  - Engine caches: the miniature device is the smallest whose room for\n"
"    data (less superblocks and the segments the cleaner keeps free) is R\n"
"    times the full one's.  A cache device needs 8 segments (9M at blocks\n"
"    up to 256K): sizes whose miniature would be smaller use a larger R,\n"
"    up to 1 (a full replay); sizes below the least cache are an error.\n"
"    Reference caches hold R times the blocks (at least one).\n"
"  - Each point names the rate it used (table, CSV, JSON).  Sampling\n"
"    breaks sequential streams (the cutoff sees pieces) and spreads the\n"
"    sample's requests over the trace's time.\n"
"  --policy LIST        the policies of the curves\n"
"  --sample-rate R      as above (default 0.01)\n"
"  --compare            also replay each size in full and print the\n"
"                       miniature's error (slow: a full replay per point)\n"
"  --csv OUT            policy,cache_bytes,sample_rate,mini_cache_bytes,\n"
"                       miss_ratio[,full_miss_ratio] and OUT.png as above\n"
"  --mode, --fill, --sequential-cutoff\n"
"                       engine policies: as for replaying\n"
"  --help, -h           this text\n"
"\n"
"Exit status: 0; 1 if the trace cannot be read or is malformed; 2 for a\n"
"usage error (a bad size, policy or rate, or a size below the least cache).\n";

enum {
    OPT_TRACE = 256, OPT_FORMAT, OPT_OBJECT_SIZE, OPT_ACTION, OPT_CACHE_SIZE, OPT_POLICY,
    OPT_BLOCK_SIZE, OPT_MODE, OPT_FILL, OPT_CUTOFF, OPT_JSON, OPT_MRC, OPT_RATE, OPT_SIZES,
    OPT_MAX_SIZE, OPT_POINTS, OPT_CSV, OPT_COMPARE,
};

static const struct option replay_opts[] = {
    { "trace", required_argument, NULL, OPT_TRACE },
    { "format", required_argument, NULL, OPT_FORMAT },
    { "object-size", required_argument, NULL, OPT_OBJECT_SIZE },
    { "blkparse-action", required_argument, NULL, OPT_ACTION },
    { "cache-size", required_argument, NULL, OPT_CACHE_SIZE },
    { "policy", required_argument, NULL, OPT_POLICY },
    { "block-size", required_argument, NULL, OPT_BLOCK_SIZE },
    { "mode", required_argument, NULL, OPT_MODE },
    { "fill", required_argument, NULL, OPT_FILL },
    { "sequential-cutoff", required_argument, NULL, OPT_CUTOFF },
    { "json", no_argument, NULL, OPT_JSON },
    { "mrc", no_argument, NULL, OPT_MRC },
    { "sample-rate", required_argument, NULL, OPT_RATE },
    { "sizes", required_argument, NULL, OPT_SIZES },
    { "max-size", required_argument, NULL, OPT_MAX_SIZE },
    { "points", required_argument, NULL, OPT_POINTS },
    { "csv", required_argument, NULL, OPT_CSV },
    { "compare", no_argument, NULL, OPT_COMPARE },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
};

#define MAX_LIST 64

struct replay_args {
    struct replay_trace t;
    uint64_t sizes[MAX_LIST];
    unsigned nsizes;
    const char **policies;
    unsigned npolicies;
    uint64_t block_bytes;           /* 0: not given */
    int mode, fill;
    uint64_t cutoff;
    bool json, mrc;
    double rate;
    uint64_t max_size;
    uint64_t points;
    bool points_given;
    const char *csv;
    bool compare;                   /* --compare */
    uint64_t mrc_sizes[MAX_LIST];   /* --sizes */
    unsigned mrc_nsizes;
    bool mrc_sizes_given;
    bool engine_only_set;           /* --mode, --fill or --sequential-cutoff */
    bool mrc_only_set;              /* --sample-rate, --sizes, --max-size, --points, --csv */
};

/* "64M,1G" into sizes; exits with a message naming the bad one. */
static unsigned parse_sizes(const char *opt, char *list, uint64_t *sizes)
{
    unsigned n;
    const char **v = cli_split_list(opt, list, MAX_LIST + 1, &n);
    if (n == 0)
        tc_die(2, "%s: give at least one size", opt);
    if (n > MAX_LIST)
        tc_die(2, "%s: at most %d sizes", opt, MAX_LIST);
    char err[256];
    for (unsigned i = 0; i < n; i++) {
        if (tc_parse_size(opt, v[i], &sizes[i], err, sizeof err) < 0)
            tc_die(2, "%s", err);
        if (sizes[i] == 0)
            tc_die(2, "%s %s: a cache size must be above 0", opt, v[i]);
    }
    free(v);
    return n;
}

static bool engine_policy(const char *name) { return policy_find(name) != NULL; }

static void print_results(const struct replay_result *res, size_t n)
{
    char b1[32], b2[32], b3[32];
    for (size_t i = 0; i < n; i++) {
        const struct replay_result *r = &res[i];
        if (i == 0 || strcmp(r->policy, res[i - 1].policy) != 0) {
            printf("%spolicy %s%s, blocks of %s\n", i ? "\n" : "", r->policy,
                   strncmp(r->policy, "ref-", 4) == 0 ? " (reference; replay only)" : "",
                   tc_format_size(r->block_bytes, b1, sizeof b1));
            printf("  %10s %10s %10s %10s %10s %10s %10s %10s %10s %10s %6s %7s\n", "cache",
                   "requests", "reads", "read hits", "misses", "hit bytes", "miss bytes",
                   "write hits", "promoted", "evicted", "miss", "seconds");
        }
        printf("  %10s %10llu %10llu %10llu %10llu %10s %10s %10llu %10llu %10llu %6.4f %7.3f\n",
               tc_format_size(r->cache_bytes, b1, sizeof b1), (unsigned long long)r->requests,
               (unsigned long long)r->reads, (unsigned long long)r->read_hits,
               (unsigned long long)r->read_misses,
               tc_format_size(r->read_hit_bytes, b2, sizeof b2),
               tc_format_size(r->read_miss_bytes, b3, sizeof b3),
               (unsigned long long)r->write_hits, (unsigned long long)r->promotions,
               (unsigned long long)r->evictions, replay_miss_ratio(r), r->seconds);
    }
}

static void json_results(const struct replay_args *a, const struct replay_result *res,
                         size_t n)
{
    struct tc_json j;
    json_init(&j, true);
    json_begin_object(&j, NULL);
    json_string(&j, "trace", a->t.path);
    json_string(&j, "format", trace_format_name(a->t.format));
    json_begin_array(&j, "results");
    for (size_t i = 0; i < n; i++) {
        const struct replay_result *r = &res[i];
        json_begin_object(&j, NULL);
        json_string(&j, "policy", r->policy);
        json_bool(&j, "reference", strncmp(r->policy, "ref-", 4) == 0);
        json_uint(&j, "cache_bytes", r->cache_bytes);
        json_uint(&j, "block_bytes", r->block_bytes);
        json_uint(&j, "requests", r->requests);
        json_uint(&j, "reads", r->reads);
        json_uint(&j, "read_hits", r->read_hits);
        json_uint(&j, "read_misses", r->read_misses);
        json_uint(&j, "read_bytes", r->read_bytes);
        json_uint(&j, "read_hit_bytes", r->read_hit_bytes);
        json_uint(&j, "read_miss_bytes", r->read_miss_bytes);
        json_uint(&j, "writes", r->writes);
        json_uint(&j, "write_hits", r->write_hits);
        json_uint(&j, "promotions", r->promotions);
        json_uint(&j, "evictions", r->evictions);
        json_double(&j, "miss_ratio", replay_miss_ratio(r));
        /* Over the bytes counted as hits or misses, not read_bytes: the
         * engine counts whole sectors (a 512-byte read of a published
         * trace is a 4 KiB hit or miss), read_bytes what was asked for. */
        uint64_t counted = r->read_hit_bytes + r->read_miss_bytes;
        json_double(&j, "byte_miss_ratio",
                    counted ? (double)r->read_miss_bytes / (double)counted : 0);
        if (strncmp(r->policy, "ref-", 4) != 0) {
            /* Engine policies: what the cleaner cost the cache device. */
            json_begin_object(&j, "cleaner");
            json_uint(&j, "copies", r->copies);
            json_uint(&j, "copied_bytes", r->copied_bytes);
            json_uint(&j, "read_bytes", r->cleaner_read_bytes);
            json_uint(&j, "tail_syncs", r->tail_syncs);
            json_end_object(&j);
            json_uint(&j, "device_write_bytes", r->device_write_bytes);
        }
        if (r->usage_samples) {
            /* Engine policies at steady state: fractions of the device. */
            json_begin_object(&j, "device_use");
            json_double(&j, "live", r->use_live);
            json_double(&j, "meta", r->use_meta);
            json_double(&j, "free", r->use_free);
            json_double(&j, "unfilled", r->use_unfilled);
            json_double(&j, "headers", r->use_headers);
            json_double(&j, "stale", r->use_stale);
            json_end_object(&j);
        }
        json_double(&j, "seconds", r->seconds);
        json_double(&j, "cpu_seconds", r->cpu_seconds);
        json_uint(&j, "requests_per_second", (uint64_t)llround(replay_rate(r)));
        json_end_object(&j);
    }
    json_end_array(&j);
    json_end_object(&j);
    printf("%.*s\n", (int)j.len, j.buf);
    json_free(&j);
}

static int run_policies(struct replay_args *a)
{
    if (a->nsizes == 0)
        tc_die(2, "replay: --cache-size is required (or --mrc; try --help)");
    uint64_t ref_block = a->block_bytes ? a->block_bytes : TC_DEFAULT_BLOCK_SIZE;
    char b1[32], b2[32];
    for (unsigned i = 0; i < a->nsizes; i++)
        if (a->sizes[i] < ref_block)
            tc_die(2, "--cache-size %s: smaller than one block of %s",
                   tc_format_size(a->sizes[i], b1, sizeof b1),
                   tc_format_size(ref_block, b2, sizeof b2));
    size_t n = (size_t)a->npolicies * a->nsizes;
    struct replay_result *res = tc_xcalloc(n, sizeof *res);
    char err[512];
    size_t k = 0;
    for (unsigned p = 0; p < a->npolicies; p++) {
        for (unsigned s = 0; s < a->nsizes; s++, k++) {
            int rc;
            if (engine_policy(a->policies[p])) {
                struct replay_engine_config cfg = {
                    .policy = a->policies[p],
                    .cache_bytes = a->sizes[s],
                    .block_bytes = a->block_bytes,
                    .mode = a->mode,
                    .sequential_cutoff = a->cutoff,
                    .fill = a->fill,
                };
                rc = replay_engine(&a->t, &cfg, &res[k], err, sizeof err);
            } else {
                rc = replay_reference(&a->t, a->policies[p], a->sizes[s], ref_block, &res[k],
                                      err, sizeof err);
            }
            if (rc < 0) {
                free(res);
                tc_die(1, "%s", err);
            }
        }
    }
    if (a->json)
        json_results(a, res, n);
    else
        print_results(res, n);
    free(res);
    return 0;
}

/* ---- --mrc ---- */

/* Distinct blocks read or written: the default range of the curve. */
static uint64_t footprint_blocks(const struct replay_trace *t, uint64_t bs)
{
    char err[512];
    struct tc_trace_reader *r = trace_reader_open(t->path, t->format, &t->opt, err, sizeof err);
    if (!r)
        tc_die(1, "%s", err);
    struct bmap seen;
    bmap_init(&seen, 1 << 16);
    struct tc_trace_req q;
    int rc;
    while ((rc = trace_reader_next(r, &q, err, sizeof err)) == 1) {
        if (!q.length || (q.op != TC_OP_READ && q.op != TC_OP_WRITE &&
                          q.op != TC_OP_WRITE_ZEROES))
            continue;
        for (uint64_t b = q.offset / bs; b <= (q.offset + q.length - 1) / bs; b++)
            if (!bmap_get(&seen, b))
                bmap_put(&seen, b, 0);
    }
    trace_reader_close(r);
    uint64_t n = seen.count;
    bmap_free(&seen);
    if (rc < 0)
        tc_die(1, "%s", err);
    return n;
}

static int cmp_u64(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

static bool have_gnuplot(void)
{
    const char *path = getenv("PATH");
    if (!path)
        return false;
    char *dup = tc_xstrdup(path), *save = NULL;
    bool found = false;
    for (char *d = strtok_r(dup, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
        char p[4096];
        snprintf(p, sizeof p, "%s/gnuplot", d);
        found = access(p, X_OK) == 0;
    }
    free(dup);
    return found;
}

/* Where the plot of the curve in csv goes (csv with .png for .csv), if
 * gnuplot exists to draw it. */
static bool png_beside(const char *csv, char *png, size_t size)
{
    if (!have_gnuplot())
        return false;
    size_t len = strlen(csv);
    if (len > 4 && strcmp(csv + len - 4, ".csv") == 0)
        len -= 4;
    snprintf(png, size, "%.*s.png", (int)len, csv);
    return true;
}

/* Writes OUT.png (OUT's .csv suffix replaced) with gnuplot; false if
 * gnuplot failed. */
static bool plot_curve(const char *csv, const char *png, const char *trace, double rate)
{
    FILE *g = popen("gnuplot", "w");
    if (!g)
        return false;
    fprintf(g, "set terminal png size 800,500\nset output '%s'\n"
               "set datafile separator ','\nset key off\n"
               "set title \"LRU miss-ratio curve of %s (SHARDS, rate %g)\" noenhanced\n"
               "set xlabel 'cache size (MiB)'\nset ylabel 'read miss ratio'\n"
               "set yrange [0:1]\nset grid\n"
               "plot '%s' using ($1/1048576):2 skip 1 with linespoints\n",
            png, trace, rate, csv);
    return pclose(g) == 0;
}

static int run_mini(struct replay_args *a);

static int run_mrc(struct replay_args *a)
{
    if (a->nsizes)
        tc_die(2, "replay --mrc: --cache-size does not apply (--sizes gives the curve's "
               "sizes)");
    if (a->npolicies)
        return run_mini(a);
    if (a->compare)
        tc_die(2, "replay --mrc: --compare goes with --policy (miniature simulation)");
    if (a->engine_only_set)
        tc_die(2, "replay --mrc: --mode, --fill and --sequential-cutoff apply to engine "
               "policies only");
    uint64_t bs = a->block_bytes ? a->block_bytes : TC_DEFAULT_BLOCK_SIZE;
    static uint64_t sizes[MAX_LIST];
    size_t n = 0;
    if (a->mrc_sizes_given) {
        n = a->mrc_nsizes;
        memcpy(sizes, a->mrc_sizes, n * sizeof *sizes);
    } else {
        uint64_t max = a->max_size ? a->max_size : footprint_blocks(&a->t, bs) * bs;
        if (max < bs)
            tc_die(1, "%s: the trace reads or writes no block", a->t.path);
        for (uint64_t i = 1; i <= a->points; i++)
            sizes[n++] = TC_MAX(bs, tc_round_up(max * i / a->points, bs));
    }
    qsort(sizes, n, sizeof *sizes, cmp_u64);
    double miss[MAX_LIST];
    char err[512];
    uint64_t t0 = tc_now_ns();
    if (replay_mrc_shards(&a->t, bs, a->rate, sizes, n, miss, err, sizeof err) < 0)
        tc_die(1, "%s", err);
    double seconds = (double)(tc_now_ns() - t0) / 1e9;
    double floor = 1;
    for (size_t i = 0; i < n; i++)
        floor = TC_MIN(floor, miss[i]);
    size_t knee = 0;
    while (knee < n && miss[knee] > floor + 0.02)
        knee++;
    char png[4096] = "";
    if (a->csv) {
        FILE *f = fopen(a->csv, "w");
        if (!f)
            tc_die(1, "%s: %s", a->csv, strerror(errno));
        fprintf(f, "cache_bytes,miss_ratio\n");
        for (size_t i = 0; i < n; i++)
            fprintf(f, "%llu,%.6f\n", (unsigned long long)sizes[i], miss[i]);
        if (fclose(f) != 0)
            tc_die(1, "%s: %s", a->csv, strerror(errno));
        if (png_beside(a->csv, png, sizeof png)) {
            if (!plot_curve(a->csv, png, a->t.path, a->rate)) {
                fprintf(stderr, "tiercache: gnuplot could not plot %s\n", png);
                png[0] = 0;
            }
        }
    }
    char b1[32], b2[32];
    if (a->json) {
        struct tc_json j;
        json_init(&j, true);
        json_begin_object(&j, NULL);
        json_string(&j, "trace", a->t.path);
        json_double(&j, "sample_rate", a->rate);
        json_uint(&j, "block_bytes", bs);
        json_begin_array(&j, "curve");
        for (size_t i = 0; i < n; i++) {
            json_begin_object(&j, NULL);
            json_uint(&j, "cache_bytes", sizes[i]);
            json_double(&j, "miss_ratio", miss[i]);
            json_end_object(&j);
        }
        json_end_array(&j);
        json_double(&j, "floor", floor);
        json_uint(&j, "knee_bytes", sizes[knee]);
        json_double(&j, "seconds", seconds);
        if (a->csv)
            json_string(&j, "csv", a->csv);
        if (png[0])
            json_string(&j, "plot", png);
        json_end_object(&j);
        printf("%.*s\n", (int)j.len, j.buf);
        json_free(&j);
        return 0;
    }
    printf("LRU miss-ratio curve of %s, blocks of %s, SHARDS rate %g (%.3f s)\n",
           a->t.path, tc_format_size(bs, b1, sizeof b1), a->rate, seconds);
    printf("  %10s %12s %10s\n", "cache", "blocks", "miss ratio");
    for (size_t i = 0; i < n; i++)
        printf("  %10s %12llu %10.4f%s\n", tc_format_size(sizes[i], b1, sizeof b1),
               (unsigned long long)(sizes[i] / bs), miss[i], i == knee ? "  <- knee" : "");
    printf("knee: %s (miss ratio %.4f, within 0.02 of the floor %.4f)\n",
           tc_format_size(sizes[knee], b2, sizeof b2), miss[knee], floor);
    if (a->csv)
        printf("csv: %s\n", a->csv);
    if (png[0])
        printf("plot: %s\n", png);
    return 0;
}

/* ---- --mrc --policy: miniature simulation ---- */

struct mini_curve {
    const char *policy;
    struct replay_mini_point pt[MAX_LIST];
    double full[MAX_LIST];          /* --compare: the full replay's miss ratio */
    double floor, seconds, full_seconds, mae, max_err;
    size_t knee;
};

static void mini_plot(const struct replay_args *a, const struct mini_curve *cv, unsigned np,
                      const char *png, double rate)
{
    FILE *g = popen("gnuplot", "w");
    if (!g)
        return;
    fprintf(g, "set terminal png size 800,500\nset output '%s'\n"
               "set datafile separator ','\nset key top right noenhanced\n"
               "set title \"miss-ratio curves of %s (miniature simulation, rate %g)\" "
               "noenhanced\n"
               "set xlabel 'cache size (MiB)'\nset ylabel 'read miss ratio'\n"
               "set yrange [0:1]\nset grid\nplot ",
            png, a->t.path, rate);
    for (unsigned p = 0; p < np; p++)
        fprintf(g, "%s'%s' using (strcol(1) eq '%s' ? $2/1048576 : NaN):5 skip 1 "
                   "with linespoints title '%s'", p ? ", " : "", a->csv, cv[p].policy,
                cv[p].policy);
    fprintf(g, "\n");
    if (pclose(g) != 0) {
        fprintf(stderr, "tiercache: gnuplot could not plot %s\n", png);
        unlink(png);
    }
}

static int run_mini(struct replay_args *a)
{
    uint64_t bs = a->block_bytes ? a->block_bytes : TC_DEFAULT_BLOCK_SIZE;
    char b1[32], b2[32], err[512];
    /* The least size every policy asked for can run. */
    uint64_t least = 0;
    const char *least_of = NULL;
    for (unsigned p = 0; p < a->npolicies; p++) {
        uint64_t l = replay_mini_least(engine_policy(a->policies[p]), bs);
        if (l > least) {
            least = l;
            least_of = a->policies[p];
        }
    }
    static uint64_t sizes[MAX_LIST];
    size_t n = 0;
    if (a->mrc_sizes_given) {
        for (unsigned i = 0; i < a->mrc_nsizes; i++)
            if (a->mrc_sizes[i] < least)
                tc_die(2, "--sizes %s: below the least cache policy %s can run (%s with "
                       "blocks of %s)", tc_format_size(a->mrc_sizes[i], b1, sizeof b1),
                       least_of, tc_format_size(least, b2, sizeof b2),
                       tc_format_size(bs, b1 + 16, 16));
        n = a->mrc_nsizes;
        memcpy(sizes, a->mrc_sizes, n * sizeof *sizes);
        qsort(sizes, n, sizeof *sizes, cmp_u64);
    } else {
        uint64_t max = a->max_size ? a->max_size : footprint_blocks(&a->t, bs) * bs;
        if (max < least)
            tc_die(a->max_size ? 2 : 1, "%s %s: below the least cache policy %s can run (%s "
                   "with blocks of %s)", a->max_size ? "--max-size" : "the trace's footprint",
                   tc_format_size(max, b1, sizeof b1), least_of,
                   tc_format_size(least, b2, sizeof b2), tc_format_size(bs, b1 + 16, 16));
        /* As the LRU curve's, from the least size on. */
        for (uint64_t i = 1; i <= a->points; i++) {
            uint64_t s = TC_MAX(least, tc_round_up(max * i / a->points, bs));
            if (n == 0 || s != sizes[n - 1])
                sizes[n++] = s;
        }
    }
    struct mini_curve *cv = tc_xcalloc(a->npolicies, sizeof *cv);
    for (unsigned p = 0; p < a->npolicies; p++) {
        struct mini_curve *c = &cv[p];
        c->policy = a->policies[p];
        for (size_t i = 0; i < n; i++) {
            struct replay_engine_config cfg = {
                .policy = c->policy,
                .cache_bytes = sizes[i],
                .block_bytes = bs,
                .mode = a->mode,
                .sequential_cutoff = a->cutoff,
                .fill = a->fill,
            };
            if (replay_mini(&a->t, &cfg, bs, a->rate, &c->pt[i], err, sizeof err) < 0)
                tc_die(1, "%s", err);
            c->seconds += c->pt[i].seconds;
            if (!a->compare)
                continue;
            struct replay_result r;
            int rc = engine_policy(c->policy)
                         ? replay_engine(&a->t, &cfg, &r, err, sizeof err)
                         : replay_reference(&a->t, c->policy, sizes[i], bs, &r, err,
                                            sizeof err);
            if (rc < 0)
                tc_die(1, "%s", err);
            c->full[i] = replay_miss_ratio(&r);
            c->full_seconds += r.seconds;
            double e = fabs(c->pt[i].miss - c->full[i]);
            c->mae += e / (double)n;
            c->max_err = TC_MAX(c->max_err, e);
        }
        c->floor = 1;
        for (size_t i = 0; i < n; i++)
            c->floor = TC_MIN(c->floor, c->pt[i].miss);
        while (c->knee < n && c->pt[c->knee].miss > c->floor + 0.02)
            c->knee++;
    }
    char png[4096] = "";
    if (a->csv) {
        FILE *f = fopen(a->csv, "w");
        if (!f)
            tc_die(1, "%s: %s", a->csv, strerror(errno));
        fprintf(f, "policy,cache_bytes,sample_rate,mini_cache_bytes,miss_ratio%s\n",
                a->compare ? ",full_miss_ratio" : "");
        for (unsigned p = 0; p < a->npolicies; p++)
            for (size_t i = 0; i < n; i++) {
                const struct replay_mini_point *pt = &cv[p].pt[i];
                fprintf(f, "%s,%llu,%.6g,%llu,%.6f", cv[p].policy,
                        (unsigned long long)pt->cache_bytes, pt->rate,
                        (unsigned long long)pt->mini_bytes, pt->miss);
                if (a->compare)
                    fprintf(f, ",%.6f", cv[p].full[i]);
                fprintf(f, "\n");
            }
        if (fclose(f) != 0)
            tc_die(1, "%s: %s", a->csv, strerror(errno));
        if (png_beside(a->csv, png, sizeof png)) {
            mini_plot(a, cv, a->npolicies, png, a->rate);
            if (access(png, F_OK) != 0)
                png[0] = 0;
        }
    }
    if (a->json) {
        struct tc_json j;
        json_init(&j, true);
        json_begin_object(&j, NULL);
        json_string(&j, "trace", a->t.path);
        json_string(&j, "method", "miniature");
        json_double(&j, "sample_rate", a->rate);
        json_uint(&j, "block_bytes", bs);
        json_begin_array(&j, "policies");
        for (unsigned p = 0; p < a->npolicies; p++) {
            const struct mini_curve *c = &cv[p];
            json_begin_object(&j, NULL);
            json_string(&j, "policy", c->policy);
            json_bool(&j, "reference", !engine_policy(c->policy));
            json_begin_array(&j, "curve");
            for (size_t i = 0; i < n; i++) {
                json_begin_object(&j, NULL);
                json_uint(&j, "cache_bytes", c->pt[i].cache_bytes);
                json_double(&j, "sample_rate", c->pt[i].rate);
                json_uint(&j, "mini_cache_bytes", c->pt[i].mini_bytes);
                json_double(&j, "miss_ratio", c->pt[i].miss);
                json_uint(&j, "requests", c->pt[i].requests);
                json_double(&j, "seconds", c->pt[i].seconds);
                if (a->compare) {
                    json_double(&j, "full_miss_ratio", c->full[i]);
                    json_double(&j, "error", c->pt[i].miss - c->full[i]);
                }
                json_end_object(&j);
            }
            json_end_array(&j);
            json_double(&j, "floor", c->floor);
            json_uint(&j, "knee_bytes", sizes[c->knee]);
            json_double(&j, "seconds", c->seconds);
            if (a->compare) {
                json_double(&j, "full_seconds", c->full_seconds);
                json_double(&j, "mean_abs_error", c->mae);
                json_double(&j, "max_abs_error", c->max_err);
            }
            json_end_object(&j);
        }
        json_end_array(&j);
        if (a->csv)
            json_string(&j, "csv", a->csv);
        if (png[0])
            json_string(&j, "plot", png);
        json_end_object(&j);
        printf("%.*s\n", (int)j.len, j.buf);
        json_free(&j);
        free(cv);
        return 0;
    }
    for (unsigned p = 0; p < a->npolicies; p++) {
        const struct mini_curve *c = &cv[p];
        printf("%s%s miss-ratio curve of %s, blocks of %s, miniature simulation at rate %g "
               "(%.3f s)\n", p ? "\n" : "", c->policy, a->t.path,
               tc_format_size(bs, b1, sizeof b1), a->rate, c->seconds);
        printf("  %10s %8s %11s %10s", "cache", "rate", "mini cache", "miss ratio");
        if (a->compare)
            printf(" %10s %8s", "full", "error");
        printf("\n");
        for (size_t i = 0; i < n; i++) {
            const struct replay_mini_point *pt = &c->pt[i];
            printf("  %10s %8.4g %11s %10.4f", tc_format_size(pt->cache_bytes, b1, sizeof b1),
                   pt->rate, tc_format_size(pt->mini_bytes, b2, sizeof b2), pt->miss);
            if (a->compare)
                printf(" %10.4f %+8.4f", c->full[i], pt->miss - c->full[i]);
            printf("%s\n", i == c->knee ? "  <- knee" : "");
        }
        printf("knee: %s (miss ratio %.4f, within 0.02 of the floor %.4f)\n",
               tc_format_size(sizes[c->knee], b1, sizeof b1), c->pt[c->knee].miss, c->floor);
        if (a->compare)
            printf("against full replays (%.3f s): mean absolute error %.4f, largest %.4f\n",
                   c->full_seconds, c->mae, c->max_err);
    }
    if (a->csv)
        printf("csv: %s\n", a->csv);
    if (png[0])
        printf("plot: %s\n", png);
    free(cv);
    return 0;
}

int cmd_replay(int argc, char **argv)
{
    struct replay_args a = {
        .t = { .format = TC_TRACE_NATIVE },
        .mode = TC_MODE_WRITETHROUGH,
        .fill = -1,
        .cutoff = UINT64_MAX,
        .rate = 0.01,
        .points = 20,
    };
    char *policy_list = NULL;
    char err[256];
    int opt;
    /* The engine frees and takes back buffers of writeback and cleaning
     * between two requests: keep the freed heap rather than give it back
     * to the system and fault it in again (a fifth of a writeback replay's
     * time went to that). */
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    mallopt(M_TOP_PAD, 16 << 20);
    optind = 1;
    /* The engine's start-up lines, once per policy and size, are noise
     * here: warnings and errors only. */
    tc_log_set_level(TC_LOG_WARN);
    while ((opt = getopt_long(argc, argv, "h", replay_opts, NULL)) != -1) {
        switch (opt) {
        case OPT_TRACE:
            a.t.path = optarg;
            break;
        case OPT_FORMAT: {
            int f = trace_format_parse(optarg);
            if (f < 0)
                tc_die(2, "--format '%s': choose %s", optarg, trace_format_names());
            a.t.format = (enum tc_trace_format)f;
            break;
        }
        case OPT_OBJECT_SIZE:
            if (tc_parse_size("--object-size", optarg, &a.t.opt.object_bytes, err,
                              sizeof err) < 0)
                tc_die(2, "%s", err);
            if (a.t.opt.object_bytes == 0 || a.t.opt.object_bytes > UINT32_MAX)
                tc_die(2, "--object-size %s: from 1 byte to 4G - 1", optarg);
            break;
        case OPT_ACTION:
            if (strlen(optarg) != 1 || !strchr("QGIDCMF", optarg[0]))
                tc_die(2, "--blkparse-action '%s': one event letter such as D (issued) or Q "
                       "(queued)", optarg);
            a.t.opt.blkparse_action = optarg[0];
            break;
        case OPT_CACHE_SIZE:
            a.nsizes = parse_sizes("--cache-size", optarg, a.sizes);
            break;
        case OPT_SIZES:
            a.mrc_nsizes = parse_sizes("--sizes", optarg, a.mrc_sizes);
            a.mrc_sizes_given = true;
            a.mrc_only_set = true;
            break;
        case OPT_POLICY:
            policy_list = optarg;
            break;
        case OPT_BLOCK_SIZE:
            if (tc_parse_size("--block-size", optarg, &a.block_bytes, err, sizeof err) < 0)
                tc_die(2, "%s", err);
            if (!tc_is_pow2(a.block_bytes) || a.block_bytes < 4096 ||
                a.block_bytes > (1u << 20))
                tc_die(2, "--block-size %s: must be a power of two from 4K to 1M", optarg);
            break;
        case OPT_MODE:
            if (strcmp(optarg, "wt") == 0 || strcmp(optarg, "writethrough") == 0)
                a.mode = TC_MODE_WRITETHROUGH;
            else if (strcmp(optarg, "wb") == 0 || strcmp(optarg, "writeback") == 0)
                a.mode = TC_MODE_WRITEBACK;
            else
                tc_die(2, "--mode '%s': choose wt (writethrough) or wb (writeback)", optarg);
            a.engine_only_set = true;
            break;
        case OPT_FILL:
            if (strcmp(optarg, "auto") == 0)
                a.fill = TC_FILL_AUTO;
            else if (strcmp(optarg, "block") == 0)
                a.fill = TC_FILL_BLOCK;
            else if (strcmp(optarg, "sectors") == 0)
                a.fill = TC_FILL_SECTORS;
            else if (strcmp(optarg, "group") == 0)
                a.fill = TC_FILL_GROUP;
            else
                tc_die(2, "--fill '%s': choose group, block, sectors or auto", optarg);
            a.engine_only_set = true;
            break;
        case OPT_CUTOFF:
            if (tc_parse_size("--sequential-cutoff", optarg, &a.cutoff, err, sizeof err) < 0)
                tc_die(2, "%s", err);
            a.engine_only_set = true;
            break;
        case OPT_JSON:
            a.json = true;
            break;
        case OPT_MRC:
            a.mrc = true;
            break;
        case OPT_RATE: {
            char *end;
            errno = 0;
            a.rate = strtod(optarg, &end);
            if (errno || end == optarg || *end || !(a.rate > 0 && a.rate <= 1))
                tc_die(2, "--sample-rate '%s': a fraction above 0, at most 1 (such as 0.01)",
                       optarg);
            a.mrc_only_set = true;
            break;
        }
        case OPT_MAX_SIZE:
            if (tc_parse_size("--max-size", optarg, &a.max_size, err, sizeof err) < 0)
                tc_die(2, "%s", err);
            if (a.max_size == 0)
                tc_die(2, "--max-size %s: must be above 0", optarg);
            a.mrc_only_set = true;
            break;
        case OPT_POINTS:
            if (tc_parse_uint("--points", optarg, 2, MAX_LIST, &a.points, err, sizeof err) < 0)
                tc_die(2, "%s", err);
            a.points_given = true;
            a.mrc_only_set = true;
            break;
        case OPT_CSV:
            a.csv = optarg;
            a.mrc_only_set = true;
            break;
        case OPT_COMPARE:
            a.compare = true;
            a.mrc_only_set = true;
            break;
        case 'h':
            cli_print(replay_help);
            return 0;
        default:
            fprintf(stderr, "Try 'tiercache replay --help'.\n");
            return 2;
        }
    }
    if (optind != argc)
        tc_die(2, "replay: unexpected argument '%s' (the trace goes after --trace)",
               argv[optind]);
    if (!a.t.path)
        tc_die(2, "replay: --trace FILE is required (try --help)");
    if (strcmp(a.t.path, "-") == 0)
        tc_die(2, "replay: --trace -: replay reads the trace more than once, give a file");
    if (access(a.t.path, R_OK) < 0)
        tc_die(1, "%s: %s", a.t.path, strerror(errno));
    char cerr[1200];
    if (a.csv && claim_check_output(a.csv, "--csv", "replace its contents with the curve", NULL,
                                    NULL, cerr, sizeof cerr) < 0)
        tc_die(1, "%s", cerr);
    if (policy_list) {
        a.policies = cli_split_list("--policy", policy_list, MAX_LIST, &a.npolicies);
        for (unsigned i = 0; i < a.npolicies; i++)
            if (!engine_policy(a.policies[i]) && !replay_reference_known(a.policies[i]))
                tc_die(2, "--policy '%s': choose %s (engine), or %s (reference; replay only)",
                       a.policies[i], policy_names(), replay_reference_names());
    }
    if (a.mrc) {
        if (a.mrc_sizes_given && (a.max_size || a.points_given))
            tc_die(2, "replay --mrc: give --sizes, or --max-size and --points, not both");
        int rc = run_mrc(&a);
        free(a.policies);
        return rc;
    }
    if (a.mrc_only_set)
        tc_die(2, "replay: --sizes, --max-size, --points, --sample-rate, --csv and --compare "
               "go with --mrc");
    if (!policy_list) {
        static const char *def[] = { "default" };
        a.policies = tc_xcalloc(2, sizeof *a.policies);
        a.policies[0] = def[0];
        a.npolicies = 1;
    }
    int rc = run_policies(&a);
    free(a.policies);
    return rc;
}
