// Torch-free interface between the fp8_block_linear host launcher and its kernels.
#pragma once

#include <cuda_runtime.h>
#include <cstdint>

#include "gemm/nvfp4_linear_launch.h"  // Act, Out

namespace qwen38::gemm {

struct Fp8BlockParams {
  const void* x = nullptr;        // [M, K] bf16/fp16, row stride x_stride (elements), last dim contiguous
  const uint8_t* w = nullptr;     // [N, K] float8_e4m3fn, contiguous
  const float* scale = nullptr;   // [ceil(N/128), ceil(K/128)] fp32 multipliers, contiguous
  const void* bias = nullptr;     // [N] (x's dtype or fp32) or null
  void* y = nullptr;              // [M, N] contiguous, out dtype
  int64_t m = 0, n = 0, k = 0, x_stride = 0;
  int bias_dtype = 0;             // 0 bf16, 1 fp16, 2 fp32
  int out = 0;                    // y dtype: int(Out)
  int stream = 1;                 // skinny path: 1 = the register-stream kernel where it serves the
                                  // shape (fp8_stream_kernel.cuh), 2 = the same at 1..16 rows only,
                                  // 0 = always the skinny kernel;
                                  // changes no bit
  int cluster = 0;                 // register-stream kernel: CTAs of a cluster sharing an output
                                   // tile's k-split warps, 1/2/4/8 (capped at the k split), 0 = by
                                   // the grid (stream_launch.cuh); changes no bit
  int tile_rows = 0;              // "mma" prefill: rows of a CTA tile, 64 or 128 (0: 64 up to 64
                                  // rows, else 128); changes no bit
};

// A call of the skinny path as the host makes it: the kernels' parameters and what only the launch
// reads (as Nvfp4Launch: the kernels take Fp8BlockParams, never enlarged by these).
struct Fp8Launch : Fp8BlockParams {
  Fp8Launch() = default;
  Fp8Launch(const Fp8BlockParams& p) : Fp8BlockParams(p) {}  // (implicit: a call with no launch-only fields)
  void* xfrag = nullptr;          // register-stream kernel where fp8_frag_serves: a
                                  // buffer of 32 rows of x (K x 32 elements) for x in the fragment
                                  // order (stream_launch.cuh frag), used at xfrag_from rows and
  int xfrag_from = 9;             // more (null: never); changes no bit
  int four = -1;                  // the fragment-order kernel's 3-CTA form at 17..24 rows (K 5120, k
                                  // split 4, 4 tiles a warp; sm_90a): 1 = wherever compiled, 0 = never,
                                  // -1 = by the grid's rounds (stream_launch.cuh use_four); changes no bit
  int xsplit = -1;                // the k-split-across-CTAs kernel (xsplit_kernel.cuh) where compiled for the
                                  // variant: 1 = at every row count, 0 = never, -1 = where its rule takes it
                                  // (xsplit_kernel.cu); changes no bit
};

// v: the launch variant of the weight shape (skinny_variants.h).
cudaError_t launch_fp8_block_skinny(Act act, const Fp8Launch& p, const SkinnyVariant& v, bool pdl,
                                    cudaStream_t stream);

// The register-stream kernel (1..16 rows, K 5120 / 6144 / 17408, N a multiple of 8 nt_narrow, a
// compiled (ksplit, nt_narrow)); launch_fp8_block_skinny takes it where it serves and p.stream is set.
bool fp8_stream_serves(const Fp8BlockParams& p, const SkinnyVariant& v);
// Whether the register-stream kernel of variant v at K k reads x in the fragment order where asked
// (Fp8Launch::xfrag; stream_launch.cuh frag): the host allocates the buffer for those.
bool fp8_frag_serves(int64_t k, const SkinnyVariant& v);
cudaError_t launch_fp8_stream(Act act, const Fp8Launch& p, const SkinnyVariant& v, bool pdl,
                              cudaStream_t stream);
// The k-split-across-CTAs kernel (xsplit_kernel.cuh): the register-stream kernel's bits for K 5120 at k split 4
// and 4 tiles a warp and K 17408 / 6144 at k split 8 and 2 tiles, the k split held by the CTAs of a cluster
// sharing one staged copy of x; launch_fp8_block_skinny takes it where p.xsplit and the rule say so.
bool fp8_xsplit_serves(const Fp8Launch& p, const SkinnyVariant& v);
cudaError_t launch_fp8_xsplit(Act act, const Fp8Launch& p, const SkinnyVariant& v, bool pdl, cudaStream_t stream);

// The "mma" prefill strategy (fp8_prefill_kernel.cu): more than 32 rows through mma.sync tiles of
// 128 rows x 128 columns, the contract's block arithmetic; K a positive multiple of 16; x rows and
// w 16-byte aligned. p.stream is not read.
cudaError_t launch_fp8_prefill(Act act, const Fp8BlockParams& p, bool pdl, cudaStream_t stream);

// The "dequant" prefill strategy's weight split (fp8_split_kernel.cu): rows [0, n) of w and their
// scales into three bf16 terms t0 + t1 + t2 = fp32(e4m3(w) * scale) exactly.
struct Fp8SplitParams {
  const uint8_t* w = nullptr;     // [n, k] float8_e4m3fn rows, contiguous, 16-byte aligned
  const float* scale = nullptr;   // the rows' scale rows: [ceil(n/128), gk] fp32 (n0 a multiple of 128)
  void* t0 = nullptr;             // [n, k] bf16 each, contiguous, 16-byte aligned
  void* t1 = nullptr;
  void* t2 = nullptr;
  int64_t n = 0, k = 0, gk = 0;   // k a positive multiple of 16; gk = ceil(K / 128)
};
cudaError_t launch_fp8_split(const Fp8SplitParams& p, bool pdl, cudaStream_t stream);

}  // namespace qwen38::gemm
