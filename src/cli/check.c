/*
 * tiercache check and dump: offline looks at a cache set that no daemon is
 * using.  check audits it (src/engine/check.c); dump prints its layout.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "engine/cache.h"
#include "engine/check.h"
#include "engine/originstop.h"
#include "engine/seqrec.h"
#include "io/claim.h"
#include "io/dev.h"
#include "io/originrec.h"
#include "util/json.h"
#include "util/log.h"
#include "util/misc.h"
#include "util/parse.h"

static const char check_help[] =
"Usage: tiercache check --cache DEV[,DEV...] [--origin ORIGIN] [--state-file PATH]\n"
"                       [--json] [--progress]\n"
"       tiercache check --salvage --cache DEV[,DEV...] --origin ORIGIN\n"
"                       [--state-file PATH] [--accept-older-cache]\n"
"                       [--adopt-origin] [--origin-check-blocks N] [--json]\n"
"                       [--progress]\n"
"\n"
"Audit a cache set offline: both superblock copies, every chunk summary\n"
"and checksum the log holds, the checksum of every cached sector, the\n"
"consistency of the index rebuilt from the log, and the accounting of\n"
"dirty data, and the checkpoint a clean stop wrote (the same state as the\n"
"full scan of the log, or a problem).  Every running checkpoint the\n"
"superblocks' slots name must be whole and check (else a problem naming\n"
"the device, the slot and the offset of its first segment); the newest\n"
"is compared with the full scan when no entry was written after it.  The first chunk header of every\n"
"segment, read alone, must name the group the full scan found there.\n"
"Damaged data is listed by origin\n"
"range, as lost (dirty) or harmless (clean: the origin has it).  With\n"
"--origin, also check that the\n"
"cache was formatted for that origin.  The set's sequence record (beside\n"
"the state file: cache.img.tcseq) is read too: devices holding an older\n"
"copy of the log than it says was durable (a restored backup, a rolled-back\n"
"snapshot), on the set or on one device (named), or an unusable record,\n"
"are a problem, as serve refuses them.  Of a cache abandoned while its\n"
"drain ran (cut short by a kill, a crash or a stop), check says how much of\n"
"the lost data is still on the abandoned device and proven intact (its CRC\n"
"matches the one the state file recorded), which the next serve (or\n"
"--salvage) writes back\n"
"(JSON: recoverable_lost_bytes, recoverable_lost_blocks,\n"
"unrecoverable_proven_bytes); a state file that had no room for the proofs\n"
"marks those sectors instead, which the next read-write serve (or\n"
"--salvage) writes back from the log (JSON: marked_lost_bytes).\n"
"A set a daemon is using is refused\n"
"(exit 2), naming the daemon: its devices are claimed while it runs.\n"
"\n"
"  --cache DEV[,DEV...]  the devices of the set\n"
"  --origin ORIGIN       the origin it should belong to\n"
"  --salvage             instead of the audit: write every dirty version the\n"
"                        log holds intact, and newest, back to ORIGIN (for a\n"
"                        cache serve refuses as damaged; it is not changed,\n"
"                        and can be reformatted afterwards; once the origin\n"
"                        is written without it, serve and another salvage\n"
"                        refuse it).  A dirty sector\n"
"                        whose newest version may be in a damaged chunk, or\n"
"                        whose data fails its checksum, is not written (an\n"
"                        older version could overwrite newer data): it is\n"
"                        listed as lost.  Exit status 0 when nothing was\n"
"                        lost, 1 when some was (listed), 2 could not run.\n"
"                        When nothing was lost, the origin's record of the\n"
"                        set is removed (JSON: origin_record_removed): the\n"
"                        origin may then be served without the set.  Never\n"
"                        beside a daemon that may write ORIGIN (its lock;\n"
"                        exit 2, naming the daemon).\n"
"                        After the cache was abandoned at run time, only\n"
"                        versions written after a restart are written back;\n"
"                        the sectors lost then are listed as lost, but for\n"
"                        those a drain cut short left proven in the state\n"
"                        file: as the next serve would, salvage reads them\n"
"                        back from the abandoned device, writes those that\n"
"                        match their CRC to ORIGIN, flushes it, and only\n"
"                        then rewrites the state file without them and\n"
"                        without proofs (JSON: recovered_lost_bytes,\n"
"                        unrecoverable_proven_bytes); those a state file\n"
"                        with no room for proofs marks, it writes back\n"
"                        from the log, as serve would, when their versions\n"
"                        give the digest recorded (JSON:\n"
"                        recovered_marked_bytes, marked_blocks_not_matching),\n"
"                        and rewrites the state file without marks (exit 2\n"
"                        if it cannot: give its file system room).  The\n"
"                        state file used is named in the result.  An\n"
"                        older copy of the cache device than its sequence\n"
"                        record says, or than the set's stop record (kept\n"
"                        with the origin records) says it reached at its\n"
"                        last clean stop or while last served (or an\n"
"                        unusable record) is refused\n"
"                        as serve refuses it, naming the device and both\n"
"                        chunk sequences, exit 2, nothing written: its\n"
"                        dirty data is older than the origin's.  So is\n"
"                        another origin (its identity, as serve's) and an\n"
"                        origin modified since the cache's clean stop (a\n"
"                        file's time, a block device's write count), and\n"
"                        an origin that differs from\n"
"                        a sample of the cache's clean blocks (see\n"
"                        --origin-check-blocks): refused naming the origin\n"
"                        and the first block that differs, nothing written\n"
"  --accept-older-cache  with --salvage: salvage such a copy anyway (right\n"
"                        only when the origin was restored to the same\n"
"                        point with it); the records are not changed\n"
"  --adopt-origin        with --salvage: salvage to an origin of another\n"
"                        identity (an exact copy of the cache's; its size\n"
"                        must match), or to an origin modified since the\n"
"                        clean stop (the cache's dirty data then goes\n"
"                        over those writes), or to an origin that differs\n"
"                        from the cache's clean blocks, as serve\n"
"                        --adopt-origin; the cache is not changed (no block\n"
"                        is dropped from it)\n"
"  --origin-check-blocks N\n"
"                        with --salvage: before anything\n"
"                        is written, read N of the cache's clean blocks\n"
"                        (default 32, spread over the cache) and the same\n"
"                        blocks of ORIGIN, as serve's start does, and refuse\n"
"                        if any differs: ORIGIN was written while no daemon\n"
"                        served it, or is not the cache's origin (an NBD\n"
"                        export replaced by a blank one or another volume's\n"
"                        under the same name), and the dirty data would go\n"
"                        to the wrong place.  0: nothing compared.  A\n"
"                        sample: a change to blocks it did not read is not\n"
"                        seen.  Blocks whose versions a damaged chunk of\n"
"                        the log may have replaced are not compared\n"
"  --state-file PATH     the record of an abandoned cache, if serve was given\n"
"                        --state-file (default: as serve's); the sequence\n"
"                        record is the one beside it.  Without it the\n"
"                        log from before the abandonment would be trusted,\n"
"                        and --salvage could write its older versions over\n"
"                        the origin's newer data\n"
"  --json                print the result as one JSON object\n"
"  --progress            show progress on stderr (reading the log, then the\n"
"                        data checked or written back) also when stderr is\n"
"                        not a terminal; on a terminal it is always shown\n"
"  --help, -h            this text\n"
"\n"
"Exit status: 0 clean, 1 problems found (each listed), 2 could not run.\n"
"Entries of chunks that never fully reached the device before a crash were\n"
"never flushed; recovery ignores them, and they are reported, not counted\n"
"as problems.  After a clean stop the superblocks record how far the log\n"
"was durable and how many chunks it holds: then any chunk summary that\n"
"fails, or a log that does not match the record, is damage.\n";

static const char dump_help[] =
"Usage: tiercache dump --cache DEV[,DEV...] [--blocks] [--state-file PATH]\n"
"\n"
"Print a cache set's layout for debugging: the superblock, the groups of\n"
"the log from oldest to newest, every segment in use (state, sequence,\n"
"fill, live sectors, chunks), and with --blocks every cached block with\n"
"its valid and dirty sectors and its fragments.  The sequence record beside\n"
"the state file is compared with the log: an older copy of the cache device\n"
"(its log older than the record says was durable, on the set or on one\n"
"device) or an unusable record is\n"
"said in capitals (serve and check --salvage refuse it).\n"
"\n"
"  --cache DEV[,DEV...]  the devices of the set\n"
"  --blocks              also list every cached block\n"
"  --state-file PATH     the record of an abandoned cache, if serve was given\n"
"                        --state-file (default: as serve's); the sequence\n"
"                        record is the one beside it\n"
"  --help, -h            this text\n";

/* log_marks: check --salvage, which writes back what a state file marks
 * (abandon.c, "Resuming the drain from the log"), as a read-write start
 * would: the marks loaded, and the log replayed for them. */
static struct cache *open_set(char *list, const char *origin, const char *state_file,
                              bool log_marks, const char **err_prefix, struct tc_reactor *r,
                              const char ***paths_out)
{
    unsigned n;
    const char **paths = cli_split_list("--cache", list, 32, &n);
    *paths_out = paths;
    char err[1024];
    /* stat() first (no FIFO blocks an open); then the devices and the set
     * are claimed shared: a set a daemon is using is refused (io/claim.c). */
    if (claim_check_paths(origin, paths, err, sizeof err) < 0)
        tc_die(2, "%s: %s", *err_prefix, err);
    claim_set_dir(cli_run_dir());
    if (reactor_init(r, 256) < 0)
        tc_die(2, "io_uring: %m");
    struct tc_volume_config cfg;
    tc_volume_config_defaults(&cfg);
    cfg.state_file = state_file;
    cfg.offline_log_marks = log_marks;
    struct cache *c = cache_open_offline(r, paths, &cfg, err, sizeof err);
    if (c == NULL)
        tc_die(2, "%s: %s", *err_prefix, err);
    return c;
}

/* A salvage refused before anything was written: says so, closes what
 * salvage() opened, and gives its exit status. */
static int refuse_salvage(struct cache *c, struct tc_dev *o, struct claim_set *claim,
                          struct seqrec_look *look, const char *why, const char *more)
{
    fprintf(stderr, "tiercache: check --salvage: %s%s: nothing written\n", why, more);
    seqrec_look_free(look);
    dev_close(o);
    claim_set_release(claim);
    cache_close_offline(c);
    return 2;
}

/* check --salvage: the origin must be the one the cache was formatted for
 * (its data is written there), as serve's start checks it: its size, its
 * identity (another, a copy: --adopt-origin, as serve's), and a file's
 * modification time or a block device's write count since the clean stop
 * (written while no daemon served it: --adopt-origin too, the cache's
 * dirty data then wins; engine/originstop.c), and after a clean stop a
 * sample of the cache's clean blocks compared with it, which is all that
 * sees an NBD export replaced (a blank one, another volume's) behind the
 * same name (--origin-check-blocks N, as serve's; --adopt-origin salvages
 * anyway).
 * Unlike serve, salvage records nothing: an adopted identity is not
 * written to the superblock. */
static int salvage_first_write(struct tc_dev *d, void *ctx)
{
    const struct cache *c = ctx;
    int e = originrec_writer_write(d, c->set_uuid);
    if (e < 0)
        tc_error("origin %s: cannot record the salvage as its last writer (%s): its writes fail "
                 "(a cache set that stopped cleanly before would not know that the origin was "
                 "written)", d->name, strerror(-e));
    return e;
}

static int salvage(struct cache *c, struct tc_reactor *r, const char *const *paths,
                   const char *state_file, const char *origin, bool json, bool progress,
                   bool accept_older, bool adopt, unsigned check_blocks)
{
    char err[1024];
    struct tc_dev *o = dev_open_as(r, origin, "origin", false, err, sizeof err);
    if (o == NULL) {
        cache_close_offline(c);
        tc_die(2, "check --salvage: %s", err);
    }
    /* Not beside a daemon that may write the origin (io/claim.c,
     * claim_origin_lock(): a local origin is claimed anyway, this keeps an
     * NBD export's): its writes and the salvage's older dirty data would
     * race. */
    struct claim_set *claim = NULL;
    if (claim_set_enabled() &&
        (claim = claim_origin_lock(dev_record_key(o), origin, true, err, sizeof err)) == NULL) {
        dev_close(o);
        cache_close_offline(c);
        tc_die(2, "check --salvage: %s: nothing written", err);
    }
    /* The salvage's first write makes it the origin's last writer
     * (io/originrec.c): another set that stopped cleanly refuses the
     * origin it wrote. */
    o->first_write = salvage_first_write;
    o->first_write_ctx = c;
    const struct tc_superblock *sb = &c->devs[0].sb;
    uint64_t osize = tc_round_down(o->size, TC_SECTOR);
    bool same_id = dev_identity_matches(o, sb->origin_id, TC_ORIGIN_ID_LEN - 1) != DEV_ID_OTHER;
    if (osize != sb->origin_size || (!same_id && !adopt)) {
        fprintf(stderr, "tiercache: check --salvage: the cache on %s was formatted for origin "
                "'%s' (%s, %llu bytes), not for '%s' (%s, %llu bytes)%s: nothing written\n",
                c->devs[0].dev->name, sb->origin_path, sb->origin_id,
                (unsigned long long)sb->origin_size, origin, o->identity,
                (unsigned long long)osize,
                osize == sb->origin_size ? "; if this origin is an exact copy of that one, "
                                           "salvage with --adopt-origin" : "");
        dev_close(o);
        claim_set_release(claim);
        cache_close_offline(c);
        return 2;
    }
    if (!same_id)
        fprintf(stderr, "tiercache: check --salvage: the cache was formatted for origin '%s' "
                "(%s), this is '%s' (%s): salvaged to it as a copy of it (--adopt-origin; "
                "nothing recorded)\n", sb->origin_path, sb->origin_id, origin, o->identity);
    /* An older copy of the cache device (a restored backup) holds dirty
     * data older than what the origin received since: refused as serve
     * refuses it (engine/seqrec.c), before anything is written.  A damaged
     * log may have lost its newest chunks: after a clean stop its record
     * still names them, but after a crash the current device may look
     * older too, which the message says. */
    struct seqrec_look look;
    seqrec_look(c, &look);
    static const struct seqrec_words salvage_words = {
        .who = "the daemon serving it",
        .harm = "salvaging it would write its older dirty data over newer data of the origin",
        .way_out = "salvage with --accept-older-cache",
        .way_out_unusable = "salvage with --accept-older-cache (the record is left as it is)",
        .way_out_stop = "salvage with --accept-older-cache (the stop record is left as it is)",
        .way_out_elsewhere = "salvage with --accept-older-cache (nothing is recorded)",
    };
    char refusal[2048];
    if (seqrec_refusal(&look, &salvage_words, refusal, sizeof refusal) < 0) {
        if (!accept_older)
            return refuse_salvage(c, o, claim, &look, refusal,
                                  c->damage ? ".  The log is damaged too: if its newest chunks "
                                              "are among the damaged places, this may be the "
                                              "current device, which --accept-older-cache "
                                              "salvages" : "");
        if (look.verdict == SEQREC_OLDER)
            fprintf(stderr, "tiercache: check --salvage: %s: %s holds an older "
                    "copy of its log (newest chunk %llu, chunk %llu recorded in %s, written "
                    "%s): salvaged anyway (--accept-older-cache)\n", look.devs,
                    look.older_dev >= 0 ? "the device" : "the cache device",
                    (unsigned long long)look.found, (unsigned long long)look.recorded,
                    look.path, look.when);
        else if (look.verdict == SEQREC_ELSEWHERE)
            fprintf(stderr, "tiercache: check --salvage: the set last kept its sequence record "
                    "at another place (%s), but %s: %s: not checked (--accept-older-cache)\n",
                    look.place, look.given, look.why);
        else
            fprintf(stderr, "tiercache: check --salvage: sequence record %s is unusable (%s): "
                    "not checked (--accept-older-cache)\n", look.path, look.why);
    }
    /* Since a salvage before this one wrote the dirty data there: judged
     * by that salvage, whose own writes changed the origin after the
     * clean stop (and are not what the time check below is for). */
    int salvaged = same_id ? cache_origin_salvage_changed(c, o, adopt, err, sizeof err) : 0;
    if (salvaged < 0)
        return refuse_salvage(c, o, claim, &look, err, "");
    /* After the older copy: its clean stop recorded an older time, and
     * the daemon's writes since are not what the time check is for
     * (--accept-older-cache goes with --adopt-origin then, as for serve). */
    if (same_id && !salvaged && cache_origin_changed(c, o, false, err, sizeof err) < 0) {
        if (!adopt)
            return refuse_salvage(c, o, claim, &look, err, "");
        fprintf(stderr, "tiercache: check --salvage: origin %s was modified after the "
                "cache's clean stop: salvaged anyway, the cache's dirty data over those "
                "writes (--adopt-origin)\n", origin);
    }
    /* What the records above cannot see (an NBD export replaced by a
     * blank one or another volume's, a file's time put back): the cache's
     * clean copies compared with the origin, as serve's start does, before
     * anything is written.  Nothing in the cache is dropped. */
    char sampled[512];
    if (check_blocks == 0) {
        snprintf(sampled, sizeof sampled, "the cache's clean blocks were not compared with "
                 "the origin (--origin-check-blocks 0)");
    } else if (cache_origin_sample(c, o, check_blocks, false, SAMPLE_AT_SALVAGE, err,
                                   sizeof err) < 0) {
        if (!adopt)
            return refuse_salvage(c, o, claim, &look, err, "");
        fprintf(stderr, "tiercache: check --salvage: origin %s: %llu of %llu clean blocks "
                "compared differ: salvaged anyway, the cache's dirty data written over it "
                "(--adopt-origin)\n", origin, (unsigned long long)c->st.origin_check_differ,
                (unsigned long long)c->st.origin_check_blocks);
        snprintf(sampled, sizeof sampled, "origin %s: %llu of %llu of the cache's clean "
                 "blocks compared with it differ (--adopt-origin)", origin,
                 (unsigned long long)c->st.origin_check_differ,
                 (unsigned long long)c->st.origin_check_blocks);
    } else if (c->st.origin_check_blocks) {
        char un[96] = "";
        if (c->st.origin_check_unread)
            snprintf(un, sizeof un, " (%llu more could not be read)",
                     (unsigned long long)c->st.origin_check_unread);
        snprintf(sampled, sizeof sampled, "origin %s: %llu of the cache's clean blocks "
                 "compared with it: the same%s", origin,
                 (unsigned long long)c->st.origin_check_blocks, un);
    } else {
        snprintf(sampled, sizeof sampled, "the cache's clean blocks were not compared with "
                 "the origin (none can be: none is cached, the cache was abandoned, or the "
                 "log's damage leaves none provably current)");
    }
    /* A drain cut short whose state file marks its lost sectors (it had
     * no room for their proofs): written back from the log's replay, as
     * a read-write start does it, before anything else -- the state file
     * is then written without the marks, and the set opened again
     * without the log below the abandonment, for the salvage proper. */
    uint64_t marks_marked = 0, marks_written = 0, marks_mismatched = 0;
    if (c->ab.log_pass) {
        if (progress)
            fprintf(stderr, "writing back the lost sectors the state file marks...\n");
        int m = abandon_log_marks(c, o, err, sizeof err);
        marks_marked = c->ab.marks_marked;
        marks_written = c->ab.marks_written;
        marks_mismatched = c->ab.marks_mismatched_blocks;
        if (m < 0) {
            fprintf(stderr, "tiercache: check --salvage: %s; nothing else written\n", err);
            seqrec_look_free(&look);
            dev_close(o);
            claim_set_release(claim);
            cache_close_offline(c);
            return 2;
        }
        cache_close_offline(c);
        struct tc_volume_config cfg;
        tc_volume_config_defaults(&cfg);
        cfg.state_file = state_file;
        c = cache_open_offline(r, paths, &cfg, err, sizeof err);
        if (c == NULL) {
            fprintf(stderr, "tiercache: check --salvage: after writing back the %llu marked "
                    "sectors: %s\n", (unsigned long long)marks_written, err);
            seqrec_look_free(&look);
            dev_close(o);
            claim_set_release(claim);
            return 2;
        }
        o->first_write_ctx = c;     /* the set opened again names the writer */
    }
    if (!json && c->damage)
        fprintf(stderr, "%s", c->damage);
    struct salvage_result res;
    int rc = cache_salvage(c, o, &res, progress, err, sizeof err);
    /* Done: the origin holds the set's dirty data now, and may be served
     * and written without the set from here on.  The set's stop record
     * says so, with the origin's stamp (engine/originstop.c): a later
     * start or salvage that finds the origin written since is refused. */
    char marked[4400] = "";
    bool origin_record_removed = false;
    if (rc == 0 && same_id) {
        struct originrec_stamp stamp;
        origin_stamp(o, &stamp);
        struct originrec_writer *w = tc_xcalloc(1, sizeof *w);
        const char *token = NULL;
        if (originrec_writer_read(o, w) == 0)
            token = w->found ? w->token : ORIGINREC_TOKEN_NONE;
        int e = originrec_stop_write_salvaged(c->set_uuid, look.found, &stamp, token);
        free(w);
        if (e < 0)
            snprintf(marked, sizeof marked, "could not record the salvage in the set's stop "
                     "record (%s): a start of the set would not know it; if the origin is "
                     "written without the set, reformat the set first", strerror(-e));
        /* Nothing lost, and a later start of the set can tell the origin
         * was written since (the stop record's stamp and writer token):
         * the origin's record of the set goes, and the origin may be
         * served without it (io/originrec.c). */
        if (e == 0 && token && res.sectors_lost == 0) {
            e = originrec_remove(o, c->set_uuid);
            if (e < 0)
                snprintf(marked, sizeof marked, "could not remove the origin's record of the "
                         "set (%s): serving the origin without the set stays refused until it "
                         "is removed", strerror(-e));
            else
                origin_record_removed = true;
        }
    }
    char a[32], b[32], l[32];
    if (json) {
        struct tc_json j;
        json_init(&j, true);
        json_begin_object(&j, NULL);
        json_bool(&j, "complete", rc == 0);
        json_bool(&j, "salvage_recorded", rc == 0 && same_id && !marked[0]);
        json_bool(&j, "origin_record_removed", origin_record_removed);
        if (rc)
            json_string(&j, "error", err);
        json_uint(&j, "damaged_places", res.damaged);
        json_uint(&j, "damaged_places_before_abandonment", res.damaged_before_abandon);
        json_uint(&j, "dirty_bytes", res.dirty_sectors * TC_SECTOR);
        json_uint(&j, "blocks_written", res.blocks_written);
        json_uint(&j, "bytes_written", res.bytes_written);
        json_uint(&j, "lost_bytes", res.sectors_lost * TC_SECTOR);
        json_uint(&j, "origin_check_blocks", c->st.origin_check_blocks);
        json_uint(&j, "origin_check_differ", c->st.origin_check_differ);
        json_uint(&j, "recovered_lost_bytes", res.recovered_lost_sectors * TC_SECTOR);
        json_uint(&j, "unrecoverable_proven_bytes", res.unrecoverable_proven_sectors * TC_SECTOR);
        json_uint(&j, "marked_lost_bytes", marks_marked * TC_SECTOR);
        json_uint(&j, "recovered_marked_bytes", marks_written * TC_SECTOR);
        json_uint(&j, "marked_blocks_not_matching", marks_mismatched);
        json_uint(&j, "abandoned_seq", res.abandoned_seq);
        json_string(&j, "state_file", res.state_file ? res.state_file : "");
        json_string(&j, "sequence_record", look.path);
        json_string(&j, "sequence_record_found", seqrec_verdict_name(look.verdict));
        json_begin_array(&j, "lost");
        for (unsigned i = 0; i < res.nlost; i++)
            json_string(&j, NULL, res.lost[i]);
        json_end_array(&j);
        json_end_object(&j);
        printf("%s\n", j.buf);
        json_free(&j);
    } else {
        printf("salvage: %s\n", sampled);
        for (unsigned i = 0; i < res.nlost; i++)
            printf("lost: %s\n", res.lost[i]);
        if (res.abandoned_seq)
            printf("salvage: the cache was abandoned at run time (state file %s): its log "
                   "below sequence %llu is not trusted and nothing of it was written back%s; "
                   "the sectors lost then and not written again since are listed as lost\n",
                   res.state_file, (unsigned long long)res.abandoned_seq,
                   res.recovered_lost_sectors ? " but the sectors proven below" : "");
        if (res.recovered_lost_sectors || res.unrecoverable_proven_sectors) {
            char rz[32];
            printf("salvage: resumed the drain cut short at the abandonment: %s of lost data "
                   "(%llu sectors) read back from the abandoned device, matching the CRCs "
                   "the state file recorded, written back to %s and flushed, and no longer "
                   "lost (the state file rewritten); %llu sectors whose proof failed stay "
                   "lost\n", tc_format_size(res.recovered_lost_sectors * TC_SECTOR, rz, sizeof rz),
                   (unsigned long long)res.recovered_lost_sectors, origin,
                   (unsigned long long)res.unrecoverable_proven_sectors);
        }
        if (marks_marked) {
            char rz[32];
            printf("salvage: resumed the drain cut short at the abandonment from the log: %s "
                   "of lost data (%llu of the %llu sectors the state file marked) found in "
                   "the log's replay, matching the digest the state file recorded, written "
                   "back to %s and flushed, and no longer lost (the state file rewritten "
                   "without marks); %llu blocks found in another version stay lost\n",
                   tc_format_size(marks_written * TC_SECTOR, rz, sizeof rz),
                   (unsigned long long)marks_written, (unsigned long long)marks_marked,
                   origin, (unsigned long long)marks_mismatched);
        }
        if (!res.abandoned_seq)
            printf("salvage: no abandonment recorded (state file %s): if the cache was "
                   "abandoned at run time with another state file, name it with "
                   "--state-file before salvaging\n", res.state_file ? res.state_file : "none");
        printf("salvage: %llu damaged place%s in the log; of %s dirty, %s in %llu blocks written "
               "back to %s, %llu sectors (%s) lost\n", (unsigned long long)res.damaged,
               res.damaged == 1 ? "" : "s", tc_format_size(res.dirty_sectors * TC_SECTOR, a, sizeof a),
               tc_format_size(res.bytes_written, b, sizeof b),
               (unsigned long long)res.blocks_written, origin,
               (unsigned long long)res.sectors_lost,
               tc_format_size(res.sectors_lost * TC_SECTOR, l, sizeof l));
        if (res.damaged_before_abandon)
            printf("salvage: of those damaged places, %llu from before the cache was "
                   "abandoned: nothing there is trusted or written back anyway\n",
                   (unsigned long long)res.damaged_before_abandon);
        if (res.damaged > res.damaged_before_abandon)
            printf("salvage: dirty data held only by the damaged chunks cannot be named: it is "
                   "lost too\n");
        if (rc == 0)
            printf("salvage: done; the cache can be reformatted ('tiercache format --force "
                   "--discard-dirty')%s%s\n", same_id && !marked[0]
                       ? "; the cache still holds as dirty what was written back, and serve "
                         "and check --salvage refuse it once the origin is written without it"
                       : "",
                   origin_record_removed ? "; the origin's record of the set is removed: the "
                                           "origin may be served without the set" : "");
    }
    if (marked[0])
        fprintf(stderr, "tiercache: check --salvage: %s\n", marked);
    int status = rc || marked[0] ? 2 : res.sectors_lost ? 1 : 0;
    if (rc)
        fprintf(stderr, "tiercache: check --salvage: %s; what was written before stays\n", err);
    salvage_result_free(&res);
    seqrec_look_free(&look);
    dev_close(o);
    claim_set_release(claim);
    cache_close_offline(c);
    return status;
}

int cmd_check(int argc, char **argv)
{
    static const struct option opts[] = {
        { "cache", required_argument, NULL, 'c' },
        { "origin", required_argument, NULL, 'o' },
        { "salvage", no_argument, NULL, 's' },
        { "json", no_argument, NULL, 'j' },
        { "progress", no_argument, NULL, 'p' },
        { "state-file", required_argument, NULL, 'f' },
        { "accept-older-cache", no_argument, NULL, 'A' },
        { "adopt-origin", no_argument, NULL, 'O' },
        { "origin-check-blocks", required_argument, NULL, 'B' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    char *caches = NULL;
    const char *origin = NULL, *state_file = NULL;
    bool json = false, salvage_mode = false, force_progress = false, accept_older = false;
    bool adopt = false, check_blocks_set = false;
    struct tc_volume_config defaults;
    tc_volume_config_defaults(&defaults);
    unsigned check_blocks = defaults.origin_check_blocks;
    uint64_t v;
    char perr[256];
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (opt) {
        case 'c': caches = optarg; break;
        case 'o': origin = optarg; break;
        case 's': salvage_mode = true; break;
        case 'j': json = true; break;
        case 'p': force_progress = true; break;
        case 'f': state_file = optarg; break;
        case 'A': accept_older = true; break;
        case 'O': adopt = true; break;
        case 'B':
            if (tc_parse_uint("--origin-check-blocks", optarg, 0, 65536, &v, perr, sizeof perr))
                tc_die(2, "check: %s", perr);
            check_blocks = (unsigned)v;
            check_blocks_set = true;
            break;
        case 'h': cli_print(check_help); return 0;
        default: fprintf(stderr, "Try 'tiercache check --help'.\n"); return 2;
        }
    }
    if (optind < argc)
        tc_die(2, "check: unexpected argument '%s'", argv[optind]);
    if (caches == NULL)
        tc_die(2, "check: --cache is required (try --help)");
    if (accept_older && !salvage_mode)
        tc_die(2, "check: --accept-older-cache goes with --salvage");
    if (adopt && !salvage_mode)
        tc_die(2, "check: --adopt-origin goes with --salvage");
    if (check_blocks_set && !salvage_mode)
        tc_die(2, "check: --origin-check-blocks goes with --salvage");
    if (salvage_mode && origin == NULL)
        tc_die(2, "check --salvage: --origin is required (the dirty data is written there)");
    tc_log_set_level(TC_LOG_ERROR);
    /* As flush shows it: on a terminal, or asked for (a log, a pipe to a
     * progress bar); always on stderr, so --json output stays clean. */
    bool progress = force_progress || (!json && isatty(2));
    struct tc_reactor r;
    const char *prefix = "check";
    const char **paths;
    uint64_t t0 = tc_now_ns();
    if (progress)
        fprintf(stderr, "reading the cache log and rebuilding the index...\n");
    struct cache *c = open_set(caches, origin, state_file, salvage_mode, &prefix, &r, &paths);
    if (progress)
        fprintf(stderr, "cache log read in %.1f s\n", (double)(tc_now_ns() - t0) / 1e9);
    if (salvage_mode) {
        int st = salvage(c, &r, paths, state_file, origin, json, progress, accept_older, adopt,
                         check_blocks);
        reactor_fini(&r);
        free(paths);
        return st;
    }
    struct check_result res;
    cache_check(c, &res, progress);
    if (origin) {
        char err[512];
        struct tc_dev *o = dev_open_as(&r, origin, "origin", true, err, sizeof err);
        const struct tc_superblock *sb = &c->devs[0].sb;
        if (o == NULL) {
            cache_close_offline(c);
            tc_die(2, "check: %s", err);
        }
        if (tc_round_down(o->size, TC_SECTOR) != sb->origin_size ||
            dev_identity_matches(o, sb->origin_id, TC_ORIGIN_ID_LEN - 1) == DEV_ID_OTHER) {
            char *s = NULL;
            if (asprintf(&s, "origin: the cache was formatted for '%s' (%s, %llu bytes), not "
                         "for '%s' (%s, %llu bytes)", sb->origin_path, sb->origin_id,
                         (unsigned long long)sb->origin_size, origin, o->identity,
                         (unsigned long long)tc_round_down(o->size, TC_SECTOR)) > 0) {
                res.problems = realloc(res.problems, (res.nproblems + 1) * sizeof(char *));
                res.problems[res.nproblems++] = s;
            }
        }
        dev_close(o);
    }
    int status = res.nproblems ? 1 : 0;
    if (json) {
        struct tc_json j;
        json_init(&j, true);
        json_begin_object(&j, NULL);
        json_bool(&j, "clean", res.nproblems == 0);
        json_uint(&j, "blocks", res.blocks);
        json_uint(&j, "fragments", res.fragments);
        json_uint(&j, "dirty_bytes", res.dirty_bytes);
        json_uint(&j, "data_checked_bytes", res.data_checked_bytes);
        json_uint(&j, "damaged_clean_bytes", res.damaged_clean_sectors * TC_SECTOR);
        json_uint(&j, "lost_dirty_bytes", res.lost_dirty_sectors * TC_SECTOR);
        json_uint(&j, "recoverable_lost_blocks", res.recoverable_blocks);
        json_uint(&j, "recoverable_lost_bytes", res.recoverable_sectors * TC_SECTOR);
        json_uint(&j, "unrecoverable_proven_bytes", res.unrecoverable_proven_sectors * TC_SECTOR);
        json_uint(&j, "marked_lost_bytes", res.marked_sectors * TC_SECTOR);
        json_uint(&j, "unflushed_entries_ignored", res.unflushed_entries);
        json_uint(&j, "groups", res.groups);
        json_uint(&j, "segments", res.segments);
        json_uint(&j, "segments_free", res.segments_free);
        json_uint(&j, "survey_reads", res.survey_reads);
        json_uint(&j, "survey_first_headers", res.survey_first_headers);
        json_uint(&j, "survey_live_matched", res.survey_live_matched);
        json_string(&j, "sequence_record", res.seqrec_path);
        json_string(&j, "sequence_record_found", res.seqrec_found);
        json_uint(&j, "sequence_record_chunk", res.seqrec_chunk);
        json_uint(&j, "newest_chunk", res.newest_chunk);
        json_int(&j, "sequence_record_device", res.seqrec_device);
        json_bool(&j, "clean_stop_recorded", res.stop_recorded);
        if (res.stop_recorded) {
            json_uint(&j, "clean_stop_chunk", res.stop_chunk_seq);
            json_uint(&j, "clean_stop_chunks", res.stop_chunks);
            json_bool(&j, "checkpoint", res.checkpoint);
            json_bool(&j, "checkpoint_verified", res.checkpoint_verified);
        }
        json_uint(&j, "running_checkpoints", res.run_ckpts);
        json_uint(&j, "running_checkpoints_usable", res.run_ckpts_usable);
        json_uint(&j, "running_checkpoint_newest", res.run_ckpt_newest);
        json_bool(&j, "running_checkpoint_compared", res.run_ckpt_compared);
        json_bool(&j, "running_checkpoint_verified", res.run_ckpt_verified);
        json_begin_array(&j, "problems");
        for (unsigned i = 0; i < res.nproblems; i++)
            json_string(&j, NULL, res.problems[i]);
        json_end_array(&j);
        json_end_object(&j);
        printf("%s\n", j.buf);
        json_free(&j);
    } else {
        char a[32], b[32];
        printf("%llu blocks in %llu fragments, %s dirty; %s of cached data checked\n",
               (unsigned long long)res.blocks, (unsigned long long)res.fragments,
               tc_format_size(res.dirty_bytes, a, sizeof a),
               tc_format_size(res.data_checked_bytes, b, sizeof b));
        if (res.stop_recorded)
            printf("clean stop recorded in the superblock: the log durable up to chunk %llu, "
                   "%llu chunks in live groups\n", (unsigned long long)res.stop_chunk_seq,
                   (unsigned long long)res.stop_chunks);
        if (res.checkpoint_verified)
            printf("checkpoint: the same as the full scan of the log\n");
        if (res.run_ckpts)
            printf("running checkpoints: %u named, %u usable%s\n", res.run_ckpts,
                   res.run_ckpts_usable,
                   res.run_ckpt_verified ? "; the newest the same as the full scan of the log"
                   : res.run_ckpt_compared ? ""
                   : res.run_ckpts_usable ? "; the newest not compared (entries were written after it)"
                                          : "");
        /* An older log, an unusable record or one the set keeps elsewhere
         * is a problem (listed below). */
        if (strcmp(res.seqrec_found, "checked") == 0)
            printf("sequence record %s: the log reaches chunk %llu, at least the %llu "
                   "recorded\n", res.seqrec_path, (unsigned long long)res.newest_chunk,
                   (unsigned long long)res.seqrec_chunk);
        else if (strcmp(res.seqrec_found, "older") != 0 &&
                 strcmp(res.seqrec_found, "unusable") != 0 &&
                 strcmp(res.seqrec_found, "elsewhere") != 0)
            printf("sequence record %s: %s: whether the devices hold an older copy of the "
                   "log is not checked\n", res.seqrec_path,
                   strcmp(res.seqrec_found, "missing") == 0 ? "none"
                   : strcmp(res.seqrec_found, "other set") == 0 ? "of another cache set"
                   : "not all devices in service");
        if (res.unflushed_entries)
            printf("%llu entries of unflushed chunks ignored (written just before a crash; "
                   "never acknowledged as durable)\n", (unsigned long long)res.unflushed_entries);
        if (res.recoverable_sectors || res.unrecoverable_proven_sectors) {
            char lz[32], rz[32];
            printf("abandoned cache: %s of the %s of lost data (%llu blocks) still on the "
                   "abandoned device and proven intact: the next serve (or check --salvage) "
                   "resumes the drain and writes it back; %llu sectors with a proof that "
                   "fails stay lost\n",
                   tc_format_size(res.recoverable_sectors * TC_SECTOR, rz, sizeof rz),
                   tc_format_size(res.lost_dirty_sectors * TC_SECTOR, lz, sizeof lz),
                   (unsigned long long)res.recoverable_blocks,
                   (unsigned long long)res.unrecoverable_proven_sectors);
        }
        if (res.marked_sectors) {
            char mz[32];
            printf("abandoned cache: %s of lost data marked in the state file (it had no room "
                   "for their proofs): the next read-write serve, or --salvage, writes back "
                   "what the log still holds of it, intact\n",
                   tc_format_size(res.marked_sectors * TC_SECTOR, mz, sizeof mz));
        }
        for (unsigned i = 0; i < res.nproblems; i++)
            printf("problem: %s\n", res.problems[i]);
        printf("%s\n", res.nproblems ? "check: problems found" : "check: clean");
    }
    check_result_free(&res);
    cache_close_offline(c);
    reactor_fini(&r);
    free(paths);
    return status;
}

static void print_mask(const struct tc_mask *m, unsigned spb)
{
    for (unsigned s = 0; s < spb; s++)
        putchar(mask_test(m, s) ? '#' : '.');
}

int cmd_dump(int argc, char **argv)
{
    static const struct option opts[] = {
        { "cache", required_argument, NULL, 'c' },
        { "blocks", no_argument, NULL, 'b' },
        { "state-file", required_argument, NULL, 'f' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    char *caches = NULL;
    const char *state_file = NULL;
    bool blocks = false;
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (opt) {
        case 'c': caches = optarg; break;
        case 'b': blocks = true; break;
        case 'f': state_file = optarg; break;
        case 'h': cli_print(dump_help); return 0;
        default: fprintf(stderr, "Try 'tiercache dump --help'.\n"); return 2;
        }
    }
    if (caches == NULL)
        tc_die(2, "dump: --cache is required (try --help)");
    tc_log_set_level(TC_LOG_ERROR);
    struct tc_reactor r;
    const char *prefix = "dump";
    const char **paths;
    struct cache *c = open_set(caches, NULL, state_file, false, &prefix, &r, &paths);
    const struct tc_superblock *sb = &c->devs[0].sb;
    char uuid[37], sz[32];
    tc_uuid_format(sb->set_uuid, uuid);
    printf("set %s: %u device(s), block %u, segment %u, %u segments; origin '%s' (%s, %llu "
           "bytes)\n", uuid, c->ndevs, c->block_size, c->segment_size, c->sp.nsegs,
           sb->origin_path, sb->origin_id, (unsigned long long)sb->origin_size);
    for (unsigned d = 0; d < c->ndevs; d++)
        printf("device %u: %s, segments %u..%u, %s\n", d, c->devs[d].dev->name,
               c->devs[d].first_seg, c->devs[d].first_seg + c->devs[d].nsegs - 1,
               tc_format_size(c->devs[d].dev->size, sz, sizeof sz));
    for (unsigned d = 0; d < c->ndevs; d++)
        if (c->failed_seq[d])
            printf("device %u: failed at run time at log sequence %llu: its entries below it "
                   "are ignored\n", d, (unsigned long long)c->failed_seq[d]);
    if (c->abandoned_seq)
        printf("cache: abandoned at run time at log sequence %llu: entries below it are "
               "ignored\n", (unsigned long long)c->abandoned_seq);
    for (unsigned d = 0; d < c->ndevs; d++)
        if (c->devs[d].sb.flags & TC_SB_CLEAN_STOP)
            printf("device %u: clean stop recorded: newest chunk %llu, tail seq %llu, %llu "
                   "chunks in live groups\n", d,
                   (unsigned long long)c->devs[d].sb.stop_chunk_seq,
                   (unsigned long long)c->devs[d].sb.stop_tail_seq,
                   (unsigned long long)c->devs[d].sb.stop_chunks);
    for (unsigned d = 0; d < c->ndevs; d++) {
        const struct tc_superblock *dsb = &c->devs[d].sb;
        if (!(dsb->flags & TC_SB_CHECKPOINT))
            continue;
        printf("device %u: the record names a checkpoint of %llu bytes (CRC-32C %08x) in "
               "segment%s", d, (unsigned long long)dsb->ckpt_len, dsb->ckpt_crc,
               dsb->ckpt_nsegs == 1 ? "" : "s");
        for (unsigned i = 0; i < dsb->ckpt_nsegs; i++)
            printf(" %u", dsb->ckpt_segs[i]);
        printf("\n");
    }
    /* The sequence record (engine/seqrec.c): an older copy is a finding. */
    struct seqrec_look look;
    seqrec_look(c, &look);
    switch (look.verdict) {
    case SEQREC_CURRENT:
        printf("sequence record %s: chunk %llu durable (written %s); the log reaches chunk "
               "%llu\n", look.path, (unsigned long long)look.recorded, look.when,
               (unsigned long long)look.found);
        break;
    case SEQREC_OLDER:
        if (look.older_dev >= 0)
            printf("sequence record %s: chunk %llu durable on %s (written %s), but its newest "
                   "chunk is %llu: an OLDER COPY of that device (a restored backup or a "
                   "rolled-back snapshot); serve and check --salvage refuse it without "
                   "--accept-older-cache\n", look.path, (unsigned long long)look.recorded,
                   look.devs, look.when, (unsigned long long)look.found);
        else
            printf("sequence record %s: chunk %llu durable (written %s), but the log's newest "
                   "chunk is %llu: an OLDER COPY of the cache device (a restored backup or a "
                   "rolled-back snapshot); serve and check --salvage refuse it without "
                   "--accept-older-cache\n", look.path, (unsigned long long)look.recorded,
                   look.when, (unsigned long long)look.found);
        break;
    case SEQREC_UNUSABLE:
        printf("sequence record %s: UNUSABLE (%s); serve and check --salvage refuse the set "
               "without --accept-older-cache\n", look.path, look.why);
        break;
    case SEQREC_MISSING:
        printf("sequence record %s: none (not checked)\n", look.path);
        break;
    case SEQREC_ELSEWHERE:
        printf("sequence record %s: ELSEWHERE: the set last kept its state file and sequence "
               "record at %s, and as to the one here, %s; serve refuses the set without "
               "--state-file %s (or --adopt-state-file)\n", look.path,
               look.place[0] ? look.place : "a place not recorded", look.why,
               look.place[0] ? look.place : "PLACE");
        break;
    case SEQREC_OTHER_SET:
    case SEQREC_NOT_CHECKED:
        printf("sequence record %s: not checked: %s\n", look.path, look.why);
        break;
    }
    seqrec_look_free(&look);
    printf("log: tail seq %llu, next seq %llu, %u groups, %u segments free, %llu blocks, "
           "%llu dirty sectors\n",
           (unsigned long long)c->lg.tail_seq, (unsigned long long)c->lg.next_seq, c->sp.ngroups,
           c->sp.free_segs, (unsigned long long)c->map.idx.count,
           (unsigned long long)c->map.dirty_sectors);
    for (uint32_t i = 0; i < c->sp.ngroups; i++) {
        struct group *g = group_at(&c->sp, (c->sp.group_tail + i) % c->sp.groups_cap);
        printf("group seq %llu:", (unsigned long long)g->seq);
        for (unsigned k = 0; k < g->nsegs; k++) {
            struct segment *s = space_seg(&c->sp, g->segs[k]);
            printf(" [segment %u: fill %u, live %u, %u chunks]", g->segs[k], s->fill, s->live,
                   s->nchunks);
        }
        printf("\n");
    }
    if (blocks) {
        for (uint32_t id = 0; id < c->map.idx.used; id++) {
            struct centry *e = CE(&c->map.idx, id);
            if (ce_is_free(e))
                continue;
            struct tc_mask v, dm;
            ce_get_masks(&c->map.idx, id, &v, &dm);
            printf("block %llu valid ", (unsigned long long)ce_oblock(e));
            print_mask(&v, c->spb);
            printf(" dirty ");
            print_mask(&dm, c->spb);
            for (uint32_t f = ce_head(&c->map.idx, id); f != NIL; f = frag_next(&c->map.idx, f)) {
                struct tc_mask st;
                frag_stored(&c->map.idx, f, &st);
                printf(" | %u:%u x%u", frag_seg(&c->map.idx, f), frag_off(&c->map.idx, f),
                       mask_count(&st));
                if (frag_mseg(&c->map.idx, f) != NIL)
                    printf(" mirror %u:%u", frag_mseg(&c->map.idx, f), frag_moff(&c->map.idx, f));
            }
            printf("\n");
        }
    }
    cache_close_offline(c);
    reactor_fini(&r);
    free(paths);
    return 0;
}
