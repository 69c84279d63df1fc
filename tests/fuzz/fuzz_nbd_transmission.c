/*
 * Fuzzing the NBD transmission phase: request headers, flags, lengths,
 * offsets past the end, write payloads arriving in pieces, replies and
 * their order (src/nbd/transmission.c and src/nbd/conn.c).
 *
 * Input: the SIM_HDR bytes of nbd_sim.h, one byte choosing how the
 * client negotiates, then the client's requests.  The harness puts a
 * valid handshake in front of them, so that every input reaches the
 * transmission phase:
 *
 *   bit 0  NBD_OPT_STRUCTURED_REPLY first
 *   bit 1  NBD_OPT_SET_META_CONTEXT base:allocation (after bit 0)
 *   bit 2  NBD_OPT_EXPORT_NAME instead of NBD_OPT_GO
 *   bit 3  the client flag NBD_FLAG_C_NO_ZEROES
 *   bit 4  ask for the export by its name (else by the empty name)
 *
 * The seeds in tests/fuzz/corpus/nbd_transmission/ are real clients'
 * requests (their handshake removed).
 */
#include <stdlib.h>
#include <string.h>

#include "nbd/proto.h"
#include "nbd_sim.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t option(uint8_t *p, uint32_t opt, const void *d, uint32_t len)
{
    put_be64(p, NBD_IHAVEOPT);
    put_be32(p + 8, opt);
    put_be32(p + 12, len);
    if (len)
        memcpy(p + 16, d, len);
    return 16 + len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < SIM_HDR + 1)
        return 0;
    uint8_t how = data[SIM_HDR];
    const uint8_t *req = data + SIM_HDR + 1;
    size_t reqlen = size - SIM_HDR - 1;
    /* The name asked for must be the export's, or the handshake fails. */
    const char *name = (how & 16) && (data[0] & 32) ? SIM_EXPORT_NAME : "";
    size_t nl = strlen(name);

    uint8_t *s = malloc(256 + reqlen);
    if (s == NULL)
        abort();
    size_t n = 0;
    put_be32(s, NBD_FLAG_C_FIXED_NEWSTYLE | ((how & 8) ? NBD_FLAG_C_NO_ZEROES : 0));
    n += 4;
    if (how & 1)
        n += option(s + n, NBD_OPT_STRUCTURED_REPLY, NULL, 0);
    uint8_t d[64];
    if (how & 2) {
        size_t al = strlen(NBD_BASE_ALLOCATION);
        put_be32(d, (uint32_t)nl);
        memcpy(d + 4, name, nl);
        put_be32(d + 4 + nl, 1);
        put_be32(d + 8 + nl, (uint32_t)al);
        memcpy(d + 12 + nl, NBD_BASE_ALLOCATION, al);
        n += option(s + n, NBD_OPT_SET_META_CONTEXT, d, (uint32_t)(12 + nl + al));
    }
    if (how & 4) {
        n += option(s + n, NBD_OPT_EXPORT_NAME, name, (uint32_t)nl);
    } else {
        put_be32(d, (uint32_t)nl);
        memcpy(d + 4, name, nl);
        put_be16(d + 4 + nl, 0);
        n += option(s + n, NBD_OPT_GO, d, (uint32_t)(6 + nl));
    }
    if (reqlen)
        memcpy(s + n, req, reqlen);
    sim_run(data, s, n + reqlen);
    free(s);
    return 0;
}
