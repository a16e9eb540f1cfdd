#!/usr/bin/env bash
# The main job: installs what is missing, builds, generates training artifacts for the bundled
# MLP, checks their gradients, and runs the model with edgetrain on Fashion-MNIST test images.
# (On-device training with these artifacts is the next milestone.)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
out=build/demo
mkdir -p "$out"
/usr/bin/python3 scripts/demo_data.py "$out"
build/edgetrain inspect "$out/mlp.onnx"
build/edgetrain generate-artifacts "$out/mlp.onnx" --out "$out/artifacts" --loss cross_entropy --optimizer adamw
build/edgetrain check-gradients "$out/artifacts" --samples 8
build/edgetrain run "$out/mlp.onnx" --input "input=$out/images.npy" -o "$out"
/usr/bin/python3 scripts/demo_data.py "$out" --check
