/*
 * The ghost (policy/ghost.c): a bounded FIFO set of block numbers.  A
 * block is in it when it was added among the last `capacity` additions
 * and not removed since its last addition.  Checked: the window is
 * exactly that wide (the oldest goes when one more comes); a block added
 * twice stays until its newer copy expires; removal forgets it at once,
 * and its old copies expiring later do not disturb anything, including
 * the block added again after the removal (the s3fifo pattern: dropped,
 * readmitted from the ghost, dropped again); capacity 0 means 1; a long
 * random run against a model of that definition; and resizing (a device
 * of the cache failed): the newest additions the new capacity holds stay,
 * each as it was (in, or removed), checked by a random run that resizes
 * now and then against the same model with a moving horizon.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/policy.h"

#include "check.h"

static uint64_t rng = 0x853C49E6748FEA9Bull;
static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void check_window(void)
{
    printf("the window: the last `capacity` additions, oldest out first\n");
    enum { CAP = 100 };
    struct ghost *g = ghost_create(CAP);
    for (uint64_t b = 0; b < CAP; b++)
        ghost_add(g, 1000 + b);
    unsigned missing = 0;
    for (uint64_t b = 0; b < CAP; b++)
        missing += !ghost_contains(g, 1000 + b);
    CHECK(missing == 0);
    CHECK(!ghost_contains(g, 999) && !ghost_contains(g, 1000 + CAP));
    ghost_add(g, 5000);
    CHECK(!ghost_contains(g, 1000) && ghost_contains(g, 1001) && ghost_contains(g, 5000));
    /* Slide the window a few times around the ring. */
    unsigned bad = 0;
    for (uint64_t b = 1; b <= 10 * CAP; b++) {
        ghost_add(g, 10000 + b);
        if (!ghost_contains(g, 10000 + b))
            bad++;
        if (b > CAP && ghost_contains(g, 10000 + b - CAP))
            bad++;
        if (b >= CAP && !ghost_contains(g, 10000 + b - CAP + 1))
            bad++;
    }
    CHECK(bad == 0);
    CHECK(ghost_memory(g) >= CAP * 4);
    ghost_destroy(g);
    ghost_destroy(NULL);

    printf("capacity 0 holds one block; capacity 1 keeps only the last\n");
    g = ghost_create(0);
    ghost_add(g, 7);
    CHECK(ghost_contains(g, 7));
    ghost_add(g, 8);
    CHECK(!ghost_contains(g, 7) && ghost_contains(g, 8));
    ghost_add(g, 8);
    CHECK(ghost_contains(g, 8));
    ghost_destroy(g);
}

static void check_duplicates_and_remove(void)
{
    printf("a block added twice stays until its newer copy expires\n");
    enum { CAP = 8 };
    struct ghost *g = ghost_create(CAP);
    ghost_add(g, 1);
    for (uint64_t b = 100; b < 100 + CAP / 2; b++)
        ghost_add(g, b);
    ghost_add(g, 1);                    /* second copy */
    for (uint64_t b = 200; b < 200 + CAP - 1; b++)
        ghost_add(g, b);
    CHECK(ghost_contains(g, 1));        /* the first copy has expired, not the second */
    ghost_add(g, 300);
    CHECK(!ghost_contains(g, 1));
    ghost_destroy(g);

    printf("removal forgets at once; old copies expire harmlessly\n");
    g = ghost_create(CAP);
    for (uint64_t b = 0; b < CAP; b++)
        ghost_add(g, b);
    ghost_remove(g, 3);
    CHECK(!ghost_contains(g, 3));
    ghost_remove(g, 3);                 /* twice: nothing */
    ghost_remove(g, 12345);             /* never added: nothing */
    for (uint64_t b = 0; b < CAP; b++)
        CHECK(b == 3 || ghost_contains(g, b));
    for (uint64_t b = 0; b < CAP; b++) {
        ghost_add(g, 100 + b);          /* expires 0..7, the removed 3 among them */
        for (uint64_t c = 0; c <= b; c++)
            CHECK(ghost_contains(g, 100 + c));
    }
    ghost_destroy(g);

    printf("removed, added again, then the old copy expires: still in\n");
    g = ghost_create(CAP);
    ghost_add(g, 42);                   /* dropped by the cache */
    ghost_add(g, 43);
    ghost_remove(g, 42);                /* readmitted from the ghost */
    CHECK(!ghost_contains(g, 42));
    ghost_add(g, 42);                   /* dropped again */
    CHECK(ghost_contains(g, 42));
    for (uint64_t b = 0; b < CAP - 1; b++)
        ghost_add(g, 500 + b);          /* the first copy of 42 expires, then 43 */
    CHECK(!ghost_contains(g, 43));
    CHECK(ghost_contains(g, 42));       /* its newer copy is the oldest in */
    ghost_add(g, 601);
    CHECK(!ghost_contains(g, 42));      /* now its copy expires */
    ghost_destroy(g);
}

/* The model: a block is in when its last addition is among the last CAP
 * and it was not removed since. */
static void check_random(void)
{
    enum { CAP = 300, SPACE = 900, STEPS = 300000 };
    printf("random run: %d steps over %d blocks, capacity %d, against the model\n", STEPS, SPACE,
           CAP);
    struct ghost *g = ghost_create(CAP);
    uint64_t *last_add = calloc(SPACE, sizeof *last_add);   /* addition number + 1 */
    bool *removed = calloc(SPACE, sizeof *removed);
    if (last_add == NULL || removed == NULL)
        abort();
    uint64_t adds = 0;
    unsigned bad = 0;
    for (int step = 0; step < STEPS; step++) {
        uint64_t b = next_rand() % SPACE;
        switch (next_rand() % 4) {
        case 0:
        case 1:
            ghost_add(g, b);
            adds++;
            last_add[b] = adds;
            removed[b] = false;
            break;
        case 2:
            if (ghost_contains(g, b))   /* the way s3fifo removes */
                ghost_remove(g, b);
            removed[b] = true;
            break;
        default: {
            bool want = last_add[b] != 0 && adds - last_add[b] < CAP && !removed[b];
            if (ghost_contains(g, b) != want)
                bad++;
        }
        }
    }
    for (uint64_t b = 0; b < SPACE; b++) {
        bool want = last_add[b] != 0 && adds - last_add[b] < CAP && !removed[b];
        if (ghost_contains(g, b) != want)
            bad++;
    }
    if (bad)
        fprintf(stderr, "%u answers differ from the model\n", bad);
    CHECK(bad == 0);
    free(last_add);
    free(removed);
    ghost_destroy(g);
}

/* The model with resizes: a block is in when its last addition is at or
 * after the horizon -- the oldest addition the ring still holds, which
 * moves up as additions push the oldest out and when a resize to a
 * smaller capacity keeps only the newest -- and it was not removed
 * since. */
static void check_resize(void)
{
    enum { SPACE = 900, STEPS = 300000 };
    static const uint64_t caps[] = { 300, 40, 1, 500, 120, 0, 700, 300 };
    printf("resizing: %d steps over %d blocks, capacity changed every %d steps\n", STEPS, SPACE,
           STEPS / (int)(sizeof caps / sizeof caps[0]));
    uint64_t cap = caps[0];
    struct ghost *g = ghost_create(cap);
    uint64_t *last_add = calloc(SPACE, sizeof *last_add);   /* addition number, from 1 */
    bool *removed = calloc(SPACE, sizeof *removed);
    if (last_add == NULL || removed == NULL)
        abort();
    uint64_t adds = 0, horizon = 1;
    unsigned bad = 0, resizes = 0;
    for (int step = 0; step < STEPS; step++) {
        if (step > 0 && step % (STEPS / (int)(sizeof caps / sizeof caps[0])) == 0) {
            cap = caps[++resizes];
            ghost_resize(g, cap);
            uint64_t held = cap ? cap : 1;
            if (adds >= held && adds - held + 1 > horizon)
                horizon = adds - held + 1;
            CHECK(ghost_capacity(g) == held);
            uint64_t missing = 0;
            for (uint64_t b = 0; b < SPACE; b++)
                missing += (last_add[b] && last_add[b] >= horizon && !removed[b]) !=
                           ghost_contains(g, b);
            CHECK(missing == 0);
        }
        uint64_t b = next_rand() % SPACE;
        switch (next_rand() % 4) {
        case 0:
        case 1: {
            ghost_add(g, b);
            adds++;
            last_add[b] = adds;
            removed[b] = false;
            uint64_t held = cap ? cap : 1;
            if (adds >= held && adds - held + 1 > horizon)
                horizon = adds - held + 1;
            break;
        }
        case 2:
            if (ghost_contains(g, b))
                ghost_remove(g, b);
            removed[b] = true;
            break;
        default:
            if (ghost_contains(g, b) != (last_add[b] && last_add[b] >= horizon && !removed[b]))
                bad++;
        }
    }
    if (bad)
        fprintf(stderr, "%u answers differ from the model after resizes\n", bad);
    CHECK(bad == 0);
    CHECK(ghost_memory(g) < ghost_capacity(g) * 64 + 1024);
    free(last_add);
    free(removed);
    ghost_destroy(g);
}

int main(void)
{
    check_window();
    check_duplicates_and_remove();
    check_random();
    check_resize();
    return check_exit("ghost");
}
