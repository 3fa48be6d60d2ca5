// nvfp4_linear, 1..32 rows, for weights of few rows at K = 5120 and k split 8 (the model's 48-, 96-
// and, from 9 rows, 1024-row weights): the register-stream kernel's arithmetic
// (nvfp4_stream_kernel.cuh, read it first) with the activations copied once per CTA into shared
// memory and shared by the CTA's warps.
//
// Why: at k split 8 a warp walks 640 k (5 steps). Its weights are 2.5 KB a tile, but its activations
// are 16 MT rows x 640 k (20 KB at 16 rows, 40 KB at 32), which the stream kernel loads one step
// ahead: a warp waits for about one memory latency a step, a DRAM one where x is cold, and every
// tile reads all of x again (1024x5120 at 32 rows: 42 MB through L2 for a 2.9 MB weight).
//
// Form: clusters of 8 CTAs; CTA r of a cluster runs k-split warp r (k range [640 r, 640 r + 640) at
// K = 5120) of `groups` tile groups of NT 8-row tiles (the launcher's choice), each group MT / MW
// warps (MW = MT: one warp computes all rows against its B registers, like a stream kernel warp;
// MW = 1: one warp per m16 tile, each decoding the same weights - a row's sums are the same either
// way). All warps of the CTA read its one copy of x[0 .. min(M, 16 MT) - 1][its k range], which the
// CTA's threads copy with cp.async (one commit group a step: step s starts once its part is in).
// Rows at or past M read a zero row. Every weight step of a warp is in flight from the start
// (before pdl_wait: weights are never written by a kernel of this library). The partials of tile i
// of the cluster's groups x NT tiles go to CTA i % 8 by st.async, completing on its mbarrier (no
// fence: a release / acquire cluster barrier there cost 0.3-1.5 us, "membar" stalls in ncu,
// benchmarks/results/h200/xshare_lab_17_bar.txt against _stasync.txt), and
// that CTA sums them in warp order 0..7, as reduce_and_store_cluster does: the bits of the stream
// kernel and the ring kernel at every row count (a switch between them never changes a row).
//
// H200 (benchmarks/lab/xshare_lab.cu, benchmarks/results/h200/xshare_lab_17*.txt; x cold, PDL, us):
// 48x5120 at 1 / 16 / 32 rows 2.36 / 2.75 / 3.33 against the stream kernel's 3.01 / 3.72 / 4.66
// (one warp per m16 tile at 17..32 rows: 3.33 against 3.69 with both tiles in one warp); 1024x5120
// (2 tiles a warp, 8 groups) at 16 / 32 rows 4.60 / 5.78 against 5.28 / 7.55, but 4.52 against 4.04
// at 1 row: the launcher takes it there from 9 rows.
//
// Shared memory: x rows of K/8 elements, 16-byte chunk j of a row at chunk j + j/8 and rows
// `xshare_row_chunks` chunks apart (= 2 mod 8): a quarter-warp's 16-byte reads (lanes (g, t),
// (g + 1, t), t = 0..3: chunks 4t + q of rows g, g + 1) fall in 8 distinct 16-byte bank groups;
// then the partial buffer (ceil(groups NT / 8) x 8 x MT*16 x 8 floats).
#pragma once

#include <type_traits>

#include "common/cluster.cuh"
#include "common/cp_async.cuh"
#include "common/mma.cuh"
#include "common/nvfp4.cuh"
#include "common/pdl.cuh"
#include "common/tma.cuh"
#include "gemm/nvfp4_linear_launch.h"
#include "gemm/skinny_common.cuh"
#include "gemm/stream_common.cuh"

namespace qwen38::gemm {

constexpr int kXshareSplit = 8;      // k-split warps of a tile = CTAs of a cluster
constexpr int kXshareMaxWarps = 8;   // warps of a CTA (tile groups x warps a group)
constexpr int64_t kXshareNarrowN = 128; // the launcher's forms: one tile a warp up to this many weight rows,
constexpr int64_t kXshareMaxN = 1024;   // two (at more than 8 rows) up to this many

// 16-byte chunks of one staged x row: K / 8 elements = K / 64 chunks, one pad chunk every 8, then
// padded to 2 mod 8 (rows g and g + 1 of a quarter-warp two bank groups apart)
__host__ __device__ constexpr int xshare_row_chunks(int k) {
  const int j = k / 64 + k / 512;
  return j + ((2 - j % 8) + 8) % 8;
}
// dynamic shared memory of a CTA of `groups` tile groups: 16 MT rows + the zero row, the partials,
// then the partials' mbarrier (16 bytes)
__host__ __device__ constexpr size_t xshare_smem_bytes(int k, int mt, int groups, int nt) {
  const int slots = (groups * nt + kXshareSplit - 1) / kXshareSplit;
  return size_t(16 * mt + 1) * xshare_row_chunks(k) * 16 + size_t(slots) * kXshareSplit * mt * 16 * 8 * 4 + 16;
}

// MT: m16 tiles of rows staged (1: rows 1..16, 2: 17..32); MW: m16 tiles a warp computes (MT, or 1:
// the MT tiles of a tile group go to MT warps, each its own row half against its own decode of the
// same weights - a row's sums are the same either way).
template <typename T, int K, int NT, int MT, int MW>
__global__ void __launch_bounds__(32 * kXshareMaxWarps, 1) nvfp4_xshare_kernel(const Nvfp4Params p) {
  using D = nvfp4::PairDecode<T>;
  constexpr int kSW = K / kStepK / kXshareSplit;  // steps of a warp
  constexpr int kRowB = K / 2, kRowS = K / 16;
  constexpr int kRowC = xshare_row_chunks(K);     // chunks between staged rows
  constexpr int kStepC = 18;                      // staged chunks of a step (16 + 2 pads)
  constexpr int kH = 2 * MW;                      // row halves of a warp: rows g + 8h + 16 m0
  constexpr int kWG = MT / MW;                    // warps of a tile group
  static_assert(MW == 1 || MW == MT, "a warp computes one m16 tile or all");
  constexpr int kTile = MT * 16 * 8;              // floats of one warp's partial of one tile
  static_assert(K % (kStepK * kXshareSplit) == 0 && kSW <= 8, "unserved K");
  extern __shared__ uint4 xs_mem[];

  const int lane = threadIdx.x % 32, groups = blockDim.x / 32 / kWG;
  const int tg = threadIdx.x / 32 / kWG, m0 = threadIdx.x / 32 % kWG;  // tile group, first m16 tile
  const int g = lane / 4, t = lane % 4;
  const int rank = cluster_pos().rank;           // = this CTA's k-split warp
  const int tiles = groups * NT;                  // of the cluster; tile i is summed in CTA i % 8
  const int mine = (tiles + kXshareSplit - 1 - rank) / kXshareSplit;  // tiles this CTA sums
  float* const buf = reinterpret_cast<float*>(xs_mem + (16 * MT + 1) * kRowC);
  uint64_t* const barp =
      reinterpret_cast<uint64_t*>(buf + (tiles + kXshareSplit - 1) / kXshareSplit * kXshareSplit * kTile);
  const uint32_t bar = smem_addr(barp);
  if (threadIdx.x == 0) {
    tma::mbar_init(bar, 1);
    tma::mbar_init_fence();
    tma::mbar_expect(bar, uint32_t(mine) * kXshareSplit * kTile * 4);  // every k-split warp's partials
  }
  cluster_arrive_relaxed();  // waited for before the partials go into another CTA's memory
  const int64_t group = blockIdx.x / kXshareSplit;
  const int64_t nb = (group * groups + tg) * 8 * NT;
  const int s0 = rank * kSW;
  const uint8_t* __restrict__ wp = p.w + (nb + g) * kRowB + 64 * s0 + 16 * t;
  const uint8_t* __restrict__ sp = p.scale + (nb + g) * kRowS + 8 * s0 + 2 * t;

  uint4 wb[kSW][NT];
  uint32_t sb[kSW][NT];
  stream::nvfp4_load_steps(wb, sb, wp, sp, kRowB, kRowS);
  pdl_wait();
  pdl_allow();

  // x[r][128 s0 .. + 128 kSW) -> staged rows, one commit group a step; the zero row after the 16 MT
  const int rows = p.m < 16 * MT ? int(p.m) : 16 * MT;
  const T* __restrict__ x0 = static_cast<const T*>(p.x) + int64_t(kStepK) * s0;
  for (int s = 0; s < kSW; ++s) {
    for (int c = threadIdx.x; c < rows * 16; c += blockDim.x) {
      const int r = c / 16, j = c % 16;
      cp_async16(xs_mem + r * kRowC + s * kStepC + j + j / 8, x0 + r * p.x_stride + kStepK * s + 8 * j, 16);
    }
    cp_async_commit();
  }
  for (int c = threadIdx.x; c < kRowC; c += blockDim.x) xs_mem[16 * MT * kRowC + c] = make_uint4(0, 0, 0, 0);
  // this lane's chunk of row g + 8h: 4t + t/2 into a step (q added per word)
  uint32_t xa[kH];
#pragma unroll
  for (int h = 0; h < kH; ++h) {
    const int row = 16 * m0 + g + 8 * h;
    xa[h] = smem_addr(xs_mem + (row < rows ? row : 16 * MT) * kRowC + 4 * t + t / 2);
  }

  float acc[NT][MW][4];
  stream::zero_fill(acc);
#pragma unroll
  for (int ss = 0; ss < kSW; ++ss) {
    cp_async_wait_dyn(kSW - 1 - ss);
    __syncthreads();
    typename D::T2 s2[NT][2];
    stream::nvfp4_scales<T, NT>(s2, sb[ss]);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      uint4 xc[kH];
#pragma unroll
      for (int h = 0; h < kH; ++h) {
        const uint32_t a = xa[h] + 16u * (kStepC * ss + q);
        asm("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(xc[h].x), "=r"(xc[h].y), "=r"(xc[h].z), "=r"(xc[h].w) : "r"(a));
      }
      uint32_t af[MW][2][4];
      stream::nvfp4_a_fragments<MW>(af, xc);
      stream::nvfp4_word_mmas<T, NT, MW>(acc, af, wb[ss], s2, q);
    }
  }

  // partials: tile i = tg NT + nt of the cluster's tiles goes to CTA i % 8, slot i / 8
  cluster_wait();  // every CTA of the cluster runs (and its mbarrier is initialized)
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int i = tg * NT + nt;
    const uint32_t base = cluster_map(buf, i % kXshareSplit);
    const uint32_t rbar = cluster_map(barp, i % kXshareSplit);
#pragma unroll
    for (int mt = 0; mt < MW; ++mt) {
      const uint32_t at = base + 4u * uint32_t(((i / kXshareSplit) * kXshareSplit + rank) * kTile +
                                               ((m0 + mt) * 16 + g) * 8 + 2 * t);
      cluster_store_async(at, acc[nt][mt][0], acc[nt][mt][1], rbar);
      cluster_store_async(at + 4 * 64, acc[nt][mt][2], acc[nt][mt][3], rbar);  // row g + 8
    }
  }
  if (mine > 0) cluster_mbar_wait(bar, 0);
  const float gscale = *p.global;
  const int64_t nc = group * tiles * 8;  // the cluster's first output column
  for (int idx = threadIdx.x; idx < (tiles + kXshareSplit - 1 - rank) / kXshareSplit * kTile; idx += blockDim.x) {
    const int sl = idx / kTile, r = idx % kTile / 8, c = idx % 8;
    const int64_t nn = nc + 8 * (sl * kXshareSplit + rank) + c;
    if (r >= p.m || nn >= p.n) continue;
    const float* pp = buf + sl * kXshareSplit * kTile + r * 8 + c;
    store_one<kXshareSplit>([&](int w) { return pp[w * kTile]; }, nvfp4::kPairUnscale, gscale, p.bias,
                            p.bias_dtype, p.y, p.out, r, p.n, nn);
  }
  // no CTA leaves while a partial it sent may be in flight: each arrives once its own have landed
  cluster_arrive_relaxed();
  cluster_wait();
}

}  // namespace qwen38::gemm
