#!/usr/bin/python3
"""One man page per subcommand, made from its --help text.

usage: scripts/man-pages.py TIERCACHE OUTDIR

Writes OUTDIR/tiercache-COMMAND.8 for every command the main help lists
(but version): NAME from that list, SYNOPSIS from the Usage lines, and the
rest of the help as the description.  --help is the one text kept current
with the behaviour (reviewed with every change), so the pages are made
from it rather than written twice; docs/tiercache.8 stays the manual that
explains.  tests/cli/manpages.test fails when docs/ is behind the binary.
"""
import os
import re
import subprocess
import sys


def run(binary, *args):
    p = subprocess.run([binary, *args], capture_output=True, text=True)
    return p.stdout


def roff_line(line):
    line = line.replace("\\", "\\e")
    if line.startswith((".", "'")):
        line = "\\&" + line
    return line


def main():
    binary, outdir = sys.argv[1], sys.argv[2]
    version = run(binary, "version").strip() or "tiercache"
    commands = []
    in_list = False
    for line in run(binary, "--help").splitlines():
        if line.startswith("Commands:"):
            in_list = True
            continue
        if in_list:
            m = re.match(r"  (\S+)\s+(.*)", line)
            if not m:
                if line.strip() == "":
                    break
                continue
            if m.group(1) != "version":
                commands.append((m.group(1), m.group(2)))
    for name, summary in commands:
        text = run(binary, name, "--help").rstrip("\n").splitlines()
        usage, rest = [], []
        for i, line in enumerate(text):
            if i == 0 or (usage and not rest and line.startswith(" ") and line.strip()):
                usage.append(line.replace("Usage: ", "", 1).strip())
            else:
                rest = text[i:]
                break
        while rest and not rest[0].strip():
            rest.pop(0)
        page = [
            f".\\\" Made from 'tiercache {name} --help' by scripts/man-pages.py; do not edit.",
            f'.TH TIERCACHE\\-{name.upper().replace("-", chr(92) + "-")} 8 "" "{version}" '
            f'"System Administration"',
            ".SH NAME",
            f"tiercache\\-{name.replace('-', chr(92) + '-')} \\- {roff_line(summary)}",
            ".SH SYNOPSIS",
            ".nf",
            *[roff_line(u) for u in usage],
            ".fi",
            ".SH DESCRIPTION",
            ".nf",
            *[roff_line(r) for r in rest],
            ".fi",
            ".SH SEE ALSO",
            ".BR tiercache (8),",
            "the manual of the whole program, which explains what the options do.",
        ]
        with open(os.path.join(outdir, f"tiercache-{name}.8"), "w") as f:
            f.write("\n".join(page) + "\n")
        print(f"tiercache-{name}.8")


if __name__ == "__main__":
    main()
