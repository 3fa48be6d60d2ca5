"""Programmatic dependent launch on and off (QWEN38_PDL), side by side (a lab): us per call of the
weight readers at the decode / verify row counts, graph-timed back to back on rotating cold weights
(qwen38_kernels.sweep's timing), the same op each call. Every kernel lets its successor in at its
start (pdl.cuh) except the head's tiles kernel (after its main loop, session 13): with a grid under
one wave the successor's CTAs take the free CTA slots early, and where they land decides how evenly
the successor's grid spreads over the SMs. The question: what that costs each op.

    python benchmarks/lab/pdl_ab.py [--out FILE.md]
"""
from __future__ import annotations

import argparse
import sys

import torch

from qwen38_kernels import bench, knobs, sweep

SHAPES = ((34816, 5120), (12288, 5120), (6144, 5120), (5120, 17408))
ROWS = (1, 16, 32)
HEAD_V = (32768, 248320)


def _head_us(v: int, m: int, x: torch.Tensor) -> float:
    copies = bench.rotating_copies(lambda i: (torch.randn(v, 5120, device="cuda", dtype=torch.bfloat16),), 2 * v * 5120)
    return bench.time_calls(lambda w: torch.ops.qwen38.head_logits(x[:m], w), copies, repeats=5, min_calls=20)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    lines = [f"# PDL on / off, us per call ({bench.gpu_name()}, graph-timed, cold weights)", "",
             "| op | shape | rows | PDL on | PDL off | off / on |", "|---|---|---|---|---|---|"]

    def row(op, shape, m, on, off):
        lines.append(f"| {op} | {shape} | {m} | {on:.1f} | {off:.1f} | {off / on:.3f} |")
        print(op, shape, m, round(on, 1), round(off, 1), flush=True)

    x = torch.randn(32, 17408, device="cuda", dtype=torch.bfloat16)
    for op in ("nvfp4_linear", "fp8_block_linear"):
        fn = sweep._call(op)
        for n, k in SHAPES:
            weights = sweep.make_weights(op, n, k)
            xk = x[:, :k].contiguous()
            for m in ROWS:
                us = {}
                for pdl in ("1", "0"):
                    with knobs.override(QWEN38_PDL=pdl):
                        us[pdl] = sweep._time(fn, op, n, k, m, weights, xk)
                row(op, f"{n}x{k}", m, us["1"], us["0"])
            del weights
            torch.cuda.empty_cache()
    xh = x[:, :5120].contiguous()
    for v in HEAD_V:
        for m in (1, 32):
            us = {}
            for pdl in ("1", "0"):
                with knobs.override(QWEN38_PDL=pdl):
                    us[pdl] = _head_us(v, m, xh)
            row("head_logits", f"{v}x5120", m, us["1"], us["0"])
    text = "\n".join(lines) + "\n"
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
