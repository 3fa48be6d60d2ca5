"""nvfp4_linear (torch.ops.qwen38.nvfp4_linear): the CUDA skinny path (1..32 rows) against the
reference, bit-level decode, row invariance, graphs, determinism and bad input. More than 32 rows
(the prefill strategies) and nvfp4_dequantize: tests/test_nvfp4_prefill.py.

CPU: the software e2m1 decode of csrc/common/nvfp4.cuh (compiled as a host program), opcheck and
the checks of the reference (the formats and the reference itself: tests/test_formats.py).
"""
from __future__ import annotations

import functools
import os
import shutil
import struct
import subprocess
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import qwen38_kernels as q
from qwen38_kernels import formats
from qwen38_kernels import testing as qt
from qwen38_kernels.reference import gemm as ref

OPS = torch.ops.qwen38
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def _e2m1(nib: int) -> float:
    v = E2M1[nib & 7]
    return -v if nib & 8 else v


def _f16(bits: int) -> float:
    return struct.unpack("<e", struct.pack("<H", bits))[0]


def _bf16(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits << 16))[0]


# ---- the software decode, on the host --------------------------------------------------------


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_software_e2m1_decode_every_byte(tmp_path):
    exe = tmp_path / "decode"
    subprocess.run(["nvcc", "-std=c++17", "-I", os.path.join(ROOT, "csrc"),
                    os.path.join(ROOT, "tests", "native", "nvfp4_decode_check.cu"), "-o", str(exe)],
                   check=True, capture_output=True)
    lines = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    rows = [ln.split() for ln in lines if ln.strip() and not ln.startswith("w ")]
    words = [ln.split()[1:] for ln in lines if ln.startswith("w ")]
    assert len(rows) == 256 and len(words) == 16 * 8 + 512 + 2
    for b, f16, bf16, bf16_mul in rows:
        b, f16, bf16 = int(b), int(f16, 16), int(bf16, 16)
        assert int(bf16_mul, 16) == bf16, f"bf16 byte {b:#04x}: the multiply form differs"
        lo, hi = _e2m1(b & 15), _e2m1(b >> 4)
        assert _f16(f16 & 0xFFFF) * 2.0 ** 14 == lo and _f16(f16 >> 16) * 2.0 ** 14 == hi, f"fp16 byte {b:#04x}"
        assert _bf16(bf16 & 0xFFFF) * 2.0 ** 126 == lo and _bf16(bf16 >> 16) * 2.0 ** 126 == hi, f"bf16 byte {b:#04x}"
        # sign of zero kept: 0x8 is -0
        if b & 15 == 8:
            assert f16 & 0x8000 and bf16 & 0x8000
    # word-level decode of the skinny kernel: pair i = (element i, element i + 4), signs of zero kept
    for w, *pairs in words:
        w = int(w, 16)
        nib = [(w >> (4 * i)) & 15 for i in range(8)]
        for i in range(4):
            f16, bf16 = int(pairs[i], 16), int(pairs[4 + i], 16)
            lo, hi = nib[i], nib[i + 4]
            assert _f16(f16 & 0xFFFF) * 2.0 ** 14 == _e2m1(lo) and _f16(f16 >> 16) * 2.0 ** 14 == _e2m1(hi), f"fp16 word {w:#010x} pair {i}"
            assert _bf16(bf16 & 0xFFFF) * 2.0 ** 126 == _e2m1(lo) and _bf16(bf16 >> 16) * 2.0 ** 126 == _e2m1(hi), f"bf16 word {w:#010x} pair {i}"
            assert bool(f16 & 0x8000) == bool(lo & 8) and bool(f16 >> 31) == bool(hi & 8)
            assert bool(bf16 & 0x8000) == bool(lo & 8) and bool(bf16 >> 31) == bool(hi & 8)


# ---- helpers ----------------------------------------------------------------------------------


def _weight(n: int, k: int, device, seed: int = 0, scale: float = 0.05) -> formats.NVFP4Weight:
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(n, k, generator=g) * scale).to(torch.bfloat16)
    qw = formats.quantize_nvfp4(w)
    return formats.NVFP4Weight(qw.packed.to(device), qw.scale.to(device), qw.global_scale.to(device))


@functools.lru_cache(maxsize=8)
def _weight_cached(n: int, k: int, device: str) -> formats.NVFP4Weight:
    """One quantized weight per shape for the fuzz (quantizing on the CPU is the slow part)."""
    return _weight(n, k, device, seed=n)


def _random_codes_weight(n: int, k: int, g: torch.Generator) -> formats.NVFP4Weight:
    """Random packed codes and e4m3 scales in [0.5, 2.5) on the GPU (no quantization: fast at large N),
    global scale 0.01: for bit comparisons between kernels."""
    return formats.NVFP4Weight(
        torch.randint(0, 256, (n, k // 2), device="cuda", dtype=torch.uint8, generator=g),
        (torch.rand(n, k // 16, device="cuda", generator=g) * 2 + 0.5).to(torch.float8_e4m3fn),
        torch.tensor([0.01], device="cuda"))


def _h200_weights(skinny_variant, ns: tuple, seed: int):
    """For the launch rules measured on the 132-SM H200: each N of ``ns`` at K = 5120 with the tables'
    variant (k split 4, 4 tiles a warp) registered, and a weight of random codes (only the bits of two
    forms are compared); nothing on another GPU."""
    props = torch.cuda.get_device_properties(0)
    if (props.major, props.multi_processor_count) != (9, 132):
        return
    g = torch.Generator(device="cuda").manual_seed(seed)
    for n in ns:
        skinny_variant("nvfp4_linear", n, 5120, 4, 4)
        yield n, _random_codes_weight(n, 5120, g)


def _call(x, w: formats.NVFP4Weight, bias=None, out_dtype=None):
    return OPS.nvfp4_linear(x, w.packed, w.scale, w.global_scale, bias, out_dtype)


def _error_bound(x, w: formats.NVFP4Weight, bias, out_dtype):
    """|y - y64| allowed: one ulp of the output dtype at y64 plus the fp32 accumulation error bound
    K * 2^-23 * sum_k |x_k W_k| * |global| (any summation order of K fp32 terms)."""
    wd = formats.dequantize_nvfp4(formats.NVFP4Weight(w.packed.cpu(), w.scale.cpu(), w.global_scale.cpu()),
                                  torch.float64)
    x64 = x.cpu().to(torch.float64).reshape(-1, x.shape[-1])
    mag = x64.abs() @ wd.abs().t()
    k = x.shape[-1]
    return k * 2.0 ** -23 * mag


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 2, 7, 8, 9, 16, 17, 31, 32])
@pytest.mark.parametrize("n,k", [(48, 5120), (1024, 5120), (1000, 6144), (5120, 6144), (96, 96), (136, 32)])
@pytest.mark.parametrize("out", [None, torch.float32])
def test_accuracy_against_float64(m, n, k, out):
    w = _weight_cached(n, k, "cuda")
    x = qt.randn_nonzero(m, k, dtype=torch.bfloat16, device="cuda", seed=m)
    y = _call(x, w, out_dtype=out)
    assert y.shape == (m, n) and y.dtype == (out or torch.bfloat16) and torch.isfinite(y).all()
    # the float64 evaluation, rounded once to fp32 (2^-24 relative: far inside the bound below)
    y64 = ref.nvfp4_linear(x.cpu(), w.packed.cpu(), w.scale.cpu(), w.global_scale.cpu(), None, torch.float32,
                           acc_dtype=torch.float64).to(torch.float64)
    bound = _error_bound(x, w, None, out)
    err = (y.cpu().to(torch.float64) - y64).abs()
    if out is None:  # plus one bf16 ulp of the final rounding
        bound = bound + y64.abs() * 2.0 ** -8 + 2.0 ** -133
    bad = err > bound
    assert not bad.any(), (f"{int(bad.sum())} of {bad.numel()} outputs beyond the fp32 accumulation bound; "
                           f"worst excess {float((err - bound).max()):.3g}")


@pytest.mark.gpu
@pytest.mark.parametrize("xdt", [torch.bfloat16, torch.float16])
def test_every_code_and_scale_is_decoded_exactly(xdt):
    """One-hot activations read single weights back: every byte value 0..255 against block scales
    across the e4m3 range (subnormal 2^-9 up to 448), out_dtype fp32: y must equal the dequantized
    weight times the global scale exactly."""
    n, k = 64, 256
    packed = torch.arange(n * k // 2, dtype=torch.int64).remainder(256).to(torch.uint8).reshape(n, k // 2)
    sv = torch.tensor([2.0 ** -9, 2.0 ** -7, 0.01953125, 0.375, 1.0, 1.75, 13.0, 104.0, 240.0, 448.0])
    scale = sv[torch.arange(n * k // 16).remainder(len(sv))].reshape(n, k // 16).to(torch.float8_e4m3fn)
    gs = torch.tensor(0.5)
    w = formats.NVFP4Weight(packed.cuda(), scale.cuda(), gs.cuda())
    want = formats.dequantize_nvfp4(formats.NVFP4Weight(packed, scale, gs), torch.float32)  # [n, k]
    for k0 in range(0, k, 32):
        x = torch.zeros(32, k, dtype=xdt)
        x[torch.arange(32), k0 + torch.arange(32)] = 1.0
        y = _call(x.cuda(), w, out_dtype=torch.float32).cpu()
        # + 0.0: a -0 weight (code 0x8) read through a sum that starts at +0 comes back as +0
        qt.assert_bitwise_equal(y + 0.0, want[:, k0:k0 + 32].t().contiguous() + 0.0,
                                f"codes at k {k0}..{k0 + 31}")


@pytest.mark.gpu
@settings(deadline=None)
@given(m=st.integers(1, 32), data=st.data(),
       shape=st.sampled_from([(48, 5120), (1000, 5120), (5120, 6144), (96, 160)]),
       xdt=st.sampled_from([torch.bfloat16, torch.float16]))
def test_row_invariance_fuzz(m, data, shape, xdt):
    n, k = shape
    row = data.draw(st.integers(0, m - 1))
    w = _weight_cached(n, k, "cuda")
    x = qt.randn_nonzero(m, k, dtype=xdt, device="cuda", seed=m * 7 + row)
    full = _call(x, w)
    one = _call(x[row:row + 1].clone(), w)
    qt.assert_bitwise_equal(full[row:row + 1], one, f"row {row} of {m}, W {n}x{k}")


@pytest.mark.gpu
def test_row_invariance_all_row_counts():
    w = _weight(1024, 5120, "cuda", seed=3)
    x = qt.randn_nonzero(32, 5120, device="cuda", seed=4)
    qt.assert_row_invariant(lambda t: _call(t, w), x, max_rows=32)


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 16, 32])
def test_graph_equals_eager_and_deterministic(m):
    w = _weight(5120, 6144, "cuda", seed=5)
    x = qt.randn_nonzero(m, 6144, device="cuda", seed=6)
    bias = qt.randn_nonzero(5120, dtype=torch.float32, device="cuda", seed=7)
    fn = lambda t: _call(t, w, bias, torch.float32)  # noqa: E731
    qt.assert_graph_equals_eager(fn, x)
    qt.assert_deterministic(fn, x, times=3)


@pytest.mark.gpu
@pytest.mark.parametrize("n,k", [(1000, 6144), (48, 5120), (136, 32)])
def test_ring_depth_and_l2_span_change_no_bit(n, k):
    """QWEN38_NVFP4_DEPTH and QWEN38_NVFP4_L2SPAN only reshape the weight pipeline: every depth 2..8
    and every span give the default's bits, at 1, 16 and 32 rows (both m16 kernels)."""
    w = _weight(n, k, "cuda", seed=21)
    x = qt.randn_nonzero(32, k, device="cuda", seed=22)
    for m in (1, 16, 32):
        base = _call(x[:m], w)
        for depth in ("2", "3", "5", "8"):
            with q.knobs.override(QWEN38_NVFP4_DEPTH=depth):
                qt.assert_bitwise_equal(_call(x[:m], w), base, f"depth {depth}, {m} rows")
        for span in ("0", "256"):
            with q.knobs.override(QWEN38_NVFP4_L2SPAN=span):
                qt.assert_bitwise_equal(_call(x[:m], w), base, f"L2 span {span}, {m} rows")


@pytest.mark.gpu
@pytest.mark.parametrize("n,k,ks,nt", [(256, 5120, 2, 4), (256, 5120, 4, 4), (128, 5120, 8, 4), (128, 5120, 2, 2),
                                       (64, 5120, 4, 2), (96, 6144, 8, 2), (128, 6144, 8, 4), (64, 17408, 8, 4),
                                       (32, 17408, 8, 2)])
def test_stream_kernel_writes_the_ring_kernels_bits(n, k, ks, nt, skinny_variant):
    """1..32 rows of a served shape go through the register-stream kernel (QWEN38_NVFP4_STREAM=1, the
    default; at 2 and 4 tiles a warp its transposed body at 1..8 and 17..24 rows, the x-as-A body at
    9..16 and 25..32); with the knob at 0 the ring kernel computes them:
    the same bits at every row count, for bf16 and fp16 activations, with bias and fp32 output, from
    a strided x; and every row of a 32-row call agrees with its 1-row call."""
    skinny_variant("nvfp4_linear", n, k, ks, nt)
    w = _weight(n, k, "cuda", seed=n + k + ks)
    bias = qt.randn_nonzero(n, dtype=torch.float32, device="cuda", seed=3)
    for xdt in (torch.bfloat16, torch.float16):
        x = qt.randn_nonzero(32, k + 64, dtype=xdt, device="cuda", seed=10 * ks + nt)[:, :k]  # row stride k + 64
        qt.assert_knob_keeps_bits(lambda t, *e: _call(t, w, *e), x, "QWEN38_NVFP4_STREAM", "0",
                                  extras=((None, None), (bias, torch.float32)), what=f"{xdt} stream vs ring: ")
        qt.assert_row_invariant(lambda t: _call(t, w), x, max_rows=32)


@pytest.mark.gpu
def test_staged_body_writes_the_register_bodies_bits(skinny_variant):
    """At K = 5120, k split 4 and 4 tiles a warp the register-stream kernel also has a staged body (the
    weights through a per-thread cp.async ring; QWEN38_NVFP4_STAGED): forced on (1) it computes every
    row count (1..4 groups of 8 rows) with the bits of the register bodies (0), for bf16 and fp16
    activations, with bias and fp32 output, from a strided x, and every row of a 32-row call agrees
    with its 1-row call; the profiler shows which kernel ran. Auto (the default) picks it only at 1..16
    rows where the register form's grid needs more than one round of CTAs and the staged one's fits in
    one: on a 132-SM H200, 17408x5120 at 1 and 16 rows (544 CTAs: 4 an SM registered, 8 and 6
    staged), not at 32 rows (wave_fit's) nor 16384x5120 at 1 row (512 CTAs fit either way); the same
    bits (checked without QWEN38_NVFP4_XFRAG, whose copy of x auto takes first from 9 rows). A knob
    value other than auto, 0 or 1 is an error naming the knob."""
    k = 5120
    skinny_variant("nvfp4_linear", 256, k, 4, 4)
    w = _weight(256, k, "cuda", seed=31)
    bias = qt.randn_nonzero(256, dtype=torch.float32, device="cuda", seed=32)
    staged = lambda names: any("nvfp4_stream_ts_kernel" in s for s in names)  # noqa: E731
    for xdt in (torch.bfloat16, torch.float16):
        x = qt.randn_nonzero(32, k + 64, dtype=xdt, device="cuda", seed=33)[:, :k]  # row stride k + 64
        for m in (1, 9, 17, 32):
            with q.knobs.override(QWEN38_NVFP4_STAGED="1"):
                assert staged(qt.cuda_kernel_names(lambda: _call(x[:m], w))), f"knob 1, {m} rows"
            with q.knobs.override(QWEN38_NVFP4_STAGED="0"):
                assert not staged(qt.cuda_kernel_names(lambda: _call(x[:m], w))), f"knob 0, {m} rows"
            assert not staged(qt.cuda_kernel_names(lambda: _call(x[:m], w))), f"auto, 32 CTAs, {m} rows"
        _assert_body_knob(w, x, bias, "QWEN38_NVFP4_STAGED", "0", "1", (1, 3, 8, 9, 16, 17, 24, 25, 32),
                          f"{xdt} staged: ")
    with q.knobs.override(QWEN38_NVFP4_STAGED="2"), pytest.raises(ValueError, match="QWEN38_NVFP4_STAGED"):
        _call(x[:1], w)
    x = qt.randn_nonzero(32, k, device="cuda", seed=35)
    for n, wb in _h200_weights(skinny_variant, (17408, 16384), seed=34):
        rows = {17408: {1: True, 16: True, 32: False}, 16384: {1: False}}[n]
        with q.knobs.override(QWEN38_NVFP4_XFRAG="0"):  # (which takes 9..32 rows before the staged rule)
            for m, want in rows.items():
                assert staged(qt.cuda_kernel_names(lambda: _call(x[:m], wb))) == want, f"auto, {n}x{k}, {m} rows"
            qt.assert_knob_keeps_bits(lambda t: _call(t, wb), x, "QWEN38_NVFP4_STAGED", "0", rows=tuple(rows),
                                      what=f"{n}x{k} auto: ")


def _assert_body_knob(w, x, bias, knob: str, base: str, other: str, rows: tuple, what: str) -> None:
    """A launch knob choosing between two bodies of the stream kernel: ``knob`` = ``other`` gives the
    bits of ``knob`` = ``base`` at ``rows`` (also with bias and fp32 output), and under ``other`` every
    row of a 32-row call agrees with its 1-row call."""
    with q.knobs.override(**{knob: base}):
        qt.assert_knob_keeps_bits(lambda t, *e: _call(t, w, *e), x, knob, other, rows=rows,
                                  extras=((None, None), (bias, torch.float32)), what=what)
    with q.knobs.override(**{knob: other}):
        qt.assert_row_invariant(lambda t: _call(t, w), x, max_rows=32)


def _t_kernel_groups(names: list[str]) -> list[int]:
    """The group-count argument (the last template argument) of each nvfp4_stream_t_kernel launch (and
    of nvfp4_stream_tf_kernel: the same bodies reading x in the fragment order)."""
    import re

    return [int(mm.group(1)) for s in names for mm in re.finditer(r"nvfp4_stream_tf?_kernel<[^>]*?(\d+)\s*>", s)]


@pytest.mark.gpu
def test_one_group_body_writes_the_transposed_bodys_bits(skinny_variant):
    """At 1..8 rows the register-stream kernel at 2 or 4 tiles a warp can run its x-as-A body (the
    instantiation of 2 groups of 8 rows) or its transposed body (1 group; QWEN38_NVFP4_ONE_GROUP xa /
    t): the same bits for bf16 and fp16 activations, with bias and fp32 output, from a strided x, and
    every row of a 32-row call agrees with its 1-row call under either. The profiler shows which
    instantiation ran. Auto (the default) takes the x-as-A body only where the register grid needs
    more than two rounds of CTAs: on a 132-SM H200 34816x5120 (1088 CTAs, 4 an SM), not 16384x5120
    (512 CTAs); there QWEN38_NVFP4_XFRAG's auto copies x into the fragment order first (the copy
    kernel and nvfp4_stream_tf_kernel; with the copy off, nvfp4_stream_t_kernel). A knob value other
    than auto, xa or t is an error naming the knob."""
    k = 5120
    skinny_variant("nvfp4_linear", 256, k, 4, 4)
    w = _weight(256, k, "cuda", seed=41)
    bias = qt.randn_nonzero(256, dtype=torch.float32, device="cuda", seed=42)
    groups = lambda m: _t_kernel_groups(qt.cuda_kernel_names(lambda: _call(x[:m], w)))  # noqa: E731
    for xdt in (torch.bfloat16, torch.float16):
        x = qt.randn_nonzero(32, k + 64, dtype=xdt, device="cuda", seed=43)[:, :k]  # row stride k + 64
        for m in (1, 8):
            with q.knobs.override(QWEN38_NVFP4_ONE_GROUP="xa"):
                assert groups(m) == [2], f"knob xa, {m} rows"
            with q.knobs.override(QWEN38_NVFP4_ONE_GROUP="t"):
                assert groups(m) == [1], f"knob t, {m} rows"
            assert groups(m) == [1], f"auto, 32 CTAs, {m} rows"
        _assert_body_knob(w, x, bias, "QWEN38_NVFP4_ONE_GROUP", "t", "xa", (1, 2, 5, 8), f"{xdt} one group: ")
    with q.knobs.override(QWEN38_NVFP4_ONE_GROUP="2"), pytest.raises(ValueError, match="QWEN38_NVFP4_ONE_GROUP"):
        _call(x[:1], w)
    x = qt.randn_nonzero(8, k, device="cuda", seed=45)
    for n, wb in _h200_weights(skinny_variant, (34816, 16384), seed=44):
        want = {34816: [2], 16384: [1]}[n]
        for m in (1, 8):
            names = qt.cuda_kernel_names(lambda: _call(x[:m], wb))
            assert _t_kernel_groups(names) == want, f"auto, {n}x{k}, {m}"
            copied = want == [2]  # the x-as-A body at 1..8 rows reads the copy (QWEN38_NVFP4_XFRAG auto)
            assert any("xfrag_kernel" in s for s in names) == copied, f"auto, {n}x{k}, {m}: {names}"
            assert any("nvfp4_stream_tf_kernel" in s for s in names) == copied, f"auto, {n}x{k}, {m}: {names}"
            with q.knobs.override(QWEN38_NVFP4_XFRAG="0"):
                names = qt.cuda_kernel_names(lambda: _call(x[:m], wb))
            assert not any("xfrag_kernel" in s for s in names) and _t_kernel_groups(names) == want, names
        qt.assert_knob_keeps_bits(lambda t: _call(t, wb), x, "QWEN38_NVFP4_ONE_GROUP", "t", rows=(1, 8),
                                  what=f"{n}x{k} auto: ")
        qt.assert_knob_keeps_bits(lambda t: _call(t, wb), x, "QWEN38_NVFP4_XFRAG", "0", rows=(1, 8),
                                  what=f"{n}x{k} auto: ")


@pytest.mark.gpu
def test_four_cta_form_writes_the_fragment_kernels_bits(skinny_variant):
    """At 17..32 rows in bf16 (3 groups of 8 rows: the transposed body; 4: the x-as-A body) the
    fragment-order kernel at K = 5120, k split 4 and 4 tiles a warp also has a form held to 128
    registers, 4 CTAs an SM (nvfp4_stream_tf4_kernel; QWEN38_NVFP4_FOUR_CTAS): forced on (1) it runs at
    17..32 rows only and
    gives the bits of the default form (0), with bias and fp32 output, from a strided x, in a CUDA
    graph; every row of a 32-row call agrees with its 1-row call. fp16 keeps the default form (not
    compiled: it spills under the cap). Auto (the default) takes it on compute capability 9 where its
    grid fits in one round of CTAs and the default form's does not: on a 132-SM H200 16384x5120 and
    14336x5120 (512 and 448 CTAs: 528 fit at 4 an SM, 396 at 3), not 34816x5120 or 12288x5120, with
    the same bits. A knob value other than auto, 0 or 1 is an error naming the knob."""
    k = 5120
    skinny_variant("nvfp4_linear", 256, k, 4, 4)
    w = _weight(256, k, "cuda", seed=61)
    bias = qt.randn_nonzero(256, dtype=torch.float32, device="cuda", seed=62)
    four = lambda names: any("nvfp4_stream_tf4_kernel" in s for s in names)  # noqa: E731
    for xdt in (torch.bfloat16, torch.float16):
        x = qt.randn_nonzero(32, k + 64, dtype=xdt, device="cuda", seed=63)[:, :k]  # row stride k + 64
        for m in (1, 9, 16, 17, 20, 24, 25, 32):
            with q.knobs.override(QWEN38_NVFP4_FOUR_CTAS="1"):
                names = qt.cuda_kernel_names(lambda: _call(x[:m], w))
            assert four(names) == (xdt == torch.bfloat16 and 17 <= m <= 32), f"{xdt} knob 1, {m} rows: {names}"
            assert not four(qt.cuda_kernel_names(lambda: _call(x[:m], w))), f"{xdt} auto, 32 CTAs, {m} rows"
        _assert_body_knob(w, x, bias, "QWEN38_NVFP4_FOUR_CTAS", "0", "1", (17, 18, 21, 24, 25, 29, 32),
                          f"{xdt} four CTAs: ")
        with q.knobs.override(QWEN38_NVFP4_FOUR_CTAS="0"):
            want = _call(x[:23], w, bias)
        with q.knobs.override(QWEN38_NVFP4_FOUR_CTAS="1"):
            qt.assert_bitwise_equal(qt.assert_graph_equals_eager(lambda t: _call(t, w, bias), x[:23]), want,
                                    f"{xdt} graph of the 4-CTA form vs the default form")
        with q.knobs.override(QWEN38_NVFP4_FOUR_CTAS="0"):
            want = _call(x[:30], w, bias)
        with q.knobs.override(QWEN38_NVFP4_FOUR_CTAS="1"):
            qt.assert_bitwise_equal(qt.assert_graph_equals_eager(lambda t: _call(t, w, bias), x[:30]), want,
                                    f"{xdt} graph of the 4-CTA form vs the default form, 30 rows")
    with q.knobs.override(QWEN38_NVFP4_FOUR_CTAS="4"), pytest.raises(ValueError, match="QWEN38_NVFP4_FOUR_CTAS"):
        _call(x[:17], w)
    x = qt.randn_nonzero(32, k, device="cuda", seed=65)
    for n, wb in _h200_weights(skinny_variant, (16384, 14336, 34816, 12288), seed=64):
        want = n in (16384, 14336)
        for m in (17, 24, 25, 32):
            assert four(qt.cuda_kernel_names(lambda: _call(x[:m], wb))) == want, f"auto, {n}x{k}, {m} rows"
        qt.assert_knob_keeps_bits(lambda t: _call(t, wb), x, "QWEN38_NVFP4_FOUR_CTAS", "0", rows=(17, 24, 25, 32),
                                  what=f"{n}x{k} auto: ")


@pytest.mark.gpu
@pytest.mark.parametrize("k,ks", [(5120, 4), (6144, 8), (17408, 8)])
def test_xfrag_copy_keeps_the_register_bodies_bits(k, ks, skinny_variant):
    """At K = 5120 and k split 4, and at K = 6144 / 17408 and k split 8 (the cluster form), with 4
    tiles a warp, the register-stream kernel can read x from a copy in the fragment order (QWEN38_NVFP4_XFRAG; written by a copy kernel first): testing.assert_xfrag_knob
    (forced on, every row count 1..32 gives the bits of the row-major reads, for bf16 and fp16
    activations, with bias and fp32 output, from a strided x, in 32-row slices of a longer x and in a
    CUDA graph; rows invariant; auto on compute capability 9 from 9 rows). A forced staged body
    (QWEN38_NVFP4_STAGED=1) runs instead of it; a knob value other than auto, 0 or 1 is an error
    naming it (the staged body: K = 5120)."""
    skinny_variant("nvfp4_linear", 256, k, ks, 4)
    w = _weight(256, k, "cuda", seed=51)
    bias = qt.randn_nonzero(256, dtype=torch.float32, device="cuda", seed=52)
    xl = qt.randn_nonzero(77, k, device="cuda", seed=54)  # slices of 32, 32 and 13 rows
    for xdt in (torch.bfloat16, torch.float16):
        x = qt.randn_nonzero(32, k + 64, dtype=xdt, device="cuda", seed=53)[:, :k]  # row stride k + 64
        qt.assert_xfrag_knob(lambda t, *e: _call(t, w, *e), x, bias, xl, "QWEN38_NVFP4_XFRAG",
                             "nvfp4_stream_tf_kernel", "QWEN38_NVFP4_PREFILL")
    if k != 5120:
        return
    with q.knobs.override(QWEN38_NVFP4_XFRAG="1", QWEN38_NVFP4_STAGED="1"):
        names = qt.cuda_kernel_names(lambda: _call(x[:16], w))
    assert not any("xfrag_kernel" in s for s in names) and any("nvfp4_stream_ts_kernel" in s for s in names), names
    with q.knobs.override(QWEN38_NVFP4_XFRAG="2"), pytest.raises(ValueError, match="QWEN38_NVFP4_XFRAG"):
        _call(x[:9], w)


@pytest.mark.gpu
@pytest.mark.parametrize("n", [48, 96, 40, 128, 1024])
def test_xshare_kernel_writes_the_stream_kernels_bits(n, skinny_variant):
    """1..32 rows of a few-row weight at K = 5120 and k split 8 (the model's 48- and 96-row weights,
    and its 1024-row ones from 9 rows) go through the x-shared kernel (QWEN38_NVFP4_XSHARE=1, the
    default: clusters of 8 CTAs, x copied into shared memory once a CTA, partials by st.async); with
    the knob at 0 the register-stream kernel computes them, with QWEN38_NVFP4_STREAM=0 the ring
    kernel: the same bits at every row count (one tile a warp in tile groups of 1 (N = 40), 2 and 3;
    two tiles a warp in 8 groups (N = 1024); one and two m16 tiles), for bf16 and fp16 activations,
    with bias and fp32 output, from a strided x; every row of a 32-row call agrees with its 1-row
    call. Which kernel ran is read from the profiler: a 1024-row weight at 8 rows or fewer and a
    136-row one keep the stream kernel."""
    k = 5120
    skinny_variant("nvfp4_linear", n, k, 8, 1)
    w = _weight(n, k, "cuda", seed=n + 7)
    bias = qt.randn_nonzero(n, dtype=torch.float32, device="cuda", seed=5)
    for xdt in (torch.bfloat16, torch.float16):
        x = qt.randn_nonzero(32, k + 64, dtype=xdt, device="cuda", seed=n)[:, :k]  # row stride k + 64
        for m in (1, 8, 9, 16, 32):
            names = qt.cuda_kernel_names(lambda: _call(x[:m], w))
            assert any("nvfp4_xshare_kernel" in s for s in names) == (n <= 128 or m > 8), f"{m} rows: {names}"
            with q.knobs.override(QWEN38_NVFP4_XSHARE="0"):
                names = qt.cuda_kernel_names(lambda: _call(x[:m], w))
            assert not any("nvfp4_xshare_kernel" in s for s in names), f"knob 0, {m} rows: {names}"
        for knob in ("QWEN38_NVFP4_XSHARE", "QWEN38_NVFP4_STREAM"):
            qt.assert_knob_keeps_bits(lambda t, *e: _call(t, w, *e), x, knob, "0",
                                      rows=(1, 3, 8, 9, 16, 17, 25, 32),
                                      extras=((None, None), (bias, torch.float32)), what=f"{xdt} xshare: ")
        qt.assert_row_invariant(lambda t: _call(t, w), x, max_rows=32)
    skinny_variant("nvfp4_linear", 136, k, 8, 1)
    w = _weight(136, k, "cuda", seed=9)
    x = qt.randn_nonzero(16, k, device="cuda", seed=2)
    assert not any("nvfp4_xshare_kernel" in s for s in qt.cuda_kernel_names(lambda: _call(x, w)))


@pytest.mark.gpu
def test_stream_kernel_decodes_every_code_and_scale(skinny_variant):
    """test_every_code_and_scale_is_decoded_exactly through the register-stream kernel (16 one-hot
    rows a call, K = 5120): every byte value against block scales across the e4m3 range."""
    n, k = 64, 5120
    skinny_variant("nvfp4_linear", n, k, 2, 4)
    packed = torch.arange(n * k // 2, dtype=torch.int64).remainder(256).to(torch.uint8).reshape(n, k // 2)
    sv = torch.tensor([2.0 ** -9, 2.0 ** -7, 0.01953125, 0.375, 1.0, 1.75, 13.0, 104.0, 240.0, 448.0])
    scale = sv[torch.arange(n * k // 16).remainder(len(sv))].reshape(n, k // 16).to(torch.float8_e4m3fn)
    gs = torch.tensor(0.5)
    w = formats.NVFP4Weight(packed.cuda(), scale.cuda(), gs.cuda())
    want = formats.dequantize_nvfp4(formats.NVFP4Weight(packed, scale, gs), torch.float32)
    for k0 in list(range(0, 512, 16)) + [k - 16]:  # each row's bytes 0..255: every code; 32 blocks: every scale
        x = torch.zeros(16, k, dtype=torch.bfloat16)
        x[torch.arange(16), k0 + torch.arange(16)] = 1.0
        y = _call(x.cuda(), w, out_dtype=torch.float32).cpu()
        qt.assert_bitwise_equal(y + 0.0, want[:, k0:k0 + 16].t().contiguous() + 0.0, f"codes at k {k0}..{k0 + 15}")


@pytest.mark.gpu
def test_bad_launch_knobs_are_named():
    w = _weight(48, 64, "cuda")
    x = qt.randn_nonzero(2, 64, device="cuda")
    for knob, value in (("QWEN38_NVFP4_DEPTH", "9"), ("QWEN38_NVFP4_DEPTH", "x"), ("QWEN38_NVFP4_L2SPAN", "64")):
        with q.knobs.override(**{knob: value}), pytest.raises(ValueError, match=knob):
            _call(x, w)


@pytest.mark.gpu
def test_scale_not_4_byte_aligned_is_refused():
    """The skinny kernel copies the scales in 4-byte words: a w_scale view that starts 2 bytes into
    its storage is refused by name."""
    w = _weight(48, 64, "cuda")
    x = qt.randn_nonzero(2, 64, device="cuda")
    store = torch.zeros(48 * 4 + 2, dtype=torch.uint8, device="cuda")
    scale = store[2:].view(torch.float8_e4m3fn).view(48, 4)
    scale.copy_(w.scale)
    with pytest.raises(ValueError, match=r"qwen38\.nvfp4_linear: w_scale must be 4-byte aligned"):
        OPS.nvfp4_linear(x, w.packed, scale, w.global_scale)


@pytest.mark.gpu
def test_bias_and_leading_dims():
    w = _weight(96, 512, "cuda", seed=8)
    x = qt.randn_nonzero(2, 3, 512, device="cuda", seed=9)
    bias = qt.randn_nonzero(96, device="cuda", seed=10)
    y = _call(x, w, bias)
    assert y.shape == (2, 3, 96)
    y_ref = ref.nvfp4_linear(x.cpu(), w.packed.cpu(), w.scale.cpu(), w.global_scale.cpu(), bias.cpu())
    assert (y.cpu().float() - y_ref.float()).abs().max() <= 0.02 * y_ref.float().abs().max()
    # the wrapper takes an NVFP4Weight too
    qt.assert_bitwise_equal(q.nvfp4_linear(x, w, bias=bias), y, "wrapper vs op")


@pytest.mark.gpu
def test_empty_rows():
    w = _weight(48, 64, "cuda")
    y = _call(torch.empty(0, 64, dtype=torch.bfloat16, device="cuda"), w)
    assert y.shape == (0, 48)


@pytest.mark.parametrize("device", DEVICES)
def test_bad_input_names_the_argument(device):
    w = _weight(48, 64, device)
    x = qt.randn_nonzero(2, 64, device=device)
    cases = [
        ("x", (x.float(), w.packed, w.scale, w.global_scale)),
        ("x", (qt.randn_nonzero(2, 96, device=device), w.packed, w.scale, w.global_scale)),
        ("w_packed", (x, w.packed.to(torch.int8), w.scale, w.global_scale)),
        ("w_packed", (qt.randn_nonzero(2, 48, device=device), w.packed[:, :24], w.scale[:, :3], w.global_scale)),
        ("w_scale", (x, w.packed, w.scale.float(), w.global_scale)),
        ("w_scale", (x, w.packed, w.scale[:, :2], w.global_scale)),
        ("w_global", (x, w.packed, w.scale, w.global_scale.double())),
        ("bias", (x, w.packed, w.scale, w.global_scale, torch.ones(47, device=device))),
    ]
    for arg, args in cases:
        with pytest.raises(ValueError, match=rf"qwen38\.nvfp4_linear: .*{arg}"):
            OPS.nvfp4_linear(*args)


# opcheck's test_schema compares every input before and after the call with arithmetic that torch
# does not implement for float8_e4m3fn ("mul_cpu_reduced_float not implemented"), so it cannot run
# on an op that takes e4m3 scales; the other three checks run.
OPCHECK_UTILS = ("test_faketensor", "test_autograd_registration", "test_aot_dispatch_dynamic")


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    w = _weight(48, 64, device)
    x = qt.randn_nonzero(3, 64, device=device)
    qt.run_opcheck(OPS.nvfp4_linear.default, (x, w.packed, w.scale, w.global_scale, None, None),
                   test_utils=OPCHECK_UTILS)
    qt.run_opcheck(OPS.nvfp4_linear.default,
                   (x, w.packed, w.scale, w.global_scale, torch.ones(48, device=device), torch.float32),
                   test_utils=OPCHECK_UTILS)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("lab", ["skinny_lab.cu", "fp8_lab.cu", "head_lab.cu", "tiles_skinny_lab.cu",
                                 "wgmma_bits_lab.cu", "wgmma_skinny_lab.cu", "wgmma_prefill_lab.cu",
                                 "wgmma_floor_lab.cu", "stream_waves_lab.cu", "xshare_lab.cu", "fp8_t_lab.cu",
                                 "nvfp4_t_lab.cu", "nvfp4_ring_t_lab.cu", "nvfp4_scale_lab.cu",
                                 "nvfp4_xperm_lab.cu", "mma_dtype_bits_lab.cu"])
def test_skinny_labs_compile(tmp_path, lab):
    """The A/B labs of the weight GEMMs (benchmarks/lab/skinny_lab.cu: NVFP4, the one that chose
    the register-stream kernel; fp8_lab.cu: FP8; head_lab.cu: the head's tiles kernel;
    tiles_skinny_lab.cu: NVFP4 and FP8 on the tile machinery; wgmma_bits_lab.cu: wgmma's bits
    against mma.sync's; wgmma_skinny_lab.cu: the NVFP4 skinny GEMM on wgmma; wgmma_prefill_lab.cu:
    the NVFP4 prefill kernel's wgmma form against its mma.sync kernel; wgmma_floor_lab.cu: that
    kernel's main loop with parts switched off; stream_waves_lab.cu: the stream kernels at capped
    blocks an SM; xshare_lab.cu: the x-shared kernel's forms against the stream kernel;
    fp8_t_lab.cu, nvfp4_t_lab.cu: the transposed stream bodies against the x-as-A ones;
    nvfp4_ring_t_lab.cu: the staged transposed body against the register one; nvfp4_scale_lab.cu:
    the transposed body with its scales three steps a load; nvfp4_xperm_lab.cu: the bodies reading x
    in the fragment order; mma_dtype_bits_lab.cu: mma.sync's fp16 and bf16 forms on values exact in
    both) still compile
    against the kernel headers, every variant they time included: they
    cannot drift from the kernels. (compute_90a named: with nvcc 13.0, -arch=sm_90a compiled the
    lab through compute_90 PTX, which has no wgmma.)"""
    r = subprocess.run(["nvcc", "-std=c++20", "-O1", "-gencode", "arch=compute_90a,code=sm_90a",
                        "--expt-relaxed-constexpr", "-diag-suppress",
                        "128,177", "-c", "-I", os.path.join(ROOT, "csrc"),
                        os.path.join(ROOT, "benchmarks", "lab", lab), "-o", str(tmp_path / "lab.o")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
