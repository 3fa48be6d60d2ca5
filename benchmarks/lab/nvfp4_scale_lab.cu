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
#include "nvfp4_ab.cuh"

using namespace nvfp4_ab;

namespace {

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
        stream::x_word(xc, xw, xr, d, q);
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

template <typename T, int K, int KS, int NT, int NX>
void run_sc(Case& c, int m, bool half, std::vector<uint8_t>& ref) {
  char label[64];
  std::snprintf(label, sizeof label, "scales x3 ks%d nt%d nx%d", KS, NT, NX);
  run(c, m, half, sc_kernel<T, K, KS, NT, NX>, unsigned(c.n / (8 * NT)),
      QWEN38_NVFP4_STREAM_THREADS(KS, NT, (NX > 2 ? 2 : 1)), 0, ref, label);
}

template <int K, int KS, int NT, int NX>
struct Rows {
  static void run(Case& c, int m, bool half) {
    std::vector<uint8_t> ref;
    auto all = [&](auto tag) {
      using T = decltype(tag);
      run_xa_and_t<T, K, KS, NT, NX>(c, m, half, ref);
      if constexpr (!kStreamClusters<K, KS>) run_sc<T, K, KS, NT, NX>(c, m, half, ref);
    };
    if (half) all(__half{});
    else all(bf16{});
  }
};

}  // namespace

int main(int argc, char** argv) {
  const size_t l2 = start();
  const bool quick = argc > 1;
  // the tables' variants (tables/sm_90/nvfp4_skinny*.json)
  shape<5120, 4, 4, Rows>(34816, l2, {1, 4, 8, 16, 24, 32}, true);
  shape<5120, 4, 4, Rows>(16384, l2, {1, 8, 16}, false);
  if (quick) return 0;
  shape<5120, 4, 4, Rows>(12288, l2, {1, 8, 16, 32}, false);
  shape<5120, 4, 4, Rows>(6144, l2, {1, 16}, false);
  return 0;
}
