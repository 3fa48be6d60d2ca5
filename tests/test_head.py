"""The output head (torch.ops.qwen38.head_logits / head_argmax): both CUDA kernels (QWEN38_HEAD_KERNEL)
against the
reference's float64 bound, row invariance at every M (1..32 and chunked beyond), the greedy epilogue
== argmax over head_logits bit for bit (ties, signed zeros, NaN, inf), graphs, determinism, opcheck
and bad input. The reference itself: tests/test_fp8_reference.py."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import qwen38_kernels as q
from qwen38_kernels import testing as qt
from qwen38_kernels.reference import fp8 as ref

OPS = torch.ops.qwen38
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
VOCAB = 248320


@pytest.fixture(params=["tiles", "ring"], autouse=True)
def head_kernel(request):
    """Every test runs with both CUDA kernels (QWEN38_HEAD_KERNEL): each must hold every property."""
    with q.knobs.override(QWEN38_HEAD_KERNEL=request.param):
        yield request.param


def _case(m, v, k=5120, dt=torch.bfloat16, seed=0, device="cuda"):
    x = qt.randn_nonzero(m, k, dtype=dt, seed=seed, device=device)
    w = qt.randn_nonzero(v, k, dtype=dt, seed=seed + 1, scale=0.02, device=device)
    return x, w


def _within_bound(y, x, w, what):
    y64, err = ref.head_logits_f64_bound(x.cpu(), w.cpu())
    over = (y.cpu().double() - y64).abs() - err
    bad = int((over > 0).sum())
    assert bad == 0, f"{what}: {bad} logits outside the fp32 accumulation bound, worst by {float(over.max()):.3g}"


# ---- CUDA: accuracy, row invariance ---------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 2, 8, 16, 17, 32])
@pytest.mark.parametrize("v,k", [(4096, 5120), (1000, 5120), (300, 272), (37, 16), (8, 48)])
def test_logits_within_the_float64_bound(m, v, k):
    x, w = _case(m, v, k, seed=m)
    y = OPS.head_logits(x, w)
    assert y.shape == (m, v) and y.dtype == torch.float32 and y.is_contiguous()
    assert torch.isfinite(y).all(), "unwritten (poisoned) or non-finite logits"
    _within_bound(y, x, w, f"M={m} V={v} K={k}")


@pytest.mark.gpu
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16])
def test_full_vocabulary(dt):
    """The model's head: V = 248320, K = 5120, 1 and 32 rows; checked against float64 on a column
    sample (the float64 product of the whole head is slow on the CPU)."""
    x, w = _case(32, VOCAB, dt=dt, seed=11)
    y32 = OPS.head_logits(x, w)
    y1 = OPS.head_logits(x[5:6].clone(), w)
    qt.assert_bitwise_equal(y32[5:6], y1, "row 5 of 32 vs its 1-row call")
    cols = torch.cat([torch.arange(0, 64), torch.randint(0, VOCAB, (512,), generator=torch.Generator().manual_seed(1)),
                      torch.arange(VOCAB - 64, VOCAB)]).cuda()
    _within_bound(y32[:, cols], x, w[cols], "sampled columns")
    idx, val = OPS.head_argmax(x, w)
    assert torch.equal(idx, y32.argmax(-1))
    qt.assert_bitwise_equal(val, y32.gather(-1, idx[:, None])[:, 0], "winning logits")


@pytest.mark.gpu
@pytest.mark.parametrize("v,k", [(4096, 5120), (300, 272)])
def test_row_invariant_at_every_m(v, k):
    x, w = _case(32, v, k, seed=3)
    qt.assert_row_invariant(lambda t: OPS.head_logits(t, w), x)
    qt.assert_row_invariant(lambda t: OPS.head_argmax(t, w), x)


@pytest.mark.gpu
def test_more_than_32_rows_keep_the_1_row_arithmetic():
    x, w = _case(70, 1000, seed=4)
    y = OPS.head_logits(x, w)
    idx, val = OPS.head_argmax(x, w)
    for r in (0, 31, 32, 33, 64, 69):
        qt.assert_bitwise_equal(y[r:r + 1], OPS.head_logits(x[r:r + 1].clone(), w), f"row {r} of 70")
    assert torch.equal(idx, y.argmax(-1))
    qt.assert_bitwise_equal(val, y.gather(-1, idx[:, None])[:, 0], "winning logits, 70 rows")
    x3 = x[:60].view(3, 20, -1)
    qt.assert_bitwise_equal(OPS.head_logits(x3, w), y[:60].view(3, 20, -1), "leading dims")


@pytest.mark.gpu
@given(m=st.integers(1, 32), data=st.data(),
       shape=st.sampled_from([(4096, 5120), (1000, 5120), (300, 272), (33, 16), (129, 5120)]))
def test_row_invariance_fuzz(m, data, shape):
    v, k = shape
    row = data.draw(st.integers(0, m - 1), label="row")
    seed = data.draw(st.integers(0, 2 ** 16), label="seed")
    x, w = _case(m, v, k, seed=seed)
    one = x[row:row + 1].clone()
    qt.assert_bitwise_equal(OPS.head_logits(x, w)[row:row + 1], OPS.head_logits(one, w), f"row {row} of {m}")
    i_all, v_all = OPS.head_argmax(x, w)
    i_one, v_one = OPS.head_argmax(one, w)
    qt.assert_bitwise_equal(i_all[row:row + 1], i_one, f"argmax row {row} of {m}")
    qt.assert_bitwise_equal(v_all[row:row + 1], v_one, f"argmax logit row {row} of {m}")


@pytest.mark.gpu
def test_a_nan_stays_in_its_row():
    x, w = _case(8, 500, 256, seed=5)
    clean = OPS.head_logits(x, w)
    x[3, 17] = float("nan")
    x[5, 0] = float("inf")
    y = OPS.head_logits(x, w)
    for r in (0, 1, 2, 4, 6, 7):
        qt.assert_bitwise_equal(y[r], clean[r], f"row {r} next to a NaN/inf row")
    assert torch.isnan(y[3]).all()


# ---- CUDA: the greedy epilogue ----------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("m,v,k", [(1, 4096, 5120), (16, 1000, 5120), (32, 777, 272), (3, 1, 16)])
def test_argmax_is_argmax_of_head_logits(m, v, k):
    x, w = _case(m, v, k, seed=7)
    logits = OPS.head_logits(x, w)
    idx, val = OPS.head_argmax(x, w)
    assert idx.dtype == torch.int64 and val.dtype == torch.float32 and idx.shape == val.shape == (m,)
    assert torch.equal(idx, logits.argmax(-1))
    qt.assert_bitwise_equal(val, logits.gather(-1, idx[:, None])[:, 0], "winning logits")


@pytest.mark.gpu
@pytest.mark.parametrize("v", [64, 5000])
def test_argmax_ties_go_to_the_lowest_index(v):
    """Integer data: the logits are exact whatever the order, so the CUDA logits equal the reference's
    bit for bit; each row's winner copied to three columns (far apart: different tasks and blocks);
    a row of signed zeros; a row holding a NaN."""
    m, k = 8, 256
    g = torch.Generator().manual_seed(v)
    x = torch.randint(-4, 5, (m, k), generator=g).to(torch.bfloat16)
    w = torch.randint(-1, 2, (v, k), generator=g).to(torch.bfloat16)
    for r in range(m - 2):
        pos = [0, v // 2, v - 1] if r == 0 else sorted(torch.randperm(v, generator=g)[:3].tolist())
        for p in pos:
            w[p] = torch.sign(x[r].float()).to(torch.bfloat16)
    x[m - 2] = 0
    x[m - 1, 5] = float("nan")
    want_i, want_v = ref.head_argmax(x, w)
    xc, wc = x.cuda(), w.cuda()
    def canon(t):  # NaN payloads differ between the CPU and the GPU: same NaN positions, one NaN
        return torch.where(torch.isnan(t), torch.full_like(t, float("nan")), t)

    logits = OPS.head_logits(xc, wc).cpu()
    want_logits = ref.head_logits(x, w)
    assert torch.equal(torch.isnan(logits), torch.isnan(want_logits))
    qt.assert_bitwise_equal(canon(logits), canon(want_logits), "exact integer logits")
    idx, val = OPS.head_argmax(xc, wc)
    qt.assert_bitwise_equal(idx.cpu(), want_i, "winning indices vs the reference")
    qt.assert_bitwise_equal(canon(val.cpu()), canon(want_v), "winning logits vs the reference")
    assert idx[m - 2].item() == 0 and idx[m - 1].item() == 0 and math.isnan(val[m - 1].item())


@pytest.mark.gpu
def test_argmax_signed_zeros_huge_values_and_inf():
    k = 16
    x = torch.zeros(2, k, dtype=torch.bfloat16)
    x[0, 0], x[1, 0] = -1.0, 1.0
    w = torch.zeros(4, k, dtype=torch.bfloat16)
    w[0, 0], w[2, 0], w[3, 0] = 2.0 ** 127, -0.0, 2.0 ** 127
    idx, val = OPS.head_argmax(x.cuda(), w.cuda())
    assert idx.tolist() == [1, 0] and val.tolist() == [0.0, 2.0 ** 127]
    x2 = torch.full((1, k), 1.0, dtype=torch.bfloat16)
    w2 = torch.zeros(5, k, dtype=torch.bfloat16)
    w2[0], w2[2], w2[4] = -1.0, 2.0 ** 127, 2.0 ** 127
    idx, val = OPS.head_argmax(x2.cuda(), w2.cuda())
    assert idx.tolist() == [2] and val.item() == float("inf")


# ---- CUDA: graphs, determinism, wrappers --------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 32])
def test_graph_equals_eager_and_deterministic(m):
    x, w = _case(m, 4096, seed=8)
    qt.assert_graph_equals_eager(lambda t: OPS.head_logits(t, w), x)
    qt.assert_deterministic(lambda t: OPS.head_logits(t, w), x, times=3)
    qt.assert_graph_equals_eager(lambda t: OPS.head_argmax(t, w), x)
    qt.assert_deterministic(lambda t: OPS.head_argmax(t, w), x, times=3)


@pytest.mark.gpu
def test_the_kernels_differ_and_a_bad_kernel_knob_is_named(head_kernel):
    """The two kernels sum in different orders (so the fixture does test both), each within the
    bound; an unknown QWEN38_HEAD_KERNEL is refused by name."""
    if head_kernel != "tiles":
        pytest.skip("once")
    x, w = _case(4, 4096, seed=13)
    yt = OPS.head_logits(x, w)
    with q.knobs.override(QWEN38_HEAD_KERNEL="ring"):
        yr = OPS.head_logits(x, w)
    assert not torch.equal(yt.view(torch.int32), yr.view(torch.int32)), "tiles and ring gave the same bits"
    _within_bound(yt, x, w, "tiles")
    _within_bound(yr, x, w, "ring")
    for op in (OPS.head_logits, OPS.head_argmax):
        with q.knobs.override(QWEN38_HEAD_KERNEL="fast"):
            with pytest.raises(ValueError, match=r"QWEN38_HEAD_KERNEL must be tiles or ring, got 'fast'"):
                op(x, w)


@pytest.mark.gpu
def test_pdl_off_gives_the_same_bits():
    x, w = _case(9, 1000, seed=9)
    y = OPS.head_logits(x, w)
    with q.knobs.override(QWEN38_PDL="0"):
        qt.assert_bitwise_equal(OPS.head_logits(x, w), y, "PDL off")


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 17, 32])
@pytest.mark.parametrize("v", [1000, 40000])
def test_tiles_stages_give_the_same_bits(m, v, head_kernel):
    """QWEN38_HEAD_STAGES (the 128-column tiles' cp.async stages: 3 at three CTAs an SM, 4 at two; auto
    picks by the grid, V = 1000 and 40000 leaving under and over two tiles an SM) changes no bit of
    the logits nor of the greedy winner; a bad value is refused by name."""
    if head_kernel != "tiles":
        pytest.skip("a knob of the tiles kernel")
    x, w = _case(m, v, seed=14)
    y = OPS.head_logits(x, w)
    idx, val = OPS.head_argmax(x, w)
    for stages in ("3", "4", "auto"):
        with q.knobs.override(QWEN38_HEAD_COLS="128", QWEN38_HEAD_STAGES=stages):
            qt.assert_bitwise_equal(OPS.head_logits(x, w), y, f"stages {stages}")
            i2, v2 = OPS.head_argmax(x, w)
            qt.assert_bitwise_equal(i2, idx, f"stages {stages} argmax index")
            qt.assert_bitwise_equal(v2, val, f"stages {stages} argmax logit")
    qt.assert_bitwise_equal(y[m - 1:m], OPS.head_logits(x[m - 1:m], w), "last row against its 1-row call")
    for op in (OPS.head_logits, OPS.head_argmax):
        with q.knobs.override(QWEN38_HEAD_COLS="128", QWEN38_HEAD_STAGES="5"):
            with pytest.raises(ValueError, match=r"QWEN38_HEAD_STAGES must be auto, 3 or 4, got '5'"):
                op(x, w)


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 9, 17, 32])
@pytest.mark.parametrize("v", [1000, 4099])
def test_narrow_tiles_give_the_same_bits(m, v, head_kernel):
    """QWEN38_HEAD_COLS (column tiles of 128, 64 or 32; the narrow ones at 4, 8 or auto stages, with and
    without QWEN38_HEAD_BALANCE's whole waves of near-equal tiles) changes no bit of the logits nor of the
    greedy winner (V = 1000 and 4099: partial last tiles of every width; 4099 balanced on the H200, 1000 too
    small for a wave of slots); bad values are named."""
    if head_kernel != "tiles":
        pytest.skip("a knob of the tiles kernel")
    x, w = _case(m, v, seed=15)
    y = OPS.head_logits(x, w)
    idx, val = OPS.head_argmax(x, w)
    configs = [("128", "auto", "0")] + [(c, s, b) for c in ("64", "32") for s in ("4", "8", "auto") for b in "01"]
    for cols, stages, bal in configs:
        with q.knobs.override(QWEN38_HEAD_COLS=cols, QWEN38_HEAD_NARROW_STAGES=stages, QWEN38_HEAD_BALANCE=bal):
            what = f"{cols} columns, {stages} stages, balance {bal}"
            qt.assert_bitwise_equal(OPS.head_logits(x, w), y, what)
            i2, v2 = OPS.head_argmax(x, w)
            qt.assert_bitwise_equal(i2, idx, what + " argmax index")
            qt.assert_bitwise_equal(v2, val, what + " argmax logit")
            qt.assert_bitwise_equal(OPS.head_logits(x[m - 1:m], w), y[m - 1:m], what + ": last row alone")
    for op in (OPS.head_logits, OPS.head_argmax):
        with q.knobs.override(QWEN38_HEAD_COLS="48"):
            with pytest.raises(ValueError, match=r"QWEN38_HEAD_COLS must be 64, 128 or 32, got '48'"):
                op(x, w)
        with q.knobs.override(QWEN38_HEAD_COLS="64", QWEN38_HEAD_NARROW_STAGES="5"):
            with pytest.raises(ValueError, match=r"QWEN38_HEAD_NARROW_STAGES must be auto, 4 or 8, got '5'"):
                op(x, w)


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 16])
def test_ring_depth_gives_the_same_bits(m, head_kernel):
    """QWEN38_HEAD_DEPTH (the 1..16-row weight ring's depth) changes no bit."""
    if head_kernel != "ring":
        pytest.skip("a knob of the ring kernel")
    x, w = _case(m, 1000, seed=10)
    y = OPS.head_logits(x, w)
    for depth in ("3", "4"):
        with q.knobs.override(QWEN38_HEAD_DEPTH=depth):
            qt.assert_bitwise_equal(OPS.head_logits(x, w), y, f"depth {depth}")


@pytest.mark.gpu
@pytest.mark.parametrize("m", [17, 24, 32])
@pytest.mark.parametrize("v", [1000, 4099])
def test_ring32_knob_gives_the_same_bits(m, v, head_kernel):
    """QWEN38_HEAD_RING32 (17..32 rows: the ring at two blocks per SM, or the register prefetch, per
    op) changes no bit of the logits nor of the greedy winner, and rows still equal their 1-row calls;
    V = 4099 leaves a partial task."""
    if head_kernel != "ring":
        pytest.skip("a knob of the ring kernel")
    x, w = _case(m, v, seed=12)
    with q.knobs.override(QWEN38_HEAD_RING32="0"):
        y = OPS.head_logits(x, w)
        idx, val = OPS.head_argmax(x, w)
    for ring in ("", "argmax", "1"):
        with q.knobs.override(QWEN38_HEAD_RING32=ring):
            yr = OPS.head_logits(x, w)
            qt.assert_bitwise_equal(yr, y, f"ring32 {ring!r}")
            ir, vr = OPS.head_argmax(x, w)
            qt.assert_bitwise_equal(ir, idx, f"ring32 {ring!r} argmax index")
            qt.assert_bitwise_equal(vr, val, f"ring32 {ring!r} argmax logit")
    for r in (0, m - 1):
        qt.assert_bitwise_equal(yr[r:r + 1], OPS.head_logits(x[r:r + 1], w), f"row {r} against its 1-row call")


@pytest.mark.gpu
def test_wrappers_call_the_ops():
    x, w = _case(2, 100, 64, seed=10)
    qt.assert_bitwise_equal(q.head_logits(x, w), OPS.head_logits(x, w), "head_logits wrapper")
    qt.assert_bitwise_equal(q.head_argmax(x, w)[0], OPS.head_argmax(x, w)[0], "head_argmax wrapper")


# ---- every device: opcheck, bad input, empty calls -------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    x, w = _case(3, 40, 64, seed=12, device=device)
    qt.run_opcheck(OPS.head_logits.default, (x, w))
    qt.run_opcheck(OPS.head_argmax.default, (x, w))


@pytest.mark.parametrize("device", DEVICES)
def test_empty_calls(device):
    x, w = _case(2, 8, 64, seed=13, device=device)
    assert OPS.head_logits(x[:0], w).shape == (0, 8)
    assert OPS.head_logits(x, w[:0]).shape == (2, 0)
    i, v = OPS.head_argmax(x[:0], w)
    assert i.shape == v.shape == (0,)


@pytest.mark.parametrize("device", DEVICES)
def test_bad_input_names_the_argument(device):
    x, w = _case(2, 8, 64, seed=14, device=device)
    cases = [  # (arg, x, w)
        ("x", x.float(), w), ("x", x[:, :48].contiguous(), w),
        ("x", qt.randn_nonzero(2, 128, device=device)[:, ::2], w),
        ("w", x, w.half()), ("w", x, w.flatten()),
        ("w", x[:, :40].contiguous(), w[:, :40].contiguous()),
        ("w", x, torch.zeros(8, 128, dtype=torch.bfloat16, device=device)[:, ::2]),
    ]
    for name in ("head_logits", "head_argmax"):
        op = getattr(OPS, name)
        for arg, xx, ww in cases:
            with pytest.raises(ValueError, match=rf"qwen38\.{name}: .*{arg}"):
                op(xx, ww)
    with pytest.raises(ValueError, match=r"qwen38\.head_argmax: w must have at least one row"):
        OPS.head_argmax(x, w[:0])


@pytest.mark.gpu
def test_bad_device_mix_names_the_argument():
    x, w = _case(2, 8, 64, seed=15)
    with pytest.raises(ValueError, match=r"qwen38\.head_logits: w is on cpu"):
        OPS.head_logits(x, w.cpu())
