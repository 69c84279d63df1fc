/*
 * format --force over an old tiercache cache set: never lose its dirty
 * data silently.
 *
 * Dirty data is acknowledged to clients and held only by the cache; a new
 * format makes the old log unreadable (another set's chunks), so it would
 * be gone.  Before format writes anything, every old set found on the
 * devices is opened the way check opens one (cache_open_offline: read-only,
 * shared claims, recovery rebuilds the index, nothing is written) and its
 * dirty data counted.  Format goes on only when every old set is known to
 * hold none, and no lost sectors either: the record that they are lost
 * (reads fail with EIO) goes with the set, and after a new format reads of
 * them would return the origin's older data.
 *
 * When the old log cannot be read (a superblock that does not decode --
 * damage, or another format version --, a set whose other devices are not
 * given, a log recovery refuses or finds damaged), whether it holds dirty
 * data is unknown: that is refused too.  --discard-dirty skips all of
 * this: the operator discards the old set's data knowingly.
 *
 * An old set whose devices are an older copy than its sequence record says
 * (engine/seqrec.c) is refused as holding dirty data too, but saying so:
 * serving it to flush it is refused, and its dirty data is older than the
 * origin's, so discarding it is the way out.
 *
 * The look happens after format's own checks, which release the devices
 * again (tc_format with check_only), and before its real run: an old set
 * in use is refused by those checks, naming the daemon.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "engine/cache.h"
#include "engine/lost.h"
#include "engine/seqrec.h"
#include "format/ondisk.h"
#include "io/claim.h"
#include "io/dev.h"
#include "io/reactor.h"
#include "util/log.h"
#include "util/misc.h"
#include "util/parse.h"

struct old_set {
    uint8_t uuid[16];
    uint32_t dev_count;
    const char *paths[TC_MAX_DEVICES + 1];  /* those given, NULL-terminated */
    unsigned n;
};

#define WAY_OUT "pass --discard-dirty (with --force) to discard the old set's data knowingly"

/* paths as "a,b" into out. */
static void join(const char *const *paths, char *out, size_t len)
{
    out[0] = '\0';
    for (unsigned i = 0; paths[i]; i++) {
        size_t l = strlen(out);
        snprintf(out + l, len - l, "%s%s", i ? "," : "", paths[i]);
    }
}

/* The superblock of path into *sb: 1 found, 0 no tiercache superblock,
 * -1 one that does not decode (why in err). */
static int read_sb(struct tc_reactor *r, const char *path, struct tc_superblock *sb,
                   char *err, size_t errlen)
{
    struct tc_dev *d = dev_file_open_as(r, path, "cache device", true, err, errlen);
    if (d == NULL)
        return -1;
    int found = 0;
    if (d->size >= 2 * TC_SB_SIZE) {
        uint8_t *buf = tc_alloc_aligned(2 * TC_SB_SIZE);
        int e = dev_sync_io(d, TC_DEV_READ, buf, 0, 2 * TC_SB_SIZE, 0);
        char e1[160], e2[160];
        if (e) {
            snprintf(err, errlen, "%s: cannot read the superblock: %s", path, strerror(-e));
            found = -1;
        } else if (sb_has_magic(buf) || sb_has_magic(buf + TC_SB_SIZE)) {
            found = sb_decode(buf, sb, e1, sizeof e1) == 0 ||
                    sb_decode(buf + TC_SB_SIZE, sb, e2, sizeof e2) == 0 ? 1 : -1;
            if (found < 0)
                snprintf(err, errlen, "%s", e1);
        }
        free(buf);
    }
    dev_close(d);
    return found;
}

/* One old set, all of its devices given: 0 when it holds no dirty data
 * and no lost sectors, else -1 with the refusal in err. */
static int inspect(struct tc_reactor *r, struct old_set *s, char *err, size_t errlen)
{
    char uuid[37], devs[1024], why[1024];
    tc_uuid_format(s->uuid, uuid);
    join(s->paths, devs, sizeof devs);
    struct tc_volume_config cfg;
    tc_volume_config_defaults(&cfg);
    /* A large log takes a while to read: say what format is waiting for. */
    if (isatty(2))
        fprintf(stderr, "format: reading the log of cache set %s on %s to count its dirty "
                "data...\n", uuid, devs);
    struct cache *c = cache_open_offline(r, s->paths, &cfg, why, sizeof why);
    if (c == NULL) {
        snprintf(err, errlen, "%s holds tiercache cache set %s, whose log cannot be read (%s): "
                 "whether it holds dirty data that its origin lacks is unknown.  Serve it with "
                 "its origin and run 'tiercache flush' first, or " WAY_OUT, devs, uuid, why);
        return -1;
    }
    int rc = 0;
    const struct tc_superblock *sb = &c->devs[0].sb;
    uint64_t dirty = c->map.dirty_sectors * TC_SECTOR;
    uint64_t lost = lost_sectors(&c->map.lost) * TC_SECTOR;
    char a[32], b[32];
    /* An older copy of the set's devices (its sequence record says the log
     * reached further): its dirty data is older than what the origin
     * received since, and serve and check --salvage refuse it, so the way
     * out named below (serve it and flush) is closed. */
    struct seqrec_look look;
    seqrec_look(c, &look);
    if (look.verdict == SEQREC_OLDER && dirty) {
        snprintf(err, errlen, "%s holds tiercache cache set %s with %s of dirty data, but an "
                 "older copy of its log than the daemon serving it last saw: its newest chunk "
                 "is %llu, but chunk %llu was durable on it (sequence record %s, written %s): "
                 "a restored backup or a rolled-back snapshot, whose dirty data is older than "
                 "what the origin received since (serve and check --salvage refuse it).  Put "
                 "back the current device, or " WAY_OUT, devs, uuid,
                 tc_format_size(dirty, a, sizeof a), (unsigned long long)look.found,
                 (unsigned long long)look.recorded, look.path, look.when);
        rc = -1;
    } else if (c->damage) {
        size_t n = strcspn(c->damage, "\n");
        snprintf(err, errlen, "%s holds tiercache cache set %s, whose log is damaged (%.*s): the "
                 "dirty data it holds cannot all be known.  'tiercache check --salvage' writes "
                 "what is intact back to its origin; then, or to give up the rest, " WAY_OUT,
                 devs, uuid, (int)n, c->damage);
        rc = -1;
    } else if (dirty || lost) {
        int k = snprintf(err, errlen, "%s holds tiercache cache set %s of origin '%s' with ",
                         devs, uuid, sb->origin_path);
        if (dirty && k > 0 && (size_t)k < errlen)
            k += snprintf(err + k, errlen - (size_t)k, "%s (%llu bytes) of dirty data in %llu "
                          "blocks, acknowledged to clients but not yet written back to the "
                          "origin%s", tc_format_size(dirty, a, sizeof a),
                          (unsigned long long)dirty, (unsigned long long)c->map.dirty_blocks,
                          lost ? ", and " : "");
        if (lost && k > 0 && (size_t)k < errlen)
            k += snprintf(err + k, errlen - (size_t)k, "%s (%llu bytes) of acknowledged writes "
                          "already lost with the cache (recorded, so that reads of them fail "
                          "with EIO: 'tiercache check' lists them)",
                          tc_format_size(lost, b, sizeof b), (unsigned long long)lost);
        if (k > 0 && (size_t)k < errlen)
            snprintf(err + k, errlen - (size_t)k, ": formatting would lose %s.  %sor " WAY_OUT,
                     dirty && lost ? "both" : dirty ? "the dirty data" :
                     "that record, and reads would return the origin's older data",
                     dirty ? "Serve the set with its origin and run 'tiercache flush' (or "
                             "'tiercache detach') first, " :
                             "Write those ranges again through a daemon serving the set first, ");
        rc = -1;
    }
    seqrec_look_free(&look);
    cache_close_offline(c);
    return rc;
}

int cli_format_dirty_check(const char *const *caches, struct claim_set **held,
                           unsigned *nheld, char *err, size_t errlen)
{
    *nheld = 0;
    struct tc_reactor r;
    if (reactor_init(&r, 256) < 0) {
        snprintf(err, errlen, "io_uring: %s", strerror(errno));
        return -1;
    }
    /* Recovery's own notes (a recovered unclean stop, ...) are not this
     * command's output; its refusals come back in err. */
    enum tc_log_level level = tc_log_get_level();
    tc_log_set_level(TC_LOG_ERROR);
    struct old_set sets[TC_MAX_DEVICES];
    unsigned nsets = 0;
    int rc = 0;
    char why[512];
    for (unsigned i = 0; caches[i] && rc == 0; i++) {
        if (dev_is_mem(caches[i]))
            continue;       /* a memory device holds nothing of an earlier run */
        struct tc_superblock sb;
        int found = read_sb(&r, caches[i], &sb, why, sizeof why);
        if (found < 0) {
            snprintf(err, errlen, "%s holds a tiercache superblock that cannot be read (%s): it "
                     "is damaged or of another format version, so whether its cache set holds "
                     "dirty data that its origin lacks is unknown; " WAY_OUT, caches[i], why);
            rc = -1;
        }
        if (found <= 0)
            continue;
        struct old_set *s = NULL;
        for (unsigned j = 0; j < nsets && s == NULL; j++)
            if (memcmp(sets[j].uuid, sb.set_uuid, 16) == 0)
                s = &sets[j];
        if (s == NULL) {
            s = &sets[nsets++];     /* at most one set per device */
            memset(s, 0, sizeof *s);
            memcpy(s->uuid, sb.set_uuid, 16);
            s->dev_count = sb.dev_count;
            /* Locked from this look through the format's writes: a daemon
             * starting on the set in between would serve a log that the
             * format destroys (its locks of the set share this one). */
            if (claim_set_enabled()) {
                held[*nheld] = claim_set_hold(sb.set_uuid, caches[i], err, errlen);
                if (held[*nheld] == NULL) {
                    rc = -1;
                    break;
                }
                (*nheld)++;
            }
        }
        if (s->n < TC_MAX_DEVICES)
            s->paths[s->n++] = caches[i];
    }
    for (unsigned j = 0; j < nsets && rc == 0; j++) {
        struct old_set *s = &sets[j];
        if (s->n != s->dev_count) {
            char uuid[37], devs[1024];
            tc_uuid_format(s->uuid, uuid);
            join(s->paths, devs, sizeof devs);
            snprintf(err, errlen, "%s belong%s to tiercache cache set %s of %u devices, of which "
                     "%u %s given: its log cannot be read without the others, so whether it "
                     "holds dirty data that its origin lacks is unknown.  Serve it (all its "
                     "devices) with its origin and run 'tiercache flush' first, give all its "
                     "devices to format, or " WAY_OUT, devs, s->n == 1 ? "s" : "", uuid,
                     s->dev_count, s->n, s->n == 1 ? "is" : "are");
            rc = -1;
            break;
        }
        rc = inspect(&r, s, err, errlen);
    }
    tc_log_set_level(level);
    reactor_fini(&r);
    return rc;
}
