// Lab (sm_90a): the x-shared form of the NVFP4 k-split-8 kernel (nvfp4_xshare_kernel.cuh) against
// the product's register-stream launch (its table variant, cluster auto) on the model's small
// weights (48, 96, 1024 x 5120) at 1..32 rows: us per call (graph of rotating weight copies; x hot
// in L2 as behind the kernel that writes it, or cold - rotating copies too, as bench_nvfp4 times
// it), with and without PDL, and whether every fp32 output has the bits of the stream kernel's.
//
//   nvcc -std=c++20 -O3 -gencode arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -I csrc \
//     benchmarks/lab/xshare_lab.cu csrc/gemm/nvfp4_stream_kernel.cu -o build/lab/xshare_lab
// Session 17 (H200): xshare_lab_17_first.txt (x hot), _split.txt (+ one warp per m16 tile),
// xshare_lab_17.txt (final cluster-barrier form), _stasync.txt (partials by st.async, the kernel
// now) and _bar.txt (the same run, cluster-barrier form). Session 18: xshare_lab_18_quads.txt (--n
// 1024 --cold: the landed kernel against x staged as A fragments, the latter slower; not kept).
//   build/lab/xshare_lab [--n N] [--cold]   the table of every form (one weight; x cold only)
//   build/lab/xshare_lab --profile    single launches for ncu, 1024x5120, twice each: the stream kernel
//                                     at 1 row, the x-shared one (nt 2, 8 tile groups) at 16 and 32 rows
// Also times an empty kernel in the same graph form (the launch floor of a call).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/launch.cuh"
#include "gemm/nvfp4_linear_launch.h"
#include "gemm/nvfp4_xshare_kernel.cuh"
#include "lab_common.cuh"

using namespace qwen38;
using namespace qwen38::gemm;
using bf16 = __nv_bfloat16;

namespace {

constexpr int kK = 5120;

template <int NT, int MT, int MW>
void launch_xshare(const Nvfp4Params& p, int groups, bool pdl, cudaStream_t st) {
  auto fn = nvfp4_xshare_kernel<bf16, kK, NT, MT, MW>;
  const int64_t tiles = p.n / (8 * NT);
  const size_t smem = xshare_smem_bytes(kK, MT, groups, NT);
  size_t room = 0;
  CK(dynamic_smem_room(fn, &room));
  if (smem > room) {
    std::fprintf(stderr, "smem %zu > room %zu\n", smem, room);
    std::exit(1);
  }
  CK(launch_kernel_cluster(fn, dim3(unsigned(tiles / groups * kXshareSplit)), dim3(32 * groups * MT / MW), smem, st,
                           pdl, kXshareSplit, p));
}

// groups: tile groups of a CTA; split: 17..32 rows with one warp per m16 tile
void launch_x(const Nvfp4Params& p, int nt, int groups, bool split, bool pdl, cudaStream_t st) {
  if (p.m <= 16) {
    if (nt == 1) launch_xshare<1, 1, 1>(p, groups, pdl, st);
    else launch_xshare<2, 1, 1>(p, groups, pdl, st);
  } else if (split) {
    if (nt == 1) launch_xshare<1, 2, 1>(p, groups, pdl, st);
    else launch_xshare<2, 2, 1>(p, groups, pdl, st);
  } else {
    if (nt == 1) launch_xshare<1, 2, 2>(p, groups, pdl, st);
    else launch_xshare<2, 2, 2>(p, groups, pdl, st);
  }
}

__global__ void empty_kernel(int) {}

std::vector<uint8_t> output(const lab::Nvfp4Data& d, int64_t m) {
  std::vector<uint8_t> out(size_t(m) * d.n * 4);
  CK(cudaMemcpy(out.data(), d.y, out.size(), cudaMemcpyDeviceToHost));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  if (argc > 1 && std::strcmp(argv[1], "--profile") == 0) {
    lab::Nvfp4Data d;
    d.alloc(1024, kK, 32, size_t(prop.l2CacheSize));
    SkinnyVariant v;
    v.ksplit = 8;
    v.nt_narrow = 1;
    v.nt_wide = 2;
    // the landed forms: the stream kernel at 1 row, the x-shared one (nt 2, 8 tile groups) at 16 and
    // 32 rows; each twice (profile the second)
    for (int rep = 0; rep < 2; ++rep) {
      CK(launch_nvfp4_stream(Act::kBF16, d.params(rep, 1, d.y, 2), v, false, nullptr));
      for (int m : {16, 32}) launch_x(d.params(rep, m, d.y, 2), 2, 8, false, false, nullptr);
    }
    CK(cudaDeviceSynchronize());
    d.release();
    return 0;
  }
  for (int pdl = 0; pdl < 2; ++pdl) {
    const float us = lab::run_or_time(
        [&](int, cudaStream_t st) { CK(launch_kernel(empty_kernel, dim3(128), dim3(256), 0, st, pdl, 0)); }, 1, 400);
    std::printf("empty kernel (128 x 256 threads) pdl %d: %.2f us\n", pdl, us);
  }
  std::printf("device %s, %d SMs; fp32 outputs; us per call\n", prop.name, prop.multiProcessorCount);
  // --n N: that weight only; --cold: x cold only
  int64_t only_n = 0;
  bool cold_only = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--n") == 0 && i + 1 < argc) only_n = std::atoll(argv[++i]);
    if (std::strcmp(argv[i], "--cold") == 0) cold_only = true;
  }
  for (int64_t n : {int64_t(48), int64_t(96), int64_t(1024)}) {
    if (only_n != 0 && n != only_n) continue;
    lab::Nvfp4Data d;
    d.alloc(n, kK, 32, size_t(prop.l2CacheSize));
    const int calls = std::max(200, 2 * d.copies);
    // cold x: a copy of x per weight copy (the same values)
    std::vector<void*> xs(d.copies);
    for (auto& x : xs) {
      CK(cudaMalloc(&x, size_t(32) * kK * 2));
      CK(cudaMemcpy(x, d.x, size_t(32) * kK * 2, cudaMemcpyDeviceToDevice));
    }
    for (int cold = cold_only ? 1 : 0; cold < 2; ++cold) {
    std::printf("-- x %s\n", cold ? "cold (rotating copies)" : "hot (one copy)");
    auto params = [&](int c, int m) {
      Nvfp4Params p = d.params(c, m, d.y, 2);
      if (cold) p.x = xs[c];
      return p;
    };
    SkinnyVariant v;
    v.ksplit = 8;
    v.nt_narrow = 1;
    v.nt_wide = n == 1024 ? 2 : 1;
    for (int m : {1, 4, 8, 16, 17, 24, 32}) {
      float base[2];
      for (int pdl = 0; pdl < 2; ++pdl)
        base[pdl] = lab::run_or_time(
            [&](int c, cudaStream_t st) { CK(launch_nvfp4_stream(Act::kBF16, params(c, m), v, pdl, st)); },
            d.copies, calls);
      lab::run_or_time(
          [&](int c, cudaStream_t st) { CK(launch_nvfp4_stream(Act::kBF16, params(c, m), v, false, st)); },
          d.copies, 0);
      const std::vector<uint8_t> ref = output(d, m);
      std::printf("%5lldx%d rows %2d  stream (nt %d, cluster auto) %6.2f / %6.2f us (pdl off / on)\n", (long long)n,
                  kK, m, m <= 16 ? v.nt_narrow : v.nt_wide, base[0], base[1]);
      for (int split = 0; split < (m > 16 ? 2 : 1); ++split)
      for (int nt : {1, 2})
        for (int warps : {1, 2, 3, 4, 6, 8}) {
          if (n % (8 * nt * warps) != 0 || (split && warps > 4)) continue;
          CK(cudaMemset(d.y, 0xff, size_t(m) * n * 4));
          lab::run_or_time([&](int c, cudaStream_t st) { launch_x(params(c, m), nt, warps, split, false, st); },
                           d.copies, 0);
          const bool same = output(d, m) == ref;
          float us[2];
          for (int pdl = 0; pdl < 2; ++pdl)
            us[pdl] = lab::run_or_time(
                [&](int c, cudaStream_t st) { launch_x(params(c, m), nt, warps, split, pdl, st); }, d.copies,
                calls);
          std::printf("      xshare nt %d groups %d%s  %6.2f / %6.2f us  %s\n", nt, warps, split ? " split" : "", us[0], us[1],
                      same ? "same bits" : "BITS DIFFER");
        }
    }
    }
    for (auto x : xs) CK(cudaFree(x));
    d.release();
  }
  return 0;
}
