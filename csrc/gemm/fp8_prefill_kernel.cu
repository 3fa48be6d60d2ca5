// fp8_block_linear's tensor-core prefill strategy ("mma", QWEN38_FP8_PREFILL): more than 32 rows.
//
// The contract's arithmetic, tiled: for each 128-wide K block, the 16-bit products of x and the
// exactly decoded e4m3 weights are summed in fp32 by mma.sync (m16n8k16, fp32 accumulate) into a
// block sum that starts at zero; the block's scale multiplies that sum (one rounding) and the term
// is added to the output's fp32 accumulator (one rounding), blocks in increasing K; the epilogue
// adds the bias (one rounding) and rounds once to the output type. Within
// reference.fp8_block_linear_f64_bound; not row-invariant against the 1..32-row kernels (another
// order inside a block).
//
// Tiles: a CTA of 8 warps computes 128 rows x 128 output columns (one scale row: the column tile
// is 128-aligned, so every K block has one scalar scale), 2 x 4 warps of 64 rows x 32 columns
// (4 m16 tiles x 4 n8 tiles: 16 mma per k16 step). K blocks stream through two shared-memory
// stages of cp.async copies (x 32 KB + w 16 KB a stage: 96 KB, within sm_121a's 99 KB):
//   x tile: row r (128) of 16 16-byte chunks, chunk c at position c ^ (r % 8): ldmatrix.x4 reads 8
//           rows of one logical chunk from 8 different bank groups;
//   w tile: row n (128) of 8 16-byte chunks (16 e4m3 = one k16 step), chunk c at c ^ (n % 8): the 8
//           rows of an n8 tile read one k16 step from 8 different bank groups.
// A fragments (x) come from ldmatrix.x4; B fragments (w) are two 16-bit reads a lane (k 2t..2t+1
// and 2t+8..2t+9 of row g), converted exactly: cvt.rn.f16x2.e4m3x2, and for bf16 x through fp32
// to bf16x2 (e4m3 is a subset of both). Chunks past M, N or K are zero-filled by cp.async (their
// products are zeros; rows and columns past the edges are not stored). K is a multiple of 16.
// The grid runs the row tiles of one column tile next to each other (blockIdx.x = row tile), so the
// weight tile is read from DRAM about once and x stays in L2.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common/cp_async.cuh"
#include "common/launch.cuh"
#include "common/mma.cuh"
#include "common/nvfp4.cuh"
#include "common/pdl.cuh"
#include "common/vec.cuh"
#include "gemm/fp8_block_linear_launch.h"

namespace qwen38::gemm {
namespace {

constexpr int kBM = 128, kBN = 128, kBK = 128;
constexpr int kThreads = 256;                    // 8 warps: 2 (rows) x 4 (columns)
constexpr int kXStage = kBM * kBK * 2;           // 32 KB of 16-bit x
constexpr int kWStage = kBN * kBK;               // 16 KB of e4m3 w
constexpr int kStageBytes = kXStage + kWStage;
constexpr int kStages = 2;
constexpr int kSmem = kStages * kStageBytes;     // 96 KB
static_assert(kSmem <= 99 * 1024, "the stages fit sm_121a's 99 KB");

__device__ __forceinline__ int x_off(int r, int c) { return r * (kBK * 2) + ((c ^ (r & 7)) << 4); }
__device__ __forceinline__ int w_off(int n, int c) { return n * kBK + ((c ^ (n & 7)) << 4); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Two e4m3 bytes (low byte = lower k) -> the B register for x's type, exactly.
template <typename T> __device__ __forceinline__ uint32_t b_pair(uint16_t two);
template <> __device__ __forceinline__ uint32_t b_pair<__half>(uint16_t two) {
  return nvfp4::as_u32(nvfp4::e4m3x2_to_h2(two));
}
template <> __device__ __forceinline__ uint32_t b_pair<__nv_bfloat16>(uint16_t two) {
  const float2 f = __half22float2(nvfp4::e4m3x2_to_h2(two));  // exact
  return nvfp4::as_u32(__floats2bfloat162_rn(f.x, f.y));       // exact: at most 4 significant bits
}

__device__ __forceinline__ float bias_at(const void* bias, int dt, int64_t n) {
  if (dt == 0) return __bfloat162float(static_cast<const __nv_bfloat16*>(bias)[n]);
  if (dt == 1) return __half2float(static_cast<const __half*>(bias)[n]);
  return static_cast<const float*>(bias)[n];
}

template <typename T, int OUT>
__global__ void __launch_bounds__(kThreads, 1) fp8_prefill_kernel(const Fp8BlockParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp & 1, wn = warp >> 1;  // this warp's 64 rows and 32 columns of the tile
  const int g = lane >> 2, t = lane & 3;
  const int64_t m0 = int64_t(blockIdx.x) * kBM, n0 = int64_t(blockIdx.y) * kBN;
  const int nkb = int((p.k + kBK - 1) / kBK);
  const T* x = static_cast<const T*>(p.x);

  pdl_wait();   // x may come from the previous kernel
  pdl_allow();

  auto load_stage = [&](int kb, int st) {
    unsigned char* xs = smem + st * kStageBytes;
    unsigned char* ws = xs + kXStage;
    const int64_t k0 = int64_t(kb) * kBK;
#pragma unroll
    for (int i = 0; i < kBM * 16 / kThreads; ++i) {  // 8 x chunks a thread
      const int ch = tid + kThreads * i, r = ch >> 4, c = ch & 15;
      const int64_t m = m0 + r, k = k0 + 8 * c;
      const bool ok = m < p.m && k < p.k;
      cp_async16(xs + x_off(r, c), ok ? x + m * p.x_stride + k : x, ok ? 16 : 0);
    }
#pragma unroll
    for (int i = 0; i < kBN * 8 / kThreads; ++i) {  // 4 w chunks a thread
      const int ch = tid + kThreads * i, r = ch >> 3, c = ch & 7;
      const int64_t n = n0 + r, k = k0 + 16 * c;
      const bool ok = n < p.n && k < p.k;
      cp_async16(ws + w_off(r, c), ok ? p.w + n * p.k + k : p.w, ok ? 16 : 0);
    }
  };

  float acc[4][4][4];
  zero_fill(acc);

  const float* srow = p.scale + (n0 / 128) * ((p.k + 127) / 128);
  load_stage(0, 0);
  cp_async_commit();
  for (int kb = 0; kb < nkb; ++kb) {
    if (kb + 1 < nkb) load_stage(kb + 1, (kb + 1) & 1);
    cp_async_commit();
    cp_async_wait<1>();  // every group but the newest: stage kb has landed
    __syncthreads();
    const unsigned char* xs = smem + (kb & 1) * kStageBytes;
    const unsigned char* ws = xs + kXStage;
    float blk[4][4][4];
    zero_fill(blk);
#pragma unroll
    for (int k16 = 0; k16 < kBK / 16; ++k16) {
      uint32_t bf[4][2];  // the step's B fragments first (8 registers), then one A tile at a time
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const unsigned char* wr = ws + w_off(wn * 32 + nt * 8 + g, k16);
        bf[nt][0] = b_pair<T>(*reinterpret_cast<const uint16_t*>(wr + 2 * t));
        bf[nt][1] = b_pair<T>(*reinterpret_cast<const uint16_t*>(wr + 8 + 2 * t));
      }
#pragma unroll
      for (int mt = 0; mt < 4; ++mt) {
        uint32_t af[4];
        const int r = wm * 64 + mt * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);
        ldmatrix_x4(af, smem_addr(xs + x_off(r, 2 * k16 + (lane >> 4))));
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) mma_16816<T>(blk[mt][nt], af, bf[nt][0], bf[nt][1]);
      }
    }
    const float s = srow[kb];
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int b = 0; b < 4; ++b)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[a][b][i] = __fadd_rn(acc[a][b][i], __fmul_rn(blk[a][b][i], s));
    __syncthreads();  // stage kb & 1 is refilled by the next iteration's loads
  }

  // ---- epilogue: + bias (fp32, one rounding), one rounding to the output type ----
#pragma unroll
  for (int mt = 0; mt < 4; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t m = m0 + wm * 64 + mt * 16 + g + (i >> 1) * 8;
        const int64_t n = n0 + wn * 32 + nt * 8 + 2 * t + (i & 1);
        if (m >= p.m || n >= p.n) continue;
        float v = acc[mt][nt][i];
        if (p.bias != nullptr) v = __fadd_rn(v, bias_at(p.bias, p.bias_dtype, n));
        const int64_t at = m * p.n + n;
        if constexpr (OUT == int(Out::kF32)) static_cast<float*>(p.y)[at] = v;
        else if constexpr (OUT == int(Out::kF16)) static_cast<__half*>(p.y)[at] = __float2half_rn(v);
        else static_cast<__nv_bfloat16*>(p.y)[at] = __float2bfloat16_rn(v);
      }
}

template <typename T, int OUT>
cudaError_t launch_typed(const Fp8BlockParams& p, bool pdl, cudaStream_t stream) {
  auto kernel = fp8_prefill_kernel<T, OUT>;
  // above the default 48 KB a block must opt in (per device; not a stream operation)
  const cudaError_t attr = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (attr != cudaSuccess) return attr;
  const dim3 grid(unsigned((p.m + kBM - 1) / kBM), unsigned((p.n + kBN - 1) / kBN));
  return launch_kernel(kernel, grid, dim3(kThreads), size_t(kSmem), stream, pdl, p);
}

template <typename T>
cudaError_t launch_act(const Fp8BlockParams& p, bool pdl, cudaStream_t stream) {
  switch (p.out) {
    case int(Out::kF32): return launch_typed<T, int(Out::kF32)>(p, pdl, stream);
    case int(Out::kF16): return launch_typed<T, int(Out::kF16)>(p, pdl, stream);
    default: return launch_typed<T, int(Out::kBF16)>(p, pdl, stream);
  }
}

}  // namespace

cudaError_t launch_fp8_prefill(Act act, const Fp8BlockParams& p, bool pdl, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0) return cudaSuccess;
  if (p.k <= 0 || p.k % 16 != 0 || (p.n + kBN - 1) / kBN > 65535) return cudaErrorInvalidValue;
  return act == Act::kBF16 ? launch_act<__nv_bfloat16>(p, pdl, stream) : launch_act<__half>(p, pdl, stream);
}

}  // namespace qwen38::gemm
