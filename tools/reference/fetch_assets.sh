#!/usr/bin/env bash
# Fetches the tokenizer files other projects ship into a cache outside the repository (they are
# never committed): the `maxtext` wheel's assets/tokenizers/ (SentencePiece mistral-v1,
# mistral-v3, llama2, gemma, gemma3; Qwen3's tokenizer.json; the Llama 3 tiktoken file).
#
#   tools/reference/fetch_assets.sh [dir]     # dir: $MAXCTX_ASSETS, else ~/.cache/maxctx/assets
#
# Afterwards <dir>/tokenizers/<name> holds each file: the tokenizer conformance test reads them
# (it skips, saying why, while they are absent), and `tokenizer_path=assets/<name>` (MaxText's
# relative asset names) resolves there. Needs pip (any Python 3) and PyPI; idempotent.
set -euo pipefail
dir=${1:-${MAXCTX_ASSETS:-$HOME/.cache/maxctx/assets}}
maxtext_version=0.2.5
python=${PYTHON:-python3}

if [[ -f "$dir/tokenizers/.maxtext-$maxtext_version" ]]; then
  echo "fetch_assets: $dir/tokenizers is already maxtext $maxtext_version's"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" -m pip download --quiet --no-deps --dest "$work" "maxtext==$maxtext_version"
wheel=$(ls "$work"/maxtext-"$maxtext_version"-*.whl)
"$python" - "$wheel" "$dir/tokenizers" <<'PY'
import os, sys, zipfile
wheel, out = sys.argv[1:]
prefix = "maxtext/assets/tokenizers/"
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith(prefix) and not n.endswith("/")]
    for name in names:
        target = os.path.join(out, name[len(prefix):])
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with z.open(name) as src, open(target, "wb") as dst:
            dst.write(src.read())
print(f"fetch_assets: {len(names)} files from {os.path.basename(wheel)} into {out}")
PY
touch "$dir/tokenizers/.maxtext-$maxtext_version"
