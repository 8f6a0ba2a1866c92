#!/usr/bin/env bash
# Runs every benchmark area's run.sh (bench/<area>/run.sh BUILD_DIR) and lists the JSON written.
set -euo pipefail
build_dir=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$build_dir/bench"
status=0
for script in "$here"/*/run.sh; do
  [ -f "$script" ] || continue
  echo "== bench: $(basename "$(dirname "$script")")"
  bash "$script" "$build_dir" || { echo "bench $(dirname "$script") failed" >&2; status=1; }
done
ls -1 "$build_dir"/bench/*.json 2>/dev/null || true
exit $status
