// Instantiations and launch of the FP8 register-stream kernel (fp8_stream_kernel.cuh): 1..16 rows
// with 2 tiles per warp (or 4 at k splits 2 and 4: k split 8 with 4 tiles would spill under the
// 128-register cap of 256-thread blocks) (stream_launch.cuh). 17..32 rows are not served: the
// stream form with a second m16 tile (164-190 registers, one block per SM) measured 8-20% slower
// than the skinny kernel's at 32 rows (benchmarks/results/h200/NOTES.md).
#include "gemm/fp8_stream_kernel.cuh"
#include "gemm/stream_launch.cuh"

namespace qwen38::gemm {
namespace {

struct Fp8StreamOf {
  template <typename T, int K, int KS, int NT, int MT>
  static constexpr auto fn = fp8_stream_kernel<T, K, KS, NT, MT>;
  static constexpr bool kWide = false;
  static constexpr bool kKs8Nt4 = false;
};
using L = StreamLaunch<Fp8StreamOf, Fp8BlockParams>;

}  // namespace

bool fp8_stream_serves(const Fp8BlockParams& p, const SkinnyVariant& v) { return L::serves(p, v); }

cudaError_t launch_fp8_stream(Act act, const Fp8BlockParams& p, const SkinnyVariant& v, bool pdl,
                              cudaStream_t stream) {
  return L::launch(act, p, v, pdl, stream);
}

}  // namespace qwen38::gemm
