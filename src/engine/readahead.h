/*
 * Read-ahead of cached sequential streams (readahead.c): once a read
 * stream has run for a while and the data ahead of it is cached, the
 * engine reads ahead on its own, up to --readahead bytes (the window) in
 * 1 MiB slots, so that every device has work while the client catches up.
 * It owns struct readahead (c->ra, NULL when it is off: --readahead 0,
 * and then for good, as readahead_set_window() only resizes a window
 * within its slots; the read path skips it then).  Any write, trim or write-zeroes that
 * touches a slot discards it, so read-ahead never returns stale data.
 */
#ifndef TC_ENGINE_READAHEAD_H
#define TC_ENGINE_READAHEAD_H

#include <stdbool.h>
#include <stdint.h>

struct cache;
struct ereq;
struct tc_json;

int readahead_init(struct cache *c);
/* The largest window the slots allow (0: read-ahead is off), and a new
 * window within it (0: off). */
uint64_t readahead_max_window(struct cache *c);
void readahead_set_window(struct cache *c, uint64_t window);
void readahead_fini(struct cache *c);
/* Slots loading: read-ahead's reads of the cache devices in flight, which
 * the cache may not be freed under (a close waits for them). */
unsigned readahead_loading(const struct cache *c);
/* True if the read was taken (answered now or when its slot loads). */
bool readahead_read(struct cache *c, struct ereq *e, uint64_t stream_len);
/* Drop read-ahead data overlapping a write, trim or write-zeroes. */
void readahead_invalidate(struct cache *c, uint64_t off, uint64_t len);
void readahead_status_json(struct cache *c, struct tc_json *j);

#endif
