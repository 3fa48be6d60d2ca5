// Torch-free interface between the nvfp4_linear host launcher and its kernels.
#pragma once

#include <cuda_runtime.h>
#include <cstdint>

#include "gemm/skinny_variants.h"

namespace qwen38::gemm {

enum class Act : int { kBF16 = 0, kF16 = 1 };
enum class Out : int { kBF16 = 0, kF16 = 1, kF32 = 2 };

struct Nvfp4Params {
  const void* x = nullptr;         // [M, K] bf16/fp16, row stride x_stride (elements), last dim contiguous
  const uint8_t* w = nullptr;      // [N, K/2] packed e2m1, low nibble = even k, contiguous
  const uint8_t* scale = nullptr;  // [N, K/16] e4m3 block scales, row-major, contiguous
  const float* global = nullptr;   // [1] fp32 multiplier (device memory: graph safe, no host read)
  const void* bias = nullptr;      // [N] bf16/fp16/fp32 or null
  void* y = nullptr;               // [M, N] contiguous, out dtype
  int64_t m = 0, n = 0, k = 0, x_stride = 0;
  int bias_dtype = 0;              // 0 bf16, 1 fp16, 2 fp32 (when bias != null)
  int out = 0;                     // y dtype: int(Out)
  int depth = 0;                   // skinny kernel: weight ring depth in 128-k steps, 2..8 (0: by
                                   // the tiles per warp); a launch detail that changes no bit
  int l2span = 0;                  // skinny kernel: L2 fetch-size hint of the weight copies (0, 128,
                                   // 256 bytes); changes no bit
  int stream = 1;                  // skinny kernel: 1 = the register-stream kernel where it serves
                                   // the shape (nvfp4_stream_kernel.cuh), 0 = always the ring
                                   // kernel; changes no bit
  int xshare = 1;                  // skinny path: 1 = the x-shared kernel where it serves the call
                                   // (nvfp4_xshare_serves), 0 = never; changes no bit
  int cluster = 0;                 // register-stream kernel: CTAs of a cluster sharing an output
                                   // tile's k-split warps, 1/2/4/8 (capped at the k split), 0 = by
                                   // the grid (stream_launch.cuh); changes no bit
  int tile_rows = 0;               // "mma" prefill: rows of a CTA tile, 64 or 128 (the wgmma form
                                   // also 256; 0: by the row count); changes no bit
  int staged = -1;                 // register-stream kernel at k split 4, 4 tiles a warp, K 5120: 1 =
                                   // its staged body (weights through a cp.async ring), 0 = never,
                                   // -1 = by the grid's waves (stream_launch.cuh); changes no bit
  int one_group = -1;              // register-stream kernel at 2 or 4 tiles a warp, 1..8 rows: 1 =
                                   // the x-as-A body, 0 = the transposed body, -1 = by the grid's
                                   // rounds (stream_launch.cuh use_one_group_xa); changes no bit
};

// A call of the skinny path as the host makes it: the kernels' parameters and what only the launch
// reads. The kernels take Nvfp4Params (a launch slices this to it), so a field here never enlarges
// their parameter block: one more 8-byte field in Nvfp4Params pushed the 17..32-row bf16 stream
// kernel (k split 4, 4 tiles, 168 registers) into a 44-byte spill (sm_90a, session 22).
struct Nvfp4Launch : Nvfp4Params {
  Nvfp4Launch() = default;
  Nvfp4Launch(const Nvfp4Params& p) : Nvfp4Params(p) {}  // (implicit: a call with no launch-only fields)
  void* xfrag = nullptr;           // register-stream kernel where nvfp4_frag_serves: a
                                   // buffer of 32 rows of x (K x 32 elements) for x in the fragment
                                   // order (stream_launch.cuh frag), used at xfrag_from rows and
  int xfrag_from = 9;              // more (null: never), and at 1..8 rows where the one-group
  bool xfrag_one_group = false;    // rule runs the x-as-A body if xfrag_one_group; changes no bit
  int four = -1;                   // the fragment-order kernel at 17..32 rows in bf16 (K 5120, k
                                   // split 4, 4 tiles a warp): 1 = its form held to 4 CTAs an SM, 0 =
                                   // never, -1 = by the grid's rounds (stream_launch.cuh use_four);
                                   // changes no bit
  int xsplit = -1;                 // the k-split-across-CTAs kernel (xsplit_kernel.cuh) where compiled for
                                   // the variant: 1 = at every row count, 0 = never, -1 = where its rule
                                   // takes it (xsplit_kernel.cu); changes no bit
};

// Rows this kernel serves in one launch (1..kSkinnyMaxRows).
constexpr int64_t kSkinnyMaxRows = 32;

// v: the launch variant of the weight shape (skinny_variants.h).
cudaError_t launch_nvfp4_skinny(Act act, const Nvfp4Launch& p, const SkinnyVariant& v, bool pdl, cudaStream_t stream);

// The register-stream kernel (the compiled K values with N a multiple of 8 NT and a compiled
// (ksplit, NT): nt_narrow at 1..16 rows, nt_wide at 17..32); launch_nvfp4_skinny takes it where it
// serves and p.stream is set.
bool nvfp4_stream_serves(const Nvfp4Params& p, const SkinnyVariant& v);
// Whether the register-stream kernel of variant v at K k reads x in the fragment order where asked
// (Nvfp4Launch::xfrag; stream_launch.cuh frag): the host allocates the buffer for those.
bool nvfp4_frag_serves(int64_t k, const SkinnyVariant& v);
cudaError_t launch_nvfp4_stream(Act act, const Nvfp4Launch& p, const SkinnyVariant& v, bool pdl, cudaStream_t stream);

// The x-shared kernel (nvfp4_xshare_kernel.cuh): the register-stream kernel's bits for weights of few
// rows at K = 5120 and k split 8 (N a multiple of 8 up to 128 at 1..32 rows: the model's 48- and
// 96-row weights; N a multiple of 16 up to 1024 at 9..32 rows: its 1024-row ones), on a device that
// places clusters of 8 CTAs; launch_nvfp4_skinny takes it where it serves and p.stream and p.xshare
// are set.
bool nvfp4_xshare_serves(const Nvfp4Params& p, const SkinnyVariant& v);
cudaError_t launch_nvfp4_xshare(Act act, const Nvfp4Params& p, bool pdl, cudaStream_t stream);

// The k-split-across-CTAs kernel (xsplit_kernel.cuh): the register-stream kernel's bits for the large weights'
// variants (nvfp4_xsplit_serves: K 5120 at k split 4 and 4 tiles a warp, K 17408 / 6144 at k split 8 and 4 tiles)
// with the k split held by the CTAs of a cluster, whose warps share one staged copy of x; launch_nvfp4_skinny
// takes it where p.xsplit and the rule say so and the device places the clusters.
bool nvfp4_xsplit_serves(const Nvfp4Launch& p, const SkinnyVariant& v);
cudaError_t launch_nvfp4_xsplit(Act act, const Nvfp4Launch& p, const SkinnyVariant& v, bool pdl, cudaStream_t stream);

// The "mma" prefill strategy (nvfp4_prefill_kernel.cu): more than 32 rows through mma.sync tiles of
// 64 or 128 rows x 128 columns, the weight decoded in registers; x rows and w 16-byte aligned, w_scale
// 4-byte aligned. It serves K a positive multiple of 64 (nvfp4_prefill_serves); p.depth, p.l2span and
// p.stream are not read.
bool nvfp4_prefill_serves(int64_t k);
cudaError_t launch_nvfp4_prefill(Act act, const Nvfp4Params& p, bool pdl, cudaStream_t stream);

// The "mma" strategy's warpgroup-MMA form (nvfp4_wgmma_kernel.cu; Hopper, sm_90a), bit-identical to
// launch_nvfp4_prefill's kernel. nvfp4_wgmma_ready: the device is compute capability 9.0 and this
// build carries the kernel's sm_90a body and the driver's tensor-map encoder (cached per device).
// nvfp4_wgmma_serves: K a positive multiple of 64, x and w 16-byte aligned with 16-byte row
// strides, w_scale 4-byte aligned, at most 65535 column tiles. nvfp4_wgmma_tile_rows: the x rows of a CTA (64, 128 or 256).
// nvfp4_wgmma_auto: the weight shapes where "auto" takes it from 33 rows: N >= 8192 and K <= 6144
// (a CTA walks all of K one 64-wide stage at a time, so a narrow or long weight leaves the GPU
// partly idle as long). H200 (benchmarks/results/h200/prefill_ab_15.md), us at 33 / 128 / 512 /
// 1024 rows, wgmma against the better of chunked and dequant: 34816x5120 98 / 134 / 338 / 656
// against 130 / 220 / 383 / 683; 10240x5120 38 / 44 / 120 / 192 against 54 / 70 / 111 / 187;
// 6144x5120 38 / 43 / 59 / 119 against 32 / 43 / 65 / 111; 5120x17408 121 / 141 / 189 / 387
// against 92 / 113 / 192 / 311.
bool nvfp4_wgmma_auto(int64_t n, int64_t k);
bool nvfp4_wgmma_ready(int device);
bool nvfp4_wgmma_serves(const Nvfp4Params& p);
int nvfp4_wgmma_tile_rows(const Nvfp4Params& p);
cudaError_t launch_nvfp4_wgmma(Act act, const Nvfp4Params& p, bool pdl, cudaStream_t stream);

}  // namespace qwen38::gemm
