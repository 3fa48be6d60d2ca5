// Torch-free interface between the GDN host launchers (gdn.cpp) and the kernels (gdn_kernel.cu).
#pragma once

#include <cuda_runtime.h>
#include <cstdint>

namespace qwen38::gdn {

// Geometry of a Qwen3.8-27B GDN layer (the kernels are written for exactly these).
constexpr int kQKHeads = 16;
constexpr int kVHeads = 48;
constexpr int kHeadK = 128;
constexpr int kHeadV = 128;
constexpr int kMaxChainTokens = 16;
constexpr int kMaxTreeNodes = 64;
constexpr int kMaxSplits = 4;  // Params::splits

// What a launch does (one kernel template, four modes):
//   kStep    one token per sequence; reads and writes the pool row; output [B, 48, 128]
//   kChain   up to 16 tokens, parent of token t is t - 1; pool read only; output [B, T, 48, 128]
//   kTree    up to 64 nodes in depth-first pre-order with parents; pool read only; output [B, T, 48, 128]
//   kCommit  replays the accepted tokens (chain prefix or tree path) into the pool row; no output
enum class Mode : int { kStep = 0, kChain = 1, kTree = 2, kCommit = 3 };
enum class DType : int { kBF16 = 0, kF16 = 1, kF32 = 2, kF64 = 3 };

struct Params {
  // Activations [B, T, heads, 128] (step: T = 1), last dim contiguous, other strides in elements.
  const void* q = nullptr;  // [B, T, 16, 128]  (unused by kCommit)
  const void* k = nullptr;  // [B, T, 16, 128]
  const void* v = nullptr;  // [B, T, 48, 128]
  int64_t q_sb = 0, q_st = 0, q_sh = 0;
  int64_t k_sb = 0, k_st = 0, k_sh = 0;
  int64_t v_sb = 0, v_st = 0, v_sh = 0;
  DType act = DType::kBF16;  // q, k, v (and the output)
  bool qk16 = false;  // q and k rows start 16-byte aligned (base and strides): 16-byte loads
  bool v16 = false;   // the same for v

  // Gates, precomputed: g fp32 [B, T, 48], beta [B, T, 48] in `beta_dt` (act's dtype or fp32).
  const float* g = nullptr;
  const void* beta = nullptr;
  int64_t g_sb = 0, g_st = 0, beta_sb = 0, beta_st = 0;
  DType beta_dt = DType::kF32;

  // Gates, raw (kStep with `raw`): a, b [B, 48]; A_log, dt_bias [48].
  bool raw = false;
  const void* a = nullptr;
  const void* b = nullptr;
  const void* A_log = nullptr;
  const void* dt_bias = nullptr;
  int64_t a_sb = 0, b_sb = 0;
  DType a_dt = DType::kF32, b_dt = DType::kF32, alog_dt = DType::kF32, dtb_dt = DType::kF32;

  // State pool fp32 [pool_rows, 48, 128, 128], contiguous.
  float* pool = nullptr;
  int64_t pool_rows = 0;

  // Index tensors (int32 or int64 each), contiguous.
  const void* slots = nullptr;     // [B]
  const void* lengths = nullptr;   // [B] or nullptr (= T)        (kChain, kTree)
  const void* parents = nullptr;   // [B, T]                      (kTree; kCommit of a tree)
  const void* accepted = nullptr;  // [B]                         (kCommit)
  bool slots64 = false, lengths64 = false, parents64 = false, accepted64 = false;

  // The pending commit folded into a verify (`civ`, kChain / kTree only): the previous round's
  // k [B, Tc, 16, 128], v [B, Tc, 48, 128] (act dtype), g fp32 and beta [B, Tc, 48], accepted [B]
  // and parents [B, Tc] or nullptr (a chain), replayed into each tile before the verify; the tile
  // is stored (the pool is written: the fused op declares it).
  bool civ = false;
  const void* c_k = nullptr;
  const void* c_v = nullptr;
  int64_t c_k_sb = 0, c_k_st = 0, c_k_sh = 0, c_v_sb = 0, c_v_st = 0, c_v_sh = 0;
  bool c_k16 = false, c_v16 = false;
  const float* c_g = nullptr;
  const void* c_beta = nullptr;
  int64_t c_g_sb = 0, c_g_st = 0, c_beta_sb = 0, c_beta_st = 0;
  DType c_beta_dt = DType::kF32;
  const void* c_accepted = nullptr;
  const void* c_parents = nullptr;
  bool c_accepted64 = false, c_parents64 = false;
  int c_tokens = 1;  // Tc

  // kTree without civ: CTAs per (column block, head, sequence), each verifying one run of the
  // depth-first order after replaying the run's first node's ancestors (gdn_kernel.cuh, "split").
  // 0: the launcher chooses from the CTAs the GPU holds at once (1 when a wave would not hold them);
  // 1..kMaxSplits: that many. Any value gives the same bits.
  int splits = 0;

  void* out = nullptr;  // [B, T, 48, 128] contiguous, act's dtype (kStep: T = 1; kCommit: none)
  int batch = 0;
  int tokens = 1;       // T
  float scale = 0.f;    // multiplies the l2-normalised q
};

// Launches on `stream` (programmatic dependent launch when `pdl`). Returns the launch error, if any.
cudaError_t launch(Mode mode, const Params& p, bool pdl, cudaStream_t stream);

// Dynamic shared memory a launch of `mode` with T tokens/nodes uses (the host reports it in errors).
size_t smem_bytes(Mode mode, int tokens);

}  // namespace qwen38::gdn
