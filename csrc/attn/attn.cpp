// Host side of decode attention (attn_decode): check the arguments (qwen38_kernels/reference/attn.py
// check_attn_decode: the same rules in the same order, the same messages) -> fill Params -> launch the
// split kernel (and the merge kernel when a row can have several splits) on the current stream.
// Kernels live in attn_kernel.cu(h); this file is compiled once by the host compiler.
//
// Index values (kv_lens, lengths, mask) live on the GPU. An eager call copies them to the host and
// validates them as the reference does (ValueError naming the argument), as the conv and GDN ops do
// (QWEN38_ATTN_CHECK_INDICES, default 1); under CUDA-graph capture, or with the knob 0, the launcher never
// reads them (no host synchronisation) and the kernel guards itself (attn_kernel.cuh: out-of-range
// values are clamped; nothing outside the cache or a mask row's first t + 1 entries is read).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "attn/attn_launch.h"
#include "common/host.h"

namespace qwen38::attn {
namespace {

constexpr const char* kOp = "attn_decode";

[[noreturn]] void fail(const std::string& msg) {
  TORCH_CHECK_VALUE(false, "qwen38.", kOp, ": ", msg);
  for (;;) {}
}

void check_dense_last(const char* name, const at::Tensor& t) {
  if (t.numel() > 0 && t.size(-1) > 1 && t.stride(-1) != 1)
    fail(std::string(name) + " must be contiguous in its last dimension, got strides " + shape_str(t.strides()));
}

void check_index(const char* name, const at::Tensor& t, int64_t batch, const at::Tensor& q) {
  if (t.scalar_type() != at::kInt && t.scalar_type() != at::kLong)
    fail(std::string(name) + " must be int32 or int64, got " + dtype_name(t.scalar_type()) + " (shape " +
         shape_str(t.sizes()) + ")");
  if (t.dim() != 1 || t.size(0) != batch)
    fail(std::string(name) + " must have shape [" + num(batch) + "], got " + shape_str(t.sizes()));
  if (t.device() != q.device())
    fail(std::string(name) + " is on " + t.device().str() + " but q is on " + q.device().str());
}

// The kernels copy q, K and V rows 16 bytes at a time (cp.async): a CUDA-only rule beyond the
// reference's, stated with the numbers.
void check_rows16(const char* name, const at::Tensor& t) {
  bool ok = (reinterpret_cast<uintptr_t>(t.data_ptr()) & 15u) == 0 || t.numel() == 0;
  for (int64_t d = 0; d + 1 < t.dim(); ++d) ok = ok && (t.size(d) <= 1 || t.stride(d) % 8 == 0);
  if (!ok)
    fail(std::string(name) + "'s rows must start 16-byte aligned for the CUDA kernel (a 16-byte aligned start and "
         "strides of dims 0.." + num(t.dim() - 2) + " that are multiples of 8 elements), got strides " +
         shape_str(t.strides()) + " and a start " +
         num(int64_t(reinterpret_cast<uintptr_t>(t.data_ptr()) & 15u)) + " bytes past a 16-byte boundary");
}

// check_attn_decode's value rules (lengths, kv_lens, the mask's own-key and no-later-row rules).
void check_index_values(const at::Tensor& kv_lens, const std::optional<at::Tensor>& mask,
                        const std::optional<at::Tensor>& lengths, int64_t b, int64_t t, int64_t slots) {
  const std::vector<int64_t> ls = lengths.has_value() ? host_index_values(*lengths) : std::vector<int64_t>(b, t);
  const std::vector<int64_t> kl = host_index_values(kv_lens);
  for (int64_t i = 0; i < b; ++i) {
    if (ls[i] < 0 || ls[i] > t)
      fail("lengths[" + num(i) + "] = " + num(ls[i]) + " is out of range [0, " + num(t) + "]");
    if (kl[i] < ls[i] || kl[i] > slots)
      fail("kv_lens[" + num(i) + "] = " + num(kl[i]) + " is out of range: it counts the " + num(ls[i]) +
           " rows' keys and at most the cache's " + num(slots) + " slots");
  }
  if (!mask.has_value()) return;
  const at::Tensor m = mask->to(at::kCPU).contiguous();
  const bool* mp = m.data_ptr<bool>();
  for (int64_t i = 0; i < b; ++i)
    for (int64_t r = 0; r < ls[i]; ++r) {
      const bool* row = mp + (i * t + r) * t;
      if (!row[r]) fail("mask[" + num(i) + ", " + num(r) + ", " + num(r) + "] is False: a row must see its own key");
      for (int64_t j = r + 1; j < ls[i]; ++j)
        if (row[j])
          fail("mask[" + num(i) + ", " + num(r) + ", " + num(j) + "] is True: a row sees no key of a later row");
    }
}

// QWEN38_ATTN_SPLIT (a lab knob for A/B timing): unset or "auto" -> the rule of attn_launch.h, else
// "MIN,MAX": splits of at least MIN chunks (1..64), at most MAX splits a row (1..kSplitCap).
SplitRule split_rule() {
  SplitRule r;
  const char* v = std::getenv("QWEN38_ATTN_SPLIT");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "auto") == 0) return r;
  char* end = nullptr;
  const long lo = std::strtol(v, &end, 10);
  const bool comma = end != v && *end == ',';
  const char* rest = comma ? end + 1 : end;
  const long hi = comma ? std::strtol(rest, &end, 10) : 0;
  TORCH_CHECK_VALUE(comma && end != rest && *end == '\0' && lo >= 1 && lo <= 64 && hi >= 1 && hi <= kSplitCap,
                    "qwen38.", kOp, ": QWEN38_ATTN_SPLIT must be auto or MIN,MAX (chunks a split at least, 1..64; "
                    "splits a row at most, 1..", num(kSplitCap), "), got '", v, "'");
  r.min_chunks = int(lo), r.max_splits = int(hi);
  return r;
}

at::Tensor attn_decode_cuda(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                            const at::Tensor& kv_lens, const std::optional<at::Tensor>& mask,
                            const std::optional<at::Tensor>& lengths, std::optional<double> scale) {
  // ---- check_attn_decode, in its order ----
  if (q.scalar_type() != at::kBFloat16 && q.scalar_type() != at::kHalf)
    fail(std::string("q must be bfloat16 or float16, got ") + dtype_name(q.scalar_type()));
  if (q.dim() != 4) fail("q must have shape [B, T, Hq, D], got " + shape_str(q.sizes()));
  const int64_t b = q.size(0), t = q.size(1), hq = q.size(2), d = q.size(3);
  if (t < 1 || t > kMaxRows)
    fail("q has " + num(t) + " rows a sequence (dim 1); at least 1 and at most " + num(kMaxRows));
  if (d != 64 && d != 128 && d != 256) fail("q's head dim (dim 3) must be 64, 128 or 256, got " + num(d));
  check_dense_last("q", q);
  const auto check_cache = [&](const char* name, const at::Tensor& c) {
    if (c.scalar_type() != q.scalar_type())
      fail(std::string(name) + " must have q's dtype " + dtype_name(q.scalar_type()) + ", got " +
           dtype_name(c.scalar_type()));
    if (c.dim() != 4 || c.size(0) != b || c.size(3) != d)
      fail(std::string(name) + " must have shape [" + num(b) + ", Hkv, L, " + num(d) + "] (q is " +
           shape_str(q.sizes()) + "), got " + shape_str(c.sizes()));
    if (c.device() != q.device())
      fail(std::string(name) + " is on " + c.device().str() + " but q is on " + q.device().str());
    check_dense_last(name, c);
  };
  check_cache("k_cache", k_cache);
  check_cache("v_cache", v_cache);
  if (v_cache.sizes() != k_cache.sizes())
    fail("v_cache must have k_cache's shape " + shape_str(k_cache.sizes()) + ", got " + shape_str(v_cache.sizes()));
  const int64_t hkv = k_cache.size(1), slots = k_cache.size(2);
  if (hkv < 1 || hq % hkv != 0 || hq / hkv > kMaxGroup)
    fail("q's " + num(hq) + " heads must be a multiple of k_cache's " + num(hkv) + " kv heads, at most " +
         num(kMaxGroup) + " q heads a kv head");
  check_index("kv_lens", kv_lens, b, q);
  if (lengths.has_value()) check_index("lengths", *lengths, b, q);
  if (mask.has_value()) {
    const at::Tensor& m = *mask;
    if (m.scalar_type() != at::kBool)
      fail(std::string("mask must be bool, got ") + dtype_name(m.scalar_type()) + " (shape " + shape_str(m.sizes()) +
           ")");
    if (m.dim() != 3 || m.size(0) != b || m.size(1) != t || m.size(2) != t)
      fail("mask must have shape [" + num(b) + ", " + num(t) + ", " + num(t) + "], got " + shape_str(m.sizes()));
    if (m.device() != q.device()) fail("mask is on " + m.device().str() + " but q is on " + q.device().str());
  }
  if (scale.has_value() && !std::isfinite(*scale)) fail("scale must be a finite number or None, got " + num(*scale));
  // ---- what the CUDA kernels need beyond the contract ----
  check_cuda(kOp, "q", q);
  check_rows16("q", q);
  check_rows16("k_cache", k_cache);
  check_rows16("v_cache", v_cache);
  if (b > 65535) fail("the CUDA kernel takes at most 65535 sequences, got q shape " + shape_str(q.sizes()));
  if (slots >= (int64_t(1) << 31))
    fail("the CUDA kernel takes caches of fewer than 2^31 slots, got k_cache shape " + shape_str(k_cache.sizes()));
  const SplitRule rule = split_rule();
  if (hkv * grid_splits(slots, rule) > 65535)
    fail("the CUDA kernel takes at most " + num(65535 / grid_splits(slots, rule)) + " kv heads at " + num(slots) +
         " cache slots, got k_cache shape " + shape_str(k_cache.sizes()));
  if (index_checks_now("QWEN38_ATTN_CHECK_INDICES")) check_index_values(kv_lens, mask, lengths, b, t, slots);

  at::Tensor o = new_output(q.sizes(), q.options());
  if (o.numel() == 0) return o;
  const double sc = scale.has_value() ? *scale : 1.0 / std::sqrt(double(d));
  Params p;
  p.q = q.data_ptr();
  p.q_sb = q.stride(0), p.q_st = q.stride(1), p.q_sh = q.stride(2);
  p.k = k_cache.data_ptr();
  p.v = v_cache.data_ptr();
  p.k_sb = k_cache.stride(0), p.k_sh = k_cache.stride(1), p.k_sl = k_cache.stride(2);
  p.v_sb = v_cache.stride(0), p.v_sh = v_cache.stride(1), p.v_sl = v_cache.stride(2);
  set_index(p.kv_lens, p.kv_lens64, kv_lens);
  p.kv_lens_s = kv_lens.stride(0);
  set_index(p.lengths, p.lengths64, lengths);
  if (lengths.has_value()) p.lengths_s = lengths->stride(0);
  if (mask.has_value()) {
    p.mask = mask->data_ptr<bool>();
    p.mask_sb = mask->stride(0), p.mask_st = mask->stride(1), p.mask_sj = mask->stride(2);
  }
  p.o = o.data_ptr();
  p.batch = int(b), p.tokens = int(t), p.hq = int(hq), p.hkv = int(hkv), p.group = int(hq / hkv);
  p.head_dim = int(d);
  p.slots = slots;
  p.rule = rule;
  p.ring = knob_choice(kOp, "QWEN38_ATTN_SLOTS", "2", 2, {3});
  p.splits = grid_splits(slots, rule);
  p.scale_log2 = float(sc * 1.4426950408889634);  // log2(e): the kernels' softmax runs in base 2
  p.f16 = q.scalar_type() == at::kHalf;
  at::Tensor ws;  // the split partials (a caching-allocator block: graph capture keeps it)
  if (p.splits > 1) {
    ws = at::empty({int64_t(workspace_bytes(p))}, q.options().dtype(at::kByte));
    p.ws = reinterpret_cast<float*>(ws.data_ptr());
    p.ws_splits = reinterpret_cast<int*>(p.ws + workspace_floats(p));
  }
  const c10::cuda::CUDAGuard guard(q.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream(q.device().index()).stream();
  check_launch(kOp, launch(p, knob_enabled("QWEN38_PDL", true), stream), q);
  return o;
}

}  // namespace
}  // namespace qwen38::attn

TORCH_LIBRARY_IMPL(qwen38, CUDA, m) { m.impl("_attn_decode_kernel", &qwen38::attn::attn_decode_cuda); }
