// Fast elementwise helpers (Highway SIMD, OpenMP over ranges of elements): residual adds,
// scaling, zeroing, and the sum of squares behind gradient-norm clipping.
//
// Same signatures and semantics as kernels/ref/elementwise.h. Every output may be exactly one of
// the inputs (in place). sum_of_squares adds fixed blocks in a fixed order, so its result does
// not depend on the thread count.
#pragma once

#include <cstdint>

namespace maxctx::kernels::cpu {

void add(float* out,      // (n) may be a or b
         const float* a,  // (n)
         const float* b,  // (n)
         int64_t n);

void add_inplace(float* acc,      // (n) acc += x
                 const float* x,  // (n)
                 int64_t n);

void scale(float* out,       // (n) may be in
           const float* in,  // (n)
           float alpha, int64_t n);

void fill_zero(float* x,  // (n)
               int64_t n);

double sum_of_squares(const float* x,  // (n)
                      int64_t n);

}  // namespace maxctx::kernels::cpu
