"""Public wrappers of the Gated DeltaNet decode family: one call into torch.ops.qwen38 each.

Beside each wrapper: its fake kernel (shapes and the same argument checks, for torch.compile and
opcheck) and its CPU kernel, which is the pure-PyTorch reference of the same name
(``qwen38_kernels.reference.gdn``: the arithmetic order the CUDA kernels follow bit for bit).

Tensors (Qwen3.8-27B GDN layer: 16 q/k heads, 48 v heads, head dims 128; v head h uses q/k head
h // 3). ``B`` sequences, ``T`` tokens (chain) or nodes (tree) per sequence, ``S`` pool rows.
Every tensor must be contiguous in its last dimension; other strides are free (the CUDA kernels
take them), except ``state_pool``, which must be contiguous.

==============  ==========================  ===========================================================
name            shape                       dtype / layout
==============  ==========================  ===========================================================
q, k            [B, 16, 128] / [B, T, 16,   bf16 or fp16, raw projections (the kernels normalise them)
                128]
v               [B, 48, 128] / [B, T, 48,   q's dtype
                128]
g               [B, 48] / [B, T, 48]        fp32, log-space decay (<= 0): the state is scaled by exp(g)
beta            [B, 48] / [B, T, 48]        q's dtype or fp32
a, b            [B, 48]                     bf16, fp16 or fp32 (gdn_step_raw: the gate projections)
A_log, dt_bias  [48]                        bf16, fp16, fp32 or fp64 (used as fp32)
state_pool      [S, 48, 128 (K), 128 (V)]   fp32, contiguous (fla/HF layout: element [s, h, i, j]
                                            multiplies k[i] and carries v[j])
slots           [B]                         int32/int64 pool row per sequence, -1 = padding (skipped:
                                            nothing read or written, output rows zeros)
lengths         [B] or None                 int32/int64 tokens/nodes used per sequence in [0, T]
                                            (None: T); rows at and after a length give zeros
parents         [B, T]                      int32/int64 parent of each node in depth-first pre-order:
                                            -1 (a child of the committed state) or an earlier node on
                                            the current root-to-node path
accepted        [B]                         int32/int64; chain: accepted prefix length in [0, T];
                                            tree: the deepest accepted node in [-1, T) (-1: none)
o (returned)    [B, 48, 128] / [B, T, 48,   q's dtype, contiguous
                128]
==============  ==========================  ===========================================================

The step and the commit update ``state_pool`` in place (declared ``Tensor(a!)`` in the schema);
the verifies never write it. The raw-gate step is its own op (``gdn_step_raw``): it writes the
same set of tensors as ``gdn_step`` but takes different arguments, and an overload would hide that
its gates are computed in the kernel (``reference.gdn_gates``' rounding: beta rounded to b's dtype).

Argument values (slot ranges and distinctness, lengths, parents in depth-first order, accepted
ranges) are validated like the reference does. On CUDA that needs the index tensors on the host:
an eager call copies them (a small synchronising copy) unless ``QWEN38_GDN_CHECK_INDICES=0``;
during CUDA-graph capture the copy is impossible and is skipped. The kernels guard themselves in
every case: a sequence whose slot is out of range, or that repeats an earlier sequence's slot in a
writing op, writes nothing; a tree stops at the first node whose parent is not on its path (its
later rows are zeros); an out-of-range length or accepted value leaves the sequence untouched.
"""
from __future__ import annotations

import torch

from .. import knobs
from ..reference import gdn as ref

__all__ = ["gdn_step", "gdn_step_raw", "gdn_chain_verify", "gdn_tree_verify", "gdn_commit", "gdn_commit_verify"]

_ops = torch.ops.qwen38


def gdn_step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
             state_pool: torch.Tensor, slots: torch.Tensor, *, scale: float | None = None) -> torch.Tensor:
    """One decode token for each of B sequences; updates ``state_pool`` rows ``slots`` in place.

    q, k [B, 16, 128], v [B, 48, 128] (bf16/fp16), g [B, 48] fp32, beta [B, 48] (q's dtype or fp32),
    state_pool [S, 48, 128, 128] fp32 contiguous (CUDA: starting 16-byte aligned), slots [B] int
    (-1 = padding). ``scale`` multiplies the l2-normalised q (None: 1/sqrt(128), used as fp32).
    Returns o [B, 48, 128] in q's dtype.
    """
    return _ops.gdn_step(q, k, v, g, beta, state_pool, slots, scale=scale)


def gdn_step_raw(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                 A_log: torch.Tensor, dt_bias: torch.Tensor, state_pool: torch.Tensor, slots: torch.Tensor,
                 *, scale: float | None = None) -> torch.Tensor:
    """``gdn_step`` with the gates computed in the kernel from the raw projections a, b [B, 48]
    (bf16/fp16/fp32) and the per-head A_log, dt_bias [48]:
    ``beta = round_to(b.dtype, sigmoid(b))``, ``g = -exp(fp32(A_log)) * softplus(fp32(a) + fp32(dt_bias))``
    with the rounding of ``reference.gdn_gates``. Returns o [B, 48, 128] in q's dtype."""
    return _ops.gdn_step_raw(q, k, v, a, b, A_log, dt_bias, state_pool, slots, scale=scale)


def gdn_chain_verify(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                     state_pool: torch.Tensor, slots: torch.Tensor, lengths: torch.Tensor | None = None, *,
                     scale: float | None = None) -> torch.Tensor:
    """Chain verify of up to 16 drafted tokens per sequence; ``state_pool`` is read only.

    q, k [B, T, 16, 128], v [B, T, 48, 128], g [B, T, 48] fp32, beta [B, T, 48]; 1 <= T <= 16;
    lengths [B] or None. Slots may repeat (nothing is written). Returns o [B, T, 48, 128]: row t is
    bit-identical to the last of t + 1 successive ``gdn_step`` calls; rows at and after a length and
    padding sequences are zeros. ``gdn_commit`` later replays the accepted tokens from k, v, g, beta.
    """
    return _ops.gdn_chain_verify(q, k, v, g, beta, state_pool, slots, lengths, scale=scale)


def gdn_tree_verify(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                    state_pool: torch.Tensor, slots: torch.Tensor, parents: torch.Tensor,
                    lengths: torch.Tensor | None = None, *, scale: float | None = None) -> torch.Tensor:
    """Tree verify of up to 64 nodes per sequence in depth-first pre-order; ``state_pool`` is read only.

    Tensors as in ``gdn_chain_verify`` with 1 <= T <= 64, plus parents [B, T] (-1 = a child of the
    committed state, else an earlier node on the current root-to-node path; parents past a length
    are ignored). Returns o [B, T, 48, 128]: node i's row is bit-identical to ``gdn_step`` applied
    along its root-to-node path; unused rows are zeros.
    """
    return _ops.gdn_tree_verify(q, k, v, g, beta, state_pool, slots, parents, lengths, scale=scale)


def gdn_commit(k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, state_pool: torch.Tensor,
               slots: torch.Tensor, accepted: torch.Tensor, parents: torch.Tensor | None = None) -> None:
    """Leave in ``state_pool`` rows ``slots`` the state stepping through the accepted tokens leaves.

    k [B, T, 16, 128], v [B, T, 48, 128], g [B, T, 48], beta [B, T, 48]: the verify's own inputs.
    Chain (parents None): accepted [B] = accepted prefix length in [0, T]. Tree: parents [B, T] as
    given to the verify (all T entries are validated: pad unused nodes with -1), accepted [B] = the
    deepest accepted node (-1: none). Slots must be distinct apart from -1. Returns None.
    """
    _ops.gdn_commit(k, v, g, beta, state_pool, slots, accepted, parents)


def gdn_commit_verify(c_k: torch.Tensor, c_v: torch.Tensor, c_g: torch.Tensor, c_beta: torch.Tensor,
                      c_accepted: torch.Tensor, c_parents: torch.Tensor | None, q: torch.Tensor, k: torch.Tensor,
                      v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, state_pool: torch.Tensor,
                      slots: torch.Tensor, parents: torch.Tensor | None = None, lengths: torch.Tensor | None = None,
                      *, scale: float | None = None) -> torch.Tensor:
    """The previous round's commit folded into this round's verify.

    c_k [B, Tc, 16, 128], c_v [B, Tc, 48, 128], c_g [B, Tc, 48], c_beta [B, Tc, 48], c_accepted [B],
    c_parents [B, Tc] or None: the pending commit (what ``gdn_commit`` takes: the previous verify's
    inputs and accepted tokens). q, k, v, g, beta [B, T, ...], parents [B, T] or None (None: a chain
    verify, T <= 16; else a tree verify, T <= 64), lengths [B] or None: this round's verify. Slots
    must be distinct apart from -1. The pool rows end committed (as ``gdn_commit`` leaves them) and
    the returned o [B, T, 48, 128] is the verify's from the committed state, bit for bit.

    ``QWEN38_COMMIT_IN_VERIFY=1`` (default): one kernel, each state tile read once and written once
    (the separate commit and verify read each tile twice and write it once). ``0``: ``gdn_commit``
    then the verify op, two launches, the same bits (the A/B baseline; the verify's arguments are
    then checked only after the commit has written).
    """
    if not knobs.enabled("QWEN38_COMMIT_IN_VERIFY"):
        gdn_commit(c_k, c_v, c_g, c_beta, state_pool, slots, c_accepted, c_parents)
        if parents is None:
            return gdn_chain_verify(q, k, v, g, beta, state_pool, slots, lengths, scale=scale)
        return gdn_tree_verify(q, k, v, g, beta, state_pool, slots, parents, lengths, scale=scale)
    return _ops.gdn_commit_verify(c_k, c_v, c_g, c_beta, c_accepted, c_parents, q, k, v, g, beta, state_pool,
                                  slots, parents, lengths, scale=scale)


# ---- CPU kernels: the references -------------------------------------------------------------
torch.library.register_kernel("qwen38::gdn_step", "cpu", ref.gdn_step)
torch.library.register_kernel("qwen38::gdn_step_raw", "cpu", ref.gdn_step_raw)
torch.library.register_kernel("qwen38::gdn_chain_verify", "cpu", ref.gdn_chain_verify)
torch.library.register_kernel("qwen38::gdn_tree_verify", "cpu", ref.gdn_tree_verify)
torch.library.register_kernel("qwen38::gdn_commit", "cpu", ref.gdn_commit)
torch.library.register_kernel("qwen38::gdn_commit_verify", "cpu", ref.gdn_commit_verify)


# ---- fake kernels: the reference's structural checks (no index values: fakes have none) ------
_F32 = torch.float32


def _check_index(op, name, t, shape, device):
    ref._tensor(op, name, t, ref.INDEX_DTYPES, shape, device)


def _out(q, lead):
    return q.new_empty((*lead, ref.N_V_HEADS, ref.HEAD_V))


@torch.library.register_fake("qwen38::gdn_step")
def _gdn_step_fake(q, k, v, g, beta, state_pool, slots, *, scale=None):
    op = "gdn_step"
    batch, _ = ref._check_gdn_inputs(op, q, k, v, g, beta, state_pool, slots, _F32, tokens=False, max_t=1)
    ref._check_scale(op, scale)
    _check_index(op, "slots", slots, [batch], state_pool.device)
    return _out(q, (batch,))


@torch.library.register_fake("qwen38::gdn_step_raw")
def _gdn_step_raw_fake(q, k, v, a, b, A_log, dt_bias, state_pool, slots, *, scale=None):
    g, beta = ref.gdn_gates(a, b, A_log, dt_bias)  # its checks; shapes only on fake tensors
    return _gdn_step_fake(q, k, v, g, beta, state_pool, slots, scale=scale)


@torch.library.register_fake("qwen38::gdn_chain_verify")
def _gdn_chain_verify_fake(q, k, v, g, beta, state_pool, slots, lengths=None, *, scale=None):
    op = "gdn_chain_verify"
    batch, t = ref._check_gdn_inputs(op, q, k, v, g, beta, state_pool, slots, _F32, tokens=True,
                                     max_t=ref.MAX_CHAIN_TOKENS)
    ref._check_scale(op, scale)
    _check_index(op, "slots", slots, [batch], state_pool.device)
    if lengths is not None:
        _check_index(op, "lengths", lengths, [batch], state_pool.device)
    return _out(q, (batch, t))


@torch.library.register_fake("qwen38::gdn_tree_verify")
def _gdn_tree_verify_fake(q, k, v, g, beta, state_pool, slots, parents, lengths=None, *, scale=None):
    op = "gdn_tree_verify"
    batch, t = ref._check_gdn_inputs(op, q, k, v, g, beta, state_pool, slots, _F32, tokens=True,
                                     max_t=ref.MAX_TREE_NODES)
    ref._check_scale(op, scale)
    _check_index(op, "slots", slots, [batch], state_pool.device)
    if lengths is not None:
        _check_index(op, "lengths", lengths, [batch], state_pool.device)
    _check_index(op, "parents", parents, [batch, t], state_pool.device)
    return _out(q, (batch, t))


@torch.library.register_fake("qwen38::gdn_commit")
def _gdn_commit_fake(k, v, g, beta, state_pool, slots, accepted, parents=None):
    op = "gdn_commit"
    batch, t = ref._check_gdn_inputs(op, None, k, v, g, beta, state_pool, slots, _F32, tokens=True,
                                     max_t=ref.MAX_TREE_NODES, need_q=False)
    _check_index(op, "slots", slots, [batch], state_pool.device)
    _check_index(op, "accepted", accepted, [batch], state_pool.device)
    if parents is not None:
        _check_index(op, "parents", parents, [batch, t], state_pool.device)
    return None


@torch.library.register_fake("qwen38::gdn_commit_verify")
def _gdn_commit_verify_fake(c_k, c_v, c_g, c_beta, c_accepted, c_parents, q, k, v, g, beta, state_pool, slots,
                            parents=None, lengths=None, *, scale=None):
    op = "gdn_commit_verify"
    max_t = ref.MAX_CHAIN_TOKENS if parents is None else ref.MAX_TREE_NODES
    batch, t = ref._check_gdn_inputs(op, q, k, v, g, beta, state_pool, slots, _F32, tokens=True, max_t=max_t)
    ref._check_scale(op, scale)
    _check_index(op, "slots", slots, [batch], state_pool.device)
    if lengths is not None:
        _check_index(op, "lengths", lengths, [batch], state_pool.device)
    if parents is not None:
        _check_index(op, "parents", parents, [batch, t], state_pool.device)
    _gdn_commit_fake(c_k, c_v, c_g, c_beta, state_pool, slots, c_accepted, c_parents)
    if c_k.shape[0] != batch:
        ref._fail(op, f"c_k has {c_k.shape[0]} sequences but q has {batch}: the pending commit and the verify "
                      "are one batch")
    return _out(q, (batch, t))
