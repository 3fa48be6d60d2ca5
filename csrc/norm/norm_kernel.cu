// Instantiations and launch of the fused RMS norms (see norm_kernel.cuh for the math and layout).
#include <atomic>

#include "common/launch.cuh"
#include "norm/act_kernel.cuh"
#include "norm/norm_kernel.cuh"

namespace qwen38::norm {
namespace {

bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

// Blocks of `kernel` (with `threads` threads) resident at once on the current device. `cache` is the
// caller's own (one per kernel: every kernel here has the same type, so a cache keyed by type alone
// would mix them), per device and block size; the occupancy query costs microseconds of host time.
constexpr int kCacheDevices = 64, kCacheSizes = kStreamThreads / 32 + 1;
using ResidentCache = std::atomic<int>[kCacheDevices][kCacheSizes];

int resident_blocks(ResidentCache& cache, const void* kernel, int threads) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  const int size = threads / 32;
  const bool cached = dev < kCacheDevices && size < kCacheSizes;
  if (cached) {
    const int hit = cache[dev][size].load(std::memory_order_relaxed);
    if (hit > 0) return hit;
  }
  int sms = 0, per_sm = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0) != cudaSuccess)
    return 0;
  const int n = sms * (per_sm > 0 ? per_sm : 1);
  if (cached) cache[dev][size].store(n, std::memory_order_relaxed);
  return n;
}

// The streaming shape (see norm_kernel.cuh): a grid of at most the resident block count.
template <typename T, typename W, Kind KIND, int L>
cudaError_t launch_stream(const Params& p, int segments, bool pdl, cudaStream_t stream) {
  constexpr int kSpw = L == kLanes ? stream_spw<KIND>() : 1;
  auto kernel = norm_stream_kernel<T, W, KIND, L, kSpw, stream_depth<L>(), stream_roll<KIND, L>(), kStreamHint>;
  const int warps_per_row = (segments + kSpw - 1) / kSpw;
  const int threads = stream_threads(L, warps_per_row);
  const int64_t rows_per_block = threads / (L * warps_per_row);
  const int64_t needed = (p.rows + rows_per_block - 1) / rows_per_block;
  // The kernel walks the rows with a grid stride, so any grid is correct; the resident count keeps
  // every block busy to the end. Should the query fail, a fixed cap stands in for it.
  static ResidentCache cache;  // one per instantiation, i.e. per kernel
  int64_t resident = resident_blocks(cache, reinterpret_cast<const void*>(kernel), threads);
  if (resident <= 0) {
    cudaGetLastError();  // the query's error is not the launch's
    resident = 1024;
  }
  const int64_t grid = needed < resident ? needed : resident;
  return launch_kernel(kernel, dim3(unsigned(grid)), dim3(threads), 0, stream, pdl, p, segments,
                       warps_per_row);
}

template <typename T, typename W, Kind KIND, bool ALIGNED>
cudaError_t launch_cfg(const Params& p, bool pdl, bool streaming, cudaStream_t stream) {
  if constexpr (ALIGNED) {
    // Many rows of 16-byte-aligned groups and 8, 16 or 32 lanes per segment: the streaming shape.
    int lanes = 0, segments = 0;
    segments_of(p.hidden, &lanes, &segments);
    if (streaming && p.rows * p.hidden >= kStreamMinElems) {
      if (lanes == 32) return launch_stream<T, W, KIND, 32>(p, segments, pdl, stream);
      if (lanes == 16) return launch_stream<T, W, KIND, 16>(p, segments, pdl, stream);
      if (lanes == 8) return launch_stream<T, W, KIND, 8>(p, segments, pdl, stream);
    }
  }
  constexpr int kWideSpw = KIND == Kind::kRms ? 4 : 2;  // add and gated keep two inputs per group
  const Shape sh = launch_shape(p.hidden, p.rows, kWideSpw);
  const int64_t grid = (p.rows + sh.rows_per_block - 1) / sh.rows_per_block;
  if (grid > 0x7fffffff) return cudaErrorInvalidConfiguration;
  auto kernel = sh.spw == 1 ? norm_kernel<T, W, KIND, ALIGNED, 1> : norm_kernel<T, W, KIND, ALIGNED, kWideSpw>;
  return launch_kernel(kernel, dim3(unsigned(grid)), dim3(sh.threads), 0, stream, pdl, p, sh.lanes,
                       sh.segments, sh.warps_per_row);
}

template <typename T, typename W, Kind KIND>
cudaError_t launch_typed(const Params& p, bool pdl, bool streaming, cudaStream_t stream) {
  // 16-byte group loads need every row start 16-byte aligned; the unaligned variant computes the
  // same bits with element loads.
  constexpr int64_t kElemsPer16 = 16 / sizeof(T);
  bool ok = p.hidden % kGroup == 0 && aligned16(p.x) && p.x_stride % kElemsPer16 == 0 &&
            aligned16(p.weight) && aligned16(p.y);
  if (KIND == Kind::kAddRms)
    ok = ok && aligned16(p.residual) && p.res_stride % kElemsPer16 == 0 && aligned16(p.residual_out);
  if (KIND == Kind::kGated) ok = ok && aligned16(p.gate) && p.gate_stride % kElemsPer16 == 0;
  return ok ? launch_cfg<T, W, KIND, true>(p, pdl, streaming, stream)
            : launch_cfg<T, W, KIND, false>(p, pdl, streaming, stream);
}

template <typename T, Kind KIND>
cudaError_t launch_weight(DType wt, const Params& p, bool pdl, bool streaming, cudaStream_t stream) {
  if (wt == DType::kF32) return launch_typed<T, float, KIND>(p, pdl, streaming, stream);
  return launch_typed<T, T, KIND>(p, pdl, streaming, stream);  // the host allows only W = T or fp32
}

template <typename T>
cudaError_t launch_kind(Kind kind, DType wt, const Params& p, bool pdl, bool streaming,
                        cudaStream_t stream) {
  switch (kind) {
    case Kind::kRms: return launch_weight<T, Kind::kRms>(wt, p, pdl, streaming, stream);
    case Kind::kAddRms: return launch_weight<T, Kind::kAddRms>(wt, p, pdl, streaming, stream);
    case Kind::kGated: return launch_weight<T, Kind::kGated>(wt, p, pdl, streaming, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch(Kind kind, DType act, DType wt, const Params& p, bool pdl, bool streaming,
                   cudaStream_t stream) {
  if (p.rows == 0 || p.hidden == 0) return cudaSuccess;
  if (p.hidden > kMaxHidden) return cudaErrorInvalidValue;  // the host rejects this with a message
  if (act == DType::kBF16) return launch_kind<__nv_bfloat16>(kind, wt, p, pdl, streaming, stream);
  if (act == DType::kF16) return launch_kind<__half>(kind, wt, p, pdl, streaming, stream);
  return cudaErrorInvalidValue;
}

namespace {

template <typename T>
cudaError_t launch_act(const ActParams& p, bool pdl, cudaStream_t stream) {
  const bool vec = p.inter % 8 == 0 && p.x_stride % 8 == 0 && aligned16(p.x) && aligned16(p.y);
  const int64_t total = p.rows * (vec ? p.inter / 8 : p.inter);
  // at most 4096 blocks (about two waves of 128-thread blocks on the H200); a grid-stride loop beyond
  const int64_t want = (total + kActThreads - 1) / kActThreads;
  const unsigned blocks = unsigned(want < 4096 ? want : 4096);
  return vec ? launch_kernel(silu_mul_kernel<T, true>, dim3(blocks), dim3(kActThreads), 0, stream, pdl, p)
             : launch_kernel(silu_mul_kernel<T, false>, dim3(blocks), dim3(kActThreads), 0, stream, pdl, p);
}

}  // namespace

cudaError_t launch_silu_mul(DType act, const ActParams& p, bool pdl, cudaStream_t stream) {
  if (p.rows == 0 || p.inter == 0) return cudaSuccess;
  if (act == DType::kBF16) return launch_act<__nv_bfloat16>(p, pdl, stream);
  if (act == DType::kF16) return launch_act<__half>(p, pdl, stream);
  return cudaErrorInvalidValue;
}

cudaError_t probe_kernel_image(int* binary_version, int* ptx_version) {
  cudaFuncAttributes attr{};
  const cudaError_t err =
      cudaFuncGetAttributes(&attr, norm_kernel<__nv_bfloat16, __nv_bfloat16, Kind::kRms, true, 1>);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later launches are unaffected
    return err;
  }
  *binary_version = attr.binaryVersion;
  *ptx_version = attr.ptxVersion;
  return cudaSuccess;
}

}  // namespace qwen38::norm
