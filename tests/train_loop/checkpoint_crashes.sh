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
    partial=$(grep -c "removed the partial checkpoint" "$work/$name.resume.log" || true)
    echo "$name: resumed from checkpoint 2 (partial checkpoints removed: $partial), step 6" \
      "bit-identical to the uninterrupted run"
  done
done
echo "checkpoint_crashes: OK"
