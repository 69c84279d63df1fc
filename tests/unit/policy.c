/*
 * Each policy through its interface (src/policy/policy.h), with a fake
 * cache in place of the engine: no index, no log, no devices.  The checks
 * are decisions a broken policy gets wrong: a scan does not push the hot
 * set out under the default policy (it does under fifo and lru, which
 * shows the workload can tell); written-once data goes before data read
 * again; a cold stream bypasses and its second pass is cached; lru drops
 * the block not used, not the oldest; s3fifo keeps a block used again on
 * probation and drops one never used; fifo ignores hits; the NULL
 * operations mean the documented defaults; a switch of policy starts
 * the new one afresh.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/policy.h"
#include "util/json.h"

#include "check.h"

/*
 * The fake cache: a log of at most cap blocks, one slot each, reclaimed
 * oldest first, with the hint byte the index would keep for each block.
 * It calls the policy where the engine does: stream_hot, then admit, on a
 * read miss; admit_write on a write-through write to a block not cached;
 * inserted when a block enters; hit when a read finds it; keep when the
 * cleaner reaches the oldest block, which then goes to the head of the
 * log (kept) or out (evicted).  A write to a cached block moves it to the
 * head without asking, as a new version appended at the head does.
 *
 * Invariant: slots[0 .. len) hold distinct blocks, oldest first.
 */
struct fake {
    struct policy policy;
    uint64_t cap, len;
    struct slot {
        uint64_t oblock;
        uint8_t hint;
    } *slots;
    uint64_t hits, misses, bypassed, evictions;
};

static void fake_open(struct fake *f, const char *policy, uint64_t cap)
{
    memset(f, 0, sizeof *f);
    const struct policy_ops *ops = policy_find(policy);
    if (ops == NULL) {
        fprintf(stderr, "no policy %s\n", policy);
        exit(1);
    }
    policy_open(&f->policy, ops, &(struct policy_params){ .cache_blocks = cap });
    f->cap = cap;
    f->slots = calloc(cap, sizeof *f->slots);
    if (f->slots == NULL)
        abort();
}

static void fake_close(struct fake *f)
{
    policy_close(&f->policy);
    free(f->slots);
}

/* The slot of oblock, or -1. */
static long find(const struct fake *f, uint64_t oblock)
{
    for (uint64_t i = 0; i < f->len; i++)
        if (f->slots[i].oblock == oblock)
            return (long)i;
    return -1;
}

static bool cached(const struct fake *f, uint64_t oblock) { return find(f, oblock) >= 0; }

/* Take slot i out of the log and return it. */
static struct slot take(struct fake *f, uint64_t i)
{
    struct slot s = f->slots[i];
    memmove(&f->slots[i], &f->slots[i + 1], (f->len - i - 1) * sizeof *f->slots);
    f->len--;
    return s;
}

static void append(struct fake *f, struct slot s) { f->slots[f->len++] = s; }

/* The cleaner: free one slot, keeping at the head what the policy keeps. */
static void clean(struct fake *f)
{
    while (f->len == f->cap) {
        struct slot s = take(f, 0);
        if (policy_keep(&f->policy, s.oblock, &s.hint)) {
            append(f, s);
        } else {
            policy_evicted(&f->policy, s.oblock);
            f->evictions++;
        }
    }
}

static void insert(struct fake *f, uint64_t oblock, bool from_miss)
{
    clean(f);
    struct slot s = { .oblock = oblock, .hint = 0 };
    policy_inserted(&f->policy, oblock, &s.hint, from_miss);
    append(f, s);
}

/* A client read of oblock, sequential: past the stream cutoff.  True for a
 * hit. */
static bool read_block(struct fake *f, uint64_t oblock, bool sequential)
{
    long i = find(f, oblock);
    if (i >= 0) {
        policy_hit(&f->policy, oblock, &f->slots[i].hint);
        f->hits++;
        return true;
    }
    f->misses++;
    if (sequential && !policy_stream_hot(&f->policy, oblock)) {
        f->bypassed++;
        return false;
    }
    if (policy_admit(&f->policy, oblock, f->len < f->cap))
        insert(f, oblock, true);
    return false;
}

static bool read_random(struct fake *f, uint64_t oblock) { return read_block(f, oblock, false); }

/* A write-through client write of oblock. */
static void write_block(struct fake *f, uint64_t oblock)
{
    long i = find(f, oblock);
    if (i >= 0)
        append(f, take(f, (uint64_t)i));
    else if (policy_admit_write(&f->policy, oblock, f->len < f->cap))
        insert(f, oblock, false);
}

/* The value of the policy's figure name (0 if it has none). */
static uint64_t figure(const struct policy *p, const char *name)
{
    struct tc_json j;
    char key[64];
    json_init(&j, false);
    json_begin_object(&j, NULL);
    policy_status(p, &j);
    json_end_object(&j);
    snprintf(key, sizeof key, "\"%s\":", name);
    const char *at = j.buf ? strstr(j.buf, key) : NULL;
    uint64_t v = at ? strtoull(at + strlen(key), NULL, 10) : 0;
    json_free(&j);
    return v;
}

/* A writeback client write of oblock: every write is cached. */
static void write_back_block(struct fake *f, uint64_t oblock)
{
    long i = find(f, oblock);
    if (i >= 0)
        append(f, take(f, (uint64_t)i));
    else
        insert(f, oblock, false);
}

/* Does the policy's status object hold figure (as "name":value)? */
static bool has_figure(const struct policy *p, const char *figure)
{
    struct tc_json j;
    json_init(&j, false);
    json_begin_object(&j, NULL);
    policy_status(p, &j);
    json_end_object(&j);
    bool found = j.buf && strstr(j.buf, figure) != NULL;
    json_free(&j);
    return found;
}

/* A fake cache of cap blocks under policy, full of blocks 1..cap, read
 * once each in that order. */
static void fake_open_full(struct fake *f, const char *policy, uint64_t cap)
{
    fake_open(f, policy, cap);
    for (uint64_t b = 1; b <= cap; b++)
        read_random(f, b);
}

/* ---- a scan and a hot set ---- */

#define HOT_BASE 1000000u
#define SCAN_BASE 2000000u

/* A cache of 64 blocks full of a hot set of 16 blocks read three times
 * and 48 others read once; then a scan of 10000 blocks never read again,
 * with a read of a hot block after every 10 of them (each hot block every
 * 160 scan blocks, more than the cache holds).  The hot set's hit ratio
 * during the scan. */
static double hot_hit_ratio_under_scan(const char *policy)
{
    struct fake f;
    fake_open(&f, policy, 64);
    for (int round = 0; round < 3; round++)
        for (uint64_t b = 0; b < 16; b++)
            read_random(&f, HOT_BASE + b);
    for (uint64_t b = 0; b < 48; b++)
        read_random(&f, b);
    CHECK(f.len == f.cap);
    unsigned hot_reads = 0, hot_hits = 0;
    for (uint64_t s = 0; s < 10000; s++) {
        read_random(&f, SCAN_BASE + s);
        if (s % 10 == 9) {
            hot_reads++;
            hot_hits += read_random(&f, HOT_BASE + (s / 10) % 16);
        }
    }
    fake_close(&f);
    return (double)hot_hits / hot_reads;
}

static void test_scan_keeps_hot_set(void)
{
    double dflt = hot_hit_ratio_under_scan("default");
    double fifo = hot_hit_ratio_under_scan("fifo");
    double lru = hot_hit_ratio_under_scan("lru");
    printf("hot set hit ratio during a scan: default %.3f, fifo %.3f, lru %.3f\n", dflt,
           fifo, lru);
    CHECK(dflt >= 0.95);
    CHECK(fifo < 0.5);  /* the workload does push the hot set out ... */
    CHECK(lru < 0.5);   /* ... of a cache that admits everything */
}

/* ---- the default policy ---- */

static void test_default_admission(void)
{
    struct fake f;
    fake_open_full(&f, "default", 8);
    CHECK(f.len == 8);  /* free space: every miss admitted */
    read_random(&f, 100);
    CHECK(!cached(&f, 100));    /* full: first sight refused ... */
    read_random(&f, 100);
    CHECK(cached(&f, 100));     /* ... second admitted (history) */
    write_block(&f, 200);
    CHECK(cached(&f, 200));     /* writes are admitted, on probation */
    CHECK(policy_memory(&f.policy) > 0);
    fake_close(&f);
}

/* 32 blocks read and hit once (the oldest in the log), then 32 blocks
 * written and never read; 32 admissions later the written blocks are all
 * gone and the read ones all cached, though older.  A written block never
 * read has earned no reads either, so the decisions alone cannot tell
 * which rule dropped it: the figures say.  A written block read after it
 * was dropped is admitted at once. */
static void test_default_written_once_first(void)
{
    struct fake f;
    fake_open(&f, "default", 64);
    for (uint64_t b = 0; b < 32; b++) {
        read_random(&f, b);
        CHECK(read_random(&f, b));
    }
    for (uint64_t b = 0; b < 32; b++)
        write_block(&f, 100 + b);
    CHECK(f.len == 64);
    for (uint64_t b = 0; b < 32; b++) {
        read_random(&f, 1000 + b);      /* refused, remembered */
        read_random(&f, 1000 + b);      /* admitted */
        CHECK(cached(&f, 1000 + b));
    }
    unsigned read_kept = 0, written_kept = 0;
    for (uint64_t b = 0; b < 32; b++) {
        read_kept += cached(&f, b);
        written_kept += cached(&f, 100 + b);
    }
    CHECK(read_kept == 32);
    CHECK(written_kept == 0);
    CHECK(f.evictions == 32);
    CHECK(has_figure(&f.policy, "\"evicted_written_unread\":32"));
    CHECK(has_figure(&f.policy, "\"kept_in_window\":32"));
    read_random(&f, 100);
    CHECK(cached(&f, 100));     /* dropped blocks go to the history */
    fake_close(&f);

    /* The same under fifo: the read blocks, oldest, go first. */
    fake_open(&f, "fifo", 64);
    for (uint64_t b = 0; b < 32; b++) {
        read_random(&f, b);
        read_random(&f, b);
    }
    for (uint64_t b = 0; b < 32; b++)
        write_block(&f, 100 + b);
    for (uint64_t b = 0; b < 32; b++)
        read_random(&f, 1000 + b);
    CHECK(!cached(&f, 0) && !cached(&f, 31) && cached(&f, 100));
    fake_close(&f);
}

/* Written data does not age what is read; reads do.  16 blocks read
 * twice, then ten times the cache written back once: the 16 are all still
 * cached (a rule that aged them per pass of the log would have dropped
 * them).  Then reads of other blocks move the read clock past the window:
 * the 16 are dropped as lapsed, and a miss of one of them lengthens the
 * window. */
static void test_default_reads_age_reads(void)
{
    struct fake f;
    fake_open(&f, "default", 64);
    for (uint64_t b = 0; b < 16; b++) {
        read_random(&f, b);
        CHECK(read_random(&f, b));
    }
    for (uint64_t b = 0; b < 640; b++)
        write_back_block(&f, 1000 + b);
    unsigned kept = 0;
    for (uint64_t b = 0; b < 16; b++)
        kept += cached(&f, b);
    CHECK(kept == 16);
    CHECK(figure(&f.policy, "evicted_lapsed") == 0);
    /* Rounds of 32 other blocks, each read three times, until the first
     * of the 16 is dropped; it comes back from the lapsed history. */
    uint64_t round, dropped = UINT64_MAX;
    for (round = 0; round < 40 && dropped == UINT64_MAX; round++) {
        for (uint64_t b = 0; b < 32; b++) {
            uint64_t o = 100000 + round * 32 + b;
            read_random(&f, o);         /* refused, remembered */
            read_random(&f, o);         /* admitted, a read */
            read_random(&f, o);         /* a hit */
        }
        for (uint64_t b = 0; b < 16 && dropped == UINT64_MAX; b++)
            if (!cached(&f, b))
                dropped = b;
    }
    CHECK(dropped != UINT64_MAX);
    CHECK(round > 1);                   /* not at the first reads */
    CHECK(figure(&f.policy, "evicted_lapsed") >= 1);
    uint64_t grown = figure(&f.policy, "window_grown");
    uint64_t window = figure(&f.policy, "window_reads");
    read_random(&f, dropped);
    CHECK(figure(&f.policy, "window_grown") == grown + 1);
    CHECK(figure(&f.policy, "window_reads") > window);
    fake_close(&f);
}

/* A block read again outlives blocks read once (the git benchmark's
 * checkouts: each reads the pack again, and reads once the files the one
 * before wrote).  24 blocks read in every round; each round also reads once
 * the 40 blocks the round before wrote, and writes 40 new ones, more than
 * the cache of 64 holds together.  From the third round on, the 24 all
 * hit: the blocks read once give way to them, not the other way round. */
static void test_default_read_again_kept(void)
{
    struct fake f;
    fake_open(&f, "default", 64);
    uint64_t misses_late = 0;
    for (uint64_t round = 0; round < 8; round++) {
        if (round > 0)
            for (uint64_t b = 0; b < 40; b++)
                read_random(&f, 1000 * round + b);          /* written last round */
        for (uint64_t b = 0; b < 24; b++)
            if (!read_random(&f, b) && round >= 2)
                misses_late++;
        for (uint64_t b = 0; b < 40; b++)
            write_back_block(&f, 1000 * (round + 1) + b);
    }
    printf("blocks read again: %llu misses after the second round\n",
           (unsigned long long)misses_late);
    CHECK(misses_late == 0);
    CHECK(figure(&f.policy, "kept_read_again") > 0);
    fake_close(&f);
}

/* A stream past the cutoff over blocks never seen bypasses the cache; its
 * second pass is hot and cached, once full as before. */
static void test_default_streams(void)
{
    struct fake f;
    fake_open_full(&f, "default", 64);
    for (uint64_t b = 0; b < 32; b++)
        read_block(&f, 5000 + b, true);
    CHECK(f.bypassed == 32);
    CHECK(!cached(&f, 5000));
    for (uint64_t b = 0; b < 32; b++)
        read_block(&f, 5000 + b, true);
    CHECK(f.bypassed == 32);
    for (uint64_t b = 0; b < 32; b++)
        CHECK(cached(&f, 5000 + b));
    fake_close(&f);
}

/* ---- lru ---- */

/* Blocks 1..4 in that order; 1, 2 and 4 used again: 3 is the least
 * recently used, though 1 is the oldest, and goes for block 5.  Then 1,
 * 2 and 4 have had their second chance; 4 and 5 used again, 1 goes. */
static void test_lru(void)
{
    struct fake f;
    fake_open_full(&f, "lru", 4);
    CHECK(read_random(&f, 1) && read_random(&f, 2) && read_random(&f, 4));
    read_random(&f, 5);
    CHECK(!cached(&f, 3));
    CHECK(cached(&f, 1) && cached(&f, 2) && cached(&f, 4) && cached(&f, 5));
    CHECK(read_random(&f, 4) && read_random(&f, 5) && read_random(&f, 2));
    read_random(&f, 6);
    CHECK(!cached(&f, 1));
    CHECK(cached(&f, 2) && cached(&f, 4) && cached(&f, 5) && cached(&f, 6));
    CHECK(policy_memory(&f.policy) == 0);
    fake_close(&f);
}

/* ---- s3fifo ---- */

/* Blocks 1..4 enter on probation; 2 is used again.  Block 5 needs room:
 * 1 (never used) goes, and to the ghost.  Block 6: the cleaner reaches 2,
 * used on probation, and keeps it (promoted to the main queue), and drops
 * 3.  The promoted block's uses are spent: unused since, it goes when the
 * cleaner reaches it again, and leaves no ghost.  A read of 1 finds it in
 * the ghost (so a stream over it is hot) and admits it past probation. */
static void test_s3fifo(void)
{
    struct fake f;
    fake_open_full(&f, "s3fifo", 4);
    CHECK(read_random(&f, 2));
    CHECK(!policy_stream_hot(&f.policy, 1));
    read_random(&f, 5);
    CHECK(!cached(&f, 1) && cached(&f, 2));
    CHECK(f.evictions == 1);
    CHECK(policy_stream_hot(&f.policy, 1));
    read_random(&f, 6);
    CHECK(cached(&f, 2) && !cached(&f, 3));
    CHECK(f.evictions == 2);
    read_random(&f, 7);         /* drops 4 */
    read_random(&f, 8);         /* drops 5 */
    CHECK(cached(&f, 2));
    read_random(&f, 9);         /* reaches 2 again: main, unused since */
    CHECK(!cached(&f, 2));
    CHECK(!policy_stream_hot(&f.policy, 2));
    read_random(&f, 1);         /* drops 6 */
    CHECK(cached(&f, 1));
    CHECK(!policy_stream_hot(&f.policy, 1));    /* out of the ghost */
    for (uint64_t b = 10; b <= 13; b++)
        read_random(&f, b);     /* drops 7, 8, 9, then 1: main, unused ... */
    CHECK(!cached(&f, 1));
    CHECK(!policy_stream_hot(&f.policy, 1));    /* ... with no ghost */
    CHECK(policy_memory(&f.policy) > 0);
    fake_close(&f);
}

/* ---- fifo and the NULL operations ---- */

static void test_fifo(void)
{
    struct fake f;
    fake_open_full(&f, "fifo", 4);
    CHECK(read_random(&f, 1) && read_random(&f, 1));
    read_random(&f, 5);
    CHECK(!cached(&f, 1));      /* hits do not matter */
    CHECK(cached(&f, 2));
    write_block(&f, 6);
    CHECK(cached(&f, 6) && !cached(&f, 2));
    CHECK(!policy_stream_hot(&f.policy, 6));
    CHECK(policy_memory(&f.policy) == 0);
    CHECK(!has_figure(&f.policy, "policy_figures"));
    fake_close(&f);
}

static bool refuse(void *state, uint64_t oblock, bool free_space) { return false; }

static void test_null_defaults(void)
{
    /* Only a name: admit all, keep nothing, streams bypass, no memory. */
    static const struct policy_ops bare = { .name = "bare", .summary = "" };
    struct policy p;
    policy_open(&p, &bare, &(struct policy_params){ .cache_blocks = 8 });
    uint8_t hint = 0;
    CHECK(p.state == NULL);
    CHECK(policy_admit(&p, 1, false));
    CHECK(policy_admit_write(&p, 1, false));
    CHECK(!policy_stream_hot(&p, 1));
    policy_inserted(&p, 1, &hint, true);
    policy_hit(&p, 1, &hint);
    CHECK(hint == 0);
    CHECK(!policy_keep(&p, 1, &hint));
    policy_evicted(&p, 1);
    CHECK(policy_memory(&p) == 0);
    policy_close(&p);

    /* admit_write NULL: decided as admit decides. */
    static const struct policy_ops strict = { .name = "strict", .summary = "", .admit = refuse };
    policy_open(&p, &strict, &(struct policy_params){ .cache_blocks = 8 });
    CHECK(!policy_admit(&p, 1, true));
    CHECK(!policy_admit_write(&p, 1, true));
    policy_close(&p);
}

/* A switch keeps the cache's size and makes new state: the default policy
 * after a switch has an empty history, so a block seen before the switch
 * is refused once full. */
static void test_switch(void)
{
    struct fake f;
    fake_open_full(&f, "default", 4);
    read_random(&f, 9);         /* refused, remembered */
    policy_switch(&f.policy, policy_find("lru"));
    CHECK(strcmp(f.policy.ops->name, "lru") == 0);
    CHECK(f.policy.params.cache_blocks == 4);
    for (uint64_t i = 0; i < f.len; i++)
        f.slots[i].hint = 0;    /* the engine clears every hint */
    policy_switch(&f.policy, policy_find("default"));
    read_random(&f, 9);
    CHECK(!cached(&f, 9));
    read_random(&f, 9);
    CHECK(cached(&f, 9));
    fake_close(&f);
}

int main(void)
{
    test_scan_keeps_hot_set();
    test_default_admission();
    test_default_written_once_first();
    test_default_streams();
    test_default_reads_age_reads();
    test_default_read_again_kept();
    test_lru();
    test_s3fifo();
    test_fifo();
    test_null_defaults();
    test_switch();
    return check_exit("policy");
}
