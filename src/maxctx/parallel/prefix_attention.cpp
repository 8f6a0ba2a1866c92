#include "maxctx/parallel/prefix_attention.h"

#include <algorithm>
#include <span>

#include "maxctx/core/check.h"
#include "maxctx/core/trace.h"

namespace maxctx::parallel {
namespace {

constexpr int64_t kF32 = sizeof(float);
constexpr int64_t kIdBytes = sizeof(int32_t);

// A rank's partial for S queries: out (S, Hq, D) then lse (Hq, S), f32.
int64_t partial_numel(int64_t rows, int64_t heads_q, int64_t head_dim) {
  return rows * heads_q * head_dim + heads_q * rows;
}

}  // namespace

void PrefixAttention::add_traffic(Traffic& traffic, const std::string& axis, int64_t ca,
                                  int64_t rows, int64_t heads_q, int64_t head_dim, DType dtype) {
  if (ca == 1) return;
  const int64_t element = static_cast<int64_t>(dtype_size(dtype));
  traffic.add(axis, CollectiveKind::kAllGather, ca * rows * heads_q * head_dim * element);
  traffic.add(axis, CollectiveKind::kAllGather, ca * 2 * rows * kIdBytes);
  traffic.add(axis, CollectiveKind::kAllToAll, ca * partial_numel(rows, heads_q, head_dim) * kF32);
}

int64_t PrefixAttention::staging_bytes(int64_t ca, int64_t rows, int64_t heads_q, int64_t heads_kv,
                                       int64_t head_dim, DType dtype, bool int8_cache) {
  const int64_t element = static_cast<int64_t>(dtype_size(dtype));
  const int64_t part = partial_numel(rows, heads_q, head_dim) * kF32;
  int64_t bytes = part                                                            // partial_
                  + ca * part                                                     // send_
                  + 2 * rows * kIdBytes                                           // ids_
                  + (int8_cache ? 2 * rows * heads_kv * head_dim * element : 0);  // block_k_/v_
  if (ca > 1) {
    bytes += ca * rows * heads_q * head_dim * element  // queries_
             + ca * part                               // recv_
             + 2 * ca * rows * kIdBytes;               // all_ids_
  }
  return bytes;
}

int64_t PrefixAttention::held_bytes() const {
  int64_t bytes = 0;
  for (const Tensor* t : {&queries_, &send_, &recv_, &partial_, &block_k_, &block_v_}) {
    if (!t->view().empty()) bytes += static_cast<int64_t>(t->view().bytes());
  }
  return bytes + static_cast<int64_t>(ids_.size() + all_ids_.size()) * kIdBytes;
}

void PrefixAttention::attend_shard(int64_t layer, int64_t slot, int64_t prefix_rows,
                                   TensorView queries, const int32_t* q_ids,
                                   const kernels::AttentionParams& dims) {
  const int64_t ca = ca_.size(), S = dims.seq_q;
  const int64_t Hq = dims.heads_q, D = dims.head_dim;
  const int64_t out_numel = S * Hq * D, part = partial_numel(S, Hq, D);
  const KvView kv = cache_.view(layer);
  const int64_t row_elements = dims.heads_kv * D;
  // One slot's rows: the cache's stride (kv.rows is the whole region with several slots, and
  // slot 0's rows in use with one).
  const int64_t base = slot * kv.rows;
  // An int8 shard is dequantized S rows at a time; an f32 or bf16 one is read in place whole.
  const int64_t block = kv.quantized() ? S : prefix_rows;
  kernels_.reserve(partial_, part);
  const TensorView partial = partial_.view().elements(0, part);
  for (int64_t r0 = 0; r0 < prefix_rows; r0 += block) {
    const int64_t n = std::min(block, prefix_rows - r0);
    const int64_t at = (base + r0) * row_elements;
    TensorView k = kv.k.elements(at, n * row_elements);
    TensorView v = kv.v.elements(at, n * row_elements);
    if (kv.quantized()) {
      kernels_.reserve(block_k_, block * row_elements, queries.dtype());
      kernels_.reserve(block_v_, block * row_elements, queries.dtype());
      const TensorView block_k = block_k_.view().elements(0, n * row_elements);
      const TensorView block_v = block_v_.view().elements(0, n * row_elements);
      kernels_.dequantize_rows_int8(block_k, k, kv.k_scale.elements(base + r0, n));
      kernels_.dequantize_rows_int8(block_v, v, kv.v_scale.elements(base + r0, n));
      k = block_k;
      v = block_v;
    }
    kernels::AttentionParams p = dims;
    p.batch = 1;
    p.seq_k = n;
    for (int64_t c = 0; c < ca; ++c) {
      // The first block writes rank c's partial, later ones merge into it.
      const TensorView into = send_.view().elements(c * part, part);
      const TensorView to = r0 == 0 ? into : partial;
      const int32_t* ids = q_ids + c * 2 * S;
      kernels_.attention_forward(to.elements(0, out_numel), to.elements(out_numel, Hq * S),
                                 queries.elements(c * out_numel, out_numel), k, v, ids, ids + S,
                                 kv.positions + base + r0, kv.segments + base + r0, p, nullptr);
      if (r0 > 0) {
        kernels_.attention_merge(into.elements(0, out_numel), into.elements(out_numel, Hq * S),
                                 into.elements(0, out_numel), into.elements(out_numel, Hq * S),
                                 partial.elements(0, out_numel),
                                 partial.elements(out_numel, Hq * S), 1, S, Hq, D);
      }
    }
  }
}

void PrefixAttention::merge_into(TensorView merged, TensorView lse, int64_t layer, int64_t slot,
                                 int64_t prefix_rows, TensorView q, const TokenLayout& tokens,
                                 const kernels::AttentionParams& dims) {
  const trace::Span span("prefix_attention", trace::Category::kLayer);
  const int64_t ca = ca_.size(), S = tokens.seq;
  const int64_t Hq = dims.heads_q, D = dims.head_dim;
  MAXCTX_CHECK(tokens.batch == 1 && prefix_rows > 0,
               "a prompt's chunk after its first attends one slot's cache rows (B={}, rows={})",
               tokens.batch, prefix_rows);
  const int64_t out_numel = S * Hq * D, part = partial_numel(S, Hq, D);
  kernels::AttentionParams p = dims;
  p.seq_q = S;
  kernels_.reserve(send_, ca * part);
  // The queries' positions | segment ids, every rank's (rank-major) when ca > 1.
  ids_.resize(static_cast<size_t>(2 * S));
  std::copy_n(tokens.positions_on_host(), S, ids_.begin());
  std::copy_n(tokens.segment_ids_on_host(), S, ids_.begin() + S);
  TensorView queries = q;
  if (ca > 1) {
    kernels_.reserve(queries_, ca * out_numel, q.dtype());
    queries = queries_.view().elements(0, ca * out_numel);
    ca_.all_gather(q, queries, kernels_.stream());
    all_ids_.resize(static_cast<size_t>(ca * 2 * S));
    ca_.all_gather(std::span<const int32_t>(ids_), std::span<int32_t>(all_ids_));
  }
  ids_device_.upload(kernels_, ca > 1 ? all_ids_ : ids_);
  const int32_t* q_ids = ids_device_.data();
  attend_shard(layer, slot, prefix_rows, queries, q_ids, p);
  TensorView partials = send_.view().elements(0, ca * part);
  if (ca > 1) {
    // Block c of send_ goes to rank c; block c of recv_ holds this rank's queries against rank
    // c's shard.
    kernels_.reserve(recv_, ca * part);
    partials = recv_.view().elements(0, ca * part);
    ca_.all_to_all(send_.view().elements(0, ca * part), partials, kernels_.stream());
  }
  for (int64_t c = 0; c < ca; ++c) {
    const TensorView from = partials.elements(c * part, part);
    kernels_.attention_merge(merged, lse, merged, lse, from.elements(0, out_numel),
                             from.elements(out_numel, Hq * S), 1, S, Hq, D);
  }
}

}  // namespace maxctx::parallel
