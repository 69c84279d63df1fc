/*
 * Memory cgroups: which one a process belongs to, and each one's limit,
 * use and swap cache.
 *
 * A page that swap prefetch reads back is charged to the memory cgroup that
 * owned it when it was swapped out (the kernel records the owner with the
 * swap entry), whatever cgroup the daemon itself runs in.  A cgroup at its
 * limit reclaims its own memory to make room, so prefetching into a full
 * cgroup would push out that cgroup's other pages: the very harm prefetch
 * must never do.  The daemon therefore keeps, for every cgroup it prefetches
 * into and each of that cgroup's ancestors that has a limit, free room of at
 * least the headroom below the limit (cgroup v1: memory.limit_in_bytes; v2:
 * the lower of memory.max and memory.high).
 *
 * Both hierarchies are supported: the v1 memory controller when it is
 * mounted (it then owns memory accounting even if a v2 hierarchy exists),
 * else a cgroup2 mount whose root lists the memory controller.
 */
#ifndef TC_SWAP_CGROUP_H
#define TC_SWAP_CGROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum sp_cg_mode { SP_CG_NONE, SP_CG_V1, SP_CG_V2 };

/* Where the memory hierarchy is mounted.  A cgroup's path ("/a/b", as in
 * /proc/PID/cgroup) maps to the directory mount + (path - mount_root). */
struct sp_cg_fs {
    enum sp_cg_mode mode;
    char mount[512];
    char mount_root[512];       /* the hierarchy path mounted there, usually "/" */
};

/* One memory cgroup the daemon has met, with its figures as last read.
 * Records are never removed while the daemon runs (there are few), so an
 * index stays valid; parent is the index of the parent record, -1 at the
 * top.  Invariant: every ancestor of a record is itself a record. */
struct sp_cgroup {
    char *path;                 /* "/a/b"; "/" is the root */
    int parent;
    bool exists;                /* the directory could be read at the last refresh */
    uint64_t limit;             /* own limit, UINT64_MAX if none */
    uint64_t usage;             /* memory charged to it, bytes */
    uint64_t swapcached;        /* bytes of its pages in the swap cache */
    bool has_swapcached;        /* memory.stat has the figure */
    uint64_t swap;              /* bytes of its pages in swap */
    /* For detecting others' allocations: usage at the last tick, and the
     * bytes prefetch read into it (or a descendant) since. */
    uint64_t usage_at_tick, ours_since_tick;
    uint64_t demand;            /* others' growth over the last tick, bytes */
    uint64_t prefetched;        /* bytes prefetch read into it and descendants */
    uint64_t held_back;         /* times its limit or others' allocations held prefetch back */
    int hold;                   /* why it is held back (enum sp_reason), 0 if not */
    unsigned calm;              /* consecutive intervals without a reason to hold */
    uint64_t room;              /* limit - usage - headroom at the last check */
    uint64_t lost_prev;         /* eviction estimate at the last tick, pages */
};

/* The cgroups met so far (v[0..n)), and the hierarchy they live in.  Grows
 * only; see struct sp_cgroup for the invariant. */
struct sp_cgroups {
    struct sp_cg_fs fs;
    struct sp_cgroup *v;
    size_t n, cap;
};

/* Find the memory hierarchy (mode SP_CG_NONE if there is none). */
void sp_cg_detect(struct sp_cg_fs *fs);

/* The memory cgroup path of a process; false if it has gone. */
bool sp_cg_of_pid(const struct sp_cg_fs *fs, pid_t pid, char *path, size_t len);

/* The directory of a cgroup path. */
void sp_cg_dir(const struct sp_cg_fs *fs, const char *path, char *out, size_t len);

/* --cgroup: a directory under the mount (/sys/fs/cgroup/memory/x) or a
 * hierarchy path (/x).  Fills path; false with a message naming arg. */
bool sp_cg_resolve(const struct sp_cg_fs *fs, const char *arg, char *path, size_t len, char *err,
                   size_t errlen);

/* True if path is within (or is) the cgroup top. */
bool sp_cg_within(const char *path, const char *top);

void sp_cgroups_init(struct sp_cgroups *t);
void sp_cgroups_free(struct sp_cgroups *t);
/* The record of path, created with its ancestors if needed. */
int sp_cgroups_get(struct sp_cgroups *t, const char *path);
/* Re-read the figures of idx and its ancestors. */
void sp_cgroups_refresh(struct sp_cgroups *t, int idx);
/* Re-read only the usage of idx and its ancestors: cheap enough for every
 * chunk (memory.stat, which makes the kernel flush its statistics, is read
 * once per interval). */
void sp_cgroups_refresh_usage(struct sp_cgroups *t, int idx);
/* Re-read the figures of every record. */
void sp_cgroups_refresh_all(struct sp_cgroups *t);
/* Room for prefetch in idx: the least, over idx and its ancestors with a
 * limit, of limit - usage - headroom (0 if negative); UINT64_MAX if none of
 * them has a limit. */
uint64_t sp_cgroups_budget(const struct sp_cgroups *t, int idx, uint64_t headroom);
/* Prefetch read bytes into idx: counted for idx and its ancestors. */
void sp_cgroups_charge(struct sp_cgroups *t, int idx, uint64_t bytes);
/* The innermost ancestor-or-self of idx that has a limit, -1 if none. */
int sp_cgroups_limited(const struct sp_cgroups *t, int idx);

#endif
