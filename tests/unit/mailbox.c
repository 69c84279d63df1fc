/*
 * The reactor's mailbox (io/reactor.c): messages from other threads.
 * Four threads post 200,000 messages each into one reactor's mailbox as
 * fast as they can, with no pause that would let the owner catch up; the
 * owner runs every message exactly once, each poster's in the order
 * posted, and sees what the poster wrote into it before posting.  Then a
 * ping-pong between two reactors, each with its own ring and mailbox (the
 * shape of serve --nbd-threads: one message going back and forth, owned by
 * one side at a time), 100,000 round trips, every hop seen once, the
 * first posted before its owner's ring exists; then each side closes its
 * own mailbox (told by a message), and reactor_run() returns.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/reactor.h"
#include "util/misc.h"

#include "check.h"

#define POSTERS 4
#define PER_POSTER 200000u

struct item {
    struct tc_msg msg;
    unsigned poster, seq;
    uint64_t payload;               /* written before the post */
};

static struct tc_mailbox box;
static struct tc_reactor owner;
static unsigned next_seq[POSTERS];
static uint64_t received, bad_order, bad_payload;
static struct item *items[POSTERS];

static void item_fn(struct tc_msg *m)
{
    struct item *it = container_of(m, struct item, msg);
    if (it->seq != next_seq[it->poster])
        bad_order++;
    next_seq[it->poster] = it->seq + 1;
    if (it->payload != ((uint64_t)it->poster << 32 | it->seq) * 0x9E3779B97F4A7C15ull)
        bad_payload++;
    if (++received == (uint64_t)POSTERS * PER_POSTER) {
        mailbox_close(&box);
        reactor_stop(&owner);
    }
}

static void *poster(void *arg)
{
    unsigned p = (unsigned)(uintptr_t)arg;
    for (unsigned i = 0; i < PER_POSTER; i++) {
        struct item *it = &items[p][i];
        it->poster = p;
        it->seq = i;
        it->payload = ((uint64_t)p << 32 | i) * 0x9E3779B97F4A7C15ull;
        it->msg.fn = item_fn;
        mailbox_post(&box, &it->msg);
    }
    return NULL;
}

static void check_many_posters(void)
{
    if (reactor_init(&owner, 64) < 0) {
        printf("mailbox: no io_uring here, skipped\n");
        return;
    }
    CHECK(mailbox_init(&box, &owner) == 0);
    mailbox_open(&box);
    for (unsigned p = 0; p < POSTERS; p++)
        items[p] = calloc(PER_POSTER, sizeof **items);
    pthread_t th[POSTERS];
    for (unsigned p = 0; p < POSTERS; p++)
        pthread_create(&th[p], NULL, poster, (void *)(uintptr_t)p);
    reactor_run(&owner);        /* until every message has run */
    for (unsigned p = 0; p < POSTERS; p++)
        pthread_join(th[p], NULL);
    CHECK(received == (uint64_t)POSTERS * PER_POSTER);
    CHECK(bad_order == 0);
    CHECK(bad_payload == 0);
    for (unsigned p = 0; p < POSTERS; p++) {
        CHECK(next_seq[p] == PER_POSTER);
        free(items[p]);
    }
    mailbox_fini(&box);
    reactor_fini(&owner);
}

/* ---- ping-pong between two reactors ---- */

#define ROUNDS 100000u

struct side {
    struct tc_reactor r;
    struct tc_mailbox box;
    struct side *peer;
    struct tc_msg quit;
    unsigned hops;
    pthread_t th;
};

static struct side sides[2];
static struct {
    struct tc_msg msg;
    unsigned hop;                   /* only its holder touches it */
} ball;
static uint64_t bad_hops;

/* Each side ends itself, on its own thread. */
static void quit_fn(struct tc_msg *m)
{
    struct side *s = container_of(m, struct side, quit);
    mailbox_close(&s->box);
    reactor_stop(&s->r);
}

static void ball_fn(struct tc_msg *m)
{
    (void)m;
    /* Even hops land on side 1, odd ones on side 0. */
    struct side *me = &sides[ball.hop % 2 == 0 ? 1 : 0];
    me->hops++;
    ball.hop++;
    if (ball.hop == 2 * ROUNDS) {
        quit_fn(&me->quit);
        mailbox_post(&me->peer->box, &me->peer->quit);
        return;
    }
    mailbox_post(&me->peer->box, &ball.msg);
}

static void *side_thread(void *arg)
{
    struct side *s = arg;
    if (reactor_init(&s->r, 64) < 0) {
        bad_hops++;
        return NULL;
    }
    s->box.r = &s->r;
    mailbox_open(&s->box);
    reactor_run(&s->r);
    reactor_fini(&s->r);
    return NULL;
}

static void check_ping_pong(void)
{
    for (int i = 0; i < 2; i++) {
        CHECK(mailbox_init(&sides[i].box, NULL) == 0);
        sides[i].peer = &sides[1 - i];
        sides[i].quit.fn = quit_fn;
    }
    ball.msg.fn = ball_fn;
    for (int i = 0; i < 2; i++)
        pthread_create(&sides[i].th, NULL, side_thread, &sides[i]);
    mailbox_post(&sides[1].box, &ball.msg);     /* posted before side 1 is up */
    for (int i = 0; i < 2; i++)
        pthread_join(sides[i].th, NULL);
    CHECK(bad_hops == 0);
    CHECK(ball.hop == 2 * ROUNDS);
    CHECK(sides[0].hops == ROUNDS && sides[1].hops == ROUNDS);
    for (int i = 0; i < 2; i++)
        mailbox_fini(&sides[i].box);
}

int main(void)
{
    check_many_posters();
    check_ping_pong();
    return check_exit("mailbox");
}
