// nvfp4_linear, skinny path (1..32 rows): y = round(global * sum_k x[m,k] * W[n,k] + bias[n]),
// W[n,k] = e2m1[n,k] * e4m3 scale[n, k/16]. Reference: qwen38_kernels/reference/gemm.py.
//
// Tensors: x [M, K] bf16/fp16 (row stride x_stride); w [N, K/2] uint8 (low nibble = even k);
// scale [N, K/16] e4m3; global fp32 [1]; bias [N] or none; y [M, N] (bf16/fp16/fp32), contiguous.
//
// Weights are the mma B operand (8 weight rows per m16n8k16), activations the A operand (16 rows per
// mma; 17..32 rows use a second A tile against the same B registers). Each thread copies 16 bytes
// (32 k) of one weight row per tile and step and decodes them in registers straight into B
// fragments; nothing is shared between threads. The bytes travel through a per-thread ring in
// shared memory (cp.async, `depth` steps, Nvfp4Params::depth): `depth - 1` steps of weights are in
// flight while one is decoded, without holding registers (a register prefetch deep enough to cover
// the DRAM latency costs the registers, and so the warps, that the latency needs).
//
//   warp step (128 k): thread (g, t) holds W[n + g][k0 + 32t .. k0 + 32t + 31] of each of its NT
//   8-row tiles (16 bytes each). Word q (k0 + 32t + 8q .. +7) decodes into four (i, i+4) pairs
//   (nvfp4::decode_word: two shifts, two logic ops and one multiply per pair on sm_90; the e2m1
//   conversion instruction on sm_120+); mma j = 2q + r takes pairs 2r (b0, k slots 2t, 2t+1) and
//   2r + 1 (b1, slots 2t+8, 2t+9). The activations are loaded once per step for all NT tiles and
//   re-paired the same way (pair_by_four).
//   B = e2m1 * scale * 2^-7 exactly (see PairDecode); the fp32 sums are multiplied back by 2^7.
//
// The dot product is the same sum over k in a fixed permuted order: the permutation, the k split
// across warps (contiguous ranges, KSPLIT warps per block, a function of (N, K) only) and the
// fixed-order sum of the warps' partials in shared memory never depend on M or NT (the 8-row tiles a
// warp walks, a tile-table choice): row invariance, and every NT gives the same bits.
// The fp32 sum of each row is multiplied by the global scale, the bias is added in fp32, one rounding.
// (Exactness note: B carries a factor 2^-7; sums whose magnitude falls below 2^-119 would round
// differently from the unscaled sum - products that small do not occur in practice.)
#pragma once

#include <type_traits>

#include "common/cp_async.cuh"
#include "common/mma.cuh"
#include "common/nvfp4.cuh"
#include "common/pdl.cuh"
#include "common/vec.cuh"
#include "gemm/nvfp4_linear_launch.h"
#include "gemm/skinny_common.cuh"

namespace qwen38::gemm {

// Dynamic shared memory of one block: the per-thread weight ring (depth x NT x 16 bytes per
// thread) and its scale ring (depth x NT x 4 bytes per thread).
__host__ __device__ constexpr size_t nvfp4_ring_bytes(int depth, int nt, int ksplit) {
  return size_t(depth) * nt * 32 * ksplit * (16 + 4);
}

// T: activation type; MT: m16 tiles (1: rows 1..16, 2: rows 17..32); KSPLIT: warps per block (k
// split); NT: 8-row weight tiles per warp.
template <typename T, int MT, int KSPLIT, int NT>
__global__ void __maxnreg__(KSPLIT >= 8 ? 240 : 255) nvfp4_skinny_kernel(const Nvfp4Params p) {
  using D = nvfp4::PairDecode<T>;
  __shared__ float partial[KSPLIT][MT * 16][8];
  extern __shared__ uint4 ring_mem[];  // [depth][NT][threads] uint4, then [depth][NT][threads] u32

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  constexpr int kThreads = 32 * KSPLIT;
  const int depth = p.depth;
  uint4* __restrict__ wring = ring_mem + threadIdx.x;
  uint32_t* __restrict__ sring = reinterpret_cast<uint32_t*>(ring_mem + depth * NT * kThreads) + threadIdx.x;
  const int64_t nb = int64_t(blockIdx.x) * 8 * NT;  // first weight row of the block
  const int64_t steps = (p.k + kStepK - 1) / kStepK;
  const int64_t s_begin = steps * warp / KSPLIT, s_end = steps * (warp + 1) / KSPLIT;
  const int64_t kb = p.k / 2, ks = p.k / 16;  // bytes and scales per weight row
  const int64_t scale_bytes = p.n * ks;
  const T* __restrict__ x = static_cast<const T*>(p.x);

  // Weight bytes and scales of step s for every tile into ring slot `slot` (zero-filled past N or
  // K: they decode to +0). The scale pair (2 bytes) comes with the 4-byte word holding it (the
  // scale tensor is 4-byte aligned; the last word is cut at the tensor's end). Tile nt of step s:
  // weight bytes w0 + nt * 8 * kb + 64 s, scale word s0 + nt * 8 * ks + 8 s (K % 32 == 0: a thread's
  // 32-k chunk is all in or all out).
  const uint8_t* __restrict__ w0 = p.w + (nb + g) * kb + 16 * t;
  const int64_t sb0 = (nb + g) * ks + 2 * t;  // this thread's scale pair, tile 0, step 0
  const int64_t s0 = sb0 & ~int64_t(3);
  const bool high_half = sb0 & 2;             // the same for every tile and step (8 ks, 8 are even)
  const int64_t s_lim = (p.k - 32 * t + kStepK - 1) / kStepK;  // steps whose chunk is inside K
  const int64_t rows_left = p.n - nb - g;
  const int tiles_ok = rows_left <= 0 ? 0 : rows_left >= 8 * NT ? NT : int((rows_left + 7) / 8);
  auto issue = [&](auto span, int64_t s, int slot) {
    const bool k_ok = s < s_lim;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const bool ok = k_ok && nt < tiles_ok;
      const int64_t s4 = s0 + nt * 8 * ks + 8 * s;
      const int idx = (slot * NT + nt) * kThreads;
      cp_async16_span<decltype(span)::value>(wring + idx, ok ? w0 + nt * 8 * kb + 64 * s : p.w, ok ? 16 : 0);
      cp_async4(sring + idx, ok ? p.scale + s4 : p.scale, ok ? int(min(int64_t(4), scale_bytes - s4)) : 0);
    }
  };
  auto issue_step = [&](int64_t s, int slot) {
    if (p.l2span == 256) issue(std::integral_constant<int, 256>{}, s, slot);
    else if (p.l2span == 128) issue(std::integral_constant<int, 128>{}, s, slot);
    else issue(std::integral_constant<int, 0>{}, s, slot);
  };
  // The weights are never written by a kernel of this library, so the first steps go out before
  // pdl_wait(): their latency overlaps the previous kernel's tail (pdl.cuh).
  for (int d = 0; d < depth - 1; ++d) {
    if (s_begin + d < s_end) issue_step(s_begin + d, d);
    cp_async_commit();
  }

  pdl_wait();
  pdl_allow();

  float acc[NT][MT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[nt][mt][i] = 0.0f;

  int slot = 0;
  for (int64_t s = s_begin; s < s_end; ++s) {
    const int64_t kc = s * kStepK + 32 * t;  // this thread's 32 k
    // step s arrived (depth - 2 later steps may still be in flight); read it, then refill the slot
    // read one step ago (its registers are consumed) with step s + depth - 1
    cp_async_wait_dyn(depth - 2);
    uint4 wq[NT];
    uint32_t sc[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int idx = (slot * NT + nt) * kThreads;
      wq[nt] = wring[idx];
      const uint32_t word = sring[idx];
      sc[nt] = high_half ? word >> 16 : word & 0xffffu;
    }
    const int prev = slot == 0 ? depth - 1 : slot - 1;
    if (s + depth - 1 < s_end) issue_step(s + depth - 1, prev);
    cp_async_commit();
    slot = slot + 1 == depth ? 0 : slot + 1;

    // activations: rows g + 8h, h = 0 .. 2*MT-1; 32 consecutive values = 16 registers per row,
    // re-paired (i, i+4) within each 8 to match the weight pairs
    uint32_t xa[2 * MT][16];
    load_activations<T, MT>(xa, x, p.x_stride, g, kc, p.m, p.k);
    pair_by_four<MT>(xa);

#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const __half2 sh = nvfp4::e4m3x2_to_h2(uint16_t(sc[nt]));
      const typename D::T2 s_lo = D::scale(__low2half(sh)), s_hi = D::scale(__high2half(sh));
      const uint32_t wr[4] = {wq[nt].x, wq[nt].y, wq[nt].z, wq[nt].w};
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        uint32_t b[4];
        nvfp4::decode_word<T>(b, wr[q], q < 2 ? s_lo : s_hi);  // words 0, 1: first 16 k; 2, 3: second
#pragma unroll
        for (int r = 0; r < 2; ++r) {
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            uint32_t a[4];
            a_fragment<MT>(a, xa, mt, 2 * q + r);
            mma_16816<T>(acc[nt][mt], a, b[2 * r], b[2 * r + 1]);
          }
        }
      }
    }
  }

  cp_async_wait<0>();  // nothing of the ring outlives the loop (the tail steps issued nothing)

  // ---- per tile: partials of the KSPLIT warps in warp order, x 2^7, global scale, bias, one rounding
  const float gscale = *p.global;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
    reduce_and_store<MT, KSPLIT>(partial, acc[nt], warp, g, t, nvfp4::kPairUnscale, gscale, p.bias, p.bias_dtype,
                                 p.y, p.out, p.m, p.n, nb + 8 * nt);
}

}  // namespace qwen38::gemm
