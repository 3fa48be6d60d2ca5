// Torch-free interface between the output-head host launcher (head.cpp) and its kernels
// (head_kernel.cuh / head_kernel.cu).
#pragma once

#include <cuda_runtime.h>
#include <cstdint>

#include "gemm/nvfp4_linear_launch.h"  // Act

namespace qwen38::gemm {

// Rows (tokens) one launch serves; more rows are cut into launches of this many by the host (the
// same kernel, so every row keeps the arithmetic of its 1-row call).
constexpr int64_t kHeadMaxRows = 32;

struct HeadParams {
  const void* x = nullptr;       // [M, K] bf16/fp16, row stride x_stride (elements), rows 16-byte aligned
  const void* w = nullptr;       // [V, K] x's dtype, contiguous, 16-byte aligned
  float* y = nullptr;            // head_logits: [M, V] fp32, contiguous
  float* ws_val = nullptr;       // head_argmax: [blocks, kHeadMaxRows] per-block best logit
  int32_t* ws_idx = nullptr;     //              [blocks, kHeadMaxRows] its column (-1: none)
  float* best_val = nullptr;     // head_argmax: [M] winning logit
  int64_t* best_idx = nullptr;   //              [M] winning column
  int64_t m = 0, v = 0, k = 0, x_stride = 0;
  int depth = 2;                 // weight ring depth in steps (2..4; head_plan): changes no bit
  int balanced = 0;              // narrow tiles: 1 = gridDim.y tiles of near-equal width (head_narrow_kernel)
};

// The launch shape of one call: warps per block that split K (a function of K only) and the
// persistent grid (blocks resident on the device, capped by the number of 32-column tasks).
struct HeadPlan {
  int ksplit = 1;
  int blocks = 0;
  int depth = 2;     // weight ring depth (1..16 rows: the deepest of the cap..2 whose shared memory
                     // fits a block; 17..32 rows: the deepest of 4..2 at which two blocks fit an SM)
  size_t smem = 0;   // its dynamic shared memory
  bool tiles = false;  // the "tiles" kernel (head_tiles.cuh): grid (1, column tiles), `blocks` of them
  int stages = 3;      // its cp.async stages: 3 (three CTAs an SM) or 4 (two); changes no bit
  int cols = 128;      // its column tile: 128, or 64 / 32 (head_narrow_kernel, QWEN38_HEAD_COLS); no bit
  bool balanced = false;  // narrow tiles: `blocks` (a multiple of the resident slots) near-equal tiles of at
                          // most `cols` columns (QWEN38_HEAD_BALANCE); no bit
  bool ring = true;  // the weights through the ring (1..16 rows always; 17..32 rows: head_argmax
                     // where two blocks with a ring fit an SM, QWEN38_HEAD_RING32; else the one-step
                     // register prefetch)
};

// m: rows of one launch (1..kHeadMaxRows); tiles: the "tiles" kernel (QWEN38_HEAD_KERNEL), else the
// ring kernel (head_kernel.cuh); both plans query the current device (SM count, occupancy).
// stages (tiles; QWEN38_HEAD_STAGES): 3 or 4, 0 = the count that fills the last wave best (head_plan).
// cols (tiles; QWEN38_HEAD_COLS): the column tile, 128, or 64 / 32 (head_narrow_kernel) at nstages
// (QWEN38_HEAD_NARROW_STAGES: 4 or 8; 0 = 8 where two such CTAs fit an SM, else 4) stages.
// balance (narrow tiles; QWEN38_HEAD_BALANCE): as many tiles as fill whole waves of the resident slots,
// each of near-equal width (at most `cols`), instead of ceil(V / cols) tiles of `cols`.
cudaError_t head_plan(Act act, int64_t m, int64_t v, int64_t k, bool argmax, bool tiles, int stages, int cols,
                      int nstages, HeadPlan* plan, bool balance = false);

// head_logits: writes y. head_argmax: writes ws_* then best_*. p.m <= kHeadMaxRows.
cudaError_t launch_head(Act act, bool argmax, const HeadPlan& plan, const HeadParams& p, bool pdl,
                        cudaStream_t stream);

}  // namespace qwen38::gemm
