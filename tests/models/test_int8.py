#!/usr/bin/python3
"""Int8 torchvision models and encoder: tools/quantize.py's QDQ, QOperator and dynamically
quantized forms run on Kiln's int8 kernels.

  /usr/bin/python3 tests/models/test_int8.py --kiln build/kiln --work DIR [--models resnet18,mobilenet_v2,bert]

For each model: the float32 export with BatchNorm folded (tools/export_torchvision.py
--fuse-bn) is quantized by tools/quantize.py (uint8 activations calibrated on seeded data,
int8 per-channel weights, int32 biases: ONNX Runtime's default QDQ form) and compiled twice:
as it is, where fuse-qdq turns every DequantizeLinear -> Conv -> QuantizeLinear into a
QLinearConv (checked: no float Conv left), and with --disable-pass fuse-qdq, where each op
runs as the graph says (DequantizeLinear, float32 Conv, QuantizeLinear; every one of them
checked against ONNX's reference outputs by the conformance tests). The int32 path must
agree with that op-by-op QDQ semantics within 1% of the output's magnitude (float32 and
exact int32 sums round differently, and a one-step difference in one layer carries on),
and both must keep PyTorch's float32 top-1 class. `bert`: test_bert.py's encoder (batch 2,
seq 16), calibrated on its inputs; its MatMuls by weights become QLinearMatMul; the hidden
states must stay within 5% of float32 PyTorch's magnitude. ONNX Runtime on the same file is
compared in bench/int8_bench.py.
"""
import argparse
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from test_torchvision_models import TestError, run  # noqa: E402

EXPORT = os.path.join(REPO, "tools", "export_torchvision.py")
QUANTIZE = os.path.join(REPO, "tools", "quantize.py")


def count_ops(kiln, path, timeout):
    """Op counts of a compiled file; "Add" leaves out the int32 bias additions lower-contrib
    makes of a QGemm (nodes named <QGemm>/add_c), which are not float Adds."""
    import json
    j = json.loads(run([kiln, "inspect", path, "--json"], "inspect", timeout, echo=False))
    counts = dict(j.get("op_counts") or {})
    qgemm_bias = sum(1 for n in j.get("nodes", []) if n.get("op") == "Add" and n.get("name", "").endswith("/add_c"))
    if qgemm_bias:
        counts["Add"] -= qgemm_bias
        if not counts["Add"]:
            del counts["Add"]
    return counts


def export_bert(d):
    """The BERT-style encoder of test_bert.py (batch 2, seq 16, hidden 128, 2 layers)."""
    import types
    import test_bert
    args = types.SimpleNamespace(vocab=1000, hidden=128, layers=2, heads=4, seq=16, batch=2, seed=0, opset=13,
                                 dynamic=False, max_pos=0, shapes="", ranges="")
    test_bert.export(d, args)


def run_kiln(kiln, d, tag, onnx_path, inputs, timeout, extra=()):
    k = os.path.join(d, tag + ".kiln")
    run([kiln, "compile", "--model", onnx_path, "--output", k, *extra], f"compile {tag}", timeout)
    od = os.path.join(d, "out_" + tag)
    run([kiln, "run", k, *inputs, "--output-dir", od], f"run {tag}", timeout, echo=False)
    return count_ops(kiln, k, timeout), np.load(os.path.join(od, "output_0.npy")).astype(np.float64)


def check_external(kiln, d, model, qdq, inputs, embedded, timeout):
    """Int8 weights stay int8 in external weights (one file per weight, one combined file): the
    bytes written are at most the QDQ file's initializers (int8 weights at one byte each; a
    widened weight would take four), and the outputs equal the embedded model's."""
    import json
    import onnx
    from onnx import numpy_helper
    m = onnx.load(qdq)
    init_bytes = sum(numpy_helper.to_array(t).nbytes for t in m.graph.initializer)
    fails = []
    for mode in (1, 2):
        wd = os.path.join(d, f"ext{mode}_weights")
        if os.path.isdir(wd):
            import shutil
            shutil.rmtree(wd)
        k = os.path.join(d, f"ext{mode}.kiln")
        run([kiln, "compile", "--model", qdq, "--output", k, "--external-weight", str(mode),
             "--external-weight-dir", wd], f"compile external {mode}", timeout)
        meta = json.load(open(os.path.join(wd, "meta.json")))
        written = sum(w["length"] for w in meta["weights"].values())
        od = os.path.join(d, f"out_ext{mode}")
        run([kiln, "run", k, *inputs, "--output-dir", od], f"run external {mode}", timeout, echo=False)
        got = np.load(os.path.join(od, "output_0.npy")).astype(np.float64)
        print(f"{model} external weights mode {mode}: {written} bytes written, QDQ initializers {init_bytes} bytes; "
              f"max|diff| vs embedded {float(np.abs(got - embedded).max()):.3g}", flush=True)
        if written > 1.02 * init_bytes + 4096:
            fails.append(f"{model} external mode {mode}: {written} bytes > the QDQ file's {init_bytes} (int8 widened?)")
        if not np.array_equal(got, embedded):
            fails.append(f"{model} external mode {mode}: outputs differ from the embedded model's")
    return fails


def check_qoperator(kiln, d, model, inputs, extra_q, ref, timeout):
    """QOperator form (QLinearConv/QLinearMatMul and com.microsoft QLinearAdd,
    QLinearGlobalAveragePool, QGemm...): every quantized op must run as such, and agree with the QDQ
    model it was converted from run op by op (float ops between QuantizeLinear/DequantizeLinear,
    each checked against ONNX's reference outputs) within 1% of the output's magnitude."""
    qop, qdq = os.path.join(d, "qoperator.onnx"), os.path.join(d, "qoperator_qdq.onnx")
    run([sys.executable, QUANTIZE, os.path.join(d, "model.onnx"), qop, "--kiln", kiln, "--format", "qoperator",
         "--qdq-output", qdq] + extra_q, "quantize qoperator", timeout)
    ops, got = run_kiln(kiln, d, "qoperator", qop, inputs, timeout)
    _, want = run_kiln(kiln, d, "qoperator_qdq", qdq, inputs, timeout, ["--disable-pass", "fuse-qdq"])
    print(f"{model} qoperator: {ops}", flush=True)
    fails = []
    need = ["QLinearMatMul"] if model == "bert" else ["QLinearConv", "QLinearAdd"]
    if model == "resnet18":
        need.append("QLinearGlobalAveragePool")
    # The classifier's Gemm is a com.microsoft QGemm (lowered to MatMulInteger and a rescale).
    if model != "bert":
        need.append("MatMulInteger")
    if any(ops.get(op, 0) == 0 for op in need) or ops.get("Conv", 0) or ops.get("Gemm", 0) or \
            (ops.get("Add", 0) and model != "bert"):
        fails.append(f"{model} qoperator: expected {need} and no float Conv/Gemm/Add: {ops}")
    diff, bound = float(np.abs(got - want).max()), 0.01 * float(np.abs(want).max())
    print(f"{model} qoperator vs its QDQ op by op: max|diff| {diff:.4g} (bound {bound:.4g})", flush=True)
    if not diff <= bound:
        fails.append(f"{model} qoperator vs QDQ op by op: max|diff| {diff:.4g} > {bound:.4g}")
    if model != "bert" and int(got.argmax()) != int(ref.argmax()):
        fails.append(f"{model} qoperator: top-1 {int(got.argmax())}, PyTorch's {int(ref.argmax())}")
    return fails


def check_dynamic(kiln, d, model, inputs, ref, timeout):
    """Dynamic quantization (ONNX Runtime's quantize_dynamic form): DynamicQuantizeLinear ->
    ConvInteger / MatMulInteger -> rescale; top-1 of PyTorch's float32 (vision) or within 5% of
    its magnitude (the encoder)."""
    dyn = os.path.join(d, "dynamic.onnx")
    run([sys.executable, QUANTIZE, os.path.join(d, "model.onnx"), dyn, "--kiln", kiln, "--format", "dynamic"],
        "quantize dynamic", timeout)
    ops, got = run_kiln(kiln, d, "dynamic", dyn, inputs, timeout)
    print(f"{model} dynamic: {ops}", flush=True)
    op = "MatMulInteger" if model == "bert" else "ConvInteger"
    far, mag = float(np.abs(got - ref).max()), float(np.abs(ref).max())
    print(f"{model} dynamic vs float32 PyTorch: max|diff| {far:.4g} (max|ref| {mag:.4g}); top-1 "
          f"{int(got.argmax())} / PyTorch {int(ref.argmax())}", flush=True)
    if not ops.get(op) or ops.get("DynamicQuantizeLinear", 0) == 0:
        return [f"{model} dynamic: expected {op} and DynamicQuantizeLinear: {ops}"]
    if model == "bert":
        return [] if far <= 0.05 * mag else [f"{model} dynamic vs float32 PyTorch: {far:.4g} > 5% of {mag:.4g}"]
    return [] if int(got.argmax()) == int(ref.argmax()) else [f"{model} dynamic: top-1 {int(got.argmax())}"]


def check_7bit(kiln, d, model, inputs, extra_q, ref, timeout):
    """tools/quantize.py --reduce-range (weights in [-64, 64], ONNX Runtime's reduce_range):
    on CPUs without VNNI the int8 primitives run exactly only for such weights, so this is
    where they run there. Fused vs op by op within 1% of the magnitude, PyTorch's top-1 (vision)
    or within 5% of its magnitude (the encoder)."""
    q = os.path.join(d, "qdq7.onnx")
    run([sys.executable, QUANTIZE, os.path.join(d, "model.onnx"), q, "--kiln", kiln, "--reduce-range"] + extra_q,
        "quantize --reduce-range", timeout)
    import onnx
    from onnx import numpy_helper
    wmax = max((int(np.abs(numpy_helper.to_array(t).astype(np.int32)).max()) for t in onnx.load(q).graph.initializer
                if t.data_type == onnx.TensorProto.INT8 and t.dims), default=0)
    _, fused = run_kiln(kiln, d, "qdq7_fused", q, inputs, timeout)
    _, plain = run_kiln(kiln, d, "qdq7_plain", q, inputs, timeout, ["--disable-pass", "fuse-qdq"])
    diff, mag = float(np.abs(fused - plain).max()), float(np.abs(plain).max())
    far = float(np.abs(fused - ref).max())
    print(f"{model} 7-bit weights (max |w| {wmax}): fused vs op by op max|diff| {diff:.4g} (bound {0.01 * mag:.4g}); "
          f"vs float32 PyTorch {far:.4g}; top-1 {int(fused.argmax())} / PyTorch {int(ref.argmax())}", flush=True)
    fails = [] if 0 < wmax <= 64 else [f"{model} --reduce-range: int8 weights up to {wmax}, want 1..64"]
    if not diff <= 0.01 * mag:
        fails.append(f"{model} 7-bit: fused vs op-by-op max|diff| {diff:.4g} > {0.01 * mag:.4g}")
    if model == "bert":
        if not far <= 0.05 * float(np.abs(ref).max()):
            fails.append(f"{model} 7-bit vs float32 PyTorch max|diff| {far:.4g}")
    elif int(fused.argmax()) != int(ref.argmax()):
        fails.append(f"{model} 7-bit: top-1 {int(fused.argmax())}, PyTorch's {int(ref.argmax())}")
    return fails


def check(kiln, work, model, timeout, formats=("qdq", "qoperator", "dynamic", "qdq-7bit")):
    d = os.path.join(work, model + "_int8")
    os.makedirs(d, exist_ok=True)
    bert = model == "bert"
    if bert:
        if not os.path.exists(os.path.join(d, "model.onnx")):
            export_bert(d)
        feeds = ["input_ids", "attention_mask"]
    else:
        if not os.path.exists(os.path.join(d, "model.onnx")) or \
                os.path.getmtime(os.path.join(d, "model.onnx")) < os.path.getmtime(EXPORT):
            run([sys.executable, EXPORT, "--model", model, "--out", d, "--fuse-bn"], "export", timeout)
        feeds = ["input"]
    qdq = os.path.join(d, "qdq.onnx")
    extra_q = [a for f in feeds for a in ("--feed", f"{f}={os.path.join(d, f + '.npy')}")] if bert else []
    run([sys.executable, QUANTIZE, os.path.join(d, "model.onnx"), qdq, "--kiln", kiln] + extra_q, "quantize", timeout)
    inputs = [a for f in feeds for a in ("--input", f"{f}={os.path.join(d, f + '.npy')}")]
    outs = {}
    for tag, extra in (("fused", []), ("plain", ["--disable-pass", "fuse-qdq"])):
        k = os.path.join(d, tag + ".kiln")
        run([kiln, "compile", "--model", qdq, "--output", k] + extra, f"compile {tag}", timeout)
        ops = count_ops(kiln, k, timeout)
        fused_op = "QLinearMatMul" if bert else "QLinearConv"
        if tag == "fused" and (ops.get("Conv", 0) != 0 or ops.get(fused_op, 0) == 0):
            raise TestError(f"{model}: fuse-qdq left float Convs or fused nothing: {ops}")
        if tag == "plain" and ops.get(fused_op, 0) != 0:
            raise TestError(f"{model}: --disable-pass fuse-qdq still fused: {ops}")
        od = os.path.join(d, "out_" + tag)
        run([kiln, "run", k, *inputs, "--output-dir", od], f"run {tag}", timeout, echo=False)
        outs[tag] = np.load(os.path.join(od, "output_0.npy")).astype(np.float64)
        print(f"{model} {tag}: {ops}", flush=True)
    ref = np.load(os.path.join(d, "expected_0.npy" if bert else "expected.npy")).astype(np.float64)
    fails = check_external(kiln, d, model, qdq, inputs, outs["fused"], timeout)
    fails += check_qoperator(kiln, d, model, inputs, extra_q, ref, timeout) if "qoperator" in formats else []
    if "dynamic" in formats:
        fails += check_dynamic(kiln, d, model, inputs, ref, timeout)
    if "qdq-7bit" in formats:
        fails += check_7bit(kiln, d, model, inputs, extra_q, ref, timeout)
    diff = float(np.abs(outs["fused"] - outs["plain"]).max())
    bound = 0.01 * float(np.abs(outs["plain"]).max())
    print(f"{model}: int32 path vs op-by-op QDQ max|diff| {diff:.4g} (bound {bound:.4g}); vs float32 PyTorch "
          f"{float(np.abs(outs['fused'] - ref).max()):.4g} (max|ref| {float(np.abs(ref).max()):.4g}); top-1 "
          f"{int(outs['fused'].argmax())} / {int(outs['plain'].argmax())} / PyTorch {int(ref.argmax())}", flush=True)
    if not diff <= bound:
        fails.append(f"{model}: fused vs op-by-op max|diff| {diff:.4g} > {bound:.4g}")
    if bert:
        # An encoder's hidden states: int8 stays within 5% of float32's magnitude.
        far = float(np.abs(outs["fused"] - ref).max())
        if not far <= 0.05 * float(np.abs(ref).max()):
            fails.append(f"{model}: int8 vs float32 PyTorch max|diff| {far:.4g} > 5% of {float(np.abs(ref).max()):.4g}")
        return fails
    for tag in outs:
        if int(outs[tag].argmax()) != int(ref.argmax()):
            fails.append(f"{model} {tag}: top-1 {int(outs[tag].argmax())}, PyTorch's {int(ref.argmax())}")
    return fails


def main():
    ap = argparse.ArgumentParser(description="Kiln int8 QDQ models")
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--models", default="resnet18")
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--formats", default="qdq,qoperator,dynamic,qdq-7bit",
                    help="besides QDQ (always): qoperator, dynamic, qdq-7bit (--reduce-range), comma-separated, per model as model:fmt+fmt "
                         "in --models overriding it")
    args = ap.parse_args()
    fails = []
    try:
        for m in args.models.split(","):
            m, _, fm = m.partition(":")
            formats = tuple((fm.replace("+", ",") if fm else args.formats).split(","))
            fails += check(os.path.abspath(args.kiln), os.path.abspath(args.work), m, args.timeout, formats)
    except (TestError, subprocess.CalledProcessError) as e:
        fails.append(str(e))
    for f in fails:
        print("FAIL " + f)
    print("PASS" if not fails else "FAILED")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
