// FloatPtr: a pointer to float values stored as f32 or bf16, the operand type of the cpu row and
// elementwise ops (kernels.h's precision contract: every float view has its own dtype).
//
// Internal to kernels/cpu. It converts implicitly from float* and bf16* (const or not), so a
// caller passes its typed arrays as they are; constness is not tracked, the op's comment says
// which operands it writes. Per-target code turns FloatPtrs back into typed pointers
// (float_storage-inl.h) and runs one instantiation per dtype mix: no per-element dtype branch.
#pragma once

#include <cstdint>

#include "maxctx/core/dtype.h"

namespace maxctx::kernels::cpu {

class FloatPtr {
 public:
  FloatPtr(const float* data) : data_(const_cast<float*>(data)), is_bf16_(false) {}  // NOLINT
  FloatPtr(const bf16* data) : data_(const_cast<bf16*>(data)), is_bf16_(true) {}     // NOLINT

  bool is_bf16() const { return is_bf16_; }
  DType dtype() const { return is_bf16_ ? DType::kBF16 : DType::kF32; }
  void* raw() const { return data_; }
  bool same_storage(const FloatPtr& other) const { return data_ == other.data_; }

  // The pointer `offset` elements further.
  FloatPtr operator+(int64_t offset) const {
    return is_bf16_ ? FloatPtr(static_cast<bf16*>(data_) + offset)
                    : FloatPtr(static_cast<float*>(data_) + offset);
  }
  // Element k widened to float, and v rounded (to nearest even) into element k: for scalar
  // code outside the hot loops.
  float load(int64_t k) const {
    return is_bf16_ ? bf16_to_float(static_cast<const bf16*>(data_)[k])
                    : static_cast<const float*>(data_)[k];
  }
  void store(int64_t k, float v) const {
    if (is_bf16_) {
      static_cast<bf16*>(data_)[k] = float_to_bf16(v);
    } else {
      static_cast<float*>(data_)[k] = v;
    }
  }

 private:
  void* data_;
  bool is_bf16_;
};

}  // namespace maxctx::kernels::cpu
