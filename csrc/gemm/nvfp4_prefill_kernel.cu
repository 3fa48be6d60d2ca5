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
#include "gemm/prefill_nvfp4.cuh"

namespace qwen38::gemm {
namespace {

using prefill::kBN;
using prefill::kThreads;
using prefill_nvfp4::Nvfp4Weight;

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
  template <int MT> using Weight = Nvfp4Weight<__half, MT>;  // (the layout does not depend on the type)
};

}  // namespace

bool nvfp4_prefill_serves(int64_t k) { return k > 0 && k % prefill::kBK == 0; }

cudaError_t launch_nvfp4_prefill(Act act, const Nvfp4Params& p, bool pdl, cudaStream_t stream) {
  if (p.m != 0 && p.n != 0 && !nvfp4_prefill_serves(p.k)) return cudaErrorInvalidValue;
  return prefill::launch<Kernels>(act == Act::kBF16, p, pdl, stream);
}

}  // namespace qwen38::gemm
