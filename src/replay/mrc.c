/*
 * replay_mrc_shards(): an LRU miss-ratio curve of a trace in one pass, by
 * SHARDS (shards.c explains the method and what the curve counts).
 */
#include <stdio.h>
#include <string.h>

#include "replay/replay.h"
#include "replay/shards.h"
#include "tiercache.h"
#include "util/misc.h"
#include "util/parse.h"

int replay_mrc_shards(const struct replay_trace *t, uint64_t block_bytes, double rate,
                      const uint64_t *sizes, size_t nsizes, double *miss, char *err,
                      size_t errlen)
{
    if (!(rate > 0 && rate <= 1)) {
        snprintf(err, errlen, "sampling rate %g: from above 0 to 1", rate);
        return -1;
    }
    if (block_bytes < 512 || !tc_is_pow2(block_bytes)) {
        snprintf(err, errlen, "block size %llu: a power of two of at least 512 bytes",
                 (unsigned long long)block_bytes);
        return -1;
    }
    if (strcmp(t->path, "-") == 0) {
        snprintf(err, errlen, "a miss-ratio curve needs a trace file, not '-'");
        return -1;
    }
    struct tc_trace_reader *r = trace_reader_open(t->path, t->format, &t->opt, err, errlen);
    if (!r)
        return -1;
    struct shards *sh = shards_new(rate, block_bytes);
    struct tc_trace_req q;
    int rc;
    while ((rc = trace_reader_next(r, &q, err, errlen)) == 1) {
        if (q.length && q.offset > UINT64_MAX - q.length) {
            snprintf(err, errlen, "a request at offset %llu of %u bytes ends past 2^64",
                     (unsigned long long)q.offset, q.length);
            rc = -1;
            break;
        }
        shards_request(sh, q.op, q.offset, q.length);
    }
    trace_reader_close(r);
    if (rc == 0 && shards_block_reads(sh) && !shards_sampled_reads(sh)) {
        snprintf(err, errlen, "none of the trace's %llu block reads fell in the sample at "
                 "rate %g: raise the sampling rate",
                 (unsigned long long)shards_block_reads(sh), rate);
        rc = -1;
    }
    if (rc == 0)
        shards_curve(sh, sizes, nsizes, miss);
    shards_free(sh);
    return rc < 0 ? -1 : 0;
}
