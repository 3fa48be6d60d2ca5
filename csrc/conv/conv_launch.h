// Torch-free interface between the causal-conv1d host launcher (conv.cpp) and its kernel
// (conv_kernel.cuh / conv_kernel.cu).
#pragma once

#include <cuda_runtime.h>
#include <cstdint>

namespace qwen38::conv {

constexpr int kWidth = 4;            // taps; the state keeps kWidth - 1 previous raw inputs
constexpr int kMaxChainTokens = 16;
constexpr int kMaxTreeNodes = 64;

// What a launch does (one kernel, four modes):
//   kStep    x [B, C]: one token; reads and writes conv_state rows; y [B, C]
//   kChain   x [B, T, C]: token t's parent is t - 1; conv_state read only; y [B, T, C]
//   kTree    x [B, T, C] with parents [B, T] (depth-first order, -1 = the committed state); read only
//   kCommit  writes into conv_state rows the 3 newest raw inputs of [row, accepted path]; no y
enum class Mode : int { kStep = 0, kChain = 1, kTree = 2, kCommit = 3 };

struct Params {
  const void* x = nullptr;        // [B, T, C] bf16/fp16 (step: T = 1), last dim contiguous
  int64_t x_sb = 0, x_st = 0;     // strides of x in elements (batch, token)
  bool f16 = false;               // x, conv_state, y are fp16 (else bf16)
  void* state = nullptr;          // [S, C, 3] x's dtype, contiguous; index 2 = newest
  int64_t state_rows = 0;         // S
  const void* weight = nullptr;   // [C, 4] x's dtype or fp32, contiguous; weight[c, 3] x newest
  bool weight_f32 = false;
  const void* slots = nullptr;    // [B] int32/int64 (-1 = padding)
  const void* lengths = nullptr;  // [B] or null (= T)              (chain, tree)
  const void* parents = nullptr;  // [B, T], row stride parents_sb  (tree; commit of a tree)
  const void* accepted = nullptr; // [B]                            (commit)
  int64_t parents_sb = 0;
  bool slots64 = false, lengths64 = false, parents64 = false, accepted64 = false;
  void* y = nullptr;              // [B, T, C] contiguous, x's dtype (commit: none)
  int64_t batch = 0, tokens = 1, channels = 0;
  bool silu_f64 = false;          // silu always in float64 (else silu_exact: the same bits, faster)
};

cudaError_t launch(Mode mode, const Params& p, bool pdl, cudaStream_t stream);

}  // namespace qwen38::conv
