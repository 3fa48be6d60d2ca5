// Instantiations and launch of the NVFP4 x-shared kernel (nvfp4_xshare_kernel.cuh): K = 5120 at
// k split 8, one tile a warp; 1..16 rows (one m16 tile) and 17..32 rows (two, one warp each).
#include <mutex>
#include <map>

#include "common/launch.cuh"
#include "gemm/nvfp4_xshare_kernel.cuh"

namespace qwen38::gemm {
namespace {

constexpr int kK = 5120;

template <typename T, int MT>
constexpr auto kernel_of() {
  return nvfp4_xshare_kernel<T, kK, 1, MT, 1>;
}

// Tile groups of a CTA (each MT warps): the largest divisor of the tile count up to 2 at 1..8 and
// 17..32 rows, 3 at 9..16 (CTAs of 2 to 4 warps). H200 (benchmarks/lab/xshare_lab.cu,
// xshare_lab_17_split.txt, cold x with PDL, us): 48x5120 at 1 / 8 / 16 / 32 rows 2.81 / 2.88 / 3.13 /
// 3.80 against 2.89 / 3.44 / 4.33 / 4.58 in groups of 1; 96x5120 2.87 / 2.93 / 3.21 / 3.84.
int groups_of(int64_t m, int64_t tiles) {
  const int cap = m > 8 && m <= 16 ? 3 : 2;
  for (int g = cap; g > 1; --g)
    if (tiles % g == 0) return g;
  return 1;
}

// Whether the device places a cluster of 8 CTAs of the largest form (17..32 rows, 2 groups): some
// devices or drivers cannot (the caller then takes the register-stream kernel). Cached per device.
bool clusters_fit() {
  static std::mutex mu;
  static std::map<int, int> cache;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  int fit = 0;
  const cudaError_t e = cached_query(mu, cache, dev, &fit, [&](int* ok) {
    *ok = 0;
    auto fn = kernel_of<__nv_bfloat16, 2>();
    const size_t smem = xshare_smem_bytes(kK, 2, 2, 1);
    size_t room = 0;
    int n = 0;
    if (dynamic_smem_room(fn, &room) != cudaSuccess || room < smem ||
        max_active_clusters(fn, dim3(kXshareSplit), dim3(32 * 2 * 2), smem, kXshareSplit, &n) != cudaSuccess) {
      (void)cudaGetLastError();
      return cudaSuccess;
    }
    *ok = n >= 1;
    return cudaSuccess;
  });
  return e == cudaSuccess && fit != 0;
}

template <typename T, int MT>
cudaError_t launch_typed(const Nvfp4Params& p, bool pdl, cudaStream_t stream) {
  auto fn = kernel_of<T, MT>();
  const int64_t tiles = p.n / 8;
  const int groups = groups_of(p.m, tiles);
  const size_t smem = xshare_smem_bytes(kK, MT, groups, 1);
  size_t room = 0;
  if (cudaError_t e = dynamic_smem_room(fn, &room)) return e;
  if (smem > room) return cudaErrorInvalidConfiguration;
  return launch_kernel_cluster(fn, dim3(unsigned(tiles / groups * kXshareSplit)), dim3(unsigned(32 * groups * MT)),
                               smem, stream, pdl, kXshareSplit, p);
}

}  // namespace

bool nvfp4_xshare_serves(const Nvfp4Params& p, const SkinnyVariant& v) {
  return p.xshare && p.k == kK && v.ksplit == kXshareSplit && p.m >= 1 && p.m <= kSkinnyMaxRows && p.n > 0 &&
         p.n % 8 == 0 && p.n <= kXshareMaxN && clusters_fit();
}

cudaError_t launch_nvfp4_xshare(Act act, const Nvfp4Params& p, bool pdl, cudaStream_t stream) {
  const bool wide = p.m > 16;
  if (act == Act::kBF16)
    return wide ? launch_typed<__nv_bfloat16, 2>(p, pdl, stream) : launch_typed<__nv_bfloat16, 1>(p, pdl, stream);
  return wide ? launch_typed<__half, 2>(p, pdl, stream) : launch_typed<__half, 1>(p, pdl, stream);
}

}  // namespace qwen38::gemm
