"""Checkpoint weight layouts, pure PyTorch: NVFP4 (group 16 along K) as ModelOpt and
compressed-tensors store it, its exact dequantization, the reference quantizer and the loaders.

One NVFP4 weight ``W [N, K]`` is three tensors (MODEL.md, "Weight formats as stored in checkpoints")::

    packed        uint8          [N, K/2]   two E2M1 codes per byte
    scale         float8_e4m3fn  [N, K/16]  one block scale per 16 consecutive k, row-major, NOT swizzled
    global_scale  float32        []         a MULTIPLIER (ModelOpt's weight_scale_2)

    W[n, k] = e2m1(code[n, k]) * fp32(scale[n, k // 16]) * global_scale

Byte layout of ``packed[n, i]`` (element 2i in the LOW nibble, element 2i + 1 in the HIGH nibble)::

    bit   7    6 5 4     3    2 1 0
        +----+-------+  +----+-------+
        | s  |  idx  |  | s  |  idx  |     s: sign, idx: index into {0, 0.5, 1, 1.5, 2, 3, 4, 6}
        +----+-------+  +----+-------+
         element 2i+1     element 2i

so code 0x8 is -0. ``E2M1_VALUES[code]`` is the value of a code.

Every product ``e2m1 * fp32(e4m3)`` is exact in fp32 (and in bf16/fp16: at most 2 + 4 significant
bits, exponent range well inside both), so dequantization rounds only where the global scale is
multiplied in.

compressed-tensors stores ``weight_global_scale = 1 / weight_scale_2`` (a DIVISOR); its loader
converts it to the multiplier this module and the kernels use (see ``load_nvfp4_compressed_tensors``).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Mapping, NamedTuple, Sequence

import torch

__all__ = [
    "E2M1_VALUES", "E2M1_MAX", "E4M3_MAX", "NVFP4_BLOCK", "NVFP4_K_ALIGN", "NVFP4_MIN_BLOCK_SCALE",
    "NVFP4Weight", "FusedNVFP4Weight",
    "dequantize_nvfp4", "quantize_nvfp4", "nvfp4_global_scale", "unpack_e2m1",
    "load_nvfp4_modelopt", "load_nvfp4_compressed_tensors", "fuse_nvfp4",
]

NVFP4_BLOCK = 16          # k elements per block scale
NVFP4_K_ALIGN = 32        # the kernels read K in steps of 32 (two blocks, 16 bytes of codes)
E2M1_MAX = 6.0            # largest E2M1 magnitude
E4M3_MAX = 448.0          # largest finite float8_e4m3fn
NVFP4_MIN_BLOCK_SCALE = 2.0 ** -9  # smallest positive e4m3 (a subnormal): block scales clamp to it

# The value of each 4-bit code: index = code, bit 3 the sign (code 8 is -0.0).
_E2M1_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
E2M1_VALUES = torch.tensor(list(_E2M1_MAGNITUDES) + [-v for v in _E2M1_MAGNITUDES], dtype=torch.float32)
# Midpoints between consecutive magnitudes: a magnitude past j of them rounds to index j (ties: below).
_E2M1_MIDPOINTS = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], dtype=torch.float32)


def _shape(t: torch.Tensor) -> str:
    return str(list(t.shape))


# ---- the weight ----------------------------------------------------------------------------------

_FIELDS = ("packed", "scale", "global_scale")


@dataclasses.dataclass(frozen=True, eq=False)
class NVFP4Weight:
    """One NVFP4 weight [N, K]: ``packed`` uint8 [N, K/2], ``scale`` float8_e4m3fn [N, K/16],
    ``global_scale`` fp32 0-d (a multiplier). See the module docstring for the bit layout.

    Construction does not check anything (so views and meta tensors can be assembled freely);
    ``validate()`` does, and every function of this module calls it on the weights it receives.
    """
    packed: torch.Tensor
    scale: torch.Tensor
    global_scale: torch.Tensor

    @property
    def N(self) -> int:
        return int(self.packed.shape[0])

    @property
    def K(self) -> int:
        return 2 * int(self.packed.shape[1])

    @property
    def device(self) -> torch.device:
        return self.packed.device

    def validate(self, names: Mapping[str, str] | None = None) -> "NVFP4Weight":
        """Raise ``ValueError`` naming the field (or, with ``names``, the checkpoint key standing
        for it) and the shapes when this is not a well-formed NVFP4 weight: tensors, dtypes, 2-D
        ``packed`` with K = 2 * packed.shape[1] a positive multiple of 32 (the kernels need it),
        ``scale`` of shape [N, K/16], ``global_scale`` 0-d, one device, contiguous tensors.
        Returns ``self``."""
        label = {f: f for f in _FIELDS}
        if names:
            label.update({f: f"{names[f]} ({f})" for f in names})

        def fail(field: str, msg: str):
            raise ValueError(f"NVFP4Weight: {label[field]} {msg}")

        want = {"packed": torch.uint8, "scale": torch.float8_e4m3fn, "global_scale": torch.float32}
        for f in _FIELDS:
            t = getattr(self, f)
            if not isinstance(t, torch.Tensor):
                fail(f, f"must be a Tensor, got {type(t).__name__}")
            if t.dtype != want[f]:
                fail(f, f"must be {want[f]}, got {t.dtype} (shape {_shape(t)})")
        p, s, g = self.packed, self.scale, self.global_scale
        if p.dim() != 2:
            fail("packed", f"must be 2-D [N, K/2], got shape {_shape(p)}")
        n, k = self.N, self.K
        if k == 0 or k % NVFP4_K_ALIGN:
            fail("packed", f"must have K = 2 * packed.shape[1] a positive multiple of {NVFP4_K_ALIGN}, "
                           f"got K = {k} (packed shape {_shape(p)})")
        if s.dim() != 2 or tuple(s.shape) != (n, k // NVFP4_BLOCK):
            fail("scale", f"must have shape [N, K/16] = {[n, k // NVFP4_BLOCK]}, got {_shape(s)} "
                          f"(packed shape {_shape(p)}, K = {k})")
        if g.dim() != 0:
            fail("global_scale", f"must be a 0-d tensor, got shape {_shape(g)}")
        for f in ("scale", "global_scale"):
            t = getattr(self, f)
            if t.device != p.device:
                fail(f, f"is on {t.device} but packed is on {p.device}")
        for f in ("packed", "scale"):
            t = getattr(self, f)
            if not t.is_contiguous():
                fail(f, f"must be contiguous (row-major), got strides {list(t.stride())} for shape "
                        f"{_shape(t)}")
        return self


class FusedNVFP4Weight(NamedTuple):
    """Shards concatenated along N (``fuse_nvfp4``): ``packed`` [sum N_i, K/2], ``scale``
    [sum N_i, K/16], and per shard ``(row_start, row_end, global_scale)`` (rows
    [row_start, row_end) of the fused weight carry that shard's global scale)."""
    packed: torch.Tensor
    scale: torch.Tensor
    shards: list

    @property
    def N(self) -> int:
        return int(self.packed.shape[0])

    @property
    def K(self) -> int:
        return 2 * int(self.packed.shape[1])

    def shard(self, i: int) -> NVFP4Weight:
        """Shard ``i`` as an ``NVFP4Weight`` (views of the fused tensors, no copy)."""
        r0, r1, g = self.shards[i]
        return NVFP4Weight(self.packed[r0:r1], self.scale[r0:r1], g)


# ---- decode --------------------------------------------------------------------------------------


_TABLES: dict[torch.device, torch.Tensor] = {}


def _e2m1_table(device: torch.device) -> torch.Tensor:
    """E2M1_VALUES on ``device``, copied there once (no host-to-device copy per call: graph safe)."""
    t = _TABLES.get(device)
    if t is None:
        t = _TABLES[device] = E2M1_VALUES.to(device)
    return t


def unpack_e2m1(packed: torch.Tensor) -> torch.Tensor:
    """uint8 [..., K/2] -> the E2M1 values float32 [..., K]: element 2i from the low nibble of byte i,
    element 2i + 1 from its high nibble."""
    if packed.dtype != torch.uint8:
        raise ValueError(f"unpack_e2m1: packed must be uint8, got {packed.dtype}")
    table = _e2m1_table(packed.device)
    lo = table[(packed & 0x0F).long()]
    hi = table[(packed >> 4).long()]
    return torch.stack((lo, hi), dim=-1).flatten(-2)


def _block_scales(scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """float8_e4m3fn [N, K/16] -> ``dtype`` [N, K] (each scale repeated over its 16 k)."""
    return scale.to(dtype).repeat_interleave(NVFP4_BLOCK, dim=-1)


def dequantize_nvfp4(w: NVFP4Weight, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``W [N, K]`` in ``dtype``: ``W = e2m1 * fp32(scale) * global_scale``.

    ``e2m1 * scale`` is exact in fp32; the global-scale multiply is the one rounding, done in fp32,
    and the result is then cast to ``dtype`` (a second rounding for bf16/fp16, as an engine that
    dequantizes to fp32 and casts would do). ``dtype=torch.float64`` multiplies in float64 instead,
    which is exact: the float64 evaluation the tests compare against.
    """
    w.validate()
    if not dtype.is_floating_point or dtype.itemsize < 2:
        raise ValueError(f"dequantize_nvfp4: dtype must be float64, float32, bfloat16 or float16, got {dtype}")
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    es = unpack_e2m1(w.packed).to(acc) * _block_scales(w.scale, acc)  # exact
    return (es * w.global_scale.to(acc)).to(dtype)


# ---- the reference quantizer ---------------------------------------------------------------------


def _round_e2m1(v: torch.Tensor) -> torch.Tensor:
    """fp32 -> 4-bit codes (uint8): nearest E2M1 magnitude, ties to the even index (0.25 -> 0,
    0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4), magnitudes above 6 saturate to 6,
    sign bit = the sign bit of ``v`` (so -0.0 and negatives that round to 0 give 0x8, i.e. -0)."""
    mids = _E2M1_MIDPOINTS.to(v.device)
    a = v.abs()
    below = torch.bucketize(a, mids, right=False)  # midpoints < a: at a tie, the lower index
    above = torch.bucketize(a, mids, right=True)   # midpoints <= a: at a tie, the upper index
    idx = torch.where(below % 2 == 0, below, above)  # equal unless a is a tie: take the even one
    return (idx | (torch.signbit(v).to(idx.dtype) << 3)).to(torch.uint8)


def _as_global_scale(global_scale, device) -> torch.Tensor:
    if isinstance(global_scale, torch.Tensor):
        if global_scale.numel() != 1:
            raise ValueError(f"quantize_nvfp4: global_scale must have one element, got shape "
                             f"{_shape(global_scale)}")
        g = global_scale.detach().reshape(()).to(device=device, dtype=torch.float32)
    else:
        g = torch.tensor(float(global_scale), dtype=torch.float32, device=device)
    gv = float(g)
    if not (math.isfinite(gv) and gv > 0):
        raise ValueError(f"quantize_nvfp4: global_scale must be finite and > 0, got {gv!r}")
    return g


def nvfp4_global_scale(*weights: torch.Tensor) -> torch.Tensor:
    """``quantize_nvfp4``'s default global scale for weights quantized with one shared scale (a fused
    layer's shards, as ModelOpt exports them): ``amax(|W|)`` over all of them ``/ (6 * 448)``, 1.0
    where that is 0 (all-zero or empty weights). fp32, 0-d, on the first weight's device."""
    x = [w.detach().to(torch.float32) for w in weights]
    amax = torch.stack([w.abs().amax() if w.numel() else torch.zeros((), device=w.device) for w in x]).amax()
    g = amax / (E2M1_MAX * E4M3_MAX)
    return torch.where(g > 0, g, torch.ones_like(g)).to(torch.float32)


def quantize_nvfp4(weight: torch.Tensor, global_scale=None) -> NVFP4Weight:
    """The reference NVFP4 quantizer (ModelOpt's rules), ``weight`` bf16/fp16/fp32 [N, K] with K a
    positive multiple of 32. All arithmetic in fp32, in this order:

    1. ``global_scale`` (a multiplier): by default ``amax(|W|) / (6 * 448)``, so that the largest
       block scale is about 448 = max e4m3 (an all-zero weight gets 1.0). A given one (float or
       one-element tensor) must be finite and > 0.
    2. Block scale per 16 consecutive k: ``s = (block_amax / 6) / global_scale``, clamped to
       [2^-9, 448] and rounded to float8_e4m3fn with round-to-nearest-even. The lower clamp
       (MODEL.md: block scales clamp >= 2^-9, the smallest positive e4m3) keeps all-zero and tiny
       blocks from a zero scale; applying it before or after the rounding gives the same e4m3
       value. The upper clamp saturates (it only acts when a given global scale is too small).
    3. Element: ``v = x / (fp32(s) * global_scale)`` (the product rounded to fp32, then the
       division), then the nearest E2M1 value with ties to even (the value whose 3-bit index is
       even: 0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4); magnitudes
       above 6 saturate to 6 (the block maximum can land up to 6.375 when its scale rounded down).
    4. Sign: the code's sign bit is the sign bit of ``x``, so -0.0, and negative values that
       round to zero, encode as 0x8 (-0); +0 as 0x0. With this rule ``quantize_nvfp4(dequantize_nvfp4(q),
       q.global_scale)`` gives back every code of ``q`` bit for bit, -0 included, when every block
       of ``q`` holds a +-6 (or is all zero with scale 2^-9).

    Non-finite weights raise ``ValueError``. Returns contiguous tensors on ``weight``'s device.
    """
    if not isinstance(weight, torch.Tensor):
        raise ValueError(f"quantize_nvfp4: weight must be a Tensor, got {type(weight).__name__}")
    if weight.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"quantize_nvfp4: weight must be bfloat16, float16 or float32, got {weight.dtype}")
    if weight.dim() != 2:
        raise ValueError(f"quantize_nvfp4: weight must be 2-D [N, K], got shape {_shape(weight)}")
    n, k = weight.shape
    if k == 0 or k % NVFP4_K_ALIGN:
        raise ValueError(f"quantize_nvfp4: weight's K must be a positive multiple of {NVFP4_K_ALIGN}, "
                         f"got shape {_shape(weight)}")
    x = weight.detach().to(torch.float32)
    if not bool(torch.isfinite(x).all()):
        raise ValueError("quantize_nvfp4: weight holds NaN or Inf")
    if global_scale is None:
        g = nvfp4_global_scale(x)
    else:
        g = _as_global_scale(global_scale, x.device)
    blocks = x.view(n, k // NVFP4_BLOCK, NVFP4_BLOCK)
    bmax = blocks.abs().amax(dim=-1) if x.numel() else blocks.new_zeros(n, k // NVFP4_BLOCK)
    s = ((bmax / E2M1_MAX) / g).clamp(NVFP4_MIN_BLOCK_SCALE, E4M3_MAX).to(torch.float8_e4m3fn)
    denom = s.to(torch.float32) * g                       # [N, K/16], rounded to fp32
    v = blocks / denom.unsqueeze(-1)
    codes = _round_e2m1(v).view(n, k // 2, 2)
    packed = (codes[..., 0] | (codes[..., 1] << 4)).contiguous()
    return NVFP4Weight(packed, s.contiguous(), g.reshape(()).contiguous()).validate()


# ---- loaders -------------------------------------------------------------------------------------


def _get(state_dict: Mapping[str, torch.Tensor], prefix: str, suffix: str, fmt: str) -> torch.Tensor:
    key = f"{prefix}.{suffix}"
    if key not in state_dict:
        near = sorted(k for k in state_dict if k.startswith(prefix + "."))
        raise KeyError(f"{fmt} NVFP4 weight at prefix {prefix!r}: missing key {key!r} (keys under the "
                       f"prefix: {near})")
    t = state_dict[key]
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{fmt} NVFP4 weight: {key} must be a Tensor, got {type(t).__name__}")
    return t


def _scalar_view(t: torch.Tensor, key: str) -> torch.Tensor:
    if t.dtype != torch.float32:
        raise ValueError(f"NVFP4Weight: {key} must be torch.float32, got {t.dtype} (shape {_shape(t)})")
    if t.numel() != 1 or t.dim() > 1:
        raise ValueError(f"NVFP4Weight: {key} must hold one element (shape [] or [1]), got shape {_shape(t)}")
    return t.view(())


def load_nvfp4_modelopt(state_dict: Mapping[str, torch.Tensor], prefix: str) -> NVFP4Weight:
    """The ModelOpt layout: ``{prefix}.weight`` uint8 [N, K/2], ``{prefix}.weight_scale``
    float8_e4m3fn [N, K/16], ``{prefix}.weight_scale_2`` fp32 of shape [] or [1], a multiplier
    (``W = e2m1 * fp32(weight_scale) * weight_scale_2``).

    No copy: ``packed`` and ``scale`` are the state dict's tensors, ``global_scale`` a 0-d view of
    its scalar. A missing key raises ``KeyError`` naming it and the prefix; a wrong dtype, shape,
    device or layout raises ``ValueError`` naming the key.
    """
    keys = {"packed": f"{prefix}.weight", "scale": f"{prefix}.weight_scale",
            "global_scale": f"{prefix}.weight_scale_2"}
    p = _get(state_dict, prefix, "weight", "ModelOpt")
    s = _get(state_dict, prefix, "weight_scale", "ModelOpt")
    g = _scalar_view(_get(state_dict, prefix, "weight_scale_2", "ModelOpt"), keys["global_scale"])
    return NVFP4Weight(p, s, g).validate(keys)


def load_nvfp4_compressed_tensors(state_dict: Mapping[str, torch.Tensor], prefix: str) -> NVFP4Weight:
    """The compressed-tensors ``nvfp4-pack-quantized`` layout: ``{prefix}.weight_packed`` uint8
    [N, K/2], ``{prefix}.weight_scale`` float8_e4m3fn [N, K/16], ``{prefix}.weight_global_scale``
    fp32 of shape [] or [1] = 1 / weight_scale_2, a DIVISOR
    (``W = e2m1 * fp32(weight_scale) / weight_global_scale``).

    The returned ``global_scale`` is the multiplier ``1 / weight_global_scale`` computed in fp32
    (a new 0-d tensor; ``packed`` and ``scale`` are the state dict's tensors, not copies). That
    reciprocal is rounded: it may differ by 1 ulp from the ModelOpt ``weight_scale_2`` the
    checkpoint was made from, and from dividing by ``weight_global_scale``, so the dequantized W
    (and the kernels' output, which multiply by this converted scale) may differ from a
    divide-based evaluation by that rounding (about 2^-24 relative).
    """
    keys = {"packed": f"{prefix}.weight_packed", "scale": f"{prefix}.weight_scale",
            "global_scale": f"{prefix}.weight_global_scale"}
    p = _get(state_dict, prefix, "weight_packed", "compressed-tensors")
    s = _get(state_dict, prefix, "weight_scale", "compressed-tensors")
    d = _scalar_view(_get(state_dict, prefix, "weight_global_scale", "compressed-tensors"),
                     keys["global_scale"])
    g = torch.reciprocal(d)  # fp32 in, fp32 out: one rounding
    return NVFP4Weight(p, s, g).validate(keys)


def fuse_nvfp4(weights: Sequence[NVFP4Weight]) -> FusedNVFP4Weight:
    """Concatenate NVFP4 shards along N (e.g. gate_proj + up_proj -> gate_up). This COPIES
    ``packed`` and ``scale`` (``torch.cat``). Shards may carry different global scales, so each
    keeps its own: ``shards[i] = (row_start, row_end, global_scale_i)``, rows [row_start, row_end)
    of the fused weight. All shards need the same K, device and valid layouts."""
    ws = list(weights)
    if not ws:
        raise ValueError("fuse_nvfp4: weights must hold at least one NVFP4Weight")
    for i, w in enumerate(ws):
        if not isinstance(w, NVFP4Weight):
            raise ValueError(f"fuse_nvfp4: weights[{i}] must be an NVFP4Weight, got {type(w).__name__}")
        w.validate()
        if w.K != ws[0].K:
            raise ValueError(f"fuse_nvfp4: weights[{i}] has K = {w.K} but weights[0] has K = {ws[0].K}")
        if w.device != ws[0].device:
            raise ValueError(f"fuse_nvfp4: weights[{i}] is on {w.device} but weights[0] is on {ws[0].device}")
    shards, r = [], 0
    for w in ws:
        shards.append((r, r + w.N, w.global_scale))
        r += w.N
    packed = torch.cat([w.packed for w in ws], dim=0)
    scale = torch.cat([w.scale for w in ws], dim=0)
    return FusedNVFP4Weight(packed, scale, shards)


# ---- block FP8 (Qwen *-FP8 checkpoints): qwen38_kernels/formats_fp8.py, re-exported here ----------
from .formats_fp8 import (FP8BlockWeight, dequantize_fp8_block, load_fp8_block,  # noqa: E402,F401
                          quantize_fp8_block)
