#!/usr/bin/env bash
# The footprint table (README, Footprint): stripped sizes of the C example (examples/c/fashion_mnist.c) linked
# statically against edgetrain's full build, the device runtime with every operator, and device runtimes reduced
# (-DEDGETRAIN_OPS_CONFIG) to the MNIST MLP, the LeNet-BN CNN and torchvision's MobileNetV2 training artifacts.
#
# Usage: bench/footprint.sh   (JOBS=2; FULL_BUILD=build: the full build, whose CLI makes the artifacts and configs)
# About 20 minutes on 2 busy cores (load ~10) with a warm compiler cache: each reduced build compiles src/ops for its
# config.
# Artifacts, configs and builds go to build-footprint/ (builds two levels deep, as build/device-only is, so that the
# compiler cache serves what the builds share). Needs what scripts/setup.sh installs (MobileNetV2 is exported from
# Debian's python3-torchvision by bench/zoo.py).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
work="$root/build-footprint"
full="$root/${FULL_BUILD:-build}"
jobs=${JOBS:-2}
mkdir -p "$work"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(dirname "$root")}"
common=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache
  -DEDGETRAIN_BUILD_TESTS=OFF -DEDGETRAIN_BUILD_BENCH=OFF -DEDGETRAIN_BUILD_PYTHON=OFF)
# The device-only runtime (no libonnx, protobuf, CLI11) where this tree has it; otherwise the nearest build: no
# oneDNN, unused sections collected.
if grep -q "EDGETRAIN_DEVICE_ONLY" CMakeLists.txt; then
  device=(-DEDGETRAIN_DEVICE_ONLY=ON -DEDGETRAIN_WITH_DNNL=OFF)
  device_kind="device-only"
else
  device=(-DEDGETRAIN_WITH_DNNL=OFF)
  device_kind="no oneDNN, still with libonnx and protobuf (this tree has no device-only option)"
fi

build() {  # build DIR CMAKE_ARGS...: configures and builds the C example (and the CLI where there is one)
  local dir=$1
  shift
  cmake -S "$root" -B "$dir" "${common[@]}" "$@" >"$dir.configure.log" 2>&1 ||
    { cat "$dir.configure.log"; exit 1; }
  ninja -C "$dir" -j "$jobs" fashion_mnist >"$dir.build.log" 2>&1 || { tail -50 "$dir.build.log"; exit 1; }
}

echo "== full build (the CLI makes the artifacts and the configs)" >&2
[ -f "$full/CMakeCache.txt" ] || cmake -S "$root" -B "$full" "${common[@]}" >"$work/full.configure.log" 2>&1
ninja -C "$full" -j "$jobs" edgetrain_cli fashion_mnist >"$work/full.build.log" 2>&1 ||
  { tail -50 "$work/full.build.log"; exit 1; }
cli="$full/edgetrain"

echo "== artifacts and operator configs" >&2
[ -d "$work/mlp" ] || "$cli" generate-artifacts models/mlp.onnx -o "$work/mlp" --additional-output output >/dev/null
[ -d "$work/lenet_bn" ] ||
  "$cli" generate-artifacts models/lenet_bn.onnx -o "$work/lenet_bn" --additional-output output >/dev/null
if [ ! -d "$work/mobilenet_v2" ]; then
  /usr/bin/python3 bench/zoo.py export mobilenet_v2 "$work/mobilenet_v2.onnx" --image 224 >/dev/null
  "$cli" generate-artifacts "$work/mobilenet_v2.onnx" -o "$work/mobilenet_v2" >/dev/null
fi
# Device-only builds have no training agents (they need autodiff), so the configs cover the artifacts alone.
for model in mlp lenet_bn mobilenet_v2; do
  "$cli" reduce-ops "$work/$model" >"$work/$model.config"
done

echo "== device runtime builds ($device_kind)" >&2
for model in mlp mobilenet_v2 lenet_bn; do
  build "$work/device-$model" "${device[@]}" "-DEDGETRAIN_OPS_CONFIG=$work/$model.config"
done
build "$work/device-all" "${device[@]}"

# Stripped size of the C example, and of the shared libraries it loads beyond the C/C++/OpenMP runtimes and zlib.
size_of() {
  local app=$1/examples/fashion_mnist
  strip -o "$app.stripped" "$app"
  local bytes extra=0 lib
  bytes=$(stat -c %s "$app.stripped")
  for lib in $(ldd "$app" | awk '/=> \// {print $3}' |
    grep -Ev '/(libc|libm|libstdc\+\+|libgcc_s|libgomp|libz|ld-linux[^/]*)\.so'); do
    extra=$((extra + $(stat -L -c %s "$lib")))
  done
  echo "$bytes $extra"
}
mib() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 1048576 }'; }
operators() { [ -n "$1" ] && grep -cv '^#' "$1" || echo "all"; }

echo
echo "| build | operators | C example, stripped | MiB | + shared libraries it needs (besides libc, libstdc++, libgomp, zlib) | target |"
echo "|---|---|---|---|---|---|"
row() {  # row LABEL DIR CONFIG TARGET
  local sizes
  read -r -a sizes <<<"$(size_of "$2")"
  echo "| $1 | $(operators "$3") | ${sizes[0]} B | $(mib "${sizes[0]}") | $(mib "${sizes[1]}") MiB | $4 |"
}
row "full (oneDNN, libonnx, protobuf)" "$full" "" "-"
row "device runtime, every operator" "$work/device-all" "" "<= 4 MiB"
row "reduced: MNIST MLP" "$work/device-mlp" "$work/mlp.config" "<= 1.0 MiB"
row "reduced: LeNet-BN" "$work/device-lenet_bn" "$work/lenet_bn.config" "-"
row "reduced: MobileNetV2" "$work/device-mobilenet_v2" "$work/mobilenet_v2.config" "<= 1.5 MiB"
echo
echo "Device builds: $device_kind. Compiler: $(c++ --version | head -1)."
