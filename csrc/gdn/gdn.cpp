// Host side of the GDN family: check inputs (the reference's checks and wording, see
// qwen38_kernels/reference/gdn.py) -> fill Params -> launch on the current stream. Kernels live in
// gdn_kernel.cu(h); this file is compiled once by the host compiler.
//
// Index values (slots, lengths, parents, accepted) live on the GPU. An eager call copies them to the
// host and validates them as the reference does (QWEN38_GDN_CHECK_INDICES, default on: one small
// synchronising copy); while a CUDA graph is being captured that copy is impossible and is skipped.
// The kernels guard themselves either way (gdn_kernel.cuh): nothing out of range is ever read or
// written.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "common/host.h"
#include "gdn/gdn_launch.h"

namespace qwen38::gdn {
namespace {

// The reference's dtype spelling (str(torch.bfloat16) without "torch.").
std::string short_name(at::ScalarType t) {
  std::string s = dtype_name(t);
  return s.rfind("torch.", 0) == 0 ? s.substr(6) : s;
}

DType to_dtype(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16: return DType::kBF16;
    case at::kHalf: return DType::kF16;
    case at::kFloat: return DType::kF32;
    default: return DType::kF64;
  }
}

std::string vec_str(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

// reference._tensor: dtype in `dtypes`, exact shape, on the pool's device, last dim contiguous.
void check_tensor(const char* op, const char* name, const at::Tensor& t,
                  std::initializer_list<at::ScalarType> dtypes, const std::vector<int64_t>& shape,
                  const at::Tensor& pool) {
  bool ok = false;
  std::string names;
  for (auto d : dtypes) {
    ok = ok || t.scalar_type() == d;
    names += (names.empty() ? "" : " or ") + short_name(d);
  }
  TORCH_CHECK_VALUE(ok, "qwen38.", op, ": ", name, " must be ", names, ", got ", dtype_name(t.scalar_type()),
                    " (shape ", shape_str(t.sizes()), ")");
  TORCH_CHECK_VALUE(t.sizes().vec() == shape, "qwen38.", op, ": ", name, " must have shape ", vec_str(shape),
                    ", got ", shape_str(t.sizes()));
  TORCH_CHECK_VALUE(t.device() == pool.device(), "qwen38.", op, ": ", name, " is on ", t.device().str(),
                    " but state_pool is on ", pool.device().str());
  TORCH_CHECK_VALUE(t.dim() == 0 || t.numel() == 0 || t.size(-1) <= 1 || t.stride(-1) == 1, "qwen38.", op,
                    ": ", name, " must be contiguous in its last dimension, got strides ",
                    shape_str(t.strides()));
}

bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

void check_pool(const char* op, const at::Tensor& pool) {
  check_cuda(op, "state_pool", pool);
  TORCH_CHECK_VALUE(pool.scalar_type() == at::kFloat, "qwen38.", op,
                    ": state_pool must be float32 (float64 only with acc_dtype=torch.float64, in the "
                    "reference), got ", dtype_name(pool.scalar_type()));
  TORCH_CHECK_VALUE(pool.dim() == 4 && pool.size(1) == kVHeads && pool.size(2) == kHeadK && pool.size(3) == kHeadV,
                    "qwen38.", op, ": state_pool must have shape [S, ", num(kVHeads), ", ", num(kHeadK), ", ",
                    num(kHeadV), "], got ", shape_str(pool.sizes()));
  TORCH_CHECK_VALUE(pool.is_contiguous(), "qwen38.", op, ": state_pool must be contiguous, got strides ",
                    shape_str(pool.strides()));
  // (the chain reads two columns with one 8-byte load, and at B = 1 the kernels prefetch 16-KB
  // pieces of a head's state with the bulk prefetch, which needs a 16-byte aligned start)
  TORCH_CHECK_VALUE(aligned16(pool.data_ptr()), "qwen38.", op,
                    ": state_pool must start 16-byte aligned, got a start ",
                    num(int64_t(reinterpret_cast<uintptr_t>(pool.data_ptr()) & 15u)), " bytes past a 16-byte boundary");
}

// reference._check_gdn_inputs. `ref` is q (or k when need_q is false). Returns (B, T).
std::pair<int64_t, int64_t> check_inputs(const char* op, const at::Tensor* q, const at::Tensor& k,
                                         const at::Tensor& v, const at::Tensor* g, const at::Tensor* beta,
                                         const at::Tensor& pool, bool tokens, int64_t max_t) {
  check_pool(op, pool);
  const at::Tensor& ref = q ? *q : k;
  const char* ref_name = q ? "q" : "k";
  TORCH_CHECK_VALUE(ref.scalar_type() == at::kBFloat16 || ref.scalar_type() == at::kHalf, "qwen38.", op, ": ",
                    ref_name, " must be bfloat16 or float16, got ", dtype_name(ref.scalar_type()));
  const int64_t nlead = tokens ? 2 : 1;
  TORCH_CHECK_VALUE(ref.dim() == nlead + 2, "qwen38.", op, ": ", ref_name, " must have shape ",
                    tokens ? "[B, T, 16, 128]" : "[B, 16, 128]", ", got ", shape_str(ref.sizes()));
  std::vector<int64_t> lead(ref.sizes().begin(), ref.sizes().begin() + nlead);
  const int64_t t = tokens ? lead[1] : 1;
  TORCH_CHECK_VALUE(!tokens || (t >= 1 && t <= max_t), "qwen38.", op, ": ", ref_name, " has ", num(t),
                    " tokens per sequence (dim 1); at most ", num(max_t), " and at least 1");
  auto with = [&](std::initializer_list<int64_t> tail) {
    std::vector<int64_t> s = lead;
    s.insert(s.end(), tail);
    return s;
  };
  const at::ScalarType act = ref.scalar_type();
  if (q) check_tensor(op, "q", *q, {act}, with({kQKHeads, kHeadK}), pool);
  check_tensor(op, "k", k, {act}, with({kQKHeads, kHeadK}), pool);
  check_tensor(op, "v", v, {act}, with({kVHeads, kHeadV}), pool);
  if (g) check_tensor(op, "g", *g, {at::kFloat}, with({kVHeads}), pool);
  if (beta) check_tensor(op, "beta", *beta, {act, at::kFloat}, with({kVHeads}), pool);
  TORCH_CHECK_VALUE(lead[0] <= 65535, "qwen38.", op, ": the CUDA kernels take at most 65535 sequences, got ",
                    ref_name, " shape ", shape_str(ref.sizes()));
  return {lead[0], t};
}

float check_scale(const char* op, std::optional<double> scale) {
  if (!scale.has_value()) return static_cast<float>(1.0 / std::sqrt(double(kHeadK)));
  TORCH_CHECK_VALUE(std::isfinite(*scale), "qwen38.", op, ": scale must be a finite number or None, got ",
                    num(*scale));
  return static_cast<float>(*scale);
}

void check_index(const char* op, const char* name, const at::Tensor& t, const std::vector<int64_t>& shape,
                 const at::Tensor& pool) {
  check_tensor(op, name, t, {at::kInt, at::kLong}, shape, pool);
  TORCH_CHECK_VALUE(t.is_contiguous(), "qwen38.", op, ": ", name, " must be contiguous, got strides ",
                    shape_str(t.strides()));
}

// ---- index values (eager calls only: needs the values on the host) ----
bool check_values_now() { return index_checks_now("QWEN38_GDN_CHECK_INDICES"); }

void check_slot_values(const char* op, const at::Tensor& slots, int64_t rows, bool distinct) {
  const auto s = host_index_values(slots);
  for (size_t i = 0; i < s.size(); ++i)
    TORCH_CHECK_VALUE(s[i] >= -1 && s[i] < rows, "qwen38.", op, ": slots[", num(i), "] = ", num(s[i]),
                      " is out of range: a slot must be -1 (padding) or in [0, ", num(rows), ")");
  if (!distinct) return;
  for (size_t i = 0; i < s.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      TORCH_CHECK_VALUE(s[i] < 0 || s[i] != s[j], "qwen38.", op,
                        ": slots must be distinct apart from -1 (two sequences would write one pool row), got ",
                        vec_str(s));
}

std::vector<int64_t> check_length_values(const char* op, const std::optional<at::Tensor>& lengths, int64_t batch,
                                         int64_t t) {
  if (!lengths.has_value()) return std::vector<int64_t>(batch, t);
  const auto l = host_index_values(*lengths);
  for (size_t i = 0; i < l.size(); ++i)
    TORCH_CHECK_VALUE(l[i] >= 0 && l[i] <= t, "qwen38.", op, ": lengths[", num(i), "] = ", num(l[i]),
                      " is out of range [0, ", num(t), "]");
  return l;
}

// reference._tree_depths: depth-first pre-order over the first lengths[b] nodes of each sequence.
std::vector<int64_t> check_parent_values(const char* op, const at::Tensor& parents, const std::vector<int64_t>& lens,
                                         int64_t batch, int64_t t) {
  const auto par = host_index_values(parents);
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<int64_t> depth(t, 0), path{-1};
    for (int64_t i = 0; i < lens[b]; ++i) {
      const int64_t p = par[b * t + i];
      TORCH_CHECK_VALUE(p >= -1 && p < i, "qwen38.", op, ": parents[", num(b), ", ", num(i), "] = ", num(p),
                        ": a parent must be -1 or an earlier node in depth-first order");
      const int64_t dp = p < 0 ? 0 : depth[p];
      TORCH_CHECK_VALUE(dp < int64_t(path.size()) && path[dp] == p, "qwen38.", op, ": parents[", num(b), ", ", num(i), "] = ", num(p),
                        " is not on the current root-to-node path: the nodes are not in depth-first order");
      depth[i] = dp + 1;
      TORCH_CHECK_VALUE(depth[i] <= kMaxTreeNodes, "qwen38.", op, ": parents[", num(b), ", ", num(i),
                        "]: node depth ", num(depth[i]), " is over the depth limit ", num(kMaxTreeNodes));
      path.resize(depth[i]);
      path.push_back(i);
    }
  }
  return par;
}

// reference._accepted_paths: a chain's accepted length, or a valid tree's deepest accepted node.
void check_accepted_values(const char* op, const at::Tensor& accepted, const std::optional<at::Tensor>& parents,
                           int64_t batch, int64_t t) {
  const auto acc = host_index_values(accepted);
  if (!parents.has_value()) {
    for (int64_t b = 0; b < batch; ++b)
      TORCH_CHECK_VALUE(acc[b] >= 0 && acc[b] <= t, "qwen38.", op, ": accepted[", num(b), "] = ", num(acc[b]),
                        " is out of range: an accepted chain length is in [0, ", num(t), "]");
    return;
  }
  check_parent_values(op, *parents, std::vector<int64_t>(batch, t), batch, t);
  for (int64_t b = 0; b < batch; ++b)
    TORCH_CHECK_VALUE(acc[b] >= -1 && acc[b] < t, "qwen38.", op, ": accepted[", num(b), "] = ", num(acc[b]),
                      " is out of range: an accepted node is -1 (none) or in [0, ", num(t), ")");
}

at::Tensor new_out(const at::Tensor& like, std::vector<int64_t> shape) {
  return new_output(shape, like.options());
}

bool rows16(const at::Tensor& t) {  // base and every stride of a [.., 128] tensor in 16-byte units
  if (!aligned16(t.data_ptr())) return false;
  for (int64_t d = 0; d + 1 < t.dim(); ++d)
    if ((t.stride(d) * t.element_size()) % 16 != 0) return false;
  return true;
}

void fill_acts(Params& p, const at::Tensor* q, const at::Tensor& k, const at::Tensor& v, bool tokens) {
  auto strides = [&](const at::Tensor& t, int64_t* sb, int64_t* st, int64_t* sh) {
    *sb = t.stride(0);
    *st = tokens ? t.stride(1) : 0;
    *sh = t.stride(tokens ? 2 : 1);
  };
  if (q) {
    p.q = q->data_ptr();
    strides(*q, &p.q_sb, &p.q_st, &p.q_sh);
  }
  p.k = k.data_ptr();
  strides(k, &p.k_sb, &p.k_st, &p.k_sh);
  p.v = v.data_ptr();
  strides(v, &p.v_sb, &p.v_st, &p.v_sh);
  p.act = to_dtype(k.scalar_type());
  p.qk16 = rows16(k) && (!q || rows16(*q));
  p.v16 = rows16(v);
}

void fill_gates(Params& p, const at::Tensor& g, const at::Tensor& beta, bool tokens) {
  p.g = g.data_ptr<float>();
  p.g_sb = g.stride(0);
  p.g_st = tokens ? g.stride(1) : 0;
  p.beta = beta.data_ptr();
  p.beta_sb = beta.stride(0);
  p.beta_st = tokens ? beta.stride(1) : 0;
  p.beta_dt = to_dtype(beta.scalar_type());
}

void fill_pool(Params& p, const at::Tensor& pool, const at::Tensor& slots) {
  p.pool = pool.data_ptr<float>();
  p.pool_rows = pool.size(0);
  set_index(p.slots, p.slots64, slots);
}

void run(const char* op, Mode mode, const Params& p, const at::Tensor& pool) {
  if (p.batch == 0) return;
  const c10::cuda::CUDAGuard guard(pool.device());
  const cudaError_t err = launch(mode, p, knob_enabled("QWEN38_PDL", true),
                                 at::cuda::getCurrentCUDAStream(pool.device().index()).stream());
  check_launch(op, err, pool);
}

// ---- the ops ----

at::Tensor step_impl(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const at::Tensor* g, const at::Tensor* beta, const at::Tensor& state_pool,
                     const at::Tensor& slots, std::optional<double> scale, Params& p) {
  const auto bt = check_inputs(op, &q, k, v, g, beta, state_pool, false, 1);
  const int64_t batch = bt.first;
  p.scale = check_scale(op, scale);
  check_index(op, "slots", slots, {batch}, state_pool);
  if (check_values_now()) check_slot_values(op, slots, state_pool.size(0), true);
  at::Tensor out = new_out(q, {batch, kVHeads, kHeadV});
  fill_acts(p, &q, k, v, false);
  if (g) fill_gates(p, *g, *beta, false);
  fill_pool(p, state_pool, slots);
  p.out = out.data_ptr();
  p.batch = int(batch);
  p.tokens = 1;
  run(op, Mode::kStep, p, state_pool);
  return out;
}

at::Tensor gdn_step_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
                         const at::Tensor& beta, const at::Tensor& state_pool, const at::Tensor& slots,
                         std::optional<double> scale) {
  Params p;
  return step_impl("gdn_step", q, k, v, &g, &beta, state_pool, slots, scale, p);
}

at::Tensor gdn_step_raw_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& a,
                             const at::Tensor& b, const at::Tensor& A_log, const at::Tensor& dt_bias,
                             const at::Tensor& state_pool, const at::Tensor& slots, std::optional<double> scale) {
  constexpr const char* op = "gdn_step_raw";
  check_pool(op, state_pool);
  const auto fl = {at::kBFloat16, at::kHalf, at::kFloat};
  TORCH_CHECK_VALUE(q.dim() == 3, "qwen38.", op, ": q must have shape [B, 16, 128], got ", shape_str(q.sizes()));
  const int64_t batch = q.size(0);
  check_tensor(op, "a", a, fl, {batch, kVHeads}, state_pool);
  check_tensor(op, "b", b, fl, {batch, kVHeads}, state_pool);
  check_tensor(op, "A_log", A_log, {at::kBFloat16, at::kHalf, at::kFloat, at::kDouble}, {kVHeads}, state_pool);
  check_tensor(op, "dt_bias", dt_bias, {at::kBFloat16, at::kHalf, at::kFloat, at::kDouble}, {kVHeads}, state_pool);
  // beta = sigmoid(b) in b's dtype must be q's dtype or fp32 (as gdn_step requires of beta)
  TORCH_CHECK_VALUE(b.scalar_type() == q.scalar_type() || b.scalar_type() == at::kFloat, "qwen38.", op,
                    ": b must be ", dtype_name(q.scalar_type()), " (q's dtype) or torch.float32: beta = sigmoid(b) "
                    "keeps b's dtype, got ", dtype_name(b.scalar_type()));
  Params p;
  p.raw = true;
  p.a = a.data_ptr();
  p.b = b.data_ptr();
  p.A_log = A_log.data_ptr();
  p.dt_bias = dt_bias.data_ptr();
  p.a_sb = a.stride(0);
  p.b_sb = b.stride(0);
  p.a_dt = to_dtype(a.scalar_type());
  p.b_dt = to_dtype(b.scalar_type());
  p.alog_dt = to_dtype(A_log.scalar_type());
  p.dtb_dt = to_dtype(dt_bias.scalar_type());
  return step_impl(op, q, k, v, nullptr, nullptr, state_pool, slots, scale, p);
}

// QWEN38_GDN_TREE_SPLIT: unset or "auto" -> 0 (the launcher chooses), else 1..kMaxSplits.
int tree_splits(const char* op) {
  const char* v = std::getenv("QWEN38_GDN_TREE_SPLIT");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "auto") == 0) return 0;
  char* end = nullptr;
  const long r = std::strtol(v, &end, 10);
  TORCH_CHECK_VALUE(end != v && *end == '\0' && r >= 1 && r <= kMaxSplits, "qwen38.", op,
                    ": QWEN38_GDN_TREE_SPLIT must be auto or a run count 1..", num(kMaxSplits), ", got '", v, "'");
  return int(r);
}

at::Tensor verify_impl(const char* op, Mode mode, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       const at::Tensor& g, const at::Tensor& beta, const at::Tensor& state_pool,
                       const at::Tensor& slots, const std::optional<at::Tensor>& parents,
                       const std::optional<at::Tensor>& lengths, std::optional<double> scale) {
  const int64_t max_t = mode == Mode::kTree ? kMaxTreeNodes : kMaxChainTokens;
  const auto bt = check_inputs(op, &q, k, v, &g, &beta, state_pool, true, max_t);
  const int64_t batch = bt.first, t = bt.second;
  Params p;
  p.scale = check_scale(op, scale);
  check_index(op, "slots", slots, {batch}, state_pool);
  if (lengths.has_value()) check_index(op, "lengths", *lengths, {batch}, state_pool);
  if (parents.has_value()) check_index(op, "parents", *parents, {batch, t}, state_pool);
  if (check_values_now()) {
    check_slot_values(op, slots, state_pool.size(0), false);
    const auto lens = check_length_values(op, lengths, batch, t);
    if (parents.has_value()) check_parent_values(op, *parents, lens, batch, t);
  }
  at::Tensor out = new_out(q, {batch, t, kVHeads, kHeadV});
  fill_acts(p, &q, k, v, true);
  fill_gates(p, g, beta, true);
  fill_pool(p, state_pool, slots);
  set_index(p.lengths, p.lengths64, lengths);
  set_index(p.parents, p.parents64, parents);
  p.out = out.data_ptr();
  p.batch = int(batch);
  p.tokens = int(t);
  if (mode == Mode::kTree) p.splits = tree_splits(op);
  run(op, mode, p, state_pool);
  return out;
}

at::Tensor gdn_chain_verify_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
                                 const at::Tensor& beta, const at::Tensor& state_pool, const at::Tensor& slots,
                                 const std::optional<at::Tensor>& lengths, std::optional<double> scale) {
  return verify_impl("gdn_chain_verify", Mode::kChain, q, k, v, g, beta, state_pool, slots, std::nullopt, lengths,
                     scale);
}

at::Tensor gdn_tree_verify_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
                                const at::Tensor& beta, const at::Tensor& state_pool, const at::Tensor& slots,
                                const at::Tensor& parents, const std::optional<at::Tensor>& lengths,
                                std::optional<double> scale) {
  return verify_impl("gdn_tree_verify", Mode::kTree, q, k, v, g, beta, state_pool, slots, parents, lengths, scale);
}

void gdn_commit_cuda(const at::Tensor& k, const at::Tensor& v, const at::Tensor& g, const at::Tensor& beta,
                     const at::Tensor& state_pool, const at::Tensor& slots, const at::Tensor& accepted,
                     const std::optional<at::Tensor>& parents) {
  constexpr const char* op = "gdn_commit";
  const auto bt = check_inputs(op, nullptr, k, v, &g, &beta, state_pool, true, kMaxTreeNodes);
  const int64_t batch = bt.first, t = bt.second;
  check_index(op, "slots", slots, {batch}, state_pool);
  check_index(op, "accepted", accepted, {batch}, state_pool);
  if (parents.has_value()) check_index(op, "parents", *parents, {batch, t}, state_pool);
  if (check_values_now()) {
    check_slot_values(op, slots, state_pool.size(0), true);
    check_accepted_values(op, accepted, parents, batch, t);
  }
  Params p;
  fill_acts(p, nullptr, k, v, true);
  fill_gates(p, g, beta, true);
  fill_pool(p, state_pool, slots);
  set_index(p.accepted, p.accepted64, accepted);
  set_index(p.parents, p.parents64, parents);
  p.batch = int(batch);
  p.tokens = int(t);
  run(op, Mode::kCommit, p, state_pool);
}

at::Tensor gdn_commit_verify_cuda(const at::Tensor& c_k, const at::Tensor& c_v, const at::Tensor& c_g,
                                  const at::Tensor& c_beta, const at::Tensor& c_accepted,
                                  const std::optional<at::Tensor>& c_parents, const at::Tensor& q, const at::Tensor& k,
                                  const at::Tensor& v, const at::Tensor& g, const at::Tensor& beta,
                                  const at::Tensor& state_pool, const at::Tensor& slots,
                                  const std::optional<at::Tensor>& parents, const std::optional<at::Tensor>& lengths,
                                  std::optional<double> scale) {
  constexpr const char* op = "gdn_commit_verify";
  constexpr const char* cop = "gdn_commit";  // the pending commit's checks read as gdn_commit's
  const bool tree = parents.has_value();
  const auto bt = check_inputs(op, &q, k, v, &g, &beta, state_pool, true, tree ? kMaxTreeNodes : kMaxChainTokens);
  const int64_t batch = bt.first, t = bt.second;
  Params p;
  p.scale = check_scale(op, scale);
  check_index(op, "slots", slots, {batch}, state_pool);
  if (lengths.has_value()) check_index(op, "lengths", *lengths, {batch}, state_pool);
  if (tree) check_index(op, "parents", *parents, {batch, t}, state_pool);
  const auto cbt = check_inputs(cop, nullptr, c_k, c_v, &c_g, &c_beta, state_pool, true, kMaxTreeNodes);
  const int64_t tc = cbt.second;
  TORCH_CHECK_VALUE(cbt.first == batch, "qwen38.", op, ": c_k has ", num(cbt.first), " sequences but q has ",
                    num(batch), ": the pending commit and the verify are one batch");
  TORCH_CHECK_VALUE(c_k.scalar_type() == q.scalar_type(), "qwen38.", op, ": c_k must have q's dtype ",
                    dtype_name(q.scalar_type()), ", got ", dtype_name(c_k.scalar_type()));
  check_index(cop, "accepted", c_accepted, {batch}, state_pool);
  if (c_parents.has_value()) check_index(cop, "parents", *c_parents, {batch, tc}, state_pool);
  if (check_values_now()) {
    check_slot_values(op, slots, state_pool.size(0), true);
    const auto lens = check_length_values(op, lengths, batch, t);
    if (tree) check_parent_values(op, *parents, lens, batch, t);
    check_accepted_values(cop, c_accepted, c_parents, batch, tc);
  }
  at::Tensor out = new_out(q, {batch, t, kVHeads, kHeadV});
  fill_acts(p, &q, k, v, true);
  fill_gates(p, g, beta, true);
  fill_pool(p, state_pool, slots);
  set_index(p.lengths, p.lengths64, lengths);
  if (tree) set_index(p.parents, p.parents64, *parents);
  p.civ = true;
  p.c_k = c_k.data_ptr();
  p.c_v = c_v.data_ptr();
  p.c_k_sb = c_k.stride(0);
  p.c_k_st = c_k.stride(1);
  p.c_k_sh = c_k.stride(2);
  p.c_v_sb = c_v.stride(0);
  p.c_v_st = c_v.stride(1);
  p.c_v_sh = c_v.stride(2);
  p.c_k16 = rows16(c_k);
  p.c_v16 = rows16(c_v);
  p.c_g = c_g.data_ptr<float>();
  p.c_g_sb = c_g.stride(0);
  p.c_g_st = c_g.stride(1);
  p.c_beta = c_beta.data_ptr();
  p.c_beta_sb = c_beta.stride(0);
  p.c_beta_st = c_beta.stride(1);
  p.c_beta_dt = to_dtype(c_beta.scalar_type());
  set_index(p.c_accepted, p.c_accepted64, c_accepted);
  set_index(p.c_parents, p.c_parents64, c_parents);
  p.c_tokens = int(tc);
  p.out = out.data_ptr();
  p.batch = int(batch);
  p.tokens = int(t);
  run(op, tree ? Mode::kTree : Mode::kChain, p, state_pool);
  return out;
}

}  // namespace
}  // namespace qwen38::gdn

TORCH_LIBRARY_IMPL(qwen38, CUDA, m) {
  m.impl("gdn_step", &qwen38::gdn::gdn_step_cuda);
  m.impl("gdn_step_raw", &qwen38::gdn::gdn_step_raw_cuda);
  m.impl("gdn_chain_verify", &qwen38::gdn::gdn_chain_verify_cuda);
  m.impl("gdn_tree_verify", &qwen38::gdn::gdn_tree_verify_cuda);
  m.impl("gdn_commit", &qwen38::gdn::gdn_commit_cuda);
  m.impl("gdn_commit_verify", &qwen38::gdn::gdn_commit_verify_cuda);
}
