#!/usr/bin/python3
"""What the hostile-input checks cost: load time of a .kiln (embedded weights,
mode 1, mode 2) and compile time into a warm weight store (modes 1 and 2), for
two kiln binaries side by side (interleaved runs, medians, ratio new/old).

Usage: hostile_cost.py --old OLD_KILN --new NEW_KILN --model M.onnx --work DIR [--runs N]
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import time


def run(argv):
    t0 = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True)
    dt = (time.perf_counter() - t0) * 1000
    if p.returncode != 0:
        raise SystemExit(f"failed: {' '.join(argv)}\n{p.stdout}{p.stderr}")
    return dt, p.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--runs", type=int, default=9)
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    bins = {"old": os.path.abspath(a.old), "new": os.path.abspath(a.new)}
    load = {(b, m): [] for b in bins for m in (0, 1, 2)}
    comp = {(b, m): [] for b in bins for m in (1, 2)}
    # Warm stores and the .kiln files to load, one set per binary.
    for b, k in bins.items():
        for m in (0, 1, 2):
            d = os.path.join(a.work, b, f"m{m}")
            os.makedirs(d)
            run([k, "compile", "--model", a.model, "--output", os.path.join(d, "model.kiln"),
                 "--external-weight", str(m)])
    for _ in range(a.runs):
        for b, k in bins.items():
            for m in (0, 1, 2):
                _, out = run([k, "run", os.path.join(a.work, b, f"m{m}", "model.kiln")])
                load[(b, m)].append(float(re.search(r"load ([0-9.]+) ms", out).group(1)))
            for m in (1, 2):
                d = os.path.join(a.work, b, f"m{m}")
                dt, _ = run([k, "compile", "--model", a.model, "--output", os.path.join(d, "again.kiln"),
                             "--external-weight", str(m), "--external-weight-dir", os.path.join(d, "weight")])
                comp[(b, m)].append(dt)
    print(f"| measurement | old median ms | new median ms | new/old |")
    print(f"|---|---:|---:|---:|")
    for m in (0, 1, 2):
        o, n = statistics.median(load[("old", m)]), statistics.median(load[("new", m)])
        print(f"| load (`kiln run`'s load time), mode {m} | {o:.2f} | {n:.2f} | {n / o:.3f} |")
    for m in (1, 2):
        o, n = statistics.median(comp[("old", m)]), statistics.median(comp[("new", m)])
        print(f"| compile into a warm store (process wall time), mode {m} | {o:.1f} | {n:.1f} | {n / o:.3f} |")


if __name__ == "__main__":
    main()
