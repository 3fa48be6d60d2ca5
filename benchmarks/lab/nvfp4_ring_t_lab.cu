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
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "lab_common.cuh"
#include "common/cp_async.cuh"
#include "gemm/nvfp4_stream_kernel.cuh"

using namespace qwen38;
using namespace qwen38::gemm;
using bf16 = __nv_bfloat16;

namespace {

using lab::time_graph;

template <typename T, int K, int KS, int NT, int MT>
__global__ void __launch_bounds__(QWEN38_NVFP4_STREAM_THREADS(KS, NT, MT), QWEN38_NVFP4_STREAM_MIN_BLOCKS(KS, NT, MT))
    xa_kernel(const Nvfp4Params p) {
  nvfp4_stream_xa<T, K, KS, NT, MT>(p);
}
template <typename T, int K, int KS, int NT, int NX>
__global__ void __launch_bounds__(QWEN38_NVFP4_STREAM_THREADS(KS, NT, (NX > 2 ? 2 : 1)),
                                  QWEN38_NVFP4_STREAM_MIN_BLOCKS(KS, NT, (NX > 2 ? 2 : 1)))
    t_kernel(const Nvfp4Params p) {
  nvfp4_stream_t<T, K, KS, NT, NX>(p);
}

// the library's staged body at ring depth D (nvfp4_stream_kernel.cuh nvfp4_stream_ts; the library runs D = 2)
// (MINB: the launch bounds' blocks an SM; 9 holds 1 group at k split 4 to 56 registers: 9 CTAs an SM,
// 1188 on 132 SMs, one round for 34816x5120's 1088)
template <typename T, int K, int KS, int NT, int NX, int D, int MINB = 1>
__global__ void __launch_bounds__(32 * KS, MINB) tr_kernel(const Nvfp4Params p) {
  nvfp4_stream_ts<T, K, KS, NT, NX, D>(p);
}

__global__ void fill_x(uint16_t* p, size_t n, uint32_t seed, int half) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint32_t h = lab::mix(i, seed);
    p[i] = half ? uint16_t((h & 0x83ff) | 0x3800) : uint16_t((h & 0x807f) | 0x3f00);
  }
}

struct Case {
  int n, k, copies;
  lab::Nvfp4Copies w;
  void* x;   // 32 rows of bf16
  void* xh;  // 32 rows of fp16
  void* y;
  float* global;
};

double g_ceiling = 0;
bool g_one_group = false;  // "1g": 1..8 rows of the grids of more than one round, the capped staged body

Case make_case(int n, int k, size_t l2) {
  Case c{n, k, 0, {}, nullptr, nullptr, nullptr, nullptr};
  const size_t per = size_t(n) * k / 2 + size_t(n) * k / 16;
  c.copies = int(std::max<size_t>(2, (3 * l2 + per - 1) / per));
  c.w.alloc(n, k, c.copies);
  CK(cudaMalloc(&c.x, size_t(32) * k * 2));
  CK(cudaMalloc(&c.xh, size_t(32) * k * 2));
  fill_x<<<1024, 256>>>(static_cast<uint16_t*>(c.x), size_t(32) * k, 5, 0);
  fill_x<<<1024, 256>>>(static_cast<uint16_t*>(c.xh), size_t(32) * k, 6, 1);
  CK(cudaMalloc(&c.y, size_t(32) * n * 2));
  CK(cudaMalloc(&c.global, 4));
  const float gs = 0.75f;
  CK(cudaMemcpy(c.global, &gs, 4, cudaMemcpyHostToDevice));
  CK(cudaDeviceSynchronize());
  return c;
}
void free_case(Case& c) {
  c.w.release();
  CK(cudaFree(c.x));
  CK(cudaFree(c.xh));
  CK(cudaFree(c.y));
  CK(cudaFree(c.global));
}
Nvfp4Params params(const Case& c, int m, bool half, int i) {
  Nvfp4Params p;
  p.x = half ? c.xh : c.x;
  p.w = c.w.w[i % c.copies];
  p.scale = c.w.s[i % c.copies];
  p.global = c.global;
  p.y = c.y;
  p.m = m;
  p.n = c.n;
  p.k = c.k;
  p.x_stride = c.k;
  p.out = int(half ? Out::kF16 : Out::kBF16);
  return p;
}
std::vector<uint8_t> read_y(const Case& c, int m) {
  std::vector<uint8_t> out(size_t(m) * c.n * 2);
  CK(cudaMemcpy(out.data(), c.y, out.size(), cudaMemcpyDeviceToHost));
  return out;
}

template <typename Kern>
void run(Case& c, int m, bool half, Kern kernel, unsigned grid, int threads, size_t smem, std::vector<uint8_t>& ref,
         const char* label) {
  if (smem > 0) CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  auto launch = [&](int i, cudaStream_t s) { kernel<<<grid, threads, smem, s>>>(params(c, m, half, i)); };
  float us = 0;
  if (!half) us = time_graph(std::max(4 * c.copies, 24), launch);
  CK(cudaMemset(c.y, 0, size_t(32) * c.n * 2));
  launch(0, 0);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  const char* bits = "reference";
  if (ref.empty()) ref = read_y(c, m);
  else bits = read_y(c, m) == ref ? "same bits" : "BITS DIFFER";
  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  cudaFuncAttributes fa{};
  CK(cudaFuncGetAttributes(&fa, kernel));
  if (half) {
    std::printf("  %-30s fp16 bits: %s\n", label, bits);
    return;
  }
  const double bytes = double(c.n) * c.k / 2 + double(c.n) * c.k / 16 + 2.0 * m * (c.k + c.n);
  const double gbs = bytes / (us * 1e3);
  std::printf("  %-30s %8.2f us %6.0f GB/s %5.1f%%  regs %3d  smem %6zu  %2d blk/SM  %s\n", label, us, gbs,
              100.0 * gbs / g_ceiling, fa.numRegs, smem + fa.sharedSizeBytes, per_sm, bits);
}

template <typename T, int K, int KS, int NT, int NX, int D, int MINB = 1>
void run_tr(Case& c, int m, bool half, std::vector<uint8_t>& ref) {
  char label[64];
  std::snprintf(label, sizeof label, "staged ks%d nt%d nx%d D%d%s", KS, NT, NX, D, MINB > 1 ? " capped" : "");
  run(c, m, half, tr_kernel<T, K, KS, NT, NX, D, MINB>, unsigned(c.n / (8 * NT)), 32 * KS,
      nvfp4_staged_bytes<KS, NT, D>(), ref, label);
}

template <int K, int KS, int NT, int NX>
void rows_case(Case& c, int m, bool half) {
  constexpr int MT = NX > 2 ? 2 : 1;
  const unsigned grid = unsigned(c.n / (8 * NT));
  std::vector<uint8_t> ref;
  char label[64];
  auto all = [&](auto tag) {
    using T = decltype(tag);
    std::snprintf(label, sizeof label, "x-as-A ks%d nt%d mt%d", KS, NT, MT);
    run(c, m, half, xa_kernel<T, K, KS, NT, MT>, grid, 32 * KS, 0, ref, label);
    if constexpr (!(KS == 8 && NT == 4 && NX == 2 && std::is_same_v<T, __half>)) {
      std::snprintf(label, sizeof label, "registers ks%d nt%d nx%d", KS, NT, NX);
      run(c, m, half, t_kernel<T, K, KS, NT, NX>, grid, 32 * KS, 0, ref, label);
    }
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

template <int K, int KS, int NT>
void shape(int n, size_t l2, std::initializer_list<int> rows, bool fp16_bits) {
  Case c = make_case(n, K, l2);
  for (int m : rows) {
    std::printf("%dx%d, %d rows (%d copies)\n", n, K, m, c.copies);
    for (int h = 0; h < (fp16_bits ? 2 : 1); ++h) {
      const bool half = h == 1;
      switch ((m + 7) / 8) {
        case 1: rows_case<K, KS, NT, 1>(c, m, half); break;
        case 2: rows_case<K, KS, NT, 2>(c, m, half); break;
        case 3: rows_case<K, KS, NT, 3>(c, m, half); break;
        default: rows_case<K, KS, NT, 4>(c, m, half); break;
      }
    }
    std::fflush(stdout);
  }
  free_case(c);
}

}  // namespace

int main(int argc, char** argv) {
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  const size_t l2 = size_t(prop.l2CacheSize);
  g_ceiling = lab::read_ceiling_GBps();
  std::printf("device %s, %d SMs, L2 %zu MB, read ceiling %.0f GB/s\n", prop.name, prop.multiProcessorCount,
              l2 >> 20, g_ceiling);
  const bool quick = argc > 1 && std::string(argv[1]) != "1g";
  if (argc > 1 && std::string(argv[1]) == "1g") {
    g_one_group = true;
    shape<5120, 4, 4>(34816, l2, {1, 2, 4, 6, 8}, true);
    shape<5120, 4, 4>(17408, l2, {1, 4, 8}, false);
    return 0;
  }
  // the tables' variants (tables/sm_90/nvfp4_skinny*.json)
  shape<5120, 4, 4>(34816, l2, {1, 8, 16, 24, 32}, true);
  shape<5120, 4, 4>(16384, l2, {1, 16, 24, 32}, false);
  if (quick) return 0;
  shape<5120, 4, 4>(17408, l2, {1, 16, 32}, false);
  shape<5120, 4, 4>(14336, l2, {1, 16, 24, 32}, false);
  shape<5120, 4, 4>(12288, l2, {1, 16, 32}, false);
  shape<5120, 4, 4>(6144, l2, {1, 16}, false);
  return 0;
}
