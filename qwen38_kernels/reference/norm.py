"""Pure-PyTorch references of the norm family: the contract the CUDA kernels answer to.

Same names and arguments as the ops (``torch.ops.qwen38.<name>``); each is also registered as the
op's CPU kernel. Rounding points follow HF transformers ``models/qwen3_5/modeling_qwen3_5.py``
(see MODEL.md). ``acc_dtype`` is the arithmetic between rounding points: float32 is the reference
itself; float64 gives the "float64 evaluation rounded at the same points" the tests measure against.

rms_norm (zero_centered=True, the Qwen layer/final/q/k norms)::

    y = round( x * rsqrt(mean(x^2) + eps) * (1 + w) )          # one rounding, to x.dtype

rms_norm (zero_centered=False, the plain form): the same with ``w`` in place of ``1 + w``, one
rounding at the end (the form fused norms elsewhere use; note HF's Llama-style norm rounds to
x.dtype before the weight multiply instead: that is not this op).

add_rms_norm: ``s = round(x + residual)`` (the decoder layer's bf16 residual add), ``y = rms_norm(s)``;
returns ``(y, s)``.

rms_norm_gated (the GDN output norm, not zero-centred)::

    n = round( x * rsqrt(mean(x^2) + eps) )        # to x.dtype
    m = w * n                                       # in the promoted dtype of (w, x): rounded to
                                                    # x.dtype when w has x's dtype, fp32 when w is fp32
    y = round( m * silu(gate) )                     # silu in fp32, then one rounding to x.dtype

silu_mul (the gated MLP's activation; x [..., 2I] = gate then up, as the fused gate_up projection
writes it; HF's ``act_fn(gate) * up`` for 16-bit tensors)::

    s = round( silu(gate) )                         # silu(g) = g / (1 + exp(-g)) in fp32, to x.dtype
    y = round( s * up )                             # the product of two 16-bit values is exact in fp32
"""
from __future__ import annotations

import torch

from .._checks import check_add_rms_norm, check_rms_norm, check_rms_norm_gated, check_silu_mul

__all__ = ["rms_norm", "add_rms_norm", "rms_norm_gated", "rms_norm_gated_f64_branches", "silu_mul",
           "silu_mul_f64_branches"]


def _inv_rms(v: torch.Tensor, eps: float) -> torch.Tensor:
    # mean, then + eps, then rsqrt: the reference's order of operations
    return torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, zero_centered: bool,
             *, acc_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    check_rms_norm(x, weight, eps, zero_centered)
    v = x.to(acc_dtype)
    w = weight.to(acc_dtype)
    scale = (1.0 + w) if zero_centered else w
    return (v * _inv_rms(v, eps) * scale).to(x.dtype).contiguous()


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                 zero_centered: bool, *, acc_dtype: torch.dtype = torch.float32):
    check_add_rms_norm(x, residual, weight, eps, zero_centered)
    s = (x.to(acc_dtype) + residual.to(acc_dtype)).to(x.dtype).contiguous()
    return rms_norm(s, weight, eps, zero_centered, acc_dtype=acc_dtype), s


def rms_norm_gated(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float,
                   *, acc_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    check_rms_norm_gated(x, gate, weight, eps)
    v = x.to(acc_dtype)
    n = (v * _inv_rms(v, eps)).to(x.dtype).to(acc_dtype)
    m = weight.to(acc_dtype) * n
    if weight.dtype == x.dtype:  # bf16 * bf16 in the reference: rounded to x.dtype
        m = m.to(x.dtype).to(acc_dtype)
    g = gate.to(acc_dtype)
    return (m * (g * torch.sigmoid(g))).to(x.dtype).contiguous()


def silu_mul(x: torch.Tensor, *, acc_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    check_silu_mul(x)
    i = x.shape[-1] // 2
    if acc_dtype == torch.float32:
        # HF's expression itself: torch evaluates silu in fp32 (opmath) and rounds to x.dtype, then the
        # exact product with up rounded once; so the CPU path is HF's MLP activation bit for bit
        return (torch.nn.functional.silu(x[..., :i]) * x[..., i:]).contiguous()
    g, u = x[..., :i].to(acc_dtype), x[..., i:].to(acc_dtype)
    s = (g / (1.0 + torch.exp(-g))).to(x.dtype).to(acc_dtype)
    return (s * u).to(x.dtype).contiguous()


# fp32 evaluations of r = rsqrt(mean(x^2) + eps) differ from the float64 one (and from each other,
# with the summation order) by a few 2^-24 relative; 2^-18 bounds that with a wide margin.
_FP32_REL_SLACK = 2.0 ** -18


def rms_norm_gated_f64_branches(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor,
                                eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The two float64 evaluations of ``rms_norm_gated`` that an fp32 evaluation may legitimately match.

    ``n = round(x * r)`` is an intermediate rounding point: where ``x * r`` lies within fp32 rounding
    error of a rounding boundary of x.dtype (about 1 element in 500), an exact fp32 evaluation of
    the reference itself may round ``n`` either way, and that 1-ulp step in ``n`` moves ``y`` by up to
    2 ulp. This returns ``y`` with ``n`` taken on the low side and on the high side of that window;
    the two agree on every other element. An evaluation is within "1 ulp of the float64 evaluation
    rounded at the same points" when it is within 1 ulp of either.
    """
    check_rms_norm_gated(x, gate, weight, eps)
    v = x.to(torch.float64)
    t = v * _inv_rms(v, eps)
    g = gate.to(torch.float64)
    outs = []
    for side in (1.0 - _FP32_REL_SLACK, 1.0 + _FP32_REL_SLACK):
        n = (t * side).to(x.dtype).to(torch.float64)
        m = weight.to(torch.float64) * n
        if weight.dtype == x.dtype:
            m = m.to(x.dtype).to(torch.float64)
        outs.append((m * (g * torch.sigmoid(g))).to(x.dtype))
    return outs[0], outs[1]


def silu_mul_f64_branches(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The two float64 evaluations of ``silu_mul`` that an fp32 evaluation may legitimately match.

    s = silu(gate) is rounded to x.dtype; an fp32 silu (exp within a few fp32 ulp, then a division) lies
    within 2^-20 relative of the exact value, so where the exact s sits that close to a rounding boundary
    of x.dtype either neighbour is right. Returns (lo, hi): s nudged down / up by 2^-20 relative before
    that rounding, then the exact product with up rounded once; they differ only at such boundaries.
    """
    check_silu_mul(x)
    i = x.shape[-1] // 2
    g, u = x[..., :i].double(), x[..., i:].double()
    s = g / (1.0 + torch.exp(-g))
    lo = ((s * (1.0 - 2.0 ** -20)).to(x.dtype).double() * u).to(x.dtype)
    hi = ((s * (1.0 + 2.0 ** -20)).to(x.dtype).double() * u).to(x.dtype)
    return lo.contiguous(), hi.contiguous()

