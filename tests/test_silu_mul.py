"""silu_mul (torch.ops.qwen38.silu_mul): the gated MLP's activation, y = round(round(silu(gate)) * up).

On CUDA the kernel must give the bits of ``F.silu(gate) * up`` (HF's ``act_fn(gate) * up``); on every
device the result must be one of the two float64 evaluations rounded at the same points that an fp32
silu may legitimately land on (where silu sits within fp32 error of a rounding boundary of x's dtype,
either side). Layouts: contiguous rows, rows of a wider tensor (row stride past 2I), a base pointer one
element off 16 bytes, and I not a multiple of 8 (the kernel's element-wise path); the 16-byte path and
the element-wise path must agree bit for bit.
"""
from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import qwen38_kernels as q
from qwen38_kernels import knobs
from qwen38_kernels import testing as qt
from qwen38_kernels.reference import norm as ref

OPS = torch.ops.qwen38
HAS_CUDA = torch.cuda.is_available()
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
DTYPES = [torch.bfloat16, torch.float16]
# 17408: the model's intermediate size; 8: one 16-byte group; 1000 / 7: I not a multiple of 8
INTER = [17408, 1000, 8, 7]
LAYOUTS = ["rows", "wide", "offset"]


def _x(layout: str, m: int, i: int, dtype, device, *, scale: float = 3.0, seed: int = 0) -> torch.Tensor:
    """x [M, 2I] (gate then up) in one of the layouts; values spread over silu's interesting range."""
    if layout == "rows":
        return qt.randn_nonzero(m, 2 * i, dtype=dtype, device=device, scale=scale, seed=seed)
    if layout == "wide":  # the first 2I of rows of 2I + 8: a row stride past the row (still 16-byte rows)
        return qt.randn_nonzero(m, 2 * i + 8, dtype=dtype, device=device, scale=scale, seed=seed)[:, :2 * i]
    if layout == "offset":  # one element past 16 bytes: the element-wise path
        return qt.offset_copy(qt.randn_nonzero(m, 2 * i, dtype=dtype, device=device, scale=scale, seed=seed), 1)
    raise ValueError(layout)


def _assert_contract(y: torch.Tensor, x: torch.Tensor, what: str) -> None:
    lo, hi = ref.silu_mul_f64_branches(x.cpu())
    y = y.cpu()
    ok = (qt._bits(y) == qt._bits(lo)) | (qt._bits(y) == qt._bits(hi))
    if not bool(ok.all()):
        bad = (~ok).nonzero()[0].tolist()
        raise AssertionError(f"{what}: element {bad} is {y[tuple(bad)].item()!r}, the float64 evaluations give "
                             f"{lo[tuple(bad)].item()!r} / {hi[tuple(bad)].item()!r}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("i", INTER)
def test_contract(i, layout, dtype, device):
    x = _x(layout, 5, i, dtype, device)
    y = OPS.silu_mul(x)
    assert y.shape == (5, i) and y.dtype == dtype and y.device == x.device and y.is_contiguous()
    _assert_contract(y, x, f"silu_mul {layout} I={i} {dtype}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("i", INTER)
def test_cuda_bits_are_torchs(i, layout, dtype):
    """The CUDA kernel gives F.silu(gate) * up's bits on CUDA, over a wide range and the specials."""
    x = _x(layout, 32, i, dtype, "cuda", scale=8.0, seed=3)
    gi = x[..., :i]
    with torch.no_grad():
        specials = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1e-30, -1e-30, 90.0, -90.0,
                                 11.0, -17.0], dtype=dtype, device="cuda")
        n = min(specials.numel(), i)
        gi[0, :n] = specials[:n]
        x[1, i:i + n] = specials[:n]
    want = F.silu(x[..., :i]) * x[..., i:]
    qt.assert_bitwise_equal(OPS.silu_mul(x), want, f"silu_mul {layout} I={i} vs F.silu(gate) * up")


def test_cpu_path_is_hf_expression():
    """On the CPU the op runs the reference, which is HF's `act_fn(gate) * up` itself."""
    for dtype in DTYPES:
        x = _x("rows", 16, 1000, dtype, "cpu", scale=8.0, seed=11)
        qt.assert_bitwise_equal(OPS.silu_mul(x), F.silu(x[:, :1000]) * x[:, 1000:], f"CPU silu_mul {dtype}")


@pytest.mark.gpu
def test_vector_and_elementwise_paths_agree():
    x = qt.randn_nonzero(4, 2 * 1024, dtype=torch.bfloat16, device="cuda", scale=4.0, seed=5)
    qt.assert_bitwise_equal(OPS.silu_mul(qt.offset_copy(x, 1)), OPS.silu_mul(x), "offset copy vs aligned")


@pytest.mark.parametrize("device", DEVICES)
def test_leading_dims_and_empty(device):
    x = qt.randn_nonzero(2, 3, 2 * 40, dtype=torch.bfloat16, device=device, seed=1)
    y = OPS.silu_mul(x)
    assert y.shape == (2, 3, 40)
    qt.assert_bitwise_equal(y.reshape(6, 40), OPS.silu_mul(x.reshape(6, 80)), "[2, 3, 2I] vs [6, 2I]")
    assert OPS.silu_mul(x[:0]).shape == (0, 3, 40)
    assert OPS.silu_mul(torch.empty(3, 0, dtype=torch.float16, device=device)).shape == (3, 0)
    one = qt.randn_nonzero(2 * 16, dtype=torch.float16, device=device, seed=2)
    assert OPS.silu_mul(one).shape == (16,)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_opcheck(layout, device):
    qt.run_opcheck(OPS.silu_mul, (_x(layout, 3, 40, torch.bfloat16, device),))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_row_invariance_every_m(layout, device):
    x = _x(layout, 32, 1000, torch.bfloat16, device, seed=7)
    qt.assert_row_invariant(OPS.silu_mul, x)


_FUZZ = dict(m=st.integers(1, 32), row=st.integers(0, 31), i=st.sampled_from([17408, 2048, 1000, 24, 8, 7, 1]),
             layout=st.sampled_from(LAYOUTS), dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2 ** 16))


def _fuzz(device, m, row, i, layout, dtype, seed):
    row = row % m
    x = _x(layout, m, i, dtype, device, seed=seed)
    qt.assert_row_invariant_at(OPS.silu_mul, x, row)


@pytest.mark.gpu
@given(**_FUZZ)
def test_row_invariance_fuzz_cuda(**kw):
    _fuzz("cuda", **kw)


@settings(max_examples=min(15, settings.default.max_examples))
@given(**_FUZZ)
def test_row_invariance_fuzz_cpu(**kw):
    _fuzz("cpu", **kw)


@pytest.mark.gpu
@pytest.mark.parametrize("m,i", [(1, 17408), (32, 17408), (5, 7)])
def test_graph_equals_eager(m, i):
    qt.assert_graph_equals_eager(OPS.silu_mul, _x("rows", m, i, torch.bfloat16, "cuda"))


@pytest.mark.gpu
def test_deterministic():
    qt.assert_deterministic(OPS.silu_mul, _x("rows", 32, 17408, torch.bfloat16, "cuda"))


@pytest.mark.parametrize("device", DEVICES)
def test_wrapper_and_reference(device):
    x = _x("rows", 4, 40, torch.float16, device)
    qt.assert_bitwise_equal(q.silu_mul(x), OPS.silu_mul(x), "qwen38_kernels.silu_mul vs the op")
    with knobs.override(QWEN38_FUSED_NORM="0"):
        _assert_contract(q.silu_mul(x), x, "the wrapper's reference path")
    _assert_contract(ref.silu_mul(x), x, "reference.silu_mul")


def _bad_cases(device):
    bf = torch.bfloat16
    return [
        (torch.randn(4, 7, device=device).to(bf), "x.shape[-1] must be even"),
        (torch.randn(4, 8, device=device), "x must be bfloat16 or float16"),
        (torch.ones(4, 8, dtype=torch.int32, device=device), "x must be bfloat16 or float16"),
        (torch.randn(8, 4, device=device).to(bf).t(), "x must be contiguous in its last dimension"),
        (torch.tensor(1.0, dtype=bf, device=device), "x must have at least one dimension"),
    ]


@pytest.mark.parametrize("device", DEVICES)
def test_bad_input_names_the_argument(device):
    for x, msg in _bad_cases(device):
        with pytest.raises(ValueError, match=re.escape(f"qwen38.silu_mul: {msg}")):
            OPS.silu_mul(x)


@pytest.mark.parametrize("device", DEVICES)
def test_leading_dims_that_do_not_collapse_are_rejected(device):
    x = torch.randn(4, 6, 16, device=device).to(torch.bfloat16).transpose(0, 1)
    with pytest.raises(ValueError, match="qwen38.silu_mul: x's leading dimensions must collapse"):
        OPS.silu_mul(x)
