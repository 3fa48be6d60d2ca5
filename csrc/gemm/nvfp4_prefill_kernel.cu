// nvfp4_linear's tensor-core prefill strategy ("mma", QWEN38_NVFP4_PREFILL): more than 32 rows, the
// weight decoded in registers from the checkpoint layout (no temporary weight).
//
// Arithmetic: B = e2m1 * scale * 2^-7 exactly (nvfp4::decode_byte: at most 6 significant bits, exact
// in fp16 and bf16), the 16-bit products with x summed in fp32 by mma.sync over all of K; the
// epilogue multiplies by 2^7 (exact), then by w_global (one rounding), adds the bias (one rounding)
// and rounds once to the output type - the order of the dequant strategy's epilogue. Within the
// float64 bound of nvfp4_linear; each row independent of the others and of the row count (its sum
// runs over K in the same mma steps whatever the tile), not bit-identical to the 1..32-row kernels
// (another order inside a step).
//
// Tiles and stages: prefill_mma.cuh (32 MT rows x 128 columns a CTA; MT 2 up to 64 rows, MT 4 more).
//   w tile: row n (128) of 2 16-byte chunks (64 e2m1 = 4 k16 steps of 8 bytes), chunk c at
//           position c ^ ((n / 4) % 2): rows n and n + 4 of an n8 tile in different banks;
//   scales: row n's 4 e4m3 block scales of the stage (4 bytes), after the weight bytes.
// Lane (g, t) of n8 tile nt reads, for step j, byte t (k 2t, 2t + 1: its b0) and byte t + 4 (k 2t + 8,
// 2t + 9: b1) of row g's 8 bytes: the two nibbles of a byte are the pair of a B register. K is a
// multiple of 64 (every stage whole, the scales 4-byte aligned); the host checks.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common/cp_async.cuh"
#include "common/launch.cuh"
#include "common/mma.cuh"
#include "common/nvfp4.cuh"
#include "common/pdl.cuh"
#include "common/vec.cuh"
#include "gemm/nvfp4_linear_launch.h"
#include "gemm/prefill_mma.cuh"

namespace qwen38::gemm {
namespace {

using prefill::kBK;
using prefill::kBN;
using prefill::kThreads;

constexpr int kWBytes = kBN * kBK / 2;  // 4 KB of packed weights a stage

__device__ __forceinline__ int w_off(int n, int c) { return n * (kBK / 2) + ((c ^ ((n >> 2) & 1)) << 4); }

template <typename T, int MT> struct Nvfp4Weight {
  static constexpr int kStages = 4;                      // 4 x (x + 4.5 KB) + 16 KB: 98 KB at MT 4
  static constexpr int kStageBytes = kWBytes + kBN * 4;  // + 4 scales a row
  static constexpr bool kSmemB = true;                   // decoded once per CTA (prefill_mma.cuh)
  static constexpr int kUnroll = 2;                      // 128 registers: two CTAs an SM
  using Acc = float[MT][4][4];
  using T2 = typename nvfp4::PairDecode<T>::T2;
  const uint8_t* w;      // this thread's chunk (row n0 + tid / 2, bytes 16 (tid % 2)), or the weight
  const uint8_t* sc;     // (tid < 128) row n0 + tid's scales, or the scales
  const uint8_t* w0;
  const uint8_t* sc0;
  int64_t k;
  prefill::Lane L;
  bool ok, sok;
  int so;

  __device__ __forceinline__ Nvfp4Weight(const uint8_t* w_, const uint8_t* scale_, int64_t n, int64_t k_, int64_t n0)
      : w0(w_), sc0(scale_), k(k_) {
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

template <int MT> constexpr int smem_bytes() { return prefill::smem_bytes<MT, Nvfp4Weight<__half, MT>>(); }
static_assert(smem_bytes<4>() <= 99 * 1024, "the stages fit sm_121a's 99 KB");

// Two CTAs an SM (at most 128 registers; 2 x 82 KB of shared memory on sm_90a).
template <typename T, int OUT, int MT>
__global__ void __launch_bounds__(kThreads, 2) nvfp4_prefill_kernel(const Nvfp4Params p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int64_t m0 = int64_t(blockIdx.x) * prefill::Tile<MT>::kBM, n0 = int64_t(blockIdx.y) * kBN;

  pdl_wait();   // x (and the weights' producer, if any) come from earlier kernels
  pdl_allow();

  Nvfp4Weight<T, MT> w(p.w, p.scale, p.n, p.k, n0);
  float acc[MT][4][4];
  zero_fill(acc);
  prefill::mainloop<MT>(static_cast<const T*>(p.x), p.x_stride, p.m, p.k, m0, w, smem, acc);
  const float gs = *p.global;
  prefill::store<OUT>(acc, p.y, p.bias, p.bias_dtype, p.m, p.n, m0, n0,
                      [gs](float v) { return __fmul_rn(v * nvfp4::kPairUnscale, gs); });
}

struct Kernels {
  template <typename T, int OUT, int MT> static constexpr auto kernel() { return nvfp4_prefill_kernel<T, OUT, MT>; }
  template <int MT> static constexpr int smem() { return smem_bytes<MT>(); }
};

}  // namespace

bool nvfp4_prefill_serves(int64_t k) { return k > 0 && k % kBK == 0; }

cudaError_t launch_nvfp4_prefill(Act act, const Nvfp4Params& p, bool pdl, cudaStream_t stream) {
  if (p.m != 0 && p.n != 0 && !nvfp4_prefill_serves(p.k)) return cudaErrorInvalidValue;
  return prefill::launch<Kernels>(act == Act::kBF16, p, pdl, stream);
}

}  // namespace qwen38::gemm
