#include "maxctx/model/llama_config.h"

#include "maxctx/core/check.h"

namespace maxctx::model {

template <typename T>
T parameter_count(const LlamaConfig& c) {
  const T E = static_cast<T>(c.emb_dim), F = static_cast<T>(c.mlp_dim);
  const T V = static_cast<T>(c.vocab_size), X = static_cast<T>(c.num_experts);
  const T q = static_cast<T>(c.num_query_heads) * static_cast<T>(c.head_dim);
  const T kv = static_cast<T>(c.num_kv_heads) * static_cast<T>(c.head_dim);
  const T per_layer = 2 * E                      // two RMSNorm weights
                      + E * (q + 2 * kv)         // q, k, v
                      + q * E                    // o
                      + 3 * E * F * X            // gate, up, down (of every expert)
                      + (c.moe ? X * E : T(0));  // the router
  const T head = c.tie_embeddings ? T(0) : V * E;
  return V * E + static_cast<T>(c.num_layers) * per_layer + E + head;
}
template int64_t parameter_count<int64_t>(const LlamaConfig&);
template double parameter_count<double>(const LlamaConfig&);

int64_t LlamaConfig::num_parameters() const { return parameter_count<int64_t>(*this); }

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
  // The factors are kept without Llama 3 scaling too (unused then), so that a checkpoint's
  // recorded model can be compared with the keys given (model/model_record.h).
  if (c.rope_type == "llama3.1") m.rope.scaling = kernels::RopeScaling::kLlama3;
  m.rope.factor = c.rope_scaling_factor;
  m.rope.low_freq_factor = c.rope_low_freq_factor;
  m.rope.high_freq_factor = c.rope_high_freq_factor;
  m.rope.original_max_position_embeddings =
      static_cast<double>(c.rope_original_max_position_embeddings);
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
