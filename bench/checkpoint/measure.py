"""Measures what sharded checkpoints cost (bench/checkpoint/run.sh says what and why).

usage: measure.py <build dir> <configs dir> <hardware profile> <out.json>

Every figure comes from this run: peak RSS per rank of each phase, the bound the issue sets
(1.15 x the rank's shard of weights and both moments + the step's own peak), `maxctx plan`'s
peak for the same command, step times with and without a save in flight, bytes written.
"""
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

BUILD, CONFIGS, PROFILE, OUT = sys.argv[1:5]
MAXCTX = os.path.join(BUILD, "maxctx")
WORK = os.path.join(BUILD, "bench", "checkpoint_runs")
RANKS = 4
MPI = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-x", "OMP_NUM_THREADS=1", "-x",
       "OPENBLAS_NUM_THREADS=1", "--bind-to", "none"]
MODEL = ["model_name=maxctx-100m", "max_target_length=128", "per_device_batch_size=1",
         f"ici_fsdp_parallelism={RANKS}", "dataset_type=synthetic", "steps=12",
         "learning_rate_schedule_steps=12", "log_period=1", "base_output_directory=" + WORK]


# REUSE_RUNS=1 re-reads the logs of the previous run instead of running again (to re-derive the
# JSON after a change to this script).
REUSE = os.environ.get("REUSE_RUNS") == "1"


def run(np, args, name):
    """Runs maxctx on `np` ranks; returns (log text, peak RSS of each rank in bytes)."""
    log = os.path.join(WORK, name + ".log")
    rss_file = log + ".rss"
    if REUSE:
        return open(log).read(), [int(m) * 1024 for m in
                                  re.findall(r"maxrss_kib (\d+)", open(rss_file).read())]
    if os.path.exists(rss_file):
        os.remove(rss_file)
    cmd = MPI + ["-np", str(np), "/usr/bin/time", "-a", "-o", rss_file, "-f", "maxrss_kib %M",
                 MAXCTX] + args
    with open(log, "w") as out:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT)
    text = open(log).read()
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{text[-3000:]}")
    rss = [int(m) * 1024 for m in re.findall(r"maxrss_kib (\d+)", open(rss_file).read())]
    return text, rss


def plan_peak(args):
    cmd = [MAXCTX, "plan", os.path.join(CONFIGS, "base.yml")] + args + [
        f"num_devices={RANKS}", "hardware_profile=" + PROFILE, "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    memory = json.loads(proc.stdout)["memory_per_rank_bytes"]
    return memory["peak"], memory


def step_seconds(run_name):
    path = os.path.join(WORK, run_name, "metrics.jsonl")
    return {r["step"]: r["perf/step_time_seconds"]
            for r in map(json.loads, open(path)) if "perf/step_time_seconds" in r}


def main():
    if not REUSE:
        shutil.rmtree(WORK, ignore_errors=True)
        os.makedirs(WORK)
    base = ["train", os.path.join(CONFIGS, "base.yml")] + MODEL
    results = {"model": "maxctx-100m", "mesh": f"fsdp={RANKS} on {RANKS} ranks", "phases": {}}

    # The step alone: no checkpoint ever.
    plain = ["run_name=plain", "enable_checkpointing=false"]
    _, rss_plain = run(RANKS, base + plain, "plain")
    # Saves at steps 3, 6, 9, 12 in the background.
    saving = ["run_name=saving", "enable_checkpointing=true", "checkpoint_period=3",
              "async_checkpointing=true"]
    save_log, rss_save = run(RANKS, base + saving, "saving")
    ckpt = os.path.join(WORK, "saving", "checkpoints", "6")
    # A start from that checkpoint (the weights and both moments, resharded to each rank).
    resume = ["run_name=resumed", "enable_checkpointing=false", "load_full_state_path=" + ckpt]
    _, rss_resume = run(RANKS, base + resume, "resumed")
    # The export (one process, streaming) as 2+ files, and a start from it.
    hf_dir = os.path.join(WORK, "hf")
    export_args = ["export", os.path.join(CONFIGS, "base.yml"), "model_name=maxctx-100m",
                   "load_parameters_path=" + ckpt, "base_output_directory=" + hf_dir,
                   "export_max_shard_size=250000000"]
    _, rss_export = run(1, export_args, "export")
    hf_files = sorted(os.path.basename(p) for p in glob.glob(os.path.join(hf_dir, "*.safetensors")))
    hf = ["run_name=from_hf", "enable_checkpointing=false", "load_parameters_path=" + hf_dir]
    _, rss_hf = run(RANKS, base + hf, "from_hf")

    numel = int(re.search(r"model: (\d+) parameters", save_log).group(1))
    shard_bytes = 3 * 4 * numel // RANKS  # this rank's f32 weights and both moments
    step_peak = max(rss_plain)
    for name, rss, args in [("step", rss_plain, plain), ("save", rss_save, saving),
                            ("resume", rss_resume, resume), ("hf_load", rss_hf, hf)]:
        peak, memory = plan_peak(MODEL + args[1:])
        bound = 1.15 * shard_bytes + step_peak
        results["phases"][name] = {
            "peak_rss_per_rank_bytes": rss,
            "peak_rss_max_bytes": max(rss),
            "bound_bytes": bound if name != "step" else None,
            "within_bound": max(rss) <= bound if name != "step" else None,
            "over_step_peak_bytes": max(rss) - step_peak,
            "plan_peak_bytes": peak,
            "plan_over_measured": peak / max(rss),
            "plan_within_10_percent": abs(peak / max(rss) - 1) <= 0.10,
            "plan_checkpoint_state_bytes": memory.get("checkpoint_state", 0),
        }
    results["shard_bytes_per_rank"] = shard_bytes
    results["model_state_bytes"] = 3 * 4 * numel
    # What the previous, unsharded checkpoints held on every rank beside the step's buffers: the
    # f32 weights and both moments whole (3 copies of the model).
    results["unsharded_state_per_rank_bytes"] = 3 * 4 * numel

    written = sum(os.path.getsize(p) for p in glob.glob(os.path.join(ckpt, "shard-*.safetensors")))
    results["save_bytes_written"] = written
    results["save_bytes_over_state_bytes"] = written / (3 * 4 * numel)
    commits = [float(s) for s in re.findall(r"committed ([0-9.]+) s after the save began", save_log)]
    results["save_commit_seconds"] = commits
    plain_steps = step_seconds("plain")
    save_steps = step_seconds("saving")
    # Steps 3, 6, 9 (0-based rows) begin with a save's staging copy and run while its files are
    # written (the commit comes about a step later); steps 1, 2, 4, 5, 7, 8, 10 of the same run
    # have no save in flight: the comparison, within one run (this VM's step times vary
    # by up to 30 % between runs). Step 0 (warm-up) and 11 (the last save is finished after it)
    # are left out. The run without checkpoints is beside it for reference.
    during = [save_steps[s] for s in (3, 6, 9) if s in save_steps]
    between = [save_steps[s] for s in (1, 2, 4, 5, 7, 8, 10) if s in save_steps]
    results["step_seconds_during_save"] = during
    results["step_seconds_between_saves"] = between
    results["step_seconds_during_save_median"] = statistics.median(during)
    results["step_seconds_between_saves_median"] = statistics.median(between)
    results["step_during_save_over_between"] = (results["step_seconds_during_save_median"] /
                                                results["step_seconds_between_saves_median"])
    plain = [plain_steps[s] for s in (1, 2, 4, 5, 7, 8, 10) if s in plain_steps]
    results["step_seconds_without_checkpoints_median"] = statistics.median(plain)
    results["step_during_save_over_run_without_checkpoints"] = (
        results["step_seconds_during_save_median"] /
        results["step_seconds_without_checkpoints_median"])
    results["export"] = {"files": hf_files, "peak_rss_bytes": max(rss_export),
                         "model_bytes_f32": 4 * numel}
    with open(OUT, "w") as f:
        json.dump(results, f, indent=2)
    print(json.dumps(results, indent=2))


main()
