/* Encoding, decoding and checking of the superblock (see ondisk.h). */
#include <stdio.h>
#include <string.h>

#include "format/ondisk.h"
#include "util/crc32c.h"

bool sb_has_magic(const uint8_t *buf)
{
    return le64_get(buf + SB_OFF_MAGIC) == TC_SB_MAGIC;
}

void sb_encode(const struct tc_superblock *sb, uint8_t buf[TC_SB_SIZE])
{
    memset(buf, 0, TC_SB_SIZE);
    le64_put(buf + SB_OFF_MAGIC, TC_SB_MAGIC);
    bool abandoned = sb->flags & TC_SB_ABANDONED;
    bool devfail = sb->flags & TC_SB_DEV_FAILED;
    bool stop = sb->flags & TC_SB_CLEAN_STOP;
    bool ckpt = stop && (sb->flags & TC_SB_CHECKPOINT);
    bool run = sb_has_run_ckpt(sb);
    le32_put(buf + SB_OFF_VERSION, run ? TC_SB_VERSION_RUN_CKPT
                                   : ckpt ? TC_SB_VERSION_CHECKPOINT
                                   : stop ? TC_SB_VERSION_STOP
                                   : devfail ? TC_SB_VERSION_DEVFAIL
                                   : abandoned ? TC_SB_VERSION_ABANDONED : TC_FORMAT_VERSION);
    memcpy(buf + SB_OFF_SET_UUID, sb->set_uuid, 16);
    memcpy(buf + SB_OFF_DEV_UUID, sb->dev_uuid, 16);
    le32_put(buf + SB_OFF_DEV_INDEX, sb->dev_index);
    le32_put(buf + SB_OFF_DEV_COUNT, sb->dev_count);
    le64_put(buf + SB_OFF_DEV_SIZE, sb->dev_size);
    le32_put(buf + SB_OFF_BLOCK_SIZE, sb->block_size);
    le32_put(buf + SB_OFF_SEGMENT_SIZE, sb->segment_size);
    le64_put(buf + SB_OFF_DATA_OFFSET, sb->data_offset);
    le32_put(buf + SB_OFF_SEGMENT_COUNT, sb->segment_count);
    le32_put(buf + SB_OFF_FIRST_SEGMENT, sb->first_segment);
    le32_put(buf + SB_OFF_TOTAL_SEGMENTS, sb->total_segments);
    uint32_t flags = ckpt ? sb->flags : sb->flags & ~TC_SB_CHECKPOINT;
    flags = run ? flags | TC_SB_RUN_CKPT : flags & ~TC_SB_RUN_CKPT;
    le32_put(buf + SB_OFF_FLAGS, flags);
    le64_put(buf + SB_OFF_ORIGIN_SIZE, sb->origin_size);
    le64_put(buf + SB_OFF_FORMAT_TIME, sb->format_time);
    memcpy(buf + SB_OFF_ORIGIN_ID, sb->origin_id, strnlen(sb->origin_id, TC_ORIGIN_ID_LEN - 1));
    memcpy(buf + SB_OFF_ORIGIN_PATH, sb->origin_path,
           strnlen(sb->origin_path, TC_ORIGIN_PATH_LEN - 1));
    for (unsigned i = 0; i < TC_MAX_DEVICES; i++) {
        le32_put(buf + SB_OFF_DEV_SEGMENTS + 4 * i, sb->dev_segments[i]);
        memcpy(buf + SB_OFF_DEV_UUIDS + 16 * i, sb->dev_uuids[i], 16);
    }
    if (abandoned)
        le64_put(buf + SB_OFF_ABANDONED_SEQ, sb->abandoned_seq);
    if (devfail)
        for (unsigned i = 0; i < TC_MAX_DEVICES; i++)
            le64_put(buf + SB_OFF_FAILED_SEQ + 8 * i, sb->failed_seq[i]);
    if (stop) {
        le64_put(buf + SB_OFF_STOP_CHUNK_SEQ, sb->stop_chunk_seq);
        le64_put(buf + SB_OFF_STOP_TAIL_SEQ, sb->stop_tail_seq);
        le64_put(buf + SB_OFF_STOP_CHUNKS, sb->stop_chunks);
        le64_put(buf + SB_OFF_STOP_ORIGIN_MTIME, sb->stop_origin_mtime);
        le64_put(buf + SB_OFF_STOP_ORIGIN_WRITTEN, sb->stop_origin_written);
        le64_put(buf + SB_OFF_STOP_ORIGIN_DISKSEQ, sb->stop_origin_diskseq);
        memcpy(buf + SB_OFF_STOP_ORIGIN_BOOT_ID, sb->stop_origin_boot_id, 16);
    }
    if (ckpt) {
        le64_put(buf + SB_OFF_CKPT_LEN, sb->ckpt_len);
        le32_put(buf + SB_OFF_CKPT_CRC, sb->ckpt_crc);
        le32_put(buf + SB_OFF_CKPT_NSEGS, sb->ckpt_nsegs);
        for (unsigned i = 0; i < sb->ckpt_nsegs && i < TC_CKPT_MAX_SEGS; i++)
            le32_put(buf + SB_OFF_CKPT_SEGS + 4 * i, sb->ckpt_segs[i]);
    }
    memcpy(buf + SB_OFF_STATE_TOKEN, sb->state_token, 16);
    memcpy(buf + SB_OFF_STATE_PLACE, sb->state_place,
           strnlen(sb->state_place, TC_STATE_PLACE_LEN - 1));
    for (unsigned i = 0; run && i < TC_RUN_CKPT_SLOTS; i++) {
        const struct tc_run_ckpt *r = &sb->run_ckpt[i];
        uint8_t *p = buf + SB_OFF_RUN_CKPT + SB_RUN_CKPT_SLOT * i;
        if (r->gen == 0)
            continue;
        le64_put(p, r->gen);
        le64_put(p + 8, r->cut);
        le64_put(p + 16, r->len);
        le32_put(p + 24, r->crc);
        le32_put(p + 28, r->nsegs);
        for (unsigned k = 0; k < r->nsegs && k < TC_RUN_CKPT_MAX_SEGS; k++)
            le32_put(p + 32 + 4 * k, r->segs[k]);
    }
    le32_put(buf + SB_OFF_CRC, tc_crc32c(0, buf, TC_SB_SIZE));
}

int sb_decode(const uint8_t buf[TC_SB_SIZE], struct tc_superblock *sb, char *err, size_t errlen)
{
    if (!sb_has_magic(buf)) {
        snprintf(err, errlen, "no tiercache superblock");
        return -1;
    }
    uint32_t version = le32_get(buf + SB_OFF_VERSION);
    if (version != TC_FORMAT_VERSION && version != TC_SB_VERSION_ABANDONED &&
        version != TC_SB_VERSION_DEVFAIL && version != TC_SB_VERSION_STOP &&
        version != TC_SB_VERSION_CHECKPOINT && version != TC_SB_VERSION_RUN_CKPT) {
        snprintf(err, errlen, "format version %u is not supported (this build reads versions "
                 "%u to %u)", version, TC_FORMAT_VERSION, TC_SB_VERSION_RUN_CKPT);
        return -1;
    }
    uint8_t tmp[TC_SB_SIZE];
    memcpy(tmp, buf, TC_SB_SIZE);
    uint32_t want = le32_get(tmp + SB_OFF_CRC);
    le32_put(tmp + SB_OFF_CRC, 0);
    if (tc_crc32c(0, tmp, TC_SB_SIZE) != want) {
        snprintf(err, errlen, "superblock checksum mismatch");
        return -1;
    }
    memset(sb, 0, sizeof *sb);
    sb->version = version;
    /* Version 6 is any of versions 1 to 5 with running checkpoints: the
     * checks below judge it as the version its other flags make. */
    uint32_t flags0 = le32_get(buf + SB_OFF_FLAGS);
    bool run = version == TC_SB_VERSION_RUN_CKPT;
    if (run) {
        bool st = flags0 & TC_SB_CLEAN_STOP;
        version = st && (flags0 & TC_SB_CHECKPOINT) ? TC_SB_VERSION_CHECKPOINT
                  : st ? TC_SB_VERSION_STOP
                  : (flags0 & TC_SB_DEV_FAILED) ? TC_SB_VERSION_DEVFAIL
                  : (flags0 & TC_SB_ABANDONED) ? TC_SB_VERSION_ABANDONED : TC_FORMAT_VERSION;
    }
    bool run_ok = run == !!(flags0 & TC_SB_RUN_CKPT);
    for (unsigned i = 0; run && i < TC_RUN_CKPT_SLOTS; i++) {
        struct tc_run_ckpt *r = &sb->run_ckpt[i];
        const uint8_t *p = buf + SB_OFF_RUN_CKPT + SB_RUN_CKPT_SLOT * i;
        r->gen = le64_get(p);
        r->cut = le64_get(p + 8);
        r->len = le64_get(p + 16);
        r->crc = le32_get(p + 24);
        r->nsegs = le32_get(p + 28);
        if (r->gen == 0) {
            /* Empty: all of it zero. */
            for (unsigned k = 0; k < SB_RUN_CKPT_SLOT; k++)
                run_ok &= p[k] == 0;
            memset(r, 0, sizeof *r);
            continue;
        }
        if (r->nsegs == 0 || r->nsegs > TC_RUN_CKPT_MAX_SEGS || r->gen >= TC_SEQ_LIMIT ||
            r->cut >= TC_SEQ_LIMIT || r->len < TC_CKPT_HDR) {
            run_ok = false;
            r->nsegs = 0;
        }
        for (unsigned k = 0; k < TC_RUN_CKPT_MAX_SEGS; k++) {
            uint32_t v = le32_get(p + 32 + 4 * k);
            if (k < r->nsegs)
                r->segs[k] = v;
            else
                run_ok &= v == 0;
        }
    }
    if (run && (sb->run_ckpt[0].gen == sb->run_ckpt[1].gen))
        run_ok = false;     /* both empty (then not version 6), or two of one gen */
    memcpy(sb->set_uuid, buf + SB_OFF_SET_UUID, 16);
    memcpy(sb->dev_uuid, buf + SB_OFF_DEV_UUID, 16);
    sb->dev_index = le32_get(buf + SB_OFF_DEV_INDEX);
    sb->dev_count = le32_get(buf + SB_OFF_DEV_COUNT);
    sb->dev_size = le64_get(buf + SB_OFF_DEV_SIZE);
    sb->block_size = le32_get(buf + SB_OFF_BLOCK_SIZE);
    sb->segment_size = le32_get(buf + SB_OFF_SEGMENT_SIZE);
    sb->data_offset = le64_get(buf + SB_OFF_DATA_OFFSET);
    sb->segment_count = le32_get(buf + SB_OFF_SEGMENT_COUNT);
    sb->first_segment = le32_get(buf + SB_OFF_FIRST_SEGMENT);
    sb->total_segments = le32_get(buf + SB_OFF_TOTAL_SEGMENTS);
    sb->flags = le32_get(buf + SB_OFF_FLAGS);
    sb->origin_size = le64_get(buf + SB_OFF_ORIGIN_SIZE);
    sb->format_time = le64_get(buf + SB_OFF_FORMAT_TIME);
    memcpy(sb->origin_id, buf + SB_OFF_ORIGIN_ID, TC_ORIGIN_ID_LEN - 1);
    memcpy(sb->origin_path, buf + SB_OFF_ORIGIN_PATH, TC_ORIGIN_PATH_LEN - 1);
    for (unsigned i = 0; i < TC_MAX_DEVICES; i++) {
        sb->dev_segments[i] = le32_get(buf + SB_OFF_DEV_SEGMENTS + 4 * i);
        memcpy(sb->dev_uuids[i], buf + SB_OFF_DEV_UUIDS + 16 * i, 16);
    }
    if (version >= TC_SB_VERSION_ABANDONED && (sb->flags & TC_SB_ABANDONED))
        sb->abandoned_seq = le64_get(buf + SB_OFF_ABANDONED_SEQ);
    bool marks_ok = true, any_mark = false;
    /* Versions 4 and 5 may carry the marks of version 3 (and of version 2). */
    bool stop_version = version == TC_SB_VERSION_STOP || version == TC_SB_VERSION_CHECKPOINT;
    bool devfail_ok = version == TC_SB_VERSION_DEVFAIL ||
                      (stop_version && (sb->flags & TC_SB_DEV_FAILED));
    if (devfail_ok) {
        for (unsigned i = 0; i < TC_MAX_DEVICES; i++) {
            sb->failed_seq[i] = le64_get(buf + SB_OFF_FAILED_SEQ + 8 * i);
            any_mark |= sb->failed_seq[i] != 0;
            if (sb->failed_seq[i] >= TC_SEQ_LIMIT ||
                (sb->failed_seq[i] && i >= sb->dev_count))
                marks_ok = false;
        }
    }

    if (stop_version && (sb->flags & TC_SB_CLEAN_STOP)) {
        sb->stop_chunk_seq = le64_get(buf + SB_OFF_STOP_CHUNK_SEQ);
        sb->stop_tail_seq = le64_get(buf + SB_OFF_STOP_TAIL_SEQ);
        sb->stop_chunks = le64_get(buf + SB_OFF_STOP_CHUNKS);
        sb->stop_origin_mtime = le64_get(buf + SB_OFF_STOP_ORIGIN_MTIME);
        sb->stop_origin_written = le64_get(buf + SB_OFF_STOP_ORIGIN_WRITTEN);
        sb->stop_origin_diskseq = le64_get(buf + SB_OFF_STOP_ORIGIN_DISKSEQ);
        memcpy(sb->stop_origin_boot_id, buf + SB_OFF_STOP_ORIGIN_BOOT_ID, 16);
    }
    /* The state place, in any version (zero from builds before it). */
    memcpy(sb->state_token, buf + SB_OFF_STATE_TOKEN, 16);
    memcpy(sb->state_place, buf + SB_OFF_STATE_PLACE, TC_STATE_PLACE_LEN - 1);
    bool ckpt_ok = true;
    if (version == TC_SB_VERSION_CHECKPOINT && (sb->flags & TC_SB_CHECKPOINT)) {
        sb->ckpt_len = le64_get(buf + SB_OFF_CKPT_LEN);
        sb->ckpt_crc = le32_get(buf + SB_OFF_CKPT_CRC);
        sb->ckpt_nsegs = le32_get(buf + SB_OFF_CKPT_NSEGS);
        if (sb->ckpt_nsegs == 0 || sb->ckpt_nsegs > TC_CKPT_MAX_SEGS) {
            ckpt_ok = false;
            sb->ckpt_nsegs = 0;
        }
        for (unsigned i = 0; i < sb->ckpt_nsegs; i++)
            sb->ckpt_segs[i] = le32_get(buf + SB_OFF_CKPT_SEGS + 4 * i);
    }

    /* The geometry must make sense before anything relies on it. */
    const char *bad = NULL;
    if (sb->block_size < TC_MIN_BLOCK_SIZE || sb->block_size > TC_MAX_BLOCK_SIZE ||
        (sb->block_size & (sb->block_size - 1)))
        bad = "block size";
    else if (sb->segment_size < TC_MIN_SEGMENT_SIZE || sb->segment_size > TC_MAX_SEGMENT_SIZE ||
             sb->segment_size % sb->block_size)
        bad = "segment size";
    else if (sb->dev_count == 0 || sb->dev_count > TC_MAX_DEVICES ||
             sb->dev_index >= sb->dev_count)
        bad = "device index or count";
    else if (sb->data_offset < 2 * TC_SB_SIZE || sb->data_offset % 4096 ||
             sb->data_offset > sb->dev_size)
        bad = "data offset";
    else if (sb->segment_count == 0 ||
             (uint64_t)sb->segment_count * sb->segment_size > sb->dev_size - sb->data_offset)
        bad = "segment count";
    else if (sb->dev_segments[sb->dev_index] != sb->segment_count)
        bad = "segment table";
    else if (sb->origin_size == 0 || sb->origin_size % 4096)
        bad = "origin size";
    else if ((version == TC_SB_VERSION_ABANDONED) != !!(sb->flags & TC_SB_ABANDONED) &&
             version != TC_SB_VERSION_DEVFAIL && !stop_version)
        bad = "abandoned mark";
    else if ((sb->flags & TC_SB_ABANDONED) &&
             (sb->abandoned_seq == 0 || sb->abandoned_seq >= TC_SEQ_LIMIT))
        bad = "abandoned mark";
    /* Version 3 exactly when the flag is set, with at least one mark, and
     * none for a device the set does not have. */
    else if (((version == TC_SB_VERSION_DEVFAIL) != !!(sb->flags & TC_SB_DEV_FAILED) &&
              !stop_version) ||
             (devfail_ok && (!any_mark || !marks_ok)))
        bad = "device failure marks";
    /* Version 4 or 5 exactly when the record is there; a chunk count needs
     * a newest chunk, and every sequence is below the limit. */
    else if (stop_version != !!(sb->flags & TC_SB_CLEAN_STOP) ||
             sb->stop_chunk_seq >= TC_SEQ_LIMIT || sb->stop_tail_seq >= TC_SEQ_LIMIT ||
             sb->stop_chunks > sb->stop_chunk_seq)
        bad = "clean-stop record";
    /* Version 5 exactly when the record names a checkpoint, which fits the
     * segments it names, each of them one of the set's. */
    else if ((version == TC_SB_VERSION_CHECKPOINT) != !!(sb->flags & TC_SB_CHECKPOINT) ||
             !ckpt_ok ||
             (version == TC_SB_VERSION_CHECKPOINT &&
              (sb->ckpt_len < TC_CKPT_HDR ||
               sb->ckpt_len > (uint64_t)sb->ckpt_nsegs * sb->segment_size)))
        bad = "checkpoint record";
    if (bad == NULL)
        for (unsigned i = 0; i < sb->ckpt_nsegs; i++)
            if (sb->ckpt_segs[i] >= sb->total_segments)
                bad = "checkpoint record";
    /* Version 6 exactly when a slot is full; each full one fits the
     * segments it names, each of them one of the set's. */
    if (bad == NULL && !run_ok)
        bad = "running checkpoint slots";
    for (unsigned i = 0; bad == NULL && i < TC_RUN_CKPT_SLOTS; i++) {
        const struct tc_run_ckpt *r = &sb->run_ckpt[i];
        if (r->gen && r->len > (uint64_t)r->nsegs * sb->segment_size)
            bad = "running checkpoint slots";
        for (unsigned k = 0; bad == NULL && k < r->nsegs; k++)
            if (r->segs[k] >= sb->total_segments)
                bad = "running checkpoint slots";
    }
    if (bad == NULL) {
        uint64_t total = 0, first = 0;
        for (unsigned i = 0; i < sb->dev_count; i++) {
            if (i == sb->dev_index)
                first = total;
            total += sb->dev_segments[i];
        }
        if (total != sb->total_segments || first != sb->first_segment ||
            total > UINT32_MAX / 2)
            bad = "segment numbering";
    }
    if (bad) {
        snprintf(err, errlen, "inconsistent geometry: %s", bad);
        return -1;
    }
    return 0;
}

bool sb_stop_record_equal(const struct tc_superblock *a, const struct tc_superblock *b)
{
    if (a->stop_chunk_seq != b->stop_chunk_seq || a->stop_tail_seq != b->stop_tail_seq ||
        a->stop_chunks != b->stop_chunks ||
        (a->flags & TC_SB_CHECKPOINT) != (b->flags & TC_SB_CHECKPOINT))
        return false;
    if (!(a->flags & TC_SB_CHECKPOINT))
        return true;
    return a->ckpt_len == b->ckpt_len && a->ckpt_crc == b->ckpt_crc &&
           a->ckpt_nsegs == b->ckpt_nsegs &&
           memcmp(a->ckpt_segs, b->ckpt_segs, a->ckpt_nsegs * sizeof a->ckpt_segs[0]) == 0;
}
