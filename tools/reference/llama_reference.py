#!/usr/bin/python3
"""Independent float64 oracle for the maxctx Llama model: tiny models, their logits, loss, grads.

Builds tiny Llama-family models from fixed seeds, writes out their math in plain torch ops
(Hugging Face Llama semantics; there is no `transformers` here), runs forward and backward in
float64 on a packed batch, and writes the fixtures the C++ tests compare against:

  tests/fixtures/<name>/config.json           Hugging Face LlamaConfig form
  tests/fixtures/<name>/model.safetensors     weights, F32, Hugging Face tensor names
  tests/fixtures/<name>/reference.safetensors input_ids, positions, segment_ids, targets (I32),
                                              logits (F32 [B,S,V]), loss (F32 [1]),
                                              grad.<weight name> (F32) for every weight
  tests/fixtures/tiny_llama/golden_logits.jsonl  MaxText forward_pass_logit_checker format

The weights are drawn in float64, rounded to float32 (what is stored), and the float32 values
are what the float64 computation uses, so the fixture is exact for the stored weights. Before
writing, the script checks itself: the packed batch equals each document run alone, autograd
equals central finite differences, and the files read back bit-exact. Run with Debian's
/usr/bin/python3 (numpy + torch 1.13); see README.md next to this file.
"""

import argparse
import filecmp
import json
import math
import os
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_format import Raw, read_safetensors, write_safetensors  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_OUT = os.path.join(REPO_ROOT, "tests", "fixtures")

# One entry per fixture. `rows` gives, per batch row, the lengths of the packed documents; the
# rest of the row (up to seq_len) is padding with segment id 0. Documents longer than
# sliding_window make the window bite.
FIXTURES = {
    "tiny_llama": dict(
        seed=1234,
        config=dict(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=8, rms_norm_eps=1e-5,
                    rope_theta=10000.0, rope_scaling=None, tie_word_embeddings=False,
                    max_position_embeddings=128),
        seq_len=24,
        rows=[[10, 14], [7, 11]],
        golden_prompt_lengths=[12],
    ),
    "tiny_llama_tied_scaled": dict(
        seed=2024,
        config=dict(vocab_size=64, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=4, head_dim=8, rms_norm_eps=1e-6,
                    rope_theta=500000.0,
                    # With head_dim 8 the four wavelengths are 6.3, 167, 4443 and 118000
                    # positions: one in each llama3 band (high: kept, medium: smoothed,
                    # low: divided by factor).
                    rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                      high_freq_factor=4.0,
                                      original_max_position_embeddings=256),
                    tie_word_embeddings=True, max_position_embeddings=2048),
        seq_len=20,
        rows=[[20], [6, 9]],
    ),
    "tiny_mistral_window": dict(
        seed=77,
        config=dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                    num_attention_heads=2, num_key_value_heads=1, head_dim=16, rms_norm_eps=1e-5,
                    rope_theta=10000.0, rope_scaling=None, tie_word_embeddings=False,
                    max_position_embeddings=128, sliding_window=5),
        seq_len=24,
        rows=[[13, 11], [16]],
    ),
}

# A Mixtral (Hugging Face MixtralConfig): every decoder layer's MLP is a mixture of 4 SwiGLU
# experts with 2 chosen per token. load_balance_loss_weight is MaxText's (the config.json has no
# such field: Hugging Face's router_aux_loss_coef weighs a differently normalised loss); the
# reference loss and gradients include MaxText's load-balance loss at this weight.
FIXTURES["tiny_mixtral"] = dict(
    seed=4321,
    config=dict(vocab_size=96, hidden_size=32, intermediate_size=24, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=8, rms_norm_eps=1e-5,
                rope_theta=1000000.0, rope_scaling=None, tie_word_embeddings=False,
                max_position_embeddings=128, num_local_experts=4, num_experts_per_tok=2),
    seq_len=24,
    rows=[[10, 14], [7, 11]],
    golden_prompt_lengths=[12],
    load_balance_loss_weight=0.01,
)

# tiny_llama's weights rounded to bfloat16 and stored as BF16, as real Hugging Face Llama
# checkpoints ship (torch_dtype bfloat16): the references are exact for the bf16 values.
FIXTURES["tiny_llama_bf16"] = dict(FIXTURES["tiny_llama"], bf16=True)

# ---------------------------------------------------------------------------------------------
# Weights: Hugging Face names, nn.Linear layout (out, in).


def is_moe(cfg):
    return "num_local_experts" in cfg


def weight_shapes(cfg):
    """(name, shape) for every weight, in a fixed order: the one list of the model's tensors."""
    d, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    dh, hq, hkv = cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    shapes = [("model.embed_tokens.weight", (v, d))]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes += [
            (p + "input_layernorm.weight", (d,)),
            (p + "self_attn.q_proj.weight", (hq * dh, d)),
            (p + "self_attn.k_proj.weight", (hkv * dh, d)),
            (p + "self_attn.v_proj.weight", (hkv * dh, d)),
            (p + "self_attn.o_proj.weight", (d, hq * dh)),
            (p + "post_attention_layernorm.weight", (d,)),
        ]
        if is_moe(cfg):
            # Hugging Face Mixtral: the router, then per expert w1 (gate), w3 (up), w2 (down).
            shapes.append((p + "block_sparse_moe.gate.weight", (cfg["num_local_experts"], d)))
            for j in range(cfg["num_local_experts"]):
                e = p + f"block_sparse_moe.experts.{j}."
                shapes += [(e + "w1.weight", (f, d)), (e + "w3.weight", (f, d)),
                           (e + "w2.weight", (d, f))]
        else:
            shapes += [
                (p + "mlp.gate_proj.weight", (f, d)),
                (p + "mlp.up_proj.weight", (f, d)),
                (p + "mlp.down_proj.weight", (d, f)),
            ]
    shapes.append(("model.norm.weight", (d,)))
    if not cfg["tie_word_embeddings"]:
        shapes.append(("lm_head.weight", (v, d)))
    return shapes


def init_weights(cfg, rng):
    """float32 weights scaled so activations, attention and logits are O(1), not near-uniform."""
    weights = {}
    for name, shape in weight_shapes(cfg):
        if name.endswith("norm.weight"):
            w = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name == "model.embed_tokens.weight":
            # A tied embedding is also the output head: scale it like one, or the logits reach
            # ±30 and the softmax saturates.
            scale = 1.5 / math.sqrt(shape[1]) if cfg["tie_word_embeddings"] else 1.0
            w = scale * rng.standard_normal(shape)
        else:
            w = rng.standard_normal(shape) / math.sqrt(shape[1])
        weights[name] = w.astype(np.float32)
    return weights


# ---------------------------------------------------------------------------------------------
# The model, float64 throughout.


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def inverse_frequencies(cfg):
    """theta^(-2i/Dh) for i < Dh/2, with Hugging Face's llama3 rescaling when configured."""
    dh = cfg["head_dim"]
    i = torch.arange(dh // 2, dtype=torch.float64)
    inv_freq = cfg["rope_theta"] ** (-2.0 * i / dh)
    scaling = cfg["rope_scaling"]
    if scaling is None:
        return inv_freq
    assert scaling["rope_type"] == "llama3", scaling
    factor = scaling["factor"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_len = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    low_freq_wavelen, high_freq_wavelen = old_len / low, old_len / high
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return torch.where(medium, smoothed, scaled)


def rope(x, positions, inv_freq):
    """Rotate-half RoPE. x (B,S,H,Dh), positions (B,S): pairs (i, i + Dh/2) rotate by pos·f_i."""
    half = x.shape[-1] // 2
    angle = positions.to(torch.float64)[:, :, None] * inv_freq  # (B,S,Dh/2)
    cos, sin = angle.cos()[:, :, None, :], angle.sin()[:, :, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def attention_allowed(positions, segments, window):
    """(B,S,S) bool: query i sees key j iff same segment, pos_j <= pos_i, within the window."""
    pi, pj = positions[:, :, None], positions[:, None, :]
    allowed = (segments[:, :, None] == segments[:, None, :]) & (pj <= pi)
    if window is not None:
        allowed &= (pi - pj) < window
    return allowed


def swiglu(x, w_gate, w_up, w_down):
    return (torch.nn.functional.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T


def route(cfg, router_logits):
    """Hugging Face Mixtral routing of router_logits (B,S,X).

    Softmax over all experts, the top num_experts_per_tok, their weights renormalised to sum 1
    (the same as MaxText's softmax over the top-k logits). Returns (probs (B,S,X), top_index
    (B,S,k), combine (B,S,X): each expert's weight for the token, 0 where not chosen). Equal
    logits: the lower expert index ranks first (jax.lax.top_k's rule, and torch.topk's in
    practice); check_router_margins makes sure the fixtures never depend on that.
    """
    probs = torch.softmax(router_logits, dim=-1)
    top_prob, top_index = torch.topk(probs, cfg["num_experts_per_tok"], dim=-1)
    top_weight = top_prob / top_prob.sum(-1, keepdim=True)
    combine = torch.zeros_like(probs).scatter(-1, top_index, top_weight)
    return probs, top_index, combine


def load_balance_loss(cfg, probs, top_index, weight):
    """MaxText's moe.py load_balance_loss for one layer: per sequence, the fraction of top-k
    assignments each expert gets (density) and its mean router probability, multiplied, averaged
    over batch and experts, times num_experts² and the weight. Every position of a row counts,
    padding included (MaxText does not mask it)."""
    x = cfg["num_local_experts"]
    assignments = torch.nn.functional.one_hot(top_index, x).sum(2).to(torch.float64)  # (B,S,X)
    density = assignments.mean(1)  # (B,X)
    density_prob = probs.mean(1)  # (B,X)
    return (density * density_prob).mean() * x * x * weight


def moe_mlp(cfg, w, p, x, aux):
    """Σ_k w_k · expert_k(x) over the chosen experts; appends (probs, top_index, router logits)
    to aux."""
    router_logits = x @ w[p + "block_sparse_moe.gate.weight"].T
    probs, top_index, combine = route(cfg, router_logits)
    aux.append((probs, top_index, router_logits.detach()))
    out = torch.zeros_like(x)
    for j in range(cfg["num_local_experts"]):
        e = p + f"block_sparse_moe.experts.{j}."
        expert = swiglu(x, w[e + "w1.weight"], w[e + "w3.weight"], w[e + "w2.weight"])
        out = out + combine[..., j:j + 1] * expert
    return out


def forward(cfg, w, tokens, positions, segments, aux=None):
    """Logits (B,S,V). w maps Hugging Face names to float64 tensors. A Mixtral appends each
    layer's (router probs, top-k indices, router logits) to aux."""
    aux = [] if aux is None else aux
    b, s = tokens.shape
    dh, hq, hkv = cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    eps = cfg["rms_norm_eps"]
    inv_freq = inverse_frequencies(cfg)
    allowed = attention_allowed(positions, segments, cfg.get("sliding_window"))[:, None]
    h = w["model.embed_tokens.weight"][tokens]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        x = rms_norm(h, w[p + "input_layernorm.weight"], eps)
        q = (x @ w[p + "self_attn.q_proj.weight"].T).view(b, s, hq, dh)
        k = (x @ w[p + "self_attn.k_proj.weight"].T).view(b, s, hkv, dh)
        v = (x @ w[p + "self_attn.v_proj.weight"].T).view(b, s, hkv, dh)
        q, k = rope(q, positions, inv_freq), rope(k, positions, inv_freq)
        # GQA as Hugging Face's repeat_kv: query head h reads kv head h // (hq / hkv).
        k = k.repeat_interleave(hq // hkv, dim=2)
        v = v.repeat_interleave(hq // hkv, dim=2)
        scores = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(dh)
        probs = torch.softmax(scores.masked_fill(~allowed, -math.inf), dim=-1)
        attn = torch.einsum("bhij,bjhd->bihd", probs, v).reshape(b, s, hq * dh)
        h = h + attn @ w[p + "self_attn.o_proj.weight"].T
        x = rms_norm(h, w[p + "post_attention_layernorm.weight"], eps)
        if is_moe(cfg):
            h = h + moe_mlp(cfg, w, p, x, aux)
        else:
            h = h + swiglu(x, w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"],
                           w[p + "mlp.down_proj.weight"])
    x = rms_norm(h, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    return x @ head.T


def loss_of(logits, targets, segments):
    """Σ w_i·xent_i / Σ w_i with w_i = (segment_i != 0): padding carries no loss."""
    vocab = logits.shape[-1]
    xent = torch.nn.functional.cross_entropy(
        logits.reshape(-1, vocab), targets.reshape(-1).long(), reduction="none")
    weight = (segments.reshape(-1) != 0).to(torch.float64)
    return (xent * weight).sum() / weight.sum()


def objective(cfg, spec, w, batch):
    """(total loss, lm loss, moe_lb_loss, logits, aux): the loss trained on (moe_lb_loss None
    for a dense model). For a Mixtral, MaxText's train.py adds the mean over layers of the
    layers' load-balance losses to the lm loss."""
    aux = []
    logits = forward(cfg, w, *batch[:3], aux=aux)
    lm = loss_of(logits, batch[3], batch[2])
    if not is_moe(cfg):
        return lm, lm, None, logits, aux
    weight = spec["load_balance_loss_weight"]
    lb = torch.stack([load_balance_loss(cfg, probs, top, weight) for probs, top, _ in aux]).mean()
    return lm + lb, lm, lb, logits, aux


def check_router_margins(cfg, aux, margin=1e-3):
    """The k-th and (k+1)-th router logits of every token differ by more than `margin`, so an
    fp32 or bf16 engine picks the same experts and tie-breaking never matters here."""
    k = cfg["num_experts_per_tok"]
    for _, _, logits in aux:
        ranked = logits.sort(-1, descending=True).values
        gap = (ranked[..., k - 1] - ranked[..., k]).min().item()
        assert gap > margin, f"router logits nearly tie (gap {gap}): pick another seed"


# ---------------------------------------------------------------------------------------------
# The batch: packed documents, positions restarting per document, padding at the end of a row.


def make_batch(spec, vocab, rng):
    """input_ids, positions, segment_ids, targets as int32 (B,S) arrays, plus the documents.

    Each document is drawn as n+1 tokens: inputs are the first n, targets the last n, so every
    non-padding token has its next token as target (MaxText's shift-before-pack). Padding: token
    0, segment 0, target 0, positions 0,1,2,... so that position order equals index order
    everywhere and a kernel that also skips keys with j > i sees the same mask.
    """
    s = spec["seq_len"]
    rows = spec["rows"]
    arrays = {k: np.zeros((len(rows), s), np.int32)
              for k in ("input_ids", "positions", "segment_ids", "targets")}
    documents = []  # (row, start, tokens with n+1 entries)
    for r, lengths in enumerate(rows):
        assert sum(lengths) <= s, (lengths, s)
        start = 0
        for seg, n in enumerate(lengths, start=1):
            doc = rng.integers(1, vocab, size=n + 1).astype(np.int32)
            arrays["input_ids"][r, start:start + n] = doc[:-1]
            arrays["targets"][r, start:start + n] = doc[1:]
            arrays["positions"][r, start:start + n] = np.arange(n)
            arrays["segment_ids"][r, start:start + n] = seg
            documents.append((r, start, doc))
            start += n
        arrays["positions"][r, start:] = np.arange(s - start)
    return arrays, documents


# ---------------------------------------------------------------------------------------------
# Self-checks: the oracle is only useful if it is right.


def check_packing(cfg, w, arrays, documents, packed_logits):
    """Each document run alone (positions 0..n-1, one segment) gives the packed rows' logits."""
    for r, start, doc in documents:
        n = len(doc) - 1
        tokens = torch.from_numpy(doc[None, :-1].astype(np.int64))
        alone = forward(cfg, w, tokens, torch.arange(n)[None], torch.ones(1, n, dtype=torch.int64))
        diff = (alone[0] - packed_logits[r, start:start + n]).abs().max().item()
        assert diff < 1e-10, f"packed and unpacked logits differ by {diff}"


def check_gradients(cfg, spec, w, batch, grads, rng, samples=6):
    """Central finite differences at a few random weight entries agree with autograd."""
    names = sorted(w)
    for _ in range(samples):
        name = names[rng.integers(len(names))]
        index = tuple(int(rng.integers(n)) for n in w[name].shape)
        step = 1e-5
        values = []
        for sign in (1, -1):
            shifted = {k: t.detach().clone() for k, t in w.items()}
            shifted[name][index] += sign * step
            values.append(objective(cfg, spec, shifted, batch)[0].item())
        numeric = (values[0] - values[1]) / (2 * step)
        analytic = grads[name][index].item()
        # Measured error of the central difference here: ~1e-10 (truncation and rounding).
        assert abs(numeric - analytic) <= 1e-8 + 1e-6 * abs(analytic), (
            name, index, numeric, analytic)


# ---------------------------------------------------------------------------------------------
# Output.


def bf16_bits(x):
    """float32 array -> uint16 bfloat16 bits, rounding to nearest even (NaN-free input)."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def bf16_values(bits):
    """uint16 bfloat16 bits -> float32 values (exact)."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def hf_config(cfg, bf16=False):
    if is_moe(cfg):
        # MixtralConfig: no attention_bias/mlp_bias fields; router noise off; Mixtral's own
        # router_aux_loss_coef default (Hugging Face's loss, not used by maxctx).
        out = {
            "architectures": ["MixtralForCausalLM"],
            "model_type": "mixtral",
            "hidden_act": "silu",
            "torch_dtype": "bfloat16" if bf16 else "float32",
            "bos_token_id": 1,
            "eos_token_id": 2,
            "output_router_logits": False,
            "router_aux_loss_coef": 0.001,
            "router_jitter_noise": 0.0,
        }
        out.update(cfg)
        out.setdefault("sliding_window", None)  # MixtralConfig writes the key, null: no window
        return out
    out = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "torch_dtype": "bfloat16" if bf16 else "float32",
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    out.update(cfg)
    if out.get("sliding_window") is None:
        out.pop("sliding_window", None)
    return out


def format_f32(x):
    """Shortest text that reads back as the same float32 (numpy's repr of a float32)."""
    return str(np.float32(x))


def write_golden(path, cfg, w, prompts):
    """MaxText forward_pass_logit_checker JSONL: prompt, tokens, logits [seq][vocab] per line."""
    lines = []
    for tokens in prompts:
        n = len(tokens)
        t = torch.tensor([tokens], dtype=torch.int64)
        aux = []
        logits = forward(cfg, w, t, torch.arange(n)[None], torch.ones(1, n, dtype=torch.int64),
                         aux)[0]
        if is_moe(cfg):
            check_router_margins(cfg, aux)
        rows = ",".join("[" + ",".join(format_f32(v) for v in row) + "]"
                        for row in logits.to(torch.float32).tolist())
        prompt = "token ids: " + " ".join(str(x) for x in tokens)
        lines.append('{"prompt": %s, "tokens": %s, "logits": [%s]}'
                     % (json.dumps(prompt), json.dumps([int(x) for x in tokens]), rows))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def build_fixture(name, spec, out_dir):
    torch.set_num_threads(1)  # one summation order: the fixtures are byte-for-byte reproducible
    cfg = spec["config"]
    rng = np.random.default_rng(spec["seed"])
    weights32 = init_weights(cfg, rng)
    bf16 = spec.get("bf16", False)
    stored = weights32
    if bf16:
        stored = {k: Raw("BF16", bf16_bits(v)) for k, v in weights32.items()}
        weights32 = {k: bf16_values(v.array) for k, v in stored.items()}
    arrays, documents = make_batch(spec, cfg["vocab_size"], rng)

    w = {k: torch.from_numpy(v.astype(np.float64)).requires_grad_() for k, v in weights32.items()}
    batch = tuple(torch.from_numpy(arrays[k].astype(np.int64))
                  for k in ("input_ids", "positions", "segment_ids", "targets"))
    loss, lm_loss, lb_loss, logits, aux = objective(cfg, spec, w, batch)
    loss.backward()
    if is_moe(cfg):
        check_router_margins(cfg, aux)
    grads = {k: t.grad.detach() for k, t in w.items()}
    detached = {k: t.detach() for k, t in w.items()}

    check_packing(cfg, detached, arrays, documents, logits.detach())
    check_gradients(cfg, spec, detached, batch, grads, np.random.default_rng(spec["seed"] + 1))

    fixture_dir = os.path.join(out_dir, name)
    os.makedirs(fixture_dir, exist_ok=True)
    with open(os.path.join(fixture_dir, "config.json"), "w") as f:
        json.dump(hf_config(cfg, bf16), f, indent=2, sort_keys=True)
        f.write("\n")
    write_safetensors(os.path.join(fixture_dir, "model.safetensors"), stored,
                      metadata={"format": "pt"})
    reference = dict(arrays)
    reference["logits"] = logits.detach().numpy().astype(np.float32)
    reference["loss"] = np.array([loss.item()], np.float32)
    metadata = {
        "generator": "tools/reference/llama_reference.py",
        "fixture": name,
        "loss_f64": repr(loss.item()),
    }
    if lb_loss is not None:
        reference["lm_loss"] = np.array([lm_loss.item()], np.float32)
        reference["moe_lb_loss"] = np.array([lb_loss.item()], np.float32)
        metadata["lm_loss_f64"] = repr(lm_loss.item())
        metadata["moe_lb_loss_f64"] = repr(lb_loss.item())
        metadata["load_balance_loss_weight"] = repr(spec["load_balance_loss_weight"])
    for k, g in grads.items():
        reference["grad." + k] = g.numpy().astype(np.float32)
    write_safetensors(os.path.join(fixture_dir, "reference.safetensors"), reference,
                      metadata=metadata)

    # Read back what was written: bit-exact.
    read_weights, _ = read_safetensors(os.path.join(fixture_dir, "model.safetensors"))
    read_reference, _ = read_safetensors(os.path.join(fixture_dir, "reference.safetensors"))
    written_weights = {k: v.array if isinstance(v, Raw) else v for k, v in stored.items()}
    for written, read in ((written_weights, read_weights), (reference, read_reference)):
        assert sorted(written) == sorted(read)
        for k in written:
            assert written[k].dtype == read[k].dtype and np.array_equal(written[k], read[k]), k

    if spec.get("golden_prompt_lengths"):
        # The first prompt is row 0's first document, so the golden logits and the packed
        # reference logits must agree; the others are fresh token sequences.
        prompts = [documents[0][2][:-1].tolist()]
        golden_rng = np.random.default_rng(spec["seed"] + 2)
        for n in spec["golden_prompt_lengths"]:
            prompts.append(golden_rng.integers(1, cfg["vocab_size"], size=n).tolist())
        write_golden(os.path.join(fixture_dir, "golden_logits.jsonl"), cfg, detached, prompts)
    return loss.item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out-dir", default=DEFAULT_OUT, help="fixtures root (tests/fixtures)")
    parser.add_argument("--fixture", action="append", choices=sorted(FIXTURES),
                        help="build only this fixture (repeatable); default: all")
    parser.add_argument("--verify", action="store_true",
                        help="rebuild into a temporary directory and compare byte for byte with "
                             "--out-dir instead of writing it")
    args = parser.parse_args()
    names = args.fixture or sorted(FIXTURES)
    if not args.verify:
        for name in names:
            loss = build_fixture(name, FIXTURES[name], args.out_dir)
            print(f"{name}: loss {loss:.12f} -> {os.path.join(args.out_dir, name)}")
        return 0
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            build_fixture(name, FIXTURES[name], tmp)
            fresh = os.path.join(tmp, name)
            for file in sorted(os.listdir(fresh)):
                same = filecmp.cmp(os.path.join(fresh, file),
                                   os.path.join(args.out_dir, name, file), shallow=False)
                print(f"{name}/{file}: {'identical' if same else 'DIFFERS'}")
                failed |= not same
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
