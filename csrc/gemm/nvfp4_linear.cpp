// Host side of nvfp4_linear and nvfp4_dequantize: check inputs -> choose the path -> launch.
//
// nvfp4_linear, by row count M (rows of x after collapsing its leading dims):
//   1..32 rows   the skinny kernel (gemm/nvfp4_linear_kernel.cuh): each row bit-identical to its
//                1-row call.
//   more rows    one of two prefill strategies, per call:
//     "chunked"  the skinny kernel on consecutive 32-row slices of x and y. The same arithmetic as
//                decode: every row is still bit-identical to its 1-row call; the weight is read once
//                per 32 rows, so the cost grows with ceil(M / 32) weight reads.
//     "dequant"  nvfp4_dequantize into a temporary [N, K] weight in x's dtype (exact products), then
//                one cuBLASLt matmul y = round(w_global * (x W^T) + bias): w_global read from
//                device memory as alpha, the bias added in the epilogue in fp32, one rounding to y's
//                dtype (lt_linear). Where cuBLASLt offers no algorithm for the combination (or
//                QWEN38_NVFP4_PREFILL_LT=0, or a build without cuBLASLt): one cuBLAS GEMM per row
//                chunk with fp32 output (at::mm with out_dtype float), then an epilogue kernel y =
//                round(acc * w_global + bias). Accurate within the float64 bound, but the summation
//                order is cuBLAS's (it may depend on M): no row invariance. Extra memory: N*K*2 bytes
//                for the weight (356 MB at 34816x5120) and, on the fallback with a 16-bit output, an
//                fp32 [rows, N] accumulator of at most kAccBytes per GEMM chunk.
//     "mma"      the tensor-core kernel of nvfp4_prefill_kernel.cu (K a multiple of 64): the weight
//                read once and decoded in the kernel, no temporary; within the float64 bound, each row
//                independent of the others and of the row count. On Hopper (sm_90a build) its
//                warpgroup-MMA form (nvfp4_wgmma_kernel.cu: TMA copies, the weight decoded into
//                wgmma's register operand), bit-identical to it; QWEN38_NVFP4_WGMMA=0 keeps the
//                mma.sync kernel there (tests, A/B timing).
//   "auto" (default) leaves "chunked" from the tile table's prefill_rows for the weight shape (the
//   sweep's measured crossover) or, without one, from nvfp4_prefill_dequant_rows(N, K) rows on, for
//   "dequant"; for "mma" from 33 rows (the knob aside) on a read-bound GPU (prefill_read_bound:
//   compute capability 12, GB10) where it serves K, and on Hopper where the wgmma form serves the
//   call and the weight is one of the shapes it was measured faster on (nvfp4_wgmma_auto: N >= 8192,
//   K <= 6144);
//   QWEN38_NVFP4_PREFILL=chunked|dequant|auto forces one (tests, A/B timing) and
//   QWEN38_NVFP4_PREFILL_ROWS=<rows> replaces the threshold of "auto" (tuning without a rebuild).
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "gemm/gemm_host.h"
#include "gemm/nvfp4_dequant_launch.h"
#include "gemm/nvfp4_linear_launch.h"

#include "gemm/cublaslt_host.h"

// at::mm(a, b, out_dtype) (aten::mm.dtype: bf16/fp16 inputs, fp32 output on CUDA) arrived in torch
// 2.8; pyproject.toml asks for torch >= 2.9.
#if TORCH_VERSION_MAJOR < 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 8)
#error "qwen38-kernels needs torch >= 2.8 (aten::mm.dtype, the fp32-output GEMM of the nvfp4 prefill path)"
#endif

namespace qwen38::gemm {

// Rows from which "auto" takes the dequant strategy; a function of the weight shape only.
// Measured on the H200 (benchmarks/results/h200/nvfp4_v3_reverted.md, 34816x5120): at 128 rows the
// chunked path took 533 us (the weight streamed once per 32 rows at the skinny kernel's speed) and
// the dequant path 228 us (cuBLAS alone 95 us); at 1024 rows dequant 712 us, cuBLAS 556 us. With a
// fixed ~130 us of dequantize + epilogue, dequant wins from about 64 rows (2 chunks ~240 us). Narrow weights (N < 1024) stream fast in the skinny kernel while their dequantize and GEMM
// launches dominate: 128 rows (not measured).
// Session 9 (4 tiles a warp at 17..32 rows; benchmarks/results/h200/nvfp4.md): at 64 rows chunked /
// dequant took 178 / 222 us on 34816x5120 and 107 / 114 us on 17408x5120, but 120 / 111 us on
// 5120x17408 (K 17408: the skinny kernel's 32 rows cost 59 us); at 96 rows three chunks lose
// everywhere. So K <= 6144 takes dequant from 65 rows, the rest from 64.
int64_t nvfp4_prefill_dequant_rows(int64_t n, int64_t k) {
  if (n < 1024) return 128;
  return k <= 6144 ? 65 : 64;
}

namespace {

constexpr const char* kOp = "nvfp4_linear";
// fp32 accumulator bytes per GEMM chunk of the dequant path (16-bit outputs): bounds the temporary
// at large M x N (e.g. 4096 rows of a 248320-row head would otherwise need 4 GB).
constexpr int64_t kAccBytes = int64_t(1) << 30;
constexpr int64_t kMinGemmRows = 256;

// QWEN38_NVFP4_DEPTH: the skinny kernel's weight ring depth (0: the kernel's rule by tiles per warp).
int ring_depth() {
  const char* v = std::getenv("QWEN38_NVFP4_DEPTH");
  if (v == nullptr || *v == '\0') return 0;
  char* end = nullptr;
  const long d = std::strtol(v, &end, 10);
  TORCH_CHECK_VALUE(end != v && *end == '\0' && d >= 2 && d <= 8, "qwen38.", kOp,
                    ": QWEN38_NVFP4_DEPTH must be an integer 2..8 (or unset for the built-in rule), got '", v, "'");
  return int(d);
}

// QWEN38_NVFP4_L2SPAN: the L2 fetch-size hint of the skinny kernel's weight copies (0, 128, 256).
int l2_span() {
  const char* v = std::getenv("QWEN38_NVFP4_L2SPAN");
  if (v == nullptr || *v == '\0') return 128;  // measured best at 1 row (benchmarks/results/h200/NOTES.md)
  TORCH_CHECK_VALUE(!std::strcmp(v, "0") || !std::strcmp(v, "128") || !std::strcmp(v, "256"), "qwen38.", kOp,
                    ": QWEN38_NVFP4_L2SPAN must be 0, 128 or 256, got '", v, "'");
  return std::atoi(v);
}

// A launch knob of auto, 0 or 1: -1 (auto, also unset or empty), 0 or 1; another value is an error
// naming the knob.
int auto01_mode(const char* knob) {
  const char* v = std::getenv(knob);
  if (v == nullptr || *v == '\0' || std::strcmp(v, "auto") == 0) return -1;
  TORCH_CHECK_VALUE(!std::strcmp(v, "0") || !std::strcmp(v, "1"), "qwen38.", kOp, ": ", knob,
                    " must be auto, 0 or 1, got '", v, "'");
  return *v - '0';
}

// QWEN38_NVFP4_STAGED: the register-stream kernel's staged body (weights through a cp.async ring;
// nvfp4_stream_kernel.cuh): -1 auto (by the grid's waves), 1 where compiled, 0 never.
int staged_mode() { return auto01_mode("QWEN38_NVFP4_STAGED"); }

// QWEN38_NVFP4_ONE_GROUP: the register-stream kernel's body at 1..8 rows (stream_launch.cuh
// use_one_group_xa): -1 auto (by the grid's rounds), 1 the x-as-A body, 0 the transposed body.
int one_group_mode() {
  const char* v = std::getenv("QWEN38_NVFP4_ONE_GROUP");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "auto") == 0) return -1;
  TORCH_CHECK_VALUE(!std::strcmp(v, "xa") || !std::strcmp(v, "t"), "qwen38.", kOp,
                    ": QWEN38_NVFP4_ONE_GROUP must be auto, xa or t, got '", v, "'");
  return v[0] == 'x' ? 1 : 0;
}

// QWEN38_NVFP4_FOUR_CTAS: the fragment-order kernel's 4-CTA form at 17..32 rows (stream_launch.cuh
// use_four): -1 auto (by the grid's rounds), 1 wherever compiled, 0 never.
int four_ctas_mode() { return auto01_mode("QWEN38_NVFP4_FOUR_CTAS"); }

bool aligned(const void* p, uintptr_t a) { return (reinterpret_cast<uintptr_t>(p) % a) == 0; }

// Rows from which auto leaves the 32-row slices: the knob, else the tile table's measured row count
// for the shape (v: its variant; not where auto's strategy is the wgmma form, `table` false: the
// sm_90 tables' crossovers were swept against dequant), else the rule (33 where auto's strategy is
// mma).
int64_t prefill_rows(int64_t n, int64_t k, const SkinnyVariant& v, bool auto_mma, bool table) {
  const char* e = std::getenv("QWEN38_NVFP4_PREFILL_ROWS");
  if (e == nullptr || *e == '\0') {
    if (v.prefill_rows > 0 && table) return v.prefill_rows;
    return auto_mma ? kSkinnyMaxRows + 1 : nvfp4_prefill_dequant_rows(n, k);
  }
  char* end = nullptr;
  const long long r = std::strtoll(e, &end, 10);
  TORCH_CHECK_VALUE(end != e && *end == '\0' && r > 0, "qwen38.", kOp,
                    ": QWEN38_NVFP4_PREFILL_ROWS must be a positive row count (or unset for the built-in rule), "
                    "got '", e, "'");
  return r;
}

// w_packed uint8 [N, K/2] (K a positive multiple of 32) and w_scale e4m3 [N, K/16], both contiguous,
// on `like`'s device, aligned for the 16-byte / 4-byte copies. Returns (N, K).
std::pair<int64_t, int64_t> check_nvfp4_weight(const char* op, const at::Tensor& w_packed, const at::Tensor& w_scale,
                                               const char* like_name, const at::Tensor& like) {
  TORCH_CHECK_VALUE(w_packed.scalar_type() == at::kByte && w_packed.dim() == 2, "qwen38.", op,
                    ": w_packed must be a 2-D uint8 tensor [N, K/2], got ", dtype_name(w_packed.scalar_type()),
                    " of shape ", shape_str(w_packed.sizes()));
  const int64_t n = w_packed.size(0), k = 2 * w_packed.size(1);
  TORCH_CHECK_VALUE(k % 32 == 0 && k > 0, "qwen38.", op,
                    ": K = 2 * w_packed.shape[1] must be a positive multiple of 32, got K = ", num(k),
                    " (w_packed shape ", shape_str(w_packed.sizes()), ")");
  TORCH_CHECK_VALUE(w_packed.is_contiguous(), "qwen38.", op, ": w_packed must be contiguous, got strides ",
                    shape_str(w_packed.strides()));
  TORCH_CHECK_VALUE(w_scale.scalar_type() == at::kFloat8_e4m3fn, "qwen38.", op,
                    ": w_scale must be torch.float8_e4m3fn, got ", dtype_name(w_scale.scalar_type()));
  TORCH_CHECK_VALUE(w_scale.dim() == 2 && w_scale.size(0) == n && w_scale.size(1) == k / 16, "qwen38.", op,
                    ": w_scale must be [N, K/16] = [", num(n), ", ", num(k / 16), "] for w_packed shape ",
                    shape_str(w_packed.sizes()), ", got ", shape_str(w_scale.sizes()));
  TORCH_CHECK_VALUE(w_scale.is_contiguous(), "qwen38.", op, ": w_scale must be contiguous (row-major), got strides ",
                    shape_str(w_scale.strides()));
  if (&w_packed != &like) check_same_device(op, "w_packed", w_packed, like_name, like);
  check_same_device(op, "w_scale", w_scale, like_name, like);
  if (n > 0) {
    TORCH_CHECK_VALUE(aligned(w_packed.data_ptr(), 16), "qwen38.", op, ": w_packed must be 16-byte aligned");
    TORCH_CHECK_VALUE(aligned(w_scale.data_ptr(), 4), "qwen38.", op, ": w_scale must be 4-byte aligned");
  }
  return {n, k};
}

void launch_dequantize(const char* op, const at::Tensor& w_packed, const at::Tensor& w_scale, const at::Tensor& out,
                       int64_t n, int64_t k, cudaStream_t stream) {
  Nvfp4DequantParams p;
  p.w = static_cast<const uint8_t*>(w_packed.data_ptr());
  p.scale = static_cast<const uint8_t*>(w_scale.data_ptr());
  p.out = out.data_ptr();
  p.n = n;
  p.k = k;
  check_launch(op, launch_nvfp4_dequantize(out_of(out.scalar_type()), p, knob_enabled("QWEN38_PDL", true), stream),
               out);
}

// The chunked strategy (and 1..32 rows): the skinny kernel on 32-row slices.
void run_skinny_chunks(const at::Tensor& x, const Nvfp4Params& params, const SkinnyVariant& v, int64_t m,
                       cudaStream_t stream) {
  const bool pdl = knob_enabled("QWEN38_PDL", true);
  Nvfp4Launch p(params);
  p.depth = ring_depth();
  p.l2span = l2_span();
  p.stream = knob_enabled("QWEN38_NVFP4_STREAM", true);
  p.xshare = knob_enabled("QWEN38_NVFP4_XSHARE", true);
  p.staged = staged_mode();
  p.one_group = one_group_mode();
  p.four = four_ctas_mode();
  p.xsplit = knob_choice(kOp, "QWEN38_NVFP4_XSPLIT", "auto", -1, {0, 1});  // (xsplit_kernel.cu)
  p.cluster = skinny_cluster(kOp);
  const XfragBuffer xf =
      xfrag_buffer(kOp, "QWEN38_NVFP4_XFRAG", p.stream && nvfp4_frag_serves(p.k, v), x, m, p.k, true);
  if (xf.from > 0) {
    p.xfrag = xf.buf.data_ptr();
    p.xfrag_from = xf.from;
    p.xfrag_one_group = xf.one_group;
  }
  const int64_t x_es = x.element_size();
  const int64_t y_es = p.out == int(Out::kF32) ? 4 : 2;
  const char* x0 = static_cast<const char*>(p.x);
  char* y0 = static_cast<char*>(p.y);
  for (int64_t r0 = 0; r0 < m; r0 += kSkinnyMaxRows) {
    p.m = std::min(kSkinnyMaxRows, m - r0);
    p.x = x0 + r0 * p.x_stride * x_es;
    p.y = y0 + r0 * p.n * y_es;
    check_launch(kOp, launch_nvfp4_skinny(act_of(x), p, v, pdl, stream), x);
  }
}

#if QWEN38_HAVE_CUBLASLT
cudaDataType_t lt_type(at::ScalarType t) {
  return t == at::kBFloat16 ? CUDA_R_16BF : t == at::kHalf ? CUDA_R_16F : CUDA_R_32F;
}

// y[M, N] = round(*w_global * (x[M, K] W[N, K]^T) + bias) by one cuBLASLt matmul (column-major view:
// D[N, M] = alpha op(A) B with A = W stored K x N and transposed, B = x stored K x M, ld x_stride):
// alpha and beta from device memory (graph safe, no host read), fp32 compute and scale, the bias
// added in fp32 by the epilogue, one rounding to y's dtype. Returns false, having launched nothing,
// where cuBLASLt has no algorithm for the combination, or N is not a multiple of 8 or a pointer not
// 16-byte aligned (the caller takes the fp32 GEMM + epilogue).
bool lt_linear(const at::Tensor& x, int64_t x_stride, const at::Tensor& wd, const at::Tensor& w_global,
               const std::optional<at::Tensor>& bias, const at::Tensor& y, int64_t m, int64_t n, int64_t k,
               cudaStream_t stream) {
  LtDescs lt;
  if (n % 8 != 0 || alignment_of(x.data_ptr()) < 16 || alignment_of(y.data_ptr()) < 16 ||
      (bias.has_value() && alignment_of(bias->data_ptr()) < 16))
    return false;
  const cudaDataType_t in = lt_type(x.scalar_type()), out = lt_type(y.scalar_type());
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  const cublasLtPointerMode_t pm = CUBLASLT_POINTER_MODE_DEVICE;
  if (cublasLtMatmulDescCreate(&lt.op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) return false;
  bool ok = cublasLtMatmulDescSetAttribute(lt.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulDescSetAttribute(lt.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulDescSetAttribute(lt.op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &pm, sizeof pm) == CUBLAS_STATUS_SUCCESS;
  if (ok && bias.has_value()) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    const void* bp = bias->data_ptr();
    const cudaDataType_t bt = lt_type(bias->scalar_type());
    ok = cublasLtMatmulDescSetAttribute(lt.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulDescSetAttribute(lt.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulDescSetAttribute(lt.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt) == CUBLAS_STATUS_SUCCESS;
  }
  ok = ok && cublasLtMatrixLayoutCreate(&lt.a, in, uint64_t(k), uint64_t(n), k) == CUBLAS_STATUS_SUCCESS &&
       cublasLtMatrixLayoutCreate(&lt.b, in, uint64_t(k), uint64_t(m), x_stride) == CUBLAS_STATUS_SUCCESS &&
       cublasLtMatrixLayoutCreate(&lt.d, out, uint64_t(n), uint64_t(m), n) == CUBLAS_STATUS_SUCCESS;
  ok = ok && lt_preference(lt, wd.data_ptr(), x.data_ptr(), y.data_ptr());
  if (!ok) return false;
  // beta = 0 from device memory (the pointer mode covers both scalars)
  const at::Tensor zero = at::zeros({1}, x.options().dtype(at::kFloat));
  return lt_matmul(kOp, lt, w_global.data_ptr<float>(), wd.data_ptr(), x.data_ptr(), zero.data_ptr<float>(),
                   y.data_ptr(), stream);
}
#endif

// The dequant strategy: temporary weight in x's dtype, then one cuBLASLt matmul with the scale and
// bias in its epilogue, or fp32 GEMM chunks and the epilogue kernel.
void run_dequant(const at::Tensor& x, const at::Tensor& w_packed, const at::Tensor& w_scale, const at::Tensor& w_global,
                 const std::optional<at::Tensor>& bias, int bias_dtype, const at::Tensor& y, at::ScalarType od, int64_t m,
                 int64_t n, int64_t k, int64_t x_stride, cudaStream_t stream) {
  const at::Tensor wd = at::empty({n, k}, x.options());
  launch_dequantize(kOp, w_packed, w_scale, wd, n, k, stream);
#if QWEN38_HAVE_CUBLASLT
  if (knob_enabled("QWEN38_NVFP4_PREFILL_LT", true) && lt_linear(x, x_stride, wd, w_global, bias, y, m, n, k, stream))
    return;
#endif
  const at::Tensor wt = wd.t();                                   // [K, N] view, no copy
  const at::Tensor x2 = x.as_strided({m, k}, {x_stride, 1});      // rows of x (row_stride checked them)
  const at::Tensor y2 = y.view({m, n});
  // fp32 output: the GEMM writes y itself and the epilogue runs in place; else an fp32 accumulator
  const bool in_place = od == at::kFloat;
  const int64_t rows = in_place ? m : std::min(m, std::max(kMinGemmRows, kAccBytes / (4 * n)));
  at::Tensor acc;
  if (!in_place) acc = at::empty({rows, n}, x.options().dtype(at::kFloat));
  const bool pdl = knob_enabled("QWEN38_PDL", true);
  for (int64_t r0 = 0; r0 < m; r0 += rows) {
    const int64_t r = std::min(rows, m - r0);
    at::Tensor a = in_place ? y2.narrow(0, r0, r) : acc.narrow(0, 0, r);
    at::mm_out(a, x2.narrow(0, r0, r), wt, at::kFloat);
    prefill_epilogue(kOp, a.data_ptr<float>(), w_global.data_ptr<float>(), bias, bias_dtype, y, od, r0, r, n, pdl,
                     stream);
  }
}

at::Tensor nvfp4_linear_cuda(const at::Tensor& x, const at::Tensor& w_packed, const at::Tensor& w_scale,
                             const at::Tensor& w_global, const std::optional<at::Tensor>& bias,
                             std::optional<at::ScalarType> out_dtype) {
  check_cuda(kOp, "x", x);
  check_activation(kOp, "x", x);
  const auto [n, k] = check_nvfp4_weight(kOp, w_packed, w_scale, "x", x);
  TORCH_CHECK_VALUE(x.size(-1) == k, "qwen38.", kOp, ": x.shape[-1] must equal K = ", num(k),
                    " (from w_packed shape ", shape_str(w_packed.sizes()), "), got x shape ", shape_str(x.sizes()));
  TORCH_CHECK_VALUE(w_global.scalar_type() == at::kFloat && w_global.numel() == 1, "qwen38.", kOp,
                    ": w_global must be a one-element float32 tensor, got ", dtype_name(w_global.scalar_type()),
                    " of shape ", shape_str(w_global.sizes()));
  check_same_device(kOp, "w_global", w_global, "x", x);
  const int bias_dtype = check_bias(kOp, bias, n, x);
  const at::ScalarType od = check_out_dtype(kOp, out_dtype, x);
  at::Tensor y = new_linear_output(x, n, od);
  const int64_t m = x.numel() / k;
  if (m == 0 || n == 0) return y;

  const int64_t x_stride = row_stride(kOp, "x", x);
  TORCH_CHECK_VALUE(aligned(x.data_ptr(), 16) && x_stride % 8 == 0, "qwen38.", kOp,
                    ": x rows must start on 16-byte boundaries (data pointer and row stride a multiple of 8 "
                    "elements), got row stride ", num(x_stride));

  const c10::cuda::CUDAGuard guard(x.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream(x.device().index()).stream();
  const SkinnyVariant v = skinny_variant_for(kOp, SkinnyOp::kNvfp4, "nvfp4_skinny.json", n, k);
  Nvfp4Params p;
  p.x = x.data_ptr();
  p.w = static_cast<const uint8_t*>(w_packed.data_ptr());
  p.scale = static_cast<const uint8_t*>(w_scale.data_ptr());
  p.global = w_global.data_ptr<float>();
  p.bias = bias.has_value() ? bias->data_ptr() : nullptr;
  p.bias_dtype = bias_dtype;
  p.y = y.data_ptr();
  p.m = m;
  p.n = n;
  p.k = k;
  p.x_stride = x_stride;
  p.out = int(out_of(od));
  bool dequant = false, mma = false, wgmma = false;
  if (m > kSkinnyMaxRows) {
    const Prefill mode = prefill_mode(kOp, "QWEN38_NVFP4_PREFILL", true);
    TORCH_CHECK_VALUE(mode != Prefill::kMma || nvfp4_prefill_serves(k), "qwen38.", kOp,
                      ": QWEN38_NVFP4_PREFILL=mma serves K a multiple of 64, got K = ", num(k),
                      " (use auto, chunked or dequant)");
    p.tile_rows = prefill_tile_rows(kOp);
    // the mma strategy's Hopper form (same bits): where the build and the device have it
    const int dev = x.device().index();
    wgmma = knob_enabled("QWEN38_NVFP4_WGMMA", true) && nvfp4_wgmma_ready(dev) && nvfp4_wgmma_serves(p);
    // auto's prefill strategy: mma on a read-bound GPU where it serves K, or in its wgmma form (which
    // serves K when it serves the call) on the weight shapes where that was measured faster, else
    // dequant
    const bool auto_wgmma = wgmma && nvfp4_wgmma_auto(n, k);
    const bool auto_mma = auto_wgmma || (nvfp4_prefill_serves(k) && prefill_read_bound(x));
    const bool past = mode == Prefill::kAuto && m >= prefill_rows(n, k, v, auto_mma, !auto_wgmma);
    mma = mode == Prefill::kMma || (past && auto_mma);
    dequant = mode == Prefill::kDequant || (past && !auto_mma);
  }
  if (dequant) {
    run_dequant(x, w_packed, w_scale, w_global, bias, bias_dtype, y, od, m, n, k, x_stride, stream);
    return y;
  }
  if (mma) {
    const bool pdl = knob_enabled("QWEN38_PDL", true);
    check_launch(kOp, wgmma ? launch_nvfp4_wgmma(act_of(x), p, pdl, stream) : launch_nvfp4_prefill(act_of(x), p, pdl, stream),
                 x);
    return y;
  }
  run_skinny_chunks(x, p, v, m, stream);
  return y;
}

at::Tensor nvfp4_dequantize_cuda(const at::Tensor& w_packed, const at::Tensor& w_scale, at::ScalarType dtype) {
  constexpr const char* op = "nvfp4_dequantize";
  check_cuda(op, "w_packed", w_packed);
  const auto [n, k] = check_nvfp4_weight(op, w_packed, w_scale, "w_packed", w_packed);
  TORCH_CHECK_VALUE(dtype == at::kBFloat16 || dtype == at::kHalf || dtype == at::kFloat, "qwen38.", op,
                    ": dtype must be bfloat16, float16 or float32, got ", dtype_name(dtype));
  at::Tensor out = new_output({n, k}, w_packed.options().dtype(dtype));
  if (n == 0) return out;
  const c10::cuda::CUDAGuard guard(w_packed.device());
  launch_dequantize(op, w_packed, w_scale, out, n, k, at::cuda::getCurrentCUDAStream(w_packed.device().index()).stream());
  return out;
}

}  // namespace
}  // namespace qwen38::gemm

TORCH_LIBRARY_IMPL(qwen38, CUDA, m) {
  m.impl("nvfp4_linear", &qwen38::gemm::nvfp4_linear_cuda);
  m.impl("nvfp4_dequantize", &qwen38::gemm::nvfp4_dequantize_cuda);
}
