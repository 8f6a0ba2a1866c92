#!/usr/bin/env bash
# fsdp frees device memory (issue #32, residency): maxctx-100m trained on the emulated GPU
# (hardware=gpu, MAXCTX_EMULATE_GPU=1) on 4 ranks with fsdp = 1, 2, 4 (data = 4 / fsdp). Per
# run the device memory rank 0 held committed at the peak of a step, as the emulated allocator
# counts it (metrics.jsonl's perf/device_memory_peak_bytes: what a GPU whose fsdp buffers are
# mapped and unmapped per weight unit would hold), beside `maxctx plan`'s step memory for the
# same command on an H100 profile; the ratios against fsdp = 1 and against the plan.
# Writes BUILD_DIR/bench/device_memory.json. About 4 minutes on 2 cores.
set -euo pipefail
build_dir=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/common.sh
source "$here/../common.sh"
mkdir -p "$build_dir/bench"
/usr/bin/python3 "$here/measure.py" "$build_dir" "$here/../../configs" \
  "$build_dir/bench/device_memory.json"
