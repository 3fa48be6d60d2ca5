// fp8_block_linear's tensor-core prefill strategy ("mma", QWEN38_FP8_PREFILL): more than 32 rows.
//
// The contract's arithmetic, tiled: for each 128-wide K block, the 16-bit products of x and the
// exactly decoded e4m3 weights are summed in fp32 by mma.sync (m16n8k16, fp32 accumulate) into a
// block sum that starts at zero; the block's scale multiplies that sum (one rounding) and the term
// is added to the output's fp32 accumulator (one rounding), blocks in increasing K; the epilogue
// adds the bias (one rounding) and rounds once to the output type. Within
// reference.fp8_block_linear_f64_bound; not row-invariant against the 1..32-row kernels (another
// order inside a block).
//
// Tiles and stages: prefill_mma.cuh (a CTA computes 32 MT rows x 128 columns: one scale row, as the
// column tile is 128-aligned, so every K block has one scalar scale; K streams in stages of 64, two
// per scale block). MT 2 (64 rows) serves up to 64 rows, MT 4 (128 rows) more.
//   w tile: row n (128) of 4 16-byte chunks (16 e4m3 = one k16 step), chunk c at position
//           c ^ ((n / 2) % 4): the 8 rows of an n8 tile read one k16 step from 8 different
//           4-bank groups.
// B fragments (w) are two 16-bit reads a lane (k 2t..2t+1 and 2t+8..2t+9 of row g), converted
// exactly: cvt.rn.f16x2.e4m3x2, and for bf16 x through fp32 to bf16x2 (e4m3 is a subset of both).
// K is a multiple of 16 (a stage past K is zero-filled). The grid runs the row tiles of one column
// tile next to each other (blockIdx.x = row tile), so the weight tile is read from DRAM about once
// and x stays in L2.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common/cp_async.cuh"
#include "common/launch.cuh"
#include "common/mma.cuh"
#include "common/nvfp4.cuh"
#include "common/pdl.cuh"
#include "common/vec.cuh"
#include "gemm/fp8_block_linear_launch.h"
#include "gemm/prefill_mma.cuh"

namespace qwen38::gemm {
namespace {

using prefill::kBK;
using prefill::kBN;
using prefill::kThreads;

// Two e4m3 bytes (low byte = lower k) -> the B register for x's type, exactly.
template <typename T> __device__ __forceinline__ uint32_t b_pair(uint16_t two);
template <> __device__ __forceinline__ uint32_t b_pair<__half>(uint16_t two) {
  return nvfp4::as_u32(nvfp4::e4m3x2_to_h2(two));
}
template <> __device__ __forceinline__ uint32_t b_pair<__nv_bfloat16>(uint16_t two) {
  const float2 f = __half22float2(nvfp4::e4m3x2_to_h2(two));  // exact
  return nvfp4::as_u32(__floats2bfloat162_rn(f.x, f.y));       // exact: at most 4 significant bits
}

__device__ __forceinline__ int w_off(int n, int c) { return n * kBK + ((c ^ ((n >> 1) & 3)) << 4); }

// The e4m3 weight of prefill_mma.cuh's main loop: block sums in blk, folded into acc with the
// block's scale after the second stage of each 128-wide block (or the last stage).
template <typename T, int MT> struct Fp8Weight {
  static constexpr int kStages = 4;              // 4 x (x + 8 KB): 96 KB at MT 4
  static constexpr int kStageBytes = kBN * kBK;  // 8 KB
  static constexpr bool kSmemB = false;          // B decoded by each warp into registers
  static constexpr int kUnroll = 4;
  const uint8_t* w;   // this thread's first chunk (row n0 + tid / 4, k 16 (tid % 4)), or the weight
  const uint8_t* w0;
  int64_t n, k;
  const float* srow;  // the scale row of this column tile
  prefill::Lane L;
  int col, rows_ok, so;  // chunk k offset; bit i: row i (64 i further) inside N; smem offset of chunk 0
  float blk[MT][4][4];

  __device__ __forceinline__ Fp8Weight(const uint8_t* w_, int64_t n_, int64_t k_, int64_t n0, const float* srow_)
      : w0(w_), n(n_), k(k_), srow(srow_) {
    const int r = L.tid >> 2, c = L.tid & 3;
    col = 16 * c;
    rows_ok = (n0 + r < n ? 1 : 0) | (n0 + r + 64 < n ? 2 : 0);
    w = w_ + (n0 + r < n ? (n0 + r) * k : 0) + col;
    so = w_off(r, c);  // row r + 64: the same swizzle ((r / 2) % 4 unchanged), 64 kBK bytes further
  }
  __device__ __forceinline__ void load(unsigned char* ws, int kt) const {
    const int64_t k0 = int64_t(kt) * kBK;
    const bool kok = k0 + col < k;
#pragma unroll
    for (int i = 0; i < 2; ++i) {  // 2 chunks a thread
      const bool ok = kok && ((rows_ok >> i) & 1);
      cp_async16(ws + so + i * 64 * kBK, ok ? w + i * 64 * k + k0 : w0, ok ? 16 : 0);
    }
  }
  __device__ __forceinline__ void b_frags(const unsigned char* ws, int k16, uint32_t (&bf)[4][2]) const {
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const unsigned char* wr = ws + w_off(L.wn * 32 + nt * 8 + L.g, k16);
      bf[nt][0] = b_pair<T>(*reinterpret_cast<const uint16_t*>(wr + 2 * L.t));
      bf[nt][1] = b_pair<T>(*reinterpret_cast<const uint16_t*>(wr + 8 + 2 * L.t));
    }
  }
  using Acc = float[MT][4][4];
  __device__ __forceinline__ Acc& sums(Acc&, int kt) {
    if ((kt & 1) == 0) zero_fill(blk);
    return blk;
  }
  __device__ __forceinline__ void tile_end(int kt, int nkt, Acc& acc) const {
    if ((kt & 1) == 0 && kt + 1 < nkt) return;  // the block's second stage follows
    const float s = srow[kt >> 1];
#pragma unroll
    for (int a = 0; a < MT; ++a)
#pragma unroll
      for (int b = 0; b < 4; ++b)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[a][b][i] = __fadd_rn(acc[a][b][i], __fmul_rn(blk[a][b][i], s));
  }
};

template <int MT> constexpr int smem_bytes() { return prefill::smem_bytes<MT, Fp8Weight<__half, MT>>(); }
static_assert(smem_bytes<4>() <= 99 * 1024, "the stages fit sm_121a's 99 KB");

// MT 2: two CTAs an SM where the shared memory allows (64 KB each on sm_90a).
template <typename T, int OUT, int MT>
__global__ void __launch_bounds__(kThreads, MT == 2 ? 2 : 1) fp8_prefill_kernel(const Fp8BlockParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int64_t m0 = int64_t(blockIdx.x) * prefill::Tile<MT>::kBM, n0 = int64_t(blockIdx.y) * kBN;

  pdl_wait();   // x may come from the previous kernel
  pdl_allow();

  Fp8Weight<T, MT> w(p.w, p.n, p.k, n0, p.scale + (n0 / 128) * ((p.k + 127) / 128));
  float acc[MT][4][4];
  zero_fill(acc);
  prefill::mainloop<MT>(static_cast<const T*>(p.x), p.x_stride, p.m, p.k, m0, w, smem, acc);
  prefill::store<OUT>(acc, p.y, p.bias, p.bias_dtype, p.m, p.n, m0, n0, [](float v) { return v; });
}

struct Kernels {
  template <typename T, int OUT, int MT> static constexpr auto kernel() { return fp8_prefill_kernel<T, OUT, MT>; }
  template <int MT> static constexpr int smem() { return smem_bytes<MT>(); }
};

}  // namespace

cudaError_t launch_fp8_prefill(Act act, const Fp8BlockParams& p, bool pdl, cudaStream_t stream) {
  if (p.m != 0 && p.n != 0 && (p.k <= 0 || p.k % 16 != 0)) return cudaErrorInvalidValue;
  return prefill::launch<Kernels>(act == Act::kBF16, p, pdl, stream);
}

}  // namespace qwen38::gemm
