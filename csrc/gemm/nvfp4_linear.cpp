// Host side of nvfp4_linear: check inputs -> choose the kernel by row count -> launch.
// 1..32 rows: the skinny kernel (gemm/nvfp4_linear_kernel.cuh). More rows: not built yet (the
// prefill paths of the NVFP4 issue); the op says so instead of silently taking a slow path.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <optional>

#include "gemm/gemm_host.h"
#include "gemm/nvfp4_linear_launch.h"

namespace qwen38::gemm {
namespace {

constexpr const char* kOp = "nvfp4_linear";

bool aligned(const void* p, uintptr_t a) { return (reinterpret_cast<uintptr_t>(p) % a) == 0; }

at::Tensor nvfp4_linear_cuda(const at::Tensor& x, const at::Tensor& w_packed, const at::Tensor& w_scale,
                             const at::Tensor& w_global, const std::optional<at::Tensor>& bias,
                             std::optional<at::ScalarType> out_dtype) {
  check_cuda(kOp, "x", x);
  check_activation(kOp, "x", x);
  TORCH_CHECK_VALUE(w_packed.scalar_type() == at::kByte && w_packed.dim() == 2, "qwen38.", kOp,
                    ": w_packed must be a 2-D uint8 tensor [N, K/2], got ", dtype_name(w_packed.scalar_type()),
                    " of shape ", shape_str(w_packed.sizes()));
  const int64_t n = w_packed.size(0), k = 2 * w_packed.size(1);
  TORCH_CHECK_VALUE(k % 32 == 0 && k > 0, "qwen38.", kOp, ": K = 2 * w_packed.shape[1] must be a positive multiple of 32, got K = ",
                    num(k), " (w_packed shape ", shape_str(w_packed.sizes()), ")");
  TORCH_CHECK_VALUE(x.size(-1) == k, "qwen38.", kOp, ": x.shape[-1] must equal K = ", num(k),
                    " (from w_packed shape ", shape_str(w_packed.sizes()), "), got x shape ", shape_str(x.sizes()));
  TORCH_CHECK_VALUE(w_packed.is_contiguous(), "qwen38.", kOp, ": w_packed must be contiguous, got strides ",
                    shape_str(w_packed.strides()));
  TORCH_CHECK_VALUE(w_scale.scalar_type() == at::kFloat8_e4m3fn, "qwen38.", kOp,
                    ": w_scale must be torch.float8_e4m3fn, got ", dtype_name(w_scale.scalar_type()));
  TORCH_CHECK_VALUE(w_scale.dim() == 2 && w_scale.size(0) == n && w_scale.size(1) == k / 16, "qwen38.", kOp,
                    ": w_scale must be [N, K/16] = [", num(n), ", ", num(k / 16), "] for w_packed shape ",
                    shape_str(w_packed.sizes()), ", got ", shape_str(w_scale.sizes()));
  TORCH_CHECK_VALUE(w_scale.is_contiguous(), "qwen38.", kOp, ": w_scale must be contiguous (row-major), got strides ",
                    shape_str(w_scale.strides()));
  TORCH_CHECK_VALUE(w_global.scalar_type() == at::kFloat && w_global.numel() == 1, "qwen38.", kOp,
                    ": w_global must be a one-element float32 tensor, got ", dtype_name(w_global.scalar_type()),
                    " of shape ", shape_str(w_global.sizes()));
  check_same_device(kOp, "w_packed", w_packed, "x", x);
  check_same_device(kOp, "w_scale", w_scale, "x", x);
  check_same_device(kOp, "w_global", w_global, "x", x);
  const int bias_dtype = check_bias(kOp, bias, n, x);
  const at::ScalarType od = check_out_dtype(kOp, out_dtype, x);
  at::Tensor y = new_linear_output(x, n, od);
  const int64_t m = x.numel() / k;
  if (m == 0 || n == 0) return y;

  const int64_t x_stride = row_stride(kOp, "x", x);
  check_skinny_rows(kOp, m, kSkinnyMaxRows, x, x_stride);
  TORCH_CHECK_VALUE(aligned(w_packed.data_ptr(), 16), "qwen38.", kOp, ": w_packed must be 16-byte aligned");
  TORCH_CHECK_VALUE(aligned(w_scale.data_ptr(), 2), "qwen38.", kOp, ": w_scale must be 2-byte aligned");

  Nvfp4Params p;
  p.x = x.data_ptr();
  p.w = static_cast<const uint8_t*>(w_packed.data_ptr());
  p.scale = static_cast<const uint8_t*>(w_scale.data_ptr());
  p.global = w_global.data_ptr<float>();
  p.bias = bias.has_value() ? bias->data_ptr() : nullptr;
  p.bias_dtype = bias_dtype;
  p.y = y.data_ptr();
  p.m = m;
  p.n = n;
  p.k = k;
  p.x_stride = x_stride;
  p.out = int(out_of(od));
  const SkinnyVariant v = skinny_variant_for(kOp, SkinnyOp::kNvfp4, "nvfp4_skinny.json", n, k);
  const c10::cuda::CUDAGuard guard(x.device());
  check_launch(kOp, launch_nvfp4_skinny(act_of(x), p, v, knob_enabled("QWEN38_PDL", true),
                                        at::cuda::getCurrentCUDAStream(x.device().index()).stream()),
               x);
  return y;
}

}  // namespace
}  // namespace qwen38::gemm

TORCH_LIBRARY_IMPL(qwen38, CUDA, m) { m.impl("nvfp4_linear", &qwen38::gemm::nvfp4_linear_cuda); }
