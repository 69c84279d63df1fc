/*
 * Joins (util/join.h): the step after the operations runs once, after the
 * last put and never before the issuer's hold is released, whatever the
 * order of completions -- including completions that run inside the call
 * that started them -- and the error it gets is the first one put.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "util/join.h"

#include "check.h"

struct owner {
    struct tc_join join;
    unsigned steps;         /* times the next step ran */
    int step_err;           /* the error it got */
    bool issuing;           /* the issuer still holds the join */
    bool early;             /* the step ran while issuing */
};

static void next_step(struct owner *o)
{
    o->steps++;
    o->step_err = o->join.err;
    if (o->issuing)
        o->early = true;
}

static void complete(struct owner *o, int err)
{
    if (join_put(&o->join, err))
        next_step(o);
}

/* n operations; those with inline[i] complete inside their start, the
 * others later in the order given by later[] with errors errs[]. */
static void run(unsigned n, const bool *inline_, const int *errs, const unsigned *later,
                unsigned nlater, unsigned *steps, int *err, bool *early)
{
    struct owner o;
    memset(&o, 0, sizeof o);
    o.issuing = true;
    join_get(&o.join);
    for (unsigned i = 0; i < n; i++) {
        join_get(&o.join);
        if (inline_[i])
            complete(&o, errs[i]);
    }
    o.issuing = false;
    complete(&o, 0);
    for (unsigned k = 0; k < nlater; k++)
        complete(&o, errs[later[k]]);
    *steps = o.steps;
    *err = o.step_err;
    *early = o.early;
}

int main(void)
{
    /* err_keep_first */
    int slot = 0;
    err_keep_first(&slot, 0);
    CHECK(slot == 0);
    err_keep_first(&slot, -EIO);
    CHECK(slot == -EIO);
    err_keep_first(&slot, -ENOSPC);
    CHECK(slot == -EIO);
    err_keep_first(&slot, 0);
    CHECK(slot == -EIO);

    /* Nothing started: the hold's release runs the step. */
    {
        struct tc_join j = { 0 };
        join_get(&j);
        CHECK(join_put(&j, 0));
        CHECK(j.pending == 0 && j.err == 0);
    }

    /* Every mix of inline and later completions of 4 operations, each
     * order of the later ones, errors in some: one step, after the hold,
     * with the first error in completion order. */
    enum { N = 4 };
    const int errv[N] = { 0, -EIO, -ENODATA, 0 };
    for (unsigned mask = 0; mask < (1u << N); mask++) {
        for (unsigned perm = 0; perm < 24; perm++) {
            bool inl[N];
            unsigned later[N], nlater = 0;
            for (unsigned i = 0; i < N; i++)
                inl[i] = (mask >> i) & 1;
            /* the perm-th ordering of 0..3, restricted to later ones */
            unsigned pool[N] = { 0, 1, 2, 3 }, left = N, p = perm;
            unsigned order[N];
            for (unsigned k = 0; k < N; k++) {
                unsigned f = 1;
                for (unsigned t = 2; t < left; t++)
                    f *= t;
                unsigned idx = p / f;
                p %= f;
                order[k] = pool[idx];
                for (unsigned t = idx; t + 1 < left; t++)
                    pool[t] = pool[t + 1];
                left--;
            }
            for (unsigned k = 0; k < N; k++)
                if (!inl[order[k]])
                    later[nlater++] = order[k];
            int expect = 0;
            for (unsigned i = 0; i < N && expect == 0; i++)
                if (inl[i])
                    expect = errv[i];
            for (unsigned k = 0; k < nlater && expect == 0; k++)
                expect = errv[later[k]];
            unsigned steps;
            int err;
            bool early;
            run(N, inl, errv, later, nlater, &steps, &err, &early);
            CHECK(steps == 1);
            CHECK(!early);
            CHECK(err == expect);
        }
    }

    /* join_error while issuing counts as first; a second phase after the
     * count reached zero keeps the error. */
    {
        struct tc_join j = { 0 };
        join_get(&j);
        join_get_n(&j, 2);
        join_error(&j, -ENODATA);
        CHECK(!join_put(&j, -EIO));
        CHECK(!join_put(&j, 0));
        CHECK(join_put(&j, 0));
        CHECK(j.err == -ENODATA);
        join_get(&j);
        CHECK(join_put(&j, -EIO));
        CHECK(j.err == -ENODATA);
    }
    return check_exit("join");
}
