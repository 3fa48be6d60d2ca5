// Torch-free interface between the decode-attention host launcher (attn.cpp) and its kernels
// (attn_kernel.cuh / attn_kernel.cu). The split rule lives here because the launcher sizes the grid
// and the workspace from it and the kernel walks a row's keys by it.
#pragma once

#include <cuda_runtime.h>
#include <cstddef>
#include <cstdint>

namespace qwen38::attn {

constexpr int kChunk = 64;           // visible keys a chunk: one online-softmax update
constexpr int kMinSplitChunks = 4;   // a split holds at least 4 chunks (256 keys) ...
constexpr int kMaxSplits = 64;       // ... and a row has at most 64 splits (more keys: longer splits)
constexpr int kSplitCap = 256;       // the most splits QWEN38_ATTN_SPLIT may ask for (a lab knob)
constexpr int kMaxRows = 64;         // T
constexpr int kMaxGroup = 16;        // q heads a kv head: one 16-row mma tile holds a token's heads
constexpr int kThreads = 128;        // 4 warps a CTA (both kernels)

// The split rule's two numbers: a split holds at least `min_chunks` chunks and a row has at most
// `max_splits` splits (kMinSplitChunks, kMaxSplits; QWEN38_ATTN_SPLIT for A/B timing).
struct SplitRule {
  int min_chunks = kMinSplitChunks, max_splits = kMaxSplits;
};

// A row with n visible keys walks chunks_of(n) chunks in splits of split_chunks(chunks) chunks,
// splits_of(chunks) of them: functions of n (and the rule) only, so the one-token call after
// compaction (the same n) cuts the keys at the same places (the contract: attn_kernel.cuh's header).
__host__ __device__ inline int chunks_of(int64_t n) { return int((n + kChunk - 1) / kChunk); }
__host__ __device__ inline int split_chunks(int chunks, SplitRule r) {
  const int c = (chunks + r.max_splits - 1) / r.max_splits;
  return c > r.min_chunks ? c : r.min_chunks;
}
__host__ __device__ inline int splits_of(int chunks, SplitRule r) {
  const int c = split_chunks(chunks, r);
  return (chunks + c - 1) / c;
}
// The grid's splits for a cache of L slots: no row has more (n <= L; splits_of(c) is
// ceil(c / min_chunks) up to max_splits min_chunks chunks and max_splits beyond).
inline int grid_splits(int64_t slots, SplitRule r) {
  const int64_t c = (slots + kChunk - 1) / kChunk;
  const int64_t s = (c + r.min_chunks - 1) / r.min_chunks;
  return s < 1 ? 1 : (s > r.max_splits ? r.max_splits : int(s));
}

struct Params {
  const void* q = nullptr;             // [B, T, Hq, D] bf16/fp16, last dim contiguous
  int64_t q_sb = 0, q_st = 0, q_sh = 0;  // strides in elements (multiples of 8: 16-byte rows)
  const void* k = nullptr;             // [B, Hkv, L, D] q's dtype, last dim contiguous
  const void* v = nullptr;
  int64_t k_sb = 0, k_sh = 0, k_sl = 0, v_sb = 0, v_sh = 0, v_sl = 0;
  const void* kv_lens = nullptr;       // [B] int32/int64, stride kv_lens_s
  const void* lengths = nullptr;       // [B] or null (= T)
  int64_t kv_lens_s = 1, lengths_s = 1;
  bool kv_lens64 = false, lengths64 = false;
  const bool* mask = nullptr;          // [B, T, T] bool or null (causal)
  int64_t mask_sb = 0, mask_st = 0, mask_sj = 1;
  void* o = nullptr;                   // [B, T, Hq, D] contiguous, q's dtype
  float* ws = nullptr;                 // splits > 1: the partials (workspace_bytes)
  int* ws_splits = nullptr;            // splits > 1: [B, T] a row's split count (0: padding row)
  int batch = 0, tokens = 0, hq = 0, hkv = 0, group = 0, head_dim = 0;
  int64_t slots = 0;                   // L
  int splits = 1;                      // grid_splits(L, rule)
  SplitRule rule;
  int ring = 2;                        // K/V slots of the split kernel: 2 or 3 (QWEN38_ATTN_SLOTS)
  float scale_log2 = 0.0f;             // scale * log2(e), rounded to fp32 once by the launcher
  bool f16 = false;
};

// Workspace of a launch with p.splits > 1 (0 otherwise): per row (b, t, q head) and split, D fp32
// partial outputs and (max, sum); then the [B, T] int split counts.
inline size_t workspace_floats(const Params& p) {
  if (p.splits <= 1) return 0;
  return size_t(p.batch) * p.tokens * p.hq * p.splits * (size_t(p.head_dim) + 2);
}
inline size_t workspace_bytes(const Params& p) {
  if (p.splits <= 1) return 0;
  return workspace_floats(p) * sizeof(float) + size_t(p.batch) * p.tokens * sizeof(int);
}

cudaError_t launch(const Params& p, bool pdl, cudaStream_t stream);

}  // namespace qwen38::attn
