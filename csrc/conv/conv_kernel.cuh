// Causal depthwise conv1d of width 4 + silu for decode and speculative verify: step, chain, tree
// and commit. Reference (THE CONTRACT): qwen38_kernels/reference/gdn.py, "Conv" and
// "Verify / commit"; the tensors: conv_launch.h.
//
// Per sequence b and channel c, with the window u0..u3 = the 3 previous raw inputs (oldest first)
// and the current one:
//   s = ((w0*u0 + w1*u1) + w2*u2) + w3*u3      fp32; each product rounded, then added in this order:
//                                              __fmul_rn / __fadd_rn, which nvcc never fuses
//   y = round_to(x.dtype, round_fp32(silu_f64(s)))   silu(s) = s / (1 + exp(-s)) in double (the
//                                              reference's torch float64 silu), rounded to fp32,
//                                              then to x's dtype. The sum is NOT rounded before silu.
//                                              Evaluated by silu_exact (silu_exact.cuh): in fp32
//                                              where that gives the same bits, else in float64
//                                              (Params::silu_f64: always in float64, the
//                                              default where FP64 runs at half rate, e.g. sm_90).
// The float64 silu is not correctly rounded on either side (CUDA's and the CPU's exp are within an
// ulp of float64), so a result could differ only where the float64 value lies within ~2^-52 of an
// fp32 rounding boundary: a few in 2^28 outputs, none seen. A NaN output is a NaN; its payload and
// sign are the device's (CUDA's canonical NaN), not necessarily the CPU reference's.
//
// A node's window (chain: parent of t is t - 1; tree: parents[b, t]) is its nearest ancestors'
// inputs, then the conv_state row's newest entries: walk the parent chain up to 3 steps:
//
//      state row:  s0 s1 s2          path:  root ... grandparent  parent  node
//      window of node = [ 3 newest of (s0, s1, s2, inputs on the path before node) ] + x[node]
//
// The commit writes the 3 newest of (s0, s1, s2, inputs of the accepted path), the same walk started
// at the accepted node itself. One thread per (sequence, channel) for the step and the commit: it
// reads its state entries before writing them, so no other thread's data is involved. The verifies
// write nothing but y, and a node's output depends on no other output, so they take one thread per
// (sequence, node, channel): grid (channel blocks, T, B). (One thread walking all T nodes in turn
// was a chain of T float64 silu latencies: 11.3 us for a 16-token chain at B = 1 on the H200.)
//
// Guards (the host checks the index values in eager mode; a captured graph cannot, so the kernel
// protects memory itself): a slot out of [0, S) or -1 reads and writes nothing and gives zero
// outputs; in the writing modes a slot already used by an earlier sequence of the call is skipped
// too (no two sequences write one row); a length outside [0, T] zeroes the sequence; a parent that
// is not -1 or an earlier node (a walk that would not end) zeroes that node's output; an accepted
// value out of range writes nothing.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/pdl.cuh"
#include "common/vec.cuh"
#include "conv/conv_launch.h"
#include "conv/silu_exact.cuh"

namespace qwen38::conv {

constexpr int kThreads = 256;  // channels per block

// The launch grid: x = channel blocks, y = tokens of a verify (1 for the step and the commit), z = B.
inline dim3 conv_grid(Mode mode, const Params& p) {
  const bool verify = mode == Mode::kChain || mode == Mode::kTree;
  return dim3(unsigned((p.channels + kThreads - 1) / kThreads), verify ? unsigned(p.tokens) : 1u,
              unsigned(p.batch));
}

__device__ __forceinline__ int64_t load_index(const void* p, bool is64, int64_t i) {
  return is64 ? static_cast<const int64_t*>(p)[i] : int64_t(static_cast<const int32_t*>(p)[i]);
}

template <typename T, typename W>
__device__ __forceinline__ T conv_out(const T (&u)[kWidth], const W* __restrict__ w4, bool silu_f64) {
  float p[kWidth];
#pragma unroll
  for (int i = 0; i < kWidth; ++i) p[i] = __fmul_rn(to_f32<W>(w4[i]), to_f32<T>(u[i]));
  const float s = __fadd_rn(__fadd_rn(__fadd_rn(p[0], p[1]), p[2]), p[3]);
  return from_f32<T>(silu_f64 ? silu_detail::silu_f64(s) : silu_exact(s));
}

// Is slot `slot` of sequence b usable: in range and (when `distinct`) not taken by an earlier sequence.
__device__ __forceinline__ bool slot_ok(const Params& p, int64_t b, int64_t slot, bool distinct) {
  if (slot < 0 || slot >= p.state_rows) return false;
  if (distinct)
    for (int64_t e = 0; e < b; ++e)
      if (load_index(p.slots, p.slots64, e) == slot) return false;
  return true;
}

// The parent of node i of sequence b (chain: i - 1).
template <Mode M>
__device__ __forceinline__ int64_t parent_of(const Params& p, int64_t b, int64_t i) {
  if constexpr (M == Mode::kChain) return i - 1;
  if (p.parents == nullptr) return i - 1;  // a chain commit
  return load_index(p.parents, p.parents64, b * p.parents_sb + i);
}

// Walk up from `cur` (the parent of the node being built, `prev` that node): the first input found
// goes to u[hi], then u[hi - 1], ..., u[0]; past the root the state row's s[2], s[1], s[0] follow.
// Raw values of T (the commit moves bits, NaN payloads included). Returns false when the walk meets
// an invalid parent (not -1 and not an earlier node, so the walk might not end).
template <typename T, Mode M>
__device__ __forceinline__ bool walk(const Params& p, int64_t b, int64_t c, int64_t cur, int64_t prev,
                                     const T* __restrict__ srow, T* u, int hi) {
  const T* __restrict__ x = static_cast<const T*>(p.x);
  int st = kWidth - 2;  // newest state entry not used yet
  for (int j = hi; j >= 0; --j) {
    if (cur >= 0) {
      if (cur >= prev) return false;
      u[j] = x[b * p.x_sb + cur * p.x_st + c];
      prev = cur;
      cur = parent_of<M>(p, b, cur);
    } else if (cur == -1) {
      u[j] = srow[st--];
    } else {
      return false;
    }
  }
  return true;
}

template <typename T, typename W, Mode M>
__global__ void __launch_bounds__(kThreads) conv_kernel(const Params p) {
  const int64_t c = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t b = blockIdx.z;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // At B = 1 (gridDim.z = 1) this CTA's state entries are prefetched into L2 before pdl_wait(), at
  // the slot the index array holds now: the GDN kernel's tile prefetch (gdn_kernel.cuh), same
  // reasoning. The early read only steers the prefetch (L2 only, ld.global.cg; the slot is read again
  // after the wait), and a prefetch changes nothing any load returns, so the data flow stays stream
  // order. Thread 0 of the token-0 CTA (blockIdx.y = 0) issues one bulk prefetch of its kThreads
  // channels' kWidth - 1 entries, cut at the row's end and down to whole 16-byte pieces; skipped
  // when the start is not 16-byte aligned (the bulk prefetch's rule: a state whose channel count
  // times 3 elements is not a multiple of 16 bytes, or a base pointer off 16 bytes). H200, us, same
  // call (conv_s32_prefetch_ab.md): step 1.79 -> 1.50, chain T = 4 / 16 1.80 / 3.19 -> 1.62 / 2.89,
  // tree 4 / 16 2.44 / 4.19 -> 2.20 / 3.90, commit 2.65 -> 2.45; B > 1 skips it (the GDN step
  // lost at B = 2 / 4 / 8 with its prefetch: gdn_s32_prefetch_rules.md).
  asm volatile(
      "{\n"
      " .reg .u32 ti, nz, cy, cx, lo32, n;\n"
      " .reg .s64 g, a, cs;\n"
      " .reg .pred p64, ok;\n"
      " mov.u32 ti, %%tid.x;\n"
      " mov.u32 nz, %%nctaid.z;\n"
      " mov.u32 cy, %%ctaid.y;\n"
      " setp.ne.u32 ok, ti, 0;\n"
      " @!ok setp.ne.u32 ok, nz, 1;\n"
      " @!ok setp.ne.u32 ok, cy, 0;\n"
      " @ok bra CPF_DONE_%=;\n"
      " setp.ne.u32 p64, %1, 0;\n"
      " @p64 ld.global.cg.s64 g, [%0];\n"
      " @!p64 ld.global.cg.s32 lo32, [%0];\n"
      " @!p64 cvt.s64.s32 g, lo32;\n"
      " setp.ge.s64 ok, g, 0;\n"
      " @ok setp.lt.s64 ok, g, %3;\n"
      " @!ok bra CPF_DONE_%=;\n"
      " mov.u32 cx, %%ctaid.x;\n"
      " mul.lo.u32 cx, cx, %5;\n"
      " cvt.u64.u32 cs, cx;\n"
      " sub.s64 cs, %4, cs;\n"
      " min.s64 cs, cs, %5;\n"
      " mul.lo.s64 cs, cs, %6;\n"
      " and.b64 cs, cs, -16;\n"
      " setp.le.s64 ok, cs, 0;\n"
      " @ok bra CPF_DONE_%=;\n"
      " cvt.u32.s64 n, cs;\n"
      " mul.lo.s64 a, g, %4;\n"
      " cvt.u64.u32 cs, cx;\n"
      " add.s64 a, a, cs;\n"
      " mul.lo.s64 a, a, %6;\n"
      " add.s64 a, a, %2;\n"
      " and.b64 cs, a, 15;\n"
      " setp.ne.s64 ok, cs, 0;\n"
      " @ok bra CPF_DONE_%=;\n"
      " cp.async.bulk.prefetch.L2.global [a], n;\n"
      "CPF_DONE_%=:\n"
      "}\n" ::"l"(p.slots),
      "r"(uint32_t(p.slots64 ? 1 : 0)), "l"(p.state), "l"(p.state_rows), "l"(p.channels), "n"(kThreads),
      "n"(int((kWidth - 1) * sizeof(T)))
      : "memory");
  // The weights of this CTA's channels (kWidth each) prefetched into L2 at any B by thread 0 of the
  // CTAs of sequence 0, token 0: cold in a round (its weight stream evicts them) and never written by
  // a kernel of this library; cut at the last channel and down to 16-byte pieces, skipped off 16-byte
  // alignment and without weights (the commit). Measured with bench_layer (session 33,
  // layer_s33_weight_prefetch.md, with the norms' prefetch): one GDN layer 125.6 -> 124.3 us.
  asm volatile(
      "{\n"
      " .reg .u32 ti, cy, cz, cx, n;\n"
      " .reg .s64 a, cs;\n"
      " .reg .pred ok;\n"
      " mov.u32 ti, %%tid.x;\n"
      " mov.u32 cy, %%ctaid.y;\n"
      " mov.u32 cz, %%ctaid.z;\n"
      " or.b32 ti, ti, cy;\n"
      " or.b32 ti, ti, cz;\n"
      " setp.ne.u32 ok, ti, 0;\n"
      " @!ok setp.eq.u64 ok, %0, 0;\n"
      " @ok bra CWF_DONE_%=;\n"
      " mov.u32 cx, %%ctaid.x;\n"
      " mul.lo.u32 cx, cx, %2;\n"
      " cvt.u64.u32 cs, cx;\n"
      " sub.s64 cs, %1, cs;\n"
      " min.s64 cs, cs, %2;\n"
      " mul.lo.s64 cs, cs, %3;\n"
      " and.b64 cs, cs, -16;\n"
      " setp.le.s64 ok, cs, 0;\n"
      " @ok bra CWF_DONE_%=;\n"
      " cvt.u32.s64 n, cs;\n"
      " cvt.u64.u32 a, cx;\n"
      " mul.lo.s64 a, a, %3;\n"
      " add.s64 a, a, %0;\n"
      " and.b64 cs, a, 15;\n"
      " setp.ne.s64 ok, cs, 0;\n"
      " @ok bra CWF_DONE_%=;\n"
      " cp.async.bulk.prefetch.L2.global [a], n;\n"
      "CWF_DONE_%=:\n"
      "}\n" ::"l"(p.weight),
      "l"(p.channels), "n"(kThreads), "n"(int(kWidth * sizeof(W)))
      : "memory");
#endif
  if (c >= p.channels) return;
  pdl_wait();
  pdl_allow();

  const T* __restrict__ x = static_cast<const T*>(p.x);
  const W* __restrict__ w4 = static_cast<const W*>(p.weight) + c * kWidth;
  T* state = static_cast<T*>(p.state);
  T* y = static_cast<T*>(p.y);
  const int64_t slot = load_index(p.slots, p.slots64, b);
  const bool writes = M == Mode::kStep || M == Mode::kCommit;
  const bool live = slot_ok(p, b, slot, writes);
  T* srow = state + (live ? slot : 0) * p.channels * (kWidth - 1) + c * (kWidth - 1);

  if constexpr (M == Mode::kStep) {
    if (!live) {
      y[b * p.channels + c] = from_f32<T>(0.0f);
      return;
    }
    const T u[kWidth] = {srow[0], srow[1], srow[2], x[b * p.x_sb + c]};
    y[b * p.channels + c] = conv_out<T, W>(u, w4, p.silu_f64);
    srow[0] = u[1];
    srow[1] = u[2];
    srow[2] = u[3];
  } else if constexpr (M == Mode::kCommit) {
    if (!live) return;
    const int64_t a = load_index(p.accepted, p.accepted64, b);
    int64_t node;
    if (p.parents == nullptr) {  // chain: accepted prefix length in [0, T]
      if (a <= 0 || a > p.tokens) return;
      node = a - 1;
    } else {  // tree: deepest accepted node in [-1, T)
      if (a < 0 || a >= p.tokens) return;
      node = a;
    }
    T u[kWidth - 1];
    u[kWidth - 2] = x[b * p.x_sb + node * p.x_st + c];
    if (!walk<T, M>(p, b, c, parent_of<M>(p, b, node), node, srow, u, kWidth - 3)) return;
#pragma unroll
    for (int j = 0; j < kWidth - 1; ++j) srow[j] = u[j];
  } else {  // chain, tree: read only; node i = blockIdx.y
    const int64_t i = blockIdx.y;
    int64_t len = p.tokens;
    if (p.lengths != nullptr) len = load_index(p.lengths, p.lengths64, b);
    const bool seq_ok = live && len >= 0 && len <= p.tokens;
    T out = from_f32<T>(0.0f);
    if (seq_ok && i < len) {
      T u[kWidth];
      u[kWidth - 1] = x[b * p.x_sb + i * p.x_st + c];
      if (walk<T, M>(p, b, c, parent_of<M>(p, b, i), i, srow, u, kWidth - 2)) out = conv_out<T, W>(u, w4, p.silu_f64);
    }
    y[(b * p.tokens + i) * p.channels + c] = out;
  }
}

}  // namespace qwen38::conv
