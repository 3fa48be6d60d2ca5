// Instantiations and launch of the nvfp4_linear skinny kernel (see nvfp4_linear_kernel.cuh).
#include "gemm/nvfp4_linear_kernel.cuh"
#include "gemm/skinny_launch.cuh"

namespace qwen38::gemm {

// Enough warps in flight to cover memory latency (~32 per SM on 132 SMs), splitting K across the
// warps of a block when N alone gives too few; at least 4 steps of 128 k per warp. Depends on
// (N, K) only. Tile tables (tables/<arch>/nvfp4_skinny.json) will replace this rule per shape.
int skinny_k_split(int64_t n, int64_t k) {
  const int64_t blocks = (n + 7) / 8;
  const int64_t steps = (k + kStepK - 1) / kStepK;
  int split = 1;
  while (split < 8 && blocks * split * 2 <= 132 * 32 && steps >= 4 * split) split *= 2;
  return split;
}

namespace {
template <typename T, typename O, int MT, int KS>
struct Nvfp4Kernel {
  static constexpr auto fn = nvfp4_skinny_kernel<T, O, MT, KS>;
};
}  // namespace

cudaError_t launch_nvfp4_skinny(Act act, Out out, const Nvfp4Params& p, bool pdl, cudaStream_t stream) {
  return launch_skinny<Nvfp4Kernel>(act, out, p, pdl, stream);
}

}  // namespace qwen38::gemm
