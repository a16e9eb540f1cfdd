#!/usr/bin/env bash
# Installs what the build, the tests and the demo need and is missing (Debian packages; pinned peers
# from npm and PyPI, the latter in venvs over Debian's Python), then builds edgetrain into build/.
# Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  g++ cmake ninja-build pkg-config ccache
  libprotobuf-dev protobuf-compiler libonnx-dev     # ONNX protobuf, checker, shape inference
  libflatbuffers-dev flatbuffers-compiler           # ODTC checkpoints
  libdnnl-dev ocl-icd-opencl-dev                    # fast kernels (dnnl's CMake config needs OpenCL, a Recommends)
  libcli11-dev zlib1g-dev
  libgtest-dev libgmock-dev libbenchmark-dev        # tests and benchmarks
  pybind11-dev python3-dev python3-pip python3-pytest  # Python package: build, offline pip install, tests
  libonnx-testdata                                  # oracle: ONNX backend node tests
  python3-torch python3-onnx python3-numpy          # oracle: PyTorch parity
  libopenblas0-pthread                              # PyTorch's BLAS (else Debian's torch runs on netlib's reference BLAS)
  dataset-fashion-mnist                             # real data
  python3-torchvision python3-venv                  # the model zoo (tests/model_zoo_test.py); PyPI peers' venvs
  python3-matplotlib                                # federated learning: the accuracy plot
  clang libclang-rt-14-dev libomp-14-dev            # reliability: ASan/UBSan/TSan builds and libFuzzer harnesses
  clang-tidy                                        # ctest complexity_hot_spots: cognitive complexity of split code
  g++-aarch64-linux-gnu qemu-user                   # aarch64: cross build, tests under qemu (scripts/cross_aarch64.sh)
  libnanopb-dev                                     # the device runtime's .onnx codec (nanopb's wire primitives)
  emscripten nodejs chromium                        # the browser: WebAssembly build (web/), headless Chromium tests
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Peers from npm: ONNX Runtime's native inference build (an independent executor of our graphs) and
# its last training runtime, onnxruntime-web 1.19.2 (reference numbers for ORT's own artifacts).
peers="${EDGETRAIN_PEERS_DIR:-$HOME/.cache/edgetrain-peers}"
npm_packages=()
[ -f "$peers/node_modules/onnxruntime-node/package.json" ] || npm_packages+=(onnxruntime-node@1.30.0)
[ -f "$peers/node_modules/onnxruntime-web/package.json" ] || npm_packages+=(onnxruntime-web@1.19.2)
if [ ${#npm_packages[@]} -gt 0 ]; then
  if ! command -v npm >/dev/null; then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nodejs npm >/dev/null
  fi
  mkdir -p "$peers"
  ONNXRUNTIME_NODE_INSTALL=skip npm install --prefix "$peers" --no-audit --no-fund --save-exact \
    "${npm_packages[@]}" >/dev/null
fi

# The JS package's test tools (web/package.json: playwright-core, pinned; it drives Debian's chromium).
if [ ! -f web/node_modules/playwright-core/package.json ]; then
  command -v npm >/dev/null || { $SUDO apt-get update -qq; DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq npm >/dev/null; }
  (cd web && npm ci --no-audit --no-fund >/dev/null)
fi

# Peers from PyPI, each in a venv over Debian's Python (so that it sees Debian's torch, onnx and
# numpy) holding the versions its requirements file pins; made again when the pins change.
pinned_venv() {
  local venv="$peers/$1" requirements="$2"
  cmp -s "$requirements" "$venv/requirements.txt" 2>/dev/null && return
  mkdir -p "$peers"
  [ -x "$venv/bin/pip" ] || /usr/bin/python3 -m venv --system-site-packages "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$requirements"
  cp "$requirements" "$venv/requirements.txt"
}
pinned_venv venv-flower scripts/flower-requirements.txt  # federated learning: Flower (flwr)
# ONNX Runtime 1.19.2's native training build: the Python API tests' oracle and bench/zoo.py's peer.
pinned_venv venv-ort-training scripts/ort-training-requirements.txt
# ONNX 1.16.2: its backend node-test data holds the opset-19/20 cases (DFT-20 with axis as input) that Debian lacks.
pinned_venv venv-onnx scripts/onnx-requirements.txt
# onnx 1.17's backend node tests (opsets 18-22, ctest onnx_backend_new) and its version converter (model zoo).
pinned_venv venv-onnx-testdata scripts/onnx-testdata-requirements.txt

# ccache keeps rebuilds of an unchanged file cheap, also across clones (paths below the parent are relative).
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(dirname "$(pwd)")}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache >/dev/null
ninja -C build
