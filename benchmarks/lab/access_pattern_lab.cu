// Lab (sm_90a): does the weight access pattern of the register-stream kernels cap their DRAM rate?
//
// The NVFP4 stream kernel at 1..16 rows reads 34816x5120 at ~56% of the streaming-read ceiling with
// issue ~49% (ncu_s21_x_reads.txt) and gained nothing from 2x the warps (the staged body). Its warp
// load instruction touches 8 weight rows x 64 bytes (lanes (g, t): row g, 16 bytes at 16 t), rows
// 2560 bytes apart, and the next step of the same rows comes one step later: each 64-byte piece of a
// DRAM page is its own burst. The read ceiling reads 512 contiguous bytes an instruction. This lab
// reads the same bytes (34816 rows of 2560 bytes: the packed weights of gate+up) with the same
// grid (1088 CTAs of 4 warps, 32 rows and 10 steps a warp, NT 4 tiles a step), the same 16-byte
// loads per lane and the same number of them, in four lane maps:
//   tile  the kernels' map: warp w reads bytes [640 w, 640 w + 640) of its CTA's 32 rows, step s
//         at 64 s, tile nt rows 8 nt + g, 16 t within the 64 bytes;
//   run2  each instruction 2 rows x 256 contiguous bytes (warp w: 8 rows, its whole 2560 bytes);
//   run   each instruction 512 contiguous bytes of one row (warp w: 8 rows, its whole 2560 bytes);
//   tileI the kernels' map with the 4 warps' steps interleaved (warp w: steps w, w + 4, ...): at
//         one time a CTA's warps read 256 contiguous bytes of each row (a different fp32 sum order);
// with the loads as __ldg or as the kernels' load_w (stream_common.cuh: no L1 allocation, L2::256B),
// D steps in flight (rolling, one step's loads a step, as the kernels; or "burst": blocks of D steps
// whose loads go out together), and W rounds of 3 dependent integer instructions (IMAD, SHF, LOP3)
// per loaded 32-bit word: W = 8 is about the instruction count of the 1-row kernel (~24 a word of 8
// weights: 16.6M warp instructions for 178M weights, ncu_s21_x_reads.txt), though with 2 of its 3 on
// the ALU pipe against ~9 of the kernel's ~24 and in dependent chains (a heavier load than the
// kernel's); at the kernels' 4 CTAs an SM (a dynamic shared memory cap) or uncapped. Graph-timed,
// rotating over 4 copies (356 MB, cold), GB/s of the packed bytes.
//
// H200 (access_pattern_lab_s24.txt; % of the read ceiling):
//  - pure reads (W 0) at 4 CTAs an SM: tile 52% with __ldg, 65% with load_w (the L2::256B fill helps),
//    the same at D 4 and in bursts; tileI 58%; contiguous maps 76-79%. Uncapped (8-9 an SM): tile
//    70-75%, tileI 90%, run 89-92%.
//  - the instruction budget at 4 CTAs an SM, tile / run: W 2 65 / 78%, W 4 65 / 73%, W 6 64 / 68%,
//    W 8 57 / 60%.
// So at the kernels' occupancy their lane map alone caps the read at ~65% (the 1-row kernel: 56%);
// 85% needs both another map (contiguous runs per instruction, or the k-split warps interleaved at
// a high occupancy - either changes the lane-to-fragment map or the sum order) and fewer
// instructions a word.
//
//   nvcc -std=c++20 -O3 -gencode arch=compute_90a,code=sm_90a -I csrc \
//     benchmarks/lab/access_pattern_lab.cu -o build/lab/access_pattern_lab
#include <cstdint>
#include <cstdio>

#include "lab_common.cuh"

namespace {

constexpr int kRows = 34816, kRowBytes = 2560, kCtaRows = 32, kWarps = 4, kSteps = 10, kNT = 4;
constexpr int kCtas = kRows / kCtaRows;
constexpr int kTile = 0, kRun2 = 1, kRun = 2, kTileI = 3;

// byte offset of load (step s, tile nt) of lane `lane` of warp w in the CTA's rows
template <int P>
__device__ __forceinline__ int64_t offset(int w, int s, int nt, int lane) {
  if constexpr (P == kTile || P == kTileI) {
    const int g = lane / 4, t = lane % 4;
    const int step = P == kTile ? kSteps * w + s : kWarps * s + w;  // (kTileI: the warps' steps interleaved)
    return int64_t(8 * nt + g) * kRowBytes + 64 * step + 16 * t;
  } else {
    const int i = s * kNT + nt;  // 40 instructions a warp, 20480 bytes: 8 rows x 2560
    if constexpr (P == kRun) return int64_t(8 * w + i / 5) * kRowBytes + 512 * (i % 5) + 16 * lane;
    else return int64_t(8 * w + 2 * (i / 10) + lane / 16) * kRowBytes + 256 * (i % 10) + 16 * (lane % 16);
  }
}

template <int W>
__device__ __forceinline__ uint32_t work(uint32_t v) {
#pragma unroll
  for (int i = 0; i < W; ++i) v = (v * 0x9e3779b1u) ^ (v >> 15);  // 3 instructions, not foldable
  return v;
}

// 16 bytes: H 0 __ldg; 1 the library's weight load (stream_common.cuh load_w: no L1 allocation,
// an L2 miss fills the aligned 256 bytes)
template <int H>
__device__ __forceinline__ uint4 load16(const uint8_t* p) {
  if constexpr (H == 0) {
    return __ldg(reinterpret_cast<const uint4*>(p));
  } else {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
  }
}

template <int W>
__device__ __forceinline__ void consume(uint32_t (&acc)[kNT][4], const uint4 (&cur)[kNT]) {
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    acc[nt][0] ^= work<W>(cur[nt].x);
    acc[nt][1] ^= work<W>(cur[nt].y);
    acc[nt][2] ^= work<W>(cur[nt].z);
    acc[nt][3] ^= work<W>(cur[nt].w);
  }
}

// BURST false: D steps in flight, one step's loads issued a step (rolling, as the kernels); true: the
// steps in blocks of D, block j + 1's loads issued together before block j is consumed
template <int P, int D, int W, int H, bool BURST>
__global__ void __launch_bounds__(128) pattern_kernel(const uint8_t* __restrict__ base, unsigned* sink) {
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint8_t* cta = base + int64_t(blockIdx.x) * kCtaRows * kRowBytes;
  uint32_t acc[kNT][4] = {};
  if constexpr (BURST) {
    static_assert(kSteps % D == 0, "whole blocks");
    uint4 wb[2][D][kNT];
#pragma unroll
    for (int d = 0; d < D; ++d)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) wb[0][d][nt] = load16<H>(cta + offset<P>(w, d, nt, lane));
#pragma unroll
    for (int j = 0; j < kSteps / D; ++j) {
      if (j + 1 < kSteps / D) {
#pragma unroll
        for (int d = 0; d < D; ++d)
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt)
            wb[(j + 1) % 2][d][nt] = load16<H>(cta + offset<P>(w, (j + 1) * D + d, nt, lane));
      }
#pragma unroll
      for (int d = 0; d < D; ++d) consume<W>(acc, wb[j % 2][d]);
    }
  } else {
    uint4 wb[D][kNT];
#pragma unroll
    for (int d = 0; d < D; ++d)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) wb[d][nt] = load16<H>(cta + offset<P>(w, d, nt, lane));
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int d = s % D;
      uint4 cur[kNT];
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) cur[nt] = wb[d][nt];
      if (s + D < kSteps) {
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) wb[d][nt] = load16<H>(cta + offset<P>(w, s + D, nt, lane));
      }
      consume<W>(acc, cur);
    }
  }
  uint32_t r = 0;
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) r ^= acc[nt][0] ^ acc[nt][1] ^ acc[nt][2] ^ acc[nt][3];
  if (r == 0x12345678u) sink[0] = r;
}

const char* name(int p) { return p == kTile ? "tile " : p == kTileI ? "tileI" : p == kRun2 ? "run2 " : "run  "; }

template <int P, int D, int W, int H, bool BURST>
void measure(uint8_t* const (&copies)[4], unsigned* sink, size_t smem, double ceil_gbps, const char* cap) {
  auto fn = pattern_kernel<P, D, W, H, BURST>;
  CK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  int occ = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, fn, 128, smem));
  cudaFuncAttributes fa{};
  CK(cudaFuncGetAttributes(&fa, fn));
  const float us = lab::time_graph(200, [&](int i, cudaStream_t s) {
    fn<<<kCtas, 128, smem, s>>>(copies[i % 4], sink);
  });
  const double gbps = double(kRows) * kRowBytes / (us * 1e3);
  std::printf("  %s %s D %d W %d %s  %-8s %2d an SM (%3d regs)  %7.2f us  %6.0f GB/s  %5.1f%%\n", name(P),
              BURST ? "burst  " : "rolling", D, W, H ? "load_w" : "ldg   ", cap, occ, fa.numRegs, us, gbps,
              100.0 * gbps / ceil_gbps);
}

// the instruction budget: W = 2, 4, 6 rounds (6, 12, 18 instructions a word) on the kernels' map and
// on two contiguous ones
template <int W>
void budget(uint8_t* const (&copies)[4], unsigned* sink, size_t smem, double ceil_gbps, const char* cap) {
  measure<kTile, 2, W, 1, false>(copies, sink, smem, ceil_gbps, cap);
  measure<kTileI, 2, W, 1, false>(copies, sink, smem, ceil_gbps, cap);
  measure<kRun, 2, W, 1, false>(copies, sink, smem, ceil_gbps, cap);
}

template <int W>
void patterns(uint8_t* const (&copies)[4], unsigned* sink, size_t smem, double ceil_gbps, const char* cap) {
  measure<kTile, 2, W, 0, false>(copies, sink, smem, ceil_gbps, cap);
  measure<kTile, 2, W, 1, false>(copies, sink, smem, ceil_gbps, cap);
  measure<kTile, 4, W, 1, false>(copies, sink, smem, ceil_gbps, cap);
  measure<kTile, 2, W, 1, true>(copies, sink, smem, ceil_gbps, cap);
  measure<kTile, 5, W, 1, true>(copies, sink, smem, ceil_gbps, cap);
  measure<kTileI, 2, W, 1, false>(copies, sink, smem, ceil_gbps, cap);
  measure<kRun2, 2, W, 0, false>(copies, sink, smem, ceil_gbps, cap);
  measure<kRun2, 2, W, 1, false>(copies, sink, smem, ceil_gbps, cap);
  measure<kRun, 2, W, 1, false>(copies, sink, smem, ceil_gbps, cap);
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  const double ceil_gbps = lab::read_ceiling_GBps();
  std::printf("device %s, %d SMs; read ceiling %.0f GB/s; %d rows x %d bytes, %d CTAs of 4 warps\n", prop.name,
              prop.multiProcessorCount, ceil_gbps, kRows, kRowBytes, kCtas);
  uint8_t* copies[4];
  for (auto& c : copies) {
    CK(cudaMalloc(&c, size_t(kRows) * kRowBytes));
    CK(cudaMemset(c, 0x5a, size_t(kRows) * kRowBytes));
  }
  unsigned* sink = nullptr;
  CK(cudaMalloc(&sink, 4));
  // 4 CTAs an SM, as the library's 1-row kernel: a quarter of the SM's shared memory each (less the
  // per-CTA reserve)
  const size_t smem4 = prop.sharedMemPerMultiprocessor / 4 - 2048;
  for (int capped = 1; capped >= 0; --capped) {
    const size_t smem = capped ? smem4 : 0;
    const char* cap = capped ? "cap 4" : "uncapped";
    patterns<0>(copies, sink, smem, ceil_gbps, cap);
    patterns<8>(copies, sink, smem, ceil_gbps, cap);
    budget<2>(copies, sink, smem, ceil_gbps, cap);
    budget<4>(copies, sink, smem, ceil_gbps, cap);
    budget<6>(copies, sink, smem, ceil_gbps, cap);
  }
  for (auto& c : copies) CK(cudaFree(c));
  CK(cudaFree(sink));
  return 0;
}
