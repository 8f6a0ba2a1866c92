#!/usr/bin/env bash
# Sharded checkpoints measured (issue #30): maxctx-100m on fsdp=4 over 4 ranks. Peak RSS per
# rank (/usr/bin/time) of a run without checkpoints, one saving in the background every 3 steps,
# one resuming from that checkpoint, one starting from a 2-file Hugging Face export of it, and
# the export itself (one process); beside each, that rank's shard bytes and `maxctx plan`'s
# peak on a profile of this machine probed with 4 ranks just before. Also the steps' time with
# and without a save in flight, and the bytes a save writes against the state's. Writes
# BUILD_DIR/bench/checkpoint.json. About 4 minutes.
set -euo pipefail
build_dir=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/common.sh
source "$here/../common.sh"
mkdir -p "$build_dir/bench"
profile="$build_dir/bench/this-machine-4-ranks.yml"
"${mpi[@]}" -np 4 --bind-to none "$build_dir/maxctx" probe-hardware "$profile" \
  name=this-machine-4-ranks > /dev/null
/usr/bin/python3 "$here/measure.py" "$build_dir" "$here/../../configs" "$profile" \
  "$build_dir/bench/checkpoint.json"
