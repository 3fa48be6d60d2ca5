"""Drop-in modules for an engine's model (HF transformers first), backed by the qwen38 ops.

    from qwen38_kernels import nn as qnn
    n = qnn.swap_norms(model)          # Qwen3.5/3.8 RMS norms -> fused kernels, weights shared
    n = qnn.swap_mlps(model, state_dict, fmt="modelopt")   # MLPs -> NVFP4 gate_up + silu_mul + down
    n = qnn.swap_linears(model, state_dict, fmt="modelopt") # the other NVFP4 projections -> NVFP4Linear
    n = qnn.swap_gdn(model)            # GDN decode steps -> conv_step + gdn_step_raw on HF's cache
    qnn.swap_head(model)               # lm_head -> head_logits (fp32 logits), weight shared
    qnn.swap_attention(model)          # attention of <= 64 query rows -> attn_decode (HF's interface)

Each module keeps the original's weight Parameter (no copy) and its forward signature; on CUDA it runs
the fused kernel, on the CPU the reference (the ops' CPU kernels), with the reference's rounding
points, so a swapped model computes what the original computed (bit for bit on the CPU; within the
ops' contract on the GPU).
"""
from __future__ import annotations

import torch

from typing import Callable, Mapping

from .ops import (attn_decode, conv_chain, conv_step, conv_tree, gdn_chain_verify, gdn_commit, gdn_commit_verify,
                  gdn_step_raw, gdn_tree_verify, head_logits, nvfp4_linear, rms_norm, rms_norm_gated, silu_mul)
from .formats import (NVFP4Weight, fuse_nvfp4, load_nvfp4_compressed_tensors, load_nvfp4_modelopt,
                      nvfp4_global_scale, quantize_nvfp4)
from .reference import gdn_gates
from .reference.attn import MAX_ROWS as ATTN_MAX_ROWS

__all__ = ["RMSNorm", "GatedRMSNorm", "NVFP4Linear", "NVFP4MLP", "GatedDeltaNetDecode", "OutputHead", "swap_norms",
           "swap_mlps", "swap_linears", "swap_gdn", "swap_head", "swap_attention", "attention_forward", "NORM_CLASSES",
           "MLP_CLASSES", "GDN_CLASSES"]


class RMSNorm(torch.nn.Module):
    """``y = x * rsqrt(mean(x^2) + eps) * (1 + weight)`` (zero_centered, Qwen3.5/3.8) or ``* weight``."""

    def __init__(self, weight: torch.nn.Parameter | torch.Tensor, eps: float = 1e-6, zero_centered: bool = True):
        super().__init__()
        self.weight = weight if isinstance(weight, torch.nn.Parameter) else torch.nn.Parameter(weight)
        self.eps = float(eps)
        self.zero_centered = bool(zero_centered)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps, self.zero_centered)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.eps}, zero_centered={self.zero_centered}"


class GatedRMSNorm(torch.nn.Module):
    """The GDN output norm: ``round(w * round(x * rsqrt(mean(x^2) + eps))) * silu(gate)``, rounded."""

    def __init__(self, weight: torch.nn.Parameter | torch.Tensor, eps: float = 1e-6):
        super().__init__()
        self.weight = weight if isinstance(weight, torch.nn.Parameter) else torch.nn.Parameter(weight)
        self.eps = float(eps)

    def forward(self, hidden_states: torch.Tensor, gate: torch.Tensor | None = None) -> torch.Tensor:
        if gate is None:
            raise ValueError("GatedRMSNorm: gate is required (the ungated form is RMSNorm(zero_centered=False))")
        return rms_norm_gated(hidden_states, gate, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.eps}"


class NVFP4Linear(torch.nn.Module):
    """``y = x @ W.T (+ bias)`` with W in NVFP4 (``qwen38_kernels.formats.NVFP4Weight``); buffers, not
    parameters (the weights are frozen). ``out_dtype`` None keeps x's dtype (fp32 for a head)."""

    def __init__(self, weight: NVFP4Weight, bias: torch.Tensor | None = None, out_dtype: torch.dtype | None = None):
        super().__init__()
        weight.validate()
        self.in_features, self.out_features = weight.K, weight.N
        self.register_buffer("w_packed", weight.packed)
        self.register_buffer("w_scale", weight.scale)
        self.register_buffer("w_global", weight.global_scale)
        self.register_buffer("bias", bias)
        self.out_dtype = out_dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nvfp4_linear(x, self.w_packed, self.w_scale, self.w_global, self.bias, self.out_dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, nvfp4"


# HF class name -> kind. "zero_centered": forward(x) with (1 + weight); "gated": forward(x, gate).
NORM_CLASSES: dict[str, str] = {
    "Qwen3_5RMSNorm": "zero_centered",
    "Qwen3NextRMSNorm": "zero_centered",
    "Qwen3_5RMSNormGated": "gated",
    "Qwen3NextRMSNormGated": "gated",
}


def _eps_of(module: torch.nn.Module) -> float:
    for name in ("eps", "variance_epsilon"):
        if hasattr(module, name):
            return float(getattr(module, name))
    raise ValueError(f"swap_norms: {type(module).__name__} has neither eps nor variance_epsilon")


def swap_norms(model: torch.nn.Module, classes: dict[str, str] | None = None) -> int:
    """Replaces every submodule whose class name is in ``classes`` (default ``NORM_CLASSES``) by the
    matching module here, sharing its weight Parameter. Returns how many were swapped."""
    classes = NORM_CLASSES if classes is None else classes
    swapped = 0
    for parent in list(model.modules()):
        for child_name, child in list(parent.named_children()):
            kind = classes.get(type(child).__name__)
            if kind is None:
                continue
            if kind == "zero_centered":
                new = RMSNorm(child.weight, _eps_of(child), zero_centered=True)
            elif kind == "plain":
                new = RMSNorm(child.weight, _eps_of(child), zero_centered=False)
            elif kind == "gated":
                new = GatedRMSNorm(child.weight, _eps_of(child))
            else:
                raise ValueError(f"swap_norms: unknown kind {kind!r} for {type(child).__name__}")
            setattr(parent, child_name, new)
            swapped += 1
    return swapped


class NVFP4MLP(torch.nn.Module):
    """The Qwen gated MLP ``down(silu(gate(x)) * up(x))`` in three launches: one NVFP4 GEMM for gate and
    up fused along N (``[gate | up]``, 2I rows), ``silu_mul`` (HF's ``act_fn(gate) * up`` bits), and the
    down projection. Each projection's output is rounded to x's dtype where HF rounds it.

    gate and up are copied once into the fused weight (``formats.fuse_nvfp4``). When their global
    scales are equal (ModelOpt exports fused layers that way) the fused GEMM applies it; when they
    differ, the GEMM writes fp32 sums with a global scale of 1 and each half is multiplied by its own
    scale in fp32 before the one rounding: the same bits as a GEMM applying each shard's scale, at the
    cost of an fp32 [rows, 2I] intermediate."""

    def __init__(self, gate: NVFP4Weight, up: NVFP4Weight, down: NVFP4Weight):
        super().__init__()
        for name, w in (("gate", gate), ("up", up), ("down", down)):
            if not isinstance(w, NVFP4Weight):
                raise ValueError(f"NVFP4MLP: {name} must be an NVFP4Weight, got {type(w).__name__}")
            w.validate()
        if gate.N != up.N or gate.K != up.K:
            raise ValueError(f"NVFP4MLP: gate [N, K] = [{gate.N}, {gate.K}] and up [{up.N}, {up.K}] must match")
        if down.K != gate.N or down.N != gate.K:
            raise ValueError(f"NVFP4MLP: down must be [hidden, intermediate] = [{gate.K}, {gate.N}], got "
                             f"[{down.N}, {down.K}]")
        fused = fuse_nvfp4([gate, up])
        self.hidden_size, self.intermediate_size = gate.K, gate.N
        # One host read of two scalars at construction (never in forward).
        if torch.equal(gate.global_scale.cpu(), up.global_scale.cpu()):
            self.gate_up = NVFP4Linear(NVFP4Weight(fused.packed, fused.scale, gate.global_scale))
            self.register_buffer("shard_scale", None)
        else:
            one = torch.ones((), dtype=torch.float32, device=gate.device)
            self.gate_up = NVFP4Linear(NVFP4Weight(fused.packed, fused.scale, one), out_dtype=torch.float32)
            self.register_buffer("shard_scale", torch.cat([gate.global_scale.reshape(1).expand(gate.N),
                                                           up.global_scale.reshape(1).expand(up.N)]))
        self.down = NVFP4Linear(down)

    @property
    def shared_global(self) -> bool:
        """Whether gate and up share one global scale (the fused GEMM applies it)."""
        return self.shard_scale is None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.gate_up(x)
        if self.shard_scale is not None:
            h = (h * self.shard_scale).to(x.dtype)  # fp32 sum * shard scale in fp32, then one rounding
        return self.down(silu_mul(h))

    def extra_repr(self) -> str:
        return (f"hidden_size={self.hidden_size}, intermediate_size={self.intermediate_size}, nvfp4, "
                f"shared_global={self.shared_global}")


# HF MLP class names (gate_proj, up_proj, down_proj; act_fn silu) that swap_mlps replaces.
MLP_CLASSES: tuple[str, ...] = ("Qwen3_5MLP", "Qwen3NextMLP", "Qwen3MLP", "Qwen2MLP")

_LOADERS = {"modelopt": load_nvfp4_modelopt, "compressed-tensors": load_nvfp4_compressed_tensors}
_PACKED_SUFFIX = {"modelopt": "weight_scale", "compressed-tensors": "weight_packed"}  # the key an NVFP4 weight has


def _check_fmt(op: str, fmt: str) -> None:
    if fmt not in _LOADERS:
        raise ValueError(f"{op}: fmt must be one of {sorted(_LOADERS)}, got {fmt!r}")


def _has_nvfp4(state_dict, fmt: str, prefix: str) -> bool:
    return f"{prefix}.{_PACKED_SUFFIX[fmt]}" in state_dict


def _load_for(op: str, lin: torch.nn.Linear, path: str, state_dict, fmt: str, prefix: str) -> NVFP4Weight | None:
    """The NVFP4 weight at ``prefix`` in ``state_dict`` (None where it holds none in ``fmt``), checked
    against the shape of the Linear ``lin`` at ``path`` it replaces."""
    if not _has_nvfp4(state_dict, fmt, prefix):
        return None
    w = _LOADERS[fmt](state_dict, prefix)
    if (w.N, w.K) != (lin.out_features, lin.in_features):
        raise ValueError(f"{op}: {path} is a Linear of [out, in] = [{lin.out_features}, {lin.in_features}] "
                         f"but its NVFP4 weight at {prefix!r} is [{w.N}, {w.K}]")
    return w


def _is_silu(act) -> bool:
    return act is torch.nn.functional.silu or isinstance(act, torch.nn.SiLU) or \
        type(act).__name__ in ("SiLU", "SiLUActivation")


def _check_linear(mlp: torch.nn.Module, where: str, proj: str) -> torch.Tensor:
    lin = getattr(mlp, proj, None)
    if lin is None or not isinstance(getattr(lin, "weight", None), torch.Tensor):
        raise ValueError(f"swap_mlps: {where} has no {proj} with a weight")
    if getattr(lin, "bias", None) is not None:
        raise ValueError(f"swap_mlps: {where}.{proj} has a bias; NVFP4MLP has none")
    return lin.weight


def swap_mlps(model: torch.nn.Module, state_dict: Mapping[str, torch.Tensor] | None = None,
              fmt: str = "modelopt", classes: tuple[str, ...] | None = None,
              name_map: Callable[[str], str] | None = None, show_progress: bool = False) -> int:
    """Replaces every submodule whose class name is in ``classes`` (default ``MLP_CLASSES``) by an
    ``NVFP4MLP``. Returns how many were swapped.

    - With ``state_dict``: the NVFP4 weights of the MLP at module path ``p`` are read with the ``fmt``
      loader (``"modelopt"`` or ``"compressed-tensors"``, ``formats.load_nvfp4_*``) at prefixes
      ``{name_map(p)}.gate_proj``, ``.up_proj`` and ``.down_proj`` (``name_map`` defaults to the
      identity: checkpoint keys named like the model's modules). Missing keys raise ``KeyError``.
    - Without: each MLP's own weights are quantized with the reference quantizer
      (``formats.quantize_nvfp4``), gate and up with one shared global scale (as ModelOpt exports fused
      layers), on the weights' device. For trying the kernels on a bf16 model; not a calibrated
      quantization.

    Every replacement is built before the first is put in place, so an error (a missing key, a bad
    weight) leaves the model as it was; the original modules (and, once nothing else holds them, their
    weights) are dropped after. ``show_progress`` draws a progress bar over the MLPs found."""
    classes = MLP_CLASSES if classes is None else tuple(classes)
    if state_dict is not None:
        _check_fmt("swap_mlps", fmt)
    found = [(name, mod) for name, mod in model.named_modules() if type(mod).__name__ in classes]
    parents = {id(child): (parent, child_name) for parent in model.modules()
               for child_name, child in parent.named_children()}
    items = found
    if show_progress:
        from .bench import progress
        items = progress(found, desc="swap_mlps", total=len(found))
    built = []
    for name, mlp in items:
        where = name or type(mlp).__name__
        if id(mlp) not in parents:
            raise ValueError(f"swap_mlps: the model itself is a {type(mlp).__name__}; wrap it in a module")
        act = getattr(mlp, "act_fn", None)
        if act is not None and not _is_silu(act):
            raise ValueError(f"swap_mlps: {where}.act_fn is {type(act).__name__}, not SiLU")
        ws = {p: _check_linear(mlp, where, p) for p in ("gate_proj", "up_proj", "down_proj")}
        if state_dict is not None:
            prefix = name_map(name) if name_map is not None else name
            load = _LOADERS[fmt]
            gate, up, down = (load(state_dict, f"{prefix}.{p}") for p in ("gate_proj", "up_proj", "down_proj"))
        else:
            with torch.no_grad():
                wg, wu = ws["gate_proj"].detach(), ws["up_proj"].detach()
                g = nvfp4_global_scale(wg, wu)
                gate, up = quantize_nvfp4(wg, g), quantize_nvfp4(wu, g)
                down = quantize_nvfp4(ws["down_proj"].detach())
        built.append((parents[id(mlp)], NVFP4MLP(gate, up, down)))
    for (parent, child_name), new in built:
        setattr(parent, child_name, new)
    return len(built)



def swap_linears(model: torch.nn.Module, state_dict: Mapping[str, torch.Tensor] | None = None,
                 fmt: str = "modelopt", include: Callable[[str], bool] | None = None,
                 name_map: Callable[[str], str] | None = None, show_progress: bool = False) -> int:
    """Replaces ``torch.nn.Linear`` submodules by ``NVFP4Linear`` (keeping each one's bias and output
    dtype, x's). Returns how many were swapped. Run ``swap_mlps`` first to get the MLPs fused.

    - With ``state_dict``: every Linear at module path ``p`` whose checkpoint prefix ``name_map(p)``
      (default ``p``) holds an NVFP4 weight in ``fmt`` (``"modelopt"``: a ``{prefix}.weight_scale``
      key; ``"compressed-tensors"``: ``{prefix}.weight_packed``) and passes ``include(p)``, loaded
      with ``formats.load_nvfp4_*`` (no copy of the packed bytes). Linears the checkpoint keeps in 16
      bits (e.g. lm_head, the GDN's b / a projections in some exports) stay as they are.
    - Without: every Linear passing ``include`` (default: all but ``lm_head``), its weight quantized
      with the reference quantizer (``formats.quantize_nvfp4``) on its device; a Linear whose
      in_features is not a multiple of 32 (the kernels' K step) raises ``ValueError`` naming it.

    A loaded weight whose shape differs from the Linear's raises ``ValueError`` naming both. Every
    replacement is built before the first is put in place, so an error leaves the model as it was."""
    _check_fmt("swap_linears", fmt)
    if include is None:
        include = (lambda p: p.split(".")[-1] != "lm_head")
    found = []
    for parent_name, parent in model.named_modules():
        for child_name, child in parent.named_children():
            if type(child) is not torch.nn.Linear:  # exactly nn.Linear: quantized or custom subclasses stay
                continue
            path = f"{parent_name}.{child_name}" if parent_name else child_name
            if not include(path):
                continue
            prefix = name_map(path) if name_map is not None else path
            if state_dict is not None and not _has_nvfp4(state_dict, fmt, prefix):
                continue
            if state_dict is None and child.in_features % 32:
                raise ValueError(f"swap_linears: {path} has in_features = {child.in_features}, not a multiple of "
                                 "32 (the NVFP4 kernels' K step); leave it out with include=")
            found.append((path, prefix, parent, child_name, child))
    items = found
    if show_progress:
        from .bench import progress
        items = progress(found, desc="swap_linears", total=len(found))
    built = []
    for path, prefix, parent, child_name, lin in items:
        if state_dict is not None:
            w = _load_for("swap_linears", lin, path, state_dict, fmt, prefix)
        else:
            with torch.no_grad():
                w = quantize_nvfp4(lin.weight.detach())
        bias = None if lin.bias is None else lin.bias.detach()
        if bias is not None and bias.device != w.device:
            bias = bias.to(w.device)
        built.append((parent, child_name, NVFP4Linear(w, bias=bias)))
    for parent, child_name, new in built:
        setattr(parent, child_name, new)
    return len(built)


# ---- the Gated DeltaNet's decode step ------------------------------------------------------------------
# HF GatedDeltaNet class names swap_gdn wraps.
GDN_CLASSES: tuple[str, ...] = ("Qwen3_5GatedDeltaNet", "Qwen3NextGatedDeltaNet")
_GDN_GEOMETRY = {"num_k_heads": 16, "num_v_heads": 48, "head_k_dim": 128, "head_v_dim": 128, "conv_kernel_size": 4}


def _count_tokens(cache, layer_idx: int, n: int) -> None:
    """Tells HF's linear-attention cache layer that n more tokens entered its state, where it counts them
    (transformers >= 5.2x: ``cumulative_length_linear``, which ``get_seq_length`` and so the next call's
    positions read; HF's own one-token step calls ``increase_count``, one token a call). Older layers
    count nothing."""
    layer = cache.layers[layer_idx]
    count = getattr(layer, "cumulative_length_linear", None)
    if isinstance(count, torch.Tensor):
        count.add_(n)  # (one add for a commit's n tokens, not n launches)
    elif hasattr(layer, "increase_count"):
        for _ in range(n):
            layer.increase_count(0)


class GatedDeltaNetDecode(torch.nn.Module):
    """Wraps an HF transformers Gated DeltaNet module (``Qwen3_5GatedDeltaNet``, Qwen3-Next's): a
    one-token decode step with a cache runs the library's ``conv_step`` and ``gdn_step_raw`` on the
    cache's own state tensors (updated in place, as HF's step does); the projections, the gated norm
    and out_proj are the wrapped module's own (swapped or not). Anything else (prefill, several tokens,
    no cache, a cache layout this does not know) runs the wrapped module's forward unchanged.

    Rounding differs from HF's torch step where the library's contract says so: the conv's silu is taken
    of the fp32 sum (HF's torch fallback rounds the sum to bf16 first), and the recurrence follows the
    library's fixed fp32 order (``reference.gdn_step``). ``fast_steps`` counts the steps taken here.

    HF's conv state holds the last 4 inputs ``[B, C, 4]``; ``conv_step`` reads the last 3
    (``[S, C, 3]``): each step copies those 3 into a scratch tensor and shifts HF's state after (small
    copies of B x C x 3, B x C and B x C x 3 elements). The step also advances the token count newer
    transformers keep in the layer (``_count_tokens``), as HF's own step does.

    Verify mode (set by ``qwen38_kernels.spec``): a cached forward of a drafted chain (1..16 tokens) or tree
    (1..64 nodes) runs ``conv_chain`` / ``conv_tree`` and ``gdn_chain_verify`` / ``gdn_tree_verify`` on the
    cached states without writing them; ``commit`` then leaves the state of the accepted tokens
    (``gdn_commit``), ``discard()`` the state before the verify. ``verifies`` counts them. With
    ``fold_commits`` the recurrent replay waits for the next verify, which runs ``gdn_commit_verify`` (each
    state tile read and written once a round instead of read twice); ``flush()`` (also run before a plain
    step) replays it at once."""

    def __init__(self, gdn: torch.nn.Module):
        super().__init__()
        for attr, want in _GDN_GEOMETRY.items():
            got = getattr(gdn, attr, None)
            if got != want:
                raise ValueError(f"GatedDeltaNetDecode: {type(gdn).__name__}.{attr} is {got}, the kernels need {want}")
        if getattr(gdn, "activation", "silu") not in ("silu", "swish"):
            raise ValueError(f"GatedDeltaNetDecode: activation {gdn.activation!r}, the kernels need silu")
        if getattr(gdn.conv1d, "bias", None) is not None:
            raise ValueError("GatedDeltaNetDecode: the conv has a bias; the kernels have none")
        self.gdn = gdn
        self.layer_idx = gdn.layer_idx
        self.fast_steps = 0
        self.verifies = 0
        self._slots: torch.Tensor | None = None
        # (qwen38_kernels.spec) verify mode: a cached forward of drafted tokens runs the chain or tree
        # verify without writing the cache; _pending keeps what commit() replays
        self._verify = False
        self._tree: tuple[list[int], torch.Tensor] | None = None  # a tree verify's parents: host list, device
        self._pending: tuple | None = None
        self.fold_commits = False  # commit() leaves the recurrent replay to the next verify (gdn_commit_verify)
        self._deferred: tuple | None = None  # that replay: gdn_commit's arguments but the pool and slots

    def _states(self, cache, hidden_states):
        """HF's (conv_state [B, C, 4], recurrent_state [B, 48, 128, 128] fp32) for a cached decode step,
        or None where this cache is not the layout known here (then HF's forward runs)."""
        if cache is None:
            return None
        try:
            if not cache.has_previous_state(self.layer_idx, state_idx=0):
                return None
            layer = cache.layers[self.layer_idx]
            if getattr(layer, "record_past", False):
                return None
            conv, rec = layer.conv_states[0], layer.recurrent_states[0]
        except (AttributeError, TypeError, IndexError, KeyError, ValueError):
            return None
        b, c = hidden_states.shape[0], self.gdn.conv_dim
        if not (isinstance(conv, torch.Tensor) and isinstance(rec, torch.Tensor)):
            return None
        if tuple(conv.shape) != (b, c, 4) or conv.dtype != hidden_states.dtype or not conv.is_contiguous():
            return None
        if tuple(rec.shape) != (b, 48, 128, 128) or rec.dtype != torch.float32 or not rec.is_contiguous():
            return None
        return conv, rec

    def _slot_index(self, b: int, device: torch.device) -> torch.Tensor:
        if self._slots is None or self._slots.shape[0] != b or self._slots.device != device:
            self._slots = torch.arange(b, dtype=torch.int64, device=device)
        return self._slots

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs):
        # HF passes the cache as `cache` (newer) or `cache_params` (older), by keyword or first after x
        cache = kwargs.get("cache", kwargs.get("cache_params", args[0] if args else None))
        attention_mask = kwargs.get("attention_mask", args[1] if len(args) > 1 else None)
        h = hidden_states
        if attention_mask is not None and attention_mask.dim() == 2:  # HF's padding mask on the inputs
            h = (h * attention_mask[:, :, None]).to(h.dtype)
        if self._verify:
            return self._verify_forward(h, cache)
        self.flush()
        st = self._states(cache, hidden_states) if hidden_states.shape[1] == 1 else None
        if st is None:
            return self.gdn(hidden_states, *args, **kwargs)
        conv, rec = st
        m, b = self.gdn, hidden_states.shape[0]
        x = m.in_proj_qkv(h)[:, 0]                       # [B, 10240]
        z = m.in_proj_z(h)                               # [B, 1, 6144]
        bb, a = m.in_proj_b(h)[:, 0], m.in_proj_a(h)[:, 0]  # [B, 48]
        self._slot_index(b, x.device)
        prev = conv[:, :, 1:].contiguous()               # the 3 previous inputs, conv_step's layout
        y = conv_step(x, prev, m.conv1d.weight.squeeze(1), self._slots)  # prev -> (s2, s3, x)
        conv[:, :, 0].copy_(conv[:, :, 1])               # HF's state -> (s1, s2, s3, x)
        conv[:, :, 1:].copy_(prev)
        q = y[:, :2048].view(b, 16, 128)
        k = y[:, 2048:4096].view(b, 16, 128)
        v = y[:, 4096:].view(b, 48, 128)
        o = gdn_step_raw(q, k, v, a, bb, m.A_log, m.dt_bias, rec, self._slots)  # rec updated in place
        cache.update_recurrent_state(rec, self.layer_idx)
        _count_tokens(cache, self.layer_idx, 1)
        o = m.norm(o.reshape(-1, 128), z.reshape(-1, 128)).reshape(b, 1, -1)
        self.fast_steps += 1
        return m.out_proj(o)

    def _verify_forward(self, h: torch.Tensor, cache) -> torch.Tensor:
        """(verify mode, ``qwen38_kernels.spec``) T drafted tokens after the cached state, a chain (1..16
        tokens) or, with ``_tree`` set (the parents, depth-first order, -1 = the cached state: a list and
        the same as a [1, T] int64 tensor on the device), a tree (1..64 nodes): ``conv_chain`` /
        ``conv_tree`` and ``gdn_chain_verify`` / ``gdn_tree_verify`` read HF's conv and recurrent states
        and write neither; a row is what one-token steps along its path would output, bit for bit.
        ``commit`` then leaves the state of the accepted tokens."""
        st = self._states(cache, h)
        if st is None:
            raise RuntimeError(f"GatedDeltaNetDecode (layer {self.layer_idx}): verify needs a prefilled HF cache "
                               "of the layout this knows (conv [B, C, 4], fp32 recurrent [B, 48, 128, 128])")
        b, t = h.shape[0], h.shape[1]
        rows, parents = self._tree if self._tree is not None else (None, None)
        most = 16 if parents is None else 64
        if not 1 <= t <= most:
            what = "chain" if parents is None else "tree"
            raise ValueError(f"GatedDeltaNetDecode (layer {self.layer_idx}): a {what} verify takes 1..{most} tokens, "
                             f"got {t}")
        conv, rec = st
        m = self.gdn
        x = m.in_proj_qkv(h)                             # [B, T, 10240]
        z = m.in_proj_z(h)                               # [B, T, 6144]
        bb, a = m.in_proj_b(h), m.in_proj_a(h)           # [B, T, 48]
        slots = self._slot_index(b, x.device)
        prev = conv[:, :, 1:].contiguous()               # [B, C, 3]: the conv ops' layout (a copy: read only)
        w = m.conv1d.weight.squeeze(1)
        y = conv_chain(x, prev, w, slots) if parents is None else conv_tree(x, prev, w, slots, parents)
        q = y[..., :2048].view(b, t, 16, 128)
        k = y[..., 2048:4096].view(b, t, 16, 128)
        v = y[..., 4096:].view(b, t, 48, 128)
        g, beta = gdn_gates(a, bb, m.A_log, m.dt_bias)   # gdn_step_raw's in-kernel gates, as tensors
        if self._deferred is not None:  # the last commit's replay, folded in: each state tile read and written once
            c_k, c_v, c_g, c_beta, c_acc, c_par, c_rec = self._deferred
            if c_rec is not rec:
                raise RuntimeError(f"GatedDeltaNetDecode (layer {self.layer_idx}): a deferred commit for another "
                                   "cache; call flush() before changing caches")
            o = gdn_commit_verify(c_k, c_v, c_g, c_beta, c_acc, c_par, q, k, v, g, beta, rec, slots, parents)
            self._deferred = None
        elif parents is None:
            o = gdn_chain_verify(q, k, v, g, beta, rec, slots)
        else:
            o = gdn_tree_verify(q, k, v, g, beta, rec, slots, parents)
        self._pending = (x, k, v, g, beta, conv, rec, slots, parents, rows, cache)
        self.verifies += 1
        o = m.norm(o.reshape(-1, 128), z.reshape(-1, 128)).reshape(b, t, -1)
        return m.out_proj(o)

    def flush(self) -> None:
        """Replays a commit left for the next verify (``fold_commits``) into the recurrent state now."""
        if self._deferred is not None:
            k, v, g, beta, acc, parents, rec = self._deferred
            self._deferred = None
            gdn_commit(k, v, g, beta, rec, self._slot_index(k.shape[0], k.device), acc, parents)

    @property
    def _cache(self):
        """(during a verify, until its commit or discard) the HF cache it read."""
        return None if self._pending is None else self._pending[-1]

    def discard(self) -> None:
        """(after a verify) forgets it: the cache keeps the state from before the verify."""
        self._pending = None

    def commit(self, accepted: int) -> None:
        """(after a verify) leaves in HF's cache the conv and recurrent states of the accepted tokens, bit
        for bit those one-token steps through them leave: ``gdn_commit`` replays them from the verify's
        own k, v, g and beta, and the conv state takes the last 4 of its inputs. A chain: the first
        ``accepted`` tokens (0: the state before the verify). A tree: the path from the root to node
        ``accepted`` (-1: none)."""
        if self._pending is None:
            raise RuntimeError(f"GatedDeltaNetDecode (layer {self.layer_idx}): commit without a verify")
        x, k, v, g, beta, conv, rec, slots, parents, tree_rows, cache = self._pending
        t = x.shape[1]
        lo = 0 if parents is None else -1
        if not lo <= accepted <= (t if parents is None else t - 1):
            raise ValueError(f"GatedDeltaNetDecode (layer {self.layer_idx}): accepted must be in "
                             f"{lo}..{t if parents is None else t - 1}, got {accepted}")
        if parents is None:
            rows = list(range(accepted))
        else:
            rows, r = [], accepted
            while r >= 0:
                rows.append(r)
                r = tree_rows[r]
            rows.reverse()
        self._pending = None
        if not rows:
            return
        acc = torch.full((x.shape[0],), accepted if parents is not None else len(rows), dtype=torch.int64,
                         device=x.device)
        if self.fold_commits:
            self._deferred = (k, v, g, beta, acc, parents, rec)
        else:
            gdn_commit(k, v, g, beta, rec, slots, acc, parents)
        n = len(rows)
        xs = x[:, :n] if parents is None else x[:, torch.tensor(rows, device=x.device)]  # the accepted inputs
        window = torch.cat([conv, xs.transpose(1, 2)], dim=-1)[:, :, n:n + conv.shape[-1]]
        conv.copy_(window)
        _count_tokens(cache, self.layer_idx, n)


def swap_gdn(model: torch.nn.Module, classes: tuple[str, ...] | None = None) -> int:
    """Wraps every submodule whose class name is in ``classes`` (default ``GDN_CLASSES``) in a
    ``GatedDeltaNetDecode`` (the module itself, its weights and anything swapped inside it are kept).
    A module of another geometry than the kernels' (16 / 48 heads of 128, conv width 4, silu, no conv
    bias) raises ``ValueError`` naming it before anything is wrapped. Returns how many were wrapped."""
    classes = GDN_CLASSES if classes is None else tuple(classes)
    todo = []
    for parent_name, parent in model.named_modules():
        for child_name, child in parent.named_children():
            if type(child).__name__ in classes:
                path = f"{parent_name}.{child_name}" if parent_name else child_name
                try:
                    todo.append((parent, child_name, GatedDeltaNetDecode(child)))
                except ValueError as e:
                    raise ValueError(f"swap_gdn: {path}: {e}") from None
    for parent, child_name, new in todo:
        setattr(parent, child_name, new)
    return len(todo)


# ---- attention ------------------------------------------------------------------------------------------
ATTN_IMPLEMENTATION = "qwen38"  # the name swap_attention registers with transformers' attention interfaces


def _visible_rows(op: str, mask: torch.Tensor | None, b: int, t: int, slots: int) -> torch.Tensor | None:
    """attn_decode's [B, T, T] row mask from HF's attention_mask over the cache ([B, 1, T, L] bool, True =
    attend, or additive float: 0 = attend), None for a causal one. Anything else (padding in the cache,
    a window, a bias) raises: attn_decode's rows see the whole committed prefix."""
    if mask is None:
        return None
    if mask.dim() != 4 or mask.shape[0] not in (1, b) or mask.shape[2] != t or mask.shape[3] < slots:
        raise ValueError(f"{op}: attention_mask must be [B, 1, T, L] with T = {t} rows and L = {slots} keys, "
                         f"got {list(mask.shape)}")
    m = mask[..., :slots]
    vis = m if m.dtype == torch.bool else m == 0
    if m.dtype != torch.bool and not bool((vis | (m <= torch.finfo(m.dtype).min)).all()):
        raise ValueError(f"{op}: an additive attention_mask must hold 0 (attend) or the dtype's minimum / -inf "
                         f"(masked) only")
    if not bool((vis == vis[:, :1]).all()):
        raise ValueError(f"{op}: attention_mask differs between heads; attn_decode takes one mask a sequence")
    vis = vis[:, 0].expand(b, t, slots)
    prefix = slots - t
    if not bool(vis[..., :prefix].all()):
        raise ValueError(f"{op}: attention_mask hides part of the cached prefix (padding or a window); "
                         f"attn_decode rows see the whole committed prefix")
    rows = vis[..., prefix:]
    causal = torch.ones(t, t, dtype=torch.bool, device=mask.device).tril()
    if bool((rows == causal).all()):
        return None
    return rows.contiguous()


def attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                      **kwargs) -> tuple[torch.Tensor, None]:
    """An HF transformers attention function (``AttentionInterface``) on ``attn_decode``: query [B, Hq, T,
    D], key / value [B, Hkv, L, D] (the cache with the T new keys at its end), ``attention_mask`` as
    ``sdpa``'s mask function makes it (None, or bool [B, 1, T, L]) or an additive [B, 1, T, L] one (a
    tree: ``spec.generate``). Returns ([B, T, Hq, D], None). Up to 64 rows go to attn_decode (decode,
    a verify: every row's bits those of its one-token call); more rows (a prefill) to HF's sdpa."""
    b, hq, t, d = query.shape
    if t > ATTN_MAX_ROWS or (dropout and module.training):
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                                      **kwargs)
    slots = key.shape[2]
    rows = _visible_rows("attention_forward", attention_mask, b, t, slots)
    kv_lens = torch.full((b,), slots, dtype=torch.int64, device=query.device)
    o = attn_decode(query.transpose(1, 2), key, value, kv_lens, rows, None, scale=scaling)
    return o, None


def swap_attention(model: torch.nn.Module) -> int:
    """Runs every attention layer of an HF transformers model through ``attention_forward``
    (``attn_decode`` for up to 64 query rows: one-token decode and the verifies; HF's sdpa for a
    prefill): registers it, with sdpa's mask function, under the name ``"qwen38"`` and sets the model's
    attention implementation to it. With the other swaps, every row of a verify then gets the bits of
    its one-token step, the attention layers included (``spec.generate``). Returns how many modules
    read the setting (modules with a ``config`` holding ``_attn_implementation``)."""
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
    except ImportError as e:  # pragma: no cover - transformers is not a dependency
        raise ImportError(f"swap_attention needs transformers with AttentionInterface (5.x): {e}") from None
    AttentionInterface.register(ATTN_IMPLEMENTATION, attention_forward)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ATTN_IMPLEMENTATION, sdpa_mask)
    configs = {id(m.config): m.config for m in model.modules()
               if hasattr(getattr(m, "config", None), "_attn_implementation")}
    for cfg in configs.values():
        cfg._attn_implementation = ATTN_IMPLEMENTATION
    return sum(1 for m in model.modules() if id(getattr(m, "config", None)) in configs)


# ---- the output head ------------------------------------------------------------------------------------
class OutputHead(torch.nn.Module):
    """``lm_head`` as ``head_logits``: fp32 logits ``x @ W.T`` of a 16-bit head weight (the products exact,
    an fp32 sum in an order fixed by K, every row's bits independent of the row count), where
    ``nn.Linear`` would round the logits to bf16. Keeps the original weight Parameter (no copy)."""

    def __init__(self, weight: torch.nn.Parameter | torch.Tensor):
        super().__init__()
        self.weight = weight if isinstance(weight, torch.nn.Parameter) else torch.nn.Parameter(weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return head_logits(x, self.weight)

    def extra_repr(self) -> str:
        return f"vocab={self.weight.shape[0]}, hidden={self.weight.shape[1]}, fp32 logits"


def swap_head(model: torch.nn.Module, name: str = "lm_head", state_dict: Mapping[str, torch.Tensor] | None = None,
              fmt: str = "modelopt") -> torch.nn.Module:
    """Replaces the ``nn.Linear`` at attribute path ``name`` (default ``lm_head``) by an ``OutputHead``
    sharing its weight (fp32 logits of the 16-bit weight), or, where ``state_dict`` holds an NVFP4 weight
    for that prefix in ``fmt`` (as for ``swap_linears``), by an ``NVFP4Linear`` with fp32 output (an
    NVFP4 head: 0.5625 bytes a weight instead of 2). Returns the new module. The Linear must have no
    bias, a bf16 / fp16 weight and in_features a multiple of 16 (``ValueError`` naming it otherwise)."""
    parent_name, _, attr = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    lin = getattr(parent, attr, None)
    if type(lin) is not torch.nn.Linear:
        raise ValueError(f"swap_head: {name} must be a torch.nn.Linear, got {type(lin).__name__}")
    if lin.bias is not None:
        raise ValueError(f"swap_head: {name} has a bias; head_logits has none")
    if state_dict is not None:
        _check_fmt("swap_head", fmt)
        w = _load_for("swap_head", lin, name, state_dict, fmt, name)
        if w is not None:
            head = NVFP4Linear(w, out_dtype=torch.float32)
            setattr(parent, attr, head)
            return head
    if lin.weight.dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"swap_head: {name}.weight must be bfloat16 or float16, got {lin.weight.dtype}")
    if lin.in_features % 16:
        raise ValueError(f"swap_head: {name} has in_features = {lin.in_features}, not a multiple of 16")
    head = OutputHead(lin.weight)
    setattr(parent, attr, head)
    return head
