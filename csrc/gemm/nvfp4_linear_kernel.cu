// Instantiations and launch of the nvfp4_linear skinny kernel (see nvfp4_linear_kernel.cuh).
#include "gemm/nvfp4_linear_kernel.cuh"
#include "gemm/skinny_launch.cuh"

namespace qwen38::gemm {
namespace {
template <typename T, int MT, int KS, int NT>
struct Nvfp4Kernel {
  static constexpr auto fn = nvfp4_skinny_kernel<T, MT, KS, NT>;
  static constexpr bool kDynamicSmem = true;
  // Ring depth: p.depth when set (2..8), else enough steps for ~96 bytes per thread in flight
  // (NT 1: 7, 2: 4, 4: 3); lowered while the ring does not fit `limit`.
  static size_t prepare(Nvfp4Params& p, size_t limit) {
    int d = p.depth > 0 ? p.depth : 1 + (96 + 16 * NT - 1) / (16 * NT);
    d = d < 2 ? 2 : d > 8 ? 8 : d;
    while (d > 2 && nvfp4_ring_bytes(d, NT, KS) > limit) --d;
    p.depth = d;
    return nvfp4_ring_bytes(d, NT, KS);
  }
};
}  // namespace

cudaError_t launch_nvfp4_skinny(Act act, const Nvfp4Launch& p, const SkinnyVariant& v, bool pdl,
                                cudaStream_t stream) {
  if (p.stream && nvfp4_xshare_serves(p, v)) return launch_nvfp4_xshare(act, p, pdl, stream);
  if (p.stream && nvfp4_xsplit_serves(p, v)) return launch_nvfp4_xsplit(act, p, v, pdl, stream);
  if (p.stream && nvfp4_stream_serves(p, v)) return launch_nvfp4_stream(act, p, v, pdl, stream);
  return launch_skinny<Nvfp4Kernel>(act, p, v, pdl, stream);
}

}  // namespace qwen38::gemm
