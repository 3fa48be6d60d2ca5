// Pieces shared by the register-stream skinny kernels (nvfp4_stream_kernel.cuh,
// fp8_stream_kernel.cuh): the load forms, the zero activation row of rows at or past M, the
// activation row pointers, and the register cap of their blocks. Torch-free.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/cluster.cuh"
#include "common/mma.cuh"
#include "common/nvfp4.cuh"  // QWEN38_HW_E2M1, the decode
#include "common/vec.cuh"     // zero_fill

namespace qwen38::gemm {

constexpr int kStreamMaxK = 17408;    // the zero row's length (the largest served K)
constexpr int kStreamDepth1 = 8;      // at most this many steps in flight at 1 tile a warp (all of
                                      // a warp's steps at K = 5120, k split 8: 5)

// K zeros: the activation row of the tile rows at or past M (16-byte aligned; static storage is
// zero-initialized at module load and never written). One copy per translation unit that includes
// this header (the two stream kernels' units and the lab).
static __device__ __align__(16) uint16_t g_stream_zero_row[kStreamMaxK];

namespace stream {

// 16 bytes of weights: read-only, no L1 allocation (read once), a miss fills the aligned 256 bytes
// into L2 (the next steps of the row hit L2 and DRAM sees longer runs).
__device__ __forceinline__ uint4 load_w(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ uint32_t load_scale2(const uint8_t* p) {
  unsigned short v;
  asm volatile("ld.global.nc.u16 %0, [%1];" : "=h"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ uint4 load_x(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

}  // namespace stream

// Blocks per SM the register allocation must allow: 256-thread blocks are held to 128 registers
// on sm_90a (two blocks per SM; the lab measured 20-40% faster than one block of up to 152
// registers at 1..16 rows, benchmarks/results/h200/NOTES.md). The hardware-decode build (sm_120+,
// GB10: 230 GB/s over 48 SMs, few bytes in flight needed per SM) keeps the compiler's choice: its
// decode needs a few more registers and would spill under the cap.
// 17..32 rows (MT 2) hold twice the A fragments and accumulators and would spill under the cap.
// 1 tile a warp (NT 1) serves grids of few tiles (under one CTA an SM: occupancy does not matter)
// and holds all of a warp's steps in flight, which the cap would spill.
#ifdef QWEN38_HW_E2M1
#define QWEN38_STREAM_MIN_BLOCKS(KSPLIT, NT, MT) 1
#else
#define QWEN38_STREAM_MIN_BLOCKS(KSPLIT, NT, MT) ((KSPLIT) >= 8 && (NT) > 1 && (MT) == 1 ? 2 : 1)
#endif

// Whether the kernel for (K, k split) carries the cluster form (QWEN38_SKINNY_CLUSTER,
// stream_launch.cuh). NVFP4: k split 8, the rule's split for weights of few rows (48 .. 1024 at
// K = 5120) and for K = 6144 / 17408 (5120 rows: 160 tiles of 4 a warp, one or two 8-warp CTAs an
// SM). FP8: K = 5120 at k split 8 only (the form's code pushed its fp16 K = 6144 build at 2 tiles a
// warp into a spill under the 128-register cap). The k split 2 / 4 kernels (the large K = 5120
// weights) fill the GPU evenly without one.
template <int K, int KSPLIT>
constexpr bool kStreamClusters = KSPLIT == 8;
template <int K, int KSPLIT>
constexpr bool kFp8StreamClusters = K == 5120 && KSPLIT == 8;

namespace stream {

// The activation row pointers of the A tiles' 8-row halves (rows g + 8h; rows at or past m read
// the zero row instead: no predicated loads), at element `off` of the row.
template <typename T, int kH>
__device__ __forceinline__ void activation_rows(const T* (&xr)[kH], const void* x, int64_t m, int64_t x_stride, int g,
                                                int off) {
  const T* x0 = static_cast<const T*>(x);
  const T* zero = reinterpret_cast<const T*>(g_stream_zero_row);
#pragma unroll
  for (int h = 0; h < kH; ++h) xr[h] = (g + 8 * h < m ? x0 + (g + 8 * h) * x_stride : zero) + off;
}

// The activations of a warp step, word by word (q = 0..3: 8 values of each row half at 8 q). Two
// schedules: kXStep (1 tile a warp) keeps a whole step in flight - x_first loads step 0, and
// x_word hands out word q of step ss and loads word q of step ss + 1 in its place; otherwise one
// word ahead - x_step loads word 0 of step ss, x_word hands out word q and loads word q + 1.
template <bool kXStep, int kH>
struct XWords {
  uint4 ahead[kXStep ? 4 : 1][kH];
};
template <bool kXStep, typename T, int kH>
__device__ __forceinline__ void x_first(XWords<kXStep, kH>& x, const T* const (&xr)[kH]) {
  if constexpr (kXStep) {
#pragma unroll
    for (int q = 0; q < 4; ++q)
#pragma unroll
      for (int h = 0; h < kH; ++h) x.ahead[q][h] = load_x(xr[h] + 8 * q);
  }
}
template <bool kXStep, typename T, int kH>
__device__ __forceinline__ void x_step(XWords<kXStep, kH>& x, const T* const (&xr)[kH], int ss) {
  if constexpr (!kXStep) {
#pragma unroll
    for (int h = 0; h < kH; ++h) x.ahead[0][h] = load_x(xr[h] + 128 * ss);
  }
}
template <bool kXStep, typename T, int kH>
__device__ __forceinline__ void x_word(uint4 (&xc)[kH], XWords<kXStep, kH>& x, const T* const (&xr)[kH], int ss,
                                       int q, int steps) {
  const int slot = kXStep ? q : 0;
#pragma unroll
  for (int h = 0; h < kH; ++h) xc[h] = x.ahead[slot][h];
  if (kXStep ? ss + 1 < steps : q < 3) {
#pragma unroll
    for (int h = 0; h < kH; ++h)
      x.ahead[slot][h] = load_x(xr[h] + (kXStep ? 128 * (ss + 1) + 8 * q : 128 * ss + 8 * (q + 1)));
  }
}

// Weight steps 0 .. kD-1 of each of NT 8-row tiles (rows 8 nt apart) into registers: 16 bytes a
// tile and step (w: this thread's bytes of step 0, 64 a step; rows row_b apart) and the two scale
// bytes of those 32 k (s: 8 a step; rows row_s apart).
template <int kD, int NT>
__device__ __forceinline__ void nvfp4_load_steps(uint4 (&wb)[kD][NT], uint32_t (&sb)[kD][NT], const uint8_t* w,
                                                 const uint8_t* s, int64_t row_b, int64_t row_s) {
#pragma unroll
  for (int d = 0; d < kD; ++d)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      wb[d][nt] = load_w(w + nt * 8 * row_b + 64 * d);
      sb[d][nt] = load_scale2(s + nt * 8 * row_s + 8 * d);
    }
}

// The NVFP4 kernels' step pieces (nvfp4_stream_kernel.cuh, nvfp4_xshare_kernel.cuh: the same
// arithmetic). The pair multipliers of a step from each tile's two scale bytes (sc: low byte = the
// first 16 k): s2[nt][0] for words 0 and 1, s2[nt][1] for words 2 and 3.
template <typename T, int NT>
__device__ __forceinline__ void nvfp4_scales(typename nvfp4::PairDecode<T>::T2 (&s2)[NT][2], const uint32_t (&sc)[NT]) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const __half2 sh = nvfp4::e4m3x2_to_h2(uint16_t(sc[nt]));
    s2[nt][0] = nvfp4::PairDecode<T>::scale(__low2half(sh));
    s2[nt][1] = nvfp4::PairDecode<T>::scale(__high2half(sh));
  }
}
// The A fragments of mmas 2q, 2q+1 from word q's activations (xc[2 mt + hh]: 8 values of row half hh
// of m16 tile mt), k slots re-paired (i, i+4) as pair_by_four's registers 4q..4q+3: {row g, row g+8,
// row g, row g+8} of each m16 tile.
template <int MT>
__device__ __forceinline__ void nvfp4_a_fragments(uint32_t (&af)[MT][2][4], const uint4 (&xc)[2 * MT]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const uint4 v = xc[2 * mt + hh];
      af[mt][0][hh] = __byte_perm(v.x, v.z, 0x5410);
      af[mt][0][hh + 2] = __byte_perm(v.x, v.z, 0x7632);
      af[mt][1][hh] = __byte_perm(v.y, v.w, 0x5410);
      af[mt][1][hh + 2] = __byte_perm(v.y, v.w, 0x7632);
    }
}
// Word q of every tile's 16 weight bytes (wq[nt]) decoded into B fragments and its two mmas per m16
// tile accumulated, tiles in order (the same mma order per tile at every NT and MT).
template <typename T, int NT, int MT>
__device__ __forceinline__ void nvfp4_word_mmas(float (&acc)[NT][MT][4], const uint32_t (&af)[MT][2][4],
                                                const uint4 (&wq)[NT],
                                                const typename nvfp4::PairDecode<T>::T2 (&s2)[NT][2], int q) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const uint32_t wr[4] = {wq[nt].x, wq[nt].y, wq[nt].z, wq[nt].w};
    uint32_t b[4];
    nvfp4::decode_word<T>(b, wr[q], s2[nt][q < 2 ? 0 : 1]);  // words 0, 1: first 16 k; 2, 3: second
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) mma_16816<T>(acc[nt][mt], af[mt][r], b[2 * r], b[2 * r + 1]);
  }
}

// A stream kernel's start: a cluster launch arrives on the cluster barrier (waited for in the
// epilogue's reduce_and_store_cluster*), then this thread's place: its warp's tile (nb, the first
// of nt8 rows) and k-split index, (g, t) = (lane / 4, lane % 4), and the warp's first step
// (steps_per_warp of them a warp).
struct StreamThread {
  int64_t nb;
  int warp, g, t, s0;
};
template <bool kCl>
__device__ __forceinline__ StreamThread stream_begin(int nt8, int steps_per_warp) {
  if constexpr (kCl)
    if (cluster_pos().size > 1) cluster_arrive_relaxed();
  const StreamTile tile = stream_tile<kCl>(nt8);
  const int lane = threadIdx.x % 32;
  return {tile.n0, tile.warp, lane / 4, lane % 4, tile.warp * steps_per_warp};
}

// 32-bit word i of 16 loaded bytes (i a compile-time constant after unrolling)
__device__ __forceinline__ uint32_t word_of(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

using qwen38::zero_fill;  // (common/vec.cuh)

}  // namespace stream

}  // namespace qwen38::gemm
