// Kernel launch with optional programmatic dependent launch (see pdl.cuh). Torch-free.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <utility>

namespace qwen38 {

template <typename... KArgs, typename... Args>
cudaError_t launch_kernel(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                          cudaStream_t stream, bool pdl, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

// The largest dynamic shared memory a block of `kernel` may use on the current device: the opt-in
// limit less the kernel's static shared memory. The first call per (kernel, device) raises the
// kernel's attribute to it (later calls read a cache), so any launch up to *room is allowed.
inline cudaError_t dynamic_smem_room(const void* kernel, size_t* room) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, size_t> cache;
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev)) return e;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(kernel, dev);
  if (const auto it = cache.find(key); it != cache.end()) {
    *room = it->second;
    return cudaSuccess;
  }
  int optin = 0;
  cudaFuncAttributes a{};
  if (cudaError_t e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev)) return e;
  if (cudaError_t e = cudaFuncGetAttributes(&a, kernel)) return e;
  const size_t r = size_t(optin) > a.sharedSizeBytes ? size_t(optin) - a.sharedSizeBytes : 0;
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(r))) return e;
  *room = cache[key] = r;
  return cudaSuccess;
}

template <typename... KArgs>
cudaError_t dynamic_smem_room(void (*kernel)(KArgs...), size_t* room) {
  return dynamic_smem_room(reinterpret_cast<const void*>(kernel), room);
}

}  // namespace qwen38
