/*
 * Block device identities (block_identity(), io/blockid.c) over a fake
 * sysfs tree built here the way the kernel lays it out: /sys/dev/block/
 * MAJ:MIN links into /sys/devices/..., a partition's directory inside its
 * disk's.  Every form: a disk by its WWID, a partition by its PARTUUID,
 * one without by its disk's WWID (or NVMe-style wwid) and start sector, a
 * dm device by its UUID or else its name, an md array by its UUID, and
 * the device number when nothing better is known; with, each time, the
 * form older builds recorded as the legacy identity, which
 * dev_identity_matches() accepts.  And what a device is a window into
 * (block_under()): a partition its disk from its start, a loop device its
 * backing file from its offset, a partition of a loop device that file
 * from both.
 */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/blockid.h"
#include "io/dev.h"

#include "check.h"

static char root[256];

static void mkdirs(const char *rel)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0755);
            *p = '/';
        }
    }
    mkdir(path, 0755);
}

/* A file of the tree (its directories made as needed). */
static void put(const char *rel, const char *text)
{
    char dir[1024], path[1024];
    snprintf(dir, sizeof dir, "%s", rel);
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = '\0';
        mkdirs(dir);
    }
    snprintf(path, sizeof path, "%s/%s", root, rel);
    FILE *fp = fopen(path, "w");
    CHECK(fp != NULL);
    if (fp) {
        fputs(text, fp);
        fclose(fp);
    }
}

/* /sys/dev/block/MAJ:MIN -> ../../devices/DIR, as the kernel links it. */
static void devlink(const char *majmin, const char *dir)
{
    char target[512], path[1024];
    mkdirs("dev/block");
    mkdirs(dir);
    snprintf(target, sizeof target, "../../%s", dir);
    snprintf(path, sizeof path, "%s/dev/block/%s", root, majmin);
    CHECK(symlink(target, path) == 0);
}

static void expect(unsigned maj, unsigned min, const char *id, const char *legacy)
{
    char out[128], old[128];
    memset(old, 'x', sizeof old);
    block_identity(root, maj, min, out, sizeof out, old, sizeof old);
    if (strcmp(out, id) != 0 || strcmp(old, legacy) != 0)
        fprintf(stderr, "%u:%u: got '%s' (legacy '%s'), want '%s' (legacy '%s')\n", maj, min,
                out, old, id, legacy);
    CHECK(strcmp(out, id) == 0);
    CHECK(strcmp(old, legacy) == 0);

    /* A superblock holding either form is this device's. */
    struct tc_dev *d = calloc(1, sizeof *d);
    snprintf(d->identity, sizeof d->identity, "%s", out);
    snprintf(d->legacy_identity, sizeof d->legacy_identity, "%s", old);
    CHECK(dev_identity_matches(d, id, 127) == DEV_ID_SAME);
    if (legacy[0])
        CHECK(dev_identity_matches(d, legacy, 127) == DEV_ID_LEGACY);
    CHECK(dev_identity_matches(d, "block:1:2", 127) == DEV_ID_OTHER);
    free(d);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

int main(void)
{
    const char *tmp = getenv("TC_TMP");
    snprintf(root, sizeof root, "%s/sysfs.XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (mkdtemp(root) == NULL) {
        perror("mkdtemp");
        return 1;
    }

    /* A SCSI disk with a WWID and three partitions: one with a PARTUUID,
     * one without (its disk's WWID and its start sector), one whose
     * uevent has other lines only. */
    const char *sdb = "devices/pci0000:00/host0/target0:0:0/0:0:0:0/block/sdb";
    char dir[512];
    devlink("8:16", sdb);
    snprintf(dir, sizeof dir, "%s/device/wwid", sdb);
    put(dir, "naa.5000c500a1b2c3d4\n");
    snprintf(dir, sizeof dir, "%s/sdb1", sdb);
    devlink("8:17", dir);
    snprintf(dir, sizeof dir, "%s/sdb1/partition", sdb);
    put(dir, "1\n");
    snprintf(dir, sizeof dir, "%s/sdb1/start", sdb);
    put(dir, "2048\n");
    snprintf(dir, sizeof dir, "%s/sdb1/uevent", sdb);
    put(dir, "MAJOR=8\nMINOR=17\nDEVNAME=sdb1\nDEVTYPE=partition\nPARTN=1\n"
             "PARTUUID=0b3f5a2e-7c41-4d7e-9f1a-2b6c8d0e4f13\n");
    snprintf(dir, sizeof dir, "%s/sdb2", sdb);
    devlink("8:18", dir);
    snprintf(dir, sizeof dir, "%s/sdb2/partition", sdb);
    put(dir, "2\n");
    snprintf(dir, sizeof dir, "%s/sdb2/start", sdb);
    put(dir, "1050624\n");
    snprintf(dir, sizeof dir, "%s/sdb2/uevent", sdb);
    put(dir, "MAJOR=8\nMINOR=18\nDEVNAME=sdb2\nDEVTYPE=partition\nPARTN=2\n");

    expect(8, 16, "block:naa.5000c500a1b2c3d4:0", "");
    expect(8, 17, "partuuid:0b3f5a2e-7c41-4d7e-9f1a-2b6c8d0e4f13", "block:8:17");
    expect(8, 18, "block:naa.5000c500a1b2c3d4:1050624", "block:8:18");

    /* An NVMe namespace: its wwid is its own attribute, no device/. */
    const char *nvme = "devices/pci0000:00/nvme/nvme0/nvme0n1";
    devlink("259:0", nvme);
    snprintf(dir, sizeof dir, "%s/wwid", nvme);
    put(dir, "eui.0025388b91c2a3f4\n");
    snprintf(dir, sizeof dir, "%s/nvme0n1p3", nvme);
    devlink("259:3", dir);
    snprintf(dir, sizeof dir, "%s/nvme0n1p3/partition", nvme);
    put(dir, "3\n");
    snprintf(dir, sizeof dir, "%s/nvme0n1p3/start", nvme);
    put(dir, "4196352\n");
    expect(259, 0, "block:eui.0025388b91c2a3f4:0", "");
    expect(259, 3, "block:eui.0025388b91c2a3f4:4196352", "block:259:3");

    /* A partition of a disk that says nothing: its device number. */
    devlink("1:0", "devices/virtual/block/ram0");
    devlink("1:1", "devices/virtual/block/ram0/ram0p1");
    put("devices/virtual/block/ram0/ram0p1/partition", "1\n");
    put("devices/virtual/block/ram0/ram0p1/start", "64\n");
    expect(1, 0, "block:1:0", "");
    expect(1, 1, "block:1:1", "");

    /* Device mapper: by UUID, by name when made without one. */
    devlink("253:0", "devices/virtual/block/dm-0");
    put("devices/virtual/block/dm-0/dm/uuid",
        "LVM-Xq3vJ0cT2bM8kWn5Rz7LpYd4Hs6Fg1AeUoIiKjQwErTyPaSdZxCvBnMlOkJhGfDs\n");
    put("devices/virtual/block/dm-0/dm/name", "vg0-data\n");
    devlink("253:1", "devices/virtual/block/dm-1");
    put("devices/virtual/block/dm-1/dm/uuid", "\n");
    put("devices/virtual/block/dm-1/dm/name", "plain\n");
    expect(253, 0, "dm:LVM-Xq3vJ0cT2bM8kWn5Rz7LpYd4Hs6Fg1AeUoIiKjQwErTyPaSdZxCvBnMlOkJhGfDs",
           "block:253:0");
    expect(253, 1, "dm-name:plain", "block:253:1");

    /* An md array. */
    devlink("9:127", "devices/virtual/block/md127");
    put("devices/virtual/block/md127/md/uuid", "3f2e1d0c-b4a5-9687-7869-5a4b3c2d1e0f\n");
    put("devices/virtual/block/md127/md/level", "raid1\n");
    expect(9, 127, "md:3f2e1d0c-b4a5-9687-7869-5a4b3c2d1e0f", "block:9:127");

    /* A disk by its serial; a device sysfs does not know at all. */
    devlink("8:32", "devices/usb/block/sdc");
    put("devices/usb/block/sdc/device/serial", "WD-WCC4N7PL1234\n");
    expect(8, 32, "block:WD-WCC4N7PL1234:0", "");
    expect(7, 99, "block:7:99", "");

    /* Windows: a whole disk is none; a partition is its disk's bytes from
     * its start sector; a loop device its file's from its offset (no file
     * when it was deleted); a partition of a loop device the file's from
     * the offset plus the partition's start. */
    snprintf(dir, sizeof dir, "%s/dev", sdb);
    put(dir, "8:16\n");
    snprintf(dir, sizeof dir, "%s/sdb2/dev", sdb);
    put(dir, "8:18\n");
    devlink("7:3", "devices/virtual/block/loop3");
    put("devices/virtual/block/loop3/dev", "7:3\n");
    put("devices/virtual/block/loop3/loop/backing_file", "/data/a.img\n");
    put("devices/virtual/block/loop3/loop/offset", "4194304\n");
    devlink("259:7", "devices/virtual/block/loop3/loop3p1");
    put("devices/virtual/block/loop3/loop3p1/dev", "259:7\n");
    put("devices/virtual/block/loop3/loop3p1/partition", "1\n");
    put("devices/virtual/block/loop3/loop3p1/start", "2048\n");
    devlink("7:4", "devices/virtual/block/loop4");
    put("devices/virtual/block/loop4/dev", "7:4\n");
    put("devices/virtual/block/loop4/loop/backing_file", "/data/b.img (deleted)\n");
    put("devices/virtual/block/loop4/loop/offset", "0\n");
    struct block_under u;
    CHECK(!block_under(root, 8, 16, &u) && u.maj == 8 && u.min == 16 && u.start == 0 &&
          u.file[0] == '\0');
    CHECK(block_under(root, 8, 18, &u) && u.maj == 8 && u.min == 16 &&
          u.start == 1050624ull * 512 && u.file[0] == '\0');
    CHECK(block_under(root, 7, 3, &u) && u.maj == 7 && u.min == 3 && u.start == 4194304 &&
          strcmp(u.file, "/data/a.img") == 0);
    CHECK(block_under(root, 259, 7, &u) && u.maj == 7 && u.min == 3 &&
          u.start == 4194304 + 2048ull * 512 && strcmp(u.file, "/data/a.img") == 0);
    CHECK(block_under(root, 7, 4, &u) && u.maj == 7 && u.min == 4 && u.start == 0 &&
          u.file[0] == '\0');

    /* An identity longer than the field is cut, the same way each time. */
    char out[16], old[16];
    block_identity(root, 253, 0, out, sizeof out, old, sizeof old);
    CHECK(strcmp(out, "dm:LVM-Xq3vJ0cT") == 0);
    CHECK(strcmp(old, "block:253:0") == 0);

    nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return check_exit("blockid");
}
