#!/usr/bin/env bash
# Installs every Debian package that the build, the tests and the demo need (only what is missing),
# then configures and builds edgetrain into build/. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  g++ cmake ninja-build pkg-config
  libprotobuf-dev protobuf-compiler libonnx-dev     # ONNX protobuf, checker, shape inference
  libflatbuffers-dev flatbuffers-compiler           # ODTC checkpoints
  libdnnl-dev                                       # fast kernels
  libcli11-dev zlib1g-dev
  libgtest-dev libgmock-dev libbenchmark-dev        # tests and benchmarks
  pybind11-dev python3-dev                          # Python package
  libonnx-testdata                                  # oracle: ONNX backend node tests
  python3-torch python3-onnx python3-numpy          # oracle: PyTorch parity
  dataset-fashion-mnist                             # real data
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build
