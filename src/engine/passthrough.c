/*
 * The path without a cache: every request goes straight to the origin.
 * Also the building blocks other paths use to talk to the origin.
 */
#include <errno.h>
#include <string.h>

#include "engine/engine.h"
#include "util/join.h"
#include "util/log.h"
#include "util/misc.h"

static void origin_done(struct tc_dev_io *dio, int err)
{
    struct ereq *e = dio->priv;
    err_keep_first(&e->err, err);
    if (err == 0 && (e->flags & TC_REQ_FUA) && dio->op != TC_DEV_WRITE &&
        dio->op != TC_DEV_FLUSH) {
        /* Trim and write-zeroes with FUA: make them durable now. */
        e->flags &= ~TC_REQ_FUA;
        dio->op = TC_DEV_FLUSH;
        dio->flags = 0;
        dev_submit(e->vol->origin, dio);
        return;
    }
    e->complete(e);
}

void passthrough_submit(struct ereq *e)
{
    struct tc_volume *vol = e->vol;
    struct tc_dev *origin = vol->origin;
    struct tc_dev_io *dio = &e->dio;
    memset(dio, 0, sizeof *dio);
    dio->buf = e->buf;
    dio->off = e->off;
    dio->len = e->len;
    dio->cb = origin_done;
    dio->priv = e;
    switch (e->op) {
    case TC_OP_READ:
        dio->op = TC_DEV_READ;
        break;
    case TC_OP_WRITE:
        dio->op = TC_DEV_WRITE;
        if (e->flags & TC_REQ_FUA)
            dio->flags |= TC_DEV_FUA;
        break;
    case TC_OP_FLUSH:
        if (!origin->can_flush) {
            e->complete(e);
            return;
        }
        dio->op = TC_DEV_FLUSH;
        dio->len = 0;
        break;
    case TC_OP_TRIM:
        dio->op = TC_DEV_TRIM;
        break;
    case TC_OP_WRITE_ZEROES:
        dio->op = TC_DEV_ZERO;
        if (e->flags & TC_REQ_NO_HOLE)
            dio->flags |= TC_DEV_NO_HOLE;
        if (e->flags & TC_REQ_FAST_ZERO)
            dio->flags |= TC_DEV_FAST_ZERO;
        break;
    case TC_OP_CACHE:
        e->complete(e);
        return;
    case TC_OP_BLOCK_STATUS:
        engine_block_status(e);
        return;
    }
    dev_submit(origin, dio);
}
