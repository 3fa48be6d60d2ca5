"""fp8_block_linear (torch.ops.qwen38.fp8_block_linear): the CUDA skinny path (1..32 rows) against
the reference's float64 bound, exact decode of every e4m3 code, row invariance, graphs, determinism,
bad input. The formats and the reference itself: tests/test_fp8_reference.py."""
from __future__ import annotations

import functools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import qwen38_kernels as q
from qwen38_kernels import formats_fp8 as f8
from qwen38_kernels import testing as qt
from qwen38_kernels.reference import fp8 as ref

OPS = torch.ops.qwen38
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@functools.lru_cache(maxsize=8)
def _weight(n: int, k: int, device: str) -> f8.FP8BlockWeight:
    g = torch.Generator().manual_seed(n * 7 + k)
    w = f8.quantize_fp8_block((torch.randn(n, k, generator=g) * 0.05).to(torch.bfloat16))
    return f8.FP8BlockWeight(w.weight.to(device), w.weight_scale_inv.to(device))


def _call(x, w: f8.FP8BlockWeight, bias=None, out_dtype=None):
    return OPS.fp8_block_linear(x, w.weight, w.weight_scale_inv, bias, out_dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 8, 9, 16, 17, 32, 33, 100])
@pytest.mark.parametrize("n,k", [(48, 5120), (1024, 5120), (5120, 6144), (200, 272), (136, 48)])
@pytest.mark.parametrize("out", [None, torch.float32])
def test_accuracy_within_the_float64_bound(m, n, k, out):
    w = _weight(n, k, "cuda")
    x = qt.randn_nonzero(m, k, dtype=torch.bfloat16, device="cuda", seed=m)
    y = _call(x, w, out_dtype=out)
    assert y.shape == (m, n) and y.dtype == (out or torch.bfloat16) and torch.isfinite(y).all()
    y64, err = ref.fp8_block_linear_f64_bound(x.cpu(), w.weight.cpu(), w.weight_scale_inv.cpu())
    bound = err + (y64.abs() * 2.0 ** -8 if out is None else 0.0)
    excess = (y.cpu().to(torch.float64) - y64).abs() - bound
    assert not (excess > 0).any(), f"{int((excess > 0).sum())} outputs beyond the bound, worst {float(excess.max()):.3g}"


@pytest.mark.gpu
@pytest.mark.parametrize("xdt", [torch.bfloat16, torch.float16])
def test_every_e4m3_code_is_decoded_exactly(xdt):
    """One-hot activations read single weights back: every finite e4m3 byte, scale 1, fp32 out."""
    n, k = 16, 256
    codes = torch.arange(n * k, dtype=torch.int64).remainder(256).to(torch.uint8)
    codes[(codes & 0x7F) == 0x7F] = 0x3C  # 0x7F / 0xFF are NaN in e4m3fn: replace by 1.5
    w = codes.view(torch.float8_e4m3fn).reshape(n, k)
    s = torch.ones(1, 2)
    want = w.float()
    for k0 in range(0, k, 32):
        x = torch.zeros(32, k, dtype=xdt)
        x[torch.arange(32), k0 + torch.arange(32)] = 1.0
        y = OPS.fp8_block_linear(x.cuda(), w.cuda(), s.cuda(), None, torch.float32).cpu()
        qt.assert_bitwise_equal(y + 0.0, want[:, k0:k0 + 32].t().contiguous() + 0.0, f"codes at k {k0}")


@pytest.mark.gpu
@pytest.mark.parametrize("n,k,ks,nt", [(256, 5120, 2, 4), (256, 5120, 4, 4), (128, 5120, 2, 2), (384, 5120, 4, 2),
                                       (128, 5120, 8, 2), (96, 6144, 8, 2), (64, 17408, 8, 2)])
def test_stream_kernel_writes_the_skinny_kernels_bits(n, k, ks, nt, skinny_variant):
    """1..32 rows of a served shape go through the register-stream kernel (QWEN38_FP8_STREAM=1, the
    default: at 2 and 4 tiles a warp its transposed form, one instantiation per 8 rows of x, except
    4 tiles at k split 8); with the knob at 0
    the skinny kernel computes them (narrow: at 17..32 rows): the same bits at every row count, bf16
    and fp16 activations, with bias and fp32 output, from a strided x (N = 384: three scale rows);
    and every row of a 32-row call agrees with its 1-row call."""
    skinny_variant("fp8_block_linear", n, k, ks, nt)
    w = _weight(n, k, "cuda")
    bias = qt.randn_nonzero(n, dtype=torch.float32, device="cuda", seed=3)
    for xdt in (torch.bfloat16, torch.float16):
        x = qt.randn_nonzero(32, k + 64, dtype=xdt, device="cuda", seed=10 * ks + nt)[:, :k]  # row stride k + 64
        for off in ("0", "narrow"):  # the skinny kernel at every row count / at 17..32 rows
            qt.assert_knob_keeps_bits(lambda t, *e: _call(t, w, *e), x, "QWEN38_FP8_STREAM", off,
                                      extras=((None, None), (bias, torch.float32)),
                                      what=f"{xdt} stream vs skinny (QWEN38_FP8_STREAM={off}): ")
        qt.assert_row_invariant(lambda t: _call(t, w), x, max_rows=32)


@pytest.mark.gpu
@pytest.mark.parametrize("k,ks,nt", [(5120, 4, 4), (5120, 4, 2), (6144, 8, 2), (17408, 8, 2)])
def test_xfrag_copy_keeps_the_stream_kernels_bits(k, ks, nt, skinny_variant):
    """At K = 5120 and k split 4 with 2 and 4 tiles a warp, and at K = 6144 / 17408, k split 8 and 2
    tiles, the register-stream kernel can read x from a copy in the fragment order (QWEN38_FP8_XFRAG; written by a copy kernel first): testing.assert_xfrag_knob
    (forced on, every row count 1..32 gives the bits of the row-major reads, for bf16 and fp16
    activations, with bias and fp32 output, from a strided x, in 32-row slices of a longer x and in a
    CUDA graph; rows invariant; auto on compute capability 9 from 9 rows; N = 384: three scale rows).
    A knob value other than auto, 0 or 1 is an error naming it."""
    n = 384
    skinny_variant("fp8_block_linear", n, k, ks, nt)
    w = _weight(n, k, "cuda")
    bias = qt.randn_nonzero(n, dtype=torch.float32, device="cuda", seed=61)
    xl = qt.randn_nonzero(77, k, device="cuda", seed=63)  # slices of 32, 32 and 13 rows
    for xdt in (torch.bfloat16, torch.float16):
        x = qt.randn_nonzero(32, k + 64, dtype=xdt, device="cuda", seed=62)[:, :k]  # row stride k + 64
        with q.knobs.override(QWEN38_FP8_XSPLIT="0"):  # (auto takes K 17408 at 17..32 rows: tests/test_xsplit.py)
            qt.assert_xfrag_knob(lambda t, *e: _call(t, w, *e), x, bias, xl, "QWEN38_FP8_XFRAG",
                                 "fp8_stream_tf_kernel", "QWEN38_FP8_PREFILL")
    with q.knobs.override(QWEN38_FP8_XFRAG="2"), pytest.raises(ValueError, match="QWEN38_FP8_XFRAG"):
        _call(x[:9], w)


def _random_codes_weight(n: int, k: int, g: torch.Generator) -> f8.FP8BlockWeight:
    """A weight of random finite e4m3 codes (both signs, no NaN) and random block scales on the GPU: for
    comparing the bits of two launch forms on the model's large shapes without quantizing them."""
    mag = torch.randint(0, 127, (n, k), generator=g, device="cuda", dtype=torch.int32)
    sign = torch.randint(0, 2, (n, k), generator=g, device="cuda", dtype=torch.int32) << 7
    w = (mag | sign).to(torch.uint8).view(torch.float8_e4m3fn)
    s = torch.rand((n + 127) // 128, (k + 127) // 128, generator=g, device="cuda") * 1e-3 + 1e-4
    return f8.FP8BlockWeight(w, s)


@pytest.mark.gpu
def test_three_cta_form_writes_the_fragment_kernels_bits(skinny_variant):
    """At 17..24 rows (3 groups of 8 rows) the fragment-order kernel at K = 5120, k split 4 and 4 tiles a
    warp also has a form held to 3 CTAs an SM on sm_90a (fp8_stream_tf3_kernel; QWEN38_FP8_THREE_CTAS):
    forced on (1) it runs at 17..24 rows only and gives the bits of the default
    form (0) for bf16 and fp16 activations, with bias and fp32 output, from a strided x, in a CUDA graph;
    every row of a 32-row call agrees with its 1-row call. Auto (the default) takes it on compute
    capability 9 where it runs the grid in fewer rounds of CTAs: on a 132-SM GPU 34816x5120, 17408x5120,
    12288x5120 and 10240x5120 (1088, 544, 384 and 320 CTAs: 264 slots at 2 an SM, 396 at 3), not 16384x5120
    or 14336x5120 (512, 448: two rounds either way), with the same bits. A knob value other than auto, 0
    or 1 is an error naming the knob."""
    n, k = 256, 5120
    skinny_variant("fp8_block_linear", n, k, 4, 4)
    w = _weight(n, k, "cuda")
    bias = qt.randn_nonzero(n, dtype=torch.float32, device="cuda", seed=71)
    props = torch.cuda.get_device_properties(0)
    three = lambda names: any("fp8_stream_tf3_kernel" in s for s in names)  # noqa: E731
    for xdt in (torch.bfloat16, torch.float16):
        x = qt.randn_nonzero(32, k + 64, dtype=xdt, device="cuda", seed=72)[:, :k]  # row stride k + 64
        for m in (1, 9, 16, 17, 20, 24, 25, 32):
            with q.knobs.override(QWEN38_FP8_THREE_CTAS="1"):
                names = qt.cuda_kernel_names(lambda: _call(x[:m], w))
            assert three(names) == (17 <= m <= 24), f"{xdt} knob 1, {m} rows: {names}"
            assert not three(qt.cuda_kernel_names(lambda: _call(x[:m], w))), f"{xdt} auto, 64 CTAs, {m} rows"
        with q.knobs.override(QWEN38_FP8_THREE_CTAS="0"):
            qt.assert_knob_keeps_bits(lambda t, *e: _call(t, w, *e), x, "QWEN38_FP8_THREE_CTAS", "1",
                                      rows=(17, 18, 21, 24), extras=((None, None), (bias, torch.float32)),
                                      what=f"{xdt} three CTAs: ")
            want = _call(x[:23], w, bias)
        with q.knobs.override(QWEN38_FP8_THREE_CTAS="1"):
            qt.assert_row_invariant(lambda t: _call(t, w), x, max_rows=32)
            qt.assert_bitwise_equal(qt.assert_graph_equals_eager(lambda t: _call(t, w, bias), x[:23]), want,
                                    f"{xdt} graph of the 3-CTA form vs the default form")
    with q.knobs.override(QWEN38_FP8_THREE_CTAS="3"), pytest.raises(ValueError, match="QWEN38_FP8_THREE_CTAS"):
        _call(x[:17], w)
    if (props.major, props.multi_processor_count) != (9, 132):
        return
    g = torch.Generator(device="cuda").manual_seed(73)
    x = qt.randn_nonzero(32, k, device="cuda", seed=74)
    for nn in (34816, 17408, 12288, 10240, 16384, 14336):
        skinny_variant("fp8_block_linear", nn, k, 4, 4)
        wb = _random_codes_weight(nn, k, g)
        for m in (16, 17, 24, 25):
            got = three(qt.cuda_kernel_names(lambda: _call(x[:m], wb)))
            assert got == (nn not in (16384, 14336) and 17 <= m <= 24), f"auto, {nn}x{k}, {m} rows"
        qt.assert_knob_keeps_bits(lambda t: _call(t, wb), x, "QWEN38_FP8_THREE_CTAS", "0", rows=(17, 24),
                                  what=f"{nn}x{k} auto: ")
        del wb


@pytest.mark.gpu
def test_stream_kernel_decodes_every_e4m3_code(skinny_variant):
    """test_every_e4m3_code_is_decoded_exactly through the register-stream kernel (K = 5120, 16
    one-hot rows a call, two scale rows of different values)."""
    n, k = 256, 5120
    skinny_variant("fp8_block_linear", n, k, 2, 4)
    codes = torch.arange(n * k, dtype=torch.int64).remainder(256).to(torch.uint8)
    codes[(codes & 0x7F) == 0x7F] = 0x3C  # NaN codes replaced by 1.5
    w = codes.view(torch.float8_e4m3fn).reshape(n, k)
    s = torch.tensor([[2.0 ** -3] * 40, [3.0] * 40])
    want = w.float() * s.repeat_interleave(128, 0).repeat_interleave(128, 1)
    for k0 in list(range(0, 256, 16)) + [5104]:  # bytes 0..255 at k 0..255 of every row: every code
        x = torch.zeros(16, k, dtype=torch.bfloat16)
        x[torch.arange(16), k0 + torch.arange(16)] = 1.0
        y = OPS.fp8_block_linear(x.cuda(), w.cuda(), s.cuda(), None, torch.float32).cpu()
        qt.assert_bitwise_equal(y + 0.0, want[:, k0:k0 + 16].t().contiguous() + 0.0, f"codes at k {k0}")


@pytest.mark.gpu
@settings(deadline=None)
@given(m=st.integers(1, 32), data=st.data(), shape=st.sampled_from([(48, 5120), (1024, 5120), (200, 272)]))
def test_row_invariance_fuzz(m, data, shape):
    n, k = shape
    row = data.draw(st.integers(0, m - 1))
    w = _weight(n, k, "cuda")
    x = qt.randn_nonzero(m, k, device="cuda", seed=m * 5 + row)
    qt.assert_bitwise_equal(_call(x, w)[row:row + 1], _call(x[row:row + 1].clone(), w), f"row {row} of {m}")


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 32])
def test_graph_equals_eager_and_deterministic(m):
    w = _weight(1024, 5120, "cuda")
    x = qt.randn_nonzero(m, 5120, device="cuda", seed=6)
    fn = lambda t: _call(t, w, None, torch.float32)  # noqa: E731
    qt.assert_graph_equals_eager(fn, x)
    qt.assert_deterministic(fn, x, times=3)


@pytest.mark.gpu
def test_wrapper_bias():
    w = _weight(200, 272, "cuda")
    x = qt.randn_nonzero(2, 3, 272, device="cuda", seed=1)
    bias = qt.randn_nonzero(200, dtype=torch.float32, device="cuda", seed=2)
    y = q.fp8_block_linear(x, w, bias=bias)
    assert y.shape == (2, 3, 200)
    qt.assert_bitwise_equal(y, _call(x, w, bias), "wrapper vs op")


@pytest.mark.gpu
@pytest.mark.parametrize("n,k", [(200, 272), (384, 5120)])
def test_more_than_32_rows_in_slices(n, k):
    """32-row slices of the skinny kernel (auto at 33..63 rows for a shape the tile table does not
    list: the tensor-core kernel from kMmaRows = 64; QWEN38_FP8_PREFILL=chunked at any row count):
    every row bit-identical to its 1-row call, with bias and fp32 output, from a strided x (the
    float64 bound: test_accuracy_within_...)."""
    w = _weight(n, k, "cuda")
    bias = qt.randn_nonzero(n, dtype=torch.float32, device="cuda", seed=5)
    x = qt.randn_nonzero(200, k + 32, device="cuda", seed=6)[:, :k]
    for rows, strategy in ((33, "auto"), (63, "auto"), (64, "chunked"), (200, "chunked")):
        for extra in ((None, None), (bias, torch.float32)):
            with q.knobs.override(QWEN38_FP8_PREFILL=strategy):
                y = _call(x[:rows], w, *extra)
            assert y.shape == (rows, n)
            for r in (0, 31, 32, rows - 1):
                qt.assert_bitwise_equal(y[r:r + 1], _call(x[r:r + 1], w, *extra), f"{rows} rows ({strategy}): row {r}")


@pytest.mark.parametrize("device", DEVICES)
def test_bad_input_names_the_argument(device):
    w = _weight(48, 256, device)
    x = qt.randn_nonzero(2, 256, device=device)
    cases = [
        ("x", (x.float(), w.weight, w.weight_scale_inv)),
        ("x", (qt.randn_nonzero(2, 128, device=device), w.weight, w.weight_scale_inv)),
        ("w", (x, w.weight.view(torch.uint8), w.weight_scale_inv)),
        ("w_scale_inv", (x, w.weight, w.weight_scale_inv.double())),
        ("w_scale_inv", (x, w.weight, torch.ones(1, 3, device=device))),
        ("bias", (x, w.weight, w.weight_scale_inv, torch.ones(47, device=device))),
    ]
    for arg, args in cases:
        with pytest.raises(ValueError, match=rf"qwen38\.fp8_block_linear: .*{arg}"):
            OPS.fp8_block_linear(*args)


# opcheck's test_schema cannot compare float8 inputs (see tests/test_nvfp4.py); the other checks run
OPCHECK_UTILS = ("test_faketensor", "test_autograd_registration", "test_aot_dispatch_dynamic")


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    w = _weight(48, 256, device)
    x = qt.randn_nonzero(3, 256, device=device)
    qt.run_opcheck(OPS.fp8_block_linear.default, (x, w.weight, w.weight_scale_inv, None, None),
                   test_utils=OPCHECK_UTILS)


# ---- more than 32 rows: the chunked, dequant and mma strategies (QWEN38_FP8_PREFILL) ---------------


def _check_bound(y, x, w, bias, what):
    y64, err = ref.fp8_block_linear_f64_bound(x.cpu(), w.weight.cpu(), w.weight_scale_inv.cpu(),
                                             None if bias is None else bias.cpu())
    bound = err + qt.rounding_slack(y.cpu())  # the documented bound: spacing(y) / 2 + err
    excess = (y.cpu().to(torch.float64) - y64).abs() - bound
    assert not (excess > 0).any(), f"{what}: {int((excess > 0).sum())} outputs beyond the bound"


@pytest.mark.gpu
@pytest.mark.parametrize("strategy", ["chunked", "dequant", "mma"])
@pytest.mark.parametrize("m,n,k", [(33, 1000, 5120), (300, 200, 272), (40, 4200, 16384)])
def test_prefill_strategies_within_the_float64_bound(strategy, m, n, k):
    """Both strategies, bias and bf16 / fp32 output, against the float64 bound. 4200 x 16384: the
    dequant strategy's weight split in two N slices (4096 rows fit its 384 MB of terms), the last
    one not a multiple of 128 rows."""
    w = _weight(n, k, "cuda")
    x = qt.randn_nonzero(m, k, dtype=torch.bfloat16, device="cuda", seed=m + n)
    bias = qt.randn_nonzero(n, dtype=torch.float32, device="cuda", seed=7)
    for out in (None, torch.float32):
        with q.knobs.override(QWEN38_FP8_PREFILL=strategy):
            y = _call(x, w, bias, out)
        assert y.shape == (m, n) and y.dtype == (out or torch.bfloat16)
        _check_bound(y, x, w, bias, f"{strategy}, {m} x {n} x {k}, out {out}")


@pytest.mark.gpu
def test_prefill_auto_threshold_and_fp16(skinny_variant):
    """auto: chunked up to 63 rows (each row = its 1-row call), mma from 64 rows (kMmaRows; the
    forced mma strategy's bits, which differ from the chunked ones somewhere, within the bound), for
    bf16 and fp16 x alike; dequant forced on fp16 is refused with a clear error; bad knob values are
    named. The shape's table entry is replaced by one without prefill_rows, so the rule decides
    (test_skinny_variants.py covers a table's threshold)."""
    n, k = 1024, 5120
    from qwen38_kernels import _C
    ks, nt, _ = _C.skinny_default_variant(n, k)
    skinny_variant("fp8_block_linear", n, k, ks, nt)
    w = _weight(n, k, "cuda")
    for dt in (torch.bfloat16, torch.float16):
        x = qt.randn_nonzero(64, k, dtype=dt, device="cuda", seed=3)
        y63 = _call(x[:63], w)
        for r in (0, 33, 62):
            qt.assert_bitwise_equal(y63[r:r + 1], _call(x[r:r + 1], w), f"auto at 63 rows ({dt}): row {r}")
        y64 = _call(x, w)
        with q.knobs.override(QWEN38_FP8_PREFILL="mma"):
            qt.assert_bitwise_equal(y64, _call(x, w), f"auto at 64 rows ({dt}) is the mma strategy")
        with q.knobs.override(QWEN38_FP8_PREFILL="chunked"):
            c64 = _call(x, w)
        assert not torch.equal(y64.view(torch.int16), c64.view(torch.int16)), f"auto at 64 rows ({dt}) took chunked"
        _check_bound(y64, x, w, None, f"auto at 64 rows ({dt})")
    x16 = x.half()
    with q.knobs.override(QWEN38_FP8_PREFILL="dequant"):
        with pytest.raises(ValueError, match=r"qwen38\.fp8_block_linear: QWEN38_FP8_PREFILL=dequant serves bfloat16"):
            _call(x16, w)
    with q.knobs.override(QWEN38_FP8_PREFILL="fast"):
        with pytest.raises(ValueError, match=r"qwen38\.fp8_block_linear: QWEN38_FP8_PREFILL must be"):
            _call(x, w)
        assert _call(x[:32], w).shape == (32, n)  # 1..32 rows never read the knob


@pytest.mark.gpu
def test_prefill_dequant_graph_equals_eager():
    w = _weight(1000, 5120, "cuda")
    x = qt.randn_nonzero(200, 5120, device="cuda", seed=9)
    with q.knobs.override(QWEN38_FP8_PREFILL="dequant"):
        qt.assert_graph_equals_eager(lambda t: _call(t, w), x)
        qt.assert_deterministic(lambda t: _call(t, w), x, times=3)


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(33, 48, 5120), (129, 257, 144), (517, 1024, 6144)])
def test_prefill_mma_fp16_edges_and_fp16_out(m, n, k):
    """The tensor-core strategy with fp16 x (and fp16 / fp32 output, bias in fp16), on tiles cut by
    every edge: rows past a 128-row tile, columns past a 128-column tile (N = 48, 257), a last K
    block of 16 (K = 144)."""
    w = _weight(n, k, "cuda")
    x = qt.randn_nonzero(m, k, dtype=torch.float16, device="cuda", seed=m + k)
    bias = qt.randn_nonzero(n, dtype=torch.float16, device="cuda", seed=5)
    with q.knobs.override(QWEN38_FP8_PREFILL="mma"):
        for out in (None, torch.float32):
            y = _call(x, w, bias, out)
            assert y.shape == (m, n) and y.dtype == (out or torch.float16)
            _check_bound(y, x, w, bias, f"mma fp16, {m} x {n} x {k}, out {out}")


@pytest.mark.gpu
def test_prefill_mma_graph_equals_eager_and_row_independent():
    """Graph == eager, deterministic, and a row's bits do not depend on the others (same tile
    arithmetic for every row: row r alone in a 33-row call equals row r of a 300-row call)."""
    w = _weight(1000, 5120, "cuda")
    x = qt.randn_nonzero(300, 5120, device="cuda", seed=19)
    with q.knobs.override(QWEN38_FP8_PREFILL="mma"):
        qt.assert_graph_equals_eager(lambda t: _call(t, w), x)
        qt.assert_deterministic(lambda t: _call(t, w), x, times=3)
        full = _call(x, w)
        for r in (0, 140, 299):
            part = _call(torch.cat([x[r:r + 1], x[:32]]), w)
            qt.assert_bitwise_equal(part[0:1], full[r:r + 1], f"mma: row {r} alone and in 300 rows")
