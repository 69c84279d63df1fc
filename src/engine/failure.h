/*
 * A cache device that fails (failure.c): on its first write error, when
 * it has vanished, or after a run of read errors.  The volume keeps
 * serving, degraded: clean data on the device is dropped, dirty data with
 * a mirror keeps the mirror, dirty data still in RAM is appended again on
 * another device, and dirty data with no copy is lost (recorded, and
 * reads of exactly those sectors fail with EIO until written again).
 * When no device is left the cache is abandoned for good (abandon.h).
 */
#ifndef TC_ENGINE_FAILURE_H
#define TC_ENGINE_FAILURE_H

#include <stdbool.h>

struct cache;

void cache_device_error(struct cache *c, unsigned d, int err, bool write);
void cache_device_fail(struct cache *c, unsigned d, const char *why);
/* The blocks waiting for room in the log to be rewritten after a device
 * failure (failure.c) stop waiting and try again now: when the last
 * device has failed (that failure dealt with them: they end) or when a
 * stop begins (c->stopping: they take the cleaner's reserve, or lose
 * their dirty sectors, recorded, without room there). */
void rewrites_stop_waiting(struct cache *c);
/* After a read error or checksum mismatch: a cache file that shrank fails. */
void cache_device_check_size(struct cache *c, unsigned d);

#endif
