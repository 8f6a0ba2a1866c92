#!/usr/bin/env bash
# Writes tests/fixtures/tokenizer/: a small SentencePiece model trained with Debian's spm_train
# (package sentencepiece) on the project's own documentation, and the ids Debian's spm_encode
# gives for a few sentences (the C++ wrapper must give the same).
#
#   tools/reference/make_tokenizer_fixture.sh                   # retrain from the committed corpus
#   tools/reference/make_tokenizer_fixture.sh --refresh-corpus  # first re-snapshot the docs
#
# The corpus is a committed snapshot (corpus.txt: README.md + docs/architecture.md as they were),
# so the model does not change when the docs do. Training options follow Llama's tokenizer: BPE,
# byte fallback (any UTF-8 text round-trips), digits split, identity normalisation, whitespace
# kept as it is; unk/bos/eos = 0/1/2 as in Llama. One thread, so the result is deterministic.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
out=$root/tests/fixtures/tokenizer
mkdir -p "$out"
if [[ "${1:-}" == "--refresh-corpus" || ! -f $out/corpus.txt ]]; then
  cat "$root/README.md" "$root/docs/architecture.md" > "$out/corpus.txt"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The model records its input and prefix paths: train in the temp dir with fixed relative names
# so that the bytes do not depend on where the script ran.
cp "$out/corpus.txt" "$tmp/corpus.txt"
cd "$tmp"
spm_train --input=corpus.txt --model_prefix=docs_spm --vocab_size=1000 \
  --model_type=bpe --byte_fallback=true --split_digits=true \
  --normalization_rule_name=identity --remove_extra_whitespaces=false \
  --allow_whitespace_only_pieces=true --character_coverage=1.0 \
  --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=-1 \
  --num_threads=1 --max_sentence_length=100000 --minloglevel=2
cp docs_spm.model "$out/docs_spm.model"
cd "$root"

# One sentence per line; spm_encode writes one line of ids per line (no BOS: it adds none).
spm_encode --model="$out/docs_spm.model" --output_format=id < "$out/sentences.txt" \
  > "$out/sentences_ids.txt"
echo "wrote $out/docs_spm.model ($(stat -c %s "$out/docs_spm.model") bytes) and sentences_ids.txt"
