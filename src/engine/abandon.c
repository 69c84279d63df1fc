/*
 * A cache abandoned at run time, and the state file that records it.
 *
 * When the last cache device fails, the volume serves the origin directly
 * (failure.c).  From that moment the cache's log stops being the truth:
 *
 *  - every later write goes to the origin only, so clean and write-through
 *    versions in the log may be older than the origin's data;
 *  - the dirty data that was only in the cache is lost; reads of those
 *    sectors must fail with EIO, never return the origin's older copy,
 *    until a client writes them again (the lost set, lost.c).
 *
 * The danger is the next start.  The device may be readable again (a
 * transient error, a file system given room again, a loop device attached
 * again), and its log replayed as usual would bring back versions older
 * than what the origin received since -- and recovery would even write a
 * write-through version it calls "maybe newer than the origin" back over
 * newer data.  So the abandonment is recorded durably, and the rule at the
 * next start is:
 *
 *    every log entry with a sequence number below abandoned_seq (the log's
 *    next sequence number at the moment of abandonment) is ignored: clean
 *    data, write-through data and dirty data alike; nothing of it is
 *    served or written back.  The lost set is taken from the state file.
 *
 * This is sound because at the moment of abandonment no dirty data is left
 * in the index: with no device left, failure.c can re-home nothing, so
 * every dirty sector became a lost sector.  The lost set, minus what was
 * written again (through the origin) since, is therefore exactly the set
 * of sectors whose newest acknowledged version the origin lacks: dropping
 * the log loses nothing that could still be served correctly.  Entries
 * from abandoned_seq on were written after a restart and are trusted.
 *
 * Where the record lives:
 *
 *  1. The state file (format in ondisk.h), on another file system when the
 *     cache is a block device, next to the cache file otherwise.  Written
 *     with blocking calls (a preallocated spare file, fdatasync, rename,
 *     fsync of the directory: see "Room kept aside" below) inside the
 *     failure handling, before any request goes on:
 *     so no write reaches the origin past the cache before the record is
 *     durable -- a crash right after such a write restarts with the record.
 *     This is the one place where the reactor blocks on purpose: it happens
 *     once per abandonment, and the ordering is worth a few milliseconds.
 *     (So does a loss after the abandonment -- a write failed in doubt,
 *     abandon_lost_grown() --, rare, and recorded before its answer.)
 *     Later clears of the lost set (writes clearing lost sectors) are
 *     written lazily, and only once they are durable (below): a state
 *     file that lags only says that more sectors are lost than are, which
 *     fails reads, never returns wrong data.  A clean stop that cannot
 *     write it fails (abandon_close()).
 *  2. A mark in the superblock of every device that can still be written
 *     (TC_SB_ABANDONED with abandoned_seq), written asynchronously.  It
 *     catches a state file that is later deleted or lost: a device marked
 *     abandoned whose state file is missing (or records an older
 *     abandonment) is refused at start, with the way out in the message --
 *     unless the mark says the state file could not record it when it was
 *     written (TC_SB_ABANDON_UNFILED, format/ondisk.h).  Every FLUSH and
 *     FUA write waits for the state file (below), so none was acknowledged
 *     since: the log as it was then holds everything durable, and the
 *     start writes its dirty data back and records the abandonment itself
 *     (abandon_unfiled()).  That write-back must not go over data a client
 *     wrote since, so until the state file records the abandonment a
 *     write, write-zeroes or trim overlapping a sector lost at the
 *     abandonment -- drained ones included, which the log also holds
 *     dirty (c->ab.unfiled_lost) -- fails with EIO before it reaches the
 *     origin (abandon_unfiled_refuses()).  Other sectors are unaffected:
 *     the log holds no dirty data for them (every dirty sector was lost
 *     or drained at the abandonment, above), only clean or write-through
 *     versions, which that start does not write back.  EIO rather than
 *     ENOSPC: the volume is not out of room, and a client taking ENOSPC
 *     for a full thin volume would not try again once the state file's
 *     file system has room.  Once the state file records it the mark is
 *     written again without the note.
 *     A device that cannot be written (gone, read-only) carries no mark;
 *     then the state file alone must survive -- the one case this design
 *     cannot detect is a state file deleted by hand while no device could
 *     be marked.
 *
 * If neither record could be made durable (the state file's file system
 * is full or read-only and no device takes its mark), the volume cannot
 * let writes reach the origin safely: they fail with EIO until a record
 * exists (the superblock write may still complete), while reads of
 * everything but the lost sectors go on.
 *
 * The state file is never removed by the daemon: after a restart it still
 * says "below abandoned_seq the log is untrusted" and holds the lost set
 * as it was; LOST records in the log (from abandoned_seq on) carry later
 * changes, and recovery applies them after the state file's set.  It goes
 * with the cache; a state file of another set (left from before a new
 * format) is ignored, and replaced when the new set is abandoned.
 *
 * Clearing lost sectors: the order.
 *
 * A client write over lost sectors makes them readable at once (reads of
 * them return the new data, which is the last acknowledged).  But a
 * record saying "no longer lost" -- the state file, or a LOST record in
 * the log -- must not become durable before the write itself is: the
 * origin may hold the write in a volatile cache, and the log may not have
 * synced the chunk that holds it.  A crash then would lose the write and
 * keep the record, and the next start would serve the origin's older
 * data for those sectors: the one thing a cache must never do.  Recording
 * the clear late is harmless: the sectors only stay lost (EIO) longer
 * than needed -- also after a crash that did keep the write.
 *
 * So a clear moves the sectors from the lost mask to `unsettled' (lost.c):
 * reads see them written, every durable record still calls them lost.
 * The state timer then settles them: it moves every unsettled sector to
 * `settling', flushes the origin, syncs the log (unless abandoned: there
 * is none), and only when both succeed -- issued after the covering
 * writes completed, so they cover them -- drops them from every record
 * (LOST records appended with the new mask, the state file rewritten).
 * A failure keeps them unsettled for the next try.  Sectors cleared while
 * a settle runs wait for the next one: the running flush may have been
 * issued before their write completed.  A clean stop settles everything
 * once its own origin flush succeeded, before its last log sync and the
 * last state file write.
 *
 * Late, but not later than a FLUSH: a FLUSH answered while the cache is
 * abandoned waits for a settle that covers every clear made before it
 * (abandon_settle_wait(); lostlog.c) -- the drain's written-back data
 * (failure.c), sectors written again --, or a crash right after its
 * answer would make the data it declared durable read EIO.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/abandon.h"
#include "engine/cache.h"
#include "engine/cacheio.h"
#include "engine/failure.h"
#include "engine/lostlog.h"
#include "engine/seqrec.h"
#include "io/claim.h"
#include "io/originrec.h"
#include "util/assert.h"
#include "util/crc32c.h"
#include "util/json.h"
#include "util/log.h"
#include "util/misc.h"
#include "util/parse.h"

#define STATE_DIR "/var/lib/tiercache"
#define STATE_LAZY_NS (500ull * 1000 * 1000)
#define STATE_RETRY_NS (5000ull * 1000 * 1000)
#define STOP_LOST_RETRY_NS (1000ull * 1000 * 1000)

static void stop_lost_try(struct cache *c);
static void sb_mark_start(struct cache *c, unsigned d, bool devfail);

/* The default place of the state file for the set whose first device is
 * `path` (a testdev: spec is its file). */
static char *default_state_path(const char *path, const uint8_t set_uuid[16])
{
    char file[4096];
    if (!claim_local_path(path, file, sizeof file))
        snprintf(file, sizeof file, "%s", path);
    struct stat st;
    char out[4200];
    if (stat(file, &st) == 0 && S_ISREG(st.st_mode)) {
        snprintf(out, sizeof out, "%s.tcstate", file);
    } else {
        char u[37];
        tc_uuid_format(set_uuid, u);
        snprintf(out, sizeof out, "%s/%s.tcstate", STATE_DIR, u);
    }
    return tc_xstrdup(out);
}

/* An entry with no sector says nothing of a loss (and with
 * TC_STATE_STOP_DROPS would say something else): not written. */
static void lost_count(void *arg, uint64_t oblock, const struct tc_mask *m)
{
    (void)oblock;
    if (!mask_empty(m))
        (*(uint64_t *)arg)++;
}

/* A proof loaded from a version 4 mark (below): the sector's version is
 * the newest one the replay of the log below abandoned_seq finds
 * (abandon_log_marks()); no device sector is that. */
#define WHERE_LOG UINT64_MAX

struct fill {
    uint8_t *buf;
    uint32_t version;
    unsigned spb;
    uint64_t i;
    const struct lost *lost;
    struct lost *proven;            /* the sectors written with a proof or a mark */
};

/* A version 4 entry's digest: the CRC-32C of the CRCs of the versions
 * marked (sectors m, in order; each a little-endian u32), from their
 * proofs. */
static uint32_t marks_digest(const struct lost *l, uint64_t oblock, unsigned spb,
                             const struct tc_mask *m)
{
    uint32_t d = 0;
    for (unsigned s = 0; s < spb; s++) {
        struct lost_proof p;
        if (!mask_test(m, s) || !lost_get_proof_persisted(l, oblock, s, &p))
            continue;
        uint8_t le[4];
        le32_put(le, p.crc);
        d = tc_crc32c(d, le, sizeof le);
    }
    return d;
}

static void lost_put(void *arg, uint64_t oblock, const struct tc_mask *m)
{
    struct fill *f = arg;
    if (mask_empty(m))
        return;     /* lost_count() */
    state_entry_put(f->buf, f->version, f->spb, f->i, oblock, m->w);
    struct tc_mask pm;
    mask_clear(&pm);
    for (unsigned s = 0; f->version >= 3 && s < f->spb; s++) {
        struct lost_proof p;
        if (!mask_test(m, s) || !lost_get_proof_persisted(f->lost, oblock, s, &p))
            continue;
        if (f->version == 3 && p.where == WHERE_LOG)
            continue;   /* a mark's, before its replay: no place to name (dropped) */
        if (f->version == 3)
            state_proof_put(f->buf, f->spb, f->i, s, p.where, p.crc);
        else if (!p.logged)
            continue;   /* a version the log does not hold: no mark */
        pm.w[s / 64] |= 1ull << (s % 64);
    }
    if (f->version == 4)        /* marks instead of proofs */
        state_marks_put(f->buf, f->spb, f->i, pm.w, marks_digest(f->lost, oblock, f->spb, &pm));
    if (!mask_empty(&pm))
        lost_set(f->proven, oblock, &pm);
    f->i++;
}

/*
 * Room kept aside for the state file.  A rewrite of the state file is a
 * new file renamed over it, and a new file needs blocks: on a full file
 * system -- the state file beside a cache file that filled it, say -- the
 * abandonment's record, and every FLUSH waiting for a rewrite after it,
 * would fail until there is room.  So STATE_SPARES files PATH.spareN are
 * kept preallocated (fallocate() with FALLOC_FL_KEEP_SIZE: blocks, no
 * size, no data), from the start on: a write fills one, and the rename
 * frees the state file it replaces, whose blocks (its own spare room)
 * preallocate the next spare.  Two, so that the first write -- with no
 * state file to free -- leaves one for the second.  Their contents mean
 * nothing: a crash leaves them, the next start uses them; a stop with no
 * state file removes them.
 *
 * Their size: the state file the lost set could need, not the one on
 * disk.  The state file has an entry per block of the lost set, and an
 * abandonment puts every dirty block into it at once: a cache with many
 * dirty blocks writes, at the moment its last device fails, a state file
 * far larger than the last one (none, usually).  So the spares are kept
 * large enough for an entry per dirty or lost block (state_room_need()),
 * at least STATE_SPARE_MIN, and grow -- to twice that, so that growing is
 * rare -- while the file system has room, as blocks turn dirty
 * (abandon_room_check(), from the map's dirty accounting): when the file
 * system has filled up by the time the cache fails, the room is there
 * already.  (The lost set grows by itself only by writes in doubt: rare,
 * counted at the next block turning dirty, and a state file written keeps
 * room for twice itself.  A block drained from a failed device is dirty
 * and lost at once until written back: counted twice, which errs on the
 * side of room.)  Growing blocks the reactor for two
 * fallocate() calls, each time the counts have doubled.  A state file
 * larger than its spare's room (the room could not be kept: the file
 * system was full already) allocates the rest -- from the other spare,
 * given up for it, when the file system has none --, and may fail: the
 * error names the state file, and a warning named it when the room could
 * not be kept.  (Then the next write has no spare: it needs new blocks
 * until the file system has room again.)
 */
#define STATE_SPARES 2
#define STATE_SPARE_MIN (64u * 1024)

static char *spare_path(const struct cache *c, unsigned i)
{
    size_t l = strlen(c->state_path) + 16;
    char *p = tc_xmalloc(l);
    snprintf(p, l, "%s.spare%u", c->state_path, i);
    return p;
}

/* The largest state file the lost set could need now: an entry for every
 * dirty block (an abandonment makes each lost) and every lost one. */
static uint64_t state_room_need(const struct cache *c)
{
    return tc_state_bytes(3, c->spb, c->map.dirty_blocks + c->map.lost.blocks);
}

/* Each spare with room for `len' bytes and what state_room_need() says,
 * STATE_SPARE_MIN at least, twice that when there is room for it (but
 * STATE_SPARE_MIN for a small state file).  Quietly: a spare that cannot be
 * made now is tried again after the next write (a full file system, the
 * spare just renamed over the state file: the one freed makes room for
 * it).  Sets c->ab.room_blocks from the largest spare's room, and returns
 * the first error of a spare left short (0: none). */
static int spares_keep(struct cache *c, size_t len)
{
    uint64_t raw = TC_MAX((uint64_t)len, state_room_need(c));
    uint64_t need = TC_MAX(raw, (uint64_t)STATE_SPARE_MIN);
    uint64_t want = TC_MAX(2 * raw, (uint64_t)STATE_SPARE_MIN), room = 0;
    int rc = 0;
    for (unsigned i = 0; i < STATE_SPARES; i++) {
        char *sp = spare_path(c, i);
        int fd = open(sp, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        struct stat st;
        uint64_t has = 0;
        if (fd >= 0 && fstat(fd, &st) == 0) {
            has = (uint64_t)st.st_blocks * 512;
            if (has < need) {
                if (fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)want) == 0)
                    has = want;
                else if (fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)need) == 0)
                    has = need;
                else if (rc == 0)
                    rc = -errno;
            }
        } else if (rc == 0) {
            rc = -errno;
        }
        if (fd >= 0)
            close(fd);
        free(sp);
        room = TC_MAX(room, has);
    }
    size_t hdr = tc_state_hdr(3);
    c->ab.room_blocks = room > hdr ? (room - hdr) / tc_state_entry_size(3, c->spb)
                                   : 0;
    return room >= need ? 0 : rc ? rc : -ENOSPC;
}

void abandon_room_grow(struct cache *c)
{
    /* Abandoned: no block turns dirty any more; each state file write
     * keeps room for twice itself. */
    uint64_t now = tc_now_ns();
    if (c->vol->read_only || c->abandoned || now < c->ab.room_retry_ns)
        return;
    int rc = spares_keep(c, 0);
    if (rc == 0) {
        if (c->ab.room_warned)
            tc_info("state file %s: room for it kept aside again (%llu blocks of lost set)",
                    c->state_path, (unsigned long long)c->ab.room_blocks);
        c->ab.room_warned = false;
        return;
    }
    /* Not again at every dirty block: a while later, or after the next
     * write of the state file (which frees blocks). */
    c->ab.room_retry_ns = now + STATE_RETRY_NS;
    if (!c->ab.room_warned) {
        char sz[32];
        tc_warn("state file %s: cannot keep %s aside for it (%s): should the cache fail now, "
                "the record of its %llu dirty and lost blocks may not be written until "
                "there is room", c->state_path,
                tc_format_size(TC_MAX(state_room_need(c), (uint64_t)STATE_SPARE_MIN), sz,
                               sizeof sz), strerror(-rc),
                (unsigned long long)(c->map.dirty_blocks + c->map.lost.blocks));
        c->ab.room_warned = true;
    }
}

void abandon_keep_room(struct cache *c)
{
    if (c->vol->read_only)
        return;
    if (strncmp(c->state_path, STATE_DIR "/", sizeof STATE_DIR) == 0 &&
        mkdir(STATE_DIR, 0700) == 0)
        tc_fsync_parent_dir(STATE_DIR);
    struct stat st;
    c->ab.room_watch = true;
    (void)spares_keep(c, stat(c->state_path, &st) == 0 ? (size_t)st.st_size : 0);
}

/* The file system has no blocks for the state file beyond the spare
 * `keep': the other spares go, their blocks for it.  True if one did. */
static bool spares_give_up(struct cache *c, const char *keep)
{
    bool freed = false;
    for (unsigned i = 0; i < STATE_SPARES; i++) {
        char *sp = spare_path(c, i);
        struct stat st;
        if (strcmp(sp, keep) != 0 && stat(sp, &st) == 0 && st.st_blocks > 0 && unlink(sp) == 0)
            freed = true;
        free(sp);
    }
    if (freed)
        tc_warn("state file %s: the file system has no room for it beyond the spare %s: the "
                "other spare's room goes to it", c->state_path, keep);
    return freed;
}

/* No state file left at a stop: nor its room. */
static void spares_drop(struct cache *c)
{
    struct stat st;
    if (c->vol->read_only || stat(c->state_path, &st) == 0 || errno != ENOENT)
        return;
    for (unsigned i = 0; i < STATE_SPARES; i++) {
        char *sp = spare_path(c, i);
        unlink(sp);
        free(sp);
    }
}

/* TIERCACHE_TEST_STATE_RENAME_DELAY_MS, for tests only: the spare written
 * and synced, that long before it is renamed over the state file (the
 * reactor blocked), so that a test can kill the daemon in the middle of
 * a rewrite, when it sees the spare with a length. */
static void test_rename_delay(void)
{
    const char *t = getenv("TIERCACHE_TEST_STATE_RENAME_DELAY_MS");
    if (t && *t)
        usleep((useconds_t)(strtoul(t, NULL, 10) * 1000));
}

static void proven_free(struct cache *c)
{
    if (c->ab.disk_proven) {
        lost_free(c->ab.disk_proven);
        free(c->ab.disk_proven);
        c->ab.disk_proven = NULL;
    }
}

static void unfiled_lost_free(struct cache *c)
{
    if (c->ab.unfiled_lost) {
        lost_free(c->ab.unfiled_lost);
        free(c->ab.unfiled_lost);
        c->ab.unfiled_lost = NULL;
    }
}

void abandon_free(struct cache *c)
{
    proven_free(c);
    unfiled_lost_free(c);
    free(c->ab.start_drop_ob);
    c->ab.start_drop_ob = NULL;
}

/* Waiting start drop i is to be named in the state file: not in the lost
 * set (whose entry covers it) nor among the stop's tombless blocks. */
static bool start_drop_named(const struct cache *c, size_t i)
{
    uint64_t ob = c->ab.start_drop_ob[i];
    return !lost_get(&c->map.lost, ob, NULL) && !cache_block_tombless(c, ob);
}

/* How a state file records the proofs of the lost sectors (abandon.c,
 * "Resuming the drain"): in full (version 3), as marks only (version 4:
 * a file system without room for the full form), or not at all. */
enum proof_form { PROOFS_FULL, PROOFS_MARKS, PROOFS_NONE };

static int state_write_no_room(struct cache *c, bool stop_lost, enum proof_form form, int rc);

/* Write the state file now (blocking; see the comment at the top): the
 * abandonment (if any) and, with stop_lost, the lost set as a stop leaves
 * it (TC_STATE_STOP_LOST: at the log's next sequence number), with the
 * lost sectors' proofs in the form asked for. */
static int state_write_form(struct cache *c, bool stop_lost, enum proof_form form)
{
    /* A new directory's own entry is made durable too (tc_fsync_parent_dir() of
     * STATE_DIR finds its parent), or the file could vanish with it. */
    if (strncmp(c->state_path, STATE_DIR "/", sizeof STATE_DIR) == 0 &&
        mkdir(STATE_DIR, 0700) == 0)
        tc_fsync_parent_dir(STATE_DIR);
    uint64_t n = 0;
    lost_foreach(&c->map.lost, lost_count, &n);
    /* A stop's blocks whose tombstone found no room while the origin held
     * their data (failure.c, tombstone_given_up()): entries with no lost
     * sector, after the lost set's (TC_STATE_STOP_DROPS). */
    uint64_t ndrops = 0;
    for (size_t i = 0; stop_lost && i < c->ntombless; i++)
        if (!lost_get(&c->map.lost, c->tombless[i], NULL))
            ndrops++;
    /* And, while serving, the blocks whose drop at this start still waits
     * for its tombstone (c->ab.start_drop_ob): the file is still their
     * only record.  No write of such a block comes between: the waiting
     * rewrite holds its lock. */
    for (size_t i = 0; stop_lost && i < c->ab.start_drops_waiting; i++)
        if (start_drop_named(c, i))
            ndrops++;
    /* Version 3 only while the lost set carries proofs (an abandonment's,
     * not resumed yet): otherwise what older builds read. */
    uint32_t version = c->map.lost.proof_blocks && form == PROOFS_FULL    ? 3
                       : c->map.lost.proof_blocks && form == PROOFS_MARKS ? 4
                       : stop_lost                                        ? 2
                                                                          : 1;
    size_t len = tc_state_bytes(version, c->spb, n + ndrops);
    uint8_t *buf = tc_xcalloc(1, len);
    struct lost *proven = tc_xcalloc(1, sizeof *proven);
    struct fill f = { buf, version, c->spb, 0, &c->map.lost, proven };
    lost_foreach(&c->map.lost, lost_put, &f);
    struct tc_mask none;
    mask_clear(&none);
    for (size_t i = 0; ndrops && i < c->ntombless; i++)
        if (!lost_get(&c->map.lost, c->tombless[i], NULL))
            state_entry_put(buf, version, c->spb, f.i++, c->tombless[i], none.w);
    for (size_t i = 0; ndrops && i < c->ab.start_drops_waiting; i++)
        if (start_drop_named(c, i))
            state_entry_put(buf, version, c->spb, f.i++, c->ab.start_drop_ob[i], none.w);
    struct tc_state st = { .version = version, .spb = c->spb,
                           .abandoned_seq = c->abandoned_seq, .written_ns = tc_wall_ns(),
                           .count = n + ndrops };
    if (c->abandoned || c->abandoned_seq)
        st.flags |= TC_STATE_ABANDONED;
    if (stop_lost) {
        st.flags |= TC_STATE_STOP_LOST;
        st.stop_seq = TC_MAX(c->lg.next_seq, c->stop_lost_seq);
    }
    if (ndrops)
        st.flags |= TC_STATE_STOP_DROPS;
    memcpy(st.set_uuid, c->set_uuid, 16);
    state_encode(buf, &st);
    /* Into a spare (room kept aside, below) when one has room enough, else
     * a new one: overwriting its preallocated blocks needs none from the
     * file system, so a full one does not fail the write -- nor the FLUSH
     * waiting for it.  Only then renamed over the state file: a crash
     * before leaves the old state file whole.  None with room enough (it
     * could not be kept: the file system was full before the dirty blocks
     * came): the largest, and the blocks of the others for the rest when
     * the file system has none. */
    char *tmp = NULL;
    unsigned largest = 0;
    uint64_t largest_room = 0;
    for (unsigned i = 0; i < STATE_SPARES && !tmp; i++) {
        char *sp = spare_path(c, i);
        struct stat sst;
        uint64_t room = stat(sp, &sst) == 0 ? (uint64_t)sst.st_blocks * 512 : 0;
        if (room > largest_room) {
            largest = i;
            largest_room = room;
        }
        if (room >= len)
            tmp = sp;
        else
            free(sp);
    }
    if (!tmp)
        tmp = spare_path(c, largest);
    int rc = 0;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);   /* no O_TRUNC: keep its blocks */
    if (fd < 0) {
        rc = -errno;
    } else {
        rc = tc_pwrite_all(fd, buf, len, 0);
        if ((rc == -ENOSPC || rc == -EDQUOT) && spares_give_up(c, tmp))
            rc = tc_pwrite_all(fd, buf, len, 0);
        /* A spare a failed write left longer: cut to this content (the
         * reader wants the exact length).  Shrinking allocates nothing. */
        struct stat sst;
        if (rc == 0 && fstat(fd, &sst) == 0 && (uint64_t)sst.st_size > len &&
            ftruncate(fd, (off_t)len) < 0)
            rc = -errno;
        if (rc == 0 && fdatasync(fd) < 0)
            rc = -errno;
        if (close(fd) < 0 && rc == 0)
            rc = -errno;
        if (rc == 0)
            test_rename_delay();
        if (rc == 0 && rename(tmp, c->state_path) < 0)
            rc = -errno;
        if (rc == 0)
            rc = tc_fsync_parent_dir(c->state_path);
        /* A failed write leaves the spare, and its blocks, for the next. */
    }
    free(tmp);
    free(buf);
    if (rc == 0) {
        /* What the file on disk proves now. */
        proven_free(c);
        c->ab.disk_proven = proven;
    } else {
        lost_free(proven);
        free(proven);
    }
    if ((rc == -ENOSPC || rc == -EDQUOT) && (version == 3 || version == 4))
        return state_write_no_room(c, stop_lost, form, rc);
    if (rc) {
        c->ab.state_errors++;
        tc_error("state file %s: cannot write it: %s", c->state_path, strerror(-rc));
        return rc;
    }
    c->ab.state_writes++;
    c->ab.state_dirty = false;
    c->ab.disk_abandoned_seq = (st.flags & TC_STATE_ABANDONED) ? st.abandoned_seq : 0;
    /* The log's dirty data from before the abandonment can no longer be
     * written back over the origin by a start (abandon_unfiled()). */
    if (c->abandoned && c->ab.disk_abandoned_seq == c->abandoned_seq)
        unfiled_lost_free(c);
    /* Superblocks marked while the state file could not record the
     * abandonment: marked again, without TC_SB_ABANDON_UNFILED (a state
     * file lost from now on is refused at start, not taken for one never
     * written).  Not at a stop: the next start does it. */
    if (c->abandoned && c->ab.sb_unfiled && !c->ab.state_closed &&
        c->ab.disk_abandoned_seq == c->abandoned_seq) {
        c->ab.sb_unfiled = false;
        for (unsigned d = 0; d < c->ndevs; d++)
            if (!c->devs[d].dev->read_only)
                sb_mark_start(c, d, false);
    }
    /* The log from before the abandonment is untrusted from now on: the
     * sequence record need not vouch for it (seqrec.c). */
    if (c->abandoned)
        seqrec_abandoned(c);
    /* The state file just replaced freed its blocks: room for the next. */
    (void)spares_keep(c, len);
    c->ab.room_retry_ns = 0;
    return 0;
}

/* The state file found no room for the proofs in form (rc).  The proofs
 * are what a resumed drain needs, not what the record of the loss needs:
 * the marks then (version 4, a fraction of the size: a start proves the
 * marked sectors from the log), and without room even for them the record
 * without either (a drain cut short then leaves its sectors lost). */
static int state_write_no_room(struct cache *c, bool stop_lost, enum proof_form form, int rc)
{
    if (form == PROOFS_FULL) {
        int r = state_write_form(c, stop_lost, PROOFS_MARKS);
        if (r == 0 && !c->ab.marks_said) {
            c->ab.marks_said = true;
            tc_warn("state file %s: no room for the proofs of the lost sectors (%s): written "
                    "with marks instead (version 4); a drain cut short is resumed from the "
                    "log at the next start", c->state_path, strerror(-rc));
        }
        if (r == 0)
            c->ab.marks_writes++;
        return r;
    }
    tc_warn("state file %s: no room for the proofs of the lost sectors, nor for marks in their "
            "place (%s): written without them; a drain cut short leaves its sectors lost (EIO)",
            c->state_path, strerror(-rc));
    lost_drop_proofs(&c->map.lost);
    return state_write_form(c, stop_lost, PROOFS_NONE);
}

static int state_write_as(struct cache *c, bool stop_lost)
{
    return state_write_form(c, stop_lost, PROOFS_FULL);
}

static int state_write(struct cache *c)
{
    /* A stop's lost set not yet recorded in the log again stays. */
    return state_write_as(c, c->ab.stop_lost_pending);
}

/* The state file now, retried by the timer until it works. */
static int state_write_now(struct cache *c)
{
    int rc = state_write(c);
    if (rc < 0) {
        if (!c->state_timer.armed)
            timer_arm(c->reactor, &c->state_timer, STATE_RETRY_NS);
        return rc;
    }
    if (c->abandon_unrecorded) {
        c->abandon_unrecorded = false;
        tc_info("state file %s: the abandonment of the cache is recorded now; writes go on",
                c->state_path);
    }
    return 0;
}

/* ---- settling clears (see "Clearing lost sectors" at the top) ---- */

struct settle {
    struct cache *c;
    struct tc_dev_io dio;
    struct log_waiter lw;
};

/* A FLUSH waiting for the clears made before it to reach the state file
 * (abandon_settle_wait()): on c->ab.settle_next until a settle begins,
 * then on c->ab.settle_cur until that settle has ended. */
struct settle_waiter {
    void (*fn)(void *arg, int err);
    void *arg;
    struct settle_waiter *next;
};

static void settle_start(struct cache *c);

static void settle_waiters_run(struct settle_waiter *list, int err)
{
    while (list) {
        struct settle_waiter *w = list;
        list = w->next;
        void (*fn)(void *, int) = w->fn;
        void *arg = w->arg;
        free(w);
        fn(arg, err);
    }
}

/* The waiters of a settle whose LOST records (appended at its end, the
 * cache in service) are being synced: they are answered once the records
 * are durable, or a crash right after their answer would leave the
 * sectors recorded lost -- by an earlier LOST record, or the state file
 * of an abandonment before this start -- and their data read EIO. */
struct settle_tail {
    struct cache *c;
    struct log_waiter lw;
    struct settle_waiter *done;
    int err;
};

static void settle_next_start(struct cache *c);

static void settle_tail_synced(struct log_waiter *lw, int err)
{
    struct settle_tail *t = container_of(lw, struct settle_tail, lw);
    struct cache *c = t->c;
    if (err)
        tc_warn("cache: log sync failed (%s): the records that sectors written again after "
                "they were lost are not lost any more may not be durable; the flush waiting "
                "for them fails", strerror(-err));
    err_keep_first(&t->err, err);
    settle_waiters_run(t->done, t->err);
    free(t);
    settle_next_start(c);
}

static void settle_end(struct settle *x, int err)
{
    struct cache *c = x->c;
    free(x);
    c->ab.settle_busy = false;
    c->ab.settle_failed = err != 0;
    lost_settle_done(c, err == 0);
    struct settle_waiter *done = c->ab.settle_cur;
    c->ab.settle_cur = NULL;
    if (err) {
        /* Kept lost in the records; a later flush settles them. */
        if (!c->state_timer.armed)
            timer_arm(c->reactor, &c->state_timer, STATE_RETRY_NS);
    } else {
        if (c->abandoned || c->abandoned_seq)
            c->ab.state_dirty = true;
        if (c->ab.state_dirty)
            err = state_write_now(c);
        if (lost_unsettled(&c->map.lost) && !c->state_timer.armed)
            timer_arm(c->reactor, &c->state_timer, STATE_LAZY_NS);
    }
    if (done && err == 0 && !c->abandoned && !c->ab.state_closed) {
        /* lost_settle_done() appended the settled blocks' LOST records:
         * a waiter (a FLUSH) is answered once they are durable. */
        struct settle_tail *t = tc_xcalloc(1, sizeof *t);
        t->c = c;
        t->done = done;
        t->lw.fn = settle_tail_synced;
        log_sync(c, &t->lw);
        return;
    }
    settle_waiters_run(done, err);
    settle_next_start(c);
}

static void settle_next_start(struct cache *c)
{
    if (c->ab.settle_next && !c->ab.settle_busy) {
        if (!c->ab.state_closed) {
            settle_start(c);
        } else {
            /* Closing (no client is left to wait): not known recorded. */
            struct settle_waiter *next = c->ab.settle_next;
            c->ab.settle_next = NULL;
            settle_waiters_run(next, -EIO);
        }
    }
}

static void settle_synced(struct log_waiter *lw, int err)
{
    struct settle *x = container_of(lw, struct settle, lw);
    if (err && !x->c->ab.settle_failed)    /* once until one succeeds */
        tc_warn("cache: log sync failed (%s): sectors written again after they were lost stay "
                "recorded lost until a sync succeeds", strerror(-err));
    settle_end(x, err);
}

static void settle_origin_flushed(struct tc_dev_io *dio, int err)
{
    struct settle *x = container_of(dio, struct settle, dio);
    struct cache *c = x->c;
    if (err && !c->ab.settle_failed)       /* once until one succeeds */
        tc_warn("%s: flush failed (%s, offset 0): sectors written again after they were lost "
                "stay recorded lost until a flush succeeds", c->vol->origin->name,
                strerror(-err));
    if (err) {
        settle_end(x, err);
        return;
    }
    if (c->abandoned) {
        settle_end(x, 0);
        return;
    }
    x->lw.fn = settle_synced;
    log_sync(c, &x->lw);
}

static void settle_start(struct cache *c)
{
    struct settle *x = tc_xcalloc(1, sizeof *x);
    x->c = c;
    c->ab.settle_busy = true;
    c->ab.settle_cur = c->ab.settle_next;
    c->ab.settle_next = NULL;
    lost_settle_begin(&c->map.lost);
    cache_flush_origin(c, &x->dio, settle_origin_flushed);
}

/* For tests only: the state timer settles nothing (a FLUSH and a stop
 * still do), so that a test can act while sectors cleared by a write --
 * the drain's write-back, say -- are still recorded lost. */
static bool test_no_lazy_settle(void)
{
    const char *t = getenv("TIERCACHE_TEST_NO_LAZY_SETTLE");
    return t && *t == '1';
}

static void state_timer_fn(struct tc_timer *t)
{
    struct cache *c = container_of(t, struct cache, state_timer);
    if (c->ab.state_closed)
        return;
    stop_lost_try(c);
    if (c->ab.settle_busy)
        return;     /* its end writes the state file */
    if (lost_unsettled(&c->map.lost) && !test_no_lazy_settle()) {
        settle_start(c);
        return;
    }
    if (c->ab.state_dirty)
        state_write_now(c);
}

static void settle_wait(struct cache *c, void (*fn)(void *arg, int err), void *arg)
{
    /* The running settle's flush may have been issued before the writes
     * of some clears made since completed: the next one covers them. */
    struct settle_waiter *w = tc_xcalloc(1, sizeof *w);
    w->fn = fn;
    w->arg = arg;
    w->next = c->ab.settle_next;
    c->ab.settle_next = w;
    if (!c->ab.settle_busy)
        settle_start(c);
}

void abandon_settle_wait(struct cache *c, void (*fn)(void *arg, int err), void *arg)
{
    if (!c->abandoned || c->ab.state_closed ||
        (!c->ab.settle_busy && !lost_unsettled(&c->map.lost) && !c->ab.state_dirty)) {
        fn(arg, 0);
        return;
    }
    settle_wait(c, fn, arg);
}

void abandon_clears_wait(struct cache *c, void (*fn)(void *arg, int err), void *arg)
{
    if (c->abandoned || c->ab.state_closed ||
        (!c->ab.settle_busy && !lost_unsettled(&c->map.lost))) {
        fn(arg, 0);
        return;
    }
    settle_wait(c, fn, arg);
}

void abandon_lost_grown(struct cache *c)
{
    /* Any time will do: the file holds every sector not known written
     * durably (lost_foreach() gives the persisted masks), a settle's too. */
    c->ab.state_dirty = true;
    if (!c->ab.state_closed)
        state_write_now(c);     /* else the stop writes it */
}

void abandon_proofs_added(struct cache *c)
{
    c->ab.state_dirty = true;
    if (!c->ab.state_closed)
        state_write_now(c);     /* else the stop writes it */
}

void abandon_lost_changed(struct cache *c)
{
    if (!c->ab.state_closed && !c->state_timer.armed)
        timer_arm(c->reactor, &c->state_timer, STATE_LAZY_NS);
}

/* ---- superblock marks ---- */

/*
 * Two kinds of mark share this machinery: the abandonment (every device
 * failed; the state file is the first record, the superblocks a second)
 * and a device failure (some devices go on; the survivors' superblocks are
 * the only record, see devfail_record()).  Either write carries every mark
 * known: the superblock is the device's own, with the abandonment (if
 * any) and the failure marks of this cache.  Copy A is written and flushed
 * before copy B (ondisk.h).
 *
 * One write per device at a time: two writes of the same copy in flight
 * together may complete in either order, and an older one landing last
 * would take back a mark the newer one carried (a second device failure,
 * the abandonment after a failure).  So a write asked for while another
 * is in flight on the device waits in c->ab.sb_queue until that one has
 * ended (written, or failed), and takes its contents only when it starts:
 * the device's superblock with every mark known then -- the last write
 * to end carries the newest.
 */
struct sb_mark {
    struct cache *c;
    unsigned d;
    bool devfail;               /* a device failure mark, else the abandonment */
    void (*done)(void *arg, unsigned d, int err);   /* a rewrite (abandon_sb_rewrite()) */
    void *arg;
    bool started;               /* in flight; else waiting behind another of d */
    unsigned step;              /* 0 write A, 1 flush, 2 write B, 3 flush */
    uint8_t *buf;
    struct tc_dev_io dio;
    struct sb_mark *next;       /* c->ab.sb_queue */
};

struct held_ack {
    struct tc_request *req;
    int err;
    struct held_ack *next;
};

static void sb_mark_step(struct sb_mark *m);
static void sb_mark_next(struct sb_mark *m);

/* The failure marks are all written (or failed): the acknowledgements
 * held meanwhile go out, in the order they were held.  If the last
 * survivor failed meanwhile and the abandonment has no durable record
 * yet, writes fail as they would now (lost.c). */
static void devfail_marks_done(struct cache *c)
{
    if (--c->ab.devfail_marks_pending)
        return;
    struct held_ack *h = c->ab.held_acks, *rev = NULL;
    c->ab.held_acks = NULL;
    while (h) {
        struct held_ack *n = h->next;
        h->next = rev;
        rev = h;
        h = n;
    }
    while (rev) {
        struct held_ack *n = rev->next;
        int err = rev->err;
        if (err == 0 && c->abandon_unrecorded && rev->req->op != TC_OP_READ)
            err = -EIO;
        /* A failure's records missing, its mark not written: a restart
         * replays the failed device's log, and a write held meanwhile may
         * leave nothing in the log (written around it, say) that would
         * outweigh its entries there.  Never acknowledged, then. */
        if (err == 0 && c->ab.devfail_incomplete && !c->abandoned &&
            rev->req->op != TC_OP_READ)
            err = -EIO;
        rev->req->done(rev->req, err);
        free(rev);
        rev = n;
    }
}

static void sb_mark_done(struct tc_dev_io *dio, int err)
{
    struct sb_mark *m = container_of(dio, struct sb_mark, dio);
    struct cache *c = m->c;
    unsigned d = m->d;
    bool devfail = m->devfail;
    uint64_t off = m->step < 2 ? 0 : TC_SB_SIZE;
    if (!err && ++m->step < 4) {
        sb_mark_step(m);
        return;
    }
    c->ab.sb_marks_pending--;
    sb_mark_next(m);
    void (*done)(void *, unsigned, int) = m->done;
    void *arg = m->arg;
    free(m->buf);
    free(m);
    if (done) {
        done(arg, d, err);
        return;
    }
    if (devfail) {
        if (err) {
            /* A survivor that cannot take the mark cannot be trusted to
             * hold the log either: it fails too, and its own failure
             * marks the devices left (or abandons the cache). */
            tc_error("%s: cannot record a device failure in its superblock (%s at offset "
                     "%llu)", c->devs[d].dev->name, strerror(-err), (unsigned long long)off);
            cache_device_error(c, d, err, true);
        } else {
            c->ab.devfail_marks++;
        }
        devfail_marks_done(c);
        return;
    }
    if (err) {
        tc_warn("%s: cannot mark the superblock abandoned (%s at offset %llu): the state file "
                "%s is the only record", c->devs[d].dev->name, strerror(-err),
                (unsigned long long)off, c->state_path);
    } else {
        c->ab.sb_marks++;
        if (c->abandon_unrecorded) {
            c->abandon_unrecorded = false;
            tc_info("%s: the abandonment of the cache is recorded in its superblock; writes "
                    "go on", c->devs[d].dev->name);
        }
    }
}

static void sb_mark_step(struct sb_mark *m)
{
    memset(&m->dio, 0, sizeof m->dio);
    m->dio.cb = sb_mark_done;
    if (m->step == 1 || m->step == 3) {
        m->dio.op = TC_DEV_FLUSH;
    } else {
        m->dio.op = TC_DEV_WRITE;
        m->dio.buf = m->buf;
        m->dio.off = m->step == 0 ? 0 : TC_SB_SIZE;
        m->dio.len = TC_SB_SIZE;
    }
    dev_submit(m->c->devs[m->d].dev, &m->dio);
}

/* Write m: device d's superblock with every mark known now. */
static void sb_mark_begin(struct sb_mark *m)
{
    struct cache *c = m->c;
    struct cache_dev *cd = &c->devs[m->d];
    if (c->abandoned) {
        cd->sb.flags |= TC_SB_ABANDONED;
        cd->sb.abandoned_seq = c->abandoned_seq;
        /* Whether the state file records it yet (ondisk.h): a start that
         * finds the mark without it then knows why. */
        if (c->ab.disk_abandoned_seq == c->abandoned_seq) {
            cd->sb.flags &= ~TC_SB_ABANDON_UNFILED;
        } else {
            cd->sb.flags |= TC_SB_ABANDON_UNFILED;
            c->ab.sb_unfiled = true;
        }
    }
    bool any = false;
    for (unsigned i = 0; i < TC_MAX_DEVICES; i++) {
        cd->sb.failed_seq[i] = c->failed_seq[i];
        any |= c->failed_seq[i] != 0;
    }
    if (any)
        cd->sb.flags |= TC_SB_DEV_FAILED;
    sb_encode(&cd->sb, m->buf);
    m->started = true;
    sb_mark_step(m);
}

/* m has ended: off the queue, and the next write waiting for its device
 * starts. */
static void sb_mark_next(struct sb_mark *m)
{
    struct cache *c = m->c;
    struct sb_mark **pp = &c->ab.sb_queue;
    while (*pp != m)
        pp = &(*pp)->next;
    *pp = m->next;
    for (struct sb_mark *n = c->ab.sb_queue; n; n = n->next)
        if (n->d == m->d) {
            TC_ASSERT_ALWAYS(!n->started);
            sb_mark_begin(n);
            return;
        }
}

/* Rewrite device d's superblock with every mark known -- now, or when the
 * write in flight on it has ended. */
static void sb_mark_queue(struct cache *c, unsigned d, bool devfail,
                          void (*done)(void *arg, unsigned d, int err), void *arg)
{
    struct sb_mark *m = tc_xcalloc(1, sizeof *m);
    m->c = c;
    m->d = d;
    m->devfail = devfail;
    m->done = done;
    m->arg = arg;
    m->buf = tc_alloc_aligned(TC_SB_SIZE);
    c->ab.sb_marks_pending++;
    if (devfail)
        c->ab.devfail_marks_pending++;
    bool busy = false;
    struct sb_mark **pp = &c->ab.sb_queue;
    for (; *pp; pp = &(*pp)->next)
        busy |= (*pp)->d == d;
    *pp = m;
    if (!busy)
        sb_mark_begin(m);
}

static void sb_mark_start(struct cache *c, unsigned d, bool devfail)
{
    sb_mark_queue(c, d, devfail, NULL, NULL);
}

void abandon_sb_rewrite(struct cache *c, unsigned d, void (*done)(void *arg, unsigned d, int err),
                        void *arg)
{
    sb_mark_queue(c, d, false, done, arg);
}

static void unfiled_keep(void *arg, uint64_t oblock, const struct tc_mask *m)
{
    struct cache *c = arg;
    lost_set(c->ab.unfiled_lost, oblock, m);
}

void abandon_record(struct cache *c)
{
    if (c->abandoned || c->offline)
        return;
    c->abandoned = true;
    c->abandoned_seq = TC_MAX(c->lg.next_seq, c->abandoned_seq + 1);
    c->abandon_unrecorded = true;
    char sz[32];
    tc_error("cache abandoned: log entries below sequence %llu will never be trusted again; "
             "%llu lost sectors (%s) read as EIO until rewritten; recording this in %s",
             (unsigned long long)c->abandoned_seq, (unsigned long long)lost_sectors(&c->map.lost),
             tc_format_size(lost_sectors(&c->map.lost) * TC_SECTOR, sz, sizeof sz), c->state_path);
    if (state_write(c) == 0) {
        c->abandon_unrecorded = false;
    } else {
        c->ab.state_dirty = true;      /* retried by the timer */
        /* The log keeps the dirty data of these sectors (lost, or drained
         * from the failed device: both in the set now) until the state
         * file records the abandonment; written again before that, a
         * start would write it back over the newer data. */
        if (c->ab.unfiled_lost == NULL)
            c->ab.unfiled_lost = tc_xcalloc(1, sizeof *c->ab.unfiled_lost);
        lost_foreach(&c->map.lost, unfiled_keep, c);
    }
    for (unsigned d = 0; d < c->ndevs; d++)
        if (!c->devs[d].dev->read_only)
            sb_mark_start(c, d, false);
    if (c->abandon_unrecorded) {
        tc_error("the abandonment of the cache is not recorded yet: writes fail with EIO until "
                 "it is (state file %s or a superblock)", c->state_path);
        if (!c->state_timer.armed)
            timer_arm(c->reactor, &c->state_timer, STATE_LAZY_NS);
    }
}

/* ---- device failure marks ---- */

/*
 * Device d failed; the others go on.  Its log stays on it, and at the next
 * start -- the device readable again -- recovery would replay it: versions
 * the volume has since dropped (a block evicted from the survivors and
 * then written around the log, say) would come back over newer data, and
 * stale dirty data would be written back.  The tombstones failure.c
 * appends cover the blocks dropped at the failure; this covers the rest,
 * whatever happens to the blocks later: the survivors' superblocks say
 * "device d failed at sequence S" (S: the log's next sequence number now,
 * before anything is appended for the failure), and recovery ignores d's
 * groups below S -- the tombstones and CLEAN records among them too, which
 * is why those are mirrored (log.h, struct append's mirror: a copy on
 * every device in service, so that any one left in service holds it), and why recovery drops the clean blocks
 * holding versions below S that a log written without such copies may
 * bring back (recovery.c, untrusted_clean()).  Nothing is lost by that once every version still
 * needed that was on d is in the survivors' log: re-homed, mirrored or
 * recorded lost (LOST records, sequence >= S) by failure.c in this same
 * turn of the reactor, with the tombstones and rewritten blocks that keep
 * older versions on the survivors from coming back.
 *
 * So the mark is written only after those appends are durable: failure.c
 * holds (devfail_hold_more()) until a log sync after its appends has
 * ended, and each rewrite until its version is durable; the last hold to
 * end writes the marks (devfail_marks_write()).  Written first, a power
 * loss could keep the mark without them: d's log, still readable and
 * holding the newest data, ignored, and nothing in its place.  Appends
 * that find no room in the log (not even in the cleaner's reserve) wait
 * for it, holding (failure.c); a stop cannot wait for a cleaner: then the
 * failure is incomplete (devfail_incomplete()) and no mark is written at
 * all -- the log as it is, the failed device's included, is then the
 * truth at the next start, and the writes held for the marks fail (EIO):
 * nothing acknowledged after the failure depends on the missing records.  Until the
 * mark is written a restart replays d's log (if it is readable) with the
 * survivors': the entries appended for the failure are newer than d's and
 * say the same (a copy, a block rewritten whole) or less (a LOST record:
 * EIO, a tombstone: the origin's data, where the block had no dirty data
 * left), so any prefix of them is safe.  With several failures pending
 * (a survivor failing meanwhile), the marks wait for all of them: a
 * failure's sync that a later one interrupted (its device's syncs fail)
 * leaves the later failure's appends, and its hold, to cover what moved.
 *
 * The order for clients: a write can make d's entries stale only once it
 * is acknowledged (before that, the last acknowledged data of its sectors
 * is what d may hold).  So from the failure until every hold and every
 * survivor's mark has ended, client writes, trims, write-zeroes and
 * flushes are completed but not acknowledged: devfail_hold_ack() keeps
 * them, devfail_marks_done() releases them.  A survivor whose mark write
 * fails is failed in turn (its own marks or the abandonment follow,
 * before the release).  Reads are never held.  A clean stop waits for the
 * holds and the marks (abandon_idle()); rewrites waiting for room end at
 * a stop (failure.c), so that wait ends.  When the last device fails the
 * abandonment's mark covers every device, pending marks or not.
 */
bool devfail_record(struct cache *c, unsigned d)
{
    if (c->offline || d >= TC_MAX_DEVICES)
        return false;
    bool survivors = false;
    for (unsigned i = 0; i < c->ndevs; i++)
        survivors |= i != d && c->devs[i].state == CDEV_OK;
    if (!survivors)
        return false;   /* the abandonment follows, and its mark covers every device */
    uint64_t s = TC_MAX(c->lg.next_seq, c->failed_seq[d] + 1);
    c->failed_seq[d] = s;
    c->ab.devfail_unmarked = true;
    tc_warn("cache device %s: entries it holds below log sequence %llu will never be trusted "
            "again; recording this in the superblocks of the devices left once what moved "
            "from it is durable", c->devs[d].dev->name, (unsigned long long)s);
    return true;
}

/* Every hold ended: the marks recorded meanwhile into the superblock of
 * every device left (each write carries every mark known). */
static void devfail_marks_write(struct cache *c)
{
    if (!c->ab.devfail_unmarked)
        return;
    c->ab.devfail_unmarked = false;
    if (c->offline || c->abandoned)
        return;         /* the abandonment's mark covers every device */
    if (c->ab.devfail_incomplete) {
        tc_error("cache: the device failure is not recorded in the superblocks: what it must "
                 "append before could not all be appended; a restart replays the failed "
                 "device's log, if it is readable, with the others'");
        return;
    }
    for (unsigned i = 0; i < c->ndevs; i++)
        if (c->devs[i].state == CDEV_OK && !c->devs[i].dev->read_only)
            sb_mark_start(c, i, true);
}

void devfail_hold_more(struct cache *c)
{
    c->ab.devfail_unsynced++;
    c->ab.devfail_marks_pending++;
}

void devfail_hold_done(struct cache *c)
{
    TC_ASSERT_ALWAYS(c->ab.devfail_unsynced > 0 && c->ab.devfail_marks_pending > 0);
    /* The marks start (and hold) before this hold ends: the held
     * acknowledgements wait for them. */
    if (--c->ab.devfail_unsynced == 0)
        devfail_marks_write(c);
    devfail_marks_done(c);
}

void devfail_incomplete(struct cache *c, const char *why)
{
    if (!c->ab.devfail_incomplete)
        tc_error("cache: %s: the device failure will not be recorded in the superblocks, and "
                 "writes answered after it fail with EIO", why);
    c->ab.devfail_incomplete = true;
}

bool devfail_untrusted(const struct cache *c, unsigned dev, uint64_t group_seq)
{
    return dev < TC_MAX_DEVICES && group_seq < c->failed_seq[dev];
}

bool devfail_hold(struct abandon *ab, struct tc_request *req, int err)
{
    if (ab->devfail_marks_pending == 0 || req->op == TC_OP_READ ||
        req->op == TC_OP_BLOCK_STATUS || req->op == TC_OP_CACHE)
        return false;
    struct held_ack *h = tc_xmalloc(sizeof *h);
    h->req = req;
    h->err = err;
    h->next = ab->held_acks;
    ab->held_acks = h;
    return true;
}

/* At close, once no client write is left and the origin was flushed (ok)
 * -- before the last log sync, which then records the clears: every
 * clear so far is settled by that flush.  No settle runs now (the stop
 * waited for abandon_idle()). */
void abandon_close_flushed(struct cache *c, bool ok)
{
    c->ab.state_closed = true;
    timer_cancel(c->reactor, &c->state_timer);
    if (!ok)
        return;
    lost_settle_begin(&c->map.lost);
    lost_settle_done(c, true);
    if (c->abandoned || c->abandoned_seq)
        c->ab.state_dirty = true;
}

/* At close, after the last log sync: the lost set as it is now.  A log
 * that had no room for every LOST record or tombstone this run needed (a
 * stop with no room even in the cleaner's reserve: lostlog.c, failure.c's
 * tombstone_given_up()) does not carry the lost set: the next start would
 * serve the copies those records were to keep out, and a later eviction
 * the origin's older data.  The state file carries it then
 * (TC_STATE_STOP_LOST), and the stop fails if it cannot. */
static int close_state(struct cache *c)
{
    c->ab.state_closed = true;
    timer_cancel(c->reactor, &c->state_timer);
    bool stop_lost = !c->abandoned && !c->offline &&
                     (c->lost_unrecorded > 0 || c->ntombless > 0 || c->ab.stop_lost_pending);
    if (stop_lost) {
        /* A block whose tombstone was given up and that lost sectors too
         * (a cut's, recorded after: originwin.c) is lost whole, as the
         * tombstone's loss made it before; one with nothing lost is named
         * as a drop (state_write_as()). */
        struct tc_mask all;
        mask_range(&all, 0, c->spb);
        for (size_t i = 0; i < c->ntombless; i++)
            if (lost_get(&c->map.lost, c->tombless[i], NULL))
                lost_set(&c->map.lost, c->tombless[i], &all);
        char sz[32];
        tc_warn("cache: the log had no room for every record of lost sectors: the lost set "
                "(%llu sectors, %s) goes into the state file %s",
                (unsigned long long)lost_sectors(&c->map.lost),
                tc_format_size(lost_sectors(&c->map.lost) * TC_SECTOR, sz, sizeof sz),
                c->state_path);
        if (state_write_as(c, true) < 0) {
            tc_error("cache: no record of the lost sectors the log lacks: after a restart they "
                     "may read older data instead of failing");
            return -EIO;
        }
        return 0;
    }
    if (!(c->abandoned || c->abandoned_seq) || !c->ab.state_dirty)
        return 0;
    int rc = state_write(c);
    if (rc == 0 || !c->abandoned)
        return 0;   /* restarted after an abandonment: the log's LOST records
                       carry what the file lags behind */
    /* Abandoned in this run: the log is not trusted, and the state file is
     * the only record of the lost set.  What the next start reads is the
     * copy on disk (the write goes through a spare file renamed over it: a
     * failed one leaves it whole), or none; say which, and fail the stop. */
    if (c->ab.disk_abandoned_seq == c->abandoned_seq)
        tc_error("state file %s: cannot write it at the stop (%s): the copy on disk records "
                 "the abandonment, but not every lost sector written again since: those "
                 "read as EIO after the next start until rewritten", c->state_path,
                 strerror(-rc));
    else if (!c->abandon_unrecorded)
        tc_error("state file %s: cannot write it at the stop (%s): it does not record this "
                 "abandonment (log sequence %llu) and its %llu lost sectors; a superblock "
                 "does, saying the state file could not: no FLUSH was acknowledged since, and "
                 "writes over the sectors lost then were refused, so the next start writes "
                 "the dirty data the log held then back to the origin and records the "
                 "abandonment (it needs room for the state file)",
                 c->state_path, strerror(-rc), (unsigned long long)c->abandoned_seq,
                 (unsigned long long)lost_sectors(&c->map.lost));
    else
        tc_error("state file %s: cannot write it at the stop (%s): the abandonment is "
                 "recorded nowhere (no superblock took its mark either; every write since "
                 "failed): the next start trusts the cache's log again", c->state_path,
                 strerror(-rc));
    return -EIO;
}

int abandon_close(struct cache *c)
{
    int rc = close_state(c);
    c->ab.room_watch = false;
    spares_drop(c);
    return rc;
}

/* ---- a stop's lost set (TC_STATE_STOP_LOST) ---- */

void abandon_stop_lost_apply(struct cache *c, bool (*wt_unstable)(void *arg, uint32_t id),
                             void *arg)
{
    if (c->stop_lost_seq == 0 || c->ab.stop_lost_applied)
        return;
    c->ab.stop_lost_applied = true;
    /* The set as it was at the stop replaces what the log's older records
     * made of it. */
    lost_free(&c->map.lost);
    uint64_t drops = 0, named = 0;
    for (size_t i = 0; i < c->ab.stop_lost_n; i++) {
        uint64_t ob = c->ab.stop_lost_ob[i];
        if (c->ab.stop_lost_drops && mask_empty(&c->ab.stop_lost_mask[i]))
            named++;
        const struct tc_mask *m = &c->ab.stop_lost_mask[i];
        lost_set(&c->map.lost, ob, m);
        uint32_t id = index_lookup(&c->map.idx, ob);
        if (id == NIL)
            continue;
        if (c->ab.stop_lost_drops && mask_empty(m)) {
            /* The stop gave up its tombstone while the origin held its
             * data (TC_STATE_STOP_DROPS): whatever copy the log kept goes,
             * dirty or not -- a dirty one is older than what the origin
             * holds, and written back it would undo it. */
            cache_drop_at_start(c, ob);
            drops++;
            continue;
        }
        /* What the tombstone that found no room would have done: a copy
         * with no dirty data but the lost sectors' goes (its clean
         * sectors are on the origin).  A block with other dirty data
         * keeps it; its lost sectors read EIO.  A write-through version
         * above the stable mark is dirty data too: the origin may lack
         * it (a cut made it dirty again, originwin.c, and the stop could
         * not write it back), and recovery makes it dirty once this set
         * is applied -- dropped here, its sectors would read the origin's
         * older data.  The drop gets its tombstone once the start may
         * append (failure.c, cache_mark_tombstones()), as recovery's
         * drops in untrusted_clean() do: the log keeps the copy, and once
         * the lost set is in the log again and the state file gone, the
         * next start after a crash would serve its clean sectors over a
         * write around the cache made to them since. */
        struct tc_mask d;
        if (wt_unstable && wt_unstable(arg, id))
            ce_get_masks(&c->map.idx, id, &d, NULL);
        else
            ce_get_masks(&c->map.idx, id, NULL, &d);
        mask_andnot(&d, m);
        if (mask_empty(&d))
            cache_drop_at_start(c, ob);
    }
    if (lost_sectors(&c->map.lost) || !named)
        tc_warn("cache: the last stop recorded %llu lost sectors in the state file %s (the log "
                "had no room for them): they read as EIO until rewritten",
                (unsigned long long)lost_sectors(&c->map.lost), c->state_path);
    if (named)
        tc_info("cache: the last stop named %llu blocks in the state file whose tombstones the "
                "log had no room for, the origin holding their data: %llu cached copies of "
                "them dropped, their reads go to the origin", (unsigned long long)named,
                (unsigned long long)drops);
}

static void stop_lost_free(struct cache *c)
{
    free(c->ab.stop_lost_ob);
    free(c->ab.stop_lost_mask);
    c->ab.stop_lost_ob = NULL;
    c->ab.stop_lost_mask = NULL;
    c->ab.stop_lost_n = 0;
}

struct stop_lost_sync {
    struct cache *c;
    struct log_waiter lw;
};

static void stop_lost_retry(struct cache *c)
{
    if (!c->state_timer.armed)
        timer_arm(c->reactor, &c->state_timer, STOP_LOST_RETRY_NS);
}

static void stop_lost_synced(struct log_waiter *lw, int err)
{
    struct stop_lost_sync *x = container_of(lw, struct stop_lost_sync, lw);
    struct cache *c = x->c;
    free(x);
    c->ab.stop_lost_syncing = false;
    if (c->ab.state_closed || !c->ab.stop_lost_pending)
        return;         /* the stop writes the state file again */
    if (err) {
        stop_lost_retry(c);
        return;
    }
    if (c->ab.start_drops_waiting)
        return;         /* abandon_start_drops_durable() tries again */
    c->ab.stop_lost_pending = false;
    int rc;
    if (c->abandoned || c->abandoned_seq) {
        rc = state_write(c);
    } else {
        rc = unlink(c->state_path) < 0 && errno != ENOENT ? -errno : 0;
        if (rc == 0)
            rc = tc_fsync_parent_dir(c->state_path);
    }
    if (rc < 0) {
        /* Still there, and still true: the set at its sequence, which
         * later records override.  Written again at the stop. */
        c->ab.stop_lost_pending = true;
        tc_warn("state file %s: cannot remove the lost set the log records again (%s)",
                c->state_path, strerror(-rc));
        return;
    }
    tc_info("cache: the lost sectors the last stop recorded in the state file are in the log "
            "again");
}

/* The lost set a stop left in the state file, recorded in the log again:
 * the set is the same (nothing cleared it before these records, or the
 * clear's own record follows them), and once synced the file may go.
 * Without room now (the stop found none), after the cleaner has made
 * some: tried again every second meanwhile. */
static void stop_lost_try(struct cache *c)
{
    if (!c->ab.stop_lost_pending || c->ab.stop_lost_syncing || c->ab.state_closed ||
        c->abandoned)
        return;
    if (c->ab.start_drops_waiting) {
        /* Among the copies this start dropped are those of the blocks the
         * state file names (TC_STATE_STOP_DROPS): the file is their only
         * record until their tombstones are durable -- removed before, a
         * crash would let the log's older copies back. */
        if (!c->ab.start_drops_said)
            tc_info("cache: the state file %s stays until the tombstones of the %llu copies "
                    "dropped at the start that wait for room in the log are written",
                    c->state_path, (unsigned long long)c->ab.start_drops_waiting);
        c->ab.start_drops_said = true;
        return;
    }
    if (!lost_record_again(c)) {
        stop_lost_retry(c);
        return;
    }
    c->ab.stop_lost_syncing = true;
    struct stop_lost_sync *x = tc_xcalloc(1, sizeof *x);
    x->c = c;
    x->lw.fn = stop_lost_synced;
    log_sync(c, &x->lw);
}

void abandon_started(struct cache *c)
{
    stop_lost_free(c);
    stop_lost_try(c);
}

void abandon_start_drops_durable(struct cache *c)
{
    /* At a stop the wait ends with the tombstones given up, and the stop
     * writes the state file again, naming those blocks (close_state()). */
    if (c->stopping)
        return;
    if (c->ab.start_drops_said && c->ab.stop_lost_pending && !c->ab.state_closed)
        tc_info("cache: the tombstones of the copies dropped at the start are written");
    stop_lost_try(c);
}

bool abandon_idle(struct cache *c)
{
    return c->ab.sb_marks_pending == 0 && c->ab.devfail_marks_pending == 0 &&
           !c->ab.settle_busy && c->ab.proof_reads_pending == 0;
}

/* ---- at start ---- */

/* Entry i of a decoded state file: its block and sectors in *ob and *m;
 * false for a block past the end of the origin, which is skipped. */
static bool state_entry_in_volume(const struct cache *c, const uint8_t *buf,
                                  const struct tc_state *s, uint64_t i, uint64_t *ob,
                                  struct tc_mask *m)
{
    mask_clear(m);
    state_entry_get(buf, s->version, s->spb, i, ob, m->w);
    return *ob < c->nblocks_origin;
}

/* The state file, or its sequence record (.tcseq), is at state_path. */
static bool state_files_exist(const char *state_path)
{
    size_t n = strlen(state_path);
    char seq[4200];
    if (n > 8 && strcmp(state_path + n - 8, ".tcstate") == 0)
        snprintf(seq, sizeof seq, "%.*s.tcseq", (int)(n - 8), state_path);
    else
        snprintf(seq, sizeof seq, "%s.tcseq", state_path);
    return access(state_path, F_OK) == 0 || access(seq, F_OK) == 0;
}

/* The default state file is beside the set's device 0, whatever order
 * the devices are given in: beside the device given first, a start with
 * the devices in another order found neither the state file (a stop's
 * lost set) nor the sequence record, and served an older copy of the set
 * unchecked.  Files found only beside the device given first (kept there
 * by an older version, given in another order) are refused, named. */
static char *set_state_path(const struct cache *c, const char *first_given, char *err,
                            size_t errlen)
{
    const char *dev0 = c->devs[0].dev->name;
    char *path = default_state_path(dev0, c->set_uuid);
    if (first_given == NULL || strcmp(first_given, dev0) == 0 || state_files_exist(path))
        return path;
    char *given = default_state_path(first_given, c->set_uuid);
    if (strcmp(given, path) != 0 && state_files_exist(given)) {
        snprintf(err, errlen, "state file: the set's state file and sequence record are kept "
                 "beside its device 0 (%s: %s and .tcseq), but there are none there, and "
                 "there are beside %s, the device given first (%s): move them beside device 0, "
                 "or give --state-file %s", dev0, path, first_given, given, given);
        free(given);
        free(path);
        return NULL;
    }
    free(given);
    return path;
}

/* The superblocks record an abandonment the state file could not (ondisk.h,
 * TC_SB_ABANDON_UNFILED): recovery replays the log as it was then, and
 * abandon_unfiled() files it. */
static void unfiled_found(struct cache *c, const char *dev, uint64_t seq, const char *why)
{
    c->ab.unfiled_seq = seq;
    tc_warn("%s: the cache was abandoned at run time (log sequence %llu) while its state file "
            "%s could not record it (%s): no FLUSH was acknowledged since, so the log as it "
            "was then is replayed, its dirty data written back to the origin, and the "
            "abandonment recorded in the state file now", dev, (unsigned long long)seq,
            c->state_path, why);
}

static int load_state(struct cache *c, const char *state_file, const char *first_path,
                      char *err, size_t errlen);

/*
 * The set's stop record (io/originrec.c), kept with the origin records,
 * away from the cache's folder, says the cache was abandoned at run time
 * at log sequence N (seqrec_abandoned()), but neither the state file nor
 * any superblock records an abandonment that recent: the state file was
 * lost or replaced by an older copy, and the devices are maybe an older
 * copy too (a backup put back), from before the abandonment -- whose log
 * the start would trust, serving data the origin has overwritten since
 * and writing its older dirty data over it.  Refused, naming the record;
 * --accept-older-cache serves them anyway (the origin restored to the
 * same point, the operator says), as for the other records of the set's
 * progress.  Not for sets on memory devices (replay's), which keep no
 * records.
 */
static int abandonment_forgotten(struct cache *c, const char *first_path, char *err,
                                 size_t errlen)
{
    if (dev_is_mem(first_path) || c->vol->cfg.accept_older_cache)
        return 0;
    struct originrec_stop *st = tc_xcalloc(1, sizeof *st);
    int rc = 0;
    uint64_t known = c->abandoned_seq;
    for (unsigned d = 0; d < c->ndevs; d++)
        if (c->devs[d].sb.flags & TC_SB_ABANDONED)
            known = TC_MAX(known, c->devs[d].sb.abandoned_seq);
    if (originrec_stop_read(c->set_uuid, st) == 0 && st->found && st->abandoned_seq > known) {
        snprintf(err, errlen, "the set's stop record %s says that the cache was abandoned at run "
                 "time (log sequence %llu), but neither its state file %s nor its devices record "
                 "that: the state file was lost or replaced by an older copy, and the devices may "
                 "be an older copy too (a backup put back), whose data the origin has overwritten "
                 "since.  Restore the state file; if these devices and the origin were restored "
                 "together to the same point, start with --accept-older-cache; otherwise "
                 "reformat the cache with 'tiercache format --force --discard-dirty'", st->path,
                 (unsigned long long)st->abandoned_seq, c->state_path);
        rc = -1;
    }
    free(st);
    return rc;
}

int abandon_load(struct cache *c, const char *state_file, const char *first_path, char *err,
                 size_t errlen)
{
    if (load_state(c, state_file, first_path, err, errlen) < 0)
        return -1;
    return abandonment_forgotten(c, first_path, err, errlen);
}

static int load_state(struct cache *c, const char *state_file, const char *first_path,
                      char *err, size_t errlen)
{
    c->state_path = state_file ? tc_xstrdup(state_file)
                               : set_state_path(c, first_path, err, errlen);
    if (c->state_path == NULL)
        return -1;
    c->state_timer.fn = state_timer_fn;
    uint64_t sb_seq = 0;
    const char *sb_dev = NULL;
    /* Device failure marks: any superblock's, the highest of each device. */
    for (unsigned d = 0; d < c->ndevs; d++)
        if (c->devs[d].sb.flags & TC_SB_DEV_FAILED)
            for (unsigned i = 0; i < c->ndevs && i < TC_MAX_DEVICES; i++)
                c->failed_seq[i] = TC_MAX(c->failed_seq[i], c->devs[d].sb.failed_seq[i]);
    for (unsigned i = 0; i < c->ndevs; i++)
        if (c->failed_seq[i])
            tc_warn("cache device %u (%s) failed at run time earlier: its entries below log "
                    "sequence %llu are ignored", i, c->devs[i].dev->name,
                    (unsigned long long)c->failed_seq[i]);
    for (unsigned d = 0; d < c->ndevs; d++)
        if ((c->devs[d].sb.flags & TC_SB_ABANDONED) && c->devs[d].sb.abandoned_seq > sb_seq) {
            sb_seq = c->devs[d].sb.abandoned_seq;
            sb_dev = c->devs[d].dev->name;
        }
    /* Marked while the state file could not record it (every device with
     * the newest mark says so): reconciled after recovery. */
    bool unfiled = sb_seq != 0;
    for (unsigned d = 0; d < c->ndevs; d++)
        if ((c->devs[d].sb.flags & TC_SB_ABANDONED) && c->devs[d].sb.abandoned_seq == sb_seq)
            unfiled &= (c->devs[d].sb.flags & TC_SB_ABANDON_UNFILED) != 0;
    for (unsigned d = 0; d < c->ndevs; d++)
        c->ab.sb_unfiled |= (c->devs[d].sb.flags & TC_SB_ABANDON_UNFILED) != 0;
    int fd = open(c->state_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno != ENOENT) {
        snprintf(err, errlen, "state file %s: cannot open: %s", c->state_path, strerror(errno));
        return -1;
    }
    if (fd < 0) {
        if (sb_seq && unfiled) {
            unfiled_found(c, sb_dev, sb_seq, "there is no state file");
            return 0;
        }
        if (sb_seq) {
            snprintf(err, errlen, "%s: the cache was abandoned at run time (log sequence %llu), "
                     "but its state file %s, which lists the sectors whose data was lost then, "
                     "is missing: serving would return older data for them.  Restore the state "
                     "file (or name it with --state-file), or reformat the cache with "
                     "'tiercache format --force --discard-dirty' (the lost sectors then read "
                     "as whatever the origin holds)", sb_dev, (unsigned long long)sb_seq,
                     c->state_path);
            return -1;
        }
        return 0;
    }
    struct stat st;
    uint8_t *buf = NULL;
    int rc = -1;
    if (fstat(fd, &st) < 0 || st.st_size > (1ll << 34)) {
        snprintf(err, errlen, "state file %s: cannot read its size", c->state_path);
        goto out;
    }
    size_t len = (size_t)st.st_size;
    buf = tc_xmalloc(len ? len : 1);
    size_t done = 0;
    while (done < len) {
        ssize_t r = read(fd, buf + done, len - done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            snprintf(err, errlen, "state file %s: cannot read: %s", c->state_path,
                     r < 0 ? strerror(errno) : "short file");
            goto out;
        }
        done += (size_t)r;
    }
    struct tc_state s;
    char why[160];
    if (state_decode(buf, len, &s, why, sizeof why) < 0) {
        snprintf(err, errlen, "state file %s is unusable (%s): it records the sectors lost when "
                 "the cache was abandoned (or that a stop found no room for in the log), and "
                 "without it the cache cannot be trusted.  Restore it, or reformat the cache "
                 "with 'tiercache format --force --discard-dirty'", c->state_path, why);
        goto out;
    }
    if (memcmp(s.set_uuid, c->set_uuid, 16) != 0) {
        char u1[37], u2[37];
        tc_uuid_format(s.set_uuid, u1);
        tc_uuid_format(c->set_uuid, u2);
        if (sb_seq && unfiled) {
            tc_warn("state file %s belongs to cache set %s, not to this one (%s): ignored",
                    c->state_path, u1, u2);
            unfiled_found(c, sb_dev, sb_seq, "the state file is another set's");
            rc = 0;
            goto out;
        }
        if (sb_seq) {
            snprintf(err, errlen, "state file %s belongs to cache set %s, not to this one (%s), "
                     "which was abandoned at run time: restore its own state file, or "
                     "reformat the cache with 'tiercache format --force --discard-dirty'",
                     c->state_path, u1, u2);
            goto out;
        }
        /* A leftover of an earlier set on the same file: not ours. */
        tc_warn("state file %s belongs to cache set %s, not to this one (%s): ignored",
                c->state_path, u1, u2);
        rc = 0;
        goto out;
    }
    if (s.spb != c->spb) {
        snprintf(err, errlen, "state file %s: blocks of %u sectors, but the cache has %u",
                 c->state_path, s.spb, c->spb);
        goto out;
    }
    if (sb_seq > s.abandoned_seq && unfiled) {
        char what[64];
        snprintf(what, sizeof what, "the state file records %s",
                 s.abandoned_seq ? "an older one" : "none");
        unfiled_found(c, sb_dev, sb_seq, what);
    } else if (sb_seq > s.abandoned_seq) {
        snprintf(err, errlen, "%s records an abandonment at log sequence %llu, but the state "
                 "file %s only one at %llu: it is an older copy, and the sectors lost later "
                 "are not in it.  Restore the current state file, or reformat the cache with "
                 "'tiercache format --force --discard-dirty'", sb_dev, (unsigned long long)sb_seq,
                 c->state_path, (unsigned long long)s.abandoned_seq);
        goto out;
    }
    if (s.flags & TC_STATE_ABANDONED)
        c->ab.disk_abandoned_seq = s.abandoned_seq;
    if (s.flags & TC_STATE_STOP_LOST) {
        /* Applied by recovery at its sequence (abandon_stop_lost_apply()),
         * after the abandonment below if both are recorded. */
        if (s.flags & TC_STATE_ABANDONED)
            c->abandoned_seq = s.abandoned_seq;
        c->stop_lost_seq = s.stop_seq;
        c->ab.stop_lost_pending = true;
        c->ab.stop_lost_drops = (s.flags & TC_STATE_STOP_DROPS) != 0;
        c->ab.stop_lost_ob = tc_xcalloc(s.count ? s.count : 1, sizeof *c->ab.stop_lost_ob);
        c->ab.stop_lost_mask = tc_xcalloc(s.count ? s.count : 1, sizeof *c->ab.stop_lost_mask);
        struct tc_mask m;
        uint64_t ob;
        for (uint64_t i = 0; i < s.count; i++) {
            if (state_entry_in_volume(c, buf, &s, i, &ob, &m)) {
                c->ab.stop_lost_ob[c->ab.stop_lost_n] = ob;
                c->ab.stop_lost_mask[c->ab.stop_lost_n++] = m;
            }
        }
    } else if (s.flags & TC_STATE_ABANDONED) {
        c->abandoned_seq = s.abandoned_seq;
        struct tc_mask m;
        uint64_t ob;
        for (uint64_t i = 0; i < s.count; i++) {
            if (!state_entry_in_volume(c, buf, &s, i, &ob, &m))
                continue;
            struct tc_mask old;
            bool had = lost_get(&c->map.lost, ob, &old);
            if (had)
                mask_or(&m, &old);
            lost_set(&c->map.lost, ob, &m);
            struct tc_mask mk;
            uint32_t digest = 0;
            mask_clear(&mk);
            if (s.version == 4)
                state_marks_get(buf, c->spb, i, mk.w, &digest);
            for (unsigned k = 0; s.version >= 3 && !had && k < c->spb; k++) {
                struct lost_proof p = { 0, 0, false };
                if (s.version == 3) {
                    state_proof_get(buf, c->spb, i, k, &p.where, &p.crc);
                } else if (mask_test(&mk, k)) {
                    /* Proven from the log's replay before anything is
                     * appended (abandon_log_marks()); offline, only
                     * counted (check) but for check --salvage. */
                    c->ab.marks_loaded++;
                    if ((c->offline && !c->vol->cfg.offline_log_marks) || c->ab.unfiled_seq)
                        continue;   /* an abandonment since, unfiled: they stay lost */
                    /* The digest in each sector's proof: the block's. */
                    p = (struct lost_proof){ .where = WHERE_LOG, .crc = digest, .logged = true };
                    c->ab.log_pass = true;
                }
                if (p.where && (p.where == WHERE_LOG || tc_state_where_dev(p.where) < c->ndevs))
                    lost_set_proof(&c->map.lost, ob, c->spb, k, &p);
                if (p.where) {
                    /* On disk, usable or not. */
                    if (c->ab.disk_proven == NULL)
                        c->ab.disk_proven = tc_xcalloc(1, sizeof *c->ab.disk_proven);
                    struct tc_mask pm;
                    if (!lost_get(c->ab.disk_proven, ob, &pm))
                        mask_clear(&pm);
                    pm.w[k / 64] |= 1ull << (k % 64);
                    lost_set(c->ab.disk_proven, ob, &pm);
                }
            }
        }
        c->ab.marks_lost_sectors = lost_sectors(&c->map.lost);
        if (c->ab.log_pass && c->vol->read_only && !c->offline) {
            /* A read-only start writes nothing to the origin, yet its
             * cache appends (it caches what it reads): over the very log
             * the marks point into. */
            snprintf(err, errlen, "state file %s marks %llu lost sectors of a drain the cache's "
                     "abandonment left cut short (it had no room for their proofs): a "
                     "read-write start writes them back to the origin from the log before "
                     "the cache is used; a read-only one cannot, and its cache would append "
                     "over that log.  Start it read-write once", c->state_path,
                     (unsigned long long)c->ab.marks_loaded);
            goto out;
        }
        char sz[32];
        tc_warn("cache: abandoned at run time earlier (state file %s): log entries below "
                "sequence %llu are ignored; %llu sectors (%s) were lost then and read as EIO "
                "until rewritten", c->state_path, (unsigned long long)c->abandoned_seq,
                (unsigned long long)lost_sectors(&c->map.lost),
                tc_format_size(lost_sectors(&c->map.lost) * TC_SECTOR, sz, sizeof sz));
    }
    rc = 0;
out:
    free(buf);
    close(fd);
    return rc;
}

/* ---- Resuming the drain ---- */

/*
 * The drain of the last device in service (failure.c) writes its dirty
 * data back while the daemon serves; until a block is written back, the
 * durable records (the state file) call its sectors lost.  A kill, a crash
 * or a stop that could not finish the drain leaves them so, although the
 * data usually still sits on the abandoned device.  The next start does
 * not trust that device's log (nothing below abandoned_seq is replayed:
 * see the top of this file), but each lost sector the abandonment itself
 * recorded carries a proof (format/ondisk.h, state file version 3): where
 * its version's data was on the device, and the CRC-32C its chunk header
 * recorded for it (from memory, or from the header read back after the
 * failure: failure.c, "Proofs read back").  So, before anything is
 * appended to the cache (whose segments the new log reuses), the start:
 *
 *   1. reads each proven sector back from the device, and keeps it only
 *      if it reads and matches its CRC: damage since, a write torn or
 *      never made (the failed one: the device may never have received
 *      it), a segment reused -- none of them matches;
 *   2. writes the sectors kept to the origin, and flushes the origin;
 *   3. only then drops them from the lost set, drops every proof, and
 *      writes the state file again (version 1 or 2 again).
 *
 * Why it is the newest acknowledged version: a proof is made when the
 * abandonment records the sector lost, from the fragment the index served
 * it from (the version the uninterrupted drain would have written back),
 * and lost.c drops it in memory the moment the sector leaves the lost set
 * or is lost anew (lost_set()).  On disk the state file is rewritten only
 * lazily, so a write that reaches the origin directly (lostlog.c,
 * lost_passthrough()) over a sector the file on disk proves
 * (c->ab.disk_proven) first drops those proofs and rewrites the file,
 * blocking, and fails with EIO if it cannot (abandon_proofs_before_write()):
 * no start can then write the older proven version over an acknowledged
 * write.  (Rare: the drain's own writeback and a write after it, once per
 * rewrite; status proof_state_file_writes.)  The CRC ties the data read
 * to that version (as every cache read is tied to its chunk's CRC).
 *
 * A kill during steps 1 to 3 leaves the state file as it was: the next
 * start does it again (writing the same data again).  The reads before
 * step 3 do not serve anything: requests come only after the start.  A
 * state file that cannot be written in step 3 keeps the sectors lost in
 * memory too (EIO, as the file on disk says), the data on the origin --
 * and the proofs on disk (c->ab.disk_proven stays as loaded): a client
 * write of such a sector, into the cache now in service as well as
 * around it (cache.c, cache_submit()), first writes the file again
 * without them (abandon_proofs_before_write()), or fails with EIO.  A
 * write acknowledged meanwhile could reach the origin, directly or by
 * writeback, and its record in the new log be gone at the next start (not
 * synced yet, or evicted): that start wrote the older proven version
 * back over it.
 * Sectors without a proof, or whose proof fails, stay lost (EIO).
 */

struct resume_block {
    uint64_t oblock;
    struct tc_mask proven;          /* read back, CRC matching */
};

struct resume_walk {
    uint64_t *ob;
    size_t n, cap;
    const struct lost *lost;
    unsigned spb;
};

static void resume_collect(void *arg, uint64_t oblock, const struct tc_mask *m)
{
    struct resume_walk *w = arg;
    struct lost_proof p;
    bool any = false;
    for (unsigned s = 0; s < w->spb && !any; s++)
        any = mask_test(m, s) && lost_get_proof(w->lost, oblock, s, &p);
    if (!any)
        return;
    if (w->n < w->cap)
        w->ob[w->n++] = oblock;
}

static int ob_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void resume_count_lost(void *arg, uint64_t oblock, const struct tc_mask *m)
{
    (void)oblock;
    struct abandon_resume *r = arg;
    r->still_lost_blocks++;
    r->still_lost_sectors += mask_count(m);
}

/* Read the proven sectors of block ob into buf (laid out by sector): the
 * mask of those that read and match their CRC.  Sectors whose proofs name
 * consecutive sectors of one device (a chunk's data is laid out so) are
 * read in one request: a block of 16 sectors is one read, not 16. */
static void resume_read(struct cache *c, uint64_t ob, uint8_t *buf, struct tc_mask *ok,
                        uint64_t *failed)
{
    mask_clear(ok);
    struct lost_proof p[TC_MASK_WORDS * 64];
    bool have[TC_MASK_WORDS * 64];
    for (unsigned s = 0; s < c->spb; s++)
        have[s] = lost_get_proof(&c->map.lost, ob, s, &p[s]);
    for (unsigned s = 0; s < c->spb;) {
        if (!have[s]) {
            s++;
            continue;
        }
        /* The run [s, e): proofs of consecutive sectors on one device. */
        unsigned e = s + 1;
        while (e < c->spb && have[e] && p[e].where == p[e - 1].where + 1)
            e++;
        unsigned d = tc_state_where_dev(p[s].where);
        uint64_t off = tc_state_where_sector(p[s].where) * TC_SECTOR;
        uint64_t len = (uint64_t)(e - s) * TC_SECTOR;
        int err = -ENODEV;
        if (d < c->ndevs && c->devs[d].dev != NULL &&
            off >= c->devs[d].sb.data_offset && off + len <= c->devs[d].dev->size)
            err = dev_sync_io(c->devs[d].dev, TC_DEV_READ, buf + (size_t)s * TC_SECTOR, off,
                              len, 0);
        for (unsigned k = s; k < e; k++) {
            uint8_t *sec = buf + (size_t)k * TC_SECTOR;
            uint64_t koff = off + (uint64_t)(k - s) * TC_SECTOR;
            int kerr = err;
            /* A run that failed to read is read again sector by sector:
             * one bad sector keeps only itself lost. */
            if (err && e - s > 1 && err != -ENODEV)
                kerr = dev_sync_io(c->devs[d].dev, TC_DEV_READ, sec, koff, TC_SECTOR, 0);
            if (kerr == 0 && tc_crc32c(0, sec, TC_SECTOR) == p[k].crc) {
                mask_set(ok, k);
                continue;
            }
            (*failed)++;
            char name[64];
            snprintf(name, sizeof name, "%s",
                     d < c->ndevs && c->devs[d].dev ? c->devs[d].dev->name : "?");
            if (kerr)
                tc_warn("cache: resumed drain: sector %u of origin block %llu: cannot read its "
                        "data on device %u (%s) at byte %llu: %s; it stays lost", k,
                        (unsigned long long)ob, d, name, (unsigned long long)koff,
                        strerror(-kerr));
            else
                tc_warn("cache: resumed drain: sector %u of origin block %llu: the data on "
                        "device %u (%s) at byte %llu does not match the checksum recorded at "
                        "the abandonment (damaged or overwritten since); it stays lost", k,
                        (unsigned long long)ob, d, name, (unsigned long long)koff);
        }
        s = e;
    }
}

/* The resumed drain to origin (size bytes: the volume's); with write
 * false, only read and counted. */
static void resume_drain(struct cache *c, struct tc_dev *origin, uint64_t size, bool write)
{
    struct resume_walk w = { .lost = &c->map.lost, .spb = c->spb, .cap = c->map.lost.blocks };
    w.ob = tc_xcalloc(w.cap ? w.cap : 1, sizeof *w.ob);
    lost_foreach(&c->map.lost, resume_collect, &w);
    qsort(w.ob, w.n, sizeof *w.ob, ob_cmp);
    struct abandon_resume *r = &c->ab.resume;
    memset(r, 0, sizeof *r);
    struct resume_block *rb = tc_xcalloc(w.n ? w.n : 1, sizeof *rb);
    size_t nb = 0;
    uint8_t *buf = tc_alloc_aligned((size_t)c->spb * TC_SECTOR);
    uint64_t refused = 0;
    for (size_t i = 0; i < w.n; i++) {
        uint64_t ob = w.ob[i];
        struct tc_mask ok;
        resume_read(c, ob, buf, &ok, &r->unproven_sectors);
        if (mask_empty(&ok))
            continue;
        r->blocks++;
        r->sectors += mask_count(&ok);
        if (!write)
            continue;
        /* Runs of proven sectors, each one write; the last block of an
         * origin whose size is not a multiple of blocks is cut at its end
         * (no sector past it was ever written, so none is lost). */
        uint64_t base = ob * c->block_size;
        struct tc_mask done;
        mask_clear(&done);
        for (unsigned s = 0; s < c->spb;) {
            if (!mask_test(&ok, s)) {
                s++;
                continue;
            }
            unsigned e = s;
            while (e < c->spb && mask_test(&ok, e))
                e++;
            uint64_t off = base + (uint64_t)s * TC_SECTOR;
            uint64_t len = (uint64_t)(e - s) * TC_SECTOR;
            if (off + len > size)
                len = off < size ? size - off : 0;
            int err = len ? dev_sync_io(origin, TC_DEV_WRITE, buf + (size_t)s * TC_SECTOR, off,
                                        len, 0)
                          : 0;
            if (err == 0) {
                for (unsigned k = s; k < e; k++)
                    done.w[k / 64] |= 1ull << (k % 64);
            } else {
                refused += e - s;
                tc_error("cache: resumed drain: the origin %s refused the write of bytes "
                         "%llu..%llu (origin block %llu): %s; they stay lost", origin->name,
                         (unsigned long long)off, (unsigned long long)(off + len - 1),
                         (unsigned long long)ob, strerror(-err));
            }
            s = e;
        }
        if (!mask_empty(&done))
            rb[nb++] = (struct resume_block){ .oblock = ob, .proven = done };
    }
    free(buf);
    free(w.ob);
    /* Why a proven sector stays lost, for the summary: its data did not
     * read back matching (resume_read()), the origin refused its write,
     * the origin's flush failed, or the state file could not record it.
     * unproven_sectors is their sum (status: failed_sectors). */
    uint64_t bad_data = r->unproven_sectors, unflushed = 0, unrecorded = 0;
    r->unproven_sectors += refused;
    if (write && nb > 0 && origin->can_flush) {
        int err = dev_sync_io(origin, TC_DEV_FLUSH, NULL, 0, 0, 0);
        if (err) {
            tc_error("cache: resumed drain: the origin %s could not be flushed: %s; the "
                     "sectors written back stay lost (EIO), as the state file says",
                     origin->name, strerror(-err));
            unflushed = r->sectors - refused;
            r->unproven_sectors += unflushed;
            nb = 0;
        }
    }
    if (!write) {
        free(rb);
        lost_foreach(&c->map.lost, resume_count_lost, r);
        return;
    }
    /* On the origin, flushed: no longer lost.  The masks before, in case
     * the state file cannot say so. */
    struct tc_mask *before = tc_xcalloc(nb ? nb : 1, sizeof *before);
    for (size_t i = 0; i < nb; i++) {
        struct tc_mask m;
        if (!lost_get(&c->map.lost, rb[i].oblock, &m))
            mask_clear(&m);
        before[i] = m;
        mask_andnot(&m, &rb[i].proven);
        lost_set(&c->map.lost, rb[i].oblock, &m);
        r->written_bytes += (uint64_t)mask_count(&rb[i].proven) * TC_SECTOR;
    }
    /* The device's data is reused from now on: no proof outlives this
     * start, written or not. */
    lost_drop_proofs(&c->map.lost);
    if (state_write(c) < 0) {
        tc_error("cache: resumed drain: the state file %s could not be written: the %llu "
                 "sectors written back to the origin stay lost (EIO) until written again",
                 c->state_path, (unsigned long long)(r->written_bytes / TC_SECTOR));
        for (size_t i = 0; i < nb; i++)
            lost_set(&c->map.lost, rb[i].oblock, &before[i]);
        unrecorded = r->written_bytes / TC_SECTOR;
        r->unproven_sectors += unrecorded;
        r->written_bytes = 0;
        nb = 0;
        c->ab.state_dirty = true;
    }
    free(before);
    free(rb);
    /* The blocks written back: with a proven sector, written, flushed and
     * recorded. */
    r->blocks = nb;
    c->ab.resumed = true;
    lost_foreach(&c->map.lost, resume_count_lost, r);
    char sz[32];
    tc_warn("cache: resumed drain: %llu blocks, %s written back (%llu sectors); %llu blocks "
            "(%llu sectors) still lost, of which %llu sectors had a proof but stay lost: %llu "
            "did not read back matching it, %llu the origin refused, %llu not flushed, %llu "
            "not recorded in the state file",
            (unsigned long long)r->blocks,
            tc_format_size(r->written_bytes, sz, sizeof sz),
            (unsigned long long)(r->written_bytes / TC_SECTOR),
            (unsigned long long)r->still_lost_blocks,
            (unsigned long long)r->still_lost_sectors,
            (unsigned long long)r->unproven_sectors, (unsigned long long)bad_data,
            (unsigned long long)refused, (unsigned long long)unflushed,
            (unsigned long long)unrecorded);
}

void abandon_resume_drain(struct cache *c, bool write)
{
    if (c->map.lost.proof_blocks == 0)
        return;
    resume_drain(c, c->vol->origin, c->vol->size, write);
}

void abandon_salvage_drain(struct cache *c, struct tc_dev *origin)
{
    memset(&c->ab.resume, 0, sizeof c->ab.resume);
    if (c->map.lost.proof_blocks == 0)
        return;
    /* The volume's size: the origin's, which salvage checked is the one
     * the cache was formatted for (an offline cache has none of its own). */
    resume_drain(c, origin, c->devs[0].sb.origin_size, true);
}

/* ---- an abandonment the state file could not record ---- */

/* The flag off every superblock that carries it (copy A, flush, copy B,
 * flush): the state file records the abandonment now.  A failure is said
 * and left: the flag only makes a start take a state file lost later for
 * one never written. */
static void unfiled_clear(struct cache *c)
{
    uint8_t *buf = tc_alloc_aligned(TC_SB_SIZE);
    for (unsigned d = 0; d < c->ndevs; d++) {
        struct cache_dev *cd = &c->devs[d];
        if (!(cd->sb.flags & TC_SB_ABANDON_UNFILED) || cd->dev->read_only)
            continue;
        cd->sb.flags &= ~TC_SB_ABANDON_UNFILED;
        sb_encode(&cd->sb, buf);
        int rc = 0;
        for (unsigned k = 0; rc == 0 && k < TC_SB_COPIES; k++) {
            rc = dev_sync_io(cd->dev, TC_DEV_WRITE, buf, (uint64_t)k * TC_SB_SIZE, TC_SB_SIZE, 0);
            if (rc == 0)
                rc = dev_sync_io(cd->dev, TC_DEV_FLUSH, NULL, 0, 0, 0);
        }
        if (rc)
            tc_warn("%s: cannot rewrite the superblock (%s): it still says the state file %s "
                    "lacks the abandonment it records now", cd->dev->name, strerror(-rc),
                    c->state_path);
    }
    free(buf);
    c->ab.sb_unfiled = false;
}

/* Block ob's sectors m, read into buf (a block's room), written to the
 * origin a run at a time (blocking).  0, adding the sectors to *sectors;
 * or the first write's error, with its offset and length. */
static int origin_write_runs(const struct cache *c, struct tc_dev *origin, uint64_t ob,
                             const struct tc_mask *m, const uint8_t *buf, uint64_t *sectors,
                             uint64_t *at, size_t *len)
{
    unsigned s, e;
    for (s = 0; mask_next_run(m, c->spb, &s, &e); s = e) {
        *at = ob * c->block_size + (uint64_t)s * TC_SECTOR;
        *len = (size_t)(e - s) * TC_SECTOR;
        int rc = dev_sync_io(origin, TC_DEV_WRITE, (void *)(buf + (size_t)s * TC_SECTOR), *at,
                             *len, 0);
        if (rc)
            return rc;
        *sectors += e - s;
    }
    return 0;
}

int abandon_unfiled(struct cache *c, struct tc_dev *origin, char *err, size_t errlen)
{
    uint64_t seq = c->ab.unfiled_seq;
    if (seq == 0) {
        if (c->ab.sb_unfiled && !c->vol->read_only)
            unfiled_clear(c);   /* the state file recorded it since */
        return 0;
    }
    if (c->vol->read_only) {
        snprintf(err, errlen, "the cache was abandoned at run time (log sequence %llu) while "
                 "its state file %s could not record it: a read-write start writes the log's "
                 "dirty data back and records it; a read-only one cannot",
                 (unsigned long long)seq, c->state_path);
        return -1;
    }
    uint8_t *buf = tc_alloc_aligned((size_t)c->spb * TC_SECTOR);
    uint64_t blocks = 0, sectors = 0, lost = 0;
    int ret = 0;
    for (uint64_t b = 0; b < c->nblocks_origin && ret == 0; b++) {
        if (!map_is_dirty(&c->map, b))
            continue;
        uint32_t id = index_lookup(&c->map.idx, b);
        if (id == NIL)
            continue;
        struct tc_mask v, d, lm;
        ce_get_masks(&c->map.idx, id, &v, &d);
        if (lost_get(&c->map.lost, b, &lm))
            mask_andnot(&d, &lm);       /* lost already: no version is the newest */
        if (mask_empty(&d))
            continue;
        /* What does not read back and check is lost. */
        struct tc_mask good;
        if (cache_gather_wait(c, id, &d, buf, &good) != 0) {
            struct tc_mask bad = d;
            mask_andnot(&bad, &good);
            if (!mask_empty(&bad)) {
                struct tc_mask old;
                if (lost_get(&c->map.lost, b, &old))
                    mask_or(&bad, &old);
                lost += mask_count(&bad);
                lost_set(&c->map.lost, b, &bad);
                tc_error("origin block %llu: %u dirty sectors of the log do not read back "
                         "(or fail their checksums): lost, read as EIO until written again",
                         (unsigned long long)b, mask_count(&bad));
            }
        }
        uint64_t off;
        size_t len;
        int rc = origin_write_runs(c, origin, b, &good, buf, &sectors, &off, &len);
        if (rc) {
            snprintf(err, errlen, "%s: write of %zu bytes at offset %llu failed (%s) while "
                     "writing back the dirty data of a cache abandoned while its state "
                     "file %s could not record it", origin->name, len,
                     (unsigned long long)off, strerror(-rc), c->state_path);
            ret = -1;
            break;
        }
        blocks++;
    }
    free(buf);
    if (ret == 0 && origin->can_flush) {
        int rc = dev_sync_io(origin, TC_DEV_FLUSH, NULL, 0, 0, 0);
        if (rc) {
            snprintf(err, errlen, "%s: flush failed (%s, offset 0) after writing back the dirty "
                     "data of a cache abandoned while its state file %s could not record it",
                     origin->name, strerror(-rc), c->state_path);
            ret = -1;
        }
    }
    if (ret < 0)
        return -1;
    /* The record: the abandonment, with the lost set as recovery left it
     * (the state file's, the log's LOST records) and what did not read. */
    c->abandoned_seq = TC_MAX(c->abandoned_seq, seq);
    int rc = state_write_as(c, false);
    if (rc < 0) {
        snprintf(err, errlen, "state file %s: cannot write it (%s): the superblocks record an "
                 "abandonment of the cache (log sequence %llu) it lacks; the dirty data the "
                 "log held then is on the origin now.  Give its file system room and start "
                 "again", c->state_path, strerror(-rc), (unsigned long long)seq);
        return -1;
    }
    unfiled_clear(c);
    tc_info("cache: the abandonment at log sequence %llu recorded in the state file %s: %llu "
            "sectors of %llu dirty blocks written back to the origin, %llu lost",
            (unsigned long long)seq, c->state_path, (unsigned long long)sectors,
            (unsigned long long)blocks, (unsigned long long)lost);
    return 1;
}

/* ---- Resuming the drain from the log ----
 *
 * A state file written with marks instead of proofs (version 4: its file
 * system had no room for them; format/ondisk.h) names the lost sectors a
 * drain cut short would have proven, not where their versions are.  The
 * log says where: at the abandonment each such sector's version was the
 * newest in the index, on a chunk whose write had completed, and nothing
 * has been appended to the devices since (the abandoned run appends
 * nothing; a start appends only after this).  Recovery rebuilds the index
 * from the log, so the replay of the log below abandoned_seq
 * (c->ab.log_pass: recovery applies those entries too, this once, but
 * not to the lost set, which is the state file's) usually serves each
 * marked sector from that version.  Not always: the chunk holding it may
 * no longer check (damage), or the replay may not reach it -- a chunk
 * written while an earlier one of its segment failed ends the walk
 * before it --, or reach a newer one than marked -- the replay covers
 * the log of a device failed earlier below its failure mark too (its
 * dirty data may have been drained from there, its rescue pending when
 * the last device failed: recovery.c), where a chunk whose write failed
 * may yet have landed --, and then the replay serves a version, intact
 * and dirty, that must never be written.  So each entry carries a digest of the CRCs of its
 * marked versions (marks_digest()), and a block is written back only if
 * every marked sector replays to a dirty version in a group newer than
 * every damage the scan found (c->damage_group_max, salvage's rule),
 * reads back matching its chunk's CRC, and their CRCs give the digest:
 * the very versions marked.  Otherwise the block's marked sectors stay
 * lost (EIO).
 *
 * The steps are those of a resumed drain: the sectors written to the
 * origin, the origin flushed, and only then dropped from the lost set,
 * every mark dropped, and the state file written again (version 1 or 2)
 * -- which must succeed, or the start is refused: the marks must not
 * outlive this start, since the first append overwrites the log they
 * point into, after which the newest version left of a marked sector
 * could be an older one.  Then the cache is opened again (returns 1), its
 * index rebuilt without the entries below abandoned_seq, as every start
 * after an abandonment does.  A read-only start is refused
 * (abandon_load()): it writes nothing to the origin, yet its cache
 * appends.  check (offline) counts the marks and changes nothing;
 * check --salvage runs this write-back first, as a start does, then opens
 * the set again without the marks for the salvage proper; a start
 * after an abandonment the state file could not record (abandon_unfiled())
 * drops them: their sectors stay lost. */

/* Block ob's marked sectors (*marked) and their digest; true when the
 * replay serves every one of them from a version that may be written
 * back -- dirty, in a group below the abandonment and newer than any
 * damage -- (*idp: its entry).  A block with one marked sector that does
 * not is not written at all: its digest binds them together. */
static bool marked_usable(struct cache *c, uint64_t ob, struct tc_mask *marked,
                          uint32_t *digest, uint32_t *idp)
{
    struct tc_mask lm;
    mask_clear(marked);
    *idp = NIL;
    if (!lost_get(&c->map.lost, ob, &lm))
        return false;
    for (unsigned s = 0; s < c->spb; s++) {
        struct lost_proof p;
        if (mask_test(&lm, s) && lost_get_proof(&c->map.lost, ob, s, &p) &&
            p.where == WHERE_LOG) {
            marked->w[s / 64] |= 1ull << (s % 64);
            *digest = p.crc;
        }
    }
    uint32_t id = index_lookup(&c->map.idx, ob);
    if (id == NIL || mask_empty(marked))
        return false;
    struct tc_mask v, d;
    ce_get_masks(&c->map.idx, id, &v, &d);
    for (unsigned s = 0; s < c->spb; s++) {
        if (!mask_test(marked, s))
            continue;
        uint32_t fid = mask_test(&d, s) ? ce_locate(&c->map.idx, id, s) : NIL;
        if (fid == NIL)
            return false;
        uint64_t group = space_seg(&c->sp, frag_seg(&c->map.idx, fid))->seq;
        if (group >= c->abandoned_seq || (c->damage_group_max && group <= c->damage_group_max))
            return false;
    }
    *idp = id;
    return true;
}

/* Whether the data read back for the marked sectors gives their digest
 * (marks_digest(), from the CRCs of their data). */
static bool marked_digest_matches(const struct cache *c, const struct tc_mask *marked,
                                  const uint8_t *buf, uint32_t digest)
{
    uint32_t d = 0;
    for (unsigned s = 0; s < c->spb; s++) {
        if (!mask_test(marked, s))
            continue;
        uint8_t le[4];
        le32_put(le, tc_crc32c(0, buf + (size_t)s * TC_SECTOR, TC_SECTOR));
        d = tc_crc32c(d, le, sizeof le);
    }
    return d == digest;
}

int abandon_log_marks(struct cache *c, struct tc_dev *origin, char *err, size_t errlen)
{
    if (!c->ab.log_pass)
        return 0;
    /* The replay left the lost set as the state file had it (recovery.c
     * applies no entry below abandoned_seq to it): nothing it calls lost
     * may leave it but by this write-back. */
    if (lost_sectors(&c->map.lost) < c->ab.marks_lost_sectors) {
        snprintf(err, errlen, "state file %s: the replay of the log for the lost sectors it "
                 "marks left %llu sectors lost of the %llu it records; refusing to serve rather "
                 "than read the origin's older data for the others", c->state_path,
                 (unsigned long long)lost_sectors(&c->map.lost),
                 (unsigned long long)c->ab.marks_lost_sectors);
        return -1;
    }
    /* The blocks with a mark (every proof loaded is one: the file is of
     * version 4), in order: the origin written from front to back. */
    struct resume_walk w = { .lost = &c->map.lost, .spb = c->spb, .cap = c->map.lost.blocks };
    w.ob = tc_xcalloc(w.cap ? w.cap : 1, sizeof *w.ob);
    lost_foreach(&c->map.lost, resume_collect, &w);
    qsort(w.ob, w.n, sizeof *w.ob, ob_cmp);
    uint8_t *buf = tc_alloc_aligned((size_t)c->spb * TC_SECTOR);
    struct tc_mask *good = tc_xcalloc(w.n ? w.n : 1, sizeof *good);
    uint64_t marked = 0, written = 0, blocks = 0, mismatched = 0;
    int ret = 0;
    for (size_t i = 0; i < w.n && ret == 0; i++) {
        uint64_t ob = w.ob[i];
        for (unsigned s = 0; s < c->spb; s++) {
            struct lost_proof p;
            marked += lost_get_proof(&c->map.lost, ob, s, &p) && p.where == WHERE_LOG;
        }
        uint32_t id, digest = 0;
        struct tc_mask want;
        if (!marked_usable(c, ob, &want, &digest, &id))
            continue;
        /* Read back and checked against the chunks' CRCs, and those
         * against the digest: the versions marked, or none is written. */
        if (cache_gather_wait(c, id, &want, buf, &good[i]) != 0 ||
            !marked_digest_matches(c, &want, buf, digest)) {
            mask_clear(&good[i]);
            mismatched++;
            continue;
        }
        uint64_t off;
        size_t len;
        int rc = origin_write_runs(c, origin, ob, &good[i], buf, &written, &off, &len);
        if (rc) {
            snprintf(err, errlen, "%s: write of %zu bytes at offset %llu failed (%s) while "
                     "writing back the lost sectors the state file %s marks (a drain of the "
                     "abandoned cache cut short): start again once the origin takes writes",
                     origin->name, len, (unsigned long long)off, strerror(-rc), c->state_path);
            ret = -1;
            break;
        }
        blocks++;
    }
    free(buf);
    if (ret == 0 && written && origin->can_flush) {
        int rc = dev_sync_io(origin, TC_DEV_FLUSH, NULL, 0, 0, 0);
        if (rc) {
            snprintf(err, errlen, "%s: flush failed (%s, offset 0) after writing back the lost "
                     "sectors the state file %s marks: start again once the origin flushes",
                     origin->name, strerror(-rc), c->state_path);
            ret = -1;
        }
    }
    if (ret == 0) {
        /* Durable on the origin: no longer lost; and no mark outlives this
         * start, written back or not. */
        for (size_t i = 0; i < w.n; i++) {
            struct tc_mask m;
            if (mask_empty(&good[i]) || !lost_get(&c->map.lost, w.ob[i], &m))
                continue;
            mask_andnot(&m, &good[i]);
            lost_set(&c->map.lost, w.ob[i], &m);
        }
        lost_drop_proofs(&c->map.lost);
        int rc = state_write(c);
        if (rc < 0) {
            snprintf(err, errlen, "state file %s: cannot write it (%s) after writing back the "
                     "%llu lost sectors it marks (a drain of the abandoned cache cut short): "
                     "its marks must not outlive this start.  Give its file system room and "
                     "start again", c->state_path, strerror(-rc), (unsigned long long)written);
            ret = -1;
        }
    }
    free(good);
    free(w.ob);
    c->ab.marks_marked = marked;
    c->ab.marks_written = written;
    c->ab.marks_mismatched_blocks = mismatched;
    if (ret < 0)
        return -1;
    char sz[32];
    tc_warn("cache: resumed drain from the log: %llu of the %llu lost sectors the state file "
            "marked written back (%s, %llu blocks); %llu of them stay lost (not found, or "
            "found in another version: %llu blocks unreadable or not matching their digest); "
            "%llu sectors lost in all now",
            (unsigned long long)written, (unsigned long long)marked,
            tc_format_size(written * TC_SECTOR, sz, sizeof sz), (unsigned long long)blocks,
            (unsigned long long)(marked - written), (unsigned long long)mismatched,
            (unsigned long long)lost_sectors(&c->map.lost));
    return 1;
}

bool abandon_unfiled_refuses(struct cache *c, const char *what, uint64_t off, uint64_t len)
{
    if (!c->abandoned || c->ab.disk_abandoned_seq == c->abandoned_seq || len == 0 ||
        (!lost_overlaps(&c->map.lost, c->block_size, off, len) &&
         (c->ab.unfiled_lost == NULL ||
          !lost_overlaps(c->ab.unfiled_lost, c->block_size, off, len))))
        return false;
    c->ab.unfiled_refused++;
    tc_error("%s of origin bytes %llu..%llu fails with EIO: it overlaps sectors lost or "
             "drained when the cache was abandoned (log sequence %llu), and the state file %s "
             "could not record that abandonment yet: the next start would write the log's "
             "older dirty data for them back over this write.  It succeeds once the state file is written (room "
             "on its file system)", what, (unsigned long long)off,
             (unsigned long long)(off + len - 1), (unsigned long long)c->abandoned_seq,
             c->state_path);
    return true;
}

int abandon_proofs_before_write(struct cache *c, uint64_t off, uint64_t len)
{
    if (c->ab.disk_proven == NULL ||
        !lost_overlaps(c->ab.disk_proven, c->block_size, off, len))
        return 0;
    lost_drop_proofs_range(&c->map.lost, c->block_size, off, len);
    c->ab.proof_rewrites++;
    int rc = state_write(c);
    if (rc < 0)
        tc_error("write of origin bytes %llu..%llu refused: the state file %s still proves an "
                 "older version of them, which a start after a crash would write back over "
                 "this write, and cannot be written without that proof: %s",
                 (unsigned long long)off, (unsigned long long)(off + len - 1), c->state_path,
                 strerror(-rc));
    return rc;
}

void abandon_status_json(struct cache *c, struct tc_json *j)
{
    json_bool(j, "abandoned", c->abandoned);
    json_uint(j, "abandoned_seq", c->abandoned_seq);
    json_bool(j, "abandon_unrecorded", c->abandon_unrecorded);
    json_string(j, "state_file", c->state_path ? c->state_path : "");
    json_uint(j, "state_file_writes", c->ab.state_writes);
    json_uint(j, "state_file_errors", c->ab.state_errors);
    json_uint(j, "unfiled_lost_writes_refused", c->ab.unfiled_refused);
    json_bool(j, "state_file_stop_lost", c->ab.stop_lost_pending);
    json_uint(j, "state_file_start_drops_waiting", c->ab.start_drops_waiting);
    /* Lost sectors written again whose clear no record holds yet (the
     * top of this file: a settle records it once the write is durable). */
    json_uint(j, "lost_clears_unsettled_blocks", c->map.lost.unsettled_blocks);
    json_bool(j, "lost_clears_settling", c->ab.settle_busy);
    /* The drain resumed at this start (abandon_resume_drain()). */
    json_begin_object(j, "resumed_drain");
    json_bool(j, "resumed", c->ab.resumed);
    json_uint(j, "blocks", c->ab.resume.blocks);
    json_uint(j, "written_bytes", c->ab.resume.written_bytes);
    json_uint(j, "failed_sectors", c->ab.resume.unproven_sectors);
    json_uint(j, "still_lost_blocks", c->ab.resume.still_lost_blocks);
    json_uint(j, "still_lost_bytes", c->ab.resume.still_lost_sectors * TC_SECTOR);
    json_uint(j, "proof_state_file_writes", c->ab.proof_rewrites);
    json_end_object(j);
    /* Version 4 (marks for want of room for the proofs): files written so,
     * and the marked sectors the state file had at this start (the log
     * says how their write-back went). */
    json_uint(j, "state_file_mark_writes", c->ab.marks_writes);
    json_uint(j, "state_file_marked_sectors_loaded", c->ab.marks_loaded);
    json_uint(j, "superblocks_marked", c->ab.sb_marks);
    uint64_t queued = 0;
    for (struct sb_mark *m = c->ab.sb_queue; m; m = m->next)
        queued += !m->started;
    json_uint(j, "superblock_writes_waiting", queued);
    json_begin_array(j, "device_failure_marks");
    for (unsigned i = 0; i < c->ndevs; i++) {
        if (!c->failed_seq[i])
            continue;
        char u[37];
        tc_uuid_format(c->devs[i].sb.dev_uuid, u);
        json_begin_object(j, NULL);
        json_uint(j, "index", i);
        json_string(j, "device", c->devs[i].dev->name);
        json_string(j, "uuid", u);
        json_uint(j, "failed_seq", c->failed_seq[i]);
        json_end_object(j);
    }
    json_end_array(j);
    json_uint(j, "device_failure_marks_pending", c->ab.devfail_marks_pending);
    json_bool(j, "device_failure_incomplete", c->ab.devfail_incomplete);
    uint64_t held = 0;
    for (struct held_ack *h = c->ab.held_acks; h; h = h->next)
        held++;
    json_uint(j, "device_failure_held_acks", held);
    json_uint(j, "device_failure_superblocks_marked", c->ab.devfail_marks);
}
