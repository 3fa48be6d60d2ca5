// The API's table of contents: every qwen38 op schema, grouped by family, one comment per op.
// CUDA implementations register in csrc/<family>/*.cpp (TORCH_LIBRARY_IMPL); the pure-PyTorch
// references register as CPU kernels and the fakes as Meta kernels from qwen38_kernels/ops/.
// pybind11 serves the module init and non-op helpers only.
#include <torch/extension.h>
#include <torch/library.h>

#include "norm/norm_launch.h"

TORCH_LIBRARY(qwen38, m) {
  // ---- norm family (csrc/norm/) -----------------------------------------------------------
  // y = round(x * rsqrt(mean(x^2) + eps) * (1 + weight))  (zero_centered; else * weight) over the
  // last dim of x [..., H] (bf16/fp16); weight [H] in x's dtype or fp32. One rounding.
  m.def("rms_norm(Tensor x, Tensor weight, float eps, bool zero_centered) -> Tensor");
  // h = round(x + residual); y = rms_norm(h, weight, eps, zero_centered); returns (y, h).
  m.def("add_rms_norm(Tensor x, Tensor residual, Tensor weight, float eps, bool zero_centered)"
        " -> (Tensor, Tensor)");
  // GDN output norm: n = round(x * rsqrt(mean(x^2) + eps)); m = weight * n (rounded when weight
  // has x's dtype); y = round(m * silu(gate)). x, gate [..., H]; weight [H].
  m.def("rms_norm_gated(Tensor x, Tensor gate, Tensor weight, float eps) -> Tensor");

  // ---- gemm family (csrc/gemm/) -----------------------------------------------------------
  // y = round(w_global * sum_k x[m,k] * e2m1[n,k] * fp32(w_scale[n,k/16]) + bias[n]): x [..., K]
  // bf16/fp16; w_packed uint8 [N, K/2] (low nibble = even k); w_scale float8_e4m3fn [N, K/16];
  // w_global fp32 one element (multiplier, ModelOpt); bias [N] or None; y [..., N] in out_dtype
  // (default x's dtype; fp32 for an NVFP4 output head). Products exact, fp32 sum, one rounding.
  m.def("nvfp4_linear(Tensor x, Tensor w_packed, Tensor w_scale, Tensor w_global, Tensor? bias=None, "
        "ScalarType? out_dtype=None) -> Tensor");
  // y = round(sum_b fp32(S_b * w_scale_inv[n/128, b]) + bias[n]), S_b = the fp32 sum over the 128 k
  // of block b of x[m,k] * e4m3(w[n,k]) (products exact). x [..., K] bf16/fp16, K % 16 == 0; w
  // float8_e4m3fn [N, K]; w_scale_inv fp32 [ceil(N/128), ceil(K/128)] (a multiplier, as Qwen *-FP8
  // checkpoints store it); bias [N] or None; y [..., N] in out_dtype (default x's dtype).
  m.def("fp8_block_linear(Tensor x, Tensor w, Tensor w_scale_inv, Tensor? bias=None, "
        "ScalarType? out_dtype=None) -> Tensor");

  // ---- gdn family (csrc/gdn/) -------------------------------------------------------------
  // Gated DeltaNet decode and speculative verify over an fp32 state pool [S, 48, 128 (K), 128 (V)]
  // (fla/HF layout). q, k [.., 16, 128], v [.., 48, 128] bf16/fp16; g fp32 [.., 48] (log decay);
  // beta [.., 48] in q's dtype or fp32; slots [B] int32/int64 pool rows (-1 = padding, skipped).
  // Per v head h (q/k head h // 3): kn, qn = l2norm(k), l2norm(q) * scale; S = S * exp(g);
  // u = S^T kn; delta = (v - u) * beta; S = S + kn delta^T; o = round(S^T qn). No FMA, sums over
  // K in the fixed order of qwen38_kernels/reference/gdn.py. scale None = 1/sqrt(128).
  // One token per sequence; state_pool rows `slots` updated in place; returns o [B, 48, 128].
  m.def("gdn_step(Tensor q, Tensor k, Tensor v, Tensor g, Tensor beta, Tensor(a!) state_pool, "
        "Tensor slots, *, float? scale=None) -> Tensor");
  // gdn_step with the raw gate inputs a, b [B, 48] (bf16/fp16/fp32), A_log, dt_bias [48]:
  // beta = round(sigmoid(b)) in b's dtype, g = -exp(A_log) * softplus(a + dt_bias) (reference.gdn_gates).
  m.def("gdn_step_raw(Tensor q, Tensor k, Tensor v, Tensor a, Tensor b, Tensor A_log, Tensor dt_bias, "
        "Tensor(a!) state_pool, Tensor slots, *, float? scale=None) -> Tensor");
  // Chain verify: q, k, v, g, beta with a token dim [B, T, ...], T <= 16; lengths [B] or None (= T).
  // state_pool is read only. Returns o [B, T, 48, 128]: row t == the (t+1)-th of successive steps.
  m.def("gdn_chain_verify(Tensor q, Tensor k, Tensor v, Tensor g, Tensor beta, Tensor state_pool, "
        "Tensor slots, Tensor? lengths=None, *, float? scale=None) -> Tensor");
  // Tree verify: T <= 64 nodes per sequence in depth-first pre-order, parents [B, T] (-1 = child of
  // the committed state). state_pool is read only. Returns o [B, T, 48, 128]: node i == steps along
  // its root-to-node path.
  m.def("gdn_tree_verify(Tensor q, Tensor k, Tensor v, Tensor g, Tensor beta, Tensor state_pool, "
        "Tensor slots, Tensor parents, Tensor? lengths=None, *, float? scale=None) -> Tensor");
  // Commit: replays the accepted tokens from the verify's k, v, g, beta [B, T, ...] into the pool
  // rows `slots` (distinct). Chain (parents None): accepted [B] = prefix length in [0, T]; tree:
  // accepted [B] = deepest accepted node in [-1, T). The rows end as stepping would leave them.
  m.def("gdn_commit(Tensor k, Tensor v, Tensor g, Tensor beta, Tensor(a!) state_pool, Tensor slots, "
        "Tensor accepted, Tensor? parents=None) -> ()");
  // The pending commit folded into the next verify: gdn_commit(c_k, c_v, c_g, c_beta, state_pool,
  // slots, c_accepted, c_parents), then the chain verify (parents None) or the tree verify of
  // q..beta from the committed state, one kernel: each tile read once and written once.
  m.def("gdn_commit_verify(Tensor c_k, Tensor c_v, Tensor c_g, Tensor c_beta, Tensor c_accepted, "
        "Tensor? c_parents, Tensor q, Tensor k, Tensor v, Tensor g, Tensor beta, Tensor(a!) state_pool, "
        "Tensor slots, Tensor? parents=None, Tensor? lengths=None, *, float? scale=None) -> Tensor");
}

namespace {

// (binary_version, ptx_version) of a representative kernel on the current device, or an error
// string when this build holds no image that device can run.
pybind11::object probe_device() {
  int bin = 0, ptx = 0;
  const cudaError_t err = qwen38::norm::probe_kernel_image(&bin, &ptx);
  if (err != cudaSuccess) return pybind11::str(cudaGetErrorString(err));
  return pybind11::make_tuple(bin, ptx);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "qwen38-kernels compiled extension (ops live in torch.ops.qwen38)";
  m.def("probe_device", &probe_device,
        "(binary_version, ptx_version) of a kernel on the current CUDA device, or the CUDA error "
        "string when this build cannot run there");
}
