/*
 * A device layer for fault testing: "testdev:PATH?OPTION&OPTION...".
 *
 * It wraps a file or block device (as dev_file.c opens it) and adds:
 *
 *   undo=FILE       power-loss simulation.  Before each write reaches the
 *                   device, the old contents of its range are appended to
 *                   FILE; a completed flush removes the records of the
 *                   writes sent before it.  After the daemon is killed,
 *                   applying FILE backwards (tests/tools/undo) gives the
 *                   device exactly as a power failure would have left it if
 *                   it kept nothing that was not flushed: the worst case a
 *                   volatile write cache allows.  A write with FUA is
 *                   durable once done: its range then holds its data
 *                   whatever the undo file takes back (see fua_keep()).
 *   undo_append=FILE  as undo=, but the records FILE already holds are
 *                   kept: those of an earlier daemon on the same device,
 *                   killed before a flush covered them.  A restart of the
 *                   daemon does not flush the device, so a power failure
 *                   after it still takes them, until a flush of the new
 *                   daemon completes.
 *   eio_when=FILE   while FILE exists, every request fails with EIO (a
 *                   device dying at a moment the test chooses).
 *   eio_once        with eio_when: only one request fails, and the layer
 *                   removes FILE as it fails it (a transient error of
 *                   exactly one request).
 *   eio_count=N     with eio_when: N requests fail -- counting only those
 *                   the other eio_ options select --, and the layer
 *                   removes FILE as it fails the last (eio_once is
 *                   eio_count=1): a transient error of exactly N reads of
 *                   some sectors, say, whatever the timing.  FILE made
 *                   again once the layer removed it: N more.
 *   eio_after=N     every request after the first N fails with EIO.
 *   eio_ops=LIST    only these kinds of request fail (comma-separated:
 *                   read, write -- which includes zero and trim --, flush;
 *                   default all): an origin whose writes fail while its
 *                   flushes succeed, or the reverse.
 *   eio_range=OFF+LEN  only requests that touch bytes OFF..OFF+LEN-1 fail
 *                   (the others succeed meanwhile): a few bad sectors.
 *   eio_maxlen=N    only requests of at most N bytes fail (with eio_range:
 *                   a small read of bad sectors fails, a larger one around
 *                   them succeeds -- to reach a path that reads small).
 *   eio_minlen=N    only requests of at least N bytes fail (the reverse).
 *   eio_errno=N     the requests the eio_ options fail get errno N instead
 *                   of EIO (28, ENOSPC: an origin whose file system is
 *                   full).
 *   hold_when=FILE  while FILE exists, requests (of the kinds hold_ops=LIST
 *                   names, as eio_ops does; default all) are held, not
 *                   sent: a device that stops answering at a moment the
 *                   test chooses.  Once FILE is gone (looked at every
 *                   10 ms) they go on in the order they came, and fail if
 *                   an eio_ option says so then.
 *   hold_range=OFF+LEN  with hold_when: only requests that touch bytes
 *                   OFF..OFF+LEN-1 are held (no flush); the others go on
 *                   meanwhile, overtaking them.
 *   hold_minlen=N   with hold_when: only requests of at least N bytes are
 *                   held; shorter ones go on meanwhile (the cleaner's read
 *                   of a whole chunk, header and data, and not the reads
 *                   of single blocks beside it).
 *   hold_once       with hold_when: only the first request that would be
 *                   held is; later ones go on meanwhile (two writes of the
 *                   same place completing in the reverse order).
 *   hold_reply      with hold_when: the requests are done at once, only
 *                   their completion is held until FILE is gone (a read
 *                   whose data was read before a later write, answered
 *                   after it); FILE.held is created when one is held.
 *   eio_held        with hold_when: once FILE is gone, the held requests
 *                   all fail with EIO, at once, and later ones go on (a
 *                   device that stopped answering for a moment and failed
 *                   everything it held: one burst of errors).
 *
 * The extra work (reading old contents, writing the undo file) is done
 * with blocking calls: this layer is for tests, never for production.
 *
 * Undo file format: records of [u64 offset][u64 length][length bytes of
 * the old contents], little-endian, in the order the writes were issued.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/ondisk.h"
#include "io/dev.h"
#include "util/log.h"
#include "util/misc.h"

struct dev_test {
    struct tc_dev dev;
    struct tc_dev *inner;
    int raw_fd;                 /* buffered fd for reading old contents */
    int undo_fd;
    char *undo_path;            /* undo=: replaced whole at each flush */
    char *eio_when;
    long long eio_count;        /* eio_once, eio_count=: failures per FILE (0: no limit) */
    long long eio_left;         /* ...of which left before FILE is removed */
    long long eio_after;
    uint64_t eio_from, eio_to;  /* eio_range: [from, to); to 0: everywhere */
    uint64_t eio_maxlen;        /* 0: any length */
    uint64_t eio_minlen;
    int eio_errno;              /* what a failing request gets (EIO) */
    long long ops;
    unsigned eio_ops;           /* EIO_* bits: the requests that may fail */
    char *hold_when;
    bool eio_held;              /* the held requests fail when released */
    unsigned hold_ops;          /* EIO_* bits: the requests that may be held */
    uint64_t hold_from, hold_to;    /* hold_range: [from, to); to 0: everywhere */
    uint64_t hold_minlen;           /* 0: any length */
    bool hold_once, held_one;
    bool hold_reply;
    struct tc_dev_io *held, **held_tail;
    struct tc_dev_io *replies;  /* hold_reply: done, result in ->status */
    struct tc_timer hold_timer;
    bool aborted;               /* dev_abort(): every request fails */
    off_t undo_dropped;         /* undo bytes forgotten so far (cut from the front) */
};

enum { EIO_READ = 1, EIO_WRITE = 2, EIO_FLUSH = 4, EIO_ALL = 7 };

#define HOLD_POLL_NS (10ull * 1000 * 1000)

static unsigned op_kind(int op)
{
    switch (op) {
    case TC_DEV_READ: return EIO_READ;
    case TC_DEV_FLUSH: return EIO_FLUSH;
    default: return EIO_WRITE;
    }
}

struct test_io {
    struct tc_dev_io inner;
    struct tc_dev_io *outer;
    bool hold_reply;            /* done now, completed once hold_when is gone */
    off_t flush_mark;           /* undo bytes ever recorded when the flush was sent */
    off_t rec_mark;             /* write: undo bytes ever recorded before its record */
};

/* A flush makes durable the writes sent before it: drop their undo
 * records, keep those of writes sent while it ran.  The records kept go to
 * a new file renamed over the old one, so that a kill at any moment leaves
 * either the old undo file or the new one, each a sequence of whole
 * records (a compaction in place, cut by the kill between rewriting the
 * front and truncating, left old records' bytes behind the new ones, which
 * read as records of garbage). */
static int undo_forget(struct dev_test *d, off_t upto)
{
    off_t end = lseek(d->undo_fd, 0, SEEK_END);
    if (end < 0)
        return -errno;
    size_t keep = (size_t)(end - upto);
    uint8_t *rest = tc_xmalloc(keep ? keep : 1);
    if (keep && pread(d->undo_fd, rest, keep, upto) != (ssize_t)keep) {
        free(rest);
        return -EIO;
    }
    size_t tlen = strlen(d->undo_path) + 5;
    char *tmp = tc_xmalloc(tlen);
    snprintf(tmp, tlen, "%s.new", d->undo_path);
    int rc = 0;
    int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || (keep && pwrite(fd, rest, keep, 0) != (ssize_t)keep) ||
        lseek(fd, (off_t)keep, SEEK_SET) < 0 || rename(tmp, d->undo_path) < 0) {
        rc = -EIO;
        if (fd >= 0)
            close(fd);
        unlink(tmp);
    } else {
        close(d->undo_fd);
        d->undo_fd = fd;
    }
    free(tmp);
    free(rest);
    return rc;
}

/* A write with FUA is durable once done, as if a flush had followed it --
 * but only its own data: the unflushed writes before it, of its range or
 * any other, stay as volatile as they were.  Undoing the records of the
 * file newest first, its own record and those of earlier writes that
 * overlap its range would put back, within the range, what it replaced:
 * their old contents there become its data instead, so the range reads its
 * data after an undo, and outside the range they put back what they did.
 * Records keep their places and sizes (flush marks, undo --keep and --drop
 * count them); later records are left as they are (they saved what they
 * found, its data or newer).  A kill in the middle of the rewrite leaves
 * whole records, some bytes of the range its data and some older: a torn
 * write, which a write not yet acknowledged may be. */
static int fua_keep(struct dev_test *d, const struct tc_dev_io *w, off_t rec_end)
{
    uint8_t *data = NULL;
    if (w->op == TC_DEV_ZERO) {
        data = tc_xcalloc(1, w->len);
    } else if (w->op == TC_DEV_TRIM) {
        /* What the device reads there now: a trimmed range's contents. */
        data = tc_xcalloc(1, w->len);
        if (pread(d->raw_fd, data, w->len, (off_t)w->off) < 0) {
            free(data);
            return -errno;
        }
    }
    const uint8_t *src = data ? data : w->buf;
    int rc = 0;
    for (off_t at = 0; at < rec_end;) {
        uint8_t hdr[16];
        if (pread(d->undo_fd, hdr, sizeof hdr, at) != (ssize_t)sizeof hdr) {
            rc = -EIO;
            break;
        }
        uint64_t off = le64_get(hdr), len = le64_get(hdr + 8);
        uint64_t from = off > w->off ? off : w->off;
        uint64_t to = off + len < w->off + w->len ? off + len : w->off + w->len;
        if (from < to && pwrite(d->undo_fd, src + (from - w->off), to - from,
                                at + 16 + (off_t)(from - off)) != (ssize_t)(to - from)) {
            rc = -EIO;
            break;
        }
        at += 16 + (off_t)len;
    }
    free(data);
    return rc;
}

static void inner_done(struct tc_dev_io *dio, int err)
{
    struct test_io *t = container_of(dio, struct test_io, inner);
    struct tc_dev_io *outer = t->outer;
    struct dev_test *d = container_of(outer->dev, struct dev_test, dev);
    if (err == 0 && outer->op == TC_DEV_FLUSH && d->undo_fd >= 0 &&
        t->flush_mark > d->undo_dropped) {
        /* Flushes may overlap and complete in any order: marks count every
         * byte ever recorded, and one already covered by a later flush that
         * completed first has nothing left to forget. */
        err = undo_forget(d, t->flush_mark - d->undo_dropped);
        if (err == 0)
            d->undo_dropped = t->flush_mark;
    }
    if (err == 0 && (outer->flags & TC_DEV_FUA) && outer->op != TC_DEV_FLUSH &&
        d->undo_fd >= 0 && t->rec_mark >= d->undo_dropped) {
        /* Its record not yet forgotten by a flush. */
        err = fua_keep(d, outer, t->rec_mark - d->undo_dropped + 16 + (off_t)outer->len);
        if (err)
            tc_error("testdev %s: cannot record the FUA write at offset %llu as durable: %s",
                     outer->dev->name, (unsigned long long)outer->off, strerror(-err));
    }
    bool hold = t->hold_reply;
    free(t);
    if (hold && !d->aborted) {
        outer->status = err;
        outer->next = d->replies;
        d->replies = outer;
        /* The test's sign that the request is done, its reply held. */
        char path[4096];
        snprintf(path, sizeof path, "%s.held", d->hold_when);
        int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        if (fd >= 0)
            close(fd);
        if (!d->hold_timer.armed)
            timer_arm(d->dev.reactor, &d->hold_timer, HOLD_POLL_NS);
        return;
    }
    dev_complete(outer, err);
}

static bool failing(struct dev_test *d, const struct tc_dev_io *dio)
{
    int op = dio->op;
    d->ops++;
    if (!(d->eio_ops & op_kind(op)))
        return false;
    if (d->eio_to && (op == TC_DEV_FLUSH || dio->off >= d->eio_to ||
                      dio->off + dio->len <= d->eio_from))
        return false;
    if ((d->eio_maxlen && dio->len > d->eio_maxlen) || dio->len < d->eio_minlen)
        return false;
    if (d->eio_after >= 0 && d->ops > d->eio_after)
        return true;
    if (d->eio_when && access(d->eio_when, F_OK) == 0) {
        if (d->eio_count == 0)
            return true;
        if (d->eio_left == 0)
            d->eio_left = d->eio_count;     /* FILE made (again) */
        if (d->eio_left == 1 && unlink(d->eio_when) < 0)
            return false;       /* someone else's failure took it */
        d->eio_left--;
        return true;
    }
    return false;
}

static int save_old(struct dev_test *d, uint64_t off, uint64_t len)
{
    uint8_t hdr[16];
    le64_put(hdr, off);
    le64_put(hdr + 8, len);
    uint8_t *buf = tc_xmalloc(len);
    ssize_t n = pread(d->raw_fd, buf, len, (off_t)off);
    if (n < 0) {
        free(buf);
        return -errno;
    }
    if ((uint64_t)n < len)
        memset(buf + n, 0, len - (uint64_t)n);
    int rc = 0;
    if (write(d->undo_fd, hdr, sizeof hdr) != (ssize_t)sizeof hdr ||
        write(d->undo_fd, buf, len) != (ssize_t)len)
        rc = -EIO;
    free(buf);
    return rc;
}

static void test_issue(struct dev_test *d, struct tc_dev_io *dio, bool hold_reply);


/* The held requests, oldest first, taken off the list. */
static struct tc_dev_io *take_held(struct dev_test *d)
{
    struct tc_dev_io *list = d->held;
    d->held = NULL;
    d->held_tail = &d->held;
    return list;
}

static void hold_timer_fn(struct tc_timer *t)
{
    struct dev_test *d = container_of(t, struct dev_test, hold_timer);
    if (access(d->hold_when, F_OK) == 0) {
        timer_arm(d->dev.reactor, &d->hold_timer, HOLD_POLL_NS);
        return;
    }
    for (struct tc_dev_io *dio = d->replies, *next; dio; dio = next) {
        next = dio->next;
        dev_complete(dio, dio->status);
    }
    d->replies = NULL;
    for (struct tc_dev_io *dio = take_held(d), *next; dio; dio = next) {
        next = dio->next;
        if (d->eio_held)
            dev_complete(dio, -EIO);
        else
            test_issue(d, dio, false);
    }
}

static bool holding(struct dev_test *d, const struct tc_dev_io *dio)
{
    if (!d->hold_when || d->aborted || !(d->hold_ops & op_kind(dio->op)))
        return false;
    if (d->hold_to && (dio->op == TC_DEV_FLUSH || dio->off >= d->hold_to ||
                       dio->off + dio->len <= d->hold_from))
        return false;
    if (dio->len < d->hold_minlen)
        return false;
    if (d->hold_once) {
        if (d->held_one || access(d->hold_when, F_OK) != 0)
            return false;
        d->held_one = true;
        return true;
    }
    /* Once one is held, the later ones wait behind it (their order kept). */
    return d->held != NULL || access(d->hold_when, F_OK) == 0;
}

static void test_submit(struct tc_dev *dev, struct tc_dev_io *dio)
{
    struct dev_test *d = container_of(dev, struct dev_test, dev);
    if (d->hold_reply) {
        test_issue(d, dio, holding(d, dio));
        return;
    }
    if (holding(d, dio)) {
        dio->next = NULL;
        *d->held_tail = dio;
        d->held_tail = &dio->next;
        if (!d->hold_timer.armed)
            timer_arm(dev->reactor, &d->hold_timer, HOLD_POLL_NS);
        return;
    }
    test_issue(d, dio, false);
}

static void test_issue(struct dev_test *d, struct tc_dev_io *dio, bool hold_reply)
{
    struct tc_dev *dev = &d->dev;
    if (d->aborted) {
        dev_complete(dio, -EIO);
        return;
    }
    if (failing(d, dio)) {
        dev_complete(dio, -d->eio_errno);
        return;
    }
    off_t rec_mark = 0;
    if (d->undo_fd >= 0 && (dio->op == TC_DEV_WRITE || dio->op == TC_DEV_ZERO ||
                            dio->op == TC_DEV_TRIM)) {
        rec_mark = d->undo_dropped + lseek(d->undo_fd, 0, SEEK_CUR);
        int rc = save_old(d, dio->off, dio->len);
        if (rc) {
            tc_error("testdev %s: cannot record the undo data: %s", dev->name, strerror(-rc));
            dev_complete(dio, -EIO);
            return;
        }
    }
    struct test_io *t = tc_xcalloc(1, sizeof *t);
    t->outer = dio;
    t->hold_reply = hold_reply;
    t->rec_mark = rec_mark;
    if (dio->op == TC_DEV_FLUSH && d->undo_fd >= 0)
        t->flush_mark = d->undo_dropped + lseek(d->undo_fd, 0, SEEK_CUR);
    t->inner.op = dio->op;
    t->inner.flags = dio->flags;
    t->inner.buf = dio->buf;
    t->inner.off = dio->off;
    t->inner.len = dio->len;
    t->inner.cb = inner_done;
    dev_submit(d->inner, &t->inner);
}

/* Held requests fail (never sent: -EIO), and every later one. */
static void test_abort(struct tc_dev *dev)
{
    struct dev_test *d = container_of(dev, struct dev_test, dev);
    d->aborted = true;
    if (d->hold_when)
        timer_cancel(dev->reactor, &d->hold_timer);
    for (struct tc_dev_io *dio = d->replies, *next; dio; dio = next) {
        next = dio->next;
        dev_complete(dio, dio->status);
    }
    d->replies = NULL;
    for (struct tc_dev_io *dio = take_held(d), *next; dio; dio = next) {
        next = dio->next;
        dev_complete(dio, -EIO);
    }
}

static void test_close(struct tc_dev *dev)
{
    struct dev_test *d = container_of(dev, struct dev_test, dev);
    if (d->hold_when)
        timer_cancel(dev->reactor, &d->hold_timer);
    dev_close(d->inner);
    if (d->raw_fd >= 0)
        close(d->raw_fd);
    if (d->undo_fd >= 0)
        close(d->undo_fd);
    free(d->eio_when);
    free(d->hold_when);
    free(d->undo_path);
    free(d->dev.name);
    free(d);
}

static const struct tc_dev_ops test_ops = { .submit = test_submit, .close = test_close,
                                            .abort = test_abort };

struct tc_dev *dev_test_open(struct tc_reactor *r, const char *spec, bool read_only, char *err,
                             size_t errlen)
{
    return dev_test_open_as(r, spec, "device", read_only, err, errlen);
}

struct tc_dev *dev_test_open_as(struct tc_reactor *r, const char *spec, const char *role,
                                bool read_only, char *err, size_t errlen)
{
    char *copy = tc_xstrdup(spec + strlen("testdev:"));
    char *opts = strchr(copy, '?');
    if (opts)
        *opts++ = '\0';
    struct dev_test *d = tc_xcalloc(1, sizeof *d);
    d->raw_fd = -1;
    d->undo_fd = -1;
    d->eio_after = -1;
    d->eio_errno = EIO;
    d->eio_ops = EIO_ALL;
    d->hold_ops = EIO_ALL;
    d->held_tail = &d->held;
    d->hold_timer.fn = hold_timer_fn;
    d->inner = dev_file_open_as(r, copy, role, read_only, err, errlen);
    if (d->inner == NULL)
        goto fail;
    for (char *o = opts ? strtok(opts, "&") : NULL; o; o = strtok(NULL, "&")) {
        if (strncmp(o, "undo=", 5) == 0 || strncmp(o, "undo_append=", 12) == 0) {
            bool append = o[4] == '_';
            const char *path = strchr(o, '=') + 1;
            free(d->undo_path);
            d->undo_path = tc_xstrdup(path);
            if (d->undo_fd >= 0)
                close(d->undo_fd);
            if (d->raw_fd >= 0)
                close(d->raw_fd);
            d->undo_fd = open(path, O_RDWR | O_CREAT | (append ? 0 : O_TRUNC) | O_CLOEXEC, 0600);
            d->raw_fd = open(copy, O_RDONLY | O_CLOEXEC);
            /* Appended after the records kept: the first flush's mark
             * covers them too (flush_mark counts from the file's start). */
            if (d->undo_fd >= 0 && append && lseek(d->undo_fd, 0, SEEK_END) < 0) {
                close(d->undo_fd);
                d->undo_fd = -1;
            }
            if (d->undo_fd < 0 || d->raw_fd < 0) {
                snprintf(err, errlen, "testdev: %s: %s", path, strerror(errno));
                goto fail;
            }
        } else if (strncmp(o, "eio_when=", 9) == 0) {
            d->eio_when = tc_xstrdup(o + 9);
        } else if (strcmp(o, "eio_once") == 0) {
            d->eio_count = 1;
        } else if (strncmp(o, "eio_count=", 10) == 0) {
            char *end;
            d->eio_count = strtoll(o + 10, &end, 0);
            if (*end != '\0' || d->eio_count <= 0) {
                snprintf(err, errlen, "testdev: eio_count=%s: want a count above 0", o + 10);
                goto fail;
            }
        } else if (strncmp(o, "eio_errno=", 10) == 0) {
            char *end;
            long v = strtol(o + 10, &end, 0);
            if (*end != '\0' || v <= 0 || v > 4095) {
                snprintf(err, errlen, "testdev: eio_errno=%s: want an errno number", o + 10);
                goto fail;
            }
            d->eio_errno = (int)v;
        } else if (strcmp(o, "eio_held") == 0) {
            d->eio_held = true;
        } else if (strncmp(o, "eio_after=", 10) == 0) {
            d->eio_after = atoll(o + 10);
        } else if (strncmp(o, "eio_range=", 10) == 0) {
            char *end;
            unsigned long long from = strtoull(o + 10, &end, 0), len = 0;
            if (*end == '+')
                len = strtoull(end + 1, &end, 0);
            if (*end != '\0' || len == 0) {
                snprintf(err, errlen, "testdev: eio_range=%s: want OFFSET+LENGTH in bytes",
                         o + 10);
                goto fail;
            }
            d->eio_from = from;
            d->eio_to = from + len;
        } else if (strncmp(o, "hold_range=", 11) == 0) {
            char *end;
            unsigned long long from = strtoull(o + 11, &end, 0), len = 0;
            if (*end == '+')
                len = strtoull(end + 1, &end, 0);
            if (*end != '\0' || len == 0) {
                snprintf(err, errlen, "testdev: hold_range=%s: want OFFSET+LENGTH in bytes",
                         o + 11);
                goto fail;
            }
            d->hold_from = from;
            d->hold_to = from + len;
        } else if (strncmp(o, "hold_minlen=", 12) == 0) {
            d->hold_minlen = strtoull(o + 12, NULL, 0);
        } else if (strcmp(o, "hold_once") == 0) {
            d->hold_once = true;
        } else if (strcmp(o, "hold_reply") == 0) {
            d->hold_reply = true;
        } else if (strncmp(o, "eio_maxlen=", 11) == 0) {
            d->eio_maxlen = strtoull(o + 11, NULL, 0);
        } else if (strncmp(o, "eio_minlen=", 11) == 0) {
            d->eio_minlen = strtoull(o + 11, NULL, 0);
        } else if (strncmp(o, "hold_when=", 10) == 0) {
            free(d->hold_when);
            d->hold_when = tc_xstrdup(o + 10);
        } else if (strncmp(o, "eio_ops=", 8) == 0 || strncmp(o, "hold_ops=", 9) == 0) {
            unsigned *ops = o[0] == 'e' ? &d->eio_ops : &d->hold_ops;
            *ops = 0;
            for (const char *k = strchr(o, '=') + 1; *k;) {
                size_t n = strcspn(k, ",");
                if (n == 4 && strncmp(k, "read", 4) == 0)
                    *ops |= EIO_READ;
                else if (n == 5 && strncmp(k, "write", 5) == 0)
                    *ops |= EIO_WRITE;
                else if (n == 5 && strncmp(k, "flush", 5) == 0)
                    *ops |= EIO_FLUSH;
                else {
                    snprintf(err, errlen, "testdev: %.*s: unknown request kind '%.*s' "
                             "(read, write, flush)", (int)(strchr(o, '=') - o), o, (int)n, k);
                    goto fail;
                }
                k += n + (k[n] == ',');
            }
        } else {
            snprintf(err, errlen, "testdev: unknown option '%s' (undo=, undo_append=, "
                     "eio_when=, eio_once, eio_count=, eio_after=, eio_range=, eio_maxlen=, "
                     "eio_minlen=, eio_errno=, eio_ops=, hold_when=, hold_ops=, hold_range=, hold_minlen=, "
                     "hold_once, eio_held)", o);
            goto fail;
        }
    }
    d->dev = *d->inner;
    d->dev.ops = &test_ops;
    d->dev.name = tc_xstrdup(spec);
    memset(&d->dev.stats, 0, sizeof d->dev.stats);
    free(copy);
    return &d->dev;
fail:
    free(copy);
    if (d->inner)
        dev_close(d->inner);
    if (d->undo_fd >= 0)
        close(d->undo_fd);
    if (d->raw_fd >= 0)
        close(d->raw_fd);
    free(d->eio_when);
    free(d->hold_when);
    free(d->undo_path);
    free(d);
    return NULL;
}
