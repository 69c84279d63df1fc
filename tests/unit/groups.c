/*
 * The group ring and the free segments (engine/space.c), on a struct
 * cache built by hand: devices with segment counts only, no device I/O,
 * no index, no log, no events registered.  Space takes struct space
 * alone; the devices' states (c->devs) are only for the checks.
 *
 * Checked: a group takes one free segment of every usable device, lowest
 * numbers first, so groups narrow as devices run out and opening fails
 * when none is left; sequence numbers rise; the oldest group is freed
 * first and its segments come back; a pinned segment comes back only with
 * its last unpin; a failing device's segments are not handed out again;
 * the ring wraps around many times with every segment in exactly one
 * place (a live group that names it back, or a free stack); recovery's
 * space_push_group() appends at the newest end.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cache.h"
#include "util/misc.h"

#include "check.h"

static const uint32_t dev_segs[] = { 5, 3, 4 };
#define NSEGS 12u

/* A cache of the devices in dev_segs with its segment table and an empty
 * group ring, before any segment is put on a free stack (as recovery
 * finds it). */
static struct cache *make_bare_cache(void)
{
    struct cache *c = calloc(1, sizeof *c);
    if (c == NULL)
        abort();
    c->ndevs = TC_ARRAY_SIZE(dev_segs);
    uint32_t first = 0;
    for (unsigned d = 0; d < c->ndevs; d++) {
        c->devs[d].first_seg = first;
        c->devs[d].nsegs = dev_segs[d];
        c->devs[d].state = CDEV_OK;
        first += dev_segs[d];
    }
    c->sp.nsegs = first;
    c->segment_size = 1u << 20;
    c->seg_sectors = 256;
    space_init(&c->sp, c->sp.nsegs, c->seg_sectors, c->ndevs);
    for (unsigned d = 0; d < c->ndevs; d++)
        space_add_dev(&c->sp, d, c->devs[d].first_seg, c->devs[d].nsegs);
    return c;
}

/* The same with every segment free. */
static struct cache *make_cache(void)
{
    struct cache *c = make_bare_cache();
    space_collect_free(&c->sp);
    return c;
}

static void free_cache(struct cache *c)
{
    space_fini(&c->sp);
    free(c);
}

/* Every segment is in exactly one place: a live group of the ring (whose
 * slot it names), a free stack (state SEG_FREE), or retired and pinned.
 * The ring's sequence numbers rise from the tail. */
static unsigned audit(struct cache *c)
{
    unsigned bad = 0, where[NSEGS] = { 0 };
    uint64_t last_seq = 0;
    for (uint32_t k = 0; k < c->sp.ngroups; k++) {
        uint32_t slot = (c->sp.group_tail + k) % c->sp.groups_cap;
        struct group *g = group_at(&c->sp, slot);
        if (k > 0 && g->seq <= last_seq)
            bad++;
        last_seq = g->seq;
        if (g->open != (slot == c->sp.open_group))
            bad++;
        for (unsigned i = 0; i < g->nsegs; i++) {
            uint32_t s = g->segs[i];
            where[s]++;
            if (space_seg(&c->sp, s)->group != slot || space_seg(&c->sp, s)->seq != g->seq ||
                space_seg(&c->sp, s)->state == SEG_FREE)
                bad++;
        }
    }
    uint32_t nfree = 0;
    for (unsigned d = 0; d < c->ndevs; d++) {
        struct free_stack *fs = &c->sp.stacks[d];
        for (uint32_t i = 0; i < fs->n; i++) {
            uint32_t s = fs->segs[i];
            where[s]++;
            if (space_seg(&c->sp, s)->state != SEG_FREE || space_seg(&c->sp, s)->dev != d || space_seg(&c->sp, s)->group != NIL)
                bad++;
        }
        nfree += fs->n;
    }
    if (nfree != c->sp.free_segs)
        bad++;
    for (uint32_t s = 0; s < NSEGS; s++) {
        bool elsewhere = space_seg(&c->sp, s)->group == NIL && space_seg(&c->sp, s)->state != SEG_FREE;
        bool failed = c->devs[space_seg(&c->sp, s)->dev].state != CDEV_OK && space_seg(&c->sp, s)->group == NIL;
        if (where[s] != 1 && !(where[s] == 0 && (elsewhere || failed)))
            bad++;
    }
    return bad;
}

static bool group_is(struct group *g, uint32_t n, const uint32_t *segs)
{
    if (g->nsegs != n)
        return false;
    for (uint32_t i = 0; i < n; i++)
        if (g->segs[i] != segs[i])
            return false;
    return true;
}

static void check_fill_and_free(void)
{
    printf("groups take one segment per device, lowest first, and narrow as devices run out\n");
    struct cache *c = make_cache();
    CHECK(c->sp.free_segs == NSEGS && c->sp.ngroups == 0 && oldest_group(&c->sp) == NULL);
    CHECK(audit(c) == 0);
    static const uint32_t want[5][3] = {
        { 0, 5, 8 }, { 1, 6, 9 }, { 2, 7, 10 }, { 3, 11 }, { 4 },
    };
    static const uint32_t wn[5] = { 3, 3, 3, 2, 1 };
    for (int k = 0; k < 5; k++) {
        space_close_group(&c->sp);
        CHECK(space_open_group(&c->sp, &c->lg.next_seq));
        struct group *g = group_at(&c->sp, c->sp.open_group);
        CHECK(group_is(g, wn[k], want[k]));
        CHECK(g->seq == (uint64_t)k && g->open);
        for (unsigned i = 0; i < g->nsegs; i++)
            CHECK(space_seg(&c->sp, g->segs[i])->state == SEG_OPEN);
        CHECK(audit(c) == 0);
    }
    space_close_group(&c->sp);
    CHECK(c->sp.free_segs == 0 && !space_open_group(&c->sp, &c->lg.next_seq) && c->sp.ngroups == 5 && c->lg.next_seq == 5);
    CHECK(c->sp.open_group == NIL && audit(c) == 0);

    printf("the oldest group is freed first; its segments are reused\n");
    CHECK(oldest_group(&c->sp)->seq == 0);
    space_free_group(&c->sp);
    CHECK(c->sp.ngroups == 4 && oldest_group(&c->sp)->seq == 1 && c->sp.free_segs == 3);
    CHECK(audit(c) == 0);
    CHECK(space_open_group(&c->sp, &c->lg.next_seq));
    CHECK(group_is(group_at(&c->sp, c->sp.open_group), 3, want[0]) &&
          group_at(&c->sp, c->sp.open_group)->seq == 5);
    space_close_group(&c->sp);
    CHECK(audit(c) == 0);

    printf("a pinned segment comes back with its last unpin\n");
    CHECK(oldest_group(&c->sp)->seq == 1);           /* segments 1, 6, 9 */
    seg_pin(&c->sp, 6);
    seg_pin(&c->sp, 6);
    space_free_group(&c->sp);
    CHECK(c->sp.free_segs == 2 && space_seg(&c->sp, 6)->state != SEG_FREE && space_seg(&c->sp, 6)->group == NIL);
    CHECK(audit(c) == 0);
    seg_unpin(&c->sp, 6);
    CHECK(c->sp.free_segs == 2 && space_seg(&c->sp, 6)->state != SEG_FREE);
    seg_unpin(&c->sp, 6);
    CHECK(c->sp.free_segs == 3 && space_seg(&c->sp, 6)->state == SEG_FREE);
    CHECK(audit(c) == 0);
    /* A segment with a chunk write in flight: freed by space_write_done. */
    struct group *g2 = oldest_group(&c->sp);         /* seq 2: 2, 7, 10 */
    CHECK(g2->seq == 2);
    space_seg(&c->sp, 7)->writes_inflight = 1;
    space_free_group(&c->sp);
    CHECK(c->sp.free_segs == 5 && space_seg(&c->sp, 7)->state != SEG_FREE);
    space_seg(&c->sp, 7)->writes_inflight = 0;
    space_write_done(&c->sp, 7);
    CHECK(c->sp.free_segs == 6 && space_seg(&c->sp, 7)->state == SEG_FREE);
    CHECK(audit(c) == 0);
    free_cache(c);
}

static void check_wrap(void)
{
    printf("the ring wraps around: open, close and free many times\n");
    struct cache *c = make_cache();
    uint64_t opened = 0;
    unsigned bad = 0;
    for (int step = 0; step < 2000; step++) {
        space_close_group(&c->sp);
        if (space_open_group(&c->sp, &c->lg.next_seq)) {
            opened++;
            if (group_at(&c->sp, c->sp.open_group)->seq != opened - 1)
                bad++;
        }
        /* Keep between 1 and 4 groups live: free when full or at random. */
        if (c->sp.free_segs == 0 || (c->sp.ngroups > 1 && step % 3 == 0)) {
            space_close_group(&c->sp);
            space_free_group(&c->sp);
        }
        if (c->sp.ngroups > c->sp.groups_cap || c->sp.group_tail >= c->sp.groups_cap)
            bad++;
        bad += audit(c);
    }
    CHECK(bad == 0);
    CHECK(opened > 3 * c->sp.groups_cap);

    printf("a failing device's segments are not handed out again\n");
    while (c->sp.ngroups > 0) {
        space_close_group(&c->sp);
        space_free_group(&c->sp);
    }
    CHECK(c->sp.free_segs == NSEGS && audit(c) == 0);
    CHECK(space_open_group(&c->sp, &c->lg.next_seq));
    struct group *g = group_at(&c->sp, c->sp.open_group);
    CHECK(g->nsegs == 3);
    uint32_t dev1_seg = g->segs[1];
    CHECK(space_seg(&c->sp, dev1_seg)->dev == 1);
    /* What failure.c does when a device fails: its free stack goes. */
    c->devs[1].state = CDEV_FAILING;
    space_drop_free(&c->sp, 1);
    space_close_group(&c->sp);
    space_free_group(&c->sp);
    CHECK(space_seg(&c->sp, dev1_seg)->state == SEG_FREE);
    CHECK(c->sp.free_segs == NSEGS - dev_segs[1] && audit(c) == 0);
    /* Devices 0 and 2 have 9 segments: four groups of two, one of one. */
    for (int k = 0; k < 5; k++) {
        space_close_group(&c->sp);
        if (!space_open_group(&c->sp, &c->lg.next_seq)) {
            CHECK(!"a group could be opened");
            break;
        }
        g = group_at(&c->sp, c->sp.open_group);
        CHECK(g->nsegs == (k < 4 ? 2 : 1));
        for (unsigned i = 0; i < g->nsegs; i++)
            CHECK(space_seg(&c->sp, g->segs[i])->dev != 1);
    }
    space_close_group(&c->sp);
    CHECK(!space_open_group(&c->sp, &c->lg.next_seq) && c->sp.free_segs == 0 && audit(c) == 0);
    free_cache(c);
}

static void check_push(void)
{
    printf("recovery: space_push_group() appends at the newest end\n");
    struct cache *c = make_bare_cache();
    /* Groups found on the devices, oldest first: 10 {2, 6}, 11 {9}. */
    uint32_t a = space_push_group(&c->sp, 10);
    space_group_add_seg(&c->sp, a, 2);
    space_group_add_seg(&c->sp, a, 6);
    uint32_t b = space_push_group(&c->sp, 11);
    space_group_add_seg(&c->sp, b, 9);
    space_seg(&c->sp, 2)->state = space_seg(&c->sp, 6)->state = space_seg(&c->sp, 9)->state = SEG_CLOSED;
    space_collect_free(&c->sp);
    c->lg.next_seq = 12;
    CHECK(c->sp.ngroups == 2 && oldest_group(&c->sp)->seq == 10 && c->sp.free_segs == NSEGS - 3);
    CHECK(audit(c) == 0);
    CHECK(space_open_group(&c->sp, &c->lg.next_seq));
    CHECK(group_at(&c->sp, c->sp.open_group)->seq == 12);
    static const uint32_t want[] = { 0, 5, 8 };  /* lowest free of each device */
    CHECK(group_is(group_at(&c->sp, c->sp.open_group), 3, want));
    CHECK(audit(c) == 0);
    space_free_group(&c->sp);
    CHECK(oldest_group(&c->sp)->seq == 11 && space_seg(&c->sp, 2)->state == SEG_FREE);
    CHECK(audit(c) == 0);
    free_cache(c);
}

int main(void)
{
    check_fill_and_free();
    check_wrap();
    check_push();
    return check_exit("groups");
}
