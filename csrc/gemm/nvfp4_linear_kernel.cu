// Instantiations and launch of the nvfp4_linear skinny kernel (see nvfp4_linear_kernel.cuh).
#include "gemm/nvfp4_linear_kernel.cuh"
#include "gemm/skinny_launch.cuh"

namespace qwen38::gemm {
namespace {
template <typename T, int MT, int KS, int NT>
struct Nvfp4Kernel {
  static constexpr auto fn = nvfp4_skinny_kernel<T, MT, KS, NT>;
};
}  // namespace

cudaError_t launch_nvfp4_skinny(Act act, const Nvfp4Params& p, const SkinnyVariant& v, bool pdl,
                                cudaStream_t stream) {
  return launch_skinny<Nvfp4Kernel>(act, p, v, pdl, stream);
}

}  // namespace qwen38::gemm
