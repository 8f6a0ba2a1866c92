// The matmul ops of the cpu table on every f32/bf16 mix (kernels.h's precision contract), against
// the double reference run on the values the contract multiplies: bf16-rounded operands when
// `in` is bf16, the stored values otherwise. Tolerances, per element with m = Σ|a·b| of its sum:
//   f32 output: |got − want| ≤ 1e-5 · m (fp32 accumulation order only);
//   bf16 output: ≤ 1e-5 · m + 2⁻⁸ · |want| (plus one rounding to bf16);
// and against the unrounded fp32 problem ‖got − want‖₂ ≤ 2e-2 · ‖want‖₂ over the output.
// Also: the portable gemm_bf16 equals AMX bit for bit (adversarial values too), and so does the
// vector tile for CPUs without AMX (gemm_bf16_tile.h: its condition, and its fallback to the
// portable loops), 1 and 2 threads give the same bits, the bf16-weight GEMV, int8 from bf16 views,
// and the errors for dtypes the ops do not take.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "hwy/targets.h"
#include "kernels/test_util.h"
#include "maxctx/core/check.h"
#include "maxctx/core/tensor.h"
#include "maxctx/kernels/cpu/gemm_bf16.h"
#include "maxctx/kernels/cpu/gemm_bf16_tile.h"
#include "maxctx/kernels/cpu/gemv.h"
#include "maxctx/kernels/cpu/int8.h"
#include "maxctx/kernels/kernels.h"

namespace maxctx::kernels {
namespace {

using testing_util::normal_values;

const Kernels& cpu() { return backend(Device::kCpu); }

double rounded(double x, DType dtype) {
  const float f = static_cast<float>(x);
  return dtype == DType::kBF16 ? bf16_to_float(float_to_bf16(f)) : f;
}

// A tensor of `dtype` holding `values` (rounded to it) and the values it holds, in double.
struct Matrix {
  Tensor tensor;
  std::vector<double> stored;

  Matrix(Shape shape, DType dtype, const std::vector<double>& values)
      : tensor(shape, dtype), stored(values.size()) {
    for (size_t i = 0; i < values.size(); ++i) {
      stored[i] = rounded(values[i], dtype);
      if (dtype == DType::kF32) tensor.data<float>()[i] = static_cast<float>(stored[i]);
      if (dtype == DType::kBF16)
        tensor.data<bf16>()[i] = float_to_bf16(static_cast<float>(values[i]));
    }
  }
  TensorView view() const { return tensor.view(); }
  std::vector<double> read() const {
    std::vector<double> out(stored.size());
    for (size_t i = 0; i < out.size(); ++i) {
      out[i] = tensor.dtype() == DType::kF32 ? tensor.data<float>()[i]
                                             : bf16_to_float(tensor.data<bf16>()[i]);
    }
    return out;
  }
  // The values a product with bf16 inputs multiplies.
  std::vector<double> as_product_input(bool bf16_products) const {
    std::vector<double> out = stored;
    if (bf16_products) {
      for (double& x : out) x = rounded(x, DType::kBF16);
    }
    return out;
  }
};

// c (m×n) = init + a (m×k, a(i, p) = a[i·sa + p·sp]) · b (k×n, b(p, j) = b[p·tp + j·tj]), and
// each element's Σ|a·b| in `magnitude`.
struct Product {
  std::vector<double> value, magnitude;
};
Product reference(int64_t m, int64_t n, int64_t k, const std::vector<double>& a, int64_t sa,
                  int64_t sp, const std::vector<double>& b, int64_t tp, int64_t tj,
                  const std::vector<double>* init) {
  Product r{std::vector<double>(m * n), std::vector<double>(m * n)};
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = init ? (*init)[i * n + j] : 0.0, mag = init ? std::fabs(sum) : 0.0;
      for (int64_t p = 0; p < k; ++p) {
        const double x = a[i * sa + p * sp] * b[p * tp + j * tj];
        sum += x;
        mag += std::fabs(x);
      }
      r.value[i * n + j] = sum;
      r.magnitude[i * n + j] = mag;
    }
  }
  return r;
}

void expect_close(const std::vector<double>& got, const Product& want, DType dtype,
                  const std::string& what) {
  const double out_rounding = dtype == DType::kBF16 ? std::ldexp(1.0, -8) : 0.0;
  int64_t bad = 0;
  for (size_t e = 0; e < got.size(); ++e) {
    const double tol = 1e-5 * want.magnitude[e] + out_rounding * std::fabs(want.value[e]);
    if (!(std::fabs(got[e] - want.value[e]) <= tol) && bad++ < 3) {
      ADD_FAILURE() << what << " element " << e << ": " << got[e] << " vs " << want.value[e]
                    << " (tolerance " << tol << ")";
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

// The whole output's norm against the unrounded fp32 problem: what bf16 costs, 2e-2.
void expect_semantics(const std::vector<double>& got, const std::vector<double>& want,
                      const std::string& what) {
  double diff = 0.0, norm = 0.0;
  for (size_t e = 0; e < got.size(); ++e) {
    diff += std::pow(got[e] - want[e], 2);
    norm += std::pow(want[e], 2);
  }
  EXPECT_LE(std::sqrt(diff), 2e-2 * std::sqrt(norm)) << what;
}

struct Shape3 {
  int64_t N, in_dim, out_dim;
};
constexpr DType kFloats[] = {DType::kF32, DType::kBF16};

std::string name(const char* op, Shape3 s, std::initializer_list<DType> dtypes) {
  std::ostringstream out;
  out << op << " N" << s.N << " in" << s.in_dim << " out" << s.out_dim;
  for (const DType d : dtypes) out << " " << dtype_name(d);
  return out.str();
}

// Forward and both backwards for one shape and one (in, weight) dtype pair: every output, d_out
// and d_in dtype, or (`every_mix` false, for large shapes) bf16 outputs, d_out of in's dtype and
// the accumulating backward.
void check_matmul(Shape3 s, DType in_dtype, DType w_dtype, bool every_mix = true) {
  const std::vector<DType> outs =
      every_mix ? std::vector<DType>{DType::kF32, DType::kBF16} : std::vector<DType>{DType::kBF16};
  const std::vector<DType> d_outs =
      every_mix ? std::vector<DType>{DType::kF32, DType::kBF16} : std::vector<DType>{in_dtype};
  const std::vector<bool> accumulates =
      every_mix ? std::vector<bool>{false, true} : std::vector<bool>{true};
  const auto [N, I, O] = s;
  const bool bf16_products = in_dtype == DType::kBF16;
  const std::string tag = name("", s, {});
  const auto in_values = normal_values(N * I, "bf16mm/in/" + tag, 0.0f, 1.0f);
  const auto w_values = normal_values(O * I, "bf16mm/w/" + tag, 0.0f, 0.5f);
  const auto d_out_values = normal_values(N * O, "bf16mm/dout/" + tag, 0.0f, 1.0f);
  const auto init_values = normal_values(std::max(N, O) * I, "bf16mm/init/" + tag, 0.0f, 1.0f);
  const Matrix in({N, I}, in_dtype, in_values), w({O, I}, w_dtype, w_values);
  const auto in_p = in.as_product_input(false);  // in is already in its own dtype
  const auto w_p = w.as_product_input(bf16_products);

  for (const DType out_dtype : outs) {  // forward: out = in · wᵀ
    const std::string what = name("forward", s, {in_dtype, w_dtype, out_dtype});
    Matrix out({N, O}, out_dtype, std::vector<double>(N * O, 7.0));
    cpu().matmul_forward(out.view(), in.view(), w.view());
    expect_close(out.read(), reference(N, O, I, in_p, I, 1, w_p, 1, I, nullptr), out_dtype, what);
    expect_semantics(out.read(), reference(N, O, I, in_values, I, 1, w_values, 1, I, nullptr).value,
                     what);
  }
  for (const DType d_out_dtype : d_outs) {
    const Matrix d_out({N, O}, d_out_dtype, d_out_values);
    const auto d_out_p = d_out.as_product_input(bf16_products);
    for (const DType d_in_dtype : outs) {
      for (const bool accumulate : accumulates) {
        const std::string what = name(accumulate ? "backward_accumulate_input" : "backward", s,
                                      {in_dtype, w_dtype, d_out_dtype, d_in_dtype});
        const std::vector<double> d_in_init(init_values.begin(), init_values.begin() + N * I);
        const std::vector<double> d_w_init(init_values.begin(), init_values.begin() + O * I);
        Matrix d_in({N, I}, d_in_dtype, d_in_init), d_w({O, I}, DType::kF32, d_w_init);
        if (accumulate) {
          cpu().matmul_backward_accumulate_input(d_in.view(), d_w.view(), d_out.view(), in.view(),
                                                 w.view());
        } else {
          cpu().matmul_backward(d_in.view(), d_w.view(), d_out.view(), in.view(), w.view());
        }
        // d_in (N, I) = d_out · w; d_w (O, I) += d_outᵀ · in.
        expect_close(
            d_in.read(),
            reference(N, I, O, d_out_p, O, 1, w_p, I, 1, accumulate ? &d_in.stored : nullptr),
            d_in_dtype, what + " d_in");
        expect_close(d_w.read(), reference(O, I, N, d_out_p, 1, O, in_p, I, 1, &d_w.stored),
                     DType::kF32, what + " d_weight");
        expect_semantics(d_w.read(),
                         reference(O, I, N, d_out_values, 1, O, in_values, I, 1, &d_w_init).value,
                         what + " d_weight vs fp32");
      }
    }
  }
}

TEST(Bf16Matmul, EveryDtypeMixOnOddShapes) {
  for (const Shape3 s : {Shape3{1, 3, 17}, Shape3{3, 17, 33}, Shape3{17, 33, 100},
                         Shape3{33, 100, 1}, Shape3{100, 1, 3}, Shape3{5, 1100, 40}}) {
    for (const DType in_dtype : kFloats) {
      for (const DType w_dtype : kFloats) check_matmul(s, in_dtype, w_dtype);
    }
  }
}

// The model's shapes (N = 256 rows, E = 256, F = 688, V = 512): bf16 products only (the fp32
// path is the existing SGEMM) with each weight dtype.
TEST(Bf16Matmul, ModelShapes) {
  for (const Shape3 s : {Shape3{256, 256, 688}, Shape3{256, 688, 256}, Shape3{256, 256, 512}}) {
    check_matmul(s, DType::kBF16, DType::kBF16, false);
  }
  check_matmul({256, 256, 688}, DType::kBF16, DType::kF32, false);
  check_matmul({256, 256, 512}, DType::kF32, DType::kBF16, false);
}

// All outputs of one forward and one accumulating backward, as raw bytes.
std::vector<uint8_t> run_ops(Shape3 s, DType out_dtype) {
  const auto [N, I, O] = s;
  const Matrix in({N, I}, DType::kBF16, normal_values(N * I, "bits/in", 0.0f, 1.0f));
  const Matrix w({O, I}, DType::kF32, normal_values(O * I, "bits/w", 0.0f, 1.0f));
  const Matrix d_out({N, O}, DType::kBF16, normal_values(N * O, "bits/dout", 0.0f, 1.0f));
  Matrix out({N, O}, out_dtype, std::vector<double>(N * O, 0.0));
  Matrix d_in({N, I}, out_dtype, normal_values(N * I, "bits/din", 0.0f, 1.0f));
  Matrix d_w({O, I}, DType::kF32, normal_values(O * I, "bits/dw", 0.0f, 1.0f));
  cpu().matmul_forward(out.view(), in.view(), w.view());
  cpu().matmul_backward_accumulate_input(d_in.view(), d_w.view(), d_out.view(), in.view(),
                                         w.view());
  std::vector<uint8_t> bytes;
  for (const Matrix* m : {&out, &d_in, &d_w}) {
    const auto* p = static_cast<const uint8_t*>(m->view().raw());
    bytes.insert(bytes.end(), p, p + m->view().bytes());
  }
  return bytes;
}

TEST(Bf16Matmul, BitsDoNotDependOnThreadCount) {
  const int saved = omp_get_max_threads();
  for (const Shape3 s : {Shape3{256, 256, 688}, Shape3{100, 1100, 33}}) {
    omp_set_num_threads(1);
    const auto one = run_ops(s, DType::kBF16);
    omp_set_num_threads(2);
    const auto two = run_ops(s, DType::kBF16);
    EXPECT_TRUE(one == two) << "N " << s.N << " in " << s.in_dim << " out " << s.out_dim;
  }
  omp_set_num_threads(saved);
}

TEST(Bf16Matmul, PortablePathEqualsAmx) {
  if (!cpu::gemm_bf16_amx_available()) GTEST_SKIP() << "this CPU has no AMX-BF16";
  for (const Shape3 s : {Shape3{1, 3, 17}, Shape3{17, 33, 100}, Shape3{100, 1100, 33},
                         Shape3{64, 256, 688}, Shape3{33, 1025, 31}}) {
    for (const DType out_dtype : kFloats) {
      cpu::set_gemm_bf16_path(cpu::Bf16Path::kPortable);
      const auto portable = run_ops(s, out_dtype);
      cpu::set_gemm_bf16_path(cpu::Bf16Path::kBest);
      const auto fast = run_ops(s, out_dtype);
      EXPECT_TRUE(portable == fast) << "N " << s.N << " in " << s.in_dim << " out " << s.out_dim;
    }
  }
}

// Adversarial values for TDPBF16PS's sequence (gemm_bf16.h): magnitudes from 2^-140 to 2^60 (so
// subnormal inputs, products and sums, which AMX flushes), exact zeros of both signs, and pairs
// that cancel; every transpose, K past one block, beta, 1 and 2 threads. AMX and the portable
// path must agree bit for bit.
TEST(Bf16Matmul, PortablePathMatchesAmxOnAdversarialValues) {
  if (!cpu::gemm_bf16_amx_available()) GTEST_SKIP() << "this CPU has no AMX-BF16";
  const int64_t m = 37, n = 45, k = 1100;
  const auto av = normal_values(m * k, "adv/a", 0.0f, 1.0f);
  const auto bv = normal_values(k * n, "adv/b", 0.0f, 1.0f);
  const auto spread = [](const std::vector<double>& v, size_t salt) {
    std::vector<float> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      const size_t h = (i * 2654435761u + salt) % 97;
      const int exponent = static_cast<int>(h % 50) * 4 - 140;
      out[i] = h == 3 ? 0.0f : h == 5 ? -0.0f : static_cast<float>(std::ldexp(v[i], exponent));
    }
    return out;
  };
  std::vector<float> a = spread(av, 1), b = spread(bv, 2);
  // The first third of the rows of A and columns of B: only tiny values, whose products and sums
  // are near or under the smallest normal (2^-125 or so). The other rows: one pair cancels, a(i,
  // 2)·b(2, j) = −a(i, 3)·b(3, j).
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t p = 0; p < k; ++p) {
      if (i < m / 3) a[i * k + p] = static_cast<float>(std::ldexp(av[i * k + p], -64));
    }
    if (i >= m / 3) {
      a[i * k + 2] = 1.5f;
      a[i * k + 3] = -1.5f;
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t p = 0; p < k; ++p) {
      if (j < n / 3) b[p * n + j] = static_cast<float>(std::ldexp(bv[p * n + j], -61));
    }
    if (j >= n / 3) b[2 * n + j] = b[3 * n + j] = 0.75f;
  }
  const int saved = omp_get_max_threads();
  for (const bool a_t : {false, true}) {
    for (const bool b_t : {false, true}) {
      // The same matrices, stored transposed where asked.
      std::vector<float> a_s(a.size()), b_s(b.size());
      for (int64_t i = 0; i < m; ++i)
        for (int64_t p = 0; p < k; ++p) a_s[a_t ? p * m + i : i * k + p] = a[i * k + p];
      for (int64_t p = 0; p < k; ++p)
        for (int64_t j = 0; j < n; ++j) b_s[b_t ? j * k + p : p * n + j] = b[p * n + j];
      std::vector<std::vector<float>> results;
      for (const auto path : {cpu::Bf16Path::kPortable, cpu::Bf16Path::kBest}) {
        for (const int threads : {1, 2}) {
          omp_set_num_threads(threads);
          cpu::set_gemm_bf16_path(path);
          std::vector<float> c(m * n, 0.0f);  // beta reads zeros: tiny sums survive
          cpu::gemm_bf16(a_t ? cpu::Transpose::kYes : cpu::Transpose::kNo,
                         b_t ? cpu::Transpose::kYes : cpu::Transpose::kNo, m, n, k, 1.0f,
                         {a_s.data(), DType::kF32}, a_t ? m : k, {b_s.data(), DType::kF32},
                         b_t ? k : n, 0.25f, {c.data(), DType::kF32}, n);
          results.push_back(c);
        }
      }
      cpu::set_gemm_bf16_path(cpu::Bf16Path::kBest);
      for (size_t r = 1; r < results.size(); ++r) {
        EXPECT_EQ(std::memcmp(results[0].data(), results[r].data(), m * n * sizeof(float)), 0)
            << "a_t " << a_t << " b_t " << b_t << " run " << r;
      }
    }
  }
  omp_set_num_threads(saved);
}

// ---------------------------------------------------------------- the vector tile
// gemm_bf16_tile.h: the vector tile runs where no intermediate can be subnormal and must then
// equal the portable loops bit for bit; elsewhere the dispatch must fall back to them.

// One gemm_bf16 on stored matrices a (m × k, or k × m when a_t) and b (k × n, or n × k when b_t)
// of `in` dtypes, into a C of `out_dtype` that starts from `c0` (m × n), on `path` with `threads`
// threads; returns C's bytes.
struct Operand {
  std::vector<float> values;  // as stored, op() applied by the transpose flag
  DType dtype;
  bool transposed;
};
std::vector<uint8_t> gemm_bytes(cpu::Bf16Path path, int threads, int64_t m, int64_t n, int64_t k,
                                float alpha, const Operand& a, const Operand& b, float beta,
                                const std::vector<float>& c0, DType out_dtype) {
  const auto stored = [](const Operand& x) {
    std::vector<uint8_t> bytes(x.values.size() * dtype_size(x.dtype));
    for (size_t i = 0; i < x.values.size(); ++i) {
      if (x.dtype == DType::kF32) {
        std::memcpy(bytes.data() + 4 * i, &x.values[i], 4);
      } else {
        const bf16 h = float_to_bf16(x.values[i]);
        std::memcpy(bytes.data() + 2 * i, &h, 2);
      }
    }
    return bytes;
  };
  const auto a_bytes = stored(a), b_bytes = stored(b);
  std::vector<uint8_t> c = stored({c0, out_dtype, false});
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  cpu::set_gemm_bf16_path(path);
  cpu::gemm_bf16(a.transposed ? cpu::Transpose::kYes : cpu::Transpose::kNo,
                 b.transposed ? cpu::Transpose::kYes : cpu::Transpose::kNo, m, n, k, alpha,
                 {a_bytes.data(), a.dtype}, a.transposed ? m : k, {b_bytes.data(), b.dtype},
                 b.transposed ? k : n, beta, {c.data(), out_dtype}, n);
  cpu::set_gemm_bf16_path(cpu::Bf16Path::kBest);
  omp_set_num_threads(saved);
  return c;
}

// `values` (rows × cols, row-major) stored transposed when asked.
std::vector<float> stored_as(const std::vector<float>& values, int64_t rows, int64_t cols,
                             bool transposed) {
  if (!transposed) return values;
  std::vector<float> out(values.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = values[r * cols + c];
  return out;
}

std::vector<float> floats(const std::vector<double>& v) { return {v.begin(), v.end()}; }

// The packed bf16 word of two values (`even` in the low half), as gemm_bf16 packs them.
uint32_t word(float even, float odd) {
  return uint32_t{float_to_bf16(even).bits} | uint32_t{float_to_bf16(odd).bits} << 16;
}

TEST(Bf16VectorTile, ConditionOnBoundaryExponents) {
  const auto exps = [](std::initializer_list<uint32_t> words) {
    const std::vector<uint32_t> w(words);
    return cpu::bf16_exponents(w.data(), static_cast<int64_t>(w.size()));
  };
  const float p56 = std::ldexp(1.0f, -56), p57 = std::ldexp(1.0f, -57);
  // Fields: 2^-56 is 71, 2^-57 70, 2^-55 72; 71 + 71 = 142 is the least sum that holds.
  EXPECT_EQ(exps({word(p56, 0.0f)}).min_nonzero, 71u);
  EXPECT_EQ(exps({word(1.0f, -3.0f), word(0.0f, -1.5f * p57)}).min_nonzero, 70u);
  EXPECT_EQ(exps({word(1.0f, -3.0f), word(0.0f, -1.5f * p57)}).max, 128u);
  // Zeros of either sign are left out; all zeros: min 255, max 0.
  EXPECT_EQ(exps({word(0.0f, -0.0f), word(-0.0f, 0.0f)}).min_nonzero, 255u);
  EXPECT_EQ(exps({word(0.0f, -0.0f), word(-0.0f, 0.0f)}).max, 0u);
  // Past the vector width too (the scalar tail and the vector body agree).
  std::vector<uint32_t> many(37, word(1.0f, 2.0f));
  many[33] = word(-p57, 1.0f);
  EXPECT_EQ(cpu::bf16_exponents(many.data(), 37).min_nonzero, 70u);
  many[33] = word(1.0f, 1.0f);
  many[5] = word(1.0f, -p57);
  EXPECT_EQ(cpu::bf16_exponents(many.data(), 37).min_nonzero, 70u);
  EXPECT_EQ(cpu::bf16_exponents(many.data(), 37).max, 128u);

  const auto holds = [&](std::initializer_list<uint32_t> a, std::initializer_list<uint32_t> b) {
    return cpu::bf16_sums_stay_normal(exps(a), exps(b));
  };
  EXPECT_TRUE(holds({word(p56, 1.0f)}, {word(-p56, 0.0f)}));
  EXPECT_TRUE(holds({word(1.75f * p56, 1.0f)}, {word(p56, 0.0f)}));  // exponent, not value
  EXPECT_FALSE(holds({word(p57, 1.0f)}, {word(p56, 0.0f)}));
  EXPECT_TRUE(holds({word(p57, 1.0f)}, {word(2 * p56, 0.0f)}));
  EXPECT_FALSE(holds({word(std::ldexp(1.0f, -126), 0.0f)}, {word(1.0f, 1.0f)}));
  EXPECT_TRUE(holds({word(std::ldexp(1.0f, -112), 0.0f)}, {word(1.0f, 0.0f)}));
  EXPECT_FALSE(holds({word(std::ldexp(1.0f, -112), 0.0f)}, {word(0.5f, 0.0f)}));
  // Zero operands hold with anything finite; 2^127 is finite; infinities and NaNs never hold.
  EXPECT_TRUE(holds({word(0.0f, -0.0f)}, {word(std::ldexp(1.0f, -126), 0.0f)}));
  EXPECT_TRUE(holds({word(std::ldexp(1.0f, 127), 1.0f)}, {word(-std::ldexp(1.0f, 127), 1.0f)}));
  EXPECT_FALSE(holds({word(INFINITY, 1.0f)}, {word(1.0f, 1.0f)}));
  EXPECT_FALSE(holds({word(1.0f, 1.0f)}, {word(1.0f, -INFINITY)}));
  EXPECT_FALSE(holds({word(1.0f, NAN)}, {word(0.0f, 0.0f)}));
}

// The vector tile on each Highway target this CPU runs (AVX-512 and AVX2 differ in vector width
// and rows per group).
class Bf16VectorTarget : public ::testing::TestWithParam<int64_t> {  // a Highway target bit
 protected:
  void SetUp() override { hwy::SetSupportedTargetsForTest(GetParam()); }
  void TearDown() override { hwy::SetSupportedTargetsForTest(0); }
};

// Random normal values on odd shapes (K over several blocks), every transpose, f32 and bf16
// operands and outputs, alpha and beta: the vector path never falls back and equals the
// portable loops bit for bit.
TEST_P(Bf16VectorTarget, EqualsPortableOnOddShapes) {
  if (!cpu::bf16_vector_tile_available()) GTEST_SKIP() << "no vector FMA on this CPU";
  struct Case {
    int64_t m, n, k;
  };
  const Case cases[] = {{1, 1, 1},      {3, 5, 7},      {33, 65, 31},
                        {17, 100, 513}, {70, 45, 1100}, {129, 37, 1537}};
  const struct { float alpha, beta; } scalings[] = {{1.0f, 0.0f}, {0.75f, 0.5f}, {-2.0f, 1.0f}};
  int variant = 0;
  const int64_t fallbacks = cpu::gemm_bf16_portable_fallbacks();
  for (const Case& s : cases) {
    const auto a = floats(normal_values(s.m * s.k, "vec/a", 0.0f, 1.0f));
    const auto b = floats(normal_values(s.k * s.n, "vec/b", 0.0f, 1.0f));
    const auto c0 = floats(normal_values(s.m * s.n, "vec/c", 0.0f, 1.0f));
    for (const bool a_t : {false, true}) {
      for (const bool b_t : {false, true}) {
        for (const DType out : kFloats) {
          const int v = variant++;
          const Operand ao{stored_as(a, s.m, s.k, a_t), kFloats[v % 2], a_t};
          const Operand bo{stored_as(b, s.k, s.n, b_t), kFloats[v / 2 % 2], b_t};
          const auto [alpha, beta] = scalings[v % 3];
          const auto run = [&](cpu::Bf16Path path, int threads) {
            return gemm_bytes(path, threads, s.m, s.n, s.k, alpha, ao, bo, beta, c0, out);
          };
          const auto portable = run(cpu::Bf16Path::kPortable, 1);
          EXPECT_TRUE(portable == run(cpu::Bf16Path::kVector, 1 + v % 2))
              << "m " << s.m << " n " << s.n << " k " << s.k << " a_t " << a_t << " b_t " << b_t
              << " a " << dtype_name(ao.dtype) << " b " << dtype_name(bo.dtype) << " out "
              << dtype_name(out) << " alpha " << alpha << " beta " << beta;
        }
      }
    }
  }
  EXPECT_EQ(cpu::gemm_bf16_portable_fallbacks(), fallbacks) << "normal values fell back";
}

// Values whose products and sums sit near the smallest normal: the condition fails for some A
// blocks and B micro-panels and barely holds for others (exponents from 2^-56, so ea_min +
// eb_min = -112, g = 2^-126), with cancelling pairs, signed zeros, 2^127 magnitudes whose products
// overflow (∞ − ∞ makes NaNs), and infinities and NaNs. Vector and portable paths: the same bits.
TEST_P(Bf16VectorTarget, EqualsPortableOnAdversarialValues) {
  if (!cpu::bf16_vector_tile_available()) GTEST_SKIP() << "no vector FMA on this CPU";
  const int64_t m = 75, n = 70, k = 1100;  // 3 M micro-panels, 3 B micro-panels, 3 K blocks
  const auto av = normal_values(m * k, "vadv/a", 0.0f, 1.0f);
  const auto bv = normal_values(k * n, "vadv/b", 0.0f, 1.0f);
  // Value p of a row of A (column of B) in `band` (0-2: a B micro-panel each, so the condition
  // differs between them): v's sign and mantissa at exponent low + p % 9, so `low` is the band's
  // least exponent; every 13th value a signed zero.
  const auto in_band = [](double v, int64_t p, int low) {
    if (p % 13 == 5) return p % 2 ? -0.0f : 0.0f;
    int e = 0;
    const double mantissa = 2 * std::frexp(v, &e);  // ±[1, 2)
    return static_cast<float>(std::ldexp(mantissa, low + static_cast<int>(p % 9)));
  };
  const int64_t k_huge =
      700;  // from here (K block 2), every third value of band 2 is ±[2^126, 2^127]
  const auto value = [&](double v, int band, int64_t p, int low_tight) {
    if (band == 0) return in_band(v, p, -55);        // products ≥ 2^-110 · 2^-14: normal sums
    if (band == 1) return in_band(v, p, low_tight);  // the condition's boundary
    return p >= k_huge && p % 3 == 0 ? in_band(v, 0, 126) : in_band(v, p, 0);
  };
  // A's least exponent with B's -56: holds, fails by one, fails by far (subnormal products),
  // holds but with infinities and a NaN.
  const struct {
    int a_low;
    bool specials;
  } variants[] = {{-56, false}, {-57, false}, {-75, false}, {-56, true}};
  for (const auto [a_low, specials] : variants) {
    std::vector<float> a(m * k), b(k * n);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p) a[i * k + p] = value(av[i * k + p], i / 32 % 3, p, a_low);
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < n; ++j) b[p * n + j] = value(bv[p * n + j], j / 32 % 3, p, -56);
    for (int64_t i = 0; i < m; ++i) {  // a(i, 2)·b(2, j) = −a(i, 3)·b(3, j): exact cancellation
      a[i * k + 2] = a[i * k + 4];
      a[i * k + 3] = -a[i * k + 4];
    }
    for (int64_t j = 0; j < n; ++j) b[2 * n + j] = b[3 * n + j] = b[4 * n + j];
    if (specials) {  // infinities and a NaN in the last K block of some rows and columns
      a[1 * k + 1050] = INFINITY;
      a[40 * k + 1060] = -INFINITY;
      b[1070 * n + 3] = NAN;
      b[1080 * n + 66] = INFINITY;
    }
    const std::vector<float> c0(m * n, 0.5f);
    const int64_t fallbacks = cpu::gemm_bf16_portable_fallbacks();
    for (const bool a_t : {false, true}) {
      for (const bool b_t : {false, true}) {
        for (const DType out : kFloats) {
          const Operand ao{stored_as(a, m, k, a_t), DType::kF32, a_t};
          const Operand bo{stored_as(b, k, n, b_t), b_t ? DType::kBF16 : DType::kF32, b_t};
          const float beta = out == DType::kF32 ? 0.25f : 0.0f;
          const auto portable =
              gemm_bytes(cpu::Bf16Path::kPortable, 1, m, n, k, 1.0f, ao, bo, beta, c0, out);
          for (const int threads : {1, 2}) {
            EXPECT_TRUE(portable == gemm_bytes(cpu::Bf16Path::kVector, threads, m, n, k, 1.0f, ao,
                                               bo, beta, c0, out))
                << "a_low " << a_low << " specials " << specials << " a_t " << a_t << " b_t " << b_t
                << " out " << dtype_name(out) << " threads " << threads;
          }
        }
      }
    }
    // A's least exponent is a_low (one A block holds every row): with -56, every B micro-panel
    // passes (B's least is -56; products of 2^126 overflow, finite operands still), so no
    // fallback; with -57, B's band 1 fails; with -75, bands 0 and 1; with infinities, all.
    if (a_low == -56 && !specials) {
      EXPECT_EQ(cpu::gemm_bf16_portable_fallbacks(), fallbacks);
    } else {
      EXPECT_GT(cpu::gemm_bf16_portable_fallbacks(), fallbacks);
    }
  }
}

// 0: no mock, the library's own best target (AVX3_DL on Zen 5, which this file's target list
// leaves out: the library opts in to it with HWY_WANT_AVX3_DL).
std::vector<int64_t> targets_to_test() {
  std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
  targets.insert(targets.begin(), 0);
  return targets;
}
INSTANTIATE_TEST_SUITE_P(Targets, Bf16VectorTarget, ::testing::ValuesIn(targets_to_test()),
                         [](const ::testing::TestParamInfo<int64_t>& target) {
                           return target.param == 0 ? std::string("Best")
                                                    : std::string(hwy::TargetName(target.param));
                         });

// The kernel name says which tile runs.
TEST(Bf16VectorTile, KernelName) {
  cpu::set_gemm_bf16_path(cpu::Bf16Path::kPortable);
  EXPECT_STREQ(cpu::gemm_bf16_kernel_name(), "portable");
  cpu::set_gemm_bf16_path(cpu::Bf16Path::kVector);
  const std::string vector = cpu::gemm_bf16_kernel_name();
  EXPECT_EQ(vector, cpu::bf16_vector_tile_available()
                        ? std::string("vector_exact_") + cpu::bf16_vector_tile_target()
                        : std::string("portable"));
  cpu::set_gemm_bf16_path(cpu::Bf16Path::kBest);
  if (!cpu::gemm_bf16_amx_available()) {
    EXPECT_EQ(cpu::gemm_bf16_kernel_name(), vector);
  }
}

// One token row against a bf16 weight: the fp32 GEMV over the widened weight, bit for bit.
TEST(Bf16Matmul, GemvWithBf16Weight) {
  for (const Shape3 s : {Shape3{1, 1, 1}, Shape3{1, 17, 3}, Shape3{1, 100, 33}, Shape3{1, 256, 688},
                         Shape3{1, 688, 256}}) {
    const auto w_values = normal_values(s.out_dim * s.in_dim, "gemv16/w", 0.0f, 1.0f);
    const auto x_values = normal_values(s.in_dim, "gemv16/x", 0.0f, 1.0f);
    const Matrix w({s.out_dim, s.in_dim}, DType::kBF16, w_values);
    for (const DType in_dtype : kFloats) {
      const Matrix x({1, s.in_dim}, in_dtype, x_values);
      Matrix out({1, s.out_dim}, DType::kF32, std::vector<double>(s.out_dim, 0.0));
      cpu().matmul_forward(out.view(), x.view(), w.view());
      const std::vector<float> wf(w.stored.begin(), w.stored.end());
      const std::vector<float> xf(x.stored.begin(), x.stored.end());
      std::vector<float> want(s.out_dim);
      cpu::gemv_forward(want.data(), xf.data(), wf.data(), s.in_dim, s.out_dim);
      EXPECT_TRUE(std::memcmp(want.data(), out.tensor.data<float>(), want.size() * 4) == 0)
          << name("gemv", s, {in_dtype});
      expect_close(
          out.read(),
          reference(1, s.out_dim, s.in_dim, x.stored, s.in_dim, 1, w.stored, 1, s.in_dim, nullptr),
          DType::kF32, name("gemv", s, {in_dtype}));
    }
  }
}

// int8 from bf16 views: the same as from the widened f32 views; a bf16 output is the f32 one
// rounded.
TEST(Bf16Matmul, Int8FromBf16) {
  const int64_t N = 3, I = 100, O = 33;
  const Matrix w16({O, I}, DType::kBF16, normal_values(O * I, "i8/w", 0.0f, 1.0f));
  const Matrix w32({O, I}, DType::kF32, w16.stored);
  const Matrix x16({N, I}, DType::kBF16, normal_values(N * I, "i8/x", 0.0f, 1.0f));
  const Matrix x32({N, I}, DType::kF32, x16.stored);
  const Int8Weights pw16 = cpu().int8_pack_weights(w16.view());
  const Int8Weights pw32 = cpu().int8_pack_weights(w32.view());
  ASSERT_EQ(pw16.packed.size(), pw32.packed.size());
  EXPECT_EQ(std::memcmp(pw16.packed.data(), pw32.packed.data(), pw16.packed.size()), 0);
  Int8Rows r16, r32;
  cpu().int8_quantize_rows(r16, x16.view());
  cpu().int8_quantize_rows(r32, x32.view());
  EXPECT_EQ(r16.codes, r32.codes);
  EXPECT_EQ(r16.scale, r32.scale);
  Matrix out32({N, O}, DType::kF32, std::vector<double>(N * O, 0.0));
  Matrix out16({N, O}, DType::kBF16, std::vector<double>(N * O, 0.0));
  cpu().int8_matmul_forward(out32.view(), r32, pw32);
  cpu().int8_matmul_forward(out16.view(), r16, pw16);
  for (int64_t e = 0; e < N * O; ++e) {
    EXPECT_EQ(out16.tensor.data<bf16>()[e].bits, float_to_bf16(out32.tensor.data<float>()[e]).bits);
  }
}

TEST(Bf16Matmul, OtherDtypesAreClearErrors) {
  const Tensor in8({4, 8}, DType::kI8), w8({3, 8}, DType::kI8);
  const Tensor in({4, 8}, DType::kBF16), w({3, 8}, DType::kBF16), out({4, 3}, DType::kF32);
  const Tensor d_w16({3, 8}, DType::kBF16), d_in({4, 8}, DType::kF32), d_out({4, 3}, DType::kBF16);
  set_check_handler([](const std::string& message) { throw Error(message); });
  const auto message = [](const auto& call) {
    try {
      call();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message([&] {
              cpu().matmul_forward(out.view(), in8.view(), w.view());
            }).find("matmul_forward takes f32 or bf16 tensors, got a int8"),
            std::string::npos);
  EXPECT_NE(message([&] { cpu().matmul_forward(out.view(), in.view(), w8.view()); }).find("int8"),
            std::string::npos);
  EXPECT_NE(message([&] {
              cpu().matmul_backward(d_in.view(), d_w16.view(), d_out.view(), in.view(), w.view());
            }).find("d_weight in f32 only"),
            std::string::npos);
  EXPECT_NE(message([&] { cpu().int8_pack_weights(w8.view()); }).find("int8_pack_weights"),
            std::string::npos);
  Int8Rows rows;
  EXPECT_NE(message([&] { cpu().int8_quantize_rows(rows, in8.view()); }).find("int8_quantize_rows"),
            std::string::npos);
  set_check_handler({});
}

}  // namespace
}  // namespace maxctx::kernels
