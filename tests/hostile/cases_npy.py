"""Hostile .npy inputs (issue 9 item 2) and non-regular files as inputs (item
6): every one must be refused before any allocation, naming the file."""
import os
import struct

import onnx
from onnx import TensorProto, helper

from run_hostile import Case

CLASS = "npy"


def npy_bytes(header, data=b"", version=1, hlen=None):
    h = header.encode("latin-1")
    if version == 1:
        pre = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h) if hlen is None else hlen)
    else:
        pre = b"\x93NUMPY" + bytes([version, 0]) + struct.pack("<I", len(h) if hlen is None else hlen)
    return pre + h + data


def generate(ctx):
    d = ctx.dir(CLASS)
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    onnx_path = os.path.join(d, "relu.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), onnx_path)
    kiln_path = os.path.join(d, "relu.kiln")
    rc, out = ctx.run(["compile", "--model", onnx_path, "--output", kiln_path])
    assert rc == 0, out

    files = {
        # dims whose element count overflows int64 (the old reader allocated
        # a tiny buffer and wrote past it)
        "overflow_shape": npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 16), }\n",
                                    b"\0" * 64),
        "overflow_bytes": npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (2305843009213693952,), }\n",
                                    b"\0" * 64),
        "dim_too_long": npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,), }\n"),
        "over_limit": npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,), }\n", b"\0" * 16),
        # long padded header (the regex parser overflowed its stack)
        "padded_header": npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (" + " " * 60000 + "2, 3), }\n",
                                   b"\0" * 24),
        "header_too_long": npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" + " " * 70000 + "\n",
                                     b"\0" * 24, version=2),
        "header_len_past_eof": npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", hlen=60000),
        "truncated_data": npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", b"\0" * 20),
        "trailing_data": npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", b"\0" * 28),
        "negative_dim": npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 3), }\n", b"\0" * 24),
        "duplicate_key": npy_bytes("{'descr': '<f4', 'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }\n",
                                   b"\0" * 24),
        "unknown_key": npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}\n", b"\0" * 24),
        "big_endian": npy_bytes("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }\n", b"\0" * 24),
        "object_dtype": npy_bytes("{'descr': '|O', 'fortran_order': False, 'shape': (2, 3), }\n", b"\0" * 48),
        "unterminated": npy_bytes("{'descr': '<f4, 'fortran_order': False, 'shape': (2, 3), }\n", b"\0" * 24),
        "bad_version": b"\x93NUMPY\x07\x00" + b"\0" * 100,
        "bad_magic": b"\x93NUMPZ\x01\x00" + b"\0" * 100,
        "empty": b"",
    }
    cases = []
    for name, data in files.items():
        p = os.path.join(d, name + ".npy")
        with open(p, "wb") as f:
            f.write(data)
        if name == "padded_header":  # legal (whitespace is allowed): must parse, without a deep recursion
            cases.append(Case(f"run_{name}", ["run", kiln_path, "--input", f"x={p}"], ["output 0 'y' float32[2,3]"],
                              rc=0))
            continue
        cases.append(Case(f"run_{name}", ["run", kiln_path, "--input", f"x={p}", "--output-dir", d],
                          [name + ".npy"]))
    # the same reader serves compile --const-input
    for name in ("overflow_shape", "over_limit", "truncated_data"):
        p = os.path.join(d, name + ".npy")
        cases.append(Case(f"const_input_{name}",
                          ["compile", "--model", onnx_path, "--output", os.path.join(d, "c.kiln"),
                           "--const-input", f"x={p}"], [name + ".npy"]))

    # Non-regular files (item 6): a FIFO, a directory and a character device
    # given as the .npy must be refused without blocking.
    fifo = os.path.join(d, "fifo.npy")

    def make_fifo():
        if os.path.exists(fifo):
            os.remove(fifo)
        os.mkfifo(fifo)

    cases.append(Case("fifo_input", ["run", kiln_path, "--input", f"x={fifo}"], ["fifo.npy", "FIFO"],
                      timeout=20, before=make_fifo))
    cases.append(Case("fifo_const_input", ["compile", "--model", onnx_path, "--output", os.path.join(d, "c.kiln"),
                                           "--const-input", f"x={fifo}"], ["fifo.npy", "FIFO"],
                      timeout=20, before=make_fifo))
    dirp = os.path.join(d, "dir.npy")
    os.makedirs(dirp, exist_ok=True)
    cases.append(Case("directory_input", ["run", kiln_path, "--input", f"x={dirp}"], ["dir.npy", "directory"]))
    cases.append(Case("chardev_input", ["run", kiln_path, "--input", "x=/dev/zero"], ["/dev/zero", "device"],
                      timeout=20))
    cases.append(Case("missing_input", ["run", kiln_path, "--input", f"x={d}/nope.npy"], ["nope.npy"]))
    # --input index that does not fit an int (std::stoi threw out of main)
    good = os.path.join(d, "good.npy")
    with open(good, "wb") as f:
        f.write(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", b"\0" * 24))
    for idx in ("99999999999999999999999", "2147483648", "1"):
        cases.append(Case(f"input_index_{idx[:12]}", ["run", kiln_path, "--input", f"{idx}={good}"],
                          [idx, "out of range"]))
    return cases
