#!/usr/bin/env bash
# Builds the WebAssembly modules of the JS package (web/) with Debian's emscripten: the device runtime
# and its C ABI, SIMD128, single-threaded into build-wasm/ and with pthreads into build-wasm-mt/, the two
# at once (--single: only the first), then copies edgetrain{,-mt}.mjs/.wasm (+ the pthread worker) and the
# package's CommonJS entry to web/dist/.
set -euo pipefail
cd "$(dirname "$0")/.."
export NODE_PATH="${NODE_PATH:-/usr/share/nodejs}"   # emscripten's JS tools need Debian's node-acorn
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(dirname "$(pwd)")}"
variants=(build-wasm build-wasm-mt)
[ "${1:-}" = --single ] && variants=(build-wasm)
jobs=$(( ${EDGETRAIN_JOBS:-2} / ${#variants[@]} )); [ "$jobs" -ge 1 ] || jobs=1

build() {  # build() DIR: configures and links one module; its log in DIR/build.log
  local dir=$1 threads=OFF name=edgetrain flags="-msimd128 -fopenmp-simd -fwasm-exceptions" start=$SECONDS
  [ "$dir" = build-wasm-mt ] && threads=ON name=edgetrain-mt flags="$flags -pthread"
  mkdir -p "$dir"
  { emcmake cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" -DEDGETRAIN_WASM_THREADS=$threads \
      -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache \
      -DEDGETRAIN_DEVICE_ONLY=ON -DEDGETRAIN_WITH_DNNL=OFF -DEDGETRAIN_BUILD_TESTS=OFF \
      -DEDGETRAIN_BUILD_EXAMPLES=OFF -DEDGETRAIN_BUILD_BENCH=OFF &&
    ninja -C "$dir" -j"$jobs" edgetrain_wasm; } >"$dir/build.log" 2>&1 || { cat "$dir/build.log"; return 1; }
  echo "$dir/web/$name.wasm: $(stat -c %s "$dir/web/$name.wasm") bytes, gzipped" \
    "$(gzip -9 -c "$dir/web/$name.wasm" | wc -c) bytes ($((SECONDS - start)) s)"
}

pids=()
for dir in "${variants[@]}"; do build "$dir" & pids+=($!); done
for pid in "${pids[@]}"; do wait "$pid"; done
mkdir -p web/dist
cp build-wasm/web/edgetrain.mjs build-wasm/web/edgetrain.wasm web/dist/
[ -d build-wasm-mt ] && [ "${1:-}" != --single ] &&
  cp build-wasm-mt/web/edgetrain-mt.mjs build-wasm-mt/web/edgetrain-mt.wasm build-wasm-mt/web/edgetrain-mt.worker.js web/dist/
# The pthread worker is a classic script: CommonJS under Node.js although the package is an ES module.
echo '{"type": "commonjs"}' > web/dist/package.json
node web/tools/make_cjs.mjs   # web/dist/index.cjs: the CommonJS entry (Node.js 18 cannot require() an ES module)
