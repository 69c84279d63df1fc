/*
 * A join: one step waits for several asynchronous operations and gets the
 * first error any of them reported.
 *
 *   struct tc_join j = {0};        (or inside a zeroed structure)
 *   join_get(&j);                  the issuer's hold, before anything starts
 *   for each operation:
 *       join_get(&j); start it;    its completion:
 *                                      if (join_put(&j, err)) next_step();
 *   if (join_put(&j, 0)) next_step();      the hold released
 *
 * Invariants:
 *  - pending counts the operations started and not yet put, plus the
 *    issuer's hold while it issues.  join_put() returns true to the one
 *    caller whose put takes the count to zero, and only to it: that caller
 *    runs the next step, once.  The join has no callback of its own: the
 *    step is the caller's code, which may free the structure holding the
 *    join (nothing touches the join after a put that returned true).
 *  - err is 0 or the first nonzero error given to join_put() or
 *    join_error() since the join was zeroed; later errors are dropped.  A
 *    join whose count reached zero may be used again for a next phase (its
 *    error stays unless the owner clears it).
 *  - A join belongs to one thread (the reactor's); there is no locking.
 *
 * When completions run -- the engine's rule:
 *  - A device request never completes inside dev_submit() (io/dev.h): its
 *    callback always runs from a later reactor pass.
 *  - An engine operation (what the engine/ headers declare: a checked
 *    cache read, a gather, a log sync, a writeback of blocks, a sub-request)
 *    may complete inside the call that started it, when it needs no device
 *    I/O: cache_read_verified() of sectors still in an open segment's RAM
 *    image, cache_gather*() of such sectors only or of none it can locate,
 *    log_sync() with nothing left to write or flush, an error found at once.
 *    (They are not deferred to a later pass: that would add a reactor pass
 *    to every read served from RAM.)
 *  - So whoever starts more than one operation, or uses its own state after
 *    starting one, holds a join while it issues: a completion that runs
 *    inside its start call only counts down, and the next step runs once,
 *    after the last operation was started.
 */
#ifndef TC_UTIL_JOIN_H
#define TC_UTIL_JOIN_H

#include <stdbool.h>

#include "util/assert.h"

struct tc_join {
    unsigned pending;
    int err;
};

/* Keep the first error: *slot takes err only while it holds none. */
static inline void err_keep_first(int *slot, int err)
{
    if (err && *slot == 0)
        *slot = err;
}

/* One more operation (or the issuer's hold). */
static inline void join_get(struct tc_join *j)
{
    j->pending++;
}

/* n more at once. */
static inline void join_get_n(struct tc_join *j, unsigned n)
{
    j->pending += n;
}

/* An error found without a completion (while issuing): kept if first. */
static inline void join_error(struct tc_join *j, int err)
{
    err_keep_first(&j->err, err);
}

/* One operation ended with err (0: success).  True when it was the last:
 * the caller then runs the next step. */
static inline bool join_put(struct tc_join *j, int err)
{
    TC_ASSERT(j->pending > 0);
    err_keep_first(&j->err, err);
    return --j->pending == 0;
}

#endif
