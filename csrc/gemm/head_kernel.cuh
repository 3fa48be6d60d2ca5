// The output head's "ring" kernel (QWEN38_HEAD_KERNEL=ring; the default is head_tiles.cuh), 1..32
// rows: logits[m, v] = sum_k fp32(x[m, k]) * fp32(w[v, k]), fp32 out, and the fused greedy epilogue
// (per row the first maximal column and its logit). Reference: qwen38_kernels/reference/fp8.py
// (head_logits, head_argmax).
//
// Tensors: x [M, K] bf16/fp16 (row stride x_stride, K % 16 == 0, rows 16-byte aligned); w [V, K]
// x's dtype, contiguous; y [M, V] fp32 contiguous. The products are exact in fp32; the tensor core
// sums them in fp32.
//
// Same skeleton as the skinny weight GEMMs (nvfp4_linear_kernel.cuh): weights are the mma B
// operand (8 weight rows per m16n8k16), activations the A operand (one m16 tile for rows 1..16, two
// for 17..32, against the same B registers). The weights need no decode, so each thread's 16-byte
// vector load IS a pair of B fragments:
//
//   32-k group q:  thread (g, t) loads w[col][32q + 8t .. 32q + 8t + 7]   (one 16-byte load,
//                  registers r0..r3, r_i = the bf16 pair k = 32q + 8t + 2i, 2i + 1)
//   mma h = 0, 1:  b0 = r_{2h}   -> logical k slots (2t, 2t+1)    = k 32q + 8t + 4h + {0, 1}
//                  b1 = r_{2h+1} -> logical k slots (2t+8, 2t+9)  = k 32q + 8t + 4h + {2, 3}
//   A takes x at the same k: the 16-byte load x[row][32q + 8t .. +7] is the same four pairs, so
//   a0/a2 = pairs 2h, 2h+1 of row g (a1/a3: row g + 8).
//
//   one warp load instruction (a 32-k group of one n-tile):
//        row col+0:  [t0 16B][t1 16B][t2 16B][t3 16B]   64 contiguous bytes (two sectors)
//        ...
//        row col+7:  [t0 16B][t1 16B][t2 16B][t3 16B]
//
// Order of the sums (a function of K only, never of M: row invariance; nothing one row computes
// reads another row, so a NaN stays in its row):
//   - K is cut into ceil(K / 32) groups; KSPLIT warps of a block take contiguous ranges of groups
//     (warp w: groups [G w / KSPLIT, G (w + 1) / KSPLIT)), KSPLIT = f(K) (head_kernel.cu);
//   - a warp's accumulator starts at +0 and takes its groups in increasing q, mma h = 0 then 1;
//     a group past K in part (K % 32 == 16) reads zeros for both operands there;
//   - the block sums the warps' partials in shared memory: 0 + P_0 + P_1 + ... + P_{KSPLIT-1}.
// The row tiles (MT), the n-tiles per warp (kHeadTiles), the groups per pipeline step
// (kHeadGroups) and the grid do not change any of these sums: they only decide which registers and
// which block hold them.
//
// Streaming: the grid is persistent (about the blocks that fit on the device); block b takes the
// 32-column tasks b, b + gridDim, ... For 1..16 rows each thread streams its weight chunks (kHeadTiles x
// kHeadGroups 16-byte copies a step) through its own cp.async ring in shared memory, `depth` steps
// deep (HeadParams::depth, chosen by head_plan to fit the device): depth - 1 steps are in flight
// while one is multiplied, across task boundaries too, so the shared-memory epilogue of a task
// overlaps the next task's copies, and the ring costs no registers (a register prefetch of one step
// held 8 warps per SM to one step in flight: not enough bytes to cover the DRAM latency). A thread
// reads back only what it copied: no barrier. The copies bypass L1 (leave it to the activations,
// which every warp re-reads) and carry a 256-byte L2 fetch hint (the rest of each row segment comes
// next). The first steps go out before pdl_wait() (weights are not written by our kernels). The
// 17..32-row kernel keeps the next step in registers instead (ld.global.nc, same hints).
//
// Greedy epilogue (ARGMAX): the 32 columns of a task are one warp's lanes; a shuffle reduction
// with the comparator `better` finds the task's winner per row, merged into the block's running
// winner (shared memory, one owner warp per row); at the end each block writes its winner per row
// to a workspace, and head_argmax_finish reduces the blocks' entries. `better` is a total order
// on distinct columns (NaN above every number, then value with +0 == -0, then the LOWER column),
// so the winner does not depend on the order of the merges: it is the reference's winner, and its
// logit is the very fp32 sum head_logits stores for that column.
#pragma once

#include "common/cp_async.cuh"
#include "common/mma.cuh"
#include "common/pdl.cuh"
#include "common/smem.cuh"
#include "gemm/head_launch.h"

namespace qwen38::gemm {

constexpr int kHeadTiles = 4;                 // n-tiles of 8 weight rows per warp
constexpr int kHeadCols = 8 * kHeadTiles;     // columns (weight rows) per task: 32 = one warp's lanes
constexpr int kHeadGroups = 2;                // 32-k groups per pipeline step
constexpr int kHeadGroupK = 32;               // k per group: 4 threads x 8 elements
constexpr int kHeadPitch = kHeadCols + 8;     // floats per partial row: 64-bit fragment stores of a
                                              // half warp (g 0..3 x t) land on 32 distinct banks
static_assert(kHeadCols == 32, "the greedy epilogue maps a task's columns onto the 32 lanes of a warp");

// 16 bytes of a weight row, read once (the 17..32-row kernel, which keeps its register prefetch):
// no L1 allocation, 256-byte L2 prefetch.
__device__ __forceinline__ uint4 ld_weight16(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// Dynamic shared memory of the weight ring: depth x (kHeadTiles x kHeadGroups) x 16 bytes a thread.
__host__ __device__ constexpr size_t head_ring_bytes(int depth, int ksplit) {
  return size_t(depth) * kHeadTiles * kHeadGroups * 16 * 32 * ksplit;
}

// Is (av, ai) the better greedy candidate than (bv, bi)? Index -1 = no candidate. NaN beats every
// number (torch.argmax), numbers compare by value (+0 == -0), ties go to the lower index.
__device__ __forceinline__ bool head_better(float av, int32_t ai, float bv, int32_t bi) {
  if (ai < 0) return false;
  if (bi < 0) return true;
  const bool an = av != av, bn = bv != bv;
  if (an || bn) return an && (!bn || ai < bi);
  if (av != bv) return av > bv;
  return ai < bi;
}

__device__ __forceinline__ void head_warp_best(float& v, int32_t& i) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, off);
    const int32_t oi = __shfl_xor_sync(0xffffffffu, i, off);
    if (head_better(ov, oi, v, i)) {
      v = ov;
      i = oi;
    }
  }
}

// The register cap of two blocks per SM (the 17..32-row ring) where such blocks can fit: sm_12x's
// 99 KB of shared memory never holds two (head_plan checks the occupancy and takes the register
// prefetch), so its build is not capped (capped, it spilled 16 bytes).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
#define QWEN38_HEAD_MIN_BLOCKS(MINB) 1
#else
#define QWEN38_HEAD_MIN_BLOCKS(MINB) (MINB)
#endif

// T: x/w type; MT: m16 row tiles (1: rows 1..16, 2: rows 17..32); KSPLIT: warps per block; RING:
// the weights through the per-thread cp.async ring (else the one-step register prefetch); MINB:
// blocks per SM the registers must allow. RING and MINB change no sum.
template <typename T, int MT, int KSPLIT, bool ARGMAX, bool RING = MT == 1, int MINB = 1>
__global__ void __launch_bounds__(32 * KSPLIT, QWEN38_HEAD_MIN_BLOCKS(MINB)) head_kernel(const HeadParams p) {
  constexpr int NT = kHeadTiles, G = kHeadGroups, ROWS = MT * 16;
  __shared__ float partial[KSPLIT][ROWS][kHeadPitch];
  __shared__ float run_val[ARGMAX ? ROWS : 1];
  __shared__ int32_t run_idx[ARGMAX ? ROWS : 1];

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t groups = (p.k + kHeadGroupK - 1) / kHeadGroupK;
  const int64_t q_begin = groups * warp / KSPLIT, q_end = groups * (warp + 1) / KSPLIT;
  const int64_t nsteps = (q_end - q_begin + G - 1) / G;
  const int64_t ntasks = (p.v + kHeadCols - 1) / kHeadCols;
  const T* __restrict__ x = static_cast<const T*>(p.x);
  const T* __restrict__ w = static_cast<const T*>(p.w);

  if constexpr (ARGMAX) {
    for (int r = threadIdx.x; r < ROWS; r += 32 * KSPLIT) {
      run_val[r] = 0.0f;
      run_idx[r] = -1;
    }
  }

  // 1..16 rows stream the weights through the ring at two blocks per SM. So does head_argmax at
  // 17..32 rows where two blocks with a ring fit an SM (MT 2 capped at 128 registers); head_logits
  // at 17..32 rows, and every 17..32-row call where two such blocks do not fit (sm_121a's 99 KB),
  // keep the one-step register prefetch at one block per SM (head_plan has the measurements).
  constexpr bool kRing = RING;

  // The ring: slot d holds one step, chunk (j, i) at ring[(d NT G + j G + i) threads + thread].
  QWEN38_DYNAMIC_SMEM(uint4, ring_mem, 16);
  constexpr int kThreads = 32 * KSPLIT;
  const int depth = p.depth;
  uint4* __restrict__ ring = ring_mem + threadIdx.x;
  // Chunk (j, i) of step s of task tk: w[tk * 32 + 8j + g][group q_begin + s G + i]; `ok` false
  // (zeros) past V or K and for groups past this warp's range (their mmas are skipped anyway). A flag,
  // not a null pointer: the null-pointer form cost the 17..32-row kernels 6-9 registers and 40-60
  // SASS instructions (sm_90a), and 32 rows measured 1016-1022 us with it against 912 before it.
  auto chunk = [&](int64_t tk, int64_t s, int j, int i, bool& ok) -> const T* {
    const int64_t col = tk * kHeadCols + 8 * j + g;
    const int64_t q = q_begin + s * G + i;
    const int64_t kk = q * kHeadGroupK + 8 * t;
    ok = col < p.v && q < q_end && kk < p.k;
    return w + col * p.k + kk;
  };
  // The next step to copy, in the order the loop consumes them: (task, s) for s < nsteps, then the
  // block's next task.
  int64_t c_task = nsteps > 0 ? int64_t(blockIdx.x) : ntasks, c_step = 0;
  auto copy_next = [&](int slot) {
    if (c_task < ntasks) {
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int i = 0; i < G; ++i) {
          bool ok;
          const T* src = chunk(c_task, c_step, j, i, ok);
          cp_async16_span<256>(ring + ((slot * NT + j) * G + i) * kThreads, ok ? src : w, ok ? 16 : 0);
        }
      if (++c_step == nsteps) {
        c_step = 0;
        c_task += gridDim.x;
      }
    }
    cp_async_commit();  // one group per call, empty or not: the wait counts stay exact
  };
  if constexpr (kRing)
    for (int d = 0; d < depth - 1; ++d) copy_next(d);

  pdl_wait();
  pdl_allow();

  // The register prefetch (MT 2): the same chunks of step s of task tk.
  auto load_w = [&](int64_t tk, int64_t s, uint4 (&buf)[NT][G]) {
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int i = 0; i < G; ++i) {
        bool ok;
        const T* src = chunk(tk, s, j, i, ok);
        buf[j][i] = make_uint4(0, 0, 0, 0);
        if (ok) buf[j][i] = ld_weight16(src);
      }
  };
  uint4 w_next[NT][G];
  int slot = 0;
  int64_t task = blockIdx.x;
  if constexpr (!kRing)
    if (task < ntasks && nsteps > 0) load_w(task, 0, w_next);
  for (; task < ntasks; task += gridDim.x) {
    float acc[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mt][j][e] = 0.0f;

    for (int64_t s = 0; s < nsteps; ++s) {
      // this step's chunks arrived (depth - 2 later steps may be in flight); then the slot read one
      // step ago (its registers are consumed) takes the step depth - 1 ahead
      uint4 w_cur[NT][G];
      if constexpr (kRing) {
        cp_async_wait_dyn(depth - 2);
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
          for (int i = 0; i < G; ++i) w_cur[j][i] = ring[((slot * NT + j) * G + i) * kThreads];
        copy_next(slot == 0 ? depth - 1 : slot - 1);
        slot = slot + 1 == depth ? 0 : slot + 1;
      } else {
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
          for (int i = 0; i < G; ++i) w_cur[j][i] = w_next[j][i];
        // keep the next step in flight: this task's next step, or the next task's first
        if (s + 1 < nsteps) {
          load_w(task, s + 1, w_next);
        } else if (task + gridDim.x < ntasks) {
          load_w(task + gridDim.x, 0, w_next);
        }
      }

      // activations of this step: rows g + 8h (h < 2 MT), 8 values at 32q + 8t each
      uint4 xa[G][2 * MT];
#pragma unroll
      for (int i = 0; i < G; ++i) {
        const int64_t q = q_begin + s * G + i;
        const int64_t kk = q * kHeadGroupK + 8 * t;
#pragma unroll
        for (int h = 0; h < 2 * MT; ++h) {
          const int64_t row = g + 8 * h;
          xa[i][h] = make_uint4(0, 0, 0, 0);
          if (row < p.m && q < q_end && kk < p.k)
            xa[i][h] = __ldg(reinterpret_cast<const uint4*>(x + row * p.x_stride + kk));
        }
      }

#pragma unroll
      for (int i = 0; i < G; ++i) {
        if (q_begin + s * G + i >= q_end) break;  // warp-uniform: the last step of an odd range
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            const uint4& lo = xa[i][2 * mt];      // row g + 16 mt
            const uint4& hi = xa[i][2 * mt + 1];  // row g + 16 mt + 8
            uint32_t a[4];
            a[0] = hh == 0 ? lo.x : lo.z;
            a[1] = hh == 0 ? hi.x : hi.z;
            a[2] = hh == 0 ? lo.y : lo.w;
            a[3] = hh == 0 ? hi.y : hi.w;
#pragma unroll
            for (int j = 0; j < NT; ++j) {
              const uint32_t b0 = hh == 0 ? w_cur[j][i].x : w_cur[j][i].z;
              const uint32_t b1 = hh == 0 ? w_cur[j][i].y : w_cur[j][i].w;
              mma_16816<T>(acc[mt][j], a, b0, b1);
            }
          }
        }
      }
    }

    // ---- epilogue of the task: warps' partials in warp order (C fragment layout: mma.cuh)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        float* r0 = &partial[warp][mt * 16 + g][8 * j + 2 * t];
        float* r8 = &partial[warp][mt * 16 + g + 8][8 * j + 2 * t];
        *reinterpret_cast<float2*>(r0) = make_float2(acc[mt][j][0], acc[mt][j][1]);
        *reinterpret_cast<float2*>(r8) = make_float2(acc[mt][j][2], acc[mt][j][3]);
      }
    __syncthreads();
    const int64_t col0 = task * kHeadCols;
    if constexpr (!ARGMAX) {
      for (int idx = threadIdx.x; idx < ROWS * kHeadCols; idx += 32 * KSPLIT) {
        const int r = idx / kHeadCols, c = idx % kHeadCols;
        if (r >= p.m || col0 + c >= p.v) continue;
        float sum = 0.0f;
#pragma unroll
        for (int ww = 0; ww < KSPLIT; ++ww) sum += partial[ww][r][c];
        p.y[r * p.v + col0 + c] = sum;
      }
    } else {
      // warp `warp` owns rows warp, warp + KSPLIT, ...; lane = column of the task
      for (int r = warp; r < ROWS && r < p.m; r += KSPLIT) {
        float sum = 0.0f;
#pragma unroll
        for (int ww = 0; ww < KSPLIT; ++ww) sum += partial[ww][r][lane];
        float bv = sum;
        int32_t bi = col0 + lane < p.v ? int32_t(col0 + lane) : -1;
        head_warp_best(bv, bi);
        if (lane == 0 && head_better(bv, bi, run_val[r], run_idx[r])) {
          run_val[r] = bv;
          run_idx[r] = bi;
        }
      }
    }
    __syncthreads();  // partial is rewritten by the next task
  }

  if constexpr (kRing) cp_async_wait<0>();  // the tail issued nothing, but no copy outlives the block

  if constexpr (ARGMAX) {
    // the owner warps wrote run_*; the last barrier above (or none, with no task) orders it
    __syncthreads();
    for (int r = threadIdx.x; r < ROWS; r += 32 * KSPLIT) {
      p.ws_val[int64_t(blockIdx.x) * kHeadMaxRows + r] = run_val[r];
      p.ws_idx[int64_t(blockIdx.x) * kHeadMaxRows + r] = run_idx[r];
    }
  }
}

// One warp per row: the winner among the blocks' entries (any order gives the same winner).
__global__ void __launch_bounds__(32) head_argmax_finish(const HeadParams p, int blocks) {
  pdl_wait();
  pdl_allow();
  const int r = blockIdx.x, lane = threadIdx.x;
  float bv = 0.0f;
  int32_t bi = -1;
  // 8 entries a lane loaded before any is compared: 8 loads in flight, not one latency per entry
  // (the tiles kernel leaves one entry per 128-column tile: 1940 a row for the full vocabulary);
  // an entry past the end is no candidate (index -1)
  for (int b0 = lane; b0 < blocks; b0 += 32 * 8) {
    float v[8];
    int32_t i[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int b = b0 + 32 * u;
      v[u] = b < blocks ? p.ws_val[int64_t(b) * kHeadMaxRows + r] : 0.0f;
      i[u] = b < blocks ? p.ws_idx[int64_t(b) * kHeadMaxRows + r] : -1;
    }
#pragma unroll
    for (int u = 0; u < 8; ++u)
      if (head_better(v[u], i[u], bv, bi)) {
        bv = v[u];
        bi = i[u];
      }
  }
  head_warp_best(bv, bi);
  if (lane == 0) {
    p.best_val[r] = bv;
    p.best_idx[r] = bi;
  }
}

}  // namespace qwen38::gemm
