#!/usr/bin/python3
"""The C ABI cannot change by accident: the kiln_* functions each shared
library exports (nm -D) must equal the committed list tests/capi/abi.txt
("<library> <symbol>" lines). After a deliberate addition, regenerate with
--write and say so in the commit.

Usage: check_abi.py [--write] LIBKILN LIBKILN_COMPILER
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
LIST = os.path.join(HERE, "abi.txt")


def exported(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True, check=True).stdout
    syms = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] == "T" and parts[2].startswith("kiln_"):
            syms.add(parts[2])
    return syms


def main():
    args = sys.argv[1:]
    write = "--write" in args
    args = [a for a in args if a != "--write"]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    have = set()
    for lib, tag in zip(args, ("libkiln", "libkiln_compiler")):
        have |= {f"{tag} {s}" for s in exported(lib)}
    if write:
        with open(LIST, "w") as f:
            f.write("".join(f"{l}\n" for l in sorted(have)))
        print(f"wrote {len(have)} symbols to {LIST}")
        return 0
    with open(LIST) as f:
        want = {l.strip() for l in f if l.strip() and not l.startswith("#")}
    missing, extra = sorted(want - have), sorted(have - want)
    for s in missing:
        print(f"missing from the libraries (an ABI break): {s}")
    for s in extra:
        print(f"exported but not in tests/capi/abi.txt (new ABI? add it with --write): {s}")
    if missing or extra:
        return 1
    print(f"ABI OK: {len(have)} symbols")
    return 0


if __name__ == "__main__":
    sys.exit(main())
