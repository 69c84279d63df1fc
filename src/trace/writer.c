/*
 * The trace writer: the daemon's side of `serve --trace`.
 *
 * Recording sits on the path of every request, so it costs one clock read
 * and a 24-byte copy into memory; the file is written behind, through the
 * reactor, from two buffers:
 *
 *     requests ──► buf[cur] ──full──► write in flight (buf[!cur])
 *                     │                        │
 *                     └──── swap when it completes, or drop ◄──┘
 *
 * While one buffer is being written the other fills.  If it fills before
 * the write completes (a file slower than the requests), requests are
 * counted as dropped rather than waited for: a trace must never slow the
 * volume it watches.  A timer writes a partly filled buffer once a second,
 * so the file is never far behind (a trace can be read while it grows).
 *
 * At the size limit the writer either stops (the default: a trace keeps
 * the first stretch of requests) or rotates (FILE becomes FILE.1 and FILE
 * starts again).  Opening, renaming and the last write at exit are
 * blocking calls: each happens once per file, not per request.  A failed
 * write stops the trace with a message naming the file and offset; the
 * volume goes on serving.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/ondisk.h"
#include "replay/shards.h"
#include "trace/trace.h"
#include "util/crc32c.h"
#include "util/json.h"
#include "util/log.h"
#include "util/misc.h"

/* 4096 records (96 KiB) a buffer, written every 40 ms at 100,000
 * requests a second: a whole number of records, which the tests of
 * fullness below rely on. */
#define TRACE_BUF_RECORDS 4096u
#define TRACE_BUF_BYTES (TRACE_BUF_RECORDS * TC_TRACE_RECORD_BYTES)
#define TRACE_TICK_NS 1000000000ull
/* The live curve: 1 % of the blocks sampled (SHARDS), a window of a
 * million requests, the miss ratio at these multiples of the cache. */
#define MRC_RATE 0.01
#define MRC_WINDOW 1000000u
#define MRC_POINTS 7
static const double mrc_multiples[MRC_POINTS] = { 0.25, 0.5, 1, 1.5, 2, 4, 8 };

/* The smallest file limit: more than a header and two full buffers. */
#define TRACE_MIN_LIMIT (256u * 1024)

struct tc_trace_writer {
    struct tc_reactor *reactor;
    char *path;
    uint64_t limit;
    bool rotate;
    uint64_t volume_size;
    int fd;
    uint32_t part;
    uint64_t start_ns;              /* monotonic time 0 */
    uint64_t start_wall;
    /* Two buffers: cur fills; the other may be in flight. */
    uint8_t *buf[2];
    size_t fill[2];                 /* bytes in each */
    int cur;
    bool writing;                   /* buf[!cur] is being written */
    size_t writing_len;             /* ... its first writing_len bytes: all of them,
                                       or those that fit before a rotation */
    uint64_t file_off;              /* where the next write goes */
    struct tc_io io;
    struct tc_timer tick;
    bool quiesced;
    /* The live curve: SHARDS over the requests, in windows of MRC_WINDOW;
     * the last complete window's curve is kept for status. */
    struct shards *mrc;
    uint64_t mrc_block, mrc_cache;
    uint64_t mrc_in_window;         /* requests of the current window */
    uint64_t mrc_windows;           /* complete windows */
    double mrc_last[MRC_POINTS];    /* the last complete window's curve */
    struct tc_trace_writer_stats st;
    char why[256];
};

void trace_encode_header(uint8_t out[TC_TRACE_HEADER_BYTES], uint64_t start_wall,
                         uint64_t volume_size, uint32_t part)
{
    memset(out, 0, TC_TRACE_HEADER_BYTES);
    memcpy(out, TC_TRACE_MAGIC, 8);
    le32_put(out + 8, TC_TRACE_VERSION);
    le32_put(out + 12, TC_TRACE_HEADER_BYTES);
    le32_put(out + 16, TC_TRACE_RECORD_BYTES);
    le64_put(out + 24, start_wall);
    le64_put(out + 32, volume_size);
    le32_put(out + 40, part);
    le32_put(out + 44, tc_crc32c_skipping(out, TC_TRACE_HEADER_BYTES, 44));
}

void trace_encode_record(uint8_t out[TC_TRACE_RECORD_BYTES], const struct tc_trace_req *req)
{
    le64_put(out, req->time_ns);
    le64_put(out + 8, req->offset);
    le32_put(out + 16, req->length);
    out[20] = req->op;
    out[21] = req->flags;
    le16_put(out + 22, req->client);
}

static void submit_other(struct tc_trace_writer *w);

/* Records buffered in b that will never reach the file. */
static void discard(struct tc_trace_writer *w, int b)
{
    uint64_t n = w->fill[b] / TC_TRACE_RECORD_BYTES;
    w->st.records -= n;
    w->st.not_recorded += n;
    w->fill[b] = 0;
}

static void stop_trace(struct tc_trace_writer *w, const char *fmt, const char *detail)
{
    if (!w->st.active)
        return;
    w->st.active = false;
    snprintf(w->why, sizeof w->why, fmt, detail);
    w->st.stopped_why = w->why;
    discard(w, w->cur);
    if (!w->writing)
        discard(w, !w->cur);
    timer_cancel(w->reactor, &w->tick);
    tc_warn("trace %s: %s; requests are no longer recorded (the volume goes on serving)",
            w->path, w->why);
}

/* Why the file open on fd may not be replaced by a trace, or NULL: only a
 * regular file that is empty or already a trace is.  A block device (its
 * first bytes overwritten by the header) or any other file named by
 * mistake (an origin, a cache device) is left as it is. */
static const char *unusable(int fd)
{
    struct stat st;
    char magic[8];
    if (fstat(fd, &st) < 0)
        return strerror(errno);
    if (!S_ISREG(st.st_mode))
        return "it is not a regular file";
    if (st.st_size > 0 && (pread(fd, magic, sizeof magic, 0) != (ssize_t)sizeof magic ||
                           memcmp(magic, TC_TRACE_MAGIC, sizeof magic) != 0))
        return "the file exists and is not a tiercache trace (no TCTRACE magic); it is left "
               "as it is: give another path, or remove the file";
    return NULL;
}

int trace_writer_check(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        snprintf(err, errlen, "trace %s: %s", path, strerror(errno));
        return -1;
    }
    const char *bad = unusable(fd);
    close(fd);
    if (bad) {
        snprintf(err, errlen, "trace %s: %s", path, bad);
        return -1;
    }
    return 0;
}

static int open_file(struct tc_trace_writer *w, char *err, size_t errlen)
{
    /* Not truncated at the open: unusable() first. */
    int fd = open(w->path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "trace %s: %s", w->path, strerror(errno));
        return -1;
    }
    const char *bad = unusable(fd);
    if (bad == NULL && (ftruncate(fd, 0) < 0 || fcntl(fd, F_SETFL, 0) < 0))  /* io_uring: blocking */
        bad = strerror(errno);
    if (bad) {
        snprintf(err, errlen, "trace %s: %s", w->path, bad);
        close(fd);
        return -1;
    }
    uint8_t hdr[TC_TRACE_HEADER_BYTES];
    trace_encode_header(hdr, w->start_wall, w->volume_size, w->part);
    if (pwrite(fd, hdr, sizeof hdr, 0) != (ssize_t)sizeof hdr) {
        snprintf(err, errlen, "trace %s: writing the header: %s", w->path,
                 errno ? strerror(errno) : "short write");
        close(fd);
        return -1;
    }
    w->fd = fd;
    w->file_off = sizeof hdr;
    w->st.bytes_written = sizeof hdr;
    return 0;
}

static void stop_at_limit(struct tc_trace_writer *w)
{
    char lim[32];
    snprintf(lim, sizeof lim, "%llu", (unsigned long long)w->limit);
    stop_trace(w, "reached its limit of %s bytes (--trace-limit)", lim);
}

/* FILE becomes FILE.1 and FILE starts again.  Called with no write in
 * flight; false if the trace had to stop. */
static bool rotate(struct tc_trace_writer *w)
{
    char old[4200], err[4400];
    snprintf(old, sizeof old, "%s.1", w->path);
    close(w->fd);
    w->fd = -1;
    /* FILE.1 is replaced only if it is a trace (an earlier part). */
    if (trace_writer_check(old, err, sizeof err) < 0) {
        stop_trace(w, "%s", err);
        return false;
    }
    if (rename(w->path, old) < 0) {
        snprintf(err, sizeof err, "renaming it to %s: %s", old, strerror(errno));
        stop_trace(w, "%s", err);
        return false;
    }
    w->part++;
    if (open_file(w, err, sizeof err) < 0) {
        stop_trace(w, "%s", err);
        return false;
    }
    w->st.rotations++;
    tc_info("trace %s: rotated at %llu bytes; the previous part is %s", w->path,
            (unsigned long long)w->limit, old);
    return true;
}

static void write_done(struct tc_io *io, int res)
{
    struct tc_trace_writer *w = container_of(io, struct tc_trace_writer, io);
    int other = !w->cur;
    size_t want = w->writing_len;
    w->writing = false;
    if (res < 0 || (size_t)res != want) {
        char detail[160];
        snprintf(detail, sizeof detail, "writing %zu bytes at offset %llu failed: %s", want,
                 (unsigned long long)w->file_off,
                 res < 0 ? strerror(-res) : "short write");
        discard(w, other);
        stop_trace(w, "%s", detail);
        return;
    }
    w->file_off += want;
    w->st.bytes_written += want;
    if (want < w->fill[other]) {
        /* The part that fit filled the file to its limit: the rest goes
         * first into the next part. */
        memmove(w->buf[other], w->buf[other] + want, w->fill[other] - want);
        w->fill[other] -= want;
        if (!rotate(w)) {
            discard(w, other);
            return;
        }
        submit_other(w);
        return;
    }
    w->fill[other] = 0;
    if (!w->rotate && w->file_off + TC_TRACE_RECORD_BYTES > w->limit) {
        stop_at_limit(w);
        return;
    }
    /* The current buffer may have filled meanwhile. */
    if (w->st.active && !w->quiesced && w->fill[w->cur] + TC_TRACE_RECORD_BYTES > TRACE_BUF_BYTES) {
        w->cur = !w->cur;
        submit_other(w);
    }
}

/* Write buf[!cur] (filled, not in flight) at file_off.  Rotating, the
 * records that fit below the limit are written first and the rest into
 * the next part (write_done()): every part but the newest holds as many
 * records as the limit allows.  A buffer always fits an empty file (the
 * limit is at least TRACE_MIN_LIMIT).  Without rotation what passes the
 * limit is not recorded. */
static void submit_other(struct tc_trace_writer *w)
{
    int other = !w->cur;
    if (w->fill[other] == 0)
        return;
    size_t len = w->fill[other];
    if (w->file_off + w->fill[other] > w->limit) {
        if (w->rotate) {
            uint64_t room = w->file_off < w->limit ? w->limit - w->file_off : 0;
            room -= room % TC_TRACE_RECORD_BYTES;
            if (room > 0) {
                len = (size_t)room;
            } else if (!rotate(w)) {
                discard(w, other);
                return;
            }
        } else {
            uint64_t room = w->limit - w->file_off;
            room -= room % TC_TRACE_RECORD_BYTES;
            uint64_t excess = (w->fill[other] - room) / TC_TRACE_RECORD_BYTES;
            w->st.records -= excess;
            w->st.not_recorded += excess;
            w->fill[other] = (size_t)room;
            len = (size_t)room;
            if (room == 0) {
                stop_at_limit(w);
                return;
            }
        }
    }
    w->writing = true;
    w->writing_len = len;
    io_uring_prep_write(reactor_sqe(w->reactor, &w->io), w->fd, w->buf[other],
                        (unsigned)len, w->file_off);
}

static void tick(struct tc_timer *t)
{
    struct tc_trace_writer *w = container_of(t, struct tc_trace_writer, tick);
    if (w->quiesced || !w->st.active)
        return;
    if (!w->writing && w->fill[w->cur] > 0) {
        w->cur = !w->cur;
        submit_other(w);
    }
    if (w->st.active)
        timer_arm(w->reactor, &w->tick, TRACE_TICK_NS);
}

struct tc_trace_writer *trace_writer_open(struct tc_reactor *r,
                                          const struct tc_trace_writer_config *cfg, char *err,
                                          size_t errlen)
{
    if (cfg->limit < TRACE_MIN_LIMIT) {
        snprintf(err, errlen, "--trace-limit %llu bytes is too small: give at least 256K",
                 (unsigned long long)cfg->limit);
        return NULL;
    }
    struct tc_trace_writer *w = tc_xcalloc(1, sizeof *w);
    w->reactor = r;
    w->path = tc_xstrdup(cfg->path);
    w->limit = cfg->limit;
    w->rotate = cfg->rotate;
    w->volume_size = cfg->volume_size;
    w->fd = -1;
    w->start_ns = tc_now_ns();
    w->start_wall = tc_wall_ns();
    w->st.active = true;
    w->st.stopped_why = "";
    if (open_file(w, err, errlen) < 0) {
        free(w->path);
        free(w);
        return NULL;
    }
    w->buf[0] = tc_xmalloc(TRACE_BUF_BYTES);
    w->buf[1] = tc_xmalloc(TRACE_BUF_BYTES);
    if (cfg->mrc_block_bytes && cfg->mrc_cache_bytes) {
        w->mrc = shards_new(MRC_RATE, cfg->mrc_block_bytes);
        w->mrc_block = cfg->mrc_block_bytes;
        w->mrc_cache = cfg->mrc_cache_bytes;
    }
    w->io.done = write_done;
    w->tick.fn = tick;
    timer_arm(r, &w->tick, TRACE_TICK_NS);
    return w;
}

static void mrc_sizes(const struct tc_trace_writer *w, uint64_t *sizes)
{
    for (unsigned i = 0; i < MRC_POINTS; i++)
        sizes[i] = (uint64_t)((double)w->mrc_cache * mrc_multiples[i]);
}

/* Every request, recorded in the file or not: the curve follows the
 * volume, whatever happened to the file. */
static void mrc_record(struct tc_trace_writer *w, uint8_t op, uint64_t offset, uint32_t length)
{
    shards_request(w->mrc, op, offset, length);
    if (++w->mrc_in_window < MRC_WINDOW)
        return;
    uint64_t sizes[MRC_POINTS];
    mrc_sizes(w, sizes);
    shards_curve(w->mrc, sizes, MRC_POINTS, w->mrc_last);
    shards_new_window(w->mrc);
    w->mrc_in_window = 0;
    w->mrc_windows++;
}

void trace_writer_record(struct tc_trace_writer *w, uint8_t op, uint8_t flags, uint64_t offset,
                         uint32_t length, uint16_t client)
{
    if (w->mrc)
        mrc_record(w, op, offset, length);
    if (!w->st.active || w->quiesced) {
        w->st.not_recorded++;
        return;
    }
    if (w->fill[w->cur] + TC_TRACE_RECORD_BYTES > TRACE_BUF_BYTES) {
        /* Full, and the other buffer is still being written (else the
         * swap below would have happened). */
        w->st.dropped++;
        return;
    }
    struct tc_trace_req req = {
        .time_ns = tc_now_ns() - w->start_ns, .offset = offset, .length = length, .op = op,
        .flags = flags, .client = client,
    };
    trace_encode_record(w->buf[w->cur] + w->fill[w->cur], &req);
    w->fill[w->cur] += TC_TRACE_RECORD_BYTES;
    w->st.records++;
    if (w->fill[w->cur] == TRACE_BUF_BYTES && !w->writing) {
        w->cur = !w->cur;
        submit_other(w);
    }
}

void trace_writer_stats(const struct tc_trace_writer *w, struct tc_trace_writer_stats *st)
{
    *st = w->st;
}

const char *trace_writer_path(const struct tc_trace_writer *w)
{
    return w->path;
}

void trace_writer_quiesce(struct tc_trace_writer *w)
{
    w->quiesced = true;
    timer_cancel(w->reactor, &w->tick);
}

/* At exit: the reactor has ended, so no write is in flight.  What is
 * buffered goes to the file with plain writes, oldest first. */
void trace_writer_close(struct tc_trace_writer *w)
{
    if (!w)
        return;
    for (int k = 0; k < 2 && w->st.active && w->fd >= 0; k++) {
        int b = k == 0 ? !w->cur : w->cur;
        uint64_t room = w->limit > w->file_off ? w->limit - w->file_off : 0;
        size_t n = (size_t)TC_MIN((uint64_t)w->fill[b], room - room % TC_TRACE_RECORD_BYTES);
        uint64_t cut = (w->fill[b] - n) / TC_TRACE_RECORD_BYTES;
        w->st.records -= cut;
        w->st.not_recorded += cut;
        if (n == 0)
            continue;
        ssize_t got = pwrite(w->fd, w->buf[b], n, (off_t)w->file_off);
        if (got != (ssize_t)n) {
            tc_warn("trace %s: writing %zu bytes at offset %llu at exit failed: %s", w->path, n,
                    (unsigned long long)w->file_off, got < 0 ? strerror(errno) : "short write");
            break;
        }
        w->file_off += n;
        w->st.bytes_written += n;
    }
    if (w->fd >= 0 && close(w->fd) < 0)
        tc_warn("trace %s: closing it: %s", w->path, strerror(errno));
    tc_info("trace %s: %llu requests recorded, %llu dropped, %llu after it stopped",
            w->path, (unsigned long long)w->st.records, (unsigned long long)w->st.dropped,
            (unsigned long long)w->st.not_recorded);
    shards_free(w->mrc);
    free(w->buf[0]);
    free(w->buf[1]);
    free(w->path);
    free(w);
}

void trace_status_json(const struct tc_trace_writer *w, struct tc_json *j)
{
    json_begin_object(j, "trace");
    json_string(j, "path", w->path);
    json_bool(j, "active", w->st.active);
    json_string(j, "stopped_why", w->st.stopped_why);
    json_uint(j, "records", w->st.records);
    json_uint(j, "dropped", w->st.dropped);
    json_uint(j, "not_recorded", w->st.not_recorded);
    json_uint(j, "file_bytes", w->st.bytes_written);
    json_uint(j, "limit_bytes", w->limit);
    json_bool(j, "rotate", w->rotate);
    json_uint(j, "rotations", w->st.rotations);
    if (w->mrc) {
        /* The LRU curve of the last complete window of requests (or of
         * the current one, until a window is complete): would a larger
         * cache help, without stopping anything. */
        uint64_t sizes[MRC_POINTS];
        double cur[MRC_POINTS];
        const double *miss = w->mrc_last;
        mrc_sizes(w, sizes);
        if (w->mrc_windows == 0) {
            shards_curve(w->mrc, sizes, MRC_POINTS, cur);
            miss = cur;
        }
        json_begin_object(j, "lru_miss_ratio_curve");
        json_uint(j, "window_requests", MRC_WINDOW);
        json_uint(j, "requests_in_window", w->mrc_in_window);
        json_bool(j, "from_complete_window", w->mrc_windows > 0);
        json_double(j, "sample_rate", MRC_RATE);
        json_uint(j, "block_bytes", w->mrc_block);
        json_uint(j, "memory_bytes", shards_memory(w->mrc));
        json_begin_array(j, "points");
        for (unsigned i = 0; i < MRC_POINTS; i++) {
            json_begin_object(j, NULL);
            json_uint(j, "cache_bytes", sizes[i]);
            json_double(j, "cache_multiple", mrc_multiples[i]);
            json_double(j, "read_miss_ratio", miss[i]);
            json_end_object(j);
        }
        json_end_array(j);
        json_end_object(j);
    }
    json_end_object(j);
}
