"""Public wrapper of fp8_block_linear: one call into torch.ops.qwen38 (no math, no copies), its fake
kernel and its CPU kernel (the pure-PyTorch reference)."""
from __future__ import annotations

import torch

from .. import _checks_fp8
from ..formats_fp8 import FP8BlockWeight
from ..reference import fp8 as ref

__all__ = ["fp8_block_linear"]

_ops = torch.ops.qwen38


def fp8_block_linear(x: torch.Tensor, w: FP8BlockWeight | torch.Tensor, w_scale_inv: torch.Tensor | None = None,
                     bias: torch.Tensor | None = None, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """``y = x @ W.T (+ bias)`` with W in block FP8 as Qwen ``*-FP8`` checkpoints store it.

    Either ``fp8_block_linear(x, w: FP8BlockWeight, bias=..., out_dtype=...)`` or the raw tensors
    ``fp8_block_linear(x, weight, weight_scale_inv, ...)``. x bf16/fp16 [..., K]; returns [..., N].
    The CUDA path serves 1..32 rows (decode and verify) in one launch, each row bit-identical to its
    1-row call. More rows (QWEN38_FP8_PREFILL, KNOBS.md): up to 64 rows, 32-row slices of the same
    kernel (the same row invariance); from 65 rows a tensor-core kernel in 128 x 128 tiles with the
    same block arithmetic (within the reference's float64 bound; each row independent of the other
    rows, not bit-identical to the 1..32-row kernels).
    """
    if isinstance(w, FP8BlockWeight):
        if w_scale_inv is not None:
            raise ValueError("qwen38.fp8_block_linear: pass either an FP8BlockWeight or (w, w_scale_inv)")
        w, w_scale_inv = w.weight, w.weight_scale_inv
    return _ops.fp8_block_linear(x, w, w_scale_inv, bias, out_dtype)


torch.library.register_kernel("qwen38::fp8_block_linear", "cpu", ref.fp8_block_linear)


@torch.library.register_fake("qwen38::fp8_block_linear")
def _fp8_block_linear_fake(x, w, w_scale_inv, bias=None, out_dtype=None):
    n, _ = _checks_fp8.check_fp8_block_linear(x, w, w_scale_inv, bias, out_dtype)
    return x.new_empty((*x.shape[:-1], n), dtype=x.dtype if out_dtype is None else out_dtype)
