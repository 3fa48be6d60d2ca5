"""Public wrappers of the gemm family: one call into torch.ops.qwen38 each (no math, no copies).

Beside each wrapper: its fake kernel (shapes only) and its CPU kernel, the pure-PyTorch reference.
"""
from __future__ import annotations

import torch

from .. import _checks_gemm
from ..formats import NVFP4Weight
from ..reference import gemm as ref

__all__ = ["nvfp4_linear", "nvfp4_dequantize"]

_ops = torch.ops.qwen38


def nvfp4_linear(x: torch.Tensor, w: NVFP4Weight | torch.Tensor, w_scale: torch.Tensor | None = None,
                 w_global: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                 out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """``y = x @ W.T (+ bias)`` with W in NVFP4 as checkpoints store it (ModelOpt layout).

    Either ``nvfp4_linear(x, w: NVFP4Weight, bias=..., out_dtype=...)`` (see
    ``qwen38_kernels.formats``) or the raw tensors ``nvfp4_linear(x, w_packed, w_scale, w_global, ...)``.
    x: bf16/fp16 [..., K]; returns [..., N] in ``out_dtype`` (default x's dtype; fp32 for a head).
    CUDA: 1..32 rows (decode and verify) take the skinny kernel, each row bit-identical to its 1-row
    call; more rows (prefill) take 32-row chunks of that kernel (same bits per row) or, from a row
    threshold that depends on the weight shape, an exact dequantization to x's dtype and one
    fp32-output cuBLAS GEMM (within the same float64 bound, no row invariance).
    ``QWEN38_NVFP4_PREFILL=chunked|dequant|auto`` forces a strategy (KNOBS.md).
    """
    if isinstance(w, NVFP4Weight):
        if w_scale is not None or w_global is not None:
            raise ValueError("qwen38.nvfp4_linear: pass either an NVFP4Weight or (w_packed, w_scale, w_global)")
        w, w_scale, w_global = w.packed, w.scale, w.global_scale
    return _ops.nvfp4_linear(x, w, w_scale, w_global, bias, out_dtype)


def nvfp4_dequantize(w: NVFP4Weight | torch.Tensor, w_scale: torch.Tensor | None = None,
                     dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """``W' = e2m1 * fp32(scale)`` as a contiguous [N, K] tensor of ``dtype`` (bf16, fp16 or fp32),
    exact, WITHOUT the global scale (multiply the fp32 result of a GEMM with it, as nvfp4_linear does).

    ``nvfp4_dequantize(w: NVFP4Weight, dtype=...)`` or ``nvfp4_dequantize(w_packed, w_scale, dtype)``.
    """
    if isinstance(w, NVFP4Weight):
        if w_scale is not None:
            raise ValueError("qwen38.nvfp4_dequantize: pass either an NVFP4Weight or (w_packed, w_scale)")
        w, w_scale = w.packed, w.scale
    return _ops.nvfp4_dequantize(w, w_scale, dtype)


# ---- CPU kernels: the references -------------------------------------------------------------
torch.library.register_kernel("qwen38::nvfp4_linear", "cpu", ref.nvfp4_linear)
torch.library.register_kernel("qwen38::nvfp4_dequantize", "cpu", ref.nvfp4_dequantize)


# ---- fake kernels ----------------------------------------------------------------------------
@torch.library.register_fake("qwen38::nvfp4_linear")
def _nvfp4_linear_fake(x, w_packed, w_scale, w_global, bias=None, out_dtype=None):
    n, _ = _checks_gemm.check_nvfp4_linear(x, w_packed, w_scale, w_global, bias, out_dtype)
    return x.new_empty((*x.shape[:-1], n), dtype=x.dtype if out_dtype is None else out_dtype)


@torch.library.register_fake("qwen38::nvfp4_dequantize")
def _nvfp4_dequantize_fake(w_packed, w_scale, dtype):
    n, k = _checks_gemm.check_nvfp4_dequantize(w_packed, w_scale, dtype)
    return w_packed.new_empty((n, k), dtype=dtype)
