/*
 * TLS for the NBD server, with GnuTLS, without blocking the reactor.
 *
 * GnuTLS never touches the socket.  Each session reads ciphertext from an
 * input buffer and writes ciphertext to an output buffer, through custom
 * pull and push functions; io_uring moves bytes between the socket and
 * those buffers (conn.c):
 *
 *   socket ─recv (io_uring)─► in[] ─pull─► gnutls_record_recv ─► plaintext
 *   plaintext ─► gnutls_record_send ─push─► out[] ─send (io_uring)─► socket
 *
 * Pull returns EAGAIN when in[] is empty, so a handshake step or a read
 * returns GNUTLS_E_AGAIN and conn.c arms a receive; push always succeeds
 * (out[] grows), and conn.c stops encrypting while out[] holds more than
 * NBD_TLS_OUT_HIGH bytes, which bounds it.  Nothing here waits, so every
 * call returns at once.
 *
 * Credentials are loaded once, when the server starts: X.509 certificates
 * from a directory (ca-cert.pem, server-cert.pem, server-key.pem, the
 * layout of nbdkit and libnbd) or pre-shared keys from a file of
 * "username:hexkey" lines.  Both are read into memory, so no handshake
 * reads a file.
 */
#ifndef TC_NBD_TLS_H
#define TC_NBD_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

enum nbd_tls_mode { NBD_TLS_OFF, NBD_TLS_ON, NBD_TLS_REQUIRE };

/* Stop encrypting replies while this much ciphertext waits to be sent. */
#define NBD_TLS_OUT_HIGH (256u << 10)

struct nbd_tls_creds;
struct nbd_tls;

/* certificates_dir or psk_file (exactly one); verify_peer asks clients
 * for a certificate signed by DIR/ca-cert.pem. */
struct nbd_tls_creds *nbd_tls_creds_load(const char *certificates_dir, const char *psk_file,
                                         bool verify_peer, char *err, size_t errlen);
void nbd_tls_creds_free(struct nbd_tls_creds *creds);
/* "x509", "x509, client certificates required" or "PSK, N users". */
const char *nbd_tls_creds_describe(const struct nbd_tls_creds *creds);

/* A server session; NULL with err filled if GnuTLS refuses. */
struct nbd_tls *nbd_tls_new(struct nbd_tls_creds *creds, char *err, size_t errlen);
void nbd_tls_free(struct nbd_tls *t);

/* Ciphertext from the socket: where the next bytes go (len 0: full),
 * then how many arrived.  nbd_tls_in_put copies bytes in. */
void *nbd_tls_in_space(struct nbd_tls *t, size_t *len);
void nbd_tls_in_added(struct nbd_tls *t, size_t n);
void nbd_tls_in_put(struct nbd_tls *t, const void *data, size_t len);
/* Ciphertext or decrypted bytes are buffered: a read may succeed now. */
bool nbd_tls_readable(struct nbd_tls *t);

/* Ciphertext for the socket. */
const void *nbd_tls_out_data(struct nbd_tls *t, size_t *len);
void nbd_tls_out_sent(struct nbd_tls *t, size_t n);
size_t nbd_tls_out_len(const struct nbd_tls *t);

/* One handshake step: 1 done, 0 needs more input, -1 failed (err). */
int nbd_tls_handshake(struct nbd_tls *t, char *err, size_t errlen);
/* Plaintext: >0 bytes, 0 the peer closed, -EAGAIN needs more input,
 * -EPROTO failed (nbd_tls_error says why). */
ssize_t nbd_tls_read(struct nbd_tls *t, void *buf, size_t len);
/* Encrypt up to one record (16 KiB) of buf: bytes taken, or -EPROTO. */
ssize_t nbd_tls_write(struct nbd_tls *t, const void *buf, size_t len);
const char *nbd_tls_error(const struct nbd_tls *t);
/* After the handshake: protocol, cipher and the authenticated peer
 * (PSK username or certificate subject), for the log. */
void nbd_tls_describe(struct nbd_tls *t, char *out, size_t len);

#endif
