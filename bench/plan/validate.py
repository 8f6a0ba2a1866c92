#!/usr/bin/env python3
"""Runs each configuration (PLAN_CASES=name,name: only those) with `maxctx train` / `maxctx bench-inference` under mpirun, measures
the peak RSS of every rank (/usr/bin/time's %M) and the step (the median of the logged step times
after the first; for inference the prefill and decode step times of the microbenchmark), asks
`maxctx plan --json` for its figures on the same keys and the this-machine profile, and writes
them side by side with their ratios to BUILD_DIR/bench/plan_validation.json. Python 3 standard
library only."""
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

BUILD = sys.argv[1]
CONFIGS = sys.argv[2]
PROFILE = sys.argv[3]  # the hardware profile the plans use
# The profile probed with 4 ranks on the machine's cores, for the 4-rank cases, and with one rank
# alone, for the 1-rank cases (both optional).
PROFILE_4 = sys.argv[4] if len(sys.argv) > 4 else PROFILE
PROFILE_1 = sys.argv[5] if len(sys.argv) > 5 else PROFILE
MAXCTX = os.path.join(BUILD, "maxctx")
MPI = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-x", "OMP_NUM_THREADS=1", "-x",
       "OPENBLAS_NUM_THREADS=1"]

# A small Llama whose buffers dwarf the runtime: E 256, 4 layers, GQA 8/4 heads of 32, F 768,
# vocabulary 8192, 2048 tokens per sequence, one sequence per step.
MODEL = ["model_name=maxctx-tiny", "override_model_config=true", "base_emb_dim=256",
         "base_num_query_heads=8", "base_num_kv_heads=4", "head_dim=32", "base_mlp_dim=768",
         "base_num_decoder_layers=4", "vocab_size=8192"]
TRAIN = ["max_target_length=2048", "steps=4", "learning_rate_schedule_steps=4", "log_period=1",
         "dataset_type=synthetic"]
# Checkpointing is off unless a case turns it on: its saves and resumes hold the whole state.
NO_CHECKPOINTS = ["enable_checkpointing=false"]
MOE = ["model_name=mixtral-tiny", "override_model_config=true", "base_emb_dim=256",
       "base_num_query_heads=8", "base_num_kv_heads=4", "head_dim=32", "base_mlp_dim=512",
       "base_num_decoder_layers=2", "vocab_size=8192", "num_experts=4", "num_experts_per_tok=2",
       "sparse_matmul=true"]


def mesh(np, **axes):
    sizes = {"fsdp": 1, **axes}
    keys = ["dcn_data_parallelism=1"] + [f"ici_{a}_parallelism={n}" for a, n in sizes.items()]
    if np > 1 and not axes:
        raise ValueError("a multi-rank case names its axes")
    return keys


def batch(np, context):
    # One sequence per data shard: per_device_batch_size = 1 / context.
    return [f"per_device_batch_size={1.0 / context:g}"]


TRAIN_CASES = [
    ("fp32_none", 1, MODEL + mesh(1) + batch(1, 1) + ["remat_policy=none"]),
    ("fp32_full", 1, MODEL + mesh(1) + batch(1, 1) + ["remat_policy=full"]),
    ("bf16_minimal", 1, MODEL + mesh(1) + batch(1, 1) +
     ["remat_policy=minimal", "dtype=bfloat16", "weight_dtype=bfloat16"]),
    ("cp2_all_gather", 2, MODEL + mesh(2, context=2) + batch(2, 2) +
     ["context_parallel_strategy=all_gather"]),
    ("cp2_ring", 2, MODEL + mesh(2, context=2) + batch(2, 2) + ["context_parallel_strategy=ring"]),
    ("cp2_ring_save_dot_except_mlp", 2, MODEL + mesh(2, context=2) + batch(2, 2) +
     ["context_parallel_strategy=ring", "remat_policy=save_dot_except_mlp"]),
    ("cp4_all_gather", 4, MODEL + mesh(4, context=4) + batch(4, 4) +
     ["context_parallel_strategy=all_gather"]),
    ("cp4_ring", 4, MODEL + mesh(4, context=4) + batch(4, 4) + ["context_parallel_strategy=ring"]),
    ("fsdp2", 2, MODEL + mesh(2, fsdp=2) + batch(2, 1)),
    ("fsdp4", 4, MODEL + mesh(4, fsdp=4) + batch(4, 1)),
    ("tensor2", 2, MODEL + mesh(2, tensor=2) + batch(2, 1)),
    ("moe_bf16", 1, MOE + mesh(1) + batch(1, 1) + ["dtype=bfloat16", "weight_dtype=bfloat16"]),
    ("moe_bf16_expert2", 2, MOE + mesh(2, expert=2) + batch(2, 1) +
     ["dtype=bfloat16", "weight_dtype=bfloat16"]),
    # A checkpoint saved at steps 2 and 4, then a run that starts from the one of step 2 ({work}:
    # this run's directory), both on fsdp 2.
    ("fsdp2_checkpoint", 2, MODEL + mesh(2, fsdp=2) + batch(2, 1) +
     ["enable_checkpointing=true", "checkpoint_period=2"]),
    ("fsdp2_resume", 2, MODEL + mesh(2, fsdp=2) + batch(2, 1) +
     ["load_full_state_path={work}/fsdp2_checkpoint/checkpoints/2"] + NO_CHECKPOINTS),
]

INFER = ["max_prefill_predict_length=1024", "max_target_length=1088",
         "inference_microbenchmark_prefill_lengths=1024", "inference_microbenchmark_loop_iters=20",
         "quantization=int8", "quantize_kvcache=true"]
INFER_CASES = [
    ("inference_ca1", 1, MODEL + INFER + ["per_device_batch_size=4",
                                          "ici_context_autoregressive_parallelism=1"]),
    ("inference_ca2", 2, MODEL + INFER + ["per_device_batch_size=2",
                                          "ici_context_autoregressive_parallelism=2"]),
]


def run(np, args, log):
    # One rank per core while there are cores (4 ranks share the 2 cores of this machine).
    bind = ["--bind-to", "core" if np <= os.cpu_count() else "none"]
    # Each rank's peak RSS appended to its own line of one file (O_APPEND: the ranks' lines do
    # not interleave, as they could on the shared stderr).
    rss_file = log + ".rss"
    if os.path.exists(rss_file):
        os.remove(rss_file)
    cmd = MPI + bind + ["-np", str(np), "/usr/bin/time", "-a", "-o", rss_file, "-f",
                        "maxrss_kib %M", MAXCTX] + args
    with open(log, "w") as out:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT)
    text = open(log).read()
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{text[-3000:]}")
    rss = max(int(m) for m in re.findall(r"maxrss_kib (\d+)", open(rss_file).read())) * 1024
    return text, rss


def plan(config, args, np, mode):
    profile = PROFILE_4 if np > os.cpu_count() else PROFILE_1 if np == 1 else PROFILE
    cmd = [MAXCTX, "plan", config] + args + [f"num_devices={np}", "hardware_profile=" + profile,
                                              f"mode={mode}", "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stderr}")
    return json.loads(out.stdout)


def ratio(predicted, measured):
    return predicted / measured if measured else None


def main():
    work = tempfile.mkdtemp(prefix="plan_validation_")
    base = os.path.join(CONFIGS, "base.yml")
    rows = []
    only = set(filter(None, os.environ.get("PLAN_CASES", "").split(",")))
    for name, np, keys in TRAIN_CASES:
        if only and name not in only:
            continue
        run_dir = ["base_output_directory=" + work, "run_name=" + name]
        keys = [k.replace("{work}", work) for k in keys] + TRAIN
        if not any(k.startswith("enable_checkpointing=") for k in keys):
            keys += NO_CHECKPOINTS
        _, rss = run(np, ["train", base] + keys + run_dir, os.path.join(work, name + ".log"))
        steps = [json.loads(line)["perf/step_time_seconds"]
                 for line in open(os.path.join(work, name, "metrics.jsonl"))]
        measured_step = statistics.median(steps[1:])
        p = plan(base, keys, np, "train")
        predicted_peak = p["memory_per_rank_bytes"]["peak"]
        predicted_step = p["predicted"]["step_seconds"]
        rows.append({"name": name, "ranks": np, "keys": keys,
                     "load_average_1min": os.getloadavg()[0],
                     "predicted_peak_bytes": predicted_peak, "measured_peak_rss_bytes": rss,
                     "peak_ratio": ratio(predicted_peak, rss),
                     "predicted_breakdown": p["predicted"],
                     "predicted_step_seconds": predicted_step,
                     "measured_step_seconds": measured_step,
                     "step_ratio": ratio(predicted_step, measured_step),
                     "predicted_mfu": p["predicted"]["mfu"]})
        print(json.dumps(rows[-1]), flush=True)
    inference = os.path.join(CONFIGS, "inference.yml")
    for name, np, keys in INFER_CASES:
        if only and name not in only:
            continue
        log = os.path.join(work, name + ".json")
        _, rss = run(np, ["bench-inference", inference] + keys +
                     ["inference_microbenchmark_log_file_path=" + log],
                     os.path.join(work, name + ".log"))
        result = json.load(open(log))
        prefill_ms = result["prefill"]["1024"]["time_in_ms"]
        ar_ms = result["autoregressive"]["step_in_ms"]
        p = plan(inference, keys, np, "inference")
        predicted_peak = p["memory_per_rank_bytes"]["peak"]
        rows.append({"name": name, "ranks": np, "keys": keys,
                     "load_average_1min": os.getloadavg()[0],
                     "predicted_peak_bytes": predicted_peak, "measured_peak_rss_bytes": rss,
                     "peak_ratio": ratio(predicted_peak, rss),
                     "predicted_prefill_seconds": p["predicted"]["prefill"][0]["seconds"],
                     "measured_prefill_seconds": prefill_ms / 1e3,
                     "prefill_ratio": ratio(p["predicted"]["prefill"][0]["seconds"],
                                            prefill_ms / 1e3),
                     "predicted_decode_bytes_per_step": p["decode_step_bytes_per_rank"],
                     "measured_decode_bytes_per_step":
                         result["autoregressive"]["bytes_per_device_per_step"],
                     "predicted_step_seconds": p["predicted"]["decode_step_seconds"],
                     "measured_step_seconds": ar_ms / 1e3,
                     "step_ratio": ratio(p["predicted"]["decode_step_seconds"], ar_ms / 1e3)})
        print(json.dumps(rows[-1]), flush=True)
    within = lambda key, tol: sum(1 for r in rows if r.get(key) and abs(r[key] - 1) <= tol)
    summary = {"cases": len(rows),
               "peak_within_10_percent": within("peak_ratio", 0.10),
               "step_within_20_percent": within("step_ratio", 0.20),
               "profile": open(PROFILE).read(), "profile_4_ranks": open(PROFILE_4).read(),
               "profile_1_rank": open(PROFILE_1).read()}
    os.makedirs(os.path.join(BUILD, "bench"), exist_ok=True)
    path = os.path.join(BUILD, "bench", "plan_validation.json")
    with open(path, "w") as out:
        json.dump({"summary": summary, "cases": rows}, out, indent=2)
    print(json.dumps({k: v for k, v in summary.items() if k != "profile"}))
    print("wrote", path)


if __name__ == "__main__":
    main()
