#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (unit tests, the ONNX backend suite,
# PyTorch parity). Prints each suite's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cd build
ctest --output-on-failure -j2 --timeout 1500
