/*
 * The path without a cache: every request goes straight to the origin.
 * Also the building blocks other paths use to talk to the origin.
 *
 * A remote origin's server may acknowledge a write and lose it before
 * anything flushed it: its connection breaks (the server crashed, or was
 * restarted, with a write cache of its own), the device reconnects, and
 * the data it acknowledged is gone.  The client's next FLUSH must not
 * then succeed, or the client takes the lost writes for durable.  So
 * (with the cache, originwin.c does this and more) every write-type
 * request the origin acknowledged without FUA is noted with the
 * connection epoch it was answered in (struct tc_dev: it changes
 * whenever a connection is lost); a FLUSH covers those noted before it
 * was sent, and fails with EIO if the epoch moved on after the oldest of
 * them -- once: the writes it reports are then forgotten, as a flush that
 * failed on a disk reports its lost writes once.  A FLUSH that fails
 * leaves them noted.  A file or a block device never changes its epoch.
 */
#include <errno.h>
#include <string.h>

#include "engine/engine.h"
#include "util/join.h"
#include "util/log.h"
#include "util/misc.h"

static void note_unflushed(struct tc_volume *vol, uint64_t epoch)
{
    if (!vol->unflushed_writes || epoch < vol->unflushed_epoch)
        vol->unflushed_epoch = epoch;
    vol->unflushed_writes = true;
}

/* A FLUSH ended: fails if a connection was lost after a write it covers
 * was acknowledged. */
static int flush_ended(struct ereq *e, int err)
{
    struct tc_volume *vol = e->vol;
    struct tc_dev *origin = vol->origin;
    if (!e->covers_writes)
        return err;
    if (err) {
        note_unflushed(vol, e->covers_epoch);
        return err;
    }
    if (e->covers_epoch == origin->epoch)
        return 0;
    vol->flushes_failed_connection_lost++;
    tc_error("origin %s: a connection to it was lost after it acknowledged writes that no "
             "flush had covered: its server may have lost them (a crash or restart with a "
             "write cache of its own); this FLUSH fails with EIO", origin->name);
    return -EIO;
}

static void origin_done(struct tc_dev_io *dio, int err)
{
    struct ereq *e = dio->priv;
    if (e->op == TC_OP_FLUSH)
        err = flush_ended(e, err);
    else if (err == 0 && e->op != TC_OP_READ && dio->op != TC_DEV_FLUSH &&
             !(e->flags & TC_REQ_FUA))
        note_unflushed(e->vol, e->vol->origin->epoch);
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
        e->covers_writes = vol->unflushed_writes;
        e->covers_epoch = vol->unflushed_epoch;
        vol->unflushed_writes = false;
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
