// Lab (session 33): where the output head's tiles kernel (csrc/gemm/head_tiles.cuh) loses its fixed
// ~6.5 us (session 33's V sweep: 4.4 TB/s a byte past the first, 6.5 us at V = 0). The kernel body is
// head_tiles_kernel's (no greedy epilogue) with %globaltimer stamps per CTA: entry, past pdl_wait, past
// the main loop, past the store. Calls are graph-launched back to back with programmatic dependent
// launch over two weight copies (cold), as bench.time_calls does; the stamps of the last call are read
// back and summarised: when CTAs start, how the finish times spread, and the bytes each 10% of the
// call moved (from the finished CTAs' tiles).
//
//   nvcc -std=c++20 -O3 -arch=sm_90a --expt-relaxed-constexpr -I csrc benchmarks/lab/head_timeline_lab.cu \
//     -o build/lab/head_timeline_lab && build/lab/head_timeline_lab
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "common/launch.cuh"
#include "gemm/head_tiles.cuh"
#include "lab_common.cuh"

using namespace qwen38::gemm;
using prefill::kBN;
using prefill::kThreads;

__device__ __forceinline__ uint64_t gtimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ uint32_t smid() {
  uint32_t s;
  asm volatile("mov.u32 %0, %smid;" : "=r"(s));
  return s;
}

// stamps[cta] = {entry, past the wait, past the main loop, past the store, sm}
template <int S>
__global__ void __launch_bounds__(prefill::kThreads, S == 3 ? 3 : 2) timed_tiles(const HeadParams p, uint64_t* stamps) {
  extern __shared__ __align__(128) unsigned char smem[];
  const uint64_t t0 = gtimer();
  const int64_t n0 = int64_t(blockIdx.y) * prefill::kBN;
  qwen38::pdl_wait();
  const uint64_t t1 = gtimer();
  HeadWeight<__nv_bfloat16, S> w(static_cast<const __nv_bfloat16*>(p.w), p.v, p.k, n0);
  float acc[1][4][4];
  qwen38::zero_fill(acc);
  prefill::mainloop<1>(static_cast<const __nv_bfloat16*>(p.x), p.x_stride, p.m, p.k, int64_t(0), w, smem, acc);
  qwen38::pdl_allow();
  const uint64_t t2 = gtimer();
  prefill::store<int(Out::kF32)>(acc, p.y, nullptr, 0, p.m, p.v, 0, n0, [](float v) { return v; });
  __syncthreads();
  if (threadIdx.x == 0) {
    uint64_t* s = stamps + 5 * blockIdx.y;
    s[0] = t0;
    s[1] = t1;
    s[2] = t2;
    s[3] = gtimer();
    s[4] = smid();
  }
}

template <int S>
void run(int64_t v, int m, double ceiling) {
  const int64_t k = 5120;
  const int tiles = int((v + kBN - 1) / kBN);
  __nv_bfloat16 *x, *w[2];
  float* y;
  uint64_t* st;
  CK(cudaMalloc(&x, size_t(32) * k * 2));
  for (auto& wi : w) {
    CK(cudaMalloc(&wi, size_t(v) * k * 2));
    CK(cudaMemset(wi, 0x3c, size_t(v) * k * 2));
  }
  CK(cudaMalloc(&y, size_t(32) * v * 4));
  CK(cudaMalloc(&st, size_t(tiles) * 5 * 8));
  CK(cudaMemset(x, 0x3c, size_t(32) * k * 2));
  constexpr int smem = head_tiles_smem<__nv_bfloat16, S>();
  auto kern = timed_tiles<S>;
  CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  HeadParams p{};
  p.v = v;
  p.k = k;
  p.m = m;
  p.x = x;
  p.x_stride = k;
  p.y = y;
  const float us = lab::time_graph(20, [&](int i, cudaStream_t s) {
    p.w = w[i % 2];
    CK(qwen38::launch_kernel(kern, dim3(1, unsigned(tiles)), dim3(kThreads), size_t(smem), s, true, p, st));
  });
  std::vector<uint64_t> h(size_t(tiles) * 5);
  CK(cudaMemcpy(h.data(), st, h.size() * 8, cudaMemcpyDeviceToHost));
  uint64_t base = ~0ull, last = 0;
  for (int c = 0; c < tiles; ++c) base = std::min(base, h[5 * c]), last = std::max(last, h[5 * c + 3]);
  auto q = [&](int col) {
    std::vector<double> a;
    for (int c = 0; c < tiles; ++c) a.push_back((h[5 * c + col] - base) / 1e3);
    std::sort(a.begin(), a.end());
    return a;
  };
  const double bytes = double(v) * k * 2 + double(m) * k * 2 + double(m) * v * 4;
  std::printf("V %6lld (%d tiles) M %2d stages %d: %.2f us a call (%.1f%% of the ceiling); last call's span %.2f us\n",
              (long long)v, tiles, m, S, us, 100.0 * bytes / (us * 1e3) / ceiling, (last - base) / 1e3);
  const char* names[4] = {"entry", "past wait", "past loop", "end"};
  for (int col = 0; col < 4; ++col) {
    const auto a = q(col);
    std::printf("  %-10s min %6.2f  p10 %6.2f  p50 %6.2f  p90 %6.2f  max %6.2f us\n", names[col], a[0],
                a[a.size() / 10], a[a.size() / 2], a[a.size() * 9 / 10], a.back());
  }
  // finished tiles over time (bytes of the finished CTAs' tiles), in tenths of the span
  const auto ends = q(3);
  const double span = (last - base) / 1e3;
  std::printf("  CTAs done by tenth of the span:");
  for (int d = 1; d <= 10; ++d) {
    const double t = span * d / 10;
    std::printf(" %d", int(std::upper_bound(ends.begin(), ends.end(), t) - ends.begin()));
  }
  std::printf("\n");
  // per SM: CTAs and the spread of their ends
  std::vector<int> per(200, 0);
  for (int c = 0; c < tiles; ++c) per[h[5 * c + 4]]++;
  int one = 0, two = 0, more = 0;
  for (int s = 0; s < 200; ++s) one += per[s] == 1, two += per[s] == 2, more += per[s] > 2;
  std::printf("  SMs with 1 / 2 / more CTAs: %d / %d / %d\n", one, two, more);
  double e1 = 0, e2 = 0;
  int n1 = 0, n2 = 0;
  for (int c = 0; c < tiles; ++c) {
    const double e = (h[5 * c + 3] - base) / 1e3;
    if (per[h[5 * c + 4]] == 1) e1 += e, ++n1; else e2 += e, ++n2;
  }
  if (n1 && n2) std::printf("  mean end: CTAs alone on an SM %.2f us, sharing %.2f us\n", e1 / n1, e2 / n2);
  CK(cudaFree(x));
  for (auto& wi : w) CK(cudaFree(wi));
  CK(cudaFree(y));
  CK(cudaFree(st));
}

int main() {
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  const double ceiling = lab::read_ceiling_GBps();
  std::printf("device %s, %d SMs, read ceiling %.0f GB/s\n", prop.name, prop.multiProcessorCount, ceiling);
  for (int m : {1, 16}) {
    run<4>(16896, m, ceiling);
    run<4>(32768, m, ceiling);
    run<4>(33792, m, ceiling);
  }
  run<3>(50688, 1, ceiling);
  run<3>(67584, 1, ceiling);
  return 0;
}
