"""The causal conv1d ops (torch.ops.qwen38.conv_step / conv_chain / conv_tree / conv_commit): the
CUDA kernels bit-identical to the references (qwen38_kernels/reference/gdn.py) and to stepping,
the state written only by step and commit, padding, graphs, determinism, opcheck and bad input. The
references themselves: tests/test_gdn_reference.py."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import qwen38_kernels as q
from qwen38_kernels import testing as qt
from qwen38_kernels.reference import gdn as ref

OPS = torch.ops.qwen38
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
C = ref.CONV_CHANNELS
ROWS = 6  # conv_state rows


@st.composite
def dfs_trees(draw, max_nodes):
    """Parents of a random tree in depth-first pre-order."""
    n = draw(st.integers(1, max_nodes))
    parents, path = [], [-1]
    for i in range(n):
        d = draw(st.integers(1, len(path)))
        parents.append(path[d - 1])
        del path[d:]
        path.append(i)
    return parents


def _inputs(batch, t, seed, c=C, dt=torch.bfloat16, wdt=None, device="cuda"):
    x = qt.randn_nonzero(batch, t, c, dtype=dt, seed=seed, scale=2.0, device=device)
    cs = qt.randn_nonzero(ROWS, c, 3, dtype=dt, seed=seed + 1, scale=2.0, device=device)
    w = qt.randn_nonzero(c, 4, dtype=wdt or dt, scale=0.5, seed=seed + 2, device=device)
    return x, cs, w


def _cpu(*ts):
    return tuple(t.cpu() if isinstance(t, torch.Tensor) else t for t in ts)


def _assert_same_nan_free(a, b, msg):
    """Bits equal except that a NaN equals any NaN (its payload and sign are the device's: CUDA gives
    its canonical NaN where the CPU keeps or negates the input's)."""
    na, nb = torch.isnan(a.cpu()), torch.isnan(b.cpu())
    assert torch.equal(na, nb), f"{msg}: NaN at different places"
    qt.assert_bitwise_equal(torch.where(na, 0, a.cpu()), torch.where(nb, 0, b.cpu()), msg)


def _pad_parents(trees, t):
    return torch.tensor([p + [-1] * (t - len(p)) for p in trees], dtype=torch.int64)


# ---- CUDA == reference, bit for bit ------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("dt,wdt", [(torch.bfloat16, None), (torch.bfloat16, torch.float32),
                                    (torch.float16, None), (torch.float16, torch.float32)])
def test_step_matches_the_reference(dt, wdt):
    x, cs, w = _inputs(4, 1, seed=1, dt=dt, wdt=wdt)
    slots = torch.tensor([3, -1, 0, 5], device="cuda", dtype=torch.int32)
    cs_ref = cs.cpu()
    want = ref.conv_step(x[:, 0].cpu(), cs_ref, w.cpu(), slots.cpu())
    y = OPS.conv_step(x[:, 0], cs, w, slots)
    qt.assert_bitwise_equal(y.cpu(), want, "conv_step output")
    qt.assert_bitwise_equal(cs.cpu(), cs_ref, "conv_step state")
    assert not y[1].any()


@pytest.mark.gpu
def test_step_sequence_and_special_values():
    """64 successive steps (the state shifts), with huge sums (silu of +-inf / overflow), zeros and
    NaN in the inputs: every output equals the reference's (a NaN any NaN) and the final state the
    reference's bit for bit (data movement keeps NaN payloads)."""
    x, cs, w = _inputs(2, 64, seed=2)
    x[0, 3, :8] = float("nan")
    x[1, 5, 8:16] = 3e38
    x[1, 6, 16:24] = -3e38
    x[0, 7, 24:32] = 0.0
    slots = torch.tensor([1, 4], device="cuda")
    cs_ref = cs.cpu()
    for t in range(64):
        want = ref.conv_step(x[:, t].cpu(), cs_ref, w.cpu(), slots.cpu())
        _assert_same_nan_free(OPS.conv_step(x[:, t], cs, w, slots), want, f"step {t}")
    qt.assert_bitwise_equal(cs.cpu(), cs_ref, "state after 64 steps (raw inputs moved, NaN bits kept)")


@pytest.mark.gpu
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16])
def test_chain_and_commit_match_the_reference(dt):
    x, cs, w = _inputs(3, 16, seed=3, dt=dt)
    slots = torch.tensor([4, -1, 1], device="cuda")
    lengths = torch.tensor([16, 2, 5], device="cuda", dtype=torch.int32)
    before = cs.clone()
    want = ref.conv_chain(*_cpu(x, cs, w, slots, lengths))
    y = OPS.conv_chain(x, cs, w, slots, lengths)
    qt.assert_bitwise_equal(y.cpu(), want, "conv_chain output")
    qt.assert_bitwise_equal(cs, before, "conv_chain wrote the state")
    accepted = torch.tensor([11, 2, 0], device="cuda")
    cs_ref = cs.cpu()
    ref.conv_commit(*_cpu(x, cs_ref, slots, accepted))
    OPS.conv_commit(x, cs, slots, accepted)
    qt.assert_bitwise_equal(cs.cpu(), cs_ref, "conv_commit (chain) state")


@pytest.mark.gpu
@settings(deadline=None)
@given(trees=st.lists(dfs_trees(max_nodes=64), min_size=1, max_size=4), data=st.data())
def test_tree_and_commit_match_the_reference_fuzz(trees, data):
    batch, t = len(trees), max(len(p) for p in trees)
    x, cs, w = _inputs(batch, t, seed=7 + t, c=512)
    slot_list = data.draw(st.permutations(list(range(ROWS))))[:batch]
    pad = data.draw(st.integers(0, batch - 1))
    slot_list[pad] = -1 if data.draw(st.booleans()) else slot_list[pad]
    slots = torch.tensor(slot_list, device="cuda")
    parents = _pad_parents(trees, t).cuda()
    lengths = torch.tensor([len(p) for p in trees], device="cuda")
    before = cs.clone()
    want = ref.conv_tree(*_cpu(x, cs, w, slots, parents, lengths))
    y = OPS.conv_tree(x, cs, w, slots, parents, lengths)
    qt.assert_bitwise_equal(y.cpu(), want, f"conv_tree output (parents {trees})")
    qt.assert_bitwise_equal(cs, before, "conv_tree wrote the state")
    accepted = torch.tensor([data.draw(st.integers(-1, len(p) - 1)) for p in trees], device="cuda")
    cs_ref = cs.cpu()
    ref.conv_commit(*_cpu(x, cs_ref, slots, accepted, parents))
    OPS.conv_commit(x, cs, slots, accepted, parents)
    qt.assert_bitwise_equal(cs.cpu(), cs_ref, f"conv_commit (tree) state, accepted {accepted.tolist()}")


@pytest.mark.gpu
def test_chain_row_equals_successive_steps_on_the_gpu():
    """Verify == decode on the device itself: chain row t == the (t+1)-th conv_step; the commit of n
    tokens == n steps."""
    x, cs, w = _inputs(2, 16, seed=11)
    slots = torch.tensor([2, 0], device="cuda")
    y = OPS.conv_chain(x, cs, w, slots)
    stepped = cs.clone()
    for t in range(16):
        qt.assert_bitwise_equal(OPS.conv_step(x[:, t], stepped, w, slots), y[:, t], f"token {t}")
        if t == 8:
            committed = cs.clone()
            OPS.conv_commit(x, committed, slots, torch.tensor([9, 9], device="cuda"))
            qt.assert_bitwise_equal(committed, stepped, "commit of 9 tokens vs 9 steps")


@pytest.mark.gpu
def test_strided_x_and_large_batch():
    x, cs, w = _inputs(40, 4, seed=12)
    xs = torch.cat([x, x], dim=-1)[..., :C]  # last dim contiguous, other strides not
    cs = qt.randn_nonzero(64, C, 3, seed=13, device="cuda")
    slots = torch.randperm(64)[:40].cuda()
    want = ref.conv_chain(*_cpu(xs, cs, w, slots))
    qt.assert_bitwise_equal(OPS.conv_chain(xs, cs, w, slots).cpu(), want, "strided x, 40 sequences")


# ---- CUDA: guards without the host check, graphs, determinism -----------------------------------------

@pytest.mark.gpu
def test_without_host_checks_bad_indices_write_nothing():
    x, cs, w = _inputs(3, 4, seed=14)
    before = cs.clone()
    with q.knobs.override(QWEN38_CONV_CHECK_INDICES="0"):
        y = OPS.conv_step(x[:, 0], cs, w, torch.tensor([ROWS, -5, 2], device="cuda"))
        assert not y[:2].any()
        qt.assert_bitwise_equal(cs[:2], before[:2], "rows of out-of-range slots")
        cs.copy_(before)
        OPS.conv_step(x[:, 0], cs, w, torch.tensor([1, 1, 3], device="cuda"))  # the 2nd use of 1 is skipped
        want = before.cpu()
        ref.conv_step(x[:, 0][[0, 2]].cpu(), want, w.cpu(), torch.tensor([1, 3]))
        qt.assert_bitwise_equal(cs.cpu(), want, "duplicate slot: first sequence only")
        y = OPS.conv_tree(x, before, w, torch.tensor([0, 1, 2], device="cuda"),
                          torch.tensor([[-1, 0, 2, 2], [-1, 5, 0, 0], [-1, 0, 1, 2]], device="cuda"),
                          torch.tensor([4, 4, 9], device="cuda"))
        assert not y[0, 2:].any() and not y[1, 1].any() and not y[2].any()
        assert y[0, :2].all() and y[1, 2:].all()


@pytest.mark.gpu
def test_graph_equals_eager_and_deterministic():
    x, cs, w = _inputs(4, 16, seed=15)
    slots = torch.tensor([0, 1, -1, 3], device="cuda")
    parents = torch.tensor([[-1] + list(range(15))] * 4, device="cuda")
    for fn in (lambda t: OPS.conv_chain(t, cs, w, slots), lambda t: OPS.conv_tree(t, cs, w, slots, parents)):
        qt.assert_graph_equals_eager(fn, x)
        qt.assert_deterministic(fn, x, times=3)
    # a captured step: replaying the graph steps the state again, like an eager call
    state_e, state_g = cs.clone(), cs.clone()
    ye = OPS.conv_step(x[:, 0], state_e, w, slots)
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        OPS.conv_step(x[:, 0], state_g.clone(), w, slots)  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        yg = OPS.conv_step(x[:, 0], state_g, w, slots)
    g.replay()
    torch.cuda.synchronize()
    qt.assert_bitwise_equal(yg, ye, "graphed conv_step output")
    qt.assert_bitwise_equal(state_g, state_e, "graphed conv_step state")


# ---- every device: opcheck, bad input ------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    x, cs, w = _inputs(2, 3, seed=16, c=64, device=device)
    slots = torch.tensor([2, 0], device=device)
    parents = torch.tensor([[-1, 0, 0], [-1, 0, 1]], device=device)
    qt.run_opcheck(OPS.conv_step.default, (x[:, 0].contiguous(), cs.clone(), w, slots))
    qt.run_opcheck(OPS.conv_chain.default, (x, cs, w, slots, None))
    qt.run_opcheck(OPS.conv_tree.default, (x, cs, w, slots, parents, torch.tensor([3, 2], device=device)))
    qt.run_opcheck(OPS.conv_commit.default, (x, cs.clone(), slots, torch.tensor([1, -1], device=device), parents))


@pytest.mark.parametrize("device", DEVICES)
def test_bad_input_names_the_argument_and_writes_nothing(device):
    x, cs, w = _inputs(2, 3, seed=17, c=64, device=device)
    slots = torch.tensor([2, 0], device=device)
    parents = torch.tensor([[-1, 0, 0], [-1, 0, 1]], device=device)
    before = cs.clone()
    step = lambda **kw: OPS.conv_step(**{**dict(x=x[:, 0], conv_state=cs, weight=w, slots=slots), **kw})  # noqa: E731
    tree = lambda **kw: OPS.conv_tree(**{**dict(x=x, conv_state=cs, weight=w, slots=slots, parents=parents),  # noqa: E731
                                         **kw})
    chain = lambda **kw: OPS.conv_chain(**{**dict(x=x, conv_state=cs, weight=w, slots=slots), **kw})  # noqa: E731
    commit = lambda **kw: OPS.conv_commit(**{**dict(x=x, conv_state=cs, slots=slots,  # noqa: E731
                                                    accepted=torch.tensor([1, 2], device=device)), **kw})
    cases = [
        (step, dict(x=x[:, 0].float()), "conv_step: x must be bfloat16 or float16"),
        (step, dict(x=x), r"conv_step: x must have shape \[B, C\]"),
        (step, dict(conv_state=cs.half()), "conv_step: conv_state must have x's dtype"),
        (step, dict(conv_state=cs[:, :32]), "conv_step: conv_state must have shape"),
        (step, dict(weight=w[:, :3]), "conv_step: weight must have shape"),
        (step, dict(weight=w.double()), "conv_step: weight must be"),
        (step, dict(slots=torch.tensor([ROWS, 0], device=device)), r"conv_step: slots\[0\] = 6 is out of range"),
        (step, dict(slots=torch.tensor([1, 1], device=device)), "conv_step: slots must be distinct"),
        (step, dict(slots=slots.float()), "conv_step: slots must be int32 or int64"),
        (chain, dict(lengths=torch.tensor([4, 0], device=device)), r"conv_chain: lengths\[0\] = 4 is out of range"),
        (chain, dict(x=qt.randn_nonzero(2, 17, 64, device=device)), "conv_chain: x has 17 tokens"),
        (tree, dict(parents=torch.tensor([[0, 0, 0], [-1, 0, 1]], device=device)),
         r"conv_tree: parents\[0, 0\] = 0: a parent must be -1 or an earlier node"),
        (tree, dict(parents=torch.tensor([[-1, 0, 0], [-1, -1, 0]], device=device)),
         r"conv_tree: parents\[1, 2\] = 0 is not on the current root-to-node path"),
        (tree, dict(parents=parents[:, :2]), "conv_tree: parents must have shape"),
        (commit, dict(accepted=torch.tensor([1, 7], device=device)), r"conv_commit: accepted\[1\] = 7 is out of range"),
        (commit, dict(accepted=torch.tensor([1, 3], device=device), parents=parents),
         r"conv_commit: accepted\[1\] = 3 is out of range"),
        (commit, dict(slots=torch.tensor([0, 0], device=device)), "conv_commit: slots must be distinct"),
    ]
    for fn, kw, msg in cases:
        with pytest.raises(ValueError, match=msg):
            fn(**kw)
        qt.assert_bitwise_equal(cs, before, f"state written by a failing call ({msg})")
