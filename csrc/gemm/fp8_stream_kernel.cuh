// fp8_block_linear, 1..32 rows, the register-stream kernel: the arithmetic, k split and k order of
// the skinny kernel (fp8_block_linear_kernel.cuh; read its header first), so it writes the same
// bits, with the NVFP4 register-stream kernel's load scheme (nvfp4_stream_kernel.cuh): each
// thread's 32 weight bytes of a tile and step go from global memory straight into registers,
// `depth` steps ahead; K is a compile-time constant (every offset an immediate, no k predicates).
//
// Served: 1..32 rows (17..32: MT 2, a second m16 tile), K in {5120, 6144, 17408}, N a multiple of
// 8 NT, a compiled (k split, NT) (fp8_stream_kernel.cu); other shapes take the skinny kernel (same
// bits). Rows at or past M read the static zero row.
//
//   step s of warp w (its contiguous steps [w S / KS, (w+1) S / KS)): thread (g, t) holds
//   W[n + g][128 s + 32 t .. + 31] of each tile (two 16-byte loads) and the tile's fp32 block
//   scale; word q (activations x[row][128 s + 32 t + 8 q .. + 7], one 16-byte load per row half,
//   one word ahead) feeds mmas 2q and 2q+1 of every tile: bytes 4j .. 4j+3 of the chunk are mma j.
//   Per tile and step the 8 mmas sum the block from zero, then acc = acc + fp32(S_b * scale).
//   1 tile a warp (K 5120, k split 8) and the cluster form: as in nvfp4_stream_kernel.cuh.
#pragma once

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
#ifdef QWEN38_HW_E2M1
#define QWEN38_FP8_STREAM_MIN_BLOCKS(KSPLIT, NT, MT) QWEN38_STREAM_MIN_BLOCKS(KSPLIT, NT, MT)
#else
#define QWEN38_FP8_STREAM_MIN_BLOCKS(KSPLIT, NT, MT) \
  ((KSPLIT) == 4 && (NT) == 2 && (MT) == 1 ? 4 : QWEN38_STREAM_MIN_BLOCKS(KSPLIT, NT, MT))
#endif

template <typename T, int K, int KSPLIT, int NT, int MT>
__global__ void __launch_bounds__(32 * KSPLIT, QWEN38_FP8_STREAM_MIN_BLOCKS(KSPLIT, NT, MT))
    fp8_stream_kernel(const Fp8BlockParams p) {
  constexpr int kSteps = K / kStepK, kSW = kSteps / KSPLIT;  // steps per warp
  // 1 tile a warp (the model's small weights: a warp's whole k range is a few steps): every step's
  // weights in flight from the start, and the activations a whole step (4 words) ahead
  constexpr int kD = NT == 1 ? (kSW < kStreamDepth1 ? kSW : kStreamDepth1) : kFp8StreamDepth<NT>;
  constexpr bool kXStep = NT == 1;
  constexpr int kH = 2 * MT;
  static_assert(K % (kStepK * KSPLIT) == 0 && kSW >= kD && K <= kStreamMaxK, "unserved K / k split");
  __shared__ float partial[KSPLIT][MT * 16][8];

  // a cluster launch (stream_launch.cuh) spreads the KSPLIT warps of a tile over its CTAs
  constexpr bool kCl = kFp8StreamClusters<K, KSPLIT>;
  if constexpr (kCl)
    if (cluster_pos().size > 1) cluster_arrive_relaxed();  // waited for in reduce_and_store_cluster
  const StreamTile tile = stream_tile<kCl>(8 * NT);
  const int lane = threadIdx.x % 32, warp = tile.warp;
  const int g = lane / 4, t = lane % 4;
  const int64_t nb = tile.n0;
  const int s0 = warp * kSW;
  const uint8_t* __restrict__ wp = p.w + (nb + g) * K + kStepK * s0 + 32 * t;
  const float* scp[NT];  // the tile's scale row (its 8 rows share one: 128 % 8 == 0)
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) scp[nt] = p.scale + ((nb + 8 * nt) / 128) * kSteps + s0;
  const T* xr[kH];
  stream::activation_rows(xr, p.x, p.m, p.x_stride, g, kStepK * s0 + 32 * t);

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
  stream::XWords<kXStep, kH> xw;  // the activations in flight (stream_common.cuh)
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
        stream::x_word(xc, xw, xr, ss, q, kSW);
        // A fragments of mmas 2q and 2q+1 (natural k order): {row g, row g+8, row g, row g+8} of m16
        // tile mt; register r of a row's word = elements 2r, 2r+1
        uint32_t af[MT][2][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const uint4 v = xc[2 * mt + hh];
            af[mt][0][hh] = v.x;
            af[mt][0][hh + 2] = v.y;
            af[mt][1][hh] = v.z;
            af[mt][1][hh + 2] = v.w;
          }
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

}  // namespace qwen38::gemm
