#!/usr/bin/env bash
# The prepared GPU run of issue #16 (docs/gpu.md): on a machine with an NVIDIA GPU, runs every
# GPU check in one go and writes one JSON report; on a machine without one it writes a report
# saying so and exits 2 within seconds (tests/scripts/gpu_check_script.sh checks that path).
#
#   scripts/gpu-check.sh <report.json> [<bin dir>]
#
# <bin dir> holds maxctx and the test and bench binaries, flat (gpu-carry/bin, made by
# scripts/gpu-carry.sh) or as a build tree (build/, build/tests/*/, build/bench/*/); default:
# gpu-carry/bin when it exists, else build. A binary that is not there is recorded as missing.
#
# Steps, in order (each bounded by `timeout`, and all of them by MAXCTX_GPU_CHECK_BUDGET seconds,
# default 450, so that one hang cannot eat the lease): the environment (GPU, driver, MPI, torch,
# transformers, `ldd` of every binary); the GPU tests (cuda_kernels_test, cuda_attention_test,
# cuda_conformance_test, nccl_communicator_test at np 1); the attention benchmark beside torch's SDPA and the copy rate;
# a tiny-model training run with hardware=gpu against hardware=cpu (fp32 losses within 1e-4,
# relative); 2 ranks sharing the GPU with context=2, all_gather and ring, against 1 rank;
# check-logits on the fixtures with hardware=gpu; a training step of llama-1.5b at S = 8192 and
# 32768 beside Hugging Face transformers; decode at 32K context in GB/s. A failing step is
# recorded (status, exit code, its log's tail) and the next one runs. Exit: 0 every step passed
# or was skipped, 1 some step failed or timed out, 2 no GPU.
set -uo pipefail

if [ $# -lt 1 ]; then
  echo "usage: $0 <report.json> [<bin dir>]" >&2
  exit 64
fi
report=$1
src=$(cd "$(dirname "$0")/.." && pwd)
bin=${2:-}
if [ -z "$bin" ]; then
  if [ -d "$src/gpu-carry/bin" ]; then bin=$src/gpu-carry/bin; else bin=$src/build; fi
fi
py=(python3 "$src/scripts/gpu/check_report.py")
start=$(date +%s)
deadline=$((start + ${MAXCTX_GPU_CHECK_BUDGET:-450}))
work=$(mktemp -d "${TMPDIR:-/tmp}/maxctx_gpu_check.XXXXXX")
steps=$work/steps
mkdir -p "$steps" "$(dirname "$report")"
# The shared libraries carried beside the binaries (gpu-carry/lib; MAXCTX_GPU_CARRY_LIBS names
# another folder) reach maxctx's processes only, never python/torch or mpirun itself: they are
# this build machine's versions, older than some of the lent machine's own.
carry_libs=${MAXCTX_GPU_CARRY_LIBS:-}
if [ -z "$carry_libs" ] && [ -d "$bin/../lib" ]; then carry_libs=$(cd "$bin/../lib" && pwd); fi
rank_libs=${carry_libs:+$carry_libs:}${LD_LIBRARY_PATH:-}
direct=(env LD_LIBRARY_PATH="$rank_libs")
mpirun=(mpirun --allow-run-as-root --oversubscribe -x LD_LIBRARY_PATH="$rank_libs"
  -x OMP_NUM_THREADS=4 -x OPENBLAS_NUM_THREADS=1)

# The path of binary <name> under $bin, or nothing.
find_bin() {
  local name=$1 candidate
  for candidate in "$bin/$name" "$bin"/tests/*/"$name" "$bin"/bench/*/"$name"; do
    if [ -x "$candidate" ] && [ -f "$candidate" ]; then
      echo "$candidate"
      return 0
    fi
  done
  return 1
}

step_count=0
# record <name> <status> <seconds> <rc> [note]: one step's record, its log being $work/<name>.log.
record() {
  step_count=$((step_count + 1))
  "${py[@]}" step "$(printf '%s/%02d_%s.step.json' "$steps" "$step_count" "$1")" "$1" "$2" "$3" \
    "$4" "$work/$1.log" "${5:-}"
}

# data <name>: the file a step's numbers go to (assemble puts it under the step's "data").
data() { printf '%s/%02d_%s.data.json' "$steps" "$((step_count + 1))" "$1"; }

# run_step <name> <timeout s> <command...>: runs the command bounded by its timeout and by what
# is left of the budget, output in $work/<name>.log; exit 0 passed, 77 skipped (the GPU tests'
# "not here"), 124/137 timeout, else failed. Returns the command's exit code.
run_step() {
  local name=$1 limit=$2
  shift 2
  local left=$((deadline - $(date +%s)))
  if [ "$left" -lt 20 ]; then
    echo "out of the time budget" > "$work/$name.log"
    record "$name" skipped 0 0 "not run: the ${MAXCTX_GPU_CHECK_BUDGET:-450} s budget is spent"
    return 125
  fi
  [ "$limit" -gt $((left - 10)) ] && limit=$((left - 10))
  local t0 t1 rc status
  t0=$(date +%s.%N)
  timeout -k 5 "$limit" "$@" > "$work/$name.log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  case $rc in
    0) status=passed ;;
    77) status=skipped ;;
    124 | 137) status=timeout ;;
    *) status=failed ;;
  esac
  record "$name" "$status" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')" "$rc" \
    "$([ $status = timeout ] && echo "killed after $limit s")"
  return $rc
}

missing() {  # missing <name> <binary>
  echo "$2 not found under $bin" > "$work/$1.log"
  record "$1" missing 0 0 "$2 is not under $bin (not built, or not carried)"
}

# ---- environment ---------------------------------------------------------------------------
env_json=$work/environment.json
gpu_line=""
smi=${MAXCTX_GPU_CHECK_NVIDIA_SMI:-nvidia-smi}  # a test names a stand-in (tests/gpu_check/)
if command -v "$smi" > /dev/null 2>&1; then
  gpu_line=$("$smi" --query-gpu=name,driver_version,memory.total,pci.bus_id \
    --format=csv,noheader 2> /dev/null | head -1)
fi
binaries=(maxctx cuda_kernels_test cuda_attention_test cuda_conformance_test nccl_communicator_test
  attention_bench)
{
  echo "gpu_line=$gpu_line"
  echo "mpi=$(mpirun --version 2> /dev/null | head -1)"
  echo "host=$(hostname)"
  echo "bin_dir=$bin"
  echo "ld_library_path=${LD_LIBRARY_PATH:-}"
  echo "carried_libraries=$carry_libs"
  for b in "${binaries[@]}"; do
    if path=$(find_bin "$b"); then
      echo "binary.$b=$path"
      echo "unresolved.$b=$("${direct[@]}" ldd "$path" 2> /dev/null | grep 'not found' | awk '{print $1}' | tr '\n' ' ')"
    else
      echo "binary.$b="
    fi
  done
  echo "python=$(python3 --version 2>&1)"
  echo "torch=$(timeout 60 python3 -c 'import torch; print(torch.__version__)' 2> /dev/null)"
  echo "transformers=$(timeout 60 python3 -c 'import transformers; print(transformers.__version__)' 2> /dev/null)"
} > "$work/environment.txt"
python3 - "$work/environment.txt" "$env_json" <<'PY'
import json, sys
env = {"binaries": {}, "unresolved_libraries": {}}
for line in open(sys.argv[1]):
    key, _, value = line.rstrip("\n").partition("=")
    value = value.strip()
    if key.startswith("binary."):
        env["binaries"][key[7:]] = value or None
    elif key.startswith("unresolved."):
        if value:
            env["unresolved_libraries"][key[11:]] = value.split()
    else:
        env[key] = value or None
gpu = env.pop("gpu_line")
if gpu:
    fields = [f.strip() for f in gpu.split(",")]
    env["gpu"] = dict(zip(["name", "driver", "memory", "pci_bus_id"], fields))
else:
    env["gpu"] = None
json.dump(env, open(sys.argv[2], "w"), indent=1)
PY

if [ -z "$gpu_line" ]; then
  "${py[@]}" assemble "$steps" "$env_json" "$report" > /dev/null
  echo "gpu-check: no GPU here (nvidia-smi finds none): wrote $report"
  rm -rf "$work"
  exit 2
fi
echo "gpu-check: $gpu_line; binaries from $bin; report $report"

# ---- GPU tests: kernels and attention against the CPU reference, NCCL against MPI ------------
for t in cuda_kernels_test cuda_attention_test cuda_conformance_test; do
  if path=$(find_bin $t); then
    run_step $t 120 "${direct[@]}" "$path" --gtest_output="json:$work/$t.json"
    [ -f "$work/$t.json" ] && "${py[@]}" gtest "$work/$t.json" "$(printf '%s/%02d_%s.data.json' "$steps" "$step_count" $t)"
  else
    missing $t $t
  fi
done
if path=$(find_bin nccl_communicator_test); then
  run_step nccl_communicator_test 90 "${mpirun[@]}" -np 1 "$path" \
    --gtest_output="json:$work/nccl_communicator_test.json"
  [ -f "$work/nccl_communicator_test.json" ] && "${py[@]}" gtest "$work/nccl_communicator_test.json" \
    "$(printf '%s/%02d_%s.data.json' "$steps" "$step_count" nccl_communicator_test)"
else
  missing nccl_communicator_test nccl_communicator_test
fi

# After a step: its numbers from <file> (a JSON object, or a line of one, in the output).
keep_json() {  # keep_json <step name> <file>
  "${py[@]}" copy-json "$2" "$(printf '%s/%02d_%s.data.json' "$steps" "$step_count" "$1")" \
    > /dev/null || true
}

# ---- attention: maxctx's kernel beside torch's SDPA, same shapes, same FLOP counting ----------
run_step torch_sdpa_bench 120 python3 "$src/scripts/gpu/torch_sdpa_bench.py" 8192,32768
keep_json torch_sdpa_bench "$work/torch_sdpa_bench.log"
if path=$(find_bin attention_bench); then
  run_step attention_bench 120 "${direct[@]}" "$path" --seq 8192,32768
  keep_json attention_bench "$work/attention_bench.log"
else
  missing attention_bench attention_bench
fi

# ---- maxctx on the GPU: tiny runs against the CPU and against 1 rank --------------------------
maxctx=$(find_bin maxctx) || maxctx=""
runs=$work/runs
tiny=(model_name=maxctx-tiny dataset_type=synthetic max_target_length=128 steps=6 log_period=1
  learning_rate=3e-3 warmup_steps_fraction=0.2 ici_fsdp_parallelism=1 dtype=float32
  weight_dtype=float32 base_output_directory="$runs" checkpoint_period=1000)
train_tiny() {  # train_tiny <run name> <ranks> <key=value ...>
  local name=$1 np=$2
  shift 2
  run_step "$name" 60 "${mpirun[@]}" -np "$np" "$maxctx" train "$src/configs/base.yml" \
    "${tiny[@]}" run_name="$name" per_device_batch_size=$((4 / np)) "$@"
}
compare() {  # compare <step name> <run a> <run b>: losses within 1e-4 (relative, fp32)
  run_step "$1" 30 "${py[@]}" compare-losses "$runs/$2/metrics.jsonl" "$runs/$3/metrics.jsonl" \
    1e-4 "$(data "$1")"
}
run_hf_step() {
  run_step hf_llama_step 200 python3 "$src/scripts/gpu/hf_llama_step_bench.py" 8192,32768
  keep_json hf_llama_step "$work/hf_llama_step.log"
}
if [ -n "$maxctx" ]; then
  train_tiny tiny_gpu 1 hardware=gpu
  train_tiny tiny_cpu 1 hardware=cpu
  compare tiny_gpu_vs_cpu tiny_gpu tiny_cpu
  for strategy in all_gather ring; do
    train_tiny "tiny_gpu_context2_$strategy" 2 hardware=gpu ici_context_parallelism=2 \
      context_parallel_strategy=$strategy
    compare "tiny_context2_${strategy}_vs_1_rank" "tiny_gpu_context2_$strategy" tiny_gpu
  done

  # check-logits on the torch fixtures: fp32 within 1e-4, bf16 within the CPU run's bounds.
  fixtures=$src/tests/fixtures
  run_step check_logits_fp32 60 "${mpirun[@]}" -np 1 "$maxctx" check-logits "$src/configs/base.yml" \
    load_parameters_path="$fixtures/tiny_llama" golden_logits_path="$fixtures/tiny_llama/golden_logits.jsonl" \
    ici_fsdp_parallelism=1 hardware=gpu max_kl_div=1e-6 atol=1e-4 rtol=0
  run_step check_logits_bf16 60 "${mpirun[@]}" -np 1 "$maxctx" check-logits "$src/configs/base.yml" \
    load_parameters_path="$fixtures/tiny_llama_bf16" \
    golden_logits_path="$fixtures/tiny_llama_bf16/golden_logits.jsonl" ici_fsdp_parallelism=1 \
    hardware=gpu weight_dtype=bfloat16 dtype=bfloat16 max_kl_div=2e-4 atol=5e-2 rtol=2e-2

  # ---- the ~1.5B Llama: transformers' training step (the anchor), then maxctx's at 8K and
  # 32K, then decode at 32K context -------------------------------------------------------------
  run_hf_step
  for seq in 8192 32768; do
    remat=none
    [ "$seq" -gt 8192 ] && remat=full  # transformers checkpoints every layer at 32K too
    run_step "maxctx_llama_step_S$seq" 150 "${mpirun[@]}" -np 1 "$maxctx" train "$src/configs/base.yml" \
      model_name=llama-1.5b hardware=gpu dtype=bfloat16 max_target_length=$seq \
      per_device_batch_size=1 steps=5 log_period=1 ici_fsdp_parallelism=1 remat_policy=$remat \
      dataset_type=synthetic base_output_directory="$runs" run_name="llama_S$seq" \
      checkpoint_period=1000
    "${py[@]}" train-perf "$runs/llama_S$seq/metrics.jsonl" 2 \
      "$(printf '%s/%02d_%s.data.json' "$steps" "$step_count" "maxctx_llama_step_S$seq")" \
      > /dev/null 2>&1 || true
  done
  run_step maxctx_decode_32k 150 "${mpirun[@]}" -np 1 "$maxctx" bench-inference \
    "$src/configs/inference.yml" model_name=llama-1.5b hardware=gpu dtype=bfloat16 \
    weight_dtype=bfloat16 max_prefill_predict_length=32768 max_target_length=32896 \
    inference_microbenchmark_prefill_lengths=32768 inference_microbenchmark_loop_iters=10 \
    inference_microbenchmark_log_file_path="$work/decode.json"
  [ -f "$work/decode.json" ] && keep_json maxctx_decode_32k "$work/decode.json"
else
  missing maxctx_runs maxctx
  run_hf_step
fi

# ---- the report ------------------------------------------------------------------------------
"${py[@]}" assemble "$steps" "$env_json" "$report"
rc=$?
python3 - "$report" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("gpu-check:", r["status"], r["summary"])
for s in r["steps"]:
    print(f'  {s["name"]:<40} {s["status"]:<8} {s["seconds"]:>7.1f} s')
for name, c in r["comparisons"].items():
    print(f"  {name}: {json.dumps(c)}")
PY
echo "gpu-check: $(($(date +%s) - start)) s; report: $report"
rm -rf "$work"
exit $rc
