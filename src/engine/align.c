/*
 * Requests not aligned to the 4096-byte sector.
 *
 * The engine below works in whole sectors on aligned buffers (O_DIRECT
 * needs it, and valid and dirty bits are per sector).  Clients may send
 * any offset and length, so this layer turns them into aligned ones:
 *
 *   read          read the covering sectors into a bounce buffer, copy out
 *   write         read-modify-write: under an exclusive range lock, read
 *                 the partly covered head and tail sectors, merge the data,
 *                 write the covering sectors
 *   write-zeroes  zero the aligned middle; read-modify-write the ends
 *                 (with FAST_ZERO: refused with -ENOTSUP, nothing changed)
 *   trim          trim only the whole sectors inside (trim is advisory)
 *   cache         widen to whole sectors
 *   block status  ask for the covering sectors, report from the offset on
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/abandon.h"
#include "engine/cache.h"
#include "engine/engine.h"
#include "io/bufpool.h"
#include "util/join.h"
#include "util/log.h"
#include "util/misc.h"

struct areq {
    struct tc_volume *vol;
    struct tc_request *req;
    uint64_t a0, a1;                /* covering aligned range */
    uint64_t head, tail;            /* sectors read before a merge, or ~0 */
    void *bounce;
    size_t bounce_size;
    struct rl_entry lock;
    struct tc_join join;            /* the sub-requests of the current step */
    void (*next)(struct areq *a);   /* step to run when the join's count reaches 0 */
};

#define NO_SECTOR UINT64_MAX

static void finish(struct areq *a)
{
    struct tc_volume *vol = a->vol;
    struct tc_request *req = a->req;
    if (a->lock.granted)
        rl_release(&vol->locks, &a->lock);
    if (a->bounce)
        bufpool_put(a->bounce, a->bounce_size);
    int err = a->join.err;
    if (err)
        vol->stats.errors++;
    tc_obj_put(a, sizeof *a);
    if (devfail_hold_ack(vol->cache ? &vol->cache->ab : NULL, req, err))
        return;     /* a device failure is being recorded (abandon.c) */
    req->done(req, err);
}

static void sub_done(struct ereq *e)
{
    struct areq *a = e->owner;
    int err = e->err;
    if (e->op == TC_OP_BLOCK_STATUS)
        a->req->nr_extents = e->nr_extents;
    ereq_free(e);
    if (join_put(&a->join, err))
        a->next(a);
}

/* Issue one aligned sub-request; the step a->next runs after the last. */
static void sub(struct areq *a, enum tc_op op, unsigned flags, uint64_t off, uint64_t len,
                void *buf)
{
    /* Sub-requests of a read-modify-write run under its exclusive lock;
     * a lone trim takes the shared lock an aligned trim would take. */
    bool shared_lock = op == TC_OP_TRIM && !a->lock.granted;
    struct ereq *e = ereq_new(a->vol);
    e->op = op;
    e->flags = flags;
    e->off = off;
    e->len = len;
    e->buf = buf;
    e->complete = sub_done;
    e->owner = a;
    if (op == TC_OP_BLOCK_STATUS) {
        e->extents = a->req->extents;
        e->max_extents = a->req->max_extents;
    }
    join_get(&a->join);
    if (shared_lock)
        engine_submit_locked(e);
    else
        engine_dispatch(e);
}

/* Where byte off of the volume is in the bounce buffer.  Writes bounce
 * their whole covering range; write-zeroes only their two end sectors,
 * the head sector first and the tail sector after it. */
static void *bounce_at(struct areq *a, uint64_t off)
{
    if (a->req->op == TC_OP_WRITE_ZEROES) {
        uint64_t sector = tc_round_down(off, TC_SECTOR);
        size_t slot = (a->head != NO_SECTOR && sector == a->head) ? 0 : TC_SECTOR;
        if (a->head == NO_SECTOR)
            slot = 0;
        return (char *)a->bounce + slot + (off - sector);
    }
    return (char *)a->bounce + (off - a->a0);
}

/* ---- read ---- */

/* A data-free volume (tc_volume_config.data_free) holds no data: neither
 * the client's buffer nor the bounce buffer carries any, so nothing is
 * copied between them. */
static bool copies(const struct areq *a) { return !a->vol->cfg.data_free; }

static void read_copied(struct areq *a)
{
    if (a->join.err == 0 && copies(a))
        memcpy(a->req->buf, bounce_at(a, a->req->offset), a->req->length);
    finish(a);
}

/* ---- write and write-zeroes: read the ends, merge, write ---- */

static void merged_written(struct areq *a) { finish(a); }

static void ends_read(struct areq *a)
{
    struct tc_request *req = a->req;
    if (a->join.err) {
        finish(a);
        return;
    }
    unsigned fua = req->flags & TC_REQ_FUA;
    a->next = merged_written;
    join_get(&a->join);     /* hold: the sub-requests may finish at once */
    if (req->op == TC_OP_WRITE) {
        if (copies(a))
            memcpy(bounce_at(a, req->offset), req->buf, req->length);
        sub(a, TC_OP_WRITE, fua, a->a0, a->a1 - a->a0, a->bounce);
    } else {
        /* Zero the partial ends in the bounce buffer and write them; the
         * whole sectors between are zeroed by the device. */
        uint64_t end = req->offset + req->length;
        uint64_t m0 = tc_round_up(req->offset, TC_SECTOR);
        uint64_t m1 = tc_round_down(end, TC_SECTOR);
        if (m0 > m1) {          /* inside one sector */
            memset(bounce_at(a, req->offset), 0, req->length);
            sub(a, TC_OP_WRITE, fua, a->a0, TC_SECTOR, bounce_at(a, a->a0));
        } else {
            if (a->head != NO_SECTOR) {
                memset(bounce_at(a, req->offset), 0, m0 - req->offset);
                sub(a, TC_OP_WRITE, fua, a->head, TC_SECTOR, bounce_at(a, a->head));
            }
            if (a->tail != NO_SECTOR) {
                memset(bounce_at(a, m1), 0, end - m1);
                sub(a, TC_OP_WRITE, fua, a->tail, TC_SECTOR, bounce_at(a, a->tail));
            }
            if (m1 > m0)
                sub(a, TC_OP_WRITE_ZEROES, req->flags, m0, m1 - m0, NULL);
        }
    }
    if (join_put(&a->join, 0))
        a->next(a);
}

static void rmw_locked(struct areq *a)
{
    struct tc_request *req = a->req;
    uint64_t end = req->offset + req->length;
    a->head = (req->offset & (TC_SECTOR - 1)) ? a->a0 : NO_SECTOR;
    a->tail = (end & (TC_SECTOR - 1)) ? a->a1 - TC_SECTOR : NO_SECTOR;
    if (a->tail == a->head)
        a->tail = NO_SECTOR;
    a->next = ends_read;
    join_get(&a->join);     /* hold */
    if (a->head != NO_SECTOR)
        sub(a, TC_OP_READ, EREQ_SUB_READ, a->head, TC_SECTOR, bounce_at(a, a->head));
    if (a->tail != NO_SECTOR)
        sub(a, TC_OP_READ, EREQ_SUB_READ, a->tail, TC_SECTOR, bounce_at(a, a->tail));
    if (join_put(&a->join, 0))
        a->next(a);
}

static void rmw_lock_granted(struct rl_entry *l)
{
    rmw_locked(container_of(l, struct areq, lock));
}

/* ---- block status: shift the answer from the sector to the offset ---- */

static void status_trimmed(struct areq *a)
{
    struct tc_request *req = a->req;
    if (a->join.err == 0) {
        uint64_t skip = req->offset - a->a0, want = req->length, total = 0;
        unsigned out = 0;
        for (unsigned i = 0; i < req->nr_extents && total < want; i++) {
            struct tc_extent x = req->extents[i];
            if (skip >= x.length) {
                skip -= x.length;
                continue;
            }
            x.length -= skip;
            skip = 0;
            if (x.length > want - total)
                x.length = want - total;
            total += x.length;
            req->extents[out++] = x;
        }
        if (out == 0) {         /* cannot happen with a correct engine */
            req->extents[0].length = want;
            req->extents[0].flags = 0;
            out = 1;
        }
        req->nr_extents = out;
    }
    finish(a);
}

void align_submit(struct tc_volume *vol, struct tc_request *req)
{
    struct areq *a = tc_obj_get(sizeof *a);
    a->vol = vol;
    a->req = req;
    a->a0 = tc_round_down(req->offset, TC_SECTOR);
    a->a1 = tc_round_up(req->offset + req->length, TC_SECTOR);
    if (req->op == TC_OP_WRITE ||
        (req->op == TC_OP_WRITE_ZEROES && !(req->flags & TC_REQ_FAST_ZERO))) {
        /* A read-modify-write under the range's exclusive lock: its steps
         * hold the join themselves. */
        if (req->op == TC_OP_WRITE)
            vol->stats.unaligned_writes++;
        a->bounce_size = req->op == TC_OP_WRITE ? a->a1 - a->a0 : 2 * TC_SECTOR;
        a->bounce = bufpool_get(a->bounce_size);
        a->lock.start = a->a0;
        a->lock.end = a->a1;
        a->lock.exclusive = true;
        a->lock.granted_cb = rmw_lock_granted;
        if (rl_acquire(&vol->locks, &a->lock))
            rmw_locked(a);
        return;
    }
    join_get(&a->join);         /* released below, after issuing */

    switch (req->op) {
    case TC_OP_READ:
        vol->stats.unaligned_reads++;
        a->bounce_size = a->a1 - a->a0;
        a->bounce = bufpool_get(a->bounce_size);
        a->next = read_copied;
        sub(a, TC_OP_READ, 0, a->a0, a->a1 - a->a0, a->bounce);
        break;
    case TC_OP_WRITE_ZEROES:
        /* With FAST_ZERO (the others went above): the partial sectors at the ends need a read-modify-write, which is
         * no faster than a plain write: refuse at once, before anything is
         * changed.  (Zeroing the ends and then failing the middle with
         * -ENOTSUP would leave the export altered while reporting failure,
         * which proto.md says FAST_ZERO should not do.) */
        a->next = finish;
        join_error(&a->join, -ENOTSUP);
        break;
    case TC_OP_TRIM: {
        uint64_t t0 = tc_round_up(req->offset, TC_SECTOR);
        uint64_t t1 = tc_round_down(req->offset + req->length, TC_SECTOR);
        a->next = finish;
        if (t1 > t0) {
            /* Hold the shared lock like any aligned write would. */
            sub(a, TC_OP_TRIM, req->flags, t0, t1 - t0, NULL);
        }
        break;
    }
    case TC_OP_CACHE:
        a->next = finish;
        sub(a, TC_OP_CACHE, 0, a->a0, a->a1 - a->a0, NULL);
        break;
    case TC_OP_BLOCK_STATUS:
        a->next = status_trimmed;
        sub(a, TC_OP_BLOCK_STATUS, req->flags & ~TC_REQ_REQ_ONE, a->a0, a->a1 - a->a0, NULL);
        break;
    default:
        a->next = finish;
        join_error(&a->join, -EINVAL);
        break;
    }
    if (join_put(&a->join, 0))
        a->next(a);
}
