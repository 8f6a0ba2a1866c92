#!/usr/bin/env bash
# An error that only rank 0 sees (it alone writes the run directory, the metrics file,
# checkpoints and bench-inference's log) ends every rank: with 2 ranks each case must exit
# non-zero within 60 s (it used to hang the other rank in its next collective), print one
# "maxctx: error" line, and never end in std::terminate.
#   rank_failures.sh <build dir> <source dir>
set -euo pipefail
build=$1
src=$2
maxctx=$build/maxctx
work=$build/tests/train_loop/rank_failures
rm -rf "$work"
mkdir -p "$work"
mpirun=(timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=1)
train=(train "$src/configs/base.yml" model_name=maxctx-tiny max_target_length=64 steps=3
  per_device_batch_size=1 ici_fsdp_parallelism=1 ici_data_parallelism=2)

expect_clean_failure() {  # expect_clean_failure <name> <expected message part> <command ...>
  local name=$1 part=$2
  shift 2
  local start=$SECONDS rc=0
  "$@" > "$work/$name.log" 2>&1 || rc=$?
  local took=$((SECONDS - start))
  if [[ $rc == 0 || $rc == 124 ]]; then
    echo "FAIL $name: exit $rc after ${took}s (0: no error; 124: hung)"; tail -5 "$work/$name.log"; exit 1
  fi
  if grep -q "terminate called" "$work/$name.log"; then
    echo "FAIL $name: std::terminate"; exit 1
  fi
  local lines
  lines=$(grep -c "maxctx: error" "$work/$name.log" || true)
  if [[ $lines != 1 ]] || ! grep -q "$part" "$work/$name.log"; then
    echo "FAIL $name: expected one 'maxctx: error' line with '$part'"; cat "$work/$name.log"; exit 1
  fi
  echo "$name: exit $rc in ${took}s: $(grep "maxctx: error" "$work/$name.log")"
}

# The metrics file cannot be opened (a directory of its name).
mkdir -p "$work/metrics_dir/run/metrics.jsonl"
expect_clean_failure metrics_file "cannot open the metrics file" \
  "${mpirun[@]}" "$maxctx" "${train[@]}" enable_checkpointing=false \
  base_output_directory="$work/metrics_dir" run_name=run

# The run directory cannot be created (a std::filesystem error on rank 0 only).
expect_clean_failure run_directory "cannot create directories" \
  "${mpirun[@]}" "$maxctx" "${train[@]}" enable_checkpointing=false \
  base_output_directory=/proc/maxctx_no_such_dir run_name=run

# bench-inference's log cannot be written.
expect_clean_failure bench_log "cannot be written" \
  "${mpirun[@]}" "$maxctx" bench-inference "$src/configs/inference.yml" model_name=maxctx-tiny \
  max_prefill_predict_length=16 max_target_length=32 inference_microbenchmark_prefill_lengths=16 \
  inference_microbenchmark_loop_iters=2 per_device_batch_size=1 \
  inference_microbenchmark_log_file_path=/proc/maxctx_no_such_dir/log.json

# Disk full while rank 0 writes a checkpoint: a 200 KiB tmpfs (needs root and mount; skipped
# where the machine does not allow it).
small=$work/small_disk
mkdir -p "$small"
if mount -t tmpfs -o size=200k tmpfs "$small" 2> /dev/null; then
  trap 'umount "$small" 2> /dev/null || true' EXIT
  expect_clean_failure checkpoint_disk_full "No space left on device" \
    "${mpirun[@]}" "$maxctx" "${train[@]}" enable_checkpointing=true checkpoint_period=2 \
    base_output_directory="$small" run_name=run
  # Nothing half-written: no checkpoint directory, no temporary one.
  if [[ -n $(ls -A "$small/run/checkpoints") ]]; then
    echo "FAIL: a disk-full checkpoint left files behind"; ls -la "$small/run/checkpoints"; exit 1
  fi
else
  echo "checkpoint_disk_full: skipped (cannot mount a tmpfs here)"
fi
echo "rank_failures: OK"
