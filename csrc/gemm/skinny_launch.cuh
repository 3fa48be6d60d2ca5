// Launch of a skinny weight-GEMM kernel family (nvfp4_linear, fp8_block_linear): picks the
// activation type, output type, m16 tiles (rows 1..16 or 17..32) and the k split (a function of
// N and K only: row invariance). KernelOf<T, O, MT, KSPLIT>::fn names one instantiation.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/launch.cuh"
#include "gemm/nvfp4_linear_launch.h"

namespace qwen38::gemm {

template <template <typename, typename, int, int> class KernelOf, typename T, typename O, int MT, typename P>
cudaError_t launch_skinny_mt(const P& p, bool pdl, cudaStream_t stream) {
  const dim3 grid(unsigned((p.n + 7) / 8));
  switch (skinny_k_split(p.n, p.k)) {
    case 1: return launch_kernel(KernelOf<T, O, MT, 1>::fn, grid, dim3(32), 0, stream, pdl, p);
    case 2: return launch_kernel(KernelOf<T, O, MT, 2>::fn, grid, dim3(64), 0, stream, pdl, p);
    case 4: return launch_kernel(KernelOf<T, O, MT, 4>::fn, grid, dim3(128), 0, stream, pdl, p);
    default: return launch_kernel(KernelOf<T, O, MT, 8>::fn, grid, dim3(256), 0, stream, pdl, p);
  }
}

template <template <typename, typename, int, int> class KernelOf, typename T, typename O, typename P>
cudaError_t launch_skinny_out(const P& p, bool pdl, cudaStream_t stream) {
  return p.m <= 16 ? launch_skinny_mt<KernelOf, T, O, 1>(p, pdl, stream)
                   : launch_skinny_mt<KernelOf, T, O, 2>(p, pdl, stream);
}

template <template <typename, typename, int, int> class KernelOf, typename T, typename P>
cudaError_t launch_skinny_act(Out out, const P& p, bool pdl, cudaStream_t stream) {
  switch (out) {
    case Out::kBF16: return launch_skinny_out<KernelOf, T, __nv_bfloat16>(p, pdl, stream);
    case Out::kF16: return launch_skinny_out<KernelOf, T, __half>(p, pdl, stream);
    case Out::kF32: return launch_skinny_out<KernelOf, T, float>(p, pdl, stream);
  }
  return cudaErrorInvalidValue;
}

template <template <typename, typename, int, int> class KernelOf, typename P>
cudaError_t launch_skinny(Act act, Out out, const P& p, bool pdl, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0) return cudaSuccess;
  if (p.m > kSkinnyMaxRows) return cudaErrorInvalidValue;
  return act == Act::kBF16 ? launch_skinny_act<KernelOf, __nv_bfloat16>(out, p, pdl, stream)
                           : launch_skinny_act<KernelOf, __half>(out, p, pdl, stream);
}

}  // namespace qwen38::gemm
