// mma.sync m16n8k16 wrappers (fp32 accumulate), sm_80+ (both sm_90a and sm_121a).
// Fragment layout (g = lane / 4, t = lane % 4; each register holds two 16-bit values, the lower
// column/row in the low half):
//   A 16x16 row-major:  a0 (row g,   k 2t..2t+1)   a1 (row g+8, k 2t..2t+1)
//                       a2 (row g,   k 2t+8..+9)   a3 (row g+8, k 2t+8..+9)
//   B 16x8 col-major:   b0 (k 2t..2t+1, col g)     b1 (k 2t+8..+9, col g)
//   C/D 16x8 fp32:      c0, c1 (row g, cols 2t, 2t+1)   c2, c3 (row g+8, cols 2t, 2t+1)
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>

namespace qwen38 {

template <typename T>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);

// (QWEN38_HOST_EMULATION: tests/native/*_host_emulation.cpp run a kernel on the host and supply
// emu::mma_16816, a warp-collective model of the instruction with the layout above.)
template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                                         uint32_t b1) {
#ifdef QWEN38_HOST_EMULATION
  ::emu::mma_16816(c, a, b0, b1, true);
#else
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

template <>
__device__ __forceinline__ void mma_16816<__half>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#ifdef QWEN38_HOST_EMULATION
  ::emu::mma_16816(c, a, b0, b1, false);
#else
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

}  // namespace qwen38
