#!/usr/bin/env python3
"""bench/startclock.py SOCKET READY: when does an NBD server starting on
the Unix socket SOCKET answer its first request (the scale workload,
bench/workloads/scale.sh)?

Loads the nbd module, creates the file READY (the caller starts the server
once it exists, so that the start of this program is not counted), then
connects to SOCKET every 2 ms until a connection is made and a 4 KiB read
at offset 0 is answered, and prints the time of that answer (seconds since
the epoch, the clock of `date +%s.%N`).  Exits 1 without an answer within
300 s.
"""
import os
import sys
import time

import nbd

sock, ready = sys.argv[1], sys.argv[2]
open(ready, 'w').close()
t0 = time.monotonic()
while True:
    if time.monotonic() - t0 > 300:
        sys.stderr.write('startclock: no answer on %s in 300 s\n' % sock)
        sys.exit(1)
    if os.path.exists(sock):
        h = nbd.NBD()
        try:
            h.connect_unix(sock)
            h.pread(4096, 0)
            t1 = time.time()
            h.shutdown()
            break
        except nbd.Error:
            pass
        finally:
            del h
    time.sleep(0.002)
print('%.6f' % t1)
