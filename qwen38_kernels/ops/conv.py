"""Public wrappers of the causal conv1d of the GDN layers (width 4, + silu): conv_step, conv_chain,
conv_tree and conv_commit, one call into torch.ops.qwen38 each (no math, no copies); their fake
kernels and their CPU kernels (the pure-PyTorch references in qwen38_kernels/reference/gdn.py, whose
docstring is the contract: the CUDA kernels reproduce it bit for bit).

Tensors (Qwen3.8-27B: C = 10240 qkv channels; ``B`` sequences, ``T`` tokens/nodes, ``S`` state rows):

==============  ================  =================================================================
name            shape             dtype / layout
==============  ================  =================================================================
x               [B, C] (step)     bf16 or fp16, the raw qkv projection; last dim contiguous (other
                [B, T, C]         strides free)
conv_state      [S, C, 3]         x's dtype, contiguous: the 3 previous raw inputs, index 2 newest
weight          [C, 4]            x's dtype or fp32, contiguous (HF's [C, 1, 4] squeezed);
                                  weight[c, 3] multiplies the current input
slots           [B]               int32/int64 state row per sequence, -1 = padding (zeros, nothing
                                  read or written)
lengths         [B] or None       int32/int64 tokens/nodes used per sequence in [0, T] (None: T)
parents         [B, T]            int32/int64, depth-first pre-order; -1 = child of the committed state
accepted        [B]               chain: accepted prefix length in [0, T]; tree: deepest accepted
                                  node in [-1, T) (-1: none)
y (returned)    x's shape         x's dtype, contiguous
==============  ================  =================================================================

Per channel: ``s = ((w0*u0 + w1*u1) + w2*u2) + w3*u3`` in fp32 (products rounded first, no FMA),
``y = round(silu(s))`` (silu in float64, rounded to fp32, then to x's dtype; the sum is not rounded
before silu). conv_step and conv_commit update conv_state in place (``Tensor(a!)``); the verifies
never write it. A chain row / tree node equals conv_step along its path; the committed state equals
conv_step over the accepted tokens.

Index values (slot ranges and distinctness for the writing ops, lengths, parents in depth-first
order, accepted ranges) are validated like the reference does: on CUDA an eager call copies the index
tensors to the host (a small synchronising copy) unless ``QWEN38_CONV_CHECK_INDICES=0``; during
CUDA-graph capture the copy is impossible and is skipped. The kernel protects memory in every case
(conv_kernel.cuh "Guards").
"""
from __future__ import annotations

import torch

from .._checks import _fail
from ..reference import gdn as ref

__all__ = ["conv_step", "conv_chain", "conv_tree", "conv_commit"]

_ops = torch.ops.qwen38


def conv_step(x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """One token: x [B, C]; conv_state rows ``slots`` become (s1, s2, x) in place; returns y [B, C]."""
    return _ops.conv_step(x, conv_state, weight, slots)


def conv_chain(x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor, slots: torch.Tensor,
               lengths: torch.Tensor | None = None) -> torch.Tensor:
    """Chain verify of up to 16 tokens: x [B, T, C]; conv_state read only; returns y [B, T, C]."""
    return _ops.conv_chain(x, conv_state, weight, slots, lengths)


def conv_tree(x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor, slots: torch.Tensor,
              parents: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
    """Tree verify of up to 64 nodes in depth-first order: x [B, T, C], parents [B, T]; conv_state read
    only; returns y [B, T, C] (a node's window: its 3 nearest ancestors' inputs, then the state row)."""
    return _ops.conv_tree(x, conv_state, weight, slots, parents, lengths)


def conv_commit(x: torch.Tensor, conv_state: torch.Tensor, slots: torch.Tensor, accepted: torch.Tensor,
                parents: torch.Tensor | None = None) -> None:
    """Leaves in conv_state rows ``slots`` what conv_step over the accepted tokens of x [B, T, C] would
    leave (chain: parents None, accepted = prefix lengths; tree: accepted = deepest accepted node)."""
    _ops.conv_commit(x, conv_state, slots, accepted, parents)


# ---- CPU kernels: the references -------------------------------------------------------------
torch.library.register_kernel("qwen38::conv_step", "cpu", ref.conv_step)
torch.library.register_kernel("qwen38::conv_chain", "cpu", ref.conv_chain)
torch.library.register_kernel("qwen38::conv_tree", "cpu", ref.conv_tree)
torch.library.register_kernel("qwen38::conv_commit", "cpu", ref.conv_commit)


# ---- fake kernels: shapes and dtypes (index values need the data) --------------------------------
def _fake_check(op, x, conv_state, tokens: bool):
    if x.dtype not in (torch.bfloat16, torch.float16):
        _fail(op, f"x must be bfloat16 or float16, got {x.dtype}")
    if x.dim() != (3 if tokens else 2):
        _fail(op, f"x must have shape {'[B, T, C]' if tokens else '[B, C]'}, got {list(x.shape)}")
    if conv_state.dtype != x.dtype:
        _fail(op, f"conv_state must have x's dtype {x.dtype}, got {conv_state.dtype}")
    if conv_state.dim() != 3 or conv_state.shape[1] != x.shape[-1] or conv_state.shape[2] != ref.CONV_WIDTH - 1:
        _fail(op, f"conv_state must have shape [S, {x.shape[-1]}, {ref.CONV_WIDTH - 1}], got {list(conv_state.shape)}")


@torch.library.register_fake("qwen38::conv_step")
def _conv_step_fake(x, conv_state, weight, slots):
    _fake_check("conv_step", x, conv_state, False)
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.register_fake("qwen38::conv_chain")
def _conv_chain_fake(x, conv_state, weight, slots, lengths=None):
    _fake_check("conv_chain", x, conv_state, True)
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.register_fake("qwen38::conv_tree")
def _conv_tree_fake(x, conv_state, weight, slots, parents, lengths=None):
    _fake_check("conv_tree", x, conv_state, True)
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.register_fake("qwen38::conv_commit")
def _conv_commit_fake(x, conv_state, slots, accepted, parents=None):
    _fake_check("conv_commit", x, conv_state, True)
    return None
