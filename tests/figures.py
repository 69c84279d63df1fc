#!/usr/bin/python3 -S
"""Figures from 'tiercache status --json' output on stdin, one a line:

    tiercache status --json | python3 -S tests/figures.py PATH...

PATH is dotted (volume.cache.dirty_bytes; list items by index:
volume.cache.devices.0.writes); booleans print as true/false.  Run with
-S (no site packages): the tests call it hundreds of times a run, and
with only json to import it starts in a fraction of the time tclib.py
(libnbd, argparse) takes.
"""
import json
import sys


def figures(status, paths):
    out = []
    for path in paths:
        x = status
        for k in path.split("."):
            x = x[int(k)] if isinstance(x, list) else x[k]
        out.append(str(x).lower() if isinstance(x, bool) else str(x))
    return out


if __name__ == "__main__":
    for line in figures(json.load(sys.stdin), sys.argv[1:]):
        print(line)
