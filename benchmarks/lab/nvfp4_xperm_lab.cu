// A/B lab for nvfp4_linear at 1..32 rows: the library's stream bodies (x-as-A nvfp4_stream_xa and
// transposed nvfp4_stream_t, csrc/gemm/nvfp4_stream_kernel.cuh) against copies that read the
// activations from a fragment-ordered copy of x (xp below) instead of x's rows.
// Why (session 21, ncu_s21_x_reads.txt): at 9..32 rows L1/TEX throughput is at 83-85% with DRAM at
// 21-31%. In the library bodies a warp's 16-byte load of word q of x touches 8 rows x 2 lines (the
// four threads of a row read 16 bytes each, 64 bytes apart), and the four words of a step touch the
// same 16 lines again: per warp step at 4 tiles, 64 line touches per 8-row group of x against 32
// for the weights and 32 for the scales. In the fragment order the 32 threads' 16-byte words of one
// (step, word, group) are contiguous (512 bytes, 4 lines): a quarter of the x line touches. The
// values reaching each thread are the same, so the same bits (checked against the x-as-A body).
// The copy costs a pass over x (M x K x 2 bytes written, padded to whole groups); the lab times the
// permute kernel alone and the pair in one graph.
//
//   nvcc -std=c++20 -O3 -arch=sm_90a --expt-relaxed-constexpr -diag-suppress 128,177 -I csrc \
//        benchmarks/lab/nvfp4_xperm_lab.cu -o nvfp4_xperm_lab && ./nvfp4_xperm_lab [quick | ncu]
//
// Method as the benchmarks: CUDA graphs over weight copies of more than 3x L2 (cold weights), median
// of replays, the streaming-read ceiling in the same process; plain launches (no PDL, no cluster).
#include <string>

#include "nvfp4_ab.cuh"

using namespace nvfp4_ab;

namespace {

// The copy of x in the fragment order: the library's (stream_common.cuh xfrag_kernel, the layout
// activation_frag reads, each word re-paired as the NVFP4 bodies take it: for the x-as-A body, h
// even, kXfragPairedA, else kXfragPaired), launched plainly; k x h uint4s, one a thread.
template <typename T>
void xperm(const T* x, int m, int k, int h, uint4* out, cudaStream_t s = 0, bool xa = false) {
  const unsigned grid = unsigned((int64_t(k) * h + 255) / 256);
  const auto* xs = reinterpret_cast<const uint16_t*>(x);
  if (xa) stream::xfrag_kernel<uint16_t, stream::kXfragPairedA><<<grid, 256, 0, s>>>(xs, m, k, k, h, out);
  else stream::xfrag_kernel<uint16_t, stream::kXfragPaired><<<grid, 256, 0, s>>>(xs, m, k, k, h, out);
}

// The library's bodies reading x in the fragment order (nvfp4_stream_kernel.cuh, kFrag; session 22
// measured the lab's own copies of them, landed as these): the transposed body at NX groups and the
// x-as-A body at MT m16 tiles (2 MT groups), with the library kernels' launch bounds.
template <typename T, int K, int KSPLIT, int NT, int NX>
__global__ void __launch_bounds__(QWEN38_NVFP4_STREAM_THREADS(KSPLIT, NT, (NX > 2 ? 2 : 1)),
                                  QWEN38_NVFP4_STREAM_MIN_BLOCKS(KSPLIT, NT, (NX > 2 ? 2 : 1)))
    tp_kernel(const Nvfp4Params p) {
  nvfp4_stream_t<T, K, KSPLIT, NT, NX, true>(p);
}
template <typename T, int K, int KSPLIT, int NT, int MT>
__global__ void __launch_bounds__(QWEN38_NVFP4_STREAM_THREADS(KSPLIT, NT, MT),
                                  QWEN38_NVFP4_STREAM_MIN_BLOCKS(KSPLIT, NT, MT)) xap_kernel(const Nvfp4Params p) {
  nvfp4_stream_xa<T, K, KSPLIT, NT, MT, true>(p);
}

uint4* g_xp = nullptr;  // the fragment-ordered x (32 rows' worth)

// a permuted body: x permuted once (untimed), then the body alone timed; then permute + body per call
template <typename T, typename Kern>
void run_perm(Case& c, int m, bool half, Kern kernel, int h, bool xa, std::vector<uint8_t>& ref,
              const char* label) {
  const T* x = static_cast<const T*>(half ? c.xh : c.x);
  xperm(x, m, c.k, h, g_xp, 0, xa);
  CK(cudaGetLastError());
  Case cp = c;
  cp.x = cp.xh = g_xp;  // the body reads the copy (params() passes x_stride K: unused by it)
  run(cp, m, half, kernel, unsigned(c.n / 32), 128, 0, ref, label);
  if (half) return;
  const float us_perm = time_graph(24, [&](int, cudaStream_t s) {
    xperm(x, m, c.k, h, g_xp, s, xa);
  });
  const float us_pair = time_graph(std::max(4 * c.copies, 24), [&](int i, cudaStream_t s) {
    xperm(x, m, c.k, h, g_xp, s, xa);
    kernel<<<unsigned(c.n / 32), 128, 0, s>>>(params(cp, m, half, i));
  });
  std::printf("  %-30s permute alone %6.2f us, permute + body %7.2f us\n", "", us_perm, us_pair);
}

template <int K, int KS, int NT, int NX>
struct Rows {
  static void run(Case& c, int m, bool half) {
    static_assert(KS == 4 && NT == 4, "the launch above: 128 threads, 32 rows a CTA");
    std::vector<uint8_t> ref;
    auto all = [&](auto tag) {
      using T = decltype(tag);
      constexpr int MT = NX > 2 ? 2 : 1;
      run_xa_and_t<T, K, KS, NT, NX>(c, m, half, ref);
      char label[64];
      std::snprintf(label, sizeof label, "x-as-A xperm ks%d nt%d mt%d", KS, NT, MT);
      run_perm<T>(c, m, half, xap_kernel<T, K, KS, NT, MT>, 2 * MT, true, ref, label);
      std::snprintf(label, sizeof label, "registers xperm ks%d nt%d nx%d", KS, NT, NX);
      run_perm<T>(c, m, half, tp_kernel<T, K, KS, NT, NX>, NX, false, ref, label);
    };
    if (half) all(__half{});
    else all(bf16{});
  }
};

// "ncu": one launch of each body at 1 / 16 / 32 rows of 34816x5120 (bf16), for a profiler
void ncu_launches(size_t l2) {
  Case c = make_case(34816, 5120, l2);
  const unsigned grid = unsigned(c.n / 32);
  for (int m : {1, 16, 32}) {
    const bf16* x = static_cast<const bf16*>(c.x);
    Case cp = c;
    cp.x = g_xp;
    auto both = [&](auto xa, auto t, auto xap, auto tp, int h_xa, int h_t) {
      xa<<<grid, 128>>>(params(c, m, false, 0));
      t<<<grid, 128>>>(params(c, m, false, 0));
      xperm(x, m, c.k, h_xa, g_xp, 0, true);
      xap<<<grid, 128>>>(params(cp, m, false, 0));
      xperm(x, m, c.k, h_t, g_xp);
      tp<<<grid, 128>>>(params(cp, m, false, 0));
    };
    if (m == 1)
      both(xa_kernel<bf16, 5120, 4, 4, 1>, t_kernel<bf16, 5120, 4, 4, 1>, xap_kernel<bf16, 5120, 4, 4, 1>,
           tp_kernel<bf16, 5120, 4, 4, 1>, 2, 1);
    else if (m == 16)
      both(xa_kernel<bf16, 5120, 4, 4, 1>, t_kernel<bf16, 5120, 4, 4, 2>, xap_kernel<bf16, 5120, 4, 4, 1>,
           tp_kernel<bf16, 5120, 4, 4, 2>, 2, 2);
    else
      both(xa_kernel<bf16, 5120, 4, 4, 2>, t_kernel<bf16, 5120, 4, 4, 4>, xap_kernel<bf16, 5120, 4, 4, 2>,
           tp_kernel<bf16, 5120, 4, 4, 4>, 4, 4);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
  }
  free_case(c);
}

}  // namespace

int main(int argc, char** argv) {
  const size_t l2 = start();
  const bool quick = argc > 1;
  CK(cudaMalloc(&g_xp, size_t(32) * kStreamMaxK * 2));
  if (argc > 1 && std::string(argv[1]) == "ncu") {
    ncu_launches(l2);
    return 0;
  }
  // the tables' variants (tables/sm_90/nvfp4_skinny*.json)
  shape<5120, 4, 4, Rows>(34816, l2, {1, 8, 9, 16, 17, 24, 25, 32}, true);
  shape<5120, 4, 4, Rows>(16384, l2, {1, 16, 24, 32}, false);
  if (quick) return 0;
  shape<5120, 4, 4, Rows>(17408, l2, {1, 16, 32}, false);
  shape<5120, 4, 4, Rows>(12288, l2, {1, 16, 32}, false);
  shape<5120, 4, 4, Rows>(6144, l2, {1, 16, 32}, false);
  return 0;
}
