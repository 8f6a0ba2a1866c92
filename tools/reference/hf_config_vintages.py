"""Writes tests/fixtures/hf_config_vintages/: Llama, Mistral and Mixtral config.json files as
transformers itself saves them, one set per transformers major version.

Run it once with a transformers 4.x Python and once with a 5.x one (each writes its own files):

    V4/bin/python tools/reference/hf_config_vintages.py     # <model>.t4.json, <model>.t4.full.json
    V5/bin/python tools/reference/hf_config_vintages.py     # <model>.t5.json, <model>.t5.full.json

`<model>.tN.json` is `save_pretrained`'s file (only the fields that differ from the defaults, in
4.x `torch_dtype`, `rope_theta`, `rope_scaling`; in 5.x `dtype`, `rope_parameters`);
`<model>.tN.full.json` is `to_json_file(use_diff=False)`: every PretrainedConfig field
(id2label, return_dict, ...). The models are the same in every file, so model_test's
HfConfigVintages checks that each loads to the same LlamaConfig. Only transformers' config
classes are used: no torch is needed.
"""

import json
import os
import sys
import tempfile

import transformers
from transformers import LlamaConfig, MistralConfig, MixtralConfig

MAJOR = int(transformers.__version__.split(".")[0])
OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "hf_config_vintages")

LLAMA3_SCALING = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 256,
}

# name -> (config class, dimensions, rope theta, rope scaling or None)
MODELS = {
    # Llama 3.1 style: GQA, llama3 frequency scaling, untied.
    "llama3": (LlamaConfig, dict(hidden_size=32, intermediate_size=48, num_attention_heads=4,
                                 num_key_value_heads=2, num_hidden_layers=2, vocab_size=96,
                                 rms_norm_eps=1e-5, max_position_embeddings=2048,
                                 tie_word_embeddings=False), 500000.0, LLAMA3_SCALING),
    # SmolLM2 style: theta 1e5, tied embeddings, head_dim implied.
    "llama_tied": (LlamaConfig, dict(hidden_size=48, intermediate_size=64, num_attention_heads=3,
                                     num_key_value_heads=1, num_hidden_layers=2, vocab_size=64,
                                     rms_norm_eps=1e-5, tie_word_embeddings=True), 100000.0, None),
    # Mistral: sliding window, explicit head_dim unlike hidden/heads.
    "mistral": (MistralConfig, dict(hidden_size=32, intermediate_size=48, num_attention_heads=2,
                                    num_key_value_heads=1, head_dim=16, num_hidden_layers=2,
                                    vocab_size=64, rms_norm_eps=1e-6, sliding_window=5,
                                    tie_word_embeddings=False), 10000.0, None),
    # Mixtral: 4 experts, 2 per token, no window.
    "mixtral": (MixtralConfig, dict(hidden_size=32, intermediate_size=24, num_attention_heads=4,
                                    num_key_value_heads=2, num_hidden_layers=2, vocab_size=96,
                                    rms_norm_eps=1e-5, num_local_experts=4, num_experts_per_tok=2,
                                    sliding_window=None, tie_word_embeddings=False),
                1000000.0, None),
}


def make(config_class, dims, theta, scaling):
    kwargs = dict(dims)
    if MAJOR >= 5:
        kwargs["rope_parameters"] = dict(scaling or {"rope_type": "default"}, rope_theta=theta)
        kwargs["dtype"] = "bfloat16"
    else:
        kwargs["rope_theta"] = theta
        kwargs["rope_scaling"] = dict(scaling) if scaling else None
        kwargs["torch_dtype"] = "bfloat16"
    config = config_class(**kwargs)
    config.architectures = [config_class.__name__.replace("Config", "ForCausalLM")]
    return config


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, (config_class, dims, theta, scaling) in MODELS.items():
        config = make(config_class, dims, theta, scaling)
        with tempfile.TemporaryDirectory() as tmp:
            config.save_pretrained(tmp)
            with open(os.path.join(tmp, "config.json")) as f:
                saved = f.read()
        with open(os.path.join(OUT, f"{name}.t{MAJOR}.json"), "w") as f:
            f.write(saved)
        config.to_json_file(os.path.join(OUT, f"{name}.t{MAJOR}.full.json"), use_diff=False)
        keys = sorted(json.loads(saved))
        print(f"{name}.t{MAJOR}.json ({transformers.__version__}): {', '.join(keys)}")


if __name__ == "__main__":
    sys.exit(main())
