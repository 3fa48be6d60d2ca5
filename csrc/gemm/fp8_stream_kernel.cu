// Instantiations and launch of the FP8 register-stream kernel (fp8_stream_kernel.cuh): the model's
// K values with the k splits their tables use, bf16 and fp16; 1..16 rows with 2 tiles per warp (or
// 4 at k splits 2 and 4).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/launch.cuh"
#include "gemm/fp8_stream_kernel.cuh"

namespace qwen38::gemm {
namespace {

template <typename T, int K, int KS, int NT, int MT>
cudaError_t launch_one(const Fp8BlockParams& p, bool pdl, cudaStream_t stream) {
  const dim3 grid(unsigned(p.n / (8 * NT)));
  return launch_kernel(fp8_stream_kernel<T, K, KS, NT, MT>, grid, dim3(32 * KS), 0, stream, pdl, p);
}

using LaunchFn = cudaError_t (*)(const Fp8BlockParams&, bool, cudaStream_t);

// (ksplit, nt, m16 tiles) -> an instantiation, or null when not compiled for K. 17..32 rows are
// not served: the stream form with a second m16 tile (164-190 registers, one block per SM) measured
// 8-20% slower than the skinny kernel's at 32 rows (benchmarks/results/h200/NOTES.md).
template <typename T, int K>
LaunchFn pick(int ks, int nt, int mt) {
  if (mt != 1) return nullptr;
  if constexpr (K == 5120) {
    if (ks == 2) return nt == 4 ? launch_one<T, K, 2, 4, 1> : nt == 2 ? launch_one<T, K, 2, 2, 1> : nullptr;
    if (ks == 4) return nt == 4 ? launch_one<T, K, 4, 4, 1> : nt == 2 ? launch_one<T, K, 4, 2, 1> : nullptr;
  }
  // (k split 8 with 4 tiles would spill under the 128-register cap of 256-thread blocks)
  if (ks == 8) return nt == 2 ? launch_one<T, K, 8, 2, 1> : nullptr;
  return nullptr;
}

template <typename T>
LaunchFn pick_k(int64_t k, int ks, int nt, int mt) {
  if (k == 5120) return pick<T, 5120>(ks, nt, mt);
  if (k == 6144) return pick<T, 6144>(ks, nt, mt);
  if (k == 17408) return pick<T, 17408>(ks, nt, mt);
  return nullptr;
}

int tiles_m(const Fp8BlockParams& p) { return p.m <= 16 ? 1 : 2; }
int tiles_n(const Fp8BlockParams& p, const SkinnyVariant& v) { return p.m <= 16 ? v.nt_narrow : v.nt_wide; }

}  // namespace

bool fp8_stream_serves(const Fp8BlockParams& p, const SkinnyVariant& v) {
  const int nt = tiles_n(p, v);
  return p.m >= 1 && p.m <= kSkinnyMaxRows && p.n > 0 && p.n % (8 * nt) == 0 &&
         pick_k<__nv_bfloat16>(p.k, v.ksplit, nt, tiles_m(p)) != nullptr;
}

cudaError_t launch_fp8_stream(Act act, const Fp8BlockParams& p, const SkinnyVariant& v, bool pdl,
                              cudaStream_t stream) {
  if (!fp8_stream_serves(p, v)) return cudaErrorInvalidValue;
  const int nt = tiles_n(p, v), mt = tiles_m(p);
  const LaunchFn fn = act == Act::kBF16 ? pick_k<__nv_bfloat16>(p.k, v.ksplit, nt, mt)
                                        : pick_k<__half>(p.k, v.ksplit, nt, mt);
  return fn(p, pdl, stream);
}

}  // namespace qwen38::gemm
