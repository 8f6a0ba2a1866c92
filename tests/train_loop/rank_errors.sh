#!/usr/bin/env bash
# Issue #34: errors that only some ranks see, and work that only one rank does.
#  - N2: a bad file on rank 1 only (rank 0 healthy) is printed once, naming rank 1, and ends
#    every rank within 10 s (it used to print nothing and wait for the watchdog);
#  - the same bad file on every rank is printed once, without a rank, and no rank aborts;
#  - the tokenized corpus cache every rank reads must be the one rank 0 wrote;
#  - N3: rank 0 alone tokenizing a corpus for longer than collective_timeout_seconds is slow, not
#    stuck (its heartbeats keep rank 1's watchdog quiet): the job trains and saves.
#   rank_errors.sh <build dir> <source dir>
set -euo pipefail
src=$2
source "$src/tests/support/expect_failure.sh"
failure_test_setup "$1" train_loop/rank_errors
fixture=$src/tests/fixtures/tiny_llama
mpmd=(timeout 60 mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1
  -x OPENBLAS_NUM_THREADS=1)
decode=(decode "$src/configs/inference.yml" max_prefill_predict_length=16 max_target_length=32
  per_device_batch_size=1 prompt="1 2 3" collective_timeout_seconds=600)

# A truncated model.safetensors, seen by rank 1 alone.
mkdir -p "$work/truncated"
cp "$fixture/config.json" "$work/truncated/"
head -c 4000 "$fixture/model.safetensors" > "$work/truncated/model.safetensors"
expect_failure "$work/rank1_only.log" 10 "[rank 1]" \
  "${mpmd[@]}" -np 1 "$maxctx" "${decode[@]}" load_parameters_path="$fixture" \
  : -np 1 "$maxctx" "${decode[@]}" load_parameters_path="$work/truncated"
grep -q "maxctx: error: \[rank 1\] .*model.safetensors" "$work/rank1_only.log" ||
  { echo "FAIL rank1_only: the line does not name the file"; cat "$work/rank1_only.log"; exit 1; }

# The same file on every rank: one line, from rank 0, no abort.
expect_failure "$work/every_rank.log" 10 "model.safetensors" \
  "${mpirun[@]}" "$maxctx" "${decode[@]}" load_parameters_path="$work/truncated"
if grep -q -e "\[rank " -e "MPI_ABORT" "$work/every_rank.log"; then
  echo "FAIL every_rank: an error every rank shares was printed per rank or aborted"
  cat "$work/every_rank.log"; exit 1
fi
# The data cache: rank 1 sees another run directory (no checkpoints, so no resume to compare), and
# not the corpus rank 0 tokenized: one line naming rank 1, before any step.
mkdir -p "$work/cache/rank0" "$work/cache/rank1"
cache_train=(train "$src/configs/base.yml" model_name=maxctx-tiny override_model_config=true
  vocab_size=1000 max_target_length=64 steps=2 per_device_batch_size=1 ici_fsdp_parallelism=1
  ici_data_parallelism=2 enable_checkpointing=false dataset_type=hf hf_path=text
  hf_train_files="$src/tests/fixtures/text_corpus/train.txt"
  tokenizer_path="$src/tests/fixtures/tokenizer/docs_spm.model" run_name=cache)
expect_failure "$work/cache.log" 10 "rank 1: token file" \
  "${mpmd[@]}" -np 1 "$maxctx" "${cache_train[@]}" base_output_directory="$work/cache/rank0" \
  : -np 1 "$maxctx" "${cache_train[@]}" base_output_directory="$work/cache/rank1"

# A corpus rank 0 tokenizes for a few seconds (about 4 MB) with a 1 s collective timeout.
python3 - "$src/tests/fixtures/tokenizer/corpus.txt" "$work/corpus.txt" << 'PY'
import random, sys
random.seed(1)
words = open(sys.argv[1]).read().split()
with open(sys.argv[2], "w") as f:
    for _ in range(10000):
        f.write(" ".join(random.choice(words) for _ in range(60)) + "\n")
PY
if ! "${mpirun[@]}" "$maxctx" train "$src/configs/base.yml" model_name=maxctx-tiny \
  override_model_config=true vocab_size=1000 max_target_length=64 steps=2 \
  per_device_batch_size=1 ici_fsdp_parallelism=1 ici_data_parallelism=2 checkpoint_period=2 \
  dataset_type=hf hf_path=text hf_train_files="$work/corpus.txt" \
  tokenizer_path="$src/tests/fixtures/tokenizer/docs_spm.model" base_output_directory="$work" \
  run_name=slow_root collective_timeout_seconds=1 > "$work/slow_root.log" 2>&1; then
  echo "FAIL slow_root: the watchdog took rank 0's tokenizing for a stuck rank"
  grep -v "^Config" "$work/slow_root.log" | tail; exit 1
fi
[[ -d $work/slow_root/checkpoints/2 ]] || { echo "FAIL slow_root: no checkpoint 2"; exit 1; }
echo "slow_root: tokenized past collective_timeout_seconds = 1 and trained"
echo "rank_errors: OK"
