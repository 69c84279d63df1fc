/*
 * Engine replay (src/replay/engine.c) and memory devices (io/dev_mem.c).
 *
 * Without arguments: checks on generated traces -- a memory device keeps
 * exactly its non-zero pages; a replay counts every read as a hit or a
 * miss, re-reads of a small region hit, writes, flushes, trims and
 * requests past the end go through; two replays give identical figures.
 *
 * With arguments, a driver for shell tests (until `tiercache replay`):
 *   replay_engine TRACE [--format F] --cache-size BYTES [--block-size BYTES]
 *                 [--policy P] [--mode M] [--volume-size BYTES]
 * prints the result as one line of JSON.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/dev.h"
#include "io/reactor.h"
#include "replay/replay.h"
#include "tiercache.h"
#include "util/crc32c.h"
#include "util/log.h"
#include "util/misc.h"
#include "util/parse.h"

static int failures;

#define CHECK(cond)                                                                 \
    do {                                                                            \
        if (!(cond)) {                                                              \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                             \
        }                                                                           \
    } while (0)

#define MiB (1ull << 20)

static void print_result(const struct replay_result *r)
{
    printf("{\"policy\":\"%s\",\"cache_bytes\":%llu,\"block_bytes\":%llu,\"requests\":%llu,"
           "\"reads\":%llu,\"read_hits\":%llu,\"read_misses\":%llu,\"read_bytes\":%llu,"
           "\"read_hit_bytes\":%llu,\"read_miss_bytes\":%llu,\"writes\":%llu,"
           "\"write_hits\":%llu,\"promotions\":%llu,\"evictions\":%llu,\"seconds\":%.6f}\n",
           r->policy, (unsigned long long)r->cache_bytes, (unsigned long long)r->block_bytes,
           (unsigned long long)r->requests, (unsigned long long)r->reads,
           (unsigned long long)r->read_hits, (unsigned long long)r->read_misses,
           (unsigned long long)r->read_bytes, (unsigned long long)r->read_hit_bytes,
           (unsigned long long)r->read_miss_bytes, (unsigned long long)r->writes,
           (unsigned long long)r->write_hits, (unsigned long long)r->promotions,
           (unsigned long long)r->evictions, r->seconds);
}

static int driver(int argc, char **argv)
{
    struct replay_trace t = { .path = argv[1], .format = TC_TRACE_NATIVE };
    struct replay_engine_config cfg = { .policy = "default", .mode = TC_MODE_WRITETHROUGH,
                                        .sequential_cutoff = UINT64_MAX, .fill = -1 };
    char err[1024];
    for (int i = 2; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        int rc = 0;
        if (strcmp(k, "--format") == 0) {
            int f = trace_format_parse(v);
            if (f < 0) {
                fprintf(stderr, "--format %s: unknown (%s)\n", v, trace_format_names());
                return 2;
            }
            t.format = (enum tc_trace_format)f;
        } else if (strcmp(k, "--cache-size") == 0) {
            rc = tc_parse_size(k, v, &cfg.cache_bytes, err, sizeof err);
        } else if (strcmp(k, "--block-size") == 0) {
            rc = tc_parse_size(k, v, &cfg.block_bytes, err, sizeof err);
        } else if (strcmp(k, "--volume-size") == 0) {
            rc = tc_parse_size(k, v, &cfg.volume_bytes, err, sizeof err);
        } else if (strcmp(k, "--policy") == 0) {
            cfg.policy = v;
        } else if (strcmp(k, "--mode") == 0) {
            enum tc_mode m;
            if (tc_mode_parse(v, &m) < 0) {
                fprintf(stderr, "--mode %s: unknown\n", v);
                return 2;
            }
            cfg.mode = (int)m;
        } else {
            fprintf(stderr, "unknown option %s\n", k);
            return 2;
        }
        if (rc < 0) {
            fprintf(stderr, "%s\n", err);
            return 2;
        }
    }
    struct replay_result r;
    if (replay_engine(&t, &cfg, &r, err, sizeof err) < 0) {
        fprintf(stderr, "replay: %s\n", err);
        return 1;
    }
    print_result(&r);
    return 0;
}

/* ---- generated traces ---- */

static uint64_t rng = 88172645463325252ull;

static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

struct gen {
    FILE *f;
    uint64_t t;
};

static void put(struct gen *g, int op, uint64_t off, uint32_t len, uint8_t flags)
{
    struct tc_trace_req q = { .time_ns = g->t, .offset = off, .length = len, .op = (uint8_t)op,
                              .flags = flags };
    uint8_t rec[TC_TRACE_RECORD_BYTES];
    trace_encode_record(rec, &q);
    if (fwrite(rec, sizeof rec, 1, g->f) != 1)
        abort();
    g->t += 20000;      /* 20 us apart */
}

static void open_gen(struct gen *g, const char *path, uint64_t volume)
{
    g->f = fopen(path, "wb");
    if (g->f == NULL) {
        perror(path);
        exit(1);
    }
    g->t = 0;
    uint8_t hdr[TC_TRACE_HEADER_BYTES];
    trace_encode_header(hdr, 0, volume, 0);
    if (fwrite(hdr, sizeof hdr, 1, g->f) != 1)
        abort();
}

/* A mixed trace over 64 MiB: skewed 4 KiB reads (half of them in the
 * first 2 MiB), 16 KiB writes, flushes, trims, write-zeroes, idle
 * stretches of 3 s, and requests past the end. */
static void make_mixed(const char *path)
{
    struct gen g;
    open_gen(&g, path, 64 * MiB);
    for (int i = 0; i < 5000; i++) {
        uint64_t r = next_rand();
        uint64_t hot = (r >> 8) % (2 * MiB / 4096), cold = (r >> 8) % (64 * MiB / 4096);
        switch (r % 16) {
        case 0: case 1:
            put(&g, TC_OP_WRITE, ((r >> 20) % (64 * MiB / 16384)) * 16384, 16384, 0);
            break;
        case 2:
            put(&g, TC_OP_TRIM, cold * 4096, 65536, 0);
            break;
        case 3:
            put(&g, TC_OP_WRITE_ZEROES, cold * 4096, 8192, TC_REQ_NO_HOLE);
            break;
        case 4: case 5: case 6: case 7: case 8:
            put(&g, TC_OP_READ, hot * 4096, 4096, 0);
            break;
        default:
            put(&g, TC_OP_READ, cold * 4096, 4096, 0);
            break;
        }
        if (i % 500 == 0)
            put(&g, TC_OP_FLUSH, 0, 0, 0);
        if (i % 1000 == 999)
            g.t += 3000000000ull;   /* idle for 3 s now and then */
    }
    put(&g, TC_OP_READ, 64 * MiB - 4096, 65536, 0);     /* clipped */
    put(&g, TC_OP_READ, 64 * MiB, 4096, 0);             /* skipped */
    put(&g, TC_OP_BLOCK_STATUS, 0, 65536, 0);           /* skipped */
    fclose(g.f);
}

/* 1 MiB read 5 times over in 4 KiB requests. */
static void make_reread(const char *path)
{
    struct gen g;
    open_gen(&g, path, 64 * MiB);
    for (int pass = 0; pass < 5; pass++)
        for (uint64_t off = 0; off < MiB; off += 4096)
            put(&g, TC_OP_READ, 8 * MiB + off, 4096, 0);
    fclose(g.f);
}

/* ---- checks ---- */

static void payload_done(struct tc_dev_io *dio, int err)
{
    *(int *)dio->priv = err;
}

/* A read or write whose bytes from payload_off on are payload. */
static int payload_io(struct tc_dev *d, enum tc_dev_op op, void *buf, uint64_t off,
                      uint64_t len, uint64_t payload_off)
{
    int rc = 1;
    struct tc_dev_io dio = { .op = op, .flags = TC_DEV_PAYLOAD, .buf = buf, .off = off,
                             .len = len, .payload_off = payload_off, .cb = payload_done,
                             .priv = &rc };
    dev_submit(d, &dio);
    while (rc == 1)
        reactor_poll(d->reactor, 100000000ull);
    return rc;
}

static void test_mem_device(void)
{
    char err[256];
    CHECK(dev_mem_create("t-unit", 8 * MiB, false, err, sizeof err) == 0);
    CHECK(dev_mem_create("t-unit", 8 * MiB, false, err, sizeof err) < 0);
    CHECK(dev_mem_create("t-odd", 1000, false, err, sizeof err) < 0);
    struct tc_reactor r;
    if (reactor_init(&r, 8) < 0) {
        perror("io_uring");
        exit(1);
    }
    struct tc_dev *d = dev_open_local_as(&r, "mem:t-unit", "cache device", false, err,
                                         sizeof err);
    CHECK(d != NULL);
    if (d == NULL)
        exit(1);
    CHECK(dev_open_local_as(&r, "mem:none", "origin", false, err, sizeof err) == NULL);
    CHECK(d->size == 8 * MiB && !d->rotational);
    uint8_t *buf = tc_alloc_aligned(4 * 4096);
    memset(buf, 0, 4 * 4096);
    memset(buf + 4096, 0xab, 4096);
    buf[3 * 4096 + 100] = 1;
    CHECK(dev_sync_io(d, TC_DEV_WRITE, buf, 4096, 4 * 4096, 0) == 0);
    CHECK(dev_mem_stored_bytes(d) == 2 * 4096);
    memset(buf, 0x55, 4 * 4096);
    CHECK(dev_sync_io(d, TC_DEV_READ, buf, 0, 4 * 4096, 0) == 0);
    CHECK(buf[0] == 0 && buf[4095] == 0 && buf[4096] == 0 && buf[2 * 4096] == 0xab &&
          buf[3 * 4096 - 1] == 0xab);
    /* Many pages, then zeroes over half of them and a trim of the rest. */
    for (uint64_t p = 0; p < 1000; p++) {
        memset(buf, (int)(p % 200) + 1, 4096);
        CHECK(dev_sync_io(d, TC_DEV_WRITE, buf, MiB + p * 4096, 4096, 0) == 0);
    }
    CHECK(dev_mem_stored_bytes(d) == 1002 * 4096);
    memset(buf, 0, 4096);
    for (uint64_t p = 0; p < 1000; p += 2)
        CHECK(dev_sync_io(d, TC_DEV_WRITE, buf, MiB + p * 4096, 4096, 0) == 0);
    CHECK(dev_mem_stored_bytes(d) == 502 * 4096);
    for (uint64_t p = 1; p < 1000; p += 4) {
        CHECK(dev_sync_io(d, TC_DEV_READ, buf, MiB + p * 4096, 4096, 0) == 0);
        CHECK(buf[0] == (uint8_t)(p % 200 + 1) && buf[4095] == (uint8_t)(p % 200 + 1));
    }
    CHECK(dev_sync_io(d, TC_DEV_TRIM, NULL, MiB, 1000 * 4096, 0) == 0);
    CHECK(dev_mem_stored_bytes(d) == 2 * 4096);
    CHECK(dev_sync_io(d, TC_DEV_ZERO, NULL, 0, 8 * MiB, 0) == 0);
    CHECK(dev_mem_stored_bytes(d) == 0);
    CHECK(dev_sync_io(d, TC_DEV_FLUSH, NULL, 0, 0, 0) == 0);
    CHECK(dev_sync_io(d, TC_DEV_READ, buf, 8 * MiB, 4096, 0) == -EIO);
    /* A page stored short of its trailing zeroes reads back whole. */
    memset(buf, 0, 4096);
    buf[100] = 1;
    CHECK(dev_sync_io(d, TC_DEV_WRITE, buf, 4 * 4096, 4096, 0) == 0);
    memset(buf, 0xab, 4096);
    CHECK(dev_sync_io(d, TC_DEV_WRITE, buf, 2 * 4096, 4096, 0) == 0);
    memset(buf, 0x55, 4096);
    CHECK(dev_sync_io(d, TC_DEV_READ, buf, 4 * 4096, 4096, 0) == 0);
    CHECK(buf[99] == 0 && buf[100] == 1 && buf[101] == 0 && buf[4095] == 0);
    /* Payload: what follows payload_off is neither stored (the pages there
     * go) nor read (the buffer keeps what it had). */
    memset(buf, 0x11, 4 * 4096);
    CHECK(payload_io(d, TC_DEV_WRITE, buf, 4096, 4 * 4096, 4096) == 0);
    CHECK(dev_mem_stored_bytes(d) == 4096);         /* page 1; 2 and 4 went */
    memset(buf, 0x33, 4 * 4096);
    CHECK(payload_io(d, TC_DEV_READ, buf, 0, 4 * 4096, 2 * 4096) == 0);
    CHECK(buf[0] == 0 && buf[4095] == 0 && buf[4096] == 0x11 && buf[2 * 4096 - 1] == 0x11 &&
          buf[2 * 4096] == 0x33 && buf[4 * 4096 - 1] == 0x33);
    CHECK(dev_sync_io(d, TC_DEV_READ, buf, 2 * 4096, 3 * 4096, 0) == 0);
    CHECK(buf[0] == 0 && buf[2 * 4096 + 100] == 0 && buf[3 * 4096 - 1] == 0);
    CHECK(dev_sync_io(d, TC_DEV_TRIM, NULL, 0, 8 * 4096, 0) == 0);
    CHECK(dev_mem_stored_bytes(d) == 0);
    /* Contents outlive a close; destroyed, freed at the last close. */
    memset(buf, 7, 4096);
    CHECK(dev_sync_io(d, TC_DEV_WRITE, buf, 0, 4096, 0) == 0);
    dev_close(d);
    d = dev_open_local_as(&r, "mem:t-unit", "cache device", false, err, sizeof err);
    CHECK(d != NULL && dev_mem_stored_bytes(d) == 4096);
    dev_mem_destroy("t-unit");
    dev_close(d);
    CHECK(dev_open_local_as(&r, "mem:t-unit", "origin", false, err, sizeof err) == NULL);
    /* A dataless device stores nothing and fills nothing. */
    CHECK(dev_mem_create("t-none", 8 * MiB, true, err, sizeof err) == 0);
    d = dev_open_local_as(&r, "mem:t-none", "origin", false, err, sizeof err);
    CHECK(d != NULL);
    memset(buf, 9, 4096);
    CHECK(dev_sync_io(d, TC_DEV_WRITE, buf, 0, 4096, 0) == 0);
    CHECK(dev_mem_stored_bytes(d) == 0);
    memset(buf, 5, 4096);
    CHECK(dev_sync_io(d, TC_DEV_READ, buf, 0, 4096, 0) == 0);
    CHECK(buf[0] == 5 && buf[4095] == 5);
    CHECK(dev_sync_io(d, TC_DEV_READ, buf, 8 * MiB, 4096, 0) == -EIO);
    dev_mem_destroy("t-none");
    dev_close(d);
    free(buf);
    reactor_fini(&r);
}

/* The CRC of a zero sector (answered without computing it) is the one
 * computed in pieces; a sector with one bit set is not taken for zeroes. */
static void test_zero_crc(void)
{
    uint8_t *z = tc_alloc_aligned(4096);
    memset(z, 0, 4096);
    uint32_t whole = tc_crc32c(0, z, 4096);
    CHECK(whole == tc_crc32c(tc_crc32c(0, z, 1000), z + 1000, 3096));
    CHECK(whole == 0x98f94189u);
    for (size_t at = 0; at < 4096; at += 1021) {
        z[at] = 0x10;
        CHECK(tc_crc32c(0, z, 4096) == tc_crc32c(tc_crc32c(0, z, 1000), z + 1000, 3096));
        CHECK(tc_crc32c(0, z, 4096) != whole);
        z[at] = 0;
    }
    free(z);
}

static bool same_figures(const struct replay_result *a, const struct replay_result *b)
{
    struct replay_result x = *a, y = *b;
    x.seconds = y.seconds = 0;
    x.cpu_seconds = y.cpu_seconds = 0;
    return memcmp(&x, &y, sizeof x) == 0;
}

static void test_replay(const char *dir)
{
    char mixed[4096], reread[4096], err[1024];
    snprintf(mixed, sizeof mixed, "%s/mixed.trace", dir);
    snprintf(reread, sizeof reread, "%s/reread.trace", dir);
    make_mixed(mixed);
    make_reread(reread);

    struct replay_engine_config cfg = { .policy = "default", .cache_bytes = 16 * MiB,
                                        .mode = TC_MODE_WRITETHROUGH,
                                        .sequential_cutoff = UINT64_MAX, .fill = -1 };
    struct replay_trace t = { .path = reread, .format = TC_TRACE_NATIVE };
    struct replay_result r;
    CHECK(replay_engine(&t, &cfg, &r, err, sizeof err) == 0);
    print_result(&r);
    CHECK(r.requests == 5 * 256 && r.reads == 5 * 256);
    CHECK(r.read_hits + r.read_misses == r.reads);
    CHECK(r.read_bytes == 5 * MiB);
    CHECK(r.read_hit_bytes + r.read_miss_bytes == r.read_bytes);
    CHECK(r.read_hits >= 3 * 256);      /* the last passes hit */
    CHECK(r.promotions > 0);

    t.path = mixed;
    /* Each policy in writethrough, the default in writeback; twice each. */
    const struct { enum tc_mode mode; const char *policy; } runs[] = {
        { TC_MODE_WRITETHROUGH, "default" }, { TC_MODE_WRITETHROUGH, "lru" },
        { TC_MODE_WRITETHROUGH, "s3fifo" }, { TC_MODE_WRITEBACK, "default" },
    };
    for (unsigned i = 0; i < TC_ARRAY_SIZE(runs); i++) {
        cfg.mode = (int)runs[i].mode;
        cfg.policy = runs[i].policy;
        struct replay_result a, b;
        int ra = replay_engine(&t, &cfg, &a, err, sizeof err);
        if (ra < 0)
            fprintf(stderr, "replay %s %s: %s\n", tc_mode_name(runs[i].mode), runs[i].policy,
                    err);
        CHECK(ra == 0);
        CHECK(replay_engine(&t, &cfg, &b, err, sizeof err) == 0);
        print_result(&a);
        CHECK(same_figures(&a, &b));
        CHECK(a.requests == 5013);
        CHECK(a.read_hits + a.read_misses == a.reads);
        CHECK(a.read_hits > a.reads / 4);
        CHECK(a.writes > 0 && a.write_hits > 0);
        CHECK(a.evictions > 0);
    }

    /* Errors name the value. */
    cfg.policy = "nosuch";
    CHECK(replay_engine(&t, &cfg, &r, err, sizeof err) < 0 && strstr(err, "nosuch"));
    cfg.policy = "default";
    cfg.block_bytes = 3000;
    CHECK(replay_engine(&t, &cfg, &r, err, sizeof err) < 0 && strstr(err, "3000"));
    cfg.block_bytes = 0;
    cfg.cache_bytes = 1 * MiB;
    CHECK(replay_engine(&t, &cfg, &r, err, sizeof err) < 0 && strstr(err, "1048576"));
    t.path = "/nonexistent/trace";
    cfg.cache_bytes = 16 * MiB;
    CHECK(replay_engine(&t, &cfg, &r, err, sizeof err) < 0 &&
          strstr(err, "/nonexistent/trace"));
    unlink(mixed);
    unlink(reread);
}

int main(int argc, char **argv)
{
    tc_log_set_level(TC_LOG_WARN);
    if (argc > 1)
        return driver(argc, argv);
    const char *tmp = getenv("TC_TMP");
    char dir[3000];
    snprintf(dir, sizeof dir, "%s", tmp && *tmp ? tmp : "/tmp");
    test_zero_crc();
    test_mem_device();
    test_replay(dir);
    if (failures)
        fprintf(stderr, "%d checks failed\n", failures);
    return failures ? 1 : 0;
}
