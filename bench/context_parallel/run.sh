#!/usr/bin/env bash
# Context-parallelism benchmark on 2 ranks (one per core, one OpenMP/BLAS thread each), with
# 1-rank references: attention balance with the dual chunk swap on and off (S = 16384), a
# training step of maxctx-small at S = 16384 on 1 rank vs cp = 2 for both strategies, and peak
# memory per rank at several S per cp, fitted to a line for the longest S within 20 GiB.
# cp_bench writes one JSON piece per run; combine.py merges them into
# BUILD_DIR/bench/context_parallel.json. Takes about 5 minutes on an idle machine.
set -euo pipefail
build_dir=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
pieces="$build_dir/bench/context_parallel_pieces"
rm -rf "$pieces"
mkdir -p "$pieces"
# shellcheck source=bench/common.sh
source "$here/../common.sh"
bench=("$build_dir/bench/cp_bench" --config "$here/../../configs/base.yml"
  --run-dir "$pieces/runs")
seq=16384
export CP_BENCH_MEMORY_SEQS="2048 4096 8192"

"${mpi[@]}" -np 2 "${bench[@]}" --mode attention --seq "$seq" --reps 3 \
  --out "$pieces/attention.json"
"${mpi[@]}" -np 1 "${bench[@]}" --mode step --seq "$seq" --warmup 1 --steps 2 \
  --out "$pieces/step_cp1.json"
for strategy in all_gather ring; do
  "${mpi[@]}" -np 2 "${bench[@]}" --mode step --seq "$seq" --strategy "$strategy" --warmup 1 \
    --steps 3 --out "$pieces/step_cp2_$strategy.json"
done
# Memory points: one step each (peak RSS is reached by then).
for s in $CP_BENCH_MEMORY_SEQS; do
  for cp in 1 2; do
    "${mpi[@]}" -np "$cp" "${bench[@]}" --mode step --seq "$s" --warmup 1 --steps 0 \
      --out "$pieces/memory_cp${cp}_$s.json"
  done
done
# Beyond the fitted range, 2x and 4x the longest fitted S per rank: a sliding window keeps
# the step affordable (memory does not depend on the mask).
window=(--set attention_type=local_sliding --set sliding_window_size=512)
"${mpi[@]}" -np 1 "${bench[@]}" --mode step --seq 32768 --warmup 1 --steps 0 "${window[@]}" \
  --out "$pieces/check_cp1.json"
"${mpi[@]}" -np 2 "${bench[@]}" --mode step --seq 65536 --warmup 1 --steps 0 "${window[@]}" \
  --out "$pieces/check_cp2.json"
rm -rf "$pieces/runs"
/usr/bin/python3 "$here/combine.py" "$pieces" "$build_dir/bench/context_parallel.json"
