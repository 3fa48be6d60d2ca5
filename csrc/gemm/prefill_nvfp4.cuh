// The NVFP4 weight policy of the NVFP4 tensor-core prefill kernel (nvfp4_prefill_kernel.cu; the labs
// include it too): see that file for the layout and the arithmetic. Torch-free.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common/cp_async.cuh"
#include "common/nvfp4.cuh"
#include "gemm/prefill_mma.cuh"

namespace qwen38::gemm::prefill_nvfp4 {

using prefill::kBK;
using prefill::kBN;
using prefill::kThreads;

constexpr int kWBytes = kBN * kBK / 2;  // 4 KB of packed weights a stage

__device__ __forceinline__ int w_off(int n, int c) { return n * (kBK / 2) + ((c ^ ((n >> 2) & 1)) << 4); }

template <typename T, int MT> struct Nvfp4Weight {
  static constexpr int kStages = 4;                      // 4 x (x + 4.5 KB) + 16 KB: 98 KB at MT 4
  static constexpr int kStageBytes = kWBytes + kBN * 4;  // + 4 scales a row
  static constexpr prefill::BFrom kB = prefill::BFrom::kDecoded;  // once per CTA (prefill_mma.cuh)
  static constexpr int kUnroll = 2;                      // 128 registers: two CTAs an SM
  using Acc = float[MT][4][4];
  using T2 = typename nvfp4::PairDecode<T>::T2;
  const uint8_t* w;      // this thread's chunk (row n0 + tid / 2, bytes 16 (tid % 2)), or the weight
  const uint8_t* sc;     // (tid < 128) row n0 + tid's scales, or the scales
  const uint8_t* w0;
  const uint8_t* sc0;
  prefill::Lane L;
  bool ok, sok;
  int so;

  __device__ __forceinline__ Nvfp4Weight(const uint8_t* w_, const uint8_t* scale_, int64_t n, int64_t k, int64_t n0)
      : w0(w_), sc0(scale_) {
    const int r = L.tid >> 1, c = L.tid & 1;
    ok = n0 + r < n;
    w = w_ + (ok ? (n0 + r) * (k / 2) : 0) + 16 * c;
    so = w_off(r, c);
    sok = L.tid < kBN && n0 + L.tid < n;
    sc = scale_ + (sok ? (n0 + L.tid) * (k / 16) : 0);
  }
  __device__ __forceinline__ void load(unsigned char* ws, int kt) const {
    cp_async16(ws + so, ok ? w + int64_t(kt) * (kBK / 2) : w0, ok ? 16 : 0);
    if (L.tid < kBN) cp_async4(ws + kWBytes + 4 * L.tid, sok ? sc + int64_t(kt) * (kBK / 16) : sc0, sok ? 4 : 0);
  }
  // The thread's chunk (the one it copied: 32 e2m1 of row tid / 2, k 32 (tid % 2) ..) and its two
  // block scales -> 32 values v s 2^-7 in natural k order (decode_word gives the pairs (i, i + 4)
  // of a word: re-paired by byte permutes).
  __device__ __forceinline__ void decode(const unsigned char* ws, unsigned char* wt) const {
    const int r = L.tid >> 1, c = L.tid & 1;
    const uint4 raw = *reinterpret_cast<const uint4*>(ws + so);
    const uint16_t sc2 = *reinterpret_cast<const uint16_t*>(ws + kWBytes + 4 * r + 2 * c);
    const __half2 sh = nvfp4::e4m3x2_to_h2(sc2);  // scales of k 32c .. +15 (low) and +16 .. +31
    const T2 s_lo = nvfp4::PairDecode<T>::scale(__low2half(sh)), s_hi = nvfp4::PairDecode<T>::scale(__high2half(sh));
    const uint32_t wd[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {  // word j: k 32c + 8j .. + 7
      uint32_t p[4];
      nvfp4::decode_word<T>(p, wd[j], j < 2 ? s_lo : s_hi);
      const uint4 o = make_uint4(__byte_perm(p[0], p[1], 0x5410), __byte_perm(p[2], p[3], 0x5410),
                                 __byte_perm(p[0], p[1], 0x7632), __byte_perm(p[2], p[3], 0x7632));
      *reinterpret_cast<uint4*>(wt + prefill::x_off(r, 4 * c + j)) = o;
    }
  }
  __device__ __forceinline__ Acc& sums(Acc& acc, int) { return acc; }
  __device__ __forceinline__ void tile_end(int, int, Acc&) const {}
};

}  // namespace qwen38::gemm::prefill_nvfp4
