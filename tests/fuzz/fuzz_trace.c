/*
 * Fuzzing the trace readers (src/trace/reader.c): every format tiercache
 * reads traces in, text and binary, from files it did not write.
 *
 * Input: byte 0 picks the format (modulo their number), byte 1 the object
 * size of the formats that name objects (1 << (b % 32) bytes), byte 2 the
 * blkparse action (Q when odd, else D); the rest is the file.  It is read
 * to its end or its first error through trace_reader_from() on a memory
 * stream, as `trace-info` would read it.
 *
 * Checked for every request read: the operation is one tiercache knows,
 * the byte range does not wrap past 2^64, a flush covers nothing; an
 * error comes with a message; and the reader never runs past its input
 * (ASan) or loops (the request count is bounded by the input's size).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tiercache.h"
#include "trace/trace.h"
#include "check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    enum tc_trace_format fmt = (enum tc_trace_format)(data[0] % (TC_TRACE_CSV + 1));
    struct tc_trace_reader_options opt = {
        .object_bytes = 1ull << (data[1] % 32),
        .blkparse_action = (data[2] & 1) ? 'Q' : 'D',
    };
    size_t len = size - 3;
    /* fmemopen() of an empty buffer fails: give it one byte it never reads. */
    char *copy = malloc(len + 1);
    memcpy(copy, data + 3, len);
    FILE *in = fmemopen(copy, len ? len : 1, "rb");
    CHECK(in != NULL);
    if (len == 0)
        fgetc(in);
    char err[512] = "";
    struct tc_trace_reader *r = trace_reader_from(in, "fuzz", fmt, &opt, err, sizeof err);
    if (r == NULL) {
        CHECK(err[0] != '\0');
    } else {
        struct tc_trace_req q;
        uint64_t n = 0;
        int rc;
        while ((rc = trace_reader_next(r, &q, err, sizeof err)) == 1) {
            CHECK(q.op <= TC_OP_BLOCK_STATUS);
            CHECK(q.offset + q.length >= q.offset);
            CHECK(q.op != TC_OP_FLUSH || fmt == TC_TRACE_NATIVE || q.length == 0);
            n++;
            /* Every request consumes input: at least 2 bytes of text
             * ("0\n" in .lis) or one 24-byte record. */
            CHECK(n <= len / 2 + 1);
        }
        CHECK(rc == 0 || err[0] != '\0');
        CHECK(trace_reader_trailing(r) < 24);
        trace_reader_close(r);
    }
    fclose(in);
    free(copy);
    return 0;
}
