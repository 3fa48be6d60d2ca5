// Shared harness of the NVFP4 stream-body A/B labs (nvfp4_t_lab.cu, nvfp4_ring_t_lab.cu,
// nvfp4_scale_lab.cu): the x-as-A and transposed bodies of csrc/gemm/nvfp4_stream_kernel.cuh as
// kernels, the data of one weight shape (copies over 3x L2: cold weights; 32 rows of bf16 and of
// fp16 activations), a timed and bit-checked launch, and the loop over a shape's row counts.
// A lab defines `template <int K, int KS, int NT, int NX> struct Rows { static void run(Case&, int m,
// bool half); }` (its variants at ceil(m / 8) = NX groups) and calls nvfp4_ab::shape<K, KS, NT, Rows>.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <vector>

#include "lab_common.cuh"
#include "gemm/nvfp4_stream_kernel.cuh"

namespace nvfp4_ab {

using namespace qwen38;
using namespace qwen38::gemm;
using bf16 = __nv_bfloat16;
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

inline double g_ceiling = 0;  // GB/s, set by start()

inline Case make_case(int n, int k, size_t l2) {
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
inline void free_case(Case& c) {
  c.w.release();
  CK(cudaFree(c.x));
  CK(cudaFree(c.xh));
  CK(cudaFree(c.y));
  CK(cudaFree(c.global));
}
inline Nvfp4Params params(const Case& c, int m, bool half, int i) {
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
inline std::vector<uint8_t> read_y(const Case& c, int m) {
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

// The x-as-A body (the bits' reference while ref is empty), then the transposed body.
template <typename T, int K, int KS, int NT, int NX>
void run_xa_and_t(Case& c, int m, bool half, std::vector<uint8_t>& ref) {
  constexpr int MT = NX > 2 ? 2 : 1;
  const unsigned grid = unsigned(c.n / (8 * NT));
  char label[64];
  std::snprintf(label, sizeof label, "x-as-A ks%d nt%d mt%d", KS, NT, MT);
  run(c, m, half, xa_kernel<T, K, KS, NT, MT>, grid, 32 * KS, 0, ref, label);
  std::snprintf(label, sizeof label, "registers ks%d nt%d nx%d", KS, NT, NX);
  run(c, m, half, t_kernel<T, K, KS, NT, NX>, grid, 32 * KS, 0, ref, label);
}

// Rows<K, KS, NT, NX>::run for each row count (bf16 timed, then fp16 bits where asked).
template <int K, int KS, int NT, template <int, int, int, int> class Rows>
void shape(int n, size_t l2, std::initializer_list<int> rows, bool fp16_bits) {
  Case c = make_case(n, K, l2);
  for (int m : rows) {
    std::printf("%dx%d, %d rows (%d copies)\n", n, K, m, c.copies);
    for (int h = 0; h < (fp16_bits ? 2 : 1); ++h) {
      const bool half = h == 1;
      switch ((m + 7) / 8) {
        case 1: Rows<K, KS, NT, 1>::run(c, m, half); break;
        case 2: Rows<K, KS, NT, 2>::run(c, m, half); break;
        case 3: Rows<K, KS, NT, 3>::run(c, m, half); break;
        default: Rows<K, KS, NT, 4>::run(c, m, half); break;
      }
    }
    std::fflush(stdout);
  }
  free_case(c);
}

// Prints the device and measures the read ceiling (g_ceiling); returns the L2 size.
inline size_t start() {
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  g_ceiling = lab::read_ceiling_GBps();
  std::printf("device %s, %d SMs, L2 %zu MB, read ceiling %.0f GB/s\n", prop.name, prop.multiProcessorCount,
              size_t(prop.l2CacheSize) >> 20, g_ceiling);
  return size_t(prop.l2CacheSize);
}

}  // namespace nvfp4_ab
