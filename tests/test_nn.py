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


# ---- the MLP ---------------------------------------------------------------------------------------
class Qwen3_5MLP(torch.nn.Module):  # noqa: N801  (HF's: gate_proj, up_proj, down_proj, act_fn SiLU)
    def __init__(self, hidden, inter):
        super().__init__()
        self.gate_proj = torch.nn.Linear(hidden, inter, bias=False)
        self.up_proj = torch.nn.Linear(hidden, inter, bias=False)
        self.down_proj = torch.nn.Linear(inter, hidden, bias=False)
        self.act_fn = torch.nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class Layer(torch.nn.Module):
    def __init__(self, hidden=128, inter=96):
        super().__init__()
        self.mlp = Qwen3_5MLP(hidden, inter)


def _mlp_model(device, layers=2):
    torch.manual_seed(5)
    return torch.nn.Sequential(*[Layer() for _ in range(layers)]).to(device=device, dtype=torch.bfloat16)


def _mlp_reference(x, gate, up, down):
    """The MLP from the references, each shard with its own global scale: what NVFP4MLP must give."""
    from qwen38_kernels import reference as ref
    xc = x.cpu()

    def lin(v, w):
        return ref.nvfp4_linear(v, w.packed.cpu(), w.scale.cpu(), w.global_scale.cpu(), None, None)

    return lin(ref.silu_mul(torch.cat([lin(xc, gate), lin(xc, up)], dim=-1)), down)


def _weights(seed, shared):
    g = torch.Generator().manual_seed(seed)
    hidden, inter = 128, 96
    wg = torch.randn(inter, hidden, generator=g).bfloat16()
    wu = (torch.randn(inter, hidden, generator=g) * 3).bfloat16()
    wd = torch.randn(hidden, inter, generator=g).bfloat16()
    gs = 0.01 if shared else None  # None: each its own amax-derived global scale
    return formats.quantize_nvfp4(wg, gs), formats.quantize_nvfp4(wu, gs), formats.quantize_nvfp4(wd)


@pytest.mark.parametrize("shared", [True, False])
def test_nvfp4_mlp_is_the_per_shard_reference_on_the_cpu(shared):
    gate, up, down = _weights(11, shared)
    mod = qnn.NVFP4MLP(gate, up, down)
    assert mod.shared_global == shared and (mod.shard_scale is None) == shared
    x = qt.randn_nonzero(3, 5, 128, seed=12)
    y = mod(x)
    assert y.shape == (3, 5, 128) and y.dtype == torch.bfloat16
    qt.assert_bitwise_equal(y, _mlp_reference(x, gate, up, down), "NVFP4MLP vs the references")
    assert "shared_global" in repr(mod)


@pytest.mark.gpu
@pytest.mark.parametrize("shared", [True, False])
def test_nvfp4_mlp_on_cuda(shared):
    from qwen38_kernels import nvfp4_linear, silu_mul
    gate, up, down = (formats.NVFP4Weight(w.packed.cuda(), w.scale.cuda(), w.global_scale.cuda())
                      for w in _weights(13, shared))
    mod = qnn.NVFP4MLP(gate, up, down)
    x = qt.randn_nonzero(9, 128, device="cuda", seed=14)
    y = mod(x)
    fused = formats.fuse_nvfp4([gate, up])
    # Each half with its own global scale applied by the GEMM itself: the bits the fp32 path must give.
    h = torch.cat([nvfp4_linear(x, fused.packed, fused.scale, gate.global_scale)[:, :96],
                   nvfp4_linear(x, fused.packed, fused.scale, up.global_scale)[:, 96:]], dim=-1)
    want = nvfp4_linear(silu_mul(h), down.packed, down.scale, down.global_scale)
    qt.assert_bitwise_equal(y, want, "NVFP4MLP vs the GEMM applying each shard's scale")
    # Against the CPU references: the GEMMs' sum order differs, so a 1-ulp difference of an
    # intermediate may move an output by a few of its own ulps; nothing more.
    ref = _mlp_reference(x, gate, up, down).cuda()
    assert int(qt.ulp_diff(y, ref).max()) <= 8
    qt.assert_row_invariant(mod, x, max_rows=9)
    qt.assert_graph_equals_eager(mod, x)


@pytest.mark.parametrize("device", DEVICES)
def test_swap_mlps_quantizes_in_place(device):
    m = _mlp_model(device)
    x = qt.randn_nonzero(4, 128, device=device, seed=15)
    with torch.no_grad():
        before = [layer.mlp(x) for layer in m]
    originals = [(lay.mlp.gate_proj.weight.detach(), lay.mlp.up_proj.weight.detach()) for lay in m]
    assert qnn.swap_mlps(m, show_progress=True) == 2
    for layer, y0, (wg, wu) in zip(m, before, originals):
        mod = layer.mlp
        assert isinstance(mod, qnn.NVFP4MLP) and mod.shared_global  # one global scale for gate and up
        assert mod.gate_up.w_packed.device.type == device
        g = torch.maximum(wg.abs().amax(), wu.abs().amax()).float() / (6 * 448)
        want = formats.fuse_nvfp4([formats.quantize_nvfp4(wg, g), formats.quantize_nvfp4(wu, g)])
        qt.assert_bitwise_equal(mod.gate_up.w_packed, want.packed, "gate | up codes")
        qt.assert_bitwise_equal(mod.gate_up.w_scale.view(torch.uint8), want.scale.view(torch.uint8), "scales")
        y = mod(x)
        # 4-bit weights: close to the bf16 MLP, not equal (a loose sanity bound on the quantization).
        assert float((y.float() - y0.float()).norm() / y0.float().norm()) < 0.25
    assert qnn.swap_mlps(m) == 0  # nothing left to swap


def test_swap_mlps_from_a_state_dict():
    m = _mlp_model("cpu", layers=1)
    gate, up, down = _weights(16, shared=False)
    sd = {}
    for proj, w in (("gate_proj", gate), ("up_proj", up), ("down_proj", down)):
        sd[f"ckpt.0.mlp.{proj}.weight"] = w.packed
        sd[f"ckpt.0.mlp.{proj}.weight_scale"] = w.scale
        sd[f"ckpt.0.mlp.{proj}.weight_scale_2"] = w.global_scale.reshape(1)
    assert qnn.swap_mlps(m, sd, fmt="modelopt", name_map=lambda p: "ckpt." + p) == 1
    x = qt.randn_nonzero(2, 128, seed=17)
    qt.assert_bitwise_equal(m[0].mlp(x), _mlp_reference(x, gate, up, down), "loaded MLP vs the references")
    with pytest.raises(KeyError, match="model.0.mlp.gate_proj.weight"):
        qnn.swap_mlps(_mlp_model("cpu", layers=1), sd, name_map=lambda p: "model." + p)
    m = _mlp_model("cpu", layers=2)  # layer 0 loads, layer 1 has no keys: nothing is swapped
    with pytest.raises(KeyError, match="ckpt.1.mlp.gate_proj.weight"):
        qnn.swap_mlps(m, sd, name_map=lambda p: "ckpt." + p)
    assert not any(isinstance(layer.mlp, qnn.NVFP4MLP) for layer in m)


def test_swap_mlps_bad_input_is_named():
    with pytest.raises(ValueError, match="fmt must be one of"):
        qnn.swap_mlps(_mlp_model("cpu", 1), {}, fmt="gguf")
    m = _mlp_model("cpu", 1)
    m[0].mlp.act_fn = torch.nn.GELU()
    with pytest.raises(ValueError, match="0.mlp.act_fn is GELU, not SiLU"):
        qnn.swap_mlps(m)
    m = _mlp_model("cpu", 1)
    m[0].mlp.up_proj = torch.nn.Linear(128, 96, bias=True).bfloat16()
    with pytest.raises(ValueError, match="0.mlp.up_proj has a bias"):
        qnn.swap_mlps(m)
    gate, up, down = _weights(18, shared=True)
    with pytest.raises(ValueError, match="down must be"):
        qnn.NVFP4MLP(gate, up, gate)
    with pytest.raises(ValueError, match="up must be an NVFP4Weight"):
        qnn.NVFP4MLP(gate, "up", down)


# ---- swap_linears ------------------------------------------------------------------------------------
class Attn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj = torch.nn.Linear(64, 96, bias=True)
        self.o_proj = torch.nn.Linear(96, 64, bias=False)
        self.odd = torch.nn.Linear(40, 8, bias=False)  # in_features not a multiple of 32


class TinyLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([Attn(), Attn()])
        self.lm_head = torch.nn.Linear(64, 256, bias=False)


def _tiny(device="cpu"):
    torch.manual_seed(21)
    return TinyLM().to(device=device, dtype=torch.bfloat16)


@pytest.mark.parametrize("device", DEVICES)
def test_swap_linears_quantizes_in_place(device):
    m = _tiny(device)
    want = {p: formats.quantize_nvfp4(m.get_submodule(p).weight.detach())
            for p in ("layers.0.q_proj", "layers.1.o_proj")}
    bias = m.layers[0].q_proj.bias
    assert qnn.swap_linears(m, include=lambda p: not p.endswith(("odd", "lm_head")), show_progress=True) == 4
    assert isinstance(m.layers[1].q_proj, qnn.NVFP4Linear) and isinstance(m.lm_head, torch.nn.Linear)
    assert isinstance(m.layers[0].odd, torch.nn.Linear)
    for p, w in want.items():
        mod = m.get_submodule(p)
        qt.assert_bitwise_equal(mod.w_packed, w.packed, p)
    qt.assert_bitwise_equal(m.layers[0].q_proj.bias, bias, "the bias is kept")
    x = qt.randn_nonzero(3, 64, device=device, seed=22)
    from qwen38_kernels import nvfp4_linear
    w = want["layers.0.q_proj"]
    qt.assert_bitwise_equal(m.layers[0].q_proj(x), nvfp4_linear(x, w.packed, w.scale, w.global_scale, bias), "q_proj")
    m = _tiny(device)
    with pytest.raises(ValueError, match="layers.0.odd has in_features = 40"):
        qnn.swap_linears(m)  # the default include takes odd too
    assert not any(isinstance(mod, qnn.NVFP4Linear) for mod in m.modules())  # nothing swapped


def test_swap_linears_from_a_state_dict():
    m = _tiny()
    ws = {p: formats.quantize_nvfp4(torch.randn(*m.get_submodule(p).weight.shape).bfloat16())
          for p in ("layers.0.q_proj", "layers.0.o_proj", "layers.1.q_proj")}
    sd = {}
    for p, w in ws.items():  # compressed-tensors: the divisor 1 / global
        sd[f"model.{p}.weight_packed"] = w.packed
        sd[f"model.{p}.weight_scale"] = w.scale
        sd[f"model.{p}.weight_global_scale"] = torch.reciprocal(w.global_scale)
    sd["model.lm_head.weight"] = torch.zeros(256, 64, dtype=torch.bfloat16)  # a 16-bit tensor: not NVFP4
    n = qnn.swap_linears(m, sd, fmt="compressed-tensors", name_map=lambda p: "model." + p)
    assert n == 3 and isinstance(m.layers[1].o_proj, torch.nn.Linear) and isinstance(m.lm_head, torch.nn.Linear)
    assert m.layers[0].o_proj.w_packed is ws["layers.0.o_proj"].packed  # the state dict's tensor, no copy
    # a checkpoint weight of another shape is named, after a good one: nothing is swapped
    m = _tiny()
    bad = {}
    for p, src in (("layers.0.q_proj", "layers.0.q_proj"), ("layers.0.o_proj", "layers.0.q_proj")):
        bad[f"{p}.weight"] = ws[src].packed
        bad[f"{p}.weight_scale"] = ws[src].scale
        bad[f"{p}.weight_scale_2"] = ws[src].global_scale
    with pytest.raises(ValueError, match=r"layers.0.o_proj is a Linear of \[out, in\] = \[64, 96\]"):
        qnn.swap_linears(m, bad)
    assert not any(isinstance(mod, qnn.NVFP4Linear) for mod in m.modules())
    with pytest.raises(ValueError, match="fmt must be one of"):
        qnn.swap_linears(m, bad, fmt="awq")


# ---- swap_head ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
def test_swap_head_gives_fp32_logits_sharing_the_weight(device):
    m = _tiny(device)
    w = m.lm_head.weight
    x = qt.randn_nonzero(3, 64, device=device, seed=23)
    head = qnn.swap_head(m)
    assert m.lm_head is head and head.weight is w  # the same Parameter: no copy
    y = m.lm_head(x)
    assert y.dtype == torch.float32 and y.shape == (3, 256)
    from qwen38_kernels import head_logits
    qt.assert_bitwise_equal(y, head_logits(x, w), "OutputHead vs head_logits")
    want = x.double() @ w.detach().double().T  # products exact, fp32 sums of 64 terms: close to float64
    assert float((y.detach().double() - want).abs().max()) <= 1e-5 * float(want.abs().max()) + 1e-6
    with pytest.raises(ValueError, match="lm_head must be a torch.nn.Linear, got OutputHead"):
        qnn.swap_head(m)
    m2 = _tiny(device)
    m2.lm_head = torch.nn.Linear(64, 256, bias=True).to(device=device, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="lm_head has a bias"):
        qnn.swap_head(m2)
    with pytest.raises(ValueError, match=r"layers.0.odd has in_features = 40, not a multiple of 16"):
        qnn.swap_head(m2, "layers.0.odd")


def test_swap_head_from_an_nvfp4_state_dict():
    m = _tiny()
    w = formats.quantize_nvfp4(m.lm_head.weight.detach())
    sd = {"lm_head.weight": w.packed, "lm_head.weight_scale": w.scale, "lm_head.weight_scale_2": w.global_scale}
    head = qnn.swap_head(m, state_dict=sd)
    assert isinstance(head, qnn.NVFP4Linear) and m.lm_head is head and head.out_dtype == torch.float32
    x = qt.randn_nonzero(3, 64, seed=24)
    from qwen38_kernels import nvfp4_linear
    qt.assert_bitwise_equal(m.lm_head(x), nvfp4_linear(x, w.packed, w.scale, w.global_scale, None, torch.float32),
                            "NVFP4 head vs the op")
    m2 = _tiny()  # no NVFP4 keys for the head: the 16-bit OutputHead
    assert isinstance(qnn.swap_head(m2, state_dict={"other.weight": w.packed}), qnn.OutputHead)
    with pytest.raises(ValueError, match="fmt must be one of"):
        qnn.swap_head(_tiny(), state_dict=sd, fmt="gptq")
