#!/usr/bin/env bash
# ThreadSanitizer run (clang, reference kernels): the concurrency contract (separate sessions training
# on separate threads, one session called from two threads) and the threaded kernels' backend tests.
#   scripts/tsan.sh
set -euo pipefail
cd "$(dirname "$0")/.."
CC=clang CXX=clang++ cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DEDGETRAIN_WITH_DNNL=OFF -DEDGETRAIN_BUILD_BENCH=OFF -DEDGETRAIN_BUILD_PYTHON=OFF -DEDGETRAIN_BUILD_EXAMPLES=OFF \
  -DEDGETRAIN_SANITIZE=thread >/dev/null
ninja -C build-tsan -j "${JOBS:-2}" reliability_tests unit_tests
# libomp is not instrumented: Archer (libomp-14-dev) tells TSan what OpenMP's barriers and locks order.
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1}
export OMP_TOOL_LIBRARIES=${OMP_TOOL_LIBRARIES:-$(ls /usr/lib/llvm-*/lib/libarcher.so | tail -1)}
build-tsan/tests/reliability_tests --gtest_filter='Concurrency.*:MemoryLimit.*'
build-tsan/tests/unit_tests --gtest_filter='ThreadPool.*:*Backends*:*Thread*'
