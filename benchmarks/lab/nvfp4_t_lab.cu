// A/B lab for nvfp4_linear at 1..32 rows: the register-stream kernel's x-as-A body (nvfp4_stream_xa:
// the activations as the mma A operand) against its transposed body (nvfp4_stream_t: the weights as
// A, each 8-row group of x a B operand), both from csrc/gemm/nvfp4_stream_kernel.cuh, at every group
// count (the lab's own kernels call the bodies, so a group count the extension routes to the x-as-A
// body is timed in both forms). Bits: the x-as-A body is the reference (the extension's tests hold it
// to the ring kernel's bits).
// Why: the FP8 kernel's transposed form (fp8_t_lab.cu) gained 11-19% at 1 row; the NVFP4 x-as-A
// body at 4 tiles a warp spends 804 sm_90a SASS instructions a two-step iteration, of which 64
// PRMTs (x re-paired for rows g and g + 8), 64 HMMAs and 36 register moves; the transposed one at 1
// group: 373 a step against 402.
//
//   nvcc -std=c++20 -O3 -arch=sm_90a --expt-relaxed-constexpr -diag-suppress 128,177 -I csrc \
//        benchmarks/lab/nvfp4_t_lab.cu -o nvfp4_t_lab && ./nvfp4_t_lab [quick]
//
// Method as the benchmarks: CUDA graphs over weight copies of more than 3x L2 (cold weights), median
// of replays, the streaming-read ceiling in the same process; plain launches (no PDL, no cluster).
#include "nvfp4_ab.cuh"

using namespace nvfp4_ab;

namespace {

template <int K, int KS, int NT, int NX>
struct Rows {
  static void run(Case& c, int m, bool half) {
    std::vector<uint8_t> ref;
    if (half) run_xa_and_t<__half, K, KS, NT, NX>(c, m, half, ref);
    else run_xa_and_t<bf16, K, KS, NT, NX>(c, m, half, ref);
  }
};

}  // namespace

int main(int argc, char** argv) {
  const size_t l2 = start();
  const bool quick = argc > 1;
  // the tables' variants (tables/sm_90/nvfp4_skinny*.json)
  shape<5120, 4, 4, Rows>(34816, l2, {1, 8, 9, 16, 17, 24, 32}, true);
  shape<5120, 4, 4, Rows>(12288, l2, {1, 8, 16, 32}, false);
  if (quick) return 0;
  shape<5120, 4, 4, Rows>(16384, l2, {1, 16, 32}, false);
  shape<17408, 8, 4, Rows>(5120, l2, {1, 8, 16, 32}, true);
  shape<6144, 8, 4, Rows>(5120, l2, {1, 16, 32}, false);
  shape<5120, 8, 2, Rows>(1024, l2, {9, 16, 32}, true);
  return 0;
}
