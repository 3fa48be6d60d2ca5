// Instantiations and launch of the k-split-across-CTAs kernels (xsplit_kernel.cuh) for the variants of the
// model's large weights: NVFP4 K 5120 at k split 4 and 4 tiles a warp (34816 .. 6144 x 5120), K 17408 / 6144 at
// k split 8 and 4 tiles (5120x17408, 5120x6144); FP8 K 5120 at k split 4 and 4 tiles, K 17408 / 6144 at k split
// 8 and 2 tiles. CTAs of 4 tile groups (fewer where the tiles do not divide), clusters of k split CTAs.
#include "common/launch.cuh"
#include "gemm/xsplit_kernel.cuh"

namespace qwen38::gemm {
namespace {

// x stages and weight steps ahead: 4 and 2 (the lab's faster form where the rule takes the kernel: FP8 5120x17408
// at 17..32 rows, 133 registers, 3 CTAs an SM), except at 17..32 rows at K 5120 (4 tiles a warp, where 4 / 2 holds
// 162 registers with NVFP4 and 244 with FP8, and the lab timed 3 / 1 at 121 / 174 within a few percent)
template <int K, int MT>
constexpr int kStagesOf = MT == 2 && K == 5120 ? 3 : 4;
template <int K, int MT>
constexpr int kDepthOf = MT == 2 && K == 5120 ? 1 : 2;

template <bool kFp8, typename T, int K, int KS, int NT, int MT>
constexpr auto kernel_of() {
  if constexpr (kFp8) return fp8_xsplit_kernel<T, K, KS, NT, MT, kStagesOf<K, MT>, kDepthOf<K, MT>>;
  else return nvfp4_xsplit_kernel<T, K, KS, NT, MT, kStagesOf<K, MT>, kDepthOf<K, MT>>;
}

// tile groups of a CTA: 4, or fewer where the cluster's tiles would not divide the weight's
int groups_of(int64_t n, int nt) {
  for (int g = 4; g > 1; g /= 2)
    if (n % (8 * nt * g) == 0) return g;
  return 1;
}

// The variant's compiled (K, k split, NT) at m rows: 0 none, else the tiles a warp
template <bool kFp8>
int compiled_nt(int64_t k, const SkinnyVariant& v, int64_t m) {
  const int nt = m <= 16 ? v.nt_narrow : v.nt_wide;
  if (k == 5120) return v.ksplit == 4 && nt == 4 ? 4 : 0;
  if (k == 17408 || k == 6144) return v.ksplit == 8 && nt == (kFp8 ? 2 : 4) ? nt : 0;
  return 0;
}

// The rule (xsplit -1), measured in benchmarks/lab/xsplit_lab.cu (every form gave the stream kernel's bits;
// H100: benchmarks/results/h100/xsplit_s45.md, xsplit_s46.md), on compute capability 9:
// - FP8 at K 17408, k split 8 and 2 tiles a warp (5120x17408: 320 tile groups reading all of x each, 4x the
//   weight's bytes of x through L2 at 32 rows), 17..32 rows: the product's path (x copied into the fragment
//   order, then the stream kernel) 53.5 / 53.4 / 61.7 us at 17 / 24 / 32 rows, this kernel (4 stages, depth 2, 4
//   tile groups) 46.3 / 49.0 / 53.4; at 1 row 34.8 against 39.1 (not taken). The same at K 6144 (5120x6144),
//   17..32 rows: H100 22.1 / 22.2 / 24.8 / 24.9 -> 20.2 / 21.1 / 21.3 / 22.5 us at 17 / 24 / 25 / 32 rows
//   (benchmarks/results/h100/xsplit_s47.md); slower at 1..16 rows (14.5 -> 17.1 at 1 row).
// - NVFP4 10240x5120 (k split 4, 4 tiles a warp), 1..8 rows: H200 14.75 / 15.42 / 16.26 -> 14.16 / 14.29 / 14.92 us
//   at 1 / 4 / 8 rows (benchmarks/results/h200/xsplit_s46.md); H100 16.3 / 17.9 / 18.7 -> 14.1 / 14.3 / 15.0
//   (sessions 45 and 46). Not 34816x5120: 11% faster on the H100 but 1-4% slower on the H200 (40.7 / 42.7 ->
//   41.5 / 44.2 at 1 / 8 rows), nor 17408, 16384, 14336, 12288 or 6144 x 5120 (slower on both: 16384x5120 on the
//   H200 17.2 -> 24.1 at 1 row); from 9 rows the K 5120 weights are faster through the fragment-order copy and
//   the stream kernel (H100: 34816x5120 at 16 / 32 rows 48.4 / 55.6 against 50.8 / 66.9).
// - NVFP4 5120x6144 (k split 8, 4 tiles a warp: 40 clusters of 8, one wave), 1..16 and 25..32 rows: H200
//   (benchmarks/results/h200/xsplit_s47.md) 9.80 / 13.73 / 13.92 / 18.19 -> 9.52 / 9.82 / 10.30 / 14.61 us at 1 /
//   9 / 16 / 32 rows against the product's path (the fragment-order copy and the stream kernel from 9 rows); at
//   24 rows 13.19 against 13.96 (not taken). The product on an H100 (h100/xsplit_s47.md, knob 0 -> auto): 13.39 /
//   15.90 / 20.97 -> 11.34 / 12.39 / 15.72 us at 1 / 16 / 32 rows, 17..24 rows a tie. Not 5120x17408 (slower at
//   1..16 rows on the H200, a tie at 24..32).
bool xsplit_rule(bool fp8, int64_t m, int64_t n, int64_t k) {
  const bool take = fp8 ? (k == 17408 || (k == 6144 && n == 5120)) && m > 16
                        : (k == 5120 && n == 10240 && m <= 8) || (k == 6144 && n == 5120 && (m <= 16 || m > 24));
  if (!take) return false;
  int major = 0;
  return device_cc_major(&major) == cudaSuccess && major == 9;
}

template <bool kFp8, typename P>
bool serves(const P& p, const SkinnyVariant& v) {
  if (p.xsplit == 0 || (p.xsplit < 0 && !xsplit_rule(kFp8, p.m, p.n, p.k))) return false;
  if (p.m < 1 || p.m > kSkinnyMaxRows || p.n <= 0) return false;
  const int nt = compiled_nt<kFp8>(p.k, v, p.m);
  if (nt == 0 || p.n % (8 * nt) != 0) return false;
  // rows 16-byte aligned for the copies
  if (p.x_stride % 8 != 0 || reinterpret_cast<uintptr_t>(p.x) % 16 != 0) return false;
  using T = __nv_bfloat16;
  const size_t smem = xsplit_smem_bytes(v.ksplit, 2, 4, 4, nt);  // (the most any form takes)
  constexpr int kWideNt = kFp8 ? 2 : 4;
  if (p.k == 5120) return clusters_fit(kernel_of<kFp8, T, 5120, 4, 4, 2>(), 4, 128, smem);
  if (p.k == 6144) return clusters_fit(kernel_of<kFp8, T, 6144, 8, kWideNt, 2>(), 8, 128, smem);
  return clusters_fit(kernel_of<kFp8, T, 17408, 8, kWideNt, 2>(), 8, 128, smem);
}

template <bool kFp8, typename T, int K, int KS, int NT, int MT, typename P>
cudaError_t launch_typed(const P& p, bool pdl, cudaStream_t stream) {
  auto fn = kernel_of<kFp8, T, K, KS, NT, MT>();
  const int groups = groups_of(p.n, NT);
  const size_t smem = xsplit_smem_bytes(KS, MT, kStagesOf<K, MT>, groups, NT);
  size_t room = 0;
  if (cudaError_t e = dynamic_smem_room(fn, &room)) return e;
  if (smem > room) return cudaErrorInvalidConfiguration;
  const int64_t clusters = p.n / (8 * NT * groups);
  const auto& kp = static_cast<const std::conditional_t<kFp8, Fp8BlockParams, Nvfp4Params>&>(p);
  return launch_kernel_cluster(fn, dim3(unsigned(clusters * KS)), dim3(unsigned(32 * groups)), smem, stream, pdl, KS,
                               kp);
}

template <bool kFp8, typename T, int K, int KS, int NT, typename P>
cudaError_t launch_rows(const P& p, bool pdl, cudaStream_t stream) {
  return p.m > 16 ? launch_typed<kFp8, T, K, KS, NT, 2>(p, pdl, stream)
                  : launch_typed<kFp8, T, K, KS, NT, 1>(p, pdl, stream);
}

template <bool kFp8, typename T, typename P>
cudaError_t launch_k(const P& p, bool pdl, cudaStream_t stream) {
  constexpr int kWideNt = kFp8 ? 2 : 4;
  if (p.k == 5120) return launch_rows<kFp8, T, 5120, 4, 4>(p, pdl, stream);
  if (p.k == 17408) return launch_rows<kFp8, T, 17408, 8, kWideNt>(p, pdl, stream);
  if (p.k == 6144) return launch_rows<kFp8, T, 6144, 8, kWideNt>(p, pdl, stream);
  return cudaErrorInvalidValue;
}

}  // namespace

bool nvfp4_xsplit_serves(const Nvfp4Launch& p, const SkinnyVariant& v) { return serves<false>(p, v); }
bool fp8_xsplit_serves(const Fp8Launch& p, const SkinnyVariant& v) { return serves<true>(p, v); }

cudaError_t launch_nvfp4_xsplit(Act act, const Nvfp4Launch& p, const SkinnyVariant& v, bool pdl, cudaStream_t stream) {
  (void)v;
  if (act == Act::kBF16) return launch_k<false, __nv_bfloat16>(p, pdl, stream);
  return launch_k<false, __half>(p, pdl, stream);
}
cudaError_t launch_fp8_xsplit(Act act, const Fp8Launch& p, const SkinnyVariant& v, bool pdl, cudaStream_t stream) {
  (void)v;
  if (act == Act::kBF16) return launch_k<true, __nv_bfloat16>(p, pdl, stream);
  return launch_k<true, __half>(p, pdl, stream);
}

}  // namespace qwen38::gemm
