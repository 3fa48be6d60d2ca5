"""qwen38_kernels.nn: the drop-in modules and swap_norms, against stand-ins written the way HF
transformers' Qwen3.5 modules compute (MODEL.md "Reference math")."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from qwen38_kernels import formats
from qwen38_kernels import nn as qnn
from qwen38_kernels import testing as qt

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


class Qwen3_5RMSNorm(torch.nn.Module):  # noqa: N801  (named like the HF class it stands in for)
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        v = x.float()
        out = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + self.eps)
        return (out * (1.0 + self.weight.float())).type_as(x)


class Qwen3_5RMSNormGated(torch.nn.Module):  # noqa: N801
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.variance_epsilon = eps
        self.weight = torch.nn.Parameter(torch.ones(dim))

    def forward(self, hidden_states, gate=None):
        dtype = hidden_states.dtype
        h = hidden_states.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        h = self.weight * h.to(dtype)
        h = h * F.silu(gate.to(torch.float32))
        return h.to(dtype)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.input_layernorm = Qwen3_5RMSNorm(256)
        self.norm = Qwen3_5RMSNormGated(128)
        self.other = torch.nn.Linear(4, 4)


def _model(device):
    torch.manual_seed(0)
    m = torch.nn.Sequential(Block(), Block()).to(device=device, dtype=torch.bfloat16)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return m


@pytest.mark.parametrize("device", DEVICES)
def test_swap_norms_keeps_the_weights_and_the_results(device):
    m = _model(device)
    x = qt.randn_nonzero(3, 256, device=device, seed=1)
    o = qt.randn_nonzero(3, 8, 128, device=device, seed=2)
    g = qt.randn_nonzero(3, 8, 128, device=device, seed=3)
    before = [(b.input_layernorm(x), b.norm(o, g)) for b in m]
    weights = [b.input_layernorm.weight for b in m]
    assert qnn.swap_norms(m) == 4
    assert all(isinstance(b.input_layernorm, qnn.RMSNorm) and isinstance(b.norm, qnn.GatedRMSNorm) for b in m)
    assert [b.input_layernorm.weight for b in m] == weights  # same Parameter objects: no copy
    assert isinstance(m[0].other, torch.nn.Linear)
    for b, (y1, y2) in zip(m, before):
        if device == "cpu":  # the CPU kernels are the references: the same bits as the HF forward
            qt.assert_bitwise_equal(b.input_layernorm(x), y1, "zero-centred norm")
            qt.assert_bitwise_equal(b.norm(o, g), y2, "gated norm")
        else:
            qt.assert_ulp_close(b.input_layernorm(x), y1, 1, "zero-centred norm")
            assert int(qt.ulp_diff(b.norm(o, g), y2).max()) <= 2  # either side of a tie (README)


def test_gated_norm_needs_a_gate():
    with pytest.raises(ValueError, match="gate is required"):
        qnn.GatedRMSNorm(torch.ones(8))(torch.ones(2, 8, dtype=torch.bfloat16))


def test_nvfp4_linear_module_matches_the_op_reference():
    w = formats.quantize_nvfp4(torch.randn(48, 64).bfloat16())
    mod = qnn.NVFP4Linear(w, bias=torch.randn(48))
    x = qt.randn_nonzero(2, 64, seed=4)
    y = mod(x)
    assert y.shape == (2, 48) and y.dtype == torch.bfloat16
    from qwen38_kernels.reference import nvfp4_linear
    qt.assert_bitwise_equal(y, nvfp4_linear(x, w.packed, w.scale, w.global_scale, mod.bias), "module vs reference")
    assert "nvfp4" in repr(mod)
