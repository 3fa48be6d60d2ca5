"""Pure-PyTorch references of the gemm family: the contract the CUDA kernels answer to.

Same names and arguments as the ops (``torch.ops.qwen38.<name>``). ``acc_dtype`` is the arithmetic
between rounding points: float32 is the reference itself; float64 gives the float64 evaluation
(rounded once, to the output dtype) the tests measure against.

nvfp4_linear (weight layout: qwen38_kernels/formats.py, MODEL.md "Weight formats")::

    W'[n, k] = e2m1(w_packed)[n, k] * fp32(w_scale[n, k // 16])     # exact in fp32
    acc[m, n] = sum_k fp32(x[m, k]) * W'[n, k]                        # fp32 accumulation
    y[m, n]   = round( acc[m, n] * w_global + fp32(bias[n]) )         # in fp32, one rounding to out_dtype

``x`` bf16/fp16 [..., K] (any leading dims, K a multiple of 32), ``w_packed`` uint8 [N, K/2]
(element 2i in the low nibble), ``w_scale`` float8_e4m3fn [N, K/16] row-major, ``w_global`` fp32 with
one element (a multiplier, ModelOpt's weight_scale_2), ``bias`` None or [N] (x's dtype or fp32),
``out_dtype`` None (x's dtype), bf16, fp16 or fp32. Returns a contiguous [..., N].

Any number of rows: on CUDA 1..32 rows take the skinny kernel, more rows a prefill strategy
(csrc/gemm/nvfp4_linear.cpp); all answer to this reference and its float64 bound.

nvfp4_dequantize (the first half of the "dequant" prefill strategy, also an op of its own)::

    W'[n, k] = e2m1(w_packed)[n, k] * fp32(w_scale[n, k // 16])       # [N, K] in dtype, exact

exact in bfloat16, float16 and float32 (at most 6 significant bits, magnitudes 2^-10 .. 2688); the
global scale is not applied.

Row invariance: each row is computed by the same sequence of operations (a fresh [1, K] row times
the dequantized weight, the weight cut into row blocks that depend on K only), whatever M is.

Accuracy: the products x * W' are exact in fp32 (at most 11 + 6 significant bits); only the
summation, the scale multiply and the bias add round before the output rounding. An fp32 sum of K
terms is within gamma_K * sum |terms| of the exact sum for ANY summation order, but that is not
within half an output ulp where the terms cancel, so no fp32 evaluation (this reference or a kernel
with another order) is within 1 ulp of the float64 evaluation on every element: at K = 5120..17408,
2 ulp in bf16 and a few ulp in fp16 show up on random data. ``nvfp4_linear_f64_bound`` gives the
float64 evaluation and that bound, the criterion the tests use:
``|y - y64| <= spacing(y) / 2 + err`` on every element, and <= 1 ulp where ``err`` is below half
an ulp.
"""
from __future__ import annotations

import torch

from .._checks import _fail
from .._checks_gemm import NVFP4_BLOCK, check_nvfp4_dequantize, check_nvfp4_linear
from ..formats import unpack_e2m1

__all__ = ["nvfp4_linear", "nvfp4_linear_f64_bound", "nvfp4_dequantize"]

_ACC_DTYPES = (torch.float32, torch.float64)
# Weight rows dequantized at a time: about 4M elements, a function of K only (the reduction order
# must not depend on M, and the memory must not grow with N: lm_head has 248320 rows).
_CHUNK_ELEMS = 1 << 22


def _dequant_rows(w_packed: torch.Tensor, w_scale: torch.Tensor, acc: torch.dtype) -> torch.Tensor:
    """e2m1 * scale for a block of weight rows, [n, K] in ``acc`` (exact)."""
    s = w_scale.to(acc).repeat_interleave(NVFP4_BLOCK, dim=-1)
    return unpack_e2m1(w_packed).to(acc) * s


def nvfp4_linear(x: torch.Tensor, w_packed: torch.Tensor, w_scale: torch.Tensor, w_global: torch.Tensor,
                 bias: torch.Tensor | None = None, out_dtype: torch.dtype | None = None,
                 *, acc_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    n, k = check_nvfp4_linear(x, w_packed, w_scale, w_global, bias, out_dtype)
    if acc_dtype not in _ACC_DTYPES:
        _fail("nvfp4_linear", f"acc_dtype must be torch.float32 or torch.float64, got {acc_dtype!r}")
    out = x.dtype if out_dtype is None else out_dtype
    lead = tuple(x.shape[:-1])
    x2 = x.reshape(-1, k)
    m = x2.shape[0]
    acc = torch.empty(m, n, dtype=acc_dtype, device=x.device)
    chunk = max(1, _CHUNK_ELEMS // k)
    for n0 in range(0, n, chunk):
        n1 = min(n, n0 + chunk)
        wt = _dequant_rows(w_packed[n0:n1], w_scale[n0:n1], acc_dtype).t()  # [K, n1 - n0]
        for r in range(m):
            xr = x2[r:r + 1].to(acc_dtype)  # a fresh [1, K] allocation: the same call for every M
            acc[r, n0:n1] = (xr @ wt)[0]
    y = acc * w_global.reshape(()).to(acc_dtype)
    if bias is not None:
        y = y + bias.to(acc_dtype)
    return y.to(out).reshape(*lead, n).contiguous()


_U32 = 2.0 ** -24  # unit roundoff of fp32


def nvfp4_linear_f64_bound(x: torch.Tensor, w_packed: torch.Tensor, w_scale: torch.Tensor,
                           w_global: torch.Tensor, bias: torch.Tensor | None = None
                           ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(y64, err)``, both float64 [..., N]: ``y64`` the float64 evaluation of nvfp4_linear before
    its output rounding, ``err`` a bound on how far any fp32 evaluation (any summation order,
    then ``* w_global``, then ``+ bias``, each rounded to fp32) can be from it before the output
    rounding::

        err = gamma_{K+2} * (|w_global| * sum_k |x[m, k] * W'[n, k]| + |bias[n]|) + 2^-50 * |y64|
        gamma_j = j * 2^-24 / (1 - j * 2^-24)

    (the products are exact; K - 1 additions, one multiply and one add round; 2^-50 covers the
    float64 evaluation's own rounding). An output ``y`` of dtype ``t`` is then correct when
    ``|y - y64| <= spacing_t(y) / 2 + err`` (spacing: the gap from |y| to the next value up).
    """
    check_nvfp4_linear(x, w_packed, w_scale, w_global, bias, None, op="nvfp4_linear")
    n, k = w_packed.shape[0], 2 * w_packed.shape[1]
    f64 = torch.float64
    x2 = x.reshape(-1, k).to(f64)
    wd = _dequant_rows(w_packed, w_scale, f64)
    g = w_global.reshape(()).to(f64)
    y64 = (x2 @ wd.t()) * g
    mag = (x2.abs() @ wd.abs().t()) * g.abs()
    if bias is not None:
        y64 = y64 + bias.to(f64)
        mag = mag + bias.to(f64).abs()
    j = k + 2
    err = (j * _U32 / (1 - j * _U32)) * mag + 2.0 ** -50 * y64.abs()
    lead = tuple(x.shape[:-1])
    return y64.reshape(*lead, n), err.reshape(*lead, n)


def nvfp4_dequantize(w_packed: torch.Tensor, w_scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``e2m1 * fp32(scale)`` as a contiguous [N, K] tensor of ``dtype`` (bf16, fp16 or fp32), without
    the global scale. Computed in fp32 (exact) and cast (exact: every product fits ``dtype``)."""
    check_nvfp4_dequantize(w_packed, w_scale, dtype)
    return _dequant_rows(w_packed, w_scale, torch.float32).to(dtype).contiguous()
