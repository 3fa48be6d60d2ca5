// Host side of fp8_block_linear: check inputs -> launch the skinny kernel (1..32 rows; more rows
// in 32-row slices).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <optional>

#include "gemm/gemm_host.h"
#include "gemm/fp8_block_linear_launch.h"

namespace qwen38::gemm {
namespace {

constexpr const char* kOp = "fp8_block_linear";

at::Tensor fp8_block_linear_cuda(const at::Tensor& x, const at::Tensor& w, const at::Tensor& w_scale_inv,
                                 const std::optional<at::Tensor>& bias, std::optional<at::ScalarType> out_dtype) {
  check_cuda(kOp, "x", x);
  check_activation(kOp, "x", x);
  TORCH_CHECK_VALUE(w.scalar_type() == at::kFloat8_e4m3fn && w.dim() == 2, "qwen38.", kOp,
                    ": w must be a 2-D float8_e4m3fn tensor [N, K], got ", dtype_name(w.scalar_type()),
                    " of shape ", shape_str(w.sizes()));
  const int64_t n = w.size(0), k = w.size(1);
  TORCH_CHECK_VALUE(k > 0 && k % 16 == 0, "qwen38.", kOp, ": w must have K = w.shape[1] a positive multiple of 16, got ",
                    num(k));
  TORCH_CHECK_VALUE(x.size(-1) == k, "qwen38.", kOp, ": x.shape[-1] must equal K = ", num(k), " (w shape ",
                    shape_str(w.sizes()), "), got x shape ", shape_str(x.sizes()));
  TORCH_CHECK_VALUE(w.is_contiguous(), "qwen38.", kOp, ": w must be contiguous (row-major)");
  const int64_t gn = (n + 127) / 128, gk = (k + 127) / 128;
  TORCH_CHECK_VALUE(w_scale_inv.scalar_type() == at::kFloat, "qwen38.", kOp,
                    ": w_scale_inv must be float32, got ", dtype_name(w_scale_inv.scalar_type()));
  TORCH_CHECK_VALUE(w_scale_inv.dim() == 2 && w_scale_inv.size(0) == gn && w_scale_inv.size(1) == gk, "qwen38.", kOp,
                    ": w_scale_inv must be [ceil(N/128), ceil(K/128)] = [", num(gn), ", ", num(gk), "] for w shape ",
                    shape_str(w.sizes()), ", got ", shape_str(w_scale_inv.sizes()));
  TORCH_CHECK_VALUE(w_scale_inv.is_contiguous(), "qwen38.", kOp, ": w_scale_inv must be contiguous");
  check_same_device(kOp, "w", w, "x", x);
  check_same_device(kOp, "w_scale_inv", w_scale_inv, "x", x);
  const int bias_dtype = check_bias(kOp, bias, n, x);
  const at::ScalarType od = check_out_dtype(kOp, out_dtype, x);
  at::Tensor y = new_linear_output(x, n, od);
  const int64_t m = x.numel() / k;
  if (m == 0 || n == 0) return y;
  const int64_t x_stride = row_stride(kOp, "x", x);
  check_x_rows_aligned(kOp, x, x_stride);
  TORCH_CHECK_VALUE(reinterpret_cast<uintptr_t>(w.data_ptr()) % 16 == 0, "qwen38.", kOp, ": w must be 16-byte aligned");

  Fp8BlockParams p;
  p.x = x.data_ptr();
  p.w = static_cast<const uint8_t*>(w.data_ptr());
  p.scale = w_scale_inv.data_ptr<float>();
  p.bias = bias.has_value() ? bias->data_ptr() : nullptr;
  p.bias_dtype = bias_dtype;
  p.y = y.data_ptr();
  p.n = n;
  p.k = k;
  p.x_stride = x_stride;
  p.out = int(out_of(od));
  p.stream = knob_enabled("QWEN38_FP8_STREAM", true);
  const SkinnyVariant v = skinny_variant_for(kOp, SkinnyOp::kFp8Block, "fp8_block.json", n, k);
  const c10::cuda::CUDAGuard guard(x.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream(x.device().index()).stream();
  const bool pdl = knob_enabled("QWEN38_PDL", true);
  // More than 32 rows: the skinny kernel on 32-row slices (each row still bit-identical to its
  // 1-row call; the weight is read once per slice: no tensor-core prefill path yet).
  const int64_t x_es = x.element_size(), y_es = od == at::kFloat ? 4 : 2;
  const char* x0 = static_cast<const char*>(p.x);
  char* y0 = static_cast<char*>(p.y);
  for (int64_t r0 = 0; r0 < m; r0 += kSkinnyMaxRows) {
    p.m = std::min(kSkinnyMaxRows, m - r0);
    p.x = x0 + r0 * x_stride * x_es;
    p.y = y0 + r0 * n * y_es;
    check_launch(kOp, launch_fp8_block_skinny(act_of(x), p, v, pdl, stream), x);
  }
  return y;
}

}  // namespace
}  // namespace qwen38::gemm

TORCH_LIBRARY_IMPL(qwen38, CUDA, m) { m.impl("fp8_block_linear", &qwen38::gemm::fp8_block_linear_cuda); }
