#!/usr/bin/env python3
"""Sums an Nsight Compute CSV (--metrics gpu__time_duration.sum --csv --print-units base) by kernel.

  python3 scripts/ncu_summary.py FILE.csv [--top 15]

Prints the kernel count, the total kernel time, and the kernels taking the most time (count,
microseconds, name) -- the per-kernel breakdown scripts/gpu-check.sh records for BERT-base.
"""
import argparse
import collections
import csv
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=15)
    a = ap.parse_args()
    with open(a.csv, newline="") as f:
        rows = [r for r in csv.reader(f) if len(r) > 5]
    if not rows or "Kernel Name" not in rows[0]:
        sys.exit(f"{a.csv}: no ncu table (header with 'Kernel Name' not found)")
    hdr = rows[0]
    ki, mi, vi = hdr.index("Kernel Name"), hdr.index("Metric Name"), hdr.index("Metric Value")
    agg = collections.defaultdict(lambda: [0, 0.0])
    for r in rows[1:]:
        if r[mi] != "gpu__time_duration.sum":
            continue
        name = r[ki].split("(")[0][:100]
        agg[name][0] += 1
        agg[name][1] += float(r[vi].replace(",", ""))
    total = sum(v for _, v in agg.values())
    print(f"{sum(c for c, _ in agg.values())} kernels, {total / 1e3:.1f} us of kernel time")
    for name, (c, v) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:a.top]:
        print(f"  {c:5d} {v / 1e3:10.1f} us  {name}")


if __name__ == "__main__":
    main()
