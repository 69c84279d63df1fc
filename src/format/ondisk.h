/*
 * The on-disk format of a tiercache cache device.
 *
 * This header is the one specification of the format: every structure the
 * engine writes to a cache device is defined, encoded, decoded and checked
 * here (superblock.c, chunk.c, statefile.c), and `tiercache check` audits
 * it.  Integers are little-endian.  Every structure carries a CRC-32C.  A
 * change of layout takes a new version number (the superblock's versions
 * 2, 3 and 4 below add the abandonment and device-failure marks and the
 * clean-stop record to version 1); a version this build does not know is
 * refused with a message, never misread.
 *
 * A cache device:
 *
 *   0        4 KiB    8 KiB                1 MiB (data_offset)
 *   +--------+--------+---- - - - --------+-----------+-----------+---
 *   | super- | super- |     (unused)      | segment 0 | segment 1 | ...
 *   | block  | block  |                   |           |           |
 *   | copy A | copy B |                   |           |           |
 *   +--------+--------+---- - - - --------+-----------+-----------+---
 *
 * Segments are numbered across the whole set of devices: device 0 holds
 * segments 0 .. n0-1, device 1 holds n0 .. n0+n1-1, and so on.  Segments
 * are written as one log, in groups: a group is one segment on each of the
 * devices that had one free when the group was opened, all filled in
 * parallel (this is the interleave).  Every group has a sequence number;
 * groups are reclaimed strictly oldest first, so everything in an older
 * group is older than everything in a newer one.
 *
 * A segment is a run of chunks, each written by one large sequential I/O:
 *
 *   +---------------------+----------------------------------------+
 *   | chunk header        | data: the sectors of the chunk's DATA  |
 *   | (hdr_sectors x 4K)  | entries, packed, in entry order        |
 *   +---------------------+----------------------------------------+
 *
 * The header is the chunk's summary: group sequence, log tail, entries
 * (which origin blocks the data holds, with valid and dirty sector masks;
 * tombstones; clean records), and one CRC-32C per data sector.  Recovery
 * walks the chunks of every segment and replays the entries of live
 * groups, newest sequence number winning, which rebuilds the index and the
 * exact dirty set after a crash at any instant.  A chunk whose header or
 * data did not fully reach the device fails its checksums and ends the
 * segment's walk.
 */
#ifndef TC_FORMAT_ONDISK_H
#define TC_FORMAT_ONDISK_H

#include <endian.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TC_FORMAT_VERSION        1u
#define TC_SB_MAGIC              0x0142534352454954ull   /* "TIERCSB\1" */
#define TC_CHUNK_MAGIC           0x014B4E5548434354ull   /* "TCHUNK\1" + pad */
#define TC_SB_SIZE               4096u
#define TC_SB_COPIES             2u       /* at byte 0 and byte 4096 */
#define TC_DATA_OFFSET           (1u << 20)
#define TC_MAX_DEVICES           16u
#define TC_ORIGIN_ID_LEN         128u
#define TC_ORIGIN_PATH_LEN       256u

#define TC_MIN_BLOCK_SIZE        4096u
#define TC_MAX_BLOCK_SIZE        (1u << 20)
#define TC_MIN_SEGMENT_SIZE      (1u << 20)
#define TC_MAX_SEGMENT_SIZE      (256u << 20)  /* sector offsets fit 16 bits */
#define TC_DEFAULT_BLOCK_SIZE    (64u << 10)
#define TC_DEFAULT_SEGMENT_SIZE  (4u << 20)
#define TC_MAX_HDR_SECTORS       8u

/* ---- superblock: 4096 bytes, written twice at format ---- */

/*
 * A superblock is rewritten after format to record the origin's identity
 * (origin_id below), the marks of versions 2 and 3 and the clean-stop
 * record of version 4.  It marks the cache abandoned (see "state file"
 * below) so: flags gets TC_SB_ABANDONED, abandoned_seq the
 * log sequence from which on the log is trusted again, and the version
 * field TC_SB_VERSION_ABANDONED, so that a build that does not know the
 * mark refuses the device instead of trusting its log.  Copy A is written
 * (and flushed) before copy B: a torn copy A falls back to copy B, which
 * is either marked too or older -- and then the state file, written
 * before both, carries the mark.
 */
#define TC_SB_VERSION_ABANDONED  2u
#define TC_SB_ABANDONED          (1u << 0)

/*
 * TC_SB_ABANDON_UNFILED, only with TC_SB_ABANDONED, in any version that
 * carries that: the state file could not record this abandonment when the
 * mark was written (its file system full or read-only).  The daemon then
 * acknowledged no FLUSH and no FUA write (each waits for the state file:
 * engine/abandon.c), and failed every write over a sector lost (or
 * drained) at the abandonment, so the log as it was at abandoned_seq
 * still holds everything made durable, and no dirty data that a write
 * acknowledged since replaced: a start that finds the state file without this
 * abandonment writes the log's dirty data back to the origin and records
 * the abandonment in the state file itself.  Without the flag such a
 * state file was lost or replaced after it recorded the mark, and the
 * start is refused.  The flag goes once the state file records the mark.
 * Builds that do not know it refuse such a start, as before.
 */
#define TC_SB_ABANDON_UNFILED    (1u << 5)

/*
 * Version 3 adds per-device failure marks (TC_SB_DEV_FAILED): when device
 * i of the set fails at run time while others go on, the survivors'
 * superblocks get failed_seq[i] = the log's next sequence number at the
 * failure.  Every chunk of device i in a group below failed_seq[i] was
 * written before the failure: at the next start its entries are ignored
 * and its segments are free, whether or not the device reads well again;
 * groups from failed_seq[i] on were opened after a restart and are
 * trusted.  A version 3 superblock may carry TC_SB_ABANDONED too (then
 * abandoned_seq is valid as in version 2).  Builds that know only
 * versions 1 and 2 refuse it, instead of trusting the failed device's
 * stale log.  The marks are never cleared: a later mark of the same
 * device only raises its sequence.  The checksum covers them.
 */
#define TC_SB_VERSION_DEVFAIL    3u
#define TC_SB_DEV_FAILED         (1u << 1)

/*
 * Version 4 adds the clean-stop record (TC_SB_CLEAN_STOP), the one record
 * of how far the log was durable that does not live in the chunk headers
 * it vouches for.  A clean stop writes it into every device's superblocks
 * (copy A, flush, copy B, flush) after its last log sync, so every chunk
 * it counts is durable:
 *
 *   stop_chunk_seq   the newest chunk written (0: none ever was); every
 *                    chunk up to it is durable
 *   stop_tail_seq    the log tail the newest chunk records
 *   stop_chunks      the number of chunks in the segments of live groups
 *                    (groups at or after the tail)
 *   stop_origin_mtime
 *                    a file origin's modification time at the stop, in
 *                    nanoseconds (0: not known -- another kind of origin,
 *                    or a record of a build before the field).  Nothing
 *                    may write the origin while the cache is stopped: its
 *                    clean copies would be older than the origin, and its
 *                    dirty data would overwrite the newer writes.  A start
 *                    that finds the file's time changed refuses it (unless
 *                    --adopt-origin).  At byte 2016, after the checkpoint
 *                    fields, in versions 4 and 5 alike: a build that does
 *                    not know it ignores it (and starts as before), and
 *                    clears it with the rest of the record.
 *   stop_origin_written, stop_origin_diskseq, stop_origin_boot_id
 *                    the same for a block-device origin: the sectors the
 *                    kernel counted written to it or discarded, the
 *                    device's sequence number and the machine's boot ID
 *                    at the stop (io/writecount.c; boot ID all zero: no
 *                    count -- another kind of origin, a kernel that keeps
 *                    none, a build before the fields).  A start of the
 *                    same boot and device that counts more refuses the
 *                    origin as written while stopped; another boot or
 *                    another instance of the device cannot be compared
 *                    (warned about).  At bytes 2024, 2032 and 2040 (16
 *                    bytes), in versions 4 and 5 alike, ignored and
 *                    cleared by builds before them, as stop_origin_mtime.
 *
 * At the next start nothing was in flight, so recovery must find exactly
 * that log: a live chunk that fails to check is damage, never a torn
 * write, whatever the damaged headers (the clean-stop flag's, the flushed
 * marks) say -- else the newest versions they held would silently give way
 * to older ones.  Fewer chunks, another newest chunk or another tail are
 * damage too.  The start clears the record in every copy (a version 1, 2
 * or 3 superblock again, by the marks it carries) before anything is
 * appended to the log, so a later crash is never taken for a clean stop;
 * a start that cannot clear it fails.  A start also writes both copies
 * again, from the one it uses, when they differ: a copy B whose clear
 * failed (or never came: a crash between the copies) would otherwise
 * keep a stale record -- and name a stale checkpoint -- for as long as
 * copy A is whole, and be trusted once a torn write damages copy A.
 * A version 4 superblock may carry
 * the marks of versions 2 and 3 as well.  Builds that know only versions
 * 1 to 3 refuse it ("format version 4 is not supported"): started, they
 * would append to the log without clearing the record.  Version 1 to 3
 * superblocks start as before (no record: recovery trusts the chunk
 * headers' own marks).  The checksum covers the record.
 */
#define TC_SB_VERSION_STOP       4u
#define TC_SB_CLEAN_STOP         (1u << 2)

/*
 * Version 5: a clean-stop record that names a checkpoint
 * (TC_SB_CHECKPOINT, only with TC_SB_CLEAN_STOP): the state recovery
 * would rebuild from the log, written by the stop after its last log
 * sync, so that the next start reads it instead of walking every chunk
 * header (see "checkpoint" below).  The record adds:
 *
 *   ckpt_len         bytes of the checkpoint (header and body)
 *   ckpt_crc         CRC-32C of those bytes
 *   ckpt_nsegs       segments holding it, in order (1 .. TC_CKPT_MAX_SEGS)
 *   ckpt_segs[]      their global numbers; each holds segment_size bytes of
 *                    the checkpoint from its first sector (the last one the
 *                    rest)
 *
 * (256 segments of the default 4 MiB hold 1 GiB: some 19 million cached
 * blocks of one fragment each.)
 *
 * The checkpoint covers the log up to stop_chunk_seq (its header says so
 * too).  It is trusted only with the record: every device's record alike
 * (sb_stop_record_equal() compares these fields as well), its length and
 * checksum right, its header's set, chunk sequence, tail and chunk count
 * those of the record.  Otherwise, or with TIERCACHE_TEST_FORCE_SCAN, the
 * start walks the log as after a crash and says why.  The start clears
 * the record (and with it these fields: the superblock goes back to
 * version 1, 2 or 3) before anything is appended, so a checkpoint is
 * never trusted once the log has moved past it -- nor after a kill,
 * which leaves no record.
 *
 * Where: segments free at the stop (groups below the tail, on devices in
 * service).  Nothing of the log is there: a scan finds no chunk of a live
 * group in them (the header keeps the bytes where a chunk header has its
 * segment and position at 0xff, so it is never taken for a damaged chunk
 * of ours), and the next start hands them out again like any free
 * segment.  A stop that finds too few free segments, or state that a
 * scan would not rebuild exactly (write-through versions not yet recorded
 * stable, a lost set being written or carried by the state file, a failed
 * device), writes a version 4 record without a checkpoint.  Builds that
 * know only versions 1 to 4
 * refuse version 5 ("format version 5 is not supported"), as for version
 * 4: started, they would append without clearing the record.
 */
#define TC_SB_VERSION_CHECKPOINT 5u
#define TC_SB_CHECKPOINT         (1u << 3)
#define TC_CKPT_MAX_SEGS         256u

/*
 * The set's state place (any version; 0 and "" when not recorded): which
 * state file and sequence record (below) the set last used, so that a
 * start given another place -- another --state-file, none after one, or
 * the default place after another one -- is refused instead of finding
 * no record there and serving an older copy of the devices unchecked
 * (engine/seqrec.c).
 *
 *   state_token      16 random bytes, the same in the sequence record the
 *                    set keeps (version 3 below): the record found must
 *                    carry the token of one of the set's devices (a start
 *                    that died while writing them may leave two)
 *   state_place      the state file's absolute path when the token was
 *                    recorded, NUL-terminated, for messages only ("" if
 *                    longer than the field): a record moved with its state
 *                    file keeps its token and is accepted at its new place
 *
 * Written by a start, after the record holding the token is durable and
 * before anything is served; a format writes none.  At bytes 2056 and
 * 2072, after every other field, in every version: a build that does not
 * know them ignores them and starts as before, and clears them when it
 * writes the superblock (then the next start records them again) --
 * which is why they take no version of their own: a version would only
 * make older builds refuse the set for a check they do not make anyway.
 * The checksum covers them.
 */
#define TC_STATE_PLACE_LEN       256u

/*
 * Version 6: running checkpoints (TC_SB_RUN_CKPT): checkpoints of the
 * index written while the daemon serves (engine/checkpoint.c, "running
 * checkpoints"), so that a start after a crash reads the newest one and
 * replays only the log written after it.  Two slots, written in turn, so
 * that a kill while a checkpoint or the superblocks are written leaves the
 * other one named and whole:
 *
 *   gen          u64  which checkpoint (1, 2, ...; 0: the slot is empty);
 *                     the slot with the higher gen is the newer
 *   cut          u64  the newest chunk it covers (its header's chunk_seq):
 *                     every chunk up to it was durable when it was taken
 *   len          u64  bytes of the checkpoint (header and body, as above)
 *   crc          u32  CRC-32C of those bytes
 *   nsegs        u32  segments holding it, in order (1 .. TC_RUN_CKPT_MAX_SEGS)
 *   segs[192]    u32  their global numbers, laid out as ckpt_segs[]
 *
 * Slot i is at byte 2328 + 800 * i (after the state place: 2328 .. 3928;
 * nothing else uses those bytes, and builds before version 6 write zeros
 * there).  The segments a slot names are held out of the log's allocator
 * until a newer checkpoint is named in the other slot: they are not free
 * space, though a scan finds no chunk in them.  The version is 6 exactly
 * when a slot is full (the flag says so); it may carry every mark and
 * record of versions 2 to 5 besides.  Builds that know only versions 1 to
 * 5 refuse it ("format version 6 is not supported"): started, they would
 * hand the held segments out while the slots still name them.  A version
 * 1 to 5 superblock has empty slots.  The checksum covers them.
 */
#define TC_SB_VERSION_RUN_CKPT   6u
#define TC_SB_RUN_CKPT           (1u << 4)
#define TC_RUN_CKPT_SLOTS        2u
#define TC_RUN_CKPT_MAX_SEGS     192u

struct tc_run_ckpt {
    uint64_t gen;                   /* 0: empty */
    uint64_t cut;                   /* the newest chunk it covers */
    uint64_t len;
    uint32_t crc;
    uint32_t nsegs;
    uint32_t segs[TC_RUN_CKPT_MAX_SEGS];
};

struct tc_superblock {
    uint32_t version;
    uint8_t set_uuid[16];           /* the set of devices of one cache */
    uint8_t dev_uuid[16];           /* this device */
    uint32_t dev_index;             /* position of this device in the set */
    uint32_t dev_count;             /* devices in the set */
    uint64_t dev_size;              /* bytes of this device at format */
    uint32_t block_size;            /* bytes per cache block (index unit) */
    uint32_t segment_size;          /* bytes per segment */
    uint64_t data_offset;           /* byte offset of segment 0 on this device */
    uint32_t segment_count;         /* segments on this device */
    uint32_t first_segment;         /* global number of this device's segment 0 */
    uint32_t total_segments;        /* segments in the whole set */
    uint32_t flags;
    uint64_t origin_size;           /* bytes of the origin at format */
    uint64_t format_time;           /* Unix seconds */
    /* Stable identity of the origin, as struct tc_dev's identity (io/dev.h)
     * gives it: "file:MAJ:MIN:INO:bSEC.NSEC" (a file, with its birth
     * time), "loop:MAJ:MIN:INO:OFFSET:bSEC.NSEC" (a loop device, by its
     * backing file), "block:WWID:START", "block:MAJ:MIN", "nbd:URI"; the
     * ":b" birth time is left out where the file system keeps none.
     * Compared as a string; "block:MAJ:MIN" is also what
     * builds before the loop form recorded for a loop device: it is
     * accepted for the loop device of that number and rewritten in the
     * loop form (no version change: an older build reading the loop form
     * refuses the origin as another one, and --adopt-origin lets it in).
     * Likewise a file or loop form without the birth time (builds before
     * it: a file deleted and made again often has the old inode number,
     * and passed for the old origin) is accepted for the file of that
     * inode and rewritten with it; an older build refuses the new form as
     * another origin, and --adopt-origin lets it in.
     * Rewritten also when --adopt-origin accepts another identity. */
    char origin_id[TC_ORIGIN_ID_LEN];
    char origin_path[TC_ORIGIN_PATH_LEN];   /* as named at format, for messages */
    uint32_t dev_segments[TC_MAX_DEVICES];  /* segment count of every device */
    uint8_t dev_uuids[TC_MAX_DEVICES][16];  /* uuid of every device */
    uint64_t abandoned_seq;         /* TC_SB_ABANDONED: log entries below it are
                                       untrusted (versions 2 and 3; 0 in version 1) */
    uint64_t failed_seq[TC_MAX_DEVICES];    /* TC_SB_DEV_FAILED (versions 3 and 4): groups
                                       of device i below failed_seq[i] are untrusted
                                       (0: never failed; 0 beyond dev_count) */
    /* TC_SB_CLEAN_STOP (version 4; 0 otherwise): the clean-stop record. */
    uint64_t stop_chunk_seq;        /* newest chunk at the stop; all up to it durable */
    uint64_t stop_tail_seq;         /* the log tail it records */
    uint64_t stop_chunks;           /* chunks in the segments of live groups */
    uint64_t stop_origin_mtime;     /* a file origin's mtime at the stop, ns (0: unknown) */
    uint64_t stop_origin_written;   /* a block origin's sectors written + discarded */
    uint64_t stop_origin_diskseq;   /* ... its sequence number (0: unknown) */
    uint8_t stop_origin_boot_id[16];/* ... in this boot (all zero: no count) */
    /* TC_SB_CHECKPOINT (version 5; 0 otherwise): the checkpoint it names. */
    uint64_t ckpt_len;
    uint32_t ckpt_crc;
    uint32_t ckpt_nsegs;
    uint32_t ckpt_segs[TC_CKPT_MAX_SEGS];
    /* The state place (any version; zero when not recorded). */
    uint8_t state_token[16];
    char state_place[TC_STATE_PLACE_LEN];
    /* TC_SB_RUN_CKPT (version 6; empty otherwise): the running checkpoints. */
    struct tc_run_ckpt run_ckpt[TC_RUN_CKPT_SLOTS];
};

/* Byte offsets inside the 4096-byte superblock. */
enum {
    SB_OFF_MAGIC = 0, SB_OFF_VERSION = 8, SB_OFF_CRC = 12, SB_OFF_SET_UUID = 16,
    SB_OFF_DEV_UUID = 32, SB_OFF_DEV_INDEX = 48, SB_OFF_DEV_COUNT = 52, SB_OFF_DEV_SIZE = 56,
    SB_OFF_BLOCK_SIZE = 64, SB_OFF_SEGMENT_SIZE = 68, SB_OFF_DATA_OFFSET = 72,
    SB_OFF_SEGMENT_COUNT = 80, SB_OFF_FIRST_SEGMENT = 84, SB_OFF_TOTAL_SEGMENTS = 88,
    SB_OFF_FLAGS = 92, SB_OFF_ORIGIN_SIZE = 96, SB_OFF_FORMAT_TIME = 104,
    SB_OFF_ORIGIN_ID = 112, SB_OFF_ORIGIN_PATH = 240, SB_OFF_DEV_SEGMENTS = 496,
    SB_OFF_DEV_UUIDS = 560, SB_OFF_ABANDONED_SEQ = 816, SB_OFF_FAILED_SEQ = 824,
    SB_OFF_STOP_CHUNK_SEQ = 952, SB_OFF_STOP_TAIL_SEQ = 960, SB_OFF_STOP_CHUNKS = 968,
    SB_OFF_CKPT_LEN = 976, SB_OFF_CKPT_CRC = 984, SB_OFF_CKPT_NSEGS = 988,
    SB_OFF_CKPT_SEGS = 992, SB_OFF_STOP_ORIGIN_MTIME = 992 + 4 * TC_CKPT_MAX_SEGS,
    SB_OFF_STOP_ORIGIN_WRITTEN = SB_OFF_STOP_ORIGIN_MTIME + 8,
    SB_OFF_STOP_ORIGIN_DISKSEQ = SB_OFF_STOP_ORIGIN_WRITTEN + 8,
    SB_OFF_STOP_ORIGIN_BOOT_ID = SB_OFF_STOP_ORIGIN_DISKSEQ + 8,
    SB_OFF_STATE_TOKEN = SB_OFF_STOP_ORIGIN_BOOT_ID + 16,
    SB_OFF_STATE_PLACE = SB_OFF_STATE_TOKEN + 16,
    SB_OFF_RUN_CKPT = SB_OFF_STATE_PLACE + TC_STATE_PLACE_LEN,     /* 2328 */
    SB_RUN_CKPT_SLOT = 32 + 4 * TC_RUN_CKPT_MAX_SEGS,                /* 800 */
    SB_OFF_END = SB_OFF_RUN_CKPT + TC_RUN_CKPT_SLOTS * SB_RUN_CKPT_SLOT,
};
_Static_assert(SB_OFF_RUN_CKPT == 2328 && SB_OFF_END <= TC_SB_SIZE,
               "the running checkpoints' slots follow the state place, inside the superblock");

/* Whether a slot of the running checkpoints is full (version 6). */
static inline bool sb_has_run_ckpt(const struct tc_superblock *sb)
{
    for (unsigned i = 0; i < TC_RUN_CKPT_SLOTS; i++)
        if (sb->run_ckpt[i].gen != 0)
            return true;
    return false;
}

void sb_encode(const struct tc_superblock *sb, uint8_t buf[TC_SB_SIZE]);
/* 0 if buf holds a valid superblock (decoded into sb); otherwise -1 and a
 * reason in err: "no tiercache superblock", "checksum mismatch", "format
 * version N is not supported", "inconsistent geometry: ...". */
int sb_decode(const uint8_t buf[TC_SB_SIZE], struct tc_superblock *sb, char *err, size_t errlen);
/* True if the buffer starts with the superblock magic (valid or not). */
bool sb_has_magic(const uint8_t *buf);
/* True if both superblocks carry the same clean-stop record: the same
 * newest chunk, tail and chunk count (stop_* above), and the same
 * checkpoint or none (ckpt_*).  Only the record's
 * fields are compared, not its flag: the caller knows both have one.  One
 * stop writes the same record on every device, so records that differ
 * were not written by one stop. */
bool sb_stop_record_equal(const struct tc_superblock *a, const struct tc_superblock *b);

/* ---- checkpoint: the recovered state, written by a clean stop ---- */

/*
 * A clean stop writes what recovery would rebuild from the log -- the
 * live segments with their chunk tables, every cached block with its
 * fragments, the lost set, the log's sequence numbers -- into free
 * segments, and names it in the superblocks' clean-stop record (version 5
 * above).  The next start reads it instead of walking the log: its time
 * depends on the checkpoint's size, not on how much the log holds.
 * Everything is in a canonical order (segments by number, blocks by origin
 * block number), so that `tiercache check` verifies a checkpoint by
 * encoding what its own full scan of the log rebuilt and comparing.
 *
 * Header, 4096 bytes:
 *
 *   0    magic "TCCKPT\1\0"            u64
 *   8    version (1)                    u32
 *   12   CRC-32C of the header with this field zero   u32
 *   16   set UUID                       16 bytes
 *   32   chunk_seq                      u64: the newest chunk it covers (the
 *                                       record's stop_chunk_seq)
 *   40   tail_seq                       u64: the log tail (stop_tail_seq)
 *   48   next_seq                       u64: above every sequence in the log
 *   56   wt_stable_seq                  u64: the newest chunk's stable mark;
 *                                       every write-through version is at or
 *                                       below it (none is dirty again)
 *   64   0xffffffff 0xffffffff          where a chunk header has its segment
 *                                       and position: never this one's
 *   72   sectors per block              u32 (W = ceil(spb / 64) mask words)
 *   76   total segments                 u32
 *   80   segment records                u32
 *   84   CRC-32C of the body            u32
 *   88   chunks                         u64 (the record's stop_chunks)
 *   96   block records                  u64
 *   104  fragment records               u64
 *   112  lost records                   u64
 *   120  body length                    u64
 *
 * Body, from byte 4096, three runs of records:
 *
 *   segments of live groups that hold chunks, by segment number:
 *     segment u32, chunks n u32, group sequence u64, fill (sectors) u32,
 *     0 u32; then n chunk references: start, header sectors, data
 *     sectors, 0 (u16 each)
 *   cached blocks, by origin block number:
 *     origin block u64, fragments f u32 (1 .. 8), 0 u32, valid mask and
 *     dirty mask (W u64 each); then f fragments, newest first: segment u32,
 *     sector u32, mirror segment u32 (0xffffffff: none), mirror sector u32,
 *     stored mask (W u64)
 *   lost set, by origin block number: origin block u64, mask (W u64)
 *
 * A block's fragments are re-added oldest first, each with the block's
 * dirty sectors among those it stores, which rebuilds the chain, the
 * dirty set and the segments' live counts as recovery's replay does.
 */
#define TC_CKPT_MAGIC           0x000154504B434354ull   /* "TCCKPT\1\0" */
#define TC_CKPT_VERSION         1u
#define TC_CKPT_HDR             4096u

struct tc_ckpt {
    uint8_t set_uuid[16];
    uint64_t chunk_seq, tail_seq, next_seq, wt_stable_seq;
    uint32_t spb, total_segments, nsegs, body_crc;
    uint64_t nchunks, nblocks, nfrags, nlost, body_len;
};

enum {
    CK_OFF_MAGIC = 0, CK_OFF_VERSION = 8, CK_OFF_CRC = 12, CK_OFF_SET_UUID = 16,
    CK_OFF_CHUNK_SEQ = 32, CK_OFF_TAIL_SEQ = 40, CK_OFF_NEXT_SEQ = 48, CK_OFF_WT_STABLE = 56,
    CK_OFF_NOT_CHUNK = 64, CK_OFF_SPB = 72, CK_OFF_TOTAL_SEGMENTS = 76, CK_OFF_NSEGS = 80,
    CK_OFF_BODY_CRC = 84, CK_OFF_NCHUNKS = 88, CK_OFF_NBLOCKS = 96, CK_OFF_NFRAGS = 104,
    CK_OFF_NLOST = 112, CK_OFF_BODY_LEN = 120,
};

static inline size_t tc_ckpt_mask_bytes(unsigned spb) { return 8 * (size_t)((spb + 63) / 64); }
static inline size_t tc_ckpt_seg_bytes(uint32_t nchunks) { return 24 + 8 * (size_t)nchunks; }
static inline size_t tc_ckpt_block_bytes(unsigned spb) { return 16 + 2 * tc_ckpt_mask_bytes(spb); }
static inline size_t tc_ckpt_frag_bytes(unsigned spb) { return 16 + tc_ckpt_mask_bytes(spb); }
static inline size_t tc_ckpt_lost_bytes(unsigned spb) { return 8 + tc_ckpt_mask_bytes(spb); }

/* Encode the header into buf (TC_CKPT_HDR bytes), checksum last. */
void ckpt_encode(uint8_t *buf, const struct tc_ckpt *ck);
/* Check and decode a header: -1 with a reason in err when the magic,
 * version, checksum or a field is wrong (sizes out of range, the body
 * length not what the counts make). */
int ckpt_decode(const uint8_t *buf, struct tc_ckpt *ck, char *err, size_t errlen);

/* ---- state file: the durable record of an abandoned cache ---- */

/*
 * When every cache device has failed at run time, the volume serves the
 * origin directly and the cache is abandoned: later writes reach only the
 * origin, so the cache log no longer holds the newest version of what
 * they wrote, and the dirty data that was only in the cache is lost.  The
 * state file records that, outside the failed devices (which may not be
 * writable): by default next to the set's device 0 when it is a file
 * ("PATH.tcstate"), else /var/lib/tiercache/SET-UUID.tcstate; serve
 * --state-file names another place.  It is replaced whole (a spare file,
 * fdatasync, rename, fsync of the directory).  The spares, PATH.spare0 and
 * PATH.spare1, are preallocated (no size, no meaning) from the start on,
 * so that a rewrite needs no new blocks of a full file system
 * (engine/abandon.c); the format does not depend on them.
 *
 *   0    magic "TCSTATE\1"        u64
 *   8    version (1, 2 or 3)       u32
 *   12   CRC-32C of bytes [0, length) with this field zero   u32
 *   16   set UUID                  16 bytes
 *   32   flags (TC_STATE_*)        u32
 *   36   sectors per block         u32 (the mask size of the entries)
 *   40   abandoned_seq             u64: log entries with a lower sequence
 *                                  are untrusted (TC_STATE_ABANDONED)
 *   48   written (Unix ns)         u64
 *   56   entry count               u64
 *   64   (version 2, 3) stop_seq   u64: TC_STATE_STOP_LOST, below
 *   64 or 72: entries: origin block u64, then its lost-sector mask in
 *        ceil(spb / 64) u64 words; (version 3) then spb proofs, one per
 *        sector of the block, 12 bytes each (below); length = header +
 *        count * entry size
 *
 * The entries are the lost set as it is now: the sectors whose newest
 * acknowledged version was lost with the cache, minus those written again
 * since (through the origin).  Reads of them fail with EIO.
 *
 * Version 2 adds TC_STATE_STOP_LOST: a clean stop whose log had no room
 * for every LOST record (or tombstone) it needed records the lost set
 * here instead, as it was when the log's next sequence number was
 * stop_seq.  At the next start that set replaces the lost set once every
 * log entry below stop_seq is applied (entries from stop_seq on were
 * written after the restart and are applied after it); a block the set
 * names whose cached copy holds no dirty data beyond its lost sectors (a
 * write-through version above the stable mark counts as dirty) is
 * dropped then, as the tombstone would have dropped it.  Once LOST
 * records in the log carry the set again (synced), the start removes the
 * file, or rewrites it without the flag (version 1) if it records an
 * abandonment too.  Builds that know only version 1 refuse a version 2
 * file, instead of serving the copies it keeps out.
 *
 * TC_STATE_STOP_DROPS (with TC_STATE_STOP_LOST, version 2 or 3) adds
 * entries with no lost sector: blocks whose tombstone a stop gave up
 * while the origin held their current data (clean, or dirty data the stop
 * wrote there and flushed).  The log may keep older copies of them; the
 * start drops whatever cached copy it rebuilt of such a block (dirty or
 * not) at stop_seq, as the tombstone would have, and reads go to the
 * origin.  Builds that do not know the flag refuse the file.
 *
 * Version 3 adds the proofs of an abandonment's lost sectors, so that a
 * drain of the failed device that a kill, a crash or a stop cut short is
 * resumed at the next start (engine/abandon.c, "Resuming the drain").  A
 * sector's proof says where its dirty version was when the last device
 * failed and what it held:
 *
 *   0    where   u64: 0, no proof; else bits 56..63 the device index + 1
 *                (its slot in the set), bits 0..55 the 4 KiB sector on that
 *                device holding the version's data
 *   8    crc     u32: the CRC-32C of that 4 KiB sector, as its chunk
 *                header recorded it (or of the data the failed write held)
 *
 * Only sectors lost by the abandonment itself carry one, and a sector
 * loses it the moment it leaves the lost set (written again, drained) or
 * is lost anew: a proof never names an older version than the one lost.
 * The next start reads each proven sector back, and a sector whose data
 * matches the CRC is written to the origin, the origin flushed, and only
 * then the sector dropped from the lost set (this file rewritten, without
 * proofs, before anything is appended to the cache: the log that held the
 * data is reused from then on).  A sector that does not read or does not
 * match stays lost (EIO).  A file with no proof is written as version 1
 * or 2, as before; builds that know only versions 1 and 2 refuse version 3.
 *
 * Version 4 marks the same sectors instead of proving them, for when the
 * file system holding the state file has no room for version 3 (12 bytes
 * a sector; the fault that failed the cache is often a full file system):
 * each entry's lost-sector mask is followed by a second mask of as many
 * words, the sectors that would have carried a proof -- lost by the
 * abandonment itself, their version on the device written whole (its
 * chunk write completed), never written or lost again since --, then
 *
 *   digest  u32: the CRC-32C of the marked sectors' CRC-32Cs (each as a
 *           little-endian u32, in sector order): the versions marked
 *   zero    u32
 *
 * A mark says: the version of this sector the replay of the log below
 * abandoned_seq finds is the newest acknowledged one, if the digest says
 * it is the one marked.  The next read-write start, before anything is
 * appended, replays the log below abandoned_seq as well (engine/abandon.c,
 * "Resuming the drain from the log"), and for each block whose marked
 * sectors all replay to dirty versions in groups newer than any damage
 * the scan found, all read back matching their chunks' CRCs, and whose
 * CRCs give the digest, writes them to the origin; flushes it, and only
 * then drops the marks and those sectors from this file, which it writes
 * again (version 1 or 2) before serving.  A mark never outlives that start: the log below
 * abandoned_seq is overwritten from the first append on, after which the
 * newest version left there could be an older one.  Builds that know
 * only versions 1 to 3 refuse version 4.
 */
#define TC_STATE_MAGIC          0x0145544154534354ull   /* "TCSTATE\1" */
#define TC_STATE_VERSION        4u      /* the highest version read */
#define TC_STATE_ABANDONED      (1u << 0)
#define TC_STATE_STOP_LOST      (1u << 1)       /* version 2 only */
#define TC_STATE_STOP_DROPS     (1u << 2)       /* with TC_STATE_STOP_LOST */
#define TC_STATE_HDR            64u     /* version 1 */
#define TC_STATE_HDR_V2         72u     /* versions 2 to 4 */
#define TC_STATE_PROOF_BYTES    12u     /* version 3: per sector of an entry */

struct tc_state {
    uint8_t set_uuid[16];
    uint32_t version;               /* 1, 2 (may carry TC_STATE_STOP_LOST), 3
                                       (may too; entries carry proofs) or 4 (may
                                       too; entries carry marks) */
    uint32_t flags;
    uint32_t spb;
    uint64_t abandoned_seq;
    uint64_t written_ns;
    uint64_t count;
    uint64_t stop_seq;              /* TC_STATE_STOP_LOST */
};

static inline size_t tc_state_hdr(uint32_t version)
{
    return version >= 2 ? TC_STATE_HDR_V2 : TC_STATE_HDR;
}
static inline size_t tc_state_entry_size(uint32_t version, unsigned spb)
{
    size_t mask = 8 * (size_t)((spb + 63) / 64);
    return 8 + mask +
           (version == 3 ? (size_t)TC_STATE_PROOF_BYTES * spb : version == 4 ? mask + 8 : 0);
}
static inline size_t tc_state_bytes(uint32_t version, unsigned spb, uint64_t count)
{
    return tc_state_hdr(version) + (size_t)count * tc_state_entry_size(version, spb);
}
/* A version 3 proof's where: device index dev, 4 KiB sector on it. */
static inline uint64_t tc_state_where(unsigned dev, uint64_t dev_sector)
{
    return (uint64_t)(dev + 1) << 56 | dev_sector;
}
static inline unsigned tc_state_where_dev(uint64_t where) { return (unsigned)(where >> 56) - 1; }
static inline uint64_t tc_state_where_sector(uint64_t where) { return where & ((1ull << 56) - 1); }
/* Encode the header into buf (tc_state_bytes() long, entries already
 * written by state_entry_put()), computing the checksum last. */
void state_encode(uint8_t *buf, const struct tc_state *st);
void state_entry_put(uint8_t *buf, uint32_t version, unsigned spb, uint64_t i, uint64_t oblock,
                     const uint64_t *mask);
/* Check and decode; -1 with a reason in err when the magic, version,
 * length or checksum are wrong or an entry's mask is out of range. */
int state_decode(const uint8_t *buf, size_t len, struct tc_state *st, char *err, size_t errlen);
/* Entry i of a decoded state: the block and its mask (words). */
void state_entry_get(const uint8_t *buf, uint32_t version, unsigned spb, uint64_t i,
                     uint64_t *oblock, uint64_t *mask);
/* Version 3: the proof of sector s of entry i (where 0: none). */
void state_proof_put(uint8_t *buf, unsigned spb, uint64_t i, unsigned s, uint64_t where,
                     uint32_t crc);
void state_proof_get(const uint8_t *buf, unsigned spb, uint64_t i, unsigned s, uint64_t *where,
                     uint32_t *crc);
/* Version 4: the marked sectors of entry i (words) and their digest. */
void state_marks_put(uint8_t *buf, unsigned spb, uint64_t i, const uint64_t *marks,
                     uint32_t digest);
void state_marks_get(const uint8_t *buf, unsigned spb, uint64_t i, uint64_t *marks,
                     uint32_t *digest);

/* ---- sequence record: the newest log chunk the daemon saw durable ---- */

/*
 * A cache device put back from an older copy (a restored backup, a
 * rolled-back snapshot, the wrong one of two disks) carries a log that is
 * whole and consistent, only older: nothing on the device can tell.  So a
 * record of how far the log had reached is kept off the cache devices,
 * beside the state file (its name with ".tcseq" for ".tcstate", or
 * ".tcseq" appended), and a start whose devices hold no chunk as new as
 * the record says was durable refuses them (engine/seqrec.c).  Replaced
 * whole (a temporary file, fdatasync, rename, fsync of the directory).
 *
 *   0    magic "TCSEQRC\1"        u64
 *   8    version (1, 2 or 3)       u32
 *   12   CRC-32C of bytes [0, length) with this field zero   u32
 *   16   set UUID                  16 bytes
 *   32   device count              u32 (1..TC_MAX_DEVICES)
 *   36   flags                     u32 (none defined: 0)
 *   40   chunk_seq                 u64: every chunk of the set's log up to this
 *                                  chunk sequence was written and flushed to
 *                                  the devices when the record was written
 *   48   written (Unix ns)         u64
 *   56   origin size               u64 (bytes, as the superblock records it)
 *   64   device UUIDs              TC_MAX_DEVICES x 16 bytes: the set's devices
 *                                  in its order (unused slots: zero)
 *   320  origin identity           TC_ORIGIN_ID_LEN bytes, NUL-terminated
 *   448  (version 2) device chunks TC_MAX_DEVICES x u64, by the slots of the
 *                                  device UUIDs: device i held a chunk of
 *                                  sequence at least dev_chunk[i], written and
 *                                  flushed to it, when the record was written
 *                                  (0: not known, or that chunk's segment
 *                                  was freed since); never above chunk_seq
 *   576  (version 3) state token   16 bytes: the superblocks' state_token
 *                                  (above) of the set that keeps it
 *   592  (version 4) device marks  TC_MAX_DEVICES x u64, by the slots of the
 *                                  device UUIDs: the failure mark of device i
 *                                  (the superblocks' failed_seq[i]) in force
 *                                  when the record was written (0: none; 0
 *                                  beyond the device count)
 *   448 (version 1), 576 (version 2), 592 (version 3) or 720 (version 4): end
 *
 * Version 2 adds the device chunks.  chunk_seq alone is the set's newest
 * chunk, which any one device may hold: with several devices, an older
 * copy of one of them (the others current) still shows it, and is caught
 * only by its own entry.  A version 1 record is read as one whose device
 * chunks are all unknown, and the next write makes it version 2; a build
 * that knows only version 1 refuses a version 2 record as unusable.
 * Version 3 adds the state token: a set whose superblocks carry one
 * accepts only a record with the same token (a record of versions 1 and
 * 2 has none), wherever it is kept.  Versions 1 and 2 are read, and the
 * next write makes the record version 3; builds that know only versions
 * 1 and 2 refuse a version 3 record as unusable.
 * Version 4 adds the device marks: a device that failed at run time and
 * was taken back carries its failure mark for good, and its entry from
 * before the failure names chunks the mark makes untrusted, so it was
 * never compared again -- and an older copy of it, taken once it was
 * back in service, was served.  An entry is compared when the record was
 * written under the mark the device carries now (a record of versions 1
 * to 3: under none).  Versions 1 to 3 are read; builds that know only
 * versions up to 3 refuse a version 4 record as unusable.
 */
#define TC_SEQREC_MAGIC         0x0143525145534354ull   /* "TCSEQRC\1" */
#define TC_SEQREC_VERSION       4u      /* the version written; 1 to 3 are read too */
#define TC_SEQREC_BYTES_V1      (64u + 16u * TC_MAX_DEVICES + TC_ORIGIN_ID_LEN)
#define TC_SEQREC_BYTES_V2      (TC_SEQREC_BYTES_V1 + 8u * TC_MAX_DEVICES)
#define TC_SEQREC_BYTES_V3      (TC_SEQREC_BYTES_V2 + 16u)
#define TC_SEQREC_BYTES         (TC_SEQREC_BYTES_V3 + 8u * TC_MAX_DEVICES)

struct tc_seqrec {
    uint8_t set_uuid[16];
    uint32_t version;               /* decoded: the file's (encoded: always 4) */
    uint32_t ndevs;
    uint32_t flags;
    uint64_t chunk_seq;
    uint64_t written_ns;
    uint64_t origin_size;
    uint8_t dev_uuids[TC_MAX_DEVICES][16];
    char origin_id[TC_ORIGIN_ID_LEN];
    uint64_t dev_chunk[TC_MAX_DEVICES];     /* version 2 (0: not known) */
    uint8_t token[16];                      /* version 3 (zero: none) */
    uint64_t dev_mark[TC_MAX_DEVICES];      /* version 4 (0: none) */
};

/* Encode into buf (TC_SEQREC_BYTES, version 4), the checksum last. */
void seqrec_encode(uint8_t *buf, const struct tc_seqrec *r);
/* Check and decode versions 1 to 4; -1 with a reason in err when the
 * length, magic, version, checksum or a field is wrong. */
int seqrec_decode(const uint8_t *buf, size_t len, struct tc_seqrec *r, char *err,
                  size_t errlen);

/* ---- chunk header ---- */

enum tc_entry_type {
    TC_ENTRY_DATA = 1,              /* a version of a block: data follows */
    TC_ENTRY_TOMBSTONE = 2,         /* the block is no longer cached */
    TC_ENTRY_CLEAN = 3,             /* dirty sectors of a version are on the origin */
    TC_ENTRY_LOST = 4,              /* the block's sectors whose dirty data was lost
                                       (valid mask; empty: none any more) */
};

/*
 * A linked tombstone (target != 0) goes with one DATA version of the same
 * block, whose sequence its target holds: the block's whole contents,
 * written as one version after a cache device failed (so that no older
 * version of it in the log can come back).  The tombstone's sequence is
 * just below the version's, and every chunk holding a copy of the version
 * holds the tombstone too, before it: a crash keeps both or neither.
 * Recovery applies the tombstone only if that version is there with its
 * data whole (a chunk written after the durable mark may be torn): the
 * tombstone alone would drop the dirty data the version holds.  A reader
 * that does not know the link applies it anyway, as every tombstone, and
 * differs only after such a torn write.  Tombstones were always written
 * with target 0 (no version change).
 */

/* A write-through version, or a version that stores clean sectors of one
 * the origin may not hold durably yet (the cleaner's copy, a merge of the
 * block's fragments): until the newest chunk header's wt_stable_seq reaches
 * the entry's sequence, the origin may lack it, and recovery makes the
 * block dirty unless a later CLEAN record names the version.  While such
 * a version is dirty after a recovery, writers keep wt_stable_seq below it. */
#define TC_ENTRY_WT      (1u << 0)
#define TC_ENTRY_MIRROR  (1u << 1)  /* one of two copies of dirty data */

#define TC_CHUNK_CLOSED  (1u << 0)  /* the last chunk of its segment */
/* Written by a clean stop, after a sync that made every earlier chunk
 * durable (its flushed_seq says up to where).  When the newest chunk of the
 * log carries it, no write was in flight at the stop: a header of a live
 * segment that fails to check, other than one of the stop's own chunks,
 * cannot be a torn write and is damage.  A stop whose origin flush failed
 * does not write it (nor the superblocks' record): the next start then
 * takes the origin to hold writes no flush covered, and flushes it at its
 * first flush (engine/originwin.c).  Readers that do not know the flag
 * lose nothing by ignoring it. */
#define TC_CHUNK_CLEAN_STOP (1u << 1)
/*
 * On every chunk of a run begun by a start that found no clean stop, which
 * skipped numbers (TC_SEQ_RESTART_GAP below): the run's first chunk is then
 * the multiple of the gap just below plus one, and restart_durable holds
 * the log's durable mark as that start found it -- every chunk of the runs
 * before, up to it, was found and checked by that start.  The numbers
 * above it and below the skip may never have reached the device (a crash
 * keeps any subset of the unflushed writes).  Recovery tells by them which
 * missing chunk numbers are damage (engine/recovery.c, missing_chunks()).
 * Without the flag the field is zero; readers that do not know the flag
 * ignore both (the checksum covers them).
 *
 * Every header also names the first chunk of the oldest live group
 * (tail_chunk: of the first group at or after its tail_seq; 0 when not
 * known -- a group read back from a checkpoint, which names no chunk
 * numbers, or none live): the newest header's says from which chunk on
 * recovery must find every number.  And the newest chunk of the run whose
 * write failed, or that was issued when a device failed (failed_chunk; 0:
 * none): its number, or one below it, may name no chunk, and
 * when its device's failure could not be recorded (no room in the log for
 * what the failure must write first, or a crash before the superblocks
 * took the mark) nothing else says so; recovery judges no number at or
 * below it.  Every header sealed after the failed write carries it, so
 * every durable mark that passes that chunk comes with it.  Headers of
 * builds before these fields hold 0 there (unused bytes, always zero).
 */
#define TC_CHUNK_RESTART    (1u << 2)

/* A location in the cache: a segment and a sector offset inside it. */
static inline uint64_t tc_loc(uint32_t segment, uint32_t sector)
{
    return (uint64_t)segment << 32 | sector;
}
static inline uint32_t tc_loc_segment(uint64_t loc) { return (uint32_t)(loc >> 32); }
static inline uint32_t tc_loc_sector(uint64_t loc) { return (uint32_t)loc; }

/* Masks of sectors inside a block: up to 256 sectors (1 MiB blocks). */
#define TC_MASK_WORDS 4
struct tc_mask {
    uint64_t w[TC_MASK_WORDS];
};

/* Every sequence number on disk (a group's, a chunk's, an entry's, the
 * abandonment's) is below TC_SEQ_LIMIT.  A writer taking a million
 * sequence numbers a second reaches it after 146,000 years; a decoder
 * refuses a larger one as damage, so that recovery's "newest + 1" can
 * never wrap to 0 and make old entries newer than new ones. */
#define TC_SEQ_LIMIT (1ull << 62)

/* Sequence numbers are not contiguous.  A start that finds no clean stop
 * (a crash, a power loss, or a first start; not replay's memory devices,
 * which start empty) numbers the groups and entries it writes
 * TC_SEQ_RESTART_GAP above the newest it found, and its chunks from the
 * multiple of the gap past the newest chunk plus the gap (so that a run's
 * first chunk is known from any of its chunks: TC_CHUNK_RESTART), and
 * writes and flushes one chunk (a header with no entries, in a new group)
 * before anything else, so that the next start finds the gap taken.
 *
 * Why: the run that crashed may have issued numbers past the newest chunk
 * the start can walk to -- chunks written but never flushed, most of them
 * lost, a few kept by the device (a volatile write cache keeps any subset
 * of its unflushed writes), among them chunks in segments whose first
 * chunk was lost, which no walk reaches.  Issued again, a number meets
 * such a chunk: a walk or a damage scan of a new group with the same
 * number takes the old chunk for one of the group's -- its entries applied
 * over newer ones, or its sequence taken for proof that a torn chunk was
 * durable (a healthy log refused as damaged).  The gap exceeds what a run
 * can issue between two flushes of the cache devices by far (the commit
 * interval flushes every few seconds; 2^36 is 68 billion numbers), and
 * leaves room for 2^25 such starts below TC_SEQ_LIMIT; a start that would
 * pass the limit is refused (reformat). */
#define TC_SEQ_RESTART_GAP (1ull << 36)

struct tc_entry {
    uint64_t oblock;                /* origin block number */
    uint64_t seq;                   /* update sequence: the newest wins */
    uint8_t type;                   /* enum tc_entry_type */
    uint8_t flags;                  /* TC_ENTRY_* */
    uint32_t data_sector;           /* DATA: offset of its data in the chunk's data */
    uint64_t target;                /* CLEAN: tc_loc() of the DATA version cleaned;
                                       TOMBSTONE: 0, or the sequence of the version
                                       it is linked to (below) */
    struct tc_mask valid;           /* DATA: sectors present, packed in order;
                                       CLEAN: sectors now clean */
    struct tc_mask dirty;           /* DATA: sectors newer than the origin */
};

struct tc_chunk_header {
    uint8_t set_uuid[16];
    uint64_t group_seq;             /* sequence of the group this segment belongs to */
    uint64_t chunk_seq;             /* increases with every chunk written */
    uint64_t tail_seq;              /* groups older than this are free */
    uint64_t wt_stable_seq;         /* writethrough entries up to this are on the origin
                                       (flushed there; see TC_ENTRY_WT) */
    uint32_t segment;               /* global segment number */
    uint32_t chunk_sector;          /* offset of this chunk inside the segment */
    uint16_t hdr_sectors;
    uint16_t flags;                 /* TC_CHUNK_* */
    uint32_t data_sectors;
    uint32_t nr_entries;
    uint64_t written_ns;            /* wall clock when written, for diagnostics */
    uint64_t flushed_seq;           /* every chunk up to this one was flushed when
                                       this one was written: recovery checks the
                                       data of later chunks, which may be torn */
    uint64_t restart_durable;       /* TC_CHUNK_RESTART: the durable mark the start
                                       found (0 otherwise) */
    uint64_t tail_chunk;            /* the first chunk of the oldest group at or
                                       after tail_seq (0: not known) */
    uint64_t failed_chunk;          /* the newest chunk of this run whose write
                                       failed or that was issued when a device
                                       failed, as this one was sealed (0: none) */
};

enum {
    CH_OFF_MAGIC = 0, CH_OFF_VERSION = 8, CH_OFF_CRC = 12, CH_OFF_SET_UUID = 16,
    CH_OFF_GROUP_SEQ = 32, CH_OFF_CHUNK_SEQ = 40, CH_OFF_TAIL_SEQ = 48,
    CH_OFF_WT_STABLE_SEQ = 56, CH_OFF_SEGMENT = 64, CH_OFF_CHUNK_SECTOR = 68,
    CH_OFF_HDR_SECTORS = 72, CH_OFF_FLAGS = 74, CH_OFF_DATA_SECTORS = 76,
    CH_OFF_NR_ENTRIES = 80, CH_OFF_WRITTEN_NS = 88, CH_OFF_FLUSHED_SEQ = 96,
    CH_OFF_RESTART_DURABLE = 104, CH_OFF_TAIL_CHUNK = 112,
    CH_OFF_FAILED_CHUNK = 120,
    CH_OFF_ENTRIES = 128,
};

/* Bytes of one encoded entry for a block of sectors_per_block sectors:
 * 32 bytes, then the valid and the dirty mask in whole 64-bit words. */
static inline size_t tc_entry_size(unsigned sectors_per_block)
{
    return 32 + 2 * 8 * (size_t)((sectors_per_block + 63) / 64);
}

/* Bytes an encoded header needs for n entries and d data sectors
 * (the per-sector CRC array follows the entries). */
static inline size_t tc_chunk_header_bytes(unsigned spb, uint32_t n, uint32_t d)
{
    return CH_OFF_ENTRIES + (size_t)n * tc_entry_size(spb) + 4 * (size_t)d;
}

/* Encode hdr and its entries and data CRCs into buf (hdr_sectors * 4096
 * bytes, every one written: what no field fills is zeroed), computing the
 * header checksum last. */
void chunk_encode(uint8_t *buf, const struct tc_chunk_header *hdr, const struct tc_entry *entries,
                  const uint32_t *data_crcs, unsigned spb);
/* Decode and check a header read from disk.  Returns 0 and fills hdr;
 * -1 with a reason in err when the magic, version, set, size fields or
 * checksum are wrong.  Entries are not decoded here (see chunk_entry). */
int chunk_decode(const uint8_t *buf, size_t buflen, const uint8_t set_uuid[16], unsigned spb,
                 uint32_t segment_sectors, struct tc_chunk_header *hdr, char *err,
                 size_t errlen);
/* Entry i of a header that chunk_decode() accepted; -1 (with err) if it
 * is malformed (unknown type, data outside the chunk, masks out of range). */
int chunk_entry(const uint8_t *buf, const struct tc_chunk_header *hdr, unsigned spb, uint32_t i,
                struct tc_entry *e, char *err, size_t errlen);
/* The block number field of entry i (i < nr_entries of a header that
 * chunk_decode() accepted), unchecked: for hints such as prefetching,
 * never for a decision. */
uint64_t chunk_entry_oblock(const uint8_t *buf, unsigned spb, uint32_t i);
/* The CRC of data sector i of the chunk. */
uint32_t chunk_data_crc(const uint8_t *buf, const struct tc_chunk_header *hdr, unsigned spb,
                        uint32_t i);

/* ---- little-endian helpers ---- */

static inline void le16_put(uint8_t *p, uint16_t v) { v = htole16(v); __builtin_memcpy(p, &v, 2); }
static inline void le32_put(uint8_t *p, uint32_t v) { v = htole32(v); __builtin_memcpy(p, &v, 4); }
static inline void le64_put(uint8_t *p, uint64_t v) { v = htole64(v); __builtin_memcpy(p, &v, 8); }
static inline uint16_t le16_get(const uint8_t *p) { uint16_t v; __builtin_memcpy(&v, p, 2); return le16toh(v); }
static inline uint32_t le32_get(const uint8_t *p) { uint32_t v; __builtin_memcpy(&v, p, 4); return le32toh(v); }
static inline uint64_t le64_get(const uint8_t *p) { uint64_t v; __builtin_memcpy(&v, p, 8); return le64toh(v); }

#endif
