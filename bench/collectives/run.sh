#!/usr/bin/env bash
# Collectives benchmark: all-gather and both reduce-scatter algorithms at 1, 16 and 64 MiB per
# rank on 2 ranks (one per core). Writes BUILD_DIR/bench/collectives.json.
set -euo pipefail
build_dir=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/common.sh
source "$here/../common.sh"
mkdir -p "$build_dir/bench"
"${mpi[@]}" -np 2 "$build_dir/bench/collectives_bench" --out "$build_dir/bench/collectives.json"
