#include "maxctx/model/activations.h"

namespace maxctx::model {

LlamaActivations allocate_activations(const LlamaConfig& c, int64_t batch, int64_t seq,
                                      int tensor_size) {
  const int64_t N = batch * seq;
  const int64_t E = c.emb_dim;
  const int64_t Hq = c.num_query_heads / tensor_size;
  const int64_t Hkv = c.num_kv_heads / tensor_size;
  const int64_t D = c.head_dim;
  const int64_t F = c.mlp_dim / tensor_size;
  LlamaActivations a;
  a.batch = batch;
  a.seq = seq;
  a.rope_cos = Tensor(Shape{N, D / 2});
  a.rope_sin = Tensor(Shape{N, D / 2});
  for (int64_t l = 0; l <= c.num_layers; ++l) a.residual.emplace_back(Shape{N, E});
  for (int64_t l = 0; l < c.num_layers; ++l) {
    a.residual_mid.emplace_back(Shape{N, E});
    LayerActivations& layer = a.layers.emplace_back();
    layer.attn_norm_rstd = Tensor(Shape{N});
    layer.attn_norm_out = Tensor(Shape{N, E});
    layer.q = Tensor(Shape{N, Hq, D});
    layer.k = Tensor(Shape{N, Hkv, D});
    layer.v = Tensor(Shape{N, Hkv, D});
    layer.attn_out = Tensor(Shape{N, Hq, D});
    layer.lse = Tensor(Shape{batch, Hq, seq});
    layer.mlp_norm_rstd = Tensor(Shape{N});
    layer.mlp_norm_out = Tensor(Shape{N, E});
    layer.gate = Tensor(Shape{N, F});
    layer.up = Tensor(Shape{N, F});
    layer.swiglu_out = Tensor(Shape{N, F});
  }
  a.final_norm_rstd = Tensor(Shape{N});
  a.final_norm_out = Tensor(Shape{N, E});
  a.logits = Tensor(Shape{N, c.vocab_size});
  a.xent_lse = Tensor(Shape{N});
  a.token_loss = Tensor(Shape{N});
  a.d_residual = Tensor(Shape{N, E});
  a.d_normed = Tensor(Shape{N, E});
  a.d_x = Tensor(Shape{N, E});
  a.d_q = Tensor(Shape{N, Hq, D});
  a.d_k = Tensor(Shape{N, Hkv, D});
  a.d_v = Tensor(Shape{N, Hkv, D});
  a.d_attn = Tensor(Shape{N, Hq, D});
  a.d_gate = Tensor(Shape{N, F});
  a.d_up = Tensor(Shape{N, F});
  a.d_swiglu = Tensor(Shape{N, F});
  return a;
}

}  // namespace maxctx::model
