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
// The sum of squares has ONE order, fixed by H alone (row invariance), whatever the launch shape:
//   the row is cut into 8-element groups and the groups into segments of 2L groups, L = lanes per
//   segment (32, or the power of two that covers a short row). Lane l of segment s owns groups
//   s*2L + l and s*2L + L + l:
//
//     segment s:  | g(s*2L) ... g(s*2L+L-1) | g(s*2L+L) ... g(s*2L+2L-1) |
//     lane:          0   ...   L-1             0    ...    L-1
//
//   lane partial = its 16 squares added in element order; segment sum = xor butterfly over the L
//   lanes (a + b == b + a exactly, so every lane ends with the same bits); row sum = 0 + seg 0 +
//   seg 1 + ... in segment order.
// Launch shapes differ only in how many segments one warp walks (SPW) and so in how many warps
// share a row (ceil(S / SPW), their segment sums meeting in shared memory); the arithmetic above
// is the same for all of them, hence so are the bits:
//   SPW = 1 (few rows, latency): a warp per segment, the row's weights held in registers;
//   SPW = 4 for rms_norm, 2 for add_rms_norm and rms_norm_gated, which keep two inputs per group
//   (many rows, bandwidth): fewer warps per row, more bytes in flight per thread, weights re-read
//   in pass 2 through the read-only path (L1/L2 hits after the first rows).
// Every load of a lane is issued before the first shuffle, so they are all in flight together.
// The ALIGNED variant loads a group with one 16-byte load; the other loads the same group element
// by element: same arithmetic, same bits.
#pragma once

#include "common/pdl.cuh"
#include "common/vec.cuh"
#include "norm/norm_launch.h"

namespace qwen38::norm {

constexpr int kGroup = 8;          // elements per group (16 bytes of a 16-bit type)
constexpr int kLanes = 32;         // lanes per segment of a long row
constexpr int kSmallBlock = 128;   // threads per block when several short rows share a block
constexpr int kMaxThreads = 512;   // launch bound (<= 128 registers per thread)
constexpr int kSegSmem = 256;      // segment sums per block in shared memory
constexpr int64_t kMaxHidden = int64_t(kGroup) * 2 * kLanes * 32;  // 32 segments at most
static_assert(kMaxHidden == kMaxHiddenElems, "norm_launch.h states the limit to the host");

struct Shape {
  int lanes;          // L: lanes per segment
  int segments;       // S
  int spw;            // segments per warp (compile-time variant)
  int warps_per_row;  // ceil(S / spw)
  int rows_per_block;
  int threads;        // per block
};

// Lanes per segment and segment count: a function of H only (the reduction order).
inline void segments_of(int64_t hidden, int* lanes, int* segments) {
  const int64_t groups = (hidden + kGroup - 1) / kGroup;
  int l = 1;
  while (l < kLanes && 2 * l < groups) l <<= 1;
  *lanes = l;
  *segments = int((groups + 2 * l - 1) / (2 * l));
}

// The launch shape: segments per warp from the row count (bandwidth vs latency); never changes bits.
// `wide_spw` is the segments-per-warp variant for many rows (see the header comment).
inline Shape launch_shape(int64_t hidden, int64_t rows, int wide_spw) {
  Shape sh{};
  segments_of(hidden, &sh.lanes, &sh.segments);
  const bool wide = sh.segments > 1 && (rows >= 256 || sh.segments > kMaxThreads / 32);
  sh.spw = wide ? wide_spw : 1;
  sh.warps_per_row = (sh.segments + sh.spw - 1) / sh.spw;
  const int tpr = sh.lanes * sh.warps_per_row;
  sh.rows_per_block = tpr < kSmallBlock ? kSmallBlock / tpr : 1;
  sh.threads = tpr * sh.rows_per_block;
  return sh;
}

// A group of 8 elements as raw storage (16-bit values stay packed in registers: 4 registers per
// group instead of 8). The aligned variant is one 16-byte load (two for fp32 weights); the other
// loads element by element and zero-fills past the end of the row.
template <typename T>
using Group = Vec<T, kGroup>;

// READ_ONLY: data no thread writes during the kernel (the weights), loaded through the
// non-coherent read-only path (ld.global.nc), which the compiler may also move past stores.
template <typename T, bool ALIGNED, bool READ_ONLY = false>
__device__ __forceinline__ Group<T> load_group(const T* __restrict__ p, int valid) {
  if constexpr (ALIGNED && READ_ONLY && sizeof(Group<T>) == 16) {
    const uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
    return *reinterpret_cast<const Group<T>*>(&u);
  } else if constexpr (ALIGNED) {
    return *reinterpret_cast<const Group<T>*>(p);
  } else {
    Group<T> g;
#pragma unroll
    for (int j = 0; j < kGroup; ++j) g.v[j] = j < valid ? (READ_ONLY ? __ldg(p + j) : p[j]) : from_f32<T>(0.0f);
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

// silu in fp32 with the hardware exp2 and reciprocal (a few fp32 ulps, far below the 2^-8 or 2^-11
// of the final rounding: the result stays within 1 ulp of the float64 evaluation; these two MUFU
// instructions are the same on sm_90a and sm_121a). Overflow-safe: for g < -88, exp(-g) = inf and
// __fdividef(g, inf) = 0; NaN propagates.
__device__ __forceinline__ float silu_f32(float g) { return __fdividef(g, 1.0f + __expf(-g)); }

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

template <typename T, typename W, Kind KIND, bool ALIGNED, int SPW>
__global__ void __launch_bounds__(kMaxThreads, 1)
norm_kernel(const Params p, const int lanes, const int segments, const int warps_per_row) {
  __shared__ float seg_sums[kSegSmem];
  constexpr bool kKeepWeights = SPW == 1;  // latency shape: weights loaded with x, kept in registers

  const int tpr = lanes * warps_per_row;
  const int row_in_block = threadIdx.x / tpr;
  const int lane = threadIdx.x % lanes;
  const int warp_in_row = (threadIdx.x % tpr) / lanes;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / tpr) + row_in_block;
  // Rows past the end still run the shuffles below (all 32 lanes of a warp must take part); they
  // only skip memory accesses.
  const bool active = row < p.rows;
  const int64_t H = p.hidden;

  const T* __restrict__ x = static_cast<const T*>(p.x) + row * p.x_stride;
  const T* __restrict__ res = static_cast<const T*>(p.residual) + row * p.res_stride;
  const T* __restrict__ gate = static_cast<const T*>(p.gate) + row * p.gate_stride;
  const W* __restrict__ wt = static_cast<const W*>(p.weight);
  T* __restrict__ y = static_cast<T*>(p.y) + row * H;
  T* __restrict__ res_out = static_cast<T*>(p.residual_out) + row * H;

  // Offsets within a row are 32-bit (H <= kMaxHidden). This lane's group c (0 or 1) of its i-th
  // segment starts at element base + (2i + c) * lanes * kGroup; it exists when that is < H (which
  // also means the segment exists).
  const int hidden = int(H);
  const int base = (warp_in_row * SPW * 2 * lanes + lane) * kGroup;
  const int step = lanes * kGroup;
  auto valid_in = [&](int e) { return hidden - e < kGroup ? hidden - e : kGroup; };

  pdl_wait();   // inputs may come from the previous kernel
  pdl_allow();  // every block of this grid is resident or queued: let the next kernel queue

  // ---- pass 1a: issue every load of this lane first (all in flight together) ----
  Group<T> v[SPW][2], g[SPW][2], rr[KIND == Kind::kAddRms ? SPW : 1][2];
  Group<W> w[kKeepWeights ? SPW : 1][2];
#pragma unroll
  for (int i = 0; i < SPW; ++i) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int e = base + (2 * i + c) * step;
      if (!active || e >= hidden) continue;
      v[i][c] = load_group<T, ALIGNED>(x + e, valid_in(e));
      if constexpr (KIND == Kind::kAddRms) rr[i][c] = load_group<T, ALIGNED>(res + e, valid_in(e));
      if constexpr (KIND == Kind::kGated) g[i][c] = load_group<T, ALIGNED>(gate + e, valid_in(e));
      if constexpr (kKeepWeights) w[i][c] = load_group<W, ALIGNED, true>(wt + e, valid_in(e));
    }
  }
  // ---- pass 1b: residual add (rounded, stored), squares per lane, segment sums ----
  float seg[SPW];
#pragma unroll
  for (int i = 0; i < SPW; ++i) {
    float part = 0.0f;
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int e = base + (2 * i + c) * step;
      if (!active || e >= hidden) continue;
      if constexpr (KIND == Kind::kAddRms) {
#pragma unroll
        for (int j = 0; j < kGroup; ++j) v[i][c].v[j] = from_f32<T>(to_f32(v[i][c].v[j]) + to_f32(rr[i][c].v[j]));
        store_group<T, ALIGNED>(res_out + e, valid_in(e), v[i][c]);  // the bf16 residual add
      }
#pragma unroll
      for (int j = 0; j < kGroup; ++j) part += to_f32(v[i][c].v[j]) * to_f32(v[i][c].v[j]);
    }
    for (int off = lanes / 2; off > 0; off >>= 1) part += __shfl_xor_sync(0xffffffffu, part, off);
    seg[i] = part;
  }

  // ---- row sum: segments in order ----
  float ss = 0.0f;
  if (warps_per_row == 1) {
#pragma unroll
    for (int i = 0; i < SPW; ++i)
      if (i < segments) ss += seg[i];
  } else {
    float* sums = seg_sums + row_in_block * segments;
#pragma unroll
    for (int i = 0; i < SPW; ++i) {
      const int s = warp_in_row * SPW + i;
      if (lane == 0 && s < segments) sums[s] = seg[i];
    }
    __syncthreads();
    for (int s = 0; s < segments; ++s) ss += sums[s];
  }
  if (!active) return;
  const float r = 1.0f / sqrtf(ss / float(H) + p.eps);  // IEEE div and sqrt: mean, + eps, rsqrt

  // ---- pass 2: normalise and store ----
#pragma unroll
  for (int i = 0; i < SPW; ++i) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int e = base + (2 * i + c) * step;
      if (e >= hidden) continue;
      Group<W> ww;
      if constexpr (kKeepWeights) ww = w[i][c];
      else ww = load_group<W, ALIGNED, true>(wt + e, valid_in(e));
      store_group<T, ALIGNED>(y + e, valid_in(e), finish_group<T, W, KIND>(p.zero_centered, r, v[i][c], ww, g[i][c]));
    }
  }
}

}  // namespace qwen38::norm
