// Host-side helpers for the launchers (torch types allowed here, never in kernels): argument checks
// whose messages name the op, the argument and the shapes, and row collapsing for [..., H] tensors.
// The Python fakes/CPU kernels (qwen38_kernels/_checks.py) use the same wording.
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/util/Exception.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace qwen38 {

// Numbers in messages are formatted here (to_string / snprintf), never by streaming them into an
// ostream: on the H200 machine's torch build, an ostream << integer inside an extension's error
// message crashed the process (seen in the GPU tests), while strings and devices streamed fine.
template <typename I, std::enable_if_t<std::is_integral_v<I>, int> = 0>
inline std::string num(I v) { return std::to_string(v); }
inline std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

inline std::string shape_str(at::IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

inline const char* dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16: return "torch.bfloat16";
    case at::kHalf: return "torch.float16";
    case at::kFloat: return "torch.float32";
    case at::kDouble: return "torch.float64";
    case at::kByte: return "torch.uint8";
    case at::kInt: return "torch.int32";
    case at::kLong: return "torch.int64";
    case at::kFloat8_e4m3fn: return "torch.float8_e4m3fn";
    default: return c10::toString(t);
  }
}

// A bf16/fp16 activation on a CUDA device with a contiguous last dimension.
inline void check_activation(const char* op, const char* name, const at::Tensor& t) {
  TORCH_CHECK_VALUE(t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf, "qwen38.", op,
                    ": ", name, " must be bfloat16 or float16, got ", dtype_name(t.scalar_type()),
                    " (shape ", shape_str(t.sizes()), ")");
  TORCH_CHECK_VALUE(t.dim() >= 1, "qwen38.", op, ": ", name,
                    " must have at least one dimension, got a 0-d tensor");
  TORCH_CHECK_VALUE(t.numel() == 0 || t.size(-1) <= 1 || t.stride(-1) == 1, "qwen38.", op, ": ", name,
                    " must be contiguous in its last dimension, got strides ", shape_str(t.strides()),
                    " for shape ", shape_str(t.sizes()));
}

inline void check_same_device(const char* op, const char* name, const at::Tensor& t,
                              const char* like_name, const at::Tensor& like) {
  TORCH_CHECK_VALUE(t.device() == like.device(), "qwen38.", op, ": ", name, " is on ", t.device().str(),
                    " but ", like_name, " is on ", like.device().str());
}

inline void check_cuda(const char* op, const char* name, const at::Tensor& t) {
  TORCH_CHECK_VALUE(t.is_cuda(), "qwen38.", op, ": ", name, " is on ", t.device().str(),
                    " but the op runs on CUDA: move every tensor argument to one CUDA device");
}

// Same dtype, shape and device as `like`.
inline void check_like(const char* op, const char* name, const at::Tensor& t, const char* like_name,
                       const at::Tensor& like) {
  check_activation(op, name, t);
  TORCH_CHECK_VALUE(t.scalar_type() == like.scalar_type(), "qwen38.", op, ": ", name, " must have ",
                    like_name, "'s dtype ", dtype_name(like.scalar_type()), ", got ",
                    dtype_name(t.scalar_type()));
  TORCH_CHECK_VALUE(t.sizes() == like.sizes(), "qwen38.", op, ": ", name, " must have ", like_name,
                    "'s shape ", shape_str(like.sizes()), ", got ", shape_str(t.sizes()));
  check_same_device(op, name, t, like_name, like);
}

// Views t [..., H] as rows of H elements with one row stride, without a copy. Leading dims of size
// 1 are ignored; the others must nest (stride[d] == stride[d+1] * size[d+1]), which holds for
// contiguous tensors and for slices of the last dimension such as q[..., :256] of [M, 24, 512].
inline int64_t row_stride(const char* op, const char* name, const at::Tensor& t) {
  if (t.numel() == 0) return t.size(-1);  // nothing is read: any stride will do
  const int64_t nd = t.dim();
  int64_t base = t.size(-1), span = 1;
  bool first = true;
  for (int64_t d = nd - 2; d >= 0; --d) {
    if (t.size(d) == 1) continue;
    if (first) {
      base = t.stride(d);
      first = false;
    } else {
      TORCH_CHECK_VALUE(t.stride(d) == base * span, "qwen38.", op, ": ", name,
                        "'s leading dimensions must collapse into rows of one stride (a contiguous "
                        "tensor, or a slice of its last dimension); got shape ",
                        shape_str(t.sizes()), " with strides ", shape_str(t.strides()));
    }
    span *= t.size(d);
  }
  return base;
}

// A QWEN38_* knob read at call time (qwen38_kernels/knobs.py sets the environment, so knobs flip
// inside one process). "0", "false", "no", "off" switch it off; unset means `dflt`.
inline bool knob_enabled(const char* name, bool dflt) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return dflt;
  for (const char* off : {"0", "false", "no", "off", "False", "FALSE", "OFF", "NO"})
    if (std::strcmp(v, off) == 0) return false;
  return true;
}

// A QWEN38_* knob that names one of a few integer settings: unset, empty or `dflt_word` give `dflt`;
// one of `values` (written in decimal) gives that value; anything else a ValueError naming the op, the
// knob and the choices ("must be auto, 3 or 4, got '5'").
inline int knob_choice(const char* op, const char* name, const char* dflt_word, int dflt,
                       std::initializer_list<int> values) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0' || std::strcmp(v, dflt_word) == 0) return dflt;
  std::string choices = dflt_word;
  size_t i = 0;
  for (const int c : values) {
    const std::string word = std::to_string(c);
    if (word == v) return c;
    choices += (++i == values.size() ? " or " : ", ") + word;
  }
  TORCH_CHECK_VALUE(false, "qwen38.", op, ": ", name, " must be ", choices, ", got '", v, "'");
  return dflt;
}

// An index tensor's values on the host as int64 (a synchronising copy: eager calls only; the conv, GDN
// and attention launchers validate their index values with it).
inline std::vector<int64_t> host_index_values(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kCPU, at::kLong).contiguous();
  const int64_t* d = c.data_ptr<int64_t>();
  return std::vector<int64_t>(d, d + c.numel());
}

// Whether an eager call validates its index values now: `knob` (default on) and no CUDA-graph capture on
// the current stream (a capture cannot read device values on the host).
inline bool index_checks_now(const char* knob) {
  return knob_enabled(knob, true) &&
         c10::cuda::currentStreamCaptureStatusMayInitCtx() == c10::cuda::CaptureStatus::None;
}

// An int32/int64 index tensor as the kernels take it: its data pointer and whether it is int64. An
// absent optional leaves both as they are (the null pointer means "not given").
inline void set_index(const void*& ptr, bool& is64, const at::Tensor& t) {
  ptr = t.data_ptr();
  is64 = t.scalar_type() == at::kLong;
}
inline void set_index(const void*& ptr, bool& is64, const std::optional<at::Tensor>& t) {
  if (t.has_value()) set_index(ptr, is64, *t);
}

// A new output tensor. With QWEN38_POISON_OUTPUTS=1 (the tests) it starts filled with NaN, so an
// element the kernel forgets to write shows up instead of hiding behind whatever the memory held.
inline at::Tensor new_output(at::IntArrayRef sizes, const at::TensorOptions& options) {
  if (knob_enabled("QWEN38_POISON_OUTPUTS", false)) {
    // floating outputs start as NaN; integer outputs (indices) as the most negative value
    if (at::isFloatingType(options.dtype().toScalarType()))
      return at::full(sizes, std::numeric_limits<float>::quiet_NaN(), options);
    return at::full(sizes, std::numeric_limits<int64_t>::min(), options);
  }
  return at::empty(sizes, options);
}

inline void check_launch(const char* op, cudaError_t err, const at::Tensor& on) {
  if (err == cudaSuccess) return;
  if (err == cudaErrorNoKernelImageForDevice || err == cudaErrorInvalidDeviceFunction) {
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, on.device().index());
    TORCH_CHECK(false, "qwen38.", op, ": this build of qwen38_kernels has no kernel for ", prop.name,
                " (sm_", num(prop.major), num(prop.minor), "); rebuild with TORCH_CUDA_ARCH_LIST including ",
                num(prop.major), ".", num(prop.minor), "a (see README: building for another architecture)");
  }
  TORCH_CHECK(false, "qwen38.", op, ": kernel launch failed: ", cudaGetErrorString(err));
}

}  // namespace qwen38
