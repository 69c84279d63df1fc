/*
 * Sequential streams (engine/stream.h).
 */
#include <stdlib.h>

#include "engine/stream.h"
#include "util/misc.h"

#define NSTREAMS 16

struct stream {
    uint64_t end;
    uint64_t length;
    uint64_t last_use;
};

struct streams {
    struct stream s[NSTREAMS];
    uint64_t clock;
    uint64_t cutoff;
};

struct streams *streams_new(uint64_t cutoff)
{
    struct streams *ss = tc_xcalloc(1, sizeof *ss);
    ss->cutoff = cutoff;
    return ss;
}

void streams_set_cutoff(struct streams *ss, uint64_t cutoff)
{
    ss->cutoff = cutoff;
}

void streams_free(struct streams *ss)
{
    free(ss);
}

bool streams_sequential(struct streams *ss, uint64_t off, uint64_t len, bool write,
                        uint64_t *stream_len)
{
    (void)write;
    ss->clock++;
    struct stream *s = NULL, *lru = &ss->s[0];
    for (int i = 0; i < NSTREAMS && s == NULL; i++) {
        if (ss->s[i].length && ss->s[i].end == off)
            s = &ss->s[i];
        else if (ss->s[i].last_use < lru->last_use)
            lru = &ss->s[i];
    }
    if (s == NULL) {
        s = lru;
        s->length = 0;
    }
    s->end = off + len;
    s->length += len;
    s->last_use = ss->clock;
    if (stream_len)
        *stream_len = s->length;
    return ss->cutoff != 0 && s->length > ss->cutoff;
}
