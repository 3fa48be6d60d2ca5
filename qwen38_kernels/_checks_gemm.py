"""Argument checks of the gemm family, shared by the CPU kernels (the references) and the fake kernels.

Same conventions as ``_checks.py``: a ``ValueError`` whose message starts with ``qwen38.<op>: <arg>``
and carries the shapes; no check reads tensor data (the fakes run them under torch.compile).
"""
from __future__ import annotations

import torch

from ._checks import _fail, _shape, check_activation

NVFP4_BLOCK = 16    # k per e4m3 block scale
NVFP4_K_ALIGN = 32  # the kernels read K in steps of 32 codes (16 bytes)
OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _check_tensor(op: str, name: str, t):
    if not isinstance(t, torch.Tensor):
        _fail(op, f"{name} must be a Tensor, got {type(t).__name__}")


def _check_same_device(op: str, name: str, t: torch.Tensor, x: torch.Tensor):
    if t.device != x.device:
        _fail(op, f"{name} is on {t.device} but x is on {x.device}")


def check_bias_and_out_dtype(op: str, x, bias, out_dtype, n: int, weight_name: str, weight) -> None:
    """bias None or [N] (x's dtype or fp32, contiguous, on x's device); out_dtype None, bf16, fp16 or
    fp32. Shared by the weight GEMMs; messages name the weight whose N the bias must match."""
    if bias is not None:
        _check_tensor(op, "bias", bias)
        if bias.dtype not in (x.dtype, torch.float32):
            _fail(op, f"bias must be {x.dtype} (x's dtype) or float32, got {bias.dtype}")
        if bias.dim() != 1 or bias.shape[0] != n:
            _fail(op, f"bias must be 1-D with N = {n} elements, got shape {_shape(bias)} for {weight_name} "
                      f"shape {_shape(weight)}")
        if bias.numel() > 1 and bias.stride(0) != 1:
            _fail(op, f"bias must be contiguous, got stride {list(bias.stride())}")
        _check_same_device(op, "bias", bias, x)

    if out_dtype is not None and out_dtype not in OUT_DTYPES:
        _fail(op, f"out_dtype must be None (x's dtype), torch.bfloat16, torch.float16 or torch.float32, "
                  f"got {out_dtype!r}")


def _check_nvfp4_weight(op: str, w_packed, w_scale, like_name: str, like: torch.Tensor) -> tuple[int, int]:
    """w_packed uint8 [N, K/2] (K a positive multiple of 32) and w_scale float8_e4m3fn [N, K/16], both
    contiguous, on ``like``'s device. Returns (N, K)."""
    _check_tensor(op, "w_packed", w_packed)
    if w_packed.dtype != torch.uint8:
        _fail(op, f"w_packed must be uint8 (two e2m1 codes per byte), got {w_packed.dtype} "
                  f"(shape {_shape(w_packed)})")
    if w_packed.dim() != 2:
        _fail(op, f"w_packed must be 2-D [N, K/2], got shape {_shape(w_packed)}")
    n, k = int(w_packed.shape[0]), 2 * int(w_packed.shape[1])
    if k == 0 or k % NVFP4_K_ALIGN:
        _fail(op, f"w_packed must have K = 2 * w_packed.shape[1] a positive multiple of {NVFP4_K_ALIGN}, "
                  f"got K = {k} (w_packed shape {_shape(w_packed)})")
    if not w_packed.is_contiguous():
        _fail(op, f"w_packed must be contiguous, got strides {list(w_packed.stride())} for shape "
                  f"{_shape(w_packed)}")
    if w_packed.device != like.device:
        _fail(op, f"w_packed is on {w_packed.device} but {like_name} is on {like.device}")

    _check_tensor(op, "w_scale", w_scale)
    if w_scale.dtype != torch.float8_e4m3fn:
        _fail(op, f"w_scale must be float8_e4m3fn, got {w_scale.dtype} (shape {_shape(w_scale)})")
    if w_scale.dim() != 2 or tuple(w_scale.shape) != (n, k // NVFP4_BLOCK):
        _fail(op, f"w_scale must have shape [N, K/16] = {[n, k // NVFP4_BLOCK]}, got {_shape(w_scale)} "
                  f"(w_packed shape {_shape(w_packed)})")
    if not w_scale.is_contiguous():
        _fail(op, f"w_scale must be contiguous (row-major, not swizzled), got strides "
                  f"{list(w_scale.stride())} for shape {_shape(w_scale)}")
    if w_scale.device != like.device:
        _fail(op, f"w_scale is on {w_scale.device} but {like_name} is on {like.device}")
    return n, k


def check_nvfp4_linear(x, w_packed, w_scale, w_global, bias=None, out_dtype=None,
                       op: str = "nvfp4_linear") -> tuple[int, int]:
    """x bf16/fp16 [..., K] (any number of rows); w_packed uint8 [N, K/2] (K a positive multiple of
    32); w_scale float8_e4m3fn [N, K/16]; w_global fp32 with one element (shape [] or [1]); bias None
    or [N] in x's dtype or fp32; out_dtype None, bf16, fp16 or fp32; weights contiguous, everything on
    x's device. Returns (N, K)."""
    check_activation(op, "x", x)
    n, k = _check_nvfp4_weight(op, w_packed, w_scale, "x", x)
    if x.shape[-1] != k:
        _fail(op, f"x's last dimension must be K = 2 * w_packed.shape[1] = {k}, got x shape "
                  f"{_shape(x)} for w_packed shape {_shape(w_packed)}")

    _check_tensor(op, "w_global", w_global)
    if w_global.dtype != torch.float32:
        _fail(op, f"w_global must be float32, got {w_global.dtype} (shape {_shape(w_global)})")
    if w_global.dim() > 1 or w_global.numel() != 1:
        _fail(op, f"w_global must hold one element (shape [] or [1]), got shape {_shape(w_global)}")
    _check_same_device(op, "w_global", w_global, x)

    check_bias_and_out_dtype(op, x, bias, out_dtype, n, "w_packed", w_packed)
    return n, k


DEQUANT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def check_nvfp4_dequantize(w_packed, w_scale, dtype, op: str = "nvfp4_dequantize") -> tuple[int, int]:
    """w_packed uint8 [N, K/2] (K a positive multiple of 32), w_scale float8_e4m3fn [N, K/16], both
    contiguous and on one device; dtype bfloat16, float16 or float32. Returns (N, K)."""
    _check_tensor(op, "w_packed", w_packed)
    n, k = _check_nvfp4_weight(op, w_packed, w_scale, "w_packed", w_packed)
    if dtype not in DEQUANT_DTYPES:
        _fail(op, f"dtype must be torch.bfloat16, torch.float16 or torch.float32, got {dtype!r}")
    return n, k
