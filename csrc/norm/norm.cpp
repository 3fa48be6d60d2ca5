// Host side of the norm family: check inputs -> collapse rows -> launch on the current stream.
// Kernels and the launch shape live in norm_kernel.cu(h); this file is compiled once by the host
// compiler (not once per GPU architecture).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cmath>
#include <vector>

#include "common/host.h"
#include "norm/norm_launch.h"

namespace qwen38::norm {
namespace {

DType to_dtype(at::ScalarType t) {
  return t == at::kBFloat16 ? DType::kBF16 : t == at::kHalf ? DType::kF16 : DType::kF32;
}

void check_common(const char* op, const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_cuda(op, "x", x);
  check_activation(op, "x", x);
  TORCH_CHECK_VALUE(weight.scalar_type() == x.scalar_type() || weight.scalar_type() == at::kFloat,
                    "qwen38.", op, ": weight must be ", dtype_name(x.scalar_type()),
                    " (x's dtype) or torch.float32, got ", dtype_name(weight.scalar_type()));
  TORCH_CHECK_VALUE(weight.dim() == 1 && weight.size(0) == x.size(-1), "qwen38.", op,
                    ": weight must be 1-D with x.shape[-1] = ", num(x.size(-1)),
                    " elements, got weight shape ", shape_str(weight.sizes()), " for x shape ",
                    shape_str(x.sizes()));
  TORCH_CHECK_VALUE(weight.numel() <= 1 || weight.stride(0) == 1, "qwen38.", op,
                    ": weight must be contiguous, got stride ", shape_str(weight.strides()));
  check_same_device(op, "weight", weight, "x", x);
  TORCH_CHECK_VALUE(std::isfinite(eps) && eps >= 0, "qwen38.", op,
                    ": eps must be a finite number >= 0, got ", num(eps));
  TORCH_CHECK_VALUE(x.size(-1) <= kMaxHiddenElems, "qwen38.", op, ": the CUDA kernel takes rows of at most ",
                    num(kMaxHiddenElems), " elements, got x.shape[-1] = ", num(x.size(-1)), " (x shape ",
                    shape_str(x.sizes()), ")");
}

Params make_params(const char* op, const at::Tensor& x, const at::Tensor& weight, double eps,
                   const at::Tensor& y) {
  Params p;
  p.x = x.data_ptr();
  p.weight = weight.data_ptr();
  p.y = y.data_ptr();
  p.hidden = x.size(-1);
  p.rows = p.hidden == 0 ? 0 : x.numel() / p.hidden;
  p.x_stride = row_stride(op, "x", x);
  p.eps = static_cast<float>(eps);
  return p;
}

void run(const char* op, Kind kind, const at::Tensor& x, const at::Tensor& weight, const Params& p) {
  if (p.rows == 0) return;  // empty input: empty output, no launch
  const c10::cuda::CUDAGuard guard(x.device());
  const cudaError_t err = launch(kind, to_dtype(x.scalar_type()), to_dtype(weight.scalar_type()), p,
                                 knob_enabled("QWEN38_PDL", true), knob_enabled("QWEN38_NORM_STREAM", true),
                                 at::cuda::getCurrentCUDAStream(x.device().index()).stream());
  check_launch(op, err, x);
}

at::Tensor rms_norm_cuda(const at::Tensor& x, const at::Tensor& weight, double eps,
                         bool zero_centered) {
  constexpr const char* op = "rms_norm";
  check_common(op, x, weight, eps);
  at::Tensor y = new_output(x.sizes(), x.options());
  Params p = make_params(op, x, weight, eps, y);
  p.zero_centered = zero_centered;
  run(op, Kind::kRms, x, weight, p);
  return y;
}

std::tuple<at::Tensor, at::Tensor> add_rms_norm_cuda(const at::Tensor& x, const at::Tensor& residual,
                                                     const at::Tensor& weight, double eps,
                                                     bool zero_centered) {
  constexpr const char* op = "add_rms_norm";
  check_common(op, x, weight, eps);
  check_like(op, "residual", residual, "x", x);
  at::Tensor y = new_output(x.sizes(), x.options());
  at::Tensor h = new_output(x.sizes(), x.options());
  Params p = make_params(op, x, weight, eps, y);
  p.residual = residual.data_ptr();
  p.res_stride = row_stride(op, "residual", residual);
  p.residual_out = h.data_ptr();
  p.zero_centered = zero_centered;
  run(op, Kind::kAddRms, x, weight, p);
  return {y, h};
}

at::Tensor rms_norm_gated_cuda(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& weight,
                               double eps) {
  constexpr const char* op = "rms_norm_gated";
  check_common(op, x, weight, eps);
  check_like(op, "gate", gate, "x", x);
  at::Tensor y = new_output(x.sizes(), x.options());
  Params p = make_params(op, x, weight, eps, y);
  p.gate = gate.data_ptr();
  p.gate_stride = row_stride(op, "gate", gate);
  run(op, Kind::kGated, x, weight, p);
  return y;
}

at::Tensor silu_mul_cuda(const at::Tensor& x) {
  constexpr const char* op = "silu_mul";
  check_cuda(op, "x", x);
  check_activation(op, "x", x);
  TORCH_CHECK_VALUE(x.size(-1) % 2 == 0, "qwen38.", op, ": x.shape[-1] must be even (gate then up, I each), got ",
                    num(x.size(-1)), " (x shape ", shape_str(x.sizes()), ")");
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() /= 2;
  at::Tensor y = new_output(sizes, x.options());
  ActParams p;
  p.x = x.data_ptr();
  p.y = y.data_ptr();
  p.inter = sizes.back();
  p.rows = p.inter == 0 ? 0 : y.numel() / p.inter;
  p.x_stride = row_stride(op, "x", x);
  if (p.rows == 0) return y;
  const c10::cuda::CUDAGuard guard(x.device());
  check_launch(op, launch_silu_mul(to_dtype(x.scalar_type()), p, knob_enabled("QWEN38_PDL", true),
                                   at::cuda::getCurrentCUDAStream(x.device().index()).stream()), x);
  return y;
}

}  // namespace
}  // namespace qwen38::norm

TORCH_LIBRARY_IMPL(qwen38, CUDA, m) {
  m.impl("rms_norm", &qwen38::norm::rms_norm_cuda);
  m.impl("add_rms_norm", &qwen38::norm::add_rms_norm_cuda);
  m.impl("rms_norm_gated", &qwen38::norm::rms_norm_gated_cuda);
  m.impl("silu_mul", &qwen38::norm::silu_mul_cuda);
}
