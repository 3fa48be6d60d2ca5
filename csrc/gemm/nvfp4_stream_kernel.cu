// Instantiations and launch of the NVFP4 register-stream kernel (nvfp4_stream_kernel.cuh): the
// model's K values with the k splits their tables use, bf16 and fp16; 1..16 rows with 2 or 4
// tiles per warp, 17..32 rows with 2.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/launch.cuh"
#include "gemm/nvfp4_stream_kernel.cuh"

namespace qwen38::gemm {
namespace {

template <typename T, int K, int KS, int NT, int MT>
cudaError_t launch_one(const Nvfp4Params& p, bool pdl, cudaStream_t stream) {
  const dim3 grid(unsigned(p.n / (8 * NT)));
  return launch_kernel(nvfp4_stream_kernel<T, K, KS, NT, MT>, grid, dim3(32 * KS), 0, stream, pdl, p);
}

using LaunchFn = cudaError_t (*)(const Nvfp4Params&, bool, cudaStream_t);

// (ksplit, nt, m16 tiles) -> an instantiation, or null when not compiled for K
template <typename T, int K>
LaunchFn pick(int ks, int nt, int mt) {
  if (mt == 2) {
    if (nt != 2) return nullptr;
    if constexpr (K == 5120) {
      if (ks == 2) return launch_one<T, K, 2, 2, 2>;
      if (ks == 4) return launch_one<T, K, 4, 2, 2>;
    }
    return ks == 8 ? launch_one<T, K, 8, 2, 2> : nullptr;
  }
  if constexpr (K == 5120) {
    if (ks == 2) return nt == 4 ? launch_one<T, K, 2, 4, 1> : nt == 2 ? launch_one<T, K, 2, 2, 1> : nullptr;
    if (ks == 4) return nt == 4 ? launch_one<T, K, 4, 4, 1> : nt == 2 ? launch_one<T, K, 4, 2, 1> : nullptr;
  }
  if (ks == 8) return nt == 4 ? launch_one<T, K, 8, 4, 1> : nt == 2 ? launch_one<T, K, 8, 2, 1> : nullptr;
  return nullptr;
}

template <typename T>
LaunchFn pick_k(int64_t k, int ks, int nt, int mt) {
  if (k == 5120) return pick<T, 5120>(ks, nt, mt);
  if (k == 6144) return pick<T, 6144>(ks, nt, mt);
  if (k == 17408) return pick<T, 17408>(ks, nt, mt);
  return nullptr;
}

// the m16 tiles and tiles per warp of a call
int tiles_m(const Nvfp4Params& p) { return p.m <= 16 ? 1 : 2; }
int tiles_n(const Nvfp4Params& p, const SkinnyVariant& v) { return p.m <= 16 ? v.nt_narrow : v.nt_wide; }

}  // namespace

bool nvfp4_stream_serves(const Nvfp4Params& p, const SkinnyVariant& v) {
  const int nt = tiles_n(p, v);
  return p.m >= 1 && p.m <= kSkinnyMaxRows && p.n > 0 && p.n % (8 * nt) == 0 &&
         pick_k<__nv_bfloat16>(p.k, v.ksplit, nt, tiles_m(p)) != nullptr;
}

cudaError_t launch_nvfp4_stream(Act act, const Nvfp4Params& p, const SkinnyVariant& v, bool pdl,
                                cudaStream_t stream) {
  if (!nvfp4_stream_serves(p, v)) return cudaErrorInvalidValue;
  const int nt = tiles_n(p, v), mt = tiles_m(p);
  const LaunchFn fn = act == Act::kBF16 ? pick_k<__nv_bfloat16>(p.k, v.ksplit, nt, mt)
                                        : pick_k<__half>(p.k, v.ksplit, nt, mt);
  return fn(p, pdl, stream);
}

}  // namespace qwen38::gemm
