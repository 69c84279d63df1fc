/*
 * What the kernel counted written to a block device since it appeared.
 *
 * A regular-file origin written while no daemon served its cache shows it
 * by its modification time (engine/cache.c, cache_origin_changed()).  A
 * block device keeps no such time, but the kernel counts every sector
 * written to it and every sector discarded (/sys/dev/block/MAJ:MIN/stat,
 * the seventh and the fourteenth numbers; a partition has its own).  The
 * counts only grow while the device exists, so two of them taken by one
 * boot of the machine, of one instance of the device, tell whether
 * anything wrote it in between:
 *
 *   boot_id    /proc/sys/kernel/random/boot_id: counts of different boots
 *              cannot be compared (they start again at 0)
 *   diskseq    the device's sequence number (/sys/.../diskseq, of the
 *              partition's disk for a partition): a new one each time the
 *              device is set up again in a boot (a loop device detached
 *              and attached, a disk removed and plugged in), whose counts
 *              start again at 0; 0 when the kernel gives none (before
 *              Linux 5.15), then a count below the recorded one tells it
 *   sectors    written + discarded (a write of zeroes counts as written)
 *
 * Not counted: a device whose I/O statistics are turned off (queue/iostats
 * 0: none is reported, as "no count"), writes to another device node
 * covering the same sectors (the whole disk of a partition origin), a
 * driver that keeps no statistics at all (its count stays 0), and writes
 * to a loop device's backing file that go around the device -- for those
 * the file's modification time is taken (dev_loop_backing_mtime()).
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "io/writecount.h"
#include "util/misc.h"

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" into 16 bytes. */
static bool parse_uuid(const char *s, uint8_t out[16])
{
    unsigned n = 0;
    bool any = false;
    for (; *s && *s != '\n' && n < 32; s++) {
        if (*s == '-')
            continue;
        int v = hex_digit(*s);
        if (v < 0)
            return false;
        if (n % 2 == 0)
            out[n / 2] = (uint8_t)(v << 4);
        else
            out[n / 2] |= (uint8_t)v;
        any |= v != 0;
        n++;
    }
    return n == 32 && any;
}

bool dev_write_count(const struct tc_dev *d, struct dev_write_count *out)
{
    unsigned maj, min;
    if (!dev_block_number(d, &maj, &min))
        return false;
    memset(out, 0, sizeof *out);
    char line[512], dir[64], path[128];
    if (!tc_read_first_line("/proc/sys/kernel/random/boot_id", line, sizeof line) ||
        !parse_uuid(line, out->boot_id))
        return false;
    snprintf(dir, sizeof dir, "/sys/dev/block/%u:%u", maj, min);
    /* A partition's queue and sequence number are its disk's. */
    snprintf(path, sizeof path, "%s/partition", dir);
    const char *disk = tc_read_first_line(path, line, sizeof line) ? "/.." : "";
    snprintf(path, sizeof path, "%s%s/queue/iostats", dir, disk);
    if (tc_read_first_line(path, line, sizeof line) && line[0] == '0')
        return false;
    snprintf(path, sizeof path, "%s/stat", dir);
    unsigned long long f[14] = { 0 };
    if (!tc_read_first_line(path, line, sizeof line))
        return false;
    int got = sscanf(line, "%llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu "
                     "%llu", &f[0], &f[1], &f[2], &f[3], &f[4], &f[5], &f[6], &f[7], &f[8],
                     &f[9], &f[10], &f[11], &f[12], &f[13]);
    if (got < 7)
        return false;
    /* Discards are counted since Linux 4.18 (14 numbers and more). */
    out->sectors = f[6] + (got >= 14 ? f[13] : 0);
    snprintf(path, sizeof path, "%s%s/diskseq", dir, disk);
    unsigned long long seq;
    if (tc_read_first_line(path, line, sizeof line) && sscanf(line, "%llu", &seq) == 1)
        out->diskseq = seq;
    return true;
}

bool dev_loop_backing_mtime(const struct tc_dev *d, char *out, size_t len, uint64_t *ns)
{
    unsigned maj, min;
    if (!dev_block_number(d, &maj, &min))
        return false;
    char path[128], line[4096];
    snprintf(path, sizeof path, "/sys/dev/block/%u:%u/partition", maj, min);
    const char *disk = tc_read_first_line(path, line, sizeof line) ? "/.." : "";
    snprintf(path, sizeof path, "/sys/dev/block/%u:%u%s/loop/backing_file", maj, min, disk);
    struct stat st;
    if (!tc_read_first_line(path, line, sizeof line))
        return false;
    line[strcspn(line, "\n")] = '\0';
    if (line[0] != '/' || stat(line, &st) < 0 || !S_ISREG(st.st_mode))
        return false;
    snprintf(out, len, "%s", line);
    *ns = (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec;
    return true;
}
