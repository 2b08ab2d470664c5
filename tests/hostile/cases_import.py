"""Hostile ONNX models at import (issue 9 items 1, 4 and 11): Kiln's internal
domain and attributes (the host file disclosure through FileConstant +
kiln.base_dir), external data that escapes the model's directory or its file,
names that are not valid UTF-8, attributes of the wrong type, pooling pads
that cover a whole window, and a model path that is a FIFO. Every model must
be refused with exit status 1 and a message naming the culprit."""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from run_hostile import Case

CLASS = "import"


def model(nodes, inputs, outputs, inits=(), opset=13, name="g"):
    g = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def relu(name="r", x="x", y="y", shape=(1, 4)):
    return model([helper.make_node("Relu", [x], [y], name=name)], [vi(x, list(shape))], [vi(y, list(shape))])


def external_init(name, dims, location, offset=None, length=None, dtype=TensorProto.FLOAT):
    t = TensorProto()
    t.name = name
    t.data_type = dtype
    t.dims.extend(dims)
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", offset), ("length", length)):
        if v is not None:
            e = t.external_data.add()
            e.key, e.value = k, str(v)
    return t


def add_with_weight(init, shape=(4,)):
    """y = x + w with w an initializer."""
    return model([helper.make_node("Add", ["x", init.name], ["y"], name="add")],
                 [vi("x", list(shape))], [vi("y", list(shape))], inits=[init])


def patched(m, pairs):
    """Serialises `m` and replaces same-length byte strings (protobuf refuses
    to store invalid UTF-8 in string fields, the file format does not)."""
    data = m.SerializeToString()
    for old, new in pairs:
        assert len(old) == len(new) and old in data, old
        data = data.replace(old, new)
    return data


def generate(ctx):
    d = ctx.dir(CLASS)
    cases = []
    out_kiln = os.path.join(d, "out.kiln")

    def save(name, m):
        path = os.path.join(d, name + ".onnx")
        if isinstance(m, bytes):
            with open(path, "wb") as f:
                f.write(m)
        else:
            onnx.save(m, path)
        return path

    def compile_case(name, m, needles, extra=()):
        cases.append(Case(name, ["compile", "--model", save(name, m), "--output", out_kiln, *extra], needles))

    # -- item 1: Kiln's internal domain and attributes ---------------------
    # The reported attack: FileConstant in domain 'kiln' with kiln.base_dir
    # pointing at /etc copied /etc/passwd into the .kiln.
    size = os.path.getsize("/etc/passwd")
    fc = helper.make_node("FileConstant", [], ["secret"], name="steal", domain="kiln",
                          location="passwd", offset=0, length=size, dtype=TensorProto.UINT8, shape=[size])
    fc.attribute.append(helper.make_attribute("kiln.base_dir", "/etc"))
    m = helper.make_graph([fc, helper.make_node("Identity", ["secret"], ["y"], name="id")], "g", [],
                          [vi("y", [size], TensorProto.UINT8)])
    m = helper.make_model(m, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("kiln", 1)])
    compile_case("filecontant_base_dir_etc", m, ["steal", "'kiln'", "internal"])
    # the same node without the internal attribute: still Kiln's domain
    fc2 = helper.make_node("FileConstant", [], ["secret"], name="steal2", domain="kiln",
                           location="weight_x", offset=0, length=16, dtype=TensorProto.FLOAT, shape=[4])
    m = helper.make_model(helper.make_graph([fc2], "g", [], [vi("secret", [4])]),
                          opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("kiln", 1)])
    compile_case("filecontant_plain", m, ["steal2", "'kiln'"])
    # any sub-domain of kiln (other than kiln.custom)
    n = helper.make_node("Relu", ["x"], ["y"], name="inner", domain="kiln.internal")
    m = model([n], [vi("x", [4])], [vi("y", [4])])
    m.opset_import.append(helper.make_opsetid("kiln.internal", 1))
    compile_case("kiln_subdomain", m, ["inner", "kiln.internal"])
    # internal attributes on an ordinary node
    for attr, value in (("kiln.base_dir", "/etc"), ("kiln.inserted_for", "r"), ("kiln.activation", "Relu"),
                        ("kiln.nhwc", 1), ("kiln.sha256", "00" * 32), ("kiln.alias", 0)):
        n = helper.make_node("Relu", ["x"], ["y"], name="relu_" + attr.split(".")[1])
        n.attribute.append(helper.make_attribute(attr, value))
        compile_case("attr_" + attr.replace(".", "_"), model([n], [vi("x", [4])], [vi("y", [4])]),
                     ["relu_" + attr.split(".")[1], attr])
    # an internal attribute inside an If branch
    br = helper.make_graph([helper.make_node("Relu", ["x"], ["b"], name="deep", **{})], "then", [], [vi("b", [4])])
    br.node[0].attribute.append(helper.make_attribute("kiln.activation", "Relu"))
    el = helper.make_graph([helper.make_node("Identity", ["x"], ["e"], name="el")], "else", [], [vi("e", [4])])
    m = model([helper.make_node("If", ["c"], ["y"], name="branchy", then_branch=br, else_branch=el)],
              [vi("c", [], TensorProto.BOOL), vi("x", [4])], [vi("y", [4])])
    compile_case("attr_internal_in_branch", m, ["deep", "kiln.activation", "branchy"])

    # -- item 1: external data only inside the model's directory -----------
    outside = os.path.join(ctx.work, "outside_" + CLASS)
    os.makedirs(outside, exist_ok=True)
    with open(os.path.join(outside, "w.bin"), "wb") as f:
        f.write(np.arange(4, dtype=np.float32).tobytes())
    with open(os.path.join(d, "w.bin"), "wb") as f:
        f.write(np.arange(4, dtype=np.float32).tobytes())
    link = os.path.join(d, "escape_link.bin")
    if not os.path.lexists(link):
        os.symlink(os.path.join(outside, "w.bin"), link)
    dlink = os.path.join(d, "escape_dir")
    if not os.path.lexists(dlink):
        os.symlink(outside, dlink)
    for name, loc in (("ext_dotdot", "../outside_import/w.bin"), ("ext_absolute", "/etc/passwd"),
                      ("ext_symlink_file", "escape_link.bin"), ("ext_symlink_dir", "escape_dir/w.bin"),
                      ("ext_etc_passwd_dotdot", "../../../../../../../../etc/passwd")):
        compile_case(name, add_with_weight(external_init("w_" + name, [4], loc)), ["w_" + name, loc])
    compile_case("ext_offset_past_end", add_with_weight(external_init("w_off", [4], "w.bin", offset=8)),
                 ["w_off", "w.bin"])
    compile_case("ext_offset_overflow",
                 add_with_weight(external_init("w_ovf", [4], "w.bin", offset=2**63 - 4)), ["w_ovf"])
    compile_case("ext_offset_not_a_number",
                 add_with_weight(external_init("w_nan", [4], "w.bin", offset="1e3")), ["w_nan", "offset"])
    compile_case("ext_offset_too_long",
                 add_with_weight(external_init("w_long", [4], "w.bin", offset="9" * 30)), ["w_long", "offset"])
    compile_case("ext_length_mismatch", add_with_weight(external_init("w_len", [4], "w.bin", length=64)),
                 ["w_len", "length"])
    compile_case("ext_no_location", add_with_weight(external_init("w_noloc", [4], None)), ["w_noloc", "location"])
    compile_case("ext_directory", add_with_weight(external_init("w_dir", [4], ".")), ["w_dir"])
    fifo = os.path.join(d, "w.fifo")

    def mkfifo(path=fifo):
        if not os.path.exists(path):
            os.mkfifo(path)
    cases.append(Case("ext_fifo", ["compile", "--model", save("ext_fifo", add_with_weight(
        external_init("w_fifo", [4], "w.fifo"))), "--output", out_kiln], ["w_fifo", "regular file"],
        before=mkfifo, timeout=30))
    # the model file itself is a FIFO: refused, not a hang
    model_fifo = os.path.join(d, "model_fifo.onnx")
    cases.append(Case("model_is_fifo", ["compile", "--model", model_fifo, "--output", out_kiln],
                      ["model_fifo.onnx", "regular file"], before=lambda: mkfifo(model_fifo), timeout=30))

    # -- item 4: names that are not valid UTF-8 -----------------------------
    def bad_name_case(name, m, old, new, needle):
        compile_case(name, patched(m, [(old, new)]), [needle])
    bad_name_case("utf8_node_name", relu(name="NODENAME"), b"NODENAME", b"NODE\xffAME", "node name")
    bad_name_case("utf8_input_name", relu(x="INPUTNAM"), b"INPUTNAM", b"INP\xc3(NAM", "input")
    bad_name_case("utf8_output_name", relu(y="OUTPUTNM"), b"OUTPUTNM", b"OUT\xed\xa0\x80NM", "output")
    bad_name_case("utf8_graph_name", model([helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", [4])],
                                           [vi("y", [4])], name="GRAPHNAM"), b"GRAPHNAM", b"GRAP\xc0\xafAM",
                  "graph name")
    bad_name_case("utf8_initializer", add_with_weight(numpy_helper.from_array(np.ones(4, np.float32), "WEIGHTNM")),
                  b"WEIGHTNM", b"WEIG\xf8TNM", "initializer")
    m = model([helper.make_node("Relu", ["x"], ["y"], name="r", domain="DOMAINNM")], [vi("x", [4])], [vi("y", [4])])
    m.opset_import.append(helper.make_opsetid("DOMAINNM", 1))
    bad_name_case("utf8_domain", m, b"DOMAINNM", b"DOMA\xfeNNM", "domain")
    m = model([helper.make_node("DepthToSpace", ["x"], ["y"], name="d2s", blocksize=2, mode="MODEVALU")],
              [vi("x", [1, 4, 2, 2])], [vi("y", [1, 1, 4, 4])])
    bad_name_case("utf8_string_attribute", m, b"MODEVALU", b"MODE\x80ALU", "'mode'")
    bad_name_case("utf8_dim_param", relu(shape=("BATCHDIM", 4)), b"BATCHDIM", b"BAT\xe2\x82DIM", "dim_param")
    n = helper.make_node("Relu", ["x"], ["y"], name="r")
    n.attribute.append(helper.make_attribute("ATTRNAME", 1))
    bad_name_case("utf8_attribute_name", model([n], [vi("x", [4])], [vi("y", [4])]), b"ATTRNAME", b"ATTR\xffAME",
                  "attribute name")

    # -- item 11: attributes of the wrong type ------------------------------
    def typed(name, op, attrs, inputs, in_shapes, out_shape, needles, opset=13, extra_inputs=()):
        n = helper.make_node(op, inputs, ["y"], name=name)
        for k, v in attrs:
            n.attribute.append(helper.make_attribute(k, v))
        compile_case("type_" + name, model([n], [vi(i, s) for i, s in zip(inputs, in_shapes)], [vi("y", out_shape)],
                                           opset=opset), needles)
    typed("softmax_axis_string", "Softmax", [("axis", "one")], ["x"], [[2, 3]], [2, 3],
          ["softmax_axis_string", "'axis'", "INT", "STRING"])
    typed("leaky_alpha_int", "LeakyRelu", [("alpha", 2)], ["x"], [[2, 3]], [2, 3],
          ["leaky_alpha_int", "'alpha'", "FLOAT", "INT"])
    typed("transpose_perm_string", "Transpose", [("perm", "1,0")], ["x"], [[2, 3]], [3, 2],
          ["transpose_perm_string", "'perm'", "INTS", "STRING"])
    typed("maxpool_kernel_floats", "MaxPool", [("kernel_shape", [2.0, 2.0])], ["x"], [[1, 1, 4, 4]], [1, 1, 3, 3],
          ["maxpool_kernel_floats", "'kernel_shape'", "INTS", "FLOATS"])
    typed("cast_to_float", "Cast", [("to", 1.0)], ["x"], [[2, 3]], [2, 3], ["cast_to_float", "'to'", "INT", "FLOAT"])
    typed("flatten_axis_ints", "Flatten", [("axis", [1])], ["x"], [[2, 3]], [2, 3],
          ["flatten_axis_ints", "'axis'", "INT", "INTS"])
    # Constant's value attributes are typed too
    c = helper.make_node("Constant", [], ["y"], name="const_f")
    c.attribute.append(helper.make_attribute("value_float", 3))
    compile_case("type_constant_value_float_int", model([c], [], [vi("y", [])]),
                 ["const_f", "'value_float'", "FLOAT", "INT"])

    # -- item 11: pooling pads that cover a whole window --------------------
    def pool(name, op, kernel, pads, shape=(1, 1, 6, 6), **kw):
        n = helper.make_node(op, ["x"], ["y"], name=name, kernel_shape=kernel, pads=pads, **kw)
        compile_case(name, model([n], [vi("x", list(shape))], [vi("y", None)]), [name, "'pads'"])
    pool("maxpool_pad_eq_kernel", "MaxPool", [2, 2], [2, 0, 0, 0])
    pool("maxpool_pad_gt_kernel", "MaxPool", [3, 3], [1, 1, 1, 5])
    pool("maxpool_pad_1d", "MaxPool", [1], [1, 0], shape=(1, 1, 6))
    pool("maxpool_pad_dilated", "MaxPool", [2, 2], [0, 3, 0, 0], dilations=[2, 2])
    pool("avgpool_pad_eq_kernel", "AveragePool", [3, 3], [0, 0, 3, 0])
    # -- quantized ops: QDQ patterns with malformed scales (fuse-qdq must not
    # read past them; inference names the node) ------------------------------
    def qdq_conv(xs, bs, wzp=np.zeros(2, np.int8)):
        U8 = TensorProto.UINT8
        return model(
            [helper.make_node("DequantizeLinear", ["x", "xs", "xzp"], ["xf"], name="dq_x"),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wzp"], ["wf"], name="dq_w", axis=0),
             helper.make_node("DequantizeLinear", ["bq", "bs"], ["bf"], name="dq_b", axis=0),
             helper.make_node("Conv", ["xf", "wf", "bf"], ["c"], name="conv"),
             helper.make_node("QuantizeLinear", ["c", "ys", "yzp"], ["y"], name="q_y")],
            [vi("x", [1, 1, 3, 3], U8)], [vi("y", [1, 2, 3, 3], U8)],
            [numpy_helper.from_array(xs, "xs"), numpy_helper.from_array(np.array(128, np.uint8), "xzp"),
             numpy_helper.from_array(np.ones((2, 1, 1, 1), np.int8), "wq"),
             numpy_helper.from_array(np.array([0.1, 0.2], np.float32), "ws"), numpy_helper.from_array(wzp, "wzp"),
             numpy_helper.from_array(np.array([1, 2], np.int32), "bq"), numpy_helper.from_array(bs, "bs"),
             numpy_helper.from_array(np.array(0.05, np.float32), "ys"),
             numpy_helper.from_array(np.array(0, np.uint8), "yzp")])
    compile_case("qdq_empty_activation_scale", qdq_conv(np.zeros(0, np.float32), np.array([0.002, 0.004], np.float32)),
                 ["dq_x", "x_scale", "must be a scalar"])
    compile_case("qdq_bias_scale_count", qdq_conv(np.array(0.02, np.float32), np.full(5, 0.002, np.float32)),
                 ["dq_b", "x_scale", "[2]"])
    compile_case("qdq_weight_zero_point_count", qdq_conv(np.array(0.02, np.float32), np.array([0.002, 0.004], np.float32),
                                                         np.zeros(3, np.int8)),
                 ["dq_w", "x_zero_point"])
    # QLinearConv with a per-channel weight scale of the wrong length
    U8, I8, I32 = TensorProto.UINT8, TensorProto.INT8, TensorProto.INT32
    m = model([helper.make_node("QLinearConv", ["x", "xs", "xzp", "w", "ws", "wzp", "ys", "yzp"], ["y"], name="qc")],
              [vi("x", [1, 1, 3, 3], U8)], [vi("y", [1, 2, 3, 3], U8)],
              [numpy_helper.from_array(np.array(0.02, np.float32), "xs"),
               numpy_helper.from_array(np.array(1, np.uint8), "xzp"),
               numpy_helper.from_array(np.ones((2, 1, 1, 1), np.int8), "w"),
               numpy_helper.from_array(np.ones(7, np.float32), "ws"),
               numpy_helper.from_array(np.zeros(7, np.int8), "wzp"),
               numpy_helper.from_array(np.array(0.05, np.float32), "ys"),
               numpy_helper.from_array(np.array(0, np.uint8), "yzp")], opset=10)
    compile_case("qlinearconv_weight_scale_count", m, ["QLinearConv node 'qc'", "w_scale", "[2]"])
    return cases
