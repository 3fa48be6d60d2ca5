// Instantiations, launch shape and launch of the output-head kernels (see head_kernel.cuh).
#include <cstdlib>

#include "common/launch.cuh"
#include "gemm/head_kernel.cuh"

namespace qwen38::gemm {
namespace {

// Warps per block splitting K: the most of 8, 4, 2, 1 that leaves every warp at least two 32-k
// groups. A function of K only (K = 5120: 8 warps of 20 groups). The split is what makes a task
// short (a block streams 32 weight rows x K), so that the persistent grid ends evenly.
int head_k_split(int64_t k) {
  const int64_t groups = (k + kHeadGroupK - 1) / kHeadGroupK;
  int split = 8;
  while (split > 1 && groups < 2 * split) split /= 2;
  return split;
}

using HeadFn = void (*)(const HeadParams);

template <typename T, int MT, bool ARGMAX>
HeadFn pick_split(int ksplit) {
  switch (ksplit) {
    case 1: return head_kernel<T, MT, 1, ARGMAX>;
    case 2: return head_kernel<T, MT, 2, ARGMAX>;
    case 4: return head_kernel<T, MT, 4, ARGMAX>;
    default: return head_kernel<T, MT, 8, ARGMAX>;
  }
}

template <typename T>
HeadFn pick_kernel(int64_t m, int ksplit, bool argmax) {
  if (m <= 16) return argmax ? pick_split<T, 1, true>(ksplit) : pick_split<T, 1, false>(ksplit);
  return argmax ? pick_split<T, 2, true>(ksplit) : pick_split<T, 2, false>(ksplit);
}

HeadFn head_fn(Act act, int64_t m, int ksplit, bool argmax) {
  return act == Act::kBF16 ? pick_kernel<__nv_bfloat16>(m, ksplit, argmax)
                           : pick_kernel<__half>(m, ksplit, argmax);
}

}  // namespace

cudaError_t head_plan(Act act, int64_t m, int64_t v, int64_t k, bool argmax, HeadPlan* plan) {
  plan->ksplit = head_k_split(k);
  plan->blocks = 0;
  if (m <= 0 || v <= 0) return cudaSuccess;
  if (m > kHeadMaxRows) return cudaErrorInvalidValue;
  const HeadFn fn = head_fn(act, m, plan->ksplit, argmax);
  int dev = 0, sms = 0, per_sm = 0;
  size_t room = 0;  // dynamic shared memory a block of fn may use (the attribute is raised to it)
  cudaError_t err = cudaGetDevice(&dev);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (err == cudaSuccess) err = dynamic_smem_room(fn, &room);
  if (err != cudaSuccess) return err;
  // 1..16 rows: the deepest ring (up to `cap` steps) that fits a block next to the kernel's static
  // shared memory (QWEN38_HEAD_DEPTH=2..4 sets the cap, for A/B timing: the depth changes no bit).
  // Default 2: with one step in flight two blocks fit an SM (16 warps), measured best at 16 rows
  // and equal at 1. The 17..32-row kernel has no ring.
  plan->depth = 2;
  plan->smem = 0;
  if (m <= 16) {
    int cap = 2;
    if (const char* e = std::getenv("QWEN38_HEAD_DEPTH"); e != nullptr && *e >= '2' && *e <= '4' && e[1] == '\0')
      cap = *e - '0';
    for (int d = cap; d > 2; --d)
      if (head_ring_bytes(d, plan->ksplit) <= room) {
        plan->depth = d;
        break;
      }
    plan->smem = head_ring_bytes(plan->depth, plan->ksplit);
    if (plan->smem > room) return cudaErrorInvalidValue;
  }
  if ((err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, 32 * plan->ksplit, plan->smem))) return err;
  const int64_t tasks = (v + kHeadCols - 1) / kHeadCols;
  const int64_t resident = int64_t(sms) * (per_sm > 0 ? per_sm : 1);
  plan->blocks = int(tasks < resident ? tasks : resident);
  return cudaSuccess;
}

cudaError_t launch_head(Act act, bool argmax, const HeadPlan& plan, const HeadParams& params, bool pdl,
                        cudaStream_t stream) {
  if (params.m == 0 || params.v == 0 || plan.blocks == 0) return cudaSuccess;
  if (params.m > kHeadMaxRows) return cudaErrorInvalidValue;
  HeadParams p = params;
  p.depth = plan.depth;
  const HeadFn fn = head_fn(act, p.m, plan.ksplit, argmax);
  cudaError_t err = launch_kernel(fn, dim3(unsigned(plan.blocks)), dim3(32 * plan.ksplit), plan.smem, stream, pdl, p);
  if (err != cudaSuccess || !argmax) return err;
  return launch_kernel(head_argmax_finish, dim3(unsigned(p.m)), dim3(32), 0, stream, pdl, p, plan.blocks);
}

}  // namespace qwen38::gemm
