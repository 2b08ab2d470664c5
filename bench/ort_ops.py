#!/usr/bin/python3
"""Per-op table of an ONNX Runtime session profile (bench/ort_bench.js --profile PREFIX).

  /usr/bin/python3 bench/ort_ops.py PROFILE.json [--skip N]

ONNX Runtime's profiler writes one span per node and run ("cat": "Node", name NODE_kernel_time,
args.op_name). This sums, per op type, each node's median span over the runs (after skipping
each node's first N spans: the warm-up), the way `kiln bench --profile` sums each task's
median, and prints ms per run and share, largest first. Nodes ONNX Runtime inserted (its
layout reorders, fused nodes) appear under their own op names.
"""
import argparse
import collections
import json
import statistics
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profile")
    ap.add_argument("--skip", type=int, default=0, help="spans to skip per node (warm-up runs)")
    args = ap.parse_args()
    try:
        with open(args.profile) as f:
            events = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"error: cannot read {args.profile}: {e}")
    if isinstance(events, dict):
        events = events.get("traceEvents", [])
    spans, op_of = collections.defaultdict(list), {}
    for e in events:
        if not isinstance(e, dict) or e.get("cat") != "Node" or "dur" not in e:
            continue
        name = str(e.get("name", ""))
        if not name.endswith("_kernel_time"):
            continue
        spans[name].append(float(e["dur"]))
        op_of[name] = str(e.get("args", {}).get("op_name", "?"))
    if not spans:
        sys.exit(f"error: no node spans in {args.profile}")
    per_op, nodes = collections.Counter(), collections.Counter()
    for name, durs in spans.items():
        kept = durs[args.skip:] or durs
        per_op[op_of[name]] += statistics.median(kept) / 1000.0
        nodes[op_of[name]] += 1
    total = sum(per_op.values())
    print(f"{'op':28s} {'nodes':>6s} {'ms/run':>9s} {'share':>7s}")
    for op, ms in per_op.most_common():
        print(f"{op:28s} {nodes[op]:6d} {ms:9.3f} {100 * ms / total:6.1f}%")
    print(f"{'total':28s} {sum(nodes.values()):6d} {total:9.3f} {100.0:6.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
