// Host side of fp8_block_linear: check inputs -> launch the skinny kernel (1..32 rows). More rows
// take one of three strategies (QWEN38_FP8_PREFILL, KNOBS.md):
//   mma      the tensor-core kernel of fp8_prefill_kernel.cu: the contract's block arithmetic in
//            128 x 128 tiles (bf16 or fp16 x), within the float64 bound, each row independent of
//            the others, not bit-identical to the 1..32-row kernels.
//   chunked  the skinny kernel on 32-row slices: each row bit-identical to its 1-row call; the
//            weight is read once per slice.
//   dequant  (bf16 x, a build with cuBLASLt) the weight split once into three bf16 terms whose sum
//            is fp32(e4m3 * block scale) exactly (fp8_split_kernel.cu), three bf16 GEMMs with fp32
//            output summed into one accumulator, then the epilogue (bias, one rounding): exact
//            products summed in fp32 in cuBLAS's order - within the float64 bound, no row
//            invariance. N is taken in slices whose three terms fit kSplitBytes; the fp32
//            accumulator is y itself for fp32 output, else at most kAccBytes of rows at a time.
//   auto     mma from the tile table's prefill_rows for the weight shape (measured by the sweep) or,
//            without one, from kMmaRows (64) rows on (33 on a read-bound GPU: prefill_read_bound);
//            chunked below; dequant only when asked for.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "gemm/gemm_host.h"
#include "gemm/fp8_block_linear_launch.h"

#include "gemm/cublaslt_host.h"

namespace qwen38::gemm {
namespace {

// QWEN38_FP8_STREAM: unset or 1 -> 1 (the register-stream kernel where it serves, 1..32 rows),
// "narrow" -> 2 (1..16 rows only), off -> 0 (the skinny kernel).
int fp8_stream_mode() {
  const char* v = std::getenv("QWEN38_FP8_STREAM");
  if (v != nullptr && std::strcmp(v, "narrow") == 0) return 2;
  return knob_enabled("QWEN38_FP8_STREAM", true) ? 1 : 0;
}

constexpr const char* kOp = "fp8_block_linear";

constexpr int64_t kSplitBytes = int64_t(384) << 20;  // the three bf16 terms of one N slice
constexpr int64_t kAccBytes = int64_t(1) << 30;      // the fp32 accumulator of one row slice
constexpr int64_t kMinGemmRows = 256;

// Rows from which "auto" takes the mma strategy where the tile table gives none (and the GPU is not
// read-bound: prefill_read_bound). Measured on the H200 (session 12, benchmarks/lab/prefill_ab.py):
// at 64 rows the mma kernel (64-row tiles) took 167 us on 34816x5120 and 64.8 on 10240x5120, 32-row
// slices 214.6 and 89.1 (two slices); at 48 rows the slices cost about 1.5 x 107 us. Session 11's
// kernel (128-row tiles, two stages of 128 k) took 256 us at 64 rows, when the rule was 65.
constexpr int64_t kMmaRows = 64;

#if QWEN38_HAVE_CUBLASLT
// D[m, nn] (fp32, row stride ldd) = x[m, K] t[nn, K]^T + beta D (beta 0 or 1): one cuBLASLt matmul
// in the column-major view (D^T [nn, m] = t * x^T), bf16 inputs, fp32 compute. Scalars from the host
// (constants: graph safe). Returns false, having launched nothing, where cuBLASLt has no algorithm.
bool lt_gemm_f32(const void* x, int64_t x_stride, const void* t, float* d, int64_t ldd, int64_t m, int64_t nn,
                 int64_t k, float beta, cudaStream_t stream) {
  LtDescs lt;
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  if (cublasLtMatmulDescCreate(&lt.op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) return false;
  const bool ok =
      cublasLtMatmulDescSetAttribute(lt.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) == CUBLAS_STATUS_SUCCESS &&
      cublasLtMatmulDescSetAttribute(lt.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) == CUBLAS_STATUS_SUCCESS &&
      cublasLtMatrixLayoutCreate(&lt.a, CUDA_R_16BF, uint64_t(k), uint64_t(nn), k) == CUBLAS_STATUS_SUCCESS &&
      cublasLtMatrixLayoutCreate(&lt.b, CUDA_R_16BF, uint64_t(k), uint64_t(m), x_stride) == CUBLAS_STATUS_SUCCESS &&
      cublasLtMatrixLayoutCreate(&lt.d, CUDA_R_32F, uint64_t(nn), uint64_t(m), ldd) == CUBLAS_STATUS_SUCCESS &&
      lt_preference(lt, t, x, d);
  if (!ok) return false;
  const float alpha = 1.f;
  return lt_matmul(kOp, lt, &alpha, t, x, &beta, d, stream);
}
#endif

// Whether the dequant strategy can serve this call (bf16 x, cuBLASLt in the build).
bool dequant_serves(const at::Tensor& x) {
#if QWEN38_HAVE_CUBLASLT
  return x.scalar_type() == at::kBFloat16;
#else
  (void)x;
  return false;
#endif
}

// The dequant strategy (see the top of this file). Returns false, having written nothing, where
// cuBLASLt offers no algorithm (the caller takes the chunked strategy).
bool run_dequant(const at::Tensor& x, int64_t x_stride, const at::Tensor& w, const at::Tensor& w_scale_inv,
                 const std::optional<at::Tensor>& bias, int bias_dtype, const at::Tensor& y, at::ScalarType od,
                 int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
#if QWEN38_HAVE_CUBLASLT
  const bool pdl = knob_enabled("QWEN38_PDL", true);
  const int64_t gk = w_scale_inv.size(1);
  const int64_t nc = std::min(n, std::max<int64_t>(128, kSplitBytes / (6 * k) / 128 * 128));  // whole scale rows
  const at::Tensor terms = at::empty({3, nc, k}, x.options());
  const bool in_place = od == at::kFloat;
  const int64_t rows = in_place ? m : std::min(m, std::max(kMinGemmRows, kAccBytes / (4 * n)));
  at::Tensor acc;
  if (!in_place) acc = at::empty({rows, n}, x.options().dtype(at::kFloat));
  const at::Tensor one = at::ones({1}, x.options().dtype(at::kFloat));  // the epilogue's multiplier
  const char* x0 = static_cast<const char*>(x.data_ptr());
  const auto* w0 = static_cast<const uint8_t*>(w.data_ptr());
  for (int64_t r0 = 0; r0 < m; r0 += rows) {
    const int64_t r = std::min(rows, m - r0);
    float* a = in_place ? static_cast<float*>(y.data_ptr()) + r0 * n : acc.data_ptr<float>();
    const void* xr = x0 + r0 * x_stride * int64_t(x.element_size());
    for (int64_t n0 = 0; n0 < n; n0 += nc) {
      const int64_t nn = std::min(nc, n - n0);
      Fp8SplitParams s;
      s.w = w0 + n0 * k;
      s.scale = w_scale_inv.data_ptr<float>() + (n0 / 128) * gk;
      s.t0 = terms[0].data_ptr();
      s.t1 = terms[1].data_ptr();
      s.t2 = terms[2].data_ptr();
      s.n = nn;
      s.k = k;
      s.gk = gk;
      check_launch(kOp, launch_fp8_split(s, pdl, stream), x);
      // the smallest term first (the order changes nothing the bound covers)
      for (int t = 2; t >= 0; --t) {
        if (!lt_gemm_f32(xr, x_stride, terms[t].data_ptr(), a + n0, n, r, nn, k, t == 2 ? 0.f : 1.f, stream)) {
          TORCH_CHECK(t == 2 && n0 == 0 && r0 == 0, "qwen38.", kOp,
                      ": cuBLASLt offered no algorithm after it had offered one for the same shapes");
          return false;
        }
      }
    }
    prefill_epilogue(kOp, a, one.data_ptr<float>(), bias, bias_dtype, y, od, r0, r, n, pdl, stream);
  }
  return true;
#else
  (void)x, (void)x_stride, (void)w, (void)w_scale_inv, (void)bias, (void)bias_dtype, (void)y, (void)od, (void)m,
      (void)n, (void)k, (void)stream;
  return false;
#endif
}

at::Tensor fp8_block_linear_cuda(const at::Tensor& x, const at::Tensor& w, const at::Tensor& w_scale_inv,
                                 const std::optional<at::Tensor>& bias, std::optional<at::ScalarType> out_dtype) {
  check_cuda(kOp, "x", x);
  check_activation(kOp, "x", x);
  TORCH_CHECK_VALUE(w.scalar_type() == at::kFloat8_e4m3fn && w.dim() == 2, "qwen38.", kOp,
                    ": w must be a 2-D float8_e4m3fn tensor [N, K], got ", dtype_name(w.scalar_type()),
                    " of shape ", shape_str(w.sizes()));
  const int64_t n = w.size(0), k = w.size(1);
  TORCH_CHECK_VALUE(k > 0 && k % 16 == 0, "qwen38.", kOp, ": w must have K = w.shape[1] a positive multiple of 16, got ",
                    num(k));
  TORCH_CHECK_VALUE(x.size(-1) == k, "qwen38.", kOp, ": x.shape[-1] must equal K = ", num(k), " (w shape ",
                    shape_str(w.sizes()), "), got x shape ", shape_str(x.sizes()));
  TORCH_CHECK_VALUE(w.is_contiguous(), "qwen38.", kOp, ": w must be contiguous (row-major)");
  const int64_t gn = (n + 127) / 128, gk = (k + 127) / 128;
  TORCH_CHECK_VALUE(w_scale_inv.scalar_type() == at::kFloat, "qwen38.", kOp,
                    ": w_scale_inv must be float32, got ", dtype_name(w_scale_inv.scalar_type()));
  TORCH_CHECK_VALUE(w_scale_inv.dim() == 2 && w_scale_inv.size(0) == gn && w_scale_inv.size(1) == gk, "qwen38.", kOp,
                    ": w_scale_inv must be [ceil(N/128), ceil(K/128)] = [", num(gn), ", ", num(gk), "] for w shape ",
                    shape_str(w.sizes()), ", got ", shape_str(w_scale_inv.sizes()));
  TORCH_CHECK_VALUE(w_scale_inv.is_contiguous(), "qwen38.", kOp, ": w_scale_inv must be contiguous");
  check_same_device(kOp, "w", w, "x", x);
  check_same_device(kOp, "w_scale_inv", w_scale_inv, "x", x);
  const int bias_dtype = check_bias(kOp, bias, n, x);
  const at::ScalarType od = check_out_dtype(kOp, out_dtype, x);
  at::Tensor y = new_linear_output(x, n, od);
  const int64_t m = x.numel() / k;
  if (m == 0 || n == 0) return y;
  const int64_t x_stride = row_stride(kOp, "x", x);
  check_x_rows_aligned(kOp, x, x_stride);
  TORCH_CHECK_VALUE(reinterpret_cast<uintptr_t>(w.data_ptr()) % 16 == 0, "qwen38.", kOp, ": w must be 16-byte aligned");

  Fp8BlockParams p;
  p.x = x.data_ptr();
  p.w = static_cast<const uint8_t*>(w.data_ptr());
  p.scale = w_scale_inv.data_ptr<float>();
  p.bias = bias.has_value() ? bias->data_ptr() : nullptr;
  p.bias_dtype = bias_dtype;
  p.y = y.data_ptr();
  p.n = n;
  p.k = k;
  p.x_stride = x_stride;
  p.out = int(out_of(od));
  p.stream = fp8_stream_mode();
  p.cluster = skinny_cluster(kOp);
  const SkinnyVariant v = skinny_variant_for(kOp, SkinnyOp::kFp8Block, "fp8_block.json", n, k);
  const c10::cuda::CUDAGuard guard(x.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream(x.device().index()).stream();
  const bool pdl = knob_enabled("QWEN38_PDL", true);
  if (m > kSkinnyMaxRows) {
    const Prefill mode = prefill_mode(kOp, "QWEN38_FP8_PREFILL", true);
    // the table's, else the rule
    const int64_t mma_rows = v.prefill_rows > 0 ? v.prefill_rows : prefill_read_bound(x) ? kSkinnyMaxRows + 1 : kMmaRows;
    if (mode == Prefill::kMma || (mode == Prefill::kAuto && m >= mma_rows)) {
      p.m = m;
      p.tile_rows = prefill_tile_rows(kOp);
      check_launch(kOp, launch_fp8_prefill(act_of(x), p, pdl, stream), x);
      return y;
    }
    TORCH_CHECK_VALUE(mode != Prefill::kDequant || dequant_serves(x), "qwen38.", kOp,
                      ": QWEN38_FP8_PREFILL=dequant serves bfloat16 x in a build with cuBLASLt; got x of dtype ",
                      dtype_name(x.scalar_type()), " (use auto or chunked)");
    if (mode == Prefill::kDequant && run_dequant(x, x_stride, w, w_scale_inv, bias, bias_dtype, y, od, m, n, k, stream)) return y;
  }
  // 33..64 rows (auto) or chunked: the skinny kernel on 32-row slices (each row still bit-identical
  // to its 1-row call; the weight is read once per slice).
  Fp8Launch c(p);
  // QWEN38_FP8_THREE_CTAS: the fragment-order kernel's 3-CTA form at 17..24 rows (stream_launch.cuh use_four)
  c.four = knob_choice(kOp, "QWEN38_FP8_THREE_CTAS", "auto", -1, {0, 1});
  // QWEN38_FP8_XSPLIT: the k-split-across-CTAs kernel (xsplit_kernel.cu)
  c.xsplit = knob_choice(kOp, "QWEN38_FP8_XSPLIT", "auto", -1, {0, 1});
  const XfragBuffer xf = xfrag_buffer(kOp, "QWEN38_FP8_XFRAG", p.stream != 0 && fp8_frag_serves(k, v), x, m, k);
  if (xf.from > 0) {
    c.xfrag = xf.buf.data_ptr();
    c.xfrag_from = xf.from;
  }
  const int64_t x_es = x.element_size(), y_es = od == at::kFloat ? 4 : 2;
  const char* x0 = static_cast<const char*>(p.x);
  char* y0 = static_cast<char*>(p.y);
  for (int64_t r0 = 0; r0 < m; r0 += kSkinnyMaxRows) {
    c.m = std::min(kSkinnyMaxRows, m - r0);
    c.x = x0 + r0 * x_stride * x_es;
    c.y = y0 + r0 * n * y_es;
    check_launch(kOp, launch_fp8_block_skinny(act_of(x), c, v, pdl, stream), x);
  }
  return y;
}

}  // namespace
}  // namespace qwen38::gemm

TORCH_LIBRARY_IMPL(qwen38, CUDA, m) { m.impl("fp8_block_linear", &qwen38::gemm::fp8_block_linear_cuda); }
