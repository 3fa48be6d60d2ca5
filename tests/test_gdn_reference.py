"""The Gated DeltaNet decode family references (qwen38_kernels.reference.gdn), on the CPU.

Verify == decode to the bit: chain rows and tree nodes equal ``gdn_step`` along their paths, commits
leave the state stepping leaves; verifies leave the pool alone; padding slots are skipped; a
sequence's results do not depend on the batch; the fp32 reference against its float64 evaluation;
bad arguments raise naming the argument and write nothing. The same for the causal conv1d.
Real head geometry (16 q/k heads, 48 v heads, 128 x 128 states), small batches.
"""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from qwen38_kernels import testing as qt
from qwen38_kernels.reference import gdn

HQK, HV, DK, DV, C = gdn.N_QK_HEADS, gdn.N_V_HEADS, gdn.HEAD_K, gdn.HEAD_V, gdn.CONV_CHANNELS


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # the references are chains of small elementwise ops: OpenMP fork/join dominates on a busy
    # 2-core box. Elementwise results do not depend on the thread count.
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _gdn_inputs(batch, t, seed=0, *, n_slots=4):
    """Tokens [B, T, ...] with realistic gates (HF init ranges) and a pool of random states."""
    gen = torch.Generator().manual_seed(seed)
    q = qt.randn_nonzero(batch, t, HQK, DK, seed=seed + 1)
    k = qt.randn_nonzero(batch, t, HQK, DK, seed=seed + 2)
    v = qt.randn_nonzero(batch, t, HV, DV, seed=seed + 3)
    a = qt.randn_nonzero(batch, t, HV, seed=seed + 4)
    b = qt.randn_nonzero(batch, t, HV, seed=seed + 5)
    A_log = torch.log(torch.rand(HV, generator=gen) * 15 + 1)
    dt = torch.exp(torch.rand(HV, generator=gen) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
    dt_bias = dt + torch.log(-torch.expm1(-dt))  # inverse softplus
    g, beta = gdn.gdn_gates(a, b, A_log, dt_bias)
    pool = torch.randn(n_slots, HV, DK, DV, generator=gen) * 0.05
    return q, k, v, g, beta, pool


def _step1(q, k, v, g, beta, state1):
    """gdn_step of one token on a 1-row pool (in place); returns o [48, 128]."""
    return gdn.gdn_step(q[None], k[None], v[None], g[None], beta[None], state1,
                        torch.tensor([0], dtype=torch.int32))[0]


def _steps_along(q, k, v, g, beta, pool, slot, b, path):
    """Step sequence b through token indices ``path`` from pool row ``slot``: (outputs, final 1-row pool)."""
    st1 = pool[slot:slot + 1].clone()
    outs = [_step1(q[b, i], k[b, i], v[b, i], g[b, i], beta[b, i], st1) for i in path]
    return outs, st1


def _pad_parents(trees, t):
    return torch.tensor([p + [-1] * (t - len(p)) for p in trees], dtype=torch.int32)


def _path_to(parents, node):
    path = []
    while node >= 0:
        path.append(node)
        node = parents[node]
    return path[::-1]


# ---- gates ---------------------------------------------------------------------------------------

def test_gates_match_hf_formula():
    b = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    b = b[torch.isfinite(b) & (b.float() >= -88)]
    a = torch.zeros_like(b)
    g48 = lambda t: t[: t.numel() // HV * HV].view(-1, HV)  # noqa: E731
    A_log = torch.log(torch.linspace(1, 16, HV))
    dt_bias = torch.linspace(-7, 3, HV)
    _, beta = gdn.gdn_gates(g48(a), g48(b), A_log, dt_bias)
    qt.assert_bitwise_equal(beta, torch.sigmoid(g48(b)), "beta vs torch.sigmoid on bf16")
    a = qt.randn_nonzero(64, HV, scale=4.0, seed=3)
    a[0, :4] = torch.tensor([30.0, 1e4, -1e4, 1e30]).to(torch.bfloat16)  # softplus threshold/overflow
    g, beta = gdn.gdn_gates(a, a, A_log, dt_bias)
    assert g.dtype == torch.float32 and beta.dtype == torch.bfloat16 and g.shape == a.shape
    hf = -A_log.float().exp() * torch.nn.functional.softplus(a.float() + dt_bias)
    assert torch.isfinite(g).all() and (g <= 0).all()
    qt.assert_ulp_close(g, hf, 2, "g vs HF's fp32 formula")
    g3, _ = gdn.gdn_gates(a.view(4, 16, HV), a.view(4, 16, HV), A_log, dt_bias)
    qt.assert_bitwise_equal(g3.view(64, HV), g, "[B, T, 48] gates")


def test_step_raw_equals_gates_then_step():
    q, k, v, _, _, pool = _gdn_inputs(2, 1, seed=7)
    a, b = qt.randn_nonzero(2, HV, seed=8), qt.randn_nonzero(2, HV, seed=9)
    A_log, dt_bias = torch.log(torch.linspace(1, 16, HV)), torch.linspace(-7, 3, HV)
    p1, p2 = pool.clone(), pool.clone()
    slots = torch.tensor([3, 1])
    o1 = gdn.gdn_step_raw(q[:, 0], k[:, 0], v[:, 0], a, b, A_log, dt_bias, p1, slots)
    g, beta = gdn.gdn_gates(a, b, A_log, dt_bias)
    o2 = gdn.gdn_step(q[:, 0], k[:, 0], v[:, 0], g, beta, p2, slots)
    qt.assert_bitwise_equal(o1, o2, "raw-gate step")
    qt.assert_bitwise_equal(p1, p2, "raw-gate step state")


def _fma_oracle(a: float, b: float, c: float) -> float:
    """fp32 fma(a, b, c) from exact rationals: the nearest fp32 to a * b + c, ties to even."""
    from fractions import Fraction
    np = pytest.importorskip("numpy")
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    r = np.float32(float(exact))
    cands = [np.nextafter(r, np.float32(-np.inf)), r, np.nextafter(r, np.float32(np.inf))]
    best = min(abs(Fraction(float(x)) - exact) for x in cands)
    near = [x for x in cands if abs(Fraction(float(x)) - exact) == best]
    if len(near) == 1:
        return float(near[0])
    return float([x for x in near if int(np.array(x).view(np.int32)) % 2 == 0][0])


def test_fma_is_one_rounding():
    """The reference's fp32 fma rounds a * b + c once, exactly: against rational arithmetic on random
    triples of every magnitude, and on the double-rounding cases (the float64 sum lands exactly
    halfway between two fp32 numbers while the exact value does not)."""
    torch.manual_seed(0)
    n = 400
    mag = torch.logspace(-20, 20, n)
    a = torch.randn(n) * mag
    b = torch.randn(n) * mag.flip(0)
    c = torch.randn(n) * torch.logspace(-10, 10, n)[torch.randperm(n)]
    # a * b = 2^-24 (1 - 2^-30) and c = 1 + 2^-23: the exact sum is 2^-54 below the midpoint
    # 1 + 3 * 2^-24, so fp32 rounding gives 1 + 2^-23 where the float64 sum (the midpoint itself,
    # ties to even) would give 1 + 2^-22; and the mirrored signs
    t_a = torch.tensor([2.0**-12 * (1 + 2.0**-15), -(2.0**-12) * (1 + 2.0**-15), 2.0**-12 * (1 - 2.0**-15)])
    t_b = torch.tensor([2.0**-12 * (1 - 2.0**-15), 2.0**-12 * (1 - 2.0**-15), 2.0**-12 * (1 + 2.0**-15)])
    t_c = torch.tensor([1 + 2.0**-23, -(1 + 2.0**-23), 1 + 2.0**-23])
    # results in the fp32 subnormal range (spacing 2^-149)
    s_a = torch.randn(40) * 1e-22
    s_b = torch.randn(40) * 1e-22
    s_c = torch.randn(40) * 1e-41
    a, b, c = torch.cat([a, s_a, t_a]), torch.cat([b, s_b, t_b]), torch.cat([c, s_c, t_c])
    got = gdn._fma(a, b, c)
    want = torch.tensor([_fma_oracle(x, y, z) for x, y, z in zip(a.tolist(), b.tolist(), c.tolist())])
    qt.assert_bitwise_equal(got, want, "fma")
    assert got[-3].item() == 1 + 2.0**-23, "the double-rounding case"
    naive = (a.double() * b.double() + c.double()).float()
    assert naive[-3].item() == 1 + 2.0**-22, "the case does not exercise double rounding"


def test_ksum_order():
    """The documented order: 4 segments of 32 accumulated in ascending k with fused multiply-adds from
    the first rounded product, then (p0 + p1) + (p2 + p3)."""
    x = torch.randn(128, 3, dtype=torch.float32) * torch.logspace(-3, 3, 128)[:, None]
    y = torch.randn(128, 3, dtype=torch.float32)
    got = gdn._ksum(x, y)
    parts = []
    for j in range(4):
        acc = x[32 * j] * y[32 * j]
        for i in range(1, 32):
            acc = torch.tensor([_fma_oracle(p, q_, r) for p, q_, r in
                                zip(x[32 * j + i].tolist(), y[32 * j + i].tolist(), acc.tolist())])
        parts.append(acc)
    qt.assert_bitwise_equal(got, (parts[0] + parts[1]) + (parts[2] + parts[3]), "ksum")


def test_l2norm_correctly_rounded():
    """x * (1 / sqrt(ksum(x, x) + 1e-6)) with a correctly rounded fp32 sqrt and division, checked
    against numpy (IEEE sqrt/divide) so a non-IEEE torch sqrt cannot pass unnoticed."""
    np = pytest.importorskip("numpy")
    x = torch.randn(4096, 128) * torch.logspace(-4, 2, 4096)[:, None]
    xs = x.unsqueeze(-1)
    ss = (gdn._ksum(xs, xs).squeeze(-1) + gdn.L2_EPS).numpy()
    r = np.float32(1.0) / np.sqrt(ss)
    want = torch.from_numpy(x.numpy() * r[:, None])
    qt.assert_bitwise_equal(gdn._l2norm(x), want, "l2norm")


# ---- GDN: verify == decode -----------------------------------------------------------------------

def test_chain_equals_steps_and_commit():
    q, k, v, g, beta, pool = _gdn_inputs(3, 6, seed=11)
    slots = torch.tensor([2, -1, 0], dtype=torch.int64)
    lengths = torch.tensor([6, 4, 3], dtype=torch.int32)
    before = pool.clone()
    out = gdn.gdn_chain_verify(q, k, v, g, beta, pool, slots, lengths)
    qt.assert_bitwise_equal(pool, before, "chain verify modified the pool")
    assert out.shape == (3, 6, HV, DV) and out.dtype == torch.bfloat16
    assert not out[1].any(), "padding sequence must give zeros"
    assert not out[2, 3:].any(), "rows past the length must be zeros"
    for b, s in ((0, 2), (2, 0)):
        n = int(lengths[b])
        ref, _ = _steps_along(q, k, v, g, beta, pool, s, b, range(n))
        for t in range(n):
            qt.assert_bitwise_equal(out[b, t], ref[t], f"chain seq {b} token {t}")
    accepted = torch.tensor([4, 2, 0])
    gdn.gdn_commit(k, v, g, beta, pool, slots, accepted)
    _, want = _steps_along(q, k, v, g, beta, before, 2, 0, range(4))
    qt.assert_bitwise_equal(pool[2], want[0], "chain commit, 4 accepted")
    for r in (0, 1, 3):  # accepted 0 on slot 0; padding; untouched rows
        qt.assert_bitwise_equal(pool[r], before[r], f"pool row {r} must be unchanged")


@settings(max_examples=8, deadline=None)
@given(trees=st.lists(qt.dfs_trees(max_nodes=9), min_size=1, max_size=2), data=st.data())
def test_tree_equals_steps_and_commit(trees, data):
    batch = len(trees)
    t = max(len(p) for p in trees)
    q, k, v, g, beta, pool = _gdn_inputs(batch, t, seed=len(trees[0]) * 31 + t)
    slots = torch.tensor(data.draw(st.permutations(range(4)))[:batch], dtype=torch.int32)
    parents = _pad_parents(trees, t)
    lengths = torch.tensor([len(p) for p in trees])
    before = pool.clone()
    out = gdn.gdn_tree_verify(q, k, v, g, beta, pool, slots, parents, lengths)
    qt.assert_bitwise_equal(pool, before, "tree verify modified the pool")
    for b, par in enumerate(trees):
        s = int(slots[b])
        stack = [pool[s:s + 1].clone()]  # state after the node at each depth of the current path
        depth = {-1: 0}
        for i, p in enumerate(par):
            depth[i] = depth[p] + 1
            st1 = stack[depth[p]].clone()
            ref = _step1(q[b, i], k[b, i], v[b, i], g[b, i], beta[b, i], st1)
            del stack[depth[i]:]
            stack.append(st1)
            qt.assert_bitwise_equal(out[b, i], ref, f"tree seq {b} node {i} (parents {par})")
        assert not out[b, len(par):].any()
    accepted = [data.draw(st.integers(-1, len(p) - 1)) for p in trees]
    gdn.gdn_commit(k, v, g, beta, pool, slots, torch.tensor(accepted), parents)
    for b, par in enumerate(trees):
        s = int(slots[b])
        path = _path_to(par, accepted[b])
        _, want = _steps_along(q, k, v, g, beta, before, s, b, path)
        qt.assert_bitwise_equal(pool[s], want[0], f"tree commit seq {b} path {path}")
    used = {int(x) for x in slots}
    for r in range(pool.shape[0]):
        if r not in used:
            qt.assert_bitwise_equal(pool[r], before[r], f"unused pool row {r}")


def test_tree_deep_chain_and_wide():
    """A depth-20 chain given as a tree equals the chain verify; a 64-node star (all children of the
    committed state) equals one step each."""
    q, k, v, g, beta, pool = _gdn_inputs(1, 16, seed=5)
    slots = torch.tensor([1])
    chain = gdn.gdn_chain_verify(q, k, v, g, beta, pool, slots)
    tree = gdn.gdn_tree_verify(q, k, v, g, beta, pool, slots, torch.arange(-1, 15)[None])
    qt.assert_bitwise_equal(tree, chain, "chain given as a tree")
    q, k, v, g, beta, pool = _gdn_inputs(1, 64, seed=6)
    star = gdn.gdn_tree_verify(q, k, v, g, beta, pool, slots, torch.full((1, 64), -1))
    one = gdn.gdn_step(q[0], k[0], v[0], g[0], beta[0], pool[[1] * 64].clone(), torch.arange(64))
    qt.assert_bitwise_equal(star[0], one, "64 children of the committed state")


def test_step_padding_and_other_rows():
    q, k, v, g, beta, pool = _gdn_inputs(3, 1, seed=13, n_slots=5)
    before = pool.clone()
    slots = torch.tensor([-1, 3, -1], dtype=torch.int32)
    out = gdn.gdn_step(q[:, 0], k[:, 0], v[:, 0], g[:, 0], beta[:, 0], pool, slots)
    assert not out[0].any() and not out[2].any() and out[1].any()
    for r in (0, 1, 2, 4):
        qt.assert_bitwise_equal(pool[r], before[r], f"pool row {r}")
    assert not torch.equal(pool[3], before[3])
    allpad = gdn.gdn_step(q[:, 0], k[:, 0], v[:, 0], g[:, 0], beta[:, 0], pool, torch.full((3,), -1))
    assert not allpad.any()


def test_batch_independence():
    """Sequence 0 of a B=1 call gives the same bits inside a B=3 batch at position 1 (other slots,
    other draft lengths and trees around it), for step, chain, tree and commit."""
    q, k, v, g, beta, pool = _gdn_inputs(3, 5, seed=17)
    one = [x[1:2] for x in (q, k, v, g, beta)]
    slots3, slots1 = torch.tensor([0, 2, 3]), torch.tensor([2])
    lengths3 = torch.tensor([2, 5, 4])
    p3, p1 = pool.clone(), pool.clone()
    o3 = gdn.gdn_step(*(x[:, 0] for x in (q, k, v, g, beta)), p3, slots3)
    o1 = gdn.gdn_step(*(x[:, 0] for x in one), p1, slots1)
    qt.assert_bitwise_equal(o3[1], o1[0], "step")
    qt.assert_bitwise_equal(p3[2], p1[2], "step state")
    c3 = gdn.gdn_chain_verify(q, k, v, g, beta, pool, slots3, lengths3)
    c1 = gdn.gdn_chain_verify(*one, pool, slots1)
    qt.assert_bitwise_equal(c3[1], c1[0], "chain")
    par3 = torch.tensor([[-1, 0, -1, 2, 2], [-1, 0, 0, 2, -1], [-1, 0, 1, 2, 3]])
    t3 = gdn.gdn_tree_verify(q, k, v, g, beta, pool, slots3, par3, lengths3)
    t1 = gdn.gdn_tree_verify(*one, pool, slots1, par3[1:2])
    qt.assert_bitwise_equal(t3[1], t1[0], "tree")
    p3, p1 = pool.clone(), pool.clone()
    gdn.gdn_commit(k, v, g, beta, p3, slots3, torch.tensor([1, 3, 4]), par3)
    gdn.gdn_commit(*one[1:], p1, slots1, torch.tensor([3]), par3[1:2])
    qt.assert_bitwise_equal(p3[2], p1[2], "tree commit")


def test_deterministic():
    q, k, v, g, beta, pool = _gdn_inputs(2, 4, seed=19)
    par = torch.tensor([[-1, 0, 0, -1], [-1, 0, 1, 1]])
    a = gdn.gdn_tree_verify(q, k, v, g, beta, pool, torch.tensor([0, 1]), par)
    b = gdn.gdn_tree_verify(q, k, v, g, beta, pool, torch.tensor([0, 1]), par)
    qt.assert_bitwise_equal(a, b, "same call twice")


# ---- GDN: against the float64 evaluation ---------------------------------------------------------

def test_float64_evaluation_64_steps():
    steps = 64
    q, k, v, g, beta, pool = _gdn_inputs(1, steps, seed=23, n_slots=1)
    p32, p64 = pool.clone(), pool.to(torch.float64)
    slots = torch.tensor([0])
    ulps, absd = [], []
    for t in range(steps):
        args = (q[:, t], k[:, t], v[:, t], g[:, t], beta[:, t])
        o32 = gdn.gdn_step(*args, p32, slots)
        o64 = gdn.gdn_step(*args, p64, slots, acc_dtype=torch.float64)
        ulps.append(qt.ulp_diff(o32, o64).flatten())
        # |difference| relative to the head's RMS output (o = S^T q cancels: a few outputs are ~1e-5 of
        # their head's scale, where a bf16 ulp is far below fp32 accuracy of the sum)
        rms = o64.float().pow(2).mean(-1, keepdim=True).sqrt()
        absd.append(((o32.float() - o64.float()).abs() / rms).flatten())
    u, rel = torch.cat(ulps), torch.cat(absd)
    rate = float((u == 1).double().mean())
    hist = {int(x): int(c) for x, c in zip(*torch.unique(u, return_counts=True))}
    over = u > 1
    msg = (f"bf16 outputs vs float64 evaluation over {u.numel()} outputs: 1-ulp rate {rate:.2e}, ulp "
           f"histogram {hist}; outputs > 1 ulp apart (all cancellation: |o| << head RMS) differ by at most "
           f"{float(rel[over].max()) if over.any() else 0.0:.1e} of the head RMS")
    assert rate < 2e-3, msg
    assert not over.any() or float(rel[over].max()) < 1e-5, msg
    print(msg)
    rel = float(torch.sqrt(((p32.double() - p64) ** 2).mean() / (p64 ** 2).mean()))
    assert rel < 1e-5, f"state relative RMS error after {steps} steps: {rel:.2e}"
    print(f"state relative RMS error after {steps} steps: {rel:.2e}")


# ---- bad arguments -----------------------------------------------------------------------------

def _bad_cases():
    q, k, v, g, beta, pool = _gdn_inputs(2, 3, seed=29)
    s2 = torch.tensor([0, 1])
    step = lambda **kw: gdn.gdn_step(**{**dict(q=q[:, 0], k=k[:, 0], v=v[:, 0], g=g[:, 0],  # noqa: E731
                                        beta=beta[:, 0], state_pool=pool, slots=s2), **kw})
    chain = lambda **kw: gdn.gdn_chain_verify(**{**dict(q=q, k=k, v=v, g=g, beta=beta,  # noqa: E731
                                                 state_pool=pool, slots=s2), **kw})
    par_ok = torch.tensor([[-1, 0, 1], [-1, -1, 1]])
    tree = lambda **kw: gdn.gdn_tree_verify(**{**dict(q=q, k=k, v=v, g=g, beta=beta, state_pool=pool,  # noqa: E731
                                                slots=s2, parents=par_ok), **kw})
    commit = lambda **kw: gdn.gdn_commit(**{**dict(k=k, v=v, g=g, beta=beta, state_pool=pool,  # noqa: E731
                                            slots=s2, accepted=torch.tensor([2, 1])), **kw})
    x = qt.randn_nonzero(2, 3, C, seed=30)
    cs = qt.randn_nonzero(4, C, 3, seed=31)
    w = qt.randn_nonzero(C, 4, seed=32)
    cstep = lambda **kw: gdn.conv_step(**{**dict(x=x[:, 0], conv_state=cs, weight=w, slots=s2), **kw})  # noqa: E731
    ctree = lambda **kw: gdn.conv_tree(**{**dict(x=x, conv_state=cs, weight=w, slots=s2,  # noqa: E731
                                          parents=par_ok), **kw})
    ccommit = lambda **kw: gdn.conv_commit(**{**dict(x=x, conv_state=cs, slots=s2,  # noqa: E731
                                              accepted=torch.tensor([1, 2])), **kw})
    return (pool, cs), [
        ("step slot out of range", step, dict(slots=torch.tensor([0, 4])), "gdn_step: slots[1]"),
        ("step slot below -1", step, dict(slots=torch.tensor([-2, 0])), "gdn_step: slots[0]"),
        ("step duplicate slots", step, dict(slots=torch.tensor([1, 1])), "gdn_step: slots must be distinct"),
        ("step slots dtype", step, dict(slots=torch.tensor([0.0, 1.0])), "gdn_step: slots must be"),
        ("step q dtype", step, dict(q=q[:, 0].float()), "gdn_step: q must be"),
        ("step k dtype", step, dict(k=k[:, 0].half()), "gdn_step: k must be"),
        ("step v shape", step, dict(v=v[:, 0, :16]), "gdn_step: v must have shape"),
        ("step g dtype", step, dict(g=g[:, 0].bfloat16()), "gdn_step: g must be"),
        ("step beta shape", step, dict(beta=beta[:1, 0]), "gdn_step: beta must have shape"),
        ("step pool dtype", step, dict(state_pool=pool.double()), "gdn_step: state_pool must be float32"),
        ("step pool shape", step, dict(state_pool=pool[:, :16]), "gdn_step: state_pool must have shape"),
        ("step pool layout", step, dict(state_pool=pool.transpose(2, 3)), "gdn_step: state_pool must be contiguous"),
        ("step scale", step, dict(scale=float("nan")), "gdn_step: scale"),
        ("chain too long", chain, dict(q=q.repeat(1, 6, 1, 1), k=k.repeat(1, 6, 1, 1), v=v.repeat(1, 6, 1, 1),
                                       g=g.repeat(1, 6, 1), beta=beta.repeat(1, 6, 1)), "gdn_chain_verify: q has 18"),
        ("chain lengths", chain, dict(lengths=torch.tensor([4, 1])), "gdn_chain_verify: lengths[0]"),
        ("chain slot", chain, dict(slots=torch.tensor([0, 9])), "gdn_chain_verify: slots[1]"),
        ("tree parent not earlier", tree, dict(parents=torch.tensor([[-1, 1, 1], [-1, 0, 1]])),
         "gdn_tree_verify: parents[0, 1] = 1"),
        ("tree parent not on path", tree, dict(parents=torch.tensor([[-1, 0, 1], [-1, -1, 0]])),
         "gdn_tree_verify: parents[1, 2] = 0 is not on the current"),
        ("tree parents shape", tree, dict(parents=par_ok[:, :2]), "gdn_tree_verify: parents must have shape"),
        ("commit accepted range", commit, dict(accepted=torch.tensor([4, 0])), "gdn_commit: accepted[0]"),
        ("commit tree accepted", commit, dict(accepted=torch.tensor([2, 3]), parents=par_ok),
         "gdn_commit: accepted[1]"),
        ("commit tree parent", commit, dict(accepted=torch.tensor([2, 0]), parents=torch.tensor([[-1, 2, 0], [-1, 0, 1]])),
         "gdn_commit: parents[0, 1] = 2"),
        ("commit duplicate slots", commit, dict(slots=torch.tensor([3, 3])), "gdn_commit: slots must be distinct"),
        ("commit v dtype", commit, dict(v=v.half()), "gdn_commit: v must be"),
        ("conv weight shape", cstep, dict(weight=w[:, :3]), "conv_step: weight must have shape"),
        ("conv state dtype", cstep, dict(conv_state=cs.half()), "conv_step: conv_state must have x's dtype"),
        ("conv slot", cstep, dict(slots=torch.tensor([4, 0])), "conv_step: slots[0]"),
        ("conv x shape", cstep, dict(x=x[:, 0, :100]), "conv_step: conv_state must have shape"),
        ("conv tree parents", ctree, dict(parents=torch.tensor([[0, 0, 0], [-1, 0, 1]])), "conv_tree: parents[0, 0] = 0"),
        ("conv commit accepted", ccommit, dict(accepted=torch.tensor([1, 7])), "conv_commit: accepted[1]"),
    ]


_STATE, _CASES = _bad_cases()


@pytest.mark.parametrize("case", range(len(_CASES)), ids=[c[0] for c in _CASES])
def test_bad_arguments_raise_and_write_nothing(case):
    pool, cs = _STATE
    before = (pool.clone(), cs.clone())
    _, fn, kw, msg = _CASES[case]
    with pytest.raises(ValueError, match="^qwen38\\.") as e:
        fn(**kw)
    assert msg in str(e.value), str(e.value)
    qt.assert_bitwise_equal(pool, before[0], "state pool written by a failing call")
    qt.assert_bitwise_equal(cs, before[1], "conv state written by a failing call")


def test_depth_limit(monkeypatch):
    monkeypatch.setattr(gdn, "MAX_TREE_DEPTH", 3)
    q, k, v, g, beta, pool = _gdn_inputs(1, 4, seed=37)
    before = pool.clone()
    chain_par = torch.tensor([[-1, 0, 1, 2]])
    with pytest.raises(ValueError, match=r"qwen38.gdn_tree_verify: parents\[0, 3\]: node depth 4 is over"):
        gdn.gdn_tree_verify(q, k, v, g, beta, pool, torch.tensor([0]), chain_par)
    with pytest.raises(ValueError, match=r"qwen38.gdn_commit: parents\[0, 3\]: node depth 4 is over"):
        gdn.gdn_commit(k, v, g, beta, pool, torch.tensor([0]), torch.tensor([3]), chain_par)
    qt.assert_bitwise_equal(pool, before, "pool after depth errors")
    gdn.gdn_tree_verify(q, k, v, g, beta, pool, torch.tensor([0]), chain_par, torch.tensor([3]))  # depth 3: fine


# ---- causal conv1d -------------------------------------------------------------------------------

def _conv_inputs(batch, t, seed):
    x = qt.randn_nonzero(batch, t, C, seed=seed)
    cs = qt.randn_nonzero(5, C, 3, seed=seed + 1)
    w = qt.randn_nonzero(C, 4, scale=0.5, seed=seed + 2)
    return x, cs, w


def _conv_steps(x, cs, w, slot, b, path):
    st1 = cs[slot:slot + 1].clone()
    outs = [gdn.conv_step(x[b, i][None], st1, w, torch.tensor([0]))[0] for i in path]
    return outs, st1


def test_conv_step_math():
    """y = bf16(silu(fp32 sum)), no rounding of the sum; the state shifts in the raw input."""
    x, cs, w = _conv_inputs(2, 1, seed=41)
    before = cs.clone()
    y = gdn.conv_step(x[:, 0], cs, w, torch.tensor([3, -1]))
    win = torch.cat([before[3], x[0, 0, :, None]], dim=-1).float()
    s = win * w.float()
    s = ((s[:, 0] + s[:, 1]) + s[:, 2]) + s[:, 3]
    want = torch.nn.functional.silu(s.double()).float().bfloat16()
    qt.assert_bitwise_equal(y[0], want, "conv step")
    assert not y[1].any()
    qt.assert_bitwise_equal(cs[3], win[:, 1:].bfloat16(), "conv state shift")
    for r in (0, 1, 2, 4):
        qt.assert_bitwise_equal(cs[r], before[r], f"conv row {r}")
    y64 = gdn.conv_step(x[:, 0], before.clone(), w, torch.tensor([3, -1]), acc_dtype=torch.float64)
    qt.assert_ulp_close(y, y64, 1, "conv fp32 vs float64 evaluation")
    # rounding the sum to bf16 first (HF's torch fallback) is a different contract: it differs often
    hf = torch.nn.functional.silu(s.bfloat16())
    assert (hf != y[0]).float().mean() > 0.05


def test_conv_chain_commit_equal_steps():
    x, cs, w = _conv_inputs(3, 6, seed=43)
    slots = torch.tensor([4, -1, 1])
    lengths = torch.tensor([6, 2, 2])
    before = cs.clone()
    y = gdn.conv_chain(x, cs, w, slots, lengths)
    qt.assert_bitwise_equal(cs, before, "conv chain modified the state")
    assert not y[1].any() and not y[2, 2:].any()
    for b, s in ((0, 4), (2, 1)):
        ref, _ = _conv_steps(x, cs, w, s, b, range(int(lengths[b])))
        for t, r in enumerate(ref):
            qt.assert_bitwise_equal(y[b, t], r, f"conv chain seq {b} token {t}")
    gdn.conv_commit(x, cs, slots, torch.tensor([5, 2, 1]))
    for b, s, n in ((0, 4, 5), (2, 1, 1)):
        _, want = _conv_steps(x, before, w, s, b, range(n))
        qt.assert_bitwise_equal(cs[s], want[0], f"conv chain commit seq {b}")
    for r in (0, 2, 3):
        qt.assert_bitwise_equal(cs[r], before[r], f"conv row {r}")


@settings(max_examples=10, deadline=None)
@given(trees=st.lists(qt.dfs_trees(max_nodes=12), min_size=1, max_size=3), data=st.data())
def test_conv_tree_commit_equal_steps(trees, data):
    batch, t = len(trees), max(len(p) for p in trees)
    x, cs, w = _conv_inputs(batch, t, seed=47 + t)
    slots = torch.tensor(data.draw(st.permutations(range(5)))[:batch])
    parents = _pad_parents(trees, t)
    before = cs.clone()
    y = gdn.conv_tree(x, cs, w, slots, parents, torch.tensor([len(p) for p in trees]))
    qt.assert_bitwise_equal(cs, before, "conv tree modified the state")
    for b, par in enumerate(trees):
        for i in range(len(par)):
            ref, _ = _conv_steps(x, cs, w, int(slots[b]), b, _path_to(par, i))
            qt.assert_bitwise_equal(y[b, i], ref[-1], f"conv tree seq {b} node {i} (parents {par})")
    accepted = [data.draw(st.integers(-1, len(p) - 1)) for p in trees]
    gdn.conv_commit(x, cs, slots, torch.tensor(accepted), parents)
    for b, par in enumerate(trees):
        s = int(slots[b])
        _, want = _conv_steps(x, before, w, s, b, _path_to(par, accepted[b]))
        qt.assert_bitwise_equal(cs[s], want[0], f"conv tree commit seq {b}")
