#!/usr/bin/env bash
# An error that only rank 0 sees (it alone writes the run directory, the metrics file,
# checkpoints, bench-inference's log, a trace, a GGUF file's converted form; every output path is
# checked before the work starts) ends every rank: with 2 ranks each case must exit
# non-zero within 60 s (it used to hang the other rank in its next collective), print one
# "maxctx: error" line, and never end in std::terminate (tests/support/expect_failure.sh).
#   rank_failures.sh <build dir> <source dir>
set -euo pipefail
src=$2
source "$src/tests/support/expect_failure.sh"
failure_test_setup "$1" train_loop/rank_failures
train=(train "$src/configs/base.yml" model_name=maxctx-tiny max_target_length=64 steps=3
  per_device_batch_size=1 ici_fsdp_parallelism=1 ici_data_parallelism=2)

# The metrics file cannot be opened (a directory of its name): refused before the run starts.
mkdir -p "$work/metrics_dir/run/metrics.jsonl"
expect_failure "$work/metrics_file.log" 60 "metrics.jsonl' cannot be written: it is a directory" \
  "${mpirun[@]}" "$maxctx" "${train[@]}" enable_checkpointing=false \
  base_output_directory="$work/metrics_dir" run_name=run

# metrics.jsonl is a symlink (issue #34 N7): refused, its target left as it was.
mkdir -p "$work/metrics_link/run"
echo "precious" > "$work/precious.txt"
ln -s "$work/precious.txt" "$work/metrics_link/run/metrics.jsonl"
expect_failure "$work/metrics_link.log" 60 "it is a symlink" \
  "${mpirun[@]}" "$maxctx" "${train[@]}" enable_checkpointing=false \
  base_output_directory="$work/metrics_link" run_name=run
[[ $(cat "$work/precious.txt") == precious ]] ||
  { echo "FAIL: the metrics symlink's target was written"; exit 1; }

# The run directory is a symlink (issue #34 N7): refused before anything is written through it,
# and with allow_symlinked_run_directory=true the run goes ahead.
mkdir -p "$work/run_link/elsewhere"
ln -s "$work/run_link/elsewhere" "$work/run_link/run"
expect_failure "$work/run_link.log" 60 "run_link/run' is a symlink" \
  "${mpirun[@]}" "$maxctx" "${train[@]}" enable_checkpointing=false \
  base_output_directory="$work/run_link" run_name=run
[[ -z $(ls -A "$work/run_link/elsewhere") ]] ||
  { echo "FAIL: files were written through the symlinked run directory"; exit 1; }
"${mpirun[@]}" "$maxctx" "${train[@]}" enable_checkpointing=false \
  base_output_directory="$work/run_link" run_name=run allow_symlinked_run_directory=true \
  > "$work/run_link_allowed.log" 2>&1 ||
  { echo "FAIL: allow_symlinked_run_directory=true was refused"; tail "$work/run_link_allowed.log"; exit 1; }

# The run directory cannot be created (rank 0 only sees it): /proc, and under a file.
expect_failure "$work/run_directory.log" 60 "run_name) '/proc/maxctx_no_such_dir/run' cannot be written" \
  "${mpirun[@]}" "$maxctx" "${train[@]}" enable_checkpointing=false \
  base_output_directory=/proc/maxctx_no_such_dir run_name=run
touch "$work/a_file"
expect_failure "$work/run_under_file.log" 60 "a_file/run' cannot be written: '$work/a_file' is not a directory" \
  "${mpirun[@]}" "$maxctx" "${train[@]}" base_output_directory="$work/a_file" run_name=run
# A checkpoints/ that is a file: refused at the start, not at the first save.
mkdir -p "$work/checkpoints_file/run" && touch "$work/checkpoints_file/run/checkpoints"
expect_failure "$work/checkpoints_file.log" 60 "checkpoints '$work/checkpoints_file/run/checkpoints' is not a directory" \
  "${mpirun[@]}" "$maxctx" "${train[@]}" base_output_directory="$work/checkpoints_file" run_name=run

# Every other command's outputs, checked before its work (one process each: export runs alone;
# probe-hardware's profile, decode's profiler trace, and the directory a GGUF file is converted
# into).
one=(timeout 60)
expect_failure "$work/export_dir.log" 60 "base_output_directory '$work/a_file/export' cannot be written" \
  "${one[@]}" "$maxctx" export "$src/configs/base.yml" \
  load_parameters_path="$src/tests/fixtures/tiny_llama" base_output_directory="$work/a_file/export"
expect_failure "$work/probe_file.log" 60 "probe-hardware's output file '$work/a_file/p.yml' cannot be written" \
  "${mpirun[@]}" "$maxctx" probe-hardware "$work/a_file/p.yml"
decode=(decode "$src/configs/base.yml" per_device_batch_size=1 max_prefill_predict_length=8
  max_target_length=12 prompt="1 2 3")
expect_failure "$work/decode_trace.log" 60 "the profiler's trace '$work/a_file/maxctx_decode/trace.json' cannot be written" \
  "${mpirun[@]}" "$maxctx" "${decode[@]}" load_parameters_path="$src/tests/fixtures/tiny_llama" \
  profiler=xplane base_output_directory="$work/a_file"
expect_failure "$work/gguf_dir.log" 60 "(base_output_directory/gguf) '$work/a_file/gguf' cannot be written" \
  "${mpirun[@]}" "$maxctx" "${decode[@]}" \
  load_parameters_path="$src/tests/fixtures/gguf/tiny_llama_q8_rows.gguf" base_output_directory="$work/a_file"

# bench-inference's log cannot be written.
expect_failure "$work/bench_log.log" 60 "cannot be written" \
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
  expect_failure "$work/checkpoint_disk_full.log" 60 "No space left on device" \
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
