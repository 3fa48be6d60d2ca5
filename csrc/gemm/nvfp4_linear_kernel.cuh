// nvfp4_linear, skinny path (1..32 rows): y = round(global * sum_k x[m,k] * W[n,k] + bias[n]),
// W[n,k] = e2m1[n,k] * e4m3 scale[n, k/16]. Reference: qwen38_kernels/reference/gemm.py.
//
// Tensors: x [M, K] bf16/fp16 (row stride x_stride); w [N, K/2] uint8 (low nibble = even k);
// scale [N, K/16] e4m3; global fp32 [1]; bias [N] or none; y [M, N] (bf16/fp16/fp32), contiguous.
//
// Weights are the mma B operand (8 weight rows per m16n8k16), activations the A operand (16 rows per
// mma; 17..32 rows use a second A tile against the same B registers). Each thread loads 16 bytes
// (32 k) of one weight row with one vector load and decodes them in registers straight into B
// fragments, nothing through shared memory:
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

#include "common/mma.cuh"
#include "common/nvfp4.cuh"
#include "common/pdl.cuh"
#include "common/vec.cuh"
#include "gemm/nvfp4_linear_launch.h"
#include "gemm/skinny_common.cuh"

namespace qwen38::gemm {

// T: activation type; MT: m16 tiles (1: rows 1..16, 2: rows 17..32); KSPLIT: warps per block (k
// split); NT: 8-row weight tiles per warp.
template <typename T, int MT, int KSPLIT, int NT>
__global__ void __maxnreg__(KSPLIT >= 8 ? 240 : 255) nvfp4_skinny_kernel(const Nvfp4Params p) {
  using D = nvfp4::PairDecode<T>;
  __shared__ float partial[KSPLIT][MT * 16][8];

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t nb = int64_t(blockIdx.x) * 8 * NT;  // first weight row of the block
  const int64_t steps = (p.k + kStepK - 1) / kStepK;
  const int64_t s_begin = steps * warp / KSPLIT, s_end = steps * (warp + 1) / KSPLIT;
  const int64_t kb = p.k / 2, ks = p.k / 16;  // bytes and scales per weight row
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

  // Weight bytes and scales of step s for every tile (zeros past N or K: they decode to +0).
  auto load_w = [&](int64_t s, uint4 (&wq)[NT], uint32_t (&sc)[NT]) {
    const int64_t kc = s * kStepK + 32 * t;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int64_t n = nb + 8 * nt + g;
      wq[nt] = make_uint4(0, 0, 0, 0);
      sc[nt] = 0;
      if (s < s_end && n < p.n && kc < p.k) {  // K % 32 == 0: a 32-k chunk is all in or all out
        wq[nt] = __ldg(reinterpret_cast<const uint4*>(p.w + n * kb + kc / 2));
        sc[nt] = __ldg(reinterpret_cast<const unsigned short*>(p.scale + n * ks + kc / 16));
      }
    }
  };
  // one step ahead: the next step's weights are in flight while this one is decoded and multiplied
  uint4 wq_next[NT];
  uint32_t sc_next[NT];
  load_w(s_begin, wq_next, sc_next);

  for (int64_t s = s_begin; s < s_end; ++s) {
    const int64_t kc = s * kStepK + 32 * t;  // this thread's 32 k
    uint4 wq[NT];
    uint32_t sc[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      wq[nt] = wq_next[nt];
      sc[nt] = sc_next[nt];
    }
    load_w(s + 1, wq_next, sc_next);

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

  // ---- per tile: partials of the KSPLIT warps in warp order, x 2^7, global scale, bias, one rounding
  const float gscale = *p.global;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
    reduce_and_store<MT, KSPLIT>(partial, acc[nt], warp, g, t, nvfp4::kPairUnscale, gscale, p.bias, p.bias_dtype,
                                 p.y, p.out, p.m, p.n, nb + 8 * nt);
}

}  // namespace qwen38::gemm
