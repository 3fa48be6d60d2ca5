// A/B lab for nvfp4_linear at 1..32 rows, the transposed stream body (weights as the mma A operand)
// with its weights and scales straight into registers (nvfp4_stream_t) against the staged body
// (nvfp4_stream_ts: a per-thread cp.async ring in shared memory, D steps in flight, each thread
// reading back only what it copied), both from csrc/gemm/nvfp4_stream_kernel.cuh, and the x-as-A
// body (the bits' reference).
// Why (session 21, sm_90a SASS of nvfp4_stream_t at k split 4, 4 tiles, 1 group): ptxas puts every
// weight and scale load on one dependency barrier, and the first use of a step's words waits for the
// whole barrier, i.e. for the loads issued one step later too: the weights run about one step ahead,
// not kD. The ring is waited for by group count (cp.async.wait_group D - 1, DEPBAR.LE), and the
// registers of the steps in flight are freed (more CTAs an SM). Measured (nvfp4_ring_t_lab_s21.txt):
// the depth gains nothing (deeper is slower), the occupancy gains where it decides the grid's waves
// (the library's rule, stream_launch.cuh use_staged). The first run also timed P k slices a warp (a
// CTA of KS / P warps computing the k split's slices in turn, the same bits): slower everywhere
// (34816x5120 at 1 row 46.2 us at P = 2 against 40.7 at P = 1), not kept.
//
//   nvcc -std=c++20 -O3 -arch=sm_90a --expt-relaxed-constexpr -diag-suppress 128,177 -I csrc \
//        benchmarks/lab/nvfp4_ring_t_lab.cu -o nvfp4_ring_t_lab && ./nvfp4_ring_t_lab [quick]
//
// Method as the benchmarks: CUDA graphs over weight copies of more than 3x L2 (cold weights), median
// of replays, the streaming-read ceiling in the same process; plain launches (no PDL, no cluster).
#include <string>

#include "common/cp_async.cuh"
#include "nvfp4_ab.cuh"

using namespace nvfp4_ab;

namespace {

bool g_one_group = false;  // "1g": 1..8 rows of the grids of more than one round, the capped staged body

// (MINB: the launch bounds' blocks an SM; 9 holds 1 group at k split 4 to 56 registers: 9 CTAs an SM,
// 1188 on 132 SMs, one round for 34816x5120's 1088)
template <typename T, int K, int KS, int NT, int NX, int D, int MINB = 1>
__global__ void __launch_bounds__(32 * KS, MINB) tr_kernel(const Nvfp4Params p) {
  nvfp4_stream_ts<T, K, KS, NT, NX, D>(p);
}

template <typename T, int K, int KS, int NT, int NX, int D, int MINB = 1>
void run_tr(Case& c, int m, bool half, std::vector<uint8_t>& ref) {
  char label[64];
  std::snprintf(label, sizeof label, "staged ks%d nt%d nx%d D%d%s", KS, NT, NX, D, MINB > 1 ? " capped" : "");
  run(c, m, half, tr_kernel<T, K, KS, NT, NX, D, MINB>, unsigned(c.n / (8 * NT)), 32 * KS,
      nvfp4_staged_bytes<KS, NT, D>(), ref, label);
}

template <int K, int KS, int NT, int NX>
struct Rows {
  static void run(Case& c, int m, bool half) {
    std::vector<uint8_t> ref;
    auto all = [&](auto tag) {
      using T = decltype(tag);
      run_xa_and_t<T, K, KS, NT, NX>(c, m, half, ref);
      if constexpr (!kStreamClusters<K, KS>) {
        run_tr<T, K, KS, NT, NX, 2>(c, m, half, ref);
        if (g_one_group) {
          if constexpr (NX == 1 && KS == 4) run_tr<T, K, KS, NT, NX, 2, 9>(c, m, half, ref);
        } else {
          run_tr<T, K, KS, NT, NX, 3>(c, m, half, ref);
        }
      }
    };
    if (half) all(__half{});
    else all(bf16{});
  }
};

}  // namespace

int main(int argc, char** argv) {
  const size_t l2 = start();
  const bool quick = argc > 1 && std::string(argv[1]) != "1g";
  if (argc > 1 && std::string(argv[1]) == "1g") {
    g_one_group = true;
    shape<5120, 4, 4, Rows>(34816, l2, {1, 2, 4, 6, 8}, true);
    shape<5120, 4, 4, Rows>(17408, l2, {1, 4, 8}, false);
    return 0;
  }
  // the tables' variants (tables/sm_90/nvfp4_skinny*.json)
  shape<5120, 4, 4, Rows>(34816, l2, {1, 8, 16, 24, 32}, true);
  shape<5120, 4, 4, Rows>(16384, l2, {1, 16, 24, 32}, false);
  if (quick) return 0;
  shape<5120, 4, 4, Rows>(17408, l2, {1, 16, 32}, false);
  shape<5120, 4, 4, Rows>(14336, l2, {1, 16, 24, 32}, false);
  shape<5120, 4, 4, Rows>(12288, l2, {1, 16, 32}, false);
  shape<5120, 4, 4, Rows>(6144, l2, {1, 16}, false);
  return 0;
}
