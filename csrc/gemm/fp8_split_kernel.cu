// The weight split of fp8_block_linear's "dequant" prefill strategy (fp8_block_linear.cpp).
//
// Each weight v = fp32(e4m3(w[n, k]) * scale[n / 128, k / 128]) (the one rounding of the block
// scale's multiply, here per weight) is written as three bf16 terms whose sum is v exactly:
//   t0 = RN_bf16(v),  r = v - t0 (exact: t0 is v to 8 significant bits),
//   t1 = RN_bf16(r),  t2 = RN_bf16(r - t1) (= r - t1: at most 8 significant bits are left)
// (bf16 has fp32's exponent range, so nothing underflows above 2^-133). Three bf16 GEMMs of x
// against t0, t1, t2 then form exact products summed in fp32: the same kinds of roundings as the
// contract's evaluation, in another order (within reference.fp8_block_linear_f64_bound). A NaN
// weight gives NaN terms.
//
// Layout: w [N, K] e4m3 contiguous (K % 16 == 0, 16-byte aligned base), scale [ceil(N/128), gk]
// fp32; t0, t1, t2 [N, K] bf16 contiguous. One thread per 8 consecutive weights of a row (one
// 8-byte load, three 16-byte stores), grid-stride.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "common/launch.cuh"
#include "common/nvfp4.cuh"
#include "common/pdl.cuh"
#include "gemm/fp8_block_linear_launch.h"

namespace qwen38::gemm {
namespace {

constexpr int kSplitThreads = 256;

__device__ __forceinline__ void split3(float v, __nv_bfloat16& t0, __nv_bfloat16& t1, __nv_bfloat16& t2) {
  t0 = __float2bfloat16_rn(v);
  const float r = __fsub_rn(v, __bfloat162float(t0));
  t1 = __float2bfloat16_rn(r);
  t2 = __float2bfloat16_rn(__fsub_rn(r, __bfloat162float(t1)));
}

__global__ void __launch_bounds__(kSplitThreads) fp8_split_kernel(const Fp8SplitParams p) {
  // The terms may reuse memory that the previous kernel of the stream still reads: write after it.
  pdl_wait();
  pdl_allow();
  const int64_t per_row = p.k / 8;
  const int64_t groups = p.n * per_row;
  for (int64_t g = int64_t(blockIdx.x) * kSplitThreads + threadIdx.x; g < groups;
       g += int64_t(gridDim.x) * kSplitThreads) {
    const int64_t n = g / per_row, k = (g - n * per_row) * 8;
    const uint2 w8 = *reinterpret_cast<const uint2*>(p.w + n * p.k + k);
    const float s = p.scale[(n / 128) * p.gk + k / 128];
    const uint16_t pairs[4] = {uint16_t(w8.x), uint16_t(w8.x >> 16), uint16_t(w8.y), uint16_t(w8.y >> 16)};
    alignas(16) __nv_bfloat16 t[3][8];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(nvfp4::e4m3x2_to_h2(pairs[i]));  // exact: e4m3 is a subset of fp16
      split3(__fmul_rn(f.x, s), t[0][2 * i], t[1][2 * i], t[2][2 * i]);
      split3(__fmul_rn(f.y, s), t[0][2 * i + 1], t[1][2 * i + 1], t[2][2 * i + 1]);
    }
    const int64_t at = n * p.k + k;
    *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(p.t0) + at) = *reinterpret_cast<const uint4*>(t[0]);
    *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(p.t1) + at) = *reinterpret_cast<const uint4*>(t[1]);
    *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(p.t2) + at) = *reinterpret_cast<const uint4*>(t[2]);
  }
}

}  // namespace

cudaError_t launch_fp8_split(const Fp8SplitParams& p, bool pdl, cudaStream_t stream) {
  if (p.n == 0) return cudaSuccess;
  if (p.k <= 0 || p.k % 16 != 0) return cudaErrorInvalidValue;
  const int64_t groups = p.n * (p.k / 8);
  const unsigned blocks = unsigned(std::min<int64_t>((groups + kSplitThreads - 1) / kSplitThreads, int64_t(1) << 20));
  return launch_kernel(fp8_split_kernel, dim3(blocks), dim3(kSplitThreads), 0, stream, pdl, p);
}

}  // namespace qwen38::gemm
