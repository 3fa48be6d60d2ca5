// Host check of the software e2m1 decode (csrc/common/nvfp4.cuh).
// Part 1: for every byte value, the fp16x2 and bf16x2 bit patterns of its two nibbles (bf16 in both
// forms: shifts, and the multiply of the prefill kernel).
// Part 2 (lines starting with "w"): for words covering every nibble value at every position, the
// four (element i, element i+4) pairs of the word-level decode, fp16 then bf16.
// tests/test_nvfp4.py compares them with the e2m1 table times 2^-14 (fp16) and 2^-126 (bf16).
#include <cstdint>
#include <cstdio>

#include "common/nvfp4.cuh"

using namespace qwen38::nvfp4;

static void word_line(uint32_t w) {
  std::printf("w %08x %08x %08x %08x %08x %08x %08x %08x %08x\n", w, pair_raw_f16<0>(w), pair_raw_f16<1>(w),
              pair_raw_f16<2>(w), pair_raw_f16<3>(w), pair_raw_bf16<0>(w), pair_raw_bf16<1>(w), pair_raw_bf16<2>(w),
              pair_raw_bf16<3>(w));
}

int main() {
  for (unsigned b = 0; b < 256; ++b)
    std::printf("%u %08x %08x %08x\n", b, e2m1x2_raw_f16(b), e2m1x2_raw_bf16(b), e2m1x2_raw_bf16_mul(b));
  // every value v at every position, the other nibbles a rotating pattern
  for (uint32_t v = 0; v < 16; ++v)
    for (int pos = 0; pos < 8; ++pos) {
      uint32_t w = 0;
      for (int i = 0; i < 8; ++i) w |= ((i == pos ? v : (v * 7u + 3u * i + 5u) & 15u) << (4 * i));
      word_line(w);
    }
  uint32_t x = 0x12345679u;  // xorshift words
  for (int i = 0; i < 512; ++i) {
    x ^= x << 13; x ^= x >> 17; x ^= x << 5;
    word_line(x);
  }
  word_line(0u);
  word_line(0xffffffffu);
  return 0;
}
