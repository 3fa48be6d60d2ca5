// Launcher of nvfp4_linear's warpgroup-MMA prefill kernel (nvfp4_wgmma_kernel.cuh, sm_90a): the
// "mma" strategy's form on Hopper, bit-identical to the mma.sync kernel (nvfp4_prefill_kernel.cu),
// which every other GPU runs. Torch-free.
//
// Tile rows BM (the x rows of a CTA, wgmma's N) by the row count: 64 up to 64 rows (6 stages, two
// CTAs an SM), 128 up to 128 (4 stages, two CTAs an SM at 128 registers), else 256 (4 stages, one CTA
// an SM, 254 registers); p.tile_rows (QWEN38_PREFILL_TILE_ROWS) overrides. H200
// (benchmarks/lab/wgmma_prefill_lab.cu; benchmarks/results/h200/wgmma_prefill_lab_15.txt and, for
// BM 256 with its scales 4 stages ahead, _scales4.txt), 34816x5120 at 64 / 128 / 256 / 512 / 1024
// rows: 101 / 124 / 174 / 286 / 510 us against the mma.sync kernel's 168 / 230 / 361 / 634 / 1221
// (BM 256 at 64 / 128 rows: 188 / 186; BM 128 with 6 stages, one CTA an SM: 135 / 136).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <map>
#include <mutex>

#include "common/launch.cuh"
#include "common/tensor_map.h"
#include "gemm/nvfp4_linear_launch.h"
#include "gemm/nvfp4_wgmma_kernel.cuh"

namespace qwen38::gemm {
namespace {

template <int BM> constexpr int kStagesOf = BM == 64 ? 6 : 4;

template <typename T, int OUT, int BM>
cudaError_t launch_bm(const Nvfp4Params& p, const CUtensorMap& tx, const CUtensorMap& tw, bool pdl,
                      cudaStream_t stream) {
  constexpr int S = kStagesOf<BM>;
  auto kernel = wg_prefill::nvfp4_wgmma_kernel<T, OUT, BM, S>;
  constexpr int kSmem = wg_prefill::Cfg<BM, S>::kSmem;
  // above the default 48 KB a block must opt in (per device; not a stream operation)
  const cudaError_t attr = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (attr != cudaSuccess) return attr;
  const dim3 grid(unsigned((p.m + BM - 1) / BM), unsigned((p.n + wg_prefill::kBN - 1) / wg_prefill::kBN));
  return launch_kernel(kernel, grid, dim3(wg_prefill::kThreads), size_t(kSmem), stream, pdl, p, tx, tw);
}

template <typename T, int OUT>
cudaError_t launch_out(const Nvfp4Params& p, int bm, const CUtensorMap& tx, const CUtensorMap& tw, bool pdl,
                       cudaStream_t stream) {
  if (bm == 64) return launch_bm<T, OUT, 64>(p, tx, tw, pdl, stream);
  if (bm == 128) return launch_bm<T, OUT, 128>(p, tx, tw, pdl, stream);
  return launch_bm<T, OUT, 256>(p, tx, tw, pdl, stream);
}

template <typename T>
cudaError_t launch_t(const Nvfp4Params& p, int bm, const CUtensorMap& tx, const CUtensorMap& tw, bool pdl,
                     cudaStream_t stream) {
  switch (p.out) {
    case int(Out::kF32): return launch_out<T, int(Out::kF32)>(p, bm, tx, tw, pdl, stream);
    case int(Out::kF16): return launch_out<T, int(Out::kF16)>(p, bm, tx, tw, pdl, stream);
    default: return launch_out<T, int(Out::kBF16)>(p, bm, tx, tw, pdl, stream);
  }
}

bool aligned(const void* q, uintptr_t a) { return reinterpret_cast<uintptr_t>(q) % a == 0; }

}  // namespace

int nvfp4_wgmma_tile_rows(const Nvfp4Params& p) {
  if (p.tile_rows == 64 || p.tile_rows == 128 || p.tile_rows == 256) return p.tile_rows;
  return p.m <= 64 ? 64 : p.m <= 128 ? 128 : 256;
}

bool nvfp4_wgmma_auto(int64_t n, int64_t k) { return n >= 8192 && k <= 6144; }

bool nvfp4_wgmma_ready(int device) {
  static std::mutex mu;
  static std::map<int, bool> cache;
  bool ok = false;
  const cudaError_t e = cached_query(mu, cache, device, &ok, [device](bool* r) {
    cudaDeviceProp prop{};
    *r = false;
    if (cudaGetDeviceProperties(&prop, device) != cudaSuccess || prop.major != 9 || prop.minor != 0 ||
        tensor_map_encoder() == nullptr)
      return cudaSuccess;
    // the build's sm_90 code has the kernel's body (an sm_90a target) iff the body's static shared
    // memory (the mbarriers) is there
    int cur = 0;
    cudaFuncAttributes fa{};
    if (cudaGetDevice(&cur) == cudaSuccess && cudaSetDevice(device) == cudaSuccess) {
      *r = cudaFuncGetAttributes(&fa, wg_prefill::nvfp4_wgmma_kernel<__nv_bfloat16, 0, 256, kStagesOf<256>>) ==
               cudaSuccess &&
           fa.sharedSizeBytes > 0;
      cudaSetDevice(cur);
    }
    return cudaSuccess;
  });
  (void)cudaGetLastError();  // a failed query leaves no sticky error behind
  return e == cudaSuccess && ok;
}

constexpr int kXBytes = 2;  // bytes of an x element (bf16, fp16)

bool nvfp4_wgmma_serves(const Nvfp4Params& p) {
  return p.k > 0 && p.k % wg_prefill::kBK == 0 && p.m > 0 && p.m < (int64_t(1) << 31) && p.n > 0 &&
         (p.n + wg_prefill::kBN - 1) / wg_prefill::kBN <= 65535 && aligned(p.x, 16) &&
         (p.x_stride * kXBytes) % 16 == 0 && aligned(p.w, 16) && aligned(p.scale, 4);
}

cudaError_t launch_nvfp4_wgmma(Act act, const Nvfp4Params& p, bool pdl, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0) return cudaSuccess;
  if (!nvfp4_wgmma_serves(p)) return cudaErrorInvalidValue;
  const int bm = nvfp4_wgmma_tile_rows(p);
  CUtensorMap tx, tw;
  const CUtensorMapDataType xt = act == Act::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  if (!tensor_map_2d(&tx, p.x, xt, uint64_t(p.m), uint64_t(p.k), uint64_t(p.x_stride) * kXBytes, uint32_t(bm),
                     wg_prefill::kBK, CU_TENSOR_MAP_SWIZZLE_128B) ||
      !tensor_map_2d(&tw, p.w, CU_TENSOR_MAP_DATA_TYPE_UINT8, uint64_t(p.n), uint64_t(p.k / 2), uint64_t(p.k / 2),
                     wg_prefill::kBN, wg_prefill::kBK / 2, CU_TENSOR_MAP_SWIZZLE_32B))
    return cudaErrorNotSupported;
  return act == Act::kBF16 ? launch_t<__nv_bfloat16>(p, bm, tx, tw, pdl, stream)
                           : launch_t<__half>(p, bm, tx, tw, pdl, stream);
}

}  // namespace qwen38::gemm
