"""A Hugging Face directory from a Llama GGUF file, written without torch (CI's fetch script runs it
in a venv of light packages): tests/infer/real_model.sh loads SmolLM2-135M-Instruct from it beside
the GGUF itself, and checks the same goldens.

    V=tools/reference/.venv-hf   # python -m venv $V && $V/bin/pip install gguf numpy safetensors transformers
    $V/bin/python tools/reference/gguf_to_hf_directory.py <file.gguf> <out dir>

What writes which file:
  config.json       transformers' LlamaConfig(...).save_pretrained (transformers 5 field names:
                    dtype, rope_parameters), from the GGUF metadata as transformers' GGUF loader
                    reads it (llama.* keys; tied embeddings when the file has no output.weight).
  model.safetensors safetensors.numpy.save_file: every tensor dequantized by gguf-py
                    (gguf.quants.dequantize, bit-exact with ggml) to F32, named as Hugging Face
                    names them, the Q/K rows put back from llama.cpp's interleaved RoPE order as
                    transformers' GGUF loader does (reverse_permute_weights: GGUF row 2i + j of a
                    head is Hugging Face row j*D/2 + i; K with the kv head count).
  tokenizer.json, tokenizer_config.json
                    transformers' PreTrainedTokenizerFast.save_pretrained of the tokenizer its GGUF
                    loader builds from tokenizer.ggml.* (convert_gguf_tokenizer, which needs no
                    torch; note it keeps ByteLevel's own split for pre 'smollm', where SmolLM2's
                    Hugging Face tokenizer splits digits first).
"""

import os
import sys

import gguf
import numpy as np
import transformers
from safetensors.numpy import save_file
from transformers import LlamaConfig, PreTrainedTokenizerFast
from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer

LAYER = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj",
         "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
         "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
         "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
GLOBAL = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}


def field(reader, key, default=None):
    f = reader.get_field(key)
    if f is None:
        return default
    if f.types and f.types[0] == gguf.GGUFValueType.ARRAY:
        values = [f.parts[i] for i in f.data]
        if f.types[-1] == gguf.GGUFValueType.STRING:
            return [bytes(v).decode("utf-8") for v in values]
        return [v.tolist()[0] for v in values]
    value = f.parts[f.data[0]]
    if f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(value).decode("utf-8")
    return value.tolist()[0]


def reverse_permute(w, n_head):
    """GGUF row 2i + j of a head is Hugging Face row j*D/2 + i."""
    return (w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def main():
    path, out = sys.argv[1:3]
    reader = gguf.GGUFReader(path)
    assert field(reader, "general.architecture") == "llama", "a Llama GGUF"
    heads = field(reader, "llama.attention.head_count")
    kv_heads = field(reader, "llama.attention.head_count_kv", heads)
    hidden = field(reader, "llama.embedding_length")
    tokens = field(reader, "tokenizer.ggml.tokens")
    names = {t.name for t in reader.tensors}
    assert "rope_freqs.weight" not in names, "RoPE scaling is not converted here"
    tensors = {}
    for t in reader.tensors:
        value = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        value = value.reshape([int(n) for n in reversed(t.shape)])
        parts = t.name.split(".")
        if parts[0] == "blk":
            kind = parts[2]
            if kind == "attn_q":
                value = reverse_permute(value, heads)
            elif kind == "attn_k":
                value = reverse_permute(value, kv_heads)
            name = f"model.layers.{parts[1]}.{LAYER[kind]}.weight"
        else:
            name = GLOBAL[parts[0]] + ".weight"
        tensors[name] = np.ascontiguousarray(value)
    os.makedirs(out, exist_ok=True)
    config = LlamaConfig(
        vocab_size=len(tokens), hidden_size=hidden,
        intermediate_size=field(reader, "llama.feed_forward_length"),
        num_hidden_layers=field(reader, "llama.block_count"),
        num_attention_heads=heads, num_key_value_heads=kv_heads,
        head_dim=field(reader, "llama.attention.key_length", hidden // heads),
        max_position_embeddings=field(reader, "llama.context_length", 2048),
        rms_norm_eps=field(reader, "llama.attention.layer_norm_rms_epsilon"),
        rope_parameters={"rope_type": "default",
                         "rope_theta": field(reader, "llama.rope.freq_base", 10000.0)},
        tie_word_embeddings="output.weight" not in names,
        bos_token_id=field(reader, "tokenizer.ggml.bos_token_id"),
        eos_token_id=field(reader, "tokenizer.ggml.eos_token_id"),
        pad_token_id=field(reader, "tokenizer.ggml.padding_token_id"),
        architectures=["LlamaForCausalLM"], dtype="float32")
    config.save_pretrained(out)
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})

    tokenizer_dict = {"tokenizer_type": field(reader, "tokenizer.ggml.model"),
                      "pre_tokenizer_type": field(reader, "tokenizer.ggml.pre"),
                      "tokens": tokens, "token_type": field(reader, "tokenizer.ggml.token_type"),
                      "merges": field(reader, "tokenizer.ggml.merges", [])}
    for key in ("bos_token_id", "eos_token_id", "padding_token_id"):
        value = field(reader, "tokenizer.ggml." + key)
        if value is not None:
            tokenizer_dict[key.replace("padding_", "pad_")] = value
    backend, _ = convert_gguf_tokenizer("llama", tokenizer_dict)
    special = {name: tokens[field(reader, f"tokenizer.ggml.{key}_token_id")]
               for name, key in (("bos_token", "bos"), ("eos_token", "eos"), ("pad_token", "padding"))
               if field(reader, f"tokenizer.ggml.{key}_token_id") is not None}
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, **special)
    template = field(reader, "tokenizer.chat_template")
    if template:
        tok.chat_template = template
    tok.save_pretrained(out)
    print(f"gguf_to_hf_directory: {len(tensors)} tensors, {len(tokens)} tokens into {out} "
          f"(transformers {transformers.__version__}, gguf-py)")


if __name__ == "__main__":
    sys.exit(main())
