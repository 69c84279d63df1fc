/* tiercache format: create a cache set (see src/format/format.c). */
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "format/format.h"
#include "io/claim.h"
#include "util/log.h"
#include "util/misc.h"
#include "util/parse.h"

/*
 * For tests only: with TIERCACHE_TEST_FORMAT_PAUSE=FILE in the
 * environment, format stops after its checks, before it writes anything:
 * it creates FILE.paused and waits while FILE exists.  A test can then
 * try other commands on the devices at exactly that moment.
 */
static void test_pause(void)
{
    const char *f = getenv("TIERCACHE_TEST_FORMAT_PAUSE");
    if (f == NULL || *f == '\0')
        return;
    char paused[4200];
    snprintf(paused, sizeof paused, "%s.paused", f);
    int fd = open(paused, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0)
        close(fd);
    struct timespec ts = { .tv_sec = 0, .tv_nsec = 10 * 1000 * 1000 };
    while (access(f, F_OK) == 0)
        nanosleep(&ts, NULL);
}

static const char format_help[] =
"Usage: tiercache format --cache DEV[,DEV...] --origin ORIGIN [OPTIONS]\n"
"\n"
"Prepare one or more fast devices (files or block devices) to cache ORIGIN.\n"
"Only the superblocks are written, and cache files are preallocated\n"
"(fallocate) so that they cannot run out of room while serving.  Refused\n"
"for an origin last served with another cache set that may hold writes it\n"
"lacks (stopped with dirty data, or killed: see tiercache(8), CLAIMS).\n"
"\n"
"  --cache DEV[,DEV...]  the cache devices; with several, the cache log is\n"
"                        striped over all of them (one segment on each)\n"
"  --origin ORIGIN       the file, block device or NBD URI to be cached; its\n"
"                        size and identity are recorded, and serve refuses\n"
"                        any other origin\n"
"  --block-size SIZE     unit of the cache index, a power of two from 4K to\n"
"                        1M (default 64K); valid and dirty data are tracked\n"
"                        per 4 KiB inside it\n"
"  --segment-size SIZE   unit of space reclaim, a power of two from 1M to\n"
"                        256M; writes to the cache are clustered into\n"
"                        segments (default 4M, halved down to 1M while the\n"
"                        smallest device would hold fewer than 64, so the\n"
"                        segments the cleaner keeps free are a small part)\n"
"  --force               format even if a device holds a tiercache cache, a\n"
"                        file system, or any data (a byte that is not zero in\n"
"                        its first 68 KiB, in 8 places spread over it, or,\n"
"                        in a file, at the start of any of its first 4096\n"
"                        extents holding data: maybe another volume's\n"
"                        origin, a sparse image); its contents are\n"
"                        lost.  Never a device in use (claimed by a daemon,\n"
"                        mounted), never the origin of a cache set that may\n"
"                        hold writes it lacks (its record names the set),\n"
"                        and never for an origin that holds a tiercache\n"
"                        superblock.  An old\n"
"                        cache set is read first (as check reads it, writing\n"
"                        nothing): if it holds dirty data (acknowledged\n"
"                        writes its origin lacks) or lost sectors, it is\n"
"                        refused, naming the devices and how much; serve it\n"
"                        with its origin and run 'tiercache flush' first.  A\n"
"                        set whose log cannot be read (damaged, another\n"
"                        format version, devices of the set not given) is\n"
"                        refused too, and so is an older copy of a set\n"
"                        holding dirty data (its log older than its\n"
"                        sequence record says: serve refuses it, and its\n"
"                        dirty data is older than the origin's), saying so\n"
"  --discard-dirty       with --force: format over an old cache set without\n"
"                        reading it, discarding its dirty data knowingly\n"
"  --allow-sparse        leave a sparse cache file sparse, even when its file\n"
"                        system lacks the room to fill it (without it such a\n"
"                        file is refused): a full file system then fails the\n"
"                        cache device while serving; its dirty data is\n"
"                        read back from it and appended on the other devices\n"
"                        (the last device in service drains it to the\n"
"                        origin, and a drain a kill or crash cuts short is\n"
"                        resumed by the next start); what cannot be read\n"
"                        back is lost (reads of it fail with EIO)\n"
"  --help, -h            this text\n"
"\n"
"Exit status: 0 formatted, 1 refused or failed (nothing was written), 2 bad\n"
"usage.\n";

const char **cli_split_list(const char *what, char *s, unsigned max, unsigned *count)
{
    const char **v = tc_xcalloc(max + 1, sizeof *v);
    unsigned n = 0;
    char *p = *s != '\0' ? s : NULL;     /* "": no element */
    while (p) {
        char *comma = strchr(p, ',');
        if (comma)
            *comma = '\0';
        if (*p == '\0')
            tc_die(2, "%s: an empty element in the list (two commas together, or one at "
                   "an end)", what);
        if (n == max)
            tc_die(2, "%s: more than %u elements", what, max);
        v[n++] = p;
        p = comma ? comma + 1 : NULL;
    }
    *count = n;
    return v;
}

int cmd_format(int argc, char **argv)
{
    static const struct option opts[] = {
        { "cache", required_argument, NULL, 'c' },
        { "origin", required_argument, NULL, 'o' },
        { "block-size", required_argument, NULL, 'b' },
        { "segment-size", required_argument, NULL, 's' },
        { "force", no_argument, NULL, 'F' },
        { "allow-sparse", no_argument, NULL, 'S' },
        { "discard-dirty", no_argument, NULL, 'D' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    struct tc_format_opts o = { .block_size = TC_DEFAULT_BLOCK_SIZE,
                                .segment_size = 0 /* chosen by the devices' size */ };
    char *caches = NULL;
    bool discard_dirty = false;
    char err[2048];
    uint64_t v;
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (opt) {
        case 'c': caches = optarg; break;
        case 'o': o.origin = optarg; break;
        case 'b':
            if (tc_parse_size("--block-size", optarg, &v, err, sizeof err) < 0)
                tc_die(2, "%s", err);
            if (v > UINT32_MAX)
                tc_die(2, "--block-size %s: must be a power of two from 4K to 1M", optarg);
            o.block_size = (uint32_t)v;
            break;
        case 's':
            if (tc_parse_size("--segment-size", optarg, &v, err, sizeof err) < 0)
                tc_die(2, "%s", err);
            /* 0 is no size: the default is the option left out. */
            if (v == 0 || v > UINT32_MAX)
                tc_die(2, "--segment-size %s: must be a power of two from 1M to 256M (leave "
                       "the option out for the default)", optarg);
            o.segment_size = (uint32_t)v;
            break;
        case 'F': o.force = true; break;
        case 'S': o.allow_sparse = true; break;
        case 'D': discard_dirty = true; break;
        case 'h': cli_print(format_help); return 0;
        default: fprintf(stderr, "Try 'tiercache format --help'.\n"); return 2;
        }
    }
    if (optind < argc)
        tc_die(2, "format: unexpected argument '%s'", argv[optind]);
    if (caches == NULL || o.origin == NULL)
        tc_die(2, "format: --cache and --origin are required (try --help)");
    unsigned n;
    const char **list = cli_split_list("--cache", caches, 32, &n);
    o.caches = list;
    struct tc_format_result res;
    claim_set_dir(cli_run_dir());
    if (discard_dirty && !o.force) {
        free(list);
        tc_die(2, "format: --discard-dirty goes with --force");
    }
    /* Format's own checks first (a set in use is refused, naming its
     * daemon); then the old sets' dirty data, read before anything is
     * written (format_dirty.c). */
    struct claim_set *held[TC_MAX_DEVICES];
    unsigned nheld = 0;
    if (o.force && !discard_dirty) {
        o.check_only = true;
        int rc = tc_format(&o, &res, err, sizeof err);
        if (rc == 0)
            rc = cli_format_dirty_check(o.caches, held, &nheld, err, sizeof err);
        if (rc < 0) {
            for (unsigned i = 0; i < nheld; i++)
                claim_set_release(held[i]);
            free(list);
            tc_die(1, "format: %s", err);
        }
        o.check_only = false;
    }
    test_pause();
    int rc = tc_format(&o, &res, err, sizeof err);
    /* The old sets' locks, held since the look at their logs. */
    for (unsigned i = 0; i < nheld; i++)
        claim_set_release(held[i]);
    if (rc < 0) {
        free(list);
        tc_die(1, "format: %s", err);
    }
    char uuid[37], cap[32], seg[32], osz[32];
    tc_uuid_format(res.set_uuid, uuid);
    printf("formatted cache set %s: %u device%s, %u segments of %s (%s), blocks of %u KiB, "
           "for origin %s (%s)\n",
           uuid, res.devices, res.devices == 1 ? "" : "s", res.segments,
           tc_format_size(res.segment_size, seg, sizeof seg),
           tc_format_size(res.capacity, cap, sizeof cap), o.block_size >> 10, o.origin,
           tc_format_size(res.origin_size, osz, sizeof osz));
    if (res.preallocated)
        printf("preallocated %s in the cache file%s\n",
               tc_format_size(res.preallocated, cap, sizeof cap), res.files == 1 ? "" : "s");
    if (res.sparse_files)
        printf("left %u cache file%s sparse (--allow-sparse): a full file system will fail the "
               "cache while serving\n", res.sparse_files, res.sparse_files == 1 ? "" : "s");
    free(list);
    return 0;
}
