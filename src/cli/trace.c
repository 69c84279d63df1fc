/* tiercache trace-info and trace-convert: read a request trace (one of
 * serve --trace or a published block trace), summarise it or rewrite it
 * in the native format. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "io/claim.h"
#include "tiercache.h"
#include "trace/trace.h"
#include "util/json.h"
#include "util/log.h"
#include "util/misc.h"
#include "util/parse.h"

static const char info_help[] =
"Usage: tiercache trace-info [--format F] [--object-size SIZE]\n"
"                            [--blkparse-action A] [--json] FILE\n"
"\n"
"Summarise a request trace: requests and bytes by operation, the\n"
"footprint (distinct 4 KiB blocks read or written), the highest offset,\n"
"and the duration.  FILE is '-' for standard input.\n"
"\n"
"  --format F           native (default: what serve --trace writes),\n"
"                       blkparse, msr, spc, arc, oracle or csv; the formats\n"
"                       are described in tiercache(8), TRACES\n"
"  --object-size SIZE   oracle and csv traces naming objects: object k is\n"
"                       bytes [k*SIZE, (k+1)*SIZE) (default 4K)\n"
"  --blkparse-action A  blkparse: the event letter taken as a request\n"
"                       (default D, issued to the device; Q for queued)\n"
"  --json               print the summary as JSON\n"
"  --help, -h           this text\n"
"\n"
"Exit status: 0, or 1 if the trace is malformed (the message names the\n"
"line or byte offset), 2 for a usage error.\n";

static const char convert_help[] =
"Usage: tiercache trace-convert --format F [--object-size SIZE]\n"
"                               [--blkparse-action A] IN OUT\n"
"\n"
"Rewrite the trace IN (format F, see trace-info) as a native trace OUT,\n"
"the format serve --trace writes.  IN may be '-' for standard input.  OUT\n"
"is written whole or not at all: a malformed IN leaves no OUT behind.  An\n"
"existing OUT is replaced only if it is empty or a trace, and never if a\n"
"daemon holds it (an origin or cache device in use).\n"
"\n"
"  --format F           the format of IN (required)\n"
"  --object-size SIZE   as for trace-info\n"
"  --blkparse-action A  as for trace-info\n"
"  --help, -h           this text\n";

/* An open-addressing set of 4 KiB block numbers, for the footprint. */
struct blockset {
    uint64_t *slot;                 /* value + 1; 0 is empty */
    size_t cap, count;
};

static void blockset_add(struct blockset *s, uint64_t block)
{
    if (s->count * 2 >= s->cap) {
        struct blockset n = { .cap = s->cap ? s->cap * 2 : 4096 };
        n.slot = tc_xcalloc(n.cap, sizeof *n.slot);
        for (size_t i = 0; i < s->cap; i++)
            if (s->slot[i])
                blockset_add(&n, s->slot[i] - 1);
        free(s->slot);
        *s = n;
    }
    size_t i = (size_t)((block + 1) * 0x9E3779B97F4A7C15ull >> 17) & (s->cap - 1);
    while (s->slot[i]) {
        if (s->slot[i] == block + 1)
            return;
        i = (i + 1) & (s->cap - 1);
    }
    s->slot[i] = block + 1;
    s->count++;
}

struct reader_args {
    int format;
    struct tc_trace_reader_options opt;
    bool json;
};

/* Options shared by both commands; 1 if the option was one of them. */
static int common_option(int opt, struct reader_args *a)
{
    char err[256];
    switch (opt) {
    case 'F':
        a->format = trace_format_parse(optarg);
        if (a->format < 0)
            tc_die(2, "--format '%s': choose %s", optarg, trace_format_names());
        return 1;
    case 'O':
        if (tc_parse_size("--object-size", optarg, &a->opt.object_bytes, err, sizeof err) < 0)
            tc_die(2, "%s", err);
        if (a->opt.object_bytes == 0 || a->opt.object_bytes > UINT32_MAX)
            tc_die(2, "--object-size %s: from 1 byte to 4G - 1", optarg);
        return 1;
    case 'A':
        if (strlen(optarg) != 1 || !strchr("QGIDCMF", optarg[0]))
            tc_die(2, "--blkparse-action '%s': one event letter such as D (issued) or Q "
                   "(queued)", optarg);
        a->opt.blkparse_action = optarg[0];
        return 1;
    }
    return 0;
}

static const struct option trace_opts[] = {
    { "format", required_argument, NULL, 'F' },
    { "object-size", required_argument, NULL, 'O' },
    { "blkparse-action", required_argument, NULL, 'A' },
    { "json", no_argument, NULL, 'j' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
};

static const char *const op_names[] = { "read", "write", "flush", "trim", "write_zeroes",
                                        "cache", "block_status" };

int cmd_trace_info(int argc, char **argv)
{
    struct reader_args a = { .format = TC_TRACE_NATIVE };
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", trace_opts, NULL)) != -1) {
        if (common_option(opt, &a))
            continue;
        if (opt == 'j') {
            a.json = true;
        } else if (opt == 'h') {
            cli_print(info_help);
            return 0;
        } else {
            fprintf(stderr, "Try 'tiercache trace-info --help'.\n");
            return 2;
        }
    }
    if (optind + 1 != argc)
        tc_die(2, "trace-info: give exactly one FILE (try --help)");
    const char *path = argv[optind];
    char err[512];
    struct tc_trace_reader *r = trace_reader_open(path, (enum tc_trace_format)a.format, &a.opt,
                                                  err, sizeof err);
    if (!r)
        tc_die(1, "%s", err);
    uint64_t count[7] = { 0 }, bytes[7] = { 0 }, total = 0, end_max = 0, last_ns = 0;
    struct blockset blocks = { 0 };
    struct tc_trace_req q;
    int rc;
    while ((rc = trace_reader_next(r, &q, err, sizeof err)) == 1) {
        total++;
        count[q.op]++;
        bytes[q.op] += q.length;
        last_ns = q.time_ns;
        if (q.length && (q.op == TC_OP_READ || q.op == TC_OP_WRITE ||
                         q.op == TC_OP_WRITE_ZEROES || q.op == TC_OP_TRIM)) {
            end_max = TC_MAX(end_max, q.offset + q.length);
            if (q.op == TC_OP_READ || q.op == TC_OP_WRITE)
                for (uint64_t b = q.offset / 4096; b <= (q.offset + q.length - 1) / 4096; b++)
                    blockset_add(&blocks, b);
        }
    }
    if (rc < 0) {
        trace_reader_close(r);
        free(blocks.slot);
        tc_die(1, "%s", err);
    }
    uint64_t trailing = trace_reader_trailing(r), skipped = trace_reader_skipped(r);
    uint64_t vsize = trace_reader_volume_size(r);
    trace_reader_close(r);
    free(blocks.slot);
    if (a.json) {
        struct tc_json j;
        json_init(&j, true);
        json_begin_object(&j, NULL);
        json_string(&j, "file", path);
        json_string(&j, "format", trace_format_name((enum tc_trace_format)a.format));
        json_uint(&j, "requests", total);
        json_begin_object(&j, "by_op");
        for (int i = 0; i < 7; i++) {
            json_begin_object(&j, op_names[i]);
            json_uint(&j, "requests", count[i]);
            json_uint(&j, "bytes", bytes[i]);
            json_end_object(&j);
        }
        json_end_object(&j);
        json_uint(&j, "footprint_bytes", (uint64_t)blocks.count * 4096);
        json_uint(&j, "highest_offset", end_max);
        json_uint(&j, "volume_size", vsize);
        json_double(&j, "seconds", (double)last_ns / 1e9);
        json_uint(&j, "skipped_lines", skipped);
        json_uint(&j, "trailing_bytes", trailing);
        json_end_object(&j);
        printf("%.*s\n", (int)j.len, j.buf);
        json_free(&j);
        return 0;
    }
    char b1[32], b2[32];
    printf("trace %s (%s): %llu requests over %.3f s\n", path,
           trace_format_name((enum tc_trace_format)a.format), (unsigned long long)total,
           (double)last_ns / 1e9);
    for (int i = 0; i < 7; i++)
        if (count[i])
            printf("  %-13s %12llu requests  %10s\n", op_names[i],
                   (unsigned long long)count[i], tc_format_size(bytes[i], b1, sizeof b1));
    printf("  footprint     %s (distinct 4K blocks read or written)\n",
           tc_format_size((uint64_t)blocks.count * 4096, b1, sizeof b1));
    printf("  highest byte  %s%s%s\n", tc_format_size(end_max, b2, sizeof b2),
           vsize ? " of a volume of " : "", vsize ? tc_format_size(vsize, b1, sizeof b1) : "");
    if (skipped)
        printf("  %llu lines skipped (not requests)\n", (unsigned long long)skipped);
    if (trailing)
        printf("  %llu bytes at the end are not a whole record (the file was cut short)\n",
               (unsigned long long)trailing);
    return 0;
}

int cmd_trace_convert(int argc, char **argv)
{
    struct reader_args a = { .format = -1 };
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", trace_opts, NULL)) != -1) {
        if (common_option(opt, &a))
            continue;
        if (opt == 'h') {
            cli_print(convert_help);
            return 0;
        }
        fprintf(stderr, "Try 'tiercache trace-convert --help'.\n");
        return 2;
    }
    if (a.format < 0)
        tc_die(2, "trace-convert: --format is required (%s)", trace_format_names());
    if (optind + 2 != argc)
        tc_die(2, "trace-convert: give IN and OUT (try --help)");
    const char *in = argv[optind], *out = argv[optind + 1];
    char err[1200];
    /* OUT is replaced: never a file a daemon holds (an origin, a cache
     * device), nor an existing file that is not a trace. */
    if (claim_check_output(out, "trace-convert OUT", "replace it with the converted trace",
                           NULL, NULL, err, sizeof err) < 0 ||
        trace_writer_check(out, err, sizeof err) < 0)
        tc_die(1, "%s", err);
    struct tc_trace_reader *r = trace_reader_open(in, (enum tc_trace_format)a.format, &a.opt,
                                                  err, sizeof err);
    if (!r)
        tc_die(1, "%s", err);
    size_t tlen = strlen(out) + 8;
    char *tmp = tc_xmalloc(tlen);
    snprintf(tmp, tlen, "%s.partial", out);
    FILE *f = fopen(tmp, "wb");
    if (!f)
        tc_die(1, "%s: %s", tmp, strerror(errno));
    uint8_t hdr[TC_TRACE_HEADER_BYTES], rec[TC_TRACE_RECORD_BYTES];
    trace_encode_header(hdr, 0, 0, 0);
    bool ok = fwrite(hdr, sizeof hdr, 1, f) == 1;
    struct tc_trace_req q;
    uint64_t n = 0;
    int rc = 0;
    while (ok && (rc = trace_reader_next(r, &q, err, sizeof err)) == 1) {
        trace_encode_record(rec, &q);
        ok = fwrite(rec, sizeof rec, 1, f) == 1;
        n++;
    }
    if (!ok)
        snprintf(err, sizeof err, "%s: %s", tmp, strerror(errno));
    trace_reader_close(r);
    if (fclose(f) != 0 && ok) {
        ok = false;
        snprintf(err, sizeof err, "%s: %s", tmp, strerror(errno));
    }
    if (ok && rc < 0)
        ok = false;
    if (ok && rename(tmp, out) < 0) {
        ok = false;
        snprintf(err, sizeof err, "renaming %s to %s: %s", tmp, out, strerror(errno));
    }
    if (!ok) {
        unlink(tmp);
        free(tmp);
        tc_die(1, "%s", err);
    }
    free(tmp);
    printf("%llu requests written to %s\n", (unsigned long long)n, out);
    return 0;
}
