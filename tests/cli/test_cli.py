#!/usr/bin/python3
"""The kiln CLI on bad input: every case must exit 1 with a clear message
naming the culprit, never crash (signal) and never leave a broken file."""
import argparse
import json
import itertools
import os
import subprocess
import sys
import unittest

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

KILN = None
WORK = None


def kiln(*args):
    p = subprocess.run([KILN, *map(str, args)], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


def read(path):
    with open(path, "rb") as f:
        return f.read()


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def save(model, name):
    path = os.path.join(WORK, name)
    onnx.save(model, path)
    return path


def relu_model(shape=(1, 4), dim_param=None, extra_opsets=()):
    dims = [dim_param if (dim_param and i == 0) else d for i, d in enumerate(shape)]
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)])
    ops = [helper.make_opsetid("", 13)] + [helper.make_opsetid(d, 1) for d in extra_opsets]
    return helper.make_model(g, opset_imports=ops)


class CliBadInput(unittest.TestCase):
    def assertCleanError(self, rc, out, *needles):
        self.assertEqual(rc, 1, f"expected exit 1 (clean error), got {rc}:\n{out}")
        self.assertIn("error", out)
        for n in needles:
            self.assertIn(n, out)

    def test_malformed_onnx(self):
        path = os.path.join(WORK, "garbage.onnx")
        with open(path, "wb") as f:
            f.write(os.urandom(1000))
        rc, out = kiln("compile", "--model", path, "--output", os.path.join(WORK, "g.kiln"))
        self.assertCleanError(rc, out, "garbage.onnx")
        self.assertFalse(os.path.exists(os.path.join(WORK, "g.kiln")))

    def test_truncated_onnx(self):
        good = save(relu_model(), "trunc_src.onnx")
        with open(good, "rb") as f:
            data = f.read()
        path = os.path.join(WORK, "trunc.onnx")
        with open(path, "wb") as f:
            f.write(data[: len(data) // 2])
        rc, out = kiln("compile", "--model", path, "--output", os.path.join(WORK, "t.kiln"))
        self.assertCleanError(rc, out, "trunc.onnx")

    def test_missing_model(self):
        rc, out = kiln("compile", "--model", os.path.join(WORK, "nope.onnx"), "--output", os.path.join(WORK, "n.kiln"))
        self.assertCleanError(rc, out, "nope.onnx")

    def test_usage_errors_exit_1_and_help_exits_0(self):
        # A missing required option, an unknown flag, a value outside its
        # range: status 1 with the option named (CLI11's own statuses are
        # 106, 109, 105). --help is not an error.
        rc, out = kiln("compile", "--output", os.path.join(WORK, "u1.kiln"))
        self.assertCleanError(rc, out, "--model")
        rc, out = kiln("compile", "--model", "m.onnx", "--output", "o.kiln", "--bogus-flag")
        self.assertCleanError(rc, out, "--bogus-flag")
        rc, out = kiln("bench", os.path.join(WORK, "none.kiln"), "--threads", "0")
        self.assertCleanError(rc, out, "--threads")
        rc, out = kiln("compile", "--help")
        self.assertEqual(rc, 0, out)
        self.assertIn("--model", out)

    def test_unsupported_ops_reported_together(self):
        g = helper.make_graph(
            [helper.make_node("Relu", ["x"], ["a"], name="ok"),
             helper.make_node("Det", ["a"], ["b"], name="first_bad"),
             helper.make_node("MyOp", ["b"], ["y"], name="second_bad", domain="com.example")],
            "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.example", 1)])
        rc, out = kiln("compile", "--model", save(m, "unsup.onnx"), "--output", os.path.join(WORK, "u.kiln"))
        self.assertCleanError(rc, out, "2 unsupported", "Det", "first_bad", "MyOp", "com.example", "second_bad")

    def test_unused_domain_import_is_fine(self):
        path = save(relu_model(extra_opsets=["com.microsoft", "ai.onnx.ml"]), "unused_domain.onnx")
        rc, out = kiln("compile", "--model", path, "--output", os.path.join(WORK, "ud.kiln"))
        self.assertEqual(rc, 0, out)

    def test_symbolic_dims_and_input_shape(self):
        path = save(relu_model(dim_param="batch"), "dyn.onnx")
        out_path = os.path.join(WORK, "dyn.kiln")
        # Without --input-shape the dim stays symbolic: one .kiln runs at any batch.
        rc, out = kiln("compile", "--model", path, "--output", out_path)
        self.assertEqual(rc, 0, out)
        rc, out = kiln("inspect", out_path)
        self.assertEqual(rc, 0, out)
        self.assertIn("x float32[batch,4]", out)
        self.assertIn("y float32[?,4]", out)
        for batch in (1, 3, 7):
            x = np.linspace(-1, 1, batch * 4, dtype=np.float32).reshape(batch, 4)
            np.save(os.path.join(WORK, "dyn_x.npy"), x)
            rc, out = kiln("run", out_path, "--input", "x=" + os.path.join(WORK, "dyn_x.npy"),
                           "--output-dir", os.path.join(WORK, "dyn_o"))
            self.assertEqual(rc, 0, out)
            np.testing.assert_array_equal(np.load(os.path.join(WORK, "dyn_o", "output_0.npy")), np.maximum(x, 0))
        # An input not given has no shape to take.
        rc, out = kiln("run", out_path)
        self.assertCleanError(rc, out, "'x'", "symbolic", "--input")
        # A wrong static dim is named.
        np.save(os.path.join(WORK, "dyn_bad.npy"), np.zeros((2, 5), np.float32))
        rc, out = kiln("run", out_path, "--input", "x=" + os.path.join(WORK, "dyn_bad.npy"))
        self.assertCleanError(rc, out, "'x'", "[2,5]")
        # A model that admits one extent of a named dim says what was probed.
        g = helper.make_graph([helper.make_node("Mul", ["x", "c"], ["y"], name="mul")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.ones((2, 8), np.float32), "c")])
        mulc = save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), "mulc.onnx")
        rc, out = kiln("compile", "--model", mulc, "--output", os.path.join(WORK, "mulc.kiln"))
        self.assertCleanError(rc, out, "'mul'", "left symbolic", "'x' dim 0 ('batch' = 64)", "--input-shape")
        # An input of unknown rank still needs --input-shape.
        g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
        norank = save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), "norank.onnx")
        rc, out = kiln("compile", "--model", norank, "--output", os.path.join(WORK, "norank.kiln"))
        self.assertCleanError(rc, out, "'x'", "unknown rank", "--input-shape")
        rc, out = kiln("compile", "--model", path, "--output", out_path, "--input-shape", "x:3,4")
        self.assertEqual(rc, 0, out)
        rc, out = kiln("inspect", out_path)
        self.assertIn("x float32[batch=3,4]", out)
        rc, out = kiln("compile", "--model", path, "--output", out_path, "--input-shape", "nope:3,4")
        self.assertCleanError(rc, out, "'nope'", "not an input")
        rc, out = kiln("compile", "--model", path, "--output", out_path, "--input-shape", "x:3,5")
        self.assertCleanError(rc, out, "dim 1", "fixed to 4")
        rc, out = kiln("compile", "--model", path, "--output", out_path, "--input-shape", "x:3,a")
        self.assertCleanError(rc, out, "'a'")

    def test_ranges_and_gears(self):
        path = save(relu_model(dim_param="batch"), "gears.onnx")
        out_path = os.path.join(WORK, "gears.kiln")
        rc, out = kiln("compile", "--model", path, "--output", out_path, "--input-shape", "x:1..6,4|2,4|5,4")
        self.assertEqual(rc, 0, out)
        rc, out = kiln("inspect", out_path)
        self.assertEqual(rc, 0, out)
        self.assertIn("x float32[batch=1..6,4]", out)
        self.assertIn("gears: [2,4] | [5,4] (planned at load)", out)
        x_path = os.path.join(WORK, "gears_x.npy")
        for batch, gear in ((5, True), (3, False)):
            x = np.linspace(-1, 1, batch * 4, dtype=np.float32).reshape(batch, 4)
            np.save(x_path, x)
            rc, out = kiln("run", out_path, "--input", "x=" + x_path, "--output-dir", os.path.join(WORK, "gears_o"))
            self.assertEqual(rc, 0, out)
            np.testing.assert_array_equal(np.load(os.path.join(WORK, "gears_o", "output_0.npy")), np.maximum(x, 0))
            rc, out = kiln("bench", out_path, "--input", "x=" + x_path, "--runs", "3", "--json")
            self.assertEqual(rc, 0, out)
            j = json.loads(out)
            self.assertEqual(j["gear"], gear, out)
            self.assertEqual(j["plan_ms"] == 0, gear, out)
        np.save(x_path, np.zeros((7, 4), np.float32))
        rc, out = kiln("run", out_path, "--input", "x=" + x_path)
        self.assertCleanError(rc, out, "input 0 'x' dim 0 (symbol 'batch') is 7, outside its range 1..6")
        # Gears only: other shapes are refused, naming the gears.
        rc, out = kiln("compile", "--model", path, "--output", out_path, "--input-shape", "x:2,4|5,4")
        self.assertEqual(rc, 0, out)
        np.save(x_path, np.zeros((3, 4), np.float32))
        rc, out = kiln("run", out_path, "--input", "x=" + x_path)
        self.assertCleanError(rc, out, "input shapes [3,4] are not one of the gears", "([2,4] | [5,4])")
        rc, out = kiln("compile", "--model", path, "--output", out_path, "--input-shape", "x:1..2,4|3..4,4")
        self.assertCleanError(rc, out, "'x' has two ranges")

    def test_bad_attribute_names_node(self):
        g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], name="c1", strides=[0, 1])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.ones((1, 1, 3, 3), np.float32), "w")])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        rc, out = kiln("compile", "--model", save(m, "badattr.onnx"), "--output", os.path.join(WORK, "b.kiln"))
        self.assertCleanError(rc, out, "c1", "strides")

    def test_unimplemented_op_version_named(self):
        g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="old_relu")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 5)])  # Relu-1 (consumed_inputs era)
        rc, out = kiln("compile", "--model", save(m, "oldrelu.onnx"), "--output", os.path.join(WORK, "o.kiln"))
        self.assertCleanError(rc, out, "Relu version 1", "old_relu", "implements versions")

    def test_reshape_element_count_mismatch_named(self):
        g = helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["y"], name="bad_reshape")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array([4, 2], np.int64), "s")])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        rc, out = kiln("compile", "--model", save(m, "badreshape.onnx"), "--output", os.path.join(WORK, "r.kiln"))
        self.assertCleanError(rc, out, "bad_reshape")

    def test_attribute_value_outside_spec_named(self):
        g = helper.make_graph([helper.make_node("DepthToSpace", ["x"], ["y"], name="d2s", blocksize=2, mode="XYZ")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        rc, out = kiln("compile", "--model", save(m, "d2s.onnx"), "--output", os.path.join(WORK, "d.kiln"))
        self.assertCleanError(rc, out, "d2s", "mode")

    def test_nms_bad_attribute_and_boxes_named(self):
        def nms(boxes_shape, center):
            g = helper.make_graph(
                [helper.make_node("NonMaxSuppression", ["b", "s", "m"], ["sel"], name="nms1",
                                  center_point_box=center)], "g",
                [helper.make_tensor_value_info("b", TensorProto.FLOAT, boxes_shape),
                 helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, 2, 6])],
                [helper.make_tensor_value_info("sel", TensorProto.INT64, None)],
                [numpy_helper.from_array(np.array([3], np.int64), "m")])
            return helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)])
        rc, out = kiln("compile", "--model", save(nms([1, 6, 4], 2), "nms_c.onnx"), "--output", os.path.join(WORK, "n.kiln"))
        self.assertCleanError(rc, out, "NonMaxSuppression node 'nms1'", "'center_point_box' = 2", "expected 0 or 1")
        rc, out = kiln("compile", "--model", save(nms([1, 6, 5], 0), "nms_b.onnx"), "--output", os.path.join(WORK, "n.kiln"))
        self.assertCleanError(rc, out, "NonMaxSuppression node 'nms1'", "boxes", "[1,6,5]")
        # A good one: the bound is 1 batch x 2 classes x min(3, 6) = 6 rows, data-dependent.
        k = os.path.join(WORK, "nms_ok.kiln")
        rc, out = kiln("compile", "--model", save(nms([1, 6, 4], 0), "nms_ok.onnx"), "--output", k)
        self.assertEqual(rc, 0, out)
        rc, out = kiln("inspect", k)
        self.assertIn("sel int64[<=6,3]", out)

    def test_run_input_errors(self):
        path = save(relu_model(), "relu.onnx")
        k = os.path.join(WORK, "relu.kiln")
        self.assertEqual(kiln("compile", "--model", path, "--output", k)[0], 0)
        good = os.path.join(WORK, "in_good.npy")
        np.save(good, np.ones((1, 4), np.float32))
        rc, out = kiln("run", k, "--input", f"x={good}", "--output-dir", os.path.join(WORK, "o"))
        self.assertEqual(rc, 0, out)
        np.testing.assert_array_equal(np.load(os.path.join(WORK, "o", "output_0.npy")), np.ones((1, 4), np.float32))
        bad_shape = os.path.join(WORK, "in_shape.npy")
        np.save(bad_shape, np.ones((2, 4), np.float32))
        self.assertCleanError(*kiln("run", k, "--input", f"x={bad_shape}"), "expected shape [1,4]", "[2,4]")
        bad_type = os.path.join(WORK, "in_type.npy")
        np.save(bad_type, np.ones((1, 4), np.float64))
        self.assertCleanError(*kiln("run", k, "--input", f"x={bad_type}"), "float32", "float64")
        self.assertCleanError(*kiln("run", k, "--input", f"y={good}"), "'y'", "not an input")
        self.assertCleanError(*kiln("run", k, "--input", f"3={good}"), "index 3", "1 input")
        self.assertCleanError(*kiln("run", k, "--input", "x=/nonexistent.npy"), "/nonexistent.npy")
        junk = os.path.join(WORK, "junk.npy")
        with open(junk, "wb") as f:
            f.write(b"not numpy")
        self.assertCleanError(*kiln("run", k, "--input", f"x={junk}"), "junk.npy")

    def test_corrupted_kiln(self):
        path = save(relu_model(), "relu2.onnx")
        k = os.path.join(WORK, "relu2.kiln")
        self.assertEqual(kiln("compile", "--model", path, "--output", k)[0], 0)
        data = bytearray(read(k))
        bad = os.path.join(WORK, "bad.kiln")
        for i in list(range(0, 128, 7)) + [200, len(data) - 1]:
            d = bytearray(data)
            d[i] ^= 0xFF
            write(bad, d)
            for cmd in ("run", "inspect"):
                rc, out = kiln(cmd, bad)
                self.assertCleanError(rc, out, "bad.kiln")
        write(bad, data[:100])
        self.assertCleanError(*kiln("run", bad), "bad.kiln")
        self.assertCleanError(*kiln("run", os.path.join(WORK, "missing.kiln")), "missing.kiln")

    def external_model(self, subdir, location, make_file=True):
        """Gemm y = x W + b with W stored as ONNX external data at `location`."""
        d = os.path.join(WORK, subdir)
        os.makedirs(d, exist_ok=True)
        w = np.arange(12, dtype=np.float32).reshape(3, 4)
        wt = numpy_helper.from_array(w, "w")
        wt.ClearField("raw_data")
        wt.data_location = TensorProto.EXTERNAL
        for k, v in (("location", location), ("offset", "0"), ("length", str(w.nbytes))):
            e = wt.external_data.add()
            e.key, e.value = k, v
        if make_file:
            with open(os.path.join(d, "w.bin"), "wb") as f:
                f.write(w.tobytes())
        g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [wt])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        path = os.path.join(d, "model.onnx")
        with open(path, "wb") as f:
            f.write(m.SerializeToString())
        return path, w

    def test_internal_file_constant_cannot_read_host_files(self):
        """Issue 9 item 1: a model with Kiln's internal FileConstant (domain
        'kiln') and kiln.base_dir=/etc copied /etc/passwd into the .kiln."""
        size = os.path.getsize("/etc/passwd")
        fc = helper.make_node("FileConstant", [], ["secret"], name="steal", domain="kiln", location="passwd",
                              offset=0, length=size, dtype=TensorProto.UINT8, shape=[size])
        fc.attribute.append(helper.make_attribute("kiln.base_dir", "/etc"))
        g = helper.make_graph([fc, helper.make_node("Identity", ["secret"], ["y"], name="id")], "g", [],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, [size])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("kiln", 1)])
        out_path = os.path.join(WORK, "steal.kiln")
        rc, out = kiln("compile", "--model", save(m, "steal.onnx"), "--output", out_path)
        self.assertCleanError(rc, out, "FileConstant node 'steal'", "domain 'kiln'")
        self.assertFalse(os.path.exists(out_path))
        # the internal attribute alone, on an ordinary node, is refused too
        m = relu_model()
        m.graph.node[0].attribute.append(helper.make_attribute("kiln.base_dir", "/etc"))
        rc, out = kiln("compile", "--model", save(m, "steal_attr.onnx"), "--output", out_path)
        self.assertCleanError(rc, out, "Relu node 'r'", "'kiln.base_dir'")
        self.assertFalse(os.path.exists(out_path))

    def test_wrong_attribute_type_is_an_error(self):
        """Issue 9 item 11: Softmax axis='one' used to compile with the default axis."""
        g = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], name="sm", axis="one")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        rc, out = kiln("compile", "--model", save(m, "softmax_str.onnx"), "--output", os.path.join(WORK, "sm.kiln"))
        self.assertCleanError(rc, out, "Softmax node 'sm'", "'axis'", "INT", "STRING")

    def test_attention_mask_of_another_batch_fails_at_run_time(self):
        """com.microsoft Attention with a symbolic batch: the mask forms are checked against the
        scores' extents when the run's shapes are known (a mask of another batch must not
        broadcast), and a mistyped com.microsoft attribute is an error, not its default."""
        rng = np.random.default_rng(0)
        w = numpy_helper.from_array(rng.standard_normal((8, 24)).astype(np.float32), "w")
        b = numpy_helper.from_array(rng.standard_normal(24).astype(np.float32), "b")
        x = os.path.join(WORK, "att_x.npy")
        np.save(x, rng.standard_normal((2, 5, 8)).astype(np.float32))
        for form, mshape, ok, bad, needle in (
                ("1d", ["m"], np.array([3, 5], np.int32), np.array([3, 5, 4], np.int32), "cannot reshape [3] to [2,1]"),
                ("2d", ["mb", "mt"], np.ones((2, 5), np.int32), np.ones((1, 5), np.int32),
                 "cannot reshape [1,5] to [2,1,1,5]")):
            node = helper.make_node("Attention", ["x", "w", "b", "mask"], ["y"], name="att", domain="com.microsoft",
                                    num_heads=2)
            g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8]),
                                                helper.make_tensor_value_info("mask", TensorProto.INT32, mshape)],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 8])], [w, b])
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14), helper.make_opsetid("com.microsoft", 1)])
            k = os.path.join(WORK, f"att_{form}.kiln")
            rc, out = kiln("compile", "--model", save(m, f"att_{form}.onnx"), "--output", k)
            self.assertEqual(rc, 0, out)
            good, wrong = os.path.join(WORK, f"att_{form}_ok.npy"), os.path.join(WORK, f"att_{form}_bad.npy")
            np.save(good, ok)
            np.save(wrong, bad)
            rc, out = kiln("run", k, "--input", f"0={x}", "--input", f"1={good}")
            self.assertEqual(rc, 0, out)
            self.assertCleanError(*kiln("run", k, "--input", f"0={x}", "--input", f"1={wrong}"), "att/", needle)
        node = helper.make_node("Attention", ["x", "w", "b"], ["y"], name="att", domain="com.microsoft",
                                num_heads=2, unidirectional=1.0)
        g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5, 8])], [w, b])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14), helper.make_opsetid("com.microsoft", 1)])
        rc, out = kiln("compile", "--model", save(m, "att_float_attr.onnx"), "--output", os.path.join(WORK, "af.kiln"))
        self.assertCleanError(rc, out, "Attention node 'att'", "attribute 'unidirectional' must be an int")

    def test_multi_head_attention_causal_keys_checked_at_run_time(self):
        """com.microsoft MultiHeadAttention, unidirectional, with symbolic query and key lengths:
        ONNX Runtime's causal mask is self-attention's, so a run whose key length differs from
        the query's fails with the node named rather than masking by some other rule."""
        rng = np.random.default_rng(1)
        node = helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["y"], name="mha", domain="com.microsoft",
                                num_heads=2, unidirectional=1)
        g = helper.make_graph([node], "g", [helper.make_tensor_value_info("q", TensorProto.FLOAT, [2, "s", 8]),
                                            helper.make_tensor_value_info("k", TensorProto.FLOAT, [2, "l", 8]),
                                            helper.make_tensor_value_info("v", TensorProto.FLOAT, [2, "l", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, "s", 8])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14), helper.make_opsetid("com.microsoft", 1)])
        k = os.path.join(WORK, "mha_causal.kiln")
        rc, out = kiln("compile", "--model", save(m, "mha_causal.onnx"), "--output", k)
        self.assertEqual(rc, 0, out)
        feeds = {}
        for name, length in (("q", 5), ("k5", 5), ("k4", 4)):
            feeds[name] = os.path.join(WORK, f"mha_{name}.npy")
            np.save(feeds[name], rng.standard_normal((2, length, 8)).astype(np.float32))
        rc, out = kiln("run", k, "--input", f"0={feeds['q']}", "--input", f"1={feeds['k5']}", "--input",
                       f"2={feeds['k5']}")
        self.assertEqual(rc, 0, out)
        self.assertCleanError(*kiln("run", k, "--input", f"0={feeds['q']}", "--input", f"1={feeds['k4']}", "--input",
                                    f"2={feeds['k4']}"), "mha/", "cannot reshape [5] to [4]")

    def test_embed_layernorm_inputs_of_another_batch_fail_at_run_time(self):
        """com.microsoft EmbedLayerNormalization with symbolic dims: segment_ids and mask must have
        input_ids' shape when the run's shapes are known (a batch of 1 must not broadcast)."""
        rng = np.random.default_rng(0)
        node = helper.make_node("EmbedLayerNormalization", ["ids", "seg", "word", "pos", "segemb", "g", "b", "mask"],
                                ["y", "mi"], name="emb", domain="com.microsoft")
        inits = [numpy_helper.from_array(rng.standard_normal(sh).astype(np.float32), k)
                 for k, sh in (("word", (10, 4)), ("pos", (128, 4)), ("segemb", (2, 4)), ("g", (4,)), ("b", (4,)))]
        g = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.INT32, [f"{n}_b", f"{n}_s"])
                                            for n in ("ids", "seg", "mask")],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["ids_b", "ids_s", 4]),
                               helper.make_tensor_value_info("mi", TensorProto.INT32, ["ids_b"])], inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14), helper.make_opsetid("com.microsoft", 1)])
        k = os.path.join(WORK, "emb.kiln")
        rc, out = kiln("compile", "--model", save(m, "emb.onnx"), "--output", k)
        self.assertEqual(rc, 0, out)
        files = {}
        for name, a in (("ids", [[1, 2, 3], [4, 5, 6]]), ("two", [[0, 1, 1], [0, 0, 1]]), ("one", [[0, 1, 1]])):
            files[name] = os.path.join(WORK, f"emb_{name}.npy")
            np.save(files[name], np.array(a, np.int32))
        run = lambda seg, mask: kiln("run", k, "--input", f"0={files['ids']}", "--input", f"1={files[seg]}",
                                     "--input", f"2={files[mask]}")
        rc, out = run("two", "two")
        self.assertEqual(rc, 0, out)
        self.assertCleanError(*run("one", "two"), "emb/segment_ids_checked", "cannot reshape [1,3] to [2,3]")
        self.assertCleanError(*run("two", "one"), "emb/mask_checked", "cannot reshape [1,3] to [2,3]")

    def test_external_data_inside_model_dir(self):
        path, w = self.external_model("ext_ok", "w.bin")
        k = os.path.join(WORK, "ext.kiln")
        rc, out = kiln("compile", "--model", path, "--output", k)
        self.assertEqual(rc, 0, out)
        x = np.array([[1, 2, 3]], np.float32)
        np.save(os.path.join(WORK, "ext_x.npy"), x)
        rc, out = kiln("run", k, "--input", "0=" + os.path.join(WORK, "ext_x.npy"), "--output-dir", os.path.join(WORK, "ext_o"))
        self.assertEqual(rc, 0, out)
        np.testing.assert_allclose(np.load(os.path.join(WORK, "ext_o", "output_0.npy")), x @ w)

    def test_external_data_path_traversal_refused(self):
        secret = os.path.join(WORK, "outside.bin")
        with open(secret, "wb") as f:
            f.write(np.zeros(12, np.float32).tobytes())
        for sub, loc, needle in (("ext_dotdot", "../outside.bin", ".."),
                                 ("ext_nested", "a/../../outside.bin", ".."),
                                 ("ext_abs", secret, "relative path")):
            path, _ = self.external_model(sub, loc)
            rc, out = kiln("compile", "--model", path, "--output", os.path.join(WORK, sub + ".kiln"))
            self.assertCleanError(rc, out, needle, "'w'")
        path, _ = self.external_model("ext_link", "link.bin")
        link = os.path.join(WORK, "ext_link", "link.bin")
        if not os.path.lexists(link):
            os.symlink(secret, link)
        rc, out = kiln("compile", "--model", path, "--output", os.path.join(WORK, "link.kiln"))
        self.assertCleanError(rc, out, "outside the weight directory")
        path, _ = self.external_model("ext_missing", "nothere.bin")
        rc, out = kiln("compile", "--model", path, "--output", os.path.join(WORK, "missing.kiln"))
        self.assertCleanError(rc, out, "nothere.bin")

    def if_model(self, then_nodes, then_out, else_shape=(2,)):
        then_g = helper.make_graph(then_nodes, "then", [], [helper.make_tensor_value_info(then_out, TensorProto.FLOAT, [2])])
        else_g = helper.make_graph([helper.make_node("Tile", ["x", "reps"], ["e"], name="tile")], "else", [],
                                   [helper.make_tensor_value_info("e", TensorProto.FLOAT, list(else_shape))])
        g = helper.make_graph([helper.make_node("If", ["c"], ["y"], name="branchy", then_branch=then_g, else_branch=else_g)],
                              "g", [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                                    helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array([else_shape[0] // 2], np.int64), "reps")])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])

    def test_if_branch_reads_undefined_value(self):
        m = self.if_model([helper.make_node("Add", ["x", "ghost"], ["t"], name="t_add")], "t")
        rc, out = kiln("compile", "--model", save(m, "if_ghost.onnx"), "--output", os.path.join(WORK, "ig.kiln"))
        self.assertCleanError(rc, out, "If node 'branchy' attribute 'then_branch'", "'ghost'", "t_add")
        m = self.if_model([], "nowhere")
        rc, out = kiln("compile", "--model", save(m, "if_noout.onnx"), "--output", os.path.join(WORK, "in.kiln"))
        self.assertCleanError(rc, out, "If node 'branchy' attribute 'then_branch'", "'nowhere'")

    def test_if_runs_and_branch_extents_follow_the_taken_branch(self):
        m = self.if_model([helper.make_node("Neg", ["x"], ["t"], name="t_neg")], "t")
        k = os.path.join(WORK, "if.kiln")
        rc, out = kiln("compile", "--model", save(m, "if_ok.onnx"), "--output", k)
        self.assertEqual(rc, 0, out)
        np.save(os.path.join(WORK, "if_x.npy"), np.array([1, 2], np.float32))
        # then: Neg(x) [2]; else: Tile(x, 2) [4] -> the If's output is [<=4]
        m = self.if_model([helper.make_node("Neg", ["x"], ["t"], name="t_neg")], "t", else_shape=(4,))
        k4 = os.path.join(WORK, "is.kiln")
        rc, out = kiln("compile", "--model", save(m, "if_shapes.onnx"), "--output", k4)
        self.assertEqual(rc, 0, out)
        rc, out = kiln("inspect", k4)
        self.assertIn("y float32[<=4]", out)
        for model, cases in ((k, ((True, [-1, -2]), (False, [1, 2]))),
                             (k4, ((True, [-1, -2]), (False, [1, 2, 1, 2])))):
            for c, want in cases:
                np.save(os.path.join(WORK, "if_c.npy"), np.array(c))
                rc, out = kiln("run", model, "--input", "c=" + os.path.join(WORK, "if_c.npy"), "--input",
                               "x=" + os.path.join(WORK, "if_x.npy"), "--output-dir", os.path.join(WORK, "if_o"))
                self.assertEqual(rc, 0, out)
                np.testing.assert_array_equal(np.load(os.path.join(WORK, "if_o", "output_0.npy")), want)
        # Branches of different rank: the taken branch decides the output's rank.
        m = self.if_model([helper.make_node("Constant", [], ["ax"], name="t_ax",
                                            value=numpy_helper.from_array(np.array([0], np.int64))),
                           helper.make_node("Unsqueeze", ["x", "ax"], ["t"], name="t_unsq")], "t")
        kr = os.path.join(WORK, "ir.kiln")
        rc, out = kiln("compile", "--model", save(m, "if_rank.onnx"), "--output", kr)
        self.assertEqual(rc, 0, out)
        rc, out = kiln("inspect", kr)
        self.assertIn("(rank depends on the data: [1,2] or [2])", out)
        for c, want in ((True, np.array([[1, 2]], np.float32)), (False, np.array([1, 2], np.float32))):
            np.save(os.path.join(WORK, "if_c.npy"), np.array(c))
            rc, out = kiln("run", kr, "--input", "c=" + os.path.join(WORK, "if_c.npy"), "--input",
                           "x=" + os.path.join(WORK, "if_x.npy"), "--output-dir", os.path.join(WORK, "if_o"))
            self.assertEqual(rc, 0, out)
            got = np.load(os.path.join(WORK, "if_o", "output_0.npy"))
            self.assertEqual(got.shape, want.shape)
            np.testing.assert_array_equal(got, want)

    def test_shape_from_data_without_a_bound_runs_on_a_provisional_one(self):
        # y = ConstantOfShape([int(max(x)), 9 - int(min(x))]) of x[1000]: no bound is
        # proven (a float maximum, a constant minus a value), so inspect shows none,
        # and each run plans for what it computes; NumPy gives the shapes.
        nodes = [helper.make_node("ReduceMax", ["x"], ["m"], name="max", keepdims=1),
                 helper.make_node("ReduceMin", ["x"], ["n"], name="min", keepdims=1),
                 helper.make_node("Cast", ["m"], ["a"], name="a", to=TensorProto.INT64),
                 helper.make_node("Cast", ["n"], ["ni"], name="ni", to=TensorProto.INT64),
                 helper.make_node("Sub", ["nine", "ni"], ["b"], name="b"),
                 helper.make_node("Concat", ["a", "b"], ["s"], name="s", axis=0),
                 helper.make_node("ConstantOfShape", ["s"], ["y"], name="fill",
                                  value=numpy_helper.from_array(np.array([1.5], np.float32)))]
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1000])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["h", "w"])],
                              [numpy_helper.from_array(np.array([9], np.int64), "nine")])
        k = os.path.join(WORK, "prov.kiln")
        rc, out = kiln("compile", "--model", save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
                                                  "prov.onnx"), "--output", k)
        self.assertEqual(rc, 0, out)
        rc, out = kiln("inspect", k)
        self.assertIn("y float32[?,?]", out)
        rng = np.random.default_rng(3)
        xp = os.path.join(WORK, "prov_x.npy")
        for lo, hi in ((1, 4), (-3, 9), (2, 2.5), (-7, 30), (0.5, 1)):
            x = rng.uniform(lo, hi, 1000).astype(np.float32)
            np.save(xp, x)
            rc, out = kiln("run", k, "--input", "x=" + xp, "--output-dir", os.path.join(WORK, "prov_o"))
            self.assertEqual(rc, 0, out)
            want = np.full((int(x.max()), 9 - int(x.min())), 1.5, np.float32)
            got = np.load(os.path.join(WORK, "prov_o", "output_0.npy"))
            self.assertEqual(got.shape, want.shape)
            np.testing.assert_array_equal(got, want)
            rc, out = kiln("bench", k, "--input", "x=" + xp, "--runs", "3", "--json")
            self.assertEqual(rc, 0, out)
        # Values past any tensor's size: an error naming the node, exit 1.
        x = np.zeros(1000, np.float32)
        x[7] = 1e12
        np.save(xp, x)
        rc, out = kiln("run", k, "--input", "x=" + xp)
        self.assertEqual(rc, 1, out)
        self.assertIn("ConstantOfShape node 'fill'", out)
        self.assertIn("provisional bound", out)
        # A Reshape's target computed from data with no bound, [int(max(x)), -1]:
        # the provisional bound is on the dims it resolves to; NumPy's reshape and
        # row sums at five row counts; one that cannot divide 1000 exits 1 naming
        # the Reshape.
        nodes = [helper.make_node("ReduceMax", ["x"], ["m"], name="max", keepdims=1),
                 helper.make_node("Cast", ["m"], ["a"], name="a", to=TensorProto.INT64),
                 helper.make_node("Concat", ["a", "neg"], ["s"], name="s", axis=0),
                 helper.make_node("Reshape", ["x", "s"], ["r"], name="reshape"),
                 helper.make_node("ReduceSum", ["r", "ax"], ["y"], name="rows", keepdims=0)]
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1000])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["h"])],
                              [numpy_helper.from_array(np.array([-1], np.int64), "neg"),
                               numpy_helper.from_array(np.array([1], np.int64), "ax")])
        pr = os.path.join(WORK, "pr.kiln")
        rc, out = kiln("compile", "--model", save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
                                                  "prov_reshape.onnx"), "--output", pr)
        self.assertEqual(rc, 0, out)
        for rows in (2, 8, 5, 1000, 1):
            x = ((np.arange(1000) % 7) * 0.125).astype(np.float32)
            x[11] = rows
            np.save(xp, x)
            rc, out = kiln("run", pr, "--input", "x=" + xp, "--output-dir", os.path.join(WORK, "pr_o"))
            self.assertEqual(rc, 0, out)
            got = np.load(os.path.join(WORK, "pr_o", "output_0.npy"))
            want = x.astype(np.float64).reshape(rows, -1).sum(1)
            self.assertEqual(got.shape, want.shape)
            np.testing.assert_allclose(got, want, rtol=1e-6)
        x[11] = 3
        np.save(xp, x)
        rc, out = kiln("run", pr, "--input", "x=" + xp)
        self.assertEqual(rc, 1, out)
        self.assertIn("Reshape node 'reshape'", out)
        self.assertIn("cannot reshape [1000]", out)

    def test_provisional_bounds_inside_if_branches(self):
        # n = int(max(x)) of x[1000]; If(sum(x) > 0): then Range(0, n) * 2 (n captured);
        # else If(n > -5): then ConstantOfShape([n], 3) (n captured two levels down),
        # else -x. No bound is proven for n, so inspect shows none and the runs raise
        # the provisional one; NumPy computes each branch's result.
        def graph(name, nodes, out):
            return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(out, TensorProto.FLOAT, ["d"])])
        then_g = graph("then", [helper.make_node("Range", ["zero", "n", "one"], ["r"], name="range"),
                                helper.make_node("Cast", ["r"], ["rf"], name="rf", to=TensorProto.FLOAT),
                                helper.make_node("Add", ["rf", "rf"], ["yt"], name="twice")], "yt")
        fill_g = graph("fill", [helper.make_node("Unsqueeze", ["n", "ax"], ["n1"], name="n1"),
                                helper.make_node("ConstantOfShape", ["n1"], ["yf"], name="fill",
                                                 value=numpy_helper.from_array(np.array([3], np.float32)))], "yf")
        neg_g = graph("neg", [helper.make_node("Neg", ["x"], ["yn"], name="negate")], "yn")
        else_g = graph("else", [helper.make_node("Greater", ["n", "lim"], ["c2"], name="c2"),
                                helper.make_node("If", ["c2"], ["ye"], name="inner", then_branch=fill_g,
                                                 else_branch=neg_g)], "ye")
        nodes = [helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
                 helper.make_node("ReduceMax", ["x"], ["m"], name="max", keepdims=0),
                 helper.make_node("Cast", ["m"], ["n"], name="n", to=TensorProto.INT64),
                 helper.make_node("Greater", ["s", "zf"], ["c"], name="c"),
                 helper.make_node("If", ["c"], ["y"], name="outer", then_branch=then_g, else_branch=else_g)]
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1000])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["d"])],
                              [numpy_helper.from_array(np.array(0, np.int64), "zero"),
                               numpy_helper.from_array(np.array(1, np.int64), "one"),
                               numpy_helper.from_array(np.array([0], np.int64), "ax"),
                               numpy_helper.from_array(np.array(-5, np.int64), "lim"),
                               numpy_helper.from_array(np.array(0, np.float32), "zf")])
        onnx_path = save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), "prov_if.onnx")
        # Also compiled for a device without Range and ConstantOfShape: those run on the CPU,
        # and the counts reach them through copies between memories.
        lack = "sim:lack=Range+ConstantOfShape"
        runs = []
        for target, name in (("cpu", "prov_if.kiln"), (lack, "prov_if_lack.kiln")):
            k = os.path.join(WORK, name)
            rc, out = kiln("compile", "--model", onnx_path, "--output", k, "--target", target)
            self.assertEqual(rc, 0, out)
            rc, out = kiln("inspect", k)
            self.assertIn("y float32[?]", out)
            runs.append((k, target))
        # (The branches' copies: inspect's placement summary counts top-level nodes only.)
        self.assertIn(b"MemcpyToHost", read(runs[1][0]))
        self.assertNotIn(b"MemcpyToHost", read(runs[0][0]))
        rng = np.random.default_rng(5)
        xp = os.path.join(WORK, "prov_if_x.npy")
        for (top, shift), (k, device) in itertools.product(
                ((2000.0, -1), (300.0, -2), (50.0, -2), (None, -12), (5000.0, -11), (7.5, 1)), runs):
            x = (shift - np.abs(rng.standard_normal(1000))).astype(np.float32)
            if top is not None:
                x[int(rng.integers(1000))] = top
            np.save(xp, x)
            rc, out = kiln("run", k, "--device", device, "--input", "x=" + xp,
                           "--output-dir", os.path.join(WORK, "prov_if_o"))
            self.assertEqual(rc, 0, out)
            n = int(x.max())
            if x.astype(np.float64).sum() > 0:
                want = np.arange(n, dtype=np.float32) * 2
            elif n > -5:
                want = np.full(n, 3, np.float32)
            else:
                want = -x
            got = np.load(os.path.join(WORK, "prov_if_o", "output_0.npy"))
            self.assertEqual(got.shape, want.shape, (top, shift))
            np.testing.assert_array_equal(got, want)

    def test_failed_compile_keeps_existing_output(self):
        good = save(relu_model(), "keep.onnx")
        k = os.path.join(WORK, "keep.kiln")
        self.assertEqual(kiln("compile", "--model", good, "--output", k)[0], 0)
        before = read(k)
        bad = os.path.join(WORK, "keep_bad.onnx")
        write(bad, b"\x08\x07garbage")
        self.assertEqual(kiln("compile", "--model", bad, "--output", k)[0], 1)
        self.assertEqual(read(k), before)
        self.assertEqual([f for f in os.listdir(WORK) if ".tmp" in f], [])

    def test_bench_profile_writes_a_trace_and_a_per_op_table(self):
        # Relu -> Sigmoid (no fusion possible): two tasks, 4 timed runs after 2 warm-up.
        g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                               helper.make_node("Sigmoid", ["r"], ["y"], name="sig")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])])
        m = save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), "prof.onnx")
        k = os.path.join(WORK, "prof.kiln")
        self.assertEqual(kiln("compile", "--model", m, "--output", k)[0], 0)
        trace = os.path.join(WORK, "prof_trace.json")
        rc, out = kiln("bench", k, "--runs", "4", "--warmup", "2", "--profile", trace)
        self.assertEqual(rc, 0, out)
        import json
        with open(trace) as f:
            events = json.load(f)["traceEvents"]
        self.assertEqual(len(events), 2 * 4)  # the warm-up runs are left out
        self.assertEqual(sorted({e["name"] for e in events}), ["relu", "sig"])
        self.assertTrue(all(e["ph"] == "X" and e["dur"] >= 0 for e in events))
        self.assertEqual(sorted({e["args"]["run"] for e in events}), [0, 1, 2, 3])
        self.assertEqual({e["args"]["shapes"] for e in events}, {"float32[2,8]"})
        self.assertIn("Relu", out)
        self.assertIn("Sigmoid", out)
        self.assertIn("total", out)
        # --json keeps stdout one JSON object; the table goes to stderr.
        p = subprocess.run([KILN, "bench", k, "--runs", "2", "--warmup", "0", "--json", "--profile", trace],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        json.loads(p.stdout)
        self.assertIn("per-op time", p.stderr)
        # An unwritable trace path is a clean error naming it.
        rc, out = kiln("bench", k, "--runs", "1", "--profile", os.path.join(WORK, "no_such_dir", "t.json"))
        self.assertCleanError(rc, out, "no_such_dir")

    def test_stale_temporaries_of_dead_writers_are_removed(self):
        # A compile killed while writing leaves OUT.tmp.<pid>; the next compile
        # of the same output removes it when that process is gone, and leaves
        # a live process' temporary alone.
        d = os.path.join(WORK, "stale_tmp")
        os.makedirs(d, exist_ok=True)
        m = save(relu_model(), "stale_tmp/relu.onnx")
        k = os.path.join(d, "relu.kiln")
        child = subprocess.Popen(["true"])
        child.wait()  # a pid that is certainly not alive any more (reaped)
        dead = os.path.join(d, f"relu.kiln.tmp.{child.pid}")
        live = os.path.join(d, f"relu.kiln.tmp.{os.getpid()}")
        other = os.path.join(d, "relu.kiln.tmp.notapid")
        for p in (dead, live, other):
            write(p, b"partial")
        rc, out = kiln("compile", "--model", m, "--output", k)
        self.assertEqual(rc, 0, out)
        self.assertFalse(os.path.exists(dead))
        self.assertTrue(os.path.exists(live))
        self.assertTrue(os.path.exists(other))

    def test_gemm_with_bias_on_empty_and_k0_inputs(self):
        # MatMul + constant Add fuse into a Gemm with bias; an empty batch
        # crashed oneDNN at load (SIGFPE, found by the onnx fuzz target), and
        # K = 0 must give bias (+ Relu) alone. Expected values by hand.
        for name, xshape, act, expected in (
                ("gemm_m0", [0, 3], None, np.zeros((0, 4), np.float32)),
                ("gemm_k0", [2, 0], None, np.array([[-1, 0, 1, 2]] * 2, np.float32)),
                ("gemm_k0_relu", [2, 0], "Relu", np.array([[0, 0, 1, 2]] * 2, np.float32))):
            k = xshape[1]
            nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"])]
            out = "a"
            if act:
                nodes.append(helper.make_node(act, ["a"], ["r"]))
                out = "r"
            g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, xshape)],
                                  [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)],
                                  [numpy_helper.from_array(np.ones((k, 4), np.float32), "w"),
                                   numpy_helper.from_array(np.array([-1, 0, 1, 2], np.float32), "b")])
            m = save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), name + ".onnx")
            kf = os.path.join(WORK, name + ".kiln")
            rc, out_text = kiln("compile", "--model", m, "--output", kf)
            self.assertEqual(rc, 0, out_text)
            od = os.path.join(WORK, name + "_out")
            rc, out_text = kiln("run", kf, "--output-dir", od)
            self.assertEqual(rc, 0, out_text)
            y = np.load(os.path.join(od, "output_0.npy"))
            self.assertEqual(y.shape, expected.shape)
            np.testing.assert_array_equal(y, expected)


def main():
    global KILN, WORK
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    args, rest = ap.parse_known_args()
    KILN, WORK = os.path.abspath(args.kiln), os.path.abspath(args.work)
    os.makedirs(WORK, exist_ok=True)
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
