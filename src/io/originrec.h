/* The origin's record of the cache set it was last served with: an origin
 * whose cache may hold writes it lacks is not served without that cache
 * (originrec.c). */
#ifndef TC_IO_ORIGINREC_H
#define TC_IO_ORIGINREC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/dev.h"

/* Where the records are kept: $TIERCACHE_ORIGIN_RECORDS, else this (and,
 * for a user other than root, $XDG_STATE_HOME/tiercache or
 * ~/.local/state/tiercache first; originrec.c). */
#define ORIGINREC_DIR "/var/lib/tiercache"

struct originrec {
    char path[4096];                /* the record's file */
    bool found;
    bool readable;                  /* found, and every field parsed */
    char set[37];                   /* the set's UUID, as tc_uuid_format() writes it */
    char origin[512];               /* the origin as it was named then */
    char devices[2048];             /* the set's devices, comma-separated */
    /* Found under another identity whose bytes overlap the origin's
     * (struct dev_extent): the same data given by another name. */
    bool overlap;
    struct dev_extent extent;       /* the bytes the record's origin was */
    /* Found under another identity with the same path: another file was
     * at the origin's path (moved, copied or restored over since). */
    bool by_path;
};

/* The record of origin d, in any of the places records are kept: under
 * its identity, its twin's, or any other whose recorded bytes overlap
 * d's (dev_data_extent()) or whose origin had d's path (another file at
 * it then) -- the first that does not name accept_set,
 * when given (a record of that set does not refuse it).  0, with r->found
 * false when there is none; -1 with a message naming the directory and
 * the ways on when a place or a file cannot be read. */
int originrec_read(const struct tc_dev *d, const uint8_t *accept_set, struct originrec *r,
                   char *err, size_t errlen);

/* The identity of the same data as a file and as a loop device over it at
 * offset 0, the other way round (io/dev_file.c: "file:MAJ:MIN:INO[:bB]"
 * and "loop:MAJ:MIN:INO:0[:bB]"): records are read and removed under
 * both, so that an origin served through a loop device over its file is
 * guarded when served as the file (and the reverse).  false if identity
 * is neither (or a loop device at another offset). */
bool originrec_twin(const char *identity, char *out, size_t len);

/* The message refusing to use the origin without the set r names, for
 * WHAT ("serving it without that cache", ...). */
void originrec_refusal(const struct originrec *r, const char *origin, const char *what,
                       char *err, size_t errlen);

/* Record that origin d is served with set_uuid on devices (names as
 * given; made absolute), with d's identity and the bytes it is
 * (dev_data_extent()), in the place records are written (made if
 * missing): written to a file beside it, synced, renamed over it, the
 * directory synced.  0, or -1 with the refusal, naming the directory and
 * the ways on, in err. */
int originrec_write(const struct tc_dev *d, const char *origin, const uint8_t set_uuid[16],
                    const char *const *devices, char *err, size_t errlen);

/* Remove the records of origin d that name set_uuid (those
 * originrec_read() finds: its identity's, its twin's, and those whose
 * bytes overlap d's), in every place this user can (durably): the origin
 * holds every acknowledged write of that set.  0, or -errno. */
int originrec_remove(const struct tc_dev *d, const uint8_t set_uuid[16]);

/* The set's stop record (originrec.c): how far the log of cache set
 * set_uuid had reached at its last clean stop (its newest chunk), or
 * since, while serving (at_stop false: the sequence record's chunk), kept
 * with the origin records, away from the set's devices and state folder,
 * so that an older copy of the set restored with its state folder is
 * still told (engine/seqrec.c).  Written in the place records are
 * written (synced, renamed over the old one); read from every place (the
 * highest chunk found).  read: 0, s->found saying if there is one; -1
 * with s->why when one cannot be read or is damaged (those found
 * readable are in s as well).  write, remove: 0 or -errno.
 * write_salvaged: check --salvage wrote the set's dirty data to the
 * origin, whose stamp was then *origin (s->salvaged, s->salvaged_stamp),
 * and its writer token writer_token (the salvage's own first write made
 * it: the origin's last writer, below). */
/* What shows a write to an origin since (engine/originstop.c): a file's
 * modification time, a block device's count of sectors written with its
 * sequence number and the boot ID (zero: not known). */
/* A writer token (below, "the origin's last writer"): hex digits of 16
 * random bytes. */
#define ORIGINREC_TOKEN_LEN 32

struct originrec_stamp {
    uint64_t mtime;
    uint64_t written;
    uint64_t diskseq;
    uint8_t boot_id[16];
};
struct originrec_stop {
    bool found;
    bool serving;               /* written while serving, not at a clean stop */
    uint64_t chunk;
    char path[4200];
    char why[4400];
    /* The newest record was written by check --salvage, once it had
     * written the set's dirty data to the origin: the origin's stamp
     * then. */
    bool salvaged;
    struct originrec_stamp salvaged_stamp;
    /* The origin's writer token a clean stop found (originrec_writer_*;
     * empty: none kept, a record of an older build or written while
     * serving). */
    char writer_token[ORIGINREC_TOKEN_LEN + 1];
    /* The newest record was written when the cache was abandoned at run
     * time (engine/seqrec.c, seqrec_abandoned()): its log sequence, which
     * the state file records too (0: not such a record). */
    uint64_t abandoned_seq;
};
int originrec_stop_write(const uint8_t set_uuid[16], uint64_t chunk, bool at_stop,
                         const char *writer_token);
/* The cache was abandoned at log sequence abandoned_seq: chunk 0 (no copy
 * of the devices is refused for their chunks: the log below is untrusted
 * anyway), and the abandonment, which a start whose state file and
 * devices do not record it is refused for (engine/abandon.c). */
int originrec_stop_write_abandoned(const uint8_t set_uuid[16], uint64_t abandoned_seq);
int originrec_stop_write_salvaged(const uint8_t set_uuid[16], uint64_t chunk,
                                  const struct originrec_stamp *origin, const char *writer_token);
int originrec_stop_read(const uint8_t set_uuid[16], struct originrec_stop *s);
int originrec_stop_remove(const uint8_t set_uuid[16]);

/* The origin's last writer (originrec.c, "the origin's last writer"): the
 * first write, trim or write-zeroes a run sends origin d records a new
 * random token, with the cache set the run serves it with (set_uuid NULL:
 * none) and when, in the place records are written (durably: synced,
 * renamed over the old one).  A set's clean stop keeps the token it finds
 * then in its stop record (writer_token), and its next start compares:
 * another token means another run wrote the origin since
 * (engine/originstop.c) -- the only record there is of that for an origin
 * with no time or count (an NBD export), when tiercache wrote it.  read:
 * the newest record of d's identity or its twin in every place; 0,
 * w->found saying if there is one; -1 with w->why when one cannot be read
 * or is damaged.  write: 0 or -errno. */
struct originrec_writer {
    bool found;
    bool none;                      /* served without a cache */
    char set[37];                   /* else the set's UUID */
    uint64_t since_ns;              /* when that run first wrote */
    char token[ORIGINREC_TOKEN_LEN + 1];
    char path[4200];
    char why[4400];
};
int originrec_writer_write(const struct tc_dev *d, const uint8_t *set_uuid);
int originrec_writer_read(const struct tc_dev *d, struct originrec_writer *w);
/* The token a stop record keeps when no run had written the origin (no
 * writer record): any writer record found later is another run's. */
#define ORIGINREC_TOKEN_NONE "00000000000000000000000000000000"

#endif
