/*
 * Claims: nothing else may touch a cache set or an origin in use.
 * The scheme is described at the top of claim.c.
 */
#ifndef TC_IO_CLAIM_H
#define TC_IO_CLAIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* What a local path names, found with stat() alone (never open()). */
struct claim_id {
    bool is_block;
    dev_t dev;                  /* the inode: of the file, or of the device node */
    ino_t ino;
    dev_t rdev;                 /* a block device: its number... */
    dev_t whole;                /* ...and its whole disk's (rdev itself for a disk) */
    bool has_backing;           /* a loop device over a file: that file */
    dev_t bdev;
    ino_t bino;
    char backing[512];
};

/* The path inside a local device name ("testdev:PATH?opts" -> PATH) into
 * out; false for an NBD URI or a memory device (nothing to claim). */
bool claim_local_path(const char *name, char *out, size_t len);

/* stat() a local path: 0 if it is a regular file or a block device (id
 * filled), else -1 with a message naming the path, its role ("origin",
 * "cache device") and what it is (a FIFO, a socket, a directory...). */
int claim_stat(const char *path, const char *role, struct claim_id *id, char *err,
               size_t errlen);

/* Whether two paths reach the same data: the same inode, the same block
 * device, a partition and its disk, a loop device and its backing file, or
 * two loop devices over one file. */
bool claim_same(const struct claim_id *a, const struct claim_id *b);

/* Before any device is opened: the origin (NBD URIs skipped) and every
 * cache device are of a supported type, and none names the same data as
 * another.  caches may be NULL. */
int claim_check_paths(const char *origin, const char *const *caches, char *err, size_t errlen);

/* A file the daemon writes besides its devices (--log, --pidfile,
 * --trace), checked before it is opened: 0 when path does not exist, or
 * names neither the origin nor a cache device (caches may be NULL) and is
 * a file no claim holds (another daemon's origin or cache device, an image
 * qemu has open); else -1 with a message naming the option (what), the
 * path, what it is, and what the daemon would do to it (does: "append its
 * log to it"). */
int claim_check_output(const char *path, const char *what, const char *does,
                       const char *origin, const char *const *caches, char *err, size_t errlen);

/* Descriptors a claim holds besides the device's own: a loop device's
 * backing file, the loop devices over a file. */
#define CLAIM_MAX_FDS 5
struct claim_fds {
    int fd[CLAIM_MAX_FDS];
    unsigned n;
};
void claim_fds_close(struct claim_fds *more);

/* A local device opened and claimed: exclusive for a writer (read_only
 * false), shared for a reader.  Returns the descriptor (O_DIRECT where the
 * file system has it: *direct), or -1 with a message naming the role, the
 * path and the holder.  The claim lives as long as the descriptor and
 * those in *more, which the caller closes together. */
int claim_open(const char *path, const char *role, bool read_only, bool *direct,
               struct claim_fds *more, char *err, size_t errlen);

/* The cache set's identity, locked in the run directory (set by the
 * command line with claim_set_dir(); without one, no set lock is taken).
 * exclusive for serve and format, shared for check and dump.  NULL on
 * conflict or error, with a message. */
struct claim_set;
void claim_set_dir(const char *dir);
bool claim_set_enabled(void);
struct claim_set *claim_set_lock(const uint8_t uuid[16], bool exclusive, const char *devname,
                                 char *err, size_t errlen);
void claim_set_release(struct claim_set *s);
/* The set locked exclusively until the matching claim_set_release(), and
 * every claim_set_lock() of it in this process meanwhile given this lock
 * (each released in turn): format --force holds the old sets from its look
 * at their logs through its writes, so that no daemon starts serving one
 * in between. */
struct claim_set *claim_set_hold(const uint8_t uuid[16], const char *devname, char *err,
                                 size_t errlen);
/* A serving daemon's state file (abandon.c), locked in the same directory
 * under a name made from its resolved path: two sets given one state file
 * would each replace the other's record of lost sectors.  NULL on conflict
 * or error, with a message; released with claim_set_release(). */
struct claim_set *claim_state_lock(const char *state_path, char *err, size_t errlen);

/* An origin's lock among the daemons that may write it, in the same
 * directory under a name made from its record key (dev_record_key()):
 * exclusive for a serve with a cache (its clean copies must not grow
 * older under it) and for check --salvage (its writes of older dirty
 * data must not race another's), shared for a serve without a cache that
 * may write.  Local origins are claimed
 * anyway (claim_open()); this is what keeps an NBD export's.  NULL on
 * conflict or error, with a message naming origin and the holder;
 * released with claim_set_release(). */
struct claim_set *claim_origin_lock(const char *identity, const char *origin, bool exclusive,
                                    char *err, size_t errlen);

/* An origin that is a cache device: -1 with a message if a local origin
 * holds a tiercache superblock.  With cache devices (swapped: true) that
 * means --cache and --origin were swapped; without, a cache device served
 * as a plain disk, whose clients would overwrite its log and dirty data.
 * Read with a descriptor of its own (the origin's figures stay the
 * clients'); a read error is only warned about. */
int claim_origin_not_cache(const char *origin, bool swapped, char *err, size_t errlen);

/* The set UUID the superblock of a local cache device names, read with a
 * descriptor of its own; false when none decodes or it cannot be read. */
bool claim_device_set(const char *path, uint8_t uuid[16]);

#endif
