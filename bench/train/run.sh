#!/usr/bin/env bash
# Training benchmark: one step of maxctx-20m at S = 2048 on one rank pinned to one core with one
# OpenMP/BLAS thread (a warm-up step, then timed steps). Writes BUILD_DIR/bench/train.json.
set -euo pipefail
build_dir=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$build_dir/bench"
# shellcheck source=bench/common.sh
source "$here/../common.sh"
run_dir="$build_dir/bench/train_runs"
rm -rf "$run_dir"
"${pin[@]}" "$build_dir/bench/train_bench" --config "$here/../../configs/base.yml" \
  --run-dir "$run_dir" --out "$build_dir/bench/train.json"
rm -rf "$run_dir"
# bf16 vs fp32: maxctx-20m and maxctx-100m, same pinning.
"${pin[@]}" "$build_dir/bench/precision_bench" --config "$here/../../configs/base.yml" \
  --run-dir "$run_dir" --out "$build_dir/bench/train_precision.json"
rm -rf "$run_dir"
# Mixture of experts: sparse and dense dispatch vs the dense model of equal active parameters.
"${pin[@]}" "$build_dir/bench/moe_bench" --config "$here/../../configs/base.yml" \
  --run-dir "$run_dir" --out "$build_dir/bench/train_moe.json"
# The expert axis on 2 ranks: expert = 2 vs expert = 1 (data = 2), both dispatch paths.
"${mpi[@]}" -np 2 "$build_dir/bench/expert_bench" --config "$here/../../configs/base.yml" \
  --run-dir "$run_dir" --out "$build_dir/bench/train_expert.json"
rm -rf "$run_dir"
# Memory: fsdp = 1, 2, 4 (mpirun) and remat_policy none / minimal / full (one rank, pinned).
"$build_dir/bench/memory_bench" --config "$here/../../configs/base.yml" \
  --remat-prefix "${pin[*]}" --run-dir "$run_dir" --out "$build_dir/bench/train_memory.json"
rm -rf "$run_dir"
# The loss in vocabulary tiles: num_vocab_tiling = 1, 8, 16 (one rank each, pinned).
"$build_dir/bench/vocab_tiling_bench" --config "$here/../../configs/base.yml" \
  --prefix "${pin[*]}" --run-dir "$run_dir" --out "$build_dir/bench/train_vocab_tiling.json"
rm -rf "$run_dir"
