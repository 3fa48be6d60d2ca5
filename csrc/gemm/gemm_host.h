// Host-side checks shared by the weight-GEMM launchers (nvfp4_linear, fp8_block_linear).
#pragma once

#include <ATen/cuda/CUDAContext.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "common/host.h"
#include "gemm/nvfp4_dequant_launch.h"  // the prefill epilogue
#include "gemm/nvfp4_linear_launch.h"   // Act, Out
#include "gemm/skinny_variants.h"

namespace qwen38::gemm {

// The prefill strategy knob of a weight GEMM at more than 32 rows (QWEN38_NVFP4_PREFILL,
// QWEN38_FP8_PREFILL): auto (unset or empty too), chunked, dequant, or (where the op has it, mma_ok)
// mma; anything else is an error naming the knob.
enum class Prefill { kAuto, kChunked, kDequant, kMma };
inline Prefill prefill_mode(const char* op, const char* knob, bool mma_ok = false) {
  const char* v = std::getenv(knob);
  if (v == nullptr || *v == '\0' || std::strcmp(v, "auto") == 0) return Prefill::kAuto;
  if (std::strcmp(v, "chunked") == 0) return Prefill::kChunked;
  if (std::strcmp(v, "dequant") == 0) return Prefill::kDequant;
  if (mma_ok && std::strcmp(v, "mma") == 0) return Prefill::kMma;
  const char* allowed = mma_ok ? "auto, chunked, dequant or mma" : "auto, chunked or dequant";
  TORCH_CHECK_VALUE(false, "qwen38.", op, ": ", knob, " must be ", allowed, ", got '", v, "'");
  return Prefill::kAuto;
}

// Whether `on`'s GPU reads its weights far slower than it multiplies them (compute capability 12:
// GB10, whose ~230 GB/s stream a 34816x5120 NVFP4 weight in ~435 us). There the tensor-core prefill
// kernels read the weight once where 32-row slices read it ceil(M / 32) times and the NVFP4 dequant
// strategy writes and reads a 16-bit copy (3.6x the weight's bytes), so "auto" takes mma from 33 rows
// where a tile table gives no prefill_rows: a rule from the bytes moved, not measured (no such GPU
// here). Cached per device.
inline bool prefill_read_bound(const at::Tensor& on) {
  static int major[64] = {};
  const int d = on.device().index();
  if (d < 0 || d >= 64) return false;
  if (major[d] == 0) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) return false;
    major[d] = prop.major;
  }
  return major[d] == 12;
}

// QWEN38_PREFILL_TILE_ROWS: rows of one CTA tile of the tensor-core prefill kernels (0: by the row
// count). A launch detail that changes no bit (a row's sum runs over K in the same mma steps).
inline int prefill_tile_rows(const char* op) {
  return knob_choice(op, "QWEN38_PREFILL_TILE_ROWS", "auto", 0, {64, 128, 256});
}

// QWEN38_SKINNY_CLUSTER: CTAs of a thread-block cluster sharing one output tile's k-split warps in
// the register-stream kernels (stream_launch.cuh): 0 (auto: by the grid) or 1, 2, 4, 8. A launch
// detail that changes no bit (the partials are summed in the same warp order).
inline int skinny_cluster(const char* op) { return knob_choice(op, "QWEN38_SKINNY_CLUSTER", "auto", 0, {1, 2, 4, 8}); }

// The buffer of x in the fragment order for the register-stream kernels (stream_launch.cuh frag;
// knob QWEN38_NVFP4_XFRAG / QWEN38_FP8_XFRAG): where the call's variant serves it (`serves`) and a
// 32-row slice of the call's m rows has the knob's first row count (auto: 9 on compute capability 9,
// where measured - at 1..8 rows the copy does not pay in general - else never; 1: 1; 0: never), or
// auto on compute capability 9 where the op has a rule for 1..8 rows (`one_group`: NVFP4, the copy
// where the one-group rule runs the x-as-A body, stream_launch.cuh one), 32 rows of x (every slice
// writes it in turn; each copy waits for the previous kernel, pdl.cuh), that row count and whether
// the 1..8-row rule applies; else an undefined tensor.
struct XfragBuffer {
  at::Tensor buf;
  int from = 0;
  bool one_group = false;
};
inline XfragBuffer xfrag_buffer(const char* op, const char* knob, bool serves, const at::Tensor& x, int64_t m,
                                int64_t k, bool one_group = false) {
  if (!serves) return {};
  const char* v = std::getenv(knob);
  int from = 0;
  if (v == nullptr || *v == '\0' || std::strcmp(v, "auto") == 0) {
    from = at::cuda::getCurrentDeviceProperties()->major == 9 ? 9 : 0;
    one_group = one_group && from > 0;
  } else {
    TORCH_CHECK_VALUE(!std::strcmp(v, "0") || !std::strcmp(v, "1"), "qwen38.", op, ": ", knob,
                      " must be auto, 0 or 1, got '", v, "'");
    from = *v == '1' ? 1 : 0;
    one_group = false;
  }
  if (from == 0 || (std::min(m, kSkinnyMaxRows) < from && !one_group)) return {};
  return {at::empty({kSkinnyMaxRows * k}, x.options()), from, one_group};
}

// bias [N] in x's dtype or fp32, contiguous, on x's device. Returns its dtype code for the kernel
// (0 bf16, 1 fp16, 2 fp32); 0 when there is no bias.
inline int check_bias(const char* op, const std::optional<at::Tensor>& bias, int64_t n, const at::Tensor& x) {
  if (!bias.has_value()) return 0;
  const at::Tensor& b = *bias;
  TORCH_CHECK_VALUE(b.dim() == 1 && b.size(0) == n, "qwen38.", op, ": bias must be [N] = [", num(n), "], got ",
                    shape_str(b.sizes()));
  TORCH_CHECK_VALUE(b.scalar_type() == x.scalar_type() || b.scalar_type() == at::kFloat, "qwen38.", op,
                    ": bias must be ", dtype_name(x.scalar_type()), " (x's dtype) or torch.float32, got ",
                    dtype_name(b.scalar_type()));
  TORCH_CHECK_VALUE(b.numel() <= 1 || b.stride(0) == 1, "qwen38.", op, ": bias must be contiguous");
  check_same_device(op, "bias", b, "x", x);
  return b.scalar_type() == at::kFloat ? 2 : b.scalar_type() == at::kHalf ? 1 : 0;
}

inline at::ScalarType check_out_dtype(const char* op, std::optional<at::ScalarType> out_dtype, const at::Tensor& x) {
  const at::ScalarType od = out_dtype.value_or(x.scalar_type());
  TORCH_CHECK_VALUE(od == at::kBFloat16 || od == at::kHalf || od == at::kFloat, "qwen38.", op,
                    ": out_dtype must be None, bfloat16, float16 or float32, got ", dtype_name(od));
  return od;
}

// y [..., N] for x [..., K].
inline at::Tensor new_linear_output(const at::Tensor& x, int64_t n, at::ScalarType od) {
  std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end());
  sizes.back() = n;
  return new_output(sizes, x.options().dtype(od));
}

// The skinny kernels read x rows whose starts are 16-byte aligned.
inline void check_x_rows_aligned(const char* op, const at::Tensor& x, int64_t x_stride) {
  TORCH_CHECK_VALUE(reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0 && x_stride % 8 == 0, "qwen38.", op,
                    ": x rows must start on 16-byte boundaries (data pointer and row stride a multiple of 8 "
                    "elements), got row stride ", num(x_stride));
}

// The launch variant of weight shape (n, k): the tile table's entry, else the default rule (one
// warning per shape when a table is loaded for the op but has no entry for this shape).
inline SkinnyVariant skinny_variant_for(const char* op, SkinnyOp id, const char* table, int64_t n, int64_t k) {
  bool from_table = false;
  const SkinnyVariant v = lookup_skinny_variant(id, n, k, &from_table);
  if (!from_table && skinny_table_loaded(id) && skinny_first_miss(id, n, k))
    TORCH_WARN("qwen38.", op, ": the tile table ", table, " has no entry for weight shape ", num(n), "x", num(k),
               "; using the default variant (ksplit ", num(v.ksplit), ", tiles per warp ", num(v.nt_narrow), "/",
               num(v.nt_wide), ")");
  return v;
}

inline Act act_of(const at::Tensor& x) { return x.scalar_type() == at::kBFloat16 ? Act::kBF16 : Act::kF16; }
inline Out out_of(at::ScalarType od) {
  return od == at::kFloat ? Out::kF32 : od == at::kHalf ? Out::kF16 : Out::kBF16;
}

// The prefill epilogue over rows r0 .. r0 + r of y: y = round(global * acc + bias) from the fp32
// accumulator acc [r, n] (acc may be y itself when y is fp32).
inline void prefill_epilogue(const char* op, const float* acc, const float* global,
                             const std::optional<at::Tensor>& bias, int bias_dtype, const at::Tensor& y,
                             at::ScalarType od, int64_t r0, int64_t r, int64_t n, bool pdl, cudaStream_t stream) {
  Nvfp4EpilogueParams e;
  e.acc = acc;
  e.global = global;
  e.bias = bias.has_value() ? bias->data_ptr() : nullptr;
  e.bias_dtype = bias_dtype;
  e.y = static_cast<char*>(y.data_ptr()) + r0 * n * at::elementSize(od);
  e.m = r;
  e.n = n;
  check_launch(op, launch_nvfp4_prefill_epilogue(out_of(od), e, pdl, stream), y);
}

}  // namespace qwen38::gemm
