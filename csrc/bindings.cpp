// The API's table of contents: every qwen38 op schema, grouped by family, one comment per op.
// CUDA implementations register in csrc/<family>/*.cpp (TORCH_LIBRARY_IMPL); the pure-PyTorch
// references register as CPU kernels and the fakes as Meta kernels from qwen38_kernels/ops/.
// pybind11 serves the module init and non-op helpers only.
#include <torch/extension.h>
#include <torch/library.h>

#include "gemm/nvfp4_linear_launch.h"
#include "gemm/skinny_variants.h"
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
  // The gated MLP's activation: x [..., 2I] = (gate, up) as the fused gate_up projection writes it;
  // y [..., I] = round(round(silu(gate)) * up), silu in fp32 (HF's act_fn(gate) * up, torch's bits).
  m.def("silu_mul(Tensor x) -> Tensor");

  // ---- gemm family (csrc/gemm/) -----------------------------------------------------------
  // y = round(w_global * sum_k x[m,k] * e2m1[n,k] * fp32(w_scale[n,k/16]) + bias[n]): x [..., K]
  // bf16/fp16; w_packed uint8 [N, K/2] (low nibble = even k); w_scale float8_e4m3fn [N, K/16];
  // w_global fp32 one element (multiplier, ModelOpt); bias [N] or None; y [..., N] in out_dtype
  // (default x's dtype; fp32 for an NVFP4 output head). Products exact, fp32 sum, one rounding.
  // Any row count: 1..32 rows the skinny kernel (each row bit-identical to its 1-row call); more rows
  // the prefill paths (32-row chunks of the skinny kernel, or dequantize once + an fp32-output GEMM;
  // QWEN38_NVFP4_PREFILL, csrc/gemm/nvfp4_linear.cpp).
  m.def("nvfp4_linear(Tensor x, Tensor w_packed, Tensor w_scale, Tensor w_global, Tensor? bias=None, "
        "ScalarType? out_dtype=None) -> Tensor");
  // W'[n, k] = e2m1(w_packed)[n, k] * fp32(w_scale[n, k/16]) as [N, K] in dtype (bfloat16, float16 or
  // float32): exact in all three (at most 6 significant bits). The global scale is not applied.
  m.def("nvfp4_dequantize(Tensor w_packed, Tensor w_scale, ScalarType dtype) -> Tensor");
  // y = round(sum_b fp32(S_b * w_scale_inv[n/128, b]) + bias[n]), S_b = the fp32 sum over the 128 k
  // of block b of x[m,k] * e4m3(w[n,k]) (products exact). x [..., K] bf16/fp16, K % 16 == 0; w
  // float8_e4m3fn [N, K]; w_scale_inv fp32 [ceil(N/128), ceil(K/128)] (a multiplier, as Qwen *-FP8
  // checkpoints store it); bias [N] or None; y [..., N] in out_dtype (default x's dtype).
  m.def("fp8_block_linear(Tensor x, Tensor w, Tensor w_scale_inv, Tensor? bias=None, "
        "ScalarType? out_dtype=None) -> Tensor");

  // ---- output head (csrc/gemm/head*.{cpp,cu,cuh}) ---------------------------------------------
  // logits[..., v] = sum_k fp32(x[..., k]) * fp32(w[v, k]) in fp32: x [..., K] bf16/fp16 (K % 16 ==
  // 0), w [V, K] in x's dtype, logits fp32 [..., V]. Each row bit-identical to its 1-row call.
  m.def("head_logits(Tensor x, Tensor w) -> Tensor");
  // Greedy winner of head_logits per row without writing the logits: (index int64 [...], logit fp32
  // [...]); ties go to the lowest index, NaN counts as the maximum; logit == head_logits(x, w)[.., index]
  // bit for bit. V >= 1.
  m.def("head_argmax(Tensor x, Tensor w) -> (Tensor, Tensor)");

  // ---- causal conv1d of the GDN layers (csrc/conv/) ------------------------------------------
  // Depthwise, width 4, + silu, per channel c of x [.., C] (bf16/fp16): s = ((w0 u0 + w1 u1) + w2 u2)
  // + w3 u3 in fp32 (products rounded first, no FMA) over the window u = (3 previous raw inputs,
  // the current one); y = round(silu(s)) (silu in float64, rounded to fp32, then to x's dtype).
  // conv_state [S, C, 3] in x's dtype (index 2 newest), weight [C, 4] x's dtype or fp32 (weight[c, 3]
  // multiplies the current input), slots [B] int32/int64 state rows (-1 = padding: zeros, no writes).
  // One token per sequence, x [B, C]; conv_state rows `slots` (distinct) shifted in place; y [B, C].
  m.def("conv_step(Tensor x, Tensor(a!) conv_state, Tensor weight, Tensor slots) -> Tensor");
  // Chain verify: x [B, T, C], T <= 16, lengths [B] or None (= T); conv_state read only; y [B, T, C]
  // (row t == the (t+1)-th of successive conv_step calls; rows at/after a length are zeros).
  m.def("conv_chain(Tensor x, Tensor conv_state, Tensor weight, Tensor slots, Tensor? lengths=None) -> Tensor");
  // Tree verify: x [B, T, C], T <= 64 nodes in depth-first pre-order, parents [B, T] (-1 = child of
  // the committed state); a node's window is its ancestors' inputs. conv_state read only; y [B, T, C].
  m.def("conv_tree(Tensor x, Tensor conv_state, Tensor weight, Tensor slots, Tensor parents, "
        "Tensor? lengths=None) -> Tensor");
  // Commit (data movement): conv_state rows `slots` (distinct) get the 3 newest raw inputs of [row,
  // accepted path of x [B, T, C]]. Chain (parents None): accepted [B] = prefix length in [0, T];
  // tree: accepted [B] = deepest accepted node in [-1, T).
  m.def("conv_commit(Tensor x, Tensor(a!) conv_state, Tensor slots, Tensor accepted, Tensor? parents=None) -> ()");

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

  // ---- attn family (qwen38_kernels/reference/attn.py holds the contract) ----------------------
  // Decode attention for T <= 64 query rows a sequence: q [B, T, Hq, D] bf16/fp16; k_cache, v_cache
  // [B, Hkv, L, D] in q's dtype (HF's layout; row j's own key at kv_lens[b] - lengths[b] + j); kv_lens
  // [B] int; mask [B, T, T] bool (row t sees row j's key; None = causal) or None; lengths [B] or None.
  // o [B, T, Hq, D]: fp32 scores, softmax and sum over the row's visible keys (the committed prefix,
  // then the rows it sees, in order), one rounding; a row's bits depend on its visible keys only.
  m.def("attn_decode(Tensor q, Tensor k_cache, Tensor v_cache, Tensor kv_lens, Tensor? mask=None, "
        "Tensor? lengths=None, *, float? scale=None) -> Tensor");
  // The CUDA kernels of attn_decode (csrc/attn), which attn_decode's CUDA path takes with
  // QWEN38_ATTN_KERNEL=1 (qwen38_kernels/ops/attn.py): opt-in until their first run on a GPU.
  m.def("_attn_decode_kernel(Tensor q, Tensor k_cache, Tensor v_cache, Tensor kv_lens, Tensor? mask=None, "
        "Tensor? lengths=None, *, float? scale=None) -> Tensor");
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

qwen38::gemm::SkinnyOp skinny_op(const std::string& op) {
  if (op == "nvfp4_linear") return qwen38::gemm::SkinnyOp::kNvfp4;
  if (op == "fp8_block_linear") return qwen38::gemm::SkinnyOp::kFp8Block;
  throw pybind11::value_error("qwen38: op must be 'nvfp4_linear' or 'fp8_block_linear', got '" + op + "'");
}

void set_skinny_variant(const std::string& op, int64_t n, int64_t k, int ksplit, int nt_narrow, int nt_wide,
                        int64_t prefill_rows) {
  const qwen38::gemm::SkinnyVariant v{ksplit, nt_narrow, nt_wide, prefill_rows};
  if (n <= 0 || k <= 0) throw pybind11::value_error("qwen38.set_skinny_variant: n and k must be positive");
  if (!qwen38::gemm::skinny_variant_valid(v))
    throw pybind11::value_error("qwen38.set_skinny_variant: ksplit must be 1, 2, 4 or 8, nt_narrow 1, 2 or 4, "
                                "nt_wide 1, 2 or 4 and prefill_rows 0 or more than 32; got " +
                                std::to_string(ksplit) + ", " + std::to_string(nt_narrow) + ", " +
                                std::to_string(nt_wide) + ", " + std::to_string(prefill_rows));
  qwen38::gemm::set_skinny_variant(skinny_op(op), n, k, v);
}

pybind11::tuple skinny_variant(const std::string& op, int64_t n, int64_t k) {
  bool from_table = false;
  const auto v = qwen38::gemm::lookup_skinny_variant(skinny_op(op), n, k, &from_table);
  return pybind11::make_tuple(v.ksplit, v.nt_narrow, v.nt_wide, v.prefill_rows, from_table);
}

pybind11::tuple skinny_default_variant(int64_t n, int64_t k) {
  const auto v = qwen38::gemm::skinny_default(n, k);
  return pybind11::make_tuple(v.ksplit, v.nt_narrow, v.nt_wide);
}

bool nvfp4_wgmma_ready(int device) { return qwen38::gemm::nvfp4_wgmma_ready(device); }

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "qwen38-kernels compiled extension (ops live in torch.ops.qwen38)";
  m.def("probe_device", &probe_device,
        "(binary_version, ptx_version) of a kernel on the current CUDA device, or the CUDA error "
        "string when this build cannot run there");
  m.def("set_skinny_variant", &set_skinny_variant, pybind11::arg("op"), pybind11::arg("n"), pybind11::arg("k"),
        pybind11::arg("ksplit"), pybind11::arg("nt_narrow"), pybind11::arg("nt_wide"),
        pybind11::arg("prefill_rows") = 0,
        "Registers the launch variant of a skinny kernel (nvfp4_linear, fp8_block_linear) for weight "
        "shape (n, k), with the row count from which auto takes the op's prefill strategy (0: the "
        "op's rule); the tile tables call this at import (qwen38_kernels/tables.py)");
  m.def("clear_skinny_variants", [](const std::string& op) { qwen38::gemm::clear_skinny_variants(skinny_op(op)); },
        "Drops every registered variant of op (shapes then use the default rule)");
  m.def("skinny_variant", &skinny_variant,
        "(ksplit, nt_narrow, nt_wide, prefill_rows, from_table): the variant a call with weight shape "
        "(n, k) uses (prefill_rows 0: the op's built-in rule)");
  m.def("skinny_default_variant", &skinny_default_variant,
        "(ksplit, nt_narrow, nt_wide) of the default rule for weight shape (n, k)");
  m.def("nvfp4_wgmma_ready", &nvfp4_wgmma_ready, pybind11::arg("device"),
        "whether nvfp4_linear's mma prefill strategy runs its warpgroup-MMA form on this CUDA device "
        "(compute capability 9.0 and an sm_90a build)");
}
