#!/usr/bin/python3
"""com.microsoft QGemm: Kiln against ONNX Runtime and against the definition, bit for bit.

  /usr/bin/python3 bench/qgemm_vs_ort.py --kiln build/kiln --work /tmp/qgemm [--node node]

Writes one-node QGemm models (uint8 / int8 operands, per-tensor and per-column weights,
transA / transB, alpha, C of several shapes, float32 and quantized outputs), runs each with
`kiln run` and with ONNX Runtime (bench/ort_bench.js; scripts/install_ort.sh first), and
compares the output bytes with NumPy's evaluation of ONNX Runtime's CPU kernel: exact int32
sums plus C, s = alpha * a_scale * b_scale[n] (float32, in that order, / y_scale when the
output is quantized), float32(acc) * s, rounded half to even, plus the zero point, saturated.

Each case runs twice: weights over the full int8 range, and 7-bit weights (|w| <= 64). On a
CPU without VNNI, ONNX Runtime multiplies uint8 by int8 with vpmaddubsw, whose int16 pair
sums saturate with full-range weights, so there its uint8 x int8 results can leave the
definition; Kiln's must not. Exit status 1 when Kiln differs from the definition anywhere.
"""
import argparse
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))

# name, A type, B type, M, K, N, transA, transB, per-column, C shape (None: none), alpha, output type
CASES = [
    ("u8s8_transB_percol_C[N]_u8out", "u8", "i8", 3, 37, 20, False, True, True, (20,), 1.0, "u8"),
    ("u8s8_percol_C[M,1]_alpha0.7_float", "u8", "i8", 3, 37, 20, False, False, True, (3, 1), 0.7, None),
    ("s8s8_transA_pertensor_C[]_alpha0.75_s8out", "i8", "i8", 4, 50, 16, True, False, False, (), 0.75, "i8"),
    ("u8u8_transB_percol_C[M,N]_alpha1.3_u8out", "u8", "u8", 5, 33, 24, False, True, True, (5, 24), 1.3, "u8"),
    ("u8s8_classifier_1280x1000_float", "u8", "i8", 2, 1280, 1000, False, True, True, (1000,), 1.0, None),
    ("u8s8_pertensor_noC_u8out", "u8", "i8", 1, 64, 10, False, True, False, None, 1.0, "u8"),
]

NP = {"u8": np.uint8, "i8": np.int8}
TP = {"u8": TensorProto.UINT8, "i8": TensorProto.INT8}


def make(path, case, wmax, rng):
    _, at, bt, m, k, n, ta, tb, per_col, c_shape, alpha, yt = case
    lo, hi = (0, 256) if at == "u8" else (-128, 128)
    a = rng.integers(lo, hi, (k, m) if ta else (m, k)).astype(NP[at])
    bshape = (n, k) if tb else (k, n)
    if bt == "i8":
        b = rng.integers(-wmax, wmax, bshape).astype(np.int8)
        bz = (np.arange(n) % 3).astype(np.int8)
    else:
        b = rng.integers(128 - wmax, 128 + wmax, bshape).astype(np.uint8)
        bz = (128 + np.arange(n) % 3).astype(np.uint8)
    bs = (np.float32(0.003) + np.float32(0.0007) * np.arange(n, dtype=np.float32)).astype(np.float32)
    if not per_col:
        bs, bz = bs[:1].reshape(()), bz[:1].reshape(())
    p = {"a": a, "as": np.array(0.03, np.float32), "az": np.array(131 if at == "u8" else -5, NP[at]),
         "b": b, "bs": bs, "bz": bz, "alpha": alpha}
    inits = [numpy_helper.from_array(p[x], x) for x in ("as", "az", "b", "bs", "bz")]
    ins = ["a", "as", "az", "b", "bs", "bz"]
    if c_shape is not None:
        p["c"] = rng.integers(-10000, 10000, c_shape).astype(np.int32)
        inits.append(numpy_helper.from_array(p["c"], "c"))
        ins.append("c")
    if yt:
        if c_shape is None:
            ins.append("")
        p["ys"], p["yz"] = np.array(0.2, np.float32), np.array(128 if yt == "u8" else -3, NP[yt])
        inits += [numpy_helper.from_array(p["ys"], "ys"), numpy_helper.from_array(p["yz"], "yz")]
        ins += ["ys", "yz"]
    node = helper.make_node("QGemm", ins, ["y"], domain="com.microsoft", alpha=alpha, transA=int(ta),
                            transB=int(tb))
    out_t = TP[yt] if yt else TensorProto.FLOAT
    g = helper.make_graph([node], "qgemm", [helper.make_tensor_value_info("a", TP[at], list(a.shape))],
                          [helper.make_tensor_value_info("y", out_t, [m, n])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
    onnx.save(model, path)
    np.save(path[:-5] + "_a.npy", a)
    return p


def definition(case, p):
    _, at, bt, m, k, n, ta, tb, per_col, c_shape, alpha, yt = case
    a = (p["a"].T if ta else p["a"]).astype(np.int64) - int(p["az"])
    b = (p["b"].T if tb else p["b"]).astype(np.int64) - p["bz"].astype(np.int64).reshape(1, -1)
    acc = a @ b + (np.broadcast_to(p["c"], (m, n)).astype(np.int64) if "c" in p else 0)
    s = np.float32(p["alpha"]) * p["as"]
    s = (s * p["bs"]).astype(np.float32)
    if yt:
        s = (s / p["ys"]).astype(np.float32)
    v = acc.astype(np.int32).astype(np.float32) * s
    if not yt:
        return v.astype(np.float32)
    info = np.iinfo(NP[yt])
    return np.clip(np.rint(v).astype(np.float64) + int(p["yz"]), info.min, info.max).astype(NP[yt])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--node", default="node")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    rng = np.random.default_rng(3)
    bad = 0
    print(f"{'case':48s} {'weights':>8s} {'Kiln = definition':>18s} {'ORT = definition':>17s} {'max |ORT - def|':>16s}")
    for case in CASES:
        for wmax in (128, 64):
            tag = f"{case[0]}_w{wmax}"
            path = os.path.join(args.work, tag + ".onnx")
            p = make(path, case, wmax, rng)
            want = definition(case, p)
            k_out, o_out = os.path.join(args.work, "kiln_" + tag), os.path.join(args.work, "ort_" + tag)
            kfile = path[:-5] + ".kiln"
            subprocess.run([args.kiln, "compile", "--model", path, "--output", kfile], check=True, stdout=subprocess.DEVNULL)
            subprocess.run([args.kiln, "run", kfile, "--input", "0=" + path[:-5] + "_a.npy", "--output-dir", k_out],
                           check=True, stdout=subprocess.DEVNULL)
            subprocess.run([args.node, os.path.join(HERE, "ort_bench.js"), path, "--input", "0=" + path[:-5] + "_a.npy",
                            "--runs", "1", "--warmup", "0", "--output-dir", o_out], check=True, stdout=subprocess.DEVNULL)
            got = np.load(os.path.join(k_out, "output_0.npy"))
            ort = np.load(os.path.join(o_out, "output_0.npy"))
            k_ok = got.dtype == want.dtype and got.tobytes() == want.tobytes()
            o_ok = ort.dtype == want.dtype and ort.tobytes() == want.tobytes()
            diff = float(np.abs(ort.astype(np.float64) - want.astype(np.float64)).max())
            bad += not k_ok
            print(f"{case[0]:48s} {('8-bit' if wmax == 128 else '7-bit'):>8s} {str(k_ok):>18s} {str(o_ok):>17s} {diff:16.6g}")
    print("FAIL" if bad else "ok: Kiln's output is the definition's, bit for bit, in every case")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
