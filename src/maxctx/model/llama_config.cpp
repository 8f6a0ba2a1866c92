#include "maxctx/model/llama_config.h"

#include "maxctx/core/check.h"

namespace maxctx::model {

int64_t LlamaConfig::num_parameters() const {
  const int64_t per_layer = 2 * emb_dim                            // two RMSNorm weights
                            + emb_dim * (q_dim() + 2 * kv_dim())   // q, k, v
                            + q_dim() * emb_dim                    // o
                            + 3 * emb_dim * mlp_dim * num_experts  // gate, up, down
                            + (moe ? num_experts * emb_dim : 0);   // the router
  const int64_t head = tie_embeddings ? 0 : vocab_size * emb_dim;
  return vocab_size * emb_dim + num_layers * per_layer + emb_dim + head;
}

LlamaConfig llama_config_from(const Config& c) {
  if (c.rope_min_timescale != 1.0) {
    fail("rope_min_timescale = {} is not supported; Llama-family RoPE uses 1",
         c.rope_min_timescale);
  }
  LlamaConfig m;
  m.vocab_size = c.vocab_size;
  m.emb_dim = c.derived.emb_dim;
  m.num_query_heads = c.derived.num_query_heads;
  m.num_kv_heads = c.derived.num_kv_heads;
  m.head_dim = c.head_dim;
  m.mlp_dim = c.derived.mlp_dim;
  m.num_layers = c.derived.num_decoder_layers;
  m.norm_eps = static_cast<float>(c.normalization_layer_epsilon);
  m.rope.theta = c.rope_max_timescale;
  if (c.rope_type == "llama3.1") {
    m.rope.scaling = kernels::RopeScaling::kLlama3;
    m.rope.factor = c.rope_scaling_factor;
    m.rope.low_freq_factor = c.rope_low_freq_factor;
    m.rope.high_freq_factor = c.rope_high_freq_factor;
    m.rope.original_max_position_embeddings =
        static_cast<double>(c.rope_original_max_position_embeddings);
  }
  m.moe = c.decoder_block == "mixtral";
  m.num_experts = c.num_experts;
  m.num_experts_per_tok = c.num_experts_per_tok;
  apply_precision(c, m);
  m.tie_embeddings = c.logits_via_embedding;
  m.sliding_window =
      c.attention_type == "local_sliding" ? static_cast<int32_t>(c.sliding_window_size) : 0;
  return m;
}

void apply_precision(const Config& c, LlamaConfig& m) {
  // The config's allowed values (float32|bfloat16) were checked when it was read.
  m.dtype = parse_dtype(c.dtype);
  m.weight_dtype = parse_dtype(c.weight_dtype);
  m.sparse_matmul = c.sparse_matmul;
  m.capacity_factor = c.capacity_factor;
  m.load_balance_loss_weight = c.load_balance_loss_weight;
}

}  // namespace maxctx::model
