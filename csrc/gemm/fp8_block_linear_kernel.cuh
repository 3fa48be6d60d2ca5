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

using nvfp4::e4m3x2_to;  // two e4m3 bytes -> the 16-bit pair for the mma (exact)

// Register cap per thread: 128 where the variant fits in it (16 warps per SM), else 168 or 208 (the
// largest tiles; 255 for 17..32 rows at 4 tiles a warp, which spill at 208); scripts/check_sass.sh
// refuses any spill. (The v2 form, `__maxnreg__(255)`, took 178 registers at nt4: 8 warps per SM,
// 103 us at 1 row on 34816x5120 vs 69 us now.)
template <int MT, int NT>
constexpr int kFp8Regs = MT == 2 && NT == 4 ? 255 : MT == 2 && NT >= 2 ? 208 : MT == 2 || NT == 4 ? 168 : 128;

template <typename T, int MT, int KSPLIT, int NT>
__global__ void __maxnreg__((kFp8Regs<MT, NT>)) fp8_block_skinny_kernel(const Fp8BlockParams p) {
  __shared__ float partial[KSPLIT][MT * 16][8];

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t nb = int64_t(blockIdx.x) * 8 * NT;
  const int k = int(p.k), m = int(p.m);
  const int steps = (k + kStepK - 1) / kStepK;  // = scale columns
  const int s_begin = steps * warp / KSPLIT, s_end = steps * (warp + 1) / KSPLIT;
  const T* __restrict__ x = static_cast<const T*>(p.x);
  // The last 8-row set (rows 8..15 for MT 1, 24..31 for MT 2) holds rows of this call only when
  // m > 8 (MT 1) or m > 24 (MT 2); else it is never loaded and its fragments stay zero (a
  // warp-uniform skip: mma rows are independent, so no other row's bits change).
  const bool last_set = m > 8 * (2 * MT - 1);

  // Pointers at this warp's first step, advanced one step per iteration. Rows past N read row
  // N - 1 (valid memory; their outputs are never stored). A 16-k half past K (K % 128 != 0, the
  // last step) reads the row's last 16 bytes instead: its activations are zeros, and a checkpoint's
  // e4m3 weights are finite, so it adds exact zeros.
  const int kc0 = s_begin * kStepK + 32 * t;
  const uint8_t* wp[NT];
  const float* scp[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int64_t n = min(nb + 8 * nt + g, p.n - 1);
    wp[nt] = p.w + n * p.k + kc0;
    scp[nt] = p.scale + (min(nb + 8 * nt, p.n - 1) / 128) * steps + s_begin;  // the tile's 8 rows share it
  }
  const T* xp[2 * MT];
#pragma unroll
  for (int h = 0; h < 2 * MT; ++h) xp[h] = x + int64_t(g + 8 * h) * p.x_stride + kc0;

  pdl_wait();
  pdl_allow();

  float acc[NT][MT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[nt][mt][i] = 0.0f;

  // weights and scales of step s = (the pointers' step) + i
  auto load_w = [&](int i, int s, uint4 (&wq)[NT][2], float (&sc)[NT]) {
    if ((s + 1) * kStepK > k) {  // warp-uniform: the one partial step
      const int kc = s * kStepK + 32 * t;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int back = max(0, kc + 16 * h + 16 - k);
          wq[nt][h] = __ldg(reinterpret_cast<const uint4*>(wp[nt] + i * kStepK + 16 * h - back));
        }
    } else {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int h = 0; h < 2; ++h) wq[nt][h] = __ldg(reinterpret_cast<const uint4*>(wp[nt] + i * kStepK + 16 * h));
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) sc[nt] = __ldg(scp[nt] + i);
  };

  // A fragments of the step's 8 mmas (natural k order), written in place by the loads (a0 a1 a2 a3
  // in consecutive registers: no moves to assemble them); fragments of rows >= m and of a skipped
  // last set are never written and stay zero.
  uint32_t af[MT][8][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) af[mt][j][i] = 0u;

  auto load_x = [&](int i, int s) {
    const int kc = s * kStepK + 32 * t;
    const bool full = (s + 1) * kStepK <= k;
#pragma unroll
    for (int h = 0; h < 2 * MT; ++h) {
      if (h == 2 * MT - 1 && !last_set) break;
      if (g + 8 * h < m) {
        const uint4* src = reinterpret_cast<const uint4*>(xp[h] + i * kStepK);
        const int mt = h / 2, hi = h % 2;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          uint4 v = make_uint4(0, 0, 0, 0);
          if (full || kc + 8 * q < k) v = src[q];
          // register r (elements 2r, 2r+1) of the row = pair r: fragment j = r / 2, slot hi + 2 (r % 2)
          af[mt][2 * q][hi] = v.x;
          af[mt][2 * q][hi + 2] = v.y;
          af[mt][2 * q + 1][hi] = v.z;
          af[mt][2 * q + 1][hi + 2] = v.w;
        }
      }
    }
  };

  auto compute = [&](const uint4 (&wq)[NT][2], const float (&sc)[NT]) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
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
        for (int mt = 0; mt < MT; ++mt) mma_16816<T>(blk[mt], af[mt][j], b0, b1);
      }
      const float scale = sc[nt];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[nt][mt][i] = __fadd_rn(acc[nt][mt][i], __fmul_rn(blk[mt][i], scale));
    }
  };

  // One step per iteration (a body unrolled by two, with two weight buffers in turn, measured
  // slower on the H200 at 8..32 rows: likely its instruction footprint): the next step's weights
  // are in flight while this one is decoded and multiplied; the pointers then advance one step.
  uint4 wn[NT][2];
  float sn[NT];
  if (s_begin < s_end) load_w(0, s_begin, wn, sn);
  for (int s = s_begin; s < s_end; ++s) {
    uint4 wc[NT][2];
    float scc[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      wc[nt][0] = wn[nt][0];
      wc[nt][1] = wn[nt][1];
      scc[nt] = sn[nt];
    }
    if (s + 1 < s_end) load_w(1, s + 1, wn, sn);
    load_x(0, s);
    compute(wc, scc);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      wp[nt] += kStepK;
      scp[nt] += 1;
    }
#pragma unroll
    for (int h = 0; h < 2 * MT; ++h) xp[h] += kStepK;
  }

  // per tile: partials of the KSPLIT warps in warp order, bias, one rounding (x 1 x 1: exact)
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
    reduce_and_store<MT, KSPLIT>(partial, acc[nt], warp, g, t, 1.0f, 1.0f, p.bias, p.bias_dtype, p.y, p.out, p.m,
                                 p.n, nb + 8 * nt);
}

}  // namespace qwen38::gemm
