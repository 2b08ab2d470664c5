#!/usr/bin/python3
"""Convert a float32 ONNX model to float16 or bfloat16, as half-precision models
are shipped: every float32 tensor (inputs, outputs, weights, Constant and
ConstantOfShape values, value_info) becomes the half type and Casts to float32
become Casts to it, so the graph computes in half precision.

Rounding is to nearest, ties to even (numpy's float16; bfloat16 by the same rule
on the float32 bits), as PyTorch's .half()/.bfloat16() round.

  /usr/bin/python3 tools/convert_half.py IN.onnx OUT.onnx --dtype float16|bfloat16

Also a module: convert(model, "float16") returns the converted ModelProto, and
round_half(array, "bfloat16") rounds a float32 array to the half type's values
(returned as float32).
"""
import argparse
import sys

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

ELEM = {"float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16}


def to_bf16_bits(a):
    """float32 array -> uint16 bfloat16 bits, round to nearest even (NaN kept NaN)."""
    b = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    nan = np.isnan(a)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
    r[nan] = 0x7FC0
    return r


def round_half(a, dtype):
    """The float32 array's values rounded to `dtype` (float16/bfloat16), as float32."""
    a = np.asarray(a, dtype=np.float32)
    if dtype == "float16":
        return a.astype(np.float16).astype(np.float32)
    return (to_bf16_bits(a).astype(np.uint32) << 16).view(np.float32).reshape(a.shape)


def half_tensor(t, dtype, name=None):
    a = numpy_helper.to_array(t).astype(np.float32)
    name = t.name if name is None else name
    if dtype == "float16":
        return numpy_helper.from_array(a.astype(np.float16), name)
    out = TensorProto()
    out.name = name
    out.data_type = TensorProto.BFLOAT16
    out.dims.extend(a.shape)
    out.raw_data = to_bf16_bits(a).tobytes()
    return out


def _convert_graph(g, dtype):
    elem = ELEM[dtype]
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        tt = vi.type.tensor_type
        if vi.type.HasField("tensor_type") and tt.elem_type == TensorProto.FLOAT:
            tt.elem_type = elem
    for i, t in enumerate(g.initializer):
        if t.data_type == TensorProto.FLOAT:
            g.initializer[i].CopyFrom(half_tensor(t, dtype))
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.FLOAT:
                a.t.CopyFrom(half_tensor(a.t, dtype, a.t.name))
            elif a.type == onnx.AttributeProto.GRAPH:
                _convert_graph(a.g, dtype)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for sg in a.graphs:
                    _convert_graph(sg, dtype)
            elif a.name in ("to", "dtype") and a.type == onnx.AttributeProto.INT and a.i == TensorProto.FLOAT:
                a.i = elem


def convert(model, dtype):
    if dtype not in ELEM:
        raise ValueError(f"dtype must be float16 or bfloat16, got {dtype!r}")
    m = onnx.ModelProto()
    m.CopyFrom(model)
    _convert_graph(m.graph, dtype)
    return m


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--dtype", choices=sorted(ELEM), default="float16")
    args = ap.parse_args()
    m = convert(onnx.load(args.input), args.dtype)
    onnx.save(m, args.output)
    print(f"{args.input} -> {args.output} ({args.dtype})")


if __name__ == "__main__":
    sys.exit(main())
