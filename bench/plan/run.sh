#!/usr/bin/env bash
# `maxctx plan` against measured runs on this machine (issue #20): for 17 small configurations
# (context 1/2/4 with both strategies, fsdp 1/2/4, tensor 2, remat policies, bf16 and fp32, a
# mixture of experts on one rank and over expert 2, a checkpoint save and a start from it,
# inference at context_autoregressive 1 and 2), the plan's peak memory per rank beside the
# measured peak RSS (max over ranks, /usr/bin/time) and its step time beside the measured median
# step, on this machine's profile probed just before (`maxctx probe-hardware`, written to
# BUILD_DIR/bench/this-machine.yml). Writes BUILD_DIR/bench/plan_validation.json.
# About 8 minutes.
set -euo pipefail
build_dir=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/common.sh
source "$here/../common.sh"
# This machine as it is now (shared machines change from minute to minute): probed first, one
# rank per core, into the build directory; the plans below read that profile. A device is what
# a rank gets as the case runs it, so the machine is probed as each case count uses it: one rank
# alone (the whole last-level cache and memory bandwidth, the other core idle) for the 1-rank
# cases; one rank per core for the 2-rank cases; four ranks on the two cores (half a core each)
# for the 4-rank cases.
mkdir -p "$build_dir/bench"
profile="$build_dir/bench/this-machine.yml"
profile1="$build_dir/bench/this-machine-1-rank.yml"
profile4="$build_dir/bench/this-machine-4-ranks.yml"
"${mpi[@]}" -np 2 --bind-to core "$build_dir/maxctx" probe-hardware "$profile" > /dev/null
"${mpi[@]}" -np 1 --bind-to core "$build_dir/maxctx" probe-hardware "$profile1" \
  name=this-machine-1-rank "link_from=$profile" > /dev/null
"${mpi[@]}" -np 4 --bind-to none "$build_dir/maxctx" probe-hardware "$profile4" \
  name=this-machine-4-ranks > /dev/null
/usr/bin/python3 "$here/validate.py" "$build_dir" "$here/../../configs" "$profile" "$profile4" \
  "$profile1"
