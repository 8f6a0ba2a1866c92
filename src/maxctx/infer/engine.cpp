#include "maxctx/infer/engine.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <string>
#include <utility>

#include "maxctx/core/check.h"
#include "maxctx/core/memory_check.h"
#include "maxctx/core/rng.h"
#include "maxctx/core/trace.h"
#include "maxctx/infer/model_source.h"
#include "maxctx/model/memory_estimate.h"
#include "maxctx/model/moe_block.h"
#include "maxctx/parallel/load_balance.h"
#include "maxctx/parallel/parallelize.h"

namespace maxctx::infer {
namespace {

int64_t ceil_div(int64_t n, int64_t m) { return (n + m - 1) / m; }

// The prompt is cut into this many equal chunks: 2·ca with the dual chunk swap, else ca.
int64_t prefill_chunks(const InferenceSettings& s, int64_t ca) {
  return s.load_balance && ca > 1 ? 2 * ca : ca;
}

// Whether a prefill runs in passes of whole slots (use_chunked_prefill; a batch-sharded
// prefill stores every slot's columns at once, so it is not chunked).
bool chunked_prefill(const InferenceSettings& s, int64_t ca) {
  return s.prefill_chunk_size > 0 && (s.decode == DecodeSharding::kSequence || ca == 1);
}

// Which of `ca` ranks holds prompt position `position` of a prefill padded to S_pad tokens, and
// at which of its S_pad/ca columns (context_shard_indices' layout).
std::pair<int64_t, int64_t> prefill_holder(int64_t position, int64_t S_pad, int64_t ca,
                                           bool load_balance) {
  for (int64_t r = 0; r < ca; ++r) {
    const std::vector<int64_t> columns = context_shard_indices(S_pad, ca, r, load_balance);
    const auto at = std::find(columns.begin(), columns.end(), position);
    if (at != columns.end()) return {r, at - columns.begin()};
  }
  fail("position {} outside a prefill of {} tokens", position, S_pad);
}

void check_settings(const InferenceSettings& s, int64_t ca, int64_t expert) {
  if (s.max_prefill_length < 1) {
    fail("max_prefill_predict_length = {}: allowed >= 1", s.max_prefill_length);
  }
  if (s.max_target_length <= s.max_prefill_length) {
    fail(
        "max_target_length = {} must exceed max_prefill_predict_length = {}: a sequence is the "
        "prompt plus at least one generated token",
        s.max_target_length, s.max_prefill_length);
  }
  const int64_t chunks = prefill_chunks(s, ca);
  if (s.max_prefill_length % chunks != 0) {
    fail(
        "max_prefill_predict_length = {} does not split over context_autoregressive = {}{}: make "
        "it a multiple of {}",
        s.max_prefill_length, ca,
        chunks == ca ? "" : " with context_parallel_load_balance (2·ca chunks)", chunks);
  }
  if (s.slots < 1) fail("{} decode slots: allowed >= 1 (per_device_batch_size x devices)", s.slots);
  if (s.slots % expert != 0) {
    fail(
        "expert = {} splits the {} decode slots into {} groups (MaxText's decode batch over the "
        "expert axis): make per_device_batch_size x devices a multiple of {}",
        expert, s.slots, expert, expert);
  }
  const int64_t group_slots = s.slots / expert;
  if (s.decode == DecodeSharding::kBatch && group_slots % ca != 0) {
    fail(
        "context_autoregressive_decode=batch splits the {} decode slots{} over "
        "context_autoregressive = {}: make per_device_batch_size x devices a multiple of {}, or "
        "use context_autoregressive_decode=sequence",
        group_slots,
        expert > 1 ? fmt::format(" of an expert group ({} / expert = {})", s.slots, expert) : "",
        ca, ca * expert);
  }
}

}  // namespace

void check_inference_mesh(const Mesh& mesh) { parallel::ParallelDims::inference(mesh); }

InferenceSettings inference_settings_from(const Config& c, const Mesh& mesh) {
  check_inference_mesh(mesh);
  return inference_settings_from(c, mesh.axis_size(Axis::kContextAutoregressive),
                                 mesh.axis_size(Axis::kExpert));
}

InferenceSettings inference_settings_from(const Config& c, int64_t ca, int64_t expert) {
  InferenceSettings s;
  s.max_prefill_length = c.max_prefill_predict_length;
  s.max_target_length = c.max_target_length;
  s.decode = context_autoregressive_decode(c);
  s.quantize_kvcache = c.quantize_kvcache;
  s.int8_weights = c.quantization == "int8";
  s.load_balance = c.context_parallel_load_balance;
  if (c.use_chunked_prefill) {
    if (c.prefill_chunk_size < 1) {
      fail("prefill_chunk_size = {}: allowed >= 1 tokens per rank (use_chunked_prefill)",
           c.prefill_chunk_size);
    }
    s.prefill_chunk_size = c.prefill_chunk_size;
  }
  s.sampling = sampling_params(c.decode_sampling_strategy, c.decode_sampling_temperature,
                               c.decode_sampling_top_k, c.decode_sampling_nucleus_p,
                               static_cast<uint64_t>(c.decode_sampling_seed));
  s.eos_id = static_cast<int32_t>(c.eos_id);
  const double slots = c.per_device_batch_size * double(c.derived.num_devices);
  if (slots < 1.0 || slots != std::floor(slots)) {
    fail(
        "per_device_batch_size = {} x {} devices = {} decode slots: the global batch must be a "
        "whole number >= 1",
        c.per_device_batch_size, c.derived.num_devices, slots);
  }
  s.slots = static_cast<int64_t>(slots);
  check_settings(s, ca, expert);
  return s;
}

namespace {

// This rank's weights (inference_weight_specs) out of the whole model's, in weight_dtype.
Tensor weights_in_dtype(const kernels::Kernels& kernels, const model::LlamaConfig& model,
                        const std::vector<float>& weights, const Mesh& mesh) {
  const std::vector<model::WeightSpec> whole = model::llama_weight_specs(model);
  MAXCTX_CHECK_EQ(static_cast<int64_t>(weights.size()), model::total_numel(whole),
                  "weights of another model");
  const Communicator& group = parallel::inference_expert_group(mesh);
  const Communicator& ca = mesh.axis(Axis::kContextAutoregressive);
  const std::vector<model::WeightSpec> mine =
      inference_weight_specs(model, group.size(), group.rank(), ca.size(), ca.rank());
  std::vector<float> held;
  held.reserve(static_cast<size_t>(model::total_numel(mine)));
  for (size_t i = 0; i < whole.size(); ++i) {
    // The lists name the same tensors in order; a held tensor is whole rows (no tensor axis
    // here), a block of them under the vocabulary split.
    if (mine[i].numel() == 0) continue;
    const auto first = weights.begin() + whole[i].offset + mine[i].row_offset * whole[i].cols;
    held.insert(held.end(), first, first + mine[i].numel());
  }
  Tensor flat = kernels.empty({static_cast<int64_t>(held.size())}, model.weight_dtype);
  kernels::upload_floats(kernels, flat.view(), held);
  return flat;
}

}  // namespace

InferenceEngine::InferenceEngine(const kernels::Kernels& kernels, const InferenceSettings& settings,
                                 const model::LlamaConfig& model, const std::vector<float>& weights,
                                 const Mesh& mesh)
    : InferenceEngine(kernels, settings, model, weights_in_dtype(kernels, model, weights, mesh),
                      mesh) {}

InferenceEngine::InferenceEngine(const kernels::Kernels& kernels, const InferenceSettings& settings,
                                 const model::LlamaConfig& model, Tensor weights, const Mesh& mesh,
                                 model::Int8Parameters int8)
    : kernels_(kernels),
      settings_(settings),
      model_(model),
      flat_(std::move(weights)),
      int8_(std::move(int8)),
      ca_(mesh.axis(Axis::kContextAutoregressive)),
      expert_(mesh.axis(Axis::kExpert)),
      devices_(parallel::inference_expert_group(mesh)),
      sampler_(settings.sampling) {
  check_inference_mesh(mesh);
  const int ca = ca_.size();
  check_settings(settings_, ca, expert_.size());
  if (model_.moe && !model_.sparse_matmul) {
    // A decode step sends one token per sequence through the experts: dense dispatch's capacity
    // for it must keep a slot (model::expert_capacity's error, now rather than mid-generation).
    model::expert_capacity(1, model_.num_experts, model_.num_experts_per_tok,
                           model_.capacity_factor);
  }
  // Before the KV cache is allocated: a max_target_length of 2^30 is one line, not bad_alloc.
  const int64_t expert_ranks =
      parallel::inference_expert_ranks(model_.moe ? model_.num_experts : 0, devices_.size());
  const model::MemoryEstimate memory = model::inference_memory(
      model_, group_slots(), settings_.max_target_length, ca, settings_.quantize_kvcache,
      expert_ranks, settings_.int8_weights,
      static_cast<double>(model::inference_workspace_bytes(
                              model_, workspace_rows(settings_, ca, expert_.size()), expert_ranks) +
                          prefill_staging_bytes(settings_, model_, ca, expert_.size())));
  check_fits_in_memory(memory.bytes, mesh.world_size(), mesh.num_nodes(), "inference",
                       memory.detail);
  const std::vector<model::WeightSpec> specs =
      inference_weight_specs(model_, devices_.size(), devices_.rank(), ca, ca_.rank());
  MAXCTX_CHECK(flat_.dtype() == model_.weight_dtype, "weights in {} for a model of weight_dtype {}",
               dtype_name(flat_.dtype()), dtype_name(model_.weight_dtype));
  if (settings_.int8_weights) {
    const model::Int8Layout layout = model::int8_layout(specs);
    if (int8_.empty()) compact_to_int8(specs, layout);
    MAXCTX_CHECK_EQ(flat_.numel(), model::total_numel(layout.float_specs),
                    "weights of another model, or not this rank's (load_inference_model)");
    llama_weights_ = model::bind_weights(layout.float_specs, flat_.view(), layout.int8_specs,
                                         int8_.codes.view());
  } else {
    MAXCTX_CHECK(int8_.empty(), "a quantized checkpoint's weights need quantization=int8");
    MAXCTX_CHECK_EQ(flat_.numel(), model::total_numel(specs),
                    "weights of another model, or not this rank's (load_inference_model)");
    llama_weights_ = model::bind_weights(specs, flat_.view());
  }
  parallel::InferenceSharding sharding;
  sharding.decode = settings_.decode;
  sharding.slots = settings_.slots;
  sharding.max_prefill_length = settings_.max_prefill_length;
  sharding.max_target_length = settings_.max_target_length;
  sharding.quantize_kvcache = settings_.quantize_kvcache;
  sharding.cache_dtype = model_.dtype;
  sharding.num_experts = model_.moe ? model_.num_experts : 0;
  sharding.vocab_size = model_.vocab_size;
  plans_ = parallel::parallelize_inference(sharding, mesh, kernels_, model_.num_layers,
                                           model_.num_kv_heads, model_.head_dim);
  inference_weights_ = std::make_unique<model::InferenceWeights>(
      kernels_, model_, llama_weights_, settings_.int8_weights,
      plans_.row_split ? plans_.row_split->part() : parallel::RowSplitPart{},
      int8_.empty() ? nullptr : &int8_.matrices, plans_.vocab != nullptr);
  // Packed into inference_weights_ now: the codes and scales go (its views of them are emptied;
  // llama_weights_' views of them are not read after construction).
  int8_ = {};
  ws_ = model::allocate_inference_workspace(kernels_, model_,
                                            workspace_rows(settings_, ca, expert_.size()));
  length_.assign(static_cast<size_t>(settings_.slots), 0);
  logits_.assign(static_cast<size_t>(settings_.slots * model_.vocab_size), 0.0f);
  if (expert_.size() > 1) {
    group_logits_.assign(static_cast<size_t>(group_slots() * model_.vocab_size), 0.0f);
  }
}

InferenceEngine::~InferenceEngine() = default;

void InferenceEngine::compact_to_int8(const std::vector<model::WeightSpec>& specs,
                                      const model::Int8Layout& layout) {
  MAXCTX_CHECK_EQ(flat_.numel(), model::total_numel(specs),
                  "weights of another model, or not this rank's (load_inference_model)");
  std::map<std::string, int64_t> offset_of;
  for (const model::WeightSpec& s : specs) offset_of[s.name] = s.offset;
  const auto whole = [&](const model::WeightSpec& s) {
    return flat_.view().elements(offset_of.at(s.name), s.numel());
  };
  int8_ = model::quantize_projections(kernels_, layout, model_.weight_dtype,
                                      [&](const model::WeightSpec& s, TensorView out) {
                                        kernels_.copy(out.reshaped({s.numel()}), whole(s));
                                      });
  Tensor kept = kernels_.empty({model::total_numel(layout.float_specs)}, model_.weight_dtype);
  for (const model::WeightSpec& s : layout.float_specs) {
    if (s.numel() > 0) kernels_.copy(kept.view().elements(s.offset, s.numel()), whole(s));
  }
  flat_ = std::move(kept);
}

namespace {

// A long prompt's pass: prefill_chunk_size tokens per rank, rounded down to a multiple of the
// split (prefill_chunks), at least one multiple.
int64_t token_pass_length(const InferenceSettings& s, int64_t ca) {
  const int64_t chunks = prefill_chunks(s, ca);
  return std::max(chunks, ca * s.prefill_chunk_size / chunks * chunks);
}

// The most rows a prefill pass holds on a rank: every slot's share of the longest prompt;
// chunked, the whole slots that fit a token pass or, when a prompt does not, a token pass.
int64_t prefill_rows_cap(const InferenceSettings& s, int64_t ca, int64_t group_slots) {
  const int64_t share = s.max_prefill_length / ca;
  if (!chunked_prefill(s, ca)) return group_slots * share;
  const int64_t pass = token_pass_length(s, ca);
  if (s.max_prefill_length > pass) return pass / ca;
  return std::clamp(pass / s.max_prefill_length, int64_t{1}, group_slots) * share;
}

}  // namespace

std::vector<InferenceEngine::PrefillPass> InferenceEngine::prefill_passes(
    const InferenceSettings& s, int64_t ca, int64_t expert, int64_t S_pad) {
  const int64_t B = s.slots / expert;
  if (!chunked_prefill(s, ca)) return {{0, B, 0, S_pad}};
  const int64_t cap = prefill_rows_cap(s, ca, B);
  const int64_t S = S_pad / ca;
  std::vector<PrefillPass> passes;
  if (S <= cap) {
    const int64_t per_pass = std::clamp(cap / S, int64_t{1}, B);
    for (int64_t b0 = 0; b0 < B; b0 += per_pass) {
      passes.push_back({b0, std::min(per_pass, B - b0), 0, S_pad});
    }
    return passes;
  }
  // S > cap happens only when the longest prompt exceeds a token pass (cap = its rows).
  const int64_t length = token_pass_length(s, ca);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t p0 = 0; p0 < S_pad; p0 += length) {
      passes.push_back({b, 1, p0, std::min(length, S_pad - p0)});
    }
  }
  return passes;
}

int64_t InferenceEngine::workspace_rows(const InferenceSettings& s, int64_t ca, int64_t expert) {
  const int64_t group_slots = s.slots / expert;
  const int64_t local_slots = s.decode == DecodeSharding::kBatch ? group_slots / ca : group_slots;
  return std::max(prefill_rows_cap(s, ca, group_slots), local_slots);
}

int64_t InferenceEngine::prefill_staging_bytes(const InferenceSettings& s,
                                               const model::LlamaConfig& m, int64_t ca,
                                               int64_t expert) {
  int64_t batch = 0, seq = 0, prefix_rows = 0;
  for (const PrefillPass& pass : prefill_passes(s, ca, expert, s.max_prefill_length)) {
    if (pass.rows(ca) > batch * seq) {
      batch = pass.slots;
      seq = pass.tokens / ca;
    }
    if (pass.first_position > 0) prefix_rows = std::max(prefix_rows, pass.rows(ca));
  }
  const parallel::AttentionOperands x{batch,          seq,        m.num_query_heads,
                                      m.num_kv_heads, m.head_dim, m.dtype};
  return parallel::PrefillAttention::staging_bytes(ca, x, prefix_rows, s.quantize_kvcache,
                                                   s.decode == DecodeSharding::kBatch && ca > 1);
}

model::TokenBatch InferenceEngine::upload_batch(int64_t batch, int64_t seq) {
  const auto n = static_cast<size_t>(batch * seq);
  MAXCTX_CHECK_EQ(batch * seq, static_cast<int64_t>(tokens_.size()), "a batch of the rows built");
  std::vector<int32_t> ids(3 * n);
  std::copy_n(tokens_.begin(), n, ids.begin());
  std::copy_n(positions_.begin(), n, ids.begin() + static_cast<int64_t>(n));
  std::copy_n(segments_.begin(), n, ids.begin() + static_cast<int64_t>(2 * n));
  ids_device_.upload(kernels_, ids);
  model::TokenBatch b;
  b.batch = batch;
  b.seq = seq;
  b.tokens = ids_device_.data();
  b.positions = ids_device_.data() + n;
  b.segment_ids = ids_device_.data() + 2 * n;
  b.host_tokens = tokens_.data();
  b.host_positions = positions_.data();
  b.host_segment_ids = segments_.data();
  return b;
}

int64_t InferenceEngine::local_slots() const {
  return settings_.decode == DecodeSharding::kBatch ? group_slots() / ca_.size() : group_slots();
}

int64_t InferenceEngine::first_local_slot() const {
  return first_group_slot() +
         (settings_.decode == DecodeSharding::kBatch ? ca_.rank() * local_slots() : 0);
}

std::vector<float>& InferenceEngine::group_logits() {
  return expert_.size() > 1 ? group_logits_ : logits_;
}

void InferenceEngine::gather_groups() {
  if (expert_.size() > 1) {
    expert_.all_gather(std::span<const float>(group_logits_), std::span<float>(logits_));
  }
}

void InferenceEngine::build_pass(const std::vector<std::vector<int32_t>>& prompts,
                                 const PrefillPass& pass, bool all_rows) {
  const int64_t ca = ca_.size(), S = pass.tokens / ca, first = first_group_slot();
  const std::vector<int64_t> columns =
      context_shard_indices(pass.tokens, ca, ca_.rank(), settings_.load_balance);
  tokens_.resize(static_cast<size_t>(pass.slots * S));
  positions_.resize(tokens_.size());
  segments_.resize(tokens_.size());
  // The logit rows: every row when asked for, else each slot's last prompt token where it is
  // here. logit_slots_[i] is the slot of row i's logits, or −1. Under the vocabulary split every
  // rank computes the logits of every rank's rows, so each gives as many: one per slot whose
  // last token is in the pass, its last token's row or (not here) the slot's first row, unused.
  logit_rows_.clear();
  logit_slots_.clear();
  for (int64_t j = 0; j < pass.slots; ++j) {
    const int64_t b = pass.first_slot + j;
    const std::vector<int32_t>& prompt = prompts[first + b];
    const int64_t p = static_cast<int64_t>(prompt.size());
    bool here = false;
    for (int64_t s = 0; s < S; ++s) {
      const int64_t position = pass.first_position + columns[s];
      const bool real = position < p;
      tokens_[j * S + s] = real ? prompt[position] : 0;
      positions_[j * S + s] = static_cast<int32_t>(position);
      segments_[j * S + s] = real ? 1 : 0;
      const bool is_last = position == p - 1;
      here = here || is_last;
      if (!all_rows && !is_last) continue;
      logit_rows_.push_back(j * S + s);
      logit_slots_.push_back(is_last ? b : -1);
    }
    const bool ends_in_pass =
        p - 1 >= pass.first_position && p - 1 < pass.first_position + pass.tokens;
    if (plans_.vocab != nullptr && !all_rows && ends_in_pass && !here) {
      logit_rows_.push_back(j * S);
      logit_slots_.push_back(-1);
    }
  }
}

const std::vector<float>& InferenceEngine::prefill(const std::vector<std::vector<int32_t>>& prompts,
                                                   std::vector<float>* local_logits,
                                                   std::vector<int32_t>* local_positions) {
  const trace::Span span("prefill", trace::Category::kStep);
  const int64_t V = model_.vocab_size;
  const int64_t ca = ca_.size(), rank = ca_.rank();
  if (static_cast<int64_t>(prompts.size()) != settings_.slots) {
    fail("{} prompts for {} decode slots: give one prompt per slot", prompts.size(),
         settings_.slots);
  }
  // Every rank checks every prompt (the same verdict everywhere), and pads to the longest of
  // all, so every expert group runs the same number of rows through the experts' exchange.
  int64_t longest = 0;
  for (int64_t b = 0; b < settings_.slots; ++b) {
    const int64_t p = static_cast<int64_t>(prompts[b].size());
    if (p < 1) fail("prompt {} is empty: a prompt needs at least one token", b);
    if (p > settings_.max_prefill_length) {
      fail("prompt {} has {} tokens, more than max_prefill_predict_length = {}", b, p,
           settings_.max_prefill_length);
    }
    for (int32_t id : prompts[b]) {
      if (id < 0 || id >= V) fail("prompt {} holds token id {}: allowed 0..{}", b, id, V - 1);
    }
    longest = std::max(longest, p);
  }
  // The padded prompt length (training's split of it over the ranks) and the passes.
  const int64_t chunks = prefill_chunks(settings_, ca);
  const int64_t S_pad = ceil_div(longest, chunks) * chunks;
  const int64_t first = first_group_slot();
  const bool vocab_split = plans_.vocab != nullptr;
  const bool all_rows = local_logits != nullptr;
  std::vector<float>& group = group_logits();
  if (!vocab_split) std::fill(group.begin(), group.end(), 0.0f);
  if (local_logits != nullptr) local_logits->clear();
  if (local_positions != nullptr) local_positions->clear();
  plans_.cache->reset();
  // The same passes on every rank of the group (and of every group: the prompts are padded to
  // the longest of all).
  for (const PrefillPass& pass : prefill_passes(settings_, ca, expert_.size(), S_pad)) {
    const int64_t b0 = pass.first_slot, p0 = pass.first_position, S = pass.tokens / ca;
    build_pass(prompts, pass, all_rows);
    const auto R = static_cast<int64_t>(logit_rows_.size());
    row_logits_.resize(static_cast<size_t>((vocab_split ? ca : 1) * R * V));
    plans_.prefill->set_pass(b0, p0 / ca);
    const model::TokenBatch batch = upload_batch(pass.slots, S);
    model::llama_inference_forward(kernels_, model_, *inference_weights_, batch, *plans_.prefill,
                                   ws_, logit_rows_, row_logits_.data(), nullptr,
                                   plans_.experts.get(), plans_.vocab.get(),
                                   plans_.token_split.get());
    if (vocab_split) {
      // Every rank's rows, rank by rank: slot b's logits are in the block of the rank holding
      // its last token, at its index among the pass's slots that end here (one row each) or,
      // with every row asked for, at (b − b0)·S + its column.
      int64_t ending = 0;
      for (int64_t b = b0; b < b0 + pass.slots; ++b) {
        const int64_t last = static_cast<int64_t>(prompts[first + b].size()) - 1;
        if (last < p0 || last >= p0 + pass.tokens) continue;
        const auto [holder, column] =
            prefill_holder(last - p0, pass.tokens, ca, settings_.load_balance);
        const int64_t row = all_rows ? (b - b0) * S + column : ending++;
        std::copy_n(row_logits_.begin() + (holder * R + row) * V, V, group.begin() + b * V);
      }
      if (all_rows) {
        local_logits->insert(local_logits->end(), row_logits_.begin() + rank * R * V,
                             row_logits_.begin() + (rank + 1) * R * V);
      }
    } else {
      for (size_t i = 0; i < logit_slots_.size(); ++i) {
        if (logit_slots_[i] < 0) continue;
        std::copy_n(row_logits_.begin() + static_cast<int64_t>(i) * V, V,
                    group.begin() + logit_slots_[i] * V);
      }
      if (all_rows) {
        local_logits->insert(local_logits->end(), row_logits_.begin(), row_logits_.end());
      }
    }
    if (local_positions != nullptr) {
      local_positions->insert(local_positions->end(), positions_.begin(), positions_.end());
    }
  }
  plans_.prefill->set_pass(0, 0);
  // Without the vocabulary split exactly one rank of the group holds each slot's last row; the
  // others add zeros, which is exact.
  if (!vocab_split && ca > 1) ca_.all_reduce(std::span<float>(group), ReduceOp::kSum);
  gather_groups();
  for (int64_t b = 0; b < settings_.slots; ++b) {
    length_[b] = static_cast<int64_t>(prompts[b].size());
  }
  return logits_;
}

const std::vector<float>& InferenceEngine::decode_step(std::span<const int32_t> tokens,
                                                       std::span<const uint8_t> active) {
  const trace::Span span("decode_step", trace::Category::kStep);
  const int64_t B = settings_.slots, V = model_.vocab_size;
  MAXCTX_CHECK(static_cast<int64_t>(tokens.size()) == B && static_cast<int64_t>(active.size()) == B,
               "a decode step takes one token and one flag per slot ({} slots), got {} and {}", B,
               tokens.size(), active.size());
  // Every rank checks every slot, so a bad one is the same error on every rank (not only on
  // the one that decodes it, while the others wait in a collective).
  for (int64_t b = 0; b < B; ++b) {
    if (active[b] && length_[b] + 1 >= settings_.max_target_length) {
      fail(
          "slot {}: a token at position {} would make the sequence longer than "
          "max_target_length = {}",
          b, length_[b] + 1, settings_.max_target_length);
    }
    if (tokens[b] < 0 || tokens[b] >= V) {
      fail("slot {}: token id {} outside the vocabulary 0..{}", b, tokens[b], V - 1);
    }
  }
  const std::optional<kernels::TransferCounts> transfers_before = kernels_.transfer_counts();
  const int64_t local = local_slots(), first = first_local_slot();
  tokens_.resize(static_cast<size_t>(local));
  positions_.resize(tokens_.size());
  segments_.assign(tokens_.size(), 1);
  std::vector<uint8_t> local_active(static_cast<size_t>(local));
  for (int64_t j = 0; j < local; ++j) {
    const int64_t b = first + j;
    tokens_[j] = tokens[b];
    positions_[j] = static_cast<int32_t>(length_[b]);
    local_active[j] = active[b];
  }
  plans_.decode->begin_step(positions_, local_active);
  logit_rows_.resize(static_cast<size_t>(local));
  std::iota(logit_rows_.begin(), logit_rows_.end(), 0);
  // Batch decode under the vocabulary split: the forward gives every rank's slots' logits.
  const bool every_rank = plans_.vocab != nullptr && plans_.row_split == nullptr;
  row_logits_.resize(static_cast<size_t>((every_rank ? ca_.size() : 1) * local * V));
  const model::TokenBatch batch = upload_batch(local, 1);
  model::llama_inference_forward(kernels_, model_, *inference_weights_, batch, *plans_.decode, ws_,
                                 logit_rows_, row_logits_.data(), plans_.row_split.get(),
                                 plans_.experts.get(), plans_.vocab.get(),
                                 plans_.token_split.get());
  if (every_rank) {
    std::copy(row_logits_.begin(), row_logits_.end(), group_logits().begin());
  } else if (settings_.decode == DecodeSharding::kBatch && ca_.size() > 1) {
    ca_.all_gather(std::span<const float>(row_logits_), std::span<float>(group_logits()));
  } else {
    std::copy(row_logits_.begin(), row_logits_.end(), group_logits().begin());
  }
  gather_groups();
  for (int64_t b = 0; b < B; ++b) {
    if (active[b]) ++length_[b];
  }
  if (transfers_before) {
    if (!decode_transfers_) decode_transfers_.emplace();
    decode_transfers_->steps += 1;
    decode_transfers_->counts += *kernels_.transfer_counts() - *transfers_before;
  }
  return logits_;
}

GenerateResult InferenceEngine::generate(const std::vector<std::vector<int32_t>>& prompts,
                                         bool keep_logits) {
  const int64_t B = settings_.slots, V = model_.vocab_size;
  GenerateResult result;
  result.tokens.resize(static_cast<size_t>(B));
  std::vector<int32_t> next(static_cast<size_t>(B), 0);
  std::vector<uint8_t> active(static_cast<size_t>(B), 1);
  const std::vector<float>* logits = &prefill(prompts);
  while (true) {
    if (keep_logits) result.logits.push_back(*logits);
    trace::Span sampling("sample", trace::Category::kCompute);
    bool any = false;
    for (int64_t b = 0; b < B; ++b) {
      if (!active[b]) continue;
      // The drawn token sits at position length_[b]; the sequence is then length_[b] + 1 long.
      const int32_t t = sampler_.sample(logits->data() + b * V, V, b, length_[b]);
      result.tokens[b].push_back(t);
      next[b] = t;
      active[b] = t != settings_.eos_id && length_[b] + 1 < settings_.max_target_length;
      any = any || active[b];
    }
    sampling.finish();
    if (!any) break;
    logits = &decode_step(next, active);
  }
  return result;
}

void InferenceEngine::fill_synthetic(int64_t context) {
  if (context < 1 || context > settings_.max_prefill_length) {
    fail("a synthetic context of {} tokens: allowed 1..max_prefill_predict_length = {}", context,
         settings_.max_prefill_length);
  }
  const int64_t ca = ca_.size(), rank = ca_.rank();
  const parallel::KvCacheShape& shape = plans_.cache->shape();
  const bool sequence = settings_.decode == DecodeSharding::kSequence;
  // Rows in the prefill layout: contiguous 1/ca shares (sequence) or whole prompts (batch).
  const int64_t S = sequence ? ceil_div(context, ca) : context;
  const int64_t first_position = sequence ? rank * S : 0;
  std::vector<int32_t> positions(static_cast<size_t>(S)), segments(static_cast<size_t>(S));
  for (int64_t s = 0; s < S; ++s) {
    positions[s] = static_cast<int32_t>(first_position + s);
    segments[s] = first_position + s < context ? 1 : 0;
  }
  plans_.cache->reset();
  const int64_t row = shape.row_elements();
  std::vector<float> k(static_cast<size_t>(S * row)), v(k.size());
  const Tensor k_rows = kernels_.empty({S * row}), v_rows = kernels_.empty({S * row});
  const uint64_t stream = rng::stream_id("synthetic_kv");
  for (int64_t j = 0; j < shape.slots; ++j) {
    plans_.cache->set_rows(j, 0, S, positions.data(), segments.data());
    for (int64_t l = 0; l < shape.layers; ++l) {
      const uint64_t first =
          static_cast<uint64_t>(((l * shape.slots + j) * 2) * shape.rows() * row);
      rng::fill_normal(k, 0, stream, first, 0.0f, 1.0f);
      rng::fill_normal(v, 0, stream, first + static_cast<uint64_t>(shape.rows() * row), 0.0f, 1.0f);
      kernels::upload_floats(kernels_, k_rows.view(), k);
      kernels::upload_floats(kernels_, v_rows.view(), v);
      plans_.cache->store(l, j, 0, S, k_rows.view(), v_rows.view());
    }
  }
  std::fill(length_.begin(), length_.end(), context);
}

}  // namespace maxctx::infer
