// See onednn_matmul.h. A transposed operand is described by a column-major ("ba") memory
// descriptor over the same row-major storage, so oneDNN reads it in place.
#include "kernels/onednn_matmul.h"

#ifdef MAXCTX_HAVE_ONEDNN
#include <memory>

#include "oneapi/dnnl/dnnl.hpp"
#endif

namespace maxctx::bench {

#ifdef MAXCTX_HAVE_ONEDNN
bool onednn_available() { return true; }

std::function<void()> onednn_bf16_matmul(int64_t m, int64_t n, int64_t k, bool trans_a,
                                         bool trans_b, const bf16* a, const bf16* b, float* c) {
  using dnnl::memory;
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  const memory::desc a_md({m, k}, memory::data_type::bf16,
                          trans_a ? memory::format_tag::ba : memory::format_tag::ab);
  const memory::desc b_md({k, n}, memory::data_type::bf16,
                          trans_b ? memory::format_tag::ba : memory::format_tag::ab);
  const memory::desc c_md({m, n}, memory::data_type::f32, memory::format_tag::ab);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), engine);
  auto state = std::make_shared<std::tuple<dnnl::matmul, memory, memory, memory, dnnl::stream>>(
      dnnl::matmul(pd), memory(a_md, engine, const_cast<bf16*>(a)),
      memory(b_md, engine, const_cast<bf16*>(b)), memory(c_md, engine, c), dnnl::stream(engine));
  return [state] {
    auto& [primitive, a_mem, b_mem, c_mem, stream] = *state;
    primitive.execute(stream,
                      {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
    stream.wait();
  };
}
#else
bool onednn_available() { return false; }
std::function<void()> onednn_bf16_matmul(int64_t, int64_t, int64_t, bool, bool, const bf16*,
                                         const bf16*, float*) {
  return {};
}
#endif

}  // namespace maxctx::bench
