"""Writes tests/fixtures/gguf/: tiny_llama's weights as a GGUF file the way llama.cpp's
converter writes one, with the tensor types mixed so that one small file holds every type maxctx
reads (F32, F16, BF16, Q8_0, Q4_0, Q4_1), and what its dequantized tensors must be.

    V=tools/reference/.venv-tok   # python -m venv $V && $V/bin/pip install gguf numpy
    $V/bin/python tools/reference/gguf_fixture.py

Written with the `gguf` package (llama.cpp's gguf-py): its GGUFWriter and its quantize /
dequantize (numpy, bit-exact with ggml). The Q/K rows are permuted as convert_hf_to_gguf.py's
LlamaModel.permute does. The embedded tokenizer is a 96-token byte-level vocabulary of our own
(the printable ASCII bytes, Ġ for space, <|endoftext|> as a control token; tokenizer.ggml.pre
"smollm": digits alone), so that most bytes have no token, as in SmolLM2's vocabulary.

Also tiny_mixtral.gguf (tests/fixtures/tiny_mixtral's weights as the converter writes a Mixtral:
experts stacked per layer), tiny_llama_rope_llama3.gguf (tiny_llama with Llama 3 RoPE scaling
as the tensor rope_freqs.weight) and tiny_llama_q8_rows.gguf (a 64-wide Llama of our own, Q8_0
projections whose rows mostly have one scale each, which maxctx's int8 takes as stored:
write_q8_rows).

expected.json holds, for each Hugging Face weight name, gguf-py's dequantized values in Hugging
Face row order summarised (sum, sum of squares, the index-weighted sum, first 8 values, float64)
and the type the tensor has in the file; gguf_test checks maxctx's conversion against them and against the original
F32 weights within each type's rounding.
"""

import importlib.metadata
import json
import math
import os
import struct
import sys

import gguf
import numpy as np
from gguf import GGMLQuantizationType as T

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
SOURCE = os.path.join(ROOT, "tests", "fixtures", "tiny_llama")
OUT = os.path.join(ROOT, "tests", "fixtures", "gguf")


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        assert info["dtype"] == "F32"
        out[name] = np.frombuffer(data[begin:end], dtype=np.float32).reshape(info["shape"])
    return out


def permute(w, n_head):
    """convert_hf_to_gguf.py's LlamaModel.permute (n_head: the tensor's own head count)."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def gguf_rows(hf_name, value, heads, kv_heads):
    """A Hugging Face tensor in the row order the converter writes: Q and K permuted."""
    if hf_name.endswith("q_proj.weight"):
        return permute(value, heads)
    if hf_name.endswith("k_proj.weight"):
        return permute(value, kv_heads)
    return value


# Hugging Face name -> (GGUF name, type in the file)
def layout(layers):
    types = {
        0: {"q_proj": T.Q4_0, "k_proj": T.Q4_1, "v_proj": T.Q8_0, "o_proj": T.F16,
            "gate_proj": T.BF16, "up_proj": T.Q4_1, "down_proj": T.F32},
        1: {"q_proj": T.Q8_0, "k_proj": T.Q4_0, "v_proj": T.Q4_1, "o_proj": T.BF16,
            "gate_proj": T.Q8_0, "up_proj": T.F16, "down_proj": T.F16},
    }
    names = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
             "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}
    out = {"model.embed_tokens.weight": ("token_embd.weight", T.Q8_0),
           "model.norm.weight": ("output_norm.weight", T.F32),
           "lm_head.weight": ("output.weight", T.Q4_0)}
    for i in range(layers):
        out[f"model.layers.{i}.input_layernorm.weight"] = (f"blk.{i}.attn_norm.weight", T.F32)
        out[f"model.layers.{i}.post_attention_layernorm.weight"] = (f"blk.{i}.ffn_norm.weight", T.F32)
        for proj, t in types[i].items():
            group = "self_attn" if proj.endswith(("q_proj", "k_proj", "v_proj", "o_proj")) else "mlp"
            out[f"model.layers.{i}.{group}.{proj}.weight"] = (f"blk.{i}.{names[proj]}.weight", t)
    return out


def main():
    config = json.load(open(os.path.join(SOURCE, "config.json")))
    weights = read_safetensors(os.path.join(SOURCE, "model.safetensors"))
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "tiny_llama_mixed.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("tiny_llama (maxctx test fixture)")
    w.add_context_length(config["max_position_embeddings"])
    w.add_embedding_length(config["hidden_size"])
    w.add_block_count(config["num_hidden_layers"])
    w.add_feed_forward_length(config["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_key_length(config["head_dim"])
    w.add_value_length(config["head_dim"])
    w.add_rope_dimension_count(config["head_dim"])
    w.add_rope_freq_base(config["rope_theta"])
    w.add_layer_norm_rms_eps(config["rms_norm_eps"])
    # A 96-token byte-level vocabulary: '!'..'~' (94), 'Ġ' (space), <|endoftext|> (control).
    tokens = [chr(c) for c in range(ord("!"), ord("~") + 1)] + ["\u0120", "<|endoftext|>"]
    assert len(tokens) == config["vocab_size"]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types([1] * 95 + [3])
    w.add_token_merges([])
    w.add_bos_token_id(95)
    w.add_eos_token_id(95)
    expected = {}
    for hf_name, (gguf_name, t) in layout(config["num_hidden_layers"]).items():
        value = gguf_rows(hf_name, weights[hf_name].astype(np.float32), heads, kv_heads)
        if t == T.F32:
            data, stored = value, value
        elif t == T.F16:
            data = value.astype(np.float16)
            stored = data.astype(np.float32)
        else:
            data = gguf.quants.quantize(value, t)
            stored = gguf.quants.dequantize(data, t).reshape(value.shape).astype(np.float32)
        w.add_tensor(gguf_name, data, raw_dtype=t)
        # Back in Hugging Face row order (the inverse permutation), as maxctx must give it.
        if hf_name.endswith("q_proj.weight"):
            stored = unpermute(stored, heads)
        elif hf_name.endswith("k_proj.weight"):
            stored = unpermute(stored, kv_heads)
        s = stored.astype(np.float64)
        flat = s.reshape(-1)
        expected[hf_name] = {"type": t.name, "sum": float(flat.sum()),
                             "sum_sq": float((flat * flat).sum()),
                             # order-sensitive: a row put back in the wrong place changes it
                             "index_weighted": float((flat * np.arange(flat.size)).sum() / flat.size),
                             "first": [float(x) for x in flat[:8]]}
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    mixtral_path, mixtral_expected = write_mixtral()
    rope_path, rope_freqs = write_rope_llama3()
    q8_path = write_q8_rows()
    generator = ("tools/reference/gguf_fixture.py (gguf-py " + importlib.metadata.version("gguf") +
                 ")")
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump({"generator": generator, "tensors": expected,
                   "tiny_mixtral": mixtral_expected, "rope_freqs": rope_freqs}, f, indent=1)
    for p in (path, mixtral_path, rope_path, q8_path):
        print(f"wrote {p} ({os.path.getsize(p)} bytes)")
    print("and expected.json")


def summary(stored, t):
    """What expected.json keeps of one tensor in Hugging Face row order (float64 sums)."""
    flat = stored.astype(np.float64).reshape(-1)
    return {"type": t.name, "sum": float(flat.sum()), "sum_sq": float((flat * flat).sum()),
            # order-sensitive: a row put back in the wrong place changes it
            "index_weighted": float((flat * np.arange(flat.size)).sum() / flat.size),
            "first": [float(x) for x in flat[:8]]}


def stored_as(value, t):
    """(the array to write, what ggml reads back from it) for type t."""
    if t == T.F32:
        return value, value
    if t == T.F16:
        data = value.astype(np.float16)
        return data, data.astype(np.float32)
    data = gguf.quants.quantize(value, t)
    return data, gguf.quants.dequantize(data, t).reshape(value.shape).astype(np.float32)


def add_llama_metadata(w, config):
    w.add_context_length(config["max_position_embeddings"])
    w.add_embedding_length(config["hidden_size"])
    w.add_block_count(config["num_hidden_layers"])
    w.add_feed_forward_length(config["intermediate_size"])
    w.add_head_count(config["num_attention_heads"])
    w.add_head_count_kv(config["num_key_value_heads"])
    w.add_key_length(config["head_dim"])
    w.add_value_length(config["head_dim"])
    w.add_rope_dimension_count(config["head_dim"])
    w.add_rope_freq_base(config["rope_theta"])
    w.add_layer_norm_rms_eps(config["rms_norm_eps"])


def write_mixtral():
    """tiny_mixtral as convert_hf_to_gguf.py writes a Mixtral: each layer's experts stacked into
    ffn_{gate,down,up}_exps ([experts, rows, cols]), the router as ffn_gate_inp, the Q/K rows
    permuted; norms F32, the other matrices F16 but layer 0's experts F32 and layer 1's gate/up
    experts Q8_0."""
    source = os.path.join(ROOT, "tests", "fixtures", "tiny_mixtral")
    config = json.load(open(os.path.join(source, "config.json")))
    weights = read_safetensors(os.path.join(source, "model.safetensors"))
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    experts = config["num_local_experts"]
    path = os.path.join(OUT, "tiny_mixtral.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("tiny_mixtral (maxctx test fixture)")
    add_llama_metadata(w, config)
    w.add_expert_count(experts)
    w.add_expert_used_count(config["num_experts_per_tok"])
    expected = {}
    plain = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    names = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output"}
    for i in range(config["num_hidden_layers"]):
        plain[f"model.layers.{i}.input_layernorm.weight"] = f"blk.{i}.attn_norm.weight"
        plain[f"model.layers.{i}.post_attention_layernorm.weight"] = f"blk.{i}.ffn_norm.weight"
        plain[f"model.layers.{i}.block_sparse_moe.gate.weight"] = f"blk.{i}.ffn_gate_inp.weight"
        for proj, name in names.items():
            plain[f"model.layers.{i}.self_attn.{proj}.weight"] = f"blk.{i}.{name}.weight"
    for hf_name, gguf_name in plain.items():
        value = gguf_rows(hf_name, weights[hf_name], heads, kv_heads)
        t = T.F32 if value.ndim == 1 else T.F16
        data, stored = stored_as(value, t)
        w.add_tensor(gguf_name, data, raw_dtype=t)
        if hf_name.endswith("q_proj.weight"):
            stored = unpermute(stored, heads)
        elif hf_name.endswith("k_proj.weight"):
            stored = unpermute(stored, kv_heads)
        expected[hf_name] = summary(stored, t)
    for i in range(config["num_hidden_layers"]):
        for hf_proj, gguf_proj in (("w1", "ffn_gate"), ("w2", "ffn_down"), ("w3", "ffn_up")):
            t = T.F32 if i == 0 else (T.F16 if hf_proj == "w2" else T.Q8_0)
            names = [f"model.layers.{i}.block_sparse_moe.experts.{x}.{hf_proj}.weight"
                     for x in range(experts)]
            stacked = np.stack([weights[n] for n in names])  # torch.stack(datas, dim=0)
            data, stored = stored_as(stacked, t)
            w.add_tensor(f"blk.{i}.{gguf_proj}_exps.weight", data, raw_dtype=t)
            for x, n in enumerate(names):
                expected[n] = summary(stored[x], t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path, expected


def llama3_rope_freqs(theta, dim, factor, low, high, original):
    """convert_hf_to_gguf.py LlamaModel.generate_extra_tensors (rope_type llama3), numpy float32
    where it uses torch float32."""
    freqs = 1.0 / (np.float32(theta) ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)))
    low_wavelen, high_wavelen = original / low, original / high
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            out.append(1)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (original / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def write_rope_llama3():
    """tiny_llama (F16 matrices) with Llama 3 RoPE scaling as the converter writes it: no scaling metadata
    (llama.rope.scaling.type "none"), the tensor rope_freqs.weight. factor 8, low 1, high 4 and an
    original context of 64 put tiny_llama's four frequencies (wavelengths 6.3, 63, 628, 6283) in
    all three bands."""
    config = json.load(open(os.path.join(SOURCE, "config.json")))
    weights = read_safetensors(os.path.join(SOURCE, "model.safetensors"))
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    path = os.path.join(OUT, "tiny_llama_rope_llama3.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("tiny_llama with Llama 3 RoPE scaling (maxctx test fixture)")
    add_llama_metadata(w, config)
    w.add_rope_scaling_type(gguf.RopeScalingType.NONE)
    freqs = llama3_rope_freqs(config["rope_theta"], config["head_dim"], 8.0, 1.0, 4.0, 64)
    w.add_tensor("rope_freqs.weight", freqs, raw_dtype=T.F32)
    for hf_name, (gguf_name, _) in layout(config["num_hidden_layers"]).items():
        value = gguf_rows(hf_name, weights[hf_name], heads, kv_heads)
        t = T.F32 if value.ndim == 1 else T.F16
        w.add_tensor(gguf_name, stored_as(value, t)[0], raw_dtype=t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path, [float(x) for x in freqs]


def q8_0_row_scales(value):
    """Q8_0 blocks (f16 d, 32 int8 codes) in which every block of a row has the row's scale,
    d = f16(max|row| / 127), codes rint(x / d) within ±127: the form maxctx's int8 (one scale per
    row) holds exactly. ggml's own quantizer gives each block its own scale instead."""
    rows, cols = value.shape
    d = (np.abs(value).max(axis=1, keepdims=True) / 127).astype(np.float16)
    scale = d.astype(np.float32)
    ratio = np.divide(value, scale, out=np.zeros_like(value), where=scale != 0)  # a zero row: 0
    q = np.clip(np.rint(ratio), -127, 127).astype(np.int8)
    blocks = cols // 32
    out = np.zeros((rows, blocks, 34), dtype=np.uint8)
    out[:, :, 0:2] = np.repeat(d, blocks, axis=1).view(np.uint8).reshape(rows, blocks, 2)
    out[:, :, 2:] = q.reshape(rows, blocks, 32).view(np.uint8)
    return out.reshape(rows, blocks * 34)


def write_q8_rows():
    """A Llama of our own, 64 wide (so a row holds two Q8_0 blocks: tiny_llama's 32 hold one), its
    projections Q8_0 (tests/model gguf_test, tests/infer quantized_checkpoint_test): most with one
    scale per row (q8_0_row_scales), layer 1's q_proj and gate_proj as ggml quantizes (a scale per
    block: a row's two differ), the embedding F16, the norms F32. Layer 0's v_proj has its row 0
    zero (scale 0) and its row 1's second block zero. Weights: numpy's default_rng(33), normal
    with standard deviation 0.05 (norms 1 + 0.1 normal)."""
    config = {"hidden_size": 64, "intermediate_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
              "max_position_embeddings": 128, "rope_theta": 10000.0, "rms_norm_eps": 1e-5,
              "vocab_size": 96}
    rng = np.random.default_rng(33)
    h, f, v, d = 64, 64, 96, 16
    shapes = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,),
              "lm_head.weight": (v, h)}
    for i in range(2):
        shapes.update({f"model.layers.{i}.input_layernorm.weight": (h,),
                       f"model.layers.{i}.post_attention_layernorm.weight": (h,),
                       f"model.layers.{i}.self_attn.q_proj.weight": (4 * d, h),
                       f"model.layers.{i}.self_attn.k_proj.weight": (2 * d, h),
                       f"model.layers.{i}.self_attn.v_proj.weight": (2 * d, h),
                       f"model.layers.{i}.self_attn.o_proj.weight": (h, 4 * d),
                       f"model.layers.{i}.mlp.gate_proj.weight": (f, h),
                       f"model.layers.{i}.mlp.up_proj.weight": (f, h),
                       f"model.layers.{i}.mlp.down_proj.weight": (h, f)})
    path = os.path.join(OUT, "tiny_llama_q8_rows.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("a 64-wide Llama with Q8_0 projections, most one scale per row (maxctx test fixture)")
    add_llama_metadata(w, config)
    for hf_name, (gguf_name, _) in layout(2).items():
        shape = shapes[hf_name]
        if len(shape) == 1:
            w.add_tensor(gguf_name, (1 + 0.1 * rng.standard_normal(shape)).astype(np.float32),
                         raw_dtype=T.F32)
            continue
        value = gguf_rows(hf_name, (0.05 * rng.standard_normal(shape)).astype(np.float32), 4, 2)
        if hf_name == "model.embed_tokens.weight":
            w.add_tensor(gguf_name, value.astype(np.float16), raw_dtype=T.F16)
        elif hf_name.startswith("model.layers.1.") and ("q_proj" in hf_name or "gate_proj" in hf_name):
            w.add_tensor(gguf_name, gguf.quants.quantize(value, T.Q8_0), raw_dtype=T.Q8_0)
        else:
            if hf_name == "model.layers.0.self_attn.v_proj.weight":
                value[0, :] = 0
                value[1, 32:] = 0
            w.add_tensor(gguf_name, q8_0_row_scales(value), raw_dtype=T.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def unpermute(w, n_head):
    """The inverse of permute: GGUF row 2i + j of a head is Hugging Face row j*D/2 + i."""
    return (w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


if __name__ == "__main__":
    sys.exit(main())
