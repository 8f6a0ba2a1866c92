#!/usr/bin/env bash
# A run remembers its model (issue #33 item 7): a 2-rank run with a non-default RoPE base and
# tied embeddings saves a checkpoint that records its model; then each of these is one
# "maxctx: error" line naming the field and both values, exit 1, on 2 ranks:
#  - resuming it with a contradicting rope_max_timescale, or with another layer count;
#  - load_full_state_path of it in a new run with a contradicting rope_max_timescale;
# and in one process: `maxctx export` with a contradicting rope_max_timescale or layer count.
# `maxctx export` with no model keys at all writes the recorded model (RoPE base, tied head,
# dimensions), not configs/base.yml's; decode of the checkpoint runs it too. The same for a run
# fine-tuned from a Hugging Face directory (non-default RoPE base with Llama 3 scaling, tied
# embeddings): its export with no model keys is the directory's model, decoding as the checkpoint.
#   model_record.sh <build dir> <source dir>
set -euo pipefail
src=$2
source "$src/tests/support/expect_failure.sh"
failure_test_setup "$1" train_checkpoint/model_record
# maxctx-tiny's dimensions given as keys (no model_name: export below gives no model keys at all).
model=(base_emb_dim=64 base_num_query_heads=4 base_num_kv_heads=2 base_mlp_dim=192
  base_num_decoder_layers=2 head_dim=16 vocab_size=256 rope_max_timescale=100000
  logits_via_embedding=true)
train=(train "$src/configs/base.yml" max_target_length=32 per_device_batch_size=1
  ici_fsdp_parallelism=1 ici_data_parallelism=2 checkpoint_period=2 base_output_directory="$work")
"${mpirun[@]}" "$maxctx" "${train[@]}" "${model[@]}" run_name=first steps=2 > "$work/first.log" 2>&1 ||
  { echo "FAIL: the first run"; tail "$work/first.log"; exit 1; }
checkpoint=$work/first/checkpoints/2
grep -q '"rope_theta": 100000.0' "$checkpoint/state.json" ||
  { echo "FAIL: state.json does not record the model"; cat "$checkpoint/state.json"; exit 1; }

expect_failure "$work/resume_rope.log" 30 \
  "rope_theta 100000.0, this run's has 10000.0 (config key rope_max_timescale)" \
  "${mpirun[@]}" "$maxctx" "${train[@]}" "${model[@]}" run_name=first steps=4 \
  rope_max_timescale=10000
expect_failure "$work/resume_layers.log" 30 "num_layers 2, this run's has 3" \
  "${mpirun[@]}" "$maxctx" "${train[@]}" "${model[@]}" run_name=first steps=4 \
  base_num_decoder_layers=3
expect_failure "$work/full_state_rope.log" 30 \
  "checkpoint '$checkpoint': the checkpoint's model has rope_theta 100000.0, this run's has 10000.0" \
  "${mpirun[@]}" "$maxctx" "${train[@]}" "${model[@]}" run_name=second steps=4 \
  rope_max_timescale=10000 load_full_state_path="$work/first"

if grep -q "MPI_ABORT" "$work"/resume_*.log "$work/full_state_rope.log"; then
  echo "FAIL: a model mismatch aborted the job instead of ending it with one line"; exit 1
fi

export_cmd=(timeout 60 "$maxctx" export "$src/configs/base.yml" load_parameters_path="$work/first")
expect_failure "$work/export_rope.log" 10 "rope_theta 100000.0, this run's has 10000.0" \
  "${export_cmd[@]}" base_output_directory="$work/bad_export" rope_max_timescale=10000
expect_failure "$work/export_layers.log" 10 "num_layers 2, this run's has 4" \
  "${export_cmd[@]}" base_output_directory="$work/bad_export" base_num_decoder_layers=4
[[ ! -e $work/bad_export/config.json ]] || { echo "FAIL: a refused export wrote config.json"; exit 1; }

# No model keys: the recorded model, not base.yml's (rope 10000, untied, 2048 wide, 16 layers).
"${export_cmd[@]}" base_output_directory="$work/hf" > "$work/export.log" 2>&1 ||
  { echo "FAIL: export without model keys"; tail "$work/export.log"; exit 1; }
python3 - "$work/hf/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
want = {"rope_theta": 100000.0, "tie_word_embeddings": True, "hidden_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 192, "head_dim": 16, "vocab_size": 256, "rms_norm_eps": 1e-5}
bad = {k: (c.get(k), v) for k, v in want.items() if c.get(k) != v}
assert not bad, f"config.json differs from the recorded model: {bad}"
print("export without model keys wrote the recorded model:", {k: c[k] for k in want})
PY
# decode of the checkpoint: the recorded model too, with no model keys; a contradicting one fails.
decode=(timeout 60 "$maxctx" decode "$src/configs/base.yml" load_parameters_path="$checkpoint"
  per_device_batch_size=1 max_prefill_predict_length=8 max_target_length=12 prompt="1 2 3"
  base_output_directory="$work")
"${decode[@]}" > "$work/decode.log" 2>&1 ||
  { echo "FAIL: decode without model keys"; tail "$work/decode.log"; exit 1; }
grep -q "dimensions from its recorded model" "$work/decode.log" ||
  { echo "FAIL: decode did not use the recorded model"; grep -v "^Config" "$work/decode.log"; exit 1; }
expect_failure "$work/decode_tied.log" 10 "tie_embeddings true, this run's has false" \
  "${decode[@]}" logits_via_embedding=false

# Fine-tuned from a Hugging Face directory (tests/fixtures/tiny_llama_tied_scaled: rope_theta
# 500000 with Llama 3 scaling, tied embeddings) on 2 ranks, no model keys anywhere: the run
# records config.json's model, export writes it back with no model keys (the weights: the
# checkpoint's, no lm_head), the export decodes as the checkpoint does, and the same export with a
# contradicting rope_max_timescale is refused before anything is written.
hf_fixture=$src/tests/fixtures/tiny_llama_tied_scaled
"${mpirun[@]}" "$maxctx" train "$src/configs/base.yml" load_parameters_path="$hf_fixture" \
  max_target_length=32 per_device_batch_size=1 ici_fsdp_parallelism=1 ici_data_parallelism=2 \
  checkpoint_period=2 steps=2 base_output_directory="$work" run_name=from_hf \
  > "$work/from_hf.log" 2>&1 || { echo "FAIL: fine-tuning from $hf_fixture"; tail "$work/from_hf.log"; exit 1; }
from_hf=(timeout 60 "$maxctx" export "$src/configs/base.yml" load_parameters_path="$work/from_hf")
"${from_hf[@]}" base_output_directory="$work/from_hf_export" > "$work/from_hf_export.log" 2>&1 ||
  { echo "FAIL: export of the run from $hf_fixture"; tail "$work/from_hf_export.log"; exit 1; }
python3 - "$hf_fixture/config.json" "$work/from_hf_export/config.json" <<'PY'
import json, sys
want, got = (json.load(open(p)) for p in sys.argv[1:3])
keys = ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "head_dim", "vocab_size", "rms_norm_eps", "rope_theta",
        "rope_scaling", "tie_word_embeddings"]
bad = {k: (got.get(k), want.get(k)) for k in keys if got.get(k) != want.get(k)}
assert not bad, f"the export's config.json differs from the directory trained from: {bad}"
print("export of a run from an HF directory, no model keys:",
      {k: got[k] for k in ("rope_theta", "rope_scaling", "tie_word_embeddings")})
PY
decode_of() {
  timeout 60 "$maxctx" decode "$src/configs/base.yml" load_parameters_path="$1" per_device_batch_size=1 \
    max_prefill_predict_length=8 max_target_length=16 prompt="1 2 3" base_output_directory="$work" |
    grep -F -- '-> `'
}
from_checkpoint=$(decode_of "$work/from_hf/checkpoints/2")
from_export=$(decode_of "$work/from_hf_export")
[[ -n $from_checkpoint && $from_checkpoint == "$from_export" ]] ||
  { echo "FAIL: the export decodes '$from_export', its checkpoint '$from_checkpoint'"; exit 1; }
echo "the export decodes as its checkpoint: $from_export"
expect_failure "$work/from_hf_rope.log" 10 \
  "the checkpoint's model has rope_theta 500000.0, this run's has 100000.0 (config key rope_max_timescale)" \
  "${from_hf[@]}" base_output_directory="$work/from_hf_bad" rope_max_timescale=100000
[[ ! -e $work/from_hf_bad ]] || { echo "FAIL: a refused export left $work/from_hf_bad"; exit 1; }
echo "model_record: OK"
