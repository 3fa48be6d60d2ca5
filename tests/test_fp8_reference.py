"""Block FP8 and the output head on the CPU: the format (qwen38_kernels/formats_fp8.py) and the
references fp8_block_linear, head_logits, head_argmax (qwen38_kernels/reference/fp8.py).

The decode is checked against the e4m3 definition written out bit by bit, the quantizer against the
rules of its docstring (scale = amax/448, nearest e4m3 by brute force with ties to the even code,
saturation, the all-zero tile, the sign of zero), the loader against the state dict's storage, the
references against float64 evaluations (within the fp32 error bound, not "1 ulp": see
reference/fp8.py), the block rule against a hand-written evaluation on data where every block sum is
exact, and row invariance by hypothesis. All CPU, a few seconds.
"""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from qwen38_kernels import formats_fp8 as F
from qwen38_kernels import testing as qt
from qwen38_kernels.formats_fp8 import FP8BlockWeight
from qwen38_kernels.reference.fp8 import (fp8_block_linear, fp8_block_linear_f64_bound, head_argmax,
                                          head_logits, head_logits_f64_bound)

E4M3 = torch.float8_e4m3fn
PREFIX = "model.layers.5.mlp.gate_proj"


# ---- helpers -------------------------------------------------------------------------------------


def _e4m3_by_bits(b: int) -> float:
    """e4m3fn from its definition: sign | 4 exponent bits (bias 7) | 3 mantissa bits; exponent 0 is
    subnormal (m * 2^-9); S.1111.111 is NaN; no Inf."""
    sign = -1.0 if b & 0x80 else 1.0
    e, m = (b >> 3) & 0xF, b & 0x7
    if e == 0xF and m == 0x7:
        return float("nan")
    mag = m * 2.0 ** -9 if e == 0 else 2.0 ** (e - 7) * (1.0 + m / 8.0)
    return sign * mag


_FINITE = torch.tensor([b for b in range(256) if b & 0x7F != 0x7F], dtype=torch.uint8)
_POS_VALUES = torch.tensor([_e4m3_by_bits(b) for b in range(0x7F)], dtype=torch.float64)  # 0x00..0x7E


def _codes(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8)


def _bits_equal(a: torch.Tensor, b: torch.Tensor, msg: str):
    assert a.dtype == b.dtype and a.shape == b.shape, \
        f"{msg}: {a.dtype} {list(a.shape)} vs {b.dtype} {list(b.shape)}"
    if a.dtype == E4M3:
        n = int((_codes(a) != _codes(b)).sum())
        assert n == 0, f"{msg}: {n} of {a.numel()} codes differ"
    else:
        qt.assert_bitwise_equal(a, b, msg)


def _scales_by_loop(scale: torch.Tensor, n: int, k: int) -> torch.Tensor:
    """float64 [N, K]: scale[n // 128, k // 128], element by tile, written as a plain loop."""
    out = torch.empty(n, k, dtype=torch.float64)
    for i in range(scale.shape[0]):
        for j in range(scale.shape[1]):
            out[128 * i:128 * (i + 1), 128 * j:128 * (j + 1)] = float(scale[i, j])
    return out


def _dequant_f64_by_bits(w: FP8BlockWeight) -> torch.Tensor:
    table = torch.tensor([_e4m3_by_bits(b) for b in range(256)], dtype=torch.float64)
    return table[_codes(w.weight).long()] * _scales_by_loop(w.weight_scale_inv, w.N, w.K)


def _tiled_randn(n: int, k: int, seed: int, dtype=torch.float32, decades: float = 2.0) -> torch.Tensor:
    """randn with every 128x128 tile scaled by 10^u, u uniform in [-decades, decades]."""
    g = torch.Generator().manual_seed(seed)
    gn, gk = F.scale_grid(n, k)
    t = torch.randn(n, k, generator=g)
    u = 10.0 ** ((torch.rand(gn, gk, generator=g) * 2 - 1) * decades)
    return (t * _scales_by_loop(u, n, k).float()).to(dtype)


def _rand_weight(n: int, k: int, seed: int, scale: float = 0.05) -> FP8BlockWeight:
    g = torch.Generator().manual_seed(seed)
    return F.quantize_fp8_block(torch.randn(n, k, generator=g) * scale)


def _nearest_codes_brute_force(v: torch.Tensor) -> torch.Tensor:
    """Nearest e4m3 magnitude by distance to every finite one (ties: the even code), magnitudes past
    448 saturate to 0x7E, sign bit from v."""
    a = v.double().abs().clamp(max=448.0)
    d = (a[..., None] - _POS_VALUES).abs()
    best = d.min(-1, keepdim=True).values
    ties = d == best
    idx = torch.arange(_POS_VALUES.numel())
    even = (ties & (idx % 2 == 0)).any(-1)
    first = ties.int().argmax(-1)
    pick = torch.where(even & (first % 2 == 1), first + 1, first)
    return (pick | (torch.signbit(v).long() << 7)).to(torch.uint8)



# ---- e4m3 decode ---------------------------------------------------------------------------------


def test_every_e4m3_byte_decodes_exactly_to_fp32_bf16_fp16():
    """The kernels decode e4m3 to bf16 or fp16 and multiply there: every finite code must be exact
    in both (and the decode must match the bit-level definition)."""
    allb = torch.arange(256, dtype=torch.uint8).view(E4M3)
    f32 = allb.float()
    for b in range(256):
        want = _e4m3_by_bits(b)
        got = f32[b].item()
        if math.isnan(want):
            assert math.isnan(got), f"{b:#04x} must be NaN"
            continue
        assert got == want and math.copysign(1, got) == math.copysign(1, want), f"{b:#04x}: {got} vs {want}"
    fin = _FINITE.view(E4M3)
    for dt in (torch.bfloat16, torch.float16):
        assert torch.equal(fin.to(dt).double(), fin.double()), f"an e4m3 value is not exact in {dt}"
        _bits_equal(fin.float().to(dt), fin.to(dt), f"e4m3 -> fp32 -> {dt} vs e4m3 -> {dt}")
    assert F.E4M3_MAX == _e4m3_by_bits(0x7E) == 448.0


# ---- the quantizer -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_quantize_follows_its_rules(dtype):
    """N = 300, K = 176: 3 x 2 tiles, the last row and column of tiles partial; one tile all zero
    (signed zeros). Scale = fp32 amax / 448 per tile (1.0 for the zero tile); every code the nearest
    e4m3 of the fp32 x / scale, ties to the even code, found by brute force."""
    n, k = 300, 176
    x = _tiled_randn(n, k, seed=3, dtype=dtype)
    zs = torch.where(torch.rand(128, 48, generator=torch.Generator().manual_seed(1)) < 0.5, -0.0, 0.0)
    x[128:256, 128:176] = zs.to(dtype)
    w = F.quantize_fp8_block(x)
    assert w.weight.dtype == E4M3 and w.weight.shape == (n, k) and w.weight.is_contiguous()
    assert w.weight_scale_inv.dtype == torch.float32 and w.weight_scale_inv.shape == (3, 2)
    xf = x.float()
    for i in range(3):
        for j in range(2):
            tile = xf[128 * i:128 * (i + 1), 128 * j:128 * (j + 1)]
            amax = tile.abs().max()
            want = amax / torch.tensor(448.0) if amax > 0 else torch.tensor(1.0)
            assert w.weight_scale_inv[i, j].item() == want.item(), f"tile ({i}, {j})"
    assert w.weight_scale_inv[1, 1].item() == F.FP8_ZERO_BLOCK_SCALE == 1.0
    v = xf / _scales_by_loop(w.weight_scale_inv, n, k).float()
    _bits_equal(_codes(w.weight), _nearest_codes_brute_force(v), "codes vs brute-force nearest")
    # the zero tile keeps the sign of each zero; each nonzero tile reaches 448
    assert torch.equal(_codes(w.weight[128:256, 128:176]), torch.signbit(zs).to(torch.uint8) << 7)
    for i, j in [(0, 0), (0, 1), (1, 0), (2, 0), (2, 1)]:
        t = w.weight[128 * i:128 * (i + 1), 128 * j:128 * (j + 1)].float().abs().max().item()
        assert t == 448.0, f"tile ({i}, {j}) max |code| {t}"


def test_rounding_ties_saturation_and_signed_zero():
    r = F._to_e4m3_saturating
    cases = [  # (value, expected code)
        (1.0625, 0x38),        # 1 (0x38) vs 1.125 (0x39): tie -> even 0x38
        (1.1875, 0x3A),        # 1.125 (0x39) vs 1.25 (0x3A): tie -> even 0x3A
        (1.5 * 2.0 ** -9, 0x02),  # subnormals 2^-9 (0x01) vs 2^-8 (0x02): tie -> 0x02
        (2.0 ** -10, 0x00),    # 0 vs 2^-9: tie -> +0
        (-(2.0 ** -10), 0x80),  # -> -0
        (-1e-5, 0x80), (-0.0, 0x80), (0.0, 0x00),
        (440.0, 0x7E),         # 416 (0x7D) vs 448: nearer 448
        (464.0, 0x7E),         # would tie to 480 (which is NaN's slot): saturates to 448
        (1e9, 0x7E), (-1e9, 0xFE), (-450.0, 0xFE),
        (float.fromhex("0x1.2p+0"), 0x39),  # 1.125 exactly
    ]
    got = _codes(r(torch.tensor([c[0] for c in cases], dtype=torch.float32))).tolist()
    want = [c[1] for c in cases]
    assert got == want, "\n".join(f"{v}: got {g:#x}, want {c:#x}" for (v, c), g in zip(cases, got) if g != c)
    # one fp32 ulp off a tie goes to the nearer side
    t = torch.tensor([1.0625, 1.1875], dtype=torch.float32)
    assert _codes(r(torch.nextafter(t, torch.tensor(2.0)))).tolist() == [0x39, 0x3A]
    assert _codes(r(torch.nextafter(t, torch.tensor(0.0)))).tolist() == [0x38, 0x39]


@pytest.mark.parametrize("seed", [0, 1])
def test_quantize_error_bound(seed):
    """|x - dequantize(q)| <= s * (max(2^-4 |x/s|, 2^-10) + 2^-22 |x/s|) per element (e4m3 rounding:
    relative 2^-4 for normals, half the subnormal gap 2^-10; the fp32 division and the fp32
    dequantize multiply add 2^-24 each), and the normwise error is near the 3-bit-mantissa level."""
    n, k = 200, 304
    x = _tiled_randn(n, k, seed=seed)
    w = F.quantize_fp8_block(x)
    s = _scales_by_loop(w.weight_scale_inv, n, k)
    dq = F.dequantize_fp8_block(w).double()
    a = x.double().abs() / s
    bound = s * (torch.maximum(a * 2.0 ** -4, torch.full_like(a, 2.0 ** -10)) * (1 + 2.0 ** -20) + 2.0 ** -22 * a)
    over = (x.double() - dq).abs() - bound
    assert float(over.max()) <= 0, f"error exceeds its bound by {float(over.max()):.3g}"
    assert bool((a < 2.0 ** -6).any()), "the data never reached e4m3 subnormals"
    rel = float((x.double() - dq).norm() / x.double().norm())
    assert rel < 2.0 ** -4, rel


def _grid_weight(n: int, k: int, seed: int, *, pow2: bool = False) -> FP8BlockWeight:
    """Random finite codes (both zeros included), every tile holding a +-448, scales with at most 13
    significant bits (powers of two with ``pow2``), about 1 tile in 6 all zero with scale 1.0."""
    g = torch.Generator().manual_seed(seed)
    gn, gk = F.scale_grid(n, k)
    codes = _FINITE[torch.randint(0, _FINITE.numel(), (n, k), generator=g)]
    e = torch.randint(-20, 1, (gn, gk), generator=g).double()
    mant = 1.0 if pow2 else 1.0 + torch.randint(0, 4096, (gn, gk), generator=g).double() / 4096
    scale = (2.0 ** e * mant).float()
    zero = torch.rand(gn, gk, generator=g) < 1 / 6
    zero[0, 0] = True
    zero[-1, -1] = False
    for i in range(gn):
        for j in range(gk):
            tile = codes[128 * i:128 * (i + 1), 128 * j:128 * (j + 1)]
            if zero[i, j]:
                tile.copy_(torch.where(torch.rand(tile.shape, generator=g) < 0.5, 0x80, 0x00).to(torch.uint8))
                scale[i, j] = 1.0
            else:
                r = int(torch.randint(0, tile.shape[0], (1,), generator=g))
                c = int(torch.randint(0, tile.shape[1], (1,), generator=g))
                tile[r, c] = 0x7E if bool(torch.rand(1, generator=g) < 0.5) else 0xFE
    return FP8BlockWeight(codes.view(E4M3), scale).validate()


@pytest.mark.parametrize("n,k", [(300, 400), (48, 176), (128, 128)])
def test_values_on_the_grid_round_trip_bit_for_bit(n, k):
    q = _grid_weight(n, k, seed=n + k)
    back = F.quantize_fp8_block(F.dequantize_fp8_block(q))
    _bits_equal(back.weight_scale_inv, q.weight_scale_inv, "scales after the round trip")
    _bits_equal(back.weight, q.weight, "codes after the round trip")
    # bf16 dequantization keeps 8 bits: exact for power-of-two scales
    q2 = _grid_weight(n, k, seed=n + k + 1, pow2=True)
    back = F.quantize_fp8_block(F.dequantize_fp8_block(q2, torch.bfloat16))
    _bits_equal(back.weight_scale_inv, q2.weight_scale_inv, "scales after the bf16 round trip")
    _bits_equal(back.weight, q2.weight, "codes after the bf16 round trip")


def test_quantize_rejects_bad_input():
    for bad, pat in [(torch.ones(2, 24), "K a positive multiple of 16"),
                     (torch.ones(0, 32), "N >= 1"),
                     (torch.ones(64), "2-D"),
                     (torch.ones(2, 64, dtype=torch.float64), "bfloat16, float16 or float32"),
                     (torch.tensor([[float("nan")] + [1.0] * 15]), "NaN or Inf"),
                     (torch.tensor([[float("inf")] + [1.0] * 15]), "NaN or Inf")]:
        with pytest.raises(ValueError, match=pat):
            F.quantize_fp8_block(bad)


# ---- dequantize ----------------------------------------------------------------------------------


def test_dequantize_is_exact():
    """float64 dequantize == the bit-level float64 evaluation; fp32 == it rounded once; bf16/fp16 ==
    the fp32 result cast. Random finite codes and arbitrary fp32 scales, partial tiles."""
    g = torch.Generator().manual_seed(2)
    n, k = 200, 144
    codes = _FINITE[torch.randint(0, _FINITE.numel(), (n, k), generator=g)].view(E4M3)
    scale = torch.rand(2, 2, generator=g) * 0.01 + 1e-4
    w = FP8BlockWeight(codes, scale).validate()
    want64 = _dequant_f64_by_bits(w)
    _bits_equal(F.dequantize_fp8_block(w, torch.float64), want64, "float64 dequantize")
    d32 = F.dequantize_fp8_block(w)
    _bits_equal(d32, want64.to(torch.float32), "fp32 dequantize vs the float64 evaluation")
    assert not torch.equal(d32.double(), want64), "the scales never forced an fp32 rounding"
    for dt in (torch.bfloat16, torch.float16):
        _bits_equal(F.dequantize_fp8_block(w, dt), d32.to(dt), f"{dt} dequantize")
    for bad in (torch.int32, E4M3, "float32"):
        with pytest.raises(ValueError, match="dequantize_fp8_block: dtype"):
            F.dequantize_fp8_block(w, bad)


# ---- FP8BlockWeight.validate and the loader ------------------------------------------------------


def _validate_cases():
    base = _rand_weight(200, 304, seed=1)  # grid [2, 3]
    w, s = base.weight, base.weight_scale_inv
    meta = lambda t: torch.empty(t.shape, dtype=t.dtype, device="meta")  # noqa: E731
    return [  # (case, field named, weight)
        ("weight_uint8", "weight", FP8BlockWeight(w.view(torch.uint8), s)),
        ("weight_e5m2", "weight", FP8BlockWeight(w.view(torch.float8_e5m2), s)),
        ("weight_bf16", "weight", FP8BlockWeight(w.bfloat16(), s)),
        ("weight_1d", "weight", FP8BlockWeight(w.flatten(), s)),
        ("k_24", "weight", FP8BlockWeight(w[:, :24].contiguous(), s[:, :1].contiguous())),
        ("k_300", "weight", FP8BlockWeight(torch.zeros(200, 300).to(E4M3), s)),
        ("k_0", "weight", FP8BlockWeight(w[:, :0].contiguous(), s[:, :0].contiguous())),
        ("weight_strided", "weight", FP8BlockWeight(w.t().contiguous().t(), s)),
        ("scale_bf16", "weight_scale_inv", FP8BlockWeight(w, s.bfloat16())),
        ("scale_float64", "weight_scale_inv", FP8BlockWeight(w, s.double())),
        ("scale_float", "weight_scale_inv", FP8BlockWeight(w, 0.5)),
        ("scale_floor_grid", "weight_scale_inv", FP8BlockWeight(w, s[:1, :1].contiguous())),
        ("scale_transposed_grid", "weight_scale_inv", FP8BlockWeight(w, s.t().contiguous())),
        ("scale_per_row", "weight_scale_inv", FP8BlockWeight(w, torch.ones(200, 3))),
        ("scale_1d", "weight_scale_inv", FP8BlockWeight(w, s.flatten())),
        ("scale_strided", "weight_scale_inv", FP8BlockWeight(w, torch.ones(4, 3)[::2])),
        ("scale_on_meta", "weight_scale_inv", FP8BlockWeight(w, meta(s))),
    ]


def test_validate_names_the_field():
    w = _rand_weight(48, 176, seed=1)
    assert w.validate() is w and (w.N, w.K) == (48, 176) and w.weight_scale_inv.shape == (1, 2)
    for case, field, bad in _validate_cases():
        with pytest.raises(ValueError, match=rf"FP8BlockWeight: {field} ") as e:
            bad.validate()
        msg = str(e.value)
        assert "shape" in msg or " on " in msg or "Tensor" in msg, case
        if case.startswith("scale_") and "grid" in case:
            assert "[2, 3]" in msg and "[200, 304]" in msg, msg


def _state_dict(w: FP8BlockWeight):
    return {f"{PREFIX}.weight": w.weight, f"{PREFIX}.weight_scale_inv": w.weight_scale_inv,
            f"{PREFIX}.input_scale": torch.tensor(1.0), "model.layers.5.mlp.up_proj.weight": w.weight.clone()}


@pytest.mark.parametrize("n,k", [(48, 176), (300, 256), (256, 5120)])
def test_loader_does_not_copy(n, k):
    w = _rand_weight(n, k, seed=n)
    sd = _state_dict(w)
    got = F.load_fp8_block(sd, PREFIX)
    assert got.weight.data_ptr() == sd[f"{PREFIX}.weight"].data_ptr()
    assert got.weight_scale_inv.data_ptr() == sd[f"{PREFIX}.weight_scale_inv"].data_ptr()
    assert got.weight is sd[f"{PREFIX}.weight"] and got.weight_scale_inv is sd[f"{PREFIX}.weight_scale_inv"]
    assert (got.N, got.K) == (n, k)
    _bits_equal(F.dequantize_fp8_block(got), F.dequantize_fp8_block(w), "loaded weight")


def test_loader_names_missing_keys_and_bad_tensors():
    w = _rand_weight(48, 176, seed=2)
    sd = _state_dict(w)
    for suffix in ("weight", "weight_scale_inv"):
        key = f"{PREFIX}.{suffix}"
        with pytest.raises(KeyError) as e:
            F.load_fp8_block({k: v for k, v in sd.items() if k != key}, PREFIX)
        assert key in str(e.value) and repr(PREFIX) in str(e.value), str(e.value)
    with pytest.raises(KeyError, match="model.layers.6.mlp.gate_proj.weight"):
        F.load_fp8_block(sd, "model.layers.6.mlp.gate_proj")
    cases = [  # (key suffix, bad tensor)
        ("weight", w.weight.view(torch.uint8)),
        ("weight", w.weight.float()),
        ("weight", w.weight[:, :40].contiguous()),          # K = 40
        ("weight", w.weight.t().contiguous().t()),
        ("weight_scale_inv", w.weight_scale_inv.bfloat16()),
        ("weight_scale_inv", w.weight_scale_inv[:, :1].contiguous()),
        ("weight_scale_inv", torch.ones(48, 2)),
        ("weight_scale_inv", torch.ones(2)),
    ]
    for suffix, bad in cases:
        key = f"{PREFIX}.{suffix}"
        with pytest.raises(ValueError) as e:
            F.load_fp8_block({**sd, key: bad}, PREFIX)
        msg = str(e.value)
        assert key in msg, f"a bad {suffix} {bad.dtype} {list(bad.shape)}: {msg}"
        assert str(list(bad.shape)) in msg or str(bad.dtype) in msg or "strides" in msg, msg
    with pytest.raises(ValueError, match=rf"{PREFIX}.weight_scale_inv must be a Tensor"):
        F.load_fp8_block({**sd, f"{PREFIX}.weight_scale_inv": 1.0}, PREFIX)


# ---- the reference fp8_block_linear --------------------------------------------------------------


def _linear_case(m, n, k, xdt=torch.bfloat16, *, seed=0, bias=None, lead=()):
    w = _rand_weight(n, k, seed=seed + 100)
    x = qt.randn_nonzero(*lead, m, k, dtype=xdt, seed=seed)
    b = None if bias is None else qt.randn_nonzero(n, dtype=bias, seed=seed + 7)
    return x, w, b


def _f64_linear(x, w, b):
    """The float64 evaluation, independent of the reference: x @ W^T with W decoded bit by bit."""
    y = x.double() @ _dequant_f64_by_bits(w).t()
    return y if b is None else y + b.double()


def _assert_within_bound(y, x, w, b, tag, bound=None):
    """|y - y64| <= err (+ spacing(y)/2 for 16-bit outputs) on every element; <= 1 ulp from y64
    rounded to y's dtype wherever err is below half an ulp. Returns the fraction where it is.
    ``bound``: fp8_block_linear_f64_bound(x, w, b) when the caller has it already."""
    y64, err = bound or fp8_block_linear_f64_bound(x, w.weight, w.weight_scale_inv, b)
    slack = err if y.dtype == torch.float32 else err + qt.spacing(y) / 2
    over = (y.double() - y64).abs() - slack
    assert float(over.max()) <= 0, f"{tag}: outside the fp32 error bound by {float(over.max()):.3g}"
    sure = err < qt.spacing(y64.to(y.dtype)) / 2
    u = qt.ulp_diff(y, y64.to(y.dtype))
    worst = int(u[sure].max()) if bool(sure.any()) else 0
    assert worst <= 1, f"{tag}: > 1 ulp where the bound guarantees 1; {qt.ulp_histogram(y, y64.to(y.dtype))}"
    return float(sure.double().mean())


@pytest.mark.parametrize("xdt", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("bias", [None, torch.float32, "x"])
@pytest.mark.parametrize("n,k", [(48, 176), (200, 1024), (48, 5120)])
def test_fp8_block_linear_vs_float64(xdt, bias, n, k):
    m = 5
    bdt = None if bias is None else (xdt if bias == "x" else bias)
    x, w, b = _linear_case(m, n, k, xdt, seed=k + n, bias=bdt, lead=(2,))
    want = _f64_linear(x, w, b)
    bound = fp8_block_linear_f64_bound(x, w.weight, w.weight_scale_inv, b)
    for out in (torch.float32, None):
        y = fp8_block_linear(x, w.weight, w.weight_scale_inv, b, out)
        assert y.dtype == (out or xdt) and y.shape == (2, m, n) and y.is_contiguous()
        assert not torch.isnan(y).any()
        _assert_within_bound(y, x, w, b, f"x {xdt}, out {out}, N={n} K={k}", bound)
        if out is torch.float32:
            y32 = y
        # acc_dtype=float64 is the float64 evaluation rounded once
        y64 = fp8_block_linear(x, w.weight, w.weight_scale_inv, b, out, acc_dtype=torch.float64)
        _bits_equal(y64, want.to(y.dtype), "acc_dtype=float64 vs the independent float64 evaluation")
    rel = float((y32.double() - want).norm() / want.norm())
    assert rel < 1e-6, f"normwise relative error {rel:.3g}"
    h64 = bound[0]
    assert float(((h64 - want).abs() / want.abs()).max()) < 2.0 ** -40


def test_fp8_block_linear_small_k_is_mostly_within_1_ulp():
    x, w, b = _linear_case(8, 64, 16, seed=9, bias=torch.float32)
    y = fp8_block_linear(x, w.weight, w.weight_scale_inv, b)
    assert _assert_within_bound(y, x, w, b, "K=16") > 0.9


def _integer_case(m, n, k, seed):
    """Small integers in x (bf16) and w (e4m3): every product and every block sum (|.| <= 128 * 64)
    is an exact fp32 integer whatever the order, so only the contract's rounding points remain."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-8, 9, (m, k), generator=g).to(torch.bfloat16)
    wv = torch.randint(-8, 9, (n, k), generator=g).float().to(E4M3)
    gn, gk = F.scale_grid(n, k)
    s = (torch.rand(gn, gk, generator=g) * 0.01 + 1e-4).float()  # arbitrary fp32: products round
    return x, FP8BlockWeight(wv, s).validate()


def test_block_scale_multiplies_the_fp32_block_sum_blocks_in_order():
    """On exact-block-sum data the reference equals, bit for bit, the contract written as a loop:
    acc = fp32(S_0 * s_0); acc = fp32(acc + fp32(S_b * s_b)) for b = 1, 2, ...; + bias; one
    rounding. Dequantize-then-matmul (scale per element) or another block order give other bits."""
    m, n, k = 3, 200, 400  # blocks of 128, 128, 128, 16 along K; tile rows of 128 and 72
    x, w = _integer_case(m, n, k, seed=4)
    bias = qt.randn_nonzero(n, dtype=torch.float32, seed=5)
    xs, ws = x.float(), w.weight.float()
    f32 = torch.float32
    want = torch.empty(m, n, dtype=f32)
    for r in range(m):
        for j in range(n):
            acc = None
            for b0 in range(0, k, 128):
                s_blk = torch.tensor(float(xs[r, b0:b0 + 128].double() @ ws[j, b0:b0 + 128].double()), dtype=f32)
                term = s_blk * w.weight_scale_inv[j // 128, b0 // 128]
                acc = term if acc is None else acc + term
            want[r, j] = acc + bias[j]
    y = fp8_block_linear(x, w.weight, w.weight_scale_inv, bias, torch.float32)
    _bits_equal(y, want, "the block rule written as a loop")
    _bits_equal(fp8_block_linear(x, w.weight, w.weight_scale_inv, bias), want.bfloat16(), "bf16 out")
    deq_first = (x.float() @ F.dequantize_fp8_block(w).t()) + bias
    assert not torch.equal(deq_first, y), "dequantize-then-matmul gave the same bits: test cannot fail"
    rev = torch.empty(m, n, dtype=f32)  # the same terms added from the last block down
    for r in range(m):
        for j in range(n):
            terms = [torch.tensor(float(xs[r, b0:b0 + 128].double() @ ws[j, b0:b0 + 128].double()), dtype=f32)
                     * w.weight_scale_inv[j // 128, b0 // 128] for b0 in range(0, k, 128)]
            acc = terms[-1]
            for t in reversed(terms[:-1]):
                acc = acc + t
            rev[r, j] = acc + bias[j]
    assert not torch.equal(rev, y), "the block order never mattered: test cannot fail"


def test_fp8_block_linear_out_dtypes_and_shapes():
    x, w, _ = _linear_case(3, 48, 176, lead=(2, 5))
    args = (w.weight, w.weight_scale_inv)
    y32 = fp8_block_linear(x, *args, None, torch.float32)
    assert y32.shape == (2, 5, 3, 48)
    for dt in (torch.bfloat16, torch.float16, torch.float32):
        _bits_equal(fp8_block_linear(x, *args, None, dt), y32.to(dt), f"out_dtype {dt}: one rounding")
    wide = qt.randn_nonzero(4, 352, seed=3)
    _bits_equal(fp8_block_linear(wide[:, :176], *args), fp8_block_linear(wide[:, :176].contiguous(), *args),
                "sliced x")
    for shape in ((0, 176), (2, 0, 176)):
        e = fp8_block_linear(torch.empty(shape, dtype=torch.bfloat16), *args)
        assert e.shape == (*shape[:-1], 48) and e.dtype == torch.bfloat16


def test_fp8_block_linear_is_row_invariant_at_every_m():
    """Every M in 1..32 at a model-width K (40 blocks) with a bias: row r of the M-row call is the
    1-row call of that row; and a row of Inf/NaN leaves the others untouched."""
    x, w, b = _linear_case(32, 48, 5120, seed=4, bias=torch.bfloat16)
    fn = lambda t: fp8_block_linear(t, w.weight, w.weight_scale_inv, b)  # noqa: E731
    qt.assert_row_invariant(fn, x)
    bad = x.clone()
    bad[3, 7] = float("inf")
    bad[9, 0] = float("nan")
    yb, y = fn(bad), fn(x)
    keep = [r for r in range(32) if r not in (3, 9)]
    _bits_equal(yb[keep], y[keep], "rows next to Inf/NaN rows")
    assert torch.isnan(yb[9]).all()


@given(data=st.data())
def test_fp8_block_linear_row_invariance_fuzz(data):
    m = data.draw(st.integers(1, 32), label="M")
    row = data.draw(st.integers(0, m - 1), label="row")
    n = data.draw(st.integers(1, 300), label="N")
    k = 16 * data.draw(st.integers(1, 26), label="K/16")
    xdt = data.draw(st.sampled_from([torch.bfloat16, torch.float16]), label="x dtype")
    out = data.draw(st.sampled_from([None, torch.float32]), label="out_dtype")
    seed = data.draw(st.integers(0, 2 ** 16), label="seed")
    x, w, b = _linear_case(m, n, k, xdt, seed=seed, bias=torch.float32)
    fn = lambda t: fp8_block_linear(t, w.weight, w.weight_scale_inv, b, out)  # noqa: E731
    qt.assert_row_invariant_at(fn, x, row)


def _linear_args():
    x, w, b = _linear_case(4, 48, 176, seed=1, bias=torch.bfloat16)
    return {"x": x, "w": w.weight, "w_scale_inv": w.weight_scale_inv, "bias": b, "out_dtype": None}


def _linear_bad_cases():
    a0 = _linear_args()
    m, k = a0["x"].shape
    n = a0["w"].shape[0]
    meta = lambda t: torch.empty(t.shape, dtype=t.dtype, device="meta")  # noqa: E731
    cases = []

    def case(name, arg, **repl):
        args = dict(_linear_args())
        for key, v in repl.items():
            args[key] = v(args) if callable(v) else v
        cases.append((name, arg, args))

    case("x_float32", "x", x=lambda a: a["x"].float())
    case("x_e4m3", "x", x=lambda a: a["x"].float().to(E4M3))
    case("x_0d", "x", x=torch.tensor(1.0, dtype=torch.bfloat16))
    case("x_k_mismatch", "x", x=lambda a: a["x"][:, :160].contiguous())
    case("x_col_strided", "x", x=lambda a: qt.randn_nonzero(m, 2 * k)[:, ::2])
    case("x_list", "x", x=[[1.0]])
    case("w_bf16", "w", w=lambda a: a["w"].bfloat16())
    case("w_uint8", "w", w=lambda a: a["w"].view(torch.uint8))
    case("w_e5m2", "w", w=lambda a: a["w"].view(torch.float8_e5m2))
    case("w_1d", "w", w=lambda a: a["w"].flatten())
    case("w_k_40", "w", x=lambda a: a["x"][:, :40].contiguous(), w=lambda a: a["w"][:, :40].contiguous(),
         w_scale_inv=lambda a: a["w_scale_inv"][:, :1].contiguous())
    case("w_strided", "w", w=lambda a: torch.zeros(n, 2 * k).to(E4M3)[:, ::2])
    case("w_meta", "w", w=lambda a: meta(a["w"]))
    case("scale_bf16", "w_scale_inv", w_scale_inv=lambda a: a["w_scale_inv"].bfloat16())
    case("scale_float64", "w_scale_inv", w_scale_inv=lambda a: a["w_scale_inv"].double())
    case("scale_floor_grid", "w_scale_inv", w_scale_inv=lambda a: a["w_scale_inv"][:, :1].contiguous())
    case("scale_extra_row", "w_scale_inv", w_scale_inv=torch.ones(2, 2))
    case("scale_per_row", "w_scale_inv", w_scale_inv=torch.ones(n, 2))
    case("scale_1d", "w_scale_inv", w_scale_inv=torch.ones(2))
    case("scale_strided", "w_scale_inv", w_scale_inv=torch.ones(1, 4)[:, ::2])
    case("scale_meta", "w_scale_inv", w_scale_inv=lambda a: meta(a["w_scale_inv"]))
    case("scale_float", "w_scale_inv", w_scale_inv=1.0)
    case("bias_short", "bias", bias=lambda a: a["bias"][:-1])
    case("bias_2d", "bias", bias=lambda a: a["bias"].view(1, n))
    case("bias_fp16_for_bf16_x", "bias", bias=lambda a: a["bias"].half())
    case("bias_strided", "bias", bias=torch.ones(2 * n)[::2])
    case("bias_meta", "bias", bias=lambda a: meta(a["bias"]))
    case("out_float64", "out_dtype", out_dtype=torch.float64)
    case("out_e4m3", "out_dtype", out_dtype=E4M3)
    return cases


def test_fp8_block_linear_bad_input_names_the_argument():
    for name, arg, args in _linear_bad_cases():
        with pytest.raises(ValueError, match=rf"qwen38\.fp8_block_linear: {arg}\b") as e:
            fp8_block_linear(**args)
        msg = str(e.value)
        assert "shape" in msg or " on " in msg or "got" in msg, name
        if name in ("scale_floor_grid", "scale_extra_row", "scale_per_row"):
            assert "[1, 2]" in msg and "[48, 176]" in msg, msg
    with pytest.raises(ValueError, match=r"qwen38\.fp8_block_linear: acc_dtype"):
        fp8_block_linear(**_linear_args(), acc_dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"qwen38\.fp8_block_linear: x's last dimension .*\[4, 160\]"):
        fp8_block_linear(**{**_linear_args(), "x": _linear_args()["x"][:, :160].contiguous()})


# ---- the output head -----------------------------------------------------------------------------


def _head_case(m, v, k=5120, dt=torch.bfloat16, seed=0):
    x = qt.randn_nonzero(m, k, dtype=dt, seed=seed)
    w = qt.randn_nonzero(v, k, dtype=dt, seed=seed + 1, scale=0.02)
    return x, w


@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16])
def test_head_logits_vs_float64(dt):
    x, w = _head_case(6, 300, dt=dt, seed=1)
    y = head_logits(x, w)
    assert y.dtype == torch.float32 and y.shape == (6, 300) and y.is_contiguous()
    y64, err = head_logits_f64_bound(x, w)
    want = x.double() @ w.double().t()
    assert float(((y64 - want).abs() / want.abs()).max()) < 2.0 ** -40
    over = (y.double() - y64).abs() - err
    assert float(over.max()) <= 0, f"outside the fp32 accumulation bound by {float(over.max()):.3g}"
    assert float((y.double() - want).norm() / want.norm()) < 1e-6
    _bits_equal(head_logits(x, w, acc_dtype=torch.float64), want.float(), "acc_dtype=float64")
    # leading dims and empty row sets
    x3 = x.view(2, 3, -1)
    _bits_equal(head_logits(x3, w), y.view(2, 3, -1), "leading dims")
    assert head_logits(x[:0], w).shape == (0, 300)


def test_head_is_row_invariant_at_every_m():
    x, w = _head_case(32, 96, seed=2)
    qt.assert_row_invariant(lambda t: head_logits(t, w), x)
    qt.assert_row_invariant(lambda t: head_argmax(t, w), x)


@given(data=st.data())
def test_head_row_invariance_fuzz(data):
    m = data.draw(st.integers(1, 32), label="M")
    row = data.draw(st.integers(0, m - 1), label="row")
    v = data.draw(st.integers(1, 400), label="V")
    k = 16 * data.draw(st.integers(1, 40), label="K/16")
    seed = data.draw(st.integers(0, 2 ** 16), label="seed")
    x, w = _head_case(m, v, k, seed=seed)
    qt.assert_row_invariant_at(lambda t: head_logits(t, w), x, row)
    qt.assert_row_invariant_at(lambda t: head_argmax(t, w), x, row)


def test_head_argmax_is_argmax_of_head_logits():
    x, w = _head_case(16, 1000, seed=3)
    logits = head_logits(x, w)
    idx, val = head_argmax(x, w)
    assert idx.dtype == torch.int64 and val.dtype == torch.float32 and idx.shape == val.shape == (16,)
    assert torch.equal(idx, logits.argmax(-1))
    _bits_equal(val, logits.gather(-1, idx[:, None])[:, 0], "winning logits")
    _bits_equal(val, logits.amax(-1), "winning logits are the maxima")


def test_head_argmax_ties_go_to_the_lowest_index():
    """Integer data (exact logits whatever the order) with the winner of each row copied to three
    columns: the lowest one wins. Also: a row of zero logits (+0 and -0 tie) -> index 0; a tie
    between the first and the last column -> 0; a NaN row -> its first NaN; other rows unaffected."""
    m, v, k = 8, 64, 256
    g = torch.Generator().manual_seed(6)
    x = torch.randint(-4, 5, (m, k), generator=g).to(torch.bfloat16)
    w = torch.randint(-1, 2, (v, k), generator=g).to(torch.bfloat16)
    tied = []
    for r in range(m - 2):
        pos = sorted(torch.randperm(v, generator=g)[:3].tolist()) if r else [0, 31, v - 1]
        win = torch.sign(x[r].float()).to(torch.bfloat16)  # logit sum |x[r]|: the row's maximum
        for p in pos:
            w[p] = win
        tied.append(pos)
    # a later row may overwrite an earlier row's copies: keep only rows whose copies survive
    x[m - 2] = 0                                           # every logit a (signed) zero
    x[m - 1, 5] = float("nan")
    logits = head_logits(x, w)
    idx, val = head_argmax(x, w)
    checked = 0
    for r, pos in enumerate(tied):
        hits = (logits[r] == logits[r].max()).nonzero()[:, 0].tolist()
        if len(hits) < 2:
            continue
        checked += 1
        assert idx[r].item() == hits[0], f"row {r}: ties at {hits}, got {idx[r].item()}"
        if all(torch.equal(w[p], torch.sign(x[r].float()).to(torch.bfloat16)) for p in pos):
            assert idx[r].item() == pos[0]
    assert checked >= 4, "too few rows with ties"
    assert idx[0].item() == 0
    assert idx[m - 2].item() == 0 and val[m - 2].item() == 0
    assert idx[m - 1].item() == 0 and math.isnan(val[m - 1].item())
    _bits_equal(val, logits.gather(-1, idx[:, None])[:, 0], "winning logits")
    assert torch.equal(idx, logits.argmax(-1)), "torch.argmax (first maximal, NaN as max) disagrees"
    # the NaN row leaves the others unchanged
    i2, v2 = head_argmax(x[:m - 1], w)
    _bits_equal(i2, idx[:m - 1], "indices without the NaN row")
    _bits_equal(v2, val[:m - 1], "logits without the NaN row")


def test_head_argmax_ties_at_zero_at_huge_values_and_inf():
    """Logits built through a 16-wide K: a maximum of 0 reached by zeros of either sign is a tie
    (lowest index); equal +-2^127 logits tie; an fp32 overflow to +inf wins."""
    k = 16
    x = torch.zeros(2, k, dtype=torch.bfloat16)
    x[0, 0] = -1.0
    x[1, 0] = 1.0
    w = torch.zeros(4, k, dtype=torch.bfloat16)
    w[0, 0] = 2.0 ** 127                                  # row 0: -2^127; row 1: +2^127
    w[2, 0] = -0.0                                        # row 0: (-1)(-0) = +0 products; w[1]: -0
    w[3, 0] = 2.0 ** 127
    logits = head_logits(x, w)
    assert logits[0, 1].item() == 0 and logits[0, 2].item() == 0 and logits[0, 0].item() < 0
    idx, val = head_argmax(x, w)
    assert idx.tolist() == [1, 0] and val.tolist() == [0.0, 2.0 ** 127]
    _bits_equal(val, logits.gather(-1, idx[:, None])[:, 0], "the winner's bits, sign of zero included")
    x2 = torch.full((1, k), 1.0, dtype=torch.bfloat16)
    w2 = torch.zeros(5, k, dtype=torch.bfloat16)
    w2[0] = -1.0
    w2[2] = 2.0 ** 127                                    # 16 * 2^127 = 2^131: fp32 overflow -> +inf
    w2[4] = 2.0 ** 127
    idx, val = head_argmax(x2, w2)
    assert idx.tolist() == [2] and val.item() == float("inf")
    logits = head_logits(x2, w2)
    assert logits[0, 1].item() == 0 and logits[0, 3].item() == 0


def test_head_bad_input_names_the_argument():
    x, w = _head_case(2, 8, k=64)
    meta = lambda t: torch.empty(t.shape, dtype=t.dtype, device="meta")  # noqa: E731
    cases = [  # (arg, x, w)
        ("x", x.float(), w), ("x", x[:, :48].contiguous(), w), ("x", torch.tensor(1.0, dtype=torch.bfloat16), w),
        ("x", qt.randn_nonzero(2, 128)[:, ::2], w),
        ("w", x, w.half()), ("w", x, w.float()), ("w", x, w.flatten()),
        ("w", x[:, :40].contiguous(), w[:, :40].contiguous()),
        ("w", x, torch.zeros(8, 128, dtype=torch.bfloat16)[:, ::2]), ("w", x, meta(w)), ("w", x, None),
    ]
    for fn in (head_logits, head_argmax):
        op = fn.__name__
        for arg, xx, ww in cases:
            with pytest.raises(ValueError, match=rf"qwen38\.{op}: {arg}\b") as e:
                fn(xx, ww)
            assert "shape" in str(e.value) or " on " in str(e.value) or "got" in str(e.value)
    with pytest.raises(ValueError, match=r"qwen38\.head_argmax: w must have at least one row"):
        head_argmax(x, w[:0])
    assert head_logits(x, w[:0]).shape == (2, 0)
    with pytest.raises(ValueError, match=r"qwen38\.head_logits: acc_dtype"):
        head_logits(x, w, acc_dtype=torch.float16)
