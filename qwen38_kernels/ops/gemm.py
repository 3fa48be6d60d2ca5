"""Public wrappers of the gemm family: one call into torch.ops.qwen38 each (no math, no copies).

Beside each wrapper: its fake kernel (shapes only) and its CPU kernel, the pure-PyTorch reference.
"""
from __future__ import annotations

import torch

from .. import _checks_gemm
from ..formats import NVFP4Weight
from ..reference import gemm as ref

__all__ = ["nvfp4_linear"]

_ops = torch.ops.qwen38


def nvfp4_linear(x: torch.Tensor, w: NVFP4Weight | torch.Tensor, w_scale: torch.Tensor | None = None,
                 w_global: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                 out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """``y = x @ W.T (+ bias)`` with W in NVFP4 as checkpoints store it (ModelOpt layout).

    Either ``nvfp4_linear(x, w: NVFP4Weight, bias=..., out_dtype=...)`` (see
    ``qwen38_kernels.formats``) or the raw tensors ``nvfp4_linear(x, w_packed, w_scale, w_global, ...)``.
    x: bf16/fp16 [..., K]; returns [..., N] in ``out_dtype`` (default x's dtype; fp32 for a head).
    The CUDA path serves 1..32 rows (decode and verify), each row bit-identical to its 1-row call.
    """
    if isinstance(w, NVFP4Weight):
        if w_scale is not None or w_global is not None:
            raise ValueError("qwen38.nvfp4_linear: pass either an NVFP4Weight or (w_packed, w_scale, w_global)")
        w, w_scale, w_global = w.packed, w.scale, w.global_scale
    return _ops.nvfp4_linear(x, w, w_scale, w_global, bias, out_dtype)


# ---- CPU kernel: the reference ---------------------------------------------------------------
torch.library.register_kernel("qwen38::nvfp4_linear", "cpu", ref.nvfp4_linear)


# ---- fake kernel -----------------------------------------------------------------------------
@torch.library.register_fake("qwen38::nvfp4_linear")
def _nvfp4_linear_fake(x, w_packed, w_scale, w_global, bias=None, out_dtype=None):
    n, _ = _checks_gemm.check_nvfp4_linear(x, w_packed, w_scale, w_global, bias, out_dtype)
    return x.new_empty((*x.shape[:-1], n), dtype=x.dtype if out_dtype is None else out_dtype)
