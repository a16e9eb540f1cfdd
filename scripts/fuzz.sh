#!/usr/bin/env bash
# Runs the libFuzzer harnesses of tests/fuzz (clang, ASan+UBSan) for as long as asked.
#   scripts/fuzz.sh [SECONDS_PER_HARNESS=60] [HARNESS...]   (default: every harness)
# Builds build-asan (EDGETRAIN_FUZZ_BUILD overrides) when needed. Each harness's corpus grows in
# $BUILD/fuzz/<harness>/corpus, seeded from tests/fuzz/corpus, tests/fuzz/regressions and artifacts
# the CLI generates for models/; a crash, leak, sanitizer report or hang is written there as
# crash-*/leak-*/timeout-* and fails the script. Copy it to tests/fuzz/regressions/<harness>/ once fixed.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
all=(onnx_model ort_model checkpoint training_artifacts data_files capi)
harnesses=("${@:-${all[@]}}")
build=${EDGETRAIN_FUZZ_BUILD:-build-asan}

if [[ ! -f $build/build.ninja ]]; then
  CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" \
    -DEDGETRAIN_WITH_DNNL=OFF -DEDGETRAIN_BUILD_BENCH=OFF -DEDGETRAIN_BUILD_PYTHON=OFF -DEDGETRAIN_BUILD_EXAMPLES=OFF \
    -DEDGETRAIN_SANITIZE=address,undefined -DEDGETRAIN_FUZZ=ON >/dev/null
fi
ninja -C "$build" edgetrain_cli $(printf 'fuzz_%s ' "${harnesses[@]}")

# Seeds generated from the repository's models (not committed: a LeNet-BN set is 270 kB).
work=$build/fuzz
generated=$work/generated
if [[ ! -d $generated/lenet_bn ]]; then
  mkdir -p "$generated"
  for model in mlp lenet_bn; do
    "$build/edgetrain" generate-artifacts "models/$model.onnx" -o "$generated/$model" >/dev/null
  done
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# Each harness runs in the background, at most EDGETRAIN_JOBS (default 2) at once: each still gets its full time.
fuzz_one() {
  local harness=$1 corpus=$work/$1/corpus dir
  mkdir -p "$corpus"
  for dir in tests/fuzz/corpus/$harness tests/fuzz/regressions/$harness; do
    [[ -d $dir ]] && cp -n "$dir"/* "$corpus"/ 2>/dev/null || true
  done
  case $harness in
    onnx_model) cp -n models/*.onnx "$generated"/mlp/*.onnx "$corpus"/ ;;
    ort_model) cp -n ../shared/ort-artifacts/ort_format/*.ort "$corpus"/ 2>/dev/null || true ;;
    checkpoint)
      for model in mlp lenet_bn; do printf '\0' | cat - "$generated/$model/checkpoint" >"$corpus/$model-checkpoint"; done ;;
    training_artifacts | capi)
      for model in mlp lenet_bn; do
        python3 tests/fuzz/make_container.py "$generated/$model/training_model.onnx" "$generated/$model/checkpoint" \
          -o "$corpus/$model-set"
      done ;;
  esac
  local log=$work/$harness/last_run.log result=ok
  if ! "$build/tests/fuzz/fuzz_$harness" "$corpus" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=3072 \
      -malloc_limit_mb=17000 -max_len=400000 -print_final_stats=1 -artifact_prefix="$work/$harness/" >"$log" 2>&1; then
    result="FAILED (see $log)"
  fi
  echo "$result" >"$work/$harness/result"
}

for harness in "${harnesses[@]}"; do
  while (($(jobs -rp | wc -l) >= ${EDGETRAIN_JOBS:-2})); do wait -n || true; done
  rm -f "$work/$harness/result"
  fuzz_one "$harness" &
done
wait
status=0
printf '%-20s %10s %8s %8s %s\n' harness executions cov ft result
for harness in "${harnesses[@]}"; do
  log=$work/$harness/last_run.log
  result=$(cat "$work/$harness/result" 2>/dev/null || echo "FAILED (no result; see $log)")
  [[ $result == ok ]] || status=1
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo ?)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo ?)
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo ?)
  printf '%-20s %10s %8s %8s %s\n' "$harness" "$execs" "$cov" "$ft" "$result"
done
exit $status
