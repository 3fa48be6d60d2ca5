// Lab (sm_90a only): the NVFP4 prefill GEMM on warpgroup MMA (gemm/nvfp4_wgmma_kernel.cuh: the
// decoded weights as wgmma's register A operand, x as its shared-memory B operand, 128 weight rows
// x BM rows of x a CTA) against the "mma" prefill kernel (nvfp4_prefill_kernel.cu, mma.sync): are
// its bits the "mma" kernel's, and how many TFLOP/s does it reach at 64..1024 rows?
//
//   nvcc -std=c++20 -O3 -gencode arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -I csrc \
//       benchmarks/lab/wgmma_prefill_lab.cu csrc/gemm/nvfp4_prefill_kernel.cu -o build/lab/wgmma_prefill_lab
//   build/lab/wgmma_prefill_lab
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/launch.cuh"
#include "gemm/nvfp4_wgmma_kernel.cuh"
#include "lab_common.cuh"

using namespace qwen38;
using namespace qwen38::gemm;

namespace {

constexpr int kK = 5120;

using Data = lab::Nvfp4Data;

template <int OUT, int BM, int S>
float run_wg(const Data& d, int64_t m, void* y, int calls) {
  using C = wg_prefill::Cfg<BM, S>;
  auto kernel = wg_prefill::nvfp4_wgmma_kernel<__nv_bfloat16, OUT, BM, S>;
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmem));
  const dim3 grid(unsigned((m + BM - 1) / BM), unsigned((d.n + 127) / 128));
  const CUtensorMap tx =
      lab::tensor_map_2d(d.x, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, uint64_t(m), kK, kK * 2, BM, 64, CU_TENSOR_MAP_SWIZZLE_128B);
  std::vector<CUtensorMap> tw(d.copies);
  for (int c = 0; c < d.copies; ++c)
    tw[c] = lab::tensor_map_2d(d.wt.w[c], CU_TENSOR_MAP_DATA_TYPE_UINT8, uint64_t(d.n), kK / 2, kK / 2, 128, 32,
                               CU_TENSOR_MAP_SWIZZLE_32B);
  auto launch = [&](int c, cudaStream_t st) {
    CK(launch_kernel(kernel, grid, dim3(wg_prefill::kThreads), size_t(C::kSmem), st, false, d.params(c, m, y, OUT),
                     tx, tw[c]));
  };
  return lab::run_or_time(launch, d.copies, calls);
}

float run_mma(const Data& d, int64_t m, void* y, int out, int calls) {
  auto launch = [&](int c, cudaStream_t st) { CK(launch_nvfp4_prefill(Act::kBF16, d.params(c, m, y, out), false, st)); };
  return lab::run_or_time(launch, d.copies, calls);
}

template <int OUT, int BM, int S>
void compare(const char* name, const Data& d, const std::vector<int>& rows) {
  using C = wg_prefill::Cfg<BM, S>;
  auto kernel = wg_prefill::nvfp4_wgmma_kernel<__nv_bfloat16, OUT, BM, S>;
  cudaFuncAttributes fa{};
  CK(cudaFuncGetAttributes(&fa, kernel));
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmem));
  int bps = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, kernel, wg_prefill::kThreads, C::kSmem));
  std::printf("  %-34s regs %3d, spill %zu B, smem %3d KB, %d CTAs/SM\n", name, fa.numRegs,
              size_t(fa.localSizeBytes), C::kSmem / 1024, bps);
  const int osz = OUT == int(Out::kF32) ? 4 : 2;
  for (int m : rows) {
    const size_t elems = size_t(m) * d.n;
    CK(cudaMemset(d.y, 0xFF, elems * osz));
    CK(cudaMemset(d.yref, 0xEE, elems * osz));
    run_wg<OUT, BM, S>(d, m, d.y, 0);
    run_mma(d, m, d.yref, OUT, 0);
    std::vector<uint8_t> a(elems * osz), b(elems * osz);
    CK(cudaMemcpy(a.data(), d.y, a.size(), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(b.data(), d.yref, b.size(), cudaMemcpyDeviceToHost));
    size_t diff = 0;
    double worst = 0;
    for (size_t i = 0; i < elems; ++i) {
      float fa, fb;
      if (osz == 4) {
        std::memcpy(&fa, &a[4 * i], 4);
        std::memcpy(&fb, &b[4 * i], 4);
        diff += std::memcmp(&a[4 * i], &b[4 * i], 4) != 0;
      } else {
        uint16_t ha, hb;
        std::memcpy(&ha, &a[2 * i], 2);
        std::memcpy(&hb, &b[2 * i], 2);
        diff += ha != hb;
        const uint32_t ua = uint32_t(ha) << 16, ub = uint32_t(hb) << 16;
        std::memcpy(&fa, &ua, 4);
        std::memcpy(&fb, &ub, 4);
      }
      const double e = std::fabs(double(fa) - double(fb)) / (std::fabs(double(fb)) + 1e-2);
      worst = e > worst || std::isnan(e) ? e : worst;
    }
    const int calls = std::max(8, 2 * d.copies);
    const float us = run_wg<OUT, BM, S>(d, m, d.y, calls);
    const float us_ref = run_mma(d, m, d.yref, OUT, calls);
    const double flop = 2.0 * m * double(d.n) * kK;
    std::printf("    rows %4d  wgmma %8.1f us (%4.0f TFLOP/s)  mma %8.1f us (%4.0f)  bits: %zu of %zu differ"
                " (worst relative %.2g)\n",
                m, us, flop / (us * 1e6), us_ref, flop / (us_ref * 1e6), diff, elems, worst);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  // --profile: one launch of BM 256 / 4 stages at 512 rows of 34816x5120 (for ncu), nothing else
  const bool profile = argc > 1 && std::strcmp(argv[1], "--profile") == 0;
  // --bm64: 64-row tiles only, at 33 and 64 rows of five weight shapes (build knob
  // QWEN38_WGMMA_BM64_CTAS: 2 or 3 CTAs an SM)
  const bool bm64 = argc > 1 && std::strcmp(argv[1], "--bm64") == 0;
  if (bm64) {
    cudaDeviceProp pr{};
    CK(cudaGetDeviceProperties(&pr, 0));
    std::printf("device %s; 64-row tiles compiled for %d CTAs an SM\n", pr.name, QWEN38_WGMMA_BM64_CTAS);
    for (int64_t n : {int64_t(34816), int64_t(17408), int64_t(16384), int64_t(12288), int64_t(10240)}) {
      Data d;
      d.alloc(n, kK, 64, size_t(pr.l2CacheSize));
      compare<0, 64, 6>("bf16 out, BM 64, 6 stages", d, {33, 64});
      d.release();
    }
    return 0;
  }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  const size_t l2 = size_t(prop.l2CacheSize);
  for (int64_t n : {int64_t(1000), int64_t(34816)}) {
    if (profile && n != 34816) continue;
    Data d;
    d.alloc(n, kK, 1024, l2);
    if (profile) {
      run_wg<0, 256, 4>(d, 512, d.y, 0);
    } else if (n == 1000) {
      const std::vector<int> rows = {33, 77, 200, 300};
      compare<0, 128, 4>("bf16 out, BM 128, 4 stages", d, rows);
      compare<2, 256, 4>("fp32 out, BM 256, 4 stages", d, rows);
      compare<1, 64, 6>("fp16 out, BM 64, 6 stages", d, rows);
    } else {
      const std::vector<int> rows = quick ? std::vector<int>{128, 512} : std::vector<int>{64, 128, 256, 512, 1024};
      compare<0, 256, 4>("bf16 out, BM 256, 4 stages", d, rows);
      compare<0, 256, 5>("bf16 out, BM 256, 5 stages", d, rows);
      compare<0, 128, 4>("bf16 out, BM 128, 4 stages", d, rows);
      compare<0, 128, 5>("bf16 out, BM 128, 5 stages", d, rows);
      compare<0, 64, 6>("bf16 out, BM 64, 6 stages", d, rows);
      compare<0, 64, 8>("bf16 out, BM 64, 8 stages", d, rows);
    }
    d.release();
  }
  return 0;
}
