// A/B lab for nvfp4_linear at 1..32 rows (prepared in session 21, not yet run): the transposed
// stream body (nvfp4_stream_t, csrc/gemm/nvfp4_stream_kernel.cuh) against a copy whose block scales
// come three steps at a time (sc_kernel below): thread t < 3 of each row loads the 8 scale bytes of
// step s + t of each tile with one 8-byte load (the row's pairs of all four threads), one iteration
// (three steps) ahead, and at step s + d each thread takes its pair from lane 4 g + d by two
// __shfl_sync. The same scale values, so the same bits (checked against the x-as-A body).
// Why: a warp's 2-byte scale load of a tile touches 8 rows (8 L1 lines) for 64 useful bytes, as
// many lines as its 16-byte weight load; at 1 row (x rows past M read one zero row) the scales are
// by arithmetic about a third of the warp's L1 wavefronts (benchmarks/results/h200/NOTES.md, next
// device session item 1; ncu_s21_x_reads.txt: L1/TEX 55% at 1 row). The copy loads them with a
// quarter of the lines, for 8 shuffles and 4 selects a step at 4 tiles.
//
//   nvcc -std=c++20 -O3 -arch=sm_90a --expt-relaxed-constexpr -diag-suppress 128,177 -I csrc \
//        benchmarks/lab/nvfp4_scale_lab.cu -o nvfp4_scale_lab && ./nvfp4_scale_lab [quick]
//
// Method as the benchmarks: CUDA graphs over weight copies of more than 3x L2 (cold weights), median
// of replays, the streaming-read ceiling in the same process; plain launches (no PDL, no cluster).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "lab_common.cuh"
#include "common/cp_async.cuh"
#include "gemm/nvfp4_stream_kernel.cuh"

using namespace qwen38;
using namespace qwen38::gemm;
using bf16 = __nv_bfloat16;

namespace {

using lab::time_graph;

template <typename T, int K, int KS, int NT, int MT>
__global__ void __launch_bounds__(QWEN38_NVFP4_STREAM_THREADS(KS, NT, MT), QWEN38_NVFP4_STREAM_MIN_BLOCKS(KS, NT, MT))
    xa_kernel(const Nvfp4Params p) {
  nvfp4_stream_xa<T, K, KS, NT, MT>(p);
}
template <typename T, int K, int KS, int NT, int NX>
__global__ void __launch_bounds__(QWEN38_NVFP4_STREAM_THREADS(KS, NT, (NX > 2 ? 2 : 1)),
                                  QWEN38_NVFP4_STREAM_MIN_BLOCKS(KS, NT, (NX > 2 ? 2 : 1)))
    t_kernel(const Nvfp4Params p) {
  nvfp4_stream_t<T, K, KS, NT, NX>(p);
}

// nvfp4_stream_t with the scales of three steps in one 8-byte load per tile (see the header). The
// weight register sets rotate over three steps as in nvfp4_stream_t (kD = 2), so an iteration is
// three steps; the scales of the next iteration load at its first step.
template <typename T, int K, int KSPLIT, int NT, int NX>
__global__ void __launch_bounds__(QWEN38_NVFP4_STREAM_THREADS(KSPLIT, NT, (NX > 2 ? 2 : 1)),
                                  QWEN38_NVFP4_STREAM_MIN_BLOCKS(KSPLIT, NT, (NX > 2 ? 2 : 1)))
    sc_kernel(const Nvfp4Params p) {
  using D = nvfp4::PairDecode<T>;
  constexpr int MT = NX > 2 ? 2 : 1;
  constexpr int kA = NT / 2;
  constexpr int kSW = K / kStepK / KSPLIT;
  constexpr int kRowB = K / 2, kRowS = K / 16;
  constexpr int kD = 2, kR = kD + 1;
  static_assert(NT % 2 == 0 && kSW >= kR, "pairs of tiles, at least one iteration");
  __shared__ float partial[KSPLIT][MT * 16][8];

  const stream::StreamThread th = stream::stream_begin<false>(8 * NT, kSW);
  const int g = th.g, t = th.t, s0 = th.s0, lane = threadIdx.x % 32;
  const int64_t nb = th.nb;
  const uint8_t* __restrict__ wp = p.w + (nb + g) * kRowB + 64 * s0 + 16 * t;
  const uint8_t* __restrict__ sp = p.scale + (nb + g) * kRowS + 8 * s0 + 8 * t;  // step s0 + t's 8 bytes
  const T* xr[NX];
  stream::activation_rows(xr, p.x, p.m, p.x_stride, g, 128 * s0 + 32 * t);

  uint4 wb[kR][NT];
  auto load_w = [&](int set, int j) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) wb[set][nt] = stream::load_w(wp + nt * 8 * kRowB + 64 * j);
  };
  // the scales of steps j + t (t < 3) of every tile; lane 4 g + 3 loads nothing
  uint2 sn[NT];
  auto load_s = [&](int j, int left) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      sn[nt] = make_uint2(0, 0);
      if (t < 3 && t < left) sn[nt] = __ldg(reinterpret_cast<const uint2*>(sp + nt * 8 * kRowS + 8 * j));
    }
  };
#pragma unroll
  for (int d = 0; d < kD; ++d) load_w(d, d);
  load_s(0, kSW);
  pdl_wait();
  pdl_allow();

  float acc[kA][NX][4];
  stream::zero_fill(acc);
  stream::XWords<false, NX> xw;

#pragma unroll 1
  for (int s = 0; s < kSW; s += kR) {
    uint2 sc8[NT];  // this iteration's scales: step s + d's 8 bytes in lane 4 g + d
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) sc8[nt] = sn[nt];
    if (s + kR < kSW) load_s(kR, kSW - s - kR);
#pragma unroll
    for (int d = 0; d < kR; ++d) {
      if (kSW % kR != 0 && s + d >= kSW) break;
      const int ss = s + d;
      if (ss + kD < kSW) load_w((d + kD) % kR, d + kD);
      uint32_t sc[NT];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const uint32_t lo = __shfl_sync(0xffffffffu, sc8[nt].x, (lane & ~3) | d);
        const uint32_t hi = __shfl_sync(0xffffffffu, sc8[nt].y, (lane & ~3) | d);
        sc[nt] = (t < 2 ? lo : hi) >> (16 * (t & 1));
      }
      typename D::T2 s2[NT][2];
      stream::nvfp4_scales<T, NT>(s2, sc);
      stream::x_step(xw, xr, d);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        uint4 xc[NX];
        stream::x_word(xc, xw, xr, d, q, kSW);
        nvfp4_t_word<T, NT, NX>(acc, xc, wb[d], s2, q);
      }
    }
    wp += 64 * kR;
    sp += 8 * kR;
#pragma unroll
    for (int nx = 0; nx < NX; ++nx) xr[nx] += kStepK * kR;
  }

  const float gscale = *p.global;
  const StreamTile tile_e = stream_tile<false>(8 * NT);
  reduce_and_store_t<MT, KSPLIT, NT, NX>(partial, acc, tile_e.warp, g, t, nvfp4::kPairUnscale, gscale, p.bias,
                                         p.bias_dtype, p.y, p.out, p.m, p.n, tile_e.n0);
}

__global__ void fill_x(uint16_t* p, size_t n, uint32_t seed, int half) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint32_t h = lab::mix(i, seed);
    p[i] = half ? uint16_t((h & 0x83ff) | 0x3800) : uint16_t((h & 0x807f) | 0x3f00);
  }
}

struct Case {
  int n, k, copies;
  lab::Nvfp4Copies w;
  void* x;   // 32 rows of bf16
  void* xh;  // 32 rows of fp16
  void* y;
  float* global;
};

double g_ceiling = 0;

Case make_case(int n, int k, size_t l2) {
  Case c{n, k, 0, {}, nullptr, nullptr, nullptr, nullptr};
  const size_t per = size_t(n) * k / 2 + size_t(n) * k / 16;
  c.copies = int(std::max<size_t>(2, (3 * l2 + per - 1) / per));
  c.w.alloc(n, k, c.copies);
  CK(cudaMalloc(&c.x, size_t(32) * k * 2));
  CK(cudaMalloc(&c.xh, size_t(32) * k * 2));
  fill_x<<<1024, 256>>>(static_cast<uint16_t*>(c.x), size_t(32) * k, 5, 0);
  fill_x<<<1024, 256>>>(static_cast<uint16_t*>(c.xh), size_t(32) * k, 6, 1);
  CK(cudaMalloc(&c.y, size_t(32) * n * 2));
  CK(cudaMalloc(&c.global, 4));
  const float gs = 0.75f;
  CK(cudaMemcpy(c.global, &gs, 4, cudaMemcpyHostToDevice));
  CK(cudaDeviceSynchronize());
  return c;
}
void free_case(Case& c) {
  c.w.release();
  CK(cudaFree(c.x));
  CK(cudaFree(c.xh));
  CK(cudaFree(c.y));
  CK(cudaFree(c.global));
}
Nvfp4Params params(const Case& c, int m, bool half, int i) {
  Nvfp4Params p;
  p.x = half ? c.xh : c.x;
  p.w = c.w.w[i % c.copies];
  p.scale = c.w.s[i % c.copies];
  p.global = c.global;
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

template <typename Kern>
void run(Case& c, int m, bool half, Kern kernel, unsigned grid, int threads, size_t smem, std::vector<uint8_t>& ref,
         const char* label) {
  if (smem > 0) CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  auto launch = [&](int i, cudaStream_t s) { kernel<<<grid, threads, smem, s>>>(params(c, m, half, i)); };
  float us = 0;
  if (!half) us = time_graph(std::max(4 * c.copies, 24), launch);
  CK(cudaMemset(c.y, 0, size_t(32) * c.n * 2));
  launch(0, 0);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  const char* bits = "reference";
  if (ref.empty()) ref = read_y(c, m);
  else bits = read_y(c, m) == ref ? "same bits" : "BITS DIFFER";
  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  cudaFuncAttributes fa{};
  CK(cudaFuncGetAttributes(&fa, kernel));
  if (half) {
    std::printf("  %-30s fp16 bits: %s\n", label, bits);
    return;
  }
  const double bytes = double(c.n) * c.k / 2 + double(c.n) * c.k / 16 + 2.0 * m * (c.k + c.n);
  const double gbs = bytes / (us * 1e3);
  std::printf("  %-30s %8.2f us %6.0f GB/s %5.1f%%  regs %3d  smem %6zu  %2d blk/SM  %s\n", label, us, gbs,
              100.0 * gbs / g_ceiling, fa.numRegs, smem + fa.sharedSizeBytes, per_sm, bits);
}

template <typename T, int K, int KS, int NT, int NX>
void run_sc(Case& c, int m, bool half, std::vector<uint8_t>& ref) {
  char label[64];
  std::snprintf(label, sizeof label, "scales x3 ks%d nt%d nx%d", KS, NT, NX);
  run(c, m, half, sc_kernel<T, K, KS, NT, NX>, unsigned(c.n / (8 * NT)),
      QWEN38_NVFP4_STREAM_THREADS(KS, NT, (NX > 2 ? 2 : 1)), 0, ref, label);
}

template <int K, int KS, int NT, int NX>
void rows_case(Case& c, int m, bool half) {
  constexpr int MT = NX > 2 ? 2 : 1;
  const unsigned grid = unsigned(c.n / (8 * NT));
  std::vector<uint8_t> ref;
  char label[64];
  auto all = [&](auto tag) {
    using T = decltype(tag);
    std::snprintf(label, sizeof label, "x-as-A ks%d nt%d mt%d", KS, NT, MT);
    run(c, m, half, xa_kernel<T, K, KS, NT, MT>, grid, 32 * KS, 0, ref, label);
    if constexpr (!(KS == 8 && NT == 4 && NX == 2 && std::is_same_v<T, __half>)) {
      std::snprintf(label, sizeof label, "registers ks%d nt%d nx%d", KS, NT, NX);
      run(c, m, half, t_kernel<T, K, KS, NT, NX>, grid, 32 * KS, 0, ref, label);
    }
    if constexpr (!kStreamClusters<K, KS>) run_sc<T, K, KS, NT, NX>(c, m, half, ref);
  };
  if (half) all(__half{});
  else all(bf16{});
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
    std::fflush(stdout);
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
  // the tables' variants (tables/sm_90/nvfp4_skinny*.json)
  shape<5120, 4, 4>(34816, l2, {1, 4, 8, 16, 24, 32}, true);
  shape<5120, 4, 4>(16384, l2, {1, 8, 16}, false);
  if (quick) return 0;
  shape<5120, 4, 4>(12288, l2, {1, 8, 16, 32}, false);
  shape<5120, 4, 4>(6144, l2, {1, 16}, false);
  return 0;
}
