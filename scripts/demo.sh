#!/usr/bin/env bash
# The main job: installs what is missing, builds, generates training artifacts for the bundled
# LeNet-BN CNN, trains it on Fashion-MNIST on this machine (5 epochs, eval after each), exports
# the trained model for inference and classifies the 10,000 test images with it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
data=/usr/share/datasets/fashion-mnist
out=build/demo
rm -rf "$out" && mkdir -p "$out"
threads=$(nproc)
build/edgetrain generate-artifacts models/lenet_bn.onnx --out "$out/artifacts" \
    --loss cross_entropy --optimizer adamw --additional-output output
build/edgetrain train "$out/artifacts" \
    --data "input=$data/train-images-idx3-ubyte.gz" "labels=$data/train-labels-idx1-ubyte.gz" \
    --eval-data "input=$data/t10k-images-idx3-ubyte.gz" "labels=$data/t10k-labels-idx1-ubyte.gz" \
    --epochs 5 --batch-size 64 --lr 0.003 --scheduler linear --seed 0 --threads "$threads" \
    --checkpoint-out "$out/checkpoint" --metrics "$out/metrics.csv"
build/edgetrain export "$out/artifacts" --checkpoint "$out/checkpoint" --out "$out/lenet_bn_trained.onnx"
build/edgetrain predict "$out/lenet_bn_trained.onnx" --data "$data/t10k-images-idx3-ubyte.gz" \
    --labels "$data/t10k-labels-idx1-ubyte.gz" --threads "$threads"
