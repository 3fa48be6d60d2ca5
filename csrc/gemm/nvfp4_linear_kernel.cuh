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

// Register cap per thread: 128 (16 warps per SM) where the variant fits in it without spilling,
// else 168 or 208 (the largest tiles); checked by scripts/check_sass.sh (no spill allowed).
template <int MT, int NT>
constexpr int kSkinnyRegs = MT == 2 && NT >= 2 ? 208 : MT == 2 || NT == 4 ? 168 : 128;

// T: activation type; MT: m16 tiles (1: rows 1..16, 2: rows 17..32); KSPLIT: warps per block (k
// split); NT: 8-row weight tiles per warp.
template <typename T, int MT, int KSPLIT, int NT>
__global__ void __maxnreg__((kSkinnyRegs<MT, NT>)) nvfp4_skinny_kernel(const Nvfp4Params p) {
  using D = nvfp4::PairDecode<T>;
  __shared__ float partial[KSPLIT][MT * 16][8];

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t nb = int64_t(blockIdx.x) * 8 * NT;  // first weight row of the block
  const int k = int(p.k), m = int(p.m);
  const int steps = (k + kStepK - 1) / kStepK;
  const int s_begin = steps * warp / KSPLIT, s_end = steps * (warp + 1) / KSPLIT;
  const int64_t kb = p.k / 2, ks = p.k / 16;  // bytes and scales per weight row
  const T* __restrict__ x = static_cast<const T*>(p.x);
  // rows of the last 8-row set present (m > 8 for MT 1, m > 24 for MT 2): else it is never loaded
  const bool last_set = m > 8 * (2 * MT - 1);

  // Pointers at this warp's first step, advanced one step per iteration (the next step's loads
  // take an immediate offset). Rows past N read row N - 1 instead (valid
  // memory; their outputs are never stored, and an output only reads its own B column), so no load
  // needs a row predicate.
  const int kc0 = s_begin * kStepK + 32 * t;  // this thread's first k
  const uint8_t* wp[NT];
  const uint8_t* sp[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int64_t n = min(nb + 8 * nt + g, p.n - 1);
    wp[nt] = p.w + n * kb + kc0 / 2;
    sp[nt] = p.scale + n * ks + kc0 / 16;
  }
  // activation rows g + 8h at this warp's first step (rows >= m are never read)
  const T* xp[2 * MT];
#pragma unroll
  for (int h = 0; h < 2 * MT; ++h) xp[h] = x + int64_t(g + 8 * h) * p.x_stride + kc0;
  // the global last step is partial when K % 128 != 0: threads whose 32 k lie past K read their
  // row's last chunk instead (its activations are zeros, so it adds exact zeros: e2m1 values and
  // the scales of a real chunk are finite); `over` = how far (bytes) such a thread steps back
  const bool partial_tail = s_end == steps && k % kStepK != 0;
  const int over = max(0, (steps - 1) * kStepK + 32 * t + 32 - k);

  pdl_wait();
  pdl_allow();

  float acc[NT][MT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[nt][mt][i] = 0.0f;

  // Weights and scales of step s = (the pointers' step) + i.
  auto load_w = [&](int i, int s, uint4 (&wq)[NT], uint32_t (&sc)[NT]) {
    if (partial_tail && s == steps - 1) {  // warp-uniform: the one partial step
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        wq[nt] = __ldg(reinterpret_cast<const uint4*>(wp[nt] + i * (kStepK / 2) - over / 2));
        sc[nt] = __ldg(reinterpret_cast<const unsigned short*>(sp[nt] + i * (kStepK / 16) - over / 16));
      }
    } else {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        wq[nt] = __ldg(reinterpret_cast<const uint4*>(wp[nt] + i * (kStepK / 2)));
        sc[nt] = __ldg(reinterpret_cast<const unsigned short*>(sp[nt] + i * (kStepK / 16)));
      }
    }
  };

  // Activations: af = the A fragments of the step's 8 mmas (a0 a1 a2 a3 in consecutive registers:
  // no moves): the values of each row re-paired (i, i+4) within each 8 to match the weight pairs.
  // Fragments of rows >= m, or of a skipped last set, are never written: they stay zero.
  uint32_t af[MT][8][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) af[mt][j][i] = 0u;

  auto load_x = [&](int i, int s) {
    const int kc = s * kStepK + 32 * t;
    const bool full = (s + 1) * kStepK <= k;  // warp-uniform: no piece of this step is past K
#pragma unroll
    for (int h = 0; h < 2 * MT; ++h) {
      if (h == 2 * MT - 1 && !last_set) break;
      if (g + 8 * h < m) {
        const uint4* src = reinterpret_cast<const uint4*>(xp[h] + i * kStepK);
        uint32_t xr[16];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          uint4 v = make_uint4(0, 0, 0, 0);
          if (full || kc + 8 * q < k) v = src[q];
          xr[4 * q + 0] = v.x;
          xr[4 * q + 1] = v.y;
          xr[4 * q + 2] = v.z;
          xr[4 * q + 3] = v.w;
        }
        // registers (x0,x1) (x2,x3) (x4,x5) (x6,x7) of each 8 -> pairs (x0,x4) (x1,x5) (x2,x6)
        // (x3,x7); pair 2j + u of the row goes to slot (row half) + 2u of fragment j (mma.cuh)
        const int mt = h / 2, hi = h % 2;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const uint32_t r0 = xr[4 * q], r1 = xr[4 * q + 1], r2 = xr[4 * q + 2], r3 = xr[4 * q + 3];
          af[mt][2 * q][hi] = __byte_perm(r0, r2, 0x5410);
          af[mt][2 * q][hi + 2] = __byte_perm(r0, r2, 0x7632);
          af[mt][2 * q + 1][hi] = __byte_perm(r1, r3, 0x5410);
          af[mt][2 * q + 1][hi + 2] = __byte_perm(r1, r3, 0x7632);
        }
      }
    }
  };

  // One step: word q of a tile decodes into four (i, i+4) pairs; mma j = 2q + r takes pairs 2r
  // (b0) and 2r + 1 (b1). Per accumulator the mmas come in increasing j.
  auto compute = [&](const uint4 (&wq)[NT], const uint32_t (&sc)[NT]) {
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
          for (int mt = 0; mt < MT; ++mt) mma_16816<T>(acc[nt][mt], af[mt][2 * q + r], b[2 * r], b[2 * r + 1]);
        }
      }
    }
  };

  // One step per iteration (a body unrolled by two, with two weight buffers in turn, measured
  // slower on the H200 at 8..32 rows: likely its instruction footprint): the next step's weights
  // are in flight while this one is decoded and multiplied; the pointers then advance one step.
  uint4 wn[NT];
  uint32_t sn[NT];
  if (s_begin < s_end) load_w(0, s_begin, wn, sn);
  for (int s = s_begin; s < s_end; ++s) {
    uint4 wc[NT];
    uint32_t scc[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      wc[nt] = wn[nt];
      scc[nt] = sn[nt];
    }
    if (s + 1 < s_end) load_w(1, s + 1, wn, sn);
    load_x(0, s);
    compute(wc, scc);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      wp[nt] += kStepK / 2;
      sp[nt] += kStepK / 16;
    }
#pragma unroll
    for (int h = 0; h < 2 * MT; ++h) xp[h] += kStepK;
  }

  // ---- per tile: partials of the KSPLIT warps in warp order, x 2^7, global scale, bias, one rounding
  const float gscale = *p.global;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
    reduce_and_store<MT, KSPLIT>(partial, acc[nt], warp, g, t, nvfp4::kPairUnscale, gscale, p.bias, p.bias_dtype,
                                 p.y, p.out, p.m, p.n, nb + 8 * nt);
}

}  // namespace qwen38::gemm
