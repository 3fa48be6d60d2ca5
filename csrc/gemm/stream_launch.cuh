// Launch of the register-stream kernels (nvfp4_stream_kernel.cuh, fp8_stream_kernel.cuh): both are
// compiled for the model's K values (5120, 6144, 17408) with the k splits their tables use, bf16
// and fp16, and picked at run time by (K, k split, tiles per warp, m16 tiles).
//
// Of: a traits type with `template <typename T, int K, int KS, int NT, int MT> static constexpr
// auto fn` (the kernel instantiation), `kWide` (17..32 rows compiled: NT 2 or 4 with a second m16
// tile) and `kKs8Nt4` (4 tiles per warp compiled at k split 8, at either row range).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common/launch.cuh"
#include "gemm/nvfp4_linear_launch.h"
#include "gemm/skinny_variants.h"

namespace qwen38::gemm {

template <typename Of, typename P>
struct StreamLaunch {
  using Fn = cudaError_t (*)(const P&, bool, cudaStream_t);

  template <typename T, int K, int KS, int NT, int MT>
  static cudaError_t one(const P& p, bool pdl, cudaStream_t stream) {
    const dim3 grid(unsigned(p.n / (8 * NT)));
    auto fn = Of::template fn<T, K, KS, NT, MT>;
    size_t smem = 0;  // QWEN38_SPREAD (launch.cuh)
    if (cudaError_t e = spread_smem(fn, 32 * KS, 0, grid.x, &smem)) return e;
    return launch_kernel(fn, grid, dim3(32 * KS), smem, stream, pdl, p);
  }

  // (ksplit, nt, m16 tiles) -> an instantiation, or null when not compiled for K
  template <typename T, int K>
  static Fn pick(int ks, int nt, int mt) {
    if (mt == 2) {
      if constexpr (Of::kWide) {
        if (nt != 2 && nt != 4) return nullptr;
        if constexpr (K == 5120) {
          if (ks == 2) return nt == 4 ? one<T, K, 2, 4, 2> : one<T, K, 2, 2, 2>;
          if (ks == 4) return nt == 4 ? one<T, K, 4, 4, 2> : one<T, K, 4, 2, 2>;
        }
        if (ks != 8) return nullptr;
        if constexpr (Of::kKs8Nt4)
          if (nt == 4) return one<T, K, 8, 4, 2>;
        return nt == 2 ? one<T, K, 8, 2, 2> : nullptr;
      } else {
        return nullptr;
      }
    }
    if constexpr (K == 5120) {  // k splits 2 and 4 serve K = 5120 only (the tables' choices)
      if (ks == 2) return nt == 4 ? one<T, K, 2, 4, 1> : nt == 2 ? one<T, K, 2, 2, 1> : nullptr;
      if (ks == 4) return nt == 4 ? one<T, K, 4, 4, 1> : nt == 2 ? one<T, K, 4, 2, 1> : nullptr;
    }
    if (ks != 8) return nullptr;
    if constexpr (Of::kKs8Nt4)
      if (nt == 4) return one<T, K, 8, 4, 1>;
    return nt == 2 ? one<T, K, 8, 2, 1> : nullptr;
  }

  template <typename T>
  static Fn pick_k(int64_t k, int ks, int nt, int mt) {
    if (k == 5120) return pick<T, 5120>(ks, nt, mt);
    if (k == 6144) return pick<T, 6144>(ks, nt, mt);
    if (k == 17408) return pick<T, 17408>(ks, nt, mt);
    return nullptr;
  }

  // 1..16 rows: one m16 tile and the variant's nt_narrow; 17..32: two and nt_wide
  static int tiles_m(const P& p) { return p.m <= 16 ? 1 : 2; }
  static int tiles_n(const P& p, const SkinnyVariant& v) { return p.m <= 16 ? v.nt_narrow : v.nt_wide; }

  // the instantiation serving a call, or null (rows, N not a multiple of 8 NT, K or variant not compiled)
  static Fn find(Act act, const P& p, const SkinnyVariant& v) {
    const int nt = tiles_n(p, v), mt = tiles_m(p);
    if (p.m < 1 || p.m > kSkinnyMaxRows || p.n <= 0 || p.n % (8 * nt) != 0) return nullptr;
    return act == Act::kBF16 ? pick_k<__nv_bfloat16>(p.k, v.ksplit, nt, mt) : pick_k<__half>(p.k, v.ksplit, nt, mt);
  }

  static bool serves(const P& p, const SkinnyVariant& v) { return find(Act::kBF16, p, v) != nullptr; }

  static cudaError_t launch(Act act, const P& p, const SkinnyVariant& v, bool pdl, cudaStream_t stream) {
    const Fn fn = find(act, p, v);
    return fn == nullptr ? cudaErrorInvalidValue : fn(p, pdl, stream);
  }
};

}  // namespace qwen38::gemm
