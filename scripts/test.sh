#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (unit tests, the ONNX backend suite,
# PyTorch parity). Prints each suite's summary. Then builds once more with oneDNN switched off and
# runs the suite again on the reference kernels alone (the slow parity runs and the federation, which
# does not depend on the kernels, are left out there).
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(dirname "$(pwd)")}"
scripts/setup.sh
(cd build && ctest --output-on-failure -j2 --timeout 1500)

echo "== the same suite in a build without oneDNN (reference kernels) =="
cmake -S . -B build-reference -G Ninja -DCMAKE_BUILD_TYPE=Release -DEDGETRAIN_WITH_DNNL=OFF \
  -DEDGETRAIN_BUILD_BENCH=OFF -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache >/dev/null
ninja -C build-reference
cd build-reference
ctest --output-on-failure -j2 --timeout 1500 -E "parity|python_pip_install|install_consumer|federated"
