#!/usr/bin/env bash
# Context extension (issue #18 part 7): tests/finetune/context_extension.sh's figures (recall
# accuracy and eval loss at 256, at 1024 before, with the RoPE base raised, after fine-tuning at
# 1024 with context=2). Writes BUILD_DIR/bench/context_extension.json.
set -euo pipefail
build_dir=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$build_dir/bench"
bash "$here/../../tests/finetune/context_extension.sh" "$build_dir" "$here/../.." \
  "$build_dir/bench/context_extension.json"
rm -rf "$build_dir/tests/finetune/context_extension"
