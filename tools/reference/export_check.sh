#!/usr/bin/env bash
# `maxctx export` checked by transformers itself (issue #30): a GQA Llama with Llama 3.1 RoPE
# scaling is trained for 6 steps on 4 ranks with fsdp=4 (a sharded checkpoint whose every tensor
# is split over the ranks' files), exported as a Hugging Face directory in two files with an index,
# loaded by transformers (float32, eager attention), whose logits for three prompts become a golden
# file; `maxctx check-logits` then runs the export on 1 and on 4 ranks (context=4) and must agree
# within atol 1e-5 and KL 1e-6. Then the same for a run fine-tuned from a Hugging Face directory
# with rope_theta 500000 and tied embeddings on 2 ranks, exported with no model keys (issue #33).
#
#   tools/reference/export_check.sh PYTHON [BUILD_DIR]
#
# PYTHON has torch and transformers (e.g. a venv: `python3.12 -m venv V && V/bin/pip install torch
# transformers`). Not in CI (no torch there). About a minute on 2 cores.
set -euo pipefail
python=${1:?usage: export_check.sh PYTHON [BUILD_DIR]}
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${2:-$root/build}
work=$build/reference/export_check
rm -rf "$work" && mkdir -p "$work"
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1)
model=(base_emb_dim=64 base_num_query_heads=4 base_num_kv_heads=2 head_dim=16 base_mlp_dim=160
  base_num_decoder_layers=3 vocab_size=256 rope_type=llama3.1 rope_max_timescale=500000
  rope_scaling_factor=8 rope_original_max_position_embeddings=64 normalization_layer_epsilon=1e-5)

"${mpi[@]}" -np 4 "$build/maxctx" train "$root/configs/base.yml" "${model[@]}" \
  ici_fsdp_parallelism=4 max_target_length=128 per_device_batch_size=1 steps=6 \
  learning_rate=1e-2 dataset_type=synthetic checkpoint_period=6 log_period=2 \
  base_output_directory="$work" run_name=trained > "$work/train.log"
shards=$(ls "$work/trained/checkpoints/6" | grep -c '^shard-')
"$build/maxctx" export "$root/configs/base.yml" "${model[@]}" \
  load_parameters_path="$work/trained/checkpoints/6" base_output_directory="$work/hf" \
  export_max_shard_size=600000 > "$work/export.log"
files=$(ls "$work/hf" | grep -c '\.safetensors$')
echo "trained on 4 ranks (checkpoint of $shards shard files); exported as $files files + index"
"$python" "$root/tools/reference/transformers_checks.py" golden "$work/hf" "$work/golden.jsonl"
for ranks in 1 4; do
  "${mpi[@]}" -np $ranks "$build/maxctx" check-logits "$root/configs/base.yml" \
    load_parameters_path="$work/hf" golden_logits_path="$work/golden.jsonl" \
    ici_context_parallelism=$ranks max_kl_div=1e-6 atol=1e-5 rtol=0 | grep -E "^prompt|^check-logits"
done

# Issue #33's export test, reloaded in transformers: fine-tuned from a Hugging Face directory with
# a non-default RoPE theta (500000, Llama 3 scaling) and tied embeddings on 2 ranks, exported with
# no model keys (the run records its model), loaded by transformers, whose logits maxctx's must
# match within 1e-4 (here the tight bounds again).
fixture=$root/tests/fixtures/tiny_llama_tied_scaled
"${mpi[@]}" -np 2 "$build/maxctx" train "$root/configs/base.yml" load_parameters_path="$fixture" \
  max_target_length=32 per_device_batch_size=1 ici_fsdp_parallelism=1 ici_data_parallelism=2 \
  learning_rate=1e-2 checkpoint_period=4 steps=4 dataset_type=synthetic \
  base_output_directory="$work" run_name=from_hf > "$work/from_hf.log"
"$build/maxctx" export "$root/configs/base.yml" load_parameters_path="$work/from_hf" \
  base_output_directory="$work/from_hf_export" > "$work/from_hf_export.log"
"$python" - "$work/from_hf_export/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
print("exported with no model keys:", {k: c[k] for k in ("rope_theta", "rope_scaling", "tie_word_embeddings")})
PY
"$python" "$root/tools/reference/transformers_checks.py" golden "$work/from_hf_export" \
  "$work/from_hf_golden.jsonl"
for ranks in 1 2; do
  "${mpi[@]}" -np $ranks "$build/maxctx" check-logits "$root/configs/base.yml" \
    load_parameters_path="$work/from_hf_export" golden_logits_path="$work/from_hf_golden.jsonl" \
    ici_context_parallelism=$ranks max_kl_div=1e-6 atol=1e-5 rtol=0 | grep -E "^prompt|^check-logits"
done
