"""Checks against Hugging Face transformers itself (issue #30): the project's own oracle for the
multi-file checkpoints users bring and for what `maxctx export` writes.

    two-file-fixture  loads tests/fixtures/tiny_llama with transformers and saves it again with
                      save_pretrained(max_shard_size=...), which splits the weights over two
                      safetensors files and writes model.safetensors.index.json: the layout of
                      every large model on the Hub. The result is tests/fixtures/tiny_llama_two_files
                      (the weight files and the index as transformers wrote them; config.json is the
                      fixture's own, since the config transformers 5 writes is issue #33's).
    golden EXPORT_DIR OUT.jsonl
                      loads an exported Hugging Face directory in transformers (float32, eager
                      attention) and writes its logits for a few prompts as MaxText's golden JSONL,
                      which `maxctx check-logits` then compares with maxctx's own forward.

Needs a Python with torch and transformers (not in CI; bench/checkpoint/export_check.sh shows the
set-up). Test-only: the engine never imports this.
"""

import json
import os
import shutil
import sys

import numpy as np
import torch
import transformers

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")


def two_file_fixture():
    source = os.path.join(FIXTURES, "tiny_llama")
    out = os.path.join(FIXTURES, "tiny_llama_two_files")
    model = transformers.LlamaForCausalLM.from_pretrained(source, dtype=torch.float32)
    shutil.rmtree(out, ignore_errors=True)
    # The model's weights are 88 kB: a 60 kB limit gives exactly two files.
    model.save_pretrained(out, max_shard_size="60kB", safe_serialization=True)
    files = sorted(f for f in os.listdir(out) if f.endswith(".safetensors"))
    if len(files) != 2 or not os.path.exists(os.path.join(out, "model.safetensors.index.json")):
        sys.exit(f"expected two safetensors files and an index, got {files}")
    for name in os.listdir(out):
        if not (name.endswith(".safetensors") or name == "model.safetensors.index.json"):
            os.remove(os.path.join(out, name))
    shutil.copy(os.path.join(source, "config.json"), os.path.join(out, "config.json"))
    print(f"wrote {out}: {', '.join(files)} + model.safetensors.index.json "
          f"(transformers {transformers.__version__}, torch {torch.__version__})")


def golden(export_dir, out_path):
    torch.set_num_threads(1)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        export_dir, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    vocab = model.config.vocab_size
    rng = np.random.default_rng(30)
    lines = []
    for length in (8, 16, 24):
        tokens = [int(t) for t in rng.integers(3, vocab, size=length)]
        with torch.no_grad():
            logits = model(torch.tensor([tokens])).logits[0].to(torch.float32)
        rows = ",".join("[" + ",".join(str(np.float32(v)) for v in row) + "]"
                        for row in logits.tolist())
        prompt = "token ids: " + " ".join(str(t) for t in tokens)
        lines.append('{"prompt": %s, "tokens": %s, "logits": [%s]}'
                     % (json.dumps(prompt), json.dumps(tokens), rows))
    with open(out_path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {out_path}: transformers {transformers.__version__} logits of {len(lines)} prompts")


if __name__ == "__main__":
    if sys.argv[1:2] == ["two-file-fixture"]:
        two_file_fixture()
    elif sys.argv[1:2] == ["golden"] and len(sys.argv) == 4:
        golden(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
