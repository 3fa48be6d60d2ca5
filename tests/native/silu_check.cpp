// Checks csrc/conv/silu_exact.cuh on the host: for fp32 inputs (every STRIDE-th bit pattern from
// OFFSET; STRIDE 1 = all 2^32), silu_exact (the fp32 path where its rounding is certain, else the
// float64 formula) must give the bits of the float64 formula itself. Prints how many inputs took
// the fp32 path; exits 1 on any difference (NaN results compare as NaN).
//
//   g++ -std=c++20 -O2 -ffp-contract=off -I csrc tests/native/silu_check.cpp -o silu_check
//   ./silu_check STRIDE [OFFSET]
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "conv/silu_exact.cuh"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s STRIDE [OFFSET]\n", argv[0]);
    return 2;
  }
  const uint64_t stride = std::strtoull(argv[1], nullptr, 10);
  const uint64_t offset = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 0;
  if (stride == 0) return 2;
  namespace d = qwen38::conv::silu_detail;
  uint64_t n = 0, fast = 0, bad = 0;
  for (uint64_t u = offset; u < (uint64_t(1) << 32); u += stride) {
    const float s = d::float_of(uint32_t(u));
    float y;
    const bool f = d::silu_fast(s, y);
    const float want = d::silu_f64(s);
    const float got = qwen38::conv::silu_exact(s);
    ++n;
    fast += f;
    const bool same = (std::isnan(got) && std::isnan(want)) || d::bits_of(got) == d::bits_of(want);
    if (!same || (f && d::bits_of(y) != d::bits_of(want))) {
      if (++bad <= 10)
        std::printf("MISMATCH s=%a (0x%08" PRIx64 "): fp32 path %s %a, float64 %a\n", s, u, f ? "yes" : "no",
                    got, want);
    }
  }
  std::printf("silu_check: %" PRIu64 " inputs, %" PRIu64 " on the fp32 path (%.4f%%), %" PRIu64 " differences\n", n,
              fast, 100.0 * double(fast) / double(n ? n : 1), bad);
  return bad ? 1 : 0;
}
