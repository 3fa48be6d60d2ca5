// fp8_block_linear, 1..32 rows, the register-stream kernel: the arithmetic, k split and k order of
// the skinny kernel (fp8_block_linear_kernel.cuh; read its header first), so it writes the same
// bits, with the NVFP4 register-stream kernel's load scheme (nvfp4_stream_kernel.cuh): each
// thread's 32 weight bytes of a tile and step go from global memory straight into registers,
// `depth` steps ahead; K is a compile-time constant (every offset an immediate, no k predicates).
//
// Served: 1..32 rows (17..32: MT 2, a second m16 tile), K in {5120, 6144, 17408}, N a multiple of
// 8 NT, a compiled (k split, NT) (fp8_stream_kernel.cu); other shapes take the skinny kernel (same
// bits). Rows at or past M read the static zero row. Two forms: fp8_stream_kernel (the activations
// as the mma A operand, as the skinny kernel; 1 tile a warp) and fp8_stream_t_kernel below (the
// weights as A: 2 and 4 tiles a warp, the launcher's choice there), the same bits.
//
//   step s of warp w (its contiguous steps [w S / KS, (w+1) S / KS)): thread (g, t) holds
//   W[n + g][128 s + 32 t .. + 31] of each tile (two 16-byte loads) and the tile's fp32 block
//   scale; word q (activations x[row][128 s + 32 t + 8 q .. + 7], one 16-byte load per row half,
//   one word ahead) feeds mmas 2q and 2q+1 of every tile: bytes 4j .. 4j+3 of the chunk are mma j.
//   Per tile and step the 8 mmas sum the block from zero, then acc = acc + fp32(S_b * scale).
//   1 tile a warp (K 5120, k split 8) and the cluster form: as in nvfp4_stream_kernel.cuh.
#pragma once

#include <type_traits>

#include "common/mma.cuh"
#include "common/nvfp4.cuh"
#include "common/pdl.cuh"
#include "gemm/fp8_block_linear_kernel.cuh"
#include "gemm/skinny_common.cuh"
#include "gemm/stream_common.cuh"

namespace qwen38::gemm {

// Steps of weights in registers ahead of their use: 2, or 1 at 4 tiles per warp (32 bytes a tile
// and step: two steps of four tiles would hold 64 registers).
template <int NT>
constexpr int kFp8StreamDepth = NT >= 4 ? 1 : 2;

// 1..16 rows at k split 4 and 2 tiles a warp (the table's choice for 16384x5120, 14336x5120 and
// 6144x5120): on sm_90a held to 4 blocks an SM (128 registers, no spill; the compiler's choice,
// 130, leaves 3). H200 (benchmarks/lab/stream_waves_lab.cu, bf16, us at 1 / 16 rows, 3 -> 4 an SM):
// 16384x5120 36.3 / 44.6 -> 31.7 / 37.5, 14336x5120 34.7 / 42.0 -> 28.1 / 36.4, 6144x5120 14.5 /
// 17.1 -> 14.3 / 16.5. The sm_121a build (GB10) keeps the compiler's choice. No bit changes.
// (Not at 4 tiles: the 1..8-row transposed kernel takes 152 registers, 3 an SM; held to 4 it spills
// 8-40 bytes, and where timed with the spill only a grid of exactly one round of 4 an SM gained - the
// model's shapes lost 0.7-1.4 us; benchmarks/results/h200/skinny_waves_s30.txt.)
#ifdef QWEN38_HW_E2M1
#define QWEN38_FP8_STREAM_MIN_BLOCKS(KSPLIT, NT, MT) QWEN38_STREAM_MIN_BLOCKS(KSPLIT, NT, MT)
#else
#define QWEN38_FP8_STREAM_MIN_BLOCKS(KSPLIT, NT, MT) \
  ((KSPLIT) == 4 && (NT) == 2 && (MT) == 1 ? 4 : QWEN38_STREAM_MIN_BLOCKS(KSPLIT, NT, MT))
#endif

// The x-as-A form's body (fp8_stream_kernel below; also the sm_121a body of the transposed kernel
// at 4 tiles a warp and 17..32 rows).
// kFrag: p.x is x in the fragment order of 2 MT groups (stream_common.cuh activation_frag; NT > 1).
// The layout of the fragment-order copy of x the kernel at NX groups reads (stream_common.cuh
// kXfrag*): the x-as-A body's A fragments at 4 tiles and 2 groups (the body every arch runs there:
// fp8_t_runs_xa), else the values in order (the transposed body's B operands, and the x-as-A body
// where an arch's choice decides it). Host and device take the layout from here.
template <int NT, int NX>
constexpr int fp8_frag_layout() {
  return NT == 4 && NX == 2 ? stream::kXfragPlainA : stream::kXfragPlain;
}

// Word q of a step in the x-as-A body (also xsplit_kernel.cuh's FP8 kernel): each tile's 32 weight bytes (wq[nt],
// bytes 4j .. 4j+3 = mma j) decoded pair by pair into B fragments, mmas 2q and 2q+1 of every m16 tile accumulated
// into the block sums blk, tiles in order.
template <typename T, int NT, int MT>
__device__ __forceinline__ void fp8_word_mmas(float (&blk)[NT][MT][4], const uint32_t (&af)[MT][2][4],
                                              const uint4 (&wq)[NT][2], int q) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const uint32_t wr[8] = {wq[nt][0].x, wq[nt][0].y, wq[nt][0].z, wq[nt][0].w,
                            wq[nt][1].x, wq[nt][1].y, wq[nt][1].z, wq[nt][1].w};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const uint32_t w = wr[2 * q + r];
      const uint32_t b0 = e4m3x2_to<T>(uint16_t(w & 0xffffu));
      const uint32_t b1 = e4m3x2_to<T>(uint16_t(w >> 16));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) mma_16816<T>(blk[nt][mt], af[mt][r], b0, b1);
    }
  }
}

template <typename T, int K, int KSPLIT, int NT, int MT, bool kFrag = false>
__device__ __forceinline__ void fp8_stream_xa(const Fp8BlockParams& p) {
  constexpr int kSteps = K / kStepK, kSW = kSteps / KSPLIT;  // steps per warp
  // 1 tile a warp (the model's small weights: a warp's whole k range is a few steps): every step's
  // weights in flight from the start, and the activations a whole step (4 words) ahead
  constexpr int kD = NT == 1 ? (kSW < kStreamDepth1 ? kSW : kStreamDepth1) : kFp8StreamDepth<NT>;
  constexpr bool kXStep = NT == 1;
  constexpr int kH = 2 * MT;
  static_assert(K % (kStepK * KSPLIT) == 0 && kSW >= kD && K <= kStreamMaxK, "unserved K / k split");
  static_assert(!kFrag || !kXStep, "the fragment order serves the one-word-ahead schedule");
  __shared__ float partial[KSPLIT][MT * 16][8];

  // a cluster launch (stream_launch.cuh) spreads the KSPLIT warps of a tile over its CTAs
  constexpr bool kCl = kFp8StreamClusters<K, KSPLIT>;
  const stream::StreamThread th = stream::stream_begin<kCl>(8 * NT, kSW);  // (a cluster launch arrives on its barrier)
  const int g = th.g, t = th.t, s0 = th.s0;
  const int64_t nb = th.nb;
  const uint8_t* __restrict__ wp = p.w + (nb + g) * K + kStepK * s0 + 32 * t;
  const float* scp[NT];  // the tile's scale row (its 8 rows share one: 128 % 8 == 0)
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) scp[nt] = p.scale + ((nb + 8 * nt) / 128) * kSteps + s0;
  const T* xr[kH];
  if constexpr (kFrag) stream::activation_frag(xr, p.x, s0, 4 * g + t);
  else stream::activation_rows(xr, p.x, p.m, p.x_stride, g, kStepK * s0 + 32 * t);

  // weights (never written by a kernel of this library) and scales go out before pdl_wait()
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
  pdl_wait();
  pdl_allow();

  float acc[NT][MT][4];
  stream::zero_fill(acc);
  stream::XWords<kXStep, kH, kFrag ? kH : 0> xw;  // the activations in flight (stream_common.cuh)
  stream::x_first(xw, xr);

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
      float blk[NT][MT][4];
      stream::zero_fill(blk);
      stream::x_step(xw, xr, ss);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        uint4 xc[kH];
        stream::x_word(xc, xw, xr, ss, q, ss + 1 < kSW);
        // A fragments of mmas 2q and 2q+1 (natural k order; register r of a row's word = elements
        // 2r, 2r+1), or as loaded from the copy in layout kXfragPlainA
        constexpr bool kLoaded = kFrag && fp8_frag_layout<NT, 2 * MT>() == stream::kXfragPlainA;
        uint32_t af[MT][2][4];
        stream::a_fragments<MT, false, kLoaded>(af, xc);
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

  // the tile position read again (nothing kept live across the main loop)
  const StreamTile tile_e = stream_tile<kCl>(8 * NT);
  const int warp_e = tile_e.warp;
  const int64_t nb_e = tile_e.n0;
  if constexpr (kCl) {
    if (const ClusterPos cl = cluster_pos(); cl.size > 1) {
      extern __shared__ float4 cluster_buf[];  // NT x KSPLIT x MT*16 x 8 floats (stream_launch.cuh)
      reduce_and_store_cluster<MT, KSPLIT, NT>(reinterpret_cast<float*>(cluster_buf), acc, cl.rank, warp_e, g, t, 1.0f,
                                               1.0f, p.bias, p.bias_dtype, p.y, p.out, p.m, p.n, nb_e);
      return;
    }
  }
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
    reduce_and_store<MT, KSPLIT>(partial, acc[nt], warp_e, g, t, 1.0f, 1.0f, p.bias, p.bias_dtype, p.y, p.out, p.m,
                                 p.n, nb_e + 8 * nt);
}

template <typename T, int K, int KSPLIT, int NT, int MT>
__global__ void __launch_bounds__(32 * KSPLIT, QWEN38_FP8_STREAM_MIN_BLOCKS(KSPLIT, NT, MT))
    fp8_stream_kernel(const Fp8BlockParams p) {
  fp8_stream_xa<T, K, KSPLIT, NT, MT>(p);
}

// ---- the transposed form: weights as the mma A operand ----------------------------------------
// The same words, steps, k slots and sums as fp8_stream_kernel (the x-as-A form), with the roles of
// the operands swapped: two 8-row weight tiles (2i, 2i+1) form the 16 rows of an A operand (a0 / a2: row g of
// tile 2i, a1 / a3: row g of tile 2i+1, slots (2t, 2t+1) / (2t+8, 2t+9) from the low / high half of
// word j, as b0 / b1 before), and each 8-row group nx of activations is a B operand (column g = row
// 8 nx + g of x: b0 / b1 = registers .x / .y of word q for mma 2q, .z / .w for 2q+1: the loaded
// registers themselves). D[i][j] = (weight row, x row) holds the very dot product C[j][i] held, from
// the same products in the same slots (the lab and the GPU tests: the same bits as the skinny kernel
// at every row count, bf16 and fp16). What changes: no register of an operand is copied (the A
// operand of the x-as-A form interleaves rows g and g + 8 of x, and ptxas copied it again for each
// tile: 100 of 498 SASS instructions a warp step at 4 tiles and 1..16 rows, 207 of 680 at 17..32),
// the high e4m3 pair of a word goes to the conversion without a shift, and NX (the 8-row groups of
// x a call needs, ceil(M / 8)) is compiled: 1..8 rows run half the mmas of an m16 tile. sm_90a SASS
// at 4 tiles a warp, bf16: 316 / 354 / 428 instructions a step at 1 / 2 / 4 groups.
// H200 (benchmarks/lab/fp8_t_lab.cu, benchmarks/results/h200/fp8_t_lab_s20.txt, bf16, x-as-A ->
// transposed): 34816x5120 at 1 / 8 rows 57.1 / 59.1 -> 50.8 / 52.0 us, 17 / 32 rows 98.7 / 108.1 ->
// 76.9 / 93.6; 12288x5120 at 1 row 22.8 -> 18.9; 16384x5120 (2 tiles) 31.8 -> 27.0; 5120x17408
// (k split 8, 2 tiles) 42.8 -> 37.5. At 9..16 rows and 4 tiles (181 registers, 2 blocks an SM
// against 3) it lost on 3 of 4 shapes: fp8_t_runs_xa below.
// The weight buffers rotate over kD + 1 register sets (a step unrolled per set), so the loads of step
// s + kD go into the set step s - 1 used: no copy of the words being decoded.
template <typename T>
__device__ __forceinline__ uint32_t e4m3_half_to(uint32_t w, int half) {
  uint32_t h;
  if (half == 0)
    asm("{\n .reg .b16 l, u;\n mov.b32 {l, u}, %1;\n cvt.rn.f16x2.e4m3x2 %0, l;\n}" : "=r"(h) : "r"(w));
  else
    asm("{\n .reg .b16 l, u;\n mov.b32 {l, u}, %1;\n cvt.rn.f16x2.e4m3x2 %0, u;\n}" : "=r"(h) : "r"(w));
  if constexpr (std::is_same_v<T, __half>) {
    return h;
  } else {
    const float2 f = __half22float2(nvfp4::as_h2(h));  // exact
    return nvfp4::as_u32(__floats2bfloat162_rn(f.x, f.y));
  }
}

template <typename T, int K, int KSPLIT, int NT, int NX, bool kFrag = false>
__device__ __forceinline__ void fp8_stream_t(const Fp8BlockParams& p) {
  static_assert(NT % 2 == 0 && NX >= 1 && NX <= 4, "pairs of 8-row weight tiles, 1..4 groups of 8 rows of x");
  constexpr int MT = NX > 2 ? 2 : 1;  // the reduction's rows: 16 MT
  constexpr int kA = NT / 2;          // 16-row A operands
  constexpr int kSteps = K / kStepK, kSW = kSteps / KSPLIT;
  // steps ahead (2 tiles a warp: 2, but 1 in the 256-thread blocks held to 128 registers), register sets
  constexpr int kD = NT == 2 && KSPLIT < 8 ? 2 : 1, kR = kD + 1;
  static_assert(K % (kStepK * KSPLIT) == 0 && kSW >= kD && K <= kStreamMaxK, "unserved K / k split");
  __shared__ float partial[KSPLIT][MT * 16][8];

  constexpr bool kCl = kFp8StreamClusters<K, KSPLIT>;
  const stream::StreamThread th = stream::stream_begin<kCl>(8 * NT, kSW);  // (a cluster launch arrives on its barrier)
  const int g = th.g, t = th.t, s0 = th.s0;
  const int64_t nb = th.nb;
  const uint8_t* __restrict__ wp = p.w + (nb + g) * K + kStepK * s0 + 32 * t;
  const float* scp[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) scp[nt] = p.scale + ((nb + 8 * nt) / 128) * kSteps + s0;
  const T* xr[NX];  // row 8 nx + g of x (or the zero row), at this thread's first k
  if constexpr (kFrag) stream::activation_frag(xr, p.x, s0, 4 * g + t);  // (or x's fragment order)
  else stream::activation_rows(xr, p.x, p.m, p.x_stride, g, kStepK * s0 + 32 * t);

  uint4 wb[kR][NT][2];
  float sb[kR][NT];
  auto load_step = [&](int set, int ss) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      wb[set][nt][0] = stream::load_w(wp + nt * 8 * K + kStepK * ss);
      wb[set][nt][1] = stream::load_w(wp + nt * 8 * K + kStepK * ss + 16);
      sb[set][nt] = __ldg(scp[nt] + ss);
    }
  };
#pragma unroll
  for (int d = 0; d < kD; ++d) load_step(d, d);
  pdl_wait();
  pdl_allow();

  float acc[kA][NX][4];
  stream::zero_fill(acc);
  stream::XWords<false, NX, kFrag ? NX : 0> xw;  // the activations one word ahead

#pragma unroll 1
  for (int s = 0; s < kSW; s += kR) {
#pragma unroll
    for (int d = 0; d < kR; ++d) {
      if (kSW % kR != 0 && s + d >= kSW) break;
      const int ss = s + d;
      if (ss + kD < kSW) load_step((d + kD) % kR, ss + kD);  // into the set step ss - 1 used
      float blk[kA][NX][4];
      stream::zero_fill(blk);
      stream::x_step(xw, xr, ss);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        uint4 xc[NX];
        stream::x_word(xc, xw, xr, ss, q);
#pragma unroll
        for (int i = 0; i < kA; ++i) {
          const uint4* w0 = wb[d][2 * i];
          const uint4* w1 = wb[d][2 * i + 1];
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int j = 2 * q + r;  // mma j: bytes 4j .. 4j+3 = word j of the 32 bytes
            const uint32_t u0 = stream::word_of(w0[j / 4], j % 4), u1 = stream::word_of(w1[j / 4], j % 4);
            const uint32_t a[4] = {e4m3_half_to<T>(u0, 0), e4m3_half_to<T>(u1, 0), e4m3_half_to<T>(u0, 1),
                                   e4m3_half_to<T>(u1, 1)};
#pragma unroll
            for (int nx = 0; nx < NX; ++nx)
              mma_16816<T>(blk[i][nx], a, r == 0 ? xc[nx].x : xc[nx].z, r == 0 ? xc[nx].y : xc[nx].w);
          }
        }
      }
#pragma unroll
      for (int i = 0; i < kA; ++i)
#pragma unroll
        for (int nx = 0; nx < NX; ++nx)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            acc[i][nx][e] = __fadd_rn(acc[i][nx][e], __fmul_rn(blk[i][nx][e], sb[d][2 * i + e / 2]));
    }
  }

  const StreamTile tile_e = stream_tile<kCl>(8 * NT);
  const int warp_e = tile_e.warp;
  const int64_t nb_e = tile_e.n0;
  if constexpr (kCl) {
    if (const ClusterPos cl = cluster_pos(); cl.size > 1) {
      extern __shared__ float4 cluster_buf[];  // NT x KSPLIT x MT*16 x 8 floats (stream_launch.cuh)
      reduce_and_store_cluster_t<MT, KSPLIT, NT, NX>(reinterpret_cast<float*>(cluster_buf), acc, cl.rank, warp_e, g,
                                                     t, 1.0f, 1.0f, p.bias, p.bias_dtype, p.y, p.out, p.m, p.n, nb_e);
      return;
    }
  }
  reduce_and_store_t<MT, KSPLIT, NT, NX>(partial, acc, warp_e, g, t, 1.0f, 1.0f, p.bias, p.bias_dtype, p.y, p.out, p.m,
                                         p.n, nb_e);
}

// Where the transposed kernel runs the x-as-A body instead (the same bits): 4 tiles a warp at 9..16
// rows (2 groups: 181 registers on sm_90a, 2 blocks an SM, slower than the x-as-A body's 164 at 3 in
// the lab on 3 of 4 shapes; at 168 it spills), and at 17..32 rows on sm_121a (255 registers and a
// spill; sm_90a: 223 / 254, no spill) and with fp16 at k split 2 and 4 groups on sm_90a (a spill).
template <typename T, int KSPLIT, int NT, int NX>
constexpr bool fp8_t_runs_xa() {
  if constexpr (NT != 4 || NX < 2) return false;
  if constexpr (NX == 2) return true;
#ifdef QWEN38_HW_E2M1
  return true;
#else
  return std::is_same_v<T, __half> && KSPLIT == 2 && NX == 4;
#endif
}

// The transposed kernels' launch bounds: as the x-as-A kernel's for the same rows, except on sm_90a for the
// variant of the 5120-row weights (k split 8, 2 tiles a warp: 320 CTAs of 256 threads; 264 slots on 132 SMs at two
// CTAs an SM, 132 at one), where more CTAs an SM put the grid in fewer rounds: three an SM at 1..16 rows (one or two
// groups of 8 rows), two at 17..32 (three or four groups) for K 17408 (5120x17408), 17..24 for K 6144 (5120x6144).
// The compiler's choice was two / two / one / one (bf16 x: 83, 104, 129, 149 registers at K 17408; 105, 128, 144,
// 217 at K 6144); fp16 x at K 17408 and 1..8 rows took 80 and fitted three, which is why bf16 x was the slower there
// (37.4 against 29.2 us at one row on the H200, benchmarks/results/h200/fp8_dtype_s43.md).
// Held, some of these kernels spill (8-128 bytes: K 17408's fragment-order kernels at 9..16 and 25..32 rows, every
// K 6144 kernel but one), let through by name in scripts/spill_allow.txt: measured faster with the spill. H100, bf16
// x, us (benchmarks/results/h100/fp8_bounds_s44.md, two A/B calls against the compiler's choice):
//   | rows | 5120x17408 | 5120x6144 |
//   |---|---|---|
//   | 1 / 8 | 42.3 / 45.9 -> 34.9 / 38.2 | 16.8 / 19.8 -> 14.9 / 16.5 |
//   | 9 / 16 | 48.0 / 48.0 -> 39.1 / 39.0 | 19.5 / 19.4 -> 16.9 / 16.9 |
//   | 17 / 24 | 59.4 / 59.5 -> 52.6 / 52.6 | 24.2 / 24.1 -> 22.4 / 22.3 |
//   | 25 / 32 | 65.0 / 65.0 -> 60.1 / 60.6 | 24.9 / 24.5 -> 24.8 / 24.7 (not held: no gain) |
// fp16 x likewise or less (5120x6144 at 9..16 rows 18.4 -> 18.1). Same bits: launch bounds only (tests/test_fp8.py
// covers both weights' variants at every row count 1..32). QWEN38_FP8_ROUND_BOUNDS 0 gives the compiler's choice
// back (a lab setting). The hardware-decode build (sm_121a) keeps the default bounds.
#ifndef QWEN38_FP8_ROUND_BOUNDS
#define QWEN38_FP8_ROUND_BOUNDS 1
#endif
#define QWEN38_FP8_T_MIN_BLOCKS_DEFAULT(KSPLIT, NT, NX) QWEN38_FP8_STREAM_MIN_BLOCKS(KSPLIT, NT, ((NX) > 2 ? 2 : 1))
#if defined(QWEN38_HW_E2M1)
#define QWEN38_FP8_T_MIN_BLOCKS(K, KSPLIT, NT, NX) QWEN38_FP8_T_MIN_BLOCKS_DEFAULT(KSPLIT, NT, NX)
#else
#define QWEN38_FP8_T_MIN_BLOCKS(K, KSPLIT, NT, NX)                                                     \
  (QWEN38_FP8_ROUND_BOUNDS && (KSPLIT) == 8 && (NT) == 2 && ((K) == 17408 || ((K) == 6144 && (NX) < 4)) \
       ? ((NX) <= 2 ? 3 : 2)                                                                          \
       : QWEN38_FP8_T_MIN_BLOCKS_DEFAULT(KSPLIT, NT, NX))
#endif

// The transposed kernel, NX = ceil(M / 8) groups of 8 rows of x.
template <typename T, int K, int KSPLIT, int NT, int NX>
__global__ void __launch_bounds__(32 * KSPLIT, QWEN38_FP8_T_MIN_BLOCKS(K, KSPLIT, NT, NX))
    fp8_stream_t_kernel(const Fp8BlockParams p) {
  if constexpr (fp8_t_runs_xa<T, KSPLIT, NT, NX>()) fp8_stream_xa<T, K, KSPLIT, NT, (NX > 2 ? 2 : 1)>(p);
  else fp8_stream_t<T, K, KSPLIT, NT, NX>(p);
}

// The same kernel reading x from its fragment order of NX groups (stream_common.cuh activation_frag,
// written by xfrag_kernel into p.x): the same body per group count (fp8_t_runs_xa; the x-as-A
// body's 2 MT groups are NX at 2 and 4), the same values in every thread, so the same bits; as
// nvfp4_stream_tf_kernel (nvfp4_stream_kernel.cuh), whose lab measured why. The copy's layout:
// fp8_frag_layout (the x-as-A body's A fragments in one load at 2 groups). Launched by
// stream_launch.cuh (frag).
template <typename T, int K, int KSPLIT, int NT, int NX>
__global__ void __launch_bounds__(32 * KSPLIT, QWEN38_FP8_T_MIN_BLOCKS(K, KSPLIT, NT, NX))
    fp8_stream_tf_kernel(const Fp8BlockParams p) {
  if constexpr (fp8_t_runs_xa<T, KSPLIT, NT, NX>()) fp8_stream_xa<T, K, KSPLIT, NT, (NX > 2 ? 2 : 1), true>(p);
  else fp8_stream_t<T, K, KSPLIT, NT, NX, true>(p);
}

// The fragment-order kernel at 3 groups (17..24 rows) held to 3 CTAs an SM, 168 registers (the default
// form's K 5120 / k split 4 / 4 tiles build on sm_90a: 216 / 222 registers with bf16 / fp16 x, 2 an SM): the
// same body, the same bits; it spills 56 / 16 bytes there (allowed by name, scripts/spill_allow.txt). The
// launcher takes it on compute capability 9 where it runs the grid in fewer rounds of CTAs than the default
// form (stream_launch.cuh use_four; fp8_stream_kernel.cu Fp8StreamOf; knob QWEN38_FP8_THREE_CTAS). H200, us at
// 17 / 24 rows with bf16 x (benchmarks/results/h200/fp8_wide3_s44.md, every held kernel of the variant at 3
// an SM against the compiler's choice): 34816x5120 (1088 CTAs: 5 rounds -> 3) 72.1 / 71.8 -> 63.5 / 63.8,
// 17408x5120 (544: 3 -> 2) 43.2 / 42.8 -> 38.8 / 39.0, 12288x5120 (384: 2 -> 1) 30.0 / 30.1 -> 24.6 / 24.7,
// 10240x5120 (320: 2 -> 1) 28.7 / 28.8 -> 21.9 / 21.9; where the rounds stay (16384x5120, 512 CTAs: 2 and 2)
// slower: 33.8 / 33.9 -> 38.3 / 38.3. At 4 groups (25..32 rows) the same cap spilled 96 bytes and was slower
// on every shape but 10240x5120: not compiled. The hardware-decode build (sm_121a) compiles it with the default
// form's bounds (the launcher's auto never takes it there; a forced knob runs it, with the same bits).
#ifdef QWEN38_HW_E2M1
#define QWEN38_FP8_THREE_MIN_BLOCKS(K, KSPLIT, NT, NX) QWEN38_FP8_T_MIN_BLOCKS(K, KSPLIT, NT, NX)
#else
#define QWEN38_FP8_THREE_MIN_BLOCKS(K, KSPLIT, NT, NX) 3
#endif
template <typename T, int K, int KSPLIT, int NT, int NX>
__global__ void __launch_bounds__(32 * KSPLIT, QWEN38_FP8_THREE_MIN_BLOCKS(K, KSPLIT, NT, NX))
    fp8_stream_tf3_kernel(const Fp8BlockParams p) {
  static_assert(NX == 3, "3 groups of 8 rows");
  if constexpr (fp8_t_runs_xa<T, KSPLIT, NT, NX>()) fp8_stream_xa<T, K, KSPLIT, NT, 2, true>(p);
  else fp8_stream_t<T, K, KSPLIT, NT, NX, true>(p);
}

}  // namespace qwen38::gemm
