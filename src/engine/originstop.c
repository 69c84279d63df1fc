/*
 * An origin written while no daemon served its cache.
 *
 * Nothing may write the origin while its cache is stopped: the cache's
 * clean copies of the blocks written would be older than the origin and
 * served as current, and its dirty data would be written back over the
 * newer writes.  It happens by mistake -- a file system on the origin
 * mounted without the cache, a copy or a restore into it, a second
 * program.  So a clean stop records, after the daemon's last origin
 * write, what shows such a write later (ondisk.h, the clean-stop record):
 *
 *   a file       its modification time (stop_origin_mtime)
 *   a block      the sectors the kernel counted written to it or
 *   device       discarded, the device's sequence number and the boot ID
 *                (stop_origin_written, _diskseq, _boot_id;
 *                io/writecount.c)
 *
 * and the next start compares (cache_origin_changed()).  Evidence of a
 * write -- another time, a higher count in the same boot of the same
 * device -- refuses the start, naming the origin, the evidence, the dirty
 * data and the ways on, unless --adopt-origin says the origin is the
 * cache's as it is (its time only set, the same data written again; the
 * cache's dirty data then wins).  Refused rather than served without the
 * cache's clean copies: the start then writes nothing, the operator learns
 * of the mistake while it can still be undone (the writer's file system
 * may hold data it read from an origin that lacked the cache's dirty
 * data), and the way on is one command that loses nothing when the cache
 * holds no dirty data (format --force).
 *
 * When the comparison cannot be made, the start goes on with a warning:
 * the machine was restarted since the stop (counts start again at each
 * boot), the device was set up again (a loop device detached and
 * attached, a disk plugged in again: another sequence number, or a count
 * lower than recorded), or the kernel keeps no count now (its I/O
 * statistics turned off).  Nothing is known either after a crash or a
 * kill (no clean-stop record), for an NBD origin, or for a record of a
 * build before the fields: the cache's copies are then served as current.
 * check --salvage asks the same before it writes the dirty data there.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "engine/cache.h"
#include "engine/originstop.h"
#include "io/writecount.h"
#include "util/log.h"
#include "util/misc.h"
#include "util/parse.h"

/* A time in nanoseconds as "YYYY-MM-DD HH:MM:SS.NNNNNNNNN UTC". */
static const char *format_ns(uint64_t ns, char *out, size_t len)
{
    time_t t = (time_t)(ns / 1000000000ull);
    struct tm tm;
    char day[32] = "?";
    if (gmtime_r(&t, &tm))
        strftime(day, sizeof day, "%Y-%m-%d %H:%M:%S", &tm);
    snprintf(out, len, "%s.%09llu UTC", day, (unsigned long long)(ns % 1000000000ull));
    return out;
}

static bool all_zero(const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (b[i])
            return false;
    return true;
}

void cache_origin_at_stop(struct cache *c, struct tc_superblock *out)
{
    memset(out, 0, sizeof *out);
    if (!dev_file_mtime(c->vol->origin, &out->stop_origin_mtime))
        out->stop_origin_mtime = 0;
    struct dev_write_count n;
    if (dev_write_count(c->vol->origin, &n)) {
        out->stop_origin_written = n.sectors;
        out->stop_origin_diskseq = n.diskseq;
        memcpy(out->stop_origin_boot_id, n.boot_id, 16);
    }
}

enum verdict { UNCHANGED, WRITTEN, UNKNOWN };

/* A file's time: written, or not (what the record has not is unchanged). */
static enum verdict file_verdict(const struct tc_superblock *sb, struct tc_dev *origin,
                                 char *what, size_t len)
{
    uint64_t now;
    if (sb->stop_origin_mtime == 0 || !dev_file_mtime(origin, &now) ||
        now == sb->stop_origin_mtime)
        return UNCHANGED;
    char then_s[64], now_s[64];
    snprintf(what, len, "its modification time was %s at the stop, it is %s",
             format_ns(sb->stop_origin_mtime, then_s, sizeof then_s),
             format_ns(now, now_s, sizeof now_s));
    return WRITTEN;
}

/* A block device's count, compared when it is of one boot and one
 * instance of the device (io/writecount.c). */
static enum verdict block_verdict(const struct tc_superblock *sb, struct tc_dev *origin,
                                  char *what, size_t len)
{
    if (all_zero(sb->stop_origin_boot_id, 16))
        return UNCHANGED;
    struct dev_write_count now;
    char boot[37];
    tc_uuid_format(sb->stop_origin_boot_id, boot);
    if (!dev_write_count(origin, &now)) {
        snprintf(what, len, "the kernel keeps no count of its writes now (its I/O statistics "
                 "turned off: queue/iostats)");
        return UNKNOWN;
    }
    if (memcmp(now.boot_id, sb->stop_origin_boot_id, 16) != 0) {
        char nboot[37];
        tc_uuid_format(now.boot_id, nboot);
        snprintf(what, len, "the machine was restarted since the stop (boot ID %s then, %s "
                 "now), and the kernel's count of its writes with it", boot, nboot);
        return UNKNOWN;
    }
    if ((now.diskseq && sb->stop_origin_diskseq && now.diskseq != sb->stop_origin_diskseq) ||
        now.sectors < sb->stop_origin_written) {
        snprintf(what, len, "the device was set up again since the stop (sequence number "
                 "%llu then, %llu now; %llu sectors written then, %llu now), and the kernel's "
                 "count of its writes with it", (unsigned long long)sb->stop_origin_diskseq,
                 (unsigned long long)now.diskseq, (unsigned long long)sb->stop_origin_written,
                 (unsigned long long)now.sectors);
        return UNKNOWN;
    }
    if (now.sectors == sb->stop_origin_written)
        return UNCHANGED;
    snprintf(what, len, "the kernel counted %llu sectors written or discarded on it since the "
             "stop: %llu at the stop, %llu now, in this boot (%s) of the same device",
             (unsigned long long)(now.sectors - sb->stop_origin_written),
             (unsigned long long)sb->stop_origin_written, (unsigned long long)now.sectors, boot);
    return WRITTEN;
}

int cache_origin_changed(struct cache *c, struct tc_dev *origin, bool adopt, char *err,
                         size_t errlen)
{
    const struct tc_superblock *sb = &c->devs[0].sb;
    if (!(sb->flags & TC_SB_CLEAN_STOP))
        return 0;
    char what[400];
    bool file = dev_file_mtime(origin, &(uint64_t){ 0 });
    enum verdict v = file ? file_verdict(sb, origin, what, sizeof what)
                          : block_verdict(sb, origin, what, sizeof what);
    if (v == UNCHANGED)
        return 0;
    if (v == UNKNOWN) {
        tc_warn("origin %s: whether it was written since the cache on %s stopped cleanly "
                "cannot be told (%s): the cache's copies of its blocks are served as current.  "
                "Nothing may write the origin while its cache is stopped", origin->name,
                c->devs[0].dev->name, what);
        return 0;
    }
    if (adopt) {
        tc_warn("origin %s was modified after the cache's clean stop (%s): accepted as the "
                "cache's (--adopt-origin)", origin->name, what);
        return 0;
    }
    char dirty[32], dpart[96] = "";
    if (c->map.dirty_sectors)
        snprintf(dpart, sizeof dpart, ", and the cache's dirty data (%s) would overwrite those "
                 "writes", tc_format_size(c->map.dirty_sectors * TC_SECTOR, dirty, sizeof dirty));
    snprintf(err, errlen,
             "origin %s was modified after the cache on %s stopped cleanly (%s): something "
             "wrote it while no daemon served it, so the cache's copies of its blocks may be "
             "older than the origin%s.  If the origin's data was not changed (%s), pass "
             "--adopt-origin; %s",
             origin->name, c->devs[0].dev->name, what, dpart,
             file ? "only its time" : "the same data written again",
             c->map.dirty_sectors
                 ? "to keep the cache's dirty data over the origin's writes, pass "
                   "--adopt-origin too; to keep the origin as it is, discard the cache with "
                   "'tiercache format --force --discard-dirty' (dirty data of the cache lost)"
                 : "else reformat the cache with 'tiercache format --force' (it holds no "
                   "dirty data: nothing is lost)");
    return -1;
}
