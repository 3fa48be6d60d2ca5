// A/B lab for fp8_block_linear at 1..32 rows: the register-stream kernel (fp8_stream_kernel, x as the
// mma A operand) against its transposed form (fp8_stream_t_kernel: the weights as A, each 8-row
// group of x a B operand), both from csrc/gemm/fp8_stream_kernel.cuh, with the skinny kernel as the
// bits reference at every row count.
// Why: the sm_90a SASS of the x-as-A kernel at 4 tiles a warp spends 100 of its 498 instructions a
// warp step on register moves (the A operand interleaves rows g and g + 8 of x, and ptxas copies it
// again for each tile) and 680 a step at 17..32 rows (207 moves); the transposed form feeds the
// loaded registers of x to the mma as they are (316 / 354 / 428 a step at 8 / 16 / 32 rows).
//
//   nvcc -std=c++20 -O3 -arch=sm_90a --expt-relaxed-constexpr -diag-suppress 128,177 -I csrc \
//        benchmarks/lab/fp8_t_lab.cu -o fp8_t_lab && ./fp8_t_lab
//
// Recorded: benchmarks/results/h200/fp8_t_lab_s20.txt (session 20), measured while the transposed
// kernel ran its own body at every group count; since then it runs the x-as-A body at 4 tiles and
// 2 groups (fp8_t_runs_xa), so those lines of a new run time the x-as-A form twice.
// Method as the benchmarks: CUDA graphs over weight copies of more than 3x L2 (cold weights), median
// of replays, the streaming-read ceiling in the same process; plain launches (no PDL, no cluster).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "lab_common.cuh"
#include "gemm/fp8_block_linear_kernel.cuh"
#include "gemm/fp8_stream_kernel.cuh"

using namespace qwen38;
using namespace qwen38::gemm;
using bf16 = __nv_bfloat16;

namespace {

using lab::mix;
using lab::time_graph;

// kind 0: e4m3 bytes, never NaN; 1: fp32 scales in [2^-12, 2^-8); 2: 16-bit activations +-[0.5, 2)
// (bf16 or fp16 bit patterns by `half`); 3: zeros
__global__ void fill_kernel(uint8_t* p, size_t n, uint32_t seed, int kind, int half) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint32_t h = mix(i, seed);
    uint8_t v = uint8_t(h);
    if (kind == 0 && (v & 0x7f) == 0x7f) v ^= 1;
    if (kind == 1) {
      const uint32_t word = mix(i / 4, seed);
      const float f = ldexpf(1.0f + float(word % 1024) / 1024.0f, -12 + int((word >> 10) % 4));
      v = reinterpret_cast<const uint8_t*>(&f)[i % 4];
    }
    if (kind == 2) {
      const uint32_t e = mix(i / 2, seed);
      const uint16_t b = half ? uint16_t((e & 0x83ff) | 0x3800) : uint16_t((e & 0x807f) | 0x3f00);
      v = (i & 1) ? uint8_t(b >> 8) : uint8_t(b);
    }
    if (kind == 3) v = 0;
    p[i] = v;
  }
}

void* dalloc(size_t bytes, uint32_t seed, int kind, int half = 0) {
  void* p = nullptr;
  CK(cudaMalloc(&p, bytes));
  fill_kernel<<<1024, 256>>>(static_cast<uint8_t*>(p), bytes, seed, kind, half);
  CK(cudaGetLastError());
  return p;
}

struct Case {
  int n, k, copies;
  std::vector<uint8_t*> w;
  std::vector<float*> s;
  void* x;    // 32 rows of bf16
  void* xh;   // 32 rows of fp16
  void* y;
};

double g_ceiling = 0;

Case make_case(int n, int k, size_t l2) {
  Case c{n, k, 0, {}, {}, nullptr, nullptr, nullptr};
  const size_t per = size_t(n) * k;
  c.copies = int(std::max<size_t>(2, (3 * l2 + per - 1) / per));
  const size_t sbytes = size_t((n + 127) / 128) * ((k + 127) / 128) * 4;
  for (int i = 0; i < c.copies; ++i) {
    c.w.push_back(static_cast<uint8_t*>(dalloc(per, 17 + i, 0)));
    c.s.push_back(static_cast<float*>(dalloc(sbytes, 71 + i, 1)));
  }
  c.x = dalloc(size_t(32) * k * 2, 5, 2, 0);
  c.xh = dalloc(size_t(32) * k * 2, 6, 2, 1);
  c.y = dalloc(size_t(32) * n * 2, 0, 3);
  CK(cudaDeviceSynchronize());
  return c;
}
void free_case(Case& c) {
  for (auto p : c.w) CK(cudaFree(p));
  for (auto p : c.s) CK(cudaFree(p));
  CK(cudaFree(c.x));
  CK(cudaFree(c.xh));
  CK(cudaFree(c.y));
}
Fp8BlockParams params(const Case& c, int m, bool half, int i) {
  Fp8BlockParams p;
  p.x = half ? c.xh : c.x;
  p.w = c.w[i % c.copies];
  p.scale = c.s[i % c.copies];
  p.y = c.y;
  p.m = m;
  p.n = c.n;
  p.k = c.k;
  p.x_stride = c.k;
  p.out = int(half ? Out::kF16 : Out::kBF16);
  return p;
}
std::vector<uint8_t> read_y(const Case& c, int m) {
  std::vector<uint8_t> out(size_t(m) * c.n * 2);
  CK(cudaMemcpy(out.data(), c.y, out.size(), cudaMemcpyDeviceToHost));
  return out;
}

// one kernel: time it (bf16 only), check its bits against `ref` (empty: becomes the reference)
template <typename Kern>
float run(Case& c, int m, bool half, Kern kernel, unsigned grid, int threads, std::vector<uint8_t>& ref,
          const char* label, bool timed) {
  auto launch = [&](int i, cudaStream_t s) { kernel<<<grid, threads, 0, s>>>(params(c, m, half, i)); };
  float us = 0;
  if (timed) us = time_graph(std::max(4 * c.copies, 24), launch);
  CK(cudaMemset(c.y, 0, size_t(32) * c.n * 2));
  launch(0, 0);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  const char* bits = "reference";
  if (ref.empty()) ref = read_y(c, m);
  else bits = read_y(c, m) == ref ? "same bits" : "BITS DIFFER";
  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0));
  cudaFuncAttributes fa{};
  CK(cudaFuncGetAttributes(&fa, kernel));
  if (timed) {
    const double bytes = double(c.n) * c.k + 4.0 * ((c.n + 127) / 128) * ((c.k + 127) / 128) + 2.0 * m * (c.k + c.n);
    const double gbs = bytes / (us * 1e3);
    std::printf("  %-28s %8.2f us %6.0f GB/s %5.1f%%  regs %3d  %d blk/SM  %s\n", label, us, gbs,
                100.0 * gbs / g_ceiling, fa.numRegs, per_sm, bits);
  } else {
    std::printf("  %-28s fp16 bits: %s\n", label, bits);
  }
  return us;
}

template <int K, int KS, int NT, int NX>
void rows_case(Case& c, int m, bool half) {
  constexpr int MT = NX > 2 ? 2 : 1;
  const unsigned grid = unsigned(c.n / (8 * NT));
  std::vector<uint8_t> ref;
  char label[64];
  const bool timed = !half;
  if (half) {
    run(c, m, true, fp8_block_skinny_kernel<__half, MT, KS, NT>, grid, 32 * KS, ref, "skinny (reference)", false);
    std::snprintf(label, sizeof label, "x-as-A ks%d nt%d mt%d", KS, NT, MT);
    run(c, m, true, fp8_stream_kernel<__half, K, KS, NT, MT>, grid, 32 * KS, ref, label, false);
    std::snprintf(label, sizeof label, "transposed ks%d nt%d nx%d", KS, NT, NX);
    run(c, m, true, fp8_stream_t_kernel<__half, K, KS, NT, NX>, grid, 32 * KS, ref, label, false);
    return;
  }
  run(c, m, false, fp8_block_skinny_kernel<bf16, MT, KS, NT>, grid, 32 * KS, ref, "skinny (reference)", false);
  std::snprintf(label, sizeof label, "x-as-A ks%d nt%d mt%d", KS, NT, MT);
  run(c, m, false, fp8_stream_kernel<bf16, K, KS, NT, MT>, grid, 32 * KS, ref, label, true);
  std::snprintf(label, sizeof label, "transposed ks%d nt%d nx%d", KS, NT, NX);
  run(c, m, false, fp8_stream_t_kernel<bf16, K, KS, NT, NX>, grid, 32 * KS, ref, label, true);
}

template <int K, int KS, int NT>
void shape(int n, size_t l2, std::initializer_list<int> rows, bool fp16_bits) {
  Case c = make_case(n, K, l2);
  for (int m : rows) {
    std::printf("%dx%d, %d rows (%d copies)\n", n, K, m, c.copies);
    for (int h = 0; h < (fp16_bits ? 2 : 1); ++h) {
      const bool half = h == 1;
      switch ((m + 7) / 8) {
        case 1: rows_case<K, KS, NT, 1>(c, m, half); break;
        case 2: rows_case<K, KS, NT, 2>(c, m, half); break;
        case 3: rows_case<K, KS, NT, 3>(c, m, half); break;
        default: rows_case<K, KS, NT, 4>(c, m, half); break;
      }
    }
  }
  free_case(c);
}

}  // namespace

int main(int argc, char** argv) {
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  const size_t l2 = size_t(prop.l2CacheSize);
  g_ceiling = lab::read_ceiling_GBps();
  std::printf("device %s, %d SMs, L2 %zu MB, read ceiling %.0f GB/s\n", prop.name, prop.multiProcessorCount,
              l2 >> 20, g_ceiling);
  const bool quick = argc > 1;
  // the tables' variants (tables/sm_90/fp8_block.json)
  shape<5120, 4, 4>(34816, l2, {1, 8, 9, 16, 17, 24, 32}, true);
  shape<5120, 4, 4>(12288, l2, {1, 16, 32}, false);
  if (quick) return 0;
  shape<5120, 4, 2>(16384, l2, {1, 16, 32}, false);
  shape<5120, 4, 4>(17408, l2, {1, 16, 32}, false);
  shape<17408, 8, 2>(5120, l2, {1, 16, 32}, true);
  shape<6144, 8, 2>(5120, l2, {1, 16}, false);
  return 0;
}
