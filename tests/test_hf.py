"""The nn swaps on a real HF transformers Qwen3.5 model (a tiny random one): norms, MLPs and every other
projection swapped from a ModelOpt-layout state dict, against the same model running HF's own modules on
the same (dequantized) weights. Skips where transformers has no Qwen3.5 (CI installs no transformers)."""
from __future__ import annotations

import pytest
import torch

from qwen38_kernels import formats
from qwen38_kernels import nn as qnn

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def _hf_qwen3_5(device, k_heads, v_heads, head, seed, layers=4):
    """A random HF Qwen3.5 text model: `layers` / 4 x (3 GDN layers (k_heads / v_heads of `head`), one
    attention layer), hidden 256, vocab 512, bf16."""
    tr = pytest.importorskip("transformers")
    cfg_cls, lm_cls = getattr(tr, "Qwen3_5TextConfig", None), getattr(tr, "Qwen3_5ForCausalLM", None)
    if cfg_cls is None or lm_cls is None:
        pytest.skip(f"transformers {tr.__version__} has no Qwen3.5 text model")
    cfg = cfg_cls(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=layers,
                  num_attention_heads=4, num_key_value_heads=1, head_dim=64, linear_num_key_heads=k_heads,
                  linear_num_value_heads=v_heads, linear_key_head_dim=head, linear_value_head_dim=head,
                  max_position_embeddings=128)
    torch.manual_seed(seed)
    return lm_cls(cfg).to(device=device, dtype=torch.bfloat16).eval()


def _tiny_qwen3_5(device):
    model = _hf_qwen3_5(device, 2, 6, 64, seed=0)
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
    qnn.swap_head(model)  # fp32 logits from head_logits instead of the Linear's bf16 ones
    with torch.no_grad():
        got = model(ids).logits
    assert got.dtype == torch.float32 and got.shape == want.shape
    # The same weights and rounding points, another sum order inside each GEMM and norm: the logits
    # agree to a few bf16 ulps of the hidden states carried through 4 layers.
    err = float((got - want).abs().max() / want.abs().max())
    assert err < 2e-2, f"logits differ by {err:.3g} of their largest magnitude"
    assert int((got.argmax(-1) == want.argmax(-1)).sum()) >= 9  # of 12 positions (near-ties may flip)


def _gdn_qwen3_5(device, layers=4):
    """The GDN layers at the real geometry (16 / 48 heads of 128: the kernels')."""
    return _hf_qwen3_5(device, 16, 48, 128, seed=2, layers=layers)


def _decode(model, ids, steps, tokens=None):
    """Prefill ids, then `steps` one-token steps with the cache, feeding `tokens` [B, steps] (None: the
    greedy choice of each step). Returns (the logits of every step, the tokens fed)."""
    out = model(ids, use_cache=True)
    past, logits, fed = out.past_key_values, [out.logits[:, -1].float()], []
    for i in range(steps):
        nxt = logits[-1].argmax(-1, keepdim=True) if tokens is None else tokens[:, i:i + 1]
        fed.append(nxt)
        out = model(nxt, past_key_values=past, use_cache=True)
        past = out.past_key_values
        logits.append(out.logits[:, -1].float())
    return torch.stack(logits, 1), torch.cat(fed, 1)


@pytest.mark.parametrize("device", DEVICES)
def test_swap_gdn_steps_what_hf_steps(device):
    """One GDN layer over 5 cached decode steps, HF's module against the wrapped one from copies of the
    same prefilled cache: the conv state (inputs only) is bit-equal after every step; the recurrent state
    and the output differ only by the kernels' rounding (the conv's silu of the fp32 sum where HF's torch
    step rounds the sum to bf16 first; the recurrence's fixed fp32 order). A wiring error (q / k / v,
    a / b, the state shift) moves them by their own magnitude."""
    import copy
    model = _gdn_qwen3_5(device)
    ids = torch.randint(0, 512, (2, 7), generator=torch.Generator().manual_seed(3)).to(device)
    with torch.no_grad():
        cache = model(ids, use_cache=True).past_key_values
    gdn = model.model.layers[0].linear_attn
    ours = qnn.GatedDeltaNetDecode(gdn)
    c_hf, c_ours = copy.deepcopy(cache), copy.deepcopy(cache)
    g = torch.Generator().manual_seed(4)
    for step in range(5):
        h = (torch.randn(2, 1, 256, generator=g) * 0.5).to(device=device, dtype=torch.bfloat16)
        with torch.no_grad():
            want, got = gdn(h, c_hf), ours(h, c_ours)
        if ours.fast_steps != step + 1:
            pytest.skip("this transformers' cache is not the layout GatedDeltaNetDecode knows (HF's forward ran)")
        lh, lo = c_hf.layers[0], c_ours.layers[0]
        assert torch.equal(lh.conv_states[0], lo.conv_states[0]), f"step {step}: conv state"
        s_hf, s_ours = lh.recurrent_states[0], lo.recurrent_states[0]
        assert float((s_ours - s_hf).abs().max()) <= 2e-2 * float(s_hf.abs().max()), f"step {step}: state"
        err = float((got.float() - want.float()).abs().max() / want.float().abs().max())
        assert err < 3e-2, f"step {step}: output differs by {err:.3g} of its largest magnitude"


@pytest.mark.parametrize("device", DEVICES)
def test_swapped_model_decodes_with_the_kernels(device):
    """The whole model with its 3 GDN layers wrapped: every cached one-token step takes the kernels'
    path, and the first step's logits agree with HF's (later steps drift apart by the rounding above,
    amplified by this random model; the same tokens are fed to both)."""
    import copy
    model = _gdn_qwen3_5(device)
    ours = copy.deepcopy(model)
    assert qnn.swap_gdn(ours) == 3
    wrapped = [m for m in ours.modules() if isinstance(m, qnn.GatedDeltaNetDecode)]
    ids = torch.randint(0, 512, (2, 7), generator=torch.Generator().manual_seed(3)).to(device)
    with torch.no_grad():
        want, fed = _decode(model, ids, steps=5)
        got, _ = _decode(ours, ids, steps=5, tokens=fed)
    if not all(m.fast_steps == 5 for m in wrapped):
        pytest.skip(f"this transformers' cache is not the layout swap_gdn knows: {[m.fast_steps for m in wrapped]} "
                    "fast steps of 5 (HF's forward ran instead)")
    assert torch.equal(got[:, 0], want[:, 0])  # the prefill is HF's own in both
    err = float((got[:, 1] - want[:, 1]).abs().max() / want[:, 1].abs().max())
    assert err < 5e-2, f"first decode step's logits differ by {err:.3g} of their largest magnitude"
    assert bool(torch.isfinite(got).all())


@pytest.mark.parametrize("device", DEVICES)
def test_swap_gdn_counts_the_tokens_it_steps(device):
    """Newer transformers (5.2x) count the tokens of a linear-attention cache layer (the count
    get_seq_length, and so the next call's positions, read); HF's own step counts each one, and so must
    the wrapped step: after a prefill of 7 and 4 steps the cache says 11 (it said 7 before this was
    fixed, so RoPE positions stopped advancing). With older transformers the attention layer counts."""
    model = _gdn_qwen3_5(device)
    qnn.swap_gdn(model)
    wrapped = [m for m in model.modules() if isinstance(m, qnn.GatedDeltaNetDecode)]
    ids = torch.randint(0, 512, (1, 7), generator=torch.Generator().manual_seed(6)).to(device)
    with torch.no_grad():
        past = model(ids, use_cache=True).past_key_values
        for t in (3, 1, 4, 1):
            past = model(torch.tensor([[t]], device=device), past_key_values=past, use_cache=True).past_key_values
    if not all(m.fast_steps == 4 for m in wrapped):
        pytest.skip("this transformers' cache is not the layout swap_gdn knows (HF's forward ran)")
    assert int(past.get_seq_length()) == 11


def test_swap_gdn_refuses_another_geometry():
    model = _tiny_qwen3_5("cpu")  # 2 / 6 heads of 64
    with pytest.raises(ValueError, match=r"swap_gdn: model.layers.0.linear_attn: .*num_k_heads is 2"):
        qnn.swap_gdn(model)
    assert not any(isinstance(m, qnn.GatedDeltaNetDecode) for m in model.modules())
