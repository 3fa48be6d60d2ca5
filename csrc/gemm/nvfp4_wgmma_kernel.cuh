// nvfp4_linear's warpgroup-MMA prefill kernel (sm_90a): more than 32 rows of x against the NVFP4
// weight, the weight decoded in registers straight into wgmma's A operand. Torch-free.
//
// Arithmetic: that of the "mma" prefill kernel (nvfp4_prefill_kernel.cu), bit for bit: the
// decoded weight is e2m1 * scale * 2^-7 exactly (nvfp4::decode_byte), the products with x are
// summed in fp32 by the tensor cores one k16 block at a time in k order over all of K, and the
// epilogue multiplies by 2^7 (exact), then by w_global (one rounding), adds the bias (one rounding)
// and rounds once to the output type. wgmma m64nNk16 accumulates like mma.sync m16n8k16 for the
// same operands, with the weights as A or as B (benchmarks/lab/wgmma_bits_lab.cu,
// wgmma_skinny_lab.cu), so each output equals the "mma" kernel's (tests/test_nvfp4_prefill.py compares the two).
//
// CTA: two warpgroups, 128 weight rows (output columns n0 ..; 64 a warpgroup, the A operand's M)
// x BM rows of x (m0 ..; the B operand's N: one m64nBMk16 wgmma a k16 block). K streams through
// S shared-memory stages of 64, each filled by two TMA copies that thread 0 issues and one
// mbarrier counts (rows past M or N arrive as zeros):
//   x tile     BM rows x 128 bytes, 128-byte swizzle (prefill::x_off: wgmma's B layout, 1024-byte
//              aligned);
//   weights    128 rows x 32 bytes, 32-byte swizzle (= prefill_nvfp4::w_off: rows n and n + 4 of
//              an 8-row group in different banks).
// The block scales (4 bytes a row and stage) go from global memory straight into registers,
// kScaleAhead stages ahead (4 at BM 256, else 2).
// Thread (warpgroup G, warp w, lane g, t) decodes rows r0 = 64 G + 16 w + g and r0 + 8: for k16
// block j of a stage, A = {r0: byte 8j + t, r0 + 8: byte 8j + t, r0: byte 8j + 4 + t, r0 + 8:
// byte 8j + 4 + t} (k 2t, 2t + 1 and 2t + 8, 2t + 9 of the block: the mma.sync A fragment), each
// byte's two nibbles one 16-bit pair times its row's block scale.
// The pipeline of stage kt: barrier (every warpgroup has waited for stage kt - 2's wgmmas), thread
// 0 issues the copies of stage kt + S - 2 into stage kt - 2's buffers, all wait for stage kt's
// mbarrier, decode the stage's 16 A registers (while stage kt - 1's wgmmas run), fence, 4 wgmmas,
// commit, wait until only this stage's are pending. Two A register sets alternate between even and
// odd stages. (H200 measurements of the alternatives tried: benchmarks/results/h200/NOTES.md,
// session 15.)
// Epilogue: the accumulators go (scaled, biased, rounded) into a padded shared-memory tile
// [BM][128] of the output type and leave in 16-byte stores along y's rows.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common/cp_async.cuh"
#include "common/nvfp4.cuh"
#include "common/pdl.cuh"
#include "common/tma.cuh"
#include "common/wgmma.cuh"
#include "gemm/nvfp4_linear_launch.h"
#include "gemm/prefill_mma.cuh"
#include "gemm/prefill_nvfp4.cuh"

namespace qwen38::gemm::wg_prefill {

constexpr int kThreads = 256;                     // two warpgroups
constexpr int kBN = 128;                          // weight rows (output columns) of a CTA
constexpr int kBK = prefill::kBK;                 // 64
constexpr int kWStage = prefill_nvfp4::kWBytes;   // packed weights of a stage (4 KB)

template <int BM, int S>
struct Cfg {
  static_assert(BM == 64 || BM == 128 || BM == 256, "one wgmma N a k16 block");
  static_assert(S >= 3, "stage kt + S - 2 loads while stage kt is used: S - 2 >= 1");
  static constexpr int kXStage = BM * kBK * 2;
  template <int OUT>
  static constexpr int out_row_bytes() { return kBN * (OUT == int(Out::kF32) ? 4 : 2) + 16; }
  static constexpr int kPipe = S * (kXStage + kWStage);
  static constexpr int kOut = BM * out_row_bytes<int(Out::kF32)>();
  // + 1 KB: the dynamic shared memory's base is aligned up to 1024 bytes (the swizzle atom)
  static constexpr int kSmem = (kPipe > kOut ? kPipe : kOut) + 1024;
};

// The pair multipliers (nvfp4::PairDecode) of a thread's two weight rows' four k16 blocks of a stage
// from their four scale bytes each (sw0, sw1: block j in byte j).
template <typename T>
__device__ __forceinline__ void block_scales(typename nvfp4::PairDecode<T>::T2 (&s0)[4],
                                             typename nvfp4::PairDecode<T>::T2 (&s1)[4], uint32_t sw0, uint32_t sw1) {
  using D = nvfp4::PairDecode<T>;
  const __half2 h00 = nvfp4::e4m3x2_to_h2(uint16_t(sw0)), h01 = nvfp4::e4m3x2_to_h2(uint16_t(sw0 >> 16));
  const __half2 h10 = nvfp4::e4m3x2_to_h2(uint16_t(sw1)), h11 = nvfp4::e4m3x2_to_h2(uint16_t(sw1 >> 16));
  s0[0] = D::scale(__low2half(h00));
  s0[1] = D::scale(__high2half(h00));
  s0[2] = D::scale(__low2half(h01));
  s0[3] = D::scale(__high2half(h01));
  s1[0] = D::scale(__low2half(h10));
  s1[1] = D::scale(__high2half(h10));
  s1[2] = D::scale(__low2half(h11));
  s1[3] = D::scale(__high2half(h11));
}

// (lab) QWEN38_WGMMA_BM64_CTAS: the CTAs an SM the 64-row tiles are compiled for. 3 (80 registers)
// makes ptxas serialize the wgmmas for want of registers: slower on every shape (H200, 33 / 64 rows:
// 34816x5120 99 -> 100 us, 10240x5120 38 -> 48; benchmarks/results/h200/wgmma_prefill_lab_16_bm64.txt).
#ifndef QWEN38_WGMMA_BM64_CTAS
#define QWEN38_WGMMA_BM64_CTAS 2
#endif

// tx: x as a [M, K] map of T, boxes of BM rows x 64, 128-byte swizzle; tw: the packed weights as a
// [N, K / 2] map of bytes, boxes of 128 rows x 32, 32-byte swizzle (nvfp4_wgmma_kernel.cu).
// BM 64 and 128: two CTAs an SM (at most 128 registers: no spill on sm_90a); BM 256: one (254).
template <typename T, int OUT, int BM, int S>
__global__ void __launch_bounds__(kThreads, BM == 64 ? QWEN38_WGMMA_BM64_CTAS : BM <= 128 ? 2 : 1)
    nvfp4_wgmma_kernel(const Nvfp4Params p, const __grid_constant__ CUtensorMap tx,
                       const __grid_constant__ CUtensorMap tw) {
#ifdef QWEN38_WGMMA
  using C = Cfg<BM, S>;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem =
      smem_raw + ((1024 - (static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) & 1023)) & 1023);
  const uint32_t xs_addr = smem_addr(smem);                // S x tiles
  const unsigned char* ws0 = smem + S * C::kXStage;        // S weight stages
  const uint32_t ws_addr = xs_addr + S * C::kXStage;
  // the stages' mbarriers, in static shared memory: the kernel compiled with its body (sm_90a)
  // has some, the empty one has none (nvfp4_wgmma_ready reads that on the host)
  __shared__ __align__(8) uint64_t bars[S];
  const uint32_t bar0 = smem_addr(bars);
  const int64_t m0 = int64_t(blockIdx.x) * BM, n0 = int64_t(blockIdx.y) * kBN;
  const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int r0 = 64 * (tid >> 7) + 16 * ((tid >> 5) & 3) + g;  // this thread's first weight row (local)
  const int nkt = int(p.k / kBK);

  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < S; ++s) tma::mbar_init(bar0 + 8 * s, 1);
    tma::mbar_init_fence();
  }
  __syncthreads();
  pdl_wait();  // x (and the weights' producer, if any) come from earlier kernels
  pdl_allow();

  auto load = [&](int kt) {  // thread 0: stage kt's two copies
    const int b = kt % S;
    tma::mbar_expect(bar0 + 8 * b, uint32_t(C::kXStage + kWStage));
    tma::copy_2d(xs_addr + b * C::kXStage, &tx, kt * kBK, int(m0), bar0 + 8 * b);
    tma::copy_2d(ws_addr + b * kWStage, &tw, kt * (kBK / 2), int(n0), bar0 + 8 * b);
  };
  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < S - 2; ++s)
      if (s < nkt) load(s);
  }

  // block scales: 4 bytes (the stage's four k16 blocks) of rows r0 and r0 + 8, kScaleAhead stages
  // ahead: 4 at BM 256 (H200, 34816x5120 at 512 / 1024 rows: 286 / 510 us against 297 / 527 two
  // ahead), 2 below (4, a loop unrolled by 4: 9% slower at 64 and 128 rows;
  // benchmarks/results/h200/wgmma_prefill_lab_15_scales4.txt)
  constexpr int kScaleAhead = BM == 256 ? 4 : 2;
  const int64_t kRowS = p.k / 16;
  const bool ok0 = n0 + r0 < p.n, ok1 = n0 + r0 + 8 < p.n;
  const uint32_t* sp0 = reinterpret_cast<const uint32_t*>(p.scale + (ok0 ? (n0 + r0) * kRowS : 0));
  const uint32_t* sp1 = reinterpret_cast<const uint32_t*>(p.scale + (ok1 ? (n0 + r0 + 8) * kRowS : 0));
  auto scales = [&](int kt, uint32_t (&sc)[2]) {
    sc[0] = ok0 ? __ldg(sp0 + kt) : 0u;
    sc[1] = ok1 ? __ldg(sp1 + kt) : 0u;
  };

  float acc[BM / 2];
#pragma unroll
  for (int i = 0; i < BM / 2; ++i) acc[i] = 0.0f;
  const uint32_t sel = 0x4440u | uint32_t(t);  // byte t of a word, zero-extended
  const int wo00 = prefill_nvfp4::w_off(r0, 0), wo01 = prefill_nvfp4::w_off(r0, 1);
  const int wo10 = prefill_nvfp4::w_off(r0 + 8, 0), wo11 = prefill_nvfp4::w_off(r0 + 8, 1);

  // stage kt: decode into a (the A registers of its 4 k16 blocks; sc: its scales, then those of
  // kt + kScaleAhead), then its wgmmas
  auto stage = [&](int kt, uint32_t (&a)[4][4], uint32_t (&sc)[2]) {
    __syncthreads();  // stage kt - 2's wgmmas are done in both warpgroups: its buffers are free
    if (tid == 0 && kt + S - 2 < nkt) load(kt + S - 2);
    const uint32_t sw0 = sc[0], sw1 = sc[1];
    if (kt + kScaleAhead < nkt) scales(kt + kScaleAhead, sc);
    const int b = kt % S;
    tma::mbar_wait(bar0 + 8 * b, uint32_t(kt / S) & 1u);
    const unsigned char* ws = ws0 + b * kWStage;
    const uint4 c00 = *reinterpret_cast<const uint4*>(ws + wo00);
    const uint4 c01 = *reinterpret_cast<const uint4*>(ws + wo01);
    const uint4 c10 = *reinterpret_cast<const uint4*>(ws + wo10);
    const uint4 c11 = *reinterpret_cast<const uint4*>(ws + wo11);
    typename nvfp4::PairDecode<T>::T2 s0[4], s1[4];
    block_scales<T>(s0, s1, sw0, sw1);
    // block j: words 2 (j % 2) and 2 (j % 2) + 1 of chunk j / 2 (bytes 8 (j % 2) + t and + 4 + t)
    const uint32_t w0[8] = {c00.x, c00.y, c00.z, c00.w, c01.x, c01.y, c01.z, c01.w};
    const uint32_t w1[8] = {c10.x, c10.y, c10.z, c10.w, c11.x, c11.y, c11.z, c11.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      a[j][0] = nvfp4::decode_byte<T>(__byte_perm(w0[2 * j], 0, sel), s0[j]);
      a[j][1] = nvfp4::decode_byte<T>(__byte_perm(w1[2 * j], 0, sel), s1[j]);
      a[j][2] = nvfp4::decode_byte<T>(__byte_perm(w0[2 * j + 1], 0, sel), s0[j]);
      a[j][3] = nvfp4::decode_byte<T>(__byte_perm(w1[2 * j + 1], 0, sel), s1[j]);
    }
    const uint32_t xa = xs_addr + b * C::kXStage;
    wgmma::fence();
#pragma unroll
    for (int j = 0; j < 4; ++j) wgmma::wgmma_rs<T, BM>(acc, a[j], wgmma::desc_sw128(xa + 32 * j));
    wgmma::commit();
    wgmma::wait<1>();  // stage kt - 1's wgmmas are done (their A registers are free)
  };

  // two A register sets alternate (a stage's wgmmas read theirs while the next stage decodes), and
  // kScaleAhead scale sets rotate: the loop is unrolled by kScaleAhead (even)
  uint32_t a_even[4][4], a_odd[4][4], sc[kScaleAhead][2];
#pragma unroll
  for (int i = 0; i < kScaleAhead; ++i)
    if (i < nkt) scales(i, sc[i]);
  int kt = 0;
  if constexpr (kScaleAhead == 2) {  // (this exact form: the generic tail below cost BM 128 15%)
    for (; kt + 1 < nkt; kt += 2) {
      stage(kt, a_even, sc[0]);
      stage(kt + 1, a_odd, sc[1]);
    }
    if (kt < nkt) stage(kt, a_even, sc[0]);
  } else {
    for (; kt + kScaleAhead <= nkt; kt += kScaleAhead) {
#pragma unroll
      for (int i = 0; i < kScaleAhead; i += 2) {
        stage(kt + i, a_even, sc[i]);
        stage(kt + i + 1, a_odd, sc[i + 1]);
      }
    }
#pragma unroll
    for (int i = 0; i < kScaleAhead; i += 2) {
      if (kt + i < nkt) stage(kt + i, a_even, sc[i]);
      if (kt + i + 1 < nkt) stage(kt + i + 1, a_odd, sc[i + 1]);
    }
  }
  wgmma::wait<0>();
  wgmma::touch(acc);
  __syncthreads();  // every warpgroup is done with the stages: the output tile reuses them

  // epilogue: y[m0 + m][n0 + n] for the tile's elements inside M x N
  constexpr int kOsz = OUT == int(Out::kF32) ? 4 : 2;
  constexpr int kRowB = C::template out_row_bytes<OUT>();
  const float gs = *p.global;
  float bias[2] = {0.0f, 0.0f};
  if (p.bias != nullptr) {
    if (ok0) bias[0] = prefill::bias_at(p.bias, p.bias_dtype, n0 + r0);
    if (ok1) bias[1] = prefill::bias_at(p.bias, p.bias_dtype, n0 + r0 + 8);
  }
#pragma unroll
  for (int j = 0; j < BM / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float v = __fmul_rn(acc[4 * j + 2 * h + e] * nvfp4::kPairUnscale, gs);
        if (p.bias != nullptr) v = __fadd_rn(v, bias[h]);
        unsigned char* at = smem + (8 * j + 2 * t + e) * kRowB + (r0 + 8 * h) * kOsz;
        if constexpr (OUT == int(Out::kF32)) *reinterpret_cast<float*>(at) = v;
        else if constexpr (OUT == int(Out::kF16)) *reinterpret_cast<__half*>(at) = __float2half_rn(v);
        else *reinterpret_cast<__nv_bfloat16*>(at) = __float2bfloat16_rn(v);
      }
  __syncthreads();
  constexpr int kChunks = kBN * kOsz / 16, kPer = 16 / kOsz;  // 16-byte chunks of a tile row
  const bool vec = (p.n * kOsz) % 16 == 0 && reinterpret_cast<uintptr_t>(p.y) % 16 == 0;
  unsigned char* y = static_cast<unsigned char*>(p.y);
#pragma unroll 4
  for (int i = tid; i < BM * kChunks; i += kThreads) {
    const int m = i / kChunks, c = i % kChunks;
    const int64_t row = m0 + m, col = n0 + int64_t(c) * kPer;
    if (row >= p.m || col >= p.n) continue;
    const unsigned char* src = smem + m * kRowB + c * 16;
    unsigned char* dst = y + (row * p.n + col) * kOsz;
    if (vec && col + kPer <= p.n) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    } else {
      for (int e = 0; e < kPer && col + e < p.n; ++e)
        for (int b = 0; b < kOsz; ++b) dst[e * kOsz + b] = src[e * kOsz + b];
    }
  }
#endif
}

}  // namespace qwen38::gemm::wg_prefill
