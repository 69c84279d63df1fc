/*
 * The origin's record of the cache set it was last served with.
 *
 * A writeback cache stopped with dirty data, or any cache after a kill or
 * a crash (write-through versions the origin may not have flushed, lost
 * sectors that must read EIO), holds writes its origin lacks.  Nothing on
 * the origin says so: served without that cache -- a --cache option
 * forgotten, a configuration edited, another cache formatted for it --
 * the origin's older data is returned for writes that were acknowledged
 * and flushed, and the old set's dirty data may later be written back
 * over newer writes.  The cache's superblock names its origin; this
 * record is the other direction, kept off both (the origin's data is the
 * clients' alone):
 *
 *   DIR/origin-HASH.tcorigin      DIR: $TIERCACHE_ORIGIN_RECORDS, else
 *                                 /var/lib/tiercache; HASH: two CRC-32C
 *                                 of the origin's record key (io/dev.h,
 *                                 dev_record_key(): its identity, or an
 *                                 NBD export's address resolved)
 *
 * a few lines of text (the identity itself, the origin's name, the set's
 * UUID and its devices, for the messages and for a human; the bytes the
 * origin's data are, struct dev_extent, as "extent BASE START LEN").  The
 * rules:
 *
 *  - serve with a cache writes it (naming that set) before it serves
 *    anything, and a clean stop removes it once the origin holds every
 *    acknowledged write: no dirty data left, no lost sectors, the origin's
 *    last flush done.  Any other end -- a kill, a crash, a failed flush,
 *    dirty data left in the cache -- leaves it.
 *  - serve without a cache, or with another set, is refused while the
 *    record names a set: the way on is that set (serve it, 'tiercache
 *    flush', stop), formatting its devices again (format --force, which
 *    reads its log first and refuses its dirty data without
 *    --discard-dirty, then removes the record), or removing the record by
 *    hand when that set is gone for good (its writes are then lost).
 *  - format for an origin whose record names a set that is not on the
 *    devices being formatted is refused the same way.
 *
 * A record that cannot be read (damaged, another format) is refused as
 * naming an unknown set: nothing proves the origin current.  The check is
 * of the origin's identity, so it holds whatever name the origin is given
 * (an NBD export's, of where its connection went: every spelling of its
 * URI, the records an older build wrote under the URI as given read too);
 * a file and a loop device over it at offset 0 (two identities) are both
 * looked up (originrec_twin()).  The same data is also reached through
 * windows into a file or disk: a loop device at an offset (or with a size
 * limit) over part of a file, a partition of a disk or of a loop device.
 * Each has an identity of its own, but its bytes are a range of the file
 * or disk beneath (dev_data_extent()): every record of a place is read,
 * and one whose range of the same file or disk overlaps the origin's is
 * the origin's too -- the bytes they share may be older than writes that
 * set holds (a record written before the extent line was kept is taken
 * to reach from its offset to the end of its file).  An origin that is
 * the same data in another way (a copy, an NBD export by another URI, a
 * device-mapper target over a disk) is not recognised.
 *
 * Beside the records, the origin's last writer (origin-HASH.tcwriter,
 * the same HASH): the first write, trim or write-zeroes each run sends the
 * origin -- with a cache or without -- replaces it with a new random token,
 * the set it serves the origin with (or none) and the time.  A run that
 * only reads leaves it as it is.  A set's clean stop keeps the token it
 * finds then in its stop record (below, "writer_token"); its next start
 * compares, and another token means another run wrote the origin since
 * (engine/originstop.c): for an NBD export, which has no time or count,
 * the only record of tiercache's own writes there.  The record above is
 * removed at a clean stop; this one stays.
 *
 * Where (record_places()).  The protection is never skipped in silence:
 * a record that cannot be written at a start with a cache refuses the
 * start, before the cache is opened (that cache's writes would otherwise
 * be unguarded from the first request on), and a place that exists but
 * cannot be read refuses any start or format of the origin (a record
 * there may name a set holding writes the origin lacks).  Each message
 * names the directory and the ways on.  The places:
 *
 *  - $TIERCACHE_ORIGIN_RECORDS when set: that one alone, read and
 *    written (the operator's choice; every start of the origin must name
 *    the same one);
 *  - for root, /var/lib/tiercache (made mode 0755, the records 0644: any
 *    user's start can read them; they hold names, no data);
 *  - for another user, $XDG_STATE_HOME/tiercache, else
 *    ~/.local/state/tiercache (made 0700), read and written, and
 *    /var/lib/tiercache read too, so that a set root's run left recorded
 *    still refuses this user's start.  A record of a user's own place is
 *    not seen by root's starts, nor by another user's.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/originrec.h"
#include "util/crc32c.h"
#include "util/misc.h"

#define HEADER "tiercache origin record 1\n"

/* Where records are kept: places[0] is written, all are read. */
struct places {
    char dir[2][4096];
    unsigned n;
};

/* dir + "/" + leaf into out; false (out empty) if dir is not absolute. */
static bool under(const char *dir, const char *leaf, char *out, size_t len)
{
    out[0] = '\0';
    if (dir == NULL || dir[0] != '/')
        return false;
    int k = snprintf(out, len, "%s/%s", dir, leaf);
    return k > 0 && (size_t)k < len;
}

static void record_places(struct places *p)
{
    memset(p, 0, sizeof *p);
    const char *d = getenv("TIERCACHE_ORIGIN_RECORDS");
    if (d && d[0]) {
        snprintf(p->dir[p->n++], sizeof p->dir[0], "%s", d);
        return;
    }
    /* The system place, moved by the tests only (they must not touch the
     * machine's). */
    const char *sys = getenv("TIERCACHE_TEST_SYSTEM_RECORDS");
    if (sys == NULL || sys[0] == '\0')
        sys = ORIGINREC_DIR;
    if (geteuid() != 0) {
        const char *home = getenv("HOME");
        struct passwd *pw;
        if ((home == NULL || home[0] != '/') && (pw = getpwuid(geteuid())) != NULL)
            home = pw->pw_dir;
        if (under(getenv("XDG_STATE_HOME"), "tiercache", p->dir[p->n], sizeof p->dir[0]) ||
            under(home, ".local/state/tiercache", p->dir[p->n], sizeof p->dir[0]))
            p->n++;
    }
    snprintf(p->dir[p->n++], sizeof p->dir[0], "%s", sys);
}

/* How many names an origin's records are read under (origin_ids()). */
#define ORIGIN_IDS 3

static void record_path(const char *dir, const char *identity, char *out, size_t len)
{
    size_t n = strlen(identity);
    uint32_t a = tc_crc32c(0, identity, n);
    uint32_t b = tc_crc32c(0x9e3779b9u, identity, n);
    snprintf(out, len, "%s/origin-%08x%08x.tcorigin", dir, a, b);
}

/* The value of "KEY VALUE\n" in text, into out; false if absent. */
static bool field(const char *text, const char *key, char *out, size_t len)
{
    size_t klen = strlen(key);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (strncmp(p, key, klen) == 0 && p[klen] == ' ') {
            const char *v = p + klen + 1, *end = strchr(v, '\n');
            size_t vlen = end ? (size_t)(end - v) : strlen(v);
            if (vlen >= len)
                return false;
            memcpy(out, v, vlen);
            out[vlen] = '\0';
            return true;
        }
    }
    return false;
}

/* The bytes a record's origin was (its "extent" line), or, in a record
 * written before that line was kept, what its identity tells: a file from
 * 0 and a loop device from its offset, each to the end of the file; any
 * other identity from 0 to the end of itself. */
static void record_extent(const char *text, const char *id, struct dev_extent *x)
{
    char line[256];
    unsigned long long start, len;
    int end = 0;
    if (field(text, "extent", line, sizeof line) &&
        sscanf(line, "%127s %llu %llu%n", x->base, &start, &len, &end) == 3 && end > 0) {
        x->start = start;
        x->len = len;
        return;
    }
    unsigned maj, min;
    unsigned long long ino, off;
    snprintf(x->base, sizeof x->base, "%.127s", id);
    x->start = 0;
    x->len = UINT64_MAX;
    if (sscanf(id, "loop:%u:%u:%llu:%llu%n", &maj, &min, &ino, &off, &end) == 4 && end > 0) {
        snprintf(x->base, sizeof x->base, "file:%u:%u:%llu%.64s", maj, min, ino, id + end);
        x->start = off;
    }
}

/* Do two ranges of the same file or disk share a byte?  (A length that
 * reaches past the end of the numbers reaches to the end.) */
static bool extents_overlap(const struct dev_extent *a, const struct dev_extent *b)
{
    if (strcmp(a->base, b->base) != 0 || a->len == 0 || b->len == 0)
        return false;
    uint64_t a_end = a->len > UINT64_MAX - a->start ? UINT64_MAX : a->start + a->len;
    uint64_t b_end = b->len > UINT64_MAX - b->start ? UINT64_MAX : b->start + b->len;
    return a->start < b_end && b->start < a_end;
}

static int read_path(const char *dir, const char *identity, const struct dev_extent *x,
                     const char *opath, struct originrec *r, char *err, size_t errlen);

/* The record in one place: 0 (r->found says if there is one), or -1
 * with the message when it cannot be read. */
static int read_one(const char *dir, const char *identity, struct originrec *r, char *err,
                    size_t errlen)
{
    memset(r, 0, sizeof *r);
    record_path(dir, identity, r->path, sizeof r->path);
    return read_path(dir, identity, NULL, NULL, r, err, errlen);
}

/* The record in file r->path (of place dir): as read_one(), for
 * identity when given; else (identity NULL) for any origin whose bytes
 * overlap *x, or that was named opath (when given: another file now at
 * that path), r->found false for a record of another, or one that cannot
 * be parsed (whose origin nothing tells). */
static int read_path(const char *dir, const char *identity, const struct dev_extent *x,
                     const char *opath, struct originrec *r, char *err, size_t errlen)
{
    int fd = open(r->path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return 0;
        int e = errno;
        snprintf(err, errlen, "the origin records in %s cannot be read by this user (uid %u): "
                 "%s.  A record there may name a cache set holding writes the origin lacks, "
                 "so the origin is not used until it is checked: make the directory readable "
                 "('chmod 755 %s'; the records hold names, no data), run as the user who "
                 "served the origin with its cache, or name the directory every start of this "
                 "origin uses with TIERCACHE_ORIGIN_RECORDS", dir, (unsigned)geteuid(),
                 strerror(e), dir);
        return -1;
    }
    char text[8192];
    ssize_t n = read(fd, text, sizeof text - 1);
    int e = errno;
    close(fd);
    if (n < 0) {
        snprintf(err, errlen, "origin record %s: cannot read it: %s", r->path, strerror(e));
        return -1;
    }
    text[n] = '\0';
    r->found = true;
    char id[512];
    if (strncmp(text, HEADER, strlen(HEADER)) != 0 || !field(text, "identity", id, sizeof id) ||
        !field(text, "set", r->set, sizeof r->set) ||
        !field(text, "origin", r->origin, sizeof r->origin) ||
        !field(text, "devices", r->devices, sizeof r->devices)) {
        r->found = identity != NULL;
        return 0;
    }
    if (identity == NULL) {
        record_extent(text, id, &r->extent);
        r->found = r->overlap = extents_overlap(x, &r->extent);
        if (!r->found && opath && opath[0] && strcmp(r->origin, opath) == 0)
            r->found = r->by_path = true;
    } else if (strcmp(id, identity) != 0) {
        /* Another identity of the same hash: not this origin's record. */
        r->found = false;
        return 0;
    }
    r->readable = r->found;
    return 0;
}

/* Calls visit(r, arg) for each record in dir of an origin whose bytes
 * overlap *x, or that was named opath (NULL: none), under a name other
 * than those in skip (NULL-terminated:
 * those are read by their own names), until visit returns true: true then.  A place
 * that cannot be listed has nothing to add here (read_one() reports a
 * place that cannot be read). */
static bool scan_overlaps(const char *dir, const struct dev_extent *x, const char *opath,
                          const char *const *skip, bool (*visit)(struct originrec *r, void *arg),
                          void *arg)
{
    DIR *dp = opendir(dir);
    if (dp == NULL)
        return false;
    char own[ORIGIN_IDS][4096] = { "", "", "" }, err[256];
    for (unsigned k = 0; k < ORIGIN_IDS && skip[k]; k++)
        record_path(dir, skip[k], own[k], sizeof own[k]);
    struct dirent *e;
    bool done = false;
    struct originrec *r = tc_xcalloc(1, sizeof *r);
    while (!done && (e = readdir(dp)) != NULL) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, "origin-", 7) != 0 || len < 9 ||
            strcmp(e->d_name + len - 9, ".tcorigin") != 0)
            continue;
        memset(r, 0, sizeof *r);
        if (!under(dir, e->d_name, r->path, sizeof r->path) || strcmp(r->path, own[0]) == 0 ||
            strcmp(r->path, own[1]) == 0 || strcmp(r->path, own[2]) == 0)
            continue;
        if (read_path(dir, NULL, x, opath, r, err, sizeof err) == 0 && r->found)
            done = visit(r, arg);
    }
    free(r);
    closedir(dp);
    return done;
}

bool originrec_twin(const char *identity, char *out, size_t len)
{
    unsigned maj, min;
    unsigned long long ino, off;
    int end = 0;
    if (sscanf(identity, "file:%u:%u:%llu%n", &maj, &min, &ino, &end) == 3 && end > 0) {
        snprintf(out, len, "loop:%u:%u:%llu:0%s", maj, min, ino, identity + end);
        return true;
    }
    end = 0;
    if (sscanf(identity, "loop:%u:%u:%llu:%llu%n", &maj, &min, &ino, &off, &end) == 4 &&
        end > 0 && off == 0) {
        snprintf(out, len, "file:%u:%u:%llu%s", maj, min, ino, identity + end);
        return true;
    }
    return false;
}

struct first_refusing {
    const char *accept;         /* a set whose records do not refuse, or NULL */
    struct originrec *out;
};

static bool first_refusing(struct originrec *r, void *arg)
{
    struct first_refusing *f = arg;
    if (f->accept && strcmp(r->set, f->accept) == 0)
        return false;
    *f->out = *r;
    return true;
}

/* The names d's records are read under (ids, NULL-terminated): its
 * record key (dev_record_key(): how an NBD export is reached, whatever
 * the URI's spelling), its identity when that differs (records an older
 * build wrote under the URI as given), then the key's twin: a file served
 * before through a loop device over it (or the reverse) has its record
 * under the other name. */
static void origin_ids(const struct tc_dev *d, const char *ids[ORIGIN_IDS + 1], char *twin,
                       size_t len)
{
    unsigned n = 0;
    ids[n++] = dev_record_key(d);
    if (strcmp(d->identity, ids[0]) != 0)
        ids[n++] = d->identity;
    if (originrec_twin(ids[0], twin, len))
        ids[n++] = twin;
    while (n <= ORIGIN_IDS)
        ids[n++] = NULL;
}

/* The path of origin d when it is a regular file, made absolute as
 * records keep it (write_record()); "" for anything else.  A record under
 * another identity with this path is of another file that was at it: the
 * origin was replaced (moved, copied or restored over), and its set may
 * hold writes this one lacks.  Not a device node: /dev/loop0 or /dev/sdb
 * names whatever is attached there now, and a record of what was is no
 * word on what is. */
static void origin_path(const struct tc_dev *d, char *out, size_t len)
{
    char abs[PATH_MAX];
    struct stat st;
    out[0] = '\0';
    if (strstr(d->name, "://") || !realpath(d->name, abs) || stat(abs, &st) != 0 ||
        !S_ISREG(st.st_mode))
        return;
    snprintf(out, len, "%s", abs);
}

int originrec_read(const struct tc_dev *d, const uint8_t *accept_set, struct originrec *r,
                   char *err, size_t errlen)
{
    struct places p;
    record_places(&p);
    char accept[37] = "";
    if (accept_set)
        tc_uuid_format(accept_set, accept);
    char twin[512];
    const char *ids[ORIGIN_IDS + 1];
    origin_ids(d, ids, twin, sizeof twin);
    for (unsigned k = 0; ids[k]; k++) {
        for (unsigned i = 0; i < p.n; i++) {
            if (read_one(p.dir[i], ids[k], r, err, errlen) < 0)
                return -1;
            if (r->found && !(accept_set && r->readable && strcmp(r->set, accept) == 0))
                return 0;
        }
    }
    /* Then the records of any other window into the same bytes, and of
     * another file that was at the same path. */
    struct dev_extent x;
    dev_data_extent(d, &x);
    char opath[PATH_MAX];
    origin_path(d, opath, sizeof opath);
    struct first_refusing f = { .accept = accept_set ? accept : NULL, .out = r };
    for (unsigned i = 0; i < p.n; i++)
        if (scan_overlaps(p.dir[i], &x, opath, ids, first_refusing, &f))
            return 0;
    memset(r, 0, sizeof *r);
    return 0;
}

void originrec_refusal(const struct originrec *r, const char *origin, const char *what,
                       char *err, size_t errlen)
{
    if (!r->readable) {
        snprintf(err, errlen, "origin %s: its record %s cannot be read (damaged?): it may name "
                 "a cache set holding writes the origin lacks, and %s could return older data "
                 "for them.  If no cache of this origin holds such writes, remove the record",
                 origin, r->path, what);
        return;
    }
    if (r->by_path) {
        snprintf(err, errlen, "origin %s is not the file last served at that path: that one "
                 "was served with cache set %s (devices %s), which is in use or was not "
                 "stopped with every write back on it (record %s), and this file is another "
                 "-- moved, copied or restored over it since.  The set may hold acknowledged "
                 "writes this file lacks, and %s would return older data for them.  Put back "
                 "the file the set was served with; if this file is a copy of it, serve it "
                 "with that cache ('--cache %s --adopt-origin'), run 'tiercache flush' and "
                 "stop it; if that cache is gone for good, remove the record (its writes are "
                 "lost)", origin, r->set, r->devices, r->path, what, r->devices);
        return;
    }
    if (r->overlap) {
        char end[24] = "its end";
        if (r->extent.len <= UINT64_MAX - r->extent.start)
            snprintf(end, sizeof end, "%llu",
                     (unsigned long long)(r->extent.start + r->extent.len - 1));
        snprintf(err, errlen, "origin %s shares bytes with origin %s as it was last served "
                 "(bytes %llu to %s of %s: a loop device at an offset or a partition reaches "
                 "the same data), with cache set %s (devices %s), which is in use or was not "
                 "stopped with every write back on it (record %s): that set may hold "
                 "acknowledged writes to those bytes, and %s would return older data for "
                 "them.  Serve those bytes with that cache ('--cache %s'), run 'tiercache "
                 "flush' and stop it; or format those devices again ('tiercache format "
                 "--force', which refuses their dirty data without --discard-dirty); if that "
                 "cache is gone for good, remove the record (its writes are lost)", origin,
                 r->origin, (unsigned long long)r->extent.start, end, r->extent.base, r->set,
                 r->devices, r->path, what, r->devices);
        return;
    }
    snprintf(err, errlen, "origin %s was last served with cache set %s (devices %s), which is "
             "in use or was not stopped with every write back on the origin (record %s): it "
             "may hold acknowledged writes the origin lacks, and %s would return older data "
             "for them.  "
             "Serve it with that cache ('--cache %s'), run 'tiercache flush' and stop it; or "
             "format those devices again ('tiercache format --force', which refuses their "
             "dirty data without --discard-dirty); if that cache is gone for good, remove the "
             "record (its writes are lost)", origin, r->set, r->devices, r->path, what,
             r->devices);
}

/* Make dir and any missing parent (a user's ~/.local/state): 0, or
 * -errno.  Each one made is synced into its parent. */
static int make_dir(const char *dir, mode_t mode)
{
    if (mkdir(dir, mode) == 0)
        return tc_fsync_parent_dir(dir);
    if (errno == EEXIST)
        return 0;
    if (errno != ENOENT)
        return -errno;
    char parent[4096];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    if (slash == NULL || slash == parent)
        return -ENOENT;
    *slash = '\0';
    int rc = make_dir(parent, 0700);
    if (rc)
        return rc;
    if (mkdir(dir, mode) < 0 && errno != EEXIST)
        return -errno;
    return tc_fsync_parent_dir(dir);
}

/* text into the file at path, durably: written to path.new, synced,
 * renamed over path, the directory synced.  0 or -errno. */
static int write_durably(const char *path, const char *text, size_t len)
{
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.new", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return -errno;
    int rc = tc_pwrite_all(fd, text, len, 0);
    if (rc == 0 && fsync(fd) < 0)
        rc = -errno;
    close(fd);
    if (rc == 0 && rename(tmp, path) < 0)
        rc = -errno;
    if (rc == 0)
        rc = tc_fsync_parent_dir(path);
    else
        unlink(tmp);
    return rc;
}

static int write_record(const char *dir, const struct tc_dev *d, const char *origin,
                        const uint8_t set_uuid[16], const char *const *devices)
{
    const char *identity = dev_record_key(d);
    struct dev_extent x;
    dev_data_extent(d, &x);
    char path[4096];
    record_path(dir, identity, path, sizeof path);
    /* The system place is readable by every user's start (record_places()). */
    bool shared = geteuid() == 0;
    int rc = make_dir(dir, shared ? 0755 : 0700);
    if (rc)
        return rc;
    char devs[2048] = "", set[37];
    size_t used = 0;
    for (unsigned i = 0; devices[i]; i++) {
        char abs[PATH_MAX];
        const char *name = realpath(devices[i], abs) ? abs : devices[i];
        int k = snprintf(devs + used, sizeof devs - used, "%s%s", i ? "," : "", name);
        if (k < 0 || (size_t)k >= sizeof devs - used)
            break;
        used += (size_t)k;
    }
    char org[PATH_MAX];
    const char *oname = origin[0] == '/' || strstr(origin, "://") || !realpath(origin, org)
                        ? origin : org;
    tc_uuid_format(set_uuid, set);
    char text[8192];
    int len = snprintf(text, sizeof text, HEADER "identity %s\norigin %s\nset %s\ndevices %s\n"
                       "extent %s %llu %llu\n", identity, oname, set, devs, x.base,
                       (unsigned long long)x.start, (unsigned long long)x.len);
    if (len < 0 || (size_t)len >= sizeof text)
        return -ENAMETOOLONG;
    return write_durably(path, text, (size_t)len);
}

int originrec_write(const struct tc_dev *d, const char *origin, const uint8_t set_uuid[16],
                    const char *const *devices, char *err, size_t errlen)
{
    struct places p;
    record_places(&p);
    int e = write_record(p.dir[0], d, origin, set_uuid, devices);
    if (e == 0)
        return 0;
    snprintf(err, errlen, "origin %s: cannot write its record of the cache set in %s: %s.  "
             "Without it, serving the origin without this cache while the cache holds writes "
             "the origin lacks would not be refused, so it is not served: make %s writable "
             "for this user (uid %u), or name a directory it can write with "
             "TIERCACHE_ORIGIN_RECORDS (every start of this origin must then name the same "
             "one)", origin, p.dir[0], strerror(-e), p.dir[0], (unsigned)geteuid());
    return -1;
}

/* Remove r's record if it names set->set; never stops the scan. */
struct remove_set {
    const char *set;
    int rc;
};

static bool remove_of_set(struct originrec *r, void *arg)
{
    struct remove_set *rs = arg;
    if (!r->readable || strcmp(r->set, rs->set) != 0)
        return false;
    int e = unlink(r->path) < 0 ? (errno == ENOENT ? 0 : -errno) : tc_fsync_parent_dir(r->path);
    if (e && rs->rc == 0)
        rs->rc = e;
    return false;
}

int originrec_remove(const struct tc_dev *d, const uint8_t set_uuid[16])
{
    struct places p;
    record_places(&p);
    char err[256], set[37];
    tc_uuid_format(set_uuid, set);
    int rc = 0;
    char twin[512];
    const char *ids[ORIGIN_IDS + 1];
    origin_ids(d, ids, twin, sizeof twin);
    for (unsigned n = 0; n < ORIGIN_IDS * p.n && ids[n / p.n]; n++) {
        unsigned i = n % p.n;
        struct originrec r;
        if (read_one(p.dir[i], ids[n / p.n], &r, err, sizeof err) < 0) {
            /* Unreadable here: a record there is not this run's (the
             * start read every place), so nothing of it to remove. */
            continue;
        }
        if (!r.found || !r.readable || strcmp(r.set, set) != 0)
            continue;
        int e = unlink(r.path) < 0 ? (errno == ENOENT ? 0 : -errno)
                                   : tc_fsync_parent_dir(r.path);
        if (e && rc == 0)
            rc = e;
    }
    /* And the set's records under other windows into the same bytes, or
     * of another file at the same path (adopted: --adopt-origin): every
     * write of the set is on this origin now. */
    struct dev_extent x;
    dev_data_extent(d, &x);
    char opath[PATH_MAX];
    origin_path(d, opath, sizeof opath);
    struct remove_set rs = { .set = set, .rc = 0 };
    for (unsigned i = 0; i < p.n; i++)
        scan_overlaps(p.dir[i], &x, opath, ids, remove_of_set, &rs);
    return rc ? rc : rs.rc;
}

/*
 * The set's stop record: how far a cache set's log had reached at its last
 * clean stop, kept with the origin records (the places above), away from
 * the set's devices and from its state file and sequence record:
 *
 *   DIR/set-UUID.tcstop     "tiercache set stop record 1", "set UUID",
 *                           "chunk N", "written stop", "written
 *                           serving", "written salvaged" or "written
 *                           abandoned", "crc X" (CRC-32C of the lines
 *                           before it; a record without the "written"
 *                           line was written at a clean stop)
 *
 * "writer_token T" (at a clean stop): the origin's writer token then
 * (ORIGINREC_TOKEN_NONE: no writer record), compared at the next start.
 *
 * "written abandoned", chunk 0, with "abandoned_seq N": the cache was
 * abandoned at run time at log sequence N, which the state file records
 * (engine/seqrec.c, seqrec_abandoned()).  No copy of the devices is
 * refused for their chunks then (the log below N is untrusted anyway),
 * but a start whose state file and superblocks record no abandonment that
 * recent -- the state file lost or replaced, the devices an older copy
 * from before it -- would trust that older log: it is refused instead
 * (engine/abandon.c, abandon_load()).  The next write of the record, by a
 * start that knew the abandonment, drops the line.
 *
 * The sequence record beside the state file tells an older copy of the
 * devices from the current ones (engine/seqrec.c), but a restore that
 * brings back the state file's folder with them (a snapshot of the whole
 * file system, a backup of the cache's folder) brings back its older
 * sequence record too, and the copy's older data was served and its dirty
 * data written over the origin.  This record is not in that folder: a
 * start (and check) compares the devices' newest chunk with it as with
 * the sequence record.  Written at each clean stop (which writes a chunk
 * of its own), so a copy taken before the last clean stop is caught; and
 * kept up while serving, each time the sequence record's chunk moves on
 * (engine/seqrec.c, stop_mirror()), so a copy taken while serving or
 * after a kill, restored after later runs that were all killed, is caught
 * too, unless it is within the sequence record's lag of the newest chunk
 * recorded.
 *
 * "written salvaged", with "origin_mtime N", "origin_written N",
 * "origin_diskseq N" and "origin_boot HEX" (engine/originstop.c): check
 * --salvage wrote the set's dirty data to the origin, which then showed
 * that stamp.  The log still holds those versions as dirty, and the
 * origin may be served without the set from then on and written: a start
 * of the set, or another salvage, would write the older dirty data over
 * those writes and serve older clean copies.  So each compares the
 * origin's stamp now with this one first (cache_origin_salvage_changed()).
 * Builds before it read such a record as a clean stop's.
 */
#define STOP_HEADER "tiercache set stop record 1\n"

/* A small text file at path into text (NUL-terminated, cut at size - 1
 * bytes): 1; 0 if there is none; -1 with why if it cannot be opened or
 * read. */
static int read_text(const char *path, char *text, size_t size, char *why, size_t whylen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return 0;
        snprintf(why, whylen, "%s cannot be opened: %s", path, strerror(errno));
        return -1;
    }
    ssize_t n = read(fd, text, size - 1);
    int e = errno;
    close(fd);
    if (n < 0) {
        snprintf(why, whylen, "%s cannot be read: %s", path, strerror(e));
        return -1;
    }
    text[n] = '\0';
    return 1;
}

static void stop_path(const char *dir, const uint8_t set_uuid[16], char *out, size_t len)
{
    char set[37];
    tc_uuid_format(set_uuid, set);
    snprintf(out, len, "%s/set-%s.tcstop", dir, set);
}

static int stop_write(const uint8_t set_uuid[16], uint64_t chunk, const char *written,
                      const struct originrec_stamp *origin, uint64_t abandoned_seq,
                      const char *writer_token)
{
    struct places p;
    record_places(&p);
    char path[4200], set[37], text[512];
    stop_path(p.dir[0], set_uuid, path, sizeof path);
    tc_uuid_format(set_uuid, set);
    int rc = make_dir(p.dir[0], geteuid() == 0 ? 0755 : 0700);
    if (rc)
        return rc;
    int len = snprintf(text, sizeof text, STOP_HEADER "set %s\nchunk %llu\nwritten %s\n", set,
                       (unsigned long long)chunk, written);
    if (origin) {
        char boot[33];
        for (unsigned i = 0; i < 16; i++)
            snprintf(boot + 2 * i, 3, "%02x", origin->boot_id[i]);
        len += snprintf(text + len, sizeof text - (size_t)len,
                        "origin_mtime %llu\norigin_written %llu\norigin_diskseq %llu\n"
                        "origin_boot %s\n", (unsigned long long)origin->mtime,
                        (unsigned long long)origin->written,
                        (unsigned long long)origin->diskseq, boot);
    }
    if (abandoned_seq)
        len += snprintf(text + len, sizeof text - (size_t)len, "abandoned_seq %llu\n",
                        (unsigned long long)abandoned_seq);
    if (writer_token)
        len += snprintf(text + len, sizeof text - (size_t)len, "writer_token %.32s\n",
                        writer_token);
    len += snprintf(text + len, sizeof text - (size_t)len, "crc %08x\n",
                    tc_crc32c(0, text, (size_t)len));
    return write_durably(path, text, (size_t)len);
}

int originrec_stop_write(const uint8_t set_uuid[16], uint64_t chunk, bool at_stop,
                         const char *writer_token)
{
    return stop_write(set_uuid, chunk, at_stop ? "stop" : "serving", NULL, 0, writer_token);
}

int originrec_stop_write_salvaged(const uint8_t set_uuid[16], uint64_t chunk,
                                  const struct originrec_stamp *origin, const char *writer_token)
{
    return stop_write(set_uuid, chunk, "salvaged", origin, 0, writer_token);
}

int originrec_stop_write_abandoned(const uint8_t set_uuid[16], uint64_t abandoned_seq)
{
    return stop_write(set_uuid, 0, "abandoned", NULL, abandoned_seq, NULL);
}

/* The origin's stamp in a salvaged record; false if a field is missing
 * or bad. */
static bool stamp_parse(const char *text, struct originrec_stamp *st)
{
    char v[4][40];
    const char *keys[3] = { "origin_mtime", "origin_written", "origin_diskseq" };
    uint64_t *out[3] = { &st->mtime, &st->written, &st->diskseq };
    memset(st, 0, sizeof *st);
    for (unsigned i = 0; i < 3; i++) {
        char *end;
        if (!field(text, keys[i], v[i], sizeof v[i]))
            return false;
        errno = 0;
        *out[i] = strtoull(v[i], &end, 10);
        if (errno || *end != '\0' || end == v[i])
            return false;
    }
    if (!field(text, "origin_boot", v[3], sizeof v[3]) || strlen(v[3]) != 32)
        return false;
    for (unsigned i = 0; i < 16; i++) {
        unsigned b;
        if (sscanf(v[3] + 2 * i, "%2x", &b) != 1)
            return false;
        st->boot_id[i] = (uint8_t)b;
    }
    return true;
}

int originrec_stop_read(const uint8_t set_uuid[16], struct originrec_stop *s)
{
    struct places p;
    record_places(&p);
    memset(s, 0, sizeof *s);
    char set[37];
    tc_uuid_format(set_uuid, set);
    int rc = 0;
    for (unsigned i = 0; i < p.n; i++) {
        char path[4200];
        stop_path(p.dir[i], set_uuid, path, sizeof path);
        char text[1024];
        int got = read_text(path, text, sizeof text, s->why, sizeof s->why);
        if (got <= 0) {
            rc = got < 0 ? -1 : rc;
            continue;
        }
        char rset[64] = "", rchunk[32] = "", rcrc[16] = "", rwritten[16] = "";
        const char *crcline = strstr(text, "crc ");
        unsigned long long chunk;
        unsigned crc;
        char *end;
        if (strncmp(text, STOP_HEADER, strlen(STOP_HEADER)) != 0 || crcline == NULL ||
            !field(text, "set", rset, sizeof rset) ||
            !field(text, "chunk", rchunk, sizeof rchunk) ||
            !field(text, "crc", rcrc, sizeof rcrc) || sscanf(rcrc, "%8x", &crc) != 1 ||
            crc != tc_crc32c(0, text, (size_t)(crcline - text)) || strcmp(rset, set) != 0 ||
            (errno = 0, chunk = strtoull(rchunk, &end, 10), errno != 0 || *end != '\0')) {
            snprintf(s->why, sizeof s->why, "%s is damaged (its checksum or a field does not "
                     "check)", path);
            rc = -1;
            continue;
        }
        struct originrec_stamp stamp;
        bool salvaged = field(text, "written", rwritten, sizeof rwritten) &&
                        strcmp(rwritten, "salvaged") == 0;
        if (salvaged && !stamp_parse(text, &stamp)) {
            snprintf(s->why, sizeof s->why, "%s is damaged (a salvage's field of the origin "
                     "does not check)", path);
            rc = -1;
            continue;
        }
        char rab[32];
        uint64_t abandoned = 0;
        if (field(text, "abandoned_seq", rab, sizeof rab)) {
            errno = 0;
            abandoned = strtoull(rab, &end, 10);
            if (errno || *end != '\0' || end == rab) {
                snprintf(s->why, sizeof s->why, "%s is damaged (its abandonment's field does "
                         "not check)", path);
                rc = -1;
                continue;
            }
        }
        char rtok[40] = "";
        if (field(text, "writer_token", rtok, sizeof rtok) &&
            (strlen(rtok) != ORIGINREC_TOKEN_LEN ||
             strspn(rtok, "0123456789abcdef") != ORIGINREC_TOKEN_LEN)) {
            snprintf(s->why, sizeof s->why, "%s is damaged (its writer token does not check)",
                     path);
            rc = -1;
            continue;
        }
        if (!s->found || chunk > s->chunk || (chunk == s->chunk && abandoned > s->abandoned_seq)) {
            snprintf(s->writer_token, sizeof s->writer_token, "%.32s", rtok);
            s->abandoned_seq = abandoned;
            s->salvaged = salvaged;
            if (salvaged)
                s->salvaged_stamp = stamp;
            s->found = true;
            s->chunk = chunk;
            /* No "written" line: a record written at a clean stop by a
             * build that wrote only those. */
            s->serving = field(text, "written", rwritten, sizeof rwritten) &&
                         strcmp(rwritten, "serving") == 0;
            snprintf(s->path, sizeof s->path, "%s", path);
        }
    }
    return rc;
}

int originrec_stop_remove(const uint8_t set_uuid[16])
{
    struct places p;
    record_places(&p);
    int rc = 0;
    for (unsigned i = 0; i < p.n; i++) {
        char path[4200];
        stop_path(p.dir[i], set_uuid, path, sizeof path);
        int e = unlink(path) < 0 ? -errno : tc_fsync_parent_dir(path);
        /* A place this user cannot write (the system's, for a user other
         * than root) is no failure unless it holds the set's record: that
         * record, still read, would refuse the set again. */
        struct stat st;
        if (e == -ENOENT || e == -ENOTDIR ||
            ((e == -EACCES || e == -EPERM) && lstat(path, &st) < 0))
            e = 0;
        if (e && rc == 0)
            rc = e;
    }
    return rc;
}

/* ---- the origin's last writer ---- */

#define WRITER_HEADER "tiercache origin writer 1\n"

static void writer_path(const char *dir, const char *identity, char *out, size_t len)
{
    record_path(dir, identity, out, len);
    size_t n = strlen(out);
    const char *suffix = ".tcorigin";
    if (n > strlen(suffix))
        snprintf(out + n - strlen(suffix), len - (n - strlen(suffix)), ".tcwriter");
}

int originrec_writer_write(const struct tc_dev *d, const uint8_t *set_uuid)
{
    struct places p;
    record_places(&p);
    int rc = make_dir(p.dir[0], geteuid() == 0 ? 0755 : 0700);
    if (rc)
        return rc;
    char path[4200], set[37] = "none", token[ORIGINREC_TOKEN_LEN + 1], text[1024];
    writer_path(p.dir[0], dev_record_key(d), path, sizeof path);
    if (set_uuid)
        tc_uuid_format(set_uuid, set);
    uint8_t raw[16];
    tc_uuid_generate(raw);
    for (unsigned i = 0; i < 16; i++)
        snprintf(token + 2 * i, 3, "%02x", raw[i]);
    int len = snprintf(text, sizeof text, WRITER_HEADER "identity %s\nset %s\nsince %llu\n"
                       "token %s\n", dev_record_key(d), set, (unsigned long long)tc_wall_ns(),
                       token);
    if (len < 0 || (size_t)len >= sizeof text - 16)
        return -ENAMETOOLONG;
    len += snprintf(text + len, sizeof text - (size_t)len, "crc %08x\n",
                    tc_crc32c(0, text, (size_t)len));
    return write_durably(path, text, (size_t)len);
}

/* One writer record at path into w if it is newer than w's; false with
 * w->why when it cannot be read or does not check. */
static bool writer_read_one(const char *path, const char *identity, struct originrec_writer *w)
{
    char text[1024];
    int got = read_text(path, text, sizeof text, w->why, sizeof w->why);
    if (got <= 0)
        return got == 0;
    char rid[600] = "", rset[64] = "", rsince[32] = "", rcrc[16] = "", rtoken[40] = "";
    const char *crcline = strstr(text, "crc ");
    unsigned crc;
    unsigned long long since;
    char *end;
    if (strncmp(text, WRITER_HEADER, strlen(WRITER_HEADER)) != 0 || crcline == NULL ||
        !field(text, "identity", rid, sizeof rid) || !field(text, "set", rset, sizeof rset) ||
        !field(text, "since", rsince, sizeof rsince) ||
        !field(text, "token", rtoken, sizeof rtoken) ||
        strspn(rtoken, "0123456789abcdef") != ORIGINREC_TOKEN_LEN ||
        strlen(rtoken) != ORIGINREC_TOKEN_LEN ||
        !field(text, "crc", rcrc, sizeof rcrc) || sscanf(rcrc, "%8x", &crc) != 1 ||
        crc != tc_crc32c(0, text, (size_t)(crcline - text)) || strcmp(rid, identity) != 0 ||
        (strcmp(rset, "none") != 0 && strlen(rset) != 36) ||
        (errno = 0, since = strtoull(rsince, &end, 10), errno != 0 || *end != '\0')) {
        snprintf(w->why, sizeof w->why, "%s is damaged (its checksum or a field does not "
                 "check)", path);
        return false;
    }
    if (!w->found || since > w->since_ns) {
        w->found = true;
        w->since_ns = since;
        w->none = strcmp(rset, "none") == 0;
        snprintf(w->set, sizeof w->set, "%.36s", w->none ? "" : rset);
        snprintf(w->token, sizeof w->token, "%.32s", rtoken);
        snprintf(w->path, sizeof w->path, "%s", path);
    }
    return true;
}

int originrec_writer_read(const struct tc_dev *d, struct originrec_writer *w)
{
    struct places p;
    record_places(&p);
    memset(w, 0, sizeof *w);
    char twin[512];
    const char *ids[ORIGIN_IDS + 1];
    origin_ids(d, ids, twin, sizeof twin);
    int rc = 0;
    for (unsigned i = 0; i < p.n; i++) {
        for (unsigned k = 0; ids[k]; k++) {
            char path[4200];
            writer_path(p.dir[i], ids[k], path, sizeof path);
            if (!writer_read_one(path, ids[k], w))
                rc = -1;
        }
    }
    return rc;
}
