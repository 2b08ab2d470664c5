"""Hostile .kiln files (issue 9 items 5 and 6): plans that would corrupt
memory if trusted, written with VALID checksums so that they reach the plan
verifier (plan::VerifyPlan) and the load-time re-inference, plus non-regular
files and truncated files given as the model.

The writer below mirrors format::WriteModelFile (src/format/kiln_file.cc):
  [0, 64)    header  '<8sIIIIQQ24s': magic b"KILNMDL\\0", version 2,
             header_size 64, num_partitions, crc, file_size, table_offset 64,
             24 reserved zero bytes
  [64, ...)  table   '<IIQQII' per partition: type (1 graph JSON, 2 weights),
             flags 0, offset, size, crc, reserved 0
  graph JSON at the table's end rounded up to 64; weights at the JSON's end
  rounded up to 4096; zero padding between, nothing after the weights.
  Partition crc = zlib.crc32(bytes); header crc = zlib.crc32(header with crc
  field 0 + the whole table).

Each crafted file is run with `kiln run` and `kiln inspect` (both must exit 1
naming the file and the culprit); faults only the load-time re-inference can
see (op versions, recorded shapes) are run with `kiln run` only.
"""
import copy
import json
import os
import struct
import zlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from run_hostile import Case

CLASS = "kiln"

HEADER = struct.Struct("<8sIIIIQQ24s")
ENTRY = struct.Struct("<IIQQII")
U64_MAX = 2**64 - 1


FORMAT_VERSION = 16  # src/format/kiln_file.h kFormatVersion (2: "target"; 3: placement; 4: "weight_dir"; 5: "file_id";
                    # 6: "sym" and "symbols"; 7: "gears" and "gears_only"; 8: "shape_input"; 9: "kiln.round";
                    # 10: "kiln.nhwc" on ConvTranspose; 11: "approximate" on kiln.Gelu;
                    # 12: "kiln.sum" and "kiln.inplace" on Conv, "kiln.bias" on MatMul;
                    # 13: "kiln.rescale" on ConvInteger / MatMulInteger, "kiln.nhwc" on ConvInteger,
                    #     "kiln.dequantize" on QLinearMatMul; 14: "kiln.nhwc" and "kiln.activation" on BatchNormalization;
                    # 15: "kiln.bf16" on Conv; 16: "kiln.quantize_input" and "kiln.scale_by_x" on
                    #     ConvInteger / MatMulInteger, "kiln.sum" on ConvInteger)


def align(v, a):
    return (v + a - 1) // a * a


def read_kiln(path):
    b = open(path, "rb").read()
    magic, version, hsize, n, crc, fsize, toff, _ = HEADER.unpack_from(b, 0)
    assert magic == b"KILNMDL\0" and version == FORMAT_VERSION and n == 2, "unexpected .kiln layout"
    parts = {}
    for i in range(n):
        t, _flags, off, size, _crc, _res = ENTRY.unpack_from(b, toff + 32 * i)
        parts[t] = b[off:off + size]
    return json.loads(parts[1]), parts[2]


def kiln_bytes(graph, weights, weights_offset=None, flags=0, json_text=None):
    """A .kiln image with correct checksums around whatever it is given."""
    text = json_text if json_text is not None else json.dumps(graph, separators=(",", ":")).encode()
    g_off = align(HEADER.size + 2 * ENTRY.size, 64)
    w_off = weights_offset if weights_offset is not None else align(g_off + len(text), 4096)
    table = (ENTRY.pack(1, flags, g_off, len(text), zlib.crc32(text), 0) +
             ENTRY.pack(2, 0, w_off, len(weights), zlib.crc32(weights), 0))
    fsize = w_off + len(weights)
    h0 = HEADER.pack(b"KILNMDL\0", FORMAT_VERSION, 64, 2, 0, fsize, 64, b"\0" * 24)
    crc = zlib.crc32(table, zlib.crc32(h0))
    h = HEADER.pack(b"KILNMDL\0", FORMAT_VERSION, 64, 2, crc, fsize, 64, b"\0" * 24)
    out = bytearray(fsize)
    out[0:64] = h
    out[64:64 + len(table)] = table
    out[g_off:g_off + len(text)] = text
    out[w_off:w_off + len(weights)] = weights
    return bytes(out)


def base_model(d):
    """x, y [2,8] -> a = x+y -> b = a*W -> c = Reshape(b) (a view) -> d = Tanh
    -> out = Sigmoid; out2 = a*C. Plan: a [1,0,64], b = c [1,64,64],
    d [1,128,64], arena 192; W, C, S at 0, 64, 128 of a 192-byte blob."""
    W = numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(2, 8) / 10, "W")
    C = numpy_helper.from_array(np.full((2, 8), 0.5, dtype=np.float32), "C")
    S = numpy_helper.from_array(np.array([4, 4], dtype=np.int64), "S")
    nodes = [helper.make_node("Add", ["x", "y"], ["a"], name="add"),
             helper.make_node("Mul", ["a", "W"], ["b"], name="mul"),
             helper.make_node("Reshape", ["b", "S"], ["c"], name="reshape"),
             helper.make_node("Tanh", ["c"], ["d"], name="tanh"),
             helper.make_node("Sigmoid", ["d"], ["out"], name="sigmoid"),
             helper.make_node("Mul", ["a", "C"], ["out2"], name="mul2")]
    g = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [4, 4]),
         helper.make_tensor_value_info("out2", TensorProto.FLOAT, [2, 8])],
        initializer=[W, C, S])
    p = os.path.join(d, "base.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), p)
    return p


def value(j, name):
    for v in j["graph"]["values"]:
        if v["name"] == name:
            return v
    raise KeyError(name)


def node(j, name):
    for n in j["graph"]["nodes"]:
        if n["name"] == name:
            return n
    raise KeyError(name)


def place(name, region, offset, size):
    def f(j):
        j["plan"]["placements"][name] = [region, offset, size]
    return f


def setp(path, val):
    """Sets j[path...] = val (path: list of keys)."""
    def f(j):
        o = j
        for k in path[:-1]:
            o = o[k]
        o[path[-1]] = val
    return f


def chain(*fs):
    def f(j):
        for g in fs:
            g(j)
    return f


def generate(ctx):
    d = ctx.dir(CLASS)
    onnx_path = base_model(d)
    good = os.path.join(d, "base.kiln")
    rc, out = ctx.run(["compile", "--model", onnx_path, "--output", good])
    assert rc == 0, out
    j0, w0 = read_kiln(good)
    # The generator relies on this plan; fail loudly if the compiler changes it.
    pl = j0["plan"]["placements"]
    assert j0["plan"]["arena_size"] == 192 and j0["plan"]["const_size"] == 192, j0["plan"]
    assert pl["a"] == [1, 0, 64] and pl["b"] == [1, 64, 64] and pl["c"] == [1, 64, 64] and pl["d"] == [1, 128, 64], pl
    assert pl["x"] == [2, 0, 64] and pl["y"] == [3, 0, 64] and pl["out"] == [4, 0, 64] and pl["out2"] == [5, 0, 64], pl
    # A faithful rewrite of the good file must load and run: the writer is right.
    with open(os.path.join(d, "rewritten.kiln"), "wb") as f:
        f.write(kiln_bytes(j0, w0))

    cases = [Case("rewritten_file_runs", ["run", os.path.join(d, "rewritten.kiln")], ["output 0 'out'"], rc=0)]

    def crafted(sub, name, mutate, needles, inspect=True, weights=None, base=None, **kw):
        j = copy.deepcopy(j0 if base is None else base)
        if mutate:
            mutate(j)
        fname = f"{sub}_{name}.kiln"
        p = os.path.join(d, fname)
        with open(p, "wb") as f:
            f.write(kiln_bytes(j, w0 if weights is None else weights, **kw))
        cases.append(Case(f"{sub}/{name}/run", ["run", p], [fname, *needles]))
        if inspect:
            cases.append(Case(f"{sub}/{name}/inspect", ["inspect", p], [fname, *needles]))

    # -- placements outside their region -------------------------------------
    crafted("out_of_region", "arena_past_end", place("d", 1, 192, 64),
            ["value 'd'", "offset 192", "region 1 (arena)", "past the arena's 192 bytes"])
    crafted("out_of_region", "input_offset", place("x", 2, 64, 64),
            ["value 'x'", "offset 64", "region 2 (input 0 'x')"])
    crafted("out_of_region", "output_offset", place("out2", 5, 2**40, 64),
            ["value 'out2'", f"offset {2**40}", "region 5 (output 1 'out2')"])
    crafted("out_of_region", "no_such_region", place("a", 99, 0, 64), ["value 'a'", "region 99", "regions 0..6"])
    crafted("out_of_region", "negative_region", place("b", -1, 64, 64), ["value 'b'", "region -1"])
    crafted("out_of_region", "constant_past_blob", setp(["graph", "values", 0, "const", "offset"], 4096),
            ["constant 'W'", "offset 4096", "outside the weights partition of 192 bytes"])
    crafted("out_of_region", "offset_wraps", place("a", 1, 2**64 - 64, 64),
            ["value 'a'", f"offset {2**64 - 64}", "overflows"])

    # -- intermediates in the caller's input (or output) regions -------------
    crafted("intermediate_in_input", "a_in_x", place("a", 2, 0, 64),
            ["value 'a'", "region 2 (input 0 'x')", "holds only input 'x'"])
    crafted("intermediate_in_input", "b_in_y", place("b", 3, 0, 64),
            ["value 'b'", "region 3 (input 1 'y')", "holds only input 'y'"])
    crafted("intermediate_in_input", "d_in_x", place("d", 2, 0, 64), ["value 'd'", "holds only input 'x'"])
    crafted("intermediate_in_input", "c_in_y", place("c", 3, 0, 64), ["value 'c'", "holds only input 'y'"])
    crafted("intermediate_in_input", "a_in_output", place("a", 4, 0, 64), ["value 'a'", "holds only output 'out'"])
    crafted("intermediate_in_input", "input_in_arena", place("x", 1, 0, 64),
            ["value 'x'", "region 1 (arena)", "cannot live in the arena"])

    # -- the same input listed twice (graph regions would alias) -------------
    for name, ins, first, second in [("x_twice", ["x", "y", "x"], 0, 2), ("y_twice", ["x", "y", "y"], 1, 2),
                                     ("y_first_and_last", ["y", "x", "y"], 0, 2), ("x_x_y", ["x", "x", "y"], 0, 1),
                                     ("x_y_x_y", ["x", "y", "x", "y"], 0, 2)]:
        who = ins[first]
        crafted("duplicate_input", name, setp(["graph", "inputs"], ins),
                [f"input '{who}' is listed twice (graph inputs {first} and {second})"])
    crafted("duplicate_input", "output_twice", setp(["graph", "outputs"], ["out", "out2", "out"]),
            ["output 'out' is listed twice (graph outputs 0 and 2)"])

    # -- a constant listed as a graph input ----------------------------------
    for name, ins, const, idx in [("W_last", ["x", "y", "W"], "W", 2), ("W_first", ["W", "x", "y"], "W", 0),
                                  ("C_middle", ["x", "C", "y"], "C", 1), ("S_last", ["x", "y", "S"], "S", 2),
                                  ("S_and_C", ["S", "x", "y", "C"], "S", 0)]:
        crafted("constant_as_input", name, setp(["graph", "inputs"], ins),
                [f"constant '{const}' is listed as graph input {idx}"])

    # -- arena_size: huge, wrapping, too small, too large ---------------------
    for name, size in [("max", U64_MAX), ("max_minus_63", U64_MAX - 63), ("two_to_63", 2**63), ("one_too_many", 256)]:
        crafted("arena_size", name, setp(["plan", "arena_size"], size),
                [f"plan arena_size {size} differs from the 192 bytes"])
    crafted("arena_size", "too_small", setp(["plan", "arena_size"], 128),
            ["value 'd'", "past the arena's 128 bytes"])
    crafted("arena_size", "zero", setp(["plan", "arena_size"], 0), ["past the arena's 0 bytes"])
    # arena_size near 2^64 with a placement that fits it: rounding up would wrap
    crafted("arena_size", "wrap_with_placement",
            chain(setp(["plan", "arena_size"], 2**64 - 64), place("d", 1, 2**64 - 128, 64)),
            [f"arena placements reach offset {2**64 - 64}", "past the 192 bytes"])

    # -- unaligned offsets ---------------------------------------------------
    crafted("unaligned", "arena_8", place("a", 1, 8, 64), ["value 'a'", "offset 8", "not 64-byte aligned"])
    crafted("unaligned", "arena_65", place("b", 1, 65, 64), ["value 'b'", "offset 65", "not 64-byte aligned"])
    crafted("unaligned", "arena_100", place("d", 1, 100, 64), ["value 'd'", "offset 100", "not 64-byte aligned"])
    crafted("unaligned", "constant_1", chain(setp(["graph", "values", 0, "const", "offset"], 1), place("W", 0, 1, 64)),
            ["constant 'W'", "offset 1", "not 64-byte aligned"])
    crafted("unaligned", "constant_32", chain(setp(["graph", "values", 1, "const", "offset"], 32), place("C", 0, 32, 64)),
            ["constant 'C'", "offset 32", "not 64-byte aligned"])
    crafted("unaligned", "weights_partition", None, ["weights partition at offset 4160", "not 4096-byte aligned"],
            weights_offset=4096 + 64)

    # -- a graph output renamed to an arena tensor ----------------------------
    for name, outs, culprit in [("out_is_a", ["a", "out2"], "'a'"), ("out_is_d", ["d", "out2"], "'d'"),
                                ("out2_is_b", ["out", "b"], "'b'"), ("out_is_c", ["c", "out2"], "'c'"),
                                ("swapped", ["out2", "out"], "holds only output")]:
        crafted("output_renamed", name, setp(["graph", "outputs"], outs), [culprit])

    # -- placement size != dtype size x element count -------------------------
    crafted("size_mismatch", "arena_plus_one", place("a", 1, 0, 65),
            ["value 'a'", "size 65", "differs from the 64 bytes of float32[2,8]"])
    crafted("size_mismatch", "input_half", place("x", 2, 0, 32),
            ["value 'x'", "size 32", "differs from the 64 bytes of float32[2,8]"])
    crafted("size_mismatch", "output_zero", place("out", 4, 0, 0), ["value 'out'", "size 0", "differs from the 64 bytes"])
    crafted("size_mismatch", "constant_half", setp(["graph", "values", 0, "const", "size"], 32),
            ["constant 'W'", "size 32 differs from 64 bytes of float32[2,8]"])
    crafted("size_mismatch", "shape_grown", lambda j: value(j, "d").update(shape=[4, 8]),
            ["value 'd'", "differs from the 128 bytes of float32[4,8]"])
    crafted("size_mismatch", "dtype_widened", lambda j: value(j, "a").update(dtype=11),
            ["value 'a'", "differs from the 128 bytes of float64[2,8]"])

    # -- truncated files -----------------------------------------------------
    raw = open(good, "rb").read()
    for n in (0, 63, 100, len(raw) - 1):
        fname = f"truncated_{n}.kiln"
        p = os.path.join(d, fname)
        with open(p, "wb") as f:
            f.write(raw[:n])
        needle = "too small to be a .kiln file" if n < 64 else f"file has {n} (truncated?)"
        cases.append(Case(f"truncated/raw_{n}/run", ["run", p], [fname, needle]))
        cases.append(Case(f"truncated/raw_{n}/inspect", ["inspect", p], [fname, needle]))
    # truncated partitions inside a consistent file (checksums recomputed)
    text = json.dumps(j0, separators=(",", ":")).encode()
    crafted("truncated", "json_half", None, ["graph partition is not valid JSON"], json_text=text[:len(text) // 2])
    crafted("truncated", "weights_128", None, ["constant 'S'", "outside the weights partition of 128 bytes"],
            weights=w0[:128])
    crafted("truncated", "weights_empty", None, ["constant 'W'", "outside the weights partition of 0 bytes"],
            weights=b"")

    # -- other plan and graph faults -----------------------------------------
    crafted("plan", "alias_on_compute_node", lambda j: node(j, "tanh")["attrs"].update(
        {"kiln.alias": {"kind": "int", "v": 1}}), ["Tanh node 'tanh'", "marked as a view"])
    crafted("plan", "alias_other_bytes", place("c", 1, 128, 64),
            ["Reshape node 'reshape'", "does not share its input 'b'"])
    crafted("plan", "live_tensors_overlap", place("a", 1, 128, 64), ["'a'", "'d'", "share bytes while both are live"])
    crafted("plan", "unknown_value_placed", place("ghost", 1, 0, 64), ["unknown value 'ghost'"])
    crafted("plan", "intermediate_unplaced", lambda j: j["plan"]["placements"].pop("d"),
            ["value 'd' (written by Tanh node 'tanh') has no placement"])
    crafted("plan", "const_size", setp(["plan", "const_size"], 4096), ["plan const_size 4096 differs", "192 bytes"])
    crafted("plan", "output_is_input", setp(["graph", "outputs"], ["out", "y"]), ["graph output 1 'y' is also graph input 1"])
    crafted("plan", "two_producers", lambda j: node(j, "mul2").update(outputs=["out"]),
            ["Mul node 'mul2' writes value 'out'", "already writes"])
    crafted("plan", "dynamic_input", lambda j: value(j, "x").update(dynamic=1), ["input 'x' is marked data-dependent"])
    crafted("plan", "mask_past_rank", lambda j: value(j, "a").update(dynamic=4), ["value 'a'", "beyond its rank 2"])
    crafted("plan", "reserved_flags", None, ["partition 0 has non-zero reserved fields"], flags=1)
    crafted("json", "shape_not_array", lambda j: value(j, "a").update(shape="2,8"),
            ["value 'a'", "field 'graph.values[5].shape' must be an array, found string"])
    crafted("json", "dtype_string", lambda j: value(j, "x").update(dtype="float32"),
            ["value 'x'", "field 'graph.values[3].dtype' must be an integer, found string"])
    crafted("json", "unknown_dtype", lambda j: value(j, "b").update(dtype=99), ["value 'b' has invalid dtype 99"])
    crafted("json", "unknown_input", lambda j: node(j, "add").update(inputs=["x", "zz"]),
            ["Add node 'add' reads unknown value 'zz'"])
    crafted("json", "placement_not_triple", setp(["plan", "placements", "a"], [1, 0]),
            ["placement of 'a'", "[region, offset, size]"])
    crafted("json", "offset_negative", place("a", 1, -64, 64), ["placement of 'a'", "= -64 is negative"])
    crafted("json", "huge_dim", lambda j: value(j, "d").update(shape=[2**62, 2**62]),
            ["value 'd'", "64 GiB) per tensor"])
    bad_utf8 = json.dumps(j0, separators=(",", ":")).encode().replace(b'"name":"g"', b'"name":"g\xff"')
    crafted("json", "invalid_utf8", None, ["graph partition is not valid JSON"], json_text=bad_utf8)
    # 200000 nested arrays in an attribute: no recursion may follow them
    deep = json.dumps(j0, separators=(",", ":")).encode().replace(
        b'"attrs":{},"domain":"","inputs":["c"]',
        b'"attrs":{"kiln.deep":{"kind":"ints","v":' + b"[" * 200000 + b"]" * 200000 + b'}},"domain":"","inputs":["c"]')
    assert deep != json.dumps(j0, separators=(",", ":")).encode()
    crafted("json", "deep_nesting", None, ["Tanh node 'tanh' attribute 'kiln.deep'", "must be an integer, found array"],
            json_text=deep)
    # Only the load-time re-inference sees these (kiln inspect does not infer).
    crafted("target", "uppercase", setp(["target"], "Cpu"),
            ["field 'target' = 'Cpu' is not a device spec (byte 0 is not allowed there)"])
    crafted("target", "path", setp(["target"], "../../etc/passwd"),
            ["field 'target' = '../../etc/passwd' is not a device spec"])
    crafted("target", "empty", setp(["target"], ""), ["field 'target' must be a device spec of 1 to 128 bytes"])
    crafted("target", "long", setp(["target"], "sim:" + "a" * 200), ["found 204 bytes"])
    crafted("target", "number", setp(["target"], 7), ["field 'target' must be a string, found number"])
    crafted("infer", "op_version", lambda j: node(j, "tanh").update(since=99),
            ["Tanh node 'tanh' has op version 99"], inspect=False)
    crafted("infer", "recorded_shape", lambda j: value(j, "d").update(shape=[2, 8]),
            ["Tanh node 'tanh' output 'd' is recorded as float32[2,8] but infers to float32[4,4]"], inspect=False)
    crafted("infer", "unknown_op", lambda j: node(j, "tanh").update(op="Tanhh"),
            ["Tanhh node 'tanh'", "not supported"], inspect=False)

    # -- the recorded weight directory and weight locations (format 4) ------
    crafted("weight_dir", "absolute", setp(["weight_dir"], "/etc"), ["field 'weight_dir' must be relative"])
    crafted("weight_dir", "empty_component", setp(["weight_dir"], "a//b"), ["field 'weight_dir' has an empty or '.'"])
    crafted("weight_dir", "dot_component", setp(["weight_dir"], "./w"), ["field 'weight_dir' has an empty or '.'"])
    crafted("weight_dir", "backslash", setp(["weight_dir"], "a\\..\\b"), ["field 'weight_dir' holds a NUL or backslash"])
    crafted("weight_dir", "long", setp(["weight_dir"], "w" * 5000), ["field 'weight_dir' must be a relative path", "5000 bytes"])
    crafted("weight_dir", "number", setp(["weight_dir"], 3), ["field 'weight_dir' must be a string, found number"])
    ext = os.path.join(d, "ext.kiln")
    rc, out = ctx.run(["compile", "--model", onnx_path, "--output", ext, "--external-weight", "1"])
    assert rc == 0, out
    j2, w2 = read_kiln(ext)
    assert j2["weight_dir"] == "weight", j2["weight_dir"]
    fc = next(n for n in j2["graph"]["nodes"] if n["op"] == "FileConstant")
    cases.append(Case("weight_dir/external_weights_run", ["run", ext], ["output 0 'out'"], rc=0))
    for name, loc in (("meta_json", "meta.json"), ("parent", "../" + fc["attrs"]["location"]["v"]),
                      ("subdir", "sub/" + fc["attrs"]["location"]["v"]), ("short_hash", "weight_abc"),
                      ("lock", "meta.json.lock"), ("absolute", "/etc/passwd")):
        crafted("location", name, lambda j, loc=loc: next(n for n in j["graph"]["nodes"] if n["op"] == "FileConstant")
                ["attrs"]["location"].update(v=loc),
                [f"external weight location '{loc}' is not a weight_<sha256> or <name>_weight_combined file name"],
                inspect=False, base=j2, weights=w2)
    # -- file_id FileConstants (format 5): exactly one of location/file_id,
    # a bounded printable id, resolved only by the caller's table ----------
    def fc_attrs(j):
        return next(n for n in j["graph"]["nodes"] if n["op"] == "FileConstant")["attrs"]

    def with_file_id(fid, keep_location=False, kind="string"):
        def edit(j):
            a = fc_attrs(j)
            if not keep_location:
                del a["location"]
            a["file_id"] = {"kind": kind, "v": fid}
        return edit

    crafted("file_id", "and_location", with_file_id("w", keep_location=True),
            ["exactly one of the attributes 'location' and 'file_id' must be set, found both"],
            inspect=False, base=j2, weights=w2)
    crafted("file_id", "neither", lambda j: fc_attrs(j).pop("location"),
            ["exactly one of the attributes 'location' and 'file_id' must be set, found neither"],
            inspect=False, base=j2, weights=w2)
    crafted("file_id", "long", with_file_id("f" * 300), ["attribute 'file_id'", "(300 bytes) must be 1 to 256 printable"],
            inspect=False, base=j2, weights=w2)
    crafted("file_id", "empty", with_file_id(""), ["attribute 'file_id'", "(0 bytes) must be 1 to 256 printable"],
            inspect=False, base=j2, weights=w2)
    crafted("file_id", "control", with_file_id("a\nb"), ["attribute 'file_id'", "must be 1 to 256 printable"],
            inspect=False, base=j2, weights=w2)
    crafted("file_id", "number", with_file_id(7, kind="int"), ["attribute 'file_id' must be string, found int"],
            inspect=False, base=j2, weights=w2)
    crafted("file_id", "unresolved", with_file_id("their-table"),
            ["reads file_id 'their-table', which the load options do not resolve"],
            inspect=False, base=j2, weights=w2)
    crafted("file_id", "bad_sha256", lambda j: fc_attrs(j).update({"kiln.sha256": {"kind": "string", "v": "zz"}}),
            ["attribute 'kiln.sha256' is not 64 lowercase hex digits"], inspect=False, base=j2, weights=w2)
    # Recorded outside the model's directory: refused unless trusted.
    crafted("weight_dir", "outside_untrusted", setp(["weight_dir"], "../elsewhere"),
            ["records its weight directory as '../elsewhere'", "outside the model's own directory", "--trust-weight-dir"],
            inspect=False, base=j2, weights=w2)

    # -- symbols (format version 6): per-value "sym" names, the top-level
    # "symbols" table {name: [min, max]} --------------------------------------
    # The base model with x and y's dim 0 named "batch" (hand-derived: x and
    # y are float32[2,8], so [2, 2] is the range a fixed compile records).
    def with_sym(x_sym, symbols):
        def f(j):
            value(j, "x")["sym"] = x_sym
            j["graph"]["symbols"] = symbols
        return f

    sym_ok = copy.deepcopy(j0)
    with_sym(["batch", ""], {"batch": [2, 2]})(sym_ok)
    value(sym_ok, "y")["sym"] = ["batch", ""]
    with open(os.path.join(d, "symbols_ok.kiln"), "wb") as f:
        f.write(kiln_bytes(sym_ok, w0))
    cases.append(Case("symbols/valid_file_runs", ["run", os.path.join(d, "symbols_ok.kiln")], ["output 0 'out'"], rc=0))
    cases.append(Case("symbols/inspect_shows_them", ["inspect", os.path.join(d, "symbols_ok.kiln")],
                      ["x float32[batch=2,8]", "y float32[batch=2,8]", "out float32[4,4]"], rc=0))
    crafted("symbols", "sym_length", with_sym(["batch"], {"batch": [2, 2]}),
            ["value 'x': sym has 1 names, expected 2 (one per dim of float32[2,8])"])
    crafted("symbols", "unknown_name", with_sym(["batch", ""], {"seq": [2, 2]}),
            ["value 'x' dim 0: symbol 'batch' is not in the graph's symbols"])
    crafted("symbols", "min_above_max", with_sym(["batch", ""], {"batch": [3, 2]}),
            ["symbol 'batch' has range [3, 2], expected 0 <= min <= max <= 68719476736 or max = -1 (unbounded)"])
    crafted("symbols", "negative_min", with_sym(["batch", ""], {"batch": [-1, 2]}),
            ["symbol 'batch' has range [-1, 2]"])
    crafted("symbols", "max_too_big", with_sym(["batch", ""], {"batch": [2, 2**40]}),
            [f"symbol 'batch' has range [2, {2**40}]"])
    crafted("symbols", "extent_outside", with_sym(["batch", ""], {"batch": [3, 8]}),
            ["value 'x' dim 0 has extent 2, outside the range [3, 8] of its symbol 'batch'"])
    crafted("symbols", "extent_above_unbounded_min", with_sym(["", "batch"], {"batch": [9, -1]}),
            ["value 'x' dim 1 has extent 8, outside the range [9, unbounded] of its symbol 'batch'"])
    crafted("symbols", "not_an_object", setp(["graph", "symbols"], [["batch", 2, 2]]),
            ["field 'graph.symbols' must be an object, found array"])
    crafted("symbols", "range_not_pair", setp(["graph", "symbols"], {"batch": [2]}),
            ["symbol 'batch': field 'graph.symbols['batch']' must be [min, max], found an array of 1"])
    crafted("symbols", "sym_not_array", lambda j: value(j, "x").update(sym="batch"),
            ["value 'x': field 'graph.values[3].sym' must be an array, found string"])
    long_name = "n" * 300
    crafted("symbols", "name_too_long", with_sym([long_name, ""], {long_name: [2, 2]}),
            [f"symbol name '{'n' * 64}...' has 300 bytes, expected 1 to 256"])
    crafted("symbols", "empty_name", setp(["graph", "symbols"], {"": [1, 1]}),
            ["symbol name '' has 0 bytes, expected 1 to 256"])
    # The compiler's own: an ONNX dim_param kept through --input-shape.
    sym_onnx = os.path.join(d, "batch.onnx")
    m = onnx.load(onnx_path)
    for vi in m.graph.input:
        vi.type.tensor_type.shape.dim[0].dim_param = "batch"
    onnx.save(m, sym_onnx)
    sym_kiln = os.path.join(d, "batch.kiln")
    rc, out = ctx.run(["compile", "--model", sym_onnx, "--output", sym_kiln, "--input-shape", "x:2,8;y:2,8"])
    assert rc == 0, out
    j3, _ = read_kiln(sym_kiln)
    assert value(j3, "x")["sym"] == ["batch", ""] and value(j3, "y")["sym"] == ["batch", ""], (value(j3, "x"), value(j3, "y"))
    assert j3["graph"]["symbols"] == {"batch": [2, 2]}, j3["graph"].get("symbols")
    assert all("sym" not in v for v in j3["graph"]["values"] if v["name"] not in ("x", "y")), j3["graph"]["values"]
    cases.append(Case("symbols/compiled_with_input_shape_runs", ["run", sym_kiln], ["output 0 'out'"], rc=0))
    cases.append(Case("symbols/inspect_json", ["inspect", sym_kiln, "--json"],
                      ['"symbols": {\n    "batch": {\n      "max": 2,\n      "min": 2\n    }\n  }',
                       '{\n          "kind": "static",\n          "max": 2,\n          "min": 2,\n          "symbol": "batch",\n          "value": 2\n        }',
                       '{\n          "kind": "static",\n          "max": 8,\n          "min": 8,\n          "symbol": "",\n          "value": 8\n        }'],
                      rc=0))

    # Compiled without --input-shape: 'batch' stays symbolic ("symbolic" masks,
    # format version 6). Runs need inputs of some admissible shape.
    from onnx import TensorProto, helper
    open_onnx = os.path.join(d, "batch_open.onnx")
    bvi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", 8])
    onnx.save(helper.make_model(helper.make_graph(
        [helper.make_node("Add", ["x", "y"], ["s"], name="add"), helper.make_node("Tanh", ["s"], ["out"], name="tanh")],
        "g", [bvi("x"), bvi("y")], [bvi("out")]), opset_imports=[helper.make_opsetid("", 13)]), open_onnx)
    open_kiln = os.path.join(d, "batch_open.kiln")
    rc, out = ctx.run(["compile", "--model", open_onnx, "--output", open_kiln])
    assert rc == 0, out
    j4, w4 = read_kiln(open_kiln)
    assert value(j4, "x")["symbolic"] == 1 and value(j4, "out")["symbolic"] == 1, (value(j4, "x"), value(j4, "out"))
    assert j4["graph"]["symbols"] == {"batch": [1, -1]}, j4["graph"].get("symbols")
    cases.append(Case("symbolic/inspect_shows_them", ["inspect", open_kiln],
                      ["x float32[batch,8]", "out float32[?,8]"], rc=0))
    cases.append(Case("symbolic/run_needs_inputs", ["run", open_kiln], ["input 0 'x' has symbolic dims [batch,8]"]))
    crafted("symbolic", "mask_beyond_rank", lambda j: value(j, "x").update(symbolic=4),
            ["value 'x': symbolic dims mask 4 names dims beyond its rank 2"])
    crafted("symbolic", "mask_not_an_int", lambda j: value(j, "x").update(symbolic="1"),
            ["symbolic"])
    # A mask the loader's re-inference does not reproduce (static inputs).
    crafted("symbolic", "mask_not_inferred", lambda j: value(j, "out").update(symbolic=1),
            ["output 'out' is recorded with symbolic dims mask 1 but infers to 0"], inspect=False)
    # The symbol range of a symbolic input may not be left out.
    crafted("symbolic", "symbol_missing", lambda j: j["graph"].pop("symbols"),
            ["symbol 'batch' is not in the graph's symbols"], base=j4, weights=w4)

    # Ranges and gears (format version 7): compiled at the range's max, gears
    # recorded as signatures of both inputs; the verifier checks each.
    gear_kiln = os.path.join(d, "batch_gears.kiln")
    rc, out = ctx.run(["compile", "--model", open_onnx, "--output", gear_kiln, "--input-shape", "x:1..6,8|2,8|4,8"])
    assert rc == 0, out
    j5, w5 = read_kiln(gear_kiln)
    assert j5["graph"]["symbols"] == {"batch": [1, 6]}, j5["graph"].get("symbols")
    assert j5["graph"]["gears"] == [[[2, 8], [2, 8]], [[4, 8], [4, 8]]], j5["graph"].get("gears")
    assert j5["graph"]["gears_only"] is False and value(j5, "x")["shape"] == [6, 8], (j5["graph"], value(j5, "x"))
    cases.append(Case("gears/inspect_shows_them", ["inspect", gear_kiln],
                      ["x float32[batch=1..6,8]", "gears: [2,8] [2,8] | [4,8] [4,8]"], rc=0))
    cases.append(Case("gears/outside_the_range",
                      ["compile", "--model", open_onnx, "--output", os.path.join(d, "bad_range.kiln"),
                       "--input-shape", "x:1..6,8|7,8"],
                      ["gear [7,8] of 'x' has dim 0 = 7, outside the range given for it"]))
    gear = lambda k, i, dim, v: (lambda j: j["graph"]["gears"][k][i].__setitem__(dim, v))
    crafted("gears", "static_dim_changed", gear(0, 1, 1, 9),
            ["gear 0 input 1 'y' dim 1 is 9, but the input's dim is fixed to 8"], base=j5, weights=w5)
    crafted("gears", "outside_symbol_range", gear(1, 0, 0, 7),
            ["gear 1 input 0 'x' dim 0 is 7, outside the range [1, 6] of symbol 'batch'"], base=j5, weights=w5)
    crafted("gears", "symbol_disagrees", gear(1, 1, 0, 2),
            ["gear 1 input 1 'y' dim 0 gives symbol 'batch' 2, but input 0 dim 0 gives 4"], base=j5, weights=w5)
    crafted("gears", "rank_differs", lambda j: j["graph"]["gears"][0][0].append(1),
            ["gear 0 input 0 'x' has rank 3, the input has rank 2"], base=j5, weights=w5)
    crafted("gears", "one_shape_missing", lambda j: j["graph"]["gears"][0].pop(),
            ["gear 0 has 1 shapes, expected one per graph input (2)"], base=j5, weights=w5)
    crafted("gears", "empty_list", lambda j: j["graph"].update(gears=[]),
            ["field 'graph.gears' lists 0 gears, expected 1 to 64"], base=j5, weights=w5)
    crafted("gears", "too_many", lambda j: j["graph"].update(gears=[[[2, 8], [2, 8]]] * 65),
            ["field 'graph.gears' lists 65 gears, expected 1 to 64"], base=j5, weights=w5)
    crafted("gears", "huge_extent", gear(0, 0, 0, 2 ** 62),
            ["gear 0 input 0 'x'"], base=j5, weights=w5)
    crafted("gears", "only_without_gears", lambda j: j["graph"].pop("gears"),
            ["field 'graph.gears' is missing"], base=j5, weights=w5)
    crafted("gears", "only_not_a_bool", lambda j: j["graph"].update(gears_only=1),
            ["gears_only"], base=j5, weights=w5)
    crafted("gears", "gears_only_missing", lambda j: j["graph"].pop("gears_only"),
            ["field 'graph.gears_only' is missing (a graph with gears has it)"], base=j5, weights=w5)

    # Shape inputs (format version 8): Reshape's target is a model input, so
    # the file marks it "shape_input"; the loader's inference must agree.
    si_onnx = os.path.join(d, "shape_input.onnx")
    onnx.save(helper.make_model(helper.make_graph(
        [helper.make_node("Reshape", ["x", "t"], ["r"], name="reshape"), helper.make_node("Relu", ["r"], ["out"], name="relu")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4]),
              helper.make_tensor_value_info("t", TensorProto.INT64, [2]),
              helper.make_tensor_value_info("big", TensorProto.FLOAT, [100])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)]),
        opset_imports=[helper.make_opsetid("", 13)]), si_onnx)
    si_kiln = os.path.join(d, "shape_input.kiln")
    rc, out = ctx.run(["compile", "--model", si_onnx, "--output", si_kiln])
    assert rc == 0, out
    j6, w6 = read_kiln(si_kiln)
    assert value(j6, "t").get("shape_input") is True and "shape_input" not in value(j6, "x"), (value(j6, "t"), value(j6, "x"))
    assert value(j6, "out")["symbolic"] == 3, value(j6, "out")
    cases.append(Case("shape_input/inspect_shows_it", ["inspect", si_kiln],
                      ["t int64[2]  (shape input: its values decide shapes", "out float32[?,?]"], rc=0))
    cases.append(Case("shape_input/run_needs_the_values", ["run", si_kiln],
                      ["input 1 't' decides shapes", "give it with --input t=FILE.npy"]))
    crafted("shape_input", "not_a_bool", lambda j: value(j, "t").update(shape_input=1),
            ["shape_input", "must be a boolean"], base=j6, weights=w6)
    crafted("shape_input", "not_an_input", lambda j: value(j, "r").update(shape_input=True),
            ["value 'r' is marked a shape input but is not an input of the top-level graph"], base=j6, weights=w6)
    crafted("shape_input", "too_large", lambda j: value(j, "big").update(shape_input=True),
            ["input 'big' is marked a shape input but is float32[100]"], base=j6, weights=w6)
    crafted("shape_input", "not_read_for_shapes", lambda j: value(j, "x").update(shape_input=True),
            ["input 'x' is recorded as a shape input but the model's inference does not read its values for shapes"],
            inspect=False, base=j6, weights=w6)
    crafted("shape_input", "mark_removed", lambda j: value(j, "t").pop("shape_input"),
            ["input 't' is recorded as not a shape input but the model's inference reads its values for shapes"],
            inspect=False, base=j6, weights=w6)

    # Half graphs computed in float32 (format version 9): the Cast back to
    # bfloat16 at the output carries "kiln.round": "nearest_even".
    bf_onnx = os.path.join(d, "bf16.onnx")
    onnx.save(helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Abs", ["r"], ["out"], name="abs")],
        "g", [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [4])],
        [helper.make_tensor_value_info("out", TensorProto.BFLOAT16, [4])]),
        opset_imports=[helper.make_opsetid("", 13)]), bf_onnx)
    bf_kiln = os.path.join(d, "bf16.kiln")
    rc, out = ctx.run(["compile", "--model", bf_onnx, "--output", bf_kiln])
    assert rc == 0, out
    j9, w9 = read_kiln(bf_kiln)
    round_cast = [n for n in j9["graph"]["nodes"] if "kiln.round" in n.get("attrs", {})]
    assert len(round_cast) == 1 and round_cast[0]["op"] == "Cast", j9["graph"]["nodes"]
    rc_name = round_cast[0]["name"]
    crafted("round", "not_nearest_even",
            lambda j: node(j, rc_name)["attrs"].update({"kiln.round": {"kind": "string", "v": "up"}}),
            ["attribute 'kiln.round' must be the string \"nearest_even\""], base=j9, weights=w9)
    crafted("round", "on_another_op",
            lambda j: node(j, "relu").setdefault("attrs", {}).update({"kiln.round": {"kind": "string", "v": "nearest_even"}}),
            ["attribute 'kiln.round' belongs only on a Cast from float32 to bfloat16"], base=j9, weights=w9)

    # Channels-last ConvTranspose (format version 10): the layout pass sets
    # "kiln.nhwc" on it; the loader's inference must agree with what the file
    # records, with or without the attribute.
    ct_onnx = os.path.join(d, "convt.onnx")
    rng = np.random.default_rng(3)
    onnx.save(helper.make_model(helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("ConvTranspose", ["c", "wt"], ["out"], name="up", strides=[2, 2])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 5])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 6, 8, 10])],
        [numpy_helper.from_array(rng.standard_normal((3, 2, 3, 3)).astype(np.float32), "w"),
         numpy_helper.from_array(rng.standard_normal((3, 6, 2, 2)).astype(np.float32), "wt")]),
        opset_imports=[helper.make_opsetid("", 13)]), ct_onnx)
    ct_kiln = os.path.join(d, "convt.kiln")
    rc, out = ctx.run(["compile", "--model", ct_onnx, "--output", ct_kiln])
    assert rc == 0, out
    j10, w10 = read_kiln(ct_kiln)
    assert node(j10, "up").get("attrs", {}).get("kiln.nhwc", {}).get("v") == 1, node(j10, "up")
    # Without it the NHWC input [1,4,5,3] reads as 4 channels.
    crafted("convt_nhwc", "dropped", lambda j: node(j, "up")["attrs"].pop("kiln.nhwc"),
            ["ConvTranspose node 'up'", "input channels 4 != W dim 0 (3)"], inspect=False, base=j10, weights=w10)

    # tanh-GELU (format version 11): fuse-gelu writes kiln.Gelu with
    # approximate="tanh"; the loader's inference accepts only "none"/"tanh".
    gt_onnx = os.path.join(d, "gelu_tanh.onnx")
    c = lambda name, v: numpy_helper.from_array(np.array(v, np.float32), name)
    onnx.save(helper.make_model(helper.make_graph(
        [helper.make_node("Pow", ["x", "three"], ["p"], name="pow"),
         helper.make_node("Mul", ["p", "kappa"], ["q"], name="q"),
         helper.make_node("Add", ["x", "q"], ["s"], name="s"),
         helper.make_node("Mul", ["s", "beta"], ["z"], name="z"),
         helper.make_node("Tanh", ["z"], ["t"], name="gt"),
         helper.make_node("Add", ["t", "one"], ["a"], name="a"),
         helper.make_node("Mul", ["x", "a"], ["m"], name="m"),
         helper.make_node("Mul", ["m", "half"], ["out"], name="half")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 8])],
        [c("three", 3.0), c("kappa", 0.044715), c("beta", (2 / np.pi) ** 0.5), c("one", 1.0), c("half", 0.5)]),
        opset_imports=[helper.make_opsetid("", 13)]), gt_onnx)
    gt_kiln = os.path.join(d, "gelu_tanh.kiln")
    rc, out = ctx.run(["compile", "--model", gt_onnx, "--output", gt_kiln])
    assert rc == 0, out
    j11, w11 = read_kiln(gt_kiln)
    gelus = [n for n in j11["graph"]["nodes"] if n["op"] == "Gelu"]
    assert len(gelus) == 1 and gelus[0]["attrs"]["approximate"]["v"] == "tanh", j11["graph"]["nodes"]
    gname = gelus[0]["name"]
    crafted("gelu", "approximate_unknown",
            lambda j: node(j, gname)["attrs"].update({"approximate": {"kind": "string", "v": "sigmoid"}}),
            [f"Gelu node '{gname}'", "attribute 'approximate' must be the string \"none\" or \"tanh\", found \"sigmoid\""],
            inspect=False, base=j11, weights=w11)
    crafted("gelu", "approximate_int",
            lambda j: node(j, gname)["attrs"].update({"approximate": {"kind": "int", "v": 1}}),
            [f"Gelu node '{gname}'", "attribute 'approximate' must be the string", "found another kind"],
            inspect=False, base=j11, weights=w11)

    # Fused residual (format version 12): fuse-residual makes conv2 read `a`
    # as input 3 with kiln.sum = 1 (the Relu after the Add fused as its
    # activation), and the memory plan puts its output over `a`, which
    # conv2 reads last (kiln.inplace = 3).
    rs_onnx = os.path.join(d, "residual.onnx")
    rng = np.random.default_rng(12)
    cw = lambda name: numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), name)
    onnx.save(helper.make_model(helper.make_graph(
        [helper.make_node("Conv", ["x", "w0"], ["c0"], name="conv0", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c0"], ["a"], name="relu0"),
         helper.make_node("Conv", ["a", "w1"], ["b"], name="conv1", pads=[1, 1, 1, 1]),
         helper.make_node("Conv", ["b", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
         helper.make_node("Add", ["c2", "a"], ["s"], name="add"),
         helper.make_node("Relu", ["s"], ["r"], name="relu2"),
         helper.make_node("Mul", ["r", "r"], ["out"], name="sq")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 5])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4, 5, 5])],
        [cw("w0"), cw("w1"), cw("w2")]), opset_imports=[helper.make_opsetid("", 13)]), rs_onnx)
    rs_kiln = os.path.join(d, "residual.kiln")
    rc, out = ctx.run(["compile", "--model", rs_onnx, "--output", rs_kiln])
    assert rc == 0, out
    j12, w12 = read_kiln(rs_kiln)
    c2 = node(j12, "conv2")
    assert c2["attrs"].get("kiln.sum") == {"kind": "int", "v": 1}, c2
    assert c2["attrs"].get("kiln.inplace") == {"kind": "int", "v": 3}, c2
    # (Without kiln.sum the node is no in-place candidate: drop both and give
    # its output bytes of its own, so the loader's inference speaks.)
    def own_bytes(j):
        j["plan"]["placements"]["r_nhwc"] = [1, 896, 400]
        j["plan"]["arena_size"] = 1344
    drop = lambda *names: lambda j: ([node(j, "conv2")["attrs"].pop(k) for k in names], own_bytes(j))
    crafted("residual", "inplace_without_sum", drop("kiln.sum"),
            ["Conv node 'conv2'", "is marked in-place (kiln.inplace) but only a Conv with a fused residual"],
            base=j12, weights=w12)
    crafted("residual", "sum_dropped", drop("kiln.sum", "kiln.inplace"),
            ["Conv node 'conv2'", "input 3 (a fused residual) needs attribute 'kiln.sum' = 1"],
            inspect=False, base=j12, weights=w12)
    crafted("residual", "sum_not_one",
            lambda j: (drop("kiln.inplace")(j), node(j, "conv2")["attrs"].update({"kiln.sum": {"kind": "int", "v": 7}})),
            ["Conv node 'conv2'", "attribute 'kiln.sum' must be 0 or 1, found 7"],
            inspect=False, base=j12, weights=w12)
    crafted("residual", "inplace_without_residual",
            lambda j: node(j, "conv1")["attrs"].update({"kiln.inplace": {"kind": "int", "v": 3}}),
            ["Conv node 'conv1'", "is marked in-place (kiln.inplace) but only a Conv with a fused residual"],
            base=j12, weights=w12)
    crafted("residual", "inplace_other_input",
            lambda j: node(j, "conv2")["attrs"].update({"kiln.inplace": {"kind": "int", "v": 0}}),
            ["Conv node 'conv2'", "is marked in-place (kiln.inplace) but only a Conv with a fused residual"],
            base=j12, weights=w12)

    def read_after_overwrite(j):
        sq = [n for n in j["graph"]["nodes"] if n["name"] == "sq"][0]
        sq["inputs"][1] = "a_nhwc"  # the layout pass's name for `a`
    crafted("residual", "read_after_overwrite", read_after_overwrite,
            ["Mul node 'sq' reads 'a_nhwc', whose bytes Conv node 'conv2' overwrote in place"], base=j12, weights=w12)

    # A transformer projection (format version 12): fuse-bias-activation
    # gives the MatMul its bias as input 2 (kiln.bias = 1) and the Relu.
    mb_onnx = os.path.join(d, "matmul_bias.onnx")
    onnx.save(helper.make_model(helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
         helper.make_node("Add", ["m", "b"], ["a"], name="bias"),
         helper.make_node("Relu", ["a"], ["out"], name="relu")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 3, 5])],
        [numpy_helper.from_array(rng.standard_normal((4, 5)).astype(np.float32), "w"),
         numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "b")]),
        opset_imports=[helper.make_opsetid("", 13)]), mb_onnx)
    mb_kiln = os.path.join(d, "matmul_bias.kiln")
    rc, out = ctx.run(["compile", "--model", mb_onnx, "--output", mb_kiln])
    assert rc == 0, out
    jb, wb = read_kiln(mb_kiln)
    assert node(jb, "mm")["attrs"].get("kiln.bias") == {"kind": "int", "v": 1}, node(jb, "mm")
    crafted("matmul_bias", "dropped", lambda j: node(j, "mm")["attrs"].pop("kiln.bias"),
            ["MatMul node 'mm'", "input 2 (a fused bias) needs attribute 'kiln.bias' = 1"],
            inspect=False, base=jb, weights=wb)
    crafted("matmul_bias", "not_one", lambda j: node(j, "mm")["attrs"].update({"kiln.bias": {"kind": "int", "v": 2}}),
            ["MatMul node 'mm'", "attribute 'kiln.bias' must be 0 or 1, found 2"], inspect=False, base=jb, weights=wb)

    # Dynamic quantization (format version 13): fuse-integer-rescale gives
    # the ConvInteger the scale x_scale * w_scale as input 4, the bias as
    # input 5 and the Relu (kiln.rescale = 1: a float32 output), and the
    # layout pass runs it channels-last (kiln.nhwc = 1).
    # x comes channels-last (a Transpose to NCHW that the layout pass
    # cancels), so the quantization reads it directly and
    # fuse-quantize-input applies (format version 16, below).
    dy_onnx = os.path.join(d, "dynamic_conv.onnx")
    onnx.save(helper.make_model(helper.make_graph(
        [helper.make_node("Transpose", ["x_nhwc"], ["x"], name="to_nchw", perm=[0, 3, 1, 2]),
         helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"], name="dql"),
         helper.make_node("ConvInteger", ["xq", "wq", "xz"], ["acc"], name="ci", pads=[1, 1, 1, 1]),
         helper.make_node("Cast", ["acc"], ["f"], name="cast", to=TensorProto.FLOAT),
         helper.make_node("Mul", ["xs", "ws"], ["s"], name="smul"),
         helper.make_node("Mul", ["f", "s"], ["m"], name="rescale"),
         helper.make_node("Add", ["m", "b"], ["a"], name="bias"),
         helper.make_node("Relu", ["a"], ["out"], name="relu")],
        "g", [helper.make_tensor_value_info("x_nhwc", TensorProto.FLOAT, [1, 5, 5, 4])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 3, 5, 5])],
        [numpy_helper.from_array(rng.integers(-127, 128, (3, 4, 3, 3)).astype(np.int8), "wq"),
         numpy_helper.from_array(np.array([0.01, 0.02, 0.03], np.float32).reshape(3, 1, 1), "ws"),
         numpy_helper.from_array(np.array([0.5, -0.25, 1.0], np.float32).reshape(3, 1, 1), "b")]),
        opset_imports=[helper.make_opsetid("", 13)]), dy_onnx)
    dy_kiln = os.path.join(d, "dynamic_conv.kiln")
    rc, out = ctx.run(["compile", "--model", dy_onnx, "--output", dy_kiln])
    assert rc == 0, out
    jd, wd = read_kiln(dy_kiln)
    ci = node(jd, "ci")
    assert ci["attrs"].get("kiln.rescale") == {"kind": "int", "v": 1}, ci
    assert ci["attrs"].get("kiln.nhwc") == {"kind": "int", "v": 1}, ci
    crafted("rescale", "dropped", lambda j: node(j, "ci")["attrs"].pop("kiln.rescale"),
            ["ConvInteger node 'ci'", "channels-last ConvInteger needs 'kiln.rescale' = 1"],
            inspect=False, base=jd, weights=wd)
    crafted("rescale", "dropped_nchw",
            lambda j: [node(j, "ci")["attrs"].pop(k) for k in ("kiln.rescale", "kiln.nhwc")],
            ["ConvInteger node 'ci'", "input channels 5 != W dim 1 (4) x group (1)"],  # NHWC read as NCHW
            inspect=False, base=jd, weights=wd)
    crafted("rescale", "not_one", lambda j: node(j, "ci")["attrs"].update({"kiln.rescale": {"kind": "int", "v": 2}}),
            ["ConvInteger node 'ci'", "attribute 'kiln.rescale' must be 0 or 1, found 2"],
            inspect=False, base=jd, weights=wd)
    crafted("rescale", "scale_missing", lambda j: node(j, "ci")["inputs"].__setitem__(4, ""),
            ["ConvInteger node 'ci'", "attribute 'kiln.rescale' = 1 needs the scale input 4"],
            inspect=False, base=jd, weights=wd)
    # fuse-quantize-input (format version 16): the ConvInteger, the
    # DynamicQuantizeLinear's only reader, reads the float32 x, computes
    # x_scale and the zero point itself (kiln.quantize_input = 2) and
    # multiplies by x_scale * w_scale (kiln.scale_by_x, w_scale as input 4).
    assert ci["attrs"].get("kiln.quantize_input") == {"kind": "int", "v": 2}, ci
    assert ci["attrs"].get("kiln.scale_by_x") == {"kind": "int", "v": 1}, ci
    assert not any(n["op"] == "DynamicQuantizeLinear" for n in jd["graph"]["nodes"]), jd["graph"]["nodes"]
    crafted("quantize_input", "out_of_range",
            lambda j: node(j, "ci")["attrs"].update({"kiln.quantize_input": {"kind": "int", "v": 3}}),
            ["ConvInteger node 'ci'", "attribute 'kiln.quantize_input' must be 0, 1 or 2, found 3"],
            inspect=False, base=jd, weights=wd)
    crafted("quantize_input", "dropped", lambda j: node(j, "ci")["attrs"].pop("kiln.quantize_input"),
            ["ConvInteger node 'ci'", "input 0 (x) has type float32, expected uint8 or int8"],
            inspect=False, base=jd, weights=wd)
    crafted("quantize_input", "one_without_scale",
            lambda j: node(j, "ci")["attrs"].update({"kiln.quantize_input": {"kind": "int", "v": 1}}),
            ["ConvInteger node 'ci'", "attribute 'kiln.quantize_input' = 1 needs the scale input 6 (x_scale)"],
            inspect=False, base=jd, weights=wd)
    def scale_input(j):  # input 6 given (the bias) where the op computes x_scale
        ins = node(j, "ci")["inputs"]
        ins.extend([""] * (7 - len(ins)))
        ins[6] = ins[5]
    crafted("quantize_input", "scale_with_two", scale_input,
            ["ConvInteger node 'ci'", "input 6 (x_scale) needs attribute 'kiln.quantize_input' = 1"],
            inspect=False, base=jd, weights=wd)
    crafted("quantize_input", "scale_by_x_not_one",
            lambda j: node(j, "ci")["attrs"].update({"kiln.scale_by_x": {"kind": "int", "v": 3}}),
            ["ConvInteger node 'ci'", "attribute 'kiln.scale_by_x' must be 0 or 1, found 3"],
            inspect=False, base=jd, weights=wd)
    # A residual after the rescaled ConvInteger (format version 16):
    # fuse-residual gives it R as input 7 (kiln.sum = 1) and the Relu after
    # the sum.
    dr_onnx = os.path.join(d, "dynamic_residual.onnx")
    onnx.save(helper.make_model(helper.make_graph(
        [helper.make_node("Transpose", ["x_nhwc"], ["x"], name="to_nchw", perm=[0, 3, 1, 2]),
         helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"], name="dql"),
         helper.make_node("ConvInteger", ["xq", "wq", "xz"], ["acc"], name="ci", pads=[1, 1, 1, 1]),
         helper.make_node("Cast", ["acc"], ["f"], name="cast", to=TensorProto.FLOAT),
         helper.make_node("Mul", ["xs", "ws"], ["s"], name="smul"),
         helper.make_node("Mul", ["f", "s"], ["m"], name="rescale"),
         helper.make_node("Add", ["m", "b"], ["a"], name="bias"),
         helper.make_node("Add", ["a", "x"], ["r"], name="residual"),
         helper.make_node("Relu", ["r"], ["out"], name="relu")],
        "g", [helper.make_tensor_value_info("x_nhwc", TensorProto.FLOAT, [1, 5, 5, 4])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4, 5, 5])],
        [numpy_helper.from_array(rng.integers(-127, 128, (4, 4, 3, 3)).astype(np.int8), "wq"),
         numpy_helper.from_array(np.array([0.01, 0.02, 0.03, 0.04], np.float32).reshape(4, 1, 1), "ws"),
         numpy_helper.from_array(np.array([0.5, -0.25, 1.0, 0.0], np.float32).reshape(4, 1, 1), "b")]),
        opset_imports=[helper.make_opsetid("", 13)]), dr_onnx)
    dr_kiln = os.path.join(d, "dynamic_residual.kiln")
    rc, out = ctx.run(["compile", "--model", dr_onnx, "--output", dr_kiln])
    assert rc == 0, out
    jr, wr = read_kiln(dr_kiln)
    cr = node(jr, "ci")
    assert cr["attrs"].get("kiln.sum") == {"kind": "int", "v": 1}, cr
    assert cr["attrs"].get("kiln.activation") == {"kind": "string", "v": "Relu"}, cr
    assert len(cr["inputs"]) == 8 and cr["inputs"][7], cr
    crafted("integer_residual", "dropped", lambda j: node(j, "ci")["attrs"].pop("kiln.sum"),
            ["ConvInteger node 'ci'", "input 7 (a fused residual) needs attribute 'kiln.sum' = 1"],
            inspect=False, base=jr, weights=wr)
    crafted("integer_residual", "not_one",
            lambda j: node(j, "ci")["attrs"].update({"kiln.sum": {"kind": "int", "v": 2}}),
            ["ConvInteger node 'ci'", "attribute 'kiln.sum' must be 0 or 1, found 2"],
            inspect=False, base=jr, weights=wr)
    crafted("integer_residual", "missing", lambda j: node(j, "ci")["inputs"].__setitem__(7, ""),
            ["ConvInteger node 'ci'", "attribute 'kiln.sum' = 1 needs the residual input 7"],
            inspect=False, base=jr, weights=wr)
    crafted("integer_residual", "bias_as_residual",
            lambda j: node(j, "ci")["inputs"].__setitem__(7, node(j, "ci")["inputs"][5]),
            ["ConvInteger node 'ci'", "residual input 7 has shape [4,1,1], expected the output's [1,5,5,4]"],
            inspect=False, base=jr, weights=wr)
    # The MatMulInteger form (no layout change): dropping the attribute
    # leaves inputs 4 and 5 that nothing explains.
    dm_onnx = os.path.join(d, "dynamic_matmul.onnx")
    onnx.save(helper.make_model(helper.make_graph(
        [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"], name="dql"),
         helper.make_node("MatMulInteger", ["xq", "wq", "xz"], ["acc"], name="mi"),
         helper.make_node("Cast", ["acc"], ["f"], name="cast", to=TensorProto.FLOAT),
         helper.make_node("Mul", ["xs", "ws"], ["s"], name="smul"),
         helper.make_node("Mul", ["f", "s"], ["m"], name="rescale"),
         helper.make_node("Add", ["m", "b"], ["out"], name="bias")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 3, 5])],
        [numpy_helper.from_array(rng.integers(-127, 128, (4, 5)).astype(np.int8), "wq"),
         numpy_helper.from_array(np.linspace(0.01, 0.05, 5).astype(np.float32), "ws"),
         numpy_helper.from_array(np.linspace(-1, 1, 5).astype(np.float32), "b")]),
        opset_imports=[helper.make_opsetid("", 13)]), dm_onnx)
    dm_kiln = os.path.join(d, "dynamic_matmul.kiln")
    rc, out = ctx.run(["compile", "--model", dm_onnx, "--output", dm_kiln])
    assert rc == 0, out
    jm, wm = read_kiln(dm_kiln)
    assert node(jm, "mi")["attrs"].get("kiln.rescale") == {"kind": "int", "v": 1}, node(jm, "mi")
    crafted("rescale", "matmul_dropped", lambda j: node(j, "mi")["attrs"].pop("kiln.rescale"),
            ["MatMulInteger node 'mi'", "inputs 4 and 5 (a fused scale and bias) need attribute 'kiln.rescale' = 1"],
            inspect=False, base=jm, weights=wm)
    # A QDQ projection: fuse-qdq makes the QLinearMatMul, fuse-integer-rescale
    # gives it the DequantizeLinear after it and the bias Add (kiln.dequantize
    # = 1, the bias as input 8).
    qm_onnx = os.path.join(d, "qdq_matmul.onnx")
    k_ = lambda name, v, t: numpy_helper.from_array(np.array(v, t), name)
    onnx.save(helper.make_model(helper.make_graph(
        [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"], name="dq_x"),
         helper.make_node("DequantizeLinear", ["wq", "ws"], ["wf"], name="dq_w"),
         helper.make_node("MatMul", ["xf", "wf"], ["m"], name="mm"),
         helper.make_node("QuantizeLinear", ["m", "ys", "yz"], ["q"], name="q_y"),
         helper.make_node("DequantizeLinear", ["q", "ys", "yz"], ["f"], name="dq_y"),
         helper.make_node("Add", ["f", "b"], ["out"], name="bias")],
        "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, [2, 4])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 5])],
        [k_("xs", 0.02, np.float32), k_("xz", 128, np.uint8),
         numpy_helper.from_array(rng.integers(-127, 128, (4, 5)).astype(np.int8), "wq"), k_("ws", 0.01, np.float32),
         k_("ys", 0.05, np.float32), k_("yz", 128, np.uint8),
         numpy_helper.from_array(np.linspace(-1, 1, 5).astype(np.float32), "b")]),
        opset_imports=[helper.make_opsetid("", 13)]), qm_onnx)
    qm_kiln = os.path.join(d, "qdq_matmul.kiln")
    rc, out = ctx.run(["compile", "--model", qm_onnx, "--output", qm_kiln])
    assert rc == 0, out
    jq, wq_ = read_kiln(qm_kiln)
    qmm = next(n for n in jq["graph"]["nodes"] if n["op"] == "QLinearMatMul")
    assert qmm["attrs"].get("kiln.dequantize") == {"kind": "int", "v": 1}, qmm
    qname = qmm["name"]
    crafted("dequantize", "dropped", lambda j: node(j, qname)["attrs"].pop("kiln.dequantize"),
            [f"QLinearMatMul node '{qname}'", "input 8 (a fused bias) needs attribute 'kiln.dequantize' = 1"],
            inspect=False, base=jq, weights=wq_)
    crafted("dequantize", "not_one", lambda j: node(j, qname)["attrs"].update({"kiln.dequantize": {"kind": "int", "v": 3}}),
            [f"QLinearMatMul node '{qname}'", "attribute 'kiln.dequantize' must be 0 or 1, found 3"],
            inspect=False, base=jq, weights=wq_)
    # Channels-last BatchNormalization (format version 14): one no
    # convolution absorbs (after a Relu) runs with "kiln.nhwc" = 1; the
    # loader's inference checks the value and what it needs.
    bn_onnx = os.path.join(d, "bn_nhwc.onnx")
    onnx.save(helper.make_model(helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"], name="relu"),
         helper.make_node("BatchNormalization", ["r", "s", "bb", "m", "v"], ["out"], name="bn")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 5])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 3, 4, 5])],
        [numpy_helper.from_array(rng.standard_normal((3, 2, 3, 3)).astype(np.float32), "w"),
         numpy_helper.from_array(np.array([1.0, 0.5, 2.0], np.float32), "s"),
         numpy_helper.from_array(np.array([0.1, -0.2, 0.3], np.float32), "bb"),
         numpy_helper.from_array(np.array([0.0, 0.5, -0.5], np.float32), "m"),
         numpy_helper.from_array(np.array([1.0, 2.0, 0.5], np.float32), "v")]),
        opset_imports=[helper.make_opsetid("", 13)]), bn_onnx)
    bn_kiln = os.path.join(d, "bn_nhwc.kiln")
    rc, out = ctx.run(["compile", "--model", bn_onnx, "--output", bn_kiln])
    assert rc == 0, out
    jn, wn = read_kiln(bn_kiln)
    assert node(jn, "bn")["attrs"].get("kiln.nhwc") == {"kind": "int", "v": 1}, node(jn, "bn")
    # Without it the NHWC input [1,4,5,3] reads as 4 channels against 3 parameters.
    crafted("bn_nhwc", "dropped", lambda j: node(j, "bn")["attrs"].pop("kiln.nhwc"),
            ["BatchNormalization node 'bn'", "input 1 (scale) has shape [3], expected 4 values"],
            inspect=False, base=jn, weights=wn)
    crafted("bn_nhwc", "not_one", lambda j: node(j, "bn")["attrs"].update({"kiln.nhwc": {"kind": "int", "v": 2}}),
            ["BatchNormalization node 'bn'", "attribute 'kiln.nhwc' must be 0 or 1, found 2"],
            inspect=False, base=jn, weights=wn)
    crafted("bn_nhwc", "activation_unknown",
            lambda j: node(j, "bn")["attrs"].update({"kiln.activation": {"kind": "string", "v": "Swish"}}),
            ["BatchNormalization node 'bn'", "fused activation 'Swish' is not one a BatchNormalization applies"],
            inspect=False, base=jn, weights=wn)
    crafted("bn_nhwc", "training_mode", lambda j: node(j, "bn")["attrs"].update({"training_mode": {"kind": "int", "v": 1}}),
            ["BatchNormalization node 'bn'", "attribute 'kiln.nhwc' needs a 4-D X, spatial statistics, inference mode"],
            inspect=False, base=jn, weights=wn)
    # A bfloat16 convolution (format version 15) carries "kiln.bf16" = 1;
    # the loader's inference checks the value.
    bf_onnx = os.path.join(d, "bf16_conv.onnx")
    onnx.save(helper.make_model(helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["out"], name="conv", pads=[1, 1, 1, 1])],
        "g", [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [1, 2, 4, 5])],
        [helper.make_tensor_value_info("out", TensorProto.BFLOAT16, [1, 3, 4, 5])],
        [helper.make_tensor("w", TensorProto.BFLOAT16, [3, 2, 3, 3], [((i * 5) % 9 - 4) / 4 for i in range(54)])]),
        opset_imports=[helper.make_opsetid("", 13)]), bf_onnx)
    bf_kiln = os.path.join(d, "bf16_conv.kiln")
    rc, out = ctx.run(["compile", "--model", bf_onnx, "--output", bf_kiln])
    assert rc == 0, out
    jb, wb = read_kiln(bf_kiln)
    assert node(jb, "conv")["attrs"].get("kiln.bf16") == {"kind": "int", "v": 1}, node(jb, "conv")
    crafted("bf16_conv", "not_one", lambda j: node(j, "conv")["attrs"].update({"kiln.bf16": {"kind": "int", "v": 2}}),
            ["Conv node 'conv'", "attribute 'kiln.bf16' must be 0 or 1, found 2"],
            inspect=False, base=jb, weights=wb)

    # -- placement (format version 3): nodes on the CPU, copies, host arena ---
    # The same model compiled for a target without Tanh (hand-derived: tanh
    # on the CPU reading c_on_host, writing d in the host arena, region 6;
    # sigmoid reads the copy d_on_device).
    placed = os.path.join(d, "placed.kiln")
    rc, out = ctx.run(["compile", "--model", onnx_path, "--output", placed, "--target", "sim:lack=Tanh"])
    assert rc == 0, out
    j1, w1 = read_kiln(placed)
    assert j1["plan"]["placements"]["d"][0] == 6 and j1["plan"]["host_arena_size"] == 128, j1["plan"]
    assert node(j1, "tanh")["attrs"]["kiln.device"] == {"kind": "string", "v": "cpu"}
    cases.append(Case("placement/placed_file_runs_on_the_lacking_device",
                      ["run", placed, "--device", "sim:lack=Tanh"], ["output 0 'out'"], rc=0))
    cases.append(Case("placement/inspect_shows_placement", ["inspect", placed],
                      ["1 on the CPU", "cpu   Tanh 'tanh'", "copy  to host   'c'", "copy  to device 'd'"], rc=0))
    cpu_attr = {"kind": "string", "v": "cpu"}
    crafted("placement", "cpu_node_reads_device_memory", lambda j: node(j, "tanh")["attrs"].update({"kiln.device": cpu_attr}),
            ["Tanh node 'tanh' runs on the CPU but reads 'c', which lives in device memory"])
    crafted("placement", "not_cpu", lambda j: node(j, "tanh")["attrs"].update({"kiln.device": {"kind": "string", "v": "gpu"}}),
            ["Tanh node 'tanh'", "attribute 'kiln.device' must be the string \"cpu\""])
    crafted("placement", "device_int", lambda j: node(j, "tanh")["attrs"].update({"kiln.device": {"kind": "int", "v": 1}}),
            ["Tanh node 'tanh'", "attribute 'kiln.device' must be the string"])
    crafted("placement", "copy_missing", lambda j: node(j, "tanh")["attrs"].pop("kiln.device"),
            ["Tanh node 'tanh' runs on the target device but reads 'c_on_host', which lives in host memory"], base=j1,
            weights=w1)
    crafted("placement", "host_value_in_device_arena", place("d", 1, 0, 64),
            ["value 'd'", "region 1 (arena)", "Tanh node 'tanh' writes it in host memory"], base=j1, weights=w1)
    crafted("placement", "device_value_in_host_arena", lambda j: j["plan"]["placements"]["d_on_device"].__setitem__(0, 6),
            ["value 'd_on_device'", "region 6 (host arena)", "writes it in device memory"], base=j1, weights=w1)
    crafted("placement", "host_arena_huge", setp(["plan", "host_arena_size"], U64_MAX),
            [f"plan host_arena_size {U64_MAX} differs from the 128 bytes"], base=j1, weights=w1)
    crafted("placement", "host_arena_short", setp(["plan", "host_arena_size"], 64),
            ["past the host arena's 64 bytes"], base=j1, weights=w1)
    crafted("placement", "host_arena_string", setp(["plan", "host_arena_size"], "128"),
            ["host_arena_size", "found string"], base=j1, weights=w1)
    crafted("placement", "host_tensors_overlap",
            chain(place("c_on_host", 6, 0, 64), place("d", 6, 0, 64), setp(["plan", "host_arena_size"], 64)),
            ["share bytes while both are live"], base=j1, weights=w1)
    crafted("placement", "copy_on_cpu",
            lambda j: [n["attrs"].update({"kiln.device": cpu_attr}) for n in j["graph"]["nodes"] if n["op"] == "MemcpyToHost"],
            ["MemcpyToHost node 'copy_to_host_c' cannot be placed on the CPU"], base=j1, weights=w1)

    # -- non-regular files as the model (must not block) ----------------------
    fifo = os.path.join(d, "fifo.kiln")

    def make_fifo():
        if os.path.lexists(fifo):
            os.remove(fifo)
        os.mkfifo(fifo)

    link = os.path.join(d, "link_to_fifo.kiln")

    def make_link():
        make_fifo()
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(fifo, link)

    dirp = os.path.join(d, "dir.kiln")
    os.makedirs(dirp, exist_ok=True)
    for cmd in ("run", "inspect"):
        cases.append(Case(f"non_regular/fifo/{cmd}", [cmd, fifo], ["fifo.kiln", "FIFO", "not a regular file"],
                          timeout=20, before=make_fifo))
        cases.append(Case(f"non_regular/symlink_to_fifo/{cmd}", [cmd, link],
                          ["link_to_fifo.kiln", "not a regular file"], timeout=20, before=make_link))
        cases.append(Case(f"non_regular/directory/{cmd}", [cmd, dirp], ["dir.kiln", "directory"]))
        cases.append(Case(f"non_regular/char_device/{cmd}", [cmd, "/dev/zero"], ["/dev/zero", "not a regular file"],
                          timeout=20))
        cases.append(Case(f"non_regular/missing/{cmd}", [cmd, os.path.join(d, "nope.kiln")], ["nope.kiln"]))
    return cases
