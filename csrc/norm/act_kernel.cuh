// silu_mul: the gated MLP's activation, y = round(fp32(round(silu(fp32(g)))) * fp32(u)) in x's dtype,
// g = x[r, c] and u = x[r, I + c] for c < I (x [rows, 2I]: the gate_up projection's output, gate then
// up; y [rows, I] contiguous). silu(g) = g / (1 + exp(-g)) in fp32: torch's CUDA silu for 16-bit
// tensors (opmath fp32, precise expf, IEEE division), rounded to x's dtype as HF's `act_fn(gate)`
// returns it; the product of two 16-bit values is exact in fp32, so `* up` rounds once. The same bits as
// `F.silu(gate) * up` on CUDA; each element depends on its own two inputs only (row invariance).
//
// One thread per 8 outputs (16-byte loads of g and u and a 16-byte store) where x's rows and I allow
// it, else one per output; a grid-stride loop. pdl_wait before the first load (x comes from the
// previous kernel), pdl_allow at once (pdl.cuh).
#pragma once

#include <cstdint>

#include "common/pdl.cuh"
#include "common/vec.cuh"
#include "norm/norm_launch.h"

namespace qwen38::norm {

constexpr int kActThreads = 128;

// torch's silu (opmath fp32): g / (1 + exp(-g)); each operation rounded to nearest, no contraction
__device__ __forceinline__ float silu_torch_f32(float g) { return __fdiv_rn(g, __fadd_rn(1.0f, expf(-g))); }

template <typename T>
__device__ __forceinline__ T silu_mul_one(T g, T u) {
  return from_f32<T>(__fmul_rn(round_to<T>(silu_torch_f32(to_f32(g))), to_f32(u)));
}

// VEC: 8 outputs a thread (I % 8 == 0, x 16-byte aligned with a row stride of a multiple of 8).
template <typename T, bool VEC>
__global__ void __launch_bounds__(kActThreads) silu_mul_kernel(const ActParams p) {
  pdl_wait();
  pdl_allow();
  constexpr int E = VEC ? 8 : 1;
  const int64_t per_row = p.inter / E;
  const int64_t total = p.rows * per_row;
  const T* __restrict__ x = static_cast<const T*>(p.x);
  T* __restrict__ y = static_cast<T*>(p.y);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / per_row, c = (i - r * per_row) * E;
    const T* g = x + r * p.x_stride + c;
    T* out = y + r * p.inter + c;
    if constexpr (VEC) {
      union V {
        uint4 u;
        T e[8];
      } gv, uv, yv;
      gv.u = *reinterpret_cast<const uint4*>(g);
      uv.u = *reinterpret_cast<const uint4*>(g + p.inter);
#pragma unroll
      for (int k = 0; k < 8; ++k) yv.e[k] = silu_mul_one(gv.e[k], uv.e[k]);
      *reinterpret_cast<uint4*>(out) = yv.u;
    } else {
      *out = silu_mul_one(g[0], g[p.inter]);
    }
  }
}

}  // namespace qwen38::norm
