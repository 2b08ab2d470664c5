#!/usr/bin/python3
"""Int8 convolution latency: QLinearConv vs the float32 Conv of the same shape, Kiln and
ONNX Runtime side by side (issue 15).

  /usr/bin/python3 bench/int8_bench.py --kiln build/kiln --work DIR [--threads 1,2]
      [--models resnet18,mobilenet_v2,bert,bert_base,lstm] [--skip-layers] [--formats qdq,qoperator,dynamic,qdq-7bit] [--runs 50] [--warmup 5] [--rounds 3] [--out bench/RESULTS.md]

Models: the float32 torchvision export with BatchNorm folded, and its QDQ form from
tools/quantize.py (which Kiln compiles to QLinearConv); the encoders of test_bert.py; `lstm`, a
2-layer LSTM (seq 50, batch 1, input 256, hidden 512; its dynamic form is DynamicQuantizeLSTM,
the only form that quantizes it). Kiln's int8 output is compared with
ONNX Runtime's on the same file (max |difference| over max |output|).

Layers of ResNet/MobileNet shapes, batch 1, random weights (seeded): a float32 Conv model
and a QLinearConv model (uint8 activations with zero points, int8 per-channel weights,
int32 bias: the form ONNX Runtime's quantizer writes). Each runs with `kiln bench` and
bench/ort_bench.js, interleaved round by round; reported: median over rounds of each
round's median, and each ratio as the median over rounds of that round's ratio; 1-thread runs all pinned to one CPU (--pin-cpu: a shared host's vCPUs can run
at very different speeds). Writes the section between <!-- bench:int8:begin --> and
<!-- bench:int8:end --> in --out.
"""
import argparse
import os
import shlex
import statistics
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from results_md import write_section  # noqa: E402
from run_bench import (ORT_BENCH, BenchError, int_list, log, machine_info, paired_ratio,  # noqa: E402
                       parse_json, run)

BEGIN, END = "<!-- bench:int8:begin -->", "<!-- bench:int8:end -->"
# name: (cin, cout, hw, k, stride, group)
LAYERS = {
    "resnet 3x3 64->64 @56": (64, 64, 56, 3, 1, 1),
    "resnet 3x3 256->256 @14": (256, 256, 14, 3, 1, 1),
    "resnet 1x1 256->64 @56": (256, 64, 56, 1, 1, 1),
    "mobilenet dw 3x3 144 @56": (144, 144, 56, 3, 1, 144),
}


def models(name, spec, d, rng):
    cin, cout, hw, k, stride, group = spec
    pad = k // 2
    w = (rng.standard_normal((cout, cin // group, k, k)) * 0.1).astype(np.float32)
    b = (rng.standard_normal(cout) * 0.1).astype(np.float32)
    attrs = dict(kernel_shape=[k, k], pads=[pad] * 4, strides=[stride] * 2, group=group)
    oh = (hw + 2 * pad - k) // stride + 1
    f32 = helper.make_model(helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout, oh, oh])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]),
        opset_imports=[helper.make_opsetid("", 13)])
    xs, ys = np.float32(0.02), np.float32(0.05)
    wsc = (np.abs(w).reshape(cout, -1).max(axis=1) / 127).astype(np.float32)
    wq = np.clip(np.round(w / wsc[:, None, None, None]), -127, 127).astype(np.int8)
    bq = np.round(b / (xs * wsc)).astype(np.int32)
    inits = [numpy_helper.from_array(np.array(xs), "xs"), numpy_helper.from_array(np.array(120, np.uint8), "xzp"),
             numpy_helper.from_array(wq, "w"), numpy_helper.from_array(wsc, "ws"),
             numpy_helper.from_array(np.array(0, np.int8), "wzp"), numpy_helper.from_array(np.array(ys), "ys"),
             numpy_helper.from_array(np.array(100, np.uint8), "yzp"), numpy_helper.from_array(bq, "b")]
    q = helper.make_model(helper.make_graph(
        [helper.make_node("QLinearConv", ["x", "xs", "xzp", "w", "ws", "wzp", "ys", "yzp", "b"], ["y"], **attrs)],
        "qconv", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, cin, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, cout, oh, oh])], inits),
        opset_imports=[helper.make_opsetid("", 13)])
    tag = name.replace(" ", "_").replace(">", "").replace("@", "")
    paths = {}
    for kind, m, x in (("float32", f32, rng.standard_normal((1, cin, hw, hw)).astype(np.float32)),
                       ("int8", q, rng.integers(0, 256, (1, cin, hw, hw)).astype(np.uint8))):
        p = os.path.join(d, f"{tag}_{kind}.onnx")
        onnx.save(m, p)
        np.save(p[:-5] + ".npy", x)
        paths[kind] = p
    return paths


EXPORT = os.path.join(os.path.dirname(HERE), "tools", "export_torchvision.py")
QUANTIZE = os.path.join(os.path.dirname(HERE), "tools", "quantize.py")


def input_args(onnx_path):
    """`--input` arguments for a bench model: NAME=FILE for each NAME.npy beside a model that
    has them (the encoder), else input 0 = <model>.npy."""
    d = os.path.dirname(onnx_path)
    named = [f for f in ("input_ids", "attention_mask") if os.path.exists(os.path.join(d, f + ".npy"))]
    if named:
        return [a for f in named for a in ("--input", f"{f}={os.path.join(d, f + '.npy')}")]
    return ["--input", "0=" + onnx_path[:-5] + ".npy"]


# Encoders of tests/models/test_bert.py: `bert` the small one of the model tests; `bert_base`
# BERT-base's width (hidden 768, 12 heads, FFN 3072) at sequence 128, 4 layers (each layer is
# the same work, so the ratios are those of 12).
BERTS = {"bert": dict(vocab=1000, hidden=128, layers=2, heads=4, seq=16, batch=2),
         "bert_base": dict(vocab=30522, hidden=768, layers=4, heads=12, seq=128, batch=1)}


# A 2-layer torch.nn.LSTM (tests/models/test_lstm.py's export) of a speech / text model's size:
# its dynamic form is two com.microsoft DynamicQuantizeLSTM.
LSTMS = {"lstm": dict(seq=50, batch=1, input_size=256, hidden=512)}


def model_pair(kiln, model, d, fmt="qdq"):
    """float32 (BatchNorm folded) and int8 (tools/quantize.py --format `fmt`: qdq, qoperator or
    dynamic) files of a torchvision model (with input.npy), or of `bert`,
    tests/models/test_bert.py's encoder (batch 2, seq 16, hidden 128)."""
    md = os.path.join(d, model)
    feeds = []
    if model in BERTS:
        sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "models"))
        import types
        import test_bert
        if not os.path.exists(os.path.join(md, "model.onnx")):
            os.makedirs(md, exist_ok=True)
            test_bert.export(md, types.SimpleNamespace(**BERTS[model], seed=0, opset=13, dynamic=False, max_pos=0,
                                                       shapes="", ranges=""))
        feeds = [a for f in ("input_ids", "attention_mask") for a in ("--feed", f"{f}={os.path.join(md, f + '.npy')}")]
    elif model in LSTMS:
        sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "models"))
        import types
        import test_lstm
        if not os.path.exists(os.path.join(md, "model.onnx")):
            os.makedirs(md, exist_ok=True)
            test_lstm.export(md, types.SimpleNamespace(**LSTMS[model], seed=0, opset=13))
            os.replace(os.path.join(md, "x.npy"), os.path.join(md, "input.npy"))
    elif not os.path.exists(os.path.join(md, "model.onnx")):
        run([sys.executable, EXPORT, "--model", model, "--out", md, "--fuse-bn"], f"export {model}")
    q = os.path.join(md, fmt + ".onnx")
    base, _, variant = fmt.partition("-")  # qdq-7bit: tools/quantize.py --reduce-range
    run([sys.executable, QUANTIZE, os.path.join(md, "model.onnx"), q, "--kiln", kiln, "--format", base]
        + (["--reduce-range"] if variant == "7bit" else []) + feeds, f"quantize {model} {fmt}")
    paths = {"float32": os.path.join(md, "model.onnx"), "int8": q}
    if model in BERTS:
        return paths
    for p in paths.values():
        if not os.path.exists(p[:-5] + ".npy"):
            os.symlink(os.path.join(md, "input.npy"), p[:-5] + ".npy")
    return paths


def compare_with_ort(kiln, node, onnx_path):
    """max |Kiln - ONNX Runtime| / max |ONNX Runtime| on the int8 file's output."""
    base = onnx_path[:-5]
    run([kiln, "run", base + ".kiln", *input_args(onnx_path), "--output-dir", base + "_kiln_out"], "kiln run")
    run([node, ORT_BENCH, onnx_path, *input_args(onnx_path), "--runs", "1", "--warmup", "0",
         "--output-dir", base + "_ort_out"], "ort run")
    k = np.load(os.path.join(base + "_kiln_out", "output_0.npy")).astype(np.float64)
    o = np.load(os.path.join(base + "_ort_out", "output_0.npy")).astype(np.float64)
    return float(np.abs(k - o).max() / max(np.abs(o).max(), 1e-30)), int(k.reshape(-1).argmax() == o.reshape(-1).argmax())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--threads", type=int_list, default=[1, 2])
    ap.add_argument("--models", default="resnet18,mobilenet_v2,bert,bert_base")
    ap.add_argument("--formats", default="qdq,qoperator,dynamic",
                    help="tools/quantize.py forms of each model: qdq, qoperator, dynamic; a -7bit suffix "
                         "(qdq-7bit) adds --reduce-range (weights in [-64, 64])")
    ap.add_argument("--skip-layers", action="store_true", help="the models only, not the one-layer models")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(HERE), "bench", "RESULTS.md"))
    ap.add_argument("--node", default="node")
    ap.add_argument("--pin-cpu", type=int, default=max(os.sched_getaffinity(0)),
                    help="CPU every 1-thread run is pinned to (taskset), as in run_bench.py; -1: not pinned")
    args = ap.parse_args()
    kiln = os.path.abspath(args.kiln)
    d = os.path.abspath(os.path.join(args.work, "int8_bench"))
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(0)
    rows, errors = [], []
    ort_version = "unknown"
    t0 = time.time()
    variants = [("kiln", "float32"), ("kiln", "int8"), ("ort", "float32"), ("ort", "int8")]
    jobs = [] if args.skip_layers else [(name, lambda name=name, spec=spec: models(name, spec, d, rng))
                                        for name, spec in LAYERS.items()]
    for fmt in args.formats.split(","):
        jobs += [(m if fmt == "qdq" else f"{m} ({fmt})", lambda m=m, fmt=fmt: model_pair(kiln, m, d, fmt))
                 for m in args.models.split(",") if m]
    accuracy = {}
    for name, make in jobs:
        try:
            paths = make()
            for kind, p in paths.items():
                run([kiln, "compile", "--model", p, "--output", p[:-5] + ".kiln"], f"kiln compile {name} {kind}")
            if name not in LAYERS:
                accuracy[name] = compare_with_ort(kiln, args.node, paths["int8"])
        except BenchError as e:
            errors.append(f"{name}: {e}")
            continue
        for threads in args.threads:
            res = {v: [] for v in variants}
            for r in range(args.rounds):
                for eng, kind in variants:
                    if res[(eng, kind)] is None:
                        continue
                    p = paths[kind]
                    common = [*input_args(p), "--runs", str(args.runs), "--warmup",
                              str(args.warmup), "--threads", str(threads)]
                    pin = ["taskset", "-c", str(args.pin_cpu)] if threads == 1 and args.pin_cpu >= 0 else []
                    cmd = pin + ([kiln, "bench", p[:-5] + ".kiln"] + common + ["--json"] if eng == "kiln"
                                 else [args.node, ORT_BENCH, p] + common)
                    what = f"{eng} {name} {kind} threads={threads} round {r + 1}"
                    try:
                        j = parse_json(run(cmd, what), what)
                        res[(eng, kind)].append(j["median_ms"])
                        if eng == "ort":
                            ort_version = j.get("ort_version", ort_version)
                        log(f"  {what}: median {j['median_ms']:.3f} ms")
                    except (BenchError, KeyError) as e:
                        errors.append(f"{what}: {e}")
                        res[(eng, kind)] = None
            rows.append((name, threads, {v: (statistics.median(x) if x else None) for v, x in res.items()}, res))
    cpu, nproc, rev, date = machine_info()
    flags = open("/proc/cpuinfo").read()
    vnni = ", ".join(f for f in ("avx512_vnni", "avx_vnni") if f in flags) or "no VNNI"
    cmd = " ".join(shlex.quote(c) for c in ["/usr/bin/python3", os.path.relpath(sys.argv[0], os.getcwd())]
                   + sys.argv[1:])

    def f(x):
        return "n/a" if x is None else f"{x:.3f}"

    def ratio(a, b):
        r = paired_ratio(a, b)
        return "n/a" if r is None else f"{r:.3f}"

    out = [BEGIN, "## Int8: QLinearConv layers and QDQ models vs float32 (CPU, batch 1)", "",
           f"- Machine: {cpu} ({vnni}), nproc {nproc}; {date}; Kiln commit {rev}; ONNX Runtime {ort_version}",
           "- One-node models, random weights: float32 Conv with bias, and QLinearConv with uint8 activations "
           "(zero points 120 / 100), int8 per-channel weights, int32 bias. Kiln runs QLinearConv on oneDNN's "
           "int8 convolution (NCHW uint8 in and out, reordered to its channels-last layout inside the kernel).",
           f"- {args.rounds} interleaved rounds, each {args.runs} timed runs after {args.warmup} warm-up runs; "
           "median over rounds of each round's median, in ms; ratios: the median over rounds of each round's "
           "ratio; "
           + (f"1-thread runs pinned to CPU {args.pin_cpu}." if args.pin_cpu >= 0 else "not pinned."), "",
           "| layer | threads | Kiln fp32 | Kiln int8 | Kiln int8/fp32 | ORT fp32 | ORT int8 | Kiln int8 / ORT int8 |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, threads, m, per in rows:
        k32, k8, o32, o8 = (m[v] for v in variants)
        r32, r8, q32, q8 = (per[v] for v in variants)
        out.append(f"| {name} | {threads} | {f(k32)} | {f(k8)} | {ratio(r8, r32)} | {f(o32)} | {f(o8)} | {ratio(r8, q8)} |")
    if accuracy:
        out += ["", "Models from tools/quantize.py: QDQ (Kiln fuses it into QLinearConv / QLinearMatMul), "
                "QOperator (QLinearConv, com.microsoft QLinearAdd, QLinearGlobalAveragePool...) and dynamic "
                "(DynamicQuantizeLinear + ConvInteger / MatMulInteger). Kiln int8 vs ONNX Runtime int8 on the same "
                "file:", "", "| model | max abs diff / max abs ORT output | same top-1 |", "|---|---:|---:|"]
        for m, (rel, top1) in accuracy.items():
            out.append(f"| {m} | {rel:.4f} | {'yes' if top1 else 'no'} |")
    if errors:
        out += ["", "Errors:", ""] + [f"- {e[:300]}" for e in errors]
    out += ["", f"Command: `{cmd}`", END]
    section = "\n".join(out) + "\n"
    write_section(args.out, section, BEGIN, END)
    print(section)
    log(f"wrote the int8 section to {args.out} in {time.time() - t0:.0f}s")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
