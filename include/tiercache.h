/*
 * tiercache.h: the engine API.
 *
 * A volume is an origin (slow: file, block device or NBD export) with zero
 * or more cache devices (fast) in front of it.  Everything that reads or
 * writes a volume -- the NBD server (src/nbd/transmission.c), the engine
 * replay of `tiercache replay` (src/replay/engine.c), the tests -- goes
 * through tc_submit(), so there is one implementation of every decision.
 *
 * The engine is single-threaded and asynchronous: it runs on the reactor
 * (src/io/reactor.h) it was opened with, and every request completes
 * through its done() callback, called from that reactor's thread.
 */
#ifndef TIERCACHE_H
#define TIERCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct tc_reactor;
struct tc_volume;
struct tc_json;

enum tc_mode {
    TC_MODE_WRITETHROUGH,   /* writes go to the origin and update the cache */
    TC_MODE_WRITEBACK,      /* writes land in the cache log, drained later */
    TC_MODE_WRITEAROUND,    /* writes go to the origin and invalidate the cache */
    TC_MODE_PASSTHROUGH,    /* the cache is bypassed (still kept coherent) */
};

const char *tc_mode_name(enum tc_mode mode);
int tc_mode_parse(const char *name, enum tc_mode *mode);

/* What a read miss brings into the cache (serve --fill). */
enum tc_fill {
    TC_FILL_AUTO,           /* by the origin's and the cache's measured costs (readpath.c) */
    TC_FILL_BLOCK,          /* the whole cache block, read from the origin in one request */
    TC_FILL_SECTORS,        /* only the sectors the client read */
    TC_FILL_GROUP,          /* the whole block, and the rest of its group of 4 while that pays */
};

#define TC_CKPT_EVERY_AUTO UINT64_MAX

struct tc_volume_config {
    const char *origin;             /* path or NBD URI */
    const char *const *caches;      /* cache devices, NULL-terminated; NULL = none */
    enum tc_mode mode;
    const char *policy;             /* "default", "lru", "fifo", "s3fifo" */
    bool read_only;
    uint64_t sequential_cutoff;     /* bytes; 0 = never bypass streams */
    uint64_t readahead;             /* bytes ahead of cached read streams; 0 = none */
    enum tc_fill fill;              /* what a read miss fills */
    double dirty_target;            /* writeback: fraction of cache, e.g. 0.10 */
    double dirty_high;              /* writeback: drain fast above this */
    unsigned dirty_copies;          /* 1 or 2 */
    uint64_t write_budget_rate;     /* cache device write budget, bytes/s; 0 = none */
    uint64_t write_budget_burst;
    uint64_t write_budget_minburst;
    uint64_t origin_timeout_ns;     /* fail origin requests after this long offline */
    /* Running checkpoints (engine/checkpoint.c): one every this many
     * bytes written to the log; 0 = none; TC_CKPT_EVERY_AUTO = an eighth
     * of the log's capacity.  Unless checkpoint_every_set, the environment's
     * TIERCACHE_TEST_CKPT_BYTES (tests) or else the default. */
    uint64_t checkpoint_every;
    bool checkpoint_every_set;
    bool adopt_origin;              /* accept an origin whose identity changed */
    /* After a clean stop, compare this many of the cache's clean blocks
     * with the origin at the start, refusing it on a difference
     * (engine/originstop.c); 0: none. */
    unsigned origin_check_blocks;
    bool accept_older_cache;        /* serve a cache whose log is older than its
                                       sequence record (engine/seqrec.c) */
    bool no_warm_restart;           /* ignore a clean-shutdown snapshot */
    const char *state_file;         /* record of an abandoned cache; NULL: the default */
    bool adopt_state_file;          /* keep the state file and sequence record at
                                       state_file although the set last kept them
                                       elsewhere, lost (engine/seqrec.c) */
    /* Offline, for check --salvage: a state file's marks (version 4) are
     * loaded as a read-write start loads them, and the log's replay covers
     * them, so that abandon_log_marks() can write them back (salvage.c). */
    bool offline_log_marks;
    /* Replay (src/replay/engine.c): every data sector is taken to be
     * zeroes, never copied, checksummed or checked; the devices are told
     * so (TC_DEV_PAYLOAD).  Every decision is as with zeroes for data, and
     * so is every byte of metadata but the chunk headers, which are kept
     * in RAM, not written (engine/log.h, struct ram_chunk): the cache
     * device cannot be started from again.  Memory devices only. */
    bool data_free;
};

void tc_volume_config_defaults(struct tc_volume_config *cfg);

/* Opens the devices, checks superblocks and rebuilds the index.  Returns
 * NULL on error with a message naming the device and the reason in err. */
struct tc_volume *tc_volume_open(struct tc_reactor *reactor, const struct tc_volume_config *cfg,
                                 char *err, size_t errlen);

/* Writes back nothing, drains nothing: stops background work, makes
 * everything durable (flush, clean-shutdown snapshot) and calls done once
 * the volume can be freed with tc_volume_free(). */
void tc_volume_close(struct tc_volume *vol, void (*done)(void *arg, int err), void *arg);
/* A stop began (the clients' last requests are answered, then the volume
 * is closed): what would wait for room in the cache until the cleaner
 * frees some stops waiting -- a stop cannot wait for a cleaner that may
 * never free any (the rewrites after a cache device failure take the
 * cleaner's reserve, or lose their dirty sectors, recorded, without room
 * there). */
void tc_volume_stopping(struct tc_volume *vol);
void tc_volume_free(struct tc_volume *vol);

/* Size exported to clients, in bytes (a multiple of 4096). */
uint64_t tc_volume_size(const struct tc_volume *vol);
bool tc_volume_read_only(const struct tc_volume *vol);
bool tc_volume_rotational(const struct tc_volume *vol);
/* True when TRIM and WRITE_ZEROES with FAST_ZERO may succeed. */
bool tc_volume_can_fast_zero(const struct tc_volume *vol);

enum tc_op {
    TC_OP_READ,
    TC_OP_WRITE,
    TC_OP_FLUSH,            /* every write completed before it becomes durable */
    TC_OP_TRIM,
    TC_OP_WRITE_ZEROES,
    TC_OP_CACHE,            /* advisory: bring the range into the cache */
    TC_OP_BLOCK_STATUS,     /* allocation of the range, see tc_extent */
};

/* Request flags. */
#define TC_REQ_FUA       (1u << 0)  /* write / write-zeroes / trim durable on reply */
#define TC_REQ_NO_HOLE   (1u << 1)  /* write-zeroes must not deallocate */
#define TC_REQ_FAST_ZERO (1u << 2)  /* write-zeroes: fail with -ENOTSUP unless fast */
#define TC_REQ_REQ_ONE   (1u << 3)  /* block status: one extent is enough */
/* read: buf is a whole buffer of the engine's pool (io/bufpool.h,
 * bufpool_get(length)), so the engine may answer by handing over a pool
 * buffer of the same size that holds the data (read-ahead, no copy):
 * at done() req->buf may differ, and the caller frees that one. */
#define TC_REQ_POOL_BUF  (1u << 4)

/* Extent flags, as NBD's base:allocation context. */
#define TC_EXTENT_HOLE (1u << 0)
#define TC_EXTENT_ZERO (1u << 1)

struct tc_extent {
    uint64_t length;
    uint32_t flags;
};

struct tc_request {
    enum tc_op op;
    unsigned flags;
    uint64_t offset;
    uint64_t length;
    void *buf;                      /* READ: filled; WRITE: read from */
    /* BLOCK_STATUS: room for max_extents, filled with nr_extents. */
    struct tc_extent *extents;
    unsigned max_extents, nr_extents;
    /* Called once, from the reactor thread; err is 0 or -errno. */
    void (*done)(struct tc_request *req, int err);
    void *priv;                     /* the caller's */
};

/* Submit a request.  The caller has checked offset + length against the
 * volume size and the read-only flag; the engine handles any alignment. */
void tc_submit(struct tc_volume *vol, struct tc_request *req);

/* Progress of a long operation: dirty bytes left, bytes written so far. */
typedef void (*tc_progress_fn)(void *arg, uint64_t left_bytes, uint64_t done_bytes);

/* Write every dirty block back to the origin and make it durable there;
 * done(arg, 0) once none is left, -EIO if the origin refuses some. */
void tc_volume_flush_dirty(struct tc_volume *vol, tc_progress_fn progress,
                           void (*done)(void *arg, int err), void *arg);
/* The same, for the stop itself (--flush-on-stop): once tc_volume_stopping()
 * was called, tc_volume_flush_dirty(), tc_volume_detach() and
 * tc_volume_set_mode() are refused ("the daemon is stopping"). */
void tc_volume_flush_dirty_at_stop(struct tc_volume *vol, tc_progress_fn progress,
                                   void (*done)(void *arg, int err), void *arg);

/* Flush, then stop using the cache: it is emptied (durably) and every
 * request goes straight to the origin from then on.  tc_volume_attach(),
 * or restarting with the same --cache, attaches it again, empty. */
void tc_volume_detach(struct tc_volume *vol, tc_progress_fn progress,
                      void (*done)(void *arg, int err), void *arg);

/* Use the cache set a detach left unused again, without a restart: it
 * comes back empty (the detach emptied it; what it held before is older
 * than the origin now), with its lost sectors still unreadable, in the
 * mode it had before the detach (or *mode).  paths (NULL or empty: the
 * devices detached) must name that set, of this origin: anything else is
 * refused before anything changes, with the reason in
 * tc_volume_op_error().  done(arg, 0) once attached; -EALREADY while
 * attached, -ENODEV without a cache, -EBUSY during another operation. */
void tc_volume_attach(struct tc_volume *vol, const char *const *paths, const enum tc_mode *mode,
                      void (*done)(void *arg, int err), void *arg);

/* Change the mode online.  New requests follow the new mode at once;
 * leaving writeback (or any mode with dirty data left, for another mode
 * than writeback), dirty data is then written back, and done is called
 * when none is left.  Mode changes and detaches complete or change
 * nothing: if the dirty data cannot all be written back, the volume goes
 * back to its previous mode (and stays attached) and done gets -EIO. */
void tc_volume_set_mode(struct tc_volume *vol, enum tc_mode mode, tc_progress_fn progress,
                        void (*done)(void *arg, int err), void *arg);
enum tc_mode tc_volume_mode(const struct tc_volume *vol);
/* After a flush, mode change or detach failed: why, in one sentence naming
 * the dirty data left ("" when the last one did not fail). */
const char *tc_volume_op_error(const struct tc_volume *vol);
/* Dirty data in the cache now, with the data written back whose clean
 * records the log does not hold yet (the next start writes it back
 * again). */
uint64_t tc_volume_dirty_bytes(const struct tc_volume *vol);
/* Acknowledged data lost with the cache (unreadable until written again):
 * the origin lacks its newest version, and no flush can bring it back.
 * Not the dirty data of a failed device still being drained (status's
 * lost_bytes counts it until it is written back): a flush that ends
 * meanwhile has lost none of it. */
uint64_t tc_volume_lost_bytes(const struct tc_volume *vol);
/* The cache's block size and the bytes its segments hold (0 and 0 without
 * cache devices). */
void tc_volume_cache_geometry(const struct tc_volume *vol, uint64_t *block_bytes,
                              uint64_t *capacity);

/* Dirty data in the cache now (0 without a cache): bytes and blocks, as
 * tc_volume_dirty_bytes(). */
void tc_volume_dirty(const struct tc_volume *vol, uint64_t *bytes, uint64_t *blocks);
/* The part of tc_volume_dirty() already on the origin: written back, its
 * clean records still waiting for room in the log.  It is dirty only in
 * the log's eyes, so it is never lost with a failed or removed cache
 * device. */
void tc_volume_dirty_owed(const struct tc_volume *vol, uint64_t *bytes, uint64_t *blocks);

/* Whether dirty data is still on a failed cache device, being written back
 * to the origin from it (the last device in service failed: the drain).
 * Its log is never trusted again, so what a stop leaves there is lost. */
bool tc_volume_draining(const struct tc_volume *vol);

/* Whether a cache device that is a file (or a block device path, found
 * while serving: engine/volume.c) lost its name while served
 * (removed, or another file -- a copy, a backup -- renamed over it): its
 * log ends with the daemon's descriptor, dirty data included (unless it
 * was found so while serving: the device was failed then, its dirty data
 * drained or rescued; this still says so).  why names the device and what
 * its path names now.  False without a cache or after a detach. */
bool tc_volume_cache_unlinked(const struct tc_volume *vol, char *why, size_t len);
/* Whether a file origin, or an origin given as a block device path, lost
 * its name while served (removed or replaced: io/dev.h dev_block_path();
 * found by the check made once a second and at each FLUSH): every write
 * and flush has failed with EIO since.  why names the origin and what its
 * path names now. */
bool tc_volume_origin_gone(const struct tc_volume *vol, char *why, size_t len);

/* Change a setting while serving: key is a serve option without "--"
 * (dirty-target, dirty-high, sequential-cutoff, readahead, write-budget,
 * origin-timeout), value as that option takes it.  0, or -1 with a message
 * naming the bad key or value and the valid range in err.  With apply
 * false it only checks, except that the dirty marks (pure numbers) are
 * stored so a later key is checked against them: a caller checking
 * several keys first saves cfg.dirty_target and dirty_high and puts them
 * back if one fails (tc_volume_set_many() does all that). */
int tc_volume_set(struct tc_volume *vol, const char *key, const char *value, bool apply,
                  char *err, size_t errlen);
/* The keys tc_volume_set() takes, as "policy, dirty-target, ...", and
 * whether the len bytes at key are one of them. */
const char *tc_volume_setting_keys(void);
bool tc_volume_setting_known(const char *key, size_t len);
/* "KEY=VALUE KEY=VALUE...": all applied, or none (-1, message in err). */
int tc_volume_set_many(struct tc_volume *vol, const char *pairs, char *err, size_t errlen);
/* The settings now, as the JSON object "settings". */
void tc_volume_settings_json(const struct tc_volume *vol, struct tc_json *j);

/* Every figure the volume keeps, as JSON members of the current object
 * (documented in tiercache(8), section STATUS). */
void tc_volume_status_json(struct tc_volume *vol, struct tc_json *j);

#ifdef __cplusplus
}
#endif

#endif
