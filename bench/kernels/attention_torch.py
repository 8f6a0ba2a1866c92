"""Causal attention forward in torch 1.13 (Debian's python3-torch), the peer for kernels_bench.

Manual q·kᵀ, causal mask, softmax, ·v in float32 on one thread (torch 1.13 has no
scaled_dot_product_attention), at the shape kernels_bench uses: S=4096, Hq=8, Hkv=2, D=128.
The kv heads are expanded to the query heads inside the timed region, as a torch user must.
Writes {"version", "forward_cpu_seconds", ...} as JSON to argv[1]: the repetition with the least
process CPU time (the machine is shared; kernels_bench measures itself the same way).
"""
import json
import sys
import time

import torch


def main() -> None:
    out_path = sys.argv[1]
    torch.set_num_threads(1)
    seq, heads_q, heads_kv, head_dim = 4096, 8, 2, 128
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, heads_q, seq, head_dim, generator=gen, dtype=torch.float32)
    k = torch.randn(1, heads_kv, seq, head_dim, generator=gen, dtype=torch.float32)
    v = torch.randn(1, heads_kv, seq, head_dim, generator=gen, dtype=torch.float32)
    future = torch.ones(seq, seq, dtype=torch.bool).triu(1)  # key after query: masked
    scale = head_dim ** -0.5

    def forward() -> torch.Tensor:
        k_full = k.repeat_interleave(heads_q // heads_kv, dim=1)
        v_full = v.repeat_interleave(heads_q // heads_kv, dim=1)
        scores = torch.matmul(q, k_full.transpose(-1, -2)) * scale
        scores.masked_fill_(future, float("-inf"))
        return torch.matmul(torch.softmax(scores, dim=-1), v_full)

    with torch.no_grad():
        forward()  # warm-up
        best_cpu, best_wall = float("inf"), float("inf")
        for _ in range(2):
            cpu_start, wall_start = time.process_time(), time.perf_counter()
            forward()
            cpu = time.process_time() - cpu_start
            if cpu < best_cpu:
                best_cpu, best_wall = cpu, time.perf_counter() - wall_start
    with open(out_path, "w") as f:
        json.dump({"version": torch.__version__, "threads": torch.get_num_threads(),
                   "forward_cpu_seconds": best_cpu, "forward_wall_seconds": best_wall,
                   "shape": {"seq": seq, "heads_q": heads_q, "heads_kv": heads_kv,
                             "head_dim": head_dim, "mask": "causal"}}, f)


if __name__ == "__main__":
    main()
