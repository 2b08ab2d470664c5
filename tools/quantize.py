#!/usr/bin/python3
"""Static int8 quantization of a float32 ONNX model into QDQ form, the way ONNX Runtime's
quantize_static writes it by default: uint8 activations (asymmetric, min/max calibration),
int8 weights per output channel (symmetric, zero point 0), int32 biases with scale
x_scale * w_scale.

  /usr/bin/python3 tools/quantize.py IN.onnx OUT.onnx --kiln build/kiln [--calib 8] [--seed 0]
      [--format qdq|qoperator|dynamic] [--reduce-range]

Every Conv gets QuantizeLinear -> DequantizeLinear on its input and on its output (after
a Relu/Clip that is its only reader, whose range the quantization then covers), and
DequantizeLinear on its weights and bias; every MatMul by a constant 2-D weight likewise
(weights per column), and every Gemm by one (a Linear: weights per output column, an int32
bias; alpha = beta = 1, A not transposed); the rest of the graph stays float32 and reads the dequantized
tensors. --feed NAME=FILE.npy calibrates on given inputs (one sample). Calibration: --calib inputs drawn from a seeded standard normal,
run through the float32 model with `kiln run` (every calibrated tensor made a model
output); ranges are the min/max over those runs, widened to include 0. Models with BatchNorm
should have it folded into the Conv first (tools/export_torchvision.py --fuse-bn).

--format qoperator quantizes further (the outputs of Add, Mul, Concat, GlobalAveragePool,
Sigmoid and LeakyRelu whose inputs are all quantized) and then rewrites each
DequantizeLinear -> op -> QuantizeLinear into QLinearConv, QLinearMatMul and ONNX Runtime's
com.microsoft QLinearAdd, QLinearMul, QLinearConcat, QLinearGlobalAveragePool,
QLinearSigmoid, QLinearLeakyRelu and QGemm (float32 output where the Gemm's is a graph
output) (a Relu/Clip after a Conv or Add goes into the op when the
output's quantization saturates exactly there), as ONNX Runtime's quantizer writes QOperator
models; --qdq-output also writes the QDQ model it came from. --format dynamic writes ONNX
Runtime's quantize_dynamic form: DynamicQuantizeLinear -> ConvInteger / MatMulInteger (int8
weights per output channel) -> Cast -> Mul by x_scale * w_scale (-> Add of the bias), and
com.microsoft DynamicQuantizeLSTM for an LSTM with constant weights (int8 per gate row); it needs
no calibration.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


# The largest |quantized weight|: 127, or 64 with --reduce-range (7-bit weights, as ONNX
# Runtime's quantizer writes with reduce_range=True: exact and fast on CPUs whose int8
# instructions sum pairs of products in int16, those without VNNI).
WEIGHT_MAX = 127


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


EXTRA_OPS = ("Add", "Mul", "Concat", "GlobalAveragePool", "Sigmoid", "LeakyRelu")


def quantize(model, kiln, count=8, seed=0, feeds=None, extra_ops=False):
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
    # Gemms by a constant 2-D weight (a Linear: B [N, K] with transB = 1, or [K, N]), alpha =
    # beta = 1, A not transposed, C absent or a constant [N]: weights per output column, an
    # int32 bias, as ONNX Runtime's quantizer does (QOperator: com.microsoft QGemm).
    def attr(n, name, default):
        return next((helper.get_attribute_value(a) for a in n.attribute if a.name == name), default)
    gemms = [n for n in g.node if n.op_type == "Gemm" and n.input[1] in inits and len(inits[n.input[1]].dims) == 2
             and attr(n, "transA", 0) == 0 and attr(n, "alpha", 1.0) == 1.0 and attr(n, "beta", 1.0) == 1.0
             and (len(n.input) < 3 or not n.input[2] or (n.input[2] in inits and len(inits[n.input[2]].dims) == 1))]
    for i, n in enumerate(gemms):
        if not n.name:
            n.name = f"gemm_{i}"
    # The tensor quantized after each Conv: its Relu/Clip output when that is its only reader.
    out_of = {}
    for c in convs:
        r = users.get(c.output[0], [])
        if len(r) == 1 and r[0].op_type in ("Relu", "Clip") and c.output[0] not in {o.name for o in g.output}:
            out_of[c.name] = r[0].output[0]
        else:
            out_of[c.name] = c.output[0]
    for m in matmuls + gemms:
        out_of[m.name] = m.output[0]
    tensors = set()
    for c in convs + matmuls + gemms:
        tensors.add(c.input[0])
        tensors.add(out_of[c.name])
    if extra_ops:
        # QOperator: element-wise ops, pooling and Concat whose every input is quantized get a
        # quantized output too (after a Relu/Clip that is an Add's only reader), in graph order.
        outputs = {o.name for o in g.output}
        for n in g.node:
            if n.op_type not in EXTRA_OPS or n.output[0] in outputs:
                continue
            data = [i for i in n.input if i and i not in inits]
            if not data or not all(i in tensors for i in data) or len(data) != len(n.input):
                continue
            r = users.get(n.output[0], [])
            if n.op_type == "Add" and len(r) == 1 and r[0].op_type in ("Relu", "Clip"):
                tensors.add(r[0].output[0])
            else:
                tensors.add(n.output[0])
    ranges = calibrate(model, tensors, kiln, count, seed, feeds)
    params = {t: uint8_params(*ranges[t]) for t in tensors}
    # A MaxPool's output keeps its input's parameters (as ONNX Runtime's quantizer does): its
    # values are some of its input's, and Kiln then pools the uint8 tensor itself.
    for n in g.node:
        if n.op_type == "MaxPool" and len(n.output) == 1 and n.output[0] in params and n.input[0] in params:
            params[n.output[0]] = params[n.input[0]]
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
        ws = (np.abs(w).reshape(w.shape[0], -1).max(axis=1) / WEIGHT_MAX).astype(np.float32)
        ws[ws == 0] = 1.0
        wq = np.clip(np.round(w / ws.reshape(-1, *([1] * (w.ndim - 1)))), -WEIGHT_MAX, WEIGHT_MAX).astype(np.int8)
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
        ws = (np.abs(w).max(axis=0) / WEIGHT_MAX).astype(np.float32)
        ws[ws == 0] = 1.0
        wq = np.clip(np.round(w / ws[None, :]), -WEIGHT_MAX, WEIGHT_MAX).astype(np.int8)
        wn = mm.name + "_w"
        new_inits += [numpy_helper.from_array(wq, wn + "_q"), numpy_helper.from_array(ws, wn + "_scale"),
                      numpy_helper.from_array(np.zeros(w.shape[1], np.int8), wn + "_zero_point")]
        new_nodes.append(helper.make_node("DequantizeLinear", [wn + "_q", wn + "_scale", wn + "_zero_point"],
                                          [wn + "_dq"], name=wn + "_DQ", axis=1))
        drop.add(mm.input[1])
        mm.input[1] = wn + "_dq"
    for gm in gemms:
        w = numpy_helper.to_array(inits[gm.input[1]]).astype(np.float32)
        axis = 0 if attr(gm, "transB", 0) else 1  # the output columns' axis of B
        ws = (np.abs(w).max(axis=1 - axis) / WEIGHT_MAX).astype(np.float32)
        ws[ws == 0] = 1.0
        shape = (-1, 1) if axis == 0 else (1, -1)
        wq = np.clip(np.round(w / ws.reshape(shape)), -WEIGHT_MAX, WEIGHT_MAX).astype(np.int8)
        wn = gm.name + "_w"
        new_inits += [numpy_helper.from_array(wq, wn + "_q"), numpy_helper.from_array(ws, wn + "_scale"),
                      numpy_helper.from_array(np.zeros(ws.shape[0], np.int8), wn + "_zero_point")]
        new_nodes.append(helper.make_node("DequantizeLinear", [wn + "_q", wn + "_scale", wn + "_zero_point"],
                                          [wn + "_dq"], name=wn + "_DQ", axis=axis))
        drop.add(gm.input[1])
        gm.input[1] = wn + "_dq"
        if len(gm.input) > 2 and gm.input[2]:
            b = numpy_helper.to_array(inits[gm.input[2]]).astype(np.float32)
            xs = params[gm.input[0][:-3] if gm.input[0].endswith("_dq") else gm.input[0]][0]
            bs = (np.float32(xs) * ws).astype(np.float32)
            bn = gm.name + "_b"
            new_inits += [numpy_helper.from_array(np.round(b / bs).astype(np.int32), bn + "_q"),
                          numpy_helper.from_array(bs, bn + "_scale"),
                          numpy_helper.from_array(np.zeros(ws.shape[0], np.int32), bn + "_zero_point")]
            new_nodes.append(helper.make_node("DequantizeLinear", [bn + "_q", bn + "_scale", bn + "_zero_point"],
                                              [bn + "_dq"], name=bn + "_DQ", axis=0))
            drop.add(gm.input[2])
            gm.input[2] = bn + "_dq"
    still_used = {i for n in g.node for i in n.input}
    kept = [t for t in g.initializer if t.name not in drop or t.name in still_used]
    del g.initializer[:]
    g.initializer.extend(kept + new_inits)
    # Topological order: the Q/DQ pairs go right after their tensor's producer.
    g.node.extend(new_nodes)
    topo_sort(g)
    if not any(o.domain in ("", "ai.onnx") and o.version >= 13 for o in model.opset_import):
        raise RuntimeError("quantize: per-channel DequantizeLinear needs opset >= 13")
    return model


def topo_sort(g):
    produced = {i.name for i in g.input} | {t.name for t in g.initializer}
    order, done, out = list(g.node), set(), []
    while len(out) < len(order):
        progress = False
        for n in order:
            if id(n) in done or not all(i == "" or i in produced for i in n.input):
                continue
            out.append(n)
            done.add(id(n))
            produced.update(n.output)
            progress = True
        if not progress:
            raise RuntimeError("quantize: the rewritten graph has a cycle or an undefined input")
    del g.node[:]
    g.node.extend(out)


def drop_dead(g):
    """Removes nodes none of whose outputs is read or a graph output, to a fixpoint."""
    outputs = {o.name for o in g.output}
    while True:
        read = {i for n in g.node for i in n.input} | outputs
        keep = [n for n in g.node if any(o in read for o in n.output)]
        if len(keep) == len(g.node):
            break
        del g.node[:]
        g.node.extend(keep)
    read = {i for n in g.node for i in n.input}
    kept = [t for t in g.initializer if t.name in read or t.name in outputs]
    gone = {t.name for t in g.initializer} - {t.name for t in kept}
    del g.initializer[:]
    g.initializer.extend(kept)
    # Old (IR < 4) models list initializers among the inputs too: dropped weights leave them.
    inputs = [i for i in g.input if i.name not in gone]
    del g.input[:]
    g.input.extend(inputs)


def to_qoperator(model):
    """QDQ -> QOperator, as ONNX Runtime's quantizer writes it: each op whose float inputs all
    come from DequantizeLinear and whose output (or the output of a Relu/Clip that is its only
    reader, when the quantization's saturation is that clamp) goes only into QuantizeLinear
    becomes QLinearConv, QLinearMatMul or com.microsoft QLinearAdd, QLinearMul, QLinearConcat,
    QLinearGlobalAveragePool, QLinearSigmoid, QLinearLeakyRelu."""
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    prod = {o: n for n in g.node for o in n.output}
    users = consumers(g)
    outputs = {o.name for o in g.output}

    def dq_of(name):  # (q, scale, zero point) of a DequantizeLinear output
        n = prod.get(name)
        if n is None or n.op_type != "DequantizeLinear" or len(n.input) < 3:
            return None
        return list(n.input[:3])

    def per_tensor(p):
        return p is not None and p[1] in inits and len(inits[p[1]].dims) == 0

    def quantized_output(n):
        """(node whose output is quantized, Q node) or None."""
        o = n.output[0]
        r = users.get(o, [])
        if o in outputs or len(r) != 1:
            return None
        last = n
        if r[0].op_type in ("Relu", "Clip") and n.op_type in ("Conv", "Add") and r[0].output[0] not in outputs:
            act = r[0]
            q = users.get(act.output[0], [])
            if len(q) != 1 or q[0].op_type != "QuantizeLinear":
                return None
            s = float(numpy_helper.to_array(inits[q[0].input[1]]))
            z = int(numpy_helper.to_array(inits[q[0].input[2]]))
            lo, hi = (0 - z) * s, (255 - z) * s
            if act.op_type == "Clip":
                bounds = [i for i in list(act.input[1:3])]
                if any(i and i not in inits for i in bounds):
                    return None  # a computed bound: keep the Clip
                cl = [float(numpy_helper.to_array(inits[i])) if i else None for i in bounds]
                cl += [None] * (2 - len(cl))
                if (cl[0] is not None and lo < cl[0]) or (cl[1] is not None and hi > cl[1]):
                    return None
            elif lo < 0:
                return None
            return act, q[0]
        if r[0].op_type != "QuantizeLinear":
            return None
        return last, r[0]

    new_nodes, removed = [], set()
    for n in list(g.node):
        if n.op_type == "Gemm":
            # DequantizeLinear(A, B[, C]) -> Gemm [-> QuantizeLinear]: com.microsoft QGemm, with
            # y_scale / y_zero_point, or with a float32 output where the Gemm's is a graph
            # output (a classifier's logits), as ONNX Runtime's quantizer writes it.
            ins = [dq_of(i) for i in n.input if i]
            if len(ins) < 2 or not per_tensor(ins[0]) or ins[1] is None or (len(ins) > 2 and ins[2] is None):
                continue
            at = {a.name: helper.get_attribute_value(a) for a in n.attribute}
            if at.get("alpha", 1.0) != 1.0 or at.get("beta", 1.0) != 1.0 or at.get("transA", 0) != 0:
                continue
            qo = quantized_output(n)
            if qo is None and n.output[0] not in outputs:
                continue
            args = ins[0] + ins[1] + ([ins[2][0]] if len(ins) > 2 else [""])
            if qo is not None:
                last, qnode = qo
                args += [qnode.input[1], qnode.input[2]]
                out = qnode.output[0]
                removed.update({id(last), id(qnode)})
            else:
                args = args if len(ins) > 2 else args[:-1]
                out = n.output[0]
            q = helper.make_node("QGemm", args, [out], name=(n.name or n.output[0]) + "_quant", domain="com.microsoft")
            q.attribute.extend(a for a in n.attribute if a.name == "transB")
            new_nodes.append(q)
            removed.add(id(n))
            continue
        if n.op_type not in ("Conv", "MatMul") + EXTRA_OPS:
            continue
        ins = [dq_of(i) for i in n.input if i]
        if n.op_type in ("Conv", "MatMul"):
            if len(ins) < 2 or not per_tensor(ins[0]) or ins[1] is None:
                continue
            if n.op_type == "Conv" and len(ins) > 2 and ins[2] is None:
                continue
        elif not ins or not all(per_tensor(p) for p in ins):
            continue
        qo = quantized_output(n)
        if qo is None:
            continue
        last, qnode = qo
        y = [qnode.output[0], qnode.input[1], qnode.input[2]]
        name = n.name or n.output[0]
        if n.op_type == "Conv":
            args = ins[0] + ins[1] + y[1:] + ([ins[2][0]] if len(ins) > 2 else [])
            q = helper.make_node("QLinearConv", args, [y[0]], name=name + "_quant")
            q.attribute.extend(n.attribute)
        elif n.op_type == "MatMul":
            q = helper.make_node("QLinearMatMul", ins[0] + ins[1] + y[1:], [y[0]], name=name + "_quant")
        elif n.op_type in ("Add", "Mul"):
            q = helper.make_node("QLinear" + n.op_type, ins[0] + ins[1] + y[1:], [y[0]], name=name + "_quant",
                                 domain="com.microsoft")
        elif n.op_type == "Concat":
            args = y[1:] + [a for p in ins for a in p]
            q = helper.make_node("QLinearConcat", args, [y[0]], name=name + "_quant", domain="com.microsoft")
            q.attribute.extend(n.attribute)
        else:
            q = helper.make_node("QLinear" + n.op_type, ins[0] + y[1:], [y[0]], name=name + "_quant",
                                 domain="com.microsoft")
            q.attribute.extend(n.attribute)
        new_nodes.append(q)
        removed.update({id(n), id(last), id(qnode)})
    kept = [n for n in g.node if id(n) not in removed]
    del g.node[:]
    g.node.extend(kept + new_nodes)
    drop_dead(g)
    topo_sort(g)
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model


def dynamic(model):
    """ONNX Runtime's quantize_dynamic form: each Conv / MatMul by constant weights reads its
    input through DynamicQuantizeLinear (uint8, range from the data at run time) into
    ConvInteger / MatMulInteger with int8 weights per output channel (symmetric), then
    Cast to float, Mul by x_scale * w_scale, and Add of the float bias."""
    g = model.graph
    if not any(o.domain in ("", "ai.onnx") and o.version >= 11 for o in model.opset_import):
        raise RuntimeError("quantize: DynamicQuantizeLinear needs opset >= 11")
    inits = {t.name: t for t in g.initializer}
    new_nodes, new_inits, dq = [], [], {}
    drop = set()
    for k, n in enumerate(list(g.node)):
        if n.op_type == "LSTM" and n.domain in ("", "ai.onnx"):
            lstm = dynamic_lstm(n, inits, n.name or f"node_{k}")
            if lstm is not None:
                node, quantized, used = lstm
                new_nodes.append(node)
                new_inits += quantized
                drop.update(used)
                n.op_type = "DROP"
            continue
        conv = n.op_type == "Conv"
        if not ((conv or n.op_type == "MatMul") and n.input[1] in inits):
            continue
        w = numpy_helper.to_array(inits[n.input[1]]).astype(np.float32)
        if (not conv and w.ndim != 2) or (conv and len(n.input) > 2 and n.input[2] and n.input[2] not in inits):
            continue  # a computed bias: the Conv stays float
        name = n.name or f"node_{k}"
        x = n.input[0]
        if x not in dq:
            dq[x] = (x + "_dyn_q", x + "_dyn_scale", x + "_dyn_zp")
            new_nodes.append(helper.make_node("DynamicQuantizeLinear", [x], list(dq[x]), name=x + "_DynQ"))
        xq, xs, xz = dq[x]
        if conv:
            ws = np.abs(w).reshape(w.shape[0], -1).max(axis=1) / WEIGHT_MAX
        else:
            ws = np.abs(w).max(axis=0) / WEIGHT_MAX
        ws = ws.astype(np.float32)
        ws[ws == 0] = 1.0
        shape = (-1,) + (1,) * (w.ndim - 1) if conv else (1, -1)
        wq = np.clip(np.round(w / ws.reshape(shape)), -WEIGHT_MAX, WEIGHT_MAX).astype(np.int8)
        wn = name + "_w"
        new_inits += [numpy_helper.from_array(wq, wn + "_q"),
                      numpy_helper.from_array(np.array(0, np.int8), wn + "_zp"),  # symmetric: per tensor
                      numpy_helper.from_array(ws.reshape((-1,) + (1,) * (w.ndim - 2)) if conv else ws, wn + "_scale")]
        drop.add(n.input[1])
        op = "ConvInteger" if conv else "MatMulInteger"
        qi = helper.make_node(op, [xq, wn + "_q", xz, wn + "_zp"], [name + "_int32"], name=name + "_int")
        if conv:
            qi.attribute.extend(n.attribute)
        out = n.output[0]
        has_bias = conv and len(n.input) > 2 and n.input[2]
        scaled = name + "_scaled" if has_bias else out
        new_nodes += [helper.make_node("Cast", [name + "_int32"], [name + "_f32"], name=name + "_cast",
                                       to=TensorProto.FLOAT),
                      helper.make_node("Mul", [xs, wn + "_scale"], [name + "_scale"], name=name + "_scale_mul"),
                      helper.make_node("Mul", [name + "_f32", name + "_scale"], [scaled], name=name + "_rescale")]
        if has_bias:
            b = numpy_helper.to_array(inits[n.input[2]]).astype(np.float32)
            new_inits.append(numpy_helper.from_array(b.reshape((-1,) + (1,) * (w.ndim - 2)), name + "_bias"))
            new_nodes.append(helper.make_node("Add", [scaled, name + "_bias"], [out], name=name + "_bias_add"))
            drop.add(n.input[2])
        new_nodes.append(qi)
        n.op_type = "DROP"
    kept = [n for n in g.node if n.op_type != "DROP"]
    del g.node[:]
    g.node.extend(kept + new_nodes)
    g.initializer.extend(new_inits)
    if any(x.domain == "com.microsoft" for x in new_nodes) and not any(
            o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    drop_dead(g)
    topo_sort(g)
    return model


def dynamic_lstm(n, inits, name):
    """quantize_dynamic's LSTM: com.microsoft DynamicQuantizeLSTM with W [nd, 4H, I] and
    R [nd, 4H, H] quantized to int8 per gate row (symmetric, scales and zero points
    [nd, 4H]) and stored transposed, [nd, I, 4H] and [nd, H, 4H], as ONNX Runtime's quantizer
    writes them with per_channel. None (the LSTM stays float) where W or R is computed or
    not 3-D, or the node uses batch-first `layout` (DynamicQuantizeLSTM has none)."""
    ins = list(n.input) + [""] * (8 - len(n.input))
    if ins[1] not in inits or ins[2] not in inits:
        return None
    if any(a.name == "layout" and a.i != 0 for a in n.attribute):
        return None
    quantized, names = [], []
    for i in (1, 2):
        w = numpy_helper.to_array(inits[ins[i]]).astype(np.float32)
        if w.ndim != 3:
            return None
        s = (np.abs(w).max(axis=2) / WEIGHT_MAX).astype(np.float32)  # [nd, 4H]
        s[s == 0] = 1.0
        q = np.clip(np.round(w / s[:, :, None]), -WEIGHT_MAX, WEIGHT_MAX).astype(np.int8)
        base = f"{name}_{'WR'[i - 1]}"
        quantized += [numpy_helper.from_array(np.ascontiguousarray(q.transpose(0, 2, 1)), base + "_q"),
                      numpy_helper.from_array(s, base + "_scale"),
                      numpy_helper.from_array(np.zeros(s.shape, np.int8), base + "_zp")]
        names.append(base)
    w, r = names
    node = helper.make_node("DynamicQuantizeLSTM",
                            [ins[0], w + "_q", r + "_q", *ins[3:8], w + "_scale", w + "_zp", r + "_scale", r + "_zp"],
                            list(n.output), name=name + "_quant", domain="com.microsoft")
    node.attribute.extend(a for a in n.attribute if a.name != "layout")
    return node, quantized, {ins[1], ins[2]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--calib", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--feed", action="append", default=[], metavar="NAME=FILE.npy",
                    help="calibrate on these input values instead of random ones (models with non-float inputs)")
    ap.add_argument("--format", choices=("qdq", "qoperator", "dynamic"), default="qdq",
                    help="qdq: QuantizeLinear/DequantizeLinear pairs (default); qoperator: QLinear* ops; "
                         "dynamic: DynamicQuantizeLinear + ConvInteger/MatMulInteger (no calibration)")
    ap.add_argument("--qdq-output", help="with --format qoperator: also write the QDQ model it was converted from")
    ap.add_argument("--reduce-range", action="store_true",
                    help="7-bit weights in [-64, 64] (ONNX Runtime's reduce_range): int8 speed without VNNI")
    args = ap.parse_args()
    global WEIGHT_MAX
    WEIGHT_MAX = 64 if args.reduce_range else 127
    feeds = {}
    for f in args.feed:
        name, path = f.split("=", 1)
        feeds[name] = np.load(path)
    if args.format == "dynamic":
        m = dynamic(onnx.load(args.input))
    else:
        m = quantize(onnx.load(args.input), os.path.abspath(args.kiln), args.calib, args.seed, feeds or None,
                     extra_ops=args.format == "qoperator")
        if args.format == "qoperator":
            if args.qdq_output:
                onnx.save(m, args.qdq_output)
            m = to_qoperator(m)
    onnx.save(m, args.output)
    counts = {}
    for x in m.graph.node:
        counts[x.op_type] = counts.get(x.op_type, 0) + 1
    quant = {k: v for k, v in sorted(counts.items()) if "Quant" in k or "Integer" in k or k.startswith("QLinear")}
    print(f"{args.input} -> {args.output}: {args.format}, {quant}")


if __name__ == "__main__":
    sys.exit(main())
