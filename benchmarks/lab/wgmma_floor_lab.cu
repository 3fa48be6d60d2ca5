// Lab (sm_90a only): where does the warpgroup-MMA NVFP4 prefill kernel (gemm/nvfp4_wgmma_kernel.cuh)
// spend its ~0.6 us a 64-k stage at 64 and 128 rows? A copy of its main loop with parts switched
// off one at a time (the results are garbage except for the full form; only the times count):
//   kNoDecode  the A registers are the packed words as loaded (no scale conversion, no decode)
//   kNoMma     no wgmma (the decoded registers are folded into one accumulator instead)
//   kNoWLoad   the weights' TMA copies only fill the first stages (later stages: x only)
//   kNoXLoad   the x tile's copies likewise
//   kNoScale   no block-scale loads (a constant)
// plus forms that change the pipeline rather than remove work:
//   kWait0     wait for a stage's own wgmmas at its end (no group left in flight)
//   kNoBar     no CTA barrier a stage: each warp frees a stage's buffers through an "empty"
//              mbarrier of 8 arrivals (one a warp, after its wait for that stage's wgmmas) that
//              thread 0 waits on before refilling it (a producer without a producer warp)
//   kProducer  the same empty mbarriers, waited on by a ninth warp that issues every copy (up to S
//              stages ahead) and does nothing else: the two warpgroups never wait for each other
//   kScaleTma  the block scales as a third copy of each stage (a [N, K/16] byte map, boxes of 128
//              rows x 16 bytes at byte 16 (kt / 4): TMA's smallest inner box, 16-byte aligned; the
//              stage's 4 bytes a row read back with one 32-bit shared load) instead of global loads
//              2 stages ahead
//
//   nvcc -std=c++20 -O3 -gencode arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -I csrc \
//       benchmarks/lab/wgmma_floor_lab.cu -o build/lab/wgmma_floor_lab
//   build/lab/wgmma_floor_lab            (timings)
//   build/lab/wgmma_floor_lab --profile  (one launch of the full form, BM 64, 64 rows, for ncu)
//   build/lab/wgmma_floor_lab --tma      (the scale-TMA forms beside the full one only)
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/launch.cuh"
#include "gemm/nvfp4_wgmma_kernel.cuh"
#include "lab_common.cuh"

using namespace qwen38;
using namespace qwen38::gemm;

namespace {

constexpr int kK = 5120;
enum : int {
  kNoDecode = 1, kNoMma = 2, kNoWLoad = 4, kNoXLoad = 8, kNoScale = 16, kWait0 = 32, kNoBar = 64, kProducer = 128,
  kScaleTma = 256
};
constexpr int kSStage = 128 * 16;  // (kScaleTma) a stage's scale box
template <int BM, int S>
constexpr int smem_of() { return wg_prefill::Cfg<BM, S>::kSmem + S * kSStage; }
constexpr int threads_of(int a) { return (a & kProducer) ? 288 : 256; }


template <int BM, int S, int A>
__global__ void __launch_bounds__(threads_of(A), BM <= 128 ? 2 : 1)
    floor_kernel(const Nvfp4Params p, const __grid_constant__ CUtensorMap tx, const __grid_constant__ CUtensorMap tw,
                 const __grid_constant__ CUtensorMap ts) {
#ifdef QWEN38_WGMMA
  using T = __nv_bfloat16;
  using C = wg_prefill::Cfg<BM, S>;
  constexpr int kWStage = wg_prefill::kWStage, kBK = wg_prefill::kBK;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem =
      smem_raw + ((1024 - (static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) & 1023)) & 1023);
  const uint32_t xs_addr = smem_addr(smem);
  const unsigned char* ws0 = smem + S * C::kXStage;
  const uint32_t ws_addr = xs_addr + S * C::kXStage;
  const unsigned char* ss0 = ws0 + S * kWStage;  // (kScaleTma) S scale boxes
  const uint32_t ss_addr = ws_addr + S * kWStage;
  __shared__ __align__(8) uint64_t bars[2 * S];  // full[S], then (kNoBar) empty[S]
  const uint32_t bar0 = smem_addr(bars), ebar0 = bar0 + 8 * S;
  const int64_t m0 = int64_t(blockIdx.x) * BM, n0 = int64_t(blockIdx.y) * wg_prefill::kBN;
  const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int r0 = 64 * (tid >> 7) + 16 * ((tid >> 5) & 3) + g;
  const int nkt = int(p.k / kBK);
  if (tid == 0) {
    for (int s = 0; s < S; ++s) tma::mbar_init(bar0 + 8 * s, 1);
    for (int s = 0; s < S; ++s) tma::mbar_init(ebar0 + 8 * s, 8);
    tma::mbar_init_fence();
  }
  __syncthreads();
  auto load = [&](int kt) {
    const int b = kt % S;
    const bool wl = !(A & kNoWLoad) || kt < S, xl = !(A & kNoXLoad) || kt < S;
    constexpr bool kSt = (A & kScaleTma) != 0;
    tma::mbar_expect(bar0 + 8 * b, uint32_t((xl ? C::kXStage : 0) + (wl ? kWStage : 0) + (kSt ? kSStage : 0)));
    if (xl) tma::copy_2d(xs_addr + b * C::kXStage, &tx, kt * kBK, int(m0), bar0 + 8 * b);
    if (wl) tma::copy_2d(ws_addr + b * kWStage, &tw, kt * (kBK / 2), int(n0), bar0 + 8 * b);
    if (kSt) tma::copy_2d(ss_addr + b * kSStage, &ts, (kt / 4) * 16, int(n0), bar0 + 8 * b);
  };
  if constexpr ((A & kProducer) != 0) {
    if (tid >= 256) {  // the producer warp: stage kt into buffer kt % S once stage kt - S released it
      if (lane == 0)
        for (int kt = 0; kt < nkt; ++kt) {
          if (kt >= S) tma::mbar_wait(ebar0 + 8 * (kt % S), uint32_t(kt / S - 1) & 1u);
          load(kt);
        }
      return;
    }
  } else if (tid == 0) {
    for (int s = 0; s < S - 2; ++s)
      if (s < nkt) load(s);
  }
  const int64_t kRowS = p.k / 16;
  const uint32_t* sp0 = reinterpret_cast<const uint32_t*>(p.scale + (n0 + r0) * kRowS);
  const uint32_t* sp1 = reinterpret_cast<const uint32_t*>(p.scale + (n0 + r0 + 8) * kRowS);
  auto scales = [&](int kt, uint32_t (&sc)[2]) {
    if (A & (kNoScale | kScaleTma)) {
      sc[0] = 0x38383838u;
      sc[1] = 0x38383838u;
    } else {
      sc[0] = __ldg(sp0 + kt);
      sc[1] = __ldg(sp1 + kt);
    }
  };
  auto release = [&](int k) {  // (kNoBar) this warp is done with stage k's buffers
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(ebar0 + 8 * (k % S)) : "memory");
  };
  float acc[BM / 2];
#pragma unroll
  for (int i = 0; i < BM / 2; ++i) acc[i] = 0.0f;
  const uint32_t sel = 0x4440u | uint32_t(t);
  const int wo00 = prefill_nvfp4::w_off(r0, 0), wo01 = prefill_nvfp4::w_off(r0, 1);
  const int wo10 = prefill_nvfp4::w_off(r0 + 8, 0), wo11 = prefill_nvfp4::w_off(r0 + 8, 1);
  auto stage = [&](int kt, uint32_t (&a)[4][4], uint32_t (&sc)[2]) {
    if (A & kProducer) {
      // nothing to issue: the producer warp does
    } else if (A & kNoBar) {
      // the buffer of stage kt - 2 is refilled with stage kt + S - 2 once every warp has
      // finished stage kt - 2's wgmmas (each arrives on its empty barrier after its wait<1> of
      // stage kt - 1, below); thread 0 waits for that before issuing
      if (tid == 0 && kt + S - 2 < nkt) {
        if (kt >= 2) tma::mbar_wait(ebar0 + 8 * ((kt - 2) % S), uint32_t((kt - 2) / S) & 1u);
        load(kt + S - 2);
      }
    } else {
      __syncthreads();
      if (tid == 0 && kt + S - 2 < nkt) load(kt + S - 2);
    }
    uint32_t sw0 = sc[0], sw1 = sc[1];
    if (kt + 2 < nkt) scales(kt + 2, sc);
    const int b = kt % S;
    tma::mbar_wait(bar0 + 8 * b, uint32_t(kt / S) & 1u);
    if (A & kScaleTma) {
      sw0 = *reinterpret_cast<const uint32_t*>(ss0 + b * kSStage + 16 * r0 + 4 * (kt % 4));
      sw1 = *reinterpret_cast<const uint32_t*>(ss0 + b * kSStage + 16 * (r0 + 8) + 4 * (kt % 4));
    }
    const unsigned char* ws = ws0 + b * kWStage;
    const uint4 c00 = *reinterpret_cast<const uint4*>(ws + wo00);
    const uint4 c01 = *reinterpret_cast<const uint4*>(ws + wo01);
    const uint4 c10 = *reinterpret_cast<const uint4*>(ws + wo10);
    const uint4 c11 = *reinterpret_cast<const uint4*>(ws + wo11);
    const uint32_t w0[8] = {c00.x, c00.y, c00.z, c00.w, c01.x, c01.y, c01.z, c01.w};
    const uint32_t w1[8] = {c10.x, c10.y, c10.z, c10.w, c11.x, c11.y, c11.z, c11.w};
    if (A & kNoDecode) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        a[j][0] = w0[2 * j] ^ sw0;
        a[j][1] = w1[2 * j] ^ sw1;
        a[j][2] = w0[2 * j + 1];
        a[j][3] = w1[2 * j + 1];
      }
    } else {
      typename nvfp4::PairDecode<T>::T2 s0[4], s1[4];
      wg_prefill::block_scales<T>(s0, s1, sw0, sw1);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        a[j][0] = nvfp4::decode_byte<T>(__byte_perm(w0[2 * j], 0, sel), s0[j]);
        a[j][1] = nvfp4::decode_byte<T>(__byte_perm(w1[2 * j], 0, sel), s1[j]);
        a[j][2] = nvfp4::decode_byte<T>(__byte_perm(w0[2 * j + 1], 0, sel), s0[j]);
        a[j][3] = nvfp4::decode_byte<T>(__byte_perm(w1[2 * j + 1], 0, sel), s1[j]);
      }
    }
    if (A & kNoMma) {
      uint32_t f = 0;
#pragma unroll
      for (int j = 0; j < 4; ++j) f ^= a[j][0] ^ a[j][1] ^ a[j][2] ^ a[j][3];
      acc[0] += __uint_as_float(f & 0x3fffffffu);
      if (A & (kNoBar | kProducer)) {
        __syncwarp();
        if (kt >= 1 && lane == 0) release(kt - 1);
      }
    } else {
      const uint32_t xa = xs_addr + b * C::kXStage;
      wgmma::fence();
#pragma unroll
      for (int j = 0; j < 4; ++j) wgmma::wgmma_rs<T, BM>(acc, a[j], wgmma::desc_sw128(xa + 32 * j));
      wgmma::commit();
      if (A & kWait0) wgmma::wait<0>();
      else wgmma::wait<1>();
      if (A & (kNoBar | kProducer)) {  // stage kt - 1's wgmmas are done for this warp
        __syncwarp();
        if (kt >= 1 && lane == 0) release(kt - 1);
      }
    }
  };
  uint32_t a_even[4][4], a_odd[4][4], sc[2][2];
  scales(0, sc[0]);
  scales(1, sc[1]);
  int kt = 0;
  for (; kt + 1 < nkt; kt += 2) {
    stage(kt, a_even, sc[0]);
    stage(kt + 1, a_odd, sc[1]);
  }
  if (kt < nkt) stage(kt, a_even, sc[0]);
  wgmma::wait<0>();
  wgmma::touch(acc);
  __nv_bfloat16* y = static_cast<__nv_bfloat16*>(p.y);
#pragma unroll
  for (int j = 0; j < BM / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int64_t row = m0 + 8 * j + 2 * t + e, col = n0 + r0 + 8 * h;
        if (row < p.m && col < p.n) y[row * p.n + col] = __float2bfloat16_rn(acc[4 * j + 2 * h + e]);
      }
#endif
}

using Data = lab::Nvfp4Data;

template <int BM, int S, int A>
float run(const Data& d, int64_t m, int calls) {
  auto kernel = floor_kernel<BM, S, A>;
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_of<BM, S>()));
  const dim3 grid(unsigned((m + BM - 1) / BM), unsigned((d.n + 127) / 128));
  const CUtensorMap tx =
      lab::tensor_map_2d(d.x, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, uint64_t(m), kK, kK * 2, BM, 64,
                         CU_TENSOR_MAP_SWIZZLE_128B);
  std::vector<CUtensorMap> tw(d.copies), ts(d.copies);
  for (int c = 0; c < d.copies; ++c) {
    tw[c] = lab::tensor_map_2d(d.wt.w[c], CU_TENSOR_MAP_DATA_TYPE_UINT8, uint64_t(d.n), kK / 2, kK / 2, 128, 32,
                               CU_TENSOR_MAP_SWIZZLE_32B);
    ts[c] = lab::tensor_map_2d(d.wt.s[c], CU_TENSOR_MAP_DATA_TYPE_UINT8, uint64_t(d.n), kK / 16, kK / 16, 128, 16,
                               CU_TENSOR_MAP_SWIZZLE_NONE);
  }
  auto launch = [&](int c, cudaStream_t st) {
    CK(launch_kernel(kernel, grid, dim3(threads_of(A)), size_t(smem_of<BM, S>()), st, false,
                     d.params(c, m, d.y, int(Out::kBF16)), tx, tw[c], ts[c]));
  };
  return lab::run_or_time(launch, d.copies, calls);
}

template <int BM, int S, int A>
void row(const char* name, const Data& d, int64_t m) {
  run<BM, S, A>(d, m, 0);  // a checked launch first
  const float us = run<BM, S, A>(d, m, std::max(8, 2 * d.copies));
  const int nkt = kK / 64;
  const int64_t ctas = ((m + BM - 1) / BM) * ((d.n + 127) / 128);
  std::printf("  BM %3d S %d rows %4lld  %-30s %8.2f us  (%lld CTAs; %.3f us a stage if one CTA time)\n", BM, S,
              (long long)m, name, us, (long long)ctas, us / nkt);
}

template <int BM, int S>
void sweep_tma(const Data& d, int64_t m) {
  row<BM, S, 0>("full", d, m);
  row<BM, S, kNoScale>("no scale loads", d, m);
  row<BM, S, kScaleTma>("scales by TMA", d, m);
  row<BM, S, kProducer | kScaleTma>("producer warp, scales by TMA", d, m);
  row<BM, S, kNoBar | kScaleTma>("no CTA barrier, scales by TMA", d, m);
}

template <int BM, int S>
void sweep(const Data& d, int64_t m) {
  row<BM, S, 0>("full", d, m);
  row<BM, S, kNoDecode>("no decode", d, m);
  row<BM, S, kNoMma>("no wgmma", d, m);
  row<BM, S, kNoMma | kNoDecode>("no wgmma, no decode", d, m);
  row<BM, S, kNoWLoad>("no weight loads", d, m);
  row<BM, S, kNoXLoad>("no x loads", d, m);
  row<BM, S, kNoWLoad | kNoXLoad>("no loads", d, m);
  row<BM, S, kNoScale>("no scale loads", d, m);
  row<BM, S, kNoWLoad | kNoXLoad | kNoScale>("no loads, no scales", d, m);
  row<BM, S, kWait0>("wait 0 a stage", d, m);
  row<BM, S, kNoBar>("no CTA barrier (empty bars)", d, m);
  row<BM, S, kNoBar | kNoScale>("no CTA barrier, no scales", d, m);
  row<BM, S, kProducer>("producer warp", d, m);
  row<BM, S, kProducer | kNoScale>("producer warp, no scales", d, m);
  row<BM, S + 2, kProducer>("producer warp, 2 more stages", d, m);
  row<BM, S, kScaleTma>("scales by TMA", d, m);
  row<BM, S, kProducer | kScaleTma>("producer warp, scales by TMA", d, m);
}

}  // namespace

int main(int argc, char** argv) {
  const bool profile = argc > 1 && std::strcmp(argv[1], "--profile") == 0;
  const bool tma_only = argc > 1 && std::strcmp(argv[1], "--tma") == 0;  // the scale-TMA forms only
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  const size_t l2 = size_t(prop.l2CacheSize);
  for (int64_t n : {int64_t(1024), int64_t(34816)}) {
    if (profile && n != 34816) continue;
    Data d;
    d.alloc(n, kK, 256, l2);
    if (profile) {
      run<64, 6, 0>(d, 64, 0);
    } else if (tma_only) {
      sweep_tma<64, 6>(d, 64);
      sweep_tma<128, 4>(d, 128);
    } else {
      sweep<64, 6>(d, 64);
      sweep<128, 4>(d, 128);
      if (n == 34816) {
        row<64, 6, 0>("full, 32 rows", d, 32);
        row<64, 6, kNoBar>("no CTA barrier, 32 rows", d, 32);
      }
    }
    d.release();
  }
  return 0;
}
