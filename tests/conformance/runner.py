#!/usr/bin/python3
"""Run ONNX backend node tests against the kiln CLI.

Test data comes from generate.py (DIR/node/test_*/model.onnx plus
test_data_set_*/input_*.pb, output_*.pb). A case is applicable when every node
of its graph (subgraphs included) is a default-domain op listed by `kiln ops`.
Each applicable case is compiled with `kiln compile`, run with
`kiln run --input <i>=input_<i>.npy`, and every DIR/output_<i>.npy is compared
with the reference using ONNX's backend tolerances (rtol=1e-3, atol=1e-7).

Tensor conventions in the .npy files: bfloat16 tensors are uint16 bit patterns
(that is how ONNX's generator stores them), strings are numpy unicode arrays.
"""
import argparse
import concurrent.futures
import datetime
import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

RTOL, ATOL = 1e-3, 1e-7
DEFAULT_DOMAINS = ("", "ai.onnx")
HERE = os.path.dirname(os.path.abspath(__file__))


@dataclass
class Case:
    name: str
    path: str
    ops: set                                   # default-domain op types
    foreign: set = field(default_factory=set)  # "domain::op" of other domains
    non_tensor: str = ""                       # why inputs/outputs can't be .npy
    status: str = ""                           # PASS / FAIL / EXCL
    reason: str = ""


def graph_ops(graph, ops, foreign):
    for node in graph.node:
        if node.domain in DEFAULT_DOMAINS:
            ops.add(node.op_type)
        else:
            foreign.add(f"{node.domain}::{node.op_type}")
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                graph_ops(sub, ops, foreign)


def load_case(path):
    model = onnx.load(os.path.join(path, "model.onnx"))
    case = Case(os.path.basename(path), path, set())
    graph_ops(model.graph, case.ops, case.foreign)
    kinds = {vi.type.WhichOneof("value") for vi in list(model.graph.input) + list(model.graph.output)}
    kinds.discard("tensor_type")
    if kinds:
        case.non_tensor = "non-tensor graph inputs/outputs (" + ", ".join(sorted(kinds)) + ")"
    return case


def load_exclusions(path):
    """Lines `case_name_or_glob  # reason`."""
    rules = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                pattern, _, reason = line.partition("#")
                if pattern.strip():
                    rules.append((pattern.strip(), reason.strip() or "listed in exclusions.txt"))
    return rules


def read_pb(path):
    tensor = onnx.TensorProto()
    with open(path, "rb") as f:
        tensor.ParseFromString(f.read())
    return numpy_helper.to_array(tensor)


def numbered(directory, prefix):
    """Files `prefix<i>.pb` in index order."""
    found = [f for f in os.listdir(directory) if re.fullmatch(prefix + r"\d+\.pb", f)]
    return sorted(found, key=lambda f: int(f[len(prefix):-3]))


def compare(ref, out):
    """None if out matches ref, else a one-line description of the mismatch."""
    if ref.dtype.kind in "OUS":
        if out.dtype.kind not in "OUS":
            return f"dtype {out.dtype}, expected strings"
        ref, out = ref.astype(str), out.astype(str)
    elif out.dtype != ref.dtype:
        return f"dtype {out.dtype}, expected {ref.dtype}"
    if out.shape != ref.shape:
        return f"shape {out.shape}, expected {ref.shape}"
    floating = ref.dtype.kind in "fc"
    if floating:
        wide = np.complex128 if ref.dtype.kind == "c" else np.float64
        a, b = out.astype(wide), ref.astype(wide)
        ok = np.isclose(a, b, rtol=RTOL, atol=ATOL, equal_nan=True)
    else:
        ok = out == ref
    if ok.all():
        return None
    bad = ~ok
    msg = f"{bad.sum()}/{ok.size} elements differ"
    if floating:
        finite = bad & np.isfinite(a) & np.isfinite(b)
        if finite.any():
            diff = np.abs(a - b)[finite]
            with np.errstate(divide="ignore", invalid="ignore"):
                rel = diff / np.abs(b[finite])
            msg += f", max abs diff {diff.max():.3g}, max rel diff {np.nanmax(rel):.3g}"
        if (bad & ~(np.isfinite(a) & np.isfinite(b))).any():
            msg += ", NaN/Inf mismatch"
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    return msg + f" (first at {first}: got {out[first]!r}, expected {ref[first]!r})"


def kiln_call(args, cmd, what):
    """Run kiln; None on success, else the reason."""
    try:
        proc = subprocess.run([args.kiln] + cmd, capture_output=True, text=True,
                              errors="replace", timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return f"{what}: timed out after {args.timeout} s"
    if proc.returncode == 0:
        return None
    lines = [l.strip() for l in (proc.stderr + "\n" + proc.stdout).splitlines() if l.strip()]
    return f"{what} (exit {proc.returncode}): " + (lines[0] if lines else "no output")


def run_case(args, case, tmp_root):
    """Compile and run one case as it is: every graph input is fed at run
    time, those that decide shapes (Reshape's shape, Slice's starts,
    Resize's scales, ...) included; nothing is baked into the model."""
    work = tempfile.mkdtemp(prefix=case.name + "-", dir=tmp_root)
    try:
        model = os.path.join(case.path, "model.onnx")
        compiled = os.path.join(work, "model.kiln")
        data_sets = sorted(d for d in os.listdir(case.path) if d.startswith("test_data_set_"))
        err = kiln_call(args, ["compile", "--model", model, "--output", compiled], "compile")
        if err:
            return "FAIL", err
        for ds in data_sets:
            src, dst = os.path.join(case.path, ds), os.path.join(work, ds)
            os.makedirs(dst)
            cmd = ["run", compiled, "--output-dir", dst, "--check-bounds"]
            for i, name in enumerate(numbered(src, "input_")):
                arr = read_pb(os.path.join(src, name))
                if arr.dtype == object:
                    arr = arr.astype(str)
                npy = os.path.join(dst, f"input_{i}.npy")
                np.save(npy, arr, allow_pickle=False)
                cmd += ["--input", f"{i}={npy}"]
            err = kiln_call(args, cmd, "run")
            if err:
                return "FAIL", err
            for i, name in enumerate(numbered(src, "output_")):
                npy = os.path.join(dst, f"output_{i}.npy")
                if not os.path.exists(npy):
                    return "FAIL", f"{ds}: output_{i}.npy not written"
                err = compare(read_pb(os.path.join(src, name)), np.load(npy, allow_pickle=False))
                if err:
                    return "FAIL", f"{ds}: output {i}: {err}"
        return "PASS", ""
    except Exception as e:  # a broken case must not stop the run
        return "FAIL", f"runner error: {type(e).__name__}: {e}"
    finally:
        shutil.rmtree(work, ignore_errors=True)


def markdown_escape(text):
    return text.replace("|", "\\|").replace("\n", " ")


def write_markdown(path, cases, n_not_applicable, supported, summary):
    per_op = {}
    for c in cases:
        for op in c.ops:
            row = per_op.setdefault(op, {"PASS": 0, "EXCL": 0, "FAIL": 0})
            row[c.status] += 1
    lines = [
        "<!-- Generated by tests/conformance/runner.py - do not edit; rerun it instead. -->",
        "# Kiln ONNX conformance",
        "",
        f"Generated by `tests/conformance/runner.py` on {datetime.date.today().isoformat()} "
        f"from the ONNX {onnx.__version__} backend node tests.",
        "",
        f"Command: `{shlex.join(sys.argv)}`",
        "",
        f"**{summary}.** {n_not_applicable} other node test cases are not applicable "
        "(they use ops that `kiln ops` does not list).",
        "",
        "Every case is compiled as it is and fed all its inputs at run time: inputs that decide shapes "
        "(Reshape's shape, Slice's starts, Resize's scales, ...) are shape inputs, read per run; nothing is "
        "baked into the model.",
        "",
        "A case counts for every op in its graph (expanded function tests use several ops).",
        "",
        "| Op | Cases | Passed | Excluded | Failed |",
        "|----|------:|-------:|---------:|-------:|",
    ]
    for op in sorted(per_op):
        r = per_op[op]
        lines.append(f"| {op} | {sum(r.values())} | {r['PASS']} | {r['EXCL']} | {r['FAIL']} |")
    untested = sorted(set(supported) - set(per_op))
    if untested:
        lines += ["", "Supported ops without an applicable case: " + ", ".join(untested) + "."]
    problems = [c for c in cases if c.status != "PASS"]
    lines += ["", "## Excluded and failing cases", ""]
    if problems:
        lines += ["| Case | Status | Reason |", "|------|--------|--------|"]
        lines += [f"| {c.name} | {c.status} | {markdown_escape(c.reason)} |" for c in problems]
    else:
        lines.append("None.")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kiln", required=True, help="path to the kiln executable")
    ap.add_argument("--data", required=True, help="directory written by generate.py")
    ap.add_argument("--op", action="extend", nargs="+", default=[],
                    help="only cases containing one of these op types")
    ap.add_argument("--case", help="only cases whose name matches this regex (re.search)")
    ap.add_argument("--exclusions", default=os.path.join(HERE, "exclusions.txt"))
    ap.add_argument("--report", help="write a JSON report here")
    ap.add_argument("--markdown", help="write a markdown summary here")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=120, help="seconds per kiln call")
    ap.add_argument("--min-rate", type=float, default=0.95,
                    help="fail if passed/applicable is below this (default: %(default)s)")
    args = ap.parse_args()

    try:
        proc = subprocess.run([args.kiln, "ops"], capture_output=True, text=True, timeout=args.timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        sys.exit(f"runner.py: cannot run `{args.kiln} ops`: {e}")
    if proc.returncode != 0:
        sys.exit(f"runner.py: `{args.kiln} ops` failed (exit {proc.returncode}): {proc.stderr.strip()}")
    supported = {l.strip() for l in proc.stdout.splitlines() if l.strip()}
    for op in args.op:
        if op not in supported:
            print(f"runner.py: warning: `kiln ops` does not list {op}", file=sys.stderr)

    node_dir = os.path.join(args.data, "node")
    if not os.path.isdir(node_dir):
        sys.exit(f"runner.py: no test data in {node_dir} (run generate.py first)")
    all_cases = [load_case(os.path.join(node_dir, d)) for d in sorted(os.listdir(node_dir))
                 if os.path.exists(os.path.join(node_dir, d, "model.onnx"))]
    applicable = [c for c in all_cases if not c.foreign and c.ops <= supported]
    n_not_applicable = len(all_cases) - len(applicable)
    cases = [c for c in applicable
             if (not args.op or c.ops & set(args.op))
             and (not args.case or re.search(args.case, c.name))]

    rules = load_exclusions(args.exclusions)
    for pattern, _ in rules:
        if not any(fnmatch.fnmatchcase(c.name, pattern) for c in all_cases):
            print(f"runner.py: warning: exclusion {pattern!r} matches no test case", file=sys.stderr)
    to_run = []
    for c in cases:
        reason = next((r for p, r in rules if fnmatch.fnmatchcase(c.name, p)), c.non_tensor)
        if reason:
            c.status, c.reason = "EXCL", reason
        else:
            to_run.append(c)

    with tempfile.TemporaryDirectory(prefix="kiln-conformance-") as tmp, \
            concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        results = pool.map(lambda c: run_case(args, c, tmp), to_run)
        done = iter(zip(to_run, results))
        for c in cases:
            if not c.status:  # results arrive in case order
                _, (c.status, c.reason) = next(done)
            print(f"{c.status} {c.name}" + (f": {c.reason}" if c.reason else ""), flush=True)

    n = {s: sum(c.status == s for c in cases) for s in ("PASS", "FAIL", "EXCL")}
    rate = n["PASS"] / len(cases) if cases else 0.0
    summary = f"{n['PASS']} passed, {n['FAIL']} failed, {n['EXCL']} skipped"
    print(summary)
    print(f"pass rate {100 * rate:.1f}% ({n['PASS']}/{len(cases)} applicable cases, "
          f"minimum {100 * args.min_rate:.1f}%)")

    if args.report:
        with open(args.report, "w") as f:
            json.dump({"command": shlex.join(sys.argv), "date": datetime.datetime.now().isoformat(),
                       "onnx": onnx.__version__, "passed": n["PASS"], "failed": n["FAIL"],
                       "excluded": n["EXCL"], "not_applicable": n_not_applicable, "pass_rate": rate,
                       "cases": [{"name": c.name, "status": c.status, "reason": c.reason,
                                  "ops": sorted(c.ops)} for c in cases]}, f, indent=1)
    if args.markdown:
        write_markdown(args.markdown, cases, n_not_applicable, supported,
                       f"{summary} of {len(cases)} applicable cases (pass rate {100 * rate:.1f}%)")

    if not cases:
        print("runner.py: no applicable test cases selected", file=sys.stderr)
        return 1
    return 1 if n["FAIL"] or rate < args.min_rate else 0


if __name__ == "__main__":
    sys.exit(main())
