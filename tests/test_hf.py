"""The nn swaps on a real HF transformers Qwen3.5 model (a tiny random one): norms, MLPs and every other
projection swapped from a ModelOpt-layout state dict, against the same model running HF's own modules on
the same (dequantized) weights. Skips where transformers has no Qwen3.5 (CI installs no transformers)."""
from __future__ import annotations

import pytest
import torch

from qwen38_kernels import formats
from qwen38_kernels import nn as qnn

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def _tiny_qwen3_5(device):
    tr = pytest.importorskip("transformers")
    cfg_cls, lm_cls = getattr(tr, "Qwen3_5TextConfig", None), getattr(tr, "Qwen3_5ForCausalLM", None)
    if cfg_cls is None or lm_cls is None:
        pytest.skip(f"transformers {tr.__version__} has no Qwen3.5 text model")
    cfg = cfg_cls(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=1, head_dim=64, linear_num_key_heads=2,
                  linear_num_value_heads=6, linear_key_head_dim=64, linear_value_head_dim=64,
                  max_position_embeddings=128)
    torch.manual_seed(0)
    model = lm_cls(cfg).to(device=device, dtype=torch.bfloat16).eval()
    with torch.no_grad():  # HF initialises the norm weights to constants: give them something to do
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or ".norm.weight" in name:
                p.add_(torch.randn_like(p) * 0.1)
    return model


def _nvfp4_state_dict(model):
    """Quantizes every Linear but lm_head with global scale 1 (so the dequantized weight, e2m1 x e4m3, is
    exact in bf16), writes the dequantized weight back into the HF module, and returns the ModelOpt-layout
    state dict of the NVFP4 weights."""
    sd = {}
    with torch.no_grad():
        for name, mod in model.named_modules():
            if type(mod) is not torch.nn.Linear or name.endswith("lm_head"):
                continue
            w = formats.quantize_nvfp4(mod.weight.detach(), 1.0)
            mod.weight.copy_(formats.dequantize_nvfp4(w, torch.float32).to(torch.bfloat16))
            sd[f"{name}.weight"] = w.packed
            sd[f"{name}.weight_scale"] = w.scale
            sd[f"{name}.weight_scale_2"] = w.global_scale.reshape(1)
    return sd


@pytest.mark.parametrize("device", DEVICES)
def test_swapped_qwen3_5_computes_what_hf_computes(device):
    model = _tiny_qwen3_5(device)
    sd = _nvfp4_state_dict(model)
    ids = torch.randint(0, 512, (1, 12), generator=torch.Generator().manual_seed(1)).to(device)
    with torch.no_grad():
        want = model(ids).logits.float()
    n_norms = qnn.swap_norms(model)
    n_mlps = qnn.swap_mlps(model, sd, fmt="modelopt")
    n_lin = qnn.swap_linears(model, sd, fmt="modelopt")
    # 4 layers: input + post norms each, q/k norms in the attention layer, the gated norm in the 3 GDN
    # layers, the final norm; 4 MLPs; attention q/k/v/o (4) + GDN qkv/z/b/a/out (5 x 3)
    assert (n_norms, n_mlps, n_lin) == (4 * 2 + 2 + 3 + 1, 4, 4 + 5 * 3)
    assert isinstance(model.lm_head, torch.nn.Linear)
    with torch.no_grad():
        got = model(ids).logits.float()
    assert got.shape == want.shape
    # The same weights and rounding points, another sum order inside each GEMM and norm: the logits
    # agree to a few bf16 ulps of the hidden states carried through 4 layers.
    err = float((got - want).abs().max() / want.abs().max())
    assert err < 2e-2, f"logits differ by {err:.3g} of their largest magnitude"
    assert int((got.argmax(-1) == want.argmax(-1)).sum()) >= 9  # of 12 positions (near-ties may flip)
