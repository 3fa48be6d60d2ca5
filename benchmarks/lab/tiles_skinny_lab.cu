// Lab (prepared in session 12, not run yet): the NVFP4 and FP8 weight GEMMs at 1..32 rows on the
// tensor-core tile machinery that took the output head to ~90% of the read ceiling at every row
// count (csrc/gemm/head_tiles.cuh, head_lab_12.txt). One CTA computes 32 rows x 128 columns over a
// range of K tiles: x staged once per stage for the CTA's 128 columns (the skinny kernels re-load
// the activation fragments for every 8 weight rows, and hold a second m16 tile at 17..32 rows), the
// weight decoded once per CTA (NVFP4, prefill_nvfp4.cuh) or by each warp into registers (FP8,
// prefill_fp8.cuh). The grid is (1, N / 128, splits): K in `splits` equal ranges, each writing its
// fp32 partial sums to its own [M, N] slice (no reduction here: it would add one small kernel;
// a split of K by the shape alone keeps row invariance). The question: at 1 / 16 / 32 rows, how close
// to the read ceiling, against the skinny kernels' 53 / 44 / 25% (NVFP4 34816x5120) and 68 / 60 / 37%
// (FP8)? (Both would change the bits of the 1..32-row path: another summation order, still one for
// every row count.)
//
//   nvcc -std=c++20 -O3 -arch=sm_90a --expt-relaxed-constexpr -I csrc benchmarks/lab/tiles_skinny_lab.cu -o build/lab/tiles_skinny_lab
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "gemm/prefill_fp8.cuh"
#include "gemm/prefill_nvfp4.cuh"
#include "lab_common.cuh"

using namespace qwen38::gemm;
using prefill::kBK;
using prefill::kBN;
using prefill::kThreads;

struct Args {
  const __nv_bfloat16* x;  // [m, k]
  const uint8_t* w;        // NVFP4 packed [n, k/2] or e4m3 [n, k]
  const uint8_t* scale;    // NVFP4 e4m3 [n, k/16]
  const float* scale_f;    // FP8 fp32 [n/128, k/128]
  float* part;             // [splits, m, n]
  int64_t m, n, k;
};

template <bool FP8, int MINB>
__global__ void __launch_bounds__(kThreads, MINB) tiles_kernel(const Args a) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int64_t n0 = int64_t(blockIdx.y) * kBN;
  const int nkt = int(a.k / kBK), per = nkt / int(gridDim.z);
  const int kt0 = int(blockIdx.z) * per, kt1 = kt0 + per;
  float acc[1][4][4];
  qwen38::zero_fill(acc);
  if constexpr (FP8) {
    prefill_fp8::Fp8Weight<__nv_bfloat16, 1> w(a.w, a.n, a.k, n0, a.scale_f + (n0 / 128) * (a.k / 128));
    prefill::mainloop<1>(a.x, a.k, a.m, a.k, int64_t(0), w, smem, acc, kt0, kt1);
  } else {
    prefill_nvfp4::Nvfp4Weight<__nv_bfloat16, 1> w(a.w, a.scale, a.n, a.k, n0);
    prefill::mainloop<1>(a.x, a.k, a.m, a.k, int64_t(0), w, smem, acc, kt0, kt1);
  }
  prefill::store<2>(acc, a.part + int64_t(blockIdx.z) * a.m * a.n, nullptr, 0, a.m, a.n, 0, n0,
                    [](float v) { return v; });
}

template <bool FP8> constexpr int smem() {
  if constexpr (FP8) return prefill::smem_bytes<1, prefill_fp8::Fp8Weight<__nv_bfloat16, 1>>();
  else return prefill::smem_bytes<1, prefill_nvfp4::Nvfp4Weight<__nv_bfloat16, 1>>();
}

__global__ void fill(uint8_t* p, size_t n, uint32_t seed, int kind) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint32_t h = lab::mix(i, seed);
    uint8_t v = uint8_t(h);
    if (kind == 1) v = uint8_t(((3 + (h >> 8) % 7) << 3) | (h & 7));  // e4m3 scales 2^-4 .. 2^2
    if (kind == 2 && (v & 0x7f) == 0x7f) v = 0x38;                      // e4m3 weights: no NaN
    p[i] = v;
  }
}

template <bool FP8, int MINB>
void run(const char* name, int64_t n, int64_t k, const std::vector<int>& rows, const std::vector<int>& splits,
         double ceiling, size_t l2) {
  const size_t wbytes = FP8 ? size_t(n) * k : size_t(n) * k / 2, sbytes = FP8 ? 0 : size_t(n) * k / 16;
  const int copies = int(std::max<size_t>(2, 3 * l2 / (wbytes + sbytes) + 1));
  std::vector<uint8_t*> w(copies), s(copies);
  std::vector<float*> sf(copies);
  for (int c = 0; c < copies; ++c) {
    CK(cudaMalloc(&w[c], wbytes));
    fill<<<2048, 256>>>(w[c], wbytes, 17 + c, FP8 ? 2 : 0);
    if (!FP8) {
      CK(cudaMalloc(&s[c], sbytes));
      fill<<<2048, 256>>>(s[c], sbytes, 71 + c, 1);
    }
    const size_t nf = size_t((n + 127) / 128) * ((k + 127) / 128);
    CK(cudaMalloc(&sf[c], nf * 4));
    std::vector<float> h(nf, 0.01f);
    CK(cudaMemcpy(sf[c], h.data(), nf * 4, cudaMemcpyHostToDevice));
  }
  __nv_bfloat16* x;
  float* part;
  CK(cudaMalloc(&x, size_t(32) * k * 2));
  fill<<<256, 256>>>(reinterpret_cast<uint8_t*>(x), size_t(32) * k * 2, 5, 0);
  {  // bf16 bytes from a hash can be NaN/inf: keep them finite (clear the exponent's top bit)
    std::vector<uint16_t> hx(size_t(32) * k);
    CK(cudaMemcpy(hx.data(), x, hx.size() * 2, cudaMemcpyDeviceToHost));
    for (auto& v : hx) v &= 0xbfffu;
    CK(cudaMemcpy(x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
  }
  CK(cudaMalloc(&part, size_t(4) * 32 * n * 4));
  CK(cudaDeviceSynchronize());
  auto kernel = tiles_kernel<FP8, MINB>;
  constexpr int kSmem = smem<FP8>();
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  int bps = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, kernel, kThreads, kSmem));
  cudaFuncAttributes fa{};
  CK(cudaFuncGetAttributes(&fa, kernel));
  std::printf("%s %lldx%lld (%d copies): regs %d, %d blocks/SM, smem %d KB\n", name, (long long)n, (long long)k, copies,
              fa.numRegs, bps, kSmem / 1024);
  for (int sp : splits) {
    if ((k / kBK) % (2 * sp) != 0) continue;  // FP8: whole 128-k blocks per split
    for (int m : rows) {
      const dim3 grid(1, unsigned((n + kBN - 1) / kBN), unsigned(sp));
      const float us = lab::time_graph(4 * copies, [&](int i, cudaStream_t st) {
        const int c = i % copies;
        kernel<<<grid, kThreads, kSmem, st>>>(Args{x, w[c], s[c], sf[c], part, m, n, k});
      });
      const double bytes = double(wbytes + sbytes) + double(m) * k * 2 + double(sp) * m * n * 4;
      std::printf("  splits %d rows %2d  %7.1f us  %6.0f GB/s  %5.1f%%\n", sp, m, us, bytes / (us * 1e3),
                  100.0 * bytes / (us * 1e3) / ceiling);
    }
  }
  for (int c = 0; c < copies; ++c) {
    CK(cudaFree(w[c]));
    if (!FP8) CK(cudaFree(s[c]));
    CK(cudaFree(sf[c]));
  }
  CK(cudaFree(x));
  CK(cudaFree(part));
}

int main() {
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  const size_t l2 = size_t(prop.l2CacheSize);
  std::printf("device %s, %d SMs, L2 %zu MB\n", prop.name, prop.multiProcessorCount, l2 >> 20);
  const double ceiling = lab::read_ceiling_GBps();
  std::printf("read ceiling %.0f GB/s\n", ceiling);
  const std::vector<int> rows = {1, 16, 32}, splits = {1, 2, 4};
  for (auto nk : {std::pair<int64_t, int64_t>{34816, 5120}, {16384, 5120}, {12288, 5120}, {5120, 17408}}) {
    run<false, 2>("nvfp4 tiles 2/SM", nk.first, nk.second, rows, splits, ceiling, l2);
    run<false, 3>("nvfp4 tiles 3/SM", nk.first, nk.second, rows, splits, ceiling, l2);
    run<true, 2>("fp8 tiles 2/SM", nk.first, nk.second, rows, splits, ceiling, l2);
  }
  return 0;
}
