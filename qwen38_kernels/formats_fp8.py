"""Block FP8 checkpoint layout (Qwen ``*-FP8``), pure PyTorch: the weight, its exact dequantization,
the reference block quantizer and the loader.

One block-FP8 weight ``W [N, K]`` is two tensors (MODEL.md, "Weight formats as stored in checkpoints";
``weight_block_size [128, 128]``, activations stay 16-bit)::

    weight            float8_e4m3fn  [N, K]                            row-major
    weight_scale_inv  float32        [ceil(N/128), ceil(K/128)]        one scale per 128 x 128 tile

    W[n, k] = fp32(weight[n, k]) * weight_scale_inv[n // 128, k // 128]

Despite its name ``weight_scale_inv`` is a MULTIPLIER (the checkpoint's own name is kept so that a
state dict key and the field read the same). N and K need not be multiples of 128: the last row and
column of tiles are partial (N = 48 gives one tile row of 48 rows). K must be a positive multiple of
16 (the kernels read the fp8 codes in 16-byte vectors).

The scale grid, for N = 300, K = 176 (3 x 2 tiles, the last ones partial)::

          k: 0 ........ 127 | 128 .. 175
    n   0 +-----------------+-----------+
        : |    s[0, 0]      |  s[0, 1]  |
      127 +-----------------+-----------+
      128 |    s[1, 0]      |  s[1, 1]  |
      255 +-----------------+-----------+
      256 |    s[2, 0]      |  s[2, 1]  |   rows 256..299
          +-----------------+-----------+

Every e4m3 value (4 significant bits, exponents 2^-9 .. 2^8) is exact in bf16, fp16 and fp32, so the
decode ``fp32(weight)`` never rounds; dequantization rounds only where the fp32 scale multiplies in.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping

import torch

__all__ = [
    "FP8_BLOCK", "FP8_K_ALIGN", "E4M3_MAX", "FP8_ZERO_BLOCK_SCALE",
    "FP8BlockWeight", "scale_grid", "dequantize_fp8_block", "quantize_fp8_block", "load_fp8_block",
]

FP8_BLOCK = 128            # rows and columns per scale tile (weight_block_size [128, 128])
FP8_K_ALIGN = 16           # the kernels read K in 16-byte vectors of e4m3 codes
E4M3_MAX = 448.0           # largest finite float8_e4m3fn (0x7E); 0x7F is NaN, there is no Inf
FP8_ZERO_BLOCK_SCALE = 1.0  # the quantizer's scale for an all-zero tile (see quantize_fp8_block)

_FIELDS = ("weight", "weight_scale_inv")


def _shape(t: torch.Tensor) -> str:
    return str(list(t.shape))


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def scale_grid(n: int, k: int) -> tuple[int, int]:
    """``(ceil(N/128), ceil(K/128))``: the shape of ``weight_scale_inv`` for a weight [N, K]."""
    return _cdiv(n, FP8_BLOCK), _cdiv(k, FP8_BLOCK)


# ---- the weight ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class FP8BlockWeight:
    """One block-FP8 weight [N, K]: ``weight`` float8_e4m3fn [N, K], ``weight_scale_inv`` fp32
    [ceil(N/128), ceil(K/128)] (a multiplier). See the module docstring for the layout.

    Construction does not check anything (views and meta tensors can be assembled freely);
    ``validate()`` does, and every function of this module calls it on the weights it receives.
    """
    weight: torch.Tensor
    weight_scale_inv: torch.Tensor

    @property
    def N(self) -> int:
        return int(self.weight.shape[0])

    @property
    def K(self) -> int:
        return int(self.weight.shape[1])

    @property
    def device(self) -> torch.device:
        return self.weight.device

    def validate(self, names: Mapping[str, str] | None = None) -> "FP8BlockWeight":
        """Raise ``ValueError`` naming the field (or, with ``names``, the checkpoint key standing for
        it) and the shapes when this is not a well-formed block-FP8 weight: tensors, dtypes, 2-D
        ``weight`` with K a positive multiple of 16 (the kernels need it; N and K need not be
        multiples of 128), ``weight_scale_inv`` of shape [ceil(N/128), ceil(K/128)], one device,
        contiguous tensors. Returns ``self``."""
        label = {f: f for f in _FIELDS}
        if names:
            label.update({f: f"{names[f]} ({f})" for f in names})

        def fail(field: str, msg: str):
            raise ValueError(f"FP8BlockWeight: {label[field]} {msg}")

        want = {"weight": torch.float8_e4m3fn, "weight_scale_inv": torch.float32}
        for f in _FIELDS:
            t = getattr(self, f)
            if not isinstance(t, torch.Tensor):
                fail(f, f"must be a Tensor, got {type(t).__name__}")
            if t.dtype != want[f]:
                fail(f, f"must be {want[f]}, got {t.dtype} (shape {_shape(t)})")
        w, s = self.weight, self.weight_scale_inv
        if w.dim() != 2:
            fail("weight", f"must be 2-D [N, K], got shape {_shape(w)}")
        n, k = self.N, self.K
        if k == 0 or k % FP8_K_ALIGN:
            fail("weight", f"must have K = weight.shape[1] a positive multiple of {FP8_K_ALIGN}, got "
                           f"K = {k} (weight shape {_shape(w)})")
        grid = scale_grid(n, k)
        if s.dim() != 2 or tuple(s.shape) != grid:
            fail("weight_scale_inv", f"must have shape [ceil(N/128), ceil(K/128)] = {list(grid)}, got "
                                     f"{_shape(s)} (weight shape {_shape(w)})")
        if s.device != w.device:
            fail("weight_scale_inv", f"is on {s.device} but weight is on {w.device}")
        for f in _FIELDS:
            t = getattr(self, f)
            if not t.is_contiguous():
                fail(f, f"must be contiguous (row-major), got strides {list(t.stride())} for shape "
                        f"{_shape(t)}")
        return self


# ---- dequantize ----------------------------------------------------------------------------------


def _expand_scales(scale: torch.Tensor, n: int, k: int, dtype: torch.dtype) -> torch.Tensor:
    """[ceil(N/128), ceil(K/128)] -> ``dtype`` [N, K]: each tile's scale over its (partial) tile."""
    s = scale.to(dtype)
    return s.repeat_interleave(FP8_BLOCK, dim=0)[:n].repeat_interleave(FP8_BLOCK, dim=1)[:, :k]


def dequantize_fp8_block(w: FP8BlockWeight, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``W [N, K]`` in ``dtype``: ``W[n, k] = fp32(weight[n, k]) * weight_scale_inv[n//128, k//128]``.

    The decode is exact; the scale multiply is the one rounding, done in fp32, and the result is then
    cast to ``dtype`` (a second rounding for bf16/fp16, as an engine that dequantizes to fp32 and
    casts would do). ``dtype=torch.float64`` multiplies in float64 instead, which is exact: the
    float64 evaluation the tests compare against. NaN codes (0x7F, 0xFF) decode to NaN.
    """
    w.validate()
    if not isinstance(dtype, torch.dtype) or dtype not in (torch.float64, torch.float32, torch.bfloat16,
                                                            torch.float16):
        raise ValueError(f"dequantize_fp8_block: dtype must be float64, float32, bfloat16 or float16, "
                         f"got {dtype}")
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    return (w.weight.to(acc) * _expand_scales(w.weight_scale_inv, w.N, w.K, acc)).to(dtype)


# ---- the reference quantizer ---------------------------------------------------------------------


def _to_e4m3_saturating(v: torch.Tensor) -> torch.Tensor:
    """fp32 -> float8_e4m3fn, round to nearest with ties to the even code, magnitudes beyond 448
    saturating to +-448 (the clamp runs first: a plain cast would turn them into NaN). The sign of
    the result is the sign of ``v``: -0.0 and negatives that round to zero give 0x80 (-0)."""
    return v.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def quantize_fp8_block(weight: torch.Tensor) -> FP8BlockWeight:
    """The reference block-FP8 quantizer, ``weight`` bf16/fp16/fp32 [N, K] (K a positive multiple of
    16, N >= 1; neither needs to be a multiple of 128). All arithmetic in fp32, in this order:

    1. Per 128 x 128 tile (partial tiles at the edges hold only their real elements):
       ``scale = amax(|tile|) / 448`` (an fp32 division, one rounding), so the tile's largest
       magnitude maps to about 448 = the largest e4m3.
       An all-zero tile (zeros of either sign) gets ``scale = 1.0`` (FP8_ZERO_BLOCK_SCALE): amax/448
       would be 0 and every element 0/0 = NaN; 1.0 keeps every code an exact zero, dequantizes to
       exact zeros, is a normal fp32 number (no subnormal scale in any kernel) and survives the
       round trip below.
    2. Element: ``v = x / scale`` (fp32 division), then the nearest e4m3 value with ties to the even
       code (round-to-nearest-even of the 3-bit mantissa, subnormals included), magnitudes above 448
       saturating to 448 (v can exceed 448 by an fp32 rounding or two only, but saturation is the rule
       for any v). The sign bit is the sign bit of ``x``: -0.0, and negatives that round to zero,
       encode as 0x80 (-0).

    With these rules ``quantize_fp8_block(dequantize_fp8_block(q))`` gives back ``q`` bit for bit
    (codes and scales, -0 included) when every tile of ``q`` holds a +-448 code and every scale has
    at most 20 significant bits (then ``448 * scale`` and every ``code * scale`` are exact in
    fp32), or the tile is all zero with scale 1.0.

    Non-finite weights raise ``ValueError``. Returns contiguous tensors on ``weight``'s device.
    """
    if not isinstance(weight, torch.Tensor):
        raise ValueError(f"quantize_fp8_block: weight must be a Tensor, got {type(weight).__name__}")
    if weight.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"quantize_fp8_block: weight must be bfloat16, float16 or float32, got "
                         f"{weight.dtype} (shape {_shape(weight)})")
    if weight.dim() != 2:
        raise ValueError(f"quantize_fp8_block: weight must be 2-D [N, K], got shape {_shape(weight)}")
    n, k = int(weight.shape[0]), int(weight.shape[1])
    if n == 0 or k == 0 or k % FP8_K_ALIGN:
        raise ValueError(f"quantize_fp8_block: weight must have N >= 1 and K a positive multiple of "
                         f"{FP8_K_ALIGN}, got shape {_shape(weight)}")
    x = weight.detach().to(torch.float32)
    if not bool(torch.isfinite(x).all()):
        raise ValueError("quantize_fp8_block: weight holds NaN or Inf")
    gn, gk = scale_grid(n, k)
    # zero padding to whole tiles leaves every tile's amax unchanged
    padded = torch.nn.functional.pad(x.abs(), (0, gk * FP8_BLOCK - k, 0, gn * FP8_BLOCK - n))
    amax = padded.view(gn, FP8_BLOCK, gk, FP8_BLOCK).amax(dim=(1, 3))
    scale = torch.where(amax > 0, amax / E4M3_MAX, torch.full_like(amax, FP8_ZERO_BLOCK_SCALE))
    v = x / _expand_scales(scale, n, k, torch.float32)
    q = _to_e4m3_saturating(v)
    return FP8BlockWeight(q.contiguous(), scale.contiguous()).validate()


# ---- loader --------------------------------------------------------------------------------------


def load_fp8_block(state_dict: Mapping[str, torch.Tensor], prefix: str) -> FP8BlockWeight:
    """The Qwen ``*-FP8`` layout: ``{prefix}.weight`` float8_e4m3fn [N, K] and
    ``{prefix}.weight_scale_inv`` fp32 [ceil(N/128), ceil(K/128)], a multiplier. Other keys under
    the prefix (e.g. ``bias``) are ignored.

    No copy: the returned fields are the state dict's tensors. A missing key raises ``KeyError``
    naming it and the prefix; a wrong dtype, shape, device or layout raises ``ValueError`` naming the
    key.
    """
    keys = {f: f"{prefix}.{f}" for f in _FIELDS}
    got = {}
    for f, key in keys.items():
        if key not in state_dict:
            near = sorted(k for k in state_dict if k.startswith(prefix + "."))
            raise KeyError(f"block-FP8 weight at prefix {prefix!r}: missing key {key!r} (keys under the "
                           f"prefix: {near})")
        t = state_dict[key]
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"FP8BlockWeight: {key} must be a Tensor, got {type(t).__name__}")
        got[f] = t
    return FP8BlockWeight(got["weight"], got["weight_scale_inv"]).validate(keys)

