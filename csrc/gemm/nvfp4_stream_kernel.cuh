// nvfp4_linear, 1..32 rows, the register-stream kernel (v8): the same arithmetic, k split and k
// permutation as the ring kernel (nvfp4_linear_kernel.cuh; read its header first), so it writes the
// same bits, but each thread's weight bytes go from global memory straight into registers (one
// 16-byte load per tile and step, `kDepth` steps ahead), nothing through shared memory, and K is a
// compile-time constant: every tile, scale and activation offset is an immediate of the load, the
// step loop has no k predicates and no ring bookkeeping (~415 instructions per warp step of 4096
// weights against ~840 for the ring kernel, sm_90a SASS).
//
// Served: K in {5120, 6144, 17408} (the model's), N a multiple of 8 NT, a compiled k split; 1..16
// rows (MT 1, the table's NT) and 17..32 rows (MT 2: a second m16 tile against the same B
// registers, the table's wide NT); other shapes take the ring kernel (which computes the same bits,
// so no switch between the two ever changes a row). Three bodies: nvfp4_stream_xa (the activations as
// the mma A operand, as the ring kernel) and, at 2 and 4 tiles a warp, nvfp4_stream_t (the weights
// as A, compiled per group count of 8 rows of x; below), and at K 5120, k split 4 and 4 tiles a warp
// nvfp4_stream_ts (the transposed body with its weights staged through a per-thread cp.async ring:
// half the registers, for grids whose waves that decides; below), the same bits. Rows at or past M
// read a static zero row instead of predicated loads.
//
//   step s of warp w (the contiguous steps [w S / KS, (w+1) S / KS) as the ring kernel): thread
//   (g, t) loads W[n + g][128 s + 32 t .. + 31] of each of its NT tiles (16 bytes) and the tile
//   row's two e4m3 scales of those 32 k (2 bytes); the loads of step s + kDepth replace them as
//   soon as they are copied out (the copies cost no instruction: the decode reads them in place).
//   Activations: rows g and g + 8, 8 values each per word q (one 16-byte load per row, one word
//   ahead), re-paired (i, i+4) by PRMTs written straight into the A fragments of mmas 2q and 2q+1,
//   which every tile then uses (word outer, tiles inner: the same mma order per tile as the ring
//   kernel, so the same sums).
//   1 tile a warp (NT 1: K 5120 at k split 8, the model's 48- to 1024-row weights, whose warps
//   hold 5 steps each): all of a warp's steps load at once, and the activations go a whole step
//   ahead (word q of step s + 1 loads as word q of step s is copied out), so a warp waits for
//   about one memory latency a step instead of one a word (H200, 48x5120: 3.55 / 7.62 us at 1 / 32
//   rows against 4.34 / 7.87 one word ahead; benchmarks/results/h200/cluster_ab_14_*.md).
//
// Cluster form (k split 8, stream_common.cuh kStreamClusters): launched in clusters of C CTAs a
// tile (stream_launch.cuh, QWEN38_SKINNY_CLUSTER), CTA r of a cluster runs warps r KS/C ..
// (r+1) KS/C - 1 of the tile, and the partials are summed in the first CTA's shared memory in the
// same warp order (skinny_common.cuh reduce_and_store_cluster): the same bits.
#pragma once

#include <type_traits>

#include "common/cp_async.cuh"
#include "common/mma.cuh"
#include "common/nvfp4.cuh"
#include "common/pdl.cuh"
#include "gemm/nvfp4_linear_launch.h"
#include "gemm/skinny_common.cuh"
#include "gemm/stream_common.cuh"

namespace qwen38::gemm {

constexpr int kStreamDepth = 2;  // steps of weights in registers ahead of their use (lab: 2 best)

// 17..32 rows at k split 4 (the table's choice for the K = 5120 weights of 6144 rows and more):
// on sm_90a held to 3 blocks an SM (168 registers; the compiler's choice, 172, leaves 2), with the
// weights 2 steps ahead in bf16 and 1 in fp16 (whose decode spills 16 bytes at 2 under the cap).
// The launcher then takes 2 or 3 blocks an SM by the grid's waves (stream_launch.cuh kWaveFit).
// H200 (benchmarks/lab/stream_waves_lab.cu, bf16, us at 17 / 32 rows): 34816x5120 79.4 / 89.2 at 2
// blocks, 65.9 / 75.9 at 3; 12288x5120 33.6 / 37.1 -> 23.7 / 27.0; 17408x5120 48.5 / 54.3 -> 43.8 /
// 50.9; 16384x5120 34.8 / 38.2 at 2, 43.7 / 50.6 at 3 (512 blocks: two waves either way). The
// hardware-decode build (sm_121a) keeps the compiler's choice. (QWEN38_NVFP4_WIDE4_BLOCKS and
// QWEN38_NVFP4_WIDE4_DEPTH override both for the lab; no bit changes.)
#ifndef QWEN38_NVFP4_WIDE4_BLOCKS
#define QWEN38_NVFP4_WIDE4_BLOCKS 3
#endif
#ifndef QWEN38_NVFP4_WIDE4_DEPTH
#define QWEN38_NVFP4_WIDE4_DEPTH 0  // 0: by the activation type, as above
#endif
// 17..32 rows at k split 8 and 4 tiles a warp (the table's choice for the 5120-row weights,
// 5120x17408 and 5120x6144: 160 tiles): budgeted for 384 threads, i.e. held to 168 registers (the
// compiler's choice, 196, leaves one 256-thread block an SM: 160 blocks, two waves), with the
// weights 1 step ahead (at 2, bf16 spills 36 bytes under the cap). Launched as clusters of 2
// 128-thread CTAs a tile (stream_launch.cuh cluster_of, auto), 3 CTAs an SM: one wave. H200
// (benchmarks/lab/stream_waves_lab.cu --wide8, bf16, us at 17 / 32 rows): 5120x17408 52.9 / 58.8
// -> 40.6 / 47.0, 5120x6144 23.8 / 26.1 -> 20.9 / 23.3. (At 2 tiles a warp, 1024x5120, the same
// budget was 5% slower: not applied.) QWEN38_NVFP4_WIDE8_THREADS overrides it for the lab (256:
// the compiler's choice); no bit changes.
#ifndef QWEN38_NVFP4_WIDE8_THREADS
#define QWEN38_NVFP4_WIDE8_THREADS 384
#endif
#ifdef QWEN38_HW_E2M1
#define QWEN38_NVFP4_STREAM_MIN_BLOCKS(KSPLIT, NT, MT) QWEN38_STREAM_MIN_BLOCKS(KSPLIT, NT, MT)
#define QWEN38_NVFP4_STREAM_THREADS(KSPLIT, NT, MT) (32 * (KSPLIT))
#else
#define QWEN38_NVFP4_STREAM_MIN_BLOCKS(KSPLIT, NT, MT) \
  ((KSPLIT) == 4 && (MT) == 2 ? QWEN38_NVFP4_WIDE4_BLOCKS : QWEN38_STREAM_MIN_BLOCKS(KSPLIT, NT, MT))
#define QWEN38_NVFP4_STREAM_THREADS(KSPLIT, NT, MT) \
  ((KSPLIT) == 8 && (NT) == 4 && (MT) == 2 ? QWEN38_NVFP4_WIDE8_THREADS : 32 * (KSPLIT))
#endif
constexpr int stream_depth_wide8() {
#ifdef QWEN38_HW_E2M1
  return kStreamDepth;
#else
  return QWEN38_NVFP4_WIDE8_THREADS > 256 ? 1 : kStreamDepth;
#endif
}
template <typename T>
constexpr int stream_depth_wide4() {
#ifdef QWEN38_HW_E2M1
  return kStreamDepth;
#else
  return QWEN38_NVFP4_WIDE4_DEPTH > 0 ? QWEN38_NVFP4_WIDE4_DEPTH : std::is_same_v<T, __half> ? 1 : 2;
#endif
}

// T: activation type; K: the weight row length; KSPLIT: warps per block (k split, the table's);
// NT: 8-row tiles per warp; MT: m16 tiles (1: rows 1..16, 2: rows 17..32 against the same B
// registers, like the ring kernel's MT 2: each row's sums are the same). kFrag: p.x is x in the
// fragment order of 2 MT groups, layout kXfragPairedA (stream_common.cuh activation_frag; NT > 1).
// kDepth > 0 (a lab's, benchmarks/lab/xsplit_lab.cu --depth): that many steps ahead instead of the rule below.
template <typename T, int K, int KSPLIT, int NT, int MT, bool kFrag = false, int kDepth = 0>
__device__ __forceinline__ void nvfp4_stream_xa(const Nvfp4Params& p) {
  using D = nvfp4::PairDecode<T>;
  constexpr int kSteps = K / kStepK, kSW = kSteps / KSPLIT;  // steps per warp
  constexpr int kRowB = K / 2, kRowS = K / 16;                // weight / scale bytes per row
  // 1 tile a warp (the model's small weights: a warp's whole k range is a few steps): every step's
  // weights in flight from the start, and the activations a whole step (4 words) ahead
  constexpr int kD = kDepth > 0                  ? kDepth
                     : NT == 1                     ? (kSW < kStreamDepth1 ? kSW : kStreamDepth1)
                     : KSPLIT == 4 && MT == 2 ? stream_depth_wide4<T>()
                     : KSPLIT == 8 && NT == 4 && MT == 2 ? stream_depth_wide8()
                                              : kStreamDepth;
  constexpr bool kXStep = NT == 1;
  static_assert(K % (kStepK * KSPLIT) == 0 && kSW >= kD && K <= kStreamMaxK, "unserved K / k split");
  static_assert(!kFrag || !kXStep, "the fragment order serves the one-word-ahead schedule");
  __shared__ float partial[KSPLIT][MT * 16][8];

  // a cluster launch (stream_launch.cuh) spreads the KSPLIT warps of a tile over its CTAs
  constexpr bool kCl = kStreamClusters<K, KSPLIT>;
  const stream::StreamThread th = stream::stream_begin<kCl>(8 * NT, kSW);  // (a cluster launch arrives on its barrier)
  const int g = th.g, t = th.t, s0 = th.s0;
  const int64_t nb = th.nb;
  const uint8_t* __restrict__ wp = p.w + (nb + g) * kRowB + 64 * s0 + 16 * t;
  const uint8_t* __restrict__ sp = p.scale + (nb + g) * kRowS + 8 * s0 + 2 * t;
  constexpr int kH = 2 * MT;  // 8-row halves of the A tiles: rows g + 8h
  const T* xr[kH];
  if constexpr (kFrag) stream::activation_frag(xr, p.x, s0, 4 * g + t);
  else stream::activation_rows(xr, p.x, p.m, p.x_stride, g, 128 * s0 + 32 * t);

  // weights are never written by a kernel of this library: the first steps go out before
  // pdl_wait() (pdl.cuh)
  uint4 wb[kD][NT];
  uint32_t sb[kD][NT];
  stream::nvfp4_load_steps(wb, sb, wp, sp, kRowB, kRowS);
  pdl_wait();
  pdl_allow();

  float acc[NT][MT][4];
  stream::zero_fill(acc);
  stream::XWords<kXStep, kH, kFrag ? kH : 0> xw;  // the activations in flight (stream_common.cuh)
  stream::x_first(xw, xr);
  // kAdvance: the weight, scale and x pointers advance once per kD steps (every offset in the loop
  // an immediate: 34816x5120 at 32 rows, ~40 of ~1035 instructions an iteration were addresses);
  // not in the blocks held to 128 registers (k split 8, 4 tiles, 1..16 rows: they spilled 16-24
  // bytes so), which keep indexing from the warp's first step
  constexpr bool kAdvance =
      65536 / (QWEN38_NVFP4_STREAM_THREADS(KSPLIT, NT, MT) * QWEN38_NVFP4_STREAM_MIN_BLOCKS(KSPLIT, NT, MT)) > 128;
  using XW = stream::XWords<kXStep, kH, kFrag ? kH : 0>;
  for (int s = 0; s < kSW; s += kD) {
    const int base = kAdvance ? 0 : s;  // the pointers' step (relative to it, s + d is base + d)
#pragma unroll
    for (int d = 0; d < kD; ++d) {
      if (kSW % kD != 0 && s + d >= kSW) break;
      const int ss = s + d, rel = base + d;
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
          wb[d][nt] = stream::load_w(wp + nt * 8 * kRowB + 64 * (rel + kD));
          sb[d][nt] = stream::load_scale2(sp + nt * 8 * kRowS + 8 * (rel + kD));
        }
      }
      typename D::T2 s2[NT][2];
      stream::nvfp4_scales<T, NT>(s2, sc);
      // word q outer, tiles inner: only word q's A fragments are live; the activations of word
      // q + 1 (at 1 tile a warp: word q of the next step) load while word q is decoded
      stream::x_step(xw, xr, rel);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        uint4 xc[kH];
        stream::x_word(xc, xw, xr, rel, q, ss + 1 < kSW);
        uint32_t af[MT][2][4];
        stream::nvfp4_a_fragments<MT, kFrag>(af, xc);  // (the copy: layout kXfragPairedA)
        stream::nvfp4_word_mmas<T, NT, MT>(acc, af, wq, s2, q);
      }
    }
    if constexpr (kAdvance) {
      wp += 64 * kD;
      sp += 8 * kD;
#pragma unroll
      for (int h = 0; h < kH; ++h) xr[h] += XW::kStep * kD;
    }
  }

  const float gscale = *p.global;
  // the tile position read again (nothing kept live across the main loop)
  const StreamTile tile_e = stream_tile<kCl>(8 * NT);
  const int warp_e = tile_e.warp;
  const int64_t nb_e = tile_e.n0;
  if constexpr (kCl) {
    if (const ClusterPos cl = cluster_pos(); cl.size > 1) {
      extern __shared__ float4 cluster_buf[];  // NT x KSPLIT x MT*16 x 8 floats (stream_launch.cuh)
      reduce_and_store_cluster<MT, KSPLIT, NT>(reinterpret_cast<float*>(cluster_buf), acc, cl.rank, warp_e, g, t,
                                               nvfp4::kPairUnscale, gscale, p.bias, p.bias_dtype, p.y, p.out, p.m,
                                               p.n, nb_e);
      return;
    }
  }
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
    reduce_and_store<MT, KSPLIT>(partial, acc[nt], warp_e, g, t, nvfp4::kPairUnscale, gscale, p.bias, p.bias_dtype,
                                 p.y, p.out, p.m, p.n, nb_e + 8 * nt);
}

template <typename T, int K, int KSPLIT, int NT, int MT>
__global__ void __launch_bounds__(QWEN38_NVFP4_STREAM_THREADS(KSPLIT, NT, MT),
                                  QWEN38_NVFP4_STREAM_MIN_BLOCKS(KSPLIT, NT, MT))
    nvfp4_stream_kernel(const Nvfp4Params p) {
  nvfp4_stream_xa<T, K, KSPLIT, NT, MT>(p);
}

// ---- the transposed form: weights as the mma A operand ----------------------------------------
// As fp8_stream_t (fp8_stream_kernel.cuh): the same words, steps, k slots and mma order per output
// as the x-as-A body above, with the operands' roles swapped. Tiles 2i and 2i+1 make the 16 rows of
// an A operand: a0 / a2 = pair 2r / 2r+1 of word q of tile 2i's row g (decode_word: the B registers
// of mma 2q + r before), a1 / a3 the same of tile 2i+1; each 8-row group nx of x is a B operand
// (column g = row 8 nx + g), re-paired (i, i+4) by four PRMTs a word (the A operand needed eight, for
// rows g and g + 8). NX = ceil(M / 8) groups are compiled: 1..8 rows run half the mmas of an m16
// tile and half the PRMTs. The weight registers rotate over kD + 1 sets (no copy of the words being
// decoded: the x-as-A body's 36 moves a two-step iteration at 4 tiles a warp), and the weight,
// scale and x pointers advance once per kD + 1 steps (every offset in the loop an immediate).
// Word q of a transposed step (nvfp4_stream_t, nvfp4_stream_ts): the word of x of each group nx
// re-paired into B operands, the word of each tile pair decoded into an A operand, their mmas.
// kPaired: xc already re-paired (the fragment order's copy in layout stream_common.cuh kXfragPaired).
template <typename T, int NT, int NX, bool kPaired = false>
__device__ __forceinline__ void nvfp4_t_word(float (&acc)[NT / 2][NX][4], const uint4 (&xc)[NX], const uint4 (&w)[NT],
                                             const typename nvfp4::PairDecode<T>::T2 (&s2)[NT][2], int q) {
  uint32_t bx[NX][2][2];  // group nx, mma 2q + r: (b0, b1) = k slots re-paired (i, i+4)
#pragma unroll
  for (int nx = 0; nx < NX; ++nx) {
    const uint4 v = kPaired ? xc[nx] : stream::pair_word_by_four(xc[nx]);
    bx[nx][0][0] = v.x;
    bx[nx][0][1] = v.y;
    bx[nx][1][0] = v.z;
    bx[nx][1][1] = v.w;
  }
#pragma unroll
  for (int i = 0; i < NT / 2; ++i) {
    uint32_t b0[4], b1[4];  // word q of tiles 2i and 2i+1, decoded (words 0, 1: first 16 k)
    nvfp4::decode_word<T>(b0, stream::word_of(w[2 * i], q), s2[2 * i][q < 2 ? 0 : 1]);
    nvfp4::decode_word<T>(b1, stream::word_of(w[2 * i + 1], q), s2[2 * i + 1][q < 2 ? 0 : 1]);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const uint32_t a[4] = {b0[2 * r], b1[2 * r], b0[2 * r + 1], b1[2 * r + 1]};
#pragma unroll
      for (int nx = 0; nx < NX; ++nx) mma_16816<T>(acc[i][nx], a, bx[nx][r][0], bx[nx][r][1]);
    }
  }
}

// kDepth > 0 (a lab's, benchmarks/lab/xsplit_lab.cu --depth): that many steps ahead instead of the rule below
template <typename T, int K, int KSPLIT, int NT, int NX, bool kFrag = false, int kDepth = 0>
__device__ __forceinline__ void nvfp4_stream_t(const Nvfp4Params& p) {
  using D = nvfp4::PairDecode<T>;
  static_assert(NT % 2 == 0 && NX >= 1 && NX <= 4, "pairs of 8-row weight tiles, 1..4 groups of 8 rows of x");
  constexpr int MT = NX > 2 ? 2 : 1;  // the reduction's rows: 16 MT
  constexpr int kA = NT / 2;          // 16-row A operands
  constexpr int kSteps = K / kStepK, kSW = kSteps / KSPLIT;
  constexpr int kRowB = K / 2, kRowS = K / 16;
  // steps ahead (fp16 at k split 8, 4 tiles and 2 groups: 1, which spills 8-12 bytes at 2 under the
  // 128-register cap of its 256-thread blocks; the library runs the x-as-A body at 2 groups, so only
  // the lab, benchmarks/lab/nvfp4_t_lab.cu, compiles that case), register sets
  constexpr int kD = kDepth > 0                                                           ? kDepth
                     : KSPLIT == 8 && NT == 4 && NX == 2 && std::is_same_v<T, __half> ? 1
                                                                                      : kStreamDepth;
  constexpr int kR = kD + 1;
  static_assert(K % (kStepK * KSPLIT) == 0 && kSW >= kD && K <= kStreamMaxK, "unserved K / k split");
  __shared__ float partial[KSPLIT][MT * 16][8];

  constexpr bool kCl = kStreamClusters<K, KSPLIT>;
  const stream::StreamThread th = stream::stream_begin<kCl>(8 * NT, kSW);  // (a cluster launch arrives on its barrier)
  const int g = th.g, t = th.t, s0 = th.s0;
  const int64_t nb = th.nb;
  const uint8_t* __restrict__ wp = p.w + (nb + g) * kRowB + 64 * s0 + 16 * t;
  const uint8_t* __restrict__ sp = p.scale + (nb + g) * kRowS + 8 * s0 + 2 * t;
  const T* xr[NX];  // row 8 nx + g of x (or the zero row), at this thread's first k
  if constexpr (kFrag) stream::activation_frag(xr, p.x, s0, 4 * g + t);  // (or x's fragment order)
  else stream::activation_rows(xr, p.x, p.m, p.x_stride, g, 128 * s0 + 32 * t);

  uint4 wb[kR][NT];
  uint32_t sb[kR][NT];
  // step ss + j of the current base (the pointers advance by kR steps an iteration: every offset in
  // the loop an immediate)
  auto load_step = [&](int set, int j) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      wb[set][nt] = stream::load_w(wp + nt * 8 * kRowB + 64 * j);
      sb[set][nt] = stream::load_scale2(sp + nt * 8 * kRowS + 8 * j);
    }
  };
#pragma unroll
  for (int d = 0; d < kD; ++d) load_step(d, d);  // weights are never written by a kernel of this library
  pdl_wait();
  pdl_allow();

  float acc[kA][NX][4];
  stream::zero_fill(acc);
  using XW = stream::XWords<false, NX, kFrag ? NX : 0>;
  XW xw;  // the activations one word ahead

#pragma unroll 1
  for (int s = 0; s < kSW; s += kR) {
#pragma unroll
    for (int d = 0; d < kR; ++d) {
      if (kSW % kR != 0 && s + d >= kSW) break;
      const int ss = s + d;
      if (ss + kD < kSW) load_step((d + kD) % kR, d + kD);  // into the set step ss - 1 used
      typename D::T2 s2[NT][2];
      stream::nvfp4_scales<T, NT>(s2, sb[d]);
      stream::x_step(xw, xr, d);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        uint4 xc[NX];
        stream::x_word(xc, xw, xr, d, q);
        nvfp4_t_word<T, NT, NX, kFrag>(acc, xc, wb[d], s2, q);  // (the copy: layout kXfragPaired)
      }
    }
    wp += 64 * kR;
    sp += 8 * kR;
#pragma unroll
    for (int nx = 0; nx < NX; ++nx) xr[nx] += XW::kStep * kR;
  }

  const float gscale = *p.global;
  const StreamTile tile_e = stream_tile<kCl>(8 * NT);
  const int warp_e = tile_e.warp;
  const int64_t nb_e = tile_e.n0;
  if constexpr (kCl) {
    if (const ClusterPos cl = cluster_pos(); cl.size > 1) {
      extern __shared__ float4 cluster_buf[];  // NT x KSPLIT x MT*16 x 8 floats (stream_launch.cuh)
      reduce_and_store_cluster_t<MT, KSPLIT, NT, NX>(reinterpret_cast<float*>(cluster_buf), acc, cl.rank, warp_e, g,
                                                     t, nvfp4::kPairUnscale, gscale, p.bias, p.bias_dtype, p.y, p.out,
                                                     p.m, p.n, nb_e);
      return;
    }
  }
  reduce_and_store_t<MT, KSPLIT, NT, NX>(partial, acc, warp_e, g, t, nvfp4::kPairUnscale, gscale, p.bias, p.bias_dtype,
                                         p.y, p.out, p.m, p.n, nb_e);
}

// Where the transposed kernel runs the x-as-A body instead (the same bits), from the lab
// (benchmarks/lab/nvfp4_t_lab.cu, benchmarks/results/h200/nvfp4_t_lab_s20.txt; H200, bf16, us,
// x-as-A -> transposed):
//  - 1 group (1..8 rows): transposed. 12288x5120 16.6 -> 14.1, 16384x5120 20.2 -> 17.9, 5120x17408
//    31.2 -> 24.2, 5120x6144 13.9 -> 11.3 at 1 row; but 34816x5120 41.7 -> 42.7 (8 rows: 43.5 ->
//    45.3), not understood.
//  - 2 groups (9..16): x-as-A. The transposed body holds 138 registers at k split 4 and 4 tiles (3
//    blocks an SM against 4): 16384x5120 at 16 rows 22.6 -> 33.0 (a second wave); within 2% elsewhere.
//  - 3 groups (17..24): transposed. 34816x5120 at 17 / 24 rows 65.8 / 70.5 -> 59.5 / 64.0.
//  - 4 groups (25..32): x-as-A (the transposed body 1-3% slower on 4 of 6 shapes).
template <typename T, int KSPLIT, int NT, int NX>
constexpr bool nvfp4_t_runs_xa() {
  return NX == 2 || NX == 4;
}

// The transposed kernel, NX = ceil(M / 8) groups of 8 rows of x (launch bounds: as the x-as-A
// kernel's for the same rows).
template <typename T, int K, int KSPLIT, int NT, int NX>
__global__ void __launch_bounds__(QWEN38_NVFP4_STREAM_THREADS(KSPLIT, NT, (NX > 2 ? 2 : 1)),
                                  QWEN38_NVFP4_STREAM_MIN_BLOCKS(KSPLIT, NT, (NX > 2 ? 2 : 1)))
    nvfp4_stream_t_kernel(const Nvfp4Params p) {
  if constexpr (nvfp4_t_runs_xa<T, KSPLIT, NT, NX>()) nvfp4_stream_xa<T, K, KSPLIT, NT, (NX > 2 ? 2 : 1)>(p);
  else nvfp4_stream_t<T, K, KSPLIT, NT, NX>(p);
}

// ---- x in the fragment order -------------------------------------------------------------------
// The same kernel reading x from its fragment order of NX groups (stream_common.cuh activation_frag;
// written by stream_common.cuh xfrag_kernel into p.x): the same body per group count
// (nvfp4_t_runs_xa; the x-as-A body's 2 MT groups are NX at 2 and 4), the same values in every
// thread, so the same bits; a warp's load of a word of x touches 4 L1 lines instead of 16 per group.
// The copy stores each word as the body's operands take it (stream_common.cuh kXfragPairedA for the
// x-as-A body, kXfragPaired for the transposed one; Nvfp4StreamOf::kFragLayout), so the body's loop
// has no PRMT and no register copy of x: 34816x5120 at 32 rows, 1035 -> 820 SASS instructions an
// iteration (the x-as-A body's two steps; ncu_s23_xfrag_layout.txt), 61.6 -> 50.2 us (bench).
// Why (H200, benchmarks/lab/nvfp4_xperm_lab.cu, nvfp4_xperm_lab_s22.txt; ncu_s22_xperm.txt): at 9..32
// rows the row-major reads of x are the L1's work (34816x5120 at 16 rows: 8.2M L1 data wavefronts,
// L1/TEX 83%, DRAM 31%; in the fragment order 4.0M, 48%, 40%); the kernel alone at 16 / 24 / 32
// rows 49.7 / 63.7 / 76.5 -> 40.3 / 48.7 / 55.4 us, the copy 1.6 us more. At 1..8 rows (7 of 8
// rows of a group read one zero row) the copy does not pay. Launched by stream_launch.cuh (frag).
template <typename T, int K, int KSPLIT, int NT, int NX>
__global__ void __launch_bounds__(QWEN38_NVFP4_STREAM_THREADS(KSPLIT, NT, (NX > 2 ? 2 : 1)),
                                  QWEN38_NVFP4_STREAM_MIN_BLOCKS(KSPLIT, NT, (NX > 2 ? 2 : 1)))
    nvfp4_stream_tf_kernel(const Nvfp4Params p) {
  if constexpr (nvfp4_t_runs_xa<T, KSPLIT, NT, NX>()) nvfp4_stream_xa<T, K, KSPLIT, NT, (NX > 2 ? 2 : 1), true>(p);
  else nvfp4_stream_t<T, K, KSPLIT, NT, NX, true>(p);
}

// ---- 17..32 rows in one round of 4 CTAs an SM ----------------------------------------------------
// The fragment-order kernel at 3 groups (the transposed body) held to 128 registers, 4 CTAs an SM
// (the form above: 156 registers, 3): on sm_90a it fits with no spill in bf16 only (fp16 spills 12
// bytes; at 4 groups either body spills 36-56 bytes, also at 1 step ahead), so it is compiled for
// bf16, K 5120, k split 4 and 4 tiles a warp (the tables' choice for the model's weights of 6144 rows
// and more). The same body, the same bits. The launcher takes it on compute capability 9 where its
// grid fits in one round of CTAs and the 3-CTA form's does not (stream_launch.cuh use_four). H200
// (benchmarks/lab/stream_waves_lab.cu --xfrag, stream_waves_lab_s24_xfrag*.txt, bf16, 24 rows, us):
// 16384x5120 (512 CTAs) 26.86 at 2 an SM (the 3-CTA form's best) -> 22.64 at 4 (one round);
// 14336x5120 (448) 26.15 -> 21.13; where no single round results the cap only costs: 34816x5120
// 46.92 at 3 an SM -> 53.22 at 3 / 57.93 at 4, 17408x5120 30.99 -> 34.25 / 35.11, 12288x5120 (one
// round at 3) 16.99 -> 18.38 at 4. The hardware-decode build (sm_121a, where the rule never takes
// it: a forced knob only) keeps the default form's bounds: under the cap it spilled 12 bytes there.
#ifdef QWEN38_HW_E2M1
#define QWEN38_NVFP4_FOUR_MIN_BLOCKS(KSPLIT, NT) QWEN38_NVFP4_STREAM_MIN_BLOCKS(KSPLIT, NT, 2)
#else
#define QWEN38_NVFP4_FOUR_MIN_BLOCKS(KSPLIT, NT) 4
#endif
// At 4 groups (25..32 rows) the x-as-A body held to 128 registers spills on sm_90a (40 bytes of stack;
// 18 local-memory operations in the 862-instruction loop iteration): in one round of 4 CTAs an SM it
// measured faster all the same (stream_waves_lab_s24_xfrag_b4.txt, 32 rows: 16384x5120 35.64 us at 2
// an SM -> 26.05 at 4; 14336x5120 likewise one round), so that spill is allowed by name on sm_90a
// (scripts/spill_allow.txt); the sm_121a build keeps the default bounds and no spill.
template <typename T, int K, int KSPLIT, int NT, int NX>
__global__ void __launch_bounds__(32 * KSPLIT, QWEN38_NVFP4_FOUR_MIN_BLOCKS(KSPLIT, NT))
    nvfp4_stream_tf4_kernel(const Nvfp4Params p) {
  static_assert((NX == 3 && !nvfp4_t_runs_xa<T, KSPLIT, NT, NX>()) || (NX == 4 && nvfp4_t_runs_xa<T, KSPLIT, NT, NX>()),
                "the transposed body at 3 groups, the x-as-A body at 4");
  if constexpr (NX == 4) nvfp4_stream_xa<T, K, KSPLIT, NT, 2, true>(p);
  else nvfp4_stream_t<T, K, KSPLIT, NT, NX, true>(p);
}

// ---- the staged transposed body: the weights through a per-thread cp.async ring ---------------
// The transposed body's arithmetic, word by word (the same products in the same k slots and mma
// order, the same reduction: the same bits), but each thread's 16 weight bytes and the 4-byte word
// holding its scale pair of a step go global -> shared memory by cp.async, kStagedDepth steps in
// flight, and the thread reads back only what it copied (cp.async.wait_group: no barrier). The
// registers of the in-flight steps are freed: at k split 4 and 4 tiles a warp, 60 / 80 / 106 / 112
// registers at 1 / 2 / 3 / 4 groups (sm_90a, bf16) against the register forms' 112 / 128 / 162 /
// 168 (20 KB of dynamic shared memory a CTA), so an SM holds 8 / 6 / 4 / 4 CTAs against 4 / 4 / 3 /
// 3. The ring's depth gains nothing (H200, benchmarks/lab/nvfp4_ring_t_lab.cu,
// nvfp4_ring_t_lab_s21*.txt, 34816x5120 at 1 row: 40.7 / 45.0 / 44.3 us at depth 2 / 3 / 4 in the
// lab's first form, 9 CTAs an SM; the register body 42.9): the weights do not wait on DRAM latency
// there. The occupancy gains where it decides the grid's waves, and only there: the launcher
// (stream_launch.cuh use_staged) takes this body on compute capability 9 at 1..16 rows when the
// register form's grid needs more than one round of CTAs and this one's fits in one (17408x5120 at
// 1 row, lab: 26.1 -> 22.7 us); grids that fit either way run 5-20% slower staged (16384x5120 at 1
// row 17.8 -> 19.4), and so does 34816x5120, which fits neither way (42.7 -> 44.7 at 8 an SM).
// GB10 keeps the register form (a 230 GB/s part needs few bytes in flight; the issue asks for no
// shared memory in the skinny kernel).
// K 5120 at k split 4 and 4 tiles a warp only (no cluster form), the tables' choice for the model's
// weights of 6144 rows and more.
constexpr int kStagedDepth = 2;
// dynamic shared memory of a CTA: per warp, D x NT x 32 16-byte weight chunks, then D x NT x 32
// 4-byte scale words
template <int KSPLIT, int NT, int D = kStagedDepth>
constexpr size_t nvfp4_staged_bytes() {
  return size_t(KSPLIT) * D * NT * 32 * 20;
}

template <typename T, int K, int KSPLIT, int NT, int NX, int D = kStagedDepth>
__device__ __forceinline__ void nvfp4_stream_ts(const Nvfp4Params& p) {
  using Dec = nvfp4::PairDecode<T>;
  static_assert(NT % 2 == 0 && NX >= 1 && NX <= 4, "pairs of 8-row weight tiles, 1..4 groups of 8 rows of x");
  static_assert(!kStreamClusters<K, KSPLIT>, "no cluster form");
  constexpr int MT = NX > 2 ? 2 : 1;
  constexpr int kA = NT / 2;
  constexpr int kSW = K / kStepK / KSPLIT;
  constexpr int kRowB = K / 2, kRowS = K / 16;
  static_assert(K % (kStepK * KSPLIT) == 0 && kSW >= D && D >= 2 && K <= kStreamMaxK, "unserved K / k split");
  extern __shared__ uint4 staged_ring[];  // nvfp4_staged_bytes<KSPLIT, NT, D>()
  __shared__ float partial[KSPLIT][MT * 16][8];

  const stream::StreamThread th = stream::stream_begin<false>(8 * NT, kSW);
  const int g = th.g, t = th.t, s0 = th.s0, lane = threadIdx.x % 32;
  const int64_t nb = th.nb;
  const uint8_t* __restrict__ wp = p.w + (nb + g) * kRowB + 64 * s0 + 16 * t;
  // the 4-byte word of this thread's scale pair (threads t and t ^ 1 copy the same word)
  const uint8_t* __restrict__ sp = p.scale + (nb + g) * kRowS + 8 * s0 + 4 * (t >> 1);
  const int sh = 16 * (t & 1);
  uint4* wr = staged_ring + th.warp * D * NT * 32 + lane;  // slot d, tile nt: wr[(d NT + nt) 32]
  uint32_t* sr = reinterpret_cast<uint32_t*>(staged_ring + KSPLIT * D * NT * 32) + th.warp * D * NT * 32 + lane;
  const T* xr[NX];
  stream::activation_rows(xr, p.x, p.m, p.x_stride, g, 128 * s0 + 32 * t);
  // step j of the current base into ring slot `slot` (the pointers advance by D steps an iteration)
  auto issue = [&](int slot, int j) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      cp_async16_span<256>(wr + (slot * NT + nt) * 32, wp + nt * 8 * kRowB + 64 * j, 16);
      cp_async4(sr + (slot * NT + nt) * 32, sp + nt * 8 * kRowS + 8 * j, 4);
    }
  };
#pragma unroll
  for (int d = 0; d < D - 1; ++d) {  // weights are never written by a kernel of this library
    issue(d, d);
    cp_async_commit();
  }
  pdl_wait();
  pdl_allow();

  float acc[kA][NX][4];
  stream::zero_fill(acc);
  stream::XWords<false, NX> xw;  // the activations one word ahead

#pragma unroll 1
  for (int s = 0; s < kSW; s += D) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      if (kSW % D != 0 && s + d >= kSW) break;
      const int ss = s + d;
      if (ss + D - 1 < kSW) issue((d + D - 1) % D, d + D - 1);  // into the slot step ss - 1 read
      cp_async_commit();                                        // (an empty group past the end)
      cp_async_wait<D - 1>();                                   // step ss has landed
      uint4 wq[NT];
      uint32_t sc[NT];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        wq[nt] = wr[(d * NT + nt) * 32];
        sc[nt] = sr[(d * NT + nt) * 32] >> sh;
      }
      typename Dec::T2 s2[NT][2];
      stream::nvfp4_scales<T, NT>(s2, sc);
      stream::x_step(xw, xr, d);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        uint4 xc[NX];
        stream::x_word(xc, xw, xr, d, q);
        nvfp4_t_word<T, NT, NX>(acc, xc, wq, s2, q);
      }
    }
    wp += 64 * D;
    sp += 8 * D;
#pragma unroll
    for (int nx = 0; nx < NX; ++nx) xr[nx] += kStepK * D;
  }
  cp_async_wait<0>();  // (only empty groups are left)

  const float gscale = *p.global;
  const StreamTile tile_e = stream_tile<false>(8 * NT);
  reduce_and_store_t<MT, KSPLIT, NT, NX>(partial, acc, tile_e.warp, g, t, nvfp4::kPairUnscale, gscale, p.bias,
                                         p.bias_dtype, p.y, p.out, p.m, p.n, tile_e.n0);
}

template <typename T, int K, int KSPLIT, int NT, int NX>
__global__ void __launch_bounds__(32 * KSPLIT) nvfp4_stream_ts_kernel(const Nvfp4Params p) {
  nvfp4_stream_ts<T, K, KSPLIT, NT, NX>(p);
}

}  // namespace qwen38::gemm
