#!/usr/bin/env python3
"""torch's scaled_dot_product_attention at bench/cuda/attention_bench's shape, for gpu-check.sh.

bf16, batch 1, 32 query / 8 KV heads (enable_gqa: torch repeats the KV heads), head_dim 128,
causal, S = 8192 and 32768: forward and forward+backward TFLOP/s, timed with CUDA events after
warm-up. FLOPs are counted as attention_bench counts them (FlashAttention's convention): forward
4*B*H*S^2*D halved for the causal mask, forward+backward 3.5 times that. Also the device-to-device
copy rate (bytes read + written per second), the ceiling the decode bandwidth is judged against.
Prints one JSON object on stdout (exit 77 without torch).
"""
import json
import sys


def timed_ms(torch, fn, warmup, iters):
    for _ in range(warmup):
        fn()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def attention(torch, seq, warmup, iters, backward_iters):
    import torch.nn.functional as F
    batch, heads_q, heads_kv, dim = 1, 32, 8, 128
    kw = dict(device="cuda", dtype=torch.bfloat16, requires_grad=True)
    q = torch.randn(batch, heads_q, seq, dim, **kw)
    k = torch.randn(batch, heads_kv, seq, dim, **kw)
    v = torch.randn(batch, heads_kv, seq, dim, **kw)

    def forward():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    with torch.no_grad():
        fwd_ms = timed_ms(torch, forward, warmup, iters)
    grad = torch.randn_like(forward())

    def forward_backward():
        q.grad = k.grad = v.grad = None
        forward().backward(grad)

    fwd_bwd_ms = timed_ms(torch, forward_backward, 1, backward_iters)
    fwd_flop = 4.0 * batch * heads_q * seq * seq * dim / 2
    return {"seq": seq, "forward_ms": fwd_ms, "forward_tflops": fwd_flop / fwd_ms / 1e9,
            "fwd_bwd_ms": fwd_bwd_ms, "fwd_bwd_tflops": 3.5 * fwd_flop / fwd_bwd_ms / 1e9}


def copy_rate(torch):
    n = 1 << 30  # 2 GiB of bf16 each way: many times the L2
    src = torch.empty(n, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    ms = timed_ms(torch, lambda: dst.copy_(src), 2, 10)
    return 2.0 * src.numel() * src.element_size() / ms / 1e6  # GB/s, read + written


def main():
    try:
        import torch
    except ImportError as e:
        print(json.dumps({"benchmark": "torch_sdpa", "available": False, "error": str(e)}))
        return 77  # gpu-check.sh: skipped
    seqs = [int(s) for s in (sys.argv[1] if len(sys.argv) > 1 else "8192,32768").split(",")]
    report = {"benchmark": "torch_sdpa", "torch": torch.__version__,
              "device": torch.cuda.get_device_name(0), "dtype": "bf16", "batch": 1,
              "heads_q": 32, "heads_kv": 8, "head_dim": 128, "causal": True,
              "flop_counting": "forward 4*B*H*S^2*D/2 (causal), forward+backward 3.5x forward",
              "results": []}
    for seq in seqs:
        report["results"].append(attention(torch, seq, 2, 10 if seq <= 8192 else 5, 3))
        torch.cuda.empty_cache()
    report["copy_GB_per_second"] = copy_rate(torch)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
