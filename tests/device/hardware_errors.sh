#!/usr/bin/env bash
# hardware= errors on 2 ranks: hardware=gpu where no rank has a GPU (no emulation; a build
# without CUDA says it has no cuda backend), hardware=tpu, a Mixtral block on hardware=gpu. Each
# ends every rank non-zero within 30 s with one "maxctx: error" line naming the problem.
#   hardware_errors.sh <build dir> <source dir>
set -euo pipefail
src=$2
source "$src/tests/support/expect_failure.sh"
failure_test_setup "$1" device/hardware_errors
train=(train "$src/configs/base.yml" max_target_length=64 steps=1
  ici_fsdp_parallelism=1 ici_data_parallelism=2 per_device_batch_size=1
  base_output_directory="$work")

if [[ -n ${MAXCTX_EMULATE_GPU:-} ]]; then
  echo "FAIL: MAXCTX_EMULATE_GPU is set in the environment; this test needs it unset"; exit 1
fi
if grep -q 'MAXCTX_CUDA:BOOL=ON' "$1/CMakeCache.txt" && nvidia-smi -L > /dev/null 2>&1; then
  echo "this machine has a GPU: the no-GPU case does not apply"
else
  # "find no GPU" with the CUDA backend built, "no cuda backend" without it.
  FAILURE_LINE="maxctx: error: hardware=gpu" expect_failure "$work/gpu_without_gpu.log" 30 \
    "hardware=gpu:" "${mpirun[@]}" "$maxctx" "${train[@]}" model_name=maxctx-tiny run_name=gpu hardware=gpu
  grep -q -e "find no GPU" -e "this build has no cuda backend" "$work/gpu_without_gpu.log" || {
    echo "FAIL: the no-GPU line names neither cause"; cat "$work/gpu_without_gpu.log"; exit 1; }
fi
expect_failure "$work/tpu.log" 30 "hardware=tpu: maxctx has no TPU backend" "${mpirun[@]}" \
  "$maxctx" "${train[@]}" model_name=maxctx-tiny run_name=tpu hardware=tpu
expect_failure "$work/mixtral_gpu.log" 30 "not on hardware=gpu yet" "${mpirun[@]}" \
  -x MAXCTX_EMULATE_GPU=1 "$maxctx" "${train[@]}" run_name=mixtral hardware=gpu \
  model_name=mixtral-tiny
for name in gpu tpu mixtral; do
  if [[ -e $work/$name ]]; then echo "FAIL $name: left $work/$name behind"; exit 1; fi
done
echo "hardware errors: one line each, every rank non-zero"
