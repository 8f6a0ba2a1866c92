#!/usr/bin/env bash
# `maxctx plan` as a user runs it (issue #20): a training table and its --json on a mesh of 256
# devices from one process, the figures that must follow from the keys (fsdp halves the
# parameter shard, remat=full holds fewer activation bytes than none, context=2 sends K/V on the
# context axis, expert=2 splits a Mixtral's experts and exchanges their rows), inference mode, search=true with the engine's own rejection messages, and bad
# inputs (unknown profile, bad option, a mesh that does not fit the devices) as one error line
# with a non-zero exit.
#   plan_cli.sh <build dir> <source dir>
set -euo pipefail
build=$1
src=$2
maxctx=$build/maxctx
config=$src/configs/base.yml
work=$build/tests/train_loop/plan_cli
mkdir -p "$work"
py=/usr/bin/python3
model=(model_name=maxctx-tiny max_target_length=256)

plan_json() {  # plan_json <out> [key=value ...]
  local out=$1
  shift
  "$maxctx" plan "$config" "${model[@]}" "$@" --json > "$out" ||
    { echo "FAIL: plan $*"; exit 1; }
}
field() { "$py" -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }

plan_json "$work/one.json" hardware_profile=h100
plan_json "$work/fsdp2.json" ici_fsdp_parallelism=2 hardware_profile=h100
[[ $(field "$work/one.json" "d['memory_per_rank_bytes']['parameters']") == \
  $(($(field "$work/fsdp2.json" "d['memory_per_rank_bytes']['parameters']") * 2)) ]] ||
  { echo "FAIL: fsdp=2 does not halve the parameter shard"; exit 1; }
[[ $(field "$work/fsdp2.json" "d['communication_per_step']['fsdp']['all_gather']['calls']") -gt 0 ]]

plan_json "$work/none.json" remat_policy=none
plan_json "$work/full.json" remat_policy=full
full=$(field "$work/full.json" "d['memory_per_rank_bytes']['activations']")
none=$(field "$work/none.json" "d['memory_per_rank_bytes']['activations']")
((full < none)) || { echo "FAIL: remat_policy=full holds $full activation bytes, none $none"; exit 1; }

# 256 planned devices from this one process.
plan_json "$work/cp.json" ici_context_parallelism=2 ici_fsdp_parallelism=128 \
  per_device_batch_size=0.5 hardware_profile=tpu-v6e
[[ $(field "$work/cp.json" "d['num_devices']") == 256 ]]
[[ $(field "$work/cp.json" "d['communication_per_step']['context']['all_gather']['bytes']") -gt 0 ]]
"$maxctx" plan "$config" "${model[@]}" ici_context_parallelism=2 ici_fsdp_parallelism=128 \
  per_device_batch_size=0.5 hardware_profile=tpu-v6e > "$work/cp.txt"
grep -q "TFLOPs per device per step" "$work/cp.txt"

# Inference: the KV cache per rank halves from ca=1 to ca=2.
inference=$src/configs/inference.yml
"$maxctx" plan "$inference" model_name=maxctx-tiny num_devices=1 mode=inference --json \
  > "$work/ca1.json"
"$maxctx" plan "$inference" model_name=maxctx-tiny per_device_batch_size=0.5 num_devices=2 \
  --json > "$work/ca2.json"
[[ $(field "$work/ca1.json" "d['mode']") == inference ]]
"$py" - "$work/ca1.json" "$work/ca2.json" << 'PY'
import json, sys
one, two = (json.load(open(p))["memory_per_rank_bytes"]["kv_cache"] for p in sys.argv[1:])
assert two < one, (one, two)
PY

# The expert axis in training: a Mixtral's experts split over it (half the expert weights per
# rank), their rows exchanged by all-to-all, the mean routing's buffers with the skew bound.
moe=(model_name=mixtral-tiny max_target_length=256 ici_fsdp_parallelism=1 num_devices=2)
"$maxctx" plan "$config" "${moe[@]}" ici_data_parallelism=2 --json > "$work/moe1.json"
"$maxctx" plan "$config" "${moe[@]}" ici_expert_parallelism=2 --json > "$work/moe2.json"
"$py" - "$work/moe1.json" "$work/moe2.json" << 'PY'
import json, sys
data, expert = (json.load(open(p)) for p in sys.argv[1:])
assert expert["memory_per_rank_bytes"]["parameters"] < data["memory_per_rank_bytes"]["parameters"]
assert expert["communication_per_step"]["expert"]["all_to_all"]["calls"] > 0
assert "expert" not in data["communication_per_step"]
assert expert["memory_per_rank_bytes"]["expert_routing_skew"] > 0
assert data["memory_per_rank_bytes"]["expert_routing_skew"] == 0
PY
"$maxctx" plan "$config" model_name=mixtral-tiny max_target_length=256 num_devices=4 \
  search=true --json > "$work/moe_search.json"
"$py" - "$work/moe_search.json" << 'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert any(c["expert"] == 2 for c in d["fits"]), "no expert=2 mesh fits"
assert any(c["expert"] == 4 for c in d["fits"]), "4 experts over 4 ranks: no expert=4 mesh fits"
PY

# Search: fitting meshes ranked, rejected ones with the engine's messages.
"$maxctx" plan "$config" "${model[@]}" num_devices=4 search=true --json > "$work/search.json"
"$py" - "$work/search.json" << 'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["fits"], "nothing fits"
times = [c["step_seconds"] for c in d["fits"]]
assert times == sorted(times), times
reasons = " ".join(c["reason"] for c in d["rejected"])
assert "tensor parallelism 4 must divide" in reasons, reasons[:500]
# A dense model: the expert axis would only split the batch as data does, so it is not searched.
assert all(c["expert"] == 1 for c in d["fits"] + d["rejected"])
PY

# Bad inputs: one error line, non-zero exit.
expect_error() {  # expect_error <text> <args...>
  local text=$1
  shift
  if "$maxctx" plan "$@" > "$work/err.log" 2>&1; then
    echo "FAIL: plan $* succeeded"
    exit 1
  fi
  grep -q -- "$text" "$work/err.log" || { echo "FAIL: plan $*:"; cat "$work/err.log"; exit 1; }
  [[ $(grep -c "maxctx: error" "$work/err.log") == 1 ]]
}
expect_error "no file" "$config" "${model[@]}" hardware_profile=no-such-device
expect_error "mode='x'" "$config" "${model[@]}" mode=x
expect_error "num_devices=0" "$config" "${model[@]}" num_devices=0
expect_error "tensor parallelism 3" "$config" "${model[@]}" ici_tensor_parallelism=3
expect_error "expert parallelism 8" "$config" model_name=mixtral-tiny ici_fsdp_parallelism=1 \
  ici_expert_parallelism=8
# probe-hardware on one rank needs a profile to take the link from, and says so before probing.
if "$maxctx" probe-hardware "$work/probe.yml" > "$work/probe.log" 2>&1; then
  echo "FAIL: probe-hardware ran on one rank without link_from"
  exit 1
fi
grep -q "link_from=<profile>" "$work/probe.log" || { cat "$work/probe.log"; exit 1; }
if "$maxctx" probe-hardware "$work/probe.yml" link_from="$work/none.yml" > "$work/probe.log" 2>&1
then
  echo "FAIL: probe-hardware took its link from a missing profile"
  exit 1
fi
grep -q "none.yml" "$work/probe.log" || { cat "$work/probe.log"; exit 1; }
[[ ! -e $work/probe.yml ]]
echo "plan_cli: OK"
