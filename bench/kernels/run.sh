#!/usr/bin/env bash
# Kernels benchmark: FMA peak, SGEMM and causal attention on ONE pinned core with one
# OpenMP/BLAS thread, torch 1.13 measured in the same run; bf16 attention (attention_bf16,
# decode_attention_bf16: attention_bf16_bench.cpp) against fp32. Writes BUILD_DIR/bench/kernels.json.
# torch is optional: without it the JSON says "torch": "unavailable" and this still succeeds.
set -euo pipefail
build_dir=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$build_dir/bench"
# shellcheck source=bench/common.sh
source "$here/../common.sh"
torch_json="$build_dir/bench/kernels_torch.json"
rm -f "$torch_json"
if /usr/bin/python3 -c "import torch" > /dev/null 2>&1; then
  "${pin[@]}" /usr/bin/python3 "$here/attention_torch.py" "$torch_json" ||
    echo "attention_torch.py failed; torch reported as unavailable" >&2
else
  echo "torch not importable by /usr/bin/python3; torch reported as unavailable" >&2
fi
"${pin[@]}" "$build_dir/bench/kernels_bench" --out "$build_dir/bench/kernels.json" \
  --torch-json "$torch_json"
