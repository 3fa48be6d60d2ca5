"""Public wrapper of decode attention for short query counts: attn_decode, one call into
torch.ops.qwen38 (no math, no copies), its fake kernel and its CPU kernel (the pure-PyTorch reference
in qwen38_kernels/reference/attn.py, whose docstring holds the tensors' table and the contract).

CUDA: the tensor-core kernels of csrc/attn (attn_kernel.cuh holds the
design: a row's visible keys in chunks of 64 and splits that depend on its visible count only, merged
in order; mma.m16n8k16 with fp32 accumulation; exp2 from fused multiply-adds, so sm_90a and sm_121a give the same bits), launched
by csrc/attn/attn.cpp. The grid comes from the shapes only: CUDA-graph safe. An eager call validates
the index tensors (kv_lens, lengths, mask) on the host, one small synchronising copy, as the conv and GDN
ops do (``QWEN38_ATTN_CHECK_INDICES=0``: no copy, asynchronous); under capture, or with the knob 0,
out-of-range values are clamped by the kernel, never read past the cache. The rows of
q, k_cache and v_cache must start 16-byte aligned (strides multiples of 8 elements) on CUDA. CPU and
CUDA agree to the bound of ``reference.attn_decode_f64_bound``, not bit for bit; on one GPU a verify
row equals its one-token call after compaction bit for bit (tests/test_attn.py on the GPU,
tests/test_attn_emulation.py on the host). ``QWEN38_ATTN_KERNEL=0`` sends CUDA tensors to the reference
instead, one row at a time, the index values read on the host (slow, not CUDA-graph safe).
"""
from __future__ import annotations

import torch

from .. import knobs
from ..reference import attn as ref

__all__ = ["attn_decode"]

_ops = torch.ops.qwen38


def attn_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, kv_lens: torch.Tensor,
                mask: torch.Tensor | None = None, lengths: torch.Tensor | None = None, *,
                scale: float | None = None) -> torch.Tensor:
    """Attention of T <= 64 query rows a sequence over a KV cache: one decode token, a chain of drafts
    (``mask`` None) or a draft tree (``mask[b, t, j]``: row t sees row j's key).

    q [B, T, Hq, D] bf16/fp16; k_cache, v_cache [B, Hkv, L, D] in q's dtype (HF's layout; the rows'
    own keys at positions ``kv_lens[b] - lengths[b] + j``); kv_lens [B] int; lengths [B] int or None
    (= T); scale None = D ** -0.5. Returns o [B, T, Hq, D] in q's dtype: fp32 scores, softmax and sum
    over the row's visible keys (the committed prefix, then the keys of the rows it sees), one rounding.
    A row's bits depend only on its q row and its visible keys and values in order, so a verify row
    equals the one-token call made after the accepted path is compacted into the cache.
    """
    return _ops.attn_decode(q, k_cache, v_cache, kv_lens, mask, lengths, scale=scale)


# ---- CPU kernel: the reference --------------------------------------------------------------------
torch.library.register_kernel("qwen38::attn_decode", "cpu", ref.attn_decode)


# ---- CUDA: the kernels (torch.ops.qwen38._attn_decode_kernel, csrc/attn/attn.cpp), or the reference
# with QWEN38_ATTN_KERNEL=0 (module docstring) ---------------------------------------------------------
def _attn_decode_cuda(q, k_cache, v_cache, kv_lens, mask=None, lengths=None, *, scale=None):
    if knobs.enabled("QWEN38_ATTN_KERNEL"):
        return _ops._attn_decode_kernel(q, k_cache, v_cache, kv_lens, mask, lengths, scale=scale)
    return ref.attn_decode(q, k_cache, v_cache, kv_lens, mask, lengths, scale=scale)


torch.library.register_kernel("qwen38::attn_decode", "cuda", _attn_decode_cuda)


# ---- fake kernels: shapes and dtypes (index values need the data) ---------------------------------
@torch.library.register_fake("qwen38::attn_decode")
def _attn_decode_fake(q, k_cache, v_cache, kv_lens, mask=None, lengths=None, *, scale=None):
    ref.check_attn_decode(q, k_cache, v_cache, kv_lens, mask, lengths, scale, values=False)
    return q.new_empty(q.shape)


@torch.library.register_fake("qwen38::_attn_decode_kernel")
def _attn_decode_kernel_fake(q, k_cache, v_cache, kv_lens, mask=None, lengths=None, *, scale=None):
    ref.check_attn_decode(q, k_cache, v_cache, kv_lens, mask, lengths, scale, values=False)
    return q.new_empty(q.shape)
