#!/usr/bin/env bash
# Collectives benchmark: all-gather and both reduce-scatter algorithms at 1, 16 and 64 MiB per
# rank on 2 ranks (one per core). Writes BUILD_DIR/bench/collectives.json.
set -euo pipefail
build_dir=${1:-build}
mkdir -p "$build_dir/bench"
mpirun --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1 \
  "$build_dir/bench/collectives_bench" --out "$build_dir/bench/collectives.json"
