// Instantiations and launch of the NVFP4 register-stream kernel (nvfp4_stream_kernel.cuh): 1..16
// rows with 2 or 4 tiles per warp, 17..32 rows with 2 or 4, and 1 at K 5120 with k split 8
// (stream_launch.cuh); the k split 8 kernels carry the cluster form; K 5120 at k split 4 and 4 tiles
// a warp also the staged transposed body (stream_launch.cuh use_staged).
#include "gemm/nvfp4_stream_kernel.cuh"
#include "gemm/stream_launch.cuh"

namespace qwen38::gemm {
namespace {

// NT > 1: the transposed kernel, MT counting groups of 8 rows (kRowGroups)
template <typename T, int K, int KS, int NT, int MT>
constexpr auto nvfp4_stream_fn() {
  if constexpr (NT == 1) return nvfp4_stream_kernel<T, K, KS, NT, MT>;
  else return nvfp4_stream_t_kernel<T, K, KS, NT, MT>;
}

struct Nvfp4StreamOf {
  template <typename T, int K, int KS, int NT, int MT>
  static constexpr auto fn = nvfp4_stream_fn<T, K, KS, NT, MT>();
  static constexpr bool kWide = true;
  static constexpr bool kRowGroups = true;
  static constexpr bool kKs8Nt4 = true;
  static constexpr bool kOneGroupXa = true;  // (its 2-group instantiation runs the x-as-A body)
  // x in the fragment order (nvfp4_stream_tf_kernel): the tables' variants of the model's weights of
  // 5120 columns and more - K 5120 at k split 4, and K 6144 / 17408 at k split 8 (the cluster form;
  // 5120x6144, 5120x17408), 4 tiles a warp
  static constexpr bool frag_at(int64_t k, int ks, int nt) {
    return nt == 4 && ((k == 5120 && ks == 4) || ((k == 6144 || k == 17408) && ks == 8));
  }
  template <int K, int KS, int NT>
  static constexpr bool kFragServes = frag_at(K, KS, NT);
  template <typename T, int K, int KS, int NT, int MT>
  static constexpr auto frag_fn = nvfp4_stream_tf_kernel<T, K, KS, NT, MT>;
  // the copy's layout (stream_common.cuh): as the body the kernel runs at MT groups takes x
  template <typename T, int K, int KS, int NT, int MT>
  static constexpr int kFragLayout =
      nvfp4_t_runs_xa<T, KS, NT, MT>() ? stream::kXfragPairedA : stream::kXfragPaired;
  // the fragment-order kernel's 4-CTA form (nvfp4_stream_tf4_kernel): bf16, K 5120, k split 4, 4
  // tiles a warp, 3 or 4 groups (17..32 rows); stream_launch.cuh use_four
  template <typename T, int K, int KS, int NT, int MT>
  static constexpr bool kFour =
      std::is_same_v<T, __nv_bfloat16> && K == 5120 && KS == 4 && NT == 4 && (MT == 3 || MT == 4);
  template <typename T, int K, int KS, int NT, int MT>
  static constexpr auto four_fn = nvfp4_stream_tf4_kernel<T, K, KS, NT, MT>;
  static constexpr bool kFourByRounds = false;  // (taken where it alone runs the grid in one round)
  template <int K, int KS>
  static constexpr bool kClusters = kStreamClusters<K, KS>;
  template <int KS, int NT, int MT>
  static constexpr bool kWaveFit = KS == 4 && (NT == 1 ? MT == 2 : MT > 2);  // 17..32 rows (nvfp4_stream_kernel.cuh)
  // the staged transposed body: K 5120, k split 4, 4 tiles a warp (nvfp4_stream_kernel.cuh)
  template <int K, int KS, int NT>
  static constexpr bool kStagedServes = K == 5120 && KS == 4 && NT == 4;
  template <typename T, int K, int KS, int NT, int MT>
  static constexpr auto staged_fn = nvfp4_stream_ts_kernel<T, K, KS, NT, MT>;
  template <int KS, int NT>
  static constexpr size_t kStagedBytes = nvfp4_staged_bytes<KS, NT>();
};
using L = StreamLaunch<Nvfp4StreamOf, Nvfp4Launch>;

}  // namespace

bool nvfp4_stream_serves(const Nvfp4Params& p, const SkinnyVariant& v) { return L::serves(p, v); }

bool nvfp4_frag_serves(int64_t k, const SkinnyVariant& v) {
  return Nvfp4StreamOf::frag_at(k, v.ksplit, v.nt_narrow) || Nvfp4StreamOf::frag_at(k, v.ksplit, v.nt_wide);
}

cudaError_t launch_nvfp4_stream(Act act, const Nvfp4Launch& p, const SkinnyVariant& v, bool pdl,
                                cudaStream_t stream) {
  return L::launch(act, p, v, pdl, stream);
}

}  // namespace qwen38::gemm
