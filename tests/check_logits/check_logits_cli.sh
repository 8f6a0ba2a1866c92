#!/usr/bin/env bash
# The maxctx binary's check-logits and export as a user runs them: exit 0 and PASS on the torch
# fixture with 1, 2 and 4 ranks (context = ranks), exit 1 with one error line on a copy of the
# golden file with one logit changed, and the commands' --help.
#   check_logits_cli.sh <build dir> <source dir>
set -euo pipefail
build=$1
src=$2
maxctx=$build/maxctx
fixture=$src/tests/fixtures/tiny_llama
work=$build/tests/check_logits/cli
mkdir -p "$work"
mpirun=(mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1)

check() {  # check <ranks> <golden file> [key=value ...] > output
  local np=$1 golden=$2
  shift 2
  "${mpirun[@]}" -np "$np" "$maxctx" check-logits "$src/configs/base.yml" \
    load_parameters_path="$fixture" golden_logits_path="$golden" \
    ici_context_parallelism="$np" max_kl_div=1e-6 atol=1e-5 rtol=0 "$@"
}

for np in 1 2 4; do
  if ! check "$np" "$fixture/golden_logits.jsonl" > "$work/np$np.log" 2>&1; then
    echo "FAIL: check-logits on $np ranks exited non-zero:"; tail -20 "$work/np$np.log"; exit 1
  fi
  grep -q "check-logits: PASS (2 prompts, 22 tokens)" "$work/np$np.log"
  grep -E "^(Max|prompt)" "$work/np$np.log" | sed "s/^/np $np: /"
done

# The BF16 checkpoint (tiny_llama's weights rounded to bf16, golden logits exact for them):
# weight_dtype=bfloat16 loads it without an f32 copy and, with f32 activations, reproduces the
# golden logits to f32 precision; with dtype=bfloat16 as well (bf16 matmul inputs, MaxText's
# mixed precision) within bf16 tolerances, on 1 and 2 ranks (context=2): activations carry an
# 8-bit mantissa through two layers, measured max |model - golden| 3.1e-2 on logits of O(1-5)
# and KL 6e-5, so atol 5e-2 + rtol 2e-2 and KL 2e-4 (MaxText's checker defaults: 0.1, 0.1).
bf16_fixture=$src/tests/fixtures/tiny_llama_bf16
for np in 1 2; do
  check_bf16() {
    "${mpirun[@]}" -np "$np" "$maxctx" check-logits "$src/configs/base.yml" \
      load_parameters_path="$bf16_fixture" golden_logits_path="$bf16_fixture/golden_logits.jsonl" \
      ici_context_parallelism="$np" weight_dtype=bfloat16 "$@"
  }
  check_bf16 dtype=float32 max_kl_div=1e-6 atol=1e-5 rtol=0 > "$work/bf16_weights_np$np.log" 2>&1 ||
    { echo "FAIL: weight_dtype=bfloat16 on $np ranks"; tail -20 "$work/bf16_weights_np$np.log"; exit 1; }
  grep -q "check-logits: PASS (2 prompts, 22 tokens)" "$work/bf16_weights_np$np.log"
  check_bf16 dtype=bfloat16 max_kl_div=2e-4 atol=5e-2 rtol=2e-2 > "$work/bf16_np$np.log" 2>&1 ||
    { echo "FAIL: dtype=bfloat16 on $np ranks"; tail -20 "$work/bf16_np$np.log"; exit 1; }
  grep -q "check-logits: PASS (2 prompts, 22 tokens)" "$work/bf16_np$np.log"
  grep -E "^(Max|prompt)" "$work/bf16_np$np.log" | sed "s/^/bf16 np $np: /"
done

# bf16 without max_kl_div: MaxText's bf16 bound (0.015) instead of the fp32 default, said once;
# a given max_kl_div is kept.
check_bf16 dtype=bfloat16 > "$work/bf16_default.log" 2>&1 ||
  { echo "FAIL: dtype=bfloat16 with default tolerances"; tail -20 "$work/bf16_default.log"; exit 1; }
grep -q "check-logits: bfloat16, so max_kl_div = 0.015 (MaxText's bf16 bound" "$work/bf16_default.log"
grep -q "(max_kl_div 0.015)" "$work/bf16_default.log"
check_bf16 dtype=bfloat16 max_kl_div=1e-4 > "$work/bf16_given.log" 2>&1
grep -q "(max_kl_div 0.0001)" "$work/bf16_given.log"
! grep -q "so max_kl_div = 0.015" "$work/bf16_given.log"

# load_parameters_path=<file.gguf>: tiny_llama's weights as llama.cpp writes them, in six tensor
# types down to 4 bits (tests/fixtures/gguf), converted once on rank 0 and then reused: the
# logits stay near the F32 goldens (measured max |delta| 0.51, KL 1.1e-2, from the 4-bit tensors).
gguf=$src/tests/fixtures/gguf/tiny_llama_mixed.gguf
rm -rf "$work/gguf_runs"
for run in first second; do
  "${mpirun[@]}" -np 2 "$maxctx" check-logits "$src/configs/base.yml" load_parameters_path="$gguf" \
    golden_logits_path="$fixture/golden_logits.jsonl" base_output_directory="$work/gguf_runs" \
    max_kl_div=2e-2 atol=1 rtol=0 > "$work/gguf_$run.log" 2>&1 ||
    { echo "FAIL: check-logits of the GGUF ($run)"; tail -20 "$work/gguf_$run.log"; exit 1; }
  grep -q "check-logits: PASS (2 prompts, 22 tokens)" "$work/gguf_$run.log"
done
grep -q "21 tensors (2 BF16, 3 F16, 6 F32, 3 Q4_0, 3 Q4_1, 4 Q8_0) dequantized" "$work/gguf_first.log"
grep -q "reusing its Hugging Face form" "$work/gguf_second.log"
# A Mixtral GGUF (tiny_mixtral's weights, experts stacked as llama.cpp's converter writes them,
# F16/Q8_0 in part) on the expert axis: near tiny_mixtral's goldens (measured max |delta| 1.3e-2,
# KL 6.5e-6).
"${mpirun[@]}" -np 2 "$maxctx" check-logits "$src/configs/base.yml" \
  load_parameters_path="$src/tests/fixtures/gguf/tiny_mixtral.gguf" ici_expert_parallelism=2 \
  golden_logits_path="$src/tests/fixtures/tiny_mixtral/golden_logits.jsonl" \
  base_output_directory="$work/gguf_runs" max_kl_div=1e-4 atol=5e-2 rtol=0 \
  > "$work/gguf_mixtral.log" 2>&1 ||
  { echo "FAIL: check-logits of the Mixtral GGUF"; tail -20 "$work/gguf_mixtral.log"; exit 1; }
grep -q "check-logits: PASS (2 prompts, 22 tokens)" "$work/gguf_mixtral.log"

# Top-k goldens (the rows' 3 highest golden logits, from the full goldens): pass on 2 ranks, and
# one swapped id fails in one line.
python3 - "$fixture/golden_logits.jsonl" "$work" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def top(line, k, swap=False):
    ids = [sorted(range(len(r)), key=lambda v: -r[v])[:k] for r in line["logits"]]
    values = [[r[v] for v in i] for r, i in zip(line["logits"], ids)]
    if swap:
        ids[-1][0], ids[-1][1] = ids[-1][1], ids[-1][0]
    return {"prompt": line["prompt"], "tokens": line["tokens"], "top_k_ids": ids,
            "top_k_logits": values}
with open(sys.argv[2] + "/top_k.jsonl", "w") as f:
    for l in lines:
        f.write(json.dumps(top(l, 3)) + "\n")
with open(sys.argv[2] + "/top_k_swapped.jsonl", "w") as f:
    f.write(json.dumps(top(lines[0], 3, swap=True)) + "\n")
PY
check 2 "$work/top_k.jsonl" > "$work/top_k.log" 2>&1 ||
  { echo "FAIL: check-logits of top-k goldens"; tail -20 "$work/top_k.log"; exit 1; }
grep -q "check-logits: PASS (2 prompts, 0 tokens, 22 top-k rows)" "$work/top_k.log"
if check 2 "$work/top_k_swapped.jsonl" > "$work/top_k_swapped.log" 2>&1; then
  echo "FAIL: check-logits passed swapped top-k ids"; exit 1
fi
[[ $(grep -c "maxctx: error" "$work/top_k_swapped.log") == 1 ]]
grep "maxctx: error: check-logits failed: 1 of 10 top-k rows differ" "$work/top_k_swapped.log"

# Row 0's first logit of prompt 0 set to 9: far outside atol.
sed -E '1s/"logits": \[\[[^,]*,/"logits": [[9.0,/' "$fixture/golden_logits.jsonl" > "$work/perturbed.jsonl"
if check 2 "$work/perturbed.jsonl" > "$work/perturbed.log" 2>&1; then
  echo "FAIL: check-logits passed on perturbed logits"; exit 1
fi
grep -q "maxctx: error: check-logits failed: 1 of 2112 logits outside" "$work/perturbed.log"
[[ $(grep -c "maxctx: error" "$work/perturbed.log") == 1 ]]  # printed once, by rank 0
grep "maxctx: error" "$work/perturbed.log"

"$maxctx" --help | grep -q "check-logits"
"$maxctx" --help | grep -q "export"
"$maxctx" check-logits --help | grep -q "atol + rtol\*|golden|"
"$maxctx" export --help | grep -q "base_output_directory=<out>"
echo "check_logits_cli: OK"
