/*
 * Trace readers: one iterator over the native format and the block traces
 * that are published elsewhere, so that everything reading traces (info,
 * convert, replay) sees the same struct tc_trace_req.
 *
 * The foreign formats, as read here:
 *
 *   blkparse   blkparse's default text output.  One request per event of
 *              the chosen action (default D, "issued to the device"; Q
 *              for requests as queued): "MAJ,MIN CPU SEQ SECONDS PID ACTION
 *              RWBS SECTOR + COUNT [PROCESS]".  RWBS: D discard (trim), W
 *              write, R read, F with no sector a flush, N none (skipped).
 *              Lines of other actions and blkparse's summary are skipped.
 *   msr        MSR Cambridge / SNIA: Timestamp,Hostname,DiskNumber,Type,
 *              Offset,Size,ResponseTime; time in 100 ns ticks, Type Read or
 *              Write, offset and size in bytes.
 *   spc        UMass / SPC: ASU,LBA,Size,Opcode,Timestamp; LBA in 512-byte
 *              sectors, size in bytes, opcode r or w, time in seconds.  Each
 *              ASU is its own address space: ASU n starts at n TiB.
 *   arc        The ARC paper's .lis: "START COUNT IGNORED REQUEST" per
 *              line, 512-byte blocks, all reads; time is the line number
 *              (in ns), as the traces carry none.
 *   oracle     libCacheSim's oracleGeneral: 24-byte records, u32 time (s),
 *              u64 object id, u32 object size, i64 next access; all reads
 *              of the object's extent (see object_bytes).
 *   csv        A CSV with a header line naming its columns: time (or
 *              timestamp, clock_time; seconds), obj_id (or id, key) or
 *              offset (bytes), obj_size (or size; bytes), op (or type: r,
 *              read, get, w, write, set, trim, flush).  Only obj_id or offset
 *              is required.
 *
 * Times become nanoseconds since the first request.  Malformed input is an
 * error naming the line (text) or byte offset (binary), never a guess:
 * a trace that is silently misread gives a wrong answer to the question
 * it was captured for.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "format/ondisk.h"
#include "tiercache.h"
#include "trace/trace.h"
#include "util/crc32c.h"
#include "util/misc.h"

#define MAX_FIELDS 16

struct tc_trace_reader {
    FILE *in;
    bool own;                       /* opened here: closed here */
    char *name;
    enum tc_trace_format fmt;
    struct tc_trace_reader_options opt;
    char blk_action;
    uint64_t line;                  /* text: lines read */
    uint64_t offset;                /* binary: bytes read */
    uint64_t trailing;
    uint64_t skipped;
    uint64_t volume_size;
    bool have_first;
    uint64_t first_time;            /* the format's unit */
    double first_seconds;
    char *buf;
    size_t cap;
    /* binary: records read ahead, a large fread at a time rather than one
     * per record (rec[rpos, rlen) not yet taken) */
    uint8_t *rec;
    size_t rpos, rlen;
    /* csv: column of each field, -1 if absent */
    int col_time, col_id, col_offset, col_size, col_op;
    bool header_read;
};

static const char *const format_names[] = {
    [TC_TRACE_NATIVE] = "native", [TC_TRACE_BLKPARSE] = "blkparse", [TC_TRACE_MSR] = "msr",
    [TC_TRACE_SPC] = "spc",       [TC_TRACE_ARC] = "arc",           [TC_TRACE_ORACLE] = "oracle",
    [TC_TRACE_CSV] = "csv",
};

int trace_format_parse(const char *name)
{
    for (size_t i = 0; i < TC_ARRAY_SIZE(format_names); i++)
        if (strcmp(name, format_names[i]) == 0)
            return (int)i;
    return -1;
}

const char *trace_format_name(enum tc_trace_format f)
{
    return (size_t)f < TC_ARRAY_SIZE(format_names) ? format_names[f] : "?";
}

const char *trace_format_names(void)
{
    return "native, blkparse, msr, spc, arc, oracle, csv";
}

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- opening ---- */

static int read_native_header(struct tc_trace_reader *r, char *err, size_t errlen)
{
    uint8_t h[TC_TRACE_HEADER_BYTES];
    size_t got = fread(h, 1, sizeof h, r->in);
    if (got != sizeof h)
        return fail(err, errlen, "%s: %zu bytes, too short for a trace header (%u bytes)",
                    r->name, got, TC_TRACE_HEADER_BYTES);
    if (memcmp(h, TC_TRACE_MAGIC, 8) != 0)
        return fail(err, errlen, "%s: not a tiercache trace (no TCTRACE magic); give "
                    "--format for another format (%s)", r->name, trace_format_names());
    uint32_t version = le32_get(h + 8);
    if (version != TC_TRACE_VERSION)
        return fail(err, errlen, "%s: trace version %u is not supported (this build reads "
                    "version %u)", r->name, version, TC_TRACE_VERSION);
    if (le32_get(h + 12) != TC_TRACE_HEADER_BYTES || le32_get(h + 16) != TC_TRACE_RECORD_BYTES ||
        le32_get(h + 20) != 0)
        return fail(err, errlen, "%s: header of %u bytes, records of %u, flags 0x%x: not "
                    "what version 1 says", r->name, le32_get(h + 12), le32_get(h + 16),
                    le32_get(h + 20));
    if (tc_crc32c_skipping(h, sizeof h, 44) != le32_get(h + 44))
        return fail(err, errlen, "%s: trace header checksum mismatch", r->name);
    r->volume_size = le64_get(h + 32);
    r->offset = sizeof h;
    return 0;
}

struct tc_trace_reader *trace_reader_from(FILE *in, const char *name, enum tc_trace_format f,
                                          const struct tc_trace_reader_options *opt, char *err,
                                          size_t errlen)
{
    if ((size_t)f >= TC_ARRAY_SIZE(format_names)) {
        fail(err, errlen, "unknown trace format %d", (int)f);
        return NULL;
    }
    struct tc_trace_reader *r = tc_xcalloc(1, sizeof *r);
    r->in = in;
    r->name = tc_xstrdup(name);
    r->fmt = f;
    if (opt)
        r->opt = *opt;
    if (r->opt.object_bytes == 0)
        r->opt.object_bytes = 4096;
    r->blk_action = r->opt.blkparse_action ? r->opt.blkparse_action : 'D';
    r->col_time = r->col_id = r->col_offset = r->col_size = r->col_op = -1;
    if (f == TC_TRACE_NATIVE && read_native_header(r, err, errlen) < 0) {
        free(r->name);
        free(r);
        return NULL;
    }
    return r;
}

struct tc_trace_reader *trace_reader_open(const char *path, enum tc_trace_format f,
                                          const struct tc_trace_reader_options *opt, char *err,
                                          size_t errlen)
{
    FILE *in = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!in) {
        fail(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    setvbuf(in, NULL, _IOFBF, 1u << 18);    /* records are small: read ahead in large pieces */
    struct tc_trace_reader *r = trace_reader_from(in, path, f, opt, err, errlen);
    if (!r) {
        if (in != stdin)
            fclose(in);
        return NULL;
    }
    r->own = in != stdin;
    return r;
}

void trace_reader_close(struct tc_trace_reader *r)
{
    if (!r)
        return;
    if (r->own)
        fclose(r->in);
    free(r->buf);
    free(r->rec);
    free(r->name);
    free(r);
}

uint64_t trace_reader_trailing(const struct tc_trace_reader *r) { return r->trailing; }
uint64_t trace_reader_skipped(const struct tc_trace_reader *r) { return r->skipped; }
uint64_t trace_reader_volume_size(const struct tc_trace_reader *r) { return r->volume_size; }

/* ---- binary formats ---- */

/* 1: a whole record; 0: the end (a part record is counted as trailing). */
#define READ_AHEAD (64 * 1024)

static int read_record(struct tc_trace_reader *r, uint8_t *rec, size_t len)
{
    if (r->rlen - r->rpos < len) {
        if (r->rec == NULL)
            r->rec = tc_xmalloc(READ_AHEAD);
        memmove(r->rec, r->rec + r->rpos, r->rlen - r->rpos);
        r->rlen -= r->rpos;
        r->rpos = 0;
        /* One reader per stream: no stdio locking. */
        r->rlen += fread_unlocked(r->rec + r->rlen, 1, READ_AHEAD - r->rlen, r->in);
        if (r->rlen < len) {
            r->trailing = r->rlen;
            return 0;
        }
    }
    memcpy(rec, r->rec + r->rpos, len);
    r->rpos += len;
    r->offset += len;
    return 1;
}

static int next_native(struct tc_trace_reader *r, struct tc_trace_req *q, char *err,
                       size_t errlen)
{
    uint8_t rec[TC_TRACE_RECORD_BYTES];
    uint64_t at = r->offset;
    if (read_record(r, rec, sizeof rec) == 0)
        return 0;
    q->time_ns = le64_get(rec);
    q->offset = le64_get(rec + 8);
    q->length = le32_get(rec + 16);
    q->op = rec[20];
    q->flags = rec[21];
    q->client = le16_get(rec + 22);
    if (q->op > TC_OP_BLOCK_STATUS)
        return fail(err, errlen, "%s: record at byte %llu has unknown operation %u", r->name,
                    (unsigned long long)at, q->op);
    if (q->offset + q->length < q->offset)
        return fail(err, errlen, "%s: record at byte %llu: offset %llu + length %u overflows",
                    r->name, (unsigned long long)at, (unsigned long long)q->offset, q->length);
    return 1;
}

static int next_oracle(struct tc_trace_reader *r, struct tc_trace_req *q, char *err,
                       size_t errlen)
{
    uint8_t rec[24];
    uint64_t at = r->offset;
    if (read_record(r, rec, sizeof rec) == 0)
        return 0;
    uint64_t t = le32_get(rec);
    uint64_t id = le64_get(rec + 4);
    uint64_t unit = r->opt.object_bytes;
    if (id > (UINT64_MAX - unit) / unit)
        return fail(err, errlen, "%s: record at byte %llu: object id %llu is beyond a 64-bit "
                    "volume of %llu-byte objects", r->name, (unsigned long long)at,
                    (unsigned long long)id, (unsigned long long)unit);
    if (!r->have_first) {
        r->have_first = true;
        r->first_time = t;
    }
    if (t < r->first_time)
        return fail(err, errlen, "%s: record at byte %llu: time %llu s is before the first "
                    "record's %llu s", r->name, (unsigned long long)at, (unsigned long long)t,
                    (unsigned long long)r->first_time);
    memset(q, 0, sizeof *q);
    q->time_ns = (t - r->first_time) * 1000000000ull;
    q->offset = id * unit;
    q->length = (uint32_t)unit;
    q->op = TC_OP_READ;
    return 1;
}

/* ---- text formats ---- */

/* The next line without its end; 0 at the end of the input. */
static int next_line(struct tc_trace_reader *r, char **line)
{
    ssize_t n = getline(&r->buf, &r->cap, r->in);
    if (n < 0)
        return 0;
    r->line++;
    while (n > 0 && (r->buf[n - 1] == '\n' || r->buf[n - 1] == '\r'))
        r->buf[--n] = '\0';
    *line = r->buf;
    return 1;
}

static bool blank(const char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    return *s == '\0' || *s == '#';
}

/* Split s in place at any of seps; empty fields kept for CSV, runs of
 * blanks merged for whitespace. */
static unsigned split(char *s, const char *seps, bool merge, char **f, unsigned max)
{
    unsigned n = 0;
    for (;;) {
        if (merge)
            while (*s && strchr(seps, *s))
                s++;
        if (!*s && merge)
            break;
        if (n == max)
            return max + 1;
        f[n++] = s;
        s += strcspn(s, seps);
        if (!*s)
            break;
        *s++ = '\0';
    }
    for (unsigned i = 0; i < n; i++) {           /* trim blanks around fields */
        while (isspace((unsigned char)*f[i]))
            f[i]++;
        char *e = f[i] + strlen(f[i]);
        while (e > f[i] && isspace((unsigned char)e[-1]))
            *--e = '\0';
    }
    return n;
}

/* The fields of the next line that is not blank or a # comment (those are
 * counted as skipped); 0 at the end.  *n is the number of fields, or
 * MAX_FIELDS + 1 when the line has more. */
static int next_fields(struct tc_trace_reader *r, const char *seps, bool merge, char **f,
                       unsigned *n)
{
    char *line;
    while (next_line(r, &line)) {
        if (blank(line)) {
            r->skipped++;
            continue;
        }
        *n = split(line, seps, merge, f, MAX_FIELDS);
        return 1;
    }
    return 0;
}

static int parse_u64(struct tc_trace_reader *r, const char *what, const char *s, uint64_t *out,
                     char *err, size_t errlen)
{
    char *end;
    errno = 0;
    if (!isdigit((unsigned char)*s))
        return fail(err, errlen, "%s: line %llu: %s '%s' is not a number", r->name,
                    (unsigned long long)r->line, what, s);
    unsigned long long v = strtoull(s, &end, 10);
    if (errno == ERANGE)
        return fail(err, errlen, "%s: line %llu: %s %s is too large", r->name,
                    (unsigned long long)r->line, what, s);
    if (*end)
        return fail(err, errlen, "%s: line %llu: %s '%s' is not a number", r->name,
                    (unsigned long long)r->line, what, s);
    *out = v;
    return 0;
}

static int parse_seconds(struct tc_trace_reader *r, const char *what, const char *s,
                         double *out, char *err, size_t errlen)
{
    char *end;
    if (!isdigit((unsigned char)*s) && *s != '.')
        return fail(err, errlen, "%s: line %llu: %s '%s' is not a time in seconds", r->name,
                    (unsigned long long)r->line, what, s);
    double v = strtod(s, &end);
    if (*end || !(v >= 0) || v > 1e9)     /* 31 years: in ns, well within 64 bits */
        return fail(err, errlen, "%s: line %llu: %s '%s' is not a time in seconds (0 to 1e9)",
                    r->name, (unsigned long long)r->line, what, s);
    *out = v;
    return 0;
}

/* Time in ns since the first request, from seconds. */
static int since_first(struct tc_trace_reader *r, double seconds, uint64_t *ns, char *err,
                       size_t errlen)
{
    if (!r->have_first) {
        r->have_first = true;
        r->first_seconds = seconds;
    }
    double d = seconds - r->first_seconds;
    if (d < 0)
        d = 0;          /* traces from several CPUs interleave slightly out of order */
    *ns = (uint64_t)(d * 1e9 + 0.5);
    return 0;
}

/* offset + length within 64 bits, length within 32. */
static int set_range(struct tc_trace_reader *r, struct tc_trace_req *q, uint64_t off,
                     uint64_t len, char *err, size_t errlen)
{
    if (len > UINT32_MAX)
        return fail(err, errlen, "%s: line %llu: a request of %llu bytes is larger than 4 GiB",
                    r->name, (unsigned long long)r->line, (unsigned long long)len);
    if (off + len < off)
        return fail(err, errlen, "%s: line %llu: offset %llu + length %llu is beyond 64 bits",
                    r->name, (unsigned long long)r->line, (unsigned long long)off,
                    (unsigned long long)len);
    q->offset = off;
    q->length = (uint32_t)len;
    return 0;
}

static int sectors_to_bytes(struct tc_trace_reader *r, const char *what, uint64_t sectors,
                            uint64_t *bytes, char *err, size_t errlen)
{
    if (sectors > UINT64_MAX / 512)
        return fail(err, errlen, "%s: line %llu: %s %llu sectors is beyond 64 bits of bytes",
                    r->name, (unsigned long long)r->line, what, (unsigned long long)sectors);
    *bytes = sectors * 512;
    return 0;
}

static int next_blkparse(struct tc_trace_reader *r, struct tc_trace_req *q, char *err,
                         size_t errlen)
{
    char *line, *f[MAX_FIELDS];
    while (next_line(r, &line)) {
        unsigned n = split(line, " \t", true, f, MAX_FIELDS);
        /* An event line starts "MAJ,MIN CPU SEQ SECONDS PID ACTION RWBS". */
        if (n < 7 || n > MAX_FIELDS || !strchr(f[0], ',') || !isdigit((unsigned char)*f[0]) ||
            strlen(f[5]) != 1 || f[5][0] != r->blk_action) {
            r->skipped++;
            continue;
        }
        memset(q, 0, sizeof *q);
        double secs;
        if (parse_seconds(r, "time", f[3], &secs, err, errlen) < 0 ||
            since_first(r, secs, &q->time_ns, err, errlen) < 0)
            return -1;
        const char *rwbs = f[6];
        bool has_range = n >= 10 && strcmp(f[8], "+") == 0;
        if (strchr(rwbs, 'F') && !has_range) {
            q->op = TC_OP_FLUSH;    /* a flush alone: "FWS [jbd2]" */
            return 1;
        }
        if (strchr(rwbs, 'D'))
            q->op = TC_OP_TRIM;
        else if (strchr(rwbs, 'W'))
            q->op = TC_OP_WRITE;
        else if (strchr(rwbs, 'R'))
            q->op = TC_OP_READ;
        else {
            r->skipped++;           /* N: no data */
            continue;
        }
        if (!has_range)
            return fail(err, errlen, "%s: line %llu: a %s event without \"SECTOR + COUNT\"",
                        r->name, (unsigned long long)r->line, rwbs);
        uint64_t sector, count, off = 0, len = 0;
        if (parse_u64(r, "sector", f[7], &sector, err, errlen) < 0 ||
            parse_u64(r, "sector count", f[9], &count, err, errlen) < 0 ||
            sectors_to_bytes(r, "sector", sector, &off, err, errlen) < 0 ||
            sectors_to_bytes(r, "count", count, &len, err, errlen) < 0 ||
            set_range(r, q, off, len, err, errlen) < 0)
            return -1;
        if (len == 0) {
            r->skipped++;
            continue;
        }
        return 1;
    }
    return 0;
}

static int op_from_word(const char *s)
{
    static const struct { const char *word; int op; } words[] = {
        { "r", TC_OP_READ },   { "read", TC_OP_READ },        { "get", TC_OP_READ },
        { "w", TC_OP_WRITE },  { "write", TC_OP_WRITE },      { "set", TC_OP_WRITE },
        { "trim", TC_OP_TRIM }, { "discard", TC_OP_TRIM },    { "flush", TC_OP_FLUSH },
    };
    for (size_t i = 0; i < TC_ARRAY_SIZE(words); i++)
        if (strcasecmp(s, words[i].word) == 0)
            return words[i].op;
    return -1;
}

static int next_msr(struct tc_trace_reader *r, struct tc_trace_req *q, char *err, size_t errlen)
{
    char *f[MAX_FIELDS];
    unsigned n;
    while (next_fields(r, ",", false, f, &n)) {
        if (n < 6 || n > MAX_FIELDS)
            return fail(err, errlen, "%s: line %llu: %u fields; MSR lines have 7 (Timestamp,"
                        "Hostname,DiskNumber,Type,Offset,Size,ResponseTime)", r->name,
                        (unsigned long long)r->line, n > MAX_FIELDS ? n - 1 : n);
        memset(q, 0, sizeof *q);
        uint64_t ticks, off = 0, len = 0;
        if (parse_u64(r, "timestamp", f[0], &ticks, err, errlen) < 0)
            return -1;
        int op = op_from_word(f[3]);
        if (op != TC_OP_READ && op != TC_OP_WRITE)
            return fail(err, errlen, "%s: line %llu: type '%s' is neither Read nor Write",
                        r->name, (unsigned long long)r->line, f[3]);
        q->op = (uint8_t)op;
        if (parse_u64(r, "offset", f[4], &off, err, errlen) < 0 ||
            parse_u64(r, "size", f[5], &len, err, errlen) < 0 ||
            set_range(r, q, off, len, err, errlen) < 0)
            return -1;
        if (!r->have_first) {
            r->have_first = true;
            r->first_time = ticks;
        }
        q->time_ns = ticks >= r->first_time ? (ticks - r->first_time) * 100 : 0;
        return 1;
    }
    return 0;
}

static int next_spc(struct tc_trace_reader *r, struct tc_trace_req *q, char *err, size_t errlen)
{
    char *f[MAX_FIELDS];
    unsigned n;
    while (next_fields(r, ",", false, f, &n)) {
        if (n < 5 || n > MAX_FIELDS)
            return fail(err, errlen, "%s: line %llu: %u fields; SPC lines have 5 "
                        "(ASU,LBA,Size,Opcode,Timestamp)", r->name, (unsigned long long)r->line,
                        n > MAX_FIELDS ? n - 1 : n);
        memset(q, 0, sizeof *q);
        uint64_t asu, lba, len = 0, off;
        double secs;
        if (parse_u64(r, "ASU", f[0], &asu, err, errlen) < 0 ||
            parse_u64(r, "LBA", f[1], &lba, err, errlen) < 0 ||
            parse_u64(r, "size", f[2], &len, err, errlen) < 0 ||
            parse_seconds(r, "timestamp", f[4], &secs, err, errlen) < 0)
            return -1;
        if (asu >= (1u << 20) || lba >= (1ull << 31))
            return fail(err, errlen, "%s: line %llu: ASU %llu or LBA %llu is out of range "
                        "(ASU n is placed at n TiB, so an LBA stays below 2^31)", r->name,
                        (unsigned long long)r->line, (unsigned long long)asu,
                        (unsigned long long)lba);
        off = (asu << 40) + lba * 512;
        int op = op_from_word(f[3]);
        if (op != TC_OP_READ && op != TC_OP_WRITE)
            return fail(err, errlen, "%s: line %llu: opcode '%s' is neither r nor w", r->name,
                        (unsigned long long)r->line, f[3]);
        q->op = (uint8_t)op;
        if (set_range(r, q, off, len, err, errlen) < 0 ||
            since_first(r, secs, &q->time_ns, err, errlen) < 0)
            return -1;
        return 1;
    }
    return 0;
}

static int next_arc(struct tc_trace_reader *r, struct tc_trace_req *q, char *err, size_t errlen)
{
    char *f[MAX_FIELDS];
    unsigned n;
    while (next_fields(r, " \t", true, f, &n)) {
        if (n < 2 || n > 4)
            return fail(err, errlen, "%s: line %llu: %u fields; .lis lines have 4 (start "
                        "block, count, ignored, request number)", r->name,
                        (unsigned long long)r->line, n > MAX_FIELDS ? n - 1 : n);
        memset(q, 0, sizeof *q);
        uint64_t start, count, off = 0, len = 0;
        if (parse_u64(r, "start block", f[0], &start, err, errlen) < 0 ||
            parse_u64(r, "block count", f[1], &count, err, errlen) < 0 ||
            sectors_to_bytes(r, "start block", start, &off, err, errlen) < 0 ||
            sectors_to_bytes(r, "block count", count, &len, err, errlen) < 0 ||
            set_range(r, q, off, len, err, errlen) < 0)
            return -1;
        if (len == 0)
            return fail(err, errlen, "%s: line %llu: a request of 0 blocks", r->name,
                        (unsigned long long)r->line);
        q->op = TC_OP_READ;
        q->time_ns = r->line;
        return 1;
    }
    return 0;
}

static const char *const csv_time[] = { "time", "timestamp", "clock_time", NULL };
static const char *const csv_id[] = { "obj_id", "id", "key", NULL };
static const char *const csv_offset[] = { "offset", NULL };
static const char *const csv_size[] = { "obj_size", "size", NULL };
static const char *const csv_op[] = { "op", "type", NULL };

static bool named(const char *s, const char *const *names)
{
    for (; *names; names++)
        if (strcasecmp(s, *names) == 0)
            return true;
    return false;
}

static int csv_header(struct tc_trace_reader *r, char **f, unsigned n, char *err, size_t errlen)
{
    for (unsigned i = 0; i < n; i++) {
        int *col = named(f[i], csv_time)     ? &r->col_time
                   : named(f[i], csv_id)     ? &r->col_id
                   : named(f[i], csv_offset) ? &r->col_offset
                   : named(f[i], csv_size)   ? &r->col_size
                   : named(f[i], csv_op)     ? &r->col_op
                                             : NULL;
        if (col && *col >= 0)
            return fail(err, errlen, "%s: line %llu: column '%s' given twice", r->name,
                        (unsigned long long)r->line, f[i]);
        if (col)
            *col = (int)i;
    }
    if ((r->col_id < 0) == (r->col_offset < 0))
        return fail(err, errlen, "%s: line %llu: the header must name exactly one of obj_id "
                    "(or id, key) and offset; it is: %s%s%s...", r->name,
                    (unsigned long long)r->line, f[0], n > 1 ? "," : "", n > 1 ? f[1] : "");
    r->header_read = true;
    return 0;
}

static int next_csv(struct tc_trace_reader *r, struct tc_trace_req *q, char *err, size_t errlen)
{
    char *f[MAX_FIELDS];
    unsigned n;
    while (next_fields(r, ",", false, f, &n)) {
        if (n > MAX_FIELDS)
            return fail(err, errlen, "%s: line %llu: more than %u fields", r->name,
                        (unsigned long long)r->line, MAX_FIELDS);
        if (!r->header_read) {
            r->skipped++;
            if (csv_header(r, f, n, err, errlen) < 0)
                return -1;
            continue;
        }
        int need = TC_MAX(TC_MAX(r->col_time, r->col_id), TC_MAX(r->col_offset,
                                                                 TC_MAX(r->col_size, r->col_op)));
        if ((int)n <= need)
            return fail(err, errlen, "%s: line %llu: %u fields, the header names %d", r->name,
                        (unsigned long long)r->line, n, need + 1);
        memset(q, 0, sizeof *q);
        q->op = TC_OP_READ;
        if (r->col_op >= 0) {
            int op = op_from_word(f[r->col_op]);
            if (op < 0)
                return fail(err, errlen, "%s: line %llu: op '%s' is not one of r, read, get, "
                            "w, write, set, trim, discard, flush", r->name,
                            (unsigned long long)r->line, f[r->col_op]);
            q->op = (uint8_t)op;
        }
        uint64_t len = r->opt.object_bytes, off;
        if (r->col_size >= 0 && r->col_offset >= 0 &&
            parse_u64(r, "size", f[r->col_size], &len, err, errlen) < 0)
            return -1;
        if (r->col_offset >= 0) {
            if (parse_u64(r, "offset", f[r->col_offset], &off, err, errlen) < 0)
                return -1;
        } else {
            uint64_t id;
            if (parse_u64(r, "obj_id", f[r->col_id], &id, err, errlen) < 0)
                return -1;
            if (id > (UINT64_MAX - len) / len)
                return fail(err, errlen, "%s: line %llu: object id %llu is beyond a 64-bit "
                            "volume of %llu-byte objects", r->name, (unsigned long long)r->line,
                            (unsigned long long)id, (unsigned long long)len);
            off = id * len;
        }
        if (q->op == TC_OP_FLUSH)
            off = len = 0;
        if (set_range(r, q, off, len, err, errlen) < 0)
            return -1;
        if (r->col_time >= 0) {
            double secs;
            if (parse_seconds(r, "time", f[r->col_time], &secs, err, errlen) < 0 ||
                since_first(r, secs, &q->time_ns, err, errlen) < 0)
                return -1;
        } else {
            q->time_ns = r->line;
        }
        return 1;
    }
    return 0;
}

int trace_reader_next(struct tc_trace_reader *r, struct tc_trace_req *req, char *err,
                      size_t errlen)
{
    int rc;
    switch (r->fmt) {
    case TC_TRACE_NATIVE: rc = next_native(r, req, err, errlen); break;
    case TC_TRACE_BLKPARSE: rc = next_blkparse(r, req, err, errlen); break;
    case TC_TRACE_MSR: rc = next_msr(r, req, err, errlen); break;
    case TC_TRACE_SPC: rc = next_spc(r, req, err, errlen); break;
    case TC_TRACE_ARC: rc = next_arc(r, req, err, errlen); break;
    case TC_TRACE_ORACLE: rc = next_oracle(r, req, err, errlen); break;
    case TC_TRACE_CSV: rc = next_csv(r, req, err, errlen); break;
    default: return fail(err, errlen, "unknown trace format");
    }
    if (rc == 0 && ferror(r->in))
        return fail(err, errlen, "%s: reading it: %s", r->name, strerror(errno ? errno : EIO));
    return rc;
}
