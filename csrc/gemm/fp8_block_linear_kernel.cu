// Instantiations and launch of the fp8_block_linear skinny kernel (see fp8_block_linear_kernel.cuh).
#include "gemm/fp8_block_linear_kernel.cuh"
#include "gemm/skinny_launch.cuh"

namespace qwen38::gemm {
namespace {
template <typename T, int MT, int KS, int NT>
struct Fp8BlockKernel {
  static constexpr auto fn = fp8_block_skinny_kernel<T, MT, KS, NT>;
  static constexpr bool kDynamicSmem = false;
  static size_t prepare(Fp8BlockParams&, size_t) { return 0; }
};
}  // namespace

cudaError_t launch_fp8_block_skinny(Act act, const Fp8Launch& p, const SkinnyVariant& v, bool pdl,
                                    cudaStream_t stream) {
  if (p.stream != 0 && (p.stream != 2 || p.m <= 16) && fp8_stream_serves(p, v))
    return fp8_xsplit_serves(p, v) ? launch_fp8_xsplit(act, p, v, pdl, stream)
                                   : launch_fp8_stream(act, p, v, pdl, stream);
  return launch_skinny<Fp8BlockKernel>(act, p, v, pdl, stream);
}

}  // namespace qwen38::gemm
