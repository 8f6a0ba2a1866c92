// The host side of the CUDA flash attention (flash_attention.h): argument checks, the choice of
// kernel by dtype, the pre-passes, scratch, and the tile counts of AttentionStats. Compiled by
// the host compiler (it speaks TensorView and maxctx::Error, which pull in fmt); the kernels sit
// behind flash_launch.h. Empty without MAXCTX_HAVE_CUDA.
#include "maxctx/kernels/cuda/flash_attention.h"

#if MAXCTX_HAVE_CUDA

#include <algorithm>
#include <string>
#include <vector>

#include "maxctx/core/check.h"
#include "maxctx/kernels/cuda/flash_launch.h"

namespace maxctx::kernels::cuda {
namespace {

using flash::Elem;
using flash::Masks;
using flash::Shape;

int ceil_div(int n, int m) { return (n + m - 1) / m; }

// heads_per_tile: the largest power of two <= group that leaves at least 8 tokens per tile (a
// power of two, so that tile_rows / heads_per_tile tokens fill the tile exactly).
Shape make_shape(const AttentionParams& p, int tile_rows, int block_k, bool pack_heads) {
  Shape g{};
  g.batch = static_cast<int>(p.batch);
  g.seq_q = static_cast<int>(p.seq_q);
  g.seq_k = static_cast<int>(p.seq_k);
  g.heads_q = static_cast<int>(p.heads_q);
  g.heads_kv = static_cast<int>(p.heads_kv);
  g.dim = static_cast<int>(p.head_dim);
  g.group = static_cast<int>(p.group_size());
  int hpt = 1;
  while (pack_heads && hpt * 2 <= g.group && tile_rows / (hpt * 2) >= 8) hpt *= 2;
  g.heads_per_tile = hpt;
  g.block_t = tile_rows / hpt;
  g.n_chunks = ceil_div(g.group, hpt);
  g.n_qb = ceil_div(g.seq_q, g.block_t);
  g.block_k = block_k;
  g.n_kb = ceil_div(g.seq_k, block_k);
  g.scale = static_cast<float>(p.softmax_scale());
  g.window = p.sliding_window;
  return g;
}

// Stream-ordered device scratch, freed when it goes out of scope (an error path included).
class Scratch {
 public:
  Scratch(size_t bytes, void* stream)
      : stream_(stream), bytes_(bytes), data_(flash::scratch_alloc(bytes, stream)) {}
  ~Scratch() { flash::scratch_free(data_, bytes_, stream_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void* stream_;
  size_t bytes_;
  void* data_;
};

// The ranges of blocks of `block` rows of (B, rows) positions/segments, on the device.
struct DeviceBounds {
  DeviceBounds(const int32_t* pos, const int32_t* seg, int batch, int rows, int block, void* stream)
      : n_blocks(ceil_div(rows, block)),
        count(batch * n_blocks),
        buffer(sizeof(BlockBounds) * static_cast<size_t>(count), stream) {
    flash::launch_block_bounds(buffer.as<BlockBounds>(), pos, seg, batch, rows, block, stream);
  }
  const BlockBounds* data() const { return buffer.as<BlockBounds>(); }
  int n_blocks, count;
  Scratch buffer;
};

// The (q block × k block) tiles of each batch element, classified on the host by the function the
// kernels use; each verdict counts `weight` times (the heads and head chunks sharing it).
void count_tiles(AttentionStats* stats, const DeviceBounds& q, const DeviceBounds& k, int batch,
                 int32_t window, int64_t weight, void* stream) {
  if (stats == nullptr) return;
  std::vector<BlockBounds> qh(static_cast<size_t>(q.count)), kh(static_cast<size_t>(k.count));
  flash::copy_bounds_to_host(qh.data(), q.data(), qh.size(), stream);
  flash::copy_bounds_to_host(kh.data(), k.data(), kh.size(), stream);
  for (int b = 0; b < batch; ++b) {
    for (int i = 0; i < q.n_blocks; ++i) {
      for (int j = 0; j < k.n_blocks; ++j) {
        const TileMask kind = classify_tile(qh[static_cast<size_t>(b * q.n_blocks + i)],
                                            kh[static_cast<size_t>(b * k.n_blocks + j)], window);
        (kind == TileMask::kSkip ? stats->blocks_skipped : stats->blocks_computed) += weight;
      }
    }
  }
}

// ---------------------------------------------------------------- checks

Elem elem_of(const TensorView& view) {
  return view.dtype() == DType::kBF16 ? Elem::kBF16 : Elem::kF32;
}

void check_view(const TensorView& view, const char* name, int64_t numel, bool f32_only) {
  MAXCTX_CHECK(view.device() == Device::kCuda, "cuda flash attention: {} is not device memory",
               name);
  const bool float_dtype = view.dtype() == DType::kF32 || view.dtype() == DType::kBF16;
  MAXCTX_CHECK(f32_only ? view.dtype() == DType::kF32 : float_dtype,
               "cuda flash attention: {} holds {}, allowed {}", name, dtype_name(view.dtype()),
               f32_only ? "f32" : "f32 or bf16");
  MAXCTX_CHECK_EQ(view.numel(), numel, "cuda flash attention: {} does not match the params", name);
}

void check_common(const AttentionParams& p, const TensorView& q, const TensorView& k,
                  const TensorView& v) {
  check_attention_params(p);
  if (p.head_dim != 64 && p.head_dim != 128) {
    fail("cuda flash attention: head_dim {} is not supported (64 or 128)", p.head_dim);
  }
  // The kernels index rows, blocks and heads in int: keep B·S·H well inside it.
  const int64_t rows = p.batch * std::max(p.seq_q, p.seq_k) * p.heads_q;
  if (rows > (int64_t{1} << 30)) {
    fail("cuda flash attention: batch × seq × heads = {} is too large (at most 2^30)", rows);
  }
  const int64_t q_elems = p.batch * p.seq_q * p.heads_q * p.head_dim;
  const int64_t kv_elems = p.batch * p.seq_k * p.heads_kv * p.head_dim;
  check_view(q, "q", q_elems, false);
  check_view(k, "k", kv_elems, false);
  check_view(v, "v", kv_elems, false);
  MAXCTX_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(),
               "cuda flash attention: q, k, v must share one dtype, got {}, {}, {}",
               dtype_name(q.dtype()), dtype_name(k.dtype()), dtype_name(v.dtype()));
}

}  // namespace

void flash_attention_forward(TensorView out, TensorView lse, TensorView q, TensorView k,
                             TensorView v, const int32_t* q_pos, const int32_t* q_seg,
                             const int32_t* k_pos, const int32_t* k_seg,
                             const AttentionParams& params, AttentionStats* stats, void* stream) {
  const AttentionParams& p = params;
  check_common(p, q, k, v);
  check_view(out, "out", p.batch * p.seq_q * p.heads_q * p.head_dim, false);
  check_view(lse, "lse", p.batch * p.heads_q * p.seq_q, true);
  if (p.seq_q == 0) return;
  {
    const bool bf16 = q.dtype() == DType::kBF16;
    const Shape g = bf16 ? make_shape(p, flash::kMmaTileRows, flash::kMmaBlockK, true)
                         : make_shape(p, flash::kFfmaTileRows, flash::kFfmaBlockK, true);
    const DeviceBounds q_bounds(q_pos, q_seg, g.batch, g.seq_q, g.block_t, stream);
    const DeviceBounds k_bounds(k_pos, k_seg, g.batch, g.seq_k, g.block_k, stream);
    const Masks m{q_pos, q_seg, k_pos, k_seg, q_bounds.data(), k_bounds.data()};
    if (bf16) {
      flash::launch_forward_mma(out.raw(), elem_of(out), lse.data<float>(), q.raw(), k.raw(),
                                v.raw(), m, g, stream);
    } else {
      flash::launch_forward_ffma(out.raw(), elem_of(out), lse.data<float>(), q.data<float>(),
                                 k.data<float>(), v.data<float>(), m, g, stream);
    }
    // Each (token block, key block) verdict holds for every kv head and head chunk.
    count_tiles(stats, q_bounds, k_bounds, g.batch, g.window,
                static_cast<int64_t>(g.heads_kv) * g.n_chunks, stream);
  }
}

void flash_attention_backward(TensorView dq, TensorView dk, TensorView dv, TensorView d_out,
                              TensorView out, TensorView lse, TensorView q, TensorView k,
                              TensorView v, const int32_t* q_pos, const int32_t* q_seg,
                              const int32_t* k_pos, const int32_t* k_seg,
                              const AttentionParams& params, AttentionStats* stats, void* stream) {
  const AttentionParams& p = params;
  check_common(p, q, k, v);
  const int64_t q_elems = p.batch * p.seq_q * p.heads_q * p.head_dim;
  const int64_t kv_elems = p.batch * p.seq_k * p.heads_kv * p.head_dim;
  check_view(d_out, "d_out", q_elems, false);
  check_view(out, "out", q_elems, false);
  check_view(lse, "lse", p.batch * p.heads_q * p.seq_q, true);
  check_view(dq, "dq", q_elems, true);
  check_view(dk, "dk", kv_elems, true);
  check_view(dv, "dv", kv_elems, true);
  if (p.seq_q == 0 || p.seq_k == 0) return;  // nothing to accumulate
  {
    const Shape g = make_shape(p, flash::kBackwardBlock, flash::kBackwardBlock, false);
    const DeviceBounds q_bounds(q_pos, q_seg, g.batch, g.seq_q, g.block_t, stream);
    const DeviceBounds k_bounds(k_pos, k_seg, g.batch, g.seq_k, g.block_k, stream);
    const Masks m{q_pos, q_seg, k_pos, k_seg, q_bounds.data(), k_bounds.data()};
    const Scratch delta(sizeof(float) * static_cast<size_t>(p.batch * p.heads_q * p.seq_q), stream);
    flash::launch_row_delta(delta.as<float>(), d_out.raw(), elem_of(d_out), out.raw(), elem_of(out),
                            elem_of(q), g.batch, g.seq_q, g.heads_q, g.dim, stream);
    flash::launch_backward(dq.data<float>(), dk.data<float>(), dv.data<float>(), d_out.raw(),
                           elem_of(d_out), lse.data<float>(), delta.as<float>(), q.raw(), k.raw(),
                           v.raw(), elem_of(q), m, g, stream);
    // The dk/dv kernel's tiles: each (query block, key block) verdict for every query head.
    count_tiles(stats, q_bounds, k_bounds, g.batch, g.window, g.heads_q, stream);
  }
}

}  // namespace maxctx::kernels::cuda

#endif  // MAXCTX_HAVE_CUDA
