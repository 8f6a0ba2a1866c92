#!/usr/bin/env bash
# Mixtral inference with int8 expert weights and an int8 KV cache (issue #17): `maxctx
# bench-inference` (MaxText's inference_microbenchmark JSON) at context_autoregressive = 1 and 2,
# one rank per core, one OpenMP/BLAS thread each, on a small Mixtral (mixtral-tiny's shape widened:
# E 512, 8 experts of F 1024, 2 per token, 4 layers, GQA 8/4 heads of 64; random init):
#   - the AR step at a 8K-token context (sequence-sharded cache; the experts split over the
#     axis, each rank running its 4 experts' rows of the step's tokens), ca = 2 vs ca = 1;
#   - a 4K-token prefill, ca = 2 vs ca = 1 (strong scaling).
# Three rounds with ca = 1 and ca = 2 alternating; the JSON takes each figure's median round and
# the ratios of those medians. Writes BUILD_DIR/bench/moe_inference.json. About 2 minutes.
set -euo pipefail
build_dir=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
config="$here/../../configs/inference.yml"
pieces="$build_dir/bench/moe_inference_pieces"
rm -rf "$pieces"
mkdir -p "$pieces"
# shellcheck source=bench/common.sh
source "$here/../common.sh"
model=(model_name=mixtral-tiny override_model_config=true base_emb_dim=512 base_mlp_dim=1024
  base_num_query_heads=8 base_num_kv_heads=4 head_dim=64 base_num_decoder_layers=4
  num_experts=8 num_experts_per_tok=2 vocab_size=32000 quantization=int8 quantize_kvcache=true)

bench() {  # bench <ranks> <piece name> [key=value ...]
  local np=$1 name=$2
  shift 2
  local batch=1
  [[ $np == 2 ]] && batch=0.5
  "${mpi[@]}" -np "$np" "$build_dir/maxctx" bench-inference "$config" "${model[@]}" \
    per_device_batch_size="$batch" ici_context_autoregressive_parallelism="$np" \
    inference_microbenchmark_log_file_path="$pieces/$name.json" "$@" > "$pieces/$name.log" 2>&1 ||
    { tail -20 "$pieces/$name.log"; exit 1; }
}

ar=(max_prefill_predict_length=8192 max_target_length=8256
  inference_microbenchmark_prefill_lengths=8192 inference_microbenchmark_stages=generate
  inference_microbenchmark_loop_iters=40 context_autoregressive_decode=sequence)
prefill=(max_prefill_predict_length=4096 max_target_length=4160
  inference_microbenchmark_prefill_lengths=4096 inference_microbenchmark_stages=prefill
  inference_microbenchmark_loop_iters=3)
for round in 1 2 3; do
  for np in 1 2; do
    echo "-- round $round, ca = $np"
    bench "$np" "ar8k_ca${np}_round$round" "${ar[@]}"
    bench "$np" "prefill4k_ca${np}_round$round" "${prefill[@]}"
  done
done

/usr/bin/python3 - "$pieces" "$build_dir/bench/moe_inference.json" <<'PY'
import json, os, statistics, sys
pieces, out = sys.argv[1], sys.argv[2]
def piece(name):
    with open(os.path.join(pieces, name + ".json")) as f:
        return json.load(f)
def median(values):
    return statistics.median(values)
ar = {ca: [piece(f"ar8k_ca{ca}_round{r}")["autoregressive"]["step_in_ms"] for r in (1, 2, 3)]
      for ca in (1, 2)}
pre = {ca: [piece(f"prefill4k_ca{ca}_round{r}")["prefill"]["4096"]["time_in_ms"] for r in (1, 2, 3)]
       for ca in (1, 2)}
sizes = piece("ar8k_ca1_round1")["sizes"]
result = {
    "model": "Mixtral E512 F1024, 8 experts (2 per token), 4 layers, int8 weights and KV cache",
    "sizes": sizes,
    "ar_step_8k": {
        "step_in_ms_ca1_rounds": ar[1], "step_in_ms_ca2_rounds": ar[2],
        "step_in_ms_ca1": median(ar[1]), "step_in_ms_ca2": median(ar[2]),
        "bytes_per_device_per_step_ca1":
            piece("ar8k_ca1_round1")["autoregressive"]["bytes_per_device_per_step"],
        "bytes_per_device_per_step_ca2":
            piece("ar8k_ca2_round1")["autoregressive"]["bytes_per_device_per_step"],
        "speedup_ca2_vs_ca1": median(ar[1]) / median(ar[2]),
    },
    "prefill_4k": {
        "time_in_ms_ca1_rounds": pre[1], "time_in_ms_ca2_rounds": pre[2],
        "time_in_ms_ca1": median(pre[1]), "time_in_ms_ca2": median(pre[2]),
        "strong_scaling_efficiency_ca2": median(pre[1]) / (2 * median(pre[2])),
    },
}
with open(out, "w") as f:
    json.dump(result, f, indent=2)
print(json.dumps(result, indent=2))
PY
