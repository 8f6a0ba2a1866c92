// Every implementation of the non-attention kernels behind one table of function pointers, so
// that one list of test cases runs against all of them (ggml test-backend-ops style).
//
// The members' types are taken from ref<T>, and the cpu set is built from cpu:: functions: if a
// cpu signature ever drifts from ref<float>'s, this header stops compiling. ref<double> is the
// oracle and the subject of the finite-difference checks.
#pragma once

#include <vector>

#include "maxctx/kernels/cpu/cross_entropy.h"
#include "maxctx/kernels/cpu/elementwise.h"
#include "maxctx/kernels/cpu/embedding.h"
#include "maxctx/kernels/cpu/matmul.h"
#include "maxctx/kernels/cpu/readouts.h"
#include "maxctx/kernels/cpu/rmsnorm.h"
#include "maxctx/kernels/cpu/rope.h"
#include "maxctx/kernels/cpu/swiglu.h"
#include "maxctx/kernels/ref/cross_entropy.h"
#include "maxctx/kernels/ref/elementwise.h"
#include "maxctx/kernels/ref/embedding.h"
#include "maxctx/kernels/ref/matmul.h"
#include "maxctx/kernels/ref/rmsnorm.h"
#include "maxctx/kernels/ref/rope.h"
#include "maxctx/kernels/ref/swiglu.h"

namespace maxctx::kernels {

template <typename T>
struct KernelSet {
  const char* name;
  decltype(&ref::matmul_forward<T>) matmul_forward;
  decltype(&ref::matmul_backward<T>) matmul_backward;
  decltype(&ref::matmul_backward_accumulate_input<T>) matmul_backward_accumulate_input;
  decltype(&ref::embedding_forward<T>) embedding_forward;
  decltype(&ref::embedding_backward<T>) embedding_backward;
  decltype(&ref::rmsnorm_forward<T>) rmsnorm_forward;
  decltype(&ref::rmsnorm_backward<T>) rmsnorm_backward;
  decltype(&ref::rope_cos_sin<T>) rope_cos_sin;
  decltype(&ref::rope_forward<T>) rope_forward;
  decltype(&ref::rope_backward<T>) rope_backward;
  decltype(&ref::swiglu_forward<T>) swiglu_forward;
  decltype(&ref::swiglu_backward<T>) swiglu_backward;
  decltype(&ref::cross_entropy_forward<T>) cross_entropy_forward;
  decltype(&ref::cross_entropy_backward<T>) cross_entropy_backward;
  decltype(&ref::add<T>) add;
  decltype(&ref::add_inplace<T>) add_inplace;
  decltype(&ref::scale<T>) scale;
  decltype(&ref::fill_zero<T>) fill_zero;
  decltype(&ref::sum_of_squares<T>) sum_of_squares;
};

template <typename T>
const KernelSet<T>& ref_kernels() {
  static const KernelSet<T> kSet = {
      .name = "ref",
      .matmul_forward = &ref::matmul_forward<T>,
      .matmul_backward = &ref::matmul_backward<T>,
      .matmul_backward_accumulate_input = &ref::matmul_backward_accumulate_input<T>,
      .embedding_forward = &ref::embedding_forward<T>,
      .embedding_backward = &ref::embedding_backward<T>,
      .rmsnorm_forward = &ref::rmsnorm_forward<T>,
      .rmsnorm_backward = &ref::rmsnorm_backward<T>,
      .rope_cos_sin = &ref::rope_cos_sin<T>,
      .rope_forward = &ref::rope_forward<T>,
      .rope_backward = &ref::rope_backward<T>,
      .swiglu_forward = &ref::swiglu_forward<T>,
      .swiglu_backward = &ref::swiglu_backward<T>,
      .cross_entropy_forward = &ref::cross_entropy_forward<T>,
      .cross_entropy_backward = &ref::cross_entropy_backward<T>,
      .add = &ref::add<T>,
      .add_inplace = &ref::add_inplace<T>,
      .scale = &ref::scale<T>,
      .fill_zero = &ref::fill_zero<T>,
      .sum_of_squares = &ref::sum_of_squares<T>,
  };
  return kSet;
}

inline const KernelSet<float>& cpu_kernels() {
  static const KernelSet<float> kSet = {
      .name = "cpu",
      .matmul_forward = &cpu::matmul_forward,
      .matmul_backward = &cpu::matmul_backward,
      .matmul_backward_accumulate_input = &cpu::matmul_backward_accumulate_input,
      .embedding_forward = &cpu::embedding_forward,
      .embedding_backward = &cpu::embedding_backward,
      .rmsnorm_forward = &cpu::rmsnorm_forward,
      .rmsnorm_backward = &cpu::rmsnorm_backward,
      .rope_cos_sin = &cpu::rope_cos_sin,
      .rope_forward = &cpu::rope_forward,
      .rope_backward = &cpu::rope_backward,
      .swiglu_forward = &cpu::swiglu_forward,
      .swiglu_backward = &cpu::swiglu_backward,
      .cross_entropy_forward = &cpu::cross_entropy_forward,
      .cross_entropy_backward = &cpu::cross_entropy_backward,
      .add = &cpu::add,
      .add_inplace = &cpu::add_inplace,
      .scale = &cpu::scale,
      .fill_zero = &cpu::fill_zero,
      .sum_of_squares =
          static_cast<double (*)(const float*, int64_t)>(&cpu::sum_of_squares_in_order),
  };
  return kSet;
}

// The float implementations under test, in the order the tests index them.
inline const std::vector<const KernelSet<float>*>& float_kernel_sets() {
  static const std::vector<const KernelSet<float>*> kSets = {&ref_kernels<float>(), &cpu_kernels()};
  return kSets;
}

}  // namespace maxctx::kernels
