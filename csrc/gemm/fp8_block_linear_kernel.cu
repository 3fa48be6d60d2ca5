// Instantiations and launch of the fp8_block_linear skinny kernel (see fp8_block_linear_kernel.cuh).
#include "common/launch.cuh"
#include "gemm/fp8_block_linear_kernel.cuh"

namespace qwen38::gemm {
namespace {

template <typename T, typename O, int MT>
cudaError_t launch_mt(const Fp8BlockParams& p, bool pdl, cudaStream_t stream) {
  const dim3 grid(unsigned((p.n + 7) / 8));
  switch (skinny_k_split(p.n, p.k)) {  // the NVFP4 rule: a function of (N, K) only
    case 1: return launch_kernel(fp8_block_skinny_kernel<T, O, MT, 1>, grid, dim3(32), 0, stream, pdl, p);
    case 2: return launch_kernel(fp8_block_skinny_kernel<T, O, MT, 2>, grid, dim3(64), 0, stream, pdl, p);
    case 4: return launch_kernel(fp8_block_skinny_kernel<T, O, MT, 4>, grid, dim3(128), 0, stream, pdl, p);
    default: return launch_kernel(fp8_block_skinny_kernel<T, O, MT, 8>, grid, dim3(256), 0, stream, pdl, p);
  }
}

template <typename T, typename O>
cudaError_t launch_out(const Fp8BlockParams& p, bool pdl, cudaStream_t stream) {
  return p.m <= 16 ? launch_mt<T, O, 1>(p, pdl, stream) : launch_mt<T, O, 2>(p, pdl, stream);
}

template <typename T>
cudaError_t launch_act(Out out, const Fp8BlockParams& p, bool pdl, cudaStream_t stream) {
  switch (out) {
    case Out::kBF16: return launch_out<T, __nv_bfloat16>(p, pdl, stream);
    case Out::kF16: return launch_out<T, __half>(p, pdl, stream);
    case Out::kF32: return launch_out<T, float>(p, pdl, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_fp8_block_skinny(Act act, Out out, const Fp8BlockParams& p, bool pdl, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0) return cudaSuccess;
  if (p.m > kSkinnyMaxRows) return cudaErrorInvalidValue;
  return act == Act::kBF16 ? launch_act<__nv_bfloat16>(out, p, pdl, stream)
                           : launch_act<__half>(out, p, pdl, stream);
}

}  // namespace qwen38::gemm
