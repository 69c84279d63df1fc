/*
 * Fuzzing the NBD handshake: the greeting, the client flags and the
 * options (src/nbd/handshake.c), with the connection code around them
 * (src/nbd/conn.c) and, once a client picks the export, the transmission
 * phase too.
 *
 * Input: the SIM_HDR bytes of nbd_sim.h (server configuration and the
 * order of events), then everything the client sends from its first byte
 * (client flags, options, requests).  The seeds in
 * tests/fuzz/corpus/nbd_handshake/ are real clients' streams.
 */
#include <stddef.h>
#include <stdint.h>

#include "nbd_sim.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < SIM_HDR)
        return 0;
    sim_run(data, data + SIM_HDR, size - SIM_HDR);
    return 0;
}
