// Fused RMS norms: rms_norm, add_rms_norm, rms_norm_gated. Torch-free kernel template.
//
//   rms_norm        y = round( x * r * s )             s = (1 + w) if zero_centered else w
//   add_rms_norm    h = round( x + res );  y = rms_norm(h);  residual_out = h
//   rms_norm_gated  n = round( x * r );  m = w * n  (rounded when w has x's dtype)
//                   y = round( m * silu(gate) )
//   with r = 1 / sqrt( sum(x^2) / H + eps ), all arithmetic in fp32, round() to the activation
//   dtype T (bf16 or fp16, nearest even). Reference: qwen38_kernels/reference/norm.py.
//
// Tensors (row = one normalised vector of H elements, any leading dims collapsed by the host):
//   x, residual, gate   T [rows, H], row strides x_stride/res_stride/gate_stride, last dim contiguous
//   weight              W [H] (W = T or float), contiguous
//   y, residual_out     T [rows, H], contiguous
//
// Work split (chosen from H alone, never from rows, so a row's bits never depend on the row count):
//   a row is cut into GROUP = 8-element groups; group g belongs to thread (g mod TPR) of the row's
//   thread team. TPR (threads per row) targets 2 groups per thread:
//
//     row:    | g0 | g1 | ... | g(TPR-1) | g(TPR) | ... | g(2TPR-1) | tail (H > 16*TPR) ...
//     thread:   t0   t1         t(TPR-1)   t0             t(TPR-1)    t0, t1, ... again
//
//   Each thread sums its squares group by group, element 0..7 in order; the team then reduces with
//   an xor butterfly (every lane ends with the same bits: a + b == b + a exactly at each level) and,
//   for teams wider than a warp, a fixed-order sum of the per-warp partials in shared memory.
//   The ALIGNED variant loads a group with one 16-byte load; the unaligned variant loads the same
//   group element by element: the arithmetic, hence the bits, are the same for both.
//   Teams of <= 32 threads are packed 128/TPR rows per block; wider teams get a block per row.
#pragma once

#include "common/vec.cuh"
#include "norm/norm_launch.h"

namespace qwen38::norm {

constexpr int kGroup = 8;         // elements per group (16 bytes of a 16-bit type)
constexpr int kRegGroups = 2;     // groups per thread held in registers between the two passes
constexpr int kSmallBlock = 128;  // block size when several rows share a block
constexpr int kMaxTeam = 512;      // threads per row at most (launch bound: <= 128 registers)

// Threads per row for a row of `hidden` elements: a power of two up to a warp, else a multiple of
// 32 up to kMaxTeam (rows longer than kMaxTeam * 16 elements loop over a tail, re-reading it).
inline int threads_per_row(int64_t hidden) {
  const int64_t groups = (hidden + kGroup - 1) / kGroup;
  const int64_t want = (groups + kRegGroups - 1) / kRegGroups;
  if (want <= 32) {
    int t = 1;
    while (t < want) t <<= 1;
    return t;
  }
  const int64_t t = (want + 31) / 32 * 32;
  return int(t < kMaxTeam ? t : kMaxTeam);
}

// A group of 8 elements as raw storage (16-bit values stay packed in registers: 4 registers per
// group instead of 8). The aligned variant is one 16-byte load (two for fp32 weights); the other
// loads element by element and zero-fills past the end of the row.
template <typename T>
using Group = Vec<T, kGroup>;

template <typename T, bool ALIGNED>
__device__ __forceinline__ Group<T> load_group(const T* __restrict__ p, int valid) {
  if constexpr (ALIGNED) {
    return *reinterpret_cast<const Group<T>*>(p);
  } else {
    Group<T> g;
#pragma unroll
    for (int j = 0; j < kGroup; ++j) g.v[j] = j < valid ? p[j] : from_f32<T>(0.0f);
    return g;
  }
}

template <typename T, bool ALIGNED>
__device__ __forceinline__ void store_group(T* __restrict__ p, int valid, const Group<T>& g) {
  if constexpr (ALIGNED) {
    *reinterpret_cast<Group<T>*>(p) = g;
  } else {
#pragma unroll
    for (int j = 0; j < kGroup; ++j)
      if (j < valid) p[j] = g.v[j];
  }
}

// silu in fp32 without fast math; exp(-g) overflows to inf for g < -88 and g / inf = -0 (no NaN).
__device__ __forceinline__ float silu_f32(float g) { return g / (1.0f + expf(-g)); }

// One group of outputs from the (rounded, for kAddRms) inputs v, weights w and gates g.
template <typename T, typename W, Kind KIND>
__device__ __forceinline__ Group<T> finish_group(bool zero_centered, float r, const Group<T>& v,
                                                 const Group<W>& w, const Group<T>& g) {
  Group<T> out;
#pragma unroll
  for (int j = 0; j < kGroup; ++j) {
    const float vj = to_f32(v.v[j]), wj = to_f32(w.v[j]);
    if constexpr (KIND == Kind::kGated) {
      const float n = round_to<T>(vj * r);
      float m = wj * n;
      if constexpr (sizeof(W) == sizeof(T)) m = round_to<T>(m);  // bf16 * bf16 in the reference
      out.v[j] = from_f32<T>(m * silu_f32(to_f32(g.v[j])));
    } else {
      const float s = zero_centered ? 1.0f + wj : wj;
      out.v[j] = from_f32<T>(vj * r * s);  // (x * r) * s: the reference's order
    }
  }
  return out;
}

template <typename T, typename W, Kind KIND, bool ALIGNED>
__global__ void __launch_bounds__(kMaxTeam, 1) norm_kernel(const Params p, const int tpr) {
  __shared__ float warp_sums[kMaxTeam / 32];

  const int lane = threadIdx.x % tpr;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / tpr) + threadIdx.x / tpr;
  // Rows past the end still run the shuffles below (all 32 lanes must take part); they only skip
  // memory accesses.
  const bool active = row < p.rows;
  const int64_t H = p.hidden;
  const int64_t groups = (H + kGroup - 1) / kGroup;

  const T* __restrict__ x = static_cast<const T*>(p.x) + row * p.x_stride;
  const T* __restrict__ res = static_cast<const T*>(p.residual) + row * p.res_stride;
  const T* __restrict__ gate = static_cast<const T*>(p.gate) + row * p.gate_stride;
  const W* __restrict__ wt = static_cast<const W*>(p.weight);
  T* __restrict__ y = static_cast<T*>(p.y) + row * H;
  T* __restrict__ res_out = static_cast<T*>(p.residual_out) + row * H;

  auto valid_in = [&](int64_t e) { return int(H - e < kGroup ? H - e : kGroup); };
  // x (or the rounded x + residual, written to residual_out) of one group, squares added to ss
  float ss = 0.0f;
  auto load_x = [&](int64_t e) {
    Group<T> v = load_group<T, ALIGNED>(x + e, valid_in(e));
    if constexpr (KIND == Kind::kAddRms) {
      const Group<T> rr = load_group<T, ALIGNED>(res + e, valid_in(e));
#pragma unroll
      for (int j = 0; j < kGroup; ++j) v.v[j] = from_f32<T>(to_f32(v.v[j]) + to_f32(rr.v[j]));
      store_group<T, ALIGNED>(res_out + e, valid_in(e), v);
    }
#pragma unroll
    for (int j = 0; j < kGroup; ++j) ss += to_f32(v.v[j]) * to_f32(v.v[j]);
    return v;
  };
  auto load_gate = [&](int64_t e) {
    if constexpr (KIND == Kind::kGated) return load_group<T, ALIGNED>(gate + e, valid_in(e));
    else return Group<T>{};
  };

  // ---- pass 1: load (and keep) the first kRegGroups groups, sum squares over the whole row ----
  Group<T> v[kRegGroups], g[kRegGroups];
  Group<W> w[kRegGroups];
#pragma unroll
  for (int c = 0; c < kRegGroups; ++c) {
    const int64_t e = (int64_t(c) * tpr + lane) * kGroup;
    if (active && e < H) {
      v[c] = load_x(e);
      g[c] = load_gate(e);
      w[c] = load_group<W, ALIGNED>(wt + e, valid_in(e));
    }
  }
  for (int64_t grp = int64_t(kRegGroups) * tpr + lane; active && grp < groups; grp += tpr) load_x(grp * kGroup);

  // ---- team reduction, fixed order ----
  const int width = tpr < 32 ? tpr : 32;
  for (int off = width / 2; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
  if (tpr > 32) {
    const int nwarps = tpr / 32;
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = ss;
    __syncthreads();
    ss = 0.0f;
    for (int i = 0; i < nwarps; ++i) ss += warp_sums[i];
  }
  if (!active) return;
  const float r = 1.0f / sqrtf(ss / float(H) + p.eps);  // IEEE div and sqrt: mean, + eps, rsqrt

  // ---- pass 2: normalise and store ----
#pragma unroll
  for (int c = 0; c < kRegGroups; ++c) {
    const int64_t e = (int64_t(c) * tpr + lane) * kGroup;
    if (e < H) store_group<T, ALIGNED>(y + e, valid_in(e), finish_group<T, W, KIND>(p.zero_centered, r, v[c], w[c], g[c]));
  }
  for (int64_t grp = int64_t(kRegGroups) * tpr + lane; grp < groups; grp += tpr) {
    // tail of a very long row: re-read it (for kAddRms the rounded sum this thread stored in
    // residual_out in pass 1)
    const int64_t e = grp * kGroup;
    const T* src = KIND == Kind::kAddRms ? static_cast<const T*>(res_out) : x;
    const Group<T> vv = load_group<T, ALIGNED>(src + e, valid_in(e));
    const Group<W> ww = load_group<W, ALIGNED>(wt + e, valid_in(e));
    store_group<T, ALIGNED>(y + e, valid_in(e), finish_group<T, W, KIND>(p.zero_centered, r, vv, ww, load_gate(e)));
  }
}

}  // namespace qwen38::norm
