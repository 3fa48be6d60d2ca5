// A/B lab for the NVFP4 skinny kernels: times the ring kernel (csrc/gemm/nvfp4_linear_kernel.cuh),
// the register-stream kernel that came out of this lab (nvfp4_stream_kernel.cuh) and compile-time
// variants of the lab's candidate on the big decode shapes, bf16, 1..16 rows, without rebuilding
// the extension, and checks that every full variant writes the ring kernel's bits where it keeps
// its k split (the candidate keeps its k permutation). Modes separate the
// costs: 0 = the loads alone (weights, scales, activations; XOR-folded), 1 = loads + decode, 2 = the
// whole kernel. A development tool; benchmarks/bench_nvfp4.py is the measurement of record.
//
//   nvcc -std=c++20 -O3 -arch=sm_90a --expt-relaxed-constexpr -diag-suppress 128 -I csrc \
//        benchmarks/lab/skinny_lab.cu -o skinny_lab && ./skinny_lab [one ROWS | pattern | deep | prefetch]
//
// Method as the benchmarks: a CUDA graph of launches rotating over weight copies whose total
// exceeds 3x L2 (cold weights), median of replays; the streaming-read ceiling in the same process.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "lab_common.cuh"
#include "common/launch.cuh"
#include "gemm/nvfp4_linear_kernel.cuh"
#include "gemm/nvfp4_stream_kernel.cuh"

using namespace qwen38;
using namespace qwen38::gemm;
using bf16 = __nv_bfloat16;

namespace {

using lab::bulk_copy;
using lab::lds128;
using lab::mbar_expect;
using lab::mbar_init;
using lab::mbar_wait;
using lab::mix;
using lab::read_kernel;
using lab::tensor_copy;
using lab::time_graph;

// kind 0: random bytes (e2m1 nibbles); 1: e4m3 scales in [2^-4, 2^3) (finite, nonzero);
// 2: bf16 activations in [-2, 2); 3: zeros
__global__ void fill_kernel(uint8_t* p, size_t n, uint32_t seed, int kind) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint32_t h = mix(i, seed);
    uint8_t v = uint8_t(h);
    if (kind == 1) v = uint8_t(((3 + (h >> 8) % 7) << 3) | (h & 7));
    if (kind == 2) v = (i & 1) ? uint8_t((h & 0x80u) | 0x3fu) : uint8_t(h);  // bf16 high byte 0x3f/0xbf
    if (kind == 3) v = 0;
    p[i] = v;
  }
}

void* dalloc(size_t bytes, uint32_t seed, int kind) {
  void* p = nullptr;
  CK(cudaMalloc(&p, bytes));
  fill_kernel<<<1024, 256>>>(static_cast<uint8_t*>(p), bytes, seed, kind);
  CK(cudaGetLastError());
  return p;
}

// ---- the candidate: weights straight from global memory into registers ------------------------
// Same work split and k permutation as the landed kernel (warp w of the block takes the contiguous
// steps [S w / KS, S (w+1) / KS) of its 8 NT rows; thread (g, t) the 32 k at 128 s + 32 t), so the
// full mode writes the landed kernel's bits. K is a template parameter: every tile, scale and
// activation offset is an immediate, the loop has no k predicates (K % 128 == 0, N % (8 NT) == 0).
// DEPTH steps of weights are held in registers (loaded DEPTH steps before their use).
struct LabParams {
  const bf16* x;         // [m, K]
  const bf16* zeros;     // K zeros: the activation row of rows >= m (no predicates in the loop)
  const uint8_t* w;      // [N, K/2]
  const uint8_t* scale;  // [N, K/16]
  const float* global;
  bf16* y;  // [m, N]
  int m, n;
};

template <int HINT>
__device__ __forceinline__ uint4 ldw(const uint8_t* p) {
  uint4 v;
  if constexpr (HINT == 1)
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  else if constexpr (HINT == 2)
    asm volatile("ld.global.nc.L1::no_allocate.L2::128B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  else if constexpr (HINT == 3)
    asm volatile("ld.global.cs.nc.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  else
    asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ uint32_t ldsc(const uint8_t* p) {
  unsigned short v;
  asm volatile("ld.global.nc.u16 %0, [%1];" : "=h"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ uint4 ldx(const bf16* p) {
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// PF > 0: every 4 steps each of the first 8 NT lanes asks L2 for 4 steps (256 bytes) of one of the
// warp's weight rows PF steps ahead with one cp.async.bulk.prefetch.L2 (the next lanes the rows'
// 32 bytes of scales): the register loads DEPTH steps ahead then find their bytes in L2, and the
// depth in flight costs no registers. Contiguous k splits only (a warp's steps are adjacent).
template <int MODE, int K, int KS, int NT, int DEPTH, int HALVES, int MINB, int HINT, int LATE, int IL, int QO,
          int PF = 0>
__global__ void __launch_bounds__(32 * KS, MINB) cand_kernel(const LabParams p) {
  using D = nvfp4::PairDecode<bf16>;
  constexpr int kSteps = K / kStepK, kSW = kSteps / KS;  // steps per warp (K % (128 KS) == 0)
  constexpr int kRowB = K / 2, kRowS = K / 16;
  static_assert(kSteps % KS == 0 && kSW >= DEPTH && (!QO || HALVES == 2) && (PF == 0 || !IL));
  __shared__ float partial[KS][16][8];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t nb = int64_t(blockIdx.x) * 8 * NT;
  // IL 0: warp w takes the contiguous steps [w S/KS, (w+1) S/KS) (the landed split); IL 1: the
  // steps w, w + KS, w + 2 KS, ... (the block's warps read adjacent 64-byte pieces of a row together)
  const int s0 = IL ? warp : warp * kSW;
  constexpr int kSs = IL ? KS : 1;  // global steps per warp step
  const uint8_t* __restrict__ wp = p.w + (nb + g) * kRowB + 64 * s0 + 16 * t;
  const uint8_t* __restrict__ sp = p.scale + (nb + g) * kRowS + 8 * s0 + 2 * t;
  const bf16* xr[HALVES];
#pragma unroll
  for (int h = 0; h < HALVES; ++h) xr[h] = (g + 8 * h < p.m ? p.x + int64_t(g + 8 * h) * K : p.zeros) + 128 * s0 + 32 * t;

  uint4 wb[DEPTH][NT];
  uint32_t sb[DEPTH][NT];
#pragma unroll
  for (int d = 0; d < DEPTH; ++d)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      wb[d][nt] = ldw<HINT>(wp + nt * 8 * kRowB + 64 * kSs * d);
      sb[d][nt] = ldsc(sp + nt * 8 * kRowS + 8 * kSs * d);
    }
  pdl_wait();
  pdl_allow();

  float acc[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[nt][i] = 0.0f;
  uint32_t sink = 0;
  // rows 9..16 of the m16 tile when HALVES == 1: a zero the compiler cannot see (a literal zero is
  // re-materialized into every A fragment: ~45 moves a step)
  const uint32_t zr = *reinterpret_cast<const uint32_t*>(p.zeros);

  for (int s = 0; s < kSW; s += DEPTH) {
#pragma unroll
    for (int d = 0; d < DEPTH; ++d) {
      if (kSW % DEPTH != 0 && s + d >= kSW) break;
      const int ss = s + d;
      if constexpr (PF > 0) {
        if (ss % 4 == 0 && ss + PF < kSW) {
          const int left = kSW - ss - PF;
          const int steps = left < 4 ? left : 4;
#pragma unroll
          for (int i0 = 0; i0 < 16 * NT; i0 += 32) {
            // index i < 8 NT: 64 bytes a step of weight row i; 8 NT <= i < 16 NT: 8 bytes a step of its scales
            const int i = i0 + lane;
            const bool sc = i >= 8 * NT;
            const int64_t row = nb + (sc ? i - 8 * NT : i);
            const uint8_t* a = sc ? p.scale + row * kRowS + 8 * (s0 + ss + PF) : p.w + row * kRowB + 64 * (s0 + ss + PF);
            const uint32_t bytes = uint32_t(steps) * (sc ? 8u : 64u);
            if (i < 16 * NT && bytes % 16 == 0)
              asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(a), "r"(bytes) : "memory");
          }
        }
      }
      if constexpr (QO && MODE == 2) {
        // q outer, tiles inner: only word q's A fragments (8 registers) live at a time; the
        // activations of word q + 1 load while word q is decoded
        uint4 wq[NT];
        uint32_t sc[NT];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          wq[nt] = wb[d][nt];
          sc[nt] = sb[d][nt];
        }
        if (ss + DEPTH < kSW) {
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            wb[d][nt] = ldw<HINT>(wp + nt * 8 * kRowB + 64 * kSs * (ss + DEPTH));
            sb[d][nt] = ldsc(sp + nt * 8 * kRowS + 8 * kSs * (ss + DEPTH));
          }
        }
        __nv_bfloat162 s2[NT][2];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const __half2 sh = nvfp4::e4m3x2_to_h2(uint16_t(sc[nt]));
          s2[nt][0] = D::scale(__low2half(sh));
          s2[nt][1] = D::scale(__high2half(sh));
        }
        uint4 xn[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) xn[h] = ldx(xr[h] + 128 * kSs * ss);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          uint4 xc[2] = {xn[0], xn[1]};
          if (q < 3) {
#pragma unroll
            for (int h = 0; h < 2; ++h) xn[h] = ldx(xr[h] + 128 * kSs * ss + 8 * (q + 1));
          }
          uint32_t af[2][4];
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            af[0][h] = __byte_perm(xc[h].x, xc[h].z, 0x5410);
            af[0][h + 2] = __byte_perm(xc[h].x, xc[h].z, 0x7632);
            af[1][h] = __byte_perm(xc[h].y, xc[h].w, 0x5410);
            af[1][h + 2] = __byte_perm(xc[h].y, xc[h].w, 0x7632);
          }
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            const uint32_t wr[4] = {wq[nt].x, wq[nt].y, wq[nt].z, wq[nt].w};
            uint32_t b[4];
            nvfp4::decode_word<bf16>(b, wr[q], s2[nt][q < 2 ? 0 : 1]);
            mma_16816<bf16>(acc[nt], af[0], b[0], b[1]);
            mma_16816<bf16>(acc[nt], af[1], b[2], b[3]);
          }
        }
        continue;
      }
      uint32_t xa[2][16];
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          uint4 v = make_uint4(0, 0, 0, 0);
          if (h < HALVES) v = ldx(xr[h] + 128 * kSs * ss + 8 * q);
          xa[h][4 * q] = v.x;
          xa[h][4 * q + 1] = v.y;
          xa[h][4 * q + 2] = v.z;
          xa[h][4 * q + 3] = v.w;
        }
      uint4 wq[NT];
      uint32_t sc[NT];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        wq[nt] = wb[d][nt];
        sc[nt] = sb[d][nt];
      }
      // LATE 0: the refill of this slot goes out before the decode (its registers are copied);
      // 1: tile by tile after the tile's decode (no copies)
      const bool refill = ss + DEPTH < kSW;
      if (!LATE && refill) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          wb[d][nt] = ldw<HINT>(wp + nt * 8 * kRowB + 64 * kSs * (ss + DEPTH));
          sb[d][nt] = ldsc(sp + nt * 8 * kRowS + 8 * kSs * (ss + DEPTH));
        }
      }
      if constexpr (MODE == 0) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          sink ^= wq[nt].x ^ wq[nt].y ^ wq[nt].z ^ wq[nt].w ^ sc[nt];
          if (LATE && refill) {
            wb[d][nt] = ldw<HINT>(wp + nt * 8 * kRowB + 64 * kSs * (ss + DEPTH));
            sb[d][nt] = ldsc(sp + nt * 8 * kRowS + 8 * kSs * (ss + DEPTH));
          }
        }
#pragma unroll
        for (int h = 0; h < HALVES; ++h)
#pragma unroll
          for (int i = 0; i < 16; ++i) sink ^= xa[h][i];
        continue;
      }
      // re-pair the activations (i, i+4) as the weight pairs, straight into the A fragments of the
      // step's 8 mmas (rows g | g+8, k slots 2t.. | 2t+8..): af[j] = {h0 (4q+2r), h1 (..), h0 (4q+2r+1), h1}
      uint32_t af[8][4];
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          if (h >= HALVES) {  // an opaque zero: a literal 0 is re-materialized into every fragment
            af[2 * q][h] = af[2 * q][h + 2] = af[2 * q + 1][h] = af[2 * q + 1][h + 2] = zr;
            continue;
          }
          const uint32_t r0 = xa[h][4 * q], r1 = xa[h][4 * q + 1], r2 = xa[h][4 * q + 2], r3 = xa[h][4 * q + 3];
          af[2 * q][h] = __byte_perm(r0, r2, 0x5410);
          af[2 * q][h + 2] = __byte_perm(r0, r2, 0x7632);
          af[2 * q + 1][h] = __byte_perm(r1, r3, 0x5410);
          af[2 * q + 1][h + 2] = __byte_perm(r1, r3, 0x7632);
        }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const __half2 sh = nvfp4::e4m3x2_to_h2(uint16_t(sc[nt]));
        const __nv_bfloat162 s_lo = D::scale(__low2half(sh)), s_hi = D::scale(__high2half(sh));
        const uint32_t wr[4] = {wq[nt].x, wq[nt].y, wq[nt].z, wq[nt].w};
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          uint32_t b[4];
          nvfp4::decode_word<bf16>(b, wr[q], q < 2 ? s_lo : s_hi);
          if constexpr (MODE == 1) {
            sink ^= b[0] ^ b[1] ^ b[2] ^ b[3];
          } else {
#pragma unroll
            for (int r = 0; r < 2; ++r) {
              mma_16816<bf16>(acc[nt], af[2 * q + r], b[2 * r], b[2 * r + 1]);
            }
          }
        }
        if (LATE && refill) {
          wb[d][nt] = ldw<HINT>(wp + nt * 8 * kRowB + 64 * kSs * (ss + DEPTH));
          sb[d][nt] = ldsc(sp + nt * 8 * kRowS + 8 * kSs * (ss + DEPTH));
        }
      }
      if constexpr (MODE == 1) {
#pragma unroll
        for (int j = 0; j < 8; ++j) sink ^= af[j][0] ^ af[j][1] ^ af[j][2] ^ af[j][3];
      }
    }
  }
  if constexpr (MODE != 2) {
    if (sink == 0x9e3779b9u) p.y[threadIdx.x] = __float2bfloat16(1.0f);
    return;
  } else {
    const float gscale = *p.global;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const float(&a1)[1][4] = reinterpret_cast<const float(&)[1][4]>(acc[nt]);
      reduce_and_store<1, KS>(reinterpret_cast<float(&)[KS][16][8]>(partial), a1, warp, g, t, nvfp4::kPairUnscale,
                              gscale, nullptr, 0, p.y, 0, p.m, p.n, nb + 8 * nt);
    }
  }
}


// ---- the bulk-fed candidate: weights through per-warp rings of cp.async.bulk copies ------------
// The register-stream kernel's arithmetic, k split and per-thread words exactly (so its bits), but
// each warp's weight rows reach shared memory through bulk copies (one lane a row, 64 C bytes a
// copy = C steps) into a ring of D stages with one mbarrier each; the warp reads its 16 bytes a
// tile and step back with one LDS.128. Bytes in flight cost no registers. The stage's row stride
// is 64 C: with C odd it is 64 mod 128, so the 8 lanes of an LDS.128 phase (rows g, g + 1, t 0..3)
// hit 8 different 16-byte bank groups. Scales and activations as the stream kernel (registers).
// MODE 0: waits + LDS only (XOR-folded): the feed alone; MODE 2: the whole kernel.
template <int K, int KS, int NT, int C, int D>
constexpr int bulk_smem() { return KS * D * 8 * NT * 64 * C; }

template <int MODE, int K, int KS, int NT, int MT, int C, int D, int MINB, int TM>
__global__ void __launch_bounds__(32 * KS, MINB) bulk_kernel(const Nvfp4Params p, const __grid_constant__ CUtensorMap map) {
  using PD = nvfp4::PairDecode<bf16>;
  constexpr int kSteps = K / kStepK, kSW = kSteps / KS;
  constexpr int kRowB = K / 2, kRowS = K / 16;
  constexpr int kRows = 8 * NT, kStride = 64 * C, kStage = kRows * kStride;
  constexpr int kChunks = (kSW + C - 1) / C;
  constexpr int kSD = 2;  // scale registers ahead
  static_assert(kSteps % KS == 0 && kRows <= 32 && (C % 2 == 1));
  extern __shared__ __align__(128) uint8_t ring_smem[];
  __shared__ float partial[KS][MT * 16][8];
  __shared__ __align__(8) uint64_t bars[KS][D];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t nb = int64_t(blockIdx.x) * kRows;
  const int s0 = warp * kSW;
  const uint32_t ring = smem_addr(ring_smem) + uint32_t(warp * D * kStage);
  const uint32_t bar0 = smem_addr(&bars[warp][0]);
  if (lane == 0)
    for (int d = 0; d < D; ++d) mbar_init(bar0 + 8 * d, 1);
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncwarp();
  const uint8_t* __restrict__ wrow = p.w + (nb + lane) * kRowB + 64 * s0;  // lane = row (lane < kRows)
  auto issue = [&](int j) {
    const int st = j % D;
    const int steps = kSW - j * C < C ? kSW - j * C : C;
    const uint32_t bytes = uint32_t(64 * steps);
    if constexpr (TM) {  // one 2-D box of the weight tensor (uint16 elements): kRows rows x 64 C bytes
      if (lane == 0) {
        mbar_expect(bar0 + 8 * st, uint32_t(kStage));
        tensor_copy(ring + st * kStage, &map, 32 * (s0 + C * j), int(nb), bar0 + 8 * st);
      }
    } else {
      if (lane == 0) mbar_expect(bar0 + 8 * st, bytes * kRows);
      __syncwarp();
      if (lane < kRows) bulk_copy(ring + st * kStage + lane * kStride, wrow + 64 * C * j, bytes, bar0 + 8 * st);
    }
  };
#pragma unroll
  for (int j = 0; j < D && j < kChunks; ++j) issue(j);

  const uint8_t* __restrict__ sp = p.scale + (nb + g) * kRowS + 8 * s0 + 2 * t;
  constexpr int kH = 2 * MT;
  const bf16* xr[kH];
  stream::activation_rows(xr, p.x, p.m, p.x_stride, g, 128 * s0 + 32 * t);
  uint32_t sb[kSD][NT];
#pragma unroll
  for (int d = 0; d < kSD; ++d)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) sb[d][nt] = stream::load_scale2(sp + nt * 8 * kRowS + 8 * d);
  pdl_wait();
  pdl_allow();

  float acc[NT][MT][4];
  stream::zero_fill(acc);
  uint32_t fold = 0;
  // steps in runtime order, unrolled by two (the scale registers' parity); chunk j = ss / C waits
  // for its stage at its first step and hands the stage back (refill with chunk j + D) after its last
  for (int s = 0; s < kSW; s += kSD) {
#pragma unroll
    for (int d = 0; d < kSD; ++d) {
      const int ss = s + d;
      if (kSW % kSD != 0 && ss >= kSW) break;
      const int j = ss / C, c = ss - j * C, st = j % D;
      if (c == 0) mbar_wait(bar0 + 8 * st, (j / D) & 1);
      const uint32_t base = ring + st * kStage + g * kStride + 16 * t + 64 * c;
      uint4 wq[NT];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) wq[nt] = lds128(base + nt * 8 * kStride);
      if constexpr (MODE == 0) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) fold ^= wq[nt].x ^ wq[nt].y ^ wq[nt].z ^ wq[nt].w;
      } else {
        uint32_t sc[NT];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) sc[nt] = sb[d][nt];
        if (ss + kSD < kSW) {
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) sb[d][nt] = stream::load_scale2(sp + nt * 8 * kRowS + 8 * (ss + kSD));
        }
        typename PD::T2 s2[NT][2];
        stream::nvfp4_scales<bf16, NT>(s2, sc);
        uint4 xn[kH];
#pragma unroll
        for (int h = 0; h < kH; ++h) xn[h] = stream::load_x(xr[h] + 128 * ss);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          uint4 xc[kH];
#pragma unroll
          for (int h = 0; h < kH; ++h) xc[h] = xn[h];
          if (q < 3) {
#pragma unroll
            for (int h = 0; h < kH; ++h) xn[h] = stream::load_x(xr[h] + 128 * ss + 8 * (q + 1));
          }
          uint32_t af[MT][2][4];
          stream::nvfp4_a_fragments<MT>(af, xc);
          stream::nvfp4_word_mmas<bf16, NT, MT>(acc, af, wq, s2, q);
        }
      }
      if (c == C - 1 || ss == kSW - 1) {
        __syncwarp();
        if (j + D < kChunks) issue(j + D);
      }
    }
  }
  if constexpr (MODE == 0) {
    if (fold == 0x12345678u) static_cast<bf16*>(p.y)[0] = bf16(0.f);
    return;
  } else {
    const float gscale = *p.global;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
      reduce_and_store<MT, KS>(partial, acc[nt], warp, g, t, nvfp4::kPairUnscale, gscale, nullptr, 0, p.y, 0, p.m,
                               p.n, nb + 8 * nt);
  }
}

// ---- cases -------------------------------------------------------------------------------------
struct Case {
  int n, k, m;
  int copies;
  std::vector<uint8_t*> w, s;
  bf16* x;
  bf16* zeros;
  float* global;
  bf16* y;
  double bytes() const { return double(n) * k / 2 + double(n) * k / 16 + 2.0 * m * (k + n); }
};

double g_ceiling = 0;

Case make_case(int n, int k, int m, size_t l2) {
  Case c{n, k, m, 0, {}, {}, nullptr, nullptr, nullptr, nullptr};
  const size_t per = size_t(n) * k / 2 + size_t(n) * k / 16;
  c.copies = int(std::max<size_t>(2, (3 * l2 + per - 1) / per));
  for (int i = 0; i < c.copies; ++i) {
    c.w.push_back(static_cast<uint8_t*>(dalloc(size_t(n) * k / 2, 17 + i, 0)));
    c.s.push_back(static_cast<uint8_t*>(dalloc(size_t(n) * k / 16, 71 + i, 1)));
  }
  c.x = static_cast<bf16*>(dalloc(size_t(32) * k * 2, 5, 2));
  c.zeros = static_cast<bf16*>(dalloc(size_t(k) * 2, 0, 3));
  c.y = static_cast<bf16*>(dalloc(size_t(32) * n * 2, 0, 3));
  CK(cudaMalloc(&c.global, 4));
  const float gs = 0.5f;
  CK(cudaMemcpy(c.global, &gs, 4, cudaMemcpyHostToDevice));
  CK(cudaDeviceSynchronize());
  return c;
}
void free_case(Case& c) {
  for (auto p : c.w) CK(cudaFree(p));
  for (auto p : c.s) CK(cudaFree(p));
  CK(cudaFree(c.x));
  CK(cudaFree(c.zeros));
  CK(cudaFree(c.y));
  CK(cudaFree(c.global));
}

std::vector<uint8_t> read_y(const Case& c) {
  std::vector<uint8_t> out(size_t(c.m) * c.n * 2);
  CK(cudaMemcpy(out.data(), c.y, out.size(), cudaMemcpyDeviceToHost));
  return out;
}

void report(const Case& c, const char* label, float us, int regs, int per_sm, int threads, long long grid,
            const char* bits) {
  const double gbs = c.bytes() / (us * 1e3);
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::printf("  %-40s %8.2f us %6.0f GB/s %5.1f%%  regs %3d  %2d blk/SM x %3d thr  grid %5lld (%.2f waves)  %s\n",
              label, us, gbs, 100.0 * gbs / g_ceiling, regs, per_sm, threads, grid,
              double(grid) / (double(sms) * std::max(per_sm, 1)), bits);
}

// the landed kernel (its default ring depth and L2 span), the bits reference
template <int KS, int NT>
void run_landed(Case& c, std::vector<uint8_t>& ref) {
  auto kernel = nvfp4_skinny_kernel<bf16, 1, KS, NT>;
  size_t room = 0;
  CK(dynamic_smem_room(kernel, &room));
  int depth = 1 + (96 + 16 * NT - 1) / (16 * NT);
  depth = std::clamp(depth, 2, 8);
  const size_t smem = nvfp4_ring_bytes(depth, NT, KS);
  auto params = [&](int i) {
    Nvfp4Params p;
    p.x = c.x;
    p.w = c.w[i];
    p.scale = c.s[i];
    p.global = c.global;
    p.y = c.y;
    p.m = c.m;
    p.n = c.n;
    p.k = c.k;
    p.x_stride = c.k;
    p.out = 0;
    p.depth = depth;
    p.l2span = 128;
    return p;
  };
  const unsigned grid = unsigned((c.n + 8 * NT - 1) / (8 * NT));
  auto launch = [&](int i, cudaStream_t s) { kernel<<<grid, 32 * KS, smem, s>>>(params(i % c.copies)); };
  const float us = time_graph(std::max(4 * c.copies, 24), launch);
  CK(cudaGetLastError());
  launch(0, 0);
  CK(cudaDeviceSynchronize());
  ref = read_y(c);
  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 32 * KS, smem));
  cudaFuncAttributes fa{};
  CK(cudaFuncGetAttributes(&fa, kernel));
  char label[64];
  std::snprintf(label, sizeof label, "landed ks%d nt%d depth%d", KS, NT, depth);
  report(c, label, us, fa.numRegs, per_sm, 32 * KS, grid, "reference");
}

// the register-stream kernel as the extension builds it
// BPS > 0: at most BPS blocks per SM, through a dynamic shared-memory pad (same code, same bits)
template <int K, int KS, int NT, int BPS = 0>
void run_stream(Case& c, const std::vector<uint8_t>& ref) {
  if (c.k != K || c.n % (8 * NT) != 0 || c.m > 16) return;
  auto kernel = nvfp4_stream_kernel<bf16, K, KS, NT, 1>;
  cudaFuncAttributes fa0{};
  CK(cudaFuncGetAttributes(&fa0, kernel));
  int pad = 0;
  if (BPS > 0) {
    int per_sm_smem = 0;
    CK(cudaDeviceGetAttribute(&per_sm_smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0));
    pad = per_sm_smem / (BPS + 1) - int(fa0.sharedSizeBytes) - 1024 + 256;
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, pad));
  }
  Nvfp4Params base;
  base.x = c.x;
  base.global = c.global;
  base.y = c.y;
  base.m = c.m;
  base.n = c.n;
  base.k = c.k;
  base.x_stride = c.k;
  const unsigned grid = unsigned(c.n / (8 * NT));
  CK(cudaMemset(c.y, 0, size_t(c.m) * c.n * 2));
  auto launch = [&](int i, cudaStream_t s) {
    Nvfp4Params p = base;
    p.w = c.w[i % c.copies];
    p.scale = c.s[i % c.copies];
    kernel<<<grid, 32 * KS, pad, s>>>(p);
  };
  const float us = time_graph(std::max(4 * c.copies, 24), launch);
  CK(cudaGetLastError());
  launch(0, 0);
  CK(cudaDeviceSynchronize());
  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 32 * KS, pad));
  cudaFuncAttributes fa{};
  CK(cudaFuncGetAttributes(&fa, kernel));
  char label[64];
  std::snprintf(label, sizeof label, "stream (extension) ks%d nt%d%s", KS, NT, BPS ? " capped" : "");
  report(c, label, us, fa.numRegs, per_sm, 32 * KS, grid, read_y(c) == ref ? "same bits" : "BITS DIFFER");
}

template <int MODE, int K, int KS, int NT, int DEPTH, int HALVES, int MINB, int HINT, int LATE = 0, int IL = 0, int QO = 0,
          int PF = 0>
void run_cand(Case& c, const std::vector<uint8_t>& ref) {
  if (c.k != K) return;
  auto kernel = cand_kernel<MODE, K, KS, NT, DEPTH, HALVES, MINB, HINT, LATE, IL, QO, PF>;
  auto params = [&](int i) {
    LabParams p;
    p.x = c.x;
    p.zeros = c.zeros;
    p.w = c.w[i];
    p.scale = c.s[i];
    p.global = c.global;
    p.y = c.y;
    p.m = c.m;
    p.n = c.n;
    return p;
  };
  if (c.n % (8 * NT) != 0 || (HALVES == 1 && c.m > 8)) return;
  const unsigned grid = unsigned(c.n / (8 * NT));
  CK(cudaMemset(c.y, 0, size_t(c.m) * c.n * 2));
  auto launch = [&](int i, cudaStream_t s) { kernel<<<grid, 32 * KS, 0, s>>>(params(i % c.copies)); };
  const float us = time_graph(std::max(4 * c.copies, 24), launch);
  CK(cudaGetLastError());
  const char* bits = "-";
  if (MODE == 2) {
    launch(0, 0);
    CK(cudaDeviceSynchronize());
    bits = read_y(c) == ref ? "same bits" : "BITS DIFFER";
  }
  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 32 * KS, 0));
  cudaFuncAttributes fa{};
  CK(cudaFuncGetAttributes(&fa, kernel));
  static const char* modes[] = {"loads", "loads+decode", "full"};
  static const char* hints[] = {"nc", "L1na.L2:256", "L1na.L2:128", "cs.L2:256"};
  char label[96];
  char pf[16] = "";
  if (PF) std::snprintf(pf, sizeof pf, " pf%d", PF);
  std::snprintf(label, sizeof label, "%s ks%d nt%d d%d h%d minb%d %s%s%s%s%s", modes[MODE], KS, NT, DEPTH, HALVES, MINB,
                hints[HINT], LATE ? " late" : "", IL ? " interleaved" : "", QO ? " q-outer" : "", pf);
  report(c, label, us, fa.numRegs, per_sm, 32 * KS, grid, bits);
}


// the weight tensor [N, K/2] bytes as uint16 elements [N, K/4], boxes of rows x 32 C elements
CUtensorMap weight_map(const uint8_t* w, int n, int k, int rows, int c) {
  return lab::tensor_map_2d(w, CU_TENSOR_MAP_DATA_TYPE_UINT16, n, k / 4, k / 2, rows, 32 * c, CU_TENSOR_MAP_SWIZZLE_NONE);
}

template <int MODE, int K, int KS, int NT, int MT, int C, int D, int MINB, int TM = 1>
void run_bulk(Case& c, const std::vector<uint8_t>& ref) {
  if (c.k != K || c.n % (8 * NT) != 0 || (MT == 1 && c.m > 16)) return;
  auto kernel = bulk_kernel<MODE, K, KS, NT, MT, C, D, MINB, TM>;
  std::vector<CUtensorMap> maps;
  for (int i = 0; i < c.copies; ++i) maps.push_back(weight_map(c.w[i], c.n, c.k, 8 * NT, C));
  constexpr int smem = bulk_smem<K, KS, NT, C, D>();
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  Nvfp4Params base;
  base.x = c.x;
  base.global = c.global;
  base.y = c.y;
  base.m = c.m;
  base.n = c.n;
  base.k = c.k;
  base.x_stride = c.k;
  const unsigned grid = unsigned(c.n / (8 * NT));
  CK(cudaMemset(c.y, 0, size_t(c.m) * c.n * 2));
  auto launch = [&](int i, cudaStream_t s) {
    Nvfp4Params p = base;
    p.w = c.w[i % c.copies];
    p.scale = c.s[i % c.copies];
    kernel<<<grid, 32 * KS, smem, s>>>(p, maps[i % c.copies]);
  };
  const float us = time_graph(std::max(4 * c.copies, 24), launch);
  CK(cudaGetLastError());
  const char* bits = "-";
  if (MODE == 2) {
    launch(0, 0);
    CK(cudaDeviceSynchronize());
    bits = read_y(c) == ref ? "same bits" : "BITS DIFFER";
  }
  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 32 * KS, smem));
  cudaFuncAttributes fa{};
  CK(cudaFuncGetAttributes(&fa, kernel));
  char label[96];
  std::snprintf(label, sizeof label, "%s %s ks%d nt%d mt%d C%d D%d (%d KB) minb%d", TM ? "tmap" : "bulk",
                MODE == 0 ? "loads" : "full", KS, NT, MT, C, D, smem >> 10, MINB);
  report(c, label, us, fa.numRegs, per_sm, 32 * KS, grid, bits);
}

// One case of a mode: make it, print its header, run `body(c, ref)` (the first full run writes
// the bits reference), free it.
template <typename F>
void with_case(int n, int k, int m, size_t l2, F&& body) {
  Case c = make_case(n, k, m, l2);
  std::printf("%dx%d, %d rows (%d copies)\n", n, k, m, c.copies);
  std::vector<uint8_t> ref;
  body(c, ref);
  free_case(c);
}

}  // namespace

int main(int argc, char** argv) {
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  const size_t l2 = size_t(prop.l2CacheSize);
  std::printf("device %s, %d SMs, L2 %zu MB\n", prop.name, prop.multiProcessorCount, l2 >> 20);
  {
    const size_t rb = size_t(2) << 30;
    void* big = dalloc(rb, 3, 0);
    unsigned* sink = nullptr;
    CK(cudaMalloc(&sink, 4));
    const float rus = time_graph(6, [&](int, cudaStream_t s) {
      read_kernel<<<prop.multiProcessorCount * 8, 512, 0, s>>>(static_cast<const uint4*>(big), rb / 16, sink);
    });
    g_ceiling = double(rb) / (rus * 1e3);
    std::printf("read ceiling %.0f GB/s\n", g_ceiling);
    CK(cudaFree(big));
    CK(cudaFree(sink));
  }
  if (argc > 1 && std::strcmp(argv[1], "one") == 0) {  // one launch of the default candidate (for ncu)
    const int m = argc > 2 ? std::atoi(argv[2]) : 1;
    Case c = make_case(34816, 5120, m, l2);
    std::vector<uint8_t> ref;
    run_landed<2, 4>(c, ref);
    run_cand<2, 5120, 2, 4, 2, 2, 1, 1>(c, ref);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "nt8") == 0) {
    // session 11, for the next device session: the stream form (q outer, contiguous k splits: the
    // landed bits) with 8 tiles a warp, so one activation load and its re-pairing serve 64 weight
    // rows (~15% fewer instructions a weight), at 1 or 2 steps of weights in registers
    for (int n : {34816, 16384, 12288})
      for (int m : {1, 16})
        with_case(n, 5120, m, l2, [&](Case& c, std::vector<uint8_t>& ref) {
          run_landed<4, 4>(c, ref);
          run_stream<5120, 4, 4>(c, ref);
          run_cand<2, 5120, 4, 4, 2, 2, 1, 1, 0, 0, 1>(c, ref);
          run_cand<2, 5120, 4, 8, 1, 2, 2, 1, 0, 0, 1>(c, ref);
          run_cand<2, 5120, 4, 8, 1, 2, 3, 1, 0, 0, 1>(c, ref);
          run_cand<2, 5120, 4, 8, 2, 2, 1, 1, 0, 0, 1>(c, ref);
          run_cand<2, 5120, 4, 8, 2, 2, 2, 1, 0, 0, 1>(c, ref);
        });
    for (int m : {1, 16})
      with_case(5120, 17408, m, l2, [&](Case& c, std::vector<uint8_t>& ref) {
        run_landed<8, 4>(c, ref);
        run_stream<17408, 8, 4>(c, ref);
        run_cand<2, 17408, 8, 8, 1, 2, 1, 1, 0, 0, 1>(c, ref);
        run_cand<2, 17408, 8, 8, 2, 2, 1, 1, 0, 0, 1>(c, ref);
      });
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "bps") == 0) {
    // session 11: the stream kernel (128 registers since the multiply decode: up to 4 blocks of
    // 128 threads per SM) capped at 4 / 3 / 2 blocks per SM, K = 5120 shapes at 1 and 16 rows
    for (int n : {34816, 17408, 16384, 14336, 12288, 10240, 6144})
      for (int m : {1, 16})
        with_case(n, 5120, m, l2, [&](Case& c, std::vector<uint8_t>& ref) {
          run_landed<4, 4>(c, ref);
          run_stream<5120, 4, 4>(c, ref);
          run_stream<5120, 4, 4, 3>(c, ref);
          run_stream<5120, 4, 4, 2>(c, ref);
        });
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "bulkone") == 0) {  // for ncu: the stream kernel and one bulk form
    Case c = make_case(34816, 5120, 1, l2);
    std::vector<uint8_t> ref;
    run_landed<4, 4>(c, ref);
    run_stream<5120, 4, 4>(c, ref);
    run_bulk<2, 5120, 4, 4, 1, 1, 6, 3>(c, ref);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "bulk") == 0) {
    // session 11: the bulk-fed candidate (the stream kernel's bits) against the stream kernel, at
    // the tables' variants. Per-lane row copies (bulk, TM 0) cost a uniform-register loop a copy
    // (skinny_lab_8); one tensor-map box a chunk (tmap) is one instruction.
    for (int m : {1, 16})
      with_case(34816, 5120, m, l2, [&](Case& c, std::vector<uint8_t>& ref) {
        run_landed<4, 4>(c, ref);
        run_stream<5120, 4, 4>(c, ref);
        run_bulk<0, 5120, 4, 4, 1, 5, 2, 1>(c, ref);
        run_bulk<0, 5120, 4, 4, 1, 1, 4, 1>(c, ref);
        run_bulk<0, 5120, 4, 4, 1, 1, 8, 1>(c, ref);
        run_bulk<2, 5120, 4, 4, 1, 5, 2, 2>(c, ref);
        run_bulk<2, 5120, 4, 4, 1, 1, 4, 3>(c, ref);
        run_bulk<2, 5120, 4, 4, 1, 1, 6, 3>(c, ref);
        run_bulk<2, 5120, 4, 4, 1, 1, 8, 2>(c, ref);
        run_bulk<2, 5120, 4, 2, 1, 5, 2, 4>(c, ref);
        run_bulk<2, 5120, 4, 2, 1, 1, 8, 4>(c, ref);
        run_bulk<2, 5120, 2, 4, 1, 5, 2, 5>(c, ref);
        run_bulk<2, 5120, 2, 4, 1, 1, 8, 4>(c, ref);
      });
    with_case(34816, 5120, 32, l2, [&](Case& c, std::vector<uint8_t>& ref) {
      run_landed<4, 4>(c, ref);
      run_bulk<2, 5120, 4, 4, 2, 5, 2, 2>(c, ref);
      run_bulk<2, 5120, 4, 4, 2, 1, 6, 2>(c, ref);
      run_bulk<2, 5120, 4, 4, 2, 1, 8, 2>(c, ref);
    });
    for (int m : {1, 16})
      with_case(5120, 17408, m, l2, [&](Case& c, std::vector<uint8_t>& ref) {
        run_landed<8, 4>(c, ref);
        run_stream<17408, 8, 4>(c, ref);
        run_bulk<2, 17408, 8, 4, 1, 1, 4, 1>(c, ref);
        run_bulk<2, 17408, 8, 2, 1, 1, 6, 2>(c, ref);
        run_bulk<2, 17408, 8, 2, 1, 1, 8, 2>(c, ref);
      });
    for (int m : {1, 16})
      with_case(12288, 5120, m, l2, [&](Case& c, std::vector<uint8_t>& ref) {
        run_landed<4, 4>(c, ref);
        run_stream<5120, 4, 4>(c, ref);
        run_bulk<2, 5120, 4, 4, 1, 5, 2, 2>(c, ref);
        run_bulk<2, 5120, 4, 4, 1, 1, 6, 3>(c, ref);
        run_bulk<2, 5120, 4, 2, 1, 1, 8, 4>(c, ref);
      });
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "pattern") == 0) {
    // the loads alone (mode 0), 1 row: does the 8-rows x 64-byte pattern or the bytes in flight
    // cap them (~78% of the ceiling at depth 2)? Deeper rings with nothing else live, contiguous
    // and interleaved k splits, 2 and 4 tiles per warp (session 7: skinny_lab_4_pattern.txt)
    with_case(34816, 5120, 1, l2, [&](Case& c, std::vector<uint8_t>& ref) {  // loads only
      run_landed<2, 4>(c, ref);
      run_cand<0, 5120, 2, 4, 2, 1, 1, 1>(c, ref);
      run_cand<0, 5120, 2, 4, 4, 1, 1, 1>(c, ref);
      run_cand<0, 5120, 2, 2, 4, 1, 1, 1>(c, ref);
      run_cand<0, 5120, 2, 2, 8, 1, 1, 1>(c, ref);
      run_cand<0, 5120, 4, 2, 4, 1, 1, 1>(c, ref);
      run_cand<0, 5120, 4, 2, 8, 1, 1, 1>(c, ref);
      run_cand<0, 5120, 4, 2, 4, 1, 1, 1, 0, 1>(c, ref);
      run_cand<0, 5120, 4, 2, 8, 1, 1, 1, 0, 1>(c, ref);
      run_cand<0, 5120, 8, 1, 5, 1, 1, 1>(c, ref);
      run_cand<0, 5120, 8, 1, 5, 1, 1, 1, 0, 1>(c, ref);
      run_cand<0, 5120, 8, 2, 5, 1, 1, 1, 0, 1>(c, ref);
      run_cand<0, 5120, 4, 4, 4, 1, 1, 1, 0, 1>(c, ref);
    });
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "deep") == 0) {
    // the whole kernel with the pattern mode's winners: interleaved k splits, 3-4 steps of weights
    // in flight, 8-16 warps per SM (other bits than the ring kernel: a candidate for the next
    // version, with the ring and stream kernels moved to the same order)
    for (int m : {1, 16})
      with_case(34816, 5120, m, l2, [&](Case& c, std::vector<uint8_t>& ref) {
        run_landed<2, 4>(c, ref);
        run_stream<5120, 2, 4>(c, ref);
        run_cand<0, 5120, 4, 4, 4, 1, 1, 1, 0, 1>(c, ref);
        run_cand<2, 5120, 4, 4, 4, 2, 2, 1, 0, 1, 1>(c, ref);
        run_cand<2, 5120, 4, 4, 4, 2, 3, 1, 0, 1, 1>(c, ref);
        run_cand<2, 5120, 4, 4, 3, 2, 3, 1, 0, 1, 1>(c, ref);
        run_cand<2, 5120, 4, 4, 4, 2, 3, 1, 0, 0, 1>(c, ref);
        run_cand<2, 5120, 4, 4, 4, 2, 3, 1, 1, 1, 0>(c, ref);
        run_cand<2, 5120, 4, 4, 3, 2, 3, 1, 1, 1, 0>(c, ref);
        run_cand<2, 5120, 2, 4, 4, 2, 6, 1, 1, 1, 0>(c, ref);
        run_cand<2, 5120, 4, 2, 6, 2, 4, 1, 0, 1, 1>(c, ref);
        run_cand<2, 5120, 4, 2, 4, 2, 4, 1, 0, 1, 1>(c, ref);
        run_cand<2, 5120, 2, 4, 4, 2, 4, 1, 0, 1, 1>(c, ref);
        run_cand<2, 5120, 8, 2, 4, 2, 2, 1, 0, 1, 1>(c, ref);
      });
    for (int m : {1, 16})
      with_case(5120, 17408, m, l2, [&](Case& c, std::vector<uint8_t>& ref) {
        run_landed<8, 2>(c, ref);
        run_stream<17408, 8, 4>(c, ref);
        run_cand<0, 17408, 8, 2, 4, 1, 1, 1, 0, 1>(c, ref);
        run_cand<2, 17408, 8, 2, 4, 2, 2, 1, 0, 1, 1>(c, ref);
        run_cand<2, 17408, 8, 2, 4, 2, 1, 1, 0, 1, 1>(c, ref);
        run_cand<2, 17408, 8, 4, 3, 2, 1, 1, 0, 1, 1>(c, ref);
        run_cand<2, 17408, 4, 4, 4, 2, 3, 1, 0, 1, 1>(c, ref);
        run_cand<2, 17408, 8, 2, 6, 2, 1, 1, 0, 1, 1>(c, ref);
        run_cand<2, 17408, 8, 4, 4, 2, 1, 1, 1, 1, 0>(c, ref);
        run_cand<2, 17408, 4, 4, 4, 2, 3, 1, 1, 1, 0>(c, ref);
      });
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "prefetch") == 0) {
    // the landed stream kernel's candidate (contiguous splits: the ring kernel's bits) with bulk L2
    // prefetches PF steps ahead of the register loads
    for (int m : {1, 16})
      with_case(34816, 5120, m, l2, [&](Case& c, std::vector<uint8_t>& ref) {
        run_landed<2, 4>(c, ref);
        run_stream<5120, 2, 4>(c, ref);
        run_cand<2, 5120, 2, 4, 2, 2, 1, 1, 0, 0, 1>(c, ref);
        run_cand<2, 5120, 2, 4, 2, 2, 1, 1, 0, 0, 1, 4>(c, ref);
        run_cand<2, 5120, 2, 4, 2, 2, 1, 1, 0, 0, 1, 6>(c, ref);
        run_cand<2, 5120, 2, 4, 2, 2, 1, 1, 0, 0, 1, 8>(c, ref);
        run_cand<2, 5120, 2, 4, 2, 2, 1, 1, 0, 0, 1, 12>(c, ref);
        run_cand<2, 5120, 2, 2, 2, 2, 1, 1, 0, 0, 1, 8>(c, ref);
        run_cand<2, 5120, 4, 4, 2, 2, 1, 1, 0, 0, 1, 6>(c, ref);
        run_cand<0, 5120, 2, 4, 2, 1, 1, 1, 0, 0, 0, 8>(c, ref);
      });
    for (int m : {1, 16})
      with_case(5120, 17408, m, l2, [&](Case& c, std::vector<uint8_t>& ref) {
        run_landed<8, 2>(c, ref);
        run_stream<17408, 8, 4>(c, ref);
        run_cand<2, 17408, 8, 2, 2, 2, 1, 1, 0, 0, 1, 4>(c, ref);
        run_cand<2, 17408, 8, 4, 2, 2, 1, 1, 0, 0, 1>(c, ref);
        run_cand<2, 17408, 8, 4, 2, 2, 1, 1, 0, 0, 1, 4>(c, ref);
        run_cand<2, 17408, 8, 4, 2, 2, 1, 1, 0, 0, 1, 8>(c, ref);
      });
    for (int m : {1, 16})
      with_case(6144, 5120, m, l2, [&](Case& c, std::vector<uint8_t>& ref) {
        run_landed<8, 2>(c, ref);
        run_stream<5120, 8, 4>(c, ref);
        run_cand<2, 5120, 8, 4, 2, 2, 1, 1, 0, 0, 1>(c, ref);
        run_cand<2, 5120, 8, 4, 2, 2, 1, 1, 0, 0, 1, 4>(c, ref);
      });
    return 0;
  }
  const int rows[] = {1, 8, 16};
  // <MODE, K, KS, NT, DEPTH, HALVES, MINB, HINT, LATE = 0, IL = 0, QO = 0>; HINT 1 = L1::no_allocate + L2::256B
  for (int m : rows)
    with_case(34816, 5120, m, l2, [&](Case& c, std::vector<uint8_t>& ref) {  // gate+up (landed: ks2 nt4)
        run_landed<2, 4>(c, ref);
        run_stream<5120, 2, 4>(c, ref);
        run_cand<2, 5120, 2, 4, 2, 2, 1, 1>(c, ref);
        run_cand<2, 5120, 2, 4, 2, 2, 1, 1, 0, 0, 1>(c, ref);
        run_cand<2, 5120, 2, 4, 2, 2, 6, 1, 0, 0, 1>(c, ref);
        run_cand<2, 5120, 2, 4, 2, 2, 8, 1, 0, 0, 1>(c, ref);
        run_cand<2, 5120, 2, 4, 3, 2, 1, 1, 0, 0, 1>(c, ref);
        run_cand<2, 5120, 2, 4, 3, 2, 6, 1, 0, 0, 1>(c, ref);
        run_cand<2, 5120, 2, 2, 4, 2, 8, 1, 0, 0, 1>(c, ref);
        run_cand<2, 5120, 4, 4, 2, 2, 1, 1>(c, ref);  // ks4: other bits
        run_cand<2, 5120, 4, 4, 2, 2, 1, 1, 0, 0, 1>(c, ref);
        run_cand<2, 5120, 4, 4, 2, 2, 3, 1, 0, 0, 1>(c, ref);
        run_cand<2, 5120, 4, 4, 2, 2, 4, 1, 0, 0, 1>(c, ref);
        run_cand<2, 5120, 4, 4, 3, 2, 3, 1, 0, 0, 1>(c, ref);
        run_cand<2, 5120, 4, 4, 2, 2, 3, 1, 0, 1, 1>(c, ref);
    });
  for (int m : rows)
    with_case(5120, 17408, m, l2, [&](Case& c, std::vector<uint8_t>& ref) {  // down (landed: ks8 nt2)
        run_landed<8, 2>(c, ref);
        run_stream<17408, 8, 4>(c, ref);
        run_cand<2, 17408, 8, 2, 2, 2, 1, 1>(c, ref);
        run_cand<2, 17408, 8, 2, 2, 2, 1, 1, 0, 0, 1>(c, ref);
        run_cand<2, 17408, 8, 2, 2, 2, 3, 1, 0, 0, 1>(c, ref);
        run_cand<2, 17408, 8, 4, 2, 2, 1, 1, 0, 0, 1>(c, ref);
        run_cand<2, 17408, 8, 4, 2, 2, 2, 1, 0, 0, 1>(c, ref);
        run_cand<2, 17408, 8, 2, 3, 2, 2, 1, 0, 0, 1>(c, ref);
        run_cand<2, 17408, 8, 2, 4, 2, 2, 1, 0, 0, 1>(c, ref);
    });
  for (int m : rows)
    with_case(6144, 5120, m, l2, [&](Case& c, std::vector<uint8_t>& ref) {  // gdn z (landed: ks8 nt2), a mid-size shape
        run_landed<8, 2>(c, ref);
        run_stream<5120, 8, 4>(c, ref);
        run_cand<2, 5120, 8, 2, 2, 2, 1, 1, 0, 0, 1>(c, ref);
        run_cand<2, 5120, 8, 2, 2, 2, 3, 1, 0, 0, 1>(c, ref);
        run_cand<2, 5120, 8, 4, 2, 2, 2, 1, 0, 0, 1>(c, ref);
        run_cand<2, 5120, 8, 1, 4, 2, 3, 1, 0, 0, 1>(c, ref);
    });
  return 0;
}
