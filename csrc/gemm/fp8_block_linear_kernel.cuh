// fp8_block_linear, skinny path (1..32 rows). Reference: qwen38_kernels/reference/fp8.py.
//
//   y[m, n] = round( sum_b fp32( S_b[m, n] * scale[n/128, b] ) + bias[n] ),
//   S_b[m, n] = sum over the 128 k of block b of x[m, k] * e4m3(w[n, k])     (fp32, products exact)
//
// Tensors: x [M, K] bf16/fp16 (row stride x_stride, K % 16 == 0); w [N, K] float8_e4m3fn;
// scale [ceil(N/128), ceil(K/128)] fp32 (a multiplier, "weight_scale_inv"); bias [N] or none;
// y [M, N] (bf16/fp16/fp32), contiguous.
//
// Same skeleton as the NVFP4 skinny kernel (nvfp4_linear_kernel.cuh): weights are the mma B
// operand, decoded in registers (cvt.rn.f16x2.e4m3x2, exact; then to bf16 for bf16 activations,
// exact), nothing through shared memory. A warp step is 128 k = one scale block:
//   thread (g, t) holds w[n0 + g][k0 + 32t .. +31] (32 bytes, two 16-byte loads);
//   mma j = 0..7 takes bytes 4j..4j+3: b0 = (4j, 4j+1) -> k slots (2t, 2t+1), b1 = (4j+2, 4j+3)
//   -> slots (2t+8, 2t+9); A takes x at the same k.
// The 8 mmas of a step accumulate the block sum S_b from zero; then acc = acc + fp32(S_b * scale)
// (two roundings, no fma: the reference's rounding points). The 8 rows of a tile share one scale
// row (128 % 8 == 0). Blocks are added in k order within a warp, warps' partials in warp order.
// A warp walks NT 8-row tiles per step with one load of the activations (a tile-table choice that
// changes no sum).
#pragma once

#include "common/mma.cuh"
#include "common/nvfp4.cuh"
#include "common/pdl.cuh"
#include "common/vec.cuh"
#include "gemm/fp8_block_linear_launch.h"
#include "gemm/skinny_common.cuh"

namespace qwen38::gemm {

// Two e4m3 bytes -> the 16-bit pair for the mma (exact).
template <typename T> __device__ __forceinline__ uint32_t e4m3x2_to(uint16_t two);
template <> __device__ __forceinline__ uint32_t e4m3x2_to<__half>(uint16_t two) {
  return nvfp4::as_u32(nvfp4::e4m3x2_to_h2(two));
}
template <> __device__ __forceinline__ uint32_t e4m3x2_to<__nv_bfloat16>(uint16_t two) {
  const float2 f = __half22float2(nvfp4::e4m3x2_to_h2(two));  // e4m3 is a subset of fp16 and bf16
  return nvfp4::as_u32(__floats2bfloat162_rn(f.x, f.y));
}

template <typename T, int MT, int KSPLIT, int NT>
__global__ void __maxnreg__(KSPLIT >= 8 ? 240 : 255) fp8_block_skinny_kernel(const Fp8BlockParams p) {
  __shared__ float partial[KSPLIT][MT * 16][8];

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t nb = int64_t(blockIdx.x) * 8 * NT;
  const int64_t steps = (p.k + kStepK - 1) / kStepK;  // = scale columns
  const int64_t s_begin = steps * warp / KSPLIT, s_end = steps * (warp + 1) / KSPLIT;
  const T* __restrict__ x = static_cast<const T*>(p.x);

  pdl_wait();
  pdl_allow();

  float acc[NT][MT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[nt][mt][i] = 0.0f;

  auto load_w = [&](int64_t s, uint4 (&wq)[NT][2]) {
    const int64_t kc = s * kStepK + 32 * t;  // K % 16 == 0: halves of 16 are all in or all out
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int64_t n = nb + 8 * nt + g;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        wq[nt][h] = make_uint4(0, 0, 0, 0);
        if (s < s_end && n < p.n && kc + 16 * h < p.k)
          wq[nt][h] = __ldg(reinterpret_cast<const uint4*>(p.w + n * p.k + kc + 16 * h));
      }
    }
  };
  uint4 wq_next[NT][2];
  load_w(s_begin, wq_next);

  for (int64_t s = s_begin; s < s_end; ++s) {
    const int64_t kc = s * kStepK + 32 * t;
    uint4 wq[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      wq[nt][0] = wq_next[nt][0];
      wq[nt][1] = wq_next[nt][1];
    }
    load_w(s + 1, wq_next);

    uint32_t xa[2 * MT][16];
    load_activations<T, MT>(xa, x, p.x_stride, g, kc, p.m, p.k);

#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int64_t n = nb + 8 * nt;  // the tile's 8 rows share one scale row (128 % 8 == 0)
      const float scale = n < p.n ? __ldg(p.scale + (n / 128) * steps + s) : 0.0f;
      const uint32_t wr[8] = {wq[nt][0].x, wq[nt][0].y, wq[nt][0].z, wq[nt][0].w,
                              wq[nt][1].x, wq[nt][1].y, wq[nt][1].z, wq[nt][1].w};
      float blk[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < 4; ++i) blk[mt][i] = 0.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j) {  // bytes 4j .. 4j+3 of the chunk = word j
        const uint32_t b0 = e4m3x2_to<T>(uint16_t(wr[j] & 0xffffu));
        const uint32_t b1 = e4m3x2_to<T>(uint16_t(wr[j] >> 16));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          uint32_t a[4];
          a_fragment<MT>(a, xa, mt, j);
          mma_16816<T>(blk[mt], a, b0, b1);
        }
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[nt][mt][i] = __fadd_rn(acc[nt][mt][i], __fmul_rn(blk[mt][i], scale));
    }
  }

  // per tile: partials of the KSPLIT warps in warp order, bias, one rounding (x 1 x 1: exact)
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
    reduce_and_store<MT, KSPLIT>(partial, acc[nt], warp, g, t, 1.0f, 1.0f, p.bias, p.bias_dtype, p.y, p.out, p.m,
                                 p.n, nb + 8 * nt);
}

}  // namespace qwen38::gemm
