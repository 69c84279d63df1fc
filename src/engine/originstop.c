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
 *                io/writecount.c); for a loop device also its backing
 *                file's modification time (stop_origin_mtime): writes to
 *                the file around the device are in no count
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
 * statistics turned off).  Nothing is recorded for an NBD origin, nor by
 * a build before the fields: then, as for a time put back, the sample of
 * clean blocks below (cache_origin_sample()) is all that can tell -- but
 * for tiercache's own writes: every start that may write an origin
 * records the set it serves it with, or none (io/originrec.c, the origin's
 * last writer), so a start after a clean stop that finds another writer
 * recorded (another set, or a serve without a cache) knows the origin was
 * served since (writer_verdict()), an NBD export as any other.
 * Nothing is known after a crash or a kill (no clean-stop record): the
 * sample alone tells there.
 * check --salvage asks the same before it writes the dirty data there.
 *
 * After check --salvage wrote the set's dirty data to the origin, the
 * log still holds it as dirty, and the way the salvage leads to is the
 * origin served without the set: a later start of the set (or another
 * salvage) would write that older data over the writes made since, and
 * serve its older clean copies -- after a kill as much as after a clean
 * stop.  So the salvage records the same evidence of the origin in the
 * set's stop record (io/originrec.c, "written salvaged"), and both
 * compare it first (cache_origin_salvage_changed()), in the same way.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/cache.h"
#include "engine/cacheio.h"
#include "engine/failure.h"
#include "engine/originstop.h"
#include "io/bufpool.h"
#include "io/originrec.h"
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

void origin_stamp(struct tc_dev *origin, struct originrec_stamp *out)
{
    memset(out, 0, sizeof *out);
    char backing[4096];
    /* A loop device's time is its backing file's (io/writecount.h). */
    if (!dev_file_mtime(origin, &out->mtime) &&
        !dev_loop_backing_mtime(origin, backing, sizeof backing, &out->mtime))
        out->mtime = 0;
    struct dev_write_count n;
    if (dev_write_count(origin, &n)) {
        out->written = n.sectors;
        out->diskseq = n.diskseq;
        memcpy(out->boot_id, n.boot_id, 16);
    }
}

/* A stamp as a superblock's stop_origin_* fields (the rest zero): what the
 * comparisons below read. */
static void stamp_into(const struct originrec_stamp *st, struct tc_superblock *out)
{
    memset(out, 0, sizeof *out);
    out->stop_origin_mtime = st->mtime;
    out->stop_origin_written = st->written;
    out->stop_origin_diskseq = st->diskseq;
    memcpy(out->stop_origin_boot_id, st->boot_id, 16);
}

void cache_origin_at_stop(struct cache *c, struct tc_superblock *out)
{
    struct originrec_stamp st;
    origin_stamp(c->vol->origin, &st);
    stamp_into(&st, out);
}

enum verdict { UNCHANGED, WRITTEN, UNKNOWN };

/* A file's time: written, or not (what the record has not is unchanged). */
static enum verdict file_verdict(const struct tc_superblock *sb, struct tc_dev *origin,
                                 const char *event, char *what, size_t len)
{
    uint64_t now;
    if (sb->stop_origin_mtime == 0 || !dev_file_mtime(origin, &now) ||
        now == sb->stop_origin_mtime)
        return UNCHANGED;
    char then_s[64], now_s[64];
    snprintf(what, len, "its modification time was %s at the %s, it is %s",
             format_ns(sb->stop_origin_mtime, then_s, sizeof then_s), event,
             format_ns(now, now_s, sizeof now_s));
    return WRITTEN;
}

/* A block device's count, compared when it is of one boot and one
 * instance of the device (io/writecount.c). */
static enum verdict block_verdict(const struct tc_superblock *sb, struct tc_dev *origin,
                                  const char *event, char *what, size_t len)
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
        snprintf(what, len, "the machine was restarted since the %s (boot ID %s then, %s "
                 "now), and the kernel's count of its writes with it", event, boot, nboot);
        return UNKNOWN;
    }
    if ((now.diskseq && sb->stop_origin_diskseq && now.diskseq != sb->stop_origin_diskseq) ||
        now.sectors < sb->stop_origin_written) {
        snprintf(what, len, "the device was set up again since the %s (sequence number "
                 "%llu then, %llu now; %llu sectors written then, %llu now), and the kernel's "
                 "count of its writes with it", event, (unsigned long long)sb->stop_origin_diskseq,
                 (unsigned long long)now.diskseq, (unsigned long long)sb->stop_origin_written,
                 (unsigned long long)now.sectors);
        return UNKNOWN;
    }
    if (now.sectors == sb->stop_origin_written)
        return UNCHANGED;
    snprintf(what, len, "the kernel counted %llu sectors written or discarded on it since the "
             "%s: %llu at the %s, %llu now, in this boot (%s) of the same device",
             (unsigned long long)(now.sectors - sb->stop_origin_written), event,
             (unsigned long long)sb->stop_origin_written, event, (unsigned long long)now.sectors,
             boot);
    return WRITTEN;
}

/* A block device's verdict: its count's, and, for a loop device, its
 * backing file's time -- writes to the file around the device are in no
 * count (io/writecount.h).  A time the record has not (0: a record of an
 * older build) tells nothing. */
static enum verdict device_verdict(const struct tc_superblock *sb, struct tc_dev *origin,
                                   const char *event, char *what, size_t len)
{
    enum verdict v = block_verdict(sb, origin, event, what, len);
    char backing[4096], then_s[64], now_s[64];
    uint64_t now;
    if (v == WRITTEN || sb->stop_origin_mtime == 0 ||
        !dev_loop_backing_mtime(origin, backing, sizeof backing, &now) ||
        now == sb->stop_origin_mtime)
        return v;
    snprintf(what, len, "its loop device's backing file %.200s was modified around it: its "
             "modification time was %s at the %s, it is %s", backing,
             format_ns(sb->stop_origin_mtime, then_s, sizeof then_s), event,
             format_ns(now, now_s, sizeof now_s));
    return WRITTEN;
}

/* The evidence a writer record w gives, into what: another run wrote the
 * origin (writer_verdict(), cache_origin_salvage_changed()). */
static void writer_written(const struct originrec_writer *w, char *what, size_t len)
{
    char when[64];
    snprintf(what, len, "tiercache wrote it since, %s%s, from %s (its writer record %.300s)",
             w->none ? "without a cache" : "with cache set ", w->none ? "" : w->set,
             format_ns(w->since_ns, when, sizeof when), w->path);
}

int cache_origin_salvage_changed(struct cache *c, struct tc_dev *origin, bool adopt, char *err,
                                 size_t errlen)
{
    struct originrec_stop *st = tc_xcalloc(1, sizeof *st);
    if (originrec_stop_read(c->set_uuid, st) < 0 || !st->salvaged) {
        free(st);      /* one that cannot be read: said by the sequence record's look */
        return 0;
    }
    struct tc_superblock *then = tc_xmalloc(sizeof *then);
    stamp_into(&st->salvaged_stamp, then);
    char what[600];
    bool file = dev_file_mtime(origin, &(uint64_t){ 0 });
    enum verdict v = file ? file_verdict(then, origin, "salvage", what, sizeof what)
                          : device_verdict(then, origin, "salvage", what, sizeof what);
    free(then);
    /* The origin's last writer since the salvage (io/originrec.c): the
     * salvage's own writes made the token its record keeps. */
    struct originrec_writer *w = tc_xcalloc(1, sizeof *w);
    if (v != WRITTEN && st->writer_token[0] && originrec_writer_read(origin, w) == 0 &&
        w->found && strcmp(w->token, st->writer_token) != 0) {
        writer_written(w, what, sizeof what);
        v = WRITTEN;
    }
    free(w);
    int rc = 1;
    if (v == UNKNOWN) {
        tc_warn("origin %s: whether it was written since 'tiercache check --salvage' wrote the "
                "dirty data of the cache on %s to it cannot be told (%s; the set's stop record "
                "%s): if it was, the cache's dirty data overwrites those writes.  An origin "
                "salvaged to is served without the cache, or the cache is formatted again",
                origin->name, c->devs[0].dev->name, what, st->path);
    } else if (v == WRITTEN && adopt) {
        tc_warn("origin %s was written after 'tiercache check --salvage' wrote the cache's "
                "dirty data to it (%s): accepted as the cache's (--adopt-origin); every clean "
                "sector the cache holds is compared with it", origin->name, what);
        c->adopt_compare_all = true;
    } else if (v == WRITTEN) {
        snprintf(err, errlen,
                 "origin %s was written after 'tiercache check --salvage' wrote the dirty data "
                 "of the cache on %s to it (%s; the set's stop record %s): the cache still "
                 "holds that data as dirty and would write it over those writes, and its "
                 "clean copies may be older than the origin.  The origin holds the cache's "
                 "data already: reformat the cache ('tiercache format --force "
                 "--discard-dirty'); if the origin's data was not changed (%s), pass "
                 "--adopt-origin", origin->name, c->devs[0].dev->name, what, st->path,
                 file ? "only its time" : "the same data written again");
        rc = -1;
    }
    /* The salvage judged the origin against the clean stop of the set as
     * it was then (the newest chunk it found): changes since that stop
     * are the salvage's own.  Another copy of the set -- an older one,
     * put back -- stopped before that: what the origin received between
     * its stop and the salvage is for the clean-stop check to judge. */
    const struct tc_superblock *sb = &c->devs[0].sb;
    if (rc == 1 && (sb->flags & TC_SB_CLEAN_STOP) && sb->stop_chunk_seq != st->chunk)
        rc = 0;
    free(st);
    return rc;
}

void cache_origin_salvage_served(struct cache *c)
{
    struct originrec_stop *st = tc_xcalloc(1, sizeof *st);
    if (originrec_stop_read(c->set_uuid, st) == 0 && st->salvaged) {
        int e = originrec_stop_write(c->set_uuid, st->chunk, false, NULL);
        if (e < 0)
            tc_warn("the set's stop record %s: cannot write it again (%s): it still says "
                    "that the set was salvaged, and a start after this daemon's own writes "
                    "to the origin will refuse the set (remove the record by hand)", st->path,
                    strerror(-e));
    }
    free(st);
}

/* Whether writer record w names this set: the origin was last written by
 * a run of this set itself -- one whose stop was cut short after its
 * superblocks recorded the clean stop but before the stop record took the
 * new token (a second SIGTERM).  Its writes went through this cache.  (A
 * copy of the set's devices served elsewhere writes the same set's name,
 * and moves the set's stop record past these devices' log: refused as an
 * older copy, seqrec.c.) */
static bool own_run(const struct cache *c, const struct originrec_writer *w)
{
    char set[37];
    tc_uuid_format(c->set_uuid, set);
    return !w->none && strcmp(w->set, set) == 0;
}

/* The origin's last writer (io/originrec.c): the first write of every run
 * (another set's, one without a cache, this set's own) records a new
 * token, and this set's clean stop kept the token it found then.  Another
 * token now means another run wrote the origin since.  The only evidence
 * for an origin the other verdicts know nothing of (an NBD export), when
 * tiercache wrote it.  Nothing kept (a stop record of an older build, or
 * none): nothing to compare. */
static enum verdict writer_verdict(struct cache *c, struct tc_dev *origin, char *what,
                                   size_t len)
{
    if (!c->vol->origin_recorded)
        return UNCHANGED;
    struct originrec_stop *st = tc_xcalloc(1, sizeof *st);
    struct originrec_writer *w = tc_xcalloc(1, sizeof *w);
    enum verdict v = UNCHANGED;
    if (originrec_stop_read(c->set_uuid, st) < 0 || !st->found || !st->writer_token[0])
        goto out;
    if (originrec_writer_read(origin, w) < 0) {
        snprintf(what, len, "its writer record: %.900s", w->why);
        v = UNKNOWN;
    } else if (!w->found) {
        if (strcmp(st->writer_token, ORIGINREC_TOKEN_NONE) != 0) {
            snprintf(what, len, "its writer record, which the set's stop record %.500s names, "
                     "is gone", st->path);
            v = UNKNOWN;
        }
    } else if (strcmp(w->token, st->writer_token) != 0 && !own_run(c, w)) {
        writer_written(w, what, len);
        v = WRITTEN;
    }
out:
    free(st);
    free(w);
    return v;
}

int cache_origin_changed(struct cache *c, struct tc_dev *origin, bool adopt, char *err,
                         size_t errlen)
{
    const struct tc_superblock *sb = &c->devs[0].sb;
    if (!(sb->flags & TC_SB_CLEAN_STOP))
        return 0;
    char what[1200];
    bool file = dev_file_mtime(origin, &(uint64_t){ 0 });
    enum verdict v = file ? file_verdict(sb, origin, "stop", what, sizeof what)
                          : device_verdict(sb, origin, "stop", what, sizeof what);
    if (v != WRITTEN) {
        char wwhat[sizeof what];
        enum verdict wv = writer_verdict(c, origin, wwhat, sizeof wwhat);
        if (wv == WRITTEN || (wv == UNKNOWN && v == UNCHANGED)) {
            v = wv;
            snprintf(what, sizeof what, "%s", wwhat);
        }
    }
    if (v == UNCHANGED)
        return 0;
    if (v == UNKNOWN) {
        tc_warn("origin %s: whether it was written since the cache on %s stopped cleanly "
                "cannot be told (%s): the cache's copies of its blocks are served as current "
                "if a sample of them matches it (--origin-check-blocks).  Nothing may write the "
                "origin while its cache is stopped", origin->name,
                c->devs[0].dev->name, what);
        return 0;
    }
    if (adopt) {
        tc_warn("origin %s was modified after the cache's clean stop (%s): accepted as the "
                "cache's (--adopt-origin); every clean sector the cache holds is compared "
                "with it", origin->name, what);
        c->adopt_compare_all = true;
        return 0;
    }
    if (c->map.idx.count == 0) {
        /* A set holding no block (a detach emptied it) has no copy that
         * could be older than the origin: the origin used without it is
         * what a detach is for. */
        tc_info("origin %s was modified after the cache's clean stop (%s): the cache holds "
                "no block, so none of its copies can be older", origin->name, what);
        return 0;
    }
    char dirty[32], dpart[96] = "";
    if (c->map.dirty_sectors)
        snprintf(dpart, sizeof dpart, ", and the cache's dirty data (%s) would overwrite those "
                 "writes", tc_format_size(c->map.dirty_sectors * TC_SECTOR, dirty, sizeof dirty));
    snprintf(err, errlen,
             "origin %s was modified after the cache on %s stopped cleanly (%s): something "
             "wrote it while no daemon served it with this cache, so the cache's copies of its "
             "blocks may be "
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

/*
 * The sample: a few of the cache's clean blocks compared with the origin.
 *
 * The records above see nothing of an NBD origin (no time, no count: the
 * export may be written by anyone, served by another server, restored, or
 * another disk put behind the same name), nor a file written in place
 * with its time put back, nor a block device after a restart of the
 * machine or of the device.  What always holds after a clean stop is the
 * invariant itself: every clean sector the cache holds is the origin's
 * sector (the stop waited for every origin write and its flush).  So the
 * start reads up to n clean blocks from both and compares them; one that
 * differs is proof that something wrote the origin while the cache was
 * stopped.  A sample can miss a change (a write to blocks the sample did
 * not take, or to blocks the cache does not hold, which is harmless): it
 * is a check against a mistake, not a proof of its absence.
 *
 * After a kill or a crash too, where the records above know nothing (the
 * daemon's own writes moved the time and the counts), and where the
 * mistake is likeliest: the origin mounted or repaired directly while its
 * daemon is down.  The invariant holds there for the blocks the sample
 * takes: the cache may hold write-through data the origin lacks (a write
 * or its flush cut short by the kill), but recovery makes every such
 * version dirty (the write-through versions above the stable mark,
 * recovery.c), and dirty blocks are never compared; a clean block after
 * recovery is one whose data the origin had written and flushed.
 *
 * A difference refuses the start, unless --adopt-origin: the operator
 * trusts the origin's data, and the cache is known to hold copies older
 * than it -- so every clean sector is then compared (a read of the cache's
 * clean data; only when a difference was found, or at once, with no
 * sample, when the records above found the origin written: a sample could
 * miss those writes) and each clean block found different is dropped from
 * the map, its tombstone appended once started (cache_mark_tombstones(),
 * as recovery's drops), the origin's data read for it from then on.  A
 * block with dirty sectors is never dropped (they are the newest data),
 * but its clean sectors are compared too: one that differs is older than
 * the origin's and cannot go alone (the map drops blocks, not sectors),
 * so the start is refused naming the block -- salvage writes the dirty
 * data to the origin, and the cache is reformatted.
 *
 *   struct sample_run        the pass: which entries (a list, or every
 *                            eligible one), the slots in flight, the
 *                            blocks found different, the first of them
 *     struct sample          one slot: a block's origin read and cache
 *                            gather, compared when both ended
 *
 * A block whose every difference is a sector the origin reads as zeroes
 * is, alone, no proof: a trim of a partly dirty block leaves its clean
 * sectors cached while the origin's range reads zeroes (a trim is
 * advisory; its sectors may read either).  But an origin replaced by a
 * blank export, or wiped, reads zeroes wherever the cache holds data: so
 * such blocks count as different once they are at least 2 and more than
 * half of the blocks compared (a trim of that much of the cache, every
 * trimmed block partly dirty, is not what trims do).  A block that also
 * holds data (not zeroes) the origin has as the cache does is not counted
 * at all: a wiped origin has none, while the dirty sectors of a trimmed
 * block are written back over the punched range -- and a small cache whose
 * few sampled blocks were all trimmed that way would otherwise be refused.
 * A few blocks changed to zeroes behind the cache are not seen.
 *
 * Eligible: a block with no dirty sector and no lost sector.  Spread: the
 * k-th of n samples is the (k * eligible / n)-th eligible entry of the
 * index, so blocks cached early and late are taken alike.  In parallel: up
 * to SAMPLE_WINDOW blocks in flight.  Nothing read counts as a client's
 * hit or miss, nor reaches the policy: only the devices' byte counters and
 * the origin_check figures see it.  A block that cannot be read (an error
 * on either side, a checksum mismatch in the cache) is not compared, and
 * said.  Nothing else runs on the reactor during the start, so entry
 * numbers stay put across the reads.
 *
 * check --salvage asks the same before it writes the cache's dirty data
 * to the origin (SAMPLE_AT_SALVAGE): a blank or another volume's export
 * behind the cache's URI passes every other check, and the dirty data
 * written there would land on the wrong volume (or on an empty disk taken
 * for the cache's origin, the real one left without it).  A difference is
 * refused the same way; salvage changes nothing in the cache, so it never
 * drops blocks (its --adopt-origin salvages anyway).  A log that salvage
 * reads may be damaged: a damaged chunk may have held a newer version of
 * a block cached clean, written back since (its clean record then names a
 * version recovery never found), and the older clean copy would differ
 * from the origin with nothing wrong.  So a block is eligible only when
 * each of its valid sectors is served from a group newer than every
 * damaged one (c->damage_group_max; the bound salvage.c trusts its dirty
 * versions by): a damaged chunk held only versions older than those.
 */
#define SAMPLE_WINDOW 16

struct sample {
    struct sample_run *run;
    uint64_t oblock;
    uint32_t id;
    struct tc_mask valid;           /* the sectors compared */
    uint64_t len;                   /* origin bytes read (a last, short block) */
    uint8_t *obuf, *cbuf;
    struct tc_dev_io dio;
    int oerr, cerr;
    unsigned pending;               /* reads out, and the issuer's hold */
    bool busy;
};

struct sample_run {
    struct cache *c;
    struct tc_dev *origin;
    const char *when;               /* "at the start", "before the salvage" */
    const uint32_t *ids;            /* the entries to compare, or NULL: every eligible one */
    uint32_t nids, cursor;          /* into ids[], or the index's entries */
    struct sample slot[SAMPLE_WINDOW];
    unsigned inflight;
    uint64_t compared, unread;
    uint64_t zeroed;                /* sectors that differ, zeroes on the origin */
    uint64_t *differ;               /* the blocks found different */
    uint64_t ndiffer, cap;
    /* --adopt-origin's pass over every entry: blocks with dirty sectors
     * too, their clean sectors compared; those that differ (not dropped:
     * their dirty sectors are the newest data). */
    bool partial;
    uint64_t *pdiffer;
    uint64_t npdiffer, pcap;
    /* The blocks that differ only where the origin reads zeroes, with
     * the first such sector of each (counted as different by
     * sample_zero_rule() when they are most of the sample). */
    struct sample_zero { uint64_t oblock; uint32_t id; unsigned sector, byte; } *zdiffer;
    uint64_t nzdiffer, zcap;
    /* The lowest block found different: its entry, first different
     * sector, and the origin offset of its first different byte. */
    uint64_t first_ob;
    uint32_t first_id;
    unsigned first_sector;
    uint64_t first_byte;
};

static void sample_start(struct sample_run *r);
static bool sample_eligible(struct cache *c, uint32_t id, bool partial, struct tc_mask *valid);

/* Note block oblock (entry id) as different, its first different byte at
 * sector k, byte b of the sector. */
static void sample_differs(struct sample_run *r, uint64_t oblock, uint32_t id, unsigned k,
                           unsigned b)
{
    if (r->ndiffer == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 64;
        r->differ = realloc(r->differ, r->cap * sizeof *r->differ);
        if (r->differ == NULL)
            abort();
    }
    r->differ[r->ndiffer++] = oblock;
    if (r->ndiffer == 1 || oblock < r->first_ob) {
        r->first_ob = oblock;
        r->first_id = id;
        r->first_sector = k;
        r->first_byte = oblock * r->c->block_size + (uint64_t)k * TC_SECTOR + b;
    }
}

/* Blocks differing only by the origin's zeroes count as different when
 * they are at least 2 and more than half of the blocks compared: a blank
 * or wiped origin, not a trim (see the block comment above). */
static void sample_zero_rule(struct sample_run *r)
{
    if (r->nzdiffer < 2 || 2 * r->nzdiffer <= r->compared)
        return;
    for (uint64_t i = 0; i < r->nzdiffer; i++) {
        const struct sample_zero *z = &r->zdiffer[i];
        sample_differs(r, z->oblock, z->id, z->sector, z->byte);
        cache_trace(r->c, z->oblock, "origin sample: reads zeroes where the cache holds data "
                    "(sector %u), as most of the sample does", z->sector);
    }
    r->nzdiffer = 0;
}

static void sample_compare(struct sample *s)
{
    struct sample_run *r = s->run;
    struct cache *c = r->c;
    if (s->oerr || s->cerr) {
        r->unread++;
        tc_warn("origin %s: cached block %llu not compared with it %s (%s read "
                "failed: %s)", r->origin->name, (unsigned long long)s->oblock, r->when,
                s->oerr ? "the origin's" : "the cache's", strerror(-(s->oerr ? s->oerr : s->cerr)));
    } else {
        r->compared++;
        c->st.origin_check_read_bytes += s->len;
        unsigned nsec = (unsigned)(s->len / TC_SECTOR);
        bool differs = false, zero_only = false, data_same = false;
        bool partly_dirty = ce_any_dirty(&c->map.idx, s->id);
        unsigned zsector = 0, zbyte = 0;
        for (unsigned k = 0; k < nsec; k++) {
            const uint8_t *o = s->obuf + (size_t)k * TC_SECTOR, *m = s->cbuf + (size_t)k * TC_SECTOR;
            if (!mask_test(&s->valid, k))
                continue;
            if (memcmp(o, m, TC_SECTOR) == 0) {
                /* Data (not zeroes) the origin holds as the cache does:
                 * not a blank or wiped origin. */
                if (!data_same && !(o[0] == 0 && memcmp(o, o + 1, TC_SECTOR - 1) == 0))
                    data_same = true;
                continue;
            }
            /* Zeroes on the origin prove nothing: a trim of a block that
             * was partly dirty keeps the block's clean sectors in the
             * cache (a trim is advisory: writepath.c) while the origin's
             * range reads zeroes from then on.  But for --adopt-origin's
             * pass over every entry (r->partial): the origin's data is
             * what the operator trusts, its zeroes too (written there
             * behind the cache, say), so they differ like any data -- a
             * clean block goes (only a miss), a block with dirty sectors
             * refuses the start (a trimmed one too: the rule errs on the
             * side of refusing). */
            if (!r->partial && o[0] == 0 && memcmp(o, o + 1, TC_SECTOR - 1) == 0) {
                r->zeroed++;
                if (!zero_only) {
                    zsector = k;
                    while (m[zbyte] == 0)   /* the cache's first byte not zero */
                        zbyte++;
                }
                zero_only = true;
                continue;
            }
            unsigned b = 0;
            while (o[b] == m[b])
                b++;
            if (partly_dirty) {
                if (r->npdiffer == r->pcap) {
                    r->pcap = r->pcap ? 2 * r->pcap : 64;
                    r->pdiffer = realloc(r->pdiffer, r->pcap * sizeof *r->pdiffer);
                    if (r->pdiffer == NULL)
                        abort();
                }
                r->pdiffer[r->npdiffer++] = s->oblock;
            } else {
                sample_differs(r, s->oblock, s->id, k, b);
            }
            cache_trace(c, s->oblock, "origin sample: differs from the origin at sector %u%s", k,
                        partly_dirty ? " (a clean sector of a block with dirty ones)" : "");
            differs = true;
            break;
        }
        /* Zeroes on the origin beside data it holds as the cache does:
         * a trim's (its written-back dirty sectors), not a wipe's.  (Only
         * the sample gets here: it takes no block with dirty sectors, and
         * the pass over every entry counts zeroes as a difference.) */
        if (zero_only && !differs && !data_same) {
            if (r->nzdiffer == r->zcap) {
                r->zcap = r->zcap ? 2 * r->zcap : 64;
                r->zdiffer = realloc(r->zdiffer, r->zcap * sizeof *r->zdiffer);
                if (r->zdiffer == NULL)
                    abort();
            }
            r->zdiffer[r->nzdiffer++] = (struct sample_zero){ s->oblock, s->id, zsector, zbyte };
        }
    }
    bufpool_put(s->obuf, (size_t)c->block_size);
    bufpool_put(s->cbuf, (size_t)c->block_size);
    s->obuf = s->cbuf = NULL;
    s->busy = false;
    r->inflight--;
    sample_start(r);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void sample_origin_done(struct tc_dev_io *dio, int err)
{
    struct sample *s = container_of(dio, struct sample, dio);
    s->oerr = err;
    if (--s->pending == 0)
        sample_compare(s);
}

static void sample_cache_done(void *arg, int err)
{
    struct sample *s = arg;
    s->cerr = err;
    if (--s->pending == 0)
        sample_compare(s);
}

/* The next entry to compare, with its sectors; false when none is left. */
static bool sample_next(struct sample_run *r, uint32_t *id, struct tc_mask *valid)
{
    if (r->ids) {
        while (r->cursor < r->nids) {
            *id = r->ids[r->cursor++];
            if (sample_eligible(r->c, *id, false, valid))
                return true;
        }
        return false;
    }
    while (r->cursor < r->c->map.idx.used) {
        *id = r->cursor++;
        if (sample_eligible(r->c, *id, r->partial, valid))
            return true;
    }
    return false;
}

/* Issue comparisons while a slot is free.  (A gather may complete before
 * it returns: the issuer's hold in pending keeps the slot until both reads
 * have been issued.) */
static void sample_start(struct sample_run *r)
{
    struct cache *c = r->c;
    while (r->inflight < SAMPLE_WINDOW) {
        uint32_t id;
        struct tc_mask valid;
        if (!sample_next(r, &id, &valid))
            return;
        struct sample *s = NULL;
        for (unsigned i = 0; s == NULL; i++)
            if (!r->slot[i].busy)
                s = &r->slot[i];
        *s = (struct sample){ .run = r, .id = id, .valid = valid, .busy = true, .pending = 3 };
        s->oblock = ce_oblock(CE(&c->map.idx, id));
        uint64_t at = s->oblock * c->block_size;
        s->len = c->vol->size - at < c->block_size ? c->vol->size - at : c->block_size;
        r->inflight++;
        s->obuf = bufpool_get((size_t)c->block_size);
        s->cbuf = bufpool_get((size_t)c->block_size);
        s->dio = (struct tc_dev_io){ .op = TC_DEV_READ, .buf = s->obuf, .off = at, .len = s->len,
                                     .cb = sample_origin_done };
        dev_submit(r->origin, &s->dio);
        cache_gather(c, id, &s->valid, s->cbuf, sample_cache_done, s);
        if (--s->pending == 0)
            sample_compare(s);
    }
}

/* The eligible entry: cached, clean, nothing lost, some sector valid
 * within the origin, every valid sector served from a group newer than
 * any damage in the log; its valid sectors there into *valid.  partial
 * (--adopt-origin's pass over every entry): one with dirty sectors too,
 * its clean sectors alone into *valid. */
static bool sample_eligible(struct cache *c, uint32_t id, bool partial, struct tc_mask *valid)
{
    const struct centry *e = CE(&c->map.idx, id);
    if (ce_is_free(e) || (!partial && ce_any_dirty(&c->map.idx, id)))
        return false;
    uint64_t ob = ce_oblock(e);
    struct tc_mask dirty, lost;
    if (lost_get(&c->map.lost, ob, &lost))
        return false;
    uint64_t at = ob * c->block_size;
    if (at >= c->vol->size)
        return false;
    ce_get_masks(&c->map.idx, id, valid, &dirty);
    mask_andnot(valid, &dirty);
    uint64_t len = c->vol->size - at < c->block_size ? c->vol->size - at : c->block_size;
    for (unsigned k = (unsigned)(len / TC_SECTOR); k < c->spb; k++)
        valid->w[k / 64] &= ~(1ull << (k % 64));
    if (c->damage_group_max)
        for (unsigned k = 0; k < c->spb; k++) {
            if (!mask_test(valid, k))
                continue;
            uint32_t f = ce_locate(&c->map.idx, id, k);
            if (f == NIL || c->damage_group_max == UINT64_MAX ||
                space_seg(&c->sp, frag_seg(&c->map.idx, f))->seq <= c->damage_group_max)
                return false;
        }
    return !mask_empty(valid);
}

/* One pass over ids (NULL: every eligible entry), waited for. */
static void sample_pass(struct sample_run *r, const uint32_t *ids, uint32_t nids)
{
    r->ids = ids;
    r->nids = nids;
    r->cursor = 0;
    sample_start(r);
    while (r->inflight)
        reactor_poll(r->origin->reactor, 100000000ull);
}

int cache_origin_sample(struct cache *c, struct tc_dev *origin, unsigned n, bool adopt,
                        enum origin_sample_use use, char *err, size_t errlen)
{
    bool salvage = use == SAMPLE_AT_SALVAGE;
    if (salvage)
        adopt = false;
    /* --adopt-origin of an origin known written behind the cache: no
     * sample (it may miss the writes), every clean sector compared. */
    bool all = adopt && c->adopt_compare_all;
    const struct tc_superblock *sb = &c->devs[0].sb;
    bool crashed = !(sb->flags & TC_SB_CLEAN_STOP);
    if ((n == 0 && !all) || c->data_free || c->abandoned)
        return 0;
    struct index *ix = &c->map.idx;
    struct tc_mask valid;
    uint64_t eligible = 0;
    for (uint32_t id = 0; id < ix->used; id++)
        if (sample_eligible(c, id, false, &valid))
            eligible++;
    if (eligible == 0 && !all)
        return 0;
    if (n > eligible)
        n = (unsigned)eligible;
    uint64_t t0 = tc_now_ns();
    struct sample_run r = { .c = c, .origin = origin,
                            .when = salvage ? "before the salvage" : "at the start" };
    if (!all) {
        /* The k-th sample: the (k * eligible / n)-th eligible entry. */
        uint32_t *ids = tc_xcalloc(n, sizeof *ids);
        uint64_t seen = 0;
        unsigned k = 0;
        for (uint32_t id = 0; id < ix->used && k < n; id++)
            if (sample_eligible(c, id, false, &valid) && seen++ == (uint64_t)k * eligible / n)
                ids[k++] = id;
        sample_pass(&r, ids, k);
        free(ids);
        sample_zero_rule(&r);
    }
    uint64_t sampled = r.compared, found = r.ndiffer;
    c->st.origin_check_blocks = r.compared;
    c->st.origin_check_differ = r.ndiffer;
    c->st.origin_check_unread = r.unread;
    if (r.ndiffer == 0 && !all) {
        char zpart[160] = "";
        if (r.zeroed)
            snprintf(zpart, sizeof zpart, " but for %llu sectors the origin reads as zeroes (a "
                     "trim's, taken as such)", (unsigned long long)r.zeroed);
        tc_info("origin %s: %llu of the cache's %llu clean blocks compared with it %s: the "
                "same%s%s (%.3f s)", origin->name, (unsigned long long)r.compared,
                (unsigned long long)eligible, r.when, zpart,
                r.unread ? " (some could not be read: see above)" : "",
                (double)(tc_now_ns() - t0) / 1e9);
        free(r.zdiffer);
        return 0;
    }
    if (adopt) {
        /* The origin is trusted, and the cache is proved (or known) to
         * hold older copies: every clean sector is compared -- those of
         * blocks with dirty sectors too --, each clean block different
         * goes. */
        if (!all)
            tc_warn("origin %s differs from the cache on %s (%llu of %llu clean blocks "
                    "sampled): --adopt-origin: comparing every clean sector the cache holds "
                    "with it, to drop each clean block found different", origin->name,
                    c->devs[0].dev->name, (unsigned long long)found,
                    (unsigned long long)sampled);
        r.compared = r.unread = r.ndiffer = r.nzdiffer = r.zeroed = 0;
        r.partial = true;
        sample_pass(&r, NULL, 0);
        sample_zero_rule(&r);
        c->st.origin_check_blocks = r.compared;
        c->st.origin_check_differ = r.ndiffer;
        c->st.origin_check_unread = r.unread;
        c->st.origin_check_partly_dirty_differ = r.npdiffer;
        if (r.npdiffer > 0) {
            /* Its clean sectors are older than the origin's and its dirty
             * ones the newest data: neither the block nor its sectors can
             * go alone, and serving it would return the older sectors. */
            qsort(r.pdiffer, r.npdiffer, sizeof *r.pdiffer, cmp_u64);
            char blocks[256] = "";
            size_t used = 0;
            uint64_t listed = 0;
            for (; listed < r.npdiffer && used + 32 < sizeof blocks; listed++)
                used += (size_t)snprintf(blocks + used, sizeof blocks - used, "%s%llu",
                                         listed ? ", " : "",
                                         (unsigned long long)r.pdiffer[listed]);
            if (listed < r.npdiffer)
                snprintf(blocks + used, sizeof blocks - used, ", ...");
            snprintf(err, errlen,
                     "origin %s: --adopt-origin: %llu blocks of the cache on %s hold dirty "
                     "sectors beside clean ones that differ from the origin (blocks %s, of %u "
                     "bytes): the clean ones are older than the origin's data and cannot be "
                     "dropped apart from the dirty ones, which are the newest.  Write the "
                     "cache's dirty data to the origin with 'tiercache check --salvage "
                     "--adopt-origin --cache ... --origin %s', then reformat the cache "
                     "('tiercache format --force --discard-dirty'); nothing was written",
                     origin->name, (unsigned long long)r.npdiffer, c->devs[0].dev->name, blocks,
                     c->block_size, origin->name);
            free(r.differ);
            free(r.pdiffer);
            free(r.zdiffer);
            return -1;
        }
        free(r.pdiffer);
        if (r.ndiffer == 0) {
            tc_info("origin %s: every clean sector of the cache's %llu blocks compared with it "
                    "%s (--adopt-origin): the same%s (%.3f s)", origin->name,
                    (unsigned long long)r.compared, r.when,
                    r.unread ? " (some could not be read: see above)" : "",
                    (double)(tc_now_ns() - t0) / 1e9);
            free(r.differ);
            free(r.zdiffer);
            return 0;
        }
    }
    /* The differing blocks in origin order; the first of them described,
     * with where the cache keeps its first different sector. */
    qsort(r.differ, r.ndiffer, sizeof *r.differ, cmp_u64);
    unsigned k0 = r.first_sector;
    char where[512] = "";
    uint32_t fid = ce_locate(ix, r.first_id, k0);
    if (fid != NIL) {
        struct cfrag f = frag_view(ix, fid);
        struct tc_mask st;
        frag_stored(ix, fid, &st);
        uint64_t cat = seg_dev_offset(c, f.seg) + (uint64_t)(f.off + mask_rank(&st, k0)) * TC_SECTOR;
        snprintf(where, sizeof where, ", cached on %s at bytes %llu..%llu",
                 seg_cdev(c, f.seg)->dev->name, (unsigned long long)cat,
                 (unsigned long long)(cat + TC_SECTOR - 1));
    }
    char blocks[256] = "";
    size_t used = 0;
    uint64_t listed = 0;
    for (; listed < r.ndiffer && used + 32 < sizeof blocks; listed++)
        used += (size_t)snprintf(blocks + used, sizeof blocks - used, "%s%llu",
                                 listed ? ", " : "", (unsigned long long)r.differ[listed]);
    if (listed < r.ndiffer)
        snprintf(blocks + used, sizeof blocks - used, ", ...");
    uint64_t oat = r.first_ob * c->block_size + (uint64_t)k0 * TC_SECTOR;
    char first[700];
    snprintf(first, sizeof first, "block %llu (of %u bytes) differs first at origin byte %llu "
             "(origin bytes %llu..%llu%s)", (unsigned long long)r.first_ob, c->block_size,
             (unsigned long long)r.first_byte, (unsigned long long)oat,
             (unsigned long long)(oat + TC_SECTOR - 1), where);
    const char *stopped = crashed ? "did not stop cleanly (its daemon was killed or crashed: "
                                    "each of its clean blocks is one the origin had written "
                                    "and flushed)"
                                  : "stopped cleanly";
    int rc = 0;
    if (adopt) {
        for (uint64_t i = 0; i < r.ndiffer; i++)
            cache_drop_at_start(c, r.differ[i]);
        tc_warn("origin %s differs from the cache on %s (%llu of %llu clean blocks compared: "
                "%s; %s): accepted as the cache's origin (--adopt-origin); the blocks found "
                "different are dropped from the cache (%.3f s)", origin->name,
                c->devs[0].dev->name, (unsigned long long)r.ndiffer,
                (unsigned long long)r.compared, blocks, first,
                (double)(tc_now_ns() - t0) / 1e9);
    } else if (salvage) {
        char dirty[32];
        snprintf(err, errlen,
                 "origin %s differs from the cache on %s, which %s: of %llu "
                 "clean cached blocks compared with the origin %s, %llu differ (blocks %s; "
                 "%s).  Something wrote the origin while no daemon served it with this cache "
                 "(written, mounted or served directly, restored from a backup), or this is "
                 "not the cache's origin (another volume, a blank disk, behind the same "
                 "name), and the cache's dirty data (%s) would be written over it.  If this "
                 "is the cache's origin and the cache's dirty data is to go over its changes, "
                 "salvage with --adopt-origin (or --origin-check-blocks 0: nothing compared)",
                 origin->name, c->devs[0].dev->name, stopped,
                 (unsigned long long)r.compared, r.when,
                 (unsigned long long)r.ndiffer, blocks, first,
                 tc_format_size(c->map.dirty_sectors * TC_SECTOR, dirty, sizeof dirty));
        rc = -1;
    } else {
        char dirty[32], dpart[128] = "";
        if (c->map.dirty_sectors)
            snprintf(dpart, sizeof dpart, ", and the cache's dirty data (%s) would be written "
                     "back over them",
                     tc_format_size(c->map.dirty_sectors * TC_SECTOR, dirty, sizeof dirty));
        snprintf(err, errlen,
                 "origin %s differs from the cache on %s, which %s: of %llu "
                 "clean cached blocks compared with the origin %s, %llu differ "
                 "(blocks %s; %s).  Something wrote the origin while no daemon served it "
                 "with this cache (written, mounted or served directly, served by another "
                 "server, restored from a backup, another disk behind the same name), and the "
                 "cache's copies of the blocks it changed would be served over the newer "
                 "data%s.  To keep the origin as it is, reformat the cache with %s; to "
                 "trust the origin's data anyway, pass --adopt-origin (every clean sector is "
                 "then compared, and each clean block found different dropped from the cache)",
                 origin->name, c->devs[0].dev->name, stopped,
                 (unsigned long long)r.compared, r.when,
                 (unsigned long long)r.ndiffer, blocks, first, dpart,
                 c->map.dirty_sectors
                     ? "'tiercache format --force --discard-dirty' (the cache's dirty data is "
                       "lost)"
                     : "'tiercache format --force' (the cache holds no dirty data: nothing is "
                       "lost)");
        rc = -1;
    }
    free(r.differ);
    free(r.zdiffer);
    return rc;
}
