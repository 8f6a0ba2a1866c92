#!/usr/bin/python3
"""Merges the cp_bench pieces of bench/context_parallel/run.sh into context_parallel.json.

Derived figures only, from the measured pieces: max/min ratios across ranks, strong-scaling
efficiency T1 / (cp * Tcp) from the best step times, and a least-squares line through the
measured peak-RSS points per cp (memory is linear in S: attention is flash-style), which gives
the longest sequence that fits in the memory budget. The line is a fit, and says so; an
extrapolation point measured beyond the fitted range checks it.

Usage: combine.py PIECES_DIR OUT_JSON
"""
import json
import os
import sys

GIB = 1 << 30
MEMORY_BUDGET_BYTES = 20 * GIB
BALANCE_TARGET = 1.05
EFFICIENCY_TARGET = 0.85
LONGEST_RATIO_TARGET = 1.9


def load(pieces, name):
    with open(os.path.join(pieces, name)) as f:
        return json.load(f)


def fit_line(points):
    """Least squares y = intercept + slope * x over [(x, y), ...]."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in points)
    slope = sxy / sxx
    return mean_y - slope * mean_x, slope


def attention_balance(attention):
    out = {"shape": attention["shape"], "reps": attention["reps"],
           "tile_note": attention["tile_note"], "time_note": attention["time_note"]}
    for case, c in attention["cases"].items():
        out[case] = {
            "tiles_computed_per_rank": c["tiles_computed"]["per_rank"],
            "work_max_over_min": c["tiles_computed"]["max_over_min"],
            "kernel_cpu_seconds_per_rank": c["kernel_cpu_seconds"]["per_rank"],
            "time_max_over_min": c["kernel_cpu_seconds"]["max_over_min"],
            "forward_time_max_over_min": c["kernel_forward_cpu_seconds"]["max_over_min"],
            "backward_time_max_over_min": c["kernel_backward_cpu_seconds"]["max_over_min"],
            "plans": c["plans"],
        }
    on = out["load_balance_on"]
    on["target_max_over_min"] = BALANCE_TARGET
    on["meets_target"] = (on["work_max_over_min"] <= BALANCE_TARGET and
                          on["time_max_over_min"] <= BALANCE_TARGET)
    off = out["load_balance_off"]
    for strategy in on["plans"]:
        out["plan_" + strategy + "_speedup_from_balancing"] = (
            off["plans"][strategy]["forward_backward_wall_seconds_slowest_rank"] /
            on["plans"][strategy]["forward_backward_wall_seconds_slowest_rank"])
    return out


def strong_scaling(pieces, strategies):
    one = load(pieces, "step_cp1.json")
    t1 = one["step_wall_seconds"]["min"]
    out = {"seq": one["seq"], "model_name": one["model_name"], "global_batch": 1,
           "cp1": {"per_device_batch_size": one["per_device_batch_size"],
                   "step_wall_seconds": one["step_wall_seconds"],
                   "step_cpu_seconds_min": one["step_cpu_seconds_per_rank_min"][0],
                   "losses": one["losses"]},
           "target_efficiency": EFFICIENCY_TARGET, "strategies": {}}
    for strategy in strategies:
        two = load(pieces, "step_cp2_%s.json" % strategy)
        t2 = two["step_wall_seconds"]["min"]
        efficiency = t1 / (two["cp"] * t2)
        out["strategies"][strategy] = {
            "cp": two["cp"],
            "per_device_batch_size": two["per_device_batch_size"],
            "step_wall_seconds": two["step_wall_seconds"],
            "step_cpu_seconds_min_per_rank": two["step_cpu_seconds_per_rank_min"],
            "attention_tiles_computed_per_rank": two["attention_tiles_computed"]["per_rank"],
            "speedup": t1 / t2,
            "efficiency": efficiency,
            "meets_target": efficiency >= EFFICIENCY_TARGET,
            "losses": two["losses"],
            "losses_match_cp1": all(abs(a - b) <= 1e-5 * abs(b)
                                    for a, b in zip(two["losses"], one["losses"])),
        }
    out["efficiency_note"] = ("T1 / (cp * Tcp), best wall time of the timed steps (warm-up "
                              "excluded) of each run; the same global batch of one sequence")
    return out, one


def memory_model(pieces, seqs, one, strategies):
    per_cp = {}
    for cp in (1, 2):
        points = []
        for seq in seqs:
            p = load(pieces, "memory_cp%d_%d.json" % (cp, seq))
            points.append((seq, max(p["peak_rss_bytes"])))
        if cp == 1:
            points.append((one["seq"], max(one["peak_rss_bytes"])))
        else:
            big = load(pieces, "step_cp2_%s.json" % strategies[0])
            points.append((big["seq"], max(big["peak_rss_bytes"])))
        intercept, slope = fit_line(points)
        longest = int((MEMORY_BUDGET_BYTES - intercept) // slope)
        longest -= longest % (2 * cp)  # the dual chunk swap needs S % (2 cp) == 0
        residuals = [y - (intercept + slope * x) for x, y in points]
        entry = {
            "strategy": strategies[0] if cp > 1 else "none (cp = 1)",
            "measured_points": [{"seq": x, "peak_rss_bytes_max_over_ranks": y,
                                 "peak_rss_gib": y / GIB} for x, y in points],
            "fit_intercept_bytes": intercept,
            "fit_slope_bytes_per_token": slope,
            "fit_max_abs_residual_bytes": max(abs(r) for r in residuals),
            "longest_seq_within_budget": longest,
        }
        check_name = "check_cp%d.json" % cp
        if os.path.exists(os.path.join(pieces, check_name)):
            c = load(pieces, check_name)
            measured = max(c["peak_rss_bytes"])
            predicted = intercept + slope * c["seq"]
            entry["extrapolation_check"] = {
                "seq": c["seq"], "overrides": c["extra_overrides"],
                "measured_peak_rss_bytes": measured, "predicted_bytes": predicted,
                "relative_error": (measured - predicted) / measured,
                "note": ("measured beyond the fitted range; a sliding window keeps the step's "
                         "time linear in S, and memory does not depend on the mask"),
            }
        if cp == 2:
            for strategy in strategies[1:]:
                other = load(pieces, "step_cp2_%s.json" % strategy)
                entry["peak_rss_bytes_at_%d_%s" % (other["seq"], strategy)] = max(
                    other["peak_rss_bytes"])
        per_cp["cp%d" % cp] = entry
    ratio = (per_cp["cp2"]["longest_seq_within_budget"] /
             per_cp["cp1"]["longest_seq_within_budget"])
    return {
        "budget_bytes_per_rank": MEMORY_BUDGET_BYTES,
        "method": ("a fit of measured points: peak RSS (getrusage ru_maxrss, max over ranks) of "
                   "one training step at each seq, least-squares line in seq, solved for the "
                   "budget; the longest seq itself was not run"),
        "per_cp": per_cp,
        "longest_seq_ratio_cp2_over_cp1": ratio,
        "target_ratio": LONGEST_RATIO_TARGET,
        "meets_target": ratio >= LONGEST_RATIO_TARGET,
    }


def main():
    pieces, out_path = sys.argv[1], sys.argv[2]
    strategies = ["all_gather", "ring"]
    seqs = [int(s) for s in os.environ.get("CP_BENCH_MEMORY_SEQS", "2048 4096 8192").split()]
    attention = load(pieces, "attention.json")
    scaling, one = strong_scaling(pieces, strategies)
    loads = []
    for name in sorted(os.listdir(pieces)):
        if name.endswith(".json"):
            p = load(pieces, name)
            loads.append({"piece": name, "start": p["load_average_1min_at_start"],
                          "end": p["load_average_1min_at_end"]})
    result = {
        "ranks": 2,
        "threads_per_rank": 1,
        "attention_balance": attention_balance(attention),
        "training_step_strong_scaling": scaling,
        "memory": memory_model(pieces, seqs, one, strategies),
        "load_average_1min": loads,
        "load_note": ("the machine's 2 cores are shared with other jobs; times are the best of "
                      "the repetitions, and the load average is printed per piece"),
    }
    with open(out_path, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
