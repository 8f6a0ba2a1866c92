#!/usr/bin/env bash
# Fault injection (MAXCTX_FAULT, core/fault_injection.h) on a 2-rank training run: a failed
# checkpoint write, a failed allocation, a rank that stops before a collective (the collective
# watchdog's case) and a killed rank each end the job on every rank within 10 s with one clear
# line, leave no partial checkpoint, keep the metrics logged before the last checkpoint, and the
# last good checkpoint resumes to the same bits as an uninterrupted run (issue #21).
#   fault_injection.sh <build dir> <source dir>
set -euo pipefail
src=$2
source "$src/tests/support/expect_failure.sh"
failure_test_setup "$1" train_loop/fault_injection
# Saves are written before training goes on (async_checkpointing=false), so that checkpoint 2
# is committed before any fault of step 3 strikes; checkpoint_crashes.sh kills ranks in the
# middle of background saves.
train=(train "$src/configs/base.yml" model_name=maxctx-tiny max_target_length=64 steps=6
  per_device_batch_size=1 ici_fsdp_parallelism=1 ici_data_parallelism=2 checkpoint_period=2
  async_checkpointing=false base_output_directory="$work")

# The uninterrupted run, keeping only its 2 newest checkpoints (max_num_checkpoints_to_keep).
"${mpirun[@]}" "$maxctx" "${train[@]}" run_name=reference max_num_checkpoints_to_keep=2 \
  > "$work/reference.log" 2>&1 || { echo "FAIL: reference run"; tail "$work/reference.log"; exit 1; }
kept=$(ls "$work/reference/checkpoints" | sort -n | tr '\n' ' ')
[[ $kept == "4 6 " ]] || { echo "FAIL: max_num_checkpoints_to_keep=2 kept '$kept'"; exit 1; }

# Resumes run <name> without a fault and compares its final checkpoint with the reference's.
resume_matches_reference() {
  local name=$1
  "${mpirun[@]}" "$maxctx" "${train[@]}" run_name="$name" > "$work/$name.resume.log" 2>&1 ||
    { echo "FAIL: resuming $name"; tail "$work/$name.resume.log"; exit 1; }
  grep -q "resuming from checkpoint 2" "$work/$name.resume.log" ||
    { echo "FAIL: $name did not resume from checkpoint 2"; tail "$work/$name.resume.log"; exit 1; }
  for file in index.json $(cd "$work/reference/checkpoints/6" && ls shard-*.safetensors); do
    cmp "$work/reference/checkpoints/6/$file" "$work/$name/checkpoints/6/$file" ||
      { echo "FAIL: $name resumed to different bits in $file"; exit 1; }
  done
  echo "$name: resumed from checkpoint 2, step 6 bit-identical to the uninterrupted run"
}

# Only checkpoint 2 survives the fault (nothing half-written), and the metrics of the steps it
# covers were flushed with it.
only_checkpoint_2() {
  local name=$1
  local left
  left=$(ls -A "$work/$name/checkpoints" | tr '\n' ' ')
  [[ $left == "2 " ]] || { echo "FAIL: $name left '$left' in checkpoints/"; exit 1; }
  local logged
  logged=$(wc -l < "$work/$name/metrics.jsonl")
  ((logged >= 2)) || { echo "FAIL: $name: $logged metric lines on disk, expected >= 2"; exit 1; }
}

# Rank 0's part of the checkpoint of step 4 fails once its shard file is written (in the
# background): every rank ends with rank 0's line, and the failed save's directory is removed.
expect_failure "$work/write.log" 10 "rank 0: injected fault (MAXCTX_FAULT): the checkpoint write of step 4 fails" \
  "${mpirun[@]}" -x MAXCTX_FAULT=rank=0,step=4,kind=write "$maxctx" "${train[@]}" run_name=write
only_checkpoint_2 write
resume_matches_reference write

# Rank 1's allocation fails as step 3 begins: that rank alone knows, MPI_Abort ends the job.
expect_failure "$work/alloc.log" 10 "[rank 1] out of memory" \
  "${mpirun[@]}" -x MAXCTX_FAULT=rank=1,step=3,kind=alloc "$maxctx" "${train[@]}" run_name=alloc
only_checkpoint_2 alloc

# Rank 1 stops before step 3's collectives; rank 0's watchdog names the collective it waits in.
expect_failure "$work/collective.log" 10 \
  "[rank 0] collective all_reduce over axis data (2 ranks) has waited" \
  "${mpirun[@]}" -x MAXCTX_FAULT=rank=1,step=3,kind=collective "$maxctx" "${train[@]}" \
  run_name=collective collective_timeout_seconds=2
only_checkpoint_2 collective

# Rank 1 is killed (SIGKILL) as step 3 begins: mpirun's notice is the one line.
FAILURE_LINE="exited on signal 9" expect_failure "$work/kill.log" 10 "rank 1" \
  "${mpirun[@]}" -x MAXCTX_FAULT=rank=1,step=3,kind=kill "$maxctx" "${train[@]}" run_name=kill
only_checkpoint_2 kill
resume_matches_reference kill

# A malformed switch is one line, not ignored.
expect_failure "$work/malformed.log" 10 "kind = 'explode' is not one of" \
  "${mpirun[@]}" -x MAXCTX_FAULT=rank=1,step=3,kind=explode "$maxctx" "${train[@]}" \
  run_name=malformed
echo "fault_injection: OK"
