/*
 * Request traces: what clients asked of a volume, in order, with times.
 *
 * `tiercache serve --trace FILE` records every request the NBD front end
 * hands to the engine; `tiercache trace-info` and `trace-convert` read
 * those files and the block traces other tools publish.  A trace is the
 * input of cache sizing and of judging policies on a user's own traffic.
 *
 * The file format (version 1), little-endian:
 *
 *   header, 64 bytes
 *     0   magic        "TCTRACE\n"
 *     8   version      u32 = 1
 *    12   header_bytes u32 = 64
 *    16   record_bytes u32 = 24
 *    20   flags        u32 = 0 (a reader refuses other bits)
 *    24   start_wall   u64: wall clock (ns since 1970) at time 0
 *    32   volume_size  u64: bytes exported when recording started (0: unknown)
 *    40   part         u32: 0 for the first file, +1 at each rotation
 *    44   crc          u32: CRC-32C of the 64 bytes with this field zero
 *    48   reserved     16 bytes of zero
 *   then records, 24 bytes each, to the end of the file
 *     0   time_ns      u64: ns since the trace's time 0 (monotonic clock)
 *     8   offset       u64: bytes
 *    16   length       u32: bytes (0 for flush)
 *    20   op           u8:  enum tc_op (0 read, 1 write, 2 flush, 3 trim,
 *                           4 write-zeroes, 5 cache, 6 block status)
 *    21   flags        u8:  TC_REQ_* of the request
 *    22   client       u16: the connection's number, modulo 65536
 *
 * Records carry no checksum: a trace is a measurement, not data to keep
 * safe, and the writer only appends.  A file cut short by a crash ends
 * inside a record at worst; readers stop at the last whole record and say
 * how many bytes they left.  Rotation (--trace-rotate) renames FILE to
 * FILE.1 (replacing an older FILE.1) and starts FILE again with the next
 * part number and the same time 0, so the two parts read in order give the
 * newest stretch of requests.
 */
#ifndef TC_TRACE_TRACE_H
#define TC_TRACE_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "io/reactor.h"

#define TC_TRACE_MAGIC "TCTRACE\n"
#define TC_TRACE_VERSION 1
#define TC_TRACE_HEADER_BYTES 64
#define TC_TRACE_RECORD_BYTES 24

/* One request of a trace, whatever file it came from. */
struct tc_trace_req {
    uint64_t time_ns;               /* since the trace's first request or time 0 */
    uint64_t offset;                /* bytes */
    uint32_t length;                /* bytes */
    uint8_t op;                     /* enum tc_op */
    uint8_t flags;                  /* TC_REQ_* (native traces only) */
    uint16_t client;
};

/* ---- writing (the daemon) ---- */

struct tc_trace_writer_config {
    const char *path;
    uint64_t limit;                 /* bytes per file, header included */
    bool rotate;                    /* at the limit: rotate (else stop recording) */
    uint64_t volume_size;
    /* The live miss-ratio curve (status): the LRU curve of the last window
     * of requests over blocks of mrc_block_bytes (0: no curve), at
     * multiples of mrc_cache_bytes (the cache's capacity). */
    uint64_t mrc_block_bytes;
    uint64_t mrc_cache_bytes;
};

/* What status shows of a trace being written. */
struct tc_trace_writer_stats {
    uint64_t records;               /* recorded (in memory or in the file) */
    uint64_t bytes_written;         /* in the current file, header included */
    uint64_t dropped;               /* not recorded: both buffers were waiting
                                       for the file (it is slower than the
                                       requests) */
    uint64_t not_recorded;          /* after the trace stopped (limit, error) */
    uint64_t rotations;
    bool active;
    const char *stopped_why;        /* "" while active */
};

struct tc_trace_writer;

/* Creates (or truncates) the file and writes its header; NULL with err
 * naming the file and the reason.  Records are appended through the
 * reactor; the file is written at least once a second. */
struct tc_trace_writer *trace_writer_open(struct tc_reactor *r,
                                          const struct tc_trace_writer_config *cfg, char *err,
                                          size_t errlen);
/* Before the volume is opened: 0 if path is missing, or a regular file
 * that is empty or a trace (what trace_writer_open() replaces); else -1
 * with err naming it and why it is left alone. */
int trace_writer_check(const char *path, char *err, size_t errlen);
/* Records one request.  Never blocks and never fails: when the file cannot
 * keep up, the request is counted as dropped. */
void trace_writer_record(struct tc_trace_writer *w, uint8_t op, uint8_t flags, uint64_t offset,
                         uint32_t length, uint16_t client);
void trace_writer_stats(const struct tc_trace_writer *w, struct tc_trace_writer_stats *st);
const char *trace_writer_path(const struct tc_trace_writer *w);
struct tc_json;
/* The "trace" object of status --json. */
void trace_status_json(const struct tc_trace_writer *w, struct tc_json *j);
/* Cancels the timer and stops new writes: the reactor may end once the
 * writes in flight complete. */
void trace_writer_quiesce(struct tc_trace_writer *w);
/* Writes what is still buffered (blocking: at exit, after the reactor
 * ended) and frees the writer. */
void trace_writer_close(struct tc_trace_writer *w);

/* ---- reading ---- */

enum tc_trace_format {
    TC_TRACE_NATIVE,        /* the format above */
    TC_TRACE_BLKPARSE,      /* blkparse's default text output */
    TC_TRACE_MSR,           /* MSR Cambridge / SNIA CSV */
    TC_TRACE_SPC,           /* UMass / SPC CSV */
    TC_TRACE_ARC,           /* the ARC paper's .lis */
    TC_TRACE_ORACLE,        /* libCacheSim oracleGeneral binary */
    TC_TRACE_CSV,           /* libCacheSim-style CSV with a header line */
};

/* Names as the command line takes them ("native", "blkparse", ...); -1 if
 * unknown.  trace_format_names() lists them for messages. */
int trace_format_parse(const char *name);
const char *trace_format_name(enum tc_trace_format f);
const char *trace_format_names(void);

struct tc_trace_reader_options {
    /* Formats whose requests name objects rather than byte ranges
     * (oracleGeneral, CSV without an offset column): object k covers
     * bytes [k * object_bytes, (k + 1) * object_bytes).  Default 4096. */
    uint64_t object_bytes;
    /* blkparse: the action whose events are the requests ('D', issued to
     * the device, by default; 'Q' for requests as queued). */
    char blkparse_action;
};

struct tc_trace_reader;

/* NULL with err naming the file and the reason. */
struct tc_trace_reader *trace_reader_open(const char *path, enum tc_trace_format f,
                                          const struct tc_trace_reader_options *opt, char *err,
                                          size_t errlen);
/* The same over a stream the caller owns (and closes after the reader). */
struct tc_trace_reader *trace_reader_from(FILE *in, const char *name, enum tc_trace_format f,
                                          const struct tc_trace_reader_options *opt, char *err,
                                          size_t errlen);
/* 1: *req filled; 0: the end; -1: malformed input, err names the line
 * (text) or byte offset (binary) and what is wrong. */
int trace_reader_next(struct tc_trace_reader *r, struct tc_trace_req *req, char *err,
                      size_t errlen);
/* Bytes at the end of a native or oracleGeneral file that did not make a
 * whole record (a file cut short), known once next() returned 0. */
uint64_t trace_reader_trailing(const struct tc_trace_reader *r);
/* Lines skipped as not requests (blkparse events other than issues,
 * comments, the CSV header). */
uint64_t trace_reader_skipped(const struct tc_trace_reader *r);
/* A native file's volume size (0 if unknown or another format). */
uint64_t trace_reader_volume_size(const struct tc_trace_reader *r);
void trace_reader_close(struct tc_trace_reader *r);

/* Encodes the native header and one record (for writers and converters). */
void trace_encode_header(uint8_t out[TC_TRACE_HEADER_BYTES], uint64_t start_wall,
                         uint64_t volume_size, uint32_t part);
void trace_encode_record(uint8_t out[TC_TRACE_RECORD_BYTES], const struct tc_trace_req *req);

#endif
