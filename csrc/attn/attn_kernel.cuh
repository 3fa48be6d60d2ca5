// Decode attention for short query counts (attn_decode): split kernel + merge kernel. Torch-free.
//
// Formula (per sequence b, row t, q head hq, kv head h = hq / G; reference: the module docstring of
// qwen38_kernels/reference/attn.py, the contract): the row's visible keys are the committed prefix
// 0..P-1 (P = kv_lens[b] - lengths[b]), then P + j for the rows j it sees (mask[b, t, j], j <= t; the
// causal chain 0..t without a mask), in increasing position: n of them, visible key i at slot pos(i).
//   x_i = fp32(q . k_pos(i)) * scale_log2        (the mma's fp32 dot product; scale_log2 = scale log2 e)
//   o   = round( sum_i 2^(x_i - m) v_pos(i) / sum_i 2^(x_i - m) )   (softmax in base 2: the same math)
//
// Tensors: q [B, T, Hq, D] bf16/fp16; k, v [B, Hkv, L, D] q's dtype (last dims contiguous, other
// strides free: multiples of 8 elements, 16-byte rows); kv_lens, lengths [B] int32/int64; mask
// [B, T, T] bool (any strides); o [B, T, Hq, D] contiguous; a workspace when a row can need more
// than one split (attn_launch.h).
//
// Order of a row's arithmetic (a function of its q row and its visible keys/values in order ONLY:
// never of T, B, its batch position, the other rows, or where its keys sit in the cache; so a verify
// row equals the one-token call made after the accepted path is compacted, bit for bit, on one GPU):
//   - the n visible keys in chunks of 64 (visible key i in chunk i / 64, slot i % 64; the last chunk
//     zero-filled and masked past n), chunks in splits of split_chunks(chunks_of(n), rule) chunks
//     (attn_launch.h: functions of n only);
//   - a chunk: scores on mma.m16n8k16 (fp32 accumulation over D in 16-wide steps), times scale_log2
//     (one fp32 multiply); chunk max mc (exact); m' = max(m, mc); p_i = exp2(x_i - m') (exp2_fma);
//     the chunk's sum of the fp32 p_i in a fixed tree (lane: (p0 + p1) + (p2 + p3); xor-shuffles 1, 2;
//     then ((w0 + w1) + (w2 + w3)) over the 4 warps' 16-key slices); the P.V product on mma from a
//     zero accumulator with p rounded to q's dtype (16 keys an mma k step, 4 steps in key order);
//     then l = fma(l, a, l_chunk), o = fma(o, a, pv) with a = exp2(m - m') (a = 0 at the first chunk);
//   - one split: o / l rounded once (IEEE divide); several: each split writes (m, l, o) in fp32 and
//     the merge kernel forms M = max m_s, w_s = exp2(m_s - M), L = w_0 l_0, then fma(w_s, l_s, L) for
//     s = 1.., O likewise, and rounds O / L once: split order, fixed.
// Every fp32 operation is an explicit _rn intrinsic (no contraction can differ between builds) and
// exp2_fma is fused multiply-adds and an exponent insert: sm_90a and sm_121a compute the same bits
// (no ex2.approx, whose bits are the hardware's). P rounded before the P.V product is covered by the
// reference's attn_decode_f64_bound.
//
// Work split: the split kernel's CTA = (token group, kv head h and split s, sequence b), 4 warps.
// A 16-row mma tile holds TPM = 16 / G tokens' G heads (row (i % TPM) G + g of tile i / TPM is token
// i's head h G + g; the rows past TPM G are zeros); a CTA holds MT = 1 or 2 tiles (MT 2 when T > TPM),
// TPC = MT TPM tokens (the model, G = 6: 2 or 4 tokens). Each warp scores 16 keys of a chunk for all
// tiles and owns D / 4 output columns of the P.V product:
//
//   chunk (64 keys)   warp 0: keys 0..15 | warp 1: 16..31 | warp 2: 32..47 | warp 3: 48..63  (scores)
//   output columns    warp 0: 0..D/4-1   | warp 1: D/4..  | ...                               (P.V)
//
// The CTA walks, in order, the chunks of its split that any of its tokens needs (the tokens of a CTA
// share P, so their splits agree except where their chunk counts straddle a split-length change).
// A chunk entirely inside the prefix ((c + 1) 64 <= P) is one step for every token that needs it:
// loaded once, every tile's scores, each needing row updated. Any other chunk is one step per token:
// its keys gathered by index (prefix keys, then the token's visible draft keys from its list in
// shared memory, zeros past n) and only that token's rows updated; the mma of the other rows of its
// tile run on but their results are dropped (an mma's output element depends on its own row and
// column only). A row thus always meets the same data at the same slots, loaded either way.
//
// Pipeline (S = 2, the default): K and V of a step in two shared-memory slots, double-buffered through
// cp.async: V of a step loads while its scores run, K of the next step while its P.V runs. Three
// barriers a step:
//   wait K; barrier (K whole; the V slot free)  -> issue V; scores; row max of each warp's 16 keys
//   barrier (maxima whole)                        -> p, the P tile, each warp's partial sums
//   wait V; barrier (V, P, sums whole; K free)   -> issue the next K; P.V; update m, l, o
// S = 3 (QWEN38_ATTN_SLOTS=3): the loads K0 V0 K1 V1 ... go to slot j % 3, the next step's K issued at
// the first barrier and its V at the third, so two loads are in flight; the same arithmetic.
// Shared memory: S K/V slots (64 keys x D), the q tiles, the P tiles (16 x 64), the maxima and sums,
// the tokens' visible draft lists and a token table: 87 KB at D 256 and MT 2 with two slots (GB10
// allows 99), 108 / 118 KB with three.
// K, V, q and P rows are stored in 16-byte chunks swizzled by the row (chunk c of row r at c ^ (r % 8))
// so the 8 row addresses of an ldmatrix phase fall in 8 different bank groups.
//
// Guards (the launcher validates index values only on request, QWEN38_ATTN_CHECK_INDICES): lengths
// clamp to [0, min(T, L)], kv_lens to [length, L]; a row sees its own key and never a later row's
// whatever the mask says: nothing outside the cache or a mask row's first t + 1 entries is read.
// Padding rows (t >= length) are written as zeros by the split-0 CTAs; a CTA with no row to serve
// exits after that. The grid comes from (B, T, Hkv, L) only (CUDA-graph safe).
//
// Checked without a GPU: tests/native/attn_host_emulation.cpp compiles this file for the host
// (tests/test_attn_emulation.py).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>
#include <cstring>

#include "attn/attn_launch.h"
#include "common/cp_async.cuh"
#include "common/ldmatrix.cuh"
#include "common/mma.cuh"
#include "common/pdl.cuh"
#include "common/smem.cuh"
#include "common/vec.cuh"

namespace qwen38::attn {

constexpr int kWarps = kThreads / 32;
static_assert(kWarps * 16 == kChunk, "each warp scores 16 keys of a chunk");

__device__ __forceinline__ float neg_inf() { return __int_as_float(int(0xff800000u)); }

// 2^x for x <= 0 (or NaN), with fused multiply-adds only: x = n + f (n = rint x, f exact, |f| <= 1/2),
// 2^f by its degree-7 Taylor polynomial (truncation below 2^-27; Horner in fp32), 2^n inserted as an
// exponent. Results under 2^-125 (x < -125, -inf included) are 0: such a p is far below a rounding
// of the sums it joins. Identical bits on every arch (IEEE fma and multiply, round to nearest).
// Branch-free (the under-2^-125 case is a select, so a warp's exponentials never diverge): x past -125 is
// replaced by 0 for the polynomial, whose result the select then drops; NaN passes through.
__device__ __forceinline__ float exp2_fma(float x) {
  const bool zero = x < -125.0f;
  x = zero ? 0.0f : x;
  const float n = rintf(x);
  const float f = __fsub_rn(x, n);
  float y = 0x1.ffcbfcp-17f;             // ln2^7 / 7!
  y = __fmaf_rn(y, f, 0x1.430912p-13f);  // ln2^6 / 6!
  y = __fmaf_rn(y, f, 0x1.5d87fep-10f);  // ln2^5 / 5!
  y = __fmaf_rn(y, f, 0x1.3b2ab6p-7f);   // ln2^4 / 4!
  y = __fmaf_rn(y, f, 0x1.c6b08ep-5f);   // ln2^3 / 3!
  y = __fmaf_rn(y, f, 0x1.ebfbe0p-3f);   // ln2^2 / 2!
  y = __fmaf_rn(y, f, 0x1.62e430p-1f);   // ln2
  y = __fmaf_rn(y, f, 1.0f);
  const int e = n == n ? int(n) : 0;     // (NaN: y is NaN already)
  const float r = __fmul_rn(y, __int_as_float((e + 127) << 23));  // exact: y in [0.7, 1.5], n >= -125
  return zero ? 0.0f : r;
}

// Byte offset of 16-byte chunk c of row r in a tile of `row_bytes` rows (swizzled: c ^ (r % 8)).
__device__ __forceinline__ int swz(int r, int c, int row_bytes) { return r * row_bytes + ((c ^ (r & 7)) << 4); }

__device__ __forceinline__ int64_t load_index(const void* p, bool is64, int64_t i) {
  return is64 ? static_cast<const int64_t*>(p)[i] : int64_t(static_cast<const int32_t*>(p)[i]);
}

// Shared memory of the split kernel (bytes). S slots of K or V chunks (2 or 3: the pipeline below).
template <int D, int MT, int S> struct Layout {
  static constexpr int kRow = D * 2;                  // a K, V or q row
  static constexpr int kSlot = kChunk * kRow;         // K or V of one chunk
  static constexpr int kMaxTokens = MT * 16;          // tokens a CTA at most (G = 1)
  static constexpr int kK = 0, kQ = S * kSlot;        // slot j at kK + j kSlot
  static constexpr int kP = kQ + MT * 16 * kRow;      // P tiles: 16 rows x 64 keys of q's dtype
  static constexpr int kPTile = 16 * kChunk * 2;
  static constexpr int kMax = kP + MT * kPTile;       // float [MT][warp][16]: row maxima
  static constexpr int kSum = kMax + MT * kWarps * 16 * 4;  // float [MT][warp][16]: row sums
  static constexpr int kVis = kSum + MT * kWarps * 16 * 4;  // uint8 [token][64]: visible draft rows
  static constexpr int kTok = kVis + kMaxTokens * kMaxRows;  // int [token][4]: n, first, end chunk, splits
  static constexpr int kBytes = kTok + kMaxTokens * 4 * 4;
  static_assert(S == 3 || kBytes <= 101376, "shared memory over GB10's 99 KB");  // (3 slots: where they fit)
};

// One step of a CTA: chunk c for the tokens in `members` (bit i: local token i); tok >= 0: the step
// of that one token with its keys gathered, -1: a prefix chunk shared by the members. members 0: done.
struct Step {
  int c, tok;
  uint32_t members;
};

// The first step at or after chunk c (after token `after` of chunk c, for a gathered chunk).
__device__ __forceinline__ Step find_step(int c, int after, int c_hi, int tpc, const int* tok, int64_t prefix) {
  for (; c < c_hi; ++c, after = -1) {
    uint32_t need = 0;
    for (int i = 0; i < tpc; ++i) need |= uint32_t(tok[4 * i + 1] <= c && c < tok[4 * i + 2]) << i;
    if (need == 0) continue;
    if (int64_t(c + 1) * kChunk <= prefix) {
      if (after < 0) return Step{c, -1, need};
      continue;
    }
    const uint32_t rest = after < 0 ? need : (after >= 31 ? 0u : need & (~0u << (after + 1)));
    if (rest != 0) {
      const int i = __popc((rest & (0u - rest)) - 1u);  // the lowest set bit
      return Step{c, i, 1u << i};
    }
  }
  return Step{c_hi, -1, 0u};
}

// cp.async copies of K or V of step `st` into a slot: 64 rows of D, D / 16 copies of 16 bytes a
// thread; a gathered step reads visible key i at P + vis[i - P] past the prefix, zeros past n.
template <int D>
__device__ __forceinline__ void load_chunk(unsigned char* dst, const unsigned char* src_bh, int64_t row_bytes,
                                           const Step& st, int64_t prefix, const int* tok, const uint8_t* vis,
                                           int tid) {
  constexpr int kCols = D / 8;               // 16-byte pieces a row
  constexpr int kRowsPer = kThreads / kCols;  // rows a pass: 4, 8, 16 at D 256, 128, 64
  const int cc = tid % kCols;
  const int64_t first = int64_t(st.c) * kChunk;
  if (st.tok < 0) {  // a prefix chunk: 64 consecutive cache rows (the same copies as below, without the
                     // per-row gather test: ~35 instructions a copy -> ~3; the loop's loads were 40% of it)
    const unsigned char* src = src_bh + (first + tid / kCols) * row_bytes + cc * 16;
    const int64_t step = kRowsPer * row_bytes;
#pragma unroll
    for (int r0 = 0; r0 < kChunk; r0 += kRowsPer) {
      cp_async16(dst + swz(r0 + tid / kCols, cc, D * 2), src, 16);
      src += step;
    }
    return;
  }
  const int64_t n = tok[4 * st.tok];
#pragma unroll
  for (int r0 = 0; r0 < kChunk; r0 += kRowsPer) {
    const int j = r0 + tid / kCols;
    const int64_t vi = first + j;
    int64_t pos = vi;
    bool ok = true;
    if (vi >= prefix) {
      ok = vi < n;
      pos = ok ? prefix + vis[st.tok * kMaxRows + int(vi - prefix)] : 0;
    }
    cp_async16(dst + swz(j, cc, D * 2), src_bh + pos * row_bytes + cc * 16, ok ? 16 : 0);
  }
}

template <typename T> struct Pack;
template <> struct Pack<__nv_bfloat16> {
  __device__ __forceinline__ static uint32_t two(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &v, 4);
    return u;
  }
};
template <> struct Pack<__half> {
  __device__ __forceinline__ static uint32_t two(float lo, float hi) {
    const __half2 v = __floats2half2_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &v, 4);
    return u;
  }
};

// (The launch bounds ask for one CTA an SM: shared memory allows at most two (H100 / H200) or one (GB10)
// whatever the registers, and without the 1 ptxas held the fp16 D 256 one-tile form to 168 registers with a
// 4-byte spill on sm_121a.)
template <typename T, int D, int MT, int S>
__global__ void __launch_bounds__(kThreads, 1) attn_decode_kernel(const Params p) {
  static_assert(S == 2 || S == 3, "two or three K/V slots");
  using Lay = Layout<D, MT, S>;
  constexpr int kNT = D / 32;  // n8 tiles of a warp's D / 4 output columns
  QWEN38_DYNAMIC_SMEM(unsigned char, smem, 128);
  int* tok = reinterpret_cast<int*>(smem + Lay::kTok);
  uint8_t* vis = smem + Lay::kVis;
  float* red_max = reinterpret_cast<float*>(smem + Lay::kMax);
  float* red_sum = reinterpret_cast<float*>(smem + Lay::kSum);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  const int G = p.group, tpm = 16 / G, tpc = MT * tpm;
  const int b = blockIdx.z, h = int(blockIdx.y) % p.hkv, split = int(blockIdx.y) / p.hkv;
  const int t0 = int(blockIdx.x) * tpc;

  pdl_wait();   // q and the cache come from the previous kernels
  pdl_allow();  // every CTA is resident or queued: the merge (or the next op) may queue

  // ---- the sequence and the CTA's tokens (guarded: see the header) ----
  int64_t len = p.lengths ? load_index(p.lengths, p.lengths64, b * p.lengths_s) : p.tokens;
  len = len < 0 ? 0 : (len > p.tokens ? p.tokens : len);
  len = len > p.slots ? p.slots : len;
  int64_t kl = load_index(p.kv_lens, p.kv_lens64, b * p.kv_lens_s);
  kl = kl < len ? len : (kl > p.slots ? p.slots : kl);
  const int64_t prefix = kl - len;
  for (int i = warp; i < tpc; i += kWarps) {  // a warp a token: its visible draft rows by two ballots
    const int t = t0 + i;
    const bool valid = t < p.tokens && t < len;
    int a = 0;
    if (valid) {
      const bool* mrow = p.mask ? p.mask + b * p.mask_sb + t * p.mask_st : nullptr;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int j = half * 32 + lane;
        const bool see = j <= t && (j == t || mrow == nullptr || mrow[j * p.mask_sj]);
        const uint32_t bal = __ballot_sync(0xffffffffu, see);
        if (see) vis[i * kMaxRows + a + __popc(bal & ((1u << lane) - 1u))] = uint8_t(j);
        a += __popc(bal);
      }
    }
    if (lane == 0) {
      const int64_t n = prefix + a;
      const int chunks = chunks_of(n), per = split_chunks(chunks, p.rule),
                ns = splits_of(chunks, p.rule);
      const bool active = valid && split < ns;
      tok[4 * i + 0] = int(n);
      tok[4 * i + 1] = active ? split * per : 0;
      tok[4 * i + 2] = active ? (split * per + per < chunks ? split * per + per : chunks) : 0;
      tok[4 * i + 3] = valid ? ns : 0;
    }
  }
  __syncthreads();

  int c_lo = 0x7fffffff, c_hi = 0;
  for (int i = 0; i < tpc; ++i)
    if (tok[4 * i + 2] > tok[4 * i + 1]) {
      c_lo = tok[4 * i + 1] < c_lo ? tok[4 * i + 1] : c_lo;
      c_hi = tok[4 * i + 2] > c_hi ? tok[4 * i + 2] : c_hi;
    }
  if (split == 0) {  // padding rows are zeros; the merge learns each row's split count
    for (int i = 0; i < tpc; ++i) {
      const int t = t0 + i;
      if (t >= p.tokens) break;
      if (p.ws_splits != nullptr && h == 0 && tid == 0) p.ws_splits[int64_t(b) * p.tokens + t] = tok[4 * i + 3];
      if (t < len) continue;
      uint4* dst = reinterpret_cast<uint4*>(static_cast<T*>(p.o) + ((int64_t(b) * p.tokens + t) * p.hq + h * G) * D);
      for (int e = tid; e < G * D / 8; e += kThreads) dst[e] = make_uint4(0u, 0u, 0u, 0u);
    }
  }
  if (c_hi <= c_lo) return;  // no row of this CTA has keys in this split

  // ---- q tiles and the first K ----
  const unsigned char* qb = static_cast<const unsigned char*>(p.q);
  unsigned char* sq = smem + Lay::kQ;
  for (int e = tid; e < MT * 16 * (D / 8); e += kThreads) {
    const int row = e / (D / 8), cc = e % (D / 8), mt = row / 16, rr = row % 16;
    const int i = rr < tpm * G ? mt * tpm + rr / G : -1;
    const bool ok = i >= 0 && tok[4 * i + 2] > tok[4 * i + 1];
    const int64_t off = ok ? ((int64_t(b) * p.q_sb + int64_t(t0 + i) * p.q_st + int64_t(h * G + rr % G) * p.q_sh) * 2
                              + cc * 16) : 0;
    cp_async16(sq + swz(row, cc, D * 2), qb + off, ok ? 16 : 0);
  }
  const unsigned char* kbh = static_cast<const unsigned char*>(p.k) + (int64_t(b) * p.k_sb + int64_t(h) * p.k_sh) * 2;
  const unsigned char* vbh = static_cast<const unsigned char*>(p.v) + (int64_t(b) * p.v_sb + int64_t(h) * p.v_sh) * 2;
  const int64_t k_row = p.k_sl * 2, v_row = p.v_sl * 2;
  // Pipeline. S = 2: K and V of a step alternate in two slots, one load in flight (V of a step while
  // its scores run, K of the next while its P.V runs). S = 3: load j of the sequence K0 V0 K1 V1 ...
  // goes to slot j % 3, two loads in flight (K of the next step issued with the scores, V of the next
  // with the P.V). One cp.async group a load, committed in that order (empty past the last step).
  Step st = find_step(c_lo, -1, c_hi, tpc, tok, prefix);
  load_chunk<D>(smem + Lay::kK, kbh, k_row, st, prefix, tok, vis, tid);
  cp_async_commit();
  if constexpr (S == 3) {
    load_chunk<D>(smem + Lay::kK + Lay::kSlot, vbh, v_row, st, prefix, tok, vis, tid);
    cp_async_commit();
  }
  int kslot = 0;  // the slot of this step's K (its V: (kslot + 1) % S)

  // this lane's rows (g, g + 8 of each tile): local token (-1: a zero row) and visible count
  int row_tok[MT][2], row_n[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int rr = g + 8 * e;
      row_tok[mt][e] = rr < tpm * G ? mt * tpm + rr / G : -1;
      row_n[mt][e] = row_tok[mt][e] >= 0 ? tok[4 * row_tok[mt][e]] : 0;
    }
  uint32_t tile_members[MT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const int hi = (mt + 1) * tpm < 32 ? (mt + 1) * tpm : 32;
    tile_members[mt] = (hi >= 32 ? 0xffffffffu : (1u << hi) - 1u) & ~((1u << (mt * tpm)) - 1u);
  }

  float m_run[MT][2], l_run[MT][2], acc[MT][kNT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    m_run[mt][0] = m_run[mt][1] = neg_inf();
    l_run[mt][0] = l_run[mt][1] = 0.0f;
  }
  zero_fill(acc);

  // ldmatrix lanes: A (q, P) rows/chunks; B of the scores (K rows); B of P.V (V rows, transposed)
  const int a_row = ((lane >> 3) & 1) * 8 + (lane & 7), a_chunk = lane >> 4;
  const int k_rowl = warp * 16 + (lane >> 4) * 8 + (lane & 7), k_chunk = (lane >> 3) & 1;
  const uint32_t sSlots = smem_addr(smem + Lay::kK);
  const uint32_t sQ = smem_addr(sq), sP = smem_addr(smem + Lay::kP);

  while (st.members != 0u) {
    const int vslot = kslot + 1 == S ? 0 : kslot + 1, fslot = vslot + 1 == S ? 0 : vslot + 1;
    const uint32_t sK = sSlots + kslot * Lay::kSlot, sV = sSlots + vslot * Lay::kSlot;
    const Step next = st.tok < 0 ? find_step(st.c + 1, -1, c_hi, tpc, tok, prefix)
                                 : find_step(st.c, st.tok, c_hi, tpc, tok, prefix);
    cp_async_wait<S - 2>();  // (S = 3: this step's V may still be in flight)
    __syncthreads();  // K of this step (and q) whole; every warp is done with the last step's V slot
    if constexpr (S == 2) load_chunk<D>(smem + Lay::kK + vslot * Lay::kSlot, vbh, v_row, st, prefix, tok, vis, tid);
    else if (next.members != 0u)
      load_chunk<D>(smem + Lay::kK + fslot * Lay::kSlot, kbh, k_row, next, prefix, tok, vis, tid);
    cp_async_commit();
    bool in_tile[MT];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) in_tile[mt] = (st.members & tile_members[mt]) != 0u;

    // scores of this warp's 16 keys (two n8 tiles) for every tile with a member
    float sc[MT][2][4];
    zero_fill(sc);
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      uint32_t kf[4];
      ldmatrix_x4(kf, sK + swz(k_rowl, 2 * ks + k_chunk, D * 2));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if (!in_tile[mt]) continue;
        uint32_t qa[4];
        ldmatrix_x4(qa, sQ + swz(mt * 16 + a_row, 2 * ks + a_chunk, D * 2));
        mma_16816<T>(sc[mt][0], qa, kf[0], kf[1]);
        mma_16816<T>(sc[mt][1], qa, kf[2], kf[3]);
      }
    }
    bool member[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int i = row_tok[mt][e];
        member[mt][e] = in_tile[mt] && i >= 0 && ((st.members >> i) & 1u);
        float mx = neg_inf();
        const int left = row_n[mt][e] - st.c * kChunk;  // the row's visible keys from this chunk's first on
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int key = warp * 16 + nt * 8 + 2 * t4 + c;  // (visible key st.c 64 + key: inside iff key < left)
            const float x = member[mt][e] && key < left ? __fmul_rn(sc[mt][nt][2 * e + c], p.scale_log2)
                                                        : neg_inf();
            sc[mt][nt][2 * e + c] = x;
            mx = fmaxf(mx, x);
          }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        if (in_tile[mt] && t4 == 0) red_max[(mt * kWarps + warp) * 16 + g + 8 * e] = mx;
      }
    }
    __syncthreads();  // every warp's row maxima

    float m_new[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      if (!in_tile[mt]) continue;
      unsigned char* ptile = smem + Lay::kP + mt * Lay::kPTile;
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int r = g + 8 * e;
        const float* rm = red_max + mt * kWarps * 16 + r;
        const float mc = fmaxf(fmaxf(rm[0], rm[16]), fmaxf(rm[32], rm[48]));
        m_new[mt][e] = fmaxf(m_run[mt][e], mc);
        float pf[2][2];
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
          for (int c = 0; c < 2; ++c) {  // (evaluated in every lane, then selected: rows past a tile's
                                         // tokens are in the same warp, and a branch would diverge)
            const float x = exp2_fma(__fsub_rn(sc[mt][nt][2 * e + c], m_new[mt][e]));
            pf[nt][c] = member[mt][e] ? x : 0.0f;
          }
          const int key = warp * 16 + nt * 8 + 2 * t4;
          *reinterpret_cast<uint32_t*>(ptile + swz(r, key >> 3, kChunk * 2) + (key & 7) * 2) =
              Pack<T>::two(pf[nt][0], pf[nt][1]);
        }
        float s = __fadd_rn(__fadd_rn(pf[0][0], pf[0][1]), __fadd_rn(pf[1][0], pf[1][1]));
        s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, 1));
        s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, 2));
        if (t4 == 0) red_sum[(mt * kWarps + warp) * 16 + r] = s;
      }
    }
    cp_async_wait<S - 2>();  // (S = 3: the next step's K may still be in flight)
    __syncthreads();  // V whole; the P tiles and sums whole; every warp is done with this step's K slot
    if (next.members != 0u)  // into the K slot: the next K (S = 2) or the next V (S = 3)
      load_chunk<D>(smem + Lay::kK + kslot * Lay::kSlot, S == 2 ? kbh : vbh, S == 2 ? k_row : v_row, next, prefix,
                    tok, vis, tid);
    cp_async_commit();

    // P.V for this warp's D / 4 columns, from a zero accumulator; then the online update
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      if (!in_tile[mt]) continue;
      float pv[kNT][4];
      zero_fill(pv);
#pragma unroll
      for (int ks = 0; ks < kChunk / 16; ++ks) {
        uint32_t pa[4];
        ldmatrix_x4(pa, sP + mt * Lay::kPTile + swz(a_row, 2 * ks + a_chunk, kChunk * 2));
#pragma unroll
        for (int j = 0; j < kNT; j += 2) {
          uint32_t vb[4];
          ldmatrix_x4_trans(vb, sV + swz(16 * ks + a_row, warp * kNT + j + a_chunk, D * 2));
          mma_16816<T>(pv[j], pa, vb[0], vb[1]);
          mma_16816<T>(pv[j + 1], pa, vb[2], vb[3]);
        }
      }
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        if (!member[mt][e]) continue;
        const float* rs = red_sum + mt * kWarps * 16 + g + 8 * e;
        const float lc = __fadd_rn(__fadd_rn(rs[0], rs[16]), __fadd_rn(rs[32], rs[48]));
        const float alpha = exp2_fma(__fsub_rn(m_run[mt][e], m_new[mt][e]));
        l_run[mt][e] = __fmaf_rn(l_run[mt][e], alpha, lc);
        m_run[mt][e] = m_new[mt][e];
#pragma unroll
        for (int j = 0; j < kNT; ++j)
#pragma unroll
          for (int c = 0; c < 2; ++c) acc[mt][j][2 * e + c] = __fmaf_rn(acc[mt][j][2 * e + c], alpha, pv[j][2 * e + c]);
      }
    }
    st = next;
    kslot = S == 2 ? 0 : fslot;  // S = 3: the next K went to the slot after this step's V
  }

  // ---- results: o / l for a row of one split; else (m, l, o) to the workspace ----
  const int64_t rows = int64_t(p.batch) * p.tokens * p.hq;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int i = row_tok[mt][e];
      if (i < 0 || tok[4 * i + 2] <= tok[4 * i + 1]) continue;
      const int rr = g + 8 * e;
      const int64_t row = (int64_t(b) * p.tokens + t0 + i) * p.hq + h * G + rr % G;
      const int col = warp * (D / 4) + 2 * t4;
      if (tok[4 * i + 3] == 1) {
        T* dst = static_cast<T*>(p.o) + row * D + col;
#pragma unroll
        for (int j = 0; j < kNT; ++j)
          *reinterpret_cast<uint32_t*>(dst + j * 8) =
              Pack<T>::two(__fdiv_rn(acc[mt][j][2 * e], l_run[mt][e]), __fdiv_rn(acc[mt][j][2 * e + 1], l_run[mt][e]));
      } else {
        const int64_t part = row * p.splits + split;
        float* dst = p.ws + part * D + col;
#pragma unroll
        for (int j = 0; j < kNT; ++j)
          *reinterpret_cast<float2*>(dst + j * 8) = make_float2(acc[mt][j][2 * e], acc[mt][j][2 * e + 1]);
        if (warp == 0 && t4 == 0)
          *reinterpret_cast<float2*>(p.ws + rows * p.splits * D + part * 2) = make_float2(m_run[mt][e], l_run[mt][e]);
      }
    }
}

// The merge of a row's splits (rows with 2 or more): one warp a row (b, t, q head), D / 32 columns a
// lane, the splits in order (the header's formula). The partials are read kMergeBatch splits at a time,
// all loads of a batch issued before its fused multiply-adds (the order of the arithmetic is the
// sequential one either way): a row of 64 splits waits for 8 rounds of L2 reads, not 64.
constexpr int kMergeBatch = 8;

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) attn_merge_kernel(const Params p) {
  constexpr int kPer = D / 32;
  pdl_wait();   // the split kernel's partials
  pdl_allow();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t rows = int64_t(p.batch) * p.tokens * p.hq;
  const int64_t row = int64_t(blockIdx.x) * kWarps + warp;
  if (row >= rows) return;
  const int ns = p.ws_splits[row / p.hq];
  if (ns < 2) return;  // written by the split kernel (one split) or a padding row
  const float* part = p.ws + row * p.splits * D + lane * kPer;
  const float2* ml = reinterpret_cast<const float2*>(p.ws + rows * p.splits * D + row * p.splits * 2);
  // the maximum: lane s reads split s (s, s + 32, ...), then a butterfly (max is exact in any order)
  float big = neg_inf();
  for (int s = lane; s < ns; s += 32) big = fmaxf(big, ml[s].x);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) big = fmaxf(big, __shfl_xor_sync(0xffffffffu, big, off));
  float o[kPer];
  float l = 0.0f;
  for (int s0 = 0; s0 < ns; s0 += kMergeBatch) {
    Vec<float, kPer> x[kMergeBatch];
    float2 m_l[kMergeBatch];
#pragma unroll
    for (int j = 0; j < kMergeBatch; ++j)
      if (s0 + j < ns) {
        m_l[j] = ml[s0 + j];
        x[j] = *reinterpret_cast<const Vec<float, kPer>*>(part + int64_t(s0 + j) * D);
      }
#pragma unroll
    for (int j = 0; j < kMergeBatch; ++j) {
      if (s0 + j >= ns) break;
      const float w = exp2_fma(__fsub_rn(m_l[j].x, big));
      if (s0 + j == 0) {
        l = __fmul_rn(w, m_l[j].y);
#pragma unroll
        for (int c = 0; c < kPer; ++c) o[c] = __fmul_rn(w, x[j].v[c]);
      } else {
        l = __fmaf_rn(w, m_l[j].y, l);
#pragma unroll
        for (int c = 0; c < kPer; ++c) o[c] = __fmaf_rn(w, x[j].v[c], o[c]);
      }
    }
  }
  Vec<T, kPer> out;
#pragma unroll
  for (int c = 0; c < kPer; ++c) out.v[c] = from_f32<T>(__fdiv_rn(o[c], l));
  *reinterpret_cast<Vec<T, kPer>*>(static_cast<T*>(p.o) + row * D + lane * kPer) = out;
}

}  // namespace qwen38::attn
