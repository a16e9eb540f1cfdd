#!/usr/bin/env bash
# The demo page: generates the MLP's training artifacts (native CLI, build/) once, then serves the page
# with the artifacts and Debian's Fashion-MNIST, cross-origin isolated (COOP/COEP: the package then loads
# its pthreads module). Open http://127.0.0.1:8080/web/demo/ afterwards.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -f web/dist/edgetrain.wasm ] || scripts/build_wasm.sh
[ -f build/web-demo/checkpoint ] || build/edgetrain generate-artifacts models/mlp.onnx --out build/web-demo --additional-output output
exec node web/tools/serve.mjs --isolated --port "${PORT:-8080}" --mount /artifacts=build/web-demo \
  --mount /data="${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}"
