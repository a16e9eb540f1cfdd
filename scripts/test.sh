#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (unit tests, the ONNX backend suite,
# PyTorch parity) and a short soak. Prints each suite's summary. Then builds once more with oneDNN
# switched off, under ASan+UBSan+LSan (clang), and runs the unit, training, gradient, ORT-operator,
# C API and reliability suites there, the fuzz regression replays, and each fuzz harness for 30 s.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
(cd build && ctest --output-on-failure -j2 --timeout 1500)

scripts/soak.sh 3 2000 build/edgetrain

# The second build: reference kernels only (oneDNN off), compiled by clang with AddressSanitizer,
# UndefinedBehaviorSanitizer and LeakSanitizer, plus libFuzzer coverage for the harnesses.
echo "== unit, training, gradient, ORT-operator, C API and reliability suites under ASan+UBSan+LSan (reference kernels) =="
sanitized=(edgetrain_cli unit_tests training_tests gradient_tests ort_ops_tests c_api_test capi_wrapper_test
  reliability_tests fuzz_replay_onnx_model fuzz_replay_ort_model fuzz_replay_checkpoint fuzz_replay_training_artifacts
  fuzz_replay_data_files fuzz_replay_capi)
CC=clang CXX=clang++ cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DEDGETRAIN_WITH_DNNL=OFF -DEDGETRAIN_BUILD_BENCH=OFF -DEDGETRAIN_BUILD_PYTHON=OFF -DEDGETRAIN_BUILD_EXAMPLES=OFF \
  -DEDGETRAIN_SANITIZE=address,undefined -DEDGETRAIN_FUZZ=ON >/dev/null
ninja -C build-asan "${sanitized[@]}"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --output-on-failure -j2 --timeout 1500 \
  -E "NOT_BUILT|parity|python|onnx_backend|ort_compat|cli_test|train_cli|fashion_mnist|Sigkill")
scripts/soak.sh 2 1000 build-asan/edgetrain
echo "== fuzzing: each harness for 30 s under ASan+UBSan =="
scripts/fuzz.sh 30
