/*
 * The fixed newstyle handshake: greeting, client flags, then options until
 * the client picks the export (NBD_OPT_GO or NBD_OPT_EXPORT_NAME) or
 * leaves.  Every option is answered; malformed ones get NBD_REP_ERR_INVALID
 * and unknown ones NBD_REP_ERR_UNSUP, so a client can always go on.  Only
 * input that leaves no way to answer (bad magic, unknown client flags, an
 * unknown export in NBD_OPT_EXPORT_NAME) ends the connection.
 *
 * TLS: NBD_OPT_STARTTLS is acknowledged, then conn.c runs the TLS handshake
 * and options continue inside TLS, with structured replies and metadata
 * contexts negotiated before it forgotten.  With --tls require, every
 * option but STARTTLS and ABORT gets NBD_REP_ERR_TLS_REQD until then
 * (NBD_OPT_EXPORT_NAME, which has no error reply, ends the connection).
 */
#include <stdio.h>
#include <string.h>

#include "nbd/proto.h"
#include "nbd/server.h"
#include "util/log.h"
#include "util/misc.h"

void handshake_start(struct nbd_conn *c)
{
    uint8_t g[18];
    put_be64(g, NBD_MAGIC);
    put_be64(g + 8, NBD_IHAVEOPT);
    put_be16(g + 16, NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES);
    conn_send_copy(c, g, sizeof g);
}

static void opt_reply(struct nbd_conn *c, uint32_t opt, uint32_t type, const void *data,
                      size_t len)
{
    uint8_t buf[20 + 8192];
    if (len > sizeof buf - 20)
        len = sizeof buf - 20;
    put_be64(buf, NBD_REP_MAGIC);
    put_be32(buf + 8, opt);
    put_be32(buf + 12, type);
    put_be32(buf + 16, (uint32_t)len);
    if (len)
        memcpy(buf + 20, data, len);
    conn_send_copy(c, buf, 20 + len);
}

static void opt_error(struct nbd_conn *c, uint32_t opt, uint32_t type, const char *msg)
{
    tc_debug("connection %llu (%s): option %u refused: %s", (unsigned long long)c->id, c->peer,
             opt, msg);
    opt_reply(c, opt, type, msg, strlen(msg));
}

static bool export_matches(struct nbd_conn *c, const uint8_t *name, size_t len)
{
    const char *ours = c->srv->cfg.export_name;
    /* The empty name is the default export, which is ours. */
    return len == 0 || (strlen(ours) == len && memcmp(ours, name, len) == 0);
}


static uint16_t handshake_export_flags(struct nbd_conn *c)
{
    uint16_t f = c->srv->export_flags;
    if (c->structured_replies)
        f |= NBD_FLAG_SEND_DF;
    return f;
}

static void info_export(struct nbd_conn *c, uint32_t opt)
{
    uint8_t b[12];
    put_be16(b, NBD_INFO_EXPORT);
    put_be64(b + 2, tc_volume_size(c->srv->vol));
    put_be16(b + 10, handshake_export_flags(c));
    opt_reply(c, opt, NBD_REP_INFO, b, sizeof b);
}

static void info_block_size(struct nbd_conn *c, uint32_t opt)
{
    uint8_t b[14];
    put_be16(b, NBD_INFO_BLOCK_SIZE);
    put_be32(b + 2, NBD_MIN_BLOCK);
    put_be32(b + 6, NBD_PREFERRED_BLOCK);
    put_be32(b + 10, NBD_MAX_PAYLOAD);
    opt_reply(c, opt, NBD_REP_INFO, b, sizeof b);
}

static void info_string(struct nbd_conn *c, uint32_t opt, uint16_t type, const char *s)
{
    uint8_t b[2 + NBD_MAX_STRING];
    size_t n = TC_MIN(strlen(s), (size_t)NBD_MAX_STRING);
    put_be16(b, type);
    memcpy(b + 2, s, n);
    opt_reply(c, opt, NBD_REP_INFO, b, 2 + n);
}

/* Clients past their handshake are counted at accept too, but several
 * pending ones may finish at once: the last check is here. */
static void too_many(struct nbd_conn *c)
{
    tc_warn("connection %llu (%s): refusing the export: %u clients is the maximum "
            "(--max-connections)", (unsigned long long)c->id, c->peer,
            c->srv->cfg.max_connections);
}

static void enter_transmission(struct nbd_conn *c)
{
    c->phase = PHASE_TRANSMISSION;
    nbd_fe_hand_over(c);
    tc_debug("connection %llu (%s): transmission phase (structured replies %s)",
             (unsigned long long)c->id, c->peer, c->structured_replies ? "on" : "off");
}

static void opt_info_go(struct nbd_conn *c, uint32_t opt, const uint8_t *d, uint32_t len)
{
    if (len < 6) {
        opt_error(c, opt, NBD_REP_ERR_INVALID, "option too short");
        return;
    }
    uint32_t namelen = get_be32(d);
    if (namelen > NBD_MAX_STRING || (uint64_t)namelen + 6 > len) {
        opt_error(c, opt, NBD_REP_ERR_INVALID, "export name length does not fit the option");
        return;
    }
    uint16_t nreq = get_be16(d + 4 + namelen);
    if ((uint64_t)4 + namelen + 2 + 2ull * nreq != len) {
        opt_error(c, opt, NBD_REP_ERR_INVALID, "information request count does not fit");
        return;
    }
    if (!export_matches(c, d + 4, namelen)) {
        opt_error(c, opt, NBD_REP_ERR_UNKNOWN, "no export of that name");
        return;
    }
    if (c->srv->stopping) {
        opt_error(c, opt, NBD_REP_ERR_SHUTDOWN, "the server is shutting down");
        return;
    }
    if (opt == NBD_OPT_GO && !conn_handshake_done(c)) {
        too_many(c);
        opt_error(c, opt, NBD_REP_ERR_POLICY, "too many clients (--max-connections)");
        conn_close(c, "too many clients (--max-connections)");
        return;
    }
    bool want_name = false, want_desc = false;
    for (unsigned i = 0; i < nreq; i++) {
        uint16_t t = get_be16(d + 4 + namelen + 2 + 2 * i);
        if (t == NBD_INFO_NAME)
            want_name = true;
        else if (t == NBD_INFO_DESCRIPTION)
            want_desc = true;
    }
    info_export(c, opt);
    info_block_size(c, opt);
    if (want_name)
        info_string(c, opt, NBD_INFO_NAME, c->srv->cfg.export_name);
    if (want_desc && c->srv->cfg.description && c->srv->cfg.description[0])
        info_string(c, opt, NBD_INFO_DESCRIPTION, c->srv->cfg.description);
    opt_reply(c, opt, NBD_REP_ACK, NULL, 0);
    if (opt == NBD_OPT_GO)
        enter_transmission(c);
}

static void opt_export_name(struct nbd_conn *c, const uint8_t *d, uint32_t len)
{
    if (len > NBD_MAX_STRING || !export_matches(c, d, len)) {
        /* This option has no error reply: the only answer is to leave. */
        c->srv->stats.handshakes_failed++;
        conn_abort(c, "client asked for an unknown export with NBD_OPT_EXPORT_NAME");
        return;
    }
    if (c->srv->stopping) {
        conn_abort(c, "the server is shutting down");
        return;
    }
    if (!conn_handshake_done(c)) {
        too_many(c);
        conn_abort(c, "too many clients (--max-connections)");
        return;
    }
    uint8_t b[10 + 124];
    memset(b, 0, sizeof b);
    put_be64(b, tc_volume_size(c->srv->vol));
    put_be16(b + 8, handshake_export_flags(c));
    conn_send_copy(c, b, c->no_zeroes ? 10 : sizeof b);
    enter_transmission(c);
}

static void opt_list(struct nbd_conn *c, uint32_t len)
{
    if (len != 0) {
        opt_error(c, NBD_OPT_LIST, NBD_REP_ERR_INVALID, "NBD_OPT_LIST takes no data");
        return;
    }
    const char *name = c->srv->cfg.export_name;
    size_t n = strlen(name);
    uint8_t b[4 + NBD_MAX_STRING];
    put_be32(b, (uint32_t)n);
    memcpy(b + 4, name, n);
    opt_reply(c, NBD_OPT_LIST, NBD_REP_SERVER, b, 4 + n);
    opt_reply(c, NBD_OPT_LIST, NBD_REP_ACK, NULL, 0);
}

static void meta_reply(struct nbd_conn *c, uint32_t opt, uint32_t id)
{
    uint8_t b[4 + sizeof NBD_BASE_ALLOCATION];
    put_be32(b, id);
    memcpy(b + 4, NBD_BASE_ALLOCATION, sizeof NBD_BASE_ALLOCATION - 1);
    opt_reply(c, opt, NBD_REP_META_CONTEXT, b, 4 + sizeof NBD_BASE_ALLOCATION - 1);
}

static void opt_meta_context(struct nbd_conn *c, uint32_t opt, const uint8_t *d, uint32_t len)
{
    bool set = opt == NBD_OPT_SET_META_CONTEXT;
    if (set)
        c->meta_allocation = false;     /* replaced even if this one fails */
    if (!c->structured_replies) {
        opt_error(c, opt, NBD_REP_ERR_INVALID, "negotiate structured replies first");
        return;
    }
    if (len < 8) {
        opt_error(c, opt, NBD_REP_ERR_INVALID, "option too short");
        return;
    }
    uint32_t namelen = get_be32(d);
    if (namelen > NBD_MAX_STRING || (uint64_t)namelen + 8 > len) {
        opt_error(c, opt, NBD_REP_ERR_INVALID, "export name length does not fit the option");
        return;
    }
    uint32_t nq = get_be32(d + 4 + namelen);
    /* Check the whole layout before acting on any of it. */
    uint64_t pos = 8 + (uint64_t)namelen;
    for (uint32_t i = 0; i < nq; i++) {
        if (pos + 4 > len) {
            opt_error(c, opt, NBD_REP_ERR_INVALID, "query count does not fit the option");
            return;
        }
        uint32_t ql = get_be32(d + pos);
        if (ql > NBD_MAX_STRING || pos + 4 + ql > len) {
            opt_error(c, opt, NBD_REP_ERR_INVALID, "query length does not fit the option");
            return;
        }
        pos += 4 + ql;
    }
    if (pos != len) {
        opt_error(c, opt, NBD_REP_ERR_INVALID, "trailing bytes after the queries");
        return;
    }
    if (!export_matches(c, d + 4, namelen)) {
        opt_error(c, opt, NBD_REP_ERR_UNKNOWN, "no export of that name");
        return;
    }
    bool match = false;
    if (nq == 0) {
        match = !set;           /* LIST with no query lists everything */
    }
    pos = 8 + (uint64_t)namelen;
    for (uint32_t i = 0; i < nq; i++) {
        uint32_t ql = get_be32(d + pos);
        const char *q = (const char *)d + pos + 4;
        pos += 4 + ql;
        size_t al = strlen(NBD_BASE_ALLOCATION);
        if (ql == al && memcmp(q, NBD_BASE_ALLOCATION, al) == 0)
            match = true;
        else if (!set && ql == 5 && memcmp(q, "base:", 5) == 0)
            match = true;       /* the namespace wildcard, for listing only */
    }
    if (match) {
        meta_reply(c, opt, set ? NBD_BASE_ALLOCATION_ID : 0);
        if (set)
            c->meta_allocation = true;
    }
    opt_reply(c, opt, NBD_REP_ACK, NULL, 0);
}

static void opt_starttls(struct nbd_conn *c, uint32_t len)
{
    if (c->srv->cfg.tls == NBD_TLS_OFF) {
        opt_error(c, NBD_OPT_STARTTLS, NBD_REP_ERR_UNSUP, "TLS is not enabled on this server");
        return;
    }
    if (len != 0) {
        opt_error(c, NBD_OPT_STARTTLS, NBD_REP_ERR_INVALID, "NBD_OPT_STARTTLS takes no data");
        return;
    }
    if (c->tls_state != CONN_TLS_NONE) {
        opt_error(c, NBD_OPT_STARTTLS, NBD_REP_ERR_INVALID, "TLS is already in use");
        return;
    }
    char err[256];
    if (conn_starttls(c, err, sizeof err) < 0) {
        tc_warn("connection %llu (%s): cannot start TLS: %s", (unsigned long long)c->id,
                c->peer, err);
        opt_error(c, NBD_OPT_STARTTLS, NBD_REP_ERR_PLATFORM, "the server cannot start TLS");
        return;
    }
    /* The ACK leaves in clear; the parser stops, and conn.c starts the
     * TLS handshake once the ACK is sent. */
    opt_reply(c, NBD_OPT_STARTTLS, NBD_REP_ACK, NULL, 0);
}

static void handle_option(struct nbd_conn *c, uint32_t opt, const uint8_t *d, uint32_t len)
{
    /* --tls require: only STARTTLS and ABORT before TLS (proto.md). */
    if (c->srv->cfg.tls == NBD_TLS_REQUIRE && c->tls_state != CONN_TLS_ACTIVE &&
        opt != NBD_OPT_STARTTLS && opt != NBD_OPT_ABORT) {
        if (opt == NBD_OPT_EXPORT_NAME) {
            /* No error reply exists for this option: the answer is to leave. */
            c->srv->stats.handshakes_failed++;
            conn_abort(c, "NBD_OPT_EXPORT_NAME without TLS, which this server requires");
            return;
        }
        opt_error(c, opt, NBD_REP_ERR_TLS_REQD, "this server requires TLS (NBD_OPT_STARTTLS)");
        return;
    }
    switch (opt) {
    case NBD_OPT_EXPORT_NAME:
        opt_export_name(c, d, len);
        return;
    case NBD_OPT_ABORT:
        opt_reply(c, opt, NBD_REP_ACK, NULL, 0);
        conn_close(c, "client aborted the handshake");
        return;
    case NBD_OPT_LIST:
        opt_list(c, len);
        return;
    case NBD_OPT_INFO:
    case NBD_OPT_GO:
        opt_info_go(c, opt, d, len);
        return;
    case NBD_OPT_STRUCTURED_REPLY:
        if (len != 0) {
            opt_error(c, opt, NBD_REP_ERR_INVALID, "NBD_OPT_STRUCTURED_REPLY takes no data");
            return;
        }
        c->structured_replies = true;
        opt_reply(c, opt, NBD_REP_ACK, NULL, 0);
        return;
    case NBD_OPT_LIST_META_CONTEXT:
    case NBD_OPT_SET_META_CONTEXT:
        opt_meta_context(c, opt, d, len);
        return;
    case NBD_OPT_STARTTLS:
        opt_starttls(c, len);
        return;
    default:
        if (!c->fixed_newstyle) {
            conn_abort(c, "unknown option from a client without fixed newstyle");
            return;
        }
        opt_error(c, opt, NBD_REP_ERR_UNSUP, "option not supported");
        return;
    }
}

bool handshake_parse(struct nbd_conn *c)
{
    const uint8_t *p = c->rx + c->rx_start;
    size_t avail = conn_rx_avail(c);

    if (c->phase == PHASE_CLIENT_FLAGS) {
        if (avail < 4)
            return false;
        uint32_t flags = get_be32(p);
        c->rx_start += 4;
        if (flags & ~(uint32_t)(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES)) {
            c->srv->stats.protocol_errors++;
            conn_abort(c, "unknown client flags");
            return false;
        }
        c->fixed_newstyle = flags & NBD_FLAG_C_FIXED_NEWSTYLE;
        c->no_zeroes = flags & NBD_FLAG_C_NO_ZEROES;
        c->phase = PHASE_OPTIONS;
        return true;
    }

    if (avail < NBD_OPTION_HDR_SIZE)
        return false;
    if (c->tx_bytes > HANDSHAKE_MAX_QUEUED)
        return false;   /* wait until the client reads its replies (conn.c resumes) */
    if (get_be64(p) != NBD_IHAVEOPT) {
        c->srv->stats.protocol_errors++;
        c->srv->stats.handshakes_failed++;
        conn_abort(c, "bad option magic");
        return false;
    }
    uint32_t opt = get_be32(p + 8);
    uint32_t len = get_be32(p + 12);
    if (len > NBD_MAX_OPTION_LEN) {
        c->rx_start += NBD_OPTION_HDR_SIZE;
        if (opt == NBD_OPT_EXPORT_NAME) {
            c->srv->stats.protocol_errors++;
            conn_abort(c, "oversized NBD_OPT_EXPORT_NAME");
            return false;
        }
        /* Read past the data, answering now: the reply waits in the
         * client's receive buffer until it has sent everything. */
        c->rx_discard = len;
        opt_error(c, opt, NBD_REP_ERR_TOO_BIG, "option data too large");
        return true;
    }
    if (avail < NBD_OPTION_HDR_SIZE + (size_t)len)
        return false;
    c->rx_start += NBD_OPTION_HDR_SIZE + len;
    handle_option(c, opt, p + NBD_OPTION_HDR_SIZE, len);
    return true;
}
