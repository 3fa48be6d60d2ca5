"""The norm family: rms_norm, add_rms_norm, rms_norm_gated (torch.ops.qwen38.*).

On the CPU the ops run their references (the CPU kernels), so the accuracy tests there check the
float32 reference against the float64 evaluation rounded at the same points; on CUDA they check the
fused kernels. Layouts cover what the model passes: [M, H] rows (layer norms), [M, heads, H]
(q_norm/k_norm over 24 x 256, the GDN output norm over 48 x 128), head slices q[..., :256] of a
[M, 24, 512] projection (strided rows) and the second half of such a tensor (misaligned rows for odd
H), rows of stride H + 1 (the M-row call must take the element-wise load path while a 1-row call
of the same data may take the 16-byte one: the bits must agree), and a storage offset of one element
(misaligned base pointer).
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import qwen38_kernels as q
from qwen38_kernels import knobs
from qwen38_kernels import testing as qt
from qwen38_kernels.reference import norm as ref

OPS = torch.ops.qwen38
EPS = 1e-6
HAS_CUDA = torch.cuda.is_available()
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
X_DTYPES = [torch.bfloat16, torch.float16]
W_KINDS = ["x", "fp32"]  # weight in x's dtype, or fp32
# 5120: hidden; 256: attention head; 128: GDN head; 1000/40/7: tails not a multiple of the kernel's
# 8-element groups or of a warp; 16383: the longest odd row the CUDA kernel takes (32 segments: its wide launch shape)
HIDDEN = [5120, 256, 128, 1000, 40, 7, 16383]
# (scale of x, eps): ordinary, small enough that eps matters, large, and a large eps
SCALE_EPS = [(1.0, EPS), (1e-3, EPS), (30.0, EPS), (0.1, 0.25)]
OP_NAMES = ["rms_norm", "add_rms_norm", "rms_norm_gated"]


def _wdtype(xdt: torch.dtype, wkind: str) -> torch.dtype:
    return xdt if wkind == "x" else torch.float32


def _heads(h: int) -> int:
    return {256: 24, 128: 48}.get(h, 3)


def _act(layout: str, m: int, h: int, dtype, device, *, scale=1.0, seed=0) -> torch.Tensor:
    """An activation [M, ...,  H] in one of the layouts the model uses."""
    nh = _heads(h)
    if layout == "rows":
        return qt.randn_nonzero(m, h, dtype=dtype, device=device, scale=scale, seed=seed)
    if layout == "heads":
        return qt.randn_nonzero(m, nh, h, dtype=dtype, device=device, scale=scale, seed=seed)
    if layout == "head_slice":  # q[..., :H] of [M, heads, 2H]: rows of stride 2H
        return qt.randn_nonzero(m, nh, 2 * h, dtype=dtype, device=device, scale=scale, seed=seed)[..., :h]
    if layout == "tail_slice":  # gate[..., H:] of [M, heads, 2H]: misaligned rows when H % 8 != 0
        return qt.randn_nonzero(m, nh, 2 * h, dtype=dtype, device=device, scale=scale, seed=seed)[..., h:]
    if layout == "odd_stride":  # rows of stride H + 1: the M-row call cannot use 16-byte loads
        return qt.randn_nonzero(m, h + 1, dtype=dtype, device=device, scale=scale, seed=seed)[:, :h]
    if layout == "offset":      # base pointer one element past an allocation's start
        flat = qt.randn_nonzero(m * h + 1, dtype=dtype, device=device, scale=scale, seed=seed)
        return flat[1:].view(m, h)
    raise ValueError(layout)


def _weight(op: str, h: int, dtype, device, zero_centered: bool, seed: int = 1000) -> torch.Tensor:
    if op in ("rms_norm", "add_rms_norm") and zero_centered:
        return qt.randn_nonzero(h, dtype=dtype, device=device, scale=0.5, seed=seed)
    return qt.randn_nonzero(h, dtype=dtype, device=device, scale=0.25, shift=1.0, seed=seed)


def _inputs(op, layout, m, h, xdt, wdt, device, zc=True, *, scale=1.0, seed=0):
    """(row tensors, weight): the row tensors are (x,), (x, residual) or (x, gate)."""
    x = _act(layout, m, h, xdt, device, scale=scale, seed=seed)
    if op == "rms_norm":
        rows = (x,)
    elif op == "add_rms_norm":
        rows = (x, _act(layout, m, h, xdt, device, scale=scale, seed=seed + 1))
    else:
        rows = (x, _act(layout, m, h, xdt, device, scale=2.0, seed=seed + 1))
    return rows, _weight(op, h, wdt, device, zc, seed=seed + 1000)


def _op(op: str, weight, zc: bool = True, eps: float = EPS):
    """fn(*rows) calling the op."""
    if op == "rms_norm":
        return lambda x: OPS.rms_norm(x, weight, eps, zc)
    if op == "add_rms_norm":
        return lambda x, r: OPS.add_rms_norm(x, r, weight, eps, zc)
    return lambda x, g: OPS.rms_norm_gated(x, g, weight, eps)


def _ref(op: str, rows, weight, zc: bool = True, eps: float = EPS, acc=torch.float32):
    if op == "rms_norm":
        return ref.rms_norm(rows[0], weight, eps, zc, acc_dtype=acc)
    if op == "add_rms_norm":
        return ref.add_rms_norm(rows[0], rows[1], weight, eps, zc, acc_dtype=acc)
    return ref.rms_norm_gated(rows[0], rows[1], weight, eps, acc_dtype=acc)


def _outs(o) -> tuple:
    return o if isinstance(o, tuple) else (o,)


def _assert_within_1ulp_of_float64(op, got, rows, weight, zc, eps, tag):
    """<= 1 ulp from the float64 evaluation rounded at the reference's rounding points. For
    rms_norm_gated, whose intermediate n = round(x * r) may legitimately round either way where
    x * r sits within fp32 error of a rounding boundary, that is either of the two float64
    evaluations of reference.rms_norm_gated_f64_branches (identical on every other element)."""
    if op == "rms_norm_gated":
        lo, hi = ref.rms_norm_gated_f64_branches(rows[0], rows[1], weight, eps)
        u = torch.minimum(qt.ulp_diff(got[0], lo), qt.ulp_diff(got[0], hi))
        bad = int(u.max()) if u.numel() else 0
        assert bad <= 1, (f"{tag} vs the float64 evaluation: {bad} ulp; histogram "
                          f"{qt.ulp_histogram(got[0], lo)} (low branch)")
    else:
        want = _outs(_ref(op, rows, weight, zc, eps, acc=torch.float64))
        qt.assert_ulp_close(got[0], want[0], 1, f"{tag} vs the float64 evaluation")
        for g, w in zip(got[1:], want[1:]):
            qt.assert_ulp_close(g, w, 1, f"{tag}, residual_out vs the float64 evaluation")


def _check_accuracy(op, rows, weight, zc, eps, what):
    """Poisoned allocator -> call -> shape/dtype/contiguity, NaN-free, <= 1 ulp from the float64
    evaluation; on CUDA also <= 1 ulp from the float32 reference (ops with a single rounding
    point: for rms_norm_gated two fp32 evaluations may sit on either side of a tie, which the
    float64 check above already covers)."""
    dev = rows[0].device
    got = _outs(_op(op, weight, zc, eps)(*rows))
    names = ["y", "residual_out"]
    assert len(got) == (2 if op == "add_rms_norm" else 1)
    for k, g in enumerate(got):
        tag = f"{what}, output {names[k]}"
        assert g.shape == rows[0].shape and g.dtype == rows[0].dtype and g.device == dev, tag
        assert g.is_contiguous(), f"{tag}: output strides {g.stride()} for shape {list(g.shape)}"
        assert not torch.isnan(g).any(), f"{tag}: NaN in the output of finite input (unwritten?)"
    _assert_within_1ulp_of_float64(op, got, rows, weight, zc, eps, what)
    if dev.type == "cuda" and op != "rms_norm_gated":
        want32 = _outs(_ref(op, rows, weight, zc, eps))
        for k, (g, w) in enumerate(zip(got, want32)):
            qt.assert_ulp_close(g, w, 1, f"{what}, output {names[k]}: CUDA kernel vs the float32 reference")


# ---- accuracy ------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("zc", [True, False], ids=["zc", "plain"])
@pytest.mark.parametrize("wkind", W_KINDS)
@pytest.mark.parametrize("xdt", X_DTYPES, ids=["bf16", "fp16"])
@pytest.mark.parametrize("layout", ["rows", "heads", "head_slice", "tail_slice", "odd_stride", "offset"])
@pytest.mark.parametrize("h", HIDDEN)
def test_rms_norm_accuracy(h, layout, xdt, wkind, zc, device):
    m = 5 if h > 4096 else 9
    for i, (scale, eps) in enumerate(SCALE_EPS):
        rows, w = _inputs("rms_norm", layout, m, h, xdt, _wdtype(xdt, wkind), device, zc,
                          scale=scale, seed=i)
        _check_accuracy("rms_norm", rows, w, zc, eps, f"x {list(rows[0].shape)} scale {scale} eps {eps}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("zc", [True, False], ids=["zc", "plain"])
@pytest.mark.parametrize("wkind", W_KINDS)
@pytest.mark.parametrize("xdt", X_DTYPES, ids=["bf16", "fp16"])
@pytest.mark.parametrize("layout", ["rows", "heads", "offset"])
@pytest.mark.parametrize("h", HIDDEN)
def test_add_rms_norm_accuracy(h, layout, xdt, wkind, zc, device):
    m = 5 if h > 4096 else 9
    for i, (scale, eps) in enumerate(SCALE_EPS):
        rows, w = _inputs("add_rms_norm", layout, m, h, xdt, _wdtype(xdt, wkind), device, zc,
                          scale=scale, seed=i)
        _check_accuracy("add_rms_norm", rows, w, zc, eps, f"x {list(rows[0].shape)} scale {scale} eps {eps}")


GATED_CASES = [("heads", 128), ("tail_slice", 128), ("rows", 128), ("rows", 7), ("rows", 1000),
               ("tail_slice", 40), ("rows", 5120)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("wkind", W_KINDS)
@pytest.mark.parametrize("xdt", X_DTYPES, ids=["bf16", "fp16"])
@pytest.mark.parametrize("layout,h", GATED_CASES, ids=[f"{lay}-{h}" for lay, h in GATED_CASES])
def test_rms_norm_gated_accuracy(layout, h, xdt, wkind, device):
    m = 5 if h > 4096 else 9
    for i, (scale, eps) in enumerate(SCALE_EPS):
        rows, w = _inputs("rms_norm_gated", layout, m, h, xdt, _wdtype(xdt, wkind), device,
                          scale=scale, seed=i)
        _check_accuracy("rms_norm_gated", rows, w, True, eps,
                        f"x {list(rows[0].shape)} scale {scale} eps {eps}")


@pytest.mark.parametrize("device", DEVICES)
def test_rms_norm_gated_known_input_vs_float64(device):
    """One GDN head (bf16, bf16 weight) where the float32 reference ends 3 ulp from the plain float64
    evaluation (element 27): n = round(x * r) sits on a rounding boundary (x * r is -0.791015625 in
    fp32, a bf16 tie; -0.79101566 in float64), so fp32 and float64 round it to neighbouring values
    and the later roundings amplify that one ulp. Both sides of that tie are evaluations of the
    reference; the op must be within 1 ulp of one of them (and is not allowed anything looser)."""
    x = qt.randn_nonzero(48, 48, 128, dtype=torch.bfloat16, seed=94)[22, 23].reshape(1, 128)
    gate = qt.randn_nonzero(48, 48, 128, dtype=torch.bfloat16, scale=2.0, seed=103)[22, 23].reshape(1, 128)
    w = qt.randn_nonzero(128, dtype=torch.bfloat16, scale=0.1, shift=1.0, seed=194)
    x, gate, w = x.to(device), gate.to(device), w.to(device)
    got = OPS.rms_norm_gated(x, gate, w, EPS)
    lo, hi = ref.rms_norm_gated_f64_branches(x.cpu(), gate.cpu(), w.cpu(), EPS)
    assert not torch.equal(lo.view(torch.int16), hi.view(torch.int16)), "the input no longer sits on a tie"
    _assert_within_1ulp_of_float64("rms_norm_gated", (got.cpu(),), (x.cpu(), gate.cpu()), w.cpu(), True,
                                   EPS, "rms_norm_gated on the fixed GDN head")


# ---- poisoned outputs ----------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", OP_NAMES)
def test_outputs_fully_written(op, device):
    """Every output element is written: outputs start as NaN (QWEN38_POISON_OUTPUTS=1) and hold none after,
    for aligned and misaligned rows, a tail of 1..7 elements and the long-row path."""
    for layout, h in [("rows", 5120), ("heads", 256), ("tail_slice", 7), ("offset", 1000),
                      ("odd_stride", 256), ("rows", 16383), ("rows", 129)]:
        for m in (1, 3, 32, 33):
            rows, w = _inputs(op, layout, m, h, torch.bfloat16, torch.float32, device, True, seed=m)
            for k, o in enumerate(_outs(_op(op, w)(*rows))):
                bad = torch.isnan(o)
                assert not bad.any(), (f"{op} {layout} x {list(rows[0].shape)}: output {k} has "
                                       f"{int(bad.sum())} NaN (unwritten) elements, first at "
                                       f"{bad.flatten().nonzero()[0].item()}")


# ---- opcheck -------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", OP_NAMES)
def test_opcheck(op, device):
    cases = [("rows", 256, torch.bfloat16, torch.float32, True),
             ("head_slice", 256, torch.float16, torch.float16, False)]
    for layout, h, xdt, wdt, zc in cases:
        rows, w = _inputs(op, layout, 3, h, xdt, wdt, device, zc)
        if op == "rms_norm":
            args = (rows[0], w, EPS, zc)
        elif op == "add_rms_norm":
            args = (rows[0], rows[1], w, EPS, zc)
        else:
            args = (rows[0], rows[1], w, EPS)
        qt.run_opcheck(getattr(OPS, op).default, args)


# ---- row invariance ------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("xdt", X_DTYPES, ids=["bf16", "fp16"])
@pytest.mark.parametrize("layout,h", [("rows", 5120), ("head_slice", 256), ("heads", 128),
                                      ("rows", 1000), ("tail_slice", 7), ("rows", 16383),
                                      ("odd_stride", 5120), ("offset", 128)])
@pytest.mark.parametrize("op", OP_NAMES)
def test_row_invariance_every_m(op, layout, h, xdt, device):
    """Row r of every M-row call (M = 1..32) has the bits of the 1-row call of row r."""
    rows, w = _inputs(op, layout, 32, h, xdt, torch.float32, device, seed=7)
    qt.assert_row_invariant(_op(op, w), rows, max_rows=32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", OP_NAMES)
def test_broadcast_rows(op, device):
    """A row expanded to M rows (row stride 0) gives M copies of the 1-row result."""
    rows, w = _inputs(op, "rows", 1, 256, torch.bfloat16, torch.bfloat16, device)
    one = _outs(_op(op, w)(*rows))
    many = _outs(_op(op, w)(*(t.expand(13, 256) for t in rows)))
    for o1, om in zip(one, many):
        qt.assert_bitwise_equal(om, o1.expand(13, 256), f"{op}: expanded rows")


FUZZ_SHAPES = [("rows", 5120), ("heads", 256), ("head_slice", 256), ("heads", 128), ("rows", 1000),
               ("rows", 40), ("tail_slice", 7), ("rows", 16383), ("odd_stride", 1000), ("offset", 256)]


_FUZZ = dict(
    data=st.data(),
    op=st.sampled_from(OP_NAMES),
    m=st.integers(1, 32),
    shape=st.sampled_from(FUZZ_SHAPES),
    xdt=st.sampled_from(X_DTYPES),
    wkind=st.sampled_from(W_KINDS),
    zc=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
    scales=st.tuples(st.sampled_from([1e-3, 1.0, 40.0]), st.sampled_from([1e-3, 1.0, 40.0])),
    bad_filler=st.sampled_from([None, float("nan"), float("inf"), -float("inf")]),
)


def _fuzz_row_invariance(device, data, op, m, shape, xdt, wkind, zc, seed, scales, bad_filler):
    """One row placed at a drawn position among M - 1 other rows (of another scale, possibly holding
    a NaN or Inf) gives the bits of its 1-row call."""
    pos = data.draw(st.integers(0, m - 1), label="pos")
    layout, h = shape
    rows, w = _inputs(op, layout, m, h, xdt, _wdtype(xdt, wkind), device, zc, scale=scales[0], seed=seed)
    target, _ = _inputs(op, layout, 1, h, xdt, _wdtype(xdt, wkind), device, zc, scale=scales[1],
                        seed=seed ^ 0x5EED)
    for t, r in zip(rows, target):
        t[pos:pos + 1] = r
        if bad_filler is not None and m > 1:
            t[(pos + 1) % m, ..., h // 2] = bad_filler
    qt.assert_row_invariant_at(_op(op, w, zc), rows, pos)


@pytest.mark.gpu
@given(**_FUZZ)
def test_row_invariance_fuzz_cuda(**kw):
    _fuzz_row_invariance("cuda", **kw)


@settings(max_examples=min(15, settings.default.max_examples))
@given(**_FUZZ)
def test_row_invariance_fuzz_cpu(**kw):
    """The same fuzz on the CPU kernel (the reference is row-wise), with fewer examples."""
    _fuzz_row_invariance("cpu", **kw)


# ---- NaN / Inf rows ------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", OP_NAMES)
@pytest.mark.parametrize("h", [256, 5120, 7])
def test_nonfinite_row_stays_in_its_row(op, h, device):
    """NaN / +-Inf in some rows of x (and residual / gate) leave every other row's bits unchanged."""
    m = 9
    rows, w = _inputs(op, "rows", m, h, torch.bfloat16, torch.float32, device, seed=3)
    clean = _outs(_op(op, w)(*rows))
    dirty = tuple(t.clone() for t in rows)
    dirty[0][1, h // 2] = float("nan")
    dirty[0][4, 0] = float("inf")
    dirty[0][6, h - 1] = -float("inf")
    if len(dirty) > 1:  # residual / gate
        dirty[1][2, 0] = float("nan")
        dirty[1][7, h // 3] = float("inf")
        dirty[1][8, h - 1] = -float("inf")
    bad = {1, 4, 6} | ({2, 7, 8} if len(dirty) > 1 else set())
    got = _outs(_op(op, w)(*dirty))
    for k, (g, c) in enumerate(zip(got, clean)):
        for r in range(m):
            if r not in bad:
                qt.assert_bitwise_equal(g[r], c[r], f"{op}: row {r} of output {k} next to non-finite rows")


# ---- graphs, determinism -------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("op", OP_NAMES)
@pytest.mark.parametrize("layout,h,m", [("rows", 5120, 1), ("rows", 5120, 32), ("head_slice", 256, 8),
                                        ("heads", 128, 16), ("tail_slice", 7, 5)])
def test_graph_equals_eager(op, layout, h, m):
    rows, w = _inputs(op, layout, m, h, torch.bfloat16, torch.bfloat16, "cuda", seed=11)
    qt.assert_graph_equals_eager(_op(op, w), *rows)


@pytest.mark.gpu
@pytest.mark.parametrize("op", OP_NAMES)
@pytest.mark.parametrize("layout,h,m", [("rows", 5120, 32), ("heads", 256, 4), ("rows", 16383, 3),
                                        ("tail_slice", 40, 7)])
def test_deterministic(op, layout, h, m):
    rows, w = _inputs(op, layout, m, h, torch.float16, torch.float32, "cuda", seed=12)
    qt.assert_deterministic(_op(op, w), *rows, times=3)


# ---- bad input -----------------------------------------------------------------------------------


def _base_args(op: str, device, m: int = 4, h: int = 64, xdt=torch.bfloat16) -> dict:
    x = qt.randn_nonzero(m, h, dtype=xdt, device=device, seed=1)
    w = qt.randn_nonzero(h, dtype=torch.float32, device=device, seed=2)
    if op == "rms_norm":
        return dict(x=x, weight=w, eps=EPS, zero_centered=True)
    other = qt.randn_nonzero(m, h, dtype=xdt, device=device, seed=3)
    if op == "add_rms_norm":
        return dict(x=x, residual=other, weight=w, eps=EPS, zero_centered=True)
    return dict(x=x, gate=other, weight=w, eps=EPS)


def _call(op: str, args: dict):
    return getattr(OPS, op)(*args.values())  # dict order == schema order


def _expect_error(op: str, arg: str, args: dict):
    with pytest.raises(ValueError, match=rf"qwen38\.{op}: {arg}\b"):
        _call(op, args)


def _bad_cases(op: str, device):
    """(case id, argument the message must name, args)."""
    b = lambda: _base_args(op, device)  # noqa: E731
    m, h = 4, 64
    cases = []

    def case(name, arg, **changes):
        a = b()
        a.update({k: (v(a) if callable(v) else v) for k, v in changes.items()})
        cases.append((name, arg, a))

    case("x_float32", "x", x=lambda a: a["x"].float())
    case("x_int", "x", x=lambda a: a["x"].to(torch.int32))
    case("x_0d", "x", x=lambda a: a["x"][0, 0])
    case("x_transposed", "x", x=lambda a: qt.randn_nonzero(h, m, device=device).t())
    case("x_last_dim_stride_2", "x", x=lambda a: qt.randn_nonzero(m, 2 * h, device=device)[:, ::2])
    case("weight_int", "weight", weight=lambda a: a["weight"].to(torch.int32))
    case("weight_other_half_dtype", "weight", weight=lambda a: a["weight"].half())
    case("weight_float64", "weight", weight=lambda a: a["weight"].double())
    case("weight_short", "weight", weight=lambda a: a["weight"][:-1])
    case("weight_2d", "weight", weight=lambda a: a["weight"].view(1, h))
    case("weight_strided", "weight", weight=lambda a: torch.ones(2 * h, device=device)[::2])
    case("eps_negative", "eps", eps=-1e-6)
    case("eps_nan", "eps", eps=float("nan"))
    case("eps_inf", "eps", eps=float("inf"))
    if op != "rms_norm":
        other = "residual" if op == "add_rms_norm" else "gate"
        case(f"{other}_shape", other, **{other: lambda a: qt.randn_nonzero(m, h + 1, device=device)})
        case(f"{other}_rows", other, **{other: lambda a: qt.randn_nonzero(m + 1, h, device=device)})
        case(f"{other}_dtype", other, **{other: lambda a: a[other].half()})
        case(f"{other}_float32", other, **{other: lambda a: a[other].float()})
        case(f"{other}_stride_2", other,
             **{other: lambda a: qt.randn_nonzero(m, 2 * h, device=device)[:, ::2]})
    return cases


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", OP_NAMES)
def test_bad_input_names_the_argument(op, device):
    for name, arg, args in _bad_cases(op, device):
        try:
            _expect_error(op, arg, args)
        except BaseException as e:  # say which case failed
            raise AssertionError(f"case {name}: {e}") from e


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", OP_NAMES)
def test_leading_dims_that_do_not_collapse_are_rejected(op, device):
    """x [M, heads, H] transposed from [heads, M, H]: dense, last dim contiguous, but its rows have no
    single stride. The CUDA launcher rejects it naming x; a bad call must fail the same way on every
    device (the CPU kernel and the fake use qwen38_kernels/_checks.py)."""
    a = _base_args(op, device)
    for k in ("x", "residual", "gate"):
        if k in a:
            a[k] = qt.randn_nonzero(3, 4, 64, device=device, seed=5).transpose(0, 1)
    _expect_error(op, "x", a)


@pytest.mark.gpu
@pytest.mark.parametrize("op", OP_NAMES)
def test_mixed_devices_name_the_argument(op):
    for moved in ["weight", "x"] + (["residual"] if op == "add_rms_norm" else []) + \
            (["gate"] if op == "rms_norm_gated" else []):
        a = _base_args(op, "cuda")
        a[moved] = a[moved].cpu()
        try:
            _expect_error(op, moved, a)
        except BaseException as e:
            raise AssertionError(f"{moved} on the CPU: {e}") from e


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", OP_NAMES)
@pytest.mark.parametrize("shape", [(0, 256), (0, 24, 256), (2, 0, 128)])
def test_empty_input(op, shape, device):
    m = shape[0]
    rows, w = _inputs(op, "rows", 1, shape[-1], torch.bfloat16, torch.float32, device)
    rows = tuple(torch.empty(shape, dtype=torch.bfloat16, device=device) for _ in rows)
    outs = _outs(_op(op, w)(*rows))
    assert len(outs) == (2 if op == "add_rms_norm" else 1)
    for o in outs:
        assert o.shape == torch.Size(shape) and o.dtype == torch.bfloat16 and o.device.type == device, \
            f"{op} on {list(shape)} (M={m}) returned {o.dtype} {list(o.shape)} on {o.device}"
    if op == "rms_norm":  # also the empty head slice of a projection
        x = torch.empty(0, 24, 512, dtype=torch.bfloat16, device=device)[..., :256]
        w = torch.ones(256, dtype=torch.bfloat16, device=device)
        assert OPS.rms_norm(x, w, EPS, True).shape == (0, 24, 256)


# ---- torch.compile, knobs ------------------------------------------------------------------------


@pytest.mark.parametrize("via", ["torch.ops", "wrapper"])
def test_compile_fullgraph_cpu(via):
    """torch.compile(fullgraph=True) traces the ops through their fake kernels (aot_eager backend:
    no C++ compile, a second or two) and gives the eager bits."""
    torch._dynamo.reset()
    x, r = (qt.randn_nonzero(5, 3, 128, seed=s) for s in (1, 2))
    w = qt.randn_nonzero(128, dtype=torch.float32, seed=3)
    if via == "torch.ops":
        def f(x, r, w):
            y, h = OPS.add_rms_norm(x, r, w, EPS, True)
            z = OPS.rms_norm(y * 2, w, EPS, False)
            return OPS.rms_norm_gated(z, h, w, EPS) + 1
    else:
        def f(x, r, w):
            y, h = q.add_rms_norm(x, r, w)
            z = q.rms_norm(y * 2, w, zero_centered=False)
            return q.rms_norm_gated(z, h, w) + 1
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    qt.assert_bitwise_equal(compiled(x, r, w), f(x, r, w), f"compiled via {via} vs eager")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", OP_NAMES)
def test_knob_fused_norm_off_routes_to_reference(op, device, monkeypatch):
    """QWEN38_FUSED_NORM=0 makes the public wrapper call the reference (seen by a spy), within 1 ulp
    of the fused path; =1 does not call it."""
    rows, w = _inputs(op, "heads", 6, 256, torch.bfloat16, torch.float32, device, seed=21)
    wrapper = getattr(q, op)
    args = (*rows, w)
    calls = []
    real = getattr(ref, op)

    def spy(*a, **k):
        calls.append(op)
        return real(*a, **k)

    monkeypatch.setattr(ref, op, spy)
    with knobs.override(QWEN38_FUSED_NORM="1"):
        fused = _outs(wrapper(*args))
    assert calls == [], "QWEN38_FUSED_NORM=1 called the reference"
    with knobs.override(QWEN38_FUSED_NORM="0"):
        unfused = _outs(wrapper(*args))
    assert calls == [op], "QWEN38_FUSED_NORM=0 did not call the reference"
    for k, (a, b) in enumerate(zip(unfused, fused)):
        qt.assert_ulp_close(a, b, 1, f"{op} output {k}: QWEN38_FUSED_NORM=0 vs =1")


# ---- the helpers themselves (cheap, CPU) ---------------------------------------------------------


def test_ulp_diff_basics():
    one = torch.tensor([1.0], dtype=torch.bfloat16)
    a = torch.tensor([1.0, 0.0, -0.0, 1.0, float("nan"), float("nan"), float("inf")], dtype=torch.bfloat16)
    b = torch.tensor([1.0078125, -0.0, 0.0, float("nan"), 1.0, float("nan"), 3.3895313892515355e38],
                     dtype=torch.bfloat16)
    assert qt.ulp_diff(a, b).tolist() == [1, 0, 0, 1 << 40, 1 << 40, 0, 1]
    tiny = torch.tensor([2.0 ** -24], dtype=torch.float16)  # smallest fp16 subnormal
    assert int(qt.ulp_diff(tiny, -tiny)) == 2
    assert int(qt.ulp_diff(torch.tensor([-1.0], dtype=torch.float16),
                           torch.tensor([-1.0009765625], dtype=torch.float16))) == 1
    with pytest.raises(TypeError):
        qt.ulp_diff(one, one.half())


def test_assert_helpers_catch_what_they_should():
    x = qt.randn_nonzero(8, 16)
    qt.assert_row_invariant(lambda t: t * 2, x)
    with pytest.raises(AssertionError, match="row invariance"):
        qt.assert_row_invariant(lambda t: t * t.float().sum().to(t.dtype), x)
    with pytest.raises(AssertionError, match="row invariance"):
        qt.assert_row_invariant_at(lambda t: t - t.float().mean(0).to(t.dtype), x, 3)
    with pytest.raises(AssertionError):
        qt.assert_bitwise_equal(torch.tensor([0.0]), torch.tensor([-0.0]))
    qt.assert_bitwise_equal(torch.tensor([float("nan")]), torch.tensor([float("nan")]))
    with pytest.raises(AssertionError, match="call 2"):
        counter = iter(range(10))
        qt.assert_deterministic(lambda: torch.tensor([float(next(counter))]))
    p = qt.poison_like(torch.zeros(3, 5, dtype=torch.bfloat16).t())
    assert p.stride() == (1, 5) and torch.isnan(p).all()
    assert (qt.poisoned_empty(4, dtype=torch.int32) == -1).all()
    with pytest.raises(AssertionError, match="ulp histogram"):
        qt.assert_ulp_close(torch.tensor([1.0, 2.0], dtype=torch.bfloat16),
                            torch.tensor([1.0, 2.03125], dtype=torch.bfloat16), 1, "t")


def test_knob_helper_catches_a_knob_that_changes_bits():
    import os
    x = qt.randn_nonzero(32, 16)
    same = lambda t, s=1.0: t * s  # noqa: E731
    qt.assert_knob_keeps_bits(same, x, "QWEN38_PDL", "0", extras=((), (2.0,)))
    differs = lambda t: t * (2 if os.environ.get("QWEN38_PDL") == "0" else 1)  # noqa: E731
    with pytest.raises(AssertionError, match="QWEN38_PDL=0 changes bits"):
        qt.assert_knob_keeps_bits(differs, x, "QWEN38_PDL", "0", rows=(1, 32), what="pdl: ")


# ---- launch shapes, PDL, limits ------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("op", OP_NAMES)
@pytest.mark.parametrize("h", [5120, 16383, 1000, 128])
def test_many_rows_equal_their_one_row_calls(op, h):
    """Many rows take the kernel's wide launch shape (fewer warps per row, more segments per warp);
    the reduction order is the same, so each row still equals its 1-row call (which takes the
    latency shape) bit for bit."""
    m = 1024 if h <= 5120 else 300
    rows, w = _inputs(op, "rows", m, h, torch.bfloat16, torch.bfloat16, "cuda", seed=21)
    fn = _op(op, w)
    full = _outs(fn(*rows))
    for r in (0, 1, m // 2, m - 1):
        one = _outs(fn(*(t[r:r + 1] for t in rows)))
        for k, (a, b) in enumerate(zip(full, one)):
            qt.assert_bitwise_equal(a[r:r + 1], b, f"{op} H={h}: row {r} of {m} rows, output {k}")


# Shapes that take the streaming kernel (rows * H >= 2^20 with aligned rows): the model's [M, 5120]
# rows, the q slice of [M, 24, 512] (strided rows of 256), [M, 48, 128] heads, the longest row
# (32 segments: several warps per row meeting in shared memory) and H = 1000 (a last segment short of
# groups: zero-filled, see norm_kernel.cuh). The row counts leave a partial last
# pass of the persistent grid, and the largest ones take several passes.
STREAM_CASES = [("rows", 5120, 4099), ("head_slice", 256, 1001), ("heads", 128, 1003), ("rows", 16384, 300),
                ("heads", 256, 700), ("rows", 1000, 1500)]


@pytest.mark.gpu
@pytest.mark.parametrize("zc", [True, False], ids=["zc", "plain"])
@pytest.mark.parametrize("wkind", W_KINDS)
@pytest.mark.parametrize("xdt", X_DTYPES, ids=["bf16", "fp16"])
@pytest.mark.parametrize("layout,h,m", STREAM_CASES)
@pytest.mark.parametrize("op", OP_NAMES)
def test_stream_knob_gives_the_same_bits(op, layout, h, m, xdt, wkind, zc):
    """QWEN38_NORM_STREAM=1 (persistent streaming kernel) and =0 (v4 launch shapes) give the same
    bits on many rows, and rows of either equal their 1-row calls (the latency shape)."""
    if op == "rms_norm_gated" and not zc:
        pytest.skip("rms_norm_gated has no zero_centered flag")
    rows, w = _inputs(op, layout, m, h, xdt, _wdtype(xdt, wkind), "cuda", zc, seed=31)
    fn = _op(op, w, zc)
    with knobs.override(QWEN38_NORM_STREAM="1"):
        new = _outs(fn(*rows))
        qt.assert_graph_equals_eager(fn, *rows)
    with knobs.override(QWEN38_NORM_STREAM="0"):
        old = _outs(fn(*rows))
    for k, (a, b) in enumerate(zip(new, old)):
        qt.assert_bitwise_equal(a, b, f"{op} {layout} x {list(rows[0].shape)}: output {k}, stream 1 vs 0")
    for r in (0, 1, m // 2, m - 1):
        one = _outs(fn(*(t[r:r + 1] for t in rows)))
        for k, (a, b) in enumerate(zip(new, one)):
            qt.assert_bitwise_equal(a[r:r + 1], b, f"{op} {layout}: row {r} of {m} rows, output {k}")


@pytest.mark.gpu
@pytest.mark.parametrize("op", OP_NAMES)
def test_stream_kernel_writes_every_element_and_skips_nonfinite_rows(op):
    """Poisoned outputs are fully written by the streaming kernel, and a NaN / Inf row leaves the
    other rows' bits as they are."""
    m, h = 2100, 5120
    rows, w = _inputs(op, "rows", m, h, torch.bfloat16, torch.float32, "cuda", seed=33)
    with knobs.override(QWEN38_NORM_STREAM="1", QWEN38_POISON_OUTPUTS="1"):
        clean = _outs(_op(op, w)(*rows))
        for k, o in enumerate(clean):
            assert not torch.isnan(o).any(), f"{op}: output {k} has NaN (unwritten) elements"
        dirty = tuple(t.clone() for t in rows)
        dirty[0][5, 17] = float("nan")
        dirty[0][1000, 4000] = float("inf")
        got = _outs(_op(op, w)(*dirty))
    for k, (g, c) in enumerate(zip(got, clean)):
        keep = torch.ones(m, dtype=torch.bool, device="cuda")
        keep[[5, 1000]] = False
        qt.assert_bitwise_equal(g[keep], c[keep], f"{op}: output {k}, rows next to non-finite rows")


@pytest.mark.gpu
@pytest.mark.parametrize("op", OP_NAMES)
def test_pdl_knob_gives_the_same_bits(op):
    """QWEN38_PDL only changes how kernels are launched, eagerly and inside a graph."""
    rows, w = _inputs(op, "rows", 32, 5120, torch.bfloat16, torch.bfloat16, "cuda", seed=22)
    with knobs.override(QWEN38_PDL="1"):
        on = _outs(_op(op, w)(*rows))
        qt.assert_graph_equals_eager(_op(op, w), *rows)
    with knobs.override(QWEN38_PDL="0"):
        off = _outs(_op(op, w)(*rows))
    for a, b in zip(on, off):
        qt.assert_bitwise_equal(a, b, f"{op}: QWEN38_PDL=1 vs 0")


@pytest.mark.gpu
@pytest.mark.parametrize("op", OP_NAMES)
def test_rows_longer_than_the_kernel_takes_are_rejected(op):
    args = _base_args(op, "cuda", m=2, h=16392)
    with pytest.raises(ValueError, match=rf"qwen38\.{op}: the CUDA kernel takes rows of at most 16384"):
        _call(op, args)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_streaming_lab_compiles(tmp_path):
    """benchmarks/lab/norm_stream_lab.cu (the A/B lab that chose the streaming shapes) still compiles
    against the kernel header, every variant it times included: it cannot drift from the kernel."""
    root = Path(__file__).resolve().parent.parent
    r = subprocess.run(["nvcc", "-std=c++17", "-O1", "-arch=sm_90a", "--expt-relaxed-constexpr", "-c",
                        "-I", str(root / "csrc"), str(root / "benchmarks" / "lab" / "norm_stream_lab.cu"),
                        "-o", str(tmp_path / "lab.o")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
