// Instantiations and launch of the FP8 register-stream kernel (fp8_stream_kernel.cuh): 1..16 rows
// with 2 tiles per warp (or 4 at k splits 2 and 4: k split 8 with 4 tiles would spill under the
// 128-register cap of 256-thread blocks) (stream_launch.cuh); 17..32 rows with a second m16 tile,
// 2 or 4 tiles per warp alike (sm_90a 178-230 registers, no spills; k split 8 with 4 tiles spills
// on sm_121a at 255). Session 6 measured the 2-tile wide form 8-20% slower than the skinny kernel
// at 32 rows; the 4-tile form is new (QWEN38_FP8_STREAM=narrow: 1..16 rows only, for the A/B).
// 1 tile a warp at K 5120 with k split 8 (the model's 48- to 1024-row weights: every step in
// flight at once, the activations a step ahead, as in nvfp4_stream_kernel.cuh), with the cluster
// form (stream_common.cuh kFp8StreamClusters).
#include "gemm/fp8_stream_kernel.cuh"
#include "gemm/stream_launch.cuh"

namespace qwen38::gemm {
namespace {

struct Fp8StreamOf {
  template <typename T, int K, int KS, int NT, int MT>
  static constexpr auto fn = fp8_stream_kernel<T, K, KS, NT, MT>;
  static constexpr bool kWide = true;  // (4 tiles at k split 8: neither row range, see above)
  static constexpr bool kKs8Nt4 = false;
  template <int K, int KS>
  static constexpr bool kClusters = kFp8StreamClusters<K, KS>;
  // (benchmarks/lab/stream_waves_lab.cu: at k split 4, 17..32 rows hold 226-230 registers, 2 blocks
  // an SM, and 1..16 rows at 2 tiles a warp run best at their full 4)
  template <int KS, int NT, int MT>
  static constexpr bool kWaveFit = false;
};
using L = StreamLaunch<Fp8StreamOf, Fp8BlockParams>;

}  // namespace

bool fp8_stream_serves(const Fp8BlockParams& p, const SkinnyVariant& v) { return L::serves(p, v); }

cudaError_t launch_fp8_stream(Act act, const Fp8BlockParams& p, const SkinnyVariant& v, bool pdl,
                              cudaStream_t stream) {
  return L::launch(act, p, v, pdl, stream);
}

}  // namespace qwen38::gemm
