#!/usr/bin/env bash
# Soak: trains the LeNet-BN CNN on Fashion-MNIST for many epochs in one process (eval and a
# checkpoint save after every epoch), sampling its RSS; then resumes from the checkpoint for more
# epochs. Fails when RSS grows more than MAX_GROWTH_MIB after the first epoch, or when the
# LeakSanitizer build (if given) reports a leak.
#   scripts/soak.sh [EPOCHS=20] [SAMPLES=60000] [CLI=build/edgetrain]
# CI runs a short one: EPOCHS=3 SAMPLES=2000, and the same under build-asan's CLI (LSan).
set -euo pipefail
cd "$(dirname "$0")/.."
epochs=${1:-20}
samples=${2:-60000}
cli=${3:-build/edgetrain}
max_growth_mib=${MAX_GROWTH_MIB:-8}
data=${EDGETRAIN_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$cli" generate-artifacts models/lenet_bn.onnx -o "$work/artifacts" >/dev/null
train_args=(--data "input=$data/train-images-idx3-ubyte.gz" "labels=$data/train-labels-idx1-ubyte.gz"
  --eval-data "input=$data/t10k-images-idx3-ubyte.gz" "labels=$data/t10k-labels-idx1-ubyte.gz"
  --batch-size 64 --limit "$samples" --checkpoint-out "$work/ckpt" --metrics "$work/metrics.csv")
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}

# RSS (KiB) sampled every 0.2 s while the run lasts, with the epoch count reached (metrics rows).
run_sampled() {
  "$@" >"$work/train.log" 2>&1 &
  local pid=$!
  : >"$work/rss"
  while kill -0 "$pid" 2>/dev/null; do
    rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
    rows=$( (grep -c . "$work/metrics.csv" 2>/dev/null || echo 0) | tail -1)
    [[ -n $rss ]] && echo "$rows $rss" >>"$work/rss"
    sleep 0.2
  done
  wait "$pid" || { cat "$work/train.log"; echo "soak: the training run failed"; exit 1; }
}

run_sampled "$cli" train "$work/artifacts" "${train_args[@]}" --epochs "$epochs"
# Rows counts the CSV header too: "2" means the first epoch has finished.
read -r first_epoch_peak last_peak < <(awk '$1 >= 2 && $1 <= 2 {a = $2 > a ? $2 : a} $1 >= 2 {b = $2 > b ? $2 : b}
  END {print a + 0, b + 0}' "$work/rss")
growth_kib=$((last_peak - first_epoch_peak))
echo "soak: $epochs epochs of $samples samples: RSS peak $((first_epoch_peak / 1024)) MiB after epoch 1," \
  "$((last_peak / 1024)) MiB over the whole run (growth $((growth_kib / 1024)) MiB)"
tail -n 2 "$work/metrics.csv"
if ((first_epoch_peak == 0 || growth_kib > max_growth_mib * 1024)); then
  echo "soak: RSS grew by more than $max_growth_mib MiB after the first epoch"
  exit 1
fi

run_sampled "$cli" train "$work/artifacts" "${train_args[@]}" --epochs 2 --resume "$work/ckpt"
grep -q -i "leak" "$work/train.log" && { cat "$work/train.log"; echo "soak: LeakSanitizer report"; exit 1; }
echo "soak: resumed for 2 more epochs; metrics rows: $(($(grep -c . "$work/metrics.csv") - 1))"
