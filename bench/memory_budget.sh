#!/bin/sh
# The memory budget demonstration (issue 14, item 3): a training step of ARTIFACT_DIR at batch B without
# a budget, then with FRACTION of its unconstrained arena as the budget; prints both arenas, the step
# times and whether the losses of the two runs (two steps each) are the same.
#   bench/memory_budget.sh ARTIFACT_DIR [BATCH=32] [FRACTION=0.5]   (BUILD=build by default)
set -eu
dir=$1
batch=${2:-32}
fraction=${3:-0.5}
bench=${BUILD:-build}/bench/train_step_bench
run() { "$bench" train "$dir" --batch "$batch" --threads 1 --warmup 1 --min-steps 1 --max-steps 1 --budget-s 0.1 "$@"; }
field() { printf '%s' "$1" | sed -n "s/.*\"$2\": \\([^,}]*\\).*/\\1/p"; }
free=$(run)
arena=$(field "$free" training_arena_bytes)
budget=$(awk -v a="$arena" -v f="$fraction" 'BEGIN { printf "%d", a * f }')
tight=$(run --memory-budget "$budget")
if [ -n "$(field "$tight" error)" ]; then echo "budget $budget: $tight"; exit 1; fi
echo "unconstrained arena: $arena bytes, step $(field "$free" median_ms) ms, losses $(field "$free" first_loss) $(field "$free" last_loss)"
echo "budget:              $budget bytes ($fraction of it)"
echo "arena achieved:      $(field "$tight" training_arena_bytes) bytes, $(field "$tight" recomputed_values) recomputations, step $(field "$tight" median_ms) ms, losses $(field "$tight" first_loss) $(field "$tight" last_loss)"
if [ "$(field "$free" first_loss) $(field "$free" last_loss)" = "$(field "$tight" first_loss) $(field "$tight" last_loss)" ]; then
  echo "losses: the same"
else
  echo "losses: DIFFER"; exit 1
fi
