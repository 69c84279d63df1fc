/*
 * Files and block devices through io_uring.
 *
 * Opened with O_DIRECT so the page cache never holds a second copy of the
 * data (the cache is that copy).  Reads and writes continue after short transfers;
 * trim and write-zeroes map to fallocate(), which io_uring runs without
 * blocking the reactor; write-zeroes falls back to writing zero buffers
 * when the file system cannot zero a range (unless FAST_ZERO was asked).
 *
 * A read or write larger than a block device takes in one request is cut
 * into pieces it does take whole, issued together.  The kernel would split
 * it anyway, but a split bio is charged more than its size by the blkio
 * throttle (a 1 MiB read into scattered pages, split in two 512 KiB
 * requests, counted twice: half the rate a cgroup limit allows).  Cut
 * here, each piece is charged once.  A request still counts as one in the
 * device's figures (reads, writes, average sizes).
 */
#include "io/dev.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <linux/loop.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "io/blockid.h"
#include "io/bufpool.h"
#include "io/claim.h"
#include "tiercache.h"
#include "util/log.h"
#include "util/misc.h"
#include "util/memcheck.h"

#define ZERO_CHUNK (1u << 20)

struct dev_file {
    struct tc_dev dev;
    int fd;
    struct claim_fds claims;    /* held with fd for its claim (claim.c) */
    bool zero_by_fallocate;     /* false once the file system refused it */
    uint64_t max_io;            /* largest read or write issued whole; 0: any */
};

/* One piece of a read or write cut at max_io: its own SQE; the request
 * completes when the last piece has, with the first error any piece met. */
struct file_piece {
    struct tc_io io;
    struct file_split *sp;
    uint64_t off, len, done;
};

struct file_split {
    struct tc_dev_io *dio;
    unsigned pending;
    int err;
    struct file_piece piece[];
};

static void *zero_buffer(void)
{
    static void *zeroes;
    if (zeroes == NULL) {
        zeroes = tc_alloc_aligned(ZERO_CHUNK);
        memset(zeroes, 0, ZERO_CHUNK);
    }
    return zeroes;
}

static void file_issue(struct dev_file *f, struct tc_dev_io *dio);
static void piece_issue(struct dev_file *f, struct file_piece *p);

/* A read into a registered pool buffer (io/bufpool.h) is a READ_FIXED: the
 * kernel skips pinning its pages for each request. */
static void file_prep_read(struct tc_reactor *r, struct io_uring_sqe *sqe, int fd, char *buf,
                           unsigned n, uint64_t off)
{
    int idx = bufpool_fixed(&r->ring, buf, n);
    if (idx >= 0)
        io_uring_prep_read_fixed(sqe, fd, buf, n, off, idx);
    else
        io_uring_prep_read(sqe, fd, buf, n, off);
}

static void piece_done(struct tc_io *io, int res)
{
    struct file_piece *p = container_of(io, struct file_piece, io);
    struct file_split *sp = p->sp;
    struct tc_dev_io *dio = sp->dio;
    struct dev_file *f = container_of(dio->dev, struct dev_file, dev);

    if (res == -EINTR || res == -EAGAIN) {
        piece_issue(f, p);
        return;
    }
    if (res > 0) {
        if (dio->op == TC_DEV_READ)
            tc_kernel_filled((char *)dio->buf + (p->off - dio->off) + p->done, res);
        p->done += (uint64_t)res;
        if (p->done < p->len) {
            piece_issue(f, p);
            return;
        }
    } else if (sp->err == 0) {
        /* 0: nothing transferred and no error: the device ended early. */
        sp->err = res < 0 ? res : -EIO;
    }
    if (--sp->pending > 0)
        return;
    int err = sp->err;
    if (err == 0)
        dio->done_bytes = dio->len;
    free(sp);
    dev_complete(dio, err);
}

static void piece_issue(struct dev_file *f, struct file_piece *p)
{
    struct tc_dev_io *dio = p->sp->dio;
    p->io.done = piece_done;
    struct io_uring_sqe *sqe = reactor_sqe(f->dev.reactor, &p->io);
    char *buf = (char *)dio->buf + (p->off - dio->off) + p->done;
    unsigned n = (unsigned)(p->len - p->done);
    if (dio->op == TC_DEV_READ) {
        file_prep_read(f->dev.reactor, sqe, f->fd, buf, n, p->off + p->done);
    } else {
        io_uring_prep_write(sqe, f->fd, buf, n, p->off + p->done);
        if (dio->flags & TC_DEV_FUA)
            sqe->rw_flags = RWF_DSYNC;
    }
}

/* A read or write larger than max_io: its pieces, all issued at once. */
static void split_issue(struct dev_file *f, struct tc_dev_io *dio)
{
    unsigned n = (unsigned)((dio->len + f->max_io - 1) / f->max_io);
    struct file_split *sp = tc_xcalloc(1, sizeof *sp + (size_t)n * sizeof sp->piece[0]);
    sp->dio = dio;
    sp->pending = n;
    for (unsigned i = 0; i < n; i++) {
        struct file_piece *p = &sp->piece[i];
        p->sp = sp;
        p->off = dio->off + (uint64_t)i * f->max_io;
        p->len = TC_MIN(f->max_io, dio->len - (uint64_t)i * f->max_io);
    }
    for (unsigned i = 0; i < n; i++)
        piece_issue(f, &sp->piece[i]);
}

static void file_done(struct tc_io *io, int res)
{
    struct tc_dev_io *dio = container_of(io, struct tc_dev_io, io);
    struct dev_file *f = container_of(dio->dev, struct dev_file, dev);

    if (res == -EINTR || res == -EAGAIN) {
        file_issue(f, dio);
        return;
    }
    switch (dio->op) {
    case TC_DEV_READ:
    case TC_DEV_WRITE:
        if (res < 0) {
            dev_complete(dio, res);
            return;
        }
        if (res == 0) {
            /* Nothing transferred and no error: the device ended early. */
            dev_complete(dio, -EIO);
            return;
        }
        if (dio->op == TC_DEV_READ)
            tc_kernel_filled((char *)dio->buf + dio->done_bytes, res);
        dio->done_bytes += (uint64_t)res;
        if (dio->done_bytes < dio->len) {
            file_issue(f, dio);
            return;
        }
        dev_complete(dio, 0);
        return;
    case TC_DEV_ZERO:
        if (dio->done_bytes == 0 && (res == -EOPNOTSUPP || res == -ENOTSUP || res == -EINVAL) &&
            f->zero_by_fallocate && !f->dev.is_block_device) {
            /* The file system cannot zero ranges: write zeroes instead. */
            f->zero_by_fallocate = false;
            f->dev.can_fast_zero = false;
            if (dio->flags & TC_DEV_FAST_ZERO) {
                dev_complete(dio, -ENOTSUP);
                return;
            }
            file_issue(f, dio);
            return;
        }
        if (res < 0) {
            dev_complete(dio, res);
            return;
        }
        if (!f->zero_by_fallocate) {
            dio->done_bytes += (uint64_t)res;
            if (dio->done_bytes < dio->len) {
                file_issue(f, dio);
                return;
            }
        }
        dev_complete(dio, 0);
        return;
    case TC_DEV_TRIM:
        if (res == -EOPNOTSUPP || res == -ENOTSUP || res == -EINVAL) {
            /* Trim is advisory: a device that cannot do it still succeeds. */
            f->dev.can_trim = false;
            res = 0;
        }
        dev_complete(dio, res < 0 ? res : 0);
        return;
    case TC_DEV_FLUSH:
    case TC_DEV_BLOCK_STATUS:   /* never through the ring (file_submit) */
        dev_complete(dio, res < 0 ? res : 0);
        return;
    }
}

static void file_issue(struct dev_file *f, struct tc_dev_io *dio)
{
    struct tc_reactor *r = f->dev.reactor;
    dio->io.done = file_done;
    struct io_uring_sqe *sqe = reactor_sqe(r, &dio->io);
    uint64_t rest = dio->len - dio->done_bytes;
    switch (dio->op) {
    case TC_DEV_READ:
        file_prep_read(r, sqe, f->fd, (char *)dio->buf + dio->done_bytes,
                       (unsigned)TC_MIN(rest, 1u << 30), dio->off + dio->done_bytes);
        break;
    case TC_DEV_WRITE:
        io_uring_prep_write(sqe, f->fd, (char *)dio->buf + dio->done_bytes,
                            (unsigned)TC_MIN(rest, 1u << 30), dio->off + dio->done_bytes);
        if (dio->flags & TC_DEV_FUA)
            sqe->rw_flags = RWF_DSYNC;
        break;
    case TC_DEV_FLUSH:
    case TC_DEV_BLOCK_STATUS:   /* never through the ring (file_submit) */
        io_uring_prep_fsync(sqe, f->fd, IORING_FSYNC_DATASYNC);
        break;
    case TC_DEV_TRIM:
        io_uring_prep_fallocate(sqe, f->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                (off_t)dio->off, (off_t)dio->len);
        break;
    case TC_DEV_ZERO:
        if (f->zero_by_fallocate || f->dev.is_block_device) {
            int mode = (dio->flags & TC_DEV_NO_HOLE) ? FALLOC_FL_ZERO_RANGE
                                                     : FALLOC_FL_PUNCH_HOLE;
            io_uring_prep_fallocate(sqe, f->fd, mode | FALLOC_FL_KEEP_SIZE, (off_t)dio->off,
                                    (off_t)dio->len);
        } else {
            io_uring_prep_write(sqe, f->fd, zero_buffer(), (unsigned)TC_MIN(rest, ZERO_CHUNK),
                                dio->off + dio->done_bytes);
        }
        break;
    }
}

/* Add [a, b) with flags to dio's extents, merged with the last one when
 * the flags agree; false once there is no room for it. */
static bool extent_add(struct tc_dev_io *dio, uint64_t a, uint64_t b, uint32_t flags)
{
    if (b <= a)
        return true;
    struct tc_extent *x = dio->extents;
    if (dio->nr_extents > 0 && x[dio->nr_extents - 1].flags == flags) {
        x[dio->nr_extents - 1].length += b - a;
        return true;
    }
    if (dio->nr_extents == dio->max_extents)
        return false;
    x[dio->nr_extents++] = (struct tc_extent){ .length = b - a, .flags = flags };
    return true;
}

/*
 * The holes of a regular file, by SEEK_DATA and SEEK_HOLE.  io_uring has
 * no lseek, and these only read the file's extent map (in memory once the
 * inode is, which an open origin's is), so they are called here directly
 * rather than through a helper thread.  A hole reads as zeroes: HOLE|ZERO.
 * Hole edges are moved inward to the 4096-byte sectors the engine works
 * in, so a partial sector is data.
 */
static int file_block_status(struct dev_file *f, struct tc_dev_io *dio)
{
    uint64_t pos = dio->off, end = dio->off + dio->len;
    dio->nr_extents = 0;
    while (pos < end) {
        off_t data = lseek(f->fd, (off_t)pos, SEEK_DATA);
        uint64_t d;
        if (data < 0 && errno == ENXIO)
            d = end;                    /* a hole up to the end of the file */
        else if (data < 0)
            return -errno;
        else
            d = TC_MIN((uint64_t)data, end);
        uint64_t h0 = tc_round_up(pos, 4096), h1 = tc_round_down(d, 4096);
        if (h1 > h0) {
            if (!extent_add(dio, pos, h0, 0) ||
                !extent_add(dio, h0, h1, TC_EXTENT_HOLE | TC_EXTENT_ZERO) ||
                !extent_add(dio, h1, d, 0))
                break;
        } else if (!extent_add(dio, pos, d, 0)) {
            break;
        }
        pos = d;
        if (pos >= end)
            break;
        off_t hole = lseek(f->fd, (off_t)pos, SEEK_HOLE);
        if (hole < 0)
            return -errno;
        uint64_t h = TC_MIN((uint64_t)hole, end);
        if (h <= pos)
            h = TC_MIN(pos + 4096, end);    /* cannot be; never loop on it */
        if (!extent_add(dio, pos, h, 0))
            break;
        pos = h;
    }
    return dio->nr_extents ? 0 : -EIO;
}

static void file_submit(struct tc_dev *dev, struct tc_dev_io *dio)
{
    struct dev_file *f = container_of(dev, struct dev_file, dev);
    if (dio->op == TC_DEV_BLOCK_STATUS) {
        dev_complete(dio, file_block_status(f, dio));
        return;
    }
    if (dio->op == TC_DEV_ZERO && (dio->flags & TC_DEV_FAST_ZERO) &&
        dev_fast_zero_refused(&f->dev, dio->flags & TC_DEV_NO_HOLE)) {
        /* The kernel may zero a block device range by writing zeroes, and
         * a file whose file system cannot zero ranges is zeroed by
         * writing zero buffers: neither is fast. */
        dev_complete(dio, -ENOTSUP);
        return;
    }
    if ((dio->op == TC_DEV_READ || dio->op == TC_DEV_WRITE) && f->max_io && dio->len > f->max_io) {
        split_issue(f, dio);
        return;
    }
    file_issue(f, dio);
}

static void file_close(struct tc_dev *dev)
{
    struct dev_file *f = container_of(dev, struct dev_file, dev);
    close(f->fd);
    claim_fds_close(&f->claims);
    free(f->dev.name);
    free(f);
}

/* A number from the block device's queue directory in sysfs (dir is
 * "queue", or "../queue" for a partition's disk); 0 if there is none. */
static uint64_t queue_limit(dev_t rdev, const char *dir, const char *name)
{
    char path[256];
    unsigned long long v = 0;
    snprintf(path, sizeof path, "/sys/dev/block/%u:%u/%s/%s", major(rdev), minor(rdev), dir,
             name);
    FILE *fp = fopen(path, "re");
    if (fp == NULL)
        return 0;
    if (fscanf(fp, "%llu", &v) != 1)
        v = 0;
    fclose(fp);
    return v;
}

/* The largest request a block device takes whole, whatever the buffer's
 * pages: max_sectors_kb, and max_segments pages (a buffer's pages need not
 * be physically adjacent, so each may be a segment of its own).  A
 * partition has no queue directory of its own: its disk's applies.  0 when
 * unknown: requests go whole. */
static uint64_t block_max_io(dev_t rdev)
{
    const char *dir = "queue";
    uint64_t kb = queue_limit(rdev, dir, "max_sectors_kb");
    if (kb == 0) {
        dir = "../queue";
        kb = queue_limit(rdev, dir, "max_sectors_kb");
    }
    uint64_t segs = queue_limit(rdev, dir, "max_segments");
    uint64_t max = kb * 1024;
    long page = sysconf(_SC_PAGESIZE);
    if (segs && page > 0 && (max == 0 || segs * (uint64_t)page < max))
        max = segs * (uint64_t)page;
    max = tc_round_down(max, 4096);
    /* Too small to be believed (or unknown): no cutting. */
    return max < (64u << 10) ? 0 : max;
}

static const struct tc_dev_ops file_ops = { .submit = file_submit, .close = file_close };

/* A loop device is named after its backing file (the file system and
 * inode it is on, as the loop driver reports them, and the offset into
 * it), not its number: loop devices are numbered in the order they are set
 * up, so after a reboot or a re-setup the same file may be /dev/loop3
 * where it was /dev/loop0.  false if rdev is not a loop device with a
 * file behind it. */
/*
 * A file's birth time as the suffix of its identity (":bSEC.NSEC"), or ""
 * where the file system keeps none.  An inode number alone does not name a
 * file for long: a file deleted and made again often gets the old number
 * at once (ext4 hands out the freed inode), so a recreated origin -- a new
 * volume -- would pass for the one a cache was formatted for, be served
 * the old volume's cached data and receive its dirty data.  The birth time
 * (nanoseconds, set by the kernel, never by a user) tells them apart.
 * dirfd/path/flags as for statx(); the inode is checked against ino/dev
 * when dev is not 0 (a path read from sysfs may name another file by now).
 */
static void birth_suffix(int dirfd, const char *path, int flags, dev_t dev, ino_t ino,
                         char *out, size_t len)
{
    struct statx sx;
    out[0] = '\0';
    if (statx(dirfd, path, flags, STATX_INO | STATX_BTIME, &sx) < 0 ||
        !(sx.stx_mask & STATX_BTIME))
        return;
    if (dev != 0 && (sx.stx_ino != (uint64_t)ino ||
                     makedev(sx.stx_dev_major, sx.stx_dev_minor) != dev))
        return;
    snprintf(out, len, ":b%lld.%09u", (long long)sx.stx_btime.tv_sec,
             (unsigned)sx.stx_btime.tv_nsec);
}

static bool loop_identity(int fd, dev_t rdev, char *out, size_t len)
{
    char path[128];
    snprintf(path, sizeof path, "/sys/dev/block/%u:%u/loop/backing_file", major(rdev),
             minor(rdev));
    /* Zeroed first: memory checkers that do not know this ioctl would take
     * what it fills in for uninitialised. */
    struct loop_info64 info;
    memset(&info, 0, sizeof info);
    if (access(path, F_OK) != 0 || ioctl(fd, LOOP_GET_STATUS64, &info) < 0)
        return false;
    dev_t fsdev = (dev_t)info.lo_device;
    /* The backing file's birth time, when its path still names it (a loop
     * over a file deleted since gives none: such an origin is then
     * refused as another, never taken for a newer file of its number). */
    char file[512], birth[48] = "";
    FILE *fp = fopen(path, "re");
    if (fp) {
        if (fgets(file, sizeof file, fp)) {
            file[strcspn(file, "\n")] = '\0';
            birth_suffix(AT_FDCWD, file, 0, fsdev, (ino_t)info.lo_inode, birth, sizeof birth);
        }
        fclose(fp);
    }
    snprintf(out, len, "loop:%u:%u:%llu:%llu%s", major(fsdev), minor(fsdev),
             (unsigned long long)info.lo_inode, (unsigned long long)info.lo_offset, birth);
    return true;
}

bool dev_file_mtime(const struct tc_dev *d, uint64_t *ns)
{
    if (d->ops != &file_ops || d->is_block_device)
        return false;
    const struct dev_file *f = container_of(d, const struct dev_file, dev);
    struct stat st;
    if (fstat(f->fd, &st) < 0)
        return false;
    *ns = (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec;
    return true;
}

bool dev_file_unlinked(const struct tc_dev *d, char *why, size_t len)
{
    if (d->ops != &file_ops || d->is_block_device)
        return false;
    const struct dev_file *f = container_of(d, const struct dev_file, dev);
    struct stat st, now;
    if (fstat(f->fd, &st) < 0)
        return false;
    if (stat(d->name, &now) == 0) {
        if (now.st_dev == st.st_dev && now.st_ino == st.st_ino)
            return false;
        snprintf(why, len, "%s now names another file (inode %llu, not %llu): the file was "
                 "replaced", d->name, (unsigned long long)now.st_ino,
                 (unsigned long long)st.st_ino);
        return true;
    }
    int e = errno;
    if (e != ENOENT && e != ENOTDIR && st.st_nlink > 0)
        return false;           /* cannot tell: nothing is acted on */
    snprintf(why, len, "%s: %s: the file was removed", d->name, strerror(e));
    return true;
}

bool dev_file_shrunk(const struct tc_dev *d, char *why, size_t len)
{
    if (d->ops != &file_ops || d->is_block_device)
        return false;
    const struct dev_file *f = container_of(d, const struct dev_file, dev);
    struct stat st;
    if (fstat(f->fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size >= d->size)
        return false;
    snprintf(why, len, "%s was truncated to %llu bytes (it had %llu): what it held past that "
             "is gone from it", d->name, (unsigned long long)st.st_size,
             (unsigned long long)d->size);
    return true;
}

enum dev_path dev_block_path(const struct tc_dev *d, char *why, size_t len)
{
    if (d->ops != &file_ops || !d->is_block_device)
        return DEV_PATH_SAME;
    const struct dev_file *f = container_of(d, const struct dev_file, dev);
    struct stat st, now;
    if (fstat(f->fd, &st) < 0 || !S_ISBLK(st.st_mode))
        return DEV_PATH_SAME;
    if (stat(d->name, &now) == 0) {
        if (S_ISBLK(now.st_mode) && now.st_rdev == st.st_rdev)
            return DEV_PATH_SAME;
        if (S_ISBLK(now.st_mode))
            snprintf(why, len, "%s now names another block device (%u:%u, not %u:%u): the "
                     "device was replaced", d->name, major(now.st_rdev), minor(now.st_rdev),
                     major(st.st_rdev), minor(st.st_rdev));
        else
            snprintf(why, len, "%s now names no block device (not %u:%u): the device was "
                     "replaced", d->name, major(st.st_rdev), minor(st.st_rdev));
        return DEV_PATH_OTHER;
    }
    int e = errno;
    if (e != ENOENT && e != ENOTDIR)
        return DEV_PATH_SAME;   /* cannot tell: nothing is acted on */
    snprintf(why, len, "%s: %s: the device node (%u:%u) was removed", d->name, strerror(e),
             major(st.st_rdev), minor(st.st_rdev));
    return DEV_PATH_GONE;
}

bool dev_block_number(const struct tc_dev *d, unsigned *maj, unsigned *min)
{
    if (d->ops != &file_ops || !d->is_block_device)
        return false;
    const struct dev_file *f = container_of(d, const struct dev_file, dev);
    struct stat st;
    if (fstat(f->fd, &st) < 0 || !S_ISBLK(st.st_mode))
        return false;
    *maj = major(st.st_rdev);
    *min = minor(st.st_rdev);
    return true;
}

void dev_data_extent(const struct tc_dev *d, struct dev_extent *x)
{
    snprintf(x->base, sizeof x->base, "%s", d->identity);
    x->start = 0;
    x->len = d->size;
    if (d->ops != &file_ops || !d->is_block_device)
        return;
    unsigned maj, min;
    struct block_under *u = tc_xcalloc(1, sizeof *u);
    if (!dev_block_number(d, &maj, &min) || !block_under("/sys", maj, min, u))
        goto out;
    x->start = u->start;
    unsigned fmaj, fmin;
    unsigned long long ino, off;
    int end = 0;
    struct stat st;
    char birth[48];
    if (sscanf(d->identity, "loop:%u:%u:%llu:%llu%n", &fmaj, &fmin, &ino, &off, &end) == 4 &&
        end > 0) {
        /* A loop device itself: its identity names the file as the loop
         * driver reports it (its inode, not the path, which may name
         * another file by now), and the offset it was set up with. */
        snprintf(x->base, sizeof x->base, "file:%u:%u:%llu%s", fmaj, fmin, ino,
                 d->identity + end);
        x->start = off;
    } else if (u->file[0] && stat(u->file, &st) == 0 && S_ISREG(st.st_mode)) {
        /* A partition of a loop device: the file its path names now. */
        birth_suffix(AT_FDCWD, u->file, 0, st.st_dev, st.st_ino, birth, sizeof birth);
        snprintf(x->base, sizeof x->base, "file:%u:%u:%llu%s", major(st.st_dev),
                 minor(st.st_dev), (unsigned long long)st.st_ino, birth);
    } else if (u->file[0] == '\0' && (u->maj != maj || u->min != min)) {
        /* A partition of a disk: the disk's identity.  (A loop device
         * whose file is gone keeps its own identity: nothing else can be
         * told to be the same data.) */
        char legacy[128];
        block_identity("/sys", u->maj, u->min, x->base, sizeof x->base, legacy, sizeof legacy);
    } else {
        x->start = 0;
    }
out:
    free(u);
}

struct tc_dev *dev_file_open_as(struct tc_reactor *r, const char *path, const char *role,
                                bool read_only, char *err, size_t errlen)
{
    /* Checked with stat() first (a FIFO never blocks the open), opened
     * and claimed: exclusive for a writer, shared for a reader (claim.c). */
    bool direct;
    struct claim_fds claims;
    int fd = claim_open(path, role, read_only, &direct, &claims, err, errlen);
    if (fd < 0)
        return NULL;
    struct stat st;
    if (fstat(fd, &st) < 0) {
        snprintf(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        claim_fds_close(&claims);
        return NULL;
    }
    struct dev_file *f = tc_xcalloc(1, sizeof *f);
    f->fd = fd;
    f->claims = claims;
    f->zero_by_fallocate = true;
    struct tc_dev *d = &f->dev;
    d->ops = &file_ops;
    d->reactor = r;
    d->name = tc_xstrdup(path);
    d->read_only = read_only;
    d->direct_io = direct;
    d->can_flush = true;
    d->can_fua = true;
    d->can_fast_zero = true;        /* until the file system refuses it */
    d->can_multi_conn = true;
    d->logical_block = 512;
    if (S_ISBLK(st.st_mode)) {
        uint64_t size;
        int lbs = 512;
        if (ioctl(fd, BLKGETSIZE64, &size) < 0) {
            snprintf(err, errlen, "%s: cannot read the block device size: %s", path,
                     strerror(errno));
            file_close(d);
            return NULL;
        }
        if (ioctl(fd, BLKSSZGET, &lbs) == 0 && lbs > 0)
            d->logical_block = (unsigned)lbs;
        d->size = size;
        d->is_block_device = true;
        d->can_trim = true;
        d->can_zero = true;
        char rot[256];
        snprintf(rot, sizeof rot, "/sys/dev/block/%u:%u/queue/rotational", major(st.st_rdev),
                 minor(st.st_rdev));
        FILE *fp = fopen(rot, "re");
        if (fp) {
            d->rotational = fgetc(fp) == '1';
            fclose(fp);
        }
        block_identity("/sys", major(st.st_rdev), minor(st.st_rdev), d->identity,
                       sizeof d->identity, d->legacy_identity, sizeof d->legacy_identity);
        char loop[sizeof d->identity];
        if (loop_identity(fd, st.st_rdev, loop, sizeof loop)) {
            /* Recorded by its number before loop identities existed. */
            snprintf(d->legacy_identity, sizeof d->legacy_identity, "%s", d->identity);
            snprintf(d->identity, sizeof d->identity, "%s", loop);
        }
        f->max_io = block_max_io(st.st_rdev);
        d->max_io = f->max_io;
    } else if (S_ISREG(st.st_mode)) {
        d->size = (uint64_t)st.st_size;
        d->can_trim = true;
        d->can_zero = true;
        /* Block devices are left out: Linux answers SEEK_DATA/SEEK_HOLE on
         * them as one data extent (fixed_size_llseek), which tells nothing. */
        d->can_block_status = true;
        char birth[48];
        birth_suffix(fd, "", AT_EMPTY_PATH, 0, 0, birth, sizeof birth);
        snprintf(d->identity, sizeof d->identity, "file:%u:%u:%llu%s", major(st.st_dev),
                 minor(st.st_dev), (unsigned long long)st.st_ino, birth);
    } else {
        snprintf(err, errlen, "%s: not a regular file or block device", path);
        file_close(d);
        return NULL;
    }
    if (!direct)
        tc_warn("%s: the file system does not support O_DIRECT; using buffered I/O, which "
                "keeps a second copy in the page cache", path);
    return d;
}

struct tc_dev *dev_file_open(struct tc_reactor *r, const char *path, bool read_only, char *err,
                             size_t errlen)
{
    return dev_file_open_as(r, path, "device", read_only, err, errlen);
}
