// Instantiations, launch shape and launch of the output-head kernels (see head_kernel.cuh).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "common/launch.cuh"
#include "gemm/head_kernel.cuh"
#include "gemm/head_tiles.cuh"

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

template <typename T, int MT, bool ARGMAX, bool RING = MT == 1, int MINB = 1>
HeadFn pick_split(int ksplit) {
  switch (ksplit) {
    case 1: return head_kernel<T, MT, 1, ARGMAX, RING, MINB>;
    case 2: return head_kernel<T, MT, 2, ARGMAX, RING, MINB>;
    case 4: return head_kernel<T, MT, 4, ARGMAX, RING, MINB>;
    default: return head_kernel<T, MT, 8, ARGMAX, RING, MINB>;
  }
}

template <typename T, bool ARGMAX>
HeadFn pick_kernel(int64_t m, int ksplit, bool ring) {
  if (m <= 16) return pick_split<T, 1, ARGMAX>(ksplit);
  return ring ? pick_split<T, 2, ARGMAX, true, 2>(ksplit) : pick_split<T, 2, ARGMAX, false, 1>(ksplit);
}

HeadFn head_fn(Act act, int64_t m, int ksplit, bool argmax, bool ring) {
  if (act == Act::kBF16)
    return argmax ? pick_kernel<__nv_bfloat16, true>(m, ksplit, ring) : pick_kernel<__nv_bfloat16, false>(m, ksplit, ring);
  return argmax ? pick_kernel<__half, true>(m, ksplit, ring) : pick_kernel<__half, false>(m, ksplit, ring);
}

template <typename T, bool ARGMAX> HeadFn tiles_fn(int stages) {
  return stages == 4 ? head_tiles_kernel<T, ARGMAX, 4> : head_tiles_kernel<T, ARGMAX, 3>;
}

HeadFn head_tiles_fn(Act act, bool argmax, int stages) {
  if (act == Act::kBF16) return argmax ? tiles_fn<__nv_bfloat16, true>(stages) : tiles_fn<__nv_bfloat16, false>(stages);
  return argmax ? tiles_fn<__half, true>(stages) : tiles_fn<__half, false>(stages);
}

int tiles_smem(Act act, int stages) {
  if (act == Act::kBF16) return stages == 4 ? head_tiles_smem<__nv_bfloat16, 4>() : head_tiles_smem<__nv_bfloat16, 3>();
  return stages == 4 ? head_tiles_smem<__half, 4>() : head_tiles_smem<__half, 3>();
}

template <typename T, bool ARGMAX, int BN> HeadFn narrow_fn_s(int stages) {
  return stages == 8 ? head_narrow_kernel<T, ARGMAX, BN, 8> : head_narrow_kernel<T, ARGMAX, BN, 4>;
}
template <typename T, bool ARGMAX> HeadFn narrow_fn_t(int cols, int stages) {
  return cols == 32 ? narrow_fn_s<T, ARGMAX, 32>(stages) : narrow_fn_s<T, ARGMAX, 64>(stages);
}
HeadFn head_narrow_fn(Act act, bool argmax, int cols, int stages) {
  if (act == Act::kBF16)
    return argmax ? narrow_fn_t<__nv_bfloat16, true>(cols, stages) : narrow_fn_t<__nv_bfloat16, false>(cols, stages);
  return argmax ? narrow_fn_t<__half, true>(cols, stages) : narrow_fn_t<__half, false>(cols, stages);
}
int narrow_smem(int cols, int stages) {
  if (cols == 32) return stages == 8 ? head_narrow_smem<32, 8>() : head_narrow_smem<32, 4>();
  return stages == 8 ? head_narrow_smem<64, 8>() : head_narrow_smem<64, 4>();
}

// CTAs an SM of a tiles kernel on the current device: the 128-column one at `stages` (cols 128) or the
// narrow one (cols 64 / 32; the argmax forms have the same launch bounds and a little more static
// shared memory: the plain form stands for both). The first call per (dtype, cols, stages, device)
// queries; later calls read a cache.
cudaError_t tiles_occupancy(Act act, int cols, int stages, int* per_sm) {
  static std::mutex mu;
  static std::map<std::tuple<int, int, int, int>, int> cache;
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev)) return e;
  return cached_query(mu, cache, std::make_tuple(int(act), cols, stages, dev), per_sm, [&](int* n) {
    const bool wide = cols == prefill::kBN;
    const HeadFn fn = wide ? head_tiles_fn(act, false, stages) : head_narrow_fn(act, false, cols, stages);
    const int smem = wide ? tiles_smem(act, stages) : narrow_smem(cols, stages);
    const int threads = wide ? prefill::kThreads : 2 * cols;
    cudaError_t err = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err == cudaSuccess) err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(n, fn, threads, size_t(smem));
    return err;
  });
}

// How full the grid's waves are: tiles / (slots x ceil(tiles / slots)), in (0, 1]; 1 when the last
// wave is full.
double head_tiles_fill(int64_t tiles, int64_t slots) {
  if (tiles <= 0 || slots <= 0) return 1.0;
  const int64_t waves = (tiles + slots - 1) / slots;
  return double(tiles) / double(waves * slots);
}

}  // namespace

cudaError_t head_plan(Act act, int64_t m, int64_t v, int64_t k, bool argmax, bool tiles, int stages, int cols,
                      int nstages, HeadPlan* plan, bool balance) {
  plan->ksplit = head_k_split(k);
  plan->blocks = 0;
  plan->tiles = tiles;
  if (m <= 0 || v <= 0) return cudaSuccess;
  if (m > kHeadMaxRows) return cudaErrorInvalidValue;
  if (tiles) {
    // Narrow column tiles (QWEN38_HEAD_COLS 64 / 32, head_narrow_kernel) at `nstages` stages (4 or 8).
    const int narrow = cols == 64 || cols == 32 ? cols : 0;
    if (cols != 128 && narrow == 0) return cudaErrorInvalidValue;
    if (narrow != 0 && nstages != 0 && nstages != 4 && nstages != 8) return cudaErrorInvalidValue;
    if (narrow != 0) {
      // Stages (no bit changes; 0 = auto): 8 where two CTAs of 8 stages fit an SM (the H200: 96 KB each
      // at 64 columns), else 4 (sm_121a's 99 KB holds one CTA of 8 stages, two of 4). Measured on the
      // H200 (session 36, cold copies): 64 columns at 8 stages against 128 columns at 4 (the earlier
      // default), us: 32768 rows at 1 / 16 / 32 rows 80.2 / 81.6 / 82.9 -> 78.8 / 81.1 / 82.4,
      // 65536 at 1 row 156.6 -> 152.1, 248320 at 1 / 32 rows 581.4 / 609.9 -> 569.2 / 607.6.
      if (nstages == 0) {
        int per8 = 0;
        if (cudaError_t err = tiles_occupancy(act, narrow, 8, &per8)) return err;
        nstages = per8 >= 2 ? 8 : 4;
      }
      int64_t n_tiles = (v + narrow - 1) / narrow;
      plan->balanced = false;
      if (balance) {
        // Whole waves: the fewest multiple of the resident slots that keeps every tile within `narrow`
        // columns; tile i then takes the column groups of 8 [i G / T, (i + 1) G / T) (head_narrow_kernel).
        // Why: the draft vocabulary's 512 tiles of 64 columns fill 1.94 waves of the H200's 264 slots and
        // a partial wave costs about a full one (head_tiles_fill's note); 528 tiles of 56-64 columns fill 2.
        int dev = 0, sms = 0, per = 0;
        cudaError_t err = cudaGetDevice(&dev);
        if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
        if (err == cudaSuccess) err = tiles_occupancy(act, narrow, nstages, &per);
        if (err != cudaSuccess) return err;
        const int64_t slots = int64_t(sms) * std::max(per, 1), groups = (v + 7) / 8;
        const int64_t t = (n_tiles + slots - 1) / slots * slots;
        if (t <= groups) {
          n_tiles = t;
          plan->balanced = true;
        }
      }
      if (n_tiles > 65535) return cudaErrorInvalidValue;
      plan->blocks = int(n_tiles);
      plan->cols = narrow;
      plan->stages = nstages;
      plan->smem = size_t(narrow_smem(narrow, nstages));
      return cudaSuccess;
    }
    // one CTA per 128-column tile; its workspace entries too
    const int64_t cols = (v + prefill::kBN - 1) / prefill::kBN;
    if (cols > 65535) return cudaErrorInvalidValue;
    plan->blocks = int(cols);
    // Stages (no bit changes): the count whose CTAs an SM fill the grid's last wave best. Each CTA
    // streams its tile's K at a fixed share of the read ceiling, so a wave of CTAs costs about the
    // same whether full or not: the grid takes ceil(waves) of them. On the H200 3 stages hold three
    // CTAs an SM and 4 hold two: lm_head's 1940 tiles fill 4.9 waves of 396 slots (3 stages) against
    // 7.35 of 264; the 32768-row draft vocabulary's 256 tiles fill 0.65 of a wave at 3 stages and
    // 0.97 at 4; 67584 rows (528 tiles) fill 1.33 waves at 3 (199 us, session 33's timeline lab:
    // the last 132 CTAs run alone) and exactly 2 at 4. Ties (equal CTAs an SM, as sm_121a's one)
    // take 4: more bytes in flight a CTA.
    if (stages == 0) {
      int dev = 0, sms = 0, per3 = 0, per4 = 0;
      cudaError_t err = cudaGetDevice(&dev);
      if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
      if (err == cudaSuccess) err = tiles_occupancy(act, prefill::kBN, 3, &per3);
      if (err == cudaSuccess) err = tiles_occupancy(act, prefill::kBN, 4, &per4);
      if (err != cudaSuccess) return err;
      stages = head_tiles_fill(cols, int64_t(sms) * std::max(per4, 1)) >=
                       head_tiles_fill(cols, int64_t(sms) * std::max(per3, 1))
                   ? 4
                   : 3;
    }
    if (stages != 3 && stages != 4) return cudaErrorInvalidValue;
    plan->stages = stages;
    plan->smem = size_t(tiles_smem(act, stages));
    return cudaSuccess;
  }
  // 17..32 rows (QWEN38_HEAD_RING32): head_argmax through the ring at two blocks per SM, head_logits
  // with the register prefetch ("argmax", the default); "1": both through the ring; "0": neither.
  // Measured on the H200 (same run, 248320 x 5120): argmax 683-848 us at 17..32 rows through the
  // ring against 893-958; logits through the ring 1012-1020 us at 17..22 rows (823-915 with the
  // register prefetch; not understood: the argmax kernel, the same code without the logit stores,
  // has no such step), 823-864 from 26 rows on.
  const char* r32 = std::getenv("QWEN38_HEAD_RING32");
  const bool all = r32 != nullptr && std::strcmp(r32, "1") == 0, none = r32 != nullptr && std::strcmp(r32, "0") == 0;
  plan->ring = m <= 16 || all || (argmax && !none);
  HeadFn fn = head_fn(act, m, plan->ksplit, argmax, plan->ring);
  int dev = 0, sms = 0, per_sm = 0;
  size_t room = 0;  // dynamic shared memory a block of fn may use (the attribute is raised to it)
  cudaError_t err = cudaGetDevice(&dev);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (err == cudaSuccess) err = dynamic_smem_room(fn, &room);
  if (err != cudaSuccess) return err;
  // 1..16 rows: the deepest ring (up to `cap` steps) that fits a block next to the kernel's static
  // shared memory (QWEN38_HEAD_DEPTH=2..4 sets the cap, for A/B timing: the depth changes no bit).
  // Default 2: with one step in flight two blocks fit an SM (16 warps), measured best at 16 rows
  // and equal at 1. 17..32 rows: the deepest ring of 4..2 steps at which two blocks still fit an SM
  // (the H200: 2, the partials of 32 rows taking 40 KB a block); none: the register prefetch.
  plan->depth = 2;
  plan->smem = 0;
  if (m > 16 && plan->ring) {
    plan->depth = 0;
    for (int d = 4; d >= 2 && plan->depth == 0; --d) {
      const size_t bytes = head_ring_bytes(d, plan->ksplit);
      if (bytes > room) continue;
      if ((err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, 32 * plan->ksplit, bytes))) return err;
      if (per_sm >= 2) plan->depth = d;
    }
    if (plan->depth != 0) {
      plan->smem = head_ring_bytes(plan->depth, plan->ksplit);
    } else {
      plan->ring = false;
      plan->depth = 2;
      fn = head_fn(act, m, plan->ksplit, argmax, false);
    }
  }
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
  p.balanced = plan.tiles && plan.cols < prefill::kBN && plan.balanced ? 1 : 0;
  cudaError_t err;
  if (plan.tiles && plan.cols < prefill::kBN) {
    const HeadFn fn = head_narrow_fn(act, argmax, plan.cols, plan.stages);
    err = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, int(plan.smem));
    if (err == cudaSuccess)
      err = launch_kernel(fn, dim3(1, unsigned(plan.blocks)), dim3(unsigned(2 * plan.cols)), plan.smem, stream, pdl, p);
  } else if (plan.tiles) {
    const HeadFn fn = head_tiles_fn(act, argmax, plan.stages);
    // above the default 48 KB a block must opt in (per device; not a stream operation)
    err = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, int(plan.smem));
    if (err == cudaSuccess)
      err = launch_kernel(fn, dim3(1, unsigned(plan.blocks)), dim3(prefill::kThreads), plan.smem, stream, pdl, p);
  } else {
    const HeadFn fn = head_fn(act, p.m, plan.ksplit, argmax, plan.ring);
    err = launch_kernel(fn, dim3(unsigned(plan.blocks)), dim3(32 * plan.ksplit), plan.smem, stream, pdl, p);
  }
  if (err != cudaSuccess || !argmax) return err;
  return launch_kernel(head_argmax_finish, dim3(unsigned(p.m)), dim3(32), 0, stream, pdl, p, plan.blocks);
}

}  // namespace qwen38::gemm
