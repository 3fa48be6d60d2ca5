// Host check of the software e2m1 decode (csrc/common/nvfp4.cuh): prints, for every byte value,
// the fp16x2 and bf16x2 bit patterns of its two nibbles. tests/test_nvfp4.py compares them with the
// e2m1 table times 2^-14 (fp16) and 2^-126 (bf16).
#include <cstdio>

#include "common/nvfp4.cuh"

int main() {
  for (unsigned b = 0; b < 256; ++b)
    std::printf("%u %08x %08x\n", b, qwen38::nvfp4::e2m1x2_raw_f16(b), qwen38::nvfp4::e2m1x2_raw_bf16(b));
  return 0;
}
