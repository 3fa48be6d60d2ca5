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
#include "gemm/prefill_fp8.cuh"
#include "gemm/prefill_mma.cuh"

namespace qwen38::gemm {
namespace {

using prefill::kBN;
using prefill::kThreads;
using prefill_fp8::Fp8Weight;

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
  template <int MT> using Weight = Fp8Weight<__half, MT>;  // (the layout does not depend on the type)
};

}  // namespace

cudaError_t launch_fp8_prefill(Act act, const Fp8BlockParams& p, bool pdl, cudaStream_t stream) {
  if (p.m != 0 && p.n != 0 && (p.k <= 0 || p.k % 16 != 0)) return cudaErrorInvalidValue;
  return prefill::launch<Kernels>(act == Act::kBF16, p, pdl, stream);
}

}  // namespace qwen38::gemm
