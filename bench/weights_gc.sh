#!/bin/bash
# `kiln weights gc` cost against a compile (bench/RESULTS.md "Weight store gc").
# resnet18 and mobilenet_v2 are compiled as m.kiln (in two directories) into
# one store in mode 2, so both append to one m_weight_combined; gc keeping
# resnet18's .kiln drops mobilenet_v2's ranges and compacts the file. The kept
# model is then run and compared with PyTorch's output (expected.npy).
# Usage: bench/weights_gc.sh KILN MODELS_DIR [ROUNDS]   (MODELS_DIR: build/models)
set -euo pipefail
K=$1; M=$2; ROUNDS=${3:-5}
WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
ms() { echo "($2 - $1) * 1000" | bc; }
for i in $(seq 1 "$ROUNDS"); do
  W=$WORK/$i; mkdir -p "$W/a" "$W/b"
  "$K" compile --model "$M/resnet18/model.onnx" --output "$W/a/m.kiln" --external-weight 2 --external-weight-dir "$W/store" >/dev/null
  "$K" compile --model "$M/mobilenet_v2/model.onnx" --output "$W/b/m.kiln" --external-weight 2 --external-weight-dir "$W/store" >/dev/null
  before=$(stat -c %s "$W/store/m_weight_combined")
  t0=$(date +%s.%N); "$K" weights gc "$W/store" --keep "$W/a/m.kiln" >"$W/gc.txt"; t1=$(date +%s.%N)
  after=$(du -cb "$W"/store/*_weight_combined | tail -1 | cut -f1)
  t2=$(date +%s.%N)
  "$K" compile --model "$M/resnet18/model.onnx" --output "$W/c.kiln" --external-weight 2 --external-weight-dir "$W/store2" >/dev/null
  t3=$(date +%s.%N)
  "$K" run "$W/a/m.kiln" --trust-weight-dir --input "0=$M/resnet18/input.npy" --output-dir "$W/out" >/dev/null
  diff=$(/usr/bin/python3 -c "import numpy as np; print(float(np.abs(np.load('$W/out/output_0.npy') - np.load('$M/resnet18/expected.npy')).max()))")
  echo "round $i: combined $before -> $after bytes; gc $(ms "$t0" "$t1") ms; compile resnet18 (mode 2) $(ms "$t2" "$t3") ms; kept model vs PyTorch max |diff| $diff"
done
tail -1 "$W/gc.txt"
