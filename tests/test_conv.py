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
@given(trees=st.lists(qt.dfs_trees(max_nodes=64), min_size=1, max_size=4), data=st.data())
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
@pytest.mark.parametrize("c,offset", [(C, 0), (C, 1), (100, 0), (200, 3)])
def test_batch_one_matches_the_reference(c, offset):
    """B = 1, where the kernels prefetch their state entries into L2 before the previous kernel ends
    (at the slot read early, read again after the wait): every op equals the reference, with the
    slot changing from call to call, for a state starting 16-byte aligned or not (offset elements)
    and rows that do not end on 16 bytes (100 / 200 channels: the prefetch is cut or skipped)."""
    x, cs, w = _inputs(1, 16, seed=41 + c + offset, c=c)
    cs = qt.offset_copy(cs, offset)
    cs_ref = cs.cpu()
    for t, sl in enumerate([3, 0, 0, 5, -1, 2]):
        slots = torch.tensor([sl], device="cuda")
        want = ref.conv_step(x[:, t].cpu(), cs_ref, w.cpu(), slots.cpu())
        qt.assert_bitwise_equal(OPS.conv_step(x[:, t], cs, w, slots).cpu(), want, f"step {t} at slot {sl}")
    qt.assert_bitwise_equal(cs.cpu(), cs_ref, "state after the steps")
    slots = torch.tensor([4], device="cuda")
    lengths = torch.tensor([13], device="cuda")
    qt.assert_bitwise_equal(OPS.conv_chain(x, cs, w, slots, lengths).cpu(),
                            ref.conv_chain(*_cpu(x, cs, w, slots, lengths)), "conv_chain")
    parents = _pad_parents([[-1, 0, 1, 1, 0, 4, 5, 5]], 16).cuda()
    lengths = torch.tensor([8], device="cuda")
    qt.assert_bitwise_equal(OPS.conv_tree(x, cs, w, slots, parents, lengths).cpu(),
                            ref.conv_tree(*_cpu(x, cs, w, slots, parents, lengths)), "conv_tree")
    for acc, par in ((torch.tensor([6], device="cuda"), parents), (torch.tensor([11], device="cuda"), None)):
        ref.conv_commit(*_cpu(x, cs_ref, slots, acc, par))
        OPS.conv_commit(x, cs, slots, acc, par)
        qt.assert_bitwise_equal(cs.cpu(), cs_ref, f"conv_commit ({'tree' if par is not None else 'chain'})")


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


# ---- the kernel source on the host (CPU CI) ---------------------------------------------------------
# tests/native/conv_host_emulation.cpp compiles csrc/conv/conv_kernel.cuh with the host compiler and
# runs every thread of the launch's grid; it checks the kernel's indexing, windows, walks and guards
# against the reference without a GPU (IEEE float without FMA, the host's exp).

EMU_C = 300  # two blocks of 256 channels, the second partly past the last channel


@pytest.fixture(scope="session")
def conv_emulator(host_emulator):
    return host_emulator("conv_host_emulation")


def _emulate(exe, tmp_path, mode, x, cs, w=None, slots=None, lengths=None, parents=None, accepted=None):
    """Run the kernel source on the host; returns (y or None, conv_state after)."""
    import subprocess

    import numpy as np
    tmp_path.mkdir(parents=True, exist_ok=True)
    x = x.contiguous()
    step = mode == "step"
    b = x.shape[0]
    t = 1 if step else x.shape[1]
    c = x.shape[-1]
    prm = dict(mode=mode, x_sb=t * c, x_st=0 if step else c, f16=int(x.dtype == torch.float16),
               state_rows=cs.shape[0], weight_f32=int(w is not None and w.dtype == torch.float32),
               slots64=int(slots.dtype == torch.int64), batch=b, tokens=t, channels=c,
               has_lengths=int(lengths is not None), has_parents=int(parents is not None),
               has_accepted=int(accepted is not None))

    def put(name, tensor):
        tensor = tensor.contiguous().cpu()
        if tensor.dtype in (torch.bfloat16, torch.float16):
            tensor = tensor.view(torch.int16)
        tensor.numpy().tofile(tmp_path / f"{name}.bin")

    put("x", x)
    put("state", cs)
    put("weight", w if w is not None else torch.zeros(c, 4, dtype=x.dtype))
    put("slots", slots)
    for name, ix in (("lengths", lengths), ("parents", parents), ("accepted", accepted)):
        if ix is not None:
            put(name, ix)
            prm[f"{name}64"] = int(ix.dtype == torch.int64)
    if parents is not None:
        prm["parents_sb"] = parents.shape[1]
    (tmp_path / "params.txt").write_text("".join(f"{k} {v}\n" for k, v in prm.items()))
    subprocess.run([str(exe), str(tmp_path)], check=True, capture_output=True)

    def get(name, shape):
        return torch.from_numpy(np.fromfile(tmp_path / f"{name}.bin", dtype=np.int16)).view(x.dtype).view(shape)

    y = None if mode == "commit" else get("y", (b, c) if step else (b, t, c))
    return y, get("state_out", tuple(cs.shape))


@pytest.mark.parametrize("dt,wdt", [(torch.bfloat16, None), (torch.bfloat16, torch.float32),
                                    (torch.float16, None), (torch.float16, torch.float32)])
@pytest.mark.parametrize("t", [16, 5])
def test_host_emulation_chain_step_and_commit(conv_emulator, tmp_path, dt, wdt, t):
    x, cs, w = _inputs(4, t, seed=41 + t, c=EMU_C, dt=dt, wdt=wdt, device="cpu")
    slots = torch.tensor([4, -1, 1, 5], dtype=torch.int32)
    lengths = torch.tensor([t, 2, 0, t - 1])
    y, after = _emulate(conv_emulator, tmp_path / "chain", "chain", x, cs, w, slots, lengths)
    qt.assert_bitwise_equal(y, ref.conv_chain(x, cs, w, slots, lengths), "emulated conv_chain output")
    qt.assert_bitwise_equal(after, cs, "emulated conv_chain wrote the state")
    y, after = _emulate(conv_emulator, tmp_path / "step", "step", x[:, 1], cs, w, slots)
    want = cs.clone()
    qt.assert_bitwise_equal(y, ref.conv_step(x[:, 1], want, w, slots), "emulated conv_step output")
    qt.assert_bitwise_equal(after, want, "emulated conv_step state")
    accepted = torch.tensor([t, 1, 0, 2])
    _, after = _emulate(conv_emulator, tmp_path / "commit", "commit", x, cs, None, slots, accepted=accepted)
    want = cs.clone()
    ref.conv_commit(x, want, slots, accepted)
    qt.assert_bitwise_equal(after, want, "emulated conv_commit (chain) state")


@settings(deadline=None, max_examples=10)
@given(trees=st.lists(qt.dfs_trees(max_nodes=64), min_size=1, max_size=3), data=st.data())
def test_host_emulation_tree_and_commit_fuzz(conv_emulator, tmp_path_factory, trees, data):
    batch, t = len(trees), max(len(p) for p in trees)
    x, cs, w = _inputs(batch, t, seed=43 + t, c=EMU_C, device="cpu")
    slot_list = data.draw(st.permutations(list(range(ROWS))))[:batch]
    pad = data.draw(st.integers(0, batch - 1))
    slot_list[pad] = -1 if data.draw(st.booleans()) else slot_list[pad]
    slots = torch.tensor(slot_list)
    parents = _pad_parents(trees, t).to(torch.int32 if data.draw(st.booleans()) else torch.int64)
    lengths = torch.tensor([len(p) for p in trees])
    tmp = tmp_path_factory.mktemp("tree")
    y, after = _emulate(conv_emulator, tmp / "tree", "tree", x, cs, w, slots, lengths, parents)
    qt.assert_bitwise_equal(y, ref.conv_tree(x, cs, w, slots, parents, lengths), f"emulated conv_tree (parents {trees})")
    qt.assert_bitwise_equal(after, cs, "emulated conv_tree wrote the state")
    accepted = torch.tensor([data.draw(st.integers(-1, len(p) - 1)) for p in trees])
    _, after = _emulate(conv_emulator, tmp / "commit", "commit", x, cs, None, slots, accepted=accepted, parents=parents)
    want = cs.clone()
    ref.conv_commit(x, want, slots, accepted, parents)
    qt.assert_bitwise_equal(after, want, f"emulated conv_commit (tree) state, accepted {accepted.tolist()}")


def _walk_window(x_b, srow, par, i):
    """The window (3 previous raw inputs, [C, 3]) the kernel gathers for node i, or None where its walk
    meets a parent that is neither -1 nor an earlier node within 3 steps (the node's output is zeros)."""
    cur, prev, st_i, cols = int(par[i]), i, 2, [None] * 3
    for j in (2, 1, 0):
        if cur >= 0:
            if cur >= prev:
                return None
            cols[j], prev, cur = x_b[cur], cur, int(par[cur])
        elif cur == -1:
            cols[j], st_i = srow[:, st_i], st_i - 1
        else:
            return None
    return torch.stack(cols, dim=1)


def test_host_emulation_tree_guards_on_bad_parents(conv_emulator, tmp_path):
    """Parents the host check would refuse (later nodes, below -1, huge) and lengths out of range:
    the kernel zeroes exactly the nodes whose walk meets a bad parent within the window, and the
    sequences of a bad length or slot, and computes every other node as conv_step of its window."""
    t = 8
    x, cs, w = _inputs(4, t, seed=47, c=EMU_C, device="cpu")
    slots = torch.tensor([0, 1, 2, 7])  # 7: out of range
    bad = [[-1, 0, 5, 2, 3, 4, 5, 6],           # node 2 points forward: 2 and its descendants within 3
           [-1, -7, 0, 3, 3, -1, 5, 2 ** 40],   # node 1 below -1; node 3 its own parent; node 7 huge
           [-1, 0, 1, 2, 3, 4, 5, 6],           # fine, but the length is 9 > T
           [-1, 0, 1, 2, 3, 4, 5, 6]]           # fine, but the slot is out of range
    parents = torch.tensor(bad, dtype=torch.int64)
    lengths = torch.tensor([8, 8, 9, 8])
    y, after = _emulate(conv_emulator, tmp_path, "tree", x, cs, w, slots, lengths, parents)
    qt.assert_bitwise_equal(after, cs, "the tree verify wrote the state")
    assert not y[2].any() and not y[3].any(), "a bad length or slot zeroes the whole sequence"
    for b in (0, 1):
        for i in range(t):
            win = _walk_window(x[b], cs[int(slots[b])], bad[b], i)
            if win is None:
                assert not y[b, i].any(), f"sequence {b} node {i}: a bad parent in its window, not zeroed"
                continue
            state = win.unsqueeze(0).clone()
            want = ref.conv_step(x[b, i].unsqueeze(0), state, w, torch.tensor([0]))[0]
            qt.assert_bitwise_equal(y[b, i], want, f"sequence {b} node {i}")
    assert not y[0, 2].any() and y[0, 1].all() and not y[1, 1].any() and not y[1, 3].any() and not y[1, 7].any()


# ---- the silu: fp32 where it gives the float64 contract's bits ----------------------------------------

def test_silu_fp32_path_gives_the_float64_bits(host_emulator):
    """csrc/conv/silu_exact.cuh on the host (the device runs the same IEEE fp32 operations): every
    251st fp32 bit pattern (17 M inputs, all signs and exponents, NaN, infinities, zeros) gives the
    bits of the float64 formula, and the fp32 path serves the usual inputs. (The whole fp32 range,
    all 2^32 inputs, was checked once with ./silu_check 1: no difference.)"""
    import re
    import subprocess
    out = subprocess.run([str(host_emulator("silu_check")), "251"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    n, fast, bad = (int(v) for v in re.search(r"(\d+) inputs, (\d+) on the fp32 path .* (\d+) differences",
                                              out.stdout).groups())
    assert bad == 0 and n == -(-2 ** 32 // 251)
    assert fast > 0.25 * n  # the magnitudes 2^-60 .. 80 (a quarter of the bit patterns) stay in fp32


def test_silu_table_matches_its_generator():
    """The constants of silu_exact.cuh are those scripts/gen_exp2_table.py computes in exact
    arithmetic (ln2/32 in three floats, 32/ln2, 2^(j/32) as float pairs)."""
    import importlib.util
    import re
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location("gen_exp2_table", root / "scripts" / "gen_exp2_table.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    k = gen.constants()
    src = (root / "csrc" / "conv" / "silu_exact.cuh").read_text()
    pairs = [(float.fromhex(a.rstrip("f")), float.fromhex(b.rstrip("f")) if b != "0.0f" else 0.0)
             for a, b in re.findall(r"X\((\S+), (\S+)\)", src)]
    assert pairs == [(float(h), float(lo)) for h, lo in k["table"]]
    for name in ("C1", "C2", "C3"):
        assert float.fromhex(re.search(rf"k{name} = (\S+?)f[,;]", src).group(1)) == k[name], name
    assert float.fromhex(re.search(r"kInvLn2x32 = (\S+?)f;", src).group(1)) == k["INV"]


@pytest.mark.gpu
def test_silu_f64_knob_keeps_bits():
    """QWEN38_CONV_SILU_F64=1 (silu always in float64), =0 (fp32 where that gives the same bits) and
    the default (auto: the faster of the two on this GPU) agree bit for bit on every op, for sums spread over magnitudes 2^-12 .. 2^7 of both signs
    (NaN compares as NaN)."""
    b, t = 3, 16
    x, cs, w = _inputs(b, t, seed=61)
    mag = torch.exp2(torch.empty(b, t, C, device="cuda").uniform_(-12, 7))
    x = (x.float().sign() * mag).to(x.dtype)
    w = torch.ones_like(w) * 0.25  # the sum is the window's mean: the spread reaches silu
    slots = torch.tensor([0, 2, 4], device="cuda")
    parents = _pad_parents([[-1, 0, 1, 1, 0] + list(range(4, 15))] * b, t).cuda()
    calls = {
        "step": lambda: OPS.conv_step(x[:, 0], cs.clone(), w, slots),
        "chain": lambda: OPS.conv_chain(x, cs, w, slots),
        "tree": lambda: OPS.conv_tree(x, cs, w, slots, parents),
    }
    for name, fn in calls.items():
        with q.knobs.override(QWEN38_CONV_SILU_F64="1"):
            want = fn()
        with q.knobs.override(QWEN38_CONV_SILU_F64="0"):
            _assert_same_nan_free(fn(), want, f"{name}: fp32 silu vs float64 silu")
        _assert_same_nan_free(fn(), want, f"{name}: the default (auto) vs float64 silu")
