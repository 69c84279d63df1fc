/*
 * Sequential streams: a scan or a backup must not flush the hot set out of
 * the cache (bcache's sequential cutoff).
 *
 * The last 16 streams are remembered by where they end.  A request that
 * starts where a stream ends continues it; once a stream has run longer
 * than the cutoff (--sequential-cutoff, default 4 MiB), the rest of it is
 * not admitted to the cache while it is cold: readpath.c admits the misses
 * of a stream over blocks cached or known to the policy (stream_hot).  Least recently used streams are forgotten.
 * Streams are tracked even with no cutoff: read-ahead uses their length.
 */
#include <stdlib.h>

#include "engine/cache.h"
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

int streams_init(struct cache *c)
{
    c->streams = tc_xcalloc(1, sizeof *c->streams);
    c->streams->cutoff = c->vol->cfg.sequential_cutoff;
    return 0;
}

void streams_set_cutoff(struct cache *c, uint64_t cutoff)
{
    c->streams->cutoff = cutoff;
}

void streams_fini(struct cache *c)
{
    free(c->streams);
    c->streams = NULL;
}

bool streams_sequential(struct cache *c, uint64_t off, uint64_t len, bool write,
                        uint64_t *stream_len)
{
    struct streams *ss = c->streams;
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
