// Instantiations and launch of the causal-conv1d kernel (see conv_kernel.cuh).
#include "common/launch.cuh"
#include "conv/conv_kernel.cuh"

namespace qwen38::conv {
namespace {

template <typename T, typename W>
cudaError_t launch_t(Mode mode, const Params& p, bool pdl, cudaStream_t stream) {
  const dim3 grid = conv_grid(mode, p);
  const dim3 block(kThreads);
  switch (mode) {
    case Mode::kStep: return launch_kernel(conv_kernel<T, W, Mode::kStep>, grid, block, 0, stream, pdl, p);
    case Mode::kChain: return launch_kernel(conv_kernel<T, W, Mode::kChain>, grid, block, 0, stream, pdl, p);
    case Mode::kTree: return launch_kernel(conv_kernel<T, W, Mode::kTree>, grid, block, 0, stream, pdl, p);
    case Mode::kCommit: return launch_kernel(conv_kernel<T, W, Mode::kCommit>, grid, block, 0, stream, pdl, p);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch(Mode mode, const Params& p, bool pdl, cudaStream_t stream) {
  if (p.batch == 0 || p.channels == 0) return cudaSuccess;
  if (p.batch > 65535 || p.tokens > 65535) return cudaErrorInvalidValue;  // grid.z, grid.y
  if (p.f16) return p.weight_f32 ? launch_t<__half, float>(mode, p, pdl, stream)
                                 : launch_t<__half, __half>(mode, p, pdl, stream);
  return p.weight_f32 ? launch_t<__nv_bfloat16, float>(mode, p, pdl, stream)
                      : launch_t<__nv_bfloat16, __nv_bfloat16>(mode, p, pdl, stream);
}

}  // namespace qwen38::conv
