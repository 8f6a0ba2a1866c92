#!/usr/bin/env bash
# Issue #21's hostile inputs through the CLI on 2 ranks: sizes that overflow or cannot fit the
# machine, a damaged newest checkpoint, weights holding NaN. Each must end every rank non-zero
# within 30 s with one "maxctx: error" line naming the problem, and write nothing.
#   hostile_inputs.sh <build dir> <source dir>
set -euo pipefail
src=$2
source "$src/tests/support/expect_failure.sh"
failure_test_setup "$1" train_loop/hostile_inputs
train_any=(train "$src/configs/base.yml" model_name=maxctx-tiny override_model_config=true
  max_target_length=64 ici_fsdp_parallelism=1 ici_data_parallelism=2
  base_output_directory="$work")
train_any_batch=("${train_any[@]}" steps=2)
train=("${train_any_batch[@]}" per_device_batch_size=1)
decode_any=(decode "$src/configs/inference.yml" model_name=maxctx-tiny override_model_config=true
  max_prefill_predict_length=16 prompt="1 2 3")
decode=("${decode_any[@]}" max_target_length=32 per_device_batch_size=1)

case_() {  # case_ <name> <expected part> <maxctx arguments ...>
  local name=$1 part=$2
  shift 2
  expect_failure "$work/$name.log" 30 "$part" "${mpirun[@]}" "$maxctx" "$@"
  if [[ -e $work/$name ]]; then echo "FAIL $name: left $work/$name behind"; exit 1; fi
}

case_ scale_2_62 "global_parameter_scale" "${train[@]}" run_name=scale_2_62 \
  global_parameter_scale=4611686018427387904
case_ layers_1e8 "num_decoder_layers = 100000000" "${train[@]}" run_name=layers_1e8 \
  base_num_decoder_layers=100000000
case_ batch_1e300 "sequences per step" "${train_any_batch[@]}" run_name=batch_1e300 \
  per_device_batch_size=1e300
case_ width_2_33 "emb_dim = 8589934592" "${train[@]}" run_name=width_2_33 base_emb_dim=8589934592
case_ vocab_2_40 "'vocab_size' = 1099511627776 is more than" "${train[@]}" run_name=vocab_2_40 \
  vocab_size=1099511627776
# Within the bounds but beyond this machine: refused before allocating, naming the sizes.
case_ vocab_too_big "training needs at least" "${train[@]}" run_name=vocab_too_big \
  vocab_size=2147483647 base_emb_dim=4096
case_ decode_length_2_62 "'max_target_length' = 4611686018427387904" "${decode_any[@]}" \
  max_target_length=4611686018427387904 per_device_batch_size=1
case_ decode_cache_too_big "KV cache share" "${decode_any[@]}" max_target_length=2147483647 \
  per_device_batch_size=64

# A damaged state.json in the newest checkpoint: refused, naming the file (not a silent resume
# from the one before).
"${mpirun[@]}" "$maxctx" "${train_any[@]}" per_device_batch_size=1 run_name=damaged steps=4 \
  checkpoint_period=2 \
  > "$work/damaged_setup.log" 2>&1 || { echo "FAIL: setup run"; tail "$work/damaged_setup.log"; exit 1; }
echo '{"format": "maxctx-checkpoint-v1", "step": 4,' > "$work/damaged/checkpoints/4/state.json"
expect_failure "$work/damaged_state.log" 30 "checkpoints/4/state.json' is not valid JSON" \
  "${mpirun[@]}" "$maxctx" "${train_any[@]}" per_device_batch_size=1 run_name=damaged steps=6 \
  checkpoint_period=2
[[ ! -e $work/damaged/checkpoints/6 ]] || { echo "FAIL: trained past a damaged checkpoint"; exit 1; }

# NaN in a weight of a Hugging Face checkpoint: decode refuses it, naming the tensor.
fixture=$src/tests/fixtures/tiny_llama
mkdir -p "$work/nan_model"
cp "$fixture/config.json" "$fixture/model.safetensors" "$work/nan_model/"
python3 - "$work/nan_model/model.safetensors" << 'PY'
import json, struct, sys
path = sys.argv[1]
with open(path, "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
    info = header["model.norm.weight"]
    f.seek(8 + n + info["data_offsets"][0] + 4 * 3)
    f.write(struct.pack("<f", float("nan")))
PY
expect_failure "$work/nan_weights.log" 30 "tensor 'model.norm.weight' holds a non-finite value" \
  "${mpirun[@]}" "$maxctx" decode "$src/configs/inference.yml" load_parameters_path="$work/nan_model" \
  max_prefill_predict_length=16 max_target_length=32 per_device_batch_size=1 prompt="1 2 3"
# Issue #34, the low items. N8: llama3 rope_scaling values the rope table cannot use (it was an
# internal check and MPI_Abort).
case_ rope_negative "rope_scaling factor = -1 must be finite and positive" "${decode[@]}" \
  rope_type=llama3.1 rope_scaling_factor=-1
case_ rope_order "needs high_freq_factor > low_freq_factor" "${decode[@]}" rope_type=llama3.1 \
  rope_low_freq_factor=4 rope_high_freq_factor=1
# N12: a config.json with 2^20 experts is refused before anything is sized by it.
mkdir -p "$work/experts"
cp "$src/tests/fixtures/tiny_mixtral/"* "$work/experts/"
sed -i 's/"num_local_experts": [0-9]*/"num_local_experts": 1048576/' "$work/experts/config.json"
expect_failure "$work/experts.log" 30 "num_local_experts = 1048576 is more than 65536" \
  "${mpirun[@]}" "$maxctx" decode "$src/configs/inference.yml" load_parameters_path="$work/experts" \
  max_prefill_predict_length=16 max_target_length=32 per_device_batch_size=1 prompt="1 2 3"
# N16: a second YAML document is refused, not ignored.
printf 'base_config: base.yml\n---\nsteps: 5\n' > "$work/two_documents.yml"
cp "$src/configs/base.yml" "$work/base.yml"
expect_failure "$work/two_documents.log" 30 "holds 2 YAML documents" \
  "${mpirun[@]}" "$maxctx" decode "$work/two_documents.yml" model_name=maxctx-tiny \
  max_prefill_predict_length=16 max_target_length=32 per_device_batch_size=1 prompt="1 2 3"
# N9: a tensor name with a newline and an escape sequence is printed escaped, on its one line.
mkdir -p "$work/evil_name"
cp "$fixture/config.json" "$work/evil_name/"
python3 - "$work/evil_name/model.safetensors" << 'PY'
import json, struct, sys
name = "model.norm.weight\nmaxctx: error: forged line\x1b[2J"
header = json.dumps({name: {"dtype": "F32", "shape": [64], "data_offsets": [0, 256]}}).encode()
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(header)) + header + bytes(16))
PY
expect_failure "$work/evil_name.log" 30 'forged line\x1b[2J' \
  "${mpirun[@]}" "$maxctx" decode "$src/configs/inference.yml" load_parameters_path="$work/evil_name" \
  max_prefill_predict_length=16 max_target_length=32 per_device_batch_size=1 prompt="1 2 3"
if grep -q $'\x1b' "$work/evil_name.log"; then
  echo "FAIL evil_name: an escape byte reached the output"; exit 1
fi
# N15: a huge but finite weight is legal: the decode runs, with a warning naming the tensor.
mkdir -p "$work/huge_model"
cp "$fixture/config.json" "$fixture/model.safetensors" "$work/huge_model/"
python3 - "$work/huge_model/model.safetensors" << 'PY'
import json, struct, sys
with open(sys.argv[1], "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    info = json.loads(f.read(n))["model.norm.weight"]
    f.seek(8 + n + info["data_offsets"][0] + 4 * 3)
    f.write(struct.pack("<f", 1e30))
PY
"${mpirun[@]}" "$maxctx" decode "$src/configs/inference.yml" load_parameters_path="$work/huge_model" \
  max_prefill_predict_length=16 max_target_length=32 per_device_batch_size=1 prompt="1 2 3" \
  > "$work/huge_weights.log" 2>&1 || { echo "FAIL huge_weights: exit non-zero"; exit 1; }
grep -q "warning: tensor 'model.norm.weight' holds a value of magnitude 2^16 or more at element 3" \
  "$work/huge_weights.log" || { echo "FAIL huge_weights: no warning"; tail "$work/huge_weights.log"; exit 1; }
echo "hostile_inputs: OK"
