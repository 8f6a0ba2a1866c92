// The int8 rule of kernels/ref/int8.h on the device, and the device layouts of Int8Weights and
// Int8Rows (kernels/types.h) this backend uses:
//   Int8Weights::packed (device memory): codes (out_dim, quads·4) int8 row-major, padding
//     columns 0, then scale (out_dim) f32 at byte offset weight_scale_offset(). The host vectors
//     scale and row_sum are filled too (they describe the weight whatever its layout).
//   Int8Rows::device: codes (rows, quads·4) int8 (signed, padding 0), then scale (rows) f32 at
//     rows_scale_offset(); the host vectors codes/scale are left empty.
// The matmul sums exactly in int32 (dp4a), so its bits equal the reference's.
#pragma once

#include <cstdint>

#include "maxctx/kernels/cuda/device_float.h"
#include "maxctx/kernels/types.h"

namespace maxctx::kernels::cuda {

Int8Weights int8_pack_weights(ConstDeviceFloats weight, int64_t out_dim, int64_t in_dim);
Int8Weights int8_pack_codes(const int8_t* codes, const float* scale, int64_t out_dim,
                            int64_t in_dim);
void int8_quantize_rows(Int8Rows& rows, ConstDeviceFloats in, int64_t N, int64_t in_dim);
void int8_matmul_forward(DeviceFloats out, const Int8Rows& rows, const Int8Weights& weight);
void quantize_rows_int8(int8_t* codes, float* scale, ConstDeviceFloats x, int64_t rows,
                        int64_t cols, float levels);
void dequantize_rows_int8(DeviceFloats x, const int8_t* codes, const float* scale, int64_t rows,
                          int64_t cols);

}  // namespace maxctx::kernels::cuda
