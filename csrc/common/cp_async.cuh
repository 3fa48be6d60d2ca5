// Asynchronous global -> shared copies (PTX cp.async, sm_80+), torch-free. The skinny weight GEMMs
// stream their weights through a per-thread ring of these copies: a thread copies its own bytes and
// reads back only what it copied, so no barrier is needed, only the thread's own wait_group.
#pragma once

#include <cstdint>

namespace qwen38 {

// (QWEN38_HOST_EMULATION: a host emulation of a kernel supplies emu::cp_async / _commit / _wait,
// which hold each thread's copies back until its wait_group, as the hardware may; a shared-memory
// address is the offset into the emulation's shared-memory array, emu::g_smem.)
#ifdef QWEN38_HOST_EMULATION
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return uint32_t(static_cast<const unsigned char*>(p) - ::emu::g_smem);
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  ::emu::cp_async(dst, src, 16, src_bytes);
}
template <int kSpan>
__device__ __forceinline__ void cp_async16_span(void* dst, const void* src, int src_bytes) {
  ::emu::cp_async(dst, src, 16, src_bytes);
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src, int src_bytes) {
  ::emu::cp_async(dst, src, 4, src_bytes);
}
__device__ __forceinline__ void cp_async_commit() { ::emu::cp_async_commit(); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  ::emu::cp_async_wait(N);
}
#else
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes, L1 bypassed (streamed once); src_bytes < 16 zero-fills the rest (0: no global read).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes)
               : "memory");
}

// The same with an L2 fetch-size hint: a miss brings the whole aligned 128- or 256-byte span of the
// line from DRAM into L2 (later steps of the same weight row then hit L2, and DRAM sees long runs).
template <int kSpan>
__device__ __forceinline__ void cp_async16_span(void* dst, const void* src, int src_bytes) {
  if constexpr (kSpan == 256)
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(src_bytes)
                 : "memory");
  else if constexpr (kSpan == 128)
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(src_bytes)
                 : "memory");
  else
    cp_async16(dst, src, src_bytes);
}

// 4 bytes (both addresses 4-byte aligned); src_bytes < 4 zero-fills the rest.
__device__ __forceinline__ void cp_async4(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
#endif

// wait_group with a run-time count (0..7): a uniform branch to the immediate form.
__device__ __forceinline__ void cp_async_wait_dyn(int n) {
  switch (n) {
    case 0: cp_async_wait<0>(); break;
    case 1: cp_async_wait<1>(); break;
    case 2: cp_async_wait<2>(); break;
    case 3: cp_async_wait<3>(); break;
    case 4: cp_async_wait<4>(); break;
    case 5: cp_async_wait<5>(); break;
    case 6: cp_async_wait<6>(); break;
    default: cp_async_wait<7>(); break;
  }
}

}  // namespace qwen38
