#!/usr/bin/python3
"""Models for the C API test (tests/capi/capi_test.c) and the CLI custom-op
package test: written with ONNX's helper, values chosen so results can be
derived by hand.

  add.onnx      y = x + w, x float32[2, 3] input, w = [0, 0.5, 1, 1.5, 2, 2.5]
  batch.onnx    add.onnx with x and y declared float32[batch, 3] (dim_param
                "batch"; compiled with x's shape fixed to [2, 3])
  open.onnx     y = Relu(x), x and y float32[batch, 3] (compiled with batch
                left symbolic)
  custom.onnx   y = PkgDouble(x + w) (domain com.example, the test package's
                op, which doubles its input): y = 2 (x + w)

Usage: make_models.py OUT_DIR
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3) * 0.5, "w")
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])

g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="add")], "add", [x], [y], [w])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), os.path.join(out, "add.onnx"))

xb = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])
yb = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])
g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="add")], "batch", [xb], [yb], [w])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), os.path.join(out, "batch.onnx"))

g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "open", [xb], [yb])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), os.path.join(out, "open.onnx"))

g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["s"], name="add"),
                       helper.make_node("PkgDouble", ["s"], ["y"], name="double", domain="com.example")],
                      "custom", [x], [y], [w])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]),
          os.path.join(out, "custom.onnx"))

# Reshape's target as a model input (a shape input).
g = helper.make_graph([helper.make_node("Reshape", ["x", "t"], ["y"], name="reshape")], "reshape",
                      [x, helper.make_tensor_value_info("t", TensorProto.INT64, [2])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), os.path.join(out, "reshape.onnx"))

# If of two ranks: c picks y = x (float32[2, 3]) or Flatten-like Reshape(x, [-1]) ([6]).
then_g = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [],
                           [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
else_g = helper.make_graph([helper.make_node("Reshape", ["x", "flat"], ["e"])], "else", [],
                           [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)],
                           [numpy_helper.from_array(np.array([-1], np.int64), "flat")])
g = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)], "if_rank",
                      [x, helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), os.path.join(out, "if_rank.onnx"))

# Range(0, int(max(x))) of x[100]: a shape computed from data with no bound the
# model proves (a provisional bound, raised by the runs that need more).
g = helper.make_graph([helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
                       helper.make_node("Cast", ["m"], ["lim"], to=TensorProto.INT64),
                       helper.make_node("Range", ["zero", "lim", "one"], ["y"])], "range_max",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [100])],
                      [helper.make_tensor_value_info("y", TensorProto.INT64, ["n"])],
                      [numpy_helper.from_array(np.array(0, np.int64), "zero"),
                       numpy_helper.from_array(np.array(1, np.int64), "one")])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), os.path.join(out, "range_max.onnx"))

# The input the CLI test runs with (the C test has the same values).
np.save(os.path.join(out, "x.npy"), np.array([[1, -2, 3], [-4, 5, -6]], dtype=np.float32))

# A small CNN (Conv, Relu, GlobalAveragePool, Flatten, Gemm) for the Python
# quickstart example (examples/python/quickstart.py).
rng = np.random.default_rng(0)
cw = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.2, "cw")
cb = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32) * 0.1, "cb")
fw = numpy_helper.from_array(rng.standard_normal((10, 8)).astype(np.float32) * 0.3, "fw")
fb = numpy_helper.from_array(np.zeros(10, np.float32), "fb")
g = helper.make_graph(
    [helper.make_node("Conv", ["input", "cw", "cb"], ["c"], pads=[1, 1, 1, 1]),
     helper.make_node("Relu", ["c"], ["r"]),
     helper.make_node("GlobalAveragePool", ["r"], ["p"]),
     helper.make_node("Flatten", ["p"], ["f"]),
     helper.make_node("Gemm", ["f", "fw", "fb"], ["logits"], transB=1)],
    "cnn", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 16, 16])],
    [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], [cw, cb, fw, fb])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), os.path.join(out, "cnn.onnx"))
