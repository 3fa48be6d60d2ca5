// Instantiations and launches of nvfp4_dequant_kernel.cuh (see there for the layout).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "common/launch.cuh"
#include "gemm/nvfp4_dequant_kernel.cuh"

namespace qwen38::gemm {

namespace {

template <typename O>
cudaError_t dequantize_as(const Nvfp4DequantParams& p, bool pdl, cudaStream_t stream) {
  const int64_t bytes = p.n * (p.k / 2);
  const int64_t per_block = int64_t(dq::kWarps) * dq::kTiles * dq::kTileBytes;
  const int64_t blocks = (bytes + per_block - 1) / per_block;
  if (blocks > 0x7fffffff) return cudaErrorInvalidConfiguration;  // > 2^31 blocks: ~10^12 weights
  return launch_kernel(nvfp4_dequantize_kernel<O>, dim3(unsigned(blocks)), dim3(32 * dq::kWarps), 0, stream, pdl,
                       p);
}

template <typename O>
cudaError_t epilogue_as(const Nvfp4EpilogueParams& p, bool pdl, cudaStream_t stream) {
  const int64_t total = p.m * p.n;
  const bool vec4 = p.n % 4 == 0;
  const int64_t per_block = 256 * (vec4 ? 4 : 1);
  // a grid-stride loop: at most 2^20 blocks (plenty to fill any GPU), each a few elements a thread
  const unsigned blocks = unsigned(std::min<int64_t>((total + per_block - 1) / per_block, int64_t(1) << 20));
  return vec4 ? launch_kernel(nvfp4_prefill_epilogue_kernel<O, 4>, dim3(blocks), dim3(256), 0, stream, pdl, p)
              : launch_kernel(nvfp4_prefill_epilogue_kernel<O, 1>, dim3(blocks), dim3(256), 0, stream, pdl, p);
}

}  // namespace

cudaError_t launch_nvfp4_dequantize(Out out, const Nvfp4DequantParams& p, bool pdl, cudaStream_t stream) {
  if (p.n == 0) return cudaSuccess;
  if (p.k <= 0 || p.k % 32 != 0) return cudaErrorInvalidValue;
  switch (out) {
    case Out::kBF16: return dequantize_as<__nv_bfloat16>(p, pdl, stream);
    case Out::kF16: return dequantize_as<__half>(p, pdl, stream);
    case Out::kF32: return dequantize_as<float>(p, pdl, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_nvfp4_prefill_epilogue(Out out, const Nvfp4EpilogueParams& p, bool pdl, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0) return cudaSuccess;
  switch (out) {
    case Out::kBF16: return epilogue_as<__nv_bfloat16>(p, pdl, stream);
    case Out::kF16: return epilogue_as<__half>(p, pdl, stream);
    case Out::kF32: return epilogue_as<float>(p, pdl, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace qwen38::gemm
