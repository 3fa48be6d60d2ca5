// Thread-block clusters (sm_90+; PTX %cluster_ctarank, barrier.cluster, mapa, st.shared::cluster):
// the few pieces the skinny weight kernels use to spread one output tile's k-split warps over the
// CTAs of a cluster and sum their partials in the shared memory of the cluster's first CTA.
// Torch-free. A kernel launched without a cluster is a cluster of one CTA: size 1, rank 0.
#pragma once

#include <cstdint>

namespace qwen38 {

struct ClusterPos {
  int rank;  // this CTA's rank in its cluster (0 .. size-1; blockIdx.x % size for 1-D clusters)
  int size;  // CTAs in the cluster
};

// (volatile: a second call reads the registers again, so a kernel need not keep the first values
// live across its main loop)
__device__ __forceinline__ ClusterPos cluster_pos() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t r, n;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
  return {int(r), int(n)};
#else
  return {0, 1};
#endif
}

// The k-split warp index and the first output column of this warp's tile in the register-stream
// kernels (nt8 = 8 x tiles a warp). kClusters: the tile's KSPLIT warps may be spread over the CTAs
// of a 1-D cluster, read from the special registers at every call (so a kernel can call it again
// after its main loop instead of keeping both live across it); otherwise one CTA holds them all.
struct StreamTile {
  int warp;
  int64_t n0;
};
template <bool kClusters>
__device__ __forceinline__ StreamTile stream_tile(int nt8) {
  if constexpr (!kClusters) return {int(threadIdx.x / 32), int64_t(blockIdx.x) * nt8};
  const ClusterPos c = cluster_pos();
  return {c.rank * int(blockDim.x / 32) + int(threadIdx.x / 32), int64_t(blockIdx.x / unsigned(c.size)) * nt8};
}

// Split barrier over every thread of every CTA of the cluster. arrive() does not wait; wait()
// returns once every thread of the cluster has arrived. The release / acquire pair orders this
// thread's earlier shared::cluster stores before the other CTAs' reads after their wait().
__device__ __forceinline__ void cluster_arrive_relaxed() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_arrive_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}

// The shared::cluster address of `p` (a shared-memory pointer of this CTA) in CTA `rank`.
__device__ __forceinline__ uint32_t cluster_map(const void* p, int rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const uint32_t local = uint32_t(__cvta_generic_to_shared(p));
  uint32_t remote;
  asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
#else
  return 0;
#endif
}

// Two floats into the shared memory of a CTA of the cluster (addr: a shared::cluster address from
// cluster_map, 8-byte aligned); their 8 bytes complete on that CTA's mbarrier `bar` (a
// shared::cluster address too). Asynchronous: no fence, nothing to wait for on this side.
__device__ __forceinline__ void cluster_store_async(uint32_t addr, float a, float b, uint32_t bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [%0], {%1, %2}, [%3];" ::"r"(addr),
               "r"(__float_as_uint(a)), "r"(__float_as_uint(b)), "r"(bar)
               : "memory");
#endif
}

// Wait until the phase of `parity` of this CTA's mbarrier `bar` has completed, acquiring at cluster
// scope what other CTAs' cluster_store_async wrote.
__device__ __forceinline__ void cluster_mbar_wait(uint32_t bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n .reg .pred p;\n WAIT_%=:\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%0], %1;\n"
      " @!p bra WAIT_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
#endif
}

__device__ __forceinline__ void cluster_store(uint32_t addr, float v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(addr), "f"(v) : "memory");
#endif
}

}  // namespace qwen38
