#!/usr/bin/env python3
"""A training step of Hugging Face transformers' LlamaForCausalLM, for gpu-check.sh.

The model of configs/models/llama-1.5b.yml (hidden 2048, 16 layers, 32/8 heads, FFN 8192,
vocab 128256, untied), bf16 weights, SDPA attention, fused AdamW, batch 1, at each S given
(default 8192 and 32768; gradient checkpointing above 8192, as the 32K step needs to fit and as
maxctx's remat does). Tokens/s, and TFLOP/s by MaxText's formula (flops_per_step; recomputation
not counted), over timed steps after warm-up. Prints one JSON object; {"available": false, ...} and exit 77 when
torch or transformers cannot be imported.
"""
import json
import sys
import time


def flops_per_step(seq, params, layers, emb, vocab):
    # MaxText (calculate_tflops_training_per_device): 6 * (weights used in matmuls) per token,
    # the input embedding table excluded (a gather, not a matmul), plus causal attention:
    # QK^T and PV forward 2 * 2 * S^2 * E / 2 per layer, times 3 for forward + backward.
    matmul_params = params - vocab * emb
    return 6.0 * matmul_params * seq + 6.0 * layers * seq * seq * emb


def main():
    seqs = [int(s) for s in (sys.argv[1] if len(sys.argv) > 1 else "8192,32768").split(",")]
    try:
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
        import transformers
    except Exception as e:  # noqa: BLE001 - any import failure means "not available here"
        print(json.dumps({"benchmark": "hf_llama_step", "available": False, "error": str(e)}))
        return 77  # gpu-check.sh: skipped
    report = {"benchmark": "hf_llama_step", "available": True, "torch": torch.__version__,
              "transformers": transformers.__version__, "dtype": "bf16", "batch": 1,
              "optimizer": "torch.optim.AdamW(fused=True)", "attention": "sdpa", "results": []}
    for seq in seqs:
        entry = {"seq": seq, "gradient_checkpointing": seq > 8192}
        try:
            cfg = LlamaConfig(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                              num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                              max_position_embeddings=seq, tie_word_embeddings=False)
            cfg._attn_implementation = "sdpa"
            model = LlamaForCausalLM(cfg).to("cuda", dtype=torch.bfloat16)
            if seq > 8192:
                model.gradient_checkpointing_enable()
            params = sum(p.numel() for p in model.parameters())
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
            ids = torch.randint(0, cfg.vocab_size, (1, seq), device="cuda")

            def step():
                out = model(input_ids=ids, labels=ids)
                out.loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)

            for _ in range(2):
                step()
            torch.cuda.synchronize()
            iters = 3
            start = time.perf_counter()
            for _ in range(iters):
                step()
            torch.cuda.synchronize()
            seconds = (time.perf_counter() - start) / iters
            flops = flops_per_step(seq, params, 16, 2048, 128256)
            entry.update({"params": params, "step_ms": seconds * 1e3,
                          "tokens_per_second": seq / seconds,
                          "tflops_per_second": flops / seconds / 1e12})
            del model, opt, ids
            torch.cuda.empty_cache()
        except Exception as e:  # noqa: BLE001 - recorded, the next length still runs
            entry["error"] = str(e)[:500]
            torch.cuda.empty_cache()
        report["results"].append(entry)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
