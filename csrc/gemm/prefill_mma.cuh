// The tile machinery shared by the tensor-core prefill kernels (fp8_prefill_kernel.cu,
// nvfp4_prefill_kernel.cu: more than 32 rows of x against a quantized weight) and the output head's
// tiles kernel (head_tiles.cuh: 1..32 rows, a 16-bit weight): mma.sync m16n8k16 with fp32
// accumulators. Torch-free.
//
// A CTA of 8 warps computes BM = 32 MT rows x 128 output columns: 2 x 4 warps of 16 MT rows x 32
// columns (MT m16 tiles x 4 n8 tiles: 4 MT mma per k16 step). K streams through W::kStages
// shared-memory stages of kBK = 64 (cp.async): while stage kt is multiplied, stages kt + 1 ..
// kt + kStages - 1 are in flight (the copy of stage kt + kStages - 1 goes out right after the
// barrier that ends the use of its buffer). Per stage:
//   1. wait for stage kt, barrier;
//   2. issue the copies of stage kt + kStages - 1;
//   3. (W::kB == BFrom::kDecoded) every thread decodes its share of the stage's weights (W::decode:
//      16 pairs a thread) into the 16-bit weight tile, exactly; barrier;
//   4. the mma steps: A fragments by ldmatrix.x4; B fragments by ldmatrix.x4 from a 16-bit tile
//      (the decoded one, or the stage itself for a 16-bit weight: BFrom::kStage) or decoded by each
//      warp from the raw stage into registers (BFrom::kRegisters, W::b_frags).
// Decoding once per CTA (kDecoded) halves the decode work (in registers each warp-row decodes its own
// copy, and each lane the scales of its rows) for a second barrier a stage and 16 KB: measured in
// session 12 (benchmarks/lab/prefill_ab.py on the H200), 5% faster for NVFP4 (where the decode and
// scales are the larger share), 15% slower for FP8 (a 4-instruction decode a pair, no scales, and
// one stage less to stay within 99 KB).
//   x tile and 16-bit weight tile: row r (BM, or 128 weight rows) of 8 16-byte chunks (8 elements),
//           chunk c at position c ^ (r % 8): ldmatrix.x4 reads 8 rows of one logical chunk from 8
//           different bank groups. The weight tile [n][k] read without transposition gives B
//           fragments (b0 = k 2t..2t+1 of column g is row g's elements 2t, 2t+1).
//   raw weight stage: the format's layout (W::load, W::decode).
// Chunks past M, N or K are zero-filled by cp.async (their products are zeros); rows and columns
// past the edges are never stored.
//
// The weight policy W provides:
//   kStages, kStageBytes, kB          stages, its raw bytes of one stage, and where B comes from
//   kUnroll                           k16 steps unrolled at a time (registers against hoisting)
//   load(ws, kt)                      issue the cp.async copies of K tile kt into ws (every thread calls)
//   decode(ws, wt)                    (kDecoded) its share of the landed stage ws into the 16-bit tile wt
//   b_frags(ws, k16, bf)              (kRegisters) the B fragments of step k16 (0..3) of the stage for this
//                                     thread's 4 n8 tiles (columns wn * 32 + nt * 8 + g)
//   sums(acc, kt) -> float[MT][4][4]& the accumulators tile kt's products go to
//   tile_end(kt, nkt, acc)            after the tile's products (e.g. a block scale)
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common/cp_async.cuh"
#include "common/launch.cuh"
#include "common/ldmatrix.cuh"
#include "common/mma.cuh"
#include "gemm/nvfp4_linear_launch.h"  // Out

namespace qwen38::gemm::prefill {

constexpr int kBN = 128;           // output columns of a CTA
constexpr int kBK = 64;            // K of one stage
constexpr int kThreads = 256;      // 8 warps: 2 (rows) x 4 (columns)
constexpr int kWTileBytes = kBN * kBK * 2;  // the decoded 16-bit weight tile

// Where a weight policy's B fragments come from (the main loop's step 4).
enum class BFrom { kRegisters, kDecoded, kStage };

template <int MT> struct Tile {
  static constexpr int kBM = 32 * MT;                 // rows of a CTA
  static constexpr int kXBytes = kBM * kBK * 2;       // 16-bit x of one stage
};

// Where a thread's fragments sit: warp (wm, wn) and lane (g, t).
struct Lane {
  int tid, lane, wm, wn, g, t;
  __device__ __forceinline__ Lane() {
    tid = threadIdx.x;
    lane = tid & 31;
    const int warp = tid >> 5;
    wm = warp & 1;
    wn = warp >> 1;
    g = lane >> 2;
    t = lane & 3;
  }
};

__device__ __forceinline__ int x_off(int r, int c) { return r * (kBK * 2) + ((c ^ (r & 7)) << 4); }

using ::qwen38::ldmatrix_x4;  // common/ldmatrix.cuh

// The copies of a K tile (kBK) of ROWS rows of a 16-bit row-major operand by THREADS threads (x; the
// head's weight): ROWS x 8 chunks of 16 bytes, ROWS * 8 / THREADS a thread, all in chunk column
// tid % 8, rows tid / 8 + (THREADS / 8) i: the row pointers and their checks are made once, a tile adds
// kt * kBK. THREADS / 8 is a multiple of 8, so a thread's rows share one swizzle (r % 8). Rows
// 16-byte aligned, K a multiple of 8.
template <int ROWS, int THREADS, typename T> struct RowLoader {
  static constexpr int kPer = ROWS * 8 / THREADS;
  static constexpr int kRowStep = THREADS / 8;
  static_assert(ROWS * 8 % THREADS == 0 && kRowStep % 8 == 0 && kPer <= 32, "whole copies, one swizzle a thread");
  const T* base;   // this thread's first chunk (row r0 + tid / 8, column 8 (tid % 8)), or src
  const T* src;
  int64_t step;    // elements between the thread's rows (kRowStep rows)
  int64_t k;
  int col, so;     // chunk column (elements); smem offset of chunk 0 (the others: + kRowStep i rows)
  uint32_t rows_ok;  // bit i: row i inside `rows`

  __device__ __forceinline__ RowLoader(const T* src_, int64_t stride, int64_t rows, int64_t k_, int64_t r0, int tid)
      : src(src_), step(kRowStep * stride), k(k_) {
    const int r = tid >> 3, c = tid & 7;
    col = 8 * c;
    rows_ok = 0;
#pragma unroll
    for (int i = 0; i < kPer; ++i) rows_ok |= (r0 + r + kRowStep * i < rows ? 1u : 0u) << i;
    base = src_ + (r0 + r < rows ? (r0 + r) * stride : 0) + col;
    so = x_off(r, c);
  }
  __device__ __forceinline__ void load(unsigned char* s, int kt) const {
    const int64_t k0 = int64_t(kt) * kBK;
    const bool kok = k0 + col < k;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const bool ok = kok && ((rows_ok >> i) & 1u);
      // kRowStep i rows down: the same swizzle (r % 8 unchanged), kRowStep i * kBK * 2 bytes further
      cp_async16(s + so + i * kRowStep * kBK * 2, ok ? base + i * step + k0 : src, ok ? 16 : 0);
    }
  }
};

// x's K tile of 32 MT rows (and the head's 128 weight rows as 32 x 4) by the kThreads of a CTA.
template <int MT, typename T> using XLoader = RowLoader<32 * MT, kThreads, T>;

// The B fragments of step k16 of a 16-bit weight tile (128 rows of 64 k, x_off layout) for the 4 n8
// tiles of a lane's warp column: two ldmatrix.x4, each two n8 tiles' (b0, b1). b_row / b_chunk: the
// lane's row and chunk offset (L.wn * 32 + (lane / 16) * 8 + lane % 8, (lane / 8) % 2).
__device__ __forceinline__ void tile_b_frags(const unsigned char* tile, int b_row, int b_chunk, int k16,
                                             uint32_t (&bf)[4][2]) {
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    uint32_t r[4];
    ldmatrix_x4(r, smem_addr(tile + x_off(b_row + 16 * j, 2 * k16 + b_chunk)));
    bf[2 * j][0] = r[0];
    bf[2 * j][1] = r[1];
    bf[2 * j + 1][0] = r[2];
    bf[2 * j + 1][1] = r[3];
  }
}

// Shared memory of the main loop: W::kStages stages of x and raw weights, then the weight tile.
template <int MT, class W> constexpr int smem_bytes() {
  return W::kStages * (Tile<MT>::kXBytes + W::kStageBytes) + (W::kB == BFrom::kDecoded ? kWTileBytes : 0);
}

// The main loop: acc[mt][nt] (rows m0 + wm * 16 MT + mt * 16 + {g, g + 8}, columns n0 + wn * 32 +
// nt * 8 + {2t, 2t + 1}) as W directs, over the K tiles [kt0, kt1) (kt1 < 0: to the end of K; a
// split of K for the labs). smem: smem_bytes<MT, W>().
template <int MT, typename T, class W>
__device__ __forceinline__ void mainloop(const T* x, int64_t x_stride, int64_t m, int64_t k, int64_t m0, W& w,
                                         unsigned char* smem, float (&acc)[MT][4][4], int kt0 = 0, int kt1 = -1) {
  constexpr int kS = W::kStages, kX = Tile<MT>::kXBytes, kStage = kX + W::kStageBytes;
  const Lane L;
  const int nkt = kt1 < 0 ? int((k + kBK - 1) / kBK) : kt1;
  const XLoader<MT, T> xl(x, x_stride, m, k, m0, L.tid);
  unsigned char* wt = smem + kS * kStage;
  auto load = [&](int kt) {
    unsigned char* st = smem + (kt % kS) * kStage;
    xl.load(st, kt);
    w.load(st + kX, kt);
  };
#pragma unroll
  for (int s = 0; s < kS - 1; ++s) {
    if (kt0 + s < nkt) load(kt0 + s);
    cp_async_commit();
  }
  // ldmatrix rows of this lane: A (tile mt: + mt * 16) and B (n8 tiles 2j, 2j + 1: + j * 16)
  const int a_row = L.wm * 16 * MT + ((L.lane >> 3) & 1) * 8 + (L.lane & 7), a_chunk = L.lane >> 4;
  const int b_row = L.wn * 32 + (L.lane >> 4) * 8 + (L.lane & 7), b_chunk = (L.lane >> 3) & 1;
  for (int kt = kt0; kt < nkt; ++kt) {
    cp_async_wait<kS - 2>();  // every group but the newest kS - 2: tile kt has landed
    __syncthreads();          // ... for every thread; tile kt - 1's buffers (and wt) are free
    if (kt + kS - 1 < nkt) load(kt + kS - 1);
    cp_async_commit();
    const unsigned char* xs = smem + (kt % kS) * kStage;
    if constexpr (W::kB == BFrom::kDecoded) {
      w.decode(xs + kX, wt);
      __syncthreads();        // the weight tile is whole
    }
    float(&c)[MT][4][4] = w.sums(acc, kt);
    // W::kUnroll k16 steps at a time (fully unrolled, ptxas hoists the fragments of all four steps:
    // 162 registers for the NVFP4 kernel at MT 4, where two CTAs an SM allow 128)
#pragma unroll(W::kUnroll)
    for (int k16 = 0; k16 < kBK / 16; ++k16) {
      uint32_t bf[4][2];
      if constexpr (W::kB == BFrom::kDecoded) {
        tile_b_frags(wt, b_row, b_chunk, k16, bf);
      } else if constexpr (W::kB == BFrom::kStage) {
        tile_b_frags(xs + kX, b_row, b_chunk, k16, bf);
      } else {
        w.b_frags(xs + kX, k16, bf);
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        uint32_t af[4];
        ldmatrix_x4(af, smem_addr(xs + x_off(a_row + mt * 16, 2 * k16 + a_chunk)));
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) mma_16816<T>(c[mt][nt], af, bf[nt][0], bf[nt][1]);
      }
    }
    w.tile_end(kt, nkt, acc);
  }
  cp_async_wait<0>();  // only empty groups are left; nothing in flight at exit
}

__device__ __forceinline__ float bias_at(const void* bias, int dt, int64_t n) {
  if (dt == 0) return __bfloat162float(static_cast<const __nv_bfloat16*>(bias)[n]);
  if (dt == 1) return __half2float(static_cast<const __half*>(bias)[n]);
  return static_cast<const float*>(bias)[n];
}

// y[m, n] = round(f(acc) (+ bias in fp32, one rounding)) for the tile's elements inside M x N.
// OUT: 0 bf16, 1 fp16, 2 fp32 (gemm::Out). f: the format's fp32 epilogue before the bias.
template <int OUT, int MT, class F>
__device__ __forceinline__ void store(const float (&acc)[MT][4][4], void* y, const void* bias, int bias_dtype,
                                      int64_t m, int64_t n, int64_t m0, int64_t n0, F f) {
  const Lane L;
  // Elements 2h and 2h + 1 of a fragment are columns c and c + 1 of one row (c even): one 8-byte
  // (fp32) or 4-byte (16-bit) store where both are in range and the pair is aligned (n even, y
  // aligned to a pair).
  const bool pairs = (n & 1) == 0 && reinterpret_cast<uintptr_t>(y) % (OUT == 2 ? 8 : 4) == 0;
  auto put = [y](int64_t at, float v) {  // one element, rounded once to the output type
    if constexpr (OUT == 2) static_cast<float*>(y)[at] = v;
    else if constexpr (OUT == 1) static_cast<__half*>(y)[at] = __float2half_rn(v);
    else static_cast<__nv_bfloat16*>(y)[at] = __float2bfloat16_rn(v);
  };
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t row = m0 + L.wm * 16 * MT + mt * 16 + L.g + h * 8;
        const int64_t col = n0 + L.wn * 32 + nt * 8 + 2 * L.t;
        if (row >= m || col >= n) continue;
        float v0 = f(acc[mt][nt][2 * h]), v1 = f(acc[mt][nt][2 * h + 1]);
        if (bias != nullptr) {
          v0 = __fadd_rn(v0, bias_at(bias, bias_dtype, col));
          if (col + 1 < n) v1 = __fadd_rn(v1, bias_at(bias, bias_dtype, col + 1));
        }
        const int64_t at = row * n + col;
        if (pairs && col + 1 < n) {
          if constexpr (OUT == 2) *reinterpret_cast<float2*>(static_cast<float*>(y) + at) = make_float2(v0, v1);
          else if constexpr (OUT == 1) *reinterpret_cast<__half2*>(static_cast<__half*>(y) + at) = __floats2half2_rn(v0, v1);
          else *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(y) + at) = __floats2bfloat162_rn(v0, v1);
          continue;
        }
        put(at, v0);
        if (col + 1 < n) put(at + 1, v1);
      }
}

// The launch of a prefill kernel family K (K::kernel<T, OUT, MT>() -> the __global__ function taking
// P, K::Weight<MT> -> its weight policy, which sizes the dynamic shared memory): grid (row tiles, 128-column tiles), kThreads; tiles
// of p.tile_rows rows (0: 64 up to 64 rows, else 128; 256, the wgmma form's largest, runs as 128),
// OUT from p.out, T from bf16.
template <class K, typename T, int OUT, int MT, class P>
cudaError_t launch_tiles(const P& p, bool pdl, cudaStream_t stream) {
  auto kernel = K::template kernel<T, OUT, MT>();
  constexpr int kSmem = smem_bytes<MT, typename K::template Weight<MT>>();
  static_assert(kSmem <= 99 * 1024, "the stages fit sm_121a's 99 KB");
  // above the default 48 KB a block must opt in (per device; not a stream operation)
  const cudaError_t attr = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (attr != cudaSuccess) return attr;
  constexpr int kBM = Tile<MT>::kBM;
  const dim3 grid(unsigned((p.m + kBM - 1) / kBM), unsigned((p.n + kBN - 1) / kBN));
  return launch_kernel(kernel, grid, dim3(kThreads), size_t(kSmem), stream, pdl, p);
}

template <class K, typename T, int OUT, class P>
cudaError_t launch_rows(const P& p, bool pdl, cudaStream_t stream) {
  const int rows = p.tile_rows != 0 ? p.tile_rows : p.m <= 64 ? 64 : 128;
  return rows == 64 ? launch_tiles<K, T, OUT, 2>(p, pdl, stream) : launch_tiles<K, T, OUT, 4>(p, pdl, stream);
}

template <class K, typename T, class P>
cudaError_t launch_out(const P& p, bool pdl, cudaStream_t stream) {
  switch (p.out) {
    case int(Out::kF32): return launch_rows<K, T, int(Out::kF32)>(p, pdl, stream);
    case int(Out::kF16): return launch_rows<K, T, int(Out::kF16)>(p, pdl, stream);
    default: return launch_rows<K, T, int(Out::kBF16)>(p, pdl, stream);
  }
}

template <class K, class P>
cudaError_t launch(bool bf16, const P& p, bool pdl, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0) return cudaSuccess;
  if ((p.n + kBN - 1) / kBN > 65535) return cudaErrorInvalidValue;
  return bf16 ? launch_out<K, __nv_bfloat16>(p, pdl, stream) : launch_out<K, __half>(p, pdl, stream);
}

}  // namespace qwen38::gemm::prefill
