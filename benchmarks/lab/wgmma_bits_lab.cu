// Do wgmma and mma.sync accumulate alike? (a lab, sm_90a only; not part of the extension)
//
// The NVFP4 skinny kernel sums its products with mma.sync.m16n8k16 (weights as B, activations as
// A). A Hopper form with the decoded weights as wgmma's register A operand and the activations as
// its shared-memory B (benchmarks/results/h200/NOTES.md) keeps the library's row invariance only
// if every output element gets the same bits as from mma.sync, and the same for every N (8 to 32
// activation rows). This lab answers both on random bf16 data whose exponents spread over 2^-8 ..
// 2^8 (so the fp32 accumulation rounds and aligns), with random fp32 accumulators, over chains of
// 4 k16 steps:
//   - D = A B + C through mma.sync m16n8k16 (each warp its 16 rows, N / 8 instructions a step);
//   - the same through wgmma m64nNk16 with A from registers (the mma.sync A fragment layout) and
//     B from shared memory (K-major, no swizzle), N = 8, 16, 32.
// It first finds which descriptor reading (leading / stride byte offsets 128 / 256 or 256 / 128,
// B transposed or not) gives A B at all (against a float64 product), then counts the elements
// whose bits differ between mma.sync and each N.
//
//   nvcc -std=c++20 -O3 -gencode arch=compute_90a,code=sm_90a -o build/lab/wgmma_bits_lab \
//       benchmarks/lab/wgmma_bits_lab.cu
//   build/lab/wgmma_bits_lab [trials]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "lab_common.cuh"  // CK

namespace {

constexpr int kM = 64, kK = 16, kN = 32, kSteps = 4;

// per trial: A [steps][64][16], B [steps][16 (k)][32 (n)] bf16, C [64][32] fp32
struct Trial {
  __nv_bfloat16 a[kSteps][kM][kK];
  __nv_bfloat16 b[kSteps][kK][kN];
  float c[kM][kN];
};

// the A fragment of rows 16 w .. 16 w + 15 (mma.sync m16n8k16 layout, also wgmma's register A)
__device__ void a_frag(uint32_t (&a)[4], const __nv_bfloat16 (*A)[kK], int w, int lane) {
  const int g = lane / 4, t = lane % 4, r0 = 16 * w + g;
  auto pair = [&](int r, int k) {
    uint32_t lo = reinterpret_cast<const uint16_t&>(A[r][k]), hi = reinterpret_cast<const uint16_t&>(A[r][k + 1]);
    return lo | (hi << 16);
  };
  a[0] = pair(r0, 2 * t);
  a[1] = pair(r0 + 8, 2 * t);
  a[2] = pair(r0, 2 * t + 8);
  a[3] = pair(r0 + 8, 2 * t + 8);
}

__global__ void mma_sync_kernel(const Trial* trials, float* out) {
  const Trial& tr = trials[blockIdx.x];
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  float d[kN / 8][4];
  for (int j = 0; j < kN / 8; ++j) {
    d[j][0] = tr.c[16 * w + g][8 * j + 2 * t];
    d[j][1] = tr.c[16 * w + g][8 * j + 2 * t + 1];
    d[j][2] = tr.c[16 * w + g + 8][8 * j + 2 * t];
    d[j][3] = tr.c[16 * w + g + 8][8 * j + 2 * t + 1];
  }
  for (int s = 0; s < kSteps; ++s) {
    uint32_t a[4];
    a_frag(a, tr.a[s], w, lane);
    for (int j = 0; j < kN / 8; ++j) {
      auto bp = [&](int k) {
        uint32_t lo = reinterpret_cast<const uint16_t&>(tr.b[s][k][8 * j + g]);
        uint32_t hi = reinterpret_cast<const uint16_t&>(tr.b[s][k + 1][8 * j + g]);
        return lo | (hi << 16);
      };
      const uint32_t b0 = bp(2 * t), b1 = bp(2 * t + 8);
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
          "{%0,%1,%2,%3};"
          : "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
  }
  float* o = out + size_t(blockIdx.x) * kM * kN;
  for (int j = 0; j < kN / 8; ++j) {
    o[(16 * w + g) * kN + 8 * j + 2 * t] = d[j][0];
    o[(16 * w + g) * kN + 8 * j + 2 * t + 1] = d[j][1];
    o[(16 * w + g + 8) * kN + 8 * j + 2 * t] = d[j][2];
    o[(16 * w + g + 8) * kN + 8 * j + 2 * t + 1] = d[j][3];
  }
}

__device__ uint64_t desc(const void* smem, uint32_t lbo, uint32_t sbo) {
  const uint32_t addr = uint32_t(__cvta_generic_to_shared(smem));
  return uint64_t((addr >> 4) & 0x3FFF) | (uint64_t((lbo >> 4) & 0x3FFF) << 16) | (uint64_t((sbo >> 4) & 0x3FFF) << 32);
}

// D = A B + D (scale-d true), A from registers, B from the descriptor; TB: imm-trans-b.
template <int N, int TB>
__device__ void wgmma(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db);
template <>
__device__ void wgmma<8, 0>(float (&d)[4], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %9, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1, 0;\n}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
template <>
__device__ void wgmma<8, 1>(float (&d)[4], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %9, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1, 1;\n}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
template <>
__device__ void wgmma<16, 0>(float (&d)[8], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %13, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, p, 1, 1, 0;\n}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
template <>
__device__ void wgmma<16, 1>(float (&d)[8], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %13, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, p, 1, 1, 1;\n}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
template <>
__device__ void wgmma<32, 0>(float (&d)[16], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %21, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, p, 1, 1, 0;\n}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
template <>
__device__ void wgmma<32, 1>(float (&d)[16], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %21, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, p, 1, 1, 1;\n}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

// B of one step in shared memory, K-major without swizzle: 8 x 8 core matrices (8 n rows of 16
// bytes = 8 k), the core matrix of n block j and k block i at j * 256 + i * 128 bytes.
// Accumulator layout of wgmma m64nN (per warp w: rows 16 w + g, + 8; register 4 j + {0,1,2,3} =
// columns 8 j + 2 t, + 1 of row g, then of row g + 8), the mma.sync C layout per 8 columns.
template <int N, int TB>
__global__ void wgmma_kernel(const Trial* trials, float* out, uint32_t lbo, uint32_t sbo) {
  __shared__ __align__(128) __nv_bfloat16 bs[kN * kK];
  const Trial& tr = trials[blockIdx.x];
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  float d[N / 2];
  for (int j = 0; j < N / 8; ++j) {
    d[4 * j + 0] = tr.c[16 * w + g][8 * j + 2 * t];
    d[4 * j + 1] = tr.c[16 * w + g][8 * j + 2 * t + 1];
    d[4 * j + 2] = tr.c[16 * w + g + 8][8 * j + 2 * t];
    d[4 * j + 3] = tr.c[16 * w + g + 8][8 * j + 2 * t + 1];
  }
  for (int s = 0; s < kSteps; ++s) {
    __syncthreads();
    for (int i = threadIdx.x; i < kN * kK; i += blockDim.x) {
      const int n = i / kK, k = i % kK;
      bs[((n / 8) * 256 + (k / 8) * 128 + (n % 8) * 16 + (k % 8) * 2) / 2] = tr.b[s][k][n];
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    uint32_t a[4];
    a_frag(a, tr.a[s], w, lane);
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    wgmma<N, TB>(d, a, desc(bs, lbo, sbo));
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  }
  float* o = out + size_t(blockIdx.x) * kM * kN;
  for (int j = 0; j < N / 8; ++j) {
    o[(16 * w + g) * kN + 8 * j + 2 * t] = d[4 * j + 0];
    o[(16 * w + g) * kN + 8 * j + 2 * t + 1] = d[4 * j + 1];
    o[(16 * w + g + 8) * kN + 8 * j + 2 * t] = d[4 * j + 2];
    o[(16 * w + g + 8) * kN + 8 * j + 2 * t + 1] = d[4 * j + 3];
  }
}

float rand_value(std::mt19937& r, int emin, int emax) {
  std::uniform_int_distribution<int> e(emin, emax), m(0, 127), sgn(0, 1);
  return (sgn(r) ? -1.f : 1.f) * std::ldexp(1.f + m(r) / 128.f, e(r));
}

}  // namespace

int main(int argc, char** argv) {
  const int trials = argc > 1 ? std::atoi(argv[1]) : 4096;
  std::mt19937 rng(1234);
  std::vector<Trial> h(trials);
  for (auto& tr : h) {
    for (int s = 0; s < kSteps; ++s) {
      for (int m = 0; m < kM; ++m)
        for (int k = 0; k < kK; ++k) tr.a[s][m][k] = __float2bfloat16(rand_value(rng, -8, 8));
      for (int k = 0; k < kK; ++k)
        for (int n = 0; n < kN; ++n) tr.b[s][k][n] = __float2bfloat16(rand_value(rng, -8, 8));
    }
    for (int m = 0; m < kM; ++m)
      for (int n = 0; n < kN; ++n) tr.c[m][n] = rand_value(rng, -4, 12);
  }
  Trial* dt;
  float *d_ref, *d_out;
  const size_t outs = size_t(trials) * kM * kN;
  CK(cudaMalloc(&dt, sizeof(Trial) * trials));
  CK(cudaMalloc(&d_ref, outs * 4));
  CK(cudaMalloc(&d_out, outs * 4));
  CK(cudaMemcpy(dt, h.data(), sizeof(Trial) * trials, cudaMemcpyHostToDevice));
  std::vector<float> ref(outs), got(outs);
  mma_sync_kernel<<<trials, 128>>>(dt, d_ref);
  CK(cudaGetLastError());
  CK(cudaMemcpy(ref.data(), d_ref, outs * 4, cudaMemcpyDeviceToHost));

  // float64 product of trial 0 (the sanity check of each descriptor reading)
  std::vector<double> f64(kM * kN);
  for (int m = 0; m < kM; ++m)
    for (int n = 0; n < kN; ++n) {
      double acc = h[0].c[m][n];
      for (int s = 0; s < kSteps; ++s)
        for (int k = 0; k < kK; ++k)
          acc += double(__bfloat162float(h[0].a[s][m][k])) * double(__bfloat162float(h[0].b[s][k][n]));
      f64[m * kN + n] = acc;
    }
  auto close_to_f64 = [&](const float* o, int ncols) {
    double worst = 0;
    for (int m = 0; m < kM; ++m)
      for (int n = 0; n < ncols; ++n) {
        const double e = std::fabs(o[m * kN + n] - f64[m * kN + n]) / (std::fabs(f64[m * kN + n]) + 1.0);
        worst = e > worst ? e : worst;
      }
    return worst;
  };
  std::printf("mma.sync vs float64 (trial 0): worst relative error %.3g\n", close_to_f64(ref.data(), kN));

  auto count_diff = [&](int ncols) {
    size_t diff = 0, total = 0;
    for (int tr = 0; tr < trials; ++tr)
      for (int m = 0; m < kM; ++m)
        for (int n = 0; n < ncols; ++n) {
          const size_t i = (size_t(tr) * kM + m) * kN + n;
          diff += std::memcmp(&ref[i], &got[i], 4) != 0;
          ++total;
        }
    return std::make_pair(diff, total);
  };

  using K = void (*)(const Trial*, float*, uint32_t, uint32_t);
  struct Cfg {
    const char* name;
    K k8, k16, k32;
  };
  const Cfg cfgs[] = {{"B not transposed", wgmma_kernel<8, 0>, wgmma_kernel<16, 0>, wgmma_kernel<32, 0>},
                      {"B transposed", wgmma_kernel<8, 1>, wgmma_kernel<16, 1>, wgmma_kernel<32, 1>}};
  const uint32_t offs[2][2] = {{128, 256}, {256, 128}};
  for (const Cfg& c : cfgs)
    for (const auto& o : offs) {
      CK(cudaMemset(d_out, 0xFF, outs * 4));
      c.k8<<<trials, 128>>>(dt, d_out, o[0], o[1]);
      CK(cudaGetLastError());
      CK(cudaDeviceSynchronize());
      CK(cudaMemcpy(got.data(), d_out, outs * 4, cudaMemcpyDeviceToHost));
      const double e = close_to_f64(got.data(), 8);
      std::printf("%s, leading / stride byte offsets %u / %u: n8 vs float64 worst %.3g", c.name, o[0], o[1], e);
      if (!(e < 1e-3)) {
        std::printf(" (not A B)\n");
        continue;
      }
      std::printf(" (A B)\n");
      for (int n : {8, 16, 32}) {
        K k = n == 8 ? c.k8 : n == 16 ? c.k16 : c.k32;
        CK(cudaMemset(d_out, 0xFF, outs * 4));
        k<<<trials, 128>>>(dt, d_out, o[0], o[1]);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(got.data(), d_out, outs * 4, cudaMemcpyDeviceToHost));
        const auto [diff, total] = count_diff(n);
        std::printf("  wgmma m64n%dk16 vs mma.sync m16n8k16, %d trials x %d k16 steps: %zu of %zu elements differ "
                    "in bits (vs float64 %.3g)\n",
                    n, trials, kSteps, diff, total, close_to_f64(got.data(), n));
      }
    }
  return 0;
}
