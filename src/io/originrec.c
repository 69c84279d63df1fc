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
 *                                 of the origin's identity (io/dev.h)
 *
 * a few lines of text (the identity itself, the origin's name, the set's
 * UUID and its devices, for the messages and for a human).  The rules:
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
 * naming an unknown set: nothing proves the origin current.  A record
 * that cannot be written at a start (no such directory and no right to
 * make it, a read-only file system) is warned about and the start goes
 * on: the record guards against a mistake, and its absence changes
 * nothing of what this run serves.  The check is of the origin's
 * identity, so it holds whatever name the origin is given; an origin
 * that is the same data under another identity (a copy, an NBD export by
 * another URI) is not recognised.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/originrec.h"
#include "util/crc32c.h"
#include "util/misc.h"

#define HEADER "tiercache origin record 1\n"

static const char *record_dir(void)
{
    const char *d = getenv("TIERCACHE_ORIGIN_RECORDS");
    return d && d[0] ? d : ORIGINREC_DIR;
}

static void record_path(const char *identity, char *out, size_t len)
{
    size_t n = strlen(identity);
    uint32_t a = tc_crc32c(0, identity, n);
    uint32_t b = tc_crc32c(0x9e3779b9u, identity, n);
    snprintf(out, len, "%s/origin-%08x%08x.tcorigin", record_dir(), a, b);
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

int originrec_read(const char *identity, struct originrec *r, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    record_path(identity, r->path, sizeof r->path);
    int fd = open(r->path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        /* None, or none this user may see (the directory is root's):
         * such a user cannot write one either (a warning at its start). */
        if (errno == ENOENT || errno == ENOTDIR || errno == EACCES)
            return 0;
        snprintf(err, errlen, "origin record %s: cannot read it: %s", r->path, strerror(errno));
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
        !field(text, "devices", r->devices, sizeof r->devices))
        return 0;
    /* Another identity of the same hash: not this origin's record. */
    if (strcmp(id, identity) != 0) {
        r->found = false;
        return 0;
    }
    r->readable = true;
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

int originrec_write(const char *identity, const char *origin, const uint8_t set_uuid[16],
                    const char *const *devices)
{
    char path[4096], tmp[4200];
    record_path(identity, path, sizeof path);
    const char *dir = record_dir();
    if (mkdir(dir, 0700) == 0)
        tc_fsync_parent_dir(dir);
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
    int len = snprintf(text, sizeof text, HEADER "identity %s\norigin %s\nset %s\ndevices %s\n",
                       identity, oname, set, devs);
    if (len < 0 || (size_t)len >= sizeof text)
        return -ENAMETOOLONG;
    snprintf(tmp, sizeof tmp, "%s.new", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -errno;
    int rc = tc_pwrite_all(fd, text, (size_t)len, 0);
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

int originrec_remove(const char *identity, const uint8_t set_uuid[16])
{
    struct originrec r;
    char err[256], set[37];
    if (originrec_read(identity, &r, err, sizeof err) < 0)
        return -EIO;
    tc_uuid_format(set_uuid, set);
    if (!r.found || !r.readable || strcmp(r.set, set) != 0)
        return 0;
    if (unlink(r.path) < 0)
        return errno == ENOENT ? 0 : -errno;
    return tc_fsync_parent_dir(r.path);
}
