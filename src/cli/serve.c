/*
 * tiercache serve: open the volume, export it over NBD, answer the control
 * socket, and shut down in order on SIGTERM or SIGINT:
 *
 *   stop accepting ─► connections finish their requests ─► (--flush-on-stop:
 *   dirty data written back) ─► volume closed (flushed, metadata persisted)
 *   ─► sockets removed ─► exit 0
 *
 * SIGHUP and SIGUSR1 reopen the --log file (logrotate).  Every signal is
 * read from a signalfd on the reactor, so its handling runs in the loop,
 * not in a signal handler.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/daemon.h"
#include "ctl/ctl.h"
#include "engine/budget.h"
#include "io/bufpool.h"
#include "io/claim.h"
#include "io/reactor.h"
#include "nbd/server.h"
#include "policy/policy.h"
#include "tiercache.h"
#include "trace/trace.h"
#include "util/crc32c.h"
#include "util/json.h"
#include "util/log.h"
#include "util/misc.h"
#include "util/parse.h"
#include "util/unixsock.h"
#include "util/memcheck.h"
#include "format/ondisk.h"

static const char serve_help[] =
"Usage: tiercache serve --origin ORIGIN [--cache DEV[,DEV...]] [OPTIONS]\n"
"\n"
"Export ORIGIN over the NBD protocol, cached on the fast devices DEV (made\n"
"with 'tiercache format').  ORIGIN is a file, a block device, or an NBD URI\n"
"(nbd://HOST[:PORT]/EXPORT, nbd+unix:///EXPORT?socket=PATH).  Without\n"
"--cache the origin is served as it is.  The origin and the cache devices\n"
"are claimed while the daemon runs (block devices opened with O_EXCL, files\n"
"locked; a read lock only for a --read-only origin): a second serve, a\n"
"format or a check of them is refused, naming this daemon.  An origin last\n"
"served with a cache set that may hold writes it lacks (stopped with dirty\n"
"data, or killed) is refused without that set, naming it (its record:\n"
"/var/lib/tiercache/origin-HASH.tcorigin for root; for another user in\n"
"$XDG_STATE_HOME/tiercache or ~/.local/state/tiercache, /var/lib/tiercache\n"
"read too; $TIERCACHE_ORIGIN_RECORDS instead when set; see tiercache(8),\n"
"CLAIMS).  A record that cannot be written, or a directory of them that\n"
"cannot be read, refuses the start, naming the directory.\n"
"\n"
"Cache:\n"
"  --cache DEV[,DEV...] the cache devices of one set, in any order\n"
"  --mode MODE          writethrough (default): writes reach the origin before\n"
"                       they are acknowledged, and update the cache;\n"
"                       writeback: writes land in the cache and reach the\n"
"                       origin later (FLUSH makes them durable in the cache);\n"
"                       writearound: writes go to the origin and invalidate\n"
"                       the cache; passthrough: the cache is not used\n"
"  --policy NAME        default, lru, fifo or s3fifo (see tiercache(8))\n"
"  --sequential-cutoff SIZE\n"
"                       a stream of sequential I/O longer than SIZE is not\n"
"                       cached (default 4M; 0 caches everything), unless\n"
"                       it is a read stream over blocks cached or seen\n"
"                       before (a hot stream; see tiercache(8))\n"
"  --fill KIND          what a read miss brings into the cache: block (the\n"
"                       whole cache block, read from the origin in one\n"
"                       request), group (also the other blocks of its\n"
"                       aligned group of 4 that are not cached -- beside\n"
"                       the miss, in the same origin request -- while such\n"
"                       fills are read often enough to pay; a miss just\n"
"                       above a cached block fills ahead to the end of its\n"
"                       aligned span of 16),\n"
"                       sectors (only what was read) or auto (default:\n"
"                       chosen by costs measured on the requests the devices\n"
"                       serve: R = (the origin's cost per request - the\n"
"                       cache's) over the cost of one more cache block (its\n"
"                       transfer from the origin + twice its write to the\n"
"                       cache, the write and the cleaner's work); group when\n"
"                       R >= 2, block when R >= 1.5, else sectors -- a\n"
"                       larger fill pays when it costs little against the\n"
"                       origin request a later miss would cost more than a\n"
"                       hit, so an origin as fast as the cache gets the\n"
"                       sectors read; a choice changes only when R is 25%\n"
"                       past the threshold; until both small and large\n"
"                       origin reads are measured, group for blocks of up\n"
"                       to 256K, sectors above; status shows the estimates\n"
"                       and the choice)\n"
"  --readahead SIZE     keep up to SIZE of a cached sequential read stream\n"
"                       loading ahead of the client, so every cache device\n"
"                       stays busy (default 8M, from 1M to 64M; 0 disables)\n"
"  --dirty-target PCT   writeback: keep dirty data near PCT% of the cache\n"
"                       while clients are busy (default 10)\n"
"  --dirty-high PCT     writeback: above PCT% write back at full speed, and\n"
"                       let client writes add dirty data only as fast as\n"
"                       writeback removes it, down to nothing halfway to\n"
"                       100% (default 50)\n"
"  --dirty-copies N     1 (default) or 2: with 2, dirty data is written to two\n"
"                       cache devices, so one failing while served loses no\n"
"                       acknowledged write (clean data keeps one copy);\n"
"                       needs 2 devices.  Not a set missing a device at\n"
"                       start: that is refused, and no command recovers its\n"
"                       dirty data from the devices left\n"
"  --write-budget RATE[:BURST[:MINBURST]]\n"
"                       wear the cache devices at most RATE bytes/s on\n"
"                       average (token bucket of BURST bytes, default 2 s of\n"
"                       RATE; after running dry, wait for MINBURST, default\n"
"                       BURST/4): promotions and reinsertions beyond it are\n"
"                       skipped, writeback writes go to the origin instead\n"
"  --checkpoint-every SIZE|auto\n"
"                       while serving, write a checkpoint of the index each\n"
"                       time SIZE more bytes have been written to the cache's\n"
"                       log (auto: an eighth of the cache), when the log and\n"
"                       the cleaner are next idle and the origin flushed\n"
"                       (under a steady load, after three looks a second\n"
"                       apart that found them busy, new requests are held\n"
"                       until they are -- the cleaner paused, the origin\n"
"                       flushed if need be --, at most 0.5 s, up to 4 s\n"
"                       after holds given up), so that a start after a\n"
"                       crash or kill -9 reads it and replays only the log\n"
"                       written after it instead of scanning the whole log\n"
"                       (0: none).  Default:\n"
"                       auto when the segments the checkpoints hold (three of\n"
"                       the whole cache at most) are at most 1/64 of the\n"
"                       cache's (with 64K blocks and 4M segments: from about\n"
"                       770 MiB), else none (status: running_checkpoints,\n"
"                       and why)\n"
"  --adopt-origin       accept an origin whose identity differs from the one\n"
"                       the cache was formatted for (a copy of it); its size\n"
"                       must still match.  The new identity is recorded:\n"
"                       later starts need no --adopt-origin.  Also accepts\n"
"                       an origin modified since the cache's clean stop (a\n"
"                       file's time, a block device's count of sectors\n"
"                       written, another run's write recorded as its last\n"
"                       writer: written while no daemon served it with\n"
"                       this cache, refused without the option), the\n"
"                       cache's dirty data kept\n"
"                       over those writes, and an origin found to differ\n"
"                       from the cache's clean copies (--origin-check-\n"
"                       blocks).  Either way every clean sector the cache\n"
"                       holds is then compared with the origin, and each\n"
"                       clean block found different dropped from the\n"
"                       cache; a block with dirty sectors beside clean ones\n"
"                       that differ refuses the start, naming it (salvage\n"
"                       with check --salvage --adopt-origin, then reformat)\n"
"  --origin-check-blocks N\n"
"                       at every start (after a clean stop, a kill or a\n"
"                       crash), read N of the cache's clean blocks (spread\n"
"                       over the cache, in parallel; not counted as hits)\n"
"                       and the same blocks of the origin, and refuse the\n"
"                       start if any differs: the origin was written while\n"
"                       no daemon served it with this cache (mounted or\n"
"                       repaired directly after a crash, an NBD export\n"
"                       served or restored elsewhere, a file's time put\n"
"                       back).  A sample: a change to blocks it did not\n"
"                       read is not seen.\n"
"                       Default: 32; 0: none\n"
"  --accept-older-cache serve a cache whose log is older than its sequence\n"
"                       record says it reached, on the set or on one of\n"
"                       its devices, or than the set's stop record (kept\n"
"                       with the origin records) says it reached at its\n"
"                       last clean stop or while last served (a restored\n"
"                       backup or a rolled-back snapshot of a cache\n"
"                       device or of its folder; refused without it,\n"
"                       naming the device or the record, as\n"
"                       is an unusable record): only right when the origin\n"
"                       was restored to the same point with it.  The\n"
"                       sequence record is then replaced, the stop record\n"
"                       removed\n"
"  --flush-on-stop      on SIGTERM/SIGINT, write all dirty data back to the\n"
"                       origin (progress in the log) before stopping; without\n"
"                       it a clean stop leaves dirty data in the cache (the\n"
"                       log says how much), written back after the next start\n"
"                       -- except dirty data still on a failed cache device\n"
"                       (status: draining), which every stop writes back,\n"
"                       also one that fails at the stop's own writes.  A\n"
"                       flush, detach or mode change draining then ends\n"
"                       first; the stop's flush follows it.\n"
"                       A cache file or file origin removed or replaced\n"
"                       while served is found within a second or at the\n"
"                       next FLUSH: a cache file is failed (its dirty data\n"
"                       drained), the origin refuses writes and FLUSH (EIO);\n"
"                       either makes the stop exit 1.  Likewise a block\n"
"                       device path (node or symlink) naming another device\n"
"                       number, or none at two looks half a second apart\n"
"  --state-file PATH    where the record of an abandoned cache is kept (every\n"
"                       cache device failed: which sectors were lost, and that\n"
"                       the cache's log is stale), and the lost sectors a stop\n"
"                       found no room for in the log; default: next to the set's\n"
"                       device 0 (the first given to format, whatever the\n"
"                       order here) if it is a file (PATH.tcstate), else\n"
"                       /var/lib/tiercache/SET-UUID.tcstate.  Each set needs\n"
"                       its own: a second daemon given the same file is\n"
"                       refused.  Beside it (.tcseq for .tcstate) the\n"
"                       sequence record: how far the log had durably\n"
"                       reached, on the set and on each device, updated\n"
"                       every 2 s and at a stop\n"
"                       (through its spare, .tcseq.spare).  The set's\n"
"                       superblocks name the place it last used: a start\n"
"                       given another one (or none after one) is refused,\n"
"                       since an older copy of the devices could not be\n"
"                       told there; move both files to change it.  Its\n"
"                       directory must exist at the start\n"
"  --adopt-state-file   start with the state file given (or the default)\n"
"                       although the set last kept it and its sequence\n"
"                       record elsewhere, lost (refused while the old\n"
"                       place still holds them): an older copy of the\n"
"                       devices is not caught at this start unless a\n"
"                       record of the set is found here; the set keeps\n"
"                       them here from then on\n"
"\n"
"Origin:\n"
"  --origin-timeout SECONDS\n"
"                       an NBD origin that lost its connection is reconnected\n"
"                       (backoff 0.1 s doubling to 5 s) while requests wait;\n"
"                       after SECONDS without it (default 60; 0: at once)\n"
"                       they fail with EIO, and so do new ones until it is\n"
"                       back; writeback keeps dirty data and retries.  A\n"
"                       connection answering nothing that long is closed:\n"
"                       its reads go again, its flushes fail, its writes\n"
"                       fail in doubt (the newest cached version is written\n"
"                       again, or the range reads EIO until rewritten).\n"
"                       A writeback cache whose log is full of dirty data\n"
"                       fails a client write that needs room with EIO at\n"
"                       once while the origin is offline, and while it\n"
"                       answers but refuses the write-backs that would make\n"
"                       room (each 3 times in a row, and again 1 s later):\n"
"                       with ENOSPC when it said it is out of space, else\n"
"                       EIO; nothing of such a write is stored, FLUSH still\n"
"                       succeeds, and writes succeed again once the origin\n"
"                       takes data (status: cleaner.room_error)\n"
"\n"
"Where clients connect:\n"
"  --socket PATH        listen on this Unix socket (mode --socket-mode);\n"
"                       default RUNDIR/tiercache.sock when --listen is not given\n"
"  --listen [ADDR:]PORT listen on TCP; ADDR defaults to 127.0.0.1, so the\n"
"                       volume is reachable from other hosts only when an\n"
"                       address is given (e.g. 0.0.0.0:10809)\n"
"  --socket-mode MODE   permissions of the Unix socket, octal (default 0600)\n"
"  --export-name NAME   the export's name (default \"\"; \"\" always works too)\n"
"  --description TEXT   free text shown by nbdinfo\n"
"  --read-only          refuse writes, trims and write-zeroes with EPERM; the\n"
"                       origin is opened read-only, a cache's dirty data is\n"
"                       served but not written back\n"
"  --max-connections N  refuse clients beyond N at once (default 256); only\n"
"                       clients that finished their handshake count\n"
"  --handshake-timeout SECONDS\n"
"                       close a connection whose handshake (TLS included) is\n"
"                       not done SECONDS after it connected (default 10)\n"
"  --max-handshakes N   connections still in their handshake (default 64);\n"
"                       one more closes the oldest of them\n"
"  --nbd-threads N      run clients' socket work (receiving, parsing, sending\n"
"                       replies) on N threads of their own, the engine staying\n"
"                       on one (default 0: everything on one thread; TLS\n"
"                       clients and --single always stay there)\n"
"  --max-buffer-memory SIZE\n"
"                       request buffers of all clients together (default\n"
"                       512M, at least 32M); past it, clients wait\n"
"  --max-client-buffer-memory SIZE\n"
"                       buffers of one client, its unread replies included\n"
"                       (default an eighth of --max-buffer-memory); past it,\n"
"                       that client is not read until its replies go\n"
"  --single, -s         serve exactly one client on stdin/stdout (a socket or\n"
"                       pipes), log to stderr, exit 0 once it disconnects:\n"
"                       nbdinfo -- [ tiercache serve --origin IMG -s ];\n"
"                       quiet (warnings and errors only) unless --verbose\n"
"\n"
"With systemd socket activation (LISTEN_FDS, LISTEN_PID) the daemon serves\n"
"on the sockets it is given instead of --socket and --listen; see the\n"
"units tiercache@.socket and tiercache@.service (make install).\n"
"\n"
"TLS (see tiercache(8), TLS):\n"
"  --tls off|on|require off (default); on: clients may use STARTTLS;\n"
"                       require: every client must (nbds:// URIs)\n"
"  --tls-certificates DIR\n"
"                       X.509: DIR/server-cert.pem, DIR/server-key.pem and,\n"
"                       to check client certificates, DIR/ca-cert.pem\n"
"  --tls-verify-peer    require a client certificate signed by DIR/ca-cert.pem\n"
"  --tls-psk FILE       pre-shared keys instead: 'username:hexkey' lines\n"
"                       (psktool -u NAME -p FILE makes one)\n"
"\n"
"Daemon:\n"
"  --foreground, -f     stay in the foreground and log to stderr\n"
"  --control PATH       control socket for status/flush (default: the\n"
"                       socket path with .sock replaced by .ctl); never the\n"
"                       socket path itself\n"
"  --pidfile PATH       write the daemon's process id here\n"
"  --log FILE           log to FILE (default: stderr in the foreground;\n"
"                       RUNDIR/tiercache.log in the background); SIGHUP or\n"
"                       SIGUSR1 reopen it (after logrotate moved it)\n"
"  --trace FILE         record every client request (time, operation, offset,\n"
"                       length, flags, connection) in FILE, 24 bytes each,\n"
"                       for 'tiercache trace-info' and cache sizing; the\n"
"                       format is in tiercache(8), TRACES.  Recording never\n"
"                       slows requests: if FILE cannot keep up, requests\n"
"                       are counted as dropped (status shows it); status\n"
"                       also shows the LRU miss ratio caches of 0.25 to 8\n"
"                       times this one would have had over the last million\n"
"                       requests (sampled)\n"
"  --trace-limit SIZE   the largest FILE (default 1G, at least 256K); then\n"
"                       recording stops, unless --trace-rotate\n"
"  --trace-rotate       at the limit, FILE becomes FILE.1 (replacing it) and\n"
"                       FILE starts again: the newest requests are kept\n"
"  --verbose, -v        log every connection and refused request\n"
"  --help, -h           this text\n"
"\n"
"RUNDIR is /run/tiercache for root, else $XDG_RUNTIME_DIR/tiercache, or\n"
"/tmp/tiercache-UID without XDG_RUNTIME_DIR; it is made mode 0700 and refused\n"
"if another user owns it, if group or others may write in it, or if it is a\n"
"symlink.  No other directory is ever created: the directories of --socket,\n"
"--control, --log and --pidfile must exist.  An existing file at --socket or\n"
"--control is replaced only if it is a socket nobody listens on; the log and\n"
"pid file are never opened through a symlink.  --log, --pidfile and --trace\n"
"may not name the origin, a cache device or a file another daemon locks as\n"
"either; an existing pid file must be empty or hold a process id, an\n"
"existing trace file must be empty or a trace.\n"
"\n"
"SIGTERM or SIGINT stop the daemon in order: it stops accepting clients,\n"
"finishes the requests in flight, flushes the origin, logs how much dirty\n"
"data stays in the cache, and exits 0 (1 if the origin or cache could not\n"
"be flushed, or if client writes still waiting for room in the cache 20 s\n"
"after the stop began were failed with EIO, or if dirty data a failed cache\n"
"device left behind could not be rewritten at the stop and was recorded lost;\n"
"an origin that answers nothing\n"
"for twice --origin-timeout plus 5 s is given up on).  A stop whose origin\n"
"flush failed is not recorded as clean: the next start, as after a crash\n"
"(or the first start of a freshly formatted cache), flushes the origin at\n"
"its first flush.  A tiercache flush under way when the stop closes the\n"
"volume fails (\"the daemon is stopping\"), as does a flush, detach or\n"
"mode sent while it closes; what it had not written back stays in the\n"
"cache.  Control connections that have sent no command are\n"
"closed once the volume is closed.  SIGHUP and SIGUSR1 reopen the log\n"
"file.\n"
"\n"
"Connect with: nbdinfo 'nbd+unix:///?socket=PATH', nbdfuse DIR --unix PATH,\n"
"nbd-client -unix PATH /dev/nbd0, qemu-img info 'nbd:unix:PATH'.\n";

struct serve {
    struct tc_reactor reactor;
    struct tc_volume *vol;
    struct nbd_server nbd;
    struct ctl_server ctl;
    bool have_nbd, have_ctl;
    struct cli_signals sig;
    bool stopping, signalled, flush_on_stop;
    bool cache_unlinked;                /* a cache file lost its name (nbd_stopped) */
    bool origin_gone;                   /* a file origin lost its name (nbd_stopped) */
    int exit_status;
    uint64_t flush_start_ns, flush_logged_ns;  /* --flush-on-stop: start, last line */
    uint64_t started_ns;
    const char *pidfile;
    char ctl_path[4096];
    struct tc_trace_writer *trace;      /* --trace, or NULL */
};

/* ---- status over the control socket ---- */

static uint64_t timeval_micros(struct timeval tv)
{
    return (uint64_t)tv.tv_sec * 1000000u + (uint64_t)tv.tv_usec;
}

static void status_cmd(struct ctl_conn *c, const char *args, void *arg)
{
    struct serve *s = arg;
    (void)args;
    struct tc_json j;
    json_init(&j, false);
    json_begin_object(&j, NULL);
    json_string(&j, "version", TC_VERSION);
    json_uint(&j, "pid", (uint64_t)getpid());
    json_bool(&j, "stopping", s->stopping);
    /* The daemon's CPU time, all threads, since it started: sampled twice
     * around a known load, it gives the CPU cost per request, which other
     * load on the machine does not stretch as it does wall time. */
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) {
        json_micros_as_seconds(&j, "cpu_user_seconds", timeval_micros(ru.ru_utime));
        json_micros_as_seconds(&j, "cpu_system_seconds", timeval_micros(ru.ru_stime));
    }
    json_string(&j, "crc32c_implementation", tc_crc32c_implementation());
    json_begin_object(&j, "volume");
    tc_volume_status_json(s->vol, &j);
    json_end_object(&j);
    if (s->have_nbd)
        nbd_server_status_json(&s->nbd, &j);
    if (s->trace)
        trace_status_json(s->trace, &j);
    json_end_object(&j);
    ctl_write(c, j.buf, j.len);
    ctl_write(c, "\n", 1);
    json_free(&j);
    ctl_end(c);
}

/* ---- flush, detach and mode over the control socket ---- */

/* One long operation driven from a control connection.  The client may
 * go away: the operation still runs to its end. */
struct online {
    struct ctl_conn *conn;
    struct serve *s;
    const char *what;
    uint64_t start_ns;
    uint64_t done_bytes;
};

static void online_progress(void *arg, uint64_t left, uint64_t done)
{
    struct online *o = arg;
    o->done_bytes = done;
    if (ctl_gone(o->conn))
        return;
    double secs = (double)(tc_now_ns() - o->start_ns) / 1e9;
    ctl_printf(o->conn, "progress {\"left_bytes\":%llu,\"done_bytes\":%llu,\"seconds\":%.3f}\n",
               (unsigned long long)left, (unsigned long long)done, secs);
}

static void online_done(void *arg, int err)
{
    struct online *o = arg;
    double secs = (double)(tc_now_ns() - o->start_ns) / 1e9;
    const char *why = tc_volume_op_error(o->s->vol);
    if (err && why[0])
        ctl_printf(o->conn, "error: %s\n", why);
    else if (err)
        ctl_printf(o->conn, "error: %s failed: %s\n", o->what, strerror(-err));
    else
        ctl_printf(o->conn, "done {\"written_bytes\":%llu,\"seconds\":%.3f,\"mode\":\"%s\","
                   "\"lost_bytes\":%llu,\"dirty_bytes\":%llu}\n",
                   (unsigned long long)o->done_bytes, secs,
                   tc_mode_name(tc_volume_mode(o->s->vol)),
                   (unsigned long long)tc_volume_lost_bytes(o->s->vol),
                   (unsigned long long)tc_volume_dirty_bytes(o->s->vol));
    tc_info("%s %s in %.3f s", o->what, err ? "failed" : "done", secs);
    ctl_end(o->conn);
    free(o);
}

static struct online *online_new(struct ctl_conn *c, struct serve *s, const char *what)
{
    struct online *o = tc_xcalloc(1, sizeof *o);
    o->conn = c;
    o->s = s;
    o->what = what;
    o->start_ns = tc_now_ns();
    tc_info("%s requested over the control socket", what);
    return o;
}

static void flush_cmd(struct ctl_conn *c, const char *args, void *arg)
{
    struct serve *s = arg;
    tc_volume_flush_dirty(s->vol, online_progress, online_done, online_new(c, s, "flush"));
}

static void detach_cmd(struct ctl_conn *c, const char *args, void *arg)
{
    struct serve *s = arg;
    tc_volume_detach(s->vol, online_progress, online_done, online_new(c, s, "detach"));
}

static void mode_cmd(struct ctl_conn *c, const char *args, void *arg)
{
    struct serve *s = arg;
    enum tc_mode m;
    if (tc_mode_parse(args, &m) < 0) {
        ctl_printf(c, "error: mode '%s': choose writethrough, writeback, writearound or "
                   "passthrough\n", args);
        ctl_end(c);
        return;
    }
    tc_volume_set_mode(s->vol, m, online_progress, online_done, online_new(c, s, "mode change"));
}

/* tiercache attach: "attach MODE|- [PATH,PATH...]" (the rest of the line
 * after MODE is the device list, so a path may hold spaces, not commas). */
static void attach_cmd(struct ctl_conn *c, const char *args, void *arg)
{
    struct serve *s = arg;
    char modename[32];
    size_t ml = strcspn(args, " ");
    if (ml == 0 || ml >= sizeof modename) {
        ctl_printf(c, "error: attach: expected 'attach MODE|- [DEVICES]'\n");
        ctl_end(c);
        return;
    }
    memcpy(modename, args, ml);
    modename[ml] = '\0';
    enum tc_mode m;
    bool have_mode = strcmp(modename, "-") != 0;
    if (have_mode && tc_mode_parse(modename, &m) < 0) {
        ctl_printf(c, "error: attach: mode '%s': choose writethrough, writeback, writearound "
                   "or passthrough\n", modename);
        ctl_end(c);
        return;
    }
    const char *list = args[ml] ? args + ml + 1 : "";
    char *copy = tc_xstrdup(list);
    const char *paths[TC_MAX_DEVICES + 2] = { NULL };
    unsigned n = 0;
    for (char *save = NULL, *p = strtok_r(copy, ",", &save); p && n <= TC_MAX_DEVICES;
         p = strtok_r(NULL, ",", &save))
        paths[n++] = p;
    tc_volume_attach(s->vol, paths, have_mode ? &m : NULL, online_done,
                     online_new(c, s, "attach"));
    free(copy);     /* tc_volume_attach() copied what it keeps */
}

/* tiercache set: every pair checked, then all applied (or none). */
static void set_cmd(struct ctl_conn *c, const char *args, void *arg)
{
    struct serve *s = arg;
    char err[512];
    if (tc_volume_set_many(s->vol, args, err, sizeof err) < 0) {
        ctl_printf(c, "error: %s\n", err);
    } else {
        tc_info("settings changed: %s", args);
        ctl_printf(c, "%s\n", args);
    }
    ctl_end(c);
}

/* ---- shutdown ---- */

static void volume_closed(void *arg, int err)
{
    struct serve *s = arg;
    if (err)
        s->exit_status = 1;
    tc_info("volume closed%s", err ? " with errors" : "");
    /* What a clean stop leaves behind: an operator stopping a writeback
     * volume (to move the origin, say) must know the origin is not current. */
    uint64_t bytes, blocks, owed_bytes, owed_blocks;
    tc_volume_dirty(s->vol, &bytes, &blocks);
    tc_volume_dirty_owed(s->vol, &owed_bytes, &owed_blocks);
    /* Not yet on the origin: what a failed or removed cache device takes
     * with it.  The rest is written back already; only its clean records
     * wait for room in the log (a start writes it back again). */
    uint64_t unwritten_bytes = bytes - owed_bytes, unwritten_blocks = blocks - owed_blocks;
    char sz[32], usz[32];
    tc_format_size(bytes, sz, sizeof sz);
    tc_format_size(unwritten_bytes, usz, sizeof usz);
    if (s->origin_gone && blocks)
        tc_error("stopped with errors: the origin lost its name while served, or was "
                 "truncated (writes and flushes failed since); %s of dirty data (%llu blocks) stays in the cache, "
                 "and the next start refuses the file now at the origin's path: give the origin "
                 "its name back if it still has one, or pass --adopt-origin to have the dirty "
                 "data written to the file there", sz, (unsigned long long)blocks);
    else if (s->origin_gone)
        tc_error("stopped with errors: the origin lost its name while served, or was "
                 "truncated (writes and flushes failed since); no dirty data in the cache");
    else if (unwritten_blocks && s->cache_unlinked)
        tc_error("stopped %s; %s of dirty data (%llu blocks) could not be written back and "
                 "is lost with the cache device that was removed or replaced while served",
                 err ? "with errors" : "cleanly", usz, (unsigned long long)unwritten_blocks);
    else if (unwritten_blocks && tc_volume_draining(s->vol)) {
        /* Acknowledged data is gone (recorded lost): the exit status says
         * so, as for every stop that leaves lost data behind.  A device
         * failing at the close's own writes (its file system full), after
         * writeback stopped, is drained by the close itself (cache.c,
         * close_drain()); what is left here is what the origin refused,
         * and the close said so (engine/stop-close-enospc-unflushed). */
        s->exit_status = 1;
        tc_error("stopped with errors; %s of dirty data (%llu blocks) could not be written "
                 "back from the failed cache device and is lost until the next start, which "
                 "writes back the sectors a failed device still holds as recorded (their "
                 "checksums); the others read EIO until rewritten", usz,
                 (unsigned long long)unwritten_blocks);
    }
    else if (blocks && unwritten_blocks == 0)
        tc_info("stopped %s; %s of data (%llu blocks) is written back, but its clean records "
                "found no room in the log, which still holds it dirty: the next start writes "
                "it back again", err ? "with errors" : "cleanly", sz,
                (unsigned long long)blocks);
    else if (blocks)
        tc_warn("stopped %s; %s of dirty data (%llu blocks) stays in the cache and is "
                "written back after the next start (the origin alone is not current)",
                err ? "with errors" : "cleanly", sz, (unsigned long long)blocks);
    else
        tc_info("stopped %s; no dirty data in the cache", err ? "with errors" : "cleanly");
    if (s->have_ctl)
        ctl_server_stop(&s->ctl);
    if (s->trace)
        trace_writer_quiesce(s->trace);
    /* The pending signalfd read is the last thing keeping the loop alive. */
    cli_signals_cancel(&s->sig);
    reactor_stop(&s->reactor);
}

static void stop_flush_progress(void *arg, uint64_t left, uint64_t done)
{
    struct serve *s = arg;
    uint64_t now = tc_now_ns();
    if (now - s->flush_logged_ns < 2000000000ull)
        return;                         /* a line every 2 s at most */
    s->flush_logged_ns = now;
    char l[32], d[32];
    tc_info("flush on stop: %s written back, %s dirty left", tc_format_size(done, d, sizeof d),
            tc_format_size(left, l, sizeof l));
}

static void stop_flushed(void *arg, int err)
{
    struct serve *s = arg;
    if (err) {
        /* The dirty data stays in the cache (the close below says how much);
         * the exit status tells the service manager the flush failed. */
        tc_error("flush on stop failed: %s; stopping without it", strerror(-err));
        s->exit_status = 1;
    } else {
        tc_info("flush on stop: done in %.3f s", (double)(tc_now_ns() - s->flush_start_ns) / 1e9);
    }
    tc_info("closing the volume");
    tc_volume_close(s->vol, volume_closed, s);
}

static void nbd_stopped(struct nbd_server *srv)
{
    struct serve *s = container_of(srv, struct serve, nbd);
    /* Dirty data still draining from a failed cache device is written
     * back as with --flush-on-stop: left there, it would be lost (no
     * start trusts that device's log again). */
    bool draining = s->vol && tc_volume_draining(s->vol);
    /* A cache file removed, or replaced (a copy, a backup renamed over
     * it), while served: the daemon's descriptor is all that is left of
     * its log, and the exit ends it.  Its dirty data is written back as
     * with --flush-on-stop; left there, the writes clients were told are
     * durable went with it (what is at the path now is older or nothing,
     * which the next start refuses). */
    char why[1200];
    /* A file origin removed or replaced while served (engine/volume.c):
     * writes and flushes have failed since, and none is tried now -- the
     * file at the path is another, and the one open goes at exit. */
    if (s->vol && tc_volume_origin_gone(s->vol, why, sizeof why)) {
        s->origin_gone = true;
        s->exit_status = 1;
        tc_error("origin %s while this daemon served it: the stop writes nothing back",
                 why);
        tc_info("all clients finished; closing the volume");
        tc_volume_close(s->vol, volume_closed, s);
        return;
    }
    if (s->vol && tc_volume_cache_unlinked(s->vol, why, sizeof why)) {
        s->cache_unlinked = true;
        s->exit_status = 1;
        tc_error("cache device %s while this daemon served it; the next start would not find "
                 "its log under that name (a removed file's log goes when the daemon exits), "
                 "so its dirty data is written back to the origin first, as with "
                 "--flush-on-stop (the next start "
                 "ignores the log of what is at the path now, or refuses it: reformat it "
                 "with 'tiercache format --force --discard-dirty' once the origin is "
                 "current)", why);
    }
    if (s->flush_on_stop || draining || s->cache_unlinked) {
        uint64_t bytes, blocks;
        tc_volume_dirty(s->vol, &bytes, &blocks);
        char sz[32];
        if (draining)
            tc_info("dirty data is still draining from the failed cache device: written back "
                    "before the stop, as with --flush-on-stop");
        tc_info("all clients finished; flush on stop: writing back %s of dirty data (%llu "
                "blocks)", tc_format_size(bytes, sz, sizeof sz), (unsigned long long)blocks);
        s->flush_start_ns = s->flush_logged_ns = tc_now_ns();
        tc_volume_flush_dirty_at_stop(s->vol, stop_flush_progress, stop_flushed, s);
        return;
    }
    tc_info("all clients finished; closing the volume");
    tc_volume_close(s->vol, volume_closed, s);
}

static void begin_shutdown(struct serve *s, const char *why)
{
    if (s->stopping)
        return;
    s->stopping = true;
    tc_info("%s: shutting down", why);
    if (s->vol)
        tc_volume_stopping(s->vol);
    if (s->have_nbd)
        nbd_server_stop(&s->nbd, nbd_stopped);
    else
        nbd_stopped(&s->nbd);
}

/* --single: the one client has gone. */
static void single_finished(struct nbd_server *srv)
{
    begin_shutdown(container_of(srv, struct serve, nbd), "the client disconnected");
}

/* A path option's value: an empty one is bad usage (it would name the
 * current directory, or fall back on a default without a word). */
static const char *path_arg(const char *option, const char *value)
{
    if (value[0] == '\0')
        tc_die(2, "%s: an empty path", option);
    return value;
}

/* SIGTERM or SIGINT. */
static void signal_stop(struct cli_signals *sig, const char *name)
{
    struct serve *s = container_of(sig, struct serve, sig);
    /* A signal while a shutdown runs for another reason (--single: the
     * client left; libnbd then sends SIGTERM) lets it finish. */
    if (s->stopping && s->signalled) {
        /* As a crash would: no exit handlers, no teardown (nor the
         * leak check of a sanitizer build, which would fail on the
         * state of the stop cut short); only the pid file goes. */
        tc_warn("second %s while stopping; exiting at once", name);
        cli_remove_pidfile();
        _exit(1);
    }
    s->signalled = true;
    begin_shutdown(s, name);
}

enum {
    OPT_ORIGIN = 256, OPT_SOCKET, OPT_LISTEN, OPT_SOCKET_MODE, OPT_EXPORT_NAME,
    OPT_DESCRIPTION, OPT_READ_ONLY, OPT_MAX_CONN, OPT_CONTROL, OPT_PIDFILE, OPT_LOG,
    OPT_CACHE, OPT_MODE, OPT_POLICY, OPT_SEQ_CUTOFF, OPT_READAHEAD, OPT_DIRTY_TARGET, OPT_DIRTY_HIGH,
    OPT_ADOPT_ORIGIN, OPT_ACCEPT_OLDER_CACHE, OPT_ADOPT_STATE_FILE, OPT_DIRTY_COPIES, OPT_CKPT_EVERY, OPT_WRITE_BUDGET, OPT_MAX_BUF, OPT_TLS, OPT_TLS_CERTS,
    OPT_TLS_PSK, OPT_TLS_VERIFY, OPT_ORIGIN_TIMEOUT, OPT_FLUSH_ON_STOP, OPT_HS_TIMEOUT,
    OPT_MAX_HS, OPT_MAX_CLIENT_BUF, OPT_STATE_FILE, OPT_FILL, OPT_TRACE, OPT_TRACE_LIMIT,
    OPT_TRACE_ROTATE, OPT_ORIGIN_CHECK, OPT_NBD_THREADS,
};

static const struct option serve_opts[] = {
    { "origin", required_argument, NULL, OPT_ORIGIN },
    { "cache", required_argument, NULL, OPT_CACHE },
    { "mode", required_argument, NULL, OPT_MODE },
    { "policy", required_argument, NULL, OPT_POLICY },
    { "sequential-cutoff", required_argument, NULL, OPT_SEQ_CUTOFF },
    { "readahead", required_argument, NULL, OPT_READAHEAD },
    { "fill", required_argument, NULL, OPT_FILL },
    { "dirty-target", required_argument, NULL, OPT_DIRTY_TARGET },
    { "dirty-high", required_argument, NULL, OPT_DIRTY_HIGH },
    { "adopt-origin", no_argument, NULL, OPT_ADOPT_ORIGIN },
    { "accept-older-cache", no_argument, NULL, OPT_ACCEPT_OLDER_CACHE },
    { "adopt-state-file", no_argument, NULL, OPT_ADOPT_STATE_FILE },
    { "flush-on-stop", no_argument, NULL, OPT_FLUSH_ON_STOP },
    { "state-file", required_argument, NULL, OPT_STATE_FILE },
    { "dirty-copies", required_argument, NULL, OPT_DIRTY_COPIES },
    { "checkpoint-every", required_argument, NULL, OPT_CKPT_EVERY },
    { "write-budget", required_argument, NULL, OPT_WRITE_BUDGET },
    { "origin-timeout", required_argument, NULL, OPT_ORIGIN_TIMEOUT },
    { "origin-check-blocks", required_argument, NULL, OPT_ORIGIN_CHECK },
    { "socket", required_argument, NULL, OPT_SOCKET },
    { "listen", required_argument, NULL, OPT_LISTEN },
    { "socket-mode", required_argument, NULL, OPT_SOCKET_MODE },
    { "export-name", required_argument, NULL, OPT_EXPORT_NAME },
    { "description", required_argument, NULL, OPT_DESCRIPTION },
    { "read-only", no_argument, NULL, OPT_READ_ONLY },
    { "max-connections", required_argument, NULL, OPT_MAX_CONN },
    { "single", no_argument, NULL, 's' },
    { "max-buffer-memory", required_argument, NULL, OPT_MAX_BUF },
    { "max-client-buffer-memory", required_argument, NULL, OPT_MAX_CLIENT_BUF },
    { "handshake-timeout", required_argument, NULL, OPT_HS_TIMEOUT },
    { "max-handshakes", required_argument, NULL, OPT_MAX_HS },
    { "nbd-threads", required_argument, NULL, OPT_NBD_THREADS },
    { "tls", required_argument, NULL, OPT_TLS },
    { "tls-certificates", required_argument, NULL, OPT_TLS_CERTS },
    { "tls-psk", required_argument, NULL, OPT_TLS_PSK },
    { "tls-verify-peer", no_argument, NULL, OPT_TLS_VERIFY },
    { "foreground", no_argument, NULL, 'f' },
    { "control", required_argument, NULL, OPT_CONTROL },
    { "pidfile", required_argument, NULL, OPT_PIDFILE },
    { "log", required_argument, NULL, OPT_LOG },
    { "trace", required_argument, NULL, OPT_TRACE },
    { "trace-limit", required_argument, NULL, OPT_TRACE_LIMIT },
    { "trace-rotate", no_argument, NULL, OPT_TRACE_ROTATE },
    { "verbose", no_argument, NULL, 'v' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
};

int cmd_serve(int argc, char **argv)
{
    struct tc_volume_config vcfg;
    tc_volume_config_defaults(&vcfg);
    struct nbd_server_config ncfg = { .export_name = "", .max_connections = 256,
                                      .socket_mode = 0600,
                                      .max_buffer_memory = 512ull << 20,
                                      .handshake_timeout_ns = 10ull * 1000000000ull,
                                      .max_handshakes = 64 };
    const char *client_buf_arg = NULL;
    bool nbd_threads_set = false;
    const char *control = NULL, *log_path = NULL, *pidfile = NULL;
    bool foreground = false, flush_on_stop = false, verbose = false;
    struct tc_trace_writer_config tcfg = { .limit = 1ull << 30 };
    char err[2048];   /* room for two device paths and a recovery hint */
    uint64_t v;
    int opt;

    tc_log_set_command("serve");
    optind = 1;
    while ((opt = getopt_long(argc, argv, "fvhs", serve_opts, NULL)) != -1) {
        switch (opt) {
        case OPT_ORIGIN: vcfg.origin = path_arg("--origin", optarg); break;
        case OPT_CACHE: {
            unsigned n;
            vcfg.caches = cli_split_list("--cache", optarg, 32, &n);
            if (n == 0)
                tc_die(2, "--cache: no device given");
            break;
        }
        case OPT_MODE:
            if (tc_mode_parse(optarg, &vcfg.mode) < 0)
                tc_die(2, "--mode '%s': choose writethrough, writeback, writearound or "
                       "passthrough", optarg);
            break;
        case OPT_POLICY:
            if (policy_find(optarg) == NULL)
                tc_die(2, "--policy '%s': no such policy (choose from %s)", optarg,
                       policy_names());
            vcfg.policy = optarg;
            break;
        case OPT_SEQ_CUTOFF:
            if (tc_parse_size("--sequential-cutoff", optarg, &vcfg.sequential_cutoff, err,
                              sizeof err) < 0)
                tc_die(2, "%s", err);
            break;
        case OPT_FILL:
            if (strcmp(optarg, "auto") == 0)
                vcfg.fill = TC_FILL_AUTO;
            else if (strcmp(optarg, "block") == 0)
                vcfg.fill = TC_FILL_BLOCK;
            else if (strcmp(optarg, "sectors") == 0)
                vcfg.fill = TC_FILL_SECTORS;
            else if (strcmp(optarg, "group") == 0)
                vcfg.fill = TC_FILL_GROUP;
            else
                tc_die(2, "--fill '%s': choose group, block, sectors or auto", optarg);
            break;
        case OPT_READAHEAD:
            if (tc_parse_size("--readahead", optarg, &vcfg.readahead, err, sizeof err) < 0)
                tc_die(2, "%s", err);
            if (vcfg.readahead > (64u << 20) || (vcfg.readahead && vcfg.readahead < (1u << 20)))
                tc_die(2, "--readahead %s: must be 0 (off) or from 1M to 64M", optarg);
            break;
        case OPT_DIRTY_TARGET:
        case OPT_DIRTY_HIGH: {
            double pct;
            const char *name = opt == OPT_DIRTY_TARGET ? "--dirty-target" : "--dirty-high";
            if (tc_parse_percent(name, optarg, &pct, err, sizeof err) < 0)
                tc_die(2, "%s", err);
            if (opt == OPT_DIRTY_TARGET)
                vcfg.dirty_target = pct / 100;
            else
                vcfg.dirty_high = pct / 100;
            break;
        }
        case OPT_ADOPT_ORIGIN: vcfg.adopt_origin = true; break;
        case OPT_ORIGIN_CHECK:
            if (tc_parse_uint("--origin-check-blocks", optarg, 0, 65536, &v, err, sizeof err))
                tc_die(2, "%s", err);
            vcfg.origin_check_blocks = (unsigned)v;
            break;
        case OPT_ACCEPT_OLDER_CACHE: vcfg.accept_older_cache = true; break;
        case OPT_ADOPT_STATE_FILE: vcfg.adopt_state_file = true; break;
        case OPT_FLUSH_ON_STOP: flush_on_stop = true; break;
        case OPT_STATE_FILE: vcfg.state_file = path_arg("--state-file", optarg); break;
        case OPT_ORIGIN_TIMEOUT:
            if (tc_parse_duration("--origin-timeout", optarg, &vcfg.origin_timeout_ns, err,
                                  sizeof err) < 0)
                tc_die(2, "%s", err);
            if (vcfg.origin_timeout_ns > 86400ull * 1000000000ull)
                tc_die(2, "--origin-timeout %s: at most one day (86400 s)", optarg);
            break;
        case OPT_DIRTY_COPIES:
            if (tc_parse_uint("--dirty-copies", optarg, 1, 2, &v, err, sizeof err))
                tc_die(2, "%s", err);
            vcfg.dirty_copies = (unsigned)v;
            break;
        case OPT_CKPT_EVERY:
            if (strcmp(optarg, "auto") == 0)
                vcfg.checkpoint_every = TC_CKPT_EVERY_AUTO;
            else if (tc_parse_size("--checkpoint-every", optarg, &vcfg.checkpoint_every, err,
                                   sizeof err) < 0)
                tc_die(2, "%s", err);
            vcfg.checkpoint_every_set = true;
            break;
        case OPT_WRITE_BUDGET:
            if (budget_parse("--write-budget", optarg, false, &vcfg.write_budget_rate,
                             &vcfg.write_budget_burst, &vcfg.write_budget_minburst, err,
                             sizeof err) < 0)
                tc_die(2, "%s", err);
            break;
        case OPT_SOCKET: ncfg.socket_path = path_arg("--socket", optarg); break;
        case OPT_LISTEN: ncfg.listen = optarg; break;
        case OPT_SOCKET_MODE: {
            char *end;
            long m = strtol(optarg, &end, 8);
            if (*optarg == '\0' || *end || m < 0 || m > 0777)
                tc_die(2, "--socket-mode: '%s' is not an octal mode like 0600", optarg);
            ncfg.socket_mode = (unsigned)m;
            break;
        }
        case OPT_EXPORT_NAME: ncfg.export_name = optarg; break;
        case OPT_DESCRIPTION: ncfg.description = optarg; break;
        case OPT_READ_ONLY: vcfg.read_only = true; ncfg.read_only = true; break;
        case OPT_MAX_CONN:
            if (tc_parse_uint("--max-connections", optarg, 1, 1000000, &v, err, sizeof err))
                tc_die(2, "%s", err);
            ncfg.max_connections = (unsigned)v;
            break;
        case OPT_TLS:
            if (strcmp(optarg, "off") == 0)
                ncfg.tls = NBD_TLS_OFF;
            else if (strcmp(optarg, "on") == 0)
                ncfg.tls = NBD_TLS_ON;
            else if (strcmp(optarg, "require") == 0)
                ncfg.tls = NBD_TLS_REQUIRE;
            else
                tc_die(2, "--tls '%s': choose off, on or require", optarg);
            break;
        case OPT_TLS_CERTS: ncfg.tls_certificates = path_arg("--tls-certificates", optarg); break;
        case OPT_TLS_PSK: ncfg.tls_psk = path_arg("--tls-psk", optarg); break;
        case OPT_TLS_VERIFY: ncfg.tls_verify_peer = true; break;
        case 's': ncfg.single = true; break;
        case OPT_MAX_BUF:
            if (tc_parse_size("--max-buffer-memory", optarg, &v, err, sizeof err) < 0)
                tc_die(2, "%s", err);
            if (v < (32ull << 20))
                tc_die(2, "--max-buffer-memory %s is below 32M, the largest request", optarg);
            ncfg.max_buffer_memory = v;
            break;
        case OPT_MAX_CLIENT_BUF:
            if (tc_parse_size("--max-client-buffer-memory", optarg, &v, err, sizeof err) < 0)
                tc_die(2, "%s", err);
            if (v < (1ull << 20))
                tc_die(2, "--max-client-buffer-memory %s is below 1M", optarg);
            ncfg.max_client_buffer_memory = v;
            client_buf_arg = optarg;
            break;
        case OPT_HS_TIMEOUT:
            if (tc_parse_duration("--handshake-timeout", optarg, &ncfg.handshake_timeout_ns, err,
                                  sizeof err) < 0)
                tc_die(2, "%s", err);
            if (ncfg.handshake_timeout_ns < 100000000ull ||
                ncfg.handshake_timeout_ns > 3600ull * 1000000000ull)
                tc_die(2, "--handshake-timeout %s: must be from 0.1 s to one hour (3600 s)",
                       optarg);
            break;
        case OPT_MAX_HS:
            if (tc_parse_uint("--max-handshakes", optarg, 1, 1000000, &v, err, sizeof err))
                tc_die(2, "%s", err);
            ncfg.max_handshakes = (unsigned)v;
            break;
        case OPT_NBD_THREADS:
            if (tc_parse_uint("--nbd-threads", optarg, 0, 64, &v, err, sizeof err))
                tc_die(2, "%s", err);
            ncfg.nbd_threads = (unsigned)v;
            nbd_threads_set = true;
            break;
        case 'f': foreground = true; break;
        case OPT_CONTROL: control = path_arg("--control", optarg); break;
        case OPT_PIDFILE: pidfile = path_arg("--pidfile", optarg); break;
        case OPT_LOG: log_path = path_arg("--log", optarg); break;
        case OPT_TRACE: tcfg.path = path_arg("--trace", optarg); break;
        case OPT_TRACE_LIMIT:
            if (tc_parse_size("--trace-limit", optarg, &tcfg.limit, err, sizeof err) < 0)
                tc_die(2, "%s", err);
            if (tcfg.limit < (256u << 10))
                tc_die(2, "--trace-limit %s is below 256K", optarg);
            break;
        case OPT_TRACE_ROTATE: tcfg.rotate = true; break;
        case 'v': verbose = true; tc_log_set_level(TC_LOG_DEBUG); break;
        case 'h': cli_print(serve_help); return 0;
        default:
            fprintf(stderr, "Try 'tiercache serve --help'.\n");
            return 2;
        }
    }
    if (optind < argc)
        tc_die(2, "unexpected argument '%s' (try --help)", argv[optind]);
    if (vcfg.origin == NULL)
        tc_die(2, "--origin is required (try --help)");
    if (vcfg.dirty_high < vcfg.dirty_target)
        tc_die(2, "--dirty-high %.0f%% is below --dirty-target %.0f%%", vcfg.dirty_high * 100,
               vcfg.dirty_target * 100);
    if (vcfg.caches == NULL && vcfg.mode != TC_MODE_WRITETHROUGH && vcfg.mode != TC_MODE_PASSTHROUGH)
        tc_die(2, "--mode %s needs cache devices (--cache)", tc_mode_name(vcfg.mode));

    if (tcfg.path == NULL && tcfg.rotate)
        tc_die(2, "--trace-rotate needs --trace FILE");
    if (tcfg.path && !cli_check_parent(tcfg.path, "--trace", err, sizeof err))
        tc_die(1, "%s", err);
    /* The state file is written when a cache fails, when no start could
     * ask where: its directory must be there now. */
    if (vcfg.state_file && !cli_check_parent(vcfg.state_file, "--state-file", err, sizeof err))
        tc_die(1, "%s", err);

    if (ncfg.max_client_buffer_memory > ncfg.max_buffer_memory) {
        char total[32];
        tc_die(2, "--max-client-buffer-memory %s is more than --max-buffer-memory (%s)",
               client_buf_arg,
               tc_format_size(ncfg.max_buffer_memory, total, sizeof total));
    }
    if (ncfg.tls == NBD_TLS_OFF &&
        (ncfg.tls_certificates || ncfg.tls_psk || ncfg.tls_verify_peer))
        tc_die(2, "--tls-certificates, --tls-psk and --tls-verify-peer need --tls on or "
               "--tls require");
    if (ncfg.tls != NBD_TLS_OFF && !ncfg.tls_certificates == !ncfg.tls_psk)
        tc_die(2, "--tls %s needs either --tls-certificates DIR or --tls-psk FILE",
               ncfg.tls == NBD_TLS_ON ? "on" : "require");
    if (ncfg.tls_verify_peer && ncfg.tls_psk)
        tc_die(2, "--tls-verify-peer is for certificates; with --tls-psk every client "
               "proves its key");

    /* Where clients come from: stdin/stdout (--single), sockets passed by
     * systemd, or sockets made here.  --single has no control socket
     * unless --control is given. */
    int act_fds[NBD_MAX_LISTENERS];
    char act_path[4096];
    int nact = nbd_activation_fds(act_fds, NBD_MAX_LISTENERS, act_path, sizeof act_path, err,
                                  sizeof err);
    if (nact < 0)
        tc_die(1, "%s", err);
    if (ncfg.single) {
        /* One client: on stdin/stdout, or the first one to connect to the
         * sockets passed in (nbdinfo -- [ tiercache serve ... -s ]). */
        if (ncfg.socket_path || ncfg.listen)
            tc_die(2, "--single serves stdin/stdout or the sockets passed in; it takes no "
                   "--socket or --listen");
        foreground = true;
        /* Started per client by a tool (nbdinfo -- [ ... ]), whose output
         * it shares: like nbdkit -s, only warnings and errors, unless
         * --verbose asks for everything. */
        if (!verbose)
            tc_log_set_level(TC_LOG_WARN);
    }
    if (nact > 0) {
        if (ncfg.socket_path || ncfg.listen)
            tc_warn("socket activation: serving on the %d socket%s passed in; --socket and "
                    "--listen are ignored", nact, nact == 1 ? "" : "s");
        ncfg.socket_path = NULL;
        ncfg.listen = NULL;
        ncfg.listen_fds = act_fds;
        ncfg.nlisten_fds = (unsigned)nact;
    }
    char sockbuf[4096], ctlbuf[4096];
    if (ncfg.socket_path == NULL && ncfg.listen == NULL && nact == 0 && !ncfg.single) {
        snprintf(sockbuf, sizeof sockbuf, "%s/tiercache.sock", cli_run_dir());
        ncfg.socket_path = sockbuf;
    }
    if (control == NULL && !ncfg.single) {
        if (ncfg.socket_path)
            ctl_path_for(ncfg.socket_path, ctlbuf, sizeof ctlbuf);
        else if (act_path[0])
            ctl_path_for(act_path, ctlbuf, sizeof ctlbuf);
        else
            snprintf(ctlbuf, sizeof ctlbuf, "%s/tiercache.ctl", cli_run_dir());
        control = ctlbuf;
    }
    /* One path for two sockets: the second bind would find the first live
     * and fail only after the first was made. */
    if (control && ncfg.socket_path && strcmp(control, ncfg.socket_path) == 0)
        tc_die(2, "--control %s is also the NBD socket path%s; give --control another path",
               control, strcmp(control + (strlen(control) > 4 ? strlen(control) - 4 : 0),
                               ".ctl") == 0
                        ? " (a --socket path ending in .ctl is taken for a control socket)"
                        : "");
    if ((ncfg.socket_path && !cli_check_parent(ncfg.socket_path, "--socket", err, sizeof err)) ||
        (control && !cli_check_parent(control, "--control", err, sizeof err)) ||
        (pidfile && !cli_check_parent(pidfile, "--pidfile", err, sizeof err)))
        tc_die(1, "%s", err);
    /* The files written besides the devices are never the volume's data,
     * nor another's (claim_check_output()): before anything is opened. */
    char rotated[4200] = "";
    if (tcfg.path && tcfg.rotate)
        snprintf(rotated, sizeof rotated, "%s.1", tcfg.path);
    if ((log_path && claim_check_output(log_path, "--log", "append its log to it", vcfg.origin,
                                        vcfg.caches, err, sizeof err) < 0) ||
        (pidfile && claim_check_output(pidfile, "--pidfile", "replace its contents with its "
                                       "process id, and remove it at exit", vcfg.origin,
                                       vcfg.caches, err, sizeof err) < 0) ||
        (tcfg.path && claim_check_output(tcfg.path, "--trace", "replace its contents with "
                                         "the trace of the requests", vcfg.origin, vcfg.caches,
                                         err, sizeof err) < 0) ||
        (rotated[0] && claim_check_output(rotated, "--trace", "replace it with the trace's "
                                          "previous part at its limit (--trace-rotate)",
                                          vcfg.origin, vcfg.caches, err, sizeof err) < 0) ||
        (tcfg.path && trace_writer_check(tcfg.path, err, sizeof err) < 0))
        tc_die(1, "%s", err);

    cli_open_log(log_path, !foreground, "tiercache.log", err, sizeof err);

    int ready_fd = -1;
    if (!foreground)
        ready_fd = cli_daemonize();

    static struct serve s;
    memset(&s, 0, sizeof s);
    s.started_ns = tc_now_ns();
    s.pidfile = pidfile;
    s.flush_on_stop = flush_on_stop;
    snprintf(s.ctl_path, sizeof s.ctl_path, "%s", control);

    cli_signals_init(&s.sig);

    /* The pid file before anything that takes long (recovery), once the
     * pid is final; cli_write_pidfile() removes it again at exit. */
    if (pidfile && !cli_write_pidfile(pidfile, err, sizeof err))
        tc_die(1, "%s", err);

    if (reactor_init(&s.reactor, 1024) < 0)
        tc_die(1, "io_uring: %s (the kernel must support io_uring)", strerror(errno));
    /* Reads into the data buffers as registered buffers (io/bufpool.h);
     * reactor_fini() drops the registrations. */
    bufpool_use_ring(&s.reactor.ring);
    claim_set_dir(cli_run_dir());
    /* The NBD sockets, the TLS credentials, the export name and the
     * control socket's path before the volume: opening a cache clears its
     * clean-stop record, so a start refused after it (a port in use, a
     * credentials file missing) would leave the set as after a crash --
     * and a crash's start cannot tell an origin written while no daemon
     * served it.  NBD clients that connect meanwhile wait until the
     * volume is open; the control socket is made only then (a status
     * meanwhile says that no daemon answers, rather than wait for the
     * start), and only a socket made at that path in between fails the
     * start late. */
    if (control && tc_unix_check(control, "control socket", err, sizeof err) < 0)
        tc_die(1, "%s", err);
    /* TIERCACHE_TEST_NBD_THREADS, for tests only: the suite's daemons with
     * front-end threads, where the command line does not say. */
    const char *test_threads = getenv("TIERCACHE_TEST_NBD_THREADS");
    if (test_threads && !nbd_threads_set)
        ncfg.nbd_threads = (unsigned)strtoul(test_threads, NULL, 10);
    if (nbd_server_open(&s.nbd, &s.reactor, &ncfg, err, sizeof err) < 0)
        tc_die(1, "%s", err);
    s.vol = tc_volume_open(&s.reactor, &vcfg, err, sizeof err);
    if (s.vol == NULL) {
        nbd_server_abandon(&s.nbd);
        tc_die(1, "%s", err);
    }
    if (control) {
        if (ctl_server_start(&s.ctl, &s.reactor, control, err, sizeof err) < 0) {
            nbd_server_abandon(&s.nbd);
            tc_die(1, "%s", err);
        }
        s.have_ctl = true;
        ctl_register(&s.ctl, "status", status_cmd, &s);
        ctl_register(&s.ctl, "flush", flush_cmd, &s);
        ctl_register(&s.ctl, "detach", detach_cmd, &s);
        ctl_register(&s.ctl, "mode", mode_cmd, &s);
        ctl_register(&s.ctl, "set", set_cmd, &s);
        ctl_register(&s.ctl, "attach", attach_cmd, &s);
    }
    if (nbd_server_start(&s.nbd, s.vol, err, sizeof err) < 0) {
        if (s.have_ctl)
            ctl_server_close(&s.ctl);
        tc_die(1, "%s", err);
    }
    s.have_nbd = true;
    s.nbd.single_finished = single_finished;
    if (tcfg.path) {
        tcfg.volume_size = tc_volume_size(s.vol);
        tc_volume_cache_geometry(s.vol, &tcfg.mrc_block_bytes, &tcfg.mrc_cache_bytes);
        s.trace = trace_writer_open(&s.reactor, &tcfg, err, sizeof err);
        if (s.trace == NULL)
            tc_die(1, "%s", err);
        s.nbd.trace = s.trace;
    }
    cli_signals_arm(&s.sig, &s.reactor, signal_stop);

    const char *crc_wanted = getenv("TIERCACHE_CRC32C");
    if (crc_wanted && *crc_wanted && strcmp(crc_wanted, tc_crc32c_implementation()) != 0)
        tc_warn("TIERCACHE_CRC32C=%s: no such CRC-32C implementation on this CPU", crc_wanted);
    tc_info("checksums: CRC-32C by %s", tc_crc32c_implementation());
    tc_info("serving %s (control socket %s)", vcfg.origin, control ? control : "none");
    cli_daemon_ready(ready_fd);

    reactor_run(&s.reactor);

    if (s.have_ctl)
        ctl_server_close(&s.ctl);
    trace_writer_close(s.trace);
    tc_volume_free(s.vol);
    reactor_fini(&s.reactor);
    bufpool_trim();
    free((void *)vcfg.caches);
    cli_signals_close(&s.sig);
    tc_info("stopped");
    return s.exit_status;
}
