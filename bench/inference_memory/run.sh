#!/usr/bin/env bash
# Inference memory per rank (issue #31): a small Mixtral with int8 weights and an int8 KV cache
# (bench/moe_inference's shape: E 512, 8 experts of F 1024, 2 per token, 4 layers, GQA 8/4 heads
# of 64, V 32000; random init) under `maxctx bench-inference` on context_autoregressive = 1, 2, 4:
#   - the weight bytes each rank holds (the engine's log: float tensors + packed int8) against
#     the ca = 1 rank's total / ca. Split over ca: the experts (over expert x ca), the vocabulary
#     (embedding and head rows) and the attention projections' rows; replicated: norms, router.
#   - a 4K-token prompt's prefill with and without use_chunked_prefill (prefill_chunk_size=256
#     tokens per rank: the prompt in chunks of tokens, each attending to the earlier chunks'
#     cache rows): the workspace measured on rank 0 (the pages of the forward's buffers the
#     prefill wrote, Allocator::resident_bytes, plus the prefill attention's staging as held)
#     against `maxctx plan`'s count of the same (workspace less the logit rows, and the prefill
#     attention staging), and peak RSS per rank (/usr/bin/time's maximum resident set). The same
#     for 8 slots of 512 tokens on one rank, where a pass holds whole slots.
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
# A dense model of the same widths (MLP F 4096 instead of 8 experts of 1024) with int8 weights:
# what a rank holds on ca = 1, 2, 4. Split over ca: the vocabulary, the attention and the MLP
# projections' rows; replicated: the norms.
dense=(model_name=maxctx-tiny override_model_config=true base_emb_dim=512 base_mlp_dim=4096
  base_num_query_heads=8 base_num_kv_heads=4 head_dim=64 base_num_decoder_layers=4
  vocab_size=32000 quantization=int8 quantize_kvcache=true inference_microbenchmark_stages=prefill
  inference_microbenchmark_loop_iters=1 max_prefill_predict_length=256 max_target_length=320
  per_device_batch_size=1 inference_microbenchmark_prefill_lengths=256)
model=("${dense[@]}")
for np in 1 2 4; do
  run "$np" "dense_ca$np"
done

python3 - "$pieces" "$build_dir/bench/inference_memory.json" <<'PY'
import glob, json, os, re, sys
pieces, out = sys.argv[1], sys.argv[2]

def piece(name):
    log = open(os.path.join(pieces, name + ".log")).read()
    held = int(re.search(r"Weights held per device: (\d+) bytes", log).group(1))
    work = re.search(r"Prefill workspace per device: (\d+) bytes \(forward buffers resident "
                     r"(\d+), attention staging (\d+)\)", log)
    rss = [int(open(p).read().split()[-1]) * 1024
           for p in sorted(glob.glob(os.path.join(pieces, name + ".rss.*")))]
    plan = json.load(open(os.path.join(pieces, name + ".plan.json")))
    memory = plan["memory_per_rank_bytes"]
    # The plan's workspace holds the forward's buffers and the f32 logits of every slot and of
    # the expert group's slots (one group here): the buffers alone are the measured ones.
    logits = 2 * plan["slots"] * 32000 * 4
    planned = memory["workspace"] - logits + memory["prefill_attention_staging"]
    return {"weight_bytes_per_rank": held, "peak_rss_bytes_per_rank": rss,
            "prefill_workspace_measured_bytes": int(work.group(1)),
            "prefill_forward_buffers_resident_bytes": int(work.group(2)),
            "prefill_attention_staging_bytes": int(work.group(3)),
            "prefill_workspace_planned_bytes": planned,
            "measured_over_planned": int(work.group(1)) / planned,
            "plan_memory_per_rank_bytes": memory}

r = {"model": "mixtral-style E512 X8 F1024 L4 V32000, int8 weights + KV, 4096-token prompt",
     "split_over_ca": ["experts (expert x ca)", "embedding rows", "lm_head rows",
                       "q/k/v/o projection rows (int8)"],
     "replicated": ["norms", "router"]}
total = None
for np in (1, 2, 4):
    whole, chunked = piece(f"ca{np}"), piece(f"ca{np}_chunked")
    total = total or whole["weight_bytes_per_rank"]
    r[f"ca{np}"] = {"whole_prefill": whole, "chunked_prefill": chunked,
                    "weight_bytes_vs_total_over_ca":
                        whole["weight_bytes_per_rank"] / (total / np),
                    "chunked_workspace_vs_whole":
                        chunked["prefill_workspace_measured_bytes"] /
                        whole["prefill_workspace_measured_bytes"]}
r["8_slots_x_512_tokens_ca1"] = {"whole_prefill": piece("slots_whole"),
                                 "chunked_prefill": piece("slots_chunked")}
dense_total = piece("dense_ca1")["weight_bytes_per_rank"]
r["dense"] = {"model": "llama-style E512 F4096 L4 V32000 (same widths), int8 weights",
              "split_over_ca": ["embedding rows", "lm_head rows", "q/k/v/o projection rows (int8)",
                                "gate/up/down projection rows (int8)"],
              "replicated": ["norms"]}
for np in (1, 2, 4):
    held = piece(f"dense_ca{np}")["weight_bytes_per_rank"]
    r["dense"][f"ca{np}"] = {"weight_bytes_per_rank": held,
                             "weight_bytes_vs_total_over_ca": held / (dense_total / np)}
json.dump(r, open(out, "w"), indent=1)
print(json.dumps({f"dense_ca{n}": r["dense"][f"ca{n}"]["weight_bytes_vs_total_over_ca"]
                  for n in (1, 2, 4)}))
print(json.dumps({k: [v.get("weight_bytes_vs_total_over_ca"),
                      v["chunked_prefill"]["prefill_workspace_measured_bytes"],
                      v["chunked_prefill"]["prefill_workspace_planned_bytes"],
                      v["whole_prefill"]["prefill_workspace_measured_bytes"]]
                  for k, v in r.items() if isinstance(v, dict) and "whole_prefill" in v}))
PY
