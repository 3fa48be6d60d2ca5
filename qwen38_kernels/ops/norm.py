"""Public wrappers of the norm family: one call into torch.ops.qwen38 each (no math, no copies).

Beside each wrapper: its fake kernel (shapes only, for torch.compile and opcheck) and its CPU kernel,
which is the pure-PyTorch reference of the same name.
"""
from __future__ import annotations

import torch

from .. import _checks, knobs
from ..reference import norm as ref

__all__ = ["rms_norm", "add_rms_norm", "rms_norm_gated", "silu_mul"]

_ops = torch.ops.qwen38


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
             zero_centered: bool = True) -> torch.Tensor:
    """RMS norm over the last dimension, one fused kernel, one rounding to x.dtype.

    ``y = x * rsqrt(mean(x^2) + eps) * (1 + weight)`` when ``zero_centered`` (Qwen3.5/3.8 layer,
    final and q/k norms), ``* weight`` otherwise. x: bf16/fp16 [..., H] with a contiguous last
    dimension (leading dimensions may be strided, e.g. a head slice); weight: [H] in x's dtype or
    fp32. Returns a new contiguous tensor of x's shape and dtype.
    """
    if not knobs.enabled("QWEN38_FUSED_NORM"):
        return ref.rms_norm(x, weight, eps, zero_centered)
    return _ops.rms_norm(x, weight, eps, zero_centered)


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
                 zero_centered: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Residual add then RMS norm in one pass: returns ``(rms_norm(s), s)``, ``s = round(x + residual)``."""
    if not knobs.enabled("QWEN38_FUSED_NORM"):
        return ref.add_rms_norm(x, residual, weight, eps, zero_centered)
    return _ops.add_rms_norm(x, residual, weight, eps, zero_centered)


def rms_norm_gated(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor,
                   eps: float = 1e-6) -> torch.Tensor:
    """The GDN output norm (per v head, not zero-centred) with the reference's rounding points:
    ``n = round(x * rsqrt(mean(x^2)+eps))``, ``m = weight * n`` (rounded when weight has x's dtype),
    ``y = round(m * silu(gate))``."""
    if not knobs.enabled("QWEN38_FUSED_NORM"):
        return ref.rms_norm_gated(x, gate, weight, eps)
    return _ops.rms_norm_gated(x, gate, weight, eps)


def silu_mul(x: torch.Tensor) -> torch.Tensor:
    """The gated MLP's activation in one kernel: x [..., 2I] (bf16/fp16, gate then up, as the fused
    gate_up projection writes it; last dimension contiguous, leading dimensions collapsing into rows)
    -> y [..., I] = ``round(round(silu(gate)) * up)``, silu in fp32: HF's ``act_fn(gate) * up``, the
    same bits as ``F.silu(gate) * up`` (on CUDA one launch instead of torch's two, in the library's
    dependent-launch chain; on the CPU that expression itself). Each element depends on its own gate
    and up only."""
    if not knobs.enabled("QWEN38_FUSED_NORM"):
        return ref.silu_mul(x)
    return _ops.silu_mul(x)


# ---- CPU kernels: the references -------------------------------------------------------------
torch.library.register_kernel("qwen38::rms_norm", "cpu", ref.rms_norm)
torch.library.register_kernel("qwen38::add_rms_norm", "cpu", ref.add_rms_norm)
torch.library.register_kernel("qwen38::rms_norm_gated", "cpu", ref.rms_norm_gated)
torch.library.register_kernel("qwen38::silu_mul", "cpu", ref.silu_mul)


# ---- fake kernels ----------------------------------------------------------------------------
@torch.library.register_fake("qwen38::rms_norm")
def _rms_norm_fake(x, weight, eps, zero_centered):
    _checks.check_rms_norm(x, weight, eps, zero_centered)
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.register_fake("qwen38::add_rms_norm")
def _add_rms_norm_fake(x, residual, weight, eps, zero_centered):
    _checks.check_add_rms_norm(x, residual, weight, eps, zero_centered)
    return (torch.empty_like(x, memory_format=torch.contiguous_format),
            torch.empty_like(x, memory_format=torch.contiguous_format))


@torch.library.register_fake("qwen38::rms_norm_gated")
def _rms_norm_gated_fake(x, gate, weight, eps):
    _checks.check_rms_norm_gated(x, gate, weight, eps)
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.register_fake("qwen38::silu_mul")
def _silu_mul_fake(x):
    _checks.check_silu_mul(x)
    return x.new_empty((*x.shape[:-1], x.shape[-1] // 2))
