// Torch-free interface between the norm host launchers (norm.cpp) and the kernels (norm_kernel.cu).
#pragma once

#include <cuda_runtime.h>
#include <cstdint>

namespace qwen38::norm {

enum class Kind : int { kRms = 0, kAddRms = 1, kGated = 2 };
enum class DType : int { kBF16 = 0, kF16 = 1, kF32 = 2 };

struct Params {
  const void* x = nullptr;         // [rows, hidden], row stride x_stride, last dim contiguous
  const void* residual = nullptr;  // kAddRms: [rows, hidden], row stride res_stride
  const void* gate = nullptr;      // kGated:  [rows, hidden], row stride gate_stride
  const void* weight = nullptr;    // [hidden], contiguous
  void* y = nullptr;               // [rows, hidden], contiguous
  void* residual_out = nullptr;    // kAddRms: [rows, hidden], contiguous
  int64_t rows = 0;
  int64_t hidden = 0;
  int64_t x_stride = 0, res_stride = 0, gate_stride = 0;  // in elements
  float eps = 1e-6f;
  bool zero_centered = true;
};

// Largest row length (H) the kernels take; the host rejects longer rows with a message.
constexpr int64_t kMaxHiddenElems = 16384;

// Launches on `stream` (with programmatic dependent launch when `pdl`). The reduction order is
// fixed by `hidden` alone; the launch shape may follow `rows` without changing any bit.
// `streaming`: many rows may take the persistent streaming shape (else the v4 wide shape; the
// QWEN38_NORM_STREAM knob's A/B). Returns the launch error, if any.
cudaError_t launch(Kind kind, DType act, DType wt, const Params& p, bool pdl, bool streaming,
                   cudaStream_t stream);

// silu_mul (act_kernel.cuh): y[r, c] = round(round(silu(x[r, c])) * x[r, inter + c]).
struct ActParams {
  const void* x = nullptr;  // [rows, 2 * inter], row stride x_stride (elements), last dim contiguous
  void* y = nullptr;        // [rows, inter], contiguous
  int64_t rows = 0, inter = 0, x_stride = 0;
};

// Launches silu_mul on `stream` (act: kBF16 or kF16); returns the launch error, if any.
cudaError_t launch_silu_mul(DType act, const ActParams& p, bool pdl, cudaStream_t stream);

// Whether this build holds machine code the current device can run: fills the binary and PTX
// versions of a representative kernel (e.g. 90 for sm_90a) or returns the error.
cudaError_t probe_kernel_image(int* binary_version, int* ptx_version);

}  // namespace qwen38::norm
