/*
 * The sequence record: an older copy of a cache device is not served.
 *
 * Every start rebuilds the index from the log on the devices it is given.
 * A device put back from an older copy -- a backup image restored alone, a
 * snapshot rolled back, the wrong disk of two -- holds a log that checks
 * everywhere, only older: its clean copies are older than the origin's
 * data since then, and its dirty data would be written back over newer
 * writes.  Nothing on the device can tell; so the highest chunk sequence
 * known durable on the set's devices is recorded off them, beside the
 * state file (format in ondisk.h), and with it, for each device, the
 * newest chunk known durable on that device; at the next start:
 *
 *    newest chunk recovery found  <  record's chunk_seq       ->  refused
 *    newest chunk found on device d  <  record's entry for d   ->  refused
 *
 * unless the operator says the copy is wanted (--accept-older-cache: the
 * origin was restored to the same point with it).  The second line is
 * for a set of several devices: the set's newest chunk is on one of
 * them, and an older copy of another, put back beside current ones, does
 * not change it -- yet the blocks whose newest versions were on that
 * device would read back older.  A device's entry is the log's
 * dev_flushed (log.h): its newest chunk written, with every chunk before
 * it, before a cache flush that has ended, so a walk of its segment at
 * the next start reaches it (a device is matched to its entry by UUID).
 * A device's newest found is the scan's, or its clean-stop record's
 * newest chunk when it carries one (a start from the checkpoint scans
 * nothing; the record is on every device then).  After a scan refused
 * the start (a clean stop's record on the current devices counts chunks
 * the older copy lacks: "damage"), the older device is named instead
 * (seqrec_explain_refusal()).  A record of version 1 has no entries: it
 * is read, compared as a whole, and written anew at the start, with the
 * entries the scan found: a device's newest chunk at or below the
 * record's chunk (which vouches for every chunk up to it; the scan counts
 * it for the record read before it, seqrec_bound_read(), also on a device
 * with chunks above it), or its newest that a header's flushed mark covers
 * when that is more (none after a start from the checkpoint: those come
 * with the flushes of the run).  The record is written
 *
 *  - at start, once recovery and the checks are done: the durable mark
 *    recovery read (a header's flushed mark or the clean stop's record),
 *    never a chunk only read back, which a power loss may still take;
 *  - while serving, at most every SEQREC_PERIOD_NS: the log's flushed_upto,
 *    once a cache flush issued in this run has completed (it covers every
 *    chunk written before it, the previous run's included).  The reactor
 *    only hands the value to a writer thread (a trylock, never a wait:
 *    nothing on the request path blocks on the file's fsyncs);
 *  - at a clean stop, after the last log sync: flushed_upto;
 *  - once an abandonment is recorded in the state file: chunk 0
 *    (seqrec_abandoned(): the log from before it is untrusted anyway).
 *
 * Each periodic write that moves the chunk on is followed by the same
 * chunk in the set's stop record, kept with the origin records, away from
 * this folder (stop_mirror()), which a restore of the folder with the
 * devices does not bring back (look()).
 *
 * The log counts a chunk whose write failed as written (its data is
 * appended again elsewhere) and a flush that failed on one device as done:
 * after a cache write or flush error in this run flushed_upto no longer
 * says what the devices hold.  Such an error fails its device at once
 * (failure.c), and its chunks are untrusted from its failure mark on, so
 * the record names from then on the newest chunk a flush made durable on
 * a device still in service (durable_chunk()): every chunk up to it on
 * such a device was written before a flush that ended (a device's chunk
 * counts as written only once every chunk before it is, on every device),
 * and the failed device's entry is dropped (record_fill()).  A whole set
 * put back from a backup taken before the failure is then still refused
 * (before, the record stayed where it was from the first error on, and
 * such a backup was served).  Once the cache is abandoned (no device in
 * service), the record stays at chunk 0 (seqrec_abandoned()) until the
 * next start.
 *
 * So the record never names a chunk the devices may lose in a crash (the
 * invariant in seqrec.h), and lags them by at most SEQREC_PERIOD_NS plus
 * the commit interval that flushes unflushed writes: an older copy that
 * differs from the devices only in chunks flushed within that window
 * before a crash is not caught.  Exactly: a start refuses a copy whose
 * newest chunk is below the chunk of the last record made durable before
 * the crash; a chunk is in the record once its flush has completed, the
 * tick after it has posted it (at most SEQREC_PERIOD_NS after the last
 * post) and the writer's file write, exchange and syncs are done.  The
 * same holds for each device alone: a start refuses a device whose newest
 * chunk is below that record's entry for it, and a chunk written to the
 * device is in its entry under the same conditions, once every chunk
 * before it is written too (an earlier chunk still in flight on another
 * device holds it back until it ends).
 *
 * A device with a failure mark (it failed at run time, others went on;
 * abandon.c) has its chunks from before the failure untrusted (damaged
 * or gone, maybe), and the record's entry for it from before then with
 * them.  So each record says the failure mark every device carried when
 * it was written (format version 4), and an entry is compared only when
 * written under the mark the device carries now: not the first start
 * after the failure, but every one after a record of a run in which the
 * device was back in service.  (Skipping a marked device for good, as
 * before, served an older copy of it taken after it came back.)  A device
 * out of service gets no entry (record_fill()).
 *
 * A device's entry must stay where the walk finds it, or a start refuses
 * the current device: the segment holding the device's recorded chunk,
 * freed by the cleaner (the device having received no chunk in a newer
 * group, or none flushed yet) and opened again, is written from its
 * first sector, and a power loss that tears that first chunk, or keeps
 * a later one but not it, leaves nothing of the old chunks to walk --
 * exactly what an older copy looks like.  So (space.h, invariant 22) the
 * allocator does not open a free segment that may hold a chunk a record
 * possibly on file names for its device (the one on file and the one in
 * the writer's hands, at most one at a time: guard_apply()) while
 * another is free, and a record drops the entry of a device whose chunk
 * is no longer in a live segment (record_fill(): a chunk of a retired
 * group holds nothing the log needs, and a copy of the device holds the
 * same live groups), at the next periodic write even without a new flush
 * -- or at once, blocking, when no device has another free segment
 * (seqrec_unguard()).  Where the chunks are: the log notes each
 * segment's first and newest as it seals them, a scan finds them, and a
 * start from the checkpoint (which names none) bounds them from the
 * groups' chunk counts (space_bound_chunks()); the record's format is
 * unchanged (an entry of 0 was "not known" already).
 *
 * Why not closer: a copy taken at instant T, with no record written after
 * T, is what a crash at T would have left -- the same log, the same
 * record -- and must be served as that.  So the record must be written
 * after the flush of every write the copy could lack, and before the
 * FLUSH is acknowledged (a crash may follow the reply at once).  A record
 * naming a bound ahead of the log (chunks it must not yet pass) does not
 * help: the log stopped by the crash short of it looks just like a copy.
 * Hence a synced write of this file per FLUSH request, on the request
 * path: not done (the price of a second file-system sync per FLUSH).
 *
 * A copy taken while the daemon is stopped and put back after a later run
 * is caught, whenever that run wrote a chunk (a clean stop writes one:
 * its flushed mark).
 *
 * The offline commands look at the record the same way (seqrec_look(),
 * which writes nothing): check --salvage, which writes dirty data back
 * to the origin, refuses an older copy as serve does (its own
 * --accept-older-cache; the record is left as it is); check and dump
 * report it; format --force names it when it refuses the copy's dirty
 * data.  A damaged log (which only --salvage reads on) may have lost its
 * newest chunks, so the clean-stop record's newest chunk counts as found
 * too: an older copy carries its older stop record.
 *
 * The record is found by its place, beside the state file, and so a start
 * given another place -- another --state-file, none after one, the
 * default place after another -- found none there, "missing", and served
 * an older copy of the devices unchecked.  So the first start after a
 * format records the place in the superblocks (a state token, which every
 * record carries too, and the state file's path: place_record()), and a
 * start that finds no record with the token where it looks is refused,
 * naming both places (look(): ELSEWHERE): the record moved with its
 * state file keeps the token and is found at the new place, and
 * --adopt-state-file starts once the old place no longer holds it.  The
 * devices' copy carries the place of its time: an older copy taken before
 * a move still names the old place, where the record no longer is.
 *
 * A missing record where the superblocks name no place (the first start,
 * a set a build before the token served) is logged, not an error: there
 * is nothing to compare.  A record of another set (a
 * format since) is logged and replaced.  An unusable record (bad checksum,
 * a version this build does not read, unreadable) refuses the start: it
 * exists to catch exactly the case it can no longer rule out, and a
 * damaged record next to a restored device is what a restore of both
 * from different times looks like; --accept-older-cache starts anyway
 * and writes it anew.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/cache.h"
#include "engine/seqrec.h"
#include "io/originrec.h"
#include "util/json.h"
#include "util/log.h"
#include "util/misc.h"

#define SEQREC_PERIOD_NS (2000ull * 1000 * 1000)
#define SEQREC_STATE_DIR "/var/lib/tiercache"

struct seqrec {
    char *path;
    const char *at_start;           /* what the start found: status */
    uint64_t start_ns;              /* cache flushes ended before it do not count */
    /* The reactor's: what it handed to the writer last, and when. */
    uint64_t posted;
    uint64_t posted_ns;
    /* Shared with the writer thread, under mu (held for copies only,
     * never across the file's I/O). */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool thread_started;
    bool thread_failed;
    bool stop;
    bool pending;
    struct tc_seqrec want;
    uint64_t written;               /* chunk_seq of the last record made durable */
    uint64_t writes, errors;
    /* The set's stop record kept up by the writer (stop_mirror()): wanted
     * with the posted record (the origin records are written in this
     * run), the chunk it last wrote there, its writes and failures. */
    bool want_stop;                 /* with want: a post that moved the chunk on */
    uint64_t stop_written;
    uint64_t stop_writes, stop_errors;
    bool stop_failing;
    bool failing;                   /* the last write failed: logged once per run of them */
    bool frozen;                    /* a cache device error in this run: no more updates */
    bool abandoned;                 /* seqrec_abandoned() wrote chunk 0 */
    bool upgrade;                   /* the record read is of version 1: written anew */
    const char *test_hold;          /* TIERCACHE_TEST_SEQREC_HOLD (seqrec_tick()) */
    bool forget_stop;               /* an older copy accepted: forget_stop_record() */
    uint64_t period_ns;             /* SEQREC_PERIOD_NS, or TIERCACHE_TEST_SEQREC_PERIOD_MS */
    /* The writer's progress (under mu): writing a record now, and the
     * post of the last one it finished, and whether that write succeeded. */
    bool busy;
    uint64_t want_gen, done_gen;
    bool done_ok;
    /* The reactor's view of the file, for the allocator (space.h,
     * invariant 22): the chunk and the entries of the record on file, and
     * those of the record handed to the writer and not yet known written
     * (sent: one at a time), which may be on file too. */
    uint64_t file_chunk;
    uint64_t file_dev[TC_MAX_DEVICES];
    uint64_t sent_dev[TC_MAX_DEVICES];
    bool sent;
    uint64_t post_gen;
    uint64_t looked_freed;          /* the space's groups_freed when the tick last
                                       looked for entries to drop (a walk of the
                                       segments: not again until a group is freed) */
    /* The state place (ondisk.h): the token every record of this run
     * carries, and the state file's absolute path ("" if too long), both
     * put in the superblocks once the record is written at the start. */
    uint8_t token[16];
    char place[TC_STATE_PLACE_LEN];
};

static char *record_path(const char *state_path)
{
    size_t n = strlen(state_path);
    const char *tail = ".tcstate";
    size_t t = strlen(tail);
    char *out = tc_xmalloc(n + 8);
    if (n > t && strcmp(state_path + n - t, tail) == 0)
        snprintf(out, n + 8, "%.*s.tcseq", (int)(n - t), state_path);
    else
        snprintf(out, n + 8, "%s.tcseq", state_path);
    return out;
}

/*
 * Room for the record, kept aside.  A record written as a new file renamed
 * over the old one needs a new block, and on a full file system -- the
 * record beside a cache file whose file system another file filled, say
 * -- that write fails: the record stays behind the log while the file
 * system stays full, and a start after a crash takes an older copy of
 * the device put back for current.  So a second file, PATH.spare, of the
 * record's fixed size, is kept beside it: a write overwrites the spare in
 * place (its blocks are allocated already: nothing needed from the file
 * system), syncs it, and exchanges it with the record
 * (renameat2(RENAME_EXCHANGE): atomic, a crash leaves the old record or
 * the new one, each whole); the old record becomes the spare, blocks and
 * all.  No write after the first ever allocates.  The spare's
 * contents mean nothing (the record before, usually); nothing reads it.
 *
 * The first write (no record yet) renames the spare into place and makes
 * a new spare; so does a file system that cannot exchange (EINVAL): there,
 * as for the state file, the record freed by the rename makes room for
 * the next spare, which can be lost to another writer when the file
 * system is full (the error then names the record, and the next write
 * retries).
 */
static char *spare_path(const char *path)
{
    size_t l = strlen(path) + 8;
    char *p = tc_xmalloc(l);
    snprintf(p, l, "%s.spare", path);
    return p;
}

/* buf, the record's bytes, in place into the file at p (created if
 * missing, cut to the record's size if longer), and synced.  0 or -errno. */
static int fill_in_place(const char *p, const uint8_t *buf)
{
    int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);   /* no O_TRUNC: keep its blocks */
    if (fd < 0)
        return -errno;
    int rc = tc_pwrite_all(fd, buf, TC_SEQREC_BYTES, 0);
    struct stat st;
    if (rc == 0 && fstat(fd, &st) == 0 && st.st_size > (off_t)TC_SEQREC_BYTES &&
        ftruncate(fd, TC_SEQREC_BYTES) < 0)
        rc = -errno;
    if (rc == 0 && fdatasync(fd) < 0)
        rc = -errno;
    if (close(fd) < 0 && rc == 0)
        rc = -errno;
    return rc;
}

/* TIERCACHE_TEST_SEQREC_EXCHANGE_DELAY_MS, for tests only: the spare
 * written and synced, that long before it is exchanged with the record,
 * so that a test can kill the daemon in the middle of a write (the
 * writer thread's: a start's or a stop's own writes are not delayed). */
static void test_exchange_delay(void)
{
    const char *t = getenv("TIERCACHE_TEST_SEQREC_EXCHANGE_DELAY_MS");
    if (t && *t)
        usleep((useconds_t)(strtoul(t, NULL, 10) * 1000));
}

/* A start makes the spare when there is none (a record of an older
 * build, a spare removed), while the file system has room, so that the
 * writes while serving need none.  Quietly: a write retries. */
static void spare_keep(const char *path)
{
    char *spare = spare_path(path);
    struct stat st;
    if (stat(spare, &st) < 0 || (uint64_t)st.st_blocks * 512 < TC_SEQREC_BYTES) {
        uint8_t zero[TC_SEQREC_BYTES] = { 0 };
        if (fill_in_place(spare, zero) == 0)
            (void)tc_fsync_parent_dir(spare);
    }
    free(spare);
}

/* Replace the record at path by r, durably, through its spare (above).
 * Blocking: the writer thread's (writer), or a start's or a stop's
 * (nothing is served then).  0 or -errno. */
static int record_write_as(const char *path, const struct tc_seqrec *r, bool writer)
{
    if (strncmp(path, SEQREC_STATE_DIR "/", sizeof SEQREC_STATE_DIR) == 0 &&
        mkdir(SEQREC_STATE_DIR, 0700) == 0)
        tc_fsync_parent_dir(SEQREC_STATE_DIR);
    uint8_t buf[TC_SEQREC_BYTES];
    seqrec_encode(buf, r);
    char *spare = spare_path(path);
    int rc = fill_in_place(spare, buf);
    if (rc == 0 && writer)
        test_exchange_delay();
    bool renamed = false;
    if (rc == 0 && renameat2(AT_FDCWD, spare, AT_FDCWD, path, RENAME_EXCHANGE) < 0) {
        if (errno != ENOENT && errno != EINVAL && errno != ENOSYS)
            rc = -errno;
        else if (rename(spare, path) < 0)
            rc = -errno;
        else
            renamed = true;
    }
    if (rc == 0)
        rc = tc_fsync_parent_dir(path);
    /* Renamed: a new spare, now (quietly: the next write retries). */
    if (rc == 0 && renamed && fill_in_place(spare, buf) == 0)
        (void)tc_fsync_parent_dir(spare);
    free(spare);
    return rc;
}

static int record_write(const char *path, const struct tc_seqrec *r)
{
    return record_write_as(path, r, false);
}

/* The record of this set at chunk_seq. */
static void record_fill(const struct cache *c, uint64_t chunk_seq, struct tc_seqrec *r)
{
    memset(r, 0, sizeof *r);
    memcpy(r->set_uuid, c->set_uuid, 16);
    const struct tc_superblock *sb = &c->devs[0].sb;
    r->ndevs = c->ndevs;
    for (unsigned i = 0; i < c->ndevs && i < TC_MAX_DEVICES; i++)
        memcpy(r->dev_uuids[i], sb->dev_uuids[i], 16);
    r->chunk_seq = chunk_seq;
    /* Each device's: the newest chunk a flush made durable on it, capped
     * at the set's (the abandonment's 0 takes them all back) -- while a
     * segment of a live group holds it.  One whose segment was freed
     * names nothing the log needs: the device's chunks from then on are
     * newer than any it holds durably (groups retire oldest first), and a
     * copy of it holds the same live groups.  Kept, it would hold that
     * segment back from the allocator (space.h, invariant 22). */
    for (unsigned i = 0; i < c->ndevs && i < TC_MAX_DEVICES; i++) {
        r->dev_chunk[i] = TC_MIN(c->lg.dev_flushed[i], chunk_seq);
        if (r->dev_chunk[i] && !space_chunk_live(&c->sp, i, r->dev_chunk[i]))
            r->dev_chunk[i] = 0;
        /* The failure mark it is written under (ondisk.h, version 4): a
         * device out of service has its mark already (in memory: its
         * superblock mark may follow) and no entry -- its chunks from
         * before are untrusted from its mark on. */
        r->dev_mark[i] = c->failed_seq[i];
        if (c->devs[i].state != CDEV_OK)
            r->dev_chunk[i] = 0;
    }
    if (c->seqrec)
        memcpy(r->token, c->seqrec->token, 16);
    r->version = TC_SEQREC_VERSION;
    r->written_ns = tc_wall_ns();
    r->origin_size = sb->origin_size;
    snprintf(r->origin_id, sizeof r->origin_id, "%s", sb->origin_id);
}

/* After a write (any thread): the counters, under mu; a failure logged
 * once until a write succeeds again. */
static void record_written(struct seqrec *sr, uint64_t chunk_seq, int rc)
{
    pthread_mutex_lock(&sr->mu);
    bool was_failing = sr->failing;
    if (rc == 0) {
        sr->writes++;
        sr->written = chunk_seq;
        sr->failing = false;
    } else {
        sr->errors++;
        sr->failing = true;
    }
    pthread_mutex_unlock(&sr->mu);
    if (rc && !was_failing)
        tc_error("sequence record %s: cannot write it: %s (an older copy of the cache "
                 "device put back later is caught only up to chunk %llu)", sr->path,
                 strerror(-rc), (unsigned long long)sr->written);
    else if (rc == 0 && was_failing)
        tc_info("sequence record %s: written again (chunk %llu)", sr->path,
                (unsigned long long)chunk_seq);
}

/*
 * The set's stop record (io/originrec.c) kept up with this record, by the
 * writer, after each periodic write that moved the chunk on: a copy of
 * the set taken while it served after its last clean stop -- or after a
 * kill -- and put back with the state file's folder after later runs that
 * were all killed brings back a sequence record as old as the copy, and
 * the stop record, away from that folder, then still names a newer chunk
 * than the copy holds.  The same chunk as the record just made durable,
 * so it never names one the devices may lose in a crash either (the
 * invariant in seqrec.h): a start after a crash or a power loss is not
 * refused by it.  Not written when the record's write failed; a failure
 * of its own is logged once per run of them, and the record on file
 * stays where it was (it still catches copies older than it).
 */
static void stop_mirror(struct seqrec *sr, const struct tc_seqrec *r, bool wanted)
{
    pthread_mutex_lock(&sr->mu);
    bool want = wanted && r->chunk_seq > sr->stop_written;
    bool was_failing = sr->stop_failing;
    pthread_mutex_unlock(&sr->mu);
    if (!want)
        return;
    int rc = originrec_stop_write(r->set_uuid, r->chunk_seq, false, NULL);
    pthread_mutex_lock(&sr->mu);
    if (rc == 0) {
        sr->stop_written = r->chunk_seq;
        sr->stop_writes++;
    } else {
        sr->stop_errors++;
    }
    sr->stop_failing = rc != 0;
    pthread_mutex_unlock(&sr->mu);
    if (rc && !was_failing)
        tc_error("the set's stop record: cannot bring it up to chunk %llu: %s (it stays as it "
                 "was, at chunk %llu or at the last clean stop's: an older copy of the set "
                 "restored with the state file's folder is caught only if it is older than "
                 "that)", (unsigned long long)r->chunk_seq, strerror(-rc),
                 (unsigned long long)sr->stop_written);
    else if (rc == 0 && was_failing)
        tc_info("the set's stop record: written again (chunk %llu)",
                (unsigned long long)r->chunk_seq);
}

static void *writer_main(void *arg)
{
    struct seqrec *sr = arg;
    pthread_mutex_lock(&sr->mu);
    for (;;) {
        while (!sr->pending && !sr->stop)
            pthread_cond_wait(&sr->cv, &sr->mu);
        if (!sr->pending)
            break;
        struct tc_seqrec r = sr->want;
        bool stop_too = sr->want_stop;
        uint64_t gen = sr->want_gen;
        sr->pending = false;
        sr->busy = true;
        pthread_mutex_unlock(&sr->mu);
        int rc = record_write_as(sr->path, &r, true);
        record_written(sr, r.chunk_seq, rc);
        if (rc == 0)
            stop_mirror(sr, &r, stop_too);
        pthread_mutex_lock(&sr->mu);
        sr->busy = false;
        sr->done_gen = gen;
        sr->done_ok = rc == 0;
    }
    pthread_mutex_unlock(&sr->mu);
    return NULL;
}

static void writer_stop(struct seqrec *sr)
{
    if (!sr->thread_started)
        return;
    pthread_mutex_lock(&sr->mu);
    sr->stop = true;
    pthread_cond_signal(&sr->cv);
    pthread_mutex_unlock(&sr->mu);
    pthread_join(sr->thread, NULL);     /* at most one write in flight */
    sr->thread_started = false;
}

/* Invariant 22 (space.h): each device's entries in the records that may
 * be on file, to the allocator.  A single device's entry is never
 * compared (seqrec_look()): nothing to keep. */
static void guard_apply(struct cache *c)
{
    struct seqrec *sr = c->seqrec;
    for (unsigned d = 0; d < c->ndevs; d++) {
        c->sp.guard[d][0] = c->ndevs > 1 ? sr->file_dev[d] : 0;
        c->sp.guard[d][1] = c->ndevs > 1 && sr->sent ? sr->sent_dev[d] : 0;
    }
}

/* A record r is on file now (written by this thread: a start, a stop, an
 * abandonment, seqrec_unguard()). */
static void file_is(struct cache *c, const struct tc_seqrec *r)
{
    struct seqrec *sr = c->seqrec;
    sr->file_chunk = r->chunk_seq;
    for (unsigned d = 0; d < TC_MAX_DEVICES; d++)
        sr->file_dev[d] = r->dev_chunk[d];
    guard_apply(c);
}

/* The reactor learns whether the writer wrote what it was sent (never
 * waits: a trylock, else the next tick). */
static void sent_settle(struct cache *c, bool locked)
{
    struct seqrec *sr = c->seqrec;
    if (!sr->sent || (!locked && pthread_mutex_trylock(&sr->mu) != 0))
        return;
    if (!sr->pending && !sr->busy && sr->done_gen == sr->post_gen) {
        sr->sent = false;
        if (sr->done_ok) {
            sr->file_chunk = sr->want.chunk_seq;
            for (unsigned d = 0; d < TC_MAX_DEVICES; d++)
                sr->file_dev[d] = sr->sent_dev[d];
        }
        guard_apply(c);
    }
    if (!locked)
        pthread_mutex_unlock(&sr->mu);
}

/* The record on file with the entries whose chunks are no longer in a
 * live segment dropped (record_fill()); false if it has none such. */
static bool file_lowered(const struct cache *c, struct tc_seqrec *r)
{
    const struct seqrec *sr = c->seqrec;
    if (c->ndevs == 1)
        return false;       /* its entry holds nothing back (guard_apply()) */
    record_fill(c, sr->file_chunk, r);
    bool lower = false;
    for (unsigned d = 0; d < c->ndevs; d++) {
        uint64_t x = sr->file_dev[d];
        r->dev_chunk[d] = x && space_chunk_live(&c->sp, d, x) ? x : 0;
        lower |= r->dev_chunk[d] != x;
    }
    return lower;
}

static void format_time(uint64_t ns, char *out, size_t len)
{
    time_t t = (time_t)(ns / 1000000000ull);
    struct tm tm;
    if (ns == 0 || gmtime_r(&t, &tm) == NULL || strftime(out, len, "%Y-%m-%d %H:%M:%S UTC", &tm) == 0)
        snprintf(out, len, "an unknown time");
}

static void dev_names(const struct cache *c, char *out, size_t len)
{
    size_t at = 0;
    out[0] = '\0';
    for (unsigned d = 0; d < c->ndevs && at < len; d++) {
        int n = snprintf(out + at, len - at, "%s%s", d ? "," : "", c->devs[d].dev->name);
        if (n < 0)
            break;
        at += (size_t)n;
    }
}

/* The newest chunk the devices vouch for: the newest recovery found, or
 * the clean-stop record's when it names a newer one (a damaged newest
 * chunk; only check --salvage gets so far with a damaged log).  An older
 * copy of a device carries its older stop record with it.  Not the log's
 * chunks_issued: after a crash that is past the numbers the start skipped
 * (log_recovered()), and an older copy would pass for current. */
static uint64_t newest_on_devices(const struct cache *c)
{
    uint64_t found = c->lg.recovered_newest;
    for (unsigned d = 0; d < c->ndevs; d++)
        if ((c->devs[d].sb.flags & TC_SB_CLEAN_STOP) && c->devs[d].sb.stop_chunk_seq > found)
            found = c->devs[d].sb.stop_chunk_seq;
    return found;
}

/* The same for device d alone: the newest chunk the scan found on it, or
 * its clean-stop record's.  A stop writes its record on every device
 * after its last sync, so a device that carries it holds what that stop
 * left, the chunks up to its newest (and a start from the checkpoint,
 * which scans nothing, has the record on every device, all the same:
 * recovery.c refuses them otherwise). */
static uint64_t newest_on_device(const struct cache *c, unsigned d)
{
    uint64_t found = c->devs[d].newest_chunk;
    const struct tc_superblock *sb = &c->devs[d].sb;
    if ((sb->flags & TC_SB_CLEAN_STOP) && sb->stop_chunk_seq > found)
        found = sb->stop_chunk_seq;
    return found;
}

/* The absolute path of `path` (its directory resolved) into out; "" if
 * it does not fit. */
static void absolute_place(const char *path, char *out, size_t len)
{
    char *copy = tc_xstrdup(path);
    char *dir = dirname(copy);
    char *real = realpath(dir, NULL);
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    int n;
    if (real)
        n = snprintf(out, len, "%s%s%s", real, strcmp(real, "/") == 0 ? "" : "/", base);
    else if (path[0] == '/')
        n = snprintf(out, len, "%s", path);
    else {
        char cwd[4096];
        n = getcwd(cwd, sizeof cwd) ? snprintf(out, len, "%s/%s", cwd, path) : -1;
    }
    if (n < 0 || (size_t)n >= len)
        out[0] = '\0';
    free(real);
    free(copy);
}

/* The record at path, read and decoded into *r: 0; -ENOENT when there is
 * none; otherwise -1 with the reason in why. */
static int record_read(const char *path, struct tc_seqrec *r, char *why, size_t whylen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT)
        return -ENOENT;
    if (fd < 0) {
        snprintf(why, whylen, "cannot open it: %s", strerror(errno));
        return -1;
    }
    uint8_t buf[TC_SEQREC_BYTES + 1];
    size_t done = 0;
    ssize_t n = 0;
    while (done < sizeof buf) {
        n = read(fd, buf + done, sizeof buf - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        done += (size_t)n;
    }
    close(fd);
    if (n < 0) {
        snprintf(why, whylen, "cannot read it: %s", strerror(errno));
        return -1;
    }
    return seqrec_decode(buf, done, r, why, whylen) < 0 ? -1 : 0;
}

/* Whether token t is the state token of one of the set's devices (a
 * start that died while recording a new one may leave the old one on
 * some: either is the set's). */
static bool set_token_is(const struct cache *c, const uint8_t t[16])
{
    static const uint8_t zero[16];
    if (memcmp(t, zero, 16) == 0)
        return false;
    for (unsigned d = 0; d < c->ndevs; d++)
        if (memcmp(c->devs[d].sb.state_token, t, 16) == 0)
            return true;
    return false;
}

/*
 * The state place (ondisk.h): a set whose superblocks carry a state
 * token keeps its record where the record with that token is, and only
 * there.  Without the token, a start given another --state-file (or none
 * after one, or the default place after another) found no record there,
 * "missing", and served an older copy of the devices unchecked -- and a
 * stop's lost set in the state file there was missed too.  So with a
 * token, no record here, another set's, or one without the token is
 * ELSEWHERE, named with the place the superblocks record; the ways on
 * are that place, the files moved here (the token goes with them), or
 * --adopt-state-file when they are lost (look(): tokens not compared).
 * A set formatted since has no token: any place is its own.
 */
static void look_record(const struct cache *c, struct seqrec_look *l, bool tokens)
{
    static const uint8_t zero[16];
    memset(l, 0, sizeof *l);
    l->older_dev = -1;
    l->path = record_path(c->state_path);
    absolute_place(c->state_path, l->given, sizeof l->given);
    if (!l->given[0])
        snprintf(l->given, sizeof l->given, "%s", c->state_path);
    l->found = newest_on_devices(c);
    snprintf(l->when, sizeof l->when, "an unknown time");
    dev_names(c, l->devs, sizeof l->devs);
    for (unsigned d = 0; d < c->ndevs; d++)
        if (memcmp(c->devs[d].sb.state_token, zero, 16) != 0) {
            memcpy(l->set_token, c->devs[d].sb.state_token, 16);
            snprintf(l->place, sizeof l->place, "%s", c->devs[d].sb.state_place);
            break;
        }
    struct tc_seqrec r;
    int rc = record_read(l->path, &r, l->why, sizeof l->why);
    bool ours = rc == 0 && memcmp(r.set_uuid, c->set_uuid, 16) == 0;
    /* A record without a token (versions 1 and 2: a build before it
     * wrote it, after this one recorded the place) is the set's at the
     * place the superblocks name. */
    if (ours) {
        memcpy(l->token, r.token, 16);
        l->token_matches = set_token_is(c, r.token) ||
                           (memcmp(r.token, zero, 16) == 0 && l->place[0] &&
                            strcmp(l->place, l->given) == 0);
    }
    if (tokens && memcmp(l->set_token, zero, 16) != 0 && rc != -1 && !l->token_matches) {
        l->verdict = SEQREC_ELSEWHERE;
        if (rc == -ENOENT) {
            snprintf(l->why, sizeof l->why, "there is none there");
        } else if (!ours) {
            char u[37];
            tc_uuid_format(r.set_uuid, u);
            snprintf(l->why, sizeof l->why, "the one there belongs to cache set %s", u);
        } else {
            snprintf(l->why, sizeof l->why, "the one there is not the one this set last used "
                     "(%s)", memcmp(r.token, zero, 16) ? "another state token"
                                                        : "an older version's, without one");
        }
        return;
    }
    /* Without every device, the newest chunk may be on the one missing:
     * nothing to compare. */
    for (unsigned d = 0; d < c->ndevs; d++)
        if (c->devs[d].state != CDEV_OK) {
            l->verdict = SEQREC_NOT_CHECKED;
            snprintf(l->why, sizeof l->why, "cache device %u (%s) is not in service", d,
                     c->devs[d].dev->name);
            return;
        }
    if (rc == -ENOENT) {
        l->verdict = SEQREC_MISSING;
        return;
    }
    if (rc < 0) {
        l->verdict = SEQREC_UNUSABLE;
        return;
    }
    if (!ours) {
        char u1[37], u2[37];
        tc_uuid_format(r.set_uuid, u1);
        tc_uuid_format(c->set_uuid, u2);
        l->verdict = SEQREC_OTHER_SET;
        snprintf(l->why, sizeof l->why, "it belongs to cache set %s, not to this one (%s; "
                 "formatted since)", u1, u2);
        return;
    }
    l->recorded = r.chunk_seq;
    l->version = r.version;
    format_time(r.written_ns, l->when, sizeof l->when);
    /* The entries by device UUID: a set's devices keep their order, but
     * the record says whose entry is whose.  An entry written under
     * another failure mark than the device carries now vouches for
     * nothing: it is from before the device's (latest) failure, and names
     * chunks the mark makes untrusted -- so it is neither compared nor
     * kept (a later start can only see the same mark or a higher one). */
    for (unsigned d = 0; d < c->ndevs; d++)
        for (unsigned i = 0; i < r.ndevs; i++)
            if (memcmp(r.dev_uuids[i], c->devs[d].sb.dev_uuid, 16) == 0 &&
                r.dev_mark[i] == c->failed_seq[d])
                l->dev_recorded[d] = r.dev_chunk[i];
    /* The set's newest chunk may be on any one device: an older copy of
     * another, beside it, is seen by its own entry only.  Looked at
     * first: an older device is named, whichever device the set's newest
     * chunk was on.  (A lone device's newest chunk is the set's, and its
     * entry never above the set's: the set's comparison says it all.)
     * A device that failed at run time and was taken back has its chunks
     * from before the failure untrusted (its failure mark, abandon.c):
     * they may be damaged or gone, and its entry from before the failure
     * (the record is not updated after it) was dropped above.  It was
     * skipped for good once marked (the mark is never cleared): an older
     * copy of it taken after it came back was served, the blocks whose
     * newest versions were on it older.  Its entries written since it
     * came back, under its mark, count its trusted chunks, and are
     * compared as any other. */
    for (unsigned d = 0; d < c->ndevs && c->ndevs > 1; d++) {
        uint64_t found = newest_on_device(c, d);
        if (found >= l->dev_recorded[d])
            continue;
        l->verdict = SEQREC_OLDER;
        l->older_dev = (int)d;
        l->found = found;
        l->recorded = l->dev_recorded[d];
        snprintf(l->devs, sizeof l->devs, "%s (device %u of the set)", c->devs[d].dev->name, d);
        return;
    }
    l->verdict = l->found < r.chunk_seq ? SEQREC_OLDER : SEQREC_CURRENT;
}

/*
 * Then the set's stop record (io/originrec.c), kept with the origin
 * records: how far the log reached at the set's last clean stop, or since
 * while served (stop_mirror(): the sequence record's chunk).  A restore
 * that brings back the state file's folder with the devices brings back
 * the older sequence record beside it, which finds the copy current; the
 * stop record stays where it was, and a copy taken before the last clean
 * stop (which wrote a chunk of its own) or before the chunk the stop
 * record was last brought up to holds no chunk as new as the one it
 * names: OLDER, as the sequence record would say (by_stop).  Compared
 * where the sequence record let the start go on (current, missing,
 * another set's); not with a device out of service (the newest chunk
 * may be on it), nor after an abandonment (seqrec_abandoned() sets the
 * stop record to chunk 0 then, with the abandonment: abandon.c).  A stop
 * record that cannot be read is said and not compared: it adds to the
 * sequence record, which still stands.
 */
static void look(const struct cache *c, struct seqrec_look *l, bool tokens)
{
    look_record(c, l, tokens);
    if (l->verdict != SEQREC_CURRENT && l->verdict != SEQREC_MISSING &&
        l->verdict != SEQREC_OTHER_SET)
        return;
    struct originrec_stop *st = tc_xcalloc(1, sizeof *st);
    if (originrec_stop_read(c->set_uuid, st) < 0)
        tc_warn("the set's stop record: %s: not compared", st->why);
    if (st->found && st->chunk > l->found) {
        l->verdict = SEQREC_OLDER;
        l->by_stop = true;
        l->older_dev = -1;
        l->recorded = st->chunk;
        free(l->path);
        l->path = tc_xstrdup(st->path);
        l->stop_serving = st->serving;
        snprintf(l->when, sizeof l->when, "%s",
                 st->serving ? "while the set was served after its last start"
                             : "at the set's last clean stop");
    }
    free(st);
}

void seqrec_look(const struct cache *c, struct seqrec_look *l)
{
    look(c, l, true);
}

void seqrec_look_free(struct seqrec_look *l)
{
    free(l->path);
    l->path = NULL;
}

const char *seqrec_verdict_name(enum seqrec_verdict v)
{
    switch (v) {
    case SEQREC_CURRENT: return "checked";
    case SEQREC_MISSING: return "missing";
    case SEQREC_OTHER_SET: return "other set";
    case SEQREC_NOT_CHECKED: return "not checked";
    case SEQREC_UNUSABLE: return "unusable";
    case SEQREC_OLDER: return "older";
    case SEQREC_ELSEWHERE: return "elsewhere";
    }
    return "?";
}

int seqrec_refusal(const struct seqrec_look *l, const struct seqrec_words *w, char *err,
                   size_t errlen)
{
    if (l->verdict == SEQREC_UNUSABLE) {
        snprintf(err, errlen, "sequence record %s is unusable (%s): it records how far the "
                 "log of the cache on %s had durably reached, and without it an older copy "
                 "of the cache device (a restored backup or a rolled-back snapshot) cannot "
                 "be told from the current one.  If %s is the device %s last served, or its "
                 "origin was restored to the same point with it, %s; otherwise reformat the "
                 "cache with 'tiercache format --force --discard-dirty'", l->path, l->why,
                 l->devs, l->devs, w->who, w->way_out_unusable);
        return -1;
    }
    if (l->verdict == SEQREC_ELSEWHERE) {
        char rec[TC_STATE_PLACE_LEN + 16];
        if (l->place[0])
            snprintf(rec, sizeof rec, "%s", l->place);
        else
            snprintf(rec, sizeof rec, "a place not recorded (its path was too long)");
        char *seq = record_path(rec);
        if (strcmp(rec, l->given) == 0) {
            snprintf(err, errlen, "the cache set on %s last kept its state file and sequence "
                     "record at %s, given now, but as to its sequence record %s, %s (moved, "
                     "or lost): whether the devices are an older copy of the set (a restored "
                     "backup or a rolled-back snapshot) cannot be checked, and the sectors a "
                     "stop recorded as lost in the state file would be missed.  Give "
                     "--state-file where both files are now, or put them back; if they are "
                     "lost, %s", l->devs, rec, l->path, l->why, w->way_out_elsewhere);
            free(seq);
            return -1;
        }
        snprintf(err, errlen, "the cache set on %s last kept its state file and sequence record "
                 "at %s (and %s), but %s is given now, and as its sequence record (%s) %s: there, "
                 "whether the devices are an older copy of the set (a restored backup or a "
                 "rolled-back snapshot) cannot be checked, and the sectors a stop recorded "
                 "as lost in the state file would be missed.  Give --state-file %s, or move "
                 "both files (and %s.spare) to %s and %s; if they are lost, %s", l->devs, rec,
                 seq, l->given, l->path, l->why, rec, seq, l->given, l->path,
                 w->way_out_elsewhere);
        free(seq);
        return -1;
    }
    if (l->verdict == SEQREC_OLDER && l->older_dev >= 0) {
        snprintf(err, errlen, "%s holds an older copy of its log than %s last saw: its newest "
                 "chunk is %llu, but chunk %llu was durable on it (sequence record %s, "
                 "written %s, which keeps each device's newest durable chunk): a restored "
                 "backup or a rolled-back snapshot of that device; %s.  Put back the current "
                 "device; or, if the origin was restored to the same point with it, %s; "
                 "otherwise reformat the cache with 'tiercache format --force --discard-dirty' "
                 "(its contents, dirty data included, are discarded)", l->devs, w->who,
                 (unsigned long long)l->found, (unsigned long long)l->recorded, l->path, l->when,
                 w->harm, w->way_out);
        return -1;
    }
    if (l->verdict == SEQREC_OLDER && l->by_stop) {
        snprintf(err, errlen, "%s: the cache devices hold an older copy of the set's log than "
                 "%s: their newest chunk is %llu, but the log had reached chunk %llu "
                 "(the set's stop record %s, kept with the origin records, away "
                 "from the state file and its sequence record, which were put back with the "
                 "devices or agree with them): a restored backup or a rolled-back snapshot "
                 "of the set; %s.  Put back the current devices; or, if the origin was "
                 "restored to the same point with them, %s; otherwise reformat the cache "
                 "with 'tiercache format --force --discard-dirty' (its contents, dirty data "
                 "included, are discarded)",
                 l->devs,
                 l->stop_serving ? "it had reached while last served" : "its last clean stop left",
                 (unsigned long long)l->found, (unsigned long long)l->recorded,
                 l->path, w->harm, w->way_out_stop ? w->way_out_stop : w->way_out);
        return -1;
    }
    if (l->verdict == SEQREC_OLDER) {
        snprintf(err, errlen, "%s: the cache device holds an older copy of its log than "
                 "%s last saw: its newest chunk is %llu, but chunk %llu was durable on it "
                 "(sequence record %s, written %s): a restored backup or a rolled-back "
                 "snapshot; %s.  Put back the current device; or, if the origin was restored "
                 "to the same point with it, %s; otherwise reformat the cache with 'tiercache "
                 "format --force --discard-dirty' (its contents, dirty data included, are "
                 "discarded)", l->devs, w->who, (unsigned long long)l->found,
                 (unsigned long long)l->recorded, l->path, l->when, w->harm, w->way_out);
        return -1;
    }
    return 0;
}

/* serve's words (seqrec_refusal()). */
static const struct seqrec_words serve_words = {
    .who = "this daemon",
    .harm = "serving it could return older data and write older dirty data over the origin",
    .way_out = "start with --accept-older-cache",
    .way_out_unusable = "start with --accept-older-cache (the record is then written anew)",
    .way_out_stop = "start with --accept-older-cache (the stop record is then removed)",
    .way_out_elsewhere = "start with --adopt-state-file (whether the devices are an older copy "
                         "is then checked only against a record of this set found at the "
                         "place given, and the set keeps its record there from then on)",
};

/* --adopt-state-file: refused while the place the superblocks record
 * still holds the set's record (then moving the files is the way, and
 * adopting another place would drop what it vouches for). */
static int adopt_refusal(const struct cache *c, const struct seqrec_look *l, char *err,
                         size_t errlen)
{
    if (!l->place[0] || strcmp(l->place, l->given) == 0)
        return 0;
    char *old = record_path(l->place);
    struct tc_seqrec r;
    char why[192];
    int rc = 0;
    if (record_read(old, &r, why, sizeof why) == 0 && memcmp(r.set_uuid, c->set_uuid, 16) == 0 &&
        set_token_is(c, r.token)) {
        snprintf(err, errlen, "--adopt-state-file: %s still holds the set's sequence record "
                 "(the place its superblocks name): give --state-file %s, or move it and its "
                 "state file (%s) to %s and %s; a place is adopted only once its record is lost",
                 old, l->place, l->place, l->given, l->path);
        rc = -1;
    }
    free(old);
    return rc;
}

int seqrec_check(struct cache *c, bool accept_older, bool adopt_place, char *err, size_t errlen)
{
    struct seqrec *sr = tc_xcalloc(1, sizeof *sr);
    pthread_mutex_init(&sr->mu, NULL);
    pthread_cond_init(&sr->cv, NULL);
    sr->path = record_path(c->state_path);
    sr->test_hold = getenv("TIERCACHE_TEST_SEQREC_HOLD");
    /* For tests only: a shorter period, so that runs between kills of a
     * few seconds (the random model test's) write records while serving. */
    const char *period = getenv("TIERCACHE_TEST_SEQREC_PERIOD_MS");
    sr->period_ns = period && *period ? strtoull(period, NULL, 10) * 1000000ull
                                      : SEQREC_PERIOD_NS;
    c->seqrec = sr;
    struct seqrec_look l;
    seqrec_look(c, &l);
    bool adopting = false;
    if (l.verdict == SEQREC_ELSEWHERE && adopt_place) {
        if (adopt_refusal(c, &l, err, errlen) < 0) {
            seqrec_look_free(&l);
            return -1;
        }
        tc_warn("state file %s and sequence record %s: %s, and the set last kept them at %s: "
                "adopted (--adopt-state-file); the record here, if any, is compared as usual",
                c->state_path, sr->path, l.why, l.place[0] ? l.place : "a place not recorded");
        seqrec_look_free(&l);
        look(c, &l, false);
        adopting = true;
    }
    /* The token of this run's records: the one the record here carries
     * when it is the set's (or the set has none recorded: a start of a
     * set that a build before the token served), else a new one. */
    static const uint8_t zero[16];
    bool keep = !adopting && memcmp(l.token, zero, 16) != 0 &&
                (l.token_matches || memcmp(l.set_token, zero, 16) == 0) &&
                (l.verdict == SEQREC_CURRENT || l.verdict == SEQREC_OLDER ||
                 l.verdict == SEQREC_NOT_CHECKED);
    if (keep)
        memcpy(sr->token, l.token, 16);
    else
        tc_uuid_generate(sr->token);
    absolute_place(c->state_path, sr->place, sizeof sr->place);
    int rc = 0;
    switch (l.verdict) {
    case SEQREC_ELSEWHERE:
        rc = seqrec_refusal(&l, &serve_words, err, errlen);
        break;
    case SEQREC_NOT_CHECKED:
        /* ... and the record is left as it is. */
        sr->at_start = "not checked";
        sr->frozen = true;
        tc_warn("sequence record %s: not checked, and not updated in this run: %s", sr->path,
                l.why);
        break;
    case SEQREC_MISSING:
        sr->at_start = "missing";
        tc_info("sequence record %s: none (the first start of this set here, or the record "
                "was removed): whether %s holds an older copy of its log is not checked at "
                "this start", sr->path, l.devs);
        break;
    case SEQREC_UNUSABLE:
        if (!accept_older) {
            rc = seqrec_refusal(&l, &serve_words, err, errlen);
            break;
        }
        sr->at_start = "unusable, accepted";
        sr->forget_stop = true;
        tc_warn("sequence record %s is unusable (%s): not checked (--accept-older-cache); "
                "written anew", sr->path, l.why);
        break;
    case SEQREC_OTHER_SET:
        sr->at_start = "other set";
        tc_info("sequence record %s: %s: ignored, and replaced", sr->path, l.why);
        break;
    case SEQREC_OLDER:
        if (!accept_older) {
            rc = seqrec_refusal(&l, &serve_words, err, errlen);
            break;
        }
        sr->at_start = "older, accepted";
        sr->forget_stop = true;
        sr->file_chunk = l.found;
        memcpy(sr->file_dev, l.dev_recorded, sizeof sr->file_dev);
        guard_apply(c);
        tc_warn("%s: %s holds an older copy of its log (newest chunk %llu, "
                "chunk %llu recorded in %s, written %s): served anyway "
                "(--accept-older-cache); the record is replaced", l.devs,
                l.older_dev >= 0 ? "the device" : "the cache device",
                (unsigned long long)l.found, (unsigned long long)l.recorded, sr->path, l.when);
        break;
    case SEQREC_CURRENT:
        sr->at_start = "checked";
        sr->written = l.recorded;
        sr->file_chunk = l.recorded;
        memcpy(sr->file_dev, l.dev_recorded, sizeof sr->file_dev);
        guard_apply(c);
        /* What the record vouched for on each device is still there (it
         * was checked): the log counts from it, so that a start from a
         * checkpoint (which scans nothing) keeps each device's entry.
         * And the record's chunk vouches for every chunk up to it, on
         * every device: a device whose newest chunk found is at or below
         * it holds that chunk durably, though no header's flushed mark
         * may say so (the scan counts a device's chunks only up to the
         * marks: one written after a FLUSH's chunks, within the second
         * after it, or none if a kill came first) -- and a record
         * without entries (version 1, or a device's entry dropped) would
         * otherwise get an entry below the chunks the device received
         * since an older copy of it was taken, and that copy put back
         * was taken for current, or refused as an older copy of the
         * whole set, not of that device.  A device with chunks above the
         * record's gets its newest at or below it, which the scan counted
         * for the record read before it (seqrec_bound_read(): the same
         * chunk, else not known here, and then what the marks say: less,
         * never more); so does a start that scanned nothing
         * (newest_chunks_known) keep what the marks say.  Not for a
         * device with a failure mark: its chunks from before the failure
         * are untrusted, whatever the record says of them. */
        for (unsigned d = 0; d < c->ndevs; d++) {
            uint64_t v = TC_MIN(l.dev_recorded[d], c->lg.chunks_written_upto);
            uint64_t found = c->devs[d].newest_chunk;     /* not a stop record's: the set's */
            if (found > l.recorded)
                found = c->seqrec_bound == l.recorded ? c->devs[d].newest_at_bound : 0;
            if (c->newest_chunks_known && c->failed_seq[d] == 0)
                v = TC_MAX(v, TC_MIN(found, c->lg.chunks_written_upto));
            if (v > c->lg.dev_flushed[d])
                c->lg.dev_flushed[d] = c->lg.dev_written[d] = v;
        }
        sr->upgrade = l.version < TC_SEQREC_VERSION;
        tc_info("sequence record %s: the log reaches chunk %llu, at least the %llu recorded %s%s",
                sr->path, (unsigned long long)l.found, (unsigned long long)l.recorded, l.when,
                sr->upgrade ? " (a version 1 record, without each device's chunk: written "
                              "anew with them)"
                : c->ndevs > 1 ? "; each device reaches the chunk recorded for it" : "");
        break;
    }
    seqrec_look_free(&l);
    return rc;
}

void seqrec_bound_read(struct cache *c)
{
    c->seqrec_bound = 0;
    char *path = record_path(c->state_path);
    struct tc_seqrec r;
    char why[160];
    if (path && record_read(path, &r, why, sizeof why) == 0 &&
        memcmp(r.set_uuid, c->set_uuid, 16) == 0)
        c->seqrec_bound = r.chunk_seq;
    free(path);
}

void seqrec_explain_refusal(struct cache *c, char *err, size_t errlen)
{
    struct seqrec_look l;
    seqrec_look(c, &l);
    if (l.verdict == SEQREC_OLDER) {
        size_t n = strlen(err) + 1;
        char *was = tc_xmalloc(n);
        memcpy(was, err, n);
        /* --accept-older-cache does not pass the scan's refusal: what can
         * be kept is salvaged. */
        static const struct seqrec_words words = {
            .who = "this daemon",
            .harm = "serving it could return older data and write older dirty data over the "
                    "origin",
            .way_out = "salvage its dirty data with 'tiercache check --salvage --origin ORIGIN "
                       "--accept-older-cache' (the start is refused by the scan too, below)",
            .way_out_unusable = "",
        };
        seqrec_refusal(&l, &words, err, errlen);
        size_t at = strlen(err);
        if (at + 1 < errlen)
            snprintf(err + at, errlen - at, ".  The scan of the log found, as such a "
                     "copy leaves it: %s", was);
        free(was);
    }
    seqrec_look_free(&l);
}

/*
 * The state place into every superblock (ondisk.h), once the record
 * carrying its token is durable: a start with another place from now on
 * finds no record with it, and is refused.  Written only when a device
 * lacks it (the first start of a set, a place adopted or moved to).
 * Copy A of every device, flushed, then copy B, as the origin's identity
 * (cache.c): a start that dies between them leaves the old token on some
 * copies, and a record with either token is the set's.  Blocking, at
 * start only (the superblocks have no other writer before anything is
 * served).  A device that cannot be written keeps the old place: warned
 * (the record vouches for the devices all the same; a start elsewhere is
 * then caught only by the devices that took it).
 */
static void place_record(struct cache *c)
{
    struct seqrec *sr = c->seqrec;
    bool need = false;
    for (unsigned d = 0; d < c->ndevs; d++) {
        const struct tc_superblock *sb = &c->devs[d].sb;
        need |= memcmp(sb->state_token, sr->token, 16) != 0 ||
                strncmp(sb->state_place, sr->place, TC_STATE_PLACE_LEN) != 0;
    }
    if (!need)
        return;
    for (unsigned d = 0; d < c->ndevs; d++) {
        struct tc_superblock *sb = &c->devs[d].sb;
        if (c->devs[d].state != CDEV_OK)
            continue;
        memcpy(sb->state_token, sr->token, 16);
        snprintf(sb->state_place, sizeof sb->state_place, "%s", sr->place);
    }
    char what[TC_STATE_PLACE_LEN + 64];
    snprintf(what, sizeof what, "recording the state place (%s)", sr->place);
    bool ok = cache_write_superblocks(c, true, what, "");
    if (ok)
        tc_info("state place %s recorded in the superblocks: a start with another "
                "--state-file is refused", sr->place[0] ? sr->place : c->state_path);
}

/* An older copy served on the operator's word (--accept-older-cache) is
 * now the set, its chunks numbered on from its own newest: the set's stop
 * record, which may name a chunk of the later runs whether it refused the
 * copy or the sequence record did, would refuse each start after this one
 * until the log passed it again.  Removed once the start can no longer
 * fail (seqrec_started()): a start refused after the look (the origin's
 * sample, say) leaves it to refuse the copy again. */
static void forget_stop_record(struct cache *c)
{
    int e = originrec_stop_remove(c->set_uuid);
    if (e < 0)
        tc_warn("%s: cannot remove the set's stop record (%s): the next start may refuse the "
                "set again (remove it by hand)", c->seqrec->path, strerror(-e));
}

void seqrec_started(struct cache *c)
{
    struct seqrec *sr = c->seqrec;
    if (!sr)
        return;
    if (sr->forget_stop)
        forget_stop_record(c);
    sr->start_ns = tc_now_ns();
    sr->posted_ns = sr->start_ns;
    if (sr->frozen)
        return;
    /* The durable mark recovery read, or the record's own when it is
     * higher (a header's mark lags the flushes it follows); an accepted
     * older copy starts from its own. */
    uint64_t v = c->recovered_durable;
    if (strcmp(sr->at_start, "checked") == 0 && sr->written > v)
        v = sr->written;
    sr->posted = v;
    struct tc_seqrec r;
    record_fill(c, v, &r);
    if (strcmp(sr->at_start, "checked") == 0 && v == sr->written && !sr->upgrade &&
        memcmp(r.dev_chunk, sr->file_dev, sizeof r.dev_chunk) == 0) {
        spare_keep(sr->path);
        place_record(c);
        return;     /* the record says so already */
    }
    int rc = record_write(sr->path, &r);
    record_written(sr, v, rc);
    if (rc == 0) {
        file_is(c, &r);
        place_record(c);
    }
}

static bool updatable(struct cache *c);
static uint64_t durable_chunk(const struct cache *c);

/*
 * The chunk a start after a crash writes and flushes before anything else
 * (log_write_restart_mark()) is recorded at once, blocking, as the start's
 * own record is: until the first periodic write (SEQREC_PERIOD_NS later)
 * the record named only what recovery found -- all of which a copy of the
 * devices taken before this start holds too.  A run killed within that
 * period after acknowledging a FLUSH left a record such a copy passes, and
 * the copy, restored, served its older data for good (the flushed writes
 * lost).  Now such a copy lacks the chunk the record names.  The set's
 * stop record follows, as the writer's records do.
 */
void seqrec_restart_marked(struct cache *c)
{
    struct seqrec *sr = c->seqrec;
    if (!sr || sr->thread_started || !updatable(c))
        return;
    uint64_t v = durable_chunk(c);
    if (v <= sr->posted || v <= c->lg.skipped_upto || c->lg.flushed_ns <= sr->start_ns)
        return;
    struct tc_seqrec r;
    record_fill(c, v, &r);
    int rc = record_write(sr->path, &r);
    record_written(sr, v, rc);
    if (rc)
        return;
    file_is(c, &r);
    sr->posted = v;
    stop_mirror(sr, &r, c->vol->origin_recorded && !sr->forget_stop);
}

/* False once no device is left in service (see the top): logged once. */
static bool updatable(struct cache *c)
{
    struct seqrec *sr = c->seqrec;
    if (sr->frozen)
        return false;
    bool in_service = false;
    for (unsigned d = 0; d < c->ndevs; d++)
        in_service |= c->devs[d].state == CDEV_OK;
    if (in_service && !c->abandoned && !c->vol->cache_failed)
        return true;
    sr->frozen = true;
    tc_warn("sequence record %s: not updated in this run any more: no cache device is left "
            "in service (it stays at chunk %llu)", sr->path, (unsigned long long)sr->posted);
    return false;
}

/* The newest chunk the record may name now (see the top): flushed_upto
 * while this run had no cache write or flush error and every device is in
 * service; after one, the newest chunk a flush made durable on a device
 * in service. */
static uint64_t durable_chunk(const struct cache *c)
{
    bool all_ok = c->st.cache_write_errors == 0;
    for (unsigned d = 0; d < c->ndevs; d++)
        all_ok &= c->devs[d].state == CDEV_OK;
    if (all_ok)
        return c->lg.flushed_upto;
    uint64_t v = 0;
    for (unsigned d = 0; d < c->ndevs; d++)
        if (c->devs[d].state == CDEV_OK)
            v = TC_MAX(v, c->lg.dev_flushed[d]);
    return TC_MIN(v, c->lg.flushed_upto);
}

void seqrec_tick(struct cache *c, uint64_t now_ns)
{
    struct seqrec *sr = c->seqrec;
    if (!sr || sr->thread_failed)
        return;
    sent_settle(c, false);
    if (now_ns - sr->posted_ns < sr->period_ns || !updatable(c))
        return;
    /* TIERCACHE_TEST_SEQREC_HOLD=FILE, for tests only: no record posted
     * while FILE exists, so that a test can make chunks durable that the
     * record does not name yet (the lag, at a moment of its choosing). */
    if (sr->test_hold && *sr->test_hold && access(sr->test_hold, F_OK) == 0)
        return;
    /* One record in the writer's hands at a time: the allocator keeps
     * what it and the one on file name (guard_apply()). */
    if (sr->sent)
        return;
    uint64_t v = durable_chunk(c);
    struct tc_seqrec r;
    /* Only a flush of this run vouches for what it covers (a chunk read
     * back at the start may still sit in a volatile cache), and only for
     * a chunk this run wrote when the start skipped numbers: a flushed
     * mark at the skip's end names no chunk (log_recovered()).  Without one,
     * the record on file is written again only to drop an entry whose
     * segment was freed, which the allocator holds back until then. */
    bool moved_on = v > sr->posted && c->lg.flushed_ns > sr->start_ns &&
                    v > c->lg.skipped_upto;
    if (moved_on) {
        record_fill(c, v, &r);
    } else {
        if (sr->looked_freed == c->sp.groups_freed)
            return;
        sr->looked_freed = c->sp.groups_freed;
        if (!file_lowered(c, &r))
            return;
    }
    if (!sr->thread_started) {
        int rc = pthread_create(&sr->thread, NULL, writer_main, sr);
        if (rc) {
            sr->thread_failed = true;
            tc_error("sequence record %s: cannot start its writer thread: %s; it is written "
                     "at the stop only", sr->path, strerror(rc));
            return;
        }
        sr->thread_started = true;
    }
    /* Never waits: the writer holds mu only to copy (then next tick). */
    if (pthread_mutex_trylock(&sr->mu) != 0)
        return;
    sr->want = r;
    /* Only a chunk a flush of this run made durable goes to the stop
     * record, not the one on file written again without an entry. */
    sr->want_stop = moved_on && c->vol->origin_recorded;
    sr->want_gen = ++sr->post_gen;
    sr->pending = true;
    pthread_cond_signal(&sr->cv);
    pthread_mutex_unlock(&sr->mu);
    memcpy(sr->sent_dev, r.dev_chunk, sizeof sr->sent_dev);
    sr->sent = true;
    guard_apply(c);
    sr->posted = TC_MAX(sr->posted, r.chunk_seq);
    sr->posted_ns = now_ns;
}

/*
 * No device has a free segment but ones the record's entries hold back
 * (space.h, invariant 22; the space's unguard event): the record on file
 * is written again at once without the entries whose chunks are no
 * longer in a live segment, blocking (as rare as every device's newest
 * recorded chunk being in a retired group while nothing else is free;
 * nothing but the writer's own write, joined first, can be in flight).
 * It only ever drops entries, so it is written after a cache device error
 * too, when nothing else is.  If the write fails, the allocator takes a
 * held-back segment all the same and says so.
 */
void seqrec_unguard(struct cache *c)
{
    struct seqrec *sr = c->seqrec;
    if (!sr) {
        memset(c->sp.guard, 0, sizeof c->sp.guard);
        return;
    }
    writer_stop(sr);
    sr->stop = false;           /* the next post starts it again */
    sent_settle(c, true);       /* the writer is gone: nothing left unsettled */
    sr->sent = false;
    struct tc_seqrec r;
    if (!file_lowered(c, &r)) {
        guard_apply(c);
        return;
    }
    int rc = record_write(sr->path, &r);
    record_written(sr, r.chunk_seq, rc);
    if (rc == 0) {
        file_is(c, &r);
        tc_info("sequence record %s: written again at once without the entries of devices "
                "whose recorded chunk's segment was freed: no other segment is free", sr->path);
    }
}

/*
 * The abandonment is recorded in the state file (abandon.c): every log
 * entry from before it is untrusted at the next start, so the chunks the
 * record vouched for can bring nothing back, and a device that comes back
 * shorter or older than they say (a truncated file, a loop device set up
 * again) must not be refused for them.  The record goes back to chunk 0
 * (it vouches again for chunks written after the restart, from the next
 * start on).  Blocking, as the state file's write it follows; the writer
 * thread is stopped first, so that no older post lands after it.  Only
 * once: the record is frozen from the abandonment on.
 */
void seqrec_abandoned(struct cache *c)
{
    struct seqrec *sr = c->seqrec;
    if (!sr || sr->abandoned)
        return;
    sr->abandoned = sr->frozen = true;
    /* Nor does the set's stop record hold the devices to its chunk: the
     * writer, which keeps it up (stop_mirror()), stopped first.  It says
     * chunk 0 from now on, and the abandonment: a start that finds neither
     * the state file nor the superblocks recording it is refused
     * (abandon.c, abandonment_forgotten()). */
    writer_stop(sr);
    int e = c->vol->origin_recorded ? originrec_stop_write_abandoned(c->set_uuid,
                                                                     c->abandoned_seq)
                                    : originrec_stop_remove(c->set_uuid);
    if (e < 0)
        tc_warn("cannot write the set's stop record: %s; a start of these devices may be "
                "refused as an older copy (remove it by hand)", strerror(-e));
    sent_settle(c, true);
    sr->sent = false;
    struct tc_seqrec r;
    record_fill(c, 0, &r);
    int rc = record_write(sr->path, &r);
    record_written(sr, 0, rc);
    if (rc == 0)
        file_is(c, &r);
}

void seqrec_close(struct cache *c)
{
    struct seqrec *sr = c->seqrec;
    if (!sr)
        return;
    writer_stop(sr);
    sent_settle(c, true);
    if (!updatable(c))
        return;
    uint64_t v = durable_chunk(c);
    pthread_mutex_lock(&sr->mu);
    uint64_t written = sr->written;
    pthread_mutex_unlock(&sr->mu);
    if (v <= written || c->lg.flushed_ns <= sr->start_ns || v <= c->lg.skipped_upto)
        return;     /* (the skip's end names no chunk: seqrec_tick()) */
    struct tc_seqrec r;
    record_fill(c, v, &r);
    int rc = record_write(sr->path, &r);
    record_written(sr, v, rc);
    if (rc == 0)
        file_is(c, &r);
}

void seqrec_free(struct cache *c)
{
    struct seqrec *sr = c->seqrec;
    if (!sr)
        return;
    writer_stop(sr);
    pthread_mutex_destroy(&sr->mu);
    pthread_cond_destroy(&sr->cv);
    free(sr->path);
    free(sr);
    c->seqrec = NULL;
}

void seqrec_status_json(struct cache *c, struct tc_json *j)
{
    struct seqrec *sr = c->seqrec;
    uint64_t written = 0, writes = 0, errors = 0;
    uint64_t stop_written = 0, stop_writes = 0, stop_errors = 0;
    if (sr) {
        pthread_mutex_lock(&sr->mu);
        written = sr->written;
        writes = sr->writes;
        errors = sr->errors;
        stop_written = sr->stop_written;
        stop_writes = sr->stop_writes;
        stop_errors = sr->stop_errors;
        pthread_mutex_unlock(&sr->mu);
    }
    json_string(j, "sequence_record", sr ? sr->path : "");
    json_string(j, "sequence_record_at_start", sr && sr->at_start ? sr->at_start : "none");
    json_uint(j, "sequence_record_chunk", written);
    json_uint(j, "sequence_record_writes", writes);
    json_uint(j, "sequence_record_errors", errors);
    /* The set's stop record as this run kept it up (stop_mirror(); the
     * clean stop writes it once more). */
    json_uint(j, "stop_record_chunk", stop_written);
    json_uint(j, "stop_record_writes", stop_writes);
    json_uint(j, "stop_record_errors", stop_errors);
    /* Invariant 22 (space.h): a device left out of a group because its
     * free segments hold the chunk the record names for it; a segment
     * opened all the same, the record not rewritten. */
    json_uint(j, "sequence_record_held_devices", c->sp.guard_skips);
    json_uint(j, "sequence_record_held_forced", c->sp.guard_forced);
}
