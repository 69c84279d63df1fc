/*
 * The reactor's ring (io/reactor.c): completion work deferred to the
 * reactor's own entries into the ring (IORING_SETUP_DEFER_TASKRUN) where
 * the kernel has it, and every completion still collected, both by polls
 * that do not wait (reactor_poll(r, 0) in a loop, as replay drives the
 * ring) and by polls that wait: a batch of no-ops, a read of a pipe that
 * already holds data, a read of a pipe written to only after the read was
 * submitted, and reactor_run() returning once stopped with nothing in
 * flight.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "io/reactor.h"
#include "util/misc.h"

#include "check.h"

struct op {
    struct tc_io io;
    int res;
    unsigned done;
};

static void op_done(struct tc_io *io, int res)
{
    struct op *o = container_of(io, struct op, io);
    o->res = res;
    o->done++;
}

static bool kernel_defers(void)
{
    struct io_uring ring;
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
    if (io_uring_queue_init_params(4, &ring, &p) < 0)
        return false;
    io_uring_queue_exit(&ring);
    return true;
}

/* Polls without waiting until op is done or tries run out. */
static void spin(struct tc_reactor *r, const struct op *o, unsigned tries)
{
    while (o->done == 0 && tries-- > 0)
        reactor_poll(r, 0);
}

int main(void)
{
    struct tc_reactor r;
    if (reactor_init(&r, 64) != 0) {
        printf("no io_uring here: not checked\n");
        return check_exit("reactor_batch");
    }
    if (kernel_defers()) {
        printf("the kernel defers completion work: the reactor's ring must too\n");
        CHECK(r.ring.flags & IORING_SETUP_DEFER_TASKRUN);
        CHECK(r.ring.flags & IORING_SETUP_TASKRUN_FLAG);
    } else {
        printf("the kernel cannot defer completion work: not checked\n");
    }

    /* 100 no-ops, collected by polls that never wait. */
    struct op nops[100];
    memset(nops, 0, sizeof nops);
    for (unsigned i = 0; i < 100; i++) {
        nops[i].io.done = op_done;
        io_uring_prep_nop(reactor_sqe(&r, &nops[i].io));
    }
    for (unsigned tries = 0; tries < 100000 && nops[99].done == 0; tries++)
        reactor_poll(&r, 0);
    unsigned once = 0;
    for (unsigned i = 0; i < 100; i++)
        once += nops[i].done == 1 && nops[i].res == 0;
    CHECK(once == 100);
    CHECK(r.inflight == 0);

    /* A read of data already there: a poll that does not wait collects it. */
    int fds[2];
    CHECK(pipe(fds) == 0);
    char in[8] = { 0 };
    CHECK(write(fds[1], "ready", 5) == 5);
    struct op rd = { .io.done = op_done };
    io_uring_prep_read(reactor_sqe(&r, &rd.io), fds[0], in, sizeof in, (uint64_t)-1);
    spin(&r, &rd, 100000);
    CHECK(rd.done == 1 && rd.res == 5 && memcmp(in, "ready", 5) == 0);

    /* A read submitted before its data exists: armed, then completed by a
     * write; a poll that waits (up to 5 s) collects it. */
    struct op late = { .io.done = op_done };
    memset(in, 0, sizeof in);
    io_uring_prep_read(reactor_sqe(&r, &late.io), fds[0], in, sizeof in, (uint64_t)-1);
    reactor_poll(&r, 0);                /* submitted, nothing to read yet */
    CHECK(late.done == 0);
    CHECK(write(fds[1], "late", 4) == 4);
    for (unsigned i = 0; i < 10 && late.done == 0; i++)
        reactor_poll(&r, 500000000ull);
    CHECK(late.done == 1 && late.res == 4 && memcmp(in, "late", 4) == 0);

    /* reactor_run(): stopped, it still waits for what is in flight. */
    struct op last = { .io.done = op_done };
    io_uring_prep_nop(reactor_sqe(&r, &last.io));
    reactor_stop(&r);
    reactor_run(&r);
    CHECK(last.done == 1 && r.inflight == 0);

    close(fds[0]);
    close(fds[1]);
    reactor_fini(&r);
    return check_exit("reactor_batch");
}
