// The cpu backend's op table: kernels/kernels.h implemented by the functions of this folder
// (own SGEMM and GEMV, Highway SIMD, VNNI int8, OpenMP over rows). It checks each view's device
// and dtype (fp32 today, int8 where the op is an int8 op) and the element counts against the
// dims it reads, then calls the raw-pointer kernel; the arithmetic is the kernel's, unchanged.
#pragma once

#include "maxctx/kernels/kernels.h"

namespace maxctx::kernels::cpu {

const Kernels& cpu_kernels();

}  // namespace maxctx::kernels::cpu
