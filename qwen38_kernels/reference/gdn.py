"""Pure-PyTorch references of the Gated DeltaNet decode family: the contract the CUDA kernels answer to.

Plain functions for now: the ``torch.ops.qwen38.*`` ops get registered (with these names, arguments
and these functions as their CPU kernels) when their CUDA kernels exist. Math and rounding points:
MODEL.md "Reference math" (HF transformers ``models/qwen3_5/modeling_qwen3_5.py``), "Speculative
verify"; DESIGN.md "Numerics contract".

Geometry (Qwen3.8-27B GDN layer)
--------------------------------
16 q/k heads, 48 v heads (v head ``h`` uses q/k head ``h // 3``), head dims K = V = 128, a causal
depthwise conv1d of width 4 over the 10240 qkv channels. Notation below: ``B`` sequences in a call,
``T`` tokens (chain) or nodes (tree) per sequence, ``S`` rows of a state pool.

Tensors (all "dense" = contiguous in the last dimension; the references accept any strides)
----------------------------------------------------------------------------------------------
===============  ===================================  ====================================================
name             shape                                dtype / meaning
===============  ===================================  ====================================================
q, k             [B, 16, 128] (step)                  bf16 or fp16, raw (not normalised) projections
                 [B, T, 16, 128] (verify, commit)
v                [B, 48, 128] / [B, T, 48, 128]       q's dtype
a, b             [..., 48]                            gate projections (q's dtype, or fp32)
A_log, dt_bias   [48]                                 any float dtype, used as fp32
g                [B, 48] / [B, T, 48]                 fp32 (float64 allowed with acc_dtype=float64):
                                                      log-space decay, <= 0
beta             [B, 48] / [B, T, 48]                 q's dtype (what ``gdn_gates`` returns) or fp32
state_pool       [S, 48, 128 (K), 128 (V)]            fp32, contiguous, the fla/HF layout: element
                                                      [s, h, i, j] multiplies k[i] and carries v[j];
                                                      float64 allowed with acc_dtype=float64
slots            [B]                                  int32 or int64, pool row per sequence in [0, S),
                                                      or -1 = padding: the sequence is skipped (nothing
                                                      read or written, its outputs are zeros)
lengths          [B] (optional)                       int, tokens/nodes used per sequence in [0, T];
                                                      rows at and after a length give zero outputs
parents          [B, T]                               int, parent node of each tree node in
                                                      depth-first (pre-)order; -1 = a child of the
                                                      committed state
accepted         [B]                                  int: chain: accepted prefix length in [0, T];
                                                      tree: deepest accepted node in [-1, T) (-1: none)
o                [B, 48, 128] / [B, T, 48, 128]       q's dtype
x (conv)         [B, C] / [B, T, C], C = 10240        bf16 or fp16, the raw qkv projection
conv_state       [S, C, 3]                            x's dtype: the 3 previous raw inputs, index 2 newest
weight (conv)    [C, 4]                               x's dtype or fp32; weight[c, 3] multiplies the
                                                      newest input (HF's [C, 1, 4] squeezed)
===============  ===================================  ====================================================

Arithmetic (the order below IS the contract; fp32 unless ``acc_dtype=torch.float64``)
--------------------------------------------------------------------------------------
Every product-and-add is one fused multiply-add, rounded once (CUDA: ``__fmaf_rn``, which nvcc
never splits or reorders; the first product of a sum and the standalone products are rounded
``__fmul_rn``). The reference evaluates an fp32 fma exactly: the product in float64 (exact), the sum
in float64, and the one case where rounding that sum to fp32 could differ from rounding the exact
value (a float64 sum exactly halfway between two fp32 numbers, with a non-zero error) settled by the
sum's exact error. Transcendentals are *correctly rounded*: evaluated in float64 and rounded to fp32
(the kernels evaluate them in double, or in fp32 with a double fallback near rounding boundaries);
sqrt and division are IEEE, correctly rounded (``__fsqrt_rn``, ``__fdiv_rn``; never ``rsqrtf``).
Note: torch's fp32 sqrt on the CPU is not correctly rounded, so the reference takes the sqrt in
float64 and rounds it (exact for sqrt), and divides in fp32.

``ksum(a, b)`` - every sum of products over K = 128 (l2 norms, ``u = S^T k``, ``o = S^T q``): K is split
into ``K_SPLIT = 4`` contiguous segments of 32; each segment is accumulated sequentially in ascending
k with fused multiply-adds (``acc = a[32j] * b[32j]; acc = fma(a[32j+1], b[32j+1], acc); ...``), then
the 4 partials are added pairwise, ``(p0 + p1) + (p2 + p3)`` (the xor-shuffle tree of 4 lanes; IEEE
addition is commutative, so every lane gets the same bits). One function, ``_ksum``, serves the
step, the verifies and the commit. (A fused multiply-add per term is one instruction where a product
and an add are two: the token loop of a verify issues about a third fewer instructions.)

Gates (``gdn_gates``)::

    beta = round_to(b.dtype, round_fp32(sigmoid_f64(b)))      # HF: torch.sigmoid on the bf16 tensor
    x    = fp32(a) + fp32(dt_bias)                             # fp32 add
    sp   = x                         if x > 20                 # torch softplus threshold: overflow-safe
           round_fp32(log1p(exp(x)))  otherwise (in float64)
    g    = -(round_fp32(exp(fp32(A_log))) * sp)                # fp32 multiply

``beta`` equals ``torch.sigmoid(b)`` on every finite bf16 ``b`` >= -89 (below that torch's fp32
``exp`` overflows and gives 0 where this gives the bf16 subnormal).

Step (per sequence, per v head h, with qh = q/k head h // 3)::

    rq = 1 / sqrt(ksum(q, q) + 1e-6);  qn = (q * rq) * fp32(scale)   # scale = 1/sqrt(128) by default
    rk = 1 / sqrt(ksum(k, k) + 1e-6);  kn = k * rk                    # (+, sqrt, /: three fp32 roundings)
    d  = round_fp32(exp_f64(g))                                        # per-head decay
    S  = S * d
    u  = ksum_i(S[i, :], kn[i])                                        # S^T k
    dl = (v - u) * beta
    S  = fma(kn[:, None], dl[None, :], S)                              # rank-1 update, one rounding
    o  = round_to(q.dtype, ksum_i(S[i, :], qn[i]))                     # the updated S

Conv (per channel c, window u0..u3 = the 3 previous raw inputs and the current one)::

    s = ((w0*u0 + w1*u1) + w2*u2) + w3*u3            # fp32, products rounded first
    y = round_to(x.dtype, round_fp32(silu_f64(s)))   # ONE rounding of the sum: none before silu

The conv sum is NOT rounded to bf16 before silu (the causal-conv1d CUDA kernel's choice; HF's torch
fallback rounds it, which changes about 1 output in 4 by an ulp or more).

Verify / commit
---------------
Verifies never modify a pool. They return only the outputs: a commit *replays* the accepted tokens
from the verify's own inputs (k, v, g, beta for the GDN; x for the conv) with the step arithmetic, so
the committed state is bit-identical to stepping, and nothing extra is written per token. Byte cost of
a GDN commit per accepted token and layer: k 4096 + v 12288 (bf16) + g 192 + beta 96 = 16,672 B
read (vs. 32,960 B written and then read again if verify emitted fp32 normalised k, delta and decay),
plus one state read and one write (48 x 64 KiB); the engine keeps the verify's k/v/g/beta buffers
until the commit (or until the next verify when the commit is folded into it). The conv commit is
data movement only: the 3 newest raw inputs of [conv_state row, accepted path inputs].

Trees: nodes in depth-first pre-order; ``parents[b, i]`` must be -1 or an earlier node that is on the
current root-to-node path (the last node visited at its depth), so a stack with one entry per depth
holds exactly the current path. At most ``MAX_TREE_NODES = 64`` nodes and depth ``MAX_TREE_DEPTH = 64``
(depth of a child of the committed state = 1). Chains: at most ``MAX_CHAIN_TOKENS = 16``.

Every argument check happens before anything is written and raises ``ValueError("qwen38.<op>: ...")``
naming the argument.
"""
from __future__ import annotations

import math

import torch

from .._checks import _fail

__all__ = [
    "gdn_gates", "gdn_step", "gdn_step_raw", "gdn_chain_verify", "gdn_tree_verify", "gdn_commit",
    "gdn_commit_verify",
    "conv_step", "conv_chain", "conv_tree", "conv_commit",
    "N_QK_HEADS", "N_V_HEADS", "HEAD_K", "HEAD_V", "CONV_CHANNELS", "CONV_WIDTH", "K_SPLIT",
    "MAX_CHAIN_TOKENS", "MAX_TREE_NODES", "MAX_TREE_DEPTH", "L2_EPS", "DEFAULT_SCALE",
]

N_QK_HEADS = 16
N_V_HEADS = 48
GROUP = N_V_HEADS // N_QK_HEADS  # v heads per q/k head
HEAD_K = 128
HEAD_V = 128
CONV_CHANNELS = 2 * N_QK_HEADS * HEAD_K + N_V_HEADS * HEAD_V  # 10240
CONV_WIDTH = 4
K_SPLIT = 4                     # segments of a sum over K (each summed sequentially), then a pairwise tree
MAX_CHAIN_TOKENS = 16
MAX_TREE_NODES = 64
MAX_TREE_DEPTH = 64
L2_EPS = 1e-6
SOFTPLUS_THRESHOLD = 20.0
DEFAULT_SCALE = 1.0 / math.sqrt(HEAD_K)

ACT_DTYPES = (torch.bfloat16, torch.float16)
INDEX_DTYPES = (torch.int32, torch.int64)


# ---- argument checks -------------------------------------------------------------------------

def _shape(t) -> str:
    return str(list(t.shape))


def _tensor(op, name, t, dtypes, shape, device):
    if not isinstance(t, torch.Tensor):
        _fail(op, f"{name} must be a Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        names = " or ".join(str(d).replace("torch.", "") for d in dtypes)
        _fail(op, f"{name} must be {names}, got {t.dtype} (shape {_shape(t)})")
    if list(t.shape) != list(shape):
        _fail(op, f"{name} must have shape {list(shape)}, got {_shape(t)}")
    if device is not None and t.device != device:
        _fail(op, f"{name} is on {t.device} but state_pool is on {device}")
    if t.dim() > 0 and t.numel() > 0 and t.shape[-1] > 1 and t.stride(-1) != 1:
        _fail(op, f"{name} must be contiguous in its last dimension, got strides {list(t.stride())}")


def _check_acc(op, acc_dtype):
    if acc_dtype not in (torch.float32, torch.float64):
        _fail(op, f"acc_dtype must be torch.float32 or torch.float64, got {acc_dtype}")


def _check_scale(op, scale):
    if scale is None:
        return DEFAULT_SCALE
    if isinstance(scale, bool) or not isinstance(scale, (float, int)) or not math.isfinite(scale):
        _fail(op, f"scale must be a finite number or None, got {scale!r}")
    return float(scale)


def _check_pool(op, state_pool, acc_dtype):
    if not isinstance(state_pool, torch.Tensor):
        _fail(op, f"state_pool must be a Tensor, got {type(state_pool).__name__}")
    ok = (torch.float32,) if acc_dtype == torch.float32 else (torch.float32, torch.float64)
    if state_pool.dtype not in ok:
        _fail(op, f"state_pool must be float32 (float64 only with acc_dtype=torch.float64), got "
                  f"{state_pool.dtype}")
    if state_pool.dim() != 4 or list(state_pool.shape[1:]) != [N_V_HEADS, HEAD_K, HEAD_V]:
        _fail(op, f"state_pool must have shape [S, {N_V_HEADS}, {HEAD_K}, {HEAD_V}], got {_shape(state_pool)}")
    if not state_pool.is_contiguous():
        _fail(op, f"state_pool must be contiguous, got strides {list(state_pool.stride())}")


def _check_conv_state(op, conv_state, x):
    if not isinstance(conv_state, torch.Tensor):
        _fail(op, f"conv_state must be a Tensor, got {type(conv_state).__name__}")
    if conv_state.dtype != x.dtype:
        _fail(op, f"conv_state must have x's dtype {x.dtype}, got {conv_state.dtype}")
    if conv_state.dim() != 3 or conv_state.shape[1] != x.shape[-1] or conv_state.shape[2] != CONV_WIDTH - 1:
        _fail(op, f"conv_state must have shape [S, {x.shape[-1]}, {CONV_WIDTH - 1}], got {_shape(conv_state)}")
    if not conv_state.is_contiguous():
        _fail(op, f"conv_state must be contiguous, got strides {list(conv_state.stride())}")
    if x.device != conv_state.device:
        _fail(op, f"x is on {x.device} but conv_state is on {conv_state.device}")


def _check_slots(op, slots, batch, n_rows, device, *, distinct):
    _tensor(op, "slots", slots, INDEX_DTYPES, [batch], device)
    s = slots.cpu().tolist()
    for i, r in enumerate(s):
        if r < -1 or r >= n_rows:
            _fail(op, f"slots[{i}] = {r} is out of range: a slot must be -1 (padding) or in [0, {n_rows})")
    if distinct:
        live = [r for r in s if r >= 0]
        if len(set(live)) != len(live):
            _fail(op, f"slots must be distinct apart from -1 (two sequences would write one pool row), got {s}")
    return s


def _check_lengths(op, lengths, batch, t, device):
    if lengths is None:
        return [t] * batch
    _tensor(op, "lengths", lengths, INDEX_DTYPES, [batch], device)
    ls = lengths.cpu().tolist()
    for i, n in enumerate(ls):
        if n < 0 or n > t:
            _fail(op, f"lengths[{i}] = {n} is out of range [0, {t}]")
    return ls


def _tree_depths(op, parents, lengths, batch, t, device):
    """Validate depth-first order; returns depth[b][i] (1 for a child of the committed state)."""
    _tensor(op, "parents", parents, INDEX_DTYPES, [batch, t], device)
    par = parents.cpu().tolist()
    depths = []
    for b in range(batch):
        d = [0] * t
        path = [-1]  # path[j] = the node at depth j on the current path (path[0]: the committed state)
        for i in range(lengths[b]):
            p = par[b][i]
            if p < -1 or p >= i:
                _fail(op, f"parents[{b}, {i}] = {p}: a parent must be -1 or an earlier node in depth-first order")
            dp = 0 if p < 0 else d[p]
            if dp >= len(path) or path[dp] != p:  # deeper than the current path: a finished branch
                _fail(op, f"parents[{b}, {i}] = {p} is not on the current root-to-node path: the nodes are not "
                          f"in depth-first order")
            d[i] = dp + 1
            if d[i] > MAX_TREE_DEPTH:
                _fail(op, f"parents[{b}, {i}]: node depth {d[i]} is over the depth limit {MAX_TREE_DEPTH}")
            del path[d[i]:]
            path.append(i)
        depths.append(d)
    return depths, par


def _accepted_paths(op, accepted, parents, batch, t, device):
    """Token indices of each sequence's accepted path (a list per sequence)."""
    _tensor(op, "accepted", accepted, INDEX_DTYPES, [batch], device)
    acc = accepted.cpu().tolist()
    paths = []
    if parents is None:
        for b, n in enumerate(acc):
            if n < 0 or n > t:
                _fail(op, f"accepted[{b}] = {n} is out of range: an accepted chain length is in [0, {t}]")
            paths.append(list(range(n)))
        return paths
    # the whole tree is validated as the verify does (all T nodes: pad unused nodes with -1)
    _, par = _tree_depths(op, parents, [t] * batch, batch, t, device)
    for b, n in enumerate(acc):
        if n < -1 or n >= t:
            _fail(op, f"accepted[{b}] = {n} is out of range: an accepted node is -1 (none) or in [0, {t})")
    for b, n in enumerate(acc):
        path = []
        while n >= 0:
            path.append(n)
            n = par[b][n]
        paths.append(path[::-1])
    return paths


def _check_gdn_inputs(op, q, k, v, g, beta, state_pool, slots, acc_dtype, *, tokens: bool, max_t: int,
                      need_q: bool = True):
    """Checks shared by step (tokens=False), verifies and commit (tokens=True). Returns (B, T)."""
    _check_acc(op, acc_dtype)
    _check_pool(op, state_pool, acc_dtype)
    dev = state_pool.device
    ref = q if need_q else k
    ref_name = "q" if need_q else "k"
    if not isinstance(ref, torch.Tensor):
        _fail(op, f"{ref_name} must be a Tensor, got {type(ref).__name__}")
    if ref.dtype not in ACT_DTYPES:
        _fail(op, f"{ref_name} must be bfloat16 or float16, got {ref.dtype}")
    nlead = 2 if tokens else 1
    if ref.dim() != nlead + 2:
        want = "[B, T, 16, 128]" if tokens else "[B, 16, 128]"
        _fail(op, f"{ref_name} must have shape {want}, got {_shape(ref)}")
    lead = list(ref.shape[:nlead])
    batch = lead[0]
    t = lead[1] if tokens else 1
    if tokens and not 1 <= t <= max_t:
        _fail(op, f"{ref_name} has {t} tokens per sequence (dim 1); at most {max_t} and at least 1")
    act = (ref.dtype,)
    if need_q:
        _tensor(op, "q", q, act, lead + [N_QK_HEADS, HEAD_K], dev)
    _tensor(op, "k", k, act, lead + [N_QK_HEADS, HEAD_K], dev)
    _tensor(op, "v", v, act, lead + [N_V_HEADS, HEAD_V], dev)
    gd = (torch.float32,) if acc_dtype == torch.float32 else (torch.float32, torch.float64)
    _tensor(op, "g", g, gd, lead + [N_V_HEADS], dev)
    _tensor(op, "beta", beta, (ref.dtype, torch.float32), lead + [N_V_HEADS], dev)
    return batch, t


# ---- arithmetic (shared by every op: chain/tree/commit == repeated steps, bit for bit) --------

def _fma(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """``a * b + c`` rounded once to the dtype (fp32: exactly IEEE fmaf; float64, the accuracy
    reference: a float64 product and sum). Broadcasts. No host synchronisation."""
    if c.dtype != torch.float32:
        return a * b + c
    p = a.double() * b.double()  # exact: 24 + 24 significant bits
    cd = c.double()
    s = p + cd  # rounded to float64
    bv = s - p  # TwoSum: err = (p + c) - s exactly
    err = (p - (s - bv)) + (cd - bv)
    r = s.float()  # correct unless s lies exactly halfway between two fp32 numbers and err != 0
    r64 = r.double()
    t = r64 + 2 * (s - r64)  # exact; an fp32 number (the other neighbour) iff s is such a midpoint
    t32 = t.float()
    tie = (s != r64) & (t32.double() == t) & (err != 0)
    return torch.where(tie, torch.where(err > 0, torch.maximum(r, t32), torch.minimum(r, t32)), r)


def _ksum(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``sum_k a[..., k, n] * b[..., k, n]`` over dim -2 (K = 128; the two broadcast against each other)
    in the contract's order -> ``[..., N]``: K_SPLIT contiguous segments, each accumulated sequentially
    in ascending k with fused multiply-adds from its first (rounded) product, then the partials added
    pairwise."""
    a, b = torch.broadcast_tensors(a, b)
    sa = a.unflatten(-2, (K_SPLIT, a.shape[-2] // K_SPLIT)).movedim(-2, 0)  # [32, ..., K_SPLIT, N]
    sb = b.unflatten(-2, (K_SPLIT, b.shape[-2] // K_SPLIT)).movedim(-2, 0)
    acc = sa[0] * sb[0]
    for i in range(1, sa.shape[0]):
        acc = _fma(sa[i], sb[i], acc)
    acc = acc.movedim(-2, 0)  # [K_SPLIT, ..., N]
    while acc.shape[0] > 1:  # (p0 + p1) + (p2 + p3)
        acc = acc[0::2] + acc[1::2]
    return acc[0]


def _l2norm(x: torch.Tensor) -> torch.Tensor:
    """x [..., 128] -> x * (1 / sqrt(ksum(x, x) + 1e-6)), in x's dtype."""
    xs = x.unsqueeze(-1)
    ss = _ksum(xs, xs).squeeze(-1) + L2_EPS
    # correctly rounded sqrt: through float64 (innocuous double rounding for sqrt). torch's fp32 CPU
    # sqrt is NOT correctly rounded (about 1 result in 5 is 1 ulp off on AVX2), so it is not used.
    sq = torch.sqrt(ss.to(torch.float64)).to(ss.dtype)
    r = 1.0 / sq  # IEEE division in x's dtype
    return x * r.unsqueeze(-1)


def _decay(g: torch.Tensor, acc_dtype) -> torch.Tensor:
    d = torch.exp(g.to(torch.float64))
    return d.to(acc_dtype)  # float64 -> fp32: one rounding (a correctly rounded expf)


def _gdn_core(S, q, k, v, decay, beta, scale, *, want_out=True):
    """One token for n sequences, everything in S's dtype (the accumulation dtype).

    S [n, 48, 128, 128]; q, k [n, 16, 128] raw; v [n, 48, 128]; decay, beta [n, 48].
    Returns (S', o [n, 48, 128] unrounded, or None)."""
    kn = _l2norm(k).repeat_interleave(GROUP, dim=-2)            # [n, 48, 128]
    S = S * decay[..., None, None]
    u = _ksum(S, kn[..., :, None])                              # [n, 48, V]
    delta = (v - u) * beta[..., None]
    S = _fma(kn[..., :, None], delta[..., None, :], S)
    if not want_out:
        return S, None
    qn = (_l2norm(q) * scale).repeat_interleave(GROUP, dim=-2)
    return S, _ksum(S, qn[..., :, None])


def _silu_round(s: torch.Tensor, out_dtype, acc_dtype) -> torch.Tensor:
    y = torch.nn.functional.silu(s.to(torch.float64))
    if acc_dtype == torch.float32:
        y = y.to(torch.float32)
    return y.to(out_dtype)


def _conv_core(win: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """win [..., C, 4] raw inputs (oldest first), w [C, 4], both in the accumulation dtype -> sum [..., C]."""
    p = win * w
    return ((p[..., 0] + p[..., 1]) + p[..., 2]) + p[..., 3]


# ---- gates --------------------------------------------------------------------------------------

def gdn_gates(a: torch.Tensor, b: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor,
              *, acc_dtype: torch.dtype = torch.float32):
    """``(g, beta)`` from the raw gate projections.

    a, b: [..., 48] (e.g. [B, 48] or [B, T, 48]), bf16/fp16/fp32, same shape. A_log, dt_bias: [48],
    any float dtype (used as fp32). Returns g [..., 48] fp32 (float64 with acc_dtype=float64: no
    fp32 rounding) and beta [..., 48] in b's dtype (rounded at the bf16 point in both modes).
    """
    op = "gdn_gates"
    _check_acc(op, acc_dtype)
    fl = (torch.bfloat16, torch.float16, torch.float32)
    if not isinstance(a, torch.Tensor) or a.dim() < 1 or a.shape[-1] != N_V_HEADS:
        _fail(op, f"a must be a Tensor of shape [..., {N_V_HEADS}], got "
                  f"{_shape(a) if isinstance(a, torch.Tensor) else type(a).__name__}")
    _tensor(op, "a", a, fl, list(a.shape), None)
    _tensor(op, "b", b, fl, list(a.shape), a.device)
    _tensor(op, "A_log", A_log, fl + (torch.float64,), [N_V_HEADS], a.device)
    _tensor(op, "dt_bias", dt_bias, fl + (torch.float64,), [N_V_HEADS], a.device)
    beta = torch.sigmoid(b.to(torch.float64)).to(torch.float32).to(b.dtype)
    x = a.to(torch.float32) + dt_bias.to(torch.float32)
    sp = torch.log1p(torch.exp(x.to(torch.float64)))
    A = torch.exp(A_log.to(torch.float32).to(torch.float64))
    if acc_dtype == torch.float32:
        sp, A = sp.to(torch.float32), A.to(torch.float32)
    sp = torch.where(x > SOFTPLUS_THRESHOLD, x.to(sp.dtype), sp)
    g = -(A * sp)
    return g, beta


# ---- GDN ops ------------------------------------------------------------------------------------

def gdn_step(q, k, v, g, beta, state_pool, slots, *, scale=None, acc_dtype=torch.float32):
    """One decode token for each of B sequences; updates ``state_pool`` rows ``slots`` in place.

    q, k [B, 16, 128], v [B, 48, 128] (bf16/fp16), g [B, 48] fp32, beta [B, 48] (q's dtype or fp32),
    state_pool [S, 48, 128, 128] fp32, slots [B] int (-1 = padding: skipped, output row zeros).
    scale: multiplies the l2-normalised q (None: 1/sqrt(128), used as fp32).
    Returns o [B, 48, 128] in q's dtype. acc_dtype=float64: the float64 evaluation (state_pool may
    then be float64 to carry the state unrounded).
    """
    op = "gdn_step"
    batch, _ = _check_gdn_inputs(op, q, k, v, g, beta, state_pool, slots, acc_dtype, tokens=False, max_t=1)
    sc = _check_scale(op, scale)
    s = _check_slots(op, slots, batch, state_pool.shape[0], state_pool.device, distinct=True)
    out = torch.zeros(batch, N_V_HEADS, HEAD_V, dtype=q.dtype, device=q.device)
    live = [i for i, r in enumerate(s) if r >= 0]
    if not live:
        return out
    li = torch.tensor(live, dtype=torch.long, device=q.device)
    rows = torch.tensor([s[i] for i in live], dtype=torch.long, device=q.device)
    ad = acc_dtype
    S, o = _gdn_core(state_pool[rows].to(ad), q[li].to(ad), k[li].to(ad), v[li].to(ad),
                     _decay(g[li], ad), beta[li].to(ad), sc)
    state_pool[rows] = S.to(state_pool.dtype)
    out[li] = o.to(q.dtype)
    return out


def gdn_step_raw(q, k, v, a, b, A_log, dt_bias, state_pool, slots, *, scale=None, acc_dtype=torch.float32):
    """``gdn_step`` with the raw gate inputs: a, b [B, 48], A_log, dt_bias [48] -> ``gdn_gates`` first
    (the fused kernel computes the gates in-kernel with the same rounding). Returns o [B, 48, 128]."""
    g, beta = gdn_gates(a, b, A_log, dt_bias, acc_dtype=acc_dtype)
    return gdn_step(q, k, v, g, beta, state_pool, slots, scale=scale, acc_dtype=acc_dtype)


def gdn_chain_verify(q, k, v, g, beta, state_pool, slots, lengths=None, *, scale=None,
                     acc_dtype=torch.float32):
    """Chain verify of up to 16 drafted tokens per sequence; ``state_pool`` is NOT modified.

    q, k [B, T, 16, 128], v [B, T, 48, 128], g [B, T, 48] fp32, beta [B, T, 48]; T <= 16;
    lengths [B] (optional, tokens used per sequence, default T); slots as in ``gdn_step`` (duplicates
    allowed: nothing is written). Returns o [B, T, 48, 128] in q's dtype: row t equals the t-th of
    t+1 successive ``gdn_step`` calls, bit for bit; rows at/after a length and padding sequences are
    zeros. Nothing else is returned: ``gdn_commit`` replays the accepted tokens from k, v, g, beta.
    """
    op = "gdn_chain_verify"
    batch, t = _check_gdn_inputs(op, q, k, v, g, beta, state_pool, slots, acc_dtype, tokens=True,
                                 max_t=MAX_CHAIN_TOKENS)
    sc = _check_scale(op, scale)
    s = _check_slots(op, slots, batch, state_pool.shape[0], state_pool.device, distinct=False)
    ls = _check_lengths(op, lengths, batch, t, state_pool.device)
    parents = [[j - 1 for j in range(t)] for _ in range(batch)]
    depths = [[j + 1 for j in range(t)] for _ in range(batch)]
    return _gdn_tree_run(q, k, v, g, beta, state_pool, s, parents, depths, ls, sc, acc_dtype)


def gdn_tree_verify(q, k, v, g, beta, state_pool, slots, parents, lengths=None, *, scale=None,
                    acc_dtype=torch.float32):
    """Tree verify of up to 64 nodes per sequence in depth-first order; ``state_pool`` is NOT modified.

    q, k [B, T, 16, 128], v [B, T, 48, 128], g [B, T, 48] fp32, beta [B, T, 48]; T <= 64;
    parents [B, T] int: -1 = child of the committed state, else an earlier node on the current path
    (depth-first pre-order; anything else raises); depth <= 64; lengths [B] optional node counts
    (parents of nodes past a length are ignored). Returns o [B, T, 48, 128]: node i's row equals
    ``gdn_step`` applied along its root-to-node path, bit for bit; unused rows are zeros.
    Evaluated with a stack holding one state per depth (the current node's path).
    """
    op = "gdn_tree_verify"
    batch, t = _check_gdn_inputs(op, q, k, v, g, beta, state_pool, slots, acc_dtype, tokens=True,
                                 max_t=MAX_TREE_NODES)
    sc = _check_scale(op, scale)
    s = _check_slots(op, slots, batch, state_pool.shape[0], state_pool.device, distinct=False)
    ls = _check_lengths(op, lengths, batch, t, state_pool.device)
    depths, par = _tree_depths(op, parents, ls, batch, t, state_pool.device)
    return _gdn_tree_run(q, k, v, g, beta, state_pool, s, par, depths, ls, sc, acc_dtype)


def _gdn_tree_run(q, k, v, g, beta, state_pool, s, par, depths, ls, scale, ad):
    batch, t = q.shape[:2]
    out = torch.zeros(batch, t, N_V_HEADS, HEAD_V, dtype=q.dtype, device=q.device)
    live = [b for b in range(batch) if s[b] >= 0 and ls[b] > 0]
    if not live:
        return out
    dmax = max(max(depths[b][:ls[b]]) for b in live)
    rows = torch.tensor([s[b] for b in live], dtype=torch.long, device=q.device)
    # stack[d, j]: the state after the node at depth d on sequence live[j]'s current path
    stack = torch.empty((dmax + 1, len(live), N_V_HEADS, HEAD_K, HEAD_V), dtype=ad, device=q.device)
    stack[0] = state_pool[rows].to(ad)
    for i in range(t):
        act = [j for j, b in enumerate(live) if i < ls[b]]
        if not act:
            continue
        bs = torch.tensor([live[j] for j in act], dtype=torch.long, device=q.device)
        js = torch.tensor(act, dtype=torch.long, device=q.device)
        d = torch.tensor([depths[live[j]][i] for j in act], dtype=torch.long, device=q.device)
        S, o = _gdn_core(stack[d - 1, js], q[bs, i].to(ad), k[bs, i].to(ad), v[bs, i].to(ad),
                         _decay(g[bs, i], ad), beta[bs, i].to(ad), scale)
        stack[d, js] = S
        out[bs, i] = o.to(q.dtype)
    return out


def gdn_commit(k, v, g, beta, state_pool, slots, accepted, parents=None, *, acc_dtype=torch.float32):
    """Leave in ``state_pool`` the state the one-token path would have left after the accepted tokens.

    k [B, T, 16, 128], v [B, T, 48, 128], g [B, T, 48], beta [B, T, 48]: the verify's inputs.
    Chain (parents None): accepted [B] = accepted prefix length in [0, T]. Tree: parents [B, T] as
    given to the verify (validated the same way over all T nodes: unused nodes must hold a valid
    parent, e.g. -1), accepted [B] = the deepest accepted node (-1: none); the path is that node's
    ancestors. Slots as in ``gdn_step`` (must be distinct). The pool rows end bit-identical to
    ``gdn_step`` run over the path's tokens. Returns None.
    """
    op = "gdn_commit"
    batch, t = _check_gdn_inputs(op, None, k, v, g, beta, state_pool, slots, acc_dtype, tokens=True,
                                 max_t=MAX_TREE_NODES, need_q=False)
    s = _check_slots(op, slots, batch, state_pool.shape[0], state_pool.device, distinct=True)
    paths = _accepted_paths(op, accepted, parents, batch, t, state_pool.device)
    live = [b for b in range(batch) if s[b] >= 0 and paths[b]]
    if not live:
        return None
    ad = acc_dtype
    dev = k.device
    rows = torch.tensor([s[b] for b in live], dtype=torch.long, device=dev)
    W = state_pool[rows].to(ad)
    for j in range(max(len(paths[b]) for b in live)):
        act = [n for n, b in enumerate(live) if j < len(paths[b])]
        bs = torch.tensor([live[n] for n in act], dtype=torch.long, device=dev)
        ns = torch.tensor(act, dtype=torch.long, device=dev)
        ts = torch.tensor([paths[live[n]][j] for n in act], dtype=torch.long, device=dev)
        W[ns], _ = _gdn_core(W[ns], None, k[bs, ts].to(ad), v[bs, ts].to(ad), _decay(g[bs, ts], ad),
                             beta[bs, ts].to(ad), None, want_out=False)
    state_pool[rows] = W.to(state_pool.dtype)
    return None


def gdn_commit_verify(c_k, c_v, c_g, c_beta, c_accepted, c_parents, q, k, v, g, beta, state_pool, slots,
                      parents=None, lengths=None, *, scale=None, acc_dtype=torch.float32):
    """The pending commit folded into the next verify (one state read and one write per round).

    ``gdn_commit(c_k, c_v, c_g, c_beta, state_pool, slots, c_accepted, c_parents)`` (the previous
    round's verify inputs and accepted tokens), then ``gdn_chain_verify`` (parents None, T <= 16) or
    ``gdn_tree_verify`` (T <= 64) of q, k, v, g, beta from the committed state. The pending commit's
    B equals the verify's; its token count Tc is its own. Every check happens before anything is
    written (the verify's named as gdn_commit_verify, the pending commit's as gdn_commit does).
    Slots must be distinct apart from -1. Returns the verify's o [B, T, 48, 128].
    """
    op = "gdn_commit_verify"
    tree = parents is not None
    batch, t = _check_gdn_inputs(op, q, k, v, g, beta, state_pool, slots, acc_dtype, tokens=True,
                                 max_t=MAX_TREE_NODES if tree else MAX_CHAIN_TOKENS)
    _check_scale(op, scale)
    _check_slots(op, slots, batch, state_pool.shape[0], state_pool.device, distinct=True)
    ls = _check_lengths(op, lengths, batch, t, state_pool.device)
    if tree:
        _tree_depths(op, parents, ls, batch, t, state_pool.device)
    cb, ct = _check_gdn_inputs("gdn_commit", None, c_k, c_v, c_g, c_beta, state_pool, slots, acc_dtype,
                               tokens=True, max_t=MAX_TREE_NODES, need_q=False)
    if cb != batch:
        _fail(op, f"c_k has {cb} sequences but q has {batch}: the pending commit and the verify are one batch")
    _accepted_paths("gdn_commit", c_accepted, c_parents, cb, ct, state_pool.device)
    gdn_commit(c_k, c_v, c_g, c_beta, state_pool, slots, c_accepted, c_parents, acc_dtype=acc_dtype)
    if tree:
        return gdn_tree_verify(q, k, v, g, beta, state_pool, slots, parents, lengths, scale=scale,
                               acc_dtype=acc_dtype)
    return gdn_chain_verify(q, k, v, g, beta, state_pool, slots, lengths, scale=scale, acc_dtype=acc_dtype)


# ---- causal conv1d ------------------------------------------------------------------------------

def _check_conv(op, x, conv_state, weight, slots, *, tokens: bool, max_t: int, distinct: bool,
                need_weight: bool = True, acc_dtype=torch.float32):
    _check_acc(op, acc_dtype)
    if not isinstance(x, torch.Tensor):
        _fail(op, f"x must be a Tensor, got {type(x).__name__}")
    if x.dtype not in ACT_DTYPES:
        _fail(op, f"x must be bfloat16 or float16, got {x.dtype}")
    nd = 3 if tokens else 2
    if x.dim() != nd:
        _fail(op, f"x must have shape {'[B, T, C]' if tokens else '[B, C]'}, got {_shape(x)}")
    _tensor(op, "x", x, (x.dtype,), list(x.shape), None)
    _check_conv_state(op, conv_state, x)
    batch = x.shape[0]
    t = x.shape[1] if tokens else 1
    if tokens and not 1 <= t <= max_t:
        _fail(op, f"x has {t} tokens per sequence (dim 1); at most {max_t} and at least 1")
    if need_weight:
        _tensor(op, "weight", weight, (x.dtype, torch.float32), [x.shape[-1], CONV_WIDTH], x.device)
    s = _check_slots(op, slots, batch, conv_state.shape[0], x.device, distinct=distinct)
    return batch, t, s


def conv_step(x, conv_state, weight, slots, *, acc_dtype=torch.float32):
    """One token of the causal depthwise conv1d (width 4) + silu; updates ``conv_state`` in place.

    x [B, C] (C = 10240, bf16/fp16), conv_state [S, C, 3] x's dtype (index 2 = newest previous raw
    input), weight [C, 4] x's dtype or fp32 (weight[c, 3] multiplies x), slots [B] (-1: padding,
    skipped, output row zeros). The row's state becomes (s1, s2, x). Returns y [B, C] in x's dtype:
    silu of the fp32 sum, one rounding (the sum is not rounded before silu).
    """
    op = "conv_step"
    batch, _, s = _check_conv(op, x, conv_state, weight, slots, tokens=False, max_t=1, distinct=True,
                              acc_dtype=acc_dtype)
    out = torch.zeros_like(x)
    live = [i for i, r in enumerate(s) if r >= 0]
    if not live:
        return out
    li = torch.tensor(live, dtype=torch.long, device=x.device)
    rows = torch.tensor([s[i] for i in live], dtype=torch.long, device=x.device)
    old = conv_state[rows]
    win = torch.cat([old, x[li].unsqueeze(-1)], dim=-1)         # [n, C, 4]
    ssum = _conv_core(win.to(acc_dtype), weight.to(acc_dtype))
    out[li] = _silu_round(ssum, x.dtype, acc_dtype)
    conv_state[rows] = win[..., 1:]
    return out


def _conv_run(x, conv_state, weight, s, par, ls, acc_dtype):
    """Windows built from each node's ancestors (falling back to the conv_state row); no writes."""
    batch, t, c = x.shape
    out = torch.zeros_like(x)
    for b in range(batch):
        if s[b] < 0 or ls[b] == 0:
            continue
        buf = torch.cat([conv_state[s[b]].transpose(0, 1), x[b, :ls[b]]], dim=0)  # [3 + n, C]
        hist = {-1: [0, 1, 2]}  # indices into buf of the 3 newest inputs before a node (oldest first)
        idx = []
        for i in range(ls[b]):
            h = hist[par[b][i]] + [3 + i]
            idx.append(h)
            hist[i] = h[1:]
        win = buf[torch.tensor(idx, dtype=torch.long, device=x.device)]  # [n, 4, C]
        ssum = _conv_core(win.transpose(1, 2).to(acc_dtype), weight.to(acc_dtype))
        out[b, :ls[b]] = _silu_round(ssum, x.dtype, acc_dtype)
    return out


def conv_chain(x, conv_state, weight, slots, lengths=None, *, acc_dtype=torch.float32):
    """Chain verify of the conv: x [B, T, C], T <= 16; conv_state NOT modified. Returns y [B, T, C]:
    row t equals the t-th of t+1 successive ``conv_step`` calls; unused rows are zeros."""
    op = "conv_chain"
    batch, t, s = _check_conv(op, x, conv_state, weight, slots, tokens=True, max_t=MAX_CHAIN_TOKENS,
                              distinct=False, acc_dtype=acc_dtype)
    ls = _check_lengths(op, lengths, batch, t, x.device)
    par = [[j - 1 for j in range(t)] for _ in range(batch)]
    return _conv_run(x, conv_state, weight, s, par, ls, acc_dtype)


def conv_tree(x, conv_state, weight, slots, parents, lengths=None, *, acc_dtype=torch.float32):
    """Tree verify of the conv: x [B, T, C], T <= 64 nodes in depth-first order, parents [B, T] as in
    ``gdn_tree_verify``; a node's window is its 3 nearest ancestors' inputs (then the conv_state row's
    newest entries) and its own. conv_state NOT modified. Returns y [B, T, C]."""
    op = "conv_tree"
    batch, t, s = _check_conv(op, x, conv_state, weight, slots, tokens=True, max_t=MAX_TREE_NODES,
                              distinct=False, acc_dtype=acc_dtype)
    ls = _check_lengths(op, lengths, batch, t, x.device)
    _, par = _tree_depths(op, parents, ls, batch, t, x.device)
    return _conv_run(x, conv_state, weight, s, par, ls, acc_dtype)


def conv_commit(x, conv_state, slots, accepted, parents=None):
    """Leave in ``conv_state`` rows the 3 newest raw inputs of [row, accepted path inputs]: the state
    ``conv_step`` over the accepted tokens would leave. x [B, T, C] (the verify's inputs); accepted /
    parents as in ``gdn_commit``. Pure data movement. Returns None."""
    op = "conv_commit"
    batch, t, s = _check_conv(op, x, conv_state, None, slots, tokens=True, max_t=MAX_TREE_NODES,
                              distinct=True, need_weight=False)
    paths = _accepted_paths(op, accepted, parents, batch, t, x.device)
    new = {}
    for b in range(batch):
        if s[b] < 0 or not paths[b]:
            continue
        seq = torch.cat([conv_state[s[b]], x[b, paths[b]].transpose(0, 1)], dim=-1)  # [C, 3 + n]
        new[s[b]] = seq[:, -(CONV_WIDTH - 1):].clone()
    for r, st in new.items():
        conv_state[r] = st
    return None
