#!/usr/bin/env bash
# A rank killed (SIGKILL) at any point of a background checkpoint save, on 2 and 4 ranks (fsdp
# over all of them, so every rank writes a shard): before it writes anything, halfway through
# its file, once its file is complete, and rank 0 with index.json written but the checkpoint
# not yet renamed into place. Every time the job ends on every rank within 10 s, the partial
# checkpoint is never taken for a checkpoint, and a restart removes it, resumes from the last
# committed one and ends with the same bits as an uninterrupted run (issue #30).
#   checkpoint_crashes.sh <build dir> <source dir>
set -euo pipefail
src=$2
source "$src/tests/support/expect_failure.sh"
failure_test_setup "$1" train_loop/checkpoint_crashes

for ranks in 2 4; do
  run=(timeout 60 mpirun --allow-run-as-root --oversubscribe -np "$ranks" -x OMP_NUM_THREADS=1
    -x OPENBLAS_NUM_THREADS=1)
  train=(train "$src/configs/base.yml" model_name=maxctx-tiny max_target_length=64 steps=6
    per_device_batch_size=1 ici_fsdp_parallelism="$ranks" checkpoint_period=2
    async_checkpointing=true base_output_directory="$work/np$ranks")
  "${run[@]}" "$maxctx" "${train[@]}" run_name=reference > "$work/np$ranks.reference.log" 2>&1 ||
    { echo "FAIL: reference run on $ranks ranks"; tail "$work/np$ranks.reference.log"; exit 1; }
  reference=$work/np$ranks/reference/checkpoints/6
  for fault in 1:kill_save_start 1:kill_save_writing 1:kill_save_written 0:kill_save_commit; do
    rank=${fault%%:*}
    kind=${fault#*:}
    name=np${ranks}_$kind
    FAILURE_LINE="exited on signal 9" expect_failure "$work/$name.log" 10 "rank $rank" \
      "${run[@]}" -x MAXCTX_FAULT=rank=$rank,step=4,kind=$kind "$maxctx" "${train[@]}" \
      run_name="$name"
    # Checkpoint 2 is committed (a save waits for the previous one); 4 never became visible.
    steps=$(ls "$work/np$ranks/$name/checkpoints" | grep -v tmp | tr '\n' ' ')
    [[ $steps == "2 " ]] || { echo "FAIL: $name left checkpoints '$steps'"; exit 1; }
    "${run[@]}" "$maxctx" "${train[@]}" run_name="$name" > "$work/$name.resume.log" 2>&1 ||
      { echo "FAIL: resuming $name"; tail "$work/$name.resume.log"; exit 1; }
    grep -q "resuming from checkpoint 2" "$work/$name.resume.log" ||
      { echo "FAIL: $name did not resume from checkpoint 2"; tail "$work/$name.resume.log"; exit 1; }
    if ls "$work/np$ranks/$name/checkpoints" | grep -q tmp; then
      echo "FAIL: $name: the partial checkpoint is still there after the restart"; exit 1
    fi
    for file in index.json $(cd "$reference" && ls shard-*.safetensors); do
      cmp "$reference/$file" "$work/np$ranks/$name/checkpoints/6/$file" ||
        { echo "FAIL: $name resumed to different bits in $file"; exit 1; }
    done
    # Each step's metrics row once (issue #34 N14): the rows the killed run logged past
    # checkpoint 2 are dropped at the restart, which logs those steps again.
    steps_logged=$(grep -o '"step": *[0-9]*' "$work/np$ranks/$name/metrics.jsonl" |
      grep -o '[0-9]*$' | tr '\n' ' ')
    [[ $steps_logged == "0 1 2 3 4 5 " ]] ||
      { echo "FAIL: $name: metrics rows of steps '$steps_logged', expected 0 to 5 once"; exit 1; }
    partial=$(grep -c "removed the partial checkpoint" "$work/$name.resume.log" || true)
    echo "$name: resumed from checkpoint 2 (partial checkpoints removed: $partial), step 6" \
      "bit-identical to the uninterrupted run"
  done
done

# Ranks that see different run directories (node-local disks, a lagging network filesystem;
# issue #34 N1): rank 0 decides the step every rank resumes from, and every rank checks that what
# it read equals rank 0's. Rank 1 sees an empty directory, then one whose latest checkpoint holds
# another data position: each time the job ends with one line naming rank 1.
seen=$work/np2/reference
train2=(train "$src/configs/base.yml" model_name=maxctx-tiny max_target_length=64 steps=8
  per_device_batch_size=1 ici_fsdp_parallelism=2 checkpoint_period=2 run_name=reference)
for case in empty other_data_position; do
  mkdir -p "$work/$case/rank0" "$work/$case/rank1"
  cp -r "$seen" "$work/$case/rank0/reference"
  if [[ $case == other_data_position ]]; then
    cp -r "$seen" "$work/$case/rank1/reference"
    sed -i -E 's/"data_position": ?[0-9]+/"data_position": 5/' \
      "$work/$case/rank1/reference/checkpoints/6/state.json"
    grep -q '"data_position": 5' "$work/$case/rank1/reference/checkpoints/6/state.json" ||
      { echo "FAIL: could not edit the copy's state.json"; exit 1; }
    expected="the starting state this rank read (resuming from checkpoint 6 (data position 5)) differs from rank 0's"
  else
    expected="checkpoint step 6 does not exist"
  fi
  expect_failure "$work/$case.log" 10 "rank 1: $expected" \
    timeout 60 mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 \
    -np 1 "$maxctx" "${train2[@]}" base_output_directory="$work/$case/rank0" : \
    -np 1 "$maxctx" "${train2[@]}" base_output_directory="$work/$case/rank1"
  if [[ -e $work/$case/rank0/reference/checkpoints/8 || -e $work/$case/rank1/reference/checkpoints/8 ]]; then
    echo "FAIL: $case: a checkpoint was written by ranks that disagree"; exit 1
  fi
done
# A fresh start where rank 1 sees another run directory: refused at the start, naming rank 1 (rank
# 0's token file is not there), instead of training until the first save.
mkdir -p "$work/fresh/rank0" "$work/fresh/rank1"
expect_failure "$work/fresh.log" 20 "rank 1: the run directory" \
  timeout 60 mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 \
  -np 1 "$maxctx" "${train2[@]}" base_output_directory="$work/fresh/rank0" : \
  -np 1 "$maxctx" "${train2[@]}" base_output_directory="$work/fresh/rank1"
if [[ -n $(ls -A "$work/fresh/rank0/reference") || -e $work/fresh/rank0/reference/checkpoints ]]; then
  echo "FAIL: fresh: the token file or a checkpoint was left behind"; ls -A "$work/fresh/rank0/reference"; exit 1
fi
echo "checkpoint_crashes: OK"
