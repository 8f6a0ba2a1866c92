#include "maxctx/model/activations.h"

namespace maxctx::model {

LlamaActivations allocate_activations(const kernels::Kernels& k, const LlamaConfig& c,
                                      int64_t batch, int64_t seq, int tensor_size) {
  const int64_t N = batch * seq;
  const int64_t E = c.emb_dim;
  const int64_t Hq = c.num_query_heads / tensor_size;
  const int64_t Hkv = c.num_kv_heads / tensor_size;
  const int64_t D = c.head_dim;
  const int64_t F = c.mlp_dim / tensor_size;
  // What the forward saves for backward is in the activation dtype; statistics, logits, the
  // tensor-axis sums (proj) and the backward's gradients are f32.
  const DType dt = c.dtype;
  LlamaActivations a;
  a.batch = batch;
  a.seq = seq;
  a.rope_cos = k.empty({N, D / 2});
  a.rope_sin = k.empty({N, D / 2});
  for (int64_t l = 0; l <= c.num_layers; ++l) a.residual.push_back(k.empty({N, E}, dt));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    a.residual_mid.push_back(k.empty({N, E}, dt));
    LayerActivations& layer = a.layers.emplace_back();
    layer.attn_norm_rstd = k.empty({N});
    layer.attn_norm_out = k.empty({N, E}, dt);
    layer.q = k.empty({N, Hq, D}, dt);
    layer.k = k.empty({N, Hkv, D}, dt);
    layer.v = k.empty({N, Hkv, D}, dt);
    layer.attn_out = k.empty({N, Hq, D}, dt);
    layer.lse = k.empty({batch, Hq, seq});
    layer.mlp_norm_rstd = k.empty({N});
    layer.mlp_norm_out = k.empty({N, E}, dt);
    layer.gate = k.empty({N, F}, dt);
    layer.up = k.empty({N, F}, dt);
    layer.swiglu_out = k.empty({N, F}, dt);
    if (c.moe) layer.moe = allocate_moe_buffers(k, c, batch, seq);
  }
  a.final_norm_rstd = k.empty({N});
  a.final_norm_out = k.empty({N, E}, dt);
  a.logits = k.empty({N, c.vocab_size});
  a.xent_lse = k.empty({N});
  a.token_loss = k.empty({N});
  a.proj = k.empty({N, E});
  a.d_residual = k.empty({N, E});
  a.d_normed = k.empty({N, E});
  a.d_x = k.empty({N, E});
  a.d_q = k.empty({N, Hq, D});
  a.d_k = k.empty({N, Hkv, D});
  a.d_v = k.empty({N, Hkv, D});
  a.d_attn = k.empty({N, Hq, D});
  a.d_gate = k.empty({N, F});
  a.d_up = k.empty({N, F});
  a.d_swiglu = k.empty({N, F});
  if (c.moe) a.moe_grad = allocate_moe_grad_buffers(k, c, batch, seq);
  return a;
}

}  // namespace maxctx::model
