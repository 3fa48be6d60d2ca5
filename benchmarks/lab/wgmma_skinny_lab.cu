// Lab (sm_90a only): the NVFP4 skinny GEMM with the decoded weights as wgmma's register A operand
// (64 weight rows a warpgroup, the stream kernel's decode and k permutation) and the activations as
// its shared-memory B operand (N = 16 for 1..16 rows, 32 for 17..32). The question: is it faster
// than the register-stream kernel (nvfp4_stream_kernel.cuh: mma.sync, activations loaded and
// re-paired by every warp, a second m16 tile at 17..32 rows), and does it write its bits?
// (wgmma_bits_lab.cu found wgmma m64nNk16 accumulating like mma.sync m16n8k16 for the same A and
// B; here the weights move from mma.sync's B to wgmma's A, so the bits check also answers whether
// the operand roles matter.)
// Answer (H200, session 14, benchmarks/results/h200/wgmma_skinny_lab_14_v1..v3.txt): the same bits
// everywhere, and slower in every form: 34816x5120 at 1 / 16 / 32 rows 63-73 / 72-83 / 133-174 us
// against the stream kernel's 42 / 51 / 89.
//
// One CTA is one warpgroup (128 threads) and one k range: the KS CTAs of an output tile (the
// stream kernel's KS warps, the same contiguous step ranges) form a thread-block cluster and sum
// their partials in the first CTA's shared memory in k-range order, like reduce_and_store. The
// clusters are persistent (as many as fit; v1 / v2 launched one a tile: wgmma_skinny_lab_14_v1 /
// _v2.txt): a CTA stages its k range's activations once and walks tiles c, c + clusters, ... Thread
// (w, g, t) of the warpgroup holds weight rows n0 + 64 mb + 16 w + g + 8 h (h = 0, 1: the A
// fragment's rows g and g + 8; mb < MB blocks of 64 rows), 16 bytes of each a step: the stream
// kernel's tiles g and g + 8. Word q of a row decodes into pairs (i, i + 4) (nvfp4::decode_word);
// k16 block (q, r) takes pairs 2r (slots 2t, 2t+1) and 2r + 1 (slots 2t+8, 2t+9): the stream
// kernel's mma 2q + r. The activations of the CTA's whole k range are staged once, before the main
// loop, in the same permuted order: block (s, q, r) is a K-major 16 x N tile of 8x8 core matrices
// (leading byte offset 128 between the two k halves, stride 256 between n blocks; no swizzle), row
// n of its first core matrix = x[n][k0 + 32 t + 8 q + 2 r], x[n][... + 4] for t = 0..3 (the
// re-paired word q of each of the four 32-k chunks), of the second the same at 2 r + 1.
// The main loop: weights kD = 2 steps ahead in registers (as the stream kernel); per step: decode
// all four words into one of two A buffers (wgmma.wait_group 1 first: the wgmmas that read that
// buffer a step ago are done), wgmma.fence, the 8 x MB wgmmas of the step, commit. (v1, one buffer
// a word and a wait a word: wgmma_skinny_lab_14_v1.txt.)
//
//   nvcc -std=c++20 -O3 -gencode arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -I csrc \
//       benchmarks/lab/wgmma_skinny_lab.cu -o build/lab/wgmma_skinny_lab
//   build/lab/wgmma_skinny_lab
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/cluster.cuh"
#include "common/launch.cuh"
#include "gemm/nvfp4_stream_kernel.cuh"
#include "lab_common.cuh"

using namespace qwen38;
using namespace qwen38::gemm;

namespace {

constexpr int kK = 5120;
constexpr int kStepsAll = kK / kStepK;  // 40

__host__ __device__ constexpr int stage_bytes(int n) { return 8 * 32 * n; }  // one step: 8 k16 blocks of 16 x N bf16

__device__ __forceinline__ uint64_t smem_desc(uint32_t addr) {
  return uint64_t((addr >> 4) & 0x3FFF) | (uint64_t(128 >> 4) << 16) | (uint64_t(256 >> 4) << 32);
}

template <int N>
__device__ __forceinline__ void wgmma(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db);
template <>
__device__ __forceinline__ void wgmma<16>(float (&d)[8], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %13, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, p, 1, "
      "1, 0;\n}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
template <>
__device__ __forceinline__ void wgmma<32>(float (&d)[16], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %21, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, "
      "{%16,%17,%18,%19}, %20, p, 1, 1, 0;\n}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int P>
__device__ __forceinline__ void wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(P) : "memory");
}
// the accumulators are written by the asynchronous wgmmas: keep the compiler from moving their uses
template <int N>
__device__ __forceinline__ void touch(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// KS: k ranges (CTAs a cluster); MB: 64-row blocks a warpgroup; N: 16 (1..16 rows) or 32.
template <int KS, int MB, int N>
__global__ void __launch_bounds__(128, 1) wg_kernel(const Nvfp4Params p) {
  using T = __nv_bfloat16;
  using D = nvfp4::PairDecode<T>;
  constexpr int kSW = kStepsAll / KS, kD = 2;
  constexpr int kRowB = kK / 2, kRowS = kK / 16;
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t xs = uint32_t(__cvta_generic_to_shared(smem));

  const int rank = cluster_pos().rank;  // the k range
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int s0 = rank * kSW;
  // persistent: cluster c takes tiles c, c + clusters, ... (the staged activations serve them all)
  const int64_t tiles = p.n / (64 * MB), clusters = gridDim.x / KS;
  int64_t tile = blockIdx.x / KS;
  auto roff = [](int mb, int h) { return int64_t(64 * mb + 8 * h); };
  constexpr int kPart = MB * 64 * N;  // floats of one CTA's partial
  const uint32_t part_at = xs + stage_bytes(N) * kSW;

  uint4 wb[kD][MB][2];
  uint32_t sb[kD][MB][2];
  const uint8_t* wp;
  const uint8_t* sp;
  auto first_steps = [&]() {  // rows n0 + 64 mb + 16 w + g + 8 h
    const int64_t n0 = tile * 64 * MB;
    wp = p.w + (n0 + 16 * w + g) * kRowB + 64 * s0 + 16 * t;
    sp = p.scale + (n0 + 16 * w + g) * kRowS + 8 * s0 + 2 * t;
#pragma unroll
    for (int d = 0; d < kD; ++d)
#pragma unroll
      for (int mb = 0; mb < MB; ++mb)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          wb[d][mb][h] = stream::load_w(wp + roff(mb, h) * kRowB + 64 * d);
          sb[d][mb][h] = stream::load_scale2(sp + roff(mb, h) * kRowS + 8 * d);
        }
  };
  if (tile < tiles) first_steps();
  pdl_wait();

  // stage the activations of steps s0 .. s0 + kSW - 1 (rows at or past m: zeros), kU steps of
  // loads in flight at a time (8 words a thread) before their stores
  {
    const T* x0 = static_cast<const T*>(p.x);
    constexpr int kWords = N / 8, kU = 8 / kWords;
#pragma unroll 1
    for (int sc = 0; sc < kSW; sc += kU) {
      uint4 v[kU][kWords];
#pragma unroll
      for (int u = 0; u < kU; ++u)
#pragma unroll
        for (int j = 0; j < kWords; ++j) {
          const int idx = w + 4 * j, nb = idx % kWords, q = idx / kWords, n = 8 * nb + lane / 4;
          v[u][j] = make_uint4(0, 0, 0, 0);
          if (n < p.m && sc + u < kSW)
            v[u][j] = stream::load_x(x0 + n * p.x_stride + kStepK * (s0 + sc + u) + 32 * t + 8 * q);
        }
#pragma unroll
      for (int u = 0; u < kU; ++u)
#pragma unroll
        for (int j = 0; j < kWords; ++j) {
          if (sc + u >= kSW) continue;
          const int idx = w + 4 * j, nb = idx % kWords, q = idx / kWords, n = 8 * nb + lane / 4;
          const uint4 x4 = v[u][j];
          const uint32_t pr[4] = {__byte_perm(x4.x, x4.z, 0x5410), __byte_perm(x4.x, x4.z, 0x7632),
                                  __byte_perm(x4.y, x4.w, 0x5410), __byte_perm(x4.y, x4.w, 0x7632)};
#pragma unroll
          for (int r = 0; r < 2; ++r)
#pragma unroll
            for (int kb = 0; kb < 2; ++kb) {
              const uint32_t a = xs + (sc + u) * stage_bytes(N) + (2 * q + r) * 32 * N + kb * 128 + nb * 256 +
                                 (n % 8) * 16 + t * 4;
              asm volatile("st.shared.u32 [%0], %1;" ::"r"(a), "r"(pr[2 * r + kb]) : "memory");
            }
        }
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
  }

#pragma unroll 1
  for (; tile < tiles; tile += clusters) {
  const int64_t n0 = tile * 64 * MB;
  float acc[MB][N / 2];
  zero_fill(acc);
  uint32_t abuf[kD][4][MB][2][4];  // [step parity][word][mb][r][fragment]

#pragma unroll 1
  for (int s = 0; s < kSW; s += kD) {
#pragma unroll
    for (int d = 0; d < kD; ++d) {
      if (kSW % kD != 0 && s + d >= kSW) break;
      const int ss = s + d;
      uint4 wq[MB][2];
      uint32_t sc[MB][2];
#pragma unroll
      for (int mb = 0; mb < MB; ++mb)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          wq[mb][h] = wb[d][mb][h];
          sc[mb][h] = sb[d][mb][h];
        }
      if (ss + kD < kSW) {
#pragma unroll
        for (int mb = 0; mb < MB; ++mb)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            wb[d][mb][h] = stream::load_w(wp + roff(mb, h) * kRowB + 64 * (ss + kD));
            sb[d][mb][h] = stream::load_scale2(sp + roff(mb, h) * kRowS + 8 * (ss + kD));
          }
      }
      typename D::T2 s2[MB][2][2];
#pragma unroll
      for (int mb = 0; mb < MB; ++mb)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const __half2 sh = nvfp4::e4m3x2_to_h2(uint16_t(sc[mb][h]));
          s2[mb][h][0] = D::scale(__low2half(sh));
          s2[mb][h][1] = D::scale(__high2half(sh));
        }
      // the whole step's A fragments into buffer d (the wgmmas of the step before last read it:
      // wait until at most one group, the last step's, is pending), then its 8 x MB wgmmas
      wg_wait<1>();
#pragma unroll
      for (int q = 0; q < 4; ++q)
#pragma unroll
        for (int mb = 0; mb < MB; ++mb) {
          uint32_t b[2][4];
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const uint32_t wr[4] = {wq[mb][h].x, wq[mb][h].y, wq[mb][h].z, wq[mb][h].w};
            nvfp4::decode_word<T>(b[h], wr[q], s2[mb][h][q < 2 ? 0 : 1]);
          }
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            abuf[d][q][mb][r][0] = b[0][2 * r];      // row g, slots 2t, 2t+1
            abuf[d][q][mb][r][1] = b[1][2 * r];      // row g + 8
            abuf[d][q][mb][r][2] = b[0][2 * r + 1];  // row g, slots 2t+8, 2t+9
            abuf[d][q][mb][r][3] = b[1][2 * r + 1];  // row g + 8
          }
        }
      wg_fence();
#pragma unroll
      for (int q = 0; q < 4; ++q)
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
          for (int mb = 0; mb < MB; ++mb)
            wgmma<N>(acc[mb], abuf[d][q][mb][r], smem_desc(xs + ss * stage_bytes(N) + (2 * q + r) * 32 * N));
      wg_commit();
    }
  }
  wg_wait<0>();
#pragma unroll
  for (int mb = 0; mb < MB; ++mb) touch(acc[mb]);

  if (tile + clusters < tiles) {  // the next tile's first weight steps go out now
    tile += clusters;
    first_steps();
    tile -= clusters;
  }
  // partials of the cluster's KS k ranges into the first CTA's partial buffer, summed in rank
  // order (the first barrier: the first CTA has finished reading the last tile's partials)
  cluster_arrive_release();
  cluster_wait();
  const uint32_t base = cluster_map(smem, 0) + (part_at - xs);
#pragma unroll
  for (int mb = 0; mb < MB; ++mb)
#pragma unroll
    for (int j = 0; j < N / 8; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int row = 64 * mb + 16 * w + g + 8 * (i / 2), col = 8 * j + 2 * t + i % 2;
        cluster_store(base + 4u * uint32_t(rank * kPart + row * N + col), acc[mb][4 * j + i]);
      }
  cluster_arrive_release();
  cluster_wait();
  if (rank == 0) {
    const float* part = reinterpret_cast<const float*>(smem + (part_at - xs));
    const float gscale = *p.global;
    for (int idx = threadIdx.x; idx < kPart; idx += 128) {
      const int row = idx / N, col = idx % N;
      if (col >= p.m) continue;
      float sum = 0.0f;
#pragma unroll
      for (int k = 0; k < KS; ++k) sum += part[k * kPart + idx];
      const float v = __fmul_rn(__fmul_rn(sum, nvfp4::kPairUnscale), gscale);
      static_cast<T*>(p.y)[int64_t(col) * p.n + n0 + row] = __float2bfloat16_rn(v);
    }
  }
  }  // tile
}

template <int KS, int MB, int N>
constexpr int wg_smem() {
  return stage_bytes(N) * (kStepsAll / KS) + KS * MB * 64 * N * 4;  // the staged activations, the partials
}

struct Weights : lab::Nvfp4Copies {
  float* global;
  int copies;
};

Nvfp4Params params(const Weights& wt, int c, const __nv_bfloat16* x, __nv_bfloat16* y, int64_t m, int64_t n) {
  Nvfp4Params p;
  p.x = x;
  p.w = wt.w[c];
  p.scale = wt.s[c];
  p.global = wt.global;
  p.y = y;
  p.m = m;
  p.n = n;
  p.k = kK;
  p.x_stride = kK;
  p.out = 0;
  return p;
}

// calls == 0: one launch (copy 0), checked and waited for; else us per call of a graph of `calls`
// launches rotating over the weight copies

template <int KS, int MB, int N>
float run_wg(const Weights& wt, const __nv_bfloat16* x, __nv_bfloat16* y, int64_t m, int64_t n, int calls) {
  auto kernel = wg_kernel<KS, MB, N>;
  constexpr int kSmem = wg_smem<KS, MB, N>();
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  // persistent: as many clusters as fit at once, at most one a tile
  int fit = 0;
  CK(max_active_clusters(kernel, dim3(unsigned(n / (64 * MB) * KS)), dim3(128), kSmem, KS, &fit));
  const dim3 grid(unsigned(std::min<int64_t>(fit, n / (64 * MB)) * KS));
  auto launch = [&](int c, cudaStream_t st) {
    const LaunchConfig cfg(grid, dim3(128), kSmem, st, false, KS);
    CK(cudaLaunchKernelEx(&cfg.cfg, kernel, params(wt, c, x, y, m, n)));
  };
  return lab::run_or_time(launch, wt.copies, calls);
}

// the product's register-stream kernel (bf16, K 5120) at k split KS and NT tiles a warp
template <int KS, int NT>
float run_stream(const Weights& wt, const __nv_bfloat16* x, __nv_bfloat16* y, int64_t m, int64_t n, int calls) {
  auto launch = [&](int c, cudaStream_t st) {
    const Nvfp4Params p = params(wt, c, x, y, m, n);
    if (m <= 16) nvfp4_stream_kernel<__nv_bfloat16, kK, KS, NT, 1><<<unsigned(n / (8 * NT)), 32 * KS, 0, st>>>(p);
    else nvfp4_stream_kernel<__nv_bfloat16, kK, KS, NT, 2><<<unsigned(n / (8 * NT)), 32 * KS, 0, st>>>(p);
  };
  return lab::run_or_time(launch, wt.copies, calls);
}

template <int KS, int MB, int N>
void compare(const char* name, const Weights& wt, const __nv_bfloat16* x, __nv_bfloat16* y, __nv_bfloat16* yref,
             int64_t n, const std::vector<int>& rows, double ceiling) {
  auto kernel = wg_kernel<KS, MB, N>;
  cudaFuncAttributes fa{};
  CK(cudaFuncGetAttributes(&fa, kernel));
  constexpr int kSmem = wg_smem<KS, MB, N>();
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  int bps = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, kernel, 128, kSmem));
  std::printf("  %-28s regs %3d, spill %zu B, smem %3d KB, %d CTAs/SM\n", name, fa.numRegs, size_t(fa.localSizeBytes),
              kSmem / 1024, bps);
  for (int m : rows) {
    if ((m <= 16) != (N == 16)) continue;
    CK(cudaMemset(y, 0xFF, size_t(32) * n * 2));
    CK(cudaMemset(yref, 0xEE, size_t(32) * n * 2));
    run_wg<KS, MB, N>(wt, x, y, m, n, 0);
    run_stream<KS, 4>(wt, x, yref, m, n, 0);
    std::vector<uint16_t> a(size_t(m) * n), b(size_t(m) * n);
    CK(cudaMemcpy(a.data(), y, a.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(b.data(), yref, b.size() * 2, cudaMemcpyDeviceToHost));
    size_t diff = 0;
    double worst = 0;  // relative to the output's scale: a layout error shows as O(1)
    for (size_t i = 0; i < a.size(); ++i) {
      diff += a[i] != b[i];
      float fa, fb;
      const uint32_t ua = uint32_t(a[i]) << 16, ub = uint32_t(b[i]) << 16;
      std::memcpy(&fa, &ua, 4);
      std::memcpy(&fb, &ub, 4);
      const double e = std::fabs(double(fa) - double(fb)) / (std::fabs(double(fb)) + 1e-2);
      worst = e > worst || std::isnan(e) ? e : worst;
    }
    const float us = run_wg<KS, MB, N>(wt, x, y, m, n, 4 * wt.copies);
    const float us_ref = run_stream<KS, 4>(wt, x, yref, m, n, 4 * wt.copies);
    const double bytes = double(n) * kK / 2 + double(n) * kK / 16 + double(m) * kK * 2 + double(m) * n * 2;
    std::printf("    rows %2d  wgmma %7.2f us (%5.1f%%)  stream ks%d nt4 %7.2f us (%5.1f%%)  bits: %zu of %zu differ"
                " (worst relative %.2g)\n",
                m, us, 100.0 * bytes / (us * 1e3) / ceiling, KS, us_ref, 100.0 * bytes / (us_ref * 1e3) / ceiling,
                diff, a.size(), worst);
  }
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  const size_t l2 = size_t(prop.l2CacheSize);
  const double ceiling = lab::read_ceiling_GBps();
  std::printf("device %s, %d SMs; read ceiling %.0f GB/s\n", prop.name, prop.multiProcessorCount, ceiling);
  __nv_bfloat16 *x, *y, *yref;
  CK(cudaMalloc(&x, size_t(32) * kK * 2));
  {
    std::vector<uint16_t> hx(size_t(32) * kK);
    uint32_t st = 12345;
    for (auto& v : hx) {
      st = st * 1664525u + 1013904223u;
      v = uint16_t(((st >> 16) & 0x803f) | 0x3f00);  // +-[0.5, 2): finite, nonzero
    }
    CK(cudaMemcpy(x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
  }
  const std::vector<int> rows = {1, 16, 17, 32};
  for (int64_t n : {34816, 12288}) {
    Weights wt;
    const size_t wbytes = size_t(n) * kK / 2, sbytes = size_t(n) * kK / 16;
    wt.copies = int(std::max<size_t>(2, 3 * l2 / (wbytes + sbytes) + 1));
    wt.alloc(n, kK, wt.copies);
    CK(cudaMalloc(&wt.global, 4));
    const float gs = 0.01f;
    CK(cudaMemcpy(wt.global, &gs, 4, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&y, size_t(32) * n * 2));
    CK(cudaMalloc(&yref, size_t(32) * n * 2));
    CK(cudaDeviceSynchronize());
    std::printf("%lldx%d (%d weight copies)\n", (long long)n, kK, wt.copies);
    compare<4, 1, 16>("k split 4, 64 rows, N 16", wt, x, y, yref, n, rows, ceiling);
    compare<4, 2, 16>("k split 4, 128 rows, N 16", wt, x, y, yref, n, rows, ceiling);
    compare<4, 1, 32>("k split 4, 64 rows, N 32", wt, x, y, yref, n, rows, ceiling);
    compare<4, 2, 32>("k split 4, 128 rows, N 32", wt, x, y, yref, n, rows, ceiling);
    compare<8, 2, 32>("k split 8, 128 rows, N 32", wt, x, y, yref, n, rows, ceiling);
    wt.release();
    CK(cudaFree(wt.global));
    CK(cudaFree(y));
    CK(cudaFree(yref));
  }
  return 0;
}
