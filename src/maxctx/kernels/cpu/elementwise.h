// Fast elementwise helpers (Highway SIMD, OpenMP over ranges of elements): residual adds,
// scaling, dtype conversion and zeroing (the gradient norm's sum of squares is a readout:
// readouts.h).
//
// Same semantics as kernels/ref/elementwise.h; every float operand may be f32 or bf16 on its own
// (FloatPtr: widened, computed in fp32, each output rounded once to nearest even). The float*
// overloads are the fp32 case, with the reference's signatures. Every output may be exactly one
// of the inputs (in place).
#pragma once

#include <cstdint>

#include "maxctx/kernels/cpu/float_ptr.h"

namespace maxctx::kernels::cpu {

void add(FloatPtr out,  // (n) may be a or b
         FloatPtr a,    // (n)
         FloatPtr b,    // (n)
         int64_t n);

void add_inplace(FloatPtr acc,  // (n) acc += x
                 FloatPtr x,    // (n)
                 int64_t n);

void scale(FloatPtr out,  // (n) may be in
           FloatPtr in,   // (n)
           float alpha, int64_t n);

// dst = src, rounded to nearest even when dst is bf16 and src f32 (a plain copy when the dtypes
// match).
void convert(FloatPtr dst,  // (n)
             FloatPtr src,  // (n)
             int64_t n);

// convert without forking threads: for a row inside another op's parallel loop.
void convert_serial(FloatPtr dst,  // (n)
                    FloatPtr src,  // (n)
                    int64_t n);

void fill_zero(float* x,  // (n)
               int64_t n);

inline void add(float* out, const float* a, const float* b, int64_t n) {
  add(FloatPtr(out), FloatPtr(a), FloatPtr(b), n);
}
inline void add_inplace(float* acc, const float* x, int64_t n) {
  add_inplace(FloatPtr(acc), FloatPtr(x), n);
}
inline void scale(float* out, const float* in, float alpha, int64_t n) {
  scale(FloatPtr(out), FloatPtr(in), alpha, n);
}

}  // namespace maxctx::kernels::cpu
