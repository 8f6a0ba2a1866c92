#!/usr/bin/env bash
# `make demo`: trains the demo config on 2 ranks with ici_context_parallelism=2, one core and one
# thread per rank, prints the loss falling and the recall accuracy rising (a step line every
# log_period = 100 steps: a screenful), and ends with a plot of the run (maxctx plot).
set -euo pipefail
build_dir=${1:-build}
shift || true
here=$(cd "$(dirname "$0")/.." && pwd)
out=${MAXCTX_DEMO_OUTPUT:-$here/runs}
rm -rf "$out/demo"
mpi=(mpirun -np 2 -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1)
if [ "$(id -u)" -eq 0 ]; then mpi+=(--allow-run-as-root); fi
if [ "$(nproc)" -lt 2 ]; then mpi+=(--oversubscribe); fi
echo "maxctx demo: recall over 1024-token rows, sequence split over 2 ranks (context=2)"
"${mpi[@]}" "$build_dir/maxctx" train "$here/configs/demo.yml" \
  base_output_directory="$out" "$@" | grep -v "^Config "
# Summary from the JSONL metrics: mean loss and accuracy over the first and last 20 steps.
awk -F'[:,]' '
  { for (i = 1; i < NF; i++) {
      if ($i ~ /"learning\/loss"/) loss[NR] = $(i + 1)
      if ($i ~ /"learning\/accuracy"/) acc[NR] = $(i + 1) } }
  END {
    k = NR < 20 ? NR : 20
    for (i = 1; i <= k; i++) { fl += loss[i]; fa += acc[i]; ll += loss[NR - k + i]; la += acc[NR - k + i] }
    printf "first %d steps: loss %.3f, recall accuracy %.1f%%\n", k, fl / k, 100 * fa / k
    printf "last %d steps:  loss %.3f, recall accuracy %.1f%%\n", k, ll / k, 100 * la / k
  }' "$out/demo/metrics.jsonl"
"$build_dir/maxctx" plot "$out/demo" --out "$out/demo/metrics.png" > /dev/null
echo "plot of loss, accuracy, throughput and learning rate: $out/demo/metrics.png"
echo "TensorBoard: tensorboard --logdir $out/demo/tensorboard"
