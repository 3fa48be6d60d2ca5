// The CUDA surface a kernel source uses, for the host emulations (tests/native/*_host_emulation.cpp),
// on the CTA runtime of emu_cta.h. Include after cuda_runtime.h and emu_cta.h, before the kernel.
// The _rn intrinsics are plain IEEE operations (the emulations are built with -ffp-contract=off: no
// contraction), __fmaf_rn is fmaf (correctly rounded); __syncthreads is the CTA barrier, __syncwarp,
// the shuffles and the ballot are the warp's. QWEN38_HOST_EMULATION switches the kernels' PTX wrappers
// (mma, cp.async, ldmatrix) to the emu:: models.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "emu_cta.h"

#define QWEN38_HOST_EMULATION 1
#undef __global__
#define __global__
#undef __launch_bounds__
#define __launch_bounds__(...)
#undef __shared__
#define __shared__
#define threadIdx (emu::Dim3{unsigned(emu::g_cur), 0u, 0u})
#define blockIdx (emu::g_block)
// blockDim and gridDim are objects whose members read the runtime's values (not macros: launch.cuh's
// cudaLaunchConfig_t has members of those names)
struct EmuDimRef {
  const unsigned& x;
  const unsigned& y;
  const unsigned& z;
};
inline const unsigned emu_dim_one = 1;
inline const EmuDimRef blockDim{emu::g_block_dim_x, emu_dim_one, emu_dim_one};
inline const EmuDimRef gridDim{emu::g_grid_dim[0], emu::g_grid_dim[1], emu::g_grid_dim[2]};

inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fmaf(a, b, c); }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float __double2float_rn(double a) { return static_cast<float>(a); }
inline int __float_as_int(float x) {
  int i;
  std::memcpy(&i, &x, 4);
  return i;
}
inline float __int_as_float(int i) {
  float x;
  std::memcpy(&x, &i, 4);
  return x;
}
inline int __popc(uint32_t x) { return __builtin_popcount(x); }
inline int __popcll(uint64_t x) { return __builtin_popcountll(x); }
inline unsigned __fns(unsigned mask, unsigned base, int offset) {  // offset >= 1: that set bit from base up
  for (unsigned b = base; b < 32; ++b)
    if ((mask >> b) & 1u)
      if (--offset == 0) return b;
  return 0xffffffffu;
}
template <typename T> inline T __ldg(const T* p) { return *p; }
inline void __syncthreads() { emu::cta_barrier(); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::warp_barrier(); }
inline int __syncthreads_or(int pred) {
  emu::g_slot[emu::g_cur].u[0] = pred ? 1u : 0u;
  emu::cta_barrier();
  int any = 0;
  for (int t = 0; t < emu::g_threads; ++t) any |= int(emu::g_slot[t].u[0]);
  emu::cta_barrier();
  return any;
}
inline int atomicMin(int* addr, int v) {  // one emulated thread runs at a time
  const int old = *addr;
  if (v < old) *addr = v;
  return old;
}
template <typename V>
inline V __shfl_sync(unsigned, V v, int src) {  // (4- and 8-byte values)
  return emu::shfl(v, src);
}
inline float __shfl_xor_sync(unsigned, float v, int m) { return emu::shfl_xor(v, m); }
inline unsigned __ballot_sync(unsigned, int pred) { return emu::ballot(pred); }
