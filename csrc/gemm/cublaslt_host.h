// Host helpers for the cuBLASLt matmuls of the prefill paths (nvfp4_linear.cpp, and any other op
// that calls cuBLASLt): descriptors released on every path, and the preference that tells the
// heuristic the workspace and each pointer's actual alignment (it assumes 256 bytes otherwise).
// Only in builds that found cuBLASLt (setup.py defines QWEN38_HAVE_CUBLASLT).
#pragma once

#if QWEN38_HAVE_CUBLASLT
#include <ATen/cuda/CUDAContextLight.h>  // the cuBLASLt handle and workspace torch keeps
#include <cublasLt.h>

#include <cstdint>

#include "common/host.h"  // num()

namespace qwen38::gemm {

// The largest power of two up to 256 that divides the address.
inline uint32_t alignment_of(const void* p) {
  uint32_t a = 256;
  while (a > 1 && reinterpret_cast<uintptr_t>(p) % a != 0) a /= 2;
  return a;
}

// One matmul's descriptors (A, B, C = D layouts), destroyed with the holder.
struct LtDescs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  LtDescs() = default;
  LtDescs(const LtDescs&) = delete;
  LtDescs& operator=(const LtDescs&) = delete;
  ~LtDescs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// Creates lt.pref: torch's cuBLASLt workspace size and the alignments of A, B and C = D.
inline bool lt_preference(LtDescs& lt, const void* a, const void* b, const void* d) {
  const size_t ws_size = at::cuda::getCUDABlasLtWorkspaceSize();
  const uint32_t al_a = alignment_of(a), al_b = alignment_of(b), al_d = alignment_of(d);
  auto set = [&](cublasLtMatmulPreferenceAttributes_t attr, const void* v, size_t size) {
    return cublasLtMatmulPreferenceSetAttribute(lt.pref, attr, v, size) == CUBLAS_STATUS_SUCCESS;
  };
  return cublasLtMatmulPreferenceCreate(&lt.pref) == CUBLAS_STATUS_SUCCESS &&
         set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_size, sizeof ws_size) &&
         set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a) &&
         set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b) &&
         set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof al_d) &&
         set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d);
}

// D = alpha A B + beta D with the heuristic's first algorithm for lt (descriptors and preference
// set), on torch's cuBLASLt handle and workspace. Returns false, having launched nothing, where the
// heuristic offers no algorithm; a failing matmul is an error of `op`.
inline bool lt_matmul(const char* op, const LtDescs& lt, const void* alpha, const void* a, const void* b,
                      const void* beta, void* d, cudaStream_t stream) {
  const cublasLtHandle_t handle = at::cuda::getCurrentCUDABlasLtHandle();
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  if (cublasLtMatmulAlgoGetHeuristic(handle, lt.op, lt.a, lt.b, lt.d, lt.d, lt.pref, 1, &heur, &found) !=
          CUBLAS_STATUS_SUCCESS || found == 0)
    return false;
  const cublasStatus_t st = cublasLtMatmul(handle, lt.op, alpha, a, lt.a, b, lt.b, beta, d, lt.d, d, lt.d, &heur.algo,
                                           at::cuda::getCUDABlasLtWorkspace(),
                                           at::cuda::getCUDABlasLtWorkspaceSize(), stream);
  TORCH_CHECK(st == CUBLAS_STATUS_SUCCESS, "qwen38.", op, ": cublasLtMatmul failed (status ", num(int(st)), ")");
  return true;
}

}  // namespace qwen38::gemm
#endif
