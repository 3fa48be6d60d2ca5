"""Argument checks of fp8_block_linear and the output head (head_logits, head_argmax), shared by the
CPU kernels (the references) and, later, the fake kernels.

Same conventions as ``_checks.py`` / ``_checks_gemm.py``: a ``ValueError`` whose message starts with
``qwen38.<op>: <arg>`` and carries the shapes; no check reads tensor data (the fakes run them under
torch.compile).
"""
from __future__ import annotations

import torch

from ._checks import _fail, _shape, check_activation
from ._checks_gemm import _check_same_device, _check_tensor, check_bias_and_out_dtype

FP8_BLOCK = 128     # rows and columns per weight_scale_inv tile
FP8_K_ALIGN = 16    # the kernels read K in 16-byte vectors of e4m3 codes
HEAD_K_ALIGN = 16   # the head kernels read K in 32-byte vectors of bf16


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _check_weight_2d(op: str, name: str, w, dtype_msg: str, dtypes: tuple, k_align: int, x) -> tuple[int, int]:
    _check_tensor(op, name, w)
    if w.dtype not in dtypes:
        _fail(op, f"{name} must be {dtype_msg}, got {w.dtype} (shape {_shape(w)})")
    if w.dim() != 2:
        _fail(op, f"{name} must be 2-D [N, K], got shape {_shape(w)}")
    n, k = int(w.shape[0]), int(w.shape[1])
    if k == 0 or k % k_align:
        _fail(op, f"{name} must have K = {name}.shape[1] a positive multiple of {k_align}, got K = {k} "
                  f"({name} shape {_shape(w)})")
    if not w.is_contiguous():
        _fail(op, f"{name} must be contiguous (row-major), got strides {list(w.stride())} for shape "
                  f"{_shape(w)}")
    _check_same_device(op, name, w, x)
    if x.shape[-1] != k:
        _fail(op, f"x's last dimension must be K = {name}.shape[1] = {k}, got x shape {_shape(x)} for "
                  f"{name} shape {_shape(w)}")
    return n, k


def check_fp8_block_linear(x, w, w_scale_inv, bias=None, out_dtype=None,
                           op: str = "fp8_block_linear") -> tuple[int, int]:
    """x bf16/fp16 [..., K]; w float8_e4m3fn [N, K] (K a positive multiple of 16, N and K not
    necessarily multiples of 128); w_scale_inv fp32 [ceil(N/128), ceil(K/128)]; bias None or [N] in
    x's dtype or fp32; out_dtype None, bf16, fp16 or fp32; weights contiguous, everything on x's
    device. Returns (N, K)."""
    check_activation(op, "x", x)
    n, k = _check_weight_2d(op, "w", w, "float8_e4m3fn", (torch.float8_e4m3fn,), FP8_K_ALIGN, x)

    _check_tensor(op, "w_scale_inv", w_scale_inv)
    if w_scale_inv.dtype != torch.float32:
        _fail(op, f"w_scale_inv must be float32 (one multiplier per 128x128 tile), got {w_scale_inv.dtype} "
                  f"(shape {_shape(w_scale_inv)})")
    grid = (_cdiv(n, FP8_BLOCK), _cdiv(k, FP8_BLOCK))
    if w_scale_inv.dim() != 2 or tuple(w_scale_inv.shape) != grid:
        _fail(op, f"w_scale_inv must have shape [ceil(N/128), ceil(K/128)] = {list(grid)}, got "
                  f"{_shape(w_scale_inv)} (w shape {_shape(w)})")
    if not w_scale_inv.is_contiguous():
        _fail(op, f"w_scale_inv must be contiguous (row-major), got strides {list(w_scale_inv.stride())} "
                  f"for shape {_shape(w_scale_inv)}")
    _check_same_device(op, "w_scale_inv", w_scale_inv, x)

    check_bias_and_out_dtype(op, x, bias, out_dtype, n, "w", w)
    return n, k


def check_head(x, w, op: str = "head_logits") -> tuple[int, int]:
    """x bf16/fp16 [..., K] (the model: bf16 [M, 5120]); w [V, K] in x's dtype (K a positive multiple
    of 16), contiguous, on x's device. ``head_argmax`` also needs V >= 1 (a row needs a winner).
    Returns (V, K)."""
    check_activation(op, "x", x)
    v, k = _check_weight_2d(op, "w", w, f"{x.dtype} (x's dtype)", (x.dtype,), HEAD_K_ALIGN, x)
    if op == "head_argmax" and v == 0:
        _fail(op, f"w must have at least one row (V >= 1) to pick a winner from, got shape {_shape(w)}")
    return v, k
