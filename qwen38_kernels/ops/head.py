"""Public wrappers of the output head: head_logits and head_argmax, one call into torch.ops.qwen38
each (no math, no copies), their fake kernels and their CPU kernels (the pure-PyTorch references in
qwen38_kernels/reference/fp8.py)."""
from __future__ import annotations

import torch

from .. import _checks_fp8
from ..reference import fp8 as ref

__all__ = ["head_logits", "head_argmax"]

_ops = torch.ops.qwen38


def head_logits(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """fp32 logits of the output head: ``logits[..., v] = sum_k fp32(x[..., k]) * fp32(w[v, k])``.

    x: bf16 or fp16 [..., K] (the model: bf16 [M, 5120]), last dimension contiguous, rows on 16-byte
    boundaries; w: [V, K] in x's dtype, contiguous (V = 248320, or a sliced draft vocabulary; K a
    positive multiple of 16). Returns a new contiguous fp32 [..., V]. Products are exact, the sum is
    fp32 in an order fixed by K alone, so row r of an M-row call is bit-identical to the 1-row call of
    that row for every M (the CUDA kernel serves 32 rows a launch and cuts more rows into such
    launches). An NVFP4 head goes through ``nvfp4_linear(..., out_dtype=torch.float32)`` instead.
    """
    return _ops.head_logits(x, w)


def head_argmax(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy decoding without the logits: per row of x, ``(index, logit)`` of the winner of
    ``head_logits(x, w)``.

    Same x and w as ``head_logits`` (V >= 1). Returns index int64 [...] and logit fp32 [...] (x's
    leading shape). The winner is the LOWEST index holding the row's maximum (+0 and -0 tie; a NaN
    counts as the maximum, so a row with NaN logits gives its first NaN), and the logit is
    ``head_logits(x, w)[..., index]`` bit for bit. Reads the weight once like head_logits but writes
    8 bytes a row instead of 4 V.
    """
    return _ops.head_argmax(x, w)


# ---- CPU kernels: the references -------------------------------------------------------------
torch.library.register_kernel("qwen38::head_logits", "cpu", ref.head_logits)
torch.library.register_kernel("qwen38::head_argmax", "cpu", ref.head_argmax)


# ---- fake kernels ----------------------------------------------------------------------------
@torch.library.register_fake("qwen38::head_logits")
def _head_logits_fake(x, w):
    v, _ = _checks_fp8.check_head(x, w, "head_logits")
    return x.new_empty((*x.shape[:-1], v), dtype=torch.float32)


@torch.library.register_fake("qwen38::head_argmax")
def _head_argmax_fake(x, w):
    _checks_fp8.check_head(x, w, "head_argmax")
    lead = tuple(x.shape[:-1])
    return x.new_empty(lead, dtype=torch.int64), x.new_empty(lead, dtype=torch.float32)
