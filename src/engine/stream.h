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
 *
 * Invariants: a slot of length 0 continues nothing (a free slot, never
 * used: last_use 0).  A request continues the first slot, in slot order,
 * that ends where it starts; otherwise it starts a new stream in the least
 * recently used slot (the smallest last_use: the clock counts requests).
 * A cutoff of 0 makes no stream sequential.
 */
#ifndef TC_ENGINE_STREAM_H
#define TC_ENGINE_STREAM_H

#include <stdbool.h>
#include <stdint.h>

struct streams;

/* No stream yet; CUTOFF in bytes (0: none). */
struct streams *streams_new(uint64_t cutoff);
void streams_free(struct streams *ss);
void streams_set_cutoff(struct streams *ss, uint64_t cutoff);
/* Feed a request; true if it belongs to a stream past the cutoff.  The
 * stream's length so far, this request included, goes to *stream_len. */
bool streams_sequential(struct streams *ss, uint64_t off, uint64_t len, bool write,
                        uint64_t *stream_len);

#endif
