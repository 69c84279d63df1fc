/*
 * Front-end threads (serve --nbd-threads N): connections in their
 * transmission phase run on threads of their own, each with its own
 * io_uring, while the engine stays on the volume's reactor.  The model,
 * the messages and who owns what are described at struct nbd_fe
 * (server.h); this file starts and stops the threads and moves
 * connections between them.
 *
 * The hand-over: once a connection's handshake is over (enter_transmission)
 * it stops parsing and receiving on the reactor (an armed receive is
 * cancelled; bytes it brought stay in rx[] for the front end), its option
 * replies drain, and when nothing of it is in the reactor's ring and no
 * one else holds a reference (the hand-over holds one while it waits, so
 * refs == 2: it and the connection's own), it is posted to a front end,
 * which from then on is its only user.  A connection that closes meanwhile
 * stays and closes on the reactor.  TLS connections and --single stay on
 * the reactor (the TLS session's state is GnuTLS's, set up there).
 *
 * Its end: when the front end drops the last reference the connection is
 * unlinked from the front end's list and posted back, and the reactor frees
 * it (the server's list, its counts and nbd_server_conn_gone() are the
 * reactor's).
 */
#include <errno.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbd/server.h"
#include "util/assert.h"
#include "util/log.h"
#include "util/misc.h"

#define FE_RING_ENTRIES 256

struct fe_start {
    struct nbd_fe *fe;
    sem_t ready;
};

static void fe_stop_fn(struct tc_msg *m)
{
    struct nbd_fe *fe = container_of(m, struct nbd_fe, stop_msg);
    for (struct nbd_conn *c = fe->conns, *next; c; c = next) {
        next = c->fe_next;
        conn_close(c, "server shutting down");
    }
}

static void fe_abort_fn(struct tc_msg *m)
{
    struct nbd_fe *fe = container_of(m, struct nbd_fe, abort_msg);
    for (struct nbd_conn *c = fe->conns, *next; c; c = next) {
        next = c->fe_next;
        conn_abort(c, "the server is shutting down and the client is not taking its replies");
    }
}

static void fe_quit_fn(struct tc_msg *m)
{
    struct nbd_fe *fe = container_of(m, struct nbd_fe, quit_msg);
    mailbox_close(&fe->inbox);
    reactor_stop(&fe->reactor);
}

static void *fe_main(void *arg)
{
    struct fe_start *st = arg;
    struct nbd_fe *fe = st->fe;
    char name[16];
    snprintf(name, sizeof name, "nbd-fe%u", fe->index);
    pthread_setname_np(pthread_self(), name);
    /* The ring is made here: SINGLE_ISSUER binds it to this thread. */
    if (reactor_init(&fe->reactor, FE_RING_ENTRIES) < 0) {
        fe->init_err = errno;
        sem_post(&st->ready);
        return NULL;
    }
    fe->memq.reactor = &fe->reactor;
    fe->inbox.r = &fe->reactor;
    mailbox_open(&fe->inbox);
    sem_post(&st->ready);       /* st is gone after this */
    reactor_run(&fe->reactor);
    reactor_fini(&fe->reactor);
    return NULL;
}

int nbd_fe_start(struct nbd_server *srv, char *err, size_t errlen)
{
    unsigned n = srv->cfg.nbd_threads;
    if (n == 0)
        return 0;
    if (mailbox_init(&srv->inbox, srv->reactor) < 0) {
        snprintf(err, errlen, "--nbd-threads: eventfd: %s", strerror(errno));
        return -1;
    }
    mailbox_open(&srv->inbox);
    srv->fes = tc_xcalloc(n, sizeof *srv->fes);
    for (unsigned i = 0; i < n; i++) {
        struct nbd_fe *fe = &srv->fes[i];
        fe->srv = srv;
        fe->index = i;
        fe->stop_msg.fn = fe_stop_fn;
        fe->abort_msg.fn = fe_abort_fn;
        fe->quit_msg.fn = fe_quit_fn;
        if (mailbox_init(&fe->inbox, NULL) < 0) {
            snprintf(err, errlen, "--nbd-threads: eventfd: %s", strerror(errno));
            srv->nfes = i;
            return -1;
        }
        struct fe_start st = { .fe = fe };
        sem_init(&st.ready, 0, 0);
        int rc = pthread_create(&fe->thread, NULL, fe_main, &st);
        if (rc == 0) {
            while (sem_wait(&st.ready) < 0 && errno == EINTR)
                ;
        }
        sem_destroy(&st.ready);
        if (rc != 0 || fe->init_err) {
            if (rc == 0)
                pthread_join(fe->thread, NULL);
            mailbox_fini(&fe->inbox);
            snprintf(err, errlen, "--nbd-threads: front-end thread %u: %s", i,
                     strerror(rc ? rc : fe->init_err));
            srv->nfes = i;
            return -1;
        }
        fe->started = true;
        srv->nfes = i + 1;
    }
    tc_info("nbd: %u front-end thread%s (--nbd-threads)", n, n == 1 ? "" : "s");
    return 0;
}

/* ---- the hand-over ---- */

static void fe_adopt_fn(struct tc_msg *m)
{
    struct nbd_conn *c = container_of(m, struct nbd_conn, msg);
    struct nbd_fe *fe = c->fe;
    c->fe_prev = NULL;
    c->fe_next = fe->conns;
    if (fe->conns)
        fe->conns->fe_prev = c;
    fe->conns = c;
    fe->nconns++;
    if (nbd_stopping(c->srv)) {
        conn_close(c, "server shutting down");
        return;
    }
    /* Parse what arrived with the handshake's last option; receive. */
    conn_get(c);
    conn_parse(c);
    conn_put(c);
}

static void hand_task_fn(struct tc_task *t)
{
    struct nbd_conn *c = container_of(t, struct nbd_conn, hand_task);
    struct nbd_server *srv = c->srv;
    if (!c->handing_over)
        return;
    if (c->closing || srv->stopping) {
        /* It ends here, on the reactor, as without front ends. */
        c->handing_over = false;
        conn_parse(c);
        conn_put(c);    /* the hand-over's reference: perhaps the last */
        return;
    }
    if (c->refs != 2 || c->rx_armed || c->tx_armed || c->txq || c->tx_busy || c->parsing)
        return;     /* conn_put() comes back as the others drop theirs */
    c->handing_over = false;
    c->rx_cancelled = false;
    c->refs--;      /* the hand-over's reference; the connection's own goes along */
    struct nbd_fe *fe = &srv->fes[srv->next_fe++ % srv->nfes];
    c->vol_size = tc_volume_size(srv->vol);
    c->fe = fe;
    c->reactor = &fe->reactor;
    c->memq = &fe->memq;
    c->stats = &fe->stats;
    srv->nhanded++;
    tc_debug("connection %llu (%s): handed to front-end thread %u", (unsigned long long)c->id,
             c->peer, fe->index);
    c->msg.fn = fe_adopt_fn;
    mailbox_post(&fe->inbox, &c->msg);
}

void nbd_fe_hand_over(struct nbd_conn *c)
{
    struct nbd_server *srv = c->srv;
    if (srv->nfes == 0 || srv->cfg.single || !c->is_socket || c->tls != NULL || srv->stopping)
        return;
    c->handing_over = true;
    conn_get(c);    /* the hand-over's: held until it is done or given up */
    conn_cancel_rx(c);
    c->hand_task.fn = hand_task_fn;
    reactor_defer(srv->reactor, &c->hand_task);
}

static void conn_gone_fn(struct tc_msg *m)
{
    struct nbd_conn *c = container_of(m, struct nbd_conn, msg);
    struct nbd_server *srv = c->srv;
    srv->nhanded--;
    c->fe = NULL;
    c->reactor = srv->reactor;
    c->memq = &srv->memq;
    c->stats = &srv->stats;
    conn_free(c);
}

void nbd_fe_ref_dropped(struct nbd_conn *c)
{
    if (c->refs > 0) {
        /* The hand-over waits for the others' references (reactor). */
        reactor_defer(c->srv->reactor, &c->hand_task);
        return;
    }
    /* refs == 0 on a front end: leave it, and let the reactor free it. */
    struct nbd_fe *fe = c->fe;
    transmission_memory_forget(c);
    if (c->fe_prev)
        c->fe_prev->fe_next = c->fe_next;
    else
        fe->conns = c->fe_next;
    if (c->fe_next)
        c->fe_next->fe_prev = c->fe_prev;
    fe->nconns--;
    c->msg.fn = conn_gone_fn;
    mailbox_post(&c->srv->inbox, &c->msg);
}

/* ---- shutdown ---- */

void nbd_fe_stop(struct nbd_server *srv)
{
    if (srv->fes_stopped)
        return;
    srv->fes_stopped = true;
    for (unsigned i = 0; i < srv->nfes; i++)
        mailbox_post(&srv->fes[i].inbox, &srv->fes[i].stop_msg);
}

void nbd_fe_abort(struct nbd_server *srv)
{
    if (srv->fes_aborted)
        return;
    srv->fes_aborted = true;
    for (unsigned i = 0; i < srv->nfes; i++)
        mailbox_post(&srv->fes[i].inbox, &srv->fes[i].abort_msg);
}

/* Every connection is gone (nhanded == 0): end the threads.  They have
 * nothing left in their rings but the mailbox read, which the quit
 * message's wake-up completes.  An eventfd is closed only once no thread
 * can post to it any more: a poster's wake-up write may come after the
 * owner has already taken its message. */
void nbd_fe_join(struct nbd_server *srv)
{
    if (srv->fes == NULL || srv->fes_joined)
        return;
    TC_ASSERT(srv->nhanded == 0);
    srv->fes_joined = true;
    for (unsigned i = 0; i < srv->nfes; i++)
        mailbox_post(&srv->fes[i].inbox, &srv->fes[i].quit_msg);
    for (unsigned i = 0; i < srv->nfes; i++) {
        pthread_join(srv->fes[i].thread, NULL);
        mailbox_fini(&srv->fes[i].inbox);
    }
    /* The reactor's own mailbox: its armed read ends with one more wake-up
     * (the read holds the file, so the descriptor may go now). */
    mailbox_close(&srv->inbox);
    mailbox_kick(&srv->inbox);
    mailbox_fini(&srv->inbox);
    free(srv->fes);
    srv->fes = NULL;
    srv->nfes = 0;
}

void nbd_fe_stats(const struct nbd_server *srv, struct nbd_server_stats *out)
{
    *out = srv->stats;
    for (unsigned i = 0; i < srv->nfes; i++) {
        const struct nbd_server_stats *s = &srv->fes[i].stats;
#define ADD(f) out->f += __atomic_load_n(&s->f, __ATOMIC_RELAXED)
        ADD(read_bytes);
        ADD(write_bytes);
        ADD(errors_sent);
        ADD(protocol_errors);
        ADD(memory_waits);
        ADD(client_memory_waits);
        for (unsigned k = 0; k < TC_ARRAY_SIZE(out->requests); k++)
            ADD(requests[k]);
#undef ADD
        uint64_t peak = __atomic_load_n(&s->buffer_memory_peak, __ATOMIC_RELAXED);
        if (peak > out->buffer_memory_peak)
            out->buffer_memory_peak = peak;
    }
}
