// A/B lab for fp8_block_linear at 1..16 rows: the register-stream kernel (fp8_stream_kernel.cuh)
// against a candidate fed by tensor-map copies into per-warp shared-memory rings, with the same
// per-thread words, k split and arithmetic (so the same bits, checked against the skinny kernel).
// Why: the FP8 stream kernel holds one step of weights in registers at 4 tiles a warp (~48 KB in
// flight an SM) and reaches 68% of the read ceiling at 1 row, while its issue is ~16 us of a ~39 us
// read on 34816x5120; the NVFP4 skinny lab (skinny_lab_9_tmap.txt) streamed a feed of tensor-map
// boxes at 96.6% of the ceiling with no registers held. The NVFP4 kernel is issue-bound and lost
// with that feed; the FP8 one is not (half the issue a byte), so the feed may be what it lacks.
//
//   nvcc -std=c++20 -O3 -arch=sm_90a --expt-relaxed-constexpr -diag-suppress 128,177 -I csrc \
//        benchmarks/lab/fp8_lab.cu -o fp8_lab && ./fp8_lab
//
// Candidate: warp w of a block takes the stream kernel's contiguous steps [w S / KS, (w+1) S / KS)
// of the block's 8 NT rows. Its ring holds D stages of C steps; a step is one box of the weight
// tensor (8 NT rows x 128 bytes, 128-byte swizzle: 16-byte chunk j of row r sits at chunk j ^ (r % 8),
// so the 8 lanes of an LDS.128 phase - rows g, g+1, chunks 2t or 2t+1 - hit 8 bank groups). Lane 0
// arms the stage's mbarrier with the stage's bytes and issues its C boxes; the warp waits on the
// barrier at the stage's first step and refills the stage after its last. Scales and activations as
// the stream kernel. Method as the benchmarks: CUDA graphs over weight copies of more than 3x L2,
// median of replays, the streaming-read ceiling in the same process.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "lab_common.cuh"
#include "common/cp_async.cuh"
#include "common/launch.cuh"
#include "gemm/fp8_block_linear_kernel.cuh"
#include "gemm/fp8_stream_kernel.cuh"

using namespace qwen38;
using namespace qwen38::gemm;
using bf16 = __nv_bfloat16;

namespace {

using lab::lds128;
using lab::mbar_expect;
using lab::mbar_init;
using lab::mbar_wait;
using lab::mix;
using lab::read_kernel;
using lab::tensor_copy;
using lab::time_graph;

// kind 0: e4m3 bytes, never NaN (0x7f / 0xff -> 0x7e / 0xfe); 1: fp32 scales in [2^-12, 2^-8);
// 2: bf16 activations in [-2, 2); 3: zeros
__global__ void fill_kernel(uint8_t* p, size_t n, uint32_t seed, int kind) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint32_t h = mix(i, seed);
    uint8_t v = uint8_t(h);
    if (kind == 0 && (v & 0x7f) == 0x7f) v ^= 1;
    if (kind == 1) {
      const uint32_t word = mix(i / 4, seed);
      const float f = ldexpf(1.0f + float(word % 1024) / 1024.0f, -12 + int((word >> 10) % 4));
      v = reinterpret_cast<const uint8_t*>(&f)[i % 4];
    }
    if (kind == 2) v = (i & 1) ? uint8_t((h & 0x80u) | 0x3fu) : uint8_t(h);
    if (kind == 3) v = 0;
    p[i] = v;
  }
}

void* dalloc(size_t bytes, uint32_t seed, int kind) {
  void* p = nullptr;
  CK(cudaMalloc(&p, bytes));
  fill_kernel<<<1024, 256>>>(static_cast<uint8_t*>(p), bytes, seed, kind);
  CK(cudaGetLastError());
  return p;
}

// ---- the candidate ------------------------------------------------------------------------------
template <int KS, int NT, int C, int D>
constexpr int tmap_smem() { return KS * D * C * 8 * NT * 128 + 1024; }  // + the 1024-byte alignment

// MODE 0: waits + LDS only (XOR-folded); 2: the whole kernel. bf16 x, 1..16 rows (MT 1).
template <int MODE, int K, int KS, int NT, int C, int D, int MINB>
__global__ void __launch_bounds__(32 * KS, MINB) tmap_kernel(const Fp8BlockParams p, const __grid_constant__ CUtensorMap map) {
  using T = bf16;
  constexpr int kSteps = K / kStepK, kSW = kSteps / KS;
  constexpr int kRows = 8 * NT, kBox = kRows * 128, kStage = C * kBox;
  constexpr int kChunks = (kSW + C - 1) / C;
  constexpr int kH = 2;
  static_assert(K % (kStepK * KS) == 0 && kRows <= 32 && kSW >= 2);
  extern __shared__ __align__(1024) uint8_t ring_smem[];
  __shared__ float partial[KS][16][8];
  __shared__ __align__(8) uint64_t bars[KS][D];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t nb = int64_t(blockIdx.x) * kRows;
  const int s0 = warp * kSW;
  const uint32_t ring = ((smem_addr(ring_smem) + 1023u) & ~1023u) + uint32_t(warp * D * kStage);
  const uint32_t bar0 = smem_addr(&bars[warp][0]);
  if (lane == 0)
    for (int d = 0; d < D; ++d) mbar_init(bar0 + 8 * d, 1);
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncwarp();
  auto issue = [&](int j) {  // chunk j (C steps, fewer at the end) into stage j % D
    if (lane == 0) {
      const int st = j % D;
      const int steps = kSW - j * C < C ? kSW - j * C : C;
      mbar_expect(bar0 + 8 * st, uint32_t(steps * kBox));
      for (int c = 0; c < steps; ++c)
        tensor_copy(ring + st * kStage + c * kBox, &map, kStepK * (s0 + j * C + c), int(nb), bar0 + 8 * st);
    }
  };
#pragma unroll
  for (int j = 0; j < D && j < kChunks; ++j) issue(j);

  const float* scp[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) scp[nt] = p.scale + ((nb + 8 * nt) / 128) * kSteps + s0;
  const T* xr[kH];
  stream::activation_rows(xr, p.x, p.m, p.x_stride, g, kStepK * s0 + 32 * t);
  float sb[2][NT];
#pragma unroll
  for (int d = 0; d < 2; ++d)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) sb[d][nt] = __ldg(scp[nt] + d);
  pdl_wait();
  pdl_allow();

  float acc[NT][4];
  stream::zero_fill(acc);
  uint32_t fold = 0;
  // this lane's two 16-byte chunks (2t, 2t + 1) of row (8 nt + g) of a box, swizzled
  const uint32_t off0 = uint32_t(g * 128 + (((2 * t) ^ g) << 4)), off1 = uint32_t(g * 128 + (((2 * t + 1) ^ g) << 4));
  for (int s = 0; s < kSW; s += 2) {
#pragma unroll
    for (int d = 0; d < 2; ++d) {
      const int ss = s + d;
      if (kSW % 2 != 0 && ss >= kSW) break;
      const int j = ss / C, c = ss - j * C, st = j % D;
      if (c == 0) mbar_wait(bar0 + 8 * st, (j / D) & 1);
      const uint32_t box = ring + st * kStage + c * kBox;
      uint4 wq[NT][2];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        wq[nt][0] = lds128(box + nt * 8 * 128 + off0);
        wq[nt][1] = lds128(box + nt * 8 * 128 + off1);
      }
      if constexpr (MODE == 0) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
          fold ^= wq[nt][0].x ^ wq[nt][0].y ^ wq[nt][0].z ^ wq[nt][0].w ^ wq[nt][1].x ^ wq[nt][1].w;
      } else {
        float sc[NT];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) sc[nt] = sb[d][nt];
        if (ss + 2 < kSW) {
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) sb[d][nt] = __ldg(scp[nt] + ss + 2);
        }
        float blk[NT][1][4];
        stream::zero_fill(blk);
        uint4 xn[kH];
#pragma unroll
        for (int h = 0; h < kH; ++h) xn[h] = stream::load_x(xr[h] + kStepK * ss);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          uint4 xc[kH];
#pragma unroll
          for (int h = 0; h < kH; ++h) xc[h] = xn[h];
          if (q < 3) {
#pragma unroll
            for (int h = 0; h < kH; ++h) xn[h] = stream::load_x(xr[h] + kStepK * ss + 8 * (q + 1));
          }
          uint32_t af[1][2][4];
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            af[0][0][hh] = xc[hh].x;
            af[0][0][hh + 2] = xc[hh].y;
            af[0][1][hh] = xc[hh].z;
            af[0][1][hh + 2] = xc[hh].w;
          }
          fp8_word_mmas<T, NT, 1>(blk, af, wq, q);
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[nt][i] = __fadd_rn(acc[nt][i], __fmul_rn(blk[nt][0][i], sc[nt]));
      }
      if (c == C - 1 || ss == kSW - 1) {
        __syncwarp();
        if (j + D < kChunks) issue(j + D);
      }
    }
  }
  if constexpr (MODE == 0) {
    if (fold == 0x12345678u) static_cast<bf16*>(p.y)[0] = bf16(0.f);
  } else {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const float(&a1)[1][4] = reinterpret_cast<const float(&)[1][4]>(acc[nt]);
      reduce_and_store<1, KS>(partial, a1, warp, g, t, 1.0f, 1.0f, nullptr, 0, p.y, 0, p.m, p.n, nb + 8 * nt);
    }
  }
}

// ---- cases --------------------------------------------------------------------------------------
struct Case {
  int n, k, m, copies;
  std::vector<uint8_t*> w;
  std::vector<float*> s;
  bf16* x;
  bf16* y;
  double bytes() const { return double(n) * k + 4.0 * ((n + 127) / 128) * ((k + 127) / 128) + 2.0 * m * (k + n); }
};

double g_ceiling = 0;

Case make_case(int n, int k, int m, size_t l2) {
  Case c{n, k, m, 0, {}, {}, nullptr, nullptr};
  const size_t per = size_t(n) * k;
  c.copies = int(std::max<size_t>(2, (3 * l2 + per - 1) / per));
  const size_t sbytes = size_t((n + 127) / 128) * ((k + 127) / 128) * 4;
  for (int i = 0; i < c.copies; ++i) {
    c.w.push_back(static_cast<uint8_t*>(dalloc(per, 17 + i, 0)));
    c.s.push_back(static_cast<float*>(dalloc(sbytes, 71 + i, 1)));
  }
  c.x = static_cast<bf16*>(dalloc(size_t(16) * k * 2, 5, 2));
  c.y = static_cast<bf16*>(dalloc(size_t(16) * n * 2, 0, 3));
  CK(cudaDeviceSynchronize());
  return c;
}
void free_case(Case& c) {
  for (auto p : c.w) CK(cudaFree(p));
  for (auto p : c.s) CK(cudaFree(p));
  CK(cudaFree(c.x));
  CK(cudaFree(c.y));
}
std::vector<uint8_t> read_y(const Case& c) {
  std::vector<uint8_t> out(size_t(c.m) * c.n * 2);
  CK(cudaMemcpy(out.data(), c.y, out.size(), cudaMemcpyDeviceToHost));
  return out;
}
Fp8BlockParams params(const Case& c, int i) {
  Fp8BlockParams p;
  p.x = c.x;
  p.w = c.w[i % c.copies];
  p.scale = c.s[i % c.copies];
  p.y = c.y;
  p.m = c.m;
  p.n = c.n;
  p.k = c.k;
  p.x_stride = c.k;
  p.out = int(Out::kBF16);
  return p;
}
void report(const Case& c, const char* label, float us, int regs, int per_sm, int threads, long long grid,
            const char* bits) {
  const double gbs = c.bytes() / (us * 1e3);
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::printf("  %-44s %8.2f us %6.0f GB/s %5.1f%%  regs %3d  %2d blk/SM x %3d thr  grid %5lld (%.2f waves)  %s\n",
              label, us, gbs, 100.0 * gbs / g_ceiling, regs, per_sm, threads, grid,
              double(grid) / (double(sms) * std::max(per_sm, 1)), bits);
}

// the skinny kernel (the bits reference) and the stream kernel, as the extension builds them
template <int KS, int NT>
void run_ref(Case& c, std::vector<uint8_t>& ref) {
  auto skinny = fp8_block_skinny_kernel<bf16, 1, KS, NT>;
  auto stream = fp8_stream_kernel<bf16, 5120, KS, NT, 1>;
  const unsigned grid = unsigned(c.n / (8 * NT));
  for (int which = 0; which < 2; ++which) {
    auto kernel = which == 0 ? skinny : stream;
    if (which == 1 && c.k != 5120) return;
    CK(cudaMemset(c.y, 0, size_t(c.m) * c.n * 2));
    auto launch = [&](int i, cudaStream_t s) { kernel<<<grid, 32 * KS, 0, s>>>(params(c, i)); };
    const float us = time_graph(std::max(4 * c.copies, 24), launch);
    CK(cudaGetLastError());
    launch(0, 0);
    CK(cudaDeviceSynchronize());
    const char* bits = "reference";
    if (which == 0) ref = read_y(c);
    else bits = read_y(c) == ref ? "same bits" : "BITS DIFFER";
    int per_sm = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 32 * KS, 0));
    cudaFuncAttributes fa{};
    CK(cudaFuncGetAttributes(&fa, kernel));
    char label[64];
    std::snprintf(label, sizeof label, "%s ks%d nt%d", which == 0 ? "skinny" : "stream (extension)", KS, NT);
    report(c, label, us, fa.numRegs, per_sm, 32 * KS, grid, bits);
  }
}

// the weight tensor [N, K] bytes, boxes of rows x 128 bytes, 128-byte swizzle
CUtensorMap weight_map(const uint8_t* w, int n, int k, int rows) {
  return lab::tensor_map_2d(w, CU_TENSOR_MAP_DATA_TYPE_UINT8, n, k, k, rows, 128, CU_TENSOR_MAP_SWIZZLE_128B);
}

template <int MODE, int K, int KS, int NT, int C, int D, int MINB>
void run_tmap(Case& c, const std::vector<uint8_t>& ref) {
  if (c.k != K || c.n % (8 * NT) != 0 || c.m > 16) return;
  auto kernel = tmap_kernel<MODE, K, KS, NT, C, D, MINB>;
  constexpr int smem = tmap_smem<KS, NT, C, D>();
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  std::vector<CUtensorMap> maps;
  for (int i = 0; i < c.copies; ++i) maps.push_back(weight_map(c.w[i], c.n, c.k, 8 * NT));
  const unsigned grid = unsigned(c.n / (8 * NT));
  CK(cudaMemset(c.y, 0, size_t(c.m) * c.n * 2));
  auto launch = [&](int i, cudaStream_t s) { kernel<<<grid, 32 * KS, smem, s>>>(params(c, i), maps[i % c.copies]); };
  const float us = time_graph(std::max(4 * c.copies, 24), launch);
  CK(cudaGetLastError());
  const char* bits = "-";
  if (MODE == 2) {
    launch(0, 0);
    CK(cudaDeviceSynchronize());
    bits = read_y(c) == ref ? "same bits" : "BITS DIFFER";
  }
  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 32 * KS, smem));
  cudaFuncAttributes fa{};
  CK(cudaFuncGetAttributes(&fa, kernel));
  char label[96];
  std::snprintf(label, sizeof label, "tmap %s ks%d nt%d C%d D%d (%d KB) minb%d", MODE == 0 ? "loads" : "full", KS, NT,
                C, D, smem >> 10, MINB);
  report(c, label, us, fa.numRegs, per_sm, 32 * KS, grid, bits);
}

template <typename F>
void with_case(int n, int k, int m, size_t l2, F&& body) {
  Case c = make_case(n, k, m, l2);
  std::printf("%dx%d, %d rows (%d copies)\n", n, k, m, c.copies);
  std::vector<uint8_t> ref;
  body(c, ref);
  free_case(c);
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  const size_t l2 = size_t(prop.l2CacheSize);
  std::printf("device %s, %d SMs, L2 %zu MB\n", prop.name, prop.multiProcessorCount, l2 >> 20);
  {
    const size_t rb = size_t(2) << 30;
    void* big = dalloc(rb, 3, 0);
    unsigned* sink = nullptr;
    CK(cudaMalloc(&sink, 4));
    const float rus = time_graph(6, [&](int, cudaStream_t s) {
      read_kernel<<<prop.multiProcessorCount * 8, 512, 0, s>>>(static_cast<const uint4*>(big), rb / 16, sink);
    });
    g_ceiling = double(rb) / (rus * 1e3);
    std::printf("read ceiling %.0f GB/s\n", g_ceiling);
    CK(cudaFree(big));
    CK(cudaFree(sink));
  }
  // <MODE, K, KS, NT, C (steps a stage), D (stages), MINB>; the tables' variant for K 5120: ks4 nt4
  for (int n : {34816, 12288})
    for (int m : {1, 16})
      with_case(n, 5120, m, l2, [&](Case& c, std::vector<uint8_t>& ref) {
        run_ref<4, 4>(c, ref);
        run_tmap<0, 5120, 4, 4, 2, 2, 1>(c, ref);
        run_tmap<0, 5120, 4, 4, 1, 4, 1>(c, ref);
        run_tmap<2, 5120, 4, 4, 2, 2, 2>(c, ref);
        run_tmap<2, 5120, 4, 4, 1, 3, 3>(c, ref);
        run_tmap<2, 5120, 4, 4, 1, 4, 2>(c, ref);
        run_tmap<2, 5120, 4, 4, 2, 3, 1>(c, ref);
        run_tmap<2, 5120, 4, 2, 2, 2, 3>(c, ref);
        run_tmap<2, 5120, 4, 2, 2, 4, 2>(c, ref);
      });
  return 0;
}
