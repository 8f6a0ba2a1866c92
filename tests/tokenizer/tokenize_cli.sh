#!/usr/bin/env bash
# `maxctx tokenize` as a user runs it: text arguments, standard input, a JSON Lines file, --bos
# and --eos, --decode; its ids equal the tokenizers golden of the same text
# (tests/fixtures/tokenizer_conformance), and bad input is one clear error.
#   tokenize_cli.sh <build dir> <source dir>
set -euo pipefail
maxctx=$1/maxctx
fixtures=$2/tests/fixtures/tokenizer_conformance
tok=$fixtures/qwen_nfc.tokenizer.json
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Corpus text 0 and 11 (numbers), as arguments and from standard input: the golden ids.
python3 - "$fixtures" > "$work/texts.txt" <<'PY'
import json, sys
texts = json.load(open(sys.argv[1] + "/corpus.json"))["texts"]
print(texts[0]); print(texts[11])
PY
mapfile -t texts < "$work/texts.txt"
"$maxctx" tokenize "$tok" "${texts[@]}" > "$work/args.jsonl"
"$maxctx" tokenize "$tok" < "$work/texts.txt" > "$work/stdin.jsonl"
cmp "$work/args.jsonl" "$work/stdin.jsonl" || { echo "FAIL: arguments and stdin differ"; exit 1; }
printf '{"text": "%s"}\n{"body": 1, "text": "%s"}\n' "${texts[0]}" "${texts[1]}" > "$work/in.jsonl"
"$maxctx" tokenize "$tok" --bos --eos --jsonl "$work/in.jsonl" > "$work/file.jsonl"
ids_0_11=$(python3 - "$fixtures" "$work/args.jsonl" "$work/file.jsonl" <<'PY'
import json, sys
golden = json.load(open(sys.argv[1] + "/goldens/qwen_nfc.json"))["ids"]
texts = json.load(open(sys.argv[1] + "/corpus.json"))["texts"]
args = [json.loads(l) for l in open(sys.argv[2])]
file = [json.loads(l) for l in open(sys.argv[3])]
for got, i in zip(args, (0, 11)):
    assert got["ids"] == golden[i], (i, got["ids"][:10], golden[i][:10])
    assert got["decoded"] == texts[i] == got["text"], got
# --bos --eos: <|endoftext|> is this tokenizer's BOS and EOS (by name); decoding drops them.
eos = 0
assert [l["line"] for l in file] == [1, 2], file
for got, i in zip(file, (0, 11)):
    assert got["ids"] == [eos] + golden[i] + [eos], got["ids"][:5]
    assert got["decoded"] == texts[i]
print(" ".join(map(str, golden[0])))
PY
)
[[ $("$maxctx" tokenize "$tok" --decode "$ids_0_11" | python3 -c 'import json,sys; print(json.load(sys.stdin)["text"])') == "${texts[0]}" ]] ||
  { echo "FAIL: --decode"; exit 1; }

expect_error() {
  local fragment=$1
  shift
  if "$maxctx" tokenize "$@" > "$work/error.log" 2>&1; then
    echo "FAIL: tokenize $* succeeded"; exit 1
  fi
  grep -qF -- "$fragment" "$work/error.log" || { echo "FAIL: tokenize $*:"; cat "$work/error.log"; exit 1; }
}
expect_error "not a token id" "$tok" --decode "1 x 2"
expect_error "no tokenizer given" --bos
expect_error "unknown option '--bos-token'" "$tok" --bos-token
printf '{"body": "no text"}\n' > "$work/bad.jsonl"
expect_error "bad.jsonl:1: not a JSON object with a string field 'text'" "$tok" --jsonl "$work/bad.jsonl"
echo "PASS"
