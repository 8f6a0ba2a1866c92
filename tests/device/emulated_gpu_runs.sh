#!/usr/bin/env bash
# Whole runs on the emulated GPU (hardware=gpu, MAXCTX_EMULATE_GPU=1) equal the CPU runs bit for
# bit: the outputs tests/golden/golden.py reads from a run (every step's loss, gradient norm and
# accuracy, the final checkpoint's sha256; check-logits' divergences; decoded token ids) are
# compared as text. The emulated GPU's memory faults on any host access, so a pass also says
# that the run path above kernels/ never touches tensor memory itself.
#   emulated_gpu_runs.sh <build dir> <source dir>
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
maxctx=$build/maxctx
py=(/usr/bin/python3 "$src/tests/golden/golden.py")
fixtures=$src/tests/fixtures
work=$build/tests/device/emulated_gpu_runs
rm -rf "$work"
mkdir -p "$work"
mpirun=(timeout 120 mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1
  -x OPENBLAS_NUM_THREADS=1)

run() {  # run <log> <ranks> <hardware> <maxctx args...>
  local log=$1 np=$2 hardware=$3
  shift 3
  local emulate=()
  [[ $hardware == gpu ]] && emulate=(-x MAXCTX_EMULATE_GPU=1)
  if ! "${mpirun[@]}" -np "$np" "${emulate[@]}" "$maxctx" "$@" hardware="$hardware" > "$log" 2>&1; then
    echo "FAIL: $(basename "$log" .log) exited non-zero: maxctx $* hardware=$hardware"
    grep -v '^Config' "$log" | tail -15
    exit 1
  fi
  if [[ $hardware == gpu ]] && ! grep -q "^hardware=gpu: the emulated GPU" "$log"; then
    echo "FAIL: $(basename "$log" .log) did not run on the emulated GPU"; exit 1
  fi
}

same() {  # same <case>: the CPU's and the emulated GPU's outputs are equal
  if ! diff "$work/$1.cpu.txt" "$work/$1.gpu.txt" > "$work/$1.diff"; then
    echo "FAIL: $1 differs between the CPU and the emulated GPU:"
    cat "$work/$1.diff"
    exit 1
  fi
  echo "$1: equal ($(wc -l < "$work/$1.cpu.txt") values)"
}

"${py[@]}" token-file "$work/tokens.bin"
train_common=(model_name=maxctx-tiny dataset_type=tokens dataset_path="$work/tokens.bin"
  max_target_length=64 learning_rate=3e-3 warmup_steps_fraction=0.2 log_period=1
  checkpoint_period=3 base_output_directory="$work/train")
train() {  # train <case> <ranks> <key=value ...>
  local name=$1 np=$2
  shift 2
  local fsdp=(ici_fsdp_parallelism=1)
  [[ " $* " == *" ici_fsdp_parallelism="* ]] && fsdp=()
  for hardware in cpu gpu; do
    run "$work/$name.$hardware.log" "$np" "$hardware" train "$src/configs/base.yml" \
      "${train_common[@]}" steps=3 run_name="$name.$hardware" per_device_batch_size=$((4 / np)) \
      "${fsdp[@]}" "$@"
    "${py[@]}" train "$work/train/$name.$hardware" "$work/$name.$hardware.txt"
  done
  same "$name"
}
train train_np1 1
train train_np1_accumulation 1 gradient_accumulation_steps=2
train train_context2_all_gather 2 ici_context_parallelism=2 context_parallel_strategy=all_gather
train train_context2_ring 2 ici_context_parallelism=2 context_parallel_strategy=ring
train train_fsdp2 2 ici_fsdp_parallelism=2
train train_tensor2 2 ici_tensor_parallelism=2
train train_context2_ring_bf16 2 ici_context_parallelism=2 context_parallel_strategy=ring \
  dtype=bfloat16 weight_dtype=bfloat16

# The readback rule (issue #32): a training step on a device reads back once per micro-batch (its
# loss sums and accuracy hits) and once for the gradient norm, and waits no more often
# (Kernels::transfer_counts, written to every step's metrics).
readbacks() {  # readbacks <case> <micro-batches>
  /usr/bin/python3 - "$work/train/$1.gpu/metrics.jsonl" "$2" <<'PY'
import json, sys
path, bound = sys.argv[1], int(sys.argv[2]) + 1
for line in open(path):
    m = json.loads(line)
    for key in ("perf/device_readbacks", "perf/device_host_waits"):
        if not 0 < m.get(key, -1) <= bound:
            sys.exit(f"FAIL: step {m['step']} of {path}: {key} = {m.get(key)}, allowed 1..{bound}")
print(f"{path.split('/')[-2]}: at most {bound} readbacks and host waits per step")
PY
}
for name in train_np1 train_context2_all_gather train_context2_ring train_fsdp2 train_tensor2 \
  train_context2_ring_bf16; do
  readbacks "$name" 1
done
readbacks train_np1_accumulation 2

# Host offload (remat_policy=custom with MaxText's per-tensor keys, the v6e recipe's set): on the
# emulated GPU each layer's input, q, k, v and the stream after attention go to host memory after
# its forward and come back before its backward; the CPU keeps them in place. The same bits
# (above), the copies counted as offloads (not readbacks: one synchronize per micro-batch more),
# and less device memory than `full`, which keeps every layer's input on the device.
offload=(remat_policy=custom decoder_layer_input=offload query_proj=offload key_proj=offload
  value_proj=offload out_proj=offload)
train train_offload 1 "${offload[@]}"
train train_offload_context2 2 ici_context_parallelism=2 gradient_accumulation_steps=2 \
  "${offload[@]}"
/usr/bin/python3 - "$work/train" <<'PY'
import json, sys
root = sys.argv[1]
def rows(run):
    return [json.loads(line) for line in open(f"{root}/{run}/metrics.jsonl")]
for run, micro in (("train_offload.gpu", 1), ("train_offload_context2.gpu", 2)):
    for m in rows(run):
        readbacks, waits = m["perf/device_readbacks"], m["perf/device_host_waits"]
        offloads = m.get("perf/device_offloads", 0)
        if not (0 < readbacks <= micro + 1 and 0 < waits <= 2 * micro + 1 and offloads > 0):
            sys.exit(f"FAIL: {run} step {m['step']}: {readbacks} readbacks, {waits} host waits, "
                     f"{offloads} offloads (allowed 1..{micro + 1}, 1..{2 * micro + 1}, > 0)")
full = max(m["perf/device_memory_peak_bytes"] for m in rows("train_np1.gpu"))
offload = max(m["perf/device_memory_peak_bytes"] for m in rows("train_offload.gpu"))
if not offload < full:
    sys.exit(f"FAIL: device memory with offload {offload} B, not below full's {full} B")
print(f"offload: device peak {offload} B vs full {full} B ({offload / full:.3f}); "
      f"{rows('train_offload.gpu')[-1]['perf/device_offloads']:.0f} offloads per step")
PY

# Resuming train_np1 from its step-3 checkpoint (read back into each device's memory) for 2 more
# steps.
for hardware in cpu gpu; do
  run "$work/resume.$hardware.log" 1 "$hardware" train "$src/configs/base.yml" \
    "${train_common[@]}" steps=5 run_name="train_np1.$hardware" per_device_batch_size=4 \
    ici_fsdp_parallelism=1
  grep -q "resuming from checkpoint 3" "$work/resume.$hardware.log" || {
    echo "FAIL: resume on $hardware did not start from checkpoint 3"; exit 1; }
  "${py[@]}" train "$work/train/train_np1.$hardware" "$work/resume.$hardware.txt"
done
same resume

# The staging choice is reported once per axis, on rank 0.
grep -q -x "context axis: 2 ranks on the emulated GPU: collectives over MPI with host staging" \
  "$work/train_context2_ring.gpu.log" || { echo "FAIL: no staging report"; exit 1; }

check() {  # check <case> <ranks> <key=value ...>: check-logits on the tiny_llama fixture
  local name=$1 np=$2
  shift 2
  for hardware in cpu gpu; do
    run "$work/$name.$hardware.log" "$np" "$hardware" check-logits "$src/configs/base.yml" \
      load_parameters_path="$fixtures/tiny_llama" \
      golden_logits_path="$fixtures/tiny_llama/golden_logits.jsonl" ici_fsdp_parallelism=1 \
      max_kl_div=1e-6 atol=1e-5 rtol=0 "$@"
    "${py[@]}" check-logits "$work/$name.$hardware.log" "$work/$name.$hardware.txt"
  done
  same "$name"
}
check logits_context2 2 ici_context_parallelism=2

decode() {  # decode <case> <ranks> <key=value ...>: 4 slots of the tiny_llama fixture
  local name=$1 np=$2
  shift 2
  for hardware in cpu gpu; do
    run "$work/$name.$hardware.log" "$np" "$hardware" decode "$src/configs/inference.yml" \
      load_parameters_path="$fixtures/tiny_llama" prompt="1 5 9 3 17 2 44" \
      max_prefill_predict_length=16 max_target_length=40 per_device_batch_size=$((4 / np)) \
      ici_context_autoregressive_parallelism="$np" "$@"
    "${py[@]}" decode "$work/$name.$hardware.log" "$work/$name.$hardware.txt"
  done
  same "$name"
  # A decode step reads back once: the sampled rows' logits (issue #32's readback rule).
  grep -q "device readbacks per decode step: 1.00 (1.00 host waits)" "$work/$name.gpu.log" || {
    echo "FAIL: $name: $(grep "device readbacks" "$work/$name.gpu.log" || echo no readback count)"
    exit 1
  }
}
decode decode_np1 1
decode decode_sequence_ca2 2 context_autoregressive_decode=sequence
decode decode_batch_ca2 2 context_autoregressive_decode=batch
decode decode_int8_ca2 2 quantization=int8 quantize_kvcache=true
echo "emulated GPU runs: all equal to the CPU"
