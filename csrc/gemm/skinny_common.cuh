// Pieces of the skinny weight-GEMM kernels (nvfp4_linear, fp8_block_linear): the step size and the
// fixed-order reduction of the k-split warps' partials with the epilogue (both kernels), and the
// activation A fragments of one 128-k warp step (the NVFP4 kernel; the FP8 kernel loads its
// fragments in place). Torch-free. Layout and k permutation: nvfp4_linear_kernel.cuh.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>

#include "common/cluster.cuh"
#include "common/vec.cuh"

namespace qwen38::gemm {

constexpr int kStepK = 128;  // k per warp step: 4 threads x 32

// x[row][kc .. kc+31] for rows g + 8h (h = 0 .. 2*MT-1) as 16 registers per row (two 16-bit values
// each, register r = elements 2r, 2r+1); zeros for rows >= m and for 8-element pieces at or past k.
template <typename T, int MT>
__device__ __forceinline__ void load_activations(uint32_t (&xa)[2 * MT][16], const T* __restrict__ x,
                                                 int64_t x_stride, int g, int64_t kc, int64_t m, int64_t k) {
#pragma unroll
  for (int h = 0; h < 2 * MT; ++h) {
    const int64_t row = g + 8 * h;
    const uint4* src = reinterpret_cast<const uint4*>(x + row * x_stride + kc);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      uint4 v = make_uint4(0, 0, 0, 0);
      if (row < m && kc + 8 * q < k) v = src[q];
      xa[h][4 * q + 0] = v.x;
      xa[h][4 * q + 1] = v.y;
      xa[h][4 * q + 2] = v.z;
      xa[h][4 * q + 3] = v.w;
    }
  }
}

// The A fragment of m16 tile mt for mma j (k = kc + 4j + {0,1 | 2,3}).
template <int MT>
__device__ __forceinline__ void a_fragment(uint32_t (&a)[4], const uint32_t (&xa)[2 * MT][16], int mt, int j) {
  a[0] = xa[2 * mt][2 * j];
  a[1] = xa[2 * mt + 1][2 * j];
  a[2] = xa[2 * mt][2 * j + 1];
  a[3] = xa[2 * mt + 1][2 * j + 1];
}

// Re-pairs each row's 32 activations for the NVFP4 word decode: within every 8 consecutive values
// x0..x7 (registers (x0,x1) (x2,x3) (x4,x5) (x6,x7)) the registers become (x0,x4) (x1,x5) (x2,x6)
// (x3,x7), the pairing of nvfp4::decode_word. Register 4q + i then holds elements (8q + i, 8q + i + 4).
template <int MT>
__device__ __forceinline__ void pair_by_four(uint32_t (&xa)[2 * MT][16]) {
#pragma unroll
  for (int h = 0; h < 2 * MT; ++h)
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const uint32_t r0 = xa[h][4 * q], r1 = xa[h][4 * q + 1], r2 = xa[h][4 * q + 2], r3 = xa[h][4 * q + 3];
      xa[h][4 * q + 0] = __byte_perm(r0, r2, 0x5410);
      xa[h][4 * q + 1] = __byte_perm(r0, r2, 0x7632);
      xa[h][4 * q + 2] = __byte_perm(r1, r3, 0x5410);
      xa[h][4 * q + 3] = __byte_perm(r1, r3, 0x7632);
    }
}

// out: 0 bf16, 1 fp16, 2 fp32 (the Out enum of nvfp4_linear_launch.h). A runtime switch: one
// kernel per (T, MT, KSPLIT, NT) serves every output dtype.
__device__ __forceinline__ void store_out(void* y, int out, int64_t idx, float v) {
  if (out == 2) static_cast<float*>(y)[idx] = v;
  else if (out == 1) static_cast<__half*>(y)[idx] = __float2half_rn(v);
  else static_cast<__nv_bfloat16*>(y)[idx] = __float2bfloat16_rn(v);
}

__device__ __forceinline__ float load_bias(const void* b, int dtype, int64_t n) {
  if (dtype == 2) return static_cast<const float*>(b)[n];
  if (dtype == 1) return __half2float(static_cast<const __half*>(b)[n]);
  return __bfloat162float(static_cast<const __nv_bfloat16*>(b)[n]);
}

// One output of an 8-column tile from its k-split partials: 0 + part(0) + part(1) + ... (warp
// order), times `unscale` (a power of two: exact), times `gscale`, + bias in fp32, rounded once.
template <int KSPLIT, typename Part>
__device__ __forceinline__ void store_one(Part part, float unscale, float gscale, const void* bias, int bias_dtype,
                                          void* y, int out, int64_t r, int64_t n, int64_t nn) {
  float sum = 0.0f;
#pragma unroll
  for (int w = 0; w < KSPLIT; ++w) sum += part(w);
  float v = __fmul_rn(__fmul_rn(sum, unscale), gscale);  // never contracted into an fma with the bias
  if (bias != nullptr) v = __fadd_rn(v, load_bias(bias, bias_dtype, nn));
  store_out(y, out, r * n + nn, v);
}

// A tile's outputs from the k-split warps' partials in `partial` (every warp has written its own,
// then a barrier): each output of the 8-column tile stored by store_one. Ends with a barrier:
// `partial` can be reused at once.
template <int MT, int KSPLIT>
__device__ __forceinline__ void store_partials(float (&partial)[KSPLIT][MT * 16][8], float unscale, float gscale,
                                               const void* bias, int bias_dtype, void* y, int out, int64_t m,
                                               int64_t n, int64_t n0) {
  __syncthreads();
  for (int idx = threadIdx.x; idx < MT * 16 * 8; idx += 32 * KSPLIT) {
    const int r = idx / 8, c = idx % 8;
    const int64_t nn = n0 + c;
    if (r >= m || nn >= n) continue;
    store_one<KSPLIT>([&](int w) { return partial[w][r][c]; }, unscale, gscale, bias, bias_dtype, y, out, r, n, nn);
  }
  __syncthreads();
}

// Every warp's C fragments to shared memory; after a barrier each output of the 8-column tile is
// stored by store_one (store_partials).
template <int MT, int KSPLIT>
__device__ __forceinline__ void reduce_and_store(float (&partial)[KSPLIT][MT * 16][8], const float (&acc)[MT][4],
                                                 int warp, int g, int t, float unscale, float gscale,
                                                 const void* bias, int bias_dtype, void* y, int out, int64_t m,
                                                 int64_t n, int64_t n0) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    partial[warp][mt * 16 + g][2 * t] = acc[mt][0];
    partial[warp][mt * 16 + g][2 * t + 1] = acc[mt][1];
    partial[warp][mt * 16 + g + 8][2 * t] = acc[mt][2];
    partial[warp][mt * 16 + g + 8][2 * t + 1] = acc[mt][3];
  }
  store_partials<MT, KSPLIT>(partial, unscale, gscale, bias, bias_dtype, y, out, m, n, n0);
}

// The cluster form (QWEN38_SKINNY_CLUSTER, stream_launch.cuh): the KSPLIT warps of an output tile
// are spread over the CTAs of a cluster (global warp index `warp` = rank x warps a CTA + local
// warp). Every warp writes the C fragments of its NT tiles into `buf` of the cluster's CTA 0
// (NT x KSPLIT x MT*16 x 8 floats of dynamic shared memory), one cluster barrier, and CTA 0 stores
// every output through store_one in the same warp order: the bits of reduce_and_store. The caller
// arrived on the cluster barrier at its start (cluster_arrive_relaxed): the wait here also makes
// sure CTA 0 runs before anything is written into its shared memory.
template <int MT, int KSPLIT, int NT, typename Put>
__device__ __forceinline__ void reduce_and_store_cluster_with(float* buf, Put put, int rank, int warp,
                                                              float unscale, float gscale, const void* bias,
                                                              int bias_dtype, void* y, int out, int64_t m, int64_t n,
                                                              int64_t nb) {
  constexpr int kTile = MT * 16 * 8;  // floats of one warp's partial of one 8-column tile
  cluster_wait();
  const uint32_t base = cluster_map(buf, 0);
  // put(at): this warp's fragments, element (row r, column c) of tile nt stored by at(nt, r, c, v)
  put([&](int nt, int r, int c, float v) {
    cluster_store(base + 4u * uint32_t((nt * KSPLIT + warp) * kTile + r * 8 + c), v);
  });
  cluster_arrive_release();
  cluster_wait();
  if (rank != 0) return;
  for (int idx = threadIdx.x; idx < NT * kTile; idx += blockDim.x) {
    const int nt = idx / kTile, r = idx % kTile / 8, c = idx % 8;
    const int64_t nn = nb + 8 * nt + c;
    if (r >= m || nn >= n) continue;
    const float* p = buf + nt * KSPLIT * kTile + r * 8 + c;
    store_one<KSPLIT>([&](int w) { return p[w * kTile]; }, unscale, gscale, bias, bias_dtype, y, out, r, n, nn);
  }
}
template <int MT, int KSPLIT, int NT>
__device__ __forceinline__ void reduce_and_store_cluster(float* buf, const float (&acc)[NT][MT][4], int rank,
                                                         int warp, int g, int t, float unscale, float gscale,
                                                         const void* bias, int bias_dtype, void* y, int out,
                                                         int64_t m, int64_t n, int64_t nb) {
  auto put = [&](auto at) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        at(nt, mt * 16 + g, 2 * t, acc[nt][mt][0]);
        at(nt, mt * 16 + g, 2 * t + 1, acc[nt][mt][1]);
        at(nt, mt * 16 + g + 8, 2 * t, acc[nt][mt][2]);
        at(nt, mt * 16 + g + 8, 2 * t + 1, acc[nt][mt][3]);
      }
  };
  reduce_and_store_cluster_with<MT, KSPLIT, NT>(buf, put, rank, warp, unscale, gscale, bias, bias_dtype, y, out, m,
                                                n, nb);
}

// The transposed form of the stream kernels (weights as the mma A operand, 8-row groups of x as B:
// fp8_stream_kernel.cuh, nvfp4_stream_kernel.cuh): acc[i][nx][e] holds weight row g of tile 2i + e / 2
// against x row 8 nx + 2t + e % 2. The same reduction and epilogue as reduce_and_store (per tile,
// `partial` in the same layout) and as reduce_and_store_cluster.
template <int MT, int KSPLIT, int NT, int NX>
__device__ __forceinline__ void reduce_and_store_t(float (&partial)[KSPLIT][MT * 16][8],
                                                   const float (&acc)[NT / 2][NX][4], int warp, int g, int t,
                                                   float unscale, float gscale, const void* bias, int bias_dtype,
                                                   void* y, int out, int64_t m, int64_t n, int64_t nb) {
  static_assert(8 * NX <= 16 * MT, "the partials hold 16 MT rows");
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int nx = 0; nx < NX; ++nx)
#pragma unroll
      for (int e = 0; e < 2; ++e) partial[warp][8 * nx + 2 * t + e][g] = acc[nt / 2][nx][2 * (nt % 2) + e];
    store_partials<MT, KSPLIT>(partial, unscale, gscale, bias, bias_dtype, y, out, m, n, nb + 8 * nt);
  }
}
template <int MT, int KSPLIT, int NT, int NX>
__device__ __forceinline__ void reduce_and_store_cluster_t(float* buf, const float (&acc)[NT / 2][NX][4], int rank,
                                                           int warp, int g, int t, float unscale, float gscale,
                                                           const void* bias, int bias_dtype, void* y, int out,
                                                           int64_t m, int64_t n, int64_t nb) {
  auto put = [&](auto at) {
#pragma unroll
    for (int i = 0; i < NT / 2; ++i)
#pragma unroll
      for (int nx = 0; nx < NX; ++nx)
#pragma unroll
        for (int e = 0; e < 4; ++e) at(2 * i + e / 2, 8 * nx + 2 * t + e % 2, g, acc[i][nx][e]);
  };
  reduce_and_store_cluster_with<MT, KSPLIT, NT>(buf, put, rank, warp, unscale, gscale, bias, bias_dtype, y, out, m,
                                                n, nb);
}

}  // namespace qwen38::gemm
