// Lab (prepared in session 13, not run yet): the GDN step as a persistent kernel whose CTAs keep the
// next tiles' state in flight while they update the current one. The product step
// (csrc/gdn/gdn_kernel.cuh, Mode::kStep) is one CTA per (32-column block, v head, sequence): load
// the tile, update it, store it, so a CTA has state bytes in flight only during its load phase, and
// at B = 8 (1536 CTAs, 1.9 waves of 6 an SM) it reaches 66% of the read ceiling, 77% at B = 32
// (ncu, session 13: DRAM 28% / 58% busy, issue slots 28%, 0.62 eligible warps a scheduler). Here a
// CTA walks tiles t = blockIdx.x + i * gridDim.x with an NST-stage cp.async ring in shared memory:
// the state chunks (16 bytes, four whole 128-byte rows a warp copy), k, q and v of tiles i + 1 ..
// i + NST - 1 are in flight while tile i is updated; the slots and gates of later tiles are loaded
// a tile ahead. Variants: 6 CTAs an SM at 2 stages (80 registers: ptxas spills 56 bytes), 5 at 2
// (96: 24 bytes), 4 at 3 (128: none); shared memory NST x 17,056 bytes a CTA.
// The arithmetic is the product's (one column a thread, K in 4 segments of 32 in ascending order,
// the same roundings): every output and every state element must have the product's bits, checked
// here against the product kernel (gdn_kernel<kStep, bf16>) before timing.
// The question: at B = 4..32, how close to the read ceiling (product: 8.50 / 16.3 / 29.7 / 55.8 us
// at B = 4 / 8 / 16 / 32 in bench_gdn, session 13), and does B = 1 lose (product 4.56 us)?
//
//   nvcc -std=c++20 -O3 -arch=sm_90a --expt-relaxed-constexpr -I csrc benchmarks/lab/gdn_step_lab.cu -o build/lab/gdn_step_lab
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/cp_async.cuh"
#include "gdn/gdn_kernel.cuh"
#include "lab_common.cuh"

using namespace qwen38;
using namespace qwen38::gdn;

namespace {

constexpr int kTilesPerHead = kHeadV / kCols;            // 4 column blocks
constexpr int kChunks = kHeadK * kCols / 4;               // 16-byte state chunks of a tile (1024)
constexpr int kStateFloats = kHeadK * kCols + (kSegs - 1) * 8;  // bank-shifted (see tile_of)
constexpr int kStageBytes = kStateFloats * 4 + 2 * kHeadK * 2 + kCols * 2;  // state, k, q, v
static_assert(kChunks == 8 * kThreads && kStageBytes % 16 == 0, "8 state chunks a thread");

// Row r of the staged state starts at float r * 32 + (r / 32) * 8: a warp's column reads (8 columns
// x 4 segments) hit 32 banks; every 16-byte chunk stays aligned.
__device__ __forceinline__ int tile_of(int row, int c) { return row * kCols + c + (row / kSegLen) * 8; }

struct LabParams {
  const __nv_bfloat16* q;  // [B, 16, 128]
  const __nv_bfloat16* k;  // [B, 16, 128]
  const __nv_bfloat16* v;  // [B, 48, 128]
  const float* g;          // [B, 48]
  const __nv_bfloat16* beta;  // [B, 48]
  const int32_t* slots;    // [B], all valid and distinct here
  float* pool;             // [rows, 48, 128, 128]
  __nv_bfloat16* out;      // [B, 48, 128]
  int batch;
  float scale;
};

struct Tile {
  int b, h, cb;
};
__device__ __forceinline__ Tile tile_at_index(int t) {
  return Tile{t / (kVHeads * kTilesPerHead), (t / kTilesPerHead) % kVHeads, t % kTilesPerHead};
}

// The copies of tile t (its slot known) into stage buffer `buf`: 8 state chunks a thread, and k, q
// (16 chunks each) and v (4 chunks) by threads 0..35.
__device__ __forceinline__ void issue_tile(const LabParams& p, int t, int slot, unsigned char* buf, int tid) {
  const Tile T = tile_at_index(t);
  float* st = reinterpret_cast<float*>(buf);
  const float* src = p.pool + (int64_t(slot) * kVHeads + T.h) * int64_t(kHeadK * kHeadV) + T.cb * kCols;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int c = tid + kThreads * i, row = c / 8, q = c % 8;
    cp_async16(st + tile_of(row, 4 * q), src + int64_t(row) * kHeadV + 4 * q, 16);
  }
  __nv_bfloat16* kq = reinterpret_cast<__nv_bfloat16*>(buf + kStateFloats * 4);
  const int hq = T.h / (kVHeads / kQKHeads);
  if (tid < 16) {
    cp_async16(kq + 8 * tid, p.k + (int64_t(T.b) * kQKHeads + hq) * kHeadK + 8 * tid, 16);
  } else if (tid < 32) {
    cp_async16(kq + kHeadK + 8 * (tid - 16), p.q + (int64_t(T.b) * kQKHeads + hq) * kHeadK + 8 * (tid - 16), 16);
  } else if (tid < 36) {
    cp_async16(kq + 2 * kHeadK + 8 * (tid - 32),
               p.v + (int64_t(T.b) * kVHeads + T.h) * kHeadV + T.cb * kCols + 8 * (tid - 32), 16);
  }
}

// 8 staged bf16 of a vector (16 bytes of shared memory) as fp32
__device__ __forceinline__ void bf16x8(const __nv_bfloat16* p, float (&f)[8]) {
  const uint4 w = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat16* e = reinterpret_cast<const __nv_bfloat16*>(&w);
#pragma unroll
  for (int i = 0; i < 8; ++i) f[i] = __bfloat162float(e[i]);
}

// NST stages: tiles i + 1 .. i + NST - 1 of this CTA are in flight while tile i is updated.
template <int MINB, int NST>
__global__ void __launch_bounds__(kThreads, MINB) step_pipe(const LabParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, seg = lane & 3;
  const int lcol = warp * 8 + (lane >> 2);
  const int ntiles = p.batch * kVHeads * kTilesPerHead, G = int(gridDim.x);
  int t = int(blockIdx.x);
  if (t >= ntiles) return;
  auto slot_of = [&](int tt) { return tt < ntiles ? __ldg(p.slots + tile_at_index(tt).b) : 0; };
  auto gate_g = [&](int tt) {
    return tt < ntiles ? __ldg(p.g + tile_at_index(tt).b * kVHeads + tile_at_index(tt).h) : 0.f;
  };
  auto gate_b = [&](int tt) {
    return tt < ntiles ? __bfloat162float(p.beta[tile_at_index(tt).b * kVHeads + tile_at_index(tt).h]) : 0.f;
  };
  // prologue: this CTA's tiles 0 .. NST - 2 in flight (one commit group each, empty past the end)
#pragma unroll
  for (int s = 0; s < NST - 1; ++s) {
    if (t + s * G < ntiles) issue_tile(p, t + s * G, slot_of(t + s * G), smem + s * kStageBytes, tid);
    cp_async_commit();
  }
  int slot_next = slot_of(t + (NST - 1) * G);  // the slot of the next tile to copy
  float g_cur = gate_g(t), b_cur = gate_b(t);
  for (int i = 0; t < ntiles; ++i, t += G) {
    // loaded a tile ahead: the gates of the next tile, the slot of the copy after the next
    const float g_nx = gate_g(t + G), b_nx = gate_b(t + G);
    const int slot_after = slot_of(t + NST * G);
    cp_async_wait<NST - 2>();
    __syncthreads();  // tile i landed for every thread; tile i - 1's buffer is read by all
    if (t + (NST - 1) * G < ntiles)
      issue_tile(p, t + (NST - 1) * G, slot_next, smem + ((i + NST - 1) % NST) * kStageBytes, tid);
    cp_async_commit();
    slot_next = slot_after;
    const unsigned char* buf = smem + (i % NST) * kStageBytes;
    const float* st = reinterpret_cast<const float*>(buf);
    const __nv_bfloat16* kseg = reinterpret_cast<const __nv_bfloat16*>(buf + kStateFloats * 4) + seg * kSegLen;
    const __nv_bfloat16* qseg = kseg + kHeadK;
    auto kq8 = [&](int r0, float (&kx)[8], float (&qx)[8]) {  // rows r0 .. r0 + 7 of k's and q's segment
      bf16x8(kseg + r0, kx);
      bf16x8(qseg + r0, qx);
    };
    const float vv = __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(buf + kStateFloats * 4)[2 * kHeadK + lcol]);

    // ---- the step of tile t (the product's arithmetic: gdn_kernel.cuh normalize, run_tokens) ----
    float sk = 0.f, sq = 0.f;
#pragma unroll
    for (int r0 = 0; r0 < kSegLen; r0 += 8) {
      float kx[8], qx[8];
      kq8(r0, kx, qx);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        sk = r0 + e == 0 ? mul(kx[0], kx[0]) : fma_rn(kx[e], kx[e], sk);
        sq = r0 + e == 0 ? mul(qx[0], qx[0]) : fma_rn(qx[e], qx[e], sq);
      }
    }
    sk = combine_segments<false>(sk);
    sq = combine_segments<false>(sq);
    const float rk = __fdiv_rn(1.f, __fsqrt_rn(add(sk, kL2Eps)));
    const float rq = __fdiv_rn(1.f, __fsqrt_rn(add(sq, kL2Eps)));
    const float d = decay_of(g_cur);
    float S[kSegLen];  // (read after the norms: fewer registers live at once)
#pragma unroll
    for (int r = 0; r < kSegLen; ++r) S[r] = st[tile_of(seg * kSegLen + r, lcol)];
    float u = 0.f;
#pragma unroll
    for (int r0 = 0; r0 < kSegLen; r0 += 8) {
      float kx[8];
      bf16x8(kseg + r0, kx);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int r = r0 + e;
        S[r] = mul(S[r], d);
        const float kn = mul(kx[e], rk);
        u = r == 0 ? mul(S[r], kn) : fma_rn(S[r], kn, u);
      }
    }
    u = combine_segments<false>(u);
    const float dl = mul(sub(vv, u), b_cur);
    float o = 0.f;
#pragma unroll
    for (int r0 = 0; r0 < kSegLen; r0 += 8) {
      float kx[8], qx[8];
      kq8(r0, kx, qx);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int r = r0 + e;
        S[r] = fma_rn(mul(kx[e], rk), dl, S[r]);
        const float qn = mul(mul(qx[e], rq), p.scale);
        o = r == 0 ? mul(S[r], qn) : fma_rn(S[r], qn, o);
      }
    }
    o = combine_segments<false>(o);
    const Tile T = tile_at_index(t);
    const int slot = __ldg(p.slots + T.b);  // (read for this tile's copy: a cache hit)
    const int col = T.cb * kCols + lcol;
    if (seg == 0) p.out[(int64_t(T.b) * kVHeads + T.h) * kHeadV + col] = __float2bfloat16_rn(o);
    float* dst = p.pool + (int64_t(slot) * kVHeads + T.h) * int64_t(kHeadK * kHeadV) +
                 int64_t(seg * kSegLen) * kHeadV + col;
#pragma unroll
    for (int r = 0; r < kSegLen; ++r) dst[r * kHeadV] = S[r];
    g_cur = g_nx;
    b_cur = b_nx;
  }
  cp_async_wait<0>();
}

__global__ void fill_bf16(__nv_bfloat16* p, size_t n, uint32_t seed, float scale, float offset) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = __float2bfloat16((float(lab::mix(i, seed) & 0xffff) / 65536.f) * scale + offset);
}
__global__ void fill_f32(float* p, size_t n, uint32_t seed, float scale, float offset) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = (float(lab::mix(i, seed) & 0xffff) / 65536.f) * scale + offset;
}

struct Data {
  int B = 0;
  __nv_bfloat16 *q = nullptr, *k = nullptr, *v = nullptr, *beta = nullptr, *out = nullptr;
  float* g = nullptr;
  int32_t* slots = nullptr;
  std::vector<float*> pools;  // rotating copies, each [B, 48, 128, 128]
  size_t pool_floats = 0;
};

Params product_params(const Data& d, float* pool, __nv_bfloat16* out) {
  Params p;
  p.q = d.q;
  p.k = d.k;
  p.v = d.v;
  p.q_sb = p.k_sb = int64_t(kQKHeads) * kHeadK;
  p.q_sh = p.k_sh = kHeadK;
  p.v_sb = int64_t(kVHeads) * kHeadV;
  p.v_sh = kHeadV;
  p.act = DType::kBF16;
  p.qk16 = p.v16 = true;
  p.g = d.g;
  p.beta = d.beta;
  p.g_sb = p.beta_sb = kVHeads;
  p.beta_dt = DType::kBF16;
  p.pool = pool;
  p.pool_rows = d.B;
  p.slots = d.slots;
  p.out = out;
  p.batch = d.B;
  p.tokens = 1;
  p.scale = 1.f / std::sqrt(128.f);
  p.splits = 1;
  return p;
}

LabParams lab_params(const Data& d, float* pool, __nv_bfloat16* out) {
  return LabParams{d.q, d.k, d.v, d.g, d.beta, d.slots, pool, out, d.B, 1.f / std::sqrt(128.f)};
}

auto product_fn() { return gdn_kernel<Mode::kStep, __nv_bfloat16, false, false>; }
size_t product_smem() { return smem_total(Mode::kStep, 1); }

void launch_product(const Data& d, float* pool, __nv_bfloat16* out, cudaStream_t s) {
  product_fn()<<<dim3(kTilesPerHead, kVHeads, unsigned(d.B)), kThreads, product_smem(), s>>>(
      product_params(d, pool, out));
}

template <int MINB, int NST>
int lab_grid(int B) {
  int dev = 0, sms = 0, per = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CK(cudaFuncSetAttribute(step_pipe<MINB, NST>, cudaFuncAttributeMaxDynamicSharedMemorySize, NST * kStageBytes));
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, step_pipe<MINB, NST>, kThreads, NST * kStageBytes));
  const int tiles = B * kVHeads * kTilesPerHead;
  return std::min(tiles, sms * std::max(per, 1));
}

template <int MINB, int NST>
void launch_lab(const Data& d, float* pool, __nv_bfloat16* out, int grid, cudaStream_t s) {
  step_pipe<MINB, NST><<<grid, kThreads, NST * kStageBytes, s>>>(lab_params(d, pool, out));
}

bool same_bits(const void* a, const void* b, size_t bytes, const char* what) {
  std::vector<unsigned char> x(bytes), y(bytes);
  CK(cudaMemcpy(x.data(), a, bytes, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(y.data(), b, bytes, cudaMemcpyDeviceToHost));
  size_t bad = 0, first = bytes;
  for (size_t i = 0; i < bytes; ++i)
    if (x[i] != y[i]) {
      ++bad;
      if (first == bytes) first = i;
    }
  if (bad) std::printf("    MISMATCH %s: %zu of %zu bytes differ, first at byte %zu\n", what, bad, bytes, first);
  return bad == 0;
}

template <int MINB, int NST>
void run_variant(Data& d, double ceiling, float product_us) {
  const int grid = lab_grid<MINB, NST>(d.B);
  cudaFuncAttributes fa{};
  CK(cudaFuncGetAttributes(&fa, step_pipe<MINB, NST>));
  // bits: both kernels once from the same state
  float *p0 = nullptr, *p1 = nullptr;
  __nv_bfloat16 *o0 = nullptr, *o1 = nullptr;
  const size_t pb = d.pool_floats * 4, ob = size_t(d.B) * kVHeads * kHeadV * 2;
  CK(cudaMalloc(&p0, pb));
  CK(cudaMalloc(&p1, pb));
  CK(cudaMalloc(&o0, ob));
  CK(cudaMalloc(&o1, ob));
  CK(cudaMemcpy(p0, d.pools[0], pb, cudaMemcpyDeviceToDevice));
  CK(cudaMemcpy(p1, d.pools[0], pb, cudaMemcpyDeviceToDevice));
  launch_product(d, p0, o0, nullptr);
  launch_lab<MINB, NST>(d, p1, o1, grid, nullptr);
  CK(cudaDeviceSynchronize());
  const bool ok = same_bits(o0, o1, ob, "output") & same_bits(p0, p1, pb, "state");
  CK(cudaFree(p0));
  CK(cudaFree(p1));
  CK(cudaFree(o0));
  CK(cudaFree(o1));
  const int n = int(d.pools.size());
  const float us = lab::time_graph(4 * n, [&](int i, cudaStream_t s) { launch_lab<MINB, NST>(d, d.pools[i % n], d.out, grid, s); });
  const double bytes = 2.0 * pb;
  std::printf("  pipe %d CTAs/SM, %d stages  B %2d  grid %5d  regs %3d  %8.2f us  %5.1f%% of the ceiling  (product %.2f us)  bits %s\n",
              MINB, NST, d.B, grid, fa.numRegs, us, 100.0 * bytes / (us * 1e3) / ceiling, product_us, ok ? "same" : "DIFFER");
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  const double ceiling = lab::read_ceiling_GBps();
  std::printf("device %s, %d SMs; read ceiling %.0f GB/s; stage %d bytes\n", prop.name, prop.multiProcessorCount,
              ceiling, kStageBytes);
  CK(cudaFuncSetAttribute(product_fn(), cudaFuncAttributeMaxDynamicSharedMemorySize, int(product_smem())));
  for (int B : {1, 2, 4, 8, 16, 32}) {
    Data d;
    d.B = B;
    const size_t nqk = size_t(B) * kQKHeads * kHeadK, nv = size_t(B) * kVHeads * kHeadV, ng = size_t(B) * kVHeads;
    CK(cudaMalloc(&d.q, nqk * 2));
    CK(cudaMalloc(&d.k, nqk * 2));
    CK(cudaMalloc(&d.v, nv * 2));
    CK(cudaMalloc(&d.out, nv * 2));
    CK(cudaMalloc(&d.beta, ng * 2));
    CK(cudaMalloc(&d.g, ng * 4));
    CK(cudaMalloc(&d.slots, B * 4));
    fill_bf16<<<64, 256>>>(d.q, nqk, 1, 2.f, -1.f);
    fill_bf16<<<64, 256>>>(d.k, nqk, 2, 2.f, -1.f);
    fill_bf16<<<64, 256>>>(d.v, nv, 3, 2.f, -1.f);
    fill_bf16<<<64, 256>>>(d.beta, ng, 4, 0.9f, 0.05f);
    fill_f32<<<64, 256>>>(d.g, ng, 5, 0.5f, -0.6f);
    std::vector<int32_t> slots(B);
    for (int b = 0; b < B; ++b) slots[b] = (b * 5 + 3) % B;  // a permutation (B = 1..32)
    CK(cudaMemcpy(d.slots, slots.data(), B * 4, cudaMemcpyHostToDevice));
    d.pool_floats = size_t(B) * kVHeads * kHeadK * kHeadV;
    const size_t copies = std::max<size_t>(2, (size_t(3) * prop.l2CacheSize) / (d.pool_floats * 4) + 1);
    for (size_t c = 0; c < copies; ++c) {
      float* pl = nullptr;
      CK(cudaMalloc(&pl, d.pool_floats * 4));
      fill_f32<<<256, 256>>>(pl, d.pool_floats, 10 + uint32_t(c), 0.2f, -0.1f);
      d.pools.push_back(pl);
    }
    CK(cudaDeviceSynchronize());
    const int n = int(d.pools.size());
    const float product_us =
        lab::time_graph(4 * n, [&](int i, cudaStream_t s) { launch_product(d, d.pools[i % n], d.out, s); });
    std::printf("B %d (%d pool copies): product %.2f us, %.1f%% of the ceiling\n", B, n, product_us,
                100.0 * 2.0 * d.pool_floats * 4 / (product_us * 1e3) / ceiling);
    run_variant<6, 2>(d, ceiling, product_us);
    run_variant<5, 2>(d, ceiling, product_us);
    run_variant<4, 3>(d, ceiling, product_us);
    for (float* pl : d.pools) CK(cudaFree(pl));
    CK(cudaFree(d.q));
    CK(cudaFree(d.k));
    CK(cudaFree(d.v));
    CK(cudaFree(d.out));
    CK(cudaFree(d.beta));
    CK(cudaFree(d.g));
    CK(cudaFree(d.slots));
  }
  return 0;
}
