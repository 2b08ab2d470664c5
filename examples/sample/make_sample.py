#!/usr/bin/python3
"""Builds Kiln's built-in sample: a small residual CNN in ONNX (seeded random
weights), an input, and the expected output computed independently with
NumPy. Usage: make_sample.py OUT_DIR"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def conv2d(x, w, b, pad):
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = h + 2 * pad - kh + 1, wd + 2 * pad - kw + 1
    cols = np.empty((n, c, kh, kw, oh, ow), dtype=np.float64)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j] = xp[:, :, i:i + oh, j:j + ow]
    y = np.einsum("nckhij,ockh->noij", cols, w.astype(np.float64))
    return y + b.reshape(1, -1, 1, 1)


def batchnorm(x, s, b, m, v, eps=1e-5):
    sh = (1, -1, 1, 1)
    return (x - m.reshape(sh)) / np.sqrt(v.reshape(sh) + eps) * s.reshape(sh) + b.reshape(sh)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "sample"
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(0)
    f32 = np.float32
    w = {
        "c1_w": rng.normal(0, 0.3, (16, 3, 3, 3)).astype(f32), "c1_b": rng.normal(0, 0.1, 16).astype(f32),
        "bn_s": rng.uniform(0.5, 1.5, 16).astype(f32), "bn_b": rng.normal(0, 0.1, 16).astype(f32),
        "bn_m": rng.normal(0, 0.1, 16).astype(f32), "bn_v": rng.uniform(0.5, 1.5, 16).astype(f32),
        "c2_w": rng.normal(0, 0.1, (16, 16, 3, 3)).astype(f32), "c2_b": rng.normal(0, 0.1, 16).astype(f32),
        "fc_w": rng.normal(0, 0.3, (10, 16)).astype(f32), "fc_b": rng.normal(0, 0.1, 10).astype(f32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "c1_w", "c1_b"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "bn_s", "bn_b", "bn_m", "bn_v"], ["bn1"], name="bn1"),
        helper.make_node("Relu", ["bn1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "c2_w", "c2_b"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "p1"], ["res"], name="residual"),
        helper.make_node("Relu", ["res"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes, "kiln_sample_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 10])],
        [numpy_helper.from_array(v, k) for k, v in w.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="kiln-sample")
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(out, "sample.onnx"))

    x = rng.uniform(-1, 1, (1, 3, 32, 32)).astype(f32)
    np.save(os.path.join(out, "input.npy"), x)
    # Independent NumPy reference (float64).
    h = np.maximum(batchnorm(conv2d(x, w["c1_w"], w["c1_b"], 1), w["bn_s"], w["bn_b"], w["bn_m"], w["bn_v"]), 0)
    p = h.reshape(1, 16, 16, 2, 16, 2).max(axis=(3, 5))
    r = np.maximum(conv2d(p, w["c2_w"], w["c2_b"], 1) + p, 0)
    logits = r.mean(axis=(2, 3)) @ w["fc_w"].T.astype(np.float64) + w["fc_b"]
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    np.save(os.path.join(out, "expected.npy"), (e / e.sum(axis=1, keepdims=True)).astype(f32))
    print(f"sample written to {out}/ (sample.onnx, input.npy, expected.npy)")


if __name__ == "__main__":
    main()
