// Host side of the output head: head_logits and head_argmax. Check inputs -> plan -> launch the
// kernels of head_tiles.cuh (default) or head_kernel.cuh (QWEN38_HEAD_KERNEL=ring) over chunks of at
// most 32 rows (any M: each chunk runs the 1..32-row
// kernel, so every row keeps the arithmetic of its 1-row call; more than 32 rows re-read the weight
// once per chunk, which suits decode/verify, not prefill).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cstdlib>
#include <cstring>
#include <tuple>
#include <vector>

#include "gemm/gemm_host.h"
#include "gemm/head_launch.h"

namespace qwen38::gemm {
namespace {

constexpr int64_t kHeadKAlign = 16;  // same as qwen38_kernels/_checks_fp8.py HEAD_K_ALIGN

// QWEN38_HEAD_KERNEL: "tiles" (default: head_tiles.cuh) or "ring" (head_kernel.cuh). Each keeps every
// row's bits those of its 1-row call; the two kernels sum in different orders (different bits).
bool head_tiles(const char* op) {
  const char* v = std::getenv("QWEN38_HEAD_KERNEL");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "tiles") == 0) return true;
  TORCH_CHECK_VALUE(std::strcmp(v, "ring") == 0, "qwen38.", op, ": QWEN38_HEAD_KERNEL must be tiles or ring, got '",
                    v, "'");
  return false;
}

// QWEN38_HEAD_STAGES (tiles kernel): "auto" or empty (0: head_plan picks by the grid), "3" or "4".
int head_stages(const char* op) { return knob_choice(op, "QWEN38_HEAD_STAGES", "auto", 0, {3, 4}); }

// QWEN38_HEAD_COLS (tiles kernel): the column tile, "64" (default, or empty), "128" or "32".
int head_cols(const char* op) { return knob_choice(op, "QWEN38_HEAD_COLS", "64", 64, {128, 32}); }

// QWEN38_HEAD_NARROW_STAGES (column tiles of 64 / 32): "auto" (default, or empty; 0 here: head_plan
// picks), "4" or "8".
int head_narrow_stages(const char* op) { return knob_choice(op, "QWEN38_HEAD_NARROW_STAGES", "auto", 0, {4, 8}); }

// QWEN38_HEAD_BALANCE (column tiles of 64 / 32): 1 = whole waves of near-equal tiles (head_plan); 0, the
// default: ceil(V / cols) tiles.
bool head_balance() { return knob_enabled("QWEN38_HEAD_BALANCE", false); }

// x [..., K] bf16/fp16 and w [V, K] in x's dtype on one CUDA device. Returns (V, K, M, x row stride).
std::tuple<int64_t, int64_t, int64_t, int64_t> check_head(const char* op, const at::Tensor& x, const at::Tensor& w) {
  check_cuda(op, "x", x);
  check_activation(op, "x", x);
  TORCH_CHECK_VALUE(w.scalar_type() == x.scalar_type(), "qwen38.", op, ": w must be ", dtype_name(x.scalar_type()),
                    " (x's dtype), got ", dtype_name(w.scalar_type()), " (shape ", shape_str(w.sizes()), ")");
  TORCH_CHECK_VALUE(w.dim() == 2, "qwen38.", op, ": w must be 2-D [V, K], got shape ", shape_str(w.sizes()));
  const int64_t v = w.size(0), k = w.size(1);
  TORCH_CHECK_VALUE(k > 0 && k % kHeadKAlign == 0, "qwen38.", op, ": w must have K = w.shape[1] a positive multiple of ",
                    num(kHeadKAlign), ", got K = ", num(k), " (w shape ", shape_str(w.sizes()), ")");
  TORCH_CHECK_VALUE(w.is_contiguous(), "qwen38.", op, ": w must be contiguous (row-major), got strides ",
                    shape_str(w.strides()), " for shape ", shape_str(w.sizes()));
  check_same_device(op, "w", w, "x", x);
  TORCH_CHECK_VALUE(x.size(-1) == k, "qwen38.", op, ": x's last dimension must be K = w.shape[1] = ", num(k),
                    ", got x shape ", shape_str(x.sizes()), " for w shape ", shape_str(w.sizes()));
  const int64_t m = x.numel() / k;
  const int64_t x_stride = row_stride(op, "x", x);
  if (m > 0 && v > 0) {
    TORCH_CHECK_VALUE(reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0 && x_stride % 8 == 0, "qwen38.", op,
                      ": x rows must start on 16-byte boundaries (data pointer and row stride a multiple of 8 "
                      "elements), got row stride ", num(x_stride));
    TORCH_CHECK_VALUE(reinterpret_cast<uintptr_t>(w.data_ptr()) % 16 == 0, "qwen38.", op,
                      ": w must start on a 16-byte boundary");
  }
  return {v, k, m, x_stride};
}

// The kernel parameters every chunk shares: rows r0 .. r0 + 31 of x (fewer in the last chunk).
HeadParams chunk_params(const at::Tensor& x, const at::Tensor& w, int64_t r0, int64_t m, int64_t v, int64_t k,
                        int64_t x_stride) {
  HeadParams p;
  p.m = std::min(kHeadMaxRows, m - r0);
  p.v = v;
  p.k = k;
  p.x_stride = x_stride;
  p.x = static_cast<const char*>(x.data_ptr()) + r0 * x_stride * x.element_size();
  p.w = w.data_ptr();
  return p;
}

std::vector<int64_t> lead_sizes(const at::Tensor& x) {
  return std::vector<int64_t>(x.sizes().begin(), x.sizes().end() - 1);
}

at::Tensor head_logits_cuda(const at::Tensor& x, const at::Tensor& w) {
  constexpr const char* kOp = "head_logits";
  const auto [v, k, m, x_stride] = check_head(kOp, x, w);
  std::vector<int64_t> sizes = lead_sizes(x);
  sizes.push_back(v);
  at::Tensor y = new_output(sizes, x.options().dtype(at::kFloat));
  if (m == 0 || v == 0) return y;

  const c10::cuda::CUDAGuard guard(x.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream(x.device().index()).stream();
  const bool pdl = knob_enabled("QWEN38_PDL", true);
  const Act act = act_of(x);
  const bool tiles = head_tiles(kOp);
  const int stages = head_stages(kOp), cols = head_cols(kOp), nstages = head_narrow_stages(kOp);
  for (int64_t r0 = 0; r0 < m; r0 += kHeadMaxRows) {
    HeadParams p = chunk_params(x, w, r0, m, v, k, x_stride);
    p.y = y.data_ptr<float>() + r0 * v;
    HeadPlan plan;
    check_launch(kOp, head_plan(act, p.m, v, k, false, tiles, stages, cols, nstages, &plan, head_balance()), x);
    check_launch(kOp, launch_head(act, false, plan, p, pdl, stream), x);
  }
  return y;
}

std::tuple<at::Tensor, at::Tensor> head_argmax_cuda(const at::Tensor& x, const at::Tensor& w) {
  constexpr const char* kOp = "head_argmax";
  const auto [v, k, m, x_stride] = check_head(kOp, x, w);
  TORCH_CHECK_VALUE(v >= 1, "qwen38.", kOp, ": w must have at least one row (V >= 1) to pick a winner from, got shape ",
                    shape_str(w.sizes()));
  const std::vector<int64_t> sizes = lead_sizes(x);
  at::Tensor idx = new_output(sizes, x.options().dtype(at::kLong));
  at::Tensor val = new_output(sizes, x.options().dtype(at::kFloat));
  if (m == 0) return {idx, val};

  const c10::cuda::CUDAGuard guard(x.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream(x.device().index()).stream();
  const bool pdl = knob_enabled("QWEN38_PDL", true);
  const Act act = act_of(x);
  // one plan for the workspace: the grid depends on the row tiles (1..16 or 17..32 rows), so size it
  // for the larger of the chunks' grids
  const bool tiles = head_tiles(kOp);
  const int stages = head_stages(kOp), cols = head_cols(kOp), nstages = head_narrow_stages(kOp);
  HeadPlan plan_lo, plan_hi;
  const bool bal = head_balance();
  const int64_t m_lo = std::min(m, int64_t(16)), m_hi = std::min(m, kHeadMaxRows);
  check_launch(kOp, head_plan(act, m_lo, v, k, true, tiles, stages, cols, nstages, &plan_lo, bal), x);
  check_launch(kOp, head_plan(act, m_hi, v, k, true, tiles, stages, cols, nstages, &plan_hi, bal), x);
  const int64_t ws_blocks = std::max(plan_lo.blocks, plan_hi.blocks);
  // per-block winners: fp32 logits then int32 columns (caching allocator: graph-safe, no sync)
  at::Tensor ws = at::empty({2 * ws_blocks * kHeadMaxRows}, x.options().dtype(at::kInt));
  for (int64_t r0 = 0; r0 < m; r0 += kHeadMaxRows) {
    HeadParams p = chunk_params(x, w, r0, m, v, k, x_stride);
    p.ws_val = reinterpret_cast<float*>(ws.data_ptr<int32_t>());
    p.ws_idx = ws.data_ptr<int32_t>() + ws_blocks * kHeadMaxRows;
    p.best_val = val.data_ptr<float>() + r0;
    p.best_idx = idx.data_ptr<int64_t>() + r0;
    const HeadPlan& plan = p.m <= 16 ? plan_lo : plan_hi;
    check_launch(kOp, launch_head(act, true, plan, p, pdl, stream), x);
  }
  return {idx, val};
}

}  // namespace
}  // namespace qwen38::gemm

TORCH_LIBRARY_IMPL(qwen38, CUDA, m) {
  m.impl("head_logits", &qwen38::gemm::head_logits_cuda);
  m.impl("head_argmax", &qwen38::gemm::head_argmax_cuda);
}
