"""Drop-in modules for an engine's model (HF transformers first), backed by the qwen38 ops.

    from qwen38_kernels import nn as qnn
    n = qnn.swap_norms(model)          # Qwen3.5/3.8 RMS norms -> fused kernels, weights shared

Each module keeps the original's weight Parameter (no copy) and its forward signature; on CUDA it runs
the fused kernel, on the CPU the reference (the ops' CPU kernels), with the reference's rounding
points, so a swapped model computes what the original computed (bit for bit on the CPU; within the
ops' contract on the GPU).
"""
from __future__ import annotations

import torch

from .ops import nvfp4_linear, rms_norm, rms_norm_gated
from .formats import NVFP4Weight

__all__ = ["RMSNorm", "GatedRMSNorm", "NVFP4Linear", "swap_norms", "NORM_CLASSES"]


class RMSNorm(torch.nn.Module):
    """``y = x * rsqrt(mean(x^2) + eps) * (1 + weight)`` (zero_centered, Qwen3.5/3.8) or ``* weight``."""

    def __init__(self, weight: torch.nn.Parameter | torch.Tensor, eps: float = 1e-6, zero_centered: bool = True):
        super().__init__()
        self.weight = weight if isinstance(weight, torch.nn.Parameter) else torch.nn.Parameter(weight)
        self.eps = float(eps)
        self.zero_centered = bool(zero_centered)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps, self.zero_centered)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.eps}, zero_centered={self.zero_centered}"


class GatedRMSNorm(torch.nn.Module):
    """The GDN output norm: ``round(w * round(x * rsqrt(mean(x^2) + eps))) * silu(gate)``, rounded."""

    def __init__(self, weight: torch.nn.Parameter | torch.Tensor, eps: float = 1e-6):
        super().__init__()
        self.weight = weight if isinstance(weight, torch.nn.Parameter) else torch.nn.Parameter(weight)
        self.eps = float(eps)

    def forward(self, hidden_states: torch.Tensor, gate: torch.Tensor | None = None) -> torch.Tensor:
        if gate is None:
            raise ValueError("GatedRMSNorm: gate is required (the ungated form is RMSNorm(zero_centered=False))")
        return rms_norm_gated(hidden_states, gate, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.eps}"


class NVFP4Linear(torch.nn.Module):
    """``y = x @ W.T (+ bias)`` with W in NVFP4 (``qwen38_kernels.formats.NVFP4Weight``); buffers, not
    parameters (the weights are frozen). ``out_dtype`` None keeps x's dtype (fp32 for a head)."""

    def __init__(self, weight: NVFP4Weight, bias: torch.Tensor | None = None, out_dtype: torch.dtype | None = None):
        super().__init__()
        weight.validate()
        self.in_features, self.out_features = weight.K, weight.N
        self.register_buffer("w_packed", weight.packed)
        self.register_buffer("w_scale", weight.scale)
        self.register_buffer("w_global", weight.global_scale)
        self.register_buffer("bias", bias)
        self.out_dtype = out_dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nvfp4_linear(x, self.w_packed, self.w_scale, self.w_global, self.bias, self.out_dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, nvfp4"


# HF class name -> kind. "zero_centered": forward(x) with (1 + weight); "gated": forward(x, gate).
NORM_CLASSES: dict[str, str] = {
    "Qwen3_5RMSNorm": "zero_centered",
    "Qwen3NextRMSNorm": "zero_centered",
    "Qwen3_5RMSNormGated": "gated",
    "Qwen3NextRMSNormGated": "gated",
}


def _eps_of(module: torch.nn.Module) -> float:
    for name in ("eps", "variance_epsilon"):
        if hasattr(module, name):
            return float(getattr(module, name))
    raise ValueError(f"swap_norms: {type(module).__name__} has neither eps nor variance_epsilon")


def swap_norms(model: torch.nn.Module, classes: dict[str, str] | None = None) -> int:
    """Replaces every submodule whose class name is in ``classes`` (default ``NORM_CLASSES``) by the
    matching module here, sharing its weight Parameter. Returns how many were swapped."""
    classes = NORM_CLASSES if classes is None else classes
    swapped = 0
    for parent in list(model.modules()):
        for child_name, child in list(parent.named_children()):
            kind = classes.get(type(child).__name__)
            if kind is None:
                continue
            if kind == "zero_centered":
                new = RMSNorm(child.weight, _eps_of(child), zero_centered=True)
            elif kind == "plain":
                new = RMSNorm(child.weight, _eps_of(child), zero_centered=False)
            elif kind == "gated":
                new = GatedRMSNorm(child.weight, _eps_of(child))
            else:
                raise ValueError(f"swap_norms: unknown kind {kind!r} for {type(child).__name__}")
            setattr(parent, child_name, new)
            swapped += 1
    return swapped
