#!/usr/bin/python3
"""Merges the pieces of bench/inference/run.sh into inference.json.

Every piece is the JSON `maxctx bench-inference` writes (MaxText's inference_microbenchmark key
names) or the DRAM probe's; the ratios here are derived from pieces measured in the same run:
ca = 2 against ca = 1, int8 weights against fp32 weights, and the AR step's bytes per second
against the DRAM read bandwidth measured with the same number of ranks reading at once.

Usage: combine.py PIECES_DIR OUT_JSON
"""
import json
import os
import sys

AR_SPEEDUP_TARGET = 1.7
PREFILL_EFFICIENCY_TARGET = 0.85
INT8_SPEEDUP_TARGET = 2.5
BF16_SPEEDUP_TARGET = 1.8
BANDWIDTH_FRACTION_TARGET = 0.6


def load(pieces, name):
    with open(os.path.join(pieces, name + ".json")) as f:
        return json.load(f)


def load_average(pieces, name):
    with open(os.path.join(pieces, name + ".load")) as f:
        return float(f.read().strip())


def ar_entry(piece, dram_per_rank):
    ar = piece["autoregressive"]
    return {
        "step_in_ms": ar["step_in_ms"],
        "context_tokens": ar["context_tokens"],
        "global_batch_size": ar["global_batch_size"],
        "total_throughput_tokens_per_second": ar["total_throughput_tokens_per_second"],
        "bytes_per_device_per_step": ar["bytes_per_device_per_step"],
        "bw_per_device_GB_per_second": ar["bw_per_device_GB_per_second"],
        "bw_fraction_of_dram_read": ar["bw_per_device_GB_per_second"] / dram_per_rank,
        "sizes": piece["sizes"],
    }


def median_round(pieces, name, dram_per_rank):
    """The round with the median AR step time of NAME_round1.., and every round's step time."""
    rounds = sorted(f[:-5] for f in os.listdir(pieces)
                    if f.startswith(name + "_round") and f.endswith(".json"))
    entries = sorted((ar_entry(load(pieces, r), dram_per_rank) for r in rounds),
                     key=lambda e: e["step_in_ms"])
    return entries[len(entries) // 2], [e["step_in_ms"] for e in entries]


def main():
    pieces, out_path = sys.argv[1], sys.argv[2]
    dram = {np: load(pieces, "dram_np%d" % np) for np in (1, 2)}
    dram_rank = {np: d["read_GB_per_second_per_rank"] for np, d in dram.items()}

    ar1, rounds1 = median_round(pieces, "ar32k_ca1", dram_rank[1])
    ar2, rounds2 = median_round(pieces, "ar32k_ca2", dram_rank[2])
    ar_speedup = ar1["step_in_ms"] / ar2["step_in_ms"]

    p1 = load(pieces, "prefill8k_ca1")["prefill"]["8192"]
    p2 = load(pieces, "prefill8k_ca2")["prefill"]["8192"]
    efficiency = p1["time_in_ms"] / (2 * p2["time_in_ms"])

    fp32, fp32_rounds = median_round(pieces, "decode_fp32", dram_rank[1])
    int8 = ar_entry(load(pieces, "decode_int8"), dram_rank[1])
    int8_speedup = fp32["step_in_ms"] / int8["step_in_ms"]
    bf16, bf16_rounds = median_round(pieces, "decode_bf16", dram_rank[1])
    bf16_speedup = fp32["step_in_ms"] / bf16["step_in_ms"]

    result = {
        "threads_per_rank": 1,
        "dtype": "float32 activations; weights fp32 unless int8 says otherwise",
        "dram_read_bandwidth": {
            "one_rank_GB_per_second": dram_rank[1],
            "two_ranks_GB_per_second_per_rank": dram_rank[2],
            "method": dram[1].get("method", "sum of a 1 GiB buffer per rank, best of %d passes"
                                  % dram[1]["reps"]),
        },
        "ar_step_32k_context_sequence_sharded": {
            "model_name": "maxctx-small",
            "ca1": ar1,
            "ca2": ar2,
            "step_in_ms_of_each_round_sorted": {"ca1": rounds1, "ca2": rounds2},
            "speedup_ca2_over_ca1": ar_speedup,
            "target_speedup": AR_SPEEDUP_TARGET,
            "meets_target": ar_speedup >= AR_SPEEDUP_TARGET,
            "note": ("one decode step of one sequence after a 32768-token prefill, mean of 100 "
                     "steps; of five alternating rounds per mesh the median one; ca = 2 holds "
                     "half the KV rows per rank and merges the partial attention by log-sum-exp; "
                     "bandwidth fractions are against the DRAM read bandwidth of as many ranks "
                     "reading at once"),
        },
        "prefill_8k": {
            "model_name": "maxctx-small",
            "ca1": p1,
            "ca2": p2,
            "speedup_ca2_over_ca1": p1["time_in_ms"] / p2["time_in_ms"],
            "scaling_efficiency": efficiency,
            "target_efficiency": PREFILL_EFFICIENCY_TARGET,
            "meets_target": efficiency >= PREFILL_EFFICIENCY_TARGET,
            "note": "T1 / (2 * T2), mean prefill time of the timed iterations, one prompt",
        },
        "decode_batch1_int8_weights": {
            "model_name": "maxctx-100m",
            "fp32": fp32,
            "int8": int8,
            "speedup_int8_over_fp32": int8_speedup,
            "target_speedup": INT8_SPEEDUP_TARGET,
            "meets_target": int8_speedup >= INT8_SPEEDUP_TARGET,
        },
        "decode_batch1_bf16": {
            "model_name": "maxctx-100m",
            "fp32": fp32,
            "bf16": bf16,
            "speedup_bf16_over_fp32": bf16_speedup,
            "target_speedup": BF16_SPEEDUP_TARGET,
            "meets_target": bf16_speedup >= BF16_SPEEDUP_TARGET,
            "step_in_ms_of_each_round_sorted": {"fp32": fp32_rounds, "bf16": bf16_rounds},
            "note": ("dtype=bfloat16 weight_dtype=bfloat16: bf16 weights, activations, KV cache; "
                     "of three alternating rounds per precision the median one"),
        },
        "ar_bandwidth_fraction_of_dram": {
            "case": "batch-1 decode, maxctx-100m, fp32 weights, one rank",
            "fraction": fp32["bw_fraction_of_dram_read"],
            "target": BANDWIDTH_FRACTION_TARGET,
            "meets_target": fp32["bw_fraction_of_dram_read"] >= BANDWIDTH_FRACTION_TARGET,
            "ar_32k_ca1_fraction": ar1["bw_fraction_of_dram_read"],
            "ar_32k_ca2_fraction": ar2["bw_fraction_of_dram_read"],
            "int8_fraction": int8["bw_fraction_of_dram_read"],
            "bf16_fraction": bf16["bw_fraction_of_dram_read"],
        },
        "load_average_1min_before_each_piece": {
            name[:-5]: load_average(pieces, name[:-5])
            for name in sorted(os.listdir(pieces)) if name.endswith(".load")
        },
    }
    with open(out_path, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    for key in ("ar_step_32k_context_sequence_sharded", "prefill_8k",
                "decode_batch1_int8_weights", "decode_batch1_bf16",
                "ar_bandwidth_fraction_of_dram"):
        entry = result[key]
        figure = {k: v for k, v in entry.items()
                  if k.startswith(("speedup", "scaling", "fraction"))}
        print("%s: %s meets_target=%s" % (key, json.dumps(figure), entry["meets_target"]))


if __name__ == "__main__":
    main()
