// nvfp4_linear, skinny path (1..32 rows): y = round(global * sum_k x[m,k] * W[n,k] + bias[n]),
// W[n,k] = e2m1[n,k] * e4m3 scale[n, k/16]. Reference: qwen38_kernels/reference/gemm.py.
//
// Tensors: x [M, K] bf16/fp16 (row stride x_stride); w [N, K/2] uint8 (low nibble = even k);
// scale [N, K/16] e4m3; global fp32 [1]; bias [N] or none; y [M, N] (bf16/fp16/fp32), contiguous.
//
// Weights are the mma B operand (8 weight rows per m16n8k16), activations the A operand (16 rows per
// mma; 17..32 rows use a second A tile against the same B registers). Each thread loads 16 bytes
// (32 k) of one weight row with one vector load and decodes them in registers straight into B
// fragments, nothing through shared memory:
//
//   warp step (128 k):  thread (g, t) holds W[n0 + g][k0 + 32t .. k0 + 32t + 31]  (16 bytes)
//   mma j = 0..7 uses bytes 2j and 2j+1 of that chunk, i.e. k = k0 + 32t + 4j + {0,1 | 2,3}:
//       b0 = (4j, 4j+1) -> logical k slots (2t, 2t+1);  b1 = (4j+2, 4j+3) -> slots (2t+8, 2t+9)
//   and the A fragments take x at the same k: a0/a2 = x[row][k0 + 32t + 4j + {0,1} / {2,3}]
//   (rows g and g+8), i.e. 32 consecutive x of a row per thread per step.
// The dot product is the same sum over k in a fixed permuted order: the permutation, the k split
// across warps (contiguous ranges, kSplit warps per block) and the fixed-order sum of the warps'
// partials in shared memory depend on (N, K) only, never on M: row invariance.
// The fp32 sum of each row is multiplied by the global scale, the bias is added in fp32, one rounding.
#pragma once

#include "common/mma.cuh"
#include "common/nvfp4.cuh"
#include "common/pdl.cuh"
#include "common/vec.cuh"
#include "gemm/nvfp4_linear_launch.h"
#include "gemm/skinny_common.cuh"

namespace qwen38::gemm {

// T: activation type; MT: m16 tiles (1: rows 1..16, 2: rows 17..32); KSPLIT: warps per block.
template <typename T, typename O, int MT, int KSPLIT>
__global__ void __launch_bounds__(32 * KSPLIT, 1) nvfp4_skinny_kernel(const Nvfp4Params p) {
  using S = nvfp4::ScaleOf<T>;
  __shared__ float partial[KSPLIT][MT * 16][8];

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t n0 = int64_t(blockIdx.x) * 8;
  const int64_t n = n0 + g;
  const bool n_ok = n < p.n;
  const int64_t steps = (p.k + kStepK - 1) / kStepK;
  const int64_t s_begin = steps * warp / KSPLIT, s_end = steps * (warp + 1) / KSPLIT;

  const uint8_t* __restrict__ wrow = p.w + (n_ok ? n : 0) * (p.k / 2);
  const uint8_t* __restrict__ srow = p.scale + (n_ok ? n : 0) * (p.k / 16);
  const T* __restrict__ x = static_cast<const T*>(p.x);

  pdl_wait();
  pdl_allow();

  float acc[MT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[mt][i] = 0.0f;

  // Weight bytes and scales of step s (zeros past N or K: they decode to +0 products).
  auto load_w = [&](int64_t s, uint4& wq, uint16_t& sc) {
    const int64_t kc = s * kStepK + 32 * t;
    wq = make_uint4(0, 0, 0, 0);
    sc = 0;
    if (s < s_end && n_ok && kc < p.k) {  // K % 32 == 0: a 32-k chunk is all in or all out
      wq = __ldg(reinterpret_cast<const uint4*>(wrow + kc / 2));
      sc = __ldg(reinterpret_cast<const unsigned short*>(srow + kc / 16));
    }
  };
  // one step ahead: the next step's 16 bytes are in flight while this one is decoded and multiplied
  uint4 wq_next;
  uint16_t sc_next;
  load_w(s_begin, wq_next, sc_next);

  for (int64_t s = s_begin; s < s_end; ++s) {
    const int64_t kc = s * kStepK + 32 * t;  // this thread's 32 k
    const uint4 wq = wq_next;
    const uint16_t sc = sc_next;
    load_w(s + 1, wq_next, sc_next);
    const __half2 sh = nvfp4::e4m3x2_to_h2(sc);
    const typename S::T2 s_lo = S::make(__low2half(sh)), s_hi = S::make(__high2half(sh));

    // activations: rows g + 8h, h = 0 .. 2*MT-1; 32 consecutive values = 16 registers per row
    uint32_t xa[2 * MT][16];
    load_activations<T, MT>(xa, x, p.x_stride, g, kc, p.m, p.k);

    const uint32_t wr[4] = {wq.x, wq.y, wq.z, wq.w};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint32_t word = wr[j / 2];
      const int shift = 16 * (j % 2);  // bytes 2j, 2j+1 of the chunk
      const auto& s2 = j < 4 ? s_lo : s_hi;  // k block of 16: bytes 0..7 and 8..15
      const uint32_t b0 = nvfp4::decode_scaled<T>((word >> shift) & 0xffu, s2);
      const uint32_t b1 = nvfp4::decode_scaled<T>((word >> (shift + 8)) & 0xffu, s2);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        uint32_t a[4];
        a_fragment<MT>(a, xa, mt, j);
        mma_16816<T>(acc[mt], a, b0, b1);
      }
    }
  }

  // ---- partials of the KSPLIT warps in warp order, global scale on the fp32 sum, bias, one rounding
  reduce_and_store<O, MT, KSPLIT>(partial, acc, warp, g, t, *p.global, p.bias, p.bias_dtype, p.y, p.m, p.n, n0);
}

}  // namespace qwen38::gemm
