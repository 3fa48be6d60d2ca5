// Lab (sm_90a): the NVFP4 register-stream kernel at 17..32 rows (MT 2, k split 4: the big K = 5120
// weights) under its register budget, through the product's launcher (wave_fit included). At the
// compiler's 172 registers a 128-thread block runs 2 an SM (8 warps); the build knobs
// QWEN38_NVFP4_WIDE4_BLOCKS (the blocks per SM asked of ptxas; 1: the compiler's choice) and
// QWEN38_NVFP4_WIDE4_DEPTH (weight steps in registers ahead; 0: by type) trade registers for
// warps (nvfp4_stream_kernel.cuh). Build one binary per setting, run each; the output hash must be
// the same for every build (the knobs change no arithmetic).
//
//   for c in "1 2" "3 0" "3 1" "1 1"; do set -- $c; nvcc -std=c++20 -O3 -gencode arch=compute_90a,code=sm_90a \
//     --expt-relaxed-constexpr -I csrc -DQWEN38_NVFP4_WIDE4_BLOCKS=$1 -DQWEN38_NVFP4_WIDE4_DEPTH=$2 \
//     benchmarks/lab/stream_mt2_lab.cu csrc/gemm/nvfp4_stream_kernel.cu -o build/lab/stream_mt2_b$1_d$2; done
//   build/lab/stream_mt2_b3_d0
// Session 16 (H200, before wave_fit: every build at its full occupancy): `stream_mt2_lab_16.txt`.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "gemm/nvfp4_linear_launch.h"
#include "gemm/nvfp4_stream_kernel.cuh"
#include "lab_common.cuh"

using namespace qwen38;
using namespace qwen38::gemm;

namespace {

constexpr int kK = 5120;

__global__ void fill_x(uint16_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint32_t h = lab::mix(i, seed);
    p[i] = uint16_t((h & 0x807f) | 0x3f00);
  }
}

uint64_t hash_bytes(const std::vector<uint8_t>& v) {
  uint64_t h = 1469598103934665603ull;
  for (uint8_t b : v) h = (h ^ b) * 1099511628211ull;
  return h;
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  const double ceil = lab::read_ceiling_GBps();
  std::printf("device %s, %d SMs; wide k-split-4 blocks %d, depth %d; read ceiling %.0f GB/s\n", prop.name,
              prop.multiProcessorCount, QWEN38_NVFP4_WIDE4_BLOCKS, QWEN38_NVFP4_WIDE4_DEPTH, ceil);
  const size_t l2 = size_t(prop.l2CacheSize);
  for (int64_t n : {int64_t(34816), int64_t(17408), int64_t(16384), int64_t(12288)}) {
    const size_t wbytes = size_t(n) * kK / 2, sbytes = size_t(n) * kK / 16;
    const int copies = int(std::max<size_t>(1, 3 * l2 / (wbytes + sbytes) + 1));
    lab::Nvfp4Copies wt;
    wt.alloc(n, kK, copies);
    float* global;
    CK(cudaMalloc(&global, 4));
    const float gs = 0.01f;
    CK(cudaMemcpy(global, &gs, 4, cudaMemcpyHostToDevice));
    __nv_bfloat16* x;
    void* y;
    CK(cudaMalloc(&x, size_t(32) * kK * 2));
    fill_x<<<256, 256>>>(reinterpret_cast<uint16_t*>(x), size_t(32) * kK, 5);
    CK(cudaMalloc(&y, size_t(32) * n * 2));
    CK(cudaDeviceSynchronize());
    for (int nt : {4, 2}) {
      SkinnyVariant v;
      v.ksplit = 4;
      v.nt_narrow = 4;
      v.nt_wide = nt;
      for (int m : {17, 24, 32}) {
        auto launch = [&](int c, cudaStream_t st) {
          Nvfp4Params p;
          p.x = x;
          p.w = wt.w[c];
          p.scale = wt.s[c];
          p.global = global;
          p.y = y;
          p.m = m;
          p.n = n;
          p.k = kK;
          p.x_stride = kK;
          p.out = 0;
          if (!nvfp4_stream_serves(p, v)) {
            std::fprintf(stderr, "not served\n");
            std::exit(1);
          }
          CK(launch_nvfp4_stream(Act::kBF16, p, v, false, st));
        };
        lab::run_or_time(launch, copies, 0);
        std::vector<uint8_t> out(size_t(m) * n * 2);
        CK(cudaMemcpy(out.data(), y, out.size(), cudaMemcpyDeviceToHost));
        const float us = lab::run_or_time(launch, copies, std::max(200, 2 * copies));
        const double bytes = double(wbytes + sbytes) + double(m) * kK * 2 + double(m) * n * 2;
        std::printf("  %5lldx%d nt_wide %d rows %2d  %7.2f us  %5.0f GB/s (%4.1f%%)  hash %016llx\n", (long long)n, kK,
                    nt, m, us, bytes / (us * 1e3), 100.0 * bytes / (us * 1e3) / ceil,
                    (unsigned long long)hash_bytes(out));
      }
    }
    wt.release();
    CK(cudaFree(global));
    CK(cudaFree(x));
    CK(cudaFree(y));
  }
  return 0;
}
