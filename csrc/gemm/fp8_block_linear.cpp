// Host side of fp8_block_linear: check inputs -> launch the skinny kernel (1..32 rows).
// More rows: not built yet (the op says so).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <optional>

#include "gemm/gemm_host.h"
#include "gemm/fp8_block_linear_launch.h"

namespace qwen38::gemm {
namespace {

// QWEN38_FP8_STREAM: unset or 1 -> 1 (the register-stream kernel where it serves, 1..32 rows),
// "narrow" -> 2 (1..16 rows only), off -> 0 (the skinny kernel).
int fp8_stream_mode() {
  const char* v = std::getenv("QWEN38_FP8_STREAM");
  if (v != nullptr && std::strcmp(v, "narrow") == 0) return 2;
  return knob_enabled("QWEN38_FP8_STREAM", true) ? 1 : 0;
}

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
  check_skinny_rows(kOp, m, kSkinnyMaxRows, x, x_stride);
  TORCH_CHECK_VALUE(reinterpret_cast<uintptr_t>(w.data_ptr()) % 16 == 0, "qwen38.", kOp, ": w must be 16-byte aligned");

  Fp8BlockParams p;
  p.x = x.data_ptr();
  p.w = static_cast<const uint8_t*>(w.data_ptr());
  p.scale = w_scale_inv.data_ptr<float>();
  p.bias = bias.has_value() ? bias->data_ptr() : nullptr;
  p.bias_dtype = bias_dtype;
  p.y = y.data_ptr();
  p.m = m;
  p.n = n;
  p.k = k;
  p.x_stride = x_stride;
  p.out = int(out_of(od));
  p.stream = fp8_stream_mode();
  const SkinnyVariant v = skinny_variant_for(kOp, SkinnyOp::kFp8Block, "fp8_block.json", n, k);
  const c10::cuda::CUDAGuard guard(x.device());
  check_launch(kOp, launch_fp8_block_skinny(act_of(x), p, v, knob_enabled("QWEN38_PDL", true),
                                            at::cuda::getCurrentCUDAStream(x.device().index()).stream()),
               x);
  return y;
}

}  // namespace
}  // namespace qwen38::gemm

TORCH_LIBRARY_IMPL(qwen38, CUDA, m) { m.impl("fp8_block_linear", &qwen38::gemm::fp8_block_linear_cuda); }
