#!/usr/bin/env bash
# Inference memory per rank (issue #31): a small Mixtral with int8 weights and an int8 KV cache
# (bench/moe_inference's shape: E 512, 8 experts of F 1024, 2 per token, 4 layers, GQA 8/4 heads
# of 64, V 32000; random init) under `maxctx bench-inference` on context_autoregressive = 1, 2, 4:
#   - the weight bytes each rank holds (the engine's log: float tensors + packed int8) against
#     the ca = 1 rank's total / ca. Split over ca: the experts (over expert x ca) and the
#     vocabulary (embedding and head rows); replicated: attention projections, norms, router.
#   - peak RSS per rank (/usr/bin/time's maximum resident set) of a 4K-token prompt's prefill,
#     with and without use_chunked_prefill (prefill_chunk_size=256), and the planned workspace
#     bytes of each (`maxctx plan`, which counts the engine's buffers); a pass holds whole slots,
#     so one 4K prompt's share (4096/ca rows) is the floor. The same for 8 slots of 512 tokens
#     on one rank, where the chunk bounds the workspace.
# Writes BUILD_DIR/bench/inference_memory.json. About five minutes.
set -euo pipefail
build_dir=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
config="$here/../../configs/inference.yml"
pieces="$build_dir/bench/inference_memory_pieces"
rm -rf "$pieces"
mkdir -p "$pieces"
# shellcheck source=bench/common.sh
source "$here/../common.sh"
model=(model_name=mixtral-tiny override_model_config=true base_emb_dim=512 base_mlp_dim=1024
  base_num_query_heads=8 base_num_kv_heads=4 head_dim=64 base_num_decoder_layers=4
  num_experts=8 num_experts_per_tok=2 vocab_size=32000 quantization=int8 quantize_kvcache=true
  inference_microbenchmark_stages=prefill inference_microbenchmark_loop_iters=1)
long=(max_prefill_predict_length=4096 max_target_length=4160 per_device_batch_size=1
  inference_microbenchmark_prefill_lengths=4096)

run() {  # run <ranks> <piece name> [key=value ...]
  local np=$1 name=$2
  shift 2
  "${mpi[@]}" -np "$np" bash -c '/usr/bin/time -f %M -o "$0.rss.${OMPI_COMM_WORLD_RANK}" "$@"' \
    "$pieces/$name" "$build_dir/maxctx" bench-inference "$config" "${model[@]}" \
    ici_context_autoregressive_parallelism="$np" \
    inference_microbenchmark_log_file_path="$pieces/$name.json" "$@" > "$pieces/$name.log" 2>&1 ||
    { tail -20 "$pieces/$name.log"; exit 1; }
  "$build_dir/maxctx" plan "$config" "${model[@]}" ici_context_autoregressive_parallelism="$np" \
    num_devices="$np" mode=inference format=json "$@" > "$pieces/$name.plan.json" \
    2> "$pieces/$name.plan.log" || { tail -5 "$pieces/$name.plan.log"; exit 1; }
}

for np in 1 2 4; do
  run "$np" "ca$np" "${long[@]}" use_chunked_prefill=false
  run "$np" "ca${np}_chunked" "${long[@]}" use_chunked_prefill=true prefill_chunk_size=256
done
# Many slots of short prompts (8 x 512 tokens on one rank), where chunking bounds the workspace
# by the chunk: one 512-token slot per pass instead of all 8.
slots=(per_device_batch_size=8 max_prefill_predict_length=512 max_target_length=576
  inference_microbenchmark_prefill_lengths=512)
run 1 slots_whole "${slots[@]}" use_chunked_prefill=false
run 1 slots_chunked "${slots[@]}" use_chunked_prefill=true prefill_chunk_size=256

python3 - "$pieces" "$build_dir/bench/inference_memory.json" <<'PY'
import glob, json, os, re, sys
pieces, out = sys.argv[1], sys.argv[2]

def piece(name):
    log = open(os.path.join(pieces, name + ".log")).read()
    held = int(re.search(r"Weights held per device: (\d+) bytes", log).group(1))
    rss = [int(open(p).read().split()[-1]) * 1024
           for p in sorted(glob.glob(os.path.join(pieces, name + ".rss.*")))]
    plan = json.load(open(os.path.join(pieces, name + ".plan.json")))
    return {"weight_bytes_per_rank": held, "peak_rss_bytes_per_rank": rss,
            "plan_memory_per_rank_bytes": plan["memory_per_rank_bytes"]}

r = {"model": "mixtral-style E512 X8 F1024 L4 V32000, int8 weights + KV, 4096-token prompt",
     "split_over_ca": ["experts (expert x ca)", "embedding rows", "lm_head rows"],
     "replicated": ["q/k/v/o projections (int8)", "norms", "router"]}
total = None
for np in (1, 2, 4):
    whole, chunked = piece(f"ca{np}"), piece(f"ca{np}_chunked")
    total = total or whole["weight_bytes_per_rank"]
    r[f"ca{np}"] = {"whole_prefill": whole, "chunked_prefill": chunked,
                    "weight_bytes_vs_total_over_ca":
                        whole["weight_bytes_per_rank"] / (total / np)}
r["8_slots_x_512_tokens_ca1"] = {"whole_prefill": piece("slots_whole"),
                                 "chunked_prefill": piece("slots_chunked")}
json.dump(r, open(out, "w"), indent=1)
print(json.dumps({k: v.get("weight_bytes_vs_total_over_ca") for k, v in r.items()
                  if isinstance(v, dict) and "whole_prefill" in v}))
PY
