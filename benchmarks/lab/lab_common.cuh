// Shared pieces of the nvcc-only A/B labs (norm_stream_lab.cu, skinny_lab.cu, fp8_lab.cu): the error
// check, the streaming-read ceiling kernel, the CUDA-graph timing of the benchmarks (a graph of
// `calls` launches, median of 7 replays after a warm-up, us per launch), and the pieces of the
// shared-memory feeds (mbarriers, bulk and tensor-map copies, the tensor-map encoder).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common/tensor_map.h"
#include "common/tma.cuh"
#include "gemm/nvfp4_linear_launch.h"

#define CK(x)                                                                                 \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

namespace lab {

// A hash of an element index (the labs fill their inputs from it: the same data in every run).
__device__ __forceinline__ uint32_t mix(uint64_t i, uint32_t seed) {
  uint32_t h = uint32_t(i) * 2654435761u ^ uint32_t(i >> 32) * 0x9e3779b9u ^ seed;
  h ^= h >> 13;
  h *= 0x5bd1e995u;
  h ^= h >> 15;
  return h;
}

// every 16-byte word once per call, XOR-folded (a sink store nobody takes keeps the loads)
__global__ void read_kernel(const uint4* p, size_t n, unsigned* sink) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 u = __ldcg(p + i);
    acc ^= u.x ^ u.y ^ u.z ^ u.w;
  }
  if (acc == 0x12345678u) sink[0] = acc;
}

template <typename F>
float time_graph(int calls, F&& launch_i);

// The streaming-read ceiling of device 0 in GB/s: read_kernel over 2 GiB, graph-timed.
inline double read_ceiling_GBps() {
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  const size_t rb = size_t(2) << 30;
  void* big = nullptr;
  CK(cudaMalloc(&big, rb));
  CK(cudaMemset(big, 1, rb));
  unsigned* sink = nullptr;
  CK(cudaMalloc(&sink, 4));
  const float us = time_graph(6, [&](int, cudaStream_t s) {
    read_kernel<<<prop.multiProcessorCount * 8, 512, 0, s>>>(static_cast<const uint4*>(big), rb / 16, sink);
  });
  CK(cudaFree(big));
  CK(cudaFree(sink));
  return double(rb) / (us * 1e3);
}

template <typename F>
float time_graph(int calls, F&& launch_i) {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t g;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < calls; ++i) launch_i(i, s);
  CK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t ge;
  CK(cudaGraphInstantiate(&ge, g, 0));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  CK(cudaGraphLaunch(ge, s));  // warm-up
  std::vector<float> t;
  for (int r = 0; r < 7; ++r) {
    CK(cudaEventRecord(a, s));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1000.f / calls);
  }
  std::sort(t.begin(), t.end());
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  CK(cudaStreamDestroy(s));
  return t[t.size() / 2];
}

// 16-bit activations from a hash: bf16 +-[0.5, 2) (finite, nonzero; the same data in every run)
__global__ void fill_act(uint16_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint32_t h = mix(i, seed);
    p[i] = uint16_t((h & 0x807f) | 0x3f00);
  }
}

// Random NVFP4 test weights from a hash (the same data in every run): kind 0 any byte (two e2m1
// codes), kind 1 e4m3 block scales 2^-4 .. 2^2.
__global__ void fill_nvfp4(uint8_t* p, size_t n, uint32_t seed, int kind) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint32_t h = mix(i, seed);
    p[i] = kind == 1 ? uint8_t(((3 + (h >> 8) % 7) << 3) | (h & 7)) : uint8_t(h);
  }
}

// `copies` copies of one N x K NVFP4 weight shape (packed codes [N, K/2], scales [N, K/16]), each
// filled from its own seeds; release() frees them.
struct Nvfp4Copies {
  std::vector<uint8_t*> w, s;
  void alloc(int64_t n, int64_t k, int copies) {
    const size_t wbytes = size_t(n) * k / 2, sbytes = size_t(n) * k / 16;
    w.resize(copies);
    s.resize(copies);
    for (int c = 0; c < copies; ++c) {
      CK(cudaMalloc(&w[c], wbytes));
      CK(cudaMalloc(&s[c], sbytes));
      fill_nvfp4<<<2048, 256>>>(w[c], wbytes, 17 + c, 0);
      fill_nvfp4<<<2048, 256>>>(s[c], sbytes, 71 + c, 1);
    }
  }
  void release() {
    for (size_t c = 0; c < w.size(); ++c) {
      CK(cudaFree(w[c]));
      CK(cudaFree(s[c]));
    }
    w.clear();
    s.clear();
  }
};

// The data of the NVFP4 GEMM labs at K = k: weight copies (2x L2 in all), the global scale 0.01,
// x of mmax rows (fill_act) and two outputs of mmax x n fp32 (y, yref); release() frees them.
struct Nvfp4Data {
  int64_t n = 0, k = 0;
  int copies = 0;
  Nvfp4Copies wt;
  float* global = nullptr;
  void* x = nullptr;
  void* y = nullptr;
  void* yref = nullptr;
  void alloc(int64_t n_, int64_t k_, int64_t mmax, size_t l2) {
    n = n_;
    k = k_;
    const size_t wbytes = size_t(n) * k / 2, sbytes = size_t(n) * k / 16;
    copies = int(std::max<size_t>(1, 2 * l2 / (wbytes + sbytes) + 1));
    wt.alloc(n, k, copies);
    CK(cudaMalloc(&global, 4));
    const float gs = 0.01f;
    CK(cudaMemcpy(global, &gs, 4, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&x, size_t(mmax) * k * 2));
    fill_act<<<2048, 256>>>(static_cast<uint16_t*>(x), size_t(mmax) * k, 5);
    CK(cudaMalloc(&y, size_t(mmax) * n * 4));
    CK(cudaMalloc(&yref, size_t(mmax) * n * 4));
    CK(cudaDeviceSynchronize());
    std::printf("%lldx%lld (%d weight copies)\n", (long long)n, (long long)k, copies);
  }
  void release() {
    wt.release();
    CK(cudaFree(global));
    CK(cudaFree(x));
    CK(cudaFree(y));
    CK(cudaFree(yref));
  }
  // the arguments of a call on weight copy c at m rows into out (a dtype of qwen38::gemm::Out)
  qwen38::gemm::Nvfp4Params params(int c, int64_t m, void* out_y, int out) const {
    qwen38::gemm::Nvfp4Params p;
    p.x = x;
    p.w = wt.w[c];
    p.scale = wt.s[c];
    p.global = global;
    p.y = out_y;
    p.m = m;
    p.n = n;
    p.k = k;
    p.x_stride = k;
    p.out = out;
    return p;
  }
};

// calls == 0: one launch(0, default stream), checked and waited for; else us per call of a graph of
// `calls` launches rotating over `copies` argument copies (launch(i % copies, stream)).
template <typename L>
float run_or_time(L&& launch, int copies, int calls) {
  if (calls == 0) {
    launch(0, nullptr);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    return 0.f;
  }
  return time_graph(calls, [&](int i, cudaStream_t st) { launch(i % copies, st); });
}

// ---- shared-memory feeds (skinny_lab bulk / tmap modes, fp8_lab): mbarriers, bulk and tensor-map
// copies, 16-byte shared loads; the host side's tensor-map encoder from the driver
using qwen38::tma::mbar_expect;
using qwen38::tma::mbar_init;
using qwen38::tma::mbar_wait;
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void tensor_copy(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar) {
  qwen38::tma::copy_2d(dst, map, c0, c1, bar);
}
__device__ __forceinline__ uint4 lds128(uint32_t a) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
  return v;
}

// A 2-D tensor map of a row-major [rows, cols] tensor of `type` elements (row stride `stride_bytes`),
// boxes of box_rows x box_cols, the given swizzle (common/tensor_map.h); exits where it cannot.
inline CUtensorMap tensor_map_2d(const void* base, CUtensorMapDataType type, uint64_t rows, uint64_t cols,
                                 uint64_t stride_bytes, uint32_t box_rows, uint32_t box_cols,
                                 CUtensorMapSwizzle swizzle) {
  CUtensorMap m;
  if (!qwen38::tensor_map_2d(&m, base, type, rows, cols, stride_bytes, box_rows, box_cols, swizzle)) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled failed\n");
    std::exit(1);
  }
  return m;
}

}  // namespace lab
