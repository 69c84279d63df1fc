/*
 * Recovery (recovery.c): the index, the dirty set and the log's shape,
 * rebuilt from the chunk headers at start -- after a clean shutdown or a
 * crash alike (the steps: recovery.c).  It runs at attach, before
 * anything else, and fills the map, the space and the log of the cache;
 * the damage it finds goes to c->damage and c->damage_group_max.
 */
#ifndef TC_ENGINE_RECOVERY_H
#define TC_ENGINE_RECOVERY_H

#include <stddef.h>
#include <stdint.h>

struct cache;

int recovery_run(struct cache *c, char *err, size_t errlen);
/* The group ring rebuilt from the live segments (recovery.c); the
 * checkpoint's start uses it too. */
void recovery_groups(struct cache *c, uint32_t *live, uint32_t nlive);

#endif
