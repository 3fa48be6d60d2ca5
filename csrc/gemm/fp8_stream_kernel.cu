// Instantiations and launch of the FP8 register-stream kernels (fp8_stream_kernel.cuh): 1 tile a
// warp at K 5120 with k split 8 (the model's 48- to 1024-row weights: every step in flight at once,
// the activations a step ahead, as in nvfp4_stream_kernel.cuh), the x-as-A form, 1..16 and 17..32
// rows, with the cluster form (stream_common.cuh kFp8StreamClusters); 2 and 4 tiles a warp (4 at
// k splits 2 and 4 only: k split 8 with 4 tiles would spill under the 128-register cap of 256-thread
// blocks) the transposed form, one instantiation per group count of 8 rows (kRowGroups), 1..4.
// QWEN38_FP8_STREAM=narrow keeps 17..32 rows on the skinny kernel (for the A/B).
#include "gemm/fp8_stream_kernel.cuh"
#include "gemm/stream_launch.cuh"

namespace qwen38::gemm {
namespace {

// NT > 1: the transposed kernel, MT counting groups of 8 rows (kRowGroups)
template <typename T, int K, int KS, int NT, int MT>
constexpr auto fp8_stream_fn() {
  if constexpr (NT == 1) return fp8_stream_kernel<T, K, KS, NT, MT>;
  else return fp8_stream_t_kernel<T, K, KS, NT, MT>;
}

struct Fp8StreamOf {
  template <typename T, int K, int KS, int NT, int MT>
  static constexpr auto fn = fp8_stream_fn<T, K, KS, NT, MT>();
  static constexpr bool kWide = true;  // (4 tiles at k split 8: neither row range, see above)
  static constexpr bool kRowGroups = true;
  static constexpr bool kKs8Nt4 = false;
  static constexpr bool kOneGroupXa = false;
  // x in the fragment order (fp8_stream_tf_kernel): the tables' variants of the model's weights of
  // 5120 columns and more - K 5120 at k split 4 (2 and 4 tiles a warp), and K 6144 / 17408 at k
  // split 8 and 2 tiles (5120x6144, 5120x17408)
  static constexpr bool frag_at(int64_t k, int ks, int nt) {
    return (k == 5120 && ks == 4 && (nt == 2 || nt == 4)) || ((k == 6144 || k == 17408) && ks == 8 && nt == 2);
  }
  template <int K, int KS, int NT>
  static constexpr bool kFragServes = frag_at(K, KS, NT);
  template <typename T, int K, int KS, int NT, int MT>
  static constexpr auto frag_fn = fp8_stream_tf_kernel<T, K, KS, NT, MT>;
  template <typename T, int K, int KS, int NT, int MT>
  static constexpr int kFragLayout = fp8_frag_layout<NT, MT>();  // (the copy's layout; MT: groups)
  template <int K, int KS>
  static constexpr bool kClusters = kFp8StreamClusters<K, KS>;
  // (benchmarks/lab/stream_waves_lab.cu: at k split 4, 17..32 rows hold 226-230 registers, 2 blocks
  // an SM, and 1..16 rows at 2 tiles a warp run best at their full 4)
  template <int KS, int NT, int MT>
  static constexpr bool kWaveFit = false;
  template <int K, int KS, int NT>
  static constexpr bool kStagedServes = false;  // (no staged form)
  // the fragment-order kernel's 3-CTA form at 3 groups (fp8_stream_tf3_kernel: K 5120, k split 4, 4 tiles a
  // warp, 17..24 rows; held to 3 CTAs an SM on sm_90a), taken where it needs fewer rounds of CTAs
  // (stream_launch.cuh use_four). (Not conditional on the device pass's arch: the host pass must see the same.)
  template <typename T, int K, int KS, int NT, int MT>
  static constexpr bool kFour = K == 5120 && KS == 4 && NT == 4 && MT == 3;
  template <typename T, int K, int KS, int NT, int MT>
  static constexpr auto four_fn = fp8_stream_tf3_kernel<T, K, KS, NT, MT>;
  static constexpr bool kFourByRounds = true;
};
using L = StreamLaunch<Fp8StreamOf, Fp8Launch>;

}  // namespace

bool fp8_stream_serves(const Fp8BlockParams& p, const SkinnyVariant& v) { return L::serves(p, v); }

bool fp8_frag_serves(int64_t k, const SkinnyVariant& v) {
  return Fp8StreamOf::frag_at(k, v.ksplit, v.nt_narrow) || Fp8StreamOf::frag_at(k, v.ksplit, v.nt_wide);
}

cudaError_t launch_fp8_stream(Act act, const Fp8Launch& p, const SkinnyVariant& v, bool pdl,
                              cudaStream_t stream) {
  return L::launch(act, p, v, pdl, stream);
}

}  // namespace qwen38::gemm
