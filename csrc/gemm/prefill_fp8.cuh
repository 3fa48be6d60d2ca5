// The e4m3 weight policy of the FP8 tensor-core prefill kernel (fp8_prefill_kernel.cu; the labs
// include it too): see that file for the layout and the arithmetic. Torch-free.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common/cp_async.cuh"
#include "common/nvfp4.cuh"
#include "common/vec.cuh"
#include "gemm/prefill_mma.cuh"

namespace qwen38::gemm::prefill_fp8 {

using prefill::kBK;
using prefill::kBN;
using prefill::kThreads;

__device__ __forceinline__ int w_off(int n, int c) { return n * kBK + ((c ^ ((n >> 1) & 3)) << 4); }

// The e4m3 weight of prefill_mma.cuh's main loop: block sums in blk, folded into acc with the
// block's scale after the second stage of each 128-wide block (or the last stage).
template <typename T, int MT> struct Fp8Weight {
  static constexpr int kStages = 4;              // 4 x (x + 8 KB): 96 KB at MT 4
  static constexpr int kStageBytes = kBN * kBK;  // 8 KB
  static constexpr prefill::BFrom kB = prefill::BFrom::kRegisters;  // decoded by each warp
  static constexpr int kUnroll = 4;
  const uint8_t* w;   // this thread's first chunk (row n0 + tid / 4, k 16 (tid % 4)), or the weight
  const uint8_t* w0;
  int64_t k;
  const float* srow;  // the scale row of this column tile
  prefill::Lane L;
  int col, rows_ok, so;  // chunk k offset; bit i: row i (64 i further) inside N; smem offset of chunk 0
  float blk[MT][4][4];

  __device__ __forceinline__ Fp8Weight(const uint8_t* w_, int64_t n_, int64_t k_, int64_t n0, const float* srow_)
      : w0(w_), k(k_), srow(srow_) {
    const int r = L.tid >> 2, c = L.tid & 3;
    col = 16 * c;
    rows_ok = (n0 + r < n_ ? 1 : 0) | (n0 + r + 64 < n_ ? 2 : 0);
    w = w_ + (n0 + r < n_ ? (n0 + r) * k : 0) + col;
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
      bf[nt][0] = nvfp4::e4m3x2_to<T>(*reinterpret_cast<const uint16_t*>(wr + 2 * L.t));
      bf[nt][1] = nvfp4::e4m3x2_to<T>(*reinterpret_cast<const uint16_t*>(wr + 8 + 2 * L.t));
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

}  // namespace qwen38::gemm::prefill_fp8
