#!/usr/bin/env bash
# Issue #34 N5 and N10: every file maxctx reads, given as a FIFO, as /dev/zero behind a symlink,
# as a directory or as a symlink loop, is refused with one "maxctx: error" line naming it, on 2
# ranks, within a few seconds (a FIFO used to hang every rank forever, /dev/zero was read for
# gigabytes). The refusal is core/input_file.h's. Last, a vocab.bpe that is not UTF-8.
#   special_files.sh <build dir> <source dir>
set -euo pipefail
src=$2
source "$src/tests/support/expect_failure.sh"
failure_test_setup "$1" io/special_files
fixtures=$src/tests/fixtures
limit=5  # seconds: mpirun's start on 2 oversubscribed ranks is most of it

# A tiny byte-level tokenizer.json and GPT-2 encoder.json (the 256 byte tokens and an EOS).
python3 - "$work" << 'PY'
import json, sys
bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
vocab = {chr(c): i for i, c in enumerate(cs)}
vocab["<|endoftext|>"] = 256
model = {"model": {"type": "BPE", "vocab": vocab, "merges": []},
         "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
         "added_tokens": [{"content": "<|endoftext|>", "id": 256, "special": True}]}
json.dump(model, open(sys.argv[1] + "/tokenizer.json", "w"))
json.dump(vocab, open(sys.argv[1] + "/encoder.json", "w"))
PY

decode_any=(decode "$src/configs/inference.yml" max_prefill_predict_length=16
  max_target_length=32 per_device_batch_size=1)
decode=("${decode_any[@]}" prompt="1 2 3")
text_decode=("${decode_any[@]}" model_name=maxctx-tiny override_model_config=true vocab_size=512
  prompt="hello")

# special <name> <kind> <path to replace>: makes <path> a FIFO, a symlink to /dev/zero, a
# directory or a symlink loop.
special() {
  local kind=$1 path=$2
  rm -rf "$path"
  case $kind in
    fifo) mkfifo "$path" ;;
    zero) ln -s /dev/zero "$path" ;;
    dir) mkdir "$path" ;;
    loop) ln -s "$(basename "$path")" "$path" ;;
  esac
}
declare -A expected=([fifo]="is a FIFO" [zero]="is a character device" [dir]="is a directory"
  [loop]="Too many levels of symbolic links")

for kind in fifo zero dir loop; do
  part=${expected[$kind]}
  # A Hugging Face checkpoint's config.json and model.safetensors.index.json.
  model=$work/$kind/model
  mkdir -p "$model"
  cp "$fixtures/tiny_llama_two_files/"* "$model/"
  special "$kind" "$model/config.json"
  expect_failure "$work/$kind-config_json.log" $limit "$part" \
    "${mpirun[@]}" "$maxctx" "${decode[@]}" load_parameters_path="$model"
  rm -rf "$model/config.json"  # (cp would write into a FIFO and wait)
  cp "$fixtures/tiny_llama_two_files/config.json" "$model/"
  special "$kind" "$model/model.safetensors.index.json"
  expect_failure "$work/$kind-index_json.log" $limit "$part" \
    "${mpirun[@]}" "$maxctx" "${decode[@]}" load_parameters_path="$model"

  # Tokenizers: tokenizer.json, tokenizer.model (in a directory), tokenizer_config.json beside a
  # good tokenizer.json, vocab.bpe beside a good encoder.json.
  tok=$work/$kind/tokenizer
  mkdir -p "$tok/json" "$tok/model" "$tok/config" "$tok/gpt2"
  special "$kind" "$tok/json/tokenizer.json"
  # (a directory is a tokenizer_path to look into)
  expect_failure "$work/$kind-tokenizer_json.log" $limit \
    "$([[ $kind == dir ]] && echo "the directory has no tokenizer.model" || echo "$part")" \
    "${mpirun[@]}" "$maxctx" "${text_decode[@]}" tokenizer_path="$tok/json/tokenizer.json"
  special "$kind" "$tok/model/tokenizer.model"
  expect_failure "$work/$kind-tokenizer_model.log" $limit "$part" \
    "${mpirun[@]}" "$maxctx" "${text_decode[@]}" tokenizer_path="$tok/model"
  cp "$work/tokenizer.json" "$tok/config/"
  special "$kind" "$tok/config/tokenizer_config.json"
  expect_failure "$work/$kind-tokenizer_config.log" $limit "$part" \
    "${mpirun[@]}" "$maxctx" "${text_decode[@]}" tokenizer_path="$tok/config/tokenizer.json"
  cp "$work/encoder.json" "$tok/gpt2/"
  special "$kind" "$tok/gpt2/vocab.bpe"
  expect_failure "$work/$kind-vocab_bpe.log" $limit "$part" \
    "${mpirun[@]}" "$maxctx" "${text_decode[@]}" tokenizer_path="$tok/gpt2/encoder.json"

  # A GGUF checkpoint (load_parameters_path=<file.gguf>) and `maxctx tokenize --jsonl`'s file.
  if [[ $kind != dir ]]; then
    special "$kind" "$work/$kind/model.gguf"
    expect_failure "$work/$kind-gguf.log" $limit "$part" \
      "${mpirun[@]}" "$maxctx" "${decode[@]}" load_parameters_path="$work/$kind/model.gguf" \
      base_output_directory="$work/$kind/runs"
    special "$kind" "$work/$kind/lines.jsonl"
    expect_failure "$work/$kind-tokenize_jsonl.log" $limit "$part" \
      "$maxctx" tokenize "$work/tokenizer.json" --jsonl "$work/$kind/lines.jsonl"
  fi

  # A golden-logits file.
  special "$kind" "$work/$kind/golden.jsonl"
  expect_failure "$work/$kind-golden.log" $limit "$part" \
    "${mpirun[@]}" "$maxctx" check-logits "$src/configs/base.yml" \
    load_parameters_path="$fixtures/tiny_llama" golden_logits_path="$work/$kind/golden.jsonl"

  # A data file of dataset_type=hf (a directory is not a data file the glob keeps: not here).
  if [[ $kind != dir ]]; then
    special "$kind" "$work/$kind/train.jsonl"
    expect_failure "$work/$kind-data_file.log" $limit "$part" \
      "${mpirun[@]}" "$maxctx" train "$src/configs/base.yml" model_name=maxctx-tiny \
      override_model_config=true vocab_size=512 max_target_length=64 steps=1 \
      per_device_batch_size=1 ici_fsdp_parallelism=1 ici_data_parallelism=2 \
      enable_checkpointing=false dataset_type=hf hf_path=json \
      hf_train_files="$work/$kind/train.jsonl" tokenizer_path="$work/tokenizer.json" \
      base_output_directory="$work/$kind/runs" run_name=data
  fi
done

# A checkpoint's state.json (the run's own resume).
train=(train "$src/configs/base.yml" model_name=maxctx-tiny max_target_length=64
  per_device_batch_size=1 ici_fsdp_parallelism=1 ici_data_parallelism=2 checkpoint_period=2
  base_output_directory="$work/runs" run_name=state)
"${mpirun[@]}" "$maxctx" "${train[@]}" steps=2 > "$work/state_setup.log" 2>&1 ||
  { echo "FAIL: setup run"; tail "$work/state_setup.log"; exit 1; }
for kind in fifo zero dir loop; do
  special "$kind" "$work/runs/state/checkpoints/2/state.json"
  expect_failure "$work/$kind-state_json.log" $limit "${expected[$kind]}" \
    "${mpirun[@]}" "$maxctx" "${train[@]}" steps=4
done
# N10: a GPT-2 vocab.bpe with bytes that are not UTF-8 (quoting it in the error threw a JSON
# library exception, and every rank ended through MPI_Abort).
mkdir -p "$work/utf8"
cp "$work/encoder.json" "$work/utf8/"
printf '#version: 0.2\n\xff\xfe a\n' > "$work/utf8/vocab.bpe"
expect_failure "$work/invalid_utf8.log" $limit "which is not in the vocabulary" \
  "${mpirun[@]}" "$maxctx" "${text_decode[@]}" tokenizer_path="$work/utf8/encoder.json"
echo "special_files: OK"
