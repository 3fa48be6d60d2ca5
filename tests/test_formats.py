"""NVFP4 on the CPU: the format (qwen38_kernels/formats.py) and the reference nvfp4_linear
(qwen38_kernels/reference/gemm.py).

The decode is checked against the E2M1 definition written out bit by bit (not against the module's
table), the quantizer against the rules of its docstring (nearest value, ties to the even index,
saturation, the 2^-9 scale clamp, the sign of zero), the loaders against each other and against the
state dict's storage, and the reference GEMM against float64 evaluations. All CPU, a few seconds.
"""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from qwen38_kernels import formats as F
from qwen38_kernels import testing as qt
from qwen38_kernels.formats import NVFP4Weight
from qwen38_kernels.reference import nvfp4_linear, nvfp4_linear_f64_bound

E4M3 = torch.float8_e4m3fn
PREFIX = "model.layers.3.mlp.down_proj"


# ---- helpers -------------------------------------------------------------------------------------


def _e2m1_by_bits(code: int) -> float:
    """E2M1 from its definition: sign | 2 exponent bits (bias 1) | 1 mantissa bit; exponent 0 is
    subnormal (0 or 0.5)."""
    sign = -1.0 if code & 0x8 else 1.0
    e, m = (code >> 1) & 0x3, code & 0x1
    mag = 0.5 * m if e == 0 else 2.0 ** (e - 1) * (1.0 + 0.5 * m)
    return sign * mag


def _e4m3_bytes(gen, shape, lo: int = 0x01, hi: int = 0x7E) -> torch.Tensor:
    """Random float8_e4m3fn with bit patterns in [lo, hi] (0x01 = 2^-9, 0x38 = 1, 0x7E = 448;
    0x7F is NaN)."""
    return torch.randint(lo, hi + 1, shape, generator=gen, dtype=torch.uint8).view(E4M3)


def _rand_weight(n: int, k: int, seed: int, *, scale_lo=0x28, scale_hi=0x48, gs=0.0123,
                 codes: torch.Tensor | None = None) -> NVFP4Weight:
    """Random codes (all 256 byte values) and block scales; scales 0x28..0x48 = 2^-2..2^2."""
    g = torch.Generator().manual_seed(seed)
    packed = torch.randint(0, 256, (n, k // 2), generator=g, dtype=torch.uint8) if codes is None else codes
    scale = _e4m3_bytes(g, (n, k // 16), scale_lo, scale_hi)
    return NVFP4Weight(packed, scale, torch.tensor(gs, dtype=torch.float32)).validate()


def _codes(w: NVFP4Weight) -> torch.Tensor:
    """uint8 [N, K]: the 4-bit code of every element."""
    return torch.stack((w.packed & 0xF, w.packed >> 4), dim=-1).flatten(-2)


def _pack(codes: torch.Tensor) -> torch.Tensor:
    c = codes.to(torch.uint8).view(codes.shape[0], -1, 2)
    return (c[..., 0] | (c[..., 1] << 4)).contiguous()


def _bits_equal(a: torch.Tensor, b: torch.Tensor, msg: str):
    assert a.dtype == b.dtype and a.shape == b.shape, \
        f"{msg}: {a.dtype} {list(a.shape)} vs {b.dtype} {list(b.shape)}"
    if a.dtype in (torch.uint8, E4M3):
        a, b = a.view(torch.uint8), b.view(torch.uint8)
        n = int((a != b).sum())
        assert n == 0, f"{msg}: {n} of {a.numel()} bytes differ"
    else:
        qt.assert_bitwise_equal(a, b, msg)


def _dequant_f64_by_bits(w: NVFP4Weight) -> torch.Tensor:
    table = torch.tensor([_e2m1_by_bits(c) for c in range(16)], dtype=torch.float64)
    e = table[_codes(w).long()]
    s = w.scale.to(torch.float64).repeat_interleave(16, dim=1)
    return e * s * float(w.global_scale)


# ---- the E2M1 table and the decode ---------------------------------------------------------------


def test_e2m1_table():
    assert F.E2M1_VALUES.dtype == torch.float32 and F.E2M1_VALUES.shape == (16,)
    assert F.E2M1_VALUES.tolist() == [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                                      -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
    for c in range(16):
        assert F.E2M1_VALUES[c].item() == _e2m1_by_bits(c), f"code {c:#x}"
    assert torch.signbit(F.E2M1_VALUES[8]), "code 8 is -0"
    assert not torch.signbit(F.E2M1_VALUES[0]), "code 0 is +0"


def test_every_byte_decodes_to_its_low_and_high_nibble():
    """Bytes 0..255 as an [8, 32] packed weight (K = 64), scale 1, global scale 1: element 2i is the
    low nibble of byte i, element 2i + 1 its high nibble, signs of zero included."""
    packed = torch.arange(256, dtype=torch.uint8).view(8, 32)
    w = NVFP4Weight(packed, torch.ones(8, 4).to(E4M3), torch.tensor(1.0)).validate()
    for dq in (F.unpack_e2m1(packed), F.dequantize_nvfp4(w)):
        assert dq.shape == (8, 64) and dq.dtype == torch.float32
        flat = dq.flatten()
        for b in range(256):
            lo, hi = _e2m1_by_bits(b & 0xF), _e2m1_by_bits(b >> 4)
            got = (flat[2 * b].item(), flat[2 * b + 1].item())
            assert got == (lo, hi), f"byte {b:#04x}: got {got}, want (low {lo}, high {hi})"
            assert (math.copysign(1, got[0]), math.copysign(1, got[1])) == \
                   (math.copysign(1, lo), math.copysign(1, hi)), f"byte {b:#04x}: sign of zero"


def test_e2m1_times_every_e4m3_is_exact_in_bf16_and_fp16():
    """MODEL.md: an e2m1 x e4m3 product has at most 6 significant bits, so the kernels may form it
    in bf16 or fp16 without rounding. Every finite e4m3 (both signs) times every e2m1."""
    s = torch.tensor([b for b in range(256) if b & 0x7F != 0x7F], dtype=torch.uint8).view(E4M3)
    prod = F.E2M1_VALUES.double()[:, None] * s.double()[None, :]
    for dt in (torch.bfloat16, torch.float16, torch.float32):
        assert torch.equal(prod.to(dt).double(), prod), f"an e2m1 x e4m3 product is not exact in {dt}"


@pytest.mark.parametrize("gs", [1.0, 0.0123, 3.7e-5, 1.0 / 3.0])
def test_dequantize_is_exact(gs):
    """fp32 dequantize == the float64 evaluation rounded once to fp32 (all e4m3 scales, 0 included);
    bf16/fp16 dequantize == that fp32 result cast; float64 dequantize == the float64 evaluation."""
    w = _rand_weight(24, 128, seed=7, scale_lo=0x00, scale_hi=0x7E, gs=gs)
    want64 = _dequant_f64_by_bits(w)
    _bits_equal(F.dequantize_nvfp4(w, torch.float64), want64, "float64 dequantize")
    d32 = F.dequantize_nvfp4(w)
    _bits_equal(d32, want64.to(torch.float32), "fp32 dequantize vs the float64 evaluation")
    for dt in (torch.bfloat16, torch.float16):
        _bits_equal(F.dequantize_nvfp4(w, dt), d32.to(dt), f"{dt} dequantize")
    for bad in (torch.int32, torch.float8_e4m3fn):
        with pytest.raises(ValueError, match="dequantize_nvfp4: dtype"):
            F.dequantize_nvfp4(w, bad)


# ---- the quantizer -------------------------------------------------------------------------------


def _varied_blocks(n: int, k: int, seed: int, dtype=torch.float32, decades: float = 1.5) -> torch.Tensor:
    """randn with every 16-block scaled by 10^u, u uniform in [-decades, decades]."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, k // 16, 16, generator=g)
    x = x * 10.0 ** ((torch.rand(n, k // 16, 1, generator=g) * 2 - 1) * decades)
    return x.view(n, k).to(dtype)


def _nearest_codes_brute_force(v: torch.Tensor) -> torch.Tensor:
    """Nearest E2M1 magnitude by distance to each of the 8 (ties: the even index), sign bit from v."""
    mags = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)
    d = (v.double().abs()[..., None] - mags).abs()
    best = d.min(-1, keepdim=True).values
    ties = d == best                              # one or two neighbouring True
    idx = torch.arange(8)
    even_tie = (ties & (idx % 2 == 0)).any(-1)
    first = ties.int().argmax(-1)
    last = 7 - ties.flip(-1).int().argmax(-1)
    pick = torch.where(even_tie & (first % 2 == 1), last, first)
    return (pick | (torch.signbit(v).long() << 3)).to(torch.uint8)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_quantize_follows_its_rules(dtype):
    """Default global scale amax/(6*448); block scale = e4m3(clamp(block_amax/6/gs)); every code the
    nearest E2M1 value of x/(fp32(s)*gs) (ties to even, saturating), found by brute force."""
    n, k = 32, 256
    x = _varied_blocks(n, k, seed=3, dtype=dtype)
    w = F.quantize_nvfp4(x)
    assert w.packed.dtype == torch.uint8 and w.packed.shape == (n, k // 2) and w.packed.is_contiguous()
    assert w.scale.dtype == E4M3 and w.scale.shape == (n, k // 16) and w.scale.is_contiguous()
    assert w.global_scale.dtype == torch.float32 and w.global_scale.dim() == 0
    xf = x.float()
    _bits_equal(w.global_scale, xf.abs().amax() / torch.tensor(6.0 * 448.0), "default global scale")
    bmax = xf.view(n, k // 16, 16).abs().amax(-1)
    want_s = ((bmax / 6.0) / w.global_scale).clamp(2.0 ** -9, 448.0).to(E4M3)
    _bits_equal(w.scale, want_s, "block scales")
    assert float(w.scale.float().max()) == 448.0, "the block holding amax gets scale 448"
    v = xf.view(n, k // 16, 16) / (w.scale.float() * w.global_scale)[..., None]
    _bits_equal(_codes(w), _nearest_codes_brute_force(v).view(n, k), "codes vs brute-force nearest")


@pytest.mark.parametrize("seed", [0, 1])
def test_quantize_error_is_at_most_half_a_step(seed):
    """Each element is within half the E2M1 gap around x/(s*gs), times s*gs (s the fp32 block scale);
    elements past 6 (a block maximum whose scale rounded down: at most 6 * (1 + 2^-4) = 6.375 while
    the scale is a normal e4m3) are within 0.375 * s * gs."""
    n, k = 48, 512
    x = _varied_blocks(n, k, seed=seed)
    w = F.quantize_nvfp4(x)
    assert float(w.scale.float().min()) >= 2.0 ** -6, "test data must keep block scales normal"
    q = F.dequantize_nvfp4(w, torch.float64).view(n, k // 16, 16)
    unit = (w.scale.double() * w.global_scale.double())[..., None]  # s * gs per block
    xb = x.double().view(n, k // 16, 16)
    err = (xb - q).abs() / unit                                    # error in units of s * gs
    a = xb.abs() / unit
    half_gap = torch.where(a < 2, 0.25, torch.where(a < 4, 0.5, 1.0))
    bound = torch.where(a <= 6, half_gap, 0.375) * (1 + 2.0 ** -20) + 2.0 ** -20
    worst = float((err - bound).max())
    assert worst <= 0, f"error exceeds its bound by {worst} (units of s*gs); max a = {float(a.max())}"
    assert float(a.max()) > 6, "the data never exercised saturation of a block maximum"
    # per block: at most half the largest gap, i.e. s * gs <= block_amax / 6 * (1 + 2^-4)
    blk = err.amax(-1) * unit[..., 0] / xb.abs().amax(-1)
    assert float(blk.max()) <= (1 + 2.0 ** -4) / 6 * (1 + 2.0 ** -20)


@pytest.mark.parametrize("gs", [1.0, 0.0123, 2.0 ** -12, 7.25])
def test_values_on_the_grid_round_trip_bit_for_bit(gs):
    """quantize(dequantize(q), q.global_scale) == q for random codes (all 16, -0 included) and random
    e4m3 scales (subnormals included) whenever q is what the quantizer produces: every block holds a
    +-6 (its maximum maps to 6), or is all zero with the clamped scale 2^-9."""
    n, k = 40, 256
    g = torch.Generator().manual_seed(11)
    codes = torch.randint(0, 16, (n, k // 16, 16), generator=g, dtype=torch.uint8)
    pos = torch.randint(0, 16, (n, k // 16, 1), generator=g)
    six = torch.where(torch.rand(n, k // 16, 1, generator=g) < 0.5, 7, 15).to(torch.uint8)
    codes.scatter_(-1, pos, six)
    scale = _e4m3_bytes(g, (n, k // 16), 0x01, 0x7E)
    zero_blocks = torch.rand(n, k // 16, generator=g) < 0.1
    signs = torch.rand(int(zero_blocks.sum()), 16, generator=g) < 0.5
    codes[zero_blocks] = torch.where(signs, 0, 8).to(torch.uint8)  # +0 and -0
    scale.view(torch.uint8)[zero_blocks] = 0x01
    qw = NVFP4Weight(_pack(codes.view(n, k)), scale, torch.tensor(gs)).validate()
    for dt in (torch.float32, torch.bfloat16) if gs == 1.0 else (torch.float32,):
        back = F.quantize_nvfp4(F.dequantize_nvfp4(qw, dt), qw.global_scale)
        _bits_equal(back.scale, qw.scale, f"block scales after the round trip ({dt})")
        _bits_equal(back.packed, qw.packed, f"codes after the round trip ({dt})")
        _bits_equal(back.global_scale, qw.global_scale, "global scale")


def _one_block_row(values, gs=1.0) -> NVFP4Weight:
    """One row, K = 32: the given values first, zeros after; quantized with global scale gs."""
    x = torch.zeros(1, 32)
    x[0, :len(values)] = torch.tensor(values, dtype=torch.float32)
    return F.quantize_nvfp4(x, gs)


def test_ties_go_to_the_even_index():
    """Block maximum 6 and global scale 1 give block scale 1, so the values below are the scaled
    values themselves. Each midpoint goes to the neighbour whose 3-bit index is even."""
    cases = [  # (value, expected code)
        (6.0, 0x7),
        (0.25, 0x0),   # 0 (idx 0) vs 0.5 (idx 1)
        (0.75, 0x2),   # 0.5 (1) vs 1 (2)
        (1.25, 0x2),   # 1 (2) vs 1.5 (3)
        (1.75, 0x4),   # 1.5 (3) vs 2 (4)
        (2.5, 0x4),    # 2 (4) vs 3 (5)
        (3.5, 0x6),    # 3 (5) vs 4 (6)
        (5.0, 0x6),    # 4 (6) vs 6 (7)
        (-0.25, 0x8), (-0.75, 0xA), (-1.25, 0xA), (-1.75, 0xC), (-2.5, 0xC), (-3.5, 0xE), (-5.0, 0xE),
    ]
    w = _one_block_row([v for v, _ in cases[:8]])
    w2 = _one_block_row([6.0] + [v for v, _ in cases[8:]])
    assert float(w.scale.float()[0, 0]) == 1.0 and float(w2.scale.float()[0, 0]) == 1.0
    got = _codes(w)[0, :8].tolist() + _codes(w2)[0, 1:8].tolist()
    want = [c for _, c in cases]
    assert got == want, "\n".join(f"{v}: got {g:#x}, want {c:#x}" for (v, c), g in zip(cases, got) if g != c)
    # one fp32 ulp off a midpoint rounds to the nearer side
    mids, toward = torch.tensor([0.25, 0.75, 2.5, 5.0]), torch.tensor([1.0, 0.0, 3.0, 0.0])
    w3 = _one_block_row([6.0] + torch.nextafter(mids, toward).tolist())
    assert _codes(w3)[0, 1:5].tolist() == [0x1, 0x1, 0x5, 0x6]


def test_saturation_at_6():
    # block scale 1.0625 = 1 + 2^-4 is an e4m3 tie: rounds to 1.0 (even), so 6.375 scales to 6.375 -> 6
    w = _one_block_row([6.375, -6.375, 6.0, 5.0])
    assert w.scale.float()[0, 0].item() == 1.0
    assert _codes(w)[0, :4].tolist() == [0x7, 0xF, 0x7, 0x6]
    # a global scale too small for the block: scale saturates at 448, values beyond 6 * 448 -> +-6
    w = _one_block_row([6.0 * 448 * 2, -6.0 * 448 * 1.5, 6.0 * 448, 100.0])
    assert w.scale.float()[0, 0].item() == 448.0
    assert _codes(w)[0, :4].tolist() == [0x7, 0xF, 0x7, 0x0]  # 100 / 448 = 0.223 -> 0


def test_block_scale_clamps_at_2_pow_minus_9():
    w = _one_block_row([1e-6, -3e-7])                       # block_amax / 6 = 1.7e-7 < 2^-9
    assert w.scale.view(torch.uint8)[0].tolist() == [0x01, 0x01]  # 2^-9 (the second block is all zero)
    assert w.scale.float()[0, 0].item() == 2.0 ** -9
    assert _codes(w)[0, :2].tolist() == [0x0, 0x8]           # 1e-6 / 2^-9 = 5e-4 -> +0; -3e-7 -> -0
    # 2^-9 * 6 * 1.4 as block max: scale rounds to 2^-9 (1.4 * 2^-9 is nearer 2^-9 than 2 * 2^-9),
    # the maximum then scales to 8.4 and saturates
    w = _one_block_row([6 * 1.4 * 2.0 ** -9, 2.0 ** -9])
    assert w.scale.float()[0, 0].item() == 2.0 ** -9 and _codes(w)[0, :2].tolist() == [0x7, 0x2]


def test_all_zero_blocks_and_weights():
    x = torch.zeros(4, 64)
    x[1, 5] = 3.0
    x[2, 40] = -0.0
    w = F.quantize_nvfp4(x)
    s = w.scale.float()
    assert s[1, 0].item() == 448.0
    assert (s[[0, 2, 3]] == 2.0 ** -9).all() and (s[1, 1:] == 2.0 ** -9).all(), "all-zero blocks: scale 2^-9"
    codes = _codes(w)
    assert codes[1, 5].item() == 0x7 and codes[2, 40].item() == 0x8, "3.0 -> 6 (the amax), -0.0 -> 0x8"
    assert int((codes != 0).sum()) == 2
    d = F.dequantize_nvfp4(w)
    assert d[1, 5].item() == (6.0 * 448.0 * w.global_scale).item()  # 3 up to the rounding of gs
    assert torch.signbit(d[2, 40]) and int((d != 0).sum()) == 1
    z = F.quantize_nvfp4(torch.zeros(3, 32, dtype=torch.bfloat16))
    assert z.global_scale.item() == 1.0 and (z.packed == 0).all() and (z.scale.float() == 2.0 ** -9).all()


def test_quantize_rejects_bad_input():
    with pytest.raises(ValueError, match="K must be a positive multiple of 32"):
        F.quantize_nvfp4(torch.ones(2, 48))
    with pytest.raises(ValueError, match="2-D"):
        F.quantize_nvfp4(torch.ones(64))
    with pytest.raises(ValueError, match="bfloat16, float16 or float32"):
        F.quantize_nvfp4(torch.ones(2, 64, dtype=torch.float64))
    with pytest.raises(ValueError, match="NaN or Inf"):
        F.quantize_nvfp4(torch.tensor([[float("inf")] + [1.0] * 31]))
    for bad in (0.0, -1.0, float("nan"), torch.tensor([1.0, 2.0])):
        with pytest.raises(ValueError, match="global_scale"):
            F.quantize_nvfp4(torch.ones(2, 64), bad)


# ---- NVFP4Weight.validate ------------------------------------------------------------------------


def _validate_cases():
    base = _rand_weight(8, 64, seed=1)
    p, s, g = base.packed, base.scale, base.global_scale
    return [  # (case, field named, weight)
        ("packed_int8", "packed", NVFP4Weight(p.view(torch.int8), s, g)),
        ("packed_1d", "packed", NVFP4Weight(p.flatten(), s, g)),
        ("k_16", "packed", NVFP4Weight(p[:, :8].contiguous(), s[:, :1].contiguous(), g)),
        ("k_48", "packed", NVFP4Weight(p[:, :24].contiguous(), s[:, :3].contiguous(), g)),
        ("packed_strided", "packed", NVFP4Weight(torch.zeros(8, 64, dtype=torch.uint8)[:, ::2], s, g)),
        ("scale_uint8", "scale", NVFP4Weight(p, s.view(torch.uint8), g)),
        ("scale_float32", "scale", NVFP4Weight(p, s.float(), g)),
        ("scale_k_32_blocks", "scale", NVFP4Weight(p, s[:, :2].contiguous(), g)),
        ("scale_rows", "scale", NVFP4Weight(p, s[:4], g)),
        ("scale_transposed", "scale", NVFP4Weight(p, s.t().contiguous().t(), g)),
        ("global_shape_1", "global_scale", NVFP4Weight(p, s, g.view(1))),
        ("global_float64", "global_scale", NVFP4Weight(p, s, g.double())),
        ("global_float", "global_scale", NVFP4Weight(p, s, 0.5)),
        ("scale_on_meta", "scale", NVFP4Weight(p, torch.empty(8, 4, dtype=E4M3, device="meta"), g)),
        ("global_on_meta", "global_scale", NVFP4Weight(p, s, torch.empty((), device="meta"))),
    ]


def test_validate_names_the_field():
    w = _rand_weight(8, 64, seed=1)
    assert w.validate() is w and (w.N, w.K) == (8, 64)
    for case, field, bad in _validate_cases():
        with pytest.raises(ValueError, match=rf"NVFP4Weight: {field} ") as e:
            bad.validate()
        assert "shape" in str(e.value) or "on " in str(e.value) or "Tensor" in str(e.value), case


# ---- loaders -------------------------------------------------------------------------------------


def _reciprocal_round_trips(gs: float) -> bool:
    g = torch.tensor(gs, dtype=torch.float32)
    return bool(torch.reciprocal(torch.reciprocal(g)) == g)


def _global_scale_where(exact: bool) -> float:
    """A fp32 global scale for which 1/(1/gs) in fp32 is (or is not) gs again."""
    g = torch.Generator().manual_seed(5)
    for v in (torch.rand(1000, generator=g) * 1e-3 + 1e-4).tolist():
        v = float(torch.tensor(v, dtype=torch.float32))
        if _reciprocal_round_trips(v) == exact:
            return v
    raise AssertionError("no such global scale found")


def _state_dicts(w: NVFP4Weight, scalar_shape=()):
    gs = w.global_scale.reshape(scalar_shape)
    modelopt = {f"{PREFIX}.weight": w.packed, f"{PREFIX}.weight_scale": w.scale,
                f"{PREFIX}.weight_scale_2": gs.clone(),
                f"{PREFIX}.input_scale": torch.tensor(1.0)}
    ct = {f"{PREFIX}.weight_packed": w.packed.clone(), f"{PREFIX}.weight_scale": w.scale.clone(),
          f"{PREFIX}.weight_global_scale": torch.reciprocal(gs)}
    return modelopt, ct


@pytest.mark.parametrize("exact", [True, False], ids=["1/x_round_trips", "1/x_off_by_1ulp"])
@pytest.mark.parametrize("scalar_shape", [(), (1,)], ids=["scalar_0d", "scalar_1"])
def test_loaders_agree_and_do_not_copy(exact, scalar_shape):
    gs = _global_scale_where(exact)
    w = F.quantize_nvfp4(_varied_blocks(16, 128, seed=9, decades=0.5), gs)
    mo_sd, ct_sd = _state_dicts(w, scalar_shape)
    mo = F.load_nvfp4_modelopt(mo_sd, PREFIX)
    ct = F.load_nvfp4_compressed_tensors(ct_sd, PREFIX)
    # no copies: the state dict's storage
    assert mo.packed.data_ptr() == mo_sd[f"{PREFIX}.weight"].data_ptr()
    assert mo.scale.data_ptr() == mo_sd[f"{PREFIX}.weight_scale"].data_ptr()
    assert mo.global_scale.data_ptr() == mo_sd[f"{PREFIX}.weight_scale_2"].data_ptr()
    assert ct.packed.data_ptr() == ct_sd[f"{PREFIX}.weight_packed"].data_ptr()
    assert ct.scale.data_ptr() == ct_sd[f"{PREFIX}.weight_scale"].data_ptr()
    assert mo.global_scale.dim() == 0 and ct.global_scale.dim() == 0
    assert ct.global_scale.dtype == torch.float32
    # the multiplier: identical for ModelOpt; 1/(1/gs) in fp32 for compressed-tensors
    _bits_equal(mo.global_scale, w.global_scale, "ModelOpt global scale")
    assert int(qt.ulp_diff(ct.global_scale, mo.global_scale)) == (0 if exact else 1)
    d_mo, d_ct = F.dequantize_nvfp4(mo), F.dequantize_nvfp4(ct)
    if exact:
        _bits_equal(d_ct, d_mo, "compressed-tensors vs ModelOpt dequantized weight")
    else:
        assert not torch.equal(d_ct, d_mo), "a 1-ulp global scale left every product unchanged?"
        # the same codes and scales under the converted global scale: exactly the ModelOpt weight
        # with its multiplier replaced, and within 1 ulp of it element by element
        _bits_equal(d_ct, F.dequantize_nvfp4(NVFP4Weight(mo.packed, mo.scale, ct.global_scale)), "")
        qt.assert_ulp_close(d_ct, d_mo, 1, "compressed-tensors vs ModelOpt dequantized weight")
    # compressed-tensors' own (divide) definition: within the reciprocal's rounding
    div = _dequant_f64_by_bits(NVFP4Weight(ct.packed, ct.scale, torch.tensor(1.0))) / \
        float(ct_sd[f"{PREFIX}.weight_global_scale"])
    rel = ((d_ct.double() - div).abs() / div.abs().clamp_min(1e-30)).max()
    assert float(rel) <= 2.0 ** -23


def test_loaders_name_missing_keys():
    w = _rand_weight(8, 64, seed=2)
    mo_sd, ct_sd = _state_dicts(w)
    for loader, sd in ((F.load_nvfp4_modelopt, mo_sd), (F.load_nvfp4_compressed_tensors, ct_sd)):
        for key in [k for k in sd if not k.endswith("input_scale")]:
            part = {k: v for k, v in sd.items() if k != key}
            with pytest.raises(KeyError) as e:
                loader(part, PREFIX)
            assert key in str(e.value) and repr(PREFIX) in str(e.value), str(e.value)
    with pytest.raises(KeyError, match="model.layers.4.mlp.down_proj.weight"):
        F.load_nvfp4_modelopt(mo_sd, "model.layers.4.mlp.down_proj")


def test_loaders_name_bad_tensors():
    w = _rand_weight(8, 64, seed=2)
    mo_sd, ct_sd = _state_dicts(w)
    cases = [  # (loader, state dict, key, bad tensor)
        (F.load_nvfp4_modelopt, mo_sd, "weight", w.packed.view(torch.int8)),
        (F.load_nvfp4_modelopt, mo_sd, "weight", w.packed[:, :24].contiguous()),   # K = 48
        (F.load_nvfp4_modelopt, mo_sd, "weight_scale", w.scale.view(torch.uint8)),
        (F.load_nvfp4_modelopt, mo_sd, "weight_scale", w.scale[:, :2].contiguous()),
        (F.load_nvfp4_modelopt, mo_sd, "weight_scale_2", w.global_scale.bfloat16()),
        (F.load_nvfp4_modelopt, mo_sd, "weight_scale_2", torch.ones(2)),
        (F.load_nvfp4_modelopt, mo_sd, "weight_scale_2", torch.ones(1, 1)),
        (F.load_nvfp4_compressed_tensors, ct_sd, "weight_packed", w.packed.float()),
        (F.load_nvfp4_compressed_tensors, ct_sd, "weight_scale", w.scale.float()),
        (F.load_nvfp4_compressed_tensors, ct_sd, "weight_scale", w.scale.t().contiguous().t()),
        (F.load_nvfp4_compressed_tensors, ct_sd, "weight_global_scale", torch.ones(3)),
        (F.load_nvfp4_compressed_tensors, ct_sd, "weight_global_scale", torch.ones((), dtype=torch.float64)),
    ]
    for loader, sd, suffix, bad in cases:
        key = f"{PREFIX}.{suffix}"
        with pytest.raises(ValueError) as e:
            loader({**sd, key: bad}, PREFIX)
        msg = str(e.value)
        assert key in msg, f"{loader.__name__} with a bad {suffix} {bad.dtype} {list(bad.shape)}: {msg}"
        assert str(list(bad.shape)) in msg or str(bad.dtype) in msg or "strides" in msg, msg


# ---- fuse ----------------------------------------------------------------------------------------


def test_fuse_keeps_per_shard_global_scales():
    gate = _rand_weight(24, 128, seed=1, gs=0.002)
    up = _rand_weight(40, 128, seed=2, gs=0.0035)
    fused = F.fuse_nvfp4([gate, up])
    assert (fused.N, fused.K) == (64, 128)
    assert fused.packed.shape == (64, 64) and fused.scale.shape == (64, 8)
    assert [(a, b) for a, b, _ in fused.shards] == [(0, 24), (24, 64)]
    assert [float(g) for _, _, g in fused.shards] == [float(gate.global_scale), float(up.global_scale)]
    _bits_equal(fused.packed, torch.cat([gate.packed, up.packed]), "fused packed")
    _bits_equal(fused.scale, torch.cat([gate.scale, up.scale]), "fused scale")
    assert fused.packed.data_ptr() != gate.packed.data_ptr(), "fuse_nvfp4 copies"
    for i, src in enumerate((gate, up)):
        shard = fused.shard(i).validate()
        _bits_equal(F.dequantize_nvfp4(shard), F.dequantize_nvfp4(src), f"shard {i}")
    # a single global scale would be wrong for one of the shards
    assert not torch.equal(F.dequantize_nvfp4(NVFP4Weight(fused.packed, fused.scale, gate.global_scale))[24:],
                           F.dequantize_nvfp4(up))
    with pytest.raises(ValueError, match=r"weights\[1\] has K = 64"):
        F.fuse_nvfp4([gate, _rand_weight(8, 64, seed=3)])
    with pytest.raises(ValueError, match="at least one"):
        F.fuse_nvfp4([])


# ---- the reference nvfp4_linear ------------------------------------------------------------------


def _linear_case(m, n, k, xdt=torch.bfloat16, *, seed=0, bias=None, lead=()):
    w = _rand_weight(n, k, seed=seed + 100, gs=0.0123)
    x = qt.randn_nonzero(*lead, m, k, dtype=xdt, seed=seed)
    b = None if bias is None else qt.randn_nonzero(n, dtype=bias, seed=seed + 7)
    return x, w, b


def _f64_linear(x, w, b):
    """The float64 evaluation, independent of the reference: x @ W^T with W decoded bit by bit."""
    y = x.double() @ _dequant_f64_by_bits(w).t()
    return y if b is None else y + b.double()



def _assert_within_bound(y, x, w, b, tag):
    """|y - y64| <= spacing(y)/2 + err on every element (reference.nvfp4_linear_f64_bound), and
    <= 1 ulp from the float64 evaluation rounded to y's dtype wherever err < spacing/2. Returns the
    fraction of elements where err < spacing/2 (where the 1-ulp claim is guaranteed)."""
    y64, err = nvfp4_linear_f64_bound(x, w.packed, w.scale, w.global_scale, b)
    over = (y.double() - y64).abs() - (qt.spacing(y) / 2 + err)
    assert float(over.max()) <= 0, f"{tag}: outside the fp32 error bound by {float(over.max()):.3g}"
    sure = err < qt.spacing(y64.to(y.dtype)) / 2
    u = qt.ulp_diff(y, y64.to(y.dtype))
    worst = int(u[sure].max()) if bool(sure.any()) else 0
    assert worst <= 1, (f"{tag}: > 1 ulp where the bound guarantees 1; ulp histogram "
                        f"{qt.ulp_histogram(y, y64.to(y.dtype))}")
    return float(sure.double().mean())


@pytest.mark.parametrize("xdt", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("bias", [None, torch.float32, "x"])
def test_nvfp4_linear_fp32_output_vs_float64(xdt, bias):
    m, n, k = 7, 96, 1024
    bdt = None if bias is None else (xdt if bias == "x" else bias)
    x, w, b = _linear_case(m, n, k, xdt, seed=1, bias=bdt)
    y = nvfp4_linear(x, w.packed, w.scale, w.global_scale, b, torch.float32)
    assert y.dtype == torch.float32 and y.shape == (m, n) and y.is_contiguous()
    want = _f64_linear(x, w, b)
    _assert_within_bound(y, x, w, b, f"fp32 output, x {xdt}")
    rel = float((y.double() - want).norm() / want.norm())
    assert rel < 1e-6, f"normwise relative error {rel:.3g}"
    # acc_dtype=float64 is the float64 evaluation (up to float64 rounding)
    y64 = nvfp4_linear(x, w.packed, w.scale, w.global_scale, b, torch.float32, acc_dtype=torch.float64)
    _bits_equal(y64, want.to(torch.float32), "acc_dtype=float64 vs the independent float64 evaluation")
    # and so is the helper's y64
    h64, _ = nvfp4_linear_f64_bound(x, w.packed, w.scale, w.global_scale, b)
    assert float(((h64 - want).abs() / want.abs()).max()) < 2.0 ** -45


@pytest.mark.parametrize("xdt", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("k", [32, 512, 5120, 17408])
def test_nvfp4_linear_rounds_once_within_the_fp32_bound(xdt, k):
    """y (x's dtype, with a bias) is the fp32 value rounded once, within spacing/2 + the fp32 error
    bound of the float64 evaluation, and <= 1 ulp from the acc_dtype=float64 evaluation wherever
    the bound is below half an ulp. (Not everywhere: where the terms cancel, an fp32 sum may be
    off by more than half an output ulp; see reference/gemm.py.) At K = 32 the bound is tight
    enough for the 1-ulp claim to cover most elements."""
    m, n = 6, 64
    x, w, b = _linear_case(m, n, k, xdt, seed=k, bias=torch.float32, lead=(2,))
    y = nvfp4_linear(x, w.packed, w.scale, w.global_scale, b)
    assert y.dtype == xdt and y.shape == (2, m, n) and not torch.isnan(y).any()
    y32 = nvfp4_linear(x, w.packed, w.scale, w.global_scale, b, torch.float32)
    _bits_equal(y, y32.to(xdt), "one rounding of the fp32 value")
    covered = _assert_within_bound(y, x, w, b, f"{xdt} K={k}")
    if k == 32:
        assert covered > 0.9, f"the 1-ulp guarantee covers only {covered:.0%} of the elements at K=32"
    want = nvfp4_linear(x, w.packed, w.scale, w.global_scale, b, acc_dtype=torch.float64)
    _bits_equal(want, _f64_linear(x, w, b).to(xdt), "acc_dtype=float64 vs the independent evaluation")


def test_the_bound_admits_cancellation_that_1_ulp_would_not():
    """Why the accuracy criterion is a bound and not "1 ulp everywhere": x = [1, 2^-24, -1, 0, ...]
    times a weight row of ones. The exact sum is 2^-24 (a bf16 value); an fp32 left-to-right sum
    gives 1 + 2^-24 = 1 (a tie, to even), then 0: thousands of bf16 ulps away, yet a legitimate fp32
    evaluation, and inside the bound."""
    k = 32
    x = torch.zeros(1, k, dtype=torch.bfloat16)
    x[0, :3] = torch.tensor([1.0, 2.0 ** -24, -1.0])
    w = NVFP4Weight(torch.full((1, k // 2), 0x22, dtype=torch.uint8), torch.ones(1, 2).to(E4M3),
                    torch.tensor(1.0)).validate()  # every code 0x2 = 1.0
    y64, err = nvfp4_linear_f64_bound(x, w.packed, w.scale, w.global_scale)
    assert float(y64) == 2.0 ** -24
    seq = torch.zeros((), dtype=torch.float32)
    for v in x[0].float():
        seq = seq + v
    assert float(seq) == 0.0 and int(qt.ulp_diff(seq.bfloat16().view(1, 1), y64.bfloat16())) > 1000
    assert abs(float(seq) - float(y64)) <= float(err)
    y = nvfp4_linear(x, w.packed, w.scale, w.global_scale)
    assert abs(float(y) - float(y64)) <= float(err) + float(qt.spacing(y)) / 2


def test_nvfp4_linear_out_dtypes_and_shapes():
    x, w, _ = _linear_case(3, 40, 64, lead=(2, 5))
    args = (w.packed, w.scale, w.global_scale)
    y32 = nvfp4_linear(x, *args, None, torch.float32)
    assert y32.shape == (2, 5, 3, 40)
    for dt in (torch.bfloat16, torch.float16, torch.float32):
        _bits_equal(nvfp4_linear(x, *args, None, dt), y32.to(dt), f"out_dtype {dt}: one rounding of fp32")
    # w_global of shape [1]
    _bits_equal(nvfp4_linear(x, w.packed, w.scale, w.global_scale.view(1)), y32.to(x.dtype), "w_global [1]")
    # a slice of the last dimension is a valid x
    wide = qt.randn_nonzero(4, 128, seed=3)
    _bits_equal(nvfp4_linear(wide[:, :64], *args), nvfp4_linear(wide[:, :64].contiguous(), *args), "sliced x")
    # empty row sets
    for shape in ((0, 64), (2, 0, 64)):
        e = nvfp4_linear(torch.empty(shape, dtype=torch.bfloat16), *args)
        assert e.shape == (*shape[:-1], 40) and e.dtype == torch.bfloat16


def test_nvfp4_linear_is_row_invariant_at_model_width():
    x, w, b = _linear_case(32, 48, 5120, seed=4, bias=torch.bfloat16)
    fn = lambda t: nvfp4_linear(t, w.packed, w.scale, w.global_scale, b)  # noqa: E731
    for row in (0, 13, 31):
        qt.assert_row_invariant_at(fn, x, row)


@given(m=st.integers(1, 32), n=st.integers(1, 48), k=st.sampled_from([32, 64, 160, 512]),
       xdt=st.sampled_from([torch.bfloat16, torch.float16]),
       out=st.sampled_from([None, torch.float32, torch.bfloat16]), with_bias=st.booleans(),
       seed=st.integers(0, 2 ** 16))
def test_nvfp4_linear_row_invariance_fuzz(m, n, k, xdt, out, with_bias, seed):
    """Every row of every M'-row call (M' <= M) has the bits of that row's 1-row call."""
    x, w, b = _linear_case(m, n, k, xdt, seed=seed, bias=torch.float32 if with_bias else None)
    qt.assert_row_invariant(lambda t: nvfp4_linear(t, w.packed, w.scale, w.global_scale, b, out), x)


# ---- bad input -----------------------------------------------------------------------------------


def _linear_args(m=4, n=16, k=64) -> dict:
    x, w, b = _linear_case(m, n, k, bias=torch.float32)
    return dict(x=x, w_packed=w.packed, w_scale=w.scale, w_global=w.global_scale, bias=b,
                out_dtype=None)


def _linear_bad_cases():
    m, n, k = 4, 16, 64
    cases = []

    def case(name, arg, **changes):
        a = _linear_args(m, n, k)
        a.update({key: (v(a) if callable(v) else v) for key, v in changes.items()})
        cases.append((name, arg, a))

    meta = lambda t: torch.empty_like(t, device="meta")  # noqa: E731
    case("x_float32", "x", x=lambda a: a["x"].float())
    case("x_int", "x", x=lambda a: a["x"].to(torch.int32))
    case("x_0d", "x", x=lambda a: a["x"][0, 0])
    case("x_last_dim_stride_2", "x", x=lambda a: qt.randn_nonzero(m, 2 * k)[:, ::2])
    case("x_wrong_k", "x", x=lambda a: qt.randn_nonzero(m, k + 32))
    case("x_transposed_rows", "x", x=lambda a: qt.randn_nonzero(3, m, k).transpose(0, 1))
    case("w_packed_int8", "w_packed", w_packed=lambda a: a["w_packed"].view(torch.int8))
    case("w_packed_1d", "w_packed", w_packed=lambda a: a["w_packed"].flatten())
    case("w_packed_3d", "w_packed", w_packed=lambda a: a["w_packed"].view(1, n, k // 2))
    for kk in (16, 48):  # K a multiple of 16 (valid blocks) but not of 32
        case(f"k_{kk}", "w_packed", x=lambda a, kk=kk: a["x"][:, :kk],
             w_packed=lambda a, kk=kk: a["w_packed"][:, :kk // 2].contiguous(),
             w_scale=lambda a, kk=kk: a["w_scale"][:, :kk // 16].contiguous())
    case("w_packed_strided", "w_packed",
         w_packed=lambda a: torch.zeros(n, k, dtype=torch.uint8)[:, ::2])
    case("w_packed_meta", "w_packed", w_packed=lambda a: meta(a["w_packed"]))
    case("w_scale_uint8", "w_scale", w_scale=lambda a: a["w_scale"].view(torch.uint8))
    case("w_scale_float32", "w_scale", w_scale=lambda a: a["w_scale"].float())
    case("w_scale_e5m2", "w_scale", w_scale=lambda a: a["w_scale"].view(torch.float8_e5m2))
    case("w_scale_group_32", "w_scale", w_scale=lambda a: a["w_scale"][:, :2].contiguous())
    case("w_scale_rows", "w_scale", w_scale=lambda a: a["w_scale"][:n - 1])
    case("w_scale_transposed", "w_scale", w_scale=lambda a: a["w_scale"].t().contiguous().t())
    case("w_scale_meta", "w_scale", w_scale=lambda a: meta(a["w_scale"]))
    case("w_global_float64", "w_global", w_global=lambda a: a["w_global"].double())
    case("w_global_bf16", "w_global", w_global=lambda a: a["w_global"].bfloat16())
    case("w_global_2", "w_global", w_global=torch.ones(2))
    case("w_global_1x1", "w_global", w_global=torch.ones(1, 1))
    case("w_global_float", "w_global", w_global=0.5)
    case("w_global_meta", "w_global", w_global=lambda a: meta(a["w_global"]))
    case("bias_short", "bias", bias=lambda a: a["bias"][:-1])
    case("bias_2d", "bias", bias=lambda a: a["bias"].view(1, n))
    case("bias_fp16_for_bf16_x", "bias", bias=lambda a: a["bias"].half())
    case("bias_float64", "bias", bias=lambda a: a["bias"].double())
    case("bias_strided", "bias", bias=torch.ones(2 * n)[::2])
    case("bias_meta", "bias", bias=lambda a: meta(a["bias"]))
    case("out_float64", "out_dtype", out_dtype=torch.float64)
    case("out_int32", "out_dtype", out_dtype=torch.int32)
    case("out_e4m3", "out_dtype", out_dtype=E4M3)
    return cases


def test_nvfp4_linear_bad_input_names_the_argument():
    for name, arg, args in _linear_bad_cases():
        with pytest.raises(ValueError, match=rf"qwen38\.nvfp4_linear: {arg}\b") as e:
            nvfp4_linear(**args)
        assert "shape" in str(e.value) or "on meta" in str(e.value) or "got" in str(e.value), name
    with pytest.raises(ValueError, match=r"qwen38\.nvfp4_linear: acc_dtype"):
        nvfp4_linear(**_linear_args(), acc_dtype=torch.bfloat16)
