// Instantiations and launch of the fp8_block_linear skinny kernel (see fp8_block_linear_kernel.cuh).
#include "gemm/fp8_block_linear_kernel.cuh"
#include "gemm/skinny_launch.cuh"

namespace qwen38::gemm {
namespace {
template <typename T, typename O, int MT, int KS>
struct Fp8BlockKernel {
  static constexpr auto fn = fp8_block_skinny_kernel<T, O, MT, KS>;
};
}  // namespace

cudaError_t launch_fp8_block_skinny(Act act, Out out, const Fp8BlockParams& p, bool pdl, cudaStream_t stream) {
  return launch_skinny<Fp8BlockKernel>(act, out, p, pdl, stream);  // k split: the NVFP4 rule, (N, K) only
}

}  // namespace qwen38::gemm
