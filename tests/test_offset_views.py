"""Every op, every tensor argument passed as a view one element past an allocation's start (how a slice
of a user's larger buffer arrives): the op either gives the bits of the same call with aligned arguments
or rejects that argument with a ValueError naming it. Arguments an op updates in place are given fresh
copies for each call and compared afterwards too.

On the CPU the ops run their references, which take any layout: there the test checks the cases
themselves. The CUDA kernels meet 16-byte loads, bulk copies and vector stores here.
"""
from __future__ import annotations

import math

import pytest
import torch

import qwen38_kernels as q  # noqa: F401  (registers torch.ops.qwen38)
from qwen38_kernels import reference as ref
from qwen38_kernels import testing as qt

OPS = torch.ops.qwen38
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
B, T, HQK, HV, D, C = 2, 3, 16, 48, 128, 256


def _cases(dev: str) -> dict[str, tuple]:
    """op name -> its arguments (positional, in schema order), small model-like shapes."""
    gen = torch.Generator().manual_seed(0)

    def r(*shape, dtype=torch.bfloat16, scale=1.0):
        t = (torch.randn(*shape, generator=gen) * scale).to(dtype)
        return torch.where(t == 0, torch.ones((), dtype=dtype), t).to(dev)

    def ix(values):
        return torch.tensor(values, dtype=torch.int64, device=dev)

    packed = torch.randint(0, 256, (256, 2560), generator=gen, dtype=torch.uint8).to(dev)
    scale = (torch.rand(256, 320, generator=gen) * 1.5 + 0.5).to(torch.float8_e4m3fn).to(dev)
    w8 = (torch.randn(256, 5120, generator=gen) * 0.1).to(torch.float8_e4m3fn).to(dev)
    a_log = torch.log(torch.rand(HV, generator=gen) * 15 + 1).to(dev)
    dt = torch.exp(torch.rand(HV, generator=gen) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
    dt_bias = (dt + torch.log(-torch.expm1(-dt))).to(dev)

    def gdn_tokens(t):
        lead = (B,) if t == 0 else (B, t)
        a, b = r(*lead, HV), r(*lead, HV)
        g, beta = ref.gdn_gates(a.cpu(), b.cpu(), a_log.cpu(), dt_bias.cpu())
        return r(*lead, HQK, D), r(*lead, HQK, D), r(*lead, HV, D), g.to(dev), beta.to(dev), a, b

    pool = r(4, HV, D, D, dtype=torch.float32, scale=0.05)
    slots = ix([2, 0])
    parents = ix([[-1, 0, 1], [-1, -1, 1]])
    q1, k1, v1, g1, b1, a1, bb1 = gdn_tokens(0)
    qt_, kt, vt, gt, bt, _, _ = gdn_tokens(T)
    x_conv = r(B, T, C)
    return {
        "rms_norm": (r(4, 5120), r(5120, scale=0.1), 1e-6, True),
        "add_rms_norm": (r(4, 5120), r(4, 5120), r(5120, scale=0.1), 1e-6, True),
        "rms_norm_gated": (r(4, HV, D), r(4, HV, D, scale=2.0), r(D, scale=0.25), 1e-6),
        "silu_mul": (r(4, 2 * 1000, scale=3.0),),
        "nvfp4_linear": (r(4, 5120), packed, scale, torch.tensor(2.0 ** -6, device=dev), r(256), None),
        "nvfp4_dequantize": (packed, scale, torch.bfloat16),
        "fp8_block_linear": (r(4, 5120), w8, (torch.rand(2, 40, generator=gen) + 0.5).to(dev), r(256), None),
        "head_logits": (r(4, 5120), r(1024, 5120, scale=0.02)),
        "head_argmax": (r(4, 5120), r(1024, 5120, scale=0.02)),
        "conv_step": (r(B, C), r(4, C, 3), r(C, 4, scale=0.5), slots),
        "conv_chain": (x_conv, r(4, C, 3), r(C, 4, scale=0.5), slots, None),
        "conv_tree": (x_conv, r(4, C, 3), r(C, 4, scale=0.5), slots, parents, None),
        "conv_commit": (x_conv, r(4, C, 3), slots, ix([2, 1]), None),
        "gdn_step": (q1, k1, v1, g1, b1, pool, slots),
        "gdn_step_raw": (q1, k1, v1, a1, bb1, a_log, dt_bias, pool, slots),
        "gdn_chain_verify": (qt_, kt, vt, gt, bt, pool, slots, None),
        "gdn_tree_verify": (qt_, kt, vt, gt, bt, pool, slots, parents, None),
        "gdn_commit": (kt, vt, gt, bt, pool, slots, ix([2, 1]), None),
        "gdn_commit_verify": (kt, vt, gt, bt, ix([3, 1]), None, qt_, kt, vt, gt, bt, pool, slots, None, None),
    }


def _schema(op: str):
    return getattr(OPS, op).default._schema.arguments


def _mutable(op: str) -> set[int]:
    return {i for i, a in enumerate(_schema(op)) if a.alias_info is not None and a.alias_info.is_write}


def _call(op: str, args: tuple, fresh: int = -1):
    """(outputs as a tuple, the in-place arguments after the call): fresh copies of those first, except
    argument ``fresh``, a new offset copy already (a clone would be aligned again)."""
    mut = _mutable(op)
    args = tuple(a.clone() if i in mut and i != fresh else a for i, a in enumerate(args))
    out = getattr(OPS, op)(*args)
    outs = () if out is None else (out if isinstance(out, tuple) else (out,))
    return outs + tuple(args[i] for i in sorted(mut))


OP_NAMES = list(_cases("cpu"))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", OP_NAMES)
def test_every_tensor_argument_off_16_bytes(op, device):
    args = _cases(device)[op]
    names = [a.name for a in _schema(op)]
    want = _call(op, args)
    tried = 0
    for i, a in enumerate(args):
        if not isinstance(a, torch.Tensor) or a.numel() == 0:
            continue
        tried += 1
        moved = list(args)
        moved[i] = qt.offset_copy(a, 1)
        try:
            got = _call(op, tuple(moved), fresh=i)
        except ValueError as e:
            assert f"qwen38.{op}: {names[i]}" in str(e), (
                f"{op}: {names[i]} one element off 16 bytes was rejected without naming it: {e}")
            continue
        assert len(got) == len(want), f"{op}: {len(got)} outputs with {names[i]} offset, {len(want)} aligned"
        for k, (g, w) in enumerate(zip(got, want)):
            qt.assert_bitwise_equal(g, w, f"{op}: output {k} with {names[i]} one element off 16 bytes")
    assert tried > 0, f"{op}: no tensor argument to move"


def test_the_offset_copies_are_off_16_bytes():
    """The views the test passes really start off 16 bytes, and an in-place argument stays so."""
    for op, args in _cases("cpu").items():
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor) and a.numel() > 0:
                v = qt.offset_copy(a, 1)
                assert v.data_ptr() % 16 != 0, f"{op} argument {i}: the copy starts on 16 bytes"
                assert v.shape == a.shape and v.dtype == a.dtype, f"{op} argument {i}"
                same = torch.equal(v.reshape(-1).view(torch.uint8), a.reshape(-1).view(torch.uint8))
                assert same, f"{op} argument {i}: the copy's bytes differ"
