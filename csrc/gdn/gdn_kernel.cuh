// Gated DeltaNet decode kernels: step, chain verify, tree verify, commit. Torch-free.
//
// Formula (per sequence b and v head h; q/k head hq = h / 3; everything fp32; fma = one rounding):
//   kn = k * (1 / sqrt(ksum(k*k) + 1e-6))          qn = (q * (1 / sqrt(ksum(q*q) + 1e-6))) * scale
//   d  = round_fp32(exp_f64(g))                     (per head and token)
//   S  = S * d;   u = ksum_i(S[i, :], kn[i]);   delta = (v - u) * beta;   S = fma(kn[:, None], delta, S)
//   o  = round(ksum_i(S[i, :], qn[i]))              (the updated S)
// ksum(a, b): K = 128 split into 4 contiguous segments of 32, each accumulated sequentially in
// ascending i with fused multiply-adds from its first (rounded) product, then (p0 + p1) + (p2 + p3).
// Reference (the contract, bit for bit): qwen38_kernels/reference/gdn.py (_ksum, _l2norm, _decay,
// _gdn_core, gdn_gates).
//
// Tensors: q, k [B, T, 16, 128], v [B, T, 48, 128] bf16/fp16 (last dim contiguous, other strides
// free); g fp32 [B, T, 48]; beta [B, T, 48] act dtype or fp32; state pool fp32 [S, 48, 128 (K = i),
// 128 (V = j)] contiguous; output [B, T, 48, 128] contiguous in the act dtype.
//
// Work split: one CTA of 128 threads (4 warps) per (column block, v head, sequence); a block is 32
// V columns (step, tree, commit) or 64 (chain verify: two columns a thread, cols_per_thread).
// Columns of S evolve independently (u, delta and o of column j only read column j and the shared
// kn, qn), so splitting V over CTAs changes no bit: 192 CTAs at B = 1 (the chain: 96). Inside a
// CTA, thread slot c (0..31) holds column(s) kC * c (.. + kC - 1) of the block:
//
//        slots    0 | 1 | ... | 31                           thread = (slot c, segment s)
//   rows   0..31   (c 0, s 0) (c 1, s 0) ...                 lane   = 4 * (c % 8) + s
//         32..63   (c 0, s 1) ...                            warp   = c / 8
//         64..95   (c 0, s 2) ...
//         96..127  (c 0, s 3) ...
//
// Each thread holds the 32 fp32 values of its (segment, column) in registers (float S[kC][32]) for
// the whole launch: the tile is loaded once and, for the step and the commit, stored once. (One
// column a thread halves the instructions a thread runs per token; two columns halve the shared-
// memory reads per column - each thread reads a token's kn and qn segments, 256 bytes, whatever
// its column count - which is what the chain's token costs at B = 1: see cols_per_thread.)
// A column's segment partial is the thread's sequential 32-term sum, exactly the contract's
// segment order; the 4 partials live in 4 adjacent lanes and are combined by three xor shuffles
// issued together (the verifies and the commit; the step: two xor steps, combine_segments): lane s
// holds p_s and reads p_(s^1), p_(s^2), p_(s^3); its own pair's sum plus the other pair's is
// (p0 + p1) + (p2 + p3) in every lane (addition is commutative: the same bits).
//
// Verify: the per-token vectors (kn, qn, v, decay, beta) do not depend on the state, so they are
// computed for every token up front into shared memory, while the tile loads are in flight; the
// loop over tokens then touches registers and shared memory only. A tree node's state is its
// parent's state plus its own update. In depth-first order the parent p of node i is the previous
// node or an ancestor of it. A leaf (no child follows it) is evaluated without overwriting the
// parent's state in registers, so its siblings start from it directly. Otherwise, when the parent
// is not the state held, the state after p is taken from a second copy R (in registers; in shared
// memory on sm_90), which holds the state after the last node seen that has a child beyond its
// first (a node whose subtree is being visited: for the usual speculation trees, a spine with
// several children per node, the parent whenever one is needed), or else rebuilt from the
// committed tile (read again from the pool) by replaying the path root..p with the stored per-node
// decay and delta:
// S = fma(kn_a, delta_a, S * d_a) - the step's own two roundings, with the very operands the step
// used, so the replayed state is bit-identical to the stepped one (a node's state has the same bits
// however it is reached, so R is too). A per-warp array holds the current path (the last node
// visited at each depth). Per node, the new state, the output sum and the next node's u sum (when
// the next node is its child, or a leaf's sibling) are formed in one pass over the rows, in
// straight-line code (one shape per case), with S * d and kn of a node formed or read once.
//
// Prologue: a launch at small batch is one chain of dependent latencies per CTA, so every load
// that does not depend on another is issued before anything waits for one. Right after pdl_wait()
// go out together: the index elements (slot, length, accepted: spread over lanes, broadcast by
// shuffles afterwards), the tree parents and the earlier sequences' slots (one per thread), and
// round 0 of the token staging (k and q chunks, the v chunks of our columns, the gates; all T
// tokens whatever the length); the state tile's 32 loads go out as soon as the slot is known. A
// staging round loads raw bits into registers and only then converts and stores them to shared
// memory, so it costs one memory latency instead of one per chunk (in a loop of load-then-store
// each load waits for the previous stores: the compiler does not move a global load above a
// shared-memory store). These loads are unconditional and of fixed width ("loads" below says why).
// Rounds are sized so that the usual launch stages in one (chain: 16 tokens, tree: 32 nodes).
// Issued later: a commit's tree path (which tokens depends on the parents) and, with the commit
// folded into a verify, the verify's tokens (issued before the pending tokens are replayed: in
// flight during the replay).
//
// Checked without a GPU: tests/native/gdn_host_emulation.cpp compiles this file for the host and
// runs it against the reference (tests/test_gdn.py, test_host_emulation_*).
//
// Commit: replays the accepted tokens (chain prefix, or the tree path root..accepted) with the full
// step arithmetic (u and delta recomputed from the verify's k, v, g, beta) and stores the tile.
//
// Transcendentals are evaluated in double and rounded once to fp32, as the reference does: exp for
// the decay; sigmoid, softplus (log1p(exp)) and exp(A_log) for the raw gates. CUDA's double exp and
// log1p are within 1-2 ulp of the exact value, as is the CPU's; the fp32 rounding of two such
// doubles can differ only when the exact value lies within ~2^-52 relative of an fp32 rounding
// boundary (about 1 value in 2^28 for a uniformly placed value), far below anything a test sees.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "common/pdl.cuh"
#include "gdn/gdn_launch.h"

namespace qwen38::gdn {

constexpr int kThreads = 128;                 // 4 warps
constexpr int kWarps = kThreads / 32;
constexpr int kCols = 32;                     // thread columns per CTA (lcol below); times
                                              // cols_per_thread V columns
constexpr int kSegs = 4;                      // K_SPLIT of the contract
constexpr int kSegLen = kHeadK / kSegs;       // 32 rows per segment
constexpr int kSegPad = kSegLen + 4;          // a staged segment's smem stride: segments start 16-byte
                                              // aligned (read as 8 16-byte words), the 4 segments of
                                              // a vector in 4 different 4-bank groups (conflict-free)
constexpr int kVecFloats = kSegs * kSegPad;   // 144 floats per staged k or q vector
constexpr int kPathLen = kMaxTreeNodes + 1;   // per-warp path, index = depth (0: the committed state)
constexpr float kL2Eps = 1e-6f;               // reference L2_EPS, as fp32
constexpr float kSoftplusThreshold = 20.f;    // torch softplus threshold (overflow-safe)

static_assert(kThreads == kSegs * kCols, "one thread per (segment, column)");
static_assert(kSegLen == 32 && kSegs == 4 && kWarps == 4, "the lane mapping below assumes 32-row segments, 4 warps");

// V columns a thread holds: two adjacent ones in the chain verify (with or without a folded commit),
// one elsewhere. A thread reads each token's kn and qn (its segment: 2 x 32 floats) from shared
// memory, and at B = 1 that traffic is what the chain's token costs on the busiest SMs (two CTAs of
// 4 warps: ~630 shared-memory wavefronts a token in ~740 cycles, ncu_gdn_counters_s25.txt); with
// two columns each value read serves two columns (H200, bench_gdn --quick, same call: chain 4 / 16
// 5.08 / 9.50 -> 4.82 / 8.70 us; ~160 registers, 96 CTAs of 4 warps at B = 1, at most one an SM).
// The tree keeps one: its split launch at B = 1 is 384 CTAs, ~3 an SM, and a node is bound by each
// warp's own latency, so fewer, longer warps lose (two columns a thread in 64-thread CTAs, the same
// CTAs an SM: tree 8 / 32 7.83 / 19.1 -> 8.57 / 20.6 us, gdn_s30_tree_ab.md). The step and the commit
// keep one too (a token or a few per launch). Columns are independent: no bit changes.
__host__ __device__ constexpr int cols_per_thread(Mode m) { return m == Mode::kChain ? 2 : 1; }
__host__ __device__ constexpr int block_cols(Mode m) { return kCols * cols_per_thread(m); }  // V columns a CTA
__host__ __device__ constexpr int col_blocks(Mode m) { return kHeadV / block_cols(m); }      // CTAs per head

// ---- shared memory layout ----------------------------------------------------------------------
// [(kTree on sm_90) R: kThreads x kSegLen][x: N x kinds x kVecFloats][vd: N x block_cols][dec: N][bet: N]
// [par: T][depth: T][order: T][vlist: T][path: kWarps x kPathLen][info: 4][tdA, tdB: T each] (floats,
// then ints). No copy of the state tile: a tree rebuild from the committed state reads it from the
// pool again. (GB10 holds ~100 KB of shared memory an SM: with a 16 KB copy the 32-node tree CTA
// took 59 KB, 1 CTA an SM, so B = 1's 192 CTAs ran in 4 waves on 48 SMs; at 42 KB, 2 an SM and 2
// waves.)
__host__ __device__ constexpr int staged_kinds(Mode m) { return m == Mode::kCommit ? 1 : 2; }
__host__ __device__ constexpr int staged_capacity(Mode m, int tokens) { return m == Mode::kStep ? 1 : tokens; }
__host__ __device__ constexpr size_t smem_floats(Mode m, int tokens) {
  return size_t(staged_capacity(m, tokens)) * (staged_kinds(m) * kVecFloats + block_cols(m) + 2);
}
__host__ __device__ constexpr size_t smem_ints(int tokens) { return size_t(6) * tokens + kWarps * kPathLen + 4; }
// (kTree) the second state copy R in shared memory instead of registers (tree_r_smem below): one
// thread's 32 floats, at the start of the block's shared memory.
__host__ __device__ constexpr size_t smem_r_floats(Mode m, bool r_smem) {
  return m == Mode::kTree && r_smem ? size_t(kThreads) * kSegLen : 0;
}
__host__ __device__ constexpr size_t smem_total(Mode m, int tokens, bool r_smem = false) {
  return (smem_r_floats(m, r_smem) + smem_floats(m, tokens)) * sizeof(float) + smem_ints(tokens) * sizeof(int);
}
// The largest launch (tree, 64 nodes) fits the 99 KB (101,376 B) a block may use on sm_121a (which
// keeps R in registers).
static_assert(smem_total(Mode::kTree, kMaxTreeNodes, false) <= 99 * 1024, "tree smem over 99 KB");
// Staged vectors and their segments start 16-byte aligned (smem_raw is).
static_assert(kSegPad % 4 == 0 && kVecFloats % 4 == 0, "16-byte segments");

// ---- loads -------------------------------------------------------------------------------------
// Loads whose values are used later come in two halves: the load of the raw bits (nothing waits for
// it) and the conversion (which waits). Issuing every load of a phase before the first conversion
// makes the phase cost one memory latency instead of one per load. For that the loads of a phase
// are unconditional and of a width fixed at compile time: a load under a condition, or one of two
// loads of different widths, leaves a value that the compiler may merge with a register move, and
// the move waits for the load (an index or a dtype known only at run time selects an address).
__device__ __forceinline__ int64_t load_index(const void* ptr, bool is64, int64_t i) {
  return is64 ? static_cast<const int64_t*>(ptr)[i] : int64_t(static_cast<const int32_t*>(ptr)[i]);
}
// Element i of an int32 or int64 index array from its two 32-bit words (lo, and hi: the high word of
// an int64, ignored for an int32: the load reads lo again).
__device__ __forceinline__ uint32_t load_index_word(const void* ptr, bool is64, int64_t i, bool hi) {
  return static_cast<const uint32_t*>(ptr)[is64 ? 2 * i + (hi ? 1 : 0) : i];
}
__device__ __forceinline__ int64_t index_of(uint32_t lo, uint32_t hi, bool is64) {
  return is64 ? int64_t(uint64_t(hi) << 32 | lo) : int64_t(int32_t(lo));
}

// A float element of any dtype as its raw bits, four 16-bit loads (those past the element's size
// read its first half again); float_of widens them to fp32 (fp64 rounded once: the reference's
// .to(float32)).
struct FloatBits {
  uint16_t h[4];
};
__host__ __device__ constexpr int dtype_bytes(DType dt) { return dt == DType::kF64 ? 8 : dt == DType::kF32 ? 4 : 2; }
__device__ __forceinline__ FloatBits load_float_bits(const void* ptr, DType dt, int64_t i) {
  const int nb = dtype_bytes(dt);
  const unsigned char* e = static_cast<const unsigned char*>(ptr) + i * nb;
  FloatBits x;
#pragma unroll
  for (int k = 0; k < 4; ++k) x.h[k] = *reinterpret_cast<const uint16_t*>(e + (2 * k < nb ? 2 * k : 0));
  return x;
}
__device__ __forceinline__ float float_of(FloatBits x, DType dt) {
  const uint64_t w = uint64_t(x.h[0]) | uint64_t(x.h[1]) << 16 | uint64_t(x.h[2]) << 32 | uint64_t(x.h[3]) << 48;
  switch (dt) {
    case DType::kBF16: return __bfloat162float(__ushort_as_bfloat16(x.h[0]));
    case DType::kF16: return __half2float(__ushort_as_half(x.h[0]));
    case DType::kF32: {
      const uint32_t lo = uint32_t(w);
      float f;
      memcpy(&f, &lo, sizeof f);
      return f;
    }
    default: {
      double d;
      memcpy(&d, &w, sizeof d);
      return __double2float_rn(d);
    }
  }
}

// fp32 -> dtype -> fp32 (the reference's rounding of beta to b's dtype).
__device__ __forceinline__ float round_through(float x, DType dt) {
  if (dt == DType::kBF16) return __bfloat162float(__float2bfloat16_rn(x));
  if (dt == DType::kF16) return __half2float(__float2half_rn(x));
  return x;
}

template <typename T> __device__ __forceinline__ float to_f(T x);
template <> __device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
template <> __device__ __forceinline__ float to_f<__half>(__half x) { return __half2float(x); }

template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }

// 8 consecutive 16-bit elements as fp32: one 16-byte load when `vec` (the host checked alignment).
// (The staging path for inputs not aligned to 16 bytes: each load waits before the next.)
template <typename T>
__device__ __forceinline__ void load8(const T* src, bool vec, float (&out)[8]) {
  if (vec) {
    const uint4 w = __ldg(reinterpret_cast<const uint4*>(src));
    const T* e = reinterpret_cast<const T*>(&w);
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = to_f<T>(e[i]);
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = to_f<T>(src[i]);
  }
}
// The raw bits of 8 consecutive 16-bit elements that start 16-byte aligned (element e in bits
// 16e..16e+15), and the same as fp32.
template <typename T>
__device__ __forceinline__ uint4 load8_bits(const T* src) { return __ldg(reinterpret_cast<const uint4*>(src)); }
template <typename T>
__device__ __forceinline__ void floats8_of(const uint4& w, float (&out)[8]) {
  const T* e = reinterpret_cast<const T*>(&w);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = to_f<T>(e[i]);
}

// ---- the contract's arithmetic (IEEE round-to-nearest intrinsics: nvcc never contracts these) --
__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float fma_rn(float a, float b, float c) { return __fmaf_rn(a, b, c); }  // a * b + c, one rounding
__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float sub(float a, float b) { return __fsub_rn(a, b); }

// N (a multiple of 4) consecutive floats of shared memory that start 16-byte aligned, moved as
// N / 4 16-byte words (a staged segment: kSegPad).
template <int N>
__device__ __forceinline__ void lds_floats(const float* src, float (&dst)[N]) {
  static_assert(N % 4 == 0, "whole 16-byte words");
#pragma unroll
  for (int m = 0; m < N / 4; ++m) {
    const float4 w = reinterpret_cast<const float4*>(src)[m];
    dst[4 * m] = w.x;
    dst[4 * m + 1] = w.y;
    dst[4 * m + 2] = w.z;
    dst[4 * m + 3] = w.w;
  }
}
template <int N>
__device__ __forceinline__ void sts_floats(float* dst, const float (&src)[N]) {
  static_assert(N % 4 == 0, "whole 16-byte words");
#pragma unroll
  for (int m = 0; m < N / 4; ++m)
    reinterpret_cast<float4*>(dst)[m] = make_float4(src[4 * m], src[4 * m + 1], src[4 * m + 2], src[4 * m + 3]);
}

// (p0 + p1) + (p2 + p3) over the 4 segment lanes of a column (lanes 4c..4c+3), in every one of them.
// kOneLevel: lane s reads the other three partials at once (one shuffle latency, not two dependent
// ones: the verifies, whose per-token dependent chain this sum closes) and adds its own pair and the
// other pair; else two xor steps (the step kernel: two registers fewer, where its 80-register cap
// would spill). Addition is commutative, so every lane's sum has the bits of (p0 + p1) + (p2 + p3)
// either way.
template <bool kOneLevel>
__device__ __forceinline__ float combine_segments(float p) {
  if constexpr (kOneLevel) {
    const float p1 = __shfl_xor_sync(0xffffffffu, p, 1);
    const float p2 = __shfl_xor_sync(0xffffffffu, p, 2);
    const float p3 = __shfl_xor_sync(0xffffffffu, p, 3);
    return add(add(p, p1), add(p2, p3));
  } else {
    p = add(p, __shfl_xor_sync(0xffffffffu, p, 1));
    return add(p, __shfl_xor_sync(0xffffffffu, p, 2));
  }
}

// decay = round_fp32(exp_f64(g))
__device__ __forceinline__ float decay_of(float g) { return __double2float_rn(exp(double(g))); }

// The raw gates of reference.gdn_gates: beta = round(b.dtype, round_fp32(sigmoid_f64(b)));
// g = -(round_fp32(exp_f64(A_log)) * sp), sp = x if x > 20 else round_fp32(log1p(exp(x))), x = a + dt_bias.
// bits: the raw elements b, a, dt_bias, A_log of this sequence and head (load_float_bits).
__device__ __forceinline__ void raw_gates(const Params& p, const FloatBits (&bits)[4], float* g_out, float* beta_out) {
  const float bv = float_of(bits[0], p.b_dt);
  const float s32 = __double2float_rn(1.0 / (1.0 + exp(-double(bv))));
  *beta_out = round_through(s32, p.b_dt);
  const float x = add(float_of(bits[1], p.a_dt), float_of(bits[2], p.dtb_dt));
  const float sp = x > kSoftplusThreshold ? x : __double2float_rn(log1p(exp(double(x))));
  const float A = __double2float_rn(exp(double(float_of(bits[3], p.alog_dt))));
  *g_out = -mul(A, sp);
}

// ---- the kernel --------------------------------------------------------------------------------
// Where one batch of tokens comes from: the call's own tensors, or (the commit folded into a
// verify) the pending commit's k, v, g, beta and parents.
struct TokenSrc {
  const void* q;
  const void* k;
  const void* v;
  int64_t q_sb, q_st, q_sh, k_sb, k_st, k_sh, v_sb, v_st, v_sh;
  const float* g;
  const void* beta;
  int64_t g_sb, g_st, beta_sb, beta_st;
  DType beta_dt;
  bool qk16, v16;
  const void* parents;
  bool parents64;
  int tokens;
};

__device__ __forceinline__ TokenSrc main_tokens(const Params& p, int tokens) {
  return TokenSrc{p.q, p.k, p.v, p.q_sb, p.q_st, p.q_sh, p.k_sb, p.k_st, p.k_sh, p.v_sb, p.v_st, p.v_sh,
                  p.g, p.beta, p.g_sb, p.g_st, p.beta_sb, p.beta_st, p.beta_dt, p.qk16, p.v16,
                  p.parents, p.parents64, tokens};
}

__device__ __forceinline__ TokenSrc pending_tokens(const Params& p) {
  return TokenSrc{nullptr, p.c_k, p.c_v, 0, 0, 0, p.c_k_sb, p.c_k_st, p.c_k_sh, p.c_v_sb, p.c_v_st, p.c_v_sh,
                  p.c_g, p.c_beta, p.c_g_sb, p.c_g_st, p.c_beta_sb, p.c_beta_st, p.c_beta_dt, p.c_k16, p.c_v16,
                  p.c_parents, p.c_parents64, p.c_tokens};
}

// One round of a thread's staging loads as raw bits (see "staging" in the kernel): k/q chunks
// tid + kThreads * (XB * round + m), v chunks tid + kThreads * (VB * round + m), and in round 0 the
// gate elements of token tid (g and beta; the raw gates: b, a, dt_bias, A_log).
template <int XB, int VB> struct StageLoads {
  uint4 x[XB];
  uint4 v[VB];
  float g;
  FloatBits beta, raw[4];
};

template <Mode M> struct ModeTag { static constexpr Mode value = M; };
template <bool B> struct BoolTag { static constexpr bool value = B; };
template <int I> struct IntTag { static constexpr int value = I; };

// CIV: the pending commit (Params c_*) is replayed into the tile, the tile stored, then the verify
// runs from it: one state read and one write per round instead of a commit's read + write and the
// verify's read. Only with MODE kChain or kTree.
// (Launch bounds with a minimum of 1 CTA per SM: without it ptxas for sm_121a held the bf16 tree
// kernel to 128 registers and spilled; with it no instantiation spills on sm_90a or sm_121a.
// The step: 6 CTAs an SM on sm_90 (80 registers, no spills; 96 at the free choice, 5 an SM): B = 8
// is 1536 CTAs, 2.3 waves of 5 on 132 SMs, 1.9 of 6; B = 4 is 768, one wave of 6. sm_100 and later
// (sm_121a) keep 5: at 6, sm_121a's 80 registers spill; a launch detail, no bit changes.)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
#define QWEN38_GDN_STEP_MIN_BLOCKS 5
#else
#define QWEN38_GDN_STEP_MIN_BLOCKS 6
#endif
// The tree's second state copy R (the state after the last node with a later child) lives in shared
// memory on sm_90 and in the host emulation, freeing the 32 registers that hold S * d_i (D below:
// the tree then forms S * d once a node, as the chain does); sm_100 and later (sm_121a: 99 KB a
// block, the 64-node tree's 85 KB plus 16 KB would not fit) keep R in registers and S undecayed.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
#define QWEN38_GDN_TREE_R_SMEM 0
#else
#define QWEN38_GDN_TREE_R_SMEM 1
#endif
template <Mode MODE, typename T, bool RAW, bool CIV>
__global__ void __launch_bounds__(kThreads, MODE == Mode::kStep                             ? QWEN38_GDN_STEP_MIN_BLOCKS
                                            : MODE == Mode::kTree && QWEN38_GDN_TREE_R_SMEM ? 3
                                                                                             : 1)
    gdn_kernel(const Params p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  constexpr bool kVerify = MODE == Mode::kChain || MODE == Mode::kTree;
  constexpr bool kWrites = MODE == Mode::kStep || MODE == Mode::kCommit || CIV;
  constexpr int kKinds = staged_kinds(MODE);  // layout: k and q slots per staged token
  static_assert(!CIV || kVerify, "the commit folds into a verify only");
  // Staging rounds (see "staging" below): k/q and v chunks a thread loads per round, sized so that
  // the usual launch stages in one round (step: 1 token; chain: 16; tree: 32 nodes; commit: 32).
  constexpr int kXB = MODE == Mode::kStep ? 1 : MODE == Mode::kTree ? 8 : 4;
  constexpr int kVB = 1;
  using Loads = StageLoads<kXB, kVB>;
  // Vectors a 4-lane group normalizes at once (see "l2 norms" below): one round for the usual
  // launch (32 groups; chain 16: 32 vectors; tree 32: 64; commit 32: 32).
  constexpr int kNormV = MODE == Mode::kTree ? 2 : 1;
  constexpr bool kOneLevel = MODE != Mode::kStep;  // combine_segments' form (the same bits)
  constexpr int kC = cols_per_thread(MODE);   // V columns a thread holds (adjacent)
  constexpr int kBC = block_cols(MODE);       // V columns a CTA holds
  constexpr int kCB = col_blocks(MODE);       // CTAs per head (per run of a split tree)
  constexpr int kVC = kBC / 8;                // 8-element v chunks a token
  constexpr int kVShift = kC == 2 ? 3 : 2;    // log2(kVC)
  static_assert(kVC == 1 << kVShift, "v chunks a token");
  static_assert(kC == 1 || MODE != Mode::kTree, "the tree holds one column a thread");

  // (kTree) the split: this CTA verifies run `part` of `splits` (blockIdx.x = part * kCB + cb;
  // p.splits as the launcher resolved it, 1..kMaxSplits)
  const int splits = MODE == Mode::kTree && !CIV ? p.splits : 1;
  const int part = MODE == Mode::kTree && !CIV ? int(blockIdx.x) / kCB : 0;
  const int cb = int(blockIdx.x) % kCB, h = blockIdx.y, b = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int seg = lane & 3;
  const int lcol = warp * 8 + (lane >> 2);   // this thread's column slot within the block, 0..31
  const int col = cb * kBC + kC * lcol;      // its first V column within the head (kC of them)
  const int hq = h / (kVHeads / kQKHeads);   // q/k head of v head h
  const int T_ = MODE == Mode::kStep ? 1 : p.tokens;
  const int Tc = CIV ? p.c_tokens : 0;       // the pending commit's tokens
  const int Tm = T_ > Tc ? T_ : Tc;          // sizes the staging and index arrays
  const int N = staged_capacity(MODE, Tm);

  constexpr bool kRSmem = MODE == Mode::kTree && QWEN38_GDN_TREE_R_SMEM;
  float* rsm = reinterpret_cast<float*>(smem_raw);  // (kRSmem) R: float4 q of thread t at rsm[4 (q kThreads + t)]
  float* xs = rsm + smem_r_floats(MODE, kRSmem);
  float* vd = xs + size_t(N) * kKinds * kVecFloats;
  float* dec = vd + size_t(N) * kBC;
  float* bet = dec + N;
  int* par = reinterpret_cast<int*>(bet + N);
  int* depth = par + Tm;
  int* order = depth + Tm;
  int* later = order;  // a verify tree's later[] (tree_structure); order[] is a commit's
  int* vlist = order + Tm;  // (kTree) the nodes this CTA runs, in order (see "split")
  int* path = vlist + Tm;
  int* info = path + kWarps * kPathLen;
  int* tdA = info + 4;  // (kTree) the two control words of each position of vlist (tree_desc)
  int* tdB = tdA + Tm;

  // ---- tree structure: validation, depths, the accepted path ----
  // Depth-first pre-order holds iff every node's parent p is -1 or an ancestor-or-self of the node
  // before it (the current path is exactly that node's ancestor chain). Each thread checks its
  // nodes by walking up from node i - 1 while above p, and counts node i's ancestors (its depth);
  // both walks follow parent links that strictly decrease, so they end even on invalid input.
  // (plo, phi): parents[b, tid] as loaded by the caller (load_index_word; Tp <= kThreads).
  // Verify (as_path false): returns the number of leading valid nodes among the first m (the host
  // has validated them all unless it could not look), and sets later[p] when a node i > p + 1
  // (i < m, valid or not: a hint) names p as its parent. Commit (as_path): returns the accepted
  // path's length (its nodes in order[]), or -1 when any of the Tp parents is invalid (nothing is
  // written).
  // Contains block barriers: every thread calls it.
  static_assert(kMaxTreeNodes <= kThreads, "one parent per thread");
  auto tree_structure = [&](uint32_t plo, uint32_t phi, bool parents64, int Tp, int m, bool as_path, int64_t accp) {
    if (tid < Tp) {
      const int64_t v = index_of(plo, phi, parents64);
      par[tid] = v < -1 || v >= Tp ? -2 : int(v);  // -2: invalid whatever tid is
    }
    if (tid == 0) info[0] = Tp;  // the first invalid node (Tp: none)
    if (!as_path && tid < Tp) later[tid] = 0;
    __syncthreads();
    for (int i = tid; i < m; i += kThreads) {
      const int pa = par[i];
      bool ok = pa >= -1 && pa < i;
      if (ok && pa >= 0) {
        int x = i - 1;
        while (x > pa) {
          const int up = par[x];
          if (up < -1 || up >= x) break;
          x = up;
        }
        ok = x == pa;
      }
      int d = 0;
      for (int x = i; ok && x >= 0; ++d) {
        const int up = par[x];
        if (up < -1 || up >= x) ok = false;
        x = up;
      }
      depth[i] = d;
      if (!ok) atomicMin(&info[0], i);
      if (!as_path && pa >= 0 && pa + 2 <= i) later[pa] = 1;  // (every writer stores the same value)
    }
    __syncthreads();
    const int valid = info[0];
    if (!as_path) return valid < m ? valid : m;
    if (tid == 0) {  // the path root..accp, in order (none unless the whole tree is valid)
      const int cnt = valid == Tp ? (accp >= 0 ? depth[accp] : 0) : -1;
      int x = int(accp);
      for (int j = cnt - 1; j >= 0; --j, x = par[x]) order[j] = x;
      info[1] = cnt;
    }
    __syncthreads();
    return info[1];
  };

  // ---- staging: k (and q) as fp32, v of our columns, decay and beta of nt tokens ----
  // k/q: nt * kinds vectors of 16 chunks of 8 elements (chunk w: vector w / 16, whose token is
  // vector / kinds; chunk c = w % 16 -> segment c / 4, offset 8 (c % 4)); v[b, t, h, the block's columns]:
  // kVC chunks per token (4 or 8); decay and beta: thread j for token j (nt <= 64 <= kThreads). Thread tid
  // takes chunks tid, tid + 128, ... in rounds of kXB k/q chunks and kVB v chunks (the gates in
  // round 0). A round issues all of its loads into registers (stage_issue), then converts and
  // stores them (stage_store): one memory latency per round (a load followed by its stores, in a
  // loop, waits once per chunk: the compiler does not move a load above the previous chunk's
  // shared-memory stores). The loads of a round are unconditional (a thread past the last chunk
  // or token reads the last one again; only the stores are conditional). The usual launch is one
  // round; a caller may issue round 0 early. Inputs not 16-byte aligned take the plain loop
  // (stage_plain: a load, then its stores). use_order: the j-th staged token is order[j] of src
  // (a commit's path), else token j.
  auto staged_token = [&](bool use_order, int j) { return use_order ? order[j] : j; };
  auto gate_at = [&](const TokenSrc& src, int t) { return int64_t(b) * src.g_sb + int64_t(t) * src.g_st + h; };
  auto beta_at = [&](const TokenSrc& src, int t) { return int64_t(b) * src.beta_sb + int64_t(t) * src.beta_st + h; };
  // the gate elements of token t (raw projections, or g and beta) into L, as raw bits
  auto load_gates = [&](const TokenSrc& src, int t, bool raw, Loads& L) {
    if (RAW && raw) {
      L.raw[0] = load_float_bits(p.b, p.b_dt, int64_t(b) * p.b_sb + h);
      L.raw[1] = load_float_bits(p.a, p.a_dt, int64_t(b) * p.a_sb + h);
      L.raw[2] = load_float_bits(p.dt_bias, p.dtb_dt, h);
      L.raw[3] = load_float_bits(p.A_log, p.alog_dt, h);
    } else {
      L.g = src.g[gate_at(src, t)];
      L.beta = load_float_bits(src.beta, src.beta_dt, beta_at(src, t));
    }
  };
  auto stage_issue = [&](const TokenSrc& src, int nt, bool with_q, bool use_order, bool raw, int rd) {
    Loads L;
    // k[b, t, hq, :] = kr + t * k_st (q alike), v[b, t, h, cb*kBC ..] = vr + t * v_st
    const T* kr = static_cast<const T*>(src.k) + int64_t(b) * src.k_sb + int64_t(hq) * src.k_sh;
    const T* qr = with_q ? static_cast<const T*>(src.q) + int64_t(b) * src.q_sb + int64_t(hq) * src.q_sh : kr;
    const T* vr = static_cast<const T*>(src.v) + int64_t(b) * src.v_sb + int64_t(h) * src.v_sh + cb * kBC;
    const int chunks = nt * (with_q ? 2 : 1) * 16;
#pragma unroll
    for (int m = 0; m < kXB; ++m) {
      int w = tid + kThreads * (kXB * rd + m);
      w = w < chunks ? w : chunks - 1;
      const int vec = w >> 4, c = w & 15;
      const int j = with_q ? vec >> 1 : vec, kind = with_q ? vec & 1 : 0;
      const int t = staged_token(use_order, j);
      L.x[m] = load8_bits<T>((kind == 0 ? kr : qr) + int64_t(t) * (kind == 0 ? src.k_st : src.q_st) + 8 * c);
    }
#pragma unroll
    for (int m = 0; m < kVB; ++m) {
      int w = tid + kThreads * (kVB * rd + m);
      w = w < nt * kVC ? w : nt * kVC - 1;
      L.v[m] = load8_bits<T>(vr + int64_t(staged_token(use_order, w >> kVShift)) * src.v_st + 8 * (w & (kVC - 1)));
    }
    if (rd == 0) {
      const int t = staged_token(use_order, tid < nt ? tid : nt - 1);
      load_gates(src, t, raw, L);
    }
    return L;
  };
  // decay and beta of the thread's token (tid < nt) from the loaded gate elements
  auto store_gates = [&](const TokenSrc& src, const Loads& L, bool raw) {
    float g, bt;
    if (RAW && raw) {
      raw_gates(p, L.raw, &g, &bt);
    } else {
      g = L.g;
      bt = float_of(L.beta, src.beta_dt);
    }
    dec[tid] = decay_of(g);
    bet[tid] = bt;
  };
  auto stage_store = [&](const TokenSrc& src, const Loads& L, int nt, bool with_q, bool raw, int rd) {
    const int chunks = nt * (with_q ? 2 : 1) * 16;
#pragma unroll
    for (int m = 0; m < kXB; ++m) {
      const int w = tid + kThreads * (kXB * rd + m);
      if (w < chunks) {
        const int vec = w >> 4, c = w & 15;
        const int j = with_q ? vec >> 1 : vec, kind = with_q ? vec & 1 : 0;
        float e[8];
        floats8_of<T>(L.x[m], e);
        sts_floats(xs + (size_t(j) * kKinds + kind) * kVecFloats + (c >> 2) * kSegPad + 8 * (c & 3), e);
      }
    }
#pragma unroll
    for (int m = 0; m < kVB; ++m) {
      const int w = tid + kThreads * (kVB * rd + m);
      if (w < nt * kVC) {
        const int j = w >> kVShift, c = w & (kVC - 1);
        float e[8];
        floats8_of<T>(L.v[m], e);
#pragma unroll
        for (int i = 0; i < 8; ++i) vd[j * kBC + 8 * c + i] = e[i];
      }
    }
    if (rd == 0 && tid < nt) store_gates(src, L, raw);
  };
  auto stage_plain = [&](const TokenSrc& src, int nt, bool with_q, bool use_order, bool raw) {
    const T* qg = static_cast<const T*>(src.q);
    const T* kg = static_cast<const T*>(src.k);
    const T* vg = static_cast<const T*>(src.v);
    const int kinds = with_q ? 2 : 1;
    for (int w = tid; w < nt * kinds * 16; w += kThreads) {
      const int vec = w >> 4, c = w & 15;
      const int j = vec / kinds, kind = vec % kinds;
      const int t = staged_token(use_order, j);
      const T* s = kind == 0 ? kg + int64_t(b) * src.k_sb + int64_t(t) * src.k_st + int64_t(hq) * src.k_sh
                             : qg + int64_t(b) * src.q_sb + int64_t(t) * src.q_st + int64_t(hq) * src.q_sh;
      float e[8];
      load8<T>(s + 8 * c, src.qk16, e);
      sts_floats(xs + (size_t(j) * kKinds + kind) * kVecFloats + (c >> 2) * kSegPad + 8 * (c & 3), e);
    }
    for (int w = tid; w < nt * kVC; w += kThreads) {
      const int j = w >> kVShift, c = w & (kVC - 1);
      const int t = staged_token(use_order, j);
      float e[8];
      load8<T>(vg + int64_t(b) * src.v_sb + int64_t(t) * src.v_st + int64_t(h) * src.v_sh + cb * kBC + 8 * c,
               src.v16, e);
#pragma unroll
      for (int i = 0; i < 8; ++i) vd[j * kBC + 8 * c + i] = e[i];
    }
    if (tid < nt) {
      Loads L;
      const int t = staged_token(use_order, tid);
      load_gates(src, t, raw, L);
      store_gates(src, L, raw);
    }
  };
  // The rounds from `first` on (round 0 issued early is stored by the caller; 16-byte aligned inputs).
  auto stage = [&](const TokenSrc& src, int nt, bool with_q, bool use_order, bool raw, int first) {
    if (!(src.qk16 && src.v16)) {
      stage_plain(src, nt, with_q, use_order, raw);
      return;
    }
    const int rx = (nt * (with_q ? 2 : 1) * 16 + kXB * kThreads - 1) / (kXB * kThreads);
    const int rv = (nt * kVC + kVB * kThreads - 1) / (kVB * kThreads);
    for (int rd = first; rd < (rx > rv ? rx : rv); ++rd) {
      const Loads L = stage_issue(src, nt, with_q, use_order, raw, rd);
      stage_store(src, L, nt, with_q, raw, rd);
    }
  };

  // ---- l2 norms in place: a group of 4 lanes (one per segment) per vector; a group takes kNormV
  // vectors a round (32 * kNormV vectors a round), their sums interleaved ----
  auto normalize = [&](int nt, bool with_q) {
    const int nvec = nt * (with_q ? 2 : 1);
    const int group = tid >> 2;
    constexpr int kGroups = kThreads / kSegs;
    for (int base = 0; base < nvec; base += kGroups * kNormV) {  // same trip count for every lane
      float* xv[kNormV];
      bool on[kNormV], isq[kNormV];
#pragma unroll
      for (int u = 0; u < kNormV; ++u) {
        const int vec = base + u * kGroups + group;
        on[u] = vec < nvec;
        isq[u] = with_q && (vec & 1) != 0;
        const int j = with_q ? vec >> 1 : vec;
        xv[u] = xs + (on[u] ? size_t(j) * kKinds + (isq[u] ? 1 : 0) : 0) * kVecFloats + seg * kSegPad;
      }
      float xr[kNormV][kSegLen], ss[kNormV];
#pragma unroll
      for (int u = 0; u < kNormV; ++u) lds_floats(xv[u], xr[u]);
#pragma unroll
      for (int u = 0; u < kNormV; ++u) ss[u] = mul(xr[u][0], xr[u][0]);
#pragma unroll
      for (int r = 1; r < kSegLen; ++r)
#pragma unroll
        for (int u = 0; u < kNormV; ++u) ss[u] = fma_rn(xr[u][r], xr[u][r], ss[u]);
#pragma unroll
      for (int u = 0; u < kNormV; ++u) ss[u] = combine_segments<kOneLevel>(ss[u]);
#pragma unroll
      for (int u = 0; u < kNormV; ++u) {
        const float rn = __fdiv_rn(1.f, __fsqrt_rn(add(ss[u], kL2Eps)));
        if (on[u]) {
          float y[kSegLen];
#pragma unroll
          for (int r = 0; r < kSegLen; ++r) y[r] = isq[u] ? mul(mul(xr[u][r], rn), p.scale) : mul(xr[u][r], rn);
          sts_floats(xv[u], y);
        }
      }
    }
  };

#if defined(__CUDA_ARCH__)
  // At B = 1 (gridDim.z = 1) the state tile is prefetched into L2 before pdl_wait(), at the slot the
  // index array holds now: the slot is read again after the wait, and the tile's own loads then find
  // its lines in L2 or on their way. The early read is only a hint (it may race with the previous
  // kernel's writes to the index array: its value steers a prefetch, nothing else; it goes to L2
  // only, ld.global.cg, so that no L1 line of it can answer the read after the wait), and a prefetch
  // changes nothing any load returns (L2 is where global memory is coherent): the data flow stays
  // stream order. Under PDL the two latencies (the index, then the tile) overlap the previous kernel
  // instead of following the wait. Thread 0 of CTA cb issues one bulk prefetch (the TMA unit's,
  // asynchronous) of rows [128 cb / kCB, 128 (cb + 1) / kCB) of the head's state: the head's CTAs
  // together cover the 64 KB their columns read. H200 (gdn_s31_tile_prefetch_ab.md), us: step
  // B = 1 4.35 -> 4.07, chain 1 / 16 3.64 / 8.00 -> 3.38 / 7.74, commit B = 1 5.50 -> 5.07, tree 8 /
  // 32 7.88 / 19.1 -> 7.79 / 19.0; but the step at B = 8 16.1 -> 16.5 (not profiled; likely: about
  // half of its 1536 CTAs start only after the previous kernel has ended, and their early read then
  // waits on the path), hence B = 1 only. One asm block with its own registers: in C++ the compiler
  // shared the index arithmetic with the kernel's, and the step's 80-register budget spilled (so did
  // a cvta.to.global here, and so did dropping the sequence index, 0 at B = 1, from the slot's
  // address; the pointers are used as global addresses as in the library's other asm loads).
#if __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n"
      " .reg .u32 bi, hi, ci, lo32;\n"
      " .reg .s64 g, a;\n"
      " .reg .u64 sp;\n"
      " .reg .pred p64, ok;\n"
      " .reg .u32 ti, nz;\n"
      " mov.u32 ti, %%tid.x;\n"
      " mov.u32 nz, %%nctaid.z;\n"
      " setp.ne.u32 ok, ti, 0;\n"
      " @!ok setp.ne.u32 ok, nz, 1;\n"
      " @ok bra PF_DONE_%=;\n"
      " mov.u32 bi, %%ctaid.z;\n"
      " mov.u32 hi, %%ctaid.y;\n"
      " mov.u32 ci, %%ctaid.x;\n"
      " setp.ne.u32 p64, %1, 0;\n"
      " @p64 mad.wide.u32 sp, bi, 8, %0;\n"
      " @!p64 mad.wide.u32 sp, bi, 4, %0;\n"
      " @p64 ld.global.cg.s64 g, [sp];\n"
      " @!p64 ld.global.cg.s32 lo32, [sp];\n"
      " @!p64 cvt.s64.s32 g, lo32;\n"
      " setp.ge.s64 ok, g, 0;\n"
      " @ok setp.lt.s64 ok, g, %3;\n"
      " @!ok bra PF_DONE_%=;\n"
      " rem.u32 ci, ci, %4;\n"
      " mad.lo.s64 a, g, %5, 0;\n"
      " mad.wide.u32 a, hi, %6, a;\n"
      " mad.wide.u32 a, ci, %7, a;\n"
      " add.s64 a, a, %2;\n"
      " cp.async.bulk.prefetch.L2.global [a], %7;\n"
      "PF_DONE_%=:\n"
      "}\n" ::"l"(p.slots),
      "r"(uint32_t(p.slots64 ? 1 : 0)), "l"(p.pool), "l"(p.pool_rows), "n"(col_blocks(MODE)),
      "n"(int64_t(kVHeads) * kHeadK * kHeadV * 4), "n"(kHeadK * kHeadV * 4),
      "n"(kHeadK * kHeadV * 4 / col_blocks(MODE))
      : "memory");
#endif
  // Every 64-byte line of the parameter block (0x210..0x3dc on sm_90a: 8 lines) read once before
  // pdl_wait(): the first read of a line is a constant-cache miss that stalls the warp (ncu: 6
  // serialized misses, ~5% of the chain-16 launch's samples, all after the wait); parameters are
  // never written by the previous kernel, so here their misses overlap its tail (H200, same call:
  // step B = 1 4.55 -> 4.32 us, chain 16 8.66 -> 8.49; gdn_s27_params_peel_quick.md). Without PDL
  // the reads sit on the path before the first loads (step B = 1 5.14 -> 5.34 us with QWEN38_PDL=0).
  // (A value made of one field of each line, stored to a shared word nothing reads:
  // without a use ptxas drops the reads.)
  {
    __shared__ uint32_t param_sink;
    // (the low words: 32-bit reads, nothing kept live for later)
    auto lo = [](const void* q) { return uint32_t(reinterpret_cast<uintptr_t>(q)); };
    const uint32_t x = lo(p.q) ^ lo(p.g) ^ lo(p.beta) ^ lo(p.pool) ^ lo(p.slots) ^ lo(p.c_beta) ^ lo(p.c_accepted) ^
                       lo(p.out);
    *static_cast<volatile uint32_t*>(&param_sink) = x;  // (every thread: the same value)
  }
#endif
  pdl_wait();   // inputs may come from the previous kernel
  pdl_allow();  // every CTA of this grid is resident or queued: let the next kernel queue

  // ---- the prologue's loads: issued together, before anything waits for one of them ----
  // The index elements, the tree parents and the earlier sequences' slots (one per thread), and
  // round 0 of the staging of the tokens that do not depend on a tree path (all T tokens: rows past
  // a length are staged and not used): their latencies overlap each other's and, once the slot is
  // known, the state tile's.
  const bool tree_commit = MODE == Mode::kCommit && p.parents != nullptr;
  const bool c_tree = CIV && p.c_parents != nullptr;
  const bool has_len = kVerify && p.lengths != nullptr;
  const TokenSrc src = main_tokens(p, T_);
  const TokenSrc pend = pending_tokens(p);  // (CIV)
  // Index elements: lane 2e + w (of each warp; lanes from 8 on repeat) loads word w of element e of
  // (slot, length, accepted, pending accepted), broadcast by shuffles once the staging loads are
  // out. (An element loaded by every lane alike is uniform, and the compiler may move it to a
  // uniform register at once: a move that waits for the load.)
  uint32_t iword;
  {
    const int e = (lane >> 1) & 3;
    const void* ip = p.slots;  // (an absent element: the slot again)
    bool i64 = p.slots64;
    if (e == 1 && has_len) {
      ip = p.lengths;
      i64 = p.lengths64;
    }
    if (e == 2 && MODE == Mode::kCommit) {
      ip = p.accepted;
      i64 = p.accepted64;
    }
    if (e == 3 && CIV) {
      ip = p.c_accepted;
      i64 = p.c_accepted64;
    }
    iword = load_index_word(ip, i64, b, (lane & 1) != 0);
  }
  // Tree parents: thread i < Tp loads parents[b, i] (the others the last one again).
  uint32_t par_lo = 0, par_hi = 0, c_par_lo = 0, c_par_hi = 0;
  if (MODE == Mode::kTree || MODE == Mode::kCommit) {
    const bool has = MODE == Mode::kTree || tree_commit;
    const void* pp = has ? p.parents : p.slots;
    const bool p64 = has ? p.parents64 : p.slots64;
    const int64_t i = has ? int64_t(b) * T_ + (tid < T_ ? tid : T_ - 1) : b;
    par_lo = load_index_word(pp, p64, i, false);
    par_hi = load_index_word(pp, p64, i, true);
  }
  if (CIV) {
    const void* pp = c_tree ? p.c_parents : p.slots;
    const bool p64 = c_tree ? p.c_parents64 : p.slots64;
    const int64_t i = c_tree ? int64_t(b) * Tc + (tid < Tc ? tid : Tc - 1) : b;
    c_par_lo = load_index_word(pp, p64, i, false);
    c_par_hi = load_index_word(pp, p64, i, true);
  }
  // Writers: slots[tid] for the repeated-slot check (thread tid < b; the others read slots[b]).
  uint32_t dup_lo = 0, dup_hi = 0;
  if (kWrites) {
    const int o = tid < b ? tid : b;
    dup_lo = load_index_word(p.slots, p.slots64, o, false);
    dup_hi = load_index_word(p.slots, p.slots64, o, true);
  }
  Loads L0, P0;  // round 0 of the main tokens' staging, of the pending commit's (CIV)
  bool l0 = false;
  if (!CIV && !tree_commit && src.qk16 && src.v16) {  // (CIV: issued just before the pending commit's replay)
    L0 = stage_issue(src, T_, MODE != Mode::kCommit, false, true, 0);
    l0 = true;
  }
  const bool p0 = CIV && !c_tree && pend.qk16 && pend.v16;
  if (p0) P0 = stage_issue(pend, Tc, false, false, false, 0);

  // ---- which pool row, how many tokens (every thread computes the same) ----
  auto index_elem = [&](int e, bool is64) {
    return index_of(__shfl_sync(0xffffffffu, iword, 2 * e), __shfl_sync(0xffffffffu, iword, 2 * e + 1), is64);
  };
  const int64_t slot = index_elem(0, p.slots64);
  bool live = slot >= 0 && slot < p.pool_rows;
  if (kWrites) {  // a slot repeated by an earlier sequence: only the first one writes (no race)
    bool dup = tid < b && index_of(dup_lo, dup_hi, p.slots64) == slot;
    for (int o = tid + kThreads; o < b; o += kThreads) dup |= load_index(p.slots, p.slots64, o) == slot;
    live = live && !__syncthreads_or(dup);
  }
  int n = T_;  // tokens (verify: rows) to run
  if (kVerify) {  // (the shuffles run with or without lengths: every thread takes the same branches)
    const int64_t len = index_elem(1, p.lengths64);
    if (has_len && (len < 0 || len > T_)) live = false;
    else if (has_len) n = int(len);
  }
  int64_t acc = 0;
  if (MODE == Mode::kCommit) {
    acc = index_elem(2, p.accepted64);
    if (tree_commit ? (acc < -1 || acc >= T_) : (acc < 0 || acc > T_)) live = false;
    else if (!tree_commit) n = int(acc);
  }
  int64_t c_acc = 0;
  int nc = 0;  // pending tokens to replay
  if (CIV) {
    c_acc = index_elem(3, p.c_accepted64);
    if (c_tree ? (c_acc < -1 || c_acc >= Tc) : (c_acc < 0 || c_acc > Tc)) live = false;
    else nc = c_tree ? Tc : int(c_acc);  // a tree: the path length, found below
  }

  // ---- the state tile: every load issued now, consumed after the token prologue ----
  float S[kC][kSegLen];  // S[c]: column col + c
  const float* tile = p.pool + (slot * kVHeads + h) * int64_t(kHeadK * kHeadV) +
                      int64_t(seg * kSegLen) * kHeadV + col;
  // Row r of the tile: a verify never writes the pool (read-only path); the others, and a verify
  // with the commit folded in, read it plain (the read-only path does not see this kernel's own
  // stores). Read again by a tree rebuild from the root: the tile then holds the committed state
  // (as loaded, or as this thread just stored it; only this CTA writes these elements: a repeated
  // slot's later sequences do not run).
  // (Two columns: one 8-byte load a row.)
  auto tile_ld = [&](const auto* q) { return kVerify && !CIV ? __ldg(q) : *q; };
  auto tile_row = [&](int r) { return tile_ld(tile + r * kHeadV); };
  if (live && (n > 0 || nc > 0)) {
#pragma unroll
    for (int r = 0; r < kSegLen; ++r) {
      if constexpr (kC == 2) {
        const float2 w = tile_ld(reinterpret_cast<const float2*>(tile + r * kHeadV));
        S[0][r] = w.x;
        S[1][r] = w.y;
      } else {
        S[0][r] = tile_row(r);
      }
    }
  }

  T* out = static_cast<T*>(p.out);
  auto out_at = [&](int i, int c) { return out + ((int64_t(b) * T_ + i) * kVHeads + h) * kHeadV + col + c; };
  T* const obase = out_at(0, 0);  // node i's outputs at obase + i kVHeads kHeadV + c

  // ---- (kTree) the node loop's control, for every position of vlist at once ----
  // Node i = vl[j] starts from the state of its parent pa. Before position j the registers hold
  // the state after node cur_j: -1 (the loaded state) at j = 0; else the node before, i' = vl[j-1],
  // when pa = i' (its pass kept S'), or else i''s parent (a leaf's pass keeps S). What the node
  // loop would work out at run time, one dependent shared-memory read after another, is two words:
  //   A: i | nx << 8 | kind << 16 | rb << 18 | save << 20
  //      kind 1: the next node nx is i's child (its u is formed from S'); 2: i is a leaf and nx its
  //      sibling (u from S); 0: neither. rb 0: the state held is pa's and u was formed by the pass
  //      before; 1: pa's state is taken from R or rebuilt (u formed here); 2: the first position
  //      (the loaded state, u formed here). save: S' goes to R (i has a child after its first).
  //   B: (pa + 1) | depth[pa] << 8 | depth[i] << 16   (depth[-1] = 0; depths <= 64)
  // Every thread of position j reads par/later/depth as tree_structure left them (after a barrier).
  auto tree_desc = [&](int nv) {
    for (int j = tid; j < nv; j += kThreads) {
      const int i = vlist[j], pa = par[i];
      const int inx = j + 1 < nv ? vlist[j + 1] : -1;
      const int pnx = inx >= 0 ? par[inx] : -2;
      const int prev = j > 0 ? vlist[j - 1] : -1;
      const int cur = j == 0 ? -1 : pa == prev ? prev : par[prev];
      const int kind = pnx == i ? 1 : inx >= 0 && pnx == pa ? 2 : 0;
      const int rb = pa != cur ? 1 : j == 0 ? 2 : 0;
      const int save = kind == 1 && later[i] != 0 ? 1 : 0;
      tdA[j] = i | (kind != 0 ? inx : 0) << 8 | kind << 16 | rb << 18 | save << 20;
      tdB[j] = (pa + 1) | (pa >= 0 ? depth[pa] : 0) << 8 | depth[i] << 16;
    }
  };

  // ---- the tokens ----
  // S holds the state after some node (at first the loaded state). Node i starts from its parent's
  // state; its own state S' = S * d_i + kn_i delta_i is formed element by element in one pass that
  // also accumulates o_i = S'^T qn_i and, when the next node is i's child, that child's
  // u = (S' * d_next)^T kn_next (the sums the step would form from the stored S' and S' * d_next:
  // the same roundings in the same order, with the latency of two sums overlapped). A tree leaf
  // (no child follows it) is evaluated without overwriting S, so its siblings need no rebuild; when
  // the next node continues from that S (a sibling: its parent is the node S holds), the leaf's pass
  // also forms the next node's u = (S * d_next)^T kn_next, overlapped with the leaf's o sum.
  // Work done once: kn_i is in registers when node i's pass starts (kr: read by the parent's pass
  // as the child's u factor, or by the u sum), and outside a tree S holds S * d_i (the product the
  // pass and the u sum both use: formed by the parent's pass as the child's u factor, or by the u
  // sum). Not in a tree: a node's S may be needed again by a sibling of its leaf child, and
  // choosing per node between keeping S' and S' * d_next costs a select per element, as much as
  // the product it saves.
  // (kTree) the nodes to run are vlist[0..nt), described by tdA/tdB (the first `nanc` only rebuild
  // the state: no output); other modes run tokens 0..nt-1.
  auto run_tokens = [&](auto mode_tag, int nt, int nanc) {
    constexpr Mode PM = decltype(mode_tag)::value;
    constexpr bool kOut = PM != Mode::kCommit;
    int* wpath = path + warp * kPathLen;  // this warp's copy of the current path (kTree)
    int saved = -1;      // (kTree) R holds the state after node `saved` (-1: none)
    [[maybe_unused]] float R[kRSmem ? 1 : kSegLen];  // (kTree: one column a thread; in shared memory when kRSmem)
    [[maybe_unused]] float D[kRSmem ? kSegLen : 1];  // (kRSmem) S * d_i when node i's pass starts
    // (kRSmem) row group q of R at rmine[q kThreads]
    [[maybe_unused]] float4* const rmine = reinterpret_cast<float4*>(rsm) + tid;
    float u[kC];
#pragma unroll
    for (int c = 0; c < kC; ++c) u[c] = 0.f;
    float kr[kSegLen];  // kn_i, this thread's segment (read by the parent's pass when it formed u)
    constexpr bool kDecayed = PM != Mode::kTree;  // S holds S * d_i when node i's pass starts
    constexpr bool kD = PM == Mode::kTree && kRSmem;  // D holds it (S holds the state itself)
    // One node. kShape: 0 decided at run time (the tree), else known at compile time (a chain of
    // tokens, so the token loop holds only the common shape: a smaller loop to fetch): 1 the first
    // token (its u sum formed here), 2 a middle one, 3 the last (no next token), 4 the only one.
    // (H200, same call: chain 16 8.66 -> 8.20 us, commit B = 1 6.05 -> 5.68; gdn_s27_params_peel_quick.md)
    // (kTree) dA, dB: position j's control words (tree_desc). The tree's branches carry hints
    // (__builtin_expect): the rebuild, the u sum formed here and the R save unlikely, the child's pass
    // likely, which ptxas then lays out as the fall-through (tree 8 8.10 -> 7.88 us,
    // gdn_s29_tree_layout_ab.md). Layout only: the same instructions. Why it pays is not settled: a
    // fully contiguous common path (its own loop of that shape) was slower (gdn_s30_tree_ab.md), so
    // the instruction-fetch samples of ncu_gdn_tree_fetch_s29.txt do not explain it alone.
    auto node = [&](int j, auto shape_tag, int dA, int dB) {
      constexpr int kShape = decltype(shape_tag)::value;
      constexpr bool kT = PM == Mode::kTree;
      const int i = kT ? (dA & 255) : j;
      const int inx = !kT && j + 1 < nt ? j + 1 : -1;  // (not a tree) the token after i
      const int kind = kT ? (dA >> 16) & 3 : 0;         // (kTree) see tree_desc
      const int rb = kT ? (dA >> 18) & 3 : 0;
      const int nx = (dA >> 8) & 255;                   // (kind != 0) the next node
      if (kT) {
        const int pa = (dB & 255) - 1;
        if (__builtin_expect(rb == 1, 0)) {  // the state after pa: kept in R, or the loaded tile and the path root..pa
          const bool kept = pa >= 0 && pa == saved;
          if constexpr (kRSmem) {
            if (kept) {
#pragma unroll
              for (int q = 0; q < kSegLen / 4; ++q) {
                const float4 w = rmine[q * kThreads];
                S[0][4 * q] = w.x;
                S[0][4 * q + 1] = w.y;
                S[0][4 * q + 2] = w.z;
                S[0][4 * q + 3] = w.w;
              }
            } else {
#pragma unroll
              for (int r = 0; r < kSegLen; ++r) S[0][r] = tile_row(r);
            }
          } else {
#pragma unroll
            for (int r = 0; r < kSegLen; ++r) S[0][r] = kept ? R[r] : tile_row(r);
          }
          const int dp = kept ? 0 : (dB >> 8) & 255;  // (depth[pa]; 0 for pa = -1)
          int a = dp > 0 ? wpath[1] : 0;  // the path is read one ancestor ahead
          for (int d = 1; d <= dp; ++d) {
            const int an = d < dp ? wpath[d + 1] : 0;
            const float da = dec[a];
            const float dl = vd[a * kBC + lcol];
            float ka[kSegLen];
            lds_floats(xs + size_t(a) * kKinds * kVecFloats + seg * kSegPad, ka);
#pragma unroll
            for (int r = 0; r < kSegLen; ++r) S[0][r] = fma_rn(ka[r], dl, mul(S[0][r], da));
            a = an;
          }
        }
      }
      const float di = dec[i], bi = bet[i];
      const float* kn = xs + size_t(i) * kKinds * kVecFloats + seg * kSegPad;
      // the node that continues from S' (its child), or none
      const int next = kT ? (kind == 1 ? nx : -1) : PM != Mode::kStep && inx >= 0 ? inx : -1;
      const bool keep = !kT || kind == 1;  // S' becomes S (a tree leaf's does not)
      // (kTree, a leaf) the node that continues from S, the state of i's parent (i's sibling), or none
      const int sib = kT && kind == 2 ? nx : -1;
      // u = ksum((S * d_i) * kn_i), this thread's segment (a tree: unless the pass before formed it)
      if ((kShape == 0 && __builtin_expect(rb != 0, 0)) || kShape == 1 || kShape == 4) {
        lds_floats(kn, kr);
#pragma unroll
        for (int r = 0; r < kSegLen; ++r)
#pragma unroll
          for (int c = 0; c < kC; ++c) {
            const float a = mul(S[c][r], di);
            u[c] = r == 0 ? mul(a, kr[0]) : fma_rn(a, kr[r], u[c]);
            if (kDecayed) S[c][r] = a;
            if constexpr (kD) D[r] = a;
          }
      }
      float dl[kC];
#pragma unroll
      for (int c = 0; c < kC; ++c) u[c] = combine_segments<kOneLevel>(u[c]);
#pragma unroll
      for (int c = 0; c < kC; ++c) dl[c] = mul(sub(vd[i * kBC + kC * lcol + c], u[c]), bi);
      if (PM == Mode::kTree) {  // keep delta (over v, read above by all 4 segment lanes) and the path
        __syncwarp();
        if (seg == 0 && keep) vd[i * kBC + lcol] = dl[0];
        if (lane == 0) wpath[(dB >> 16) & 255] = i;  // (depth[i])
        __syncwarp();
      }
      const float* qn = kn + kVecFloats;  // (kOut only)
      float o[kC], un[kC];
#pragma unroll
      for (int c = 0; c < kC; ++c) o[c] = un[c] = 0.f;
      // The pass over the rows in the shape this node needs (a uniform branch): the next node's u
      // sum from S' (a child), from S (a leaf's sibling) or none; S' kept or not. Each shape is
      // straight-line code, so the shared-memory reads of all rows can be issued ahead of the sums
      // and the independent sums interleave (a sum under a per-row condition would wait for each
      // row's read in turn).
      auto pass = [&](auto next_tag, auto keep_tag) {
        constexpr int kNext = decltype(next_tag)::value;  // 0: none, 1: the child (from S'), 2: a sibling (from S)
        constexpr bool kKeep = decltype(keep_tag)::value;
        const int nx = kNext == 1 ? next : sib;
        const float dn = kNext ? dec[nx] : 0.f;
        float qv[kSegLen], kv[kSegLen];  // qn_i, kn_next
        if (kOut) lds_floats(qn, qv);
        if (kNext) lds_floats(xs + size_t(nx) * kKinds * kVecFloats + seg * kSegPad, kv);
#pragma unroll
        for (int r = 0; r < kSegLen; ++r) {
#pragma unroll
          for (int c = 0; c < kC; ++c) {
            const float a = kDecayed ? S[c][r] : kD ? D[r] : mul(S[c][r], di);  // S * d_i
            const float sn = fma_rn(kr[r], dl[c], a);                // S'
            if (kOut) o[c] = r == 0 ? mul(sn, qv[0]) : fma_rn(sn, qv[r], o[c]);
            if (kNext) {
              const float t = mul(kNext == 1 ? sn : S[c][r], dn);  // S' * d_next, or (a sibling) S * d_next
              un[c] = r == 0 ? mul(t, kv[0]) : fma_rn(t, kv[r], un[c]);
              if (kNext == 1) S[c][r] = kDecayed ? t : sn;
              if constexpr (kD) D[r] = t;  // the next node's S * d
            } else if (kKeep) {
              S[c][r] = sn;
            }
          }
          if (kNext) kr[r] = kv[r];
        }
      };
      if constexpr (kShape == 1 || kShape == 2) {
        pass(IntTag<1>{}, BoolTag<true>{});  // (a token with a next one)
      } else if constexpr (kShape == 3 || kShape == 4) {
        pass(IntTag<0>{}, BoolTag<true>{});  // (the last token)
      } else if (__builtin_expect(next >= 0, 1)) {
        pass(IntTag<1>{}, BoolTag<true>{});  // S' kept, the child's u formed
      } else if constexpr (PM == Mode::kTree) {  // a leaf: S kept
        if (sib >= 0) pass(IntTag<2>{}, BoolTag<false>{});  // and the sibling's u formed
        else pass(IntTag<0>{}, BoolTag<false>{});
      } else {
        pass(IntTag<0>{}, BoolTag<true>{});  // the last token: S' kept (stored by a step, commit)
      }
      if (kOut) {
#pragma unroll
        for (int c = 0; c < kC; ++c) o[c] = combine_segments<kOneLevel>(o[c]);
        if (seg == 0 && (PM != Mode::kTree || j >= nanc)) {
#pragma unroll
          for (int c = 0; c < kC; ++c) {  // (a tree from one base pointer; chain and step as before)
            T* const oc = kT ? obase + i * (kVHeads * kHeadV) + c : out_at(i, c);
            *oc = from_f<T>(o[c]);
          }
        }
      }
      if (kT && __builtin_expect(((dA >> 20) & 1) != 0, 0)) {  // i has a later child: keep its state
        if constexpr (kRSmem) {
#pragma unroll
          for (int q = 0; q < kSegLen / 4; ++q)
            rmine[q * kThreads] = make_float4(S[0][4 * q], S[0][4 * q + 1], S[0][4 * q + 2], S[0][4 * q + 3]);
        } else {
#pragma unroll
          for (int r = 0; r < kSegLen; ++r) R[r] = S[0][r];
        }
        saved = i;
      }
#pragma unroll
      for (int c = 0; c < kC; ++c) u[c] = un[c];
    };
    if constexpr (PM == Mode::kTree) {  // (each position's control words read one node ahead)
      int dA = nt > 0 ? tdA[0] : 0, dB = nt > 0 ? tdB[0] : 0;
      for (int j = 0; j < nt; ++j) {
        const int nA = j + 1 < nt ? tdA[j + 1] : 0, nB = j + 1 < nt ? tdB[j + 1] : 0;
        node(j, IntTag<0>{}, dA, dB);
        dA = nA;
        dB = nB;
      }
    } else if constexpr (PM == Mode::kStep) {
      node(0, IntTag<4>{}, 0, 0);  // (nt = 1)
    } else if (nt == 1) {
      node(0, IntTag<4>{}, 0, 0);
    } else {
      node(0, IntTag<1>{}, 0, 0);
      for (int j = 1; j + 1 < nt; ++j) node(j, IntTag<2>{}, 0, 0);
      node(nt - 1, IntTag<3>{}, 0, 0);
    }
  };

  auto store_tile = [&]() {
    float* dst = p.pool + (slot * kVHeads + h) * int64_t(kHeadK * kHeadV) + int64_t(seg * kSegLen) * kHeadV + col;
#pragma unroll
    for (int r = 0; r < kSegLen; ++r) {
      if constexpr (kC == 2) {
        *reinterpret_cast<float2*>(dst + r * kHeadV) = make_float2(S[0][r], S[1][r]);
      } else {
        dst[r * kHeadV] = S[0][r];
      }
    }
  };

  // ---- the pending commit (CIV): replay, store, then verify from the committed tile ----
  if (CIV && live) {
    if (c_tree) {
      nc = tree_structure(c_par_lo, c_par_hi, pend.parents64, Tc, Tc, true, c_acc);
      if (nc < 0) live = false;  // an invalid pending tree: nothing written, zero outputs
    }
    if (live && nc > 0) {
      if (p0) {
        stage_store(pend, P0, nc, false, false, 0);
        stage(pend, nc, false, false, false, 1);
      } else {
        stage(pend, nc, false, c_tree, false, 0);
      }
      __syncthreads();
      normalize(nc, false);
      __syncthreads();
      if (src.qk16 && src.v16) {  // the verify's round 0, in flight during the replay
        L0 = stage_issue(src, T_, true, false, true, 0);
        l0 = true;
      }
      run_tokens(ModeTag<Mode::kCommit>{}, nc, 0);
      store_tile();
      __syncthreads();  // the staging area is reused by the verify
    }
  }

  if (tree_commit && live) {  // the path decides which tokens are staged
    n = tree_structure(par_lo, par_hi, src.parents64, T_, T_, true, acc);
    if (n <= 0) live = false;
  }

  // ---- nothing to run: zero rows (verify and step), no further pool access ----
  if (!live || n == 0) {
    if (MODE != Mode::kCommit && seg == 0 && part == 0)
      for (int i = 0; i < T_; ++i)
#pragma unroll
        for (int c = 0; c < kC; ++c) *out_at(i, c) = from_f<T>(0.f);
    return;
  }

  if (l0) {
    stage_store(src, L0, n, MODE != Mode::kCommit, true, 0);
    stage(src, n, MODE != Mode::kCommit, false, true, 1);
  } else {
    stage(src, n, MODE != Mode::kCommit, tree_commit, true, 0);
  }
  int nv = n, nanc = 0;  // (kTree) the nodes this CTA runs (vlist), of which the first nanc are ancestors
  if (MODE == Mode::kTree) {
    n = tree_structure(par_lo, par_hi, src.parents64, T_, n, false, 0);  // rows from n: zeros
    // ---- split: run `part` of the n valid nodes is [ra, re) in depth-first order. It starts from
    // the state of node ra's parent, rebuilt by running ra's ancestors (root first) as nodes of the
    // run that write no output: the nodes of a run and those ancestors form a depth-first subtree
    // of the tree (a node's parent is in the run or an ancestor of ra), and a node's state has the
    // same bits however it is reached, so every output is the one an unsplit launch writes. The
    // runs' CTAs work side by side: a split of two with its cut at a takes max(a, anc(a) + n - a)
    // node passes instead of n (anc: the ancestor count). Two runs: the cut minimizing that (the
    // first such); more: equal node counts.
    int ra = 0, re = n;
    if (splits == 2) {
      if (tid == 0) info[2] = 0x7fffffff;
      __syncthreads();
      if (tid >= 1 && tid < n) {
        const int tail = depth[tid] - 1 + n - tid;
        atomicMin(&info[2], (tid > tail ? tid : tail) << 8 | tid);  // (n <= 64: the cut fits 8 bits)
      }
      __syncthreads();
      const int cut = n >= 2 ? (info[2] & 255) : n;
      ra = part == 0 ? 0 : cut;
      re = part == 0 ? cut : n;
    } else if (splits > 2) {
      ra = part * n / splits;
      re = (part + 1) * n / splits;
    }
    nanc = ra < re ? depth[ra] - 1 : 0;
    if (tid == 0) {
      int x = ra < re ? par[ra] : -1;
      for (int a = nanc - 1; a >= 0; --a, x = par[x]) vlist[a] = x;
    }
    for (int j = tid; j < re - ra; j += kThreads) vlist[nanc + j] = ra + j;
    nv = nanc + (re - ra);
  }
  __syncthreads();
  if (MODE == Mode::kTree) tree_desc(nv);  // (read after normalize's barrier)
  normalize(n, MODE != Mode::kCommit);
  __syncthreads();

  run_tokens(ModeTag<MODE>{}, MODE == Mode::kTree ? nv : n, nanc);

  if (MODE == Mode::kStep || MODE == Mode::kCommit) store_tile();  // the tile, stored once
  if (kVerify && seg == 0 && part == 0)  // rows at and after the length (or after an invalid tree node)
    for (int i = n; i < T_; ++i)
#pragma unroll
      for (int c = 0; c < kC; ++c) *out_at(i, c) = from_f<T>(0.f);
}

}  // namespace qwen38::gdn
