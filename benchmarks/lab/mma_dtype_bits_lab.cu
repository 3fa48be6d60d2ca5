// Do mma.sync's fp16 and bf16 forms sum exact products alike, and is the sum scale-invariant? (a lab, sm_80
// and later; not part of the extension)
//
// The question behind it (benchmarks/results/h200/NOTES.md, item 4, session 42): FP8 weights with bf16
// activations cost 4 instructions an e4m3 pair to decode into bf16, 1 into fp16, and on 5120x17408 that is
// 42 against 34 us a call on an H100. Every bf16 activation whose exponent lies in fp16's normal range is
// exact in fp16, and every e4m3 value is exact in both; so a call whose rows all fit (after a power of two
// per row) could run the fp16 decode - keeping the library's bits only if
//   (1) mma.sync.m16n8k16 with f16 operands gives the bits of its bf16 form on such values (the products
//       are exact either way; the question is the tensor core's fp32 accumulation), and
//   (2) scaling A by 2^s scales the result by exactly 2^s (no dependence on the absolute exponents).
// On random data - A: 8-bit significands with exponents in [-10, 10] (signs random), B: e4m3 values of every
// finite code, chains of 8 k16 steps (one 128-k block of the FP8 kernels) - it counts the output elements
// whose bits differ: (1) from a zero accumulator and from random fp32 accumulators, (2) from zero with
// s in [-4, 4] a trial.
//
//   nvcc -std=c++20 -O3 -gencode arch=compute_90a,code=sm_90a -I csrc -o build/lab/mma_dtype_bits_lab \
//       benchmarks/lab/mma_dtype_bits_lab.cu
//   build/lab/mma_dtype_bits_lab [trials]
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "common/mma.cuh"
#include "lab_common.cuh"  // CK

namespace {

constexpr int kSteps = 8;

// one trial: A [steps][16][16], B [steps][16 (k)][8 (n)] as fp16 and bf16 bits of the same values; A
// times 2^s as fp16 bits; random accumulators
struct Trial {
  uint16_t ah[kSteps][16][16], ab[kSteps][16][16], as[kSteps][16][16];
  uint16_t bh[kSteps][16][8], bb[kSteps][16][8];
  float c[16][8];
  int s;
};

// outputs per trial and lane: the 4 accumulator elements of (fp16 from 0, bf16 from 0, fp16 from c,
// bf16 from c, scaled fp16 from 0)
constexpr int kOuts = 5;

__device__ uint32_t pair(uint16_t lo, uint16_t hi) { return uint32_t(lo) | (uint32_t(hi) << 16); }

template <typename T>
__device__ void chain(float (&d)[4], const uint16_t (*A)[16][16], const uint16_t (*B)[16][8], int lane) {
  const int g = lane / 4, t = lane % 4;
  for (int s = 0; s < kSteps; ++s) {
    const uint32_t a[4] = {pair(A[s][g][2 * t], A[s][g][2 * t + 1]), pair(A[s][g + 8][2 * t], A[s][g + 8][2 * t + 1]),
                           pair(A[s][g][2 * t + 8], A[s][g][2 * t + 9]),
                           pair(A[s][g + 8][2 * t + 8], A[s][g + 8][2 * t + 9])};
    const uint32_t b0 = pair(B[s][2 * t][g], B[s][2 * t + 1][g]), b1 = pair(B[s][2 * t + 8][g], B[s][2 * t + 9][g]);
    qwen38::mma_16816<T>(d, a, b0, b1);
  }
}

__global__ void kernel(const Trial* trials, float* out) {
  const Trial& tr = trials[blockIdx.x];
  const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
  float d[kOuts][4];
  for (int e = 0; e < 4; ++e) {
    const float c = tr.c[g + 8 * (e / 2)][2 * t + (e & 1)];
    d[0][e] = d[1][e] = d[4][e] = 0.0f;
    d[2][e] = d[3][e] = c;
  }
  chain<__half>(d[0], tr.ah, tr.bh, lane);
  chain<__nv_bfloat16>(d[1], tr.ab, tr.bb, lane);
  chain<__half>(d[2], tr.ah, tr.bh, lane);
  chain<__nv_bfloat16>(d[3], tr.ab, tr.bb, lane);
  chain<__half>(d[4], tr.as, tr.bh, lane);
  for (int o = 0; o < kOuts; ++o)
    for (int e = 0; e < 4; ++e) out[((size_t(blockIdx.x) * kOuts + o) * 32 + lane) * 4 + e] = d[o][e];
}

uint16_t f16_bits(float v) {
  const __half h = __float2half_rn(v);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}
uint16_t bf16_bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return uint16_t(u >> 16);  // (v has at most 8 significant bits: the truncation is exact)
}
float e4m3_value(int code) {  // finite codes: S.EEEE.MMM, bias 7, E = 0 subnormal
  const int e = (code >> 3) & 15, m = code & 7;
  const float mag = e == 0 ? std::ldexp(float(m), -9) : std::ldexp(1.0f + m / 8.0f, e - 7);
  return (code & 0x80) ? -mag : mag;
}
uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

}  // namespace

int main(int argc, char** argv) {
  const int trials = argc > 1 ? std::atoi(argv[1]) : 4096;
  std::mt19937 rng(42);
  std::uniform_int_distribution<int> sig(0, 127), ex(-10, 10), sgn(0, 1), code(0, 255), sc(-4, 4);
  std::normal_distribution<float> acc(0.0f, 4.0f);
  std::vector<Trial> h(trials);
  for (Trial& tr : h) {
    tr.s = sc(rng);
    for (int s = 0; s < kSteps; ++s) {
      for (int i = 0; i < 16; ++i)
        for (int k = 0; k < 16; ++k) {
          const float v = (sgn(rng) ? -1.0f : 1.0f) * std::ldexp(1.0f + sig(rng) / 128.0f, ex(rng));
          tr.ah[s][i][k] = f16_bits(v);
          tr.ab[s][i][k] = bf16_bits(v);
          tr.as[s][i][k] = f16_bits(std::ldexp(v, tr.s));
        }
      for (int k = 0; k < 16; ++k)
        for (int n = 0; n < 8; ++n) {
          int c = code(rng);
          if ((c & 0x7f) == 0x7f) c ^= 1;  // (0x7f / 0xff are NaN in e4m3fn)
          tr.bh[s][k][n] = f16_bits(e4m3_value(c));
          tr.bb[s][k][n] = bf16_bits(e4m3_value(c));
        }
    }
    for (int i = 0; i < 16; ++i)
      for (int n = 0; n < 8; ++n) tr.c[i][n] = acc(rng);
  }
  Trial* dt = nullptr;
  float* dout = nullptr;
  const size_t nout = size_t(trials) * kOuts * 32 * 4;
  CK(cudaMalloc(&dt, sizeof(Trial) * trials));
  CK(cudaMalloc(&dout, nout * sizeof(float)));
  CK(cudaMemcpy(dt, h.data(), sizeof(Trial) * trials, cudaMemcpyHostToDevice));
  kernel<<<trials, 32>>>(dt, dout);
  CK(cudaGetLastError());
  std::vector<float> out(nout);
  CK(cudaMemcpy(out.data(), dout, nout * sizeof(float), cudaMemcpyDeviceToHost));
  size_t diff_zero = 0, diff_c = 0, diff_scaled = 0, total = size_t(trials) * 32 * 4;
  for (int i = 0; i < trials; ++i)
    for (int l = 0; l < 32 * 4; ++l) {
      auto at = [&](int o) { return out[(size_t(i) * kOuts + o) * 32 * 4 + l]; };
      diff_zero += bits(at(0)) != bits(at(1));
      diff_c += bits(at(2)) != bits(at(3));
      diff_scaled += bits(at(4)) != bits(std::ldexp(at(0), h[i].s));
    }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d trials x %d k16 steps, %zu output elements each comparison\n", prop.name, trials, kSteps,
              total);
  std::printf("  fp16 vs bf16 operands, from zero:                 %zu differ\n", diff_zero);
  std::printf("  fp16 vs bf16 operands, from random accumulators:  %zu differ\n", diff_c);
  std::printf("  A x 2^s (fp16) vs 2^s x the fp16 result, from 0:  %zu differ\n", diff_scaled);
  CK(cudaFree(dt));
  CK(cudaFree(dout));
  return 0;
}
