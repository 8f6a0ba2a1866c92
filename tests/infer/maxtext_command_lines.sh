#!/usr/bin/env bash
# The two MaxText command lines of issue #17 as a user runs them, scaled down only in model size
# (model_name=mixtral-tiny), lengths and ranks, every other key as given:
#   1. training: MaxText's Mixtral 8x7B line with ici_fsdp_parallelism=2 on 2 ranks and =4 on 4
#      (MaxText: 4); 3 steps must run with a finite loss and leave a checkpoint;
#   2. `maxctx export ... quantization=int8` of that checkpoint (MaxText's
#      save_quantized_params_path step), then the inference microbenchmark line (MaxText: 8x22B,
#      ici_context_autoregressive_parallelism=8) on 2 and 4 ranks with the quantized checkpoint
#      (checkpoint_is_quantized=True) and prefill lengths 64,128; its JSON must hold both
#      prefill lengths and the autoregressive step.
# MaxText's profiler keys are in both lines (profiler=xplane: each run leaves its trace.json); the
# training line gives profiler=xplane twice, as the seed's line does (MaxText: the later value
# wins). The inference line's tokenizer_path=assets/tokenizer.mistral-v3 resolves from the fetched
# assets ($MAXCTX_ASSETS, tools/reference/fetch_assets.sh); without them the fixture's tokenizer
# stands in, and the script says so.
#   maxtext_command_lines.sh <build dir> <source dir>
set -euo pipefail
build=$1
src=$2
maxctx=$build/maxctx
work=$build/tests/infer/maxtext_lines
tokenizer=$src/tests/fixtures/tokenizer/docs_spm.model
rm -rf "$work"
mkdir -p "$work"
mpirun=(mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1)

for np in 2 4; do
  run=train_np$np
  "${mpirun[@]}" -np "$np" "$maxctx" train "$src/configs/base.yml" \
    per_device_batch_size=1 steps=3 max_target_length=128 tokenizer_path="$tokenizer" \
    dtype=bfloat16 weight_dtype=bfloat16 sparse_matmul=False capacity_factor=1.25 \
    dataset_type=synthetic profiler=xplane ici_fsdp_parallelism="$np" attention=flash \
    model_name=mixtral-tiny \
    run_name="$run" base_output_directory="$work" sa_block_q=128 sa_block_kv=128 \
    sa_block_kv_compute=128 sa_block_q_dkv=128 sa_block_kv_dkv=128 sa_block_kv_dkv_compute=128 \
    sa_block_q_dq=128 sa_block_kv_dq=128 profiler=xplane skip_first_n_steps_for_profiler=1 \
    > "$work/$run.log" 2>&1 ||
    { echo "FAIL: the training line on $np ranks:"; tail -5 "$work/$run.log"; exit 1; }
  python3 - "$work/$run/metrics.jsonl" <<'PY'
import json, math, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
losses = [r["learning/loss"] for r in rows]
assert len(losses) == 3 and all(math.isfinite(l) and 0 < l < 10 for l in losses), losses
print("training line losses:", ", ".join(f"{l:.4f}" for l in losses))
PY
  [[ -f "$work/$run/checkpoints/3/index.json" ]] || { echo "FAIL: no checkpoint"; exit 1; }
  [[ -s "$work/$run/trace.json" ]] || { echo "FAIL: profiler=xplane left no trace"; exit 1; }
done

"$maxctx" export "$src/configs/base.yml" model_name=mixtral-tiny \
  load_parameters_path="$work/train_np2" base_output_directory="$work/mixtral_int8" \
  quantization=int8 > "$work/export.log" 2>&1 ||
  { echo "FAIL: export quantization=int8:"; tail -5 "$work/export.log"; exit 1; }

inference_tokenizer=assets/tokenizer.mistral-v3
assets=${MAXCTX_ASSETS:-$HOME/.cache/maxctx/assets}
if [[ ! -f "$assets/tokenizers/tokenizer.mistral-v3" ]]; then
  echo "NOTE: $assets has no tokenizer.mistral-v3 (tools/reference/fetch_assets.sh); the" \
    "inference line runs with the fixture's tokenizer instead"
  inference_tokenizer=$tokenizer
fi

# ca ranks x expert ranks: the line as given (ca 2 and 4), and once with ici_expert_parallelism=2
# added (MaxText's inference use of the axis: slots and experts split over it).
for mesh in 2x1 4x1 2x2; do
  ca=${mesh%x*}
  expert=${mesh#*x}
  run=bench_ca${ca}_expert$expert
  "${mpirun[@]}" -np $((ca * expert)) "$maxctx" bench-inference "$src/configs/inference.yml" \
    max_prefill_predict_length=128 max_target_length=256 model_name=mixtral-tiny \
    ici_fsdp_parallelism=1 ici_autoregressive_parallelism=1 ici_expert_parallelism="$expert" \
    ici_context_autoregressive_parallelism="$ca" scan_layers=False per_device_batch_size=1 \
    attention=dot_product megablox=False quantization=int8 checkpoint_is_quantized=True \
    quantize_kvcache=True capacity_factor=1 tokenizer_path="$inference_tokenizer" \
    compute_axis_order=0,2,1,3 ar_cache_axis_order=0,2,1,3 \
    inference_microbenchmark_prefill_lengths=64,128 base_output_directory="$work" \
    run_name="$run" sparse_matmul=False model_call_mode=inference \
    enable_jax_profiler=False profiler=xplane \
    load_parameters_path="$work/mixtral_int8" inference_microbenchmark_loop_iters=2 \
    inference_microbenchmark_log_file_path="$work/logs/$run.json" > "$work/$run.log" 2>&1 ||
    { echo "FAIL: the inference line on $mesh (ca x expert) ranks:"; tail -5 "$work/$run.log"; exit 1; }
  [[ -s "$work/$run/trace.json" ]] || { echo "FAIL: bench-inference left no trace"; exit 1; }
  python3 - "$work/logs/$run.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert set(r["prefill"]) == {"64", "128"}, r["prefill"].keys()
assert r["autoregressive"]["step_in_ms"] > 0, r["autoregressive"]
print(sys.argv[1].rsplit("/", 1)[1], "prefill 64/128 ms:",
      r["prefill"]["64"]["time_in_ms"], r["prefill"]["128"]["time_in_ms"],
      "AR step ms:", r["autoregressive"]["step_in_ms"])
PY
done

# The key that only 1 can honour is refused with the reason.
if "$maxctx" bench-inference "$src/configs/inference.yml" model_name=mixtral-tiny \
  ici_autoregressive_parallelism=2 > "$work/ar.log" 2>&1; then
  echo "FAIL: ici_autoregressive_parallelism=2 was accepted"; exit 1
fi
grep -q "MaxText's autoregressive axis shards attention heads" "$work/ar.log" ||
  { echo "FAIL: ici_autoregressive_parallelism=2:"; cat "$work/ar.log"; exit 1; }
echo "PASS"
