// Instantiations and launch of the NVFP4 x-shared kernel (nvfp4_xshare_kernel.cuh): K = 5120 at
// k split 8; 1..16 rows (one m16 tile) and 17..32 rows (two); one tile a warp for N <= 128 (at
// 17..32 rows one warp per m16 tile), two for N up to 1024 at 9..32 rows.
#include "common/launch.cuh"
#include "gemm/nvfp4_xshare_kernel.cuh"

namespace qwen38::gemm {
namespace {

constexpr int kK = 5120;

// The forms: N <= kXshareNarrowN: one tile a warp, at 17..32 rows one warp per m16 tile (MW 1);
// larger N (measured: 1024) at more than 8 rows: two tiles a warp, one warp for both m16 tiles.
template <typename T, int NT, int MT>
constexpr auto kernel_of() {
  return nvfp4_xshare_kernel<T, kK, NT, MT, NT == 1 ? 1 : MT>;
}

// Tile groups of a CTA (each MT / MW warps). One tile a warp: the largest divisor of the tile count
// up to 2 at 1..8 and 17..32 rows, 3 at 9..16 (CTAs of 2 to 4 warps); two: up to 8. H200
// (benchmarks/lab/xshare_lab.cu, xshare_lab_17_split.txt and _stasync.txt, cold x with PDL, us):
// 48x5120 at 1 / 8 / 16 / 32 rows 2.36 / 2.53 / 2.75 / 3.33, against 2.81 / 2.88 / 3.13 / 3.80
// before st.async and 2.89 / 3.44 / 4.33 / 4.58 in groups of 1; 1024x5120 at 16 / 32 rows 4.60 / 5.78
// in groups of 8 (5.65 / 7.4 in groups of 2).
int groups_of(int nt, int64_t m, int64_t tiles) {
  const int cap = nt == 2 ? 8 : m > 8 && m <= 16 ? 3 : 2;
  for (int g = cap; g > 1; --g)
    if (tiles % g == 0) return g;
  return 1;
}

// the tiles a warp for a call the kernel serves by shape and rows (0: none)
int tiles_a_warp(const Nvfp4Params& p) {
  if (p.n <= kXshareNarrowN) return 1;
  return p.m > 8 && p.n % 16 == 0 ? 2 : 0;
}

template <typename T, int NT, int MT>
cudaError_t launch_typed(const Nvfp4Params& p, bool pdl, cudaStream_t stream) {
  auto fn = kernel_of<T, NT, MT>();
  const int64_t tiles = p.n / (8 * NT);
  const int groups = groups_of(NT, p.m, tiles);
  const size_t smem = xshare_smem_bytes(kK, MT, groups, NT);
  size_t room = 0;
  if (cudaError_t e = dynamic_smem_room(fn, &room)) return e;
  if (smem > room) return cudaErrorInvalidConfiguration;
  const int warps = NT == 1 ? MT : 1;  // a tile group's
  return launch_kernel_cluster(fn, dim3(unsigned(tiles / groups * kXshareSplit)),
                               dim3(unsigned(32 * groups * warps)), smem, stream, pdl, kXshareSplit, p);
}

}  // namespace

bool nvfp4_xshare_serves(const Nvfp4Params& p, const SkinnyVariant& v) {
  if (!p.xshare || p.k != kK || v.ksplit != kXshareSplit || p.m < 1 || p.m > kSkinnyMaxRows || p.n <= 0 ||
      p.n % 8 != 0 || p.n > kXshareMaxN)
    return false;
  const int nt = tiles_a_warp(p);
  if (nt == 0) return false;
  // the largest form of each (17..32 rows: two m16 tiles; the most tile groups)
  if (nt == 1)
    return clusters_fit(kernel_of<__nv_bfloat16, 1, 2>(), kXshareSplit, 32 * 2 * 2, xshare_smem_bytes(kK, 2, 2, 1));
  return clusters_fit(kernel_of<__nv_bfloat16, 2, 2>(), kXshareSplit, 32 * 8, xshare_smem_bytes(kK, 2, 8, 2));
}

cudaError_t launch_nvfp4_xshare(Act act, const Nvfp4Params& p, bool pdl, cudaStream_t stream) {
  const bool wide = p.m > 16, two = tiles_a_warp(p) == 2;
  if (act == Act::kBF16) {
    using T = __nv_bfloat16;
    if (two) return wide ? launch_typed<T, 2, 2>(p, pdl, stream) : launch_typed<T, 2, 1>(p, pdl, stream);
    return wide ? launch_typed<T, 1, 2>(p, pdl, stream) : launch_typed<T, 1, 1>(p, pdl, stream);
  }
  using T = __half;
  if (two) return wide ? launch_typed<T, 2, 2>(p, pdl, stream) : launch_typed<T, 2, 1>(p, pdl, stream);
  return wide ? launch_typed<T, 1, 2>(p, pdl, stream) : launch_typed<T, 1, 1>(p, pdl, stream);
}

}  // namespace qwen38::gemm
