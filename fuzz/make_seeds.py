#!/usr/bin/env python3
"""Writes the small seed corpora of fuzz/corpus/ (committed; rerun only to change them).

Seeds are small valid inputs of each format, so that the fuzzer starts from the structure the
loader expects: hand-made safetensors files, the fixtures' config.json files, the shipped YAML
configs, the fixture SentencePiece model and a tiny byte-level BPE tokenizer.json, and small
golden-logits JSONL files.
"""
import json
import pathlib
import shutil
import struct

root = pathlib.Path(__file__).resolve().parent.parent
corpus = root / "fuzz" / "corpus"


def safetensors(entries, metadata=None):
    header, data = {}, b""
    for name, dtype, shape, payload in entries:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


out = corpus / "safetensors_header"
(out / "two_f32.safetensors").write_bytes(safetensors(
    [("a", "F32", [2, 3], struct.pack("<6f", *range(6))), ("b", "F32", [3], struct.pack("<3f", 1, 2, 3))],
    {"format": "pt"}))
(out / "dtypes.safetensors").write_bytes(safetensors(
    [("h", "BF16", [4], b"\x80\x3f" * 4), ("i", "I32", [2], struct.pack("<2i", 7, -7)),
     ("s", "F32", [], struct.pack("<f", 1.5)), ("z", "F32", [0, 4], b"")]))
(out / "empty.safetensors").write_bytes(safetensors([]))

out = corpus / "hf_config"
for fixture in ["tiny_llama", "tiny_llama_tied_scaled", "tiny_mistral_window", "tiny_llama_bf16"]:
    shutil.copy(root / "tests" / "fixtures" / fixture / "config.json", out / f"{fixture}.json")

out = corpus / "yaml_config"
shutil.copy(root / "configs" / "base.yml", out / "base.yml")
shutil.copy(root / "configs" / "inference.yml", out / "inference.yml")
(out / "small.yml").write_text(
    "base_config: base.yml\nmodel_name: maxctx-tiny\nsteps: 3\nper_device_batch_size: 0.5\n"
    "ici_context_parallelism: 2\nmlp_activations: [silu, linear]\nprompt: 'a: b # c'\n")

out = corpus / "tokenizer"
shutil.copy(root / "tests" / "fixtures" / "tokenizer" / "docs_spm.model", out / "docs_spm.model")


def byte_to_unicode():
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


spell = byte_to_unicode()
vocab = {spell[b]: b for b in range(256)}
vocab.update({"he": 256, "ll": 257, "hell": 258, "hello": 259, spell[32] + "w": 260})
tokenizer = {
    "version": "1.0",
    "added_tokens": [{"id": 300, "content": "<|begin_of_text|>", "special": True},
                     {"id": 301, "content": "<|end_of_text|>", "special": True}],
    "normalizer": None,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                      "use_regex": True},
    "model": {"type": "BPE", "dropout": None, "byte_fallback": False, "ignore_merges": False,
              "vocab": vocab, "merges": ["h e", "l l", "he ll", "hell o", spell[32] + " w"]},
}
(out / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False))

out = corpus / "golden_logits"
(out / "one.jsonl").write_text(json.dumps(
    {"prompt": "ids 1 2", "tokens": [1, 2], "logits": [[0.5, -1.0, 2.0, 0.0], [1e-3, 3.5, -2.25, 1.0]]}) + "\n")
(out / "two.jsonl").write_text(
    json.dumps({"prompt": "a", "tokens": [3], "logits": [[1, 2, 3]]}) + "\n\n" +
    json.dumps({"prompt": "b", "tokens": [0, 1], "logits": [[0, 0, 0], [1e30, -1e30, 0]], "extra": {}}) + "\n")

# Regression inputs: the reproducers of past findings, reduced to their cause. fuzz/run.sh runs
# each once before fuzzing, so a finding that comes back fails on every machine at once.
out = corpus / "checkpoint_index"
out.mkdir(parents=True, exist_ok=True)
# A small index by hand: a matrix split over two files by rows, and a vector in one (the
# committed fsdp2.json beside it is a real one, from a maxctx-tiny checkpoint saved on fsdp=2).
(out / "two_files.json").write_text(json.dumps({"format": "maxctx-slices-v1", "tensors": {
    "w": {"dtype": "F32", "shape": [4, 3], "slices": [
        {"file": "shard-00000.safetensors", "offset": [0, 0], "shape": [2, 3], "byte_range": [96, 120]},
        {"file": "shard-00001.safetensors", "offset": [2, 0], "shape": [2, 3], "byte_range": [88, 112]}]},
    "n": {"dtype": "BF16", "shape": [5], "slices": [
        {"file": "shard-00000.safetensors", "offset": [0], "shape": [5], "byte_range": [120, 130]}]}}}))

# A state.json as a maxctx-tiny run of step 1 writes it (its config text shortened).
out = corpus / "checkpoint_state"
out.mkdir(parents=True, exist_ok=True)
state = {"format": "maxctx-checkpoint-v2", "step": 1, "data_position": 8, "num_ranks": 2,
         "config": "Config param model_name: maxctx-tiny\nConfig param steps: 1\n"}
(out / "step_1.json").write_text(json.dumps(state))
(out / "v1.json").write_text(json.dumps({"format": "maxctx-checkpoint-v1", "step": 1,
                                         "data_position": 0, "config": ""}))

regressions = root / "fuzz" / "regressions"
out = regressions / "checkpoint_state"
out.mkdir(parents=True, exist_ok=True)
# Issue #34 N4 and N11: a deeply nested state.json, and a data position whose row arithmetic
# overflowed.
(out / "deep_nesting.json").write_text('{"format": ' + "[" * 100000 + "]" * 100000 + "}")
(out / "data_position_max.json").write_text(json.dumps(dict(state, data_position=2**63 - 1)))
out = regressions / "yaml_config"
out.mkdir(parents=True, exist_ok=True)
(out / "complex_key.yml").write_text("? [a, b]\n: 1\nsteps: 3\n")
(out / "long_base_config.yml").write_text("base_config: " + "b" * 300 + "\n")
out = regressions / "tokenizer"
out.mkdir(parents=True, exist_ok=True)
list_type = json.loads(json.dumps(tokenizer))
list_type["model"]["type"] = ["h e", "l l"]
(out / "model_type_list.json").write_text(json.dumps(list_type, ensure_ascii=False))
(out / "deep_nesting.json").write_text("[" * 100000 + "]" * 100000)
sparse = json.loads(json.dumps(tokenizer))
sparse["added_tokens"][1]["id"] = 400000000
(out / "sparse_ids.json").write_text(json.dumps(sparse, ensure_ascii=False))
(out / "untrieable.model").write_bytes(bytes.fromhex("0a0e0a0528756e6b3e150000000018020a0c0a033c733e150000000018030a0d0a040018030a0d0a000000185848585858"))
