#!/usr/bin/env bash
# `maxctx plan` against measured runs on this machine (issue #20): for 14 small configurations
# (context 1/2/4 with both strategies, fsdp 1/2/4, tensor 2, remat policies, bf16 and fp32, a
# mixture of experts, inference at context_autoregressive 1 and 2), the plan's peak memory per
# rank beside the measured peak RSS (max over ranks, /usr/bin/time) and its step time beside the
# measured median step, on the profile configs/hardware/this-machine.yml (rerun
# `mpirun -np 2 maxctx probe-hardware configs/hardware/this-machine.yml` first when the machine
# changed). Writes BUILD_DIR/bench/plan_validation.json. About 3 minutes.
set -euo pipefail
build_dir=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/common.sh
source "$here/../common.sh"
/usr/bin/python3 "$here/validate.py" "$build_dir" "$here/../../configs"
