// Programmatic dependent launch (sm_90+; PTX griddepcontrol). A kernel launched with the
// programmatic-stream-serialization attribute may be scheduled while the previous kernel in the
// stream is still running, which hides launch latency between back-to-back kernels (decode is a
// chain of short kernels). Contract kept by every kernel here:
//   pdl_wait()  before the first global memory access: it returns once the previous grid has
//               completed and its writes are visible, so the data flow is exactly stream order
//               (two exceptions: the skinny NVFP4 kernel copies its first weight steps before it
//               waits - weight tensors are never written by a kernel of this library, and a
//               foreign kernel does not trigger early, so its writes are complete by then; and the
//               GDN and conv kernels at B = 1 read their slot index early only to prefetch their
//               state into L2, reading the index again after the wait - gdn_kernel.cuh,
//               conv_kernel.cuh; the norm (latency shape) and conv kernels issue an L2 prefetch of
//               their weights, which returns no data - norm_kernel.cuh, conv_kernel.cuh);
//   pdl_allow() once this grid needs no more resources of its own, so the next kernel can be
//               scheduled early (it still waits in its own pdl_wait()): at the start in most
//               kernels; after the main loop in the head's tiles kernel. There, at the start, the
//               successor's CTAs took the free CTA slots of a grid under two CTAs an SM (the
//               draft vocabulary's 256 tiles) and waited: head_logits 100.8 us back to back
//               against 82 once moved (H200, session 13). Moved in the weight readers and the GDN
//               kernel too it gave mixed results (benchmarks/lab/pdl_ab.py,
//               benchmarks/results/h200/NOTES.md), so they keep it at the start.
// Both are no-ops when the kernel was launched without the attribute.
#pragma once

namespace qwen38 {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_allow() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace qwen38
