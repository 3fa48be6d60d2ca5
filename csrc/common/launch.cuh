// Kernel launch with optional programmatic dependent launch (see pdl.cuh). Torch-free.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

namespace qwen38 {

// A launch configuration with its attributes: a thread-block cluster of `cluster` CTAs along x
// (when more than 1; grid.x a multiple of it) and programmatic dependent launch (when `pdl`).
struct LaunchConfig {
  cudaLaunchConfig_t cfg{};
  cudaLaunchAttribute attr[2];
  LaunchConfig(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, bool pdl, int cluster) {
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attr;
    if (cluster > 1) {
      cudaLaunchAttribute& a = attr[cfg.numAttrs++];
      a.id = cudaLaunchAttributeClusterDimension;
      a.val.clusterDim.x = unsigned(cluster);
      a.val.clusterDim.y = 1;
      a.val.clusterDim.z = 1;
    }
    if (pdl) {
      cudaLaunchAttribute& a = attr[cfg.numAttrs++];
      a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
      a.val.programmaticStreamSerializationAllowed = 1;
    }
  }
  LaunchConfig(const LaunchConfig&) = delete;  // cfg.attrs points into this object
  LaunchConfig& operator=(const LaunchConfig&) = delete;
};

// launch_kernel in thread-block clusters of `cluster` CTAs along x (1: a plain launch).
template <typename... KArgs, typename... Args>
cudaError_t launch_kernel_cluster(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                                  cudaStream_t stream, bool pdl, int cluster, Args&&... args) {
  const LaunchConfig c(grid, block, smem, stream, pdl, cluster);
  return cudaLaunchKernelEx(&c.cfg, kernel, std::forward<Args>(args)...);
}

template <typename... KArgs, typename... Args>
cudaError_t launch_kernel(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                          cudaStream_t stream, bool pdl, Args&&... args) {
  return launch_kernel_cluster(kernel, grid, block, smem, stream, pdl, 1, std::forward<Args>(args)...);
}

// How many clusters of `cluster` CTAs of `kernel` (launched with grid, block, smem) the device can
// hold at once (cudaOccupancyMaxActiveClusters).
template <typename... KArgs>
cudaError_t max_active_clusters(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, int cluster, int* n) {
  const LaunchConfig c(grid, block, smem, nullptr, false, cluster);
  return cudaOccupancyMaxActiveClusters(n, kernel, &c.cfg);
}

// A thread-safe cache of launch answers that cost API queries: *out = the value cached for `key`,
// else compute(&value) (run outside the lock: it may take other caches' locks), cached on success.
template <typename Key, typename V, typename F>
cudaError_t cached_query(std::mutex& mu, std::map<Key, V>& cache, const Key& key, V* out, F&& compute) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (const auto it = cache.find(key); it != cache.end()) {
      *out = it->second;
      return cudaSuccess;
    }
  }
  V v{};
  if (cudaError_t e = compute(&v)) return e;
  std::lock_guard<std::mutex> lock(mu);
  *out = cache[key] = v;
  return cudaSuccess;
}

// The largest dynamic shared memory a block of `kernel` may use on the current device: the opt-in
// limit less the kernel's static shared memory. The first call per (kernel, device) raises the
// kernel's attribute to it (later calls read a cache), so any launch up to *room is allowed.
inline cudaError_t dynamic_smem_room(const void* kernel, size_t* room) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, size_t> cache;
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev)) return e;
  return cached_query(mu, cache, std::make_pair(kernel, dev), room, [&](size_t* r) {
    int optin = 0;
    cudaFuncAttributes a{};
    if (cudaError_t e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev)) return e;
    if (cudaError_t e = cudaFuncGetAttributes(&a, kernel)) return e;
    *r = size_t(optin) > a.sharedSizeBytes ? size_t(optin) - a.sharedSizeBytes : 0;
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(*r));
  });
}

template <typename... KArgs>
cudaError_t dynamic_smem_room(void (*kernel)(KArgs...), size_t* room) {
  return dynamic_smem_room(reinterpret_cast<const void*>(kernel), room);
}

// Whether the device places one cluster of `cluster` CTAs of `kernel` with `threads` threads and `smem` bytes of
// dynamic shared memory (some devices or drivers cannot: the caller then takes a kernel without clusters). Cached
// per (kernel, device): a kernel is always asked with the same threads and bytes (its largest form's).
template <typename... KArgs>
bool clusters_fit(void (*kernel)(KArgs...), int cluster, int threads, size_t smem) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, int> cache;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  int fit = 0;
  const cudaError_t e =
      cached_query(mu, cache, std::make_pair(reinterpret_cast<const void*>(kernel), dev), &fit, [&](int* ok) {
        *ok = 0;
        size_t room = 0;
        int n = 0;
        if (dynamic_smem_room(kernel, &room) != cudaSuccess || room < smem ||
            max_active_clusters(kernel, dim3(unsigned(cluster)), dim3(unsigned(threads)), smem, cluster, &n) !=
                cudaSuccess) {
          (void)cudaGetLastError();
          return cudaSuccess;
        }
        *ok = n >= 1;
        return cudaSuccess;
      });
  return e == cudaSuccess && fit != 0;
}

// QWEN38_SPREAD (default 1): the dynamic shared memory to launch `blocks` CTAs of `threads` threads with, so
// that no SM can hold more than ceil(blocks / SMs) of them. A grid under one wave is then spread
// over the SMs evenly whatever else is resident when its CTAs are placed: a grid launched early
// behind its predecessor (PDL) otherwise fills the slots that happen to be free first, up to the
// kernel's occupancy on some SMs and fewer on others. `smem` (what the kernel uses) is returned
// unchanged when the grid fills the kernel's occupancy, when the knob is 0, or when no size
// within the block's limit caps it. Measured on the H200 (session 13, benchmarks/lab/pdl_ab.py):
// nvfp4_linear 12288x5120 (384 CTAs, four an SM) back to back with PDL 19.1 / 21.9 us at 1 / 16
// rows, 16.6 / 19.6 spread (16.6 / 18.5 without PDL); the other weight shapes and the GDN
// kernels within noise. Extra shared memory is never read: no bit changes. (The size: cap_smem below.)
inline bool spread_enabled() {
  const char* knob = std::getenv("QWEN38_SPREAD");
  return knob == nullptr || std::strcmp(knob, "0") != 0;
}

// The dynamic shared memory to launch `kernel` with so that no SM holds more than `cap` of its
// blocks: `smem` when its occupancy is already at most `cap` (or `cap` < 1), else the smallest size
// in (smem, room] that caps it, when one does (else `smem`). Extra shared memory is never read.
// The first call per (kernel, device, threads, smem, cap) searches (occupancy queries, not stream
// operations); later calls read a cache.
inline cudaError_t cap_smem(const void* kernel, int threads, size_t smem, int cap, size_t* out) {
  *out = smem;
  if (cap < 1) return cudaSuccess;
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, int, size_t, int>, size_t> cache;
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev)) return e;
  return cached_query(mu, cache, std::make_tuple(kernel, dev, threads, smem, cap), out, [&](size_t* best) {
    int natural = 0, occ = 0;
    size_t room = 0;
    *best = smem;
    if (cudaError_t e = dynamic_smem_room(kernel, &room)) return e;
    if (cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&natural, kernel, threads, smem)) return e;
    if (natural > 0 && cap < natural && room > smem) {
      if (cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kernel, threads, room)) return e;
      if (occ >= 1 && occ <= cap) {  // occupancy(lo) > cap >= occupancy(hi)
        size_t lo = smem, hi = room;
        while (hi - lo > 128) {
          const size_t mid = lo + (hi - lo) / 2;
          if (cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kernel, threads, mid)) return e;
          (occ <= cap ? hi : lo) = mid;
        }
        *best = hi;
      }
    }
    return cudaSuccess;
  });
}

template <typename... KArgs>
cudaError_t cap_smem(void (*kernel)(KArgs...), int threads, size_t smem, int cap, size_t* out) {
  return cap_smem(reinterpret_cast<const void*>(kernel), threads, smem, cap, out);
}

// The current device's SM count (cached per device).
inline cudaError_t device_sms(int* sms) {
  static std::mutex mu;
  static std::map<int, int> cache;
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev)) return e;
  return cached_query(mu, cache, dev, sms,
                      [&](int* n) { return cudaDeviceGetAttribute(n, cudaDevAttrMultiProcessorCount, dev); });
}

// The current device's compute capability major (cached per device).
inline cudaError_t device_cc_major(int* major) {
  static std::mutex mu;
  static std::map<int, int> cache;
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev)) return e;
  return cached_query(mu, cache, dev, major,
                      [&](int* m) { return cudaDeviceGetAttribute(m, cudaDevAttrComputeCapabilityMajor, dev); });
}

// The spread's cap of a grid of `blocks`: ceil(blocks / SMs) (0: the knob is off or no grid).
inline cudaError_t spread_cap(int64_t blocks, int* cap) {
  *cap = 0;
  if (!spread_enabled() || blocks <= 0) return cudaSuccess;
  int sms = 0;
  if (cudaError_t e = device_sms(&sms)) return e;
  const int64_t c = (blocks + sms - 1) / sms;
  *cap = c < (int64_t(1) << 30) ? int(c) : (1 << 30);
  return cudaSuccess;
}

inline cudaError_t spread_smem(const void* kernel, int threads, size_t smem, int64_t blocks, size_t* out) {
  int cap = 0;
  if (cudaError_t e = spread_cap(blocks, &cap)) return e;
  return cap_smem(kernel, threads, smem, cap, out);
}

template <typename... KArgs>
cudaError_t spread_smem(void (*kernel)(KArgs...), int threads, size_t smem, int64_t blocks, size_t* out) {
  return spread_smem(reinterpret_cast<const void*>(kernel), threads, smem, blocks, out);
}

}  // namespace qwen38
