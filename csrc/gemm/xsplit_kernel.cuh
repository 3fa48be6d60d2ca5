// nvfp4_linear and fp8_block_linear, 1..32 rows, the k-split-across-CTAs form of the register-stream kernels for
// the large weights: the arithmetic of nvfp4_stream_kernel.cuh / fp8_stream_kernel.cuh at k split KS (read them
// first), with the roles of a CTA's warps turned around. In the stream kernel the KS warps of a CTA are the k
// split of one tile group, so every CTA reads all M x K of x for its 8 NT weight rows: 34816x5120 at 32 rows
// moves ~357 MB of x through L2 for ~100 MB of weights. Here a cluster of KS CTAs holds the k split: CTA r of a
// cluster runs k range r (the stream kernel's warp r: steps [r S / KS, (r+1) S / KS)) for `groups` tile groups,
// one warp each, and its warps share one copy of x's k range in shared memory (a ring of kStages steps, copied
// by cp.async, one commit group a step), so x crosses L2 once a cluster: groups times fewer bytes.
// Where it pays (xsplit_kernel.cu xsplit_rule; sessions 45 / 46's lab, benchmarks/lab/xsplit_lab.cu and
// benchmarks/results/h100/xsplit_s45.md, h100/ and h200/xsplit_s46.md, xsplit_s47.md): FP8 5120x17408 at 17..32
// rows, NVFP4 10240x5120 at 1..8 rows, NVFP4 5120x6144 at 1..16 and 25..32 rows; not the K 5120 weights at 17..32
// rows, where the stream kernel reading x in the fragment order is faster.
//
// The same bits: every warp computes its tile group's partial over its k range exactly as the stream kernel's
// warp r does (word q outer, tiles inner, the same mmas from zero; only where the activations come from
// differs), and the partials of tile i of the cluster go to CTA i % KS by st.async, which sums them in k-range
// order 0..KS-1 through store_one, as reduce_and_store does (the xshare kernel's exchange,
// nvfp4_xshare_kernel.cuh).
//
// Shared memory: kStages stages of 16 MT rows x 18 chunks of 16 bytes (a step's 16 chunks, chunk j at j + j / 8,
// rows 18 = 2 mod 8 chunks apart: a quarter-warp's reads fall in 8 distinct 16-byte bank groups), rows at or
// past M zero (written once: the copies never touch them); then the partials (ceil(groups NT / KS) x KS x
// MT*16 x 8 floats) and their mbarrier.
#pragma once

#include <type_traits>

#include "common/cluster.cuh"
#include "common/cp_async.cuh"
#include "common/mma.cuh"
#include "common/nvfp4.cuh"
#include "common/pdl.cuh"
#include "common/tma.cuh"
#include "gemm/fp8_block_linear_kernel.cuh"  // Fp8BlockParams
#include "gemm/fp8_stream_kernel.cuh"        // fp8_word_mmas
#include "gemm/nvfp4_linear_launch.h"
#include "gemm/skinny_common.cuh"
#include "gemm/stream_common.cuh"

namespace qwen38::gemm {

constexpr int kXsplitStepC = 18;  // 16-byte chunks of a staged row of one step (16 + 2 pads)

// dynamic shared memory of a CTA: the x stages, the partials, their mbarrier (16 bytes)
__host__ __device__ constexpr size_t xsplit_smem_bytes(int ks, int mt, int stages, int groups, int nt) {
  const int slots = (groups * nt + ks - 1) / ks;
  return size_t(stages) * 16 * mt * kXsplitStepC * 16 + size_t(slots) * ks * mt * 16 * 8 * 4 + 16;
}

#ifndef QWEN38_XSPLIT_MIN_BLOCKS
#define QWEN38_XSPLIT_MIN_BLOCKS 1
#endif

namespace xsplit {

// A CTA's place: its k range (= cluster rank), tile group (= warp), lane (g, t), the cluster's tiles, the
// partial buffer and its mbarrier (initialized, expecting every k range's partials of this CTA's tiles), and
// the first weight row of the warp's tile group. The caller arrived on the cluster barrier (relaxed).
template <int KS, int NT, int MT, int kStages>
struct Place {
  static constexpr int kRows = 16 * MT, kStageC = kRows * kXsplitStepC, kTile = MT * 16 * 8;
  int rank, tg, g, t, tiles, mine;
  int64_t cl, nb;
  float* buf;
  uint64_t* barp;
  __device__ __forceinline__ explicit Place(uint4* smem) {
    const int lane = threadIdx.x % 32, groups = blockDim.x / 32;
    tg = threadIdx.x / 32;
    g = lane / 4;
    t = lane % 4;
    rank = cluster_pos().rank;
    tiles = groups * NT;
    mine = (tiles + KS - 1 - rank) / KS;
    buf = reinterpret_cast<float*>(smem + kStages * kStageC);
    barp = reinterpret_cast<uint64_t*>(buf + (tiles + KS - 1) / KS * KS * kTile);
    if (threadIdx.x == 0) {
      tma::mbar_init(smem_addr(barp), 1);
      tma::mbar_init_fence();
      tma::mbar_expect(smem_addr(barp), uint32_t(mine) * KS * kTile * 4);
    }
    cluster_arrive_relaxed();  // waited for before the partials go into another CTA's memory
    cl = blockIdx.x / KS;
    nb = (cl * groups + tg) * 8 * NT;
  }
};

// The x ring: rows at or past M zeroed in every stage (before pdl_wait: x is not read), then steps copied in.
template <int MT, int kStages>
__device__ __forceinline__ void zero_rows(uint4* smem, int rows) {
  constexpr int kRows = 16 * MT, kStageC = kRows * kXsplitStepC;
  for (int c = rows * kXsplitStepC + threadIdx.x; c < kRows * kXsplitStepC; c += blockDim.x)
#pragma unroll
    for (int st = 0; st < kStages; ++st) smem[st * kStageC + c] = make_uint4(0, 0, 0, 0);
}
// step s (< steps) of x0's k range (x0: the range's first element of row 0) into stage s % kStages; one commit
// group whether or not a step was copied (the waits count groups)
template <int MT, int kStages, typename T>
__device__ __forceinline__ void stage_in(uint4* smem, const T* x0, int64_t xs, int rows, int s, int steps) {
  constexpr int kStageC = 16 * MT * kXsplitStepC;
  if (s < steps) {
    uint4* dst = smem + (s % kStages) * kStageC;
    for (int c = threadIdx.x; c < rows * 16; c += blockDim.x) {
      const int r = c / 16, j = c % 16;
      cp_async16(dst + r * kXsplitStepC + j + j / 8, x0 + r * xs + kStepK * s + 8 * j, 16);
    }
  }
  cp_async_commit();
}
// After pdl_wait: the first kStages - 1 steps of x0's k range into the ring, and this lane's address of its
// chunk of row g + 8h in stage 0 (4t + t/2; x_words adds the stage and word q).
template <int MT, int kStages, int kH, typename T>
__device__ __forceinline__ void ring_start(uint32_t (&xa)[kH], uint4* smem, const T* x0, int64_t xs, int rows,
                                           int steps, int g, int t) {
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) stage_in<MT, kStages>(smem, x0, xs, rows, s, steps);
#pragma unroll
  for (int h = 0; h < kH; ++h) xa[h] = smem_addr(smem + (g + 8 * h) * kXsplitStepC + 4 * t + t / 2);
}
// word q of step s's rows g + 8h (xa: this lane's addresses in stage 0)
template <int kH, int MT, int kStages>
__device__ __forceinline__ void x_words(uint4 (&xc)[kH], const uint32_t (&xa)[kH], int s, int q) {
  constexpr int kStageC = 16 * MT * kXsplitStepC;
  const uint32_t so = 16u * uint32_t((s % kStages) * kStageC + q);
#pragma unroll
  for (int h = 0; h < kH; ++h)
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(xc[h].x), "=r"(xc[h].y), "=r"(xc[h].z), "=r"(xc[h].w)
                 : "r"(xa[h] + so));
}

// The partials: tile i = tg NT + nt of the cluster's tiles goes to CTA i % KS, slot i / KS (st.async on that
// CTA's mbarrier); then this CTA's tiles summed in k-range order through store_one and stored.
template <int KS, int NT, int MT, int kStages, typename P>
__device__ __forceinline__ void exchange_and_store(const Place<KS, NT, MT, kStages>& pl, const float (&acc)[NT][MT][4],
                                                   float unscale, float gscale, const P& p) {
  constexpr int kTile = MT * 16 * 8;
  cluster_wait();  // every CTA of the cluster runs (and its mbarrier is initialized)
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int i = pl.tg * NT + nt;
    const uint32_t base = cluster_map(pl.buf, i % KS);
    const uint32_t rbar = cluster_map(pl.barp, i % KS);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const uint32_t at = base + 4u * uint32_t(((i / KS) * KS + pl.rank) * kTile + (mt * 16 + pl.g) * 8 + 2 * pl.t);
      cluster_store_async(at, acc[nt][mt][0], acc[nt][mt][1], rbar);
      cluster_store_async(at + 4 * 64, acc[nt][mt][2], acc[nt][mt][3], rbar);  // row g + 8
    }
  }
  if (pl.mine > 0) cluster_mbar_wait(smem_addr(pl.barp), 0);
  const int64_t nc = pl.cl * pl.tiles * 8;  // the cluster's first output column
  for (int idx = threadIdx.x; idx < pl.mine * kTile; idx += blockDim.x) {
    const int sl = idx / kTile, r = idx % kTile / 8, c = idx % 8;
    const int64_t nn = nc + 8 * (sl * KS + pl.rank) + c;
    if (r >= p.m || nn >= p.n) continue;
    const float* pp = pl.buf + sl * KS * kTile + r * 8 + c;
    store_one<KS>([&](int w) { return pp[w * kTile]; }, unscale, gscale, p.bias, p.bias_dtype, p.y, p.out, r, p.n,
                  nn);
  }
  // no CTA leaves while a partial it sent may be in flight: each arrives once its own have landed
  cluster_arrive_relaxed();
  cluster_wait();
}

}  // namespace xsplit

// T: activation type; K: weight row length; KS: k split = CTAs of a cluster; NT: 8-row tiles a warp; MT: m16
// tiles (1: rows 1..16, 2: 17..32); kStages: x stages in the ring; kD: weight steps in registers ahead.
// blockDim.x = 32 x groups (tile groups of a CTA).
// kXRegs (a lab form, benchmarks/lab/xsplit_lab.cu): x read by every warp from global memory one word ahead, as
// the stream kernel reads it (no staging, no barrier a step; the stages' shared memory is left unused), to tell
// the warps' new roles (the k split across the cluster) from the staging at 1..8 rows.
template <typename T, int K, int KS, int NT, int MT, int kStages, int kD, bool kXRegs = false>
__global__ void __launch_bounds__(128, QWEN38_XSPLIT_MIN_BLOCKS) nvfp4_xsplit_kernel(const Nvfp4Params p) {
  using D = nvfp4::PairDecode<T>;
  constexpr int kSW = K / kStepK / KS;  // steps of a warp (of a CTA)
  constexpr int kRowB = K / 2, kRowS = K / 16;
  constexpr int kH = 2 * MT;
  static_assert(K % (kStepK * KS) == 0 && kSW >= kD && kSW >= kStages - 1, "unserved K / k split");
  extern __shared__ uint4 xs_mem[];
  const xsplit::Place<KS, NT, MT, kStages> pl(xs_mem);
  const int g = pl.g, t = pl.t, s0 = pl.rank * kSW;
  const uint8_t* __restrict__ wp = p.w + (pl.nb + g) * kRowB + 64 * s0 + 16 * t;
  const uint8_t* __restrict__ sp = p.scale + (pl.nb + g) * kRowS + 8 * s0 + 2 * t;

  uint4 wb[kD][NT];
  uint32_t sb[kD][NT];
  stream::nvfp4_load_steps(wb, sb, wp, sp, kRowB, kRowS);
  const int rows = p.m < 16 * MT ? int(p.m) : 16 * MT;
  if constexpr (!kXRegs) xsplit::zero_rows<MT, kStages>(xs_mem, rows);
  pdl_wait();
  pdl_allow();

  const T* __restrict__ x0 = static_cast<const T*>(p.x) + int64_t(kStepK) * s0;
  uint32_t xa[kH];
  if constexpr (!kXRegs) xsplit::ring_start<MT, kStages>(xa, xs_mem, x0, p.x_stride, rows, kSW, g, t);
  const T* xr[kH];  // (kXRegs) the rows' pointers at this thread's first k, as the stream kernel's
  stream::activation_rows(xr, p.x, p.m, p.x_stride, g, kStepK * s0 + 32 * t);
  stream::XWords<false, kH> xw;

  float acc[NT][MT][4];
  stream::zero_fill(acc);
  for (int s = 0; s < kSW; s += kD) {
#pragma unroll
    for (int d = 0; d < kD; ++d) {
      if (kSW % kD != 0 && s + d >= kSW) break;
      const int ss = s + d;
      uint4 wq[NT];
      uint32_t sc[NT];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        wq[nt] = wb[d][nt];
        sc[nt] = sb[d][nt];
      }
      if (ss + kD < kSW) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          wb[d][nt] = stream::load_w(wp + nt * 8 * kRowB + 64 * (ss + kD));
          sb[d][nt] = stream::load_scale2(sp + nt * 8 * kRowS + 8 * (ss + kD));
        }
      }
      if constexpr (!kXRegs) {
        cp_async_wait<kStages - 2>();  // step ss's group is in (this thread's copies)
        __syncthreads();               // everyone's; and every warp is done with step ss - 1's stage
        xsplit::stage_in<MT, kStages>(xs_mem, x0, p.x_stride, rows, ss + kStages - 1, kSW);  // into that stage
      } else {
        stream::x_step(xw, xr, ss);
      }
      typename D::T2 s2[NT][2];
      stream::nvfp4_scales<T, NT>(s2, sc);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        uint4 xc[kH];
        if constexpr (kXRegs) stream::x_word(xc, xw, xr, ss, q);
        else xsplit::x_words<kH, MT, kStages>(xc, xa, ss, q);
        uint32_t af[MT][2][4];
        stream::nvfp4_a_fragments<MT>(af, xc);
        stream::nvfp4_word_mmas<T, NT, MT>(acc, af, wq, s2, q);
      }
    }
  }
  xsplit::exchange_and_store(pl, acc, nvfp4::kPairUnscale, *p.global, p);
}

// The FP8 form (fp8_stream_kernel.cuh fp8_stream_xa's step: per tile and step the 8 mmas sum the 128-k block
// from zero, then acc = acc + fp32(S_b x scale)), T: activation type, the rest as above.
template <typename T, int K, int KS, int NT, int MT, int kStages, int kD>
__global__ void __launch_bounds__(128, QWEN38_XSPLIT_MIN_BLOCKS) fp8_xsplit_kernel(const Fp8BlockParams p) {
  constexpr int kSteps = K / kStepK, kSW = kSteps / KS;
  constexpr int kH = 2 * MT;
  static_assert(K % (kStepK * KS) == 0 && kSW >= kD && kSW >= kStages - 1, "unserved K / k split");
  extern __shared__ uint4 xs_mem[];
  const xsplit::Place<KS, NT, MT, kStages> pl(xs_mem);
  const int g = pl.g, t = pl.t, s0 = pl.rank * kSW;
  const uint8_t* __restrict__ wp = p.w + (pl.nb + g) * K + kStepK * s0 + 32 * t;
  const float* scp[NT];  // the tile's scale row (its 8 rows share one: 128 % 8 == 0)
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) scp[nt] = p.scale + ((pl.nb + 8 * nt) / 128) * kSteps + s0;

  uint4 wb[kD][NT][2];
  float sb[kD][NT];
#pragma unroll
  for (int d = 0; d < kD; ++d)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      wb[d][nt][0] = stream::load_w(wp + nt * 8 * K + kStepK * d);
      wb[d][nt][1] = stream::load_w(wp + nt * 8 * K + kStepK * d + 16);
      sb[d][nt] = __ldg(scp[nt] + d);
    }
  const int rows = p.m < 16 * MT ? int(p.m) : 16 * MT;
  xsplit::zero_rows<MT, kStages>(xs_mem, rows);
  pdl_wait();
  pdl_allow();

  const T* __restrict__ x0 = static_cast<const T*>(p.x) + int64_t(kStepK) * s0;
  uint32_t xa[kH];
  xsplit::ring_start<MT, kStages>(xa, xs_mem, x0, p.x_stride, rows, kSW, g, t);

  float acc[NT][MT][4];
  stream::zero_fill(acc);
  for (int s = 0; s < kSW; s += kD) {
#pragma unroll
    for (int d = 0; d < kD; ++d) {
      if (kSW % kD != 0 && s + d >= kSW) break;
      const int ss = s + d;
      uint4 wq[NT][2];
      float sc[NT];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        wq[nt][0] = wb[d][nt][0];
        wq[nt][1] = wb[d][nt][1];
        sc[nt] = sb[d][nt];
      }
      if (ss + kD < kSW) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          wb[d][nt][0] = stream::load_w(wp + nt * 8 * K + kStepK * (ss + kD));
          wb[d][nt][1] = stream::load_w(wp + nt * 8 * K + kStepK * (ss + kD) + 16);
          sb[d][nt] = __ldg(scp[nt] + ss + kD);
        }
      }
      cp_async_wait<kStages - 2>();
      __syncthreads();
      xsplit::stage_in<MT, kStages>(xs_mem, x0, p.x_stride, rows, ss + kStages - 1, kSW);
      float blk[NT][MT][4];
      stream::zero_fill(blk);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        uint4 xc[kH];
        xsplit::x_words<kH, MT, kStages>(xc, xa, ss, q);
        uint32_t af[MT][2][4];
        stream::a_fragments<MT, false>(af, xc);
        fp8_word_mmas<T, NT, MT>(blk, af, wq, q);
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int i = 0; i < 4; ++i)
            acc[nt][mt][i] = __fadd_rn(acc[nt][mt][i], __fmul_rn(blk[nt][mt][i], sc[nt]));
    }
  }
  xsplit::exchange_and_store(pl, acc, 1.0f, 1.0f, p);
}

}  // namespace qwen38::gemm
