#!/usr/bin/env bash
# Runs the golden cases with one maxctx binary and writes, per case, the outputs that must not
# change as text (<out dir>/<case>.txt, lines `<kind> <name> <value>`, see golden.py), plus
# <out dir>/machine_key.txt (the CPU and toolchain that decide the exact bits).
#   run_cases.sh <build dir> <source dir> <out dir>
# <build dir>/maxctx is the binary (e.g. /tmp/build-old to record with a pre-change build).
# Cases: training (6 steps, every loss/norm and the final checkpoint's hash) on 1, 2 and 4
# ranks over the training meshes; check-logits on the torch fixtures on 1, 2 and 4 ranks;
# decode (token ids) on 1, 2 and 4 ranks, both decode shardings, int8 weights / KV cache,
# the sampling strategies.
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
out=$3
maxctx=$build/maxctx
py=(/usr/bin/python3 "$src/tests/golden/golden.py")
fixtures=$src/tests/fixtures
mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -f "$out"/*.txt
work=$(mktemp -d "${TMPDIR:-/tmp}/maxctx_golden.XXXXXX")
trap 'rm -rf "$work"' EXIT
mpirun=(mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1)

run() {  # run <case> <ranks> <maxctx args...>: the log in $work/<case>.log, or fail with its tail
  local name=$1 np=$2
  shift 2
  if ! "${mpirun[@]}" -np "$np" "$maxctx" "$@" > "$work/$name.log" 2>&1; then
    echo "FAIL: case $name ($np ranks) exited non-zero: maxctx $*"
    tail -15 "$work/$name.log"
    exit 1
  fi
}

"${py[@]}" machine-key "$build" "$out/machine_key.txt"

# ---- training: 6 steps of maxctx-tiny on packed documents (segment masks, position restarts),
# global batch 4 rows of 64, a learning rate high enough that the weights move; checkpoint at 6.
"${py[@]}" token-file "$work/tokens.bin"
train_common=(model_name=maxctx-tiny dataset_type=tokens dataset_path="$work/tokens.bin"
  max_target_length=64 steps=6 learning_rate=3e-3 warmup_steps_fraction=0.2 log_period=1
  checkpoint_period=6 base_output_directory="$work/train")
train() {  # train <case> <ranks> <key=value ...>
  local name=$1 np=$2
  shift 2
  local fsdp=(ici_fsdp_parallelism=1)  # base.yml's -1 would put every rank on fsdp
  [[ " $* " == *" ici_fsdp_parallelism="* ]] && fsdp=()
  run "$name" "$np" train "$src/configs/base.yml" "${train_common[@]}" run_name="$name" \
    per_device_batch_size=$((4 / np)) "${fsdp[@]}" "$@"
  "${py[@]}" train "$work/train/$name" "$out/$name.txt"
}
ag=context_parallel_strategy=all_gather
ring=context_parallel_strategy=ring
window=(attention_type=local_sliding sliding_window_size=7)
train train_np1 1
train train_np1_window 1 "${window[@]}"
train train_context2_all_gather 2 ici_context_parallelism=2 "$ag"
train train_context2_ring 2 ici_context_parallelism=2 "$ring"
train train_context2_window_ring 2 ici_context_parallelism=2 "$ring" "${window[@]}"
train train_context2_no_balance 2 ici_context_parallelism=2 "$ag" context_parallel_load_balance=false
train train_tensor2 2 ici_tensor_parallelism=2
train train_fsdp2 2 ici_fsdp_parallelism=2
train train_data2 2 ici_data_parallelism=2
train train_context4_all_gather 4 ici_context_parallelism=4 "$ag"
train train_context4_ring 4 ici_context_parallelism=4 "$ring"
train train_context2_tensor2 4 ici_context_parallelism=2 ici_tensor_parallelism=2
train train_data2_context2 4 ici_data_parallelism=2 ici_context_parallelism=2 "$ring"
train train_fsdp2_context2 4 ici_fsdp_parallelism=2 ici_context_parallelism=2

# ---- check-logits: the committed tiny_llama golden file, and every document of the other two
# fixtures' reference.safetensors (tied embeddings + llama3 RoPE scaling; sliding window + MQA).
"${py[@]}" reference-golden "$fixtures/tiny_llama_tied_scaled" "$work/tied_scaled.jsonl"
"${py[@]}" reference-golden "$fixtures/tiny_mistral_window" "$work/mistral_window.jsonl"
check() {  # check <case> <ranks> <fixture> <golden file> <key=value ...>
  local name=$1 np=$2 fixture=$3 golden=$4
  shift 4
  run "$name" "$np" check-logits "$src/configs/base.yml" load_parameters_path="$fixtures/$fixture" \
    golden_logits_path="$golden" ici_fsdp_parallelism=1 max_kl_div=1e-6 atol=1e-5 rtol=0 "$@"
  "${py[@]}" check-logits "$work/$name.log" "$out/$name.txt"
}
tiny_golden=$fixtures/tiny_llama/golden_logits.jsonl
check logits_tiny_llama_np1 1 tiny_llama "$tiny_golden"
check logits_tiny_llama_context2 2 tiny_llama "$tiny_golden" ici_context_parallelism=2
check logits_tiny_llama_context2_ring 2 tiny_llama "$tiny_golden" ici_context_parallelism=2 "$ring"
check logits_tiny_llama_tensor2 2 tiny_llama "$tiny_golden" ici_tensor_parallelism=2
check logits_tiny_llama_context4 4 tiny_llama "$tiny_golden" ici_context_parallelism=4
check logits_tied_scaled_np1 1 tiny_llama_tied_scaled "$work/tied_scaled.jsonl"
check logits_tied_scaled_context2 2 tiny_llama_tied_scaled "$work/tied_scaled.jsonl" \
  ici_context_parallelism=2
check logits_mistral_window_np1 1 tiny_mistral_window "$work/mistral_window.jsonl"
check logits_mistral_window_context2 2 tiny_mistral_window "$work/mistral_window.jsonl" \
  ici_context_parallelism=2

# ---- decode: 4 decode slots of the tiny_llama fixture, ids in and out; the ranks are the
# context_autoregressive axis (configs/inference.yml).
decode_ids=(load_parameters_path="$fixtures/tiny_llama" prompt="1 5 9 3 17 2 44"
  max_prefill_predict_length=16 max_target_length=40)
decode() {  # decode <case> <ranks> <key=value ...>
  local name=$1 np=$2
  shift 2
  run "$name" "$np" decode "$src/configs/inference.yml" "${decode_ids[@]}" \
    per_device_batch_size=$((4 / np)) ici_context_autoregressive_parallelism="$np" "$@"
  "${py[@]}" decode "$work/$name.log" "$out/$name.txt"
}
decode decode_np1 1
for np in 2 4; do
  for mode in sequence batch; do
    decode "decode_${mode}_ca$np" "$np" context_autoregressive_decode="$mode"
  done
done
decode decode_int8_weights_ca2 2 quantization=int8
decode decode_int8_kvcache_ca2 2 quantize_kvcache=true
decode decode_int8_both_batch_ca4 4 quantization=int8 quantize_kvcache=true \
  context_autoregressive_decode=batch
decode decode_int8_both_np1 1 quantization=int8 quantize_kvcache=true
decode decode_weighted_ca2 2 decode_sampling_strategy=weighted decode_sampling_temperature=0.8 \
  decode_sampling_seed=7
decode decode_topk_np1 1 decode_sampling_strategy=topk decode_sampling_top_k=5 decode_sampling_seed=3
decode decode_nucleus_ca4 4 decode_sampling_strategy=nucleus decode_sampling_nucleus_p=0.9 \
  decode_sampling_seed=5
# Text in and out: maxctx-tiny from its seeded initialisation, the SentencePiece fixture.
decode_ids=(model_name=maxctx-tiny vocab_size=1000 override_model_config=true
  tokenizer_path="$fixtures/tokenizer/docs_spm.model" prompt="Context parallelism splits the sequence"
  max_prefill_predict_length=16 max_target_length=48)
decode decode_text_np1 1
decode decode_text_ca2 2

echo "golden cases: $(ls "$out" | grep -vc machine_key) written to $out"
