#!/usr/bin/python3
"""A torchvision detector exported with dynamic height and width: one .kiln, compiled with
no flags, at several image sizes, against ONNX Runtime (issue 13's vision-model target).

  /usr/bin/python3 bench/detector_dynamic.py --kiln build/kiln --work DIR
      [--model ssdlite|retinanet] [--sizes 320x320,256x384,301x299,200x264,415x333]
      [--runs 10] [--warmup 2] [--threads 1] [--out bench/RESULTS.md]

The model is torchvision's SSDlite320 (MobileNetV3-Large backbone) or RetinaNet (ResNet-50
FPN, its transform resizing to 320) with seeded random weights (torch.manual_seed(0); no
download), exported once (cached in DIR) with opset 13 and the image's height and width as
dynamic axes. Their post-processing is what makes them a dynamic-shape test: a score
threshold (NonZero), TopK with K = min(N, the count above it), full_like labels
(ConstantOfShape of that count) or a Reshape of the kept boxes, and torchvision's
batched_nms (an If around NonMaxSuppression). For each size: `kiln run` and ONNX Runtime
(bench/ort_bench.js) on the same seeded image, outputs compared (same shapes, identical
labels, boxes and scores within 1e-3 absolute), then latency medians: `kiln bench` and
ort_bench.js, each --runs after --warmup. With random weights SSDlite's class scores are
near-uniform, so almost every candidate survives the threshold: its NMS is at its largest
(tens of thousands of boxes), which dominates its time; RetinaNet keeps few or none. Writes
the section between <!-- bench:detector-MODEL:begin --> and <!-- bench:detector-MODEL:end -->
in --out (if given).
Exits 1 if an output differs.
"""
import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from results_md import write_section  # noqa: E402
from run_bench import ORT_BENCH, BenchError, log, machine_info, parse_json, run  # noqa: E402

OUTPUTS = ("boxes", "scores", "labels")

MODELS = {
    "ssdlite": ("SSDlite320 (MobileNetV3-Large)",
                "torchvision.models.detection.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None)"),
    "retinanet": ("RetinaNet (ResNet-50 FPN, resized to 320)",
                  "torchvision.models.detection.retinanet_resnet50_fpn(weights=None, weights_backbone=None, "
                  "min_size=320, max_size=320)"),
}
EXPORT = r"""
import sys, torch, torchvision
torch.manual_seed(0)
m = MODEL.eval()
x = torch.rand(3, 320, 320)
torch.onnx.export(m, ([x],), sys.argv[1], opset_version=13, input_names=["img"],
                  output_names=["boxes", "scores", "labels"], dynamic_axes={"img": {1: "h", 2: "w"}})
"""


def sizes(s):
    out = []
    for part in s.split(","):
        h, w = part.lower().split("x")
        out.append((int(h), int(w)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--model", choices=sorted(MODELS), default="ssdlite")
    ap.add_argument("--work", required=True)
    ap.add_argument("--sizes", type=sizes, default=sizes("320x320,256x384,301x299,200x264,415x333"))
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    work = os.path.abspath(args.work)
    os.makedirs(work, exist_ok=True)
    title, ctor = MODELS[args.model]
    begin, end = f"<!-- bench:detector-{args.model}:begin -->", f"<!-- bench:detector-{args.model}:end -->"
    onnx_file = os.path.join(work, f"{args.model}_dynamic.onnx")
    if not os.path.exists(onnx_file):
        script = os.path.join(work, f"export_{args.model}.py")
        with open(script, "w") as f:
            f.write(EXPORT.replace("MODEL", ctor))
        run(["/usr/bin/python3", script, onnx_file + ".tmp"], f"export {args.model}")
        os.replace(onnx_file + ".tmp", onnx_file)
    kfile = os.path.join(work, f"{args.model}_dynamic.kiln")
    run([args.kiln, "compile", "--model", onnx_file, "--output", kfile], "kiln compile (no flags)")
    rows, failures = [], []
    rng = np.random.default_rng(1)
    for h, w in args.sizes:
        tag = f"{h}x{w}"
        img = os.path.join(work, f"img_{tag}.npy")
        np.save(img, rng.random((3, h, w), dtype=np.float32))
        kdir, odir = os.path.join(work, f"kiln_{args.model}_{tag}"), os.path.join(work, f"ort_{args.model}_{tag}")
        run([args.kiln, "run", kfile, "--input", "img=" + img, "--output-dir", kdir, "--threads", str(args.threads)],
            f"kiln run {tag}")
        ort = parse_json(run(["node", ORT_BENCH, onnx_file, "--input", "img=" + img, "--runs", str(args.runs),
                              "--warmup", str(args.warmup), "--threads", str(args.threads), "--output-dir", odir],
                             f"ort {tag}"), f"ort {tag}")
        kb = run([args.kiln, "bench", kfile, "--input", "img=" + img, "--runs", str(args.runs), "--warmup",
                  str(args.warmup), "--threads", str(args.threads), "--json"], f"kiln bench {tag}")
        kj = parse_json(kb, f"kiln bench {tag}")
        same, detail = True, []
        for i, name in enumerate(OUTPUTS):
            a = np.load(os.path.join(kdir, f"output_{i}.npy"))
            b = np.load(os.path.join(odir, f"output_{i}.npy"))
            if a.shape != b.shape:
                same = False
                detail.append(f"{name} shape {a.shape} vs {b.shape}")
                continue
            d = float(np.abs(a.astype(np.float64) - b).max()) if a.size else 0.0
            if (name == "labels" and d != 0) or d > 1e-3:
                same = False
            detail.append(f"{name} {a.shape[0]}, max abs diff {d:.2g}")
        if not same:
            failures.append(f"{tag}: " + "; ".join(detail))
        k_ms, o_ms = kj["median_ms"], ort["median_ms"]
        rows.append((tag, same, "; ".join(detail), k_ms, o_ms))
        log(f"{tag}: {'match' if same else 'DIFFER'} ({'; '.join(detail)}); kiln {k_ms:.1f} ms, ort {o_ms:.1f} ms")
    cpu, nproc, rev, date = machine_info()
    lines = [begin, f"## Detector with dynamic height and width: {title}, torchvision", "",
             f"`bench/detector_dynamic.py --model {args.model} --runs {args.runs} --warmup {args.warmup} "
             f"--threads {args.threads}`; "
             f"{cpu}, {nproc} CPUs; Kiln {rev}; {date}. One `.kiln` compiled with no flags from the export with "
             "dynamic H and W; seeded random weights. "
             "Outputs against ONNX Runtime's on the same image; medians of `kiln bench` and ort_bench.js.", "",
             "| size | outputs vs ONNX Runtime | Kiln ms | ONNX Runtime ms | Kiln / ORT |",
             "|---|---|---:|---:|---:|"]
    for tag, same, detail, k_ms, o_ms in rows:
        lines.append(f"| {tag} | {'match' if same else 'DIFFER'}: {detail} | {k_ms:.1f} | {o_ms:.1f} | "
                     f"{k_ms / o_ms:.3f} |")
    lines += ["", end]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        write_section(args.out, text, begin, end)
    if failures:
        print("FAIL: " + " | ".join(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print(f"detector_dynamic: error: {e}", file=sys.stderr)
        sys.exit(1)
