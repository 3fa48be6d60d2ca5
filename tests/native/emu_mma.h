// Warp-collective models of the tensor-core instructions for the host emulations (on emu_cta.h): each
// lane gives its operands, a warp barrier, each lane computes its part from what all lanes gave, a
// second barrier. Include before the kernel headers (common/mma.cuh and the ldmatrix wrappers call
// these under QWEN38_HOST_EMULATION).
//   mma_16816         the fragments of common/mma.cuh gathered into A (16x16), B (16x8), C (16x8);
//                     D = round_fp32(C + sum_k A B) with the sum in double. A model: the tensor cores'
//                     own order and precision are not emulated, so its bits are not a GPU's
//   ldmatrix_x4       lane 8i + j gives the address of row j of 8x8 b16 matrix i; lane (g, t) gets
//                     r[i] = (matrix i [g][2t], [g][2t + 1]), the lower column in the low half
//   ldmatrix_x4_trans the same addresses; r[i] = (matrix i [2t][g], [2t + 1][g]), the lower row low
#pragma once

#include <cstdint>
#include <cstring>

#include "emu_cta.h"

namespace emu {

inline float half_bits_to_float(uint16_t h, bool bf16) {
  if (bf16) {
    const uint32_t x = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &x, 4);
    return f;
  }
  _Float16 v;
  std::memcpy(&v, &h, 2);
  return float(v);
}

inline void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, bool bf16) {
  const int t = g_cur, base = t & ~31;
  Slot& s = g_slot[t];
  for (int i = 0; i < 4; ++i) s.u[i] = a[i], s.f[i] = c[i];
  s.u[4] = b0, s.u[5] = b1;
  warp_barrier();
  double A[16][16], B[16][8];
  for (int l = 0; l < 32; ++l) {
    const Slot& o = g_slot[base + l];
    const int gl = l / 4, tl = l % 4;
    const int ar[4] = {gl, gl + 8, gl, gl + 8}, ak[4] = {2 * tl, 2 * tl, 2 * tl + 8, 2 * tl + 8};
    for (int i = 0; i < 4; ++i) {
      A[ar[i]][ak[i]] = half_bits_to_float(uint16_t(o.u[i]), bf16);
      A[ar[i]][ak[i] + 1] = half_bits_to_float(uint16_t(o.u[i] >> 16), bf16);
    }
    B[2 * tl][gl] = half_bits_to_float(uint16_t(o.u[4]), bf16);
    B[2 * tl + 1][gl] = half_bits_to_float(uint16_t(o.u[4] >> 16), bf16);
    B[2 * tl + 8][gl] = half_bits_to_float(uint16_t(o.u[5]), bf16);
    B[2 * tl + 9][gl] = half_bits_to_float(uint16_t(o.u[5] >> 16), bf16);
  }
  const int g = (t & 31) / 4, tt = (t & 31) % 4;
  float out[4];
  for (int e = 0; e < 4; ++e) {
    const int row = g + 8 * (e / 2), col = 2 * tt + (e & 1);
    double sum = 0;
    for (int k = 0; k < 16; ++k) sum += A[row][k] * B[k][col];
    out[e] = float(double(s.f[e]) + sum);
  }
  warp_barrier();
  for (int e = 0; e < 4; ++e) c[e] = out[e];
}

inline void ldmatrix_x4_any(uint32_t (&r)[4], const void* p, bool trans) {
  const int t = g_cur, base = t & ~31;
  g_slot[t].ptr = p;
  warp_barrier();
  const int g = (t & 31) / 4, tt = (t & 31) % 4;
  uint32_t out[4];
  for (int i = 0; i < 4; ++i) {
    if (trans) {
      const uint16_t* r0 = static_cast<const uint16_t*>(g_slot[base + 8 * i + 2 * tt].ptr);
      const uint16_t* r1 = static_cast<const uint16_t*>(g_slot[base + 8 * i + 2 * tt + 1].ptr);
      out[i] = uint32_t(r0[g]) | (uint32_t(r1[g]) << 16);
    } else {
      const uint16_t* row = static_cast<const uint16_t*>(g_slot[base + 8 * i + g].ptr);
      out[i] = uint32_t(row[2 * tt]) | (uint32_t(row[2 * tt + 1]) << 16);
    }
  }
  warp_barrier();
  for (int i = 0; i < 4; ++i) r[i] = out[i];
}

inline void ldmatrix_x4(uint32_t (&r)[4], const void* p) { ldmatrix_x4_any(r, p, false); }
inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) { ldmatrix_x4_any(r, p, true); }

}  // namespace emu
