// A/B lab for nvfp4_linear at 1..32 rows: the library's stream bodies (x-as-A nvfp4_stream_xa and
// transposed nvfp4_stream_t, csrc/gemm/nvfp4_stream_kernel.cuh) against copies that read the
// activations from a fragment-ordered copy of x (xp below) instead of x's rows.
// Why (session 21, ncu_s21_x_reads.txt): at 9..32 rows L1/TEX throughput is at 83-85% with DRAM at
// 21-31%. In the library bodies a warp's 16-byte load of word q of x touches 8 rows x 2 lines (the
// four threads of a row read 16 bytes each, 64 bytes apart), and the four words of a step touch the
// same 16 lines again: per warp step at 4 tiles, 64 line touches per 8-row group of x against 32
// for the weights and 32 for the scales. In the fragment order the 32 threads' 16-byte words of one
// (step, word, group) are contiguous (512 bytes, 4 lines): a quarter of the x line touches. The
// values reaching each thread are the same, so the same bits (checked against the x-as-A body).
// The copy costs a pass over x (M x K x 2 bytes written, padded to whole groups); the lab times the
// permute kernel alone and the pair in one graph.
//
//   nvcc -std=c++20 -O3 -arch=sm_90a --expt-relaxed-constexpr -diag-suppress 128,177 -I csrc \
//        benchmarks/lab/nvfp4_xperm_lab.cu -o nvfp4_xperm_lab && ./nvfp4_xperm_lab [quick | ncu]
//
// Method as the benchmarks: CUDA graphs over weight copies of more than 3x L2 (cold weights), median
// of replays, the streaming-read ceiling in the same process; plain launches (no PDL, no cluster).
#include <string>

#include "nvfp4_ab.cuh"

using namespace nvfp4_ab;

namespace {

// Fragment order of x for H groups of 8 rows: uint4 index ((s 4 + q) H + h) 32 + lane holds
// x[8 h + lane / 4][128 s + 32 (lane % 4) + 8 q .. + 7] (zeros for rows at or past m).
template <typename T>
__global__ void xperm_kernel(const T* __restrict__ x, int m, int64_t stride, int k, int h_groups, uint4* out) {
  const int64_t total = int64_t(k / 8) * h_groups * 32 / 4;  // (k / 128 steps) x 4 words x H x 32
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int lane = int(i % 32), h = int(i / 32 % h_groups);
    const int64_t sq = i / (32 * h_groups);  // 4 s + q
    const int row = 8 * h + lane / 4;
    const int64_t col = 128 * (sq / 4) + 32 * (lane % 4) + 8 * (sq % 4);
    out[i] = row < m ? *reinterpret_cast<const uint4*>(x + row * stride + col) : make_uint4(0, 0, 0, 0);
  }
}
inline unsigned xperm_blocks(int k, int h) { return unsigned((int64_t(k / 8) * h * 8 + 255) / 256); }

// nvfp4_stream_t with x from the fragment order (H = NX groups)
template <typename T, int K, int KSPLIT, int NT, int NX>
__global__ void __launch_bounds__(QWEN38_NVFP4_STREAM_THREADS(KSPLIT, NT, (NX > 2 ? 2 : 1)),
                                  QWEN38_NVFP4_STREAM_MIN_BLOCKS(KSPLIT, NT, (NX > 2 ? 2 : 1)))
    tp_kernel(const Nvfp4Params p) {
  using D = nvfp4::PairDecode<T>;
  constexpr int MT = NX > 2 ? 2 : 1;
  constexpr int kA = NT / 2;
  constexpr int kSW = K / kStepK / KSPLIT;
  constexpr int kRowB = K / 2, kRowS = K / 16;
  constexpr int kD = kStreamDepth, kR = kD + 1;
  constexpr int kWord = NX * 32;  // uint4s of one (step, word)
  __shared__ float partial[KSPLIT][MT * 16][8];

  const stream::StreamThread th = stream::stream_begin<false>(8 * NT, kSW);
  const int g = th.g, t = th.t, s0 = th.s0, lane = threadIdx.x % 32;
  const int64_t nb = th.nb;
  const uint8_t* __restrict__ wp = p.w + (nb + g) * kRowB + 64 * s0 + 16 * t;
  const uint8_t* __restrict__ sp = p.scale + (nb + g) * kRowS + 8 * s0 + 2 * t;
  const uint4* xq = static_cast<const uint4*>(p.x) + int64_t(s0) * 4 * kWord + lane;

  uint4 wb[kR][NT];
  uint32_t sb[kR][NT];
  auto load_step = [&](int set, int j) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      wb[set][nt] = stream::load_w(wp + nt * 8 * kRowB + 64 * j);
      sb[set][nt] = stream::load_scale2(sp + nt * 8 * kRowS + 8 * j);
    }
  };
#pragma unroll
  for (int d = 0; d < kD; ++d) load_step(d, d);

  float acc[kA][NX][4];
  stream::zero_fill(acc);
  uint4 xn[NX];

#pragma unroll 1
  for (int s = 0; s < kSW; s += kR) {
#pragma unroll
    for (int d = 0; d < kR; ++d) {
      if (kSW % kR != 0 && s + d >= kSW) break;
      const int ss = s + d;
      if (ss + kD < kSW) load_step((d + kD) % kR, d + kD);
      typename D::T2 s2[NT][2];
      stream::nvfp4_scales<T, NT>(s2, sb[d]);
#pragma unroll
      for (int nx = 0; nx < NX; ++nx) xn[nx] = stream::load_x(xq + (4 * d) * kWord + nx * 32);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        uint4 xc[NX];
#pragma unroll
        for (int nx = 0; nx < NX; ++nx) xc[nx] = xn[nx];
        if (q < 3)
#pragma unroll
          for (int nx = 0; nx < NX; ++nx) xn[nx] = stream::load_x(xq + (4 * d + q + 1) * kWord + nx * 32);
        nvfp4_t_word<T, NT, NX>(acc, xc, wb[d], s2, q);
      }
    }
    wp += 64 * kR;
    sp += 8 * kR;
    xq += 4 * kWord * kR;
  }

  const float gscale = *p.global;
  const StreamTile tile_e = stream_tile<false>(8 * NT);
  reduce_and_store_t<MT, KSPLIT, NT, NX>(partial, acc, tile_e.warp, g, t, nvfp4::kPairUnscale, gscale, p.bias,
                                         p.bias_dtype, p.y, p.out, p.m, p.n, tile_e.n0);
}

// nvfp4_stream_xa (k split 2..4, 2 or 4 tiles a warp: no cluster form) with x from the fragment
// order (H = 2 MT groups: rows g + 8 h)
template <typename T, int K, int KSPLIT, int NT, int MT>
__global__ void __launch_bounds__(QWEN38_NVFP4_STREAM_THREADS(KSPLIT, NT, MT),
                                  QWEN38_NVFP4_STREAM_MIN_BLOCKS(KSPLIT, NT, MT)) xap_kernel(const Nvfp4Params p) {
  constexpr int kSteps = K / kStepK, kSW = kSteps / KSPLIT;
  constexpr int kRowB = K / 2, kRowS = K / 16;
  constexpr int kD = KSPLIT == 4 && MT == 2 ? stream_depth_wide4<T>() : kStreamDepth;
  constexpr int kH = 2 * MT, kWord = kH * 32;
  static_assert(NT > 1 && !kStreamClusters<K, KSPLIT>, "the big weights' kernels only");
  __shared__ float partial[KSPLIT][MT * 16][8];

  const stream::StreamThread th = stream::stream_begin<false>(8 * NT, kSW);
  const int g = th.g, t = th.t, s0 = th.s0, lane = threadIdx.x % 32;
  const int64_t nb = th.nb;
  const uint8_t* __restrict__ wp = p.w + (nb + g) * kRowB + 64 * s0 + 16 * t;
  const uint8_t* __restrict__ sp = p.scale + (nb + g) * kRowS + 8 * s0 + 2 * t;
  const uint4* xq = static_cast<const uint4*>(p.x) + int64_t(s0) * 4 * kWord + lane;

  uint4 wb[kD][NT];
  uint32_t sb[kD][NT];
  stream::nvfp4_load_steps(wb, sb, wp, sp, kRowB, kRowS);

  float acc[NT][MT][4];
  stream::zero_fill(acc);
  uint4 xn[kH];

  for (int s = 0; s < kSW; s += kD) {
#pragma unroll
    for (int d = 0; d < kD; ++d) {
      if (kSW % kD != 0 && s + d >= kSW) break;
      const int ss = s + d;
      uint4 wq[NT];
      uint32_t sc[NT];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        wq[nt] = wb[d][nt];
        sc[nt] = sb[d][nt];
      }
      if (ss + kD < kSW) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          wb[d][nt] = stream::load_w(wp + nt * 8 * kRowB + 64 * (ss + kD));
          sb[d][nt] = stream::load_scale2(sp + nt * 8 * kRowS + 8 * (ss + kD));
        }
      }
      typename nvfp4::PairDecode<T>::T2 s2[NT][2];
      stream::nvfp4_scales<T, NT>(s2, sc);
#pragma unroll
      for (int h = 0; h < kH; ++h) xn[h] = stream::load_x(xq + (4 * ss) * kWord + h * 32);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        uint4 xc[kH];
#pragma unroll
        for (int h = 0; h < kH; ++h) xc[h] = xn[h];
        if (q < 3)
#pragma unroll
          for (int h = 0; h < kH; ++h) xn[h] = stream::load_x(xq + (4 * ss + q + 1) * kWord + h * 32);
        uint32_t af[MT][2][4];
        stream::nvfp4_a_fragments<MT>(af, xc);
        stream::nvfp4_word_mmas<T, NT, MT>(acc, af, wq, s2, q);
      }
    }
  }

  const float gscale = *p.global;
  const StreamTile tile_e = stream_tile<false>(8 * NT);
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
    reduce_and_store<MT, KSPLIT>(partial, acc[nt], tile_e.warp, g, t, nvfp4::kPairUnscale, gscale, p.bias,
                                 p.bias_dtype, p.y, p.out, p.m, p.n, tile_e.n0 + 8 * nt);
}

uint4* g_xp = nullptr;  // the fragment-ordered x (32 rows' worth)

// a permuted body: x permuted once (untimed), then the body alone timed; then permute + body per call
template <typename T, typename Kern>
void run_perm(Case& c, int m, bool half, Kern kernel, int h, std::vector<uint8_t>& ref, const char* label) {
  const T* x = static_cast<const T*>(half ? c.xh : c.x);
  xperm_kernel<T><<<xperm_blocks(c.k, h), 256>>>(x, m, c.k, c.k, h, g_xp);
  CK(cudaGetLastError());
  Case cp = c;
  cp.x = cp.xh = g_xp;  // the body reads the copy (params() passes x_stride K: unused by it)
  run(cp, m, half, kernel, unsigned(c.n / 32), 128, 0, ref, label);
  if (half) return;
  const float us_perm = time_graph(24, [&](int, cudaStream_t s) {
    xperm_kernel<T><<<xperm_blocks(c.k, h), 256, 0, s>>>(x, m, c.k, c.k, h, g_xp);
  });
  const float us_pair = time_graph(std::max(4 * c.copies, 24), [&](int i, cudaStream_t s) {
    xperm_kernel<T><<<xperm_blocks(c.k, h), 256, 0, s>>>(x, m, c.k, c.k, h, g_xp);
    kernel<<<unsigned(c.n / 32), 128, 0, s>>>(params(cp, m, half, i));
  });
  std::printf("  %-30s permute alone %6.2f us, permute + body %7.2f us\n", "", us_perm, us_pair);
}

template <int K, int KS, int NT, int NX>
struct Rows {
  static void run(Case& c, int m, bool half) {
    static_assert(KS == 4 && NT == 4, "the launch above: 128 threads, 32 rows a CTA");
    std::vector<uint8_t> ref;
    auto all = [&](auto tag) {
      using T = decltype(tag);
      constexpr int MT = NX > 2 ? 2 : 1;
      run_xa_and_t<T, K, KS, NT, NX>(c, m, half, ref);
      char label[64];
      std::snprintf(label, sizeof label, "x-as-A xperm ks%d nt%d mt%d", KS, NT, MT);
      run_perm<T>(c, m, half, xap_kernel<T, K, KS, NT, MT>, 2 * MT, ref, label);
      std::snprintf(label, sizeof label, "registers xperm ks%d nt%d nx%d", KS, NT, NX);
      run_perm<T>(c, m, half, tp_kernel<T, K, KS, NT, NX>, NX, ref, label);
    };
    if (half) all(__half{});
    else all(bf16{});
  }
};

// "ncu": one launch of each body at 1 / 16 / 32 rows of 34816x5120 (bf16), for a profiler
void ncu_launches(size_t l2) {
  Case c = make_case(34816, 5120, l2);
  const unsigned grid = unsigned(c.n / 32);
  for (int m : {1, 16, 32}) {
    const bf16* x = static_cast<const bf16*>(c.x);
    Case cp = c;
    cp.x = g_xp;
    auto both = [&](auto xa, auto t, auto xap, auto tp, int h_xa, int h_t) {
      xa<<<grid, 128>>>(params(c, m, false, 0));
      t<<<grid, 128>>>(params(c, m, false, 0));
      xperm_kernel<bf16><<<xperm_blocks(c.k, h_xa), 256>>>(x, m, c.k, c.k, h_xa, g_xp);
      xap<<<grid, 128>>>(params(cp, m, false, 0));
      xperm_kernel<bf16><<<xperm_blocks(c.k, h_t), 256>>>(x, m, c.k, c.k, h_t, g_xp);
      tp<<<grid, 128>>>(params(cp, m, false, 0));
    };
    if (m == 1)
      both(xa_kernel<bf16, 5120, 4, 4, 1>, t_kernel<bf16, 5120, 4, 4, 1>, xap_kernel<bf16, 5120, 4, 4, 1>,
           tp_kernel<bf16, 5120, 4, 4, 1>, 2, 1);
    else if (m == 16)
      both(xa_kernel<bf16, 5120, 4, 4, 1>, t_kernel<bf16, 5120, 4, 4, 2>, xap_kernel<bf16, 5120, 4, 4, 1>,
           tp_kernel<bf16, 5120, 4, 4, 2>, 2, 2);
    else
      both(xa_kernel<bf16, 5120, 4, 4, 2>, t_kernel<bf16, 5120, 4, 4, 4>, xap_kernel<bf16, 5120, 4, 4, 2>,
           tp_kernel<bf16, 5120, 4, 4, 4>, 4, 4);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
  }
  free_case(c);
}

}  // namespace

int main(int argc, char** argv) {
  const size_t l2 = start();
  const bool quick = argc > 1;
  CK(cudaMalloc(&g_xp, size_t(32) * kStreamMaxK * 2));
  if (argc > 1 && std::string(argv[1]) == "ncu") {
    ncu_launches(l2);
    return 0;
  }
  // the tables' variants (tables/sm_90/nvfp4_skinny*.json)
  shape<5120, 4, 4, Rows>(34816, l2, {1, 8, 9, 16, 17, 24, 25, 32}, true);
  shape<5120, 4, 4, Rows>(16384, l2, {1, 16, 24, 32}, false);
  if (quick) return 0;
  shape<5120, 4, 4, Rows>(17408, l2, {1, 16, 32}, false);
  shape<5120, 4, 4, Rows>(12288, l2, {1, 16, 32}, false);
  shape<5120, 4, 4, Rows>(6144, l2, {1, 16, 32}, false);
  return 0;
}
