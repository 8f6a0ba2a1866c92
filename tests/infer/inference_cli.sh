#!/usr/bin/env bash
# `maxctx decode` and `maxctx bench-inference` as a user runs them: the same generated ids and
# text on 1, 2 and 4 ranks (context_autoregressive = ranks, both decode shardings), the bench's
# JSON with MaxText's key names, and the bad inputs each exit non-zero with one error line.
#   inference_cli.sh <build dir> <source dir>
set -euo pipefail
build=$1
src=$2
maxctx=$build/maxctx
config=$src/configs/inference.yml
fixture=$src/tests/fixtures/tiny_llama
tokenizer=$src/tests/fixtures/tokenizer/docs_spm.model
work=$build/tests/infer/cli
mkdir -p "$work"
mpirun=(mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1)

# The generated part of decode's output: the line after "->".
generated() { grep -a -o -- '-> `.*`' "$1"; }

# Ids in, ids out, on the torch fixture; 4 slots so that batch decoding splits them.
ids=(load_parameters_path="$fixture" prompt="1 5 9 3 17 2 44" max_prefill_predict_length=16
  max_target_length=40)
for decode in sequence batch; do
  for np in 1 2 4; do
    batch=$((4 / np))
    "${mpirun[@]}" -np "$np" "$maxctx" decode "$config" "${ids[@]}" \
      per_device_batch_size="$batch" context_autoregressive_decode="$decode" \
      > "$work/ids_${decode}_np$np.log" 2>&1 ||
      { echo "FAIL: decode $decode on $np ranks:"; tail -5 "$work/ids_${decode}_np$np.log"; exit 1; }
    generated "$work/ids_${decode}_np$np.log" > "$work/ids_${decode}_np$np.out"
    cmp "$work/ids_sequence_np1.out" "$work/ids_${decode}_np$np.out" ||
      { echo "FAIL: decode $decode on $np ranks generated other ids"; exit 1; }
  done
done
echo "ids (1, 2, 4 ranks, sequence and batch): $(cat "$work/ids_sequence_np1.out")"
[[ $(wc -w < "$work/ids_sequence_np1.out") -gt 10 ]]

# The Mixtral fixture (a mixture of experts, Hugging Face MixtralConfig): the same ids on 1 and
# 2 ranks.
mixtral=(load_parameters_path="$src/tests/fixtures/tiny_mixtral" prompt="1 5 9 3 17 2 44"
  max_prefill_predict_length=16 max_target_length=40)
for np in 1 2; do
  "${mpirun[@]}" -np "$np" "$maxctx" decode "$config" "${mixtral[@]}" \
    per_device_batch_size=$((4 / np)) > "$work/mixtral_np$np.log" 2>&1 ||
    { echo "FAIL: Mixtral decode on $np ranks:"; tail -5 "$work/mixtral_np$np.log"; exit 1; }
done
cmp <(generated "$work/mixtral_np1.log") <(generated "$work/mixtral_np2.log")
echo "Mixtral ids (1 and 2 ranks): $(generated "$work/mixtral_np1.log")"

# Text in, text out, with the SentencePiece fixture (a random model with its vocabulary); then
# the same with int8 weights and KV cache (its tokens may differ from fp32's, so only run).
text=(model_name=maxctx-tiny vocab_size=1000 override_model_config=true
  tokenizer_path="$tokenizer" prompt="Context parallelism splits the sequence"
  max_prefill_predict_length=16 max_target_length=48)
int8=(quantization=int8 quantize_kvcache=true)
for run in np1 np2 int8; do
  np=2 extra=()
  [[ $run == np1 ]] && np=1
  [[ $run == int8 ]] && extra=("${int8[@]}")
  "${mpirun[@]}" -np "$np" "$maxctx" decode "$config" "${text[@]}" "${extra[@]}" \
    > "$work/text_$run.log" 2>&1 ||
    { echo "FAIL: text decode ($run):"; tail -5 "$work/text_$run.log"; exit 1; }
  grep -aq 'Input `Context parallelism splits the sequence` -> `' "$work/text_$run.log"
done
cmp <(generated "$work/text_np1.log") <(generated "$work/text_np2.log")
echo "text (1 and 2 ranks): $(generated "$work/text_np1.log" | cut -c1-60)..."

# bench-inference: MaxText's result keys in the log file.
"${mpirun[@]}" -np 2 "$maxctx" bench-inference "$config" model_name=maxctx-tiny \
  max_prefill_predict_length=64 max_target_length=96 inference_microbenchmark_prefill_lengths=16,64 \
  inference_microbenchmark_loop_iters=2 inference_microbenchmark_log_file_path="$work/bench.json" \
  > "$work/bench.log" 2>&1 || { echo "FAIL: bench-inference:"; tail -5 "$work/bench.log"; exit 1; }
/usr/bin/python3 - "$work/bench.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert set(r["sizes"]) == {"model_size_in_gb", "cache_size_in_gb", "model_params_in_billions"}, r
for length in ("16", "64"):
    p = r["prefill"][length]
    assert set(p) == {"time_in_ms", "total_tflops_per_device", "tflops_per_sec_per_device"}, p
    assert p["time_in_ms"] > 0 and p["tflops_per_sec_per_device"] > 0, p
ar = r["autoregressive"]
for key in ("step_in_ms", "step_in_ms_per_seq", "global_batch_size",
            "total_throughput_tokens_per_second", "bw_per_device_GB_per_second"):
    assert ar[key] > 0, (key, ar)
assert ar["global_batch_size"] == 2, ar
print("bench-inference JSON: %.3f ms per AR step, %.2f GB/s per device"
      % (ar["step_in_ms"], ar["bw_per_device_GB_per_second"]))
PY
grep -q "AR step average time" "$work/bench.log"

# Bad input: non-zero exit, the error printed once.
expect_error() {  # expect_error <ranks> <message> <command args...>
  local np=$1 message=$2
  shift 2
  if "${mpirun[@]}" -np "$np" "$maxctx" "$@" > "$work/error.log" 2>&1; then
    echo "FAIL: exit 0 for: $*"; exit 1
  fi
  if [[ $(grep -c "maxctx: error" "$work/error.log") != 1 ]] || ! grep -qF "$message" "$work/error.log"; then
    echo "FAIL: expected one error '$message' for: $*"; cat "$work/error.log"; exit 1
  fi
  grep "maxctx: error" "$work/error.log"
}
long_prompt=$(seq -s " " 1 20)
expect_error 2 "more than max_prefill_predict_length = 16" decode "$config" "${ids[@]:0:1}" "${ids[@]:2}" \
  prompt="$long_prompt"
expect_error 3 "does not split over context_autoregressive = 3" decode "$config" "${ids[@]}"
expect_error 2 "context = 2 is the training axis" decode "$config" "${ids[@]}" \
  ici_context_parallelism=2 ici_context_autoregressive_parallelism=1
expect_error 2 "is the inference axis" train "$src/configs/base.yml" model_name=maxctx-tiny \
  ici_fsdp_parallelism=1 ici_context_autoregressive_parallelism=2 steps=1
# The expert axis splits the slots (per_device_batch_size 0.5 x 2 devices = 1 slot over 2).
expect_error 2 "expert = 2 splits the 1 decode slots into 2 groups" decode "$config" "${ids[@]}" \
  ici_expert_parallelism=2 per_device_batch_size=0.5
expect_error 1 "unknown" decode "$config" "${ids[@]}" decode_sampling_topk=3
# A model vocabulary larger than the tokenizer's (issue #34 N13): generated ids past the
# tokenizer's are shown as <id N>, with a warning, instead of the whole output lost to an error.
"${mpirun[@]}" -np 1 "$maxctx" decode "$config" model_name=maxctx-tiny vocab_size=4096 \
  override_model_config=true tokenizer_path="$tokenizer" prompt="Context parallelism splits" \
  max_prefill_predict_length=16 max_target_length=48 > "$work/padded_vocab.log" 2>&1 ||
  { echo "FAIL: decode with a vocabulary past the tokenizer's:"; tail -5 "$work/padded_vocab.log"; exit 1; }
grep -q "generated ids past the tokenizer's are shown as <id N>" "$work/padded_vocab.log" &&
  grep -q "^Input .* -> .*<id [0-9]*>" "$work/padded_vocab.log" ||
  { echo "FAIL: no warning or no <id N> in the output"; tail -5 "$work/padded_vocab.log"; exit 1; }
echo "inference_cli: OK"
