#!/usr/bin/env bash
# The main job: installs what is missing, builds, exports the bundled PyTorch reference model to
# ONNX, inspects it, and runs it with edgetrain on Fashion-MNIST test images.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
out=build/demo
mkdir -p "$out"
/usr/bin/python3 scripts/demo_data.py "$out"
build/edgetrain inspect "$out/mlp.onnx"
build/edgetrain run "$out/mlp.onnx" --input "input=$out/images.npy" -o "$out"
/usr/bin/python3 scripts/demo_data.py "$out" --check
