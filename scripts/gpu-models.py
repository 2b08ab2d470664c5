#!/usr/bin/env python3
"""Model check and latency on a GPU machine (run by scripts/gpu-check.sh there).

  python3 scripts/gpu-models.py --kiln KILN --work DIR [--models resnet50,bert_base,bert_dynamic] [--runs 200]

For each model: seeded random weights in PyTorch (ResNet-50 from torchvision; the BERT-base
encoder of bench/suite_export.py), exported to ONNX on that machine (too big to carry), compiled
with `kiln compile --target cuda`, run with `kiln run --device cuda` and compared by
||out - ref|| / ||ref|| with PyTorch in float64 on the CPU (and PyTorch's own float32 GPU output
likewise, for scale). Latency at batch 1: `kiln bench --device cuda` (host tensors in and out,
so its figure includes the input upload and the output download) against PyTorch on the same
GPU, eager and replaying a CUDA graph, each timed per run with a synchronisation (median), both
with device-resident inputs and with the host copies Kiln's figure includes. TF32 is off on both
sides. `bert_dynamic` (issue 13 on the GPU): one .kiln of a small encoder with symbolic batch and
seq at three shapes, and a model with extents from data (see dynamic_models). Prints one line per
model and writes DIR/models.json.
"""
import argparse
import json
import os
import subprocess
import sys
import time
import types
import warnings

import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build(name):
    torch.manual_seed(0)
    if name == "resnet50":
        import torchvision
        m = torchvision.models.resnet50(weights=None)
        gen = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for mod in m.modules():
                if isinstance(mod, torch.nn.BatchNorm2d):
                    c = mod.num_features
                    mod.running_mean.copy_(torch.randn(c, generator=gen) * 0.1)
                    mod.running_var.copy_(torch.rand(c, generator=gen) + 0.5)
        x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
        return m.eval(), [("x", x)], ["y"]
    if name == "bert_base":
        sys.path.insert(0, os.path.join(REPO, "tests", "models"))
        import test_bert
        a = types.SimpleNamespace(seed=0, vocab=30522, hidden=768, layers=12, heads=12, seq=128, max_pos=512)
        m = test_bert.build_model(a)
        ids, mask = test_bert.make_inputs(a, 1, 128, 0)
        return m.eval(), [("input_ids", ids), ("attention_mask", mask)], ["last_hidden_state", "pooler_output"]
    raise SystemExit(f"unknown model {name}")


def export(m, inputs, out_names, path):
    args = tuple(torch.from_numpy(v) for _, v in inputs)
    kw = dict(opset_version=13, input_names=[n for n, _ in inputs], output_names=out_names,
              do_constant_folding=True)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(m, args, path, dynamo=False, **kw)
        except TypeError:
            torch.onnx.export(m, args, path, **kw)


def rel(out, ref):
    out = np.asarray(out, np.float64)
    ref = np.asarray(ref, np.float64)
    if out.shape != ref.shape:
        return float("inf")
    if not np.all(np.isfinite(out)):
        return float("nan")
    return float(np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30))


def median_ms(fn, runs, warmup=20):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(ts))


def torch_times(m, inputs, runs):
    dev = torch.device("cuda")
    g = m.to(dev)
    host = [torch.from_numpy(v) for _, v in inputs]
    static = [h.to(dev) for h in host]
    res = {}
    with torch.no_grad():
        res["torch_eager_ms"] = median_ms(lambda: g(*static), runs)

        def eager_host():
            outs = g(*[h.to(dev) for h in host])
            outs = outs if isinstance(outs, (tuple, list)) else [outs]
            for o in outs:
                o.cpu()
        res["torch_eager_host_ms"] = median_ms(eager_host, runs)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                g(*static)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            gout = g(*static)
        res["torch_graph_ms"] = median_ms(graph.replay, runs)
        gouts = gout if isinstance(gout, (tuple, list)) else [gout]

        def graph_host():
            for st, h in zip(static, host):
                st.copy_(h)
            graph.replay()
            for o in gouts:
                o.cpu()
        res["torch_graph_host_ms"] = median_ms(graph_host, runs)
    return res


def dynamic_models(a, d):
    """Issue 13 on the GPU: one .kiln of a small BERT-style encoder exported with symbolic batch
    and seq, compiled for cuda with no flags, run at three shapes against PyTorch in float64;
    then a model whose extents follow from data (Range to int(max(x))) compiled for cuda and run
    there, whose outcome (its outputs against NumPy, or Kiln's refusal) is reported as it is."""
    sys.path.insert(0, os.path.join(REPO, "tests", "models"))
    import test_bert
    r = {}
    args = types.SimpleNamespace(seed=0, vocab=1000, hidden=256, layers=2, heads=4, seq=128, max_pos=512)
    m = test_bert.build_model(args).eval()
    ids, mask = test_bert.make_inputs(args, 2, 64, 0)
    onnx_path = os.path.join(d, "model.onnx")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
                "last_hidden_state": {0: "batch", 1: "seq"}, "pooler_output": {0: "batch"}}
        kw = dict(opset_version=13, input_names=["input_ids", "attention_mask"],
                  output_names=["last_hidden_state", "pooler_output"], do_constant_folding=True,
                  dynamic_axes=axes)
        targs = (torch.from_numpy(ids), torch.from_numpy(mask))
        try:
            torch.onnx.export(m, targs, onnx_path, dynamo=False, **kw)
        except TypeError:
            torch.onnx.export(m, targs, onnx_path, **kw)
    kf = os.path.join(d, "cuda.kiln")
    p = subprocess.run([a.kiln, "compile", "--model", onnx_path, "--output", kf, "--target", "cuda"],
                       capture_output=True, text=True, timeout=300)
    if p.returncode:
        raise RuntimeError("compile: " + (p.stderr or p.stdout)[-800:])
    errs = {}
    for b, sq in ((1, 16), (2, 64), (4, 128)):
        ids, mask = test_bert.make_inputs(args, b, sq, b * 1000 + sq)
        specs = []
        for n, v in (("input_ids", ids), ("attention_mask", mask)):
            f = os.path.join(d, f"{n}_{b}x{sq}.npy")
            np.save(f, v)
            specs += ["--input", f"{n}={f}"]
        with torch.no_grad():
            ref = [t.numpy() for t in m.double()(torch.from_numpy(ids), torch.from_numpy(mask))]
        od = os.path.join(d, f"out_{b}x{sq}")
        p = subprocess.run([a.kiln, "run", kf, "--device", "cuda", "--output-dir", od] + specs,
                           capture_output=True, text=True, timeout=120)
        if p.returncode:
            raise RuntimeError(f"run {b}x{sq}: " + (p.stderr or p.stdout)[-800:])
        outs = [np.load(os.path.join(od, f"output_{j}.npy")) for j in range(len(ref))]
        errs[f"{b}x{sq}"] = max(rel(o, f) for o, f in zip(outs, ref))
    m.float()
    r["kiln_rel_err_by_shape"] = errs
    r["kiln_rel_err"] = max(errs.values())
    # Extents from data: y = 2 * Range(0, int(max(x))) of x[1000].
    import onnx
    from onnx import helper as h, TensorProto as T
    nodes = [h.make_node("ReduceMax", ["x"], ["mx"], keepdims=0), h.make_node("Cast", ["mx"], ["n"], to=T.INT64),
             h.make_node("Range", ["zero", "n", "one"], ["r"]), h.make_node("Cast", ["r"], ["rf"], to=T.FLOAT),
             h.make_node("Add", ["rf", "rf"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1000])],
                     [h.make_tensor_value_info("y", T.FLOAT, ["d"])],
                     [h.make_tensor("zero", T.INT64, [], [0]), h.make_tensor("one", T.INT64, [], [1])])
    dp = os.path.join(d, "data_dependent.onnx")
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 13)]), dp)
    dk = os.path.join(d, "data_dependent.kiln")
    x = np.full(1000, -1, np.float32)
    x[17] = 300.5
    xp = os.path.join(d, "dd_x.npy")
    np.save(xp, x)
    p = subprocess.run([a.kiln, "compile", "--model", dp, "--output", dk, "--target", "cuda"],
                       capture_output=True, text=True, timeout=60)
    if p.returncode == 0:
        p = subprocess.run([a.kiln, "run", dk, "--device", "cuda", "--input", "x=" + xp, "--output-dir",
                            os.path.join(d, "dd_out")], capture_output=True, text=True, timeout=60)
    if p.returncode == 0:
        got = np.load(os.path.join(d, "dd_out", "output_0.npy"))
        want = np.arange(300, dtype=np.float32) * 2
        r["data_dependent"] = "equal to NumPy" if got.shape == want.shape and np.array_equal(got, want) else \
            f"DIFFERS from NumPy (shape {got.shape})"
    else:
        r["data_dependent"] = "refused: " + (p.stderr or p.stdout).strip()[-300:]
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--models", default="resnet50,bert_base,bert_dynamic")
    ap.add_argument("--runs", type=int, default=200)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    os.makedirs(a.work, exist_ok=True)
    results = []
    for name in a.models.split(","):
        r = {"model": name}
        results.append(r)
        try:
            d = os.path.join(a.work, name)
            os.makedirs(d, exist_ok=True)
            if name == "bert_dynamic":
                r.update(dynamic_models(a, d))
                continue
            m, inputs, out_names = build(name)
            onnx_path = os.path.join(d, "model.onnx")
            export(m, inputs, out_names, onnx_path)
            specs = []
            for n, v in inputs:
                np.save(os.path.join(d, n + ".npy"), v)
                specs += ["--input", f"{n}={os.path.join(d, n + '.npy')}"]
            with torch.no_grad():
                ref = m.double()(*[torch.from_numpy(v).double() if v.dtype == np.float32 else torch.from_numpy(v)
                                   for _, v in inputs])
                ref = [t.numpy() for t in (ref if isinstance(ref, (tuple, list)) else [ref])]
                m.float()
                t32 = m.cuda()(*[torch.from_numpy(v).cuda() for _, v in inputs])
                t32 = [t.cpu().numpy() for t in (t32 if isinstance(t32, (tuple, list)) else [t32])]
                m.cpu()
            r["torch_f32_rel_err"] = max(rel(o, f) for o, f in zip(t32, ref))
            kf = os.path.join(d, "cuda.kiln")
            t0 = time.perf_counter()
            p = subprocess.run([a.kiln, "compile", "--model", onnx_path, "--output", kf, "--target", "cuda"],
                               capture_output=True, text=True, timeout=300)
            r["compile_s"] = round(time.perf_counter() - t0, 2)
            if p.returncode:
                r["error"] = "compile: " + (p.stderr or p.stdout)[-800:]
                continue
            p = subprocess.run([a.kiln, "inspect", kf], capture_output=True, text=True, timeout=60)
            lines = p.stdout.splitlines()
            r["cpu_nodes"] = sorted({ln.split()[1] for ln in lines if ln.startswith("  cpu ") or ln.startswith("cpu ")})
            with open(os.path.join(d, "inspect.txt"), "w") as f:
                f.write(p.stdout)
            od = os.path.join(d, "out")
            p = subprocess.run([a.kiln, "run", kf, "--device", "cuda", "--output-dir", od] + specs,
                               capture_output=True, text=True, timeout=300)
            if p.returncode:
                r["error"] = "run: " + (p.stderr or p.stdout)[-800:]
                continue
            outs = [np.load(os.path.join(od, f"output_{j}.npy")) for j in range(len(ref))]
            r["kiln_rel_err"] = max(rel(o, f) for o, f in zip(outs, ref))
            p = subprocess.run([a.kiln, "bench", kf, "--device", "cuda", "--runs", str(a.runs), "--warmup", "20",
                                "--json"] + specs, capture_output=True, text=True, timeout=300)
            if p.returncode:
                r["error"] = "bench: " + (p.stderr or p.stdout)[-800:]
                continue
            j = json.loads(p.stdout.strip().splitlines()[-1])
            r["kiln_ms"] = j["median_ms"]
            r["kiln_load_ms"] = j["load_ms"]
            r.update(torch_times(m, inputs, a.runs))
        except Exception as e:  # report and go on to the next model
            r["error"] = f"{type(e).__name__}: {e}"[-800:]
        finally:
            print(json.dumps(r), flush=True)
    with open(os.path.join(a.work, "models.json"), "w") as f:
        json.dump(results, f, indent=1)
    print()
    print(f"{'model':10} {'kiln err':>9} {'torch err':>9} {'kiln ms':>8} {'eager':>7} {'graph':>7} "
          f"{'eager+io':>8} {'graph+io':>8}  cpu-placed")
    for r in results:
        if "error" in r:
            print(f"{r['model']:10} ERROR {r['error'][:300]}")
            continue
        if r["model"] == "bert_dynamic":
            print(f"{r['model']:10} {r['kiln_rel_err']:9.2e} by shape {r['kiln_rel_err_by_shape']}; "
                  f"data-dependent extents: {r['data_dependent']}")
            continue
        print(f"{r['model']:10} {r['kiln_rel_err']:9.2e} {r['torch_f32_rel_err']:9.2e} {r['kiln_ms']:8.3f} "
              f"{r['torch_eager_ms']:7.3f} {r['torch_graph_ms']:7.3f} {r['torch_eager_host_ms']:8.3f} "
              f"{r['torch_graph_host_ms']:8.3f}  {','.join(r['cpu_nodes']) or '-'}")
    sys.exit(1 if any("error" in r for r in results) else 0)


if __name__ == "__main__":
    main()
