// Tensor-memory-accelerator copies (PTX cp.async.bulk.tensor, sm_90+) and the shared-memory
// mbarriers that count their bytes, torch-free. Device side only; the host encodes the tensor maps
// (common/tensor_map.h).
#pragma once

#include <cuda.h>

#include <cstdint>

namespace qwen38::tma {

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
// make the initialized barriers visible to the async proxy (the copies that complete on them)
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// arrive (this thread) and add `bytes` to the transactions the current phase waits for
__device__ __forceinline__ void mbar_expect(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
// wait until the phase of the given parity has completed
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n .reg .pred p;\n WAIT_%=:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra WAIT_%=;\n}\n" ::"r"(
          bar),
      "r"(parity)
      : "memory");
}
// a 2-D box of `map` at (c0: inner coordinate, c1: row) into shared memory at dst; its bytes
// complete on bar. Out-of-range elements are written as zeros (and counted).
__device__ __forceinline__ void copy_2d(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

}  // namespace qwen38::tma
