// The output head's "tiles" kernel (QWEN38_HEAD_KERNEL=tiles, the default): 1..32 rows of x against
// the 16-bit weight on the tensor-core tile machinery of the prefill kernels (prefill_mma.cuh). A CTA
// computes the 32 rows x 128 columns of one column tile: x (32 rows) and the weight tile stream
// through 3 or 4 cp.async stages of 64 k (QWEN38_HEAD_STAGES; head_plan), and the weight stage is itself
// the B operand's 16-bit tile (ldmatrix, no decode); 8 warps of 16 rows x 32 columns, three CTAs an SM on
// the H200 at 3 stages, two at 4.
//
// Order of the sums (a function of K only: row invariance): a logit starts at +0 and takes the mma
// steps of 16 k in increasing k, the products exact and the sum in fp32 inside the tensor core. A
// row never reads another row (rows past M are zero-filled and never stored), and the row tile is
// the same 32 rows for every M <= 32, so a row's bits are those of its 1-row call. Not the bits of
// the "ring" kernel (head_kernel.cuh: K split over warps, another order).
//
// Why: the ring kernel holds the activation fragments of every weight tile in registers, two m16
// tiles at 17..32 rows, and streams 61-65% of the read ceiling there (head.md); here the 32 rows of
// x are staged once per stage for the CTA's 128 columns. benchmarks/lab/head_lab.cu measured this
// structure on the H200 (session 12, head_lab_12.txt): 248320x5120 at 1 / 16 / 32 rows 608.5 / 625.5
// / 639.5 us = 93.7 / 91.7 / 90.2% of the read ceiling (the ring kernel: 583 / 643 / 918 us).
//
// Greedy epilogue (ARGMAX): per row, the best (logit, column) of the CTA's 128 columns by
// head_better (a total order: the winner does not depend on the order of the merges) - in the
// thread, across the quad (shuffles), across the 4 column warps (shared memory) - written to the
// workspace at [column tile][row]; head_argmax_finish reduces the tiles' entries.
#pragma once

#include "common/pdl.cuh"
#include "common/smem.cuh"
#include "common/vec.cuh"
#include "gemm/head_kernel.cuh"  // head_better
#include "gemm/head_launch.h"
#include "gemm/prefill_mma.cuh"

namespace qwen38::gemm {

// The 16-bit weight: the stage is the B operand's tile (x_off layout). Its 128 rows load as four
// 32-row groups of an x tile do (prefill::XLoader, the weight's row stride K).
template <typename T, int S> struct HeadWeight {
  static constexpr int kStages = S;
  static constexpr int kStageBytes = prefill::kBN * prefill::kBK * 2;  // 16 KB
  static constexpr prefill::BFrom kB = prefill::BFrom::kStage;
  static constexpr int kUnroll = 4;
  using Acc = float[1][4][4];
  const prefill::XLoader<4, T> rows;

  __device__ __forceinline__ HeadWeight(const T* w, int64_t n, int64_t k, int64_t n0)
      : rows(w, k, n, k, n0, int(threadIdx.x)) {}
  __device__ __forceinline__ void load(unsigned char* ws, int kt) const { rows.load(ws, kt); }
  __device__ __forceinline__ Acc& sums(Acc& acc, int) { return acc; }
  __device__ __forceinline__ void tile_end(int, int, Acc&) const {}
};

template <typename T, int S> constexpr int head_tiles_smem() { return prefill::smem_bytes<1, HeadWeight<T, S>>(); }
static_assert(head_tiles_smem<__half, 4>() <= 99 * 1024, "the stages fit sm_121a's 99 KB");

// The greedy epilogue of a 32-row tile (head_argmax): each row's best (logit, column) of the tile's
// columns (those below n1) into p.ws_val / p.ws_idx[blockIdx.y]; kColWarps column warps of 32 columns, red_* their
// per-warp winners. Ties go to the lower column (head_better).
template <int kColWarps>
__device__ __forceinline__ void head_tile_argmax(const float (&acc)[1][4][4], const HeadParams& p, int64_t n0,
                                                 int64_t n1, const prefill::Lane& L,
                                                 float (&red_val)[kColWarps][kHeadMaxRows],
                                                 int32_t (&red_idx)[kColWarps][kHeadMaxRows]) {
  float bv[2] = {0.0f, 0.0f};
  int32_t bi[2] = {-1, -1};  // rows wm * 16 + g (+ 8)
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t c = n0 + L.wn * 32 + nt * 8 + 2 * L.t + (i & 1);
      const int h = i >> 1;
      if (c < n1 && head_better(acc[0][nt][i], int32_t(c), bv[h], bi[h])) {
        bv[h] = acc[0][nt][i];
        bi[h] = int32_t(c);
      }
    }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int off = 1; off < 4; off *= 2) {  // the quad of lanes sharing the row
      const float ov = __shfl_xor_sync(0xffffffffu, bv[h], off);
      const int32_t oi = __shfl_xor_sync(0xffffffffu, bi[h], off);
      if (head_better(ov, oi, bv[h], bi[h])) {
        bv[h] = ov;
        bi[h] = oi;
      }
    }
    if (L.t == 0) {
      red_val[L.wn][L.wm * 16 + L.g + 8 * h] = bv[h];
      red_idx[L.wn][L.wm * 16 + L.g + 8 * h] = bi[h];
    }
  }
  __syncthreads();
  if (L.tid < kHeadMaxRows) {
    float v = red_val[0][L.tid];
    int32_t i = red_idx[0][L.tid];
#pragma unroll
    for (int c = 1; c < kColWarps; ++c)
      if (head_better(red_val[c][L.tid], red_idx[c][L.tid], v, i)) {
        v = red_val[c][L.tid];
        i = red_idx[c][L.tid];
      }
    p.ws_val[int64_t(blockIdx.y) * kHeadMaxRows + L.tid] = v;
    p.ws_idx[int64_t(blockIdx.y) * kHeadMaxRows + L.tid] = i;
  }
}

// The fp32 logits of a 32-row tile's columns [n0, n1) (n1 <= V; rows below M), prefill::store's lane
// map at one m16 tile: row wm 16 + g (+ 8), columns n0 + wn 32 + nt 8 + 2 t (+ 1).
__device__ __forceinline__ void head_tile_store(const float (&acc)[1][4][4], const HeadParams& p, int64_t n0,
                                                int64_t n1, const prefill::Lane& L) {
  const bool pairs = (p.v & 1) == 0 && reinterpret_cast<uintptr_t>(p.y) % 8 == 0;
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = L.wm * 16 + L.g + h * 8, col = n0 + L.wn * 32 + nt * 8 + 2 * L.t;
      if (row >= p.m || col >= n1) continue;
      float* at = p.y + row * p.v + col;
      if (pairs && col + 1 < n1) {
        *reinterpret_cast<float2*>(at) = make_float2(acc[0][nt][2 * h], acc[0][nt][2 * h + 1]);
      } else {
        at[0] = acc[0][nt][2 * h];
        if (col + 1 < n1) at[1] = acc[0][nt][2 * h + 1];
      }
    }
}

// S stages (3 or 4: head_plan): 3 x 60 KB or 2 x 80 KB an SM on the H200 (launch bounds to match);
// one CTA an SM on sm_121a either way.
template <typename T, bool ARGMAX, int S>
__global__ void __launch_bounds__(prefill::kThreads, S == 3 ? 3 : 2) head_tiles_kernel(const HeadParams p) {
  QWEN38_DYNAMIC_SMEM(unsigned char, smem, 128);
  __shared__ float red_val[4][kHeadMaxRows];
  __shared__ int32_t red_idx[4][kHeadMaxRows];
  const int64_t n0 = int64_t(blockIdx.y) * prefill::kBN;

  pdl_wait();  // x comes from the previous kernel

  HeadWeight<T, S> w(static_cast<const T*>(p.w), p.v, p.k, n0);
  float acc[1][4][4];
  zero_fill(acc);
  prefill::mainloop<1>(static_cast<const T*>(p.x), p.x_stride, p.m, p.k, int64_t(0), w, smem, acc);
  pdl_allow();  // after the main loop (pdl.cuh: where a grid lets its successor in)
  if constexpr (!ARGMAX) {
    prefill::store<int(Out::kF32)>(acc, p.y, nullptr, 0, p.m, p.v, 0, n0, [](float v) { return v; });
  } else {
    head_tile_argmax<4>(acc, p, n0, p.v, prefill::Lane(), red_val, red_idx);
  }
}

}  // namespace qwen38::gemm

namespace qwen38::gemm {

// ---- narrow column tiles (QWEN38_HEAD_COLS = 64 or 32) ----------------------------------------------
// The same arithmetic on column tiles of BN = 64 or 32 columns: BN / 16 warps (2 row warps x BN / 32
// column warps of 16 rows x 32 columns, prefill::Lane's layout), x's 32 rows and the BN weight rows
// through S cp.async stages of 64 k. A logit's sum is the tiles kernel's (from +0, the mma steps of
// 16 k in increasing k; an mma's output element depends on its own row of A and column of B only), so
// the column tile width changes no bit. Why: the 32768-row draft vocabulary is 256 tiles of 128
// columns, one partial wave of 264 slots whose CTAs end 70.9..81.4 us apart (head_s33_waves.md);
// narrower tiles are more, shorter CTAs, which the block scheduler hands to the SMs that finish first.

template <int BN> constexpr int head_narrow_threads() { return BN * 2; }
template <int BN, int S> constexpr int head_narrow_smem() { return S * (32 + BN) * prefill::kBK * 2; }
// CTAs an SM the launch bounds ask for (registers <= 65536 / (threads x this)): 64 columns 4, 32 columns 8.
template <int BN> constexpr int head_narrow_min_blocks() { return BN == 64 ? 4 : 8; }
static_assert(head_narrow_smem<64, 8>() <= 99 * 1024 && head_narrow_smem<32, 8>() <= 99 * 1024, "sm_121a's 99 KB");

template <typename T, bool ARGMAX, int BN, int S>
__global__ void __launch_bounds__(head_narrow_threads<BN>(), head_narrow_min_blocks<BN>())
    head_narrow_kernel(const HeadParams p) {
  static_assert(BN == 64 || BN == 32, "column tiles of 64 or 32");
  constexpr int kThr = head_narrow_threads<BN>(), kColWarps = BN / 32;
  constexpr int kX = 32 * prefill::kBK * 2, kStage = (32 + BN) * prefill::kBK * 2;
  QWEN38_DYNAMIC_SMEM(unsigned char, smem, 128);
  __shared__ float red_val[kColWarps][kHeadMaxRows];
  __shared__ int32_t red_idx[kColWarps][kHeadMaxRows];
  // The tile's columns [n0, n1): BN from blockIdx.y BN, or (p.balanced) the column groups of 8
  // [i G / T, (i + 1) G / T) of the G = ceil(V / 8) groups, T = gridDim.y tiles (head_plan keeps
  // ceil(G / T) <= BN / 8). A logit's sum does not depend on its tile: same bits either way.
  int64_t n0 = int64_t(blockIdx.y) * BN, n1 = p.v;
  if (p.balanced) {
    const int64_t groups = (p.v + 7) / 8, tiles = gridDim.y;
    n0 = 8 * (int64_t(blockIdx.y) * groups / tiles);
    n1 = 8 * ((int64_t(blockIdx.y) + 1) * groups / tiles);
    n1 = n1 < p.v ? n1 : p.v;
  }

  pdl_wait();  // x comes from the previous kernel

  const prefill::Lane L;
  const prefill::RowLoader<32, kThr, T> xl(static_cast<const T*>(p.x), p.x_stride, p.m, p.k, 0, L.tid);
  const prefill::RowLoader<BN, kThr, T> wl(static_cast<const T*>(p.w), p.k, n1, p.k, n0, L.tid);
  const int nkt = int((p.k + prefill::kBK - 1) / prefill::kBK);
  auto load = [&](int kt) {
    unsigned char* st = smem + (kt % S) * kStage;
    xl.load(st, kt);
    wl.load(st + kX, kt);
  };
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < nkt) load(s);
    cp_async_commit();
  }
  float acc[1][4][4];
  zero_fill(acc);
  const int a_row = L.wm * 16 + ((L.lane >> 3) & 1) * 8 + (L.lane & 7), a_chunk = L.lane >> 4;
  const int b_row = L.wn * 32 + (L.lane >> 4) * 8 + (L.lane & 7), b_chunk = (L.lane >> 3) & 1;
  for (int kt = 0; kt < nkt; ++kt) {
    cp_async_wait<S - 2>();  // tile kt has landed (every group but the newest S - 2)
    __syncthreads();         // ... for every thread; tile kt - 1's buffer is free
    if (kt + S - 1 < nkt) load(kt + S - 1);
    cp_async_commit();
    const unsigned char* xs = smem + (kt % S) * kStage;
#pragma unroll
    for (int k16 = 0; k16 < prefill::kBK / 16; ++k16) {
      uint32_t bf[4][2];
      prefill::tile_b_frags(xs + kX, b_row, b_chunk, k16, bf);
      uint32_t af[4];
      prefill::ldmatrix_x4(af, smem_addr(xs + prefill::x_off(a_row, 2 * k16 + a_chunk)));
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) mma_16816<T>(acc[0][nt], af, bf[nt][0], bf[nt][1]);
    }
  }
  cp_async_wait<0>();
  pdl_allow();  // after the main loop (pdl.cuh)
  if constexpr (!ARGMAX) {
    head_tile_store(acc, p, n0, n1, L);
  } else {
    head_tile_argmax<kColWarps>(acc, p, n0, n1, L, red_val, red_idx);
  }
}

}  // namespace qwen38::gemm
