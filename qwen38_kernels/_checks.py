"""Argument checks shared by the CPU kernels (the references) and the fake kernels.

The CUDA launchers in csrc/ make the same checks with the same wording, so a bad call fails the same
way on every device and under torch.compile. Every message names the op, the argument and the shapes.
"""
from __future__ import annotations

import math

import torch

ACT_DTYPES = (torch.bfloat16, torch.float16)


def _fail(op: str, msg: str):
    raise ValueError(f"qwen38.{op}: {msg}")


def _shape(t: torch.Tensor) -> str:
    return str(list(t.shape))


def check_activation(op: str, name: str, t, *, like: torch.Tensor | None = None, like_name: str = "x"):
    if not isinstance(t, torch.Tensor):
        _fail(op, f"{name} must be a Tensor, got {type(t).__name__}")
    if t.dtype not in ACT_DTYPES:
        _fail(op, f"{name} must be bfloat16 or float16, got {t.dtype} (shape {_shape(t)})")
    if t.dim() < 1:
        _fail(op, f"{name} must have at least one dimension, got a 0-d tensor")
    if t.numel() > 0 and t.shape[-1] > 1 and t.stride(-1) != 1:
        _fail(op, f"{name} must be contiguous in its last dimension, got strides {list(t.stride())} "
                  f"for shape {_shape(t)}")
    check_rows_collapse(op, name, t)
    if like is not None:
        if t.dtype != like.dtype:
            _fail(op, f"{name} must have {like_name}'s dtype {like.dtype}, got {t.dtype}")
        if t.shape != like.shape:
            _fail(op, f"{name} must have {like_name}'s shape {_shape(like)}, got {_shape(t)}")
        if t.device != like.device:
            _fail(op, f"{name} is on {t.device} but {like_name} is on {like.device}")


def check_rows_collapse(op: str, name: str, t: torch.Tensor):
    """t [..., H] must be viewable as rows of H with one row stride, without a copy: leading dims
    of size 1 are ignored, the others must nest (a contiguous tensor, or a slice of its last dim)."""
    if t.numel() == 0:
        return
    base, span, first = None, 1, True
    for d in range(t.dim() - 2, -1, -1):
        if t.shape[d] == 1:
            continue
        if first:
            base, first = t.stride(d), False
        elif t.stride(d) != base * span:
            _fail(op, f"{name}'s leading dimensions must collapse into rows of one stride (a contiguous "
                      f"tensor, or a slice of its last dimension); got shape {_shape(t)} with strides "
                      f"{list(t.stride())}")
        span *= t.shape[d]


def check_weight(op: str, x: torch.Tensor, weight):
    if not isinstance(weight, torch.Tensor):
        _fail(op, f"weight must be a Tensor, got {type(weight).__name__}")
    if weight.dtype not in (x.dtype, torch.float32):
        _fail(op, f"weight must be {x.dtype} (x's dtype) or float32, got {weight.dtype}")
    if weight.dim() != 1 or weight.shape[0] != x.shape[-1]:
        _fail(op, f"weight must be 1-D with x.shape[-1] = {x.shape[-1]} elements, got weight shape "
                  f"{_shape(weight)} for x shape {_shape(x)}")
    if weight.numel() > 1 and weight.stride(0) != 1:
        _fail(op, f"weight must be contiguous, got stride {list(weight.stride())}")
    if weight.device != x.device:
        _fail(op, f"weight is on {weight.device} but x is on {x.device}")


def check_eps(op: str, eps):
    if not isinstance(eps, (float, int)) or not math.isfinite(eps) or eps < 0:
        _fail(op, f"eps must be a finite number >= 0, got {eps!r}")


def check_rms_norm(x, weight, eps, zero_centered, op: str = "rms_norm"):
    check_activation(op, "x", x)
    check_weight(op, x, weight)
    check_eps(op, eps)


def check_add_rms_norm(x, residual, weight, eps, zero_centered):
    op = "add_rms_norm"
    check_activation(op, "x", x)
    check_activation(op, "residual", residual, like=x)
    check_weight(op, x, weight)
    check_eps(op, eps)


def check_rms_norm_gated(x, gate, weight, eps):
    op = "rms_norm_gated"
    check_activation(op, "x", x)
    check_activation(op, "gate", gate, like=x)
    check_weight(op, x, weight)
    check_eps(op, eps)


def check_silu_mul(x):
    op = "silu_mul"
    check_activation(op, "x", x)
    if x.shape[-1] % 2:
        _fail(op, f"x.shape[-1] must be even (gate then up, I each), got {x.shape[-1]} (x shape {_shape(x)})")
