#!/usr/bin/env bash
# Tracing cost: span cost on/off and training steps with profiler off vs on (this build), and
# profiler off in a build configured with -DMAXCTX_TRACE=OFF (BUILD_DIR-notrace, made here:
# only trace_bench and the libraries it needs). Both binaries run alternately, pinned to one
# core, one thread; combine.py writes BUILD_DIR/bench/trace.json with the ratios.
set -euo pipefail
build_dir=${1:-build}
shift || true  # the rest goes to trace_bench (--model, --seq, --steps, --reps)
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
notrace="${build_dir%/}-notrace"
cmake -S "$root" -B "$notrace" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMAXCTX_TRACE=OFF \
  -DMAXCTX_BUILD_TESTS=OFF > /dev/null
cmake --build "$notrace" --target trace_bench -j "$(nproc)" > /dev/null
mkdir -p "$build_dir/bench"
# shellcheck source=bench/common.sh
source "$here/../common.sh"
runs="$build_dir/bench/trace_runs"
parts=()
for round in 1 2 3; do
  rm -rf "$runs"
  "${pin[@]}" "$build_dir/bench/trace_bench" --run-dir "$runs" \
    --out "$build_dir/bench/trace_traced_$round.json" "$@" > /dev/null
  rm -rf "$runs"
  "${pin[@]}" "$notrace/bench/trace_bench" --run-dir "$runs" \
    --out "$build_dir/bench/trace_notrace_$round.json" "$@" > /dev/null
  parts+=("$build_dir/bench/trace_traced_$round.json" "$build_dir/bench/trace_notrace_$round.json")
done
rm -rf "$runs"
/usr/bin/python3 "$here/combine.py" "$build_dir/bench/trace.json" "${parts[@]}"
rm -f "${parts[@]}"
