#!/usr/bin/env bash
# Builds the WebAssembly modules of the JS package (web/) with Debian's emscripten: the device runtime
# and its C ABI, SIMD128, single-threaded into build-wasm/ and with pthreads into build-wasm-mt/
# (--single: only the first), then copies edgetrain{,-mt}.mjs/.wasm (+ the pthread worker) to web/dist/.
set -euo pipefail
cd "$(dirname "$0")/.."
export NODE_PATH="${NODE_PATH:-/usr/share/nodejs}"   # emscripten's JS tools need Debian's node-acorn
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(dirname "$(pwd)")}"
variants=("build-wasm:" "build-wasm-mt:-pthread")
[ "${1:-}" = --single ] && variants=("build-wasm:")
mkdir -p web/dist
for variant in "${variants[@]}"; do
  dir=${variant%%:*} extra=${variant#*:}
  flags="-msimd128 -fwasm-exceptions $extra"
  threads=$([ -n "$extra" ] && echo ON || echo OFF)
  start=$SECONDS
  emcmake cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" -DEDGETRAIN_WASM_THREADS=$threads \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache \
    -DEDGETRAIN_DEVICE_ONLY=ON -DEDGETRAIN_WITH_DNNL=OFF -DEDGETRAIN_BUILD_TESTS=OFF \
    -DEDGETRAIN_BUILD_EXAMPLES=OFF -DEDGETRAIN_BUILD_BENCH=OFF >/dev/null
  ninja -C "$dir" -j"${EDGETRAIN_JOBS:-2}" edgetrain_wasm >"$dir/ninja.log" || { cat "$dir/ninja.log"; exit 1; }
  name=$([ "$threads" = ON ] && echo edgetrain-mt || echo edgetrain)
  cp "$dir/web/$name.mjs" "$dir/web/$name.wasm" web/dist/
  [ "$threads" = ON ] && cp "$dir/web/$name.worker.js" web/dist/
  echo "web/dist/$name.wasm: $(stat -c %s "web/dist/$name.wasm") bytes, gzipped $(gzip -9 -c "web/dist/$name.wasm" | wc -c) bytes ($((SECONDS - start)) s)"
done
# The pthread worker is a classic script: CommonJS under Node.js although the package is an ES module.
echo '{"type": "commonjs"}' > web/dist/package.json
node web/tools/make_cjs.mjs   # web/dist/index.cjs: the CommonJS entry (Node.js 18 cannot require() an ES module)
