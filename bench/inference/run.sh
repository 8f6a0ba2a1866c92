#!/usr/bin/env bash
# Inference benchmark on 2 ranks vs 1 (one per core, one OpenMP/BLAS thread each), fp32 unless
# said otherwise, every figure from the user-facing `maxctx bench-inference` (MaxText's
# inference_microbenchmark keys and JSON):
#   - AR step at a 32K-token context, sequence-sharded KV (maxctx-small): ca = 2 vs ca = 1;
#   - prefill of 8K tokens (maxctx-small): ca = 2 vs ca = 1, strong-scaling efficiency;
#   - batch-1 decode of maxctx-100m (425 MB of fp32 weights, past the L3): int8 weights vs fp32,
#     and bf16 weights, activations and KV cache vs fp32;
#   - AR bandwidth as a fraction of the DRAM read bandwidth measured here by dram_bandwidth.
# The global batch is one sequence on both meshes (per_device_batch_size 1 and 0.5).
# combine.py merges the pieces into BUILD_DIR/bench/inference.json. About 4 minutes.
set -euo pipefail
build_dir=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
config="$here/../../configs/inference.yml"
pieces="$build_dir/bench/inference_pieces"
rm -rf "$pieces"
mkdir -p "$pieces"
# shellcheck source=bench/common.sh
source "$here/../common.sh"

bench() {  # bench <ranks> <piece name> [key=value ...]
  local np=$1 name=$2
  shift 2
  local batch=1
  [[ $np == 2 ]] && batch=0.5
  echo "-- $name: $np rank(s): $*"
  cut -d' ' -f1 /proc/loadavg > "$pieces/$name.load"
  "${mpi[@]}" -np "$np" "$build_dir/maxctx" bench-inference "$config" \
    per_device_batch_size="$batch" inference_microbenchmark_log_file_path="$pieces/$name.json" \
    "$@" > "$pieces/$name.log" 2>&1 || { tail -20 "$pieces/$name.log"; exit 1; }
  grep -E "step average time|TFLOPs/sec|bandwidth per device" "$pieces/$name.log" || true
}

for np in 1 2; do
  "${mpi[@]}" -np "$np" "$build_dir/bench/dram_bandwidth" --out "$pieces/dram_np$np.json"
done

# The AR step is a few milliseconds and this machine's memory bandwidth moves with its
# neighbours: five rounds, ca = 1 and ca = 2 alternating, and combine.py takes each one's
# median round.
long=(model_name=maxctx-small max_prefill_predict_length=32768 max_target_length=32896
  inference_microbenchmark_prefill_lengths=32768 inference_microbenchmark_stages=generate
  inference_microbenchmark_loop_iters=100 context_autoregressive_decode=sequence)
for round in 1 2 3 4 5; do
  bench 1 "ar32k_ca1_round$round" "${long[@]}"
  bench 2 "ar32k_ca2_round$round" "${long[@]}"
done

prefill=(model_name=maxctx-small max_prefill_predict_length=8192 max_target_length=8256
  inference_microbenchmark_prefill_lengths=8192 inference_microbenchmark_stages=prefill
  inference_microbenchmark_loop_iters=3)
bench 1 prefill8k_ca1 "${prefill[@]}"
bench 2 prefill8k_ca2 "${prefill[@]}"

decode=(model_name=maxctx-100m max_prefill_predict_length=64 max_target_length=256
  inference_microbenchmark_prefill_lengths=64 inference_microbenchmark_stages=generate
  inference_microbenchmark_loop_iters=40)
# fp32 and bf16 (bf16 weights, activations and KV cache, MaxText's inference default: half the
# bytes) alternate over three rounds, as the AR step does, and combine.py takes each one's median
# round: a single pair moved between 1.70x and 1.82x with the neighbours.
for round in 1 2 3; do
  bench 1 "decode_fp32_round$round" "${decode[@]}"
  bench 1 "decode_bf16_round$round" "${decode[@]}" dtype=bfloat16 weight_dtype=bfloat16
done
bench 1 decode_int8 "${decode[@]}" quantization=int8

/usr/bin/python3 "$here/combine.py" "$pieces" "$build_dir/bench/inference.json"
