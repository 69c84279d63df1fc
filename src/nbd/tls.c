/*
 * GnuTLS sessions over in-memory buffers (see tls.h for the design).
 */
#include "nbd/tls.h"

#include <errno.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/misc.h"

#define IN_SIZE (64u << 10)             /* several records of 16 KiB + overhead */
#define RECORD_MAX 16384u               /* plaintext per record */

/* PSK: TLS 1.3 and 1.2 key exchanges with a pre-shared key. */
#define PRIORITY_PSK "NORMAL:+ECDHE-PSK:+DHE-PSK:+PSK"
#define PRIORITY_X509 "NORMAL"

struct psk_user {
    char *name;
    uint8_t *key;
    size_t keylen;
};

struct nbd_tls_creds {
    gnutls_certificate_credentials_t x509;
    gnutls_psk_server_credentials_t psk;
    gnutls_priority_t priority;
    bool verify_peer;
    struct psk_user *users;
    size_t nusers;
    char desc[96];
};

struct nbd_tls {
    struct nbd_tls_creds *creds;
    gnutls_session_t session;
    uint8_t *in;
    size_t in_start, in_end, in_cap;
    uint8_t *out;
    size_t out_start, out_end, out_cap;
    char err[256];
};

/* ---- credentials ---- */

static bool file_exists(const char *path)
{
    return access(path, F_OK) == 0;
}

static int hexval(int ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

static int load_psk_file(struct nbd_tls_creds *cr, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "re");
    if (f == NULL) {
        snprintf(err, errlen, "--tls-psk %s: %s", path, strerror(errno));
        return -1;
    }
    char line[4096];
    unsigned lineno = 0;
    int rc = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        size_t n = strlen(line);
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' '))
            line[--n] = '\0';
        if (n == 0 || line[0] == '#')
            continue;
        char *colon = strchr(line, ':');
        const char *hex = colon ? colon + 1 : "";
        size_t hl = strlen(hex);
        bool ok = colon && colon != line && hl > 0 && hl % 2 == 0;
        for (size_t i = 0; ok && i < hl; i++)
            ok = hexval((unsigned char)hex[i]) >= 0;
        if (!ok) {
            snprintf(err, errlen, "--tls-psk %s: line %u is not 'username:hexkey'", path,
                     lineno);
            rc = -1;
            break;
        }
        *colon = '\0';
        cr->users = realloc(cr->users, (cr->nusers + 1) * sizeof *cr->users);
        if (cr->users == NULL)
            abort();
        struct psk_user *u = &cr->users[cr->nusers++];
        u->name = tc_xstrdup(line);
        u->keylen = hl / 2;
        u->key = tc_xmalloc(u->keylen);
        for (size_t i = 0; i < u->keylen; i++)
            u->key[i] = (uint8_t)(hexval((unsigned char)hex[2 * i]) << 4 |
                                  hexval((unsigned char)hex[2 * i + 1]));
    }
    if (rc == 0 && ferror(f)) {
        snprintf(err, errlen, "--tls-psk %s: %s", path, strerror(errno));
        rc = -1;
    }
    fclose(f);
    if (rc == 0 && cr->nusers == 0) {
        snprintf(err, errlen, "--tls-psk %s: no 'username:hexkey' line", path);
        rc = -1;
    }
    return rc;
}

/* GnuTLS asks for the key of the username the client sent. */
static int psk_lookup(gnutls_session_t session, const char *username, gnutls_datum_t *key)
{
    struct nbd_tls *t = gnutls_session_get_ptr(session);
    for (size_t i = 0; i < t->creds->nusers; i++) {
        const struct psk_user *u = &t->creds->users[i];
        if (strcmp(u->name, username) != 0)
            continue;
        key->data = gnutls_malloc(u->keylen);
        if (key->data == NULL)
            return -1;
        memcpy(key->data, u->key, u->keylen);
        key->size = (unsigned)u->keylen;
        return 0;
    }
    return -1;
}

static int load_x509(struct nbd_tls_creds *cr, const char *dir, bool verify_peer, char *err,
                     size_t errlen)
{
    char ca[4096], cert[4096], key[4096], crl[4096];
    snprintf(ca, sizeof ca, "%s/ca-cert.pem", dir);
    snprintf(cert, sizeof cert, "%s/server-cert.pem", dir);
    snprintf(key, sizeof key, "%s/server-key.pem", dir);
    snprintf(crl, sizeof crl, "%s/ca-crl.pem", dir);
    int r = gnutls_certificate_allocate_credentials(&cr->x509);
    if (r < 0) {
        snprintf(err, errlen, "TLS: %s", gnutls_strerror(r));
        return -1;
    }
    if (!file_exists(cert) || !file_exists(key)) {
        snprintf(err, errlen, "--tls-certificates %s: %s and %s are needed", dir,
                 "server-cert.pem", "server-key.pem");
        return -1;
    }
    r = gnutls_certificate_set_x509_key_file(cr->x509, cert, key, GNUTLS_X509_FMT_PEM);
    if (r < 0) {
        snprintf(err, errlen, "--tls-certificates: %s or %s: %s", cert, key, gnutls_strerror(r));
        return -1;
    }
    if (file_exists(ca)) {
        r = gnutls_certificate_set_x509_trust_file(cr->x509, ca, GNUTLS_X509_FMT_PEM);
        if (r < 0) {
            snprintf(err, errlen, "--tls-certificates: %s: %s", ca, gnutls_strerror(r));
            return -1;
        }
        if (file_exists(crl)) {
            r = gnutls_certificate_set_x509_crl_file(cr->x509, crl, GNUTLS_X509_FMT_PEM);
            if (r < 0) {
                snprintf(err, errlen, "--tls-certificates: %s: %s", crl, gnutls_strerror(r));
                return -1;
            }
        }
    } else if (verify_peer) {
        snprintf(err, errlen, "--tls-verify-peer needs %s to check client certificates", ca);
        return -1;
    }
    return 0;
}

struct nbd_tls_creds *nbd_tls_creds_load(const char *certificates_dir, const char *psk_file,
                                         bool verify_peer, char *err, size_t errlen)
{
    struct nbd_tls_creds *cr = tc_xcalloc(1, sizeof *cr);
    cr->verify_peer = verify_peer;
    const char *prio = PRIORITY_X509;
    if (psk_file) {
        if (load_psk_file(cr, psk_file, err, errlen) < 0)
            goto fail;
        int r = gnutls_psk_allocate_server_credentials(&cr->psk);
        if (r < 0) {
            snprintf(err, errlen, "TLS: %s", gnutls_strerror(r));
            goto fail;
        }
        gnutls_psk_set_server_credentials_function(cr->psk, psk_lookup);
        prio = PRIORITY_PSK;
        snprintf(cr->desc, sizeof cr->desc, "pre-shared keys, %zu user%s", cr->nusers,
                 cr->nusers == 1 ? "" : "s");
    } else {
        if (load_x509(cr, certificates_dir, verify_peer, err, errlen) < 0)
            goto fail;
        snprintf(cr->desc, sizeof cr->desc, "X.509 certificates%s",
                 verify_peer ? ", client certificates required" : "");
    }
    const char *errpos = NULL;
    int r = gnutls_priority_init(&cr->priority, prio, &errpos);
    if (r < 0) {
        snprintf(err, errlen, "TLS priority '%s': %s", prio, gnutls_strerror(r));
        goto fail;
    }
    return cr;
fail:
    nbd_tls_creds_free(cr);
    return NULL;
}

void nbd_tls_creds_free(struct nbd_tls_creds *cr)
{
    if (cr == NULL)
        return;
    if (cr->x509)
        gnutls_certificate_free_credentials(cr->x509);
    if (cr->psk)
        gnutls_psk_free_server_credentials(cr->psk);
    if (cr->priority)
        gnutls_priority_deinit(cr->priority);
    for (size_t i = 0; i < cr->nusers; i++) {
        /* Keys do not outlive their use. */
        memset(cr->users[i].key, 0, cr->users[i].keylen);
        free(cr->users[i].key);
        free(cr->users[i].name);
    }
    free(cr->users);
    free(cr);
}

const char *nbd_tls_creds_describe(const struct nbd_tls_creds *cr)
{
    return cr->desc;
}

/* ---- the transport GnuTLS sees: two buffers ---- */

static ssize_t pull(gnutls_transport_ptr_t p, void *buf, size_t len)
{
    struct nbd_tls *t = p;
    size_t n = TC_MIN(len, t->in_end - t->in_start);
    if (n == 0) {
        gnutls_transport_set_errno(t->session, EAGAIN);
        return -1;
    }
    memcpy(buf, t->in + t->in_start, n);
    t->in_start += n;
    if (t->in_start == t->in_end)
        t->in_start = t->in_end = 0;
    return (ssize_t)n;
}

/* Called by GnuTLS only with a timeout of 0 here (no blocking waits). */
static int pull_timeout(gnutls_transport_ptr_t p, unsigned ms)
{
    struct nbd_tls *t = p;
    (void)ms;
    return t->in_end > t->in_start ? 1 : 0;
}

static void out_reserve(struct nbd_tls *t, size_t len)
{
    if (t->out_start > 0 && t->out_start == t->out_end)
        t->out_start = t->out_end = 0;
    if (t->out_end + len <= t->out_cap)
        return;
    if (t->out_start > 0) {
        memmove(t->out, t->out + t->out_start, t->out_end - t->out_start);
        t->out_end -= t->out_start;
        t->out_start = 0;
        if (t->out_end + len <= t->out_cap)
            return;
    }
    size_t cap = TC_MAX(t->out_cap * 2, t->out_end + len);
    t->out = realloc(t->out, cap);
    if (t->out == NULL)
        abort();
    t->out_cap = cap;
}

static ssize_t push(gnutls_transport_ptr_t p, const void *buf, size_t len)
{
    struct nbd_tls *t = p;
    out_reserve(t, len);
    memcpy(t->out + t->out_end, buf, len);
    t->out_end += len;
    return (ssize_t)len;
}

/* ---- sessions ---- */

struct nbd_tls *nbd_tls_new(struct nbd_tls_creds *cr, char *err, size_t errlen)
{
    struct nbd_tls *t = tc_xcalloc(1, sizeof *t);
    t->creds = cr;
    int r = gnutls_init(&t->session, GNUTLS_SERVER | GNUTLS_NONBLOCK);
    if (r < 0) {
        snprintf(err, errlen, "gnutls_init: %s", gnutls_strerror(r));
        free(t);
        return NULL;
    }
    r = gnutls_priority_set(t->session, cr->priority);
    if (r == 0 && cr->x509)
        r = gnutls_credentials_set(t->session, GNUTLS_CRD_CERTIFICATE, cr->x509);
    if (r == 0 && cr->psk)
        r = gnutls_credentials_set(t->session, GNUTLS_CRD_PSK, cr->psk);
    if (r < 0) {
        snprintf(err, errlen, "TLS session: %s", gnutls_strerror(r));
        nbd_tls_free(t);
        return NULL;
    }
    if (cr->x509 && cr->verify_peer) {
        gnutls_certificate_server_set_request(t->session, GNUTLS_CERT_REQUIRE);
        /* The handshake fails unless the chain verifies against the CA. */
        gnutls_session_set_verify_cert(t->session, NULL, 0);
    }
    gnutls_handshake_set_timeout(t->session, 0);
    gnutls_session_set_ptr(t->session, t);
    gnutls_transport_set_ptr(t->session, t);
    gnutls_transport_set_pull_function(t->session, pull);
    gnutls_transport_set_pull_timeout_function(t->session, pull_timeout);
    gnutls_transport_set_push_function(t->session, push);
    t->in_cap = IN_SIZE;
    t->in = tc_xmalloc(t->in_cap);
    return t;
}

void nbd_tls_free(struct nbd_tls *t)
{
    if (t == NULL)
        return;
    gnutls_deinit(t->session);
    free(t->in);
    free(t->out);
    free(t);
}

void *nbd_tls_in_space(struct nbd_tls *t, size_t *len)
{
    if (t->in_start > 0) {
        memmove(t->in, t->in + t->in_start, t->in_end - t->in_start);
        t->in_end -= t->in_start;
        t->in_start = 0;
    }
    *len = t->in_cap - t->in_end;
    return t->in + t->in_end;
}

void nbd_tls_in_added(struct nbd_tls *t, size_t n)
{
    t->in_end += n;
}

void nbd_tls_in_put(struct nbd_tls *t, const void *data, size_t len)
{
    size_t space;
    nbd_tls_in_space(t, &space);
    if (space < len) {
        t->in_cap = t->in_end + len;
        t->in = realloc(t->in, t->in_cap);
        if (t->in == NULL)
            abort();
    }
    memcpy(t->in + t->in_end, data, len);
    t->in_end += len;
}

bool nbd_tls_readable(struct nbd_tls *t)
{
    return t->in_end > t->in_start || gnutls_record_check_pending(t->session) > 0;
}

const void *nbd_tls_out_data(struct nbd_tls *t, size_t *len)
{
    *len = t->out_end - t->out_start;
    return t->out + t->out_start;
}

void nbd_tls_out_sent(struct nbd_tls *t, size_t n)
{
    t->out_start += TC_MIN(n, t->out_end - t->out_start);
    if (t->out_start == t->out_end)
        t->out_start = t->out_end = 0;
}

size_t nbd_tls_out_len(const struct nbd_tls *t)
{
    return t->out_end - t->out_start;
}

static void set_error(struct nbd_tls *t, int r)
{
    if (r == GNUTLS_E_FATAL_ALERT_RECEIVED)
        snprintf(t->err, sizeof t->err, "%s: %s", gnutls_strerror(r),
                 gnutls_alert_get_name(gnutls_alert_get(t->session)));
    else
        snprintf(t->err, sizeof t->err, "%s", gnutls_strerror(r));
}

int nbd_tls_handshake(struct nbd_tls *t, char *err, size_t errlen)
{
    for (unsigned tries = 0; tries < 64; tries++) {
        int r = gnutls_handshake(t->session);
        if (r == GNUTLS_E_SUCCESS)
            return 1;
        if (r == GNUTLS_E_AGAIN)
            return 0;
        if (gnutls_error_is_fatal(r)) {
            set_error(t, r);
            snprintf(err, errlen, "%s", t->err);
            /* Tell the client why (into out[], which conn.c sends). */
            if (r != GNUTLS_E_FATAL_ALERT_RECEIVED)
                gnutls_alert_send_appropriate(t->session, r);
            return -1;
        }
        /* A warning alert or an interruption: go on. */
    }
    snprintf(err, errlen, "TLS handshake does not progress");
    return -1;
}

ssize_t nbd_tls_read(struct nbd_tls *t, void *buf, size_t len)
{
    for (unsigned tries = 0; tries < 64; tries++) {
        ssize_t r = gnutls_record_recv(t->session, buf, len);
        if (r >= 0)
            return r;
        if (r == GNUTLS_E_AGAIN)
            return -EAGAIN;
        if (r == GNUTLS_E_REHANDSHAKE) {
            snprintf(t->err, sizeof t->err, "the client asked to renegotiate, "
                     "which this server does not do");
            return -EPROTO;
        }
        if (gnutls_error_is_fatal((int)r)) {
            set_error(t, (int)r);
            return -EPROTO;
        }
    }
    snprintf(t->err, sizeof t->err, "TLS read does not progress");
    return -EPROTO;
}

ssize_t nbd_tls_write(struct nbd_tls *t, const void *buf, size_t len)
{
    ssize_t r = gnutls_record_send(t->session, buf, TC_MIN(len, (size_t)RECORD_MAX));
    if (r < 0) {
        /* push never fails, so GNUTLS_E_AGAIN cannot happen here */
        set_error(t, (int)r);
        return -EPROTO;
    }
    return r;
}

const char *nbd_tls_error(const struct nbd_tls *t)
{
    return t->err[0] ? t->err : "TLS error";
}

void nbd_tls_describe(struct nbd_tls *t, char *out, size_t len)
{
    char *desc = gnutls_session_get_desc(t->session);
    char peer[160] = "";
    if (gnutls_auth_get_type(t->session) == GNUTLS_CRD_PSK) {
        const char *u = gnutls_psk_server_get_username(t->session);
        snprintf(peer, sizeof peer, ", PSK user '%s'", u ? u : "?");
    } else {
        unsigned n = 0;
        const gnutls_datum_t *certs = gnutls_certificate_get_peers(t->session, &n);
        gnutls_x509_crt_t crt;
        if (certs && n > 0 && gnutls_x509_crt_init(&crt) == 0) {
            gnutls_datum_t dn = { NULL, 0 };
            if (gnutls_x509_crt_import(crt, &certs[0], GNUTLS_X509_FMT_DER) == 0 &&
                gnutls_x509_crt_get_dn2(crt, &dn) == 0) {
                snprintf(peer, sizeof peer, ", client certificate '%.*s'", (int)dn.size,
                         (const char *)dn.data);
                gnutls_free(dn.data);
            }
            gnutls_x509_crt_deinit(crt);
        }
    }
    snprintf(out, len, "%s%s", desc ? desc : "TLS", peer);
    gnutls_free(desc);
}
