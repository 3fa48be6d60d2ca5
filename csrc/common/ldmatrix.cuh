// ldmatrix.x4 wrappers (sm_75+, both sm_90a and sm_121a): four 8x8 matrices of 16-bit elements from
// shared memory into the mma fragment layout (common/mma.cuh). Lane 8i + j gives the address of row j
// of matrix i (16 contiguous bytes); lane (g = lane / 4, t = lane % 4) receives in r[i]
//   ldmatrix_x4        matrix i [g][2t], [g][2t + 1]   (the lower column in the low half)
//   ldmatrix_x4_trans  matrix i [2t][g], [2t + 1][g]   (the lower row in the low half)
// `addr` is a shared-memory address (cp_async.cuh smem_addr). (QWEN38_HOST_EMULATION: the host
// emulations supply emu::ldmatrix_x4 / _trans, warp-collective models; addr is an offset into
// emu::g_smem there.)
#pragma once

#include <cstdint>

namespace qwen38 {

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
#ifdef QWEN38_HOST_EMULATION
  ::emu::ldmatrix_x4(r, ::emu::g_smem + addr);
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
#endif
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
#ifdef QWEN38_HOST_EMULATION
  ::emu::ldmatrix_x4_trans(r, ::emu::g_smem + addr);
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
#endif
}

}  // namespace qwen38
