"""Pure-PyTorch reference of decode attention for short query counts (``attn_decode``): the CPU kernel
of ``torch.ops.qwen38.attn_decode`` and the contract its CUDA kernel answers to.

Geometry (Qwen3.8-27B gated attention): 24 q heads, 4 kv heads (q head ``h`` reads kv head
``h // 6``), head dim 256; the op takes any ``Hq = G * Hkv`` with ``G <= 16`` and ``D`` one of
64, 128, 256. ``B`` sequences, ``T <= 64`` query rows a sequence (one decode token, a chain of
drafts, or a draft tree in depth-first order), ``L`` key slots in the cache.

Tensors
-------
===========  ====================  ==================================================================
name         shape                 dtype / meaning
===========  ====================  ==================================================================
q            [B, T, Hq, D]         bf16 or fp16, after the q norm and RoPE (HF's query_states
                                   transposed back); last dim contiguous, other strides free
k_cache      [B, Hkv, L, D]        q's dtype, HF's cache layout (a DynamicCache layer's ``keys``);
v_cache                            last dim contiguous. The rows' own keys are in it already:
                                   row j of sequence b at position ``P_b + j``
kv_lens      [B]                   int32 / int64: keys of sequence b in the cache, the rows'
                                   included; ``P_b = kv_lens[b] - lengths[b]`` is the committed
                                   prefix, ``lengths[b] <= kv_lens[b] <= L``
mask         [B, T, T] or None     bool: ``mask[b, t, j]`` = row t sees row j's key. Rows see their
                                   own key and none after it (``mask[b, t, t]`` True, ``j > t``
                                   False); a tree row sees its ancestors. None: causal (a chain)
lengths      [B] or None           int: rows used a sequence in [0, T] (None: T); rows at and
                                   after a length are zeros, and nothing of them is read
o (returned) [B, T, Hq, D]         q's dtype, contiguous
===========  ====================  ==================================================================

Math: row t of sequence b sees the *visible keys*: the prefix positions ``0 .. P_b - 1``, then the
positions ``P_b + j`` of the rows j it sees, in increasing position. For q head h (kv head
``g = h // G``), ``s_i = scale * (q . k_i)``, ``o = round(sum_i softmax(s)_i v_i)`` over the visible
keys i (fp32 scores, softmax and sum; one rounding to q's dtype). ``scale`` None = ``D ** -0.5``.

Exactness (what a verify needs): a row's bits are a function of its q row and its visible keys and
values, in order, only: never of the other rows, of T or B, of where the row sits in the batch, or of
where its visible keys sit in the cache. A chain row or tree node therefore gets the bits of the
one-token call (T = 1) made after the accepted path is compacted into the cache
(``spec.generate`` does that), on the same device. The CPU kernel (this function) gathers each row's
visible keys and evaluates one row at a time on tensors whose shapes depend on the visible count
only. The CUDA kernel keeps the same property with its own fixed sum order; CPU and CUDA agree to
the bound of ``attn_decode_f64_bound``, not bit for bit.
"""
from __future__ import annotations

import math

import torch

from .._checks import _fail, _shape

__all__ = ["attn_decode", "attn_decode_f64_bound", "check_attn_decode", "tree_mask", "MAX_ROWS", "MAX_GROUP",
           "HEAD_DIMS"]

MAX_ROWS = 64       # query rows a sequence (a tree of 64 nodes; the pending token and 63 drafts)
MAX_GROUP = 16      # q heads a kv head (one row of 16-row mma tiles a token on the GPU)
HEAD_DIMS = (64, 128, 256)
ACT_DTYPES = (torch.bfloat16, torch.float16)
INDEX_DTYPES = (torch.int32, torch.int64)


def _check_dense_last(op, name, t):
    if t.numel() > 0 and t.shape[-1] > 1 and t.stride(-1) != 1:
        _fail(op, f"{name} must be contiguous in its last dimension, got strides {list(t.stride())}")


def _check_index(op, name, t, batch, device):
    if not isinstance(t, torch.Tensor):
        _fail(op, f"{name} must be a Tensor, got {type(t).__name__}")
    if t.dtype not in INDEX_DTYPES:
        _fail(op, f"{name} must be int32 or int64, got {t.dtype} (shape {_shape(t)})")
    if list(t.shape) != [batch]:
        _fail(op, f"{name} must have shape [{batch}], got {_shape(t)}")
    if t.device != device:
        _fail(op, f"{name} is on {t.device} but q is on {device}")


def check_attn_decode(q, k_cache, v_cache, kv_lens, mask=None, lengths=None, scale=None, *, values=True):
    """The op's argument checks (the CPU kernel's and the fake's; the CUDA launcher has the same rules
    and messages). Returns (B, T, Hq, Hkv, D, L, scale); with ``values`` also the index values:
    (kv_lens, lengths, mask rows as lists)."""
    op = "attn_decode"
    if not isinstance(q, torch.Tensor):
        _fail(op, f"q must be a Tensor, got {type(q).__name__}")
    if q.dtype not in ACT_DTYPES:
        _fail(op, f"q must be bfloat16 or float16, got {q.dtype}")
    if q.dim() != 4:
        _fail(op, f"q must have shape [B, T, Hq, D], got {_shape(q)}")
    b, t, hq, d = q.shape
    if t < 1 or t > MAX_ROWS:
        _fail(op, f"q has {t} rows a sequence (dim 1); at least 1 and at most {MAX_ROWS}")
    if d not in HEAD_DIMS:
        _fail(op, f"q's head dim (dim 3) must be 64, 128 or 256, got {d}")
    _check_dense_last(op, "q", q)
    for name, c in (("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(c, torch.Tensor):
            _fail(op, f"{name} must be a Tensor, got {type(c).__name__}")
        if c.dtype != q.dtype:
            _fail(op, f"{name} must have q's dtype {q.dtype}, got {c.dtype}")
        if c.dim() != 4 or c.shape[0] != b or c.shape[3] != d:
            _fail(op, f"{name} must have shape [{b}, Hkv, L, {d}] (q is {_shape(q)}), got {_shape(c)}")
        if c.device != q.device:
            _fail(op, f"{name} is on {c.device} but q is on {q.device}")
        _check_dense_last(op, name, c)
    if list(v_cache.shape) != list(k_cache.shape):
        _fail(op, f"v_cache must have k_cache's shape {_shape(k_cache)}, got {_shape(v_cache)}")
    hkv, kv_slots = k_cache.shape[1], k_cache.shape[2]
    if hkv < 1 or hq % hkv or hq // hkv > MAX_GROUP:
        _fail(op, f"q's {hq} heads must be a multiple of k_cache's {hkv} kv heads, at most {MAX_GROUP} q heads "
                  f"a kv head")
    _check_index(op, "kv_lens", kv_lens, b, q.device)
    if lengths is not None:
        _check_index(op, "lengths", lengths, b, q.device)
    if mask is not None:
        if not isinstance(mask, torch.Tensor):
            _fail(op, f"mask must be a Tensor or None, got {type(mask).__name__}")
        if mask.dtype != torch.bool:
            _fail(op, f"mask must be bool, got {mask.dtype} (shape {_shape(mask)})")
        if list(mask.shape) != [b, t, t]:
            _fail(op, f"mask must have shape [{b}, {t}, {t}], got {_shape(mask)}")
        if mask.device != q.device:
            _fail(op, f"mask is on {mask.device} but q is on {q.device}")
    if scale is None:
        scale = d ** -0.5
    elif isinstance(scale, bool) or not isinstance(scale, (float, int)) or not math.isfinite(scale):
        _fail(op, f"scale must be a finite number or None, got {scale!r}")
    dims = (b, t, hq, hkv, d, kv_slots, float(scale))
    if not values:
        return dims
    ls = [t] * b if lengths is None else lengths.cpu().tolist()
    kl = kv_lens.cpu().tolist()
    for i in range(b):
        if ls[i] < 0 or ls[i] > t:
            _fail(op, f"lengths[{i}] = {ls[i]} is out of range [0, {t}]")
        if kl[i] < ls[i] or kl[i] > kv_slots:
            _fail(op, f"kv_lens[{i}] = {kl[i]} is out of range: it counts the {ls[i]} rows' keys and at most the "
                      f"cache's {kv_slots} slots")
    rows = None
    if mask is not None:
        m = mask.cpu()
        rows = []
        for i in range(b):
            seq = []
            for r in range(ls[i]):
                seen = m[i, r, : ls[i]]
                if not bool(m[i, r, r]):
                    _fail(op, f"mask[{i}, {r}, {r}] is False: a row must see its own key")
                if r + 1 < ls[i] and bool(seen[r + 1:].any()):
                    j = r + 1 + int(seen[r + 1:].nonzero()[0])
                    _fail(op, f"mask[{i}, {r}, {j}] is True: a row sees no key of a later row")
                seq.append(seen.nonzero().flatten().tolist())
            rows.append(seq)
    return dims, kl, ls, rows


def tree_mask(parents) -> torch.Tensor:
    """attn_decode's mask row block of one sequence, [T, T] bool, from a draft tree's parents (T of them,
    -1 for a child of the committed prefix, every parent an earlier row): row i sees itself and its
    ancestors. (``spec.generate`` builds HF's attention mask of a tree round from it too.)"""
    t = len(parents)
    m = torch.eye(t, dtype=torch.bool)
    for i, p in enumerate(parents):
        if p >= 0:
            m[i] |= m[p]
    return m


def _visible(kl, ls, rows, i, r):
    """Cache positions of the keys row r of sequence i sees, in order."""
    p = kl[i] - ls[i]
    draft = list(range(r + 1)) if rows is None else rows[i][r]
    return list(range(p)) + [p + j for j in draft]


def attn_decode(q, k_cache, v_cache, kv_lens, mask=None, lengths=None, *, scale=None):
    """o[b, t, h] = round(softmax(scale * q[b, t, h] . K_vis) @ V_vis) over row t's visible keys (module
    docstring); fp32 scores, softmax and sum, one rounding. Each row is evaluated alone on its gathered
    keys (shapes that depend on its visible count only), so its bits never depend on the other rows."""
    (b, t, hq, hkv, d, _, sc), kl, ls, rows = check_attn_decode(q, k_cache, v_cache, kv_lens, mask, lengths, scale)
    g = hq // hkv
    out = torch.zeros(b, t, hq, d, dtype=q.dtype, device=q.device)
    for i in range(b):
        for r in range(ls[i]):
            idx = torch.tensor(_visible(kl, ls, rows, i, r), dtype=torch.long, device=q.device)
            kk = k_cache[i].index_select(1, idx).float()                 # [Hkv, n, D]
            vv = v_cache[i].index_select(1, idx).float()
            qq = q[i, r].float().reshape(hkv, g, d)                      # [Hkv, G, D]
            s = torch.matmul(qq, kk.transpose(1, 2)) * sc                # [Hkv, G, n]
            p = torch.exp(s - s.amax(-1, keepdim=True))
            o = torch.matmul(p, vv) / p.sum(-1, keepdim=True)            # [Hkv, G, D]
            out[i, r] = o.reshape(hq, d).to(q.dtype)
    return out


def attn_decode_f64_bound(q, k_cache, v_cache, kv_lens, mask=None, lengths=None, *, scale=None):
    """(o64, bound): the op's math in float64, evaluated differently from the kernels (every cache slot
    scored, the invisible ones masked out, no gathering), and per element a bound on |o - o64| that
    any correct evaluation in the op's precisions meets: half a unit of the output's rounding (2^-8
    relative for bf16, 2^-11 for fp16) of |o64|, plus 2^-8 of the softmax-weighted mean of |v| (covers
    probabilities rounded to bf16 before the P.V product, as the CUDA kernel's tensor cores take them,
    and the fp32 sums), plus 2^-20 of it for the fp32 exponentials and scores."""
    (b, t, hq, hkv, d, kv_slots, sc), kl, ls, rows = check_attn_decode(q, k_cache, v_cache, kv_lens, mask, lengths,
                                                                        scale)
    g = hq // hkv
    vis = torch.zeros(b, t, kv_slots, dtype=torch.bool)  # from the mask itself, not from _visible
    for i in range(b):
        p, n = kl[i] - ls[i], ls[i]
        vis[i, :n, :p] = True
        seen = torch.ones(n, n, dtype=torch.bool).tril() if mask is None else mask[i, :n, :n].cpu()
        vis[i, :n, p:p + n] = seen
    vis = vis.to(q.device)
    seen = vis.any(1)[:, None, :, None]                                  # slots some row sees: the others
    kk = torch.where(seen, k_cache.double(), 0.0).repeat_interleave(g, dim=1)   # may hold anything
    vv = torch.where(seen, v_cache.double(), 0.0).repeat_interleave(g, dim=1)   # [B, Hq, L, D]
    s = torch.einsum("bthd,bhld->bthl", q.double(), kk) * sc             # [B, T, Hq, L]
    s = s.masked_fill(~vis[:, :, None, :], float("-inf"))
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)                          # rows past a length: all masked
    o64 = torch.einsum("bthl,bhld->bthd", p, vv)
    wabs = torch.einsum("bthl,bhld->bthd", p, vv.abs())
    unit = 2.0 ** -8 if q.dtype == torch.bfloat16 else 2.0 ** -11
    bound = unit * o64.abs() + (2.0 ** -8 + 2.0 ** -20) * wabs
    return o64, bound
