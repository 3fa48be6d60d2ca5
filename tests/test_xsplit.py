"""The k-split-across-CTAs kernels (csrc/gemm/xsplit_kernel.cuh; knobs QWEN38_NVFP4_XSPLIT, QWEN38_FP8_XSPLIT):
forced on, nvfp4_linear and fp8_block_linear on the large weights' variants run them at every row count 1..32
and give the bits of the register-stream kernel (knob 0) for bf16 and fp16 x, with bias and fp32 output, from a
strided x, in a CUDA graph; every row of a 32-row call agrees with its 1-row call; other variants never run them;
auto (the default) takes them on compute capability 9 for FP8 at K 17408 (k split 8, 2 tiles a warp: 5120x17408)
and 5120x6144 at 17..32 rows, and for NVFP4 10240x5120 at 1..8 rows and 5120x6144 at 1..16 and 25..32 rows
only; a bad knob value is an error naming the knob."""
from __future__ import annotations

import pytest
import torch

import qwen38_kernels as q
from qwen38_kernels import formats, formats_fp8 as f8
from qwen38_kernels import testing as qt

OPS = torch.ops.qwen38


def _nvfp4(n, k):
    g = torch.Generator().manual_seed(n * 3 + k)
    w = (torch.randn(n, k, generator=g) * 0.05).to(torch.bfloat16)
    nw = formats.quantize_nvfp4(w)
    pk, sc, gs = nw.packed.cuda(), nw.scale.cuda(), nw.global_scale.cuda()
    return lambda x, *e: OPS.nvfp4_linear(x, pk, sc, gs, *e)


def _fp8(n, k):
    g = torch.Generator().manual_seed(n * 5 + k)
    w = f8.quantize_fp8_block((torch.randn(n, k, generator=g) * 0.05).to(torch.bfloat16))
    wc, sc = w.weight.cuda(), w.weight_scale_inv.cuda()
    return lambda x, *e: OPS.fp8_block_linear(x, wc, sc, *e)


def _auto_takes(op, m, n, k):
    """The rule of xsplit_kernel.cu (xsplit_rule) on compute capability 9, written out again."""
    if op == "fp8_block_linear":
        return (k == 17408 or (n, k) == (5120, 6144)) and m > 16
    return ((n, k) == (10240, 5120) and m <= 8) or ((n, k) == (5120, 6144) and (m <= 16 or m > 24))


# (op, knob, weight maker, n, k, k split, tiles a warp): the variants compiled (xsplit_kernel.cu)
CASES = [
    ("nvfp4_linear", "QWEN38_NVFP4_XSPLIT", _nvfp4, 256, 5120, 4, 4),
    ("nvfp4_linear", "QWEN38_NVFP4_XSPLIT", _nvfp4, 160, 17408, 8, 4),  # 5 tiles of 4: CTAs of 1 tile group
    ("nvfp4_linear", "QWEN38_NVFP4_XSPLIT", _nvfp4, 128, 6144, 8, 4),
    ("fp8_block_linear", "QWEN38_FP8_XSPLIT", _fp8, 256, 5120, 4, 4),
    ("fp8_block_linear", "QWEN38_FP8_XSPLIT", _fp8, 192, 17408, 8, 2),  # 12 tiles of 2: CTAs of 4 tile groups
    ("fp8_block_linear", "QWEN38_FP8_XSPLIT", _fp8, 64, 6144, 8, 2),
]


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[3]}x{c[4]}")
def test_xsplit_writes_the_stream_kernels_bits(case, skinny_variant):
    op, knob, make, n, k, ks, nt = case
    if torch.cuda.get_device_properties(0).major < 9:
        pytest.skip("thread-block clusters need compute capability 9 or more")
    skinny_variant(op, n, k, ks, nt)
    cc9 = torch.cuda.get_device_properties(0).major == 9
    call = make(n, k)
    bias = qt.randn_nonzero(n, dtype=torch.float32, device="cuda", seed=81)
    xsplit = lambda names: any("xsplit_kernel" in s for s in names)  # noqa: E731
    for xdt in (torch.bfloat16, torch.float16):
        x = qt.randn_nonzero(32, k + 64, dtype=xdt, device="cuda", seed=82)[:, :k]  # row stride k + 64
        for m in (1, 9, 16, 17, 32):
            with q.knobs.override(**{knob: "1"}):
                assert xsplit(qt.cuda_kernel_names(lambda: call(x[:m]))), f"{op} {xdt} knob 1, {m} rows"
            with q.knobs.override(**{knob: "0"}):
                assert not xsplit(qt.cuda_kernel_names(lambda: call(x[:m]))), f"{op} {xdt} knob 0, {m} rows"
            auto = cc9 and _auto_takes(op, m, n, k)
            assert xsplit(qt.cuda_kernel_names(lambda: call(x[:m]))) == auto, f"{op} {xdt} auto, {m} rows"
        with q.knobs.override(**{knob: "0"}):
            qt.assert_knob_keeps_bits(call, x, knob, "1", rows=(1, 2, 8, 9, 16, 17, 24, 25, 32),
                                      extras=((None, None), (bias, torch.float32)), what=f"{op} {n}x{k} {xdt}: ")
            want = call(x[:23], bias)
        with q.knobs.override(**{knob: "1"}):
            qt.assert_row_invariant(lambda t: call(t), x, max_rows=32)
            qt.assert_bitwise_equal(qt.assert_graph_equals_eager(lambda t: call(t, bias), x[:23]), want,
                                    f"{op} {xdt}: the graph of the xsplit kernel against the stream kernel")
    with q.knobs.override(**{knob: "2"}), pytest.raises(ValueError, match=knob):
        call(x[:17])


@pytest.mark.gpu
def test_xsplit_leaves_other_variants_alone(skinny_variant):
    """Forced on, a variant without an xsplit kernel (K 5120 at k split 8, 2 tiles a warp) runs as before."""
    n, k = 256, 5120
    skinny_variant("fp8_block_linear", n, k, 8, 2)
    skinny_variant("nvfp4_linear", n, k, 8, 2)
    x = qt.randn_nonzero(32, k, device="cuda", seed=83)
    for knob, call in (("QWEN38_FP8_XSPLIT", _fp8(n, k)), ("QWEN38_NVFP4_XSPLIT", _nvfp4(n, k))):
        with q.knobs.override(**{knob: "1"}):
            for m in (1, 32):
                assert not any("xsplit_kernel" in s for s in qt.cuda_kernel_names(lambda: call(x[:m]))), knob


# (op, knob, weight maker, n, k, the rows checked): the measured weights auto takes (_auto_takes)
AUTO_CASES = [
    ("nvfp4_linear", "QWEN38_NVFP4_XSPLIT", _nvfp4, 10240, 5120, (1, 5, 8, 9, 32)),
    ("nvfp4_linear", "QWEN38_NVFP4_XSPLIT", _nvfp4, 5120, 6144, (1, 9, 16, 17, 24, 25, 32)),
    ("fp8_block_linear", "QWEN38_FP8_XSPLIT", _fp8, 5120, 6144, (1, 16, 17, 24, 25, 32)),
]


@pytest.mark.gpu
@pytest.mark.parametrize("case", AUTO_CASES, ids=lambda c: f"{c[0]}-{c[3]}x{c[4]}")
def test_auto_takes_xsplit_on_the_measured_weights(case):
    """Auto runs nvfp4_linear on 10240x5120 (its tile table's variant: k split 4, 4 tiles a warp) through the
    xsplit kernel at 1..8 rows and on 5120x6144 (k split 8, 4 tiles) at 1..16 and 25..32 rows, and
    fp8_block_linear on 5120x6144 (k split 8, 2 tiles) at 17..32 rows, on compute capability 9; elsewhere
    through the stream kernels. Every row count gives the bits of the knob set to 0, and each row of a 32-row
    call is that of its 1-row call."""
    if torch.cuda.get_device_properties(0).major < 9:
        pytest.skip("thread-block clusters need compute capability 9 or more")
    cc9 = torch.cuda.get_device_properties(0).major == 9
    op, knob, make, n, k, rows = case
    call = make(n, k)
    x = qt.randn_nonzero(32, k, device="cuda", seed=84)
    for m in rows:
        names = qt.cuda_kernel_names(lambda: call(x[:m]))
        assert any("xsplit_kernel" in s for s in names) == (cc9 and _auto_takes(op, m, n, k)), \
            f"{op} auto at {m} rows: {names}"
    with q.knobs.override(**{knob: "0"}):
        want = call(x)
        qt.assert_knob_keeps_bits(call, x, knob, "auto", rows=rows, what=f"{op} {n}x{k}: ")
    qt.assert_row_invariant(lambda t: call(t), x, max_rows=32)
    qt.assert_bitwise_equal(call(x), want, f"{op} {n}x{k}: auto at 32 rows against the knob at 0")
