"""Hostile shapes (issue 9 item 3): initializers whose declared dims overflow
(with short data), Reshape / Expand / Tile / ConstantOfShape / Range / Pad /
Resize targets whose size overflows or exceeds the per-tensor limit, huge
attribute values (block, kernel, stride, dilation, group sizes) and huge
--input-shape dims. Every one must fail at compile with exit status 1 and a
message naming the initializer, node or input -- no division by zero, no
std::bad_alloc, no read past a buffer, no "unresolved shape" message."""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from run_hostile import Case

CLASS = "shapes"

BIG = 2 ** 40          # one dim over the 64 GiB limit
WRAP = 2 ** 32         # squares to 2^64: wraps to 0 in unchecked int64 arithmetic


def vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def model(nodes, inputs, outputs, inits=(), opset=13):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def raw_init(name, dims, data, dtype=TensorProto.FLOAT):
    t = TensorProto()
    t.name = name
    t.data_type = dtype
    t.dims.extend(dims)
    t.raw_data = data
    return t


def ints(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def generate(ctx):
    d = ctx.dir(CLASS)
    cases = []
    out_kiln = os.path.join(d, "out.kiln")

    def compile_case(name, m, needles, extra=()):
        path = os.path.join(d, name + ".onnx")
        onnx.save(m, path)
        cases.append(Case(name, ["compile", "--model", path, "--output", out_kiln, *extra], needles,
                          check=lambda out: "unresolved" in out and "message claims unresolved dims" or None))

    def add_init(init, shape=(4,)):
        return model([helper.make_node("Add", ["x", init.name], ["y"], name="add")],
                     [vi("x", list(shape))], [vi("y", list(shape))], inits=[init])

    # -- initializers: declared dims checked before any read or allocation --
    # overflowing dims, 16 bytes of data (folding read past the buffer)
    compile_case("init_dims_overflow_short_raw", add_init(raw_init("w_ovf", [WRAP, WRAP, 4], b"\0" * 16)),
                 ["w_ovf"])
    # count fits int64, bytes do not
    compile_case("init_bytes_overflow", add_init(raw_init("w_bytes", [2 ** 62], b"\0" * 16)), ["w_bytes"])
    # within int64 but over the 64 GiB limit (ended in std::bad_alloc)
    compile_case("init_over_limit", add_init(raw_init("w_huge", [BIG], b"\0" * 16)), ["w_huge"])
    # typed field shorter than the dims
    t = helper.make_tensor("w_typed", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])
    del t.dims[:]
    t.dims.extend([3, 2 ** 61])
    compile_case("init_typed_short", add_init(t), ["w_typed"])
    # int32 data with more elements than dims (was copied before the check)
    t = helper.make_tensor("w_int32", TensorProto.INT32, [2], [1, 2])
    t.int32_data.extend(range(1000))
    compile_case("init_int32_long", model([helper.make_node("Add", ["x", "w_int32"], ["y"], name="add")],
                                          [vi("x", [2], TensorProto.INT32)], [vi("y", [2], TensorProto.INT32)],
                                          inits=[t]), ["w_int32"])
    # raw data one byte short
    compile_case("init_raw_short", add_init(raw_init("w_short", [4], b"\0" * 15)), ["w_short"])
    # negative dim
    compile_case("init_negative_dim", add_init(raw_init("w_neg", [-4], b"")), ["w_neg"])
    # a Constant node's tensor too
    c = helper.make_node("Constant", [], ["k"], name="konst", value=raw_init("kval", [WRAP, WRAP], b"\0" * 8))
    compile_case("constant_node_overflow", model([c, helper.make_node("Add", ["x", "k"], ["y"], name="add")],
                                                 [vi("x", [4])], [vi("y", [4])]), ["konst"])

    # -- shape inference: every output checked, arithmetic overflow-checked --
    def reshape(name, target, in_shape=(4,)):
        compile_case(name, model([helper.make_node("Reshape", ["x", "t"], ["y"], name=name)],
                                 [vi("x", list(in_shape))], [vi("y", None)], inits=[ints("t", target)]), [name])
    reshape("reshape_overflow", [WRAP, WRAP, 4])
    reshape("reshape_over_limit", [BIG, 1])
    reshape("reshape_zero_copy_huge", [0, BIG], in_shape=(0, 4))
    reshape("reshape_infer_with_huge", [-1, 2 ** 62])
    compile_case("expand_huge", model([helper.make_node("Expand", ["x", "s"], ["y"], name="expand_huge")],
                                      [vi("x", [1, 1])], [vi("y", None)], inits=[ints("s", [WRAP, WRAP])]),
                 ["expand_huge"])
    compile_case("tile_overflow", model([helper.make_node("Tile", ["x", "r"], ["y"], name="tile_overflow")],
                                        [vi("x", [4, 4])], [vi("y", None)], inits=[ints("r", [2 ** 62, 4])]),
                 ["tile_overflow"])
    compile_case("constant_of_shape_huge",
                 model([helper.make_node("ConstantOfShape", ["s"], ["y"], name="cos_huge")], [], [vi("y", None)],
                       inits=[ints("s", [WRAP, WRAP, WRAP])]), ["cos_huge"])
    compile_case("range_huge", model([helper.make_node("Range", ["s", "l", "dl"], ["y"], name="range_huge")],
                                     [], [vi("y", None, TensorProto.INT64)],
                                     inits=[ints("s", -2 ** 62), ints("l", 2 ** 62), ints("dl", 1)]), ["range_huge"])
    f32 = lambda n, v: numpy_helper.from_array(np.array(v, dtype=np.float32), n)
    compile_case("range_float_inf", model([helper.make_node("Range", ["s", "l", "dl"], ["y"], name="range_inf")],
                                          [], [vi("y", None)],
                                          inits=[f32("s", 0), f32("l", 3e38), f32("dl", 1e-30)]), ["range_inf"])
    compile_case("pad_huge", model([helper.make_node("Pad", ["x", "p"], ["y"], name="pad_huge")],
                                   [vi("x", [4])], [vi("y", None)], inits=[ints("p", [2 ** 62, 2 ** 62])]),
                 ["pad_huge"])
    compile_case("resize_huge_scale", model(
        [helper.make_node("Resize", ["x", "", "sc"], ["y"], name="resize_huge")], [vi("x", [1, 1, 4, 4])],
        [vi("y", None)], inits=[f32("sc", [1, 1, 1e30, 1e30])]), ["resize_huge"])

    # folded at compile by the CPU kernels: extreme values must not overflow
    # (checked by the sanitizer build; the compile itself succeeds)
    ok_path = lambda name: os.path.join(d, name + ".onnx")
    m = model([helper.make_node("Range", ["s", "l", "dl"], ["y"], name="range_extremes")], [],
              [vi("y", None, TensorProto.INT64)],
              inits=[ints("s", -2 ** 63), ints("l", 2 ** 63 - 1), ints("dl", 2 ** 63 - 1)])
    onnx.save(m, ok_path("range_int64_extremes"))
    cases.append(Case("range_int64_extremes", ["compile", "--model", ok_path("range_int64_extremes"), "--output",
                                               out_kiln], [], rc=0))
    m = model([helper.make_node("Trilu", ["t", "k"], ["y"], name="trilu_k_max")], [], [vi("y", None)],
              inits=[numpy_helper.from_array(np.ones((3, 3), np.float32), "t"), ints("k", 2 ** 63 - 1)], opset=14)
    onnx.save(m, ok_path("trilu_k_extreme"))
    cases.append(Case("trilu_k_extreme", ["compile", "--model", ok_path("trilu_k_extreme"), "--output", out_kiln],
                      [], rc=0))

    # Resize of a constant with a non-finite roi: coordinates become inf/NaN
    m = model([helper.make_node("Resize", ["t", "roi", "sc"], ["y"], name="resize_roi_inf", mode="linear",
                                coordinate_transformation_mode="tf_crop_and_resize")], [], [vi("y", None)],
              inits=[numpy_helper.from_array(np.ones((1, 1, 2, 2), np.float32), "t"),
                     f32("roi", [0, 0, -np.inf, np.nan, 1, 1, np.inf, 1e30]), f32("sc", [1, 1, 2, 2])])
    onnx.save(m, ok_path("resize_roi_inf"))
    cases.append(Case("resize_roi_inf", ["compile", "--model", ok_path("resize_roi_inf"), "--output", out_kiln],
                      [], rc=0))

    # -- huge attribute values: no division by zero, no overflow ------------
    def d2s(name, op, b, shape=(1, 16, 4, 4)):
        compile_case(name, model([helper.make_node(op, ["x"], ["y"], name=name, blocksize=b)],
                                 [vi("x", list(shape))], [vi("y", None)]), [name, "blocksize"])
    d2s("depth_to_space_wrap", "DepthToSpace", WRAP)       # b*b == 0 -> x % 0 before
    d2s("depth_to_space_huge", "DepthToSpace", 2 ** 62)
    d2s("space_to_depth_wrap", "SpaceToDepth", WRAP)
    d2s("space_to_depth_huge", "SpaceToDepth", 2 ** 62)

    def pool(name, needle, **attrs):
        compile_case(name, model([helper.make_node("MaxPool", ["x"], ["y"], name=name, **attrs)],
                                 [vi("x", [1, 1, 8, 8])], [vi("y", None)]), [name, needle])
    pool("maxpool_kernel_huge", "kernel", kernel_shape=[2 ** 62, 2])
    pool("maxpool_stride_huge", "strides", kernel_shape=[2, 2], strides=[2 ** 63 - 1, 1])
    pool("maxpool_dilation_overflow", "kernel extent", kernel_shape=[3, 3], dilations=[2 ** 35, 1])
    pool("maxpool_pad_huge", "pads", kernel_shape=[2, 2], pads=[0, 0, 2 ** 62, 0])
    pool("maxpool_same_stride_huge", "strides", kernel_shape=[2, 2], strides=[2 ** 62, 1], auto_pad="SAME_UPPER")
    w = numpy_helper.from_array(np.zeros((4, 1, 3, 3), np.float32), "w")
    compile_case("conv_group_huge", model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv_group", group=2 ** 62)],
                                          [vi("x", [1, 4, 8, 8])], [vi("y", None)], inits=[w]), ["conv_group", "group"])
    compile_case("conv_dilation_huge", model(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="conv_dil", group=4, dilations=[2 ** 62, 1])],
        [vi("x", [1, 4, 8, 8])], [vi("y", None)], inits=[w]), ["conv_dil", "dilations"])
    wt = numpy_helper.from_array(np.zeros((4, 1, 3, 3), np.float32), "wt")
    compile_case("conv_transpose_stride_huge", model(
        [helper.make_node("ConvTranspose", ["x", "wt"], ["y"], name="deconv", strides=[2 ** 40, 1])],
        [vi("x", [1, 4, 8, 8])], [vi("y", None)], inits=[wt]), ["deconv", "strides"])
    compile_case("conv_transpose_group_huge", model(
        [helper.make_node("ConvTranspose", ["x", "wt"], ["y"], name="deconv_g", group=2 ** 62)],
        [vi("x", [1, 4, 8, 8])], [vi("y", None)], inits=[wt]), ["deconv_g", "group"])

    # -- --input-shape and declared input dims ------------------------------
    relu = model([helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", ["N", "C"])], [vi("y", ["N", "C"])])
    path = os.path.join(d, "relu_dyn.onnx")
    onnx.save(relu, path)
    for name, spec in (("input_shape_overflow", f"x:{WRAP},{WRAP}"), ("input_shape_over_limit", f"x:{BIG},1"),
                       ("input_shape_bytes_over_limit", f"x:{2 ** 34},2"), ("input_shape_zero_huge", f"x:0,{2 ** 62}")):
        cases.append(Case(name, ["compile", "--model", path, "--output", out_kiln, "--input-shape", spec],
                          ["'x'", "--input-shape"],
                          check=lambda out: "unresolved" in out and "message claims unresolved dims" or None))
    compile_case("declared_input_overflow", model([helper.make_node("Relu", ["x"], ["y"], name="r")],
                                                  [vi("x", [WRAP, WRAP])], [vi("y", [WRAP, WRAP])]), ["'x'"])
    compile_case("declared_input_negative", model([helper.make_node("Relu", ["x"], ["y"], name="r")],
                                                  [vi("x", [-7, 4])], [vi("y", [4])]), ["'x'"])
    return cases
