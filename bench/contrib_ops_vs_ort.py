#!/usr/bin/python3
"""ONNX Runtime's com.microsoft QGemm, QLinearAveragePool, QLinearSoftmax, QLinearWhere,
MatMulIntegerToFloat, DynamicQuantizeMatMul, DynamicQuantizeLSTM, fused float ops and Attention /
QAttention: Kiln against ONNX Runtime and against the kernels' definitions.

  /usr/bin/python3 bench/contrib_ops_vs_ort.py --kiln build/kiln --work /tmp/contrib [--node node]

QGemm: one-node models (uint8 / int8 operands, per-tensor and per-column weights, transA /
transB, alpha, C of several shapes, float32 and quantized outputs), each run with `kiln run`
and with ONNX Runtime (bench/ort_bench.js; scripts/install_ort.sh first), their output bytes
compared with NumPy's evaluation of ONNX Runtime's CPU kernel: exact int32 sums plus C, s =
alpha * a_scale * b_scale[n] (float32, in that order, / y_scale when the output is quantized),
float32(acc) * s, rounded half to even, plus the zero point, saturated. Each case runs with
weights over the full int8 range and with 7-bit weights (|w| <= 64): on a CPU without VNNI,
ONNX Runtime multiplies uint8 by int8 with vpmaddubsw, whose int16 pair sums saturate with
full-range weights, so there its uint8 x int8 results can leave the definition; Kiln's must
not (bit for bit).

QLinearAveragePool (NCHW and channels_last, padding, ceil_mode, count_include_pad): the
definition is ONNX Runtime's kernel in float32 (dequantize, sum the window row by row, divide
by the count, round(y / y_scale + zp)); Kiln runs DequantizeLinear -> AveragePool ->
QuantizeLinear, which adds the zero point after rounding: within one step, and reported.

QLinearSoftmax (uint8 / int8, opset 11 and 13 axes, rows of 1 to 1000): the definition is ONNX
Runtime's kernel: a table T[i] = float32(exp((i - 255 + b) * x_scale)) with b = max(0, ln(FLT_MAX / D)
- 5) / x_scale, per row e = T[255 - (max - x)], their float32 sum in order, and
y = saturate(rint(e * floor(1 / y_scale) / sum) + y_zp). Compared byte for byte, and against softmax
in double (one step: floor(1 / y_scale) is below 1 / y_scale by less than 1).

QLinearWhere (three-way broadcasting, uint8 / int8, one side's parameters equal to the output's):
the definition is ONNX Runtime's tables, float32((q - zp) * scale) / z_scale rounded half to even
plus z_zp, saturated, selected by the condition. Byte for byte.

MatMulIntegerToFloat and DynamicQuantizeMatMul (what ONNX Runtime's graph optimizer writes for
quantize_dynamic's chains; uint8 / int8 operands, batched A, per-tensor and per-column b_scale,
zero points, bias): the definition is exact int32 sums, float32(acc) * float32(a_scale * b_scale)
+ bias, DynamicQuantizeMatMul quantizing A as DynamicQuantizeLinear defines. Float32 outputs:
Kiln within 1e-6 of the largest output (float32 rounding of those steps), reported beside ONNX
Runtime's (whose uint8 x int8 products saturate without VNNI with full-range weights, as above).

DynamicQuantizeLSTM (what quantize_dynamic writes for an LSTM; forward / bidirectional, int8 per
column / uint8 per direction, bias, sequence_lens): the definition is ONNX Runtime's DeepCPU LSTM
with 8-bit weights: X over its first max(sequence_lens) steps and each step's H over the batch
quantized as DynamicQuantizeLinear does, exact products, float32(acc) * (a_scale * w_scale), gate
input (XW + HR) + (Wb + Rb), float32 gates. Y compared: Kiln within 1e-5 of the definition
(float32 activation functions; a rounding of H that lands on the other side of a tie would move
more, and is reported), ONNX Runtime's distance beside it (its sigmoid and tanh are its own
approximations; its uint8 x int8 products saturate without VNNI with full-range weights).

FusedConv, FusedGemm, FusedMatMul, Gelu, BiasGelu, FastGelu, QuickGelu and SkipLayerNormalization
(what ONNX Runtime's optimizer writes into a saved optimized model): one node each, Kiln against
ONNX Runtime within 1e-5 of the largest output (BiasAdd, which Kiln runs too, has no CPU kernel in
ONNX Runtime).

Attention and QAttention (what ONNX Runtime's transformer optimizer and quantize_dynamic write for
BERT-style attention): one node each, every mask form ([B] ends, [2B] ends and starts with a batch
entry wholly masked, [B, T], [B, S, T]), unidirectional with past (and present), unequal V size
with scale and mask_filter_value, QAttention uint8 x 7-bit int8 per tensor and uint8 x uint8 per
column: output 0 against ONNX Runtime's within 1e-5 of the largest output. EmbedLayerNormalization
(segments and mask with a value 2, position_ids [1, S] and [B, S], no mask) and
QEmbedLayerNormalization: the outputs within 1e-5, mask_index equal.

End to end: an MLP quantized by tools/quantize.py --format dynamic (8-bit and 7-bit weights) and
saved by ONNX Runtime's graph optimizer (bench/ort_bench.js --save-optimized), which writes
DynamicQuantizeMatMul: Kiln's output on it must be its output on the unoptimized file, bit for bit.

Exit status 1 when Kiln leaves the definition (QGemm, QLinearSoftmax, QLinearWhere: any byte;
pooling: more than a step; the float outputs: beyond the bounds above).
"""
import argparse
import os
import re
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


def save(path, node, inputs, output_type, output_shape, inits, p, opset=13):
    """One-node model: `inputs` (name, type, array) are its inputs, saved beside it as _a.npy,
    _b.npy...; `inits` the names whose arrays in `p` become initializers."""
    g = helper.make_graph([node], node.op_type, [helper.make_tensor_value_info(n, t, list(a.shape)) for n, t, a in inputs],
                          [helper.make_tensor_value_info(node.output[0], output_type, output_shape)],
                          [numpy_helper.from_array(np.asarray(p[v]), v) for v in inits])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)])
    onnx.save(model, path)
    for suffix, (_, _, a) in zip("abcdefgh", inputs):
        np.save(path[:-5] + f"_{suffix}.npy", a)


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
    ins = ["a", "as", "az", "b", "bs", "bz"]
    if c_shape is not None:
        p["c"] = rng.integers(-10000, 10000, c_shape).astype(np.int32)
        ins.append("c")
    if yt:
        if c_shape is None:
            ins.append("")
        p["ys"], p["yz"] = np.array(0.2, np.float32), np.array(128 if yt == "u8" else -3, NP[yt])
        ins += ["ys", "yz"]
    node = helper.make_node("QGemm", ins, ["y"], domain="com.microsoft", alpha=alpha, transA=int(ta),
                            transB=int(tb))
    save(path, node, [("a", TP[at], a)], TP[yt] if yt else TensorProto.FLOAT, [m, n], [i for i in ins[1:] if i], p)
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


# name, type, channels_last, N, C, H, W, kernel, stride, pad, ceil_mode, count_include_pad
POOLS = [
    ("u8_nchw_3x3_s2_p1", "u8", False, 2, 5, 9, 11, 3, 2, 1, 0, 0),
    ("u8_nchw_3x3_s1_p1_include_pad", "u8", False, 1, 16, 14, 14, 3, 1, 1, 0, 1),
    ("s8_nhwc_2x2_s2_ceil", "i8", True, 1, 24, 7, 9, 2, 2, 0, 1, 0),
    ("u8_nhwc_3x3_s2_p1", "u8", True, 1, 32, 28, 28, 3, 2, 1, 0, 0),
]


def make_pool(path, case, rng):
    _, t, last, n, c, h, w, k, s, pad, ceil, inc = case
    lo, hi = (0, 256) if t == "u8" else (-128, 128)
    xs = (n, h, w, c) if last else (n, c, h, w)
    p = {"x": rng.integers(lo, hi, xs).astype(NP[t]), "xs": np.array(0.04, np.float32),
         "xz": np.array(120 if t == "u8" else -3, NP[t]), "ys": np.array(0.03, np.float32),
         "yz": np.array(131 if t == "u8" else 3, NP[t])}
    node = helper.make_node("QLinearAveragePool", ["x", "xs", "xz", "ys", "yz"], ["y"], domain="com.microsoft",
                            kernel_shape=[k, k], strides=[s, s], pads=[pad] * 4, ceil_mode=ceil,
                            count_include_pad=inc, channels_last=int(last))
    save(path, node, [("x", TP[t], p["x"])], TP[t], None, ("xs", "xz", "ys", "yz"), p)
    return p


def pool_definition(case, p):
    _, t, last, n, c, h, w, k, s, pad, ceil, inc = case
    x = p["x"] if not last else p["x"].transpose(0, 3, 1, 2)
    f = (p["xs"] * (x.astype(np.int32) - int(p["xz"])).astype(np.float32)).astype(np.float32)

    def extent(size):
        span = size + 2 * pad - k
        o = (-(-span // s) if ceil else span // s) + 1
        return o - 1 if ceil and (o - 1) * s >= size + pad else o
    oh, ow = extent(h), extent(w)
    y = np.zeros((n, c, oh, ow), np.float32)
    for i in range(oh):
        for j in range(ow):
            h0, w0 = i * s - pad, j * s - pad
            h1, w1 = min(h0 + k, h), min(w0 + k, w)
            h0, w0 = max(h0, 0), max(w0, 0)
            acc = np.zeros((n, c), np.float32)
            for u in range(h0, h1):
                for v in range(w0, w1):
                    acc = (acc + f[:, :, u, v]).astype(np.float32)
            y[:, :, i, j] = acc / np.float32(k * k if inc else (h1 - h0) * (w1 - w0))
    info = np.iinfo(NP[t])
    q = np.clip(np.rint((y / p["ys"]).astype(np.float32) + np.float32(int(p["yz"]))), info.min, info.max).astype(NP[t])
    return q.transpose(0, 2, 3, 1) if last else q


# name, type, shape, opset, axis (None: the default), x_scale, x_zp, y_scale, y_zp
SOFTMAXES = [
    ("u8_last_axis_ys1/255", "u8", (2, 4, 32), 13, -1, 0.07, 120, 1 / 255, 0),
    ("s8_axis1_opset13_ys1/255", "i8", (2, 7, 5), 13, 1, 0.11, -3, 1 / 255, -128),
    ("u8_opset11_axis1_flattened", "u8", (2, 3, 4, 5), 11, 1, 0.05, 0, 1 / 256, 0),
    ("u8_opset11_no_axis", "u8", (2, 3, 4, 5), 11, None, 0.05, 0, 1 / 256, 0),
    ("u8_rows_of_1000", "u8", (3, 1000), 13, -1, 0.013, 7, 0.0023, 3),
    ("s8_attention_1x4x16x16", "i8", (1, 4, 16, 16), 13, -1, 0.05, 0, 1 / 256, -128),
    ("u8_rows_of_2", "u8", (6, 2), 13, -1, 0.2, 0, 1 / 256, 0),
]


def make_softmax(path, case, rng):
    _, t, shape, opset, axis, xs, xz, ys, yz = case
    lo, hi = (0, 256) if t == "u8" else (-128, 128)
    p = {"x": rng.integers(lo, hi, shape).astype(NP[t]), "xs": np.array(xs, np.float32), "xz": np.array(xz, NP[t]),
         "ys": np.array(ys, np.float32), "yz": np.array(yz, NP[t])}
    attrs = {"opset": opset} if axis is None else {"opset": opset, "axis": axis}
    node = helper.make_node("QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"], ["y"], domain="com.microsoft", **attrs)
    save(path, node, [("x", TP[t], p["x"])], TP[t], list(shape), ("xs", "xz", "ys", "yz"), p)
    return p


def softmax_definition(case, p):
    """ONNX Runtime's kernel (float32 steps) and softmax in double, both quantized."""
    _, t, shape, opset, axis, *_ = case
    axis = -1 if axis is None else axis  # the schema's default, whatever the opset
    axis %= len(shape)
    x = p["x"].astype(np.int64)
    if opset < 13:
        rows = x.reshape(int(np.prod(shape[:axis])), -1)
    else:
        rows = np.moveaxis(x, axis, -1).reshape(-1, shape[axis])
    d = rows.shape[1]
    xs = float(p["xs"])
    b = max(0.0, float(np.log(np.float64(np.float32(np.finfo(np.float32).max) / np.float32(d)))) - 5) / xs
    table = np.exp((np.arange(256, dtype=np.float64) - 255 + b) * xs).astype(np.float32)
    yinv = np.floor(np.float32(1) / p["ys"]).astype(np.float32)
    info = np.iinfo(NP[t])
    e = table[255 - (rows.max(axis=1, keepdims=True) - rows)]
    total = np.add.accumulate(e, axis=1, dtype=np.float32)[:, -1:]  # in order, as the kernel sums
    with np.errstate(over="ignore"):
        q = np.rint(((e * yinv).astype(np.float32) / total).astype(np.float32)).astype(np.float64)
    kern = np.clip(q + int(p["yz"]), info.min, info.max)
    ex = np.exp((rows - rows.max(axis=1, keepdims=True)) * xs)
    math = np.clip(np.rint(ex / ex.sum(axis=1, keepdims=True) / float(p["ys"])) + int(p["yz"]), info.min, info.max)

    def back(v):
        if opset < 13:
            return v.reshape(shape).astype(NP[t])
        moved = list(shape[:axis]) + list(shape[axis + 1:]) + [shape[axis]]
        return np.moveaxis(v.reshape(moved), -1, axis).astype(NP[t])
    return back(kern), back(math)


# name, type, condition shape, X shape, Y shape, (x_scale, x_zp), (y_scale, y_zp), (z_scale, z_zp)
WHERES = [
    ("u8_three_way_broadcast", "u8", (2, 1, 5), (3, 5), (2, 3, 1), (0.05, 120), (0.07, 100), (0.06, 110)),
    ("s8_x_params_equal_output", "i8", (4, 16), (4, 16), (16,), (0.03, -5), (0.09, 12), (0.03, -5)),
    ("u8_scalar_y", "u8", (8, 8), (8, 8), (), (0.2, 0), (0.01, 0), (0.1, 128)),
]


def make_where(path, case, rng):
    _, t, sc, sx, sy, px, py, pz = case
    lo, hi = (0, 256) if t == "u8" else (-128, 128)
    p = {"c": rng.integers(0, 2, sc).astype(bool), "x": rng.integers(lo, hi, sx).astype(NP[t]),
         "y": rng.integers(lo, hi, sy).astype(NP[t])}
    for k, (sc_, zp) in (("x", px), ("y", py), ("z", pz)):
        p[k + "s"], p[k + "z"] = np.array(sc_, np.float32), np.array(zp, NP[t])
    node = helper.make_node("QLinearWhere", ["c", "x", "xs", "xz", "y", "ys", "yz", "zs", "zz"], ["z"],
                            domain="com.microsoft")
    save(path, node, [("x", TP[t], p["x"]), ("y", TP[t], p["y"])], TP[t], None,
         ("c", "xs", "xz", "ys", "yz", "zs", "zz"), p, opset=16)
    return p


def where_definition(case, p):
    t = case[1]
    info = np.iinfo(NP[t])

    def requant(q, k):
        v = ((q.astype(np.int32) - int(p[k + "z"])).astype(np.float32) * p[k + "s"]).astype(np.float32)
        return np.clip(np.rint((v / p["zs"]).astype(np.float32)).astype(np.float64) + int(p["zz"]), info.min, info.max)
    return np.where(p["c"], requant(p["x"], "x"), requant(p["y"], "y")).astype(NP[t])


# name, op, A type ("f32": DynamicQuantizeMatMul), A shape, B type, N, per-column, zero points, bias
TO_FLOAT = [
    ("u8s8_batched_percol_bias", "MatMulIntegerToFloat", "u8", (2, 5, 37), "i8", 20, True, True, True),
    ("u8u8_pertensor_no_zp", "MatMulIntegerToFloat", "u8", (3, 64), "u8", 16, False, False, False),
    ("s8s8_pertensor_zp_bias", "MatMulIntegerToFloat", "i8", (4, 33), "i8", 24, False, True, True),
    ("dq_s8_pertensor_bias", "DynamicQuantizeMatMul", "f32", (2, 8, 64), "i8", 32, False, False, True),
    ("dq_u8_percol_zp", "DynamicQuantizeMatMul", "f32", (4, 128), "u8", 48, True, True, False),
]


def make_to_float(path, case, wmax, rng):
    _, op, at, ashape, bt, n, per_col, zps, bias = case
    k = ashape[-1]
    if at == "f32":
        a = (rng.standard_normal(ashape) * 1.7 + 0.3).astype(np.float32)
    else:
        a = rng.integers(*((0, 256) if at == "u8" else (-128, 128)), ashape).astype(NP[at])
    b = rng.integers(*((0, 256) if bt == "u8" else (-wmax, wmax)), (k, n)).astype(NP[bt])
    cols = n if per_col else 1
    p = {"a": a, "b": b, "as": np.array(0.021, np.float32),
         "bs": (np.float32(0.004) + np.float32(0.0003) * np.arange(cols, dtype=np.float32)).astype(np.float32),
         "az": np.array(117 if at != "i8" else -7, NP.get(at, np.uint8)),
         "bz": (np.arange(cols) % 5 + (126 if bt == "u8" else -2)).astype(NP[bt]),
         "bias": (rng.standard_normal(n) * 3).astype(np.float32)}
    if not per_col:
        p["bs"], p["bz"] = p["bs"].reshape(()), p["bz"].reshape(())
    if at == "f32":
        ins = ["a", "b", "bs", "bz" if zps else "", "bias" if bias else ""]
    else:
        ins = ["a", "b", "as", "bs", "az" if zps else "", "bz" if zps else "", "bias" if bias else ""]
    while not ins[-1]:
        ins.pop()
    if not zps:
        p["az"], p["bz"] = np.array(0, p["az"].dtype), np.zeros_like(p["bz"])
    if not bias:
        p["bias"] = np.zeros(n, np.float32)
    node = helper.make_node(op, ins, ["y"], domain="com.microsoft")
    save(path, node, [("a", TensorProto.FLOAT if at == "f32" else TP[at], a)], TensorProto.FLOAT, None,
         [i for i in ins[1:] if i], p)
    return p


def to_float_definition(case, p):
    """ONNX Runtime's kernels: exact int32 sums, float32(acc) * float32(a_scale * b_scale) + bias."""
    at = case[2]
    a, as_, az = p["a"], p["as"], int(p["az"])
    if at == "f32":  # DynamicQuantizeLinear's parameters and rounding
        lo, hi = min(np.float32(a.min()), np.float32(0)), max(np.float32(a.max()), np.float32(0))
        as_ = np.float32(1) if hi == lo else np.float32((hi - lo) / np.float32(255))
        az = int(np.rint(np.clip(np.float32(0) - lo / as_, 0, 255)))
        a = np.clip(np.rint((a / as_).astype(np.float32)) + az, 0, 255).astype(np.uint8)
    acc = (a.astype(np.int64) - az) @ (p["b"].astype(np.int64) - p["bz"].astype(np.int64))
    mult = (np.float32(as_) * p["bs"]).astype(np.float32)
    return ((acc.astype(np.float32) * mult).astype(np.float32) + p["bias"]).astype(np.float32)


def optimized_mlp(args, reduce_range):
    """An MLP (64 -> 128, Relu, -> 10; batch 4) quantized by tools/quantize.py --format dynamic,
    then saved by ONNX Runtime's graph optimizer, which folds each DynamicQuantizeLinear ->
    MatMulInteger -> Cast -> Mul -> Add chain into a com.microsoft DynamicQuantizeMatMul.
    Returns (ops of the optimized model, Kiln's output on it, Kiln's on the unoptimized one,
    ONNX Runtime's on the optimized one)."""
    rng = np.random.default_rng(5)
    arrays = {"w1": rng.standard_normal((64, 128)) * 0.1, "b1": rng.standard_normal(128) * 0.1,
              "w2": rng.standard_normal((128, 10)) * 0.1, "b2": rng.standard_normal(10) * 0.1}
    nodes = [helper.make_node("MatMul", ["a", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["o"]),
             helper.make_node("Add", ["o", "b2"], ["y"])]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [4, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 10])],
                          [numpy_helper.from_array(v.astype(np.float32), k) for k, v in arrays.items()])
    tag = "mlp_7bit" if reduce_range else "mlp_8bit"
    base = os.path.join(args.work, tag)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), base + ".onnx")
    np.save(base + "_dyn_a.npy", rng.standard_normal((4, 64)).astype(np.float32))
    np.save(base + "_dyn_opt_a.npy", np.load(base + "_dyn_a.npy"))
    subprocess.run([sys.executable, os.path.join(HERE, "..", "tools", "quantize.py"), base + ".onnx", base + "_dyn.onnx",
                    "--kiln", args.kiln, "--format", "dynamic"] + (["--reduce-range"] if reduce_range else []),
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run([args.node, os.path.join(HERE, "ort_bench.js"), base + "_dyn.onnx", "--runs", "1", "--warmup", "0",
                    "--save-optimized", base + "_dyn_opt.onnx"], check=True, stdout=subprocess.DEVNULL)
    ops = sorted({(n.domain + "." if n.domain else "") + n.op_type for n in onnx.load(base + "_dyn_opt.onnx").graph.node})
    got, ort = run_both(args, base + "_dyn_opt.onnx", tag + "_opt")
    unopt, _ = run_both(args, base + "_dyn.onnx", tag)
    return ops, got, unopt, ort

# name, direction count, weight type, per-column scales, seq, batch, input, hidden, sequence_lens
LSTMS = [
    ("dqlstm fwd i8 per-column", 1, "i8", True, 5, 1, 16, 8, None),
    ("dqlstm bidi u8 per-direction lens", 2, "u8", False, 4, 3, 6, 5, [4, 2, 3]),
    ("dqlstm fwd i8 batch 4 hidden 64", 1, "i8", False, 6, 4, 32, 64, None),
]


def make_lstm(path, case, wmax, rng):
    _, D, wt, per_col, S, B, I, H, lens = case
    G = 4 * H
    p = {"x": (rng.standard_normal((S, B, I)) * 1.2).astype(np.float32)}
    if wt == "i8":
        p["w"] = rng.integers(-wmax + 1, wmax, (D, I, G)).astype(np.int8)
        p["r"] = rng.integers(-wmax + 1, wmax, (D, H, G)).astype(np.int8)
        wz = rz = 0
    else:
        p["w"] = rng.integers(128 - wmax, 128 + wmax, (D, I, G)).astype(np.uint8)
        p["r"] = rng.integers(128 - wmax, 128 + wmax, (D, H, G)).astype(np.uint8)
        wz = rz = 128
    sshape = (D, G) if per_col else (D,)
    p["ws"] = rng.uniform(0.5, 1.5, sshape).astype(np.float32) / (wmax * np.sqrt(I))
    p["rs"] = rng.uniform(0.5, 1.5, sshape).astype(np.float32) / (wmax * np.sqrt(H))
    p["wz"] = np.full(sshape, wz, p["w"].dtype)
    p["rz"] = np.full(sshape, rz, p["r"].dtype)
    p["b"] = (rng.standard_normal((D, 2 * G)) * 0.2).astype(np.float32)
    inits = ["w", "r", "b", "ws", "wz", "rs", "rz"]
    ins = ["x", "w", "r", "b", "", "", "", "", "ws", "wz", "rs", "rz"]
    if lens is not None:
        p["lens"] = np.array(lens, np.int32)
        ins[4] = "lens"
        inits.append("lens")
    node = helper.make_node("DynamicQuantizeLSTM", ins, ["y"], domain="com.microsoft", hidden_size=H,
                            direction="bidirectional" if D == 2 else "forward")
    save(path, node, [("x", TensorProto.FLOAT, p["x"])], TensorProto.FLOAT, [S, D, B, H], inits, p)
    return p


def lstm_quant(v):
    mn, mx = np.float32(min(0.0, float(v.min()))), np.float32(max(0.0, float(v.max())))
    s = np.float32((mx - mn) / np.float32(255))
    if not s > 0:
        return np.zeros(v.shape, np.int64), np.float32(0)
    zp = int(np.clip(np.rint(np.float32(0) - mn / s), 0, 255))
    q = np.clip(np.rint(v.astype(np.float32) / s) + np.float32(zp), 0, 255).astype(np.int64) - zp
    return q, s


def lstm_definition(case, p):
    _, D, wt, per_col, S, B, I, H, lens = case
    G = 4 * H
    lens = list(lens) if lens is not None else [S] * B
    steps = max(lens)
    xq, xs = lstm_quant(p["x"][:steps])
    y = np.zeros((S, D, B, H), np.float32)
    sig = lambda v: (np.float32(1) / (np.float32(1) + np.exp(-v))).astype(np.float32)
    for d in range(D):
        ws = (p["ws"][d] if per_col else np.full(G, p["ws"][d])).astype(np.float32)
        rs = (p["rs"][d] if per_col else np.full(G, p["rs"][d])).astype(np.float32)
        w = p["w"][d].astype(np.int64) - int(p["wz"].flat[0])
        r = p["r"][d].astype(np.int64) - int(p["rz"].flat[0])
        h = np.zeros((B, H), np.float32)
        c = np.zeros((B, H), np.float32)
        bias = (p["b"][d, :G] + p["b"][d, G:]).astype(np.float32)
        for s in range(steps):
            hin = h.copy()
            for b in range(B):
                if lens[b] < s:
                    hin[b] = 0
            hq, hs = lstm_quant(hin)
            for b in range(B):
                if s >= lens[b]:
                    continue
                t = lens[b] - 1 - s if d == 1 else s
                xw = (xq[t, b] @ w).astype(np.float32) * (np.float32(xs) * ws)
                hr = (hq[b] @ r).astype(np.float32) * (np.float32(hs) * rs)
                g = ((xw + hr).astype(np.float32) + bias).astype(np.float32)
                i, o, f, cc = sig(g[:H]), sig(g[H:2 * H]), sig(g[2 * H:3 * H]), np.tanh(g[3 * H:])
                c[b] = (f * c[b] + i * cc).astype(np.float32)
                h[b] = (o * np.tanh(c[b])).astype(np.float32)
                y[t, d, b] = h[b]
    return y


# ONNX Runtime's fused float ops (what its optimizer writes into a saved optimized model): one node
# each; name, op, inputs (name, shape, initializer?), attributes, output shape.
FUSED = [
    ("fusedconv relu z", "FusedConv", [("x", (1, 8, 10, 10), False), ("w", (16, 8, 3, 3), True), ("b", (16,), True),
                                       ("z", (1, 16, 10, 10), False)],
     dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], activation="Relu"), (1, 16, 10, 10)),
    ("fusedconv clip stride 2 group", "FusedConv", [("x", (1, 8, 9, 9), False), ("w", (8, 1, 3, 3), True),
                                                    ("b", (8,), True)],
     dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2], group=8, activation="Clip",
          activation_params=[0.0, 6.0]), (1, 8, 5, 5)),
    ("fusedconv leakyrelu", "FusedConv", [("x", (2, 3, 6, 7), False), ("w", (4, 3, 1, 1), True)],
     dict(activation="LeakyRelu", activation_params=[0.1]), (2, 4, 6, 7)),
    ("fusedconv hardsigmoid", "FusedConv", [("x", (1, 3, 6, 6), False), ("w", (5, 3, 3, 3), True)],
     dict(activation="HardSigmoid", activation_params=[0.2, 0.5]), (1, 5, 4, 4)),
    ("fusedgemm relu transB", "FusedGemm", [("a", (4, 32), False), ("b", (16, 32), True), ("c", (16,), True)],
     dict(transB=1, activation="Relu"), (4, 16)),
    ("fusedgemm leakyrelu alpha beta", "FusedGemm", [("a", (8, 5), False), ("b", (8, 6), True), ("c", (6,), True)],
     dict(transA=1, alpha=0.5, beta=2.0, activation="LeakyRelu", activation_alpha=0.2), (5, 6)),
    ("fusedmatmul transB alpha", "FusedMatMul", [("a", (2, 4, 6, 8), False), ("b", (2, 4, 5, 8), False)],
     dict(transB=1, alpha=0.125), (2, 4, 6, 5)),
    ("fusedmatmul transA", "FusedMatMul", [("a", (3, 7, 5), False), ("b", (7, 4), True)], dict(transA=1),
     (3, 5, 4)),
    ("gelu", "Gelu", [("x", (2, 16, 64), False)], {}, (2, 16, 64)),
    ("biasgelu", "BiasGelu", [("x", (2, 16, 64), False), ("b", (64,), True)], {}, (2, 16, 64)),
    ("fastgelu bias", "FastGelu", [("x", (2, 16, 64), False), ("b", (64,), True)], {}, (2, 16, 64)),
    ("quickgelu", "QuickGelu", [("x", (4, 33), False)], dict(alpha=1.702), (4, 33)),
    ("skiplayernorm bias", "SkipLayerNormalization", [("x", (2, 8, 64), False), ("s", (2, 8, 64), False),
                                                      ("g", (64,), True), ("be", (64,), True), ("bi", (64,), True)],
     dict(epsilon=1e-5), (2, 8, 64)),
    ("skiplayernorm no beta", "SkipLayerNormalization", [("x", (16, 48), False), ("s", (16, 48), False),
                                                         ("g", (48,), True)],
     dict(epsilon=1e-12), (16, 48)),
]


def make_fused(path, case, rng):
    _, op, ins, attrs, out_shape = case
    p = {n: (rng.standard_normal(s) * (0.3 if len(s) == 4 and n == "w" else 1.0)).astype(np.float32)
         for n, s, _ in ins}
    node = helper.make_node(op, [n for n, _, _ in ins], ["y"], domain="com.microsoft", **attrs)
    data = [(n, TensorProto.FLOAT, p[n]) for n, _, init in ins if not init]
    save(path, node, data, TensorProto.FLOAT, list(out_shape), [n for n, _, init in ins if init], p)
    return [n for n, _, init in ins if not init]


# ONNX Runtime's Attention / QAttention (what its optimizer and quantize_dynamic write for BERT-style
# attention): name, op, batch, seq, hidden in, num_heads, qkv sizes, mask ("": none, "1d", "2b",
# "2d", "3d"), unidirectional, past length (None: no past), extra attributes.
ATTENTIONS = [
    ("attention", "Attention", 2, 16, 64, 4, (64, 64, 64), "", 0, None, {}),
    ("attention mask [B]", "Attention", 2, 16, 64, 4, (64, 64, 64), "1d", 0, None, {}),
    ("attention mask [2B]", "Attention", 3, 8, 32, 2, (32, 32, 32), "2b", 0, None, {}),
    ("attention mask [B, T] unidirectional", "Attention", 2, 12, 48, 4, (48, 48, 48), "2d", 1, None, {}),
    ("attention mask [B, S, T]", "Attention", 2, 6, 32, 2, (32, 32, 32), "3d", 0, None, {}),
    ("attention unidirectional past 5", "Attention", 2, 4, 32, 4, (32, 32, 32), "", 1, 5, {}),
    ("attention sizes scale filter", "Attention", 1, 10, 24, 2, (16, 16, 8), "2d", 0, None,
     dict(scale=0.2, mask_filter_value=-100.0)),
    ("qattention u8 x i8 7-bit, mask [B]", "QAttention", 2, 16, 64, 4, (64, 64, 64), "1d", 0, None, {}),
    ("qattention u8 x u8 per column", "QAttention", 2, 8, 32, 2, (32, 32, 32), "2d", 0, None, {}),
]


def add_mask(kind, B, S, T, rng, names, data):
    """An attention mask input of ONNX Runtime's forms ("": none; "1d": [B] key ends; "2b": [2B] ends
    then starts, one batch entry with every key masked; "2d": [B, T] 0 / 1; "3d": [B, S, T]) appended
    to the node's input names (an empty name for none) and to the data inputs."""
    mask = None
    if kind == "1d":
        mask = rng.integers(1, T + 1, B).astype(np.int32)
    elif kind == "2b":
        mask = np.concatenate([rng.integers(T // 2, T + 1, B), rng.integers(0, T // 2, B)]).astype(np.int32)
        mask[B - 1], mask[2 * B - 1] = 2, T + 3  # a batch entry with every key masked
    elif kind == "2d":
        mask = (rng.random((B, T)) > 0.3).astype(np.int32)
    elif kind == "3d":
        mask = (rng.random((B, S, T)) > 0.3).astype(np.int32)
    names.append("mask" if mask is not None else "")
    if mask is not None:
        data.append(("mask", TensorProto.INT32, mask))


def make_attention(path, case, rng):
    name, op, B, S, D, N, sizes, mask_kind, uni, past_len, extra = case
    C = sum(sizes)
    T = S + (past_len or 0)
    x = rng.standard_normal((B, S, D)).astype(np.float32)
    w = (rng.standard_normal((D, C)) * 0.2).astype(np.float32)
    bias = (rng.standard_normal(C) * 0.1).astype(np.float32)
    p, inits, data = {}, [], []
    attrs = dict(num_heads=N, **extra)
    if uni:
        attrs["unidirectional"] = 1
    if op == "Attention":
        if sizes[0] != sizes[2]:
            attrs["qkv_hidden_sizes"] = list(sizes)
        data.append(("x", TensorProto.FLOAT, x))
        p.update(w=w, bias=bias)
        inits += ["w", "bias"]
        names = ["x", "w", "bias"]
    else:
        xs, xz = np.float32(0.03), np.uint8(125)
        xq = np.clip(np.rint(x / xs) + xz, 0, 255).astype(np.uint8)
        if "u8 x u8" in name:
            ws = (np.abs(rng.standard_normal(C)) * 0.002 + 0.001).astype(np.float32)
            wz = rng.integers(110, 140, C).astype(np.uint8)
            wq = rng.integers(0, 256, (D, C)).astype(np.uint8)
        else:  # 7-bit int8, exact in ONNX Runtime's pairwise products on every CPU
            ws, wz = np.float32(0.003), np.int8(0)
            wq = rng.integers(-64, 65, (D, C)).astype(np.int8)
        data.append(("x", TensorProto.UINT8, xq))
        p.update(w=wq, bias=bias, xs=xs, ws=ws, xz=xz, wz=wz)
        inits += ["w", "bias", "xs", "ws", "xz", "wz"]
        names = ["x", "w", "bias", "xs", "ws"]
    add_mask(mask_kind, B, S, T, rng, names, data)
    if op == "QAttention":
        names += ["xz", "wz"]
    if past_len is not None:
        H = sizes[0] // N
        past = rng.standard_normal((2, B, N, past_len, H)).astype(np.float32)
        names.append("past")
        data.append(("past", TensorProto.FLOAT, past))
    while names and names[-1] == "":
        names.pop()
    outs = ["y"] + (["present"] if past_len is not None else [])  # ONNX Runtime wants present with past
    node = helper.make_node(op, names, outs, domain="com.microsoft", **attrs)
    save(path, node, data, TensorProto.FLOAT, [B, S, sizes[2]], inits, p)
    if past_len is not None:
        model = onnx.load(path)
        model.graph.output.append(helper.make_tensor_value_info("present", TensorProto.FLOAT,
                                                                [2, B, N, T, sizes[0] // N]))
        onnx.save(model, path)
    return len(data)


# ONNX Runtime's MultiHeadAttention (what its transformer optimizer writes for attention with Q, K
# and V projected apart: cross-attention, ViT, CLIP, decoders): name, batch, seq, kv length, hidden,
# v hidden, num_heads, form ("3d": key / value [B, L, D]; "4d": split into heads), bias, mask ("",
# "1d", "2d", "3d"), attention_bias, past length (None: no past), present outputs, unidirectional,
# extra attributes.
MHAS = [
    ("mha q k v", 2, 5, 7, 16, 16, 2, "3d", False, "", False, None, False, 0, {}),
    ("mha bias mask [B, L]", 2, 5, 7, 16, 16, 2, "3d", True, "2d", False, None, False, 0, {}),
    ("mha mask [B]", 3, 4, 9, 24, 24, 3, "3d", True, "1d", False, None, False, 0, {}),
    ("mha mask [B, S, T] attention_bias [1, N, S, T]", 2, 6, 6, 32, 32, 4, "3d", False, "3d", True, None, False, 0,
     {}),
    ("mha key value split into heads", 2, 5, 8, 16, 16, 2, "4d", False, "2d", False, None, False, 0, {}),
    ("mha past unidirectional present", 2, 4, 4, 16, 16, 2, "3d", True, "", False, 3, True, 1, {}),
    ("mha past mask [B, T] present", 2, 3, 3, 32, 32, 4, "3d", False, "2d", False, 5, True, 0, {}),
    ("mha v size 8 scale filter", 1, 6, 10, 16, 8, 2, "3d", True, "2d", False, None, False, 0,
     dict(scale=0.3, mask_filter_value=-50.0)),
    ("mha unidirectional mask [B]", 2, 6, 6, 16, 16, 2, "3d", True, "1d", False, None, False, 1, {}),
    ("mha present without past", 1, 5, 5, 16, 16, 4, "3d", True, "", False, None, True, 0, {}),
]


def make_mha(path, case, rng):
    """The model; returns (data inputs, outputs)."""
    _, B, S, L, D, DV, N, form, use_bias, mask_kind, use_ab, past_len, present, uni, extra = case
    H, HV = D // N, DV // N
    P = past_len or 0
    T = P + L
    q = rng.standard_normal((B, S, D)).astype(np.float32)
    if form == "4d":
        k = rng.standard_normal((B, N, L, H)).astype(np.float32)
        v = rng.standard_normal((B, N, L, HV)).astype(np.float32)
    else:
        k = rng.standard_normal((B, L, D)).astype(np.float32)
        v = rng.standard_normal((B, L, DV)).astype(np.float32)
    data = [("q", TensorProto.FLOAT, q), ("k", TensorProto.FLOAT, k), ("v", TensorProto.FLOAT, v)]
    names, inits, p = ["q", "k", "v"], [], {}
    if use_bias:
        p["bias"] = (rng.standard_normal(2 * D + DV) * 0.3).astype(np.float32)
        inits.append("bias")
    names.append("bias" if use_bias else "")
    add_mask(mask_kind, B, S, T, rng, names, data)
    names.append("ab" if use_ab else "")
    if use_ab:
        data.append(("ab", TensorProto.FLOAT, rng.standard_normal((1, N, S, T)).astype(np.float32)))
    if past_len is not None:
        data.append(("pk", TensorProto.FLOAT, rng.standard_normal((B, N, P, H)).astype(np.float32)))
        data.append(("pv", TensorProto.FLOAT, rng.standard_normal((B, N, P, HV)).astype(np.float32)))
        names += ["pk", "pv"]
    while names and names[-1] == "":
        names.pop()
    outs = ["y"] + (["present_key", "present_value"] if present else [])
    attrs = dict(num_heads=N, **extra)
    if uni:
        attrs["unidirectional"] = 1
    node = helper.make_node("MultiHeadAttention", names, outs, domain="com.microsoft", **attrs)
    save(path, node, data, TensorProto.FLOAT, [B, S, DV], inits, p)
    if present:
        model = onnx.load(path)
        model.graph.output.append(helper.make_tensor_value_info("present_key", TensorProto.FLOAT, [B, N, T, H]))
        model.graph.output.append(helper.make_tensor_value_info("present_value", TensorProto.FLOAT, [B, N, T, HV]))
        onnx.save(model, path)
    return len(data), len(outs)


# ONNX Runtime's EmbedLayerNormalization / QEmbedLayerNormalization (BERT's embeddings as its
# transformer optimizer and quantize_dynamic write them): name, op, batch, seq, vocab, hidden,
# positions, segments (0: none), mask, position_ids ("": none, "b": [B, S], "1": [1, S]).
EMBEDS = [
    ("embedlayernorm segments mask sum", "EmbedLayerNormalization", 2, 8, 50, 32, 16, 2, True, ""),
    ("embedlayernorm position_ids [1, S], no mask", "EmbedLayerNormalization", 3, 6, 40, 24, 12, 0, False, "1"),
    ("embedlayernorm position_ids [B, S] mask", "EmbedLayerNormalization", 2, 5, 30, 16, 9, 0, True, "b"),
    ("qembedlayernorm segments mask", "QEmbedLayerNormalization", 2, 8, 50, 32, 16, 2, True, ""),
]


def make_embed(path, case, rng):
    """The model (outputs y, mask_index and, for the float op, embedding_sum); returns the data
    input count and the output count."""
    name, op, B, S, V, H, P, G, with_mask, pos_kind = case
    q = op.startswith("Q")
    tabs = {"word": (V, H), "pos": (P, H), "seg": (G, H), "gamma": (H,), "beta": (H,)}
    p, inits, data = {}, [], []
    f = {k: (rng.standard_normal(sh) * (0.5 if k != "gamma" else 0.2) + (1.0 if k == "gamma" else 0.0)).astype(np.float32)
         for k, sh in tabs.items() if k != "seg" or G}
    ids = rng.integers(0, V, (B, S)).astype(np.int32)
    data.append(("ids", TensorProto.INT32, ids))
    names = ["ids", ""]
    if G:
        data.append(("segs", TensorProto.INT32, rng.integers(0, G, (B, S)).astype(np.int32)))
        names[1] = "segs"
    for k in ("word", "pos", "seg", "gamma", "beta"):
        if k not in f:
            names.append("")
            continue
        if q:  # uint8 per tensor, as quantize_dynamic writes
            lo, hi = min(float(f[k].min()), 0.0), max(float(f[k].max()), 0.0)
            sc = np.float32((hi - lo) / 255.0)
            zp = np.uint8(np.clip(np.rint(-lo / sc), 0, 255))
            p[k] = np.clip(np.rint(f[k] / sc) + zp, 0, 255).astype(np.uint8)
            p[k + "_s"], p[k + "_z"] = sc, zp
        else:
            p[k] = f[k]
        inits.append(k)
        names.append(k)
    mask = None
    if with_mask:
        mask = (rng.random((B, S)) > 0.25).astype(np.int32)
        mask[0, 1] = 2  # counted by ONNX Runtime only where == 1
        data.append(("mask", TensorProto.INT32, mask))
    names.append("mask" if with_mask else "")
    if q:
        for suffix in ("_s", "_z"):
            for k in ("word", "pos", "seg", "gamma", "beta"):
                if k in f:
                    inits.append(k + suffix)
                names.append(k + suffix if k in f else "")
    elif pos_kind:
        pid = rng.integers(0, P, (1 if pos_kind == "1" else B, S)).astype(np.int32)
        data.append(("pids", TensorProto.INT32, pid))
        names.append("pids")
    while names[-1] == "":
        names.pop()
    outs = ["y", "mask_index"] + ([] if q else ["sum"])
    node = helper.make_node(op, names, outs, domain="com.microsoft", epsilon=1e-12)
    g = helper.make_graph([node], op, [helper.make_tensor_value_info(n, t, list(a.shape)) for n, t, a in data],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, S, H]),
                           helper.make_tensor_value_info("mask_index", TensorProto.INT32, [B])] +
                          ([] if q else [helper.make_tensor_value_info("sum", TensorProto.FLOAT, [B, S, H])]),
                          [numpy_helper.from_array(np.asarray(p[v]), v) for v in inits])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)]),
              path)
    for suffix, (_, _, a) in zip("abc", data):
        np.save(path[:-5] + f"_{suffix}.npy", a)
    return len(data), len(outs)


def file_tag(name):
    """A case name as a file name."""
    return re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_")


def relative_diff(got, ort):
    """max |got - ort| over max |ort| (inf where the shapes differ)."""
    if got.shape != ort.shape:
        return np.inf
    return float(np.abs(got - ort).max() / max(float(np.abs(ort).max()), 1e-30))


def same_bytes(x, y):
    """Equal type, and equal bytes."""
    return x.dtype == y.dtype and x.tobytes() == y.tobytes()


def outputs(args, tag, indices):
    """(Kiln's, ONNX Runtime's) output j of the last run_both of `tag`, for each j."""
    load = lambda who, j: np.load(os.path.join(args.work, f"{who}_{tag}", f"output_{j}.npy"))
    return [(load("kiln", j), load("ort", j)) for j in indices]


def run_both(args, path, tag, inputs=("a",)):
    k_out, o_out = os.path.join(args.work, "kiln_" + tag), os.path.join(args.work, "ort_" + tag)
    kfile = path[:-5] + ".kiln"
    feeds = []
    for i, suffix in enumerate(inputs):
        feeds += ["--input", f"{i}={path[:-5]}_{suffix}.npy"]
    subprocess.run([args.kiln, "compile", "--model", path, "--output", kfile], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([args.kiln, "run", kfile, *feeds, "--output-dir", k_out], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([args.node, os.path.join(HERE, "ort_bench.js"), path, *feeds,
                    "--runs", "1", "--warmup", "0", "--output-dir", o_out], check=True, stdout=subprocess.DEVNULL)
    return np.load(os.path.join(k_out, "output_0.npy")), np.load(os.path.join(o_out, "output_0.npy"))


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
            got, ort = run_both(args, path, tag)
            k_ok = same_bytes(got, want)
            o_ok = same_bytes(ort, want)
            diff = float(np.abs(ort.astype(np.float64) - want.astype(np.float64)).max())
            bad += not k_ok
            print(f"{case[0]:48s} {('8-bit' if wmax == 128 else '7-bit'):>8s} {str(k_ok):>18s} {str(o_ok):>17s} {diff:16.6g}")
    print(f"\n{'QLinearAveragePool case':48s} {'Kiln exact':>10s} {'max |Kiln - def|':>17s} {'ORT = definition':>17s}")
    for case in POOLS:
        path = os.path.join(args.work, case[0] + ".onnx")
        p = make_pool(path, case, rng)
        want = pool_definition(case, p)
        got, ort = run_both(args, path, case[0])
        if got.shape != want.shape:
            print(f"{case[0]:48s} shape {got.shape} != {want.shape}")
            bad += 1
            continue
        d = np.abs(got.astype(np.int32) - want.astype(np.int32))
        o_ok = same_bytes(ort, want)
        bad += int(d.max() > 1)
        print(f"{case[0]:48s} {float((d == 0).mean()):10.4f} {int(d.max()):17d} {str(o_ok):>17s}")
    print(f"\n{'QLinearSoftmax case':48s} {'Kiln = definition':>18s} {'Kiln = ORT':>11s} {'max |Kiln - softmax|':>21s}")
    for case in SOFTMAXES:
        tag = case[0].replace("/", "_")
        path = os.path.join(args.work, tag + ".onnx")
        p = make_softmax(path, case, rng)
        want, math = softmax_definition(case, p)
        got, ort = run_both(args, path, tag)
        k_ok = same_bytes(got, want)
        o_ok = same_bytes(got, ort)
        d = int(np.abs(got.astype(np.int32) - math.astype(np.int32)).max())
        bad += (not k_ok) + (d > 1)
        print(f"{case[0]:48s} {str(k_ok):>18s} {str(o_ok):>11s} {d:21d}")
    print(f"\n{'QLinearWhere case':48s} {'Kiln = definition':>18s} {'Kiln = ORT':>11s}")
    for case in WHERES:
        path = os.path.join(args.work, case[0] + ".onnx")
        p = make_where(path, case, rng)
        want = where_definition(case, p)
        got, ort = run_both(args, path, case[0], ("a", "b"))
        k_ok = same_bytes(got, want)
        o_ok = same_bytes(got, ort)
        bad += not k_ok
        print(f"{case[0]:48s} {str(k_ok):>18s} {str(o_ok):>11s}")
    print(f"\n{'MatMulIntegerToFloat / DynamicQuantizeMatMul case':48s} {'weights':>8s} {'max |Kiln - def|':>17s} "
          f"{'max |ORT - def|':>16s} {'max |def|':>10s}")
    for case in TO_FLOAT:
        for wmax in (128, 64) if case[4] == "i8" else (128,):
            tag = f"{case[0]}_w{wmax}"
            path = os.path.join(args.work, tag + ".onnx")
            p = make_to_float(path, case, wmax, rng)
            want = to_float_definition(case, p)
            got, ort = run_both(args, path, tag)
            kd = float(np.abs(got.astype(np.float64) - want).max()) if got.shape == want.shape else float("inf")
            od = float(np.abs(ort.astype(np.float64) - want).max())
            top = float(np.abs(want).max())
            bad += not kd <= 1e-6 * top  # float32 rounding of the scale and bias steps only
            print(f"{case[0]:48s} {('8-bit' if wmax == 128 else '7-bit'):>8s} {kd:17.3g} {od:16.3g} {top:10.4g}")
    print(f"\n{'DynamicQuantizeLSTM case':48s} {'weights':>8s} {'max |Kiln - def|':>17s} {'max |ORT - def|':>16s} "
          f"{'max |Kiln - ORT|':>17s}")
    for case in LSTMS:
        for wmax in (128, 64):
            tag = f"{case[0]}_w{wmax}".replace(" ", "_")
            path = os.path.join(args.work, tag + ".onnx")
            p = make_lstm(path, case, wmax, rng)
            want = lstm_definition(case, p)
            got, ort = run_both(args, path, tag)
            kd = float(np.abs(got - want).max()) if got.shape == want.shape else float("inf")
            od = float(np.abs(ort - want).max())
            bad += not kd <= 1e-5
            print(f"{case[0]:48s} {('8-bit' if wmax == 128 else '7-bit'):>8s} {kd:17.3g} {od:16.3g} "
                  f"{float(np.abs(got - ort).max()):17.3g}")
    one_output = (("fused float op (ONNX Runtime optimizer)", FUSED, lambda p, c: len(make_fused(p, c, rng))),
                  ("Attention / QAttention case", ATTENTIONS, lambda p, c: make_attention(p, c, rng)))
    for title, cases, make_case in one_output:
        print(f"\n{title:48s} {'max |Kiln - ORT| / max |ORT|':>30s}")
        for case in cases:
            tag = file_tag(case[0])
            path = os.path.join(args.work, tag + ".onnx")
            n_data = make_case(path, case)
            got, ort = run_both(args, path, tag, tuple("abc"[:n_data]))
            rel = relative_diff(got, ort)
            bad += not rel <= 1e-5
            print(f"{case[0]:48s} {rel:30.3g}")
    print(f"\n{'MultiHeadAttention case':48s} {'max |Kiln - ORT| / max |ORT|':>30s} {'presents':>9s}")
    for case in MHAS:
        tag = file_tag(case[0])
        path = os.path.join(args.work, tag + ".onnx")
        n_data, n_out = make_mha(path, case, rng)
        run_both(args, path, tag, tuple("abcdefgh"[:n_data]))
        rel = max(relative_diff(*pair) for pair in outputs(args, tag, range(n_out)))
        bad += not rel <= 1e-5
        print(f"{case[0]:48s} {rel:30.3g} {n_out - 1:9d}")
    print(f"\n{'(Q)EmbedLayerNormalization case':48s} {'max |Kiln - ORT| / max |ORT|':>30s} {'mask_index equal':>17s}")
    for case in EMBEDS:
        tag = file_tag(case[0])
        path = os.path.join(args.work, tag + ".onnx")
        n_data, n_out = make_embed(path, case, rng)
        run_both(args, path, tag, tuple("abc"[:n_data]))
        pairs = outputs(args, tag, range(n_out))
        mask_same = same_bytes(*pairs[1])
        rel = max(relative_diff(*pair) for j, pair in enumerate(pairs) if j != 1)
        bad += not (rel <= 1e-5 and mask_same)
        print(f"{case[0]:48s} {rel:30.3g} {str(mask_same):>17s}")
    print("\nONNX Runtime's optimized dynamic MLP: Kiln on it against Kiln on the unoptimized file, and ONNX Runtime")
    for reduce_range in (False, True):
        ops, got, unopt, ort = optimized_mlp(args, reduce_range)
        same = same_bytes(got, unopt)
        bad += not same or "com.microsoft.DynamicQuantizeMatMul" not in ops
        print(f"  {'7-bit' if reduce_range else '8-bit'} weights, ops {', '.join(ops)}: Kiln = Kiln unoptimized {same}, "
              f"max |Kiln - ORT| {float(np.abs(got - ort).max()):.3g} (max |ORT| {float(np.abs(ort).max()):.3g})")
    print("FAIL" if bad else "ok: QGemm, QLinearSoftmax and QLinearWhere bit for bit, QLinearAveragePool within one "
          "step, MatMulIntegerToFloat / DynamicQuantizeMatMul within float32 rounding, DynamicQuantizeLSTM within "
          "1e-5, of the definition; the fused float ops and attention within 1e-5 of ONNX Runtime")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
