// Pieces shared by the register-stream skinny kernels (nvfp4_stream_kernel.cuh,
// fp8_stream_kernel.cuh): the load forms, the zero activation row of rows at or past M, the
// activation row pointers, and the register cap of their blocks. Torch-free.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/cluster.cuh"
#include "common/mma.cuh"
#include "common/nvfp4.cuh"  // QWEN38_HW_E2M1, the decode
#include "common/pdl.cuh"
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

// 8 2-byte values (registers: pairs (0, 1), (2, 3), (4, 5), (6, 7)) re-paired (i, i+4): (0, 4),
// (1, 5), (2, 6), (3, 7) - the k slots of the NVFP4 kernels' mma operands (nvfp4.cuh pair_raw_*).
__device__ __forceinline__ uint4 pair_word_by_four(const uint4& v) {
  return make_uint4(__byte_perm(v.x, v.z, 0x5410), __byte_perm(v.x, v.z, 0x7632), __byte_perm(v.y, v.w, 0x5410),
                    __byte_perm(v.y, v.w, 0x7632));
}

// The fragment order of x (kFragH groups of 8 rows; written by xfrag_kernel below):
// the 16-byte word q of step s of group h that lane 4 g + t of every warp reads - x[8 h + g][128 s +
// 32 t + 8 q .. + 7], zeros for rows at or past M - is uint4 ((4 s + q) kFragH + h) 32 + lane, so a
// warp's load of a word of a group is 512 contiguous bytes (4 L1 lines) where the row-major rows
// touch 8 rows x 2 lines (the four threads of a row read 16 bytes 64 apart). The same values reach
// each thread: the same bits. xfrag_elems: the copy's length in 2-byte elements, K x 8 kFragH.
// Four layouts of those words (xfrag_kernel kLayout), as the kernel's operands take them:
//   kXfragPlain    the values in order (the FP8 kernels: their mma operands are x's registers);
//   kXfragPaired   re-paired (i, i+4): registers p0..p3 = (0, 4), (1, 5), (2, 6), (3, 7)
//                  (pair_word_by_four; the NVFP4 transposed body's B operands, two registers each);
//   kXfragPairedA  slot h = 2 mt + r holds the A fragment r of m16 tile mt of the NVFP4 x-as-A body,
//                  {p_2r of group 2 mt, p_2r of group 2 mt + 1, p_2r+1 of 2 mt, p_2r+1 of 2 mt + 1}:
//                  one load, one mma operand (an operand made of two loads' registers was copied
//                  again for every tile by ptxas: ~400 moves an iteration at 32 rows). kFragH even;
//   kXfragPlainA   the same for the FP8 x-as-A body, from the values in order: {r0 of group 2 mt,
//                  r0 of 2 mt + 1, r1 of 2 mt, r1 of 2 mt + 1} (A fragment 0), the same of r2, r3.
constexpr int kXfragPlain = 0, kXfragPaired = 1, kXfragPairedA = 2, kXfragPlainA = 3;
constexpr int64_t xfrag_elems(int64_t k, int groups) { return k * 8 * groups; }

// x (row-major: m rows of k 2-byte values E, `stride` apart) -> its fragment order of `groups`
// groups of 8 rows (zeros for rows at or past m) in layout kLayout at `out`: one uint4 a thread, k x
// groups of them.
template <typename E, int kLayout = kXfragPlain>
__global__ void __launch_bounds__(256) xfrag_kernel(const E* __restrict__ x, int64_t m, int64_t stride, int64_t k,
                                                    int groups, uint4* __restrict__ out) {
  static_assert(sizeof(E) == 2, "2-byte activations");
  pdl_wait();  // x is the previous kernel's output, and the previous kernel may still read `out`
  pdl_allow();
  const int64_t i = int64_t(blockIdx.x) * 256 + threadIdx.x;
  if (i >= k * groups) return;
  const int lane = int(i % 32), h = int(i / 32 % groups);
  const int64_t sq = i / (32 * groups);  // 4 s + q
  const int64_t col = 128 * (sq / 4) + 32 * (lane % 4) + 8 * (sq % 4);
  constexpr bool kPair = kLayout == kXfragPaired || kLayout == kXfragPairedA;
  const auto word = [&](int grp) {  // word (s, q) of group grp at this lane, as kLayout pairs it
    const int64_t row = 8 * grp + lane / 4;
    const uint4 v = row < m ? load_x(x + row * stride + col) : make_uint4(0, 0, 0, 0);
    return kPair ? pair_word_by_four(v) : v;
  };
  if constexpr (kLayout == kXfragPairedA || kLayout == kXfragPlainA) {
    const uint4 a = word(h & ~1), b = word(h | 1);
    out[i] = h % 2 == 0 ? make_uint4(a.x, b.x, a.y, b.y) : make_uint4(a.z, b.z, a.w, b.w);
  } else {
    out[i] = word(h);
  }
}

// The row pointers of x in the fragment order (kH groups): group h of this warp's first step s0 at
// lane `lane` (element offsets; XWords<.., kH> strides them).
template <typename T, int kH>
__device__ __forceinline__ void activation_frag(const T* (&xr)[kH], const void* xf, int s0, int lane) {
#pragma unroll
  for (int h = 0; h < kH; ++h) xr[h] = static_cast<const T*>(xf) + (int64_t(s0) * 4 * kH + h) * 256 + 8 * lane;
}

// The activations of a warp step, word by word (q = 0..3: 8 values of each row half at 8 q). Two
// schedules: kXStep (1 tile a warp) keeps a whole step in flight - x_first loads step 0, and
// x_word hands out word q of step `rel` and loads word q of step rel + 1 in its place (if
// `next_step`: that step is in the warp's range); otherwise one word ahead - x_step loads word 0 of
// step `rel`, x_word hands out word q and loads word q + 1. `rel`: the step's index from the
// pointers xr (a kernel may advance them as it goes, so that every offset is an immediate).
// kFragH 0: x row-major (activation_rows; word q of step rel 128 rel + 8 q elements on); else the
// fragment order of kFragH groups (activation_frag; kStep / kWord: the strides in elements; group h
// at xr[0] + 256 h, so one pointer serves them all).
template <bool kXStep, int kH, int kFragH = 0>
struct XWords {
  static constexpr int kStep = kFragH > 0 ? 4 * kFragH * 256 : 128;
  static constexpr int kWord = kFragH > 0 ? kFragH * 256 : 8;
  uint4 ahead[kXStep ? 4 : 1][kH];
  // row half / group h of the pointers xr
  template <typename T>
  static __device__ __forceinline__ const T* at(const T* const (&xr)[kH], int h) {
    return kFragH > 0 ? xr[0] + 256 * h : xr[h];
  }
};
template <bool kXStep, typename T, int kH, int kF>
__device__ __forceinline__ void x_first(XWords<kXStep, kH, kF>& x, const T* const (&xr)[kH]) {
  using X = XWords<kXStep, kH, kF>;
  if constexpr (kXStep) {
#pragma unroll
    for (int q = 0; q < 4; ++q)
#pragma unroll
      for (int h = 0; h < kH; ++h) x.ahead[q][h] = load_x(X::at(xr, h) + X::kWord * q);
  }
}
template <bool kXStep, typename T, int kH, int kF>
__device__ __forceinline__ void x_step(XWords<kXStep, kH, kF>& x, const T* const (&xr)[kH], int rel) {
  using X = XWords<kXStep, kH, kF>;
  if constexpr (!kXStep) {
#pragma unroll
    for (int h = 0; h < kH; ++h) x.ahead[0][h] = load_x(X::at(xr, h) + X::kStep * rel);
  }
}
template <bool kXStep, typename T, int kH, int kF>
__device__ __forceinline__ void x_word(uint4 (&xc)[kH], XWords<kXStep, kH, kF>& x, const T* const (&xr)[kH], int rel,
                                       int q, bool next_step = true) {
  using X = XWords<kXStep, kH, kF>;
  const int slot = kXStep ? q : 0;
#pragma unroll
  for (int h = 0; h < kH; ++h) xc[h] = x.ahead[slot][h];
  if (kXStep ? next_step : q < 3) {
#pragma unroll
    for (int h = 0; h < kH; ++h)
      x.ahead[slot][h] = load_x(X::at(xr, h) + (kXStep ? X::kStep * (rel + 1) + X::kWord * q
                                                        : X::kStep * rel + X::kWord * (q + 1)));
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
// The A fragments of mmas 2q, 2q+1 (the x-as-A bodies) from word q's activations xc[2 mt + hh] (8
// values of row half hh of m16 tile mt): {row g, row g+8, row g, row g+8} of each m16 tile, its
// registers in order (FP8) or, kPair, its k slots re-paired (i, i+4) as pair_by_four's registers
// 4q..4q+3 (NVFP4). kLoaded: xc holds the fragments already (the fragment order's copy in layout
// kXfragPairedA / kXfragPlainA: xc[2 mt + r] = A fragment r of tile mt).
template <int MT, bool kPair, bool kLoaded = false>
__device__ __forceinline__ void a_fragments(uint32_t (&af)[MT][2][4], const uint4 (&xc)[2 * MT]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if constexpr (kLoaded) {  // (i: the fragment r)
        const uint4 v = xc[2 * mt + i];
        af[mt][i][0] = v.x;
        af[mt][i][1] = v.y;
        af[mt][i][2] = v.z;
        af[mt][i][3] = v.w;
      } else {  // (i: the row half hh)
        const uint4 v = kPair ? pair_word_by_four(xc[2 * mt + i]) : xc[2 * mt + i];
        af[mt][0][i] = v.x;
        af[mt][0][i + 2] = v.y;
        af[mt][1][i] = v.z;
        af[mt][1][i + 2] = v.w;
      }
    }
}
template <int MT, bool kLoaded = false>
__device__ __forceinline__ void nvfp4_a_fragments(uint32_t (&af)[MT][2][4], const uint4 (&xc)[2 * MT]) {
  a_fragments<MT, true, kLoaded>(af, xc);
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
