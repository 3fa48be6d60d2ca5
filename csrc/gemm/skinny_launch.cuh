// Launch of a skinny weight-GEMM kernel family (nvfp4_linear, fp8_block_linear): picks the
// activation type, the m16 tiles (rows 1..16 or 17..32), the k split and the tiles per warp of the
// variant (skinny_variants.h). KernelOf<T, MT, KSPLIT, NT>::fn names one instantiation (the output
// dtype is a runtime parameter of the kernel); ::kDynamicSmem says whether it uses dynamic shared
// memory and ::prepare(P&, limit) fills the launch-only parameters and returns its size.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common/launch.cuh"
#include "gemm/nvfp4_linear_launch.h"
#include "gemm/skinny_variants.h"

namespace qwen38::gemm {

// One instantiation: K::prepare(p, limit) settles the launch details that change no bit (the
// NVFP4 ring depth) and returns the dynamic shared memory the launch needs.
template <template <typename, int, int, int> class KernelOf, typename T, int MT, int KS, int NT, typename P>
cudaError_t launch_skinny_one(P p, bool pdl, cudaStream_t stream) {
  using K = KernelOf<T, MT, KS, NT>;
  size_t limit = 48 * 1024;
  if (K::kDynamicSmem)
    if (cudaError_t e = dynamic_smem_room(K::fn, &limit)) return e;
  const size_t smem = K::prepare(p, limit);
  if (smem > limit) return cudaErrorInvalidValue;
  const dim3 grid(unsigned((p.n + 8 * NT - 1) / (8 * NT)));
  size_t launch_smem = smem;  // QWEN38_SPREAD (launch.cuh)
  if (cudaError_t e = spread_smem(K::fn, 32 * KS, smem, grid.x, &launch_smem)) return e;
  return launch_kernel(K::fn, grid, dim3(32 * KS), launch_smem, stream, pdl, p);
}

template <template <typename, int, int, int> class KernelOf, typename T, int MT, int KS, typename P>
cudaError_t launch_skinny_nt(const P& p, int nt, bool pdl, cudaStream_t stream) {
  switch (nt) {
    case 1: return launch_skinny_one<KernelOf, T, MT, KS, 1>(p, pdl, stream);
    case 2: return launch_skinny_one<KernelOf, T, MT, KS, 2>(p, pdl, stream);
    case 4: return launch_skinny_one<KernelOf, T, MT, KS, 4>(p, pdl, stream);
  }
  return cudaErrorInvalidValue;
}

template <template <typename, int, int, int> class KernelOf, typename T, int MT, typename P>
cudaError_t launch_skinny_ks(const P& p, const SkinnyVariant& v, bool pdl, cudaStream_t stream) {
  const int nt = MT == 1 ? v.nt_narrow : v.nt_wide;
  switch (v.ksplit) {
    case 1: return launch_skinny_nt<KernelOf, T, MT, 1>(p, nt, pdl, stream);
    case 2: return launch_skinny_nt<KernelOf, T, MT, 2>(p, nt, pdl, stream);
    case 4: return launch_skinny_nt<KernelOf, T, MT, 4>(p, nt, pdl, stream);
    case 8: return launch_skinny_nt<KernelOf, T, MT, 8>(p, nt, pdl, stream);
  }
  return cudaErrorInvalidValue;
}

template <template <typename, int, int, int> class KernelOf, typename T, typename P>
cudaError_t launch_skinny_mt(const P& p, const SkinnyVariant& v, bool pdl, cudaStream_t stream) {
  return p.m <= 16 ? launch_skinny_ks<KernelOf, T, 1>(p, v, pdl, stream)
                   : launch_skinny_ks<KernelOf, T, 2>(p, v, pdl, stream);
}

template <template <typename, int, int, int> class KernelOf, typename P>
cudaError_t launch_skinny(Act act, const P& p, const SkinnyVariant& v, bool pdl, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0) return cudaSuccess;
  if (p.m > kSkinnyMaxRows || !skinny_variant_valid(v)) return cudaErrorInvalidValue;
  return act == Act::kBF16 ? launch_skinny_mt<KernelOf, __nv_bfloat16>(p, v, pdl, stream)
                           : launch_skinny_mt<KernelOf, __half>(p, v, pdl, stream);
}

}  // namespace qwen38::gemm
