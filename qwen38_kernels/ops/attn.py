"""Public wrapper of decode attention for short query counts: attn_decode, one call into
torch.ops.qwen38 (no math, no copies), its fake kernel and its CPU kernel (the pure-PyTorch reference
in qwen38_kernels/reference/attn.py, whose docstring holds the tensors' table and the contract).

CUDA: until the tensor-core kernel lands, the reference also serves CUDA tensors. It evaluates one
row at a time and reads the index tensors on the host, so it is slow and not CUDA-graph safe, but it
keeps the contract (a row's bits depend on its visible keys only, cuBLAS running the same shapes).
"""
from __future__ import annotations

import torch

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


# ---- CPU kernel: the reference (and CUDA's until its kernel lands: module docstring) --------------
torch.library.register_kernel("qwen38::attn_decode", "cpu", ref.attn_decode)
torch.library.register_kernel("qwen38::attn_decode", "cuda", ref.attn_decode)


# ---- fake kernel: shapes and dtypes (index values need the data) ----------------------------------
@torch.library.register_fake("qwen38::attn_decode")
def _attn_decode_fake(q, k_cache, v_cache, kv_lens, mask=None, lengths=None, *, scale=None):
    ref.check_attn_decode(q, k_cache, v_cache, kv_lens, mask, lengths, scale, values=False)
    return q.new_empty(q.shape)
