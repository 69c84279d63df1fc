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

/*
 * A mailbox: messages from other threads to the thread that runs a
 * reactor (serve --nbd-threads: requests parsed by a front-end thread to
 * the volume's reactor, replies back).  No locks: posting pushes onto a
 * lock-free stack (one compare-and-swap); the owner takes the whole stack
 * with one exchange and runs the messages oldest first.  A post onto an
 * empty stack writes the mailbox's eventfd, on which the owner keeps a
 * read armed in its ring while the mailbox is open: every post is
 * followed by a wake-up that finds it (the post that made the stack
 * non-empty is seen by the exchange that follows the read it wakes).
 *
 * A message belongs to its poster until it is posted, then to the owner;
 * a message is in at most one mailbox at a time.  There is no ABA: the
 * owner never pops one message, it takes them all.
 */
struct tc_msg {
    void (*fn)(struct tc_msg *msg);     /* run on the owner's thread */
    struct tc_msg *next;
};

struct tc_mailbox {
    struct tc_msg *head;            /* the stack: atomic, newest first */
    int efd;
    struct tc_reactor *r;           /* the owner's */
    struct tc_io rx_io;
    uint64_t rx_count;
    bool armed;                     /* the eventfd read is in the ring */
    bool open;                      /* re-arm after each wake-up */
};

/* On the owner's thread, with its reactor; -1 with errno. */
int mailbox_init(struct tc_mailbox *mb, struct tc_reactor *r);
/* Keep a read armed (open) or let the armed one be the last (closed: a
 * reactor_run() can then end once it has come).  Owner only. */
void mailbox_open(struct tc_mailbox *mb);
void mailbox_close(struct tc_mailbox *mb);
/* Wake the owner with one more write, so that a closed mailbox's last
 * read completes (any thread). */
void mailbox_kick(struct tc_mailbox *mb);
void mailbox_fini(struct tc_mailbox *mb);
/* Any thread. */
void mailbox_post(struct tc_mailbox *mb, struct tc_msg *msg);

#endif
