"""The GDN decode family as ops: gdn_step, gdn_step_raw, gdn_chain_verify, gdn_tree_verify, gdn_commit.

CPU (CI): the ops' registration (schemas declare what they mutate), the CPU kernels (the references)
through the dispatcher, opcheck, torch.compile through the fakes, bad input named by the fakes.
GPU (marker gpu): the CUDA kernels against the reference CPU op bit for bit (outputs AND states),
verify == stepping with the CUDA step, commit == stepping, padding slots, lengths, mixed batches,
hypothesis over random trees and chains, strided inputs, graph == eager, determinism, opcheck, bad
input named and nothing written (with the host index check on and off). The reference's own
properties (verify == decode on the CPU, float64 accuracy) are tests/test_gdn_reference.py.
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import qwen38_kernels as q38
from qwen38_kernels import knobs
from qwen38_kernels import testing as qt
from qwen38_kernels.reference import gdn as ref

OPS = torch.ops.qwen38
HQK, HV, DK, DV = ref.N_QK_HEADS, ref.N_V_HEADS, ref.HEAD_K, ref.HEAD_V
GPU = pytest.mark.gpu


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # the references are chains of small elementwise ops: OpenMP fork/join dominates on a busy
    # 2-core box. Elementwise results do not depend on the thread count.
    n = torch.get_num_threads()
    if not torch.cuda.is_available():
        torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# ---- inputs ------------------------------------------------------------------------------------

def _inputs(batch, t, seed=0, *, n_slots=4, dtype=torch.bfloat16, beta_fp32=False):
    """CPU tensors [B, T, ...] with realistic gates (HF init ranges) and a pool of random states."""
    gen = torch.Generator().manual_seed(seed)
    q = qt.randn_nonzero(batch, t, HQK, DK, dtype=dtype, seed=seed + 1)
    k = qt.randn_nonzero(batch, t, HQK, DK, dtype=dtype, seed=seed + 2)
    v = qt.randn_nonzero(batch, t, HV, DV, dtype=dtype, seed=seed + 3)
    a = qt.randn_nonzero(batch, t, HV, dtype=dtype, seed=seed + 4)
    b = qt.randn_nonzero(batch, t, HV, dtype=dtype, seed=seed + 5)
    A_log, dt_bias = _gate_params(gen)
    g, beta = ref.gdn_gates(a, b, A_log, dt_bias)
    if beta_fp32:
        beta = torch.sigmoid(b.float() * 1.37)  # an fp32 beta that is not a rounded bf16
    pool = torch.randn(n_slots, HV, DK, DV, generator=gen) * 0.05
    return q, k, v, g, beta, pool


def _gate_params(gen):
    A_log = torch.log(torch.rand(HV, generator=gen) * 15 + 1)
    dt = torch.exp(torch.rand(HV, generator=gen) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
    return A_log, dt + torch.log(-torch.expm1(-dt))  # dt_bias = inverse softplus of dt


def _cuda(*ts):
    return tuple(t.cuda() if isinstance(t, torch.Tensor) else t for t in ts)


def _i(x, dtype=torch.int32):
    return torch.tensor(x, dtype=dtype)


def _pad_parents(trees, t, dtype=torch.int32):
    return torch.tensor([p + [-1] * (t - len(p)) for p in trees], dtype=dtype)


def _path_to(parents, node):
    path = []
    while node >= 0:
        path.append(node)
        node = parents[node]
    return path[::-1]


# ---- registration (CPU) --------------------------------------------------------------------------

def test_schemas_declare_what_they_write():
    """gdn_step / gdn_step_raw / gdn_commit write state_pool (Tensor(a!)); the verifies write nothing."""
    for name, writes in [("gdn_step", True), ("gdn_step_raw", True), ("gdn_commit", True),
                         ("gdn_commit_verify", True), ("gdn_chain_verify", False), ("gdn_tree_verify", False)]:
        schema = getattr(OPS, name).default._schema
        written = [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
        assert written == (["state_pool"] if writes else []), f"{name}: writes {written}"
        kw = [a.name for a in schema.arguments if a.kwarg_only]
        assert kw == ([] if name == "gdn_commit" else ["scale"]), f"{name}: kwarg-only {kw}"


def test_exported():
    for name in ref.__all__[:7]:
        if name != "gdn_gates":
            assert callable(getattr(q38, name)), name


def test_cpu_ops_are_the_references():
    """Through the dispatcher (positional/keyword arguments as the schemas say) the CPU kernels give
    the reference's bits, and the wrappers give the ops'."""
    q, k, v, g, beta, pool = _inputs(2, 3, seed=3)
    slots = _i([2, 0])
    p1, p2 = pool.clone(), pool.clone()
    o1 = OPS.gdn_step(q[:, 0], k[:, 0], v[:, 0], g[:, 0], beta[:, 0], p1, slots, scale=0.25)
    o2 = ref.gdn_step(q[:, 0], k[:, 0], v[:, 0], g[:, 0], beta[:, 0], p2, slots, scale=0.25)
    qt.assert_bitwise_equal(o1, o2, "gdn_step output")
    qt.assert_bitwise_equal(p1, p2, "gdn_step state")
    par = _i([[-1, 0, 0], [-1, 0, 1]])
    qt.assert_bitwise_equal(q38.gdn_tree_verify(q, k, v, g, beta, pool, slots, par),
                            ref.gdn_tree_verify(q, k, v, g, beta, pool, slots, par), "gdn_tree_verify")
    qt.assert_bitwise_equal(q38.gdn_chain_verify(q, k, v, g, beta, pool, slots, _i([3, 1])),
                            ref.gdn_chain_verify(q, k, v, g, beta, pool, slots, _i([3, 1])), "gdn_chain_verify")
    p1, p2 = pool.clone(), pool.clone()
    assert q38.gdn_commit(k, v, g, beta, p1, slots, _i([2, 1]), par) is None
    ref.gdn_commit(k, v, g, beta, p2, slots, _i([2, 1]), par)
    qt.assert_bitwise_equal(p1, p2, "gdn_commit state")
    assert not torch.equal(p1, pool)


def _opcheck_cases(device):
    q, k, v, g, beta, pool = _cuda(*_inputs(2, 3, seed=5)) if device == "cuda" else _inputs(2, 3, seed=5)
    dev = pool.device
    slots = _i([1, -1]).to(dev)
    A_log, dt_bias = _gate_params(torch.Generator().manual_seed(1))
    a = qt.randn_nonzero(2, HV, seed=6).to(dev)
    return [
        (OPS.gdn_step.default, (q[:, 0], k[:, 0], v[:, 0], g[:, 0], beta[:, 0], pool, slots), {}),
        (OPS.gdn_step_raw.default, (q[:, 0], k[:, 0], v[:, 0], a, a, A_log.to(dev), dt_bias.to(dev), pool, slots),
         {"scale": 0.1}),
        (OPS.gdn_chain_verify.default, (q, k, v, g, beta, pool, slots, _i([2, 3]).to(dev)), {}),
        (OPS.gdn_tree_verify.default, (q, k, v, g, beta, pool, slots, _i([[-1, 0, -1]] * 2).to(dev)), {}),
        (OPS.gdn_commit.default, (k, v, g, beta, pool, slots, _i([1, 2]).to(dev), _i([[-1, 0, 0]] * 2).to(dev)), {}),
        (OPS.gdn_commit.default, (k, v, g, beta, pool, slots, _i([3, 0]).to(dev), None), {}),
        (OPS.gdn_commit_verify.default, (k, v, g, beta, _i([2, 1]).to(dev), _i([[-1, 0, 0]] * 2).to(dev), q, k, v, g,
                                         beta, pool, slots, None, _i([3, 1]).to(dev)), {"scale": 0.5}),
        (OPS.gdn_commit_verify.default, (k, v, g, beta, _i([2, 1]).to(dev), None, q, k, v, g, beta, pool, slots,
                                         _i([[-1, 0, 0]] * 2).to(dev), None), {}),
    ]


def test_opcheck_cpu():
    for op, args, kw in _opcheck_cases("cpu"):
        qt.run_opcheck(op, args, kw)


def test_compile_fullgraph_cpu():
    """torch.compile(fullgraph=True) traces the ops through their fakes (aot_eager: no C++ compile)
    and gives the eager bits, including the in-place state update."""
    torch._dynamo.reset()
    q, k, v, g, beta, pool = _inputs(2, 2, seed=7)
    slots = _i([0, 3])

    def f(q, k, v, g, beta, pool, slots):
        o = q38.gdn_chain_verify(q, k, v, g, beta, pool, slots)
        s = q38.gdn_step(q[:, 0], k[:, 0], v[:, 0], g[:, 0], beta[:, 0], pool, slots)
        return o.float().sum(-1), s * 2

    p1, p2 = pool.clone(), pool.clone()
    want = f(q, k, v, g, beta, p1, slots)
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v, g, beta, p2, slots)
    for a, b in zip(got, want):
        qt.assert_bitwise_equal(a, b, "compiled vs eager")
    qt.assert_bitwise_equal(p2, p1, "compiled state update")


def test_fakes_name_bad_arguments():
    """Under fake tensors (torch.compile, opcheck) a bad call fails with the reference's message."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    q, k, v, g, beta, pool = _inputs(2, 3, seed=9)
    with FakeTensorMode() as mode:
        fq, fk, fv, fg, fb, fp = (mode.from_tensor(t) for t in (q, k, v, g, beta, pool))
        fs = mode.from_tensor(_i([0, 1]))
        with pytest.raises(ValueError, match=r"qwen38\.gdn_step: g must be"):
            OPS.gdn_step(fq[:, 0], fk[:, 0], fv[:, 0], fg[:, 0].half(), fb[:, 0], fp, fs)
        with pytest.raises(ValueError, match=r"qwen38\.gdn_tree_verify: parents must have shape"):
            OPS.gdn_tree_verify(fq, fk, fv, fg, fb, fp, fs, mode.from_tensor(_i([[-1, 0]] * 2)))
        with pytest.raises(ValueError, match=r"qwen38\.gdn_chain_verify: q has 17 tokens"):
            OPS.gdn_chain_verify(fq.repeat(1, 6, 1, 1)[:, :17], fk, fv, fg, fb, fp, fs)
        out = OPS.gdn_tree_verify(fq, fk, fv, fg, fb, fp, fs, mode.from_tensor(_i([[-1, 0, 1]] * 2)))
        assert out.shape == (2, 3, HV, DV) and out.dtype == torch.bfloat16


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=GPU)])
def test_parent_in_a_finished_branch_is_refused(device):
    """Node 3's parent is node 1, at depth 2, but the path went back to depth 1 at node 2: node 1's
    branch is finished (its path slot is stale, not absent). A ValueError naming parents[0, 3];
    on CUDA without the host check the kernel stops before node 3 (zero rows, pool untouched)."""
    q, k, v, g, beta, pool = _inputs(1, 4, seed=13)
    if device == "cuda":
        q, k, v, g, beta, pool = _cuda(q, k, v, g, beta, pool)
    par = torch.tensor([[-1, 0, -1, 1]], device=device)
    slots = torch.tensor([0], device=device)
    with pytest.raises(ValueError, match=r"qwen38\.gdn_tree_verify: parents\[0, 3\] = 1 is not on the current"):
        OPS.gdn_tree_verify(q, k, v, g, beta, pool, slots, par)
    before = pool.clone()
    with pytest.raises(ValueError, match=r"qwen38\.gdn_commit: parents\[0, 3\] = 1 is not on the current"):
        OPS.gdn_commit(k, v, g, beta, pool, slots, torch.tensor([0], device=device), par)
    qt.assert_bitwise_equal(pool, before, "pool after a refused commit")
    if device == "cuda":
        with knobs.override(QWEN38_GDN_CHECK_INDICES="0"):
            out = OPS.gdn_tree_verify(q, k, v, g, beta, pool, slots, par)
            OPS.gdn_commit(k, v, g, beta, pool, slots, torch.tensor([0], device=device), par)
        want = OPS.gdn_tree_verify(q[:, :3], k[:, :3], v[:, :3], g[:, :3], beta[:, :3], pool, slots,
                                   par[:, :3].contiguous())
        qt.assert_bitwise_equal(out[:, :3], want, "nodes before the bad one")
        assert not out[:, 3].any()
        qt.assert_bitwise_equal(pool, before, "pool after a commit of an invalid tree (no host check)")


# ---- CUDA against the reference ------------------------------------------------------------------

def _compare(name, args, kwargs=None, *, what=""):
    """Run op `name` on CPU copies (the reference) and CUDA copies of args; every output and the
    state pool must agree bit for bit, and no output may hold NaN (outputs start poisoned)."""
    kwargs = kwargs or {}
    cpu = tuple(t.clone() if isinstance(t, torch.Tensor) else t for t in args)
    gpu = _cuda(*args)
    want = getattr(OPS, name)(*cpu, **kwargs)
    got = getattr(OPS, name)(*gpu, **kwargs)
    torch.cuda.synchronize()
    if want is not None:
        assert not torch.isnan(got).any(), f"{name} {what}: NaN in the CUDA output (unwritten rows?)"
        qt.assert_bitwise_equal(got.cpu(), want, f"{name} {what}: output vs the reference")
    ip = [i for i, t in enumerate(args) if isinstance(t, torch.Tensor) and t.dim() == 4 and t.dtype == torch.float32
          and t.shape[1:] == (HV, DK, DV)][0]
    qt.assert_bitwise_equal(gpu[ip].cpu(), cpu[ip], f"{name} {what}: state pool vs the reference")
    return got, gpu[ip]


@GPU
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("beta_fp32", [False, True], ids=["beta_act", "beta_fp32"])
@pytest.mark.parametrize("batch", [1, 3, 8])
def test_step_matches_reference(batch, beta_fp32, dtype):
    q, k, v, g, beta, pool = _inputs(batch, 1, seed=batch, n_slots=batch + 2, dtype=dtype, beta_fp32=beta_fp32)
    slots = torch.randperm(batch + 2, generator=torch.Generator().manual_seed(batch))[:batch].to(torch.int64)
    if batch > 1:
        slots[1] = -1
    args = (q[:, 0], k[:, 0], v[:, 0], g[:, 0], beta[:, 0], pool, slots)
    got, _ = _compare("gdn_step", args, what=f"B={batch}")
    if batch > 1:
        assert not got[1].any(), "padding sequence must give zeros"
    _compare("gdn_step", args, {"scale": 0.3}, what=f"B={batch} scale 0.3")


@GPU
@pytest.mark.parametrize("ab_dtype", [torch.bfloat16, torch.float32], ids=["ab_bf16", "ab_fp32"])
@pytest.mark.parametrize("param_dtype", [torch.float32, torch.bfloat16, torch.float64], ids=["p32", "p16", "p64"])
def test_step_raw_matches_reference(param_dtype, ab_dtype):
    """In-kernel gates (double sigmoid/softplus/exp, rounded as gdn_gates rounds them) over a wide
    range of a and b, including the softplus threshold and saturated sigmoids."""
    batch = 16
    q, k, v, _, _, pool = _inputs(batch, 1, seed=31, n_slots=batch)
    A_log, dt_bias = _gate_params(torch.Generator().manual_seed(2))
    a = qt.randn_nonzero(batch, HV, dtype=ab_dtype, scale=6.0, seed=32)
    b = qt.randn_nonzero(batch, HV, dtype=ab_dtype, scale=8.0, seed=33)
    a[0, :6] = torch.tensor([19.9, 20.0, 20.5, 1e4, -1e4, -80.0]).to(ab_dtype)
    b[0, :4] = torch.tensor([-88.0, 40.0, -1e4, 0.001]).to(ab_dtype)
    slots = torch.arange(batch)
    _compare("gdn_step_raw", (q[:, 0], k[:, 0], v[:, 0], a, b, A_log.to(param_dtype), dt_bias.to(param_dtype),
                              pool, slots), what=f"a/b {ab_dtype}, params {param_dtype}")


@GPU
def test_step_raw_many_gate_values():
    """3072 distinct bf16 a and b values per call (64 sequences x 48 heads), spread over [-60, 60]."""
    batch = 64
    q, k, v, _, _, pool = _inputs(batch, 1, seed=41, n_slots=batch)
    A_log, dt_bias = _gate_params(torch.Generator().manual_seed(4))
    grid = torch.linspace(-60, 60, batch * HV).to(torch.bfloat16).view(batch, HV)
    perm = torch.randperm(batch * HV, generator=torch.Generator().manual_seed(5))
    _compare("gdn_step_raw", (q[:, 0], k[:, 0], v[:, 0], grid, grid.flatten()[perm].view(batch, HV), A_log,
                              dt_bias, pool, torch.arange(batch)), what="many gate values")


@GPU
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("t", [1, 5, 16])
def test_chain_matches_reference(t, dtype):
    q, k, v, g, beta, pool = _inputs(3, t, seed=50 + t, dtype=dtype)
    slots = _i([2, -1, 2])  # verifies may share a slot
    lengths = _i([t, t, max(t - 2, 0)], torch.int64)
    before = pool.clone()
    got, gpool = _compare("gdn_chain_verify", (q, k, v, g, beta, pool, slots, lengths), what=f"T={t}")
    qt.assert_bitwise_equal(gpool.cpu(), before, "chain verify wrote the pool")
    assert not got[1].any() and not got[2, int(lengths[2]):].any()
    _compare("gdn_chain_verify", (q, k, v, g, beta, pool, slots, None), {"scale": 1.5}, what=f"T={t}, no lengths")


@GPU
def test_chain_equals_cuda_steps_and_commit():
    """Chain row t == the (t+1)-th of successive CUDA steps; the commit of n tokens == n CUDA steps."""
    t = 16
    q, k, v, g, beta, pool = _cuda(*_inputs(2, t, seed=61))
    slots = torch.tensor([3, 1], device="cuda")
    out = OPS.gdn_chain_verify(q, k, v, g, beta, pool, slots)
    stepped = pool.clone()
    for i in range(t):
        o = OPS.gdn_step(q[:, i], k[:, i], v[:, i], g[:, i], beta[:, i], stepped, slots)
        qt.assert_bitwise_equal(out[:, i], o, f"chain token {i} vs {i + 1} steps")
        committed = pool.clone()
        OPS.gdn_commit(k, v, g, beta, committed, slots, torch.tensor([i + 1, i + 1], device="cuda"))
        qt.assert_bitwise_equal(committed, stepped, f"commit of {i + 1} tokens vs {i + 1} steps")


@GPU
@settings(deadline=None)
@given(trees=st.lists(qt.dfs_trees(max_nodes=64), min_size=1, max_size=3), data=st.data())
def test_tree_verify_and_commit_fuzz(trees, data):
    """Random trees (up to 64 nodes, any shape), random slots and index dtypes: tree verify and
    tree commit equal the reference bit for bit; padding; lengths shorter than T."""
    batch = len(trees)
    t = max(len(p) for p in trees)
    seed = data.draw(st.integers(0, 2**20), label="seed")
    q, k, v, g, beta, pool = _inputs(batch, t, seed=seed, n_slots=5,
                                     dtype=data.draw(st.sampled_from([torch.bfloat16, torch.float16]), label="dtype"))
    idx = data.draw(st.sampled_from([torch.int32, torch.int64]), label="index dtype")
    slots = torch.tensor(data.draw(st.permutations(range(5)), label="slots")[:batch], dtype=idx)
    if batch > 1 and data.draw(st.booleans(), label="pad one"):
        slots[data.draw(st.integers(0, batch - 1), label="padded")] = -1
    parents = _pad_parents(trees, t, idx)
    lengths = torch.tensor([len(p) for p in trees], dtype=idx)
    before = pool.clone()
    _, gpool = _compare("gdn_tree_verify", (q, k, v, g, beta, pool, slots, parents, lengths), what=f"trees {trees}")
    qt.assert_bitwise_equal(gpool.cpu(), before, "tree verify wrote the pool")
    accepted = torch.tensor([data.draw(st.integers(-1, len(p) - 1), label="accepted") for p in trees], dtype=idx)
    _compare("gdn_commit", (k, v, g, beta, pool, slots, accepted, parents), what=f"trees {trees}, accepted {accepted}")


@GPU
def test_tree_launches_of_any_size_in_any_order():
    """Tree verifies whose shared memory differs, in the order that once failed: a 1-node tree at
    B = 1 (192 CTAs, spread by more dynamic shared memory than it needs, QWEN38_SPREAD) after a
    larger one (64 nodes: ~83 KB a CTA, above the default 48 KB). The launcher used to set the
    kernel's limit to each call's own size, below the spread's size cached by the earlier call, and
    the launch failed with "invalid argument" (seen once in test_tree_verify_and_commit_fuzz). Each
    call equals the reference."""
    for t in (1, 32, 1, 64, 1, 16, 1):
        q, k, v, g, beta, pool = _inputs(1, t, seed=t, n_slots=2)
        parents = _pad_parents([list(range(-1, t - 1))], t)  # a chain-shaped tree
        _compare("gdn_tree_verify", (q, k, v, g, beta, pool, torch.tensor([1]), parents), what=f"{t} nodes")


@GPU
@settings(deadline=None)
@given(lens=st.lists(st.integers(0, 16), min_size=1, max_size=4), t=st.integers(1, 16), data=st.data())
def test_chain_verify_and_commit_fuzz(lens, t, data):
    batch = len(lens)
    lens = [min(n, t) for n in lens]
    seed = data.draw(st.integers(0, 2**20), label="seed")
    q, k, v, g, beta, pool = _inputs(batch, t, seed=seed, n_slots=6, beta_fp32=data.draw(st.booleans(), label="b32"))
    slots = torch.tensor(data.draw(st.permutations(range(6)), label="slots")[:batch])
    _compare("gdn_chain_verify", (q, k, v, g, beta, pool, slots, torch.tensor(lens)), what=f"lengths {lens}")
    accepted = torch.tensor([data.draw(st.integers(0, t), label="accepted") for _ in lens])
    _compare("gdn_commit", (k, v, g, beta, pool, slots, accepted, None), what=f"accepted {accepted}")


@GPU
def test_tree_nodes_equal_cuda_steps_along_their_paths():
    """A bushy 40-node tree of depth up to 9: every node's row == CUDA steps along its path (many
    rebuilds of ancestor states from the committed tile)."""
    gen = torch.Generator().manual_seed(71)
    parents, path = [], [-1]
    for i in range(40):
        d = int(torch.randint(1, min(len(path), 9) + 1, (1,), generator=gen))
        parents.append(path[d - 1])
        del path[d:]
        path.append(i)
    q, k, v, g, beta, pool = _cuda(*_inputs(1, 40, seed=72))
    slots = torch.tensor([2], device="cuda")
    out = OPS.gdn_tree_verify(q, k, v, g, beta, pool, slots, torch.tensor([parents], device="cuda"))
    for node in range(40):
        st1 = pool.clone()
        for i in _path_to(parents, node):
            o = OPS.gdn_step(q[:, i], k[:, i], v[:, i], g[:, i], beta[:, i], st1, slots)
        qt.assert_bitwise_equal(out[0, node], o[0], f"node {node} (path {_path_to(parents, node)})")


@GPU
def test_star_and_deep_chain_trees():
    """64 children of the committed state (64 leaves evaluated from the committed state), a 64-deep
    chain, and 32 pairs (a rebuild from the committed tile before every pair)."""
    q, k, v, g, beta, pool = _inputs(1, 64, seed=81)
    pairs = torch.tensor([[-1 if i % 2 == 0 else i - 1 for i in range(64)]])
    for par in (torch.full((1, 64), -1), torch.arange(-1, 63)[None], pairs):
        _compare("gdn_tree_verify", (q, k, v, g, beta, pool, _i([0]), par), what=f"parents {par[0, :3].tolist()}..")
        _compare("gdn_commit", (k, v, g, beta, pool, _i([0]), _i([63]), par), what="commit node 63")


@GPU
@settings(max_examples=12, deadline=None)
@given(trees=st.lists(qt.dfs_trees(max_nodes=64), min_size=1, max_size=2), data=st.data())
def test_tree_split_keeps_bits(trees, data):
    """QWEN38_GDN_TREE_SPLIT=1..4 (runs of the depth-first order on separate CTAs) and auto give
    the same bits: random trees, and the benchmark's spine tree of 32 nodes."""
    if data.draw(st.booleans(), label="spine"):
        trees = [_spine_tree(32)] + trees[1:]
    batch, t = len(trees), max(len(p) for p in trees)
    q, k, v, g, beta, pool = _cuda(*_inputs(batch, t, seed=data.draw(st.integers(0, 2**20), label="seed")))
    slots = torch.arange(batch, device="cuda")
    parents = _pad_parents(trees, t).cuda()
    lengths = torch.tensor([len(p) for p in trees], device="cuda")
    want = OPS.gdn_tree_verify(q, k, v, g, beta, pool, slots, parents, lengths)
    for s in ("1", "2", "3", "4"):
        with knobs.override(QWEN38_GDN_TREE_SPLIT=s):
            got = OPS.gdn_tree_verify(q, k, v, g, beta, pool, slots, parents, lengths)
        qt.assert_bitwise_equal(got, want, f"QWEN38_GDN_TREE_SPLIT={s}, trees {trees}")


@GPU
def test_tree_split_bad_knob_is_named():
    q, k, v, g, beta, pool = _cuda(*_inputs(1, 4, seed=5))
    par = torch.tensor([[-1, 0, 1, 0]], device="cuda")  # a valid tree: only the knob is bad
    for bad in ("0", "5", "two"):
        with knobs.override(QWEN38_GDN_TREE_SPLIT=bad):
            with pytest.raises(ValueError, match=r"qwen38\.gdn_tree_verify: QWEN38_GDN_TREE_SPLIT must be"):
                OPS.gdn_tree_verify(q, k, v, g, beta, pool, torch.tensor([0], device="cuda"), par)


@GPU
def test_strided_and_misaligned_inputs():
    """q/k/v slices of bigger tensors (head-strided, token-strided, base off 16-byte alignment) give
    the bits of their contiguous copies (16-byte loads vs element loads)."""
    qb, kb, vb, g, beta, pool = _cuda(*_inputs(2, 4, seed=91))
    big = lambda x: torch.cat([x, x], dim=-2)[..., :x.shape[-2], :]  # noqa: E731  batch/token strides doubled
    off = lambda x: torch.cat([x.flatten()[:1], x.flatten()])[1:].view(x.shape)  # noqa: E731  base + 1 element
    slots = torch.tensor([0, 1], device="cuda")
    want = OPS.gdn_chain_verify(qb, kb, vb, g, beta, pool, slots)
    for f, name in ((big, "token-strided"), (off, "misaligned")):
        qs, ks, vs = f(qb), f(kb), f(vb)
        assert not qs.is_contiguous() or qs.data_ptr() % 16
        got = OPS.gdn_chain_verify(qs, ks, vs, g, beta, pool, slots)
        qt.assert_bitwise_equal(got, want, f"chain verify, {name} q/k/v")
    p1, p2 = pool.clone(), pool.clone()
    o1 = OPS.gdn_step(qb[:, 1], kb[:, 1], vb[:, 1], g[:, 1], beta[:, 1], p1, slots)
    o2 = OPS.gdn_step(qb[:, 1].contiguous(), kb[:, 1].contiguous(), vb[:, 1].contiguous(), g[:, 1].contiguous(),
                      beta[:, 1].contiguous(), p2, slots)
    qt.assert_bitwise_equal(o1, o2, "step on token-strided inputs")
    qt.assert_bitwise_equal(p1, p2, "step state on token-strided inputs")


@GPU
def test_batch_independence_and_duplicates_in_verify():
    """A sequence's results do not depend on the batch around it."""
    q, k, v, g, beta, pool = _cuda(*_inputs(5, 6, seed=101))
    par = torch.tensor([[-1, 0, 1, 1, -1, 4]] * 5, device="cuda")
    lens = torch.tensor([6, 2, 5, 0, 3], device="cuda")
    slots = torch.tensor([1, 1, 3, 0, -1], device="cuda")
    full = OPS.gdn_tree_verify(q, k, v, g, beta, pool, slots, par, lens)
    for b in range(5):
        one = OPS.gdn_tree_verify(q[b:b + 1], k[b:b + 1], v[b:b + 1], g[b:b + 1], beta[b:b + 1], pool,
                                  slots[b:b + 1], par[b:b + 1], lens[b:b + 1])
        qt.assert_bitwise_equal(full[b:b + 1], one, f"sequence {b} alone vs in the batch")


@GPU
@pytest.mark.parametrize("op", ["step", "chain", "tree", "commit"])
def test_graph_equals_eager_and_deterministic(op):
    q, k, v, g, beta, pool0 = _cuda(*_inputs(3, 8, seed=111))
    pool = pool0.clone()
    slots = torch.tensor([2, -1, 0], device="cuda")
    par = torch.tensor([[-1, 0, 1, 0, 3, 3, -1, 6]] * 3, device="cuda")
    # device tensors made before the capture (a host-to-device copy cannot be captured)
    lengths = torch.tensor([8, 3, 5], device="cuda")
    accepted = torch.tensor([5, 2, 7], device="cuda")

    def fn():
        pool.copy_(pool0)
        if op == "step":
            o = OPS.gdn_step(q[:, 0], k[:, 0], v[:, 0], g[:, 0], beta[:, 0], pool, slots)
        elif op == "chain":
            o = OPS.gdn_chain_verify(q, k, v, g, beta, pool, slots, lengths)
        elif op == "tree":
            o = OPS.gdn_tree_verify(q, k, v, g, beta, pool, slots, par)
        else:
            OPS.gdn_commit(k, v, g, beta, pool, slots, accepted, par)
            o = pool[:1, :1, :1, :1] * 0
        return o, pool.clone()

    qt.assert_graph_equals_eager(fn)
    qt.assert_deterministic(fn, times=3)
    with knobs.override(QWEN38_PDL="0"):
        off = fn()
    on = fn()
    qt.assert_bitwise_equal(off[0], on[0], "QWEN38_PDL=0 vs 1")
    with knobs.override(QWEN38_SPREAD="0"):  # a launch detail (launch.cuh spread_smem): same bits
        plain = fn()
    qt.assert_bitwise_equal(plain[0], on[0], "QWEN38_SPREAD=0 vs 1: output")
    qt.assert_bitwise_equal(plain[1], on[1], "QWEN38_SPREAD=0 vs 1: pool")


@GPU
def test_opcheck_cuda():
    for op, args, kw in _opcheck_cases("cuda"):
        qt.run_opcheck(op, args, kw)


@GPU
def test_empty_batch():
    q, k, v, g, beta, pool = _cuda(*_inputs(1, 2, seed=121))
    e = lambda x: x[:0]  # noqa: E731
    s = torch.zeros(0, dtype=torch.int32, device="cuda")
    assert OPS.gdn_step(e(q[:, 0]), e(k[:, 0]), e(v[:, 0]), e(g[:, 0]), e(beta[:, 0]), pool, s).shape == (0, HV, DV)
    assert OPS.gdn_chain_verify(e(q), e(k), e(v), e(g), e(beta), pool, s).shape == (0, 2, HV, DV)
    OPS.gdn_commit(e(k), e(v), e(g), e(beta), pool, s, s)


# ---- bad input (CUDA) ----------------------------------------------------------------------------

def _bad_cases(dev):
    q, k, v, g, beta, pool = _inputs(2, 3, seed=29)
    q, k, v, g, beta, pool = (t.to(dev) for t in (q, k, v, g, beta, pool))
    T = lambda x: torch.tensor(x, device=dev)  # noqa: E731
    s2 = T([0, 1])
    step = lambda **kw: OPS.gdn_step(**{**dict(q=q[:, 0], k=k[:, 0], v=v[:, 0], g=g[:, 0],  # noqa: E731
                                        beta=beta[:, 0], state_pool=pool, slots=s2), **kw})
    chain = lambda **kw: OPS.gdn_chain_verify(**{**dict(q=q, k=k, v=v, g=g, beta=beta,  # noqa: E731
                                                 state_pool=pool, slots=s2), **kw})
    par_ok = T([[-1, 0, 1], [-1, -1, 1]])
    tree = lambda **kw: OPS.gdn_tree_verify(**{**dict(q=q, k=k, v=v, g=g, beta=beta, state_pool=pool,  # noqa: E731
                                                slots=s2, parents=par_ok), **kw})
    commit = lambda **kw: OPS.gdn_commit(**{**dict(k=k, v=v, g=g, beta=beta, state_pool=pool,  # noqa: E731
                                            slots=s2, accepted=T([2, 1])), **kw})
    # (id, fn, kwargs, message fragment, is an index value: the kernel's own guard covers it)
    return pool, [
        ("step slot out of range", step, dict(slots=T([0, 4])), "gdn_step: slots[1]", True),
        ("step slot below -1", step, dict(slots=T([-2, 0])), "gdn_step: slots[0]", True),
        ("step duplicate slots", step, dict(slots=T([1, 1])), "gdn_step: slots must be distinct", True),
        ("step slots dtype", step, dict(slots=T([0.0, 1.0])), "gdn_step: slots must be", False),
        ("step q dtype", step, dict(q=q[:, 0].float()), "gdn_step: q must be", False),
        ("step k dtype", step, dict(k=k[:, 0].half()), "gdn_step: k must be", False),
        ("step v shape", step, dict(v=v[:, 0, :16]), "gdn_step: v must have shape", False),
        ("step g dtype", step, dict(g=g[:, 0].bfloat16()), "gdn_step: g must be", False),
        ("step beta shape", step, dict(beta=beta[:1, 0]), "gdn_step: beta must have shape", False),
        ("step pool dtype", step, dict(state_pool=pool.double()), "gdn_step: state_pool must be float32", False),
        ("step pool shape", step, dict(state_pool=pool[:, :16]), "gdn_step: state_pool must have shape", False),
        ("step pool layout", step, dict(state_pool=pool.transpose(2, 3)), "gdn_step: state_pool must be contiguous",
         False),
        ("step pool misaligned", step, dict(state_pool=qt.offset_copy(pool, 1)),
         "gdn_step: state_pool must start 16-byte", False),
        ("step scale", step, dict(scale=float("nan")), "gdn_step: scale", False),
        ("step q last dim strided", step, dict(q=torch.cat([q[:, 0], q[:, 0]], -1)[..., ::2]),
         "gdn_step: q must be contiguous in its last dimension", False),
        ("chain too long", chain, dict(q=q.repeat(1, 6, 1, 1), k=k.repeat(1, 6, 1, 1), v=v.repeat(1, 6, 1, 1),
                                       g=g.repeat(1, 6, 1), beta=beta.repeat(1, 6, 1)), "gdn_chain_verify: q has 18",
         False),
        ("chain lengths", chain, dict(lengths=T([4, 1])), "gdn_chain_verify: lengths[0]", True),
        ("chain slot", chain, dict(slots=T([0, 9])), "gdn_chain_verify: slots[1]", True),
        ("tree parent not earlier", tree, dict(parents=T([[-1, 1, 1], [-1, 0, 1]])),
         "gdn_tree_verify: parents[0, 1] = 1", True),
        ("tree parent not on path", tree, dict(parents=T([[-1, 0, 1], [-1, -1, 0]])),
         "gdn_tree_verify: parents[1, 2] = 0 is not on the current", True),
        ("tree parents shape", tree, dict(parents=par_ok[:, :2]), "gdn_tree_verify: parents must have shape", False),
        ("commit accepted range", commit, dict(accepted=T([4, 0])), "gdn_commit: accepted[0]", True),
        ("commit tree accepted", commit, dict(accepted=T([2, 3]), parents=par_ok), "gdn_commit: accepted[1]", True),
        ("commit tree parent", commit, dict(accepted=T([2, 0]), parents=T([[-1, 2, 0], [-1, 0, 1]])),
         "gdn_commit: parents[0, 1] = 2", True),
        ("commit duplicate slots", commit, dict(slots=T([3, 3])), "gdn_commit: slots must be distinct", True),
        ("commit v dtype", commit, dict(v=v.half()), "gdn_commit: v must be", False),
    ]


@GPU
def test_bad_input_names_the_argument_and_writes_nothing():
    pool, cases = _bad_cases("cuda")
    before = pool.clone()
    for name, fn, kw, msg, _ in cases:
        with pytest.raises(ValueError, match="^qwen38\\.") as e:
            fn(**kw)
        assert msg in str(e.value), f"case {name}: {e.value}"
        qt.assert_bitwise_equal(pool, before, f"case {name}: the pool was written")


@GPU
def test_bad_index_values_without_the_host_check_write_nothing():
    """QWEN38_GDN_CHECK_INDICES=0 (as under graph capture): bad index values raise nothing, but the
    kernels write no pool row out of range, write a repeated slot once, and never write garbage."""
    pool, cases = _bad_cases("cuda")
    start = pool.clone()
    with knobs.override(QWEN38_GDN_CHECK_INDICES="0"):
        for name, fn, kw, _, is_value in cases:
            if not is_value or "duplicate" in name:
                continue
            before = pool.clone()
            out = fn(**kw)
            torch.cuda.synchronize()
            if out is not None:
                assert not torch.isnan(out).any(), f"case {name}: unwritten output"
            if "commit" in name or "step" in name:
                continue  # a valid sequence of the call may legitimately update its row
            qt.assert_bitwise_equal(pool, before, f"case {name}: a verify wrote the pool")
        # out-of-range slots: the other sequence's row is updated, nothing else
        before = start
        q, k, v, g, beta, _ = _cuda(*_inputs(2, 1, seed=29))
        p = before.clone()
        o = OPS.gdn_step(q[:, 0], k[:, 0], v[:, 0], g[:, 0], beta[:, 0], p, torch.tensor([9, 1], device="cuda"))
        assert not o[0].any()
        for r in (0, 2, 3):
            qt.assert_bitwise_equal(p[r], before[r], f"row {r} after an out-of-range slot")
        # a repeated slot: written once, by the first sequence (== the 1-sequence step)
        p, p1 = before.clone(), before.clone()
        OPS.gdn_step(q[:, 0], k[:, 0], v[:, 0], g[:, 0], beta[:, 0], p, torch.tensor([2, 2], device="cuda"))
        OPS.gdn_step(q[:1, 0], k[:1, 0], v[:1, 0], g[:1, 0], beta[:1, 0], p1, torch.tensor([2], device="cuda"))
        qt.assert_bitwise_equal(p, p1, "repeated slot: only the first sequence writes")


@GPU
def test_cpu_tensor_names_the_argument():
    q, k, v, g, beta, pool = _cuda(*_inputs(2, 1, seed=3))
    with pytest.raises(ValueError, match=r"qwen38\.gdn_step: g is on cpu but state_pool is on cuda"):
        OPS.gdn_step(q[:, 0], k[:, 0], v[:, 0], g[:, 0].cpu(), beta[:, 0], pool, torch.tensor([0, 1], device="cuda"))


# ---- the kernel source on the host (CPU CI) --------------------------------------------------------
# tests/native/gdn_host_emulation.cpp compiles csrc/gdn/gdn_kernel.cuh with the host compiler and runs
# each CTA's threads (the kernel's kThreads) as cooperative user-space threads. It checks the
# kernel's indexing, staging, shared-memory layout, tree replay and guards against the reference
# without a GPU; the arithmetic is plain IEEE float (no FMA), transcendentals from the host libm.

EMU_HEADS = (0, 1, 23, 47)  # q/k heads 0, 0, 7, 15


@pytest.fixture(scope="session")
def emulator(host_emulator):
    return host_emulator("gdn_host_emulation")


_DT = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32", torch.float64: "f64"}


def _emulate(exe, tmp_path, mode, *, q=None, k=None, v=None, g=None, beta=None, pool, slots, lengths=None,
             parents=None, accepted=None, a=None, b=None, A_log=None, dt_bias=None, scale=ref.DEFAULT_SCALE,
             idx64=False, vec16=True, c_k=None, c_v=None, c_g=None, c_beta=None, c_accepted=None, c_parents=None,
             splits=1):
    """Run the kernel source on the host; returns (out or None, pool after)."""
    import subprocess
    tmp_path.mkdir(parents=True, exist_ok=True)
    ref_t = k if k is not None else q
    tokens = 1 if mode in ("step", "step_raw") else ref_t.shape[1]
    prm = {"mode": "step" if mode == "step_raw" else mode, "batch": ref_t.shape[0], "tokens": tokens,
           "pool_rows": pool.shape[0], "act": _DT[ref_t.dtype], "scale": repr(float(torch.tensor(scale).float())),
           "idx64": int(idx64), "vec16": int(vec16), "raw": int(mode == "step_raw"),
           "heads": ",".join(map(str, EMU_HEADS)), "splits": splits}
    tensors = dict(q=q, k=k, v=v, g=g, beta=beta, pool=pool, a=a, b=b, A_log=A_log, dt_bias=dt_bias,
                   slots=slots, lengths=lengths, parents=parents, accepted=accepted, c_k=c_k, c_v=c_v, c_g=c_g,
                   c_beta=c_beta, c_accepted=c_accepted, c_parents=c_parents)
    if c_k is not None:
        prm["c_tokens"] = c_k.shape[1]
    for name, t in tensors.items():
        if t is None:
            continue
        t = t.contiguous()
        if name in ("slots", "lengths", "parents", "accepted", "c_accepted", "c_parents"):
            t = t.to(torch.int64 if idx64 else torch.int32)
        else:
            prm[{"beta": "beta_dt", "a": "a_dt", "b": "b_dt", "A_log": "alog_dt", "dt_bias": "dtb_dt",
                 "c_beta": "c_beta_dt"}.get(name, "_")] = _DT[t.dtype]
        raw = t.view(torch.int16) if t.element_size() == 2 else t
        (tmp_path / f"{name}.bin").write_bytes(raw.numpy().tobytes())
        prm[name] = f"{name}.bin"
    (tmp_path / "params.txt").write_text("".join(f"{kk} {vv}\n" for kk, vv in prm.items()))
    subprocess.run([str(exe), str(tmp_path)], check=True, capture_output=True, timeout=600)
    pool_out = torch.frombuffer(bytearray((tmp_path / "pool_out.bin").read_bytes()), dtype=torch.float32)
    pool_out = pool_out.view(pool.shape)
    out = None
    if mode != "commit":
        o = torch.frombuffer(bytearray((tmp_path / "out.bin").read_bytes()), dtype=torch.int16)
        shape = (ref_t.shape[0], HV, DV) if tokens == 1 and mode in ("step", "step_raw") else \
            (ref_t.shape[0], tokens, HV, DV)
        out = o.view(ref_t.dtype).view(shape)
    return out, pool_out


def _check_emulated(got, want, pool_in, what):
    """Heads EMU_HEADS of the emulated output and pool equal the reference; the other heads of the
    pool are untouched (those CTAs did not run)."""
    out, pool = got
    want_out, want_pool = want
    hs = list(EMU_HEADS)
    if want_out is not None:
        qt.assert_bitwise_equal(out[..., hs, :], want_out[..., hs, :], f"{what}: output (heads {hs})")
    qt.assert_bitwise_equal(pool[:, hs], want_pool[:, hs], f"{what}: state (heads {hs})")
    others = [h for h in range(HV) if h not in hs]
    qt.assert_bitwise_equal(pool[:, others], pool_in[:, others], f"{what}: heads that did not run")


def test_host_emulation_step(emulator, tmp_path):
    for dtype, beta32, idx64, vec16 in [(torch.bfloat16, False, False, True), (torch.float16, True, True, False)]:
        q, k, v, g, beta, pool = _inputs(3, 1, seed=201, n_slots=5, dtype=dtype, beta_fp32=beta32)
        slots = _i([4, -1, 1])
        args = (q[:, 0], k[:, 0], v[:, 0], g[:, 0], beta[:, 0])
        p_ref = pool.clone()
        o_ref = ref.gdn_step(*args, p_ref, slots, scale=0.7)
        got = _emulate(emulator, tmp_path / f"s{idx64}", "step", q=args[0], k=args[1], v=args[2], g=args[3],
                       beta=args[4], pool=pool.clone(), slots=slots, scale=0.7, idx64=idx64, vec16=vec16)
        _check_emulated(got, (o_ref, p_ref), pool, f"step {dtype}")
        assert not got[0][1, list(EMU_HEADS)].any(), "padding sequence: zeros"


def test_host_emulation_step_raw_and_repeated_slot(emulator, tmp_path):
    q, k, v, _, _, pool = _inputs(2, 1, seed=211, n_slots=3)
    A_log, dt_bias = _gate_params(torch.Generator().manual_seed(3))
    a = qt.randn_nonzero(2, HV, scale=6.0, seed=212)
    b = qt.randn_nonzero(2, HV, dtype=torch.float32, scale=8.0, seed=213)
    a[0, :3] = torch.tensor([25.0, -1e4, 20.0]).to(a.dtype)
    p_ref = pool.clone()
    o_ref = ref.gdn_step_raw(q[:, 0], k[:, 0], v[:, 0], a, b, A_log, dt_bias.double(), p_ref, _i([2, 0]))
    got = _emulate(emulator, tmp_path / "raw", "step_raw", q=q[:, 0], k=k[:, 0], v=v[:, 0], a=a, b=b, A_log=A_log,
                   dt_bias=dt_bias.double(), pool=pool.clone(), slots=_i([2, 0]))
    _check_emulated(got, (o_ref, p_ref), pool, "raw-gate step")
    # a repeated slot (no host check): the first sequence writes, the output of the second is its
    # step from the same loaded state
    p_ref = pool.clone()
    ref.gdn_step_raw(q[:1, 0], k[:1, 0], v[:1, 0], a[:1], b[:1], A_log, dt_bias, p_ref, _i([1]))
    _, p_got = _emulate(emulator, tmp_path / "dup", "step_raw", q=q[:, 0], k=k[:, 0], v=v[:, 0], a=a, b=b,
                        A_log=A_log, dt_bias=dt_bias, pool=pool.clone(), slots=_i([1, 1]))
    hs = list(EMU_HEADS)
    qt.assert_bitwise_equal(p_got[:, hs], p_ref[:, hs], "repeated slot written once, by the first sequence")


def test_host_emulation_chain_and_commit(emulator, tmp_path):
    q, k, v, g, beta, pool = _inputs(3, 7, seed=221, n_slots=4)
    slots, lengths = _i([3, 3, -1]), _i([7, 4, 2])
    o_ref = ref.gdn_chain_verify(q, k, v, g, beta, pool, slots, lengths)
    got = _emulate(emulator, tmp_path / "chain", "chain", q=q, k=k, v=v, g=g, beta=beta, pool=pool.clone(),
                   slots=slots, lengths=lengths)
    _check_emulated(got, (o_ref, pool), pool, "chain verify")
    slots, acc = _i([3, 0, -1]), _i([7, 3, 5])
    p_ref = pool.clone()
    ref.gdn_commit(k, v, g, beta, p_ref, slots, acc)
    got = _emulate(emulator, tmp_path / "commit", "commit", k=k, v=v, g=g, beta=beta, pool=pool.clone(),
                   slots=slots, accepted=acc, idx64=True)
    _check_emulated(got, (None, p_ref), pool, "chain commit")


def test_host_emulation_tree_and_commit(emulator, tmp_path):
    trees = [[-1, 0, 1, 1, -1, 4, 5, 5, 4, 4, 9, 10], [-1, -1, 1, 2, 2, 1, -1]]
    t = 12
    q, k, v, g, beta, pool = _inputs(2, t, seed=231, n_slots=3)
    parents, lengths, slots = _pad_parents(trees, t), _i([12, 7]), _i([1, 2])
    o_ref = ref.gdn_tree_verify(q, k, v, g, beta, pool, slots, parents, lengths)
    got = _emulate(emulator, tmp_path / "tree", "tree", q=q, k=k, v=v, g=g, beta=beta, pool=pool.clone(),
                   slots=slots, parents=parents, lengths=lengths)
    _check_emulated(got, (o_ref, pool), pool, "tree verify")
    acc = _i([11, 4])
    p_ref = pool.clone()
    ref.gdn_commit(k, v, g, beta, p_ref, slots, acc, parents)
    got = _emulate(emulator, tmp_path / "tcommit", "commit", k=k, v=v, g=g, beta=beta, pool=pool.clone(),
                   slots=slots, accepted=acc, parents=parents)
    _check_emulated(got, (None, p_ref), pool, "tree commit")
    # invalid order (node 3's parent in a finished branch): rows from node 3 are zeros, no commit
    bad = _i([[-1, 0, -1, 1] + [-1] * 8, [-1] * 12])
    out, p_out = _emulate(emulator, tmp_path / "bad", "tree", q=q, k=k, v=v, g=g, beta=beta, pool=pool.clone(),
                          slots=slots, parents=bad, lengths=_i([12, 2]))
    want = ref.gdn_tree_verify(q[:1, :3], k[:1, :3], v[:1, :3], g[:1, :3], beta[:1, :3], pool, slots[:1],
                               bad[:1, :3])
    hs = list(EMU_HEADS)
    qt.assert_bitwise_equal(out[:1, :3][..., hs, :], want[..., hs, :], "nodes before the bad one")
    assert not out[0, 3:][:, hs].any()
    _, p_out = _emulate(emulator, tmp_path / "badc", "commit", k=k, v=v, g=g, beta=beta, pool=pool.clone(),
                        slots=slots, accepted=_i([2, 0]), parents=bad)
    qt.assert_bitwise_equal(p_out[1:2, hs], pool[1:2, hs], "commit of an invalid tree writes nothing")


def test_host_emulation_64_nodes(emulator, tmp_path):
    """The largest tree (the 99 KB shared-memory layout): 64 nodes, alternating children of the
    committed state and of the previous node (a rebuild at every other node)."""
    par = [[-1 if i % 2 == 0 else i - 1 for i in range(64)]]
    q, k, v, g, beta, pool = _inputs(1, 64, seed=241, n_slots=2)
    parents, slots = _pad_parents(par, 64), _i([1])
    o_ref = ref.gdn_tree_verify(q, k, v, g, beta, pool, slots, parents)
    got = _emulate(emulator, tmp_path, "tree", q=q, k=k, v=v, g=g, beta=beta, pool=pool.clone(), slots=slots,
                   parents=parents)
    _check_emulated(got, (o_ref, pool), pool, "64-node tree verify")


@settings(max_examples=4, deadline=None)
@given(trees=st.lists(qt.dfs_trees(max_nodes=20), min_size=1, max_size=2), data=st.data())
def test_host_emulation_tree_fuzz(emulator, tmp_path_factory, trees, data):
    """Random trees through the kernel source: verify and commit."""
    batch, t = len(trees), max(len(p) for p in trees)
    q, k, v, g, beta, pool = _inputs(batch, t, seed=len(trees[0]) + 7 * t, n_slots=3)
    slots = torch.tensor(data.draw(st.permutations(range(3)), label="slots")[:batch])
    parents, lengths = _pad_parents(trees, t), torch.tensor([len(p) for p in trees])
    tmp = tmp_path_factory.mktemp("fuzz")
    o_ref = ref.gdn_tree_verify(q, k, v, g, beta, pool, slots, parents, lengths)
    got = _emulate(emulator, tmp / "v", "tree", q=q, k=k, v=v, g=g, beta=beta, pool=pool.clone(), slots=slots,
                   parents=parents, lengths=lengths)
    _check_emulated(got, (o_ref, pool), pool, f"tree verify {trees}")
    acc = torch.tensor([data.draw(st.integers(-1, len(p) - 1), label="accepted") for p in trees])
    p_ref = pool.clone()
    ref.gdn_commit(k, v, g, beta, p_ref, slots, acc, parents)
    got = _emulate(emulator, tmp / "c", "commit", k=k, v=v, g=g, beta=beta, pool=pool.clone(), slots=slots,
                   accepted=acc, parents=parents)
    _check_emulated(got, (None, p_ref), pool, f"tree commit {trees} accepted {acc.tolist()}")


def _spine_tree(n, depth=8):
    """benchmarks/bench_gdn.py's tree (a spine with alternatives visited first): its split cuts
    into a run with ancestors to replay."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("bench_gdn", Path(__file__).resolve().parents[1] / "benchmarks"
                                                  / "bench_gdn.py")
    mod = importlib.util.module_from_spec(spec)
    import sys
    sys.modules.setdefault("bench_gdn", mod)  # (its dataclasses look their module up)
    spec.loader.exec_module(mod)
    return mod.tree_parents(n, depth)


def test_host_emulation_tree_split(emulator, tmp_path):
    """The tree split (runs of the depth-first order on separate CTAs, each replaying its first
    node's ancestors): 2, 3 and 4 runs give the reference's bits - the bench tree, a deep chain
    with side leaves, a star, a lengths-shortened tree, and an invalid node inside a later run."""
    spine = _spine_tree(32)
    chainy = [-1] + [i - 1 if i % 3 else i - 2 for i in range(1, 24)]
    star = [-1] * 9
    trees = [spine, chainy + [-1] * (32 - len(chainy)), star + [-1] * (32 - len(star))]
    q, k, v, g, beta, pool = _inputs(3, 32, seed=261, n_slots=4)
    parents, lengths, slots = _pad_parents(trees, 32), _i([32, 24, 9]), _i([3, 0, 2])
    o_ref = ref.gdn_tree_verify(q, k, v, g, beta, pool, slots, parents, lengths)
    for splits in (2, 3, 4):
        got = _emulate(emulator, tmp_path / f"s{splits}", "tree", q=q, k=k, v=v, g=g, beta=beta, pool=pool.clone(),
                       slots=slots, parents=parents, lengths=lengths, splits=splits)
        _check_emulated(got, (o_ref, pool), pool, f"tree verify in {splits} runs")
    bad = spine[:20] + [25] + spine[21:]  # node 20 names a later node: rows from 20 are zeros
    badp = _pad_parents([bad], 32)
    want = ref.gdn_tree_verify(q[:1, :20], k[:1, :20], v[:1, :20], g[:1, :20], beta[:1, :20], pool, slots[:1],
                               badp[:, :20])
    out, _ = _emulate(emulator, tmp_path / "bad", "tree", q=q[:1], k=k[:1], v=v[:1], g=g[:1], beta=beta[:1],
                      pool=pool.clone(), slots=slots[:1], parents=badp, splits=2)
    hs = list(EMU_HEADS)
    qt.assert_bitwise_equal(out[:, :20][..., hs, :], want[..., hs, :], "split: nodes before the bad one")
    assert not out[0, 20:][:, hs].any(), "split: rows from the bad node are zeros"


def _first_invalid(par):
    """Index of the first node out of depth-first order (len(par) when none), as the reference rules."""
    depth, path = {}, [-1]
    for i, p in enumerate(par):
        if p < -1 or p >= i:
            return i
        dp = 0 if p < 0 else depth[p]
        if dp >= len(path) or path[dp] != p:
            return i
        depth[i] = dp + 1
        del path[dp + 1:]
        path.append(i)
    return len(par)


def test_host_emulation_invalid_trees(emulator, tmp_path):
    """Parents out of range, not earlier, off the current path, in a finished branch: the kernel runs
    the valid prefix (the reference's bits), zeros after it, and a commit of such a tree writes
    nothing (what happens on CUDA when the host check is off or impossible, e.g. in a graph)."""
    cases = [[-1, 0, 1, 5, 3, 4], [-1, 0, -3, 2, 3, 4], [-1, 0, 1, 99, 0, 0], [-1, 0, 1, 0, 2, 4],
             [-1, 0, 1, -1, 3, 1], [-1, -1, 0, 1, 1, 1]]
    q, k, v, g, beta, pool = _inputs(len(cases), 6, seed=251, n_slots=len(cases))
    slots = torch.arange(len(cases))
    parents = torch.tensor(cases, dtype=torch.int64)
    out, _ = _emulate(emulator, tmp_path / "v", "tree", q=q, k=k, v=v, g=g, beta=beta, pool=pool.clone(),
                      slots=slots, parents=parents, idx64=True)
    hs = list(EMU_HEADS)
    for b, par in enumerate(cases):
        nv = _first_invalid(par)
        assert nv < 6, f"case {par} is meant to be invalid"
        want = ref.gdn_tree_verify(q[b:b + 1, :nv], k[b:b + 1, :nv], v[b:b + 1, :nv], g[b:b + 1, :nv],
                                   beta[b:b + 1, :nv], pool, slots[b:b + 1], parents[b:b + 1, :nv])
        qt.assert_bitwise_equal(out[b:b + 1, :nv][..., hs, :], want[..., hs, :], f"valid prefix of {par}")
        assert not out[b, nv:][:, hs].any(), f"rows from the first invalid node of {par}"
    _, p_out = _emulate(emulator, tmp_path / "c", "commit", k=k, v=v, g=g, beta=beta, pool=pool.clone(),
                        slots=slots, accepted=torch.full((len(cases),), 1), parents=parents, idx64=True)
    qt.assert_bitwise_equal(p_out, pool, "commits of invalid trees")


# ---- the commit folded into the next verify ---------------------------------------------------------

def _round_inputs(seed, dtype=torch.bfloat16):
    """Two rounds of 2 sequences: the pending commit's tokens (5 per sequence, tree parents) and the
    next verify's (6 tokens)."""
    ck, cv_, cg, cbeta = _inputs(2, 5, seed=seed, dtype=dtype)[1:5]
    q, k, v, g, beta, pool = _inputs(2, 6, seed=seed + 100, dtype=dtype)
    c_par = _i([[-1, 0, 1, 0, 3], [-1, -1, 1, 2, -1]])
    v_par = _i([[-1, 0, 0, 2, -1, 4], [-1, 0, 1, 2, 3, 4]])
    return (ck, cv_, cg, cbeta, c_par), (q, k, v, g, beta, v_par), pool


def _separate(pend, ver, pool, slots, c_acc, c_tree, v_tree, lengths=None):
    ck, cv_, cg, cbeta, c_par = pend
    q, k, v, g, beta, v_par = ver
    OPS.gdn_commit(ck, cv_, cg, cbeta, pool, slots, c_acc, c_par if c_tree else None)
    if v_tree:
        return OPS.gdn_tree_verify(q, k, v, g, beta, pool, slots, v_par, lengths)
    return OPS.gdn_chain_verify(q, k, v, g, beta, pool, slots, lengths)


def test_commit_verify_cpu_is_commit_then_verify():
    pend, ver, pool = _round_inputs(301)
    slots = _i([3, 1])
    for c_tree, v_tree, c_acc in [(True, True, _i([4, 3])), (False, False, _i([5, 0])), (True, False, _i([-1, 2]))]:
        p1, p2 = pool.clone(), pool.clone()
        want = _separate(pend, ver, p1, slots, c_acc, c_tree, v_tree, _i([6, 4]))
        got = OPS.gdn_commit_verify(*pend[:4], c_acc, pend[4] if c_tree else None, *ver[:5], p2, slots,
                                    ver[5] if v_tree else None, _i([6, 4]))
        qt.assert_bitwise_equal(got, want, f"output, commit tree {c_tree}, verify tree {v_tree}")
        qt.assert_bitwise_equal(p2, p1, f"state, commit tree {c_tree}, verify tree {v_tree}")
    # the wrapper: both knob settings, the same bits
    outs = []
    for on in ("1", "0"):
        p = pool.clone()
        with knobs.override(QWEN38_COMMIT_IN_VERIFY=on):
            outs.append((q38.gdn_commit_verify(*pend[:4], _i([4, 3]), pend[4], *ver[:5], p, slots, ver[5]), p))
    qt.assert_bitwise_equal(outs[0][0], outs[1][0], "QWEN38_COMMIT_IN_VERIFY 1 vs 0: output")
    qt.assert_bitwise_equal(outs[0][1], outs[1][1], "QWEN38_COMMIT_IN_VERIFY 1 vs 0: state")


def test_commit_verify_bad_input_writes_nothing():
    pend, ver, pool = _round_inputs(311)
    before = pool.clone()
    base = dict(c_acc=_i([4, 3]), lengths=_i([6, 7]))  # lengths[1] = 7 > T: the verify is refused
    with pytest.raises(ValueError, match=r"qwen38\.gdn_commit_verify: lengths\[1\] = 7"):
        OPS.gdn_commit_verify(*pend[:4], base["c_acc"], pend[4], *ver[:5], pool, _i([0, 1]), ver[5], base["lengths"])
    with pytest.raises(ValueError, match=r"qwen38\.gdn_commit: accepted\[0\] = 5"):
        OPS.gdn_commit_verify(*pend[:4], _i([5, 0]), pend[4], *ver[:5], pool, _i([0, 1]), ver[5])
    with pytest.raises(ValueError, match=r"qwen38\.gdn_commit_verify: slots must be distinct"):
        OPS.gdn_commit_verify(*pend[:4], _i([1, 0]), None, *ver[:5], pool, _i([2, 2]), None)
    qt.assert_bitwise_equal(pool, before, "a refused gdn_commit_verify wrote the pool")


def test_host_emulation_commit_in_verify(emulator, tmp_path):
    pend, ver, pool = _round_inputs(321)
    slots = _i([2, 0])
    ck, cv_, cg, cbeta, c_par = pend
    q, k, v, g, beta, v_par = ver
    for c_tree, v_tree, c_acc in [(True, True, _i([4, 3])), (False, False, _i([5, 2])), (False, True, _i([0, 1])),
                                  (True, False, _i([-1, 4]))]:
        p_ref = pool.clone()
        want = _separate(pend, ver, p_ref, slots, c_acc, c_tree, v_tree, _i([6, 3]))
        got = _emulate(emulator, tmp_path / f"{c_tree}{v_tree}", "tree" if v_tree else "chain", q=q, k=k, v=v, g=g,
                       beta=beta, pool=pool.clone(), slots=slots, parents=v_par if v_tree else None,
                       lengths=_i([6, 3]), c_k=ck, c_v=cv_, c_g=cg, c_beta=cbeta, c_accepted=c_acc,
                       c_parents=c_par if c_tree else None)
        _check_emulated(got, (want, p_ref), pool, f"commit in verify, commit tree {c_tree}, verify tree {v_tree}")


@GPU
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_commit_verify_matches_reference(dtype):
    pend, ver, pool = _round_inputs(331, dtype)
    slots = _i([3, 1], torch.int64)
    for c_tree, v_tree, c_acc in [(True, True, _i([4, 3])), (False, False, _i([5, 0])), (True, False, _i([-1, 2])),
                                  (False, True, _i([2, 5]))]:
        _compare("gdn_commit_verify", (*pend[:4], c_acc, pend[4] if c_tree else None, *ver[:5], pool, slots,
                                       ver[5] if v_tree else None, _i([6, 4])),
                 what=f"commit tree {c_tree}, verify tree {v_tree}")


@GPU
def test_commit_verify_equals_separate_on_cuda_and_graphs():
    pend, ver, pool0 = _round_inputs(341)
    pend, ver, pool0 = _cuda(*pend), _cuda(*ver), pool0.cuda()
    slots = torch.tensor([0, 2], device="cuda")
    c_acc = torch.tensor([4, 3], device="cuda")
    outs = []
    for on in ("1", "0"):
        p = pool0.clone()
        with knobs.override(QWEN38_COMMIT_IN_VERIFY=on):
            outs.append((q38.gdn_commit_verify(*pend[:4], c_acc, pend[4], *ver[:5], p, slots, ver[5]), p))
    qt.assert_bitwise_equal(outs[0][0], outs[1][0], "fused vs separate: output")
    qt.assert_bitwise_equal(outs[0][1], outs[1][1], "fused vs separate: state")
    pool = pool0.clone()

    def fn():
        pool.copy_(pool0)
        return OPS.gdn_commit_verify(*pend[:4], c_acc, pend[4], *ver[:5], pool, slots, ver[5]), pool.clone()

    qt.assert_graph_equals_eager(fn)
    qt.assert_deterministic(fn, times=3)


@pytest.mark.skipif(__import__("shutil").which("nvcc") is None, reason="needs nvcc")
def test_step_lab_compiles(tmp_path):
    """benchmarks/lab/gdn_step_lab.cu (the persistent, pipelined step against the product step
    kernel, bit for bit) still compiles against the kernel headers: it cannot drift from them."""
    import subprocess
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run(["nvcc", "-std=c++20", "-O1", "-arch=sm_90a", "--expt-relaxed-constexpr", "-c",
                        "-I", str(root / "csrc"), str(root / "benchmarks" / "lab" / "gdn_step_lab.cu"),
                        "-o", str(tmp_path / "lab.o")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
