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
//   the streaming shape (norm_stream_kernel, many rows of aligned groups, see below): a persistent
//   grid with SPW = 10 (rms_norm) or 5 (two inputs) for L = 32, and two rows in flight per lane for
//   L = 8 or 16.
// Every load of a lane is issued before the first shuffle, so they are all in flight together.
// The ALIGNED variant loads a group with one 16-byte load; the other loads the same group element
// by element: same arithmetic, same bits.
#pragma once

#include <type_traits>

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

// Element j (a compile-time index) of a group in fp32. PACKED (the streaming shape): read from the
// 32-bit word that holds it with its neighbour (bf16 -> fp32 is the exact bit shift that
// __bfloat162float does; fp16 through the exact paired conversion), so that the compiler keeps a
// group in 4 registers instead of splitting it into 8 16-bit ones. Same value either way: every
// conversion here is exact.
template <typename T, bool PACKED = false>
__device__ __forceinline__ float elem(const Group<T>& g, int j) {
  if constexpr (PACKED && sizeof(T) == 2) {
    const uint32_t w = reinterpret_cast<const uint32_t*>(&g)[j / 2];
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      return __uint_as_float(j % 2 == 0 ? w << 16 : w & 0xffff0000u);
    } else {
      const float2 h = __half22float2(*reinterpret_cast<const __half2*>(&w));
      return j % 2 == 0 ? h.x : h.y;
    }
  } else {
    return to_f32(g.v[j]);
  }
}

// Eight fp32 values rounded to T. PACKED: two at a time (cvt.rn.bf16x2.f32 / cvt.rn.f16x2.f32: each
// half rounded to nearest even on its own, exactly as from_f32 rounds one value) straight into
// packed registers: one conversion per pair and no repacking.
template <typename T, bool PACKED = false>
__device__ __forceinline__ Group<T> pack(const float (&f)[kGroup]) {
  Group<T> g;
  if constexpr (PACKED) {
    static_assert(sizeof(Group<T>) == 16, "16-bit activations");
    uint32_t u[kGroup / 2];
#pragma unroll
    for (int j = 0; j < kGroup; j += 2) {
      if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(f[j], f[j + 1]);
        u[j / 2] = *reinterpret_cast<const uint32_t*>(&h);
      } else {
        const __half2 h = __floats2half2_rn(f[j], f[j + 1]);
        u[j / 2] = *reinterpret_cast<const uint32_t*>(&h);
      }
    }
    *reinterpret_cast<uint4*>(&g) = make_uint4(u[0], u[1], u[2], u[3]);
  } else {
#pragma unroll
    for (int j = 0; j < kGroup; ++j) g.v[j] = from_f32<T>(f[j]);
  }
  return g;
}

// The arithmetic every launch shape shares (one definition, so the shapes cannot drift apart; PACKED
// only changes how values move between packed registers and fp32, never a value):

// One group of outputs from the (rounded, for kAddRms) inputs v, weights w and gates g.
// ZC: 1 zero-centred, 0 plain, -1 as `zero_centered` says at run time.
template <typename T, typename W, Kind KIND, int ZC = -1, bool PACKED = false>
__device__ __forceinline__ Group<T> finish_group(bool zero_centered, float r, const Group<T>& v,
                                                 const Group<W>& w, const Group<T>& g) {
  const bool zc = ZC >= 0 ? ZC == 1 : zero_centered;
  float o[kGroup];
#pragma unroll
  for (int j = 0; j < kGroup; ++j) {
    const float vj = elem<T, PACKED>(v, j), wj = elem<W, PACKED>(w, j);
    if constexpr (KIND == Kind::kGated) {
      const float n = round_to<T>(vj * r);
      float m = wj * n;
      if constexpr (sizeof(W) == sizeof(T)) m = round_to<T>(m);  // bf16 * bf16 in the reference
      o[j] = m * silu_f32(elem<T, PACKED>(g, j));
    } else {
      const float s = zc ? 1.0f + wj : wj;
      o[j] = vj * r * s;  // (x * r) * s: the reference's order
    }
  }
  return pack<T, PACKED>(o);
}

// A lane's squares added in element order.
template <typename T, bool PACKED = false>
__device__ __forceinline__ void add_squares(float& part, const Group<T>& v) {
#pragma unroll
  for (int j = 0; j < kGroup; ++j) part += elem<T, PACKED>(v, j) * elem<T, PACKED>(v, j);
}

// The xor butterfly over L lanes.
__device__ __forceinline__ float butterfly(float part, int lanes) {
  for (int off = lanes / 2; off > 0; off >>= 1) part += __shfl_xor_sync(0xffffffffu, part, off);
  return part;
}

// r from the row sum.
__device__ __forceinline__ float inv_rms(float ss, int64_t H, float eps) {
  return 1.0f / sqrtf(ss / float(H) + eps);  // IEEE div and sqrt: mean, + eps, rsqrt
}

// h = round(x + res), the rounded bf16/fp16 residual add of add_rms_norm.
template <typename T, bool PACKED = false>
__device__ __forceinline__ void add_residual(Group<T>& v, const Group<T>& res) {
  float h[kGroup];
#pragma unroll
  for (int j = 0; j < kGroup; ++j) h[j] = elem<T, PACKED>(v, j) + elem<T, PACKED>(res, j);
  v = pack<T, PACKED>(h);
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

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // The weight row prefetched into L2 before pdl_wait() by thread 0 of block 0: one bulk prefetch of
  // its H elements (16-byte aligned, a multiple of 16 bytes when ALIGNED). In a round x and the
  // residual come hot from the kernel before and the weight cold (a round's weight stream evicts it),
  // so its latency would follow the wait; a prefetch changes nothing any load returns (stream order
  // kept). The loads below then find it in L2. In one GDN layer (bench_layer, session 33, with the
  // conv weights' prefetch) the three norms' in-layer cost fell 5.5 -> 3.2 us.
  if constexpr (kKeepWeights && ALIGNED) {
    if (blockIdx.x == 0 && threadIdx.x == 0)
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(wt), "r"(uint32_t(H * int64_t(sizeof(W))))
                   : "memory");
  }
#endif
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
        add_residual<T>(v[i][c], rr[i][c]);
        store_group<T, ALIGNED>(res_out + e, valid_in(e), v[i][c]);  // the bf16 residual add
      }
      add_squares<T>(part, v[i][c]);
    }
    seg[i] = butterfly(part, lanes);
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
  const float r = inv_rms(ss, H, p.eps);

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


// ---- The streaming shape (v6): many rows, 16-byte-aligned rows ----
// A persistent grid (as many blocks as fit on the device at once) whose row groups walk the rows
// with a grid stride, so no block is launched per row. Same lane -> group mapping, same segment
// sums, same row sum, same finish as norm_kernel (the helpers above), hence the same bits; only L
// (lanes per segment) and SPW are compile-time here, which turns every in-row offset into an
// immediate:
//   L = 32 (H > 256): SPW = 10 for rms_norm (H = 5120: one warp per row, 20 groups = 80 registers
//     of x per lane, no barrier), 5 for the two-input kinds (two warps per row meeting in shared
//     memory, double-buffered so one barrier per row); a block of 4 rows (one warp each) or of one
//     row (several warps);
//   L = 8, 16 (H = 65..256: one segment, 32 / L rows per warp): the lane's two weight groups are
//     loaded once.
// The next rows' loads overlap this row's work: rolling loads (a group's registers take the next
// row's group once this row is done with them, so the next row streams in during this row's stores)
// or a ring of rows (the loads of a later row issued before this row's shuffles and stores);
// stream_depth / stream_roll below pick one per shape. Activations are loaded and stored with
// evict-first hints (ld.global.cs / st.global.cs: read or written once; L1 keeps the weights).
// Measured shape by shape with benchmarks/lab/norm_stream_lab.cu (NOTES.md, "norm v6").
constexpr int64_t kStreamMinElems = int64_t(1) << 20;  // rows * H from which the host takes it
constexpr int kStreamThreads = 512;                    // the largest block (L = 8)
constexpr int kStreamRowsPerBlock32 = 4;               // rows per block for L = 32, one warp per row
constexpr int kStreamSpwRms = 10, kStreamSpwTwo = 5;   // segments per warp for L = 32

constexpr int kStreamDepthShort = 2;                   // rows in flight per lane for L < 32

template <Kind KIND>
constexpr int stream_spw() { return KIND == Kind::kRms ? kStreamSpwRms : kStreamSpwTwo; }
// How later rows' loads overlap a row's work (see norm_stream_kernel): rolling loads for rows of
// 16 or 32 lanes per segment, a ring of two rows for 8 lanes (each measured best for its shape on
// the H200 with benchmarks/lab/norm_stream_lab.cu: NOTES.md, "norm v6"). add_rms_norm with 32 lanes
// loads each row at the top of its iteration: rolling measured only ~1% faster there, and its
// fp16 variant spills 8 bytes on sm_121a at the 128-register bound.
template <int L>
constexpr int stream_depth() { return L == 8 ? kStreamDepthShort : 1; }
template <Kind KIND, int L>
constexpr bool stream_roll() { return L == 16 || (L == kLanes && KIND != Kind::kAddRms); }
// Cache hints: evict-first loads and stores (lab, H200: rms_norm 5120 with rolling loads 77% -> 83%
// of the read ceiling, add_rms_norm 84% -> 87%; either hint alone gains nothing).
constexpr int kStreamHint = 3;
// Block size and launch bounds (threads, blocks per SM) of the streaming shape. Rows of 8 lanes per
// segment (the gated norm's 128 elements) stream best with 16 warps per SM (lab, 256-thread blocks
// capped at 2 per SM: 88-90% of the read ceiling, against 86% with the 3 that fit and 71-73% with 1).
// That is one 512-thread block per SM, which also leaves no room for the next kernel's blocks before
// this grid ends: capped 256-thread blocks let a programmatic dependent launch place the next grid's
// blocks in the free slot and unevenly (measured: 103 us with PDL against 76 us without).
template <int L>
constexpr int stream_block_threads() { return L == 8 ? 512 : 256; }
template <int L>
constexpr int stream_min_blocks() { return L == 8 ? 1 : L == 16 ? 3 : 2; }

// Threads per block of the streaming shape for L lanes per segment and `warps_per_row` warps.
inline int stream_threads(int lanes, int warps_per_row) {
  if (lanes == 8) return stream_block_threads<8>();
  if (lanes < kLanes) return stream_block_threads<16>();
  return warps_per_row == 1 ? kStreamRowsPerBlock32 * kLanes : warps_per_row * kLanes;
}

// Cache hints of the streaming shape's activation traffic (the lab's knob; the landed kernels take
// kStreamHint above): bit 0: loads ld.global.cs (evict first) instead of ld.global.cg;
// bit 1: stores st.global.cs; bit 2: loads ld.global.lu (last use); bit 3: with rolling loads, a
// group's next-row load issued before its store.
constexpr int kHintNone = 0;

// 16 bytes of activations (ld.global.cg: L2 only, or the hint's form), or zeros when !here.
template <typename T, int HINT = kHintNone>
__device__ __forceinline__ Group<T> load_stream(const T* __restrict__ p, bool here) {
  static_assert(sizeof(Group<T>) == 16, "16-bit activations");
  uint4 u = make_uint4(0u, 0u, 0u, 0u);
  if (here) {
    const uint4* q = reinterpret_cast<const uint4*>(p);
    if constexpr (HINT & 4) u = __ldlu(q);
    else if constexpr (HINT & 1) u = __ldcs(q);
    else u = __ldcg(q);
  }
  return *reinterpret_cast<const Group<T>*>(&u);
}

template <typename T, int HINT = kHintNone>
__device__ __forceinline__ void store_stream(T* __restrict__ p, const Group<T>& g) {
  static_assert(sizeof(Group<T>) == 16, "16-bit activations");
  if constexpr (HINT & 2) __stcs(reinterpret_cast<uint4*>(p), *reinterpret_cast<const uint4*>(&g));
  else *reinterpret_cast<Group<T>*>(p) = g;
}

// The same bits through an opaque register move: pass 2 then converts the packed 16-bit values
// again instead of keeping pass 1's fp32 copies live (which would double the registers per group).
template <typename T>
__device__ __forceinline__ Group<T> launder(const Group<T>& g) {
  static_assert(sizeof(Group<T>) == 16, "16-bit activations");
  uint4 u = *reinterpret_cast<const uint4*>(&g);
  asm volatile("" : "+r"(u.x), "+r"(u.y), "+r"(u.z), "+r"(u.w));
  return *reinterpret_cast<const Group<T>*>(&u);
}

// A per-row pointer the compiler may not split: left alone, it re-associates `row pointer + lane
// offset + k * step` and hoists the loop-invariant part of every group's address out of the row
// loop (2 * SPW 64-bit registers per tensor, spilled). Opaque, the offsets stay immediates.
template <typename P>
__device__ __forceinline__ P* opaque(P* ptr) {
  asm volatile("" : "+l"(ptr));
  return ptr;
}

// One lane's inputs of one row: x (and residual or gate) for its 2 * SPW groups.
template <typename T, Kind KIND, int SPW>
struct LaneRow {
  Group<T> v[SPW][2];
  Group<T> r[KIND == Kind::kAddRms ? SPW : 1][2];
  Group<T> g[KIND == Kind::kGated ? SPW : 1][2];
};

template <typename T, typename W, Kind KIND, int L, int SPW, int DEPTH, bool ROLL, int HINT = kHintNone>
__global__ void __launch_bounds__(stream_block_threads<L>(), stream_min_blocks<L>())
norm_stream_kernel(const Params p, const int segments, const int warps_per_row) {
  static_assert(L == kLanes || SPW == 1, "a row of more than one segment has 32 lanes per segment");
  static_assert(DEPTH >= 1 && (!ROLL || DEPTH == 1), "rolling loads keep one row of registers");
  __shared__ float seg_sums[2][kLanes];  // the block's row, when several warps share it

  const int tpr = L * warps_per_row;
  const int rows_per_block = blockDim.x / tpr;
  const int row_in_block = threadIdx.x / tpr;
  const int lane = threadIdx.x % L;
  const int warp_in_row = (threadIdx.x % tpr) / L;
  const int hidden = int(p.hidden);
  const int base = (warp_in_row * SPW * 2 * L + lane) * kGroup;
  constexpr int kStep = L * kGroup;
  const T* __restrict__ x0 = static_cast<const T*>(p.x);
  const T* __restrict__ res0 = static_cast<const T*>(p.residual);
  const T* __restrict__ gate0 = static_cast<const T*>(p.gate);
  const W* __restrict__ wt = static_cast<const W*>(p.weight);
  T* __restrict__ y0 = static_cast<T*>(p.y);
  T* __restrict__ res_out0 = static_cast<T*>(p.residual_out);

  const int64_t stride = int64_t(gridDim.x) * rows_per_block;
  int64_t first = int64_t(blockIdx.x) * rows_per_block;  // the block's first row this iteration
  if (first >= p.rows) return;  // block-uniform (the host sizes the grid so this does not happen)

  pdl_wait();
  pdl_allow();

  // One segment (L < 32): the lane's weights are the same two groups for every row.
  Group<W> wk[L < kLanes ? 2 : 1];
  if constexpr (L < kLanes) {
#pragma unroll
    for (int c = 0; c < 2; ++c)
      if (base + c * kStep < hidden) wk[c] = load_group<W, true, true>(wt + base + c * kStep, kGroup);
  }

  // A group past the row's end, or of a row past the last, is zero-filled and goes through the same
  // arithmetic without branches: its squares add +0 to a partial that is never -0, which leaves the
  // partial's bits unchanged (NaN stays NaN), so the sums are those of the skipping kernel. Stores
  // of such groups are skipped.
  struct RowPtrs {
    const T* __restrict__ x;
    const T* __restrict__ res;
    const T* __restrict__ gate;
    bool active;
  };
  auto row_ptrs = [&](int64_t row) {
    RowPtrs r;
    r.active = row < p.rows;
    r.x = opaque(x0 + (row * p.x_stride + base));
    r.res = KIND == Kind::kAddRms ? opaque(res0 + (row * p.res_stride + base)) : nullptr;
    r.gate = KIND == Kind::kGated ? opaque(gate0 + (row * p.gate_stride + base)) : nullptr;
    return r;
  };
  auto here = [&](const RowPtrs& r, int k) { return r.active && base + k < hidden; };
  auto load_row = [&](LaneRow<T, KIND, SPW>& d, int64_t row) {
    const RowPtrs r = row_ptrs(row);
#pragma unroll
    for (int i = 0; i < SPW; ++i) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int k = (2 * i + c) * kStep;
        d.v[i][c] = load_stream<T, HINT>(r.x + k, here(r, k));
        if constexpr (KIND == Kind::kAddRms) d.r[i][c] = load_stream<T, HINT>(r.res + k, here(r, k));
        if constexpr (KIND == Kind::kGated) d.g[i][c] = load_stream<T, HINT>(r.gate + k, here(r, k));
      }
    }
  };

  // The loads of later rows overlap this row's work in one of two ways:
  //   DEPTH > 1 (short rows, few registers per row): a ring of DEPTH rows, the row DEPTH - 1 strides
  //     ahead loaded at the top of each iteration (DEPTH rows in flight per lane);
  //   ROLL (long rows, one row of registers): each group's registers take the next row's group as
  //     soon as this row is done with them (the residual after the residual add, x and the gate
  //     after the group's output), so the next row's loads go out during this row's stores.
  // DEPTH = 1 without ROLL loads each row at the top of its iteration (no overlap).
  constexpr int kAhead = DEPTH - 1;
  LaneRow<T, KIND, SPW> q[DEPTH];
  if constexpr (ROLL) {
    load_row(q[0], first + row_in_block);
  } else {
#pragma unroll
    for (int j = 0; j < kAhead; ++j) load_row(q[j], first + j * stride + row_in_block);
  }
  int parity = 0;
#pragma unroll 1
  for (;;) {
    const int64_t row = first + row_in_block;
    const bool active = row < p.rows;
    const int64_t next = first + stride;
    const bool more = next < p.rows;  // block-uniform: every thread of the block loops alike
    if constexpr (!ROLL) load_row(q[kAhead], first + kAhead * stride + row_in_block);
    LaneRow<T, KIND, SPW>& cur = q[0];
    RowPtrs nx{};  // ROLL: the next row (a row past the last when there is none: loads nothing)
    if constexpr (ROLL) nx = row_ptrs(more ? next + row_in_block : p.rows);

    // ---- squares per lane, segment sums (residual add first) ----
    float seg[SPW];
    T* __restrict__ res_out = KIND == Kind::kAddRms ? opaque(res_out0 + (row * hidden + base)) : nullptr;
#pragma unroll
    for (int i = 0; i < SPW; ++i) {
      float part = 0.0f;
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int k = (2 * i + c) * kStep;
        if constexpr (KIND == Kind::kAddRms) {
          add_residual<T, true>(cur.v[i][c], cur.r[i][c]);
          if (active && base + k < hidden) store_stream<T, HINT>(res_out + k, cur.v[i][c]);
          if constexpr (ROLL) cur.r[i][c] = load_stream<T, HINT>(nx.res + k, here(nx, k));
        }
        add_squares<T, true>(part, cur.v[i][c]);
      }
      seg[i] = butterfly(part, L);
    }

    // ---- row sum: segments in order ----
    float ss = 0.0f;
    if (warps_per_row == 1) {
#pragma unroll
      for (int i = 0; i < SPW; ++i)
        if (i < segments) ss += seg[i];
    } else {
      // Double-buffered: a warp writes buffer `parity` again only two rows later, after the
      // barrier of the row in between, which every warp reaches only after reading it.
      float* sums = seg_sums[parity];
#pragma unroll
      for (int i = 0; i < SPW; ++i) {
        const int s = warp_in_row * SPW + i;
        if (lane == 0 && s < segments) sums[s] = seg[i];
      }
      __syncthreads();
      for (int s = 0; s < segments; ++s) ss += sums[s];
      parity ^= 1;
    }

    // ---- normalise and store ----
    if (active || ROLL) {
      const float r = inv_rms(ss, p.hidden, p.eps);
      T* __restrict__ y = opaque(y0 + (row * hidden + base));
      // The weights' address is opaque too: their loads are loop-invariant, and hoisted out of the
      // row loop they would hold 2 * SPW groups of registers for the whole kernel.
      const W* __restrict__ wrow = opaque(wt + base);
      // zero_centered decided once per row, not once per group: one straight block of loads,
      // arithmetic and stores that the scheduler can overlap.
      auto finish_row = [&](auto zc) {
        constexpr int kZc = decltype(zc)::value;
#pragma unroll
        for (int i = 0; i < SPW; ++i) {
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int k = (2 * i + c) * kStep;
            const bool store = active && base + k < hidden;
            Group<T> out;
            if (store) {
              Group<W> ww;
              if constexpr (L < kLanes) ww = wk[c];
              else ww = load_group<W, true, true>(wrow + k, kGroup);
              out = finish_group<T, W, KIND, kZc, true>(p.zero_centered, r, launder<T>(cur.v[i][c]), ww, cur.g[i][c]);
            }
            auto roll = [&] {
              cur.v[i][c] = load_stream<T, HINT>(nx.x + k, here(nx, k));
              if constexpr (KIND == Kind::kGated) cur.g[i][c] = load_stream<T, HINT>(nx.gate + k, here(nx, k));
            };
            if constexpr (ROLL && (HINT & 8)) roll();
            if (store) store_stream<T, HINT>(y + k, out);
            if constexpr (ROLL && !(HINT & 8)) roll();
          }
        }
      };
      if (KIND == Kind::kGated || !p.zero_centered) finish_row(std::integral_constant<int, 0>{});
      else finish_row(std::integral_constant<int, 1>{});
    }

    if (!more) break;
    first = next;
    if constexpr (!ROLL) {
#pragma unroll
      for (int j = 0; j < kAhead; ++j) q[j] = q[j + 1];
    }
  }
}

}  // namespace qwen38::norm
