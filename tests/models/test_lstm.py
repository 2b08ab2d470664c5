#!/usr/bin/python3
"""End-to-end accuracy test: a 2-layer torch.nn.LSTM -> ONNX (opset 13) -> kiln vs PyTorch.

  /usr/bin/python3 tests/models/test_lstm.py --kiln build/kiln --work DIR

Exports the model (random weights, fixed seed) with torch.onnx.export into DIR/lstm/, compiles
it with `kiln compile`, checks it with `kiln inspect --json` (input x and outputs y, h_n, c_n
with static shapes), runs it with `kiln run --input x=x.npy`, and compares every output
(Y, h_n, c_n) with PyTorch's (|out - expected| <= atol + rtol * |expected|). Then the same
model dynamically quantized by tools/quantize.py --format dynamic (ONNX Runtime's
quantize_dynamic form: each LSTM becomes com.microsoft DynamicQuantizeLSTM, int8 weights per gate
row) must compile to two DynamicQuantizeLSTM nodes and no float LSTM, and stay within
--dyn-tol (3%) of PyTorch's float32 outputs' magnitude (the int8 weights and the per-step
uint8 quantization of X and H move each output by about 1% here; its arithmetic is checked
against ONNX Runtime's in tests/unit/rnn_test.cc and bench/contrib_ops_vs_ort.py). Prints one
PASS/FAIL line with the largest error per output; exits 0 on pass, 1 on failure.
"""
import json
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_torchvision_models import (TestError, check_inspect, compare, load_output,  # noqa: E402
                                     prepare_run_dirs, run)


def export(mdir, args):
    """Writes model.onnx, x.npy and expected_<i>.npy (Y, h_n, c_n) into mdir."""
    import torch

    torch.manual_seed(args.seed)
    model = torch.nn.LSTM(input_size=args.input_size, hidden_size=args.hidden, num_layers=2)
    model.eval()
    x = torch.randn(args.seq, args.batch, args.input_size)
    with torch.no_grad():
        y, (h, c) = model(x)
    torch.onnx.export(model, (x,), os.path.join(mdir, "model.onnx"), opset_version=args.opset,
                      input_names=["x"], output_names=["y", "h_n", "c_n"])
    np.save(os.path.join(mdir, "x.npy"), x.numpy())
    for i, t in enumerate((y, h, c)):
        np.save(os.path.join(mdir, f"expected_{i}.npy"), t.numpy())


def main():
    ap = argparse.ArgumentParser(description="Kiln vs PyTorch accuracy test for a 2-layer LSTM")
    ap.add_argument("--kiln", required=True, help="path to the kiln binary (e.g. build/kiln)")
    ap.add_argument("--work", required=True, help="work directory for the export and outputs")
    ap.add_argument("--rtol", type=float, default=1e-3)
    ap.add_argument("--atol", type=float, default=1e-4)
    ap.add_argument("--dyn-tol", type=float, default=0.03,
                    help="dynamically quantized model: max |out - expected| / max |expected| per output")
    ap.add_argument("--opset", type=int, default=13)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=8)
    ap.add_argument("--input-size", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--timeout", type=int, default=600, help="seconds per step")
    args = ap.parse_args()

    kiln = os.path.abspath(args.kiln)
    mdir = os.path.abspath(os.path.join(args.work, "lstm"))
    kiln_file = os.path.join(mdir, "model.kiln")
    out_dir = os.path.join(mdir, "kiln_out")
    names = ("Y", "h_n", "c_n")
    try:
        prepare_run_dirs(kiln, kiln_file, out_dir)
        export(mdir, args)
        run([kiln, "compile", "--model", os.path.join(mdir, "model.onnx"), "--output", kiln_file],
            "kiln compile", args.timeout)
        refs = [np.load(os.path.join(mdir, f"expected_{i}.npy")) for i in range(len(names))]
        check_inspect(kiln, kiln_file, [("x", "float32", (args.seq, args.batch, args.input_size))],
                      [(n, "float32", r.shape) for n, r in zip(("y", "h_n", "c_n"), refs)],
                      args.timeout)
        run([kiln, "run", kiln_file, "--input", "x=" + os.path.join(mdir, "x.npy"),
             "--output-dir", out_dir], "kiln run", args.timeout)
        ok, parts = True, []
        for i, name in enumerate(names):
            good, m = compare(load_output(out_dir, i), refs[i], args.rtol, args.atol)
            ok &= good
            parts.append(f"{name}: {m}")
        # The dynamically quantized form.
        # (in a directory of its own: test_sim_identical.py runs the one .kiln file of lstm/)
        ddir = os.path.abspath(os.path.join(args.work, "lstm_dynamic"))
        os.makedirs(ddir, exist_ok=True)
        dyn, dyn_kiln, dyn_out = (os.path.join(ddir, f) for f in ("model.onnx", "model.kiln", "out"))
        here = os.path.dirname(os.path.abspath(__file__))
        prepare_run_dirs(kiln, dyn_kiln, dyn_out)
        run([sys.executable, os.path.join(here, "..", "..", "tools", "quantize.py"), os.path.join(mdir, "model.onnx"),
             dyn, "--kiln", kiln, "--format", "dynamic"], "quantize --format dynamic", args.timeout)
        run([kiln, "compile", "--model", dyn, "--output", dyn_kiln], "kiln compile (dynamic)", args.timeout)
        counts = json.loads(run([kiln, "inspect", dyn_kiln, "--json"], "inspect", args.timeout, echo=False))["op_counts"]
        if counts.get("DynamicQuantizeLSTM") != 2 or "LSTM" in counts:
            raise TestError(f"dynamic model: expected two DynamicQuantizeLSTM and no LSTM, found {counts}")
        run([kiln, "run", dyn_kiln, "--input", "x=" + os.path.join(mdir, "x.npy"), "--output-dir", dyn_out],
            "kiln run (dynamic)", args.timeout)
        for i, name in enumerate(names):
            got = load_output(dyn_out, i)
            rel = float(np.abs(got - refs[i]).max() / np.abs(refs[i]).max()) if got.shape == refs[i].shape else np.inf
            ok &= rel <= args.dyn_tol
            parts.append(f"dynamic {name}: {rel:.4f} of max|expected|")
        msg = ", ".join(parts)
    except TestError as e:
        ok, msg = False, str(e)
    print(f"{'PASS' if ok else 'FAIL'} lstm (2 layers, seq {args.seq}, batch {args.batch}, "
          f"hidden {args.hidden}): {msg}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
