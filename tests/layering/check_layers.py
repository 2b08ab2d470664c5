#!/usr/bin/env python3
"""Kiln's libraries are layers (CMakeLists.txt, docs/design.md "Libraries"):

  kiln_core (common, ir, ops, plan) <- kiln_format (format)
  <- kiln_device (device) <- kiln_cpu (backends/cpu) <- kiln_sim (backends/sim)
  <- kiln_runtime (runtime, weights, custom, rtc) <- kiln_compiler (frontend,
  passes, api) <- tools; the CUDA module (backends/cuda) sits on the runtime.

A file may include headers of its own directory, of the directories its
layer may use (below), and the public headers (kiln/...). This checks every
#include "..." under src/ and names each one that points up or sideways.
"""
import os
import re
import sys

CORE = {"common", "ir", "ops", "plan"}
ALLOWED = {
    "common": {"common"},
    "ir": {"common", "ir"},
    "ops": {"common", "ir", "ops"},
    "plan": {"common", "ir", "plan"},
    "format": CORE | {"format"},
    "device": {"common", "ir", "device"},
    "backends/cpu": CORE | {"device", "backends/cpu"},
    "backends/sim": CORE | {"device", "backends/cpu", "backends/sim"},
}
RUNTIME = CORE | {"format", "device", "backends/cpu", "backends/sim", "runtime", "weights", "custom", "rtc"}
for d in ("runtime", "weights", "custom", "rtc"):
    ALLOWED[d] = RUNTIME
# The CUDA backend is a module built on the runtime library (libkiln.so),
# which loads it with dlopen and never includes it.
ALLOWED["backends/cuda"] = RUNTIME | {"backends/cuda"}
COMPILER = RUNTIME | {"frontend/onnx", "passes", "api"}
for d in ("frontend/onnx", "passes", "api"):
    ALLOWED[d] = COMPILER
ALLOWED["tools"] = COMPILER | {"tools"}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def dir_of(header):
    """The src/ directory a quoted include names (None: public or local)."""
    if header.startswith("kiln/"):
        return None
    parts = header.split("/")
    if len(parts) == 1:
        return None  # same directory
    for n in (2, 1):
        d = "/".join(parts[:n])
        if d in ALLOWED:
            return d
    return "/".join(parts[:-1])


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src")
    bad = []
    files = 0
    for root, _, names in os.walk(src):
        rel = os.path.relpath(root, src).replace(os.sep, "/")
        layer = rel if rel in ALLOWED else "/".join(rel.split("/")[:2])
        if layer not in ALLOWED:
            layer = rel.split("/")[0]
        for name in names:
            if not name.endswith((".h", ".cc")):
                continue
            files += 1
            if layer not in ALLOWED:
                bad.append(f"src/{rel}/{name}: directory '{rel}' belongs to no layer (add it to {__file__})")
                continue
            text = open(os.path.join(root, name), encoding="utf-8").read()
            for h in INCLUDE.findall(text):
                d = dir_of(h)
                if d is not None and d not in ALLOWED[layer]:
                    bad.append(f"src/{rel}/{name} includes \"{h}\": layer '{layer}' may not use '{d}'")
    for b in bad:
        print(b)
    print(f"{files} files checked, {len(bad)} include(s) against the layering")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
