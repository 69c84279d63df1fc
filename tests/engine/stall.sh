# The setup of the tests of an NBD origin connection that stops answering
# while it carries a write (nbd-stall-write*.test); source it after
# tests/lib.sh and engine.sh.  An origin file backing.img (32 MiB, random)
# and its model model.img, nbdkit serving it, and stallproxy.py in front
# (URI_p), controlled by files in $TC_TMP; io and wait_for below.
make_file backing.img $((32 * MiB)) random
cp backing.img model.img
start_nbdkit k file "$TC_TMP/backing.img"
rm -f p.sock
$PY "$TC_SRC/tests/engine/stallproxy.py" "$TC_TMP/p.sock" "$SOCK_k" "$TC_TMP" > proxy.log 2>&1 &
proxy=$!
on_exit "kill $proxy"
for i in $(seq 1 100); do [ -S p.sock ] && break; sleep 0.1; done
URI_p="nbd+unix:///?socket=$TC_TMP/p.sock"

# wait_for NAME 'CONDITION on $v' PATH [SECONDS]: poll a status value.
wait_for() {
  local name=$1 cond=$2 path=$3 limit=${4:-60} i v
  for ((i = 0; i < limit * 10; i++)); do
    v=$(stats "$name" "$path")
    if eval "$cond"; then return 0; fi
    sleep 0.1
  done
  fail "$path is $v after $limit s (wanted $cond)"
}
wait_file() {
  local f=$1 i
  for i in $(seq 1 600); do [ -e "$f" ] && return 0; sleep 0.1; done
  fail "$f never appeared"
}

# io.py SOCK MODEL CMD...: client I/O through the daemon, checked against
# and recorded in the model file.
cat > io.py <<'PY'
import nbd, sys
sock, model, cmd = sys.argv[1:4]
a = sys.argv[4:]
h = nbd.NBD()
h.connect_uri(f"nbd+unix:///?socket={sock}")
m = open(model, "r+b")
def ref(off, n):
    m.seek(off); return m.read(n)
if cmd == "write":                  # OFF LEN BYTE: must succeed
    off, n, b = int(a[0]), int(a[1]), int(a[2], 0)
    h.pwrite(bytes([b]) * n, off)
    m.seek(off); m.write(bytes([b]) * n)
elif cmd == "write-fails":          # OFF LEN BYTE: must fail (model unchanged)
    off, n, b = int(a[0]), int(a[1]), int(a[2], 0)
    try:
        h.pwrite(bytes([b]) * n, off)
    except nbd.Error as e:
        print(f"write at {off} failed as it should: {e}")
    else:
        sys.exit(f"write at {off} succeeded")
elif cmd == "read":                 # OFF LEN: must return the model's bytes
    off, n = int(a[0]), int(a[1])
    got = h.pread(n, off)
    if got != ref(off, n):
        sys.exit(f"read at {off}+{n}: not the model's data")
elif cmd == "read-fails":           # OFF LEN: must fail
    off, n = int(a[0]), int(a[1])
    try:
        h.pread(n, off)
    except nbd.Error as e:
        print(f"read at {off} failed as it should: {e}")
    else:
        sys.exit(f"read at {off} succeeded")
h.shutdown()
PY
io() { $PY io.py "$@"; }
K=$((64 * 1024))

