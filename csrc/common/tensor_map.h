// Host side of the TMA copies (common/tma.cuh): 2-D tensor maps, encoded by the driver's
// cuTensorMapEncodeTiled, reached through the runtime (no link against libcuda). Torch-free.
// Encoding is a host computation (no device work, nothing to capture in a CUDA graph): the map
// travels by value as a __grid_constant__ kernel parameter.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <mutex>

namespace qwen38 {

// The encoder, or null where the driver does not provide it.
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    cudaDriverEntryPointQueryResult q{};
    void* f = nullptr;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
    else
      (void)cudaGetLastError();  // leave no sticky error behind
  });
  return encode;
}

// A 2-D map of a row-major [rows, cols] tensor of `type` elements (row stride `stride_bytes`: a
// multiple of 16; base 16-byte aligned), boxes of box_rows x box_cols with the given swizzle;
// elements outside the tensor read as zeros. False where it cannot be encoded.
inline bool tensor_map_2d(CUtensorMap* map, const void* base, CUtensorMapDataType type, uint64_t rows, uint64_t cols,
                          uint64_t stride_bytes, uint32_t box_rows, uint32_t box_cols, CUtensorMapSwizzle swizzle) {
  const auto encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  const cuuint64_t dims[2] = {cols, rows};
  const cuuint64_t strides[1] = {stride_bytes};
  const cuuint32_t box[2] = {box_cols, box_rows};
  const cuuint32_t es[2] = {1, 1};
  return encode(map, type, 2, const_cast<void*>(base), dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace qwen38
