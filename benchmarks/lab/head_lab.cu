// Lab (session 12): the output head (bf16 weight [V, 5120], fp32 logits) at 1..32 rows on the
// tensor-core prefill machinery (csrc/gemm/prefill_mma.cuh) with 32-row tiles: the kernel that
// became QWEN38_HEAD_KERNEL=tiles (csrc/gemm/head_tiles.cuh), timed here against the read ceiling,
// with the bits of each row of a 32-row call checked against its 1-row call. Session 12's run
// (head_lab_12.txt) also timed 4 stages at 2 CTAs an SM (1-2% slower than the 3 stages kept).
//
//   nvcc -std=c++20 -O3 -arch=sm_90a --expt-relaxed-constexpr -I csrc benchmarks/lab/head_lab.cu -o build/lab/head_lab
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "gemm/head_tiles.cuh"
#include "lab_common.cuh"

using namespace qwen38::gemm;
using prefill::kBN;
using prefill::kThreads;

__global__ void fill_bf16(__nv_bfloat16* p, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint32_t h = lab::mix(i, seed);
    p[i] = __float2bfloat16((float(h & 0xffff) / 32768.f - 1.f) * scale + (h >> 31 ? 1e-3f : -1e-3f));
  }
}

// fp64 reference of a few outputs
__global__ void ref_kernel(const __nv_bfloat16* x, const __nv_bfloat16* w, int64_t k, const int64_t* rc, int cnt,
                           double* out) {
  const int i = blockIdx.x;
  if (i >= cnt) return;
  const int64_t r = rc[2 * i], c = rc[2 * i + 1];
  double s = 0;
  for (int64_t j = threadIdx.x; j < k; j += blockDim.x)
    s += double(__bfloat162float(x[r * k + j])) * double(__bfloat162float(w[c * k + j]));
  __shared__ double red[256];
  red[threadIdx.x] = s;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o /= 2) {
    if (int(threadIdx.x) < o) red[threadIdx.x] += red[threadIdx.x + o];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[i] = red[0];
}

constexpr int kSmem = head_tiles_smem<__nv_bfloat16, 3>();

void launch(const HeadParams& p, cudaStream_t s) {
  const dim3 grid(1, unsigned((p.v + kBN - 1) / kBN));
  head_tiles_kernel<__nv_bfloat16, false, 3><<<grid, kThreads, kSmem, s>>>(p);
}

void run(const HeadParams& base, const std::vector<int>& rows, double ceiling) {
  auto kernel = head_tiles_kernel<__nv_bfloat16, false, 3>;
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  int bps = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, kernel, kThreads, kSmem));
  cudaFuncAttributes fa{};
  CK(cudaFuncGetAttributes(&fa, kernel));
  for (int m : rows) {
    HeadParams p = base;
    p.m = m;
    const float us = lab::time_graph(4, [&](int, cudaStream_t s) { launch(p, s); });
    const double bytes = double(p.v) * p.k * 2 + double(m) * p.k * 2 + double(m) * p.v * 4;
    std::printf("  tiles kernel  rows %2d  %8.1f us  %6.0f GB/s  %5.1f%%  regs %3d  %d blk/SM  smem %d KB\n", m, us,
                bytes / (us * 1e3), 100.0 * bytes / (us * 1e3) / ceiling, fa.numRegs, bps, kSmem / 1024);
  }
}

int main(int argc, char** argv) {
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  const double ceiling = lab::read_ceiling_GBps();
  std::printf("read ceiling %.0f GB/s\n", ceiling);
  for (int64_t n : {int64_t(248320), int64_t(32768)}) {
    const int64_t k = 5120;
    HeadParams p{};
    p.v = n;
    p.k = k;
    p.x_stride = k;
    __nv_bfloat16 *x, *w;
    CK(cudaMalloc(&x, size_t(32) * k * 2));
    CK(cudaMalloc(&w, size_t(n) * k * 2));
    CK(cudaMalloc(&p.y, size_t(32) * n * 4));
    fill_bf16<<<1024, 256>>>(x, size_t(32) * k, 7, 1.f);
    fill_bf16<<<4096, 256>>>(w, size_t(n) * k, 11, 0.02f);
    CK(cudaDeviceSynchronize());
    p.x = x;
    p.w = w;
    std::printf("%lldx%lld (one weight copy of %.0f MB: cold)\n", (long long)n, (long long)k, double(n) * k * 2 / 1e6);
    const std::vector<int> rows = {1, 8, 16, 17, 24, 32};
    run(p, rows, ceiling);
    // bits: each row of a 32-row call against its 1-row call; accuracy against fp64 on samples
    HeadParams p32 = p;
    p32.m = 32;
    launch(p32, 0);
    std::vector<float> y32(size_t(32) * n), y1(n);
    CK(cudaMemcpy(y32.data(), p.y, y32.size() * 4, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int r : {0, 5, 16, 31}) {
      HeadParams p1 = p;
      p1.m = 1;
      p1.x = x + size_t(r) * k;
      launch(p1, 0);
      CK(cudaMemcpy(y1.data(), p.y, size_t(n) * 4, cudaMemcpyDeviceToHost));
      if (std::memcmp(y1.data(), y32.data() + size_t(r) * n, size_t(n) * 4) != 0) ++bad;
    }
    std::printf("  rows of a 32-row call vs 1-row calls: %s\n", bad ? "DIFFERENT BITS" : "same bits (4 rows)");
    std::vector<int64_t> rc;
    for (int i = 0; i < 64; ++i) rc.push_back(i % 32), rc.push_back((int64_t(i) * 7919 * 31) % n);
    int64_t* drc;
    double* dref;
    CK(cudaMalloc(&drc, rc.size() * 8));
    CK(cudaMalloc(&dref, 64 * 8));
    CK(cudaMemcpy(drc, rc.data(), rc.size() * 8, cudaMemcpyHostToDevice));
    ref_kernel<<<64, 256>>>(x, w, k, drc, 64, dref);
    std::vector<double> ref(64);
    CK(cudaMemcpy(ref.data(), dref, 64 * 8, cudaMemcpyDeviceToHost));
    double worst = 0;
    for (int i = 0; i < 64; ++i) worst = std::fmax(worst, std::fabs(y32[size_t(rc[2 * i]) * n + rc[2 * i + 1]] - ref[i]));
    std::printf("  worst |y - fp64| over 64 samples: %.3g\n", worst);
    CK(cudaFree(x));
    CK(cudaFree(w));
    CK(cudaFree(p.y));
    CK(cudaFree(drc));
    CK(cudaFree(dref));
  }
  (void)argc;
  (void)argv;
  return 0;
}
