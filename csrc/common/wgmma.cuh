// Warpgroup MMA (PTX wgmma.mma_async, sm_90a only), torch-free: the pieces of the NVFP4 wgmma
// prefill kernel (gemm/nvfp4_wgmma_kernel.cuh).
//
// QWEN38_WGMMA is defined while compiling device code for sm_90a (the arch-specific target that
// has wgmma); elsewhere (sm_121a: no wgmma, the host pass) the helpers compile to nothing and the
// kernels that use them keep only an empty body (their launchers are not called there).
//
// Operands used here: A from registers in the mma.sync m16n8k16 A-fragment layout, warp w of the
// warpgroup holding rows 16 w .. 16 w + 15 of the 64; B from shared memory, K-major (each of the N
// rows holds its K values contiguously), 128-byte swizzle: rows of 128 bytes (64 16-bit values), the
// 16-byte chunk c of row r stored at chunk c ^ (r % 8), tiles 1024-byte aligned. The descriptor of
// the k16 block j of such a tile is the tile's address + 32 j (the hardware swizzles the address
// bits), stride 1024 bytes between 8-row groups. wgmma m64nNk16 accumulates like mma.sync
// m16n8k16 given the same operands (benchmarks/lab/wgmma_bits_lab.cu, H200: 0 of 29 M differ).
// Accumulators: warp w, lane (g, t): d[4 j + 2 h + e] = D[16 w + g + 8 h][8 j + 2 t + e].
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define QWEN38_WGMMA 1
#endif

namespace qwen38::wgmma {

// Shared-memory descriptor: K-major, 128-byte swizzle, stride 1024 bytes between 8-row groups.
__device__ __forceinline__ uint64_t desc_sw128(uint32_t smem_addr) {
  return uint64_t((smem_addr >> 4) & 0x3FFF) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) |
         (uint64_t(1) << 62);
}

__device__ __forceinline__ void fence() {
#ifdef QWEN38_WGMMA
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void commit() {
#ifdef QWEN38_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#endif
}
// Make this thread's completed shared-memory writes (st.shared, cp.async) visible to the async
// proxy that wgmma reads B through; before the barrier that publishes them.
__device__ __forceinline__ void fence_async_smem() {
#ifdef QWEN38_WGMMA
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}
// Wait until at most P committed groups of this warpgroup are pending.
template <int P>
__device__ __forceinline__ void wait() {
#ifdef QWEN38_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(P) : "memory");
#endif
}
// The accumulators are written by the asynchronous wgmmas behind the compiler's back: after a
// wait, pass them through this so that no read of them moves above the wait.
template <int N>
__device__ __forceinline__ void touch(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

template <typename T, int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc);

#ifdef QWEN38_WGMMA
#include "common/wgmma_rs.inc"
#else
template <typename T, int N>
__device__ __forceinline__ void wgmma_rs(float (&)[N / 2], const uint32_t (&)[4], uint64_t) {}
#endif

}  // namespace qwen38::wgmma
