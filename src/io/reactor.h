/*
 * The reactor: one thread, one io_uring, everything asynchronous.
 *
 * Every asynchronous operation is a struct tc_io embedded in a larger
 * object (a request, a connection, a device operation).  Its done()
 * callback receives the completion result (bytes or -errno) and finds its
 * container with container_of().  Nothing in the data path blocks: sockets,
 * files and block devices are all driven through the ring.
 *
 *        submit SQE ──► kernel ──► CQE ──► io->done(io, res)
 *              ▲                               │
 *              └────── further SQEs ◄──────────┘
 *
 * Besides I/O the loop runs timers (a binary heap of deadlines, waited for
 * with the ring's own timeout) and deferred tasks (work queued to run after
 * the current completions, which keeps call stacks shallow).
 */
#ifndef TC_IO_REACTOR_H
#define TC_IO_REACTOR_H

#include <liburing.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tc_io {
    void (*done)(struct tc_io *io, int res);
};

struct tc_task {
    void (*fn)(struct tc_task *task);
    struct tc_task *next;
    bool queued;
};

struct tc_timer {
    void (*fn)(struct tc_timer *timer);
    uint64_t deadline;          /* CLOCK_MONOTONIC ns */
    size_t heap_index;          /* position in the heap while armed */
    bool armed;
};

struct tc_reactor {
    struct io_uring ring;
    bool stop;
    uint64_t inflight;          /* SQEs submitted whose CQE has not arrived */
    struct tc_task *task_head, **task_tail;
    struct tc_timer **heap;
    size_t heap_len, heap_cap;
};

int reactor_init(struct tc_reactor *r, unsigned entries);
void reactor_fini(struct tc_reactor *r);

/* A free submission entry; submits pending ones to make room when the
 * queue is full, so it never fails. io is stored as the user data. */
struct io_uring_sqe *reactor_sqe(struct tc_reactor *r, struct tc_io *io);

/* Run until reactor_stop() and until no operation is in flight. */
void reactor_run(struct tc_reactor *r);
/* Process whatever is ready without blocking (or blocking at most
 * timeout_ns); used by shutdown paths and tests. */
void reactor_poll(struct tc_reactor *r, uint64_t timeout_ns);
static inline void reactor_stop(struct tc_reactor *r) { r->stop = true; }

void reactor_defer(struct tc_reactor *r, struct tc_task *task);

void timer_arm(struct tc_reactor *r, struct tc_timer *t, uint64_t delay_ns);
void timer_cancel(struct tc_reactor *r, struct tc_timer *t);

#endif
