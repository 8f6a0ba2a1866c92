#!/usr/bin/env bash
# Tokenizer time on hostile inputs (issue #34 N6): 1 MB of real text, one letter, random bytes,
# random UTF-8, one digit and spaces with every tokenizer kind, and a 4,000-byte prompt with
# 1,000,000 added tokens; pinned to one core. Writes BUILD_DIR/bench/tokenizer.json and fails
# when an input takes more than 2x the real text or more than 1 s per MB.
set -euo pipefail
build_dir=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$build_dir/bench"
# shellcheck source=bench/common.sh
source "$here/../common.sh"
"${pin[@]}" "$build_dir/bench/tokenizer_bench" --out "$build_dir/bench/tokenizer.json" > /dev/null
