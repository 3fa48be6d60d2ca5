// Host side of the causal conv1d family: conv_step, conv_chain, conv_tree, conv_commit.
// Check shapes/dtypes/devices (always) and the index values (eager calls: a small synchronising copy
// of slots/lengths/parents/accepted to the host, as the reference does; skipped while a CUDA graph
// is being captured or with QWEN38_CONV_CHECK_INDICES=0, the kernel then guards memory itself, see
// conv_kernel.cuh) -> launch. Every check happens before anything is written.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/host.h"
#include "conv/conv_launch.h"

namespace qwen38::conv {
namespace {

[[noreturn]] void fail(const char* op, const std::string& msg) {
  TORCH_CHECK_VALUE(false, "qwen38.", op, ": ", msg);
  for (;;) {}
}

std::string list_str(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

bool is_index(const at::Tensor& t) { return t.scalar_type() == at::kInt || t.scalar_type() == at::kLong; }

// An index tensor of `shape`, int32/int64, last dim contiguous, on x's device.
void check_index(const char* op, const char* name, const at::Tensor& t, std::vector<int64_t> shape,
                 const at::Tensor& x) {
  TORCH_CHECK_VALUE(is_index(t), "qwen38.", op, ": ", name, " must be int32 or int64, got ",
                    dtype_name(t.scalar_type()), " (shape ", shape_str(t.sizes()), ")");
  TORCH_CHECK_VALUE(t.sizes() == at::IntArrayRef(shape), "qwen38.", op, ": ", name, " must have shape ",
                    shape_str(shape), ", got ", shape_str(t.sizes()));
  TORCH_CHECK_VALUE(t.numel() == 0 || t.size(-1) <= 1 || t.stride(-1) == 1, "qwen38.", op, ": ", name,
                    " must be contiguous in its last dimension, got strides ", shape_str(t.strides()));
  check_same_device(op, name, t, "x", x);
}

bool check_values(const at::Tensor& x) {
  if (!knob_enabled("QWEN38_CONV_CHECK_INDICES", true)) return false;
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream(x.device().index()).stream();
  if (cudaStreamIsCapturing(stream, &st) != cudaSuccess) return false;
  return st == cudaStreamCaptureStatusNone;
}

// Shapes and dtypes of x, conv_state and (need_weight) weight; returns (B, T).
std::pair<int64_t, int64_t> check_conv(const char* op, const at::Tensor& x, const at::Tensor& conv_state,
                                       const at::Tensor* weight, bool tokens, int64_t max_t) {
  check_cuda(op, "x", x);
  TORCH_CHECK_VALUE(x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kHalf, "qwen38.", op,
                    ": x must be bfloat16 or float16, got ", dtype_name(x.scalar_type()));
  const int64_t nd = tokens ? 3 : 2;
  TORCH_CHECK_VALUE(x.dim() == nd, "qwen38.", op, ": x must have shape ", tokens ? "[B, T, C]" : "[B, C]",
                    ", got ", shape_str(x.sizes()));
  TORCH_CHECK_VALUE(x.numel() == 0 || x.size(-1) <= 1 || x.stride(-1) == 1, "qwen38.", op,
                    ": x must be contiguous in its last dimension, got strides ", shape_str(x.strides()));
  TORCH_CHECK_VALUE(conv_state.scalar_type() == x.scalar_type(), "qwen38.", op, ": conv_state must have x's dtype ",
                    dtype_name(x.scalar_type()), ", got ", dtype_name(conv_state.scalar_type()));
  const int64_t c = x.size(-1);
  TORCH_CHECK_VALUE(conv_state.dim() == 3 && conv_state.size(1) == c && conv_state.size(2) == kWidth - 1, "qwen38.",
                    op, ": conv_state must have shape [S, ", num(c), ", ", num(kWidth - 1), "], got ",
                    shape_str(conv_state.sizes()));
  TORCH_CHECK_VALUE(conv_state.is_contiguous(), "qwen38.", op, ": conv_state must be contiguous, got strides ",
                    shape_str(conv_state.strides()));
  check_same_device(op, "conv_state", conv_state, "x", x);
  const int64_t b = x.size(0), t = tokens ? x.size(1) : 1;
  TORCH_CHECK_VALUE(!tokens || (t >= 1 && t <= max_t), "qwen38.", op, ": x has ", num(t),
                    " tokens per sequence (dim 1); at most ", num(max_t), " and at least 1");
  TORCH_CHECK_VALUE(b <= 65535, "qwen38.", op, ": x has ", num(b), " sequences; at most 65535 a call");
  if (weight != nullptr) {
    const at::Tensor& w = *weight;
    TORCH_CHECK_VALUE(w.scalar_type() == x.scalar_type() || w.scalar_type() == at::kFloat, "qwen38.", op,
                      ": weight must be ", dtype_name(x.scalar_type()), " (x's dtype) or torch.float32, got ",
                      dtype_name(w.scalar_type()), " (shape ", shape_str(w.sizes()), ")");
    TORCH_CHECK_VALUE(w.dim() == 2 && w.size(0) == c && w.size(1) == kWidth, "qwen38.", op,
                      ": weight must have shape [", num(c), ", ", num(kWidth), "], got ", shape_str(w.sizes()));
    TORCH_CHECK_VALUE(w.is_contiguous(), "qwen38.", op, ": weight must be contiguous, got strides ",
                      shape_str(w.strides()));
    check_same_device(op, "weight", w, "x", x);
  }
  return {b, t};
}

void check_slot_values(const char* op, const at::Tensor& slots, int64_t rows, bool distinct) {
  const std::vector<int64_t> s = host_index_values(slots);
  std::set<int64_t> seen;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] < -1 || s[i] >= rows)
      fail(op, "slots[" + num(int64_t(i)) + "] = " + num(s[i]) +
                   " is out of range: a slot must be -1 (padding) or in [0, " + num(rows) + ")");
  }
  if (distinct)
    for (int64_t r : s)
      if (r >= 0 && !seen.insert(r).second)
        fail(op, "slots must be distinct apart from -1 (two sequences would write one pool row), got " + list_str(s));
}

std::vector<int64_t> check_length_values(const char* op, const std::optional<at::Tensor>& lengths, int64_t b,
                                         int64_t t) {
  if (!lengths.has_value()) return std::vector<int64_t>(b, t);
  const std::vector<int64_t> ls = host_index_values(*lengths);
  for (size_t i = 0; i < ls.size(); ++i)
    if (ls[i] < 0 || ls[i] > t)
      fail(op, "lengths[" + num(int64_t(i)) + "] = " + num(ls[i]) + " is out of range [0, " + num(t) + "]");
  return ls;
}

// Depth-first pre-order: every parent is -1 or the node on the current root-to-node path at its
// depth (the reference's _tree_depths, same messages). Depth <= 64 holds since T <= 64.
std::vector<int64_t> check_parent_values(const char* op, const at::Tensor& parents, const std::vector<int64_t>& ls,
                                         int64_t b, int64_t t) {
  const std::vector<int64_t> par = host_index_values(parents.contiguous());
  for (int64_t s = 0; s < b; ++s) {
    std::vector<int64_t> depth(t, 0), path{-1};
    for (int64_t i = 0; i < ls[s]; ++i) {
      const int64_t p = par[s * t + i];
      const std::string at = "parents[" + num(s) + ", " + num(i) + "] = " + num(p);
      if (p < -1 || p >= i) fail(op, at + ": a parent must be -1 or an earlier node in depth-first order");
      const int64_t dp = p < 0 ? 0 : depth[p];
      if (path[dp] != p)
        fail(op, at + " is not on the current root-to-node path: the nodes are not in depth-first order");
      depth[i] = dp + 1;
      path.resize(depth[i]);
      path.push_back(i);
    }
  }
  return par;
}

// Which form of the contract's silu the kernels evaluate (both give the same bits; tests/test_conv.py
// checks it): QWEN38_CONV_SILU_F64=1 float64 always, 0 the fp32 form (silu_exact.cuh) always; unset or
// "auto": float64 on GPUs whose FP64 runs at half the FP32 rate (sm_80, sm_90, sm_100: on the H200 the
// float64 form measured 20% faster at B = 8), the fp32 form elsewhere (sm_86 / 89 / 120 / 121, GB10:
// FP64 at 1/64 of the FP32 rate).
bool silu_in_f64(const at::Tensor& x) {
  const char* v = std::getenv("QWEN38_CONV_SILU_F64");
  if (v != nullptr && *v != '\0' && std::strcmp(v, "auto") != 0) return knob_enabled("QWEN38_CONV_SILU_F64", false);
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(x.device().index());
  return prop->minor == 0 && (prop->major == 8 || prop->major == 9 || prop->major == 10);
}

Params base_params(const at::Tensor& x, const at::Tensor& conv_state, const at::Tensor& slots, int64_t b, int64_t t) {
  Params p;
  p.x = x.data_ptr();
  p.x_sb = x.dim() > 0 ? x.stride(0) : 0;
  p.x_st = x.dim() == 3 ? x.stride(1) : 0;
  p.f16 = x.scalar_type() == at::kHalf;
  p.state = conv_state.data_ptr();
  p.state_rows = conv_state.size(0);
  set_index(p.slots, p.slots64, slots);
  p.batch = b;
  p.tokens = t;
  p.channels = x.size(-1);
  p.silu_f64 = silu_in_f64(x);
  return p;
}

void run(const char* op, Mode mode, const Params& p, const at::Tensor& x) {
  const c10::cuda::CUDAGuard guard(x.device());
  check_launch(op, launch(mode, p, knob_enabled("QWEN38_PDL", true),
                          at::cuda::getCurrentCUDAStream(x.device().index()).stream()),
               x);
}

at::Tensor conv_step_cuda(const at::Tensor& x, at::Tensor& conv_state, const at::Tensor& weight,
                          const at::Tensor& slots) {
  constexpr const char* kOp = "conv_step";
  const auto [b, t] = check_conv(kOp, x, conv_state, &weight, false, 1);
  check_index(kOp, "slots", slots, {b}, x);
  if (check_values(x)) check_slot_values(kOp, slots, conv_state.size(0), true);
  at::Tensor y = new_output(x.sizes(), x.options());
  Params p = base_params(x, conv_state, slots, b, t);
  p.weight = weight.data_ptr();
  p.weight_f32 = weight.scalar_type() == at::kFloat;
  p.y = y.data_ptr();
  run(kOp, Mode::kStep, p, x);
  return y;
}

at::Tensor verify(const char* op, Mode mode, const at::Tensor& x, const at::Tensor& conv_state,
                  const at::Tensor& weight, const at::Tensor& slots, const std::optional<at::Tensor>& parents,
                  const std::optional<at::Tensor>& lengths) {
  const int64_t max_t = mode == Mode::kChain ? kMaxChainTokens : kMaxTreeNodes;
  const auto [b, t] = check_conv(op, x, conv_state, &weight, true, max_t);
  check_index(op, "slots", slots, {b}, x);
  if (lengths.has_value()) check_index(op, "lengths", *lengths, {b}, x);
  if (parents.has_value()) check_index(op, "parents", *parents, {b, t}, x);
  if (check_values(x)) {
    check_slot_values(op, slots, conv_state.size(0), false);
    const std::vector<int64_t> ls = check_length_values(op, lengths, b, t);
    if (parents.has_value()) check_parent_values(op, *parents, ls, b, t);
  }
  at::Tensor y = new_output({b, t, x.size(2)}, x.options());
  Params p = base_params(x, conv_state, slots, b, t);
  p.weight = weight.data_ptr();
  p.weight_f32 = weight.scalar_type() == at::kFloat;
  set_index(p.lengths, p.lengths64, lengths);
  if (parents.has_value()) {
    set_index(p.parents, p.parents64, *parents);
    p.parents_sb = parents->stride(0);
  }
  p.y = y.data_ptr();
  run(op, mode, p, x);
  return y;
}

at::Tensor conv_chain_cuda(const at::Tensor& x, const at::Tensor& conv_state, const at::Tensor& weight,
                           const at::Tensor& slots, const std::optional<at::Tensor>& lengths) {
  return verify("conv_chain", Mode::kChain, x, conv_state, weight, slots, std::nullopt, lengths);
}

at::Tensor conv_tree_cuda(const at::Tensor& x, const at::Tensor& conv_state, const at::Tensor& weight,
                          const at::Tensor& slots, const at::Tensor& parents, const std::optional<at::Tensor>& lengths) {
  return verify("conv_tree", Mode::kTree, x, conv_state, weight, slots, parents, lengths);
}

void conv_commit_cuda(const at::Tensor& x, at::Tensor& conv_state, const at::Tensor& slots,
                      const at::Tensor& accepted, const std::optional<at::Tensor>& parents) {
  constexpr const char* kOp = "conv_commit";
  const auto [b, t] = check_conv(kOp, x, conv_state, nullptr, true, kMaxTreeNodes);
  check_index(kOp, "slots", slots, {b}, x);
  check_index(kOp, "accepted", accepted, {b}, x);
  if (parents.has_value()) check_index(kOp, "parents", *parents, {b, t}, x);
  if (check_values(x)) {
    check_slot_values(kOp, slots, conv_state.size(0), true);
    const std::vector<int64_t> acc = host_index_values(accepted);
    if (!parents.has_value()) {
      for (size_t i = 0; i < acc.size(); ++i)
        if (acc[i] < 0 || acc[i] > t)
          fail(kOp, "accepted[" + num(int64_t(i)) + "] = " + num(acc[i]) +
                        " is out of range: an accepted chain length is in [0, " + num(t) + "]");
    } else {
      check_parent_values(kOp, *parents, std::vector<int64_t>(b, t), b, t);  // the whole tree, as the verify
      for (size_t i = 0; i < acc.size(); ++i)
        if (acc[i] < -1 || acc[i] >= t)
          fail(kOp, "accepted[" + num(int64_t(i)) + "] = " + num(acc[i]) +
                        " is out of range: an accepted node is -1 (none) or in [0, " + num(t) + ")");
    }
  }
  Params p = base_params(x, conv_state, slots, b, t);
  set_index(p.accepted, p.accepted64, accepted);
  if (parents.has_value()) {
    set_index(p.parents, p.parents64, *parents);
    p.parents_sb = parents->stride(0);
  }
  run(kOp, Mode::kCommit, p, x);
}

}  // namespace
}  // namespace qwen38::conv

TORCH_LIBRARY_IMPL(qwen38, CUDA, m) {
  m.impl("conv_step", &qwen38::conv::conv_step_cuda);
  m.impl("conv_chain", &qwen38::conv::conv_chain_cuda);
  m.impl("conv_tree", &qwen38::conv::conv_tree_cuda);
  m.impl("conv_commit", &qwen38::conv::conv_commit_cuda);
}
