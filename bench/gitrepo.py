#!/usr/bin/env python3
"""bench/gitrepo.py: the repository of the git workload, built from a Debian
linux-source package without any git server.

    bench/gitrepo.py DEB OUT.git TAGS [DIR...]

DEB      a linux-source-*.deb (apt-get download linux-source-6.1)
OUT.git  the bare repository to create (must not exist)
TAGS     how many tags, 1 to 9
DIR...   only these top-level directories of the kernel tree (default: all)

Branch master is the tree as shipped.  Tag tN (N = 1..TAGS) is a child of
master without the files of hash bucket N and with one line appended to
the files of bucket 10+N (bucket = crc32(path) mod 20): each tag differs
from master, and from every other tag, in about 10% of the files, like
kernel releases a few months apart.  Names, dates and messages are fixed,
so the same package always gives the same commit ids.

The tarball is read once as a stream and fed to git fast-import, which
writes one pack: no loose objects, no work tree.
"""
import os
import subprocess
import sys
import tarfile
import zlib

if len(sys.argv) < 4 or not sys.argv[3].isdigit() or not 1 <= int(sys.argv[3]) <= 9:
    sys.stderr.write(__doc__)
    sys.exit(2)
deb, out, tags = sys.argv[1], sys.argv[2], int(sys.argv[3])
dirs = [d.strip('/') for d in sys.argv[4:]]

members = subprocess.run(['dpkg-deb', '-c', deb], check=True, capture_output=True,
                         text=True).stdout.split('\n')
tarball = next((l.split()[-1] for l in members
                if l.split() and l.split()[-1].startswith('./usr/src/linux-source-')
                and l.endswith('.tar.xz')), None)
if tarball is None:
    sys.exit('gitrepo.py: no kernel tarball in ' + deb)
top = os.path.basename(tarball)[:-len('.tar.xz')]

env = dict(os.environ, GIT_CONFIG_NOSYSTEM='1', HOME=os.path.dirname(os.path.abspath(out)))
subprocess.run(['git', 'init', '-q', '--bare', '-b', 'master', out], check=True, env=env)
subprocess.run(['git', '-C', out, 'config', 'gc.auto', '0'], check=True, env=env)

unpack = subprocess.Popen(f"dpkg-deb --fsys-tarfile '{deb}' | tar -xO '{tarball}' | xz -dc",
                          shell=True, stdout=subprocess.PIPE)
fi = subprocess.Popen(['git', '-C', out, 'fast-import', '--quiet', '--done'],
                      stdin=subprocess.PIPE, env=env)
w = fi.stdin
WHO = b'bench <bench@tiercache.invalid> 1704067200 +0000'


def data(b):
    w.write(b'data %d\n' % len(b))
    w.write(b)
    w.write(b'\n')


mark = 0
files = []          # (mode, mark, path) of master
altered = {}        # tag -> [(mode, mark, path)]
deleted = {}        # tag -> [path]
with tarfile.open(fileobj=unpack.stdout, mode='r|') as tar:
    for m in tar:
        parts = m.name.split('/', 1)
        if len(parts) < 2 or not parts[1]:
            continue
        path = parts[1]
        if dirs and path.split('/', 1)[0] not in dirs:
            continue
        if m.issym():
            mode, content = b'120000', m.linkname.encode()
        elif m.isfile():
            mode = b'100755' if m.mode & 0o111 else b'100644'
            content = tar.extractfile(m).read()
        else:
            continue
        bpath = path.encode()
        mark += 1
        w.write(b'blob\nmark :%d\n' % mark)
        data(content)
        files.append((mode, mark, bpath))
        bucket = zlib.crc32(bpath) % 20
        if 1 <= bucket <= tags:
            deleted.setdefault(bucket, []).append(bpath)
        elif 11 <= bucket <= 10 + tags and mode != b'120000':
            mark += 1
            w.write(b'blob\nmark :%d\n' % mark)
            data(content + b'\n/* tag t%d */\n' % (bucket - 10))
            altered.setdefault(bucket - 10, []).append((mode, mark, bpath))
if unpack.wait() != 0:
    sys.exit('gitrepo.py: unpacking %s failed' % deb)
if not files:
    sys.exit('gitrepo.py: no files selected')


def quote(p):
    return b'"' + p.replace(b'\\', b'\\\\').replace(b'"', b'\\"').replace(b'\n', b'\\n') + b'"'


mark += 1
master = mark
w.write(b'commit refs/heads/master\nmark :%d\ncommitter %s\n' % (master, WHO))
data(('%s%s\n' % (top, ' (' + ' '.join(dirs) + ')' if dirs else '')).encode())
for mode, mk, p in files:
    w.write(b'M %s :%d %s\n' % (mode, mk, quote(p)))
for n in range(1, tags + 1):
    w.write(b'commit refs/tags/t%d\ncommitter %s\n' % (n, WHO))
    data(b't%d\n' % n)
    w.write(b'from :%d\n' % master)
    for p in deleted.get(n, []):
        w.write(b'D %s\n' % quote(p))
    for mode, mk, p in altered.get(n, []):
        w.write(b'M %s :%d %s\n' % (mode, mk, quote(p)))
w.write(b'done\n')
w.close()
if fi.wait() != 0:
    sys.exit('gitrepo.py: git fast-import failed')
print('%s: %d files, %d tags' % (out, len(files), tags))
