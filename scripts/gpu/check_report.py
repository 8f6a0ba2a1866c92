#!/usr/bin/env python3
"""The JSON side of scripts/gpu-check.sh: each subcommand reads a step's output and writes what
the report keeps of it (a small JSON file), and `assemble` puts the steps, the ratios against
torch and the issue's targets into the one report. Standard library only (it runs here, with no
GPU, and on the lent machine).

  compare-losses <metrics a> <metrics b> <rel tol> <out>   exit 1 when a step's loss differs
  gtest <gtest json> <out>                                 passed/failed/skipped counts, failures
  train-perf <metrics> <skip> <out>                        median tokens/s, TFLOP/s after <skip>
  copy-json <file with a JSON object somewhere> <out>      the last line that parses as an object
  step <out> <name> <status> <seconds> <rc> <log> [note]   one step's record (its log's tail)
  assemble <steps dir> <environment json> <report>         the report (exit 1 if a step failed)
"""
import glob
import json
import math
import os
import statistics
import sys


def metrics_rows(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def losses(path):
    return [(row.get("step"), row["learning/loss"]) for row in metrics_rows(path)
            if "learning/loss" in row]


def compare_losses(a, b, tol, out):
    la, lb = losses(a), losses(b)
    worst = 0.0
    steps = []
    for (step, x), (_, y) in zip(la, lb):
        rel = abs(x - y) / max(1.0, abs(y))
        worst = max(worst, rel if math.isfinite(rel) else math.inf)
        steps.append({"step": step, "a": x, "b": y})
    ok = len(la) == len(lb) and len(la) > 0 and worst <= tol
    result = {"steps": steps, "max_relative_difference": worst, "tolerance": tol,
              "same_step_count": len(la) == len(lb), "pass": ok}
    write(out, result)
    return 0 if ok else 1


def gtest(path, out):
    with open(path) as f:
        report = json.load(f)
    failures = []
    skipped = 0
    for suite in report.get("testsuites", []):
        for test in suite.get("testsuite", []):
            if test.get("result") == "SKIPPED" or test.get("status") == "NOTRUN":
                skipped += 1
            for failure in test.get("failures", []):
                failures.append({"test": suite["name"] + "." + test["name"],
                                 "message": failure.get("failure", "")[:400]})
    write(out, {"tests": report.get("tests", 0), "failed": report.get("failures", 0),
                "errors": report.get("errors", 0), "skipped": skipped, "failures": failures[:20]})
    return 0


def train_perf(path, skip, out):
    rows = [r for r in metrics_rows(path) if "perf/per_device_tokens_per_sec" in r][skip:]
    if not rows:
        write(out, {"error": "no timed steps in " + path})
        return 1
    tokens = statistics.median(r["perf/per_device_tokens_per_sec"] for r in rows)
    tflops = statistics.median(r.get("perf/per_device_tflops_per_sec", 0.0) for r in rows)
    write(out, {"tokens_per_second": tokens, "tflops_per_second": tflops,
                "timed_steps": len(rows), "loss_last": rows[-1].get("learning/loss")})
    return 0


def copy_json(path, out):
    obj = None
    with open(path, errors="replace") as f:
        text = f.read()
    try:
        obj = json.loads(text)
    except ValueError:
        for line in reversed(text.splitlines()):
            line = line.strip()
            if line.startswith("{"):
                try:
                    obj = json.loads(line)
                    break
                except ValueError:
                    continue
    if not isinstance(obj, dict):
        write(out, {"error": "no JSON object in the output"})
        return 1
    write(out, obj)
    return 0


def step(out, name, status, seconds, rc, log, note=""):
    tail = []
    if os.path.exists(log):
        with open(log, errors="replace") as f:
            tail = [line.rstrip("\n")[:300] for line in f.readlines()[-25:]]
    record = {"name": name, "status": status, "seconds": round(float(seconds), 2),
              "exit_code": int(rc), "log_tail": tail}
    if note:
        record["note"] = note
    write(out, record)
    return 0


def write(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def by_seq(report):
    return {r["seq"]: r for r in (report or {}).get("results", []) if "seq" in r}


def ratio(a, b):
    return a / b if a and b else None


def comparisons(steps):
    """maxctx against torch, measured in the same run, and the issue's targets."""
    data = {s["name"]: s.get("data") for s in steps}
    out = {}
    ours, torch = by_seq(data.get("attention_bench")), by_seq(data.get("torch_sdpa_bench"))
    kernel = (data.get("attention_bench") or {}).get("kernel", "")
    forward_target = 0.8 if "wgmma" in kernel or "hopper" in kernel.lower() else 0.55
    for seq in sorted(set(ours) & set(torch)):
        fwd = ratio(ours[seq].get("forward_tflops"), torch[seq].get("forward_tflops"))
        both = ratio(ours[seq].get("fwd_bwd_tflops"), torch[seq].get("fwd_bwd_tflops"))
        out[f"attention_S{seq}"] = {
            "forward_vs_torch": fwd, "fwd_bwd_vs_torch": both, "forward_target": forward_target,
            "meets_target": fwd is not None and fwd >= forward_target}
    hf = by_seq(data.get("hf_llama_step"))
    for seq, target in ((8192, 0.9), (32768, 1.0)):
        mine = data.get(f"maxctx_llama_step_S{seq}") or {}
        theirs = hf.get(seq, {})
        r = ratio(mine.get("tokens_per_second"), theirs.get("tokens_per_second"))
        out[f"train_step_S{seq}"] = {
            "maxctx_tokens_per_second": mine.get("tokens_per_second"),
            "transformers_tokens_per_second": theirs.get("tokens_per_second"),
            "ratio": r, "target": target, "meets_target": r is not None and r >= target}
    decode = (data.get("maxctx_decode_32k") or {}).get("autoregressive", {})
    copy = (data.get("torch_sdpa_bench") or {}).get("copy_GB_per_second") or 4300.0
    bw = decode.get("bw_per_device_GB_per_second")
    out["decode_32k"] = {"GB_per_second": bw, "copy_GB_per_second": copy,
                         "fraction_of_copy_rate": ratio(bw, copy), "target": 0.6,
                         "meets_target": bw is not None and bw / copy >= 0.6}
    return out


def assemble(steps_dir, environment, report_path):
    steps = []
    for path in sorted(glob.glob(os.path.join(steps_dir, "*.step.json"))):
        step = read_json(path) or {}
        data = read_json(path.replace(".step.json", ".data.json"))
        if data is not None:
            step["data"] = data
        steps.append(step)
    counts = {}
    for s in steps:
        counts[s.get("status", "?")] = counts.get(s.get("status", "?"), 0) + 1
    env = read_json(environment) or {}
    report = {"report": "maxctx gpu-check", "environment": env, "summary": counts,
              "steps": steps, "comparisons": comparisons(steps)}
    if env.get("gpu") is None:
        report["status"] = "no_gpu"
    elif counts.get("failed", 0) or counts.get("timeout", 0):
        report["status"] = "failures"
    else:
        report["status"] = "ok"
    write(report_path, report)
    return 0 if report["status"] == "ok" else 1


def main(argv):
    command, args = argv[1], argv[2:]
    if command == "compare-losses":
        return compare_losses(args[0], args[1], float(args[2]), args[3])
    if command == "gtest":
        return gtest(args[0], args[1])
    if command == "train-perf":
        return train_perf(args[0], int(args[1]), args[2])
    if command == "copy-json":
        return copy_json(args[0], args[1])
    if command == "step":
        return step(*args)
    if command == "assemble":
        return assemble(args[0], args[1], args[2])
    print("unknown command " + command, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
