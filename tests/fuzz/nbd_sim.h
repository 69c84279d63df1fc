/*
 * A simulated world around the real NBD server code, for the NBD fuzz
 * harnesses (fuzz_nbd_handshake.c, fuzz_nbd_transmission.c).
 *
 * The server's own files run unchanged: src/nbd/server.c (started with no
 * listener), conn.c, handshake.c and transmission.c.  Around them,
 * nbd_sim.c provides what they call:
 *
 *   reactor_sqe(), timer_arm(), timer_cancel()
 *       a reactor that never touches the kernel: each armed recv or
 *       sendmsg is kept, and the simulation completes it later with bytes
 *       of the client's stream, a partial send, EOF, EAGAIN or an error;
 *   tc_submit(), tc_volume_size(), ...
 *       an engine that checks the contract of include/tiercache.h on every
 *       request (in range, not read-only, buffers of the right size) and
 *       completes requests in any order, with data or with errors;
 *   bufpool_get(), bufpool_put()
 *       buffers of exactly the size asked for, so that AddressSanitizer
 *       sees a byte past a request's length (the real pool rounds up).
 *
 * Nothing in src/ is changed for this.  The link replaces the io_uring
 * reactor, the engine and the buffer pool; conn_abort() is wrapped
 * (-Wl,--wrap) only to note that the server cut the connection, and
 * shutdown() to make the simulated socket behave as a shut-down one.
 *
 * The order of events (deliveries, sends, completions, a server shutdown)
 * comes from a small generator seeded by the input's header, so every run
 * is reproducible from its input.  At the end the whole output is checked
 * against the client's stream by a separate client-side reading of the
 * protocol (every reply well formed and for a request that was sent; read
 * data exactly what the engine returned; each write's payload exactly the
 * bytes that followed its header; every request answered when nothing cut
 * the connection).  Any violation aborts with a message.
 */
#ifndef TC_FUZZ_NBD_SIM_H
#define TC_FUZZ_NBD_SIM_H

#include <stddef.h>
#include <stdint.h>

/*
 * The header of every NBD fuzz input:
 *
 *   byte 0  bit 0  the export is read-only
 *           bit 1  the volume is rotational (a flag only)
 *           bit 2  the server may be shut down during the run
 *           bit 3  sends may fail (the client stops reading)
 *           bit 4  receives may fail (the client resets the connection)
 *           bit 5  the export is named "fuzz" (else the default, "")
 *           bit 6  the engine may fail requests
 *           bit 7  the client's bytes arrive in small pieces
 *   byte 1  volume size: one of 4 KiB, 64 KiB, 1 MiB, 2 MiB, 64 MiB,
 *           1 TiB, 2^63 - 4 KiB, 2^64 - 4 KiB (low 3 bits);
 *           bit 3: request buffers are bounded (--max-buffer-memory) to
 *           SIM_BUFFER_MEMORY;
 *           bit 4: the handshake has a deadline (--handshake-timeout),
 *           which may pass at any step of it
 *   byte 2-5  seed of the event order
 */
#define SIM_HDR 6
#define SIM_EXPORT_NAME "fuzz"
/* The least --max-buffer-memory that serve accepts: one largest request. */
#define SIM_BUFFER_MEMORY (32ull << 20)

/* One connection: the client sends stream[0, len). */
void sim_run(const uint8_t hdr[SIM_HDR], const uint8_t *stream, size_t len);

#endif
