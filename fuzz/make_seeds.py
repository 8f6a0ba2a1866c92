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

# GGUF files (llama.cpp's format), written here byte by byte (no gguf-py needed): a tiny dense
# Llama in every tensor type maxctx reads with an embedded byte-level tokenizer, a Mixtral with
# stacked experts, and a Llama with Llama 3 RoPE scaling (rope_freqs.weight).
GGUF_U32, GGUF_I32, GGUF_F32, GGUF_STRING, GGUF_ARRAY = 4, 5, 6, 8, 9
GGML = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 8, "BF16": 30}


def gguf_value(kind, value):
    if kind == GGUF_U32:
        return struct.pack("<I", value)
    if kind == GGUF_I32:
        return struct.pack("<i", value)
    if kind == GGUF_F32:
        return struct.pack("<f", value)
    if kind == GGUF_STRING:
        data = value if isinstance(value, bytes) else value.encode()
        return struct.pack("<Q", len(data)) + data
    element, items = value
    return struct.pack("<IQ", element, len(items)) + b"".join(gguf_value(element, v) for v in items)


def gguf_payload(kind, count, seed):
    """`count` values of type `kind`: small pseudo-random weights, quantized as ggml lays out."""
    values = [((i * 7919 + seed * 104729) % 2001 - 1000) / 4000.0 for i in range(count)]
    if kind == "F32":
        return struct.pack(f"<{count}f", *values)
    if kind == "F16":
        return struct.pack(f"<{count}e", *values)
    if kind == "BF16":
        return b"".join(struct.pack("<f", v)[2:] for v in values)
    out = b""
    for b in range(count // 32):
        block = values[32 * b:32 * b + 32]
        if kind == "Q8_0":
            out += struct.pack("<e", 0.25 / 127) + bytes((i * 37 + b) % 256 for i in range(32))
        elif kind == "Q4_0":
            out += struct.pack("<e", 0.25 / 8) + bytes((i * 29 + b) % 256 for i in range(16))
        else:  # Q4_1
            out += struct.pack("<ee", 0.5 / 15, min(block)) + bytes((i * 23 + b) % 256 for i in range(16))
    return out


def gguf_file(metadata, tensors):
    """metadata: [(key, kind, value)]; tensors: [(name, type, row-major shape[, payload])]."""
    header = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata))
    for key, kind, value in metadata:
        header += gguf_value(GGUF_STRING, key) + struct.pack("<I", kind) + gguf_value(kind, value)
    data = b""
    for seed, (name, kind, shape, *payload) in enumerate(tensors):
        header += gguf_value(GGUF_STRING, name) + struct.pack("<I", len(shape))
        header += b"".join(struct.pack("<Q", n) for n in reversed(shape))
        header += struct.pack("<IQ", GGML[kind], len(data))
        count = 1
        for n in shape:
            count *= n
        data += payload[0] if payload else gguf_payload(kind, count, seed)
        data += b"\0" * (-len(data) % 32)
    return header + b"\0" * (-len(header) % 32) + data


def llama_metadata(experts=0):
    m = [("general.architecture", GGUF_STRING, "llama"), ("llama.context_length", GGUF_U32, 64),
         ("llama.embedding_length", GGUF_U32, 32), ("llama.block_count", GGUF_U32, 1),
         ("llama.feed_forward_length", GGUF_U32, 32), ("llama.attention.head_count", GGUF_U32, 2),
         ("llama.attention.head_count_kv", GGUF_U32, 1), ("llama.attention.key_length", GGUF_U32, 16),
         ("llama.rope.freq_base", GGUF_F32, 10000.0),
         ("llama.attention.layer_norm_rms_epsilon", GGUF_F32, 1e-5)]
    if experts:
        m += [("llama.expert_count", GGUF_U32, experts), ("llama.expert_used_count", GGUF_U32, 1)]
    return m


def llama_tensors(types, experts=0):
    t = [("token_embd.weight", types[0], [8, 32]), ("output_norm.weight", "F32", [32]),
         ("blk.0.attn_norm.weight", "F32", [32]), ("blk.0.ffn_norm.weight", "F32", [32]),
         ("blk.0.attn_q.weight", types[1], [32, 32]), ("blk.0.attn_k.weight", types[2], [16, 32]),
         ("blk.0.attn_v.weight", types[3], [16, 32]), ("blk.0.attn_output.weight", types[4], [32, 32])]
    if experts:
        t += [("blk.0.ffn_gate_inp.weight", "F32", [experts, 32]),
              ("blk.0.ffn_gate_exps.weight", "Q8_0", [experts, 32, 32]),
              ("blk.0.ffn_up_exps.weight", "Q8_0", [experts, 32, 32]),
              ("blk.0.ffn_down_exps.weight", "F16", [experts, 32, 32]),
              ("output.weight", "Q8_0", [8, 32])]
    else:
        t += [("blk.0.ffn_gate.weight", types[5], [32, 32]), ("blk.0.ffn_up.weight", types[6], [32, 32]),
              ("blk.0.ffn_down.weight", types[7], [32, 32])]
    return t


tokens = ["a", "b", "\u0120", "ab", "\u0120a", "<|endoftext|>", "c", "1"]
gguf_tokenizer = [("tokenizer.ggml.model", GGUF_STRING, "gpt2"),
                  ("tokenizer.ggml.pre", GGUF_STRING, "smollm"),
                  ("tokenizer.ggml.tokens", GGUF_ARRAY, (GGUF_STRING, tokens)),
                  ("tokenizer.ggml.token_type", GGUF_ARRAY, (GGUF_I32, [1, 1, 1, 1, 1, 3, 1, 1])),
                  ("tokenizer.ggml.merges", GGUF_ARRAY, (GGUF_STRING, ["a b", "\u0120 a"])),
                  ("tokenizer.ggml.bos_token_id", GGUF_U32, 5), ("tokenizer.ggml.eos_token_id", GGUF_U32, 5)]
out = corpus / "gguf"
out.mkdir(parents=True, exist_ok=True)
(out / "llama_every_type.gguf").write_bytes(gguf_file(
    llama_metadata() + gguf_tokenizer,
    llama_tensors(["Q8_0", "Q4_0", "Q4_1", "F16", "BF16", "Q8_0", "F16", "F16"])))
(out / "mixtral.gguf").write_bytes(gguf_file(
    llama_metadata(experts=2), llama_tensors(["Q8_0", "Q8_0", "Q4_0", "Q4_1", "F16"], experts=2)))
# Llama 3 scaling of the 8 frequencies of head_dim 16, theta 10000: factor 8, original context 64.
divisors = []
for i in range(8):
    wavelength = 2 * 3.141592653589793 * 10000.0 ** (2 * i / 16)
    smooth = (64 / wavelength - 1) / 3
    divisors.append(1.0 if wavelength < 16 else 8.0 if wavelength > 64 else 1 / ((1 - smooth) / 8 + smooth))
rope = gguf_file(llama_metadata() + [("llama.rope.scaling.type", GGUF_STRING, "none")],
                 [("rope_freqs.weight", "F32", [8], struct.pack("<8f", *divisors))] +
                 llama_tensors(["F16", "F16", "F16", "F16", "F16", "F16", "F16", "F16"]))
(out / "rope_llama3.gguf").write_bytes(rope)

# Top-k goldens: the last row only beside no full logits, and every row beside full logits.
out = corpus / "golden_logits"
(out / "top_k.jsonl").write_text(
    json.dumps({"prompt": "a", "tokens": [3, 1, 2], "top_k_rows": [2], "top_k_ids": [[4, 0, 2]],
                "top_k_logits": [[3.5, 1.25, -0.5]]}) + "\n" +
    json.dumps({"tokens": [1, 2], "logits": [[0, 1, 2], [2, 1, 0]], "top_k_ids": [[2, 1], [0, 1]],
                "top_k_logits": [[2, 1], [2, 1]]}) + "\n")

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
# The same with the model it holds (train/checkpoint.h "model", model/model_record.h).
(out / "step_1_model.json").write_text(json.dumps(dict(state, model={
    "vocab_size": 256, "emb_dim": 64, "num_query_heads": 4, "num_kv_heads": 2, "head_dim": 16,
    "mlp_dim": 192, "num_layers": 2, "norm_eps": 1e-05, "rope_theta": 500000.0, "rope_type": "llama3",
    "rope_factor": 8.0, "rope_low_freq_factor": 1.0, "rope_high_freq_factor": 4.0,
    "rope_original_max_position_embeddings": 8192, "tie_embeddings": True, "sliding_window": 0,
    "moe": True, "num_experts": 4, "num_experts_per_tok": 2})))
(out / "v1.json").write_text(json.dumps({"format": "maxctx-checkpoint-v1", "step": 1,
                                         "data_position": 0, "config": ""}))

regressions = root / "fuzz" / "regressions"
out = regressions / "checkpoint_state"
out.mkdir(parents=True, exist_ok=True)
# Issue #34 N4 and N11: a deeply nested state.json, and a data position whose row arithmetic
# overflowed.
(out / "deep_nesting.json").write_text('{"format": ' + "[" * 100000 + "]" * 100000 + "}")
(out / "data_position_max.json").write_text(json.dumps(dict(state, data_position=2**63 - 1)))
out = regressions / "gguf"
out.mkdir(parents=True, exist_ok=True)
# A token that is not UTF-8 (nlohmann's exception escaped when tokenizer.json was written), and a
# block_count of 2^30 over one layer's tensors (the weight list, one entry per tensor, was built
# before any tensor was looked up: out of memory).
bad_token = [m if m[0] != "tokenizer.ggml.tokens" else
             (m[0], GGUF_ARRAY, (GGUF_STRING, tokens[:7] + [b"\xff\xfe"])) for m in gguf_tokenizer]
(out / "token_not_utf8.gguf").write_bytes(gguf_file(
    llama_metadata() + bad_token, llama_tensors(["F16"] * 8)))
many_layers = [m if m[0] != "llama.block_count" else (m[0], GGUF_U32, 2**30) for m in llama_metadata()]
(out / "block_count_2e30.gguf").write_bytes(gguf_file(many_layers, llama_tensors(["F16"] * 8)))
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
