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
using prefill::kStages;
using prefill::kThreads;

constexpr int kWBytes = kBN * kBK / 2;  // 4 KB of packed weights a stage

__device__ __forceinline__ int w_off(int n, int c) { return n * (kBK / 2) + ((c ^ ((n >> 2) & 1)) << 4); }

template <typename T, int MT> struct Nvfp4Weight {
  static constexpr int kStageBytes = kWBytes + kBN * 4;  // + 4 scales a row
  using T2 = typename nvfp4::PairDecode<T>::T2;
  using Acc = float[MT][4][4];
  const uint8_t* w;      // this thread's chunk (row n0 + tid / 2, bytes 16 (tid % 2)), or the weight
  const uint8_t* sc;     // (tid < 128) row n0 + tid's scales, or the scales
  const uint8_t* w0;
  const uint8_t* sc0;
  int64_t k;
  prefill::Lane L;
  bool ok, sok;
  int so;
  T2 s2[4][4];  // [nt][step]: the pair multipliers of this lane's rows in the current stage

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
  __device__ __forceinline__ Acc& sums(Acc& acc, int) { return acc; }
  __device__ __forceinline__ void b_frags(const unsigned char* ws, int, int k16, uint32_t (&bf)[4][2]) {
    if (k16 == 0) {  // the stage's multipliers, once
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const uint32_t sc = *reinterpret_cast<const uint32_t*>(ws + kWBytes + 4 * (L.wn * 32 + nt * 8 + L.g));
        const __half2 lo = nvfp4::e4m3x2_to_h2(uint16_t(sc & 0xffffu)), hi = nvfp4::e4m3x2_to_h2(uint16_t(sc >> 16));
        s2[nt][0] = nvfp4::PairDecode<T>::scale(__low2half(lo));
        s2[nt][1] = nvfp4::PairDecode<T>::scale(__high2half(lo));
        s2[nt][2] = nvfp4::PairDecode<T>::scale(__low2half(hi));
        s2[nt][3] = nvfp4::PairDecode<T>::scale(__high2half(hi));
      }
    }
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int row = L.wn * 32 + nt * 8 + L.g;
      const unsigned char* wr = ws + w_off(row, k16 >> 1) + 8 * (k16 & 1);
      bf[nt][0] = nvfp4::decode_byte<T>(wr[L.t], s2[nt][k16]);
      bf[nt][1] = nvfp4::decode_byte<T>(wr[4 + L.t], s2[nt][k16]);
    }
  }
  __device__ __forceinline__ void tile_end(int, int, Acc&) const {}
};

template <int MT> constexpr int smem_bytes() {
  return kStages * (prefill::Tile<MT>::kXBytes + Nvfp4Weight<__half, MT>::kStageBytes);
}
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

template <typename T, int OUT, int MT>
cudaError_t launch_tiles(const Nvfp4Params& p, bool pdl, cudaStream_t stream) {
  auto kernel = nvfp4_prefill_kernel<T, OUT, MT>;
  constexpr int kSmem = smem_bytes<MT>();
  const cudaError_t attr = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (attr != cudaSuccess) return attr;
  constexpr int kBM = prefill::Tile<MT>::kBM;
  const dim3 grid(unsigned((p.m + kBM - 1) / kBM), unsigned((p.n + kBN - 1) / kBN));
  return launch_kernel(kernel, grid, dim3(kThreads), size_t(kSmem), stream, pdl, p);
}

template <typename T, int OUT>
cudaError_t launch_typed(const Nvfp4Params& p, bool pdl, cudaStream_t stream) {
  const int rows = p.tile_rows != 0 ? p.tile_rows : p.m <= 64 ? 64 : 128;
  return rows == 64 ? launch_tiles<T, OUT, 2>(p, pdl, stream) : launch_tiles<T, OUT, 4>(p, pdl, stream);
}

template <typename T>
cudaError_t launch_act(const Nvfp4Params& p, bool pdl, cudaStream_t stream) {
  switch (p.out) {
    case int(Out::kF32): return launch_typed<T, int(Out::kF32)>(p, pdl, stream);
    case int(Out::kF16): return launch_typed<T, int(Out::kF16)>(p, pdl, stream);
    default: return launch_typed<T, int(Out::kBF16)>(p, pdl, stream);
  }
}

}  // namespace

bool nvfp4_prefill_serves(int64_t k) { return k > 0 && k % kBK == 0; }

cudaError_t launch_nvfp4_prefill(Act act, const Nvfp4Params& p, bool pdl, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0) return cudaSuccess;
  if (!nvfp4_prefill_serves(p.k) || (p.n + kBN - 1) / kBN > 65535) return cudaErrorInvalidValue;
  return act == Act::kBF16 ? launch_act<__nv_bfloat16>(p, pdl, stream) : launch_act<__half>(p, pdl, stream);
}

}  // namespace qwen38::gemm
