#!/usr/bin/python3
"""Writes the seed corpora of Kiln's fuzz targets (tests/fuzz/README.md):

  OUT/onnx/  small ONNX models (onnx.helper), one per pattern the compiler
             treats specially (fusions, folding, views, dynamic extents, If,
             data-dependent rank, shape arithmetic on data-dependent counts)
  OUT/kiln/  those models compiled by `kiln compile`, some with external
             weights (in OUT/kiln_weights)
  OUT/npy/   .npy files: dtypes, header versions 1-3, orders, empty, scalar
  OUT/meta/  meta.json of stores written by compiles with --external-weight 1
             and 2, and entries for fuzz_meta's fixed store (see fuzz_meta.cc)

Usage: make_seeds.py --kiln PATH --out DIR   (Debian's /usr/bin/python3:
numpy and onnx)
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def model(nodes, inputs, outputs, inits=(), opset=13, name="g", ms=False):
    g = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)] +
                          ([helper.make_opsetid("com.microsoft", 1)] if ms else []))
    m.ir_version = 8
    return m


def models():
    rng = np.random.default_rng(0)
    r = lambda *s: rng.standard_normal(s).astype(np.float32)
    out = {}
    out["relu"] = model([helper.make_node("Relu", ["x"], ["y"], name="r")],
                        [vi("x", F, [1, 4])], [vi("y", F, [1, 4])])
    out["conv_relu_pool"] = model(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"], name="relu"),
         helper.make_node("MaxPool", ["r"], ["y"], name="pool", kernel_shape=[2, 2], strides=[2, 2])],
        [vi("x", F, [1, 2, 6, 6])], [vi("y", F, [1, 3, 3, 3])],
        [init("w", r(3, 2, 3, 3)), init("b", r(3))])
    out["conv_bn"] = model(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[1, 1]),
         helper.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["y"], name="bn")],
        [vi("x", F, [1, 2, 3, 3])], [vi("y", F, [1, 2, 3, 3])],
        [init("w", r(2, 2, 1, 1)), init("s", r(2)), init("bb", r(2)), init("m", r(2)),
         init("v", np.abs(r(2)) + 1)])
    out["matmul_add"] = model(
        [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
         helper.make_node("Add", ["m", "b"], ["a"], name="add"),
         helper.make_node("Softmax", ["a"], ["y"], name="sm", axis=1)],
        [vi("x", F, [2, 3])], [vi("y", F, [2, 4])], [init("w", r(3, 4)), init("b", r(4))])
    out["shape_chain"] = model(
        [helper.make_node("Shape", ["x"], ["s"], name="shape"),
         helper.make_node("Gather", ["s", "i0"], ["d0"], name="gather", axis=0),
         helper.make_node("Concat", ["d0", "m1"], ["t"], name="concat", axis=0),
         helper.make_node("Reshape", ["x", "t"], ["y"], name="reshape")],
        [vi("x", F, [2, 3, 4])], [vi("y", F, [2, 12])],
        [init("i0", np.array([0], np.int64)), init("m1", np.array([-1], np.int64))])
    out["transpose_slice_concat"] = model(
        [helper.make_node("Transpose", ["x"], ["t"], name="tr", perm=[1, 0]),
         helper.make_node("Slice", ["t", "st", "en"], ["s"], name="slice"),
         helper.make_node("Concat", ["s", "s"], ["c"], name="cat", axis=0),
         helper.make_node("ReduceMean", ["c"], ["y"], name="mean", axes=[1], keepdims=0)],
        [vi("x", F, [3, 4])], [vi("y", F, [4])],
        [init("st", np.array([1], np.int64)), init("en", np.array([3], np.int64))])
    out["gather_cast_where"] = model(
        [helper.make_node("Gather", ["emb", "ids"], ["g"], name="gather", axis=0),
         helper.make_node("Greater", ["g", "zero"], ["p"], name="gt"),
         helper.make_node("Where", ["p", "g", "zero"], ["w"], name="where"),
         helper.make_node("Cast", ["w"], ["y"], name="cast", to=TensorProto.INT32)],
        [vi("ids", I64, [2, 3])], [vi("y", TensorProto.INT32, [2, 3, 4])],
        [init("emb", r(5, 4)), init("zero", np.array(0, np.float32))])
    out["nonzero"] = model(
        [helper.make_node("NonZero", ["x"], ["nz"], name="nz"),
         helper.make_node("Transpose", ["nz"], ["y"], name="tr", perm=[1, 0])],
        [vi("x", F, [2, 3])], [vi("y", I64, [None, 2])])
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"], name="then_relu")], "then",
                               [], [vi("t", F, [1, 4])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"], name="else_neg")], "else",
                               [], [vi("e", F, [1, 4])])
    out["if_runtime"] = model(
        [helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
         helper.make_node("Greater", ["s", "zero"], ["c"], name="gt"),
         helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_g, else_branch=else_g)],
        [vi("x", F, [1, 4])], [vi("y", F, [1, 4])], [init("zero", np.array(0, np.float32))])
    # Branches of different rank: the If's output, and the Relu after it,
    # get rank alternatives ([2,3] or [6]); Shape of it a data-dependent extent.
    then_g = helper.make_graph([helper.make_node("Identity", ["x"], ["t"], name="then_id")], "then",
                               [], [vi("t", F, [2, 3])])
    else_g = helper.make_graph([helper.make_node("Reshape", ["x", "flat"], ["e"], name="else_flat")], "else",
                               [], [vi("e", F, [6])], [init("flat", np.array([-1], np.int64))])
    out["if_rank"] = model(
        [helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
         helper.make_node("Greater", ["s", "zero"], ["c"], name="gt"),
         helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_g, else_branch=else_g),
         helper.make_node("Relu", ["y"], ["z"], name="relu"),
         helper.make_node("Shape", ["z"], ["n"], name="shape"),
         helper.make_node("ReduceMax", ["z"], ["m"], name="max", keepdims=0)],
        [vi("x", F, [2, 3])], [vi("n", I64, [None]), vi("m", F, [])], [init("zero", np.array(0, np.float32))])
    # A branch valid only where its condition holds (Squeeze of N when
    # N == 1): the compiler's probe rules it out, so it is stored lowered but
    # uncompiled, and the loader does not infer it.
    then_g = helper.make_graph([helper.make_node("Squeeze", ["x", "ax0"], ["sq"], name="then_sq"),
                                helper.make_node("Unsqueeze", ["sq", "ax0"], ["t"], name="then_unsq")], "then",
                               [], [vi("t", F, [1, 4])], [init("ax0", np.array([0], np.int64))])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"], name="else_neg")], "else",
                               [], [vi("e", F, ["N", 4])])
    out["if_squeeze_batch"] = model(
        [helper.make_node("Shape", ["x"], ["s"], name="shape"),
         helper.make_node("Gather", ["s", "zero"], ["n"], name="n", axis=0),
         helper.make_node("Equal", ["n", "one"], ["c"], name="eq"),
         helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_g, else_branch=else_g)],
        [vi("x", F, ["N", 4])], [vi("y", F, ["N", 4])],
        [init("zero", np.array(0, np.int64)), init("one", np.array(1, np.int64))])
    # TopK's K and a Reshape target from a data-dependent count (upper
    # bounds on shape arithmetic, read from memory at run time).
    out["topk_count"] = model(
        [helper.make_node("Greater", ["x", "th"], ["m"], name="gt_th"),
         helper.make_node("NonZero", ["m"], ["nz"], name="nz"),
         helper.make_node("Reshape", ["nz", "m1"], ["nzf"], name="flat"),
         helper.make_node("Gather", ["x", "nzf"], ["s"], name="pick", axis=0),
         helper.make_node("Shape", ["s"], ["ss"], name="shape"),
         helper.make_node("Concat", ["ss", "three"], ["c"], name="cat", axis=0),
         helper.make_node("ReduceMin", ["c"], ["k"], name="kmin", keepdims=1),
         helper.make_node("TopK", ["s", "k"], ["v", "i"], name="topk"),
         helper.make_node("Concat", ["k", "one"], ["t"], name="cat2", axis=0),
         helper.make_node("Reshape", ["v", "t"], ["y"], name="col")],
        [vi("x", F, [8])], [vi("y", F, [None, 1]), vi("i", I64, [None])],
        [init("th", np.array(0.5, np.float32)), init("m1", np.array([-1], np.int64)),
         init("three", np.array([3], np.int64)), init("one", np.array([1], np.int64))])
    out["pool_norm"] = model(
        [helper.make_node("AveragePool", ["x"], ["a"], name="ap", kernel_shape=[2, 2]),
         helper.make_node("InstanceNormalization", ["a", "s", "b"], ["n"], name="in"),
         helper.make_node("GlobalAveragePool", ["n"], ["y"], name="gap")],
        [vi("x", F, [1, 2, 4, 4])], [vi("y", F, [1, 2, 1, 1])], [init("s", r(2)), init("b", r(2))])
    # Shape inputs (format version 8): Reshape's target and Expand's shape
    # fed as model inputs, so those inputs carry "shape_input".
    out["shape_inputs"] = model(
        [helper.make_node("Reshape", ["x", "t"], ["r"], name="reshape"),
         helper.make_node("Expand", ["r", "e"], ["y"], name="expand")],
        [vi("x", F, [2, 3, 4]), vi("t", I64, [2]), vi("e", I64, [3])], [vi("y", F, [None, None, None])])
    # A bfloat16 graph computed in float32 (format version 9): Casts at its
    # edges, the output one carrying "kiln.round".
    BF16 = TensorProto.BFLOAT16
    out["bfloat16"] = model(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("Mul", ["r", "w"], ["y"], name="mul")],
        [vi("x", BF16, [2, 3])], [vi("y", BF16, [2, 3])],
        [onnx.helper.make_tensor("w", BF16, [3], [1.0, 2.0, -0.5])])
    # A bfloat16 convolution (format version 15): the Conv carries
    # "kiln.bf16" (a CPU with native bfloat16 rounds its operands to it).
    out["bfloat16_conv"] = model(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"], name="relu")],
        [vi("x", BF16, [1, 4, 5, 5])], [vi("y", BF16, [1, 4, 5, 5])],
        [onnx.helper.make_tensor("w", BF16, [4, 4, 3, 3], [((i * 7) % 11 - 5) / 8 for i in range(144)]),
         onnx.helper.make_tensor("b", BF16, [4], [0.5, -0.25, 1.0, 0.0])])
    # A decoder (format version 10): the layout pass runs the ConvTranspose
    # channels-last (kiln.nhwc) and the Resize and Concat on NHWC tensors
    # (permuted scales), BatchNorm folded into the ConvTranspose.
    out["decoder"] = model(
        [helper.make_node("Conv", ["x", "w0"], ["a"], name="conv0", pads=[1, 1, 1, 1]),
         helper.make_node("ConvTranspose", ["a", "wt"], ["u0"], name="up", strides=[2, 2]),
         helper.make_node("BatchNormalization", ["u0", "s", "bb", "m", "v"], ["u"], name="bn"),
         helper.make_node("Resize", ["a", "roi", "sc"], ["r"], name="resize", mode="nearest"),
         helper.make_node("Concat", ["u", "r"], ["c"], name="cat", axis=1),
         helper.make_node("Conv", ["c", "w1"], ["y"], name="conv1", kernel_shape=[1, 1])],
        [vi("x", F, [1, 2, 4, 4])], [vi("y", F, [1, 2, 8, 8])],
        [init("w0", r(3, 2, 3, 3)), init("wt", r(3, 3, 2, 2)), init("s", r(3)), init("bb", r(3)),
         init("m", r(3)), init("v", np.abs(r(3)) + 1), init("roi", np.zeros(0, np.float32)),
         init("sc", np.array([1, 1, 2, 2], np.float32)), init("w1", r(2, 6, 1, 1))])
    # GPT-2's tanh GELU (format version 11): fuse-gelu makes it a kiln.Gelu
    # with approximate="tanh".
    k = lambda name, v: init(name, np.array(v, np.float32))
    out["gelu_tanh"] = model(
        [helper.make_node("Mul", ["x", "x"], ["xx"], name="sq"),
         helper.make_node("Mul", ["x", "xx"], ["cube"], name="cube"),
         helper.make_node("Mul", ["kappa", "cube"], ["q"], name="q"),
         helper.make_node("Add", ["x", "q"], ["s"], name="s"),
         helper.make_node("Mul", ["beta", "s"], ["z"], name="z"),
         helper.make_node("Tanh", ["z"], ["t"], name="tanh"),
         helper.make_node("Add", ["one", "t"], ["a"], name="a"),
         helper.make_node("Mul", ["x", "a"], ["m"], name="m"),
         helper.make_node("Mul", ["half", "m"], ["y"], name="half")],
        [vi("x", F, [2, 3])], [vi("y", F, [2, 3])],
        [k("kappa", 0.044715), k("beta", (2 / np.pi) ** 0.5), k("one", 1.0), k("half", 0.5)])
    # A residual block (format version 12): fuse-residual gives conv2 the
    # residual `a` as input 3 (kiln.sum) and the Relu after the Add; the
    # memory plan writes its output over `a` (kiln.inplace).
    out["residual"] = model(
        [helper.make_node("Conv", ["x", "w0"], ["c0"], name="conv0", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c0"], ["a"], name="relu0"),
         helper.make_node("Conv", ["a", "w1"], ["b"], name="conv1", kernel_shape=[1, 1]),
         helper.make_node("Conv", ["b", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
         helper.make_node("Add", ["c2", "a"], ["s"], name="add"),
         helper.make_node("Relu", ["s"], ["r"], name="relu2"),
         helper.make_node("Sigmoid", ["r"], ["y"], name="sig")],
        [vi("x", F, [1, 2, 4, 4])], [vi("y", F, [1, 3, 4, 4])],
        [init("w0", r(3, 2, 3, 3)), init("w1", r(3, 3, 1, 1)), init("w2", r(3, 3, 3, 3)), init("b2", r(3))])
    # A transformer FFN (format version 12): the MatMuls take their biases
    # (kiln.bias) and the erf GELU (kiln.activation = Gelu).
    out["ffn"] = model(
        [helper.make_node("MatMul", ["x", "w1"], ["m1"], name="fc1"),
         helper.make_node("Add", ["m1", "b1"], ["a"], name="b1add"),
         helper.make_node("Div", ["a", "sqrt2"], ["d"], name="div"),
         helper.make_node("Erf", ["d"], ["e"], name="erf"),
         helper.make_node("Add", ["e", "one"], ["p"], name="p"),
         helper.make_node("Mul", ["a", "p"], ["q"], name="q"),
         helper.make_node("Mul", ["q", "half"], ["g"], name="gelu"),
         helper.make_node("MatMul", ["g", "w2"], ["m2"], name="fc2"),
         helper.make_node("Add", ["m2", "b2"], ["y"], name="b2add")],
        [vi("x", F, [2, 3, 4])], [vi("y", F, [2, 3, 4])],
        [init("w1", r(4, 6)), init("b1", r(6)), init("w2", r(6, 4)), init("b2", r(1, 1, 4)),
         init("sqrt2", np.array(2 ** 0.5, np.float32)), init("one", np.array(1, np.float32)),
         init("half", np.array(0.5, np.float32))])
    # A QDQ convolution (fuse-qdq makes it a QLinearConv, channels-last on
    # oneDNN's int8 kernel).
    U8, I8, I32 = TensorProto.UINT8, TensorProto.INT8, TensorProto.INT32
    out["qdq_conv"] = model(
        [helper.make_node("DequantizeLinear", ["x", "xs", "xzp"], ["xf"], name="dq_x"),
         helper.make_node("DequantizeLinear", ["wq", "ws", "wzp"], ["wf"], name="dq_w", axis=0),
         helper.make_node("DequantizeLinear", ["bq", "bs"], ["bf"], name="dq_b", axis=0),
         helper.make_node("Conv", ["xf", "wf", "bf"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"], name="relu"),
         helper.make_node("QuantizeLinear", ["r", "ys", "yzp"], ["y"], name="q_y")],
        [vi("x", U8, [1, 2, 4, 4])], [vi("y", U8, [1, 3, 4, 4])],
        [init("xs", np.array(0.02, np.float32)), init("xzp", np.array(128, np.uint8)),
         init("wq", (np.arange(54) % 11 - 5).astype(np.int8).reshape(3, 2, 3, 3)),
         init("ws", np.array([0.01, 0.02, 0.03], np.float32)), init("wzp", np.zeros(3, np.int8)),
         init("bq", np.array([10, -20, 30], np.int32)),
         init("bs", (np.float32(0.02) * np.array([0.01, 0.02, 0.03], np.float32)).astype(np.float32)),
         init("ys", np.array(0.05, np.float32)), init("yzp", np.array(0, np.uint8))])
    # Dynamic quantization (format version 13): fuse-integer-rescale makes
    # the ConvInteger write act(float(sum) * scale + bias) in float32
    # (kiln.rescale, inputs 4 and 5, the Relu as kiln.activation) and the
    # layout pass runs it channels-last (kiln.nhwc); x comes channels-last
    # (the Transpose cancels), so fuse-quantize-input (format version 16)
    # has it read the float32 x and quantize it itself, the
    # DynamicQuantizeLinear gone (kiln.quantize_input = 2), with w_scale as
    # input 4 (kiln.scale_by_x).
    out["dynamic_conv"] = model(
        [helper.make_node("Transpose", ["x_nhwc"], ["x"], name="to_nchw", perm=[0, 3, 1, 2]),
         helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"], name="dql"),
         helper.make_node("ConvInteger", ["xq", "wq", "xz", "wz"], ["acc"], name="ci", pads=[1, 1, 1, 1]),
         helper.make_node("Cast", ["acc"], ["f"], name="cast", to=F),
         helper.make_node("Mul", ["xs", "ws"], ["s"], name="smul"),
         helper.make_node("Mul", ["f", "s"], ["m"], name="rescale"),
         helper.make_node("Add", ["m", "b"], ["a"], name="bias"),
         helper.make_node("Relu", ["a"], ["y"], name="relu")],
        [vi("x_nhwc", F, [1, 4, 4, 2])], [vi("y", F, [1, 3, 4, 4])],
        [init("wq", (np.arange(54) % 11 - 5).astype(np.int8).reshape(3, 2, 3, 3)), init("wz", np.array(0, np.int8)),
         init("ws", np.array([0.01, 0.02, 0.03], np.float32).reshape(3, 1, 1)),
         init("b", np.array([0.5, -0.25, 1.0], np.float32).reshape(3, 1, 1))])
    # A BatchNormalization no convolution absorbs runs channels-last with the
    # Relu after it (kiln.nhwc, kiln.activation: format version 14); a
    # Dropout whose mask is an output stays
    # (its ratio and training_mode inputs reach the verifier).
    out["bn_nhwc_dropout"] = model(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"], name="relu"),
         helper.make_node("BatchNormalization", ["r", "s", "bb", "m", "v"], ["n"], name="bn"),
         helper.make_node("Relu", ["n"], ["rn"], name="relu2"),
         helper.make_node("Dropout", ["rn", "ratio", "train"], ["y", "mask"], name="drop")],
        [vi("x", F, [1, 2, 4, 4])], [vi("y", F, [1, 3, 4, 4]), vi("mask", TensorProto.BOOL, [1, 3, 4, 4])],
        [init("w", (np.arange(54) % 7 - 3).astype(np.float32).reshape(3, 2, 3, 3)),
         init("s", np.array([1.0, 0.5, 2.0], np.float32)), init("bb", np.array([0.1, -0.2, 0.3], np.float32)),
         init("m", np.array([0.0, 0.5, -0.5], np.float32)), init("v", np.array([1.0, 2.0, 0.5], np.float32)),
         init("ratio", np.array(0.25, np.float32)), init("train", np.array(False))])
    # ONNX Runtime's BERT ops (com.microsoft): EmbedLayerNormalization ->
    # Attention (its mask_index, unidirectional, past / present) ->
    # SkipLayerNormalization; and DynamicQuantizeLinear -> QAttention.
    I32 = TensorProto.INT32
    msd = dict(domain="com.microsoft")
    out["bert_contrib"] = model(
        [helper.make_node("EmbedLayerNormalization", ["ids", "", "word", "pos", "", "g", "b", "mask"],
                          ["e", "mask_index"], name="emb", epsilon=1e-12, **msd),
         helper.make_node("Attention", ["e", "w", "wb", "mask_index", "past"], ["a", "present"], name="att",
                          num_heads=2, unidirectional=1, **msd),
         helper.make_node("SkipLayerNormalization", ["a", "e", "g", "b"], ["y"], name="skipln", **msd),
         helper.make_node("DynamicQuantizeLinear", ["y"], ["yq", "ys", "yz"], name="dql"),
         helper.make_node("QAttention", ["yq", "wq", "wb", "ys", "wqs", "", "yz"], ["z"], name="qatt",
                          num_heads=2, **msd)],
        [vi("ids", I32, [2, 3]), vi("mask", I32, [2, 3]), vi("past", F, [2, 2, 2, 1, 2])],
        [vi("z", F, [2, 3, 4]), vi("present", F, [2, 2, 2, 4, 2])],
        [init("word", r(5, 4)), init("pos", r(3, 4)), init("g", r(4)), init("b", r(4)), init("w", r(4, 12)),
         init("wb", r(12)), init("wq", (np.arange(48) % 9 - 4).astype(np.int8).reshape(4, 12)),
         init("wqs", np.array(0.05, np.float32))], ms=True)
    # MultiHeadAttention: cross-attention with bias and a [B, T] key mask,
    # then self-attention with past_key / past_value and the presents.
    out["mha_contrib"] = model(
        [helper.make_node("MultiHeadAttention", ["q", "k", "v", "mb", "kmask"], ["c"], name="cross", num_heads=2,
                          **msd),
         helper.make_node("MultiHeadAttention", ["c", "c", "c", "", "", "", "pk", "pv"], ["y", "prk", "prv"],
                          name="self", num_heads=2, unidirectional=1, **msd)],
        [vi("q", F, [2, 3, 4]), vi("k", F, [2, 5, 4]), vi("v", F, [2, 5, 4]), vi("kmask", I32, [2, 5]),
         vi("pk", F, [2, 2, 1, 2]), vi("pv", F, [2, 2, 1, 2])],
        [vi("y", F, [2, 3, 4]), vi("prk", F, [2, 2, 4, 2]), vi("prv", F, [2, 2, 4, 2])],
        [init("mb", r(12))], ms=True)
    return out


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


# fuzz_meta.cc's fixed store: blob A (1000 bytes), blob B (100 bytes).
BLOB_A = bytes(i * 7 % 251 for i in range(1000))
BLOB_B = bytes((i * 13 + 5) % 256 for i in range(100))


def meta_doc(entries):
    return json.dumps({"format": "kiln-weights", "version": 1, "weights": entries}, indent=1).encode()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    out = os.path.abspath(a.out)
    shutil.rmtree(out, ignore_errors=True)
    for d in ("onnx", "kiln", "npy", "meta", "work"):
        os.makedirs(os.path.join(out, d))
    work = os.path.join(out, "work")

    def kiln(*args):
        p = subprocess.run([a.kiln, *map(str, args)], capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            sys.exit(f"make_seeds: kiln {' '.join(map(str, args))} failed:\n{p.stdout}{p.stderr}")

    for name, m in models().items():
        onnx.checker.check_model(m)
        p = os.path.join(out, "onnx", name + ".onnx")
        onnx.save(m, p)
        kiln("compile", "--model", p, "--output", os.path.join(out, "kiln", name + ".kiln"))
    # Placement (format version 3): compiled for a target lacking some ops,
    # so CPU-placed nodes, copies and a host arena reach the verifier.
    for name, lack in (("conv_relu_pool", "MaxPool+Relu"), ("matmul_add", "Add")):
        kiln("compile", "--model", os.path.join(out, "onnx", name + ".onnx"),
             "--output", os.path.join(out, "kiln", f"placed_{name}.kiln"), "--target", f"sim:lack={lack},no_fusion")
    # Symbols (format version 6): dim 0 of matmul_add's x named "batch",
    # fixed by --input-shape, so x carries "sym" and the graph "symbols".
    sym = models()["matmul_add"]
    sym.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    p = os.path.join(work, "batch_matmul_add.onnx")
    onnx.save(sym, p)
    kiln("compile", "--model", p, "--output", os.path.join(out, "kiln", "symbols_matmul_add.kiln"),
         "--input-shape", "x:2,3")
    # Ranges and gears (format version 7): batch bounded to 1..4, gears 2 and
    # 4, so the graph carries "gears" and "gears_only" and x a symbolic dim.
    kiln("compile", "--model", p, "--output", os.path.join(out, "kiln", "gears_matmul_add.kiln"),
         "--input-shape", "x:1..4,3|2,3|4,3")
    # .kiln files with external weights (FileConstant nodes); fuzz_kiln loads
    # them with OUT/kiln_weights as the weight directory.
    # Different models per mode, so the store holds both kinds of files.
    for mode, names in ((2, ("conv_relu_pool", "conv_bn")), (1, ("matmul_add", "pool_norm"))):
        for name in names:
            kiln("compile", "--model", os.path.join(out, "onnx", name + ".onnx"),
                 "--output", os.path.join(out, "kiln", f"ext{mode}_{name}.kiln"), "--external-weight", mode,
                 "--external-weight-dir", os.path.join(out, "kiln_weights"), "--model-name", name)
    # meta.json of real stores (modes 1 and 2, two models into one store).
    for mode in (1, 2):
        store = os.path.join(work, f"store{mode}")
        for name in ("conv_relu_pool", "matmul_add"):
            kiln("compile", "--model", os.path.join(out, "onnx", name + ".onnx"),
                 "--output", os.path.join(work, f"{name}_{mode}.kiln"), "--external-weight", mode,
                 "--external-weight-dir", store, "--model-name", name)
        shutil.copy(os.path.join(store, "meta.json"), os.path.join(out, "meta", f"compiled_mode{mode}.json"))
    ha, hb = hashlib.sha256(BLOB_A).hexdigest(), hashlib.sha256(BLOB_B).hexdigest()
    rec = lambda f, o, n: {"file": f, "offset": o, "length": n}
    write(os.path.join(out, "meta", "store_single.json"),
          meta_doc({ha: rec("weight_" + ha, 0, 1000), hb: rec("weight_" + hb, 0, 100)}))
    write(os.path.join(out, "meta", "store_combined.json"),
          meta_doc({ha: rec("m_weight_combined", 0, 1000), hb: rec("m_weight_combined", 1024, 100)}))
    write(os.path.join(out, "meta", "store_mixed.json"),
          meta_doc({ha: rec("m_weight_combined", 0, 1000), hb: rec("weight_" + hb, 0, 100)}))
    write(os.path.join(out, "meta", "empty.json"), meta_doc({}))
    # .npy files.
    npy = lambda n: os.path.join(out, "npy", n + ".npy")
    rng = np.random.default_rng(1)
    np.save(npy("f32_2x3"), rng.standard_normal((2, 3)).astype(np.float32))
    np.save(npy("i64_4"), np.arange(4, dtype=np.int64))
    np.save(npy("u8_scalar"), np.uint8(7))
    np.save(npy("bool_2x2"), np.array([[True, False], [False, True]]))
    np.save(npy("f16_3"), np.array([1, 2, 3], np.float16))
    np.save(npy("i32_empty"), np.zeros((0, 3), np.int32))
    np.save(npy("f64_1x1x2"), np.ones((1, 1, 2), np.float64))
    np.save(npy("f32_big_endian"), np.arange(3, dtype=">f4"))
    np.save(npy("f32_fortran"), np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)))
    for ver in ((2, 0), (3, 0)):
        with open(npy(f"v{ver[0]}_i8"), "wb") as f:
            np.lib.format.write_array(f, np.arange(5, dtype=np.int8), version=ver)
    shutil.rmtree(work)
    counts = {d: len(os.listdir(os.path.join(out, d))) for d in ("onnx", "kiln", "npy", "meta")}
    print("make_seeds:", ", ".join(f"{k} {v}" for k, v in counts.items()))


if __name__ == "__main__":
    main()
