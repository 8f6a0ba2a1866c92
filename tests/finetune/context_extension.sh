#!/usr/bin/env bash
# Context extension (issue #18 part 7), end to end through the CLI: the demo's recall model
# (configs/demo.yml: one key-value pair anywhere in the row, the query at the end) is trained at
# 256 tokens on one rank, then measured at 1024 tokens (a frozen step, learning_rate=0, and 16
# eval batches of held-out rows), then loaded with load_parameters_path, its RoPE base raised 4x
# (rope_max_timescale=40000), fine-tuned at 1024 on 2 ranks with the sequence split in two
# (ici_context_parallelism=2, dual chunk swap) and measured again.
# Passes when the model recalls at 256 (eval accuracy >= 0.9), does not at 1024 before the
# extension (<= 0.8; measured 0.63 on its 128 eval rows, loss 2.86), and does after it (>= 0.95,
# and an eval loss at most a quarter of the one before). Also measured, not checked: the raised
# base alone at 1024 without fine-tuning. Prints one JSON line with every figure
# (bench/context_extension keeps it). About a minute and a half on 2 cores (900 steps of about
# 0.05 s, then 60 of about 0.5 s).
#   context_extension.sh <build dir> <source dir> [output.json]
set -euo pipefail
build=$1
src=$2
out=${3:-}
work=$build/tests/finetune/context_extension
rm -rf "$work"
mkdir -p "$work"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
mpirun_cmd=(mpirun --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=1
            -x OPENBLAS_NUM_THREADS=1)

run() {  # run <name> <ranks> [key=value ...]
  local name=$1 ranks=$2
  shift 2
  local launcher=()
  [ "$ranks" = 2 ] && launcher=("${mpirun_cmd[@]}")
  "${launcher[@]}" "$build/maxctx" train "$src/configs/demo.yml" base_output_directory="$work" \
    run_name="$name" log_period=100 eval_steps=16 "$@" > "$work/$name.log" 2>&1 ||
    { echo "FAIL: $name"; tail -20 "$work/$name.log"; exit 1; }
}

# 900 steps of the demo's 1500-step schedule at 256 tokens (recall reaches 1.0 by step 700).
run short 1 max_target_length=256 per_device_batch_size=8 ici_context_parallelism=1 steps=900 \
  learning_rate_schedule_steps=1500 enable_checkpointing=true checkpoint_period=900 \
  eval_interval=900
start=$work/short/checkpoints/900
# The 256-token model at 1024 tokens, unchanged (learning_rate=0), as trained and with the base
# raised.
run before 1 max_target_length=1024 per_device_batch_size=8 ici_context_parallelism=1 steps=1 \
  learning_rate=0 load_parameters_path="$start" eval_interval=1 enable_checkpointing=false
run rope_only 1 max_target_length=1024 per_device_batch_size=8 ici_context_parallelism=1 steps=1 \
  learning_rate=0 load_parameters_path="$start" rope_max_timescale=40000 eval_interval=1 \
  enable_checkpointing=false
# The extension: 60 steps at 1024 on 2 ranks, context=2.
run extended 2 max_target_length=1024 per_device_batch_size=4 ici_context_parallelism=2 steps=60 \
  learning_rate=1e-3 warmup_steps_fraction=0.1 load_parameters_path="$start" \
  rope_max_timescale=40000 eval_interval=60 enable_checkpointing=false

python3 - "$work" "$out" <<'PY'
import json, sys
work, out = sys.argv[1], sys.argv[2]
def last_eval(name):
    with open(f"{work}/{name}/metrics.jsonl") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    row = [r for r in rows if "eval/avg_loss" in r][-1]
    return {"eval_loss": row["eval/avg_loss"], "eval_accuracy": row["eval/accuracy"],
            "eval_queries": row["eval/total_weights"]}
result = {"benchmark": "context_extension", "task": "recall, 1 pair per row",
          "trained_at_256": last_eval("short"), "at_1024_before": last_eval("before"),
          "at_1024_rope_base_x4_no_finetune": last_eval("rope_only"),
          "at_1024_after_finetune_context2": last_eval("extended")}
checks = {
    "recalls at 256 (>= 0.9)": result["trained_at_256"]["eval_accuracy"] >= 0.9,
    "fails at 1024 before (<= 0.8)": result["at_1024_before"]["eval_accuracy"] <= 0.8,
    "recalls at 1024 after (>= 0.95)":
        result["at_1024_after_finetune_context2"]["eval_accuracy"] >= 0.95,
    "eval loss after <= before / 4": result["at_1024_after_finetune_context2"]["eval_loss"]
        <= result["at_1024_before"]["eval_loss"] / 4,
}
result["checks"] = checks
print(json.dumps(result))
if out:
    with open(out, "w") as f:
        json.dump(result, f, indent=2)
failed = [name for name, ok in checks.items() if not ok]
print("context_extension: " + ("FAIL: " + "; ".join(failed) if failed else "OK"))
sys.exit(1 if failed else 0)
PY
