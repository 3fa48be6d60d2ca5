// Registry of the skinny kernels' launch variants (see skinny_variants.h). Plain C++.
#include "gemm/skinny_variants.h"

#include <map>
#include <mutex>
#include <set>
#include <tuple>

namespace qwen38::gemm {
namespace {

using Key = std::tuple<int, int64_t, int64_t>;

std::mutex& mu() {
  static std::mutex m;
  return m;
}
std::map<Key, SkinnyVariant>& registry() {
  static std::map<Key, SkinnyVariant> r;
  return r;
}
std::set<Key>& missed() {
  static std::set<Key> s;
  return s;
}

constexpr int64_t kStepK = 128;       // k per warp step (skinny_common.cuh)
constexpr int64_t kWantWarps = 4096;  // ~32 warps per SM on 132 SMs
constexpr int64_t kWideGrid = 256;    // blocks: a grid this large fills the GPU by itself
constexpr int64_t kMinSteps = 6;      // ... and then keeps at least this many steps per warp

}  // namespace

SkinnyVariant skinny_default(int64_t n, int64_t k) {
  const int64_t tiles = (n + 7) / 8;
  const int64_t steps = (k + kStepK - 1) / kStepK;
  SkinnyVariant v;
  v.nt_narrow = tiles >= 4 * 256 ? 4 : tiles >= 2 * 256 ? 2 : 1;
  v.nt_wide = v.nt_narrow > 1 ? v.nt_narrow / 2 : 1;
  const int64_t blocks = (tiles + v.nt_narrow - 1) / v.nt_narrow;
  // split K until there are enough warps, keeping at least 4 steps of 128 k per warp; a grid of
  // kWideGrid blocks or more stops before a warp would get fewer than kMinSteps steps. Measured on
  // the H200 (session 7, both ops): K = 5120 with N >= 6144 runs 10-30% faster at 1..16 rows with
  // k split 4 (10 steps a warp) than with 8 (5 steps) or 2; N = 5120 with K 6144 or 17408 keeps 8,
  // and so do the small shapes (<= 128 blocks).
  while (v.ksplit < 8 && blocks * v.ksplit < kWantWarps && steps >= 8 * v.ksplit) {
    if (blocks >= kWideGrid && steps < 2 * v.ksplit * kMinSteps) break;
    v.ksplit *= 2;
  }
  // K = 5120 weights of 1024 tiles or more (N >= 8192, so 4 tiles a warp at 1..16 rows): k split 4 and
  // 4 tiles a warp at 17..32 rows too, what every such table entry chose on both architectures. The loop
  // above leaves the largest grids at k split 1 (the ring kernel; the register-stream kernels serve 2, 4,
  // 8 at K = 5120). Session 39 (H100, nvfp4_linear, fp32 out; benchmarks/results/h100/nvfp4_head_rule_s39.txt):
  // the 248320-row NVFP4 head 339 / 397 / 686 / 828 us at 1 / 16 / 24 / 32 rows at (1, 4, 2) -> 280 / 299 /
  // 454 / 399 at (4, 4, 4); the 32768-row draft vocabulary 90 / 119 -> 65 / 60 us at 24 / 32 rows.
  if (k == 5120 && tiles >= 4 * 256) {
    v.ksplit = 4;
    v.nt_wide = 4;
  }
  return v;
}

bool skinny_variant_valid(const SkinnyVariant& v) {
  auto pow2_upto = [](int x, int hi) { return x >= 1 && x <= hi && (x & (x - 1)) == 0; };
  return pow2_upto(v.ksplit, 8) && pow2_upto(v.nt_narrow, 4) && pow2_upto(v.nt_wide, 4) &&
         (v.prefill_rows == 0 || v.prefill_rows > 32);
}

void set_skinny_variant(SkinnyOp op, int64_t n, int64_t k, const SkinnyVariant& v) {
  std::lock_guard<std::mutex> lock(mu());
  registry()[Key(int(op), n, k)] = v;
}

void clear_skinny_variants(SkinnyOp op) {
  std::lock_guard<std::mutex> lock(mu());
  auto& r = registry();
  for (auto it = r.begin(); it != r.end();) it = std::get<0>(it->first) == int(op) ? r.erase(it) : std::next(it);
  auto& m = missed();
  for (auto it = m.begin(); it != m.end();) it = std::get<0>(*it) == int(op) ? m.erase(it) : std::next(it);
}

SkinnyVariant lookup_skinny_variant(SkinnyOp op, int64_t n, int64_t k, bool* from_table) {
  {
    std::lock_guard<std::mutex> lock(mu());
    const auto it = registry().find(Key(int(op), n, k));
    if (it != registry().end()) {
      if (from_table) *from_table = true;
      return it->second;
    }
  }
  if (from_table) *from_table = false;
  return skinny_default(n, k);
}

bool skinny_table_loaded(SkinnyOp op) {
  std::lock_guard<std::mutex> lock(mu());
  for (const auto& kv : registry())
    if (std::get<0>(kv.first) == int(op)) return true;
  return false;
}

bool skinny_first_miss(SkinnyOp op, int64_t n, int64_t k) {
  std::lock_guard<std::mutex> lock(mu());
  return missed().insert(Key(int(op), n, k)).second;
}

}  // namespace qwen38::gemm
