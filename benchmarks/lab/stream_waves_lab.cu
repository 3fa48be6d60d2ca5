// Lab (sm_90a): blocks per SM of the register-stream kernels (nvfp4_stream_kernel.cuh,
// fp8_stream_kernel.cuh) at k split 4, the tables' choice for the K = 5120 weights of 6144 rows and
// more. Equal blocks started together finish together, so a grid runs in waves of SMs x b blocks
// (b: blocks an SM), and its last partial wave costs about a whole one: does capping b (extra,
// unread dynamic shared memory, launch.cuh cap_smem) to fit the grid's waves beat the kernel's full
// occupancy?
//   default:  NVFP4 and FP8 at 1 / 8 / 16 rows (4 tiles a warp, MT 1) and 17 / 32 rows (MT 2), each
//             at every b from 1 up to the kernel's occupancy, launched directly;
//   --product NVFP4 at 17 / 24 / 32 rows through the product's launcher (wave_fit included);
//   --fp8     the FP8 kernels only (also 2 tiles a warp at 17 / 32 rows);
//   --wide8   NVFP4 at 17 / 32 rows and k split 8 (5120x17408, 5120x6144, 1024x5120) through the
//             product's launcher at cluster sizes auto, 1, 2, 4; build knob QWEN38_NVFP4_WIDE8_THREADS;
//   --narrow8 the same at 1 / 16 rows;
//   --xfrag   NVFP4 and FP8 at 16 / 24 / 32 rows (4 tiles a warp), the kernels reading x in the
//             fragment order (nvfp4_stream_tf_kernel, fp8_stream_tf_kernel; the copy of x made once,
//             untimed), at every b as the default (session 22: L1 no longer limits them; does b?).
// The output hash of a shape and row count must not depend on b (no arithmetic changes). Build
// knobs of the NVFP4 17..32-row kernel: QWEN38_NVFP4_WIDE4_BLOCKS / _DEPTH (nvfp4_stream_kernel.cuh).
//
//   nvcc -std=c++20 -O3 -gencode arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -I csrc \
//     benchmarks/lab/stream_waves_lab.cu csrc/gemm/nvfp4_stream_kernel.cu -o build/lab/stream_waves_lab
//   build/lab/stream_waves_lab [--product]
// Session 16 (H200): `stream_waves_lab_16_builds.txt` (17..32 rows, NVFP4, one build per register
// budget, before wave_fit), `stream_waves_lab_16.txt`.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <vector>

#include "common/launch.cuh"
#include "gemm/fp8_stream_kernel.cuh"
#include "gemm/nvfp4_linear_launch.h"
#include "gemm/nvfp4_stream_kernel.cuh"
#include "lab_common.cuh"

using namespace qwen38;
using namespace qwen38::gemm;
using bf16 = __nv_bfloat16;

namespace {

constexpr int kK = 5120;

// e4m3 bytes, never NaN (exponent field below 15)
__global__ void fill_fp8(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = uint8_t(lab::mix(i, seed) & 0xf7);
}
__global__ void fill_scale(float* p, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = 0.001f * float(1 + i % 7);
}

uint64_t hash_bytes(const std::vector<uint8_t>& v) {
  uint64_t h = 1469598103934665603ull;
  for (uint8_t b : v) h = (h ^ b) * 1099511628211ull;
  return h;
}

struct Buffers {
  int64_t k = kK;
  bf16* x = nullptr;
  uint4* xf = nullptr;  // x in the fragment order (--xfrag), 32 rows' worth
  void* y = nullptr;
  float* global = nullptr;
  int64_t n = 0;
  int copies = 0;
  std::vector<uint8_t*> w, s;  // per copy: weights, scales (NVFP4 codes + e4m3 scales, or fp8 + fp32)
};

Buffers make(bool fp8, int64_t n, size_t l2, int64_t k = kK) {
  Buffers b;
  b.n = n;
  b.k = k;
  const size_t wbytes = fp8 ? size_t(n) * k : size_t(n) * k / 2;
  const size_t sbytes = fp8 ? size_t((n + 127) / 128) * (k / 128) * 4 : size_t(n) * k / 16;
  b.copies = int(std::max<size_t>(1, 3 * l2 / (wbytes + sbytes) + 1));
  for (int c = 0; c < b.copies; ++c) {
    uint8_t *w, *s;
    CK(cudaMalloc(&w, wbytes));
    CK(cudaMalloc(&s, sbytes));
    if (fp8) {
      fill_fp8<<<1024, 256>>>(w, wbytes, 17 + c);
      fill_scale<<<64, 256>>>(reinterpret_cast<float*>(s), sbytes / 4);
    } else {
      lab::fill_nvfp4<<<2048, 256>>>(w, wbytes, 17 + c, 0);
      lab::fill_nvfp4<<<2048, 256>>>(s, sbytes, 71 + c, 1);
    }
    b.w.push_back(w);
    b.s.push_back(s);
  }
  CK(cudaMalloc(&b.global, 4));
  const float gs = 0.01f;
  CK(cudaMemcpy(b.global, &gs, 4, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&b.x, size_t(32) * k * 2));
  lab::fill_act<<<256, 256>>>(reinterpret_cast<uint16_t*>(b.x), size_t(32) * k, 5);
  CK(cudaMalloc(&b.xf, size_t(32) * k * 2));
  CK(cudaMalloc(&b.y, size_t(32) * n * 2));
  CK(cudaDeviceSynchronize());
  return b;
}

void release(Buffers& b) {
  for (auto* p : b.w) CK(cudaFree(p));
  for (auto* p : b.s) CK(cudaFree(p));
  CK(cudaFree(b.x));
  CK(cudaFree(b.xf));
  CK(cudaFree(b.y));
  CK(cudaFree(b.global));
}

double bytes_of(bool fp8, int64_t n, int m, int64_t k = kK) {
  const double w = fp8 ? double(n) * k + double((n + 127) / 128) * (k / 128) * 4
                       : double(n) * k / 2 + double(n) * k / 16;
  return w + double(m) * k * 2 + double(m) * n * 2;
}

// the arguments of a call on weight copy c at m rows
Nvfp4Params nvfp4_params(const Buffers& b, int c, int m) {
  Nvfp4Params p;
  p.x = b.x;
  p.w = b.w[c];
  p.scale = b.s[c];
  p.global = b.global;
  p.y = b.y;
  p.m = m;
  p.n = b.n;
  p.k = b.k;
  p.x_stride = b.k;
  return p;
}
Fp8BlockParams fp8_params(const Buffers& b, int c, int m) {
  Fp8BlockParams p;
  p.x = b.x;
  p.w = b.w[c];
  p.scale = reinterpret_cast<const float*>(b.s[c]);
  p.y = b.y;
  p.m = m;
  p.n = b.n;
  p.k = b.k;
  p.x_stride = b.k;
  return p;
}

// one (op, NT, MT) kernel at k split 4 at every cap b = 1 .. occupancy, rows `ms`; kFrag: the kernel
// reading x in the fragment order of MT groups (MT counting groups of 8 rows then)
template <bool FP8, int NT, int MT, bool kFrag = false>
void sweep_caps(Buffers& b, const std::vector<int>& ms, double ceil) {
  constexpr int kKs = 4, kThreads = 32 * kKs;
  const auto kern = [] {
    if constexpr (kFrag && FP8) return fp8_stream_tf_kernel<bf16, kK, kKs, NT, MT>;
    else if constexpr (kFrag) return nvfp4_stream_tf_kernel<bf16, kK, kKs, NT, MT>;
    else if constexpr (FP8) return fp8_stream_kernel<bf16, kK, kKs, NT, MT>;
    else return nvfp4_stream_kernel<bf16, kK, kKs, NT, MT>;
  }();
  const void* fn = reinterpret_cast<const void*>(kern);
  int occ = 0, sms = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, fn, kThreads, 0));
  CK(device_sms(&sms));
  cudaFuncAttributes fa{};
  CK(cudaFuncGetAttributes(&fa, fn));
  const int64_t grid = b.n / (8 * NT);
  for (int m : ms) {
    if constexpr (kFrag) {  // the library's copy of x (stream_common.cuh xfrag_kernel, the launcher's layout), once
      constexpr int kLayout = FP8                                 ? fp8_frag_layout<NT, MT>()
                              : nvfp4_t_runs_xa<bf16, kKs, NT, MT>() ? stream::kXfragPairedA
                                                                     : stream::kXfragPaired;
      stream::xfrag_kernel<uint16_t, kLayout><<<unsigned((b.k * MT + 255) / 256), 256>>>(
          reinterpret_cast<const uint16_t*>(b.x), m, b.k, b.k, MT, b.xf);
      CK(cudaGetLastError());
    }
    std::vector<uint8_t> first;
    for (int cap = 1; cap <= occ; ++cap) {
      size_t smem = 0;
      CK(cap_smem(fn, kThreads, 0, cap, &smem));
      int got = 0;
      CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&got, fn, kThreads, smem));
      auto launch = [&](int c, cudaStream_t st) {
        auto p = [&] {
          if constexpr (FP8) return fp8_params(b, c, m);
          else return nvfp4_params(b, c, m);
        }();
        if constexpr (kFrag) p.x = b.xf;
        CK(launch_kernel(kern, dim3(unsigned(grid)), dim3(kThreads), smem, st, false, p));
      };
      lab::run_or_time(launch, b.copies, 0);
      std::vector<uint8_t> out(size_t(m) * b.n * 2);
      CK(cudaMemcpy(out.data(), b.y, out.size(), cudaMemcpyDeviceToHost));
      if (first.empty()) first = out;
      const float us = lab::run_or_time(launch, b.copies, std::max(200, 2 * b.copies));
      const double waves = double(grid) / (double(sms) * got);
      std::printf("  %s%s %5lldx%d nt %d mt %d rows %2d  regs %3d  b %d (%d an SM)  grid %5lld = %5.2f waves  %7.2f us"
                  "  %5.1f%%  %s\n",
                  FP8 ? "fp8  " : "nvfp4", kFrag ? " xfrag (mt: groups)" : "", (long long)b.n, kK, NT, MT, m, fa.numRegs, cap, got, (long long)grid, waves,
                  us, 100.0 * bytes_of(FP8, b.n, m) / (us * 1e3) / ceil,
                  out == first ? "same bits" : "BITS DIFFER");
    }
  }
}

void product_wide(Buffers& b, double ceil) {
  SkinnyVariant v;
  v.ksplit = 4;
  v.nt_narrow = 4;
  v.nt_wide = 4;
  for (int m : {17, 24, 32}) {
    auto launch = [&](int c, cudaStream_t st) {
      CK(launch_nvfp4_stream(Act::kBF16, nvfp4_params(b, c, m), v, false, st));
    };
    lab::run_or_time(launch, b.copies, 0);
    std::vector<uint8_t> out(size_t(m) * b.n * 2);
    CK(cudaMemcpy(out.data(), b.y, out.size(), cudaMemcpyDeviceToHost));
    const float us = lab::run_or_time(launch, b.copies, std::max(200, 2 * b.copies));
    std::printf("  %5lldx%d nt_wide 4 rows %2d  %7.2f us  %4.1f%%  hash %016llx\n", (long long)b.n, kK, m, us,
                100.0 * bytes_of(false, b.n, m) / (us * 1e3) / ceil, (unsigned long long)hash_bytes(out));
  }
}

// NVFP4 17..32 rows at k split 8 through the product's launcher, cluster sizes auto (0), 1, 2, 4
void product_wide8(Buffers& b, int nt, double ceil, const std::vector<int>& rows) {
  SkinnyVariant v;
  v.ksplit = 8;
  v.nt_narrow = nt;
  v.nt_wide = nt;
  for (int m : rows) {
    std::vector<uint8_t> first;
    for (int cl : {0, 1, 2, 4}) {
      auto launch = [&](int c, cudaStream_t st) {
        Nvfp4Params p = nvfp4_params(b, c, m);
        p.cluster = cl;
        CK(launch_nvfp4_stream(Act::kBF16, p, v, false, st));
      };
      lab::run_or_time(launch, b.copies, 0);
      std::vector<uint8_t> out(size_t(m) * b.n * 2);
      CK(cudaMemcpy(out.data(), b.y, out.size(), cudaMemcpyDeviceToHost));
      if (first.empty()) first = out;
      const float us = lab::run_or_time(launch, b.copies, std::max(200, 2 * b.copies));
      std::printf("  %5lldx%lld nt %d rows %2d cluster %d%s  %7.2f us  %4.1f%%  %s\n", (long long)b.n,
                  (long long)b.k, nt, m, cl, cl == 0 ? " (auto)" : "       ", us,
                  100.0 * bytes_of(false, b.n, m, b.k) / (us * 1e3) / ceil, out == first ? "same bits" : "BITS DIFFER");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool product = argc > 1 && std::strcmp(argv[1], "--product") == 0;
  const bool fp8_only = argc > 1 && std::strcmp(argv[1], "--fp8") == 0;
  const bool wide8 = argc > 1 && std::strcmp(argv[1], "--wide8") == 0;
  const bool narrow8 = argc > 1 && std::strcmp(argv[1], "--narrow8") == 0;
  const bool xfrag = argc > 1 && std::strcmp(argv[1], "--xfrag") == 0;
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  const double ceil = lab::read_ceiling_GBps();
  std::printf("device %s, %d SMs; wide k-split-4 build: blocks %d, depth %d; read ceiling %.0f GB/s\n", prop.name,
              prop.multiProcessorCount, QWEN38_NVFP4_WIDE4_BLOCKS, QWEN38_NVFP4_WIDE4_DEPTH, ceil);
  const size_t l2 = size_t(prop.l2CacheSize);
  if (wide8 || narrow8) {
    std::printf("k-split-8 17..32-row kernels budgeted for %d threads\n", QWEN38_NVFP4_WIDE8_THREADS);
    const std::tuple<int64_t, int64_t, int> shapes[] = {{5120, 17408, 4}, {5120, 6144, 4}, {1024, 5120, 2}};
    for (const auto& [n, k, nt] : shapes) {
      Buffers b = make(false, n, l2, k);
      product_wide8(b, nt, ceil, wide8 ? std::vector<int>{17, 32} : std::vector<int>{1, 16});
      release(b);
    }
    return 0;
  }
  for (int64_t n : {int64_t(34816), int64_t(17408), int64_t(16384), int64_t(14336), int64_t(12288), int64_t(10240),
                    int64_t(6144)}) {
    if (product) {
      Buffers b = make(false, n, l2);
      product_wide(b, ceil);
      release(b);
      continue;
    }
    if (xfrag) {
      for (bool fp8 : {false, true}) {
        Buffers b = make(fp8, n, l2);
        auto each = [&](auto op) {
          constexpr bool kFp8 = decltype(op)::value;
          sweep_caps<kFp8, 4, 2, true>(b, {16}, ceil);
          sweep_caps<kFp8, 4, 3, true>(b, {24}, ceil);
          sweep_caps<kFp8, 4, 4, true>(b, {32}, ceil);
        };
        if (fp8) each(std::true_type{});
        else each(std::false_type{});
        release(b);
      }
      continue;
    }
    if (!fp8_only) {
      Buffers b = make(false, n, l2);
      sweep_caps<false, 4, 1>(b, {1, 16}, ceil);
      sweep_caps<false, 4, 2>(b, {32}, ceil);
      release(b);
    }
    {
      Buffers b = make(true, n, l2);
      sweep_caps<true, 4, 1>(b, {1, 16}, ceil);
      sweep_caps<true, 2, 1>(b, {1, 16}, ceil);
      sweep_caps<true, 4, 2>(b, {32}, ceil);
      sweep_caps<true, 2, 2>(b, {17, 32}, ceil);
      release(b);
    }
  }
  return 0;
}
