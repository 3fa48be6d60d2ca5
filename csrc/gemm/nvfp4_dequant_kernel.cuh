// Two bandwidth kernels of the NVFP4 prefill path (nvfp4_linear with more than 32 rows, the
// "dequant" strategy: dequantize once, one library GEMM with fp32 output, then this epilogue).
// Torch-free. References: qwen38_kernels/reference/gemm.py (nvfp4_dequantize, nvfp4_linear).
//
// nvfp4_dequantize_kernel: W'[n, k] = e2m1(w)[n, k] * fp32(scale[n, k / 16])
//   w [N, K/2] uint8 (low nibble = even k), scale [N, K/16] e4m3, out [N, K] bf16/fp16/fp32, all
//   contiguous. Every product has at most 6 significant bits and lies in 2^-10 .. 2688 (or is
//   +-0), so it is exact in all three types; the global scale is NOT applied (the GEMM's fp32 sum
//   is multiplied by it afterwards, as the contract says). The decode is nvfp4::decode_scaled, the
//   one the skinny kernel uses (software bit placement on sm_90a, cvt.rn.f16x2.e2m1x2 on sm_121a).
//
//   The tensors are read flat: K/2 is a multiple of 16, so a 16-byte chunk of w never straddles
//   two rows, and chunk c (bytes 16c .. 16c+15, elements 32c .. 32c+31) takes scale bytes 2c, 2c+1.
//   One warp tile = 512 bytes of w (1024 elements, 64 scale bytes):
//
//     load:   lane l reads w bytes [16l, 16l+16) (one 16-byte load) and scale bytes [2l, 2l+2)
//             -> shared memory (per-warp slots, no block barrier)
//     store:  pass j = 0..3, lane l writes elements [256j + 8l, 256j + 8l + 8) with one 16-byte
//             store (16-bit out): the warp's stores are 512 contiguous bytes per pass. Those 8
//             elements are w bytes [128j + 4l, +4) = word 32j + l of the tile (conflict-free) and
//             block 16j + l/2 of the tile's scales.
//   kTiles tiles per warp have their loads issued before any decode (bytes in flight).
//
// nvfp4_prefill_epilogue_kernel: y[m, n] = round( fp32(fp32(acc[m, n] * global) + fp32(bias[n])) )
//   acc fp32 [M, N] contiguous (may be y itself for fp32 output); __fmul_rn / __fadd_rn keep the two
//   fp32 roundings separate (a contracted FMA would round once: not the reference's arithmetic).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>

#include "common/nvfp4.cuh"
#include "common/pdl.cuh"
#include "common/vec.cuh"
#include "gemm/nvfp4_dequant_launch.h"

namespace qwen38::gemm {

namespace dq {

constexpr int kWarps = 8;            // warps per block
constexpr int kTiles = 2;            // warp tiles per warp, loads issued together
constexpr int kTileBytes = 32 * 16;  // packed bytes per warp tile: 16 per lane
constexpr int kTileElems = 2 * kTileBytes;
static_assert(kTileElems == 4 * 32 * 8, "4 store passes of 8 elements per lane cover a tile");

// 8 products (one 16-byte store of 16-bit values; two for fp32) from 4 packed bytes and their
// block scale already made by ScaleOf<T>::make.
template <typename O> struct Store8;

template <typename T>
struct Store8Half {  // T = __half or __nv_bfloat16
  static __device__ __forceinline__ void run(T* dst, uint32_t word, typename nvfp4::ScaleOf<T>::T2 s2) {
    uint4 v;
    v.x = nvfp4::decode_scaled<T>(word & 0xffu, s2);
    v.y = nvfp4::decode_scaled<T>((word >> 8) & 0xffu, s2);
    v.z = nvfp4::decode_scaled<T>((word >> 16) & 0xffu, s2);
    v.w = nvfp4::decode_scaled<T>(word >> 24, s2);
    *reinterpret_cast<uint4*>(dst) = v;
  }
};
template <> struct Store8<__half> : Store8Half<__half> {};
template <> struct Store8<__nv_bfloat16> : Store8Half<__nv_bfloat16> {};
template <> struct Store8<float> {
  // fp16 holds every product exactly (2^-10 .. 2688), and fp16 -> fp32 is exact
  static __device__ __forceinline__ void run(float* dst, uint32_t word, __half2 s2) {
    float2 f[4];
#pragma unroll
    for (int b = 0; b < 4; ++b) f[b] = __half22float2(nvfp4::as_h2(nvfp4::decode_scaled<__half>((word >> (8 * b)) & 0xffu, s2)));
    reinterpret_cast<float4*>(dst)[0] = make_float4(f[0].x, f[0].y, f[1].x, f[1].y);
    reinterpret_cast<float4*>(dst)[1] = make_float4(f[2].x, f[2].y, f[3].x, f[3].y);
  }
};

// The 16-bit type whose decode the output uses (fp32 output decodes through fp16, exactly).
template <typename O> struct DecodeT { using T = O; };
template <> struct DecodeT<float> { using T = __half; };

__device__ __forceinline__ float load_bias(const void* b, int dtype, int64_t n) {
  if (dtype == 2) return static_cast<const float*>(b)[n];
  if (dtype == 1) return __half2float(static_cast<const __half*>(b)[n]);
  return __bfloat162float(static_cast<const __nv_bfloat16*>(b)[n]);
}

}  // namespace dq

template <typename O>
__global__ void __launch_bounds__(32 * dq::kWarps) nvfp4_dequantize_kernel(const Nvfp4DequantParams p) {
  using T = typename dq::DecodeT<O>::T;
  using S = nvfp4::ScaleOf<T>;
  __shared__ uint4 s_w[dq::kWarps][dq::kTiles][32];
  __shared__ uint16_t s_s[dq::kWarps][dq::kTiles][32];

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t bytes = p.n * (p.k / 2);  // a multiple of 16 (K % 32 == 0)
  const int64_t tile0 = (int64_t(blockIdx.x) * dq::kWarps + warp) * dq::kTiles;

  pdl_wait();
  uint4 wq[dq::kTiles];
  uint16_t sc[dq::kTiles];
#pragma unroll
  for (int u = 0; u < dq::kTiles; ++u) {
    const int64_t b = (tile0 + u) * dq::kTileBytes + 16 * lane;
    wq[u] = make_uint4(0, 0, 0, 0);
    sc[u] = 0;
    if (b < bytes) {  // a whole 16-byte chunk or nothing
      wq[u] = __ldg(reinterpret_cast<const uint4*>(p.w + b));
      sc[u] = __ldg(reinterpret_cast<const unsigned short*>(p.scale + b / 8));
    }
  }
  pdl_allow();
#pragma unroll
  for (int u = 0; u < dq::kTiles; ++u) {
    s_w[warp][u][lane] = wq[u];
    s_s[warp][u][lane] = sc[u];
  }
  __syncwarp();

  O* __restrict__ out = static_cast<O*>(p.out);
#pragma unroll
  for (int u = 0; u < dq::kTiles; ++u) {
    const uint32_t* words = reinterpret_cast<const uint32_t*>(s_w[warp][u]);
    const uint8_t* scales = reinterpret_cast<const uint8_t*>(s_s[warp][u]);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int e = 256 * j + 8 * lane;  // element offset in the tile
      const int64_t b = (tile0 + u) * dq::kTileBytes + e / 2;
      if (b >= bytes) continue;  // 8 elements (4 bytes) are all in or all out: bytes % 16 == 0
      const __half sh = __low2half(nvfp4::e4m3x2_to_h2(scales[16 * j + lane / 2]));
      dq::Store8<O>::run(out + 2 * b, words[32 * j + lane], S::make(sh));
    }
  }
}

// V = 4: N % 4 == 0 (float4 loads of acc, rows never split a vector); V = 1 otherwise.
template <typename O, int V>
__global__ void __launch_bounds__(256) nvfp4_prefill_epilogue_kernel(const Nvfp4EpilogueParams p) {
  const int64_t total = p.m * p.n;
  pdl_wait();
  const float g = *p.global;
  const int64_t step = int64_t(gridDim.x) * blockDim.x * V;
  for (int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V; i < total; i += step) {
    float v[V];
    if constexpr (V == 4) {
      const float4 a = *reinterpret_cast<const float4*>(p.acc + i);
      v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
    } else {
      v[0] = p.acc[i];
    }
    const int64_t col = i % p.n;
#pragma unroll
    for (int c = 0; c < V; ++c) {
      v[c] = __fmul_rn(v[c], g);
      if (p.bias != nullptr) v[c] = __fadd_rn(v[c], dq::load_bias(p.bias, p.bias_dtype, col + c));
    }
    O* y = static_cast<O*>(p.y) + i;
    if constexpr (V == 4) {
      Vec<O, 4> o;
#pragma unroll
      for (int c = 0; c < 4; ++c) o.v[c] = from_f32<O>(v[c]);
      *reinterpret_cast<Vec<O, 4>*>(y) = o;
    } else {
      *y = from_f32<O>(v[0]);
    }
  }
  pdl_allow();
}

}  // namespace qwen38::gemm
