"""Tokenizer conformance goldens: what Hugging Face `tokenizers`, tiktoken and SentencePiece give
for every text of tests/fixtures/tokenizer_conformance/corpus.json.

    V=tools/reference/.venv-tok   # python -m venv $V && $V/bin/pip install tokenizers tiktoken sentencepiece
    $V/bin/python tools/reference/tokenizer_conformance.py --train   # rebuild our own tokenizer files
    $V/bin/python tools/reference/tokenizer_conformance.py           # goldens (assets when fetched)

Two kinds of tokenizer:
  - our own, trained here with `tokenizers` on the project's docs snapshot
    (tests/fixtures/tokenizer/corpus.txt) and committed (--train rewrites them): the pre-tokenizer,
    normalizer and vocabulary shapes users bring: GPT-2 (ByteLevel with its regex), Llama 3
    (Split + ByteLevel, ignore_merges), SmolLM2/StarCoder2 (Digits(individual_digits) +
    ByteLevel, trained without the full byte alphabet, so most bytes have no token and are
    dropped), Qwen (NFC + the Qwen2 split), and a tiktoken rank file of a byte-level vocabulary
    read with MaxText's Llama 3 setup;
  - other projects' files, never committed: the tokenizers in the `maxtext` wheel's assets,
    fetched by tools/reference/fetch_assets.sh into $MAXCTX_ASSETS (default
    ~/.cache/maxctx/assets); their goldens are written when the cache is there.

Each golden (goldens/<name>.json) holds, per corpus text, the ids of `encode(text)` without
BOS/EOS (special tokens in the text recognised as such: tokenizers' default, tiktoken's
allowed_special="all"; SentencePiece has none) and whether decoding them (special tokens
skipped) gives the text back. The oracle is the reference implementation the format belongs to:
`tokenizers` for tokenizer.json, `tiktoken` for rank files, `sentencepiece` for .model files
(what MaxText itself runs for them).
"""

import argparse
import base64
import importlib.metadata
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "tokenizer_conformance")
GOLDENS = os.path.join(FIXTURES, "goldens")
ASSETS = os.environ.get("MAXCTX_ASSETS", os.path.expanduser("~/.cache/maxctx/assets"))

GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3 = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
QWEN2 = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# MaxText's TikTokenTokenizer (input_pipeline/tokenizer.py): 256 special tokens after the ranks.
TIKTOKEN_SPECIALS = (["<|begin_of_text|>", "<|end_of_text|>"] +
                     [f"<|reserved_special_token_{i}|>" for i in range(4)] +
                     ["<|start_header_id|>", "<|end_header_id|>", "<|reserved_special_token_4|>",
                      "<|eot_id|>"] +
                     [f"<|reserved_special_token_{i}|>" for i in range(5, 256 - 5)])

# name -> where the file is: our fixtures, or the fetched assets
OWN = {
    "gpt2_style": "gpt2_style.tokenizer.json",
    "llama3_style": "llama3_style.tokenizer.json",
    "digits_missing_bytes": "digits_missing_bytes.tokenizer.json",
    "qwen_nfc": "qwen_nfc.tokenizer.json",
    "own_tiktoken": "own.tiktoken",
}
FETCHED = {
    "maxtext_qwen3": "tokenizers/qwen3-tokenizer/tokenizer.json",
    "maxtext_llama3_tiktoken": "tokenizers/tokenizer_llama3.tiktoken",
    "maxtext_mistral_v1": "tokenizers/tokenizer.mistral-v1",
    "maxtext_mistral_v3": "tokenizers/tokenizer.mistral-v3",
    "maxtext_llama2": "tokenizers/tokenizer.llama2",
    "maxtext_gemma": "tokenizers/tokenizer.gemma",
    "maxtext_gemma3": "tokenizers/tokenizer.gemma3",
}


def texts():
    with open(os.path.join(FIXTURES, "corpus.json"), encoding="utf-8") as f:
        return json.load(f)["texts"]


def train():
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    with open(os.path.join(ROOT, "tests", "fixtures", "tokenizer", "corpus.txt"), encoding="utf-8") as f:
        docs = f.read().split("\n\n")

    def byte_level_bpe(pre, normalizer=None, full_alphabet=True, vocab_size=800):
        tok = Tokenizer(models.BPE())
        tok.normalizer = normalizer
        tok.pre_tokenizer = pre
        tok.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet() if full_alphabet else []
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=alphabet,
                                      special_tokens=SPECIALS, show_progress=False)
        tok.train_from_iterator(docs, trainer)
        return tok

    split = lambda regex: pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False)
    no_regex = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    made = {
        "gpt2_style": byte_level_bpe(pre_tokenizers.ByteLevel(add_prefix_space=False)),
        "llama3_style": byte_level_bpe(pre_tokenizers.Sequence([split(LLAMA3), no_regex])),
        # SmolLM2's shape: digits alone, and a vocabulary without most single-byte tokens.
        "digits_missing_bytes": byte_level_bpe(
            pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                     pre_tokenizers.ByteLevel(add_prefix_space=False)]),
            full_alphabet=False),
        "qwen_nfc": byte_level_bpe(pre_tokenizers.Sequence([split(QWEN2), no_regex]),
                                   normalizer=normalizers.NFC()),
    }
    for name, tok in made.items():
        data = json.loads(tok.to_str())
        if name == "llama3_style":
            data["model"]["ignore_merges"] = True  # Llama 3's tokenizer.json sets it
        with open(os.path.join(FIXTURES, OWN[name]), "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False, separators=(",", ":"))
        print(f"wrote {OWN[name]}: {tok.get_vocab_size()} tokens")
    # A tiktoken rank file of the GPT-2-style vocabulary: rank = id, raw bytes base64.
    decoder = byte_decoder()
    gpt2 = json.loads(made["gpt2_style"].to_str())["model"]["vocab"]
    with open(os.path.join(FIXTURES, OWN["own_tiktoken"]), "w") as f:
        for rank, token in enumerate(sorted(gpt2, key=gpt2.get)):
            raw = bytes(decoder[c] for c in token)
            f.write(f"{base64.b64encode(raw).decode()} {rank}\n")
    print(f"wrote {OWN['own_tiktoken']}: {len(gpt2)} ranks")


def byte_decoder():
    """GPT-2's byte-to-unicode spelling, inverted: printable Latin-1 bytes spell themselves, the
    other 68 are U+0100.. in byte order."""
    remapped = [b for b in range(256) if not (0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or b >= 0xAE)]
    table = {chr(b): b for b in range(256) if b not in remapped}
    table.update({chr(256 + i): b for i, b in enumerate(remapped)})
    return table


def oracle_for(path):
    """(encode, decode_without_specials, description, bos, eos, vocab size) for one file."""
    if path.endswith(".json"):
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(path)
        return (lambda t: tok.encode(t, add_special_tokens=False).ids,
                lambda ids: tok.decode(ids, skip_special_tokens=True),
                f"tokenizers {importlib.metadata.version('tokenizers')}", tok.get_vocab_size())
    if path.endswith(".tiktoken"):
        import tiktoken
        from tiktoken.load import load_tiktoken_bpe
        ranks = load_tiktoken_bpe(path)
        specials = {t: len(ranks) + i for i, t in enumerate(TIKTOKEN_SPECIALS)}
        enc = tiktoken.Encoding(name="conformance", pat_str=LLAMA3, mergeable_ranks=ranks,
                                special_tokens=specials)
        special_ids = set(specials.values())
        return (lambda t: enc.encode(t, allowed_special="all"),
                lambda ids: enc.decode_bytes([i for i in ids if i not in special_ids])
                .decode("utf-8", errors="replace"),
                f"tiktoken {importlib.metadata.version('tiktoken')} (MaxText's Llama 3 setup)",
                len(ranks) + len(specials))
    import sentencepiece
    sp = sentencepiece.SentencePieceProcessor(model_file=path)
    return (lambda t: sp.encode(t), lambda ids: sp.decode(ids),
            f"sentencepiece {importlib.metadata.version('sentencepiece')}", sp.get_piece_size())


def golden(name, path, source):
    encode, decode, oracle, vocab = oracle_for(path)
    ids, round_trip = [], []
    for text in texts():
        out = encode(text)
        ids.append(out)
        round_trip.append(decode(out) == text)
    os.makedirs(GOLDENS, exist_ok=True)
    with open(os.path.join(GOLDENS, name + ".json"), "w") as f:
        f.write(json.dumps({"tokenizer": source, "oracle": oracle, "vocab_size": vocab,
                            "round_trip": round_trip}) [:-1])
        f.write(', "ids": [\n' + ",\n".join(json.dumps(i) for i in ids) + "\n]}\n")
    print(f"{name}: {sum(len(i) for i in ids)} ids, {sum(round_trip)}/{len(ids)} round trips")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--train", action="store_true", help="retrain our own tokenizer files")
    args = parser.parse_args()
    if args.train:
        train()
    for name, file in OWN.items():
        golden(name, os.path.join(FIXTURES, file), "fixture:" + file)
    missing = [f for f in FETCHED.values() if not os.path.exists(os.path.join(ASSETS, f))]
    if missing:
        print(f"{ASSETS}: not fetched ({len(missing)} files missing; tools/reference/fetch_assets.sh); "
              "the asset goldens are left as they are")
        return 0
    for name, file in FETCHED.items():
        golden(name, os.path.join(ASSETS, file), "asset:" + file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
