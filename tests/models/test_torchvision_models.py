#!/usr/bin/python3
"""End-to-end accuracy test: torchvision model -> ONNX -> kiln compile -> kiln run vs PyTorch.

  /usr/bin/python3 tests/models/test_torchvision_models.py --kiln build/kiln --work DIR --model resnet18

Exports the model with tools/export_torchvision.py into DIR/<model>/ (reused when already
there and newer than the export script), compiles it with `kiln compile`, runs it with
`kiln run --input input=input.npy`, and compares output_0.npy with PyTorch's expected.npy
(|out - expected| <= atol + rtol * |expected|, as numpy.testing.assert_allclose). The .kiln is
also checked with `kiln inspect --json`: one input 'input' float32[1,3,224,224] and one output
'output' float32 shaped like expected.npy, no unresolved (-1) dims.
Prints one PASS/FAIL line; exits 0 on pass, 1 on failure.

run(), check_inspect() and compare() are shared with the other model tests (test_bert.py,
test_lstm.py).
"""
import argparse
import json
import os
import shlex
import subprocess
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXPORT_SCRIPT = os.path.join(REPO, "tools", "export_torchvision.py")
EXPORT_FILES = ("model.onnx", "input.npy", "expected.npy")


class TestError(Exception):
    pass


def run(cmd, what, timeout, echo=True):
    """Runs cmd; returns its stdout+stderr (printed unless echo is False)."""
    print("+ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        raise TestError(f"{what} timed out after {timeout}s")
    except OSError as e:
        raise TestError(f"{what}: cannot run {cmd[0]}: {e}")
    if p.stdout.strip() and (echo or p.returncode != 0):
        print(p.stdout.rstrip())
    if p.returncode != 0:
        raise TestError(f"{what} failed with exit code {p.returncode}")
    return p.stdout


def _describe(t):
    return f"{t.get('name')!r} {t.get('dtype')}{t.get('shape')}"


def check_inspect(kiln, kiln_file, inputs, outputs, timeout):
    """Checks `kiln inspect --json` of kiln_file; returns its parsed JSON.

    inputs / outputs: lists of (name, dtype, shape) the model must have, in order; name or
    shape None = not checked. Every input and output shape must be fully static (a list of
    non-negative ints, no -1), whatever is expected."""
    cmd = [kiln, "inspect", kiln_file, "--json"]
    text = run(cmd, "kiln inspect --json", timeout, echo=False)
    try:
        j = json.loads(text)
    except ValueError as e:
        raise TestError(f"kiln inspect --json printed no valid JSON ({e}): {text[:300]!r}")
    for key, want in (("inputs", inputs), ("outputs", outputs)):
        got = j.get(key)
        if not isinstance(got, list):
            raise TestError(f"kiln inspect --json: no '{key}' list")
        for t in got:
            shape = t.get("shape")
            if not (isinstance(shape, list) and all(isinstance(d, int) and not isinstance(d, bool)
                                                    and d >= 0 for d in shape)):
                raise TestError(f"kiln inspect --json: {key[:-1]} {_describe(t)} has an unresolved "
                                "or invalid shape (want only static dims)")
        if len(got) != len(want):
            raise TestError(f"kiln inspect --json: {len(got)} {key} "
                            f"({', '.join(_describe(t) for t in got)}), expected {len(want)}")
        for t, (name, dtype, shape) in zip(got, want):
            if ((name is not None and t.get("name") != name) or t.get("dtype") != dtype
                    or (shape is not None and t.get("shape") != list(shape))):
                raise TestError(f"kiln inspect --json: {key[:-1]} {_describe(t)}, expected "
                                f"{name!r} {dtype}{list(shape) if shape is not None else ''}")
    n = j.get("num_nodes")
    counts = j.get("op_counts") or {}
    if not isinstance(n, int) or n <= 0 or sum(counts.values()) != n or len(j.get("nodes", [])) != n:
        raise TestError(f"kiln inspect --json: inconsistent node counts (num_nodes={n}, "
                        f"op_counts total {sum(counts.values())}, nodes {len(j.get('nodes', []))})")
    print("inspect: " + "; ".join(f"{k}: " + ", ".join(_describe(t) for t in j[k])
                                  for k in ("inputs", "outputs"))
          + f"; {n} nodes, arena {j.get('memory', {}).get('arena_bytes')} bytes", flush=True)
    return j


def ensure_export(model, mdir, opset, seed, timeout):
    paths = [os.path.join(mdir, f) for f in EXPORT_FILES]
    script_mtime = os.path.getmtime(EXPORT_SCRIPT)
    if all(os.path.exists(p) and os.path.getmtime(p) >= script_mtime for p in paths):
        print(f"reusing cached export in {mdir}")
        return
    run([sys.executable, EXPORT_SCRIPT, "--model", model, "--out", mdir,
         "--opset", str(opset), "--seed", str(seed)], "export", timeout)


def prepare_run_dirs(kiln, kiln_file, out_dir):
    """Checks the kiln binary; empties out_dir and removes an old kiln_file, so nothing stale
    can pass for this run's result."""
    if not os.access(kiln, os.X_OK):
        raise TestError(f"kiln binary not found or not executable: {kiln}")
    os.makedirs(out_dir, exist_ok=True)
    for f in os.listdir(out_dir):
        os.remove(os.path.join(out_dir, f))
    if os.path.exists(kiln_file):
        os.remove(kiln_file)


def load_output(out_dir, i):
    """`kiln run`'s i-th output file."""
    out_file = os.path.join(out_dir, f"output_{i}.npy")
    if not os.path.exists(out_file):
        raise TestError(f"kiln run wrote no {out_file}")
    return np.load(out_file)


def compare(out, expected, rtol, atol):
    """Returns (ok, message)."""
    if out.shape != expected.shape:
        return False, f"shape mismatch: kiln {out.shape} vs expected {expected.shape}"
    if out.dtype != expected.dtype:
        print(f"note: dtype kiln {out.dtype} vs expected {expected.dtype}; comparing as float64")
    a = out.astype(np.float64)
    b = expected.astype(np.float64)
    n_nan = int(np.count_nonzero(~np.isfinite(a)))
    diff = np.abs(a - b)
    bad = ~(diff <= atol + rtol * np.abs(b))  # NaN counts as a mismatch
    n_bad = int(np.count_nonzero(bad))
    finite = np.isfinite(diff)
    max_abs = float(diff[finite].max()) if finite.any() else float("nan")
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = diff / np.abs(b)
    rel_ok = np.isfinite(rel)
    max_rel = float(rel[rel_ok].max()) if rel_ok.any() else 0.0
    max_ref = float(np.abs(b[np.isfinite(b)]).max()) if np.isfinite(b).any() else float("nan")
    msg = (f"max_abs_err={max_abs:.3g} max_rel_err={max_rel:.3g} "
           f"mismatches={n_bad}/{b.size} (rtol={rtol:g}, atol={atol:g}; max|expected|={max_ref:.3g})")
    if n_nan:
        msg += f" non-finite outputs={n_nan}"
    if n_bad:
        score = np.where(bad, np.nan_to_num(diff, nan=np.inf), -1.0)
        i = np.unravel_index(int(np.argmax(score)), b.shape)
        msg += f"; worst at {tuple(int(x) for x in i)}: kiln={a[i]:.8g} expected={b[i]:.8g}"
    return n_bad == 0, msg


def main():
    ap = argparse.ArgumentParser(description="Kiln vs PyTorch accuracy test for a torchvision model")
    ap.add_argument("--kiln", required=True, help="path to the kiln binary (e.g. build/kiln)")
    ap.add_argument("--work", required=True, help="work/cache directory for exports and outputs")
    ap.add_argument("--model", required=True, help="torchvision model name, e.g. resnet18")
    ap.add_argument("--rtol", type=float, default=1e-3)
    ap.add_argument("--atol", type=float, default=1e-4)
    ap.add_argument("--opset", type=int, default=13)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None, help="pass --threads N to kiln run")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per step")
    args = ap.parse_args()

    kiln = os.path.abspath(args.kiln)
    mdir = os.path.abspath(os.path.join(args.work, args.model))
    kiln_file = os.path.join(mdir, "model.kiln")
    out_dir = os.path.join(mdir, "kiln_out")
    try:
        if not os.access(kiln, os.X_OK):
            raise TestError(f"kiln binary not found or not executable: {kiln}")
        os.makedirs(mdir, exist_ok=True)
        ensure_export(args.model, mdir, args.opset, args.seed, args.timeout)
        if os.path.exists(kiln_file):
            os.remove(kiln_file)
        run([kiln, "compile", "--model", os.path.join(mdir, "model.onnx"), "--output", kiln_file],
            "kiln compile", args.timeout)
        if not os.path.exists(kiln_file):
            raise TestError(f"kiln compile exited 0 but wrote no {kiln_file}")
        x = np.load(os.path.join(mdir, "input.npy"), mmap_mode="r")
        expected = np.load(os.path.join(mdir, "expected.npy"))
        check_inspect(kiln, kiln_file, [("input", "float32", x.shape)],
                      [("output", "float32", expected.shape)], args.timeout)
        os.makedirs(out_dir, exist_ok=True)
        out_file = os.path.join(out_dir, "output_0.npy")
        if os.path.exists(out_file):
            os.remove(out_file)
        cmd = [kiln, "run", kiln_file, "--input", "input=" + os.path.join(mdir, "input.npy"),
               "--output-dir", out_dir]
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        run(cmd, "kiln run", args.timeout)
        if not os.path.exists(out_file):
            raise TestError(f"kiln run exited 0 but wrote no {out_file}")
        ok, msg = compare(np.load(out_file), expected, args.rtol, args.atol)
    except TestError as e:
        ok, msg = False, str(e)
    print(f"{'PASS' if ok else 'FAIL'} {args.model}: {msg}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
