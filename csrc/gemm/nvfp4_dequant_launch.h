// Torch-free interface between the nvfp4 host code (nvfp4_linear.cpp) and the kernels of
// nvfp4_dequant_kernel.cuh: the exact dequantization W' = e2m1 * e4m3 scale, and the epilogue of the
// prefill path that turns an fp32 GEMM result into y = round(acc * global + bias).
#pragma once

#include <cuda_runtime.h>
#include <cstdint>

#include "gemm/nvfp4_linear_launch.h"  // Out

namespace qwen38::gemm {

struct Nvfp4DequantParams {
  const uint8_t* w = nullptr;      // [N, K/2] packed e2m1, low nibble = even k, contiguous, 16-byte aligned
  const uint8_t* scale = nullptr;  // [N, K/16] e4m3 block scales, row-major, contiguous, 2-byte aligned
  void* out = nullptr;             // [N, K] bf16/fp16/fp32, contiguous, 16-byte aligned
  int64_t n = 0, k = 0;            // K a positive multiple of 32
};

// W'[n, k] = e2m1(w)[n, k] * fp32(scale[n, k / 16]) in `out`'s type (exact for all three: at most 6
// significant bits, magnitudes 2^-10 .. 2688). The global scale is not applied.
cudaError_t launch_nvfp4_dequantize(Out out, const Nvfp4DequantParams& p, bool pdl, cudaStream_t stream);

struct Nvfp4EpilogueParams {
  const float* acc = nullptr;     // [M, N] fp32 sums, contiguous (may alias y when y is fp32)
  const float* global = nullptr;  // [1] fp32 multiplier (device memory)
  const void* bias = nullptr;     // [N] bf16/fp16/fp32 or null
  int bias_dtype = 0;             // 0 bf16, 1 fp16, 2 fp32 (when bias != null)
  void* y = nullptr;              // [M, N] out dtype, contiguous
  int64_t m = 0, n = 0;
};

// y[m, n] = round_out( fp32( fp32(acc[m, n] * global) + fp32(bias[n]) ) ): the multiply and the add
// each rounded to fp32 (never fused into an FMA), then one rounding to the output type, the
// reference's rounding points. In place when acc == y (fp32 output).
cudaError_t launch_nvfp4_prefill_epilogue(Out out, const Nvfp4EpilogueParams& p, bool pdl, cudaStream_t stream);

}  // namespace qwen38::gemm
