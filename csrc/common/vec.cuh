// Torch-free device helpers shared by every kernel family: aligned vectors and 16-bit <-> fp32
// conversions. Conversions round to nearest even (the _rn intrinsics), never through another
// 16-bit type: bf16 values are never rounded through fp16 (range loss) or vice versa.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>

namespace qwen38 {

// Every element of a float array of any shape (accumulators) to zero.
template <typename A>
__device__ __forceinline__ void zero_fill(A& a) {
  float* f = reinterpret_cast<float*>(&a);
#pragma unroll
  for (int i = 0; i < int(sizeof(A) / sizeof(float)); ++i) f[i] = 0.0f;
}

// N elements of T loaded/stored as one unit. Alignment is capped at 16 bytes (the widest single
// global load, LDG.128); a wider vector (8 x fp32 = 32 B) becomes two 16-byte loads.
template <typename T, int N>
struct alignas(sizeof(T) * N >= 16 ? 16 : sizeof(T) * N) Vec {
  T v[N];
};

template <typename T> __device__ __forceinline__ float to_f32(T v);
template <> __device__ __forceinline__ float to_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __device__ __forceinline__ float to_f32<__half>(__half v) { return __half2float(v); }

template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }

// fp32 -> T -> fp32: the value a tensor of dtype T would hold (a rounding point of the reference).
template <typename T>
__device__ __forceinline__ float round_to(float v) { return to_f32<T>(from_f32<T>(v)); }

}  // namespace qwen38
