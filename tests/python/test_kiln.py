"""The `kiln` Python package (pytest). References are independent of Kiln:
NumPy for hand-written graphs, PyTorch for an exported CNN.

Run from the build tree (ctest `python`): PYTHONPATH=<build>/python,
KILN_TEST_PACKAGE_ROOT=<build>/test_packages (the test package with PkgDouble).
"""
import gc
import os
import threading
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln

W = np.arange(6, dtype=np.float32).reshape(2, 3) * 0.5


def add_model(path, custom=False):
    """y = x + w (w[i] = 0.5 i); custom: y = PkgDouble(x + w) = 2 (x + w)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    nodes = [helper.make_node("Add", ["x", "w"], ["s" if custom else "y"])]
    opsets = [helper.make_opsetid("", 17)]
    if custom:
        nodes.append(helper.make_node("PkgDouble", ["s"], ["y"], domain="com.example"))
        opsets.append(helper.make_opsetid("com.example", 1))
    g = helper.make_graph(nodes, "add", [x], [y], [numpy_helper.from_array(W, "w")])
    onnx.save(helper.make_model(g, opset_imports=opsets), str(path))
    return str(path)


def matmul_chain(path, n=512, depth=48):
    """y = x @ a @ a ... (depth MatMuls): long enough to watch the GIL."""
    rng = np.random.default_rng(1)
    a = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    nodes, prev = [], "x"
    for i in range(depth):
        nodes.append(helper.make_node("MatMul", [prev, "a"], [f"m{i}"]))
        prev = f"m{i}"
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n])],
                          [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [n, n])],
                          [numpy_helper.from_array(a, "a")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


X = np.array([[1, -2, 3], [-4, 5, -6]], dtype=np.float32)


def test_compile_load_run(tmp_path):
    s = kiln.compile(add_model(tmp_path / "add.onnx"), tmp_path / "add.kiln", external_weight=2)
    assert [w.path for w in s.external_weights] == ["add_weight_combined"]
    assert s.external_weights[0].size == 24 and len(s.external_weights[0].id) == 64
    m = kiln.load(tmp_path / "add.kiln", threads=2)
    assert [(t.name, t.dtype, t.shape) for t in m.inputs] == [("x", "float32", [2, 3])]
    assert [(t.name, t.dtype, t.shape) for t in m.outputs] == [("y", "float32", [2, 3])]
    assert [w.path for w in m.summary().external_weights] == ["add_weight_combined"]
    y = m.run({"x": X})["y"]
    np.testing.assert_array_equal(y, X + W)
    np.testing.assert_array_equal(m.run([X])["y"], X + W)  # a sequence in input order


def test_matches_pytorch_on_an_exported_cnn(tmp_path):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                              torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(8 * 8 * 8, 10)).eval()
    x = torch.randn(2, 3, 16, 16)
    torch.onnx.export(net, x, str(tmp_path / "cnn.onnx"), input_names=["input"], output_names=["logits"],
                      opset_version=13)
    kiln.compile(tmp_path / "cnn.onnx", tmp_path / "cnn.kiln", external_weight=1)
    with torch.no_grad():
        ref = net(x).numpy()
    y = kiln.load(tmp_path / "cnn.kiln").run({"input": x.numpy()})["logits"]
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def test_zero_copy_inputs_and_outputs(tmp_path):
    kiln.compile(add_model(tmp_path / "add.onnx"), tmp_path / "add.kiln")
    m = kiln.load(tmp_path / "add.kiln")
    x = X.copy()
    out = np.empty((2, 3), np.float32)
    res = m.run({"x": x}, outputs={"y": out})
    assert res["y"] is out  # Kiln wrote into the caller's array
    np.testing.assert_array_equal(out, X + W)
    assert m._last_input_addresses() == [x.ctypes.data]  # bound in place
    # A strided view is copied to a contiguous array first (other address).
    wide = np.zeros((2, 6), np.float32)
    wide[:, ::2] = X
    view = wide[:, ::2]
    np.testing.assert_array_equal(m.run({"x": view})["y"], X + W)
    assert m._last_input_addresses() != [view.ctypes.data]
    # Outputs must be writable in place.
    with pytest.raises(kiln.InvalidArgument, match="writeable C-contiguous"):
        m.run({"x": x}, outputs={"y": np.empty((3, 2), np.float32).T})


def test_errors_are_exceptions_with_kilns_message(tmp_path):
    kiln.compile(add_model(tmp_path / "add.onnx"), tmp_path / "add.kiln")
    m = kiln.load(tmp_path / "add.kiln")
    with pytest.raises(kiln.InvalidArgument, match=r"input 0 'x': expected dtype float32, found float64"):
        m.run({"x": X.astype(np.float64)})
    with pytest.raises(kiln.InvalidArgument, match=r"expected shape \[2,3\], found \[3,2\]"):
        m.run({"x": X.T.copy()})
    with pytest.raises(kiln.InvalidArgument, match="'z' is not an input of the model"):
        m.run({"z": X})
    with pytest.raises(kiln.NotFound, match="nothing.kiln"):
        kiln.load(tmp_path / "nothing.kiln")
    (tmp_path / "bad.kiln").write_bytes(b"KILNMDL\0" + b"\xff" * 200)
    with pytest.raises(kiln.Corrupt) as e:
        kiln.load(tmp_path / "bad.kiln")
    assert isinstance(e.value, kiln.Error) and "bad.kiln" in str(e.value)
    with pytest.raises(kiln.NotFound, match="missing.onnx"):
        kiln.compile(tmp_path / "missing.onnx", tmp_path / "x.kiln")
    with pytest.raises(kiln.InvalidArgument, match="weight_load"):
        kiln.load(tmp_path / "add.kiln", weight_load="fast")


def test_the_gil_is_released_while_a_model_runs(tmp_path):
    kiln.compile(matmul_chain(tmp_path / "chain.onnx"), tmp_path / "chain.kiln")
    m = kiln.load(tmp_path / "chain.kiln")
    x = np.eye(512, dtype=np.float32)
    m.run({"x": x})  # warm up
    done = threading.Event()
    gaps = []

    def count():
        # The longest stretch in which this thread could not run Python.
        last, gap = time.perf_counter(), 0.0
        while not done.is_set():
            now = time.perf_counter()
            gap, last = max(gap, now - last), now
        gaps.append(gap)

    t = threading.Thread(target=count)
    t.start()
    time.sleep(0.05)
    t0 = time.perf_counter()
    m.run({"x": x})
    run_s = time.perf_counter() - t0
    done.set()
    t.join()
    # Holding the GIL, the run would stall the other thread for all of it.
    assert run_s > 0.02, f"the run took only {run_s * 1e3:.1f} ms: too short to tell"
    assert gaps[0] < run_s / 2, f"the other thread stalled {gaps[0] * 1e3:.1f} ms of a {run_s * 1e3:.1f} ms run"


def test_user_weight_memory_from_memory_image(tmp_path):
    kiln.compile(add_model(tmp_path / "add.onnx"), tmp_path / "add.kiln", external_weight=2)
    image = (tmp_path / "add.kiln").read_bytes()
    weights = np.frombuffer((tmp_path / "weight" / "add_weight_combined").read_bytes(), dtype=np.uint8).copy()
    with pytest.raises(kiln.InvalidArgument, match="add_weight_combined"):
        kiln.load_bytes(image)  # no directory of its own, no memory given
    m = kiln.load_bytes(image, weights={"add_weight_combined": weights})
    del weights
    gc.collect()  # the model keeps the buffer alive
    np.testing.assert_array_equal(m.run({"x": X})["y"], X + W)


def test_session_shares_weights_and_runs_graphs(tmp_path):
    kiln.compile(add_model(tmp_path / "add.onnx"), tmp_path / "add.kiln", external_weight=1)
    s = kiln.Session(external_weight=1, external_weight_dir=tmp_path / "store")
    a = s.load(tmp_path / "add.kiln")
    b = s.load(tmp_path / "add.kiln")
    assert s.weight_stats()["weights_shared"] == 1
    np.testing.assert_array_equal(b.run({"x": X})["y"], X + W)
    gid = s.add_graph(tmp_path / "add.onnx")
    s.compile_graph(gid)
    summary = s.graph_summary(gid)
    assert len(summary.external_weights) == 1 and "store" in summary.weight_dir
    np.testing.assert_array_equal(s.run_graph(gid, {"x": X})["y"], X + W)
    s.remove_graph(gid)
    with pytest.raises(kiln.NotFound):
        s.run_graph(gid, {"x": X})
    del s
    gc.collect()
    np.testing.assert_array_equal(a.run({"x": X})["y"], X + W)  # models outlive their session


def test_custom_op_package(tmp_path):
    root = os.environ.get("KILN_TEST_PACKAGE_ROOT")
    if not root:
        pytest.skip("KILN_TEST_PACKAGE_ROOT not set (run through ctest)")
    assert root in os.environ.get("KILN_CUSTOM_OP_PATH", "")
    kiln.compile(add_model(tmp_path / "custom.onnx", custom=True), tmp_path / "custom.kiln")
    assert kiln.registered_custom_op("PkgDouble")
    np.testing.assert_array_equal(kiln.load(tmp_path / "custom.kiln").run({"x": X})["y"], 2 * (X + W))
    s = kiln.Session()
    gid = s.add_graph(tmp_path / "custom.onnx")
    np.testing.assert_array_equal(s.run_graph(gid, {"x": X})["y"], 2 * (X + W))


def test_symbolic_batch_runs_at_any_extent(tmp_path):
    # y = relu(x @ w) with x [batch, 3] left symbolic: one .kiln, any batch.
    w = (np.arange(6, dtype=np.float32).reshape(3, 2) - 2.5) * 0.5
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])], "mm",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])],
                          [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(tmp_path / "mm.onnx"))
    kiln.compile(tmp_path / "mm.onnx", tmp_path / "mm.kiln")
    m = kiln.load(tmp_path / "mm.kiln")
    assert m.inputs[0].shape == [-1, 3] and m.outputs[0].shape == [-1, 2]
    d = m.inputs[0].dims[0]
    assert (d.value, d.min, d.max, d.symbol) == (-1, 1, -1, "batch")
    assert m.output_shapes([[5, 3]]) == [[5, 2]]
    for batch in (1, 4, 9, 4, 1):
        x = np.linspace(-2, 2, batch * 3, dtype=np.float32).reshape(batch, 3)
        np.testing.assert_allclose(m.run({"x": x})["y"], np.maximum(x @ w, 0), rtol=1e-6, atol=1e-6)
    s = m.plan_stats()
    assert (s["created"], s["cached"]) == (4, 4), s  # batches 5 (output_shapes), 1, 4, 9
    # The MatMul packs its constant W once; the plans at the other three extents share that copy.
    assert (s["packed_weights_made"], s["packed_weights_shared"]) == (1, 3), s
    with pytest.raises(kiln.Error, match="symbol 'batch'.*is 0, outside its range 1.."):
        m.run({"x": np.zeros((0, 3), np.float32)})
    # A range with gears: the gears are planned at load, other batches in the range as they come.
    kiln.compile(tmp_path / "mm.onnx", tmp_path / "mm_range.kiln", input_spec="x:1..6,3|2,3|6,3")
    m = kiln.load(tmp_path / "mm_range.kiln")
    d = m.inputs[0].dims[0]
    assert (d.value, d.min, d.max, d.symbol) == (-1, 1, 6, "batch")
    assert (m.plan_stats()["created"], m.plan_stats()["gears"]) == (2, 2)
    for batch in (2, 6, 3):
        x = np.linspace(-2, 2, batch * 3, dtype=np.float32).reshape(batch, 3)
        np.testing.assert_allclose(m.run({"x": x})["y"], np.maximum(x @ w, 0), rtol=1e-6, atol=1e-6)
    assert m.plan_stats()["created"] == 3
    with pytest.raises(kiln.Error, match="symbol 'batch'.*is 7, outside its range 1..6"):
        m.run({"x": np.zeros((7, 3), np.float32)})
    with pytest.raises(kiln.Error, match="gear \\[9,3\\] of 'x' has dim 0 = 9, outside the range"):
        kiln.compile(tmp_path / "mm.onnx", tmp_path / "bad.kiln", input_spec="x:1..6,3|9,3")


def test_shape_inputs_are_read_per_run(tmp_path):
    # y = x[starts:ends] with starts and ends fed as model inputs: compiled as
    # they are, each run's values decide y's shape (numpy slicing is the reference).
    g = helper.make_graph([helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["y"])], "slice",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6]),
                           helper.make_tensor_value_info("starts", TensorProto.INT64, [2]),
                           helper.make_tensor_value_info("ends", TensorProto.INT64, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(np.array([0, 1], np.int64), "axes")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(tmp_path / "slice.onnx"))
    kiln.compile(tmp_path / "slice.onnx", tmp_path / "slice.kiln")
    m = kiln.load(tmp_path / "slice.kiln")
    assert [t.shape_input for t in m.inputs] == [False, True, True]
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    for (s0, s1), (e0, e1) in (((0, 1), (2, 5)), ((1, -3), (4, 100)), ((0, 1), (2, 5)), ((3, 0), (1, 6))):
        got = m.run({"x": x, "starts": np.array([s0, s1], np.int64), "ends": np.array([e0, e1], np.int64)})["y"]
        np.testing.assert_array_equal(got, x[s0:e0, s1:e1])
    assert m.plan_stats()["created"] == 3
    with pytest.raises(kiln.Error, match="depend on the values of input 1 'starts'"):
        m.output_shapes([[4, 6], [2], [2]])
    # One plan kept: alternating values plan every time.
    m1 = kiln.load(tmp_path / "slice.kiln", max_plans=1, max_plan_bytes=1 << 20)
    for k in range(4):
        e = np.array([2 + k % 2, 5], np.int64)
        got = m1.run({"x": x, "starts": np.array([0, 1], np.int64), "ends": e})["y"]
        np.testing.assert_array_equal(got, x[0:e[0], 1:5])
    s = m1.plan_stats()
    assert (s["created"], s["evicted"], s["cached"]) == (4, 3, 1), s
    with pytest.raises(kiln.Error, match="max_plans = 0"):
        kiln.load(tmp_path / "slice.kiln", max_plans=0)


def test_data_dependent_output_has_its_actual_shape(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])
    y = helper.make_tensor_value_info("y", TensorProto.INT64, None)
    g = helper.make_graph([helper.make_node("NonZero", ["x"], ["y"])], "nz", [x], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(tmp_path / "nz.onnx"))
    kiln.compile(tmp_path / "nz.onnx", tmp_path / "nz.kiln")
    m = kiln.load(tmp_path / "nz.kiln")
    assert m.outputs[0].dynamic_dims == [1]
    v = np.array([0, 3, 0, 0, 5, 1], np.float32)
    np.testing.assert_array_equal(m.run({"x": v})["y"], np.array(np.nonzero(v)))


def test_range_to_a_maximum_computed_in_the_run(tmp_path):
    """Range(0, int(max(x))) of x[500]: no bound is proven, so a provisional one
    is raised as runs need; run() allocates its outputs again then (NumPy ref)."""
    nodes = [helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
             helper.make_node("Cast", ["m"], ["lim"], to=TensorProto.INT64),
             helper.make_node("Range", ["zero", "lim", "one"], ["y"])]
    g = helper.make_graph(nodes, "r", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [500])],
                          [helper.make_tensor_value_info("y", TensorProto.INT64, ["n"])],
                          [numpy_helper.from_array(np.array(0, np.int64), "zero"),
                           numpy_helper.from_array(np.array(1, np.int64), "one")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "r.onnx"))
    kiln.compile(tmp_path / "r.onnx", tmp_path / "r.kiln")
    m = kiln.load(tmp_path / "r.kiln")
    for top in (4.5, 30.0, 2.0, 100.0, 0.0):
        x = np.full(500, -1.0, np.float32)
        x[123] = top
        np.testing.assert_array_equal(m.run({"x": x})["y"], np.arange(int(top), dtype=np.int64))
    # The bound went 1 -> 4 -> 30 -> 100 (each run's value, above twice the old bound).
    assert m.plan_stats()["bound_raises"] == 3


def test_if_branches_of_different_rank(tmp_path):
    """An If whose condition (a model input) picks a [3,4] or a flattened
    [24] path; Relu after it. Compared with NumPy."""
    from onnx import numpy_helper

    def branch(name, nodes, out, inits):
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], inits)
    then_g = branch("then", [helper.make_node("Mul", ["x", "two"], ["t"])], "t",
                    [numpy_helper.from_array(np.array(2, np.float32), "two")])
    else_g = branch("else", [helper.make_node("Concat", ["x", "x"], ["xx"], axis=0),
                             helper.make_node("Reshape", ["xx", "flat"], ["e"])], "e",
                    [numpy_helper.from_array(np.array([-1], np.int64), "flat")])
    g = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
         helper.make_node("Relu", ["y"], ["z"])], "if_rank",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
         helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "if.onnx"))
    kiln.compile(tmp_path / "if.onnx", tmp_path / "if.kiln")
    m = kiln.load(tmp_path / "if.kiln")
    assert m.outputs[0].rank_alternatives == [[3, 4], [24]]
    assert m.outputs[0].shape == [24]
    x = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
    for c in (True, False, True):
        want = np.maximum(x * 2 if c else np.concatenate([x, x]).reshape(-1), 0)
        got = m.run({"x": x, "c": np.array(c)})["z"]
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def _if_model(path, cond_nodes, then_nodes, else_nodes, inits, then_inits=(), else_inits=()):
    from onnx import numpy_helper
    out = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
    then_g = helper.make_graph(then_nodes, "then", [], [out("t_out")],
                               [numpy_helper.from_array(v, k) for k, v in then_inits])
    else_g = helper.make_graph(else_nodes, "else", [], [out("e_out")],
                               [numpy_helper.from_array(v, k) for k, v in else_inits])
    g = helper.make_graph(
        cond_nodes + [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
                      helper.make_node("Sigmoid", ["y"], ["z"])], "if_sym",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])], [out("z")],
        [numpy_helper.from_array(v, k) for k, v in inits])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def _sigmoid(v):
    return 1 / (1 + np.exp(-v))


def test_if_over_symbolic_dims_with_shape_arithmetic_in_its_branches(tmp_path):
    """x[N, 4], N symbolic; the condition is data (sum(x) > 0). then:
    Reshape(x, [Shape(x)[0], 2, -1]) with Shape computed outside the If;
    else: ReduceSum(Reshape(x, [Shape(x)[1], -1]), axis 1) computed inside.
    Each N gets one plan; both branches run in it. Compared with NumPy."""
    i64 = lambda *v: np.array(v, np.int64)
    _if_model(tmp_path / "m.onnx",
              [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("ReduceSum", ["x"], ["tot"], keepdims=0),
               helper.make_node("Greater", ["tot", "fz"], ["c"])],
              [helper.make_node("Gather", ["s", "zero"], ["n0"], axis=0),
               helper.make_node("Unsqueeze", ["n0", "ax0"], ["n1"]),
               helper.make_node("Concat", ["n1", "tail"], ["tgt"], axis=0),
               helper.make_node("Reshape", ["x", "tgt"], ["t_out"])],
              [helper.make_node("Shape", ["x"], ["xs"]), helper.make_node("Slice", ["xs", "b1", "e2"], ["last"]),
               helper.make_node("Concat", ["last", "m1"], ["tgt2"], axis=0),
               helper.make_node("Reshape", ["x", "tgt2"], ["r2"]),
               helper.make_node("ReduceSum", ["r2", "ax1"], ["e_out"], keepdims=0)],
              [("fz", np.array(0, np.float32))],
              [("zero", np.array(0, np.int64)), ("ax0", i64(0)), ("tail", i64(2, -1))],
              [("b1", i64(1)), ("e2", i64(2)), ("m1", i64(-1)), ("ax1", i64(1))])
    kiln.compile(tmp_path / "m.onnx", tmp_path / "m.kiln")
    m = kiln.load(tmp_path / "m.kiln")
    assert m.outputs[0].shape == [-1, -1, -1]
    assert len(m.outputs[0].rank_alternatives) == 2
    for n in (3, 1, 5, 3, 1):
        for sign in (1, -1):
            x = (np.arange(n * 4, dtype=np.float32) * 0.25 + 0.5).reshape(n, 4) * sign
            want = _sigmoid(x.reshape(n, 2, -1) if sign > 0 else x.reshape(4, -1).sum(1))
            got = m.run({"x": x})["z"]
            assert got.shape == want.shape, (n, sign)
            np.testing.assert_allclose(got, want, rtol=1e-6)
    assert m.plan_stats()["created"] == 3


def test_static_part_of_a_symbolic_model_keeps_its_kernels(tmp_path):
    """img [1, 4, 6, 6] is static: Conv + Relu + GlobalAveragePool + Flatten
    -> p [1, 8]; x [N, 5] is symbolic: y = x @ V + p. Each N gets a plan;
    the static part's kernels are made by the first and reused by the
    others. Compared with NumPy at each N."""
    rng = np.random.default_rng(7)
    w = rng.standard_normal((8, 4, 3, 3)).astype(np.float32)
    v = rng.standard_normal((5, 8)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Conv", ["img", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("GlobalAveragePool", ["r"], ["gp"]), helper.make_node("Flatten", ["gp"], ["p"]),
         helper.make_node("MatMul", ["x", "v"], ["m"]), helper.make_node("Add", ["m", "p"], ["y"])], "static_part",
        [helper.make_tensor_value_info("img", TensorProto.FLOAT, [1, 4, 6, 6]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(v, "v")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(tmp_path / "m.onnx"))
    kiln.compile(tmp_path / "m.onnx", tmp_path / "m.kiln")
    m = kiln.load(tmp_path / "m.kiln")
    img = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    pad = np.pad(img[0].astype(np.float64), ((0, 0), (1, 1), (1, 1)))
    conv = np.zeros((8, 6, 6))
    for o in range(8):
        for i in range(6):
            for j in range(6):
                conv[o, i, j] = np.sum(pad[:, i:i + 3, j:j + 3] * w[o])
    p = np.maximum(conv, 0).mean(axis=(1, 2))[None, :]
    for n in (1, 3, 7, 3):
        x = rng.standard_normal((n, 5)).astype(np.float32)
        np.testing.assert_allclose(m.run({"img": img, "x": x})["y"], x.astype(np.float64) @ v + p, rtol=1e-4, atol=1e-4)
    s = m.plan_stats()
    assert s["created"] == 3, s
    # Each static kernel made once (by the plan for N = 1), reused by the two others.
    assert s["static_kernels_made"] >= 2 and s["static_kernels_shared"] == 2 * s["static_kernels_made"], s


def test_static_node_reading_a_shape_inputs_values_makes_its_kernel_per_plan(tmp_path):
    """t [2] is a shape input (Reshape's target); k = t[0] feeds a Trilu of a
    constant [4, 4]: fixed shapes, but each plan folds its own k into a
    constant, so the Trilu's kernel is not shared between plans. Compared
    with NumPy for several t."""
    g = helper.make_graph(
        [helper.make_node("Reshape", ["x", "t"], ["r"]), helper.make_node("Gather", ["t", "zero"], ["k"], axis=0),
         helper.make_node("Trilu", ["ones", "k"], ["tri"], upper=1)], "trilu_k",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
         helper.make_tensor_value_info("t", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("r", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("tri", TensorProto.FLOAT, [4, 4])],
        [numpy_helper.from_array(np.array(0, np.int64), "zero"),
         numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(4, 4) + 1, "ones")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)]), str(tmp_path / "m.onnx"))
    kiln.compile(tmp_path / "m.onnx", tmp_path / "m.kiln")
    m = kiln.load(tmp_path / "m.kiln")
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    ones = np.arange(16, dtype=np.float32).reshape(4, 4) + 1
    for t in ([3, 4], [1, 12], [2, 6], [3, 4], [-1, 3]):
        out = m.run({"x": x, "t": np.array(t, np.int64)})
        np.testing.assert_array_equal(out["r"], x.reshape(t))
        np.testing.assert_array_equal(out["tri"], np.triu(ones, t[0]), err_msg=str(t))


def test_if_whose_condition_follows_a_symbolic_dim(tmp_path):
    """x[N, 4]; c = N > 1 (from Shape): then 2x [N, 4], else x flattened
    [4]: each plan takes one branch, of its own rank. Compared with NumPy."""
    _if_model(tmp_path / "m.onnx",
              [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
               helper.make_node("Greater", ["n", "one"], ["c"])],
              [helper.make_node("Mul", ["x", "two"], ["t_out"])],
              [helper.make_node("Reshape", ["x", "flat"], ["e_out"])],
              [("zero", np.array(0, np.int64)), ("one", np.array(1, np.int64))],
              [("two", np.array(2, np.float32))], [("flat", np.array([-1], np.int64))])
    kiln.compile(tmp_path / "m.onnx", tmp_path / "m.kiln")
    m = kiln.load(tmp_path / "m.kiln")
    for n in (1, 4, 1, 2):
        x = np.arange(n * 4, dtype=np.float32).reshape(n, 4) - 3
        want = _sigmoid(2 * x if n > 1 else x.reshape(-1))
        got = m.run({"x": x})["z"]
        assert got.shape == want.shape, n
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert m.plan_stats()["created"] == 3


def test_if_branch_valid_only_where_its_condition_holds(tmp_path):
    """x[N, 4]; c = (N == 1): then Squeeze(x, 0) -> [4], valid only at N = 1;
    else 2x. The compiler probes N at another extent, where the condition
    rules the Squeeze out: the branch is kept uncompiled, and the plans for
    N = 1 compile and run it. Compared with NumPy. With c = (N < 3) the
    Squeeze is taken at N = 2, where it cannot apply: that plan fails,
    naming the node and the shapes."""
    squeeze = lambda: [helper.make_node("Squeeze", ["x", "ax0"], ["t_out"])]
    for path, cmp in (("eq.onnx", "Equal"), ("lt.onnx", "Less")):
        _if_model(tmp_path / path,
                  [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
                   helper.make_node(cmp, ["n", "one" if cmp == "Equal" else "three"], ["c"])],
                  squeeze(), [helper.make_node("Mul", ["x", "two"], ["e_out"])],
                  [("zero", np.array(0, np.int64)), ("one", np.array(1, np.int64)), ("three", np.array(3, np.int64))],
                  [("ax0", np.array([0], np.int64))], [("two", np.array(2, np.float32))])
        kiln.compile(tmp_path / path, tmp_path / (path + ".kiln"))
    m = kiln.load(tmp_path / "eq.onnx.kiln")
    for n in (3, 1, 5, 1, 2):
        x = np.arange(n * 4, dtype=np.float32).reshape(n, 4) - 3
        want = _sigmoid(x.reshape(4) if n == 1 else 2 * x)
        got = m.run({"x": x})["z"]
        assert got.shape == want.shape, n
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert m.plan_stats()["created"] == 4
    m = kiln.load(tmp_path / "lt.onnx.kiln")
    np.testing.assert_allclose(m.run({"x": np.ones((1, 4), np.float32)})["z"], _sigmoid(np.ones(4)), rtol=1e-6)
    np.testing.assert_allclose(m.run({"x": np.ones((4, 4), np.float32)})["z"], _sigmoid(2 * np.ones((4, 4))), rtol=1e-6)
    with pytest.raises(kiln.Error, match=r"Squeeze.*cannot squeeze axis 0 of size 2"):
        m.run({"x": np.ones((2, 4), np.float32)})


def test_uncompiled_branch_yielding_an_input_with_its_condition_an_output(tmp_path):
    """As above (then: Squeeze of N, valid only at N = 1, kept uncompiled),
    with the branch also yielding the captured x itself as a second output,
    and the condition a model output too (so plans keep it as a value, not
    a constant). Compared with NumPy."""
    out = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
    then_g = helper.make_graph([helper.make_node("Squeeze", ["x", "ax0"], ["t_out"])], "then", [],
                               [out("t_out"), out("x")], [numpy_helper.from_array(np.array([0], np.int64), "ax0")])
    else_g = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["e_out"]), helper.make_node("Neg", ["x"], ["e2"])],
                               "else", [], [out("e_out"), out("e2")],
                               [numpy_helper.from_array(np.array(2, np.float32), "two")])
    g = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
         helper.make_node("Equal", ["n", "one"], ["c"]),
         helper.make_node("If", ["c"], ["y", "y2"], then_branch=then_g, else_branch=else_g),
         helper.make_node("Sigmoid", ["y"], ["z"])], "if_out",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [out("z"), out("y2"), helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [numpy_helper.from_array(np.array(0, np.int64), "zero"), numpy_helper.from_array(np.array(1, np.int64), "one")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "m.onnx"))
    kiln.compile(tmp_path / "m.onnx", tmp_path / "m.kiln")
    m = kiln.load(tmp_path / "m.kiln")
    for n in (3, 1, 2, 1):
        x = np.arange(n * 4, dtype=np.float32).reshape(n, 4) - 3
        got = m.run({"x": x})
        assert bool(got["c"]) == (n == 1)
        np.testing.assert_allclose(got["z"], _sigmoid(x.reshape(4) if n == 1 else 2 * x), rtol=1e-6)
        np.testing.assert_array_equal(got["y2"], x if n == 1 else -x)


def test_if_reading_a_value_shaped_by_a_shape_input(tmp_path):
    """r = Reshape(x, t), t a model input (a shape input); If(c) reads r:
    then -r, else 3r. One plan per target; compared with NumPy."""
    from onnx import numpy_helper
    out = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
    then_g = helper.make_graph([helper.make_node("Neg", ["r"], ["t_out"])], "then", [], [out("t_out")])
    else_g = helper.make_graph([helper.make_node("Mul", ["r", "k"], ["e_out"])], "else", [], [out("e_out")],
                               [numpy_helper.from_array(np.array(3, np.float32), "k")])
    g = helper.make_graph(
        [helper.make_node("Reshape", ["x", "t"], ["r"]),
         helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)], "if_shape_input",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
         helper.make_tensor_value_info("t", TensorProto.INT64, [2]),
         helper.make_tensor_value_info("c", TensorProto.BOOL, [])], [out("y")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "m.onnx"))
    kiln.compile(tmp_path / "m.onnx", tmp_path / "m.kiln")
    m = kiln.load(tmp_path / "m.kiln")
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    for t in ([3, 4], [6, 2], [12, 1], [3, 4]):
        for c in (True, False):
            got = m.run({"x": x, "t": np.array(t, np.int64), "c": np.array(c)})["y"]
            np.testing.assert_array_equal(got, (-x if c else 3 * x).reshape(t))
            assert got.shape == tuple(t)
    assert m.plan_stats()["created"] == 3


def test_padding_mask_from_a_batch_of_lengths(tmp_path):
    """A speech model's padding mask: lens[B] (B symbolic) -> Range(0,
    max(lens)) < lens[:, None] -> mask[B, max(lens)]. lens decides shapes
    (a shape input of symbolic size); compared with NumPy."""
    from onnx import numpy_helper
    g = helper.make_graph(
        [helper.make_node("ReduceMax", ["lens"], ["mx"], keepdims=0),
         helper.make_node("Range", ["z0", "mx", "o1"], ["r"]),
         helper.make_node("Unsqueeze", ["lens", "ax1"], ["l2"]),
         helper.make_node("Less", ["r", "l2"], ["mask"])], "pad_mask",
        [helper.make_tensor_value_info("lens", TensorProto.INT64, ["B"])],
        [helper.make_tensor_value_info("mask", TensorProto.BOOL, None)],
        [numpy_helper.from_array(np.array(0, np.int64), "z0"), numpy_helper.from_array(np.array(1, np.int64), "o1"),
         numpy_helper.from_array(np.array([1], np.int64), "ax1")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "m.onnx"))
    kiln.compile(tmp_path / "m.onnx", tmp_path / "m.kiln")
    m = kiln.load(tmp_path / "m.kiln")
    assert m.inputs[0].shape_input and m.inputs[0].shape == [-1]
    for lens in ([3, 1, 2], [5], [2, 2, 2, 2], [3, 1, 2], [1] * 200):
        lv = np.array(lens, np.int64)
        got = m.run({"lens": lv})["mask"]
        np.testing.assert_array_equal(got, np.arange(lv.max())[None, :] < lv[:, None])
    assert m.plan_stats()["created"] == 4
    with pytest.raises(kiln.Error, match="'lens' decides shapes .* limits it to 65536 bytes; it has shape \\[9000\\]"):
        m.run({"lens": np.ones(9000, np.int64)})


def test_topk_of_a_data_dependent_count(tmp_path):
    """A detector's post-processing (torchvision's): the candidates above a
    threshold (NonZero), K = min(5, their count) computed from Shape ->
    Gather -> Concat -> ReduceMin, TopK with that K, and labels =
    ConstantOfShape(Shape(top scores)), and the candidates reshaped to
    [count, 1] (a view whose target the run computes). K's bound (5) sizes
    memory; each run reads K. Compared with NumPy (a stable descending sort)."""
    from onnx import numpy_helper
    c = lambda name, v: numpy_helper.from_array(np.array(v, np.int64 if isinstance(v, (int, list)) else np.float32),
                                                name)
    g = helper.make_graph(
        [helper.make_node("Greater", ["scores", "th"], ["m"]), helper.make_node("NonZero", ["m"], ["nz"]),
         helper.make_node("Reshape", ["nz", "m1"], ["nzf"]),
         helper.make_node("Gather", ["scores", "nzf"], ["s"], axis=0),
         helper.make_node("Shape", ["s"], ["ss"]), helper.make_node("Gather", ["ss", "z"], ["n"], axis=0),
         helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]), helper.make_node("Concat", ["n1", "five"], ["c"], axis=0),
         helper.make_node("ReduceMin", ["c"], ["k0"], keepdims=0), helper.make_node("Reshape", ["k0", "one"], ["k"]),
         helper.make_node("TopK", ["s", "k"], ["vals", "idx"]), helper.make_node("Shape", ["vals"], ["vs"]),
         helper.make_node("ConstantOfShape", ["vs"], ["labels"],
                          value=numpy_helper.from_array(np.array([7], np.int64))),
         # A view whose target follows the count: Reshape(s, [n, 1]).
         helper.make_node("Concat", ["n1", "one"], ["col"], axis=0),
         helper.make_node("Reshape", ["s", "col"], ["s_col"])], "topk_count",
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [20])],
        [helper.make_tensor_value_info("vals", TensorProto.FLOAT, [None]),
         helper.make_tensor_value_info("idx", TensorProto.INT64, [None]),
         helper.make_tensor_value_info("labels", TensorProto.INT64, [None]),
         helper.make_tensor_value_info("s_col", TensorProto.FLOAT, [None, 1])],
        [c("th", 0.5), c("m1", [-1]), c("z", 0), c("ax0", [0]), c("five", [5]), c("one", [1])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(tmp_path / "m.onnx"))
    kiln.compile(tmp_path / "m.onnx", tmp_path / "m.kiln")
    m = kiln.load(tmp_path / "m.kiln")
    assert m.outputs[0].shape == [5] and m.outputs[0].dynamic_dims == [0]
    rng = np.random.default_rng(0)
    for t in range(12):
        sc = rng.random(20).astype(np.float32)
        if t % 4 == 0:
            sc[:17] = 0  # 0 to 3 candidates: K below its bound
        if t % 6 == 0:
            sc[:] = 0.1  # none
        s = sc[sc > 0.5]
        order = np.argsort(-s, kind="stable")[:min(5, len(s))]
        out = m.run({"scores": sc})
        np.testing.assert_array_equal(out["vals"], s[order])
        np.testing.assert_array_equal(out["idx"], order)
        np.testing.assert_array_equal(out["labels"], np.full(len(order), 7))
        np.testing.assert_array_equal(out["s_col"], s.reshape(-1, 1))


def test_file_id_weights_from_a_path_or_a_buffer():
    """file_id.kiln (tests/capi/make_file_id_model.cc): y = x + w, w a
    graph-API FileConstant "w-table" at offset 8 of w_table.bin; w[i] = 0.5 i
    (the same W as above)."""
    models = os.environ["KILN_TEST_MODELS"]
    path = os.path.join(models, "file_id.kiln")
    table = os.path.join(models, "w_table.bin")
    x = np.array([[1, -2, 3], [-4, 5, -6]], np.float32)
    with pytest.raises(kiln.InvalidArgument, match="reads file_id 'w-table'"):
        kiln.load(path)
    from pathlib import Path
    for source in (table, Path(table), np.fromfile(table, np.uint8), open(table, "rb").read()):
        m = kiln.load(path, weight_files={"w-table": source})
        np.testing.assert_array_equal(m.run({"x": x})["y"], x + W)
        s = m.summary()
        assert [(w.file_id, w.path, w.offset, w.size) for w in s.external_weights] == [("w-table", "", 8, 24)]
    with pytest.raises(kiln.InvalidArgument, match="needs bytes \\[8, 32\\) = 32 bytes required, 16 provided"):
        kiln.load(path, weight_files={"w-table": np.zeros(4, np.float32)})
    with pytest.raises(kiln.InvalidArgument, match="expected a path"):
        kiln.load(path, weight_files={"w-table": 3})
