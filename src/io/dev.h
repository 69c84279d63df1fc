/*
 * Block devices as the engine sees them: the origin and each cache device.
 *
 * A device is a table of operations over an asynchronous request,
 * struct tc_dev_io.  The file implementation (dev_file.c) drives regular
 * files and block devices through the reactor's io_uring with O_DIRECT;
 * the NBD implementation (dev_nbd.c) drives a remote export through
 * libnbd's asynchronous API, polled by the same reactor.
 *
 * Contract (the callers' part asserted by dev_submit()):
 *  - read/write buffers, offsets and lengths are 4096-aligned (the engine's
 *    sector), which covers what O_DIRECT needs of a device whose logical
 *    block is at most 4096 (a larger one is refused when it is opened for
 *    the engine: volume.c, format.c); trims and zeroes are whole logical
 *    blocks of a direct-I/O device;
 *  - a request completes exactly once, through cb(dio, 0 or -errno), never
 *    inside dev_submit() (engine operations above it may: util/join.h);
 *  - short transfers are continued by the device layer, never seen above;
 *  - errors are counted and logged here, once, with device and offset.
 */
#ifndef TC_IO_DEV_H
#define TC_IO_DEV_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include "io/reactor.h"
#include "util/assert.h"
#include "util/misc.h"

/* TC_DEV_BLOCK_STATUS: the allocation of [off, off + len), as extents
 * (tiercache.h's struct tc_extent, base:allocation flags) covering a
 * prefix of it from off, at most max_extents; only on a device with
 * can_block_status. */
enum tc_dev_op { TC_DEV_READ, TC_DEV_WRITE, TC_DEV_FLUSH, TC_DEV_TRIM, TC_DEV_ZERO,
                 TC_DEV_BLOCK_STATUS };

/* Request flags. */
#define TC_DEV_FUA       (1u << 0)   /* write: durable on completion */
#define TC_DEV_NO_HOLE   (1u << 1)   /* zero: keep the range allocated */
#define TC_DEV_FAST_ZERO (1u << 2)   /* zero: fail with -ENOTSUP unless fast */
/* read, write: the bytes from payload_off on are data nobody will look at
 * (an engine replaying a trace without data, tc_volume_config.data_free).
 * A memory device leaves them out: a read does not fill them, a write
 * stores them as zeroes.  Other devices carry them as usual. */
#define TC_DEV_PAYLOAD   (1u << 3)

struct tc_dev;
struct tc_extent;

struct tc_dev_io {
    struct tc_io io;                /* reactor completion (device private) */
    struct tc_dev *dev;
    enum tc_dev_op op;
    unsigned flags;
    void *buf;
    uint64_t off, len;
    uint64_t payload_off;           /* TC_DEV_PAYLOAD: where the payload starts in buf */
    uint64_t done_bytes;            /* progress of a transfer (device private) */
    struct tc_dev_io *next;         /* device private: lists of finished requests */
    int status;                     /* device private: result waiting to be reported */
    uint64_t start_ns;              /* when submitted (a read or write: for dev->cost) */
    bool alone;                     /* nothing else was in flight on the device then */
    uint64_t seq;                   /* dev->submitted when it was submitted */
    struct tc_extent *extents;      /* BLOCK_STATUS: room for max_extents */
    unsigned max_extents, nr_extents;
    void (*cb)(struct tc_dev_io *dio, int err);
    void *priv;                     /* the caller's */
};

struct tc_dev_stats {
    uint64_t reads, read_bytes;
    uint64_t writes, write_bytes;
    uint64_t flushes, trims, zeroes, block_status;
    uint64_t read_errors, write_errors, other_errors;
    uint64_t inflight;
    /* A remote device (dev_nbd.c); zero for local ones. */
    uint64_t held;                  /* requests now waiting for a connection */
    uint64_t retried;               /* requests sent again after a connection loss */
    uint64_t reconnects;            /* times it came back after losing every connection */
    uint64_t connections_lost;
    uint64_t read_wakeups_ignored;  /* read polls while sending, nothing to read */
    uint64_t stalled_connections;   /* ready connections not answering now */
    uint64_t stalls;                /* times a connection stopped answering */
    uint64_t stalled_closed;        /* ... and was closed (fenced) */
    uint64_t fenced_failed;         /* writes and flushes failed by a fence (writes in doubt) */
    uint64_t open_fences;           /* fenced connections with writes, not closed by the server */
    uint64_t fence_waits;           /* writes waiting for one to end (they overlap its writes) */
    uint64_t oldest_reply_wait_ns;  /* longest wait for a reply now (checked each second) */
};

/*
 * What a read, and a write, costs the device, estimated from the requests
 * it serves (dev_cost_estimate()): t(len) = request_ns + len * byte_ns, a
 * cost per request (a seek, a round trip) and one per byte (the transfer),
 * for reads and writes apart.  Requests fall in two classes by length:
 * small (up to DEV_COST_SMALL bytes) and large (at least DEV_COST_LARGE);
 * requests between are not sampled.  Each class starts from its first
 * DEV_COST_MIN requests: the mean of their lengths and the median of their
 * times (a few stalls among them do not count); then it keeps a moving
 * mean of its requests' length and time, each new one weighing
 * 1/DEV_COST_WEIGHT, its time clipped to within DEV_COST_CLIP times the
 * mean so that one stall moves the mean little.  The line through the two
 * classes' means gives byte_ns (its slope, at least 0) and request_ns
 * (where it meets length 0, at least 0).  Only requests submitted while
 * nothing else was in flight on the device are sampled (a request queued
 * behind others measures the queue, not the device), and no write with
 * TC_DEV_FUA (it measures a flush too).  No I/O is made for it: until each
 * class has DEV_COST_MIN samples there is no estimate.
 */
#define DEV_COST_SMALL  (16u << 10)
#define DEV_COST_LARGE  (64u << 10)
#define DEV_COST_WEIGHT 16
#define DEV_COST_CLIP   4
#define DEV_COST_MIN    8
enum { DEV_COST_READ, DEV_COST_WRITE };
struct tc_dev_cost {
    uint64_t samples[2][2];         /* [read, write][small, large]: requests sampled */
    double len[2][2], ns[2][2];     /* their moving means: bytes, nanoseconds */
    double first_ns[2][2][DEV_COST_MIN];    /* the times of the first requests */
};

/*
 * Whether a device can take requests.  Local devices are always online.  A
 * remote one that lost every connection is reconnecting: requests are held
 * (not failed) while it reconnects, for up to hold_timeout_ns; after that it
 * is offline: held and new requests fail with -EIO at once, and it keeps
 * reconnecting in the background.
 */
enum tc_dev_state { TC_DEV_ONLINE, TC_DEV_RECONNECTING, TC_DEV_OFFLINE };
const char *dev_state_name(enum tc_dev_state s);

struct tc_dev_ops {
    void (*submit)(struct tc_dev *dev, struct tc_dev_io *dio);
    void (*close)(struct tc_dev *dev);
    /* Optional: stop background activity (polls, timers) so the reactor can
     * finish; the device takes no requests afterwards.  Called once its
     * last request has completed, before the reactor's last run. */
    void (*quiesce)(struct tc_dev *dev);
    /* Optional: give up on the device (a stop that waited too long): every
     * request it holds or has in flight completes now, with an error (for
     * a write, one that says it may still land: -ETIMEDOUT), and new ones
     * fail at once.  Completions may come from later reactor passes. */
    void (*abort)(struct tc_dev *dev);
};

struct tc_dev {
    const struct tc_dev_ops *ops;
    struct tc_reactor *reactor;
    char *name;                     /* path or URI, for messages */
    uint64_t size;                  /* bytes */
    unsigned logical_block;         /* alignment the device needs */
    bool is_block_device;
    bool read_only;
    bool direct_io;                 /* O_DIRECT in effect */
    bool can_trim, can_zero, can_fua, can_flush, can_multi_conn;
    /* A write-zeroes with TC_DEV_FAST_ZERO may be done: false when the
     * device is known to refuse it (an NBD server that does not offer fast
     * zeroes, a file system that cannot zero ranges), so a caller that
     * changes other state first (the cache's copies of the range) can
     * refuse the request before anything changes; see
     * dev_fast_zero_refused(). */
    bool can_fast_zero;
    /* Knows which ranges are holes or zeroes (TC_DEV_BLOCK_STATUS); without
     * it every range is data. */
    bool can_block_status;
    bool rotational;
    uint64_t max_io;                /* largest request passed whole (larger ones are cut
                                       into pieces of this size); 0: no limit */
    /* What the device is, independent of the name it was opened by, as
     * the origin's identity in a cache's superblock records it:
     *   file:MAJ:MIN:INO:bSEC.NSEC
     *                             a file: its file system, inode and
     *                             birth time (the inode number of a file
     *                             deleted and made again is often the
     *                             same; ":b..." is left out where the file
     *                             system keeps no birth time)
     *   loop:MAJ:MIN:INO:OFFSET:bSEC.NSEC
     *                             a loop device: its backing file's file
     *                             system, inode, offset and birth time,
     *                             so the loop may come back under another
     *                             number
     *   block:WWID:START          a disk with a WWID or serial (START
     *                             0), or a partition without a PARTUUID
     *                             of one (its disk's WWID, START its
     *                             first sector)
     *   partuuid:UUID             a partition with a PARTUUID
     *   dm:UUID, dm-name:NAME     a device-mapper device (by its name
     *                             when it has no UUID)
     *   md:UUID                   an md array
     *   block:MAJ:MIN             any other: its device number
     *   nbd[;n=CRC][;d=CRC]:URI   an NBD export: its URI, and the
 *                             CRC-32C of its canonical name (when not
 *                             the one asked for) and of its description,
 *                             when the server gives them (dev_nbd.c)
     * (io/blockid.c for block devices.) */
    char identity[128];
    /* The identity an older build recorded for this device, when it
     * differs ("block:MAJ:MIN" of a loop device, a partition, a dm device
     * or an md array), or "": a superblock that
     * holds it is this device's too (see dev_identity_matches(), which
     * also takes a file or loop identity recorded without the birth time
     * for this one). */
    char legacy_identity[128];
    /* The name the origin's records and lock go under, when it is not the
     * identity (dev_record_key()): an NBD export's, from where its
     * connection went (dev_nbd.c), or "". */
    char record_key[128];
    struct tc_dev_stats stats;
    struct tc_dev_cost cost;        /* what its reads cost (see struct tc_dev_cost) */
    /* Errors since the last success (for messages). */
    unsigned consecutive_errors;
    /* Error episodes since the last success: an error counts only if its
     * request was submitted after the last counted error was seen
     * (episode_mark: the requests submitted by then).  Requests in flight
     * together that fail together -- a batch, a moment's hiccup -- count
     * once; a device that fails again what is asked of it after an error
     * counts again each time.  The owner fails a device on this count
     * (engine/failure.c). */
    unsigned error_episodes;
    uint64_t submitted;             /* requests ever submitted */
    uint64_t episode_mark;
    enum tc_dev_state state;
    unsigned connections;           /* remote: connections ready now */
    uint64_t hold_timeout_ns;       /* remote: see enum tc_dev_state (set by the owner) */
    uint64_t offline_since_ns;      /* remote: when the current outage began (0: none) */
    uint64_t offline_total_ns;      /* remote: outages that ended, summed */
    /* Changes whenever a connection is lost.  A write the server
     * acknowledged in an older epoch may not have reached stable storage
     * there (the server may have died before it flushed): whoever needs it
     * durable (writeback) compares the epoch before and after its flush. */
    uint64_t epoch;
    /* Set by the owner when what is written here can no longer be made
     * durable under the device's name (a file origin removed or replaced
     * while served, engine/volume.c): every write, trim, write-zeroes and
     * flush fails with EIO from then on, without reaching the device;
     * reads go on. */
    bool refuse_writes;
    /* Called at the first write, trim or write-zeroes submitted, and
     * again at the next one for as long as it fails (set by the owner,
     * engine/volume.c: the origin's writer record, which must be durable
     * before the origin changes).  While it fails (-errno), those requests
     * fail with EIO without reaching the device. */
    int (*first_write)(struct tc_dev *d, void *ctx);
    void *first_write_ctx;
    bool write_seen;
    /* The owner's paths' check (engine/volume.c): when a block device's
     * path was first seen naming nothing, or 0 (it names the device). */
    uint64_t path_gone_ns;
    /* Completions never run inside dev_submit(): a request that finishes
     * at once (an error found before any I/O, a fault layer) is queued
     * here and completed from the reactor, so the caller's state is never
     * changed under it by its own submission. */
    unsigned submitting;
    struct tc_dev_io *deferred_head, **deferred_tail;
    struct tc_task deferred_task;
};

/* Open a file, block device or NBD URI.  On error returns NULL and writes a
 * message naming the path and the reason into err.  A local device is
 * claimed while open (io/claim.c): exclusively for a writer, shared for a
 * reader (read_only); the _as forms name its role ("origin", "cache
 * device") in messages, the others say "device". */
struct tc_dev *dev_open_as(struct tc_reactor *r, const char *path, const char *role,
                           bool read_only, char *err, size_t errlen);
struct tc_dev *dev_open_local_as(struct tc_reactor *r, const char *path, const char *role,
                                 bool read_only, char *err, size_t errlen);
struct tc_dev *dev_file_open_as(struct tc_reactor *r, const char *path, const char *role,
                                bool read_only, char *err, size_t errlen);
/* A regular file's modification time in nanoseconds (the origin's, kept
 * by a clean stop: engine/cache.c), into *ns; false for any other device
 * or when fstat() fails. */
bool dev_file_mtime(const struct tc_dev *d, uint64_t *ns);
/* A regular file's name gone while it is open: its path names nothing
 * (removed, ENOENT or ENOTDIR) or another file (a copy or a backup
 * renamed over it: another st_dev/st_ino), or the open file has no name
 * left (st_nlink 0).  Its data under that name is no longer what the
 * descriptor reads and writes, and without another name it goes when the
 * last descriptor closes.  why says what its path names now.  False for
 * any other device (a block device or an NBD export: not looked at), when
 * fstat() fails, or when the path cannot be looked up for another reason
 * (EACCES, EIO: nothing is known).  One fstat() and one stat(): cheap
 * enough for once a second and each FLUSH (engine/volume.c). */
bool dev_file_unlinked(const struct tc_dev *d, char *why, size_t len);
/* Whether a regular file's size is now below the size it had when opened
 * (d->size): truncated while open (a `truncate -s`).  What it held past
 * its new end is gone; why says how much.  A file truncated and grown
 * back between two looks (a copy written over it in place) is not seen.
 * False for any other device, or when fstat() fails.  One fstat(). */
bool dev_file_shrunk(const struct tc_dev *d, char *why, size_t len);
/* What a local block device's path names now, against the device open
 * (stat() of the path, following symlinks such as /dev/disk/by-id/...,
 * against fstat() of the descriptor: st_rdev):
 *   DEV_PATH_SAME   the same device number -- also when the node or the
 *                   symlink was made again (udev), another inode of it;
 *   DEV_PATH_OTHER  another device number, or no block device: the path
 *                   was pointed at another device (why says which);
 *   DEV_PATH_GONE   nothing (ENOENT, ENOTDIR): removed, or a node being
 *                   made again (why says so; the caller confirms it at a
 *                   later look, engine/volume.c).
 * DEV_PATH_SAME for any other device (files: dev_file_unlinked()), when
 * fstat() fails, or when the path cannot be looked up for another reason
 * (EACCES, EIO: nothing is known).  One fstat() and one stat(). */
enum dev_path { DEV_PATH_SAME, DEV_PATH_OTHER, DEV_PATH_GONE };
enum dev_path dev_block_path(const struct tc_dev *d, char *why, size_t len);
/* A local block device's number, into *maj and *min; false for any other
 * device (io/writecount.c reads its counts by it). */
bool dev_block_number(const struct tc_dev *d, unsigned *maj, unsigned *min);

/* The bytes a device's data are, in the file or disk underneath it: a
 * regular file is its own bytes from 0; a loop device is its backing
 * file's from the loop's offset, a partition its disk's from its start
 * (and a partition of a loop device its file's); any other device is
 * itself from 0.  base names what the bytes are of -- the file's identity
 * ("file:MAJ:MIN:INO[:bSEC.NSEC]") or the disk's -- and two devices whose
 * bases are equal and whose ranges overlap hold the same data there,
 * whatever their own identities (io/originrec.c). */
struct dev_extent {
    char base[128];
    uint64_t start, len;            /* bytes into base */
};
void dev_data_extent(const struct tc_dev *d, struct dev_extent *x);
struct tc_dev *dev_test_open_as(struct tc_reactor *r, const char *spec, const char *role,
                                bool read_only, char *err, size_t errlen);
struct tc_dev *dev_open(struct tc_reactor *r, const char *path, bool read_only, char *err,
                        size_t errlen);
struct tc_dev *dev_file_open(struct tc_reactor *r, const char *path, bool read_only,
                             char *err, size_t errlen);
struct tc_dev *dev_nbd_open(struct tc_reactor *r, const char *uri, bool read_only, char *err,
                            size_t errlen);
/* "testdev:PATH?undo=FILE&eio_when=FILE&eio_after=N": fault injection
 * for tests (dev_test.c). */
struct tc_dev *dev_test_open(struct tc_reactor *r, const char *spec, bool read_only, char *err,
                             size_t errlen);
/* "mem:NAME": a device in the process's memory (dev_mem.c), for replay.
 * It is created with a size (a multiple of 4096) before it is opened,
 * keeps its contents across opens, and is freed by dev_mem_destroy() at
 * its last close.  Stores only pages that are not all zero.  A dataless
 * one keeps no data at all: every read and write is payload
 * (TC_DEV_PAYLOAD), as replay's origin, whose data are never looked at. */
bool dev_is_mem(const char *path);
int dev_mem_create(const char *name, uint64_t size, bool dataless, char *err, size_t errlen);
void dev_mem_destroy(const char *name);
struct tc_dev *dev_mem_open_as(struct tc_reactor *r, const char *spec, const char *role,
                               bool read_only, char *err, size_t errlen);
/* Bytes a memory device holds (pages that are not all zero). */
uint64_t dev_mem_stored_bytes(const struct tc_dev *dev);
/* A local device: a file or block device, a testdev: wrapper of one, or a
 * memory device. */
struct tc_dev *dev_open_local(struct tc_reactor *r, const char *path, bool read_only,
                              char *err, size_t errlen);
bool dev_is_nbd_uri(const char *path);

/* Does an identity recorded earlier (a superblock's origin_id) name this
 * device?  DEV_ID_SAME, DEV_ID_LEGACY (it is the form an older build
 * recorded for it: the same device, and the record should be rewritten
 * with d->identity), or DEV_ID_OTHER. */
enum dev_id_match { DEV_ID_OTHER, DEV_ID_SAME, DEV_ID_LEGACY };
enum dev_id_match dev_identity_matches(const struct tc_dev *d, const char *recorded,
                                       size_t recorded_len);

void dev_complete(struct tc_dev_io *dio, int err);

/* A write-zeroes with TC_DEV_FAST_ZERO (and TC_DEV_NO_HOLE when no_hole)
 * that dev would refuse with -ENOTSUP, known before it is sent: a device
 * without fast zeroes, or a block device asked to keep the range
 * allocated (the kernel may zero it by writing zeroes: not fast). */
static inline bool dev_fast_zero_refused(const struct tc_dev *dev, bool no_hole)
{
    return !dev->can_fast_zero || (dev->is_block_device && no_hole);
}

/* The name an origin's records (io/originrec.c) and lock (io/claim.c)
 * go under: the same for every spelling of the same origin. */
static inline const char *dev_record_key(const struct tc_dev *d)
{
    return d->record_key[0] ? d->record_key : d->identity;
}

static inline void dev_submit(struct tc_dev *dev, struct tc_dev_io *dio)
{
    TC_ASSERT_ALWAYS((unsigned)dio->op <= TC_DEV_BLOCK_STATUS);
    TC_ASSERT_ALWAYS((dio->op != TC_DEV_READ && dio->op != TC_DEV_WRITE) ||
                     (((dio->off | dio->len | (uintptr_t)dio->buf) & (TC_SECTOR - 1)) == 0));
    TC_ASSERT((dio->op != TC_DEV_TRIM && dio->op != TC_DEV_ZERO) || !dev->direct_io ||
              dev->logical_block == 0 || ((dio->off | dio->len) % dev->logical_block) == 0);
    dio->dev = dev;
    dio->done_bytes = 0;
    dio->seq = ++dev->submitted;
    if (dio->op == TC_DEV_READ || (dio->op == TC_DEV_WRITE && !(dio->flags & TC_DEV_FUA))) {
        dio->start_ns = tc_now_ns();
        dio->alone = dev->stats.inflight == 0;
    } else {
        dio->alone = false;
    }
    bool refuse = dev->refuse_writes && dio->op != TC_DEV_READ && dio->op != TC_DEV_BLOCK_STATUS;
    if (!dev->write_seen &&
        (dio->op == TC_DEV_WRITE || dio->op == TC_DEV_TRIM || dio->op == TC_DEV_ZERO)) {
        if (dev->first_write == NULL || dev->first_write(dev, dev->first_write_ctx) == 0)
            dev->write_seen = true;
        else
            refuse = true;
    }
    dev->stats.inflight++;
    dev->submitting++;
    if (refuse)
        dev_complete(dio, -EIO);
    else
        dev->ops->submit(dev, dio);
    dev->submitting--;
}

void dev_close(struct tc_dev *dev);
void dev_quiesce(struct tc_dev *dev);
/* ops->abort, if the device has one; false if not. */
bool dev_abort(struct tc_dev *dev);
/* Seconds the device has been unable to take requests, in total and in the
 * current outage. */
double dev_offline_seconds(const struct tc_dev *dev, bool current_only);

/* Called by implementations when a request finishes: counts, logs errors
 * with device and offset, and calls the request's callback. */
void dev_complete(struct tc_dev_io *dio, int err);

const char *dev_op_name(enum tc_dev_op op);

/* The device's cost of a read (op DEV_COST_READ) or a write
 * (DEV_COST_WRITE) (struct tc_dev_cost): false while a class has fewer
 * than DEV_COST_MIN samples (then *request_ns and *byte_ns are 0). */
bool dev_cost_estimate(const struct tc_dev *dev, unsigned op, double *request_ns, double *byte_ns);
/* One class's means (k 0: small, 1: large; struct tc_dev_cost): false
 * while it has fewer than DEV_COST_MIN samples (then both are 0). */
bool dev_cost_class(const struct tc_dev *dev, unsigned op, unsigned k, double *ns, double *len);

/* One I/O, waited for by running the reactor: for start-up, format and
 * check, never for the data path (the sanitizer build asserts that it is
 * not called from within a device completion; dev.c).  Returns 0 or
 * -errno. */
int dev_sync_io(struct tc_dev *dev, enum tc_dev_op op, void *buf, uint64_t off, uint64_t len,
                unsigned flags);

#endif
