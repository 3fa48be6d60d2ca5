// The API's table of contents: every qwen38 op schema, grouped by family, one comment per op.
// CUDA implementations register in csrc/<family>/*.cpp (TORCH_LIBRARY_IMPL); the pure-PyTorch
// references register as CPU kernels and the fakes as Meta kernels from qwen38_kernels/ops/.
// pybind11 serves the module init and non-op helpers only.
#include <torch/extension.h>
#include <torch/library.h>

#include "norm/norm_launch.h"

TORCH_LIBRARY(qwen38, m) {
  // ---- norm family (csrc/norm/) -----------------------------------------------------------
  // y = round(x * rsqrt(mean(x^2) + eps) * (1 + weight))  (zero_centered; else * weight) over the
  // last dim of x [..., H] (bf16/fp16); weight [H] in x's dtype or fp32. One rounding.
  m.def("rms_norm(Tensor x, Tensor weight, float eps, bool zero_centered) -> Tensor");
  // h = round(x + residual); y = rms_norm(h, weight, eps, zero_centered); returns (y, h).
  m.def("add_rms_norm(Tensor x, Tensor residual, Tensor weight, float eps, bool zero_centered)"
        " -> (Tensor, Tensor)");
  // GDN output norm: n = round(x * rsqrt(mean(x^2) + eps)); m = weight * n (rounded when weight
  // has x's dtype); y = round(m * silu(gate)). x, gate [..., H]; weight [H].
  m.def("rms_norm_gated(Tensor x, Tensor gate, Tensor weight, float eps) -> Tensor");
}

namespace {

// (binary_version, ptx_version) of a representative kernel on the current device, or an error
// string when this build holds no image that device can run.
pybind11::object probe_device() {
  int bin = 0, ptx = 0;
  const cudaError_t err = qwen38::norm::probe_kernel_image(&bin, &ptx);
  if (err != cudaSuccess) return pybind11::str(cudaGetErrorString(err));
  return pybind11::make_tuple(bin, ptx);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "qwen38-kernels compiled extension (ops live in torch.ops.qwen38)";
  m.def("probe_device", &probe_device,
        "(binary_version, ptx_version) of a kernel on the current CUDA device, or the CUDA error "
        "string when this build cannot run there");
}
