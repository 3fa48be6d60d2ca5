"""nvfp4_linear with more than 32 rows (the prefill strategies) and nvfp4_dequantize.

GPU: the strategies (QWEN38_NVFP4_PREFILL=chunked|dequant|mma; dequant with and without its cuBLASLt
matmul, QWEN38_NVFP4_PREFILL_LT) against the float64 bound of the
reference at 33..600 rows; the chunked strategy keeps every row bit-identical to its 1-row call, the
mma strategy keeps each row independent of the others and of the row count;
"auto" picks by the row threshold; nvfp4_dequantize bit-exact against its reference for every code
and scale range; graph == eager, determinism, opcheck, bad input.
CPU: the reference of nvfp4_dequantize (exact, against formats.dequantize_nvfp4), its checks and
opcheck, and the CPU path of nvfp4_linear past 32 rows.
"""
from __future__ import annotations

import functools

import pytest
import torch

import qwen38_kernels as q
from qwen38_kernels import formats, knobs
from qwen38_kernels import formats_fp8 as f8
from qwen38_kernels import testing as qt
from qwen38_kernels.reference import gemm as ref

OPS = torch.ops.qwen38
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
STRATEGIES = ("chunked", "dequant", "dequant-nolt", "mma")  # dequant-nolt: QWEN38_NVFP4_PREFILL_LT=0
# opcheck's test_schema cannot compare float8_e4m3fn inputs (see tests/test_nvfp4.py): the other three
OPCHECK_UTILS = ("test_faketensor", "test_autograd_registration", "test_aot_dispatch_dynamic")


def _weight(n: int, k: int, device, seed: int = 0, scale: float = 0.05) -> formats.NVFP4Weight:
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(n, k, generator=g) * scale).to(torch.bfloat16).to(device)  # quantized on `device`
    return formats.quantize_nvfp4(w)


@functools.lru_cache(maxsize=6)
def _weight_cached(n: int, k: int, device: str) -> formats.NVFP4Weight:
    return _weight(n, k, device, seed=n + k)


def _call(x, w: formats.NVFP4Weight, bias=None, out_dtype=None, strategy: str | None = None):
    if strategy is None:
        return OPS.nvfp4_linear(x, w.packed, w.scale, w.global_scale, bias, out_dtype)
    with _strategy(strategy):
        return OPS.nvfp4_linear(x, w.packed, w.scale, w.global_scale, bias, out_dtype)


def _strategy(strategy: str):
    """The knobs of one of STRATEGIES (dequant-nolt: dequant with QWEN38_NVFP4_PREFILL_LT=0)."""
    lt = "0" if strategy == "dequant-nolt" else "1"
    return knobs.override(QWEN38_NVFP4_PREFILL=strategy.removesuffix("-nolt"), QWEN38_NVFP4_PREFILL_LT=lt)


def _assert_within_bound(y, x, w: formats.NVFP4Weight, bias=None, what: str = ""):
    """|y - y64| <= spacing(y) / 2 + err on every element (reference.gemm.nvfp4_linear_f64_bound)."""
    y64, err = ref.nvfp4_linear_f64_bound(x, w.packed, w.scale, w.global_scale, bias)
    assert torch.isfinite(y).all(), f"{what}: non-finite outputs"
    excess = (y.to(torch.float64) - y64).abs() - (qt.rounding_slack(y) + err)
    bad = excess > 0
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {bad.numel()} outputs beyond the float64 bound, "
                           f"worst excess {float(excess.max()):.3g}")


# ---- GPU: both strategies against the float64 bound ---------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("m", [33, 64, 100, 257, 600])
@pytest.mark.parametrize("n,k", [(1000, 5120), (256, 17408)])
def test_accuracy_within_the_float64_bound(strategy, m, n, k):
    w = _weight_cached(n, k, "cuda")
    x = qt.randn_nonzero(m, k, device="cuda", seed=m)
    y = _call(x, w, strategy=strategy)
    assert y.shape == (m, n) and y.dtype == torch.bfloat16
    _assert_within_bound(y, x, w, what=f"{strategy} M={m} W {n}x{k}")


@pytest.mark.gpu
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("xdt", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("out", [None, torch.float32, "other16"])  # other16: the other 16-bit type
@pytest.mark.parametrize("bias_dt", [None, "x", torch.float32])
@pytest.mark.parametrize("n", [136, 138])  # 138: not a multiple of 4 (the epilogue's scalar path; no cuBLASLt)
def test_dtypes_bias_and_odd_n(strategy, xdt, out, bias_dt, n):
    k, m = (128 if strategy == "mma" else 96), 77  # mma serves K a multiple of 64
    w = _weight_cached(n, k, "cuda")
    x = qt.randn_nonzero(m, k, dtype=xdt, device="cuda", seed=n)
    bias = None
    if bias_dt is not None:
        bias = qt.randn_nonzero(n, dtype=xdt if bias_dt == "x" else bias_dt, device="cuda", seed=3)
    if out == "other16":
        out = torch.float16 if xdt == torch.bfloat16 else torch.bfloat16
    y = _call(x, w, bias, out, strategy)
    assert y.dtype == (out or xdt) and y.shape == (m, n)
    _assert_within_bound(y, x, w, bias, f"{strategy} x {xdt} out {out} bias {bias_dt} N={n}")


@pytest.mark.gpu
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_leading_dims_and_row_stride(strategy):
    """x [3, 40, K] (120 rows) and a slice of a wider tensor (row stride K + 64)."""
    n, k = 1000, 5120
    w = _weight_cached(n, k, "cuda")
    wide = qt.randn_nonzero(120, k + 64, device="cuda", seed=11)
    x = wide[:, :k]
    y = _call(x, w, strategy=strategy)
    _assert_within_bound(y, x, w, what=f"{strategy} strided x")
    y3 = _call(x.contiguous().reshape(3, 40, k), w, strategy=strategy)
    assert y3.shape == (3, 40, n)
    _assert_within_bound(y3, x.reshape(3, 40, k), w, what=f"{strategy} x [3, 40, K]")
    if strategy == "chunked":  # the skinny kernel's arithmetic does not depend on the row stride
        qt.assert_bitwise_equal(y, y3.reshape(120, n), "strided vs contiguous x")


@pytest.mark.gpu
def test_chunked_rows_are_bit_identical_to_one_row_calls():
    n, k, m = 1000, 5120, 100
    w = _weight_cached(n, k, "cuda")
    x = qt.randn_nonzero(m, k, device="cuda", seed=21)
    full = _call(x, w, strategy="chunked")
    for r in (0, 1, 31, 32, 33, 63, 64, 95, 96, 99):
        one = _call(x[r:r + 1].clone(), w)  # 1 row: the skinny kernel whatever the knob says
        qt.assert_bitwise_equal(full[r:r + 1], one, f"row {r} of {m}")


@pytest.mark.gpu
@pytest.mark.parametrize("xdt", [torch.bfloat16, torch.float16])
def test_mma_rows_do_not_depend_on_neighbours_or_row_count(xdt):
    """The mma strategy's row r has the same bits in a 300-row call (128-row tiles), in a 40-row
    window around it (64-row tiles, another position in the tile) and next to other rows."""
    n, k, m = 1000, 5120, 300
    w = _weight_cached(n, k, "cuda")
    x = qt.randn_nonzero(m, k, dtype=xdt, device="cuda", seed=41)
    full = _call(x, w, strategy="mma")
    for r0 in (0, 77, 250):
        win = _call(x[r0:r0 + 40].clone(), w, strategy="mma")
        qt.assert_bitwise_equal(full[r0:r0 + 40], win, f"rows {r0}..{r0 + 39} of {m}")
    other = x.clone()
    other[1::2] = qt.randn_nonzero(m // 2, k, dtype=xdt, device="cuda", seed=43)
    qt.assert_bitwise_equal(full[0::2], _call(other, w, strategy="mma")[0::2], "even rows, odd rows replaced")


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["nvfp4", "fp8"])
@pytest.mark.parametrize("m", [40, 100])
def test_mma_tile_rows_change_no_bit(op, m):
    """QWEN38_PREFILL_TILE_ROWS (64- or 128-row CTA tiles) is a launch detail of both mma kernels."""
    n, k = 1000, 5120
    x = qt.randn_nonzero(m, k, device="cuda", seed=m)
    if op == "nvfp4":
        w = _weight_cached(n, k, "cuda")
        call = lambda: _call(x, w, strategy="mma")  # noqa: E731
    else:
        g = torch.Generator().manual_seed(2)
        fw = f8.quantize_fp8_block((torch.randn(n, k, generator=g) * 0.05).to(torch.bfloat16))
        wt, ws = fw.weight.cuda(), fw.weight_scale_inv.cuda()

        def call():
            with knobs.override(QWEN38_FP8_PREFILL="mma"):
                return OPS.fp8_block_linear(x, wt, ws, None, None)
    outs = {}
    for rows in ("auto", "64", "128", "256"):
        with knobs.override(QWEN38_PREFILL_TILE_ROWS=rows):
            outs[rows] = call()
    qt.assert_bitwise_equal(outs["64"], outs["128"], f"{op} M={m}: 64- vs 128-row tiles")
    qt.assert_bitwise_equal(outs["256"], outs["128"], f"{op} M={m}: 256- vs 128-row tiles")
    qt.assert_bitwise_equal(outs["auto"], outs["128"], f"{op} M={m}: auto vs 128-row tiles")
    with knobs.override(QWEN38_PREFILL_TILE_ROWS="96"):
        with pytest.raises(ValueError, match=r"QWEN38_PREFILL_TILE_ROWS must be auto, 64, 128 or 256, got '96'"):
            call()


def _wgmma_device() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


@pytest.mark.gpu
def test_wgmma_form_is_ready_on_hopper():
    """The device build (TORCH_CUDA_ARCH_LIST with 9.0a) carries the wgmma form; elsewhere it is off."""
    from qwen38_kernels import _C
    assert _C.nvfp4_wgmma_ready(torch.cuda.current_device()) == _wgmma_device()


@pytest.mark.gpu
@pytest.mark.skipif(not _wgmma_device(), reason="the wgmma form runs on compute capability 9.0")
@pytest.mark.parametrize("n,k", [(1000, 5120), (256, 17408), (136, 128), (17408, 1024)])
@pytest.mark.parametrize("m", [33, 64, 65, 128, 129, 300, 600])
def test_wgmma_form_writes_the_mma_kernels_bits(n, k, m):
    """QWEN38_NVFP4_WGMMA=1 (warpgroup MMA, 64 / 128 / 256-row tiles by M) and =0 (the mma.sync
    kernel) give the same bits: rows past M and columns past N (N = 1000, 136) included, and a grid
    of more than one wave (17408 columns: 136 tiles of 128)."""
    w = _weight_cached(n, k, "cuda")
    x = qt.randn_nonzero(m, k, device="cuda", seed=m + n)
    with knobs.override(QWEN38_NVFP4_WGMMA="1"):
        a = _call(x, w, strategy="mma")
    with knobs.override(QWEN38_NVFP4_WGMMA="0"):
        b = _call(x, w, strategy="mma")
    qt.assert_bitwise_equal(a, b, f"wgmma vs mma.sync, M={m}, W {n}x{k}")
    _assert_within_bound(a, x, w, what=f"wgmma M={m} W {n}x{k}")


@pytest.mark.gpu
@pytest.mark.skipif(not _wgmma_device(), reason="the wgmma form runs on compute capability 9.0")
@pytest.mark.parametrize("xdt", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("out", [None, torch.float32, "other16"])
@pytest.mark.parametrize("bias_dt", [None, "x", torch.float32])
@pytest.mark.parametrize("tile_rows", ["auto", "64", "256"])
def test_wgmma_form_dtypes_bias_tiles_and_stride(xdt, out, bias_dt, tile_rows):
    """Every (x, out, bias) dtype and tile size of the wgmma form against the mma.sync kernel, on a
    strided x (row stride K + 64) with N = 138 (a partial tile, an odd output row length)."""
    n, k, m = 138, 1024, 200
    w = _weight_cached(n, k, "cuda")
    wide = qt.randn_nonzero(m, k + 64, dtype=xdt, device="cuda", seed=7)
    x = wide[:, :k]
    bias = None
    if bias_dt is not None:
        bias = qt.randn_nonzero(n, dtype=xdt if bias_dt == "x" else bias_dt, device="cuda", seed=3)
    if out == "other16":
        out = torch.float16 if xdt == torch.bfloat16 else torch.bfloat16
    outs = []
    for on in ("1", "0"):
        with knobs.override(QWEN38_NVFP4_WGMMA=on, QWEN38_PREFILL_TILE_ROWS=tile_rows):
            outs.append(_call(x, w, bias, out, "mma"))
    qt.assert_bitwise_equal(outs[0], outs[1], f"wgmma vs mma.sync, x {xdt} out {out} bias {bias_dt} tiles {tile_rows}")
    _assert_within_bound(outs[0], x, w, bias, f"wgmma x {xdt} out {out} bias {bias_dt}")


@pytest.mark.gpu
@pytest.mark.skipif(not _wgmma_device(), reason="the wgmma form runs on compute capability 9.0")
def test_auto_takes_the_wgmma_form_on_its_shapes():
    """On Hopper, auto takes mma (the wgmma form) from 33 rows for N >= 8192 and K <= 6144 (here
    17408x1024); with QWEN38_NVFP4_WGMMA=0 the threshold rule (chunked below 65 rows for K <= 6144,
    dequant from there); other shapes: test_auto_picks_by_the_threshold."""
    big = _weight_cached(17408, 1024, "cuda")
    x = qt.randn_nonzero(65, 1024, device="cuda", seed=9)
    with knobs.override(QWEN38_NVFP4_PREFILL_ROWS=""):
        for rows in (33, 64):
            a, mma, ch = _call(x[:rows], big), _call(x[:rows], big, strategy="mma"), _call(x[:rows], big, strategy="chunked")
            assert not torch.equal(mma.view(torch.int16), ch.view(torch.int16)), "mma and chunked agree"
            qt.assert_bitwise_equal(a, mma, f"auto at {rows} rows, 17408x1024")
        with knobs.override(QWEN38_NVFP4_WGMMA="0"):  # no wgmma form: the rule
            qt.assert_bitwise_equal(_call(x[:64], big), _call(x[:64], big, strategy="chunked"), "auto, WGMMA=0, 64 rows")
            qt.assert_bitwise_equal(_call(x, big), _call(x, big, strategy="dequant"), "auto, WGMMA=0, 65 rows")


@pytest.mark.gpu
def test_mma_needs_k_a_multiple_of_64():
    w = _weight_cached(136, 96, "cuda")
    x = qt.randn_nonzero(40, 96, device="cuda", seed=5)
    with pytest.raises(ValueError, match=r"qwen38\.nvfp4_linear: QWEN38_NVFP4_PREFILL=mma serves K a multiple of 64, got K = 96"):
        _call(x, w, strategy="mma")


@pytest.mark.gpu
def test_auto_picks_by_the_threshold(skinny_variant):
    """auto == chunked below the threshold and == dequant at and above it (QWEN38_NVFP4_PREFILL_ROWS
    and the built-in rule: 128 rows for N < 1024; from N = 1024, 65 rows for K <= 6144, else 64).
    The shapes' table entries are replaced by ones without prefill_rows, so the rule decides
    (test_skinny_variants.py covers a table's threshold)."""
    from qwen38_kernels import _C
    for n2, k2 in ((1000, 5120), (1024, 5120), (1024, 6400)):
        ks, nt, _ = _C.skinny_default_variant(n2, k2)
        skinny_variant("nvfp4_linear", n2, k2, ks, nt)
    n, k = 1000, 5120
    w = _weight_cached(n, k, "cuda")
    x = qt.randn_nonzero(300, k, device="cuda", seed=31)

    def both(rows):
        c, d = _call(x[:rows], w, strategy="chunked"), _call(x[:rows], w, strategy="dequant")
        # the test only discriminates when the two strategies' bits differ somewhere
        assert not torch.equal(c.view(torch.int16), d.view(torch.int16)), "chunked and dequant agree"
        return c, d

    with knobs.override(QWEN38_NVFP4_PREFILL="auto", QWEN38_NVFP4_PREFILL_ROWS="64"):
        for rows, pick in ((40, 0), (63, 0), (64, 1), (100, 1)):
            qt.assert_bitwise_equal(_call(x[:rows], w), both(rows)[pick], f"ROWS=64, {rows} rows")
    with knobs.override(QWEN38_NVFP4_PREFILL="auto", QWEN38_NVFP4_PREFILL_ROWS=""):
        for rows, pick in ((127, 0), (128, 1)):  # N = 1000 < 1024: 128 rows
            qt.assert_bitwise_equal(_call(x[:rows], w), both(rows)[pick], f"built-in rule, {rows} rows")
    for (n2, k2), cut in (((1024, 5120), 65), ((1024, 6400), 64)):
        w2 = _weight_cached(n2, k2, "cuda")
        x2 = qt.randn_nonzero(cut + 1, k2, device="cuda", seed=32)
        with knobs.override(QWEN38_NVFP4_PREFILL="auto", QWEN38_NVFP4_PREFILL_ROWS=""):
            for rows, pick in ((cut - 1, 0), (cut, 1)):
                c, d = _call(x2[:rows], w2, strategy="chunked"), _call(x2[:rows], w2, strategy="dequant")
                assert not torch.equal(c.view(torch.int16), d.view(torch.int16)), "chunked and dequant agree"
                qt.assert_bitwise_equal(_call(x2[:rows], w2), (c, d)[pick], f"built-in rule, {n2}x{k2}, {rows} rows")


@pytest.mark.gpu
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("m", [100, 600])
def test_graph_equals_eager_and_deterministic(strategy, m):
    n, k = 1000, 5120
    w = _weight_cached(n, k, "cuda")
    x = qt.randn_nonzero(m, k, device="cuda", seed=41)
    bias = qt.randn_nonzero(n, dtype=torch.float32, device="cuda", seed=42)
    fn = lambda t: OPS.nvfp4_linear(t, w.packed, w.scale, w.global_scale, bias, None)  # noqa: E731
    with _strategy(strategy):
        qt.assert_graph_equals_eager(fn, x)
        qt.assert_deterministic(fn, x, times=3)


@pytest.mark.gpu
def test_empty_rows_with_a_forced_strategy():
    w = _weight(48, 64, "cuda")
    for s in STRATEGIES:
        assert _call(torch.empty(0, 64, dtype=torch.bfloat16, device="cuda"), w, strategy=s).shape == (0, 48)


@pytest.mark.gpu
def test_bad_knob_values_are_named():
    w = _weight(48, 64, "cuda")
    x = qt.randn_nonzero(40, 64, device="cuda")
    with knobs.override(QWEN38_NVFP4_PREFILL="fast"):
        with pytest.raises(ValueError, match=r"qwen38\.nvfp4_linear: QWEN38_NVFP4_PREFILL must be auto, chunked, dequant or mma"):
            OPS.nvfp4_linear(x, w.packed, w.scale, w.global_scale)
        # 1..32 rows never read the knob: the skinny kernel serves them
        assert OPS.nvfp4_linear(x[:32], w.packed, w.scale, w.global_scale).shape == (32, 48)
    with knobs.override(QWEN38_NVFP4_PREFILL="auto", QWEN38_NVFP4_PREFILL_ROWS="-3"):
        with pytest.raises(ValueError, match=r"qwen38\.nvfp4_linear: QWEN38_NVFP4_PREFILL_ROWS must be"):
            OPS.nvfp4_linear(x, w.packed, w.scale, w.global_scale)


@pytest.mark.gpu
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_opcheck_prefill(strategy):
    w = _weight(48, 64, "cuda")
    x = qt.randn_nonzero(40, 64, device="cuda")
    with _strategy(strategy):
        qt.run_opcheck(OPS.nvfp4_linear.default,
                       (x, w.packed, w.scale, w.global_scale, torch.ones(48, device="cuda"), torch.float32),
                       test_utils=OPCHECK_UTILS)


# ---- nvfp4_dequantize ------------------------------------------------------------------------------


def _every_code_weight(n: int = 64, k: int = 256):
    """Every byte value 0..255 against block scales across the e4m3 range (subnormal 2^-9 .. 448)."""
    packed = torch.arange(n * k // 2, dtype=torch.int64).remainder(256).to(torch.uint8).reshape(n, k // 2)
    sv = torch.tensor([2.0 ** -9, 3 * 2.0 ** -9, 2.0 ** -7, 0.01953125, 0.375, 1.0, 1.75, 13.0, 104.0, 240.0, 448.0])
    scale = sv[torch.arange(n * k // 16).remainder(len(sv))].reshape(n, k // 16).to(torch.float8_e4m3fn)
    return packed, scale


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_dequantize_reference_is_exact(dtype):
    """The reference equals e2m1 * scale in float64 (then cast exactly) for every code and scale."""
    packed, scale = _every_code_weight()
    want64 = formats.dequantize_nvfp4(formats.NVFP4Weight(packed, scale, torch.tensor(1.0)), torch.float64)
    got = ref.nvfp4_dequantize(packed, scale, dtype)
    assert got.dtype == dtype and got.shape == (64, 256) and got.is_contiguous()
    assert torch.equal(got.to(torch.float64), want64), "a product is not exact in " + str(dtype)
    # the sign of zero survives (code 0x8 is -0)
    neg0 = (packed & 0x0F) == 8
    assert torch.signbit(got[:, 0::2][neg0]).all()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_dequantize_cuda_bit_exact(dtype):
    packed, scale = _every_code_weight()
    qt.assert_bitwise_equal(OPS.nvfp4_dequantize(packed.cuda(), scale.cuda(), dtype).cpu(),
                            ref.nvfp4_dequantize(packed, scale, dtype), f"every code, {dtype}")
    # quantized weights whose byte count is not a whole number of warp tiles (512 bytes) or blocks
    for n, k in ((136, 96), (1000, 5120), (48, 32)):
        w = _weight_cached(n, k, "cuda")
        qt.assert_bitwise_equal(OPS.nvfp4_dequantize(w.packed, w.scale, dtype),
                                ref.nvfp4_dequantize(w.packed.cpu(), w.scale.cpu(), dtype).cuda(), f"{n}x{k}")
    # the wrapper takes an NVFP4Weight
    w = _weight_cached(136, 96, "cuda")
    qt.assert_bitwise_equal(q.nvfp4_dequantize(w, dtype=dtype), OPS.nvfp4_dequantize(w.packed, w.scale, dtype),
                            "wrapper vs op")


@pytest.mark.gpu
def test_dequantize_graph_equals_eager():
    w = _weight_cached(1000, 5120, "cuda")
    fn = lambda p, s: OPS.nvfp4_dequantize(p, s, torch.bfloat16)  # noqa: E731
    qt.assert_graph_equals_eager(fn, w.packed, w.scale)


@pytest.mark.parametrize("device", DEVICES)
def test_dequantize_opcheck(device):
    w = _weight(48, 64, device)
    for dt in (torch.bfloat16, torch.float32):
        qt.run_opcheck(OPS.nvfp4_dequantize.default, (w.packed, w.scale, dt), test_utils=OPCHECK_UTILS)


@pytest.mark.parametrize("device", DEVICES)
def test_dequantize_bad_input_names_the_argument(device):
    w = _weight(48, 64, device)
    cases = [
        ("w_packed", (w.packed.to(torch.int8), w.scale, torch.bfloat16)),
        ("w_packed", (w.packed[:, :24], w.scale[:, :3], torch.bfloat16)),          # K = 48
        ("w_packed", (w.packed.t(), w.scale, torch.bfloat16)),                     # not 2-D [N, K/2] as stored
        ("w_packed", (w.packed.reshape(-1), w.scale, torch.bfloat16)),
        ("w_scale", (w.packed, w.scale.float(), torch.bfloat16)),
        ("w_scale", (w.packed, w.scale[:, :2], torch.bfloat16)),
        ("dtype", (w.packed, w.scale, torch.float64)),
        ("dtype", (w.packed, w.scale, torch.int32)),
    ]
    for arg, args in cases:
        with pytest.raises(ValueError, match=rf"qwen38\.nvfp4_dequantize: .*{arg}"):
            OPS.nvfp4_dequantize(*args)


@pytest.mark.gpu
def test_dequantize_device_mix_is_named():
    w = _weight(48, 64, "cuda")
    with pytest.raises(ValueError, match=r"qwen38\.nvfp4_dequantize: w_scale is on cpu"):
        OPS.nvfp4_dequantize(w.packed, w.scale.cpu(), torch.bfloat16)


def test_dequantize_fake_shape():
    w = _weight(48, 64, "cpu")
    with torch._subclasses.fake_tensor.FakeTensorMode() as mode:
        p, s = mode.from_tensor(w.packed), mode.from_tensor(w.scale)
        y = OPS.nvfp4_dequantize(p, s, torch.float16)
        assert y.shape == (48, 64) and y.dtype == torch.float16


# ---- CPU path of nvfp4_linear past 32 rows ---------------------------------------------------------


def test_cpu_reference_serves_more_than_32_rows():
    w = _weight(48, 64, "cpu", seed=5)
    x = qt.randn_nonzero(70, 64, seed=6)
    y = OPS.nvfp4_linear(x, w.packed, w.scale, w.global_scale)
    _assert_within_bound(y, x, w, what="CPU reference, 70 rows")
    qt.assert_bitwise_equal(y[40:41], OPS.nvfp4_linear(x[40:41].clone(), w.packed, w.scale, w.global_scale),
                            "row 40 of the CPU reference vs its 1-row call")
