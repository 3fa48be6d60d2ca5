"""The weight shapes one Qwen3.8-27B decode step reads (MODEL.md, fused and unfused), largest first:
the keys of the tile tables and the shapes of the benchmarks."""
from __future__ import annotations

from typing import NamedTuple


class WeightShape(NamedTuple):
    n: int
    k: int
    label: str


WEIGHT_SHAPES = (
    WeightShape(34816, 5120, "gate+up"),
    WeightShape(17408, 5120, "gate or up"),
    WeightShape(5120, 17408, "down"),
    WeightShape(16384, 5120, "gdn qkv+z"),
    WeightShape(14336, 5120, "attn q+k+v"),
    WeightShape(12288, 5120, "attn q(+gate)"),
    WeightShape(10240, 5120, "gdn qkv"),
    WeightShape(6144, 5120, "gdn z"),
    WeightShape(5120, 6144, "o_proj/out_proj"),
    WeightShape(1024, 5120, "attn k or v"),
    WeightShape(96, 5120, "gdn b+a"),
    WeightShape(48, 5120, "gdn b or a"),
)
