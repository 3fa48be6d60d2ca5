"""Pure-PyTorch references of the block-FP8 linear and the output head: the contract the CUDA kernels
answer to.

Same names and arguments as the ops (``torch.ops.qwen38.<name>``). ``acc_dtype`` is the arithmetic
between rounding points: float32 is the reference itself; float64 gives the float64 evaluation
(rounded once, to the output dtype) the tests measure against.

fp8_block_linear (weight layout: qwen38_kernels/formats_fp8.py, MODEL.md "Weight formats")::

    nb = ceil(K / 128) blocks along k; block b covers k in [128 b, min(128 (b + 1), K))
    S[m, n, b] = sum_{k in block b} fp32(x[m, k]) * fp32(w[n, k])        # exact products, fp32 sum
    T[m, n, b] = S[m, n, b] * w_scale_inv[n // 128, b]                     # rounded to fp32
    acc = T[.., 0];  acc = acc + T[.., b] for b = 1, 2, ..., nb - 1        # this order, fp32
    y[m, n] = round_to_out_dtype( acc + fp32(bias[n]) )                    # one rounding at the end

``x`` bf16/fp16 [..., K] (K a positive multiple of 16; no activation quantization), ``w``
float8_e4m3fn [N, K], ``w_scale_inv`` fp32 [ceil(N/128), ceil(K/128)] (a multiplier), ``bias`` None
or [N] (x's dtype or fp32), ``out_dtype`` None (x's dtype), bf16, fp16 or fp32. Returns a
contiguous [..., N]. N and K need not be multiples of 128: the last block is partial (K = 176: a
128-wide block and a 48-wide one), the last tile row too (N = 48: one tile row).

The products are exact in fp32 (e4m3 decodes exactly to bf16/fp16: 4 significant bits; times a
bf16 (8) or fp16 (11) value: at most 15 bits), which is what a tensor core computes from the
16-bit operands. Within a block the order of the fp32 sum is the matmul's (unspecified here; a kernel
fixes its own by the weight shape); the multiply by the block scale and the add into the
accumulator are two roundings (a kernel that fuses them into one FMA is one rounding fewer; both
lie inside the bound below, neither is bit-identical to the other); blocks are added in increasing
order, starting from block 0's term (not from a +0, which would turn a -0 into +0).

head_logits: ``x`` [..., K] bf16 or fp16 (the model: bf16 [M, 5120]), ``w`` [V, K] in x's dtype ->
fp32 logits [..., V], ``logits[m, v] = sum_k fp32(x[m, k]) * fp32(w[v, k])`` (products exact in fp32:
at most 16 significant bits for bf16 x bf16, 22 for fp16 x fp16), fp32 accumulation, no output rounding
beyond the fp32 sum itself.

head_argmax: per row the greedy winner ``(index int64, logit fp32)`` of head_logits. Tie rule: the
LOWEST index among the maxima (``==`` comparison, so +0 and -0 tie); a row holding a NaN logit
returns the lowest NaN index and that NaN (NaN counts as the maximum, as in ``torch.argmax``). The
returned logit is ``head_logits(x, w)[m, index]`` bit for bit.

Row invariance (DESIGN.md): every row is computed alone, by the same sequence of operations whatever
M is: a fresh fp32 copy of the one row, matmuls whose shapes depend on (N, K) only (the weight cut
into row chunks whose size is a function of K), then elementwise steps. Nothing one row computes
reads another row, so the row's bits cannot depend on M or on its position, and a NaN or Inf in one
row stays in that row. (One M-row matmul would not do: a BLAS may block and vectorize the
reduction differently for different M.)

Accuracy: an fp32 sum of L exact products is within gamma_{L-1} * sum |products| of the exact sum
for ANY order, but that is not within half an output ulp where terms cancel, so no fp32 evaluation is
within 1 ulp of the float64 evaluation everywhere. ``fp8_block_linear_f64_bound`` and
``head_logits_f64_bound`` give the float64 evaluation and that bound, the criterion of the tests.
"""
from __future__ import annotations

import torch

from .._checks import _fail
from .._checks_fp8 import FP8_BLOCK, check_fp8_block_linear, check_head

__all__ = ["fp8_block_linear", "fp8_block_linear_f64_bound", "head_logits", "head_logits_f64_bound",
           "head_argmax"]

_ACC_DTYPES = (torch.float32, torch.float64)
# Weight rows decoded at a time: about 4M elements, a function of K only (the reduction order must
# not depend on M, and the memory must not grow with N: the head has 248320 rows).
_CHUNK_ELEMS = 1 << 22


def _check_acc(op: str, acc_dtype):
    if acc_dtype not in _ACC_DTYPES:
        _fail(op, f"acc_dtype must be torch.float32 or torch.float64, got {acc_dtype!r}")


def _row_chunk(k: int) -> int:
    """Weight rows per chunk: a multiple of 128 (whole tile rows), a function of K only."""
    return max(FP8_BLOCK, (_CHUNK_ELEMS // k) // FP8_BLOCK * FP8_BLOCK)


# ---- fp8_block_linear ----------------------------------------------------------------------------


def _block_terms(x2: torch.Tensor, w: torch.Tensor, scale_rows: torch.Tensor, acc: torch.dtype) -> torch.Tensor:
    """T [M, nb, n]: for each row of ``x2`` alone, the per-block sums of exact products times the
    block scales. ``w`` float8 [n, K] (a chunk of weight rows), ``scale_rows`` [n, nb] in ``acc``."""
    m, k = x2.shape
    n = w.shape[0]
    wd = w.to(acc)                                                            # exact decode
    bounds = [(k0, min(k, k0 + FP8_BLOCK)) for k0 in range(0, k, FP8_BLOCK)]
    wt = [wd[:, k0:k1].t().contiguous() for k0, k1 in bounds]                 # nb x [L, n]
    sums = torch.empty(m, len(bounds), n, dtype=acc, device=x2.device)
    for r in range(m):
        xr = x2[r].to(acc)  # a fresh [K] allocation: the same calls for every M
        for b, (k0, k1) in enumerate(bounds):
            # one [1, L] x [L, n] product per block (a batched matmul would do the same sums, but
            # runs far slower on a few CPU threads)
            sums[r, b] = (xr[k0:k1].reshape(1, k1 - k0) @ wt[b])[0]
    return sums * scale_rows.t().unsqueeze(0)                                 # one rounding per term


def fp8_block_linear(x: torch.Tensor, w: torch.Tensor, w_scale_inv: torch.Tensor,
                     bias: torch.Tensor | None = None, out_dtype: torch.dtype | None = None,
                     *, acc_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    n, k = check_fp8_block_linear(x, w, w_scale_inv, bias, out_dtype)
    _check_acc("fp8_block_linear", acc_dtype)
    out = x.dtype if out_dtype is None else out_dtype
    lead = tuple(x.shape[:-1])
    x2 = x.reshape(-1, k)
    m = x2.shape[0]
    y = torch.empty(m, n, dtype=acc_dtype, device=x.device)
    chunk = _row_chunk(k)
    for n0 in range(0, n, chunk):
        n1 = min(n, n0 + chunk)
        rows = torch.arange(n0, n1, device=x.device) // FP8_BLOCK
        terms = _block_terms(x2, w[n0:n1], w_scale_inv[rows].to(acc_dtype), acc_dtype)  # [M, nb, n1-n0]
        a = terms[:, 0].clone()
        for b in range(1, terms.shape[1]):  # blocks in increasing k, one rounding per add
            a = a + terms[:, b]
        y[:, n0:n1] = a
    if bias is not None:
        y = y + bias.to(acc_dtype)
    return y.to(out).reshape(*lead, n).contiguous()


_U32 = 2.0 ** -24  # unit roundoff of fp32
_U64 = 2.0 ** -53  # unit roundoff of float64


def _gamma(j: int, u: float) -> float:
    return j * u / (1 - j * u)


def fp8_block_linear_f64_bound(x: torch.Tensor, w: torch.Tensor, w_scale_inv: torch.Tensor,
                               bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(y64, err)``, both float64 [..., N]: ``y64`` the float64 evaluation of fp8_block_linear
    before its output rounding (W dequantized exactly in float64), ``err`` a bound on how far any
    fp32 evaluation of the contract (any order within a block, block terms rounded or fused, blocks
    in any fixed order, bias added, each step rounded to fp32) can be from the exact value, plus the
    float64 evaluation's own error::

        mag = sum_k |x[m, k] * w[n, k] * w_scale_inv[n // 128, k // 128]| + |bias[n]|
        err = (gamma32_{K + nb + 2} + gamma64_{K + nb + 2}) * mag,   gamma_j = j u / (1 - j u)

    (every product is exact; a term passes through at most L - 1 block additions, one scale
    multiply, nb - 1 block additions and the bias add: fewer than K + nb + 2 roundings). An output
    ``y`` of dtype ``t`` is then correct when ``|y - y64| <= spacing_t(y) / 2 + err`` (spacing: the
    gap from |y| to the next value up), the spacing term dropped for fp32 outputs.
    """
    n, k = check_fp8_block_linear(x, w, w_scale_inv, bias, None, op="fp8_block_linear")
    f64 = torch.float64
    x2 = x.reshape(-1, k).to(f64)
    nb = w_scale_inv.shape[1]
    s = w_scale_inv.to(f64).repeat_interleave(FP8_BLOCK, 0)[:n].repeat_interleave(FP8_BLOCK, 1)[:, :k]
    wd = w.to(f64) * s                                   # exact
    y64 = x2 @ wd.t()
    mag = x2.abs() @ wd.abs().t()
    if bias is not None:
        y64 = y64 + bias.to(f64)
        mag = mag + bias.to(f64).abs()
    j = k + nb + 2
    err = (_gamma(j, _U32) + _gamma(j, _U64)) * mag
    lead = tuple(x.shape[:-1])
    return y64.reshape(*lead, n), err.reshape(*lead, n)


# ---- the output head -----------------------------------------------------------------------------


def head_logits(x: torch.Tensor, w: torch.Tensor, *, acc_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    v, k = check_head(x, w, "head_logits")
    _check_acc("head_logits", acc_dtype)
    lead = tuple(x.shape[:-1])
    x2 = x.reshape(-1, k)
    m = x2.shape[0]
    acc = torch.empty(m, v, dtype=acc_dtype, device=x.device)
    chunk = _row_chunk(k)
    for v0 in range(0, v, chunk):
        v1 = min(v, v0 + chunk)
        wt = w[v0:v1].to(acc_dtype).t()  # [K, v1 - v0], exact
        for r in range(m):
            xr = x2[r:r + 1].to(acc_dtype)  # a fresh [1, K] allocation: the same call for every M
            acc[r, v0:v1] = (xr @ wt)[0]
    return acc.to(torch.float32).reshape(*lead, v).contiguous()


def head_logits_f64_bound(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(y64, err)``, float64 [..., V]: the float64 evaluation of head_logits and a bound on how far
    any fp32 sum of the (exact) products, in any order, can be from it:
    ``err = (gamma32_K + gamma64_K) * sum_k |x[m, k] * w[v, k]|``. The fp32 logits ``y`` are
    correct when ``|y - y64| <= err`` (no output rounding: the fp32 sum is the output)."""
    v, k = check_head(x, w, "head_logits")
    f64 = torch.float64
    x2 = x.reshape(-1, k).to(f64)
    wd = w.to(f64)
    y64 = x2 @ wd.t()
    err = (_gamma(k, _U32) + _gamma(k, _U64)) * (x2.abs() @ wd.abs().t())
    lead = tuple(x.shape[:-1])
    return y64.reshape(*lead, v), err.reshape(*lead, v)


def head_argmax(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(index, logit)``: int64 [...] and fp32 [...], per row of ``x`` the winner of
    ``head_logits(x, w)``: the LOWEST index holding the row's maximum (ties, +0 vs -0 included,
    resolve to the lowest index; a NaN counts as the maximum, so a row with NaN logits gives its
    first NaN), and the logit there, bit for bit. Row-invariant like head_logits (the winner of a
    row is a function of that row's logits only)."""
    v, _ = check_head(x, w, "head_argmax")
    logits = head_logits(x, w)
    lead = tuple(logits.shape[:-1])
    l2 = logits.reshape(-1, v)
    nan = torch.isnan(l2)
    row_nan = nan.any(-1, keepdim=True)
    best = torch.where(nan, torch.full_like(l2, -float("inf")), l2).amax(-1, keepdim=True)
    hit = torch.where(row_nan, nan, l2 == best)        # rows of -inf only: every element hits
    pos = torch.arange(v, device=l2.device).expand_as(l2)
    idx = torch.where(hit, pos, torch.full_like(pos, v)).amin(-1)  # the lowest hit
    val = l2.gather(-1, idx.unsqueeze(-1)).squeeze(-1)
    return idx.reshape(lead), val.reshape(lead)
