#!/usr/bin/python3
"""Static int8 quantization of a float32 ONNX model into QDQ form, the way ONNX Runtime's
quantize_static writes it by default: uint8 activations (asymmetric, min/max calibration),
int8 weights per output channel (symmetric, zero point 0), int32 biases with scale
x_scale * w_scale.

  /usr/bin/python3 tools/quantize.py IN.onnx OUT.onnx --kiln build/kiln [--calib 8] [--seed 0]

Every Conv gets QuantizeLinear -> DequantizeLinear on its input and on its output (after
a Relu/Clip that is its only reader, whose range the quantization then covers), and
DequantizeLinear on its weights and bias; every MatMul by a constant 2-D weight likewise
(weights per column); the rest of the graph stays float32 and reads the dequantized
tensors. --feed NAME=FILE.npy calibrates on given inputs (one sample). Calibration: --calib inputs drawn from a seeded standard normal,
run through the float32 model with `kiln run` (every calibrated tensor made a model
output); ranges are the min/max over those runs, widened to include 0. Models with BatchNorm
should have it folded into the Conv first (tools/export_torchvision.py --fuse-bn).
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def consumers(g):
    out = {}
    for n in g.node:
        for i in n.input:
            out.setdefault(i, []).append(n)
    return out


def calibrate(model, tensors, kiln, count, seed, feeds=None):
    """{tensor: (min, max)} over `count` seeded inputs (standard normal, for a model with one
    float input) or over the given `feeds` ({input name: array}, one sample), computed with
    Kiln on the float32 model."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    known = {o.name for o in m.graph.output}
    for t in tensors:
        if t not in known:
            m.graph.output.append(helper.make_tensor_value_info(t, TensorProto.FLOAT, None))
    names = [o.name for o in m.graph.output]
    inp = m.graph.input[0]
    shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    rng = np.random.default_rng(seed)
    ranges = {}
    with tempfile.TemporaryDirectory() as d:
        onnx.save(m, os.path.join(d, "calib.onnx"))
        subprocess.run([kiln, "compile", "--model", os.path.join(d, "calib.onnx"), "--output",
                        os.path.join(d, "calib.kiln")], check=True, capture_output=True)
        for k in range(1 if feeds else count):
            args = []
            if feeds:
                for name, arr in feeds.items():
                    np.save(os.path.join(d, name + ".npy"), arr)
                    args += ["--input", f"{name}={d}/{name}.npy"]
            else:
                np.save(os.path.join(d, "x.npy"), rng.standard_normal(shape).astype(np.float32))
                args = ["--input", f"{inp.name}={d}/x.npy"]
            out = os.path.join(d, f"out{k}")
            subprocess.run([kiln, "run", os.path.join(d, "calib.kiln"), *args, "--output-dir", out], check=True,
                           capture_output=True)
            for i, name in enumerate(names):
                if name in tensors:
                    a = np.load(os.path.join(out, f"output_{i}.npy"))
                    lo, hi = ranges.get(name, (np.inf, -np.inf))
                    ranges[name] = (min(lo, float(a.min())), max(hi, float(a.max())))
    return ranges


def uint8_params(lo, hi):
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = np.float32((hi - lo) / 255.0) if hi > lo else np.float32(1.0)
    zp = np.uint8(np.clip(np.round(-lo / scale), 0, 255))
    return scale, zp


def quantize(model, kiln, count=8, seed=0, feeds=None):
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    users = consumers(g)
    convs = [n for n in g.node if n.op_type == "Conv" and n.input[1] in inits]
    # MatMuls by a constant 2-D weight [K, N]: per-column weights (axis 1), no bias.
    matmuls = [n for n in g.node if n.op_type == "MatMul" and n.input[1] in inits
               and len(inits[n.input[1]].dims) == 2]
    for i, n in enumerate(matmuls):
        if not n.name:
            n.name = f"matmul_{i}"
    # The tensor quantized after each Conv: its Relu/Clip output when that is its only reader.
    out_of = {}
    for c in convs:
        r = users.get(c.output[0], [])
        if len(r) == 1 and r[0].op_type in ("Relu", "Clip") and c.output[0] not in {o.name for o in g.output}:
            out_of[c.name] = r[0].output[0]
        else:
            out_of[c.name] = c.output[0]
    for m in matmuls:
        out_of[m.name] = m.output[0]
    tensors = set()
    for c in convs + matmuls:
        tensors.add(c.input[0])
        tensors.add(out_of[c.name])
    ranges = calibrate(model, tensors, kiln, count, seed, feeds)
    params = {t: uint8_params(*ranges[t]) for t in tensors}
    new_nodes, new_inits = [], []
    # Q -> DQ after each calibrated tensor; its readers read the DQ output.
    renamed = {}
    for t in sorted(tensors):
        s, z = params[t]
        new_inits += [numpy_helper.from_array(np.array(s, np.float32), t + "_scale"),
                      numpy_helper.from_array(np.array(z, np.uint8), t + "_zero_point")]
        new_nodes += [helper.make_node("QuantizeLinear", [t, t + "_scale", t + "_zero_point"], [t + "_q"],
                                       name=t + "_Q"),
                      helper.make_node("DequantizeLinear", [t + "_q", t + "_scale", t + "_zero_point"], [t + "_dq"],
                                       name=t + "_DQ")]
        renamed[t] = t + "_dq"
    for n in g.node:
        for i, name in enumerate(n.input):
            if name in renamed:
                n.input[i] = renamed[name]
    # Weights per output channel, bias with scale x_scale * w_scale.
    drop = set()
    for c in convs:
        w = numpy_helper.to_array(inits[c.input[1]]).astype(np.float32)
        ws = (np.abs(w).reshape(w.shape[0], -1).max(axis=1) / 127.0).astype(np.float32)
        ws[ws == 0] = 1.0
        wq = np.clip(np.round(w / ws.reshape(-1, *([1] * (w.ndim - 1)))), -127, 127).astype(np.int8)
        wn = c.name + "_w"
        new_inits += [numpy_helper.from_array(wq, wn + "_q"), numpy_helper.from_array(ws, wn + "_scale"),
                      numpy_helper.from_array(np.zeros(w.shape[0], np.int8), wn + "_zero_point")]
        new_nodes.append(helper.make_node("DequantizeLinear", [wn + "_q", wn + "_scale", wn + "_zero_point"],
                                          [wn + "_dq"], name=wn + "_DQ", axis=0))
        drop.add(c.input[1])
        c.input[1] = wn + "_dq"
        if len(c.input) > 2 and c.input[2] in inits:
            b = numpy_helper.to_array(inits[c.input[2]]).astype(np.float32)
            xs = params[c.input[0][:-3] if c.input[0].endswith("_dq") else c.input[0]][0]
            bs = (np.float32(xs) * ws).astype(np.float32)
            bq = np.round(b / bs).astype(np.int32)
            bn = c.name + "_b"
            new_inits += [numpy_helper.from_array(bq, bn + "_q"), numpy_helper.from_array(bs, bn + "_scale"),
                          numpy_helper.from_array(np.zeros(w.shape[0], np.int32), bn + "_zero_point")]
            new_nodes.append(helper.make_node("DequantizeLinear", [bn + "_q", bn + "_scale", bn + "_zero_point"],
                                              [bn + "_dq"], name=bn + "_DQ", axis=0))
            drop.add(c.input[2])
            c.input[2] = bn + "_dq"
    for mm in matmuls:
        w = numpy_helper.to_array(inits[mm.input[1]]).astype(np.float32)
        ws = (np.abs(w).max(axis=0) / 127.0).astype(np.float32)
        ws[ws == 0] = 1.0
        wq = np.clip(np.round(w / ws[None, :]), -127, 127).astype(np.int8)
        wn = mm.name + "_w"
        new_inits += [numpy_helper.from_array(wq, wn + "_q"), numpy_helper.from_array(ws, wn + "_scale"),
                      numpy_helper.from_array(np.zeros(w.shape[1], np.int8), wn + "_zero_point")]
        new_nodes.append(helper.make_node("DequantizeLinear", [wn + "_q", wn + "_scale", wn + "_zero_point"],
                                          [wn + "_dq"], name=wn + "_DQ", axis=1))
        drop.add(mm.input[1])
        mm.input[1] = wn + "_dq"
    still_used = {i for n in g.node for i in n.input}
    kept = [t for t in g.initializer if t.name not in drop or t.name in still_used]
    del g.initializer[:]
    g.initializer.extend(kept + new_inits)
    # Topological order: the Q/DQ pairs go right after their tensor's producer.
    order = list(g.node) + new_nodes
    produced = {i.name for i in g.input} | {t.name for t in g.initializer}
    done, sorted_nodes = set(), []
    while len(sorted_nodes) < len(order):
        progress = False
        for n in order:
            if id(n) in done or not all(i == "" or i in produced for i in n.input):
                continue
            sorted_nodes.append(n)
            done.add(id(n))
            produced.update(n.output)
            progress = True
        if not progress:
            raise RuntimeError("quantize: the rewritten graph has a cycle or an undefined input")
    del g.node[:]
    g.node.extend(sorted_nodes)
    if not any(o.domain in ("", "ai.onnx") and o.version >= 13 for o in model.opset_import):
        raise RuntimeError("quantize: per-channel DequantizeLinear needs opset >= 13")
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--calib", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--feed", action="append", default=[], metavar="NAME=FILE.npy",
                    help="calibrate on these input values instead of random ones (models with non-float inputs)")
    args = ap.parse_args()
    feeds = {}
    for f in args.feed:
        name, path = f.split("=", 1)
        feeds[name] = np.load(path)
    m = quantize(onnx.load(args.input), os.path.abspath(args.kiln), args.calib, args.seed, feeds or None)
    onnx.save(m, args.output)
    n = sum(1 for x in m.graph.node if x.op_type == "QuantizeLinear")
    print(f"{args.input} -> {args.output}: QDQ, {n} quantized activations")


if __name__ == "__main__":
    sys.exit(main())
