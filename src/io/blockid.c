/*
 * Block device identities from sysfs (see blockid.h).
 *
 *   a disk with a WWID or serial    block:WWID:0
 *   a partition with a PARTUUID     partuuid:UUID
 *   a partition without one, of a   block:WWID:START   (START: its first
 *     disk with a WWID or serial                         sector)
 *   a device-mapper device          dm:UUID (dm/uuid), or dm-name:NAME
 *                                   when it was made without a UUID
 *   an md array                     md:UUID (md/uuid)
 *   anything else                   block:MAJ:MIN
 *
 * Older builds looked for a WWID or serial on the device itself only, so
 * a partition (which has no device/ link of its own), a dm device and an
 * md array were recorded by device number: that form is given as the
 * legacy identity, accepted and then rewritten (dev_identity_matches()).
 */
#include "io/blockid.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "util/misc.h"

/* The first line of attribute attr of MAJ:MIN, without its newline: true
 * if it is not empty. */
static bool read_attr(const char *root, unsigned maj, unsigned min, const char *attr, char *buf,
                      size_t len)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/dev/block/%u:%u/%s", root, maj, min, attr);
    FILE *fp = fopen(path, "re");
    if (fp == NULL)
        return false;
    bool ok = fgets(buf, (int)len, fp) != NULL;
    fclose(fp);
    if (!ok)
        return false;
    buf[strcspn(buf, "\n")] = '\0';
    return buf[0] != '\0';
}

static unsigned long long read_start(const char *root, unsigned maj, unsigned min)
{
    char buf[32];
    unsigned long long start;
    if (!read_attr(root, maj, min, "start", buf, sizeof buf) ||
        sscanf(buf, "%llu", &start) != 1)
        return 0;
    return start;
}

/* A WWID or serial among the attributes under dir ("" for the device
 * itself, "../" for a partition's disk), as the first form read it (96
 * bytes, so that long ones are cut as they always were). */
static bool wwid_or_serial(const char *root, unsigned maj, unsigned min, const char *dir,
                           char *buf, size_t len)
{
    static const char *attrs[] = { "device/wwid", "wwid", "device/serial", "serial" };
    char attr[64];
    for (size_t i = 0; i < TC_ARRAY_SIZE(attrs); i++) {
        snprintf(attr, sizeof attr, "%s%s", dir, attrs[i]);
        if (read_attr(root, maj, min, attr, buf, len))
            return true;
    }
    return false;
}

/* The one form older builds knew: the device's own WWID or serial (with
 * the start sector, 0 for a disk), else its number. */
static void old_identity(const char *root, unsigned maj, unsigned min, char *out, size_t len)
{
    char buf[96];
    if (wwid_or_serial(root, maj, min, "", buf, sizeof buf))
        snprintf(out, len, "block:%s:%llu", buf, read_start(root, maj, min));
    else
        snprintf(out, len, "block:%u:%u", maj, min);
}

/* PARTUUID= from the partition's uevent. */
static bool partuuid(const char *root, unsigned maj, unsigned min, char *buf, size_t len)
{
    char path[1024], line[256];
    snprintf(path, sizeof path, "%s/dev/block/%u:%u/uevent", root, maj, min);
    FILE *fp = fopen(path, "re");
    if (fp == NULL)
        return false;
    bool found = false;
    while (!found && fgets(line, sizeof line, fp)) {
        line[strcspn(line, "\n")] = '\0';
        if (strncmp(line, "PARTUUID=", 9) == 0 && line[9]) {
            snprintf(buf, len, "%s", line + 9);
            found = true;
        }
    }
    fclose(fp);
    return found;
}

void block_identity(const char *root, unsigned maj, unsigned min, char *out, size_t len,
                    char *legacy, size_t legacylen)
{
    char old[256], id[256 + 16], buf[256];
    old_identity(root, maj, min, old, sizeof old);
    snprintf(id, sizeof id, "%s", old);
    char part[8];
    if (read_attr(root, maj, min, "partition", part, sizeof part)) {
        /* A partition: /sys/dev/block/MAJ:MIN links to the partition's
         * directory, inside its disk's, so "../" is the disk. */
        char wwid[96];
        if (partuuid(root, maj, min, buf, sizeof buf))
            snprintf(id, sizeof id, "partuuid:%s", buf);
        else if (wwid_or_serial(root, maj, min, "../", wwid, sizeof wwid))
            snprintf(id, sizeof id, "block:%s:%llu", wwid, read_start(root, maj, min));
    } else if (read_attr(root, maj, min, "dm/uuid", buf, sizeof buf)) {
        snprintf(id, sizeof id, "dm:%s", buf);
    } else if (read_attr(root, maj, min, "dm/name", buf, sizeof buf)) {
        snprintf(id, sizeof id, "dm-name:%s", buf);
    } else if (read_attr(root, maj, min, "md/uuid", buf, sizeof buf)) {
        snprintf(id, sizeof id, "md:%s", buf);
    }
    snprintf(out, len, "%s", id);
    if (strcmp(id, old) != 0)
        snprintf(legacy, legacylen, "%s", old);
    else if (legacylen)
        legacy[0] = '\0';
}

bool block_under(const char *root, unsigned maj, unsigned min, struct block_under *u)
{
    char buf[64];
    bool under = false;
    u->maj = maj;
    u->min = min;
    u->start = 0;
    u->file[0] = '\0';
    if (read_attr(root, maj, min, "partition", buf, sizeof buf)) {
        /* "../" is the disk (block_identity()); "start" counts 512-byte
         * sectors whatever the logical block size. */
        unsigned dmaj, dmin;
        if (read_attr(root, maj, min, "../dev", buf, sizeof buf) &&
            sscanf(buf, "%u:%u", &dmaj, &dmin) == 2) {
            u->maj = dmaj;
            u->min = dmin;
            u->start = (uint64_t)read_start(root, maj, min) * 512;
            under = true;
        }
    }
    unsigned long long off;
    if (read_attr(root, u->maj, u->min, "loop/backing_file", u->file, sizeof u->file)) {
        under = true;
        if (read_attr(root, u->maj, u->min, "loop/offset", buf, sizeof buf) &&
            sscanf(buf, "%llu", &off) == 1)
            u->start += off;
        /* The loop driver names a file removed since "PATH (deleted)": the
         * path may name another file by now. */
        size_t n = strlen(u->file);
        if (u->file[0] != '/' || (n > 10 && strcmp(u->file + n - 10, " (deleted)") == 0))
            u->file[0] = '\0';
    }
    return under;
}
