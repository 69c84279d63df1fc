/*
 * Sequential streams: a scan or a backup must not flush the hot set out of
 * the cache (bcache's sequential cutoff).
 *
 * The last 16 streams are remembered by where they end.  A request that
 * starts where a stream ends continues it; once a stream has run longer
 * than the cutoff (--sequential-cutoff, default 4 MiB), the rest of it is
 * not admitted to the cache.  Least recently used streams are forgotten.
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

void streams_fini(struct cache *c)
{
    free(c->streams);
    c->streams = NULL;
}

bool streams_sequential(struct cache *c, uint64_t off, uint64_t len, bool write)
{
    struct streams *ss = c->streams;
    (void)write;
    if (ss->cutoff == 0)
        return false;
    ss->clock++;
    struct stream *lru = &ss->s[0];
    for (int i = 0; i < NSTREAMS; i++) {
        struct stream *s = &ss->s[i];
        if (s->length && s->end == off) {
            s->end = off + len;
            s->length += len;
            s->last_use = ss->clock;
            return s->length > ss->cutoff;
        }
        if (s->last_use < lru->last_use)
            lru = s;
    }
    lru->end = off + len;
    lru->length = len;
    lru->last_use = ss->clock;
    return len > ss->cutoff;
}
