#include "swap/cgroup.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "swap/procfs.h"
#include "util/misc.h"

/* v1 reports "no limit" as a page-aligned LONG_MAX. */
#define V1_UNLIMITED (1ull << 62)

void sp_cg_detect(struct sp_cg_fs *fs)
{
    memset(fs, 0, sizeof *fs);
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (f == NULL)
        return;
    char line[4096];
    struct sp_cg_fs v2 = { .mode = SP_CG_NONE };
    while (fgets(line, sizeof line, f)) {
        /* id parent major:minor root mountpoint options ... - fstype source superopts */
        char root[512], mnt[512], fstype[32], super[1024];
        char *sep = strstr(line, " - ");
        if (sep == NULL || sscanf(line, "%*s %*s %*s %511s %511s", root, mnt) != 2 ||
            sscanf(sep + 3, "%31s %*s %1023s", fstype, super) != 2)
            continue;
        if (strcmp(fstype, "cgroup") == 0) {
            bool memory = false;
            for (char *save, *o = strtok_r(super, ",", &save); o; o = strtok_r(NULL, ",", &save))
                if (strcmp(o, "memory") == 0)
                    memory = true;
            if (memory) {
                fs->mode = SP_CG_V1;
                snprintf(fs->mount, sizeof fs->mount, "%s", mnt);
                snprintf(fs->mount_root, sizeof fs->mount_root, "%s", root);
                fclose(f);
                return;
            }
        } else if (strcmp(fstype, "cgroup2") == 0 && v2.mode == SP_CG_NONE) {
            char path[600], ctl[256];
            snprintf(path, sizeof path, "%s/cgroup.controllers", mnt);
            if (sp_read_text(path, ctl, sizeof ctl) > 0 && strstr(ctl, "memory")) {
                v2.mode = SP_CG_V2;
                snprintf(v2.mount, sizeof v2.mount, "%s", mnt);
                snprintf(v2.mount_root, sizeof v2.mount_root, "%s", root);
            }
        }
    }
    fclose(f);
    *fs = v2;
}

bool sp_cg_of_pid(const struct sp_cg_fs *fs, pid_t pid, char *path, size_t len)
{
    char file[64], buf[4096];
    snprintf(file, sizeof file, "/proc/%d/cgroup", (int)pid);
    if (sp_read_text(file, buf, sizeof buf) <= 0)
        return false;
    for (char *save, *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        /* "ID:controllers:path" */
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (c2 == NULL)
            continue;
        *c2 = '\0';
        const char *ctls = c1 + 1, *p = c2 + 1;
        bool match = false;
        if (fs->mode == SP_CG_V2) {
            match = strcmp(line, "0") == 0 && ctls[0] == '\0';
        } else if (fs->mode == SP_CG_V1) {
            char tmp[256];
            snprintf(tmp, sizeof tmp, "%s", ctls);
            for (char *s2, *o = strtok_r(tmp, ",", &s2); o; o = strtok_r(NULL, ",", &s2))
                if (strcmp(o, "memory") == 0)
                    match = true;
        }
        if (match) {
            snprintf(path, len, "%s", p);
            return true;
        }
    }
    snprintf(path, len, "/");
    return true;
}

void sp_cg_dir(const struct sp_cg_fs *fs, const char *path, char *out, size_t len)
{
    size_t rl = strlen(fs->mount_root);
    const char *rest = path;
    if (strcmp(fs->mount_root, "/") != 0 && strncmp(path, fs->mount_root, rl) == 0)
        rest = path + rl;
    if (strcmp(rest, "/") == 0)
        rest = "";
    snprintf(out, len, "%s%s", fs->mount, rest);
}

bool sp_cg_within(const char *path, const char *top)
{
    if (strcmp(top, "/") == 0)
        return true;
    size_t n = strlen(top);
    return strncmp(path, top, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

bool sp_cg_resolve(const struct sp_cg_fs *fs, const char *arg, char *path, size_t len, char *err,
                   size_t errlen)
{
    if (fs->mode == SP_CG_NONE) {
        snprintf(err, errlen,
                 "--cgroup: '%s': no memory cgroup hierarchy is mounted (neither the v1 memory "
                 "controller nor cgroup2 with the memory controller)", arg);
        return false;
    }
    char rel[1024];
    size_t ml = strlen(fs->mount);
    if (strncmp(arg, fs->mount, ml) == 0 && (arg[ml] == '/' || arg[ml] == '\0')) {
        /* A directory under the mount point. */
        const char *rest = arg + ml;
        if (strcmp(fs->mount_root, "/") == 0)
            snprintf(rel, sizeof rel, "%s", rest[0] ? rest : "/");
        else
            snprintf(rel, sizeof rel, "%s%s", fs->mount_root, rest);
    } else if (arg[0] == '/' && strncmp(arg, "/sys/", 5) != 0) {
        snprintf(rel, sizeof rel, "%s", arg);
    } else if (arg[0] != '/' && arg[0] != '\0') {
        snprintf(rel, sizeof rel, "/%s", arg);
    } else {
        snprintf(err, errlen, "--cgroup: '%s' is not under the memory cgroup mount %s", arg,
                 fs->mount);
        return false;
    }
    /* No trailing slashes, so that prefix checks work. */
    size_t rl = strlen(rel);
    while (rl > 1 && rel[rl - 1] == '/')
        rel[--rl] = '\0';
    char dir[1600];
    sp_cg_dir(fs, rel, dir, sizeof dir);
    struct stat st;
    if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "--cgroup: '%s' is not a memory cgroup (%s: %s)", arg, dir,
                 stat(dir, &st) < 0 ? strerror(errno) : "not a directory");
        return false;
    }
    snprintf(path, len, "%s", rel);
    return true;
}

void sp_cgroups_init(struct sp_cgroups *t)
{
    memset(t, 0, sizeof *t);
    sp_cg_detect(&t->fs);
}

void sp_cgroups_free(struct sp_cgroups *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->v[i].path);
    free(t->v);
    t->v = NULL;
    t->n = t->cap = 0;
}

static int find(const struct sp_cgroups *t, const char *path)
{
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->v[i].path, path) == 0)
            return (int)i;
    return -1;
}

int sp_cgroups_get(struct sp_cgroups *t, const char *path)
{
    int i = find(t, path);
    if (i >= 0)
        return i;
    int parent = -1;
    if (strcmp(path, "/") != 0) {
        char up[1024];
        snprintf(up, sizeof up, "%s", path);
        char *slash = strrchr(up, '/');
        if (slash == up)
            up[1] = '\0';
        else if (slash)
            *slash = '\0';
        parent = sp_cgroups_get(t, up);
    }
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 16;
        t->v = realloc(t->v, t->cap * sizeof *t->v);
        if (t->v == NULL)
            abort();
    }
    struct sp_cgroup *c = &t->v[t->n];
    memset(c, 0, sizeof *c);
    c->path = tc_xstrdup(path);
    c->parent = parent;
    c->limit = UINT64_MAX;
    t->n++;
    sp_cgroups_refresh(t, (int)(t->n - 1));
    t->v[t->n - 1].usage_at_tick = t->v[t->n - 1].usage;
    return (int)(t->n - 1);
}

static void read_one(const struct sp_cg_fs *fs, struct sp_cgroup *c)
{
    char dir[1100], file[1200];
    static char stat[8192];
    sp_cg_dir(fs, c->path, dir, sizeof dir);
    uint64_t v;
    c->exists = false;
    c->has_swapcached = false;
    if (fs->mode == SP_CG_V1) {
        snprintf(file, sizeof file, "%s/memory.usage_in_bytes", dir);
        if (!sp_read_u64(file, &c->usage))
            return;
        snprintf(file, sizeof file, "%s/memory.limit_in_bytes", dir);
        c->limit = sp_read_u64(file, &v) && v < V1_UNLIMITED ? v : UINT64_MAX;
    } else if (fs->mode == SP_CG_V2) {
        snprintf(file, sizeof file, "%s/memory.current", dir);
        if (!sp_read_u64(file, &c->usage))
            return;     /* also the root, which has no memory.current */
        uint64_t max = UINT64_MAX, high = UINT64_MAX;
        snprintf(file, sizeof file, "%s/memory.max", dir);
        sp_read_u64(file, &max);
        snprintf(file, sizeof file, "%s/memory.high", dir);
        sp_read_u64(file, &high);
        c->limit = TC_MIN(max, high);
    } else {
        return;
    }
    c->exists = true;
    if (strcmp(c->path, "/") == 0)
        c->limit = UINT64_MAX;  /* the root's "limit" is the machine */
    snprintf(file, sizeof file, "%s/memory.stat", dir);
    if (sp_read_text(file, stat, sizeof stat) > 0) {
        c->has_swapcached = sp_kv_u64(stat, "swapcached", &c->swapcached);
        if (fs->mode == SP_CG_V1 && !sp_kv_u64(stat, "swap", &c->swap))
            c->swap = 0;
    }
    if (fs->mode == SP_CG_V2) {
        snprintf(file, sizeof file, "%s/memory.swap.current", dir);
        if (!sp_read_u64(file, &c->swap))
            c->swap = 0;
    }
}

void sp_cgroups_refresh(struct sp_cgroups *t, int idx)
{
    for (int i = idx; i >= 0; i = t->v[i].parent)
        read_one(&t->fs, &t->v[i]);
}

void sp_cgroups_refresh_usage(struct sp_cgroups *t, int idx)
{
    for (int i = idx; i >= 0; i = t->v[i].parent) {
        struct sp_cgroup *c = &t->v[i];
        if (!c->exists)
            continue;
        char dir[1100], file[1200];
        sp_cg_dir(&t->fs, c->path, dir, sizeof dir);
        snprintf(file, sizeof file, "%s/%s", dir,
                 t->fs.mode == SP_CG_V1 ? "memory.usage_in_bytes" : "memory.current");
        if (!sp_read_u64(file, &c->usage))
            c->exists = false;
    }
}

void sp_cgroups_refresh_all(struct sp_cgroups *t)
{
    for (size_t i = 0; i < t->n; i++)
        read_one(&t->fs, &t->v[i]);
}

int sp_cgroups_limited(const struct sp_cgroups *t, int idx)
{
    for (int i = idx; i >= 0; i = t->v[i].parent)
        if (t->v[i].exists && t->v[i].limit != UINT64_MAX)
            return i;
    return -1;
}

uint64_t sp_cgroups_budget(const struct sp_cgroups *t, int idx, uint64_t headroom)
{
    uint64_t best = UINT64_MAX;
    for (int i = idx; i >= 0; i = t->v[i].parent) {
        const struct sp_cgroup *c = &t->v[i];
        if (!c->exists || c->limit == UINT64_MAX)
            continue;
        uint64_t used = c->usage + headroom;
        uint64_t room = c->limit > used ? c->limit - used : 0;
        if (room < best)
            best = room;
    }
    return best;
}

void sp_cgroups_charge(struct sp_cgroups *t, int idx, uint64_t bytes)
{
    for (int i = idx; i >= 0; i = t->v[i].parent) {
        t->v[i].ours_since_tick += bytes;
        t->v[i].prefetched += bytes;
        /* Until the next read, assume the charge landed. */
        t->v[i].usage += bytes;
    }
}
