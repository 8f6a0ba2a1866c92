#!/usr/bin/env bash
# Text-data throughput: dataset_type=hf's tokenize-and-pack path over a generated JSON Lines
# corpus against one training step of maxctx-small at S = 1024, one rank pinned to one core with
# one OpenMP/BLAS thread. Writes BUILD_DIR/bench/text_data.json.
set -euo pipefail
build_dir=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$build_dir/bench"
# shellcheck source=bench/common.sh
source "$here/../common.sh"
run_dir="$build_dir/bench/text_data_runs"
rm -rf "$run_dir"
"${pin[@]}" "$build_dir/bench/text_data_bench" --config "$here/../../configs/base.yml" \
  --run-dir "$run_dir" --out "$build_dir/bench/text_data.json"
rm -rf "$run_dir"
