#include "maxctx/plan/inference_work.h"

#include <algorithm>
#include <utility>

#include "maxctx/core/dtype.h"
#include "maxctx/core/split.h"
#include "maxctx/model/inference.h"
#include "maxctx/parallel/context_attention.h"
#include "maxctx/parallel/expert_parallel.h"
#include "maxctx/parallel/parallelize.h"
#include "maxctx/parallel/prefix_attention.h"

namespace maxctx::plan {
namespace {

using parallel::WeightRole;

bool named(const model::WeightSpec& s, const char* part) {
  return s.name.find(part) != std::string::npos;
}

// A weight another matmul of the same input already quantized for (q_proj's for k and v,
// gate_proj's for up, an expert's w1 for its w3): int8_quantize_rows runs once per input.
bool shares_quantized_input(const model::WeightSpec& s) {
  return named(s, "k_proj") || named(s, "v_proj") || named(s, "up_proj") || named(s, ".w3.");
}

// The rows each of this rank's experts runs per call: the routed rows of every token of the
// stage (all ranks' tokens reach a rank's experts) split evenly over the experts, their mean.
int64_t rows_per_expert(const model::LlamaConfig& m, int64_t tokens) {
  return ceil_div(tokens * m.num_experts_per_tok, m.num_experts);
}

struct Shape {
  int64_t tokens = 0;         // rows through the layers on this rank
  int64_t routed_tokens = 0;  // tokens whose routed rows reach this rank's experts (each rank of
                              // the experts' group sends its tokens' rows)
  int64_t head_rows = 0;      // rows whose logits this rank computes
  bool split_rows = false;    // sequence-sharded decode: dense MLP and head rows split over ca
  std::string suffix;         // matmul kind suffix: "" (prefill) or "_decode"
};

void add_matmuls(StageWork& w, const model::LlamaConfig& m, const infer::InferenceSettings& s,
                 int64_t ca, const std::vector<model::WeightSpec>& specs, const Shape& shape) {
  const std::string dtype(dtype_config_name(m.dtype));
  double quantized_elements = 0, quantized_calls = 0;
  for (const model::WeightSpec& spec : specs) {
    const bool head = spec.role == WeightRole::kOutputHead ||
                      (spec.role == WeightRole::kEmbedding && m.tie_embeddings);
    const bool matmul = head || spec.role == WeightRole::kHeadsOrHidden ||
                        spec.role == WeightRole::kIntoResidual || spec.role == WeightRole::kRouter;
    if (!matmul || spec.numel() == 0) continue;  // numel 0: another rank's expert
    const bool int8 = s.int8_weights && int8_quantized(spec);
    InferenceMatmul mm;
    // Attention's and a dense MLP's rows are split over ca > 1: without the decode's row split
    // (ranks holding other tokens) each rank runs its rows over every rank's tokens
    // (parallel::TokenRowSplit).
    const bool token_split = ca > 1 && !shape.split_rows && spec.layer >= 0 &&
                             (named(spec, ".self_attn.") || named(spec, ".mlp."));
    mm.rows = head                   ? shape.head_rows
              : spec.expert_weight() ? rows_per_expert(m, shape.routed_tokens)
              : token_split          ? ca * shape.tokens
                                     : shape.tokens;
    mm.inner = spec.cols;
    mm.cols = shape.split_rows && decode_row_split(spec, m) ? split_count(spec.rows, ca, 0)
                                                            : spec.rows;  // weights are (out, in)
    mm.kind = (int8 ? std::string("int8") : dtype) + shape.suffix;
    mm.weight_bytes = static_cast<double>(stored_weight_bytes(spec, mm.cols, int8, m.weight_dtype));
    if (mm.rows == 0) continue;
    if (int8 && !shares_quantized_input(spec)) {
      quantized_elements += static_cast<double>(mm.rows * mm.inner);
      quantized_calls += 1;
    }
    w.matmuls.push_back(mm);
  }
  if (quantized_elements > 0) {
    w.vectors.push_back({"quantize_rows", quantized_elements, 5, quantized_calls});
  }
}

// The norms, SwiGLU, RoPE, residual adds, embedding and the cache's quantization over `tokens`.
void add_vectors(StageWork& w, const model::LlamaConfig& m, const infer::InferenceSettings& s,
                 int64_t tokens) {
  const auto n = static_cast<double>(tokens);
  const auto E = static_cast<double>(m.emb_dim);
  const auto L = static_cast<double>(m.num_layers);
  const auto D = static_cast<double>(m.head_dim);
  const auto act = static_cast<double>(dtype_size(m.dtype));
  const double hidden =
      n * static_cast<double>(m.moe ? m.num_experts_per_tok * m.mlp_dim : m.mlp_dim);
  const double kv = n * 2 * static_cast<double>(m.num_kv_heads) * D * L;
  w.vectors.push_back({"rmsnorm_forward", n * E * (2 * L + 1), 2 * act});
  w.vectors.push_back({"swiglu_forward", hidden * L, 3 * act});
  w.vectors.push_back({"rope_forward",
                       n * static_cast<double>(m.num_query_heads + m.num_kv_heads) * D * L,
                       2 * act});
  w.vectors.push_back({"residual_add_forward", n * E * 2 * L, 3 * act});
  w.vectors.push_back({"embedding_forward", n * E, 2 * act});
  if (s.quantize_kvcache) w.vectors.push_back({"quantize_kv", kv, act + 1});
}

// A mixture's experts split over expert x ca: per layer the dispatch's counts, then the routed
// rows (`tokens` per rank, K rows each) out to their experts' ranks and back
// (parallel/expert_parallel.h), as all-to-alls over the group.
void add_expert_traffic(Traffic& t, const model::LlamaConfig& m, const InferenceLayout& layout,
                        int64_t tokens) {
  if (!m.moe || layout.expert_ranks == 1) return;
  Traffic layer;
  parallel::ExpertAllToAll::add_forward_traffic(layer, layout.expert_group_axis, m.num_experts,
                                                tokens * m.num_experts_per_tok, m.emb_dim, m.dtype);
  t.add(layer, m.num_layers);
}

// The attention projections' rows split over ca (infer::inference_weight_specs), per call of
// `tokens` rows on each rank: with the same tokens on every rank (a sequence-sharded decode) the
// row split gathers q, k, v and o's parts (the MLP's are counted with the decode); else the token
// row split gathers the inputs and returns the outputs' columns with all_to_alls (parts padded
// to the widest), a dense MLP's too.
void add_attention_split_traffic(Traffic& t, const model::LlamaConfig& m,
                                 const InferenceLayout& layout, int64_t tokens, bool same_tokens) {
  const int64_t ca = layout.ca;
  if (ca == 1) return;
  const auto activation = static_cast<int64_t>(dtype_size(m.dtype));
  const auto widest = [&](int64_t rows) { return split_count(rows, static_cast<int>(ca), 0); };
  const std::pair<int64_t, int64_t> outputs[] = {{m.q_dim(), activation},
                                                 {m.kv_dim(), activation},
                                                 {m.kv_dim(), activation},
                                                 {m.emb_dim, int64_t{sizeof(float)}}};
  const CollectiveKind back = same_tokens ? CollectiveKind::kAllGather : CollectiveKind::kAllToAll;
  for (const auto& [rows, element] : outputs) {
    t.add(layout.ca_axis, back, ca * tokens * widest(rows) * element, m.num_layers);
  }
  if (same_tokens) return;
  for (const int64_t width : {m.emb_dim, m.q_dim()}) {
    t.add(layout.ca_axis, CollectiveKind::kAllGather, ca * tokens * width * activation,
          m.num_layers);
  }
  if (m.moe) return;
  // A dense MLP's rows alike: gate and up from the normed rows, down from the hidden ones.
  for (const int64_t width : {m.emb_dim, m.mlp_dim}) {
    t.add(layout.ca_axis, CollectiveKind::kAllGather, ca * tokens * width * activation,
          m.num_layers);
  }
  const std::pair<int64_t, int64_t> mlp_outputs[] = {
      {m.mlp_dim, activation}, {m.mlp_dim, activation}, {m.emb_dim, int64_t{sizeof(float)}}};
  for (const auto& [rows, element] : mlp_outputs) {
    t.add(layout.ca_axis, CollectiveKind::kAllToAll, ca * tokens * widest(rows) * element,
          m.num_layers);
  }
}

// Every rank ends a call with every slot's logits: the expert groups' gathered over expert.
void add_logits_gather(Traffic& t, const model::LlamaConfig& m, const InferenceLayout& layout) {
  if (layout.expert == 1) return;
  t.add(layout.expert_axis, CollectiveKind::kAllGather,
        layout.expert * layout.group_slots * m.vocab_size * int64_t{sizeof(float)});
}

// The vocabulary split over ca (parallel/vocab_split.h) for `tokens` tokens per rank: the
// embedding's exchange (the counts, the ids to the ranks holding their rows, the rows back; all
// to all, each rank asked for as many rows as it sends on average) and, with `head_rows` rows
// per rank whose logits differ between ranks, their all-gather and that of the logits' parts
// (padded to the widest). A decode step whose rows are the same on every rank (sequence
// sharding) gathers its logits through the row split instead (head_rows 0).
void add_vocab_traffic(Traffic& t, const model::LlamaConfig& m, const InferenceLayout& layout,
                       int64_t tokens, int64_t head_rows) {
  const int64_t ca = layout.ca;
  const auto activation = static_cast<int64_t>(dtype_size(m.dtype));
  t.add(layout.ca_axis, CollectiveKind::kAllToAll, ca * int64_t{sizeof(int64_t)});
  t.add(layout.ca_axis, CollectiveKind::kAllToAll, tokens * int64_t{sizeof(int32_t)});
  t.add(layout.ca_axis, CollectiveKind::kAllToAll, tokens * m.emb_dim * activation);
  if (head_rows == 0) return;
  t.add(layout.ca_axis, CollectiveKind::kAllGather, ca * head_rows * m.emb_dim * activation);
  t.add(layout.ca_axis, CollectiveKind::kAllGather,
        ca * ca * head_rows * split_count(m.vocab_size, static_cast<int>(ca), 0) *
            int64_t{sizeof(float)});
}

bool decode_kind(const std::string& kind) { return kind.ends_with("_decode"); }

// A decode matmul reads its weights once per this many rows (the cpu int8 tile's tokens; the
// probe's decode tables are measured on as many rows), so fewer rows cost as much.
constexpr int64_t kRowsPerWeightRead = 4;

}  // namespace

int64_t InferenceMatmul::smallest() const {
  return decode_kind(kind) ? std::min(inner, cols) : std::min({rows, inner, cols});
}

double InferenceMatmul::timed_flops() const {
  const int64_t counted = decode_kind(kind) ? std::max(rows, kRowsPerWeightRead) : rows;
  return 2.0 * double(counted) * double(inner) * double(cols);
}

bool int8_quantized(const model::WeightSpec& s) {
  return s.role == WeightRole::kHeadsOrHidden || s.role == WeightRole::kIntoResidual ||
         s.role == WeightRole::kOutputHead;
}

bool decode_row_split(const model::WeightSpec& s, const model::LlamaConfig& m) {
  // A weight split over context_autoregressive already (infer::inference_weight_specs: the head
  // over the vocabulary, the attention and a dense MLP over their rows) is this rank's part.
  if (s.rows != s.global_rows) return false;
  if (s.role == WeightRole::kOutputHead) return true;
  return !m.moe && s.layer >= 0 && named(s, ".mlp.");
}

int64_t stored_weight_bytes(const model::WeightSpec& s, int64_t rows, bool int8,
                            DType weight_dtype) {
  if (int8 && int8_quantized(s)) return model::int8_weight_bytes(rows, s.cols);
  return rows * s.cols * static_cast<int64_t>(dtype_size(weight_dtype));
}

const std::vector<std::string>& inference_vector_ops() {
  static const std::vector<std::string> ops = {
      "rmsnorm_forward",   "swiglu_forward", "rope_forward", "residual_add_forward",
      "embedding_forward", "quantize_kv",    "quantize_rows"};
  return ops;
}

StageWork prefill_work(const model::LlamaConfig& m, const infer::InferenceSettings& s,
                       const InferenceLayout& layout, const std::vector<model::WeightSpec>& specs,
                       int64_t length) {
  StageWork w;
  const int64_t ca = layout.ca, slots = layout.group_slots;
  const std::string& ca_axis = layout.ca_axis;
  Shape shape;
  shape.tokens = slots * length / ca;
  shape.routed_tokens = shape.tokens * layout.expert_ranks;
  shape.head_rows = ceil_div(slots, ca);  // the rows holding a prompt's last token
  add_matmuls(w, m, s, ca, specs, shape);
  add_vectors(w, m, s, shape.tokens);
  w.head_dim = m.head_dim;
  w.attention_kind = std::string(dtype_config_name(m.dtype)) + "_forward";
  const auto P = static_cast<double>(length);
  const auto qd = static_cast<double>(m.num_query_heads * m.head_dim * m.num_layers);
  // MaxText's causal count, 4·P²·Hq·D / 2 per prompt and layer, this rank's 1/ca of the queries.
  w.attention_flops = static_cast<double>(slots) * 4.0 * P * P * qd / 2 / static_cast<double>(ca);
  w.attention_bytes = static_cast<double>(slots) * P * 2 *
                      static_cast<double>(m.kv_dim() * m.num_layers) * dtype_size(m.dtype);
  // A chunked prefill runs its slots in passes (infer::InferenceEngine::prefill_passes), each with
  // its own collectives; a long prompt's passes after its first also reach the earlier rows.
  const int64_t S_pad = length;  // a multiple of the split (check_settings, microbenchmark)
  for (const infer::InferenceEngine::PrefillPass& pass :
       infer::InferenceEngine::prefill_passes(s, ca, layout.expert, S_pad)) {
    const int64_t S = pass.tokens / ca, rows = pass.rows(ca);
    // Logit rows: one per slot whose last token is in the pass.
    const int64_t ending = pass.first_position + pass.tokens >= S_pad ? pass.slots : 0;
    if (ca > 1) {
      // Each layer's attention gathers K and V of every slot's prompt (the training all-gather
      // plan, PrefillAttention); batch-sharded decode then gathers them again to keep whole
      // slots. The embedding rows come from the ranks holding them and every rank's one row per
      // slot goes through the vocabulary split's head (add_vocab_traffic).
      const parallel::AttentionOperands x{pass.slots,     S,          m.num_query_heads,
                                          m.num_kv_heads, m.head_dim, m.dtype};
      for (int64_t l = 0; l < m.num_layers; ++l) {
        parallel::AllGatherContextAttention::add_forward_traffic(w.traffic, ca_axis, ca, x);
        if (pass.first_position > 0) {
          parallel::PrefixAttention::add_traffic(w.traffic, ca_axis, ca, S, m.num_query_heads,
                                                 m.head_dim, m.dtype);
        }
      }
      if (s.decode == DecodeSharding::kBatch) {
        const auto element = static_cast<int64_t>(dtype_size(m.dtype));
        w.traffic.add(ca_axis, CollectiveKind::kAllGather, ca * 2 * x.kv_numel() * element,
                      m.num_layers);
        w.traffic.add(ca_axis, CollectiveKind::kAllGather, ca * 2 * x.tokens() * 4);
      }
      add_vocab_traffic(w.traffic, m, layout, rows, ending);
      add_attention_split_traffic(w.traffic, m, layout, rows, false);
    }
    add_expert_traffic(w.traffic, m, layout, rows);
  }
  add_logits_gather(w.traffic, m, layout);
  return w;
}

StageWork decode_work(const model::LlamaConfig& m, const infer::InferenceSettings& s,
                      const InferenceLayout& layout, const std::vector<model::WeightSpec>& specs) {
  StageWork w;
  const int64_t ca = layout.ca, slots = layout.group_slots;
  const std::string& ca_axis = layout.ca_axis;
  const bool sequence = s.decode == DecodeSharding::kSequence;
  Shape shape;
  shape.tokens = sequence ? slots : slots / ca;  // every slot's token, or this rank's slots'
  shape.routed_tokens = shape.tokens * layout.expert_ranks;
  shape.head_rows = shape.tokens;
  shape.split_rows = sequence && ca > 1;
  shape.suffix = "_decode";
  add_matmuls(w, m, s, ca, specs, shape);
  add_vectors(w, m, s, shape.tokens);
  w.head_dim = m.head_dim;
  w.attention_kind =
      (s.quantize_kvcache ? std::string("int8") : std::string(dtype_config_name(m.dtype))) +
      "_decode";
  // Each local slot's query against this rank's rows of a full-length sequence.
  const int64_t rows = sequence ? ceil_div(s.max_target_length, ca) : s.max_target_length;
  const auto reads = static_cast<double>(shape.tokens * rows * m.num_layers);
  w.attention_flops = reads * 4.0 * static_cast<double>(m.num_query_heads * m.head_dim);
  const double element = s.quantize_kvcache ? 1.0 : dtype_size(m.dtype);
  w.attention_bytes = reads * 2 * static_cast<double>(m.kv_dim()) * element;
  if (ca > 1) {
    const int64_t B = shape.tokens, f32 = sizeof(float);
    if (sequence) {
      // Each layer merges the shards' partial attention (out and LSE, f32), and the row split
      // gathers the MLP's hidden units and outputs (parts padded to the widest) and the head's
      // logits.
      w.traffic.add(ca_axis, CollectiveKind::kAllGather,
                    ca * B * m.num_query_heads * (m.head_dim + 1) * f32, m.num_layers);
      const auto activation = static_cast<int64_t>(dtype_size(m.dtype));
      if (!m.moe) {
        for (const int64_t width : {m.mlp_dim, m.emb_dim}) {
          w.traffic.add(ca_axis, CollectiveKind::kAllGather,
                        ca * B * split_count(width, static_cast<int>(ca), 0) * activation,
                        m.num_layers);
        }
      }
      // The head's rows are this rank's part of the vocabulary: the row split's gather.
      w.traffic.add(ca_axis, CollectiveKind::kAllGather,
                    ca * B * split_count(m.vocab_size, static_cast<int>(ca), 0) * f32);
      add_vocab_traffic(w.traffic, m, layout, B, 0);
    } else {
      add_vocab_traffic(w.traffic, m, layout, B, B);
    }
    add_attention_split_traffic(w.traffic, m, layout, B, sequence);
  }
  add_expert_traffic(w.traffic, m, layout, shape.tokens);
  add_logits_gather(w.traffic, m, layout);
  return w;
}

}  // namespace maxctx::plan
