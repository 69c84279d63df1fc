/*
 * Claims: nothing else may touch a cache set or an origin in use.
 *
 * Two writers on one cache log destroy it without a word (each rebuilds
 * its index from the log at start and then appends over the other's
 * segments); a format or a file system made over a cache in use throws
 * away dirty data that clients were told is safe; a check of a set being
 * written reads a moving log.  So every device is claimed before it is
 * read, for as long as it is open:
 *
 *  - A block device is opened with O_EXCL: the kernel's own claim.  While
 *    it is held, mount, mkfs, device mapper, bcache, another tiercache and
 *    any other O_EXCL open get EBUSY.  The kernel has no shared form, so
 *    readers (check, dump, the origin of format) take it too.
 *  - A regular file gets an open file description lock (F_OFD_SETLK) over
 *    the whole file: a write lock for a writer (serve), a read lock for a
 *    reader (check, dump, the origin of format and check, a --read-only
 *    origin).  Such a lock belongs to the open file, not to the process:
 *    it survives the fork of a daemon going to the background, two opens
 *    in one process conflict, and it goes when the last descriptor closes,
 *    also when the process dies.  It is advisory: it stops tiercache and
 *    programs that lock (qemu cannot open a file in use, unless with its
 *    locking=off file option), not plain readers.
 *  - A hard link or a bind mount reaches the same inode: the same lock.
 *    A loop device over a file does not: its backing file (sysfs
 *    loop/backing_file, checked against the inode) is locked as well, so
 *    a daemon on the file and one on /dev/loopN meet; and a file's loop
 *    devices that exist when it is opened are claimed with O_EXCL, so none
 *    is mounted or served meanwhile (one made later is not known).
 *  - The cache set's identity: set-UUID.lock in the run directory, locked
 *    the same way, the exclusive holder's pid written in it.  It catches
 *    paths to one set whose relation cannot be told from here.
 *  - Before anything is opened, every path is checked with stat(), and the
 *    open uses O_NONBLOCK besides: a FIFO, socket or character device is
 *    refused at once, never blocks an open.  The same check finds the same
 *    data given twice (origin and cache, a cache twice) before a claim
 *    would report the process against itself.
 *  - A refusal names the holder.  An OFD lock's owner has no pid (F_OFD_GETLK
 *    and /proc/locks say -1), but /proc/PID/fdinfo/FD lists the locks held
 *    through each descriptor; for a block device, the processes having it
 *    open, its mount point, or the device holding it (dm, md) are named.
 *  - A claim that is busy with no holder anywhere is being released: a
 *    process that has just died can still hold files through io_uring
 *    requests the kernel finishes after its exit.  It is tried again for up
 *    to CLAIM_RELEASE_WAIT_MS before the refusal.
 */
#include "io/claim.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "format/ondisk.h"
#include "io/dev.h"
#include "util/crc32c.h"
#include "util/log.h"
#include "util/misc.h"

#define CLAIM_RELEASE_WAIT_MS 10000
#define CLAIM_RETRY_MS 50

static void sleep_ms(unsigned ms)
{
    struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

bool claim_local_path(const char *name, char *out, size_t len)
{
    if (dev_is_nbd_uri(name) || dev_is_mem(name))
        return false;
    if (strncmp(name, "testdev:", 8) == 0) {
        name += 8;
        snprintf(out, len, "%.*s", (int)strcspn(name, "?"), name);
    } else {
        snprintf(out, len, "%s", name);
    }
    return true;
}

/* ---- what a path is ---- */

static bool parse_devno(const char *s, dev_t *d)
{
    unsigned ma, mi;
    if (sscanf(s, "%u:%u", &ma, &mi) != 2)
        return false;
    *d = makedev(ma, mi);
    return true;
}

/* A block device's whole disk, and the backing file of a loop device (or
 * of the loop device a partition is on). */
static void block_details(struct claim_id *id)
{
    char path[128], line[sizeof id->backing];
    id->whole = id->rdev;
    snprintf(path, sizeof path, "/sys/dev/block/%u:%u/partition", major(id->rdev),
             minor(id->rdev));
    bool part = access(path, F_OK) == 0;
    if (part) {
        snprintf(path, sizeof path, "/sys/dev/block/%u:%u/../dev", major(id->rdev),
                 minor(id->rdev));
        if (tc_read_first_line(path, line, sizeof line))
            parse_devno(line, &id->whole);
    }
    snprintf(path, sizeof path, "/sys/dev/block/%u:%u/%sloop/backing_file", major(id->rdev),
             minor(id->rdev), part ? "../" : "");
    if (!tc_read_first_line(path, line, sizeof line) || line[0] != '/')
        return;
    struct stat st;
    if (stat(line, &st) == 0 && S_ISREG(st.st_mode)) {
        id->has_backing = true;
        id->bdev = st.st_dev;
        id->bino = st.st_ino;
        snprintf(id->backing, sizeof id->backing, "%s", line);
    }
}

static const char *type_name(mode_t m)
{
    if (S_ISFIFO(m))
        return "a FIFO (named pipe)";
    if (S_ISSOCK(m))
        return "a socket";
    if (S_ISCHR(m))
        return "a character device";
    if (S_ISDIR(m))
        return "a directory";
    return "not a regular file";
}

int claim_stat(const char *path, const char *role, struct claim_id *id, char *err,
               size_t errlen)
{
    struct stat st;
    memset(id, 0, sizeof *id);
    if (stat(path, &st) < 0) {
        snprintf(err, errlen, "%s %s: cannot open: %s", role, path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
        snprintf(err, errlen, "%s %s is %s: it must be a regular file or a block device%s",
                 role, path, type_name(st.st_mode),
                 strcmp(role, "origin") == 0 ? " (or an NBD URI)" : "");
        return -1;
    }
    id->dev = st.st_dev;
    id->ino = st.st_ino;
    if (S_ISBLK(st.st_mode)) {
        id->is_block = true;
        id->rdev = st.st_rdev;
        block_details(id);
    }
    return 0;
}

bool claim_same(const struct claim_id *a, const struct claim_id *b)
{
    if (a->is_block && b->is_block) {
        if (a->rdev == b->rdev || a->whole == b->rdev || b->whole == a->rdev)
            return true;
        return a->has_backing && b->has_backing && a->bdev == b->bdev && a->bino == b->bino;
    }
    if (!a->is_block && !b->is_block)
        return a->dev == b->dev && a->ino == b->ino;
    const struct claim_id *blk = a->is_block ? a : b, *file = a->is_block ? b : a;
    return blk->has_backing && blk->bdev == file->dev && blk->bino == file->ino;
}

int claim_check_paths(const char *origin, const char *const *caches, char *err, size_t errlen)
{
    char p[4096];
    struct claim_id oid, ids[TC_MAX_DEVICES];
    bool have_origin = origin && claim_local_path(origin, p, sizeof p);
    if (have_origin && claim_stat(p, "origin", &oid, err, errlen) < 0)
        return -1;
    for (unsigned i = 0; caches && caches[i] && i < TC_MAX_DEVICES; i++) {
        if (dev_is_mem(caches[i])) {
            ids[i] = (struct claim_id){ .ino = 0 };
            continue;       /* in the process: no one else can reach it */
        }
        if (!claim_local_path(caches[i], p, sizeof p)) {
            snprintf(err, errlen, "--cache %s: a cache device must be a local file or block "
                     "device", caches[i]);
            return -1;
        }
        if (claim_stat(p, "cache device", &ids[i], err, errlen) < 0)
            return -1;
        for (unsigned j = 0; j < i; j++) {
            if (claim_same(&ids[j], &ids[i])) {
                snprintf(err, errlen, "--cache: %s and %s are the same device of the set, "
                         "named twice", caches[j], caches[i]);
                return -1;
            }
        }
        if (have_origin && claim_same(&ids[i], &oid)) {
            snprintf(err, errlen, "--cache %s is the origin itself (--origin %s): an origin "
                     "and its cache must be different devices", caches[i], origin);
            return -1;
        }
    }
    return 0;
}

/* ---- who holds it ---- */

/* "tiercache serve (pid 1234)", "python3 (pid 99)". */
static void describe_pid(int pid, char *out, size_t len)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
    size_t n = 0;
    FILE *fp = fopen(path, "re");
    if (fp) {
        n = fread(buf, 1, sizeof buf - 1, fp);
        fclose(fp);
    }
    buf[n] = '\0';
    const char *argv0 = buf, *argv1 = n > strlen(buf) + 1 ? buf + strlen(buf) + 1 : "";
    const char *base = strrchr(argv0, '/');
    base = base ? base + 1 : argv0;
    if (base[0] == '\0') {
        snprintf(path, sizeof path, "/proc/%d/comm", pid);
        if (!tc_read_first_line(path, buf, sizeof buf))
            snprintf(buf, sizeof buf, "a process");
        base = buf;
        argv1 = "";
    }
    if (strcmp(base, "tiercache") == 0 && argv1[0] && argv1[0] != '-')
        snprintf(out, len, "tiercache %.40s (pid %d)%s", argv1, pid,
                 pid == getpid() ? ", this process" : "");
    else
        snprintf(out, len, "%.100s (pid %d)%s", base, pid,
                 pid == getpid() ? ", this process" : "");
}

/* What to look for in /proc/PID/fd. */
struct holder_query {
    bool block;
    dev_t rdev, whole;          /* block: the device, or its disk, or a partition of it */
    dev_t dev;                  /* file: the inode */
    ino_t ino;
    int mnt_ids[64];            /* file: the mounts of its file system (our namespace) */
    unsigned nmnt;
};

/* The ids of the mounts of file system dev, from /proc/self/mountinfo. */
static void mounts_of(struct holder_query *q)
{
    FILE *fp = fopen("/proc/self/mountinfo", "re");
    if (fp == NULL)
        return;
    char line[4096];
    while (q->nmnt < TC_ARRAY_SIZE(q->mnt_ids) && fgets(line, sizeof line, fp)) {
        int id;
        unsigned ma, mi;
        if (sscanf(line, "%d %*u %u:%u", &id, &ma, &mi) == 3 && makedev(ma, mi) == q->dev)
            q->mnt_ids[q->nmnt++] = id;
    }
    fclose(fp);
}

static bool fd_matches(const struct holder_query *q, const struct stat *st)
{
    if (!q->block)
        return S_ISREG(st->st_mode) && st->st_dev == q->dev && st->st_ino == q->ino;
    if (!S_ISBLK(st->st_mode))
        return false;
    if (st->st_rdev == q->rdev || st->st_rdev == q->whole)
        return true;
    /* A partition of the device asked about. */
    char path[128], line[64];
    dev_t w;
    snprintf(path, sizeof path, "/sys/dev/block/%u:%u/partition", major(st->st_rdev),
             minor(st->st_rdev));
    if (access(path, F_OK) < 0)
        return false;
    snprintf(path, sizeof path, "/sys/dev/block/%u:%u/../dev", major(st->st_rdev),
             minor(st->st_rdev));
    return tc_read_first_line(path, line, sizeof line) && parse_devno(line, &w) && w == q->rdev;
}

/* From /proc/PID/fdinfo/FD: the mount and inode numbers, and whether a
 * lock is held through that descriptor.  False if it cannot be read. */
static bool fd_info(int pid, int fd, int *mnt_id, unsigned long long *ino, bool *lock)
{
    char path[96], line[256];
    snprintf(path, sizeof path, "/proc/%d/fdinfo/%d", pid, fd);
    FILE *fp = fopen(path, "re");
    if (fp == NULL)
        return false;
    bool have_ino = false, have_mnt = false;
    *lock = false;
    while (fgets(line, sizeof line, fp)) {
        if (sscanf(line, "ino: %llu", ino) == 1)
            have_ino = true;
        else if (sscanf(line, "mnt_id: %d", mnt_id) == 1)
            have_mnt = true;
        else if (strncmp(line, "lock:", 5) == 0)
            *lock = true;
    }
    fclose(fp);
    return have_ino && have_mnt;
}

/* Whether descriptor fd of pid is the thing asked about, and for a file
 * whether it holds a lock.  The open file is stat()ed only once it looks
 * like a match (a device node under /dev; the same inode number on a mount
 * of the file's file system): a stat() through /proc/PID/fd reaches the
 * file's own file system, which may be a FUSE or network mount that
 * hangs. */
static bool fd_is(const struct holder_query *q, int pid, int fd, bool *lock)
{
    char fpath[96], target[64];
    struct stat st;
    snprintf(fpath, sizeof fpath, "/proc/%d/fd/%d", pid, fd);
    *lock = false;
    if (q->block) {
        ssize_t n = readlink(fpath, target, sizeof target - 1);
        if (n < 5 || strncmp(target, "/dev/", 5) != 0)
            return false;
    } else {
        unsigned long long ino;
        int mnt_id;
        bool ours = false;
        if (!fd_info(pid, fd, &mnt_id, &ino, lock) || ino != (unsigned long long)q->ino)
            return false;
        for (unsigned i = 0; i < q->nmnt; i++)
            ours |= q->mnt_ids[i] == mnt_id;
        /* No mount shows the file's device (overlayfs may report the
         * layer's): the inode number alone picks what is stat()ed. */
        if (q->nmnt && !ours)
            return false;
    }
    return stat(fpath, &st) == 0 && fd_matches(q, &st);
}

/* The processes holding it: for a block device, those having it open; for
 * a file, those holding a lock through a descriptor of it (one that merely
 * reads it is not the holder).  Returns how many were named into out. */
static unsigned find_processes(const struct holder_query *q, char *out, size_t len)
{
    int locked[4], opened[4];
    unsigned nl = 0, no = 0;
    DIR *proc = opendir("/proc");
    if (proc == NULL)
        return 0;
    struct dirent *pe;
    while ((pe = readdir(proc)) != NULL) {
        if (!isdigit((unsigned char)pe->d_name[0]))
            continue;
        int pid = atoi(pe->d_name);
        char fddir[64];
        snprintf(fddir, sizeof fddir, "/proc/%d/fd", pid);
        DIR *fds = opendir(fddir);
        if (fds == NULL)
            continue;           /* gone, or another user's */
        bool seen = false, seen_lock = false;
        struct dirent *fe;
        while ((fe = readdir(fds)) != NULL) {
            if (fe->d_name[0] == '.')
                continue;
            bool lock;
            if (!fd_is(q, pid, atoi(fe->d_name), &lock))
                continue;
            seen = true;
            seen_lock |= lock;
        }
        closedir(fds);
        if (seen_lock && nl < TC_ARRAY_SIZE(locked))
            locked[nl++] = pid;
        else if (seen && no < TC_ARRAY_SIZE(opened))
            opened[no++] = pid;
    }
    closedir(proc);
    int *pids = q->block ? opened : locked;
    unsigned n = q->block ? no : nl;
    size_t used = 0;
    out[0] = '\0';
    for (unsigned i = 0; i < n && used + 1 < len; i++) {
        char one[160];
        describe_pid(pids[i], one, sizeof one);
        used += (size_t)snprintf(out + used, len - used, "%s%s", i ? ", " : "", one);
    }
    return n;
}

/* A block device's holders that are not processes: a mount, or another
 * block device built on it (dm, md, bcache). */
static bool block_kernel_holder(dev_t rdev, char *out, size_t len)
{
    char path[128];
    snprintf(path, sizeof path, "/sys/dev/block/%u:%u/holders", major(rdev), minor(rdev));
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            snprintf(out, len, "the block device %s (device mapper, RAID or another cache "
                     "built on it)", e->d_name);
            closedir(d);
            return true;
        }
        closedir(d);
    }
    FILE *fp = fopen("/proc/self/mountinfo", "re");
    if (fp == NULL)
        return false;
    char line[4096];
    bool found = false;
    while (!found && fgets(line, sizeof line, fp)) {
        unsigned ma, mi;
        char mnt[2048];
        if (sscanf(line, "%*u %*u %u:%u %*s %2047s", &ma, &mi, mnt) == 3 &&
            makedev(ma, mi) == rdev) {
            snprintf(out, len, "a file system mounted at %.400s", mnt);
            found = true;
        }
    }
    fclose(fp);
    return found;
}

/* ---- claiming ---- */

/* One attempt at a claim: 0 taken, 1 busy, -errno failed. */
typedef int (*claim_try_fn)(void *arg);

/* Tries until the claim is taken, or it is busy and a holder can be named,
 * or CLAIM_RELEASE_WAIT_MS have passed with no holder to be found (see the
 * top of the file).  Returns what the last try did; holder is named (or
 * empty) when busy. */
static int claim_with_wait(claim_try_fn try, void *arg, const struct holder_query *q,
                           char *holder, size_t hlen)
{
    uint64_t start = tc_now_ns();
    uint64_t deadline = start + (uint64_t)CLAIM_RELEASE_WAIT_MS * 1000000ull;
    for (unsigned tries = 0;; tries++) {
        int rc = try(arg);
        if (rc == 0 && tries)
            tc_info("claim taken after %.2f s waiting for an earlier holder to let go",
                    (double)(tc_now_ns() - start) / 1e9);
        if (rc != 1)
            return rc;
        if (find_processes(q, holder, hlen))
            return 1;
        if (q->block && (block_kernel_holder(q->rdev, holder, hlen) ||
                         (q->whole != q->rdev && block_kernel_holder(q->whole, holder, hlen))))
            return 1;
        holder[0] = '\0';
        if (tc_now_ns() > deadline)
            return 1;
        sleep_ms(CLAIM_RETRY_MS);
    }
}

struct lock_try {
    int fd;
    short type;
};

static int try_lock(void *arg)
{
    struct lock_try *t = arg;
    struct flock fl = { .l_type = t->type, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0 };
    if (fcntl(t->fd, F_OFD_SETLK, &fl) == 0)
        return 0;
    return errno == EAGAIN || errno == EACCES ? 1 : -errno;
}

/* An OFD lock over the whole file open on fd: 0, 1 busy (holder named or
 * empty), -errno. */
static int lock_file(int fd, bool exclusive, char *holder, size_t hlen)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -errno;
    struct lock_try t = { .fd = fd, .type = exclusive ? F_WRLCK : F_RDLCK };
    struct holder_query q = { .dev = st.st_dev, .ino = st.st_ino };
    mounts_of(&q);
    return claim_with_wait(try_lock, &t, &q, holder, hlen);
}

static void busy_message(char *err, size_t errlen, const char *role, const char *path,
                         const char *holder, const char *through)
{
    if (holder[0])
        snprintf(err, errlen, "%s %s is in use by %s%s", role, path, holder, through);
    else
        snprintf(err, errlen, "%s %s is in use by another program%s (its holder could not be "
                 "found)", role, path, through);
}

struct open_try {
    const char *path;
    int flags;
    int fd;
    bool direct;
};

static int try_open(void *arg)
{
    struct open_try *t = arg;
    t->direct = true;
    t->fd = open(t->path, t->flags | O_DIRECT);
    if (t->fd < 0 && errno == EINVAL) {
        /* The file system has no O_DIRECT: buffered I/O (the caller says so). */
        t->fd = open(t->path, t->flags);
        t->direct = false;
    }
    if (t->fd >= 0)
        return 0;
    return errno == EBUSY ? 1 : -errno;
}

/* A loop device's backing file, locked like the file itself.  0, or -1
 * with a message. */
static int claim_backing(const char *path, const char *role, const struct claim_id *id,
                         bool read_only, struct claim_fds *more, char *err, size_t errlen)
{
    int fd = open(id->backing, (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0 && !read_only && (errno == EACCES || errno == EROFS || errno == EPERM)) {
        read_only = true;       /* a read-only file: a read lock still meets writers */
        fd = open(id->backing, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    }
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || st.st_dev != id->bdev || st.st_ino != id->bino) {
        tc_warn("%s %s: cannot lock its backing file %s (%s): another path to that file is "
                "not detected", role, path, id->backing,
                fd < 0 ? strerror(errno) : "it was replaced");
        if (fd >= 0)
            close(fd);
        return 0;
    }
    char holder[512], through[700];
    int rc = lock_file(fd, !read_only, holder, sizeof holder);
    if (rc == 0) {
        more->fd[more->n++] = fd;
        return 0;
    }
    close(fd);
    if (rc == 1) {
        snprintf(through, sizeof through, ", through its backing file %s", id->backing);
        busy_message(err, errlen, role, path, holder, through);
    } else {
        snprintf(err, errlen, "%s %s: cannot lock its backing file %s: %s", role, path,
                 id->backing, strerror(-rc));
    }
    return -1;
}

/* The device number of the file system mounted at the longest mount
 * point of /proc/self/mountinfo that contains path (absolute); 0 if none.
 * Read from the mount table, not with stat(): path may be on a FUSE or
 * network file system that hangs. */
static dev_t mount_dev_of(const char *path)
{
    FILE *fp = fopen("/proc/self/mountinfo", "re");
    if (fp == NULL)
        return 0;
    char line[4096], mnt[2048];
    size_t best = 0;
    dev_t dev = 0;
    while (fgets(line, sizeof line, fp)) {
        unsigned ma, mi;
        if (sscanf(line, "%*u %*u %u:%u %*s %2047s", &ma, &mi, mnt) != 3)
            continue;
        /* Mount points escape blanks and backslashes as \ooo. */
        char *w = mnt;
        for (const char *r = mnt; *r; r++) {
            unsigned o;
            if (r[0] == '\\' && sscanf(r + 1, "%3o", &o) == 1 && strlen(r) >= 4) {
                *w++ = (char)o;
                r += 3;
            } else {
                *w++ = *r;
            }
        }
        *w = '\0';
        size_t n = strlen(mnt);
        if (strcmp(mnt, "/") == 0)
            n = 0;
        if (strncmp(path, mnt, n) == 0 && (path[n] == '/' || path[n] == '\0') &&
            (n >= best || dev == 0)) {
            best = n;
            dev = makedev(ma, mi);
        }
    }
    fclose(fp);
    return dev;
}

/* Loop devices over the file (its dev and ino): claimed with O_EXCL as
 * well, so that none is mounted or served while the file is in use; one
 * that already is makes the file busy.  0, or -1 with a message. */
static int claim_loops_over(const char *path, const char *role, dev_t dev, ino_t ino,
                            struct claim_fds *more, char *err, size_t errlen)
{
    DIR *d = opendir("/sys/block");
    if (d == NULL)
        return 0;
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        char p[300], line[512], node[300];
        struct stat st;
        dev_t rdev;
        if (strncmp(e->d_name, "loop", 4) != 0)
            continue;
        snprintf(p, sizeof p, "/sys/block/%.200s/loop/backing_file", e->d_name);
        /* Only a backing file on our file system is stat()ed (see
         * mount_dev_of()). */
        if (!tc_read_first_line(p, line, sizeof line) || line[0] != '/' || mount_dev_of(line) != dev ||
            stat(line, &st) < 0 || st.st_dev != dev || st.st_ino != ino)
            continue;
        snprintf(p, sizeof p, "/sys/block/%.200s/dev", e->d_name);
        snprintf(node, sizeof node, "/dev/%.200s", e->d_name);
        if (!tc_read_first_line(p, line, sizeof line) || !parse_devno(line, &rdev) ||
            stat(node, &st) < 0 || !S_ISBLK(st.st_mode) || st.st_rdev != rdev) {
            tc_warn("%s %s: loop device %s is over it but has no device node to claim",
                    role, path, e->d_name);
            continue;
        }
        if (more->n == CLAIM_MAX_FDS) {
            tc_warn("%s %s: more than %u loop devices are over it; %s is not claimed", role,
                    path, CLAIM_MAX_FDS - 1, node);
            continue;
        }
        struct open_try t = { .path = node,
                              .flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_EXCL };
        struct holder_query q = { .block = true, .rdev = rdev, .whole = rdev };
        char holder[512], through[400];
        int r = claim_with_wait(try_open, &t, &q, holder, sizeof holder);
        if (r == 0) {
            more->fd[more->n++] = t.fd;
            continue;
        }
        if (r == 1) {
            snprintf(through, sizeof through, ", through the loop device %s over it", node);
            busy_message(err, errlen, role, path, holder, through);
        } else {
            snprintf(err, errlen, "%s %s: cannot claim the loop device %s over it: %s", role,
                     path, node, strerror(-r));
        }
        rc = -1;
    }
    closedir(d);
    return rc;
}

void claim_fds_close(struct claim_fds *more)
{
    for (unsigned i = 0; i < more->n; i++)
        close(more->fd[i]);
    more->n = 0;
}

int claim_open(const char *path, const char *role, bool read_only, bool *direct,
               struct claim_fds *more, char *err, size_t errlen)
{
    struct claim_id id;
    more->n = 0;
    if (claim_stat(path, role, &id, err, errlen) < 0)
        return -1;
    /* O_NONBLOCK: should the path have become a FIFO since the stat, the
     * open returns at once and the fstat below refuses it. */
    struct open_try t = { .path = path,
                          .flags = (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC | O_NONBLOCK |
                                   (id.is_block ? O_EXCL : 0) };
    struct holder_query q = { .block = true, .rdev = id.rdev, .whole = id.whole };
    char holder[512];
    int rc = id.is_block ? claim_with_wait(try_open, &t, &q, holder, sizeof holder)
                         : try_open(&t);
    if (rc == 1) {
        busy_message(err, errlen, role, path, holder, "");
        return -1;
    }
    if (rc < 0) {
        snprintf(err, errlen, "%s %s: cannot open: %s", role, path, strerror(-rc));
        return -1;
    }
    int fd = t.fd;
    *direct = t.direct;
    struct stat st;
    if (fstat(fd, &st) < 0) {
        snprintf(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
        snprintf(err, errlen, "%s %s is %s: it must be a regular file or a block device", role,
                 path, type_name(st.st_mode));
        goto fail;
    }
    if (S_ISBLK(st.st_mode) != id.is_block || st.st_dev != id.dev || st.st_ino != id.ino) {
        snprintf(err, errlen, "%s %s was replaced while being opened", role, path);
        goto fail;
    }
    /* I/O blocks as usual from here (io_uring would fail requests with
     * EAGAIN on a non-blocking file rather than wait). */
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        snprintf(err, errlen, "%s: fcntl: %s", path, strerror(errno));
        goto fail;
    }
    if (!id.is_block) {
        rc = lock_file(fd, !read_only, holder, sizeof holder);
        if (rc == 1) {
            busy_message(err, errlen, role, path, holder, "");
            goto fail;
        }
        if (rc < 0) {
            snprintf(err, errlen, "%s %s: cannot lock: %s", role, path, strerror(-rc));
            goto fail;
        }
        if (claim_loops_over(path, role, st.st_dev, st.st_ino, more, err, errlen) < 0)
            goto fail;
    } else if (id.has_backing &&
               claim_backing(path, role, &id, read_only, more, err, errlen) < 0) {
        goto fail;
    }
    return fd;
fail:
    claim_fds_close(more);
    close(fd);
    return -1;
}

/* ---- the set's identity ---- */

static char set_dir[4096];

struct claim_set {
    int fd;
    char path[4200];
    /* A set lock held for the whole command (claim_set_hold()): later
     * locks of the set in this process share it, counted in refs. */
    bool held;
    uint8_t uuid[16];
    unsigned refs;              /* references beyond the first */
    struct claim_set *next;     /* held_sets */
};

static struct claim_set *held_sets;

void claim_set_dir(const char *dir)
{
    snprintf(set_dir, sizeof set_dir, "%s", dir ? dir : "");
}

bool claim_set_enabled(void)
{
    return set_dir[0] != '\0';
}

/*
 * Lock the file NAME.lock in the set directory, exclusive or shared; WHAT
 * names it in messages ("cache set UUID").  NULL with a message on error,
 * and also when another process holds it: then *busy is set and holder
 * says who, for the caller's message.
 */
static struct claim_set *dir_lock(const char *name, const char *what, bool exclusive,
                                  bool *busy, char *holder, size_t hlen, char *err,
                                  size_t errlen)
{
    *busy = false;
    struct claim_set *s = tc_xcalloc(1, sizeof *s);
    s->fd = -1;
    snprintf(s->path, sizeof s->path, "%s/%s.lock", set_dir, name);
    /* Whoever may write in the directory could replace the lock file with
     * one of his own and so let a second user of the set in: the rule of
     * the run directory (cli/common.c) holds here too, for format, check
     * and dump as for serve. */
    if (mkdir(set_dir, 0700) < 0 && errno != EEXIST) {
        snprintf(err, errlen, "cannot create the directory %s for the lock of %s: %s", set_dir,
                 what, strerror(errno));
        goto fail;
    }
    struct stat dst;
    if (lstat(set_dir, &dst) < 0 || !S_ISDIR(dst.st_mode) ||
        (dst.st_uid != geteuid() && dst.st_uid != 0)) {
        snprintf(err, errlen, "%s, the directory for the lock of %s, is not a directory of "
                 "user %u or root (a symbolic link is not taken)", set_dir, what,
                 (unsigned)geteuid());
        goto fail;
    }
    if (dst.st_mode & 022) {
        snprintf(err, errlen, "%s, the directory for the lock of %s, has mode %04o: group or "
                 "others may write in it; refusing to use it (chmod go-w %s)", set_dir, what,
                 (unsigned)(dst.st_mode & 07777), set_dir);
        goto fail;
    }
    for (;;) {
        s->fd = open(s->path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600);
        struct stat st, cur;
        if (s->fd < 0 || fstat(s->fd, &st) < 0) {
            snprintf(err, errlen, "cannot open the lock of %s, %s: %s", what, s->path,
                     strerror(errno));
            goto fail;
        }
        if (!S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
            snprintf(err, errlen, "the lock of %s, %s, is not a regular file of user %u", what,
                     s->path, (unsigned)geteuid());
            goto fail;
        }
        holder[0] = '\0';
        int rc = lock_file(s->fd, exclusive, holder, hlen);
        if (rc == 1 && (stat(s->path, &cur) < 0 || cur.st_dev != st.st_dev ||
                        cur.st_ino != st.st_ino)) {
            /* Its holder was letting go and removed it: try the new one. */
            close(s->fd);
            s->fd = -1;
            continue;
        }
        if (rc == 1) {
            char pidbuf[32] = "", proc[48];
            int pid = pread(s->fd, pidbuf, sizeof pidbuf - 1, 0) > 0 ? atoi(pidbuf) : 0;
            snprintf(proc, sizeof proc, "/proc/%d", pid);
            if (holder[0] == '\0' && pid > 0 && access(proc, F_OK) == 0)
                describe_pid(pid, holder, hlen);
            *busy = true;
            goto fail;
        }
        if (rc < 0) {
            snprintf(err, errlen, "cannot lock %s: %s", s->path, strerror(-rc));
            goto fail;
        }
        /* A holder removes the file when it lets go (see claim_set_release):
         * the lock counts only on the file the name still leads to. */
        if (stat(s->path, &cur) == 0 && cur.st_dev == st.st_dev && cur.st_ino == st.st_ino)
            break;
        close(s->fd);
        s->fd = -1;
    }
    if (exclusive) {
        char pidbuf[32];
        int n = snprintf(pidbuf, sizeof pidbuf, "%d\n", (int)getpid());
        if (ftruncate(s->fd, 0) < 0 || pwrite(s->fd, pidbuf, (size_t)n, 0) != n)
            tc_warn("%s: cannot record the pid: %s", s->path, strerror(errno));
    }
    return s;
fail:
    if (s->fd >= 0)
        close(s->fd);
    free(s);
    return NULL;
}

struct claim_set *claim_set_lock(const uint8_t uuid[16], bool exclusive, const char *devname,
                                 char *err, size_t errlen)
{
    if (set_dir[0] == '\0')
        return NULL;
    for (struct claim_set *h = held_sets; h; h = h->next)
        if (memcmp(h->uuid, uuid, 16) == 0) {
            h->refs++;      /* held exclusively: covers any lock of it */
            return h;
        }
    char u[37], name[48], what[64], holder[512];
    tc_uuid_format(uuid, u);
    snprintf(name, sizeof name, "set-%s", u);
    snprintf(what, sizeof what, "cache set %s", u);
    bool busy;
    struct claim_set *s = dir_lock(name, what, exclusive, &busy, holder, sizeof holder, err,
                                   errlen);
    if (s == NULL && busy) {
        char through[800];
        snprintf(through, sizeof through, ", through the lock of its cache set %s "
                 "(%.600s/%s.lock)", u, set_dir, name);
        busy_message(err, errlen, "cache device", devname, holder, through);
    }
    if (s)
        memcpy(s->uuid, uuid, 16);
    return s;
}

struct claim_set *claim_set_hold(const uint8_t uuid[16], const char *devname, char *err,
                                 size_t errlen)
{
    struct claim_set *s = claim_set_lock(uuid, true, devname, err, errlen);
    if (s && !s->held) {
        s->held = true;
        s->next = held_sets;
        held_sets = s;
    }
    return s;
}

struct claim_set *claim_state_lock(const char *state_path, char *err, size_t errlen)
{
    if (set_dir[0] == '\0')
        return NULL;
    /* The file may not exist yet: its directory, resolved, and its name. */
    char dir[4096], canon[4096 + 256];
    const char *slash = strrchr(state_path, '/');
    const char *base = slash ? slash + 1 : state_path;
    if (slash == NULL)
        snprintf(dir, sizeof dir, ".");
    else if (slash == state_path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - state_path), state_path);
    char *real = realpath(dir, NULL);
    snprintf(canon, sizeof canon, "%s/%s", real ? real : dir, base);
    free(real);
    char name[48], what[4400], holder[512];
    snprintf(name, sizeof name, "state-%08x", tc_crc32c(0, canon, strlen(canon)));
    snprintf(what, sizeof what, "state file %s", canon);
    bool busy;
    struct claim_set *s = dir_lock(name, what, true, &busy, holder, sizeof holder, err, errlen);
    if (s == NULL && busy)
        snprintf(err, errlen, "state file %s is in use by %s (through its lock %s/%s.lock): each "
                 "cache set needs a state file of its own (--state-file), or an abandonment of "
                 "one set would replace the record of the other's lost sectors", state_path,
                 holder[0] ? holder : "another process", set_dir, name);
    return s;
}

struct claim_set *claim_origin_lock(const char *identity, const char *origin, bool exclusive,
                                    char *err, size_t errlen)
{
    if (set_dir[0] == '\0')
        return NULL;
    size_t n = strlen(identity);
    char name[48], what[700], holder[512];
    snprintf(name, sizeof name, "origin-%08x%08x", tc_crc32c(0, identity, n),
             tc_crc32c(0x9e3779b9u, identity, n));
    snprintf(what, sizeof what, "origin %.600s", origin);
    bool busy;
    struct claim_set *s = dir_lock(name, what, exclusive, &busy, holder, sizeof holder, err,
                                   errlen);
    if (s == NULL && busy)
        snprintf(err, errlen, "origin %s is in use by %s (through its lock %s/%s.lock): %s",
                 origin, holder[0] ? holder : "another process", set_dir, name,
                 exclusive ? "a serve with a cache, or check --salvage, must be the origin's "
                             "only writer (another daemon's writes would make the cache's "
                             "copies older than the origin, or race them); stop the other "
                             "daemon first"
                           : "it is served with a cache, whose clean copies the writes of this "
                             "daemon would make older than the origin; stop it first, or serve "
                             "--read-only");
    return s;
}

void claim_set_release(struct claim_set *s)
{
    if (s == NULL)
        return;
    if (s->refs) {
        s->refs--;
        return;
    }
    if (s->held) {
        struct claim_set **pp = &held_sets;
        while (*pp != s)
            pp = &(*pp)->next;
        *pp = s->next;
    }
    /* Remove the file only when no one else holds it (a shared holder
     * turns its lock into a write lock first), so that a new holder never
     * locks a fresh file while another still holds the old one. */
    struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0 };
    if (fcntl(s->fd, F_OFD_SETLK, &fl) == 0)
        unlink(s->path);
    close(s->fd);
    free(s);
}

/* ---- an origin that is a cache device ---- */

/* The first 8 KiB of a local file or block device (where a cache device
 * keeps its two superblock copies), read aside: the bytes read, or -1 with
 * errno set (anything but a file or a block device: EINVAL). */
static ssize_t read_superblocks(const char *path, uint8_t buf[2 * TC_SB_SIZE])
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return -1;
    struct stat st;
    ssize_t n = -1;
    if (fstat(fd, &st) == 0) {
        if (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode))
            n = pread(fd, buf, 2 * TC_SB_SIZE, 0);
        else
            errno = EINVAL;
    }
    int e = errno;
    close(fd);
    errno = e;
    return n;
}

/* Either superblock copy of buf, decoded into sb: false if neither checks. */
static bool decode_either(const uint8_t *buf, struct tc_superblock *sb)
{
    char err[160];
    return sb_decode(buf, sb, err, sizeof err) == 0 ||
           sb_decode(buf + TC_SB_SIZE, sb, err, sizeof err) == 0;
}

int claim_origin_not_cache(const char *origin, bool swapped, char *err, size_t errlen)
{
    /* Read aside, not through the device: the origin's figures and the
     * requests its server sees stay the clients' alone.  An NBD origin is
     * not looked at (a cache device is local). */
    char path[4096];
    if (!claim_local_path(origin, path, sizeof path))
        return 0;
    uint8_t buf[2 * TC_SB_SIZE];
    ssize_t n = read_superblocks(path, buf);
    int e = errno;
    if (n < 0) {
        /* Not fatal: an origin's read errors fail the requests that meet them. */
        tc_warn("origin %s: cannot read its first 8 KiB to tell it is not a cache device: %s",
                origin, strerror(e));
        return 0;
    }
    if ((size_t)n < sizeof buf || !(sb_has_magic(buf) || sb_has_magic(buf + TC_SB_SIZE)))
        return 0;
    struct tc_superblock sb;
    char u[37] = "";
    if (decode_either(buf, &sb))
        tc_uuid_format(sb.set_uuid, u);
    if (swapped)
        snprintf(err, errlen, "origin %s looks like a tiercache cache device (it holds the "
                 "superblock of cache set %s): an origin cannot be a cache device; were "
                 "--cache and --origin swapped?", origin, u[0] ? u : "(damaged)");
    else
        snprintf(err, errlen, "origin %s looks like a tiercache cache device (it holds the "
                 "superblock of cache set %s): its clients would overwrite the cache's log "
                 "and the dirty data in it; serve it as --cache of its own origin, or with "
                 "--read-only to export it unchanged", origin, u[0] ? u : "(damaged)");
    return -1;
}

bool claim_device_set(const char *name, uint8_t uuid[16])
{
    char path[4096];
    if (!claim_local_path(name, path, sizeof path))
        return false;
    uint8_t buf[2 * TC_SB_SIZE];
    struct tc_superblock sb;
    if (read_superblocks(path, buf) < (ssize_t)sizeof buf || !decode_either(buf, &sb))
        return false;
    memcpy(uuid, sb.set_uuid, 16);
    return true;
}

/* ---- the daemon's other files ---- */

/*
 * --log, --pidfile and --trace name files the daemon writes with plain
 * opens, which no claim stops: a path mistyped as the origin or a cache
 * device (the pid file truncated it to a process id and removed it at exit,
 * the trace truncated it while serving) destroyed the volume's data.  So
 * each is compared with the origin and the cache devices as they are with
 * each other, and an existing file that a claim holds (an OFD lock: some
 * daemon's origin or cache device, an image qemu has open) is refused too.
 */
int claim_check_output(const char *path, const char *what, const char *does,
                       const char *origin, const char *const *caches, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) < 0 || !(S_ISREG(st.st_mode) || S_ISBLK(st.st_mode)))
        return 0;               /* new, or refused by its open as not a file */
    struct claim_id id, other;
    char p[4096], quiet[16];
    if (claim_stat(path, what, &id, quiet, sizeof quiet) < 0)
        return 0;
    if (origin && claim_local_path(origin, p, sizeof p) &&
        claim_stat(p, "origin", &other, quiet, sizeof quiet) == 0 && claim_same(&id, &other)) {
        snprintf(err, errlen, "%s %s is the origin (--origin %s): the daemon would %s; give "
                 "%s another path", what, path, origin, does, what);
        return -1;
    }
    for (unsigned i = 0; caches && caches[i] && i < TC_MAX_DEVICES; i++) {
        if (claim_local_path(caches[i], p, sizeof p) &&
            claim_stat(p, "cache device", &other, quiet, sizeof quiet) == 0 &&
            claim_same(&id, &other)) {
            snprintf(err, errlen, "%s %s is the cache device %s (--cache): the daemon would "
                     "%s; give %s another path", what, path, caches[i], does, what);
            return -1;
        }
    }
    if (!S_ISREG(st.st_mode))
        return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
    if (fd < 0)
        return 0;               /* its own open says why */
    struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0 };
    bool locked = fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
    close(fd);
    if (!locked)
        return 0;
    char holder[512] = "";
    struct holder_query q = { .dev = st.st_dev, .ino = st.st_ino };
    mounts_of(&q);
    find_processes(&q, holder, sizeof holder);
    snprintf(err, errlen, "%s %s is in use by %s (a file locked as an origin or cache device "
             "is): the daemon would %s; give %s another path", what, path,
             holder[0] ? holder : "another program", does, what);
    return -1;
}
