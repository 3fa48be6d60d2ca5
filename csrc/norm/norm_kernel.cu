// Instantiations and launch of the fused RMS norms (see norm_kernel.cuh for the math and layout).
#include "common/launch.cuh"
#include "norm/norm_kernel.cuh"

namespace qwen38::norm {
namespace {

bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

template <typename T, typename W, Kind KIND, bool ALIGNED>
cudaError_t launch_cfg(const Params& p, bool pdl, cudaStream_t stream) {
  constexpr int kWideSpw = KIND == Kind::kRms ? 4 : 2;  // add and gated keep two inputs per group
  const Shape sh = launch_shape(p.hidden, p.rows, kWideSpw);
  const int64_t grid = (p.rows + sh.rows_per_block - 1) / sh.rows_per_block;
  if (grid > 0x7fffffff) return cudaErrorInvalidConfiguration;
  auto kernel = sh.spw == 1 ? norm_kernel<T, W, KIND, ALIGNED, 1> : norm_kernel<T, W, KIND, ALIGNED, kWideSpw>;
  return launch_kernel(kernel, dim3(unsigned(grid)), dim3(sh.threads), 0, stream, pdl, p, sh.lanes,
                       sh.segments, sh.warps_per_row);
}

template <typename T, typename W, Kind KIND>
cudaError_t launch_typed(const Params& p, bool pdl, cudaStream_t stream) {
  // 16-byte group loads need every row start 16-byte aligned; the unaligned variant computes the
  // same bits with element loads.
  constexpr int64_t kElemsPer16 = 16 / sizeof(T);
  bool ok = p.hidden % kGroup == 0 && aligned16(p.x) && p.x_stride % kElemsPer16 == 0 &&
            aligned16(p.weight) && aligned16(p.y);
  if (KIND == Kind::kAddRms)
    ok = ok && aligned16(p.residual) && p.res_stride % kElemsPer16 == 0 && aligned16(p.residual_out);
  if (KIND == Kind::kGated) ok = ok && aligned16(p.gate) && p.gate_stride % kElemsPer16 == 0;
  return ok ? launch_cfg<T, W, KIND, true>(p, pdl, stream) : launch_cfg<T, W, KIND, false>(p, pdl, stream);
}

template <typename T, Kind KIND>
cudaError_t launch_weight(DType wt, const Params& p, bool pdl, cudaStream_t stream) {
  if (wt == DType::kF32) return launch_typed<T, float, KIND>(p, pdl, stream);
  return launch_typed<T, T, KIND>(p, pdl, stream);  // the host allows only W = T or fp32
}

template <typename T>
cudaError_t launch_kind(Kind kind, DType wt, const Params& p, bool pdl, cudaStream_t stream) {
  switch (kind) {
    case Kind::kRms: return launch_weight<T, Kind::kRms>(wt, p, pdl, stream);
    case Kind::kAddRms: return launch_weight<T, Kind::kAddRms>(wt, p, pdl, stream);
    case Kind::kGated: return launch_weight<T, Kind::kGated>(wt, p, pdl, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch(Kind kind, DType act, DType wt, const Params& p, bool pdl, cudaStream_t stream) {
  if (p.rows == 0 || p.hidden == 0) return cudaSuccess;
  if (p.hidden > kMaxHidden) return cudaErrorInvalidValue;  // the host rejects this with a message
  if (act == DType::kBF16) return launch_kind<__nv_bfloat16>(kind, wt, p, pdl, stream);
  if (act == DType::kF16) return launch_kind<__half>(kind, wt, p, pdl, stream);
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
