/*
 * The state file's encoding (format/ondisk.h): the entry sizes of each
 * version, a version 4 file (lost sectors, their marks and digests) read
 * back as written, and the files a reader must refuse -- a mark on a sector that
 * is not lost, a version above the highest known, a length that does not
 * hold the entries, a flipped byte.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "format/ondisk.h"

enum { SPB = 16, COUNT = 3 };

static uint8_t *encode_v4(const uint64_t *lost, const uint64_t *marks, size_t *len)
{
    *len = tc_state_bytes(4, SPB, COUNT);
    uint8_t *buf = calloc(1, *len);
    for (uint64_t i = 0; i < COUNT; i++) {
        state_entry_put(buf, 4, SPB, i, 100 + i, &lost[i]);
        state_marks_put(buf, SPB, i, &marks[i], 0x1000u + (uint32_t)i);
    }
    struct tc_state st = { .version = 4, .flags = TC_STATE_ABANDONED, .spb = SPB,
                           .abandoned_seq = 1234, .written_ns = 5, .count = COUNT };
    memset(st.set_uuid, 0xab, sizeof st.set_uuid);
    state_encode(buf, &st);
    return buf;
}

int main(void)
{
    char err[160];
    struct tc_state st;

    /* The entry sizes: a block's mask, with proofs (12 bytes a sector) in
     * version 3, with a second mask and a digest (8 bytes) in version 4. */
    CHECK(tc_state_entry_size(1, SPB) == 16);
    CHECK(tc_state_entry_size(2, SPB) == 16);
    CHECK(tc_state_entry_size(3, SPB) == 16 + 12 * SPB);
    CHECK(tc_state_entry_size(4, SPB) == 32);
    CHECK(tc_state_entry_size(4, 256) == 8 + 2 * 32 + 8);
    CHECK(tc_state_hdr(4) == TC_STATE_HDR_V2);

    /* Written and read back. */
    uint64_t lost[COUNT] = { 0x000f, 0x8001, 0xffff };
    uint64_t marks[COUNT] = { 0x0005, 0x0000, 0xfff0 };
    size_t len;
    uint8_t *buf = encode_v4(lost, marks, &len);
    CHECK(state_decode(buf, len, &st, err, sizeof err) == 0);
    CHECK(st.version == 4 && st.count == COUNT && st.abandoned_seq == 1234);
    CHECK(st.flags == TC_STATE_ABANDONED);
    for (uint64_t i = 0; i < COUNT; i++) {
        uint64_t ob, m = 0, mk = 0;
        uint32_t digest = 0;
        state_entry_get(buf, 4, SPB, i, &ob, &m);
        state_marks_get(buf, SPB, i, &mk, &digest);
        CHECK(ob == 100 + i && m == lost[i] && mk == marks[i] && digest == 0x1000u + i);
    }

    /* A byte changed: the checksum says so. */
    buf[len - 1] ^= 1;
    CHECK(state_decode(buf, len, &st, err, sizeof err) < 0);
    free(buf);

    /* A length that does not hold the entries. */
    buf = encode_v4(lost, marks, &len);
    CHECK(state_decode(buf, len - 8, &st, err, sizeof err) < 0);
    free(buf);

    /* A mark on a sector that is not lost. */
    uint64_t bad_marks[COUNT] = { 0x0010, 0, 0 };
    buf = encode_v4(lost, bad_marks, &len);
    CHECK(state_decode(buf, len, &st, err, sizeof err) < 0);
    CHECK(strstr(err, "not lost") != NULL);
    free(buf);

    /* A version above the highest this build reads. */
    buf = encode_v4(lost, marks, &len);
    le32_put(buf + 8, TC_STATE_VERSION + 1);
    CHECK(state_decode(buf, len, &st, err, sizeof err) < 0);
    CHECK(strstr(err, "not supported") != NULL);
    free(buf);

    return check_exit("statefile");
}
